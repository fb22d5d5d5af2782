//! The `cxl` benchmark group (CXLfork): one node's work, in guest instructions under icount, on
//! a q35 boot with an emulated CXL region (`cargo xtask bench cxl`), on `index`, a
//! fork-per-request function whose `init` builds a 6,000-entry pointer-rich index (about 1.1 MiB
//! of heap):
//!
//! - `cxl_checkpoint_index`: writing its warm zygote into the region (pages, CRCs, image,
//!   publish);
//! - a request's latency (the orchestrator's receipt to completion) by where its instance comes
//!   from: `cxl_cold_start_<req>` (a zygote made, `init` run, then forked),
//!   `cxl_local_fork_<req>` (a fork of the warm zygote), `cxl_restore_<tiering>_<req>` (a clone
//!   of the checkpoint under each tiering, at another address than the checkpoint's, which the
//!   zygote holds: relocated), `cxl_restore_full_copy_<req>` (a clone with every page copied
//!   and relocated before the request: a full-copy restore, as CRIU's), and each restore again
//!   with `_same_address` (no zygote: the clone at the checkpoint's own address, nothing to
//!   relocate), for `get` (one entry: a few pages) and `sum` (the whole index);
//! - local memory: pages a request's clone copied into this node's memory
//!   (`cxl_clone_pages_<tiering>_<req>`), against a cold-started instance's pages (its zygote's
//!   and its child's: `cxl_cold_instance_pages`);
//! - `index` as a warm pool ([`warm`]): its checkpoint, and a new instance's request after a
//!   cold start or a restore from the checkpoint;
//! - `cxl_burst_100_clones`: 100 `get` requests submitted at once, each in a clone
//!   (migrate-on-write, no zygote: one executor serves them in turn, each clone at the
//!   checkpoint's address): receipt of the first to completion of the last, and the pages the
//!   100 copied (`cxl_burst_100_clones_pages`).
//!
//! On one host the region is as fast as local memory, and a restore on another node runs the
//! same instructions as one here: instruction counts cannot tell local from remote restores.

use crate::bench::faas::wait_halting;
use crate::bench::{Sys, report_unit};
use crate::cxl::clone::{PAGES_COPIED, Tiering};
use crate::cxl::porter::{Forced, force};
use crate::orchestrator::{self, Ticket};
use crate::runtime::{LoadedFunction, task};
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::Ordering::Relaxed;
use fjord_faas::jbsq::RequestClass;

type R<T> = Result<T, String>;

const GROUP: &str = "cxl";
/// Samples per latency.
const RUNS: usize = 21;
/// Requests in the burst.
const BURST: usize = 100;

fn submit(f: &Arc<LoadedFunction>, request: &[u8]) -> R<Ticket> {
    orchestrator::submit_task(
        RequestClass::External,
        task::root_work(f.clone(), request.to_vec()),
    )
    .map_err(|_| String::from("queue full"))
}

/// [`RUNS`] checkpoints of `index` (each retiring the one before), reported as `metric`; the
/// last one.
fn checkpoints(metric: &str) -> R<fjord_cxl::Cid> {
    let mut ckpt = Vec::new();
    let mut cid = None;
    for _ in 0..RUNS {
        if let Some(old) = cid.take() {
            crate::cxl::checkpoint::retire(old);
        }
        let t = crate::arch::cpu::rdtsc();
        let w = crate::cxl::checkpoint::checkpoint_function("index")
            .map_err(|e| format!("{metric}: {e:?}"))?;
        ckpt.push(crate::arch::cpu::rdtsc() - t);
        cid = Some(w.cid);
    }
    report_unit(GROUP, metric, Sys::Fjord, "insns", &mut ckpt);
    cid.ok_or_else(|| String::from("no checkpoint"))
}

/// One request's latency and the clone pages it copied, with instances made as `forced` says.
fn request(f: &Arc<LoadedFunction>, req: &[u8]) -> R<(u64, u64)> {
    let copied = PAGES_COPIED.load(Relaxed);
    let d = wait_halting(submit(f, req)?);
    d.result.map_err(|e| format!("{e}"))?;
    Ok((d.finished - d.arrived, PAGES_COPIED.load(Relaxed) - copied))
}

/// [`RUNS`] requests with instances made as `forced` says: latencies and pages copied.
fn measure(f: &Arc<LoadedFunction>, forced: Forced, req: &[u8]) -> R<(Vec<u64>, Vec<u64>)> {
    force(Some(forced));
    let r = (0..RUNS).map(|_| request(f, req)).collect::<R<Vec<_>>>();
    force(None);
    Ok(r?.into_iter().unzip())
}

pub fn run_group() -> Result<(), &'static str> {
    match run() {
        Ok(()) => Ok(()),
        Err(e) => {
            crate::kprintln!("fjord: bench cxl: {e}");
            force(None);
            Err("cxl")
        }
    }
}

