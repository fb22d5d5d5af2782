//! The shadow tag table: one bit per aligned 8-byte pointer slot of an area, kept by the kernel.
//!
//! On CHERI every 16-byte capability granule of memory has a hidden tag bit that the hardware
//! sets on a capability store and clears on any other store, and fork scans a page's tags to
//! find the pointers to relocate. x86_64 has no such bit and its pointers are 8 bytes, so Fjord
//! keeps one bit per aligned 8-byte slot in kernel memory that no μprocess can map. The kernel
//! and loader set the bits for the pointers they create (see [`crate::source::Precise`]) and
//! clear them for memory they overwrite ([`ShadowTags::clear_range`], as every data store
//! would on CHERI); stores made by native μprocess code are not seen, which is what the
//! module [`crate::source`] explains.
//!
//! The table is sparse: a page's 512 bits (64 bytes, 1/64 of the page) exist only while the
//! page holds a tag, so "does this page hold any tag" is one map lookup and untagged memory
//! costs nothing. Bits are kept by offset from the area's base, so the child's table at fork is
//! the parent's with another base ([`ShadowTags::copy_for`]).

use crate::area::{Area, PAGE_SHIFT, PAGE_SIZE};
use alloc::collections::BTreeMap;
use alloc::sync::Arc;

/// The size of a pointer slot in bytes.
pub const SLOT_SIZE: u64 = 8;

/// The number of pointer slots (and of 64-bit words) in a page.
pub const SLOTS_PER_PAGE: usize = (PAGE_SIZE / SLOT_SIZE) as usize;

/// A page's contents as 64-bit words, in address order.
pub type PageWords = [u64; SLOTS_PER_PAGE];

/// Fills `words` with the words of a page given as its bytes (little-endian; bytes past one
/// page are ignored, words past a short buffer are left as they were).
pub fn page_words(bytes: &[u8], words: &mut PageWords) {
    for (w, c) in words.iter_mut().zip(bytes.chunks_exact(SLOT_SIZE as usize)) {
        let mut b = [0u8; 8];
        b.copy_from_slice(c);
        *w = u64::from_le_bytes(b);
    }
}

/// Writes `words` into `bytes` as a page's bytes (little-endian): the inverse of
/// [`page_words`] (bytes past the words are left as they were).
pub fn page_bytes(words: &PageWords, bytes: &mut [u8]) {
    for (c, w) in bytes.chunks_exact_mut(SLOT_SIZE as usize).zip(words) {
        c.copy_from_slice(&w.to_le_bytes());
    }
}

/// Why a tag operation was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TagError {
    /// The address or range is not inside the table's area.
    OutsideArea,
    /// The address is not a multiple of [`SLOT_SIZE`] (or of the page size where a page is
    /// expected).
    Misaligned,
    /// The other area has a different size.
    AreaMismatch,
}

/// One bit per slot of a page: bit `i` stands for the word at `page + 8 * i`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SlotMask([u64; SLOTS_PER_PAGE / 64]);

impl SlotMask {
    /// No slot.
    pub const EMPTY: SlotMask = SlotMask([0; SLOTS_PER_PAGE / 64]);
    /// Every slot.
    pub const FULL: SlotMask = SlotMask([u64::MAX; SLOTS_PER_PAGE / 64]);

    /// The mask whose word `w` holds the bits of slots `64 * w` to `64 * w + 63` (bit `i % 64`
    /// for slot `i`).
    pub const fn from_words(words: [u64; SLOTS_PER_PAGE / 64]) -> SlotMask {
        SlotMask(words)
    }

    /// Adds slot `i`; an index of [`SLOTS_PER_PAGE`] or more is ignored.
    pub fn set(&mut self, i: usize) {
        if i < SLOTS_PER_PAGE {
            self.0[i / 64] |= 1 << (i % 64);
        }
    }

