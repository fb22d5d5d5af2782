//! Pagers: owners of VMAs whose pages Jord does not provide by itself.
//!
//! A subsystem above Jord (μFork's lazy copies, `crate::ufork::lazy`) registers a [`Pager`] for
//! each VMA whose pages it provides or watches ([`Frames::set_pager`]). Jord calls it, under
//! Jord's lock, whenever a page of such a VMA is about to be mapped by a VLB miss, read or
//! written by the kernel, or freed. The pager answers through [`Frames`], Jord's view of frames
//! and leaves, which never calls a pager back: a pager is never re-entered, and its own lock
//! nests inside Jord's (lock order: Jord, then the pager).
//!
//! Leaves a pager revokes while settling a page may be cached by another CPU; the flushes they
//! owe are collected ([`Frames::owe`]) and finished by whoever releases Jord's lock after the
//! operation (the VLB-miss path, `cput`).

use super::*;

/// The words of one page.
pub type PageWords = [u64; (PAGE_SIZE / 8) as usize];

/// The owner of paged VMAs; every method runs under Jord's lock.
pub trait Pager: Sync {
    /// A VLB miss: an `access` to page `i` of the paged VMA at `base` by a PD the VMA table
    /// grants `perm`. Returns the frame to map and the leaf's rights, or `None` when nothing
    /// about the page is the pager's (Jord then maps the VMA's own frame).
    fn fill(
        &self,
        f: &mut Frames<'_>,
        base: u64,
        i: usize,
        access: Perm,
        perm: Perm,
    ) -> Option<(u64, Perm)>;
    /// Pages a VLB miss may map beside its own: for each bit `k` of `want`, page `first + k`
    /// of the VMA at `base`, into `out[k]` the frame and rights to map it with (from a PD the
    /// VMA table grants `perm`) when the VMA holds that page itself and nothing has to be
    /// copied or settled first; other pages stay `None` and take their own miss (all of
    /// them, unless the pager says otherwise).
    fn around(
        &self,
        _f: &mut Frames<'_>,
        _base: u64,
        _pages: (usize, u32),
        _perm: Perm,
        _out: &mut [Option<(u64, Perm)>; FAULT_AROUND],
    ) {
    }
    /// Page `i` of the VMA at `base` is about to be read by the kernel.
    fn before_read(&self, f: &mut Frames<'_>, base: u64, i: usize);
    /// Page `i` of the VMA at `base` is about to be written (by the kernel).
    fn before_write(&self, f: &mut Frames<'_>, base: u64, i: usize);
    /// Page `i` of the VMA at `base` is about to be discarded (its frame given back, its
    /// contents gone for its own PD): whatever other VMAs still need of it is provided first.
    /// By default, as before a write.
    fn before_discard(&self, f: &mut Frames<'_>, base: u64, i: usize) {
        self.before_write(f, base, i);
    }
    /// The VMA at `base` is about to be read or written as a whole, or to shrink.
    fn before_whole(&self, f: &mut Frames<'_>, base: u64);
    /// Pages of the VMA at `base` that count as held although Jord has not initialised them
    /// (they read as the pager says, not as zero).
    fn held(&self, base: u64) -> Vec<usize>;
    /// The VMA at `base` is about to lose its frames.
    fn detach(&self, f: &mut Frames<'_>, base: u64);
}

/// Jord's frames and leaves as a pager uses them: nothing here calls a pager.
pub struct Frames<'a>(&'a mut Jord);

impl Jord {
    /// The pager view of this state: what a subsystem that pages VMAs works through.
    pub fn frames(&mut self) -> Frames<'_> {
        Frames(self)
    }

    /// The pager of the VMA at `base`, if it has one.
    #[inline]
    pub(super) fn pager_of(&self, base: u64) -> Option<&'static dyn Pager> {
        if self.paged == 0 {
            return None;
        }
        let slot = self.slot_of(base)?;
        self.backing
            .get(slot)
            .filter(|b| b.backs(base))
            .and_then(|b| b.pager)
    }

    /// The flushes pagers owe since the last call (leaves revoked while settling a page that
    /// another CPU may cache); `None` when none are owed.
    #[inline]
    pub fn take_pager_flushes(&mut self) -> Option<Pending> {
        if self.pager_owed.is_empty() {
            None
        } else {
            Some(core::mem::take(&mut self.pager_owed))
        }
    }

    /// Lets the pager of the VMA at `base` see page `i` before the kernel reads it.
    pub(super) fn page_before_read(&mut self, base: u64, i: usize) {
        if let Some(p) = self.pager_of(base) {
            p.before_read(&mut self.frames(), base, i);
        }
    }

    /// Lets the pager of the VMA at `base` see page `i` before it is written.
    pub(super) fn page_before_write(&mut self, base: u64, i: usize) {
        if let Some(p) = self.pager_of(base) {
            p.before_write(&mut self.frames(), base, i);
        }
    }

    /// Lets the pager of the VMA at `base` see page `i` before it is discarded.
    pub(super) fn page_before_discard(&mut self, base: u64, i: usize) {
        if let Some(p) = self.pager_of(base) {
            p.before_discard(&mut self.frames(), base, i);
        }
    }

    /// Lets the pager of the VMA at `base` settle it before it is used as a whole.
    pub(super) fn vma_before_whole(&mut self, base: u64) {
        if let Some(p) = self.pager_of(base) {
            p.before_whole(&mut self.frames(), base);
        }
    }

    /// Has the pager of the VMA at `base` provide every page it still holds (nothing for a VMA
    /// without one); the flushes it owes are taken with [`Jord::take_pager_flushes`].
    pub fn settle_paged(&mut self, base: u64) {
        self.vma_before_whole(base);
    }

    /// Pages of the VMA at `base` its pager still holds instead of the VMA's own frames (0
    /// without a pager).
    pub fn pager_held(&self, base: u64) -> usize {
        self.pager_of(base).map_or(0, |p| p.held(base).len())
    }

    /// Tells the pager of the VMA at `base` that its frames go, and forgets it.
    pub(super) fn detach_pager(&mut self, base: u64) {
        if let Some(p) = self.pager_of(base) {
            p.detach(&mut self.frames(), base);
            self.frames().set_pager(base, None);
        }
    }

    /// The VLB miss of a paged VMA (see [`Pager::fill`]).
    #[inline]
    pub(in crate::jord) fn pager_fill(
        &mut self,
        base: u64,
        i: usize,
        access: Perm,
        perm: Perm,
    ) -> Option<(u64, Perm)> {
        let p = self.pager_of(base)?;
        p.fill(&mut self.frames(), base, i, access, perm)
    }
}

impl Jord {
    /// After a VLB miss at page `index` of the paged VMA at `base` was mapped in level-1 table
    /// `table` of root `root`, maps the other pages of the same aligned block of
    /// [`FAULT_AROUND`] pages (and the same table) that have no leaf, lie past the VMA's
    /// shared prefix, and that the pager lets go ([`Pager::around`]): a parent touching its
    /// memory again after a fork revoked its leaves takes one miss per block instead of one
    /// per page. Returns how many leaves it added.
    pub(in crate::jord) fn paged_fault_around(
        &mut self,
        (root, table): (u64, u64),
        base: u64,
        index: usize,
        perm: Perm,
    ) -> usize {
        let Some(p) = self.pager_of(base) else {
            return 0;
        };
        let Some(pages) = self.backing_mut(base).map(|b| b.pages) else {
            return 0;
        };
        let prefix = (self.shared_prefix_len(base) / PAGE_SIZE) as usize;
        let first = index & !(FAULT_AROUND - 1);
        let end = (first + FAULT_AROUND).min(pages);
        let region = (base + index as u64 * PAGE_SIZE) >> 21;
        let tables = PageTables::new(root, &DIRECT);
        let mut want = 0u32;
        for j in first.max(prefix)..end {
            let va = base + j as u64 * PAGE_SIZE;
            if j != index && va >> 21 == region && !tables.is_mapped_in_table(table, va) {
                want |= 1 << (j - first);
            }
        }
        if want == 0 {
            return 0;
        }
        let mut out = [None; FAULT_AROUND];
        p.around(&mut self.frames(), base, (first, want), perm, &mut out);
        let mut added = 0;
        for (k, leaf) in out.iter().enumerate() {
            if let &Some((pa, perm)) = leaf {
                // A page without a leaf is in no TLB: nothing to flush.
                let va = base + (first + k) as u64 * PAGE_SIZE;
                tables.install_in_table(table, va, pa, crate::jord::vlb::leaf_flags(perm));
                added += 1;
            }
        }
        self.stats.prefills += added as u64;
        added
    }
}

impl Frames<'_> {
    /// The generation of the Jord state (a pager's records of an older one are stale).
    pub fn generation(&self) -> u64 {
        self.0.generation
    }

