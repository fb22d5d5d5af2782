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
//! snapshot region goes, the snapshot notes it and the next restore copies every page back.

use super::*;
use fjord_groundhog::{Action, RestorePlan, RestoreReport, SnapshotIndex};
use fjord_kernel::dirty_scan::{DirtyScan, LeafWatch};
use fjord_kernel::paging::Level2Accessed;

/// One VMA of a snapshot and copies of those of its pages that held data.
struct Region {
    base: u64,
    len: u64,
    /// Its slot in the VMA table (and in the backing table): fixed by `base`, so looked up
    /// once.
    slot: Option<usize>,
    /// The instance's right on it.
    perm: Perm,
    saved: Saved,
    /// The pages a restore under way has still to put back (ascending; kept allocated between
    /// restores).
    dirty: Vec<u32>,
    /// Where the leaves of its initialised pages are, when they are few ([`WATCH_MAX`]).
    watch: LeafWatch,
    /// The stamp of its backing's initialised pages ([`Backing::stamp`](super::Backing)) that
    /// `watch` follows and whether they were few enough to watch; 0 before the first look.
    watched: (u64, bool),
}

/// Most initialised pages of a region whose dirty bits a restore reads through a
/// [`LeafWatch`] rather than a [`DirtyScan`]: below it, reading every leaf costs less than the
/// walk and the level-2 entries a scan reads first (a function's stack and small heap).
const WATCH_MAX: u32 = 64;

/// The copies of a region's pages that held data when the snapshot was taken.
struct Saved {
    index: SnapshotIndex,
    /// Slot `i` holds page `index.pages()[i]`.
    frames: frames::FrameRun,
}

impl Saved {
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

impl Drop for Saved {
    fn drop(&mut self) {
        core::mem::replace(&mut self.frames, frames::FrameRun::EMPTY).free();
    }
}

/// What the beginning of a restore left of its pages ([`Jord::begin_restore`]).
enum Left {
    /// None: every page the request dirtied is back.
    None,
    /// Some pages, and how many the first step may still put back.
    Some(usize),
}

/// An instance's state after its `init`, held by the kernel for restores.
pub(super) struct Snapshot {
    /// The creation stack, the instance VMA and the VMAs `init` mapped, by address.
    regions: Vec<Region>,
    /// Which of them is the instance VMA.
    instance: usize,
    /// The `mmap` allowance (bytes used, limit).
    quota: (u64, u64),
    /// A leaf of a region was removed since the last restore: its dirty bit went with it.
    leaves_lost: bool,
    /// What `scrub_with` keeps of the instance: each region's base, length and right.
    keep: Vec<(u64, u64, Perm)>,
    /// PrivLib's change counter of the instance ([`fjord_pd::PrivLib::changes`]) after its
    /// last scrub with `keep`: while it stands, a scrub would change nothing.
    scrubbed: Option<u64>,
    /// What the restore under way ([`Jord::begin_restore`]) did so far, if one is.
    restoring: Option<RestoreReport>,
    /// Scratch space of [`Jord::restore_step`] (kept allocated between restores).
    plan: RestorePlan,
}

impl Snapshot {
    fn overlaps(&self, base: u64, len: u64) -> bool {
        let end = base.saturating_add(len);
        self.regions
            .iter()
            .any(|r| base < r.base + r.len && r.base < end)
    }
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

/// What an instance keeps between requests: the VMAs (base, length, right) and the bytes of
/// its `mmap` allowance those that `init` mapped use.
pub(super) struct InitLayout {
    keep: Vec<(u64, u64, Perm)>,
    charged: u64,
    /// PrivLib's change counter of the instance after its last scrub with `keep` (as
    /// [`Snapshot`]'s).
    scrubbed: Option<u64>,
}

/// One slot per PD, none taken.
pub(super) fn no_layouts() -> Vec<Option<InitLayout>> {
    (0..MAX_LIVE_PDS).map(|_| None).collect()
}

impl Jord {
    /// Snapshots `pd`, a function instance that just ran its `init` (or none), whose instance
    /// VMA is `[base, base + len)`: every VMA it owns beyond its creation stack and that
    /// instance VMA is freed and every right it was given dropped (as a restore would), then
    /// the two VMAs' pages that hold data are copied into kernel frames and their leaves'
    /// dirty bits cleared. Replaces an older snapshot of `pd`.
    ///
    /// [`Error::Busy`] when the instance is not fit for reuse (see [`Jord::restore_instance`]),
    /// [`Error::NoMemory`] when no frames are left for the copy; nothing is kept then.
    pub fn take_snapshot(
        &mut self,
        pd: PdId,
        base: u64,
        len: u64,
    ) -> Result<(Pending, SnapshotInfo), Error> {
        self.check_instance_pd(pd)?;
        self.drop_snapshot(pd);
        let InitLayout { keep, charged, .. } = self.init_layout(pd, base, len);
        // Copied before the scrub, which frees none of these pages: a failure leaves nothing
        // changed and no flush owed.
        let mut regions = Vec::with_capacity(keep.len());
        for &(b, _, perm) in &keep {
            let mut r = self.copy_region(b)?;
            r.perm = perm;
            regions.push(r);
        }
        let instance = regions
            .iter()
            .position(|r| r.base == base)
            .ok_or(Error::NotMapped)?;
        let pages = regions.iter().map(|r| r.saved.index.len()).sum();
        let mut pending = self.scrub_keeping(pd, &keep)?;
        let scrubbed = self.privlib.changes(pd);
        let root = self.root_of(pd);
        let ranges: Vec<(u64, u64)> = regions.iter().map(|r| (r.base, r.len)).collect();
        PageTables::new(root, &DIRECT).take_dirty(&ranges, self.level2_accessed(), |_, _| {});
        pending.absorb(self.flush_pd(pd, root));
        let info = SnapshotInfo {
            regions: regions.len(),
            pages,
            mapped: charged,
        };
        let quota = (charged, self.quotas[pd.index()].1);
        self.put_snapshot(
            pd,
            Box::new(Snapshot {
                regions,
                keep,
                scrubbed,
                instance,
                quota,
                leaves_lost: false,
                restoring: None,
                plan: RestorePlan::new(),
            }),
        );
        self.stats.snapshots_taken += 1;
        Ok((pending, info))
    }

