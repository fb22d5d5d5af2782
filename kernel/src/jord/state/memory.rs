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
        let b = self.backing_mut(base).ok_or(Error::NoMemory)?;
        b.initialise_all();
        let phys = b.phys;
        // SAFETY: the VMA's backing frames were just allocated for it, hold at least
        // `code.len()` bytes and are reached through the direct map; no PD holds a right on the
        // VMA yet, so nothing else reads or writes them.
        unsafe {
            core::ptr::copy_nonoverlapping(
                code.as_ptr(),
                crate::mm::phys_to_virt(phys) as *mut u8,
                code.len(),
            )
        };
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
        self.backing
            .get_mut(slot)
            .filter(|b| b.pages != 0 && b.base == base)
    }

    /// Physical backing of the VMA at `base` as (address, pages), if it has any, with every
    /// page initialised first: the kernel never reads what the frames held before the VMA.
    pub fn backing_of(&mut self, base: u64) -> Option<(u64, usize)> {
        let b = self.backing_mut(base)?;
        b.initialise_all();
        Some((b.phys, b.pages))
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
        let b = self.backing_mut(base).ok_or(Error::NotMapped)?;
        if page as usize >= b.pages {
            return Err(Error::InvalidArgs);
        }
        b.initialise(page as usize);
        let at = crate::mm::phys_to_virt(b.phys + offset) as *mut u64;
        // SAFETY: the bytes lie in one initialised page of the VMA's backing frames, reached
        // through the direct map; no code of the PD runs while the executor sets it up.
        unsafe { core::ptr::copy_nonoverlapping(words.as_ptr(), at, words.len()) };
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

    /// Physical address of the VMA at `base` with every page initialised, for kernel access.
    pub fn initialised_backing(&mut self, base: u64) -> Option<u64> {
        let b = self.backing_mut(base)?;
        b.initialise_all();
        Some(b.phys)
    }

    /// Initialises (zeroes on first use) page `index` of the VMA at `base` before it is mapped.
    pub(in crate::jord) fn initialise_page(&mut self, base: u64, index: usize) {
        if let Some(b) = self.backing_mut(base) {
            b.initialise(index);
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
        let pages = len.div_ceil(PAGE_SIZE) as usize;
        let phys = match frames::alloc_contiguous(pages, 1) {
            Ok(p) => p,
            Err(_) => {
                let _ = self.privlib.munmap(PdId::KERNEL, base, len);
                return Err(Error::NoMemory);
            }
        };
        self.privlib.set_backing(PdId::KERNEL, base, phys)?;
        if let Some(slot) = self.slot_of(base) {
            self.backing[slot] = Backing::new(base, phys, pages);
        }
        Ok(base)
    }

    pub(super) fn free_backing(&mut self, base: u64) {
        self.settle_vma(base);
        if let Some(b) = self.backing_mut(base) {
            let b = core::mem::replace(b, Backing::NONE);
            let _ = frames::free_contiguous(b.phys, b.pages);
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
                let keep = len.div_ceil(PAGE_SIZE) as usize;
                if let Some(b) = self.backing_mut(base)
                    && keep < b.pages
                {
                    let _ =
                        frames::free_contiguous(b.phys + keep as u64 * PAGE_SIZE, b.pages - keep);
                    b.pages = keep;
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
        let (phys, pages) = (b.phys, b.pages);
        let flags = crate::jord::vlb::leaf_flags(perm);
        for i in 0..pages as u64 {
            // A new VMA has no leaf anywhere yet, so one appearing needs no TLB flush.
            let off = i * PAGE_SIZE;
            if map_leaf(
                &mut self.leaf_hints,
                pd,
                root,
                base + off,
                phys + off,
                flags,
            ) {
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
