//! x86_64 four-level page tables over an abstract physical memory.
//!
//! [`PageTables`] edits one tree of tables rooted at a physical address. The tables are reached
//! through a [`PhysMemory`] (the kernel's direct map, or a `Vec` in host tests) and new tables come
//! from a [`TableAllocator`]. This is the API protection domains use to build one root table per
//! domain: map, unmap, change permissions, translate, and read-and-clear accessed/dirty bits.
//!
//! Intermediate entries are created present and writable, and user-accessible only for user-half
//! addresses; the leaf entry alone decides the effective permissions.

use crate::layout::{KERNEL_HALF_FIRST_SLOT, LARGE_PAGE_SIZE, PAGE_SIZE, USER_END};
use core::fmt;

/// Page-table entry flags.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct Flags(pub u64);

impl Flags {
    /// Present.
    pub const PRESENT: Flags = Flags(1);
    /// Writable.
    pub const WRITABLE: Flags = Flags(1 << 1);
    /// Accessible from ring 3.
    pub const USER: Flags = Flags(1 << 2);
    /// Write-through caching.
    pub const WRITE_THROUGH: Flags = Flags(1 << 3);
    /// Caching disabled.
    pub const NO_CACHE: Flags = Flags(1 << 4);
    /// Set by the CPU on access.
    pub const ACCESSED: Flags = Flags(1 << 5);
    /// Set by the CPU on write.
    pub const DIRTY: Flags = Flags(1 << 6);
    /// Large page (in a level-2 or level-3 entry).
    pub const HUGE: Flags = Flags(1 << 7);
    /// Not flushed on CR3 switches.
    pub const GLOBAL: Flags = Flags(1 << 8);
    /// Not executable.
    pub const NO_EXECUTE: Flags = Flags(1 << 63);
    /// No flag.
    pub const EMPTY: Flags = Flags(0);

    /// Kernel read-only data.
    pub const KERNEL_RO: Flags = Flags(Self::PRESENT.0 | Self::NO_EXECUTE.0);
    /// Kernel read-write data.
    pub const KERNEL_RW: Flags = Flags(Self::PRESENT.0 | Self::WRITABLE.0 | Self::NO_EXECUTE.0);
    /// Kernel code.
    pub const KERNEL_RX: Flags = Self::PRESENT;
    /// Uncached device memory.
    pub const MMIO: Flags = Flags(Self::KERNEL_RW.0 | Self::NO_CACHE.0 | Self::WRITE_THROUGH.0);

    /// True when every bit of `other` is set in `self`.
    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }

    /// The union of both flag sets.
    pub const fn union(self, other: Flags) -> Flags {
        Flags(self.0 | other.0)
    }

    /// `self` without the bits of `other`.
    pub const fn without(self, other: Flags) -> Flags {
        Flags(self.0 & !other.0)
    }
}

impl core::ops::BitOr for Flags {
    type Output = Flags;
    fn bitor(self, rhs: Flags) -> Flags {
        self.union(rhs)
    }
}

impl fmt::Debug for Flags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (Self::PRESENT, "P"),
            (Self::WRITABLE, "W"),
            (Self::USER, "U"),
            (Self::ACCESSED, "A"),
            (Self::DIRTY, "D"),
            (Self::HUGE, "PS"),
            (Self::GLOBAL, "G"),
            (Self::NO_EXECUTE, "NX"),
            (Self::NO_CACHE, "PCD"),
        ];
        let mut first = true;
        for (flag, name) in names {
            if self.contains(flag) {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        if first {
            f.write_str("-")?;
        }
        Ok(())
    }
}

/// Mask of the physical-address bits of an entry.
const ADDR_MASK: u64 = 0x000f_ffff_ffff_f000;
/// Mask of the flag bits of an entry.
const FLAG_MASK: u64 = !ADDR_MASK;

/// Word access to physical memory holding page tables.
pub trait PhysMemory {
    /// Reads entry `index` of the table at physical address `table`.
    fn read_entry(&self, table: u64, index: usize) -> u64;
    /// Writes entry `index` of the table at physical address `table`.
    fn write_entry(&self, table: u64, index: usize, value: u64);
}

/// A source of zeroed frames for new tables.
pub trait TableAllocator {
    /// Returns the physical address of a zeroed 4 KiB frame, or `None` when memory is exhausted.
    fn alloc_table(&mut self) -> Option<u64>;
    /// Returns a table frame that is no longer referenced.
    fn free_table(&mut self, table: u64);
}

/// Why a page-table operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PagingError {
    /// The virtual or physical address is not aligned to the page size used.
    Misaligned,
    /// The virtual address is not canonical.
    NonCanonical,
    /// A mapping already exists at the address.
    AlreadyMapped,
    /// Nothing is mapped at the address.
    NotMapped,
    /// A large page covers the address where a 4 KiB page was expected, or vice versa.
    SizeConflict,
    /// No frame was available for a new table.
    OutOfMemory,
}

/// The size of a mapped page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageSize {
    /// 4 KiB.
    Small,
    /// 2 MiB.
    Large,
}

impl PageSize {
    /// Size in bytes.
    pub const fn bytes(self) -> u64 {
        match self {
            PageSize::Small => PAGE_SIZE,
            PageSize::Large => LARGE_PAGE_SIZE,
        }
    }
}

/// What a dirty-bit scan ([`PageTables::take_dirty`]) does with the ACCESSED bits of the
/// level-2 entries it reads below, which tell it which level-1 tables to skip next time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level2Accessed {
    /// Clears them: the scanned ranges are the only ones read through those entries (a table
    /// whose user half one address space alone uses).
    Take,
    /// Leaves them set: other ranges under the same entries are scanned apart (one table
    /// shared by several address spaces), and clearing a bit would hide their writes from
    /// their own scans.
    Keep,
}

/// Where a virtual address is mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Translation {
    /// The physical address the virtual address maps to.
    pub phys: u64,
    /// The leaf entry's flags.
    pub flags: Flags,
    /// The size of the page containing the address.
    pub size: PageSize,
}

/// True when `va` is a canonical 48-bit address.
pub const fn is_canonical(va: u64) -> bool {
    let top = va >> 47;
    top == 0 || top == 0x1_ffff
}

/// The argument checks of a mapping: `va` canonical, `va` and `pa` aligned to `size`, `pa`
/// within the physical address bits.
fn check_map_args(va: u64, pa: u64, size: PageSize) -> Result<(), PagingError> {
    if !is_canonical(va) {
        return Err(PagingError::NonCanonical);
    }
    if !va.is_multiple_of(size.bytes()) || !pa.is_multiple_of(size.bytes()) || pa & !ADDR_MASK != 0
    {
        return Err(PagingError::Misaligned);
    }
    Ok(())
}

