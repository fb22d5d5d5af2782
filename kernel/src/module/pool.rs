//! A function's pool of idle instances and the bounds over all pools.
//!
//! The pools are bounded: at most [`PER_FUNCTION`] idle instances per function, and over all
//! at most [`TOTAL`] holding at most a quarter of the frames ([`MEMORY_SHARE`]). What enters a
//! pool, restored how, and when, is Groundhog's (`crate::module::warm`); this module only
//! keeps the instances and counts them.

use super::LoadedFunction;
use super::instance::Instance;
use crate::arch::cpu;
use crate::jord::{self, state::PD_STACK_SIZE};
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use fjord_kernel::layout::PAGE_SIZE;
use fjord_pd::PdId;
use spin::Mutex;

/// Most instances of one function alive at once (serving, awaiting their restores, idle).
pub const PER_FUNCTION: usize = 512;
/// Most instances made for requests alive at once over all functions (serving, awaiting their
/// restores, idle): 768 of Jord's 1,024 live PDs
/// ([`MAX_LIVE_PDS`](crate::jord::state::MAX_LIVE_PDS)), leaving the rest to the PDs functions
/// create and to μprocesses. Idle instances alone are bounded by it too.
pub const TOTAL: usize = 768;
/// Idle instances hold at most `1 / MEMORY_SHARE` of the frames.
pub const MEMORY_SHARE: usize = 4;

/// Idle instances kept now, over all functions.
static KEPT: AtomicUsize = AtomicUsize::new(0);
/// Instances made for requests and not yet destroyed, over all functions.
static INSTANCES: AtomicUsize = AtomicUsize::new(0);
/// Bytes of memory those instances hold (see [`instance_bytes`]).
static KEPT_BYTES: AtomicUsize = AtomicUsize::new(0);
/// Whether instances are kept at all (the `warm=` boot option, on by default).
static ENABLED: AtomicBool = AtomicBool::new(true);
/// A counter stamping each pool's last use, for choosing which pool gives up an instance.
static CLOCK: AtomicU64 = AtomicU64::new(0);

/// An idle instance of one function.
#[derive(Debug)]
pub struct Warm {
    /// The instance.
    instance: Instance,
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
    /// Most bytes an instance was seen to hold beyond its manifest's stack and heap: the VMAs
    /// its `init` mapped and its snapshot's copies.
    beyond: AtomicUsize,
    /// This function's instances made for requests and not yet destroyed.
    instances: AtomicUsize,
}

impl Pool {
    /// Notes that an instance holds `bytes` beyond its manifest's stack and heap (the VMAs its
    /// `init` mapped, its snapshot's copies): the pools' memory bound counts the most seen.
    pub fn note_held_beyond(&self, bytes: usize) {
        self.beyond.fetch_max(bytes, Ordering::Relaxed);
    }

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
        w.discard(self);
        true
    }

    /// How many instances of this function are alive (serving, awaiting their restores, idle).
    pub fn instances(&self) -> usize {
        self.instances.load(Ordering::Relaxed)
    }

    /// Notes a new instance of this function, made for requests.
    pub fn note_made(&self) {
        self.instances.fetch_add(1, Ordering::Relaxed);
        INSTANCES.fetch_add(1, Ordering::Relaxed);
    }

    /// Notes that an instance of this function made for requests was destroyed.
    pub fn note_gone(&self) {
        self.instances.fetch_sub(1, Ordering::Relaxed);
        INSTANCES.fetch_sub(1, Ordering::Relaxed);
    }

    /// The first frame of each idle instance's Groundhog snapshot of its instance VMA, if it has
    /// one (for tests that check no PD can reach it).
    pub fn idle_snapshot_frames(&self) -> Vec<Option<u64>> {
        self.locked(|v| {
            v.iter()
                .map(|w| match &w.instance.saved {
                    crate::groundhog::Saved::Snapshot(s) => s.first_frame(),
                    _ => None,
                })
                .collect()
        })
    }

    /// How many idle instances this pool holds.
    pub fn idle(&self) -> usize {
        self.locked(|v| v.len())
    }

    /// Destroys every idle instance of this pool (those of the current Jord state).
    pub fn drain(&self) {
        for w in self.locked(core::mem::take) {
            w.discard(self);
        }
    }
}

/// Instances made for requests alive now, over all functions.
pub fn instances() -> usize {
    INSTANCES.load(Ordering::Relaxed)
}

/// Bytes of memory an instance of `f` holds (stack, instance VMA, creation stack, and the
/// most seen beyond: the VMAs `init` mapped and the snapshot's copies).
pub fn instance_bytes(f: &LoadedFunction) -> usize {
    let m = &f.manifest;
    (m.stack_size + m.heap_size + PD_STACK_SIZE) as usize + f.warm.beyond.load(Ordering::Relaxed)
}

/// Bytes idle instances may hold: [`MEMORY_SHARE`] of the frames.
pub fn memory_budget() -> usize {
    crate::mm::frames::total_frames() * PAGE_SIZE as usize / MEMORY_SHARE
}

