//! The area of a μprocess: one contiguous, size-aligned range of the address space that holds
//! everything the μprocess can point to, and the layout of its sub-regions.
//!
//! μFork (SOSP '25, §3.7) loads each μprocess in a contiguous area so that one bounds range
//! describes it and so that relocating a pointer from the parent to the child is adding one
//! constant, `child_base - parent_base`. Here an area's size is a power of two of at least one
//! page and its base is a multiple of its size (as Jord's size classes lay VMAs out), so every
//! area is also one naturally aligned block: `addr & !(size - 1)` finds the base of the area
//! holding `addr`.
//!
//! [`AreaLayout`] places the sub-regions in an area from their sizes: code, GOT, data,
//! allocator metadata and heap from the bottom up, TLS and stack from the top down (the stack
//! ends at the area's end), and the space left between heap and TLS is room for the heap to
//! grow. The layout is area-relative, so parent and child share it.

use core::ops::Range;

/// log2 of the page size.
pub const PAGE_SHIFT: u32 = 12;

/// The page size in bytes (4 KiB): the smallest area and the unit of every region.
pub const PAGE_SIZE: u64 = 1 << PAGE_SHIFT;

/// Why an area or a layout was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AreaError {
    /// The size is not a power of two.
    NotPowerOfTwo,
    /// The size is smaller than one page.
    BelowPage,
    /// The base is not a multiple of the size.
    Misaligned,
    /// A sum (base plus size, or the regions of a layout) does not fit in 64 bits.
    Overflow,
    /// The regions of a layout do not fit in the area size asked for.
    TooSmall,
    /// The area's size differs from the layout's (or from the other area's).
    SizeMismatch,
}

/// A μprocess area: `[base, base + size)`, `size` a power of two of at least [`PAGE_SIZE`] and
/// `base` a multiple of `size`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Area {
    base: u64,
    size: u64,
}

impl Area {
    /// The area `[base, base + size)`, if `size` is a power of two of at least one page, `base`
    /// is a multiple of it and the end fits in 64 bits.
    pub const fn new(base: u64, size: u64) -> Result<Area, AreaError> {
        if !size.is_power_of_two() {
            return Err(AreaError::NotPowerOfTwo);
        }
        if size < PAGE_SIZE {
            return Err(AreaError::BelowPage);
        }
        if base & (size - 1) != 0 {
            return Err(AreaError::Misaligned);
        }
        if base.checked_add(size).is_none() {
            return Err(AreaError::Overflow);
        }
        Ok(Area { base, size })
    }

    /// The first address of the area.
    pub const fn base(&self) -> u64 {
        self.base
    }

    /// The size in bytes (a power of two).
    pub const fn size(&self) -> u64 {
        self.size
    }

    /// log2 of the size.
    pub const fn shift(&self) -> u32 {
        self.size.trailing_zeros()
    }

    /// The first address past the area (never overflows: checked by [`Area::new`]).
    pub const fn end(&self) -> u64 {
        self.base + self.size
    }

    /// The number of pages in the area.
    pub const fn pages(&self) -> u64 {
        self.size >> PAGE_SHIFT
    }

    /// True when `addr` lies inside the area.
    pub const fn contains(&self, addr: u64) -> bool {
        addr.wrapping_sub(self.base) < self.size
    }

    /// True when the whole range `[addr, addr + len)` lies inside the area (an empty range
    /// counts when `addr` is inside or at the end).
    pub const fn contains_range(&self, addr: u64, len: u64) -> bool {
        let off = addr.wrapping_sub(self.base);
        off <= self.size && len <= self.size - off
    }

    /// The offset of `addr` from the base, if `addr` is inside.
    pub const fn offset_of(&self, addr: u64) -> Option<u64> {
        if self.contains(addr) {
            Some(addr - self.base)
        } else {
            None
        }
    }

    /// The address at `offset` from the base, if the offset is inside.
    pub const fn addr_at(&self, offset: u64) -> Option<u64> {
        if offset < self.size {
            Some(self.base + offset)
        } else {
            None
        }
    }

