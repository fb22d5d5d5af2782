//! VMA table entries (VTEs): one 64-byte cache block per VMA (Jord §4.1, §4.3, Fig. 8).
//!
//! Wire layout (little-endian), the form the kernel stores at `A_base + f(SC, index)`:
//!
//! ```text
//! byte  0..2   attr   bit 0 V valid, bit 1 G global, bit 2 P privileged, bit 3 B backed,
//!                     bits 4..6 attr permission (R, W, X) of a Global or Privileged VMA
//! byte  2..4   owner  PD id of the owner (low 13 bits)
//! byte  4..8   ovf    overflow list: 0 = none, n = list n - 1 of the overflow pool
//! byte  8..16  len    VMA length in bytes (at most the class size; the chunk tail is reserved)
//! byte 16..24  phys   physical base of the backing chunk (meaningful when B is set)
//! byte 24..64  sub    20 slots of u16: (PD id << 3) | permission; 0 = empty slot
//! ```
//!
//! A sub-array slot always holds a non-empty permission, so the all-zero slot is free even
//! though PD id 0 exists. The paper stores the permission of a non-Global VMA only in the
//! sub-array, never in `attr`; this layout does the same.

use crate::pd_id::{PD_ID_BITS, PdId};
use crate::perm::Perm;

/// A sub-array hit: the slot number and the permission stored there.
pub type SubHit = (usize, Perm);

/// Number of (PD id, permission) slots in a VTE (the paper's 20).
pub const SUB_SLOTS: usize = 20;

/// Words of four slots the sub-array is stored in.
const SUB_WORDS: usize = SUB_SLOTS / 4;

/// Size of a VTE in bytes: one cache block.
pub const VTE_SIZE: usize = 64;

const ATTR_VALID: u16 = 1 << 0;
const ATTR_GLOBAL: u16 = 1 << 1;
const ATTR_PRIVILEGED: u16 = 1 << 2;
const ATTR_BACKED: u16 = 1 << 3;
const ATTR_PERM_SHIFT: u16 = 4;

/// 1 in every 16-bit lane.
const LANES: u64 = 0x0001_0001_0001_0001;
/// The high bit of every lane.
const LANE_HIGH: u64 = 0x8000_8000_8000_8000;
/// All but the high bit of every lane.
const LANE_LOW: u64 = 0x7fff_7fff_7fff_7fff;
/// The PD id bits of every lane.
const ID_BITS: u64 = 0xfff8_fff8_fff8_fff8;
/// The permission bits of every lane.
const PERM_BITS: u64 = 0x0007_0007_0007_0007;

/// The high bit of each 16-bit lane of `x` that is zero (exact: no borrow between lanes).
const fn zero_lanes(x: u64) -> u64 {
    !(((x & LANE_LOW) + LANE_LOW) | x) & LANE_HIGH
}

/// The high bit of each 16-bit lane of `x` that is not zero, for lanes below `0x8000`.
const fn nonzero_lanes(x: u64) -> u64 {
    (x + LANE_LOW) & LANE_HIGH
}

/// The hit of `pd` on slot 0 encoded as `w0` (see `Vte::lone_slot0`).
#[inline(always)]
fn slot0_hit(w0: u64, pd: PdId) -> Option<SubHit> {
    let perm = Perm::from_bits_truncate((w0 & 7) as u8);
    (!perm.is_empty() && w0 >> 3 == u64::from(pd.raw())).then_some((0, perm))
}

/// The sub-array hit for the lowest lane flagged in `mask` (high lane bits) of word `k`, `w`.
fn lane_hit(k: usize, w: u64, mask: u64) -> SubHit {
    let lane = (mask.trailing_zeros() / 16) as usize;
    (
        4 * k + lane,
        Perm::from_bits_truncate(((w >> (16 * lane)) & 7) as u8),
    )
}

/// One (PD id, permission) pair of a VTE's sub-array or overflow list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PdPerm {
    /// The PD holding the permission.
    pub pd: PdId,
    /// The permission it holds (never empty in a stored pair).
    pub perm: Perm,
}

impl PdPerm {
    /// The 16-bit slot encoding: `(pd << 3) | perm`.
    pub const fn encode(self) -> u16 {
        (self.pd.raw() << 3) | self.perm.bits() as u16
    }

    /// Decodes a slot; `None` for an empty slot (no permission bits).
    pub const fn decode(slot: u16) -> Option<PdPerm> {
        let perm = Perm::from_bits_truncate((slot & 7) as u8);
        if perm.is_empty() {
            None
        } else {
            Some(PdPerm {
                pd: PdId::from_bits(slot >> 3),
                perm,
            })
        }
    }
}

