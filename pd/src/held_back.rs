//! Revocations held back: the leaves a `pmove` took from a PD that no CPU has loaded.
//!
//! A PD's page table is only used while a CPU has it loaded, and without PCID every CR3 write
//! flushes the TLB. So when a PD that this CPU is about to switch away from (and that no other
//! CPU may cache) loses its rights on a VMA, its leaves for that VMA cannot be used until the
//! PD is loaded again. The kernel then notes them here instead of walking the table at once.
//! Before any CPU loads the PD again, before its table is recycled and before the VMA's frames
//! are freed, the noted leaves are cleared ([`HeldBack::take_pd`], [`HeldBack::take_vma`]).
//! If the VMA comes back to the PD first with at least the rights the leaves can carry (an
//! ArgBuf handed down a call chain and back), the note is withdrawn ([`HeldBack::take`]) and
//! the leaves are valid again: no page-table walk at all.
//!
//! This module keeps the notes; the kernel's Jord state clears the leaves.

use crate::{PdId, Perm};
use alloc::vec;
use alloc::vec::Vec;

/// One held-back revocation: `pd`'s leaves for `[base, base + len)`, carrying at most `had`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Note {
    /// Whose table holds the leaves.
    pub pd: PdId,
    /// The VMA's base.
    pub base: u64,
    /// The range's length in bytes (page-rounded).
    pub len: u64,
    /// The rights `pd` held on the VMA when it lost them (the most its leaves carry).
    pub had: Perm,
}

/// The held-back revocations, at most a fixed number at once.
#[derive(Clone, Debug)]
pub struct HeldBack {
    notes: Vec<Note>,
    per_pd: Vec<u16>,
    capacity: usize,
}

impl HeldBack {
    /// Room for `capacity` notes, for PD ids below `max_pds`.
    pub fn new(capacity: usize, max_pds: usize) -> HeldBack {
        HeldBack {
            notes: Vec::with_capacity(capacity),
            per_pd: vec![0; max_pds],
            capacity,
        }
    }

