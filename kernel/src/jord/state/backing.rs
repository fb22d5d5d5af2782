//! The frames behind each VMA and which of its pages have been initialised.

use super::*;

/// Which pages of a backing have been initialised: one bit per page, in place for VMAs of up
/// to 64 pages (almost all of them), on the heap beyond.
pub(super) enum InitBits {
    Inline(u64),
    Heap(Vec<u64>),
}

impl InitBits {
    /// The bits, 64 pages a word (bit `i % 64` of word `i / 64` for page `i`).
    fn words(&self) -> &[u64] {
        match self {
            InitBits::Inline(w) => core::slice::from_ref(w),
            InitBits::Heap(ws) => ws,
        }
    }

    /// The word holding page `i`'s bit, and the bit (`i` within the backing's pages).
    fn bit_mut(&mut self, i: usize) -> (&mut u64, u64) {
        let b = 1u64 << (i % 64);
        match self {
            InitBits::Inline(word) => (word, b),
            InitBits::Heap(words) => (&mut words[i / 64], b),
        }
    }
}

/// The last stamp given to a set of initialised pages ([`Backing::stamp`]).
static STAMPS: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// A stamp no set of initialised pages had before (never 0).
fn next_stamp() -> u64 {
    STAMPS.fetch_add(1, core::sync::atomic::Ordering::Relaxed) + 1
}

/// The frames behind a VMA: one physically contiguous run, as Jord's VMA hardware translates a
/// VMA (every VMA but a μprocess's area), or frames taken page by page on first use from a
/// commitment made for the whole VMA (a μprocess's area: see [`Jord::mmap_area`]).
#[derive(Debug)]
pub(super) enum Store {
    Run(frames::FrameRun),
    Sparse(frames::SparseFrames),
}

impl Store {
    fn pages(&self) -> usize {
        match self {
            Store::Run(r) => r.pages(),
            Store::Sparse(s) => s.pages(),
        }
    }

    /// The frames, when they are one physically contiguous run.
    fn run(&self) -> Option<&frames::FrameRun> {
        match self {
            Store::Run(r) => Some(r),
            Store::Sparse(_) => None,
        }
    }

    /// [`Store::run`], to write.
    fn run_mut(&mut self) -> Option<&mut frames::FrameRun> {
        match self {
            Store::Run(r) => Some(r),
            Store::Sparse(_) => None,
        }
    }

    /// The frame of page `i`, if it has one (a run's always does).
    #[inline]
    pub(super) fn frame(&self, i: usize) -> Option<u64> {
        match self {
            Store::Run(r) => (i < r.pages()).then(|| r.phys() + i as u64 * PAGE_SIZE),
            Store::Sparse(s) => s.frame(i),
        }
    }

    /// [`frames::SparseFrames::replace`]; `None` for a run, whose frames are one block.
    pub(super) fn replace(&mut self, i: usize, pa: u64) -> Option<u64> {
        match self {
            Store::Run(_) => None,
            Store::Sparse(s) => s.replace(i, pa),
        }
    }

    pub(super) fn zero(&mut self, first: usize, count: usize) {
        match self {
            Store::Run(r) => r.zero(first, count),
            Store::Sparse(s) => s.zero(first, count),
        }
    }

    pub(super) fn write_at(&mut self, offset: usize, data: &[u8]) -> bool {
        match self {
            Store::Run(r) => r.write_at(offset, data),
            Store::Sparse(s) => s.write_at(offset, data),
        }
    }

    pub(super) fn read_at(&self, offset: usize, buf: &mut [u8]) -> bool {
        match self {
            Store::Run(r) => r.read_at(offset, buf),
            Store::Sparse(s) => s.read_at(offset, buf),
        }
    }

    pub(super) fn read_words<'o, const N: usize>(
        &self,
        offset: usize,
        out: &'o mut core::mem::MaybeUninit<[u64; N]>,
    ) -> &'o mut [u64; N] {
        match self {
            Store::Run(r) => r.read_words(offset, out),
            Store::Sparse(s) => s.read_words(offset, out),
        }
    }

    pub(super) fn write_words(&mut self, offset: usize, words: &[u64]) -> bool {
        match self {
            Store::Run(r) => r.write_words(offset, words),
            Store::Sparse(s) => s.write_words(offset, words),
        }
    }

    fn shrink(&mut self, keep: usize) {
        match self {
            Store::Run(r) => r.shrink(keep),
            Store::Sparse(s) => s.shrink(keep),
        }
    }

    pub(super) fn free(self) {
        match self {
            Store::Run(r) => r.free(),
            Store::Sparse(s) => s.free(),
        }
    }
}

