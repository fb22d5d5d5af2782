//! μFork for Fjord: fork inside one address space, with capability tags emulated in software.
//!
//! Modules:
//! - [`area`]: a μprocess's contiguous, size-aligned area and the layout of its regions.
//!
//! Cargo features: none. The crate needs `alloc` and nothing else.
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod area;

pub use area::{Area, AreaError, AreaLayout, LayoutBuilder, PAGE_SIZE, Region};
