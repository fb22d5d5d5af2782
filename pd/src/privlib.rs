//! PrivLib: the Jord API of Table 1 at the level of the VMA and PD tables.
//!
//! Every call names its caller (the current PD, `ucid`), validates its arguments and the
//! caller's rights, and either changes the tables and returns what the kernel must do next
//! (an address, a [`Shootdown`] set, a [`Switch`]) or returns an [`Error`] and changes nothing.
//! Nothing here panics on bad input.
//!
//! Rights model (the paper lists "mandatory security policy checks" without spelling them out):
//! - The **owner** of a VMA is the PD that created it with `mmap`. Only the owner may `munmap`
//!   it, set any permission on it for itself with `mprotect`, or take a permission away from
//!   another PD with [`PrivLib::revoke`]. Ownership never moves; `cput` frees what a PD owns.
//! - Any other holder may only **narrow** its own permission with `mprotect`, and may hand on
//!   with `pmove`/`pcopy` only a **subset** of what it holds (`prot ⊆ perm(caller)`); the
//!   receiver gets the union of what it had and `prot`, so `pcopy` never needs a shootdown.
//! - **Global** and **Privileged** VMAs may be created only by the kernel (PD 0). Their
//!   permission is the VTE's attr permission; `pmove`/`pcopy`/`revoke` do not apply to them.
//!   Only the kernel may name a Privileged VMA in any call.
//! - A PD may be entered, resumed or destroyed only by its creator or the kernel.
//! - **W^X**: no PD ever holds write and execute on a VMA together, and only the kernel may ask
//!   for execute (`mmap`, `mprotect`): executable memory is module code the loader mapped, so
//!   memory a function could write never becomes executable ([`Perm::may_request`]).
//!
//! Under [`PdIsolation::None`] (the paper's Jord_NI) the same calls run but the isolation work
//! is skipped: no ownership or subset checks, `mprotect`/`pmove`/`pcopy`/`revoke` only validate
//! their arguments, `lookup` grants every PD full access to every non-Privileged VMA, and
//! shootdown sets carry no per-PD revocations. Memory management stays: `munmap` and `cput`
//! still free VMAs and still return the leaves of freed memory (for every PD), because a freed
//! and reused slot may be backed by other frames. Privileged VMAs stay kernel-only: that
//! protects the kernel, not PDs from each other.

use alloc::vec::Vec;

use crate::call::{CallState, Switch};
use crate::error::{Error, Fault, Result};
use crate::grant::Grant;
use crate::pd_id::PdId;
use crate::pd_table::PdTable;
use crate::perm::Perm;
use crate::shootdown::{Leaf, Shootdown, Target};
use crate::size_class::{PAGE_SIZE, SizeClass, page_round_up};
use crate::vaddr::{self, VmaId};

use crate::vma_table::{TableConfig, VmaTable};
use crate::vte::{PdPerm, VmaAttrs, Vte};

/// Whether PrivLib enforces isolation between PDs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PdIsolation {
    /// Jord: every check and every revocation.
    Full,
    /// Jord_NI: same code paths with the isolation work bypassed (see the module docs).
    None,
}

/// Attributes requested by `mmap` (the `flags` argument).
pub type MapFlags = VmaAttrs;

/// The VMA table, the PD table and the Groundhog mode: PrivLib's state.
#[derive(Clone, Debug)]
pub struct PrivLib {
    vmas: VmaTable,
    pds: PdTable,
    isolation: PdIsolation,
    /// Room for the VMAs a scrub keeps (see [`PrivLib::scrub_with`]), reused.
    kept: Vec<VmaId>,
}

/// What a `pmove` took from its caller: the leaves to remove from the caller's table, and the
/// rights the caller held (so the most any of those leaves can carry).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Revoked {
    /// The caller's leaf range.
    pub leaf: Leaf,
    /// The caller's rights on the VMA before the move.
    pub had: Perm,
}

/// What [`PrivLib::reinstate`] did to a VMA an instance keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reinstated {
    /// It was as kept: nothing changed.
    Intact,
    /// Its owner had changed its own right on it (an `mprotect`): the kept right is back.
    RightRestored,
    /// Its owner had freed or shrunk it: it is made again at its base and length, with no
    /// contents.
    Remade,
}

/// What the checks of `pmove`/`pcopy` found: the VMA, the caller's permission (and its
/// sub-array slot), the target's current and new permissions.
struct Transfer {
    id: VmaId,
    owner: PdId,
    len: u64,
    mine: Perm,
    mine_slot: Option<usize>,
    theirs: Option<Perm>,
    new: Perm,
}

impl PrivLib {
    /// PrivLib with an empty VMA table of the given sizes and `max_pds` PD ids.
    pub fn new(config: &TableConfig, max_pds: usize, isolation: PdIsolation) -> Result<PrivLib> {
        Ok(PrivLib {
            vmas: VmaTable::new(config)?,
            pds: PdTable::new(max_pds)?,
            isolation,
            kept: Vec::new(),
        })
    }

    /// The VMA table (read-only).
    pub fn vmas(&self) -> &VmaTable {
        &self.vmas
    }

