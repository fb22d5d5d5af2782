//! The physical frame allocator's logic: one bit per 4 KiB frame, set when the frame is free.
//!
//! The storage is any `[u64]` the owner provides (a static array in the kernel, a `Vec` in host
//! tests), so the allocator needs no heap and can run before the heap exists.
//!
//! Frames may also be *committed*: promised to an owner that takes them one at a time later
//! ([`FrameBitmap::commit`], [`FrameBitmap::alloc_committed`]), as a VMA backed page by page
//! on first use is. Committed frames stay free in the bitmap, but no other allocation may take
//! them, so a committed page is always there when its owner asks.

use crate::layout::PAGE_SIZE;

/// Why an allocator call failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// No free run of frames of the requested size and alignment.
    OutOfFrames,
    /// The address is not page-aligned or lies outside the managed range.
    BadAddress(u64),
    /// The frame was already free: a double free.
    DoubleFree(u64),
}

/// A bitmap frame allocator over `storage`, which must hold one bit per managed frame.
pub struct FrameBitmap<S> {
    storage: S,
    frames: usize,
    free: usize,
    hint: usize,
    committed: usize,
}

impl<S: AsRef<[u64]> + AsMut<[u64]>> FrameBitmap<S> {
    /// An allocator whose frames all start as used; `storage` bounds how many frames it manages.
    pub const fn new(storage: S) -> Self {
        FrameBitmap {
            storage,
            frames: 0,
            free: 0,
            hint: 0,
            committed: 0,
        }
    }

    /// Number of frames the storage can describe.
    pub fn capacity(&self) -> usize {
        self.storage.as_ref().len() * 64
    }

    /// Marks `[start, end)` (page-aligned physical addresses) free. Frames beyond the storage's
    /// capacity are ignored; the number of frames actually added is returned.
    pub fn add_free_range(&mut self, start: u64, end: u64) -> usize {
        let first = (start / PAGE_SIZE) as usize;
        let last = ((end / PAGE_SIZE) as usize).min(self.capacity());
        let mut added = 0;
        for f in first..last {
            if !self.is_free(f) {
                self.set(f, true);
                self.free += 1;
                added += 1;
            }
        }
        self.frames = self.frames.max(last);
        added
    }

    /// Number of free frames.
    pub fn free_frames(&self) -> usize {
        self.free
    }

    /// Number of free frames promised to owners who have not taken them yet.
    pub fn committed(&self) -> usize {
        self.committed
    }

    /// Free frames not committed.
    fn uncommitted(&self) -> usize {
        self.free - self.committed
    }

    /// Promises `count` frames to a caller that takes them later with
    /// [`FrameBitmap::alloc_committed`], keeping at least `reserve` other frames free for
    /// allocations that cannot wait (page tables); [`FrameError::OutOfFrames`] if there are
    /// not that many.
    pub fn commit(&mut self, count: usize, reserve: usize) -> Result<(), FrameError> {
        if self.uncommitted() < count.saturating_add(reserve) {
            return Err(FrameError::OutOfFrames);
        }
        self.committed += count;
        Ok(())
    }

    /// Takes back a promise of `count` frames never taken.
    pub fn uncommit(&mut self, count: usize) {
        self.committed = self.committed.saturating_sub(count);
    }

    /// Allocates one committed frame (which cannot fail while a commitment is left) and returns
    /// its physical address; [`FrameError::OutOfFrames`] when nothing is committed.
    pub fn alloc_committed(&mut self) -> Result<u64, FrameError> {
        if self.committed == 0 {
            return Err(FrameError::OutOfFrames);
        }
        let pa = self.alloc_one()?;
        self.committed -= 1;
        Ok(pa)
    }

    /// Allocates one frame and returns its physical address.
    pub fn alloc(&mut self) -> Result<u64, FrameError> {
        self.alloc_contiguous(1, 1)
    }

