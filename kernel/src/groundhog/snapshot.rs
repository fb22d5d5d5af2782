//! Groundhog snapshots of function instances: taken once after the instance's `init`, and
//! restored after each request by copying back exactly the pages the request dirtied.
//!
//! A snapshot lives in kernel memory: its frames are reached through the direct map only and
//! are never mapped into a PD, so no function can read or write it. It records the instance's
//! layout (its creation stack and instance VMA, their lengths and rights), a copy of every page
//! of them that held data, and its `mmap` allowance. Its registers need no copy: every request
//! enters the function afresh at its entry point with the entry ABI's registers (the rest
//! zero), which is the register state the snapshot was taken in.
//!
//! Dirty tracking uses the leaves' hardware DIRTY bits: they are cleared when the snapshot is
//! taken and after each restore, and the TLB of every CPU that may cache the PD is flushed so
//! that the next write through a leaf sets the bit again. No page fault is taken on the request
//! path for it. A write the bits cannot show is one made before its leaf was removed (an
//! `mprotect` that narrowed and widened the instance's memory, a revocation): when a leaf of a
//! snapshot region goes, Jord's watch of the snapshot's ranges ([`Jord::watch_leaves`]) notes it
//! and the next restore copies every page back.
//!
//! A snapshot is owned by its instance (`crate::module::instance::Instance`) and freed with it;
//! its operations run on Jord's state, under Jord's lock, through Jord's narrow instance-reuse
//! API (the layout an instance keeps, scrubbing to it, the frames behind a VMA).

use crate::jord::state::{Jord, KeptVma, Pending};
use crate::mm::frames::{self, DIRECT};
use alloc::vec::Vec;
use fjord_groundhog::{Action, RestorePlan, RestoreReport, SnapshotIndex};
use fjord_kernel::dirty_scan::{DirtyScan, LeafWatch};
use fjord_kernel::layout::PAGE_SIZE;
use fjord_kernel::paging::PageTables;
use fjord_pd::{Error, PdId, Perm};

/// One VMA of a snapshot and copies of those of its pages that held data.
struct Region {
    base: u64,
    len: u64,
    /// Its slot in the VMA table (and in the backing table): fixed by `base`, so looked up
    /// once.
    slot: Option<usize>,
    /// The instance's right on it.
    perm: Perm,
    saved: PageCopies,
    /// The pages a restore under way has still to put back (ascending; kept allocated between
    /// restores).
    dirty: Vec<u32>,
    /// Where the leaves of its initialised pages are, when they are few ([`WATCH_MAX`]).
    watch: LeafWatch,
    /// The stamp of its backing's initialised pages ([`Backing::stamp`](crate::jord::state::Backing)) that
    /// `watch` follows and whether they were few enough to watch; 0 before the first look.
    watched: (u64, bool),
}

/// Most initialised pages of a region whose dirty bits a restore reads through a
/// [`LeafWatch`] rather than a [`DirtyScan`]: below it, reading every leaf costs less than the
/// walk and the level-2 entries a scan reads first (a function's stack and small heap).
const WATCH_MAX: u32 = 64;

/// The copies of a region's pages that held data when the snapshot was taken.
struct PageCopies {
    index: SnapshotIndex,
    /// Slot `i` holds page `index.pages()[i]`.
    frames: frames::FrameRun,
}

impl PageCopies {
    /// Puts back page `page` of the region into `to`, its VMA's frames: the snapshot's copy,
    /// or zeros where the snapshot has none.
    fn put_back(&self, to: &mut frames::FrameRun, page: u32) {
        match self.index.slot_of(page) {
            Some(slot) => {
                to.copy_page(page as usize, &self.frames, slot);
            }
            None => to.zero(page as usize, 1),
        }
    }
}

impl Drop for PageCopies {
    fn drop(&mut self) {
        core::mem::replace(&mut self.frames, frames::FrameRun::EMPTY).free();
    }
}

/// What the beginning of a restore left of its pages ([`Snapshot::begin_restore`]).
enum Left {
    /// None: every page the request dirtied is back.
    None,
    /// Some pages, and how many the first step may still put back.
    Some(usize),
}

