//! Running code in protection domains: the per-CPU executor loop behind `ccall`.
//!
//! A call between PDs does not nest kernel stacks. The calling PD's `ccall` system call ends its
//! run (`UserExit::Request`); the executor saves the caller's context as a continuation, enters
//! the callee on its own stack, and when the callee returns (`creturn`) resumes the caller with
//! the result in `rax`. `cexit` suspends the running PD and hands a value to the PD below it;
//! `center` resumes a suspended PD. This is the paper's continuation model (§3.4).

use super::state::{Handoff, Jord, abi_error, with};
use crate::arch::percpu;
use crate::arch::user::{self, UserContext, UserExit, UserFault};
use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use fjord_libos::abi::{Error as AbiError, Sysno, encode};
use fjord_pd::{Error, PdId, Perm};

/// How a call into a PD failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallError {
    /// Code in `pd` raised an exception (a protection fault, an invalid opcode, ...).
    Faulted {
        /// The PD whose code faulted.
        pd: PdId,
        /// The fault.
        fault: UserFault,
    },
    /// The invocation ran past its deadline; `pd` was running.
    TimedOut {
        /// The PD that was preempted.
        pd: PdId,
    },
    /// PrivLib refused to enter the PD.
    Refused(Error),
}

struct Activation {
    pd: PdId,
    ctx: UserContext,
}

/// What the executor's owner answers to a system call it handles ([`Sysno::AsyncCall`],
/// [`Sysno::Wait`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    /// Return this `rax` value to the caller and go on running it.
    Value(u64),
    /// Suspend the caller (`cexit` to the kernel); the run ends with [`Outcome::Parked`].
    Park,
}

/// Handles the system calls the executor delegates to its owner: `(pd, call, args, can_park)`,
/// where `can_park` says whether the caller may be suspended (only the outermost activation
/// of a run can be).
pub type Hook<'a> = &'a mut dyn FnMut(PdId, Sysno, [u64; 4], bool) -> Reply;

/// A PD suspended by the executor with `cexit`, resumed by [`resume`] (on any CPU).
#[derive(Debug)]
pub struct Continuation {
    pd: PdId,
    ctx: UserContext,
}

/// How a run ended without failing.
#[derive(Debug)]
pub enum Outcome {
    /// The outermost activation returned this value (`creturn` or `exit`).
    Returned(u64),
    /// The outermost activation was suspended on the owner's request ([`Reply::Park`]).
    Parked(Continuation),
}

/// The activations of one call, outermost first. The outermost lives in place; only nested
/// calls use the heap, so a plain invocation allocates nothing.
struct Stack {
    bottom: Option<Activation>,
    nested: Vec<Activation>,
}

impl Stack {
    fn len(&self) -> usize {
        usize::from(self.bottom.is_some()) + self.nested.len()
    }

    fn last_mut(&mut self) -> Option<&mut Activation> {
        match self.nested.last_mut() {
            Some(a) => Some(a),
            None => self.bottom.as_mut(),
        }
    }

    fn last_pd(&self) -> Option<PdId> {
        match self.nested.last() {
            Some(a) => Some(a.pd),
            None => self.bottom.as_ref().map(|a| a.pd),
        }
    }

    fn push(&mut self, a: Activation) {
        if self.bottom.is_none() {
            self.bottom = Some(a);
        } else {
            self.nested.push(a);
        }
    }

    fn pop(&mut self) -> Option<Activation> {
        self.nested.pop().or_else(|| self.bottom.take())
    }

    /// The PD of the activation below the top one (`None` for the outermost).
    fn below_top_pd(&self) -> Option<PdId> {
        match self.nested.len() {
            0 => None,
            1 => self.bottom.as_ref().map(|a| a.pd),
            n => Some(self.nested[n - 2].pd),
        }
    }

    /// The PDs of the activations, innermost first.
    fn pds_innermost_first(&self) -> impl Iterator<Item = PdId> + '_ {
        self.nested
            .iter()
            .rev()
            .chain(self.bottom.iter())
            .map(|a| a.pd)
    }
}

/// Contexts of PDs suspended with `cexit`, by PD.
static SUSPENDED: spin::Mutex<BTreeMap<u16, UserContext>> = spin::Mutex::new(BTreeMap::new());

/// This CPU's index. Runs only on CPUs whose per-CPU block is installed (it is before a CPU
/// can enter ring 3), so it reads the block without checking GS first.
fn cpu() -> u32 {
    percpu::current().index as u32
}

/// Calls `entry(args)` in `pd` (from the kernel, PD 0) and runs every nested call it makes,
/// until it returns with `creturn` (or `exit`). `deadline` is a TSC value.
///
/// Every PD transition (entry, return, suspension) updates PrivLib's call state and loads the
/// PD that runs next in one pass over the Jord state.
pub fn call(pd: PdId, entry: u64, args: [u64; 4], deadline: Option<u64>) -> Result<u64, CallError> {
    call_tp(pd, entry, args, 0, deadline)
}

