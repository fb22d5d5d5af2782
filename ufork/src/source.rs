//! Where fork learns which words of a page hold pointers: one [`TagSource`] interface, two
//! emulated sources and their union.
//!
//! On CHERI the answer is the hardware tag of each 16-byte capability granule, which the
//! processor keeps exact: set by capability stores, cleared by every other store. x86_64 has
//! no tags, so Fjord emulates them:
//!
//! - [`Precise`]: the tags the kernel and the loader set in the [`ShadowTags`] table for the
//!   pointers they create: relocation entries of the module and the GOT, the stack, heap and
//!   TLS bases, what mmap returns, the words of a saved register context. They are exact when
//!   set, but native code's own stores do not clear them (nothing traps on a plain store), so a
//!   program that overwrites such a slot with an integer leaves a stale tag; and pointers the
//!   program computes and stores itself (a `malloc` result kept in a list node) are not tagged
//!   at all.
//! - [`Inferred`]: an aligned 8-byte word whose value lies inside the μprocess's own area is
//!   taken to be a pointer. This finds the pointers the program made itself, and misreads:
//!   - an integer that happens to fall inside the area (a hash, a counter, a timestamp, a
//!     random value) is relocated, so the child sees that integer changed by
//!     `child_base - parent_base`. Areas sit at high, size-aligned addresses, so small
//!     integers, sizes and offsets never qualify; a uniformly random word does with
//!     probability `area size / 2^64` (2^-36 for a 256 MiB area);
//!   - a pointer is missed when it is not an aligned word (packed structures), when it is
//!     stored encoded (XOR-linked lists, compressed or high-bit-tagged pointers, NaN boxing),
//!     or when it points one past the area's end.
//! - [`Union`]: precise ∪ inferred, what fork uses by default: every pointer the kernel made
//!   plus every word that looks like one.
//!
//! IsolationLevel does not rest on tags. Relocation only decides what the child sees in its own
//! memory; which memory it can reach is decided by its protection domain, whose page tables map
//! the child's area and nothing else. A missed pointer still names the parent's area, so the
//! child's first use of it faults and the kernel kills the child (reported to `waitpid` as
//! killed by a fault); it never reads or writes the parent. A false positive corrupts only the
//! child's own integer. With isolation off (see [`crate::copy_mode`]) a missed pointer does
//! reach the parent: that mode is for trusted programs only.
//!
//! Where areas sit makes the inferred source safe for small integers and short strings: the
//! kernel places every μprocess area (up to 1 GiB) clear of every 4 GiB edge (16 MiB) and of
//! the ASCII band (`fjord_pd::vaddr::clear_of_data_words`), so a word whose upper half is a
//! stale pointer's and whose lower half is a 32-bit integer in `(-16 Mi, 16 Mi)` (a descriptor,
//! a count, a length, an error code) or four printable ASCII bytes (a short string held in
//! place) never lies in an area. [`crate::accuracy`] measures each source's false positives and negatives on images
//! with known pointers and adversarial integers.
//!
//! The kernel reads tags only through one [`TagSource`] object per μprocess, chosen at boot
//! ([`TagChoice`], the `tags=` option) and built by [`Emulated`]: the fork copy, the lazy copy
//! and the saved registers ([`TagSource::register_tags`]) all go through it. A CHERI backend
//! implements [`TagSource`] by reading the page's hardware tags (CLoadTags or one tag test per
//! granule) and the register tags, and reports the address slot of each tagged granule; nothing
//! in the fork code changes.

use crate::area::Area;
use crate::relocate::{RegTags, Registers};
use crate::tags::{PageWords, SLOTS_PER_PAGE, ShadowTags, SlotMask};

/// Tells which slots of a page hold pointers that fork must relocate.
pub trait TagSource {
    /// The slots of the page whose base address is `page` (in the μprocess's area) and whose
    /// contents are `words` that hold pointers. Sources that keep tags elsewhere (the shadow
    /// table, hardware) may ignore `words`.
    fn tagged_slots(&self, page: u64, words: &PageWords) -> SlotMask;

    /// True when the page may hold a pointer. The default asks [`TagSource::tagged_slots`];
    /// sources with a per-page summary answer without looking at the words.
    fn page_has_tags(&self, page: u64, words: &PageWords) -> bool {
        !self.tagged_slots(page, words).is_empty()
    }

