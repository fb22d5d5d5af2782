//! Fallible copies between the kernel and ring-3 memory: the access itself is the check.
//!
//! Rather than walking the loaded page tables before touching a user buffer, the kernel
//! touches it with one of the routines below and lets the MMU decide, as Linux's
//! `copy_to_user` does with its exception table. A page fault whose RIP lies in these routines
//! is handled by [`on_fault`]: a page ring 3 may use but whose leaf is not installed yet (a
//! VLB miss under Jord, a lazily copied page of a forked child) is filled by the ring-3
//! page-fault handler and the instruction runs again; any other fault makes the routine
//! return failure instead of crashing the kernel.
//!
//! What the MMU enforces here is what ring 3 would get, because of two facts of the layout
//! (see `fjord_kernel::layout`): every leaf the kernel installs below [`USER_END`] above PML4
//! slot 0 is a user leaf (`jord::vlb::leaf_flags`), and CR0.WP makes ring 0 respect read-only
//! leaves. Callers pass only ranges in that part of the user half ([`is_fallible_range`]): PML4
//! slot 0 holds the kernel image, supervisor-only, which ring 0 could read and write. SMAP is
//! not enabled (`cpu::protections` sets SMEP and UMIP only); with it, these routines would be
//! the only code to bracket its accesses with STAC and CLAC.

use core::arch::global_asm;
use fjord_kernel::layout::{PAGE_SIZE, USER_END, align_down};

/// The lowest address the routines touch: PML4 slot 1 (slot 0 is the kernel image's).
const FALLIBLE_BASE: u64 = 1 << 39;

// rdi = destination, rsi = source, rdx = length (System V); eax = 0 on success, 1 on a fault
// that ring 3 would not have survived. A fault inside `rep movsb` leaves rcx, rsi and rdi at
// the faulting byte, so the instruction resumes there once the page is filled.
global_asm!(
    ".pushsection .text.fjord_user_copy, \"ax\"",
    ".balign 16",
    ".global fjord_user_copy_start",
    "fjord_user_copy_start:",
    "fjord_user_copy:",
    "    mov rcx, rdx",
    "    rep movsb",
    "    xor eax, eax",
    "    ret",
    // rdi = address: an atomic no-op store (the byte is unchanged, even if another CPU writes
    // it meanwhile), faulting as a write would.
    "fjord_user_touch_write:",
    "    lock or byte ptr [rdi], 0",
    "    xor eax, eax",
    "    ret",
    ".global fjord_user_copy_fixup",
    "fjord_user_copy_fixup:",
    "    mov eax, 1",
    "    ret",
    ".global fjord_user_copy_end",
    "fjord_user_copy_end:",
    ".popsection",
);

unsafe extern "C" {
    fn fjord_user_copy(dst: *mut u8, src: *const u8, len: usize) -> u32;
    fn fjord_user_touch_write(addr: *mut u8) -> u32;
    static fjord_user_copy_start: u8;
    static fjord_user_copy_fixup: u8;
}

/// Whether `[addr, addr + len)` lies where the fallible routines may touch: the user half
/// above PML4 slot 0.
pub fn is_fallible_range(addr: u64, len: u64) -> bool {
    addr >= FALLIBLE_BASE && addr.checked_add(len).is_some_and(|end| end <= USER_END)
}

/// A user range that ring 3 could not have accessed as asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Faulted;

/// Copies `src` to ring-3 memory at `dst` in the loaded address space, as a ring-3 store
/// would (filling pages ring 3 may write); `Faulted` if ring 3 could not write it all, with
/// the bytes before the faulting one written.
pub fn copy_to_user(dst: u64, src: &[u8]) -> Result<(), Faulted> {
    if !is_fallible_range(dst, src.len() as u64) {
        return Err(Faulted);
    }
    // SAFETY: the destination lies in the user half above slot 0, where every leaf is a user
    // leaf: the kernel's own memory is never written, and a fault ends the copy through
    // `on_fault`. `src` is a valid kernel slice.
    let r = unsafe { fjord_user_copy(dst as *mut u8, src.as_ptr(), src.len()) };
    if r == 0 { Ok(()) } else { Err(Faulted) }
}

/// Copies ring-3 memory at `src` in the loaded address space into `dst`, as a ring-3 load
/// would; `Faulted` if ring 3 could not read it all.
pub fn copy_from_user(dst: &mut [u8], src: u64) -> Result<(), Faulted> {
    // SAFETY: `dst` is a valid kernel slice of `dst.len()` writable bytes.
    unsafe { copy_from_user_raw(dst.as_mut_ptr(), src, dst.len()) }
}

/// Copies `len` bytes of ring-3 memory at `src` in the loaded address space to `dst`, as a
/// ring-3 load would; `Faulted` if ring 3 could not read them all. For a destination not yet
/// initialised (which no `&mut [u8]` may name).
///
/// # Safety
/// `dst` must be valid for writes of `len` bytes of kernel memory.
pub unsafe fn copy_from_user_raw(dst: *mut u8, src: u64, len: usize) -> Result<(), Faulted> {
    if !is_fallible_range(src, len as u64) {
        return Err(Faulted);
    }
    // SAFETY: as for `copy_to_user`, with the roles swapped: the source lies in the user half
    // above slot 0 and a fault ends the copy through `on_fault`; the caller passes `len`
    // writable bytes at `dst`.
    let r = unsafe { fjord_user_copy(dst, src as *const u8, len) };
    if r == 0 { Ok(()) } else { Err(Faulted) }
}

/// Makes sure ring 3 could read (`write` false) or write every page of `[addr, addr + len)`
/// in the loaded address space, filling the leaves it may use; one access per page.
pub fn probe(addr: u64, len: u64, write: bool) -> Result<(), Faulted> {
    if len == 0 {
        return Ok(());
    }
    if !is_fallible_range(addr, len) {
        return Err(Faulted);
    }
    let mut at = addr;
    while at < addr + len {
        let r = if write {
            // SAFETY: a user address above slot 0 (checked); the store changes nothing.
            unsafe { fjord_user_touch_write(at as *mut u8) }
        } else {
            let mut byte = 0u8;
            // SAFETY: as for `copy_from_user_raw`, one byte into a local.
            unsafe { fjord_user_copy(&mut byte, at as *const u8, 1) }
        };
        if r != 0 {
            return Err(Faulted);
        }
        at = align_down(at, PAGE_SIZE) + PAGE_SIZE;
    }
    Ok(())
}

/// Handles a kernel-mode page fault at `rip` on `addr` with hardware `error`; returns false
/// when the fault is not one of these routines' (the caller reports it). Otherwise the page
/// is filled as for ring 3 and the access runs again, or the routine returns failure.
pub fn on_fault(rip: &mut u64, addr: u64, error: u64) -> bool {
    let start = &raw const fjord_user_copy_start as u64;
    let fixup = &raw const fjord_user_copy_fixup as u64;
    if !(start..fixup).contains(rip) {
        return false;
    }
    // Error code bit 2: as ring 3's access.
    if is_fallible_range(addr, 1) && super::user::resolve_user_fault(addr, error | 4) {
        return true;
    }
    *rip = fixup;
    true
}
