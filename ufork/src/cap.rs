//! The capability format: a 128-bit value made of an address word and a metadata word that
//! packs area-relative bounds and permissions.
//!
//! # Format
//!
//! ```text
//! word 0 (address):  the 64-bit address the capability points at
//! word 1 (metadata): bits  0..6   permissions (R, W, X, LOAD_CAP, STORE_CAP, SYSTEM)
//!                    bits  6..34  base offset from the area's base (28 bits)
//!                    bits 34..64  length in bytes (30 bits)
//! ```
//!
//! Bounds are relative to the area of the μprocess that holds the capability, so they are
//! exact to the byte and relocating a capability from the parent's area to the child's is only
//! `address += child_base - parent_base`: the metadata word does not change. A base offset of
//! 28 bits limits areas in which capabilities are made to [`MAX_AREA_SIZE`] (256 MiB); the
//! 30-bit length holds a whole-area capability of that size. Larger areas would need
//! compressed bounds (an exponent, as CHERI Concentrate has) and relocation deltas that are
//! multiples of the bounds' alignment, which size-aligned areas give.
//!
//! # Where the metadata lives on x86_64
//!
//! On CHERI hardware the whole 128-bit value sits in memory (16-byte aligned) with a hidden tag
//! bit, and the processor checks bounds and permissions on every access. Fjord runs native
//! x86_64 code compiled for plain 64-bit pointers: what a program stores in memory and in
//! registers is the address word alone. The metadata word is kept by the kernel:
//!
//! - every plain pointer a μprocess holds has, implicitly, the bounds of its area's root
//!   capability ([`Cap::root`]), and that bound is enforced by the μprocess's protection
//!   domain (its page tables map only its own area), not per pointer;
//! - the kernel stores full capabilities where it keeps them itself: what it hands out
//!   (mmap results, the stack, heap and TLS bases), system-call argument checks (a user
//!   pointer and length are checked with [`Cap::check_range`] against the caller's root
//!   capability), and position-independent checkpoints;
//! - which memory words hold pointers is the shadow tag table's job
//!   ([`crate::tags::ShadowTags`]), one bit per 8-byte word.
//!
//! A CHERI backend would store [`Cap::to_words`] in memory as the native capability and let
//! hardware check it; this module's checks then describe what the hardware does.

use crate::area::Area;
use core::ops::Range;

/// The largest area in which capabilities can be made: 2^28 bytes (256 MiB).
pub const MAX_AREA_SIZE: u64 = 1 << 28;

const PERM_BITS: u32 = 6;
const BASE_SHIFT: u32 = PERM_BITS;
const BASE_BITS: u32 = 28;
const LEN_SHIFT: u32 = BASE_SHIFT + BASE_BITS;
const LEN_BITS: u32 = 64 - LEN_SHIFT;

/// Why a capability could not be made, decoded or used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CapError {
    /// The bounds lie outside the area, or the access lies outside the bounds.
    OutOfBounds,
    /// The capability lacks a permission the access needs.
    PermissionDenied,
    /// The area is larger than [`MAX_AREA_SIZE`], so its offsets do not fit the format.
    NotRepresentable,
    /// Narrowing asked for bounds that are not inside the current ones (monotonicity).
    Widening,
    /// A metadata word whose bounds extend past [`MAX_AREA_SIZE`].
    Malformed,
    /// Relocation between areas of different sizes.
    AreaMismatch,
}

/// The permissions a capability grants.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CapPerms(u8);

