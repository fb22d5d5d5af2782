//! Lazily forked areas (μFork's copy-on-access, copy-on-pointer-access and copy-on-write
//! modes): a child μprocess's area whose pages are copied from its parent's area when first
//! needed instead of during `fork`.
//!
//! μFork is the [`Pager`] of both areas of a lazy fork: Jord calls it, under Jord's lock,
//! before a page of either is mapped, read, written or freed, and it works through Jord's
//! [`Frames`] view. Its state (which pages each child still lacks) is its own, under its own
//! lock, taken inside Jord's.
//!
//! At fork every page the parent holds becomes *pending* in the child
//! ([`fjord_ufork::lazy::LazyPages`]) and the parent's leaves over its area are cleared. From
//! then on:
//!
//! - the child's first access to a pending page copies it from the parent into the child's own
//!   frame, relocating the words that point into the parent's area, or (sharing modes, a page
//!   without tags, a read) maps the parent's frame read-only in the child
//!   ([`fjord_ufork::lazy::on_first_touch`]);
//! - the parent's read of a page some child still lacks is mapped read-only, so that its first
//!   write faults; that write first copies the page to every child that lacks it, unrelocated
//!   (*staged*: the child relocates it on its first access, so the writer pays for a copy
//!   alone), except that the one child mapping the parent's frame read-only (a shared page)
//!   keeps that frame and the parent takes the copy, as Linux's copy-on-write does, so no
//!   other CPU's TLB changes;
//! - a miss of either area also maps the pages around it that the area holds itself
//!   ([`Pager::around`]; read-only where a child lacks them), so a parent touching its memory
//!   again after the fork took its leaves away takes one miss per 16 pages, not one per page;
//! - the kernel's own reads and writes of either area settle the page the same way first;
//! - before the parent's area is freed, every page a child still lacks is copied.
//!
//! Tags: the parent's tag source, which μFork chose at fork ([`LazyFork::source`]; emulated
//! tags as the boot option `tags=` says), as for a full copy.
//!
//! A chain of forks (a child forking before it has all its pages) settles from the top: a
//! grandchild's copy first settles the child's page.

use crate::jord::state::{FAULT_AROUND, Frames, Jord, PageWords, Pager, Pending};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::mem::MaybeUninit;
use fjord_kernel::layout::PAGE_SIZE;
use fjord_pd::{Error, PdId, Perm};
use fjord_ufork::area::Area;
use fjord_ufork::area_map::{AreaMap, Recycle};
use fjord_ufork::copy_mode::{Access, CopyMode};
use fjord_ufork::lazy::{FirstTouch, LazyPages, on_first_touch};
use fjord_ufork::relocate::relocate_page_from;
use fjord_ufork::source::{TagSource, Tally};
use spin::Mutex;

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

/// Counters of lazy forks.
#[derive(Clone, Copy, Debug, Default)]
pub struct LazyStats {
    /// Pages copied for a child (on its access, its parent's write, or its parent's end).
    pub pages_copied: u64,
    /// Pages a child reads from its parent's frame.
    pub pages_shared: u64,
    /// Pages left pending at fork.
    pub pages_deferred: u64,
    /// Pages a source's write copied into a child unrelocated, to be relocated on the child's
    /// first access (counted in `pages_copied` too).
    pub pages_staged: u64,
    /// Shared pages a child kept the frame of when its source wrote them (the source took the
    /// copy; counted in `pages_copied` too).
    pub frames_given: u64,
    /// Pages a child discarded before it had settled them (never copied, or a staged copy
    /// freed unread).
    pub pages_discarded: u64,
    /// Words relocated in the pages copied, by the tag source that tagged them.
    pub relocated: Tally,
}

/// Where a lazily forked area's pending pages come from.
struct Link {
    child_pd: PdId,
    source: u64,
    from: Area,
    to: Area,
    mode: CopyMode,
    /// The source area's tag source as of the fork.
    tags: Arc<dyn TagSource + Send + Sync>,
}

