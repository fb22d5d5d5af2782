//! Warm function instances: each deployed function keeps a few idle instances (a PD with its
//! stack and instance VMA) between requests, so a request skips `cget`, two `mmap`s, their
//! frame allocations, the VLB misses of a new page table, the function's `init` and, at its
//! end, `cput` with two VMA frees.
//!
//! This is Groundhog's sequential request isolation applied to Jord's per-request PDs (the
//! Jord paper leaves open how its per-invocation sequence fits in 120 ns; recycling is one
//! answer). An instance is put back only when its function returned (a fault or a time-out
//! destroys the PD), after its response went out ([`defer`], [`run_deferred`]), and as its
//! function's isolation mode says ([`Reset`]): in mode `restore`, only after
//! [`Jord::restore_snapshot`](crate::jord::state::Jord) freed every VMA and right it gained
//! and copied back every page it dirtied from its snapshot (an instance without one is rezeroed
//! by `Jord::restore_instance`); in mode `none` only the VMAs and rights go; in mode `fresh`
//! none is kept. The next request cannot see what the previous one left (except in `none`), and
//! an instance that gave its own memory to another PD is destroyed instead. What differs from a fresh instance: the
//! PD id and the addresses of its stack and heap are the same as the last request's.
//!
//! The pools are bounded: at most [`PER_FUNCTION`] idle instances per function, and over all
//! at most [`TOTAL`] holding at most a quarter of the frames ([`MEMORY_SHARE`]); at a total
//! bound, an instance given back displaces one of the function whose pool was used least
//! recently. The per-function bound is exact (checked again as an instance joins its pool);
//! the totals are checked before the restore, so executors giving instances back at the same
//! moment may each go one over them. [`drain`] destroys every idle instance (done before giving
//! up on memory, when a function goes, and by leak tests).

use super::LoadedFunction;
use crate::arch::cpu;
use crate::jord::state::PD_STACK_SIZE;
use crate::jord::{self, state::InstanceLayout};
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use fjord_kernel::layout::PAGE_SIZE;
use fjord_pd::PdId;
use spin::Mutex;

/// Most idle instances one function keeps.
pub const PER_FUNCTION: usize = 8;
/// Most idle instances kept over all functions.
pub const TOTAL: usize = 64;
/// Idle instances hold at most `1 / MEMORY_SHARE` of the frames.
pub const MEMORY_SHARE: usize = 4;

/// Idle instances kept now, over all functions.
static KEPT: AtomicUsize = AtomicUsize::new(0);
/// Bytes of memory those instances hold (stack, instance VMA, creation stack).
static KEPT_BYTES: AtomicUsize = AtomicUsize::new(0);
/// Whether instances are kept at all (the `warm=` boot option, on by default).
static ENABLED: AtomicBool = AtomicBool::new(true);
/// A counter stamping each pool's last use, for choosing which pool gives up an instance.
static CLOCK: AtomicU64 = AtomicU64::new(0);

/// An idle instance of one function.
#[derive(Debug)]
pub struct Warm {
    pd: PdId,
    boundary: u64,
    /// Bytes of memory it holds.
    bytes: usize,
    /// The Jord state it lives in (a reset destroys every PD).
    generation: u64,
}

/// A function's idle instances.
#[derive(Debug, Default)]
pub struct Pool {
    idle: Mutex<Vec<Warm>>,
    /// [`CLOCK`] when an instance was last taken from or given back to this pool.
    last_used: AtomicU64,
}

impl Pool {
    fn locked<R>(&self, f: impl FnOnce(&mut Vec<Warm>) -> R) -> R {
        cpu::without_interrupts(|| f(&mut self.idle.lock()))
    }

    fn touch(&self) {
        let now = CLOCK.fetch_add(1, Ordering::Relaxed);
        self.last_used.store(now, Ordering::Relaxed);
    }

    /// Destroys one idle instance; returns whether there was one.
    fn evict_one(&self) -> bool {
        let Some(w) = self.locked(|v| (!v.is_empty()).then(|| v.remove(0))) else {
            return false;
        };
        w.discard();
        true
    }