    /// Begins restoring `pd`, an idle instance whose request has ended, to its snapshot: the
    /// VMAs of its layout it narrowed, freed or shrank are put back ([`Jord::reinstate_layout`]),
    /// every VMA it gained is freed and every right it was given dropped, and the pages of its
    /// snapshot VMAs whose leaves are dirty (every page that held data, when a leaf was
    /// removed since the last restore) are noted, their dirty bits cleared. The pages are put
    /// back in steps of up to `max_pages`, the first at once, the others by
    /// [`Jord::restore_step`]; until the last step the instance must not run. Returns the
    /// flushes owed and whether the first step was the last (then `done` says what the whole
    /// restore did: it is written in place, not moved out). The scrub is skipped when nothing
    /// it would undo changed since the last one ([`fjord_pd::PrivLib::scrubbed_since`]).
    ///
    /// [`Error::InvalidArgs`] when `pd` has no snapshot; [`Error::Busy`] when the instance is
    /// not reusable (its layout cannot be put back); destroy it then.
    pub fn begin_restore(
        &mut self,
        pd: PdId,
        max_pages: usize,
        done: &mut RestoreReport,
    ) -> Result<(Pending, bool), Error> {
        self.check_instance_pd(pd)?;
        self.with_snapshot_out(pd, |j, snap| {
            let (mut pending, left) = j.begin(pd, snap, max_pages)?;
            let finished = match left {
                Left::None => Some(j.finish_restore(pd, snap, done)),
                // It cannot fail: a restore was just begun. It puts back what the scan left,
                // up to the rest of the first step's pages.
                Left::Some(pages) => j.step(pd, snap, pages, done).ok().flatten(),
            };
            let last = finished.is_some();
            if let Some(p) = finished {
                pending.absorb(p);
            }
            Ok((pending, last))
        })
    }

