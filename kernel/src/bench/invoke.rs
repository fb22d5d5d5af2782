//! The `faas` benchmark group: the cost of one invocation of the `hello` function, split into
//! setup, call and teardown (see [`crate::runtime::invoke::Phases`]).

use crate::arch::cpu;
use crate::bench::{Sys, report_sys};
use crate::runtime::invoke::{InvokeOptions, Phases, invoke_function};
use alloc::vec::Vec;

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
    let options = InvokeOptions::default();
    let mut phases = Phases::default();
    for _ in 0..WARM_UP {
        invoke_function(&f, b"world", &options, &mut phases).map_err(|_| "hello failed")?;
    }
    let (mut total, mut setup, mut call, mut teardown) = (
        Vec::with_capacity(RUNS),
        Vec::with_capacity(RUNS),
        Vec::with_capacity(RUNS),
        Vec::with_capacity(RUNS),
    );
    for _ in 0..RUNS {
        let t = cpu::rdtsc();
        let r = invoke_function(&f, b"world", &options, &mut phases);
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