    /// The PDs of the idle instances (for tests).
    pub fn idle_pds(&self) -> Vec<PdId> {
        self.locked(|v| v.iter().map(|w| w.pd).collect())
    }

    /// How many idle instances this pool holds.
    pub fn idle(&self) -> usize {
        self.locked(|v| v.len())
    }

    /// Destroys every idle instance of this pool (those of the current Jord state).
    pub fn drain(&self) {
        for w in self.locked(core::mem::take) {
            w.discard();
        }
    }
}

/// An invocation whose response has gone out and whose instance is still to be given back.
struct Deferred {
    f: alloc::sync::Arc<LoadedFunction>,
    inv: super::instance::Invocation,
    reusable: bool,
}

/// Invocations ended but not yet given back (restoring happens off the response path).
static DEFERRED: Mutex<Vec<Deferred>> = Mutex::new(Vec::new());
/// Deferred invocations not yet fully given back (queued or being restored).
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// Ends `inv`, an invocation of `f` whose response is on its way, after its response is
/// published: the executor runs [`run_deferred`] once it has handed a request's result on (a
/// nested call's instance waits for its request's end). Until then
/// the instance is in no pool, so a request for `f` takes another instance or a new one; it
/// never meets one half restored.
pub fn defer(
    f: alloc::sync::Arc<LoadedFunction>,
    inv: super::instance::Invocation,
    reusable: bool,
) {
    IN_FLIGHT.fetch_add(1, Ordering::AcqRel);
    cpu::without_interrupts(|| DEFERRED.lock().push(Deferred { f, inv, reusable }));
}

/// Gives back every deferred invocation's instance (restored to its snapshot, or destroyed)
/// and frees its ArgBuf.
pub fn run_deferred() {
    while let Some(d) = cpu::without_interrupts(|| DEFERRED.lock().pop()) {
        d.inv.end(&d.f, d.reusable);
        IN_FLIGHT.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Waits until every deferred invocation has been given back (running those still queued).
pub fn settle() {
    run_deferred();
    while IN_FLIGHT.load(Ordering::Acquire) > 0 {
        core::hint::spin_loop();
    }
}

/// Keeps instances from now on (`true`) or not; turning it off destroys the idle ones.
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
    if !on {
        drain();
    }
}

/// Whether idle instances are kept.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Idle instances kept now, over all functions.
pub fn kept() -> usize {
    KEPT.load(Ordering::Relaxed)
}

/// Destroys every idle instance of every deployed function (once the deferred ones are back).
pub fn drain() {
    settle();
    for f in super::loaded() {
        f.warm.drain();
    }
}

/// An idle instance of `f` for a request, if its pool has one: its PD and memory boundary.
pub(super) fn take_idle(f: &LoadedFunction) -> Option<(PdId, u64)> {
    f.warm.touch();
    while let Some(w) = f.warm.locked(|v| v.pop()) {
        w.forget();
        if w.is_live() {
            return Some((w.pd, w.boundary));
        }
    }
    None
}

/// Runs `attempt`; when it failed for want of memory (`short` says which errors mean that)
/// while idle instances hold some (memory and PD ids), destroys them and runs it once more.
pub fn or_drain<T, E>(
    mut attempt: impl FnMut() -> Result<T, E>,
    short: impl Fn(&E) -> bool,
) -> Result<T, E> {
    match attempt() {
        Err(e) if short(&e) && kept() > 0 => {
            drain();
            attempt()
        }
        r => r,
    }
}

/// How an instance is put back between two requests.
#[derive(Clone, Copy, Debug)]
pub enum Reset<'a> {
    /// Restored to its Groundhog snapshot (isolation mode `restore`); one without a snapshot
    /// is restored to `fresh`, the state of a new instance.
    Snapshot {
        /// A new instance's layout.
        fresh: InstanceLayout<'a>,
    },
    /// Only the VMAs and rights it gained are dropped; its memory keeps what the request left
    /// (isolation mode `none`). `[base, base + len)` is its instance VMA.
    LayoutOnly {
        /// Base of the instance VMA.
        base: u64,
        /// Its length.
        len: u64,
    },
}

