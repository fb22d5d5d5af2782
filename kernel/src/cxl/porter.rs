//! CXLporter on this node (CXLfork, ASPLOS '25 §6): where each function instance comes from,
//! and the upkeep around it. The decisions are `fjord_cxl::porter::Policy`'s (host-tested);
//! this module feeds it what the node measures and carries them out:
//!
//! - for a function whose instances are not forked (a warm pool, Groundhog), when its pool has
//!   no idle instance for a request ([`warm_initialised`], the module layer's hook): a new
//!   instance restored past its `init` from a checkpoint of the function's version in the
//!   region (`super::checkpoint::restore_warm`: at the checkpoint's own address, every page
//!   copied, since Groundhog's snapshot needs them local), else a cold start (its `init` run
//!   here); its requests count towards its checkpoint as a fork-per-request function's local
//!   forks do, and its idle instances go after the keep-alive as a zygote does;
//! - per request ([`instance_for`], the module layer's forker while a region is attached): a
//!   local fork of the warm zygote; else a clone of a checkpoint of the function's version in
//!   the region, with the tiering the policy picks from the node's memory use and the
//!   function's mean latency by source; else a cold start (a zygote made and its `init` run
//!   here). A restore that fails (the checkpoint retired meanwhile, a corrupt page list) falls
//!   back to a cold start;
//! - each request's instance, when it ends, gives its source's mean latency a sample (from the
//!   instance's making to its end);
//! - every 100 ms ([`tick`], from the network loop): the checkpoint the policy asks for after
//!   the 16th local invocation; zygotes idle past their keep-alive (10 min, or 10 s under memory
//!   pressure) destroyed; under region pressure, unreferenced checkpoints retired.
//!
//! Every decision is counted in `/metrics` (`fjord_cxlporter_decisions_total{decision=…}`) and
//! logged in one line (`cxlporter: <function>: …`); a request's source is logged when it
//! differs from the function's previous one.

use super::checkpoint::{self, CheckpointError};
use super::clone::Tiering;
use super::get;
use crate::module::LoadedFunction;
use crate::module::instance::Instance;
use crate::orchestrator::InvokeFailure;
use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use fjord_cxl::porter::{Candidate, Mean, Policy, Source};
use fjord_cxl::{Cid, Kind};
use spin::Mutex;

/// The policy's thresholds (the paper's).
const POLICY: Policy = Policy::PAPER;

/// The decisions counted in `/metrics`, as their labels.
pub static DECISIONS: [[(&str, &str); 1]; 11] = [
    [("decision", "local_fork")],
    [("decision", "restore")],
    [("decision", "cold_start")],
    [("decision", "restore_failed")],
    [("decision", "checkpoint")],
    [("decision", "tiering_write")],
    [("decision", "tiering_access")],
    [("decision", "tiering_hybrid")],
    [("decision", "keep_alive_expired")],
    [("decision", "keep_alive_expired_under_pressure")],
    [("decision", "checkpoint_reclaimed")],
];

/// Counts of [`DECISIONS`].
pub static COUNTS: [AtomicU64; DECISIONS.len()] = [const { AtomicU64::new(0) }; DECISIONS.len()];

fn count(decision: &str) {
    if let Some(i) = DECISIONS.iter().position(|[(_, d)]| *d == decision) {
        COUNTS[i].fetch_add(1, Relaxed);
    }
}

/// What the porter knows of one function on this node.
#[derive(Default)]
struct FnState {
    /// The module version the rest is about.
    digest: u64,
    /// Requests served by local forks since the zygote was made.
    served_local: u64,
    /// A checkpoint of this version in the region.
    checkpoint: Option<Cid>,
    /// The policy asked for a checkpoint; [`tick`] writes it.
    checkpoint_wanted: bool,
    /// When it last had a request (TSC).
    last_used: u64,
    /// The source of its last request.
    last_source: Option<Source>,
    /// The tiering of its last clone.
    last_tiering: Option<Tiering>,
    /// Mean latency of its requests served by clones and by local forks.
    restored: Mean,
    local: Mean,
}

