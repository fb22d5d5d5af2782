//! Jord protection domains for Fjord: the VMA table, the PD table and the semantics of the
//! PrivLib operations (Jord, ISCA '25, §3.2 and §4.1–4.4), as pure `no_std` logic that the
//! kernel glue calls and that is tested on the host.
//!
//! Modules:
//! - [`size_class`]: power-of-two size classes from one page (4 KiB) to 4 GiB, and why there
//!   are no sub-page classes.
//! - [`vaddr`]: the `Top | SC | index | offset` address layout and its encode/decode.
//! - [`perm`]: R/W/X permissions. [`pd_id`]: PD ids (`cid`).
//! - [`vte`]: the 64-byte VMA table entry and its wire form.
//! - [`free_list`]: per-class free lists of VMA indices. [`overflow`]: overflow lists for VMAs
//!   with more than 20 sharers.
//! - [`vma_table`]: the plain-list VMA table, `f(SC, index)` and allocation.
//! - [`grant`]: the fault-fill lookup (the VLB refill).
//! - [`pd_table`]: live PDs, creators, per-PD ownership bookkeeping, the PD id free list.
//! - [`call`]: the `ccall`/`cexit`/`center` call state machine.
//! - [`shootdown`]: sets of page-table leaves to remove after a revocation.
//! - [`sharers`]: per-PD CPU sharer masks (the emulated VTD).
//! - [`privlib`]: the Table 1 API (`mmap`, `munmap`, `mprotect`, `pmove`, `pcopy`, `cget`,
//!   `cput`, `ccall`, `center`, `cexit`) with its checks, and the Jord_NI mode.
//! - [`error`]: typed errors and lookup faults.
//!
//! Cargo features: none. The crate needs `alloc` and nothing else.
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod call;
pub mod error;
pub mod free_list;
pub mod grant;
pub mod held_back;
pub mod leaf_hints;
pub mod overflow;
pub mod pd_id;
pub mod pd_table;
pub mod perm;
pub mod privlib;
pub mod sharers;
pub mod shootdown;
pub mod size_class;
pub mod vaddr;
pub mod vma_table;
pub mod vte;

pub use call::{CallState, Switch};
pub use error::{Error, Fault, Result};
pub use grant::Grant;
pub use pd_id::{MAX_PDS, PdId};
pub use pd_table::NO_TREE_LIMIT;
pub use perm::Perm;
pub use privlib::{MapFlags, PdIsolation, PrivLib, Reinstated, Revoked};
pub use sharers::{CpuMask, Sharers};
pub use shootdown::{Leaf, Shootdown, Target};
pub use size_class::SizeClass;
pub use vaddr::VmaId;
pub use vma_table::{TableConfig, VmaTable};
pub use vte::{PdPerm, VmaAttrs, Vte};
