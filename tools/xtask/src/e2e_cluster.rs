//! End-to-end tests of `cargo xtask cluster` (`crate::cluster`): two q35 nodes sharing one
//! ivshmem region behind Debian's HAProxy. Both join the region (one formats it, the other
//! attaches); HAProxy's entry spreads invocations over both; with one node killed, every
//! request still succeeds and HAProxy marks it down, and once it boots again it rejoins the
//! region under its old number and HAProxy routes to it again. A region whose header is not
//! Fjord's is refused by a node and left byte for byte as it was.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::cluster::{Cluster, ClusterOptions};
use crate::e2e_conns::metric;
use crate::e2e_http::Outcome;
use crate::http_client::one;
use crate::qemu::Accel;

/// Requests sent through HAProxy in each round.
const ROUND: usize = 12;

/// Runs the cluster checks under `accel`; `kernel` is built already (the cluster builds and
/// packs what it boots itself).
pub fn run(accel: Accel) -> Result<Vec<Outcome>> {
    let mut out = Vec::new();
    let mut check = |label: &str, result: Result<(), String>| {
        out.push((format!("cluster: {label}"), result));
    };
    let options = ClusterOptions {
        nodes: 2,
        region_mib: 64,
        accel: Some(accel),
        ..ClusterOptions::default()
    };
    let mut cluster = match Cluster::start(&options, false) {
        Ok(c) => c,
        Err(e) => {
            check("two nodes and HAProxy start", Err(format!("{e:#}")));
            return Ok(out);
        }
    };
    check(
        "two q35 nodes share one ivshmem region: one formats it, the other attaches, both join",
        shared_region(&cluster),
    );
    check(
        "HAProxy's entry spreads invocations over both nodes",
        spread(&cluster),
    );
    check(
        "a node killed: every request through HAProxy still succeeds, and HAProxy marks it down",
        node_down(&mut cluster),
    );
    check(
        "the node boots again: it rejoins the region under its number, and HAProxy routes to it again",
        node_back(&mut cluster),
    );
    drop(cluster);
    check(
        "a region whose header is not Fjord's is refused and left byte for byte as it was",
        foreign_region(accel),
    );
    Ok(out)
}

/// `fjord_function_invocations_total` of `hello` on a node.
fn hello_invocations(addr: std::net::SocketAddr) -> Result<u64, String> {
    metric(addr, "fjord_function_invocations_total{function=\"hello\"}").or(Ok(0))
}

fn shared_region(cluster: &Cluster) -> Result<(), String> {
    let mut formatted = 0;
    for (i, node) in cluster.nodes.iter().enumerate() {
        let line = node
            .vm
            .wait_for_line(|l| l.contains("fjord: cxl:"), Duration::from_secs(5))
            .map_err(|e| format!("node{i}: no cxl line: {e}"))?;
        if !line.contains(&format!("joined as node {i}")) {
            return Err(format!("node{i}: {line}"));
        }
        formatted += usize::from(line.contains("formatted here"));
        let joined = metric(node.gateway, "fjord_cxl_nodes_joined")?;
        let id = metric(node.gateway, "fjord_cxl_node_id")?;
        if (joined, id) != (2, i as u64) {
            return Err(format!("node{i}: {joined} nodes joined, id {id}"));
        }
    }
    match formatted {
        1 => Ok(()),
        n => Err(format!("{n} nodes formatted the region")),
    }
}

/// Sends [`ROUND`] invocations of `hello` through HAProxy, one after another; all must succeed.
fn round(cluster: &Cluster) -> Result<(), String> {
    for _ in 0..ROUND {
        let r = one(cluster.entry, "POST", "/invoke/hello", b"cluster")?;
        r.expect(200)?;
        r.expect_body_contains("hello, cluster")?;
    }
    Ok(())
}

fn spread(cluster: &Cluster) -> Result<(), String> {
    let before: Vec<u64> = cluster
        .nodes
        .iter()
        .map(|n| hello_invocations(n.gateway))
        .collect::<Result<_, _>>()?;
    round(cluster)?;
    // Round robin among equals (leastconn with one request at a time): both got some.
    for (i, n) in cluster.nodes.iter().enumerate() {
        let after = hello_invocations(n.gateway)?;
        if after <= before[i] {
            return Err(format!("node{i} served none of {ROUND} requests"));
        }
    }
    Ok(())
}