    /// [`Jord::begin_restore`] on `snap`, `pd`'s snapshot, out of the table, but for the end
    /// of its first step: the scrub, then the scan of the dirty leaves, which puts back up to
    /// `max_pages` of the pages it finds as it finds them (when no VMA was remade and no leaf
    /// lost: most restores) and notes the others. Returns the flushes owed and what is left.
    fn begin(
        &mut self,
        pd: PdId,
        snap: &mut Snapshot,
        max_pages: usize,
    ) -> Result<(Pending, Left), Error> {
        let freed = self.stats.vmas_scrubbed;
        let (remade, pending) = self.scrub_snapshot(pd, snap)?;
        let full = snap.leaves_lost;
        let root = self.root_of(pd);
        let mut pt = PageTables::new(root, &DIRECT);
        let mut scan = DirtyScan::new(PageTables::new(root, &DIRECT), self.level2_accessed());
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
        } in snap.regions.iter_mut()
        {
            dirty.clear();
            let Some(backing) = slot.and_then(|slot| self.backing.get_mut(slot)) else {
                continue;
            };
            let stamp = backing.stamp();
            let (initialised, frames) = backing.initialised_and_frames();
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
            for (i, r) in snap.regions.iter_mut().enumerate() {
                if remade.contains(&i) {
                    // New frames: every page the snapshot holds is copied back.
                    r.dirty.clear();
                    r.dirty.extend_from_slice(r.saved.index.pages());
                    continue;
                }
                if full && let Some(backing) = r.slot.map(|slot| &self.backing[slot]) {
                    r.dirty.clear();
                    r.dirty
                        .extend(backing.initialised_indices().into_iter().map(|i| i as u32));
                }
            }
        }
        debug_assert!(snap.regions.iter().all(|r| r.dirty.is_sorted()));
        snap.leaves_lost = false;
        let put_back = if plain { max_pages - budget } else { 0 };
        snap.restoring = Some(RestoreReport {
            full,
            vmas_freed: self.stats.vmas_scrubbed - freed,
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

    /// Puts back up to `max_pages` of the pages [`Jord::begin_restore`] noted for `pd` (copied
    /// from the snapshot, or zeroed where the snapshot had nothing). After the last, resets its
    /// `mmap` allowance, writes what the whole restore did into `done` and returns the flushes
    /// owed; `None` while pages are left. Translations stay installed.
    ///
    /// [`Error::InvalidArgs`] when no restore of `pd` is under way.
    pub fn restore_step(
        &mut self,
        pd: PdId,
        max_pages: usize,
        done: &mut RestoreReport,
    ) -> Result<Option<Pending>, Error> {
        self.with_snapshot_out(pd, |j, snap| j.step(pd, snap, max_pages, done))
    }

    /// Runs `f` on `pd`'s snapshot taken out of the table (so that `f` may use the rest of
    /// Jord), and puts it back. [`Error::InvalidArgs`] when `pd` has none.
    fn with_snapshot_out<R>(
        &mut self,
        pd: PdId,
        f: impl FnOnce(&mut Self, &mut Snapshot) -> Result<R, Error>,
    ) -> Result<R, Error> {
        let slot = self
            .snapshots
            .get_mut(pd.index())
            .ok_or(Error::InvalidArgs)?;
        let mut snap = slot.take().ok_or(Error::InvalidArgs)?;
        let r = f(self, &mut snap);
        self.snapshots[pd.index()] = Some(snap);
        r
    }

    /// [`Jord::restore_step`] on `snap`, `pd`'s snapshot, out of the table.
    fn step(
        &mut self,
        pd: PdId,
        snap: &mut Snapshot,
        max_pages: usize,
        done: &mut RestoreReport,
    ) -> Result<Option<Pending>, Error> {
        let Snapshot {
            regions,
            plan,
            restoring,
            ..
        } = snap;
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
            let Some(slot) = r.slot else {
                r.dirty.clear();
                continue;
            };
            let backing = &mut self.backing[slot];
            // From the end: what is left stays in place.
            let rest = r.dirty.len() - n;
            plan.build(&r.saved.index, &r.dirty[rest..]);
            for a in plan.actions() {
                match *a {
                    Action::Copy { page, slot, count } => {
                        backing.frames.copy_from(
                            page as usize,
                            &r.saved.frames,
                            slot as usize,
                            count as usize,
                        );
                        // A remade VMA's pages are new: now they hold data.
                        (page..page + count).for_each(|p| backing.set_initialised(p as usize));
                    }
                    Action::Zero { page, count } => {
                        backing.frames.zero(page as usize, count as usize)
                    }
                }
            }
            report.pages += plan.pages() as u64;
            r.dirty.truncate(rest);
        }
        if budget == 0 && regions.iter().any(|r| !r.dirty.is_empty()) {
            return Ok(None);
        }
        Ok(Some(self.finish_restore(pd, snap, done)))
    }

    /// Ends the restore of `pd` under way (`snap`, its snapshot, out of the table), whose
    /// pages are all back: resets its `mmap` allowance, writes what the whole restore did into
    /// `done` and returns the flushes owed.
    fn finish_restore(
        &mut self,
        pd: PdId,
        snap: &mut Snapshot,
        done: &mut RestoreReport,
    ) -> Pending {
        if let Some(report) = snap.restoring.take() {
            *done = report;
        }
        let pending = self.flush_pd(pd, self.root_of(pd));
        self.quotas[pd.index()] = snap.quota;
        self.stats.instances_restored += 1;
        self.stats.pages_restored += done.pages;
        pending
    }

    /// Scrubs `pd` to its snapshot's layout, putting back what a scrub refuses
    /// ([`Jord::reinstate_layout`]; returns which VMAs were remade and the flushes owed). Skipped
    /// (only rights held back for `pd` are settled) when PrivLib tells that nothing the scrub
    /// would undo changed since the last one ([`fjord_pd::PrivLib::scrubbed_since`]): `pd`
    /// owns only its layout, unchanged, created no PD and holds no other right.
    fn scrub_snapshot(
        &mut self,
        pd: PdId,
        snap: &mut Snapshot,
    ) -> Result<(Vec<usize>, Pending), Error> {
        if self.unchanged_since_scrub(pd, snap.scrubbed, snap.keep.len()) {
            return Ok((Vec::new(), Pending::default()));
        }
        // A layout the scrub refuses (nothing changed then) is put back, and scrubbed again.
        let r = match self.scrub_keeping(pd, &snap.keep) {
            Err(Error::Busy | Error::NotMapped) => {
                self.reinstate_layout(pd, &snap.keep)
                    .and_then(|(remade, lost, mut p)| {
                        snap.leaves_lost |= lost;
                        p.absorb(self.scrub_keeping(pd, &snap.keep)?);
                        Ok((remade, p))
                    })
            }
            r => r.map(|p| (Vec::new(), p)),
        };
        snap.scrubbed = if r.is_ok() {
            self.privlib.changes(pd)
        } else {
            None
        };
        r
    }

    /// Whether a scrub of `pd` keeping `kept` VMAs would change nothing, PrivLib's change
    /// counter `scrubbed` after the last one telling ([`fjord_pd::PrivLib::scrubbed_since`]):
    /// then the scrub is skipped and only rights held back for `pd` are settled.
    fn unchanged_since_scrub(&mut self, pd: PdId, scrubbed: Option<u64>, kept: usize) -> bool {
        let unchanged =
            scrubbed.is_some_and(|c| self.privlib.scrubbed_since(PdId::KERNEL, pd, c, kept));
        if unchanged {
            if self.held_back.holds(pd) {
                self.settle_pd(pd);
            }
            self.stats.scrubs_skipped += 1;
        }
        unchanged
    }

    /// Puts back the VMAs of `pd`'s layout `keep` that `pd` changed: narrowed or widened,
    /// freed or shrank ([`PrivLib::reinstate`]); a remade one gets new frames. Returns which
    /// (`i` for `keep[i]`) were remade, so that all their snapshot pages are copied back,
    /// whether leaves of the others were removed (a right narrowed back: the dirty bits went
    /// with them, and while its snapshot is out of the table no one notes it), and the flushes
    /// owed. [`Error::Busy`] when one cannot be put back.
    fn reinstate_layout(
        &mut self,
        pd: PdId,
        keep: &[(u64, u64, Perm)],
    ) -> Result<(Vec<usize>, bool, Pending), Error> {
        let mut remade = Vec::new();
        let mut leaves_lost = false;
        let mut pending = Pending::default();
        for (i, &kept) in keep.iter().enumerate() {
            let (what, s) = self.privlib.reinstate(pd, kept)?;
            leaves_lost |= what == fjord_pd::Reinstated::RightRestored && !s.is_empty();
            pending.absorb(self.apply(&s));
            if what == fjord_pd::Reinstated::Remade {
                // A shrunk VMA's frames (a freed one's went with it).
                self.free_backing(kept.0);
                self.back_vma(kept.0, kept.1)?;
                self.stats.vmas_remade += 1;
                remade.push(i);
            }
        }
        Ok((remade, leaves_lost, pending))
    }

    /// What dirty-bit scans do with the level-2 ACCESSED bits of a PD's table: they take them
    /// when every PD has its own, and keep them when all share one (without isolation, where
    /// one instance's scan must not hide another's writes under the same entry).
    fn level2_accessed(&self) -> Level2Accessed {
        if self.shared_root == 0 {
            Level2Accessed::Take
        } else {
            Level2Accessed::Keep
        }
    }

    /// A copy of the pages of the VMA at `base` (every page of its backing) that hold data.
    fn copy_region(&self, base: u64) -> Result<Region, Error> {
        let slot = self.slot_of(base);
        let backing = slot
            .and_then(|slot| self.backing.get(slot))
            .filter(|b| b.pages != 0 && b.base == base)
            .ok_or(Error::NotMapped)?;
        let len = backing.pages as u64 * PAGE_SIZE;
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
            frames.copy_from(slot, &backing.frames, page as usize, 1);
        }
        Ok(Region {
            base,
            len,
            slot,
            perm: Perm::RW,
            saved: Saved { index, frames },
            dirty: Vec::new(),
            watch: LeafWatch::new(),
            watched: (0, false),
        })
    }

