//! `media-page`: a movie's page (DeathStarBench's page service `ReadPage`).
//!
//! Request `movie=<id>&start=<i>&stop=<j>`; response
//! ```text
//! movie=<id>&title=<text>&year=<n>&rating=<x.y>&votes=<n>
//! plot=<text>
//! cast=<name>&character=<text>&gender=<text>&intro=<text>     (one per cast member)
//! review=<id>&movie=<id>&user=<name>&rating=<n>&text=<form-encoded>   (reviews i..j)
//! ```
//! Calls: `media-movie-info` (sync: the rest needs its plot and cast ids), then one
//! `media-cast-info` per cast member, `media-plot` and `media-movie-review`, all started at
//! once (async) and then awaited.

use core::fmt::Write;
use fjord_app_kit::{Bytes, Env, LARGE, SMALL, args};
use fjord_libos::function::FnError;
use fjord_libos::text::{Writer, field, field_u64, lines};

/// Most cast members shown on a page.
pub const MAX_CAST: usize = 8;

/// Serves one `media-page` request.
pub fn serve<E: Env>(env: &mut E, req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let rec = args::record(req)?;
    let movie = args::need_u64(rec, "movie")?;
    let (start, stop) = (args::need_u64(rec, "start")?, args::need_u64(rec, "stop")?);
    let info = env.call("media-movie-info", SMALL, |w| write!(w, "movie={movie}"))?;
    let mut info_lines = lines(info.bytes());
    let head = info_lines.next().ok_or(FnError::Failed)?;
    let plot = field_u64(head, "plot").ok_or(FnError::Failed)?;
    let mut cast: [Option<(&[u8], E::Pending)>; MAX_CAST] = Default::default();
    for (slot, line) in cast.iter_mut().zip(info_lines) {
        let id = field_u64(line, "cast").ok_or(FnError::Failed)?;
        let character = field(line, "character").ok_or(FnError::Failed)?;
        *slot = Some((
            character,
            env.start("media-cast-info", SMALL, |w| write!(w, "cast={id}"))?,
        ));
    }
    let plot = env.start("media-plot", SMALL, |w| write!(w, "plot={plot}"))?;
    let reviews = env.start("media-movie-review", LARGE, |w| {
        write!(w, "op=read&movie={movie}&start={start}&stop={stop}")
    })?;
    let mut w = Writer::new(resp);
    let _ = write!(w, "movie={movie}&title=");
    let _ = w.bytes(field(head, "title").ok_or(FnError::Failed)?);
    for key in ["year", "rating", "votes"] {
        let _ = write!(w, "&{key}=");
        let _ = w.bytes(field(head, key).ok_or(FnError::Failed)?);
    }
    let _ = writeln!(w);
    let plot = env.wait(plot)?;
    let _ = w.bytes(b"plot=");
    let _ = w.bytes(field(plot.bytes(), "text").ok_or(FnError::Failed)?);
    let _ = writeln!(w);
    for (character, pending) in cast.into_iter().flatten() {
        let member = env.wait(pending)?;
        let m = member.bytes();
        let _ = w.bytes(b"cast=");
        let _ = w.bytes(field(m, "name").ok_or(FnError::Failed)?);
        let _ = w.bytes(b"&character=");
        let _ = w.bytes(character);
        for key in ["gender", "intro"] {
            let _ = write!(w, "&{key}=");
            let _ = w.bytes(field(m, key).ok_or(FnError::Failed)?);
        }
        let _ = writeln!(w);
    }
    let _ = w.bytes(env.wait(reviews)?.bytes());
    w.finish()
}
