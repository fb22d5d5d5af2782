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

/// Frames kept out of every commitment, for allocations that cannot wait (page tables): 4 MiB.
pub const COMMIT_RESERVE: usize = 1024;

/// Promises `count` frames to a caller that takes them later ([`alloc_committed`]).
pub fn commit(count: usize) -> Result<(), FrameError> {
    FRAMES.lock().commit(count, COMMIT_RESERVE)
}

/// Allocates one committed frame (contents undefined).
pub fn alloc_committed() -> Result<u64, FrameError> {
    FRAMES.lock().alloc_committed()
}

/// Frames promised and not yet taken.
pub fn committed_frames() -> usize {
    FRAMES.lock().committed()
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

/// Physically contiguous frames owned by the holder of this value (a VMA's backing), reached
/// through the direct map. Only [`FrameRun::alloc`] makes a non-empty run, and a run is neither
/// `Clone` nor `Copy`, so its frames belong to it alone until [`FrameRun::free`].
///
/// User mappings of the frames may exist (that is what a VMA's backing is for), and ring-3 code
/// may write them on another CPU while the kernel reads them. So the kernel never holds a Rust
/// reference into a run: it copies in and out ([`FrameRun::read_at`], [`FrameRun::write_at`]),
/// and a concurrent user write can only change the bytes copied, as it would on hardware.
#[derive(Debug)]
pub struct FrameRun {
    phys: u64,
    pages: usize,
}

impl FrameRun {
    /// A run of no frames.
    pub const EMPTY: FrameRun = FrameRun { phys: 0, pages: 0 };

    /// Allocates `pages` contiguous frames (contents undefined).
    pub fn alloc(pages: usize) -> Result<FrameRun, FrameError> {
        Ok(FrameRun {
            phys: alloc_contiguous(pages, 1)?,
            pages,
        })
    }

    /// The physical address of the first frame.
    pub fn phys(&self) -> u64 {
        self.phys
    }

    /// The number of frames.
    pub fn pages(&self) -> usize {
        self.pages
    }

    /// The run's length in bytes.
    fn bytes(&self) -> usize {
        self.pages * PAGE_SIZE as usize
    }

    /// Whether `[offset, offset + len)` lies in the run.
    fn covers(&self, offset: usize, len: usize) -> bool {
        offset
            .checked_add(len)
            .is_some_and(|end| end <= self.bytes())
    }

    /// Zeroes `count` frames from frame `first`; nothing beyond the run.
    pub fn zero(&mut self, first: usize, count: usize) {
        let count = count.min(self.pages.saturating_sub(first));
        if count > 0 {
            zero(self.phys + first as u64 * PAGE_SIZE, count);
        }
    }

    /// Copies `data` to byte `offset` of the run; false (nothing written) beyond its end.
    pub fn write_at(&mut self, offset: usize, data: &[u8]) -> bool {
        if !self.covers(offset, data.len()) {
            return false;
        }
        let dst = phys_to_virt(self.phys + offset as u64) as *mut u8;
        // SAFETY: the bytes lie in this run's frames, which it owns and the direct map maps;
        // no Rust reference to them exists (see the type's documentation).
        unsafe { core::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
        true
    }

    /// Copies bytes from byte `offset` of the run into `buf`; false (nothing read) beyond its
    /// end.
    pub fn read_at(&self, offset: usize, buf: &mut [u8]) -> bool {
        if !self.covers(offset, buf.len()) {
            return false;
        }
        let src = phys_to_virt(self.phys + offset as u64) as *const u8;
        // SAFETY: as for `write_at`.
        unsafe { core::ptr::copy_nonoverlapping(src, buf.as_mut_ptr(), buf.len()) };
        true
    }

    /// Copies the `N` words at byte `offset` of the run (8-aligned; native byte order, i.e.
    /// little-endian) into `out` and returns them, initialised; zeros beyond the run's end.
    pub fn read_words<'o, const N: usize>(
        &self,
        offset: usize,
        out: &'o mut core::mem::MaybeUninit<[u64; N]>,
    ) -> &'o mut [u64; N] {
        if !offset.is_multiple_of(8) || !self.covers(offset, N * 8) {
            return out.write([0; N]);
        }
        let src = phys_to_virt(self.phys + offset as u64) as *const u64;
        // SAFETY: as for `write_at`; the source is 8-aligned (the run is page-aligned) and the
        // destination is `N` words of `out`.
        unsafe { core::ptr::copy_nonoverlapping(src, out.as_mut_ptr().cast::<u64>(), N) };
        // SAFETY: the copy just initialised all `N` words of `out`.
        unsafe { out.assume_init_mut() }
    }

    /// Copies `words` (native byte order) to byte `offset` of the run (8-aligned); false (nothing
    /// written) beyond its end.
    pub fn write_words(&mut self, offset: usize, words: &[u64]) -> bool {
        if !offset.is_multiple_of(8) || !self.covers(offset, words.len() * 8) {
            return false;
        }
        let dst = phys_to_virt(self.phys + offset as u64) as *mut u64;
        // SAFETY: as for `write_at`; the destination is 8-aligned (the run is page-aligned).
        unsafe { core::ptr::copy_nonoverlapping(words.as_ptr(), dst, words.len()) };
        true
    }

    /// Copies frame `src_page` of `src` over this run's frame `page`, with one `rep movsq` of
    /// 512 words (the primitive the Linux checkpoint copies `cargo xtask bench` compares with
    /// use); false (nothing copied) when either frame is beyond its run. For the restores of
    /// single pages, where [`FrameRun::copy_from`]'s general checks would cost as much as a
    /// tenth of the copy.
    #[inline]
    pub fn copy_page(&mut self, page: usize, src: &FrameRun, src_page: usize) -> bool {
        if page >= self.pages || src_page >= src.pages {
            return false;
        }
        let dst = phys_to_virt(self.phys + page as u64 * PAGE_SIZE);
        let from = phys_to_virt(src.phys + src_page as u64 * PAGE_SIZE);
        // SAFETY: both frames lie in their runs, which the direct map maps; two runs never share
        // a frame (each owns its own), so they do not overlap; no Rust reference to them exists
        // (see the type's documentation).
        unsafe { crate::arch::cpu::copy_page(dst, from) };
        true
    }

    /// Copies `count` frames of `src` from its frame `src_first` over this run's frames from
    /// `first`; false (nothing copied) when either range leaves its run.
    pub fn copy_from(
        &mut self,
        first: usize,
        src: &FrameRun,
        src_first: usize,
        count: usize,
    ) -> bool {
        let page = PAGE_SIZE as usize;
        let (Some(off), Some(src_off), Some(len)) = (
            first.checked_mul(page),
            src_first.checked_mul(page),
            count.checked_mul(page),
        ) else {
            return false;
        };
        if !self.covers(off, len) || !src.covers(src_off, len) {
            return false;
        }
        let dst = phys_to_virt(self.phys + off as u64) as *mut u8;
        let from = phys_to_virt(src.phys + src_off as u64) as *const u8;
        // SAFETY: both ranges lie in their runs' frames, which the direct map maps; two runs
        // never share a frame (each owns its own), so the ranges do not overlap; no Rust
        // reference to them exists (see the type's documentation).
        unsafe { core::ptr::copy_nonoverlapping(from, dst, len) };
        true
    }

    /// Keeps the first `keep` frames and frees the rest.
    pub fn shrink(&mut self, keep: usize) {
        if keep < self.pages {
            let tail = self.phys + keep as u64 * PAGE_SIZE;
            if let Err(e) = free_contiguous(tail, self.pages - keep) {
                log::error!("freeing frames at {tail:#x}: {e:?}");
            }
            self.pages = keep;
        }
    }

    /// Gives the frames back to the allocator.
    pub fn free(self) {
        if self.pages > 0
            && let Err(e) = free_contiguous(self.phys, self.pages)
        {
            log::error!("freeing frames at {:#x}: {e:?}", self.phys);
        }
    }
}