fn index(va: u64, level: u32) -> usize {
    ((va >> (12 + 9 * (level - 1))) & 511) as usize
}

/// Where a walk that creates nothing stopped (see `PageTables::short_walk`).
enum ShortWalk {
    /// Every table down to level 1 is present; this is the level-1 table.
    Table(u64),
    /// A table on the way is absent: nothing is mapped there.
    Absent,
    /// A large page, or a table entry without the user bit a user walk needs.
    Other,
}

/// One tree of page tables rooted at a physical address.
pub struct PageTables<'m, M: PhysMemory> {
    root: u64,
    mem: &'m M,
}

impl<'m, M: PhysMemory> PageTables<'m, M> {
    /// Wraps an existing root table.
    pub fn new(root: u64, mem: &'m M) -> Self {
        PageTables { root, mem }
    }

    /// Allocates an empty root table.
    pub fn create(mem: &'m M, alloc: &mut impl TableAllocator) -> Result<Self, PagingError> {
        let root = alloc.alloc_table().ok_or(PagingError::OutOfMemory)?;
        Ok(PageTables { root, mem })
    }

    /// Allocates a root that shares `kernel_root`'s kernel entries: PML4 slot 0 (the kernel
    /// image) and the whole kernel half. Changes below those entries are seen by both roots.
    pub fn create_sharing_kernel(
        mem: &'m M,
        alloc: &mut impl TableAllocator,
        kernel_root: u64,
    ) -> Result<Self, PagingError> {
        let pt = Self::create(mem, alloc)?;
        mem.write_entry(pt.root, 0, mem.read_entry(kernel_root, 0));
        for slot in KERNEL_HALF_FIRST_SLOT..512 {
            mem.write_entry(pt.root, slot, mem.read_entry(kernel_root, slot));
        }
        Ok(pt)
    }

    /// Physical address of the root table (the CR3 value).
    pub fn root(&self) -> u64 {
        self.root
    }

    /// Maps the 4 KiB page at `va` to `pa` with `flags` (PRESENT is added).
    pub fn map(
        &mut self,
        va: u64,
        pa: u64,
        flags: Flags,
        alloc: &mut impl TableAllocator,
    ) -> Result<(), PagingError> {
        self.map_sized(va, pa, flags, PageSize::Small, alloc)
    }

    /// Maps a page of `size` at `va` to `pa` with `flags` (PRESENT is added).
    pub fn map_sized(
        &mut self,
        va: u64,
        pa: u64,
        flags: Flags,
        size: PageSize,
        alloc: &mut impl TableAllocator,
    ) -> Result<(), PagingError> {
        check_map_args(va, pa, size)?;
        let leaf_level = if size == PageSize::Small { 1 } else { 2 };
        let (table, i) = self.walk_creating(va, leaf_level, flags, alloc)?;
        if self.mem.read_entry(table, i) & Flags::PRESENT.0 != 0 {
            return Err(PagingError::AlreadyMapped);
        }
        let mut f = flags | Flags::PRESENT;
        if size == PageSize::Large {
            f = f | Flags::HUGE;
        }
        self.mem.write_entry(table, i, pa | f.0);
        Ok(())
    }

    /// Maps the 4 KiB page at `va` to `pa` with `flags` (PRESENT is added), replacing the leaf
    /// that is there, if any, in one walk: a fill that may find a stale or narrower leaf. The
    /// caller flushes `va` from the TLB.
    pub fn install(
        &mut self,
        va: u64,
        pa: u64,
        flags: Flags,
        alloc: &mut impl TableAllocator,
    ) -> Result<(), PagingError> {
        check_map_args(va, pa, PageSize::Small)?;
        let table = self.leaf_table_creating(va, flags, alloc)?;
        self.install_in_table(table, va, pa, flags);
        Ok(())
    }

    /// The level-1 table that holds the 4 KiB leaf of `va` (a user address when `flags` makes
    /// a user leaf), creating missing tables as [`Self::map`] does. A table stays where it is
    /// until the whole tree is freed ([`Self::free_user_tables`]), so callers may keep the
    /// address for later leaf edits in the same 2 MiB region ([`Self::map_in_table`],
    /// [`Self::unmap_in_table`]).
    pub fn leaf_table_creating(
        &mut self,
        va: u64,
        flags: Flags,
        alloc: &mut impl TableAllocator,
    ) -> Result<u64, PagingError> {
        check_map_args(va, 0, PageSize::Small)?;
        self.walk_creating(va, 1, flags, alloc).map(|(t, _)| t)
    }

    /// Maps the 4 KiB page at `va` to `pa` with `flags` (PRESENT is added) in `table`, the
    /// level-1 table of `va` found by [`Self::leaf_table_creating`], unless a leaf is already
    /// there. Returns whether it mapped the page.
    pub fn map_in_table(&self, table: u64, va: u64, pa: u64, flags: Flags) -> bool {
        let i = index(va, 1);
        if self.mem.read_entry(table, i) & Flags::PRESENT.0 != 0 {
            return false;
        }
        self.mem
            .write_entry(table, i, (pa & ADDR_MASK) | (flags | Flags::PRESENT).0);
        true
    }

    /// Whether `table`, the level-1 table of `va`, holds a leaf for it.
    pub fn is_mapped_in_table(&self, table: u64, va: u64) -> bool {
        self.mem.read_entry(table, index(va, 1)) & Flags::PRESENT.0 != 0
    }

    /// [`Self::map_in_table`] that replaces the leaf that is there, if any (a fill that may
    /// find a stale or narrower leaf, as [`Self::install`]).
    pub fn install_in_table(&self, table: u64, va: u64, pa: u64, flags: Flags) {
        self.mem.write_entry(
            table,
            index(va, 1),
            (pa & ADDR_MASK) | (flags | Flags::PRESENT).0,
        );
    }

    /// Removes the leaf of `va` from `table`, the level-1 table of `va` found by
    /// [`Self::leaf_table_creating`]. Returns whether a leaf was there.
    pub fn unmap_in_table(&self, table: u64, va: u64) -> bool {
        let i = index(va, 1);
        if self.mem.read_entry(table, i) & Flags::PRESENT.0 == 0 {
            return false;
        }
        self.mem.write_entry(table, i, 0);
        true
    }