    /// [`TagSource::tagged_slots`], split by the source that tagged each slot (a slot may be in
    /// both `precise` and `inferred`). The default puts them all in `other`.
    fn tagged_slots_by_source(&self, page: u64, words: &PageWords) -> BySource {
        BySource {
            other: self.tagged_slots(page, words),
            ..BySource::default()
        }
    }

    /// [`TagSource::tagged_slots_by_source`] of the slots from `first` on: those below are
    /// dead (below a stack pointer) and never tagged. The default asks about every slot and
    /// drops the dead ones; a source that judges values looks at the live ones alone.
    fn tagged_slots_by_source_from(&self, page: u64, words: &PageWords, first: usize) -> BySource {
        self.tagged_slots_by_source(page, words).from_slot(first)
    }

    /// Which general registers of `regs`, saved at `fork` by a μprocess in `area`, hold
    /// pointers. The instruction, stack and thread pointers are known to be pointers and are
    /// relocated whatever this says. The default infers from values ([`RegTags::inferred`]).
    fn register_tags(&self, regs: &Registers, area: &Area) -> RegTags {
        RegTags::inferred(regs, area)
    }
}

impl<T: TagSource + ?Sized> TagSource for &T {
    fn tagged_slots(&self, page: u64, words: &PageWords) -> SlotMask {
        (**self).tagged_slots(page, words)
    }

    fn page_has_tags(&self, page: u64, words: &PageWords) -> bool {
        (**self).page_has_tags(page, words)
    }

    fn tagged_slots_by_source(&self, page: u64, words: &PageWords) -> BySource {
        (**self).tagged_slots_by_source(page, words)
    }

    fn tagged_slots_by_source_from(&self, page: u64, words: &PageWords, first: usize) -> BySource {
        (**self).tagged_slots_by_source_from(page, words, first)
    }

    fn register_tags(&self, regs: &Registers, area: &Area) -> RegTags {
        (**self).register_tags(regs, area)
    }
}

/// A page's tagged slots by the source that tagged them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BySource {
    /// Tagged by the precise tags (the shadow table).
    pub precise: SlotMask,
    /// Tagged by inference from their values.
    pub inferred: SlotMask,
    /// Tagged by a source that does not tell (a hardware backend).
    pub other: SlotMask,
}

impl BySource {
    /// The slots from `first` on, by source.
    pub fn from_slot(self, first: usize) -> BySource {
        BySource {
            precise: self.precise.from_slot(first),
            inferred: self.inferred.from_slot(first),
            other: self.other.from_slot(first),
        }
    }
}

/// Relocated words (or registers), by the source that tagged them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// By the precise tags only.
    pub precise: u64,
    /// By inference only.
    pub inferred: u64,
    /// By both.
    pub both: u64,
    /// By a source that does not tell (a hardware backend).
    pub other: u64,
}

impl Tally {
    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &Tally) {
        self.precise += other.precise;
        self.inferred += other.inferred;
        self.both += other.both;
        self.other += other.other;
    }

    /// Every word counted.
    pub fn total(&self) -> u64 {
        self.precise + self.inferred + self.both + self.other
    }
}

/// Which emulated tags fork reads: chosen at boot with `tags=precise|inferred|both`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TagChoice {
    /// Only what the kernel and loader tagged: never relocates an integer the program wrote
    /// over an untagged slot, but misses every pointer the program made itself (the child
    /// faults when it uses one) and relocates an integer written over a tagged slot.
    Precise,
    /// Only words whose value points into the area: finds every aligned pointer, and takes an
    /// integer that lies in the area for one.
    Inferred,
    /// Their union (the default).
    #[default]
    Both,
}

impl TagChoice {
    /// Every choice, in the order of their names.
    pub const ALL: [TagChoice; 3] = [TagChoice::Precise, TagChoice::Inferred, TagChoice::Both];

    /// The choice named `name` (`precise`, `inferred`, `both`).
    pub fn parse(name: &str) -> Option<TagChoice> {
        TagChoice::ALL.into_iter().find(|c| c.name() == name)
    }