const _: () = assert!(PD_ID_BITS + 3 == 16);

/// Attributes given to a VMA when it is created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VmaAttrs {
    /// Global (G): the attr permission applies to every PD; the sub-array is unused.
    pub global: bool,
    /// Privileged (P): only the kernel (PrivLib) may access it.
    pub privileged: bool,
}

/// A VMA table entry, laid out as its 64-byte wire form (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct Vte {
    attr: u16,
    owner: u16,
    overflow: u32,
    len: u64,
    phys: u64,
    /// The sub-array, four slots per word: slot `4k + i` is bits `16i..16i + 16` of word `k`
    /// (on a little-endian machine, the same bytes as 20 consecutive u16 slots).
    sub: [u64; SUB_WORDS],
}

const _: () = assert!(core::mem::size_of::<Vte>() == VTE_SIZE);
const _: () = assert!(core::mem::align_of::<Vte>() == VTE_SIZE);

impl Vte {
    /// A free slot: all zero.
    pub const EMPTY: Vte = Vte {
        attr: 0,
        owner: 0,
        overflow: 0,
        len: 0,
        phys: 0,
        sub: [0; SUB_WORDS],
    };

    /// A fresh valid entry for a VMA of `len` bytes owned by `owner`. `perm` goes to the attr
    /// field for Global or Privileged VMAs and to the owner's sub-array slot otherwise.
    pub(crate) fn new(owner: PdId, len: u64, perm: Perm, attrs: VmaAttrs) -> Vte {
        let mut attr = ATTR_VALID;
        let mut vte = Vte::EMPTY;
        if attrs.global {
            attr |= ATTR_GLOBAL;
        }
        if attrs.privileged {
            attr |= ATTR_PRIVILEGED;
        }
        if attrs.global || attrs.privileged {
            attr |= (perm.bits() as u16) << ATTR_PERM_SHIFT;
        } else if !perm.is_empty() {
            vte.set_sub(0, Some(PdPerm { pd: owner, perm }));
        }
        vte.attr = attr;
        vte.owner = owner.raw();
        vte.len = len;
        vte
    }

    /// Valid (V): the slot holds a VMA.
    pub const fn is_valid(&self) -> bool {
        self.attr & ATTR_VALID != 0
    }

    /// Global (G): the attr permission applies to every PD.
    pub const fn is_global(&self) -> bool {
        self.attr & ATTR_GLOBAL != 0
    }

    /// Privileged (P): only the kernel may access the VMA.
    pub const fn is_privileged(&self) -> bool {
        self.attr & ATTR_PRIVILEGED != 0
    }

    /// The attr permission (used by Global and Privileged VMAs).
    pub const fn attr_perm(&self) -> Perm {
        Perm::from_bits_truncate((self.attr >> ATTR_PERM_SHIFT) as u8)
    }

    /// The owning PD.
    pub const fn owner(&self) -> PdId {
        PdId::from_bits(self.owner)
    }

    /// The VMA's length in bytes.
    pub const fn len(&self) -> u64 {
        self.len
    }

    /// True for a zero-length entry (only free slots).
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The physical base of the backing chunk, once the kernel has recorded one.
    pub const fn phys(&self) -> Option<u64> {
        if self.attr & ATTR_BACKED != 0 {
            Some(self.phys)
        } else {
            None
        }
    }

    /// The overflow list number, if the VMA has more sharers than the sub-array holds.
    pub const fn overflow(&self) -> Option<u32> {
        if self.overflow == 0 {
            None
        } else {
            Some(self.overflow - 1)
        }
    }

