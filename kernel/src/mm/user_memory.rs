//! Ring-3 memory as the kernel reaches it in a system call: the current address space's user
//! half, checked page by page before it is read or written.
//!
//! A system call runs with the caller's root table loaded and interrupts off, so the check and
//! the access see the same translations. A page the caller may use but whose leaf is not
//! installed yet (a VLB miss under Jord) is filled through `fill`, as a ring-3 access would.

use super::frames::DIRECT;
use crate::arch::cpu;
use fjord_kernel::layout::{PAGE_SIZE, align_down, is_user_range};
use fjord_kernel::paging::{Flags, PageTables};

/// Why a range of user memory cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadUserAddress;

/// Resolves a miss at `page` with the ring-3 fault `error` code (user, and write when bit 1 is
/// set); true when the page is now mapped as asked.
pub type Fill = fn(page: u64, error: u64) -> bool;

fn check(addr: u64, len: u64, write: bool, fill: Fill) -> Result<(), BadUserAddress> {
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
            _ if fill(page, error) => {}
            _ => return Err(BadUserAddress),
        }
        page += PAGE_SIZE;
    }
    Ok(())
}

/// Checks that ring 3 may write `[addr, addr + len)` in the loaded address space.
pub fn check_writable(addr: u64, len: u64, fill: Fill) -> Result<(), BadUserAddress> {
    check(addr, len, true, fill)
}

/// The `len` bytes of user memory at `addr`, after checking that ring 3 may read them in the
/// loaded address space; empty for `len == 0`.
pub fn bytes<'a>(addr: u64, len: u64, fill: Fill) -> Result<&'a [u8], BadUserAddress> {
    if len == 0 {
        return Ok(&[]);
    }
    check(addr, len, false, fill)?;
    // SAFETY: the range was just checked to be mapped user-readable in this address space,
    // which cannot change while this CPU runs the system call with interrupts off.
    Ok(unsafe { core::slice::from_raw_parts(addr as *const u8, len as usize) })
}

/// Copies `data` to user memory at `addr`, after checking that ring 3 may write it there.
pub fn copy_to(addr: u64, data: &[u8], fill: Fill) -> Result<(), BadUserAddress> {
    if data.is_empty() {
        return Ok(());
    }
    check(addr, data.len() as u64, true, fill)?;
    // SAFETY: the range was just checked to be mapped user-writable in this address space (as
    // for `bytes`); the kernel's own data never lies in the user half, so nothing of the kernel
    // is overwritten, and no reference to the destination exists.
    unsafe { core::ptr::copy_nonoverlapping(data.as_ptr(), addr as *mut u8, data.len()) };
    Ok(())
}
