//! `cargo xtask soak`: boots Fjord, deploys `hello`, the nested chains (`relay`, `fanout`) and
//! the four workloads, and drives a fixed mix of their requests through the gateway over
//! keep-alive connections for many invocations. It reports free frames, kernel heap and
//! p50/p99 latency at the start and at the end, and fails when an invocation fails, when
//! memory does not come back to its baseline, or when latency drifts by more than 10%.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use hdrhistogram::Histogram;

use crate::http_client::{Client, one};
use crate::qemu::{Accel, Machine};
use crate::{apps_build, e2e_http, host_deps, kernel_build};

/// Options of `cargo xtask soak`.
#[derive(Clone, Debug)]
pub struct SoakOptions {
    /// Invocations to make, warm-up excluded.
    pub invocations: u64,
    /// Keep-alive client connections.
    pub connections: usize,
    /// Most the p50 and p99 latency may grow from the start window to the end window
    /// (0.10 is 10%).
    pub max_drift: f64,
    /// Print progress and the per-request table.
    pub progress: bool,
    /// Echo the guest's serial output at the end.
    pub verbose: bool,
    /// The accelerator of the VM.
    pub accel: Accel,
}

impl SoakOptions {
    /// `invocations` over 4 connections, 10% drift allowed, progress printed.
    pub fn new(invocations: u64) -> Self {
        SoakOptions {
            invocations,
            connections: 4,
            max_drift: MAX_DRIFT,
            progress: true,
            verbose: false,
            accel: Accel::Tcg,
        }
    }
}

/// One request of the mix: the function, its request and bytes its answer must contain.
#[derive(Clone, Debug)]
pub struct MixEntry {
    /// The function invoked.
    pub function: String,
    /// The request body.
    pub body: Vec<u8>,
    /// Bytes a successful answer contains.
    pub expect: Vec<u8>,
}

/// The mix, in the order it repeats: `hello`, a 4-level chain, a fan-out to 4, and the eight
/// workload operations.
pub fn mix() -> Vec<MixEntry> {
    let entry = |function: &str, body: &[u8], expect: &[u8]| MixEntry {
        function: function.to_owned(),
        body: body.to_vec(),
        expect: expect.to_vec(),
    };
    let mut mix = vec![
        entry("hello", b"soak", b"hello, soak!"),
        entry("relay", b"3 abc", b"sum=294;"),
        entry("fanout", b"4", b"leaf@"),
    ];
    for op in fjord_faas::workloads::OPERATIONS {
        mix.push(entry(op.entry, op.request, op.expect));
    }
    mix
}

/// The kernel's memory, from `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    /// Free 4 KiB frames.
    pub free_frames: u64,
    /// Kernel heap bytes in use.
    pub heap_used: u64,
    /// Bytes the key-value namespaces hold (state the workloads keep on purpose).
    pub kv_bytes: u64,
    /// Idle warm instances.
    pub warm_instances: u64,
}