    /// Walks from the root down to the table holding `va`'s entry at `leaf_level`, creating
    /// missing tables (user-accessible when `flags` makes a user leaf below `USER_END`).
    /// Returns that table and the entry's index. `va` must be canonical.
    fn walk_creating(
        &mut self,
        va: u64,
        leaf_level: u32,
        flags: Flags,
        alloc: &mut impl TableAllocator,
    ) -> Result<(u64, usize), PagingError> {
        let user = va < USER_END && flags.contains(Flags::USER);
        if leaf_level == 1
            && let ShortWalk::Table(table) = self.short_walk(va, user)
        {
            return Ok((table, index(va, 1)));
        }
        let mut table = self.root;
        for level in (leaf_level + 1..=4).rev() {
            let i = index(va, level);
            let e = self.mem.read_entry(table, i);
            if e & Flags::PRESENT.0 == 0 {
                let t = alloc.alloc_table().ok_or(PagingError::OutOfMemory)?;
                let mut f = Flags::PRESENT | Flags::WRITABLE;
                if user {
                    f = f | Flags::USER;
                }
                self.mem.write_entry(table, i, t | f.0);
                table = t;
            } else if e & Flags::HUGE.0 != 0 {
                return Err(PagingError::SizeConflict);
            } else {
                if user && e & Flags::USER.0 == 0 {
                    self.mem.write_entry(table, i, e | Flags::USER.0);
                }
                table = e & ADDR_MASK;
            }
        }
        Ok((table, index(va, leaf_level)))
    }

    /// Walks down to `va`'s level-1 table without creating any, stopping at the first entry
    /// that is not a present (and, if `user`, user-accessible) table entry: the common walk of
    /// a one-page install or unmap.
    #[inline(always)]
    fn short_walk(&self, va: u64, user: bool) -> ShortWalk {
        let need = if user {
            Flags::PRESENT.0 | Flags::USER.0
        } else {
            Flags::PRESENT.0
        };
        let mut table = self.root;
        for level in [4, 3, 2] {
            let e = self.mem.read_entry(table, index(va, level));
            if e & Flags::PRESENT.0 == 0 {
                return ShortWalk::Absent;
            }
            if e & (need | Flags::HUGE.0) != need {
                return ShortWalk::Other;
            }
            table = e & ADDR_MASK;
        }
        ShortWalk::Table(table)
    }

    /// Finds the leaf entry for `va`: (table, index, entry, size).
    fn leaf(&self, va: u64) -> Result<(u64, usize, u64, PageSize), PagingError> {
        if !is_canonical(va) {
            return Err(PagingError::NonCanonical);
        }
        let mut table = self.root;
        for level in (1..=4).rev() {
            let i = index(va, level);
            let e = self.mem.read_entry(table, i);
            if e & Flags::PRESENT.0 == 0 {
                return Err(PagingError::NotMapped);
            }
            if level == 1 {
                return Ok((table, i, e, PageSize::Small));
            }
            if e & Flags::HUGE.0 != 0 {
                if level == 2 {
                    return Ok((table, i, e, PageSize::Large));
                }
                return Err(PagingError::SizeConflict);
            }
            table = e & ADDR_MASK;
        }
        unreachable!("the loop returns at level 1")
    }

    /// Where `va` is mapped, if anywhere.
    pub fn translate(&self, va: u64) -> Option<Translation> {
        let (_, _, e, size) = self.leaf(va).ok()?;
        let base = e & ADDR_MASK & !(size.bytes() - 1);
        Some(Translation {
            phys: base + (va & (size.bytes() - 1)),
            flags: Flags(e & FLAG_MASK),
            size,
        })
    }

    /// Removes the mapping of the page containing `va` and returns its physical address. Tables
    /// left empty are kept (they are freed with the root by [`Self::free_user_tables`]).
    pub fn unmap(&mut self, va: u64) -> Result<u64, PagingError> {
        let (table, i, e, _) = self.leaf(va)?;
        self.mem.write_entry(table, i, 0);
        Ok(e & ADDR_MASK)
    }

    /// Removes every leaf in `[base, base + len)`, skipping absent tables, and returns how many
    /// leaves were removed. A large page is removed whole if any part of it is in the range.
    pub fn unmap_range(&mut self, base: u64, len: u64) -> usize {
        // One small page (an ArgBuf's revocation): one walk down, no range arithmetic.
        if len == PAGE_SIZE && base.is_multiple_of(PAGE_SIZE) && is_canonical(base) {
            match self.short_walk(base, false) {
                ShortWalk::Absent => return 0,
                ShortWalk::Table(table) => return usize::from(self.unmap_in_table(table, base)),
                ShortWalk::Other => {}
            }
        }
        let end = base.saturating_add(len);
        let mut va = base;
        let mut removed = 0;
        while va < end && is_canonical(va) {
            let mut table = self.root;
            let mut level = 4;
            let next = loop {
                let i = index(va, level);
                let e = self.mem.read_entry(table, i);
                let span = 1u64 << (12 + 9 * (level - 1));
                let next = (va & !(span - 1)).checked_add(span);
                if e & Flags::PRESENT.0 == 0 {
                    break next;
                }
                if e & Flags::HUGE.0 != 0 {
                    self.mem.write_entry(table, i, 0);
                    removed += 1;
                    break next;
                }
                if level == 2 {
                    // One level-1 table: clear its entries for the pages of the range in it
                    // without walking down again for each.
                    let leaves = e & ADDR_MASK;
                    let stop = next.map_or(end, |n| n.min(end));
                    for j in index(va, 1)..=index(stop - 1, 1) {
                        if self.mem.read_entry(leaves, j) & Flags::PRESENT.0 != 0 {
                            self.mem.write_entry(leaves, j, 0);
                            removed += 1;
                        }
                    }
                    break next;
                }
                table = e & ADDR_MASK;
                level -= 1;
            };
            match next {
                Some(n) => va = n,
                None => break,
            }
        }
        removed
    }