    /// Whether some PD has a snapshot.
    #[inline]
    pub(super) fn any_snapshot(&self) -> bool {
        self.live_snapshots != 0
    }

    /// Gives `pd` (below [`MAX_LIVE_PDS`]) the snapshot `snap`, dropping any it had.
    fn put_snapshot(&mut self, pd: PdId, snap: Box<Snapshot>) {
        self.drop_snapshot(pd);
        self.snapshots[pd.index()] = Some(snap);
        self.live_snapshots += 1;
    }

    /// Takes `pd`'s snapshot (below [`MAX_LIVE_PDS`]) out of the table.
    fn take_snapshot_of(&mut self, pd: PdId) -> Option<Box<Snapshot>> {
        let snap = self.snapshots[pd.index()].take();
        if snap.is_some() {
            self.live_snapshots -= 1;
        }
        snap
    }

    /// Frees `pd`'s snapshot (below [`MAX_LIVE_PDS`]), if it has one.
    #[inline]
    pub(super) fn drop_snapshot(&mut self, pd: PdId) {
        if self.live_snapshots != 0 {
            drop(self.take_snapshot_of(pd));
        }
    }

    /// Whether `pd` has a snapshot.
    pub fn has_snapshot(&self, pd: PdId) -> bool {
        self.snapshots.get(pd.index()).is_some_and(Option::is_some)
    }