    /// The PD table (read-only).
    pub fn pds(&self) -> &PdTable {
        &self.pds
    }

    /// The Groundhog mode.
    pub fn isolation(&self) -> PdIsolation {
        self.isolation
    }

    fn checks(&self) -> bool {
        self.isolation == PdIsolation::Full
    }

    /// Resolves a VMA base named by `caller`: the address checks of
    /// [`VmaTable::resolve_base`] plus "only the kernel names a Privileged VMA".
    fn resolve(&self, caller: PdId, addr: u64) -> Result<(VmaId, Vte)> {
        self.pds.check_live(caller)?;
        let (id, vte) = self.vmas.resolve_base(addr)?;
        if vte.is_privileged() && caller != PdId::KERNEL {
            return Err(Error::AccessDenied);
        }
        Ok((id, *vte))
    }

    /// Leaves of `base..base + len` for every PD holding the VMA whose VTE is `vte` (all PDs
    /// for a Global VMA or under Jord_NI), except `skip`.
    fn holder_leaves(&self, vte: &Vte, base: u64, len: u64, skip: Option<PdId>) -> Shootdown {
        let mut s = Shootdown::new();
        if vte.is_global() || !self.checks() {
            s.push(Target::AllPds, base, len);
        } else if vte.is_privileged() {
            s.push(Target::Pd(PdId::KERNEL), base, len);
        } else {
            self.vmas.for_each_holder(vte, |h| {
                if Some(h.pd) != skip {
                    s.push(Target::Pd(h.pd), base, len);
                }
            });
        }
        s
    }

    /// Frees a whole VMA: every holder loses it. Returns the leaves to shoot down.
    fn free_vma(&mut self, id: VmaId, skip: Option<PdId>) -> Shootdown {
        let Some(vte) = self.vmas.vte(id).copied() else {
            return Shootdown::new();
        };
        let (base, len) = (id.base(), vte.len());
        let per_pd = !(vte.is_global() || vte.is_privileged() || !self.checks());
        let mut s = if per_pd {
            Shootdown::new()
        } else {
            self.holder_leaves(&vte, base, len, skip)
        };
        // One pass over the holders: each loses the VMA and, with per-PD rights, its leaves.
        let pds = &mut self.pds;
        self.vmas.for_each_holder(&vte, |h| {
            pds.note_granted(h.pd, id, false);
            pds.note_held(h.pd, false);
            if per_pd && Some(h.pd) != skip {
                s.push(Target::Pd(h.pd), base, len);
            }
        });
        self.pds.note_owned(vte.owner(), id, false);
        self.pds.touch_vma(vte.owner(), id);
        self.vmas.release(id);
        s
    }

    /// Sets `pd`'s per-PD permission on `id` and keeps the PD table's bookkeeping in step.
    fn set_perm(&mut self, id: VmaId, pd: PdId, perm: Perm) -> Result<Perm> {
        let old = self.vmas.set_perm(id, pd, perm)?;
        // The PD lists every VMA it holds a right on (and possibly some it moved away): only a
        // change between no right and some right changes its list.
        if old.is_empty() != perm.is_empty() {
            self.pds.note_granted(pd, id, !perm.is_empty());
            self.pds.note_held(pd, !perm.is_empty());
        }
        self.touch_owner(id);
        Ok(old)
    }

    /// The VMA `id` changed: bumps its owner's change counter if the owner keeps it
    /// ([`PdTable::changes`]).
    #[inline(always)]
    fn touch_owner(&mut self, id: VmaId) {
        if let Some(v) = self.vmas.vte(id) {
            let owner = v.owner();
            self.pds.touch_vma(owner, id);
        }
    }

    /// `from`'s right on the VMA `id`, owned by `owner`, became `to`'s (a slot of its VTE
    /// overwritten by `pmove`).
    #[inline(always)]
    fn note_right_moved(&mut self, owner: PdId, id: VmaId, from: PdId, to: PdId) {
        self.pds.note_held(from, false);
        self.pds.note_held(to, true);
        self.pds.touch_vma(owner, id);
    }

    /// `mmap(addr, len, prot, flags, fd, off)`: allocates a new VMA of `len` bytes in the
    /// smallest size class that fits (a larger one when that class is full), owned by `caller`
    /// with permission `prot`, and returns its base address. The system-call layer handles the
    /// POSIX arguments that have no meaning here (the address hint is ignored: Jord places VMAs
    /// by size class; only anonymous memory exists).
    pub fn mmap(&mut self, caller: PdId, len: u64, prot: Perm, flags: MapFlags) -> Result<u64> {
        self.mmap_placed(caller, len, prot, flags, false)
    }

    /// [`PrivLib::mmap`] of a μprocess area, placed clear of every 4 GiB edge and of the ASCII band
    /// ([`crate::vaddr::clear_of_data_words`]) when its size allows (up to 1 GiB).
    pub fn mmap_area(&mut self, caller: PdId, len: u64, prot: Perm) -> Result<u64> {
        self.mmap_placed(caller, len, prot, MapFlags::default(), true)
    }

