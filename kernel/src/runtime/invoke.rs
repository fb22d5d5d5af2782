//! Invoking a function: the Jord executor sequence for one request (Jord §3.4).
//!
//! 1. take an instance of the function: an idle one from its pool ([`super::warm`]), or a new
//!    PD (`cget`, which gives it a root table and a small creation stack) with its instance
//!    VMA: the manifest's stack, then its heap (see the entry ABI in
//!    [`fjord_libos::function`]), and the heap allocator's header below the boundary;
//! 2. `mmap` an ArgBuf VMA owned by the kernel, copy the request in, and `pmove` it to the PD:
//!    a permission move, no copy. An HTTP request body is copied three times on its way here:
//!    from the socket into the gateway's request, into the task that carries it to an executor
//!    CPU, and into the ArgBuf; from then on, nested calls move it and never copy it;
//! 3. `ccall` the entry (`exec::call`) with a deadline;
//! 4. `pmove` the ArgBuf back to the kernel, read the response;
//! 5. give the instance back: restored into its pool if the function returned (see
//!    [`super::warm`]), else `cput` (its stack and instance VMA go with it); `munmap` the
//!    ArgBuf.
//!
//! The instance is given back and the ArgBuf freed whatever happened; every failure is typed.

use super::{LoadedFunction, warm};
use crate::arch::cpu;
use crate::arch::user::UserFault;
use crate::jord::state::Handoff;
use crate::jord::{self, exec};
use alloc::vec::Vec;
use fjord_libos::function::{FnError, FnReturn, argbuf_capacity, response_offset};
use fjord_pd::{Error as PdError, MapFlags, PdId, Perm};

pub use fjord_libos::function::DEFAULT_RESPONSE_ROOM;
/// Largest request accepted (bounds the ArgBuf).
pub const MAX_REQUEST: usize = 16 << 20;

/// How an invocation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InvokeFailure {
    /// No function of that name is deployed.
    NoSuchFunction,
    /// The request exceeds [`MAX_REQUEST`].
    RequestTooLarge,
    /// Code in `pd` raised an exception; `fault` has the vector, address and access.
    Faulted {
        /// The PD that faulted.
        pd: PdId,
        /// The fault.
        fault: UserFault,
    },
    /// The function ran past its time limit.
    TimedOut {
        /// The PD that was stopped.
        pd: PdId,
    },
    /// Jord had no memory for the PD, the ArgBuf or the instance VMA.
    OutOfMemory,
    /// The function returned one of the ABI's errors.
    Function(FnError),
    /// The function returned a value that is neither a response that fits nor an error code.
    BadResponse(u64),
    /// PrivLib refused an operation of the sequence (a bug or a hostile function).
    Refused(PdError),
    /// The orchestrator's queue was full.
    Busy,
}

impl core::fmt::Display for InvokeFailure {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            InvokeFailure::NoSuchFunction => f.write_str("no such function"),
            InvokeFailure::RequestTooLarge => f.write_str("request too large"),
            InvokeFailure::Faulted { pd, fault } => write!(
                f,
                "function faulted in {pd:?}: vector {} {:?} at {:#x} (rip {:#x})",
                fault.vector, fault.access, fault.addr, fault.rip
            ),
            InvokeFailure::TimedOut { pd } => write!(f, "function timed out in {pd:?}"),
            InvokeFailure::OutOfMemory => f.write_str("out of memory"),
            InvokeFailure::Function(e) => write!(f, "function error {e:?}"),
            InvokeFailure::BadResponse(v) => write!(f, "bad response value {v:#x}"),
            InvokeFailure::Refused(e) => write!(f, "PrivLib refused: {e:?}"),
            InvokeFailure::Busy => f.write_str("the orchestrator's queue is full"),
        }
    }
}

/// Options of one invocation.
#[derive(Clone, Copy, Debug, Default)]
pub struct InvokeOptions {
    /// Bytes of response region after the request; `None`: the request's size plus
    /// [`DEFAULT_RESPONSE_ROOM`]. The ArgBuf is rounded up to whole pages, so the function may
    /// get more.
    pub response_room: Option<usize>,
    /// Time limit in milliseconds; `None`: the manifest's `time_limit_ms`.
    pub time_limit_ms: Option<u64>,
}

