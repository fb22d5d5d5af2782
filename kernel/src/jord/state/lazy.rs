//! Lazily forked VMAs (μFork's copy-on-access, copy-on-pointer-access and copy-on-write
//! modes): a child μprocess's area whose pages are copied from its parent's area when first
//! needed instead of during `fork`.
//!
//! At fork every page the parent holds becomes *pending* in the child ([`LazyPages`]) and the
//! parent's leaves over its area are cleared. From then on the VLB-miss path settles pages:
//!
//! - the child's first access to a pending page copies it from the parent into the child's own
//!   frame, relocating the words that point into the parent's area, or (sharing modes, a page
//!   without tags, a read) maps the parent's frame read-only in the child
//!   ([`fjord_ufork::lazy::on_first_touch`]);
//! - the parent's read of a page some child still lacks is mapped read-only, so that its first
//!   write faults; that write first copies the page to every child that lacks it (and takes
//!   away a child's read-only mapping of the parent's frame);
//! - the kernel's own reads and writes of either area ([`Jord::read_page`], [`Jord::write_page`])
//!   settle the page the same way first;
//! - before the parent's area is freed, every page a child still lacks is copied.
//!
//! Tags: the parent's tag source, which μFork chose at fork ([`LazyFork::source`]; emulated
//! tags as the boot option `tags=` says), as for a full copy. Jord only asks it which words of
//! a page are pointers.
//!
//! A chain of forks (a child forking before it has all its pages) settles from the top: a
//! grandchild's copy first settles the child's page.

use super::*;
use alloc::collections::BTreeMap;
use alloc::sync::Arc;
use core::mem::MaybeUninit;
use fjord_ufork::area::Area;
use fjord_ufork::copy_mode::{Access, CopyMode};
use fjord_ufork::lazy::{FirstTouch, LazyPages, on_first_touch};
use fjord_ufork::relocate::relocate_page_tallied;
use fjord_ufork::source::{TagSource, Tally};
use fjord_ufork::tags::{PageWords, SLOTS_PER_PAGE};

/// A lazy fork to set up: the parent's area VMA and the child's, of the same length.
#[derive(Clone)]
pub struct LazyFork {
    /// The parent's PD.
    pub parent_pd: PdId,
    /// Base of the parent's area VMA.
    pub parent_base: u64,
    /// The child's PD.
    pub child_pd: PdId,
    /// Base of the child's area VMA (fresh: nothing touched yet).
    pub child_base: u64,
    /// The parent's area (its size class), for telling pointers.
    pub from: Area,
    /// The child's area.
    pub to: Area,
    /// How the child gets its pages (not [`CopyMode::Full`]).
    pub mode: CopyMode,
    /// The parent's tag source (μFork's, as chosen at boot): what its pages' pointers are.
    pub source: Arc<dyn TagSource + Send + Sync>,
}

/// One lazily forked VMA: where its pending pages come from.
pub(super) struct Link {
    child_pd: PdId,
    source: u64,
    from: Area,
    to: Area,
    mode: CopyMode,
    pages: LazyPages,
    /// The source VMA's tag source as of the fork.
    tags: Arc<dyn TagSource + Send + Sync>,
}

/// Every lazily forked VMA, by base, and for each source VMA the VMAs that still lack pages
/// of it.
#[derive(Default)]
pub(super) struct LazyCopies {
    links: BTreeMap<u64, Link>,
    dependents: BTreeMap<u64, Vec<u64>>,
}

impl LazyCopies {
    /// True when no VMA is lazily forked (the VLB-miss path then skips all of this).
    pub(super) fn is_empty(&self) -> bool {
        self.links.is_empty()
    }
}

/// Counters of lazy forks.
#[derive(Clone, Copy, Debug, Default)]
pub struct LazyStats {
    /// Pages copied for a child (on its access, its parent's write, or its parent's end).
    pub pages_copied: u64,
    /// Pages a child reads from its parent's frame.
    pub pages_shared: u64,
    /// Pages left pending at fork.
    pub pages_deferred: u64,
    /// Words relocated in the pages copied, by the tag source that tagged them.
    pub relocated: Tally,
}

