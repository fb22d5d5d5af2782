//! Shootdowns: clearing stale leaves from PD tables, flushing this CPU, and the remote flushes
//! an operation still owes ([`Pending`]).

use super::*;

impl Jord {
    /// Removes the stale leaves of `s` from the PD tables, flushes this CPU, and returns the
    /// other CPUs that must flush before the operation completes (see [`Pending::finish`]).
    /// [`Jord::apply`] for one PD's leaves, `pmove`'s whole shootdown.
    pub(super) fn revoke_leaves(&mut self, pd: PdId, base: u64, len: u64) -> Pending {
        self.revoke_leaves_as(pd, base, len, Tables::Keep)
    }

    /// [`Jord::revoke_leaves`] for a large range of `pd`'s, also freeing every level-1 table
    /// whose whole 2 MiB the range covers (its level-2 entry cleared): a few hundred entries
    /// cleared instead of one per page, and the PD's later VLB misses there make new tables.
    /// The PD's leaf hints go (they may name a freed table); the flushes owed are as ever.
    pub(super) fn revoke_leaves_freeing(&mut self, pd: PdId, base: u64, len: u64) -> Pending {
        if self.root_of(pd) == 0 || self.shared_root != 0 || len < 1 << 21 {
            return self.revoke_leaves(pd, base, len);
        }
        self.leaf_hints.forget(pd.index());
        self.revoke_leaves_as(pd, base, len, Tables::Free)
    }

    fn revoke_leaves_as(&mut self, pd: PdId, base: u64, len: u64, tables: Tables) -> Pending {
        self.note_leaves_removed(pd, base, len);
        let mut pending = Pending::default();
        let mut ctx = Clear::new(
            &self.roots,
            &self.leaf_hints,
            self.shared_root,
            &mut self.sharers,
            &mut pending,
        );
        let removed = ctx.clear_leaves_as(pd, base, len, tables);
        self.stats.count_shootdown(removed, false, &pending);
        pending
    }

    pub(super) fn apply(&mut self, s: &Shootdown) -> Pending {
        let mut pending = Pending::default();
        if s.is_empty() {
            return pending;
        }
        if self.any_leaf_watch() {
            for leaf in s.leaves() {
                if let fjord_pd::Target::Pd(pd) = leaf.target {
                    self.note_leaves_removed(pd, leaf.base, leaf.len);
                }
            }
        }
        let mut removed = 0usize;
        let mut ctx = Clear::new(
            &self.roots,
            &self.leaf_hints,
            self.shared_root,
            &mut self.sharers,
            &mut pending,
        );
        for leaf in s.leaves() {
            match leaf.target {
                fjord_pd::Target::Pd(pd) => {
                    removed += ctx.clear_leaves(pd, leaf.base, leaf.len);
                }
                fjord_pd::Target::AllPds if self.shared_root != 0 => {
                    // Jord_NI: one shared table.
                    removed += ctx.clear_leaves(PdId::KERNEL, leaf.base, leaf.len);
                }
                fjord_pd::Target::AllPds => {
                    for pd in self.privlib.pds().live() {
                        if pd != PdId::KERNEL {
                            removed += ctx.clear_leaves(pd, leaf.base, leaf.len);
                        }
                    }
                    for &root in &self.root_cache {
                        removed += PageTables::new(root, &DIRECT).unmap_range(leaf.base, leaf.len);
                    }
                }
            }
        }
        for &pd in s.dropped() {
            let t = ctx.sharers.take_targets(pd, ctx.me);
            ctx.pending.cpus = ctx.pending.cpus.union(&t);
        }
        self.stats.count_shootdown(removed, s.drops_any(), &pending);
        pending
    }
}

/// Installs `pd`'s leaf `va` → `pa` with `flags` in its table at `root`, unless one is there,
/// through the PD's level-1 table hint (walking, and remembering the table, on a miss).
/// Returns whether it installed the leaf.
pub(super) fn map_leaf(
    hints: &mut LeafHints,
    pd: PdId,
    root: u64,
    va: u64,
    pa: u64,
    flags: Flags,
) -> bool {
    leaf_table(hints, pd, root, va, flags, Way::Handoff)
        .is_some_and(|table| PageTables::new(root, &DIRECT).map_in_table(table, va, pa, flags))
}

