//! The `faas` benchmark group: the in-guest open-loop load generator driving the orchestrator.
//!
//! Requests arrive with Poisson inter-arrival times (as wrk2 generates them) directly into the
//! orchestrator's central queue, and latency runs from the orchestrator's receipt of a request
//! to its completion, as in the Jord paper; p50/p99/p99.9 come from an HDR histogram
//! (`fjord_faas::hdr`), as in wrk2. Each request is a whole function invocation in its
//! own PD (create, ArgBuf in, call, ArgBuf out, destroy) of a function doing about 20,000
//! instructions of work. Under `-icount shift=0,sleep=off` guest time is virtual and exact.
//!
//! icount serialises the vCPUs on one virtual clock, so executors cannot add capacity in
//! virtual time: the sweep uses one executor (CPU 1) behind the orchestrator (CPU 0), and the
//! orchestrator halts between arrivals so that it does not steal virtual time.

use crate::arch::{cpu, smp};
use crate::bench::{Sys, report_sys};
use crate::jord::{self, exec, state};
use crate::kprintln;
use crate::ktests::user_programs::Program;
use crate::orchestrator::{self, Ticket, Work};
use crate::runtime::InvokeFailure;
use alloc::boxed::Box;
use alloc::collections::BTreeSet;
use alloc::vec::Vec;
use fjord_faas::hdr::HdrHistogram;
use fjord_faas::jbsq::RequestClass;
use fjord_faas::metrics::exact_quantile;
use fjord_faas::open_loop::{HDR_MAX, LoadRun, Rng, SLO_FACTOR};
use fjord_kernel::layout::PAGE_SIZE;
use fjord_pd::{MapFlags, PdId, PdIsolation, Perm};

type R<T> = Result<T, &'static str>;

/// Work units of the benchmark function (about 4 instructions each).
const WORK: u64 = 5000;
/// Requests per load point.
const REQUESTS: usize = 1000;

/// One invocation of the work function in a fresh PD, with its ArgBuf moved in and out.
fn invocation() -> Work {
    Box::new(|| {
        let entry = crate::ktests::user_programs::entry(Program::Work);
        let pd = jord::with(|j| j.cget(PdId::KERNEL)).map_err(InvokeFailure::Refused)?;
        let buf = jord::with(|j| j.mmap(PdId::KERNEL, PAGE_SIZE, Perm::RW, MapFlags::default()))
            .map_err(InvokeFailure::Refused)?;
        let moved = jord::with(|j| j.pmove(PdId::KERNEL, buf, pd, Perm::RW));
        let r = match moved {
            Ok(p) => {
                p.finish();
                let deadline = crate::arch::time::deadline_after_ms(1000);
                exec::call(pd, entry, [WORK, buf, 0, 0], Some(deadline))
                    .map_err(crate::runtime::InvokeFailure::from)
            }
            Err(e) => Err(InvokeFailure::Refused(e)),
        };
        if let Ok(p) = jord::with(|j| j.pmove(pd, buf, PdId::KERNEL, Perm::RW)) {
            p.finish();
        }
        if let Ok(p) = jord::with(|j| j.munmap(PdId::KERNEL, buf, PAGE_SIZE)) {
            p.finish();
        }
        if let Ok(p) = jord::with(|j| j.cput(PdId::KERNEL, pd)) {
            p.finish();
        }
        r.map(|v| v.to_le_bytes().to_vec())
    })
}

/// Waits for `ticket` with the orchestrator core halted between events (completions and
/// nested submissions wake it with an IPI), so that it spends no virtual time spinning: under
/// icount every vCPU's instructions advance the one clock the latency is read from.
pub fn wait_halting(ticket: Ticket) -> orchestrator::Done {
    let mut done = None;
    // Look for the result only after a completion (any request's) since the last look.
    let mut seen = None;
    let mut look = |done: &mut Option<orchestrator::Done>| {
        let now = orchestrator::completions();
        if done.is_none() && seen != Some(now) {
            seen = Some(now);
            *done = orchestrator::take(ticket);
        }
        done.is_some()
    };
    loop {
        orchestrator::idle_until(crate::arch::time::deadline_after_ms(1), &mut || {
            look(&mut done)
        });
        if look(&mut done) {
            return done.expect("look found it");
        }
    }
}

/// Submits one request of the load and returns its ticket.
pub type Submitter<'a> = &'a dyn Fn() -> Result<Ticket, orchestrator::SubmitError>;

fn submit_invocation() -> Result<Ticket, orchestrator::SubmitError> {
    orchestrator::submit(RequestClass::External, invocation())
}

/// Latencies (TSC ticks, sorted) and the span of one open-loop run at `mean_gap` ticks between
/// arrivals of the work-function request.
fn run_load(mean_gap: f64, requests: usize, seed: u64) -> R<LoadRun> {
    run_open_loop(mean_gap, requests, seed, &submit_invocation)
}

