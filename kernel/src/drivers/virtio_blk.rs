//! The virtio-blk disk: found at boot (virtio-mmio on microvm, PCI on q35, see
//! [`super::virtio::find`]) and driven by virtio-drivers' `VirtIOBlk`, one request at a time
//! with the CPU polling for its completion, behind the kernel-wide lock of [`with`].
//!
//! A disk is an array of 512-byte sectors. Writes reach the host's image file only as the
//! device's write cache allows; [`Disk::flush`] asks the device to make everything written so
//! far durable (virtio's `FLUSH`, which QEMU turns into an `fdatasync` of the image).

use crate::mm::dma::FjordHal;
use spin::Mutex;
use virtio_drivers::device::blk::{SECTOR_SIZE, VirtIOBlk};
use virtio_drivers::transport::SomeTransport;

/// Bytes per sector.
pub const SECTOR: usize = SECTOR_SIZE;

/// Why a disk operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskError {
    /// The machine has no disk.
    NoDisk,
    /// The sectors asked for lie beyond the disk's end.
    OutOfRange,
    /// The buffer is not a whole number of sectors.
    NotSectors,
    /// The device is read-only.
    ReadOnly,
    /// The device reported an error.
    Device,
}

/// The disk, with its size.
pub struct Disk {
    blk: VirtIOBlk<FjordHal, SomeTransport<'static>>,
    sectors: u64,
}

static DISK: Mutex<Option<Disk>> = Mutex::new(None);

/// Finds the first virtio-blk device and keeps it as the machine's disk; its size and bus, or
/// `None` (logged) when there is none.
pub fn init() -> Option<(u64, &'static str)> {
    let (transport, bus) = super::virtio::find(super::virtio::Kind::Block)?;
    match VirtIOBlk::new(transport) {
        Ok(blk) => {
            let sectors = blk.capacity();
            let size = sectors * SECTOR as u64;
            *DISK.lock() = Some(Disk { blk, sectors });
            Some((size, bus))
        }
        Err(e) => {
            log::warn!("disk: initialising the virtio-blk device failed: {e:?}");
            None
        }
    }
}

/// Runs `f` on the disk, with interrupts off for its polling (`DiskError::NoDisk` without
/// one).
pub fn with<R>(f: impl FnOnce(&mut Disk) -> Result<R, DiskError>) -> Result<R, DiskError> {
    crate::arch::cpu::without_interrupts(|| match DISK.lock().as_mut() {
        Some(d) => f(d),
        None => Err(DiskError::NoDisk),
    })
}

impl Disk {
    /// Its size in sectors.
    pub fn sectors(&self) -> u64 {
        self.sectors
    }

    /// Whether the device refuses writes.
    pub fn read_only(&self) -> bool {
        self.blk.readonly()
    }

    fn check(&self, sector: u64, len: usize) -> Result<(), DiskError> {
        if len == 0 || !len.is_multiple_of(SECTOR) {
            return Err(DiskError::NotSectors);
        }
        let count = (len / SECTOR) as u64;
        match sector.checked_add(count) {
            Some(end) if end <= self.sectors => Ok(()),
            _ => Err(DiskError::OutOfRange),
        }
    }

    /// Reads the sectors from `sector` into `buf` (whole sectors).
    pub fn read(&mut self, sector: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        self.check(sector, buf.len())?;
        let at = usize::try_from(sector).map_err(|_| DiskError::OutOfRange)?;
        self.blk.read_blocks(at, buf).map_err(|_| DiskError::Device)
    }

    /// Writes `data` (whole sectors) to the sectors from `sector`.
    pub fn write(&mut self, sector: u64, data: &[u8]) -> Result<(), DiskError> {
        self.check(sector, data.len())?;
        if self.read_only() {
            return Err(DiskError::ReadOnly);
        }
        let at = usize::try_from(sector).map_err(|_| DiskError::OutOfRange)?;
        self.blk
            .write_blocks(at, data)
            .map_err(|_| DiskError::Device)
    }

    /// Makes every sector written so far durable on the host.
    pub fn flush(&mut self) -> Result<(), DiskError> {
        self.blk.flush().map_err(|_| DiskError::Device)
    }
}
