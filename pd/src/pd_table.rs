//! The PD table: which PD ids are live, who created each PD, and the per-PD bookkeeping that
//! `cput` needs to clean up (VMAs the PD owns, VMAs it holds a permission on).
//!
//! PD ids come from a FIFO free list, so a destroyed id goes to the back of the queue and is
//! reused as late as possible (with PCIDs, an id's TLB entries must be flushed before reuse).

use alloc::collections::VecDeque;
use alloc::vec::Vec;

use crate::call::CallState;
use crate::error::{Error, Result};
use crate::pd_id::{MAX_PDS, PdId};
use crate::vaddr::VmaId;

/// Owned and granted VMAs each PD slot has room for without allocating.
const SET_RESERVE: usize = 4;

/// A granted list is compacted (entries the PD no longer holds dropped) when it grows past
/// twice its length after the last compaction, and never below this length.
const GRANTED_SLACK: usize = 16;

#[derive(Clone, Debug)]
struct PdEntry {
    live: bool,
    parent: PdId,
    children: Vec<PdId>,
    call: CallState,
    /// VMAs this PD owns (a small unordered set: PDs own few VMAs).
    owned: Vec<VmaId>,
    /// VMAs this PD holds rights on, plus VMAs it handed on with `pmove` since the list was
    /// last compacted (no duplicates).
    granted: Vec<VmaId>,
    /// Length of `granted` after its last compaction.
    granted_compacted: usize,
    /// Bumped whenever a VMA this PD kept at its last scrub changes (freed, resized, its
    /// rights or attributes changed for any PD), the kept set is set, or the PDs it created
    /// change: see [`PdTable::changes`].
    changes: u64,
    /// The VMAs its last scrub kept.
    kept: Vec<VmaId>,
    /// Valid VMAs on which this PD holds a per-PD right (exact, unlike `granted`).
    held: u32,
    /// For a PD the kernel created (the root of a creation tree): most PDs its tree may hold
    /// besides itself; [`NO_TREE_LIMIT`] for none.
    tree_limit: u16,
}

impl PdEntry {
    const fn dead() -> PdEntry {
        PdEntry {
            live: false,
            parent: PdId::KERNEL,
            children: Vec::new(),
            call: CallState::Idle,
            owned: Vec::new(),
            granted: Vec::new(),
            granted_compacted: 0,
            changes: 0,
            kept: Vec::new(),
            held: 0,
            tree_limit: NO_TREE_LIMIT,
        }
    }
}

/// The tree limit of a PD the kernel set none on: its tree may grow until the ids run out.
pub const NO_TREE_LIMIT: u16 = u16::MAX;

/// Live PDs, their creators and the VMAs each owns or holds rights on.
#[derive(Clone, Debug)]
pub struct PdTable {
    entries: Vec<PdEntry>,
    free: VecDeque<u16>,
}

impl PdTable {
    /// A table of `max_pds` ids (`2..=MAX_PDS`), with only the kernel PD (id 0) live.
    pub fn new(max_pds: usize) -> Result<PdTable> {
        if !(2..=MAX_PDS).contains(&max_pds) {
            return Err(Error::InvalidArgs);
        }
        let mut entries = Vec::with_capacity(max_pds);
        // Every slot gets room for a few owned and granted VMAs up front: PD ids are reused
        // FIFO, so without this each of the first `max_pds` PDs would allocate its sets.
        entries.resize_with(max_pds, || {
            let mut e = PdEntry::dead();
            e.owned.reserve(SET_RESERVE);
            e.granted.reserve(SET_RESERVE);
            e
        });
        entries[0].live = true;
        Ok(PdTable {
            entries,
            free: (1..max_pds as u16).collect(),
        })
    }

    /// Number of ids the table manages.
    pub fn max_pds(&self) -> usize {
        self.entries.len()
    }

    /// Number of free ids.
    pub fn free_count(&self) -> usize {
        self.free.len()
    }