/// Latencies (TSC ticks, sorted) and the span of one open-loop run at `mean_gap` ticks between
/// Poisson arrivals, each request submitted by `submit`.
pub fn run_open_loop(
    mean_gap: f64,
    requests: usize,
    seed: u64,
    submit: Submitter<'_>,
) -> R<LoadRun> {
    let mut rng = Rng(seed);
    let mut hdr = HdrHistogram::new(HDR_MAX, 3);
    // Tickets in flight (they grow with every submission, so a range bounds them).
    let mut tickets: BTreeSet<Ticket> = BTreeSet::new();
    let mut finished: Vec<(Ticket, orchestrator::Done)> = Vec::new();
    let mut latencies = Vec::with_capacity(requests);
    let start = cpu::rdtsc();
    let mut next = start;
    let mut end = start;
    // Completions seen by the last collection: a collection with none since looks no further.
    let mut seen = u64::MAX;
    let mut collect = |tickets: &mut BTreeSet<Ticket>,
                       latencies: &mut Vec<u64>,
                       hdr: &mut HdrHistogram,
                       end: &mut u64|
     -> R<()> {
        let now = orchestrator::completions();
        if now == seen {
            return Ok(());
        }
        seen = now;
        let (Some(&first), Some(&last)) = (tickets.first(), tickets.last()) else {
            return Ok(());
        };
        // One pass over what finished, not one look per request in flight.
        orchestrator::take_range(first..last + 1, &mut finished);
        for (ticket, d) in finished.drain(..) {
            if !tickets.remove(&ticket) {
                continue;
            }
            if let Err(e) = &d.result {
                kprintln!("fjord: bench: request {ticket} failed: {e}");
                return Err("an invocation failed");
            }
            let latency = d.finished - d.arrived;
            latencies.push(latency);
            hdr.record(latency.min(HDR_MAX))
                .map_err(|_| "latency beyond the histogram")?;
            *end = (*end).max(d.finished);
        }
        Ok(())
    };
    for _ in 0..requests {
        while cpu::rdtsc() < next {
            collect(&mut tickets, &mut latencies, &mut hdr, &mut end)?;
            orchestrator::idle_until(next, &mut || false);
        }
        let t = submit().map_err(|_| "queue full")?;
        tickets.insert(t);
        orchestrator::poll();
        next += rng.exponential(mean_gap).max(1);
    }
    while !tickets.is_empty() {
        collect(&mut tickets, &mut latencies, &mut hdr, &mut end)?;
        if !tickets.is_empty() {
            orchestrator::idle_until(crate::arch::time::deadline_after_ms(1), &mut || false);
        }
    }
    latencies.sort_unstable();
    Ok(LoadRun {
        latencies,
        hdr,
        span: end - start,
    })
}

/// Orchestrator receipt to executor start, at minimal load (no queueing).
fn min_load_dispatch(requests: usize) -> R<Vec<u64>> {
    let mut v = Vec::with_capacity(requests);
    for _ in 0..requests {
        let t =
            orchestrator::submit(RequestClass::External, invocation()).map_err(|_| "queue full")?;
        let d = wait_halting(t);
        d.result.map_err(|_| "an invocation failed")?;
        v.push(d.started - d.arrived);
    }
    Ok(v)
}

pub fn system_name(sys: Sys) -> &'static str {
    match sys {
        Sys::Fjord => "Jord",
        Sys::FjordNi => "Jord_NI",
        Sys::Baseline => "baseline",
    }
}

/// The chain A→B→C→B→A passing a 1 KiB payload in one ArgBuf by `pmove` only, timed in A.
/// One form of the chain: how each hop moves the ArgBuf and crosses the gate.
struct ChainForm {
    metric: &'static str,
    driver: Program,
    relay: Program,
}

/// `pmove` then `ccall` per hop, `pmove` then `creturn` back: two gate crossings per hop.
const CHAIN_SPLIT: ChainForm = ChainForm {
    metric: "chain_abcba_1k",
    driver: Program::ChainDriver,
    relay: Program::Relay,
};

/// `ccall_move` and `creturn_move`: the move and the switch in one gate crossing per hop.
const CHAIN_MOVE: ChainForm = ChainForm {
    metric: "chain_abcba_1k_move",
    driver: Program::ChainDriverMove,
    relay: Program::RelayMove,
};

