//! The plain-list VMA table (Jord §4.1): one 64-byte VTE per VMA slot, found by
//! `A_base + f(SC, index)`, with a free list per size class and the overflow pool.
//!
//! `f(SC, index) = (class_base[SC] + index) * 64`, where `class_base` is the prefix sum of the
//! per-class capacities fixed at construction: class 0's slots come first, then class 1's, and
//! so on. This is injective and as cheap as the paper's "evenly interleaving" f, but lets small
//! classes (which hold most VMAs) have more slots than large ones (whose address space is small:
//! 128 VMAs of 4 GiB at most). The kernel places the table at `A_base`, protected as a
//! Privileged VMA, and [`VmaTable::vte_offset`] is the byte offset it adds.

use alloc::vec;
use alloc::vec::Vec;

use crate::error::{Error, Result};
use crate::free_list::FreeList;
use crate::overflow::OverflowPool;
use crate::pd_id::PdId;
use crate::perm::Perm;
use crate::size_class::SizeClass;
use crate::vaddr::{self, VmaId};
use crate::vte::{PdPerm, VTE_SIZE, VmaAttrs, Vte};

/// Sizes of the table, fixed at construction (the paper's `uatc` "VMA table size").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableConfig {
    /// Number of VMA slots per size class, indexed by class code.
    pub capacity: [u32; SizeClass::COUNT],
    /// Number of overflow lists that may be in use at once.
    pub overflow_lists: u32,
}

impl TableConfig {
    /// `per_class` slots in every class (capped at what the class's address field can name)
    /// and `overflow_lists` overflow lists.
    pub fn uniform(per_class: u32, overflow_lists: u32) -> TableConfig {
        let mut capacity = [0; SizeClass::COUNT];
        for sc in SizeClass::all() {
            capacity[sc.index()] = (per_class as u64).min(vaddr::max_index(sc)) as u32;
        }
        TableConfig {
            capacity,
            overflow_lists,
        }
    }

    /// Total number of VTEs.
    pub fn total_slots(&self) -> u64 {
        self.capacity.iter().map(|&c| c as u64).sum()
    }
}

/// The VMA table: VTEs, per-class free lists and the overflow pool.
#[derive(Clone, Debug)]
pub struct VmaTable {
    class_base: [u32; SizeClass::COUNT],
    vtes: Vec<Vte>,
    free: Vec<FreeList>,
    overflow: OverflowPool,
}

/// What [`VmaTable::perms_of_pair`] finds for two PDs on one VMA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PairPerms {
    /// The first PD's permission, if it holds any.
    pub a: Option<Perm>,
    /// The sub-array slot of the first PD's pair, when it is in the sub-array.
    pub a_slot: Option<usize>,
    /// The second PD's permission, if it holds any.
    pub b: Option<Perm>,
}

impl VmaTable {
    /// Builds an empty table. [`Error::InvalidArgs`] when a class's capacity exceeds what its
    /// index field can name or the table would have more than `u32::MAX` slots.
    pub fn new(config: &TableConfig) -> Result<VmaTable> {
        if config.total_slots() > u32::MAX as u64 {
            return Err(Error::InvalidArgs);
        }
        let mut class_base = [0; SizeClass::COUNT];
        let mut next = 0u32;
        let mut free = Vec::with_capacity(SizeClass::COUNT);
        for sc in SizeClass::all() {
            let cap = config.capacity[sc.index()];
            if cap as u64 > vaddr::max_index(sc) {
                return Err(Error::InvalidArgs);
            }
            class_base[sc.index()] = next;
            next += cap;
            free.push(FreeList::new(cap));
        }
        Ok(VmaTable {
            class_base,
            vtes: vec![Vte::EMPTY; next as usize],
            free,
            overflow: OverflowPool::new(config.overflow_lists),
        })
    }

    /// Number of slots of class `sc`.
    #[inline(always)]
    pub fn capacity(&self, sc: SizeClass) -> u32 {
        self.free[sc.index()].capacity()
    }

    /// Number of free slots of class `sc`.
    pub fn free_count(&self, sc: SizeClass) -> usize {
        self.free[sc.index()].len()
    }

