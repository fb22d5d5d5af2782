//! The emulated CXL memory: QEMU's `ivshmem-plain` PCI device (vendor 0x1af4, device 0x1110),
//! whose BAR2 is a host shared-memory file that several VMs attach.
//!
//! [`find`] looks for it on PCI bus 0, programs BAR2 to [`CXL_PHYS`] (the same guest-physical
//! address on every node, rather than where the firmware put it), turns memory decoding on and
//! maps the region write-back at [`CXL_BASE`] (the same virtual address on every node).
//! [`SharedMemory`] is that mapping as a [`fjord_cxl::Region`]: byte copies, and 8-byte atomic
//! loads, stores and compare-exchanges, which the other nodes see because the host's memory is
//! coherent. On non-coherent CXL memory `persist` would also have to write back the cache lines
//! of the range; here it is a full fence.

use crate::mm::kernel_tables::map_cxl_region;
use core::sync::atomic::{AtomicU64, Ordering};
use fjord_kernel::layout::{CXL_BASE, CXL_PHYS, CXL_SIZE};
use virtio_drivers::transport::pci::bus::{BarInfo, Command, PciRoot};

/// Red Hat's PCI vendor id, which QEMU's ivshmem uses.
const VENDOR: u16 = 0x1af4;
/// `ivshmem` (plain and doorbell alike; plain has no interrupts).
const DEVICE: u16 = 0x1110;

/// Accesses outside the region that a caller asked for (refused: reads give zeros, writes
/// are dropped); a sign of a corrupt layout, exported as a metric.
pub static OUT_OF_RANGE: AtomicU64 = AtomicU64::new(0);

/// Why the region could not be set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IvshmemError {
    /// BAR2 is missing or not a 64-bit memory BAR.
    BadBar,
    /// The region is larger than the kernel's CXL window, or not page-sized.
    TooLarge(u64),
    /// Mapping it failed.
    Map,
}

/// The shared region, mapped.
#[derive(Clone, Copy, Debug)]
pub struct SharedMemory {
    base: u64,
    len: u64,
}

/// Finds the ivshmem device and maps its region; `None` if there is no such device, an error
/// if it is there but unusable.
pub fn find() -> Option<Result<SharedMemory, IvshmemError>> {
    let mut root = PciRoot::new(crate::arch::pci::ConfigPorts);
    let (df, _) = root
        .enumerate_bus(0)
        .find(|(_, info)| info.vendor_id == VENDOR && info.device_id == DEVICE)?;
    Some(setup(&mut root, df))
}

fn setup(
    root: &mut PciRoot<crate::arch::pci::ConfigPorts>,
    df: virtio_drivers::transport::pci::bus::DeviceFunction,
) -> Result<SharedMemory, IvshmemError> {
    let size = match root.bar_info(df, 2) {
        Ok(Some(BarInfo::Memory { size, .. })) => size,
        _ => return Err(IvshmemError::BadBar),
    };
    if size == 0 || size > CXL_SIZE || size % 4096 != 0 {
        return Err(IvshmemError::TooLarge(size));
    }
    let (_, cmd) = root.get_status_command(df);
    root.set_command(df, cmd - Command::MEMORY_SPACE);
    root.set_bar_64(df, 2, CXL_PHYS);
    root.set_command(df, cmd | Command::MEMORY_SPACE);
    let base = map_cxl_region(CXL_PHYS, size).map_err(|_| IvshmemError::Map)?;
    debug_assert_eq!(base, CXL_BASE);
    Ok(SharedMemory { base, len: size })
}

impl SharedMemory {
    /// The virtual address of the region's byte `offset`, if `len` bytes from there lie in it.
    fn at(&self, offset: u64, len: u64) -> Option<u64> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Some(self.base + offset),
            _ => {
                OUT_OF_RANGE.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// The aligned word at `offset`, as an atomic.
    fn word(&self, offset: u64) -> Option<&AtomicU64> {
        if !offset.is_multiple_of(8) {
            OUT_OF_RANGE.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let va = self.at(offset, 8)?;
        // SAFETY: `va` is 8-aligned and inside the region, which stays mapped read-write for
        // the kernel's lifetime (`map_cxl_region` maps it once and nothing unmaps it); every
        // access to shared words goes through atomics, here and (by the protocol of
        // `fjord_cxl`) on the other nodes.
        Some(unsafe { AtomicU64::from_ptr(va as *mut u64) })
    }
}

impl fjord_cxl::Region for SharedMemory {
    fn len(&self) -> u64 {
        self.len
    }

    fn read(&self, offset: u64, buf: &mut [u8]) {
        match self.at(offset, buf.len() as u64) {
            // SAFETY: the range is inside the mapped region (checked by `at`) and `buf` is a
            // distinct kernel buffer. Other nodes may write the range meanwhile: `fjord_cxl`
            // reads shared bytes only after their ready flag, and checks them by CRC.
            Some(va) => unsafe {
                core::ptr::copy_nonoverlapping(va as *const u8, buf.as_mut_ptr(), buf.len());
            },
            None => buf.fill(0),
        }
    }

    fn write(&self, offset: u64, data: &[u8]) {
        if let Some(va) = self.at(offset, data.len() as u64) {
            // SAFETY: the range is inside the mapped region (checked by `at`), which is
            // writable and holds no Rust object; `data` is a distinct kernel buffer.
            unsafe { core::ptr::copy_nonoverlapping(data.as_ptr(), va as *mut u8, data.len()) };
        }
    }

    fn load_u64(&self, offset: u64) -> u64 {
        self.word(offset).map_or(0, |w| w.load(Ordering::SeqCst))
    }

    fn store_u64(&self, offset: u64, value: u64) {
        if let Some(w) = self.word(offset) {
            w.store(value, Ordering::SeqCst);
        }
    }

    fn compare_exchange_u64(&self, offset: u64, current: u64, new: u64) -> Result<u64, u64> {
        match self.word(offset) {
            Some(w) => w.compare_exchange(current, new, Ordering::SeqCst, Ordering::SeqCst),
            // Refused like an out-of-range write (dropped), and reported as done so that no
            // retry loop spins on it; OUT_OF_RANGE counts it.
            None => Ok(current),
        }
    }

    fn persist(&self, _offset: u64, _len: u64) {
        // Coherent memory (one host): ordering is all that is needed.
        core::sync::atomic::fence(Ordering::SeqCst);
    }
}