fn run() -> R<()> {
    if crate::cxl::get().is_none() {
        return Err("no shared region (boot q35 with an ivshmem device)".into());
    }
    let f = crate::runtime::lookup("index").ok_or("no `index` function (modules=initrd)")?;
    // Warm: the zygote made, a first request served.
    force(Some(Forced::LocalFork));
    request(&f, b"get 1")?;
    force(None);
    let cid = checkpoints("cxl_checkpoint_index")?;
    let m = &f.manifest;
    let zygote_pages = crate::ufork::zygote(&f)
        .map(|(_, boundary)| {
            let base = boundary - m.stack_size - f.image_in_area();
            crate::jord::with(|j| j.initialised_pages(base).len() as u64)
        })
        .map_err(|e| format!("zygote: {e:?}"))?;
    let sources: [(&str, Forced); 6] = [
        ("cold_start", Forced::ColdStart),
        ("local_fork", Forced::LocalFork),
        (
            "restore_write",
            Forced::Restore(cid, Tiering::MigrateOnWrite),
        ),
        (
            "restore_access",
            Forced::Restore(cid, Tiering::MigrateOnAccess),
        ),
        ("restore_hybrid", Forced::Restore(cid, Tiering::Hybrid)),
        ("restore_full_copy", Forced::FullCopy(cid)),
    ];
    // First with the zygote alive, holding the checkpoint's address: clones elsewhere,
    // relocated; then with no zygote: clones at the checkpoint's own address.
    let runs = sources
        .iter()
        .map(|&(l, f)| (String::from(l), f, false))
        .chain(
            sources[2..]
                .iter()
                .map(|&(l, f)| (format!("{l}_same_address"), f, true)),
        );
    // Where the hypervisor emulates ring 0 (KVM's PVM backend), a `sum` request takes longer
    // than a function's time limit, and the burst longer than a benchmark boot may.
    let slow = crate::boot::ring0_emulated();
    let requests: &[(&str, &[u8])] = if slow {
        crate::kprintln!(
            "fjord: bench cxl: `sum`, the burst and the warm pool not run, this hypervisor emulates ring 0"
        );
        &[("get", b"get 4321")]
    } else {
        &[("get", b"get 4321"), ("sum", b"sum")]
    };
    for &(req_name, req) in requests {
        for (label, forced, same) in runs.clone() {
            if same {
                crate::ufork::drop_zygote(&f);
            }
            let label = label.as_str();
            let lazy_before = crate::ufork::lazy::stats().pages_copied;
            let (mut lat, mut pages) = measure(&f, forced, req)?;
            let lazy = crate::ufork::lazy::stats().pages_copied - lazy_before;
            report_unit(
                GROUP,
                &format!("cxl_{label}_{req_name}"),
                Sys::Fjord,
                "insns",
                &mut lat,
            );
            if let Some(kind) = label.strip_prefix("restore_") {
                report_unit(
                    GROUP,
                    &format!("cxl_clone_pages_{kind}_{req_name}"),
                    Sys::Fjord,
                    "pages",
                    &mut pages,
                );
            }
            if label == "cold_start" && req_name == "get" {
                // A cold instance holds its zygote's pages and what its child copied.
                let child = lazy / RUNS as u64;
                report_unit(
                    GROUP,
                    "cxl_cold_instance_pages",
                    Sys::Fjord,
                    "pages",
                    &mut [zygote_pages + child],
                );
            }
        }
    }
    if slow {
        crate::cxl::checkpoint::retire(cid);
        return Ok(());
    }
    // The burst: every request in a clone, all queued at once (no zygote: each clone at the
    // checkpoint's address once the one before it has ended).
    crate::ufork::drop_zygote(&f);
    force(Some(Forced::Restore(cid, Tiering::MigrateOnWrite)));
    let copied = PAGES_COPIED.load(Relaxed);
    let tickets: Vec<Ticket> = (0..BURST)
        .map(|i| submit(&f, format!("get {}", i * 37).as_bytes()))
        .collect::<R<_>>()?;
    let mut first = u64::MAX;
    let mut last = 0;
    for t in tickets {
        let d = wait_halting(t);
        d.result.map_err(|e| format!("burst: {e}"))?;
        first = first.min(d.arrived);
        last = last.max(d.finished);
    }
    force(None);
    let pages = PAGES_COPIED.load(Relaxed) - copied;
    report_unit(
        GROUP,
        "cxl_burst_100_clones",
        Sys::Fjord,
        "insns",
        &mut [last - first],
    );
    report_unit(
        GROUP,
        "cxl_burst_100_clones_pages",
        Sys::Fjord,
        "pages",
        &mut [pages],
    );
    crate::cxl::checkpoint::retire(cid);
    warm()
}

/// `index` as a warm pool (Groundhog's restore): a checkpoint of its state after `init`
/// (`cxl_warm_checkpoint_index`: an instance made, `init` run, written, destroyed), then one
/// request's latency when its instance is new, by where it comes from: a cold start
/// (`cxl_warm_cold_start_<req>`: made, `init` run, snapshotted) or a restore from the
/// checkpoint (`cxl_warm_restore_<req>`: made, every page copied in, snapshotted), the pool
/// emptied before each request. `index`'s manifest mode is deployed again afterwards.
fn warm() -> R<()> {
    let file = crate::module::module_file("index").ok_or("no module file for index")?;
    crate::module::deploy_with(
        "index",
        &file,
        Some(fjord_groundhog::GroundhogMode::Restore),
    )
    .map_err(|e| format!("index as a warm pool: {e:?}"))?;
    let r = (|| {
        let f = crate::runtime::lookup("index").ok_or("index gone")?;
        let cid = checkpoints("cxl_warm_checkpoint_index")?;
        for (req_name, req) in [("get", &b"get 4321"[..]), ("sum", &b"sum"[..])] {
            for (label, forced) in [
                ("cold_start", Forced::ColdStart),
                ("restore", Forced::Restore(cid, Tiering::MigrateOnAccess)),
            ] {
                force(Some(forced));
                let mut lat = Vec::with_capacity(RUNS);
                for _ in 0..RUNS {
                    f.warm.drain();
                    lat.push(request(&f, req)?.0);
                }
                force(None);
                report_unit(
                    GROUP,
                    &format!("cxl_warm_{label}_{req_name}"),
                    Sys::Fjord,
                    "insns",
                    &mut lat,
                );
            }
        }
        f.warm.drain();
        crate::cxl::checkpoint::retire(cid);
        Ok(())
    })();
    force(None);
    crate::module::deploy("index", &file).map_err(|e| format!("index again: {e:?}"))?;
    r
}
