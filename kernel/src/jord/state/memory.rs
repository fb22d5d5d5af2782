//! A VMA's memory: allocating it with `mmap`, shrinking or freeing it with `munmap`, changing
//! rights with `mprotect`, `pcopy` and `revoke`, and the kernel's access to its frames.

use super::*;

impl Jord {
    /// Maps `code` as a new Global read-execute VMA owned by the kernel, shared by every PD;
    /// returns its base.
    pub fn map_code(&mut self, code: &[u8]) -> Result<u64, Error> {
        let global = MapFlags {
            global: true,
            privileged: false,
        };
        let base = self.mmap(PdId::KERNEL, code.len() as u64, Perm::RX, global)?;
        self.vma_write(base, 0, code)?;
        Ok(base)
    }

    /// The backing slot of the VMA based at `base` (whether or not it is backed).
    pub(super) fn slot_of(&self, base: u64) -> Option<usize> {
        let d = fjord_pd::vaddr::decode(base).ok()?;
        if d.offset != 0 {
            return None;
        }
        self.privlib.vmas().slot(d.vma)
    }

    pub(super) fn backing_mut(&mut self, base: u64) -> Option<&mut Backing> {
        let slot = self.slot_of(base)?;
        self.backing.get_mut(slot).filter(|b| b.backs(base))
    }

    /// Copies `data` to byte `offset` of the VMA at `base`, every page of the VMA initialised
    /// first (the kernel never exposes what the frames held before the VMA). [`Error::NotMapped`]
    /// for a VMA without frames, [`Error::InvalidArgs`] beyond its end.
    pub fn vma_write(&mut self, base: u64, offset: u64, data: &[u8]) -> Result<(), Error> {
        self.vma_before_whole(base);
        let b = self.backing_mut(base).ok_or(Error::NotMapped)?;
        b.initialise_all();
        let offset = usize::try_from(offset).map_err(|_| Error::InvalidArgs)?;
        if b.frames.write_at(offset, data) {
            Ok(())
        } else {
            Err(Error::InvalidArgs)
        }
    }

    /// Copies bytes from byte `offset` of the VMA at `base` into `buf`, as [`Jord::vma_write`].
    pub fn vma_read(&mut self, base: u64, offset: u64, buf: &mut [u8]) -> Result<(), Error> {
        self.vma_before_whole(base);
        let b = self.backing_mut(base).ok_or(Error::NotMapped)?;
        b.initialise_all();
        let offset = usize::try_from(offset).map_err(|_| Error::InvalidArgs)?;
        if b.frames.read_at(offset, buf) {
            Ok(())
        } else {
            Err(Error::InvalidArgs)
        }
    }

    /// The pages of the VMA at `base` that have been initialised (touched by a PD or written
    /// by the kernel); the others read as zero.
    pub fn initialised_pages(&self, base: u64) -> Vec<usize> {
        let Some(b) = self
            .slot_of(base)
            .and_then(|slot| self.backing.get(slot))
            .filter(|b| b.pages != 0 && b.base == base)
        else {
            return Vec::new();
        };
        let mut held = b.initialised_indices();
        // A paged VMA holds what its pager says too (a lazy fork's pages still its parent's).
        let paged = self
            .pager_of(base)
            .map(|p| p.held(base))
            .unwrap_or_default();
        if !paged.is_empty() {
            held.extend(paged);
            held.sort_unstable();
            held.dedup();
        }
        held
    }

    /// Copies page `index` of the VMA at `base` into `buf` (at most a page), initialising it
    /// first if it never was; a page of a shared prefix is read from the frames behind it.
    pub fn read_page(&mut self, base: u64, index: usize, buf: &mut [u8]) -> Result<(), Error> {
        if buf.len() <= PAGE_SIZE as usize && self.read_shared_page(base, index, buf).is_some() {
            return Ok(());
        }
        self.page_before_read(base, index);
        let b = self.backing_mut(base).ok_or(Error::NotMapped)?;
        if index >= b.pages || buf.len() > PAGE_SIZE as usize {
            return Err(Error::InvalidArgs);
        }
        b.initialise(index);
        b.frames.read_at(index * PAGE_SIZE as usize, buf);
        Ok(())
    }