struct Porter {
    functions: BTreeMap<String, FnState>,
    /// Instances being served: PD → function, source, when it was made (TSC).
    live: BTreeMap<u16, (String, Source, u64)>,
    /// When each checkpoint was last written or restored from (TSC), for reclaiming.
    used: BTreeMap<Cid, u64>,
}

static PORTER: Mutex<Porter> = Mutex::new(Porter {
    functions: BTreeMap::new(),
    live: BTreeMap::new(),
    used: BTreeMap::new(),
});

fn with<R>(f: impl FnOnce(&mut Porter) -> R) -> R {
    crate::arch::cpu::without_interrupts(|| f(&mut PORTER.lock()))
}

/// Percent of this node's memory in use.
fn memory_used_percent() -> u8 {
    let total = crate::mm::frames::total_frames().max(1);
    let free = crate::mm::frames::free_frames().min(total);
    ((total - free) * 100 / total) as u8
}

/// The tiering every clone gets, when the operator pinned one (`cxl_tiering=`).
static PINNED: Mutex<Option<Tiering>> = Mutex::new(None);

/// Takes over making functions' instances, when this node has a region; with `pinned`, every
/// clone gets that tiering instead of the policy's.
pub fn enable(pinned: Option<Tiering>) {
    *PINNED.lock() = pinned;
    if get().is_some() {
        crate::module::set_forker(instance_for);
        crate::module::set_fork_end(instance_ended);
        crate::module::set_warm_hooks(crate::module::WarmHooks {
            initialised: warm_initialised,
            requested: warm_requested,
        });
    }
}

/// The porter's state of function `f` (reset when `f` is another version), updated by `with`.
fn with_function<R>(p: &mut Porter, f: &LoadedFunction, with: impl FnOnce(&mut FnState) -> R) -> R {
    let name = f.manifest.name.as_str();
    // One look-up for a function seen before (this runs for every warm request); the name is
    // copied only the first time.
    let st = match p.functions.get_mut(name) {
        Some(st) => st,
        None => p.functions.entry(String::from(name)).or_default(),
    };
    if st.digest != f.digest {
        *st = FnState {
            digest: f.digest,
            ..FnState::default()
        };
    }
    with(st)
}

/// A request of warm function `f` takes an instance: it counts towards the function's
/// checkpoint and its keep-alive.
fn warm_requested(f: &LoadedFunction) {
    let now = crate::arch::time::now();
    with(|p| {
        with_function(p, f, |st| {
            st.last_used = now;
            st.served_local += 1;
            if POLICY.should_checkpoint(st.served_local, true, st.checkpoint.is_some()) {
                st.checkpoint_wanted = true;
            }
        })
    });
}

/// A new instance of warm function `f` past its `init`, restored from a checkpoint of its
/// version; `None` for a cold start (see the module documentation).
fn warm_initialised(f: &LoadedFunction) -> Option<Instance> {
    let forced = crate::arch::cpu::without_interrupts(|| *FORCED.lock());
    let checkpoint = match forced {
        Some(Forced::Restore(cid, _) | Forced::FullCopy(cid)) => Some(cid),
        Some(Forced::ColdStart | Forced::LocalFork) => None,
        None => {
            let known =
                with(|p| with_function(p, f, |st| st.checkpoint)).filter(|&c| still_ready(c));
            let found = known.or_else(|| find_checkpoint(f));
            with(|p| with_function(p, f, |st| st.checkpoint = found));
            found
        }
    };
    let Some(cid) = checkpoint else {
        count("cold_start");
        note_source(f, Source::ColdStart);
        return None;
    };
    match checkpoint::restore_warm(f, cid) {
        Ok(inst) => {
            let now = crate::arch::time::now();
            with(|p| {
                p.used.insert(cid, now);
                with_function(p, f, |st| st.checkpoint = Some(cid));
            });
            count("restore");
            note_source(f, Source::Restore);
            Some(inst)
        }
        Err(e) => {
            restore_failed(f, cid, e);
            count("cold_start");
            note_source(f, Source::ColdStart);
            None
        }
    }
}