    /// The choice's name.
    pub const fn name(self) -> &'static str {
        match self {
            TagChoice::Precise => "precise",
            TagChoice::Inferred => "inferred",
            TagChoice::Both => "both",
        }
    }
}

/// A μprocess's emulated tag source: its shadow table and its area read as a [`TagChoice`]
/// says. The kernel holds one per μprocess and reads tags only through it.
#[derive(Clone, Debug)]
pub struct Emulated {
    choice: TagChoice,
    tags: ShadowTags,
}

impl Emulated {
    /// The source `choice` over `tags` (whose area is the μprocess's).
    pub fn new(choice: TagChoice, tags: ShadowTags) -> Emulated {
        Emulated { choice, tags }
    }

    /// The choice.
    pub fn choice(&self) -> TagChoice {
        self.choice
    }

    /// The shadow table.
    pub fn tags(&self) -> &ShadowTags {
        &self.tags
    }

    /// Forgets every tag (the table empties; what it shared with other tables stays theirs).
    pub fn forget(&mut self) {
        self.tags = ShadowTags::new(*self.tags.area());
    }

    fn inferred(&self) -> Inferred {
        Inferred::new(*self.tags.area())
    }
}

impl TagSource for Emulated {
    fn tagged_slots(&self, page: u64, words: &PageWords) -> SlotMask {
        match self.choice {
            TagChoice::Precise => self.tags.page_mask(page),
            TagChoice::Inferred => self.inferred().tagged_slots(page, words),
            TagChoice::Both => self
                .tags
                .page_mask(page)
                .union(self.inferred().tagged_slots(page, words)),
        }
    }

    fn page_has_tags(&self, page: u64, words: &PageWords) -> bool {
        match self.choice {
            TagChoice::Precise => self.tags.page_has_tags(page),
            TagChoice::Inferred => self.inferred().page_has_tags(page, words),
            TagChoice::Both => {
                self.tags.page_has_tags(page) || self.inferred().page_has_tags(page, words)
            }
        }
    }

    fn tagged_slots_by_source(&self, page: u64, words: &PageWords) -> BySource {
        let precise = if self.choice == TagChoice::Inferred || !self.tags.page_has_tags(page) {
            SlotMask::default()
        } else {
            self.tags.page_mask(page)
        };
        let inferred = if self.choice == TagChoice::Precise {
            SlotMask::default()
        } else {
            self.inferred().tagged_slots_all(words)
        };
        BySource {
            precise,
            inferred,
            other: SlotMask::default(),
        }
    }

    fn tagged_slots_by_source_from(&self, page: u64, words: &PageWords, first: usize) -> BySource {
        let precise = if self.choice == TagChoice::Inferred {
            SlotMask::default()
        } else {
            self.tags.page_mask(page).from_slot(first)
        };
        let inferred = if self.choice == TagChoice::Precise {
            SlotMask::default()
        } else {
            self.inferred().tagged_slots_from(words, first)
        };
        BySource {
            precise,
            inferred,
            other: SlotMask::default(),
        }
    }

    /// Precise: the frame pointer (programs are built with frame pointers, so at a system call
    /// it is the caller's frame, on the stack). Inferred: each register whose value points into
    /// the area. Both: their union.
    fn register_tags(&self, regs: &Registers, area: &Area) -> RegTags {
        use crate::relocate::Gpr;
        let precise = RegTags::NONE.with(Gpr::Rbp);
        match self.choice {
            TagChoice::Precise => precise,
            TagChoice::Inferred => RegTags::inferred(regs, area),
            TagChoice::Both => RegTags::inferred(regs, area).union(precise),
        }
    }
}

/// Precise tags: the bits the kernel and loader set in the shadow table.
#[derive(Clone, Copy, Debug)]
pub struct Precise<'a> {
    tags: &'a ShadowTags,
}

impl<'a> Precise<'a> {
    /// A source reading `tags`.
    pub const fn new(tags: &'a ShadowTags) -> Precise<'a> {
        Precise { tags }
    }

    /// The table read.
    pub const fn tags(&self) -> &'a ShadowTags {
        self.tags
    }
}

