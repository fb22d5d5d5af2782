//! Shared helpers of the Fjord ports of the Jord paper's workloads (`apps/hotel`,
//! `apps/social`, `apps/media`, `apps/hipster`).
//!
//! Every function of those workloads is written once, generic over an [`Env`]: the nested calls
//! and key-value store it uses. On Fjord the [`Fjord`] env maps them to
//! [`fjord_libos::call`] and [`fjord_libos::kv`]; on the host the [`test_env::TestEnv`] runs a
//! whole workload in one process, so each operation's call graph is unit-tested end to end.
//!
//! - [`env`]: the [`Env`] trait and [`Fjord`];
//! - [`args`]: request validation and field accessors that answer `BadRequest`;
//! - [`idlist`]: fixed-capacity lists of ids, stored as `1,2,3`;
//! - [`store`]: keys, counters and id lists in the key-value store;
//! - [`form`]: `application/x-www-form-urlencoded` text values;
//! - [`hash`]: FNV-1a and base-62, for deterministic ids;
//! - [`test_env`] (feature `test-env`): the in-process env for host tests.
//!
//! Cargo features: `test-env` (links `std`; for dev-dependencies only).
#![cfg_attr(not(any(test, feature = "test-env")), no_std)]
#![forbid(unsafe_code)]

pub mod args;
pub mod env;
pub mod form;
pub mod hash;
pub mod idlist;
pub mod store;
#[cfg(any(test, feature = "test-env"))]
pub mod test_env;

pub use env::{Bytes, Env, Fjord, Route};
pub use idlist::IdList;
pub use store::Key;

/// ArgBuf size for a nested call with a small response (one page).
pub const SMALL: usize = 4096;
/// ArgBuf size for a nested call with a response of up to a few kilobytes.
pub const LARGE: usize = 8192;
