//! The Linux guest: Fjord's peer for side-by-side benchmarks.
//!
//! `run` boots Debian's kernel (`kernel_pkg`) under the very QEMU configuration Fjord's
//! benchmarks use (microvm, `-cpu max`, one vCPU, 512 MiB, `-icount shift=0,sleep=off`,
//! `-seed 1`, a fixed RTC), with an initramfs (`initramfs`) holding busybox and the static C
//! programs of `bench/linux/` (`programs`). Each program prints its medians, counted in guest
//! instructions with RDTSC; `guest_log` turns the serial lines into [`Measurement`]s of
//! [`System::Linux`]. The `workloads` group runs `fjord-nightcore` instead (`nightcore`), a
//! Rust program measuring Fjord's workload functions on a NightCore-like runtime with
//! parameters from the Fjord run; the `restore` group runs it too, with a process forked per
//! request, beside `forkserve`. The method is written up in `docs/benchmarking.md`.
//!
//! No cargo features.

pub mod guest_log;
pub mod initramfs;
pub mod kernel_image;
pub mod kernel_pkg;
pub mod nightcore;
pub mod programs;
pub mod server;

use std::cell::Cell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use self::guest_log::GuestLine;
use self::kernel_pkg::KernelFormat;
use self::programs::Step;
use crate::measure::{Measurement, System};
use crate::qemu::{Machine, QemuConfig};
use crate::qemu_run::{LineWaitError, QemuExit, QemuRun};
use crate::{host_deps, workspace};

/// The guest kernel's command line. `transparent_hugepage=never` states what Debian's kernel
/// does anyway below 1 GiB of RAM, so fork numbers are per 4 KiB page; `cryptomgr.notests=1`
/// skips ~0.9 billion instructions of crypto self-tests at boot.
pub const KERNEL_CMDLINE: &str =
    "console=ttyS0 quiet panic=-1 cryptomgr.notests=1 transparent_hugepage=never";

/// The THP line `/sys/kernel/mm/transparent_hugepage/enabled` must show under [`KERNEL_CMDLINE`].
const THP_NEVER: &str = "always madvise [never]";

/// Guest RAM, the same as Fjord's benchmark runs.
pub const MEMORY_MIB: u32 = 512;

/// Options of a Linux-guest benchmark run.
#[derive(Clone, Debug)]
pub struct LinuxBenchOpts {
    /// Groups to run; empty runs them all. Groups the Linux guest has no benchmark for (such as
    /// Fjord-only `pd`) are skipped with a message; if none is left, nothing boots.
    pub groups: Vec<String>,
    /// Cargo's target directory; the cache is `<target_dir>/linux-guest/`.
    pub target_dir: PathBuf,
    /// Directory of the C sources (`<repo>/bench/linux`).
    pub source_dir: PathBuf,
    /// Time limit of the whole guest run.
    pub timeout: Duration,
    /// Print every serial line of the guest, prefixed with `[linux] `.
    pub echo_serial: bool,
    /// The `workloads` step's parameters ([`nightcore::params`] of the Fjord run), or why
    /// there are none; without them the step is skipped.
    pub workloads: Result<String, String>,
    /// The parameters of the `restore` group's runner step ([`nightcore::restore_params`] of
    /// the Fjord run), or why there are none; without them that step is skipped.
    pub restore: Result<String, String>,
    /// Boot under KVM (`-cpu host`, no icount) and turn the programs' TSC deltas into
    /// nanoseconds at this TSC frequency (Fjord's calibration of the same host's TSC in the
    /// same run); `None` boots under TCG with icount.
    pub kvm_tsc_mhz: Option<f64>,
}

impl LinuxBenchOpts {
    /// Every group, the workspace's target directory and sources, a 10-minute limit, no echo.
    pub fn new(groups: Vec<String>) -> LinuxBenchOpts {
        LinuxBenchOpts {
            groups,
            target_dir: workspace::target_dir(),
            source_dir: workspace::root().join("bench").join("linux"),
            timeout: Duration::from_secs(600),
            echo_serial: false,
            workloads: Err("no Fjord workloads measurements were passed".to_owned()),
            restore: Err("no Fjord restore measurements were passed".to_owned()),
            kvm_tsc_mhz: None,
        }
    }
}

