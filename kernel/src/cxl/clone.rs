//! Clones: μprocesses restored from a checkpoint in the shared region, on any node, at any
//! address (CXLfork's restore, with μFork's relocation across nodes).
//!
//! A clone's area is a fresh area of this node: at the checkpoint's own address when that slot
//! is free here (then nothing needs relocating), elsewhere otherwise. Its checkpoint pages stay
//! in the region until
//! they are needed; this module is the [`Pager`] of the area and decides, page by page, on the
//! clone's first access (a VLB miss), by the clone's [`Tiering`]:
//!
//! - **migrate-on-write** (the default): a read maps the region's page itself, read-only, if
//!   nothing in it needs relocating (the clone is at the checkpoint's address, or the page holds
//!   no tagged word); its first write copies it into a frame of this node. A page with tags in a
//!   clone elsewhere, or holding pointers into a function's code that this node mapped
//!   elsewhere, is copied and relocated on its first access.
//! - **migrate-on-access**: every page is copied and relocated on its first access.
//! - **hybrid**: the pages the checkpointed μprocess had accessed since its accessed bits were
//!   last reset (the checkpoint records them), and those this node's earlier hybrid clones of
//!   the checkpoint accessed, are copied on first access; the others are handled as
//!   migrate-on-write.
//!
//! Every page is checked against its CRC-32 in the region when it is first copied or mapped; a
//! corrupt page is refused: the clone's access faults and the clone is killed, never run on
//! corrupt data. The kernel's own reads of a clone's memory copy the page first.
//!
//! A clone holds a reference on its checkpoint (so no node frees its pages) until it has every
//! page of its own or ends. Counters: pages attached in place, pages copied (of which migrated:
//! copied at a first read rather than a write), and pages refused, node-wide and per clone
//! ([`per_clone`], `/metrics`).

use crate::drivers::ivshmem::SharedMemory;
use crate::jord::state::{Frames, PageWords, Pager};
use crate::ufork::snapshot::Attach;
use crate::ufork::tags::Source;
use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use fjord_cxl::{Cid, Reader};
use fjord_kernel::layout::{CXL_PHYS, PAGE_SIZE};
use fjord_pd::{PdId, Perm};
use fjord_ufork::area::Area;
use fjord_ufork::lazy::LazyPages;
use fjord_ufork::relocate::{CodeMove, RelocError, relocate_page_moving_code};
use fjord_ufork::source::{TagSource, Tally};
use fjord_ufork::tags::page_words;
use spin::Mutex;

pub use fjord_cxl::Tiering;

/// Pages mapped read-only from the region in place.
pub static PAGES_ATTACHED: AtomicU64 = AtomicU64::new(0);
/// Pages copied from the region into a clone's own frames (at a write or migrated).
pub static PAGES_COPIED: AtomicU64 = AtomicU64::new(0);
/// Of those, pages migrated: copied at a first read (the tiering, or pointers to relocate) or
/// when the kernel read them, not at a write.
pub static PAGES_MIGRATED: AtomicU64 = AtomicU64::new(0);
/// Pages refused because they did not match their CRC-32.
pub static PAGES_REFUSED: AtomicU64 = AtomicU64::new(0);
/// Words relocated in the pages copied.
pub static WORDS_RELOCATED: AtomicU64 = AtomicU64::new(0);

/// One clone's area.
struct CloneArea {
    pd: PdId,
    reader: Reader<'static, SharedMemory>,
    /// The area page each checkpoint page is (ascending).
    pages: Vec<u32>,
    /// The area pages still in the region (shared: mapped in place).
    pending: LazyPages,
    /// Pages copied on first access under [`Tiering::Hybrid`] (ascending).
    hot: Vec<u32>,
    from: Area,
    to: Area,
    source: Source,
    /// Where the function's code moved (a function clone on a node that mapped it elsewhere).
    code: Option<CodeMove>,
    tiering: Tiering,
    counts: Counts,
    /// The serial of the area's frames (`Frames::serial`).
    serial: u64,
}