/// An instance's state after its `init`, held by the kernel for restores.
pub struct Snapshot {
    /// The creation stack, the instance VMA and the VMAs `init` mapped, by address.
    regions: Vec<Region>,
    /// Which of them is the instance VMA.
    instance: usize,
    /// The `mmap` allowance (bytes used, limit).
    quota: (u64, u64),
    /// What `scrub_with` keeps of the instance: each region's base, length and right.
    keep: Vec<KeptVma>,
    /// PrivLib's change counter of the instance ([`fjord_pd::PrivLib::changes`]) after its
    /// last scrub with `keep`: while it stands, a scrub would change nothing.
    scrubbed: Option<u64>,
    /// What the restore under way ([`Snapshot::begin_restore`]) did so far, if one is.
    restoring: Option<RestoreReport>,
    /// Scratch space of [`Snapshot::restore_step`] (kept allocated between restores).
    plan: RestorePlan,
}

/// What a snapshot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// VMAs in its layout.
    pub regions: usize,
    /// Pages copied into it.
    pub pages: usize,
    /// Bytes of the VMAs `init` mapped that it keeps (beyond the creation stack and the
    /// instance VMA).
    pub mapped: u64,
}

/// What an instance keeps between requests in Groundhog mode `none` (no snapshot): the VMAs
/// (base, length, right) and the bytes of its `mmap` allowance those that `init` mapped use.
pub struct InitLayout {
    keep: Vec<KeptVma>,
    charged: u64,
    /// PrivLib's change counter of the instance after its last scrub with `keep` (as
    /// [`Snapshot`]'s).
    scrubbed: Option<u64>,
}

impl Snapshot {
    /// Snapshots `pd`, a function instance that just ran its `init` (or none), whose instance
    /// VMA is `[base, base + len)`: every VMA it owns beyond its creation stack, that instance
    /// VMA and the VMAs `init` mapped is freed and every right it was given dropped (as a
    /// restore would), then the pages of those it keeps that hold data are copied into kernel
    /// frames, their leaves' dirty bits cleared and Jord asked to watch their leaves.
    ///
    /// [`Error::Busy`] when the instance is not fit for reuse (see [`Jord::restore_instance`]),
    /// [`Error::NoMemory`] when no frames are left for the copy; nothing is kept then.
    pub fn take(
        j: &mut Jord,
        pd: PdId,
        base: u64,
        len: u64,
    ) -> Result<(Pending, Snapshot, SnapshotInfo), Error> {
        j.check_instance_pd(pd)?;
        let (keep, charged) = j.kept_layout(pd, base, len);
        // Copied before the scrub, which frees none of these pages: a failure leaves nothing
        // changed and no flush owed.
        let mut regions = Vec::with_capacity(keep.len());
        for &(b, _, perm) in &keep {
            let mut r = copy_region(j, b)?;
            r.perm = perm;
            regions.push(r);
        }
        let instance = regions
            .iter()
            .position(|r| r.base == base)
            .ok_or(Error::NotMapped)?;
        let pages = regions.iter().map(|r| r.saved.index.len()).sum();
        let mut pending = j.scrub_keeping(pd, &keep)?;
        let scrubbed = j.changes(pd);
        let root = j.root_of(pd);
        let ranges: Vec<(u64, u64)> = regions.iter().map(|r| (r.base, r.len)).collect();
        PageTables::new(root, &DIRECT).take_dirty(&ranges, j.level2_accessed(), |_, _| {});
        pending.absorb(j.flush_pd(pd, root));
        j.watch_leaves(pd, ranges);
        let info = SnapshotInfo {
            regions: regions.len(),
            pages,
            mapped: charged,
        };
        let quota = (charged, j.memory_quota(pd).1);
        j.stats.snapshots_taken += 1;
        let snap = Snapshot {
            regions,
            keep,
            scrubbed,
            instance,
            quota,
            restoring: None,
            plan: RestorePlan::new(),
        };
        Ok((pending, snap, info))
    }

