//! μFork for Fjord: fork inside one address space, with capability tags emulated in software.
//!
//! Nothing is implemented here yet; see `DESIGN.md` §5 for what this crate will hold
//! (μprocesses, the capability format, the tag source trait, the relocator).
//!
//! Cargo features: none.
#![no_std]
#![forbid(unsafe_code)]
