//! Per-PD sharer masks: which CPUs may cache translations of a PD (emulates the paper's VTD).
//!
//! In Jord the VTD, next to the LLC directory, records which cores' VLBs hold a VMA and sends
//! invalidations only to them (§4.2). Here translations live in per-PD page tables cached by
//! each CPU's TLB, so the sharer set is kept per PD: a CPU joins when it loads the PD
//! ([`Sharers::note_ran`]) and leaves when its TLB entries for the PD are known gone, either
//! because it switched away with a flushing CR3 write ([`Sharers::note_left`] with
//! `flushed = true`, always the case under QEMU TCG without PCID) or because a shootdown
//! flushed it ([`Sharers::take_targets`]). Tracking is conservative: a CPU may stay in a mask
//! longer than needed, never shorter.

use alloc::vec;
use alloc::vec::Vec;

use crate::pd_id::PdId;

/// Number of CPUs a mask can name: one machine word, so every mask operation is a single
/// instruction (the kernel runs at most 8 CPUs; the paper's largest system has 32 cores).
pub const MAX_CPUS: usize = 64;

const WORDS: usize = MAX_CPUS / 64;

/// A set of CPU numbers `0..MAX_CPUS`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CpuMask([u64; WORDS]);

impl CpuMask {
    /// The empty set.
    pub const EMPTY: CpuMask = CpuMask([0; WORDS]);

    /// Adds `cpu` (ignored at or above [`MAX_CPUS`]).
    pub fn insert(&mut self, cpu: u32) {
        if (cpu as usize) < MAX_CPUS {
            self.0[cpu as usize / 64] |= 1 << (cpu % 64);
        }
    }

    /// Removes `cpu`.
    pub fn remove(&mut self, cpu: u32) {
        if (cpu as usize) < MAX_CPUS {
            self.0[cpu as usize / 64] &= !(1 << (cpu % 64));
        }
    }

    /// True when `cpu` is in the set.
    pub fn contains(&self, cpu: u32) -> bool {
        (cpu as usize) < MAX_CPUS && self.0[cpu as usize / 64] & (1 << (cpu % 64)) != 0
    }

    /// True when the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0.iter().fold(0, |acc, w| acc | w) == 0
    }

    /// Number of CPUs in the set.
    pub fn len(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// The CPUs in the set, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().enumerate().flat_map(|(i, &w)| {
            let mut bits = w;
            core::iter::from_fn(move || {
                if bits == 0 {
                    return None;
                }
                let b = bits.trailing_zeros();
                bits &= bits - 1;
                Some(i as u32 * 64 + b)
            })
        })
    }

    /// The union of two sets.
    pub fn union(&self, other: &CpuMask) -> CpuMask {
        let mut m = *self;
        for (a, b) in m.0.iter_mut().zip(other.0.iter()) {
            *a |= *b;
        }
        m
    }
}

/// Sharer masks for every PD id, and which PD each CPU has loaded.
#[derive(Clone, Debug)]
pub struct Sharers {
    masks: Vec<CpuMask>,
    loaded: Vec<Option<PdId>>,
}

impl Sharers {
    /// Masks for `max_pds` PD ids and `cpus` CPUs (at most [`MAX_CPUS`]).
    pub fn new(max_pds: usize, cpus: usize) -> Sharers {
        Sharers {
            masks: vec![CpuMask::EMPTY; max_pds],
            loaded: vec![None; cpus.min(MAX_CPUS)],
        }
    }

    /// `cpu` switched to `pd`: it may now cache `pd`'s translations.
    pub fn note_ran(&mut self, pd: PdId, cpu: u32) {
        if let Some(m) = self.masks.get_mut(pd.index()) {
            m.insert(cpu);
        }
        if let Some(l) = self.loaded.get_mut(cpu as usize) {
            *l = Some(pd);
        }
    }

    /// `cpu` switched away from `pd`. With `flushed` (a CR3 write without PCID), its TLB holds
    /// nothing of `pd` any more and it leaves the mask; otherwise it stays a sharer.
    pub fn note_left(&mut self, pd: PdId, cpu: u32, flushed: bool) {
        if let Some(l) = self.loaded.get_mut(cpu as usize)
            && *l == Some(pd)
        {
            *l = None;
        }
        if flushed && let Some(m) = self.masks.get_mut(pd.index()) {
            m.remove(cpu);
        }
    }

    /// The CPUs that may cache `pd`'s translations.
    pub fn mask(&self, pd: PdId) -> CpuMask {
        self.masks.get(pd.index()).copied().unwrap_or_default()
    }

    /// For a shootdown of `pd`'s leaves started on `this_cpu` (which flushes locally): the
    /// other CPUs that must get an IPI. Afterwards the mask keeps only the CPUs that still have
    /// `pd` loaded, since every other sharer will have flushed.
    pub fn take_targets(&mut self, pd: PdId, this_cpu: u32) -> CpuMask {
        let Some(m) = self.masks.get_mut(pd.index()) else {
            return CpuMask::EMPTY;
        };
        let mut targets = *m;
        targets.remove(this_cpu);
        // Only a sharer can have `pd` loaded (`note_ran` adds both), so look at sharers only.
        let mut still = CpuMask::EMPTY;
        for (k, &word) in m.0.iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                let cpu = k as u32 * 64 + bits.trailing_zeros();
                bits &= bits - 1;
                if self.loaded.get(cpu as usize) == Some(&Some(pd)) {
                    still.insert(cpu);
                }
            }
        }
        *m = still;
        targets
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pd(n: u64) -> PdId {
        PdId::from_raw(n).unwrap()
    }

    #[test]
    fn mask_basics() {
        let mut m = CpuMask::EMPTY;
        m.insert(0);
        m.insert(33);
        m.insert(63);
        m.insert(64);
        assert_eq!(m.iter().collect::<Vec<_>>(), [0, 33, 63]);
        assert_eq!(m.len(), 3);
        m.remove(33);
        assert!(!m.contains(33) && m.contains(0));
        let mut o = CpuMask::EMPTY;
        o.insert(7);
        assert_eq!(m.union(&o).len(), 3);
        assert!(CpuMask::EMPTY.is_empty());
    }

    #[test]
    fn only_cpus_that_ran_the_pd_are_targets() {
        let mut s = Sharers::new(8, 4);
        let a = pd(1);
        let b = pd(2);
        s.note_ran(a, 0);
        s.note_ran(a, 1);
        s.note_left(a, 1, false); // PCID-style switch: still a sharer
        s.note_ran(b, 1);
        s.note_ran(a, 2);
        s.note_left(a, 2, true); // flushing switch: no longer a sharer
        let t = s.take_targets(a, 0);
        assert_eq!(t.iter().collect::<Vec<_>>(), [1]);
        // CPU 0 still runs a: it stays; CPU 1 flushed.
        assert_eq!(s.mask(a).iter().collect::<Vec<_>>(), [0]);
        assert!(s.take_targets(a, 0).is_empty());
        assert_eq!(s.take_targets(b, 3).iter().collect::<Vec<_>>(), [1]);
        assert!(s.take_targets(pd(7), 0).is_empty());
        assert!(s.take_targets(pd(100), 0).is_empty());
    }
}