/// A restore of `f` from `cid` failed (`e`): counted, logged, and the checkpoint forgotten
/// (the caller cold-starts).
fn restore_failed(f: &LoadedFunction, cid: Cid, e: checkpoint::CloneError) {
    count("restore_failed");
    log::warn!(
        "cxlporter: {}: restore from checkpoint {}.{} failed ({e:?}): cold start",
        f.manifest.name.as_str(),
        cid.slot,
        cid.epoch
    );
    with(|p| with_function(p, f, |st| st.checkpoint = None));
}

/// Checkpoint `cid` of function `name` was written on request (`POST
/// /functions/<name>/checkpoint`): the porter restores from it and wants no other.
pub fn note_checkpoint(name: &str, cid: Cid) {
    let Some(f) = crate::module::lookup(name) else {
        return;
    };
    with(|p| {
        with_function(p, &f, |st| {
            st.checkpoint = Some(cid);
            st.checkpoint_wanted = false;
        })
    });
}

/// Logs where `f`'s instances come from when that changed.
fn note_source(f: &LoadedFunction, source: Source) {
    let changed =
        with(|p| with_function(p, f, |st| st.last_source.replace(source) != Some(source)));
    if changed {
        log::info!(
            "cxlporter: {}: instances made by {}",
            f.manifest.name.as_str(),
            source.name()
        );
    }
}

/// The ready checkpoint of function `f`'s version in the region, if any.
fn find_checkpoint(f: &LoadedFunction) -> Option<Cid> {
    let cxl = get()?;
    cxl.region
        .list()
        .into_iter()
        .find(|c| {
            c.kind == Kind::Function
                && c.name == f.manifest.name.as_str()
                && c.generation == f.digest
        })
        .map(|c| c.cid)
}

/// Whether checkpoint `cid` is still ready in the region.
fn still_ready(cid: Cid) -> bool {
    get()
        .and_then(|cxl| cxl.region.slot_state(cid.slot))
        .is_some_and(|s| s.state == fjord_cxl::State::Ready && s.epoch == cid.epoch)
}

/// Where every request's instance comes from while a benchmark forces it (instead of the
/// policy's choice).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forced {
    /// The zygote destroyed first, then made again (its `init` run) and forked.
    ColdStart,
    /// A fork of the warm zygote.
    LocalFork,
    /// A clone of this checkpoint with this tiering.
    Restore(Cid, Tiering),
    /// A clone of this checkpoint with every page copied (and relocated) before the request
    /// runs: a full-copy restore, as CRIU's.
    FullCopy(Cid),
}

static FORCED: Mutex<Option<Forced>> = Mutex::new(None);

/// Forces where instances come from (`None`: the policy decides again); for benchmarks.
pub fn force(forced: Option<Forced>) {
    crate::arch::cpu::without_interrupts(|| *FORCED.lock() = forced);
}

/// An instance made as `forced` says.
fn forced_instance(f: &LoadedFunction, forced: Forced) -> Result<Instance, InvokeFailure> {
    let fail = |e| {
        log::warn!("cxlporter: forced {forced:?}: {e:?}");
        InvokeFailure::OutOfMemory
    };
    match forced {
        Forced::ColdStart => {
            crate::ufork::drop_zygote(f);
            crate::ufork::fork_instance(f)
        }
        Forced::LocalFork => crate::ufork::fork_instance(f),
        Forced::Restore(cid, t) => checkpoint::clone_function(f, cid, t).map_err(fail),
        Forced::FullCopy(cid) => {
            let inst =
                checkpoint::clone_function(f, cid, Tiering::MigrateOnAccess).map_err(fail)?;
            let base = inst.boundary - f.manifest.stack_size - f.image_in_area();
            crate::jord::settled(|j| {
                j.settle_paged(base);
                j.take_pager_flushes()
            });
            Ok(inst)
        }
    }
}