    /// [`PageTables::unmap_range`], and also frees every level-1 table whose whole 2 MiB the
    /// range covers (its level-2 entry cleared): for a page table kept for reuse after a large
    /// VMA left it, whose empty tables would otherwise be walked again by every later unmap of
    /// that range. The caller guarantees that no CPU has this table loaded. Returns the leaves
    /// removed.
    pub fn unmap_range_freeing(
        &mut self,
        base: u64,
        len: u64,
        alloc: &mut impl TableAllocator,
    ) -> usize {
        const SPAN: u64 = 1 << 21;
        let end = base.saturating_add(len);
        let first = base.next_multiple_of(SPAN);
        let last = end & !(SPAN - 1);
        if first >= last {
            return self.unmap_range(base, len);
        }
        let mut removed = self.unmap_range(base, first - base);
        removed += self.unmap_range(last, end - last);
        let mut va = first;
        while va < last && is_canonical(va) {
            match self.level2_table(va) {
                Some(t2) => {
                    let i = index(va, 2);
                    let e = self.mem.read_entry(t2, i);
                    if e & Flags::PRESENT.0 != 0 && e & Flags::HUGE.0 == 0 {
                        let leaves = e & ADDR_MASK;
                        removed += (0..512)
                            .filter(|&j| self.mem.read_entry(leaves, j) & Flags::PRESENT.0 != 0)
                            .count();
                        self.mem.write_entry(t2, i, 0);
                        alloc.free_table(leaves);
                    } else if e & Flags::HUGE.0 != 0 {
                        self.mem.write_entry(t2, i, 0);
                        removed += 1;
                    }
                    va += SPAN;
                }
                // No level-2 table: the whole 1 GiB it would cover is empty.
                None => va = (va | ((1 << 30) - 1)) + 1,
            }
        }
        removed
    }

    /// Replaces the flags of the page containing `va` (PRESENT is kept; HUGE follows the page).
    pub fn protect(&mut self, va: u64, flags: Flags) -> Result<(), PagingError> {
        let (table, i, e, size) = self.leaf(va)?;
        let mut f = flags | Flags::PRESENT;
        if size == PageSize::Large {
            f = f | Flags::HUGE;
        }
        self.mem.write_entry(table, i, (e & ADDR_MASK) | f.0);
        Ok(())
    }

    /// Returns which of `bits` (ACCESSED and/or DIRTY) were set on the page containing `va`,
    /// and clears them.
    pub fn take_bits(&mut self, va: u64, bits: Flags) -> Result<Flags, PagingError> {
        let (table, i, e, _) = self.leaf(va)?;
        let was = Flags(e & bits.0);
        if was.0 != 0 {
            self.mem.write_entry(table, i, e & !bits.0);
        }
        Ok(was)
    }

    /// Calls `dirty(i, va)` for every 4 KiB leaf `va` in range `i` of `ranges` (base, length)
    /// whose DIRTY bit is set, and clears that bit. A level-1 table whose level-2 entry is not
    /// ACCESSED is skipped unread: the CPU sets that bit on each walk through the entry, so no
    /// leaf below it can have been written since the bit was cleared, provided the TLB (and
    /// paging-structure caches) were flushed after. With [`Level2Accessed::Take`] the scan
    /// clears the ACCESSED bit of every level-2 entry it reads below. Each level-2 entry is
    /// looked at once, however many ranges share it; pages come in address order within each
    /// level-2 entry, not across ranges. Returns how many level-1 tables were read. Large
    /// pages are left alone.
    pub fn take_dirty(
        &mut self,
        ranges: &[(u64, u64)],
        accessed: Level2Accessed,
        mut dirty: impl FnMut(usize, u64),
    ) -> usize {
        const SPAN: u64 = 512 * PAGE_SIZE;
        let end_of = |&(base, len): &(u64, u64)| base.saturating_add(len);
        let mut read = 0;
        for (i, r) in ranges.iter().enumerate() {
            let mut chunk = r.0 & !(SPAN - 1);
            while chunk < end_of(r) {
                let next = chunk.saturating_add(SPAN);
                let overlaps = |q: &(u64, u64)| q.0 < next && chunk < end_of(q);
                // A chunk an earlier range reaches was done with that range.
                let done = ranges[..i].iter().any(overlaps);
                if !done && let Some(table) = self.accessed_table(chunk, accessed) {
                    read += 1;
                    for (j, q) in ranges.iter().enumerate().skip(i) {
                        if !overlaps(q) {
                            continue;
                        }
                        let (lo, hi) = (chunk.max(q.0), next.min(end_of(q)));
                        let mut va = lo & !(PAGE_SIZE - 1);
                        while va < hi {
                            if self.take_dirty_in_table(table, va) {
                                dirty(j, va);
                            }
                            va += PAGE_SIZE;
                        }
                    }
                }
                if next == u64::MAX {
                    break;
                }
                chunk = next;
            }
        }
        read
    }

    /// The level-1 table under the level-2 entry above `va`, when that entry is present, not
    /// a large page, and ACCESSED (see [`Self::take_dirty`]); with [`Level2Accessed::Take`],
    /// its ACCESSED bit is cleared.
    pub fn accessed_table(&mut self, va: u64, accessed: Level2Accessed) -> Option<u64> {
        let t2 = self.level2_table(va)?;
        self.accessed_table_in(t2, va, accessed)
    }

    /// The level-2 table covering `va` (canonical), whose entries map the 1 GiB around it:
    /// for [`Self::accessed_table_in`], which then reads one entry per 2 MiB instead of
    /// walking from the root.
    pub fn level2_table(&self, va: u64) -> Option<u64> {
        if !is_canonical(va) {
            return None;
        }
        let mut table = self.root;
        for level in [4, 3] {
            let e = self.mem.read_entry(table, index(va, level));
            if e & Flags::PRESENT.0 == 0 || e & Flags::HUGE.0 != 0 {
                return None;
            }
            table = e & ADDR_MASK;
        }
        Some(table)
    }

    /// The level-1 table mapping `va` (canonical), if its level-2 entry is present and not a
    /// large page; the entry's ACCESSED bit is neither read nor changed.
    pub fn level1_table(&self, va: u64) -> Option<u64> {
        let t2 = self.level2_table(va)?;
        let e2 = self.mem.read_entry(t2, index(va, 2));
        (e2 & (Flags::PRESENT.0 | Flags::HUGE.0) == Flags::PRESENT.0).then_some(e2 & ADDR_MASK)
    }

    /// [`Self::accessed_table`] for `va` in the 1 GiB that `t2` covers ([`Self::level2_table`]).
    pub fn accessed_table_in(&mut self, t2: u64, va: u64, accessed: Level2Accessed) -> Option<u64> {
        let i2 = index(va, 2);
        let e2 = self.mem.read_entry(t2, i2);
        let wanted = Flags::PRESENT.0 | Flags::ACCESSED.0;
        if e2 & (wanted | Flags::HUGE.0) != wanted {
            return None;
        }
        if accessed == Level2Accessed::Take {
            self.mem.write_entry(t2, i2, e2 & !Flags::ACCESSED.0);
        }
        Some(e2 & ADDR_MASK)
    }