    /// Allocates `count` contiguous frames whose first frame number is a multiple of `align`
    /// frames (a power of two), returning the physical address of the first.
    pub fn alloc_contiguous(&mut self, count: usize, align: usize) -> Result<u64, FrameError> {
        if count == 0 || !align.is_power_of_two() || count > self.uncommitted() {
            return Err(FrameError::OutOfFrames);
        }
        if count == 1 && align == 1 {
            return self.alloc_one();
        }
        for from in [self.hint, 0] {
            let found = if count <= 64 && align <= 64 {
                self.first_fit_small(from, count, align)
            } else {
                self.first_fit_large(from, count, align)
            };
            if let Some(f) = found {
                return Ok(self.take_run(f, count));
            }
        }
        Err(FrameError::OutOfFrames)
    }

    /// Marks the `count` free frames from frame `f` used, moves the hint past them and
    /// returns the physical address of the first.
    fn take_run(&mut self, f: usize, count: usize) -> u64 {
        self.set_range(f, count, false);
        self.free -= count;
        self.hint = f + count;
        f as u64 * PAGE_SIZE
    }

    /// [`FrameBitmap::first_fit_small`] for any `count` and `align`: candidate starts one at a
    /// time, skipping words of used frames and past the last used frame of each failed
    /// attempt (no start at or before it can hold `count` free frames, since every such run
    /// would cover it), which it finds scanning the attempt's range from its end: with used
    /// frames scattered through free memory, an attempt reads a few words, not the whole run.
    fn first_fit_large(&self, from: usize, count: usize, align: usize) -> Option<usize> {
        let mut f = from.next_multiple_of(align);
        while f + count <= self.frames {
            if self.storage.as_ref()[f / 64] == 0 {
                // A whole word of used frames: skip it.
                f = ((f / 64 + 1) * 64).next_multiple_of(align);
                continue;
            }
            match self.last_used_in_range(f, count) {
                None => return Some(f),
                Some(used) => f = (used + 1).next_multiple_of(align),
            }
        }
        None
    }

    /// The last used frame of `[first, first + count)`, scanning from its end a word at a time.
    fn last_used_in_range(&self, first: usize, count: usize) -> Option<usize> {
        let words = self.storage.as_ref();
        let end = first + count;
        let mut f = end;
        while f > first {
            let w = (f - 1) / 64;
            let lo = first.max(w * 64);
            // Bits [lo % 64, f - w * 64) of word `w`.
            let n = f - lo;
            let mask = if n == 64 {
                u64::MAX
            } else {
                ((1u64 << n) - 1) << (lo % 64)
            };
            let used = !words[w] & mask;
            if used != 0 {
                return Some(w * 64 + 63 - used.leading_zeros() as usize);
            }
            f = lo;
        }
        None
    }

    /// The first frame at or after `from`, a multiple of `align`, that starts `count` free
    /// frames (both at most 64): a word of candidate starts at a time, each word seen through a
    /// two-word window so that runs may cross into the next word.
    fn first_fit_small(&self, from: usize, count: usize, align: usize) -> Option<usize> {
        let words = self.storage.as_ref();
        let used_words = self.frames.div_ceil(64).min(words.len());
        // Bits at the multiples of `align` within a word (words start at multiples of 64).
        let aligned = if align == 64 {
            1
        } else {
            (u64::MAX as u128 / ((1u128 << align) - 1)) as u64
        };
        let mut w = from / 64;
        let mut at_or_after = u64::MAX.checked_shl((from % 64) as u32).unwrap_or(0);
        while w < used_words {
            let cur = words[w];
            if cur & at_or_after & aligned != 0 {
                let next = words.get(w + 1).copied().unwrap_or(0);
                let starts = run_starts(u128::from(cur) | (u128::from(next) << 64), count);
                let starts = (starts as u64) & at_or_after & aligned;
                if starts != 0 {
                    let f = w * 64 + starts.trailing_zeros() as usize;
                    // Free bits never lie beyond `frames`, so neither does a free run.
                    return (f + count <= self.frames).then_some(f);
                }
            }
            w += 1;
            at_or_after = u64::MAX;
        }
        None
    }

