//! System calls of a μprocess completed inside the call, without ending its run.
//!
//! A μprocess's system calls normally end its run in ring 3 (`UserExit::Request`): its step
//! saves the context, handles the call (parking the μprocess if it must wait) and enters ring 3
//! again. `getpid`, `getppid` and a `write` to a pipe or a socket with room need none of that:
//! nothing parks, the wake-up of a reader only queues that reader's step, and a socket's bytes
//! only wait for the network loop. The system-call handler completes such a call on the spot,
//! with the caller's address space still loaded, as a monolithic kernel handles a system call in
//! the context of the thread that made it. Anything else (a full pipe or socket, another kind of
//! file, a bad descriptor, a kill since the step last looked) goes to the step as before, which
//! does the whole call again.
//!
//! The step records which μprocess runs in ring 3 on its CPU around `user::run`; the handler
//! runs on that CPU, in that run, so it reads the record without a lock.

use super::files::{self, Caller};
use crate::arch::{percpu, smp};
use core::sync::atomic::{AtomicU64, Ordering};
use fjord_pd::PdId;
use fjord_ufork::process::Pid;

/// Per CPU: the μprocess in ring 3 (packed [`Caller`], 0 for none).
static RUNNING: [AtomicU64; smp::MAX_CPUS] = [const { AtomicU64::new(0) }; smp::MAX_CPUS];
/// Per CPU: the kill count (`super::KILLS`) its step saw before entering ring 3.
static KILLS_SEEN: [AtomicU64; smp::MAX_CPUS] = [const { AtomicU64::new(0) }; smp::MAX_CPUS];

const VALID: u64 = 1 << 63;
const COPIES: u64 = 1 << 48;

/// Records that `running` (the caller and the kill count its step saw) is in ring 3 on this
/// CPU, or that nothing is.
pub(super) fn running(running: Option<(Caller, u64)>) {
    let cpu = percpu::cpu_index();
    let packed = match running {
        Some((c, kills)) => {
            KILLS_SEEN[cpu].store(kills, Ordering::Relaxed);
            VALID
                | u64::from(c.pid.raw())
                | u64::from(c.pd.raw()) << 32
                | if c.copies { COPIES } else { 0 }
        }
        None => 0,
    };
    RUNNING[cpu].store(packed, Ordering::Relaxed);
}

/// The μprocess in ring 3 on this CPU, unless a kill happened since its step looked.
fn caller() -> Option<Caller> {
    let cpu = percpu::cpu_index();
    let packed = RUNNING.get(cpu)?.load(Ordering::Relaxed);
    if packed & VALID == 0
        || super::KILLS.load(Ordering::Acquire) != KILLS_SEEN[cpu].load(Ordering::Relaxed)
    {
        return None;
    }
    Some(Caller {
        pid: Pid::from_raw(packed as u32),
        pd: PdId::from_raw((packed >> 32) & 0xffff).ok()?,
        copies: packed & COPIES != 0,
    })
}

/// `getpid()` of the μprocess in ring 3 on this CPU; `None` when its step must answer.
pub fn getpid() -> Option<u64> {
    Some(u64::from(caller()?.pid.raw()))
}

/// `getppid()` of the μprocess in ring 3 on this CPU; `None` when its step must answer.
pub fn getppid() -> Option<u64> {
    let pid = caller()?.pid;
    let parent = super::with(|p| p.table.parent_of(pid)).ok()?;
    Some(u64::from(parent.raw()))
}

/// Writes completed inside the call since boot.
static WRITES: AtomicU64 = AtomicU64::new(0);

/// How many writes μprocesses made were completed inside the call since boot.
pub fn writes() -> u64 {
    WRITES.load(Ordering::Relaxed)
}

/// `write(fd, buf, len)` of the μprocess in ring 3 on this CPU, completed here: its result, or
/// `None` when its step must handle it.
pub fn write(args: [u64; 4]) -> Option<u64> {
    let caller = caller()?;
    let fd = u32::try_from(args[0]).ok()?;
    let r = files::write_now(caller, fd, args[1], args[2])?;
    WRITES.fetch_add(1, Ordering::Relaxed);
    Some(r)
}