impl CapPerms {
    /// No permission.
    pub const NONE: CapPerms = CapPerms(0);
    /// Load data.
    pub const R: CapPerms = CapPerms(1);
    /// Store data.
    pub const W: CapPerms = CapPerms(2);
    /// Execute.
    pub const X: CapPerms = CapPerms(4);
    /// Load capabilities (CHERI's load-capability permission).
    pub const LOAD_CAP: CapPerms = CapPerms(8);
    /// Store capabilities.
    pub const STORE_CAP: CapPerms = CapPerms(16);
    /// System registers and privileged instructions; never granted to a μprocess.
    pub const SYSTEM: CapPerms = CapPerms(32);
    /// Everything a μprocess's data may hold: R, W, LOAD_CAP, STORE_CAP.
    pub const DATA: CapPerms = CapPerms(1 | 2 | 8 | 16);
    /// Everything a μprocess's code may hold: R, X, LOAD_CAP.
    pub const CODE: CapPerms = CapPerms(1 | 4 | 8);
    /// Every permission.
    pub const ALL: CapPerms = CapPerms((1 << PERM_BITS) - 1);

    /// The permissions in the low six bits of `bits`; other bits are ignored.
    pub const fn from_bits_truncate(bits: u8) -> CapPerms {
        CapPerms(bits & Self::ALL.0)
    }

    /// The raw bits.
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// True when every permission of `other` is in `self`.
    pub const fn contains(self, other: CapPerms) -> bool {
        self.0 & other.0 == other.0
    }

    /// The permissions in both.
    pub const fn intersect(self, other: CapPerms) -> CapPerms {
        CapPerms(self.0 & other.0)
    }

    /// The permissions in either.
    pub const fn union(self, other: CapPerms) -> CapPerms {
        CapPerms(self.0 | other.0)
    }
}

/// A capability: an address plus area-relative bounds and permissions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cap {
    addr: u64,
    base_off: u32,
    len: u32,
    perms: CapPerms,
}

impl Cap {
    /// A capability for `[base, base + len)` inside `area` with `perms`, pointing at `base`.
    pub fn new(area: &Area, base: u64, len: u64, perms: CapPerms) -> Result<Cap, CapError> {
        if area.size() > MAX_AREA_SIZE {
            return Err(CapError::NotRepresentable);
        }
        if !area.contains_range(base, len) {
            return Err(CapError::OutOfBounds);
        }
        // Both fit: the area is at most 2^28 bytes.
        Ok(Cap {
            addr: base,
            base_off: (base - area.base()) as u32,
            len: len as u32,
            perms,
        })
    }

    /// The capability for the whole area: what every plain pointer of the μprocess implicitly
    /// carries.
    pub fn root(area: &Area, perms: CapPerms) -> Result<Cap, CapError> {
        Cap::new(area, area.base(), area.size(), perms)
    }

    /// The address.
    pub const fn addr(&self) -> u64 {
        self.addr
    }

    /// The same capability pointing at `addr`. Any address may be held; bounds are checked on
    /// access, as on CHERI.
    pub const fn with_addr(self, addr: u64) -> Cap {
        Cap { addr, ..self }
    }

    /// The offset of the bounds' base from the area's base.
    pub const fn base_offset(&self) -> u64 {
        self.base_off as u64
    }

    /// The length of the bounds in bytes.
    pub const fn len(&self) -> u64 {
        self.len as u64
    }

    /// True when the bounds are empty (no access is possible).
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The permissions.
    pub const fn perms(&self) -> CapPerms {
        self.perms
    }

    /// True when the bounds fit inside an area of `area`'s size.
    pub const fn fits(&self, area: &Area) -> bool {
        self.base_offset() + self.len() <= area.size()
    }

    /// The absolute bounds when the capability belongs to `area` (clipped at the top of the
    /// address space for a capability that does not [`Cap::fits`] the area).
    pub const fn bounds_in(&self, area: &Area) -> Range<u64> {
        let base = area.base().saturating_add(self.base_off as u64);
        base..base.saturating_add(self.len as u64)
    }

    /// The two 64-bit words: address, then metadata.
    pub const fn to_words(&self) -> [u64; 2] {
        let meta = self.perms.0 as u64
            | (self.base_off as u64) << BASE_SHIFT
            | (self.len as u64) << LEN_SHIFT;
        [self.addr, meta]
    }

