//! When and how a function instance goes back into its pool (`crate::module::pool`) between
//! requests: Groundhog's sequential request isolation applied to Jord's per-request PDs. A
//! request that takes an idle instance skips `cget`, two `mmap`s, their frame allocations, the
//! VLB misses of a new page table, the function's `init` and, at its end, `cput` with two VMA
//! frees (the Jord paper leaves open how its per-invocation sequence fits in 120 ns; recycling
//! is one answer).
//!
//! An instance is put back only when its function returned (a fault or a time-out destroys the
//! PD), after its response went out ([`defer`], [`run_deferred`]), and as its function's
//! Groundhog mode says ([`Reset`]): in mode `restore`, only after
//! [`Snapshot::begin_restore`](groundhog::Snapshot::begin_restore) and its steps freed every VMA
//! and right it gained and copied back every page it dirtied from its snapshot, which the
//! instance owns (an instance without one is rezeroed by `Jord::restore_instance`); in mode
//! `none` only the VMAs and rights go; in mode `fresh` none is kept. The next request cannot see what the previous one left (except in
//! `none`), and an instance that gave its own memory to another PD is destroyed instead. What
//! differs from a fresh instance: the PD id and the addresses of its stack and heap are the
//! same as the last request's.
//!
//! The pools are bounded ([`PER_FUNCTION`], [`TOTAL`], [`MEMORY_SHARE`](pool::MEMORY_SHARE)); at
//! a total bound, an instance given back displaces one of the function whose pool was used
//! least recently. A request that finds no idle instance gets a new one only while the
//! function's instances alive (serving, awaiting their restores, idle) and all of them stay
//! within those bounds ([`take_deferred`]); beyond, it has one of its function's instances
//! awaiting their restores restored at once: the pools grow to what the bursts of requests
//! need, and no instance is made for one request only to be destroyed at its end. The
//! per-function bound on idle instances is exact (checked again as an instance joins its
//! pool); the totals are checked before the restore, so executors giving instances back at the
//! same moment may each go one over them. [`drain`] destroys every idle instance (done before
//! giving up on memory, when a function goes, and by leak tests).

use crate::arch::cpu;
use crate::groundhog::{self, Saved};
use crate::jord::{self, state::InstanceLayout};
use crate::module::LoadedFunction;
use crate::module::instance::{ArgBuf, Instance, Invocation};
use crate::module::pool::{
    self, PER_FUNCTION, TOTAL, evict_for, instance_bytes, memory_budget, take_idle,
};
use alloc::collections::VecDeque;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicUsize, Ordering};
use fjord_pd::Error as PdError;
use spin::Mutex;

pub use crate::module::pool::{enabled, instances, kept, kept_bytes};

/// An instance whose request's response has gone out and that is still to be given back.
enum Deferred {
    /// The invocation ended: its instance and ArgBuf.
    Ended {
        f: Arc<LoadedFunction>,
        inv: Invocation,
        reusable: bool,
    },
    /// Its restore began and stopped for a request (its ArgBuf is already freed).
    Restoring(Restoring),
}

impl Deferred {
    fn function(&self) -> &Arc<LoadedFunction> {
        match self {
            Deferred::Ended { f, .. } => f,
            Deferred::Restoring(r) => &r.f,
        }
    }

    /// Whether its instance is destroyed rather than kept (a fault, mode `fresh`).
    fn goes(&self) -> bool {
        match self {
            Deferred::Ended { f, reusable, .. } => !(*reusable && f.groundhog_mode().reuses()),
            Deferred::Restoring(_) => false,
        }
    }

    /// Gives its instance back (restored, or destroyed); a restore stops between two steps
    /// for a request waiting for this executor when `may_stop`.
    fn run(self, may_stop: bool) -> Ran {
        match self {
            Deferred::Ended { f, inv, reusable } => {
                let finish = if may_stop {
                    Finish::UnlessRequests(&f)
                } else {
                    Finish::Now
                };
                inv.end_with(&f, reusable, finish)
            }
            Deferred::Restoring(r) => r.resume(may_stop),
        }
    }
}

/// A restore that stopped between two steps (`Snapshot::restore_step`) for a request.
struct Restoring {
    f: Arc<LoadedFunction>,
    instance: Instance,
    generation: u64,
    /// Ticks its steps took so far.
    ticks: u64,
}

