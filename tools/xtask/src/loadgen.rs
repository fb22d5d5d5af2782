//! The host-side load generator: open-loop HTTP requests with Poisson arrivals, as wrk2
//! generates them, over several keep-alive connections.
//!
//! Each request has a scheduled send time; its latency runs from that time (not from when it
//! was actually sent) to the end of its response, so a slow server cannot hide queueing by
//! delaying the generator (wrk2's correction for coordinated omission). Latencies go into an
//! HDR histogram; the report gives p50, p99 and p99.9 and the achieved throughput.
//!
//! [`ClosedLoad`] describes the closed-loop counterpart for connection-count sweeps (many
//! keep-alive connections, each with one request outstanding), which `wrk` generates
//! ([`crate::wrk`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use hdrhistogram::Histogram;

use crate::http_client::Client;

/// One open-loop run.
#[derive(Clone, Debug)]
pub struct Load {
    /// Server address.
    pub addr: SocketAddr,
    /// HTTP method.
    pub method: String,
    /// Request path.
    pub path: String,
    /// Request body.
    pub body: Vec<u8>,
    /// Offered load in requests per second.
    pub rate: f64,
    /// Number of requests.
    pub requests: usize,
    /// Keep-alive connections (one sender thread each).
    pub connections: usize,
    /// Seed of the arrival process (runs are repeatable in their schedule).
    pub seed: u64,
    /// The status every response must have.
    pub expect_status: u16,
}

/// What a run measured.
#[derive(Clone, Debug)]
pub struct LoadReport {
    /// Offered load (requests per second).
    pub offered_rps: f64,
    /// Completed requests per second over the run.
    pub achieved_rps: f64,
    /// Median latency in nanoseconds.
    pub p50_ns: u64,
    /// 99th-percentile latency in nanoseconds.
    pub p99_ns: u64,
    /// 99.9th-percentile latency in nanoseconds.
    pub p999_ns: u64,
    /// Requests that failed or got another status.
    pub errors: usize,
}