    /// Begins restoring `pd`, an idle instance whose request has ended, to this snapshot: the
    /// VMAs of its layout it narrowed, freed or shrank are put back ([`Jord::reinstate_layout`]),
    /// every VMA it gained is freed and every right it was given dropped, and the pages of its
    /// snapshot VMAs whose leaves are dirty (every page that held data, when a leaf was
    /// removed since the last restore) are noted, their dirty bits cleared. The pages are put
    /// back in steps of up to `max_pages`, the first at once, the others by
    /// [`Snapshot::restore_step`]; until the last step the instance must not run. Returns the
    /// flushes owed and whether the first step was the last (then `done` says what the whole
    /// restore did: it is written in place, not moved out). The scrub is skipped when nothing
    /// it would undo changed since the last one ([`fjord_pd::PrivLib::scrubbed_since`]).
    ///
    /// [`Error::Busy`] when the instance is not reusable (its layout cannot be put back);
    /// destroy it then.
    pub fn begin_restore(
        &mut self,
        j: &mut Jord,
        pd: PdId,
        max_pages: usize,
        done: &mut RestoreReport,
    ) -> Result<(Pending, bool), Error> {
        j.check_instance_pd(pd)?;
        let (mut pending, left) = self.begin(j, pd, max_pages)?;
        let finished = match left {
            Left::None => Some(self.finish_restore(j, pd, done)),
            // It cannot fail: a restore was just begun. It puts back what the scan left, up to
            // the rest of the first step's pages.
            Left::Some(pages) => self.restore_step(j, pd, pages, done).ok().flatten(),
        };
        let last = finished.is_some();
        if let Some(p) = finished {
            pending.absorb(p);
        }
        Ok((pending, last))
    }

    /// [`Snapshot::begin_restore`] but for the end of its first step: the scrub, then the scan
    /// of the dirty leaves, which puts back up to `max_pages` of the pages it finds as it finds
    /// them (when no VMA was remade and no leaf lost: most restores) and notes the others.
    /// Returns the flushes owed and what is left.
    fn begin(
        &mut self,
        j: &mut Jord,
        pd: PdId,
        max_pages: usize,
    ) -> Result<(Pending, Left), Error> {
        let freed = j.stats.vmas_scrubbed;
        // Leaves removed since the last restore; those the scrub removes itself are its own
        // (a right narrowed back is reported by the scrub).
        let lost = j.take_leaves_lost(pd);
        let scrubbed = self.scrub(j, pd);
        j.take_leaves_lost(pd);
        let (remade, lost_in_scrub, pending) = scrubbed?;
        let full = lost || lost_in_scrub;
        let root = j.root_of(pd);
        let mut pt = PageTables::new(root, &DIRECT);
        let mut scan = DirtyScan::new(PageTables::new(root, &DIRECT), j.level2_accessed());
        // Remade VMAs and lost leaves are rare: most restores take the dirty bits as they are
        // and put pages back as they find them.
        let plain = remade.is_empty() && !full;
        let mut budget = if plain { max_pages } else { 0 };
        for Region {
            base,
            slot,
            saved,
            dirty,
            watch,
            watched,
            ..
        } in self.regions.iter_mut()
        {
            dirty.clear();
            let Some(backing) = slot.and_then(|slot| j.backing_at(slot)) else {
                continue;
            };
            let stamp = backing.stamp();
            // A snapshot covers VMAs backed by one run of frames (no μprocess area is one).
            let (initialised, Some(frames)) = backing.initialised_and_frames() else {
                continue;
            };
            let mut found = |page| {
                if budget == 0 {
                    dirty.push(page);
                } else {
                    budget -= 1;
                    saved.put_back(frames, page);
                }
            };
            if watched.0 != stamp {
                let few = initialised.iter().map(|w| w.count_ones()).sum::<u32>() <= WATCH_MAX;
                if few {
                    watch.watch(&pt, *base, initialised);
                }
                *watched = (stamp, few);
            }
            if watched.1 {
                watch.take_dirty(&mut pt, *base, &mut found);
            } else {
                scan.vma(*base, initialised, &mut found);
            }
        }
        if !plain {
            for (i, r) in self.regions.iter_mut().enumerate() {
                if remade.contains(&i) {
                    // New frames: every page the snapshot holds is copied back.
                    r.dirty.clear();
                    r.dirty.extend_from_slice(r.saved.index.pages());
                    continue;
                }
                if full && let Some(backing) = r.slot.and_then(|slot| j.backing_at(slot)) {
                    r.dirty.clear();
                    r.dirty
                        .extend(backing.initialised_indices().into_iter().map(|i| i as u32));
                }
            }
        }
        debug_assert!(self.regions.iter().all(|r| r.dirty.is_sorted()));
        let put_back = if plain { max_pages - budget } else { 0 };
        self.restoring = Some(RestoreReport {
            full,
            vmas_freed: j.stats.vmas_scrubbed - freed,
            pages: put_back as u64,
            ..RestoreReport::default()
        });
        // The scan put back every page it found unless it ran out of pages to put back.
        let left = if plain && budget > 0 {
            Left::None
        } else {
            Left::Some(budget)
        };
        Ok((pending, left))
    }

