//! The measurements, run by the engine: per target the minimal-load latency and the throughput
//! at the SLO, by the method of Fjord's `workloads` and `restore` groups (see
//! [`fjord_faas::open_loop`]).
//!
//! Time is the TSC (one tick per guest instruction under icount; rates use the nominal
//! 10^9 ticks per second, as Fjord does). A request's latency runs from its scheduled arrival
//! time to the engine's receipt of the entry function's reply: when the engine is late to
//! take a request in (it shares the one vCPU with the workers), the delay counts, as it would
//! for a request waiting in a socket. Between arrivals the engine blocks in `epoll_pwait2` with a
//! timeout that ends at the next arrival (timer slack 1 ns), never busy-waiting.

use fjord_faas::hdr::HdrHistogram;
use fjord_faas::metrics::exact_quantile;
use fjord_faas::open_loop::{
    self as load, HDR_MAX, LoadRun, MIN_LOAD_REQUESTS, Point, REQUESTS, Rng,
};

use crate::engine::{Engine, EngineError};
use crate::sys;

/// Nominal TSC ticks per second (one per instruction under icount).
pub const HZ: f64 = 1e9;

/// What the runs of one target need besides the engine.
pub struct Target<'a> {
    /// The benchmark group: the `LBENCH` lines' group and the `LINFO` lines' prefix.
    pub group: &'static str,
    /// The metric prefix (`<workload>_<operation>`, `hello`, `dirty_10`, ...).
    pub label: &'a str,
    /// What the `LINFO` lines call the system measured (`linux`, `linux fork`).
    pub system: &'a str,
    /// The entry function's index.
    pub entry: u16,
    /// The request every run sends.
    pub request: &'a [u8],
    /// Bytes a successful response contains, or (`exact`) is.
    pub expect: &'a [u8],
    /// Whether the response must be exactly `expect`.
    pub exact: bool,
    /// The minimal-load latency capacity is based on (ticks): capacity is `HZ / basis`
    /// (Jord_NI's service time for `workloads`, Fjord's latency without isolation for
    /// `restore`).
    pub basis: u64,
    /// The p99 latency bound (ticks).
    pub slo: u64,
    /// TSC ticks per nanosecond of CLOCK_MONOTONIC, for poll timeouts.
    pub ticks_per_ns: f64,
}

/// Waits for the external request `tag` and returns its reply and finish time.
fn wait_one(engine: &mut Engine, tag: u64) -> Result<(Vec<u8>, u64), EngineError> {
    loop {
        let mut found = None;
        for d in engine.take_done() {
            if d.tag == tag {
                found = Some(d);
            }
        }
        if let Some(d) = found {
            let body = d
                .result
                .map_err(|e| EngineError(format!("the request failed: {e:?}")))?;
            return Ok((body, d.finished));
        }
        engine.pump(None)?;
    }
}

/// Sends the request three times and checks each response holds (or is) the expected bytes.
pub fn check(engine: &mut Engine, t: &Target<'_>) -> Result<(), EngineError> {
    for tag in 0..3 {
        let body = call(engine, tag, t.entry, t.request)?;
        let good = if t.exact {
            body == t.expect
        } else {
            body.windows(t.expect.len()).any(|w| w == t.expect)
        };
        if !good {
            return Err(EngineError(format!(
                "response {:?} {} {:?}",
                String::from_utf8_lossy(&body),
                if t.exact { "is not" } else { "lacks" },
                String::from_utf8_lossy(t.expect)
            )));
        }
    }
    Ok(())
}

/// Sends one request to `func` as external request `tag` and waits for its response.
pub fn call(
    engine: &mut Engine,
    tag: u64,
    func: u16,
    request: &[u8],
) -> Result<Vec<u8>, EngineError> {
    engine.submit(tag, func, request)?;
    wait_one(engine, tag).map(|(body, _)| body)
}

/// Latencies of [`MIN_LOAD_REQUESTS`] requests sent one at a time, sorted.
pub fn min_load(engine: &mut Engine, t: &Target<'_>) -> Result<Vec<u64>, EngineError> {
    let mut v = Vec::with_capacity(MIN_LOAD_REQUESTS);
    for tag in 0..MIN_LOAD_REQUESTS as u64 {
        let arrived = sys::rdtsc();
        engine.submit(tag, t.entry, t.request)?;
        let (_, finished) = wait_one(engine, tag)?;
        v.push(finished - arrived);
    }
    v.sort_unstable();
    Ok(v)
}