    /// The free ids, next to be reused first.
    pub fn free_ids(&self) -> impl Iterator<Item = PdId> + '_ {
        self.free.iter().map(|&i| PdId::from_bits(i))
    }

    fn entry(&self, pd: PdId) -> Option<&PdEntry> {
        self.entries.get(pd.index()).filter(|e| e.live)
    }

    fn entry_mut(&mut self, pd: PdId) -> Option<&mut PdEntry> {
        self.entries.get_mut(pd.index()).filter(|e| e.live)
    }

    /// True when `pd` names a live PD.
    pub fn is_live(&self, pd: PdId) -> bool {
        self.entry(pd).is_some()
    }

    /// `Ok` for a live PD, [`Error::NoSuchPd`] otherwise.
    pub fn check_live(&self, pd: PdId) -> Result<()> {
        self.entry(pd).map(|_| ()).ok_or(Error::NoSuchPd)
    }

    /// Every live PD, the kernel first.
    pub fn live(&self) -> impl Iterator<Item = PdId> + '_ {
        self.entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.live)
            .map(|(i, _)| PdId::from_bits(i as u16))
    }

    /// The PD that created `pd` (the kernel for itself).
    pub fn parent(&self, pd: PdId) -> Option<PdId> {
        self.entry(pd).map(|e| e.parent)
    }

    /// The live PDs `pd` created.
    pub fn children(&self, pd: PdId) -> &[PdId] {
        self.entry(pd).map_or(&[], |e| &e.children)
    }

    /// The call state of `pd`.
    pub fn call_state(&self, pd: PdId) -> Option<CallState> {
        self.entry(pd).map(|e| e.call)
    }

    pub(crate) fn set_call_state(&mut self, pd: PdId, state: CallState) {
        if let Some(e) = self.entry_mut(pd) {
            e.call = state;
        }
    }

    /// The VMAs `pd` owns.
    pub fn owned(&self, pd: PdId) -> impl Iterator<Item = VmaId> + '_ {
        self.entry(pd)
            .into_iter()
            .flat_map(|e| e.owned.iter().copied())
    }

    /// Every VMA on which `pd` holds a per-PD permission, and possibly some it no longer holds:
    /// a VMA `pd` handed on with `pmove` stays listed until the list is compacted (see
    /// [`PdTable::note_moved_in`]). None are listed for the kernel, PD 0, which is never
    /// destroyed; see `note_granted`.
    pub fn granted(&self, pd: PdId) -> impl Iterator<Item = VmaId> + '_ {
        self.entry(pd)
            .into_iter()
            .flat_map(|e| e.granted.iter().copied())
    }

    /// True when `caller` may control `pd` (enter, resume, destroy it): the kernel or the PD's
    /// creator.
    pub fn may_control(&self, caller: PdId, pd: PdId) -> bool {
        caller == PdId::KERNEL || self.parent(pd) == Some(caller)
    }

    /// The root of `pd`'s creation tree: the PD the kernel created that `pd` descends from
    /// (`pd` itself when the kernel created it; the kernel for itself). `None` for a dead PD.
    pub fn tree_root(&self, pd: PdId) -> Option<PdId> {
        let mut at = pd;
        // Parents are live PDs created earlier, so the walk ends; the bound is defensive.
        for _ in 0..self.entries.len() {
            let parent = self.entry(at)?.parent;
            if parent == PdId::KERNEL || at == PdId::KERNEL {
                return Some(at);
            }
            at = parent;
        }
        None
    }

    /// Every live PD `pd` created, directly or not, children before their parents (the order
    /// in which they can be destroyed one by one).
    pub fn descendants(&self, pd: PdId) -> Vec<PdId> {
        let mut out = Vec::new();
        if pd == PdId::KERNEL {
            return out;
        }
        // Depth-first, each PD listed after its whole subtree.
        let mut stack: Vec<(PdId, usize)> = alloc::vec![(pd, 0)];
        while let Some((at, next)) = stack.pop() {
            match self.children(at).get(next) {
                Some(&child) => {
                    stack.push((at, next + 1));
                    stack.push((child, 0));
                }
                None if at != pd => out.push(at),
                None => {}
            }
        }
        out
    }

    /// Bounds the creation tree rooted at `root` (a PD the kernel created) to `limit` PDs
    /// besides `root`: a `cget` by any PD of the tree that would go beyond it fails with
    /// [`Error::LimitReached`]. [`NO_TREE_LIMIT`] lifts the bound.
    pub fn set_tree_limit(&mut self, root: PdId, limit: u16) -> Result<()> {
        if root == PdId::KERNEL || self.parent(root) != Some(PdId::KERNEL) {
            return Err(Error::InvalidArgs);
        }
        let e = self.entry_mut(root).ok_or(Error::NoSuchPd)?;
        e.tree_limit = limit;
        Ok(())
    }

    /// Creates a PD whose creator is `parent`. [`Error::NoSuchPd`] for a dead parent,
    /// [`Error::NoMemory`] when no id is free, [`Error::LimitReached`] when `parent`'s creation
    /// tree holds as many PDs as its root's limit allows.
    pub fn create(&mut self, parent: PdId) -> Result<PdId> {
        self.check_live(parent)?;
        if parent != PdId::KERNEL {
            let root = self.tree_root(parent).ok_or(Error::NoSuchPd)?;
            let limit = self.entries[root.index()].tree_limit;
            if limit != NO_TREE_LIMIT && self.descendants(root).len() >= usize::from(limit) {
                return Err(Error::LimitReached);
            }
        }
        let raw = self.free.pop_front().ok_or(Error::NoMemory)?;
        let pd = PdId::from_bits(raw);
        let e = &mut self.entries[pd.index()];
        e.live = true;
        e.parent = parent;
        e.call = CallState::Idle;
        e.children.clear();
        e.owned.clear();
        e.granted.clear();
        e.granted_compacted = 0;
        e.changes += 1;
        e.kept.clear();
        e.held = 0;
        e.tree_limit = NO_TREE_LIMIT;
        if let Some(p) = self.entry_mut(parent) {
            p.children.push(pd);
            p.changes += 1;
        }
        Ok(pd)
    }

    /// Takes the owned and granted sets of `pd` out of the table (empty sets for a dead PD).
    /// Give them back with [`PdTable::restore_sets`].
    pub(crate) fn take_sets(&mut self, pd: PdId) -> (Vec<VmaId>, Vec<VmaId>) {
        match self.entry_mut(pd) {
            Some(e) => (
                core::mem::take(&mut e.owned),
                core::mem::take(&mut e.granted),
            ),
            None => (Vec::new(), Vec::new()),
        }
    }

    /// Puts sets taken with [`PdTable::take_sets`] back, emptied (their storage is kept).
    pub(crate) fn restore_sets(
        &mut self,
        pd: PdId,
        mut owned: Vec<VmaId>,
        mut granted: Vec<VmaId>,
    ) {
        owned.clear();
        granted.clear();
        if let Some(e) = self.entries.get_mut(pd.index()) {
            e.owned = owned;
            e.granted = granted;
        }
    }

    /// Puts sets taken with [`PdTable::take_sets`] back as they are, as the PD's new lists.
    pub(crate) fn put_sets(&mut self, pd: PdId, owned: Vec<VmaId>, granted: Vec<VmaId>) {
        if let Some(e) = self.entries.get_mut(pd.index()) {
            e.granted_compacted = granted.len();
            e.owned = owned;
            e.granted = granted;
        }
    }

    /// Frees the id of `pd` (not the kernel), which the caller has already stripped of owned
    /// VMAs and permissions. Its children are handed to the kernel, each becoming the root of
    /// its own tree under the bound `pd`'s tree had.
    pub(crate) fn release(&mut self, pd: PdId) {
        if pd == PdId::KERNEL || !self.is_live(pd) {
            return;
        }
        // The slot keeps the storage of its sets for the next PD that gets it: no allocation
        // on reuse.
        let e = &mut self.entries[pd.index()];
        e.live = false;
        e.call = CallState::Idle;
        e.owned.clear();
        e.granted.clear();
        let parent = core::mem::replace(&mut e.parent, PdId::KERNEL);
        let mut children = core::mem::take(&mut e.children);
        let limit = match self.tree_root(parent) {
            Some(root) if parent != PdId::KERNEL => self.entries[root.index()].tree_limit,
            _ => self.entries[pd.index()].tree_limit,
        };
        if let Some(p) = self.entry_mut(parent)
            && let Some(i) = p.children.iter().position(|c| *c == pd)
        {
            p.children.remove(i);
            p.changes += 1;
        }
        for &c in &children {
            if let Some(e) = self.entry_mut(c) {
                e.parent = PdId::KERNEL;
                e.tree_limit = limit;
                e.changes += 1;
            }
            self.entries[0].children.push(c);
            self.entries[0].changes += 1;
        }
        children.clear();
        self.entries[pd.index()].children = children;
        self.free.push_back(pd.raw());
    }

    /// `pd`'s change counter: bumped by every change to a VMA `pd` kept at its last scrub
    /// ([`PdTable::kept`]: freed, resized, its attributes or any PD's right on it changed),
    /// when the kept set is recorded, and by every change to the PDs `pd` created. What `pd`
    /// owns beside is counted by [`PdTable::owned_count`], the rights it holds by
    /// [`PdTable::held`]. Never goes back (not even when the id is reused); `None` for a dead
    /// PD.
    pub fn changes(&self, pd: PdId) -> Option<u64> {
        self.entry(pd).map(|e| e.changes)
    }

    /// The VMAs `pd`'s last scrub kept (see [`PdTable::changes`]).
    pub fn kept(&self, pd: PdId) -> &[VmaId] {
        self.entry(pd).map_or(&[], |e| &e.kept)
    }

    /// Whether `pd` is live, idle or suspended (not running, not waiting for a callee), its
    /// change counter ([`PdTable::changes`]) reads `changes`, and it owns `kept` VMAs and holds
    /// rights on `kept` VMAs: what [`crate::PrivLib::scrubbed_since`] asks of its entry.
    pub fn unchanged_since(&self, pd: PdId, changes: u64, kept: usize) -> bool {
        self.entry(pd).is_some_and(|e| {
            e.changes == changes
                && e.held as usize == kept
                && e.owned.len() == kept
                && matches!(e.call, CallState::Idle | CallState::Suspended { .. })
        })
    }

    /// How many VMAs `pd` owns.
    pub fn owned_count(&self, pd: PdId) -> usize {
        self.entry(pd).map_or(0, |e| e.owned.len())
    }

    /// Records `kept` as the VMAs `pd`'s last scrub kept, and bumps its change counter;
    /// `kept` gets the list it replaces (so that its room is reused).
    pub(crate) fn swap_kept(&mut self, pd: PdId, kept: &mut Vec<VmaId>) {
        if let Some(e) = self.entry_mut(pd) {
            core::mem::swap(&mut e.kept, kept);
            e.changes += 1;
        }
    }

    /// The VMA `id`, owned by `owner`, changed: bumps `owner`'s change counter if its last
    /// scrub kept `id`.
    #[inline(always)]
    pub(crate) fn touch_vma(&mut self, owner: PdId, id: VmaId) {
        if let Some(e) = self.entries.get_mut(owner.index())
            && e.kept.contains(&id)
        {
            e.changes += 1;
        }
    }

    /// The number of valid VMAs on which `pd` holds a per-PD right (0 for a dead PD).
    pub fn held(&self, pd: PdId) -> u32 {
        self.entry(pd).map_or(0, |e| e.held)
    }

    /// Bumps `pd`'s change counter ([`PdTable::changes`]).
    #[inline(always)]
    pub(crate) fn touch(&mut self, pd: PdId) {
        if let Some(e) = self.entries.get_mut(pd.index()) {
            e.changes += 1;
        }
    }

    /// `pd` gained (`true`) or lost a per-PD right on a valid VMA ([`PdTable::held`]).
    #[inline(always)]
    pub(crate) fn note_held(&mut self, pd: PdId, gained: bool) {
        if let Some(e) = self.entries.get_mut(pd.index()) {
            if gained {
                e.held += 1;
            } else {
                e.held = e.held.saturating_sub(1);
            }
        }
    }

    #[inline(always)]
    pub(crate) fn note_owned(&mut self, pd: PdId, vma: VmaId, owned: bool) {
        if let Some(e) = self.entry_mut(pd) {
            set_membership(&mut e.owned, vma, owned);
        }
    }

    /// `vma` was moved to `pd` by `pmove`: lists it (once). The PD it came from keeps its entry
    /// (a move costs one list search, and an ArgBuf that comes back finds its entry still
    /// there). Returns true when `pd`'s list has grown enough to be compacted with
    /// [`PdTable::retain_granted`].
    #[inline(always)]
    pub(crate) fn note_moved_in(&mut self, pd: PdId, vma: VmaId) -> bool {
        if pd == PdId::KERNEL {
            return false;
        }
        let Some(e) = self.entry_mut(pd) else {
            return false;
        };
        if e.granted.iter().rev().any(|v| *v == vma) {
            return false;
        }
        e.granted.push(vma);
        e.granted.len() > GRANTED_SLACK.max(2 * e.granted_compacted)
    }

    /// Keeps only the entries of `pd`'s granted list for which `held` is true.
    pub(crate) fn retain_granted(&mut self, pd: PdId, held: impl Fn(VmaId) -> bool) {
        if let Some(e) = self.entry_mut(pd) {
            e.granted.retain(|v| held(*v));
            e.granted_compacted = e.granted.len();
        }
    }

    /// Adds `vma` to or removes it from `pd`'s granted list. The kernel's list is not kept:
    /// only `cput` reads the lists, and PD 0 is never destroyed, while every ArgBuf that moves
    /// to or from the kernel would otherwise search its long list.
    #[inline]
    pub(crate) fn note_granted(&mut self, pd: PdId, vma: VmaId, granted: bool) {
        if pd == PdId::KERNEL {
            return;
        }
        if let Some(e) = self.entry_mut(pd) {
            set_membership(&mut e.granted, vma, granted);
        }
    }
}