    /// [`PrivLib::mmap_area`] at `base` itself (a VMA slot's base, which must be free): for a
    /// clone restored where its checkpoint's area was. [`Error::Busy`] when the slot is taken,
    /// [`Error::BadAddress`] for an address that is no slot's base or beyond its class's
    /// capacity, [`Error::InvalidArgs`] for a length the slot's class cannot hold.
    pub fn mmap_area_at(&mut self, caller: PdId, base: u64, len: u64, prot: Perm) -> Result<u64> {
        self.pds.check_live(caller)?;
        if !prot.may_request(caller == PdId::KERNEL) {
            return Err(Error::AccessDenied);
        }
        let d = vaddr::decode(base)?;
        if d.offset != 0 {
            return Err(Error::BadAddress);
        }
        self.vmas
            .alloc_at(d.vma, caller, len, prot, MapFlags::default())?;
        self.pds.note_owned(caller, d.vma, true);
        self.pds.touch_vma(caller, d.vma);
        if !prot.is_empty() {
            self.pds.note_granted(caller, d.vma, true);
            self.pds.note_held(caller, true);
        }
        Ok(base)
    }

    #[inline(always)]
    fn mmap_placed(
        &mut self,
        caller: PdId,
        len: u64,
        prot: Perm,
        flags: MapFlags,
        clear_of_edges: bool,
    ) -> Result<u64> {
        self.pds.check_live(caller)?;
        if !prot.may_request(caller == PdId::KERNEL) {
            return Err(Error::AccessDenied);
        }
        if len == 0 || len > SizeClass::MAX.size() {
            return Err(Error::InvalidArgs);
        }
        if (flags.global || flags.privileged) && caller != PdId::KERNEL {
            return Err(Error::AccessDenied);
        }
        let id = if clear_of_edges {
            self.vmas
                .alloc_clear_of_data_words(caller, len, prot, flags)?
        } else {
            self.vmas.alloc(caller, len, prot, flags)?
        };
        self.pds.note_owned(caller, id, true);
        self.pds.touch_vma(caller, id);
        if !(flags.global || flags.privileged || prot.is_empty()) {
            self.pds.note_granted(caller, id, true);
            self.pds.note_held(caller, true);
        }
        Ok(id.base())
    }

    /// `munmap(addr, len)`: with `addr` at a VMA's base and `len` covering it, frees the VMA;
    /// with `addr` page-aligned inside the VMA and `addr + len` reaching its end, shrinks the
    /// VMA to end at `addr` (the freed tail stays reserved in the class chunk). Only the owner
    /// may. Returns the leaves of the unmapped range for every PD that held the VMA.
    pub fn munmap(&mut self, caller: PdId, addr: u64, len: u64) -> Result<Shootdown> {
        self.pds.check_live(caller)?;
        let d = vaddr::decode(addr)?;
        let vte = *self.vmas.vte(d.vma).ok_or(Error::BadAddress)?;
        if !vte.is_valid() {
            return Err(Error::NotMapped);
        }
        if vte.is_privileged() && caller != PdId::KERNEL {
            return Err(Error::AccessDenied);
        }
        if !addr.is_multiple_of(PAGE_SIZE) || len == 0 {
            return Err(Error::InvalidArgs);
        }
        let mapped = page_round_up(vte.len());
        if d.offset >= mapped {
            return Err(Error::BadAddress);
        }
        if self.checks() && vte.owner() != caller {
            return Err(Error::AccessDenied);
        }
        if d.offset.saturating_add(page_round_up(len)) < mapped {
            return Err(Error::InvalidArgs);
        }
        if d.offset == 0 {
            return Ok(self.free_vma(d.vma, None));
        }
        let s = self.holder_leaves(&vte, addr, mapped - d.offset, None);
        if let Some(v) = self.vmas.vte_mut(d.vma) {
            v.set_len(d.offset);
        }
        self.pds.touch_vma(vte.owner(), d.vma);
        Ok(s)
    }

    /// `mprotect(addr, len, prot)`: changes `caller`'s permission on the VMA based at `addr`;
    /// `len` must cover the VMA (page-rounded). The owner may set any permission (an empty one
    /// keeps ownership but drops access); another holder may only narrow its own. For a Global
    /// or Privileged VMA the owner changes the attr permission, which all PDs see. Returns the
    /// leaves to shoot down when a right was taken away.
    pub fn mprotect(&mut self, caller: PdId, addr: u64, len: u64, prot: Perm) -> Result<Shootdown> {
        let (id, vte) = self.resolve(caller, addr)?;
        if !prot.may_request(caller == PdId::KERNEL) {
            return Err(Error::AccessDenied);
        }
        let mapped = page_round_up(vte.len());
        if page_round_up(len) != mapped {
            return Err(Error::InvalidArgs);
        }
        let mut s = Shootdown::new();
        if !self.checks() {
            return Ok(s);
        }
        let owner = vte.owner() == caller;
        if vte.is_global() || vte.is_privileged() {
            if !owner {
                return Err(Error::AccessDenied);
            }
            if vte.attr_perm().narrowed_by(prot) {
                s = self.holder_leaves(&vte, addr, mapped, None);
            }
            if let Some(v) = self.vmas.vte_mut(id) {
                v.set_attr_perm(prot);
            }
            self.pds.touch_vma(vte.owner(), id);
            return Ok(s);
        }
        let old = if owner {
            // The owner may set any permission: one pass over the VTE sets it and returns the
            // old one.
            self.set_perm(id, caller, prot)?
        } else {
            let old = self.vmas.perm_of(id, caller).unwrap_or(Perm::NONE);
            if old.is_empty() || !old.contains(prot) {
                return Err(Error::AccessDenied);
            }
            self.set_perm(id, caller, prot)?
        };
        if old.narrowed_by(prot) {
            s.push(Target::Pd(caller), addr, mapped);
        }
        Ok(s)
    }