/// A request's instance of fork-per-request function `f` (see the module documentation).
fn instance_for(f: &LoadedFunction) -> Result<Instance, InvokeFailure> {
    if let Some(forced) = crate::arch::cpu::without_interrupts(|| *FORCED.lock()) {
        return forced_instance(f, forced);
    }
    let name = f.manifest.name.as_str();
    let now = crate::arch::time::now();
    let zygote = crate::ufork::has_zygote(f);
    let known = with(|p| {
        with_function(p, f, |st| {
            st.last_used = now;
            st.checkpoint
        })
    });
    // A known checkpoint is checked (one load: retired since?); the directory is searched only
    // while this node has no zygote (a local fork needs no checkpoint).
    let known = known.filter(|&c| still_ready(c));
    let checkpoint = match known {
        Some(c) => Some(c),
        None if !zygote => find_checkpoint(f),
        None => None,
    };
    with(|p| {
        if let Some(st) = p.functions.get_mut(name) {
            st.checkpoint = checkpoint;
        }
    });
    let mut source = POLICY.source(zygote, checkpoint.is_some());
    let mut made = None;
    if let (Source::Restore, Some(cid)) = (source, checkpoint) {
        let tiering = with(|p| {
            let st = p.functions.get_mut(name)?;
            let pinned = *PINNED.lock();
            let t = pinned
                .unwrap_or_else(|| POLICY.tiering(memory_used_percent(), st.restored, st.local));
            let changed = st.last_tiering.replace(t) != Some(t);
            Some((t, changed))
        });
        let (tiering, changed) = tiering.unwrap_or_default();
        if changed {
            count(match tiering {
                Tiering::MigrateOnWrite => "tiering_write",
                Tiering::MigrateOnAccess => "tiering_access",
                Tiering::Hybrid => "tiering_hybrid",
            });
            log::info!(
                "cxlporter: {name}: clones get tiering {} (memory {} % used)",
                tiering.name(),
                memory_used_percent()
            );
        }
        match checkpoint::clone_function(f, cid, tiering) {
            Ok(inst) => {
                with(|p| p.used.insert(cid, now));
                made = Some(inst);
            }
            Err(e) => {
                restore_failed(f, cid, e);
                source = Source::ColdStart;
            }
        }
    }
    let inst = match made {
        Some(inst) => inst,
        None => crate::ufork::fork_instance(f)?,
    };
    count(source.name());
    let changed = with(|p| {
        p.live
            .insert(inst.pd.raw(), (String::from(name), source, now));
        let st = p.functions.get_mut(name)?;
        if source == Source::LocalFork {
            st.served_local += 1;
            if POLICY.should_checkpoint(st.served_local, true, st.checkpoint.is_some()) {
                st.checkpoint_wanted = true;
            }
        }
        Some(st.last_source.replace(source) != Some(source))
    });
    if changed == Some(true) {
        log::info!("cxlporter: {name}: requests served by {}", source.name());
    }
    Ok(inst)
}

/// A request's instance of fork-per-request function `f` ended: its source's latency sample.
/// Whether the instance may be kept for the next local fork (not a clone).
fn instance_ended(f: &LoadedFunction, pd: fjord_pd::PdId) -> bool {
    let now = crate::arch::time::now();
    with(|p| {
        let Some((name, source, made)) = p.live.remove(&pd.raw()) else {
            return true;
        };
        let ns = crate::arch::time::ticks_to_ns(now.saturating_sub(made));
        if let Some(st) = p.functions.get_mut(&name)
            && st.digest == f.digest
        {
            match source {
                Source::Restore => st.restored.add(ns),
                Source::LocalFork => st.local.add(ns),
                Source::ColdStart => {}
            }
        }
        // A clone's area sits where the next clones of its checkpoint want theirs.
        source != Source::Restore
    })
}

/// When [`tick`] next does its work (TSC).
static NEXT_TICK: AtomicU64 = AtomicU64::new(0);
/// How often [`tick`] does its work.
const TICK_MS: u64 = 100;

/// The porter's upkeep (see the module documentation); cheap when not due.
pub fn tick() {
    let now = crate::arch::time::now();
    if now < NEXT_TICK.load(Relaxed) || get().is_none() {
        return;
    }
    NEXT_TICK.store(crate::arch::time::deadline_after_ms(TICK_MS), Relaxed);
    checkpoint_wanted();
    expire_zygotes(now);
    reclaim();
}