/// `perm` without write.
fn read_only(perm: Perm) -> Perm {
    Perm::from_bits_truncate(perm.bits() & !Perm::W.bits())
}

impl Jord {
    /// Makes the VMA at `f.child_base` a lazy copy of the one at `f.parent_base`: every page
    /// the parent holds (touched, or itself still pending from its own parent) becomes
    /// pending in the child, and the parent's leaves over its area (but a shared prefix) are
    /// cleared so that its next write faults. Returns the flushes owed and the number of pages left pending.
    pub fn fork_lazily(&mut self, f: &LazyFork) -> Result<(Pending, usize), Error> {
        let parent = self.backing_mut(f.parent_base).ok_or(Error::NotMapped)?;
        let pages = parent.pages;
        let child_pages = self
            .backing_mut(f.child_base)
            .ok_or(Error::NotMapped)?
            .pages;
        if child_pages != pages || f.mode == CopyMode::Full {
            return Err(Error::InvalidArgs);
        }
        let mut lazy = LazyPages::new(pages);
        for i in self.initialised_pages(f.parent_base) {
            lazy.mark_pending(i);
        }
        let deferred = lazy.pending_count();
        self.lazy.links.insert(
            f.child_base,
            Link {
                child_pd: f.child_pd,
                source: f.parent_base,
                from: f.from,
                to: f.to,
                mode: f.mode,
                pages: lazy,
                tags: f.source.clone(),
            },
        );
        self.lazy
            .dependents
            .entry(f.parent_base)
            .or_default()
            .push(f.child_base);
        self.lazy_stats.pages_deferred += deferred as u64;
        // A shared prefix (a program's code) is never written: its leaves stay.
        let keep = self.shared_prefix_len(f.parent_base);
        let len = pages as u64 * PAGE_SIZE - keep;
        Ok((
            self.revoke_leaves(f.parent_pd, f.parent_base + keep, len),
            deferred,
        ))
    }

    /// The flushes lazy copies owe since the last call (a child's read-only mapping of its
    /// parent's frame taken away while the child may run on another CPU); `None` when none
    /// are owed.
    #[inline]
    pub fn take_lazy_flushes(&mut self) -> Option<Pending> {
        if self.lazy_owed.is_empty() {
            None
        } else {
            Some(core::mem::take(&mut self.lazy_owed))
        }
    }

    /// Counters of lazy forks.
    pub fn lazy_stats(&self) -> LazyStats {
        self.lazy_stats
    }

    /// Pages the lazily forked VMA at `base` still lacks (0 for any other VMA).
    pub fn lazy_pending(&self, base: u64) -> usize {
        self.lazy
            .links
            .get(&base)
            .map_or(0, |l| l.pages.pending_count())
    }

    /// Pending or shared pages of the lazily forked VMA at `base` (they count as held).
    pub(super) fn lazy_held(&self, base: u64) -> Vec<usize> {
        self.lazy
            .links
            .get(&base)
            .map(|l| l.pages.pending_pages().collect())
            .unwrap_or_default()
    }

    /// Copies page `i` of the lazily forked VMA at `base` from its source if it is pending
    /// (the source's page settled first); nothing for a page it has or a VMA that is not
    /// lazily forked.
    pub(super) fn settle_page(&mut self, base: u64, i: usize) {
        self.settle_page_as(base, i, false);
    }