impl Restoring {
    fn resume(self, may_stop: bool) -> Ran {
        if self.generation != crate::module::loader::jord_epoch() {
            // A reset destroyed every PD.
            return Ran::Gone;
        }
        let finish = if may_stop {
            Finish::UnlessRequests(&self.f)
        } else {
            Finish::Now
        };
        let begun = Begun {
            ticks: self.ticks,
            interrupted: true,
        };
        match restore_steps(&self.f, self.instance, self.generation, begun, finish) {
            Kept::Pooled => Ran::Kept,
            Kept::Stopped => Ran::Stopped,
            Kept::Refused(instance) => {
                crate::module::instance::destroy(instance.pd);
                self.f.warm.note_gone();
                cpu::without_interrupts(|| self.f.restores.lock().replaced += 1);
                Ran::Gone
            }
        }
    }
}

/// Whether a restore may stop between two steps when a request waits for this executor.
#[derive(Clone, Copy, Debug)]
pub enum Finish<'a> {
    /// It runs to its end.
    Now,
    /// It stops while a request waits, and waits in the deferred queue (with this handle of
    /// its function) to be resumed.
    UnlessRequests(&'a Arc<LoadedFunction>),
}

/// What giving an instance back did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ran {
    /// Restored (or reset) into its pool.
    Kept,
    /// Its restore stopped for a request; it waits in the deferred queue again.
    Stopped,
    /// Destroyed (not reusable, or no room).
    Gone,
}

/// Pages a restore puts back between two looks for a request waiting for its executor.
pub const RESTORE_STEP_PAGES: usize = 16;

/// An instance in the deferred queue.
struct Waiting {
    d: Deferred,
    /// Bytes of memory it holds ([`instance_bytes`] when it was queued).
    bytes: usize,
}

/// Instances ended but not yet given back (restoring happens off the response path), oldest
/// first.
static DEFERRED: Mutex<VecDeque<Waiting>> = Mutex::new(VecDeque::new());
/// The bytes of memory the instances in [`DEFERRED`] hold.
static DEFERRED_BYTES: AtomicUsize = AtomicUsize::new(0);
/// Ended instances that are destroyed rather than kept ([`Deferred::goes`] when deferred): kept
/// apart so that the executor finds them after every response without a look at each instance
/// awaiting its restore.
static GOING: Mutex<Vec<Deferred>> = Mutex::new(Vec::new());
/// Deferred instances not yet fully given back (queued or being restored).
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
/// Deferred instances still queued (none of them taken up yet).
static QUEUED: AtomicUsize = AtomicUsize::new(0);

/// Most deferred instances left queued while requests wait for an executor: beyond it, an
/// executor restores before its next request (each holds an instance, and an ArgBuf until its
/// restore begins). Above what most bursts of an open-loop load at the SLO leave, so that a
/// queued request does not wait behind restores: they run once the burst is over. The longest
/// bursts near `compose_post`'s SLO point (an instance of each of its functions per request)
/// reach it, as they reach [`TOTAL`] when it is higher.
pub const MAX_DEFERRED: usize = 640;

fn push(d: Deferred) {
    IN_FLIGHT.fetch_add(1, Ordering::AcqRel);
    cpu::without_interrupts(|| {
        if d.goes() {
            GOING.lock().push(d);
        } else {
            let bytes = instance_bytes(d.function());
            DEFERRED.lock().push_back(Waiting { d, bytes });
            DEFERRED_BYTES.fetch_add(bytes, Ordering::Relaxed);
        }
        QUEUED.fetch_add(1, Ordering::AcqRel);
    });
}

/// Takes an instance to destroy off its queue.
fn pop_going() -> Option<Deferred> {
    cpu::without_interrupts(|| {
        let d = GOING.lock().pop()?;
        QUEUED.fetch_sub(1, Ordering::AcqRel);
        Some(d)
    })
}

/// Takes the oldest deferred instance off the queue; when `beyond_bound`, only while more
/// than [`MAX_DEFERRED`] wait.
fn pop(beyond_bound: bool) -> Option<Deferred> {
    cpu::without_interrupts(|| {
        let mut q = DEFERRED.lock();
        if q.is_empty() || (beyond_bound && q.len() <= MAX_DEFERRED) {
            return None;
        }
        Some(unqueue(&mut q, 0))
    })
}

/// Takes entry `i` off the deferred queue `q` (locked).
fn unqueue(q: &mut VecDeque<Waiting>, i: usize) -> Deferred {
    let Some(w) = q.remove(i) else {
        unreachable!("an index found in the queue")
    };
    DEFERRED_BYTES.fetch_sub(w.bytes, Ordering::Relaxed);
    QUEUED.fetch_sub(1, Ordering::AcqRel);
    w.d
}

