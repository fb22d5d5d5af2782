//! `cargo xtask bench redis` and `cargo xtask bench prefork`: Fjord's `redis` and `prefork`
//! programs against Debian's `redis-server` and `nginx` in the Linux guest, driven from the
//! host by Debian's `redis-benchmark` and `wrk`.
//!
//! Both systems boot one after the other under the same QEMU settings (microvm, TCG without
//! icount, [`CPUS`] vCPUs, [`MEMORY_MIB`]) on the same tap link inside a network namespace of
//! xtask's own ([`crate::tap`]): QEMU's user network accepts one host connection at a time,
//! which would stall every load with more than one connection. The numbers are wall time on a
//! shared host under TCG: each point runs [`ROUNDS`] times and reports the median round with
//! the lowest and highest.
//!
//! - `redis`: GET and SET throughput and p99 latency (`redis-benchmark`, 16 connections); then
//!   for three datasets (10 k keys, 100 k keys, 25,600 values of 4 KiB: 100 MB) loaded with
//!   `redis-cli --pipe`, SET throughput over the dataset's keys without a save and while
//!   `BGSAVE`s run back to back, each save's fork time (`latest_fork_usec`), time to a finished
//!   snapshot, and the memory its fork added (`rdb_last_cow_size`: on Linux the child's private
//!   dirty memory, on Fjord the pages copied into the child from its parent); and the time
//!   and added memory of saves with no load (`redis_bgsave_quiet_*`).
//! - `prefork`: Fjord's prefork server with 1, 2 and 3 workers against nginx with as many,
//!   64 connections on the static page and on `/worker`.

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::apps_build::BuiltApp;
use crate::e2e_http::ProgramBoot;
use crate::linux::server::{self, Server, ServerBoot};
use crate::loadgen::ClosedLoad;
use crate::measure::{Measurement, System};
use crate::qemu::Accel;
use crate::qemu_run::QemuRun;
use crate::tap::TapNet;
use crate::{host_deps, workspace};

/// The benchmark groups of this module.
pub const GROUPS: &[&str] = &["redis", "prefork"];
/// vCPUs of both guests (Fjord's microvm layout: one orchestrator, two executors).
pub const CPUS: u32 = crate::e2e_http::MICROVM_CPUS;
/// RAM of both guests (Fjord's `redis` program needs 1 GiB for the 100 MB dataset).
pub const MEMORY_MIB: u32 = 1024;
/// Times each load point runs.
pub const ROUNDS: usize = 3;
/// Connections of the Redis loads.
const REDIS_CLIENTS: usize = 16;
/// Requests of one GET/SET throughput round per command.
const REDIS_REQUESTS: usize = 20_000;
/// Requests of one write-load round over a BGSAVE dataset.
const SAVE_LOAD_REQUESTS: usize = 30_000;
/// The BGSAVE datasets: name, keys, value bytes (as `redisbench` in `bench fork`).
pub const DATASETS: &[(&str, usize, usize)] = &[
    ("10k", 10_000, 3),
    ("100k", 100_000, 3),
    ("100mb", 25_600, 4096),
];
/// Connections of the prefork loads (the issue's `wrk` load).
const HTTP_CONNECTIONS: usize = 64;
/// Length of one prefork load round.
const HTTP_DURATION: Duration = Duration::from_secs(8);
/// Worker counts of the prefork comparison, and Fjord's program for each.
const PREFORK: &[(u32, &str)] = &[(1, "prefork1"), (2, "prefork2"), (3, "prefork")];
/// How long a server may take to answer after its boot.
const READY_LIMIT: Duration = Duration::from_secs(120);

/// True when `group` names one of [`GROUPS`].
pub fn is_app_group(group: &str) -> bool {
    GROUPS.contains(&group)
}