    /// Clears the DIRTY bit of `va`'s leaf in `table`, its level-1 table (from
    /// [`Self::accessed_table`]); returns whether a present leaf had it.
    pub fn take_dirty_in_table(&mut self, table: u64, va: u64) -> bool {
        let k = index(va, 1);
        let e = self.mem.read_entry(table, k);
        let both = Flags::PRESENT.0 | Flags::DIRTY.0;
        if e & both != both {
            return false;
        }
        self.mem.write_entry(table, k, e & !Flags::DIRTY.0);
        true
    }

    /// The present level-2 entry above `va` (canonical): (table, index, entry).
    #[cfg(test)]
    fn level2_entry(&self, va: u64) -> Option<(u64, usize, u64)> {
        let table = self.level2_table(va)?;
        let i = index(va, 2);
        let e = self.mem.read_entry(table, i);
        (e & Flags::PRESENT.0 != 0).then_some((table, i, e))
    }

    /// Frees every table below the user-half slots (1..256) of the root, and the root itself.
    /// Leaf frames are not freed: they belong to whoever mapped them.
    pub fn free_user_tables(self, alloc: &mut impl TableAllocator) {
        for slot in 1..KERNEL_HALF_FIRST_SLOT {
            let e = self.mem.read_entry(self.root, slot);
            if e & Flags::PRESENT.0 != 0 {
                self.free_subtree(e & ADDR_MASK, 3, alloc);
            }
        }
        alloc.free_table(self.root);
    }

    fn free_subtree(&self, table: u64, level: u32, alloc: &mut impl TableAllocator) {
        if level > 1 {
            for i in 0..512 {
                let e = self.mem.read_entry(table, i);
                if e & Flags::PRESENT.0 != 0 && e & Flags::HUGE.0 == 0 {
                    self.free_subtree(e & ADDR_MASK, level - 1, alloc);
                }
            }
        }
        alloc.free_table(table);
    }
}

/// Simulated physical memory and frames for host tests of page-table code.
#[cfg(test)]
pub(crate) mod sim {
    use super::*;
    use alloc::collections::BTreeMap;
    use alloc::vec::Vec;
    use core::cell::RefCell;

    /// Sparse simulated physical memory: tables appear on first touch.
    #[derive(Default)]
    pub(crate) struct SimMem(RefCell<BTreeMap<u64, [u64; 512]>>);

    impl PhysMemory for SimMem {
        fn read_entry(&self, t: u64, i: usize) -> u64 {
            self.0.borrow().get(&t).map_or(0, |tab| tab[i])
        }
        fn write_entry(&self, t: u64, i: usize, v: u64) {
            self.0.borrow_mut().entry(t).or_insert([0; 512])[i] = v;
        }
    }

    /// Table frames handed out upwards from 16 MiB, up to `limit`; freed ones are noted.
    pub(crate) struct Frames {
        pub(crate) next: u64,
        pub(crate) freed: Vec<u64>,
        pub(crate) limit: u64,
    }

    impl TableAllocator for Frames {
        fn alloc_table(&mut self) -> Option<u64> {
            if self.next >= self.limit {
                return None;
            }
            self.next += PAGE_SIZE;
            Some(self.next)
        }
        fn free_table(&mut self, t: u64) {
            self.freed.push(t);
        }
    }