    /// Decodes [`Cap::to_words`]; refuses a metadata word whose bounds end past
    /// [`MAX_AREA_SIZE`].
    pub const fn from_words(words: [u64; 2]) -> Result<Cap, CapError> {
        let meta = words[1];
        let base_off = (meta >> BASE_SHIFT) & ((1 << BASE_BITS) - 1);
        let len = (meta >> LEN_SHIFT) & ((1 << LEN_BITS) - 1);
        if base_off + len > MAX_AREA_SIZE {
            return Err(CapError::Malformed);
        }
        Ok(Cap {
            addr: words[0],
            base_off: base_off as u32,
            len: len as u32,
            perms: CapPerms::from_bits_truncate(meta as u8),
        })
    }

    /// The 128-bit value: metadata in the high half, address in the low half.
    pub const fn to_bits(&self) -> u128 {
        let [addr, meta] = self.to_words();
        (meta as u128) << 64 | addr as u128
    }

    /// Decodes [`Cap::to_bits`].
    pub const fn from_bits(bits: u128) -> Result<Cap, CapError> {
        Cap::from_words([bits as u64, (bits >> 64) as u64])
    }

    /// Checks an access of `len` bytes at `addr` needing `need`, for a capability that belongs
    /// to `area`: permissions first, then bounds (an empty access at the end is allowed).
    pub fn check_range(
        &self,
        area: &Area,
        addr: u64,
        len: u64,
        need: CapPerms,
    ) -> Result<(), CapError> {
        if !self.perms.contains(need) {
            return Err(CapError::PermissionDenied);
        }
        if !self.fits(area) {
            return Err(CapError::OutOfBounds);
        }
        let off = addr.wrapping_sub(area.base() + self.base_offset());
        if off <= self.len() && len <= self.len() - off {
            Ok(())
        } else {
            Err(CapError::OutOfBounds)
        }
    }

    /// Checks an access of `len` bytes at the capability's own address.
    pub fn check_access(&self, area: &Area, len: u64, need: CapPerms) -> Result<(), CapError> {
        self.check_range(area, self.addr, len, need)
    }

    /// The capability with only the permissions also in `keep` (permissions never grow).
    pub const fn restrict(self, keep: CapPerms) -> Cap {
        Cap {
            perms: self.perms.intersect(keep),
            ..self
        }
    }

    /// The capability with bounds `[base, base + len)`, which must lie inside the current
    /// bounds (bounds never grow); the address is kept.
    pub fn narrow(self, area: &Area, base: u64, len: u64) -> Result<Cap, CapError> {
        if !self.fits(area) {
            return Err(CapError::OutOfBounds);
        }
        let cur = self.bounds_in(area);
        let off = base.wrapping_sub(cur.start);
        let cur_len = cur.end - cur.start;
        if off > cur_len || len > cur_len - off {
            return Err(CapError::Widening);
        }
        Ok(Cap {
            base_off: self.base_off + off as u32,
            len: len as u32,
            ..self
        })
    }