/// What μFork knows of one area: a lazily forked area's link and pages, an area forked from's
/// dependents, and a forked area's count of copied pages. Recycled with its allocations.
#[derive(Default)]
struct AreaLazy {
    /// Where its pending pages come from, while it lacks some.
    link: Option<Link>,
    /// Its pending and shared pages (while `link` is some).
    pages: LazyPages,
    /// The areas forked from it that still lack pages of it.
    dependents: Vec<u64>,
    /// The PD whose area it is (known once it was forked or forked from).
    owner: Option<PdId>,
    /// Pages copied into it since its fork (on its access, its source's write or its source's
    /// end): the memory its fork added. Kept after it has every page, until it goes
    /// ([`forget_copied`]).
    copied: Option<u64>,
}

impl AreaLazy {
    fn is_pending(&self, i: usize) -> bool {
        self.link.is_some() && self.pages.is_pending(i)
    }

    /// Whether it lacks page `i` (pending and not staged): its source's write copies it first.
    fn lacks(&self, i: usize) -> bool {
        self.link.is_some() && self.pages.lacks(i)
    }

    /// Whether its leaf for page `i` maps its source's frame (copy-on-pointer-access sharing),
    /// and nothing forked from it lacks the page.
    fn shares(&self, i: usize) -> bool {
        self.link.is_some() && self.pages.is_shared(i) && self.dependents.is_empty()
    }

    /// Neither lazily forked nor forked from: μFork no longer pages it.
    fn is_unpaged(&self) -> bool {
        self.link.is_none() && self.dependents.is_empty()
    }

    /// Unpaged, and no count of copied pages to keep: nothing of it is left.
    fn is_spent(&self) -> bool {
        self.is_unpaged() && self.copied.is_none()
    }
}

impl Recycle for AreaLazy {
    fn recycle(&mut self) {
        self.link = None;
        self.owner = None;
        self.dependents.clear();
        self.copied = None;
    }
}

/// Every area μFork knows of, by base.
struct LazyCopies {
    /// The Jord state the bases below belong to.
    generation: u64,
    areas: AreaMap<AreaLazy>,
    stats: LazyStats,
}

static LAZY: Mutex<LazyCopies> = Mutex::new(LazyCopies {
    generation: 0,
    areas: AreaMap::new(),
    stats: LazyStats {
        pages_copied: 0,
        pages_shared: 0,
        pages_deferred: 0,
        frames_given: 0,
        pages_staged: 0,
        pages_discarded: 0,
        relocated: Tally {
            precise: 0,
            inferred: 0,
            both: 0,
            other: 0,
        },
    },
});

/// μFork's pager of lazily forked areas and the areas they were forked from.
struct LazyPager;

static PAGER: LazyPager = LazyPager;

/// The lazy-copy state for an operation on `f`'s Jord state (emptied first if it belonged to
/// an earlier one: a reset Jord reuses VMA bases).
fn state<'a>(
    f: &Frames<'_>,
    g: &'a mut spin::MutexGuard<'static, LazyCopies>,
) -> &'a mut LazyCopies {
    if g.generation != f.generation() {
        g.generation = f.generation();
        g.areas.clear();
    }
    g
}

impl Pager for LazyPager {
    fn fill(
        &self,
        f: &mut Frames<'_>,
        base: u64,
        i: usize,
        access: Perm,
        perm: Perm,
    ) -> Option<(u64, Perm)> {
        let mut g = LAZY.lock();
        state(f, &mut g).fill(f, base, i, access, perm)
    }

    fn around(
        &self,
        f: &mut Frames<'_>,
        base: u64,
        pages: (usize, u32),
        perm: Perm,
        out: &mut [Option<(u64, Perm)>; FAULT_AROUND],
    ) {
        let mut g = LAZY.lock();
        state(f, &mut g).around(f, base, pages, perm, out);
    }

    fn before_read(&self, f: &mut Frames<'_>, base: u64, i: usize) {
        let mut g = LAZY.lock();
        state(f, &mut g).settle_page(f, base, i, false);
    }

