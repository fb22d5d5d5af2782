//! The `forkframes` program: forks twelve calls deep and has its child return through every
//! one of those frames, with integers only in them, then through `main` back to the libos.
//!
//! The child's stack holds the parent's return addresses and saved frame pointers, which point
//! into the parent's area; the child's PD has no right there, so any of them left unrelocated
//! faults on the way out. With the boot option `tags=precise` only the shadow table and the
//! frame-pointer chain `fork` walks (apps are built with frame pointers) say where they are:
//! the in-kernel tests run it so. Exit code 0 when both sides came back with the values
//! expected; the child's exit code says which frame it got wrong otherwise.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
mod program {
    use core::hint::black_box;
    use fjord_libos::process::{self, ExitStatus};

    const DEPTH: u64 = 12;

    /// Forks at depth 0; every frame on the way back adds its own depth, so a frame skipped or
    /// returned to twice changes the sum. The child's result is 1000 + that sum, the parent's
    /// 2000 + it (or an error code below 100).
    #[inline(never)]
    fn down(depth: u64) -> u64 {
        let mine = black_box(depth);
        let below = if depth == 0 {
            match process::fork() {
                Ok(0) => 1000,
                Ok(_) => 2000,
                Err(_) => 1,
            }
        } else {
            down(depth - 1)
        };
        black_box(below + mine)
    }

    pub fn main() -> u8 {
        let expected = DEPTH * (DEPTH + 1) / 2;
        let got = down(DEPTH);
        if got == 1000 + expected {
            // The child: every frame returned to its caller in the child's own area.
            return 0;
        }
        if got != 2000 + expected {
            return 2;
        }
        match process::waitpid(fjord_libos::process::ANY_CHILD, 0) {
            Ok(Some((_, ExitStatus::Exited(0)))) => 0,
            Ok(Some((_, ExitStatus::Exited(code)))) => 10 + code,
            Ok(Some((_, ExitStatus::Killed(_)))) => 3,
            _ => 4,
        }
    }
}

#[cfg(target_os = "none")]
fjord_libos::program!(
    program::main,
    name = "forkframes",
    stack_size = "16K",
    heap_size = "16K"
);

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!("forkframes is a Fjord program: the in-kernel tests run it");
}
