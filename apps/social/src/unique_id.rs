//! `social-unique-id`: post ids (DeathStarBench's unique-id service).
//!
//! Request `kind=post`; response `id=<id>`. The original builds a 64-bit id from a timestamp,
//! the machine id and a per-millisecond counter; Fjord functions have no clock, so the id is
//! [`MACHINE_ID`] in the top 16 bits above a counter kept under `social/counter/post`.

use core::fmt::Write;
use fjord_app_kit::store::{Key, next_counter};
use fjord_app_kit::{Env, args};
use fjord_libos::function::FnError;
use fjord_libos::text::Writer;

/// The id of this "machine" (the high 16 bits of every id).
pub const MACHINE_ID: u64 = 1;

/// The post id for counter value `n`.
pub const fn post_id(n: u64) -> u64 {
    MACHINE_ID << 48 | (n & ((1 << 48) - 1))
}

/// Serves one `social-unique-id` request.
pub fn serve<E: Env>(env: &mut E, req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let rec = args::record(req)?;
    if args::need(rec, "kind")? != b"post" {
        return Err(FnError::BadRequest);
    }
    let n = next_counter(env, &Key::new(format_args!("social/counter/post"))?)?;
    let mut w = Writer::new(resp);
    let _ = write!(w, "id={}", post_id(n));
    w.finish()
}