    fn before_write(&self, f: &mut Frames<'_>, base: u64, i: usize) {
        let mut g = LAZY.lock();
        state(f, &mut g).before_write(f, base, i);
    }

    fn before_discard(&self, f: &mut Frames<'_>, base: u64, i: usize) {
        let mut g = LAZY.lock();
        state(f, &mut g).before_discard(f, base, i);
    }

    fn before_whole(&self, f: &mut Frames<'_>, base: u64) {
        let mut g = LAZY.lock();
        state(f, &mut g).settle_all(f, base);
    }

    fn held(&self, base: u64) -> Vec<usize> {
        LAZY.lock().held(base)
    }

    fn detach(&self, f: &mut Frames<'_>, base: u64) {
        let mut g = LAZY.lock();
        state(f, &mut g).detach(f, base);
    }
}

/// Makes the area at `l.child_base` a lazy copy of the one at `l.parent_base` (see the module
/// documentation), with pages `eager` of the child copied and relocated now whatever the mode
/// (what it needs from its first instruction: the top of its stack, from slot `eager.1` of
/// its first page on: the slots below are dead and zero) and its leaves for them installed.
/// Returns the flushes owed and the number of pages left pending.
pub fn fork(
    j: &mut Jord,
    l: &LazyFork,
    eager: (core::ops::Range<usize>, usize),
) -> Result<(Pending, usize), Error> {
    let f = &mut j.frames();
    let mut g = LAZY.lock();
    let s = state(f, &mut g);
    let forked = s.fork(f, l)?;
    s.settle_eagerly(f, l.child_base, eager);
    Ok(forked)
}

/// Pages copied into the lazily forked area at `base` since its fork (0 for an area that was
/// not lazily forked): the memory its fork added, what Linux's copy-on-write counts as a
/// process's private dirty pages.
pub fn copied_pages(base: u64) -> u64 {
    crate::jord::with(|_| {
        LAZY.lock()
            .areas
            .get(base)
            .and_then(|a| a.copied)
            .unwrap_or(0)
    })
}

/// Forgets the copy count of the area at `base`, which is going.
pub fn forget_copied(base: u64) {
    crate::jord::with(|j| forget_copied_in(j, base));
}

/// [`forget_copied`], under Jord's lock (which `_j` holds).
pub fn forget_copied_in(_j: &mut Jord, base: u64) {
    let mut g = LAZY.lock();
    if let Some(a) = g.areas.get_mut(base) {
        a.copied = None;
        if a.is_spent() {
            g.areas.remove(base);
        }
    }
}

/// Counters of lazy forks.
pub fn stats() -> LazyStats {
    crate::jord::with(|_| LAZY.lock().stats)
}

impl LazyCopies {
    fn fork(&mut self, f: &mut Frames<'_>, l: &LazyFork) -> Result<(Pending, usize), Error> {
        let pages = f.pages(l.parent_base).ok_or(Error::NotMapped)?;
        let child_pages = f.pages(l.child_base).ok_or(Error::NotMapped)?;
        if child_pages != pages || l.mode == CopyMode::Full || l.parent_base == l.child_base {
            return Err(Error::InvalidArgs);
        }
        self.areas.get_or_insert(l.parent_base);
        let child = self.areas.get_or_insert(l.child_base);
        child.pages.reset(pages);
        // What the parent holds: its own pages and those it still lacks of its own parent.
        child
            .pages
            .mark_pending_words(f.initialised_bits(l.parent_base));
        child.link = Some(Link {
            child_pd: l.child_pd,
            source: l.parent_base,
            from: l.from,
            to: l.to,
            mode: l.mode,
            tags: l.source.clone(),
        });
        child.copied = Some(0);
        child.owner = Some(l.child_pd);
        let (parent, child) = self.areas.get2_mut(l.parent_base, l.child_base);
        let (Some(parent), Some(child)) = (parent, child) else {
            return Err(Error::InvalidArgs);
        };
        parent.owner = Some(l.parent_pd);
        if parent.link.is_some() {
            child.pages.mark_pending_words(parent.pages.pending_words());
        }
        parent.dependents.push(l.child_base);
        let deferred = child.pages.pending_count();
        f.set_pager(l.parent_base, Some(&PAGER));
        f.set_pager(l.child_base, Some(&PAGER));
        self.stats.pages_deferred += deferred as u64;
        // A shared prefix (a program's code) is never written: its leaves stay.
        let keep = f.shared_prefix_len(l.parent_base);
        let len = pages as u64 * PAGE_SIZE - keep;
        Ok((
            f.revoke_area(l.parent_pd, l.parent_base + keep, len),
            deferred,
        ))
    }