/// What one clone took from its checkpoint so far.
#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    /// Pages copied into local memory at a write.
    copied: u32,
    /// Pages copied into local memory at a first read (migrated).
    migrated: u32,
}

/// Why a checkpoint page is copied into a clone.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cause {
    /// A write (copy-on-write).
    Write,
    /// A read: the tiering copies it, its pointers need relocating, or the kernel reads it.
    Read,
}

/// One clone as `/metrics` shows it ([`per_clone`]).
#[derive(Clone, Copy, Debug)]
pub struct CloneStat {
    /// The base of its area.
    pub base: u64,
    /// Its checkpoint.
    pub cid: Cid,
    /// Checkpoint pages it still takes from the region: mapped read-only in place, or not yet
    /// touched.
    pub in_region: u64,
    /// Of those, pages mapped in place now.
    pub mapped: u64,
    /// Checkpoint pages copied into local memory at a write.
    pub copied: u64,
    /// Checkpoint pages copied into local memory at a first read.
    pub migrated: u64,
    /// Bytes of local memory its area holds (checkpoint pages copied and pages it wrote since).
    pub local_bytes: u64,
    serial: u64,
}

struct Clones {
    /// The Jord state the bases below belong to.
    generation: u64,
    areas: BTreeMap<u64, CloneArea>,
    /// For each checkpoint, the area pages its hybrid clones on this node have accessed so far
    /// (ascending): what later hybrid clones copy on first access, beside the checkpoint's own
    /// accessed set.
    accessed: BTreeMap<Cid, Vec<u32>>,
    /// Clones that hold every page of their own by now (no longer paged): their checkpoint,
    /// what they copied and their area's serial, until that area goes.
    settled: BTreeMap<u64, (Cid, Counts, u64)>,
}

static CLONES: Mutex<Clones> = Mutex::new(Clones {
    generation: 0,
    areas: BTreeMap::new(),
    accessed: BTreeMap::new(),
    settled: BTreeMap::new(),
});

/// Most checkpoints whose clones' accessed pages are remembered.
const REMEMBERED: usize = 64;

/// The union of two ascending lists, ascending.
fn union(a: &[u32], b: &[u32]) -> Vec<u32> {
    let mut out = Vec::with_capacity(a.len().max(b.len()));
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        let next = match (a.get(i), b.get(j)) {
            (Some(&x), Some(&y)) if x == y => {
                i += 1;
                j += 1;
                x
            }
            (Some(&x), Some(&y)) if x < y => {
                i += 1;
                x
            }
            (_, Some(&y)) => {
                j += 1;
                y
            }
            (Some(&x), None) => {
                i += 1;
                x
            }
            (None, None) => break,
        };
        out.push(next);
    }
    out
}

/// The pager of clones' areas.
struct ClonePager;

static PAGER: ClonePager = ClonePager;

/// The clone state for an operation on `f`'s Jord state (emptied first if it belonged to an
/// earlier one: a reset Jord reuses VMA bases).
fn state<'a>(f: &Frames<'_>, g: &'a mut spin::MutexGuard<'static, Clones>) -> &'a mut Clones {
    if g.generation != f.generation() {
        g.generation = f.generation();
        g.areas.clear();
        g.settled.clear();
    }
    g
}

/// Makes the new area `a` describes hold checkpoint `reader`'s pages (`pages`: the area page
/// of each), taken as `tiering` says; `hot`: the pages the hybrid policy copies on access.
pub fn attach(
    a: Attach<'_>,
    reader: Reader<'static, SharedMemory>,
    pages: Vec<u32>,
    hot: Vec<u32>,
    tiering: Tiering,
) -> Result<(), ()> {
    if pages.is_empty() {
        return Ok(());
    }
    crate::jord::with(|j| {
        let f = &mut j.frames();
        let n = f.pages(a.base).ok_or(())?;
        let serial = f.serial(a.base).ok_or(())?;
        let mut pending = LazyPages::new(n);
        for &p in &pages {
            if !pending.mark_pending(p as usize) {
                return Err(());
            }
        }
        let mut g = CLONES.lock();
        let s = state(f, &mut g);
        let cid = reader.info().cid;
        let hot = match s.accessed.get(&cid) {
            Some(learned) => union(&hot, learned),
            None => hot,
        };
        s.areas.insert(
            a.base,
            CloneArea {
                pd: a.pd,
                reader,
                pages,
                pending,
                hot,
                from: a.from,
                to: a.to,
                source: a.source.clone(),
                code: a.code,
                tiering,
                counts: Counts::default(),
                serial,
            },
        );
        s.settled.remove(&a.base);
        f.set_pager(a.base, Some(&PAGER));
        Ok(())
    })
}

