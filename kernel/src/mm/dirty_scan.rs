//! Finding the pages of VMAs that were written since the last look, by their leaves' DIRTY
//! bits, reading only the leaves of pages that may be mapped.
//!
//! A VMA's pages that may have leaves are those initialised (a page is zeroed on its first
//! fill, before its leaf is made), given as a bitmap: a [`DirtyScan`] costs one step per
//! initialised page, not per page of the VMA, and skips unread a level-1 table whose level-2
//! entry is not ACCESSED, as [`PageTables::take_dirty`] does: no leaf below it was written
//! since that bit was cleared (the TLB being flushed after). A [`LeafWatch`] remembers where
//! the leaves of a few initialised pages are and reads them with no walk and no level-2 entry:
//! page tables below the root are freed only with the root, so a leaf's place, once its
//! level-1 table exists, stays the same while the set of pages does.

use crate::layout::PAGE_SIZE;
use crate::paging::{Level2Accessed, PageTables, PhysMemory};
use alloc::vec::Vec;

/// Bytes a level-1 table maps.
const SPAN: u64 = 512 * PAGE_SIZE;

/// One scan of a table for dirty leaves, VMA by VMA in ascending address order. Each 2 MiB
/// chunk's level-2 entry is read once a scan (with [`Level2Accessed::Take`] its ACCESSED bit
/// is cleared then, so a second look would find nothing), and each 1 GiB's level-2 table is
/// looked up once while the VMAs stay in it.
pub struct DirtyScan<'m, M: PhysMemory> {
    pt: PageTables<'m, M>,
    accessed: Level2Accessed,
    /// The 1 GiB looked up last (address >> 30) and its level-2 table, if mapped.
    gib: Option<(u64, Option<u64>)>,
    /// The 2 MiB chunk looked up last (its base) and its level-1 table, if ACCESSED.
    chunk: Option<(u64, Option<u64>)>,
}

impl<'m, M: PhysMemory> DirtyScan<'m, M> {
    /// A scan of `pt` that does `accessed` with the level-2 ACCESSED bits it reads.
    pub fn new(pt: PageTables<'m, M>, accessed: Level2Accessed) -> Self {
        DirtyScan {
            pt,
            accessed,
            gib: None,
            chunk: None,
        }
    }

    /// Calls `dirty(page)`, pages ascending, for each page of the VMA at `base` (page-aligned,
    /// above the VMAs scanned before) whose bit is set in `initialised` (bit
    /// `i % 64` of word `i / 64` for page `i`) and whose leaf is present and DIRTY, and clears
    /// that DIRTY bit.
    pub fn vma(&mut self, base: u64, initialised: &[u64], mut dirty: impl FnMut(u32)) {
        debug_assert!(base.is_multiple_of(PAGE_SIZE));
        let Some(&first) = initialised.first() else {
            return;
        };
        // Set bit by set bit: word `w`'s bits not read yet are `bits`.
        let (mut w, mut bits) = (0, first);
        loop {
            while bits == 0 {
                w += 1;
                let Some(&word) = initialised.get(w) else {
                    return;
                };
                bits = word;
            }
            let page = w * 64 + bits.trailing_zeros() as usize;
            let va = base + page as u64 * PAGE_SIZE;
            match self.table(va) {
                Some(table) => {
                    bits &= bits - 1;
                    if self.pt.take_dirty_in_table(table, va) {
                        dirty(page as u32);
                    }
                }
                None => {
                    // Nothing under this chunk was written: on to the first page past it.
                    let next = ((va & !(SPAN - 1)) + SPAN - base) / PAGE_SIZE;
                    let next = next as usize;
                    if next / 64 > w {
                        w = next / 64;
                        let Some(&word) = initialised.get(w) else {
                            return;
                        };
                        bits = word;
                    }
                    bits &= !below(next - w * 64);
                }
            }
        }
    }

    /// The level-1 table of the chunk holding `va`, if its level-2 entry is present and
    /// ACCESSED; the entry is read once a scan.
    fn table(&mut self, va: u64) -> Option<u64> {
        let chunk = va & !(SPAN - 1);
        if let Some((c, table)) = self.chunk
            && c == chunk
        {
            return table;
        }
        debug_assert!(
            self.chunk.is_none_or(|(c, _)| c < chunk),
            "VMAs out of order"
        );
        let g = va >> 30;
        let t2 = match self.gib {
            Some((h, t2)) if h == g => t2,
            _ => {
                let t2 = self.pt.level2_table(va);
                self.gib = Some((g, t2));
                t2
            }
        };
        let table = t2.and_then(|t2| self.pt.accessed_table_in(t2, chunk, self.accessed));
        self.chunk = Some((chunk, table));
        table
    }
}