    /// Table slot of a VMA: `class_base[SC] + index` (the VTE's position in the plain list),
    /// or `None` beyond the class's capacity. Slots are dense in `0..slot_count()`, so the
    /// kernel can keep per-VMA data in an array indexed by them.
    #[inline(always)]
    pub fn slot(&self, id: VmaId) -> Option<usize> {
        (id.index < self.capacity(id.sc))
            .then(|| (self.class_base[id.sc.index()] + id.index) as usize)
    }

    /// `f(SC, index)`: byte offset of the VTE from `A_base`, or `None` when `index` is beyond
    /// the class's capacity.
    pub fn vte_offset(&self, sc: SizeClass, index: u32) -> Option<usize> {
        self.slot(VmaId { sc, index }).map(|s| s * VTE_SIZE)
    }

    /// Number of slots (VTEs) in the table.
    pub fn slot_count(&self) -> usize {
        self.vtes.len()
    }

    /// Size of the whole table in bytes (what the kernel reserves at `A_base`).
    pub fn table_bytes(&self) -> usize {
        self.vtes.len() * VTE_SIZE
    }

    /// The VTE of a slot (valid or free), or `None` beyond the class's capacity.
    pub fn vte(&self, id: VmaId) -> Option<&Vte> {
        self.slot(id).map(|s| &self.vtes[s])
    }

    #[inline(always)]
    pub(crate) fn vte_mut(&mut self, id: VmaId) -> Option<&mut Vte> {
        self.slot(id).map(|s| &mut self.vtes[s])
    }

    /// The VMA whose base is `addr`. [`Error::BadAddress`] for an address outside the region,
    /// with a bad SC, beyond the class's capacity or not at offset 0; [`Error::NotMapped`] for
    /// a free slot.
    pub fn resolve_base(&self, addr: u64) -> Result<(VmaId, &Vte)> {
        let d = vaddr::decode(addr)?;
        if d.offset != 0 {
            return Err(Error::BadAddress);
        }
        let vte = self.vte(d.vma).ok_or(Error::BadAddress)?;
        if !vte.is_valid() {
            return Err(Error::NotMapped);
        }
        Ok((d.vma, vte))
    }

    /// Allocates a slot from the smallest class that holds `len` bytes, trying larger classes
    /// when that one is exhausted, and fills its VTE. [`Error::InvalidArgs`] for a zero length
    /// or one above 4 GiB, [`Error::NoMemory`] when every fitting class is full.
    #[inline(always)]
    pub fn alloc(&mut self, owner: PdId, len: u64, perm: Perm, attrs: VmaAttrs) -> Result<VmaId> {
        let mut sc = SizeClass::for_len(len).ok_or(Error::InvalidArgs)?;
        loop {
            if let Some(index) = self.free[sc.index()].pop() {
                let id = VmaId { sc, index };
                if let Some(v) = self.vte_mut(id) {
                    *v = Vte::new(owner, len, perm, attrs);
                }
                return Ok(id);
            }
            sc = sc.next().ok_or(Error::NoMemory)?;
        }
    }

    /// [`VmaTable::alloc`] for a μprocess area: the slot lies clear of every 4 GiB edge and of
    /// the ASCII band ([`vaddr::clear_of_data_words`]), in the smallest class that has such a
    /// slot free; a VMA too large for any class with clear slots (over 1 GiB) is placed as
    /// [`VmaTable::alloc`] would.
    pub fn alloc_clear_of_data_words(
        &mut self,
        owner: PdId,
        len: u64,
        perm: Perm,
        attrs: VmaAttrs,
    ) -> Result<VmaId> {
        let mut sc = SizeClass::for_len(len).ok_or(Error::InvalidArgs)?;
        loop {
            if !vaddr::class_has_clear_slots(sc) {
                return self.alloc(owner, len, perm, attrs);
            }
            let clear = |index: u32| {
                let id = VmaId { sc, index };
                vaddr::clear_of_data_words(id.base(), sc.size())
            };
            if let Some(index) = self.free[sc.index()].pop_where(clear) {
                let id = VmaId { sc, index };
                if let Some(v) = self.vte_mut(id) {
                    *v = Vte::new(owner, len, perm, attrs);
                }
                return Ok(id);
            }
            sc = sc.next().ok_or(Error::NoMemory)?;
        }
    }

