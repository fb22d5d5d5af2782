//! Per-PD memo of the level-1 page tables its recent leaf edits went through.
//!
//! The emulated VLB edits single leaves all the time: an ArgBuf's leaf is installed in the PD
//! it moves to and cleared in the PD it leaves, a one-page `mmap` is populated at once, a page
//! fault installs one leaf. Each edit would walk the PD's tables from the root. Consecutive
//! edits of one kind in one PD mostly land in the same level-1 table (one 2 MiB region): the
//! ArgBufs of a size class sit next to each other, and a function faults its pages in in
//! order. [`LeafHints`] remembers, per PD, one such table for each [`Way`], and an edit in a
//! remembered region goes straight to the leaf.
//!
//! Two ways keep the kinds apart: the kernel's ArgBuf hand-offs ([`Way::Handoff`]) would
//! otherwise lose their table to every fault of the function's own stack and heap
//! ([`Way::Fill`]). A lookup looks at both, so a leaf faulted in is cleared without a walk.
//!
//! A hint stays valid while its PD keeps the same root table: tables are only freed with their
//! whole tree (`PageTables::free_user_tables`). Whoever gives a PD a root, or takes it away,
//! calls [`LeafHints::forget`].

use alloc::vec;
use alloc::vec::Vec;

/// Bytes one level-1 table covers.
const REGION_SHIFT: u32 = 21;

/// Which kind of edit a hint comes from (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    /// The kernel installing or clearing an ArgBuf's leaf, or populating a small VMA.
    Handoff = 0,
    /// A page fault (VLB miss) filling a leaf.
    Fill = 1,
}

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

/// For each PD (by index) and [`Way`], the level-1 table of the 2 MiB region of its last leaf
/// edit of that kind.
pub struct LeafHints {
    hints: Vec<[Hint; 2]>,
}

impl LeafHints {
    /// No hints, for PD indices `0..pds`.
    pub fn new(pds: usize) -> LeafHints {
        LeafHints {
            hints: vec![[NONE; 2]; pds],
        }
    }

    /// The level-1 table holding `va`'s leaf for PD `pd`, if one of its hints covers `va`.
    #[inline]
    pub fn get(&self, pd: usize, va: u64) -> Option<u64> {
        let [a, b] = self.hints.get(pd)?;
        let region = (va >> REGION_SHIFT) + 1;
        if a.region == region {
            Some(a.table)
        } else if b.region == region {
            Some(b.table)
        } else {
            None
        }
    }

    /// Notes that `table` is PD `pd`'s level-1 table for `va`, as the hint of `way`.
    #[inline]
    pub fn remember(&mut self, pd: usize, way: Way, va: u64, table: u64) {
        if let Some(h) = self.hints.get_mut(pd) {
            h[way as usize] = Hint {
                region: (va >> REGION_SHIFT) + 1,
                table,
            };
        }
    }

    /// Drops PD `pd`'s hints (its root table changes or goes).
    pub fn forget(&mut self, pd: usize) {
        if let Some(h) = self.hints.get_mut(pd) {
            *h = [NONE; 2];
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
        h.remember(1, Way::Handoff, va + 0x3000, 0xabc000);
        assert_eq!(h.get(1, va), Some(0xabc000));
        assert_eq!(h.get(1, va + 0x1f_f000), Some(0xabc000));
        assert_eq!(h.get(1, va + 0x20_0000), None, "the next region");
        assert_eq!(h.get(1, va - 0x1000), None, "the region before");
        assert_eq!(h.get(2, va), None, "another PD");
        h.forget(1);
        assert_eq!(h.get(1, va), None);
    }

    #[test]
    fn the_two_ways_are_kept_apart_and_both_looked_at() {
        let mut h = LeafHints::new(2);
        let (argbufs, heap) = (0x1000_0040_0000u64, 0x2000_0000_0000u64);
        h.remember(1, Way::Handoff, argbufs, 0x1000);
        h.remember(1, Way::Fill, heap, 0x2000);
        assert_eq!(h.get(1, argbufs), Some(0x1000));
        assert_eq!(h.get(1, heap), Some(0x2000));
        // A fill elsewhere replaces the fill hint only.
        h.remember(1, Way::Fill, heap + 0x20_0000, 0x3000);
        assert_eq!(h.get(1, argbufs), Some(0x1000));
        assert_eq!(h.get(1, heap), None);
        assert_eq!(h.get(1, heap + 0x20_0000), Some(0x3000));
        h.forget(1);
        assert_eq!(h.get(1, argbufs), None);
        assert_eq!(h.get(1, heap + 0x20_0000), None);
    }

    #[test]
    fn address_zero_and_out_of_range_pds_have_no_hint() {
        let mut h = LeafHints::new(2);
        assert_eq!(h.get(0, 0), None);
        h.remember(0, Way::Fill, 0, 0x5000);
        assert_eq!(h.get(0, 0x1000), Some(0x5000));
        h.remember(7, Way::Fill, 0, 0x5000);
        assert_eq!(h.get(7, 0), None);
        h.forget(7);
    }
}