/// Words per frame.
const FRAME_WORDS: usize = PAGE_SIZE as usize / 8;

/// Runs `f` on the words of frame `pa`, which the caller owns exclusively (as for
/// [`fill_frame_from`]'s destination), to change them where they are.
pub fn update_frame<R>(pa: u64, f: impl FnOnce(&mut [u64; FRAME_WORDS]) -> R) -> R {
    let words = phys_to_virt(pa) as *mut [u64; FRAME_WORDS];
    // SAFETY: `pa` is a whole, 4 KiB-aligned frame in the direct map that the caller owns
    // exclusively, so it may be borrowed mutably for this call.
    f(unsafe { &mut *words })
}

/// Fills the frame at `dst` from the frame at `src` (zeros for `None`), only from word `first`
/// on (the words below are left for `fill` to write), then runs `fill` on the frame's words in
/// place: a page copy that changes some words on the way (a μFork relocation) with one pass
/// over the source and none over a buffer.
///
/// `dst` must be a frame the caller owns and no one else reads or writes meanwhile (one it just
/// took for a page nobody maps yet), and `src` a frame other than `dst`.
pub fn fill_frame_from<R>(
    src: Option<u64>,
    dst: u64,
    first: usize,
    fill: impl FnOnce(&mut [u64; FRAME_WORDS]) -> R,
) -> R {
    let first = first.min(FRAME_WORDS);
    let to = phys_to_virt(dst) as *mut [u64; FRAME_WORDS];
    // SAFETY: `dst` is a whole, 4 KiB-aligned frame in the direct map that the caller owns
    // exclusively (see above), so it may be written and borrowed mutably for this call.
    let words = unsafe { &mut *to };
    match src {
        Some(src) => {
            let from = phys_to_virt(src) as *const u64;
            // SAFETY: `src` is a whole frame in the direct map, other than `dst`; the copy reads
            // its words `first..` and writes the same words of `dst`.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    from.add(first),
                    words[first..].as_mut_ptr(),
                    FRAME_WORDS - first,
                )
            };
        }
        None => words[first..].fill(0),
    }
    fill(words)
}

