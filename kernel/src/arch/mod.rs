//! Hardware abstraction: the architecture-specific code the rest of the kernel calls.
//!
//! Only x86_64 exists today; a port adds a sibling folder and a `cfg` line here.

#[cfg(target_arch = "x86_64")]
#[path = "x86_64/mod.rs"]
mod amd64;

#[cfg(target_arch = "x86_64")]
pub use amd64::*;