    /// Frames without limit.
    pub(crate) fn frames() -> Frames {
        Frames {
            next: 0x100_0000,
            freed: Vec::new(),
            limit: u64::MAX,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::sim::*;
    use super::*;
    use alloc::vec::Vec;

    const UVA: u64 = 0x0000_1000_0020_3000;

    #[test]
    fn map_translate_unmap() {
        let mem = SimMem::default();
        let mut fa = frames();
        let mut pt = PageTables::create(&mem, &mut fa).unwrap();
        let f = Flags::USER | Flags::WRITABLE | Flags::NO_EXECUTE;
        pt.map(UVA, 0x5000, f, &mut fa).unwrap();
        let t = pt.translate(UVA + 0x123).unwrap();
        assert_eq!(t.phys, 0x5123);
        assert!(t.flags.contains(f | Flags::PRESENT));
        assert_eq!(
            pt.map(UVA, 0x6000, f, &mut fa),
            Err(PagingError::AlreadyMapped)
        );
        assert_eq!(pt.unmap(UVA), Ok(0x5000));
        assert_eq!(pt.translate(UVA), None);
        assert_eq!(pt.unmap(UVA), Err(PagingError::NotMapped));
    }

    #[test]
    fn unmap_range_freeing_drops_the_tables_the_range_covers_whole() {
        let mem = SimMem::default();
        let mut fa = frames();
        let mut pt = PageTables::create(&mem, &mut fa).unwrap();
        let f = Flags::USER | Flags::WRITABLE;
        let base = 0x0000_1000_0000_0000u64;
        // Leaves in three 2 MiB chunks: the range covers the second whole, the others in part.
        for va in [
            base + 0x1f_f000,
            base + 0x20_0000,
            base + 0x3f_f000,
            base + 0x40_0000,
        ] {
            pt.map(va, 0x5000, f, &mut fa).unwrap();
        }
        let t_second = pt.level1_table(base + 0x20_0000).unwrap();
        let removed = pt.unmap_range_freeing(base + 0x1f_f000, 0x20_2000, &mut fa);
        assert_eq!(removed, 4);
        for va in [
            base + 0x1f_f000,
            base + 0x20_0000,
            base + 0x3f_f000,
            base + 0x40_0000,
        ] {
            assert_eq!(pt.translate(va), None);
        }
        // The covered chunk's table is gone and freed; the partly covered ones stay.
        assert_eq!(pt.level1_table(base + 0x20_0000), None);
        assert_eq!(fa.freed, [t_second]);
        assert!(pt.level1_table(base).is_some() && pt.level1_table(base + 0x40_0000).is_some());
        // A range under 2 MiB frees nothing.
        pt.map(base + 0x40_1000, 0x5000, f, &mut fa).unwrap();
        assert_eq!(pt.unmap_range_freeing(base + 0x40_1000, 0x1000, &mut fa), 1);
        assert_eq!(fa.freed.len(), 1);
    }

    #[test]
    fn rejects_bad_addresses() {
        let mem = SimMem::default();
        let mut fa = frames();
        let mut pt = PageTables::create(&mem, &mut fa).unwrap();
        assert_eq!(
            pt.map(0x1001, 0, Flags::KERNEL_RW, &mut fa),
            Err(PagingError::Misaligned)
        );
        assert_eq!(
            pt.map(1 << 47, 0, Flags::KERNEL_RW, &mut fa),
            Err(PagingError::NonCanonical)
        );
        assert_eq!(
            pt.map_sized(0x20_1000, 0, Flags::KERNEL_RW, PageSize::Large, &mut fa),
            Err(PagingError::Misaligned)
        );
    }

    #[test]
    fn large_pages_and_conflicts() {
        let mem = SimMem::default();
        let mut fa = frames();
        let mut pt = PageTables::create(&mem, &mut fa).unwrap();
        let va = 0xffff_8000_0020_0000;
        pt.map_sized(va, 0x20_0000, Flags::KERNEL_RW, PageSize::Large, &mut fa)
            .unwrap();
        let t = pt.translate(va + 0x1234).unwrap();
        assert_eq!((t.phys, t.size), (0x20_1234, PageSize::Large));
        assert_eq!(
            pt.map(va + 0x1000, 0, Flags::KERNEL_RW, &mut fa),
            Err(PagingError::SizeConflict)
        );
    }

    #[test]
    fn accessed_table_in_reads_one_level2_entry_of_the_table_covering_va() {
        let mem = SimMem::default();
        let mut fa = frames();
        let mut pt = PageTables::create(&mem, &mut fa).unwrap();
        let f = Flags::USER | Flags::WRITABLE;
        let base = 0x0000_1000_0000_0000u64;
        for (k, va) in [base, base + 0x20_0000].into_iter().enumerate() {
            pt.map(va, 0x10_0000 + k as u64 * 0x1000, f, &mut fa)
                .unwrap();
        }
        assert_eq!(
            pt.level2_table(base + 0x4000_0000),
            None,
            "nothing in the next GiB"
        );
        assert_eq!(pt.level2_table(1 << 47), None, "not canonical");
        let t2 = pt.level2_table(base).unwrap();
        assert_eq!(pt.level2_table(base + 0x20_0000), Some(t2));
        // Not accessed: none; accessed: the same table as from the root, bit taken or kept.
        assert_eq!(pt.accessed_table_in(t2, base, Level2Accessed::Take), None);
        let (t, i, e) = pt.level2_entry(base + 0x20_0000).unwrap();
        mem.write_entry(t, i, e | Flags::ACCESSED.0);
        let table = e & ADDR_MASK;
        let second = base + 0x20_0000;
        assert_eq!(
            pt.accessed_table_in(t2, second, Level2Accessed::Keep),
            Some(table)
        );
        assert_eq!(
            pt.accessed_table_in(t2, second, Level2Accessed::Take),
            Some(table)
        );
        assert_eq!(pt.accessed_table(second, Level2Accessed::Take), None);
        assert_eq!(
            pt.accessed_table_in(t2, base + 0x40_0000, Level2Accessed::Keep),
            None
        );
    }

    #[test]
    fn take_dirty_finds_written_leaves_under_accessed_tables_only() {
        let mem = SimMem::default();
        let mut fa = frames();
        let mut pt = PageTables::create(&mem, &mut fa).unwrap();
        let f = Flags::USER | Flags::WRITABLE;
        // Three pages in one 2 MiB region, one in the next.
        let base = 0x0000_1000_0000_0000u64;
        for (k, va) in [base, base + 0x1000, base + 0x5000, base + 0x20_0000]
            .into_iter()
            .enumerate()
        {
            pt.map(va, 0x10_0000 + k as u64 * 0x1000, f, &mut fa)
                .unwrap();
        }
        // "The CPU" walks to and writes pages 1 and 5 of the first region: A on the level-2
        // entry, D on the leaves.
        let view = PageTables::new(pt.root(), &mem);
        let set = |va: u64, bits: u64| {
            let (t, i, e, _) = view.leaf(va).unwrap();
            mem.write_entry(t, i, e | bits);
        };
        let accessed = |va: u64| {
            let (t, i, e) = view.level2_entry(va).unwrap();
            mem.write_entry(t, i, e | Flags::ACCESSED.0);
        };
        accessed(base);
        set(base + 0x1000, Flags::ACCESSED.0 | Flags::DIRTY.0);
        set(base + 0x5000, Flags::DIRTY.0);
        // A dirty leaf under a level-2 entry nobody walked since the last call is not read.
        set(base + 0x20_0000, Flags::DIRTY.0);
        let mut seen = Vec::new();
        let read = pt.take_dirty(&[(base, 0x40_0000)], Level2Accessed::Take, |_, va| {
            seen.push(va)
        });
        assert_eq!(seen, [base + 0x1000, base + 0x5000]);
        assert_eq!(read, 1);
        // The bits are cleared: nothing until the next walk and write.
        seen.clear();
        assert_eq!(
            pt.take_dirty(&[(base, 0x40_0000)], Level2Accessed::Take, |_, va| seen
                .push(va)),
            0
        );
        assert!(seen.is_empty());
        assert!(
            !pt.translate(base + 0x1000)
                .unwrap()
                .flags
                .contains(Flags::DIRTY)
        );
        assert!(
            pt.translate(base + 0x1000)
                .unwrap()
                .flags
                .contains(Flags::ACCESSED)
        );
        // Only the range is looked at.
        accessed(base);
        set(base, Flags::DIRTY.0);
        set(base + 0x5000, Flags::DIRTY.0);
        seen.clear();
        pt.take_dirty(&[(base + 0x5000, 0x1000)], Level2Accessed::Take, |_, va| {
            seen.push(va)
        });
        assert_eq!(seen, [base + 0x5000]);
        // Two ranges under one level-2 entry: both are read (the entry's ACCESSED bit is
        // looked at once).
        accessed(base);
        set(base, Flags::DIRTY.0);
        set(base + 0x5000, Flags::DIRTY.0);
        let mut both = Vec::new();
        let read = pt.take_dirty(
            &[(base + 0x4000, 0x2000), (base, 0x2000)],
            Level2Accessed::Take,
            |i, va| both.push((i, va)),
        );
        assert_eq!(read, 1);
        assert_eq!(both, [(0, base + 0x5000), (1, base)]);
        // With `Take`, a scan of one range hides a write under the same level-2 entry from
        // the next scan of another range; with `Keep` (a table several address spaces share),
        // the entry stays ACCESSED and each range's scan finds its own writes.
        for (how, found) in [(Level2Accessed::Take, false), (Level2Accessed::Keep, true)] {
            accessed(base);
            set(base, Flags::DIRTY.0);
            set(base + 0x5000, Flags::DIRTY.0);
            seen.clear();
            pt.take_dirty(&[(base + 0x5000, 0x1000)], how, |_, va| seen.push(va));
            assert_eq!(seen, [base + 0x5000]);
            seen.clear();
            pt.take_dirty(&[(base, 0x1000)], how, |_, va| seen.push(va));
            assert_eq!(seen == [base], found, "{how:?}");
            assert_eq!(pt.accessed_table(base, how).is_some(), found, "{how:?}");
            // Whatever the first scan left is taken now.
            accessed(base);
            pt.take_dirty(&[(base, 0x1000)], Level2Accessed::Take, |_, _| {});
        }
        // Unmapped and absurd ranges are harmless.
        assert_eq!(
            pt.take_dirty(
                &[(0x7000_0000_0000, 0x1000)],
                Level2Accessed::Take,
                |_, _| panic!()
            ),
            0
        );
        assert_eq!(
            pt.take_dirty(
                &[(u64::MAX - 0xfff, 0x1000)],
                Level2Accessed::Take,
                |_, _| panic!()
            ),
            0
        );
        assert_eq!(pt.take_dirty(&[], Level2Accessed::Take, |_, _| panic!()), 0);
    }

    #[test]
    fn protect_and_take_bits() {
        let mem = SimMem::default();
        let mut fa = frames();
        let mut pt = PageTables::create(&mem, &mut fa).unwrap();
        pt.map(UVA, 0x7000, Flags::USER | Flags::WRITABLE, &mut fa)
            .unwrap();
        pt.protect(UVA, Flags::USER | Flags::NO_EXECUTE).unwrap();
        let fl = pt.translate(UVA).unwrap().flags;
        assert!(!fl.contains(Flags::WRITABLE) && fl.contains(Flags::NO_EXECUTE));
        // Simulate the CPU setting A and D.
        let (t, i, e, _) = pt.leaf(UVA).unwrap();
        mem.write_entry(t, i, e | Flags::ACCESSED.0 | Flags::DIRTY.0);
        assert_eq!(pt.take_bits(UVA, Flags::DIRTY).unwrap(), Flags::DIRTY);
        assert_eq!(pt.take_bits(UVA, Flags::DIRTY).unwrap(), Flags::EMPTY);
        assert_eq!(pt.take_bits(UVA, Flags::ACCESSED).unwrap(), Flags::ACCESSED);
    }

    #[test]
    fn user_bit_only_on_user_intermediates() {
        let mem = SimMem::default();
        let mut fa = frames();
        let mut pt = PageTables::create(&mem, &mut fa).unwrap();
        pt.map(UVA, 0x7000, Flags::USER, &mut fa).unwrap();
        assert!(mem.read_entry(pt.root(), index(UVA, 4)) & Flags::USER.0 != 0);
        let kva = 0xffff_8000_0000_0000;
        pt.map(kva, 0x8000, Flags::KERNEL_RW, &mut fa).unwrap();
        assert_eq!(mem.read_entry(pt.root(), index(kva, 4)) & Flags::USER.0, 0);
    }

    #[test]
    fn shared_kernel_half_and_private_user_half() {
        let mem = SimMem::default();
        let mut fa = frames();
        let mut kernel = PageTables::create(&mem, &mut fa).unwrap();
        kernel
            .map(0xffff_8000_0000_0000, 0x9000, Flags::KERNEL_RW, &mut fa)
            .unwrap();
        kernel
            .map(0x10_0000, 0x10_0000, Flags::KERNEL_RX, &mut fa)
            .unwrap();
        let mut a = PageTables::create_sharing_kernel(&mem, &mut fa, kernel.root()).unwrap();
        let b = PageTables::create_sharing_kernel(&mem, &mut fa, kernel.root()).unwrap();
        a.map(UVA, 0xa000, Flags::USER, &mut fa).unwrap();
        assert!(b.translate(UVA).is_none());
        for pt in [&a, &b] {
            assert_eq!(pt.translate(0xffff_8000_0000_0000).unwrap().phys, 0x9000);
            assert_eq!(pt.translate(0x10_0000).unwrap().phys, 0x10_0000);
        }
        let before = fa.freed.len();
        let root = a.root();
        a.free_user_tables(&mut fa);
        // root + PDPT + PD + PT of the one user mapping; the kernel's tables are untouched.
        assert_eq!(fa.freed.len() - before, 4);
        assert_eq!(*fa.freed.last().unwrap(), root);
        assert_eq!(
            kernel.translate(0xffff_8000_0000_0000).unwrap().phys,
            0x9000
        );
    }

    #[test]
    fn install_maps_or_replaces_in_one_walk() {
        let mem = SimMem::default();
        let mut fa = frames();
        let mut pt = PageTables::create(&mem, &mut fa).unwrap();
        pt.install(UVA, 0x10_0000, Flags::USER, &mut fa).unwrap();
        let t = pt.translate(UVA).unwrap();
        assert_eq!(t.phys, 0x10_0000);
        assert!(!t.flags.contains(Flags::WRITABLE));
        // Wider rights on the same frame, then another frame: the leaf is replaced.
        pt.install(UVA, 0x10_0000, Flags::USER | Flags::WRITABLE, &mut fa)
            .unwrap();
        assert!(pt.translate(UVA).unwrap().flags.contains(Flags::WRITABLE));
        pt.install(UVA, 0x20_0000, Flags::USER, &mut fa).unwrap();
        assert_eq!(pt.translate(UVA).unwrap().phys, 0x20_0000);
        assert_eq!(
            pt.install(UVA + 8, 0x20_0000, Flags::USER, &mut fa),
            Err(PagingError::Misaligned)
        );
        assert_eq!(
            pt.install(0x0000_8000_0000_0000, 0, Flags::USER, &mut fa),
            Err(PagingError::NonCanonical)
        );
    }

    #[test]
    fn unmap_range_removes_only_what_is_in_range() {
        let mem = SimMem::default();
        let mut fa = frames();
        let mut pt = PageTables::create(&mem, &mut fa).unwrap();
        for i in 0..8u64 {
            pt.map(
                UVA + i * PAGE_SIZE,
                0x10_0000 + i * PAGE_SIZE,
                Flags::USER,
                &mut fa,
            )
            .unwrap();
        }
        let far = UVA + (1 << 30);
        pt.map(far, 0x20_0000, Flags::USER, &mut fa).unwrap();
        // A range spanning a gigabyte of absent tables is walked quickly and removes 3 + 1.
        assert_eq!(
            pt.unmap_range(UVA + 5 * PAGE_SIZE, (1 << 30) - 4 * PAGE_SIZE),
            4
        );
        assert!(pt.translate(UVA + 4 * PAGE_SIZE).is_some());
        assert!(pt.translate(UVA + 5 * PAGE_SIZE).is_none());
        assert!(pt.translate(far).is_none());
        assert_eq!(pt.unmap_range(UVA, 0), 0);
        assert_eq!(pt.unmap_range(UVA, 5 * PAGE_SIZE), 5);
    }

    #[test]
    fn unmap_of_one_page_takes_the_short_walk_or_the_general_one() {
        let mem = SimMem::default();
        let mut fa = frames();
        let mut pt = PageTables::create(&mem, &mut fa).unwrap();
        pt.map(UVA, 0x10_0000, Flags::USER, &mut fa).unwrap();
        pt.map(UVA + PAGE_SIZE, 0x11_0000, Flags::USER, &mut fa)
            .unwrap();
        assert_eq!(pt.unmap_range(UVA, PAGE_SIZE), 1);
        assert_eq!(pt.unmap_range(UVA, PAGE_SIZE), 0);
        assert!(pt.translate(UVA + PAGE_SIZE).is_some());
        // No tables below the root: nothing to remove. A large page: the general walk, which
        // removes it whole.
        assert_eq!(pt.unmap_range(UVA + (1 << 39), PAGE_SIZE), 0);
        let big = 0x4000_0000;
        pt.map_sized(big, 0x20_0000, Flags::KERNEL_RW, PageSize::Large, &mut fa)
            .unwrap();
        assert_eq!(pt.unmap_range(big + 3 * PAGE_SIZE, PAGE_SIZE), 1);
        assert!(pt.translate(big).is_none());
        // After a removal the short walk still installs into the tables that remain.
        pt.install(UVA, 0x12_0000, Flags::USER, &mut fa).unwrap();
        assert_eq!(pt.translate(UVA).unwrap().phys, 0x12_0000);
    }

    #[test]
    fn unmap_range_crosses_table_boundaries() {
        let mem = SimMem::default();
        let mut fa = frames();
        let mut pt = PageTables::create(&mem, &mut fa).unwrap();
        // 8 pages straddling the end of one level-1 table and the start of the next, with a
        // hole, plus one page just past the range.
        let start = 0x0000_1000_0040_0000 - 4 * PAGE_SIZE;
        for i in (0..9u64).filter(|i| *i != 2) {
            pt.map(
                start + i * PAGE_SIZE,
                0x10_0000 + i * PAGE_SIZE,
                Flags::USER,
                &mut fa,
            )
            .unwrap();
        }
        assert_eq!(pt.unmap_range(start + 1, 8 * PAGE_SIZE - 1), 7);
        for i in 0..8u64 {
            assert!(pt.translate(start + i * PAGE_SIZE).is_none());
        }
        assert!(pt.translate(start + 8 * PAGE_SIZE).is_some());
        assert_eq!(pt.unmap_range(u64::MAX - PAGE_SIZE, PAGE_SIZE), 0);
    }

    #[test]
    fn leaf_table_edits_match_map_and_unmap() {
        let mem = SimMem::default();
        let mut fa = frames();
        let mut pt = PageTables::create(&mem, &mut fa).unwrap();
        let va = 0x0000_1000_0040_0000;
        let t = pt.leaf_table_creating(va, Flags::USER, &mut fa).unwrap();
        // Every page of the same 2 MiB region has its leaf in the same table.
        let last = va + 511 * PAGE_SIZE;
        assert_eq!(pt.leaf_table_creating(last, Flags::USER, &mut fa), Ok(t));
        assert!(pt.map_in_table(t, va, 0x20_0000, Flags::USER | Flags::WRITABLE));
        assert!(
            !pt.map_in_table(t, va, 0x30_0000, Flags::USER),
            "a leaf stays"
        );
        let tr = pt.translate(va).unwrap();
        assert_eq!(tr.phys, 0x20_0000);
        assert!(tr.flags.contains(Flags::USER | Flags::WRITABLE));
        assert!(pt.map_in_table(t, last, 0x21_0000, Flags::USER));
        assert_eq!(pt.translate(last).unwrap().phys, 0x21_0000);
        pt.install_in_table(t, last, 0x22_0000, Flags::USER | Flags::WRITABLE);
        let tr = pt.translate(last).unwrap();
        assert_eq!(tr.phys, 0x22_0000, "install replaces");
        assert!(tr.flags.contains(Flags::WRITABLE));
        assert!(pt.unmap_in_table(t, va));
        assert!(!pt.unmap_in_table(t, va), "nothing left to remove");
        assert!(pt.translate(va).is_none());
        assert!(pt.translate(last).is_some());
        assert_eq!(
            pt.leaf_table_creating(va + 1, Flags::USER, &mut fa),
            Err(PagingError::Misaligned)
        );
    }

    #[test]
    fn unmap_range_matches_page_by_page_removal() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rand = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for _ in 0..50 {
            let (m1, m2) = (SimMem::default(), SimMem::default());
            let (mut f1, mut f2) = (frames(), frames());
            let mut a = PageTables::create(&m1, &mut f1).unwrap();
            let mut b = PageTables::create(&m2, &mut f2).unwrap();
            // Pages scattered over three level-1 tables.
            let origin = 0x0000_1000_0040_0000 - 600 * PAGE_SIZE;
            let mut mapped = Vec::new();
            for _ in 0..300 {
                let va = origin + rand(1400) * PAGE_SIZE;
                if a.map(va, 0x10_0000, Flags::USER, &mut f1).is_ok() {
                    b.map(va, 0x10_0000, Flags::USER, &mut f2).unwrap();
                    mapped.push(va);
                }
            }
            let base = origin + rand(1400 * PAGE_SIZE);
            let len = rand(900 * PAGE_SIZE);
            let mut expect = 0;
            for &va in &mapped {
                // A page is removed when any byte of it is in the range.
                if len > 0 && va + PAGE_SIZE > base && va < base + len {
                    b.unmap(va).unwrap();
                    expect += 1;
                }
            }
            assert_eq!(a.unmap_range(base, len), expect);
            for &va in &mapped {
                assert_eq!(a.translate(va), b.translate(va));
            }
        }
    }

    #[test]
    fn out_of_memory_is_reported() {
        let mem = SimMem::default();
        let mut fa = Frames {
            next: 0,
            freed: Vec::new(),
            limit: 2 * PAGE_SIZE,
        };
        let mut pt = PageTables::create(&mem, &mut fa).unwrap();
        assert_eq!(
            pt.map(UVA, 0, Flags::USER, &mut fa),
            Err(PagingError::OutOfMemory)
        );
    }
}