/// Adds `vma` to `set` (once) or removes it. Searches from the newest end: the VMAs that come
/// and go most (ArgBufs moving between PDs) are the recently added ones, while the kernel's set
/// also holds long-lived VMAs.
#[inline(always)]
fn set_membership(set: &mut Vec<VmaId>, vma: VmaId, member: bool) {
    let at = set.iter().rposition(|v| *v == vma);
    match (member, at) {
        (true, None) => set.push(vma),
        (false, Some(i)) => {
            set.swap_remove(i);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_come_from_a_fifo_free_list() {
        let mut t = PdTable::new(4).unwrap();
        assert!(t.is_live(PdId::KERNEL));
        let a = t.create(PdId::KERNEL).unwrap();
        let b = t.create(a).unwrap();
        let c = t.create(a).unwrap();
        assert_eq!(t.create(a), Err(Error::NoMemory));
        assert_eq!(t.children(a), &[b, c]);
        assert_eq!(t.parent(b), Some(a));
        assert!(t.may_control(a, b) && t.may_control(PdId::KERNEL, b) && !t.may_control(c, b));
        t.release(b);
        assert!(!t.is_live(b));
        assert_eq!(t.check_live(b), Err(Error::NoSuchPd));
        assert_eq!(t.children(a), &[c]);
        t.release(a);
        assert_eq!(t.parent(c), Some(PdId::KERNEL));
        assert_eq!(t.free_ids().collect::<Vec<_>>(), [b, a]);
        assert_eq!(t.create(PdId::KERNEL), Ok(b));
        t.release(PdId::KERNEL);
        assert!(t.is_live(PdId::KERNEL));
        assert_eq!(t.create(a), Err(Error::NoSuchPd));
    }

    #[test]
    fn trees_are_bounded_by_their_roots_limit() {
        let mut t = PdTable::new(64).unwrap();
        let root = t.create(PdId::KERNEL).unwrap();
        assert_eq!(t.set_tree_limit(PdId::KERNEL, 3), Err(Error::InvalidArgs));
        t.set_tree_limit(root, 3).unwrap();
        let a = t.create(root).unwrap();
        let b = t.create(a).unwrap();
        let c = t.create(b).unwrap();
        assert_eq!(t.set_tree_limit(a, 9), Err(Error::InvalidArgs));
        for creator in [root, a, b, c] {
            assert_eq!(t.create(creator), Err(Error::LimitReached));
            assert_eq!(t.tree_root(creator), Some(root));
        }
        assert_eq!(t.descendants(root), [c, b, a]);
        assert_eq!(t.descendants(a), [c, b]);
        assert!(t.descendants(c).is_empty());
        // Another tree is not affected, nor the kernel.
        let other = t.create(PdId::KERNEL).unwrap();
        assert!(t.create(other).is_ok());
        t.release(c);
        let c2 = t.create(a).unwrap();
        assert_eq!(t.create(root), Err(Error::LimitReached));
        // Released with children: they become roots under the same bound.
        t.release(a);
        assert_eq!(t.tree_root(b), Some(b));
        assert_eq!(t.tree_root(c2), Some(c2));
        t.create(b).unwrap();
        t.create(b).unwrap();
        t.create(b).unwrap();
        assert_eq!(t.create(b), Err(Error::LimitReached));
        // A reused slot starts without a bound.
        t.release(root);
        let fresh = t.create(PdId::KERNEL).unwrap();
        for _ in 0..5 {
            t.create(fresh).unwrap();
        }
    }

    #[test]
    fn descendants_come_children_first() {
        let mut t = PdTable::new(16).unwrap();
        let r = t.create(PdId::KERNEL).unwrap();
        let a = t.create(r).unwrap();
        let a1 = t.create(a).unwrap();
        let b = t.create(r).unwrap();
        let a2 = t.create(a).unwrap();
        let a11 = t.create(a1).unwrap();
        let d = t.descendants(r);
        assert_eq!(d.len(), 5);
        let pos = |p: PdId| d.iter().position(|x| *x == p).unwrap();
        for (child, parent) in [(a1, a), (a2, a), (a11, a1)] {
            assert!(pos(child) < pos(parent));
        }
        assert!(d.contains(&b));
        assert!(t.descendants(PdId::KERNEL).is_empty());
    }

    #[test]
    fn size_is_bounded() {
        assert!(PdTable::new(1).is_err());
        assert!(PdTable::new(MAX_PDS + 1).is_err());
        assert_eq!(PdTable::new(MAX_PDS).unwrap().free_count(), MAX_PDS - 1);
    }
}
