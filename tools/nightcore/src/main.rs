//! `fjord-nightcore`: measures Fjord's workload operations on a NightCore-like runtime (see the
//! library's documentation) and prints `LBENCH` lines for the Linux guest's harness.

use std::process::ExitCode;

use fjord_nightcore::bench::{self, Target};
use fjord_nightcore::config::{self, Config, Group, OpParams};
use fjord_nightcore::engine::{Engine, EngineError};
use fjord_nightcore::restore::{self, RestoreParams};
use fjord_nightcore::store::Store;
use fjord_nightcore::worker::Isolation;
use fjord_nightcore::{apps, sys};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("LERROR fjord-nightcore: {e}");
            ExitCode::FAILURE
        }
    }
}

/// TSC ticks per nanosecond of CLOCK_MONOTONIC, measured over a 20 ms sleep.
fn ticks_per_ns() -> f64 {
    let (t0, m0) = (sys::rdtsc(), sys::monotonic_ns());
    sys::sleep_ns(20_000_000);
    let (t1, m1) = (sys::rdtsc(), sys::monotonic_ns());
    (t1 - t0) as f64 / (m1 - m0).max(1) as f64
}

/// The current clock source, the clock-event device and whether high-resolution timers are
/// active (`/proc/timer_list`'s `.hres_active`).
fn timer_state() -> (String, String, bool) {
    let read = |path: &str| {
        std::fs::read_to_string(path).map_or_else(|_| "?".to_owned(), |s| s.trim().to_owned())
    };
    let hres = std::fs::read_to_string("/proc/timer_list").is_ok_and(|t| {
        t.lines()
            .find(|l| l.contains(".hres_active"))
            .is_some_and(|l| l.trim_end().ends_with('1'))
    });
    (
        read("/sys/devices/system/clocksource/clocksource0/current_clocksource"),
        read("/sys/devices/system/clockevents/clockevent0/current_device"),
        hres,
    )
}

/// Waits (sleeping, at most [`HRES_WAIT_NS`] of guest time) until Linux runs high-resolution
/// timers, and reports the timer state in an `LINFO` line of `group`. Early after boot the guest kernel still uses the
/// `tsc-early` clock source, which is not valid for high-resolution timers: until it switches
/// to `tsc`, poll timeouts round up to the next scheduler tick (4 ms at HZ=250).
fn wait_for_precise_timers(group: &str) {
    let started = sys::monotonic_ns();
    loop {
        let (source, device, hres) = timer_state();
        let waited = sys::monotonic_ns() - started;
        if hres || waited >= HRES_WAIT_NS {
            println!(
                "LINFO {group}: clocksource {source}, clockevent {device}, high-resolution timers {} (waited {} ms)",
                if hres {
                    "active"
                } else {
                    "INACTIVE: poll timeouts round up to the tick"
                },
                waited / 1_000_000
            );
            return;
        }
        sys::sleep_ns(10_000_000);
    }
}

/// The longest [`wait_for_precise_timers`] waits (guest nanoseconds).
const HRES_WAIT_NS: u64 = 30_000_000_000;

/// Measures every target of the parameters file; `Ok(false)` if one failed.
fn run(args: &[String]) -> Result<bool, String> {
    let config = config::parse_args(args)?;
    let text = std::fs::read_to_string(&config.params)
        .map_err(|e| format!("reading {}: {e}", config.params))?;
    let (group, params) = match config.group {
        Group::Workloads => ("workloads", Params::Workloads(config::parse_params(&text)?)),
        Group::Restore => ("restore", Params::Restore(restore::parse_params(&text)?)),
    };
    sys::precise_timers().map_err(|e| format!("timer slack: {e}"))?;
    wait_for_precise_timers(group);
    let ticks_per_ns = ticks_per_ns();
    println!(
        "LINFO {group}: nightcore-like runtime, {} worker process(es) per function{}, TSC {ticks_per_ns:.4} ticks per ns",
        config.workers,
        match config.isolation {
            Isolation::Warm => "",
            Isolation::Fork => ", each invocation in a child forked from its worker",
        }
    );
    let store = Store::new_shared().map_err(|e| format!("shared store: {e}"))?;
    match params {
        Params::Workloads(params) => run_workloads(&config, &params, store, ticks_per_ns),
        Params::Restore(params) => run_restore(&config, &params, store, ticks_per_ns),
    }
}

/// A parsed parameters file.
enum Params {
    Workloads(Vec<OpParams>),
    Restore(Vec<RestoreParams>),
}

/// What the `LINFO` lines call the system measured.
fn system(isolation: Isolation) -> String {
    match isolation {
        Isolation::Warm => "linux".to_owned(),
        Isolation::Fork => "linux fork".to_owned(),
    }
}

/// Measures every operation of the `workloads` parameters; `Ok(false)` if one failed.
fn run_workloads(
    config: &Config,
    params: &[OpParams],
    store: Store,
    ticks_per_ns: f64,
) -> Result<bool, String> {
    let mut ok = true;
    let mut current: Option<(&str, Engine)> = None;
    for p in params {
        if current.as_ref().is_none_or(|(w, _)| *w != p.op.workload) {
            // Dropping the previous workload's engine ends its workers.
            drop(current.take());
            let table = apps::functions(p.op.workload).ok_or("no such workload")?;
            let engine =
                Engine::spawn(table, config.workers, config.isolation, store).map_err(|e| e.0)?;
            current = Some((p.op.workload, engine));
        }
        let Some((_, engine)) = current.as_mut() else {
            unreachable!("an engine was just spawned");
        };
        // Every operation starts from an empty store, as each system's run of it on Fjord.
        store.clear();
        if let Err(e) = measure(engine, p, config, ticks_per_ns) {
            eprintln!("LERROR workloads {}_{}: {}", p.op.workload, p.op.name, e.0);
            ok = false;
            // The engine's state is unknown: start the next operation with fresh workers.
            current = None;
        }
    }
    Ok(ok)
}