    /// The word at byte `offset` (8-aligned) of the VMA at `base` as its PD sees it: a page its
    /// pager holds is settled first, a page never initialised reads as zero (and stays so);
    /// `None` beyond the VMA or in a shared prefix.
    pub fn read_word(&mut self, base: u64, offset: u64) -> Option<u64> {
        if !offset.is_multiple_of(8) {
            return None;
        }
        let index = usize::try_from(offset / PAGE_SIZE).ok()?;
        if self.in_shared_prefix(base, index) {
            return None;
        }
        self.page_before_read(base, index);
        let b = self.backing_mut(base)?;
        if index >= b.pages {
            return None;
        }
        if !b.is_initialised(index) {
            return Some(0);
        }
        let mut out = core::mem::MaybeUninit::<[u64; 1]>::uninit();
        Some(b.frames.read_words(offset as usize, &mut out)[0])
    }

    /// Copies `data` (at most a page) to page `index` of the VMA at `base`, which counts as
    /// initialised from then on (the rest of the page is zeroed the first time);
    /// [`Error::AccessDenied`] for a page of a shared prefix.
    pub fn write_page(&mut self, base: u64, index: usize, data: &[u8]) -> Result<(), Error> {
        if self.in_shared_prefix(base, index) {
            return Err(Error::AccessDenied);
        }
        self.page_before_write(base, index);
        let b = self.backing_mut(base).ok_or(Error::NotMapped)?;
        if index >= b.pages || data.len() > PAGE_SIZE as usize {
            return Err(Error::InvalidArgs);
        }
        b.initialise(index);
        b.frames.write_at(index * PAGE_SIZE as usize, data);
        Ok(())
    }

    /// The `len` bytes at byte `offset` of the VMA at `base`, as [`Jord::vma_read`].
    pub fn vma_bytes(&mut self, base: u64, offset: u64, len: usize) -> Result<Vec<u8>, Error> {
        let mut v = vec![0; len];
        self.vma_read(base, offset, &mut v)?;
        Ok(v)
    }

    /// Writes `words` at byte `offset` (8-aligned, within one page) of the VMA at `base`,
    /// initialising (zeroing) only that page first: how the executor lays out a PD's heap
    /// header without touching the rest of its memory.
    pub fn write_words(&mut self, base: u64, offset: u64, words: &[u64]) -> Result<(), Error> {
        let bytes = words.len() as u64 * 8;
        let page = offset / PAGE_SIZE;
        if !offset.is_multiple_of(8) || (offset + bytes).div_ceil(PAGE_SIZE) > page + 1 {
            return Err(Error::InvalidArgs);
        }
        self.page_before_write(base, page as usize);
        let b = self.backing_mut(base).ok_or(Error::NotMapped)?;
        if page as usize >= b.pages {
            return Err(Error::InvalidArgs);
        }
        b.initialise(page as usize);
        for (i, w) in words.iter().enumerate() {
            b.frames.write_at(offset as usize + 8 * i, &w.to_le_bytes());
        }
        Ok(())
    }

    /// Limits the bytes `pd` may map with its own `mmap` calls (see [`Jord::charge`]).
    pub fn set_memory_limit(&mut self, pd: PdId, limit: u64) {
        if let Some(q) = self.quotas.get_mut(pd.index()) {
            *q = (0, limit);
        }
    }

    /// Charges `len` bytes (rounded up to pages) of a system-call `mmap` to `pd`'s quota;
    /// [`Error::NoMemory`] when it would exceed the limit.
    pub fn charge(&mut self, pd: PdId, len: u64) -> Result<(), Error> {
        let len = len.next_multiple_of(PAGE_SIZE);
        let q = self.quotas.get_mut(pd.index()).ok_or(Error::NoSuchPd)?;
        let used =
            q.0.checked_add(len)
                .filter(|&u| u <= q.1)
                .ok_or(Error::NoMemory)?;
        q.0 = used;
        Ok(())
    }

