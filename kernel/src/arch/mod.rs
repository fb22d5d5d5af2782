//! Hardware abstraction: the architecture-specific code the rest of the kernel calls.
//!
//! The seam is the modules re-exported first: `cpu` (interrupts, CR3-style address-space
//! loads, features), `time` (the clock, deadlines, the tick), `smp` (CPUs, `run_on`, the idle
//! loop, TLB-shootdown IPIs), `percpu` (this CPU's index and running PD), `platform` (bringing
//! the machine up), `user` (ring-3 entry and the handlers of what it raises), `user_copy`
//! (fallible copies to and from ring-3 memory), `trap`, `pvh` (the boot information), `pci`
//! (configuration space), `exit`, `serial` and `metrics`. The rest (`apic`, `gdt`, `pit`,
//! `boot`) is x86_64's own: only the in-kernel tests and benchmarks of that hardware reach it
//! (`cargo xtask test` checks). Only x86_64 exists today; a port adds a sibling folder with the
//! same seam and a `cfg` line here.

#[cfg(target_arch = "x86_64")]
#[path = "x86_64/mod.rs"]
mod amd64;

#[cfg(target_arch = "x86_64")]
pub use amd64::{
    cpu, exit, metrics, pci, percpu, platform, pvh, serial, smp, time, trap, user, user_copy,
};

/// x86_64's local APIC, for the in-kernel tests and benchmarks of that hardware.
#[cfg(target_arch = "x86_64")]
pub use amd64::apic;