    /// Common checks of `pmove`/`pcopy`, or `None` under Jord_NI after argument
    /// validation.
    fn transfer_checks(
        &self,
        caller: PdId,
        addr: u64,
        cid: PdId,
        prot: Perm,
    ) -> Result<Option<Transfer>> {
        let (id, vte) = self.resolve(caller, addr)?;
        self.pds.check_live(cid)?;
        if cid == caller || prot.is_empty() || vte.is_global() || vte.is_privileged() {
            return Err(Error::InvalidArgs);
        }
        if !self.checks() {
            return Ok(None);
        }
        let found = self.vmas.perms_of_pair(&vte, caller, cid);
        let mine = found.a.ok_or(Error::AccessDenied)?;
        let new = found.b.unwrap_or(Perm::NONE).union(prot);
        if !mine.contains(prot) || new.is_writable_and_executable() {
            return Err(Error::AccessDenied);
        }
        Ok(Some(Transfer {
            id,
            owner: vte.owner(),
            len: vte.len(),
            mine,
            mine_slot: found.a_slot,
            theirs: found.b,
            new,
        }))
    }

    /// `pmove(addr, cid, prot)`: atomically moves `caller`'s permission on the VMA at `addr` to
    /// PD `cid`: the caller loses all its rights on it and `cid` gains `prot` (a subset of what
    /// the caller held). Ownership stays. Returns the caller's leaves to shoot down.
    pub fn pmove(&mut self, caller: PdId, addr: u64, cid: PdId, prot: Perm) -> Result<Shootdown> {
        let mut s = Shootdown::new();
        if let Some(r) = self.pmove_revoking(caller, addr, cid, prot)? {
            s.push(r.leaf.target, r.leaf.base, r.leaf.len);
        }
        Ok(s)
    }

    /// [`PrivLib::pmove`] in the form the kernel's hot path takes: the one leaf range it
    /// revokes (the caller's, page-rounded) with the rights the caller held, `None` when
    /// nothing is revoked (Jord_NI).
    pub fn pmove_revoking(
        &mut self,
        caller: PdId,
        addr: u64,
        cid: PdId,
        prot: Perm,
    ) -> Result<Option<Revoked>> {
        if self.checks()
            && let Some(r) = self.pmove_in_place(caller, addr, cid, prot)
        {
            return Ok(Some(r));
        }
        let Some(t) = self.transfer_checks(caller, addr, cid, prot)? else {
            return Ok(None);
        };
        let leaf = Revoked {
            leaf: Leaf {
                target: Target::Pd(caller),
                base: addr,
                len: page_round_up(t.len),
            },
            had: t.mine,
        };
        // The caller's pair is in the sub-array and the target holds nothing yet: the
        // caller's pair becomes the target's in place.
        if let (Some(slot), None) = (t.mine_slot, t.theirs) {
            self.vmas.overwrite_sub(
                t.id,
                slot,
                PdPerm {
                    pd: cid,
                    perm: t.new,
                },
            );
            self.note_right_moved(t.owner, t.id, caller, cid);
            self.note_moved(cid, t.id);
            return Ok(Some(leaf));
        }
        // Drop the caller first so its slot can take the target; restoring it cannot fail
        // (it reuses the slot or overflow list just freed).
        self.set_perm(t.id, caller, Perm::NONE)?;
        if let Err(e) = self.set_perm(t.id, cid, t.new) {
            self.set_perm(t.id, caller, t.mine)?;
            return Err(e);
        }
        Ok(Some(leaf))
    }

    /// The common `pmove` (an ArgBuf handed on) in one pass, when every check passes at once:
    /// both PDs live and distinct, a plain VMA based at `addr` with no overflow list, the
    /// caller's pair in the sub-array holding `prot`, the target holding nothing. The
    /// caller's slot becomes the target's. `None` (nothing changed) sends every other case,
    /// errors included, down the general path.
    fn pmove_in_place(
        &mut self,
        caller: PdId,
        addr: u64,
        cid: PdId,
        prot: Perm,
    ) -> Option<Revoked> {
        if cid == caller || prot.is_empty() || !self.pds.is_live(caller) || !self.pds.is_live(cid) {
            return None;
        }
        let d = vaddr::decode(addr).ok().filter(|d| d.offset == 0)?;
        let vte = self.vmas.vte_mut(d.vma)?;
        if !vte.is_valid() || vte.is_global() || vte.is_privileged() || vte.overflow().is_some() {
            return None;
        }
        let (Some((slot, mine)), None) = vte.find_pair(caller, cid) else {
            return None;
        };
        if !mine.contains(prot) {
            return None;
        }
        vte.set_sub(
            slot,
            Some(PdPerm {
                pd: cid,
                perm: prot,
            }),
        );
        let len = page_round_up(vte.len());
        let owner = vte.owner();
        self.note_right_moved(owner, d.vma, caller, cid);
        self.note_moved(cid, d.vma);
        Some(Revoked {
            leaf: Leaf {
                target: Target::Pd(caller),
                base: addr,
                len,
            },
            had: mine,
        })
    }

