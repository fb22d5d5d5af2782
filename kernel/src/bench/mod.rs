//! In-kernel microbenchmarks (`mode=bench`), meant to run under `-icount shift=0,sleep=off`
//! where the TSC counts guest instructions exactly.
//!
//! Each result is one line `BENCH {json}` with the median, extremes and sample count; the host
//! tool (`cargo xtask bench`) collects them. Numbers include the cost of the RDTSC pair around
//! the measured work (reported separately as `rdtsc_pair`).

mod cxl;
mod faas;
mod invoke;
mod pd;
mod restore;
mod workloads;

use crate::arch::cpu;
use crate::arch::exit::{ExitCode, exit_qemu};
use crate::arch::user::UserExit;
use crate::kprintln;
use crate::ktests::user_programs::Program;
use crate::ktests::userspace::{DATA_BASE, UserSpace};
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, Ordering};
use fjord_kernel::stats::{Summary, summarize};

/// The system a result belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sys {
    /// Fjord with full isolation.
    Fjord,
    /// Fjord in no-isolation mode (Jord_NI).
    FjordNi,
    /// A baseline implemented in Fjord.
    Baseline,
}

impl Sys {
    /// The `system` field of a `BENCH` line.
    pub fn label(self) -> &'static str {
        match self {
            Sys::Fjord => "fjord",
            Sys::FjordNi => "fjord_ni",
            Sys::Baseline => "fjord_baseline",
        }
    }
}

/// Prints one `BENCH` line for `samples` (sorted in place).
pub fn report_sys(group: &str, metric: &str, sys: Sys, samples: &mut [u64]) {
    report_unit(group, metric, sys, "insns", samples);
}

/// Whether TSC samples are reported as nanoseconds (`bench_clock=ns`).
static NANOSECONDS: AtomicBool = AtomicBool::new(false);

/// Prints one `BENCH` line for `samples` in `unit` (sorted in place). TSC deltas (`insns`) are
/// reported as nanoseconds of the calibrated TSC under `bench_clock=ns`, with their p99.
pub fn report_unit(group: &str, metric: &str, sys: Sys, unit: &str, samples: &mut [u64]) {
    let system = sys.label();
    let ns = unit == "insns" && NANOSECONDS.load(Ordering::Relaxed);
    if ns {
        for s in samples.iter_mut() {
            *s = crate::arch::time::ticks_to_ns(*s);
        }
    }
    let unit = if ns { "ns" } else { unit };
    match summarize(samples) {
        Some(Summary {
            median,
            min,
            max,
            p99,
            runs,
        }) => {
            let p99 = if ns {
                alloc::format!(",\"p99\":{p99}")
            } else {
                alloc::string::String::new()
            };
            kprintln!(
                "BENCH {{\"group\":\"{group}\",\"metric\":\"{metric}\",\"system\":\"{system}\",\"unit\":\"{unit}\",\"median\":{median},\"min\":{min},\"max\":{max}{p99},\"runs\":{runs}}}"
            )
        }
        None => kprintln!("fjord: bench {metric}: no samples"),
    }
}

/// Reports a value derived from other measurements (a share, a ratio) as one run, with two
/// decimals so that a value near a threshold does not round onto it.
pub fn report_derived(group: &str, metric: &str, sys: Sys, unit: &str, value: f64) {
    let system = sys.label();
    kprintln!(
        "BENCH {{\"group\":\"{group}\",\"metric\":\"{metric}\",\"system\":\"{system}\",\"unit\":\"{unit}\",\"median\":{value:.2},\"min\":{value:.2},\"max\":{value:.2},\"runs\":1}}"
    );
}

fn report(group: &str, metric: &str, samples: &mut [u64]) {
    report_sys(group, metric, Sys::Fjord, samples);
}

/// Samples per microbenchmark.
const RUNS: usize = 1000;

fn bench_boot(first_line_tsc: u64) {
    report("boot", "boot_to_first_line", &mut [first_line_tsc]);
}

fn bench_rdtsc_pair() {
    let mut s: Vec<u64> = (0..RUNS)
        .map(|_| {
            let a = cpu::rdtsc();
            let b = cpu::rdtsc();
            b - a
        })
        .collect();
    report("syscall", "rdtsc_pair", &mut s);
}

fn bench_heap() {
    let mut s: Vec<u64> = (0..RUNS)
        .map(|i| {
            let a = cpu::rdtsc();
            let b = core::hint::black_box(alloc::boxed::Box::new(i as u64));
            drop(b);
            cpu::rdtsc() - a
        })
        .collect();
    report("syscall", "heap_alloc_free_8b", &mut s);
}

fn bench_null_syscall() -> Result<(), &'static str> {
    let pages = (RUNS * 8).div_ceil(4096);
    let mut space = UserSpace::new(pages).map_err(|_| "no memory for the user space")?;
    match space.run(Program::NullLoop, [RUNS as u64, DATA_BASE, 0], None) {
        UserExit::Exited(0) => {}
        _ => return Err("the null-syscall loop did not exit cleanly"),
    }
    let mut s = space.data()[..RUNS].to_vec();
    report("syscall", "null_syscall", &mut s);
    Ok(())
}

