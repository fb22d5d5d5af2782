//! The Jord virtual-address encoding: `Top | size class | index | offset`.
//!
//! ```text
//!  63          48 47    44 43      39 38                 s s-1              0
//! +--------------+--------+----------+--------------------+-----------------+
//! | 0 (canonical)| Top=0x1 | SC (5 b) |   index (39-s b)   |  offset (s b)   |
//! +--------------+--------+----------+--------------------+-----------------+
//!                                      s = 12 + SC = log2(class size)
//! ```
//!
//! - **Top** (bits 47..44) is `0x1`: the Jord region is `0x1000_0000_0000..0x2000_0000_0000`
//!   (16 TiB). It lies in the lower canonical half, below `0x0000_8000_0000_0000`, and starts at
//!   PML4 index 32 (≥ 1), so PML4 slot 0 (the kernel's identity map and low memory) and the
//!   upper half stay ordinary paged memory, as the paper keeps non-Jord addresses on the normal
//!   translation path.
//! - **SC** (bits 43..39) is the [`SizeClass`] code, 0 (4 KiB) to 20 (4 GiB); codes 21..31 are
//!   unused and rejected. With the SC field ending at bit 39, **each size class owns exactly one
//!   PML4 entry (512 GiB)**: a class is one top-level subtree, so the kernel can build, share or
//!   drop a class's page-table subtree without touching the others.
//! - **index** is the VMA's number within its class: `39 - s` bits, from 2^27 VMAs of 4 KiB down
//!   to 2^7 VMAs of 4 GiB. The table's per-class capacity (fixed at construction) may be lower.
//! - **offset** is the byte offset inside the class chunk (`s` bits). A VMA's base has offset 0,
//!   so every VMA is aligned to its class size.
//!
//! Compared with the paper's inferred layout (7 Top bits, 29 index bits for 128 B): the page is
//! the smallest class here, and 4 Top bits keep the region inside the 47-bit user half.

use crate::error::{Error, Result};
use crate::size_class::SizeClass;

/// Bit position of the Top field.
pub const TOP_SHIFT: u32 = 44;
/// Value of the Top field that marks a Jord address.
pub const TOP_VALUE: u64 = 0x1;
/// Bit position of the SC field.
pub const SC_SHIFT: u32 = 39;
/// Width of the SC field.
pub const SC_BITS: u32 = 5;
/// First address of the Jord region.
pub const REGION_START: u64 = TOP_VALUE << TOP_SHIFT;
/// One past the last address of the Jord region.
pub const REGION_END: u64 = (TOP_VALUE + 1) << TOP_SHIFT;
/// Bytes of address space per size class (one PML4 entry).
pub const CLASS_SPAN: u64 = 1 << SC_SHIFT;

// The region is in the lower canonical half, above PML4 slot 0, and holds every class.
const _: () = assert!(REGION_END <= 0x0000_8000_0000_0000);
const _: () = assert!(REGION_START >> 39 >= 1);
const _: () = assert!(REGION_START + (SizeClass::COUNT as u64) * CLASS_SPAN <= REGION_END);

/// Identifies one VMA slot: its size class and index within the class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VmaId {
    /// The size class.
    pub sc: SizeClass,
    /// The index within the class.
    pub index: u32,
}

impl VmaId {
    /// The VMA's base address (offset 0).
    pub fn base(self) -> u64 {
        class_start(self.sc) + ((self.index as u64) << self.sc.shift())
    }
}

/// A decoded Jord address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// The VMA slot the address falls in.
    pub vma: VmaId,
    /// Byte offset from the slot's base.
    pub offset: u64,
}

/// First address of a size class's part of the region.
pub const fn class_start(sc: SizeClass) -> u64 {
    REGION_START + ((sc.code() as u64) << SC_SHIFT)
}

/// How many VMAs of class `sc` the address layout can name (2^(39 - s)).
pub const fn max_index(sc: SizeClass) -> u64 {
    1 << (SC_SHIFT - sc.shift())
}

/// Encodes `(sc, index, offset)` as an address; `None` when the index or offset does not fit
/// its field.
pub fn encode(sc: SizeClass, index: u64, offset: u64) -> Option<u64> {
    if index >= max_index(sc) || offset >= sc.size() {
        return None;
    }
    Some(class_start(sc) | (index << sc.shift()) | offset)
}

