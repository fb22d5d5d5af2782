//! Integers that real programs keep in 8-byte slots whose upper half an earlier pointer left
//! (an `i32` descriptor or count stored over a spilled pointer), and keys that fall just
//! outside the area: `fork` must not take them for pointers. μFork's inferred tags once
//! relocated a child's pipe descriptors 3 and 6 this way; the kernel now places every area clear
//! of the 4 GiB edges, so no such word can point into one.

use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use core::hint::black_box;
use fjord_libos::process::{self, ExitStatus};

/// The integers written over stale pointers: descriptors, small counts, error codes, lengths.
fn integers(r: u32, w: u32) -> [i32; 8] {
    [r as i32, w as i32, 0, 1, -1, 4096, 1_000_000, -16_000_000]
}

/// `slot` with its low half replaced by `v`: what storing an `i32` over a pointer leaves.
fn over(slot: u64, v: i32) -> u64 {
    (slot & !0xFFFF_FFFF) | u64::from(v as u32)
}

/// Runs the check; `Err` carries the exit code (80 to 88).
pub fn integers_over_stale_pointers() -> Result<(), u8> {
    let anchor = Box::new(0x5eed_u64);
    let ptr = black_box(&*anchor as *const u64 as u64);
    let (r, w) = process::pipe().map_err(|_| 80)?;
    let ints = integers(r, w);
    // On the heap: each slot first held a pointer into the area.
    let mut heap: Box<[u64; 8]> = Box::new([ptr; 8]);
    for (s, v) in heap.iter_mut().zip(ints) {
        *s = over(*s, v);
    }
    // On the stack, the same.
    let mut stack = black_box([ptr; 8]);
    for (s, v) in stack.iter_mut().zip(ints) {
        *s = over(*s, v);
    }
    let stack = black_box(stack);
    let expected: Vec<u64> = heap.iter().copied().collect();
    // Keys just outside the area (around the anchor, beyond any area a program gets) and
    // values over stale upper halves.
    let near: BTreeMap<u64, u64> = (1..=64u64)
        .flat_map(|k| [ptr ^ (1 << 40) ^ k, ptr.wrapping_sub(1 << 36) + k])
        .map(|k| (k, over(ptr, k as i32)))
        .collect();
    let pairs: Vec<(u64, u64)> = near.iter().map(|(&k, &v)| (k, v)).collect();
    match process::fork() {
        Ok(0) => {
            let _ = process::close(r);
            let code = if heap.iter().copied().collect::<Vec<_>>() != expected {
                81
            } else if stack.iter().zip(expected.iter()).any(|(a, b)| a != b) {
                82
            } else if near.iter().map(|(&k, &v)| (k, v)).collect::<Vec<_>>() != pairs {
                83
            } else {
                // The descriptor as the program reads it back: the slot's low half.
                let fd = heap[1] as u32;
                if process::write(fd, b"k") == Ok(1) {
                    0
                } else {
                    84
                }
            };
            process::exit(code);
        }
        Ok(child) => {
            process::close(w).map_err(|_| 85)?;
            let mut got = [0u8; 4];
            let n = process::read(r, &mut got).map_err(|_| 86)?;
            let _ = process::close(r);
            match process::waitpid(child, 0) {
                Ok(Some((_, ExitStatus::Exited(0)))) if n == 1 && got[0] == b'k' => Ok(()),
                Ok(Some((_, ExitStatus::Exited(code)))) if code != 0 => Err(code),
                _ => Err(87),
            }
        }
        Err(_) => Err(88),
    }
}
