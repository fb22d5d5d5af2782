//! A free list of slot numbers `0..capacity` (VMA indices of one size class).
//!
//! The paper populates every free list at initialisation (§4.4). Here the never-used tail of
//! the range is kept as a bump counter so that construction is O(1) whatever the capacity;
//! freed slots go on a LIFO stack and are reused first (their VTE is likely still cached).
//! Slots that a choosy take ([`FreeList::pop_where`]: a μprocess area, which must lie clear
//! of the 4 GiB edges) passed over wait on a stack of their own, which plain takes use first:
//! a choosy take never looks at the same unsuitable slot twice.

use alloc::vec::Vec;

/// Free slot numbers of one size class.
#[derive(Clone, Debug)]
pub struct FreeList {
    capacity: u32,
    next_fresh: u32,
    freed: Vec<u32>,
    /// Free slots a [`FreeList::pop_where`] found unsuitable.
    passed: Vec<u32>,
}

impl FreeList {
    /// A list holding every slot of `0..capacity`.
    pub const fn new(capacity: u32) -> FreeList {
        FreeList {
            capacity,
            next_fresh: 0,
            freed: Vec::new(),
            passed: Vec::new(),
        }
    }

    /// Takes a free slot: one a choosy take passed over, else the most recently freed one, else
    /// the first fresh one.
    pub fn pop(&mut self) -> Option<u32> {
        if let Some(i) = self.passed.pop().or_else(|| self.freed.pop()) {
            return Some(i);
        }
        if self.next_fresh < self.capacity {
            self.next_fresh += 1;
            return Some(self.next_fresh - 1);
        }
        None
    }

    /// Takes a free slot for which `ok` holds: the most recently freed such slot, else the
    /// first fresh one. `ok` must be the same property of a slot at every call: the slots it
    /// rejects are kept apart (see the module documentation) and not looked at again until
    /// they are taken and freed, so a call costs what it finds, not the free slots before it.
    pub fn pop_where(&mut self, ok: impl Fn(u32) -> bool) -> Option<u32> {
        while let Some(slot) = self.freed.pop() {
            if ok(slot) {
                return Some(slot);
            }
            self.passed.push(slot);
        }
        while self.next_fresh < self.capacity {
            let slot = self.next_fresh;
            self.next_fresh += 1;
            if ok(slot) {
                return Some(slot);
            }
            self.passed.push(slot);
        }
        None
    }

    /// Returns a slot. The caller guarantees it was taken with [`FreeList::pop`] and is not
    /// already free.
    pub fn push(&mut self, slot: u32) {
        debug_assert!(slot < self.next_fresh);
        self.freed.push(slot);
    }

    /// Takes the free slot `slot` itself (one returned with [`FreeList::push`] or never
    /// handed out); false when it is not free.
    pub fn take(&mut self, slot: u32) -> bool {
        for list in [&mut self.freed, &mut self.passed] {
            if let Some(at) = list.iter().rposition(|&s| s == slot) {
                list.remove(at);
                return true;
            }
        }
        if slot >= self.next_fresh && slot < self.capacity {
            // Slots skipped over become freed ones, so the fresh tail stays a range.
            self.freed.extend(self.next_fresh..slot);
            self.next_fresh = slot + 1;
            return true;
        }
        false
    }

    /// Number of free slots.
    pub fn len(&self) -> usize {
        self.freed.len() + self.passed.len() + (self.capacity - self.next_fresh) as usize
    }

    /// True when no slot is free.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of slots the list manages.
    pub const fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Every free slot (for consistency checks; O(free slots)).
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.freed
            .iter()
            .chain(&self.passed)
            .copied()
            .chain(self.next_fresh..self.capacity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_every_slot_once_then_reuses_freed_ones() {
        let mut f = FreeList::new(3);
        assert_eq!(f.len(), 3);
        assert_eq!(
            (f.pop(), f.pop(), f.pop(), f.pop()),
            (Some(0), Some(1), Some(2), None)
        );
        assert!(f.is_empty());
        f.push(1);
        assert_eq!(f.iter().collect::<Vec<_>>(), [1]);
        assert_eq!(f.pop(), Some(1));
        assert_eq!(f.pop(), None);
    }

    #[test]
    fn a_choosy_take_keeps_what_it_passed_over_for_plain_takes() {
        let even = |s: u32| s % 2 == 0;
        let mut f = FreeList::new(10);
        // Fresh slots: 1 is passed over on the way to 2.
        assert_eq!((f.pop_where(even), f.pop_where(even)), (Some(0), Some(2)));
        assert_eq!(
            f.pop(),
            Some(1),
            "a plain take uses a passed-over slot first"
        );
        f.push(1);
        f.push(0);
        f.push(2);
        // 2 and 0 were freed last: taken from the top; 1 is passed over once, then kept apart.
        assert_eq!((f.pop_where(even), f.pop_where(even)), (Some(2), Some(0)));
        assert_eq!(f.freed.len() + f.passed.len(), 1);
        assert_eq!(
            f.pop_where(even),
            Some(4),
            "then the fresh ones (3 passed over)"
        );
        assert!(f.take(3) && !f.take(3));
        assert_eq!(f.len(), 10 - 4, "2, 0, 4 and 3 are taken");
        let mut rest: Vec<u32> = f.iter().collect();
        rest.sort_unstable();
        assert_eq!(rest, [1, 5, 6, 7, 8, 9]);
        assert_eq!((f.pop_where(even), f.pop_where(even)), (Some(6), Some(8)));
        // Only odd slots are left, all passed over once: none is looked at again.
        assert_eq!(f.pop_where(even), None);
        assert_eq!((f.freed.len(), f.passed.len(), f.len()), (0, 4, 4));
    }

    #[test]
    fn every_slot_is_handed_out_once_whatever_the_mix_of_takes() {
        let mut f = FreeList::new(64);
        let mut held = alloc::collections::BTreeSet::new();
        for round in 0..400u32 {
            let slot = match round % 5 {
                0 | 1 => f.pop_where(|s| s % 3 == 0),
                2 => f.pop(),
                _ => {
                    if let Some(&s) = held.iter().nth((round as usize * 7) % held.len().max(1)) {
                        held.remove(&s);
                        f.push(s);
                    }
                    None
                }
            };
            if let Some(s) = slot {
                assert!(held.insert(s), "slot {s} handed out twice");
            }
            assert_eq!(f.len() + held.len(), 64);
        }
    }

    #[test]
    fn a_given_slot_is_taken_once_whether_freed_or_fresh() {
        let mut f = FreeList::new(6);
        assert_eq!((f.pop(), f.pop(), f.pop()), (Some(0), Some(1), Some(2)));
        f.push(0);
        f.push(2);
        assert!(f.take(0) && !f.take(0) && !f.take(1));
        assert!(f.take(4) && !f.take(4) && !f.take(6));
        assert_eq!(f.len(), 3);
        let mut rest: Vec<u32> = f.iter().collect();
        rest.sort_unstable();
        assert_eq!(rest, [2, 3, 5]);
        assert_eq!(
            (f.pop(), f.pop(), f.pop(), f.pop()),
            (Some(3), Some(2), Some(5), None)
        );
    }
}
