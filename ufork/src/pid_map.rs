//! A map from live PIDs to per-μprocess state with constant-time look-ups: the PID names its
//! slot (`pid % slots`).
//!
//! The process table hands out only PIDs whose slot is free
//! ([`crate::process::ProcessTable`]), so no two μprocesses share one; a map of the kernel's
//! per-μprocess state with as many slots then never sees a clash either. A look-up is a
//! division and one comparison, where an ordered map walks nodes; the kernel makes a dozen
//! per pipe round trip.

use crate::process::Pid;
use alloc::vec::Vec;

/// Values by PID, one slot per `pid % slots`.
#[derive(Clone, Debug)]
pub struct PidMap<T> {
    slots: Vec<Option<(Pid, T)>>,
    /// One bit per slot, set when it holds a value: iterations skip 64 free slots at a time.
    occupied: Vec<u64>,
    len: usize,
}

/// An insert refused: the slot holds another PID's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotTaken<T> {
    /// The PID holding the slot.
    pub holder: Pid,
    /// The value that was not inserted.
    pub value: T,
}

impl<T> PidMap<T> {
    /// An empty map of `slots` slots (at least one).
    pub fn with_slots(slots: usize) -> PidMap<T> {
        let mut v = Vec::new();
        v.resize_with(slots.max(1), || None);
        let occupied = alloc::vec![0; v.len().div_ceil(64)];
        PidMap {
            slots: v,
            occupied,
            len: 0,
        }
    }

    fn index(&self, pid: Pid) -> usize {
        pid.raw() as usize % self.slots.len()
    }

    /// How many slots it has.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// How many PIDs it holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `pid`'s slot is free (so `pid` may be inserted).
    pub fn is_free_for(&self, pid: Pid) -> bool {
        self.slots[self.index(pid)].is_none()
    }

    /// The value of `pid`.
    pub fn get(&self, pid: Pid) -> Option<&T> {
        match &self.slots[self.index(pid)] {
            Some((p, v)) if *p == pid => Some(v),
            _ => None,
        }
    }

    /// The value of `pid`, to change.
    pub fn get_mut(&mut self, pid: Pid) -> Option<&mut T> {
        let i = self.index(pid);
        match &mut self.slots[i] {
            Some((p, v)) if *p == pid => Some(v),
            _ => None,
        }
    }

    /// Whether it holds `pid`.
    pub fn contains(&self, pid: Pid) -> bool {
        self.get(pid).is_some()
    }

    /// Sets `pid`'s value; returns the one it replaces, or [`SlotTaken`] with `value` (and
    /// changes nothing) when another PID holds the slot.
    pub fn insert(&mut self, pid: Pid, value: T) -> Result<Option<T>, SlotTaken<T>> {
        let i = self.index(pid);
        let slot = &mut self.slots[i];
        match slot {
            Some((p, _)) if *p != pid => Err(SlotTaken { holder: *p, value }),
            Some((_, v)) => Ok(Some(core::mem::replace(v, value))),
            None => {
                *slot = Some((pid, value));
                self.occupied[i / 64] |= 1 << (i % 64);
                self.len += 1;
                Ok(None)
            }
        }
    }

    /// Sets the value of `pid`, whose slot must be free: [`SlotTaken`] with `value` (nothing
    /// changed) when any PID, `pid` included, holds it.
    pub fn insert_new(&mut self, pid: Pid, value: T) -> Result<(), SlotTaken<T>> {
        let i = self.index(pid);
        let slot = &mut self.slots[i];
        if let Some((p, _)) = slot {
            return Err(SlotTaken { holder: *p, value });
        }
        *slot = Some((pid, value));
        self.occupied[i / 64] |= 1 << (i % 64);
        self.len += 1;
        Ok(())
    }

    /// Removes `pid`, returning what `f` makes of its value, which is dropped where it lies
    /// (not moved out first, as [`PidMap::remove`] does).
    pub fn remove_with<R>(&mut self, pid: Pid, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        let i = self.index(pid);
        let r = match &mut self.slots[i] {
            Some((p, v)) if *p == pid => f(v),
            _ => return None,
        };
        self.len -= 1;
        self.occupied[i / 64] &= !(1 << (i % 64));
        self.slots[i] = None;
        Some(r)
    }

    /// Removes `pid`, returning its value.
    pub fn remove(&mut self, pid: Pid) -> Option<T> {
        let i = self.index(pid);
        match &self.slots[i] {
            Some((p, _)) if *p == pid => {
                self.len -= 1;
                self.occupied[i / 64] &= !(1 << (i % 64));
                self.slots[i].take().map(|(_, v)| v)
            }
            _ => None,
        }
    }