    /// Removes slot `i`; an index of [`SLOTS_PER_PAGE`] or more is ignored.
    pub fn clear(&mut self, i: usize) {
        if i < SLOTS_PER_PAGE {
            self.0[i / 64] &= !(1 << (i % 64));
        }
    }

    /// True when slot `i` is in the mask (never for an index past the page).
    pub fn test(&self, i: usize) -> bool {
        i < SLOTS_PER_PAGE && self.0[i / 64] & (1 << (i % 64)) != 0
    }

    /// The mask's words: word `w` holds the bits of slots `64 * w` to `64 * w + 63`.
    pub const fn words(&self) -> &[u64; SLOTS_PER_PAGE / 64] {
        &self.0
    }

    /// The number of slots in the mask.
    pub fn count(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// True when no slot is in the mask.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }

    /// The slots in either mask.
    pub fn union(mut self, other: SlotMask) -> SlotMask {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a |= b;
        }
        self
    }

    /// The slots of `self` from slot `first` on (all of them for 0, none past the page).
    pub fn from_slot(mut self, first: usize) -> SlotMask {
        if first == 0 {
            return self;
        }
        for (w, bits) in self.0.iter_mut().enumerate() {
            let start = 64 * w;
            if first >= start + 64 {
                *bits = 0;
            } else if first > start {
                *bits &= u64::MAX << (first - start);
            }
        }
        self
    }

    /// The slots in both masks.
    pub fn intersect(mut self, other: SlotMask) -> SlotMask {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a &= b;
        }
        self
    }

    /// The slots in `self` and not in `other`.
    pub fn difference(mut self, other: SlotMask) -> SlotMask {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a &= !b;
        }
        self
    }

    /// The slots `first..first + n` (clipped to the page).
    pub fn range(first: usize, n: usize) -> SlotMask {
        let mut m = SlotMask::EMPTY;
        let end = first.saturating_add(n).min(SLOTS_PER_PAGE);
        for i in first..end {
            m.set(i);
        }
        m
    }

    /// The slot indices in the mask, lowest first.
    pub fn iter(&self) -> impl Iterator<Item = usize> + use<> {
        set_bits(self.0)
    }
}

/// The kernel-owned tag bits of one area.
#[derive(Clone, Debug)]
pub struct ShadowTags {
    area: Area,
    /// Page index (offset / page size) to that page's bits; pages without tags are absent.
    /// Shared with the tables copied from this one ([`ShadowTags::copy_for`]: a forked
    /// child's) until either changes; `None` while empty.
    pages: Option<Arc<BTreeMap<u64, SlotMask>>>,
    count: usize,
}

impl PartialEq for ShadowTags {
    fn eq(&self, other: &ShadowTags) -> bool {
        let empty = BTreeMap::new();
        self.area == other.area
            && self.count == other.count
            && self.map().unwrap_or(&empty) == other.map().unwrap_or(&empty)
    }
}

impl Eq for ShadowTags {}

impl ShadowTags {
    /// An empty table over `area`.
    pub const fn new(area: Area) -> ShadowTags {
        ShadowTags {
            area,
            pages: None,
            count: 0,
        }
    }

    /// The area the table covers.
    pub const fn area(&self) -> &Area {
        &self.area
    }

    /// The page index and slot index of an aligned slot address.
    fn locate(&self, addr: u64) -> Result<(u64, usize), TagError> {
        locate_in(&self.area, addr)
    }

    /// The table, if it holds anything.
    fn map(&self) -> Option<&BTreeMap<u64, SlotMask>> {
        self.pages.as_deref()
    }

    /// The table, to change: this one's own (copied first if another table shares it).
    fn map_mut(&mut self) -> &mut BTreeMap<u64, SlotMask> {
        Arc::make_mut(self.pages.get_or_insert_with(Default::default))
    }

    /// The bits of page `page` (an index in the area).
    fn mask(&self, page: u64) -> Option<&SlotMask> {
        self.map()?.get(&page)
    }

