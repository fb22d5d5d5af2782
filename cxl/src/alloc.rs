//! The data-page allocator: one owner word per data page, taken and given back with
//! compare-exchange by any node, with no lock.
//!
//! Invariants:
//! - A page is free exactly when its owner word is zero. Taking it is one compare-exchange from
//!   zero to its owner's tag, so there is no moment when a page is taken but unowned, and a
//!   node that dies right after leaves a page that names its owner.
//! - The tag names a directory slot and the slot's epoch (bumped each time the slot is claimed):
//!   only a checkpoint slot owns pages.
//! - A page is given back with a compare-exchange from its exact tag to zero, so giving it back
//!   twice (its owner and a collector both) is harmless: the second finds another tag, or zero,
//!   and leaves it.
//! - A page is an orphan, and a sweep frees it, when its slot's epoch has
//!   moved past the tag's, or the slot is free in the tag's epoch. A page with a newer epoch than
//!   the sweep's snapshot of its slot was taken after the snapshot and is kept.

use crate::directory::{SlotState, State};
use crate::header::SLOTS;
use crate::region::{PAGE, Region};
use crate::{Attached, CxlError};
use alloc::vec::Vec;
use core::sync::atomic::Ordering;

/// Who owns a data page: a directory slot in one of its epochs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    /// The slot.
    pub slot: u32,
    /// The slot's epoch when the page was taken.
    pub epoch: u32,
}

impl Owner {
    /// The owner word: epoch in the high half, slot + 1 in the low half (never zero).
    pub(crate) fn word(self) -> u64 {
        (u64::from(self.epoch) << 32) | (u64::from(self.slot) + 1)
    }

    /// The owner named by a nonzero owner word (the slot may be out of range if it is corrupt).
    fn from_word(word: u64) -> Option<Owner> {
        let low = word as u32;
        (low != 0).then(|| Owner {
            slot: low - 1,
            epoch: (word >> 32) as u32,
        })
    }
}

impl<R: Region> Attached<R> {
    /// Offset of the owner word of data page `page`.
    fn owner_at(&self, page: u64) -> u64 {
        self.header().layout.owners + page * 8
    }

    /// Byte offset in the region of data page `page`.
    pub fn page_offset(&self, page: u32) -> u64 {
        self.header().layout.data + u64::from(page) * PAGE
    }

    /// Who owns data page `page` (`None`: free, or no such page).
    pub fn page_owner(&self, page: u32) -> Option<Owner> {
        if u64::from(page) >= self.header().layout.data_pages {
            return None;
        }
        Owner::from_word(self.region().load_u64(self.owner_at(u64::from(page))))
    }

    /// Data pages no one owns.
    pub fn free_pages(&self) -> u64 {
        let r = self.region();
        (0..self.header().layout.data_pages)
            .filter(|&p| r.load_u64(self.owner_at(p)) == 0)
            .count() as u64
    }

    /// Takes a free data page for `owner` ([`CxlError::RegionFull`] if there is none), searching
    /// from after the last page this view took.
    pub(crate) fn alloc_page(&self, owner: Owner) -> Result<u32, CxlError> {
        let r = self.region();
        let pages = self.header().layout.data_pages;
        let start = self.cursor.load(Ordering::Relaxed) % pages;
        for i in 0..pages {
            let page = (start + i) % pages;
            let at = self.owner_at(page);
            if r.load_u64(at) == 0 && r.compare_exchange_u64(at, 0, owner.word()).is_ok() {
                r.persist(at, 8);
                self.cursor.store(page + 1, Ordering::Relaxed);
                return Ok(page as u32);
            }
        }
        Err(CxlError::RegionFull)
    }

    /// Takes `count` (at least 1) free data pages in a row for `owner`: the first one
    /// ([`CxlError::RegionFull`] if no run is free).
    pub(crate) fn alloc_run(&self, count: u64, owner: Owner) -> Result<u32, CxlError> {
        let r = self.region();
        let pages = self.header().layout.data_pages;
        let mut first = 0;
        while first + count <= pages {
            let run = first..first + count;
            // The first page of the run found taken, or the first one we failed to take.
            let taken = match run.clone().find(|&p| r.load_u64(self.owner_at(p)) != 0) {
                Some(p) => Some(p),
                None => self.claim(run, owner),
            };
            match taken {
                Some(p) => first = p + 1,
                None => {
                    r.persist(self.owner_at(first), count * 8);
                    return Ok(first as u32);
                }
            }
        }
        Err(CxlError::RegionFull)
    }

    /// Takes every page of `run` for `owner`, or none: `None`, or the first page it failed to
    /// take (the pages before it given back).
    fn claim(&self, run: core::ops::Range<u64>, owner: Owner) -> Option<u64> {
        let start = run.start;
        let lost = run.clone().find(|&p| {
            self.region()
                .compare_exchange_u64(self.owner_at(p), 0, owner.word())
                .is_err()
        })?;
        for p in start..lost {
            self.free_page(p as u32, owner);
        }
        Some(lost)
    }

    /// Gives data page `page` back if `owner` still owns it; whether this call freed it.
    pub(crate) fn free_page(&self, page: u32, owner: Owner) -> bool {
        if u64::from(page) >= self.header().layout.data_pages {
            return false;
        }
        let r = self.region();
        let at = self.owner_at(u64::from(page));
        let freed = r.compare_exchange_u64(at, owner.word(), 0).is_ok();
        r.persist(at, 8);
        freed
    }

    /// Gives back every page `owner` owns, by a scan of the whole owner table: how many.
    pub(crate) fn free_owned_by(&self, owner: Owner) -> u64 {
        let r = self.region();
        let word = owner.word();
        (0..self.header().layout.data_pages)
            .filter(|&p| r.load_u64(self.owner_at(p)) == word && self.free_page(p as u32, owner))
            .count() as u64
    }

    /// Frees every orphan page (see the module's invariants): how many.
    pub(crate) fn sweep(&self) -> u64 {
        let r = self.region();
        // The snapshot comes first: every tag read later is at most as old as it.
        let slots: Vec<Option<SlotState>> = (0..SLOTS).map(|s| self.slot_state(s)).collect();
        let mut freed = 0;
        for page in 0..self.header().layout.data_pages {
            let at = self.owner_at(page);
            let word = r.load_u64(at);
            let Some(owner) = Owner::from_word(word) else {
                continue;
            };
            let orphan = match slots.get(owner.slot as usize) {
                // A tag naming no slot is corrupt: no checkpoint can own the page.
                None => true,
                // A slot whose state word is corrupt keeps its pages.
                Some(None) => false,
                Some(Some(s)) => {
                    owner.epoch < s.epoch || (owner.epoch == s.epoch && s.state == State::Free)
                }
            };
            if orphan && r.compare_exchange_u64(at, word, 0).is_ok() {
                r.persist(at, 8);
                freed += 1;
            }
        }
        freed
    }
}
