//! Requests that call other functions: invocation tasks, nested calls and their handles
//! (Jord §3.4).
//!
//! Every request runs as a *task*: a function instance in its own PD with an ArgBuf. When the
//! function calls another (`async_call`), the executor creates the callee's task, moves the
//! caller's ArgBuf to the callee's PD with `pmove` and queues the callee in the orchestrator's
//! internal queue, which JBSQ serves before external requests; the caller gets a handle and
//! runs on. When the caller `wait`s for a call that has not finished, the executor suspends it
//! (`cexit`) and the executor is free for other work. When the callee returns, its ArgBuf moves
//! back to the caller and, if the caller is waiting, a step that resumes it (`center`) is queued
//! internally, to run on whichever executor JBSQ picks: the address space is single, so a PD
//! resumes on any core.
//!
//! [`HopMode::Copy`] is the NightCore-like baseline: the same functions and runtime, but each
//! hop copies the request and the response through a kernel channel (caller buffer → channel →
//! callee buffer and back), as a pipe between worker processes would.

use super::LoadedFunction;
use super::invoke::{self, InvokeFailure};
use crate::arch::cpu;
use crate::jord::{self, exec};
use crate::mm::user_memory;
use crate::module::instance::{ArgBuf, Instance, Invocation};
use crate::orchestrator::{self, JobInfo, SubmitError};
use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use fjord_faas::jbsq::RequestClass;
use fjord_libos::abi::{CALLEE_ERROR_BASE, Error as AbiError, Sysno, encode};
use fjord_libos::function::{FnReturn, argbuf_capacity, response_offset};
use fjord_pd::PdId;
use spin::Mutex;

/// How a nested call hands its ArgBuf to the callee (the `hops=` boot option): `Move` (Jord,
/// `pmove` there and back, nothing copied) or `Copy` (the NightCore-like baseline).
pub use fjord_kernel::cmdline::Hops as HopMode;

static HOP_MODE: AtomicU8 = AtomicU8::new(HopMode::Move as u8);

/// Bytes copied between callers and callees by nested calls (zero under [`HopMode::Move`]).
pub static HOP_BYTES_COPIED: AtomicU64 = AtomicU64::new(0);
/// Nested calls started.
pub static NESTED_CALLS: AtomicU64 = AtomicU64::new(0);
/// Callers suspended on a `wait`.
pub static SUSPENSIONS: AtomicU64 = AtomicU64::new(0);

/// Selects how nested calls pass ArgBufs from now on.
pub fn set_hop_mode(mode: HopMode) {
    HOP_MODE.store(mode as u8, Ordering::Relaxed);
}

/// How nested calls pass ArgBufs.
pub fn hop_mode() -> HopMode {
    if HOP_MODE.load(Ordering::Relaxed) == HopMode::Copy as u8 {
        HopMode::Copy
    } else {
        HopMode::Move
    }
}

type TaskId = u64;

/// Where a task's result goes.
enum Origin {
    /// An external request: the result is the request's response.
    Root,
    /// A nested call: the result goes back to the caller's task.
    Child {
        caller: TaskId,
        caller_pd: PdId,
        handle: u64,
        /// The caller's ArgBuf (under [`HopMode::Move`] it is also this task's).
        caller_buf: u64,
    },
}

/// One function instance serving one request.
struct Task {
    id: TaskId,
    func: Arc<LoadedFunction>,
    /// The instance and its ArgBuf (kernel-owned for root tasks and copied hops, the caller's
    /// for moved hops), until the task finishes.
    inv: Option<Invocation>,
    request_len: usize,
    deadline: u64,
    origin: Origin,
}

/// The state of a nested call.
struct Call {
    caller: TaskId,
    /// The `wait` return value, once the callee finished.
    result: Option<u64>,
}

/// A caller suspended in `wait`.
struct Parked {
    task: Box<Task>,
    cont: exec::Continuation,
    info: JobInfo,
}

