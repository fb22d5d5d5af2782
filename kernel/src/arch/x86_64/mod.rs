//! The x86_64 hardware abstraction layer: everything architecture-specific lives below here.
//!
//! The rest of the kernel uses this module's small surface (console, exit, CPU id, timer, IPIs,
//! user-mode entry) so that another architecture would only add a sibling folder.

pub mod apic;
pub mod boot;
pub mod cpu;
pub mod exit;
pub mod gdt;
pub mod metrics;
pub mod pci;
pub mod percpu;
pub mod pit;
pub mod platform;
pub mod pvh;
pub mod serial;
pub mod smp;
pub mod time;
pub mod trap;
pub mod user;
pub mod user_copy;
