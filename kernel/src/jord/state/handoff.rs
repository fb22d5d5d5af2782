//! `pmove` and what the kernel knows of the two PDs of a hand-off ([`Handoff`]): revocations
//! held back while the sender runs nowhere, and leaves installed at once for the receiver.

use super::*;

/// Most pages of a VMA whose leaves [`Jord::prefill`] installs at once (ArgBufs).
const PREFILL_PAGES: usize = 4;

/// Most pages of a VMA a PD maps with its own `mmap` that [`Jord::populate`] fills at once.
pub const POPULATE_PAGES: usize = 1;

/// What the kernel knows of a `pmove`'s two PDs beyond PrivLib's rights update
/// ([`Jord::pmove_with`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Handoff {
    /// The caller is the PD loaded on this CPU, and this CPU switches away from it (with
    /// [`Jord::switch_to`]) before it runs again: `ccall_move`, `creturn_move`, and `call`,
    /// which suspends it. When no other CPU may hold the caller's translations, its leaves are
    /// not cleared now but held back (see [`HeldBack`]); a buffer that comes back before the
    /// caller runs again (the chain A→B→C→B→A, a nested call's response) then costs no
    /// page-table work at all.
    pub leaving: bool,
    /// The target is the PD the executor runs next and reads the buffer first thing (a callee
    /// its request, a resumed caller its response): install its leaves for the initialised
    /// pages of a small VMA (an ArgBuf) at once, as VLB fills would on its first touches,
    /// saving one VLB miss per page. The leaves carry the rights just moved (a subset of what
    /// the VMA table now gives the target). Leaves only held back in the target's table, valid
    /// again, need none; under Jord_NI the shared table keeps its leaves anyway. A plain
    /// `pmove` stays lazy, since a receiver that only passes the buffer on would not touch it.
    pub prefill: bool,
}

impl Handoff {
    /// The caller leaves: `ccall_move`, `creturn_move`.
    pub const LEAVING: Handoff = Handoff {
        leaving: true,
        prefill: false,
    };
    /// The executor hands the buffer to the PD it runs next.
    pub const TO_NEXT: Handoff = Handoff {
        leaving: false,
        prefill: true,
    };
    /// Both: `call` hands its buffer to the callee and suspends the caller.
    pub const CALL: Handoff = Handoff {
        leaving: true,
        prefill: true,
    };
}

/// Most revocations held back at once ([`HeldBack`]); a `pmove` beyond them revokes at once.
pub(super) const MAX_DEFERRED: usize = 16;

impl Jord {
    /// `pmove` as a system call from running code makes it (no [`Handoff`]).
    pub fn pmove(
        &mut self,
        caller: PdId,
        addr: u64,
        cid: PdId,
        prot: Perm,
    ) -> Result<Pending, Error> {
        self.pmove_as(caller, addr, cid, prot, false)
            .map(|(p, _)| p)
    }

    /// `pmove` with what the kernel knows of the two PDs ([`Handoff`]): the caller is about to
    /// be switched away from (its leaves may be held back), the target is about to run (its
    /// leaves are installed now).
    #[inline(always)]
    pub fn pmove_with(
        &mut self,
        caller: PdId,
        addr: u64,
        cid: PdId,
        prot: Perm,
        how: Handoff,
    ) -> Result<Pending, Error> {
        let (p, withdrawn) = self.pmove_as(caller, addr, cid, prot, how.leaving)?;
        if how.prefill
            && !withdrawn
            && cid != PdId::KERNEL
            && self.shared_root == 0
            && prot.contains(Perm::R)
        {
            self.prefill(cid, addr, prot);
        }
        Ok(p)
    }

    /// `pmove`, holding the caller's leaves back when `leaving` allows it; also says whether
    /// `cid`'s own leaves for the VMA were valid again (a held-back revocation withdrawn).
    pub(super) fn pmove_as(
        &mut self,
        caller: PdId,
        addr: u64,
        cid: PdId,
        prot: Perm,
        leaving: bool,
    ) -> Result<(Pending, bool), Error> {
        let Some(r) = self.privlib.pmove_revoking(caller, addr, cid, prot)? else {
            return Ok((Pending::default(), false));
        };
        let withdrawn = self.held_back.holds(cid) && self.withdraw(cid, r.leaf.base, prot);
        if leaving
            && self.may_defer(caller)
            && self.held_back.push(Note {
                pd: caller,
                base: r.leaf.base,
                len: r.leaf.len,
                had: r.had,
            })
        {
            self.stats.revocations_deferred += 1;
            return Ok((Pending::default(), withdrawn));
        }
        Ok((
            self.revoke_leaves(caller, r.leaf.base, r.leaf.len),
            withdrawn,
        ))
    }