    /// The occupied sub-array slots.
    pub fn sub_entries(&self) -> impl Iterator<Item = PdPerm> + '_ {
        // Skips empty groups of four slots with one test each (most VTEs hold one pair).
        let mut i = 0;
        core::iter::from_fn(move || {
            while i < SUB_SLOTS {
                if i % 4 == 0 && self.sub_word(i / 4) == 0 {
                    i += 4;
                    continue;
                }
                let s = self.slot(i);
                i += 1;
                if let Some(e) = PdPerm::decode(s) {
                    return Some(e);
                }
            }
            None
        })
    }

    /// Slot 0's encoding when no other sub-array slot can be occupied, else `None`. The
    /// common VTE holds only the pair its owner's `mmap` put in slot 0 (an ArgBuf handed from
    /// PD to PD by `pmove` keeps that slot): three tests decide it.
    #[inline(always)]
    fn lone_slot0(&self) -> Option<u64> {
        let [w0, w1, w2, w3, w4] = self.sub;
        (w1 | w2 | w3 | w4 == 0 && w0 >> 16 == 0).then_some(w0)
    }

    /// The sub-array's pair when it holds exactly one (the overflow list is not looked at).
    pub fn only_sub(&self) -> Option<PdPerm> {
        if let Some(w0) = self.lone_slot0() {
            return PdPerm::decode(w0 as u16);
        }
        let (mut n, mut only) = (0, None);
        self.for_each_sub(|e| {
            n += 1;
            only = Some(e);
        });
        if n == 1 { only } else { None }
    }

    /// Sub-array slot `i`.
    fn slot(&self, i: usize) -> u16 {
        (self.sub[i / 4] >> (16 * (i % 4))) as u16
    }

    /// Slots `4k..4k + 4` of the sub-array as one 64-bit word (slot `4k + i` in bits
    /// `16i..16i + 16`), for scanning four slots at a time.
    fn sub_word(&self, k: usize) -> u64 {
        self.sub[k]
    }

    /// Calls `f` on every occupied sub-array slot, in slot order (skipping empty groups of
    /// four slots with one test each). The loop form of [`Vte::sub_entries`].
    pub fn for_each_sub(&self, mut f: impl FnMut(PdPerm)) {
        for k in 0..SUB_SLOTS / 4 {
            if self.sub_word(k) == 0 {
                continue;
            }
            for i in 4 * k..4 * k + 4 {
                if let Some(e) = PdPerm::decode(self.slot(i)) {
                    f(e);
                }
            }
        }
    }

    /// The permission `pd` holds in the sub-array and its slot number. Scans the 20 halfwords
    /// four at a time (SWAR); no allocation.
    #[inline(always)]
    pub fn find_sub(&self, pd: PdId) -> Option<(usize, Perm)> {
        if let Some(w0) = self.lone_slot0() {
            return slot0_hit(w0, pd);
        }
        let want = u64::from(pd.raw() << 3) * LANES;
        for k in 0..SUB_SLOTS / 4 {
            let w = self.sub_word(k);
            // A slot matches when its id bits equal `pd` and its permission bits are not empty.
            let id = (w ^ want) & ID_BITS;
            let m = zero_lanes(id) & nonzero_lanes(w & PERM_BITS);
            if m != 0 {
                let i = 4 * k + (m.trailing_zeros() / 16) as usize;
                return Some((i, Perm::from_bits_truncate((self.slot(i) & 7) as u8)));
            }
        }
        None
    }

    /// [`Vte::find_sub`] for two PDs in one pass over the sub-array: the permission (and slot)
    /// of `a` and of `b`, as `pmove` needs for the caller and the target.
    #[inline(always)]
    pub fn find_pair(&self, a: PdId, b: PdId) -> (Option<SubHit>, Option<SubHit>) {
        if let Some(w0) = self.lone_slot0() {
            return (slot0_hit(w0, a), slot0_hit(w0, b));
        }
        let want_a = u64::from(a.raw() << 3) * LANES;
        let want_b = u64::from(b.raw() << 3) * LANES;
        let (mut found_a, mut found_b) = (None, None);
        // From the last word down, so that the lowest matching slot is the one kept.
        for (k, &w) in self.sub.iter().enumerate().rev() {
            if w == 0 {
                continue;
            }
            let full = nonzero_lanes(w & PERM_BITS);
            let hit_a = zero_lanes((w ^ want_a) & ID_BITS) & full;
            let hit_b = zero_lanes((w ^ want_b) & ID_BITS) & full;
            if hit_a != 0 {
                found_a = Some(lane_hit(k, w, hit_a));
            }
            if hit_b != 0 {
                found_b = Some(lane_hit(k, w, hit_b));
            }
        }
        (found_a, found_b)
    }

    /// A free sub-array slot, if any.
    pub(crate) fn free_sub(&self) -> Option<usize> {
        for k in 0..SUB_SLOTS / 4 {
            let w = self.sub_word(k);
            let m = zero_lanes(w & PERM_BITS);
            if m != 0 {
                return Some(4 * k + (m.trailing_zeros() / 16) as usize);
            }
        }
        None
    }

    pub(crate) fn set_sub(&mut self, slot: usize, entry: Option<PdPerm>) {
        let shift = 16 * (slot % 4);
        let w = &mut self.sub[slot / 4];
        *w = (*w & !(0xffff << shift)) | u64::from(entry.map_or(0, PdPerm::encode)) << shift;
    }

    pub(crate) fn set_attr_perm(&mut self, perm: Perm) {
        self.attr =
            (self.attr & !(7 << ATTR_PERM_SHIFT)) | ((perm.bits() as u16) << ATTR_PERM_SHIFT);
    }

    pub(crate) fn set_overflow(&mut self, list: Option<u32>) {
        self.overflow = list.map_or(0, |l| l + 1);
    }

    pub(crate) fn set_len(&mut self, len: u64) {
        self.len = len;
    }

    pub(crate) fn set_phys(&mut self, phys: u64) {
        self.phys = phys;
        self.attr |= ATTR_BACKED;
    }

    /// The 64-byte wire form.
    pub fn to_bytes(&self) -> [u8; VTE_SIZE] {
        let mut b = [0u8; VTE_SIZE];
        b[0..2].copy_from_slice(&self.attr.to_le_bytes());
        b[2..4].copy_from_slice(&self.owner.to_le_bytes());
        b[4..8].copy_from_slice(&self.overflow.to_le_bytes());
        b[8..16].copy_from_slice(&self.len.to_le_bytes());
        b[16..24].copy_from_slice(&self.phys.to_le_bytes());
        for (i, s) in (0..SUB_SLOTS).map(|i| self.slot(i)).enumerate() {
            b[24 + 2 * i..26 + 2 * i].copy_from_slice(&s.to_le_bytes());
        }
        b
    }

    /// Reads the 64-byte wire form back.
    pub fn from_bytes(b: &[u8; VTE_SIZE]) -> Vte {
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        let u64_at = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(w)
        };
        let mut sub = [0u64; SUB_WORDS];
        for (k, w) in sub.iter_mut().enumerate() {
            *w = u64_at(24 + 8 * k);
        }
        Vte {
            attr: u16_at(0),
            owner: u16_at(2),
            overflow: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
            len: u64_at(8),
            phys: u64_at(16),
            sub,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pd(n: u64) -> PdId {
        PdId::from_raw(n).unwrap()
    }

    #[test]
    fn slot_encoding() {
        let e = PdPerm {
            pd: pd(8191),
            perm: Perm::RWX,
        };
        assert_eq!(e.encode(), 0xffff);
        assert_eq!(PdPerm::decode(0xffff), Some(e));
        assert_eq!(PdPerm::decode(0), None);
        assert_eq!(PdPerm::decode(8 << 3), None);
        let k = PdPerm {
            pd: PdId::KERNEL,
            perm: Perm::R,
        };
        assert_eq!(PdPerm::decode(k.encode()), Some(k));
    }

    #[test]
    fn wire_layout_is_exact() {
        let mut v = Vte::new(pd(5), 0x1234, Perm::RW, VmaAttrs::default());
        v.set_sub(
            19,
            Some(PdPerm {
                pd: pd(7),
                perm: Perm::X,
            }),
        );
        v.set_overflow(Some(2));
        v.set_phys(0xdead_b000);
        let b = v.to_bytes();
        assert_eq!(u16::from_le_bytes([b[0], b[1]]), 1 | 8);
        assert_eq!(u16::from_le_bytes([b[2], b[3]]), 5);
        assert_eq!(u32::from_le_bytes([b[4], b[5], b[6], b[7]]), 3);
        assert_eq!(b[8..16], 0x1234u64.to_le_bytes());
        assert_eq!(b[16..24], 0xdead_b000u64.to_le_bytes());
        assert_eq!(u16::from_le_bytes([b[24], b[25]]), (5 << 3) | 3);
        assert_eq!(u16::from_le_bytes([b[62], b[63]]), (7 << 3) | 4);
        assert_eq!(Vte::from_bytes(&b), v);
        assert_eq!(Vte::EMPTY.to_bytes(), [0u8; 64]);
    }

    #[test]
    fn global_and_privileged_keep_perm_in_attr() {
        let g = Vte::new(
            PdId::KERNEL,
            4096,
            Perm::RX,
            VmaAttrs {
                global: true,
                privileged: false,
            },
        );
        assert!(g.is_valid() && g.is_global() && !g.is_privileged());
        assert_eq!(g.attr_perm(), Perm::RX);
        assert_eq!(g.sub_entries().count(), 0);
        let p = Vte::new(
            PdId::KERNEL,
            4096,
            Perm::RW,
            VmaAttrs {
                global: false,
                privileged: true,
            },
        );
        assert!(p.is_privileged());
        assert_eq!(Vte::from_bytes(&p.to_bytes()), p);
        let mut q = p;
        q.set_attr_perm(Perm::R);
        assert_eq!(q.attr_perm(), Perm::R);
        assert!(q.is_privileged());
    }

    #[test]
    fn swar_scans_match_a_plain_scan() {
        let mut v = Vte::new(pd(9), 1, Perm::R, VmaAttrs::default());
        let ids = [0u64, 1, 2, 9, 4095, 8191, 8190, 3];
        let mut x = 0x1234_5678_9abc_def1u64;
        for round in 0..400 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let slot = (x % SUB_SLOTS as u64) as usize;
            let id = ids[((x >> 8) % ids.len() as u64) as usize];
            let perm = Perm::from_bits_truncate((x >> 20) as u8 & 7);
            let e = (!perm.is_empty()).then(|| PdPerm { pd: pd(id), perm });
            v.set_sub(slot, e);
            for &q in &ids {
                let plain = (0..SUB_SLOTS)
                    .map(|i| v.slot(i))
                    .enumerate()
                    .find_map(|(i, s)| match PdPerm::decode(s) {
                        Some(e) if e.pd == pd(q) => Some((i, e.perm)),
                        _ => None,
                    });
                assert_eq!(v.find_sub(pd(q)), plain, "round {round}");
                for &r in &ids {
                    assert_eq!(v.find_pair(pd(q), pd(r)), (plain, v.find_sub(pd(r))));
                }
            }
            let free = (0..SUB_SLOTS).position(|i| PdPerm::decode(v.slot(i)).is_none());
            assert_eq!(v.free_sub(), free);
        }
    }

    #[test]
    fn only_sub_is_the_single_pair_wherever_it_is() {
        let mut v = Vte::new(pd(1), 1, Perm::RW, VmaAttrs::default());
        let p1 = PdPerm {
            pd: pd(1),
            perm: Perm::RW,
        };
        assert_eq!(v.only_sub(), Some(p1));
        let p9 = PdPerm {
            pd: pd(9),
            perm: Perm::R,
        };
        v.set_sub(13, Some(p9));
        assert_eq!(v.only_sub(), None, "two pairs");
        v.set_sub(0, None);
        assert_eq!(v.only_sub(), Some(p9), "one pair, not in slot 0");
        v.set_sub(13, None);
        assert_eq!(v.only_sub(), None, "no pair");
    }

    #[test]
    fn find_pair_with_one_pair_in_slot_zero_or_elsewhere() {
        let empty = || {
            let mut v = Vte::new(pd(1), 1, Perm::R, VmaAttrs::default());
            (0..SUB_SLOTS).for_each(|i| v.set_sub(i, None));
            v
        };
        for slot in 0..SUB_SLOTS {
            let mut v = empty();
            v.set_sub(
                slot,
                Some(PdPerm {
                    pd: pd(7),
                    perm: Perm::RW,
                }),
            );
            let hit = Some((slot, Perm::RW));
            assert_eq!(v.find_pair(pd(7), pd(9)), (hit, None), "slot {slot}");
            assert_eq!(v.find_pair(pd(9), pd(7)), (None, hit), "slot {slot}");
            assert_eq!(v.find_pair(pd(7), pd(7)), (hit, hit), "slot {slot}");
            assert_eq!(v.find_pair(pd(0), pd(8191)), (None, None), "slot {slot}");
        }
        // Only slot 0, holding PD 0 (the kernel): a pair, not an empty slot.
        let mut v = empty();
        v.set_sub(
            0,
            Some(PdPerm {
                pd: pd(0),
                perm: Perm::R,
            }),
        );
        assert_eq!(v.find_pair(pd(0), pd(1)), (Some((0, Perm::R)), None));
        // Empty sub-array.
        v.set_sub(0, None);
        assert_eq!(v.find_pair(pd(0), pd(1)), (None, None));
    }

    #[test]
    fn find_and_free_slots() {
        let mut v = Vte::new(pd(1), 1, Perm::R, VmaAttrs::default());
        assert_eq!(v.find_sub(pd(1)), Some((0, Perm::R)));
        assert_eq!(v.find_sub(pd(2)), None);
        assert_eq!(v.free_sub(), Some(1));
        for i in 1..SUB_SLOTS {
            v.set_sub(
                i,
                Some(PdPerm {
                    pd: pd(i as u64 + 1),
                    perm: Perm::W,
                }),
            );
        }
        assert_eq!(v.free_sub(), None);
        assert_eq!(v.sub_entries().count(), SUB_SLOTS);
    }
}