/// The frames of a VMA taken one page at a time on first use, from a commitment made for all
/// its pages when it was created: the backing of a μprocess's area, whose pages a program
/// mostly never touches. Like a [`FrameRun`], it owns its frames and the kernel only copies in
/// and out of them; a page never taken reads as zero.
#[derive(Debug)]
pub struct SparseFrames {
    pages: usize,
    /// Per 512 pages, the frame of each (0: not taken yet); a block of 512 is made on the
    /// first page taken in it.
    blocks: alloc::vec::Vec<Option<alloc::boxed::Box<[u64]>>>,
    /// Whether the pages not taken are committed: false once [`SparseFrames::release`]d,
    /// until [`SparseFrames::recommit`].
    committed: bool,
}

/// Pages per block of [`SparseFrames`].
const BLOCK: usize = 512;

impl SparseFrames {
    /// Commits `pages` frames for a VMA of that many pages, none taken yet.
    pub fn new(pages: usize) -> Result<SparseFrames, FrameError> {
        commit(pages)?;
        let mut blocks = alloc::vec::Vec::new();
        blocks.resize_with(pages.div_ceil(BLOCK), || None);
        Ok(SparseFrames {
            pages,
            blocks,
            committed: true,
        })
    }

    /// The number of pages.
    pub fn pages(&self) -> usize {
        self.pages
    }

    /// The frame of page `i`, if taken.
    #[inline]
    pub fn frame(&self, i: usize) -> Option<u64> {
        let block = self.blocks.get(i / BLOCK)?.as_ref()?;
        block.get(i % BLOCK).copied().filter(|&pa| pa != 0)
    }