/// Writes the checkpoints the policy asked for.
fn checkpoint_wanted() {
    let wanted: Vec<(String, u64)> = with(|p| {
        p.functions
            .iter_mut()
            .filter(|(_, st)| st.checkpoint_wanted)
            .map(|(n, st)| {
                st.checkpoint_wanted = false;
                (n.clone(), st.served_local)
            })
            .collect()
    });
    for (name, served) in wanted {
        let Some(f) = crate::module::lookup(&name) else {
            continue;
        };
        // Another node may have written one meanwhile.
        let done = match find_checkpoint(&f) {
            Some(cid) => Ok(cid),
            None => checkpoint::checkpoint_function(&name).map(|w| {
                count("checkpoint");
                log::info!(
                    "cxlporter: {name}: checkpointed as {}.{} after {served} local invocations",
                    w.cid.slot,
                    w.cid.epoch
                );
                w.cid
            }),
        };
        match done {
            Ok(cid) => with(|p| {
                p.used.insert(cid, crate::arch::time::now());
                if let Some(st) = p.functions.get_mut(&name)
                    && st.digest == f.digest
                {
                    st.checkpoint = Some(cid);
                }
            }),
            Err(CheckpointError::Region(e)) => {
                log::warn!("cxlporter: {name}: no checkpoint, the region refused it: {e:?}")
            }
            Err(e) => log::warn!("cxlporter: {name}: no checkpoint: {e:?}"),
        }
    }
}

/// Destroys the zygotes, and the warm pools' idle instances, of functions idle past their
/// keep-alive.
fn expire_zygotes(now: u64) {
    let used = memory_used_percent();
    let keep = crate::arch::time::ms_to_ticks(POLICY.keep_alive_ms(used));
    let idle: Vec<String> = with(|p| {
        p.functions
            .iter()
            .filter(|(_, st)| now.saturating_sub(st.last_used) > keep)
            .map(|(n, _)| n.clone())
            .collect()
    });
    for name in idle {
        let Some(f) = crate::module::lookup(&name) else {
            with(|p| p.functions.remove(&name));
            continue;
        };
        let gone = if f.groundhog_mode() == fjord_groundhog::GroundhogMode::Fork {
            // The PDs its ended requests left for its next forks go with the zygote.
            f.warm.drain();
            crate::ufork::drop_zygote(&f)
        } else {
            let idle = f.warm.idle();
            f.warm.drain();
            idle > 0
        };
        if !gone {
            continue;
        }
        let pressure = POLICY.under_pressure(used);
        count(if pressure {
            "keep_alive_expired_under_pressure"
        } else {
            "keep_alive_expired"
        });
        log::info!(
            "cxlporter: {name}: idle zygote or instances destroyed after its keep-alive of {} s (memory {used} % used)",
            POLICY.keep_alive_ms(used) / 1000
        );
        with(|p| {
            if let Some(st) = p.functions.get_mut(&name) {
                st.served_local = 0;
            }
        });
    }
}

/// Retires unreferenced checkpoints while the region is short of free pages.
fn reclaim() {
    let Some(cxl) = get() else {
        return;
    };
    let free = cxl.region.free_pages();
    let total = cxl.region.header().layout.data_pages;
    if free * 100 >= total * u64::from(POLICY.region_low_percent) {
        return;
    }
    let listed = checkpoint::list();
    let candidates: Vec<Candidate> = with(|p| {
        listed
            .iter()
            .map(|c| Candidate {
                cid: c.info.cid,
                pages: c.info.pages,
                clones: c.clones,
                last_used: p.used.get(&c.info.cid).copied().unwrap_or(0),
            })
            .collect()
    });
    for cid in POLICY.reclaim(free, total, &candidates) {
        if checkpoint::retire(cid) {
            count("checkpoint_reclaimed");
            let name = listed
                .iter()
                .find(|c| c.info.cid == cid)
                .map_or("?", |c| c.info.name.as_str());
            log::info!(
                "cxlporter: {name}: checkpoint {}.{} reclaimed ({free} of {total} region pages free)",
                cid.slot,
                cid.epoch
            );
            with(|p| {
                p.used.remove(&cid);
                for st in p.functions.values_mut() {
                    if st.checkpoint == Some(cid) {
                        st.checkpoint = None;
                    }
                }
            });
        }
    }
}
