//! Per-PD memo of the level-1 page table its last leaf edit went through.
//!
//! The emulated VLB edits single leaves all the time: an ArgBuf's leaf is installed in the PD
//! it moves to and cleared in the PD it leaves, a one-page `mmap` is populated at once. Each
//! edit would walk the PD's tables from the root. The pages a PD touches this way are mostly
//! ArgBufs of one size class, whose VMAs sit next to each other, so consecutive edits in one
//! PD land in the same level-1 table (one 2 MiB region). [`LeafHints`] remembers, per PD, that
//! table and its region, and an edit in the same region goes straight to the leaf.
//!
//! A hint stays valid while its PD keeps the same root table: tables are only freed with their
//! whole tree (`PageTables::free_user_tables`). Whoever gives a PD a root, or takes it away,
//! calls [`LeafHints::forget`].

use alloc::vec;
use alloc::vec::Vec;

/// Bytes one level-1 table covers.
const REGION_SHIFT: u32 = 21;

#[derive(Clone, Copy)]
struct Hint {
    /// `(va >> REGION_SHIFT) + 1` of the region; 0 for no hint.
    region: u64,
    /// Physical address of the region's level-1 table.
    table: u64,
}

const NONE: Hint = Hint {
    region: 0,
    table: 0,
};

/// For each PD (by index), the level-1 table of the 2 MiB region of its last leaf edit.
pub struct LeafHints {
    hints: Vec<Hint>,
}

impl LeafHints {
    /// No hints, for PD indices `0..pds`.
    pub fn new(pds: usize) -> LeafHints {
        LeafHints {
            hints: vec![NONE; pds],
        }
    }

    /// The level-1 table holding `va`'s leaf for PD `pd`, if its hint covers `va`.
    #[inline]
    pub fn get(&self, pd: usize, va: u64) -> Option<u64> {
        let h = self.hints.get(pd)?;
        (h.region == (va >> REGION_SHIFT) + 1).then_some(h.table)
    }

    /// Notes that `table` is PD `pd`'s level-1 table for `va`.
    #[inline]
    pub fn remember(&mut self, pd: usize, va: u64, table: u64) {
        if let Some(h) = self.hints.get_mut(pd) {
            *h = Hint {
                region: (va >> REGION_SHIFT) + 1,
                table,
            };
        }
    }

    /// Drops PD `pd`'s hint (its root table changes or goes).
    pub fn forget(&mut self, pd: usize) {
        if let Some(h) = self.hints.get_mut(pd) {
            *h = NONE;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hint_covers_its_two_mib_region_only() {
        let mut h = LeafHints::new(4);
        let va = 0x1000_0040_0000u64;
        assert_eq!(h.get(1, va), None);
        h.remember(1, va + 0x3000, 0xabc000);
        assert_eq!(h.get(1, va), Some(0xabc000));
        assert_eq!(h.get(1, va + 0x1f_f000), Some(0xabc000));
        assert_eq!(h.get(1, va + 0x20_0000), None, "the next region");
        assert_eq!(h.get(1, va - 0x1000), None, "the region before");
        assert_eq!(h.get(2, va), None, "another PD");
        h.forget(1);
        assert_eq!(h.get(1, va), None);
    }

    #[test]
    fn address_zero_and_out_of_range_pds_have_no_hint() {
        let mut h = LeafHints::new(2);
        assert_eq!(h.get(0, 0), None);
        h.remember(0, 0, 0x5000);
        assert_eq!(h.get(0, 0x1000), Some(0x5000));
        h.remember(7, 0, 0x5000);
        assert_eq!(h.get(7, 0), None);
        h.forget(7);
    }
}