impl Memory {
    /// Reads the gauges out of a `/metrics` text.
    pub fn parse(metrics: &str) -> Result<Memory> {
        let mut m = Memory::default();
        let mut seen = [false; 2];
        for line in metrics.lines().filter(|l| !l.starts_with('#')) {
            let Some((name, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            let value = value as u64;
            if name == "fjord_kernel_free_frames" {
                (m.free_frames, seen[0]) = (value, true);
            } else if name == "fjord_kernel_heap_used_bytes" {
                (m.heap_used, seen[1]) = (value, true);
            } else if name.starts_with("fjord_kv_namespace_bytes{") {
                m.kv_bytes += value;
            } else if name == "fjord_warm_instances" {
                m.warm_instances = value;
            }
        }
        if seen != [true, true] {
            bail!("/metrics lacks fjord_kernel_free_frames or fjord_kernel_heap_used_bytes");
        }
        Ok(m)
    }
}

fn memory(addr: SocketAddr) -> Result<Memory> {
    let r = one(addr, "GET", "/metrics", b"").map_err(|e| anyhow!("GET /metrics: {e}"))?;
    if r.status != 200 {
        bail!("GET /metrics answered {}", r.status);
    }
    Memory::parse(&r.text())
}

/// Latency quantiles of one window, in microseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Window {
    /// Median.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
}

impl Window {
    fn of(h: &Histogram<u64>) -> Window {
        Window {
            p50_us: h.value_at_quantile(0.5) as f64 / 1e3,
            p99_us: h.value_at_quantile(0.99) as f64 / 1e3,
        }
    }
}

/// Most latency may grow from the start window to the end window, by default.
pub const MAX_DRIFT: f64 = 0.10;
/// Invocations of the warm-up, per entry of the mix: enough for the workloads' key-value
/// state to reach the size it keeps (timelines and lists are capped), so the baseline is the
/// steady state.
const WARM_UP_ROUNDS: u64 = 500;
/// Most free frames may drop from the baseline (4 MiB: a few warm instances' stacks and
/// tables, whose number depends on which executor served what last), beyond what the warm
/// instances kept since the baseline hold ([`frames_per_warm_instance`] each): the pools grow
/// to the longest bursts of requests seen, and a burst during the soak may be longer than any
/// of the warm-up's.
pub const FRAME_SLACK: u64 = 1024;
/// Most the kernel heap may grow from the baseline beyond what the key-value store grew.
pub const HEAP_SLACK: u64 = 1 << 20;

/// Frames one warm instance holds, as the warm-up showed: the free frames it took (from
/// `cold`, right after the deploys, to `base`) over the warm instances it left. An upper
/// bound: the warm-up's frames also hold the key-value state it built.
pub fn frames_per_warm_instance(cold: Memory, base: Memory) -> u64 {
    cold.free_frames.saturating_sub(base.free_frames) / base.warm_instances.max(1)
}

/// The verdicts on a soak's numbers, `per_warm` being [`frames_per_warm_instance`]; empty when
/// it passed.
pub fn verdicts(
    base: Memory,
    end: Memory,
    per_warm: u64,
    start: Window,
    last: Window,
    max_drift: f64,
) -> Vec<String> {
    let mut out = Vec::new();
    let more_warm = end.warm_instances.saturating_sub(base.warm_instances);
    let slack = FRAME_SLACK + more_warm * per_warm;
    if end.free_frames + slack < base.free_frames {
        out.push(format!(
            "free frames fell from {} to {} (more than {FRAME_SLACK} and {more_warm} more warm instances of {per_warm} frames)",
            base.free_frames, end.free_frames
        ));
    }
    let kv_growth = end.kv_bytes.saturating_sub(base.kv_bytes);
    if end.heap_used > base.heap_used + kv_growth + HEAP_SLACK {
        out.push(format!(
            "kernel heap grew from {} to {} bytes, the key-value store by {kv_growth}",
            base.heap_used, end.heap_used
        ));
    }
    for (what, a, b) in [
        ("p50", start.p50_us, last.p50_us),
        ("p99", start.p99_us, last.p99_us),
    ] {
        if b > a * (1.0 + max_drift) {
            out.push(format!(
                "{what} latency drifted from {a:.0} µs to {b:.0} µs (+{:.0}%)",
                (b / a - 1.0) * 100.0
            ));
        }
    }
    out
}

/// What the load threads measured.
struct Load {
    start: Histogram<u64>,
    end: Histogram<u64>,
    all: Histogram<u64>,
    /// Per entry of the mix: total latency (ns) and count in the start and end windows.
    per_entry: Vec<[(u64, u64); 2]>,
    failures: Vec<String>,
}

/// Sends `total` invocations of the mix (invocation `i` is `mix[i % len]`) over `connections`
/// keep-alive connections, each sending its next request when the last is answered; latencies
/// of the first and last `window` invocations go into their own histograms.
fn drive(
    addr: SocketAddr,
    mix: &[MixEntry],
    total: u64,
    window: u64,
    connections: usize,
    progress: bool,
) -> Result<Load> {
    let next = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mix = Arc::new(mix.to_vec());
    let started = Instant::now();
    let workers: Vec<_> = (0..connections)
        .map(|_| {
            let (next, stop, mix) = (next.clone(), stop.clone(), mix.clone());
            thread::spawn(move || -> Result<Load> {
                let new = || Histogram::<u64>::new_with_bounds(1_000, 60_000_000_000, 3);
                let mut load = Load {
                    start: new()?,
                    end: new()?,
                    all: new()?,
                    per_entry: vec![[(0, 0); 2]; mix.len()],
                    failures: Vec::new(),
                };
                let mut client = None;
                while !stop.load(Ordering::Relaxed) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= total {
                        break;
                    }
                    let k = (i % mix.len() as u64) as usize;
                    let m = &mix[k];
                    if client.is_none() {
                        client = Some(Client::connect(addr).map_err(|e| anyhow!("connect: {e}"))?);
                    }
                    let path = format!("/invoke/{}", m.function);
                    let sent = Instant::now();
                    let answer = client.as_mut().map(|c| c.request("POST", &path, &m.body));
                    let ns = sent.elapsed().as_nanos() as u64;
                    let fail = match answer {
                        Some(Ok(r)) if r.status == 200 && contains(&r.body, &m.expect) => None,
                        Some(Ok(r)) => Some(format!("{}: {} {}", m.function, r.status, r.text())),
                        Some(Err(e)) => {
                            client = None;
                            Some(format!("{}: {e}", m.function))
                        }
                        None => Some("no connection".to_owned()),
                    };
                    if let Some(f) = fail {
                        load.failures.push(format!("invocation {i}: {f}"));
                        if load.failures.len() >= 10 {
                            stop.store(true, Ordering::Relaxed);
                        }
                        continue;
                    }
                    load.all.saturating_record(ns);
                    if i < window {
                        load.start.saturating_record(ns);
                        load.per_entry[k][0].0 += ns;
                        load.per_entry[k][0].1 += 1;
                    } else if i >= total - window {
                        load.end.saturating_record(ns);
                        load.per_entry[k][1].0 += ns;
                        load.per_entry[k][1].1 += 1;
                    }
                }
                Ok(load)
            })
        })
        .collect();
    if progress {
        let (mut last, mut last_at) = (0, 0.0);
        while !workers.iter().all(|w| w.is_finished()) {
            thread::sleep(Duration::from_millis(200));
            let done = next.load(Ordering::Relaxed).min(total);
            if done * 10 / total.max(1) > last * 10 / total.max(1) {
                let secs = started.elapsed().as_secs_f64();
                let rate = (done - last) as f64 / (secs - last_at).max(1e-9);
                let m = memory(addr)
                    .map(|m| {
                        format!(
                            "{} free frames, heap {} B, kv {} B, {} warm",
                            m.free_frames, m.heap_used, m.kv_bytes, m.warm_instances
                        )
                    })
                    .unwrap_or_else(|e| format!("no metrics ({e:#})"));
                println!("xtask: soak: {done} of {total} invocations, {rate:.0}/s; {m}");
                (last, last_at) = (done, secs);
            }
        }
    }
    let new = || Histogram::<u64>::new_with_bounds(1_000, 60_000_000_000, 3);
    let mut total_load = Load {
        start: new()?,
        end: new()?,
        all: new()?,
        per_entry: vec![[(0, 0); 2]; mix.len()],
        failures: Vec::new(),
    };
    for w in workers {
        let l = w.join().map_err(|_| anyhow!("a load thread panicked"))??;
        total_load.start.add(&l.start)?;
        total_load.end.add(&l.end)?;
        total_load.all.add(&l.all)?;
        total_load.failures.extend(l.failures);
        for (sum, part) in total_load.per_entry.iter_mut().zip(&l.per_entry) {
            for w in 0..2 {
                sum[w].0 += part[w].0;
                sum[w].1 += part[w].1;
            }
        }
    }
    Ok(total_load)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

/// `cargo xtask soak`: builds, boots and soaks; `Ok(false)` when it ran and failed (the
/// reasons printed).
pub fn run(options: &SoakOptions) -> Result<bool> {
    let qemu = host_deps::ensure_qemu()?;
    let kernel = kernel_build::build_kernel()?;
    let problems = boot_and_soak(&kernel, &qemu, options)?;
    for p in &problems {
        println!("soak: FAILED: {p}");
    }
    if problems.is_empty() {
        println!("soak: ok");
    }
    Ok(problems.is_empty())
}

/// Boots `kernel`, runs the soak and returns what failed (nothing when it passed).
pub fn boot_and_soak(
    kernel: &std::path::Path,
    qemu: &std::path::Path,
    options: &SoakOptions,
) -> Result<Vec<String>> {
    let apps = apps_build::build_apps()?;
    let (mut vm, addr) =
        e2e_http::boot_gateway(kernel, Some(qemu), Machine::Microvm, options.accel)?;
    let result = soak(addr, &apps, options);
    let tail = vm.log_tail(30);
    vm.kill();
    if options.verbose || result.is_err() {
        println!("{tail}");
    }
    result
}

fn soak(
    addr: SocketAddr,
    apps: &[apps_build::BuiltApp],
    options: &SoakOptions,
) -> Result<Vec<String>> {
    let mix = mix();
    let mut names: Vec<&str> = mix.iter().map(|m| m.function.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    for app in apps {
        let needed = names.contains(&app.name.as_str())
            || fjord_faas::workloads::WORKLOADS
                .iter()
                .any(|w| app.name.starts_with(&format!("{w}-")));
        if needed {
            let status = e2e_http::deploy(addr, &app.name, &app.bytes)
                .map_err(|e| anyhow!("deploying {}: {e}", app.name))?;
            if !(200..300).contains(&status) {
                bail!("deploying {} answered {status}", app.name);
            }
        }
    }
    let cold = memory(addr)?;
    // Warm-up: the baseline has the warm instances and the key-value state a steady run keeps.
    let warm_up = mix.len() as u64 * WARM_UP_ROUNDS;
    let w = drive(addr, &mix, warm_up, 0, options.connections, false).context("warming up")?;
    if let Some(f) = w.failures.first() {
        bail!("warm-up failed: {f}");
    }
    let base = memory(addr)?;
    let per_warm = frames_per_warm_instance(cold, base);
    let total = options.invocations;
    let window = (total / 10).clamp(1, 100_000);
    println!(
        "xtask: soak: {total} invocations of a mix of {} requests over {} connections (warm-up {warm_up}); baseline: {} free frames, heap {} bytes, {} warm instances (at most {per_warm} frames each)",
        mix.len(),
        options.connections,
        base.free_frames,
        base.heap_used,
        base.warm_instances
    );
    let started = Instant::now();
    let load = drive(
        addr,
        &mix,
        total,
        window,
        options.connections,
        options.progress,
    )?;
    let secs = started.elapsed().as_secs_f64();
    thread::sleep(Duration::from_millis(500));
    let end = memory(addr)?;
    let (first, last) = (Window::of(&load.start), Window::of(&load.end));
    println!(
        "soak: {} invocations in {secs:.0} s ({:.0}/s), {} failed",
        load.all.len(),
        load.all.len() as f64 / secs.max(1e-9),
        load.failures.len()
    );
    println!(
        "soak: start: free frames {}, heap {} B, kv {} B, warm {}; first {window}: p50 {:.0} µs, p99 {:.0} µs",
        base.free_frames,
        base.heap_used,
        base.kv_bytes,
        base.warm_instances,
        first.p50_us,
        first.p99_us
    );
    println!(
        "soak: end:   free frames {}, heap {} B, kv {} B, warm {}; last {window}:  p50 {:.0} µs, p99 {:.0} µs",
        end.free_frames, end.heap_used, end.kv_bytes, end.warm_instances, last.p50_us, last.p99_us
    );
    for (m, [a, b]) in mix.iter().zip(&load.per_entry).filter(|_| options.progress) {
        let mean = |(ns, n): (u64, u64)| ns as f64 / n.max(1) as f64 / 1e3;
        println!(
            "soak:   {:<18} {:<40} mean {:>7.0} µs at the start, {:>7.0} µs at the end",
            m.function,
            String::from_utf8_lossy(&m.body[..m.body.len().min(40)]),
            mean(*a),
            mean(*b)
        );
    }
    let mut problems: Vec<String> = load.failures.iter().take(5).cloned().collect();
    if load.failures.is_empty() {
        problems.extend(verdicts(
            base,
            end,
            per_warm,
            first,
            last,
            options.max_drift,
        ));
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_memory_gauges() {
        let text = "# HELP fjord_kernel_free_frames Free frames.\n# TYPE fjord_kernel_free_frames gauge\nfjord_kernel_free_frames 1000\nfjord_kernel_heap_used_bytes 5000\nfjord_kv_namespace_bytes{namespace=\"hotel\"} 10\nfjord_kv_namespace_bytes{namespace=\"social\"} 20\nfjord_warm_instances 3\n";
        let m = Memory::parse(text).unwrap();
        assert_eq!(
            m,
            Memory {
                free_frames: 1000,
                heap_used: 5000,
                kv_bytes: 30,
                warm_instances: 3
            }
        );
        assert!(Memory::parse("fjord_kernel_free_frames 1\n").is_err());
    }

    #[test]
    fn fails_on_lost_memory_and_latency_drift() {
        let base = Memory {
            free_frames: 10_000,
            heap_used: 1 << 20,
            kv_bytes: 0,
            warm_instances: 4,
        };
        let w = Window {
            p50_us: 100.0,
            p99_us: 1000.0,
        };
        assert!(verdicts(base, base, 20, w, w, MAX_DRIFT).is_empty());
        // State the store keeps on purpose is not a leak.
        let kv = Memory {
            heap_used: base.heap_used + (4 << 20),
            kv_bytes: 4 << 20,
            ..base
        };
        assert!(verdicts(base, kv, 20, w, w, MAX_DRIFT).is_empty());
        let leak = Memory {
            heap_used: base.heap_used + (2 << 20),
            ..base
        };
        assert_eq!(verdicts(base, leak, 20, w, w, MAX_DRIFT).len(), 1);
        let frames = Memory {
            free_frames: base.free_frames - FRAME_SLACK - 1,
            ..base
        };
        assert_eq!(verdicts(base, frames, 20, w, w, MAX_DRIFT).len(), 1);
        // Frames that more warm instances hold are not lost, at what the warm-up showed one
        // holds; beyond, they are.
        let pools_grew = Memory {
            free_frames: base.free_frames - FRAME_SLACK - 100,
            warm_instances: base.warm_instances + 5,
            ..base
        };
        assert!(verdicts(base, pools_grew, 20, w, w, MAX_DRIFT).is_empty());
        assert_eq!(verdicts(base, pools_grew, 19, w, w, MAX_DRIFT).len(), 1);
        let cold = Memory {
            free_frames: base.free_frames + 80,
            ..base
        };
        assert_eq!(frames_per_warm_instance(cold, base), 20);
        let slow = Window {
            p50_us: 111.0,
            p99_us: 1100.0,
        };
        assert_eq!(verdicts(base, base, 20, w, slow, MAX_DRIFT).len(), 1);
    }

    #[test]
    fn the_mix_has_hello_chains_and_every_workload() {
        let mix = mix();
        for f in ["hello", "relay", "fanout"] {
            assert!(mix.iter().any(|m| m.function == f));
        }
        for w in fjord_faas::workloads::WORKLOADS {
            assert!(mix.iter().any(|m| m.function.starts_with(w)));
        }
    }
}