    /// The physical address of the first frame of `pd`'s snapshot of its instance VMA (for
    /// tests that check no PD can reach it).
    pub fn snapshot_frame(&self, pd: PdId) -> Option<u64> {
        let s = self.snapshots.get(pd.index())?.as_ref()?;
        let saved = &s.regions[s.instance].saved;
        (!saved.index.is_empty()).then(|| saved.frames.phys())
    }

    /// Notes that leaves of `pd` in `[base, base + len)` were removed: if they belong to its
    /// snapshot's VMAs, their dirty bits are lost and the next restore copies every page.
    #[inline]
    pub(super) fn note_leaves_removed(&mut self, pd: PdId, base: u64, len: u64) {
        if self.live_snapshots == 0 {
            return;
        }
        if let Some(Some(s)) = self.snapshots.get_mut(pd.index())
            && s.overlaps(base, len)
        {
            s.leaves_lost = true;
        }
    }

    /// The layout `pd` keeps between requests after its `init`, the instance VMA being
    /// `[base, base + len)`: the creation stack, the instance VMA and every VMA that `pd` owns
    /// and alone holds, which `init` mapped, by address; and the bytes of its `mmap` allowance
    /// those use.
    fn init_layout(&self, pd: PdId, base: u64, len: u64) -> InitLayout {
        let (stack, stack_len) = self.stacks[pd.index()];
        let mut keep = alloc::vec![(stack, stack_len, Perm::RW), (base, len, Perm::RW)];
        let mut own = self.privlib.owned_alone(pd);
        own.sort_unstable_by_key(|v| v.0);
        let mut charged = 0u64;
        for v in own {
            if v.0 != stack && v.0 != base {
                keep.push(v);
                charged += v.1.next_multiple_of(PAGE_SIZE);
            }
        }
        keep.sort_unstable_by_key(|v| v.0);
        InitLayout {
            keep,
            charged: charged.min(self.quotas[pd.index()].0),
            scrubbed: None,
        }
    }