struct Calls {
    next_task: TaskId,
    next_handle: u64,
    calls: BTreeMap<u64, Call>,
    parked: BTreeMap<u64, Parked>,
}

static CALLS: Mutex<Calls> = Mutex::new(Calls {
    next_task: 1,
    next_handle: 1,
    calls: BTreeMap::new(),
    parked: BTreeMap::new(),
});

impl Calls {
    fn new_task_id(&mut self) -> TaskId {
        let id = self.next_task;
        self.next_task += 1;
        id
    }
}

fn locked<R>(f: impl FnOnce(&mut Calls) -> R) -> R {
    cpu::without_interrupts(|| f(&mut CALLS.lock()))
}

fn deadline_of(f: &LoadedFunction) -> u64 {
    crate::arch::time::deadline_after_ms(f.manifest.time_limit_ms())
}

/// The first step of an external request of `f` with `request`, as the orchestrator runs it
/// (the gateway's requests, the in-kernel tests', the workload benchmarks').
pub fn root_work<R: AsRef<[u8]> + Send + 'static>(
    f: Arc<LoadedFunction>,
    request: R,
) -> orchestrator::TaskWork {
    orchestrator::TaskWork::new(move |info| run_root(f, request.as_ref(), info))
}

/// Runs `request` as an external request of `f` (the first step of the request `info`);
/// returns its response or failure, or `None` when it suspended in a nested call (it then
/// finishes in a later step).
pub fn run_root(
    f: Arc<LoadedFunction>,
    request: &[u8],
    info: JobInfo,
) -> Option<Result<Vec<u8>, InvokeFailure>> {
    if request.len() > invoke::MAX_REQUEST {
        return Some(Err(InvokeFailure::RequestTooLarge));
    }
    if f.manifest.kind != fjord_faas::module::ModuleKind::Function {
        return Some(Err(InvokeFailure::NotAFunction));
    }
    let room = request.len() + invoke::DEFAULT_RESPONSE_ROOM;
    let inv = match Invocation::prepare(&f, request, argbuf_capacity(request.len(), room) as u64) {
        Ok(i) => i,
        Err(e) => return Some(Err(e)),
    };
    let task = Box::new(Task {
        id: locked(Calls::new_task_id),
        deadline: deadline_of(&f),
        func: f,
        inv: Some(inv),
        request_len: request.len(),
        origin: Origin::Root,
    });
    step(task, None, info)
}

/// Runs `task` from its entry (`resume: None`) or from a `wait` that returned `value`, until it
/// returns, fails or suspends.
fn step(
    task: Box<Task>,
    resume: Option<(exec::Continuation, u64)>,
    info: JobInfo,
) -> Option<Result<Vec<u8>, InvokeFailure>> {
    let mut waited = None;
    let outcome = {
        let mut hook = |pd: PdId, call: Sysno, args: [u64; 4], can_park: bool| match call {
            Sysno::AsyncCall => exec::Reply::Value(encode(start_call(&task, pd, args, false))),
            Sysno::Wait => wait_reply(&task, args[0], can_park, &mut waited),
            Sysno::Call => call_reply(&task, pd, args, can_park, &mut waited),
            _ => exec::Reply::Value(encode(Err(AbiError::NoSys))),
        };
        let deadline = Some(task.deadline);
        match resume {
            None => {
                let inv = task.inv.as_ref().expect("a task runs with its invocation");
                let args = [
                    inv.argbuf.base,
                    task.request_len as u64,
                    inv.argbuf.capacity,
                    inv.instance.boundary,
                ];
                let tp = inv.instance.thread_pointer();
                exec::call_with(
                    inv.instance.pd,
                    task.func.entry,
                    args,
                    tp,
                    deadline,
                    &mut hook,
                )
            }
            Some((cont, value)) => exec::resume(cont, value, deadline, &mut hook),
        }
    };
    match outcome {
        Ok(exec::Outcome::Parked(cont)) => {
            let handle = waited.expect("the hook parks only in wait");
            park(task, cont, handle, info);
            None
        }
        Ok(exec::Outcome::Returned(v)) => finish(task, Ok(v)),
        Err(e) => finish(task, Err(InvokeFailure::from(e))),
    }
}

