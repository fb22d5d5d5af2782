//! Host-testable core of the Fjord kernel.
//!
//! Everything here is plain logic with no hardware access, so it builds both for the kernel
//! target and for the host, where `cargo test -p fjord-kernel` exercises it. Each file lives in
//! the folder of its concept, beside the kernel-only code that uses it (the binary's `main.rs`
//! declares those folders):
//!
//! - [`cmdline`], [`memmap`], [`madt`], [`cpio`] (`boot/`): the kernel command line, the boot
//!   memory map, the ACPI MADT parser that finds the CPUs, the initrd's `newc` archive reader;
//! - [`layout`], [`paging`], [`dirty_scan`], [`frame_bitmap`] (`mm/`): the virtual-memory
//!   layout, four-level page tables over an abstract physical memory, finding the pages of
//!   VMAs written since the last look, the frame allocator's bitmap;
//! - [`kv_store`] (`kv/`): the key-value namespaces behind the `kv_*` system calls;
//! - [`virtio_mmio`] (`drivers/`), [`steer`] (`net/`): decoding probes of the microvm board's virtio-mmio
//!   slots, steering received frames among the HTTP server's socket sets;
//! - [`socket_table`] (`sockets/`): the programs' TCP sockets over smoltcp (listen queues,
//!   connections, readiness);
//! - [`stats`] (`bench/`): medians and extremes of benchmark samples;
//! - [`ktest`] (`ktests/`): the in-kernel test descriptor and assertion macros;
//! - [`fnv`]: the FNV-1a hasher of the kernel's hash maps.
//!
//! Cargo features: none.
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]

extern crate alloc;

#[path = "boot/cmdline.rs"]
pub mod cmdline;
#[path = "boot/cpio.rs"]
pub mod cpio;
#[path = "mm/dirty_scan.rs"]
pub mod dirty_scan;
pub mod fnv;
#[path = "mm/frame_bitmap.rs"]
pub mod frame_bitmap;
#[path = "ktests/ktest.rs"]
pub mod ktest;
#[path = "kv/store.rs"]
pub mod kv_store;
#[path = "mm/layout.rs"]
pub mod layout;
#[path = "boot/madt.rs"]
pub mod madt;
#[path = "boot/memmap.rs"]
pub mod memmap;
#[path = "mm/paging.rs"]
pub mod paging;
#[path = "sockets/table.rs"]
pub mod socket_table;
#[path = "bench/stats.rs"]
pub mod stats;
#[path = "net/steer.rs"]
pub mod steer;
#[path = "drivers/virtio_mmio.rs"]
pub mod virtio_mmio;