/// Send offsets (from the start) of `n` Poisson arrivals at `rate` per second.
pub fn poisson_schedule(rate: f64, n: usize, seed: u64) -> Vec<Duration> {
    let mut state = seed.max(1);
    let mut t = 0.0f64;
    (0..n)
        .map(|_| {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            let u = ((state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 + 0.5)
                / (1u64 << 53) as f64;
            let at = Duration::from_secs_f64(t);
            t += -u.ln() / rate;
            at
        })
        .collect()
}

/// Runs `load` and reports latency quantiles and throughput.
pub fn run(load: &Load) -> Result<LoadReport> {
    if load.connections == 0 || load.requests == 0 || load.rate <= 0.0 {
        bail!("a load needs at least one connection, one request and a positive rate");
    }
    let schedule = Arc::new(poisson_schedule(load.rate, load.requests, load.seed));
    let start = Instant::now() + Duration::from_millis(50);
    let mut workers = Vec::new();
    for w in 0..load.connections {
        let (load, schedule) = (load.clone(), Arc::clone(&schedule));
        workers.push(thread::spawn(
            move || -> Result<(Histogram<u64>, usize, Instant)> {
                let mut hist = Histogram::<u64>::new_with_bounds(1_000, 60_000_000_000, 3)?;
                let mut client = None;
                let mut errors = 0;
                let mut last = start;
                for i in (w..schedule.len()).step_by(load.connections) {
                    let due = start + schedule[i];
                    if let Some(wait) = due.checked_duration_since(Instant::now()) {
                        thread::sleep(wait);
                    }
                    if client.is_none() {
                        client = Client::connect(load.addr).ok();
                    }
                    let ok = match client.as_mut() {
                        Some(c) => match c.request(&load.method, &load.path, &load.body) {
                            Ok(r) if r.status == load.expect_status => true,
                            Ok(_) => false,
                            Err(_) => {
                                client = None;
                                false
                            }
                        },
                        None => false,
                    };
                    last = Instant::now();
                    if ok {
                        hist.saturating_record(last.duration_since(due).as_nanos() as u64);
                    } else {
                        errors += 1;
                    }
                }
                Ok((hist, errors, last))
            },
        ));
    }
    let mut total = Histogram::<u64>::new_with_bounds(1_000, 60_000_000_000, 3)?;
    let mut errors = 0;
    let mut end = start;
    for w in workers {
        let (h, e, last) = w
            .join()
            .map_err(|_| anyhow::anyhow!("a load thread panicked"))??;
        total.add(h)?;
        errors += e;
        end = end.max(last);
    }
    let span = end.duration_since(start).as_secs_f64().max(1e-9);
    Ok(LoadReport {
        offered_rps: load.rate,
        achieved_rps: total.len() as f64 / span,
        p50_ns: total.value_at_quantile(0.5),
        p99_ns: total.value_at_quantile(0.99),
        p999_ns: total.value_at_quantile(0.999),
        errors,
    })
}

/// One closed-loop run: `connections` keep-alive connections, each with one request
/// outstanding at a time, for `duration` once all are connected.
#[derive(Clone, Debug)]
pub struct ClosedLoad {
    /// Server address.
    pub addr: SocketAddr,
    /// HTTP method.
    pub method: String,
    /// Request path.
    pub path: String,
    /// Request body.
    pub body: Vec<u8>,
    /// Concurrent connections.
    pub connections: usize,
    /// How long requests are sent once every connection is open.
    pub duration: Duration,
}

/// What a closed-loop run measured.
#[derive(Clone, Debug)]
pub struct ClosedReport {
    /// Requests answered 200.
    pub ok: u64,
    /// Requests answered 503 (refused at the connection or capacity limit).
    pub refused: u64,
    /// Requests that failed (I/O error, closed connection, other status).
    pub errors: u64,
    /// Answered requests per second over the measurement.
    pub rps: f64,
    /// Median latency of the 200 answers, in nanoseconds.
    pub p50_ns: u64,
    /// 99th-percentile latency, in nanoseconds.
    pub p99_ns: u64,
}

/// Fails, saying how to raise it, when this process may open too few files for
/// `connections` connections.
pub fn check_open_files(connections: usize) -> Result<()> {
    if let Some(limit) = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .as_deref()
        .and_then(open_files_limit)
        && limit < (connections + FILES_SPARE) as u64
    {
        bail!(
            "{} connections need about {} open files but this process may open {limit}: \
             raise the limit (`ulimit -n {}`) and run again",
            connections,
            connections + FILES_SPARE,
            (connections + FILES_SPARE).next_power_of_two()
        );
    }
    Ok(())
}

/// Open files the process needs besides the load's connections (QEMU's pipes, logs, reopened
/// connections not yet closed).
const FILES_SPARE: usize = 200;

/// The soft limit on open files in the text of `/proc/self/limits`; `None` when unlimited or
/// not found.
pub fn open_files_limit(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_files_limit_is_the_soft_limit() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max processes             63703                63703                processes \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(open_files_limit(limits), Some(1024));
        assert_eq!(
            open_files_limit(
                "Max open files            unlimited            unlimited            files\n"
            ),
            None
        );
        assert_eq!(open_files_limit(""), None);
    }

    #[test]
    fn poisson_schedule_has_the_requested_rate_and_is_repeatable() {
        let s = poisson_schedule(1000.0, 20_000, 42);
        assert_eq!(s, poisson_schedule(1000.0, 20_000, 42));
        assert!(s.windows(2).all(|w| w[0] <= w[1]));
        let mean_gap = s.last().unwrap().as_secs_f64() / (s.len() - 1) as f64;
        assert!((mean_gap - 0.001).abs() < 0.0001, "mean gap {mean_gap}");
    }

    #[test]
    fn a_closed_loop_needs_a_connection() {
        let load = ClosedLoad {
            addr: "127.0.0.1:9".parse().unwrap(),
            method: "GET".into(),
            path: "/".into(),
            body: Vec::new(),
            connections: 0,
            duration: Duration::from_millis(1),
        };
        assert!(crate::wrk::run_closed(&load).is_err());
    }

    #[test]
    fn rejects_empty_loads() {
        let load = Load {
            addr: "127.0.0.1:9".parse().unwrap(),
            method: "GET".into(),
            path: "/".into(),
            body: Vec::new(),
            rate: 0.0,
            requests: 1,
            connections: 1,
            seed: 1,
            expect_status: 200,
        };
        assert!(run(&load).is_err());
    }
}