    /// The address in `to` at the same offset as `addr` in `self`: how fork relocates a
    /// pointer from the parent's area to the child's. `None` when `addr` is not in `self` or
    /// the offset is beyond `to` (areas of different sizes).
    pub const fn translate_to(&self, to: &Area, addr: u64) -> Option<u64> {
        match self.offset_of(addr) {
            Some(off) => to.addr_at(off),
            None => None,
        }
    }

    /// `to.base - self.base` modulo 2^64: the constant fork adds to relocate a pointer.
    pub const fn delta_to(&self, to: &Area) -> u64 {
        to.base.wrapping_sub(self.base)
    }

    /// True when the two areas share at least one address.
    pub const fn overlaps(&self, other: &Area) -> bool {
        self.base < other.end() && other.base < self.end()
    }

    /// The base of the page holding `addr`, if `addr` is inside.
    pub const fn page_of(&self, addr: u64) -> Option<u64> {
        if self.contains(addr) {
            Some(addr & !(PAGE_SIZE - 1))
        } else {
            None
        }
    }

    /// The base address of every page, lowest first.
    pub fn page_addrs(&self) -> impl Iterator<Item = u64> + use<> {
        let base = self.base;
        (0..self.pages()).map(move |i| base + (i << PAGE_SHIFT))
    }
}

/// The sub-regions of an area, in address order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Region {
    /// Code and read-only data: frames shared by parent and child.
    Code,
    /// The global offset table: absolute pointers, copied and relocated eagerly at fork.
    Got,
    /// Writable data and bss.
    Data,
    /// The heap allocator's metadata (free lists, arena headers): copied and relocated eagerly
    /// at fork so that the child's first allocation sees its own heap.
    AllocMeta,
    /// The heap proper; it may grow into the gap below [`Region::Tls`].
    Heap,
    /// Thread-local storage (the fs base points here).
    Tls,
    /// The stack, which ends at the area's end and grows down.
    Stack,
}

impl Region {
    /// Every region, in address order.
    pub const ALL: [Region; 7] = [
        Region::Code,
        Region::Got,
        Region::Data,
        Region::AllocMeta,
        Region::Heap,
        Region::Tls,
        Region::Stack,
    ];

    /// The region's position in [`Region::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }
}

/// Rounds up to whole pages with checked arithmetic.
const fn page_round_up(len: u64) -> Result<u64, AreaError> {
    match len.checked_add(PAGE_SIZE - 1) {
        Some(v) => Ok(v & !(PAGE_SIZE - 1)),
        None => Err(AreaError::Overflow),
    }
}

/// Collects the sizes of the regions and builds an [`AreaLayout`]. Every size is rounded up to
/// whole pages; a region left unset is empty.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LayoutBuilder {
    lens: [u64; 7],
    area_size: Option<u64>,
}

impl LayoutBuilder {
    /// A builder with every region empty and the area size left to [`LayoutBuilder::build`].
    pub const fn new() -> LayoutBuilder {
        LayoutBuilder {
            lens: [0; 7],
            area_size: None,
        }
    }

    /// Sets the length of one region.
    pub const fn region(mut self, region: Region, len: u64) -> LayoutBuilder {
        self.lens[region.index()] = len;
        self
    }

    /// Sets the code (and read-only data) length.
    pub const fn code(self, len: u64) -> LayoutBuilder {
        self.region(Region::Code, len)
    }

    /// Sets the GOT length.
    pub const fn got(self, len: u64) -> LayoutBuilder {
        self.region(Region::Got, len)
    }

    /// Sets the data and bss length.
    pub const fn data(self, len: u64) -> LayoutBuilder {
        self.region(Region::Data, len)
    }

    /// Sets the allocator-metadata length.
    pub const fn alloc_meta(self, len: u64) -> LayoutBuilder {
        self.region(Region::AllocMeta, len)
    }

    /// Sets the initial heap length.
    pub const fn heap(self, len: u64) -> LayoutBuilder {
        self.region(Region::Heap, len)
    }