    /// Pending or shared pages of the lazily forked area at `base` (they count as held).
    fn held(&self, base: u64) -> Vec<usize> {
        self.areas
            .get(base)
            .filter(|a| a.link.is_some())
            .map(|a| a.pages.pending_pages().collect())
            .unwrap_or_default()
    }

    /// The areas forked from the one at `base` that still lack pages of it.
    fn dependents_of(&self, base: u64) -> Vec<u64> {
        self.areas
            .get(base)
            .map(|a| a.dependents.clone())
            .unwrap_or_default()
    }

    /// Copies pages `pages` of the child area at `base` now, relocated whatever the mode, and
    /// installs its leaves for them (read-write: they are its own) instead of one VLB miss
    /// each: the child has not run yet.
    fn settle_eagerly(
        &mut self,
        f: &mut Frames<'_>,
        base: u64,
        (pages, first_live): (core::ops::Range<usize>, usize),
    ) {
        let Some(pd) = self
            .areas
            .get(base)
            .and_then(|a| a.link.as_ref())
            .map(|l| l.child_pd)
        else {
            return;
        };
        for i in pages.clone() {
            let live = if i == pages.start { first_live } else { 0 };
            self.settle_page_from(f, base, i, (true, live));
        }
        for i in pages {
            let Some(pa) = f.frame(base, i) else {
                break;
            };
            f.prefill(pd, base + i as u64 * PAGE_SIZE, pa, Perm::RW);
        }
    }

    /// Copies page `i` of the lazily forked area at `base` from its source if it is pending
    /// (the source's page settled first), relocating even in copy-on-write mode when
    /// `relocate`; nothing for a page it has or an area that is not lazily forked.
    fn settle_page(&mut self, f: &mut Frames<'_>, base: u64, i: usize, relocate: bool) {
        self.settle_page_from(f, base, i, (relocate, 0));
    }

    /// [`LazyCopies::settle_page`] with the page's slots below `first` dead: zeroed in the
    /// copy, not relocated.
    fn settle_page_from(
        &mut self,
        f: &mut Frames<'_>,
        base: u64,
        i: usize,
        (relocate, first): (bool, usize),
    ) {
        let Some(area) = self.areas.get(base).filter(|a| a.is_pending(i)) else {
            return;
        };
        let Some(link) = area.link.as_ref() else {
            return;
        };
        let (source, from, to, mode) = (link.source, link.from, link.to, link.mode);
        if area.pages.is_staged(i) {
            // Its words as of the fork are in its frame already: relocated there.
            let tags = link.tags.clone();
            if let Some(pa) = f.initialised_frame(base, i) {
                let tally = &mut self.stats.relocated;
                let page = from.base() + i as u64 * PAGE_SIZE;
                crate::mm::frames::update_frame(pa, |words| {
                    let _ = relocate_page_from(&*tags, (&from, &to), (page, 0), words, tally);
                });
            }
            self.settled(f, base, i, false);
            return;
        }
        // Copy-on-write never relocates; the other modes relocate what points into the
        // source's area (inferred tags), which leaves a page without tags as it is.
        let tags = (relocate || mode != CopyMode::CopyOnWrite).then(|| link.tags.clone());
        // The source's page as its holder sees it (settled first if it is lazily forked
        // itself), copied straight into the child's frame and relocated there.
        if self.areas.get(source).is_some_and(|a| a.is_pending(i)) {
            self.settle_page(f, source, i, false);
        }
        let src = f.initialised_frame(source, i);
        let Some(dst) = f.frame_to_fill(base, i) else {
            return;
        };
        let tally = &mut self.stats.relocated;
        // Only a relocation zeroes the dead words below `first`; a plain copy takes them all.
        let first = if tags.is_some() { first } else { 0 };
        crate::mm::frames::fill_frame_from(src, dst, first, |words| {
            let page = from.base() + i as u64 * PAGE_SIZE;
            if let Some(tags) = &tags
                && relocate_page_from(&**tags, (&from, &to), (page, first), words, tally).is_err()
            {
                // The words below `first` were left for the relocation, which refused the page.
                words[..first].fill(0);
            }
        });
        self.count_copy(base);
        self.settled(f, base, i, false);
    }

