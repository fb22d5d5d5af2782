//! `discard` (Linux's `madvise(MADV_DONTNEED)`): pages given back read as zero and work again
//! when next written; bad arguments get error codes; a forked child that discards the pages
//! it shares or still lacks spares its parent's later writes every copy, while the parent
//! keeps its own contents (what Redis's saving child does with the values it wrote); and a
//! parent that discards pages its child has not read leaves the child their contents.

use fjord_libos::abi::{Error, Sysno};
use fjord_libos::process::{self, ExitStatus};
use fjord_libos::syscall::syscall3;

/// Pages of each check.
const PAGES: usize = 16;

/// Fills every page of `m` with its own byte pattern from `seed`.
fn fill(m: &mut process::Mapping, seed: u8) {
    for (i, p) in m.pages_mut().iter_mut().enumerate() {
        p.0.fill(seed.wrapping_add(i as u8));
    }
}

/// Whether every page of `m` holds its pattern from `seed`.
fn holds(m: &process::Mapping, seed: u8) -> bool {
    m.pages()
        .iter()
        .enumerate()
        .all(|(i, p)| p.0.iter().all(|&b| b == seed.wrapping_add(i as u8)))
}

/// Whether every byte of `m` is zero.
fn zeroed(m: &process::Mapping) -> bool {
    m.pages().iter().all(|p| p.0.iter().all(|&b| b == 0))
}

/// Runs the checks; `Err` carries the exit code (100 to 140).
pub fn discarded_pages() -> Result<(), u8> {
    alone()?;
    forked()?;
    parent_discards()?;
    peak_is_a_high_water_mark()?;
    random_calls()
}

/// A child's peak private memory grows by the pages it writes (a lazily forked one's), stays
/// when it gives them back, and does not grow again while it holds fewer than at its peak.
fn peak_is_a_high_water_mark() -> Result<(), u8> {
    let mut m = process::map(PAGES).ok_or(134)?;
    fill(&mut m, 13);
    match process::fork() {
        Ok(0) => {
            let start = process::peak_private_memory();
            fill(&mut m, 17);
            let grown = process::peak_private_memory();
            let held = process::private_memory();
            let given = process::discard(m.bytes_mut());
            let dropped = held - process::private_memory().min(held);
            for p in &mut m.pages_mut()[..PAGES / 2] {
                p.0.fill(19);
            }
            let after = process::peak_private_memory();
            // A full copy holds every page from the fork on; a lazy one takes each when
            // written (and counts its copies).
            let lazy = process::copied_memory() > 0;
            let least = if lazy { start } else { 0 } + (PAGES * 4096) as u64;
            let code = if grown < least {
                135
            } else if given != Ok(PAGES as u64) {
                136
            } else if after != grown {
                137
            } else if dropped != (PAGES * 4096) as u64 {
                // What it holds now fell by the pages it gave back.
                140
            } else {
                0
            };
            process::exit(code)
        }
        Ok(child) => match process::waitpid(child, 0) {
            Ok(Some((_, ExitStatus::Exited(0)))) => Ok(()),
            Ok(Some((_, ExitStatus::Exited(code)))) => Err(code),
            _ => Err(138),
        },
        Err(_) => Err(139),
    }
}