    /// Lists the VMA `id`, just moved to `cid`, in `cid`'s granted list, compacting the list
    /// when it has grown (the PD the VMA came from keeps its entry: see
    /// [`PdTable::granted`]).
    #[inline(always)]
    fn note_moved(&mut self, cid: PdId, id: VmaId) {
        if self.pds.note_moved_in(cid, id) {
            let vmas = &self.vmas;
            self.pds.retain_granted(cid, |v| holds(vmas, v, cid));
        }
    }

    /// `pcopy(addr, cid, prot)`: gives PD `cid` the rights `prot` (a subset of `caller`'s) on
    /// the VMA at `addr`, keeping the caller's. Nothing is revoked, so nothing is shot down.
    pub fn pcopy(&mut self, caller: PdId, addr: u64, cid: PdId, prot: Perm) -> Result<()> {
        let Some(t) = self.transfer_checks(caller, addr, cid, prot)? else {
            return Ok(());
        };
        self.set_perm(t.id, cid, t.new).map(|_| ())
    }

    /// Takes every right PD `cid` holds on the VMA at `addr` away; only the owner may. Not in
    /// the paper's Table 1: it is how an executor takes an ArgBuf or a code VMA back from a PD
    /// it keeps alive (the paper's "transfers back"/"revokes the code VMA access", §3.4).
    pub fn revoke(&mut self, caller: PdId, addr: u64, cid: PdId) -> Result<Shootdown> {
        let (id, vte) = self.resolve(caller, addr)?;
        self.pds.check_live(cid)?;
        if vte.is_global() || vte.is_privileged() {
            return Err(Error::InvalidArgs);
        }
        let mut s = Shootdown::new();
        if !self.checks() {
            return Ok(s);
        }
        if vte.owner() != caller {
            return Err(Error::AccessDenied);
        }
        if !self.set_perm(id, cid, Perm::NONE)?.is_empty() {
            s.push(Target::Pd(cid), addr, vte.len());
        }
        Ok(s)
    }

    /// `cget()`: creates a PD whose creator is `caller`; [`Error::LimitReached`] when
    /// `caller`'s creation tree is at its bound (see [`PrivLib::set_tree_limit`]).
    pub fn cget(&mut self, caller: PdId) -> Result<PdId> {
        self.pds.create(caller)
    }

    /// Bounds the PDs the creation tree rooted at `root` (a PD the kernel created) may hold
    /// besides `root` (kernel only); see [`PdTable::set_tree_limit`].
    pub fn set_tree_limit(&mut self, caller: PdId, root: PdId, limit: u16) -> Result<()> {
        if caller != PdId::KERNEL {
            return Err(Error::AccessDenied);
        }
        self.pds.set_tree_limit(root, limit)
    }

    /// The checks of [`PrivLib::cput`] alone: `Ok` exactly when `cput(caller, cid)` would
    /// succeed, so the kernel can prepare the teardown before it changes the tables.
    pub fn check_cput(&self, caller: PdId, cid: PdId) -> Result<()> {
        self.pds.check_live(caller)?;
        self.pds.check_live(cid)?;
        if cid == PdId::KERNEL {
            return Err(Error::InvalidArgs);
        }
        if self.checks() && !self.pds.may_control(caller, cid) {
            return Err(Error::AccessDenied);
        }
        match self.pds.call_state(cid) {
            Some(CallState::Idle | CallState::Suspended { .. }) => Ok(()),
            _ => Err(Error::Busy),
        }
    }

    /// `cput(cid)`: destroys PD `cid` (not the kernel, not running, not waiting for a callee).
    /// Every VMA it owns is freed, every right it holds elsewhere is dropped, and its id goes
    /// back to the free list; PDs it created pass to the kernel. The result names `cid` as
    /// dropped (its whole page table goes) plus the leaves of freed VMAs in other PDs.
    pub fn cput(&mut self, caller: PdId, cid: PdId) -> Result<Shootdown> {
        self.cput_with(caller, cid, |_, _, _| {})
    }

    /// [`PrivLib::cput`], calling `visit(vma, len, owned)` for every VMA `cid` owns
    /// (`owned`) or holds a right on without owning, just before its VTE changes, so the kernel
    /// can tear down `cid`'s own mappings of them in the same pass. `visit` is not called
    /// when the checks fail (nothing changes then).
    pub fn cput_with(
        &mut self,
        caller: PdId,
        cid: PdId,
        mut visit: impl FnMut(VmaId, u64, bool),
    ) -> Result<Shootdown> {
        self.check_cput(caller, cid)?;
        let mut s = Shootdown::new();
        // Walk the PD's own lists in place (taken out of the PD table so that the updates
        // below need not edit them one entry at a time; they go back emptied, keeping their
        // storage for the next PD in this slot).
        let (owned, granted) = self.pds.take_sets(cid);
        for &id in &granted {
            self.drop_granted(cid, id, &mut visit);
        }
        for &id in &owned {
            s.extend(self.free_owned(id, Some(cid), &mut visit));
        }
        self.pds.restore_sets(cid, owned, granted);
        self.pds.release(cid);
        s.drop_pd(cid);
        Ok(s)
    }

