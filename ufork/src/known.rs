//! Pointers the kernel can tell at `fork` from layouts it shares with the libos, without any
//! tag kept in memory: the frame-pointer chain of the stack (each frame's saved frame pointer
//! and return address) and the heap allocator's free lists (each list's head in the heap
//! header and each free block's link to the next).
//!
//! These tags are *transient*: they describe the parent's memory at the moment of the fork and
//! are used for that fork's relocation only, never kept in a shadow table, since the next
//! write to such a slot (a new frame, a block handed out) makes it data again. CHERI clears a
//! tag on every data write; an emulated table cannot, so it keeps only what stays a pointer
//! (the loader's relocations, the heap header's own words).
//!
//! Both walks read through `read` (the parent's word at an address, `None` when it cannot be
//! read), stop at the first link that leaves its region, goes the wrong way or repeats, and are
//! bounded, so a corrupted or hostile chain costs at most the bound and tags nothing outside
//! the area.

use crate::area::Area;
use alloc::vec::Vec;

/// Most frames [`frame_chain`] follows.
pub const MAX_FRAMES: usize = 256;
/// Most free blocks [`free_lists`] follows, over all lists.
pub const MAX_FREE_BLOCKS: usize = 4096;

/// The slots of the frame-pointer chain from `fp` within `stack`: for each frame, the slot of
/// the saved frame pointer (when it points further up the stack) and of the return address
/// (when it points into `area`). A frame pointer outside `stack`, misaligned, or not above
/// the previous one ends the walk.
pub fn frame_chain(
    fp: u64,
    stack: core::ops::Range<u64>,
    area: &Area,
    mut read: impl FnMut(u64) -> Option<u64>,
) -> Vec<u64> {
    let mut slots = Vec::new();
    let mut fp = fp;
    for _ in 0..MAX_FRAMES {
        if !fp.is_multiple_of(8) || fp < stack.start || fp.saturating_add(16) > stack.end {
            break;
        }
        let (Some(saved), Some(ret)) = (read(fp), read(fp + 8)) else {
            break;
        };
        if area.contains(ret) {
            slots.push(fp + 8);
        }
        if saved <= fp || saved.saturating_add(16) > stack.end || !saved.is_multiple_of(8) {
            break;
        }
        slots.push(fp);
        fp = saved;
    }
    slots
}

/// The slots of the heap allocator's free lists: the list heads at `heads` (`lists`
/// consecutive words, one per size class) that point to a block in `area`, then each listed
/// block's first word (its link to the next block) while that link points to a block in
/// `area` too. A link outside the area or misaligned ends its list; a cycle (a corrupted list)
/// ends with the bound, its slots listed more than once.
pub fn free_lists(
    heads: u64,
    lists: usize,
    area: &Area,
    mut read: impl FnMut(u64) -> Option<u64>,
) -> Vec<u64> {
    let mut slots = Vec::new();
    let mut budget = MAX_FREE_BLOCKS;
    for class in 0..lists as u64 {
        let mut slot = heads + 8 * class;
        while budget > 0 {
            let Some(next) = read(slot) else {
                break;
            };
            if next == 0 || !next.is_multiple_of(8) || !area.contains(next) {
                break;
            }
            slots.push(slot);
            slot = next;
            budget -= 1;
        }
    }
    slots
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::BTreeMap;

    const BASE: u64 = 0x4000_0000;

    fn area() -> Area {
        Area::new(BASE, 1 << 20).unwrap()
    }

    fn reader(m: &BTreeMap<u64, u64>) -> impl FnMut(u64) -> Option<u64> + '_ {
        |a| Some(m.get(&a).copied().unwrap_or(0))
    }

    #[test]
    fn a_chain_of_frames_tags_saved_frame_pointers_and_return_addresses() {
        let stack = BASE + 0x8000..BASE + 0xc000;
        let code = BASE + 0x100;
        let mut m = BTreeMap::new();
        // Three frames, innermost first; the outermost saves 0 (the end of the chain).
        let frames = [BASE + 0x9000, BASE + 0x9800, BASE + 0xbf00];
        for (i, &fp) in frames.iter().enumerate() {
            m.insert(fp, frames.get(i + 1).copied().unwrap_or(0));
            m.insert(fp + 8, code + 16 * i as u64);
        }
        let slots = frame_chain(frames[0], stack, &area(), reader(&m));
        let expected = [
            frames[0] + 8,
            frames[0],
            frames[1] + 8,
            frames[1],
            frames[2] + 8,
        ];
        assert_eq!(slots, expected);
    }

    #[test]
    fn a_chain_that_goes_down_leaves_the_stack_or_is_misaligned_stops() {
        let stack = BASE + 0x8000..BASE + 0xc000;
        let mut m = BTreeMap::new();
        let fp = BASE + 0x9000;
        // Saved frame pointer below this one (a loop): only the return address counts.
        m.insert(fp, fp - 0x100);
        m.insert(fp + 8, BASE + 0x200);
        assert_eq!(
            frame_chain(fp, stack.clone(), &area(), reader(&m)),
            [fp + 8]
        );
        // A return address outside the area is no tag; a start outside the stack reads nothing.
        m.insert(fp + 8, 0xdead_0000);
        assert!(frame_chain(fp, stack.clone(), &area(), reader(&m)).is_empty());
        assert!(frame_chain(BASE + 0x100, stack.clone(), &area(), reader(&m)).is_empty());
        assert!(frame_chain(fp + 4, stack.clone(), &area(), reader(&m)).is_empty());
        // A self-loop stops after its first frame.
        m.insert(fp, fp);
        m.insert(fp + 8, BASE + 0x200);
        assert_eq!(frame_chain(fp, stack, &area(), reader(&m)), [fp + 8]);
    }

    #[test]
    fn free_lists_tag_each_head_and_link_inside_the_area() {
        let heads = BASE + 0xff00;
        let mut m = BTreeMap::new();
        // Class 0: two blocks; class 2: one block; class 1 empty; class 3 a head outside.
        m.insert(heads, BASE + 0x1000);
        m.insert(BASE + 0x1000, BASE + 0x1010);
        m.insert(heads + 16, BASE + 0x2000);
        m.insert(heads + 24, 0x7777_0000);
        let slots = free_lists(heads, 4, &area(), reader(&m));
        assert_eq!(slots, [heads, BASE + 0x1000, heads + 16]);
    }

    #[test]
    fn a_cyclic_or_misaligned_free_list_ends_within_the_bound() {
        let heads = BASE + 0xff00;
        let mut m = BTreeMap::new();
        m.insert(heads, BASE + 0x1000);
        m.insert(BASE + 0x1000, BASE + 0x1010);
        m.insert(BASE + 0x1010, BASE + 0x1000);
        m.insert(heads + 8, BASE + 0x2004);
        let slots = free_lists(heads, 2, &area(), reader(&m));
        assert_eq!(slots.len(), MAX_FREE_BLOCKS);
        assert!(
            slots
                .iter()
                .all(|s| [heads, BASE + 0x1000, BASE + 0x1010].contains(s))
        );
        // Unreadable memory ends a list too.
        let slots = free_lists(heads, 2, &area(), |a| (a == heads).then_some(BASE + 0x1000));
        assert_eq!(slots, [heads]);
    }
}