/// Random `discard` calls: lists of ranges inside a mapping of its own, across its ends,
/// off page boundaries, at page 0, in the kernel's half and non-canonical, of lengths from 0
/// to overflowing, up to more ranges than a call takes, from lists it can and cannot read.
/// Every call must succeed (at most the pages asked) or fail with a defined error, and every
/// page of the mapping must read as its pattern or as zeros, never anything else; some calls
/// succeed and some fail.
fn random_calls() -> Result<(), u8> {
    const CALLS: usize = 2000;
    // Two guard pages on each side: no range that stays in the area reaches beyond them.
    const GUARD: usize = 2;
    let mut m = process::map(PAGES + 2 * GUARD).ok_or(130)?;
    fill(&mut m, 21);
    let base = m.address() + (GUARD * 4096) as u64;
    let end = base + (PAGES * 4096) as u64;
    let mut rng = fjord_libos::rand::XorShift(0x5eed_d15c_a4d0_0001);
    let mut list = [[0u64; 2]; fjord_libos::abi::DISCARD_MAX + 2];
    let (mut oks, mut errors) = (0, 0);
    for _ in 0..CALLS {
        let n = (rng.next_u64() % (list.len() as u64 + 1)) as usize;
        for r in list.iter_mut().take(n) {
            let page = base + (rng.next_u64() % PAGES as u64) * 4096;
            r[0] = match rng.next_u64() % 8 {
                0..=3 => page,
                4 => page + rng.pick(&[1, 8, 4095]),
                5 => rng.pick(&[0, 4096, end, end - 4096, base.wrapping_sub(4096)]),
                6 => rng.pick(&[0xffff_8000_0000_0000, 0xffff_ffff_ffff_f000, 1 << 63]),
                _ => rng.next_u64(),
            };
            r[1] = match rng.next_u64() % 6 {
                0..=2 => rng.pick(&[1, 4096, 8192]),
                3 => 0,
                4 => end.saturating_sub(r[0]) + rng.pick(&[0, 1, 4096]),
                _ => {
                    let any = rng.next_u64();
                    rng.pick(&[u64::MAX, u64::MAX - 4095, 1 << 40, any])
                }
            };
        }
        let at = match rng.next_u64() % 10 {
            0 => rng.pick(&[0, 0x1000, 0xffff_8000_0000_0000, 1 << 63, u64::MAX - 7]),
            _ => list.as_ptr() as u64,
        };
        match syscall3(Sysno::Discard, at, n as u64, 0) {
            Ok(given) if given <= (n * PAGES) as u64 => oks += 1,
            Err(Some(Error::InvalidArgs | Error::BadAddress | Error::AccessDenied)) => errors += 1,
            _ => return Err(131),
        }
    }
    if oks == 0 || errors == 0 {
        return Err(133);
    }
    let intact = m
        .pages()
        .iter()
        .enumerate()
        .skip(GUARD)
        .take(PAGES)
        .all(|(i, p)| {
            let pattern = 21u8.wrapping_add(i as u8);
            p.0.iter().all(|&b| b == pattern) || p.0.iter().all(|&b| b == 0)
        });
    if intact { Ok(()) } else { Err(132) }
}

/// After a fork, the parent discards pages its child has not read yet: the child still reads
/// them as they were at the fork, and the parent reads zeros.
fn parent_discards() -> Result<(), u8> {
    let mut m = process::map(PAGES).ok_or(100)?;
    fill(&mut m, 11);
    let (from_parent, to_child) = process::pipe().map_err(|_| 101)?;
    match process::fork() {
        Ok(0) => {
            let mut c = [0u8; 1];
            if process::read(from_parent, &mut c) != Ok(1) {
                process::exit(102);
            }
            process::exit(if holds(&m, 11) { 0 } else { 103 })
        }
        Ok(child) => {
            let discarded = process::discard(m.bytes_mut());
            process::write(to_child, b"r").map_err(|_| 104)?;
            let status = process::waitpid(child, 0);
            let _ = (process::close(from_parent), process::close(to_child));
            match status {
                Ok(Some((_, ExitStatus::Exited(0)))) if discarded.is_ok() && zeroed(&m) => Ok(()),
                Ok(Some((_, ExitStatus::Exited(code)))) if code != 0 => Err(code),
                _ => Err(105),
            }
        }
        Err(_) => Err(106),
    }
}

