//! End-to-end tests of `cargo xtask cluster` (`crate::cluster`): two q35 nodes sharing one
//! ivshmem region behind Debian's HAProxy. Both join the region (one formats it, the other
//! attaches); HAProxy's entry spreads invocations over both; with one node killed, every
//! request still succeeds and HAProxy marks it down, and once it boots again it rejoins the
//! region under its old number and HAProxy routes to it again. A region whose header is not
//! Fjord's is refused by a node and left byte for byte as it was.
//!
//! Checkpoints (CXLfork): `ticker`, started on node0, is checkpointed into the region, listed
//! on both nodes and restored on node1 under each tiering policy, mostly at other addresses
//! than the original's; each clone's heap checksums match the original's tick by tick. A
//! checkpoint corrupted in the shared file is refused; retired ones (deleted, or of a deleted
//! program) are refused with a clear error.

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
    let ckpt = checkpoint_restore(&cluster);
    let id = ckpt.as_ref().ok().cloned();
    check(
        "a μprocess checkpointed on node0 is listed on both nodes and restored on node1 at another address under each tiering policy (write, access, hybrid): every clone prints, tick by tick, the sums of its heap the original prints, forks children that see the same, and has its own pages mapped, copied, migrated and local memory in /metrics (which promtool accepts)",
        ckpt.map(|_| ()),
    );
    check(
        "a fork-per-request function's warm zygote checkpointed on node0 (index): node1, with no zygote, serves it by clones of the checkpoint (no init run there), answering as node0 does; DELETE /functions/index/zygote destroys node0's",
        function_clones(&cluster),
    );
    check(
        "CXLporter checkpoints a function after its 16th local invocation, and says so in /metrics and its log",
        porter_checkpoints(&cluster),
    );
    check(
        "a warm-pool function (index with Groundhog's restore) checkpointed on node0: node1 makes its instances from the checkpoint (no init run there, no cold start), answering as node0 does; a program's function checkpoint is 400",
        warm_clones(&cluster),
    );
    check(
        "a checkpoint whose metadata is corrupted in the region is refused (422) and never restored",
        corrupted(&cluster),
    );
    check(
        "a retired checkpoint (DELETE) and the checkpoints of a program replaced by another version or deleted cannot be restored (404, 'retired'); errors are clear",
        retired(&cluster, id.as_deref()),
    );
    let mid = kill_mid_checkpoint(&mut cluster);
    let free_before = mid.as_ref().ok().cloned();
    check(
        "a node killed in the middle of a checkpoint (32 MiB) leaves nothing listed, only a slot still being written",
        mid.map(|_| ()),
    );
    check(
        "a node killed: every request through HAProxy still succeeds, and HAProxy marks it down",
        node_down(&mut cluster),
    );
    check(
        "the node boots again: it rejoins the region under its number, and HAProxy routes to it again",
        node_back(&mut cluster),
    );
    check(
        "rejoining, it gave back what its interrupted checkpoint held: no slot left Writing, every page free again",
        interrupted_reclaimed(&cluster, free_before),
    );
    check(
        "a full region: checkpoints until the directory is full answer 503 with a clear reason; retiring them frees every page",
        full_region(&cluster),
    );
    drop(cluster);
    check(
        "a region whose header is not Fjord's is refused and left byte for byte as it was",
        foreign_region(accel),
    );
    Ok(out)
}

/// The value of `"key":` in a one-object JSON body (a number or a string).
fn field(body: &str, key: &str) -> Result<String, String> {
    let v: serde_json::Value =
        serde_json::from_str(body).map_err(|e| format!("not JSON ({e}): {body:?}"))?;
    match &v[key] {
        serde_json::Value::Number(n) => Ok(n.to_string()),
        serde_json::Value::String(s) => Ok(s.clone()),
        _ => Err(format!("no {key} in {body:?}")),
    }
}

