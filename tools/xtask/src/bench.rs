//! `cargo xtask bench`: boot Fjord with `mode=bench` under icount, collect its `BENCH {json}`
//! records, add the host wall time of the boot, print a table and write the JSON results.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::bench_results;
use crate::measure::{Measurement, System};
use crate::qemu::{Accel, Machine, QemuConfig};
use crate::qemu_run::{QemuExit, QemuRun};
use crate::serial_log::{self, BenchRecord};
use crate::{host_deps, kernel_build, workspace};

/// Groups measured on one CPU (everything but the orchestrator benchmark).
pub const SINGLE_CPU_GROUPS: &[&str] = &["boot", "syscall", "pd"];

/// Time limit of one benchmark boot (icount runs one vCPU thread, slower than MTTCG).
pub const TIME_LIMIT: Duration = Duration::from_secs(600);
/// Size of the `cxl` group's shared region, in MiB.
const CXL_BENCH_MIB: u64 = 64;

/// Options of `cargo xtask bench`.
#[derive(Clone, Debug, Default)]
pub struct BenchOptions {
    /// Run only the benchmark groups whose name contains this.
    pub group: Option<String>,
    /// Also measure the Linux baseline and write the report.
    pub report: bool,
    /// Echo the guest's serial output.
    pub verbose: bool,
    /// TCG with icount (guest instructions), or KVM (wall-clock nanoseconds).
    pub accel: Accel,
}

