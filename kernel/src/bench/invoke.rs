//! The `faas` benchmark group: the cost of one invocation of the `hello` function, split into
//! setup, call and teardown ([`Phases`]).

use crate::arch::cpu;
use crate::bench::{Sys, report_sys};
use crate::jord::exec;
use crate::module::instance::Invocation;
use crate::runtime::LoadedFunction;
use crate::runtime::invoke::{self, DEFAULT_RESPONSE_ROOM, InvokeFailure, MAX_REQUEST};
use alloc::vec::Vec;
use fjord_libos::function::argbuf_capacity;
use fjord_pd::PdId;

/// Where an invocation's time went, in TSC ticks (guest instructions under `-icount`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Phases {
    /// `cget`, ArgBuf `mmap` + copy + `pmove`, instance VMA `mmap`.
    setup: u64,
    /// `exec::call` until the function's `creturn` (including its VLB fills).
    call: u64,
    /// `pmove` back, response copy, `cput`, ArgBuf `munmap`.
    teardown: u64,
}

/// Samples per metric.
const RUNS: usize = 200;
/// Invocations before measuring (fills the PD root-table cache and the VMA free lists).
const WARM_UP: usize = 10;

/// Runs the group; skipped (with a note) unless `hello` is deployed (`modules=initrd`).
pub fn run_group() -> Result<(), &'static str> {
    let Some(f) = crate::runtime::lookup("hello") else {
        crate::kprintln!(
            "fjord: bench faas: function hello is not deployed (modules=initrd); skipped"
        );
        return Ok(());
    };
    let mut phases = Phases::default();
    for _ in 0..WARM_UP {
        invoke_function(&f, b"world", &mut phases).map_err(|_| "hello failed")?;
    }
    let (mut total, mut setup, mut call, mut teardown) = (
        Vec::with_capacity(RUNS),
        Vec::with_capacity(RUNS),
        Vec::with_capacity(RUNS),
        Vec::with_capacity(RUNS),
    );
    for _ in 0..RUNS {
        let t = cpu::rdtsc();
        let r = invoke_function(&f, b"world", &mut phases);
        total.push(cpu::rdtsc() - t);
        if r.as_deref() != Ok(b"hello, world!".as_slice()) {
            return Err("hello returned the wrong response");
        }
        setup.push(phases.setup);
        call.push(phases.call);
        teardown.push(phases.teardown);
    }
    report_sys("faas", "hello_invoke", Sys::Fjord, &mut total);
    report_sys("faas", "hello_invoke_setup", Sys::Fjord, &mut setup);
    report_sys("faas", "hello_invoke_call", Sys::Fjord, &mut call);
    report_sys("faas", "hello_invoke_teardown", Sys::Fjord, &mut teardown);
    Ok(())
}

/// Invokes `f` on `request` on this CPU, outside the orchestrator, with the manifest's limits
/// and the default response room, recording where the time went in `phases`. The benchmark's
/// own path: it takes the same instance, ArgBuf and `ccall` steps as a request's first step
/// (`runtime::task::run_root`) without the queueing, so the phases are the executor's alone.
fn invoke_function(
    f: &LoadedFunction,
    request: &[u8],
    phases: &mut Phases,
) -> Result<Vec<u8>, InvokeFailure> {
    if request.len() > MAX_REQUEST {
        return Err(InvokeFailure::RequestTooLarge);
    }
    let t0 = cpu::rdtsc();
    let room = (request.len() + DEFAULT_RESPONSE_ROOM).min(MAX_REQUEST);
    let inv = Invocation::prepare(f, request, argbuf_capacity(request.len(), room) as u64)?;
    let t1 = cpu::rdtsc();
    let limit_ms = f.manifest.time_limit_ms();
    let deadline = t1 + crate::arch::time::ticks_per_second() / 1000 * limit_ms;
    let (pd, tp) = (inv.instance.pd, inv.instance.thread_pointer());
    let args = [
        inv.argbuf.base,
        request.len() as u64,
        inv.argbuf.capacity,
        inv.instance.boundary,
    ];
    let called = exec::call_tp(pd, f.entry, args, tp, Some(deadline))
        .map_err(crate::runtime::InvokeFailure::from);
    invoke::count_ending(&called);
    let t2 = cpu::rdtsc();
    let reusable = called.is_ok();
    let result = called.and_then(|value| {
        // The ArgBuf goes back to the kernel (a pmove on the PD's behalf). If the function gave
        // its right away, the pmove fails; no code of this invocation runs any more, and the
        // ArgBuf's munmap in the teardown revokes every right that is left.
        let _ = inv.argbuf.move_to(pd, PdId::KERNEL);
        invoke::response(&inv.argbuf, request.len(), value)
    });
    inv.end(f, reusable);
    let t3 = cpu::rdtsc();
    *phases = Phases {
        setup: t1 - t0,
        call: t2 - t1,
        teardown: t3 - t2,
    };
    result
}