/// The tick and sum of the first `ticker` line of μprocess `pid` on `node` at or after tick
/// `from`.
fn tick_line(
    cluster: &Cluster,
    node: usize,
    pid: &str,
    from: u64,
) -> Result<(u64, String), String> {
    let prefix = format!("ticker: μprocess {pid} tick ");
    let parse = |l: &str| -> Option<(u64, String)> {
        let rest = &l[l.find(&prefix)? + prefix.len()..];
        let (tick, sum) = rest.split_once(" sum ")?;
        Some((tick.parse().ok()?, sum.trim().to_owned()))
    };
    let line = cluster.nodes[node]
        .vm
        .wait_for_line(
            |l| parse(l).is_some_and(|(t, _)| t >= from),
            Duration::from_secs(60),
        )
        .map_err(|e| format!("node{node}: no tick {from} of μprocess {pid}: {e}"))?;
    parse(&line).ok_or_else(|| format!("unparsable {line:?}"))
}

/// The area base of μprocess `pid` on a node, from `GET /processes`.
fn area_of(addr: std::net::SocketAddr, pid: &str) -> Result<String, String> {
    let text = one(addr, "GET", "/processes", b"")?.text();
    let list: Vec<serde_json::Value> =
        serde_json::from_str(&text).map_err(|e| format!("GET /processes: {e}"))?;
    list.iter()
        .find(|p| p["pid"].as_u64().is_some_and(|n| n.to_string() == pid))
        .and_then(|p| p["area"].as_str().map(str::to_owned))
        .ok_or_else(|| format!("no μprocess {pid} in {text}"))
}

