//! The hotel workload: DeathStarBench's Hotel Reservation as nested Fjord functions.
//!
//! One module per function, each with a `serve` handler generic over the
//! [`Env`](fjord_app_kit::Env) (the binaries in `src/bin/` run them on Fjord); the shared
//! data and arithmetic in [`data`], [`date`] and [`coord`]. Operations (entry
//! `hotel-frontend`, see [`frontend`]):
//! - `search_nearby`: frontend → search → (geo, then rate); frontend → (reservation ∥ profile);
//! - `make_reservation`: frontend → user, then reservation.
//!
//! See `apps/WORKLOADS.md` for the formats. Cargo features: none.
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]

pub mod coord;
pub mod data;
pub mod date;
pub mod frontend;
pub mod geo;
pub mod profile;
pub mod rate;
pub mod reservation;
pub mod search;
pub mod user;

#[cfg(test)]
mod tests;

/// The workload's functions by name, with the env `E`: what the function modules run
/// (`src/bin/*.rs`, with the Fjord env), for systems that run them in one process per env
/// (host tests, the NightCore-like Linux baseline).
pub const fn routes<E: fjord_app_kit::Env>() -> [(&'static str, fjord_app_kit::Route<E>); 7] {
    [
        ("hotel-frontend", frontend::serve::<E>),
        ("hotel-search", search::serve::<E>),
        ("hotel-geo", geo::serve::<E>),
        ("hotel-rate", rate::serve::<E>),
        ("hotel-profile", profile::serve::<E>),
        ("hotel-user", user::serve::<E>),
        ("hotel-reservation", reservation::serve::<E>),
    ]
}