/// `call(name, name_len, argbuf, request_len)`: `async_call`, then suspend the caller until
/// the callee finished. A caller that cannot be suspended (it was entered by `ccall`) gets
/// [`AbiError::Busy`] and nothing starts.
fn call_reply(
    task: &Task,
    pd: PdId,
    args: [u64; 4],
    can_park: bool,
    waited: &mut Option<u64>,
) -> exec::Reply {
    if !can_park {
        return exec::Reply::Value(encode(Err(AbiError::Busy)));
    }
    match start_call(task, pd, args, true) {
        Ok(handle) => {
            *waited = Some(handle);
            exec::Reply::Park
        }
        Err(e) => {
            // Refused: the caller runs on, so nothing of it may stay held back.
            jord::settled(|j| j.settle_running(pd));
            exec::Reply::Value(encode(Err(e)))
        }
    }
}

/// `wait(handle)`: the result if the call finished, else suspend the caller.
fn wait_reply(task: &Task, handle: u64, can_park: bool, waited: &mut Option<u64>) -> exec::Reply {
    locked(|c| match c.calls.get(&handle) {
        Some(call) if call.caller == task.id => match call.result {
            Some(v) => {
                c.calls.remove(&handle);
                exec::Reply::Value(v)
            }
            None if can_park => {
                *waited = Some(handle);
                exec::Reply::Park
            }
            None => exec::Reply::Value(encode(Err(AbiError::Busy))),
        },
        _ => exec::Reply::Value(encode(Err(AbiError::NoSuchCall))),
    })
}

/// Suspends `task` on `handle`, unless the call finished meanwhile (then it resumes at once).
fn park(task: Box<Task>, cont: exec::Continuation, handle: u64, info: JobInfo) {
    SUSPENSIONS.fetch_add(1, Ordering::Relaxed);
    let ready = locked(|c| {
        let finished = c.calls.get(&handle).and_then(|call| call.result);
        match finished {
            Some(v) => {
                c.calls.remove(&handle);
                Some((task, cont, v))
            }
            None => {
                c.parked.insert(handle, Parked { task, cont, info });
                None
            }
        }
    });
    if let Some((task, cont, v)) = ready {
        resume_later(task, cont, v, info);
    }
}

/// Queues the step that resumes `task` with `value`: on this executor when JBSQ admits it
/// (the continuation stays with the executor that ran its callee), else centrally.
fn resume_later(task: Box<Task>, cont: exec::Continuation, value: u64, info: JobInfo) {
    orchestrator::resume_here(
        info,
        orchestrator::TaskWork::new(move |info| step(task, Some((cont, value)), info)),
    );
}

