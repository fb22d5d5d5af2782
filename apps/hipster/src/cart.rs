//! `hipster-cart`: users' carts (Online Boutique's cart service, which keeps carts in Redis).
//!
//! A cart lives under `hipster/cart/<user>`; a user who never changed theirs has the seed
//! cart ([`SEED_CARTS`]) or none. Requests, each answered `user=<user>&items=<items>` (the
//! cart afterwards):
//! - `op=get&user=<user>`;
//! - `op=add&user=<user>&items=<id:n,...>`: adds the items (quantities capped at 99);
//! - `op=empty&user=<user>`.

use core::fmt::Write;
use fjord_app_kit::store::Key;
use fjord_app_kit::{Env, args};
use fjord_libos::function::FnError;
use fjord_libos::text::Writer;

use crate::data::SEED_CARTS;
use crate::items::Items;

fn key(user: &str) -> Result<Key, FnError> {
    Key::new(format_args!("hipster/cart/{user}"))
}

/// The cart of `user`.
pub fn load<E: Env>(env: &mut E, user: &str) -> Result<Items, FnError> {
    let mut buf = [0u8; 256];
    match env.kv_get(key(user)?.as_bytes(), &mut buf)? {
        Some(n) => buf.get(..n).and_then(Items::parse).ok_or(FnError::Failed),
        None => {
            let seed = SEED_CARTS
                .iter()
                .find(|(u, _)| *u == user)
                .map_or("", |c| c.1);
            Items::parse(seed.as_bytes()).ok_or(FnError::Failed)
        }
    }
}

fn save<E: Env>(env: &mut E, user: &str, items: &Items) -> Result<(), FnError> {
    let mut buf = [0u8; 256];
    let mut w = Writer::new(&mut buf);
    write!(w, "{items}").map_err(|_| FnError::Failed)?;
    env.kv_put(key(user)?.as_bytes(), w.written())
}

/// Serves one `hipster-cart` request.
pub fn serve<E: Env>(env: &mut E, req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let rec = args::record(req)?;
    let user = args::need_token(rec, "user")?;
    let items = match args::need(rec, "op")? {
        b"get" => load(env, user)?,
        b"add" => {
            let add = Items::parse(args::need(rec, "items")?).ok_or(FnError::BadRequest)?;
            let mut items = load(env, user)?;
            items.merge(&add).ok_or(FnError::BadRequest)?;
            save(env, user, &items)?;
            items
        }
        b"empty" => {
            let items = Items::default();
            save(env, user, &items)?;
            items
        }
        _ => return Err(FnError::BadRequest),
    };
    let mut w = Writer::new(resp);
    let _ = write!(w, "user={user}&items={items}");
    w.finish()
}