/// Runs the benchmarks, prints the table and writes `bench/results/<date>.json`.
pub fn run(options: &BenchOptions) -> Result<()> {
    let steps = if options.report { 5 } else { 4 };
    let step = |n: u32, text: &str| println!("bench [{n}/{steps}] {text}");

    step(1, "building the kernel");
    let qemu = host_deps::ensure_qemu()?;
    let kernel = kernel_build::build_kernel()?;
    if let Some(group) = options
        .group
        .as_deref()
        .filter(|g| crate::bench_apps::is_app_group(g))
    {
        return apps(group, &kernel, &qemu, options);
    }

    // Every group but `faas` boots on one CPU, like the Linux guest; `faas` needs an
    // orchestrator CPU and an executor CPU and gets its own two-CPU boot.
    let single = match &options.group {
        Some(group) => format!("mode=bench bench={group}"),
        None => format!("mode=bench bench={}", SINGLE_CPU_GROUPS.join(",")),
    };
    let mut boots = Vec::new();
    if options.group.as_deref().is_none_or(|g| {
        !(g.contains("faas")
            || g.contains("workloads")
            || g.contains("fork")
            || g.contains("restore")
            || g.contains("cxl"))
            || g.is_empty()
    }) {
        boots.push((1, single));
    }
    if options
        .group
        .as_deref()
        .is_none_or(|g| "fork".contains(g) || g.contains("fork"))
    {
        // μprocesses run on an executor CPU; the `forkbench` program comes from the initrd.
        boots.push((2, "mode=bench bench=fork modules=initrd".to_owned()));
    }
    if options
        .group
        .as_deref()
        .is_none_or(|g| "faas".contains(g) || g.contains("faas"))
    {
        // The faas group also invokes the demo function modules, packed in the initrd.
        boots.push((2, "mode=bench bench=faas modules=initrd".to_owned()));
    }
    if options
        .group
        .as_deref()
        .is_none_or(|g| "workloads".contains(g) || g.contains("workloads") || g.contains("faas"))
    {
        // The applications' functions come from the initrd too.
        boots.push((2, "mode=bench bench=workloads modules=initrd".to_owned()));
    }
    if options
        .group
        .as_deref()
        .is_some_and(|g| "restore".contains(g) || g.contains("restore"))
    {
        // Groundhog's restore under its three Groundhog modes, on the initrd's functions
        // (only when asked for: it takes long).
        boots.push((2, "mode=bench bench=restore modules=initrd".to_owned()));
    }
    if options.group.as_deref().is_some_and(|g| g.contains("cxl")) {
        // CXLfork on one node: a q35 boot with a shared region, the initrd's `index`.
        boots.push((2, "mode=bench bench=cxl modules=initrd".to_owned()));
    }
    let restore_asked = options
        .group
        .as_deref()
        .is_some_and(|g| "restore".contains(g) || g.contains("restore"));
    let mut measurements = Vec::new();
    let mut total_wall = Duration::ZERO;
    let kvm = options.accel == Accel::Kvm;
    let mut tsc_mhz = None;
    // The banner's CPU and SYSCALL lines, quoted by the KVM report.
    let mut host_lines: Vec<String> = Vec::new();
    let mut ring0_emulated = false;
    for (smp, append) in boots {
        if ring0_emulated && (append.contains("bench=faas") || append.contains("bench=workloads")) {
            // Their open-loop searches run thousands of requests per load point.
            println!(
                "bench: `{append}` not run: this KVM emulates ring 0 (tens of times slower than TCG)"
            );
            continue;
        }
        let mut config = QemuConfig::new(&kernel);
        config.qemu = qemu.clone();
        config.machine = Machine::Microvm;
        // The cxl group's shared region: a file of its own, removed after the boot.
        let region = append.contains("bench=cxl").then(|| {
            std::path::PathBuf::from(format!("/dev/shm/fjord-bench-cxl-{}", std::process::id()))
        });
        if let Some(path) = &region {
            std::fs::File::create(path)
                .and_then(|f| f.set_len(CXL_BENCH_MIB << 20))
                .with_context(|| format!("creating {}", path.display()))?;
            config.machine = Machine::Q35;
            config.devices.push(crate::qemu::Device::Ivshmem {
                mem_path: path.clone(),
                size_mib: CXL_BENCH_MIB,
            });
        }
        config.smp = smp;
        config.use_accel(options.accel);
        // Under KVM the kernel reports nanoseconds of its calibrated TSC instead of TSC deltas.
        let append = match kvm {
            true => format!("{append} bench_clock=ns"),
            false => append,
        };
        config.icount = !kvm;
        if append.contains("bench=fork") {
            // A 120 MiB μprocess and its fully copied child.
            config.memory_mib = 1024;
        }
        if append.contains("modules=initrd") {
            config.initrd = Some(crate::initrd::pack_initrd()?);
        }
        config.append = append;
        step(
            2,
            &format!(
                "booting Fjord: {}, {smp} CPU(s), {}, `{}`",
                config.machine,
                if kvm { "KVM" } else { "icount" },
                config.append
            ),
        );
        let echo = options.verbose.then(|| "[fjord] ".to_owned());
        let started = Instant::now();
        let mut run = QemuRun::spawn(&config, echo)?;
        // The restore group runs 27 open-loop sweeps in one boot, 15 of them of 4,800 requests
        // a run pooled over two or eight arrival sequences.
        // The workloads group runs five sweeps per operation: three systems warm, then Jord
        // with fresh and with forked instances.
        let limit = if config.append.contains("bench=restore") {
            10 * TIME_LIMIT
        } else if config.append.contains("bench=workloads") {
            4 * TIME_LIMIT
        } else {
            TIME_LIMIT
        };
        let exit = run.wait_exit(limit);
        let wall = started.elapsed();
        if let Some(path) = &region {
            let _ = std::fs::remove_file(path);
        }
        if exit != QemuExit::Success {
            print!("{}", run.log_tail(30));
            if !kvm {
                bail!("the benchmark boot did not succeed: {exit}");
            }
            // Under KVM a group that fails is reported missing; the others still count.
            println!("bench: this KVM boot did not succeed ({exit}); its groups stay unmeasured");
            continue;
        }
        for line in run.lines() {
            if line.starts_with("fjord: faas:")
                || line.starts_with("fjord: workloads:")
                || line.starts_with("fjord: bench restore")
                || line.starts_with("fjord: pd events")
                || line.starts_with("fjord: bench error")
                || line.starts_with("fjord: bench fork")
            {
                println!("  {line}");
            }
        }
        measurements.extend(collect(&run.lines())?);
        tsc_mhz = tsc_mhz.or_else(|| banner_tsc_mhz(&run.lines()));
        ring0_emulated |= kvm && run.output_contains(serial_log::RING0_EMULATED);
        if host_lines.is_empty() {
            host_lines = run
                .lines()
                .into_iter()
                .filter(|l| l.contains(", TSC ") || l.starts_with(serial_log::SYSCALL_LINE))
                .map(|l| l.trim().to_owned())
                .collect();
        }
        if smp == 1 && !kvm {
            measurements.push(boot_wall_time(wall));
        }
        total_wall += wall;
    }
    if options.group.as_deref().is_some_and(|g| g.contains("cxl")) {
        // Wall time of restores on two nodes, each policy pinned in a cluster of its own.
        if ring0_emulated {
            println!(
                "bench cxl: the two-node clusters not run: this KVM emulates ring 0 (a request to a q35 node takes longer than HAProxy's health checks wait)"
            );
        } else {
            measurements.extend(crate::bench_cxl::wall(options.accel)?);
        }
    }
    let wall = total_wall;
    if kvm && let Some(mhz) = tsc_mhz {
        // The μprocess programs time themselves with RDTSC in ring 3 and print TSC deltas.
        for m in &mut measurements {
            crate::linux::to_nanoseconds(m, mhz);
        }
    }
    let http_asked = options
        .group
        .as_deref()
        .is_none_or(|g| "http".contains(g) || g.contains("http") || g.contains("faas"));
    if http_asked && ring0_emulated {
        println!(
            "bench: the HTTP group not run: this KVM emulates ring 0 (a GET /metrics takes about \
             0.4 s there), so its thousands of requests would take hours"
        );
    } else if http_asked {
        step(
            2,
            "HTTP gateway from the host: open-loop load generator (wall clock, no icount)",
        );
        measurements.extend(http_gateway(&kernel, &qemu, options.accel)?);
    }
    if restore_asked && !options.report && !kvm {
        // Groundhog's peer, measured in the same run: a process forked per request from a
        // warmed parent in the Linux guest (`--report` runs it with the other Linux groups).
        step(
            2,
            "Linux baseline of `restore`: a process forked per request from a warmed parent",
        );
        let mut linux = crate::linux::LinuxBenchOpts::new(vec!["restore".to_owned()]);
        linux.echo_serial = options.verbose;
        linux.restore = crate::linux::nightcore::restore_params(&measurements);
        measurements.extend(crate::linux::run(&linux)?);
    }
    if let Some(group) = &options.group {
        // `faas` also covers the chain microbenchmark (measured in its boot) and the workloads'
        // SLO comparison.
        measurements.retain(|m| {
            m.group.contains(group.as_str())
                || (group.contains("faas") && (m.group == "chain" || m.group == "workloads"))
                || (group.contains("fork") && m.group == "ctxswitch")
        });
        if measurements.is_empty() && !options.report {
            bail!("no benchmark group name contains `{group}`");
        }
    }
    println!(
        "bench [3/{steps}] Fjord: {} measurements in {:.1} s",
        measurements.len(),
        wall.as_secs_f64()
    );

    if options.report && kvm {
        step(
            4,
            "Linux baseline under KVM (Debian kernel, same QEMU settings)",
        );
        let mut linux = crate::linux::LinuxBenchOpts::new(options.group.iter().cloned().collect());
        linux.echo_serial = options.verbose;
        linux.kvm_tsc_mhz = tsc_mhz;
        let linux_note = match crate::linux::run(&linux) {
            Ok(linux) => {
                measurements.extend(linux);
                None
            }
            Err(e) => {
                let why = format!("{e:#}");
                println!("bench: the Linux guest gave no numbers under KVM: {why}");
                Some(why)
            }
        };
        let root = workspace::root();
        let md = crate::report::write_kvm_report(
            &measurements,
            linux_note.as_deref(),
            &host_lines,
            &root.join("bench/results"),
        )?;
        println!("bench: report written to {}", md.display());
        if crate::report::update_readme_kvm(
            &root.join("README.md"),
            &measurements,
            linux_note.as_deref(),
            &host_lines,
        )? {
            println!("bench: README KVM benchmark section updated");
        }
    } else if options.report {
        step(
            4,
            "Linux baseline (Debian kernel under the same QEMU settings)",
        );
        let mut linux = crate::linux::LinuxBenchOpts::new(linux_groups(options.group.as_deref()));
        linux.echo_serial = options.verbose;
        linux.workloads = crate::linux::nightcore::params(&measurements);
        linux.restore = crate::linux::nightcore::restore_params(&measurements);
        measurements.extend(crate::linux::run(&linux)?);
        let root = workspace::root();
        // A run of some groups gets a report of its own beside the day's (`<date>-<group>.md`),
        // which it would otherwise replace with its rows alone.
        let md = crate::report::write_report_named(
            &measurements,
            &root.join("bench/results"),
            options.group.as_deref(),
        )?;
        println!("bench: report written to {}", md.display());
        match &options.group {
            // The README's table covers every group: rewriting it from some would drop the
            // others' rows.
            Some(group) => println!(
                "bench: README not updated (this run measured only `{group}`); its rows for the                  table:\n{}",
                crate::report::readme_block(&measurements, "today", "this run")
            ),
            None => {
                if crate::report::update_readme(&root.join("README.md"), &measurements)? {
                    println!("bench: README benchmark section updated");
                }
            }
        }
    }

    let path = bench_results::results_path_for_today_with(if kvm { "-kvm" } else { "" });
    step(steps, &format!("writing {}", path.display()));
    print!("{}", bench_results::format_table(&measurements));
    bench_results::write_results(&path, &measurements)?;
    Ok(())
}

