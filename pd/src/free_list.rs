//! A free list of slot numbers `0..capacity` (VMA indices of one size class).
//!
//! The paper populates every free list at initialisation (§4.4). Here the never-used tail of
//! the range is kept as a bump counter so that construction is O(1) whatever the capacity;
//! freed slots go on a LIFO stack and are reused first (their VTE is likely still cached).

use alloc::vec::Vec;

/// Free slot numbers of one size class.
#[derive(Clone, Debug)]
pub struct FreeList {
    capacity: u32,
    next_fresh: u32,
    freed: Vec<u32>,
}

impl FreeList {
    /// A list holding every slot of `0..capacity`.
    pub const fn new(capacity: u32) -> FreeList {
        FreeList {
            capacity,
            next_fresh: 0,
            freed: Vec::new(),
        }
    }

    /// Takes a free slot.
    pub fn pop(&mut self) -> Option<u32> {
        if let Some(i) = self.freed.pop() {
            return Some(i);
        }
        if self.next_fresh < self.capacity {
            self.next_fresh += 1;
            return Some(self.next_fresh - 1);
        }
        None
    }

    /// Takes a free slot for which `ok` holds: the most recently freed such slot, else the
    /// first fresh one (fresh slots skipped over stay free, for [`FreeList::pop`]).
    pub fn pop_where(&mut self, ok: impl Fn(u32) -> bool) -> Option<u32> {
        if let Some(at) = self.freed.iter().rposition(|&s| ok(s)) {
            return Some(self.freed.remove(at));
        }
        while self.next_fresh < self.capacity {
            let slot = self.next_fresh;
            self.next_fresh += 1;
            if ok(slot) {
                return Some(slot);
            }
            self.freed.push(slot);
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
        if let Some(at) = self.freed.iter().rposition(|&s| s == slot) {
            self.freed.remove(at);
            return true;
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
        self.freed.len() + (self.capacity - self.next_fresh) as usize
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