/// The frames behind one VMA and which of its pages have been initialised. Pages are zeroed
/// on their first fill rather than at `mmap`, so memory a function never touches costs nothing.
/// `pages == 0` marks a VMA slot without backing.
pub struct Backing {
    pub(super) base: u64,
    /// The frames.
    pub(super) frames: Store,
    pub(super) pages: usize,
    initialised: InitBits,
    /// Stamp of the set of initialised pages: see [`Backing::stamp`].
    stamp: u64,
    /// Its first stamp: names this backing among every backing a VMA base ever had.
    serial: u64,
    /// The pager of the VMA, if it has one (see [`super::pager`]).
    pub(super) pager: Option<&'static dyn super::Pager>,
    /// Pages initialised now (each holds a frame of its own).
    resident: usize,
    /// The most pages initialised at once since the backing was made or emptied.
    peak: usize,
}

impl Backing {
    pub(super) const NONE: Backing = Backing {
        base: 0,
        frames: Store::Run(frames::FrameRun::EMPTY),
        pages: 0,
        initialised: InitBits::Inline(0),
        stamp: 0,
        serial: 0,
        pager: None,
        resident: 0,
        peak: 0,
    };

    pub(super) fn new(base: u64, frames: Store) -> Backing {
        let pages = frames.pages();
        let initialised = if pages <= 64 {
            InitBits::Inline(0)
        } else {
            InitBits::Heap(vec![0; pages.div_ceil(64)])
        };
        let stamp = next_stamp();
        Backing {
            base,
            frames,
            pages,
            initialised,
            stamp,
            serial: stamp,
            pager: None,
            resident: 0,
            peak: 0,
        }
    }

    /// A stamp of its set of initialised pages, unique to that set of this backing: it
    /// changes whenever the set does (it grows, and shrinks with a shrink or a discarded
    /// page), and no other backing's set has it. 0 for [`Backing::NONE`].
    pub fn stamp(&self) -> u64 {
        self.stamp
    }

    /// A number no other backing had (never 0): tells a VMA's frames from those of a later
    /// VMA at the same base.
    pub fn serial(&self) -> u64 {
        self.serial
    }

    /// Whether it holds the frames of the VMA based at `base`.
    #[inline]
    pub(super) fn backs(&self, base: u64) -> bool {
        self.pages != 0 && self.base == base
    }

    /// Its length in pages.
    pub fn pages(&self) -> usize {
        self.pages
    }

    /// The frames, when they are one physically contiguous run (every VMA but a μprocess's
    /// area).
    pub fn frames(&self) -> Option<&frames::FrameRun> {
        self.frames.run()
    }

    /// [`Backing::frames`], to write.
    pub fn frames_mut(&mut self) -> Option<&mut frames::FrameRun> {
        self.frames.run_mut()
    }

    /// The frame of page `i`, if it has one (a page of a μprocess's area gets its frame when
    /// first initialised).
    #[inline]
    pub fn frame_of(&self, i: usize) -> Option<u64> {
        self.frames.frame(i)
    }

    /// The frame of page `i` for a caller about to write all of it, marked initialised without
    /// being zeroed; `None` beyond the VMA.
    pub(super) fn frame_to_fill(&mut self, i: usize) -> Option<u64> {
        if i >= self.pages {
            return None;
        }
        let pa = match &mut self.frames {
            Store::Run(r) => r.phys() + i as u64 * PAGE_SIZE,
            Store::Sparse(s) => s.take(i)?,
        };
        self.set_initialised(i);
        Some(pa)
    }

    /// Zeroes page `i` unless it was initialised before; marks it initialised.
    pub(super) fn initialise(&mut self, i: usize) {
        if self.set_initialised(i) {
            self.frames.zero(i, 1);
        }
    }

    /// Marks page `i` initialised without zeroing it: for a caller about to write all of it.
    /// Whether it was not initialised before (it then counts as one more resident page).
    pub fn set_initialised(&mut self, i: usize) -> bool {
        if i >= self.pages {
            return false;
        }
        let (word, b) = self.initialised.bit_mut(i);
        if *word & b != 0 {
            return false;
        }
        *word |= b;
        self.stamp = next_stamp();
        self.resident += 1;
        self.peak = self.peak.max(self.resident);
        true
    }

