//! Relocation: moving the pointers of a copied page and of the saved registers from the
//! parent's area to the child's.
//!
//! A word is relocated when its tag source says it holds a pointer *and* its value lies inside
//! the parent's area; it becomes the address at the same offset in the child's area, that is
//! the value plus `child_base - parent_base`. Tagged words pointing elsewhere (kernel entry
//! points, memory shared on purpose) are left alone, as the μFork prototype does. On CHERI the
//! capability's bounds move with it; here bounds are area-relative ([`crate::cap`]) and do not
//! change.
//!
//! x86_64 registers carry no tags either. The instruction pointer and the stack pointer always
//! point into the area and are always relocated; the fs base (TLS) is relocated when it points
//! into the area; the general registers are relocated as a [`RegTags`] mask says, which the
//! kernel infers from their values ([`RegTags::inferred`], with the same misreading of integers
//! as [`crate::source::Inferred`]) and a CHERI backend reads from the register tags.

use crate::area::{Area, PAGE_SIZE};
use crate::source::{TagSource, Tally};
use crate::tags::{PageWords, SlotMask};

/// Why a relocation was refused; nothing was changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RelocError {
    /// The two areas differ in size.
    AreaMismatch,
    /// The page address is not page-aligned or lies in neither area.
    BadPage,
    /// The saved instruction pointer is not inside the parent's area.
    RipOutsideArea,
    /// The saved stack pointer is not inside the parent's area (nor at its end).
    RspOutsideArea,
}

/// The word moved to `to` if it points into `from`, else unchanged.
pub const fn relocate_word(from: &Area, to: &Area, word: u64) -> u64 {
    match from.translate_to(to, word) {
        Some(w) => w,
        None => word,
    }
}

/// Relocates the tagged words of one page from `from` to `to` in place and returns how many
/// words changed. `page` is the address the tag source knows the page by: its address in the
/// parent's area when the parent's tags are read, in the child's when the child's copy of them
/// is; it must be page-aligned and lie in one of the two areas.
pub fn relocate_page<S: TagSource + ?Sized>(
    source: &S,
    from: &Area,
    to: &Area,
    page: u64,
    words: &mut PageWords,
) -> Result<usize, RelocError> {
    if from.size() != to.size() {
        return Err(RelocError::AreaMismatch);
    }
    if !page.is_multiple_of(PAGE_SIZE) || !(from.contains(page) || to.contains(page)) {
        return Err(RelocError::BadPage);
    }
    let mut tally = Tally::default();
    relocate_page_tallied(source, from, to, page, words, &mut tally)?;
    Ok(tally.total() as usize)
}

/// [`relocate_page`], adding the words it changed to `tally` by the source that tagged them
/// ([`TagSource::tagged_slots_by_source`]).
pub fn relocate_page_tallied<S: TagSource + ?Sized>(
    source: &S,
    from: &Area,
    to: &Area,
    page: u64,
    words: &mut PageWords,
    tally: &mut Tally,
) -> Result<(), RelocError> {
    relocate_page_moving_code(source, (from, to), None, page, words, tally).map(|_| ())
}

/// Where code outside the area moved: a clone of a function's checkpoint on a node that
/// mapped the function's code elsewhere. Every word whose value lies in the old code range,
/// tagged or not, is a pointer into the code (a return address, a vtable's entry, a function
/// pointer): no other value falls in that range but by chance (one in 2^33 for a random
/// 64-bit word against 32 KiB of code at a 48-bit address).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CodeMove {
    /// The old code range's start.
    pub from: u64,
    /// Its length.
    pub len: u64,
    /// Where it starts now.
    pub to: u64,
}

impl CodeMove {
    /// `word` moved with the code, if it points into the old code range.
    pub const fn translate(&self, word: u64) -> Option<u64> {
        let offset = word.wrapping_sub(self.from);
        if offset < self.len {
            Some(self.to.wrapping_add(offset))
        } else {
            None
        }
    }