    /// Puts back up to `max_pages` of the pages [`Snapshot::begin_restore`] noted for `pd`
    /// (copied from the snapshot, or zeroed where the snapshot had nothing). After the last,
    /// resets its `mmap` allowance, writes what the whole restore did into `done` and returns
    /// the flushes owed; `None` while pages are left. Translations stay installed.
    ///
    /// [`Error::InvalidArgs`] when no restore is under way.
    pub fn restore_step(
        &mut self,
        j: &mut Jord,
        pd: PdId,
        max_pages: usize,
        done: &mut RestoreReport,
    ) -> Result<Option<Pending>, Error> {
        let Snapshot {
            regions,
            plan,
            restoring,
            ..
        } = self;
        let Some(report) = restoring.as_mut() else {
            return Err(Error::InvalidArgs);
        };
        let mut budget = max_pages;
        for r in regions.iter_mut() {
            let n = r.dirty.len().min(budget);
            if n == 0 {
                continue;
            }
            budget -= n;
            let Some(backing) = r.slot.and_then(|slot| j.backing_at(slot)) else {
                r.dirty.clear();
                continue;
            };
            // From the end: what is left stays in place.
            let rest = r.dirty.len() - n;
            plan.build(&r.saved.index, &r.dirty[rest..]);
            for a in plan.actions() {
                match *a {
                    Action::Copy { page, slot, count } => {
                        if let Some(run) = backing.frames_mut() {
                            run.copy_from(
                                page as usize,
                                &r.saved.frames,
                                slot as usize,
                                count as usize,
                            );
                        }
                        // A remade VMA's pages are new: now they hold data.
                        (page..page + count).for_each(|p| {
                            backing.set_initialised(p as usize);
                        });
                    }
                    Action::Zero { page, count } => {
                        if let Some(run) = backing.frames_mut() {
                            run.zero(page as usize, count as usize)
                        }
                    }
                }
            }
            report.pages += plan.pages() as u64;
            r.dirty.truncate(rest);
        }
        if budget == 0 && regions.iter().any(|r| !r.dirty.is_empty()) {
            return Ok(None);
        }
        Ok(Some(self.finish_restore(j, pd, done)))
    }

    /// Ends the restore of `pd` under way, whose pages are all back: resets its `mmap`
    /// allowance, writes what the whole restore did into `done` and returns the flushes owed.
    fn finish_restore(&mut self, j: &mut Jord, pd: PdId, done: &mut RestoreReport) -> Pending {
        if let Some(report) = self.restoring.take() {
            *done = report;
        }
        let root = j.root_of(pd);
        let pending = j.flush_pd(pd, root);
        j.set_memory_quota(pd, self.quota);
        j.stats.instances_restored += 1;
        j.stats.pages_restored += done.pages;
        pending
    }

    /// Scrubs `pd` to this snapshot's layout, putting back what a scrub refuses
    /// ([`Jord::reinstate_layout`]); returns which VMAs were remade, whether leaves of the
    /// others were removed, and the flushes owed. Skipped (only rights held back for `pd` are
    /// settled) when PrivLib tells that nothing the scrub would undo changed since the last one
    /// ([`fjord_pd::PrivLib::scrubbed_since`]): `pd` owns only its layout, unchanged, created
    /// no PD and holds no other right.
    fn scrub(&mut self, j: &mut Jord, pd: PdId) -> Result<(Vec<usize>, bool, Pending), Error> {
        if j.unchanged_since_scrub(pd, self.scrubbed, self.keep.len()) {
            return Ok((Vec::new(), false, Pending::default()));
        }
        // A layout the scrub refuses (nothing changed then) is put back, and scrubbed again.
        let r = match j.scrub_keeping(pd, &self.keep) {
            Err(Error::Busy | Error::NotMapped) => {
                j.reinstate_layout(pd, &self.keep)
                    .and_then(|(remade, lost, mut p)| {
                        p.absorb(j.scrub_keeping(pd, &self.keep)?);
                        Ok((remade, lost, p))
                    })
            }
            r => r.map(|p| (Vec::new(), false, p)),
        };
        self.scrubbed = if r.is_ok() { j.changes(pd) } else { None };
        r
    }