    /// Returns `len` bytes (rounded up to pages) to `pd`'s quota.
    pub fn uncharge(&mut self, pd: PdId, len: u64) {
        if let Some(q) = self.quotas.get_mut(pd.index()) {
            q.0 = q.0.saturating_sub(len.next_multiple_of(PAGE_SIZE));
        }
    }

    /// Length of the VMA based at `base`, rounded up to whole pages.
    pub fn vma_len(&self, base: u64) -> Result<u64, Error> {
        let (_, v) = self.privlib.vmas().resolve_base(base)?;
        Ok(v.len().next_multiple_of(PAGE_SIZE))
    }

    /// Initialises (zeroes on first use) page `index` of the VMA at `base` before it is mapped;
    /// its frame. `None` beyond the VMA; `Some(None)` for a VMA without a backing here.
    #[inline]
    pub(in crate::jord) fn initialise_page(
        &mut self,
        base: u64,
        index: usize,
    ) -> Option<Option<u64>> {
        match self.backing_mut(base) {
            Some(b) => {
                b.initialise(index);
                b.frame_of(index).map(Some)
            }
            None => Some(None),
        }
    }

    /// `mmap`: a new VMA for `caller`, backed by physically contiguous frames that are zeroed
    /// page by page on first use.
    pub fn mmap(
        &mut self,
        caller: PdId,
        len: u64,
        prot: Perm,
        flags: MapFlags,
    ) -> Result<u64, Error> {
        let base = self.privlib.mmap(caller, len, prot, flags)?;
        self.back_new(base, len, Sparse::No)
    }

    /// [`Jord::mmap`] (read-write, for `caller`) of an instance's VMA: placed as a μprocess
    /// area is, clear of every 4 GiB edge and of the ASCII band when its size allows
    /// ([`fjord_pd::vaddr::clear_of_data_words`]), so that no small 32-bit integer or short
    /// string stored over a stale upper half of one of its addresses points into it (a fork, or a checkpoint
    /// restored elsewhere, relocates its pointers by inferred tags); at `at` itself when that
    /// slot is free (see [`fjord_pd::PrivLib::mmap_area_at`]: a clone or instance restored
    /// where its checkpoint's was), elsewhere otherwise.
    ///
    /// A μprocess's area (`paged`) takes its frames page by page on first use, from a
    /// commitment of all its pages made now ([`frames::SparseFrames`]): a program touches
    /// little of its area, and a forked child's area holds only what it copies. This departs
    /// from Jord's VMA hardware, which translates a VMA as one physically contiguous chunk (there
    /// an area would take all its frames at creation); the emulated VLB fills a leaf per page
    /// either way. Other VMAs are backed as `mmap` backs them.
    pub fn mmap_area(
        &mut self,
        caller: PdId,
        len: u64,
        at: Option<u64>,
        paged: bool,
    ) -> Result<u64, Error> {
        let placed =
            at.and_then(|base| self.privlib.mmap_area_at(caller, base, len, Perm::RW).ok());
        let base = match placed {
            Some(base) => base,
            None => self.privlib.mmap_area(caller, len, Perm::RW)?,
        };
        let sparse = if paged { Sparse::Yes } else { Sparse::No };
        self.back_new(base, len, sparse)
    }

    /// Backs the VMA PrivLib just made at `base` ([`Jord::back_vma`]); without frames for it,
    /// frees it again. Returns `base`.
    #[inline]
    fn back_new(&mut self, base: u64, len: u64, sparse: Sparse) -> Result<u64, Error> {
        let backed = match sparse {
            Sparse::No => self.back_vma(base, len),
            Sparse::Yes => self.back_vma_sparse(base, len),
        };
        if let Err(e) = backed {
            let _ = self.privlib.munmap(PdId::KERNEL, base, len);
            return Err(e);
        }
        Ok(base)
    }

    /// Gives the new VMA at `base` (`len` bytes) its frames, physically contiguous and zeroed
    /// page by page on first use.
    pub(super) fn back_vma(&mut self, base: u64, len: u64) -> Result<(), Error> {
        let pages = len.div_ceil(PAGE_SIZE) as usize;
        let run = frames::FrameRun::alloc(pages).map_err(|_| Error::NoMemory)?;
        self.install_backing(base, Store::Run(run))
    }

