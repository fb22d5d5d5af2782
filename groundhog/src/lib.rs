//! Groundhog request isolation for Fjord (Alzayat et al., *Groundhog: Efficient Request
//! Isolation in FaaS*): the pure logic the kernel calls, tested on the host.
//!
//! A function instance is snapshotted once, after its initialisation; between two requests
//! the kernel copies back exactly the pages the request dirtied (the page tables' dirty bits
//! say which) and puts back the snapshot's layout. This crate holds:
//!
//! - [`mode`]: the per-function Groundhog mode (`restore`, `none`, `fresh`);
//! - [`snapshot_index`]: which pages of a region a snapshot holds, and where;
//! - [`plan`]: from a set of dirtied pages to the copies and zero-fills that undo them,
//!   coalesced into runs;
//! - [`stats`]: restore metrics per function.
//!
//! No cargo features.

#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod mode;
pub mod plan;
pub mod snapshot_index;
pub mod stats;

pub use mode::GroundhogMode;
pub use plan::{Action, RestorePlan};
pub use snapshot_index::SnapshotIndex;
pub use stats::{RestoreReport, RestoreStats};