/// `async_call(name, name_len, argbuf, request_len)` from `caller` running in `pd`. With
/// `suspending`, the caller is suspended right after (`call`), so its leaves for the ArgBuf
/// may be held back until it runs again.
fn start_call(caller: &Task, pd: PdId, a: [u64; 4], suspending: bool) -> Result<u64, AbiError> {
    let (name_ptr, name_len, buf, request_len) = (a[0], a[1], a[2], a[3]);
    if name_len == 0 || name_len > fjord_faas::function_name::MAX_FUNCTION_NAME_LEN as u64 {
        return Err(AbiError::InvalidArgs);
    }
    // The caller's address space is loaded on this CPU while the executor handles the call.
    let name = user_memory::bytes(name_ptr, name_len)?;
    let name = core::str::from_utf8(name).map_err(|_| AbiError::InvalidArgs)?;
    let f = super::lookup(name)
        .filter(|f| f.manifest.kind == fjord_faas::module::ModuleKind::Function)
        .ok_or(AbiError::NoSuchFunction)?;
    let capacity = jord::with(|j| j.vma_len(buf)).map_err(jord::state::abi_error)?;
    if request_len > capacity {
        return Err(AbiError::InvalidArgs);
    }
    let inv = match hop_mode() {
        HopMode::Move => {
            let instance = Instance::take(&f)?;
            let argbuf = ArgBuf::callers(buf, capacity);
            let moved = if suspending {
                argbuf.move_leaving(pd, instance.pd)
            } else {
                argbuf.move_to(pd, instance.pd)
            };
            if let Err(e) = moved {
                instance.give_back(&f, true);
                return Err(jord::state::abi_error(e));
            }
            Invocation { instance, argbuf }
        }
        HopMode::Copy => {
            // A pipe write: the kernel reads the request from the caller's buffer.
            user_memory::check_writable(buf, capacity)?;
            let channel = user_memory::bytes(buf, request_len)?.to_vec();
            // A pipe read: the callee's buffer gets the request from the channel.
            let inv = Invocation::prepare(&f, &channel, capacity)?;
            HOP_BYTES_COPIED.fetch_add(2 * request_len, Ordering::Relaxed);
            inv
        }
    };
    let (id, handle) = locked(|c| {
        let id = c.new_task_id();
        let handle = c.next_handle;
        c.next_handle += 1;
        c.calls.insert(
            handle,
            Call {
                caller: caller.id,
                result: None,
            },
        );
        (id, handle)
    });
    let task = Box::new(Task {
        id,
        deadline: deadline_of(&f),
        func: f,
        inv: Some(inv),
        request_len: request_len as usize,
        origin: Origin::Child {
            caller: caller.id,
            caller_pd: pd,
            handle,
            caller_buf: buf,
        },
    });
    let work = orchestrator::TaskWork::new(move |info| step(task, None, info));
    match orchestrator::submit_task(RequestClass::Internal, work) {
        Ok(_) => {
            NESTED_CALLS.fetch_add(1, Ordering::Relaxed);
            Ok(handle)
        }
        Err(SubmitError::QueueFull) => {
            // The work was dropped, and the task in it gave its invocation back (see
            // `Task::drop`): undo the call.
            locked(|c| c.calls.remove(&handle));
            Err(AbiError::Busy)
        }
    }
}

impl From<InvokeFailure> for AbiError {
    fn from(e: InvokeFailure) -> Self {
        match e {
            InvokeFailure::OutOfMemory => AbiError::NoMemory,
            InvokeFailure::Refused(e) => jord::state::abi_error(e),
            _ => AbiError::InvalidArgs,
        }
    }
}

impl Drop for Task {
    /// A task that never finished (the orchestrator refused its first step): the callee's
    /// instance goes back to its pool, and an ArgBuf moved from its caller returns to it.
    fn drop(&mut self) {
        let Some(inv) = self.inv.take() else {
            return;
        };
        if let Origin::Child { caller_pd, .. } = self.origin
            && !inv.argbuf.is_kernels()
        {
            let _ = inv.argbuf.move_to(inv.instance.pd, caller_pd);
        }
        inv.end(&self.func, true);
    }
}

