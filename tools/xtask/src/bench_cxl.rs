//! The wall-time half of `cargo xtask bench cxl`: a two-node cluster (`crate::cluster`) whose
//! nodes pin their clones' tiering (`cxl_tiering=`), one cluster per policy, and `index`
//! requests timed from the host, one at a time:
//!
//! - `cxl_wall_cold_start_get`: node1's first request after its zygote was destroyed
//!   (`DELETE /functions/index/zygote`) with no checkpoint in the region: a zygote made, `init`
//!   run, forked;
//! - `cxl_wall_local_fork_get`: node1's requests with its zygote warm;
//! - `cxl_wall_local_restore_<policy>_get`, `cxl_wall_remote_restore_<policy>_get`: with a
//!   checkpoint written by node0 and neither node holding a zygote, a request on node0 (the
//!   writer) and on node1: each served by a clone of the checkpoint;
//! - `cxl_wall_haproxy_restore_<policy>_get`: the same through HAProxy's entry.
//!
//! Wall time is host time per request (client send to response), under TCG noisy and
//! secondary; on one host the region is host memory, as fast as local memory.

use std::net::SocketAddr;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::cluster::{Cluster, ClusterOptions};
use crate::http_client::one;
use crate::measure::{Measurement, System};
use crate::qemu::Accel;

/// Requests timed per row.
const RUNS: usize = 11;
/// The request every row times.
const REQUEST: &[u8] = b"get 4321";

/// One timed request: nanoseconds from sending it to its whole response.
fn timed(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> Result<f64> {
    let t = Instant::now();
    let r = one(addr, method, path, body).map_err(anyhow::Error::msg)?;
    let ns = t.elapsed().as_nanos() as f64;
    if r.status != 200 && r.status != 201 && r.status != 204 {
        bail!("{method} {path}: {} {}", r.status, r.text());
    }
    Ok(ns)
}

fn call(addr: SocketAddr, method: &str, path: &str, body: &[u8], want: &[u16]) -> Result<String> {
    let r = one(addr, method, path, body).map_err(anyhow::Error::msg)?;
    if !want.contains(&r.status) {
        bail!("{method} {path}: {} {}", r.status, r.text());
    }
    Ok(r.text())
}

fn row(metric: &str, mut samples: Vec<f64>) -> Measurement {
    samples.sort_by(f64::total_cmp);
    let (median, min, max) = crate::bench::median_min_max(samples.clone());
    Measurement {
        group: "cxl".to_owned(),
        metric: metric.to_owned(),
        system: System::Fjord,
        unit: "ns".to_owned(),
        median,
        min,
        max,
        runs: samples.len() as u64,
        wall_ns: Some(median),
        p99: None,
    }
}

/// Retires every checkpoint of `index` in the region.
fn retire_index(addr: SocketAddr) -> Result<()> {
    let text = call(addr, "GET", "/checkpoints", b"", &[200])?;
    let list: Vec<serde_json::Value> = serde_json::from_str(&text).context("GET /checkpoints")?;
    for c in list.iter().filter(|c| c["name"] == "index") {
        let id = c["id"].as_str().unwrap_or_default();
        call(
            addr,
            "DELETE",
            &format!("/checkpoints/{id}"),
            b"",
            &[204, 404],
        )?;
    }
    Ok(())
}

/// Destroys `index`'s zygote on `addr` (if it has one).
fn drop_zygote(addr: SocketAddr) -> Result<()> {
    call(addr, "DELETE", "/functions/index/zygote", b"", &[204, 404]).map(|_| ())
}

/// Runs the cluster half (see the module documentation) under `accel`.
pub fn wall(accel: Accel) -> Result<Vec<Measurement>> {
    let mut out = Vec::new();
    for (i, policy) in ["write", "access", "hybrid"].into_iter().enumerate() {
        println!("bench cxl: a two-node cluster with cxl_tiering={policy}");
        let options = ClusterOptions {
            nodes: 2,
            region_mib: 64,
            accel: Some(accel),
            append: format!("cxl_tiering={policy}"),
            ..ClusterOptions::default()
        };
        let cluster = Cluster::start(&options, false)?;
        let (n0, n1) = (cluster.nodes[0].gateway, cluster.nodes[1].gateway);
        retire_index(n0)?;
        if i == 0 {
            let mut cold = Vec::new();
            for _ in 0..RUNS {
                drop_zygote(n1)?;
                cold.push(timed(n1, "POST", "/invoke/index", REQUEST)?);
            }
            out.push(row("cxl_wall_cold_start_get", cold));
            let warm = (0..RUNS)
                .map(|_| timed(n1, "POST", "/invoke/index", REQUEST))
                .collect::<Result<_>>()?;
            out.push(row("cxl_wall_local_fork_get", warm));
        }
        call(n0, "POST", "/functions/index/checkpoint", b"", &[201])?;
        drop_zygote(n0)?;
        drop_zygote(n1)?;
        for (label, addr) in [("local", n0), ("remote", n1), ("haproxy", cluster.entry)] {
            let samples = (0..RUNS)
                .map(|_| timed(addr, "POST", "/invoke/index", REQUEST))
                .collect::<Result<_>>()?;
            out.push(row(
                &format!("cxl_wall_{label}_restore_{policy}_get"),
                samples,
            ));
        }
        // Every restore must have been a clone: no node made a zygote.
        for addr in [n0, n1] {
            let cold = crate::e2e_conns::metric(
                addr,
                "fjord_cxlporter_decisions_total{decision=\"restore_failed\"}",
            )
            .map_err(anyhow::Error::msg)?;
            if cold != 0 {
                bail!("a restore failed on {addr}: the rows would mix cold starts in");
            }
        }
        drop(cluster);
    }
    Ok(out)
}
