//! Raw system-call wrappers for ring-3 code.

use crate::abi::{Error, Sysno};
use core::arch::asm;

/// Issues system call `no` with up to three arguments and decodes the result.
pub fn syscall3(no: Sysno, a0: u64, a1: u64, a2: u64) -> Result<u64, Option<Error>> {
    let ret: i64;
    // SAFETY: `syscall` transfers control to the kernel, which validates every argument and
    // preserves all registers except rax (result), rcx and r11 (clobbered by the instruction).
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") no as u64 => ret,
            in("rdi") a0, in("rsi") a1, in("rdx") a2,
            lateout("rcx") _, lateout("r11") _,
            options(nostack),
        );
    }
    Error::from_ret(ret)
}

/// Issues system call `no` with up to four arguments and decodes the result.
pub fn syscall4(no: Sysno, a0: u64, a1: u64, a2: u64, a3: u64) -> Result<u64, Option<Error>> {
    Error::from_ret(syscall4_raw(no, a0, a1, a2, a3))
}

/// Issues system call `no` with up to four arguments and returns `rax` undecoded (for calls
/// whose negative values carry more than an [`Error`]).
pub fn syscall4_raw(no: Sysno, a0: u64, a1: u64, a2: u64, a3: u64) -> i64 {
    let ret: i64;
    // SAFETY: as for `syscall3`; the fourth argument travels in r10.
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") no as u64 => ret,
            in("rdi") a0, in("rsi") a1, in("rdx") a2, in("r10") a3,
            lateout("rcx") _, lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// Writes `msg` to the kernel console.
pub fn log(msg: &str) -> Result<u64, Option<Error>> {
    syscall3(Sysno::Log, msg.as_ptr() as u64, msg.len() as u64, 0)
}

/// Ends the current run with `code`; does not return.
pub fn exit(code: u64) -> ! {
    let _ = syscall3(Sysno::Exit, code, 0, 0);
    unreachable!("the kernel never resumes a run after Exit")
}