    /// Whether some word of `words` points into the old code range.
    pub fn points_into(&self, words: &PageWords) -> bool {
        words.iter().any(|&w| self.translate(w).is_some())
    }
}

/// [`relocate_page_tallied`] with the code moving as `code` says, when it does: every word is
/// judged by its value before any move, so a word moved with the code is never taken for an
/// area pointer afterwards (nor the reverse), however the old and new ranges overlap. Returns
/// how many words moved with the code (not in `tally`, which counts area pointers by source).
pub fn relocate_page_moving_code<S: TagSource + ?Sized>(
    source: &S,
    (from, to): (&Area, &Area),
    code: Option<&CodeMove>,
    page: u64,
    words: &mut PageWords,
    tally: &mut Tally,
) -> Result<u64, RelocError> {
    relocate_slots_from(source, (from, to), code, (page, 0), words, tally)
}

/// [`relocate_page_tallied`] of a page whose slots below `first` are dead (below a stack
/// pointer and its red zone): they are zeroed rather than judged, so a fork spends nothing on
/// what no frame holds any more and hands none of it over.
pub fn relocate_page_from<S: TagSource + ?Sized>(
    source: &S,
    (from, to): (&Area, &Area),
    (page, first): (u64, usize),
    words: &mut PageWords,
    tally: &mut Tally,
) -> Result<(), RelocError> {
    relocate_slots_from(source, (from, to), None, (page, first), words, tally).map(|_| ())
}

/// [`relocate_page_moving_code`] with the slots below `first` zeroed.
fn relocate_slots_from<S: TagSource + ?Sized>(
    source: &S,
    (from, to): (&Area, &Area),
    code: Option<&CodeMove>,
    (page, first): (u64, usize),
    words: &mut PageWords,
    tally: &mut Tally,
) -> Result<u64, RelocError> {
    if from.size() != to.size() {
        return Err(RelocError::AreaMismatch);
    }
    if !page.is_multiple_of(PAGE_SIZE) || !(from.contains(page) || to.contains(page)) {
        return Err(RelocError::BadPage);
    }
    let dead = first.min(words.len());
    let by = match dead {
        0 => source.tagged_slots_by_source(page, words),
        _ => {
            words[..dead].fill(0);
            source.tagged_slots_by_source_from(page, words, dead)
        }
    };
    let tagged = by.precise.union(by.inferred).union(by.other);
    let mut moved = 0;
    let mut area_slots = tagged;
    if let Some(code) = code.filter(|c| c.from != c.to) {
        let mut moved_code = SlotMask::default();
        for (slot, w) in words.iter_mut().enumerate().skip(dead) {
            if let Some(new) = code.translate(*w) {
                *w = new;
                moved_code.set(slot);
            }
        }
        area_slots = tagged.difference(moved_code);
        moved = moved_code.count() as u64;
    }
    let (precise, inferred) = (by.precise.words(), by.inferred.words());
    // Word by word of the masks from the first live slot on, bit by bit within a word.
    for (k, &mask) in area_slots.words().iter().enumerate().skip(dead / 64) {
        let mut bits = mask;
        while bits != 0 {
            let bit = bits & bits.wrapping_neg();
            bits ^= bit;
            let slot = k * 64 + bit.trailing_zeros() as usize;
            let old = words[slot];
            // A tagged word at the area's end is a one-past-the-end pointer (a heap's limit,
            // as a capability's top may be): it moves with the area. Inferred tags never mark
            // one.
            let new = if old == from.end() {
                to.end()
            } else {
                relocate_word(from, to, old)
            };
            if new != old {
                words[slot] = new;
                match (precise[k] & bit != 0, inferred[k] & bit != 0) {
                    (true, true) => tally.both += 1,
                    (true, false) => tally.precise += 1,
                    (false, true) => tally.inferred += 1,
                    (false, false) => tally.other += 1,
                }
            }
        }
    }
    Ok(moved)
}

