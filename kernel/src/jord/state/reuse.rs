//! What Jord offers for reusing a function instance between requests (Jord §3.4): its fresh
//! restore ([`Jord::restore_instance`]), and the narrow operations Groundhog's snapshots and
//! layouts are built on (`crate::groundhog`): the layout an instance keeps, scrubbing a PD to
//! it and putting it back, the frames behind a VMA, and a watch on the leaves of a PD's
//! snapshot ranges whose removal loses their dirty bits.

use super::*;

/// What a fresh instance of a function looks like: the instance VMA the executor mapped and
/// the heap header it wrote.
#[derive(Clone, Copy, Debug)]
pub struct InstanceLayout<'a> {
    /// Base of the instance VMA (stack, then heap).
    pub base: u64,
    /// Its length in bytes.
    pub len: u64,
    /// Byte offset of the heap header in the VMA.
    pub header_offset: u64,
    /// The header's words.
    pub header: &'a [u64],
    /// The PD's `mmap` allowance.
    pub memory_limit: u64,
}

/// A VMA an instance keeps between requests: its base, length and the instance's right on it.
pub type KeptVma = (u64, u64, Perm);

/// The leaves of one PD whose removal an owner wants to know of (see [`Jord::watch_leaves`]).
pub(super) struct LeafLossWatch {
    ranges: Vec<(u64, u64)>,
    lost: bool,
}

impl Jord {
    /// [`Error::InvalidArgs`] unless `pd` may be a function instance: not the kernel, and a
    /// PD id Jord manages.
    pub fn check_instance_pd(&self, pd: PdId) -> Result<(), Error> {
        if pd == PdId::KERNEL || pd.index() >= self.stacks.len() {
            return Err(Error::InvalidArgs);
        }
        Ok(())
    }

    /// Restores `pd`, an idle function instance whose request has ended, to the state the
    /// executor gave it before its first request: PrivLib frees every VMA it owns beyond its
    /// stack and its instance VMA and drops every right it was given (see
    /// [`fjord_pd::PrivLib::scrub_with`]), the pages of both VMAs that were touched are zeroed
    /// again, the heap header is written back and the `mmap` allowance is reset. Translations
    /// of the kept pages stay installed, so the next request takes no VLB miss on them.
    ///
    /// [`Error::Busy`] (nothing changed) when the instance is not reusable: it is running or
    /// suspended, created PDs that are still alive, or gave its own memory away; destroy it
    /// then ([`Jord::cput`] takes the PDs it created with it).
    pub fn restore_instance(
        &mut self,
        pd: PdId,
        layout: &InstanceLayout<'_>,
    ) -> Result<Pending, Error> {
        self.check_instance_pd(pd)?;
        let keep = self.fresh_layout(pd, layout.base, layout.len);
        // A fresh restore's freed VMAs are not counted as a scrub's.
        let (pending, _) = self.scrub_to(pd, &keep)?;
        for (base, _, _) in keep {
            if let Some(b) = self.backing_mut(base) {
                b.rezero_initialised();
            }
        }
        debug_assert!(layout.header_offset + 8 * layout.header.len() as u64 <= layout.len);
        debug_assert!(layout.len.is_multiple_of(PAGE_SIZE));
        self.write_words(layout.base, layout.header_offset, layout.header)?;
        self.quotas[pd.index()] = (0, layout.memory_limit);
        self.stats.instances_restored += 1;
        Ok(pending)
    }