fn bench_cr3_switch() -> Result<(), &'static str> {
    let space = UserSpace::new(1).map_err(|_| "no memory for the user space")?;
    let kernel_root = crate::mm::kernel_tables::kernel_root();
    let mut s = Vec::with_capacity(RUNS);
    cpu::without_interrupts(|| {
        for _ in 0..RUNS {
            let a = cpu::rdtsc();
            // SAFETY: both roots map the kernel identically (the user space shares the kernel half).
            unsafe { cpu::write_cr3(space.root()) };
            let b = cpu::rdtsc();
            // SAFETY: as above, back to the kernel's own tables.
            unsafe { cpu::write_cr3(kernel_root) };
            s.push(b - a);
        }
    });
    report("syscall", "cr3_switch", &mut s);
    Ok(())
}

/// Runs the benchmark groups whose name contains `filter` and exits QEMU.
/// Deploys every function whose name starts with `prefix` again in the instance mode `mode`
/// (their idle instances go) and empties the key-value store.
pub(crate) fn redeploy_in_mode(
    prefix: &str,
    mode: fjord_groundhog::GroundhogMode,
) -> Result<(), alloc::string::String> {
    for name in crate::runtime::list() {
        if !name.starts_with(prefix) {
            continue;
        }
        let elf = crate::runtime::module_file(&name).ok_or("no module file")?;
        crate::runtime::deploy_with(&name, &elf, Some(mode))
            .map_err(|e| alloc::format!("{name}: {e}"))?;
    }
    crate::kv::clear();
    Ok(())
}

pub fn run_all(filter: Option<&str>, nanoseconds: bool, first_line_tsc: u64) -> ! {
    NANOSECONDS.store(nanoseconds, Ordering::Relaxed);
    let wants = |g: &str| filter.is_none_or(|f| g.contains(f) || f.contains(g));
    let mut ok = true;
    // The TSC at the first line counts instructions from reset only under icount; a KVM
    // guest's TSC may have started long before (under PVM it is the host's).
    if wants("boot") && !nanoseconds {
        bench_boot(first_line_tsc);
    }
    if wants("syscall") {
        bench_rdtsc_pair();
        bench_heap();
        for r in [bench_null_syscall(), bench_cr3_switch()] {
            if let Err(e) = r {
                kprintln!("fjord: bench error: {e}");
                ok = false;
            }
        }
    }
    if wants("pd")
        && let Err(e) = crate::bench::pd::run_group()
    {
        kprintln!("fjord: bench error: pd: {e}");
        ok = false;
    }
    if wants("faas")
        && let Err(e) = crate::bench::faas::run_group()
    {
        kprintln!("fjord: bench error: faas: {e}");
        ok = false;
    }
    if wants("faas")
        && let Err(e) = crate::bench::invoke::run_group()
    {
        kprintln!("fjord: bench error: faas: {e}");
        ok = false;
    }
    if wants("fork")
        && let Err(e) = fork_group()
    {
        kprintln!("fjord: bench fork: {e}");
        ok = false;
    }
    if wants("workloads")
        && let Err(e) = crate::bench::workloads::run_group()
    {
        kprintln!("fjord: bench error: workloads: {e}");
        ok = false;
    }
    if wants("restore")
        && let Err(e) = crate::bench::restore::run_group()
    {
        kprintln!("fjord: bench error: restore: {e}");
        ok = false;
    }
    // Only when asked for: it needs a q35 boot with a shared region.
    if filter.is_some_and(|f| f.contains("cxl"))
        && let Err(e) = crate::bench::cxl::run_group()
    {
        kprintln!("fjord: bench error: {e}");
        ok = false;
    }
    kprintln!("fjord: bench done");
    exit_qemu(if ok {
        ExitCode::Success
    } else {
        ExitCode::Failure
    })
}

/// The `fork` group: the `forkhello` and `forkbench` programs measure `fork` + `exit` +
/// `waitpid` (in every copy mode), `spawn`, a pipe round trip and a forked child's memory
/// themselves, in ring 3, and `redisbench` the `redis` program's `BGSAVE` (fork and snapshot at
/// 10k keys, 100k keys and 100 MB), and print their records; this runs each to its end, once with
/// isolation off (so that copy-on-write is measured too; the metric names carry no suffix) and
/// once at isolation full (`_iso_full`: system-call buffers copied, copy-on-write refused).
fn fork_group() -> Result<(), &'static str> {
    use crate::ufork::{SpawnOptions, spawn_with};
    use fjord_ufork::copy_mode::IsolationLevel;
    // Where the hypervisor emulates ring 0 (KVM's PVM backend), copying 100 MiB takes longer
    // than a benchmark boot may: only `forkhello` runs there.
    let programs: &[&str] = if crate::boot::ring0_emulated() {
        crate::kprintln!("fjord: bench fork: forkbench not run, this hypervisor emulates ring 0");
        &["forkhello"]
    } else {
        &["forkhello", "forkbench", "redisbench"]
    };
    let levels = [IsolationLevel::None, IsolationLevel::Full];
    for (&program, isolation) in programs
        .iter()
        .flat_map(|p| levels.iter().map(move |&l| (p, l)))
    {
        let options = SpawnOptions {
            isolation,
            ..SpawnOptions::default()
        };
        let (_, ticket) =
            spawn_with(program, options).map_err(|_| "a fork benchmark program is not deployed")?;
        let done = crate::orchestrator::wait(ticket);
        if crate::ufork::status_of(&done.result) != Some(0) {
            crate::kprintln!("fjord: bench error: {program} failed: {:?}", done.result);
            return Err("a fork benchmark program failed");
        }
    }
    Ok(())
}