/// Where the leaves of a VMA's initialised pages are (see the module documentation): for
/// VMAs with few of them, whose every leaf is cheaper to read than the walk and level-2 entry
/// a [`DirtyScan`] reads first. It neither reads nor clears level-2 ACCESSED bits, so scans of
/// other VMAs under the same entries lose nothing.
#[derive(Debug, Default)]
pub struct LeafWatch {
    /// Per page, ascending: its number in the VMA and its level-1 table, if it had one when
    /// last looked for.
    leaves: Vec<(u32, Option<u64>)>,
}

impl LeafWatch {
    /// A watch of no page.
    pub const fn new() -> Self {
        LeafWatch { leaves: Vec::new() }
    }

    /// Watches the pages set in `initialised` (bit `i % 64` of word `i / 64` for page `i`) of
    /// the VMA at `base` in `pt`, instead of those watched before.
    pub fn watch<M: PhysMemory>(&mut self, pt: &PageTables<'_, M>, base: u64, initialised: &[u64]) {
        self.leaves.clear();
        for (w, &word) in initialised.iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                let page = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let table = pt.level1_table(base + page as u64 * PAGE_SIZE);
                self.leaves.push((page as u32, table));
            }
        }
    }

    /// How many pages it watches.
    pub fn len(&self) -> usize {
        self.leaves.len()
    }

    /// Whether it watches no page.
    pub fn is_empty(&self) -> bool {
        self.leaves.is_empty()
    }

    /// Calls `dirty(page)`, pages ascending, for each watched page of the VMA at `base` (the
    /// one watched) whose leaf in `pt` is present and DIRTY, and clears that DIRTY bit. A page
    /// that had no level-1 table is looked up again (and remembered once it has one).
    pub fn take_dirty<M: PhysMemory>(
        &mut self,
        pt: &mut PageTables<'_, M>,
        base: u64,
        mut dirty: impl FnMut(u32),
    ) {
        for (page, table) in self.leaves.iter_mut() {
            let va = base + *page as u64 * PAGE_SIZE;
            if table.is_none() {
                *table = pt.level1_table(va);
            }
            if let Some(t) = *table
                && pt.take_dirty_in_table(t, va)
            {
                dirty(*page);
            }
        }
    }
}

