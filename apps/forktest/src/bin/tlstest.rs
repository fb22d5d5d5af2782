//! The `tlstest` program: thread-local storage (`PT_TLS`) in a μprocess. Its module has a
//! `.tdata` word (initial value `0x1234`) and a `.tbss` block, read and written through the
//! thread pointer (`fs`) at the offsets the linker computed (`@tpoff`), as code compiled for
//! the x86-64 TLS ABI does. Each μprocess has its own block: a forked child starts with its
//! parent's values (and a pointer stored there, relocated), then changes its own without
//! changing the parent's. Exit code 0 means all of that held.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
extern crate alloc;

// The thread-local storage the linker lays out: stable Rust has no `#[thread_local]` in
// `no_std`, so the variables are declared in assembly, as a C compiler would emit them.
#[cfg(target_os = "none")]
core::arch::global_asm!(
    ".pushsection .tdata,\"awT\",@progbits",
    ".balign 8",
    ".type fjord_tls_word,@tls_object",
    ".size fjord_tls_word,8",
    "fjord_tls_word:",
    ".quad 0x1234",
    ".popsection",
    ".pushsection .tbss,\"awT\",@nobits",
    ".balign 8",
    ".type fjord_tls_zero,@tls_object",
    ".size fjord_tls_zero,64",
    "fjord_tls_zero:",
    ".zero 64",
    ".popsection",
);

#[cfg(target_os = "none")]
mod program {
    use alloc::boxed::Box;
    use fjord_libos::process::{self, ExitStatus};

    fn word() -> u64 {
        let v: u64;
        // SAFETY: reads this μprocess's own thread-local word (the kernel laid out the block
        // below the thread pointer as the linker's offsets expect).
        unsafe {
            core::arch::asm!("movq %fs:fjord_tls_word@tpoff, {}", out(reg) v,
                             options(att_syntax, nostack, readonly, preserves_flags));
        }
        v
    }

    fn set_word(v: u64) {
        // SAFETY: writes this μprocess's own thread-local word.
        unsafe {
            core::arch::asm!("movq {}, %fs:fjord_tls_word@tpoff", in(reg) v,
                             options(att_syntax, nostack, preserves_flags));
        }
    }

    fn zero_slot(i: usize) -> u64 {
        let v: u64;
        // SAFETY: reads word `i` (below 8) of this μprocess's own `.tbss` block.
        unsafe {
            core::arch::asm!("movq %fs:fjord_tls_zero@tpoff(,{i},8), {v}", i = in(reg) i, v = out(reg) v,
                             options(att_syntax, nostack, readonly, preserves_flags));
        }
        v
    }

    fn set_zero_slot(i: usize, v: u64) {
        // SAFETY: writes word `i` (below 8) of this μprocess's own `.tbss` block.
        unsafe {
            core::arch::asm!("movq {v}, %fs:fjord_tls_zero@tpoff(,{i},8)", i = in(reg) i, v = in(reg) v,
                             options(att_syntax, nostack, preserves_flags));
        }
    }

    pub fn main() -> u8 {
        if word() != 0x1234 {
            return 2;
        }
        if (0..8).any(|i| zero_slot(i) != 0) {
            return 3;
        }
        let me = process::getpid();
        set_word(me);
        // A pointer kept in thread-local storage: the child must find its own copy through it.
        let boxed = Box::new(0x5eed_u64);
        set_zero_slot(1, &*boxed as *const u64 as u64);
        match process::fork() {
            Ok(0) => {
                let inherited = word() == me;
                // SAFETY: the slot holds the address of `boxed`, relocated to this child's copy.
                let seen = unsafe { *(zero_slot(1) as *const u64) };
                set_word(process::getpid());
                let own = word() == process::getpid();
                process::exit(match (inherited, seen == 0x5eed, own) {
                    (true, true, true) => 0,
                    (false, _, _) => 4,
                    (_, false, _) => 5,
                    _ => 6,
                })
            }
            Ok(child) => match process::waitpid(child, 0) {
                Ok(Some((_, ExitStatus::Exited(0)))) if word() == me && *boxed == 0x5eed => {
                    process::print("tlstest: each μprocess has its own thread-local storage");
                    0
                }
                Ok(Some((_, ExitStatus::Exited(code)))) if code != 0 => code,
                _ => 7,
            },
            Err(_) => 8,
        }
    }
}

#[cfg(target_os = "none")]
fjord_libos::program!(
    program::main,
    name = "tlstest",
    stack_size = "16K",
    heap_size = "16K"
);

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!("tlstest is a Fjord program: start it with POST /processes/tlstest");
}