/// The Linux guest's groups that pair with Fjord's `group` (all when `None`): the `fork` boot
/// also measures the pipe ping-pong between a μprocess and its child, Linux's `ctxswitch`.
fn linux_groups(group: Option<&str>) -> Vec<String> {
    match group {
        None => Vec::new(),
        Some(g) if g.contains("fork") => vec![g.to_owned(), "ctxswitch".to_owned()],
        // CXLfork's full-copy counterpart: the Linux guest's copy of a whole working set.
        Some(g) if g.contains("cxl") => vec!["checkpoint".to_owned()],
        Some(g) => vec![g.to_owned()],
    }
}

/// `cargo xtask bench redis|prefork` ([`crate::bench_apps`]): both systems in one run, wall
/// time under TCG; prints the table and writes `bench/results/<date>-<group>.json` (and with
/// `--report`, the markdown report beside it).
fn apps(
    group: &str,
    kernel: &std::path::Path,
    qemu: &std::path::Path,
    options: &BenchOptions,
) -> Result<()> {
    if options.accel == Accel::Kvm {
        bail!(
            "`bench {group}` runs under TCG only: the Linux guest does not boot under this \
             host's KVM, and both systems must run under the same settings"
        );
    }
    println!(
        "bench [2/4] {group}: Fjord's program and the Linux guest's server, one after the other"
    );
    let measurements = crate::bench_apps::run(group, kernel, qemu, options.verbose)?;
    println!("bench [3/4] {group}: {} measurements", measurements.len());
    if options.report {
        let md =
            crate::report::write_report(&measurements, &workspace::root().join("bench/results"))?;
        println!("bench: report written to {}", md.display());
    }
    let path = bench_results::results_path_for_today_with(&format!("-{group}"));
    println!("bench [4/4] writing {}", path.display());
    print!("{}", bench_results::format_table(&measurements));
    bench_results::write_results(&path, &measurements)
}

