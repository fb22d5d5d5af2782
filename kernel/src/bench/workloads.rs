//! The `workloads` benchmark group: the paper's applications (Hotel, Social, Media, Online
//! Boutique), each operation a chain of nested function calls, under the in-guest open-loop
//! generator, for three systems:
//!
//! - Jord (`fjord`): full isolation, ArgBufs moved by `pmove`;
//! - Jord_NI (`fjord_ni`): isolation operations bypassed, ArgBufs moved;
//! - the NightCore-like baseline (`fjord_baseline`): full isolation, and every hop copies the
//!   request and the response through a kernel channel.
//!
//! Those three reuse warm instances that Groundhog restores after each request (the manifests'
//! default). Jord then runs each workload operation again with its functions in the two other
//! instance modes, on the same loads and SLO: `fresh` (a new PD and `init` per request) and
//! `fork` (each request in a child forked from a zygote that ran `init`, μFork's
//! fork-per-request FaaS): `<op>_service_<mode>` and `<op>_throughput_at_slo_<mode>`.
//!
//! For each operation: the minimal-load service time (requests one at a time, latency from the
//! orchestrator's receipt to completion), then open-loop runs with Poisson arrivals whose offered
//! load is bisected (as a fraction of Jord_NI's capacity, over the same range for every system)
//! for the highest achieved throughput whose p99 stays within the SLO: 10x the minimal-load
//! service time under Jord_NI, as in the paper. Every run of every system uses the same arrival
//! sequence, scaled to its load ([`open_loop::bisect_common`]), so the systems differ by what
//! they do with the same arrivals, not by the draw.
//! One executor (CPU 1) serves behind the orchestrator (CPU 0); see `bench_faas` for why.

use crate::arch::{apic, smp};
use crate::bench::faas::{run_open_loop, system_name, wait_halting};
use crate::bench::{Sys, report_derived, report_sys, report_unit};
use crate::jord::state;
use crate::kprintln;
use crate::orchestrator::{self, Ticket};
use crate::runtime::{self, LoadedFunction, task};
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use fjord_faas::jbsq::RequestClass;
use fjord_faas::metrics::exact_quantile;
use fjord_faas::open_loop::{self, MIN_LOAD_REQUESTS, Point, REQUESTS, SLO_FACTOR};
use fjord_groundhog::GroundhogMode;
use fjord_pd::PdIsolation;

type R<T> = Result<T, String>;

/// One benchmarked operation.
struct Op {
    /// Metric prefix: `<workload>_<operation>`.
    label: String,
    entry: &'static str,
    request: &'static [u8],
    expect: &'static [u8],
    /// The prefix of its functions' names, when they are run in the other instance modes.
    functions: Option<&'static str>,
}

/// The instance modes Jord runs the workload operations in besides warm reuse with restore.
const OTHER_MODES: [GroundhogMode; 2] = [GroundhogMode::Fresh, GroundhogMode::Fork];

fn operations() -> Vec<Op> {
    let mut ops: Vec<Op> = fjord_faas::workloads::OPERATIONS
        .iter()
        .map(|o| Op {
            label: format!("{}_{}", o.workload, o.name),
            entry: o.entry,
            request: o.request,
            expect: o.expect,
            functions: Some(o.workload),
        })
        .collect();
    // A plain chain of three functions (A -> B -> C), for reference.
    ops.push(Op {
        label: String::from("chain_relay3"),
        entry: "relay",
        request: b"2 abc",
        expect: b"sum=294;",
        functions: None,
    });
    ops
}

/// Configures Jord and the hop mode for `sys`.
fn set_system(sys: Sys) -> R<()> {
    let (isolation, hops) = match sys {
        Sys::Fjord => (PdIsolation::Full, task::HopMode::Move),
        Sys::FjordNi => (PdIsolation::None, task::HopMode::Move),
        Sys::Baseline => (PdIsolation::Full, task::HopMode::Copy),
    };
    state::reset(isolation).map_err(|e| format!("reset: {e:?}"))?;
    task::set_hop_mode(hops);
    // The workloads keep state in the store (a hotel fills up and then answers
    // `unavailable`, which is less work): every system starts an operation from an empty
    // store, as the Linux baseline does, so that all see the same requests do the same work.
    crate::kv::clear();
    Ok(())
}

fn submit(
    f: &Arc<LoadedFunction>,
    request: &'static [u8],
) -> Result<Ticket, orchestrator::SubmitError> {
    orchestrator::submit_task(RequestClass::External, task::root_work(f.clone(), request))
}

