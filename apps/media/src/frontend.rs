//! `media-frontend`: the entry of the media workload's operations (DeathStarBench's nginx
//! front end with its Lua handlers).
//!
//! - `op=upload_unique_id&req=<n>`: `media-unique-id` (sync), which uploads the new review id
//!   to `media-compose-review`; response its (`review_id=<id>&req=<n>&parts=<k>`);
//! - `op=read_page&movie=<id>&start=<i>&stop=<j>`: `media-page` (sync); response its;
//! - `op=compose_review&req=<n>&user=<name>&movie=<id>&rating=<0-10>&text=<form-encoded>`:
//!   the five uploads of a review, started at once (async): `media-unique-id` and four
//!   `media-compose-review` uploads; response `req=<n>&review=<id>` from the upload that
//!   completed the review, or `req=<n>&review=none` if none saw all five parts.

use core::fmt::Write;
use fjord_app_kit::{Bytes, Env, LARGE, SMALL, args};
use fjord_libos::function::FnError;
use fjord_libos::text::{Writer, field_u64};

use crate::compose::valid_part;

/// Serves one `media-frontend` request.
pub fn serve<E: Env>(env: &mut E, req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let rec = args::record(req)?;
    let mut w = Writer::new(resp);
    match args::need(rec, "op")? {
        b"upload_unique_id" => {
            let request = args::need_u64(rec, "req")?;
            let reply = env.call("media-unique-id", SMALL, |w| write!(w, "req={request}"))?;
            let _ = w.bytes(reply.bytes());
        }
        b"read_page" => {
            let movie = args::need_u64(rec, "movie")?;
            let (start, stop) = (args::need_u64(rec, "start")?, args::need_u64(rec, "stop")?);
            let reply = env.call("media-page", LARGE, |w| {
                write!(w, "movie={movie}&start={start}&stop={stop}")
            })?;
            let _ = w.bytes(reply.bytes());
        }
        b"compose_review" => {
            let request = args::need_u64(rec, "req")?;
            let mut values = [&b""[..]; 4];
            for (v, part) in values.iter_mut().zip(["user", "movie", "rating", "text"]) {
                *v = args::need(rec, part)?;
                if !valid_part(part, v) {
                    return Err(FnError::BadRequest);
                }
            }
            let id = env.start("media-unique-id", SMALL, |w| write!(w, "req={request}"))?;
            let mut uploads: [Option<E::Pending>; 4] = Default::default();
            for ((slot, part), value) in uploads
                .iter_mut()
                .zip(["user", "movie", "rating", "text"])
                .zip(values)
            {
                *slot = Some(env.start("media-compose-review", SMALL, |w| {
                    write!(w, "op=upload&req={request}&part={part}&value=")?;
                    w.bytes(value)
                })?);
            }
            let mut review = field_u64(env.wait(id)?.bytes(), "review");
            for p in uploads.into_iter().flatten() {
                review = field_u64(env.wait(p)?.bytes(), "review").or(review);
            }
            let _ = match review {
                Some(id) => write!(w, "req={request}&review={id}"),
                None => write!(w, "req={request}&review=none"),
            };
        }
        _ => return Err(FnError::BadRequest),
    }
    w.finish()
}
