//! Finding the virtio-net card: virtio-mmio slots on microvm, PCI bus 0 on q35.
//!
//! microvm: the transports sit at fixed addresses (see `fjord_kernel::virtio_mmio` for why Fjord
//! probes them instead of reading the DSDT). q35: SeaBIOS has enumerated PCI and assigned BARs
//! before the kernel runs; Fjord walks bus 0 through the legacy configuration ports
//! 0xCF8/0xCFC, enables memory decoding and bus mastering, and hands the function to the
//! crate's PCI transport.

use crate::mm::dma::FjordHal;
use crate::mm::kernel_tables;
use core::ptr::NonNull;
use fjord_kernel::virtio_mmio::{self, Slot};
use virtio_drivers::device::net::VirtIONetRaw;
use virtio_drivers::transport::mmio::{MmioTransport, VirtIOHeader};
use virtio_drivers::transport::pci::PciTransport;
use virtio_drivers::transport::pci::bus::{Command, PciRoot};
use virtio_drivers::transport::{DeviceType, SomeTransport};

/// Descriptors per virtqueue: receive buffers posted, and frames in flight to the card (QEMU's
/// virtio-net queues hold 256).
pub const QUEUE_SIZE: usize = 256;
/// Bytes per receive or transmit buffer: an Ethernet frame plus the virtio-net header.
pub const BUFFER_LEN: usize = 2048;

/// The network card (its buffers are [`super::phy::NetDevice`]'s).
pub type Nic = VirtIONetRaw<FjordHal, SomeTransport<'static>, QUEUE_SIZE>;

/// Finds and initialises the first virtio-net card; `None` (after logging why) if there is none.
pub fn find() -> Option<(Nic, &'static str)> {
    let transport: SomeTransport<'static> = match find_mmio() {
        Some(t) => t.into(),
        None => find_pci()?.into(),
    };
    let bus = match transport {
        SomeTransport::Mmio(_) => "virtio-mmio",
        _ => "virtio-pci",
    };
    match VirtIONetRaw::new(transport) {
        Ok(nic) => Some((nic, bus)),
        Err(e) => {
            log::warn!("net: initialising the virtio-net card failed: {e:?}");
            None
        }
    }
}

/// Probes microvm's virtio-mmio slots for a network device.
fn find_mmio() -> Option<MmioTransport<'static>> {
    let window = virtio_mmio::SLOT_SIZE * virtio_mmio::SLOT_COUNT as u64;
    let mapped = match kernel_tables::map_mmio_window(virtio_mmio::MICROVM_BASE, window) {
        Ok(w) => w,
        Err(e) => {
            log::warn!("net: mapping the virtio-mmio window: {e:?}");
            return None;
        }
    };
    for i in virtio_mmio::probe_order() {
        let offset = virtio_mmio::SLOT_SIZE * i as u64;
        let slot = mapped.base() + offset;
        // Reading the identification registers has no side effects (an empty slot reads as
        // zero).
        let read = |reg: u64| mapped.read_u32(offset + reg).unwrap_or(0);
        let found = virtio_mmio::decode(
            read(virtio_mmio::reg::MAGIC),
            read(virtio_mmio::reg::VERSION),
            read(virtio_mmio::reg::DEVICE_ID),
        );
        if let Slot::Device { device_id, version } = found {
            log::debug!(
                "net: virtio-mmio slot {i} at {:#x}: device {device_id} (transport v{version})",
                virtio_mmio::slot_address(i)
            );
        }
        if !matches!(
            found,
            Slot::Device {
                device_id: virtio_mmio::DEVICE_NET,
                ..
            }
        ) {
            continue;
        }
        let header = NonNull::new(slot as *mut VirtIOHeader)?;
        // SAFETY: `slot` maps a whole virtio-mmio transport (registers and config space,
        // `SLOT_SIZE` bytes) for the kernel's lifetime, and no other driver uses this slot.
        match unsafe { MmioTransport::new(header, virtio_mmio::SLOT_SIZE as usize) } {
            Ok(t) => return Some(t),
            Err(e) => log::warn!("net: virtio-mmio slot {i}: {e:?}"),
        }
    }
    None
}

/// Walks PCI bus 0 for a virtio network function.
fn find_pci() -> Option<PciTransport> {
    let mut root = PciRoot::new(crate::arch::pci::ConfigPorts);
    let found = root.enumerate_bus(0).find(|(_, info)| {
        virtio_drivers::transport::pci::virtio_device_type(info) == Some(DeviceType::Network)
    });
    let (df, info) = found?;
    log::debug!("net: virtio-net at PCI {df}: {info}");
    let (_, cmd) = root.get_status_command(df);
    root.set_command(df, cmd | Command::MEMORY_SPACE | Command::BUS_MASTER);
    match PciTransport::new::<FjordHal, _>(&mut root, df) {
        Ok(t) => Some(t),
        Err(e) => {
            log::warn!("net: virtio-net at PCI {df}: {e:?}");
            None
        }
    }
}
