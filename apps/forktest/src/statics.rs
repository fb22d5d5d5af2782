//! A program's statics and code live in its area: each μprocess has its own copy of the
//! writable statics, tables of function pointers (relocated by the loader, then by `fork`) work
//! in parent and child, the child's code runs at its own address, and code is never writable.

use core::sync::atomic::{AtomicU64, Ordering};
use fjord_libos::process::{self, ExitStatus};

/// A writable static with an initial value (`.data`): one copy per μprocess.
static COUNTER: AtomicU64 = AtomicU64::new(41);

/// A static without an initial value (`.bss`).
static ZEROED: AtomicU64 = AtomicU64::new(0);

fn double(x: u64) -> u64 {
    2 * x
}

fn triple(x: u64) -> u64 {
    3 * x
}

/// Function pointers in a static: words the loader relocates (precise tags).
static TABLE: [fn(u64) -> u64; 2] = [double, triple];

/// A static holding a pointer to another static.
static POINTER: &AtomicU64 = &COUNTER;

/// Where this μprocess's code and statics are, to compare a child's with its parent's.
fn addresses() -> [u64; 2] {
    [
        addresses as *const () as usize as u64,
        core::ptr::addr_of!(COUNTER) as u64,
    ]
}

fn words(bytes: &[u8]) -> [u64; 2] {
    let w = |i: usize| u64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().unwrap_or_default());
    [w(0), w(1)]
}

/// Exit codes 80 to 89.
pub fn statics_and_code_in_the_area() -> Result<(), u8> {
    // Relocated at load: the table and the pointer work before any fork.
    let table = core::hint::black_box(&TABLE);
    if table[0](5) != 10 || table[1](5) != 15 || POINTER.load(Ordering::Relaxed) != 41 {
        return Err(80);
    }
    ZEROED.store(7, Ordering::Relaxed);
    let (r, w) = process::pipe().map_err(|_| 81)?;
    match process::fork() {
        Ok(0) => {
            // The child: the statics as of the fork, in its own copy at its own address.
            let mut code = 0;
            if COUNTER.fetch_add(100, Ordering::Relaxed) != 41
                || ZEROED.load(Ordering::Relaxed) != 7
            {
                code = 1;
            }
            let table = core::hint::black_box(&TABLE);
            if table[0](7) != 14 || table[1](7) != 21 || POINTER.load(Ordering::Relaxed) != 141 {
                code = 2;
            }
            let mut msg = [0u8; 16];
            for (m, a) in msg.chunks_exact_mut(8).zip(addresses()) {
                m.copy_from_slice(&a.to_le_bytes());
            }
            if process::write(w, &msg) != Ok(16) {
                code = 3;
            }
            process::exit(code);
        }
        Ok(child) => {
            COUNTER.fetch_add(1, Ordering::Relaxed);
            let mut got = [0u8; 16];
            let mut n = 0;
            while n < 16 {
                match process::read(r, &mut got[n..]) {
                    Ok(0) | Err(_) => return Err(82),
                    Ok(k) => n += k,
                }
            }
            match process::waitpid(child, 0) {
                Ok(Some((_, ExitStatus::Exited(0)))) => {}
                Ok(Some((_, ExitStatus::Exited(c)))) => return Err(83 + c.min(2)),
                _ => return Err(86),
            }
            let _ = (process::close(r), process::close(w));
            // The child's writes stayed its own; its code and statics were elsewhere, at the
            // same distance from each other (one area moved as a whole).
            if COUNTER.load(Ordering::Relaxed) != 42 {
                return Err(87);
            }
            let [code, data] = addresses();
            let [child_code, child_data] = words(&got);
            if child_code == code || child_data.wrapping_sub(child_code) != data.wrapping_sub(code)
            {
                return Err(88);
            }
        }
        Err(_) => return Err(81),
    }
    // Code is never writable, in the area or not: a child that writes its own code is killed.
    match process::fork() {
        Ok(0) => {
            let at = double as *const () as usize as *mut u8;
            // SAFETY: not safe at all: the write must fault, which is what is tested.
            unsafe { at.write_volatile(0xc3) };
            process::exit(0);
        }
        Ok(child) => match process::waitpid(child, 0) {
            Ok(Some((_, ExitStatus::Killed(11)))) => Ok(()),
            _ => Err(89),
        },
        Err(_) => Err(89),
    }
}

/// Written only by children: the parent's copy stays 0.
static SIBLING_MARK: AtomicU64 = AtomicU64::new(0);

/// Children forked one after another (each reaped before the next: the kernel hands an ended
/// child's PD and area to the next one, emptied) each see the parent's memory, never an
/// ended sibling's: a static each child writes reads as the parent's value in the next child,
/// and in the parent. Exit codes 90 to 94.
pub fn ended_siblings_leave_nothing_behind() -> Result<(), u8> {
    for round in 1..=4u64 {
        match process::fork() {
            Ok(0) => {
                let seen = SIBLING_MARK.swap(0x5eed_0000 + round, Ordering::Relaxed);
                process::exit(if seen == 0 { 0 } else { 1 })
            }
            Ok(pid) => match process::waitpid(pid, 0) {
                Ok(Some((_, ExitStatus::Exited(0)))) => {}
                Ok(Some((_, ExitStatus::Exited(_)))) => return Err(90),
                _ => return Err(91),
            },
            Err(_) => return Err(92),
        }
    }
    if SIBLING_MARK.load(Ordering::Relaxed) != 0 {
        return Err(93);
    }
    Ok(())
}
