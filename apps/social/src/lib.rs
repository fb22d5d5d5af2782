//! The social workload: DeathStarBench's Social Network as nested Fjord functions.
//!
//! One module per function, each with a `serve` handler generic over the
//! [`Env`](fjord_app_kit::Env) (the binaries in `src/bin/` run them on Fjord); users and the
//! seed follow graph in [`data`]. Operations (entry `social-frontend`, see [`frontend`]):
//! - `compose_post`: frontend → compose → (unique-id ∥ text → user ∥ user), then
//!   (storage ∥ timeline → graph);
//! - `follow`: frontend → graph → (user ∥ user).
//!
//! See `apps/WORKLOADS.md` for the formats. Cargo features: none.
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]

pub mod compose;
pub mod data;
pub mod frontend;
pub mod graph;
pub mod storage;
pub mod text;
pub mod timeline;
pub mod unique_id;
pub mod user;

#[cfg(test)]
mod tests;

/// The workload's functions by name, with the env `E`: what the function modules run
/// (`src/bin/*.rs`, with the Fjord env), for systems that run them in one process per env
/// (host tests, the NightCore-like Linux baseline).
pub const fn routes<E: fjord_app_kit::Env>() -> [(&'static str, fjord_app_kit::Route<E>); 8] {
    [
        ("social-frontend", frontend::serve::<E>),
        ("social-compose", compose::serve::<E>),
        ("social-text", text::serve::<E>),
        ("social-unique-id", unique_id::serve::<E>),
        ("social-user", user::serve::<E>),
        ("social-graph", graph::serve::<E>),
        ("social-storage", storage::serve::<E>),
        ("social-timeline", timeline::serve::<E>),
    ]
}
