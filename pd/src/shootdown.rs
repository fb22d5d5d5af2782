//! Shootdown sets: the leaves that must leave PD page tables after a permission is revoked or
//! narrowed (the emulated VLB invalidation).
//!
//! The kernel applies a set by clearing the leaves in the named PD tables, flushing locally,
//! and sending IPIs only to the CPUs in each affected PD's sharer mask
//! ([`crate::sharers::Sharers::take_targets`]). It must finish before the PrivLib call returns
//! to the caller: a revoked right may not be usable afterwards on any CPU.

use alloc::vec::Vec;

use crate::pd_id::PdId;
use crate::size_class::page_round_up;

/// Whose page table holds the leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// One PD's table.
    Pd(PdId),
    /// Every PD's table (a Global VMA; the kernel may keep those leaves in a shared subtree).
    AllPds,
}

/// A page-aligned range of leaves to remove from a target's page table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Leaf {
    /// Whose table.
    pub target: Target,
    /// First address (page-aligned).
    pub base: u64,
    /// Length in bytes (a multiple of the page size).
    pub len: u64,
}

impl Leaf {
    /// True when this leaf range covers `addr` in `pd`'s table.
    pub fn covers(&self, pd: PdId, addr: u64) -> bool {
        let who = match self.target {
            Target::Pd(p) => p == pd,
            Target::AllPds => true,
        };
        who && addr >= self.base && addr - self.base < self.len
    }
}

/// Up to `N` items stored inline, spilling to the heap beyond that. Most PrivLib operations
/// revoke one VMA in one or two PDs, so their sets never allocate. Items are read back as one
/// slice, so iterating costs no more than a loop over an array.
#[derive(Clone, Debug)]
struct SmallList<T: Copy, const N: usize> {
    inline: [T; N],
    len: usize,
    spill: Vec<T>,
}

impl<T: Copy + PartialEq, const N: usize> SmallList<T, N> {
    /// An empty list; `fill` only initialises the unused inline slots.
    const fn new(fill: T) -> Self {
        SmallList {
            inline: [fill; N],
            len: 0,
            spill: Vec::new(),
        }
    }

    fn push(&mut self, item: T) {
        if self.len < N {
            self.inline[self.len] = item;
        } else {
            if self.spill.is_empty() {
                self.spill.extend_from_slice(&self.inline);
            }
            self.spill.push(item);
        }
        self.len += 1;
    }

    fn as_slice(&self) -> &[T] {
        if self.len <= N {
            &self.inline[..self.len]
        } else {
            &self.spill
        }
    }

    fn len(&self) -> usize {
        self.len
    }
}

impl<T: Copy + PartialEq, const N: usize> PartialEq for SmallList<T, N> {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl<T: Copy + PartialEq, const N: usize> Eq for SmallList<T, N> {}

const NO_LEAF: Leaf = Leaf {
    target: Target::AllPds,
    base: 0,
    len: 0,
};

/// The leaves an operation made stale, plus PDs whose whole table was dropped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shootdown {
    leaves: SmallList<Leaf, 2>,
    dropped: SmallList<PdId, 1>,
}

impl Default for Shootdown {
    fn default() -> Self {
        Self::new()
    }
}

impl Shootdown {
    /// An empty set.
    pub const fn new() -> Shootdown {
        Shootdown {
            leaves: SmallList::new(NO_LEAF),
            dropped: SmallList::new(PdId::KERNEL),
        }
    }

    /// Adds the leaves of `base..base + page_round_up(len)` in `target`'s table.
    pub fn push(&mut self, target: Target, base: u64, len: u64) {
        let len = page_round_up(len);
        if len != 0 {
            self.leaves.push(Leaf { target, base, len });
        }
    }

    /// Records that `pd`'s whole page table goes away (its PD was destroyed): the kernel frees
    /// the table and flushes it on every CPU of the PD's sharer mask.
    pub fn drop_pd(&mut self, pd: PdId) {
        self.dropped.push(pd);
    }

    /// Adds every entry of `other`.
    pub fn extend(&mut self, other: Shootdown) {
        for &l in other.leaves.as_slice() {
            self.leaves.push(l);
        }
        for &d in other.dropped.as_slice() {
            self.dropped.push(d);
        }
    }

    /// The leaf ranges.
    pub fn leaves(&self) -> impl Iterator<Item = Leaf> + '_ {
        self.leaves.as_slice().iter().copied()
    }

    /// Number of leaf ranges.
    pub fn leaf_count(&self) -> usize {
        self.leaves.len()
    }

    /// The PDs whose whole table was dropped.
    pub fn dropped(&self) -> &[PdId] {
        self.dropped.as_slice()
    }

    /// True when a PD's whole table was dropped.
    pub fn drops_any(&self) -> bool {
        self.dropped.len() > 0
    }

    /// True when nothing needs invalidating.
    pub fn is_empty(&self) -> bool {
        self.leaves.len() == 0 && self.dropped.len() == 0
    }

    /// True when a translation of `addr` cached for `pd` is removed by this set.
    pub fn covers(&self, pd: PdId, addr: u64) -> bool {
        self.dropped.as_slice().contains(&pd)
            || self.leaves.as_slice().iter().any(|l| l.covers(pd, addr))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coverage() {
        let a = PdId::from_raw(1).unwrap();
        let b = PdId::from_raw(2).unwrap();
        let mut s = Shootdown::new();
        assert!(s.is_empty());
        s.push(Target::Pd(a), 0x1000_0000_0000, 100);
        s.push(Target::Pd(a), 0x1000_0000_0000, 0);
        assert_eq!(s.leaf_count(), 1);
        assert_eq!(s.leaves().next().unwrap().len, 4096);
        assert!(s.covers(a, 0x1000_0000_0fff));
        assert!(!s.covers(a, 0x1000_0000_1000));
        assert!(!s.covers(b, 0x1000_0000_0000));
        let mut t = Shootdown::new();
        t.push(Target::AllPds, 0x1000_0001_0000, 4096);
        t.drop_pd(b);
        s.extend(t);
        assert!(s.covers(b, 0x1000_0000_0000));
        assert!(s.covers(a, 0x1000_0001_0000));
        assert_eq!(s.dropped(), [b]);
        for i in 0..10u64 {
            s.push(Target::Pd(a), 0x1000_0010_0000 + i * 4096, 4096);
        }
        assert_eq!(s.leaf_count(), 12);
        assert!(s.covers(a, 0x1000_0010_0000 + 9 * 4096));
        assert_eq!(s.leaves().count(), 12);
    }
}