    /// Gives the new VMA at `base` (`len` bytes) frames taken page by page on first use, from
    /// a commitment of all of them made now.
    fn back_vma_sparse(&mut self, base: u64, len: u64) -> Result<(), Error> {
        let pages = len.div_ceil(PAGE_SIZE) as usize;
        let sparse = frames::SparseFrames::new(pages).map_err(|_| Error::NoMemory)?;
        self.install_backing(base, Store::Sparse(sparse))
    }

    /// Makes `store` the backing of the new VMA at `base` and records it in the VMA table (a
    /// run at its first frame; sparse frames as backed at physical 0: the fill takes each
    /// page's frame from the backing, not from the entry); frees it again on failure.
    fn install_backing(&mut self, base: u64, store: Store) -> Result<(), Error> {
        let phys = match &store {
            Store::Run(run) => run.phys(),
            Store::Sparse(_) => 0,
        };
        if let Err(e) = self.privlib.set_backing(PdId::KERNEL, base, phys) {
            store.free();
            return Err(e);
        }
        match self.slot_of(base) {
            Some(slot) => self.backing[slot] = Backing::new(base, store),
            None => store.free(),
        }
        Ok(())
    }

    pub(super) fn free_backing(&mut self, base: u64) {
        self.drop_shared_prefix(base);
        self.settle_vma(base);
        self.detach_pager(base);
        if let Some(b) = self.backing_mut(base) {
            let b = core::mem::replace(b, Backing::NONE);
            b.frames.free();
        }
    }

    /// Frees backing frames beyond what the VMA at `base` still covers (all of them if freed).
    pub(super) fn trim_backing(&mut self, base: u64) {
        self.settle_vma(base);
        let still = self
            .privlib
            .vmas()
            .resolve_base(base)
            .ok()
            .map(|(_, v)| v.len());
        match still {
            None => self.free_backing(base),
            Some(len) => {
                self.vma_before_whole(base);
                let keep = len.div_ceil(PAGE_SIZE) as usize;
                if let Some(b) = self.backing_mut(base) {
                    b.shrink(keep);
                }
            }
        }
    }

    /// `munmap`.
    pub fn munmap(&mut self, caller: PdId, addr: u64, len: u64) -> Result<Pending, Error> {
        let s = self.privlib.munmap(caller, addr, len)?;
        let p = self.apply(&s);
        match fjord_pd::vaddr::decode(addr) {
            // The whole VMA went: free all its frames.
            Ok(d) if d.offset == 0 => self.free_backing(addr),
            // The VMA shrank: free the frames beyond its new end.
            Ok(d) => self.trim_backing(d.vma.base()),
            Err(_) => {}
        }
        Ok(p)
    }

    /// `caller` gives back the frames of the pages `[addr, addr + len)` (`len` rounded up to
    /// whole pages) of a μprocess's area it may write: they read as zero from then on and take
    /// frames anew when next used, as Linux's `madvise(MADV_DONTNEED)` does to private
    /// anonymous memory. The area's pager first gives what other areas still need of them
    /// (a child forked lazily keeps its copy); the pages of a shared prefix stay as they are.
    /// Returns the number of frames given back and the flushes owed. [`Error::InvalidArgs`]
    /// for an `addr` not page-aligned, a range beyond the VMA or a VMA whose frames are one
    /// run; [`Error::AccessDenied`] for memory `caller` may not write.
    pub fn discard(
        &mut self,
        caller: PdId,
        addr: u64,
        len: u64,
    ) -> Result<(usize, Pending), Error> {
        if !addr.is_multiple_of(PAGE_SIZE) {
            return Err(Error::InvalidArgs);
        }
        let grant = self
            .privlib
            .lookup(caller, addr)
            .map_err(|_| Error::AccessDenied)?;
        if !grant.perm.contains(Perm::W) || grant.global || grant.privileged {
            return Err(Error::AccessDenied);
        }
        let base = grant.base;
        let first = ((addr - base) / PAGE_SIZE) as usize;
        let count = len.div_ceil(PAGE_SIZE) as usize;
        let end = first.checked_add(count).ok_or(Error::InvalidArgs)?;
        match self.backing_mut(base) {
            Some(b) if matches!(b.frames, Store::Sparse(_)) && end <= b.pages => {}
            _ => return Err(Error::InvalidArgs),
        }
        let first = first.max((self.shared_prefix_len(base) / PAGE_SIZE) as usize);
        if first >= end {
            return Ok((0, Pending::default()));
        }
        let mut given = 0;
        for i in first..end {
            self.page_before_discard(base, i);
            if self.backing_mut(base).is_some_and(|b| b.discard(i)) {
                given += 1;
            }
        }
        let (id, _) = self.privlib.vmas().resolve_base(base)?;
        let holders: Vec<PdId> = self.privlib.vmas().holders(id).map(|h| h.pd).collect();
        let va = base + first as u64 * PAGE_SIZE;
        let mut pending = self.take_pager_flushes().unwrap_or_default();
        for pd in holders {
            pending.absorb(self.revoke_leaves(pd, va, (end - first) as u64 * PAGE_SIZE));
        }
        Ok((given, pending))
    }