    /// Sets the TLS length.
    pub const fn tls(self, len: u64) -> LayoutBuilder {
        self.region(Region::Tls, len)
    }

    /// Sets the stack length.
    pub const fn stack(self, len: u64) -> LayoutBuilder {
        self.region(Region::Stack, len)
    }

    /// Asks for an area of exactly `size` bytes instead of the smallest that fits.
    pub const fn area_size(mut self, size: u64) -> LayoutBuilder {
        self.area_size = Some(size);
        self
    }

    /// Lays the regions out. The area size is the one asked for (which must be a power of two
    /// of at least a page and hold every region) or else the smallest power of two that holds
    /// them all.
    pub fn build(self) -> Result<AreaLayout, AreaError> {
        let mut rounded = [0u64; 7];
        let mut total = 0u64;
        for (r, &len) in rounded.iter_mut().zip(self.lens.iter()) {
            *r = page_round_up(len)?;
            total = total.checked_add(*r).ok_or(AreaError::Overflow)?;
        }
        let size = match self.area_size {
            Some(size) => {
                if !size.is_power_of_two() {
                    return Err(AreaError::NotPowerOfTwo);
                }
                if size < PAGE_SIZE {
                    return Err(AreaError::BelowPage);
                }
                if total > size {
                    return Err(AreaError::TooSmall);
                }
                size
            }
            None => total
                .max(PAGE_SIZE)
                .checked_next_power_of_two()
                .ok_or(AreaError::Overflow)?,
        };
        let mut starts = [0u64; 7];
        // Bottom up: code, GOT, data, allocator metadata, heap. No overflow: each partial sum
        // is at most `total`.
        let mut at = 0;
        for region in &Region::ALL[..=Region::Heap.index()] {
            starts[region.index()] = at;
            at += rounded[region.index()];
        }
        // Top down: the stack ends at the area's end, TLS sits below it.
        let mut top = size;
        for region in [Region::Stack, Region::Tls] {
            top -= rounded[region.index()];
            starts[region.index()] = top;
        }
        Ok(AreaLayout {
            starts,
            lens: rounded,
            size,
        })
    }
}

/// Where each region lies inside an area, as offsets from the area's base (the same for
/// parent and child).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AreaLayout {
    starts: [u64; 7],
    lens: [u64; 7],
    size: u64,
}

impl AreaLayout {
    /// A builder with every region empty.
    pub const fn builder() -> LayoutBuilder {
        LayoutBuilder::new()
    }

    /// The size of the area this layout fills.
    pub const fn size(&self) -> u64 {
        self.size
    }

    /// The offsets a region covers (page-aligned; empty for a region of length 0).
    pub const fn range(&self, region: Region) -> Range<u64> {
        let start = self.starts[region.index()];
        start..start + self.lens[region.index()]
    }

    /// The free offsets between the heap's end and the TLS start, where the heap may grow.
    pub const fn growth_gap(&self) -> Range<u64> {
        self.range(Region::Heap).end..self.range(Region::Tls).start
    }

    /// The region holding the byte at `offset`, or `None` for the growth gap and for offsets
    /// past the end.
    pub fn region_at(&self, offset: u64) -> Option<Region> {
        Region::ALL
            .into_iter()
            .find(|&r| self.range(r).contains(&offset))
    }