/// [`call`] with `thread_pointer` as the FS base of the run (a function module's heap header,
/// see `fjord_libos::heap`).
pub fn call_tp(
    pd: PdId,
    entry: u64,
    args: [u64; 4],
    thread_pointer: u64,
    deadline: Option<u64>,
) -> Result<u64, CallError> {
    let mut refuse =
        |_: PdId, _: Sysno, _: [u64; 4], _: bool| Reply::Value(encode(Err(AbiError::NoSys)));
    match call_with(pd, entry, args, thread_pointer, deadline, &mut refuse)? {
        Outcome::Returned(v) => Ok(v),
        Outcome::Parked(_) => unreachable!("the hook never parks"),
    }
}

/// [`call_tp`], with `hook` handling the nested-call system calls; the run may end parked.
pub fn call_with(
    pd: PdId,
    entry: u64,
    args: [u64; 4],
    thread_pointer: u64,
    deadline: Option<u64>,
    hook: Hook<'_>,
) -> Result<Outcome, CallError> {
    let stack_top = with(|j: &mut Jord| {
        j.privlib.ccall(PdId::KERNEL, pd, cpu())?;
        j.switch_to(pd);
        Ok(j.stack_top(pd))
    })
    .map_err(CallError::Refused)?;
    let mut ctx = UserContext::new(entry, stack_top, args);
    ctx.fs_base = thread_pointer;
    run_from(Activation { pd, ctx }, deadline, hook)
}

/// Resumes the parked `cont` (`center` from the kernel) with `value` in `rax`, and runs it as
/// [`call_with`] does.
pub fn resume(
    cont: Continuation,
    value: u64,
    deadline: Option<u64>,
    hook: Hook<'_>,
) -> Result<Outcome, CallError> {
    let Continuation { pd, mut ctx } = cont;
    with(|j| {
        j.privlib.center(PdId::KERNEL, pd, cpu())?;
        j.switch_to(pd);
        Ok(())
    })
    .map_err(CallError::Refused)?;
    ctx.frame.rax = value;
    run_from(Activation { pd, ctx }, deadline, hook)
}

fn run_from(
    bottom: Activation,
    deadline: Option<u64>,
    hook: Hook<'_>,
) -> Result<Outcome, CallError> {
    let mut stack = Stack {
        bottom: Some(bottom),
        nested: Vec::new(),
    };
    let result = run_stack(&mut stack, deadline, hook);
    // On success the last return already switched back to the kernel's tables. Otherwise
    // unwind the call states and return this CPU to the kernel's tables.
    if stack.len() != 0 {
        with(|j| {
            for p in stack.pds_innermost_first() {
                let _ = j.privlib.creturn(p, cpu());
            }
            j.switch_to(PdId::KERNEL);
        });
    }
    result
}

/// Runs the top activation until the stack empties (or the outermost activation parks). The
/// top activation's PD is loaded on entry and after every transition.
fn run_stack(
    stack: &mut Stack,
    deadline: Option<u64>,
    hook: Hook<'_>,
) -> Result<Outcome, CallError> {
    loop {
        let Some(top) = stack.last_mut() else {
            unreachable!("the loop returns when the last activation returns")
        };
        let pd = top.pd;
        match user::run(&mut top.ctx, deadline) {
            UserExit::Exited(v) => {
                if let Some(v) = finish_top(stack, v) {
                    return Ok(Outcome::Returned(v));
                }
            }
            UserExit::Request { no, args } => match Sysno::from_raw(no) {
                Some(Sysno::Creturn) => {
                    if let Some(v) = finish_top(stack, args[0]) {
                        return Ok(Outcome::Returned(v));
                    }
                }
                Some(call @ (Sysno::AsyncCall | Sysno::Wait | Sysno::Call)) => {
                    let can_park = stack.len() == 1;
                    match hook(pd, call, args, can_park) {
                        Reply::Value(v) => set_result(stack, Ok(v)),
                        Reply::Park if can_park => {
                            let a = stack.pop().expect("one activation");
                            with(|j| {
                                let _ = j.privlib.cexit(pd, cpu());
                                j.switch_to(PdId::KERNEL);
                            });
                            return Ok(Outcome::Parked(Continuation { pd, ctx: a.ctx }));
                        }
                        Reply::Park => set_result(stack, Err(AbiError::Busy)),
                    }
                }
                Some(call @ (Sysno::Ccall | Sysno::CcallMove)) => {
                    if let Err(e) = enter(stack, pd, args, call == Sysno::CcallMove) {
                        set_result(stack, Err(abi_error(e)));
                    }
                }
                Some(Sysno::CreturnMove) => {
                    // pmove back to the activation below (the kernel for the outermost), then
                    // creturn; a refused move leaves the callee running with the error.
                    match Perm::from_raw(args[2])
                        .and_then(|prot| finish_top_moving(stack, args[0], args[1], prot))
                    {
                        Ok(Some(v)) => return Ok(Outcome::Returned(v)),
                        Ok(None) => {}
                        Err(e) => set_result(stack, Err(abi_error(e))),
                    }
                }
                Some(Sysno::Cexit) => {
                    // Suspend the running PD; the PD below receives the value.
                    if stack.len() == 1 {
                        set_result(stack, Err(AbiError::InvalidArgs));
                        continue;
                    }
                    let a = stack.pop().expect("checked non-empty");
                    let below = stack.last_pd().expect("checked two activations");
                    with(|j| {
                        let _ = j.privlib.cexit(pd, cpu());
                        j.switch_to(below);
                    });
                    SUSPENDED.lock().insert(a.pd.raw(), a.ctx);
                    set_result(stack, Ok(args[0]));
                }
                Some(Sysno::Center) => {
                    let resumed = super::state::pd_arg(args[0])
                        .and_then(|cid| with(|j| j.privlib.center(pd, cid, cpu())).map(|_| cid));
                    match resumed {
                        Ok(cid) => match SUSPENDED.lock().remove(&cid.raw()) {
                            Some(mut ctx) => {
                                ctx.frame.rax = 0;
                                with(|j| j.switch_to(cid));
                                stack.push(Activation { pd: cid, ctx });
                            }
                            None => set_result(stack, Err(AbiError::InvalidArgs)),
                        },
                        Err(e) => set_result(stack, Err(abi_error(e))),
                    }
                }
                _ => set_result(stack, Err(AbiError::NoSys)),
            },
            UserExit::Fault(fault) => return Err(CallError::Faulted { pd, fault }),
            UserExit::TimedOut => return Err(CallError::TimedOut { pd }),
        }
    }
}