    /// The frame of page `i`, taken from the commitment if it was not yet (contents undefined);
    /// `None` beyond the VMA.
    pub fn take(&mut self, i: usize) -> Option<u64> {
        if i >= self.pages || !self.committed {
            return None;
        }
        if let Some(pa) = self.frame(i) {
            return Some(pa);
        }
        let len = BLOCK.min(self.pages - i / BLOCK * BLOCK);
        let block =
            self.blocks[i / BLOCK].get_or_insert_with(|| alloc::vec![0; len].into_boxed_slice());
        let pa = match alloc_committed() {
            Ok(pa) => pa,
            Err(e) => {
                log::error!("a committed frame was not there: {e:?}");
                return None;
            }
        };
        block[i % BLOCK] = pa;
        Some(pa)
    }

    /// Puts frame `pa` in place of page `i`'s and returns the frame it held; `None` (nothing
    /// changed) when page `i` has none. For two VMAs exchanging one page's frames, each a frame
    /// it took: both keep one frame per page taken, so both commitments stay whole.
    pub fn replace(&mut self, i: usize, pa: u64) -> Option<u64> {
        let slot = self
            .blocks
            .get_mut(i / BLOCK)?
            .as_mut()?
            .get_mut(i % BLOCK)?;
        if *slot == 0 || pa == 0 {
            return None;
        }
        Some(core::mem::replace(slot, pa))
    }

    /// Frees the frame of page `i` back into the commitment (the page may be taken again, and
    /// reads as zero until it is); false when page `i` has none.
    pub fn give_back(&mut self, i: usize) -> bool {
        let Some(slot) = self
            .blocks
            .get_mut(i / BLOCK)
            .and_then(|b| b.as_mut())
            .and_then(|b| b.get_mut(i % BLOCK))
            .filter(|pa| **pa != 0)
        else {
            return false;
        };
        let pa = core::mem::replace(slot, 0);
        let mut f = FRAMES.lock();
        if let Err(e) = f.free(pa) {
            log::error!("freeing frame {pa:#x}: {e:?}");
            return false;
        }
        if self.committed {
            // The frame just freed is free and uncommitted: the promise cannot fail.
            let _ = f.commit(1, 0);
        }
        true
    }

    /// One page, as a run of one frame (never freed as a run).
    fn page(pa: u64) -> FrameRun {
        FrameRun { phys: pa, pages: 1 }
    }

    /// Zeroes `count` pages from page `first`, taking their frames; nothing beyond the VMA.
    pub fn zero(&mut self, first: usize, count: usize) {
        for i in first..(first + count).min(self.pages) {
            if let Some(pa) = self.take(i) {
                zero(pa, 1);
            }
        }
    }

    /// The pieces of `[offset, offset + len)` within pages of a VMA of `pages` pages: (page,
    /// offset in it, offset in the caller's buffer, length); `None` beyond the VMA.
    fn pieces(
        pages: usize,
        offset: usize,
        len: usize,
    ) -> Option<impl Iterator<Item = (usize, usize, usize, usize)>> {
        let page = PAGE_SIZE as usize;
        let end = offset.checked_add(len)?;
        if end > pages * page {
            return None;
        }
        let mut at = offset;
        Some(core::iter::from_fn(move || {
            if at >= end {
                return None;
            }
            let n = (page - at % page).min(end - at);
            let piece = (at / page, at % page, at - offset, n);
            at += n;
            Some(piece)
        }))
    }

    /// Copies `data` to byte `offset`, taking the frames of the pages it reaches; false
    /// (nothing written) beyond the VMA.
    pub fn write_at(&mut self, offset: usize, data: &[u8]) -> bool {
        let Some(pieces) = Self::pieces(self.pages, offset, data.len()) else {
            return false;
        };
        for (i, at, from, n) in pieces {
            if let Some(pa) = self.take(i) {
                Self::page(pa).write_at(at, &data[from..from + n]);
            }
        }
        true
    }