/// Runs `requests` Poisson arrivals `mean_gap` ticks apart on average (generator seeded with
/// `seed`); returns the run and the largest delay between a scheduled arrival and the engine's
/// submission (ticks).
pub fn open_loop(
    engine: &mut Engine,
    t: &Target<'_>,
    mean_gap: f64,
    requests: usize,
    seed: u64,
) -> Result<(LoadRun, u64), EngineError> {
    let mut rng = Rng(seed);
    let mut hdr = HdrHistogram::new(HDR_MAX, 3);
    let mut latencies = Vec::with_capacity(requests);
    let mut arrivals = vec![0u64; requests];
    let start = sys::rdtsc();
    let mut next = start;
    let mut end = start;
    let mut max_late = 0;
    let mut collect = |engine: &mut Engine,
                       arrivals: &[u64],
                       latencies: &mut Vec<u64>,
                       hdr: &mut HdrHistogram|
     -> Result<(), EngineError> {
        for d in engine.take_done() {
            d.result
                .map_err(|e| EngineError(format!("a request failed: {e:?}")))?;
            let latency = d.finished - arrivals[d.tag as usize];
            latencies.push(latency);
            hdr.record(latency.min(HDR_MAX))
                .map_err(|_| EngineError("latency beyond the histogram".into()))?;
            end = end.max(d.finished);
        }
        Ok(())
    };
    for tag in 0..requests {
        loop {
            let now = sys::rdtsc();
            if now >= next {
                max_late = u64::max(max_late, now - next);
                break;
            }
            let ns = ((next - now) as f64 / t.ticks_per_ns).ceil() as u64;
            engine.pump(Some(ns.max(1)))?;
            collect(engine, &arrivals, &mut latencies, &mut hdr)?;
        }
        arrivals[tag] = next;
        engine.submit(tag as u64, t.entry, t.request)?;
        next += rng.exponential(mean_gap).max(1);
    }
    while latencies.len() < requests {
        if !engine.has_done() {
            engine.pump(None)?;
        }
        collect(engine, &arrivals, &mut latencies, &mut hdr)?;
    }
    latencies.sort_unstable();
    let run = LoadRun {
        latencies,
        hdr,
        span: end - start,
    };
    Ok((run, max_late))
}

/// The highest throughput (req/s) with p99 within the SLO, over the offered loads Fjord's
/// sweep uses, every run on the same arrival sequence scaled to its load
/// ([`load::bisect_common`]); prints one `LINFO` line per load point.
pub fn throughput_at_slo(engine: &mut Engine, t: &Target<'_>) -> Result<u64, EngineError> {
    let capacity = HZ / t.basis as f64;
    let run_at = |pct: f64, seed: u64| {
        let rate = capacity * pct / 100.0;
        let (run, max_late) = open_loop(engine, t, HZ / rate, REQUESTS, seed)?;
        let (p50, p99, p999) = run.quantiles();
        let achieved = run.achieved(HZ);
        let within = p99 <= t.slo;
        println!(
            "LINFO {}: {} {}: offered {:.0} req/s ({pct:.1}%): achieved {:.0}, p50 {p50} p99 {p99} p99.9 {p999}, engine late by up to {}{}{}",
            t.group,
            t.label,
            t.system,
            rate,
            achieved,
            max_late,
            if within { "" } else { "  (over SLO)" },
            load::warm_up_note(seed)
        );
        Ok::<_, EngineError>(Point { within, achieved })
    };
    let best = load::bisect_common(run_at)?;
    Ok(best as u64)
}

/// The median of sorted samples as Fjord reports it.
pub fn median(sorted: &[u64]) -> Option<u64> {
    exact_quantile(sorted, 500)
}

/// Prints one `LBENCH` line of `group` (the format `tools/xtask/src/linux/guest_log.rs` parses).
pub fn report(group: &str, metric: &str, unit: &str, sorted: &[u64]) {
    let (Some(&min), Some(&max), Some(median)) = (sorted.first(), sorted.last(), median(sorted))
    else {
        return;
    };
    println!(
        "LBENCH {{\"group\":\"{group}\",\"metric\":\"{metric}\",\"unit\":\"{unit}\",\"median\":{median},\"min\":{min},\"max\":{max},\"runs\":{}}}",
        sorted.len()
    );
}
