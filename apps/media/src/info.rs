//! The read-only services of the media workload: `media-movie-info`, `media-cast-info` and
//! `media-plot` (DeathStarBench's movie-info, cast-info and plot services, which read MongoDB
//! through memcached).
//!
//! - `media-movie-info`, request `movie=<id>`: response
//!   `movie=<id>&title=<text>&year=<n>&plot=<id>&rating=<x.y>&votes=<n>`, then one line
//!   `cast=<id>&character=<text>` per cast member;
//! - `media-cast-info`, request `cast=<id>`: response
//!   `cast=<id>&name=<text>&gender=<text>&intro=<text>`;
//! - `media-plot`, request `plot=<id>`: response `plot=<id>&text=<text>`.

use core::fmt::Write;
use fjord_app_kit::{Env, args};
use fjord_libos::function::FnError;
use fjord_libos::text::Writer;

use crate::data::{cast_member, movie, plot};

/// Serves one `media-movie-info` request.
pub fn movie_info<E: Env>(_env: &mut E, req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let m = movie(args::need_u64(args::record(req)?, "movie")?).ok_or(FnError::BadRequest)?;
    let mut w = Writer::new(resp);
    let _ = writeln!(
        w,
        "movie={}&title={}&year={}&plot={}&rating={}.{}&votes={}",
        m.id,
        m.title,
        m.year,
        m.plot,
        m.rating_x10 / 10,
        m.rating_x10 % 10,
        m.votes
    );
    for (id, character) in m.cast {
        let _ = writeln!(w, "cast={id}&character={character}");
    }
    w.finish()
}

/// Serves one `media-cast-info` request.
pub fn cast_info<E: Env>(_env: &mut E, req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let c = cast_member(args::need_u64(args::record(req)?, "cast")?).ok_or(FnError::BadRequest)?;
    let mut w = Writer::new(resp);
    let _ = write!(
        w,
        "cast={}&name={}&gender={}&intro={}",
        c.id, c.name, c.gender, c.intro
    );
    w.finish()
}

/// Serves one `media-plot` request.
pub fn plot_text<E: Env>(_env: &mut E, req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let id = args::need_u64(args::record(req)?, "plot")?;
    let text = plot(id).ok_or(FnError::BadRequest)?;
    let mut w = Writer::new(resp);
    let _ = write!(w, "plot={id}&text={text}");
    w.finish()
}

#[cfg(test)]
mod tests {
    use crate::data::*;

    #[test]
    fn tables_are_consistent() {
        for m in MOVIES {
            assert!(plot(m.plot).is_some());
            assert!(m.cast.iter().all(|&(c, _)| cast_member(c).is_some()));
        }
        for r in REVIEWS {
            assert!(movie(r.movie).is_some() && r.rating <= 10);
        }
        let texts = MOVIES
            .iter()
            .map(|m| m.title)
            .chain(CAST.iter().map(|c| c.intro));
        assert!(
            texts
                .chain(PLOTS.iter().map(|p| p.1))
                .all(|t| !t.contains(['&', '\n']))
        );
    }
}