/// Without a fork: the pages read as zero and take writes again; only whole pages go;
/// misaligned or foreign addresses are refused.
fn alone() -> Result<(), u8> {
    let mut m = process::map(PAGES).ok_or(110)?;
    fill(&mut m, 1);
    // Less than a page inside the mapping: nothing goes.
    let b = m.bytes_mut();
    if process::discard(&mut b[10..4000]) != Ok(0) || !holds(&m, 1) {
        return Err(111);
    }
    // One byte into the first page to one byte short of the end: the whole pages between.
    let b = m.bytes_mut();
    let n = b.len();
    if process::discard(&mut b[1..n - 1]) != Ok(PAGES as u64 - 2) {
        return Err(112);
    }
    let (first, last) = (&m.pages()[0], &m.pages()[PAGES - 1]);
    let middle = m.pages()[1..PAGES - 1]
        .iter()
        .all(|p| p.0.iter().all(|&b| b == 0));
    if !middle || first.0[0] != 1 || last.0[4095] != 1u8.wrapping_add(PAGES as u8 - 1) {
        return Err(113);
    }
    fill(&mut m, 9);
    if !holds(&m, 9) {
        return Err(114);
    }
    let b = m.bytes_mut();
    let addr = b.as_ptr() as u64;
    if process::discard(b) != Ok(PAGES as u64) || !zeroed(&m) {
        return Err(115);
    }
    // The raw call: an address off a page boundary, memory outside the caller's area, too
    // many ranges, a list the caller cannot read.
    let raw = |ranges: &[[u64; 2]]| {
        syscall3(
            Sysno::Discard,
            ranges.as_ptr() as u64,
            ranges.len() as u64,
            0,
        )
    };
    if raw(&[[addr + 8, 4096]]) != Err(Some(Error::InvalidArgs)) {
        return Err(116);
    }
    if raw(&[[0x1000, 4096]]) != Err(Some(Error::BadAddress)) {
        return Err(117);
    }
    if raw(&[[addr, u64::MAX - 100]]) != Err(Some(Error::BadAddress)) {
        return Err(118);
    }
    let many = [[addr, 4096]; fjord_libos::abi::DISCARD_MAX + 1];
    if raw(&many) != Err(Some(Error::InvalidArgs)) {
        return Err(119);
    }
    if syscall3(Sysno::Discard, 0x1000, 1, 0) != Err(Some(Error::BadAddress)) {
        return Err(109);
    }
    // Several buffers in one call: every page of each goes.
    fill(&mut m, 5);
    let (a, b) = m.pages_mut().split_at_mut(PAGES / 2);
    let mut bufs: [&mut [u8]; 2] = [&mut a[1].0, &mut b[0].0];
    if process::discard_all(&mut bufs) != Ok(2) {
        return Err(108);
    }
    let gone = |i: usize| m.pages()[i].0.iter().all(|&b| b == 0);
    if !gone(1) || !gone(PAGES / 2) || gone(0) || gone(2) {
        return Err(107);
    }
    Ok(())
}

/// After a fork: the child reads half the pages (so it shares them with its parent), leaves
/// the other half untouched (it still lacks them), and discards them all; the parent then
/// writes every page. None of those writes copies a page into the child, the child reads
/// zeros, and the parent reads what it wrote.
fn forked() -> Result<(), u8> {
    let mut m = process::map(PAGES).ok_or(120)?;
    fill(&mut m, 3);
    let (from_parent, to_child) = process::pipe().map_err(|_| 121)?;
    let (from_child, to_parent) = process::pipe().map_err(|_| 122)?;
    match process::fork() {
        Ok(0) => {
            let half = m.pages()[..PAGES / 2]
                .iter()
                .enumerate()
                .all(|(i, p)| p.0.iter().all(|&b| b == 3 + i as u8));
            let b = m.bytes_mut();
            let given = process::discard(b);
            let before = process::copied_memory();
            let mut c = [0u8; 1];
            if process::write(to_parent, b"d") != Ok(1)
                || process::read(from_parent, &mut c) != Ok(1)
            {
                process::exit(123);
            }
            let after = process::copied_memory();
            let code = if !half {
                124
            } else if given.is_err() {
                125
            } else if after != before {
                // The parent's writes copied pages the child had given up.
                126
            } else if !zeroed(&m) {
                127
            } else {
                0
            };
            process::exit(code)
        }
        Ok(child) => {
            let mut c = [0u8; 1];
            process::read(from_child, &mut c).map_err(|_| 128)?;
            let kept = holds(&m, 3);
            fill(&mut m, 7);
            process::write(to_child, b"w").map_err(|_| 128)?;
            let status = process::waitpid(child, 0);
            for fd in [from_parent, to_child, from_child, to_parent] {
                let _ = process::close(fd);
            }
            match status {
                Ok(Some((_, ExitStatus::Exited(0)))) if kept && holds(&m, 7) => Ok(()),
                Ok(Some((_, ExitStatus::Exited(code)))) if code != 0 => Err(code),
                _ => Err(129),
            }
        }
        Err(_) => Err(120),
    }
}
