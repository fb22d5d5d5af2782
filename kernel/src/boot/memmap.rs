//! The boot memory map, normalised into page-aligned usable regions.

use crate::layout::{PAGE_SIZE, align_down, align_up};

/// A physical address range `[start, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Region {
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
}

impl Region {
    /// Size in bytes.
    pub fn len(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }

    /// True when the region holds no byte.
    pub fn is_empty(&self) -> bool {
        self.end <= self.start
    }
}

/// Memory types of the PVH/E820 memory map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryKind {
    /// Usable RAM (type 1).
    Ram,
    /// Reserved (type 2) or any unknown type.
    Reserved,
    /// ACPI tables, reclaimable after parsing (type 3).
    AcpiReclaimable,
    /// ACPI non-volatile storage (type 4).
    AcpiNvs,
    /// Defective RAM (type 5).
    Unusable,
}

impl MemoryKind {
    /// Decodes an E820 type number.
    pub fn from_e820(t: u32) -> MemoryKind {
        match t {
            1 => MemoryKind::Ram,
            3 => MemoryKind::AcpiReclaimable,
            4 => MemoryKind::AcpiNvs,
            5 => MemoryKind::Unusable,
            _ => MemoryKind::Reserved,
        }
    }
}

/// Maximum number of usable regions kept.
pub const MAX_REGIONS: usize = 64;

/// A small fixed-capacity set of disjoint, sorted, page-aligned usable regions.
#[derive(Clone, Debug)]
pub struct UsableMemory {
    regions: [Region; MAX_REGIONS],
    count: usize,
}

impl Default for UsableMemory {
    fn default() -> Self {
        UsableMemory {
            regions: [Region::default(); MAX_REGIONS],
            count: 0,
        }
    }
}

impl UsableMemory {
    /// Adds a RAM range; it is shrunk inward to page boundaries and merged with neighbours.
    /// Returns false when the set is full (the range is then dropped).
    pub fn add(&mut self, start: u64, len: u64) -> bool {
        let r = Region {
            start: align_up(start, PAGE_SIZE),
            end: align_down(start.saturating_add(len), PAGE_SIZE),
        };
        if r.is_empty() {
            return true;
        }
        if self.count == MAX_REGIONS {
            return false;
        }
        self.regions[self.count] = r;
        self.count += 1;
        self.normalise();
        true
    }

    /// Removes `[start, start+len)` (rounded outward to pages) from the usable set.
    pub fn reserve(&mut self, start: u64, len: u64) {
        let cut = Region {
            start: align_down(start, PAGE_SIZE),
            end: align_up(start.saturating_add(len), PAGE_SIZE),
        };
        let mut out = [Region::default(); MAX_REGIONS];
        let mut n = 0;
        for r in self.regions() {
            let left = Region {
                start: r.start,
                end: r.end.min(cut.start),
            };
            let right = Region {
                start: r.start.max(cut.end),
                end: r.end,
            };
            for piece in [left, right] {
                if !piece.is_empty() && n < MAX_REGIONS {
                    out[n] = piece;
                    n += 1;
                }
            }
        }
        self.regions = out;
        self.count = n;
        self.normalise();
    }

    /// The regions, sorted by address.
    pub fn regions(&self) -> &[Region] {
        &self.regions[..self.count]
    }

    /// Total usable bytes.
    pub fn total(&self) -> u64 {
        self.regions().iter().map(Region::len).sum()
    }

    /// One past the highest usable byte (0 when empty).
    pub fn end(&self) -> u64 {
        self.regions().last().map_or(0, |r| r.end)
    }

    fn normalise(&mut self) {
        let rs = &mut self.regions[..self.count];
        rs.sort_unstable_by_key(|r| r.start);
        let mut w = 0;
        for i in 0..self.count {
            let r = self.regions[i];
            if w > 0 && r.start <= self.regions[w - 1].end {
                self.regions[w - 1].end = self.regions[w - 1].end.max(r.end);
            } else {
                self.regions[w] = r;
                w += 1;
            }
        }
        self.count = w;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_aligns_and_merges() {
        let mut m = UsableMemory::default();
        m.add(0x1000, 0x3000);
        m.add(0x4000, 0x1000);
        m.add(0x10_0100, 0x2000);
        assert_eq!(
            m.regions(),
            &[
                Region {
                    start: 0x1000,
                    end: 0x5000
                },
                Region {
                    start: 0x10_1000,
                    end: 0x10_2000
                }
            ]
        );
        assert_eq!(m.total(), 0x5000);
    }

    #[test]
    fn reserve_splits_regions() {
        let mut m = UsableMemory::default();
        m.add(0, 0x10_0000);
        m.reserve(0x2800, 0x1000);
        assert_eq!(
            m.regions(),
            &[
                Region {
                    start: 0,
                    end: 0x2000
                },
                Region {
                    start: 0x4000,
                    end: 0x10_0000
                }
            ]
        );
        m.reserve(0, 0x10_0000);
        assert!(m.regions().is_empty());
    }

    #[test]
    fn e820_types() {
        assert_eq!(MemoryKind::from_e820(1), MemoryKind::Ram);
        assert_eq!(MemoryKind::from_e820(77), MemoryKind::Reserved);
    }
}