    /// Makes `pager` the pager of the VMA at `base` (`None`: it has none any more); nothing for
    /// a VMA without frames.
    pub fn set_pager(&mut self, base: u64, pager: Option<&'static dyn Pager>) {
        let Some(b) = self.0.backing_mut(base) else {
            return;
        };
        let had = b.pager.is_some();
        b.pager = pager;
        match (had, pager.is_some()) {
            (false, true) => self.0.paged += 1,
            (true, false) => self.0.paged -= 1,
            _ => {}
        }
    }

    /// The serial of the frames of the VMA at `base` ([`Backing::serial`]; `None` without
    /// frames).
    pub fn serial(&mut self, base: u64) -> Option<u64> {
        self.0.backing_mut(base).map(|b| b.serial())
    }

    /// Pages of the VMA at `base` (`None` without frames).
    pub fn pages(&mut self, base: u64) -> Option<usize> {
        self.0.backing_mut(base).map(|b| b.pages)
    }

    /// Page `i` of the VMA at `base` as its frame holds it (zero for a page never initialised
    /// or beyond the VMA), written into `out`, which it returns.
    pub fn read_words<'o>(
        &mut self,
        base: u64,
        i: usize,
        out: &'o mut core::mem::MaybeUninit<PageWords>,
    ) -> &'o mut PageWords {
        match self.0.backing_mut(base) {
            Some(b) if b.is_initialised(i) => b.frames.read_words(i * PAGE_SIZE as usize, out),
            _ => out.write([0; (PAGE_SIZE / 8) as usize]),
        }
    }

    /// The frame holding page `i` of the VMA at `base`, if the page was ever initialised
    /// (`None`: it reads as zero).
    pub fn initialised_frame(&mut self, base: u64, i: usize) -> Option<u64> {
        let b = self.0.backing_mut(base)?;
        if b.is_initialised(i) {
            b.frame_of(i)
        } else {
            None
        }
    }

    /// Exchanges the frames holding page `i` of the VMAs at `a` and `b`, both initialised there
    /// and taken page by page (μprocess areas); false, nothing changed, otherwise. The leaves
    /// that map either frame are the caller's to fix.
    pub fn exchange(&mut self, a: u64, b: u64, i: usize) -> bool {
        let (Some(fa), Some(fb)) = (self.initialised_frame(a, i), self.initialised_frame(b, i))
        else {
            return false;
        };
        let mut put = |base: u64, pa: u64| {
            self.0
                .backing_mut(base)
                .and_then(|x| x.frames.replace(i, pa))
                .is_some()
        };
        if !put(a, fb) {
            return false;
        }
        if !put(b, fa) {
            put(a, fa);
            return false;
        }
        true
    }

    /// The frame of page `i` of the VMA at `base` for a caller about to write all of it, which
    /// counts as initialised from then on (it is not zeroed first); `None` beyond the VMA or
    /// for a VMA without frames.
    pub fn frame_to_fill(&mut self, base: u64, i: usize) -> Option<u64> {
        self.0.backing_mut(base)?.frame_to_fill(i)
    }

    /// Writes all of page `i` of the VMA at `base`, which counts as initialised from then on.
    pub fn write_words(&mut self, base: u64, i: usize, words: &PageWords) {
        if let Some(b) = self.0.backing_mut(base)
            && i < b.pages
        {
            b.set_initialised(i);
            b.frames.write_words(i * PAGE_SIZE as usize, words);
        }
    }

    /// The physical address of page `i` of the VMA at `base`, initialised (zeroed) first if it
    /// never was; `None` beyond the VMA or for a VMA without frames.
    pub fn frame(&mut self, base: u64, i: usize) -> Option<u64> {
        self.0.initialise_page(base, i).flatten()
    }

    /// The initialised bits of the VMA at `base`, 64 pages a word (bit `i % 64` of word
    /// `i / 64` for page `i`); empty without frames.
    pub fn initialised_bits(&mut self, base: u64) -> &[u64] {
        match self.0.backing_mut(base) {
            Some(b) => b.initialised_words(),
            None => &[],
        }
    }

    /// Clears `pd`'s leaves over a whole area of `len` bytes at `va`, freeing the level-1
    /// tables of every 2 MiB it covers (the PD's later misses there make new ones): cheaper
    /// than [`Frames::revoke`] for a large area. Returns the remote flushes owed.
    pub fn revoke_area(&mut self, pd: PdId, va: u64, len: u64) -> Pending {
        self.0.revoke_leaves_freeing(pd, va, len)
    }

    /// Clears `pd`'s leaves over `len` bytes at `va`; returns the remote flushes owed.
    pub fn revoke(&mut self, pd: PdId, va: u64, len: u64) -> Pending {
        self.0.revoke_leaves(pd, va, len)
    }

    /// Adds `p` to the flushes the pagers owe (finished once Jord's lock is released).
    pub fn owe(&mut self, p: Pending) {
        self.0.pager_owed.absorb(p);
    }

    /// Installs `pd`'s leaf `va` → `pa` with `perm` before it runs (no leaf there yet, so
    /// nothing to flush); returns whether it installed it.
    pub fn prefill(&mut self, pd: PdId, va: u64, pa: u64, perm: Perm) -> bool {
        let root = self.0.root_of(pd);
        let flags = crate::jord::vlb::leaf_flags(perm);
        let added = map_leaf(&mut self.0.leaf_hints, pd, root, va, pa, flags);
        if added {
            self.0.stats.prefills += 1;
        }
        added
    }

    /// Bytes at the start of the VMA at `base` in a shared prefix (never written).
    pub fn shared_prefix_len(&self, base: u64) -> u64 {
        self.0.shared_prefix_len(base)
    }
}
