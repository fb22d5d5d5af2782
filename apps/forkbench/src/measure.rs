//! What the `fork` group's programs share: the guest-instruction clock, one fork + exit + wait,
//! and the `BENCH {json}` record the benchmark harness reads from the console.

use core::fmt::Write;
use fjord_libos::function::StackText;
use fjord_libos::process::{self, ExitStatus, ForkMode};

/// The time-stamp counter: guest instructions under `-icount`.
pub fn rdtsc() -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: RDTSC only reads the time-stamp counter into two registers.
    unsafe { core::arch::asm!("rdtsc", out("eax") lo, out("edx") hi, options(nomem, nostack)) };
    (u64::from(hi) << 32) | u64::from(lo)
}

/// Waits for the child `pid`; true when it exited with 0.
pub fn waited(pid: u64) -> bool {
    matches!(
        process::waitpid(pid, 0),
        Ok(Some((_, ExitStatus::Exited(0))))
    )
}

/// `fork` in `mode`, the child's `exit(0)`, `waitpid`: the instructions it took.
pub fn fork_exit_wait(mode: ForkMode) -> Option<u64> {
    let t0 = rdtsc();
    match process::fork_with(mode) {
        Ok(0) => process::exit(0),
        Ok(pid) => waited(pid).then(|| rdtsc() - t0),
        Err(_) => None,
    }
}

/// Sorts `samples` and prints their median, minimum and maximum as one `BENCH` record.
pub fn report(group: &str, metric: &str, unit: &str, samples: &mut [u64]) {
    samples.sort_unstable();
    let mut line = StackText::<256>::new();
    let _ = write!(
        line,
        "BENCH {{\"group\":\"{group}\",\"metric\":\"{metric}\",\"system\":\"fjord\",\"unit\":\"{unit}\",\"median\":{},\"min\":{},\"max\":{},\"runs\":{}}}",
        samples[samples.len() / 2],
        samples[0],
        samples[samples.len() - 1],
        samples.len()
    );
    process::print(line.as_str());
}

/// The suffix of this μprocess's metric names for its isolation level: none for isolation off
/// (the rows measured since the first `fork` benchmark), `_iso_nonadv` and `_iso_full` for the
/// others.
pub fn level_suffix() -> &'static str {
    use fjord_libos::process::{Isolation, isolation};
    match isolation() {
        Isolation::None => "",
        Isolation::NonAdversarial => "_iso_nonadv",
        Isolation::Full => "_iso_full",
    }
}