    /// Allocates the slot of `id` itself, when it is free, and fills its VTE.
    /// [`Error::BadAddress`] for a slot beyond its class's capacity, [`Error::InvalidArgs`]
    /// for a zero length or one above the class's size, [`Error::Busy`] when the slot is taken.
    pub fn alloc_at(
        &mut self,
        id: VmaId,
        owner: PdId,
        len: u64,
        perm: Perm,
        attrs: VmaAttrs,
    ) -> Result<()> {
        if self.slot(id).is_none() {
            return Err(Error::BadAddress);
        }
        if len == 0 || len > id.sc.size() {
            return Err(Error::InvalidArgs);
        }
        if !self.free[id.sc.index()].take(id.index) {
            return Err(Error::Busy);
        }
        if let Some(v) = self.vte_mut(id) {
            *v = Vte::new(owner, len, perm, attrs);
        }
        Ok(())
    }

    /// Frees a valid slot: drops its overflow list, clears the VTE and returns the index to
    /// its class's free list. A free or out-of-range slot is left alone.
    pub fn release(&mut self, id: VmaId) {
        let Some(v) = self.vte_mut(id) else { return };
        if !v.is_valid() {
            return;
        }
        let ovf = v.overflow();
        *v = Vte::EMPTY;
        if let Some(n) = ovf {
            self.overflow.release(n);
        }
        self.free[id.sc.index()].push(id.index);
    }

    /// The permission `pd` holds in the sub-array or overflow list of a non-Global VMA.
    pub fn perm_of(&self, id: VmaId, pd: PdId) -> Option<Perm> {
        let v = self.vte(id)?;
        if let Some((_, p)) = v.find_sub(pd) {
            return Some(p);
        }
        self.overflow_perm(v, pd)
    }

    /// The permission `pd` holds in the overflow list of `vte` (a VTE of this table), if any.
    pub(crate) fn overflow_perm(&self, vte: &Vte, pd: PdId) -> Option<Perm> {
        let n = vte.overflow()?;
        self.overflow
            .get(n)
            .iter()
            .find(|e| e.pd == pd)
            .map(|e| e.perm)
    }

    /// Calls `f` on every (PD, permission) pair of `vte`, the VTE of a VMA of this table:
    /// sub-array then overflow list. The loop form of [`VmaTable::holders`], for a VTE the
    /// caller has already read.
    pub fn for_each_holder(&self, vte: &Vte, mut f: impl FnMut(PdPerm)) {
        vte.for_each_sub(&mut f);
        if let Some(n) = vte.overflow() {
            for &e in self.overflow.get(n) {
                f(e);
            }
        }
    }