/// Where an invocation's time went, in TSC ticks (guest instructions under `-icount`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Phases {
    /// `cget`, ArgBuf `mmap` + copy + `pmove`, instance VMA `mmap`.
    pub setup: u64,
    /// `exec::call` until the function's `creturn` (including its VLB fills).
    pub call: u64,
    /// `pmove` back, response copy, `cput`, ArgBuf `munmap`.
    pub teardown: u64,
}

/// Invocations stopped at their time limit.
pub static TIMEOUTS: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
/// Invocations whose function panicked (it returned [`FnError::Panicked`]).
pub static PANICS: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// Counts how an invocation's call ended, when it was a time-out or a panic: `called` is the
/// function's `creturn` value or the executor's failure.
pub(super) fn count_ending(called: &Result<u64, InvokeFailure>) {
    use core::sync::atomic::Ordering::Relaxed;
    match called {
        Err(InvokeFailure::TimedOut { .. }) => {
            TIMEOUTS.fetch_add(1, Relaxed);
        }
        Ok(v) if FnReturn::decode(*v) == FnReturn::Error(FnError::Panicked) => {
            PANICS.fetch_add(1, Relaxed);
        }
        _ => {}
    }
}

/// Invokes the deployed function `name` on `request` as an external request through the
/// orchestrator, the path HTTP requests take (nested calls included), and waits for it.
pub fn invoke(name: &str, request: &[u8]) -> Result<Vec<u8>, InvokeFailure> {
    let f = super::lookup(name).ok_or(InvokeFailure::NoSuchFunction)?;
    let request = request.to_vec();
    let work = alloc::boxed::Box::new(move |info| super::task::run_root(f, &request, info));
    match crate::orchestrator::run_external_task(work) {
        Ok(done) => done.result,
        Err(crate::orchestrator::SubmitError::QueueFull) => Err(InvokeFailure::Busy),
    }
}

/// What the setup built: everything the teardown must release.
pub(super) struct Instance {
    /// The invocation's PD.
    pub pd: PdId,
    /// The ArgBuf VMA (kernel-owned).
    pub argbuf: u64,
    /// The ArgBuf's size.
    pub capacity: u64,
    /// Physical address of the ArgBuf's (contiguous) backing.
    pub argbuf_phys: u64,
    /// The memory boundary: stack below, heap above.
    pub boundary: u64,
}

/// Creates a PD for `f` with its instance VMA (stack and heap); returns the PD and the memory
/// boundary.
pub(super) fn create_pd(f: &LoadedFunction) -> Result<(PdId, u64), InvokeFailure> {
    let m = &f.manifest;
    let mut owed = None;
    let r = jord::with(|j| {
        let pd = j.cget(PdId::KERNEL)?;
        j.set_memory_limit(pd, m.memory_limit);
        // Cannot fail: the kernel just made `pd`.
        let _ = j.set_pd_limit(pd, m.max_pds);
        match map_instance(j, pd, m) {
            Ok(boundary) => Ok((pd, boundary)),
            Err(e) => {
                owed = j.cput(PdId::KERNEL, pd).ok();
                Err(e)
            }
        }
    });
    if let Some(p) = owed {
        p.finish();
    }
    r.map_err(pd_failure)
}

/// Maps `pd`'s instance VMA for a function with manifest `m` (its stack, then its heap) and
/// writes the heap allocator's header at the top of the stack region; returns the memory
/// boundary. On failure the VMA goes with the PD.
fn map_instance(
    j: &mut jord::state::Jord,
    pd: PdId,
    m: &fjord_faas::module::Manifest,
) -> Result<u64, PdError> {
    let instance = j.mmap(
        pd,
        m.stack_size + m.heap_size,
        Perm::RW,
        MapFlags::default(),
    )?;
    let (offset, words) = fresh_header(m, instance);
    j.write_words(instance, offset, &words)?;
    Ok(instance + m.stack_size)
}

/// The heap header a fresh instance of a function with manifest `m` starts with, when its
/// instance VMA is at `base`: its byte offset in the VMA and its words.
pub(super) fn fresh_header(m: &fjord_faas::module::Manifest, base: u64) -> (u64, [u64; 3]) {
    let boundary = base + m.stack_size;
    let header = heap_header(boundary);
    (
        header - base,
        fjord_libos::heap::header_words(header, boundary, m.heap_size),
    )
}

