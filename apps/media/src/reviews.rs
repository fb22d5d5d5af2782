//! `media-review-storage` and `media-movie-review`: reviews and each movie's list of them
//! (DeathStarBench's review-storage and movie-review services).
//!
//! A composed review is kept in slot `media/review/<id mod SLOTS>`; a movie's review ids,
//! newest first and at most [`PER_MOVIE`], under `media/movie-reviews/<movie>` (a movie
//! without a stored list has its seed reviews). Review records are
//! `review=<id>&movie=<id>&user=<name>&rating=<0-10>&text=<form-encoded text>`.
//!
//! `media-review-storage`:
//! - `op=read&review=<id>`: response the review's record, or nothing if it was evicted;
//! - `op=store&review=<id>&movie=..&user=..&rating=..&text=..`: response `stored=<id>`.
//!
//! `media-movie-review`:
//! - `op=read&movie=<id>&start=<i>&stop=<j>`: reads reviews `i..j` of the movie's list with
//!   one `media-review-storage` call per review, all started at once (async) and then
//!   awaited; response their records, one per line;
//! - `op=add&movie=<id>&review=<id>`: puts the review first in the movie's list; response
//!   `movie=<id>&reviews=<n>`.

use core::fmt::Write;
use fjord_app_kit::form::Encoded;
use fjord_app_kit::store::{self, Key};
use fjord_app_kit::{Bytes, Env, IdList, SMALL, args};
use fjord_libos::function::FnError;
use fjord_libos::kv::MAX_VALUE;
use fjord_libos::text::{Writer, field_u64};

use crate::data::{REVIEWS, movie, seed_review};

/// Review slots in the store.
pub const SLOTS: u64 = 128;
/// Reviews listed per movie.
pub const PER_MOVIE: usize = 16;
/// Most reviews one page request may read.
pub const MAX_PAGE: u64 = 8;

/// A movie's review list.
pub type ReviewList = IdList<PER_MOVIE>;

/// The seed reviews of `movie`, newest first.
pub fn seed_list(movie: u64) -> ReviewList {
    let mut list = ReviewList::new();
    for r in REVIEWS.iter().rev().filter(|r| r.movie == movie) {
        list.push(r.id);
    }
    list
}

fn slot(review: u64) -> Result<Key, FnError> {
    Key::new(format_args!("media/review/{}", review % SLOTS))
}

fn list_key(movie: u64) -> Result<Key, FnError> {
    Key::new(format_args!("media/movie-reviews/{movie}"))
}

/// Serves one `media-review-storage` request.
pub fn storage<E: Env>(env: &mut E, req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let rec = args::record(req)?;
    let id = args::need_u64(rec, "review")?;
    let mut w = Writer::new(resp);
    match args::need(rec, "op")? {
        b"read" => {
            if let Some(r) = seed_review(id) {
                let _ = write!(
                    w,
                    "review={}&movie={}&user={}&rating={}&text={}",
                    r.id,
                    r.movie,
                    r.user,
                    r.rating,
                    Encoded(r.text.as_bytes())
                );
                return w.finish();
            }
            let mut value = [0u8; MAX_VALUE];
            if let Some(n) = env.kv_get(slot(id)?.as_bytes(), &mut value)? {
                let value = value.get(..n).ok_or(FnError::Failed)?;
                if field_u64(value, "review") == Some(id) {
                    let _ = w.bytes(value);
                }
            }
        }
        b"store" => {
            let value = rec.strip_prefix(b"op=store&").ok_or(FnError::BadRequest)?;
            if seed_review(id).is_some() {
                return Err(FnError::BadRequest);
            }
            env.kv_put(slot(id)?.as_bytes(), value)?;
            let _ = write!(w, "stored={id}");
        }
        _ => return Err(FnError::BadRequest),
    }
    w.finish()
}

/// Serves one `media-movie-review` request.
pub fn movie_review<E: Env>(env: &mut E, req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let rec = args::record(req)?;
    let m = movie(args::need_u64(rec, "movie")?)
        .ok_or(FnError::BadRequest)?
        .id;
    let key = list_key(m)?;
    let mut list = store::get_list(env, &key)?.unwrap_or_else(|| seed_list(m));
    let mut w = Writer::new(resp);
    match args::need(rec, "op")? {
        b"read" => {
            let start = args::need_u64(rec, "start")?;
            let stop = args::need_u64(rec, "stop")?;
            if stop <= start || stop - start > MAX_PAGE {
                return Err(FnError::BadRequest);
            }
            let ids = list.as_slice();
            let range = (start as usize).min(ids.len())..(stop as usize).min(ids.len());
            let mut pending: [Option<E::Pending>; MAX_PAGE as usize] = Default::default();
            for (slot, &id) in pending.iter_mut().zip(&ids[range]) {
                *slot = Some(env.start("media-review-storage", SMALL, |w| {
                    write!(w, "op=read&review={id}")
                })?);
            }
            for p in pending.into_iter().flatten() {
                let reply = env.wait(p)?;
                if !reply.bytes().is_empty() {
                    let _ = w.bytes(reply.bytes());
                    let _ = writeln!(w);
                }
            }
        }
        b"add" => {
            list.push_front(args::need_u64(rec, "review")?);
            store::put_list(env, &key, &list)?;
            let _ = write!(w, "movie={m}&reviews={}", list.len());
        }
        _ => return Err(FnError::BadRequest),
    }
    w.finish()
}
