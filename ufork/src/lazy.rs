//! The pages of a lazily forked area: which the child still lacks (they hold the parent's
//! contents as of the fork), which it reads straight from the parent's frame, and what the
//! child's first touch of a page it lacks does in each copy mode.
//!
//! A lazily forked child starts with every page the parent had ever touched *pending*. The
//! kernel settles a pending page, copying it from the parent (relocating its tagged words when
//! the mode relocates), on the child's first access, on the parent's first write after the
//! fork, or when the parent's memory goes away, whichever comes first. In the sharing modes a
//! read may instead map the parent's frame read-only in the child: the page is then *shared*,
//! and the first write by either side settles it. The parent's write may also only *stage*
//! the page: its words as of the fork are copied into the child's frame as they are, and the
//! relocation waits for the child's first access (the page stays pending, but the parent no
//! longer needs to copy it).

use crate::copy_mode::{Access, CopyMode};
use alloc::vec;
use alloc::vec::Vec;

/// Pending, shared and staged bits, three per page of an area.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LazyPages {
    /// The pending bits (`words` words), then the shared bits and the staged bits (as many
    /// each): one allocation.
    bits: Vec<u64>,
    words: usize,
    pages: usize,
    count: usize,
}

impl LazyPages {
    /// An area of `pages` pages, none pending.
    pub fn new(pages: usize) -> LazyPages {
        let words = pages.div_ceil(64);
        LazyPages {
            bits: vec![0; 3 * words],
            words,
            pages,
            count: 0,
        }
    }

    /// Makes this an area of `pages` pages, none pending, keeping its allocation when it is
    /// large enough.
    pub fn reset(&mut self, pages: usize) {
        let words = pages.div_ceil(64);
        self.bits.clear();
        self.bits.resize(3 * words, 0);
        self.words = words;
        self.pages = pages;
        self.count = 0;
    }

    /// The area's size in pages.
    pub fn pages(&self) -> usize {
        self.pages
    }

    fn bit(i: usize) -> (usize, u64) {
        (i / 64, 1u64 << (i % 64))
    }

    /// Marks page `i` pending (the child lacks it); false beyond the area.
    pub fn mark_pending(&mut self, i: usize) -> bool {
        if i >= self.pages {
            return false;
        }
        let (w, b) = Self::bit(i);
        if self.bits[w] & b == 0 {
            self.bits[w] |= b;
            self.count += 1;
        }
        true
    }

    /// Marks pending every page whose bit is set in `words` (bit `i % 64` of word `i / 64` for
    /// page `i`, as a VMA's initialised bits), a word at a time; bits beyond the area are
    /// ignored.
    pub fn mark_pending_words(&mut self, words: &[u64]) {
        let full = self.pages / 64;
        for (w, (mine, &theirs)) in self.bits[..self.words].iter_mut().zip(words).enumerate() {
            let theirs = if w < full {
                theirs
            } else {
                theirs & ((1u64 << (self.pages % 64)) - 1)
            };
            self.count += (theirs & !*mine).count_ones() as usize;
            *mine |= theirs;
        }
    }

    /// The pending bits, 64 pages a word (the form [`LazyPages::mark_pending_words`] takes).
    pub fn pending_words(&self) -> &[u64] {
        &self.bits[..self.words]
    }

    /// True when page `i` is pending.
    pub fn is_pending(&self, i: usize) -> bool {
        let (w, b) = Self::bit(i);
        i < self.pages && self.bits[w] & b != 0
    }

    /// True when page `i` is shared (pending, and mapped from the parent's frame read-only).
    pub fn is_shared(&self, i: usize) -> bool {
        let (w, b) = Self::bit(i);
        i < self.pages && self.bits[self.words + w] & b != 0
    }

    /// Notes that the child now reads pending page `i` from the parent's frame; false (nothing
    /// changed) when the page is not pending or is staged (its words are in the child's frame).
    pub fn share(&mut self, i: usize) -> bool {
        if !self.lacks(i) {
            return false;
        }
        let (w, b) = Self::bit(i);
        self.bits[self.words + w] |= b;
        true
    }

    /// True when page `i` is staged (pending, its words as of the fork already in the
    /// child's frame, not relocated yet).
    pub fn is_staged(&self, i: usize) -> bool {
        let (w, b) = Self::bit(i);
        i < self.pages && self.bits[2 * self.words + w] & b != 0
    }

    /// True when page `i` is pending and not staged: the parent's write must copy it first.
    pub fn lacks(&self, i: usize) -> bool {
        let (w, b) = Self::bit(i);
        i < self.pages && self.bits[w] & !self.bits[2 * self.words + w] & b != 0
    }

