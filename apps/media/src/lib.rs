//! The media workload: DeathStarBench's Media Service as nested Fjord functions.
//!
//! Modules hold the functions' `serve` handlers, generic over the
//! [`Env`](fjord_app_kit::Env) (the binaries in `src/bin/` run them on Fjord); the movie,
//! cast, plot and seed review tables are in [`data`]. Operations (entry `media-frontend`, see
//! [`frontend`]):
//! - `upload_unique_id`: frontend → unique-id → compose-review;
//! - `read_page`: frontend → page → movie-info, then (cast-info × cast ∥ plot ∥
//!   movie-review → review-storage × reviews): 13 nested calls for a 5-member cast and 4
//!   reviews.
//!
//! See `apps/WORKLOADS.md` for the formats. Cargo features: none.
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]

pub mod compose;
pub mod data;
pub mod frontend;
pub mod info;
pub mod page;
pub mod reviews;

#[cfg(test)]
mod tests;

/// The workload's functions: (name, handler), for in-process tests.
#[cfg(test)]
pub(crate) fn routes() -> [(&'static str, fjord_app_kit::test_env::Route); 9] {
    use fjord_app_kit::test_env::TestEnv;
    [
        ("media-frontend", frontend::serve::<TestEnv>),
        ("media-unique-id", compose::unique_id::<TestEnv>),
        ("media-compose-review", compose::compose_review::<TestEnv>),
        ("media-page", page::serve::<TestEnv>),
        ("media-movie-info", info::movie_info::<TestEnv>),
        ("media-cast-info", info::cast_info::<TestEnv>),
        ("media-plot", info::plot_text::<TestEnv>),
        ("media-movie-review", reviews::movie_review::<TestEnv>),
        ("media-review-storage", reviews::storage::<TestEnv>),
    ]
}