/// Where the heap header of an instance whose memory boundary is `boundary` lives: the top
/// [`HEADER_BYTES`](fjord_libos::heap::HEADER_BYTES) of its stack region. The function runs
/// with it as its thread pointer.
pub(super) fn heap_header(boundary: u64) -> u64 {
    boundary - fjord_libos::heap::HEADER_BYTES
}

/// Destroys `pd` (with everything it owns).
pub(super) fn destroy_pd(pd: PdId) {
    if let Ok(p) = jord::with(|j| j.cput(PdId::KERNEL, pd)) {
        p.finish();
    }
}

fn pd_failure(e: PdError) -> InvokeFailure {
    match e {
        PdError::NoMemory => InvokeFailure::OutOfMemory,
        e => InvokeFailure::Refused(e),
    }
}

/// Moves the ArgBuf at `addr` from `from` to `to` (read-write) and, when `to` is a PD about to
/// run, installs its leaves for the buffer at once (see `Handoff::prefill`).
pub(super) fn move_argbuf(from: PdId, addr: u64, to: PdId) -> Result<(), PdError> {
    jord::with(|j| j.pmove_with(from, addr, to, Perm::RW, Handoff::TO_NEXT)).map(|p| p.finish())
}

/// [`move_argbuf`] from `from`, the PD running on this CPU, which is suspended before it runs
/// again: its leaves for the buffer may be held back (see `Handoff::leaving`).
pub(super) fn move_argbuf_leaving(from: PdId, addr: u64, to: PdId) -> Result<(), PdError> {
    jord::with(|j| j.pmove_with(from, addr, to, Perm::RW, Handoff::CALL)).map(|p| p.finish())
}

/// Builds a PD and a kernel-owned ArgBuf of `capacity` bytes for `f`, copies `request` into
/// the ArgBuf and moves it to the PD; everything is released again on failure.
pub(super) fn prepare(
    f: &LoadedFunction,
    request: &[u8],
    capacity: u64,
) -> Result<Instance, InvokeFailure> {
    let mut inst = setup(f, capacity)?;
    inst.argbuf_mut()[..request.len()].copy_from_slice(request);
    if let Err(e) = move_argbuf(PdId::KERNEL, inst.argbuf, inst.pd) {
        teardown(f, &inst, false);
        return Err(InvokeFailure::Refused(e));
    }
    Ok(inst)
}

/// Takes an instance of `f` (see [`warm::take`]) and maps a kernel-owned ArgBuf of
/// `capacity` bytes for it.
fn setup(f: &LoadedFunction, capacity: u64) -> Result<Instance, InvokeFailure> {
    let (pd, boundary) = warm::take(f)?;
    match warm::or_drain(|| map_argbuf(capacity), |e| *e == PdError::NoMemory) {
        Ok((argbuf, argbuf_phys)) => Ok(Instance {
            pd,
            argbuf,
            capacity,
            argbuf_phys,
            boundary,
        }),
        Err(e) => {
            warm::give_back(f, pd, boundary, true);
            Err(pd_failure(e))
        }
    }
}

/// Maps a kernel-owned ArgBuf of `capacity` bytes, initialised; returns its base and the
/// physical address of its (contiguous) backing.
fn map_argbuf(capacity: u64) -> Result<(u64, u64), PdError> {
    let mut owed = None;
    let r = jord::with(|j| {
        let argbuf = j.mmap(PdId::KERNEL, capacity, Perm::RW, MapFlags::default())?;
        match j.initialised_backing(argbuf) {
            Some(phys) => Ok((argbuf, phys)),
            None => {
                owed = j.munmap(PdId::KERNEL, argbuf, capacity).ok();
                Err(PdError::NoMemory)
            }
        }
    });
    if let Some(p) = owed {
        p.finish();
    }
    r
}