/// The fifteen general registers other than rsp, in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Gpr {
    /// rax (the system-call return value).
    Rax,
    /// rbx.
    Rbx,
    /// rcx.
    Rcx,
    /// rdx.
    Rdx,
    /// rsi.
    Rsi,
    /// rdi.
    Rdi,
    /// rbp (the frame pointer).
    Rbp,
    /// r8.
    R8,
    /// r9.
    R9,
    /// r10.
    R10,
    /// r11.
    R11,
    /// r12.
    R12,
    /// r13.
    R13,
    /// r14.
    R14,
    /// r15.
    R15,
}

impl Gpr {
    /// Every general register, in index order.
    pub const ALL: [Gpr; 15] = [
        Gpr::Rax,
        Gpr::Rbx,
        Gpr::Rcx,
        Gpr::Rdx,
        Gpr::Rsi,
        Gpr::Rdi,
        Gpr::Rbp,
        Gpr::R8,
        Gpr::R9,
        Gpr::R10,
        Gpr::R11,
        Gpr::R12,
        Gpr::R13,
        Gpr::R14,
        Gpr::R15,
    ];

    /// The register's index in [`Registers::gpr`].
    pub const fn index(self) -> usize {
        self as usize
    }
}

/// Which general registers hold pointers: one bit per [`Gpr`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RegTags(u16);

impl RegTags {
    /// No register.
    pub const NONE: RegTags = RegTags(0);
    /// Every general register.
    pub const ALL: RegTags = RegTags((1 << 15) - 1);

    /// The mask with `r` added.
    pub const fn with(self, r: Gpr) -> RegTags {
        RegTags(self.0 | 1 << r.index())
    }

    /// The registers in either mask.
    pub const fn union(self, other: RegTags) -> RegTags {
        RegTags(self.0 | other.0)
    }

    /// True when `r` is in the mask.
    pub const fn test(self, r: Gpr) -> bool {
        self.0 & (1 << r.index()) != 0
    }

    /// The registers whose value lies inside `area`: the emulated register tags.
    pub fn inferred(regs: &Registers, area: &Area) -> RegTags {
        Gpr::ALL
            .into_iter()
            .filter(|&r| area.contains(regs.get(r)))
            .fold(RegTags::NONE, RegTags::with)
    }
}

/// The user register context saved at the fork system call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Registers {
    /// The general registers, indexed by [`Gpr::index`].
    pub gpr: [u64; 15],
    /// The stack pointer.
    pub rsp: u64,
    /// The instruction pointer: where the μprocess resumes after the system call.
    pub rip: u64,
    /// The flags register (never a pointer).
    pub rflags: u64,
    /// The fs base: the thread-local storage pointer, or 0.
    pub fs_base: u64,
}

impl Registers {
    /// The value of a general register.
    pub const fn get(&self, r: Gpr) -> u64 {
        self.gpr[r.index()]
    }

    /// Sets a general register.
    pub const fn set(&mut self, r: Gpr, value: u64) {
        self.gpr[r.index()] = value;
    }

    /// The frame pointer.
    pub const fn rbp(&self) -> u64 {
        self.get(Gpr::Rbp)
    }

    /// Relocates the context from `from` to `to` in place: rip and rsp always (they must point
    /// into `from`; rsp may equal its end), the fs base when it points into `from`, and each
    /// general register in `tags` that points into `from`. Returns how many registers changed;
    /// on error nothing changed.
    pub fn relocate(&mut self, from: &Area, to: &Area, tags: RegTags) -> Result<usize, RelocError> {
        if from.size() != to.size() {
            return Err(RelocError::AreaMismatch);
        }
        if !from.contains(self.rip) {
            return Err(RelocError::RipOutsideArea);
        }
        if !from.contains_range(self.rsp, 0) {
            return Err(RelocError::RspOutsideArea);
        }
        let delta = from.delta_to(to);
        self.rip = self.rip.wrapping_add(delta);
        self.rsp = self.rsp.wrapping_add(delta);
        let mut changed = 2;
        if from.contains(self.fs_base) {
            self.fs_base = self.fs_base.wrapping_add(delta);
            changed += 1;
        }
        for r in Gpr::ALL {
            if tags.test(r) && from.contains(self.get(r)) {
                self.set(r, self.get(r).wrapping_add(delta));
                changed += 1;
            }
        }
        Ok(changed)
    }

