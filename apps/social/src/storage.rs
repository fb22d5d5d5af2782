//! `social-storage`: posts (DeathStarBench's post-storage service).
//!
//! A post is kept in slot `social/post/<id mod SLOTS>`: the store holds the newest posts and
//! a new post evicts the one [`SLOTS`] ids older. Requests:
//! - `op=store&post=<id>&<fields>`: stores `post=<id>&<fields>`; response `stored=<id>`;
//! - `op=read&post=<id>`: response the stored record, or `post=<id>&missing=1` if evicted.

use core::fmt::Write;
use fjord_app_kit::store::Key;
use fjord_app_kit::{Env, args};
use fjord_libos::function::FnError;
use fjord_libos::kv::MAX_VALUE;
use fjord_libos::text::{Writer, field_u64};

/// Post slots in the store.
pub const SLOTS: u64 = 256;

fn slot(post: u64) -> Result<Key, FnError> {
    Key::new(format_args!("social/post/{}", post % SLOTS))
}

/// Serves one `social-storage` request.
pub fn serve<E: Env>(env: &mut E, req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let rec = args::record(req)?;
    let post = args::need_u64(rec, "post")?;
    let mut w = Writer::new(resp);
    match args::need(rec, "op")? {
        b"store" => {
            let value = rec.strip_prefix(b"op=store&").ok_or(FnError::BadRequest)?;
            env.kv_put(slot(post)?.as_bytes(), value)?;
            let _ = write!(w, "stored={post}");
        }
        b"read" => {
            let mut value = [0u8; MAX_VALUE];
            match env.kv_get(slot(post)?.as_bytes(), &mut value)? {
                Some(n) if n <= value.len() && field_u64(&value[..n], "post") == Some(post) => {
                    let _ = w.bytes(&value[..n]);
                }
                _ => {
                    let _ = write!(w, "post={post}&missing=1");
                }
            }
        }
        _ => return Err(FnError::BadRequest),
    }
    w.finish()
}