fn chain(sys: Sys, form: &ChainForm) -> R<()> {
    const ROUNDS: usize = 200;
    let (a, b, c) = jord::with(|j| -> Result<_, fjord_pd::Error> {
        let a = j.cget(PdId::KERNEL)?;
        let b = j.cget(a)?;
        let c = j.cget(b)?;
        Ok((a, b, c))
    })
    .map_err(|_| "cget failed")?;
    let buf =
        jord::with(|j| j.mmap(a, PAGE_SIZE, Perm::RW, MapFlags::default())).map_err(|_| "mmap")?;
    let results = jord::with(|j| j.mmap(a, (ROUNDS * 8) as u64, Perm::RW, MapFlags::default()))
        .map_err(|_| "mmap")?;
    let relay = crate::ktests::user_programs::entry(form.relay);
    let header = [0, 3, a.raw().into(), b.raw().into(), c.raw().into(), relay];
    let header: Vec<u8> = header.iter().flat_map(|w| w.to_le_bytes()).collect();
    jord::with(|j| j.vma_write(buf, 0, &header)).map_err(|_| "no backing")?;
    let driver = crate::ktests::user_programs::entry(form.driver);
    let deadline = crate::arch::time::deadline_after_ms(10_000);
    exec::call(a, driver, [buf, ROUNDS as u64, results, 0], Some(deadline))
        .map_err(|_| "chain failed")?;
    // The payload was touched by C once per round: the ArgBuf really travelled.
    let touched = words_of(buf, 32, 1)?[0];
    if touched != ROUNDS as u64 {
        return Err("the payload did not reach the end of the chain every round");
    }
    let mut samples = words_of(results, 0, ROUNDS)?;
    report_sys("chain", form.metric, sys, &mut samples);
    for pd in [c, b, a] {
        if let Ok(p) = jord::with(|j| j.cput(PdId::KERNEL, pd)) {
            p.finish();
        }
    }
    Ok(())
}

/// Starts a fresh Jord state in the Groundhog mode `sys` measures.
fn reset_for(sys: Sys) -> R<()> {
    let mode = if sys == Sys::Fjord {
        PdIsolation::Full
    } else {
        PdIsolation::None
    };
    state::reset(mode).map_err(|_| "reset")
}

/// Runs the chain microbenchmark and the SLO sweep for Jord and Jord_NI.
pub fn run_group() -> R<()> {
    for form in [&CHAIN_SPLIT, &CHAIN_MOVE] {
        for sys in [Sys::Fjord, Sys::FjordNi] {
            reset_for(sys)?;
            chain(sys, form)?;
        }
    }
    if smp::cpu_count() < 2 {
        kprintln!("fjord: bench faas: needs 2 CPUs (orchestrator + executor); skipped");
        return Ok(());
    }
    orchestrator::init(2);
    let hz = crate::arch::time::ticks_per_second() as f64;
    // Minimal-load service time under Jord_NI: arrivals far apart.
    state::reset(PdIsolation::None).map_err(|_| "reset")?;
    let probe = run_load(400_000.0, 60, 7)?;
    let service = exact_quantile(&probe.latencies, 500).ok_or("no samples")?;
    let slo = SLO_FACTOR * service;
    kprintln!("fjord: faas: min-load service time {service} insns (Jord_NI), SLO p99 <= {slo}");
    let capacity = hz / service as f64;
    for sys in [Sys::Fjord, Sys::FjordNi] {
        reset_for(sys)?;
        let mut lat = run_load(400_000.0, 60, 11)?.latencies;
        report_sys("faas", "work20k_min_load_latency", sys, &mut lat);
        let mut dispatch = min_load_dispatch(60)?;
        report_sys("faas", "dispatch_latency", sys, &mut dispatch);
        let mut best = 0.0f64;
        for pct in [50u64, 60, 70, 75, 80, 85, 90, 95] {
            let rate = capacity * pct as f64 / 100.0;
            let run = run_load(hz / rate, REQUESTS, 1000 + pct)?;
            let (p50, p99, p999) = run.quantiles();
            let achieved = run.achieved(hz);
            kprintln!(
                "fjord: faas: {} offered {:.0} req/s ({pct}% of capacity): achieved {:.0} req/s, p50 {p50} p99 {p99} p99.9 {p999}{}",
                system_name(sys),
                rate,
                achieved,
                if p99 <= slo { "" } else { "  (over SLO)" }
            );
            if p99 <= slo {
                best = best.max(achieved);
            }
        }
        let mut v = [best as u64];
        crate::bench::report_unit(
            "faas",
            "work20k_throughput_at_slo",
            sys,
            "req_per_s",
            &mut v,
        );
    }
    state::reset(PdIsolation::Full).map_err(|_| "reset")?;
    crate::arch::apic::start_periodic_timer(crate::arch::time::TIMER_HZ);
    Ok(())
}

/// The `n` words from word `first` of the VMA at `base`.
fn words_of(base: u64, first: usize, n: usize) -> Result<Vec<u64>, &'static str> {
    let bytes =
        jord::with(|j| j.vma_bytes(base, 8 * first as u64, 8 * n)).map_err(|_| "no backing")?;
    Ok(bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
        .collect())
}