    /// Empties the area VMA `[base, base + len)` of `pd`, a μprocess that has ended, for the
    /// next μprocess of the same program, keeping the PD, its page tables and the VMA: PrivLib
    /// frees every other VMA `pd` owns and drops every right it was given, the area's pager
    /// lets it go (areas forked from it get their pages first), its frames and their
    /// commitment go back, and `pd`'s leaves over it go but for those of its shared prefix
    /// (the program's image, the same for the next one). [`Jord::refill_area`] commits the
    /// frames again.
    ///
    /// The scrub is skipped when `scrubbed` (the PD's change counter after an earlier one)
    /// says nothing changed since ([`Jord::unchanged_since_scrub`]). Returns the flushes owed
    /// and the PD's change counter now, for the next time.
    ///
    /// [`Error::Busy`] (nothing changed) as for [`Jord::restore_instance`];
    /// [`Error::InvalidArgs`] (nothing changed) unless the VMA is a μprocess's area of `len`
    /// bytes. Destroy the PD then.
    pub fn empty_area(
        &mut self,
        pd: PdId,
        (base, len): (u64, u64),
        scrubbed: Option<u64>,
    ) -> Result<(Pending, Option<u64>), Error> {
        self.check_instance_pd(pd)?;
        let sparse = self
            .backing_mut(base)
            .is_some_and(|b| b.frames().is_none() && b.pages as u64 * PAGE_SIZE == len);
        if !sparse {
            return Err(Error::InvalidArgs);
        }
        let mut pending = if self.unchanged_since_scrub(pd, scrubbed, 1) {
            Pending::default()
        } else {
            self.scrub_to(pd, &[(base, len, Perm::RW)])?.0
        };
        self.settle_vma(base);
        self.detach_pager(base);
        pending.absorb(core::mem::take(&mut self.pager_owed));
        let prefix = self.shared_prefix_len(base);
        pending.absorb(self.revoke_leaves_freeing(pd, base + prefix, len - prefix));
        if let Some(b) = self.backing_mut(base) {
            b.release_sparse();
        }
        self.quotas[pd.index()].0 = 0;
        self.stats.areas_emptied += 1;
        Ok((pending, self.privlib.changes(pd)))
    }

    /// Commits the frames of the area at `base`, emptied by [`Jord::empty_area`], again: for
    /// the μprocess that takes it. [`Error::NoMemory`] (still empty) when memory is short.
    pub fn refill_area(&mut self, base: u64) -> Result<(), Error> {
        self.backing_mut(base)
            .ok_or(Error::NotMapped)?
            .recommit_sparse()
    }

    /// The VMAs `pd` keeps between requests once its `init` ran, the instance VMA being
    /// `[base, base + len)`: its creation stack (if it has one), the instance VMA and every VMA
    /// that `pd` owns and alone holds (which `init` mapped), by address; and the bytes of its
    /// `mmap` allowance those use.
    pub fn kept_layout(&self, pd: PdId, base: u64, len: u64) -> (Vec<KeptVma>, u64) {
        let (stack, stack_len) = self.stacks[pd.index()];
        let mut keep = alloc::vec![(base, len, Perm::RW)];
        if stack_len != 0 {
            keep.push((stack, stack_len, Perm::RW));
        }
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
        (keep, charged.min(self.quotas[pd.index()].0))
    }

    /// `pd`'s creation stack and the instance VMA `[base, base + len)`: what a fresh
    /// instance keeps.
    pub fn fresh_layout(&self, pd: PdId, base: u64, len: u64) -> [KeptVma; 2] {
        let (stack, stack_len) = self.stacks[pd.index()];
        [(stack, stack_len, Perm::RW), (base, len, Perm::RW)]
    }

    /// `pd`'s `mmap` allowance: (bytes used, limit).
    pub fn memory_quota(&self, pd: PdId) -> (u64, u64) {
        self.quotas[pd.index()]
    }

    /// Sets `pd`'s `mmap` allowance: (bytes used, limit).
    pub fn set_memory_quota(&mut self, pd: PdId, quota: (u64, u64)) {
        self.quotas[pd.index()] = quota;
    }

    /// PrivLib's change counter of `pd` ([`fjord_pd::PrivLib::changes`]).
    pub fn changes(&self, pd: PdId) -> Option<u64> {
        self.privlib.changes(pd)
    }

    /// Frees every VMA `pd` owns beyond those of `keep` and drops every right it was given.
    pub fn scrub_keeping(&mut self, pd: PdId, keep: &[KeptVma]) -> Result<Pending, Error> {
        let (pending, freed) = self.scrub_to(pd, keep)?;
        self.stats.vmas_scrubbed += freed;
        Ok(pending)
    }

    /// [`Jord::scrub_keeping`] without counting: the flushes owed and the VMAs freed.
    fn scrub_to(&mut self, pd: PdId, keep: &[KeptVma]) -> Result<(Pending, u64), Error> {
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
        Ok((pending, freed))
    }

