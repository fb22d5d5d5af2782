//! Ring-3 memory as the kernel reaches it in a system call: the current address space's user
//! half, checked page by page before it is read or written.
//!
//! A system call runs with the caller's root table loaded and interrupts off, so the check and
//! the access see the same translations. A page the caller may use but whose leaf is not
//! installed yet (a VLB miss under Jord) is filled through the kernel's ring-3 page-fault
//! handler ([`crate::arch::user::resolve_user_fault`]), as a ring-3 access would be.

use super::frames::DIRECT;
use crate::arch::cpu;
use fjord_kernel::layout::{PAGE_SIZE, align_down, is_user_range};
use fjord_kernel::paging::{Flags, PageTables};

/// Why a range of user memory cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadUserAddress;

impl From<BadUserAddress> for fjord_libos::abi::Error {
    fn from(_: BadUserAddress) -> Self {
        fjord_libos::abi::Error::BadAddress
    }
}

fn check(addr: u64, len: u64, write: bool) -> Result<(), BadUserAddress> {
    if !is_user_range(addr, len) {
        return Err(BadUserAddress);
    }
    let need = if write {
        Flags::USER.union(Flags::WRITABLE)
    } else {
        Flags::USER
    };
    // Error code of the equivalent ring-3 fault: user (bit 2), write (bit 1).
    let error = if write { 6 } else { 4 };
    let mut page = align_down(addr, PAGE_SIZE);
    while page < addr + len {
        let pt = PageTables::new(cpu::read_cr3() & !0xfff, &DIRECT);
        match pt.translate(page) {
            Some(t) if t.flags.contains(need) => {}
            _ if crate::arch::user::resolve_user_fault(page, error) => {}
            _ => return Err(BadUserAddress),
        }
        page += PAGE_SIZE;
    }
    Ok(())
}

/// Checks that ring 3 may write `[addr, addr + len)` in the loaded address space.
pub fn check_writable(addr: u64, len: u64) -> Result<(), BadUserAddress> {
    check(addr, len, true)
}

/// The `len` bytes of user memory at `addr`, after checking that ring 3 may read them in the
/// loaded address space; empty for `len == 0`.
pub fn bytes<'a>(addr: u64, len: u64) -> Result<&'a [u8], BadUserAddress> {
    if len == 0 {
        return Ok(&[]);
    }
    check(addr, len, false)?;
    // SAFETY: the range was just checked to be mapped user-readable in this address space,
    // which cannot change while this CPU runs the system call with interrupts off.
    Ok(unsafe { core::slice::from_raw_parts(addr as *const u8, len as usize) })
}

/// Copies `data` to user memory at `addr`, after checking that ring 3 may write it there.
pub fn copy_to(addr: u64, data: &[u8]) -> Result<(), BadUserAddress> {
    if data.is_empty() {
        return Ok(());
    }
    check(addr, data.len() as u64, true)?;
    // SAFETY: the range was just checked to be mapped user-writable in this address space (as
    // for `bytes`); the kernel's own data never lies in the user half, so nothing of the kernel
    // is overwritten, and no reference to the destination exists.
    unsafe { core::ptr::copy_nonoverlapping(data.as_ptr(), addr as *mut u8, data.len()) };
    Ok(())
}