impl TagSource for Precise<'_> {
    fn tagged_slots(&self, page: u64, _words: &PageWords) -> SlotMask {
        self.tags.page_mask(page)
    }

    fn page_has_tags(&self, page: u64, _words: &PageWords) -> bool {
        self.tags.page_has_tags(page)
    }
}

/// Inferred tags: every aligned word whose value lies inside the area.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Inferred {
    area: Area,
}

impl Inferred {
    /// A source treating words that point into `area` as pointers.
    pub const fn new(area: Area) -> Inferred {
        Inferred { area }
    }

    /// The area words must point into.
    pub const fn area(&self) -> &Area {
        &self.area
    }

    /// [`TagSource::tagged_slots`] of the slots from `first` on, looking at those words alone.
    pub fn tagged_slots_from(&self, words: &PageWords, first: usize) -> SlotMask {
        if first == 0 {
            return self.tagged_slots_all(words);
        }
        let (base, size) = (self.area.base(), self.area.size());
        let mut mask = [0u64; SLOTS_PER_PAGE / 64];
        let skip = first.min(SLOTS_PER_PAGE) / 64;
        let chunks = mask.iter_mut().zip(words.chunks_exact(64));
        for (m, chunk) in chunks.skip(skip) {
            *m = chunk_mask(chunk, base, size);
        }
        SlotMask::from_words(mask).from_slot(first)
    }

    /// [`TagSource::tagged_slots`]: every slot looked at (the whole-page loop, kept apart from
    /// [`Inferred::tagged_slots_from`]'s so that it stays as tight as it was).
    fn tagged_slots_all(&self, words: &PageWords) -> SlotMask {
        let (base, size) = (self.area.base(), self.area.size());
        let mut mask = [0u64; SLOTS_PER_PAGE / 64];
        for (m, chunk) in mask.iter_mut().zip(words.chunks_exact(64)) {
            *m = chunk_mask(chunk, base, size);
        }
        SlotMask::from_words(mask)
    }
}

/// The mask of the 64 words of `chunk` that lie in `[base, base + size)`: slot `i` of the chunk
/// as bit `i`.
#[inline(always)]
fn chunk_mask(chunk: &[u64], base: u64, size: u64) -> u64 {
    chunk
        .iter()
        .rev()
        .fold(0, |bits, &w| shift_in(bits, w.wrapping_sub(base) < size))
}

impl TagSource for Inferred {
    fn tagged_slots(&self, _page: u64, words: &PageWords) -> SlotMask {
        self.tagged_slots_all(words)
    }

    fn tagged_slots_by_source_from(&self, _page: u64, words: &PageWords, first: usize) -> BySource {
        BySource {
            other: self.tagged_slots_from(words, first),
            ..BySource::default()
        }
    }

    fn page_has_tags(&self, _page: u64, words: &PageWords) -> bool {
        words.iter().any(|&w| self.area.contains(w))
    }
}

/// `bits` shifted left by one with `below` as its new lowest bit.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn shift_in(bits: u64, below: bool) -> u64 {
    // `bits + bits + carry`: the compare that computed `below` feeds one add-with-carry.
    let mut out = 0;
    core::arch::x86_64::_addcarry_u64(u8::from(below), bits, bits, &mut out);
    out
}

/// `bits` shifted left by one with `below` as its new lowest bit.
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn shift_in(bits: u64, below: bool) -> u64 {
    (bits << 1) | u64::from(below)
}

/// The union of two sources: a slot is tagged when either says so.
#[derive(Clone, Copy, Debug)]
pub struct Union<A, B> {
    a: A,
    b: B,
}

impl<A: TagSource, B: TagSource> Union<A, B> {
    /// A source tagging what `a` or `b` tags.
    pub const fn new(a: A, b: B) -> Union<A, B> {
        Union { a, b }
    }
}

impl<A: TagSource, B: TagSource> TagSource for Union<A, B> {
    fn tagged_slots(&self, page: u64, words: &PageWords) -> SlotMask {
        self.a
            .tagged_slots(page, words)
            .union(self.b.tagged_slots(page, words))
    }

    fn page_has_tags(&self, page: u64, words: &PageWords) -> bool {
        self.a.page_has_tags(page, words) || self.b.page_has_tags(page, words)
    }
}