/// Runs `op` once and checks its response.
fn check(f: &Arc<LoadedFunction>, op: &Op) -> R<()> {
    let t = submit(f, op.request).map_err(|_| "queue full")?;
    let done = wait_halting(t);
    let body = done.result.map_err(|e| format!("{e}"))?;
    if body.windows(op.expect.len()).any(|w| w == op.expect) {
        Ok(())
    } else {
        Err(format!(
            "response {:?} lacks {:?}",
            String::from_utf8_lossy(&body),
            String::from_utf8_lossy(op.expect)
        ))
    }
}

/// Minimal-load latencies: one request at a time.
fn min_load(f: &Arc<LoadedFunction>, op: &Op) -> R<Vec<u64>> {
    let mut v = Vec::with_capacity(MIN_LOAD_REQUESTS);
    for _ in 0..MIN_LOAD_REQUESTS {
        let t = submit(f, op.request).map_err(|_| "queue full")?;
        let d = wait_halting(t);
        d.result.map_err(|e| format!("{e}"))?;
        v.push(d.finished - d.arrived);
    }
    v.sort_unstable();
    Ok(v)
}

/// The highest achieved throughput (req/s) whose p99 stays within `slo`, found by
/// [`open_loop::bisect_common`]: offered loads between [`open_loop::LOW_LOAD`] and
/// [`open_loop::HIGH_LOAD`] percent of the capacity `hz / service` (Jord_NI's, for every
/// system), in [`open_loop::BISECTIONS`] open-loop runs.
fn sweep(f: &Arc<LoadedFunction>, op: &Op, sys: Sys, mode: &str, service: u64, slo: u64) -> R<u64> {
    let hz = crate::arch::time::ticks_per_second() as f64;
    let capacity = hz / service as f64;
    let run_at = |pct: f64, seed: u64| -> R<Point> {
        // Every run starts with the instances of the last one back in their pools.
        crate::module::warm::settle();
        let rate = capacity * pct / 100.0;
        let submitter = || submit(f, op.request);
        let run = run_open_loop(hz / rate, REQUESTS, seed, &submitter)?;
        let (p50, p99, p999) = run.quantiles();
        let achieved = run.achieved(hz);
        let within = p99 <= slo;
        kprintln!(
            "fjord: workloads: {} {}{mode}: offered {:.0} req/s ({pct:.1}%): achieved {:.0}, p50 {p50} p99 {p99} p99.9 {p999}{}{}",
            op.label,
            system_name(sys),
            rate,
            achieved,
            if within { "" } else { "  (over SLO)" },
            open_loop::warm_up_note(seed)
        );
        Ok(Point { within, achieved })
    };
    let best = open_loop::bisect_common(run_at)?;
    Ok(best as u64)
}

const SYSTEMS: [Sys; 3] = [Sys::FjordNi, Sys::Fjord, Sys::Baseline];

/// Runs every operation on every system.
pub fn run_group() -> Result<(), &'static str> {
    if smp::cpu_count() < 2 {
        kprintln!("fjord: bench workloads: needs 2 CPUs (orchestrator + executor); skipped");
        return Ok(());
    }
    orchestrator::init(2);
    let mut failed = false;
    for op in operations() {
        if let Err(e) = run_op(&op) {
            kprintln!("fjord: bench error: workloads: {}: {e}", op.label);
            failed = true;
        }
    }
    set_system(Sys::Fjord).map_err(|_| "reset")?;
    apic::start_periodic_timer(crate::arch::time::TIMER_HZ);
    if failed {
        Err("an operation failed")
    } else {
        Ok(())
    }
}

/// Jord's service time and throughput at `slo` for `op` with its functions in `mode`, offered
/// the same loads as the warm systems (fractions of the capacity `ni_service` gives).
fn run_in_mode(
    op: &Op,
    functions: &str,
    mode: GroundhogMode,
    ni_service: u64,
    slo: u64,
) -> R<(u64, u64)> {
    set_system(Sys::Fjord)?;
    crate::bench::redeploy_in_mode(functions, mode)?;
    let f = runtime::lookup(op.entry).ok_or_else(|| format!("{} is not deployed", op.entry))?;
    for _ in 0..3 {
        check(&f, op)?;
    }
    let mut lat = min_load(&f, op)?;
    let service = exact_quantile(&lat, 500).ok_or("no samples")?;
    report_unit(
        "workloads",
        &format!("{}_service_{mode}", op.label),
        Sys::Fjord,
        "insns",
        &mut lat,
    );
    let at_slo = sweep(&f, op, Sys::Fjord, &format!(" {mode}"), ni_service, slo)?;
    report_unit(
        "workloads",
        &format!("{}_throughput_at_slo_{mode}", op.label),
        Sys::Fjord,
        "req_per_s",
        &mut [at_slo],
    );
    Ok((service, at_slo))
}