/// Decodes an address of the Jord region. Fails with [`Error::BadAddress`] outside the region
/// or for an unused SC code.
pub fn decode(addr: u64) -> Result<Decoded> {
    if !(REGION_START..REGION_END).contains(&addr) {
        return Err(Error::BadAddress);
    }
    let code = ((addr >> SC_SHIFT) & ((1 << SC_BITS) - 1)) as u8;
    let sc = SizeClass::from_code(code).ok_or(Error::BadAddress)?;
    let within = addr & (CLASS_SPAN - 1);
    let index = within >> sc.shift();
    Ok(Decoded {
        vma: VmaId {
            sc,
            index: index as u32,
        },
        offset: within & (sc.size() - 1),
    })
}

/// How far a μprocess area keeps from every multiple of 4 GiB (see [`clear_of_data_words`]).
pub const EDGE_MARGIN: u64 = 16 << 20;

/// The low 32 bits a word holding four printable ASCII bytes in its lower half can have (a
/// short string, zero-padded or over a stale upper half): its fourth byte is a space or more
/// and below DEL. A μprocess area keeps out of this band too (see [`clear_of_data_words`]).
pub const ASCII_BAND: core::ops::Range<u64> = 0x2000_0000..0x8000_0000;

/// True when no byte of the `size`-aligned range `[base, base + size)` has low 32 bits within
/// [`EDGE_MARGIN`] of a multiple of 4 GiB or in [`ASCII_BAND`]. Then no word made of the upper
/// half of an address in it and a lower half that is a small 32-bit integer (below
/// `EDGE_MARGIN` or above `2^32 - EDGE_MARGIN`, negative or not), a string of up to three
/// bytes, or four printable ASCII bytes (an inline short string), stored over a stale pointer's
/// upper half, is an address in it. μFork's inferred tags rest on this (see
/// `fjord_ufork::source`).
pub const fn clear_of_data_words(base: u64, size: u64) -> bool {
    let low = base & 0xFFFF_FFFF;
    let end = low + size;
    size <= (1 << 32) - 2 * EDGE_MARGIN
        && low >= EDGE_MARGIN
        && end <= (1 << 32) - EDGE_MARGIN
        && (end <= ASCII_BAND.start || low >= ASCII_BAND.end)
}

/// True when some VMA of class `sc` is [`clear_of_data_words`] (classes up to 1 GiB: the slot
/// at the end of [`ASCII_BAND`] is).
pub const fn class_has_clear_slots(sc: SizeClass) -> bool {
    let size = sc.size();
    size <= ASCII_BAND.end && clear_of_data_words(ASCII_BAND.end, size)
}

