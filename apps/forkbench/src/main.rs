//! The `forkbench` program: the Fjord column of the `fork` benchmark group.
//!
//! Like the Linux guest's `/bench/fork`, it touches 0, 1 and 10 MiB of its heap, then measures
//! `fork` + the child's `exit` + the parent's `waitpid`, in guest instructions (the TSC under
//! `-icount`), and prints one `BENCH {json}` record per size on the console (the benchmark
//! harness reads them there). It exits with 0 when every fork and wait succeeded.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
extern crate alloc;

#[cfg(target_os = "none")]
mod program {
    use alloc::vec::Vec;
    use core::fmt::Write;
    use fjord_libos::function::StackText;
    use fjord_libos::process::{self, ExitStatus};

    /// Runs per size (the Linux guest's program takes 51 with the same method).
    const RUNS: usize = 31;

    fn rdtsc() -> u64 {
        let (lo, hi): (u32, u32);
        // SAFETY: RDTSC only reads the time-stamp counter into two registers.
        unsafe { core::arch::asm!("rdtsc", out("eax") lo, out("edx") hi, options(nomem, nostack)) };
        (u64::from(hi) << 32) | u64::from(lo)
    }

    /// `fork`, the child's `exit(0)`, `waitpid`: the instructions it took.
    fn one() -> Option<u64> {
        let t0 = rdtsc();
        match process::fork() {
            Ok(0) => process::exit(0),
            Ok(pid) => match process::waitpid(pid, 0) {
                Ok(Some((_, ExitStatus::Exited(0)))) => Some(rdtsc() - t0),
                _ => None,
            },
            Err(_) => None,
        }
    }

    fn report(metric: &str, samples: &mut [u64]) {
        samples.sort_unstable();
        let mut line = StackText::<256>::new();
        let _ = write!(
            line,
            "BENCH {{\"group\":\"fork\",\"metric\":\"{metric}\",\"system\":\"fjord\",\"unit\":\"insns\",\"median\":{},\"min\":{},\"max\":{},\"runs\":{}}}",
            samples[samples.len() / 2],
            samples[0],
            samples[samples.len() - 1],
            samples.len()
        );
        process::print(line.as_str());
    }

    pub fn main() -> u8 {
        let mut touched: Vec<u8> = Vec::new();
        for (metric, mib) in [
            ("fork_exit_wait_hello", 0usize),
            ("fork_exit_wait_1mb", 1),
            ("fork_exit_wait_10mb", 10),
        ] {
            touched.resize(mib << 20, 1);
            let mut samples = [0u64; RUNS];
            for s in &mut samples {
                match one() {
                    Some(t) => *s = t,
                    None => return 1,
                }
            }
            report(metric, &mut samples);
        }
        0
    }
}

#[cfg(target_os = "none")]
fjord_libos::program!(
    program::main,
    name = "forkbench",
    stack_size = "64K",
    heap_size = "32M"
);

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!("forkbench is a Fjord program: run it with `cargo xtask bench fork`");
}
