//! `media-unique-id` and `media-compose-review`: composing a review from its parts
//! (DeathStarBench's unique-id and compose-review services).
//!
//! In the original, a new review's parts are uploaded by five services (unique id, user,
//! movie id, text, rating) to compose-review, which collects them per request id in memcached
//! and, when the fifth arrives, stores the review and adds it to the movie's and the user's
//! review lists. Here each part is kept under `media/compose/<req mod SLOTS>/<part>` as
//! `req=<req>&value=<value>` (a later request with the same slot evicts an unfinished one).
//!
//! `media-unique-id`, request `req=<n>`: draws the review id ([`MACHINE_ID`] above a counter
//! under `media/counter/review`) and uploads it (sync call of `media-compose-review`);
//! response `review_id=<id>&` followed by compose-review's response.
//!
//! `media-compose-review`, request `op=upload&req=<n>&part=<part>&value=<value>` with part
//! `review_id` (a number), `user` (a token), `movie` (an id), `rating` (0..=10) or `text`
//! (form-encoded): response `req=<n>&parts=<k>` (the parts present), and when that makes
//! five, stores the review with `media-review-storage` and adds it to the movie's list with
//! `media-movie-review` (both started at once, async, then awaited), clears the parts and
//! appends `&review=<id>`.

use core::fmt::Write;
use fjord_app_kit::store::{Key, next_counter};
use fjord_app_kit::{Bytes, Env, SMALL, args, form};
use fjord_libos::function::FnError;
use fjord_libos::text::{Writer, field, field_u64, parse_u64};

use crate::data::movie;

/// The id of this "machine" (the high 16 bits of every review id).
pub const MACHINE_ID: u64 = 1;
/// Slots for reviews being composed.
pub const SLOTS: u64 = 64;
/// Longest review text, in decoded bytes.
pub const MAX_TEXT: usize = 256;
/// The parts of a review.
pub const PARTS: [&str; 5] = ["review_id", "user", "movie", "rating", "text"];

/// Serves one `media-unique-id` request.
pub fn unique_id<E: Env>(env: &mut E, req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let request = args::need_u64(args::record(req)?, "req")?;
    let n = next_counter(env, &Key::new(format_args!("media/counter/review"))?)?;
    let id = MACHINE_ID << 48 | (n & ((1 << 48) - 1));
    let reply = env.call("media-compose-review", SMALL, |w| {
        write!(w, "op=upload&req={request}&part=review_id&value={id}")
    })?;
    let mut w = Writer::new(resp);
    let _ = write!(w, "review_id={id}&");
    let _ = w.bytes(reply.bytes());
    w.finish()
}

/// Whether `value` is valid for `part`.
pub fn valid_part(part: &str, value: &[u8]) -> bool {
    match part {
        "review_id" => parse_u64(value).is_some(),
        "user" => args::is_token(value),
        "movie" => parse_u64(value).and_then(movie).is_some(),
        "rating" => parse_u64(value).is_some_and(|r| r <= 10),
        "text" => form::is_encoded(value, MAX_TEXT),
        _ => false,
    }
}

fn part_key(request: u64, part: &str) -> Result<Key, FnError> {
    Key::new(format_args!("media/compose/{}/{part}", request % SLOTS))
}

/// Serves one `media-compose-review` request.
pub fn compose_review<E: Env>(env: &mut E, req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let rec = args::record(req)?;
    if args::need(rec, "op")? != b"upload" {
        return Err(FnError::BadRequest);
    }
    let request = args::need_u64(rec, "req")?;
    let part = args::need_str(rec, "part")?;
    let value = args::need(rec, "value")?;
    if !valid_part(part, value) {
        return Err(FnError::BadRequest);
    }
    let mut stored = [0u8; 1024];
    let mut sw = Writer::new(&mut stored);
    let _ = write!(sw, "req={request}&value=");
    let _ = sw.bytes(value);
    env.kv_put(part_key(request, part)?.as_bytes(), sw.written())?;
    // Gather the parts present for this request.
    let mut parts = [[0u8; 1024]; PARTS.len()];
    let mut lens = [None; PARTS.len()];
    for (i, p) in PARTS.iter().enumerate() {
        if let Some(n) = env.kv_get(part_key(request, p)?.as_bytes(), &mut parts[i])? {
            let v = parts[i].get(..n).ok_or(FnError::Failed)?;
            if field_u64(v, "req") == Some(request) {
                lens[i] = Some(n);
            }
        }
    }
    let count = lens.iter().flatten().count();
    let mut w = Writer::new(resp);
    let _ = write!(w, "req={request}&parts={count}");
    if count < PARTS.len() {
        return w.finish();
    }
    let part = |i: usize| field(&parts[i][..lens[i].unwrap_or(0)], "value").ok_or(FnError::Failed);
    let (id, user, movie_id, rating, text) = (part(0)?, part(1)?, part(2)?, part(3)?, part(4)?);
    let store = env.start("media-review-storage", SMALL, |w| {
        w.write_str("op=store&review=")?;
        for (key, v) in [
            ("", id),
            ("&movie=", movie_id),
            ("&user=", user),
            ("&rating=", rating),
            ("&text=", text),
        ] {
            w.write_str(key)?;
            w.bytes(v)?;
        }
        Ok(())
    })?;
    let add = env.start("media-movie-review", SMALL, |w| {
        w.write_str("op=add&movie=")?;
        w.bytes(movie_id)?;
        w.write_str("&review=")?;
        w.bytes(id)
    })?;
    env.wait(store)?;
    env.wait(add)?;
    for p in PARTS {
        env.kv_put(part_key(request, p)?.as_bytes(), b"")?;
    }
    let _ = w.bytes(b"&review=");
    let _ = w.bytes(id);
    w.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_validated() {
        assert!(valid_part("review_id", b"123"));
        assert!(valid_part("movie", b"2") && !valid_part("movie", b"99"));
        assert!(valid_part("rating", b"10") && !valid_part("rating", b"11"));
        assert!(valid_part("user", b"user_1") && !valid_part("user", b"a b"));
        assert!(valid_part("text", b"Great+film%21") && !valid_part("text", b"%G1"));
        assert!(!valid_part("other", b"1"));
    }
}
