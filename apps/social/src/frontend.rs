//! `social-frontend`: the entry of the social workload's operations (DeathStarBench's nginx
//! front end with its Lua handlers).
//!
//! - `op=compose_post&user=<name>&text=<form-encoded text>`: `social-compose` (sync); response
//!   its (`post=<id>&user=<id>&mentions=<n>&urls=<n>&home=<n>`);
//! - `op=follow&user=<name>&followee=<name>`: `social-graph` `op=follow` (sync); response its
//!   (`follow=ok&...`).

use core::fmt::Write;
use fjord_app_kit::{Bytes, Env, SMALL, args, form};
use fjord_libos::function::FnError;
use fjord_libos::text::Writer;

use crate::text::MAX_TEXT;

/// Serves one `social-frontend` request.
pub fn serve<E: Env>(env: &mut E, req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let rec = args::record(req)?;
    let user = args::need_token(rec, "user")?;
    let reply = match args::need(rec, "op")? {
        b"compose_post" => {
            let text = args::need(rec, "text")?;
            if !form::is_encoded(text, MAX_TEXT) {
                return Err(FnError::BadRequest);
            }
            env.call("social-compose", SMALL, |w| {
                write!(w, "user={user}&text=")?;
                w.bytes(text)
            })?
        }
        b"follow" => {
            let followee = args::need_token(rec, "followee")?;
            env.call("social-graph", SMALL, |w| {
                write!(w, "op=follow&user={user}&followee={followee}")
            })?
        }
        _ => return Err(FnError::BadRequest),
    };
    let mut w = Writer::new(resp);
    let _ = w.bytes(reply.bytes());
    w.finish()
}