/// Runs `group` ([`GROUPS`]): prepares everything that needs the host's network (packages, the
/// guest kernel, nginx, the programs), makes the tap link and runs [`inside`] in its namespace
/// (this program again, there); returns its measurements.
pub fn run(group: &str, kernel: &Path, qemu: &Path, verbose: bool) -> Result<Vec<Measurement>> {
    if !is_app_group(group) {
        bail!(
            "no application benchmark `{group}` (there are {})",
            GROUPS.join(", ")
        );
    }
    for (binary, package) in [
        ("redis-benchmark", "redis-tools"),
        ("redis-cli", "redis-tools"),
        ("redis-server", "redis-server"),
        ("wrk", crate::wrk::WRK_PACKAGE),
    ] {
        host_deps::ensure_program(binary, package)?;
    }
    let cache = workspace::target_dir().join("linux-guest");
    let guest = crate::linux::kernel_pkg::ensure_kernel(&cache)?;
    crate::linux::kernel_pkg::ensure_net_modules(&cache, &guest)?;
    crate::linux::kernel_pkg::ensure_busybox(&cache)?;
    if group == "prefork" {
        crate::linux::kernel_pkg::ensure_package_file(&cache, "nginx", "/usr/sbin/nginx")?;
    }
    crate::apps_build::build_apps().context("building the programs")?;
    let tap = crate::tap::Tap::create().context(
        "the application benchmarks need a tap link in a network namespace of their own \
         (QEMU's user network takes one connection at a time)",
    )?;
    let mut args: Vec<std::ffi::OsString> = Vec::new();
    if verbose {
        args.push("--verbose".into());
    }
    args.extend(["bench-apps-inside".into(), "--group".into(), group.into()]);
    args.extend(["--kernel".into(), kernel.as_os_str().to_owned()]);
    args.extend(["--qemu".into(), qemu.as_os_str().to_owned()]);
    args.extend(["--tap".into(), tap.net().ifname.clone().into()]);
    let what = format!("the {group} benchmark");
    crate::bench::measurements_inside(&tap, &args, &format!("bench-{group}-inside"), &what)
}

/// `cargo xtask bench-apps-inside` (hidden): inside [`run`]'s namespace, measures `group` on
/// both systems over the tap `ifname` and writes the measurements to `out`.
pub fn inside(
    group: &str,
    kernel: &Path,
    qemu: &Path,
    ifname: &str,
    out: &Path,
    verbose: bool,
) -> Result<()> {
    let net = TapNet::new(ifname.to_owned(), 0);
    let apps = crate::apps_build::build_apps()?;
    let env = Env {
        kernel,
        qemu,
        net: &net,
        apps: &apps,
        verbose,
    };
    println!(
        "  {group}: both systems on microvm, TCG, {CPUS} vCPUs, {MEMORY_MIB} MiB, tap {} \
         (guest {}) in a network namespace of xtask's own",
        net.ifname, net.guest
    );
    let measurements = match group {
        "redis" => redis(&env)?,
        "prefork" => prefork(&env)?,
        other => bail!("no application benchmark `{other}`"),
    };
    let json = serde_json::to_string(&measurements)?;
    std::fs::write(out, json).with_context(|| format!("writing {}", out.display()))
}

/// What both groups' runs share.
struct Env<'a> {
    kernel: &'a Path,
    qemu: &'a Path,
    net: &'a TapNet,
    apps: &'a [BuiltApp],
    verbose: bool,
}

impl Env<'_> {
    fn addr(&self, port: u16) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(self.net.guest), port)
    }

    /// Boots Fjord on the link and starts program `name`; the VM.
    fn fjord(&self, name: &str, disk: Option<PathBuf>) -> Result<QemuRun> {
        let app = self
            .apps
            .iter()
            .find(|a| a.name == name)
            .with_context(|| format!("program {name} was not built"))?;
        let (vm, gateway, _) = crate::e2e_http::boot_programs_on(
            self.kernel,
            Some(self.qemu),
            Accel::Tcg,
            Some(self.net),
            &ProgramBoot {
                ports: &[],
                memory_mib: Some(MEMORY_MIB),
                disk,
            },
        )?;
        crate::e2e_sockets::start(gateway, name, &app.bytes)
            .map_err(|e| anyhow::anyhow!("starting {name} in Fjord: {e}"))?;
        Ok(vm)
    }

    /// Boots the Linux guest running `server` on the link.
    fn linux(&self, server: &Server) -> Result<QemuRun> {
        server::boot(
            server,
            &ServerBoot {
                qemu: self.qemu,
                smp: CPUS,
                memory_mib: MEMORY_MIB,
                net: self.net,
                echo: self.verbose,
            },
        )
    }
}

