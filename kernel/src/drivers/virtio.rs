//! Finding virtio devices: microvm's virtio-mmio slots, or PCI bus 0 on q35.
//!
//! microvm: the transports sit at fixed addresses (see `fjord_kernel::virtio_mmio` for why Fjord
//! probes them instead of reading the DSDT); the window of slots is mapped once. q35: SeaBIOS has
//! enumerated PCI and assigned BARs before the kernel runs; Fjord walks bus 0 through the legacy
//! configuration ports 0xCF8/0xCFC, enables memory decoding and bus mastering, and hands the
//! function to the crate's PCI transport.

use crate::mm::dma::FjordHal;
use crate::mm::kernel_tables::{self, MmioWindow};
use core::ptr::NonNull;
use fjord_kernel::virtio_mmio::{self, Slot};
use spin::Once;
use virtio_drivers::transport::mmio::{MmioTransport, VirtIOHeader};
use virtio_drivers::transport::pci::PciTransport;
use virtio_drivers::transport::pci::bus::{Command, PciRoot};
use virtio_drivers::transport::{DeviceType, SomeTransport};

/// A kind of virtio device the kernel drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A network card.
    Net,
    /// A block device (a disk).
    Block,
}

impl Kind {
    fn mmio_id(self) -> u32 {
        match self {
            Kind::Net => virtio_mmio::DEVICE_NET,
            Kind::Block => virtio_mmio::DEVICE_BLOCK,
        }
    }

    fn device_type(self) -> DeviceType {
        match self {
            Kind::Net => DeviceType::Network,
            Kind::Block => DeviceType::Block,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Net => "virtio-net",
            Kind::Block => "virtio-blk",
        }
    }
}

/// The transport of the first device of `kind` and the bus it is on (`virtio-mmio` or
/// `virtio-pci`); `None` if there is none.
pub fn find(kind: Kind) -> Option<(SomeTransport<'static>, &'static str)> {
    match find_mmio(kind) {
        Some(t) => Some((t.into(), "virtio-mmio")),
        None => Some((find_pci(kind)?.into(), "virtio-pci")),
    }
}

/// microvm's window of virtio-mmio slots, mapped on first use (`None` when it cannot be).
fn mmio_window() -> Option<&'static MmioWindow> {
    static WINDOW: Once<Option<MmioWindow>> = Once::new();
    WINDOW
        .call_once(|| {
            let len = virtio_mmio::SLOT_SIZE * virtio_mmio::SLOT_COUNT as u64;
            kernel_tables::map_mmio_window(virtio_mmio::MICROVM_BASE, len)
                .map_err(|e| log::warn!("virtio: mapping the virtio-mmio window: {e:?}"))
                .ok()
        })
        .as_ref()
}

/// Probes microvm's virtio-mmio slots for a device of `kind`.
fn find_mmio(kind: Kind) -> Option<MmioTransport<'static>> {
    let mapped = mmio_window()?;
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
        let Slot::Device { device_id, version } = found else {
            continue;
        };
        if device_id != kind.mmio_id() {
            continue;
        }
        log::debug!(
            "{}: virtio-mmio slot {i} at {:#x} (transport v{version})",
            kind.name(),
            virtio_mmio::slot_address(i)
        );
        let header = NonNull::new(slot as *mut VirtIOHeader)?;
        // SAFETY: `slot` maps a whole virtio-mmio transport (registers and config space,
        // `SLOT_SIZE` bytes) for the kernel's lifetime, and only the driver of the one device
        // behind it uses this slot (each kind is found once, at boot).
        match unsafe { MmioTransport::new(header, virtio_mmio::SLOT_SIZE as usize) } {
            Ok(t) => return Some(t),
            Err(e) => log::warn!("{}: virtio-mmio slot {i}: {e:?}", kind.name()),
        }
    }
    None
}

/// Walks PCI bus 0 for a virtio function of `kind`.
fn find_pci(kind: Kind) -> Option<PciTransport> {
    let mut root = PciRoot::new(crate::arch::pci::ConfigPorts);
    let found = root.enumerate_bus(0).find(|(_, info)| {
        virtio_drivers::transport::pci::virtio_device_type(info) == Some(kind.device_type())
    });
    let (df, info) = found?;
    log::debug!("{}: PCI {df}: {info}", kind.name());
    let (_, cmd) = root.get_status_command(df);
    root.set_command(df, cmd | Command::MEMORY_SPACE | Command::BUS_MASTER);
    match PciTransport::new::<FjordHal, _>(&mut root, df) {
        Ok(t) => Some(t),
        Err(e) => {
            log::warn!("{}: PCI {df}: {e:?}", kind.name());
            None
        }
    }
}