    /// The capability moved from the area `from` to the area `to` (same size): the address
    /// shifts by `to.base - from.base`; the area-relative bounds and the permissions stay as
    /// they are, so the result is bounded to `to` exactly as the original was to `from`.
    pub fn relocate(self, from: &Area, to: &Area) -> Result<Cap, CapError> {
        if from.size() != to.size() {
            return Err(CapError::AreaMismatch);
        }
        if !self.fits(from) {
            return Err(CapError::OutOfBounds);
        }
        Ok(self.with_addr(self.addr.wrapping_add(from.delta_to(to))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn area(base: u64) -> Area {
        Area::new(base, 1 << 20).unwrap()
    }

    #[test]
    fn encode_layout_is_as_documented() {
        let a = area(0x40_0000);
        let c = Cap::new(&a, 0x40_0010, 0x20, CapPerms::R.union(CapPerms::W)).unwrap();
        let [addr, meta] = c.to_words();
        assert_eq!(addr, 0x40_0010);
        assert_eq!(meta, 3 | 0x10 << 6 | 0x20 << 34);
        assert_eq!(Cap::from_words([addr, meta]), Ok(c));
        assert_eq!(Cap::from_bits(c.to_bits()), Ok(c));
        assert_eq!(c.to_bits() >> 64, meta as u128);
    }

    #[test]
    fn new_refuses_out_of_area_and_large_areas() {
        let a = area(0x40_0000);
        assert_eq!(
            Cap::new(&a, a.end() - 8, 16, CapPerms::R),
            Err(CapError::OutOfBounds)
        );
        assert_eq!(
            Cap::new(&a, a.base() - 8, 8, CapPerms::R),
            Err(CapError::OutOfBounds)
        );
        assert!(Cap::new(&a, a.end(), 0, CapPerms::R).is_ok());
        let big = Area::new(0, MAX_AREA_SIZE * 2).unwrap();
        assert_eq!(
            Cap::root(&big, CapPerms::R),
            Err(CapError::NotRepresentable)
        );
        let max = Area::new(MAX_AREA_SIZE, MAX_AREA_SIZE).unwrap();
        let root = Cap::root(&max, CapPerms::ALL).unwrap();
        assert_eq!(root.len(), MAX_AREA_SIZE);
        assert_eq!(Cap::from_words(root.to_words()), Ok(root));
    }

    #[test]
    fn malformed_metadata_is_refused() {
        let meta = (MAX_AREA_SIZE - 4) << BASE_SHIFT | 8 << LEN_SHIFT;
        assert_eq!(Cap::from_words([0, meta]), Err(CapError::Malformed));
        assert_eq!(Cap::from_words([0, u64::MAX]), Err(CapError::Malformed));
    }

    #[test]
    fn checks_permissions_and_bounds() {
        let a = area(0x40_0000);
        let c = Cap::new(&a, 0x40_1000, 0x100, CapPerms::R).unwrap();
        assert_eq!(c.check_access(&a, 0x100, CapPerms::R), Ok(()));
        assert_eq!(
            c.check_access(&a, 0x101, CapPerms::R),
            Err(CapError::OutOfBounds)
        );
        assert_eq!(
            c.check_access(&a, 1, CapPerms::W),
            Err(CapError::PermissionDenied)
        );
        assert_eq!(c.check_range(&a, 0x40_10ff, 1, CapPerms::R), Ok(()));
        assert_eq!(c.check_range(&a, 0x40_1100, 0, CapPerms::R), Ok(()));
        assert_eq!(
            c.check_range(&a, 0x40_0fff, 1, CapPerms::R),
            Err(CapError::OutOfBounds)
        );
        assert_eq!(
            c.check_range(&a, 0x40_1000, u64::MAX, CapPerms::R),
            Err(CapError::OutOfBounds)
        );
        let moved = c.with_addr(0x40_10f8);
        assert_eq!(moved.check_access(&a, 8, CapPerms::R), Ok(()));
        assert_eq!(
            moved.check_access(&a, 9, CapPerms::R),
            Err(CapError::OutOfBounds)
        );
    }

    #[test]
    fn narrowing_and_restricting_are_monotonic() {
        let a = area(0x40_0000);
        let root = Cap::root(&a, CapPerms::DATA).unwrap();
        let n = root.narrow(&a, 0x40_2000, 0x1000).unwrap();
        assert_eq!(n.bounds_in(&a), 0x40_2000..0x40_3000);
        assert_eq!(n.addr(), a.base());
        assert_eq!(n.narrow(&a, 0x40_1fff, 1), Err(CapError::Widening));
        assert_eq!(n.narrow(&a, 0x40_2800, 0x801), Err(CapError::Widening));
        assert!(n.narrow(&a, 0x40_3000, 0).is_ok());
        let r = n.restrict(CapPerms::R.union(CapPerms::X));
        assert_eq!(r.perms(), CapPerms::R);
        assert_eq!(r.restrict(CapPerms::ALL).perms(), CapPerms::R);
    }

    #[test]
    fn relocation_moves_the_address_and_keeps_the_bounds() {
        let p = area(0x40_0000);
        let c = area(0x80_0000);
        let cap = Cap::new(&p, 0x40_2000, 0x40, CapPerms::DATA)
            .unwrap()
            .with_addr(0x40_2010);
        let moved = cap.relocate(&p, &c).unwrap();
        assert_eq!(moved.addr(), 0x80_2010);
        assert_eq!(moved.bounds_in(&c), 0x80_2000..0x80_2040);
        assert_eq!(moved.perms(), CapPerms::DATA);
        assert_eq!(moved.to_words()[1], cap.to_words()[1]);
        assert_eq!(moved.relocate(&c, &p), Ok(cap));
        let other = Area::new(0, 1 << 21).unwrap();
        assert_eq!(cap.relocate(&p, &other), Err(CapError::AreaMismatch));
        let small = Area::new(0, 1 << 12).unwrap();
        let small2 = Area::new(1 << 12, 1 << 12).unwrap();
        assert_eq!(cap.relocate(&small, &small2), Err(CapError::OutOfBounds));
    }

    #[test]
    fn a_capability_from_another_area_never_panics() {
        // A decoded capability whose bounds exceed a small area at the top of the address
        // space: every operation refuses it instead of overflowing.
        let top = Area::new(u64::MAX - 8191, 4096).unwrap();
        let cap = Cap::from_words([0, (MAX_AREA_SIZE - 8) << BASE_SHIFT | 8 << LEN_SHIFT]).unwrap();
        assert!(!cap.fits(&top));
        assert_eq!(cap.bounds_in(&top).end, u64::MAX);
        assert_eq!(
            cap.check_access(&top, 1, CapPerms::NONE),
            Err(CapError::OutOfBounds)
        );
        assert_eq!(cap.narrow(&top, 0, 0), Err(CapError::OutOfBounds));
        assert_eq!(cap.relocate(&top, &top), Err(CapError::OutOfBounds));
    }

    mod props {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn words_round_trip(addr in any::<u64>(), base in 0u64..MAX_AREA_SIZE,
                                len in 0u64..=MAX_AREA_SIZE, perms in 0u8..64) {
                let len = len % (MAX_AREA_SIZE - base + 1);
                let a = Area::new(MAX_AREA_SIZE * 3, MAX_AREA_SIZE).unwrap();
                let c = Cap::new(&a, a.base() + base, len, CapPerms::from_bits_truncate(perms))
                    .unwrap()
                    .with_addr(addr);
                prop_assert_eq!(Cap::from_words(c.to_words()), Ok(c));
                prop_assert_eq!(Cap::from_bits(c.to_bits()), Ok(c));
            }

            #[test]
            fn decode_then_encode(addr in any::<u64>(), meta in any::<u64>()) {
                if let Ok(c) = Cap::from_words([addr, meta]) {
                    prop_assert_eq!(c.to_words(), [addr, meta]);
                }
            }

            #[test]
            fn relocated_access_checks_agree(off in 0u64..1 << 20, len in 0u64..1 << 20,
                                             at in 0u64..1 << 21, n in 0u64..64) {
                let p = Area::new(1 << 24, 1 << 20).unwrap();
                let c = Area::new(7 << 20, 1 << 20).unwrap();
                let len = len % ((1 << 20) - off + 1);
                let cap = Cap::new(&p, p.base() + off, len, CapPerms::DATA).unwrap()
                    .with_addr(p.base().wrapping_add(at));
                let moved = cap.relocate(&p, &c).unwrap();
                prop_assert_eq!(
                    cap.check_access(&p, n, CapPerms::R),
                    moved.check_access(&c, n, CapPerms::R)
                );
            }
        }
    }
}
