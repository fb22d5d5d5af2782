//! Which pages of one region a snapshot holds a copy of, and in which slot.
//!
//! A snapshot copies only the pages of a region that held data when it was taken (the kernel
//! zeroes a page on its first use, so a page never used reads as zeros); slot `i` of the
//! snapshot's frames holds the `i`-th of those pages in address order.

use alloc::vec::Vec;

/// The pages of one region a snapshot holds, in address order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotIndex {
    pages: Vec<u32>,
}

impl SnapshotIndex {
    /// An index of `pages` (page numbers within the region, in any order; repeats count once).
    pub fn new(mut pages: Vec<u32>) -> SnapshotIndex {
        pages.sort_unstable();
        pages.dedup();
        SnapshotIndex { pages }
    }

    /// How many pages (and slots) it holds.
    pub fn len(&self) -> usize {
        self.pages.len()
    }

    /// Whether it holds no page.
    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }

    /// The slot holding page `page`, or `None` when the snapshot has zeros there.
    pub fn slot_of(&self, page: u32) -> Option<usize> {
        self.pages.binary_search(&page).ok()
    }

    /// The pages held, in address order (slot order).
    pub fn pages(&self) -> &[u32] {
        &self.pages
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_address_order() {
        let ix = SnapshotIndex::new(alloc::vec![9, 2, 5, 2]);
        assert_eq!(ix.len(), 3);
        assert_eq!(ix.pages(), &[2, 5, 9]);
        assert_eq!(
            [0, 2, 5, 9, 10].map(|p| ix.slot_of(p)),
            [None, Some(0), Some(1), Some(2), None]
        );
        assert!(SnapshotIndex::default().is_empty());
    }
}