/// Pages clones on this node still take from the region.
pub fn pages_in_region() -> u64 {
    crate::jord::with(|_| {
        CLONES
            .lock()
            .areas
            .values()
            .map(|c| c.pending.pending_count() as u64)
            .sum()
    })
}

/// Clones on this node that still take pages from the region.
pub fn attached_clones() -> u64 {
    crate::jord::with(|_| CLONES.lock().areas.len() as u64)
}

/// Every clone of this node whose area still exists: what it takes from the region, what it
/// copied, and the local memory it holds, by area base.
pub fn per_clone() -> Vec<CloneStat> {
    crate::jord::with(|j| {
        let mut stats: Vec<CloneStat> = {
            let mut g = CLONES.lock();
            let s = state(&j.frames(), &mut g);
            let paged = s.areas.iter().map(|(&base, c)| CloneStat {
                base,
                cid: c.reader.info().cid,
                in_region: c.pending.pending_count() as u64,
                mapped: c.pending.shared_pages().count() as u64,
                copied: u64::from(c.counts.copied),
                migrated: u64::from(c.counts.migrated),
                local_bytes: 0,
                serial: c.serial,
            });
            let settled = s
                .settled
                .iter()
                .map(|(&base, &(cid, n, serial))| CloneStat {
                    base,
                    cid,
                    in_region: 0,
                    mapped: 0,
                    copied: u64::from(n.copied),
                    migrated: u64::from(n.migrated),
                    local_bytes: 0,
                    serial,
                });
            paged.chain(settled).collect()
        };
        // A settled clone's area may have gone since (its pager was no longer told), and
        // another VMA may lie at its base now.
        let gone: Vec<u64> = stats
            .iter()
            .filter(|c| j.frames().serial(c.base) != Some(c.serial))
            .map(|c| c.base)
            .collect();
        if !gone.is_empty() {
            let mut g = CLONES.lock();
            for b in &gone {
                g.settled.remove(b);
            }
            stats.retain(|c| !gone.contains(&c.base));
        }
        for c in &mut stats {
            let own = j.initialised_pages(c.base).len() as u64 - c.in_region;
            c.local_bytes = own * PAGE_SIZE;
        }
        stats.sort_by_key(|c| c.base);
        stats
    })
}

impl CloneArea {
    /// Whether the clone's area lies elsewhere than its checkpoint's (its pointers need
    /// relocating); a clone restored at the checkpoint's own address needs none.
    fn moved(&self) -> bool {
        self.from.base() != self.to.base()
    }

    /// Whether page `page` of the checkpoint, holding `words`, needs relocating in this clone:
    /// it points into the checkpoint's area and the clone lies elsewhere, or into the
    /// function's code and this node mapped the code elsewhere.
    fn needs_relocating(&self, page: u64, words: &PageWords) -> bool {
        (self.moved() && self.source.page_has_tags(page, words))
            || self.code.is_some_and(|c| c.points_into(words))
    }

    /// Reads area page `i` as the region holds it into `words`, checked against its CRC-32;
    /// its index in the checkpoint.
    fn load(&self, i: usize, words: &mut PageWords) -> Option<u64> {
        let k = self.pages.binary_search(&(i as u32)).ok()? as u64;
        let mut bytes = [0u8; PAGE_SIZE as usize];
        if self.reader.page(k, &mut bytes).is_err() {
            PAGES_REFUSED.fetch_add(1, Relaxed);
            return None;
        }
        page_words(&bytes, words);
        Some(k)
    }