/// `ccall` from the top activation, in `pd`, to PD `args[0]` at entry `args[1]` with `args[2]`
/// in `rdi`; `moving` also moves the ArgBuf at `args[2]` to the callee as `args[3]`
/// (`ccall_move`). Enters first (a refusal leaves the buffer where it was), then moves (a
/// refused move undoes the entry), then pushes the callee's activation.
fn enter(stack: &mut Stack, pd: PdId, args: [u64; 4], moving: bool) -> Result<(), Error> {
    let cid = super::state::pd_arg(args[0])?;
    let prot = if moving {
        Some(Perm::from_raw(args[3])?)
    } else {
        None
    };
    let (top_of_stack, flushes) = with(|j| {
        j.privlib.ccall(pd, cid, cpu())?;
        let flushes = match prot {
            Some(prot) => match j.pmove_with(pd, args[2], cid, prot, Handoff::LEAVING) {
                Ok(p) => Some(p),
                Err(e) => {
                    let _ = j.privlib.creturn(cid, cpu());
                    return Err(e);
                }
            },
            None => None,
        };
        j.switch_to(cid);
        Ok((j.stack_top(cid), flushes))
    })?;
    // Remote flushes wait for other CPUs: never under the Jord lock.
    if let Some(flushes) = flushes {
        flushes.finish();
    }
    stack.push(Activation {
        pd: cid,
        ctx: UserContext::new(args[1], top_of_stack, [args[2], 0, 0, 0]),
    });
    Ok(())
}

/// Ends the top activation with `value` and loads the PD that runs next (the kernel's tables
/// when none); returns the value when that was the outermost activation.
fn finish_top(stack: &mut Stack, value: u64) -> Option<u64> {
    let done = stack.pop().expect("the loop runs only with activations").pd;
    let next = stack.last_pd().unwrap_or(PdId::KERNEL);
    with(|j| {
        let _ = j.privlib.creturn(done, cpu());
        j.switch_to(next);
    });
    if next == PdId::KERNEL {
        return Some(value);
    }
    set_result(stack, Ok(value));
    None
}

/// [`finish_top`] after moving the ArgBuf at `buf` (as `prot`) to the activation below (the
/// kernel for the outermost), in one pass over the Jord state. A refused move changes nothing.
fn finish_top_moving(
    stack: &mut Stack,
    value: u64,
    buf: u64,
    prot: Perm,
) -> Result<Option<u64>, Error> {
    let done = stack
        .last_pd()
        .expect("the loop runs only with activations");
    let next = stack.below_top_pd().unwrap_or(PdId::KERNEL);
    let flushes = with(|j| {
        let p = j.pmove_with(done, buf, next, prot, Handoff::LEAVING)?;
        let _ = j.privlib.creturn(done, cpu());
        j.switch_to(next);
        Ok::<_, Error>(p)
    })?;
    // Remote flushes wait for other CPUs: never under the Jord lock.
    flushes.finish();
    stack.pop();
    if next == PdId::KERNEL {
        return Ok(Some(value));
    }
    set_result(stack, Ok(value));
    Ok(None)
}

fn set_result(stack: &mut Stack, r: Result<u64, AbiError>) {
    if let Some(top) = stack.last_mut() {
        top.ctx.frame.rax = encode(r);
    }
}