/// The low `n` bits (all for 64 or more).
fn below(n: usize) -> u64 {
    if n >= 64 { u64::MAX } else { (1u64 << n) - 1 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paging::sim::{SimMem, frames};
    use crate::paging::{Flags, PageTables};
    use alloc::vec;
    use alloc::vec::Vec;
    use proptest::prelude::*;

    const BASE: u64 = 0x0000_1000_0000_0000;

    /// The level-2 entry above `va`: its table and index.
    fn level2_slot(mem: &SimMem, root: u64, va: u64) -> (u64, usize) {
        let t2 = PageTables::new(root, mem).level2_table(va).unwrap();
        (t2, ((va >> 21) & 511) as usize)
    }

    /// Clears the ACCESSED bit of the level-2 entry above `va`, as if no walk went through it
    /// since; returns where the entry is.
    fn unaccess(mem: &SimMem, root: u64, va: u64) -> (u64, usize) {
        let (t2, i2) = level2_slot(mem, root, va);
        mem.write_entry(t2, i2, mem.read_entry(t2, i2) & !Flags::ACCESSED.0);
        (t2, i2)
    }

    /// The initialised bits of a VMA of `words` words, `pages` set.
    fn bitmap(words: usize, pages: impl IntoIterator<Item = u64>) -> Vec<u64> {
        let mut bits = vec![0u64; words];
        for p in pages {
            bits[(p / 64) as usize] |= 1 << (p % 64);
        }
        bits
    }

    /// Sets DIRTY on the leaf of `va` and ACCESSED on its level-2 entry, as a write would.
    fn write(mem: &SimMem, root: u64, va: u64) {
        let (t2, i2) = level2_slot(mem, root, va);
        mem.write_entry(t2, i2, mem.read_entry(t2, i2) | Flags::ACCESSED.0);
        let mut pt = PageTables::new(root, mem);
        let t1 = pt.accessed_table_in(t2, va, Level2Accessed::Keep).unwrap();
        let i1 = ((va >> 12) & 511) as usize;
        mem.write_entry(t1, i1, mem.read_entry(t1, i1) | Flags::DIRTY.0);
    }

    /// A table mapping `pages` pages from `base`, none written yet.
    fn mapped(mem: &SimMem, base: u64, pages: u64) -> u64 {
        let mut fa = frames();
        let mut pt = PageTables::create(mem, &mut fa).unwrap();
        for p in 0..pages {
            let f = Flags::USER | Flags::WRITABLE | Flags::NO_EXECUTE;
            pt.map(
                base + p * PAGE_SIZE,
                0x4000_0000 + p * PAGE_SIZE,
                f,
                &mut fa,
            )
            .unwrap();
        }
        let root = pt.root();
        // Every level-2 entry starts not ACCESSED (mapping does not walk as the CPU does).
        let mut pt = PageTables::new(root, mem);
        pt.take_dirty(
            &[(base, pages * PAGE_SIZE)],
            Level2Accessed::Take,
            |_, _| {},
        );
        root
    }

    fn scan(mem: &SimMem, root: u64, vmas: &[(u64, &[u64])], how: Level2Accessed) -> Vec<u64> {
        let mut s = DirtyScan::new(PageTables::new(root, mem), how);
        let mut found = Vec::new();
        for &(base, bits) in vmas {
            s.vma(base, bits, |p| found.push(base + p as u64 * PAGE_SIZE));
        }
        found
    }

    #[test]
    fn finds_written_initialised_pages_once_and_skips_untouched_chunks() {
        let mem = SimMem::default();
        let root = mapped(&mem, BASE, 1024);
        for p in [1, 5, 70, 600] {
            write(&mem, root, BASE + p * PAGE_SIZE);
        }
        // Page 5 is not initialised: its leaf is not read.
        let init = bitmap(16, [1, 2, 70, 513, 600]);
        let found = scan(&mem, root, &[(BASE, &init)], Level2Accessed::Take);
        assert_eq!(
            found,
            [
                BASE + PAGE_SIZE,
                BASE + 70 * PAGE_SIZE,
                BASE + 600 * PAGE_SIZE
            ]
        );
        // The bits were taken: nothing the second time.
        assert!(scan(&mem, root, &[(BASE, &init)], Level2Accessed::Take).is_empty());
        // A DIRTY leaf under a level-2 entry no one walked since is not read.
        let mut pt = PageTables::new(root, &mem);
        let t2 = pt.level2_table(BASE).unwrap();
        let t1 = pt.accessed_table_in(t2, BASE, Level2Accessed::Keep);
        assert!(t1.is_none());
        write(&mem, root, BASE + PAGE_SIZE);
        unaccess(&mem, root, BASE);
        assert!(scan(&mem, root, &[(BASE, &init)], Level2Accessed::Take).is_empty());
    }

    #[test]
    fn two_vmas_in_one_chunk_are_both_read() {
        let mem = SimMem::default();
        let root = mapped(&mem, BASE, 32);
        write(&mem, root, BASE + 2 * PAGE_SIZE);
        write(&mem, root, BASE + 20 * PAGE_SIZE);
        let (a, b) = ([0b111u64], [0b1111u64]);
        for how in [Level2Accessed::Take, Level2Accessed::Keep] {
            let found = scan(&mem, root, &[(BASE, &a), (BASE + 18 * PAGE_SIZE, &b)], how);
            assert_eq!(
                found,
                [BASE + 2 * PAGE_SIZE, BASE + 20 * PAGE_SIZE],
                "{how:?}"
            );
            write(&mem, root, BASE + 2 * PAGE_SIZE);
            write(&mem, root, BASE + 20 * PAGE_SIZE);
        }
    }

    #[test]
    fn unmapped_vmas_and_empty_bitmaps_find_nothing() {
        let mem = SimMem::default();
        let root = mapped(&mem, BASE, 4);
        let far = 0x0000_7000_0000_0000;
        let found = scan(
            &mem,
            root,
            &[(BASE, &[]), (far, &[u64::MAX; 2])],
            Level2Accessed::Take,
        );
        assert!(found.is_empty());
    }

    #[test]
    fn a_watch_reads_its_leaves_without_the_level2_entries_and_finds_new_tables() {
        let mem = SimMem::default();
        let root = mapped(&mem, BASE, 4);
        let mut pt = PageTables::new(root, &mem);
        // Page 600 has no level-1 table yet.
        let init = [0b1011u64, 0, 0, 0, 0, 0, 0, 0, 0, 1 << (600 - 576)];
        let mut watch = LeafWatch::new();
        watch.watch(&pt, BASE, &init);
        assert_eq!(watch.len(), 4);
        let mut take = |pt: &mut PageTables<'_, SimMem>| {
            let mut found = Vec::new();
            watch.take_dirty(pt, BASE, |p| found.push(p));
            found
        };
        assert!(take(&mut pt).is_empty());
        write(&mem, root, BASE + PAGE_SIZE);
        write(&mem, root, BASE + 2 * PAGE_SIZE);
        write(&mem, root, BASE + 3 * PAGE_SIZE);
        // Its level-2 entry is not ACCESSED: the watch reads the leaves all the same, and
        // leaves the entry alone. Page 2 is not watched.
        let (t2, i2) = unaccess(&mem, root, BASE);
        assert_eq!(take(&mut pt), [1, 3]);
        assert!(take(&mut pt).is_empty());
        assert_eq!(mem.read_entry(t2, i2) & Flags::ACCESSED.0, 0);
        // Page 600 is mapped now: its table is found.
        let mut fa = frames();
        fa.next = 0x200_0000;
        let f = Flags::USER | Flags::WRITABLE | Flags::NO_EXECUTE;
        pt.map(BASE + 600 * PAGE_SIZE, 0x5000_0000, f, &mut fa)
            .unwrap();
        write(&mem, root, BASE + 600 * PAGE_SIZE);
        assert_eq!(take(&mut pt), [600]);
    }

    proptest! {
        /// A watch finds what a scan finds.
        #[test]
        fn a_watch_agrees_with_a_scan(
            written in proptest::collection::btree_set(0u64..1024, 0..24),
            initialised in proptest::collection::btree_set(0u64..1024, 0..64),
        ) {
            let mem = SimMem::default();
            let root = mapped(&mem, BASE, 1024);
            let bits = bitmap(16, initialised.iter().copied());
            let mut pt = PageTables::new(root, &mem);
            let mut watch = LeafWatch::new();
            watch.watch(&pt, BASE, &bits);
            prop_assert_eq!(watch.len(), initialised.len());
            for &p in &written {
                write(&mem, root, BASE + p * PAGE_SIZE);
            }
            let mut found = Vec::new();
            watch.take_dirty(&mut pt, BASE, |p| found.push(BASE + p as u64 * PAGE_SIZE));
            for &p in &written {
                write(&mem, root, BASE + p * PAGE_SIZE);
            }
            let scanned = scan(&mem, root, &[(BASE, &bits)], Level2Accessed::Take);
            prop_assert_eq!(&found, &scanned);
            let want: Vec<u64> = written
                .intersection(&initialised)
                .map(|p| BASE + p * PAGE_SIZE)
                .collect();
            prop_assert_eq!(found, want);
        }

        /// The scan finds exactly the written pages that are initialised, as a walk of every
        /// leaf with [`PageTables::take_dirty`] does.
        #[test]
        fn agrees_with_a_walk_of_every_leaf(
            written in proptest::collection::btree_set(0u64..1536, 0..24),
            initialised in proptest::collection::btree_set(0u64..1536, 0..200),
        ) {
            let mem = SimMem::default();
            let root = mapped(&mem, BASE, 1536);
            for &p in &written {
                write(&mem, root, BASE + p * PAGE_SIZE);
            }
            let bits = bitmap(24, initialised.iter().copied());
            let found = scan(&mem, root, &[(BASE, &bits)], Level2Accessed::Keep);
            let want: Vec<u64> = written
                .intersection(&initialised)
                .map(|p| BASE + p * PAGE_SIZE)
                .collect();
            prop_assert_eq!(found, want);
            let mut rest = Vec::new();
            PageTables::new(root, &mem).take_dirty(
                &[(BASE, 1536 * PAGE_SIZE)],
                Level2Accessed::Keep,
                |_, va| rest.push(va),
            );
            let left: Vec<u64> = written
                .difference(&initialised)
                .map(|p| BASE + p * PAGE_SIZE)
                .collect();
            prop_assert_eq!(rest, left);
        }
    }
}
