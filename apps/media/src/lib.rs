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

/// The workload's functions by name, with the env `E`: what the function modules run
/// (`src/bin/*.rs`, with the Fjord env), for systems that run them in one process per env
/// (host tests, the NightCore-like Linux baseline).
pub const fn routes<E: fjord_app_kit::Env>() -> [(&'static str, fjord_app_kit::Route<E>); 9] {
    [
        ("media-frontend", frontend::serve::<E>),
        ("media-unique-id", compose::unique_id::<E>),
        ("media-compose-review", compose::compose_review::<E>),
        ("media-page", page::serve::<E>),
        ("media-movie-info", info::movie_info::<E>),
        ("media-cast-info", info::cast_info::<E>),
        ("media-plot", info::plot_text::<E>),
        ("media-movie-review", reviews::movie_review::<E>),
        ("media-review-storage", reviews::storage::<E>),
    ]
}