/// Offered loads (requests per second) of the HTTP gateway benchmark.
pub const HTTP_RATES: &[u64] = &[200, 1000, 2000];

/// Boots Fjord with networking (real time, no icount) and drives `GET /metrics` with the
/// open-loop generator at each of [`HTTP_RATES`]; returns p50/p99/p99.9 latency per rate.
///
/// The host reaches the guest over a tap interface when it can make one (see [`crate::tap`]),
/// so QEMU's user-mode network stack is not in the measured path; otherwise over user
/// networking. Which one is printed.
fn http_gateway(
    kernel: &std::path::Path,
    qemu: &std::path::Path,
    accel: Accel,
) -> Result<Vec<Measurement>> {
    let tap = match crate::tap::Tap::create() {
        Ok(tap) => tap,
        Err(e) => {
            println!(
                "  http: no tap in a network namespace of our own ({e:#}); QEMU user networking \
                 on loopback instead"
            );
            return http_gateway_on(kernel, qemu, accel, None);
        }
    };
    // QEMU and the load generators must run inside the namespace: this program again, there.
    // The namespace has no route out, so what apt installs must be there first.
    host_deps::ensure_program("wrk", crate::wrk::WRK_PACKAGE)?;
    crate::apps_build::build_apps().context("building the function modules")?;
    let mut args: Vec<std::ffi::OsString> = vec!["bench-http-inside".into(), "--kernel".into()];
    args.extend([
        kernel.as_os_str().to_owned(),
        "--qemu".into(),
        qemu.as_os_str().to_owned(),
    ]);
    args.extend(["--accel".into(), accel.to_string().into(), "--tap".into()]);
    args.push(tap.net().ifname.clone().into());
    measurements_inside(&tap, &args, "bench-http-inside", "the HTTP benchmark")
}