    /// Records `pd`'s layout after its `init` for Groundhog mode `none` (no snapshot): the
    /// instance VMA `[base, base + len)`, the creation stack and the VMAs `init` mapped that
    /// [`Jord::scrub_instance`] keeps from now on; any other VMA `pd` owns is freed. Returns the
    /// flushes owed and the bytes of the VMAs `init` mapped that it keeps. Errors as for
    /// [`Jord::begin_restore`].
    pub fn keep_init_layout(
        &mut self,
        pd: PdId,
        base: u64,
        len: u64,
    ) -> Result<(Pending, u64), Error> {
        self.check_instance_pd(pd)?;
        let mut layout = self.init_layout(pd, base, len);
        let pending = self.scrub_keeping(pd, &layout.keep)?;
        layout.scrubbed = self.privlib.changes(pd);
        self.quotas[pd.index()].0 = layout.charged;
        let mapped = layout.charged;
        self.layouts[pd.index()] = Some(layout);
        Ok((pending, mapped))
    }

    /// Frees every VMA `pd` owns beyond its layout after `init` ([`Jord::keep_init_layout`];
    /// without one, its creation stack and the instance VMA `[base, base + len)`) and drops
    /// every right it was given, leaving its memory as it is (Groundhog mode `none`: warm reuse
    /// with no restore). Skipped, as in [`Jord::begin_restore`], when nothing the scrub would
    /// undo changed since the last one. Errors as for [`Jord::begin_restore`].
    pub fn scrub_instance(&mut self, pd: PdId, base: u64, len: u64) -> Result<Pending, Error> {
        self.check_instance_pd(pd)?;
        let Some(layout) = self.layouts[pd.index()].take() else {
            let (stack, stack_len) = self.stacks[pd.index()];
            let p = self.scrub_keeping(pd, &[(stack, stack_len, Perm::RW), (base, len, Perm::RW)]);
            self.quotas[pd.index()].0 = 0;
            return p;
        };
        let mut layout = layout;
        let p = if self.unchanged_since_scrub(pd, layout.scrubbed, layout.keep.len()) {
            Ok(Pending::default())
        } else {
            let p = self.scrub_keeping(pd, &layout.keep);
            layout.scrubbed = if p.is_ok() {
                self.privlib.changes(pd)
            } else {
                None
            };
            p
        };
        self.quotas[pd.index()].0 = layout.charged;
        self.layouts[pd.index()] = Some(layout);
        p
    }

    /// Frees every VMA `pd` owns beyond those of `keep` (base, length, its right) and drops
    /// every right it was given.
    fn scrub_keeping(&mut self, pd: PdId, keep: &[(u64, u64, Perm)]) -> Result<Pending, Error> {
        if self.held_back.holds(pd) {
            self.settle_pd(pd);
        }
        self.scratch.clear();
        let scratch = &mut self.scratch;
        let mut freed = 0u64;
        let scrubbed = self
            .privlib
            .scrub_with(PdId::KERNEL, pd, keep, |id, _, owned| {
                if owned {
                    scratch.push(id.base());
                    freed += 1;
                }
            });
        // Read in place: moving the shootdown out of the result copies it (a few hundred bytes).
        let s = match &scrubbed {
            Ok(s) => s,
            Err(e) => return Err(*e),
        };
        let pending = self.apply(s);
        self.free_scratch_backings();
        self.stats.vmas_scrubbed += freed;
        Ok(pending)
    }

    /// The flushes after `pd`'s leaves (in the table at `root`) changed: this CPU if it has
    /// that table loaded, and every CPU that may cache `pd`'s translations.
    fn flush_pd(&mut self, pd: PdId, root: u64) -> Pending {
        let me = percpu::cpu_index() as u32;
        Pending {
            cpus: self.sharers.take_targets(pd, me),
            reload_local: cpu::read_cr3() & !0xfff == root,
        }
    }
}

/// One slot per PD, none taken.
pub(super) fn empty_table() -> Vec<Option<Box<Snapshot>>> {
    (0..MAX_LIVE_PDS).map(|_| None).collect()
}