/// `pd`'s level-1 table (under `root`) for the page `va`, from its hints or by a walk that
/// creates missing tables for a leaf with `flags` and becomes the PD's hint of `way`; `None`
/// when a table cannot be had (no memory, a large page in the way).
pub(in crate::jord) fn leaf_table(
    hints: &mut LeafHints,
    pd: PdId,
    root: u64,
    va: u64,
    flags: Flags,
    way: Way,
) -> Option<u64> {
    if let Some(t) = hints.get(pd.index(), va) {
        return Some(t);
    }
    let t = PageTables::new(root, &DIRECT)
        .leaf_table_creating(va, flags, &mut KernelFrames)
        .ok()?;
    hints.remember(pd.index(), way, va, t);
    Some(t)
}

/// What becomes of the level-1 tables a revoked range covers whole.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Tables {
    /// Kept (empty), for the PD's next fills there.
    Keep,
    /// Freed, their level-2 entries cleared.
    Free,
}

/// What clearing leaves needs from [`Jord`], borrowed apart from the PD table.
struct Clear<'a> {
    roots: &'a [u64],
    hints: &'a LeafHints,
    shared_root: u64,
    sharers: &'a mut Sharers,
    current_root: u64,
    me: u32,
    pending: &'a mut Pending,
}

impl<'a> Clear<'a> {
    /// A context for clearing leaves on this CPU, whose loaded root it reads.
    pub(super) fn new(
        roots: &'a [u64],
        hints: &'a LeafHints,
        shared_root: u64,
        sharers: &'a mut Sharers,
        pending: &'a mut Pending,
    ) -> Clear<'a> {
        Clear {
            roots,
            hints,
            shared_root,
            sharers,
            current_root: cpu::read_cr3() & !0xfff,
            me: percpu::cpu_index() as u32,
            pending,
        }
    }

    /// Clears `[base, base + len)` in `pd`'s table (the shared table when `pd` is the kernel
    /// under Jord_NI), flushing locally and collecting the CPUs to IPI.
    pub(super) fn clear_leaves(&mut self, pd: PdId, base: u64, len: u64) -> usize {
        self.clear_leaves_as(pd, base, len, Tables::Keep)
    }

    /// [`Clear::clear_leaves`], freeing the level-1 tables the range covers whole when
    /// `tables` says so (the caller forgets the PD's leaf hints first).
    fn clear_leaves_as(&mut self, pd: PdId, base: u64, len: u64, tables: Tables) -> usize {
        let root = if pd == PdId::KERNEL || self.shared_root != 0 {
            self.shared_root
        } else {
            self.roots[pd.index()]
        };
        if root == 0 {
            return 0;
        }
        let mut pt = PageTables::new(root, &DIRECT);
        // One page of a PD (an ArgBuf's revocation, as a rule): straight to the leaf when a
        // hint of the PD covers it.
        let table = (len == PAGE_SIZE && base.is_multiple_of(PAGE_SIZE) && pd != PdId::KERNEL)
            .then(|| self.hints.get(pd.index(), base))
            .flatten();
        let n = match (table, tables) {
            (Some(table), _) => usize::from(pt.unmap_in_table(table, base)),
            (None, Tables::Keep) => pt.unmap_range(base, len),
            (None, Tables::Free) => pt.unmap_range_freeing(base, len, &mut KernelFrames),
        };
        if n == 0 {
            return 0;
        }
        if root == self.current_root {
            if len <= 16 * PAGE_SIZE {
                for va in (base..base + len).step_by(PAGE_SIZE as usize) {
                    cpu::invlpg(va);
                }
            } else {
                self.pending.reload_local = true;
            }
        }
        if pd != PdId::KERNEL {
            let t = self.sharers.take_targets(pd, self.me);
            self.pending.cpus = self.pending.cpus.union(&t);
        }
        n
    }
}

/// Remote TLB flushes an operation still owes; finish them after releasing the Jord lock.
#[derive(Default)]
#[must_use = "the remote flushes must be finished before the operation returns"]
pub struct Pending {
    pub(super) cpus: fjord_pd::CpuMask,
    pub(super) reload_local: bool,
}

impl Pending {
    /// True when no flush is owed.
    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        !self.reload_local && self.cpus.is_empty()
    }

    /// Adds the flushes `other` owes to these.
    pub fn absorb(&mut self, other: Pending) {
        self.cpus = self.cpus.union(&other.cpus);
        self.reload_local |= other.reload_local;
    }

    /// Flushes this CPU (if needed) and every CPU in the mask, waiting for them.
    pub fn finish(self) {
        if self.reload_local {
            cpu::flush_tlb();
        }
        if !self.cpus.is_empty() {
            crate::arch::smp::tlb_shootdown(self.cpus.iter().map(|c| c as usize));
        }
    }
}