/// Starts `ticker` on node0, checkpoints it, restores it on node1 under each policy and
/// compares every clone's sums with the original's; returns the checkpoint's id.
fn checkpoint_restore(cluster: &Cluster) -> Result<String, String> {
    let (n0, n1) = (cluster.nodes[0].gateway, cluster.nodes[1].gateway);
    let r = one(n0, "POST", "/processes/ticker", b"")?;
    r.expect(201)?;
    let pid = field(&r.text(), "pid")?;
    tick_line(cluster, 0, &pid, 5)?;
    let r = one(n0, "POST", &format!("/processes/{pid}/checkpoint"), b"")?;
    r.expect(201)?;
    let id = field(&r.text(), "checkpoint")?;
    let pages: u64 = field(&r.text(), "pages")?.parse().unwrap_or(0);
    if pages == 0 {
        return Err(format!("an empty checkpoint: {}", r.text()));
    }
    for addr in [n0, n1, cluster.entry] {
        let r = one(addr, "GET", "/checkpoints", b"")?;
        r.expect(200)?;
        r.expect_body_contains(&format!(
            "{{\"id\":\"{id}\",\"name\":\"ticker\",\"kind\":\"uprocess\",\"pages\":{pages}"
        ))?;
    }
    let original = area_of(n0, &pid)?;
    let mut clones = Vec::new();
    for tiering in ["write", "access", "hybrid"] {
        let r = one(
            n1,
            "POST",
            &format!("/checkpoints/{id}/restore?tiering={tiering}"),
            b"",
        )?;
        r.expect(201)
            .map_err(|e| format!("tiering {tiering}: {e}"))?;
        clones.push((tiering, field(&r.text(), "pid")?));
    }
    let mut moved = 0;
    for (tiering, clone) in &clones {
        moved += usize::from(area_of(n1, clone)? != original);
        // Several ticks of each clone, each against the original's sum for the same tick.
        let (first, _) = tick_line(cluster, 1, clone, 0)?;
        for t in first..first + 3 {
            let (t1, sum1) = tick_line(cluster, 1, clone, t)?;
            let (t0, sum0) = tick_line(cluster, 0, &pid, t1)?;
            if (t0, &sum0) != (t1, &sum1) {
                return Err(format!(
                    "tiering {tiering}: clone {clone} tick {t1} sum {sum1}, original tick {t0} sum {sum0}"
                ));
            }
        }
    }
    if moved < 2 {
        return Err(format!(
            "{moved} of 3 clones at another address than the original's {original}"
        ));
    }
    // A clone forks too: its child hashes what it inherited (every 25 ticks).
    for (tiering, clone) in &clones {
        let line = cluster.nodes[1]
            .vm
            .wait_for_line(
                |l| l.contains(&format!("ticker: μprocess {clone} tick ")) && l.contains(" child "),
                Duration::from_secs(60),
            )
            .map_err(|e| format!("tiering {tiering}: clone {clone} did not fork: {e}"))?;
        if !line.contains("ended Some(Exited(0))") {
            return Err(format!("tiering {tiering}: {line}"));
        }
    }
    // Each clone's own counts: local memory at least what it copied; migrate-on-access maps
    // nothing in place.
    let text = one(n1, "GET", "/metrics", b"")?.text();
    for (tiering, clone) in &clones {
        let per = |name: &str| clone_series(&text, name, &id, clone);
        let (mapped, copied, migrated, local) = (
            per("fjord_cxl_clone_pages_mapped")?,
            per("fjord_cxl_clone_pages_copied")?,
            per("fjord_cxl_clone_pages_migrated")?,
            per("fjord_cxl_clone_local_bytes")?,
        );
        if copied + migrated == 0
            || local < (copied + migrated) * 4096
            || (*tiering == "access" && mapped != 0)
        {
            return Err(format!(
                "tiering {tiering}: clone {clone} counts {mapped} pages mapped, {copied} copied, \
                 {migrated} migrated, {local} bytes local"
            ));
        }
    }
    // With clones' labelled samples in it, node1's /metrics still parses, strictly and for
    // Prometheus.
    fjord_faas::metrics::check::check_exposition(&text)
        .map_err(|e| format!("node1's /metrics: {e}"))?;
    let promtool = crate::host_deps::ensure_promtool().map_err(|e| format!("{e:#}"))?;
    crate::e2e_http::promtool_check(&promtool, &text)?;
    let attached = metric(n1, "fjord_cxl_pages_attached_total")?;
    let copied = metric(n1, "fjord_cxl_pages_copied_total")?;
    let restored = metric(n1, "fjord_cxl_restores_total")?;
    if attached == 0 || copied == 0 || restored < 3 {
        return Err(format!(
            "node1 counts {attached} pages attached in place, {copied} copied, {restored} restores"
        ));
    }
    for (_, clone) in &clones {
        one(n1, "DELETE", &format!("/processes/{clone}"), b"")?.expect(204)?;
    }
    one(n0, "DELETE", &format!("/processes/{pid}"), b"")?.expect(204)?;
    Ok(id)
}

/// The value of the per-clone sample `name` of μprocess `pid`, a clone of checkpoint `id`, in
/// exposition `text`.
fn clone_series(text: &str, name: &str, id: &str, pid: &str) -> Result<u64, String> {
    let prefix = format!("{name}{{checkpoint=\"{id}\",");
    let pid = format!(",pid=\"{pid}\"}}");
    text.lines()
        .filter(|l| l.starts_with(&prefix))
        .find_map(|l| l.split_once(&pid)?.1.trim().parse().ok())
        .ok_or_else(|| format!("no {name} for clone {pid} of {id} in /metrics"))
}

/// `fjord_cxlporter_decisions_total{decision=...}` on a node.
fn decisions(addr: std::net::SocketAddr, decision: &str) -> Result<u64, String> {
    metric(
        addr,
        &format!("fjord_cxlporter_decisions_total{{decision=\"{decision}\"}}"),
    )
}

