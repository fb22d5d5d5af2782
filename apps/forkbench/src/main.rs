//! The `forkbench` program: the sized rows of the `fork` benchmark group.
//!
//! Like the Linux guest's `/bench/fork`, it touches 1, 10 and 100 MiB of its heap (one byte
//! per page), then measures `fork` + the child's `exit` + the parent's `waitpid`, in guest
//! instructions (the TSC under `-icount`), in each copy mode, and prints one `BENCH {json}`
//! record per size and mode on the console (the benchmark harness reads them there). It exits
//! with 0 when every fork and wait succeeded. The hello-world rows come from `forkhello`.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
extern crate alloc;

#[cfg(target_os = "none")]
mod measure;

#[cfg(target_os = "none")]
mod program {
    use crate::measure::{fork_exit_wait, report};
    use alloc::vec::Vec;
    use core::fmt::Write;
    use fjord_libos::function::StackText;
    use fjord_libos::process::ForkMode;

    /// Runs per size (the Linux guest's program takes 51 with the same method).
    const RUNS: usize = 31;

    pub fn main() -> u8 {
        // 1 MiB blocks (the heap hands out power-of-two blocks; one 100 MiB block would need
        // 128 MiB), one byte written per page as the Linux program does.
        let mut touched: Vec<Vec<u8>> = Vec::new();
        for mib in [1usize, 10, 100] {
            while touched.len() < mib {
                let mut block = Vec::new();
                if block.try_reserve_exact(1 << 20).is_err() {
                    return 2;
                }
                block.resize(1 << 20, 0);
                for b in block.iter_mut().step_by(4096) {
                    *b = 1;
                }
                touched.push(block);
            }
            for (suffix, mode) in [
                ("", ForkMode::CopyOnPointerAccess),
                ("_coa", ForkMode::CopyOnAccess),
                ("_full", ForkMode::Full),
                ("_cow", ForkMode::CopyOnWrite),
            ] {
                // Fewer runs where each copies 100 MiB.
                let runs = if mib == 100 && mode == ForkMode::Full {
                    5
                } else {
                    RUNS
                };
                let mut samples = [0u64; RUNS];
                let mut refused = false;
                for s in &mut samples[..runs] {
                    match fork_exit_wait(mode) {
                        Some(t) => *s = t,
                        None if mode == ForkMode::CopyOnWrite => {
                            // Refused unless this μprocess runs with isolation off.
                            refused = true;
                            break;
                        }
                        None => return 1,
                    }
                }
                if refused {
                    continue;
                }
                let mut metric = StackText::<64>::new();
                let _ = write!(
                    metric,
                    "fork_exit_wait_{mib}mb{suffix}{}",
                    crate::measure::level_suffix()
                );
                report("fork", metric.as_str(), "insns", &mut samples[..runs]);
            }
        }
        0
    }
}

#[cfg(target_os = "none")]
fjord_libos::program!(
    program::main,
    name = "forkbench",
    stack_size = "64K",
    heap_size = "120M"
);

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!("forkbench is a Fjord program: run it with `cargo xtask bench fork`");
}