    /// Counts one page copied into the area at `base`: memory its fork added.
    fn count_copy(&mut self, base: u64) {
        self.stats.pages_copied += 1;
        if let Some(area) = self.areas.get_mut(base) {
            area.copied = Some(area.copied.unwrap_or(0) + 1);
        }
    }

    /// Page `i` of the area at `base` is its own now: no longer pending. If the area read it
    /// from its source's frame (shared), that read-only mapping goes, unless `kept` (the area
    /// kept that very frame); once the area lacks nothing, its link goes.
    fn settled(&mut self, f: &mut Frames<'_>, base: u64, i: usize, kept: bool) {
        let Some(area) = self.areas.get_mut(base) else {
            return;
        };
        let shared = area.pages.settle(i);
        let (pd, settled) = (
            area.link.as_ref().map(|l| l.child_pd),
            area.pages.is_settled(),
        );
        if shared
            && !kept
            && let Some(pd) = pd
        {
            let p = f.revoke(pd, base + i as u64 * PAGE_SIZE, PAGE_SIZE);
            f.owe(p);
        }
        if settled {
            self.unlink(f, base);
        }
    }

    /// The contents of page `i` of the area at `base` as its holder sees them, settling it
    /// first if it is itself lazily forked, written into `out`, which it returns.
    fn source_words<'a>(
        &mut self,
        f: &mut Frames<'_>,
        base: u64,
        i: usize,
        out: &'a mut MaybeUninit<PageWords>,
    ) -> &'a mut PageWords {
        self.settle_page(f, base, i, false);
        f.read_words(base, i, out)
    }

    /// Forgets the link of the area at `base` (it lacks nothing, or it goes): it leaves its
    /// source's dependents.
    fn unlink(&mut self, f: &mut Frames<'_>, base: u64) {
        let Some(l) = self.areas.get_mut(base).and_then(|a| a.link.take()) else {
            return;
        };
        self.forget_dependent(f, l.source, base);
        self.release_if_unused(f, base);
    }

    fn forget_dependent(&mut self, f: &mut Frames<'_>, source: u64, child: u64) {
        if let Some(a) = self.areas.get_mut(source) {
            a.dependents.retain(|&c| c != child);
            if a.dependents.is_empty() {
                self.release_if_unused(f, source);
            }
        }
    }

    /// Stops paging the area at `base` once no lazy fork involves it, and forgets it once
    /// nothing of it is left to count.
    fn release_if_unused(&mut self, f: &mut Frames<'_>, base: u64) {
        let Some(a) = self.areas.get(base) else {
            f.set_pager(base, None);
            return;
        };
        if a.is_unpaged() {
            let spent = a.is_spent();
            f.set_pager(base, None);
            if spent {
                self.areas.remove(base);
            }
        }
    }

    /// Before page `i` of the area at `base` is written (by its PD or the kernel): settles it if
    /// it is pending, and copies it to every area forked from this one that still lacks it.
    fn before_write(&mut self, f: &mut Frames<'_>, base: u64, i: usize) {
        self.settle_page(f, base, i, false);
        let dependents = self.dependents_of(base);
        // The one dependent that maps the page's frame (a shared page) takes that frame.
        let shares = |s: &Self, d: u64| s.areas.get(d).is_some_and(|a| a.shares(i));
        let sharers = dependents.iter().filter(|&&d| shares(self, d)).count();
        for d in dependents {
            if sharers == 1 && shares(self, d) && self.give_frame(f, (base, d), i) {
                continue;
            }
            self.stage_page(f, d, i);
        }
    }

    /// Before page `i` of the area at `base` is discarded (its frame given back): the areas
    /// forked from it that still lack the page get it first, as before a write; then the area
    /// itself stops waiting for the page: what it had not copied of it is dropped, and its
    /// mapping of its source's frame goes. So a child that discards what it no longer needs
    /// (Redis's child after saving a value) spares its parent's later write a copy.
    fn before_discard(&mut self, f: &mut Frames<'_>, base: u64, i: usize) {
        if self.lacked_by_dependents(base, i) {
            self.before_write(f, base, i);
        }
        if self.areas.get(base).is_some_and(|a| a.is_pending(i)) {
            self.stats.pages_discarded += 1;
            self.settled(f, base, i, false);
        }
    }

    /// Before the source of the lazily forked area at `base` writes its page `i`, which the
    /// area lacks: copies the source's words as they are (as of the fork: the source has not
    /// written the page since) into the area's frame and leaves their relocation to the area's
    /// first access or the kernel's ([`LazyCopies::settle_page`]), so that the writer pays for
    /// a copy alone. Copy-on-write relocates nothing: the page is settled at once.
    fn stage_page(&mut self, f: &mut Frames<'_>, base: u64, i: usize) {
        let Some(link) = self
            .areas
            .get(base)
            .filter(|a| a.pages.lacks(i))
            .and_then(|a| a.link.as_ref())
        else {
            return;
        };
        if link.mode == CopyMode::CopyOnWrite {
            self.settle_page(f, base, i, false);
            return;
        }
        let (source, pd) = (link.source, link.child_pd);
        let src = f.initialised_frame(source, i);
        let Some(dst) = f.frame_to_fill(base, i) else {
            return;
        };
        crate::mm::frames::fill_frame_from(src, dst, 0, |_| ());
        self.count_copy(base);
        self.stats.pages_staged += 1;
        let Some(area) = self.areas.get_mut(base) else {
            return;
        };
        if area.pages.stage(i) {
            // It read the source's frame, which is about to change.
            let p = f.revoke(pd, base + i as u64 * PAGE_SIZE, PAGE_SIZE);
            f.owe(p);
        }
    }

    /// Settles page `i` of the area at `child`, which shares it (its leaf maps the frame of its
    /// source `source`'s page read-only), before the source writes it: the child keeps that
    /// frame as its own and the source gets a copy. What Linux's copy-on-write does for a
    /// writing parent: the child's leaf stays as it is, so no CPU the child runs on needs a
    /// flush; the source's own leaf goes (a flush where the source runs, normally the writer's
    /// CPU). False, nothing changed, when the frames cannot be exchanged.
    fn give_frame(&mut self, f: &mut Frames<'_>, (source, child): (u64, u64), i: usize) -> bool {
        let Some(owner) = self.areas.get(source).and_then(|a| a.owner) else {
            return false;
        };
        // The child's frame for the page (from its commitment) goes to the source.
        let Some(copy) = f.frame_to_fill(child, i) else {
            return false;
        };
        if !f.exchange(child, source, i) {
            return false;
        }
        let Some(kept) = f.initialised_frame(child, i) else {
            return false;
        };
        // The page has no tags (it was shared), so the child's copy needs no relocation, and
        // the source's copy is the source's own words.
        crate::mm::frames::fill_frame_from(Some(kept), copy, 0, |_| ());
        let p = f.revoke(owner, source + i as u64 * PAGE_SIZE, PAGE_SIZE);
        f.owe(p);
        self.count_copy(child);
        self.stats.frames_given += 1;
        self.settled(f, child, i, true);
        true
    }

    /// True when some area forked from the one at `base` still lacks its page `i`.
    fn lacked_by_dependents(&self, base: u64, i: usize) -> bool {
        self.areas.get(base).is_some_and(|a| {
            a.dependents
                .iter()
                .any(|&c| self.areas.get(c).is_some_and(|d| d.lacks(i)))
        })
    }

    /// The pages a miss may map beside its own (see [`Pager::around`]): those the area holds
    /// itself (not pending) and has initialised, read-only where an area forked from it still
    /// lacks them (so that the first write copies them first).
    fn around(
        &self,
        f: &mut Frames<'_>,
        base: u64,
        (first, mut want): (usize, u32),
        perm: Perm,
        out: &mut [Option<(u64, Perm)>; FAULT_AROUND],
    ) {
        let Some(area) = self.areas.get(base) else {
            return;
        };
        while want != 0 {
            let k = want.trailing_zeros() as usize;
            want &= want - 1;
            let j = first + k;
            if area.is_pending(j) {
                continue;
            }
            let Some(pa) = f.initialised_frame(base, j) else {
                continue;
            };
            let perm = if self.lacked_by_dependents(base, j) {
                perm.without(Perm::W)
            } else {
                perm
            };
            out[k] = Some((pa, perm));
        }
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
        let write = access.contains(Perm::W);
        let pending = self.areas.get(base).is_some_and(|a| a.is_pending(i));
        let lacked = self.lacked_by_dependents(base, i);
        if !pending && !lacked {
            return None;
        }
        if write {
            self.before_write(f, base, i);
            return Some((f.frame(base, i)?, perm));
        }
        let staged = pending && self.areas.get(base).is_some_and(|a| a.pages.is_staged(i));
        if staged {
            self.settle_page(f, base, i, false);
        } else if pending {
            let (source, from, mode) = {
                let l = self.areas.get(base)?.link.as_ref()?;
                (l.source, l.from, l.mode)
            };
            let mut buf = MaybeUninit::uninit();
            let words = self.source_words(f, source, i, &mut buf);
            let page = from.base() + i as u64 * PAGE_SIZE;
            let has_tags = self
                .areas
                .get(base)?
                .link
                .as_ref()?
                .tags
                .page_has_tags(page, words);
            let touch = on_first_touch(mode, has_tags, Access::Read);
            if touch == FirstTouch::Share {
                if let Some(a) = self.areas.get_mut(base) {
                    a.pages.share(i);
                }
                self.stats.pages_shared += 1;
                // The source's frame, read-only: nothing in it points anywhere relocation
                // would have changed, and the source's first write settles the page.
                return Some((f.frame(source, i)?, perm.without(Perm::W)));
            }
            self.settle_page(f, base, i, false);
        }
        // Settling this area's own page changed nothing its dependents lack.
        let perm = if lacked { perm.without(Perm::W) } else { perm };
        Some((f.frame(base, i)?, perm))
    }

    /// Settles every page of the area at `base` it lacks and every page areas forked from it
    /// lack: before the kernel reads or writes the area as a whole, or it shrinks.
    fn settle_all(&mut self, f: &mut Frames<'_>, base: u64) {
        for i in self.held(base) {
            self.settle_page(f, base, i, false);
        }
        self.settle_dependents(f, base);
    }

    /// Settles every page the areas forked from the one at `base` still lack.
    fn settle_dependents(&mut self, f: &mut Frames<'_>, base: u64) {
        for d in self.dependents_of(base) {
            for i in self.held(d) {
                self.settle_page(f, d, i, false);
            }
        }
    }

    /// Before the area at `base` loses its frames: every area forked from it gets its pending
    /// pages now, and if it was lazily forked itself it leaves its source's dependents.
    fn detach(&mut self, f: &mut Frames<'_>, base: u64) {
        self.settle_dependents(f, base);
        // Its own dependents were settled above; what it lacked dies with it.
        let link = self.areas.get_mut(base).and_then(|a| {
            a.dependents.clear();
            a.link.take()
        });
        if let Some(l) = link {
            self.forget_dependent(f, l.source, base);
        }
        // Jord drops the pager itself; a count of copied pages stays until `forget_copied`.
        if self.areas.get(base).is_some_and(AreaLazy::is_spent) {
            self.areas.remove(base);
        }
    }
}