/// Builds everything, boots the Linux guest once, and returns its measurements in the order
/// the guest printed them. Fails if a program fails, a selected metric is missing, the
/// guest's THP setting is not `never`, or the run exceeds `opts.timeout`.
pub fn run(opts: &LinuxBenchOpts) -> Result<Vec<Measurement>> {
    let cache = opts.target_dir.join("linux-guest");
    let started = Instant::now();
    let progress =
        |text: &str| eprintln!("linux [{:5.1} s] {text}", started.elapsed().as_secs_f64());

    let (known, foreign): (Vec<String>, Vec<String>) = opts
        .groups
        .iter()
        .cloned()
        .partition(|group| programs::GROUPS.contains(&group.as_str()));
    if !foreign.is_empty() {
        progress(&format!(
            "no Linux benchmark in group {} (Linux groups: {})",
            foreign.join(", "),
            programs::GROUPS.join(", ")
        ));
        if known.is_empty() {
            return Ok(Vec::new());
        }
    }
    let mut steps = programs::select(&known)?;
    let mut files = Vec::new();
    if steps.iter().any(|s| s.group == "workloads") {
        match &opts.workloads {
            Ok(params) => files.push((nightcore::PARAMS_FILE, params.clone().into_bytes())),
            Err(why) => {
                progress(&format!("skipping the workloads step: {why}"));
                steps.retain(|s| s.group != "workloads");
            }
        }
    }
    if steps.iter().any(programs::is_restore_runner) {
        match &opts.restore {
            Ok(params) => files.push((nightcore::RESTORE_PARAMS_FILE, params.clone().into_bytes())),
            Err(why) => {
                progress(&format!(
                    "skipping the restore step of the fork-per-request runtime: {why}"
                ));
                steps.retain(|s| !programs::is_restore_runner(s));
            }
        }
    }
    if steps.is_empty() {
        return Ok(Vec::new());
    }

    progress("host packages, guest kernel and busybox");
    let qemu = host_deps::ensure_qemu()?;
    let kernel = kernel_pkg::ensure_kernel(&cache)?;
    let busybox = kernel_pkg::ensure_busybox(&cache)?;
    progress(&format!(
        "kernel {} from {} ({})",
        kernel.release,
        kernel.package,
        match kernel.format {
            KernelFormat::Vmlinux => "uncompressed vmlinux, PVH entry",
            KernelFormat::BzImage => "bzImage",
        }
    ));

    let needed = programs::programs_needed(&steps);
    progress(&format!(
        "gcc -O2 -static: {}",
        needed.iter().copied().collect::<Vec<_>>().join(" ")
    ));
    let mut binaries = programs::compile(&opts.source_dir, &cache.join("bin"), &needed)?;
    for &program in needed.iter().filter(|p| programs::is_rust(p)) {
        progress(&format!(
            "cargo build --release --target x86_64-unknown-linux-gnu (static): {program}"
        ));
        binaries.push((program, nightcore::build(&cache)?));
    }
    let initrd = cache.join("initramfs.cpio");
    initramfs::write(&initrd, &busybox, &binaries, &files, &steps)?;

    let mut config = qemu_config(&kernel.image, &initrd);
    config.qemu = qemu;
    if opts.kvm_tsc_mhz.is_some() {
        config.use_accel(crate::qemu::Accel::Kvm);
        config.icount = false;
    }
    progress(&format!(
        "booting Linux: {} steps (groups: {})",
        steps.len(),
        if known.is_empty() {
            "all".to_owned()
        } else {
            known.join(", ")
        }
    ));
    let mut guest = QemuRun::spawn(&config, opts.echo_serial.then(|| "[linux] ".to_owned()))?;
    let mut timeout = opts.timeout;
    if steps.iter().any(|s| s.group == "workloads") {
        timeout += nightcore::TIME_LIMIT;
    }
    if steps.iter().any(programs::is_restore_runner) {
        timeout += nightcore::RESTORE_TIME_LIMIT;
    }
    let collected = collect(&guest, timeout, &progress);
    // The output ended, so QEMU is exiting; after a timeout, stop it now.
    let exit = match &collected {
        Ok(_) => guest.wait_exit(Duration::from_secs(30)),
        Err(_) => guest.kill(),
    };
    let collected = match collected {
        Ok(collected) => collected,
        Err(error) => {
            eprint!("{}", guest.log_tail(30));
            return Err(error.context(format!("Linux guest run failed ({exit})")));
        }
    };
    if let Err(error) = check(&collected, &steps) {
        eprint!("{}", guest.log_tail(30));
        return Err(error.context(format!("the Linux guest ended: {exit}")));
    }
    if exit != QemuExit::Code(0) {
        // `poweroff -f` makes QEMU exit with status 0; the results are complete anyway.
        progress(&format!("warning: unexpected end of the guest: {exit}"));
    }
    progress(&format!(
        "done: {} measurements",
        collected.measurements.len()
    ));
    let mut measurements = collected.measurements;
    if let Some(mhz) = opts.kvm_tsc_mhz {
        for m in &mut measurements {
            to_nanoseconds(m, mhz);
        }
    }
    Ok(measurements)
}

