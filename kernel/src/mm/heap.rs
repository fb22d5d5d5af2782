//! The kernel heap: talc over contiguous frames reached through the direct map.
//!
//! talc keeps segregated free lists with boundary tags, so allocation and freeing (with
//! coalescing) take constant time however fragmented the heap is. (A buddy allocator whose
//! free lists are scanned to find a block's buddy slowed every kernel path by a quarter once the
//! key-value store had scattered thousands of small blocks over the heap.)

use talc::{ErrOnOom, Span, Talc, Talck};

#[global_allocator]
static HEAP: Talck<spin::Mutex<()>, ErrOnOom> = Talc::new(ErrOnOom).lock();

/// Hands `[start, start + size)` (virtual, mapped read-write) to the heap.
pub fn init(start: u64, size: u64) {
    let span = Span::from_base_size(start as *mut u8, size as usize);
    // SAFETY: the range is freshly allocated RAM, mapped read-write and used by nothing else, and
    // stays mapped for the kernel's lifetime.
    let claimed = unsafe { HEAP.lock().claim(span) };
    if claimed.is_err() {
        panic!("heap: cannot claim {size} bytes at {start:#x}");
    }
}

/// Bytes currently allocated from the heap.
pub fn used() -> usize {
    HEAP.lock().get_counters().allocated_bytes
}

/// Total bytes the heap manages.
pub fn total() -> usize {
    HEAP.lock().get_counters().claimed_bytes
}