    /// Notes that pending page `i`'s words as of the fork are now in the child's frame, not
    /// relocated: it stays pending but is no longer shared. Returns whether it was shared (the
    /// child's mapping of the parent's frame must go); false, nothing changed, when the page
    /// is not pending or is staged already.
    pub fn stage(&mut self, i: usize) -> bool {
        if !self.lacks(i) {
            return false;
        }
        let (w, b) = Self::bit(i);
        self.bits[2 * self.words + w] |= b;
        let shared = self.bits[self.words + w] & b != 0;
        self.bits[self.words + w] &= !b;
        shared
    }

    /// Page `i` was copied for the child (or its staged words relocated): it is neither
    /// pending, shared nor staged any more. Returns whether it was shared (the child's mapping
    /// of the parent's frame must go).
    pub fn settle(&mut self, i: usize) -> bool {
        if !self.is_pending(i) {
            return false;
        }
        let (w, b) = Self::bit(i);
        self.bits[w] &= !b;
        self.count -= 1;
        let shared = self.bits[self.words + w] & b != 0;
        self.bits[self.words + w] &= !b;
        self.bits[2 * self.words + w] &= !b;
        shared
    }

    /// How many pages are pending.
    pub fn pending_count(&self) -> usize {
        self.count
    }

    /// True when nothing is pending.
    pub fn is_settled(&self) -> bool {
        self.count == 0
    }

    /// The pending pages, in order.
    pub fn pending_pages(&self) -> impl Iterator<Item = usize> + '_ {
        crate::tags::set_bits(self.bits[..self.words].iter().copied())
    }

    /// The shared pages, in order.
    pub fn shared_pages(&self) -> impl Iterator<Item = usize> + '_ {
        crate::tags::set_bits(self.bits[self.words..2 * self.words].iter().copied())
    }
}

/// What the child's first access to a pending page does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FirstTouch {
    /// Map the parent's frame read-only in the child; the first write by either side copies.
    Share,
    /// Copy the page into the child's own frame now, relocating its tagged words if
    /// `relocate`.
    Copy {
        /// Relocate the copy's tagged words.
        relocate: bool,
    },
}

/// The child touches a pending page with `access` in a lazily forked area of `mode`;
/// `has_tags` says whether the page's tag source finds a pointer into the parent's area in it.
///
/// - Copy-on-access copies (and relocates) on any access.
/// - Copy-on-pointer-access, approximated: a page with tags is copied and relocated on any
///   access (on CHERI only a capability load would trigger this); a page without tags is
///   shared for reading and copied on the first write (there is nothing to relocate).
/// - Copy-on-write shares every page for reading and copies without relocating on a write:
///   the child then reads the parent's pointers as they are, which is why the mode needs
///   isolation off.
/// - A full copy has no pending pages; should one appear it is copied and relocated.
pub const fn on_first_touch(mode: CopyMode, has_tags: bool, access: Access) -> FirstTouch {
    let write = matches!(access, Access::Write);
    match mode {
        CopyMode::Full | CopyMode::CopyOnAccess => FirstTouch::Copy { relocate: has_tags },
        CopyMode::CopyOnPointerAccess if has_tags => FirstTouch::Copy { relocate: true },
        CopyMode::CopyOnPointerAccess | CopyMode::CopyOnWrite if !write => FirstTouch::Share,
        CopyMode::CopyOnPointerAccess | CopyMode::CopyOnWrite => {
            FirstTouch::Copy { relocate: false }
        }
    }
}