fn run_op(op: &Op) -> R<()> {
    let mut service = [0u64; 3];
    // Per step: orchestrator-to-idle-executor hand-off ticks; per request: steps dispatched.
    let mut handoff = [0u64; 3];
    let mut steps = [0u64; 3];
    // Per resumed caller an executor queued for itself: its hand-off; per request: how many.
    let mut local_handoff = [0u64; 3];
    let mut local_steps = [0u64; 3];
    let mut slo = 0;
    let mut throughput = [0u64; 3];
    for (i, sys) in SYSTEMS.into_iter().enumerate() {
        set_system(sys)?;
        let f = runtime::lookup(op.entry).ok_or_else(|| format!("{} is not deployed", op.entry))?;
        for _ in 0..3 {
            check(&f, op)?;
        }
        let before = orchestrator::stats();
        let mut lat = min_load(&f, op)?;
        let after = orchestrator::stats();
        service[i] = exact_quantile(&lat, 500).ok_or("no samples")?;
        let n = MIN_LOAD_REQUESTS as u64;
        steps[i] = (after.dispatched - before.dispatched) / n;
        // Dispatch cost per step: the hand-off to an idle executor (a step that waits behind
        // its request's other steps on the one executor is queueing, not dispatch).
        let idle = (after.idle_handoffs - before.idle_handoffs).max(1);
        handoff[i] = (after.idle_handoff_ticks - before.idle_handoff_ticks) / idle;
        let local = after.local_resumes - before.local_resumes;
        local_steps[i] = local / n;
        local_handoff[i] = (after.local_handoff_ticks - before.local_handoff_ticks) / local.max(1);
        report_sys("workloads", &format!("{}_service", op.label), sys, &mut lat);
        if sys == Sys::FjordNi {
            slo = SLO_FACTOR * service[i];
        }
        // Every system is offered the same loads: fractions of Jord_NI's capacity.
        throughput[i] = sweep(&f, op, sys, "", service[0], slo)?;
        report_unit(
            "workloads",
            &format!("{}_throughput_at_slo", op.label),
            sys,
            "req_per_s",
            &mut [throughput[i]],
        );
    }
    let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    if let Some(functions) = op.functions {
        for mode in OTHER_MODES {
            let (service_in, at_slo) = run_in_mode(op, functions, mode, service[0], slo)?;
            kprintln!(
                "fjord: workloads: {} {mode}: service {service_in} insns ({:.2}x warm), at p99 <= {slo}: {at_slo} req/s ({:.2}x warm)",
                op.label,
                ratio(service_in, service[1]),
                ratio(at_slo, throughput[1]),
            );
        }
        crate::bench::redeploy_in_mode(functions, GroundhogMode::Restore)?;
    }
    // Dispatch plus isolation, as a share of Jord's service time: the hand-off of every step
    // (dispatch; a caller resumed on the executor that ran its callee has its own, shorter
    // hand-off) and what full isolation adds over Jord_NI.
    let isolation = service[1].saturating_sub(service[0]);
    let dispatch = handoff[1] * steps[1] + local_handoff[1] * local_steps[1];
    let share = 100.0 * (dispatch + isolation) as f64 / service[1].max(1) as f64;
    report_derived(
        "workloads",
        &format!("{}_dispatch_isolation_share", op.label),
        Sys::Fjord,
        "percent",
        share,
    );
    kprintln!(
        "fjord: workloads: {}: dispatch {} steps x {} + {} local resumptions x {} + isolation {} insns = {share:.2}% of Jord's service time",
        op.label,
        steps[1],
        handoff[1],
        local_steps[1],
        local_handoff[1],
        isolation,
    );
    kprintln!(
        "fjord: workloads: {}: service NI {} / Jord {} / baseline {} insns; at p99 <= {slo}: Jord {} req/s = {:.2}x NI, {:.2}x baseline",
        op.label,
        service[0],
        service[1],
        service[2],
        throughput[1],
        ratio(throughput[1], throughput[0]),
        ratio(throughput[1], throughput[2]),
    );
    Ok(())
}