// ---------------------------------------------------------------------------------------------
// redis

fn redis(env: &Env<'_>) -> Result<Vec<Measurement>> {
    let addr = env.addr(server::REDIS_PORT);
    let mut out = Vec::new();
    let image = crate::disk::scratch_image_of("bench-redis", 1 << 30)?;
    println!("  redis: Fjord's redis program (its dump on a virtio-blk disk)");
    let mut vm = env.fjord("redis", Some(image))?;
    let fjord = redis_suite(System::Fjord, addr);
    vm.kill();
    out.extend(fjord.map_err(|e| e.context(format!("Fjord's log ends:\n{}", vm.log_tail(25))))?);
    println!("  redis: Debian's redis-server 7.0 in the Linux guest (its dump in the initramfs)");
    let mut vm = env.linux(&Server::Redis)?;
    let linux = redis_suite(System::Linux, addr);
    vm.kill();
    out.extend(
        linux
            .map_err(|e| e.context(format!("the Linux guest's log ends:\n{}", vm.log_tail(25))))?,
    );
    Ok(out)
}

/// Every Redis measurement of one system, whose server listens at `addr`.
fn redis_suite(system: System, addr: SocketAddr) -> Result<Vec<Measurement>> {
    wait_for_redis(addr)?;
    let mut out = Vec::new();
    let (mut set, mut get) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let rows = redis_benchmark(
            addr,
            &["-t", "set,get", "-r", "10000", "-d", "16"],
            REDIS_REQUESTS,
        )?;
        for row in rows {
            match row.test.as_str() {
                "SET" => set.push(row),
                "GET" => get.push(row),
                _ => {}
            }
        }
    }
    for (name, rows) in [("set", &set), ("get", &get)] {
        out.push(summary(
            system,
            "redis",
            &format!("redis_{name}_rps"),
            "req/s",
            rows.iter().map(|r| r.rps).collect(),
        ));
        out.push(summary(
            system,
            "redis",
            &format!("redis_{name}_p99"),
            "ms",
            rows.iter().map(|r| r.p99_ms).collect(),
        ));
        println!(
            "  redis {}: {} {:.0} req/s, p99 {:.2} ms (median of {ROUNDS})",
            system.name(),
            name.to_uppercase(),
            out[out.len() - 2].median,
            out[out.len() - 1].median
        );
    }
    for &(label, keys, value_len) in DATASETS {
        out.extend(bgsave_suite(system, addr, label, keys, value_len)?);
    }
    Ok(out)
}