/// Checks one operation, then measures its service time and (unless `--check`) its
/// throughput at the SLO.
fn measure(
    engine: &mut Engine,
    p: &OpParams,
    config: &Config,
    ticks_per_ns: f64,
) -> Result<(), EngineError> {
    let entry = engine
        .function(p.op.entry)
        .ok_or_else(|| EngineError(format!("no function {}", p.op.entry)))?;
    let label = format!("{}_{}", p.op.workload, p.op.name);
    let system = system(config.isolation);
    let t = Target {
        group: "workloads",
        label: &label,
        system: &system,
        entry,
        request: p.op.request,
        expect: p.op.expect,
        exact: false,
        basis: p.ni_service,
        slo: p.slo,
        ticks_per_ns,
    };
    bench::check(engine, &t)?;
    let lat = bench::min_load(engine, &t)?;
    bench::report("workloads", &format!("{label}_service"), "insns", &lat);
    if config.check_only {
        return Ok(());
    }
    let best = bench::throughput_at_slo(engine, &t)?;
    bench::report(
        "workloads",
        &format!("{label}_throughput_at_slo"),
        "req_per_s",
        &[best],
    );
    println!(
        "LINFO workloads: {label}: service {system} {} insns (Jord_NI {}), at p99 <= {}: {system} {best} req/s",
        bench::median(&lat).unwrap_or(0),
        p.ni_service,
        p.slo
    );
    Ok(())
}

/// Measures every target of the `restore` parameters, each with its own engine and workers
/// and an empty store; `Ok(false)` if one failed.
fn run_restore(
    config: &Config,
    params: &[RestoreParams],
    store: Store,
    ticks_per_ns: f64,
) -> Result<bool, String> {
    // The warmed parents' state: every worker forked from here inherits it.
    apps::init_restore().map_err(|e| format!("init of hello and dirty: {e}"))?;
    let mut ok = true;
    for p in params {
        store.clear();
        let result = Engine::spawn(p.target.table, config.workers, config.isolation, store)
            .and_then(|mut engine| measure_restore(&mut engine, p, config, ticks_per_ns));
        if let Err(e) = result {
            eprintln!("LERROR restore {}: {}", p.target.label, e.0);
            ok = false;
        }
    }
    Ok(ok)
}

/// Checks one target (for `dirty_<n>`, also that a request after it finds none of its pages
/// written under `fork`), then measures its minimal-load latency and (unless `--check`) its
/// throughput at the SLO: 0 without a sweep when even the fastest request one at a time took
/// longer than the SLO.
fn measure_restore(
    engine: &mut Engine,
    p: &RestoreParams,
    config: &Config,
    ticks_per_ns: f64,
) -> Result<(), EngineError> {
    let target = &p.target;
    let label = target.label.as_str();
    let entry = engine
        .function(target.entry)
        .ok_or_else(|| EngineError(format!("no function {}", target.entry)))?;
    let mode = config.isolation.name();
    let system = system(config.isolation);
    let t = Target {
        group: "restore",
        label,
        system: &system,
        entry,
        request: &target.request,
        expect: &target.expect,
        exact: target.exact,
        basis: p.none_latency,
        slo: p.slo,
        ticks_per_ns,
    };
    bench::check(engine, &t)?;
    if let Some(pages) = target.dirty_pages {
        let body = bench::call(engine, 0, entry, format!("check {pages}").as_bytes())?;
        let found: usize = std::str::from_utf8(&body)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| {
                EngineError(format!(
                    "check answered {:?}",
                    String::from_utf8_lossy(&body)
                ))
            })?;
        println!(
            "LINFO restore: {label} {system}: after {pages}-page requests, the next request found {found} of the {pages} pages written"
        );
        if config.isolation == Isolation::Fork && found != 0 {
            return Err(EngineError(format!(
                "a request saw {found} pages an earlier request wrote"
            )));
        }
    }
    let lat = bench::min_load(engine, &t)?;
    bench::report("restore", &format!("{label}_latency_{mode}"), "insns", &lat);
    if config.check_only {
        return Ok(());
    }
    let fastest = lat.first().copied().unwrap_or(0);
    let best = if fastest > p.slo {
        // Load only adds to a request's latency: no run of the sweep could keep its p99
        // within the SLO, and the sweep (up to 17 runs of 1,600 requests) would find 0.
        println!(
            "LINFO restore: {label} {system}: no sweep: the fastest of {} requests one at a time took {fastest} > SLO {}, so the throughput at the SLO is 0",
            lat.len(),
            p.slo
        );
        0
    } else {
        bench::throughput_at_slo(engine, &t)?
    };
    bench::report(
        "restore",
        &format!("{label}_throughput_at_slo_{mode}"),
        "req_per_s",
        &[best],
    );
    println!(
        "LINFO restore: {label}: latency {system} {} insns (Fjord without isolation {}), at p99 <= {}: {system} {best} req/s",
        bench::median(&lat).unwrap_or(0),
        p.none_latency,
        p.slo
    );
    Ok(())
}