fn function_clones(cluster: &Cluster) -> Result<(), String> {
    let (n0, n1) = (cluster.nodes[0].gateway, cluster.nodes[1].gateway);
    let requests: [&[u8]; 3] = [b"get 5", b"get 4321", b"sum"];
    let want = index_answers(n0, &requests)?;
    let r = one(n0, "POST", "/functions/index/checkpoint", b"")?;
    r.expect(201)?;
    let id = field(&r.text(), "checkpoint")?;
    let listed = one(n1, "GET", "/checkpoints", b"")?.text();
    if !listed.contains(&format!(
        "{{\"id\":\"{id}\",\"name\":\"index\",\"kind\":\"function\""
    )) {
        return Err(format!("node1 lists {listed}"));
    }
    let cold = decisions(n1, "cold_start")?;
    let got = index_answers(n1, &requests)?;
    if got != want {
        return Err(format!("node1 answers {got:?}, node0 {want:?}"));
    }
    let restored = decisions(n1, "restore")?;
    if restored < 3 || decisions(n1, "cold_start")? != cold {
        return Err(format!(
            "node1: {restored} restores, cold starts {cold} → {}",
            decisions(n1, "cold_start")?
        ));
    }
    // The same module deployed again on node1 lies at another code address there: clones of
    // node0's checkpoint still serve it (their pointers into the code moved), no cold start.
    let index = app_bytes("index")?;
    one(n1, "PUT", "/functions/index", &index)?.expect(200)?;
    let got = index_answers(n1, &requests)?;
    if got != want {
        return Err(format!(
            "redeployed on node1, it answers {got:?}, node0 {want:?}"
        ));
    }
    if decisions(n1, "cold_start")? != cold || decisions(n1, "restore")? < restored + 3 {
        return Err(format!(
            "redeployed on node1: restores {restored} → {}, cold starts {cold} → {}",
            decisions(n1, "restore")?,
            decisions(n1, "cold_start")?
        ));
    }
    one(n0, "POST", "/functions/ticker/checkpoint", b"")?.expect(400)?;
    one(n0, "POST", "/functions/nope/checkpoint", b"")?.expect(404)?;
    one(n0, "DELETE", "/functions/index/zygote", b"")?.expect(204)?;
    one(n0, "DELETE", "/functions/index/zygote", b"")?.expect(404)?;
    Ok(())
}

/// `index`'s answers (each 200) to `requests` on the node at `addr`, in order.
fn index_answers(addr: std::net::SocketAddr, requests: &[&[u8]]) -> Result<Vec<String>, String> {
    requests
        .iter()
        .map(|req| {
            let r = one(addr, "POST", "/invoke/index", req)?;
            r.expect(200)?;
            Ok(r.text())
        })
        .collect()
}

/// The module of app `name`, built.
fn app_bytes(name: &str) -> Result<Vec<u8>, String> {
    let apps = crate::apps_build::build_apps().map_err(|e| format!("{e:#}"))?;
    apps.into_iter()
        .find(|a| a.name == name)
        .map(|a| a.bytes)
        .ok_or_else(|| format!("{name} was not built"))
}

fn warm_clones(cluster: &Cluster) -> Result<(), String> {
    let (n0, n1) = (cluster.nodes[0].gateway, cluster.nodes[1].gateway);
    let index = app_bytes("index")?;
    for n in [n0, n1] {
        one(n, "PUT", "/functions/index?groundhog=restore", &index)?.expect(200)?;
    }
    // Checkpointed before node0 serves it, so that CXLporter (which counts index's earlier
    // invocations) finds this checkpoint instead of writing one of its own.
    let r = one(n0, "POST", "/functions/index/checkpoint", b"")?;
    r.expect(201)?;
    let id = field(&r.text(), "checkpoint")?;
    let requests: [&[u8]; 3] = [b"get 7", b"get 4000", b"sum"];
    let want = index_answers(n0, &requests)?;
    let (cold, restored) = (decisions(n1, "cold_start")?, decisions(n1, "restore")?);
    let got = index_answers(n1, &requests)?;
    if got != want {
        return Err(format!("node1 answers {got:?}, node0 {want:?}"));
    }
    let (cold1, restored1) = (decisions(n1, "cold_start")?, decisions(n1, "restore")?);
    if cold1 != cold || restored1 <= restored {
        return Err(format!(
            "node1: cold starts {cold} → {cold1}, restores {restored} → {restored1}"
        ));
    }
    one(n0, "DELETE", &format!("/checkpoints/{id}"), b"")?.expect(204)?;
    for n in [n0, n1] {
        one(n, "PUT", "/functions/index", &index)?.expect(200)?;
    }
    Ok(())
}

