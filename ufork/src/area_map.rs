//! A map from area bases to per-area state whose storage is kept for the next area: the
//! lazy-copy state of the areas a loop of forks makes and ends holds its allocations (page
//! bits, lists of dependents) across them instead of making and freeing them each time.
//!
//! Keys sit in one sorted vector (binary search; an insertion or removal shifts the keys
//! above it, 16 bytes each); values sit in slots that a removal *recycles* ([`Recycle`]: emptied,
//! their capacity kept) and the next insertion takes back.

use alloc::vec::Vec;

/// State whose emptied form keeps its allocations.
pub trait Recycle: Default {
    /// Empties the value as if new, keeping what it allocated.
    fn recycle(&mut self);
}

/// Per-area state by area base (see the module documentation).
#[derive(Debug, Default)]
pub struct AreaMap<T> {
    /// (base, slot), sorted by base.
    index: Vec<(u64, u32)>,
    slots: Vec<T>,
    /// Slots holding recycled values, not in `index`.
    free: Vec<u32>,
}

impl<T: Recycle> AreaMap<T> {
    /// An empty map.
    pub const fn new() -> AreaMap<T> {
        AreaMap {
            index: Vec::new(),
            slots: Vec::new(),
            free: Vec::new(),
        }
    }

    fn slot(&self, base: u64) -> Option<usize> {
        self.index
            .binary_search_by_key(&base, |&(b, _)| b)
            .ok()
            .map(|i| self.index[i].1 as usize)
    }

    /// How many areas have state.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// True when no area has state.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Whether the area at `base` has state.
    pub fn contains(&self, base: u64) -> bool {
        self.slot(base).is_some()
    }

    /// The state of the area at `base`.
    pub fn get(&self, base: u64) -> Option<&T> {
        self.slot(base).map(|s| &self.slots[s])
    }

    /// The state of the area at `base`, mutably.
    pub fn get_mut(&mut self, base: u64) -> Option<&mut T> {
        self.slot(base).map(|s| &mut self.slots[s])
    }

    /// The state of the area at `base`, an empty (recycled or new) one if it had none.
    pub fn get_or_insert(&mut self, base: u64) -> &mut T {
        let s = match self.index.binary_search_by_key(&base, |&(b, _)| b) {
            Ok(i) => self.index[i].1 as usize,
            Err(i) => {
                let s = match self.free.pop() {
                    Some(s) => s as usize,
                    None => {
                        self.slots.push(T::default());
                        self.slots.len() - 1
                    }
                };
                self.index.insert(i, (base, s as u32));
                s
            }
        };
        &mut self.slots[s]
    }

    /// The states of two different areas, mutably (`None` for one that has none); both `None`
    /// when `a == b`.
    pub fn get2_mut(&mut self, a: u64, b: u64) -> (Option<&mut T>, Option<&mut T>) {
        let (sa, sb) = match (self.slot(a), self.slot(b)) {
            (Some(x), Some(y)) if x == y => return (None, None),
            pair => pair,
        };
        match (sa, sb) {
            (Some(x), Some(y)) => {
                let (lo, hi) = (x.min(y), x.max(y));
                let (left, right) = self.slots.split_at_mut(hi);
                let (l, h) = (&mut left[lo], &mut right[0]);
                if x < y {
                    (Some(l), Some(h))
                } else {
                    (Some(h), Some(l))
                }
            }
            (Some(x), None) => (Some(&mut self.slots[x]), None),
            (None, Some(y)) => (None, Some(&mut self.slots[y])),
            (None, None) => (None, None),
        }
    }

    /// Forgets the state of the area at `base` (its slot recycled); false if it had none.
    pub fn remove(&mut self, base: u64) -> bool {
        let Ok(i) = self.index.binary_search_by_key(&base, |&(b, _)| b) else {
            return false;
        };
        let (_, s) = self.index.remove(i);
        self.slots[s as usize].recycle();
        self.free.push(s);
        true
    }

    /// Forgets every area's state (the slots recycled).
    pub fn clear(&mut self) {
        for (_, s) in self.index.drain(..) {
            self.slots[s as usize].recycle();
            self.free.push(s);
        }
    }

    /// The bases with state, in order.
    pub fn bases(&self) -> impl Iterator<Item = u64> + '_ {
        self.index.iter().map(|&(b, _)| b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::BTreeMap;
    use alloc::vec;
    use proptest::prelude::*;

    #[derive(Debug, Default, Clone, PartialEq)]
    struct List(Vec<u64>);

    impl Recycle for List {
        fn recycle(&mut self) {
            self.0.clear();
        }
    }

    #[test]
    fn a_removed_slot_is_reused_empty_with_its_capacity() {
        let mut m = AreaMap::<List>::new();
        m.get_or_insert(0x2000).0.extend([1, 2, 3]);
        let cap = m.get(0x2000).unwrap().0.capacity();
        assert!(m.remove(0x2000));
        assert!(!m.remove(0x2000));
        assert!(m.get(0x2000).is_none());
        let again = m.get_or_insert(0x9000);
        assert!(again.0.is_empty());
        assert_eq!(
            again.0.capacity(),
            cap,
            "the recycled slot keeps its allocation"
        );
        assert_eq!(m.slots.len(), 1);
    }

    #[test]
    fn two_areas_borrowed_at_once() {
        let mut m = AreaMap::<List>::new();
        m.get_or_insert(1).0.push(10);
        m.get_or_insert(2).0.push(20);
        let (a, b) = m.get2_mut(2, 1);
        a.unwrap().0.push(21);
        b.unwrap().0.push(11);
        assert_eq!(m.get(1).unwrap().0, vec![10, 11]);
        assert_eq!(m.get(2).unwrap().0, vec![20, 21]);
        assert!(matches!(m.get2_mut(1, 1), (None, None)));
        assert!(matches!(m.get2_mut(1, 3), (Some(_), None)));
        assert!(matches!(m.get2_mut(3, 2), (None, Some(_))));
    }

    #[test]
    fn clear_recycles_everything() {
        let mut m = AreaMap::<List>::new();
        for b in [5, 1, 3] {
            m.get_or_insert(b).0.push(b);
        }
        assert_eq!(m.bases().collect::<Vec<_>>(), [1, 3, 5]);
        m.clear();
        assert!(m.is_empty() && m.free.len() == 3);
        assert!(m.get_or_insert(7).0.is_empty());
    }

    proptest! {
        /// Any sequence of inserts, pushes and removes agrees with a `BTreeMap`.
        #[test]
        fn behaves_as_a_btreemap(ops in proptest::collection::vec((0u8..3, 0u64..12, any::<u64>()), 0..200)) {
            let mut m = AreaMap::<List>::new();
            let mut model: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
            for (op, key, v) in ops {
                match op {
                    0 => {
                        m.get_or_insert(key).0.push(v);
                        model.entry(key).or_default().push(v);
                    }
                    1 => {
                        prop_assert_eq!(m.remove(key), model.remove(&key).is_some());
                    }
                    _ => {
                        prop_assert_eq!(m.get(key).map(|l| l.0.clone()), model.get(&key).cloned());
                    }
                }
                prop_assert_eq!(m.len(), model.len());
                prop_assert!(m.bases().eq(model.keys().copied()));
            }
        }
    }
}