/// Ends `task` with the function's `creturn` value or its failure.
fn finish(
    mut task: Box<Task>,
    result: Result<u64, InvokeFailure>,
) -> Option<Result<Vec<u8>, InvokeFailure>> {
    invoke::count_ending(&result);
    let inv = task
        .inv
        .take()
        .expect("a task holds its invocation until it finishes");
    let pd = inv.instance.pd;
    // Calls the task started and never waited for are orphaned: their results are dropped.
    locked(|c| c.calls.retain(|_, call| call.caller != task.id));
    let reusable = result.is_ok();
    match task.origin {
        Origin::Root => {
            let r = result.and_then(|v| {
                // If the function gave its right away, this fails; the ArgBuf's munmap when
                // the invocation ends revokes every right that is left.
                let _ = inv.argbuf.move_to(pd, PdId::KERNEL);
                invoke::response(&inv.argbuf, task.request_len, v)
            });
            // The response goes out first; the instance is restored after (`run_deferred`).
            crate::module::warm::defer(task.func.clone(), inv, reusable);
            Some(r)
        }
        Origin::Child {
            caller,
            caller_pd,
            handle,
            caller_buf,
        } => {
            let value = match result {
                Ok(v) => callee_value(&task, inv.argbuf.capacity, v),
                Err(e) => {
                    log::warn!("nested call to {}: {e}", task.func.manifest.name.as_str());
                    encode(Err(AbiError::CalleeFailed))
                }
            };
            let value = if inv.argbuf.is_kernels() {
                copy_back(&task, &inv, (caller, handle), caller_buf, value)
            } else {
                match inv.argbuf.move_to(pd, caller_pd) {
                    Ok(()) => value,
                    Err(_) => encode(Err(AbiError::CalleeFailed)),
                }
            };
            deliver(handle, value);
            crate::module::warm::defer(task.func.clone(), inv, reusable);
            None
        }
    }
}

/// The `wait` value for a callee's `creturn` value `v`.
fn callee_value(task: &Task, capacity: u64, v: u64) -> u64 {
    match FnReturn::decode(v) {
        FnReturn::Response(n) => {
            let end = (response_offset(task.request_len) as u64).checked_add(n);
            if end.is_some_and(|end| end <= capacity) {
                n
            } else {
                encode(Err(AbiError::CalleeFailed))
            }
        }
        FnReturn::Error(e) => (-(CALLEE_ERROR_BASE + e as i64)) as u64,
        FnReturn::UnknownError(_) => encode(Err(AbiError::CalleeFailed)),
    }
}

/// Copies a copied hop's response back through the channel into the buffer of the caller that
/// made call `handle` (a pipe write by the callee, then a read by the caller), while the caller
/// is known to be alive.
fn copy_back(
    task: &Task,
    inv: &Invocation,
    (caller, handle): (TaskId, u64),
    caller_buf: u64,
    value: u64,
) -> u64 {
    let Ok(n) = usize::try_from(value) else {
        return value;
    };
    if (value as i64) < 0 {
        return value;
    }
    let start = response_offset(task.request_len);
    let _ = inv.argbuf.move_to(inv.instance.pd, PdId::KERNEL);
    let Some(channel) = inv.argbuf.read(start, n) else {
        return encode(Err(AbiError::CalleeFailed));
    };
    locked(|c| {
        // The caller's buffer exists while its call record does (a caller removes its records
        // before its PD, and with it the buffer, is destroyed).
        if c.calls
            .get(&handle)
            .is_none_or(|call| call.caller != caller)
        {
            return value;
        }
        // The caller's buffer exists while the call record does (checked under this lock).
        if jord::with(|j| j.vma_write(caller_buf, start as u64, &channel)).is_err() {
            return encode(Err(AbiError::CalleeFailed));
        }
        HOP_BYTES_COPIED.fetch_add(2 * n as u64, Ordering::Relaxed);
        value
    })
}

/// Records the result of the call `handle` and resumes its caller if it is waiting for it.
fn deliver(handle: u64, value: u64) {
    let parked = locked(|c| {
        let call = c.calls.get_mut(&handle)?;
        match c.parked.remove(&handle) {
            Some(p) => {
                c.calls.remove(&handle);
                Some(p)
            }
            None => {
                call.result = Some(value);
                None
            }
        }
    });
    if let Some(p) = parked {
        resume_later(p.task, p.cont, value, p.info);
    }
}

/// Nested calls outstanding or finished but not yet waited for, and callers suspended.
pub fn outstanding() -> (usize, usize) {
    locked(|c| (c.calls.len(), c.parked.len()))
}