    /// Copies pending page `i` (whose region contents are `words`, relocated in place) into the
    /// area at `base` because of `cause`, and takes away its in-place mapping if it had one.
    fn copy(
        &mut self,
        f: &mut Frames<'_>,
        base: u64,
        i: usize,
        words: &mut PageWords,
        cause: Cause,
    ) {
        let page = self.from.base() + i as u64 * PAGE_SIZE;
        let _ = relocate(
            &*self.source,
            (&self.from, &self.to),
            self.code.as_ref(),
            page,
            words,
        );
        f.write_words(base, i, words);
        PAGES_COPIED.fetch_add(1, Relaxed);
        match cause {
            Cause::Write => self.counts.copied += 1,
            Cause::Read => {
                self.counts.migrated += 1;
                PAGES_MIGRATED.fetch_add(1, Relaxed);
            }
        }
        if self.pending.settle(i) {
            let p = f.revoke(self.pd, base + i as u64 * PAGE_SIZE, PAGE_SIZE);
            f.owe(p);
        }
    }

    /// Copies pending page `i` now because of `cause`; false if the region's copy is corrupt
    /// (it stays pending).
    fn settle(&mut self, f: &mut Frames<'_>, base: u64, i: usize, cause: Cause) -> bool {
        if !self.pending.is_pending(i) {
            return true;
        }
        let mut words: PageWords = [0; (PAGE_SIZE / 8) as usize];
        if self.load(i, &mut words).is_none() {
            return false;
        }
        self.copy(f, base, i, &mut words, cause);
        true
    }

    /// Whether a first read of page `i` copies it rather than mapping it in place.
    fn copies_on_read(&self, i: usize) -> bool {
        let hot = self.hot.binary_search(&(i as u32)).is_ok();
        self.tiering.copies_on_read(hot)
    }

    /// The VLB-miss path (see [`Pager::fill`]).
    fn fill(
        &mut self,
        f: &mut Frames<'_>,
        base: u64,
        i: usize,
        access: Perm,
        perm: Perm,
    ) -> Option<(u64, Perm)> {
        // A refusal: rights without the access make the miss a fault.
        const REFUSED: Option<(u64, Perm)> = Some((0, Perm::NONE));
        if access.contains(Perm::W) || self.copies_on_read(i) {
            let cause = if access.contains(Perm::W) {
                Cause::Write
            } else {
                Cause::Read
            };
            if !self.settle(f, base, i, cause) {
                return REFUSED;
            }
            return Some((f.frame(base, i)?, perm));
        }
        let mut words: PageWords = [0; (PAGE_SIZE / 8) as usize];
        let Some(k) = self.load(i, &mut words) else {
            return REFUSED;
        };
        let page = self.from.base() + i as u64 * PAGE_SIZE;
        if self.needs_relocating(page, &words) {
            self.copy(f, base, i, &mut words, Cause::Read);
            return Some((f.frame(base, i)?, perm));
        }
        let offset = self.reader.page_offset(k)?;
        if !self.pending.is_shared(i) {
            PAGES_ATTACHED.fetch_add(1, Relaxed);
        }
        self.pending.share(i);
        Some((CXL_PHYS + offset, perm.without(Perm::W)))
    }
}

impl Clones {
    /// Forgets the clone at `base` once it has every page (dropping its reference).
    fn release_if_settled(&mut self, f: &mut Frames<'_>, base: u64) {
        if self
            .areas
            .get(&base)
            .is_some_and(|c| c.pending.is_settled())
        {
            if let Some((cid, counts, serial)) = self.forget(base) {
                self.settled.insert(base, (cid, counts, serial));
            }
            f.set_pager(base, None);
        }
    }