fn porter_checkpoints(cluster: &Cluster) -> Result<(), String> {
    let n0 = cluster.nodes[0].gateway;
    // Retire what the previous check wrote: node0 has a warm zygote and no checkpoint.
    let text = one(n0, "GET", "/checkpoints", b"")?.text();
    let list: Vec<serde_json::Value> = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    for c in list.iter().filter(|c| c["name"] == "index") {
        let id = c["id"].as_str().unwrap_or("");
        one(n0, "DELETE", &format!("/checkpoints/{id}"), b"")?.expect(204)?;
    }
    let before = decisions(n0, "checkpoint")?;
    for i in 0..16 {
        one(n0, "POST", "/invoke/index", format!("get {i}").as_bytes())?.expect(200)?;
    }
    let line = cluster.nodes[0]
        .vm
        .wait_for_line(
            |l| l.contains("cxlporter: index: checkpointed as"),
            Duration::from_secs(10),
        )
        .map_err(|e| format!("no checkpoint line: {e}"))?;
    if decisions(n0, "checkpoint")? != before + 1 {
        return Err(format!("{line}: the decision is not counted"));
    }
    let listed = one(n0, "GET", "/checkpoints", b"")?.text();
    if !listed.contains("\"name\":\"index\",\"kind\":\"function\"") {
        return Err(format!("not listed: {listed}"));
    }
    Ok(())
}

/// Starts a `ticker` on node0, waits for its tick `tick`, checkpoints it and ends it; the
/// checkpoint's id.
fn checkpoint_ticker(cluster: &Cluster, tick: u64) -> Result<String, String> {
    let n0 = cluster.nodes[0].gateway;
    let r = one(n0, "POST", "/processes/ticker", b"")?;
    r.expect(201)?;
    let pid = field(&r.text(), "pid")?;
    tick_line(cluster, 0, &pid, tick)?;
    let r = one(n0, "POST", &format!("/processes/{pid}/checkpoint"), b"")?;
    r.expect(201)?;
    one(n0, "DELETE", &format!("/processes/{pid}"), b"")?.expect(204)?;
    field(&r.text(), "checkpoint")
}

/// Checkpoints a `ticker`, flips a byte of its name in the shared file, and restores it.
fn corrupted(cluster: &Cluster) -> Result<(), String> {
    let id = checkpoint_ticker(cluster, 2)?;
    let slot: u64 = id
        .split('.')
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad id {id}"))?;
    // The directory starts at 4 KiB, 256 bytes a slot; the name is at byte 180 of its slot.
    let at = 4096 + slot * 256 + 180;
    let mut bytes = std::fs::read(&cluster.region).map_err(|e| format!("region: {e}"))?;
    let b = bytes
        .get_mut(at as usize)
        .ok_or("region too small".to_owned())?;
    *b ^= 0x20;
    {
        use std::io::{Seek, SeekFrom};
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(&cluster.region)
            .map_err(|e| format!("region: {e}"))?;
        f.seek(SeekFrom::Start(at)).map_err(|e| e.to_string())?;
        f.write_all(&bytes[at as usize..at as usize + 1])
            .map_err(|e| e.to_string())?;
    }
    let r = one(
        cluster.nodes[1].gateway,
        "POST",
        &format!("/checkpoints/{id}/restore"),
        b"",
    )?;
    r.expect(422)?;
    r.expect_body_contains("corrupt")?;
    let listed = one(cluster.nodes[1].gateway, "GET", "/checkpoints", b"")?.text();
    if listed.contains(&format!("\"{id}\"")) {
        return Err(format!("the corrupt checkpoint is still listed: {listed}"));
    }
    Ok(())
}