    /// The VMAs `cid` owns and alone holds a right on (plain ones, neither Global nor
    /// Privileged): (base, length, its permission), in no particular order. These are what
    /// [`PrivLib::scrub_with`] can keep.
    pub fn owned_alone(&self, cid: PdId) -> Vec<(u64, u64, Perm)> {
        self.pds
            .owned(cid)
            .filter_map(|id| {
                let v = self.vmas.vte(id)?;
                let perm = v.only_sub()?.perm;
                Self::sole_holder(v, cid, perm).then(|| (id.base(), v.len(), perm))
            })
            .collect()
    }

    /// Returns PD `cid` to the state it had right after `caller` created it and gave it the
    /// VMAs of `keep` (base, length, permission): every other VMA it owns is freed and every
    /// right it holds on a VMA it does not own is dropped, while its id, its creator and the
    /// kept VMAs stay. This is how the kernel reuses a function instance for the next request
    /// (Groundhog-style); it restores the kept VMAs' contents itself.
    ///
    /// Checks as [`PrivLib::cput`]; besides, `cid` must have created no PD, and each kept VMA
    /// must still be a non-Global VMA that `cid` owns at its length, held by `cid` alone with
    /// exactly its permission (an instance that handed its own memory to another PD, shrank
    /// or narrowed it is not reusable). Otherwise [`Error::Busy`] and nothing changes.
    /// `visit` is called as for [`PrivLib::cput_with`], for every VMA that goes or whose right
    /// is dropped. The result holds the leaves to shoot down, `cid`'s own included.
    pub fn scrub_with(
        &mut self,
        caller: PdId,
        cid: PdId,
        keep: &[(u64, u64, Perm)],
        mut visit: impl FnMut(VmaId, u64, bool),
    ) -> Result<Shootdown> {
        self.check_cput(caller, cid)?;
        if !self.pds.children(cid).is_empty() {
            return Err(Error::Busy);
        }
        let mut kept = core::mem::take(&mut self.kept);
        kept.clear();
        for &(base, len, perm) in keep {
            let resolved = self.vmas.resolve_base(base).and_then(|(id, vte)| {
                if Self::sole_holder(vte, cid, perm) && vte.len() == len {
                    Ok(id)
                } else {
                    Err(Error::Busy)
                }
            });
            match resolved {
                Ok(id) => kept.push(id),
                Err(e) => {
                    self.kept = kept;
                    return Err(e);
                }
            }
        }
        let is_kept = |id: VmaId| kept.contains(&id);
        let per_pd = self.checks();
        let mut s = Shootdown::new();
        let (mut owned, mut granted) = self.pds.take_sets(cid);
        for &id in &granted {
            if !is_kept(id)
                && let Some(len) = self.drop_granted(cid, id, &mut visit)
                && per_pd
            {
                s.push(Target::Pd(cid), id.base(), len);
            }
        }
        for &id in &owned {
            if !is_kept(id) {
                s.extend(self.free_owned(id, None, &mut visit));
            }
        }
        owned.retain(|id| is_kept(*id));
        granted.retain(|id| is_kept(*id));
        self.pds.put_sets(cid, owned, granted);
        self.pds.swap_kept(cid, &mut kept);
        self.kept = kept;
        Ok(s)
    }

    /// `cid`'s change counter ([`PdTable::changes`]), to pass to [`PrivLib::scrubbed_since`]
    /// after a [`PrivLib::scrub_with`] of `cid` succeeded.
    pub fn changes(&self, cid: PdId) -> Option<u64> {
        self.pds.changes(cid)
    }

    /// Whether [`PrivLib::scrub_with`]`(caller, cid, keep)` would succeed and change nothing,
    /// known without reading the tables: a scrub of `cid` with a `keep` of `kept` VMAs
    /// succeeded when `cid`'s change counter was `changes`, and since then none of the VMAs
    /// it kept changed, nor the PDs `cid` created; and `cid` owns `kept` VMAs and holds
    /// rights on `kept` VMAs, so only the kept ones (a VMA it made since, or a right it was
    /// given, went again: a request's own ArgBuf mapped and unmapped, its ArgBuf moved in and
    /// back out). The checks of [`PrivLib::cput`] still apply.
    pub fn scrubbed_since(&self, caller: PdId, cid: PdId, changes: u64, kept: usize) -> bool {
        // `cid`'s entry is read once: the restore of every warm instance asks.
        self.pds.unchanged_since(cid, changes, kept)
            && cid != PdId::KERNEL
            && self.pds.is_live(caller)
            && (!self.checks() || self.pds.may_control(caller, cid))
    }

