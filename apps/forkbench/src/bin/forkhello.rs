//! The `forkhello` program: the hello-world rows of the `fork` benchmark group.
//!
//! A μprocess with a hello-world's memory (a 16 KiB stack and heap) measures, in guest
//! instructions (the TSC under `-icount`): `fork` + the child's `exit` + `waitpid` in each copy
//! mode; `spawn` of the `nop` program + `waitpid` (the counterpart of Linux's fork + exec +
//! wait); a one-byte pipe round trip between it and a child (Linux's
//! `pipe_pingpong_roundtrip`); and the free memory a forked child that waits takes. It prints
//! one `BENCH {json}` record per metric and exits with 0 when every call succeeded.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
#[path = "../measure.rs"]
mod measure;

#[cfg(target_os = "none")]
mod program {
    use crate::measure::{fork_exit_wait, level_suffix, rdtsc, report, waited};
    use core::fmt::Write;
    use fjord_libos::function::StackText;
    use fjord_libos::process::{self, ForkMode};

    const RUNS: usize = 31;

    fn spawn_wait() -> Option<u64> {
        let t0 = rdtsc();
        let pid = process::spawn("nop").ok()?;
        waited(pid).then(|| rdtsc() - t0)
    }

    /// Free memory before a fork minus free memory while the child waits on a pipe.
    fn child_memory() -> Option<u64> {
        let (r, w) = process::pipe().ok()?;
        let before = process::free_memory();
        let pid = match process::fork() {
            Ok(0) => {
                let mut b = [0u8; 1];
                let _ = process::read(r, &mut b);
                process::exit(0)
            }
            Ok(pid) => pid,
            Err(_) => return None,
        };
        let during = process::free_memory();
        let ok = process::write(w, b"x") == Ok(1) && waited(pid);
        let _ = (process::close(r), process::close(w));
        ok.then(|| before.saturating_sub(during))
    }

    /// 201 round trips of one byte through two pipes with a forked child.
    fn pingpong(samples: &mut [u64]) -> Option<()> {
        let (to_child, from_parent) = {
            let (r, w) = process::pipe().ok()?;
            (w, r)
        };
        let (to_parent, from_child) = {
            let (r, w) = process::pipe().ok()?;
            (w, r)
        };
        let pid = match process::fork() {
            Ok(0) => {
                // Only the parent's copies of these ends stay open, so the child sees end of
                // file once the parent closes its own.
                let _ = (process::close(to_child), process::close(from_child));
                let mut b = [0u8; 1];
                while process::read(from_parent, &mut b) == Ok(1) {
                    if process::write(to_parent, &b) != Ok(1) {
                        break;
                    }
                }
                process::exit(0)
            }
            Ok(pid) => pid,
            Err(_) => return None,
        };
        let _ = (process::close(from_parent), process::close(to_parent));
        let mut b = [7u8; 1];
        for i in 0..20 + samples.len() {
            let t0 = rdtsc();
            if process::write(to_child, &b) != Ok(1) || process::read(from_child, &mut b) != Ok(1) {
                return None;
            }
            if i >= 20 {
                samples[i - 20] = rdtsc() - t0;
            }
        }
        let _ = (process::close(to_child), process::close(from_child));
        waited(pid).then_some(())
    }

    fn measure(samples: &mut [u64], mut one: impl FnMut() -> Option<u64>) -> Option<()> {
        for _ in 0..2 {
            one()?;
        }
        for s in samples.iter_mut() {
            *s = one()?;
        }
        Some(())
    }

    /// `metric` with this μprocess's isolation level's suffix.
    fn named(metric: &str) -> StackText<64> {
        let mut name = StackText::<64>::new();
        let _ = write!(name, "{metric}{}", level_suffix());
        name
    }

    pub fn main() -> u8 {
        let mut samples = [0u64; RUNS];
        for (metric, mode) in [
            ("fork_exit_wait_hello", ForkMode::CopyOnPointerAccess),
            ("fork_exit_wait_hello_coa", ForkMode::CopyOnAccess),
            ("fork_exit_wait_hello_full", ForkMode::Full),
            ("fork_exit_wait_hello_cow", ForkMode::CopyOnWrite),
        ] {
            if measure(&mut samples, || fork_exit_wait(mode)).is_none() {
                if mode == ForkMode::CopyOnWrite {
                    // Refused unless this μprocess runs with isolation off.
                    continue;
                }
                return 1;
            }
            report("fork", named(metric).as_str(), "insns", &mut samples);
        }
        if measure(&mut samples, spawn_wait).is_none() {
            return 2;
        }
        report("fork", named("spawn_wait").as_str(), "insns", &mut samples);
        if measure(&mut samples, child_memory).is_none() {
            return 3;
        }
        report(
            "fork",
            named("fork_hello_memory").as_str(),
            "bytes",
            &mut samples,
        );
        let mut rt = [0u64; 201];
        if pingpong(&mut rt).is_none() {
            return 4;
        }
        report(
            "ctxswitch",
            named("pipe_pingpong_roundtrip").as_str(),
            "insns",
            &mut rt,
        );
        0
    }
}

#[cfg(target_os = "none")]
fjord_libos::program!(
    program::main,
    name = "forkhello",
    stack_size = "16K",
    heap_size = "16K"
);

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!("forkhello is a Fjord program: run it with `cargo xtask bench fork`");
}