    /// The absolute addresses of a region in `area`; the area must have the layout's size.
    pub fn region_in(&self, area: &Area, region: Region) -> Result<Range<u64>, AreaError> {
        if area.size() != self.size {
            return Err(AreaError::SizeMismatch);
        }
        let r = self.range(region);
        Ok(area.base() + r.start..area.base() + r.end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn new_checks_size_alignment_and_end() {
        assert!(Area::new(0x4000_0000, MIB).is_ok());
        assert_eq!(Area::new(0, 3 * PAGE_SIZE), Err(AreaError::NotPowerOfTwo));
        assert_eq!(Area::new(0, 0), Err(AreaError::NotPowerOfTwo));
        assert_eq!(Area::new(0, 2048), Err(AreaError::BelowPage));
        assert_eq!(
            Area::new(PAGE_SIZE, 2 * PAGE_SIZE),
            Err(AreaError::Misaligned)
        );
        assert_eq!(Area::new(1 << 63, 1 << 63), Err(AreaError::Overflow));
        let top = Area::new(u64::MAX - (MIB - 1) - MIB, MIB).unwrap();
        assert_eq!(top.end(), u64::MAX - (MIB - 1));
    }

    #[test]
    fn contains_offset_and_translate() {
        let p = Area::new(0x10_0000, MIB).unwrap();
        let c = Area::new(0x30_0000, MIB).unwrap();
        assert!(p.contains(p.base()));
        assert!(p.contains(p.end() - 1));
        assert!(!p.contains(p.end()));
        assert!(!p.contains(p.base() - 1));
        assert_eq!(p.offset_of(0x10_0123), Some(0x123));
        assert_eq!(p.offset_of(0x20_0000), None);
        assert_eq!(p.translate_to(&c, 0x10_0123), Some(0x30_0123));
        assert_eq!(p.translate_to(&c, 0x30_0123), None);
        assert_eq!(p.base().wrapping_add(p.delta_to(&c)), c.base());
        assert_eq!(c.base().wrapping_add(c.delta_to(&p)), p.base());
        let small = Area::new(0x50_0000, PAGE_SIZE).unwrap();
        assert_eq!(p.translate_to(&small, 0x10_0fff), Some(0x50_0fff));
        assert_eq!(p.translate_to(&small, 0x10_1000), None);
        assert_eq!(p.pages(), 256);
        assert_eq!(p.shift(), 20);
        assert_eq!(p.page_of(0x10_1fff), Some(0x10_1000));
        assert_eq!(p.page_addrs().nth(2), Some(0x10_2000));
        assert_eq!(p.page_addrs().count(), 256);
    }

    #[test]
    fn contains_range_edges() {
        let a = Area::new(0x10_0000, MIB).unwrap();
        assert!(a.contains_range(a.base(), MIB));
        assert!(a.contains_range(a.end(), 0));
        assert!(!a.contains_range(a.base(), MIB + 1));
        assert!(!a.contains_range(a.end() - 8, 16));
        assert!(!a.contains_range(a.base() - 8, 8));
        assert!(!a.contains_range(a.end() - 8, u64::MAX));
    }

    #[test]
    fn overlaps_is_symmetric() {
        let a = Area::new(0x10_0000, MIB).unwrap();
        let b = Area::new(0x10_0000 + 0x8_0000, 0x8_0000).unwrap();
        let c = Area::new(0x20_0000, MIB).unwrap();
        assert!(a.overlaps(&b) && b.overlaps(&a));
        assert!(!a.overlaps(&c) && !c.overlaps(&a));
    }

    #[test]
    fn layout_places_regions_bottom_up_and_top_down() {
        let l = AreaLayout::builder()
            .code(3 * PAGE_SIZE + 1)
            .got(100)
            .data(PAGE_SIZE)
            .alloc_meta(PAGE_SIZE)
            .heap(8 * PAGE_SIZE)
            .tls(10)
            .stack(16 * PAGE_SIZE)
            .build()
            .unwrap();
        // 4 + 1 + 1 + 1 + 8 + 1 + 16 = 32 pages = 128 KiB.
        assert_eq!(l.size(), 32 * PAGE_SIZE);
        assert_eq!(l.range(Region::Code), 0..4 * PAGE_SIZE);
        assert_eq!(l.range(Region::Got), 4 * PAGE_SIZE..5 * PAGE_SIZE);
        assert_eq!(l.range(Region::Heap), 7 * PAGE_SIZE..15 * PAGE_SIZE);
        assert_eq!(l.range(Region::Stack), 16 * PAGE_SIZE..32 * PAGE_SIZE);
        assert_eq!(l.range(Region::Tls), 15 * PAGE_SIZE..16 * PAGE_SIZE);
        assert!(l.growth_gap().is_empty());
        assert_eq!(l.region_at(0), Some(Region::Code));
        assert_eq!(l.region_at(4 * PAGE_SIZE + 8), Some(Region::Got));
        assert_eq!(l.region_at(32 * PAGE_SIZE - 1), Some(Region::Stack));
        assert_eq!(l.region_at(32 * PAGE_SIZE), None);
    }

    #[test]
    fn layout_with_a_fixed_size_leaves_a_growth_gap() {
        let l = AreaLayout::builder()
            .code(PAGE_SIZE)
            .heap(PAGE_SIZE)
            .stack(PAGE_SIZE)
            .area_size(MIB)
            .build()
            .unwrap();
        assert_eq!(l.size(), MIB);
        assert_eq!(l.growth_gap(), 2 * PAGE_SIZE..MIB - PAGE_SIZE);
        assert_eq!(l.region_at(3 * PAGE_SIZE), None);
        assert_eq!(l.range(Region::Tls), MIB - PAGE_SIZE..MIB - PAGE_SIZE);
        let a = Area::new(0x4000_0000, MIB).unwrap();
        assert_eq!(
            l.region_in(&a, Region::Stack),
            Ok(0x4000_0000 + MIB - PAGE_SIZE..0x4000_0000 + MIB)
        );
        let b = Area::new(0x4000_0000, 2 * MIB).unwrap();
        assert_eq!(l.region_in(&b, Region::Stack), Err(AreaError::SizeMismatch));
    }

    #[test]
    fn layout_errors() {
        let b = AreaLayout::builder().code(2 * PAGE_SIZE);
        assert_eq!(b.area_size(PAGE_SIZE).build(), Err(AreaError::TooSmall));
        assert_eq!(
            b.area_size(3 * PAGE_SIZE).build(),
            Err(AreaError::NotPowerOfTwo)
        );
        assert_eq!(b.area_size(1024).build(), Err(AreaError::BelowPage));
        assert_eq!(
            AreaLayout::builder().heap(u64::MAX).build(),
            Err(AreaError::Overflow)
        );
        assert_eq!(
            AreaLayout::builder().heap(1 << 63).stack(1 << 63).build(),
            Err(AreaError::Overflow)
        );
        assert_eq!(
            AreaLayout::builder().heap((1 << 63) + 1).build(),
            Err(AreaError::Overflow)
        );
        let empty = AreaLayout::builder().build().unwrap();
        assert_eq!(empty.size(), PAGE_SIZE);
        assert_eq!(empty.growth_gap(), 0..PAGE_SIZE);
    }

    mod props {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn translate_round_trips(shift in 12u32..40, pi in 0u64..64, ci in 0u64..64,
                                     off in any::<u64>()) {
                let size = 1u64 << shift;
                let p = Area::new(pi * size, size).unwrap();
                let c = Area::new(ci * size, size).unwrap();
                let addr = p.base() + off % size;
                let t = p.translate_to(&c, addr).unwrap();
                prop_assert!(c.contains(t));
                prop_assert_eq!(t, addr.wrapping_add(p.delta_to(&c)));
                prop_assert_eq!(c.translate_to(&p, t), Some(addr));
            }

            #[test]
            fn layout_regions_are_disjoint_and_inside(lens in proptest::array::uniform7(0u64..1 << 24)) {
                let mut b = AreaLayout::builder();
                for (r, len) in Region::ALL.into_iter().zip(lens) {
                    b = b.region(r, len);
                }
                let l = b.build().unwrap();
                prop_assert!(l.size().is_power_of_two());
                let mut prev_end = 0;
                for r in Region::ALL {
                    let range = l.range(r);
                    prop_assert_eq!(range.start % PAGE_SIZE, 0);
                    prop_assert!(range.end - range.start >= lens[r.index()]);
                    prop_assert!(range.end <= l.size());
                    prop_assert!(range.start >= prev_end);
                    prev_end = range.end;
                }
                prop_assert_eq!(l.range(Region::Stack).end, l.size());
            }
        }
    }
}