    /// Tags the slot at `addr` (which must be 8-byte aligned and inside the area).
    pub fn set(&mut self, addr: u64) -> Result<(), TagError> {
        let (page, slot) = self.locate(addr)?;
        // A shared table is copied only when the tag is new.
        let shared = self
            .pages
            .as_mut()
            .is_some_and(|a| Arc::get_mut(a).is_none());
        if shared && self.mask(page).is_some_and(|m| m.test(slot)) {
            return Ok(());
        }
        if tag(self.map_mut(), page, slot) {
            self.count += 1;
        }
        Ok(())
    }

    /// Tags the slot at each of `addrs` ([`ShadowTags::set`] of each, the table made this
    /// one's own once); the first error, after the others are tagged.
    pub fn set_all(&mut self, addrs: impl IntoIterator<Item = u64>) -> Result<(), TagError> {
        let mut result = Ok(());
        let mut added = 0;
        let area = self.area;
        let map = self.map_mut();
        for addr in addrs {
            match locate_in(&area, addr) {
                Ok((page, slot)) => added += usize::from(tag(map, page, slot)),
                Err(e) => result = result.and(Err(e)),
            }
        }
        self.count += added;
        if self.count == 0 {
            self.pages = None;
        }
        result
    }

    /// Untags the slot at `addr` (which must be 8-byte aligned and inside the area).
    pub fn clear(&mut self, addr: u64) -> Result<(), TagError> {
        let (page, slot) = self.locate(addr)?;
        if self.mask(page).is_some_and(|m| m.test(slot)) {
            let map = self.map_mut();
            if let Some(mask) = map.get_mut(&page) {
                mask.clear(slot);
                if mask.is_empty() {
                    map.remove(&page);
                }
            }
            self.count -= 1;
        }
        Ok(())
    }

    /// True when the slot at `addr` is tagged. A misaligned address or one outside the area
    /// is never tagged.
    pub fn is_tagged(&self, addr: u64) -> bool {
        match self.locate(addr) {
            Ok((page, slot)) => self.mask(page).is_some_and(|m| m.test(slot)),
            Err(_) => false,
        }
    }

    /// The tagged slots of the page holding `addr` (empty outside the area).
    pub fn page_mask(&self, addr: u64) -> SlotMask {
        match self.area.offset_of(addr) {
            Some(off) => self.mask(off >> PAGE_SHIFT).copied().unwrap_or_default(),
            None => SlotMask::EMPTY,
        }
    }

    /// True when the page holding `addr` has any tag: the cheap summary fork uses to tell
    /// pages that need relocation from pages that can be shared as they are.
    pub fn page_has_tags(&self, addr: u64) -> bool {
        match self.area.offset_of(addr) {
            Some(off) => self.mask(off >> PAGE_SHIFT).is_some(),
            None => false,
        }
    }

    /// The addresses of the tagged slots of the page holding `addr`, lowest first.
    pub fn tagged_in_page(&self, addr: u64) -> impl Iterator<Item = u64> + use<> {
        let page = addr & !(PAGE_SIZE - 1);
        self.page_mask(addr)
            .iter()
            .map(move |i| page + i as u64 * SLOT_SIZE)
    }

    /// Replaces the tags of the page at `page` (page-aligned, inside the area) by `mask`: how
    /// a page copy carries its tags, or how a hardware tag read is installed.
    pub fn set_page_mask(&mut self, page: u64, mask: SlotMask) -> Result<(), TagError> {
        let off = self.area.offset_of(page).ok_or(TagError::OutsideArea)?;
        if !off.is_multiple_of(PAGE_SIZE) {
            return Err(TagError::Misaligned);
        }
        let index = off >> PAGE_SHIFT;
        let old = self.mask(index).copied();
        if old == Some(mask) || (old.is_none() && mask.is_empty()) {
            return Ok(());
        }
        self.count = self.count - old.map_or(0, |m| m.count()) + mask.count();
        if mask.is_empty() {
            self.map_mut().remove(&index);
        } else {
            self.map_mut().insert(index, mask);
        }
        Ok(())
    }

