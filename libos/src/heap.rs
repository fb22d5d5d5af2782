//! The function heap: a global allocator over the heap region of the PD's instance VMA, so
//! functions can use `alloc` (`Vec`, `String`, `BTreeMap`, `format!`).
//!
//! A module's code is shared by every instance and may not hold writable statics, so the
//! allocator keeps its state in the instance itself: the executor writes a [`HEADER_BYTES`]-byte
//! header into the top of the instance's stack region (just below the memory boundary) and
//! points the thread pointer (the FS base) at it, as the x86-64 TLS ABI does. `fs:[0]` holds the
//! header's own address.
//!
//! Header words: `[0]` the header's address, `[1]` the next free byte of the heap (bump
//! pointer of blocks under a page, which grow up), `[2]` the end of the free middle (blocks of
//! a page or more grow down from the heap's end, so that they never share a page with small
//! ones), `[3]` the *init word* (the state a function's `init` built, see [`INIT_WORD`]),
//! `[4..32]` one free list per size class (16 bytes to 1 GiB, powers of two). A block is the
//! request rounded up to a power of two (at least 16 bytes, at least its alignment); a freed
//! block goes to its class's list and serves the next request of that class, and so do the
//! bytes a block's alignment skipped (split into the largest aligned blocks that fit). Each
//! invocation starts from a fresh heap (a new PD, or a reused one whose memory the kernel
//! zeroed and whose header it wrote back), so the heap lives exactly as long as one request:
//! nothing is ever returned to the kernel (a μprocess may give pages back with
//! [`crate::process::discard`]). When the heap is exhausted, allocation fails and Rust
//! reports it as a panic, which ends the invocation with
//! [`FnError::Panicked`](crate::function::FnError::Panicked).

use core::alloc::{GlobalAlloc, Layout};

/// Size of the allocator header below the memory boundary.
pub const HEADER_BYTES: u64 = 256;

/// Words of the header before the free lists.
const FIXED_WORDS: usize = 4;
/// Byte offset in the header of the free lists' heads ([`CLASSES`] words, one per size class;
/// each free block's first word links to the next): what μFork's `fork` walks for tags.
pub const FREE_LIST_HEADS: u64 = FIXED_WORDS as u64 * 8;
/// The header word holding what a function's `init` built: 0 before (or without) `init`,
/// [`INIT_PENDING`] while the executor asks for `init` to run, then the address of its state.
pub const INIT_WORD: usize = 3;
/// The init word's value when the executor enters a function to run its `init`.
pub const INIT_PENDING: u64 = u64::MAX;
/// Smallest block: 2^4 bytes.
const MIN_SHIFT: u32 = 4;
/// Number of size classes (2^4 .. 2^31 bytes).
pub const CLASSES: usize = (HEADER_BYTES / 8) as usize - FIXED_WORDS;
/// Blocks are placed at an alignment of their size up to this one (a page).
const MAX_NATURAL_ALIGN: usize = 4096;

/// The header as the executor lays it out for a heap of `heap_len` bytes starting at
/// `heap_base`, with the header itself at `header` (the words, in order).
pub const fn header_words(header: u64, heap_base: u64, heap_len: u64) -> [u64; 4] {
    [header, heap_base, heap_base + heap_len, 0]
}

/// The size class of a block for `layout`, or `None` when no class holds it.
fn class_of(layout: Layout) -> Option<usize> {
    let size = layout.size().max(layout.align()).max(1 << MIN_SHIFT);
    let block = size.checked_next_power_of_two()?;
    let class = (block.trailing_zeros() - MIN_SHIFT) as usize;
    (class < CLASSES).then_some(class)
}

/// A heap whose header is at a known address: the allocator's logic, independent of where the
/// header is found (the thread pointer in a function, any memory in tests).
pub struct Heap {
    header: *mut u64,
}

impl Heap {
    /// The heap whose header is at `header`.
    ///
    /// # Safety
    /// `header` must point to a header laid out as [`header_words`] describes (free lists
    /// zero at first), followed by nothing else, for a heap region that is this heap's alone.
    pub const unsafe fn at(header: *mut u64) -> Heap {
        Heap { header }
    }