    /// Whether a scrub of `pd` keeping `kept` VMAs would change nothing, PrivLib's change
    /// counter `scrubbed` after the last one telling ([`fjord_pd::PrivLib::scrubbed_since`]):
    /// then the scrub is skipped and only rights held back for `pd` are settled.
    pub fn unchanged_since_scrub(&mut self, pd: PdId, scrubbed: Option<u64>, kept: usize) -> bool {
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
    /// (`i` for `keep[i]`) were remade, whether leaves of the others were removed (a right
    /// narrowed back: the dirty bits went with them), and the flushes owed. [`Error::Busy`]
    /// when one cannot be put back.
    pub fn reinstate_layout(
        &mut self,
        pd: PdId,
        keep: &[KeptVma],
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
    pub fn level2_accessed(&self) -> fjord_kernel::paging::Level2Accessed {
        if self.shared_root == 0 {
            fjord_kernel::paging::Level2Accessed::Take
        } else {
            fjord_kernel::paging::Level2Accessed::Keep
        }
    }

    /// Which of `pages` (indices of the VMA at `base`) `pd` accessed since the last call: the
    /// pages whose leaf in its table has the ACCESSED bit, which this clears. Returns them
    /// ascending with the flushes after which the next accesses set the bits again.
    pub fn take_accessed(&mut self, pd: PdId, base: u64, pages: &[usize]) -> (Vec<u32>, Pending) {
        let root = self.root_of(pd);
        let mut tables = PageTables::new(root, &DIRECT);
        let mut hot: Vec<u32> = pages
            .iter()
            .filter(|&&i| {
                tables
                    .take_bits(base + i as u64 * PAGE_SIZE, Flags::ACCESSED)
                    .is_ok_and(|f| f.contains(Flags::ACCESSED))
            })
            .map(|&i| i as u32)
            .collect();
        hot.sort_unstable();
        (hot, self.flush_pd(pd, root))
    }

    /// The flushes after `pd`'s leaves (in the table at `root`) changed: this CPU if it has
    /// that table loaded, and every CPU that may cache `pd`'s translations.
    pub fn flush_pd(&mut self, pd: PdId, root: u64) -> Pending {
        let me = percpu::cpu_index() as u32;
        Pending {
            cpus: self.sharers.take_targets(pd, me),
            reload_local: cpu::read_cr3() & !0xfff == root,
        }
    }

    /// The backing slot of the VMA at `base`, when it has frames: fixed by `base`, so an owner
    /// may look it up once and reach the frames by [`Jord::backing_at`].
    pub fn backed_slot(&self, base: u64) -> Option<usize> {
        let slot = self.slot_of(base)?;
        self.backing
            .get(slot)
            .is_some_and(|b| b.backs(base))
            .then_some(slot)
    }

    /// The frames behind the VMA in backing slot `slot` (see [`Jord::backed_slot`]); `None`
    /// when the slot has none.
    pub fn backing_at(&mut self, slot: usize) -> Option<&mut Backing> {
        self.backing.get_mut(slot).filter(|b| b.pages != 0)
    }

    /// Watches `pd`'s leaves in `ranges` (base, length): from now on, [`Jord::take_leaves_lost`]
    /// tells whether one of them was removed (their dirty bits went with them). Replaces an
    /// older watch of `pd`.
    pub fn watch_leaves(&mut self, pd: PdId, ranges: Vec<(u64, u64)>) {
        let slot = &mut self.leaf_watches[pd.index()];
        if slot.is_none() {
            self.live_watches += 1;
        }
        *slot = Some(LeafLossWatch {
            ranges,
            lost: false,
        });
    }

    /// Whether a leaf of `pd`'s watched ranges was removed since the watch began or the last
    /// call; clears it.
    pub fn take_leaves_lost(&mut self, pd: PdId) -> bool {
        match self.leaf_watches.get_mut(pd.index()) {
            Some(Some(w)) => core::mem::take(&mut w.lost),
            _ => false,
        }
    }

    /// Ends the watch of `pd`'s leaves, if it has one.
    pub fn unwatch_leaves(&mut self, pd: PdId) {
        if self.live_watches != 0
            && let Some(slot) = self.leaf_watches.get_mut(pd.index())
            && slot.take().is_some()
        {
            self.live_watches -= 1;
        }
    }

    /// Whether some PD's leaves are watched.
    #[inline]
    pub(super) fn any_leaf_watch(&self) -> bool {
        self.live_watches != 0
    }

    /// Notes that leaves of `pd` in `[base, base + len)` were removed, for a watch of them.
    #[inline]
    pub(super) fn note_leaves_removed(&mut self, pd: PdId, base: u64, len: u64) {
        if self.live_watches == 0 {
            return;
        }
        if let Some(Some(w)) = self.leaf_watches.get_mut(pd.index()) {
            let end = base.saturating_add(len);
            if w.ranges.iter().any(|&(b, l)| base < b + l && b < end) {
                w.lost = true;
            }
        }
    }
}

/// One watch slot per PD, none taken.
pub(super) fn no_watches() -> Vec<Option<LeafLossWatch>> {
    (0..MAX_LIVE_PDS).map(|_| None).collect()
}
