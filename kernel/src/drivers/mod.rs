//! Device drivers: the kernel's side of the devices it uses, each behind a safe interface. The
//! `unsafe` that a device or virtio-drivers' API demands (mapping a transport, lending buffers to
//! a card) stays in this folder, as it does in `arch/` and `mm/`.
//!
//! - [`ivshmem`]: the emulated CXL memory, an ivshmem BAR shared by several VMs.
//! - [`virtio`]: finding a virtio device of a kind on either bus.
//! - [`virtio_blk`]: the virtio-blk disk, sectors read, written and flushed.
//! - [`virtio_net`]: the virtio-net card (virtio-mmio on microvm, PCI on q35) and its buffers,
//!   which the network stack (`crate::net`) drives through smoltcp.
//! - `virtio_mmio` (the `fjord_kernel` library's, host-tested): decoding probes of microvm's
//!   virtio-mmio slots.

pub mod ivshmem;
pub mod virtio;
pub mod virtio_blk;
pub mod virtio_net;