    /// The physical address of the first frame of this snapshot's copy of its instance VMA
    /// (for tests that check no PD can reach it).
    pub fn first_frame(&self) -> Option<u64> {
        let saved = &self.regions[self.instance].saved;
        (!saved.index.is_empty()).then(|| saved.frames.phys())
    }
}

/// A copy of the pages of the VMA at `base` (every page of its backing) that hold data.
fn copy_region(j: &mut Jord, base: u64) -> Result<Region, Error> {
    let slot = j.backed_slot(base).ok_or(Error::NotMapped)?;
    let backing = j.backing_at(slot).ok_or(Error::NotMapped)?;
    let run = backing.frames().ok_or(Error::InvalidArgs)?;
    let len = backing.pages() as u64 * PAGE_SIZE;
    let held: Vec<u32> = backing
        .initialised_indices()
        .into_iter()
        .map(|i| i as u32)
        .collect();
    let index = SnapshotIndex::new(held);
    let mut frames = if index.is_empty() {
        frames::FrameRun::EMPTY
    } else {
        frames::FrameRun::alloc(index.len()).map_err(|_| Error::NoMemory)?
    };
    for (slot, &page) in index.pages().iter().enumerate() {
        frames.copy_from(slot, run, page as usize, 1);
    }
    Ok(Region {
        base,
        len,
        slot: Some(slot),
        perm: Perm::RW,
        saved: PageCopies { index, frames },
        dirty: Vec::new(),
        watch: LeafWatch::new(),
        watched: (0, false),
    })
}

impl InitLayout {
    /// Records `pd`'s layout after its `init` for Groundhog mode `none` (no snapshot): the
    /// instance VMA `[base, base + len)`, the creation stack and the VMAs `init` mapped that
    /// [`InitLayout::scrub`] keeps from now on; any other VMA `pd` owns is freed. Returns the
    /// flushes owed and the layout ([`InitLayout::mapped`]: the bytes of the VMAs `init` mapped
    /// that it keeps). Errors as for [`Snapshot::begin_restore`].
    pub fn keep(
        j: &mut Jord,
        pd: PdId,
        base: u64,
        len: u64,
    ) -> Result<(Pending, InitLayout), Error> {
        j.check_instance_pd(pd)?;
        let (keep, charged) = j.kept_layout(pd, base, len);
        let pending = j.scrub_keeping(pd, &keep)?;
        let layout = InitLayout {
            keep,
            charged,
            scrubbed: j.changes(pd),
        };
        let (_, limit) = j.memory_quota(pd);
        j.set_memory_quota(pd, (charged, limit));
        Ok((pending, layout))
    }

    /// The bytes of the VMAs `init` mapped that the instance keeps.
    pub fn mapped(&self) -> u64 {
        self.charged
    }

    /// Frees every VMA `pd` owns beyond this layout and drops every right it was given,
    /// leaving its memory as it is (Groundhog mode `none`: warm reuse with no restore). Skipped,
    /// as in [`Snapshot::begin_restore`], when nothing the scrub would undo changed since the
    /// last one. Errors as for [`Snapshot::begin_restore`].
    pub fn scrub(&mut self, j: &mut Jord, pd: PdId) -> Result<Pending, Error> {
        j.check_instance_pd(pd)?;
        let p = if j.unchanged_since_scrub(pd, self.scrubbed, self.keep.len()) {
            Ok(Pending::default())
        } else {
            let p = j.scrub_keeping(pd, &self.keep);
            self.scrubbed = if p.is_ok() { j.changes(pd) } else { None };
            p
        };
        let (_, limit) = j.memory_quota(pd);
        j.set_memory_quota(pd, (self.charged, limit));
        p
    }
}

/// [`InitLayout::scrub`] for an instance without a recorded layout: it keeps its creation
/// stack and the instance VMA `[base, base + len)`, and its `mmap` allowance is all unused.
pub fn scrub_fresh(j: &mut Jord, pd: PdId, base: u64, len: u64) -> Result<Pending, Error> {
    j.check_instance_pd(pd)?;
    let keep = j.fresh_layout(pd, base, len);
    let p = j.scrub_keeping(pd, &keep);
    let (_, limit) = j.memory_quota(pd);
    j.set_memory_quota(pd, (0, limit));
    p
}