/// Keeps instances from now on (`true`) or not (`crate::module::warm::set_enabled` also destroys
/// the idle ones when turning it off).
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Whether idle instances are kept.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Idle instances kept now, over all functions.
pub fn kept() -> usize {
    KEPT.load(Ordering::Relaxed)
}

/// Bytes of memory the idle instances hold, over all functions (see [`instance_bytes`]).
pub fn kept_bytes() -> usize {
    KEPT_BYTES.load(Ordering::Relaxed)
}

/// An idle instance of `f` for a request, if its pool has one.
pub fn take_idle(f: &LoadedFunction) -> Option<Instance> {
    f.warm.touch();
    while let Some(w) = f.warm.locked(|v| v.pop()) {
        w.forget();
        if w.is_live() {
            return Some(w.instance);
        }
        // A reset destroyed it.
        f.warm.note_gone();
    }
    None
}

/// Puts `f`'s restored `instance` (of Jord state `generation`) into its pool; gives it back
/// when the pool has no room (the caller destroys it).
pub fn put(f: &LoadedFunction, instance: Instance, generation: u64) -> Result<(), Instance> {
    put_bounded(f, (instance, generation), instance_bytes(f), PER_FUNCTION)
}

/// Most instances of ended μprocesses one program keeps for its next forks (and of ended
/// requests one fork-per-request function keeps).
pub const SPARES_PER_PROGRAM: usize = 4;

/// Bytes an emptied μprocess instance holds: its page tables (its root and the tables down to
/// its area's first leaves, about four frames; its area holds no frames).
const SPARE_BYTES: usize = 4 * PAGE_SIZE as usize;

/// Keeps the instance of an ended μprocess of program `f` (of Jord state `generation`), its
/// area emptied by [`crate::jord::state::Jord::empty_area`], for the program's next fork
/// ([`take_spare`]): at most [`SPARES_PER_PROGRAM`] per program, within the bounds of every
/// pool. Gives it back otherwise (the caller destroys it).
pub fn put_spare(f: &LoadedFunction, instance: Instance, generation: u64) -> Result<(), Instance> {
    if !spare_room(f) {
        return Err(instance);
    }
    put_bounded(f, (instance, generation), SPARE_BYTES, SPARES_PER_PROGRAM)?;
    // A spare counts as an instance of the program while it waits, as an idle function
    // instance does, so that its discarding balances.
    f.warm.note_made();
    Ok(())
}

/// Whether program `f` may keep one more spare now ([`put_spare`] checks again).
pub fn spare_room(f: &LoadedFunction) -> bool {
    enabled()
        && f.warm.idle() < SPARES_PER_PROGRAM
        && instances() < TOTAL
        && kept_bytes() + SPARE_BYTES <= memory_budget()
}

/// An emptied instance of program `f` kept by [`put_spare`], if it has one (its area's frames
/// not yet committed again).
pub fn take_spare(f: &LoadedFunction) -> Option<Instance> {
    let spare = take_idle(f)?;
    f.warm.note_gone();
    Some(spare)
}

fn put_bounded(
    f: &LoadedFunction,
    (instance, generation): (Instance, u64),
    bytes: usize,
    cap: usize,
) -> Result<(), Instance> {
    // The bound is checked again where the instance joins its pool: another executor may
    // have given an instance of `f` back meanwhile (the caller then destroys this one).
    let refused = f.warm.locked(|v| {
        if v.len() >= cap {
            return Some(instance);
        }
        v.push(Warm {
            instance,
            bytes,
            generation,
        });
        KEPT.fetch_add(1, Ordering::Relaxed);
        KEPT_BYTES.fetch_add(bytes, Ordering::Relaxed);
        None
    });
    match refused {
        None => {
            f.warm.touch();
            Ok(())
        }
        Some(instance) => Err(instance),
    }
}

impl Warm {
    /// Takes this instance out of the totals (it leaves its pool).
    fn forget(&self) {
        KEPT.fetch_sub(1, Ordering::Relaxed);
        KEPT_BYTES.fetch_sub(self.bytes, Ordering::Relaxed);
    }

    /// Whether its PD still exists: it belongs to the current Jord state.
    fn is_live(&self) -> bool {
        self.generation == crate::module::loader::jord_epoch()
    }

    /// Takes it out of its pool's totals and destroys its PD (if a reset has not already).
    fn discard(self, pool: &Pool) {
        self.forget();
        pool.note_gone();
        if self.is_live() {
            let _ = jord::settled(|j| j.cput(PdId::KERNEL, self.instance.pd));
        }
    }
}

/// Makes room for an idle instance of `f` at the total bound: destroys an idle instance of the
/// function whose pool was used least recently (not `f`'s). Returns whether one went.
#[cold]
pub fn evict_for(f: &LoadedFunction) -> bool {
    let all = super::loaded();
    let victim = all
        .iter()
        .filter(|g| !core::ptr::eq(&***g, f) && g.warm.idle() > 0)
        .min_by_key(|g| g.warm.last_used.load(Ordering::Relaxed));
    victim.is_some_and(|g| g.warm.evict_one())
}

/// Destroys every idle instance of every deployed function (Groundhog's `drain` first gives
/// back the instances whose restores are still owed).
pub fn drain_idle() {
    for f in super::loaded() {
        f.warm.drain();
    }
}