    /// Copies pages `pages` of the lazily forked VMA at `base` now, relocated whatever the
    /// mode: what the child needs from its first instruction (the top of its stack).
    /// The child has not run yet, so its leaves for those pages go in now (read-write: they are
    /// its own) instead of one VLB miss each.
    pub fn settle_eagerly(&mut self, base: u64, pages: core::ops::Range<usize>) {
        let Some(pd) = self.lazy.links.get(&base).map(|l| l.child_pd) else {
            return;
        };
        for i in pages.clone() {
            self.settle_page_as(base, i, true);
        }
        let root = self.root_of(pd);
        let flags = crate::jord::vlb::leaf_flags(Perm::RW);
        for i in pages {
            let Some(pa) = self.page_phys(base, i) else {
                break;
            };
            let va = base + i as u64 * PAGE_SIZE;
            if map_leaf(&mut self.leaf_hints, pd, root, va, pa, flags) {
                self.stats.prefills += 1;
            }
        }
    }

    /// [`Jord::settle_page`], relocating even in copy-on-write mode when `relocate`.
    fn settle_page_as(&mut self, base: u64, i: usize, relocate: bool) {
        let Some(link) = self.lazy.links.get(&base) else {
            return;
        };
        if !link.pages.is_pending(i) {
            return;
        }
        let (source, from, to, mode) = (link.source, link.from, link.to, link.mode);
        let mut buf = MaybeUninit::uninit();
        let words = self.source_words(source, i, &mut buf);
        // Copy-on-write never relocates; the other modes relocate what points into the
        // source's area (inferred tags), which leaves a page without tags as it is.
        if (relocate || mode != CopyMode::CopyOnWrite)
            && let Some(l) = self.lazy.links.get(&base)
        {
            let page = from.base() + i as u64 * PAGE_SIZE;
            let _ = relocate_page_tallied(
                &*l.tags,
                &from,
                &to,
                page,
                words,
                &mut self.lazy_stats.relocated,
            );
        }
        if let Some(b) = self.backing_mut(base) {
            // The whole page is written: no need to zero it first.
            b.set_initialised(i);
            b.frames.write_words(i * PAGE_SIZE as usize, words);
        }
        self.lazy_stats.pages_copied += 1;
        let (shared, pd) = match self.lazy.links.get_mut(&base) {
            Some(l) => (l.pages.settle(i), l.child_pd),
            None => return,
        };
        if shared {
            let p = self.revoke_leaves(pd, base + i as u64 * PAGE_SIZE, PAGE_SIZE);
            self.lazy_owed.absorb(p);
        }
        self.unlink_if_settled(base);
    }

