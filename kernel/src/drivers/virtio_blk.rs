//! The virtio-blk disk: found at boot (virtio-mmio on microvm, PCI on q35, see
//! [`super::virtio::find`]) and driven by virtio-drivers' `VirtIOBlk`, one request at a time
//! behind the kernel-wide lock of [`with`]. The device's interrupt is not routed, so the CPU
//! that made a read or write request polls for its completion, halting between looks
//! ([`POLL_NAP_US`], doubling up to [`POLL_NAP_MAX_US`]) with interrupts on: under an emulator its vCPU leaves its host CPU to
//! QEMU's I/O thread and the other vCPUs meanwhile, and the TLB shootdowns and wake-ups other
//! CPUs send it are served at once. A flush (virtio-drivers has no split form for it) polls
//! without halting, interrupts on.
//!
//! A disk is an array of 512-byte sectors. Writes reach the host's image file only as the
//! device's write cache allows; [`Disk::flush`] asks the device to make everything written so
//! far durable (virtio's `FLUSH`, which QEMU turns into an `fdatasync` of the image).

use crate::arch::{cpu, time};
use crate::mm::dma::FjordHal;
use spin::Mutex;
use virtio_drivers::device::blk::{BlkReq, BlkResp, SECTOR_SIZE, VirtIOBlk};
use virtio_drivers::transport::SomeTransport;

/// Bytes per sector.
pub const SECTOR: usize = SECTOR_SIZE;

/// How long a CPU waiting for a read or write halts before its first look at the device;
/// each further halt is twice as long, up to [`POLL_NAP_MAX_US`].
pub const POLL_NAP_US: u64 = 25;

/// The longest halt between two looks at the device.
pub const POLL_NAP_MAX_US: u64 = 400;

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

/// Runs `f` on the disk (`DiskError::NoDisk` without one). Interrupts may come while it
/// waits for the device; no interrupt handler touches the disk.
pub fn with<R>(f: impl FnOnce(&mut Disk) -> Result<R, DiskError>) -> Result<R, DiskError> {
    match DISK.lock().as_mut() {
        Some(d) => f(d),
        None => Err(DiskError::NoDisk),
    }
}

/// Waits until the device has used request `token`: halts between looks (or until an
/// interrupt), interrupts on, then gives the CPU its periodic tick back. Spins
/// instead before the local APIC timer is calibrated (early boot).
fn wait_for(blk: &mut VirtIOBlk<FjordHal, SomeTransport<'static>>, token: u16) {
    if blk.peek_used() == Some(token) {
        return;
    }
    if !time::timer_ready() {
        while blk.peek_used() != Some(token) {
            core::hint::spin_loop();
        }
        return;
    }
    let mut nap_us = POLL_NAP_US;
    let interrupts = cpu::disable_interrupts();
    while blk.peek_used() != Some(token) {
        time::arm_oneshot(time::ns_to_ticks(nap_us * 1_000));
        nap_us = (nap_us * 2).min(POLL_NAP_MAX_US);
        // `sti; hlt`: a timer or an IPI that comes between the look and the halt ends it.
        cpu::enable_and_halt();
        cpu::disable_interrupts();
    }
    time::start_tick();
    if interrupts {
        cpu::enable_interrupts();
    }
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
        let (mut req, mut resp) = (BlkReq::default(), BlkResp::default());
        // SAFETY: `req`, `buf` and `resp` stay borrowed here, untouched, until the device has
        // used the request and `complete_read_blocks` takes the same three back.
        let token = unsafe { self.blk.read_blocks_nb(at, &mut req, buf, &mut resp) }
            .map_err(|_| DiskError::Device)?;
        wait_for(&mut self.blk, token);
        // SAFETY: the buffers `read_blocks_nb` was given, for its token.
        unsafe { self.blk.complete_read_blocks(token, &req, buf, &mut resp) }
            .map_err(|_| DiskError::Device)
    }

    /// Writes `data` (whole sectors) to the sectors from `sector`.
    pub fn write(&mut self, sector: u64, data: &[u8]) -> Result<(), DiskError> {
        self.check(sector, data.len())?;
        if self.read_only() {
            return Err(DiskError::ReadOnly);
        }
        let at = usize::try_from(sector).map_err(|_| DiskError::OutOfRange)?;
        let (mut req, mut resp) = (BlkReq::default(), BlkResp::default());
        // SAFETY: `req`, `data` and `resp` stay borrowed here, untouched, until the device has
        // used the request and `complete_write_blocks` takes the same three back.
        let token = unsafe { self.blk.write_blocks_nb(at, &mut req, data, &mut resp) }
            .map_err(|_| DiskError::Device)?;
        wait_for(&mut self.blk, token);
        // SAFETY: the buffers `write_blocks_nb` was given, for its token.
        unsafe { self.blk.complete_write_blocks(token, &req, data, &mut resp) }
            .map_err(|_| DiskError::Device)
    }

    /// Makes every sector written so far durable on the host.
    pub fn flush(&mut self) -> Result<(), DiskError> {
        self.blk.flush().map_err(|_| DiskError::Device)
    }
}