/// Gives back `d`, taken off the queue.
fn run(d: Deferred, may_stop: bool) -> Ran {
    let ran = d.run(may_stop);
    IN_FLIGHT.fetch_sub(1, Ordering::AcqRel);
    ran
}

/// Ends `inv`, an invocation of `f` whose response is on its way, after its response is
/// published: the executor runs [`after_response`] once it has handed a request's result on
/// (a nested call's instance waits for its request's end). Until then the instance is in no
/// pool, so a request for `f` takes another instance or a new one; it never meets one half
/// restored.
pub fn defer(f: Arc<LoadedFunction>, inv: Invocation, reusable: bool) {
    push(Deferred::Ended { f, inv, reusable });
}

/// Gives back one deferred instance (restored to its snapshot, or destroyed; its ArgBuf
/// freed); a restore stops between two steps when a request waits for this executor, and
/// waits in the queue again. `None` when nothing was deferred.
pub fn run_one_deferred() -> Option<Ran> {
    pop_going().or_else(|| pop(false)).map(|d| run(d, true))
}

/// Gives back every deferred instance, every restore to its end.
pub fn run_deferred() {
    while let Some(d) = pop_going().or_else(|| pop(false)) {
        run(d, false);
    }
}

/// What an executor does with the deferred instances after a request's response went out.
/// Instances destroyed rather than kept go at once: no request would take them, and they hold
/// memory. When `requests_waiting` (a request is queued for it or centrally), it serves them
/// first and restores only beyond [`MAX_DEFERRED`] (those requests take other idle instances or
/// new ones; the rest are restored when it has nothing else to do, see [`run_one_deferred`]);
/// otherwise it restores them one by one until a request comes, which then waits for one
/// restore at most (the end of its current step), not for every one that waits.
pub fn after_response(requests_waiting: bool) {
    while let Some(d) = pop_going() {
        run(d, false);
    }
    if requests_waiting {
        while let Some(d) = pop(true) {
            run(d, false);
        }
        return;
    }
    let cpu = crate::arch::percpu::cpu_index();
    while wait_for_quiet(cpu) && matches!(run_one_deferred(), Some(Ran::Kept | Ran::Gone)) {}
}

/// Longest a restore waits for its group's orchestrator core to halt ([`wait_for_quiet`]), as a
/// fraction of a second: 20 µs, beyond the orchestrator's work for one arrival.
const QUIET_WAIT_PER_SECOND: u64 = 50_000;

/// Before an executor (CPU `cpu`) restores in the background: waits while its group's
/// orchestrator core is at work, for [`QUIET_WAIT_PER_SECOND`] at most; false (do not restore
/// now) when a request is coming for this executor, before or during the wait. Restores are background work, and
/// the vCPUs of a TCG guest take turns on one clock (like SMT siblings share one core): a
/// restore that ran beside the orchestrator's work on an arrival would delay that arrival's
/// dispatch by its own length. While it waits the executor only yields (`pause`), which lets
/// the orchestrator's vCPU run.
pub fn wait_for_quiet(cpu: usize) -> bool {
    use crate::orchestrator::{orchestrator_at_work, steps_coming};
    if orchestrator_at_work(cpu) {
        let limit = crate::arch::time::ticks_per_second() / QUIET_WAIT_PER_SECOND;
        let start = cpu::rdtsc();
        while orchestrator_at_work(cpu) && cpu::rdtsc().wrapping_sub(start) < limit {
            if steps_coming(cpu) {
                return false;
            }
            core::hint::spin_loop();
        }
    }
    !steps_coming(cpu)
}

/// Waits until every deferred instance has been given back (running those still queued).
pub fn settle() {
    run_deferred();
    while IN_FLIGHT.load(Ordering::Acquire) > 0 {
        core::hint::spin_loop();
    }
}

/// Deferred instances queued, not yet taken up.
pub fn deferred() -> usize {
    QUEUED.load(Ordering::Acquire)
}