/// The default emulated source of a μprocess: precise tags from its shadow table plus inferred
/// tags over its area.
pub fn emulated(tags: &ShadowTags) -> Union<Precise<'_>, Inferred> {
    Union::new(Precise::new(tags), Inferred::new(*tags.area()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tags::SLOTS_PER_PAGE;
    use alloc::vec::Vec;

    fn area() -> Area {
        Area::new(0x4000_0000, 1 << 20).unwrap()
    }

    #[test]
    fn precise_reads_the_shadow_table_not_the_words() {
        let a = area();
        let mut t = ShadowTags::new(a);
        t.set(a.base() + 16).unwrap();
        let words = [a.base(); SLOTS_PER_PAGE];
        let p = Precise::new(&t);
        assert_eq!(
            p.tagged_slots(a.base(), &words).iter().collect::<Vec<_>>(),
            [2]
        );
        assert!(p.page_has_tags(a.base(), &[0; SLOTS_PER_PAGE]));
        assert!(!p.page_has_tags(a.base() + 4096, &words));
    }

    #[test]
    fn inferred_tags_in_area_words_including_integers() {
        let a = area();
        let mut words = [0u64; SLOTS_PER_PAGE];
        words[0] = a.base(); // the first byte
        words[1] = a.end() - 1; // the last byte
        words[2] = a.end(); // one past the end: missed
        words[3] = a.base() - 1;
        words[4] = 42; // a small integer: never misread
        words[5] = a.base() + 0x1234; // an integer that falls inside: misread as a pointer
        let i = Inferred::new(a);
        assert_eq!(
            i.tagged_slots(0, &words).iter().collect::<Vec<_>>(),
            [0, 1, 5]
        );
        assert!(i.page_has_tags(0, &words));
        assert!(!i.page_has_tags(0, &[7; SLOTS_PER_PAGE]));
    }

    #[test]
    fn inferred_tags_across_the_whole_page() {
        let a = area();
        let mut words = [a.end(); SLOTS_PER_PAGE];
        let slots = [0, 63, 64, 127, 200, 448, 510, 511];
        for &s in &slots {
            words[s] = a.base() + 8 * s as u64;
        }
        let i = Inferred::new(a);
        assert_eq!(i.tagged_slots(0, &words).iter().collect::<Vec<_>>(), slots);
    }

    #[test]
    fn union_and_dyn_use() {
        let a = area();
        let mut t = ShadowTags::new(a);
        t.set(a.base() + 8 * 10).unwrap();
        let mut words = [0u64; SLOTS_PER_PAGE];
        words[3] = a.base() + 64;
        let u = emulated(&t);
        assert_eq!(
            u.tagged_slots(a.base(), &words).iter().collect::<Vec<_>>(),
            [3, 10]
        );
        let dynamic: &dyn TagSource = &u;
        assert!(dynamic.page_has_tags(a.base(), &[0; SLOTS_PER_PAGE]));
        assert!(!(&dynamic).page_has_tags(a.base() + 4096, &[0; SLOTS_PER_PAGE]));
    }

    mod props {
        use super::super::*;
        use crate::tags::SLOTS_PER_PAGE;
        use proptest::prelude::*;

        fn word(a: Area) -> impl Strategy<Value = u64> {
            prop_oneof![
                any::<u64>(),
                (0..a.size()).prop_map(move |o| a.base() + o),
                (0u64..4096).prop_map(move |o| a.end() + o),
                (1u64..4096).prop_map(move |o| a.base() - o),
            ]
        }

        proptest! {
            #[test]
            fn inferred_finds_exactly_the_in_area_words(
                words in proptest::collection::vec(word(Area::new(0x4000_0000, 1 << 20).unwrap()),
                                                   SLOTS_PER_PAGE)
            ) {
                let a = Area::new(0x4000_0000, 1 << 20).unwrap();
                let words: PageWords = words.try_into().unwrap();
                let m = Inferred::new(a).tagged_slots(0, &words);
                for (i, &w) in words.iter().enumerate() {
                    prop_assert_eq!(m.test(i), w >= a.base() && w < a.end());
                }
                prop_assert_eq!(Inferred::new(a).page_has_tags(0, &words), !m.is_empty());
            }
        }
    }
}
