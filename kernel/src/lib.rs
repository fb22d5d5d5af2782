//! Host-testable core of the Fjord kernel.
//!
//! Everything here is plain logic with no hardware access, so it builds both for the kernel
//! target and for the host, where `cargo test -p fjord-kernel` exercises it:
//!
//! - [`cmdline`]: the kernel command line and its options;
//! - [`layout`]: the documented virtual-memory layout;
//! - [`memmap`]: the boot memory map, normalised into page-aligned usable regions;
//! - [`frame_bitmap`]: the physical frame allocator's bitmap logic;
//! - [`held_back`]: revocations held back until a PD is loaded again;
//! - [`leaf_hints`]: per PD, the level-1 page table of its last leaf edit;
//! - [`paging`]: x86_64 four-level page tables over an abstract physical memory;
//! - [`madt`]: the ACPI MADT parser that finds the CPUs;
//! - [`cpio`]: the `newc` archive reader used for the initrd;
//! - [`kv_store`]: the bounded key-value store behind the `kv_get`/`kv_put` system calls;
//! - [`stats`]: medians and extremes of benchmark samples;
//! - [`virtio_mmio`]: decoding probes of the microvm board's virtio-mmio slots;
//! - [`ktest`]: the in-kernel test descriptor and assertion macros.
//!
//! Cargo features: none.
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod cmdline;
pub mod cpio;
pub mod fnv;
pub mod frame_bitmap;
pub mod held_back;
pub mod ktest;
pub mod kv_store;
pub mod layout;
pub mod leaf_hints;
pub mod madt;
pub mod memmap;
pub mod paging;
pub mod stats;
pub mod virtio_mmio;