/// For a request of `f` that found no idle instance: restores one of `f`'s deferred instances
/// now and takes it, unless `or_new` holds and a new instance would have room in the pools
/// once its request is over ([`room_for_new`]: then the caller makes one, and the deferred
/// ones wait for a moment without requests). `None` when `f` has none deferred.
///
/// A new instance costs several restores (a PD, its VMAs, `init` and a snapshot), so the
/// pools grow to what the bursts of requests need and no further: beyond, an instance made
/// for one request would be destroyed at its end, or displace another function's.
pub fn take_deferred(f: &LoadedFunction, or_new: bool) -> Option<Instance> {
    if or_new && room_for_new(f) {
        return None;
    }
    let d = cpu::without_interrupts(|| {
        let mut q = DEFERRED.lock();
        let i = q
            .iter()
            .rposition(|w| core::ptr::eq(&**w.d.function(), f))?;
        Some(unqueue(&mut q, i))
    })?;
    run(d, false);
    take_idle(f)
}

/// Whether a new instance of `f` would have room in the pools beside every instance alive
/// (at most [`PER_FUNCTION`] of `f`, [`TOTAL`] in all) and within their memory budget beside
/// the idle and deferred ones.
fn room_for_new(f: &LoadedFunction) -> bool {
    let held = kept_bytes() + DEFERRED_BYTES.load(Ordering::Relaxed);
    f.warm.instances() < PER_FUNCTION
        && instances() < TOTAL
        && held + instance_bytes(f) <= memory_budget()
}

/// Keeps instances from now on (`true`) or not; turning it off destroys the idle ones.
pub fn set_enabled(on: bool) {
    pool::set_enabled(on);
    if !on {
        drain();
    }
}

/// Destroys every idle instance of every deployed function (once the deferred ones are back).
pub fn drain() {
    settle();
    pool::drain_idle();
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

/// A kernel-owned ArgBuf of `capacity` bytes holding `request` (see [`ArgBuf::map`]),
/// destroying the idle instances once if memory is short.
pub fn map_argbuf(capacity: u64, request: &[u8]) -> Result<ArgBuf, PdError> {
    or_drain(
        || ArgBuf::map(capacity, request),
        |e| *e == PdError::NoMemory,
    )
}

/// How an instance is put back between two requests.
#[derive(Clone, Copy, Debug)]
pub enum Reset<'a> {
    /// Restored to its Groundhog snapshot (Groundhog mode `restore`); one without a snapshot
    /// is restored to `fresh`, the state of a new instance.
    Snapshot {
        /// A new instance's layout.
        fresh: InstanceLayout<'a>,
    },
    /// Only the VMAs and rights it gained are dropped; its memory keeps what the request left
    /// (Groundhog mode `none`). `[base, base + len)` is its instance VMA.
    LayoutOnly {
        /// Base of the instance VMA.
        base: u64,
        /// Its length.
        len: u64,
    },
}

/// What [`keep`] did with an instance.
#[derive(Debug)]
pub enum Kept {
    /// Restored (or reset) into its function's pool.
    Pooled,
    /// Its restore stopped for a request; it waits in the deferred queue.
    Stopped,
    /// Not kept (no room, unfit for reuse): the caller destroys it.
    Refused(Instance),
}

/// Puts `f`'s `instance`, whose request has ended, back as `how` says and keeps it in `f`'s
/// pool, when the pool has room and the instance is fit for reuse. A snapshot restore goes in
/// steps of [`RESTORE_STEP_PAGES`] and, as `finish` allows, stops for a request and waits in
/// the deferred queue ([`Kept::Stopped`]); it is counted in `f`'s restore metrics.
pub fn keep(f: &LoadedFunction, instance: Instance, how: Reset<'_>, finish: Finish<'_>) -> Kept {
    if !enabled() || f.warm.idle() >= PER_FUNCTION {
        return Kept::Refused(instance);
    }
    let pd = instance.pd;
    let bytes = instance_bytes(f);
    let budget = memory_budget();
    // At a bound, displace other functions' instances (a few at most: sizes differ).
    let mut tries = 0;
    while kept() >= TOTAL || kept_bytes() + bytes > budget {
        tries += 1;
        if tries > 4 || !evict_for(f) {
            return Kept::Refused(instance);
        }
    }
    let t0 = cpu::rdtsc();
    // A snapshot restore's first step goes with its beginning; what it did is written in
    // place, not moved out through the calls.
    let mut report = fjord_groundhog::RestoreReport::default();
    // Written in place too, rather than moved out of the critical section with its result.
    let (mut generation, mut stepped) = (0, Stepped::Reset);
    let mut instance = instance;
    let saved = &mut instance.saved;
    let restored = jord::settled(|j| {
        generation = j.generation();
        match (how, saved) {
            (Reset::Snapshot { .. }, Saved::Snapshot(snap)) => snap
                .begin_restore(j, pd, RESTORE_STEP_PAGES, &mut report)
                .map(|(p, done)| {
                    stepped = if done { Stepped::Done } else { Stepped::Begun };
                    p
                }),
            (Reset::Snapshot { fresh }, _) => j.restore_instance(pd, &fresh),
            (Reset::LayoutOnly { .. }, Saved::Layout(layout)) => layout.scrub(j, pd),
            (Reset::LayoutOnly { base, len }, _) => {
                groundhog::snapshot::scrub_fresh(j, pd, base, len)
            }
        }
    });
    if restored.is_err() {
        return Kept::Refused(instance);
    }
    if stepped == Stepped::Reset {
        return pool(f, instance, generation);
    }
    let begun = Begun {
        ticks: cpu::rdtsc() - t0,
        interrupted: false,
    };
    if stepped == Stepped::Done {
        return restored_into_pool(f, instance, generation, begun, report);
    }
    match stop_for_requests(finish, instance, generation, begun) {
        Ok(()) => Kept::Stopped,
        Err(instance) => restore_steps(f, instance, generation, begun, finish),
    }
}