    /// The number of tagged slots in the area.
    pub const fn count(&self) -> usize {
        self.count
    }

    /// The number of pages holding at least one tag.
    pub fn tagged_page_count(&self) -> usize {
        self.map().map_or(0, BTreeMap::len)
    }

    /// The base addresses of the pages holding at least one tag, lowest first.
    pub fn tagged_pages(&self) -> impl Iterator<Item = u64> + '_ {
        let base = self.area.base();
        self.map()
            .into_iter()
            .flat_map(|m| m.keys())
            .map(move |&i| base + (i << PAGE_SHIFT))
    }

    /// Untags every slot overlapping `[addr, addr + len)`, as any data store to those bytes
    /// does on CHERI (a partial overwrite of a pointer destroys it). The range must lie inside
    /// the area. Returns how many tags were cleared.
    pub fn clear_range(&mut self, addr: u64, len: u64) -> Result<usize, TagError> {
        if !self.area.contains_range(addr, len) {
            return Err(TagError::OutsideArea);
        }
        if len == 0 {
            return Ok(0);
        }
        let first = addr - self.area.base();
        let last = first + (len - 1);
        let (first_slot, last_slot) = (first / SLOT_SIZE, last / SLOT_SIZE);
        let per_page = SLOTS_PER_PAGE as u64;
        let pages = first >> PAGE_SHIFT..=last >> PAGE_SHIFT;
        // A table shared with a forked child's is copied only if a tag goes.
        if self
            .map()
            .is_none_or(|m| m.range(pages.clone()).next().is_none())
        {
            return Ok(0);
        }
        let mut cleared = 0;
        let mut emptied = alloc::vec::Vec::new();
        let map = self.map_mut();
        for (&page, mask) in map.range_mut(pages) {
            let lo = first_slot.max(page * per_page) - page * per_page;
            let hi = last_slot.min(page * per_page + per_page - 1) - page * per_page;
            let drop = mask.intersect(SlotMask::range(lo as usize, (hi - lo + 1) as usize));
            cleared += drop.count();
            *mask = mask.difference(drop);
            if mask.is_empty() {
                emptied.push(page);
            }
        }
        for page in emptied {
            map.remove(&page);
        }
        self.count -= cleared;
        Ok(cleared)
    }

    /// Untags everything.
    pub fn clear_all(&mut self) {
        self.pages = None;
        self.count = 0;
    }

    /// The same tags over `child` (same size): the child's table right after fork, before any
    /// relocation (tags stay at the same offsets). The two share their bits until either
    /// changes.
    pub fn copy_for(&self, child: &Area) -> Result<ShadowTags, TagError> {
        if child.size() != self.area.size() {
            return Err(TagError::AreaMismatch);
        }
        Ok(ShadowTags {
            area: *child,
            pages: self.pages.clone(),
            count: self.count,
        })
    }
}

/// Tags slot `slot` of page `page` in `map`; whether it was not tagged before.
fn tag(map: &mut BTreeMap<u64, SlotMask>, page: u64, slot: usize) -> bool {
    let mask = map.entry(page).or_default();
    let new = !mask.test(slot);
    mask.set(slot);
    new
}

/// The page index in `area` and the slot in that page of the 8-byte slot at `addr`.
fn locate_in(area: &Area, addr: u64) -> Result<(u64, usize), TagError> {
    let off = area.offset_of(addr).ok_or(TagError::OutsideArea)?;
    if !off.is_multiple_of(SLOT_SIZE) {
        return Err(TagError::Misaligned);
    }
    Ok((off >> PAGE_SHIFT, ((off % PAGE_SIZE) / SLOT_SIZE) as usize))
}

