//! Power-of-two VMA size classes, from one page (4 KiB) to 4 GiB.
//!
//! The paper (§4.1) uses every power of two from 128 B to 4 GB (26 classes). Fjord emulates the
//! VLB with x86_64 page tables, and page tables isolate 4 KiB pages: two VMAs that share a
//! physical page cannot be given different permissions in different PDs. The smallest VMA that
//! can be isolated, moved with `pmove` or shared with `pcopy` is therefore one page, and the
//! classes here start at 4 KiB. Sub-page objects belong inside a VMA of their owner (its heap
//! allocator packs them); the paper's sub-page classes would only be sound here if packed with
//! VMAs of the same owner and never transferred alone, so they are left out rather than offered
//! with a weaker guarantee. The upper end is the paper's 4 GiB.

/// log2 of the page size: the smallest isolatable unit.
pub const PAGE_SHIFT: u32 = 12;

/// The page size in bytes (4 KiB).
pub const PAGE_SIZE: u64 = 1 << PAGE_SHIFT;

/// Rounds `len` up to a whole number of pages (saturating near `u64::MAX`).
pub const fn page_round_up(len: u64) -> u64 {
    match len.checked_add(PAGE_SIZE - 1) {
        Some(v) => v & !(PAGE_SIZE - 1),
        None => !(PAGE_SIZE - 1),
    }
}

/// A VMA size class: VMAs of class `c` live in chunks of `2^(12 + c)` bytes.
///
/// The class code is what the virtual address carries in its SC field (see [`crate::vaddr`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SizeClass(u8);

impl SizeClass {
    /// Number of classes: 4 KiB (code 0) up to 4 GiB (code 20).
    pub const COUNT: usize = 21;
    /// The smallest class, one page.
    pub const MIN: SizeClass = SizeClass(0);
    /// The largest class, 4 GiB.
    pub const MAX: SizeClass = SizeClass(Self::COUNT as u8 - 1);

    /// The class with this code, if the code is in use.
    pub const fn from_code(code: u8) -> Option<SizeClass> {
        if (code as usize) < Self::COUNT {
            Some(SizeClass(code))
        } else {
            None
        }
    }

    /// The code stored in an address's SC field.
    pub const fn code(self) -> u8 {
        self.0
    }

    /// The class as an index into per-class arrays.
    pub const fn index(self) -> usize {
        self.0 as usize
    }

    /// log2 of the chunk size.
    pub const fn shift(self) -> u32 {
        PAGE_SHIFT + self.0 as u32
    }

    /// The chunk size in bytes: the largest VMA this class holds.
    pub const fn size(self) -> u64 {
        1 << self.shift()
    }

    /// The smallest class whose chunk holds `len` bytes, or `None` for a zero length or one
    /// above 4 GiB.
    pub const fn for_len(len: u64) -> Option<SizeClass> {
        if len == 0 || len > Self::MAX.size() {
            return None;
        }
        let shift = 64 - (len - 1).leading_zeros();
        if shift <= PAGE_SHIFT {
            Some(Self::MIN)
        } else {
            Some(SizeClass((shift - PAGE_SHIFT) as u8))
        }
    }

    /// The next larger class, if any.
    pub const fn next(self) -> Option<SizeClass> {
        Self::from_code(self.0 + 1)
    }

    /// Every class, smallest first.
    pub fn all() -> impl Iterator<Item = SizeClass> {
        (0..Self::COUNT as u8).map(SizeClass)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_span_a_page_to_four_gib() {
        assert_eq!(SizeClass::MIN.size(), 4096);
        assert_eq!(SizeClass::MAX.size(), 4 << 30);
        assert_eq!(SizeClass::all().count(), SizeClass::COUNT);
        assert!(SizeClass::all().any(|c| c.size() == 1 << 30));
        assert_eq!(SizeClass::from_code(21), None);
        assert_eq!(SizeClass::MAX.next(), None);
    }

    #[test]
    fn for_len_picks_the_smallest_fitting_class() {
        assert_eq!(SizeClass::for_len(0), None);
        assert_eq!(SizeClass::for_len(1), Some(SizeClass::MIN));
        assert_eq!(SizeClass::for_len(4096), Some(SizeClass::MIN));
        assert_eq!(SizeClass::for_len(4097).map(SizeClass::size), Some(8192));
        assert_eq!(
            SizeClass::for_len(1 << 30).map(SizeClass::size),
            Some(1 << 30)
        );
        assert_eq!(SizeClass::for_len(4 << 30), Some(SizeClass::MAX));
        assert_eq!(SizeClass::for_len((4 << 30) + 1), None);
        for c in SizeClass::all() {
            assert_eq!(SizeClass::for_len(c.size()), Some(c));
            if c != SizeClass::MIN {
                assert_eq!(SizeClass::for_len(c.size() / 2 + 1), Some(c));
            }
        }
    }

    #[test]
    fn page_rounding() {
        assert_eq!(page_round_up(0), 0);
        assert_eq!(page_round_up(1), 4096);
        assert_eq!(page_round_up(4096), 4096);
        assert_eq!(page_round_up(u64::MAX), !4095);
    }
}