/// How far putting an instance back went in [`keep`]'s first critical section.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stepped {
    /// Reset in one go (no snapshot restore).
    Reset,
    /// A snapshot restore, done in its first step.
    Done,
    /// A snapshot restore with steps left.
    Begun,
}

/// Records `f`'s finished restore of `instance` (`report`, after `begun`) and pools it.
fn restored_into_pool(
    f: &LoadedFunction,
    instance: Instance,
    generation: u64,
    begun: Begun,
    mut report: fjord_groundhog::RestoreReport,
) -> Kept {
    report.ticks = begun.ticks;
    report.interrupted = begun.interrupted;
    cpu::without_interrupts(|| f.restores.lock().record(&report));
    pool(f, instance, generation)
}

/// Stops the restore of `instance` under way (`begun`) when `finish` allows and a request is
/// coming for this executor: it waits in the deferred queue. `Err`: go on, with the instance.
fn stop_for_requests(
    finish: Finish<'_>,
    instance: Instance,
    generation: u64,
    begun: Begun,
) -> Result<(), Instance> {
    let Finish::UnlessRequests(handle) = finish else {
        return Err(instance);
    };
    if wait_for_quiet(crate::arch::percpu::cpu_index()) {
        return Err(instance);
    }
    push(Deferred::Restoring(Restoring {
        f: handle.clone(),
        instance,
        generation,
        ticks: begun.ticks,
    }));
    Ok(())
}

/// What a restore under way did so far.
#[derive(Clone, Copy, Debug)]
struct Begun {
    /// Ticks its steps took.
    ticks: u64,
    /// Whether it stopped before, for a waiting request.
    interrupted: bool,
}

/// Runs the steps of `f`'s `instance`'s restore (`begun`) until it is done, then pools the
/// instance; stops early as `finish` allows.
fn restore_steps(
    f: &LoadedFunction,
    instance: Instance,
    generation: u64,
    begun: Begun,
    finish: Finish<'_>,
) -> Kept {
    let mut begun = begun;
    let mut instance = instance;
    let pd = instance.pd;
    let mut report = fjord_groundhog::RestoreReport::default();
    loop {
        let t0 = cpu::rdtsc();
        let Saved::Snapshot(snap) = &mut instance.saved else {
            return Kept::Refused(instance);
        };
        let step = jord::settled(|j| snap.restore_step(j, pd, RESTORE_STEP_PAGES, &mut report));
        match step {
            Err(_) => return Kept::Refused(instance),
            Ok(Some(())) => {
                begun.ticks += cpu::rdtsc() - t0;
                return restored_into_pool(f, instance, generation, begun, report);
            }
            Ok(None) => {
                begun.ticks += cpu::rdtsc() - t0;
                match stop_for_requests(finish, instance, generation, begun) {
                    Ok(()) => return Kept::Stopped,
                    Err(back) => instance = back,
                }
            }
        }
    }
}

/// Puts `f`'s restored `instance` into its pool, if it has room.
fn pool(f: &LoadedFunction, instance: Instance, generation: u64) -> Kept {
    match pool::put(f, instance, generation) {
        Ok(()) => Kept::Pooled,
        Err(instance) => Kept::Refused(instance),
    }
}