    /// Copies bytes from byte `offset` into `buf` (zeros from pages never taken); false
    /// (nothing read) beyond the VMA.
    pub fn read_at(&self, offset: usize, buf: &mut [u8]) -> bool {
        let Some(pieces) = Self::pieces(self.pages, offset, buf.len()) else {
            return false;
        };
        for (i, at, to, n) in pieces {
            match self.frame(i) {
                Some(pa) => {
                    Self::page(pa).read_at(at, &mut buf[to..to + n]);
                }
                None => buf[to..to + n].fill(0),
            }
        }
        true
    }

    /// [`FrameRun::read_words`] within one page (zeros from a page never taken or beyond).
    pub fn read_words<'o, const N: usize>(
        &self,
        offset: usize,
        out: &'o mut core::mem::MaybeUninit<[u64; N]>,
    ) -> &'o mut [u64; N] {
        let page = PAGE_SIZE as usize;
        match self.frame(offset / page) {
            Some(pa) => Self::page(pa).read_words(offset % page, out),
            None => out.write([0; N]),
        }
    }

    /// [`FrameRun::write_words`] within one page, taking its frame; false (nothing written)
    /// beyond the page or the VMA.
    pub fn write_words(&mut self, offset: usize, words: &[u64]) -> bool {
        let page = PAGE_SIZE as usize;
        match self.take(offset / page) {
            Some(pa) => Self::page(pa).write_words(offset % page, words),
            None => false,
        }
    }

    /// Keeps the first `keep` pages: frees the frames taken beyond and takes back the rest of
    /// their commitment (one pass over the blocks made, under one lock).
    pub fn shrink(&mut self, keep: usize) {
        if keep >= self.pages {
            return;
        }
        let mut f = FRAMES.lock();
        let freed = self.free_taken(keep, &mut f);
        if self.committed {
            f.uncommit(self.pages - keep - freed);
        }
        drop(f);
        self.pages = keep;
        self.blocks.truncate(keep.div_ceil(BLOCK));
    }

    /// Frees every frame taken and takes back the whole commitment, keeping the length: every
    /// page reads as zero again and none can be taken until [`SparseFrames::recommit`]. For an
    /// area kept between two μprocesses of a program.
    pub fn release(&mut self) {
        if !self.committed {
            return;
        }
        let mut f = FRAMES.lock();
        let freed = self.free_taken(0, &mut f);
        f.uncommit(self.pages - freed);
        drop(f);
        // One block (up to 2 MiB) is kept, emptied, for the next μprocess; more are freed
        // (outside the frames' lock: the kernel heap takes frames under its own), so that the
        // next release scans only the blocks the next μprocess made.
        if self.blocks.len() > 1 {
            self.blocks.iter_mut().for_each(|b| *b = None);
        }
        self.committed = false;
    }

    /// Gives the frames taken for pages `from..` back to `frames`, the allocator locked, and
    /// marks those pages not taken; how many there were.
    fn free_taken(&mut self, from: usize, frames: &mut FrameBitmap<[u64; WORDS]>) -> usize {
        let mut freed = 0;
        for (n, block) in self.blocks.iter_mut().enumerate() {
            let Some(block) = block else {
                continue;
            };
            let first = from.saturating_sub(n * BLOCK).min(block.len());
            for pa in block[first..].iter_mut().filter(|pa| **pa != 0) {
                if let Err(e) = frames.free(*pa) {
                    log::error!("freeing frame {:#x}: {e:?}", *pa);
                }
                *pa = 0;
                freed += 1;
            }
        }
        freed
    }

    /// Commits every page again after a [`SparseFrames::release`] (nothing if never
    /// released); [`FrameError::OutOfFrames`] (still released) when memory is short.
    pub fn recommit(&mut self) -> Result<(), FrameError> {
        if !self.committed {
            commit(self.pages)?;
            self.committed = true;
        }
        Ok(())
    }

    /// Gives the frames taken back to the allocator and takes back the rest of the commitment.
    pub fn free(mut self) {
        self.shrink(0);
    }
}