    /// One frame: the first free one at or after the hint, else from the start (what the
    /// general search finds), a word at a time.
    fn alloc_one(&mut self) -> Result<u64, FrameError> {
        for from in [self.hint, 0] {
            let mut w = from / 64;
            let mut mask = u64::MAX << (from % 64);
            while w * 64 < self.frames {
                let bits = self.storage.as_ref()[w] & mask;
                if bits != 0 {
                    let f = w * 64 + bits.trailing_zeros() as usize;
                    if f >= self.frames {
                        break;
                    }
                    return Ok(self.take_run(f, 1));
                }
                w += 1;
                mask = u64::MAX;
            }
        }
        Err(FrameError::OutOfFrames)
    }

    /// Returns `count` frames starting at `addr` to the free pool.
    pub fn free_contiguous(&mut self, addr: u64, count: usize) -> Result<(), FrameError> {
        if !addr.is_multiple_of(PAGE_SIZE) {
            return Err(FrameError::BadAddress(addr));
        }
        let first = (addr / PAGE_SIZE) as usize;
        if first + count > self.frames {
            return Err(FrameError::BadAddress(addr));
        }
        if let Some(f) = self.first_in_range(first, count, true) {
            return Err(FrameError::DoubleFree(f as u64 * PAGE_SIZE));
        }
        self.set_range(first, count, true);
        self.free += count;
        self.hint = self.hint.min(first);
        Ok(())
    }

    /// Returns one frame to the free pool.
    pub fn free(&mut self, addr: u64) -> Result<(), FrameError> {
        self.free_contiguous(addr, 1)
    }

    /// True when the frame at `addr` is free.
    pub fn is_free_addr(&self, addr: u64) -> bool {
        let f = (addr / PAGE_SIZE) as usize;
        f < self.frames && self.is_free(f)
    }

    /// The words covering frames `[first, first + count)`: (word index, mask of the frames
    /// of the range in that word), a word at a time.
    fn range_words(first: usize, count: usize) -> impl Iterator<Item = (usize, u64)> {
        let end = first + count;
        let mut f = first;
        core::iter::from_fn(move || {
            if f >= end {
                return None;
            }
            let (w, bit) = (f / 64, f % 64);
            let n = (64 - bit).min(end - f);
            let mask = if n == 64 {
                u64::MAX
            } else {
                ((1u64 << n) - 1) << bit
            };
            f += n;
            Some((w, mask))
        })
    }

    /// The word index and bit mask of `[first, first + count)` when it lies within one word.
    #[inline]
    fn single_word_mask(first: usize, count: usize) -> (usize, u64) {
        let mask = if count == 64 {
            u64::MAX
        } else {
            ((1u64 << count) - 1) << (first % 64)
        };
        (first / 64, mask)
    }

    /// The first frame of `[first, first + count)` that is free (`free`) or used (`!free`).
    #[inline]
    fn first_in_range(&self, first: usize, count: usize, free: bool) -> Option<usize> {
        let words = self.storage.as_ref();
        if first % 64 + count <= 64 {
            // Within one word (the common case): one mask test.
            let (w, mask) = Self::single_word_mask(first, count);
            let bits = if free { words[w] } else { !words[w] } & mask;
            return (bits != 0).then(|| w * 64 + bits.trailing_zeros() as usize);
        }
        Self::range_words(first, count).find_map(|(w, mask)| {
            let bits = if free { words[w] } else { !words[w] } & mask;
            (bits != 0).then(|| w * 64 + bits.trailing_zeros() as usize)
        })
    }

    /// Marks frames `[first, first + count)` free or used, a word at a time.
    #[inline]
    fn set_range(&mut self, first: usize, count: usize, free: bool) {
        let words = self.storage.as_mut();
        if first % 64 + count <= 64 {
            let (w, mask) = Self::single_word_mask(first, count);
            if free {
                words[w] |= mask;
            } else {
                words[w] &= !mask;
            }
            return;
        }
        for (w, mask) in Self::range_words(first, count) {
            if free {
                words[w] |= mask;
            } else {
                words[w] &= !mask;
            }
        }
    }

    fn is_free(&self, f: usize) -> bool {
        self.storage.as_ref()[f / 64] & (1 << (f % 64)) != 0
    }