    /// The pages the VMA at `base` holds initialised now and the most it held at once since
    /// it was made or emptied ((0, 0) for a VMA without frames): see [`Backing::resident`] and
    /// [`Backing::peak_resident`].
    pub fn resident(&mut self, base: u64) -> (usize, usize) {
        self.backing_mut(base)
            .map_or((0, 0), |b| (b.resident(), b.peak_resident()))
    }

    /// `mprotect`.
    pub fn mprotect(
        &mut self,
        caller: PdId,
        addr: u64,
        len: u64,
        prot: Perm,
    ) -> Result<Pending, Error> {
        let s = self.privlib.mprotect(caller, addr, len, prot)?;
        Ok(self.apply(&s))
    }

    /// Fills `pd`'s translations of its new VMA at `base` (of at most [`POPULATE_PAGES`] pages)
    /// at once, zeroing its pages, as the VLB misses of its first touches would one page at a
    /// time: a small VMA a function maps is, as a rule, an ArgBuf it fills right away. Larger
    /// VMAs stay lazy.
    pub fn populate(&mut self, pd: PdId, base: u64, perm: Perm) {
        if pd == PdId::KERNEL || perm.is_empty() {
            return;
        }
        let root = self.root_of(pd);
        let Some(b) = self.backing_mut(base).filter(|b| b.pages <= POPULATE_PAGES) else {
            return;
        };
        b.initialise_all();
        // The frames are read out first (the backing is borrowed from `self`), into an array:
        // no allocation on the path of every small `mmap`.
        let mut frames = [0u64; POPULATE_PAGES];
        let mut n = 0;
        for (slot, i) in frames.iter_mut().zip(0..b.pages) {
            let Some(pa) = b.frame_of(i) else { break };
            *slot = pa;
            n += 1;
        }
        let flags = crate::jord::vlb::leaf_flags(perm);
        for (i, &pa) in frames[..n].iter().enumerate() {
            // A new VMA has no leaf anywhere yet, so one appearing needs no TLB flush.
            let va = base + i as u64 * PAGE_SIZE;
            if map_leaf(&mut self.leaf_hints, pd, root, va, pa, flags) {
                self.stats.fills += 1;
            }
        }
    }

    /// `pcopy`.
    pub fn pcopy(&mut self, caller: PdId, addr: u64, cid: PdId, prot: Perm) -> Result<(), Error> {
        self.privlib.pcopy(caller, addr, cid, prot)
    }

    /// Takes `cid`'s permission on the VMA at `addr` away (owner only).
    pub fn revoke(&mut self, caller: PdId, addr: u64, cid: PdId) -> Result<Pending, Error> {
        let s = self.privlib.revoke(caller, addr, cid)?;
        Ok(self.apply(&s))
    }
}

/// Whether a new VMA's frames are taken page by page on first use.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sparse {
    No,
    Yes,
}