    /// Puts back a VMA `cid` keeps between requests, `(base, len, perm)` as
    /// [`PrivLib::scrub_with`] takes it, where `cid` changed it in a way its owner may undo:
    /// a VMA it still owns and alone holds at that length gets the right `perm` back; one it
    /// freed is made again at `base` (its slot is still free) and one it shrank is freed and
    /// made again. [`Error::Busy`] (nothing changed) when another PD holds a right on it, or
    /// owns what is now at `base`, or its slot went to another VMA. The shootdown covers the
    /// leaves of a right narrowed back or a VMA freed; the caller gives a remade VMA its
    /// backing.
    pub fn reinstate(
        &mut self,
        cid: PdId,
        (base, len, perm): (u64, u64, Perm),
    ) -> Result<(Reinstated, Shootdown)> {
        self.pds.check_live(cid)?;
        let d = vaddr::decode(base)?;
        if d.offset != 0 || perm.is_empty() || perm.is_writable_and_executable() {
            return Err(Error::InvalidArgs);
        }
        let mut s = Shootdown::new();
        if let Some(vte) = self.vmas.vte(d.vma).copied()
            && vte.is_valid()
        {
            if Self::sole_holder(&vte, cid, perm) && vte.len() == len {
                return Ok((Reinstated::Intact, s));
            }
            let others = self.vmas.holders(d.vma).any(|h| h.pd != cid);
            if vte.owner() != cid || vte.is_global() || vte.is_privileged() || others {
                return Err(Error::Busy);
            }
            if vte.len() == len {
                let old = self.set_perm(d.vma, cid, perm)?;
                if old.narrowed_by(perm) {
                    s.push(Target::Pd(cid), base, page_round_up(len));
                }
                return Ok((Reinstated::RightRestored, s));
            }
            s = self.free_vma(d.vma, None);
        }
        self.vmas
            .alloc_at(d.vma, cid, len, perm, MapFlags::default())?;
        self.pds.note_owned(cid, d.vma, true);
        self.pds.note_granted(cid, d.vma, true);
        self.pds.note_held(cid, true);
        self.pds.touch(cid);
        Ok((Reinstated::Remade, s))
    }

    /// For an entry `id` of `cid`'s granted list: when `cid` holds a right on that VMA without
    /// owning it, calls `visit(id, len, false)`, drops the right and returns the VMA's length.
    /// `None` for a VMA `cid` owns or no longer holds (lists keep VMAs handed on with `pmove`).
    fn drop_granted(
        &mut self,
        cid: PdId,
        id: VmaId,
        visit: &mut impl FnMut(VmaId, u64, bool),
    ) -> Option<u64> {
        let v = self.vmas.vte(id)?;
        if v.owner() == cid || !holds(&self.vmas, id, cid) {
            return None;
        }
        let len = v.len();
        let owner = v.owner();
        visit(id, len, false);
        // Cannot fail: the VMA is valid and removing a pair needs no overflow list.
        let _ = self.vmas.set_perm(id, cid, Perm::NONE);
        self.pds.note_held(cid, false);
        self.pds.touch_vma(owner, id);
        Some(len)
    }

    /// Frees the VMA `id` a PD owns, calling `visit(id, len, true)` first; returns the leaves
    /// to shoot down (all holders' but `skip`'s, see [`PrivLib::free_vma`]).
    fn free_owned(
        &mut self,
        id: VmaId,
        skip: Option<PdId>,
        visit: &mut impl FnMut(VmaId, u64, bool),
    ) -> Shootdown {
        if let Some(v) = self.vmas.vte(id) {
            visit(id, v.len(), true);
        }
        self.free_vma(id, skip)
    }

    /// Whether `cid` owns the VMA of `vte` (a plain one, neither Global nor Privileged) and is the
    /// only PD with a right on it, exactly `perm`.
    fn sole_holder(vte: &Vte, cid: PdId, perm: Perm) -> bool {
        vte.is_valid()
            && !vte.is_global()
            && !vte.is_privileged()
            && vte.owner() == cid
            && vte.overflow().is_none()
            && vte.only_sub() == Some(PdPerm { pd: cid, perm })
    }

    /// `ccall(cid, func, args)`, entry half: `caller`, running on `cpu`, enters the idle PD
    /// `cid`. The kernel then scrubs registers and starts `func(args)` on `cid`'s stack.
    pub fn ccall(&mut self, caller: PdId, cid: PdId, cpu: u32) -> Result<Switch> {
        let checks = self.checks();
        self.pds.ccall(caller, cid, cpu, checks)
    }

    /// `ccall`, return half: the function running in `cid` on `cpu` returned.
    pub fn creturn(&mut self, cid: PdId, cpu: u32) -> Result<Switch> {
        self.pds.creturn(cid, cpu)
    }

    /// `cexit()`: PD `cid`, running on `cpu`, suspends itself.
    pub fn cexit(&mut self, cid: PdId, cpu: u32) -> Result<Switch> {
        self.pds.cexit(cid, cpu)
    }

    /// `center(cid)`: `caller`, running on `cpu`, resumes the suspended PD `cid`.
    pub fn center(&mut self, caller: PdId, cid: PdId, cpu: u32) -> Result<Switch> {
        let checks = self.checks();
        self.pds.center(caller, cid, cpu, checks)
    }