    /// Whether `caller`, loaded on this CPU and about to be switched away from, may keep its
    /// revoked leaves for now: no other CPU may cache its translations.
    pub(super) fn may_defer(&self, caller: PdId) -> bool {
        if self.shared_root != 0 || caller == PdId::KERNEL || self.held_back.is_full() {
            return false;
        }
        let mut others = self.sharers.mask(caller);
        // A PD is loaded here, so this CPU's per-CPU data exists.
        others.remove(percpu::current().index as u32);
        others.is_empty()
    }

    /// The VMA at `base` came back to `pd` with `prot`: a revocation held back for it is
    /// withdrawn when `prot` covers every right its leaves can carry, and carried out now
    /// otherwise (`pd` is loaded nowhere while it has one). Returns true when withdrawn.
    pub(super) fn withdraw(&mut self, pd: PdId, base: u64, prot: Perm) -> bool {
        let Some(n) = self.held_back.take(pd, base) else {
            return false;
        };
        if prot.contains(n.had) {
            self.stats.revocations_withdrawn += 1;
            true
        } else {
            self.clear_held_back(n);
            false
        }
    }

    /// Carries out every revocation held back for `pd` (before `pd` is loaded or recycled).
    #[cold]
    #[inline(never)]
    pub(in crate::jord) fn settle_pd(&mut self, pd: PdId) {
        for n in self.held_back.take_pd(pd) {
            self.clear_held_back(n);
        }
    }

    /// Carries out at once every revocation held back for `pd` while `pd` is loaded on this
    /// CPU: a suspension that was expected did not happen (the call was refused), so `pd`
    /// runs on without a switch.
    pub fn settle_running(&mut self, pd: PdId) -> Pending {
        let mut pending = Pending::default();
        for n in self.held_back.take_pd(pd) {
            pending.absorb(self.revoke_leaves(n.pd, n.base, n.len));
        }
        pending
    }

    /// Carries out every revocation held back for the VMA at `base` (before its frames go).
    pub(super) fn settle_vma(&mut self, base: u64) {
        for n in self.held_back.take_vma(base) {
            self.clear_held_back(n);
        }
    }

    /// Clears a held-back revocation's leaves. Its PD is loaded on no CPU and no TLB holds its
    /// translations, so no flush is owed.
    pub(super) fn clear_held_back(&mut self, n: Note) {
        self.note_leaves_removed(n.pd, n.base, n.len);
        let root = self.roots[n.pd.index()];
        if root != 0 {
            let removed = PageTables::new(root, &DIRECT).unmap_range(n.base, n.len);
            self.stats
                .count_shootdown(removed, false, &Pending::default());
        }
    }

    pub(super) fn prefill(&mut self, pd: PdId, base: u64, perm: Perm) {
        let root = self.roots[pd.index()];
        let Some(b) = self
            .slot_of(base)
            .and_then(|slot| self.backing.get(slot))
            .filter(|b| b.pages != 0 && b.base == base && b.pages <= PREFILL_PAGES)
        else {
            return;
        };
        if root == 0 {
            return;
        }
        let flags = crate::jord::vlb::leaf_flags(perm);
        let mut installed = 0;
        for i in 0..b.pages {
            // A page never touched stays for its first fill (which zeroes it); a leaf that is
            // already present stays as it is. A leaf that was not present needs no TLB flush
            // anywhere when it appears.
            let off = i as u64 * PAGE_SIZE;
            if b.is_initialised(i)
                && let Some(pa) = b.frame_of(i)
                && map_leaf(&mut self.leaf_hints, pd, root, base + off, pa, flags)
            {
                installed += 1;
            }
        }
        self.stats.prefills += installed;
    }
}