/// Turns a measurement in TSC deltas (`insns`, which under KVM count TSC ticks) into
/// nanoseconds at `tsc_mhz`.
pub fn to_nanoseconds(m: &mut Measurement, tsc_mhz: f64) {
    if m.unit != "insns" || tsc_mhz <= 0.0 {
        return;
    }
    let ns = |ticks: f64| ticks * 1_000.0 / tsc_mhz;
    m.unit = "ns".to_owned();
    m.median = ns(m.median);
    m.min = ns(m.min);
    m.max = ns(m.max);
    m.p99 = m.p99.map(ns);
}

/// The QEMU configuration of the Linux guest: Fjord's benchmark settings (microvm, `-cpu max`,
/// one vCPU, 512 MiB, icount with `-seed 1` and a fixed RTC) with Debian's kernel, our initramfs
/// and [`KERNEL_CMDLINE`].
pub fn qemu_config(kernel: &Path, initrd: &Path) -> QemuConfig {
    let mut config = QemuConfig::new(kernel);
    config.machine = Machine::Microvm;
    config.cpu = "max".to_owned();
    config.smp = 1;
    config.memory_mib = MEMORY_MIB;
    config.icount = true;
    config.initrd = Some(initrd.to_path_buf());
    config.append = KERNEL_CMDLINE.to_owned();
    config
}

/// What the guest printed, as far as the harness cares.
#[derive(Debug, Default)]
struct Collected {
    /// The results, in order.
    measurements: Vec<Measurement>,
    /// `LINFO` texts.
    info: Vec<String>,
    /// Programs that failed (`LFAIL`) and malformed records.
    failures: Vec<String>,
    /// `LDONE` was seen.
    done: bool,
}

