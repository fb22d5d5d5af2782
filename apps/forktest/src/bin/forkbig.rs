//! The `forkbig` program: forks with megabytes of heap touched, across many 2 MiB regions of its
//! area (the lazy modes then revoke the parent's leaves by dropping whole page tables).
//!
//! It builds 96 vectors of 64 KiB (6 MiB of heap, reached through the pointers of an outer
//! vector) and, in each copy mode, forks a child that waits until the parent has overwritten
//! every vector, then checks it still sees the values of the fork, forks a grandchild that
//! checks them too, and changes its own copy. The parent checks its own values after reaping
//! it. Exit code 0 means every check held; the code of the first that failed otherwise.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
extern crate alloc;

#[cfg(target_os = "none")]
mod program {
    use alloc::vec::Vec;
    use fjord_libos::process::{self, ExitStatus, ForkMode};

    const VECTORS: usize = 96;
    const WORDS: usize = 8192;

    fn build() -> Vec<Vec<u64>> {
        (0..VECTORS)
            .map(|v| (0..WORDS).map(|w| (v * WORDS + w) as u64).collect())
            .collect()
    }

    /// A checksum that notices a moved, missing or changed word.
    fn digest(vs: &[Vec<u64>]) -> u64 {
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for v in vs {
            for &w in v {
                h = (h ^ w).wrapping_mul(0x0100_0000_01b3);
            }
        }
        h
    }

    fn add(vs: &mut [Vec<u64>], by: u64) {
        for v in vs {
            for w in v.iter_mut() {
                *w += by;
            }
        }
    }

    /// The child (or grandchild) of a fork: checks what it inherited, then changes its own copy.
    fn check_inherited(vs: &mut [Vec<u64>], expected: u64, base: u8) -> u8 {
        if digest(vs) != expected {
            return base;
        }
        add(vs, 5);
        let mut again = build();
        add(&mut again, 5);
        if digest(vs) != digest(&again) {
            return base + 1;
        }
        0
    }

    fn ended(pid: u64) -> Option<u8> {
        match process::waitpid(pid, 0) {
            Ok(Some((_, ExitStatus::Exited(code)))) => Some(code),
            _ => None,
        }
    }

    fn one_mode(mode: ForkMode, base: u8) -> Result<(), u8> {
        let mut vs = build();
        let at_fork = digest(&vs);
        let (r, w) = process::pipe().map_err(|_| base)?;
        match process::fork_with(mode) {
            Ok(0) => {
                let mut b = [0u8; 1];
                if process::read(r, &mut b) != Ok(1) {
                    process::exit(base + 1);
                }
                // A grandchild forked before the child has its pages.
                let code = match process::fork_with(mode) {
                    Ok(0) => process::exit(check_inherited(&mut vs, at_fork, base + 2)),
                    Ok(pid) => ended(pid).unwrap_or(base + 4),
                    Err(_) => base + 5,
                };
                if code != 0 {
                    process::exit(code);
                }
                process::exit(check_inherited(&mut vs, at_fork, base + 6));
            }
            Ok(child) => {
                add(&mut vs, 1);
                process::write(w, b"x").map_err(|_| base + 8)?;
                match ended(child) {
                    Some(0) => {}
                    Some(code) => return Err(code),
                    None => return Err(base + 9),
                }
                let _ = (process::close(r), process::close(w));
                let mut expected = build();
                add(&mut expected, 1);
                if digest(&vs) != digest(&expected) {
                    return Err(base + 10);
                }
                Ok(())
            }
            Err(_) => Err(base + 11),
        }
    }

    pub fn main() -> u8 {
        for (mode, base) in [
            (ForkMode::CopyOnPointerAccess, 10),
            (ForkMode::CopyOnAccess, 30),
            (ForkMode::Full, 50),
        ] {
            if let Err(code) = one_mode(mode, base) {
                return code;
            }
        }
        process::print("forkbig: every copy of 6 MiB kept its own values");
        0
    }
}

#[cfg(target_os = "none")]
fjord_libos::program!(
    program::main,
    name = "forkbig",
    stack_size = "16K",
    heap_size = "24M"
);

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!("forkbig is a Fjord program: the in-kernel tests run it");
}
