//! A μprocess's faults reach its parent's `waitpid` as the signal a POSIX system sends: an
//! invalid instruction SIGILL, a division by zero SIGFPE, a breakpoint SIGTRAP, a wild read
//! SIGSEGV; and the memory model: memory a μprocess maps is in its area (served from its heap),
//! so a child uses what its parent mapped before the fork, and the kernel's own `mmap` and
//! `cget` refuse a μprocess.

use fjord_libos::abi::Error;
use fjord_libos::process::{self, ExitStatus};

/// Forks a child that runs `f`, and returns how it ended.
fn child_ends(f: fn()) -> Option<ExitStatus> {
    match process::fork() {
        Ok(0) => {
            f();
            process::exit(0)
        }
        Ok(pid) => match process::waitpid(pid, 0) {
            Ok(Some((p, status))) if p == pid => Some(status),
            _ => None,
        },
        Err(_) => None,
    }
}

fn invalid_instruction() {
    // SAFETY: `ud2` raises #UD on purpose; the child is killed and never resumes.
    unsafe { core::arch::asm!("ud2") };
}

fn divide_by_zero() {
    let zero = core::hint::black_box(0u64);
    // SAFETY: `div` by zero raises #DE on purpose; the child is killed and never resumes.
    unsafe {
        core::arch::asm!("div {z}", z = in(reg) zero, inout("rax") 1u64 => _, inout("rdx") 0u64 => _)
    };
}

fn breakpoint() {
    // SAFETY: `int3` raises #BP on purpose; the child is killed and never resumes.
    unsafe { core::arch::asm!("int3") };
}

fn wild_read() {
    let p = core::hint::black_box(0x10usize) as *const u64;
    // SAFETY: none intended: the address is unmapped; the read must fault.
    let _ = unsafe { p.read_volatile() };
}

/// Runs the checks; `Err` carries the exit code (90 to 99).
pub fn faults_and_memory() -> Result<(), u8> {
    let cases: [(fn(), u8, u8); 4] = [
        (invalid_instruction, 4, 90),
        (divide_by_zero, 8, 91),
        (breakpoint, 5, 92),
        (wild_read, 11, 93),
    ];
    for (f, signal, code) in cases {
        if child_ends(f) != Some(ExitStatus::Killed(signal)) {
            return Err(code);
        }
    }
    // Memory mapped before the fork: in the area, so the child has its own copy.
    let mut pages = process::map(3).ok_or(94)?;
    let zero = pages.pages().iter().all(|p| p.0.iter().all(|&b| b == 0));
    if !zero || pages.address() % 4096 != 0 {
        return Err(95);
    }
    pages.pages_mut()[1].0[904] = 42;
    match process::fork() {
        Ok(0) => {
            let ok = pages.pages()[1].0[904] == 42;
            pages.pages_mut()[1].0[904] = 7;
            process::exit(if ok { 0 } else { 1 });
        }
        Ok(pid) => match process::waitpid(pid, 0) {
            Ok(Some((_, ExitStatus::Exited(0)))) if pages.pages()[1].0[904] == 42 => {}
            _ => return Err(96),
        },
        Err(_) => return Err(97),
    }
    drop(pages);
    // The kernel's own mmap and cget: a μprocess has neither.
    if fjord_libos::privlib::mmap(4096, 3) != Err(Some(Error::AccessDenied)) {
        return Err(98);
    }
    if fjord_libos::privlib::cget() != Err(Some(Error::AccessDenied)) {
        return Err(99);
    }
    Ok(())
}