/// Follows the guest's serial output until it ends, printing progress and timing `LBEGIN` …
/// `LBENCH` pairs with the host clock.
fn collect(guest: &QemuRun, timeout: Duration, progress: &dyn Fn(&str)) -> Result<Collected> {
    let deadline = Instant::now() + timeout;
    let mut out = Collected::default();
    let mut begun: BTreeMap<String, u128> = BTreeMap::new();
    let mut processed = 0;
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        match wait_for_line_number(guest, processed, remaining) {
            Ok(()) => {}
            Err(LineWaitError::OutputEnded) => break,
            Err(LineWaitError::TimedOut(_)) => bail!("no result within {} s", timeout.as_secs()),
        }
        let now_ns = guest.elapsed().as_nanos();
        let lines = guest.lines();
        for line in lines.get(processed..).unwrap_or_default() {
            match guest_log::parse_line(line) {
                GuestLine::Step {
                    index,
                    total,
                    group,
                    command,
                } => progress(&format!("[{index}/{total}] {group}: {command}")),
                GuestLine::Info(text) => {
                    if text.starts_with("workloads:") || text.starts_with("restore:") {
                        progress(&format!("      {text}"));
                    }
                    out.info.push(text);
                }
                GuestLine::Begin(metric) => {
                    begun.insert(metric, now_ns);
                }
                GuestLine::Bench(record) => {
                    let wall = if record.metric == "boot_to_init" {
                        // From QEMU's start to the first userspace program.
                        Some(now_ns as f64)
                    } else {
                        guest_log::wall_ns_per_op(begun.remove(&record.metric), now_ns, record.runs)
                    };
                    progress(&format!(
                        "      {} = {} {} (median of {})",
                        record.metric,
                        crate::bench_results::format_number(record.median as f64),
                        record.unit,
                        record.runs
                    ));
                    out.measurements.push(record.into_measurement(wall));
                }
                GuestLine::BadBench(text, error) => out
                    .failures
                    .push(format!("malformed LBENCH {text}: {error}")),
                GuestLine::Fail(what) => out.failures.push(format!("failed: {what}")),
                GuestLine::Done => out.done = true,
                GuestLine::Other => {}
            }
        }
        processed = processed.max(lines.len());
    }
    Ok(out)
}

/// Waits until the guest has printed more than `count` lines, or its output ends.
/// `QemuRun::wait_for_line` offers each line to the predicate once, in order, so counting the
/// calls finds line number `count`. (Were lines offered again, this would return early and the
/// caller would merely poll.)
fn wait_for_line_number(
    guest: &QemuRun,
    count: usize,
    limit: Duration,
) -> Result<(), LineWaitError> {
    let offered = Cell::new(0usize);
    guest
        .wait_for_line(
            |_| {
                let index = offered.get();
                offered.set(index + 1);
                index >= count
            },
            limit,
        )
        .map(drop)
}