/// The indices of the set bits of `words`, 64 a word (bit `i % 64` of word `i / 64`), lowest
/// first.
pub(crate) fn set_bits(words: impl IntoIterator<Item = u64>) -> impl Iterator<Item = usize> {
    words.into_iter().enumerate().flat_map(|(w, word)| {
        let mut bits = word;
        core::iter::from_fn(move || {
            if bits == 0 {
                return None;
            }
            let b = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            Some(w * 64 + b)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    fn area() -> Area {
        Area::new(0x100_0000, 1 << 20).unwrap()
    }

    #[test]
    fn page_words_reads_little_endian_words() {
        let mut bytes = [0u8; PAGE_SIZE as usize];
        bytes[0] = 1;
        bytes[15] = 0x80;
        bytes[4095] = 2;
        let mut w = [7; SLOTS_PER_PAGE];
        page_words(&bytes, &mut w);
        assert_eq!((w[0], w[1], w[511]), (1, 0x8000_0000_0000_0000, 2 << 56));
        assert!(w[2..511].iter().all(|&x| x == 0));
        let mut short = [7; SLOTS_PER_PAGE];
        page_words(&bytes[..8], &mut short);
        assert_eq!(short[..2], [1, 7]);
    }

    #[test]
    fn page_bytes_inverts_page_words() {
        let mut words = [0u64; SLOTS_PER_PAGE];
        for (i, w) in words.iter_mut().enumerate() {
            *w = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
        let mut bytes = [0u8; PAGE_SIZE as usize];
        page_bytes(&words, &mut bytes);
        assert_eq!(bytes[8..16], words[1].to_le_bytes());
        let mut back = [0; SLOTS_PER_PAGE];
        page_words(&bytes, &mut back);
        assert_eq!(back, words);
    }

    #[test]
    fn slot_mask_basics() {
        let mut m = SlotMask::EMPTY;
        m.set(0);
        m.set(63);
        m.set(64);
        m.set(511);
        m.set(512);
        assert_eq!(m.count(), 4);
        assert!(m.test(511) && !m.test(512) && !m.test(usize::MAX));
        assert_eq!(m.iter().collect::<Vec<_>>(), [0, 63, 64, 511]);
        m.clear(63);
        m.clear(9999);
        assert_eq!(m.iter().collect::<Vec<_>>(), [0, 64, 511]);
        assert_eq!(SlotMask::FULL.count(), SLOTS_PER_PAGE);
        assert_eq!(
            SlotMask::range(510, 10).iter().collect::<Vec<_>>(),
            [510, 511]
        );
        assert!(SlotMask::range(600, 3).is_empty());
        assert_eq!(m.intersect(SlotMask::range(1, 100)).count(), 1);
        assert_eq!(m.difference(SlotMask::range(0, 65)).count(), 1);
        assert_eq!(m.union(SlotMask::range(0, 2)).count(), 4);
    }

    #[test]
    fn set_clear_test() {
        let a = area();
        let mut t = ShadowTags::new(a);
        assert_eq!(t.set(a.base() + 8), Ok(()));
        assert_eq!(t.set(a.base() + 8), Ok(()));
        assert_eq!(t.count(), 1);
        assert!(t.is_tagged(a.base() + 8));
        assert!(!t.is_tagged(a.base() + 9));
        assert!(!t.is_tagged(a.base()));
        assert_eq!(t.set(a.base() + 4), Err(TagError::Misaligned));
        assert_eq!(t.set(a.end()), Err(TagError::OutsideArea));
        assert_eq!(t.clear(a.base() - 8), Err(TagError::OutsideArea));
        assert!(!t.is_tagged(a.end()));
        assert_eq!(t.clear(a.base() + 8), Ok(()));
        assert_eq!(t.clear(a.base() + 8), Ok(()));
        assert_eq!(t.count(), 0);
        assert_eq!(t.tagged_page_count(), 0);
    }

    #[test]
    fn page_summary_and_iteration() {
        let a = area();
        let mut t = ShadowTags::new(a);
        let page = a.base() + 5 * PAGE_SIZE;
        for off in [0, 8, 4088] {
            t.set(page + off).unwrap();
        }
        t.set(a.base() + 9 * PAGE_SIZE).unwrap();
        assert!(t.page_has_tags(page));
        assert!(t.page_has_tags(page + 100));
        assert!(!t.page_has_tags(page + PAGE_SIZE));
        assert!(!t.page_has_tags(a.end()));
        assert_eq!(t.page_mask(page).count(), 3);
        assert_eq!(
            t.tagged_in_page(page + 17).collect::<Vec<_>>(),
            [page, page + 8, page + 4088]
        );
        assert_eq!(
            t.tagged_pages().collect::<Vec<_>>(),
            [page, a.base() + 9 * PAGE_SIZE]
        );
        assert_eq!(t.count(), 4);
    }

    #[test]
    fn clear_range_clears_overlapping_slots_across_pages() {
        let a = area();
        let mut t = ShadowTags::new(a);
        let p = a.base() + PAGE_SIZE;
        for off in [0, 8, 16, 4088, 4096, 4104, 8192] {
            t.set(p + off).unwrap();
        }
        // One byte into slot 1 destroys that pointer only.
        assert_eq!(t.clear_range(p + 9, 1), Ok(1));
        assert!(t.is_tagged(p) && !t.is_tagged(p + 8) && t.is_tagged(p + 16));
        // From the last slot of the first page into the second slot of the next.
        assert_eq!(t.clear_range(p + 4095, 9), Ok(2));
        assert!(!t.is_tagged(p + 4088) && !t.is_tagged(p + 4096));
        assert!(t.is_tagged(p + 4104));
        assert_eq!(t.clear_range(p, 0), Ok(0));
        assert_eq!(t.clear_range(a.end() - 8, 16), Err(TagError::OutsideArea));
        assert_eq!(t.count(), 4);
        assert_eq!(t.clear_range(a.base(), a.size()), Ok(4));
        assert_eq!(t.count(), 0);
        assert_eq!(t.tagged_page_count(), 0);
    }

    #[test]
    fn a_copy_shares_its_bits_until_either_side_changes() {
        let p = area();
        let c = Area::new(0x300_0000, 1 << 20).unwrap();
        let mut parent = ShadowTags::new(p);
        parent.set(p.base() + 0x1008).unwrap();
        parent.set(p.base() + 0x3010).unwrap();
        let mut child = parent.copy_for(&c).unwrap();
        // Clearing where nothing is tagged changes neither.
        assert_eq!(child.clear_range(c.base() + 0x2000, 0x1000), Ok(0));
        child.set(c.base() + 0x1010).unwrap();
        child.clear(c.base() + 0x3010).unwrap();
        assert!(child.is_tagged(c.base() + 0x1008) && child.is_tagged(c.base() + 0x1010));
        assert!(!child.is_tagged(c.base() + 0x3010));
        assert_eq!(child.count(), 2);
        assert!(parent.is_tagged(p.base() + 0x3010) && !parent.is_tagged(p.base() + 0x1010));
        assert_eq!(parent.count(), 2);
        let child2 = parent.copy_for(&c).unwrap();
        parent.clear_all();
        assert_eq!((parent.count(), parent.tagged_page_count()), (0, 0));
        assert_eq!(child2.tagged_pages().count(), 2);
        assert_eq!(parent, ShadowTags::new(p));
        let mut emptied = ShadowTags::new(p);
        emptied.set(p.base()).unwrap();
        emptied.clear(p.base()).unwrap();
        assert_eq!(emptied, ShadowTags::new(p));
        // Tagging many at once: every good slot tagged, the first error reported.
        let mut many = ShadowTags::new(p);
        let addrs = [
            p.base() + 8,
            p.base() + 3,
            p.base() + 8,
            p.base() + 0x2000,
            0,
        ];
        assert_eq!(many.set_all(addrs), Err(TagError::Misaligned));
        assert_eq!(many.count(), 2);
        assert!(many.is_tagged(p.base() + 0x2000));
        assert_eq!(ShadowTags::new(p).set_all([1]), Err(TagError::OutsideArea));
    }

    #[test]
    fn copy_for_child_and_page_masks() {
        let p = area();
        let c = Area::new(0x300_0000, 1 << 20).unwrap();
        let mut t = ShadowTags::new(p);
        t.set(p.base() + 0x1008).unwrap();
        let ct = t.copy_for(&c).unwrap();
        assert!(ct.is_tagged(c.base() + 0x1008));
        assert_eq!(ct.count(), 1);
        assert_eq!(
            t.copy_for(&Area::new(0, 1 << 21).unwrap()),
            Err(TagError::AreaMismatch)
        );
        let mut ct = ct;
        assert_eq!(
            ct.set_page_mask(c.base() + 0x1000, SlotMask::range(0, 3)),
            Ok(())
        );
        assert_eq!(ct.count(), 3);
        assert_eq!(ct.set_page_mask(c.base() + 0x1000, SlotMask::EMPTY), Ok(()));
        assert_eq!(ct.count(), 0);
        assert!(!ct.page_has_tags(c.base() + 0x1000));
        assert_eq!(
            ct.set_page_mask(c.base() + 8, SlotMask::FULL),
            Err(TagError::Misaligned)
        );
        assert_eq!(
            ct.set_page_mask(p.base(), SlotMask::FULL),
            Err(TagError::OutsideArea)
        );
        ct.set_page_mask(c.base(), SlotMask::FULL).unwrap();
        ct.clear_all();
        assert_eq!(ct.count(), 0);
    }

    mod props {
        use super::super::*;
        use alloc::collections::BTreeSet;
        use proptest::prelude::*;

        #[derive(Debug, Clone)]
        enum Op {
            Set(u64),
            Clear(u64),
            ClearRange(u64, u64),
        }

        fn op() -> impl Strategy<Value = Op> {
            // A 64 KiB area: 8192 slots over 16 pages.
            prop_oneof![
                (0u64..8192).prop_map(|s| Op::Set(s * 8)),
                (0u64..8192).prop_map(|s| Op::Clear(s * 8)),
                (0u64..65536, 0u64..10000).prop_map(|(a, l)| Op::ClearRange(a, l)),
            ]
        }

        proptest! {
            #[test]
            fn matches_a_set_model(ops in proptest::collection::vec(op(), 0..200)) {
                let a = Area::new(0x10_0000, 1 << 16).unwrap();
                let mut t = ShadowTags::new(a);
                let mut model = BTreeSet::new();
                for op in ops {
                    match op {
                        Op::Set(off) => { t.set(a.base() + off).unwrap(); model.insert(off); }
                        Op::Clear(off) => { t.clear(a.base() + off).unwrap(); model.remove(&off); }
                        Op::ClearRange(off, len) => {
                            let r = t.clear_range(a.base() + off, len);
                            if off + len > a.size() {
                                prop_assert_eq!(r, Err(TagError::OutsideArea));
                            } else {
                                let gone: alloc::vec::Vec<u64> = model.iter().copied()
                                    .filter(|&s| s + 8 > off && s < off + len).collect();
                                prop_assert_eq!(r, Ok(gone.len()));
                                for s in gone { model.remove(&s); }
                            }
                        }
                    }
                    prop_assert_eq!(t.count(), model.len());
                }
                for off in (0..a.size()).step_by(8) {
                    prop_assert_eq!(t.is_tagged(a.base() + off), model.contains(&off));
                }
                for page in a.page_addrs() {
                    let n = model.iter().filter(|&&s| s / PAGE_SIZE == (page - a.base()) / PAGE_SIZE).count();
                    prop_assert_eq!(t.page_mask(page).count(), n);
                    prop_assert_eq!(t.page_has_tags(page), n > 0);
                }
            }
        }
    }
}