    /// The contents of page `i` of the VMA at `base` as its holder sees them, settling it
    /// first if it is itself lazily forked (zero for a page never touched), written into `out`,
    /// which it returns.
    fn source_words<'a>(
        &mut self,
        base: u64,
        i: usize,
        out: &'a mut MaybeUninit<PageWords>,
    ) -> &'a mut PageWords {
        self.settle_page(base, i);
        match self.backing_mut(base) {
            Some(b) if b.is_initialised(i) => b.frames.read_words(i * PAGE_SIZE as usize, out),
            _ => out.write([0; SLOTS_PER_PAGE]),
        }
    }

    /// Forgets the link of `base` once it lacks nothing.
    fn unlink_if_settled(&mut self, base: u64) {
        if self
            .lazy
            .links
            .get(&base)
            .is_some_and(|l| l.pages.is_settled())
            && let Some(l) = self.lazy.links.remove(&base)
        {
            self.forget_dependent(l.source, base);
        }
    }

    fn forget_dependent(&mut self, source: u64, child: u64) {
        if let Some(d) = self.lazy.dependents.get_mut(&source) {
            d.retain(|&c| c != child);
            if d.is_empty() {
                self.lazy.dependents.remove(&source);
            }
        }
    }

    /// Before page `i` of the VMA at `base` is written (by its PD or the kernel): settles it if
    /// it is pending, and copies it to every VMA forked from this one that still lacks it.
    pub(super) fn before_write(&mut self, base: u64, i: usize) {
        if self.lazy.is_empty() {
            return;
        }
        self.settle_page(base, i);
        let deps: Vec<u64> = self.lazy.dependents.get(&base).cloned().unwrap_or_default();
        for d in deps {
            self.settle_page(d, i);
        }
    }

    /// True when some VMA forked from the one at `base` still lacks its page `i`.
    fn lacked_by_dependents(&self, base: u64, i: usize) -> bool {
        self.lazy.dependents.get(&base).is_some_and(|d| {
            d.iter().any(|c| {
                self.lazy
                    .links
                    .get(c)
                    .is_some_and(|l| l.pages.is_pending(i))
            })
        })
    }

    /// The VLB-miss path of a lazily forked or forked-from VMA (`base`, page `i`), for an
    /// `access` of a PD holding `perm`: settles what the access
    /// needs and returns the frame to map and the rights of the leaf, or `None` when nothing
    /// about the page is lazy.
    pub(in crate::jord) fn lazy_fill(
        &mut self,
        base: u64,
        i: usize,
        access: Perm,
        perm: Perm,
    ) -> Option<(u64, Perm)> {
        if self.lazy.is_empty() {
            return None;
        }
        let write = access.contains(Perm::W);
        let pending = self
            .lazy
            .links
            .get(&base)
            .is_some_and(|l| l.pages.is_pending(i));
        let lacked = self.lacked_by_dependents(base, i);
        if !pending && !lacked {
            return None;
        }
        if write {
            self.before_write(base, i);
            return Some((self.page_phys(base, i)?, perm));
        }
        if pending {
            let (source, from, mode) = {
                let l = self.lazy.links.get(&base)?;
                (l.source, l.from, l.mode)
            };
            let mut buf = MaybeUninit::uninit();
            let words = self.source_words(source, i, &mut buf);
            let page = from.base() + i as u64 * PAGE_SIZE;
            let has_tags = self.lazy.links.get(&base)?.tags.page_has_tags(page, words);
            let touch = on_first_touch(mode, has_tags, Access::Read);
            if touch == FirstTouch::Share {
                if let Some(l) = self.lazy.links.get_mut(&base) {
                    l.pages.share(i);
                }
                self.lazy_stats.pages_shared += 1;
                // The source's frame, read-only: nothing in it points anywhere relocation
                // would have changed, and the source's first write settles the page.
                return Some((self.page_phys(source, i)?, read_only(perm)));
            }
            self.settle_page(base, i);
        }
        // Settling this VMA's own page changed nothing its dependents lack.
        let perm = if lacked { read_only(perm) } else { perm };
        Some((self.page_phys(base, i)?, perm))
    }

    /// The physical address of page `i` of the VMA at `base`, initialised first.
    fn page_phys(&mut self, base: u64, i: usize) -> Option<u64> {
        let b = self.backing_mut(base)?;
        if i >= b.pages {
            return None;
        }
        b.initialise(i);
        Some(b.phys() + i as u64 * PAGE_SIZE)
    }

    /// Settles every page of the VMA at `base` it lacks and every page VMAs forked from it
    /// lack: before the kernel reads or writes the VMA as a whole, or it shrinks.
    pub(super) fn settle_all(&mut self, base: u64) {
        if self.lazy.is_empty() {
            return;
        }
        for i in self.lazy_held(base) {
            self.settle_page(base, i);
        }
        self.settle_dependents(base);
    }

    /// Settles every page the VMAs forked from the one at `base` still lack.
    fn settle_dependents(&mut self, base: u64) {
        if let Some(deps) = self.lazy.dependents.get(&base).cloned() {
            for d in deps {
                for i in self.lazy_held(d) {
                    self.settle_page(d, i);
                }
            }
        }
    }

    /// Before the VMA at `base` loses its frames: every VMA forked from it gets its pending
    /// pages now, and if it was lazily forked itself it leaves its source's dependents.
    pub(super) fn detach_lazy(&mut self, base: u64) {
        if self.lazy.is_empty() {
            return;
        }
        self.settle_dependents(base);
        self.lazy.dependents.remove(&base);
        if let Some(l) = self.lazy.links.remove(&base) {
            self.forget_dependent(l.source, base);
            // Its own dependents were settled above; what it lacked dies with it.
        }
    }
}