    /// Pages initialised now: the frames it holds of its own.
    pub fn resident(&self) -> usize {
        self.resident
    }

    /// The most pages initialised at once since it was made or emptied
    /// ([`Backing::release_sparse`]): its high-water mark, as Linux's `VmHWM`.
    pub fn peak_resident(&self) -> usize {
        self.peak
    }

    /// Gives page `i`'s frame back to its commitment: the page reads as zero again, and its
    /// next use takes a frame anew. False (nothing changed) for a page never initialised or a
    /// VMA whose frames are one run. The leaves that map the frame are the caller's to clear.
    pub(super) fn discard(&mut self, i: usize) -> bool {
        if !self.is_initialised(i) {
            return false;
        }
        let Store::Sparse(s) = &mut self.frames else {
            return false;
        };
        if !s.give_back(i) {
            return false;
        }
        let (word, b) = self.initialised.bit_mut(i);
        *word &= !b;
        self.resident -= 1;
        self.stamp = next_stamp();
        true
    }

    /// The initialised bits, 64 pages a word (bit `i % 64` of word `i / 64` for page `i`).
    pub fn initialised_words(&self) -> &[u64] {
        self.initialised.words()
    }

    /// The initialised bits (as [`Backing::initialised_words`]) and the frames to write, when
    /// they are one run ([`Backing::frames`]).
    pub fn initialised_and_frames(&mut self) -> (&[u64], Option<&mut frames::FrameRun>) {
        (self.initialised.words(), self.frames.run_mut())
    }

    /// Whether page `i` has been initialised.
    pub fn is_initialised(&self, i: usize) -> bool {
        let (w, b) = (i / 64, 1u64 << (i % 64));
        let word = match &self.initialised {
            InitBits::Inline(word) => Some(*word),
            InitBits::Heap(words) => words.get(w).copied(),
        };
        i < self.pages && word.is_some_and(|word| word & b != 0)
    }

    /// The initialised pages, in order (one step per set bit, not per page).
    pub fn initialised_indices(&self) -> Vec<usize> {
        let mut v = Vec::new();
        for (w, &word) in self.initialised.words().iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                let i = w * 64 + bits.trailing_zeros() as usize;
                if i < self.pages {
                    v.push(i);
                }
                bits &= bits - 1;
            }
        }
        v
    }

    /// Zeroes every initialised page again (they stay initialised): what a request wrote is
    /// gone, and the pages it never touched still cost nothing.
    pub(super) fn rezero_initialised(&mut self) {
        let frames = &mut self.frames;
        for (w, &word) in self.initialised.words().iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                // One run of consecutive initialised pages: a single zeroing pass.
                let first = bits.trailing_zeros() as usize;
                let run = (bits >> first).trailing_ones() as usize;
                let page = w * 64 + first;
                frames.zero(page, run);
                bits &= !(((1u128 << run) - 1) << first) as u64;
            }
        }
    }

    /// Keeps the first `keep` pages and frees the frames beyond.
    pub(super) fn shrink(&mut self, keep: usize) {
        if keep < self.pages {
            self.frames.shrink(keep);
            self.pages = keep;
            self.stamp = next_stamp();
            self.resident = self.initialised_indices().len();
        }
    }

    /// Empties a μprocess's area ([`Store::Sparse`]) for the next μprocess of its program:
    /// its frames and their commitment go, no page is initialised, and it counts as new
    /// frames (a new serial). False (nothing changed) for frames in one run.
    pub(super) fn release_sparse(&mut self) -> bool {
        let Store::Sparse(s) = &mut self.frames else {
            return false;
        };
        s.release();
        match &mut self.initialised {
            InitBits::Inline(w) => *w = 0,
            InitBits::Heap(ws) => ws.fill(0),
        }
        (self.resident, self.peak) = (0, 0);
        self.stamp = next_stamp();
        self.serial = self.stamp;
        true
    }

    /// Commits the frames of an area emptied by [`Backing::release_sparse`] again.
    pub(super) fn recommit_sparse(&mut self) -> Result<(), Error> {
        match &mut self.frames {
            Store::Sparse(s) => s.recommit().map_err(|_| Error::NoMemory),
            Store::Run(_) => Ok(()),
        }
    }

    pub(super) fn initialise_all(&mut self) {
        if let InitBits::Inline(w) = self.initialised
            && self.pages <= 64
            && w == u64::MAX >> (64 - self.pages.max(1))
        {
            return;
        }
        for i in 0..self.pages {
            self.initialise(i);
        }
    }
}