/// Checks a finished run: `/init` completed, nothing failed, THP was off, and every metric of
/// every step was reported exactly once.
fn check(collected: &Collected, steps: &[Step]) -> Result<()> {
    if !collected.failures.is_empty() {
        bail!("Linux guest: {}", collected.failures.join("; "));
    }
    if !collected.done {
        bail!("the Linux guest's /init did not finish (no LDONE)");
    }
    match collected
        .info
        .iter()
        .find_map(|info| info.strip_prefix("thp "))
    {
        Some(THP_NEVER) => {}
        Some(other) => bail!("guest transparent huge pages are `{other}`, expected never"),
        None => bail!("the guest did not report its transparent-huge-page setting"),
    }
    for step in steps {
        for metric in step.metrics {
            let count = collected
                .measurements
                .iter()
                .filter(|m| m.metric == *metric && m.system == System::Linux)
                .count();
            if count != 1 {
                bail!("Linux guest reported {metric} {count} times (expected once)");
            }
        }
    }
    let expected: usize = steps.iter().map(|s| s.metrics.len()).sum();
    if collected.measurements.len() != expected {
        bail!(
            "Linux guest reported {} results, expected {expected}",
            collected.measurements.len()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collected(lines: &[&str]) -> Collected {
        let mut out = Collected::default();
        for line in lines {
            match guest_log::parse_line(line) {
                GuestLine::Info(text) => out.info.push(text),
                GuestLine::Bench(record) => out.measurements.push(record.into_measurement(None)),
                GuestLine::Fail(what) => out.failures.push(what),
                GuestLine::Done => out.done = true,
                _ => {}
            }
        }
        out
    }

    const SYSCALL: &str = r#"LBENCH {"group":"syscall","metric":"null_syscall","unit":"insns","median":323,"min":323,"max":900,"runs":1001}"#;

    #[test]
    fn a_complete_run_passes() {
        let steps = programs::select(&["syscall".into()]).unwrap();
        let run = collected(&["LINFO thp always madvise [never]", SYSCALL, "LDONE"]);
        check(&run, &steps).unwrap();
    }

    #[test]
    fn missing_metrics_failures_and_thp_are_errors() {
        let steps = programs::select(&["syscall".into()]).unwrap();
        let no_result = collected(&["LINFO thp always madvise [never]", "LDONE"]);
        assert!(
            check(&no_result, &steps)
                .unwrap_err()
                .to_string()
                .contains("null_syscall")
        );
        let failed = collected(&[
            "LINFO thp always madvise [never]",
            SYSCALL,
            "LFAIL x 1",
            "LDONE",
        ]);
        assert!(check(&failed, &steps).is_err());
        let thp = collected(&["LINFO thp [always] madvise never", SYSCALL, "LDONE"]);
        assert!(
            check(&thp, &steps)
                .unwrap_err()
                .to_string()
                .contains("huge")
        );
        let unfinished = collected(&["LINFO thp always madvise [never]", SYSCALL]);
        assert!(check(&unfinished, &steps).is_err());
    }

    #[test]
    fn the_guest_runs_with_fjords_benchmark_settings() {
        let config = qemu_config(Path::new("vmlinux"), Path::new("initramfs.cpio"));
        let line: Vec<String> = config
            .args()
            .unwrap()
            .iter()
            .map(|arg| arg.to_string_lossy().into_owned())
            .collect();
        let line = line.join(" ");
        for expected in [
            "-M microvm,",
            "-accel tcg -cpu max -smp 1 -m 512M ",
            "-icount shift=0,sleep=off -seed 1 -rtc base=2024-01-01T00:00:00,clock=vm",
            "-kernel vmlinux -initrd initramfs.cpio -append console=ttyS0 ",
        ] {
            assert!(line.contains(expected), "{expected:?} not in {line}");
        }
    }

    #[test]
    fn groups_without_linux_benchmarks_boot_nothing() {
        let opts = LinuxBenchOpts::new(vec!["pd".to_owned()]);
        assert!(run(&opts).unwrap().is_empty());
    }

    /// A real run of every group (or of `$LINUX_BENCH_GROUPS`, comma-separated) and its report
    /// in `$TMPDIR/fjord-linux-report/`; slow (under a minute without `workloads`) and needs
    /// QEMU, apt and gcc: `cargo test -p xtask linux_guest_end_to_end -- --ignored --nocapture`.
    /// The `workloads` step runs only with a parameters file in `$LINUX_WORKLOADS_PARAMS`
    /// (lines `<workload> <operation> <Jord_NI service> <SLO>`), the `restore` group's runner
    /// only with one in `$LINUX_RESTORE_PARAMS` (lines `<label> <none_latency> <SLO>`).
    #[test]
    #[ignore]
    fn linux_guest_end_to_end() {
        let groups = std::env::var("LINUX_BENCH_GROUPS")
            .map(|g| g.split(',').map(str::to_owned).collect())
            .unwrap_or_default();
        let mut opts = LinuxBenchOpts::new(groups);
        if let Ok(path) = std::env::var("LINUX_WORKLOADS_PARAMS") {
            opts.workloads = Ok(std::fs::read_to_string(path).unwrap());
        }
        if let Ok(path) = std::env::var("LINUX_RESTORE_PARAMS") {
            opts.restore = Ok(std::fs::read_to_string(path).unwrap());
        }
        opts.echo_serial = std::env::var_os("LINUX_ECHO").is_some();
        let measurements = run(&opts).unwrap();
        assert!(
            measurements
                .iter()
                .all(|m| m.system == System::Linux && m.median > 0.0)
        );
        let out = std::env::temp_dir().join("fjord-linux-report");
        let report = crate::report::write_report(&measurements, &out).unwrap();
        println!("report: {}", report.display());
    }
}