    /// The indices of the slots holding a value, in order.
    fn occupied_slots(&self) -> impl Iterator<Item = usize> + '_ {
        crate::tags::set_bits(self.occupied.iter().copied())
    }

    /// Every PID and value, in slot order (not PID order).
    pub fn iter(&self) -> impl Iterator<Item = (Pid, &T)> + '_ {
        self.occupied_slots()
            .filter_map(|i| self.slots[i].as_ref().map(|(p, v)| (*p, v)))
    }

    /// Every value, to change, in slot order.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut T> + '_ {
        self.slots
            .chunks_mut(64)
            .zip(self.occupied.iter().copied())
            .flat_map(|(chunk, word)| {
                // Split off the slot of each set bit in turn, from the lowest.
                let (mut rest, mut next, mut bits) = (chunk, 0usize, word);
                core::iter::from_fn(move || {
                    if bits == 0 {
                        return None;
                    }
                    let b = bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    let (slot, tail) = core::mem::take(&mut rest)[b - next..].split_first_mut()?;
                    (rest, next) = (tail, b + 1);
                    slot.as_mut().map(|(_, v)| v)
                })
            })
    }

    /// Every PID, lowest first.
    pub fn pids(&self) -> Vec<Pid> {
        let mut v: Vec<Pid> = self.iter().map(|(p, _)| p).collect();
        v.sort_unstable();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::BTreeMap;
    use proptest::prelude::*;

    #[test]
    fn a_pid_finds_its_value_and_a_clash_changes_nothing() {
        let mut m = PidMap::with_slots(4);
        assert_eq!(m.insert(Pid::from_raw(5), 'a'), Ok(None));
        let taken = SlotTaken {
            holder: Pid::from_raw(5),
            value: 'b',
        };
        assert_eq!(m.insert(Pid::from_raw(9), 'b'), Err(taken));
        assert_eq!(m.get(Pid::from_raw(9)), None);
        assert_eq!(m.get(Pid::from_raw(5)), Some(&'a'));
        assert_eq!(m.insert(Pid::from_raw(5), 'c'), Ok(Some('a')));
        assert_eq!(m.remove(Pid::from_raw(9)), None);
        assert_eq!(m.remove(Pid::from_raw(5)), Some('c'));
        assert!(m.is_empty() && m.is_free_for(Pid::from_raw(9)));
    }

    #[test]
    fn insert_new_takes_only_a_free_slot() {
        let mut m = PidMap::with_slots(4);
        assert_eq!(m.insert_new(Pid::from_raw(5), 'a'), Ok(()));
        let taken = |value| SlotTaken {
            holder: Pid::from_raw(5),
            value,
        };
        assert_eq!(m.insert_new(Pid::from_raw(5), 'b'), Err(taken('b')));
        assert_eq!(m.insert_new(Pid::from_raw(9), 'c'), Err(taken('c')));
        assert_eq!((m.len(), m.get(Pid::from_raw(5))), (1, Some(&'a')));
        assert_eq!(m.remove(Pid::from_raw(5)), Some('a'));
        assert_eq!(m.insert_new(Pid::from_raw(9), 'd'), Ok(()));
        assert_eq!(m.remove_with(Pid::from_raw(5), |v| *v), None);
        assert_eq!(m.remove_with(Pid::from_raw(9), |v| *v), Some('d'));
        assert!(m.is_empty() && m.get(Pid::from_raw(9)).is_none());
    }

    proptest! {
        /// Against an ordered map, with inserts that respect free slots (as the process table
        /// hands PIDs out).
        #[test]
        fn behaves_as_an_ordered_map_of_slot_disjoint_pids(
            ops in proptest::collection::vec((0u8..3, 1u32..400), 0..300),
            slots in 1usize..150,
        ) {
            let mut m = PidMap::with_slots(slots);
            let mut model: BTreeMap<Pid, u32> = BTreeMap::new();
            for (i, (op, raw)) in ops.into_iter().enumerate() {
                let pid = Pid::from_raw(raw);
                match op {
                    0 if m.is_free_for(pid) || m.contains(pid) => {
                        prop_assert_eq!(m.insert(pid, i as u32).unwrap(), model.insert(pid, i as u32));
                    }
                    0 => prop_assert!(m.insert(pid, 0).is_err()),
                    1 => prop_assert_eq!(m.remove(pid), model.remove(&pid)),
                    _ => prop_assert_eq!(m.get(pid), model.get(&pid)),
                }
                prop_assert_eq!(m.len(), model.len());
                prop_assert_eq!(m.pids(), model.keys().copied().collect::<Vec<_>>());
                let mut values: Vec<u32> = m.values_mut().map(|v| *v).collect();
                values.sort_unstable();
                let mut expected: Vec<u32> = model.values().copied().collect();
                expected.sort_unstable();
                prop_assert_eq!(values, expected);
            }
        }
    }
}