    /// Forgets the clone at `base`, returning its checkpoint, counts and serial; a hybrid clone's
    /// checkpoint pages it accessed (copied, or mapped in place) are remembered for the next
    /// hybrid clones of its checkpoint.
    fn forget(&mut self, base: u64) -> Option<(Cid, Counts, u64)> {
        let c = self.areas.remove(&base)?;
        let cid = c.reader.info().cid;
        if c.tiering != Tiering::Hybrid {
            return Some((cid, c.counts, c.serial));
        }
        let touched: Vec<u32> = c
            .pages
            .iter()
            .copied()
            .filter(|&p| !c.pending.is_pending(p as usize) || c.pending.is_shared(p as usize))
            .collect();
        if !self.accessed.contains_key(&cid) && self.accessed.len() >= REMEMBERED {
            self.accessed.pop_first();
        }
        let known = self.accessed.entry(cid).or_default();
        *known = union(known, &touched);
        Some((cid, c.counts, c.serial))
    }
}

/// The pages this node's hybrid clones of checkpoint `cid` have accessed so far (what its next
/// hybrid clones copy on first access besides the checkpoint's own accessed set).
pub fn accessed_by_clones(cid: Cid) -> usize {
    crate::jord::with(|_| CLONES.lock().accessed.get(&cid).map_or(0, Vec::len))
}

impl Pager for ClonePager {
    fn fill(
        &self,
        f: &mut Frames<'_>,
        base: u64,
        i: usize,
        access: Perm,
        perm: Perm,
    ) -> Option<(u64, Perm)> {
        let mut g = CLONES.lock();
        let s = state(f, &mut g);
        let c = s.areas.get_mut(&base)?;
        if !c.pending.is_pending(i) {
            return None;
        }
        let r = c.fill(f, base, i, access, perm);
        s.release_if_settled(f, base);
        r
    }

    fn before_read(&self, f: &mut Frames<'_>, base: u64, i: usize) {
        settle_one(f, base, i, Cause::Read);
    }

    fn before_write(&self, f: &mut Frames<'_>, base: u64, i: usize) {
        settle_one(f, base, i, Cause::Write);
    }

    fn before_whole(&self, f: &mut Frames<'_>, base: u64) {
        let mut g = CLONES.lock();
        let s = state(f, &mut g);
        if let Some(c) = s.areas.get_mut(&base) {
            let pending: Vec<usize> = c.pending.pending_pages().collect();
            for i in pending {
                c.settle(f, base, i, Cause::Read);
            }
            s.release_if_settled(f, base);
        }
    }

    fn held(&self, base: u64) -> Vec<usize> {
        CLONES
            .lock()
            .areas
            .get(&base)
            .map(|c| c.pending.pending_pages().collect())
            .unwrap_or_default()
    }

    fn detach(&self, f: &mut Frames<'_>, base: u64) {
        let mut g = CLONES.lock();
        let s = state(f, &mut g);
        s.forget(base);
        s.settled.remove(&base);
    }
}

/// Relocates checkpoint page `page` (its `words`) for a clone whose area is `to` (the
/// checkpoint's was `from`) and whose code moved as `code` says, counting the words moved;
/// nothing to do when neither moved.
pub(super) fn relocate(
    source: &dyn TagSource,
    (from, to): (&Area, &Area),
    code: Option<&CodeMove>,
    page: u64,
    words: &mut PageWords,
) -> Result<(), RelocError> {
    if from.base() == to.base() && code.is_none() {
        return Ok(());
    }
    let mut tally = Tally::default();
    let code_words = relocate_page_moving_code(source, (from, to), code, page, words, &mut tally)?;
    WORDS_RELOCATED.fetch_add(tally.total() + code_words, Relaxed);
    Ok(())
}

/// Copies page `i` of the clone at `base` before the kernel accesses it, if still pending.
fn settle_one(f: &mut Frames<'_>, base: u64, i: usize, cause: Cause) {
    let mut g = CLONES.lock();
    let s = state(f, &mut g);
    if let Some(c) = s.areas.get_mut(&base) {
        c.settle(f, base, i, cause);
        s.release_if_settled(f, base);
    }
}