/// True when `addr` lies in the Jord region (whatever its SC field holds).
pub const fn in_region(addr: u64) -> bool {
    addr >= REGION_START && addr < REGION_END
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn region_is_in_the_lower_half_above_pml4_slot_zero() {
        assert_eq!(REGION_START, 0x1000_0000_0000);
        assert_eq!(REGION_END, 0x2000_0000_0000);
        // Every class fits in the region, one PML4 entry each.
        let last = class_start(SizeClass::MAX) + CLASS_SPAN;
        assert!(last <= REGION_END);
        for sc in SizeClass::all() {
            assert_eq!(class_start(sc) % CLASS_SPAN, 0);
        }
    }

    #[test]
    fn clear_areas_hold_no_small_integer_or_short_string_over_their_upper_half() {
        let c = class_start(SizeClass::for_len(1 << 20).unwrap());
        // A 1 MiB slot at a 4 GiB boundary, one just below the next, ones in the ASCII band,
        // and clear ones below and above the band.
        assert!(!clear_of_data_words(c, 1 << 20));
        assert!(!clear_of_data_words(c + (1 << 32) - (1 << 20), 1 << 20));
        assert!(!clear_of_data_words(c + EDGE_MARGIN - (1 << 20), 1 << 20));
        assert!(!clear_of_data_words(c + 0x3930_0000, 1 << 20));
        assert!(!clear_of_data_words(
            c + ASCII_BAND.end - (1 << 20),
            1 << 20
        ));
        assert!(clear_of_data_words(c + EDGE_MARGIN, 1 << 20));
        assert!(clear_of_data_words(
            c + ASCII_BAND.start - (1 << 20),
            1 << 20
        ));
        assert!(clear_of_data_words(c + ASCII_BAND.end, 1 << 20));
        for base in [c + EDGE_MARGIN, c + (9 << 28), c + (1 << 32) + (10 << 28)] {
            assert!(clear_of_data_words(base, 1 << 20), "{base:#x}");
            let area = base..base + (1 << 20);
            let upper = base & !0xFFFF_FFFF;
            for v in [0u64, 3, 6, 1 << 20, EDGE_MARGIN - 1] {
                assert!(!area.contains(&(upper | v)));
                assert!(!area.contains(&(upper | (0xFFFF_FFFF - v))));
            }
            // Strings of up to four bytes: "a", "ab", "abc", "2999", "key:", " ~~~", "~~~~".
            for text in [&b"a"[..], b"ab", b"abc", b"2999", b"key:", b" ~~~", b"~~~~"] {
                let mut w = [0u8; 4];
                w[..text.len()].copy_from_slice(text);
                let low = u64::from(u32::from_le_bytes(w));
                assert!(!area.contains(&(upper | low)), "{text:?} at {base:#x}");
            }
        }
        // Up to 1 GiB a class has clear slots; 2 and 4 GiB slots always touch an edge.
        for sc in SizeClass::all() {
            assert_eq!(class_has_clear_slots(sc), sc.size() <= 1 << 30, "{sc:?}");
        }
    }

    #[test]
    fn index_widths() {
        assert_eq!(max_index(SizeClass::MIN), 1 << 27);
        assert_eq!(max_index(SizeClass::MAX), 1 << 7);
    }

    #[test]
    fn encode_decode_examples() {
        let sc = SizeClass::from_code(1).unwrap(); // 8 KiB
        let a = encode(sc, 3, 17).unwrap();
        assert_eq!(a, 0x1000_0000_0000 + (1 << 39) + 3 * 8192 + 17);
        let d = decode(a).unwrap();
        assert_eq!(d.vma, VmaId { sc, index: 3 });
        assert_eq!(d.offset, 17);
        assert_eq!(d.vma.base(), a - 17);
        assert_eq!(encode(sc, max_index(sc), 0), None);
        assert_eq!(encode(sc, 0, 8192), None);
    }

    #[test]
    fn decode_rejects_outside_and_bad_classes() {
        assert_eq!(decode(0), Err(Error::BadAddress));
        assert_eq!(decode(REGION_START - 1), Err(Error::BadAddress));
        assert_eq!(decode(REGION_END), Err(Error::BadAddress));
        assert_eq!(decode(u64::MAX), Err(Error::BadAddress));
        assert_eq!(decode(REGION_START + (21 << 39)), Err(Error::BadAddress));
        assert_eq!(decode(REGION_END - 1), Err(Error::BadAddress));
        assert!(decode(REGION_START + (20 << 39)).is_ok());
    }

    mod props {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn round_trip(code in 0u8..21, index in any::<u64>(), offset in any::<u64>()) {
                let sc = SizeClass::from_code(code).unwrap();
                let index = index % max_index(sc);
                let offset = offset % sc.size();
                let a = encode(sc, index, offset).unwrap();
                prop_assert!(in_region(a));
                let d = decode(a).unwrap();
                prop_assert_eq!(d.vma.sc, sc);
                prop_assert_eq!(d.vma.index as u64, index);
                prop_assert_eq!(d.offset, offset);
            }

            #[test]
            fn decode_then_encode(addr in REGION_START..REGION_END) {
                match decode(addr) {
                    Ok(d) => prop_assert_eq!(
                        encode(d.vma.sc, d.vma.index as u64, d.offset), Some(addr)),
                    Err(e) => {
                        prop_assert_eq!(e, Error::BadAddress);
                        prop_assert!((addr >> SC_SHIFT) & 31 >= 21);
                    }
                }
            }
        }
    }
}
