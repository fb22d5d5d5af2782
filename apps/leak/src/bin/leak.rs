//! The `leak` function, for Groundhog's request-isolation tests: one request leaves a secret
//! wherever a function can keep it, the next one looks for it.
//!
//! - `write <hex secret>`: writes the secret at the start of the heap (through the
//!   allocator), 2 KiB below the stack pointer, into a freshly mapped VMA, and into the
//!   registers rbx, rbp and r12 to r15 as it returns; responds `vma=<its address>` (no
//!   response bytes come after the registers are set: the call ends there);
//! - `dump`: responds `heap=… stack=… vma=… rbx=… r12=… r13=… r14=… r15=…` (16 hex digits
//!   each): the heap's first word, the stack slot, the first word of a freshly mapped VMA
//!   and the registers as the handler found them. With the instance restored between
//!   requests, none is the secret;
//! - `peek <hex address>`: responds with the word at the address (the VMA an earlier `write`
//!   mapped: it faults once that VMA is gone).
#![cfg_attr(target_os = "none", no_std, no_main)]

extern crate alloc;

use fjord_app_leak::{below_stack, heap_base, parse_hex, report};
use fjord_libos::function::FnError;

fn leak(req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let regs = registers();
    if req == b"dump" {
        // SAFETY: the heap's first page and the stack slot are this instance's memory; reading
        // them has no other effect.
        let (heap, stack) = unsafe {
            (
                (heap_base() as *const u64).read_volatile(),
                below_stack().read_volatile(),
            )
        };
        let vma = fresh_vma()?;
        // SAFETY: `vma` was just mapped read-write for this PD.
        let in_vma = unsafe { (vma as *const u64).read_volatile() };
        return report(
            resp,
            &[
                ("heap", heap),
                ("stack", stack),
                ("vma", in_vma),
                ("rbx", regs[0]),
                ("r12", regs[1]),
                ("r13", regs[2]),
                ("r14", regs[3]),
                ("r15", regs[4]),
            ],
        );
    }
    if let Some(addr) = req.strip_prefix(b"peek ") {
        let p = parse_hex(addr)? as *const u64;
        // SAFETY: none intended: the address is whatever the test names; the PD's page tables
        // decide, and a forbidden read faults and ends the invocation.
        let v = unsafe { p.read_volatile() };
        return report(resp, &[("word", v)]);
    }
    let Some(secret) = req.strip_prefix(b"write ") else {
        return Err(FnError::BadRequest);
    };
    let secret = parse_hex(secret)?;
    let layout = core::alloc::Layout::new::<[u64; 8]>();
    // SAFETY: the layout has a non-zero size.
    let on_heap = unsafe { alloc::alloc::alloc(layout) }.cast::<u64>();
    if on_heap.is_null() {
        return Err(FnError::OutOfMemory);
    }
    for i in 0..8 {
        // SAFETY: `on_heap` is a fresh block of 8 words (never freed: it is the secret left
        // behind).
        unsafe { on_heap.add(i).write_volatile(secret) };
    }
    // SAFETY: the slot is in this instance's stack, below every frame in use.
    unsafe { below_stack().write_volatile(secret) };
    let vma = fresh_vma()?;
    // SAFETY: `vma` was just mapped read-write for this PD.
    unsafe { (vma as *mut u64).write_volatile(secret) };
    let n = report(resp, &[("vma", vma)])?;
    return_with_registers(secret, n as u64)
}

/// A new one-page read-write VMA.
fn fresh_vma() -> Result<u64, FnError> {
    #[cfg(target_os = "none")]
    {
        use fjord_libos::privlib::{PROT_READ, PROT_WRITE, mmap};
        mmap(4096, PROT_READ | PROT_WRITE).map_err(|_| FnError::Failed)
    }
    #[cfg(not(target_os = "none"))]
    Err(FnError::Failed)
}

/// rbx and r12 to r15 as the handler found them.
fn registers() -> [u64; 5] {
    let r: [u64; 5];
    #[cfg(target_os = "none")]
    {
        let (a, b, c, d, e): (u64, u64, u64, u64, u64);
        // SAFETY: copies five registers into others; no memory is touched.
        unsafe {
            core::arch::asm!(
                "mov {a}, rbx", "mov {b}, r12", "mov {c}, r13", "mov {d}, r14", "mov {e}, r15",
                a = out(reg) a, b = out(reg) b, c = out(reg) c, d = out(reg) d, e = out(reg) e,
                options(nomem, nostack, preserves_flags)
            )
        };
        r = [a, b, c, d, e];
    }
    #[cfg(not(target_os = "none"))]
    {
        r = [0; 5];
    }
    r
}

/// Ends the call with a response of `len` bytes, with the secret in rbx, rbp and r12 to r15
/// (the kernel must not let them reach the next request).
#[cfg(target_os = "none")]
fn return_with_registers(secret: u64, len: u64) -> ! {
    // SAFETY: `creturn` (rax = its number, rdi = the value) never returns to this PD, so the
    // registers it overwrites are never used again.
    unsafe {
        core::arch::asm!(
            "mov rbx, {s}", "mov rbp, {s}", "mov r12, {s}", "mov r13, {s}", "mov r14, {s}",
            "mov r15, {s}", "syscall", "ud2",
            s = in(reg) secret,
            in("rax") fjord_libos::abi::Sysno::Creturn as u64,
            in("rdi") len,
            options(noreturn)
        )
    }
}

#[cfg(not(target_os = "none"))]
fn return_with_registers(_: u64, len: u64) -> Result<usize, FnError> {
    Ok(len as usize)
}

fjord_libos::function!(leak, name = "leak", stack_size = "16K", heap_size = "64K");