    /// Records the physical base of the chunk backing the VMA at `addr` (kernel only; the
    /// chunk must be page-aligned and at least the class size).
    pub fn set_backing(&mut self, caller: PdId, addr: u64, phys: u64) -> Result<()> {
        if caller != PdId::KERNEL {
            return Err(Error::AccessDenied);
        }
        let (id, _) = self.resolve(caller, addr)?;
        if !phys.is_multiple_of(PAGE_SIZE) {
            return Err(Error::InvalidArgs);
        }
        if let Some(v) = self.vmas.vte_mut(id) {
            v.set_phys(phys);
        }
        self.touch_owner(id);
        Ok(())
    }

    /// The fault-fill lookup for `pd` touching `addr` (see [`VmaTable::lookup`]). Under
    /// Jord_NI every valid non-Privileged VMA is granted with full rights to every PD.
    pub fn lookup(&self, pd: PdId, addr: u64) -> core::result::Result<Grant, Fault> {
        if self.checks() {
            return self.vmas.lookup(pd, addr);
        }
        let d = vaddr::decode(addr).map_err(|_| Fault::NotJord)?;
        let v = self.vmas.vte(d.vma).ok_or(Fault::NotJord)?;
        if !v.is_valid() || d.offset >= page_round_up(v.len()) {
            return Err(Fault::Unmapped);
        }
        if v.is_privileged() {
            return self.vmas.lookup(pd, addr);
        }
        Ok(Grant {
            base: d.vma.base(),
            len: v.len(),
            perm: Perm::RWX,
            global: true,
            privileged: false,
            phys: v.phys(),
        })
    }

    /// Checks the invariants tying the two tables together, on top of
    /// [`VmaTable::check_consistency`]: every VMA's owner is live and lists it as owned; every
    /// holder is live and, unless it is the kernel, lists it as granted; every VMA listed as
    /// owned really is, and no granted list names a VMA twice (it may name VMAs the PD moved
    /// away); live and free PD ids partition the id space with no id on the
    /// free list twice; every live PD's count of rights held ([`PdTable::held`]) is exact; a
    /// blocked PD's callee is running or blocked and returns to it. Returns
    /// the first violation found.
    pub fn check_consistency(&self) -> core::result::Result<(), &'static str> {
        self.vmas.check_consistency()?;
        let mut held = alloc::vec![0u32; self.pds.max_pds()];
        for (id, _) in self.vmas.allocated() {
            for h in self.vmas.holders(id) {
                if let Some(n) = held.get_mut(h.pd.index()) {
                    *n += 1;
                }
            }
        }
        if self
            .pds
            .live()
            .any(|pd| self.pds.held(pd) != held[pd.index()])
        {
            return Err("a PD's count of rights held is off");
        }
        for (id, vte) in self.vmas.allocated() {
            if !self.pds.is_live(vte.owner()) {
                return Err("VMA owned by a dead PD");
            }
            if !self.pds.owned(vte.owner()).any(|o| o == id) {
                return Err("owner does not list its VMA");
            }
            for h in self.vmas.holders(id) {
                if !self.pds.is_live(h.pd) {
                    return Err("permission held by a dead PD");
                }
                if h.pd != PdId::KERNEL && !self.pds.granted(h.pd).any(|g| g == id) {
                    return Err("holder does not list its VMA");
                }
            }
        }
        let mut live = 0;
        for pd in self.pds.live() {
            live += 1;
            for id in self.pds.owned(pd) {
                if self
                    .vmas
                    .vte(id)
                    .is_none_or(|v| !v.is_valid() || v.owner() != pd)
                {
                    return Err("PD lists a VMA it does not own");
                }
            }
            // A granted list may name VMAs moved away (compacted lazily), never one twice.
            let mut listed: Vec<VmaId> = self.pds.granted(pd).collect();
            let n = listed.len();
            listed.sort_by_key(|v| v.base());
            listed.dedup();
            if listed.len() != n {
                return Err("PD lists a VMA twice");
            }
            if let Some(CallState::Blocked { callee, .. }) = self.pds.call_state(pd) {
                match self.pds.call_state(callee) {
                    Some(
                        CallState::Running { return_to, .. } | CallState::Blocked { return_to, .. },
                    ) if return_to == pd => {}
                    _ => return Err("blocked PD whose callee does not return to it"),
                }
            }
        }
        let mut free: Vec<PdId> = self.pds.free_ids().collect();
        if free.iter().any(|p| self.pds.is_live(*p)) {
            return Err("live PD id on the free list");
        }
        free.sort();
        free.dedup();
        if free.len() != self.pds.free_count() || live + free.len() != self.pds.max_pds() {
            return Err("PD ids are not partitioned into live and free");
        }
        Ok(())
    }
}

/// Whether `pd` holds a per-PD right on the valid VMA `id`.
fn holds(vmas: &VmaTable, id: VmaId, pd: PdId) -> bool {
    vmas.vte(id).is_some_and(Vte::is_valid) && vmas.perm_of(id, pd).is_some()
}