    /// The child's context after fork: this (the parent's) context relocated to `to`, with rax
    /// set to 0 so that fork returns 0 in the child. The parent's rax gets the child's PID.
    pub fn fork_child(
        &self,
        from: &Area,
        to: &Area,
        tags: RegTags,
    ) -> Result<Registers, RelocError> {
        let mut child = *self;
        child.relocate(from, to, tags)?;
        child.set(Gpr::Rax, 0);
        Ok(child)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tagged_end_pointer_moves_with_the_area() {
        use crate::source::Precise;
        use crate::tags::ShadowTags;
        let from = Area::new(0x10_0000, 0x1_0000).unwrap();
        let to = Area::new(0x30_0000, 0x1_0000).unwrap();
        let mut tags = ShadowTags::new(from);
        tags.set(0x10_0008).unwrap();
        let mut words: PageWords = [0; crate::tags::SLOTS_PER_PAGE];
        words[0] = from.end();
        words[1] = from.end();
        let n = relocate_page(&Precise::new(&tags), &from, &to, 0x10_0000, &mut words).unwrap();
        assert_eq!(n, 1);
        assert_eq!(words[1], to.end(), "tagged: moved");
        assert_eq!(words[0], from.end(), "untagged: kept");
        let mut words2: PageWords = [0; crate::tags::SLOTS_PER_PAGE];
        words2[0] = from.end();
        let inferred = crate::source::Inferred::new(from);
        assert_eq!(
            relocate_page(&inferred, &from, &to, 0x10_0000, &mut words2),
            Ok(0)
        );
    }
    use crate::source::{Inferred, Precise, Union};
    use crate::tags::{SLOTS_PER_PAGE, ShadowTags};

    fn areas() -> (Area, Area) {
        (
            Area::new(0x4000_0000, 1 << 20).unwrap(),
            Area::new(0x4030_0000, 1 << 20).unwrap(),
        )
    }

    proptest::proptest! {
        /// A page relocated from slot `first` on is zero below it and, from it on, exactly
        /// what relocating the whole page gives, under every tag choice; only live slots count.
        #[test]
        fn relocating_from_a_slot_matches_the_whole_page_above_it_and_zeroes_below(
            first in 0usize..=SLOTS_PER_PAGE,
            values in proptest::collection::vec((0u64..4, 0u64..(1 << 20), proptest::bool::ANY), SLOTS_PER_PAGE),
        ) {
            use crate::source::{Emulated, TagChoice};
            let (p, c) = areas();
            let page = p.base() + 0x3000;
            let mut tags = ShadowTags::new(p);
            let mut words = [0u64; SLOTS_PER_PAGE];
            for (i, &(kind, offset, tagged)) in values.iter().enumerate() {
                // In the area, a small integer, a stale upper half with a small value, noise.
                words[i] = match kind {
                    0 => p.base() + offset,
                    1 => offset & 0xff,
                    2 => (p.base() & !0xffff_ffff) | (offset & 0xffff),
                    _ => offset.wrapping_mul(0x9e37_79b9_7f4a_7c15),
                };
                if tagged {
                    tags.set(page + 8 * i as u64).unwrap();
                }
            }
            for choice in TagChoice::ALL {
                let source = Emulated::new(choice, tags.clone());
                let (mut whole, mut live) = (words, words);
                let (mut t_whole, mut t_live) = (Tally::default(), Tally::default());
                relocate_page_tallied(&source, &p, &c, page, &mut whole, &mut t_whole).unwrap();
                relocate_page_from(&source, (&p, &c), (page, first), &mut live, &mut t_live).unwrap();
                let dead = first.min(SLOTS_PER_PAGE);
                proptest::prop_assert!(live[..dead].iter().all(|&w| w == 0));
                proptest::prop_assert_eq!(&live[dead..], &whole[dead..]);
                let moved = (dead..SLOTS_PER_PAGE).filter(|&i| whole[i] != words[i]).count();
                proptest::prop_assert_eq!(t_live.total() as usize, moved);
            }
        }
    }

    #[test]
    fn slot_masks_from_a_slot_drop_the_slots_below_it() {
        for first in [0, 1, 63, 64, 65, 300, 511, 512, 600] {
            let m = SlotMask::FULL.from_slot(first);
            assert_eq!(m.count(), SLOTS_PER_PAGE - first.min(SLOTS_PER_PAGE));
            assert!(first >= SLOTS_PER_PAGE || m.test(first));
            assert!(first == 0 || !m.test(first - 1));
        }
    }

    #[test]
    fn code_pointers_move_with_the_code_and_area_pointers_with_the_area_in_one_pass() {
        let (p, c) = areas();
        let page = p.base();
        // The new code range lies over the old area and the new area over the old code: a
        // second pass would move each moved word again.
        let code = CodeMove {
            from: c.base(),
            len: 0x8000,
            to: p.base() + 0x10_0000 - 0x8000,
        };
        let mut words = [0u64; SLOTS_PER_PAGE];
        words[0] = p.base() + 0x40; // area pointer
        words[1] = c.base() + 0x1234; // code pointer (old range)
        words[2] = c.base() + 0x8000; // one past the code: not code
        words[3] = 6; // a small integer
        words[4] = 0x9e37_79b9_7f4a_7c15; // a hash
        let before = words;
        let mut tally = Tally::default();
        let source = Inferred::new(p);
        let n =
            relocate_page_moving_code(&source, (&p, &c), Some(&code), page, &mut words, &mut tally)
                .unwrap();
        assert_eq!(n, 1);
        assert_eq!(tally.total(), 1);
        assert_eq!(words[0], c.base() + 0x40);
        assert_eq!(words[1], code.to + 0x1234);
        assert_eq!(&words[2..5], &before[2..5]);
        // Without a code move, or an unmoved one, code pointers stay.
        for code in [
            None,
            Some(CodeMove {
                to: code.from,
                ..code
            }),
        ] {
            let mut w = before;
            let n = relocate_page_moving_code(
                &source,
                (&p, &c),
                code.as_ref(),
                page,
                &mut w,
                &mut Tally::default(),
            )
            .unwrap();
            assert_eq!(n, 0);
            assert_eq!(w[1], before[1]);
            assert_eq!(w[0], c.base() + 0x40);
        }
        assert!(code.points_into(&before));
        assert!(!code.points_into(&[0; SLOTS_PER_PAGE]));
    }

    #[test]
    fn relocates_tagged_in_area_words_only() {
        let (p, c) = areas();
        let page = p.base() + 0x2000;
        let mut tags = ShadowTags::new(p);
        let mut words = [0u64; SLOTS_PER_PAGE];
        words[0] = p.base() + 0x10; // tagged pointer into the parent
        words[1] = p.base() + 0x20; // untagged (precise only): left alone
        words[2] = 0xffff_8000_0000_1000; // tagged, outside the area: left alone
        words[3] = p.end() - 8; // tagged
        for s in [0, 2, 3] {
            tags.set(page + 8 * s).unwrap();
        }
        let n = relocate_page(&Precise::new(&tags), &p, &c, page, &mut words).unwrap();
        assert_eq!(n, 2);
        assert_eq!(words[0], c.base() + 0x10);
        assert_eq!(words[1], p.base() + 0x20);
        assert_eq!(words[2], 0xffff_8000_0000_1000);
        assert_eq!(words[3], c.end() - 8);
        // The union also catches the untagged in-area word.
        let mut w2 = [0u64; SLOTS_PER_PAGE];
        w2[1] = p.base() + 0x20;
        let u = Union::new(Precise::new(&tags), Inferred::new(p));
        assert_eq!(relocate_page(&u, &p, &c, page, &mut w2), Ok(1));
        assert_eq!(w2[1], c.base() + 0x20);
    }

    #[test]
    fn page_errors() {
        let (p, c) = areas();
        let t = ShadowTags::new(p);
        let mut w = [0u64; SLOTS_PER_PAGE];
        let src = Precise::new(&t);
        assert_eq!(
            relocate_page(&src, &p, &c, p.base() + 8, &mut w),
            Err(RelocError::BadPage)
        );
        assert_eq!(
            relocate_page(&src, &p, &c, 0, &mut w),
            Err(RelocError::BadPage)
        );
        assert_eq!(relocate_page(&src, &p, &c, c.base(), &mut w), Ok(0));
        let big = Area::new(0, 1 << 21).unwrap();
        assert_eq!(
            relocate_page(&src, &p, &big, p.base(), &mut w),
            Err(RelocError::AreaMismatch)
        );
    }

    #[test]
    fn registers_relocate_and_fork_returns_zero_in_the_child() {
        let (p, c) = areas();
        let mut r = Registers {
            rip: p.base() + 0x1234,
            rsp: p.end() - 0x40,
            fs_base: p.base() + 0xf_0000,
            rflags: 0x202,
            ..Registers::default()
        };
        r.set(Gpr::Rax, 57); // the fork system-call number: an integer
        r.set(Gpr::Rbp, p.end() - 0x10);
        r.set(Gpr::Rdi, p.base() + 0x8000);
        r.set(Gpr::R12, 12345);
        let tags = RegTags::inferred(&r, &p);
        assert!(tags.test(Gpr::Rbp) && tags.test(Gpr::Rdi) && !tags.test(Gpr::Rax));
        let child = r.fork_child(&p, &c, tags).unwrap();
        assert_eq!(child.rip, c.base() + 0x1234);
        assert_eq!(child.rsp, c.end() - 0x40);
        assert_eq!(child.fs_base, c.base() + 0xf_0000);
        assert_eq!(child.rbp(), c.end() - 0x10);
        assert_eq!(child.get(Gpr::Rdi), c.base() + 0x8000);
        assert_eq!(child.get(Gpr::R12), 12345);
        assert_eq!(child.get(Gpr::Rax), 0);
        assert_eq!(child.rflags, 0x202);
        // An untagged pointer register is left alone.
        let mut r2 = r;
        assert_eq!(r2.relocate(&p, &c, RegTags::NONE), Ok(3));
        assert_eq!(r2.get(Gpr::Rdi), p.base() + 0x8000);
        // No TLS: fs base 0 stays 0. rsp at the area's end is allowed.
        let mut r3 = Registers {
            rip: p.base(),
            rsp: p.end(),
            ..Registers::default()
        };
        assert_eq!(r3.relocate(&p, &c, RegTags::ALL), Ok(2));
        assert_eq!((r3.fs_base, r3.rsp), (0, c.end()));
    }

    #[test]
    fn register_errors_change_nothing() {
        let (p, c) = areas();
        let r = Registers {
            rip: 0x1000,
            rsp: p.end() - 8,
            ..Registers::default()
        };
        let mut x = r;
        assert_eq!(
            x.relocate(&p, &c, RegTags::ALL),
            Err(RelocError::RipOutsideArea)
        );
        assert_eq!(x, r);
        let mut y = Registers {
            rip: p.base(),
            rsp: c.base(),
            ..Registers::default()
        };
        assert_eq!(
            y.relocate(&p, &c, RegTags::ALL),
            Err(RelocError::RspOutsideArea)
        );
        let big = Area::new(0, 1 << 21).unwrap();
        assert_eq!(
            r.fork_child(&p, &big, RegTags::ALL),
            Err(RelocError::AreaMismatch)
        );
    }

    mod props {
        use super::super::*;
        use crate::source::{Inferred, Precise};
        use crate::tags::{SLOTS_PER_PAGE, ShadowTags};
        use proptest::prelude::*;

        const P: u64 = 0x4000_0000;
        const C: u64 = 0x4030_0000;
        const SIZE: u64 = 1 << 20;

        fn word() -> impl Strategy<Value = u64> {
            prop_oneof![
                any::<u64>(),
                (0..SIZE).prop_map(|o| P + o),
                (0..SIZE).prop_map(|o| C + o),
                Just(P + SIZE),
            ]
        }

        proptest! {
            #[test]
            fn precise_round_trip_is_identity(
                words in proptest::collection::vec(word(), SLOTS_PER_PAGE),
                tagged in proptest::collection::vec(any::<bool>(), SLOTS_PER_PAGE),
                page in 0u64..256,
            ) {
                let p = Area::new(P, SIZE).unwrap();
                let c = Area::new(C, SIZE).unwrap();
                let ppage = P + page * PAGE_SIZE;
                let mut ptags = ShadowTags::new(p);
                for (i, &t) in tagged.iter().enumerate() {
                    if t { ptags.set(ppage + 8 * i as u64).unwrap(); }
                }
                let ctags = ptags.copy_for(&c).unwrap();
                let orig: PageWords = words.try_into().unwrap();
                let mut w = orig;
                let n = relocate_page(&Precise::new(&ptags), &p, &c, ppage, &mut w).unwrap();
                let mut expect = 0;
                for i in 0..SLOTS_PER_PAGE {
                    // Inside the area, or one past its end.
                    if tagged[i] && (p.contains(orig[i]) || orig[i] == p.end()) {
                        prop_assert_eq!(w[i], orig[i] - P + C);
                        expect += 1;
                    } else {
                        prop_assert_eq!(w[i], orig[i]);
                    }
                }
                prop_assert_eq!(n, expect);
                let back = relocate_page(&Precise::new(&ctags), &c, &p, ppage - P + C, &mut w).unwrap();
                // Back from the child: the relocated words, plus tagged words that pointed
                // into the child's area to begin with.
                let in_child = |x: u64| c.contains(x) || x == c.end();
                let into_child = (0..SLOTS_PER_PAGE).filter(|&i| tagged[i] && in_child(orig[i])).count();
                prop_assert_eq!(back, n + into_child);
                for i in 0..SLOTS_PER_PAGE {
                    if !(tagged[i] && in_child(orig[i])) {
                        prop_assert_eq!(w[i], orig[i]);
                    }
                }
            }

            #[test]
            fn inferred_round_trip_is_identity_without_child_pointers(
                words in proptest::collection::vec(word(), SLOTS_PER_PAGE),
            ) {
                let p = Area::new(P, SIZE).unwrap();
                let c = Area::new(C, SIZE).unwrap();
                let orig: PageWords = words.try_into().unwrap();
                let mut w = orig;
                relocate_page(&Inferred::new(p), &p, &c, P, &mut w).unwrap();
                prop_assert!(w.iter().all(|&x| !p.contains(x)));
                relocate_page(&Inferred::new(c), &c, &p, C, &mut w).unwrap();
                for i in 0..SLOTS_PER_PAGE {
                    if !c.contains(orig[i]) {
                        prop_assert_eq!(w[i], orig[i]);
                    }
                }
            }

            #[test]
            fn register_round_trip(gpr in proptest::array::uniform15(word()), rip in 0..SIZE,
                                   rsp in 0..=SIZE, fs in word()) {
                let p = Area::new(P, SIZE).unwrap();
                let c = Area::new(C, SIZE).unwrap();
                let r = Registers { gpr, rip: P + rip, rsp: P + rsp, rflags: 2, fs_base: fs };
                let tags = RegTags::inferred(&r, &p);
                let mut x = r;
                x.relocate(&p, &c, tags).unwrap();
                prop_assert_eq!(RegTags::inferred(&x, &p), RegTags::NONE);
                x.relocate(&c, &p, tags).unwrap();
                if !c.contains(fs) {
                    prop_assert_eq!(x.fs_base, r.fs_base);
                }
                prop_assert_eq!((x.rip, x.rsp), (r.rip, r.rsp));
                for g in Gpr::ALL {
                    if !c.contains(r.get(g)) {
                        prop_assert_eq!(x.get(g), r.get(g));
                    }
                }
            }
        }
    }
}