/// True when fork in `mode` leaves pages pending instead of copying them all.
pub const fn is_lazy(mode: CopyMode) -> bool {
    !matches!(mode, CopyMode::Full)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reset_forgets_every_bit_and_resizes() {
        let mut p = LazyPages::new(200);
        p.mark_pending(150);
        p.share(150);
        p.reset(70);
        assert_eq!((p.pages(), p.pending_count()), (70, 0));
        assert!(!p.is_pending(150) && !p.is_shared(150));
        assert!(p.mark_pending(69) && !p.mark_pending(70));
        assert_eq!(p, {
            let mut fresh = LazyPages::new(70);
            fresh.mark_pending(69);
            fresh
        });
    }

    #[test]
    fn pending_shared_and_settled() {
        let mut p = LazyPages::new(130);
        assert!(p.is_settled());
        assert!(p.mark_pending(0) && p.mark_pending(64) && p.mark_pending(129));
        assert!(!p.mark_pending(130));
        assert!(p.mark_pending(64), "marking twice counts once");
        assert_eq!(p.pending_count(), 3);
        assert!(!p.share(1), "only a pending page can be shared");
        assert!(p.share(64));
        assert!(p.is_shared(64) && p.is_pending(64));
        assert_eq!(p.shared_pages().collect::<Vec<_>>(), [64]);
        assert!(p.settle(64), "a shared page reports it was shared");
        assert!(!p.settle(64), "settling twice does nothing");
        assert!(!p.settle(0));
        assert_eq!(p.pending_pages().collect::<Vec<_>>(), [129]);
        assert!(!p.is_shared(64) && !p.is_pending(0));
        assert!(!p.is_pending(5000) && !p.is_shared(5000));
    }

    #[test]
    fn a_staged_page_stays_pending_until_settled_but_is_no_longer_lacked() {
        let mut p = LazyPages::new(130);
        p.mark_pending(5);
        p.mark_pending(70);
        p.share(70);
        assert!(p.lacks(5) && p.lacks(70) && !p.lacks(6));
        assert!(!p.stage(6), "only a pending page can be staged");
        assert!(!p.stage(5), "an unshared page reports it was not shared");
        assert!(p.stage(70), "a shared page reports it was shared");
        assert!(!p.stage(70), "staging twice does nothing");
        assert!(p.is_staged(70) && p.is_pending(70) && !p.is_shared(70) && !p.lacks(70));
        assert_eq!(p.pending_count(), 2);
        assert_eq!(p.shared_pages().count(), 0);
        assert!(!p.share(70), "a staged page is not shared");
        assert!(!p.settle(70));
        assert!(!p.is_staged(70) && !p.is_pending(70));
        assert_eq!(p.pending_pages().collect::<Vec<_>>(), [5]);
        p.reset(130);
        assert!(!p.is_staged(5));
    }

    #[test]
    fn marking_by_words_counts_each_page_once_and_ignores_bits_beyond_the_area() {
        let mut p = LazyPages::new(130);
        p.mark_pending(3);
        p.mark_pending(64);
        p.mark_pending_words(&[0b1010, 1, u64::MAX, 7]);
        let expected: Vec<usize> = [1, 3, 64, 128, 129].into();
        assert_eq!(p.pending_pages().collect::<Vec<_>>(), expected);
        assert_eq!(p.pending_count(), 5);
        let mut q = LazyPages::new(130);
        q.mark_pending_words(p.pending_words());
        assert_eq!(q, p);
        let mut whole = LazyPages::new(128);
        whole.mark_pending_words(&[u64::MAX, u64::MAX]);
        assert_eq!(whole.pending_count(), 128);
    }

    #[test]
    fn first_touch_by_mode() {
        use Access::*;
        use CopyMode::*;
        use FirstTouch::*;
        for a in [Read, Write, Execute] {
            assert_eq!(
                on_first_touch(CopyOnAccess, true, a),
                Copy { relocate: true }
            );
            assert_eq!(
                on_first_touch(CopyOnAccess, false, a),
                Copy { relocate: false }
            );
            assert_eq!(
                on_first_touch(CopyOnPointerAccess, true, a),
                Copy { relocate: true }
            );
        }
        assert_eq!(on_first_touch(CopyOnPointerAccess, false, Read), Share);
        assert_eq!(
            on_first_touch(CopyOnPointerAccess, false, Write),
            Copy { relocate: false }
        );
        assert_eq!(on_first_touch(CopyOnWrite, true, Read), Share);
        assert_eq!(
            on_first_touch(CopyOnWrite, true, Write),
            Copy { relocate: false },
            "CoW never relocates"
        );
        assert!(!is_lazy(Full) && is_lazy(CopyOnAccess) && is_lazy(CopyOnWrite));
    }

    proptest! {
        #[test]
        fn the_count_matches_the_pending_bits(
            ops in proptest::collection::vec((0usize..4, 0usize..300), 0..400)
        ) {
            let mut p = LazyPages::new(257);
            let mut model = alloc::collections::BTreeSet::new();
            for (op, i) in ops {
                match op {
                    0 => { if p.mark_pending(i) { model.insert(i); } }
                    1 => { p.share(i); }
                    2 => { p.stage(i); }
                    _ => { p.settle(i); model.remove(&i); }
                }
                prop_assert_eq!(p.pending_count(), model.len());
            }
            prop_assert_eq!(p.pending_pages().collect::<Vec<_>>(), model.iter().copied().collect::<Vec<_>>());
            for s in p.shared_pages() {
                prop_assert!(p.is_pending(s) && !p.is_staged(s));
            }
            for i in 0..300 {
                prop_assert_eq!(p.lacks(i), p.is_pending(i) && !p.is_staged(i));
                prop_assert!(!p.is_staged(i) || p.is_pending(i));
            }
        }

        #[test]
        fn marking_by_words_is_marking_each_set_bit(
            pages in 1usize..300,
            before in proptest::collection::vec(0usize..300, 0..40),
            words in proptest::collection::vec(any::<u64>(), 0..6),
        ) {
            let mut by_words = LazyPages::new(pages);
            let mut by_bits = LazyPages::new(pages);
            for &i in &before {
                by_words.mark_pending(i);
                by_bits.mark_pending(i);
            }
            by_words.mark_pending_words(&words);
            for i in crate::tags::set_bits(words.iter().copied()) {
                by_bits.mark_pending(i);
            }
            prop_assert_eq!(by_words, by_bits);
        }
    }
}