    fn word(&self, i: usize) -> u64 {
        // SAFETY: `i` indexes the header (at most FIXED_WORDS + CLASSES words), valid per `at`.
        unsafe { self.header.add(i).read() }
    }

    fn set_word(&self, i: usize, v: u64) {
        // SAFETY: as in `word`.
        unsafe { self.header.add(i).write(v) }
    }

    /// A block for `layout`, or null when the heap is exhausted.
    pub fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some(class) = class_of(layout) else {
            return core::ptr::null_mut();
        };
        let block = 1usize << (class as u32 + MIN_SHIFT);
        let natural = block.min(MAX_NATURAL_ALIGN);
        // A recycled block is aligned to at least `natural`, so it serves any request whose
        // alignment is not above that.
        let head = self.word(FIXED_WORDS + class);
        if head != 0 && layout.align() <= natural {
            // SAFETY: a listed block is a free block of this class inside the heap; its first
            // word links to the next free block.
            let next = unsafe { (head as *const u64).read() };
            self.set_word(FIXED_WORDS + class, next);
            return head as *mut u8;
        }
        let align = natural.max(layout.align()) as u64;
        let (next, end) = (self.word(1), self.word(2));
        if block >= MAX_NATURAL_ALIGN {
            // A block of whole pages: from the top, down.
            let Some(start) = end.checked_sub(block as u64).map(|s| s & !(align - 1)) else {
                return core::ptr::null_mut();
            };
            if start < next {
                return core::ptr::null_mut();
            }
            self.set_word(2, start);
            self.list_gap(start + block as u64, end);
            return start as *mut u8;
        }
        let Some(start) = next.checked_next_multiple_of(align) else {
            return core::ptr::null_mut();
        };
        match start.checked_add(block as u64) {
            Some(stop) if stop <= end => {
                self.set_word(1, stop);
                self.list_gap(next, start);
                start as *mut u8
            }
            _ => core::ptr::null_mut(),
        }
    }

    /// Lists the bytes `[from, to)` a block's alignment skipped as free blocks, the largest
    /// each place allows (so each is aligned to its size), instead of losing them.
    fn list_gap(&self, mut from: u64, to: u64) {
        while to - from >= 1 << MIN_SHIFT {
            // The largest power of two `from` is aligned to that fits before `to`.
            let fits = 1u64 << (63 - (to - from).leading_zeros());
            let size = (1u64 << from.trailing_zeros()).min(fits);
            let class = (size.trailing_zeros() - MIN_SHIFT) as usize;
            if class >= CLASSES {
                return;
            }
            let head = self.word(FIXED_WORDS + class);
            // SAFETY: `[from, from + size)` lies in the heap, below the bump pointer, and no
            // block was handed out there; it is at least 16 bytes and aligned to 8.
            unsafe { (from as *mut u64).write(head) };
            self.set_word(FIXED_WORDS + class, from);
            from += size;
        }
    }

    /// Returns a block given by [`Heap::alloc`] with the same `layout`.
    ///
    /// # Safety
    /// `ptr` must come from [`Heap::alloc`] on this heap with `layout`, and not be used again.
    pub unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let Some(class) = class_of(layout) else {
            return;
        };
        let block = 1usize << (class as u32 + MIN_SHIFT);
        if layout.align() > block.min(MAX_NATURAL_ALIGN) {
            // Blocks aligned beyond a page are not recycled: every listed block of a class has
            // exactly the class's natural alignment.
            return;
        }
        let head = self.word(FIXED_WORDS + class);
        // SAFETY: the block is at least 16 bytes, aligned to 8, and no longer in use.
        unsafe { (ptr as *mut u64).write(head) };
        self.set_word(FIXED_WORDS + class, ptr as u64);
    }

    /// Resizes a block: in place when the new size needs the same class, otherwise by moving.
    ///
    /// # Safety
    /// As [`Heap::dealloc`] for `ptr` and `layout`; `new_size` must not overflow `isize` when
    /// rounded up to `layout.align()`.
    pub unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let Ok(new) = Layout::from_size_align(new_size, layout.align()) else {
            return core::ptr::null_mut();
        };
        if class_of(new).is_some() && class_of(new) == class_of(layout) {
            return ptr;
        }
        let moved = self.alloc(new);
        if !moved.is_null() {
            // SAFETY: both blocks are valid for the smaller size and do not overlap (the old
            // one is still in use).
            unsafe {
                core::ptr::copy_nonoverlapping(ptr, moved, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        moved
    }

    /// Bytes of the heap never handed out yet.
    pub fn untouched(&self) -> u64 {
        self.word(2).saturating_sub(self.word(1))
    }

    /// The init word (see [`INIT_WORD`]).
    pub fn init_word(&self) -> u64 {
        self.word(INIT_WORD)
    }

    /// Sets the init word.
    pub fn set_init_word(&self, v: u64) {
        self.set_word(INIT_WORD, v)
    }
}

/// The global allocator of function modules (installed by [`function!`](crate::function!)):
/// the [`Heap`] whose header the thread pointer names.
pub struct FunctionHeap;

#[cfg(target_arch = "x86_64")]
impl FunctionHeap {
    /// The heap of the running function (the header the thread pointer names).
    pub fn heap() -> Heap {
        let header: u64;
        // SAFETY: the executor points FS at the header, whose first word is its own address
        // (entry ABI); reading it has no other effect.
        unsafe {
            core::arch::asm!("mov {}, qword ptr fs:[0]", out(reg) header,
                options(nostack, readonly, preserves_flags));
        }
        // SAFETY: the executor laid the header out for this PD's heap (entry ABI).
        unsafe { Heap::at(header as *mut u64) }
    }
}

#[cfg(target_arch = "x86_64")]
// SAFETY: `Heap` hands out disjoint blocks of the PD's heap, aligned as asked, or null; a
// function runs on one CPU at a time, so there is no concurrent use.
unsafe impl GlobalAlloc for FunctionHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Self::heap().alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded from the caller's contract.
        unsafe { Self::heap().dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded from the caller's contract.
        unsafe { Self::heap().realloc(ptr, layout, new_size) }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec;
    use std::vec::Vec;

    /// A header followed by a heap of `heap` bytes, in one buffer.
    fn arena(heap: usize) -> (Vec<u64>, Heap) {
        let mut mem = vec![0u64; (HEADER_BYTES as usize + heap + 4096) / 8];
        let header = mem.as_mut_ptr();
        let base = (header as u64 + HEADER_BYTES).next_multiple_of(4096);
        let end = header as u64 + (mem.len() * 8) as u64;
        let words = header_words(header as u64, base, (end - base).min(heap as u64));
        for (i, w) in words.iter().enumerate() {
            mem[i] = *w;
        }
        // SAFETY: the header was just laid out; the buffer outlives the heap in each test.
        let h = unsafe { Heap::at(header) };
        (mem, h)
    }

    #[test]
    fn blocks_are_aligned_disjoint_and_recycled() {
        let (_mem, h) = arena(1 << 20);
        let mut live: Vec<(u64, usize, Layout)> = Vec::new();
        let mut freed: Vec<u64> = Vec::new();
        let mut reused = 0;
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for round in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if x.is_multiple_of(3) && !live.is_empty() {
                let (p, _, l) = live.swap_remove((x as usize / 3) % live.len());
                // SAFETY: p came from this heap with l.
                unsafe { h.dealloc(p as *mut u8, l) };
                freed.push(p);
                continue;
            }
            let size = 1 + (x >> 8) as usize % 700;
            let align = 1usize << ((x >> 20) % 7);
            let l = Layout::from_size_align(size, align).unwrap();
            let p = h.alloc(l) as u64;
            if p == 0 {
                continue;
            }
            assert_eq!(p % align as u64, 0, "round {round}");
            for &(q, qs, _) in &live {
                assert!(
                    p + size as u64 <= q || q + qs as u64 <= p,
                    "overlap in round {round}"
                );
            }
            reused += usize::from(freed.contains(&p));
            live.push((p, size, l));
        }
        assert!(reused > 100, "freed blocks are handed out again ({reused})");
        assert!(h.untouched() > 0, "the heap was not exhausted");
    }

    #[test]
    fn page_blocks_and_small_blocks_never_share_a_page() {
        let (_mem, h) = arena(256 * 1024);
        let small = Layout::from_size_align(1000, 8).unwrap();
        let page = Layout::from_size_align(4096, 1).unwrap();
        let (mut smalls, mut pages) = (Vec::new(), Vec::new());
        for _ in 0..24 {
            smalls.push(h.alloc(small) as u64);
            pages.push(h.alloc(page) as u64);
        }
        assert!(smalls.iter().chain(&pages).all(|&p| p != 0));
        let page_of = |p: u64| p / 4096;
        for &s in &smalls {
            assert!(pages.iter().all(|&p| page_of(p) != page_of(s)), "{s:#x}");
        }
        // The small blocks are packed: four 1 KiB blocks a page.
        let mut used: Vec<u64> = smalls.iter().map(|&p| page_of(p)).collect();
        used.dedup();
        assert_eq!(used.len(), 24 / 4);
        // Page blocks are page-aligned, from the top down.
        assert!(pages.iter().all(|p| p % 4096 == 0));
        assert!(pages.windows(2).all(|w| w[1] + 4096 == w[0]));
    }

    #[test]
    fn room_skipped_for_alignment_serves_later_small_blocks() {
        let (_mem, h) = arena(64 * 1024);
        let first = h.alloc(Layout::from_size_align(16, 8).unwrap()) as u64;
        let aligned = h.alloc(Layout::from_size_align(2048, 2048).unwrap()) as u64;
        assert_eq!(aligned, first + 2048);
        let left = h.untouched();
        // The bytes between: blocks of 16, 32, ..., 1024 bytes, each aligned to its size,
        // handed out before the heap grows.
        let mut got = Vec::new();
        for shift in (4..11).rev() {
            let l = Layout::from_size_align(1 << shift, 8).unwrap();
            let p = h.alloc(l) as u64;
            assert!(p > first && p + (1 << shift) <= aligned, "{p:#x}");
            assert_eq!(p % (1 << shift), 0);
            got.push((p, 1u64 << shift));
        }
        assert_eq!(
            h.untouched(),
            left,
            "no byte of the heap was taken for them"
        );
        got.sort_unstable();
        for w in got.windows(2) {
            assert!(w[0].0 + w[0].1 <= w[1].0, "disjoint");
        }
    }

    #[test]
    fn exhaustion_gives_null_and_free_makes_room() {
        let (_mem, h) = arena(4096);
        let l = Layout::from_size_align(1024, 8).unwrap();
        let blocks: Vec<*mut u8> = (0..4).map(|_| h.alloc(l)).collect();
        assert!(blocks.iter().all(|p| !p.is_null()));
        assert!(h.alloc(l).is_null());
        // SAFETY: blocks[2] came from this heap with l.
        unsafe { h.dealloc(blocks[2], l) };
        assert_eq!(h.alloc(l), blocks[2]);
        assert!(
            h.alloc(Layout::from_size_align(1 << 40, 8).unwrap())
                .is_null()
        );
    }

    #[test]
    fn realloc_stays_in_place_within_a_class_and_keeps_the_bytes() {
        let (_mem, h) = arena(16 * 1024);
        let l = Layout::from_size_align(40, 8).unwrap();
        let p = h.alloc(l);
        // SAFETY: p is a 64-byte block of this heap.
        unsafe {
            for i in 0..40 {
                p.add(i).write(i as u8);
            }
            assert_eq!(h.realloc(p, l, 60), p);
            let q = h.realloc(p, Layout::from_size_align(60, 8).unwrap(), 1000);
            assert_ne!(q, p);
            for i in 0..40 {
                assert_eq!(q.add(i).read(), i as u8);
            }
        }
    }
}