/// Runs this program again inside `tap`'s network namespace with `args` (a hidden
/// `…-inside` command, which is given `--out <file>` and writes its measurements there as
/// JSON) and returns them; `name` names the file, `what` the run in errors.
pub fn measurements_inside(
    tap: &crate::tap::Tap,
    args: &[std::ffi::OsString],
    name: &str,
    what: &str,
) -> Result<Vec<Measurement>> {
    let out = workspace::target_dir().join(format!("fjord/{name}.json"));
    let _ = std::fs::remove_file(&out);
    let exe = std::env::current_exe().context("finding xtask's own executable")?;
    let status = tap
        .netns()
        .command(exe)
        .args(args)
        .arg("--out")
        .arg(&out)
        .status()
        .with_context(|| format!("running {what} inside the network namespace"))?;
    if !status.success() {
        bail!(
            "{what} inside network namespace {} failed ({status})",
            tap.netns().name()
        );
    }
    let text =
        std::fs::read_to_string(&out).with_context(|| format!("reading {}", out.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", out.display()))
}

/// `cargo xtask bench-http-inside` (hidden): run inside [`http_gateway`]'s network namespace,
/// boots the gateway on the tap `ifname` there, drives it and writes the measurements to `out`.
pub fn http_gateway_inside(
    kernel: &std::path::Path,
    qemu: &std::path::Path,
    accel: Accel,
    ifname: &str,
    out: &std::path::Path,
) -> Result<()> {
    let net = crate::tap::TapNet::new(ifname.to_owned(), 0);
    let measurements = http_gateway_on(kernel, qemu, accel, Some(&net))?;
    let json = serde_json::to_string(&measurements)?;
    std::fs::write(out, json).with_context(|| format!("writing {}", out.display()))
}

/// The HTTP benchmark against a gateway on tap link `net` (from inside its namespace) or, with
/// `None`, on QEMU user networking forwarded from loopback.
fn http_gateway_on(
    kernel: &std::path::Path,
    qemu: &std::path::Path,
    accel: Accel,
    net: Option<&crate::tap::TapNet>,
) -> Result<Vec<Measurement>> {
    let (mut run, addr) =
        crate::e2e_http::boot_gateway_on(kernel, Some(qemu), Machine::Microvm, accel, "", net)?;
    println!("  http: {}", network_path(net, addr));
    let mut out = Vec::new();
    for &rate in HTTP_RATES {
        out.extend(http_load(
            addr,
            "http",
            "get_metrics",
            "GET",
            "/metrics",
            b"",
            rate,
        )?);
    }
    // End-to-end invocations from the host, beside the in-guest generator's numbers.
    let apps = crate::apps_build::build_apps()?;
    for (name, body) in HTTP_INVOKES {
        let app = apps
            .iter()
            .find(|a| a.name == *name)
            .with_context(|| format!("app {name} was not built"))?;
        let r = crate::e2e_http::deploy(addr, name, &app.bytes)
            .map_err(|e| anyhow::anyhow!("deploying {name}: {e}"))?;
        if !(200..300).contains(&r) {
            bail!("deploying {name} answered {r}");
        }
        for &rate in HTTP_INVOKE_RATES {
            let path = format!("/invoke/{name}");
            let metric = format!("http_invoke_{}", name.replace('-', "_"));
            out.extend(http_load(addr, "faas", &metric, "POST", &path, body, rate)?);
        }
    }
    // Connection-count sweep: closed loop, `hello` (deployed above), in interleaved rounds.
    let mut rounds: Vec<Vec<crate::loadgen::ClosedReport>> =
        vec![Vec::new(); HTTP_CONNECTIONS.len()];
    for round in 1..=HTTP_SWEEP_ROUNDS {
        for (&n, reports) in HTTP_CONNECTIONS.iter().zip(&mut rounds) {
            reports.push(http_connections(addr, n, round)?);
        }
    }
    let mut medians = Vec::new();
    for (&n, reports) in HTTP_CONNECTIONS.iter().zip(&rounds) {
        let sweep = sweep_point(n, reports);
        medians.push((n, sweep[0].median));
        out.extend(sweep);
    }
    if let Some(line) = sweep_verdict(&medians) {
        println!("  http {line}");
    }
    run.kill();
    Ok(out)
}

/// The line that says how the host load generator reaches the guest at `addr`.
fn network_path(tap: Option<&crate::tap::TapNet>, addr: std::net::SocketAddr) -> String {
    match tap {
        Some(net) => format!(
            "network path: tap {} (host {}) in a network namespace of xtask's own, load \
             generator to the guest at {addr} directly",
            net.ifname, net.host
        ),
        None => format!(
            "network path: QEMU user networking (slirp), load generator to {addr} forwarded to \
             guest port 80"
        ),
    }
}

/// Concurrent connections of the closed-loop sweep (`cargo xtask bench http`).
pub const HTTP_CONNECTIONS: &[usize] = &[16, 64, 256, 1000];
/// How long each sweep point sends requests once its connections are open.
const HTTP_SWEEP_DURATION: Duration = Duration::from_secs(10);
/// Rounds of the sweep: each point runs once per round, the points taking turns, so a spell of
/// load on the host falls on every point alike instead of on one; each point's figures are
/// the median round's (with the lowest and highest).
pub const HTTP_SWEEP_ROUNDS: usize = 3;
/// The connection counts whose throughput the gateway's target compares with the best.
const HTTP_TARGET_CONNECTIONS: &[usize] = &[64, 256, 1000];

/// `n` keep-alive connections invoking `hello` in a closed loop for one round of the sweep.
fn http_connections(
    addr: std::net::SocketAddr,
    n: usize,
    round: usize,
) -> Result<crate::loadgen::ClosedReport> {
    let load = crate::loadgen::ClosedLoad {
        addr,
        method: "POST".into(),
        path: "/invoke/hello".into(),
        body: b"world".to_vec(),
        connections: n,
        duration: HTTP_SWEEP_DURATION,
    };
    let before = guest_work(addr);
    let r = crate::wrk::run_closed(&load)?;
    let after = guest_work(addr);
    println!(
        "  http POST /invoke/hello, {n} connections (wrk, round {round}/{HTTP_SWEEP_ROUNDS}): {:.0} req/s, p50 {:.1} ms, p99 {:.1} ms, {} answered 503, {} errors",
        r.rps,
        r.p50_ns as f64 / 1e6,
        r.p99_ns as f64 / 1e6,
        r.refused,
        r.errors
    );
    if let (Some(b), Some(a)) = (before, after) {
        let per = |i: usize| a[i].saturating_sub(b[i]) as f64 / (r.ok.max(1)) as f64;
        println!(
            "  http guest work per request at {n} connections: {:.2} network-loop passes, {:.2} socket visits, {:.2} frames in, {:.2} out",
            per(0),
            per(1),
            per(2),
            per(3)
        );
    }
    Ok(r)
}

/// The measurements of group `http` of one sweep point from its rounds: throughput, p50 and
/// p99, each the median round with the lowest and highest (throughput first).
fn sweep_point(n: usize, rounds: &[crate::loadgen::ClosedReport]) -> Vec<Measurement> {
    let runs = rounds.iter().map(|r| r.ok).sum();
    let m = |metric: String, unit: &str, values: Vec<f64>| {
        let (median, min, max) = median_min_max(values);
        Measurement {
            group: "http".into(),
            metric,
            system: System::Fjord,
            unit: unit.into(),
            median,
            min,
            max,
            runs,
            wall_ns: (unit == "ns").then_some(median),
            p99: None,
        }
    };
    let of = |f: fn(&crate::loadgen::ClosedReport) -> f64| rounds.iter().map(f).collect();
    vec![
        m(
            format!("hello_{n}_connections_throughput"),
            "req/s",
            of(|r| r.rps),
        ),
        m(
            format!("hello_{n}_connections_p50"),
            "ns",
            of(|r| r.p50_ns as f64),
        ),
        m(
            format!("hello_{n}_connections_p99"),
            "ns",
            of(|r| r.p99_ns as f64),
        ),
    ]
}

/// The median (the upper middle one of an even count), lowest and highest of `values` (zeros
/// when there are none).
pub fn median_min_max(mut values: Vec<f64>) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    match (values.first(), values.last()) {
        (Some(&min), Some(&max)) => (values[values.len() / 2], min, max),
        _ => (0.0, 0.0, 0.0),
    }
}

/// The gateway target's line from the sweep's median throughputs `(connections, req/s)`: the
/// lowest of [`HTTP_TARGET_CONNECTIONS`] as a share of the best point, and whether it is within
/// 20%. `None` if a point is missing.
pub fn sweep_verdict(medians: &[(usize, f64)]) -> Option<String> {
    let best = medians.iter().map(|&(_, r)| r).fold(0.0, f64::max);
    let (n, lowest) = HTTP_TARGET_CONNECTIONS
        .iter()
        .map(|&n| medians.iter().find(|&&(m, _)| m == n).copied())
        .collect::<Option<Vec<_>>>()?
        .into_iter()
        .min_by(|a, b| a.1.total_cmp(&b.1))?;
    if best <= 0.0 {
        return None;
    }
    let share = lowest / best * 100.0;
    Some(format!(
        "sweep (medians of {HTTP_SWEEP_ROUNDS} rounds): lowest of 64-1,000 connections {lowest:.0} req/s at {n}, {share:.0}% of the best {best:.0} (target >= 80%: {})",
        if share >= 80.0 { "met" } else { "not met" }
    ))
}

/// The guest's network-loop passes, HTTP socket visits and frames received and sent so far
/// (`/metrics`), if it answers.
fn guest_work(addr: std::net::SocketAddr) -> Option<[u64; 4]> {
    let text = crate::http_client::one(addr, "GET", "/metrics", b"")
        .ok()?
        .text();
    let v = |series: &str| crate::e2e_conns::series_value(&text, series);
    Some([
        v("fjord_net_loop_passes_total")?,
        v("fjord_http_socket_visits_total")?,
        v("fjord_net_received_packets_total")?,
        v("fjord_net_sent_packets_total")?,
    ])
}

/// Functions invoked over HTTP by the host-side generator, with their request bodies.
const HTTP_INVOKES: &[(&str, &[u8])] = &[("hello", b"world"), ("relay", b"2 abc")];
/// Offered loads of the host-side invocation runs (requests per second).
const HTTP_INVOKE_RATES: &[u64] = &[100, 400];

/// One open-loop run of the host-side generator; p50/p99/p99.9 as measurements of `group`.
fn http_load(
    addr: std::net::SocketAddr,
    group: &str,
    metric: &str,
    method: &str,
    path: &str,
    body: &[u8],
    rate: u64,
) -> Result<Vec<Measurement>> {
    let load = crate::loadgen::Load {
        addr,
        method: method.into(),
        path: path.into(),
        body: body.to_vec(),
        rate: rate as f64,
        requests: (rate as usize * 3).max(600),
        connections: 4,
        seed: rate,
        expect_status: 200,
    };
    let r = crate::loadgen::run(&load)?;
    println!(
        "  http {method} {path} offered {rate} req/s: achieved {:.0} req/s, p50 {:.0} µs, p99 {:.0} µs, p99.9 {:.0} µs, {} errors",
        r.achieved_rps,
        r.p50_ns as f64 / 1e3,
        r.p99_ns as f64 / 1e3,
        r.p999_ns as f64 / 1e3,
        r.errors
    );
    Ok([("p50", r.p50_ns), ("p99", r.p99_ns), ("p999", r.p999_ns)]
        .into_iter()
        .map(|(q, v)| Measurement {
            group: group.into(),
            metric: format!("{metric}_{q}_at_{rate}rps"),
            system: System::Fjord,
            unit: "ns".into(),
            median: v as f64,
            min: v as f64,
            max: v as f64,
            runs: load.requests as u64,
            wall_ns: Some(v as f64),
            p99: None,
        })
        .collect())
}

/// The measurements in the serial lines (`BENCH {json}`), in order; a malformed record is an
/// error.
pub fn collect(lines: &[String]) -> Result<Vec<Measurement>> {
    let mut measurements = Vec::new();
    for line in lines {
        if let Some(record) = serial_log::parse_bench_line(line) {
            let record = record.with_context(|| format!("malformed bench record: {line}"))?;
            measurements.push(to_measurement(record)?);
        }
    }
    Ok(measurements)
}

/// Converts a guest record; the system defaults to Fjord.
pub fn to_measurement(record: BenchRecord) -> Result<Measurement> {
    let system = match record.system.as_deref() {
        None => System::Fjord,
        // A Fjord guest reports Fjord's variants only; Linux numbers come from the Linux guest.
        Some(name) => match System::from_name(name) {
            Some(system) if system != System::Linux => system,
            _ => bail!("bench record names unknown system `{name}`"),
        },
    };
    Ok(Measurement {
        group: record.group,
        metric: record.metric,
        system,
        unit: record.unit,
        median: record.median,
        min: record.min,
        max: record.max,
        runs: record.runs,
        wall_ns: record.wall_ns,
        p99: record.p99,
    })
}

/// The TSC frequency the kernel's banner gives (`… TSC 2307 MHz, …`).
pub fn banner_tsc_mhz(lines: &[String]) -> Option<f64> {
    lines.iter().find_map(|line| {
        let rest = line.split_once(", TSC ")?.1;
        rest.split_once(" MHz")?.0.trim().parse().ok()
    })
}

/// The host wall time of the whole benchmark boot, from QEMU start to exit (noisy).
pub fn boot_wall_time(wall: Duration) -> Measurement {
    let ns = wall.as_nanos() as f64;
    Measurement {
        group: "boot".to_owned(),
        metric: "boot_to_exit_wall".to_owned(),
        system: System::Fjord,
        unit: "ns".to_owned(),
        median: ns,
        min: ns,
        max: ns,
        runs: 1,
        wall_ns: Some(ns),
        p99: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fork_group_pairs_with_linux_ctxswitch_too() {
        assert!(linux_groups(None).is_empty(), "all groups");
        assert_eq!(linux_groups(Some("fork")), ["fork", "ctxswitch"]);
        assert_eq!(linux_groups(Some("mm")), ["mm"]);
    }

    #[test]
    fn a_sweep_point_is_its_median_round_with_the_lowest_and_highest() {
        assert_eq!(median_min_max(vec![3.0, 1.0, 2.0]), (2.0, 1.0, 3.0));
        assert_eq!(median_min_max(vec![4.0, 1.0]), (4.0, 1.0, 4.0));
        assert_eq!(median_min_max(vec![]), (0.0, 0.0, 0.0));
        let r = |rps, p50_ns, p99_ns| crate::loadgen::ClosedReport {
            ok: 100,
            refused: 0,
            errors: 0,
            rps,
            p50_ns,
            p99_ns,
        };
        let m = sweep_point(64, &[r(10.0, 5, 50), r(30.0, 1, 90), r(20.0, 3, 70)]);
        assert_eq!(m[0].metric, "hello_64_connections_throughput");
        assert_eq!((m[0].median, m[0].min, m[0].max), (20.0, 10.0, 30.0));
        assert_eq!((m[1].median, m[2].median), (3.0, 70.0));
        assert_eq!(m[0].runs, 300);
    }

    #[test]
    fn the_sweep_verdict_compares_the_lowest_target_point_with_the_best() {
        let met = sweep_verdict(&[(16, 5000.0), (64, 4500.0), (256, 4100.0), (1000, 4200.0)]);
        let met = met.unwrap();
        assert!(
            met.contains("4100 req/s at 256, 82% of the best 5000"),
            "{met}"
        );
        assert!(met.ends_with("met)"), "{met}");
        // The 16-connection point counts as the best but not as a target point.
        let missed = sweep_verdict(&[(16, 1000.0), (64, 5000.0), (256, 5000.0), (1000, 3900.0)]);
        assert!(missed.unwrap().ends_with("not met)"));
        assert_eq!(sweep_verdict(&[(16, 1.0), (64, 1.0)]), None);
    }

    #[test]
    fn collects_records_and_systems() {
        let lines: Vec<String> = [
            "Fjord 0.1.0 booting",
            r#"BENCH {"group":"boot","metric":"boot_to_first_line","unit":"insns","median":1234,"min":1200,"max":1300,"runs":5}"#,
            r#"BENCH {"group":"pd","metric":"switch","unit":"insns","median":10,"min":9,"max":12,"runs":3,"system":"fjord_ni"}"#,
        ]
        .map(str::to_owned)
        .to_vec();
        let measurements = collect(&lines).unwrap();
        assert_eq!(measurements.len(), 2);
        assert_eq!(measurements[0].system, System::Fjord);
        assert_eq!(measurements[0].median, 1234.0);
        assert_eq!(measurements[1].system, System::FjordNi);
    }

    #[test]
    fn rejects_malformed_records_and_foreign_systems() {
        assert!(collect(&["BENCH {\"group\":1}".to_owned()]).is_err());
        let linux = r#"BENCH {"group":"a","metric":"b","unit":"insns","median":1,"min":1,"max":1,"runs":1,"system":"linux"}"#;
        assert!(collect(&[linux.to_owned()]).is_err());
    }

    #[test]
    fn the_network_path_is_named() {
        let net = crate::tap::TapNet::new("fjtap7".into(), 3);
        let addr = std::net::SocketAddr::from((net.guest, 80));
        assert_eq!(
            network_path(Some(&net), addr),
            "network path: tap fjtap7 (host 10.77.3.2) in a network namespace of xtask's own, \
             load generator to the guest at 10.77.3.15:80 directly"
        );
        let local = std::net::SocketAddr::from(([127, 0, 0, 1], 8080));
        assert!(network_path(None, local).contains("slirp"));
    }

    #[test]
    fn wall_time_is_one_sample_in_ns() {
        let m = boot_wall_time(Duration::from_millis(1500));
        assert_eq!(m.median, 1.5e9);
        assert_eq!(m.wall_ns, Some(1.5e9));
        assert_eq!(m.runs, 1);
    }
}
