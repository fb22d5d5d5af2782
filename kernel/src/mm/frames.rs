//! The kernel's physical frame allocator: one global [`FrameBitmap`] over all usable RAM.

use super::{DirectMap, phys_to_virt};
use fjord_kernel::frame_bitmap::{FrameBitmap, FrameError};
use fjord_kernel::layout::PAGE_SIZE;
use fjord_kernel::memmap::UsableMemory;
use fjord_kernel::paging::TableAllocator;
use spin::Mutex;

/// Most physical memory Fjord manages (16 GiB); RAM above this is ignored with a warning.
pub const MAX_PHYS: u64 = 16 << 30;
const WORDS: usize = (MAX_PHYS / PAGE_SIZE / 64) as usize;

static FRAMES: Mutex<FrameBitmap<[u64; WORDS]>> = Mutex::new(FrameBitmap::new([0; WORDS]));

/// Frames handed to the allocator at boot.
static TOTAL: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);

/// Hands every usable region to the allocator; returns the number of usable bytes.
pub fn init(mem: &UsableMemory) -> u64 {
    let mut f = FRAMES.lock();
    let mut added = 0u64;
    for r in mem.regions() {
        added += f.add_free_range(r.start, r.end) as u64 * PAGE_SIZE;
    }
    if mem.end() > MAX_PHYS {
        log::warn!("memory above {} GiB is not used", MAX_PHYS >> 30);
    }
    TOTAL.store(
        (added / PAGE_SIZE) as usize,
        core::sync::atomic::Ordering::Relaxed,
    );
    added
}

/// Allocates one frame (contents undefined).
pub fn alloc() -> Result<u64, FrameError> {
    FRAMES.lock().alloc()
}

/// Allocates one zeroed frame.
pub fn alloc_zeroed() -> Result<u64, FrameError> {
    let pa = alloc()?;
    zero(pa, 1);
    Ok(pa)
}

/// Allocates `count` contiguous frames aligned to `align` frames.
pub fn alloc_contiguous(count: usize, align: usize) -> Result<u64, FrameError> {
    FRAMES.lock().alloc_contiguous(count, align)
}

/// Frees one frame.
pub fn free(pa: u64) -> Result<(), FrameError> {
    FRAMES.lock().free(pa)
}

/// Frees `count` contiguous frames.
pub fn free_contiguous(pa: u64, count: usize) -> Result<(), FrameError> {
    FRAMES.lock().free_contiguous(pa, count)
}

/// Number of frames the allocator manages (free or not).
pub fn total_frames() -> usize {
    TOTAL.load(core::sync::atomic::Ordering::Relaxed)
}

/// Number of free frames.
pub fn free_frames() -> usize {
    FRAMES.lock().free_frames()
}

/// Zeroes `count` frames starting at `pa`.
pub fn zero(pa: u64, count: usize) {
    let p = phys_to_virt(pa) as *mut u8;
    // SAFETY: the frames were just allocated by the caller and are mapped at `p`.
    unsafe { core::ptr::write_bytes(p, 0, count * PAGE_SIZE as usize) };
}

/// Table allocator over the global frame pool (tables are zeroed).
pub struct KernelFrames;

impl TableAllocator for KernelFrames {
    fn alloc_table(&mut self) -> Option<u64> {
        alloc_zeroed().ok()
    }

    fn free_table(&mut self, table: u64) {
        if let Err(e) = free(table) {
            log::error!("freeing page table {table:#x}: {e:?}");
        }
    }
}

/// The physical-memory accessor to use with `PageTables`.
pub static DIRECT: DirectMap = DirectMap;