/// HAProxy's view of `server` (`UP`, `DOWN`, ...), from its runtime API's `show stat`.
fn server_status(cluster: &Cluster, server: &str) -> Result<String, String> {
    let mut s = UnixStream::connect(cluster.admin_socket())
        .map_err(|e| format!("HAProxy's admin socket: {e}"))?;
    s.write_all(b"show stat\n")
        .map_err(|e| format!("admin socket: {e}"))?;
    let mut text = String::new();
    s.read_to_string(&mut text)
        .map_err(|e| format!("admin socket: {e}"))?;
    let header: Vec<&str> = text
        .lines()
        .next()
        .unwrap_or("")
        .trim_start_matches("# ")
        .split(',')
        .collect();
    let status = header.iter().position(|&h| h == "status");
    text.lines()
        .map(|l| l.split(',').collect::<Vec<_>>())
        .find(|f| f.get(1) == Some(&server))
        .and_then(|f| status.and_then(|i| f.get(i).map(|s| (*s).to_owned())))
        .ok_or_else(|| format!("no {server} in HAProxy's stats"))
}

/// Waits until HAProxy says `server` is `want` (`UP` or `DOWN`).
fn wait_status(cluster: &Cluster, server: &str, want: &str) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status = server_status(cluster, server)?;
        if status.starts_with(want) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("HAProxy still says {server} is {status}"));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn node_down(cluster: &mut Cluster) -> Result<(), String> {
    cluster.kill_node(0);
    // Requests at once, before and while the health checks notice: HAProxy retries and
    // redispatches a failed connection to the other node.
    round(cluster)?;
    wait_status(cluster, "node0", "DOWN")?;
    round(cluster)
}

fn node_back(cluster: &mut Cluster) -> Result<(), String> {
    cluster.restart_node(0).map_err(|e| format!("{e:#}"))?;
    let node = &cluster.nodes[0];
    let line = node
        .vm
        .wait_for_line(|l| l.contains("fjord: cxl:"), Duration::from_secs(5))
        .map_err(|e| format!("no cxl line: {e}"))?;
    if !line.contains("attached; joined as node 0") {
        return Err(line);
    }
    // Its earlier entry was released: still two nodes in the table.
    let joined = metric(node.gateway, "fjord_cxl_nodes_joined")?;
    if joined != 2 {
        return Err(format!("{joined} nodes joined after the restart"));
    }
    wait_status(cluster, "node0", "UP")?;
    let before = hello_invocations(cluster.nodes[0].gateway)?;
    round(cluster)?;
    match hello_invocations(cluster.nodes[0].gateway)? > before {
        true => Ok(()),
        false => Err("HAProxy sent the restarted node nothing".into()),
    }
}

/// One node on a region file whose header page holds something else: it says it refused the
/// region, serves on its own, and the file is unchanged.
fn foreign_region(accel: Accel) -> Result<(), String> {
    let path =
        std::path::PathBuf::from(format!("/dev/shm/fjord-cxl-foreign-{}", std::process::id()));
    let mut bytes = vec![0u8; 16 << 20];
    bytes[..8].copy_from_slice(b"NOTFJORD");
    for (i, b) in bytes[8..4096].iter_mut().enumerate() {
        *b = (i * 7) as u8;
    }
    std::fs::write(&path, &bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    let result = (|| {
        let vm = crate::cluster::boot_node_on(&path, 16, accel, 0).map_err(|e| format!("{e:#}"))?;
        let line = vm
            .wait_for_line(|l| l.contains("fjord: cxl:"), Duration::from_secs(60))
            .map_err(|e| format!("no cxl line: {e}"))?;
        drop(vm);
        if !line.contains("refused and left untouched") {
            return Err(line);
        }
        let after = std::fs::read(&path).map_err(|e| format!("{e}"))?;
        match after == bytes {
            true => Ok(()),
            false => Err("the region file changed".into()),
        }
    })();
    let _ = std::fs::remove_file(Path::new(&path));
    result
}