/// Waits until the server at `addr` answers `PING`.
fn wait_for_redis(addr: SocketAddr) -> Result<()> {
    let deadline = Instant::now() + READY_LIMIT;
    loop {
        let answered = crate::e2e_redis::connect(addr)
            .and_then(|mut s| crate::e2e_redis::command(&mut s, &mut Vec::new(), "PING"));
        match answered {
            Ok(r) if r == "+PONG\r\n" => return Ok(()),
            _ if Instant::now() > deadline => bail!("no PONG from {addr}: {answered:?}"),
            _ => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// One line of `redis-benchmark --csv`.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchRow {
    /// The test (`SET`, `GET`).
    pub test: String,
    /// Requests per second.
    pub rps: f64,
    /// The 99th-percentile latency, milliseconds.
    pub p99_ms: f64,
}

/// The rows of `redis-benchmark --csv` output (Redis 7's columns: test, rps, avg, min, p50,
/// p95, p99, max).
pub fn parse_benchmark_csv(text: &str) -> Result<Vec<BenchRow>> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header = lines.next().context("redis-benchmark printed nothing")?;
    let columns: Vec<String> = header
        .split(',')
        .map(|c| c.trim_matches('"').to_owned())
        .collect();
    let at = |name: &str| {
        columns
            .iter()
            .position(|c| c == name)
            .with_context(|| format!("no column {name} in {header}"))
    };
    let (test, rps, p99) = (at("test")?, at("rps")?, at("p99_latency_ms")?);
    let mut rows = Vec::new();
    for line in lines {
        let cells: Vec<&str> = line.split(',').map(|c| c.trim_matches('"')).collect();
        let number = |i: usize| -> Result<f64> {
            cells
                .get(i)
                .and_then(|c| c.parse().ok())
                .with_context(|| format!("bad line {line}"))
        };
        rows.push(BenchRow {
            test: cells
                .get(test)
                .with_context(|| format!("bad line {line}"))?
                .to_string(),
            rps: number(rps)?,
            p99_ms: number(p99)?,
        });
    }
    Ok(rows)
}

/// Runs `redis-benchmark` against `addr` with `args`, [`REDIS_CLIENTS`] connections and
/// `requests` requests per test.
fn redis_benchmark(addr: SocketAddr, args: &[&str], requests: usize) -> Result<Vec<BenchRow>> {
    let bench = host_deps::ensure_program("redis-benchmark", "redis-tools")?;
    let out = Command::new(bench)
        .args(["-h", &addr.ip().to_string(), "-p", &addr.port().to_string()])
        .args([
            "-c",
            &REDIS_CLIENTS.to_string(),
            "-n",
            &requests.to_string(),
            "--csv",
        ])
        .args(args)
        .output()
        .context("running redis-benchmark")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "redis-benchmark {} failed ({}): {text}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    parse_benchmark_csv(&text)
}

/// The RESP commands that set `key:<n, 12 digits>` to `value_len` bytes of `x` for `n` in
/// `0..keys` (the key names `redis-benchmark -r` writes, so its load overwrites them).
pub fn dataset_commands(keys: usize, value_len: usize) -> Vec<u8> {
    let value = "x".repeat(value_len);
    let mut out = Vec::with_capacity(keys * (value_len + 48));
    for n in 0..keys {
        let _ = write!(
            out,
            "*3\r\n$3\r\nSET\r\n$16\r\nkey:{n:012}\r\n${value_len}\r\n{value}\r\n"
        );
    }
    out
}

/// Empties the server at `addr` and loads the dataset with `redis-cli --pipe`; checks `DBSIZE`.
fn load_dataset(addr: SocketAddr, keys: usize, value_len: usize) -> Result<()> {
    let mut s = crate::e2e_redis::connect(addr).map_err(anyhow::Error::msg)?;
    let mut buf = Vec::new();
    crate::e2e_redis::command(&mut s, &mut buf, "FLUSHALL").map_err(anyhow::Error::msg)?;
    let cli = host_deps::ensure_program("redis-cli", "redis-tools")?;
    let mut child = Command::new(cli)
        .args([
            "-h",
            &addr.ip().to_string(),
            "-p",
            &addr.port().to_string(),
            "--pipe",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running redis-cli --pipe")?;
    let commands = dataset_commands(keys, value_len);
    let mut stdin = child.stdin.take().context("redis-cli's stdin")?;
    let writer = std::thread::spawn(move || stdin.write_all(&commands));
    let done = child
        .wait_with_output()
        .context("waiting for redis-cli --pipe")?;
    writer
        .join()
        .map_err(|_| anyhow::anyhow!("the writer thread panicked"))?
        .context("feeding redis-cli --pipe")?;
    let text = String::from_utf8_lossy(&done.stdout);
    if !done.status.success() || !text.contains("errors: 0,") {
        bail!(
            "redis-cli --pipe: {text}{}",
            String::from_utf8_lossy(&done.stderr)
        );
    }
    let size = crate::e2e_redis::command(&mut s, &mut buf, "DBSIZE").map_err(anyhow::Error::msg)?;
    if size != format!(":{keys}\r\n") {
        bail!("after loading {keys} keys DBSIZE answered {size:?}");
    }
    Ok(())
}

/// The `field:value` lines of an `INFO` reply.
pub fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines().find_map(|l| {
        l.strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::trim)
    })
}

/// One finished background save.
#[derive(Clone, Copy, Debug)]
struct Save {
    /// `latest_fork_usec`.
    fork_us: f64,
    /// `BGSAVE` sent to `rdb_bgsave_in_progress:0` seen (polled every 5 ms).
    took: Duration,
    /// `rdb_last_cow_size`, bytes.
    cow_bytes: f64,
}

/// Starts a `BGSAVE` and waits for it to end.
fn one_save(s: &mut std::net::TcpStream, buf: &mut Vec<u8>) -> Result<Save> {
    let started = Instant::now();
    let r = crate::e2e_redis::command(s, buf, "BGSAVE").map_err(anyhow::Error::msg)?;
    if r != "+Background saving started\r\n" {
        bail!("BGSAVE answered {r:?}");
    }
    loop {
        // `latest_fork_usec` is under `# Stats`, `rdb_*` under `# Persistence`.
        let info = crate::e2e_redis::command(s, buf, "INFO").map_err(anyhow::Error::msg)?;
        if info_field(&info, "rdb_bgsave_in_progress") == Some("0") {
            let took = started.elapsed();
            if info_field(&info, "rdb_last_bgsave_status") != Some("ok") {
                bail!("a BGSAVE failed: {info}");
            }
            let number = |f: &str| -> Result<f64> {
                info_field(&info, f)
                    .and_then(|v| v.parse().ok())
                    .with_context(|| format!("no {f} in {info}"))
            };
            return Ok(Save {
                fork_us: number("latest_fork_usec")?,
                took,
                cow_bytes: number("rdb_last_cow_size")?,
            });
        }
        if started.elapsed() > Duration::from_secs(600) {
            bail!("a BGSAVE did not end within 10 minutes");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// BGSAVE on one dataset: the write load's throughput without a save and while saves run back
/// to back, and every save's fork time, duration and copied memory.
fn bgsave_suite(
    system: System,
    addr: SocketAddr,
    label: &str,
    keys: usize,
    value_len: usize,
) -> Result<Vec<Measurement>> {
    let loading = Instant::now();
    load_dataset(addr, keys, value_len)?;
    println!(
        "  redis {}: dataset {label} ({keys} keys of {value_len} bytes) loaded in {:.1} s",
        system.name(),
        loading.elapsed().as_secs_f64()
    );
    let load_args = vec![
        "-t".to_owned(),
        "set".to_owned(),
        "-r".to_owned(),
        keys.to_string(),
        "-d".to_owned(),
        value_len.to_string(),
    ];
    let (mut idle, mut saving, mut saves) = (Vec::new(), Vec::new(), Vec::new());
    let (mut covered, mut loaded) = (Duration::ZERO, Duration::ZERO);
    let mut s = crate::e2e_redis::connect(addr).map_err(anyhow::Error::msg)?;
    let mut buf = Vec::new();
    // Saves with no load: the snapshot's own time, and what the fork adds by itself.
    let mut quiet = Vec::new();
    for _ in 0..ROUNDS {
        quiet.push(one_save(&mut s, &mut buf)?);
    }
    for _ in 0..ROUNDS {
        let args: Vec<&str> = load_args.iter().map(String::as_str).collect();
        idle.push(rps_of(&redis_benchmark(addr, &args, SAVE_LOAD_REQUESTS)?)?);
        // The same load, with BGSAVEs back to back until it ends.
        let thread_args = load_args.clone();
        let began = Instant::now();
        let load = std::thread::spawn(move || {
            let args: Vec<&str> = thread_args.iter().map(String::as_str).collect();
            redis_benchmark(addr, &args, SAVE_LOAD_REQUESTS)
        });
        // Let every connection open before the first fork.
        std::thread::sleep(Duration::from_millis(300));
        let mut round_saves = 0;
        while !load.is_finished() {
            let save = one_save(&mut s, &mut buf)?;
            if !load.is_finished() {
                covered += save.took;
                saves.push(save);
                round_saves += 1;
            }
        }
        loaded += began.elapsed();
        let rows = load
            .join()
            .map_err(|_| anyhow::anyhow!("the load's thread panicked"))??;
        if round_saves == 0 {
            bail!("no BGSAVE of {label} ended within a write load; raise SAVE_LOAD_REQUESTS");
        }
        saving.push(rps_of(&rows)?);
    }
    let group = "redis";
    let out = vec![
        summary(
            system,
            group,
            &format!("redis_set_rps_{label}"),
            "req/s",
            idle,
        ),
        summary(
            system,
            group,
            &format!("redis_set_rps_saving_{label}"),
            "req/s",
            saving,
        ),
        summary(
            system,
            group,
            &format!("redis_bgsave_fork_us_{label}"),
            "us",
            saves.iter().map(|s| s.fork_us).collect(),
        ),
        summary(
            system,
            group,
            &format!("redis_bgsave_ms_{label}"),
            "ms",
            saves.iter().map(|s| s.took.as_secs_f64() * 1e3).collect(),
        ),
        summary(
            system,
            group,
            &format!("redis_bgsave_cow_kib_{label}"),
            "KiB",
            saves.iter().map(|s| s.cow_bytes / 1024.0).collect(),
        ),
        summary(
            system,
            group,
            &format!("redis_bgsave_quiet_ms_{label}"),
            "ms",
            quiet.iter().map(|s| s.took.as_secs_f64() * 1e3).collect(),
        ),
        summary(
            system,
            group,
            &format!("redis_bgsave_quiet_cow_kib_{label}"),
            "KiB",
            quiet.iter().map(|s| s.cow_bytes / 1024.0).collect(),
        ),
    ];
    println!(
        "  redis {} {label}: SET {:.0} req/s, {:.0} while saving ({} saves covering {:.0} % of \
         the loads); fork {:.0} us, save {:.0} ms, copied {:.0} KiB (medians); with no load: \
         save {:.0} ms, copied {:.0} KiB",
        system.name(),
        out[0].median,
        out[1].median,
        saves.len(),
        100.0 * covered.as_secs_f64() / loaded.as_secs_f64().max(1e-9),
        out[2].median,
        out[3].median,
        out[4].median,
        out[5].median,
        out[6].median
    );
    Ok(out)
}

/// The SET row's requests per second.
fn rps_of(rows: &[BenchRow]) -> Result<f64> {
    rows.iter()
        .find(|r| r.test == "SET")
        .map(|r| r.rps)
        .context("redis-benchmark printed no SET line")
}

// ---------------------------------------------------------------------------------------------
// prefork

fn prefork(env: &Env<'_>) -> Result<Vec<Measurement>> {
    let addr = env.addr(server::HTTP_PORT);
    let mut out = Vec::new();
    for &(workers, program) in PREFORK {
        println!("  prefork: Fjord's {program} ({workers} worker(s))");
        let mut vm = env.fjord(program, None)?;
        let measured = (|| -> Result<(Vec<Measurement>, Vec<u8>)> {
            let page = wait_for_http(addr)?;
            Ok((http_suite(System::Fjord, addr, workers)?, page))
        })();
        vm.kill();
        let (fjord, page) =
            measured.map_err(|e| e.context(format!("Fjord's log ends:\n{}", vm.log_tail(25))))?;
        out.extend(fjord);
        println!("  prefork: nginx with {workers} worker(s) in the Linux guest, the same page");
        let mut vm = env.linux(&Server::Nginx { workers, page })?;
        let linux = wait_for_http(addr).and_then(|_| http_suite(System::Linux, addr, workers));
        vm.kill();
        out.extend(
            linux.map_err(|e| {
                e.context(format!("the Linux guest's log ends:\n{}", vm.log_tail(25)))
            })?,
        );
    }
    Ok(out)
}

/// Waits until `GET /` at `addr` answers 200; its body.
fn wait_for_http(addr: SocketAddr) -> Result<Vec<u8>> {
    let deadline = Instant::now() + READY_LIMIT;
    loop {
        match crate::http_client::one(addr, "GET", "/", b"") {
            Ok(r) if r.status == 200 => return Ok(r.body),
            r if Instant::now() > deadline => bail!("no 200 for GET / from {addr}: {r:?}"),
            _ => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// wrk's 64 connections on `/` and `/worker`, [`ROUNDS`] rounds each.
fn http_suite(system: System, addr: SocketAddr, workers: u32) -> Result<Vec<Measurement>> {
    let mut out = Vec::new();
    for (path, name) in [("/", "static"), ("/worker", "worker")] {
        let (mut rps, mut p99) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            let r = crate::wrk::run_closed(&ClosedLoad {
                addr,
                method: "GET".to_owned(),
                path: path.to_owned(),
                body: Vec::new(),
                connections: HTTP_CONNECTIONS,
                duration: HTTP_DURATION,
            })?;
            if r.errors > 0 || r.refused > 0 {
                println!(
                    "  prefork {} {path}: {} socket errors, {} answers other than 2xx",
                    system.name(),
                    r.errors,
                    r.refused
                );
            }
            rps.push(r.rps);
            p99.push(r.p99_ns as f64 / 1e6);
        }
        let group = "prefork";
        out.push(summary(
            system,
            group,
            &format!("prefork_{name}_rps_w{workers}"),
            "req/s",
            rps,
        ));
        out.push(summary(
            system,
            group,
            &format!("prefork_{name}_p99_w{workers}"),
            "ms",
            p99,
        ));
        println!(
            "  prefork {} w{workers} {path}: {:.0} req/s, p99 {:.1} ms (median of {ROUNDS})",
            system.name(),
            out[out.len() - 2].median,
            out[out.len() - 1].median
        );
    }
    Ok(out)
}

/// A measurement of `values`: the median with the lowest and highest.
fn summary(system: System, group: &str, metric: &str, unit: &str, values: Vec<f64>) -> Measurement {
    let runs = values.len() as u64;
    let (median, min, max) = crate::bench::median_min_max(values);
    Measurement {
        group: group.to_owned(),
        metric: metric.to_owned(),
        system,
        unit: unit.to_owned(),
        median,
        min,
        max,
        runs,
        wall_ns: None,
        p99: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_benchmark_csv_rows_give_throughput_and_p99() {
        let text = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\
                    \"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n\
                    \"SET\",\"11370.10\",\"1.384\",\"0.408\",\"1.271\",\"2.335\",\"3.407\",\"8.575\"\n\
                    \"GET\",\"9033.42\",\"1.745\",\"0.424\",\"1.519\",\"3.375\",\"6.055\",\"12.887\"\n";
        let rows = parse_benchmark_csv(text).unwrap();
        assert_eq!(
            rows,
            [
                BenchRow {
                    test: "SET".into(),
                    rps: 11370.10,
                    p99_ms: 3.407
                },
                BenchRow {
                    test: "GET".into(),
                    rps: 9033.42,
                    p99_ms: 6.055
                },
            ]
        );
        assert!(parse_benchmark_csv("").is_err());
        assert!(parse_benchmark_csv("\"test\",\"rps\"\n").is_err());
    }

    #[test]
    fn the_dataset_is_the_keys_redis_benchmark_overwrites() {
        let text = String::from_utf8(dataset_commands(2, 3)).unwrap();
        assert_eq!(
            text,
            "*3\r\n$3\r\nSET\r\n$16\r\nkey:000000000000\r\n$3\r\nxxx\r\n\
             *3\r\n$3\r\nSET\r\n$16\r\nkey:000000000001\r\n$3\r\nxxx\r\n"
        );
    }

    #[test]
    fn info_fields_are_found_by_exact_name() {
        let info = "$80\r\n# Persistence\r\nrdb_bgsave_in_progress:0\r\nrdb_last_cow_size:4096\r\n";
        assert_eq!(info_field(info, "rdb_bgsave_in_progress"), Some("0"));
        assert_eq!(info_field(info, "rdb_last_cow_size"), Some("4096"));
        assert_eq!(info_field(info, "rdb_last_cow"), None);
    }

    #[test]
    fn a_summary_is_the_median_with_the_extremes() {
        let m = summary(System::Linux, "redis", "x", "req/s", vec![3.0, 1.0, 2.0]);
        assert_eq!((m.median, m.min, m.max, m.runs), (2.0, 1.0, 3.0, 3));
        assert_eq!(summary(System::Fjord, "redis", "x", "ms", vec![]).runs, 0);
    }
}