    /// Every (PD, permission) pair of a VMA: sub-array then overflow list.
    pub fn holders(&self, id: VmaId) -> impl Iterator<Item = PdPerm> + '_ {
        let v = self.vte(id);
        let sub = v.into_iter().flat_map(Vte::sub_entries);
        let ovf = v
            .and_then(Vte::overflow)
            .map_or(&[][..], |n| self.overflow.get(n));
        sub.chain(ovf.iter().copied())
    }

    /// Sets the permission `pd` holds on a valid VMA (an empty permission removes the pair) and
    /// returns the previous one (empty when none). Fails with [`Error::NoMemory`], changing
    /// nothing, when a new pair needs an overflow list and none is free.
    pub fn set_perm(&mut self, id: VmaId, pd: PdId, perm: Perm) -> Result<Perm> {
        let s = self.slot(id).ok_or(Error::BadAddress)?;
        if !self.vtes[s].is_valid() {
            return Err(Error::NotMapped);
        }
        if let Some((slot, old)) = self.vtes[s].find_sub(pd) {
            if perm.is_empty() {
                self.vtes[s].set_sub(slot, None);
                self.refill_sub(id, slot);
            } else {
                self.vtes[s].set_sub(slot, Some(PdPerm { pd, perm }));
            }
            return Ok(old);
        }
        let ovf = self.vtes[s].overflow();
        if let Some(n) = ovf
            && let Some(list) = self.overflow.get_mut(n)
            && let Some(pos) = list.iter().position(|e| e.pd == pd)
        {
            let old = list[pos].perm;
            if perm.is_empty() {
                list.swap_remove(pos);
                if list.is_empty() {
                    self.overflow.release(n);
                    self.vtes[s].set_overflow(None);
                }
            } else {
                list[pos].perm = perm;
            }
            return Ok(old);
        }
        if perm.is_empty() {
            return Ok(Perm::NONE);
        }
        let entry = PdPerm { pd, perm };
        if let Some(slot) = self.vtes[s].free_sub() {
            self.vtes[s].set_sub(slot, Some(entry));
            return Ok(Perm::NONE);
        }
        let n = match ovf {
            Some(n) => n,
            None => {
                let n = self.overflow.alloc()?;
                self.vtes[s].set_overflow(Some(n));
                n
            }
        };
        if let Some(list) = self.overflow.get_mut(n) {
            list.push(entry);
        }
        Ok(Perm::NONE)
    }

    /// The permissions `a` and `b` hold on the VMA whose VTE is `vte` (a VTE of this table),
    /// found in one pass over its sub-array, plus the sub-array slot of `a`'s pair when it is
    /// there (the overflow list is searched only for a PD the sub-array lacks).
    pub(crate) fn perms_of_pair(&self, vte: &Vte, a: PdId, b: PdId) -> PairPerms {
        let (sa, sb) = vte.find_pair(a, b);
        let list = vte.overflow().map_or(&[][..], |n| self.overflow.get(n));
        let in_list = |pd: PdId| list.iter().find(|e| e.pd == pd).map(|e| e.perm);
        PairPerms {
            a: sa.map(|(_, p)| p).or_else(|| in_list(a)),
            a_slot: sa.map(|(i, _)| i),
            b: sb.map(|(_, p)| p).or_else(|| in_list(b)),
        }
    }

    /// Overwrites sub-array slot `slot` of the valid VMA `id` with `entry`: how `pmove` hands
    /// the caller's pair to a target that holds none, in place.
    pub(crate) fn overwrite_sub(&mut self, id: VmaId, slot: usize, entry: PdPerm) {
        if let Some(v) = self.vte_mut(id).filter(|v| v.is_valid()) {
            v.set_sub(slot, Some(entry));
        }
    }

    /// After a sub-array slot was emptied, moves one overflow pair into it so that the common
    /// case (the sub-array) stays dense and the overflow list is dropped when it empties.
    fn refill_sub(&mut self, id: VmaId, slot: usize) {
        let Some(n) = self.vte(id).and_then(Vte::overflow) else {
            return;
        };
        let Some(list) = self.overflow.get_mut(n) else {
            return;
        };
        let moved = list.pop();
        let now_empty = list.is_empty();
        if now_empty {
            self.overflow.release(n);
        }
        if let Some(v) = self.vte_mut(id) {
            v.set_sub(slot, moved);
            if now_empty {
                v.set_overflow(None);
            }
        }
    }

    /// Every valid VMA and its VTE.
    pub fn allocated(&self) -> impl Iterator<Item = (VmaId, &Vte)> + '_ {
        SizeClass::all().flat_map(move |sc| {
            let base = self.class_base[sc.index()] as usize;
            let cap = self.capacity(sc) as usize;
            self.vtes[base..base + cap]
                .iter()
                .enumerate()
                .filter(|(_, v)| v.is_valid())
                .map(move |(i, v)| {
                    (
                        VmaId {
                            sc,
                            index: i as u32,
                        },
                        v,
                    )
                })
        })
    }

    /// Checks the table's invariants: every slot is either free (on exactly one free list,
    /// all-zero VTE) or valid (not on a free list); a valid VTE's length fits its class; no PD
    /// appears twice among a VMA's holders; Global and Privileged VMAs have no holders; every
    /// overflow list in use belongs to exactly one VTE and is non-empty, and only VTEs with a
    /// full sub-array have one. Returns the first violation found.
    pub fn check_consistency(&self) -> core::result::Result<(), &'static str> {
        let mut free = vec![false; self.vtes.len()];
        for sc in SizeClass::all() {
            for i in self.free[sc.index()].iter() {
                let s = self
                    .slot(VmaId { sc, index: i })
                    .ok_or("free index beyond capacity")?;
                if free[s] {
                    return Err("slot twice on a free list");
                }
                free[s] = true;
                if self.vtes[s] != Vte::EMPTY {
                    return Err("free slot with a non-empty VTE");
                }
            }
        }
        let mut lists_seen = 0usize;
        let mut list_owner: Vec<Option<u32>> = Vec::new();
        for (id, v) in self.allocated() {
            let s = self.slot(id).ok_or("allocated beyond capacity")?;
            if free[s] {
                return Err("slot both free and allocated");
            }
            if v.is_empty() || v.len() > id.sc.size() {
                return Err("VMA length does not fit its class");
            }
            if (v.is_global() || v.is_privileged()) && self.holders(id).next().is_some() {
                return Err("Global or Privileged VMA with per-PD holders");
            }
            let mut seen: Vec<PdId> = Vec::new();
            for h in self.holders(id) {
                if h.perm.is_empty() {
                    return Err("holder with an empty permission");
                }
                if seen.contains(&h.pd) {
                    return Err("PD listed twice on one VMA");
                }
                seen.push(h.pd);
            }
            if let Some(n) = v.overflow() {
                if !self.overflow.is_live(n) || self.overflow.get(n).is_empty() {
                    return Err("VTE names a dead or empty overflow list");
                }
                if v.free_sub().is_some() {
                    return Err("overflow list while the sub-array has room");
                }
                let n = n as usize;
                if list_owner.len() <= n {
                    list_owner.resize(n + 1, None);
                }
                if list_owner[n].is_some() {
                    return Err("overflow list shared by two VTEs");
                }
                list_owner[n] = Some(s as u32);
                lists_seen += 1;
            }
        }
        if lists_seen != self.overflow.live_count() {
            return Err("overflow list in use by no VTE");
        }
        let valid = self.vtes.iter().filter(|v| v.is_valid()).count();
        if valid + free.iter().filter(|f| **f).count() != self.vtes.len() {
            return Err("slot neither free nor allocated");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pd(n: u64) -> PdId {
        PdId::from_raw(n).unwrap()
    }

    fn small() -> VmaTable {
        let mut c = TableConfig::uniform(4, 2);
        c.capacity[0] = 8;
        VmaTable::new(&c).unwrap()
    }

    #[test]
    fn vte_offsets_are_a_plain_list() {
        let t = small();
        let sc1 = SizeClass::from_code(1).unwrap();
        assert_eq!(t.vte_offset(SizeClass::MIN, 0), Some(0));
        assert_eq!(t.vte_offset(SizeClass::MIN, 7), Some(7 * 64));
        assert_eq!(t.vte_offset(SizeClass::MIN, 8), None);
        assert_eq!(t.vte_offset(sc1, 0), Some(8 * 64));
        assert_eq!(t.vte_offset(SizeClass::MAX, 3), Some((8 + 4 * 20 - 1) * 64));
        assert_eq!(t.table_bytes(), (8 + 4 * 20) * 64);
        // Injective: every (class, index) has its own offset.
        let mut seen = Vec::new();
        for sc in SizeClass::all() {
            for i in 0..t.capacity(sc) {
                let o = t.vte_offset(sc, i).unwrap();
                assert!(!seen.contains(&o));
                seen.push(o);
            }
        }
    }

    #[test]
    fn config_must_fit_the_layout() {
        let mut c = TableConfig::uniform(1, 0);
        c.capacity[SizeClass::MAX.index()] = 129;
        assert_eq!(VmaTable::new(&c).err(), Some(Error::InvalidArgs));
        assert_eq!(TableConfig::uniform(1000, 0).capacity[20], 128);
    }

    #[test]
    fn areas_are_placed_clear_of_data_words_and_other_vmas_take_the_edge_slots() {
        let mut t = VmaTable::new(&TableConfig::uniform(1024, 4)).unwrap();
        let a = t
            .alloc_clear_of_data_words(PdId::KERNEL, 1 << 20, Perm::RW, VmaAttrs::default())
            .unwrap();
        assert!(vaddr::clear_of_data_words(a.base(), 1 << 20));
        // Slot 0 (at the edge) was skipped over, and stays free for an ordinary VMA.
        assert_eq!(a.index, (vaddr::EDGE_MARGIN >> 20) as u32);
        let b = t
            .alloc(PdId::KERNEL, 1 << 20, Perm::RW, VmaAttrs::default())
            .unwrap();
        assert!(!vaddr::clear_of_data_words(b.base(), 1 << 20));
        // A class whose clear slots lie beyond its capacity hands out a larger class's.
        let small = t
            .alloc_clear_of_data_words(PdId::KERNEL, 4096, Perm::RW, VmaAttrs::default())
            .unwrap();
        assert!(vaddr::clear_of_data_words(small.base(), small.sc.size()));
        assert!(small.sc.size() > 4096);
    }

    #[test]
    fn alloc_picks_the_smallest_class_then_falls_back() {
        let mut c = TableConfig::uniform(0, 0);
        c.capacity[0] = 1;
        c.capacity[2] = 1;
        let mut t = VmaTable::new(&c).unwrap();
        let a = t.alloc(pd(1), 100, Perm::RW, VmaAttrs::default()).unwrap();
        assert_eq!(a.sc, SizeClass::MIN);
        assert_eq!(t.vte(a).unwrap().len(), 100);
        let b = t.alloc(pd(1), 100, Perm::RW, VmaAttrs::default()).unwrap();
        assert_eq!(b.sc.size(), 16384);
        assert_eq!(
            t.alloc(pd(1), 100, Perm::RW, VmaAttrs::default()),
            Err(Error::NoMemory)
        );
        assert_eq!(
            t.alloc(pd(1), 0, Perm::RW, VmaAttrs::default()),
            Err(Error::InvalidArgs)
        );
        t.release(a);
        assert_eq!(t.alloc(pd(1), 1, Perm::R, VmaAttrs::default()), Ok(a));
        t.check_consistency().unwrap();
    }

    #[test]
    fn resolve_base_classifies_bad_addresses() {
        let mut t = small();
        let a = t.alloc(pd(1), 4096, Perm::RW, VmaAttrs::default()).unwrap();
        assert_eq!(t.resolve_base(a.base()).map(|r| r.0), Ok(a));
        assert_eq!(t.resolve_base(a.base() + 8).err(), Some(Error::BadAddress));
        assert_eq!(t.resolve_base(0x1234).err(), Some(Error::BadAddress));
        let beyond = vaddr::encode(SizeClass::MIN, 8, 0).unwrap();
        assert_eq!(t.resolve_base(beyond).err(), Some(Error::BadAddress));
        let free = vaddr::encode(SizeClass::MIN, 5, 0).unwrap();
        assert_eq!(t.resolve_base(free).err(), Some(Error::NotMapped));
    }

    #[test]
    fn permissions_spill_into_overflow_and_back() {
        let mut t = small();
        let a = t.alloc(pd(1), 4096, Perm::RW, VmaAttrs::default()).unwrap();
        for n in 2..=30 {
            assert_eq!(t.set_perm(a, pd(n), Perm::R), Ok(Perm::NONE));
        }
        assert!(t.vte(a).unwrap().overflow().is_some());
        assert_eq!(t.holders(a).count(), 30);
        assert_eq!(t.perm_of(a, pd(30)), Some(Perm::R));
        assert_eq!(t.set_perm(a, pd(30), Perm::RW), Ok(Perm::R));
        assert_eq!(t.perm_of(a, pd(30)), Some(Perm::RW));
        t.check_consistency().unwrap();
        for n in 1..=25 {
            assert!(!t.set_perm(a, pd(n), Perm::NONE).unwrap().is_empty());
            t.check_consistency().unwrap();
        }
        assert_eq!(t.vte(a).unwrap().overflow(), None);
        assert_eq!(t.holders(a).count(), 5);
        assert_eq!(t.perm_of(a, pd(1)), None);
        assert_eq!(t.set_perm(a, pd(1), Perm::NONE), Ok(Perm::NONE));
    }

    #[test]
    fn overflow_exhaustion_changes_nothing() {
        let mut t = VmaTable::new(&TableConfig::uniform(4, 0)).unwrap();
        let a = t.alloc(pd(1), 4096, Perm::RW, VmaAttrs::default()).unwrap();
        for n in 2..=20 {
            t.set_perm(a, pd(n), Perm::R).unwrap();
        }
        assert_eq!(t.set_perm(a, pd(21), Perm::R), Err(Error::NoMemory));
        assert_eq!(t.perm_of(a, pd(21)), None);
        t.check_consistency().unwrap();
    }

    #[test]
    fn release_frees_the_overflow_list() {
        let mut t = small();
        let a = t.alloc(pd(1), 4096, Perm::RW, VmaAttrs::default()).unwrap();
        for n in 2..=22 {
            t.set_perm(a, pd(n), Perm::R).unwrap();
        }
        t.release(a);
        t.release(a);
        t.check_consistency().unwrap();
        assert_eq!(t.allocated().count(), 0);
    }
}