/// Retires checkpoint `id` by DELETE, checkpoints another `ticker` and deletes the program on
/// node0: neither checkpoint restores on node1.
fn retired(cluster: &Cluster, id: Option<&str>) -> Result<(), String> {
    let (n0, n1) = (cluster.nodes[0].gateway, cluster.nodes[1].gateway);
    let id = id.ok_or("no checkpoint from the restore check")?;
    one(n1, "DELETE", &format!("/checkpoints/{id}"), b"")?.expect(204)?;
    one(n1, "DELETE", &format!("/checkpoints/{id}"), b"")?.expect(404)?;
    let r = one(n1, "POST", &format!("/checkpoints/{id}/restore"), b"")?;
    r.expect(404)?;
    r.expect_body_contains("retired")?;
    // Replaced: another version of the program (its module and one more byte) deployed on
    // node1 retires the checkpoints of the old one, for every node.
    let first = checkpoint_ticker(cluster, 1)?;
    let mut other = app_bytes("ticker")?;
    other.push(0);
    one(n1, "PUT", "/functions/ticker", &other)?.expect(200)?;
    let r = one(n0, "POST", &format!("/checkpoints/{first}/restore"), b"")?;
    r.expect(404)?;
    r.expect_body_contains("retired")?;
    let second = checkpoint_ticker(cluster, 1)?;
    one(n0, "DELETE", "/functions/ticker", b"")?.expect(204)?;
    let r = one(n1, "POST", &format!("/checkpoints/{second}/restore"), b"")?;
    r.expect(404)?;
    r.expect_body_contains("retired")?;
    let r = one(n1, "POST", "/checkpoints/200.1/restore", b"")?;
    r.expect(404)?;
    r.expect_body_contains("no such checkpoint")?;
    one(n1, "POST", "/checkpoints/x/restore", b"")?.expect(400)?;
    one(
        n1,
        "POST",
        &format!("/checkpoints/{second}/restore?tiering=fast"),
        b"",
    )?
    .expect(400)?;
    one(n1, "POST", "/processes/999/checkpoint", b"")?.expect(404)?;
    Ok(())
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

/// The state byte of each directory slot in the shared file (1: Writing, 2: Ready).
fn slot_states(region: &Path) -> Result<Vec<u8>, String> {
    let bytes = std::fs::read(region).map_err(|e| format!("region: {e}"))?;
    Ok((0..256)
        .map(|s| bytes.get(4096 + s * 256).copied().unwrap_or(0))
        .collect())
}

/// The ids of the checkpoints a node lists.
fn checkpoint_ids(addr: std::net::SocketAddr) -> Result<Vec<String>, String> {
    let text = one(addr, "GET", "/checkpoints", b"")?.text();
    let list: Vec<serde_json::Value> = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    Ok(list
        .iter()
        .filter_map(|c| c["id"].as_str().map(str::to_owned))
        .collect())
}

/// Starts `hoard` (32 MiB) on node0 and asks node0 to checkpoint it; kills node0 as soon as
/// the shared file shows a slot being written. Returns node1's free region pages and the
/// checkpoints it listed before.
fn kill_mid_checkpoint(cluster: &mut Cluster) -> Result<(u64, Vec<String>), String> {
    let (n0, n1) = (cluster.nodes[0].gateway, cluster.nodes[1].gateway);
    let free = metric(n1, "fjord_cxl_free_pages")?;
    let listed_before = checkpoint_ids(n1)?;
    let writing_before = slot_states(&cluster.region)?
        .iter()
        .filter(|&&s| s == 1)
        .count();
    let r = one(n0, "POST", "/processes/hoard", b"")?;
    r.expect(201)?;
    let pid = field(&r.text(), "pid")?;
    cluster.nodes[0]
        .vm
        .wait_for_line(
            |l| l.contains(&format!("hoard: μprocess {pid} holds")),
            Duration::from_secs(60),
        )
        .map_err(|e| format!("hoard did not fill its heap: {e}"))?;
    let path = format!("/processes/{pid}/checkpoint");
    let request = std::thread::spawn(move || one(n0, "POST", &path, b"").map(|r| r.status));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let writing = slot_states(&cluster.region)?
            .iter()
            .filter(|&&s| s == 1)
            .count();
        if writing > writing_before {
            break;
        }
        if request.is_finished() || Instant::now() > deadline {
            return Err("the checkpoint ended before node0 could be killed in it".into());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    cluster.kill_node(0);
    let _ = request.join();
    let listed = one(n1, "GET", "/checkpoints", b"")?.text();
    if listed.contains("\"hoard\"") {
        // What the nodes said of the region, for a failure that depends on timing.
        let said: Vec<String> = cluster
            .nodes
            .iter()
            .flat_map(|n| n.vm.lines())
            .filter(|l| l.contains("cxl"))
            .collect();
        let tail = &said[said.len().saturating_sub(12)..];
        return Err(format!(
            "a checkpoint of the killed node is listed: {listed}; the nodes' last words on the region: {tail:?}"
        ));
    }
    if !slot_states(&cluster.region)?.contains(&1) {
        return Err("no slot left Writing by the killed node".into());
    }
    Ok((free, listed_before))
}

fn node_down(cluster: &mut Cluster) -> Result<(), String> {
    if !cluster.nodes[0].vm.has_exited() {
        cluster.kill_node(0);
    }
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

fn interrupted_reclaimed(
    cluster: &Cluster,
    before: Option<(u64, Vec<String>)>,
) -> Result<(), String> {
    let (free, listed_before) = before.ok_or("no interrupted checkpoint to look at")?;
    if slot_states(&cluster.region)?.contains(&1) {
        return Err("a slot is still Writing".into());
    }
    // CXLporter may have checkpointed a function since (hello, after its 16th invocation on
    // a node): those go first.
    let n1 = cluster.nodes[1].gateway;
    for id in checkpoint_ids(n1)? {
        if !listed_before.contains(&id) {
            one(n1, "DELETE", &format!("/checkpoints/{id}"), b"")?.expect(204)?;
        }
    }
    let now = metric(cluster.nodes[1].gateway, "fjord_cxl_free_pages")?;
    if now != free {
        return Err(format!(
            "{now} free region pages, {free} before the checkpoint"
        ));
    }
    Ok(())
}

fn full_region(cluster: &Cluster) -> Result<(), String> {
    let n1 = cluster.nodes[1].gateway;
    let free = metric(n1, "fjord_cxl_free_pages")?;
    let r = one(n1, "POST", "/processes/ticker", b"")?;
    r.expect(201)?;
    let pid = field(&r.text(), "pid")?;
    tick_line(cluster, 1, &pid, 1)?;
    let mut ids = Vec::new();
    let refusal = loop {
        let r = one(n1, "POST", &format!("/processes/{pid}/checkpoint"), b"")?;
        if r.status != 201 {
            break r;
        }
        ids.push(field(&r.text(), "checkpoint")?);
        if ids.len() > 256 {
            return Err("more checkpoints than directory slots".into());
        }
    };
    refusal.expect(503)?;
    refusal.expect_body_contains("the shared region is full")?;
    for id in &ids {
        one(n1, "DELETE", &format!("/checkpoints/{id}"), b"")?.expect(204)?;
    }
    one(n1, "DELETE", &format!("/processes/{pid}"), b"")?.expect(204)?;
    let now = metric(n1, "fjord_cxl_free_pages")?;
    if now != free {
        return Err(format!(
            "{now} free pages after retiring {} checkpoints, {free} before",
            ids.len()
        ));
    }
    Ok(())
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
