//! The Jord PrivLib API (the paper's Table 1) as function code calls it.
//!
//! Permissions are bit sets: [`PROT_READ`], [`PROT_WRITE`], [`PROT_EXEC`]. Errors come back as
//! `Err(Some(Error))` (see [`crate::abi::Error`]).

use crate::abi::{Error, Sysno};
use crate::syscall::{syscall3, syscall4};

/// Read permission.
pub const PROT_READ: u64 = 1;
/// Write permission.
pub const PROT_WRITE: u64 = 2;
/// Execute permission.
pub const PROT_EXEC: u64 = 4;

/// The result of a PrivLib call.
pub type Result<T> = core::result::Result<T, Option<Error>>;

/// Allocates a VMA of `len` bytes with permission `prot`; returns its base address.
pub fn mmap(len: u64, prot: u64) -> Result<u64> {
    syscall3(Sysno::Mmap, len, prot, 0)
}

/// Frees the VMA at `addr` (or its tail beyond `len`).
pub fn munmap(addr: u64, len: u64) -> Result<()> {
    syscall3(Sysno::Munmap, addr, len, 0).map(drop)
}

/// Sets the caller's permission on the VMA at `addr`.
pub fn mprotect(addr: u64, len: u64, prot: u64) -> Result<()> {
    syscall3(Sysno::Mprotect, addr, len, prot).map(drop)
}

/// Moves the caller's permission on the VMA at `addr` to PD `cid` (as `prot`).
pub fn pmove(addr: u64, cid: u64, prot: u64) -> Result<()> {
    syscall3(Sysno::Pmove, addr, cid, prot).map(drop)
}

/// Grants PD `cid` permission `prot` (a subset of the caller's) on the VMA at `addr`.
pub fn pcopy(addr: u64, cid: u64, prot: u64) -> Result<()> {
    syscall3(Sysno::Pcopy, addr, cid, prot).map(drop)
}

/// Creates a protection domain; returns its id.
pub fn cget() -> Result<u64> {
    syscall3(Sysno::Cget, 0, 0, 0)
}

/// Destroys the protection domain `cid`.
pub fn cput(cid: u64) -> Result<()> {
    syscall3(Sysno::Cput, cid, 0, 0).map(drop)
}

/// Calls `func(arg)` inside PD `cid` and returns the value it passes to [`creturn`].
pub fn ccall(cid: u64, func: u64, arg: u64) -> Result<u64> {
    syscall4(Sysno::Ccall, cid, func, arg, 0)
}

/// Moves the caller's rights on the ArgBuf VMA at `argbuf` to PD `cid` (as `prot`) and calls
/// `func(argbuf)` there, in one system call; returns the value `cid` passes to [`creturn`] or
/// [`creturn_move`]. If the call is refused, nothing moved.
pub fn ccall_move(cid: u64, func: u64, argbuf: u64, prot: u64) -> Result<u64> {
    syscall4(Sysno::CcallMove, cid, func, argbuf, prot)
}

/// Moves the ArgBuf VMA at `argbuf` back to the PD that called (as `prot`) and returns `value`
/// to it, in one system call. Returns only if the move is refused (then nothing moved and the
/// caller goes on running).
pub fn creturn_move(value: u64, argbuf: u64, prot: u64) -> Result<core::convert::Infallible> {
    syscall3(Sysno::CreturnMove, value, argbuf, prot)?;
    unreachable!("the kernel never resumes a PD after a successful creturn_move")
}

/// Resumes the suspended PD `cid`; returns what it passes to its next `cexit` or `creturn`.
pub fn center(cid: u64) -> Result<u64> {
    syscall3(Sysno::Center, cid, 0, 0)
}

/// Suspends the calling PD, handing `value` to the PD that entered it.
pub fn cexit(value: u64) -> Result<u64> {
    syscall3(Sysno::Cexit, value, 0, 0)
}

/// Returns `value` to the caller of the current `ccall`; does not return.
pub fn creturn(value: u64) -> ! {
    let _ = syscall3(Sysno::Creturn, value, 0, 0);
    unreachable!("the kernel never resumes a PD after creturn")
}

/// The caller's PD id.
pub fn ucid() -> Result<u64> {
    syscall3(Sysno::Ucid, 0, 0, 0)
}