    /// True when nothing is held back.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.notes.is_empty()
    }

    /// True when the notes are at capacity: revoke at once instead.
    pub fn is_full(&self) -> bool {
        self.notes.len() >= self.capacity
    }

    /// True when something is held back for `pd`.
    #[inline(always)]
    pub fn holds(&self, pd: PdId) -> bool {
        self.per_pd.get(pd.index()).is_some_and(|&n| n != 0)
    }

    /// Notes `note`; a note for the same PD and VMA is merged into it. Returns false (nothing
    /// noted) when full or when the PD id is out of range.
    #[inline(always)]
    pub fn push(&mut self, note: Note) -> bool {
        if let Some(n) = self
            .notes
            .iter_mut()
            .find(|n| n.pd == note.pd && n.base == note.base)
        {
            n.had = n.had.union(note.had);
            n.len = n.len.max(note.len);
            return true;
        }
        if self.is_full() || note.pd.index() >= self.per_pd.len() {
            return false;
        }
        self.per_pd[note.pd.index()] += 1;
        self.notes.push(note);
        true
    }

    /// Removes and returns the note for `pd`'s leaves of the VMA at `base`, if any.
    pub fn take(&mut self, pd: PdId, base: u64) -> Option<Note> {
        if !self.holds(pd) {
            return None;
        }
        let i = self
            .notes
            .iter()
            .position(|n| n.pd == pd && n.base == base)?;
        Some(self.remove(i))
    }

    /// Removes and returns every note for `pd`.
    pub fn take_pd(&mut self, pd: PdId) -> Vec<Note> {
        if !self.holds(pd) {
            return Vec::new();
        }
        self.take_where(|n| n.pd == pd)
    }

    /// Removes and returns every note for the VMA at `base`.
    pub fn take_vma(&mut self, base: u64) -> Vec<Note> {
        if self.is_empty() {
            return Vec::new();
        }
        self.take_where(|n| n.base == base)
    }

    fn take_where(&mut self, pick: impl Fn(&Note) -> bool) -> Vec<Note> {
        let mut taken = Vec::new();
        let mut i = 0;
        while i < self.notes.len() {
            if pick(&self.notes[i]) {
                taken.push(self.remove(i));
            } else {
                i += 1;
            }
        }
        taken
    }

    fn remove(&mut self, i: usize) -> Note {
        let n = self.notes.swap_remove(i);
        self.per_pd[n.pd.index()] -= 1;
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pd(n: u64) -> PdId {
        PdId::from_raw(n).unwrap()
    }

    fn note(p: u64, base: u64) -> Note {
        Note {
            pd: pd(p),
            base,
            len: 4096,
            had: Perm::RW,
        }
    }

    #[test]
    fn a_note_is_taken_back_by_pd_and_base_only() {
        let mut h = HeldBack::new(4, 16);
        assert!(h.push(note(1, 0x1000)));
        assert!(h.holds(pd(1)));
        assert!(!h.holds(pd(2)));
        assert_eq!(h.take(pd(2), 0x1000), None);
        assert_eq!(h.take(pd(1), 0x2000), None);
        assert_eq!(h.take(pd(1), 0x1000), Some(note(1, 0x1000)));
        assert!(!h.holds(pd(1)));
        assert!(h.is_empty());
    }

    #[test]
    fn notes_for_the_same_leaves_merge() {
        let mut h = HeldBack::new(1, 16);
        assert!(h.push(Note {
            had: Perm::R,
            ..note(1, 0x1000)
        }));
        assert!(h.push(Note {
            had: Perm::W,
            len: 8192,
            ..note(1, 0x1000)
        }));
        let n = h.take(pd(1), 0x1000).unwrap();
        assert_eq!(n.had, Perm::RW);
        assert_eq!(n.len, 8192);
        assert!(!h.holds(pd(1)));
    }

    #[test]
    fn a_full_set_refuses_new_notes() {
        let mut h = HeldBack::new(2, 16);
        assert!(h.push(note(1, 0x1000)));
        assert!(h.push(note(2, 0x1000)));
        assert!(h.is_full());
        assert!(!h.push(note(3, 0x1000)));
        assert!(!h.holds(pd(3)));
        // A merge needs no room.
        assert!(h.push(note(2, 0x1000)));
    }

    #[test]
    fn taking_by_pd_or_by_vma_leaves_the_rest() {
        let mut h = HeldBack::new(8, 16);
        for (p, b) in [(1, 0x1000), (1, 0x2000), (2, 0x1000), (3, 0x3000)] {
            assert!(h.push(note(p, b)));
        }
        let mut by_pd = h.take_pd(pd(1));
        by_pd.sort_by_key(|n| n.base);
        assert_eq!(by_pd, [note(1, 0x1000), note(1, 0x2000)]);
        assert!(!h.holds(pd(1)));
        assert!(h.holds(pd(2)));
        assert_eq!(h.take_vma(0x1000), [note(2, 0x1000)]);
        assert!(!h.holds(pd(2)));
        assert!(h.holds(pd(3)));
        assert_eq!(h.take_pd(pd(3)), [note(3, 0x3000)]);
        assert!(h.is_empty());
    }

    #[test]
    fn per_pd_counts_follow_a_random_sequence() {
        // A small deterministic generator: the counts must always match the notes.
        let mut h = HeldBack::new(6, 8);
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..5_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let p = 1 + x % 7;
            let base = 0x1000 * (1 + (x >> 8) % 4);
            match (x >> 16) % 4 {
                0 => {
                    h.push(note(p, base));
                }
                1 => {
                    h.take(pd(p), base);
                }
                2 => {
                    h.take_pd(pd(p));
                }
                _ => {
                    h.take_vma(base);
                }
            }
            for q in 0..8 {
                let n = h.notes.iter().filter(|n| n.pd.index() == q).count();
                assert_eq!(h.per_pd[q] as usize, n);
            }
            assert!(h.notes.len() <= 6);
        }
    }
}