/// Ends an invocation: gives its instance back to `f` (to its pool when `reusable`: the
/// function returned) and unmaps the ArgBuf.
pub(super) fn teardown(f: &LoadedFunction, inst: &Instance, reusable: bool) {
    warm::give_back(f, inst.pd, inst.boundary, reusable);
    let p = jord::with(|j| j.munmap(PdId::KERNEL, inst.argbuf, inst.capacity).ok());
    if let Some(p) = p {
        p.finish();
    }
}

impl Instance {
    /// The ArgBuf's bytes through the kernel's direct map.
    pub(super) fn argbuf_mut(&mut self) -> &mut [u8] {
        // SAFETY: the ArgBuf's backing is `capacity` physically contiguous, initialised bytes
        // that stay allocated until `teardown`. The kernel touches them only before the `pmove`
        // to the PD and after `exec::call` returned, when no code of this invocation runs; no
        // other PD was ever given a right on this VMA by the kernel, and `&mut self` makes this
        // the only kernel access.
        unsafe {
            core::slice::from_raw_parts_mut(
                crate::mm::phys_to_virt(self.argbuf_phys) as *mut u8,
                self.capacity as usize,
            )
        }
    }
}

/// Invokes `f` on `request`, recording where the time went in `phases`.
pub fn invoke_function(
    f: &LoadedFunction,
    request: &[u8],
    options: &InvokeOptions,
    phases: &mut Phases,
) -> Result<Vec<u8>, InvokeFailure> {
    if request.len() > MAX_REQUEST {
        return Err(InvokeFailure::RequestTooLarge);
    }
    let t0 = cpu::rdtsc();
    let room = options
        .response_room
        .unwrap_or(request.len() + DEFAULT_RESPONSE_ROOM)
        .min(MAX_REQUEST);
    let mut inst = prepare(f, request, argbuf_capacity(request.len(), room) as u64)?;
    let t1 = cpu::rdtsc();
    let limit_ms = options.time_limit_ms.unwrap_or(f.manifest.time_limit_ms());
    let deadline = t1 + crate::arch::apic::tsc_hz() / 1000 * limit_ms;
    let args = [
        inst.argbuf,
        request.len() as u64,
        inst.capacity,
        inst.boundary,
    ];
    let tp = heap_header(inst.boundary);
    let called = exec::call_tp(inst.pd, f.entry, args, tp, Some(deadline)).map_err(exec_failure);
    count_ending(&called);
    let t2 = cpu::rdtsc();
    let reusable = called.is_ok();
    let result = called.and_then(|value| {
        // The ArgBuf goes back to the kernel (a pmove on the PD's behalf). If the function gave
        // its right away, the pmove fails; no code of this invocation runs any more, and the
        // ArgBuf's munmap in the teardown revokes every right that is left.
        let _ = move_argbuf(inst.pd, inst.argbuf, PdId::KERNEL);
        response(&mut inst, request.len(), value)
    });
    teardown(f, &inst, reusable);
    let t3 = cpu::rdtsc();
    *phases = Phases {
        setup: t1 - t0,
        call: t2 - t1,
        teardown: t3 - t2,
    };
    result
}

/// The invocation failure for an executor error.
pub fn exec_failure(e: exec::InvokeError) -> InvokeFailure {
    match e {
        exec::InvokeError::Faulted { pd, fault } => InvokeFailure::Faulted { pd, fault },
        exec::InvokeError::TimedOut { pd } => InvokeFailure::TimedOut { pd },
        exec::InvokeError::Refused(e) => InvokeFailure::Refused(e),
    }
}

/// Decodes the function's return value and copies the response out of the ArgBuf.
pub(super) fn response(
    inst: &mut Instance,
    request_len: usize,
    value: u64,
) -> Result<Vec<u8>, InvokeFailure> {
    match FnReturn::decode(value) {
        FnReturn::Response(n) => {
            let start = response_offset(request_len);
            let end = usize::try_from(n)
                .ok()
                .and_then(|n| start.checked_add(n))
                .filter(|&end| end <= inst.capacity as usize)
                .ok_or(InvokeFailure::BadResponse(value))?;
            Ok(inst.argbuf_mut()[start..end].to_vec())
        }
        FnReturn::Error(e) => Err(InvokeFailure::Function(e)),
        FnReturn::UnknownError(_) => Err(InvokeFailure::BadResponse(value)),
    }
}
