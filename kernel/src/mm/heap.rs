//! The kernel heap: a buddy allocator over contiguous frames reached through the direct map.

use buddy_system_allocator::LockedHeap;

#[global_allocator]
static HEAP: LockedHeap<32> = LockedHeap::empty();

/// Hands `[start, start + size)` (virtual, mapped read-write) to the heap.
pub fn init(start: u64, size: u64) {
    // SAFETY: the range is freshly allocated RAM, mapped and used by nothing else.
    unsafe { HEAP.lock().init(start as usize, size as usize) };
}

/// Bytes currently allocated from the heap.
pub fn used() -> usize {
    HEAP.lock().stats_alloc_actual()
}

/// Total bytes the heap manages.
pub fn total() -> usize {
    HEAP.lock().stats_total_bytes()
}