/// Puts `f`'s instance `pd` (memory boundary `boundary`), whose request has ended, back as
/// `how` says and keeps it in `f`'s pool, when the pool has room and the instance is fit for
/// reuse; returns whether it was kept (the caller destroys it otherwise). A snapshot restore
/// is counted in `f`'s restore metrics.
pub(super) fn keep(f: &LoadedFunction, pd: PdId, boundary: u64, how: Reset<'_>) -> bool {
    if !enabled() || f.warm.idle() >= PER_FUNCTION {
        return false;
    }
    let m = &f.manifest;
    let bytes = (m.stack_size + m.heap_size + PD_STACK_SIZE) as usize;
    let budget = crate::mm::frames::total_frames() * PAGE_SIZE as usize / MEMORY_SHARE;
    // At a bound, displace other functions' instances (a few at most: sizes differ).
    let mut tries = 0;
    while kept() >= TOTAL || KEPT_BYTES.load(Ordering::Relaxed) + bytes > budget {
        tries += 1;
        if tries > 4 || !evict_for(f) {
            return false;
        }
    }
    let t0 = cpu::rdtsc();
    let restored = jord::with(|j| {
        let generation = j.generation();
        match how {
            Reset::Snapshot { fresh } if !j.has_snapshot(pd) => j
                .restore_instance(pd, &fresh)
                .map(|p| (p, None, generation)),
            Reset::Snapshot { .. } => {
                let mut plan = fjord_groundhog::RestorePlan::new();
                j.restore_snapshot(pd, &mut plan)
                    .map(|(p, r)| (p, Some(r), generation))
            }
            Reset::LayoutOnly { base, len } => j
                .scrub_instance(pd, base, len)
                .map(|p| (p, None, generation)),
        }
    });
    let Ok((pending, report, generation)) = restored else {
        return false;
    };
    pending.finish();
    if let Some(mut r) = report {
        r.ticks = cpu::rdtsc() - t0;
        cpu::without_interrupts(|| f.restores.lock().record(&r));
    }
    // The bound is checked again where the instance joins its pool: another executor may
    // have given an instance of `f` back meanwhile (the caller then destroys this one).
    let pooled = f.warm.locked(|v| {
        if v.len() >= PER_FUNCTION {
            return false;
        }
        v.push(Warm {
            pd,
            boundary,
            bytes,
            generation,
        });
        KEPT.fetch_add(1, Ordering::Relaxed);
        KEPT_BYTES.fetch_add(bytes, Ordering::Relaxed);
        true
    });
    if pooled {
        f.warm.touch();
    }
    pooled
}

impl Warm {
    /// Takes this instance out of the totals (it leaves its pool).
    fn forget(&self) {
        KEPT.fetch_sub(1, Ordering::Relaxed);
        KEPT_BYTES.fetch_sub(self.bytes, Ordering::Relaxed);
    }

    /// Whether its PD still exists: it belongs to the current Jord state.
    fn is_live(&self) -> bool {
        self.generation == crate::runtime::loader::jord_epoch()
    }

    /// Takes it out of its pool's totals and destroys its PD (if a reset has not already).
    fn discard(self) {
        self.forget();
        if self.is_live() {
            let _ = jord::flushed(|j| j.cput(PdId::KERNEL, self.pd));
        }
    }
}

/// Makes room for an idle instance of `f` at the total bound: destroys an idle instance of the
/// function whose pool was used least recently (not `f`'s). Returns whether one went.
#[cold]
fn evict_for(f: &LoadedFunction) -> bool {
    let all = super::loaded();
    let victim = all
        .iter()
        .filter(|g| !core::ptr::eq(&***g, f) && g.warm.idle() > 0)
        .min_by_key(|g| g.warm.last_used.load(Ordering::Relaxed));
    victim.is_some_and(|g| g.warm.evict_one())
}
