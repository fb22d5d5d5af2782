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

/// The workload's functions: (name, handler), for in-process tests.
#[cfg(test)]
pub(crate) fn routes() -> [(&'static str, fjord_app_kit::test_env::Route); 7] {
    use fjord_app_kit::test_env::TestEnv;
    [
        ("hotel-frontend", frontend::serve::<TestEnv>),
        ("hotel-search", search::serve::<TestEnv>),
        ("hotel-geo", geo::serve::<TestEnv>),
        ("hotel-rate", rate::serve::<TestEnv>),
        ("hotel-profile", profile::serve::<TestEnv>),
        ("hotel-user", user::serve::<TestEnv>),
        ("hotel-reservation", reservation::serve::<TestEnv>),
    ]
}