    fn set(&mut self, f: usize, free: bool) {
        let w = &mut self.storage.as_mut()[f / 64];
        if free {
            *w |= 1 << (f % 64);
        } else {
            *w &= !(1 << (f % 64));
        }
    }
}

/// Bit `i` of the result is set when bits `i..i + n` of `window` are all set (`1 <= n <= 64`).
#[inline]
fn run_starts(window: u128, n: usize) -> u128 {
    let mut m = window;
    let mut have = 1;
    while have < n {
        let s = have.min(n - have);
        m &= m >> s;
        have += s;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    #[test]
    fn committed_frames_are_kept_for_their_owner() {
        let mut b = FrameBitmap::new(vec![0u64; 1]);
        b.add_free_range(0, 10 * PAGE_SIZE);
        assert_eq!(
            b.commit(8, 3),
            Err(FrameError::OutOfFrames),
            "8 + a reserve of 3 > 10"
        );
        b.commit(6, 2).unwrap();
        assert_eq!(b.committed(), 6);
        // Four frames are not promised: a run of five cannot be had, four can.
        assert_eq!(b.alloc_contiguous(5, 1), Err(FrameError::OutOfFrames));
        let four = b.alloc_contiguous(4, 1).unwrap();
        assert_eq!(b.alloc(), Err(FrameError::OutOfFrames));
        // The owner still gets all six, and no more.
        let mut taken = Vec::new();
        for _ in 0..6 {
            taken.push(b.alloc_committed().unwrap());
        }
        assert_eq!(b.alloc_committed(), Err(FrameError::OutOfFrames));
        assert_eq!((b.free_frames(), b.committed()), (0, 0));
        b.free_contiguous(four, 4).unwrap();
        for pa in taken {
            b.free(pa).unwrap();
        }
        b.commit(3, 0).unwrap();
        b.uncommit(5);
        assert_eq!((b.free_frames(), b.committed()), (10, 0));
    }

    fn alloc_with(frames: usize) -> FrameBitmap<Vec<u64>> {
        let mut a = FrameBitmap::new(vec![0u64; frames.div_ceil(64)]);
        a.add_free_range(0, frames as u64 * PAGE_SIZE);
        a
    }

    #[test]
    fn allocates_every_frame_once() {
        let mut a = alloc_with(100);
        let mut got: Vec<u64> = (0..100).map(|_| a.alloc().unwrap()).collect();
        assert_eq!(a.alloc(), Err(FrameError::OutOfFrames));
        got.sort();
        got.dedup();
        assert_eq!(got.len(), 100);
        assert_eq!(a.free_frames(), 0);
    }

    #[test]
    fn large_runs_skip_past_the_last_used_frame_and_find_the_same_first_fit() {
        // Used frames scattered through free memory: one in every 1,000.
        let frames = 300_000;
        let mut a = alloc_with(frames);
        for f in (500..frames).step_by(1000) {
            a.set(f, false);
            a.free -= 1;
        }
        for (count, align) in [(65, 1), (999, 1), (2000, 1), (999, 64), (30_000, 1)] {
            let fast = a.first_fit_large(0, count, align);
            // The plain definition: the first aligned start whose range holds no used frame.
            let slow = (0..=frames - count)
                .filter(|s| s % align == 0)
                .find(|&s| (s..s + count).all(|f| a.is_free(f)));
            assert_eq!(fast, slow, "count {count} align {align}");
        }
        assert_eq!(a.last_used_in_range(400, 200), Some(500));
        assert_eq!(a.last_used_in_range(501, 499), None);
        assert_eq!(a.last_used_in_range(0, 2600), Some(2500));
    }

    #[test]
    fn free_and_double_free() {
        let mut a = alloc_with(8);
        let f = a.alloc().unwrap();
        assert!(!a.is_free_addr(f));
        a.free(f).unwrap();
        assert_eq!(a.free(f), Err(FrameError::DoubleFree(f)));
        assert_eq!(a.free(123), Err(FrameError::BadAddress(123)));
        assert_eq!(a.free(1 << 40), Err(FrameError::BadAddress(1 << 40)));
    }

    #[test]
    fn contiguous_respects_alignment_and_holes() {
        let mut a = FrameBitmap::new(vec![0u64; 4]);
        a.add_free_range(PAGE_SIZE, 40 * PAGE_SIZE);
        let p = a.alloc_contiguous(8, 8).unwrap();
        assert_eq!(p % (8 * PAGE_SIZE), 0);
        assert!(p >= PAGE_SIZE);
        let q = a.alloc_contiguous(8, 8).unwrap();
        assert_ne!(p, q);
        assert_eq!(a.alloc_contiguous(64, 1), Err(FrameError::OutOfFrames));
        a.free_contiguous(p, 8).unwrap();
        assert_eq!(a.alloc_contiguous(8, 8).unwrap(), p);
    }

    #[test]
    fn wraps_around_to_find_freed_frames() {
        let mut a = alloc_with(16);
        let all: Vec<u64> = (0..16).map(|_| a.alloc().unwrap()).collect();
        a.free(all[3]).unwrap();
        a.free(all[4]).unwrap();
        assert_eq!(a.alloc_contiguous(2, 1).unwrap(), all[3]);
    }

    #[test]
    fn runs_across_word_boundaries() {
        let mut a = alloc_with(300);
        let p = a.alloc_contiguous(70, 1).unwrap();
        let q = a.alloc_contiguous(130, 1).unwrap();
        assert_eq!(q, p + 70 * PAGE_SIZE);
        assert_eq!(a.free_frames(), 100);
        a.free_contiguous(q, 130).unwrap();
        assert_eq!(
            a.free_contiguous(q + 64 * PAGE_SIZE, 2),
            Err(FrameError::DoubleFree(q + 64 * PAGE_SIZE))
        );
        assert_eq!(
            a.free_contiguous(p, 71),
            Err(FrameError::DoubleFree(p + 70 * PAGE_SIZE))
        );
        a.free_contiguous(p, 70).unwrap();
        assert_eq!(a.free_frames(), 300);
        assert_eq!(a.alloc_contiguous(300, 1).unwrap(), 0);
    }

    /// The first fit the search must find: every candidate start, one at a time.
    fn naive_first_fit(
        a: &FrameBitmap<Vec<u64>>,
        from: usize,
        count: usize,
        align: usize,
    ) -> Option<usize> {
        let mut f = from.next_multiple_of(align);
        while f + count <= a.frames {
            if (f..f + count).all(|x| a.is_free(x)) {
                return Some(f);
            }
            f += align;
        }
        None
    }

    #[test]
    fn word_search_matches_a_frame_by_frame_search() {
        // xorshift64*: many random bitmaps, densities, sizes, alignments and starting points.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            x.wrapping_mul(0x2545_f491_4f6c_dd1d)
        };
        for round in 0..4000 {
            let frames = 1 + (next() % 400) as usize;
            let mut a = FrameBitmap::new(vec![0u64; frames.div_ceil(64) + (round % 2)]);
            a.add_free_range(0, frames as u64 * PAGE_SIZE);
            // Mark a random share of the frames used: sparse, dense or in long runs.
            let density = next() % 4;
            for f in 0..frames {
                let used = match density {
                    0 => next() % 8 == 0,
                    1 => next() % 2 == 0,
                    2 => next() % 8 != 0,
                    _ => (f / 37) % 3 == 1,
                };
                if used {
                    a.set(f, false);
                }
            }
            let count = 1 + (next() % 64) as usize;
            let align = 1usize << (next() % 7);
            let from = (next() % (frames as u64 + 64)) as usize;
            assert_eq!(
                a.first_fit_small(from, count, align),
                naive_first_fit(&a, from, count, align),
                "round {round}: frames {frames} count {count} align {align} from {from}"
            );
        }
    }

    #[test]
    fn ranges_beyond_capacity_are_ignored() {
        let mut a = FrameBitmap::new(vec![0u64; 1]);
        assert_eq!(a.add_free_range(0, 1000 * PAGE_SIZE), 64);
    }
}
