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

/// The workload's functions: (name, handler), for in-process tests.
#[cfg(test)]
pub(crate) fn routes() -> [(&'static str, fjord_app_kit::test_env::Route); 8] {
    use fjord_app_kit::test_env::TestEnv;
    [
        ("social-frontend", frontend::serve::<TestEnv>),
        ("social-compose", compose::serve::<TestEnv>),
        ("social-text", text::serve::<TestEnv>),
        ("social-unique-id", unique_id::serve::<TestEnv>),
        ("social-user", user::serve::<TestEnv>),
        ("social-graph", graph::serve::<TestEnv>),
        ("social-storage", storage::serve::<TestEnv>),
        ("social-timeline", timeline::serve::<TestEnv>),
    ]
}
