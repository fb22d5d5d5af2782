//! The `pd` benchmark group: the cost of Jord's isolation operations, under full isolation
//! (Jord), with isolation bypassed (Jord_NI), and against a baseline that builds a fresh page
//! table for every function — all in one boot.
//!
//! Ring-3 loops time the calls a function makes (mmap, munmap, mprotect, first touch, the PD
//! switch round trip); the kernel times the operations its executor performs (PD creation and
//! destruction, pmove, a whole invocation).

use crate::arch::cpu;
use crate::arch::user::{self, UserContext, UserExit};
use crate::bench::{Sys, report_sys};
use crate::jord::exec::call;
use crate::jord::{self, state};
use crate::ktests::user_programs::Program;
use crate::mm::frames::{self, DIRECT, KernelFrames};
use crate::mm::kernel_tables;
use alloc::vec::Vec;
use fjord_kernel::layout::PAGE_SIZE;
use fjord_kernel::paging::{Flags, PageTables};
use fjord_pd::{MapFlags, PdId, PdIsolation, Perm};

type R<T> = Result<T, &'static str>;

const N: usize = 200;

fn deadline() -> Option<u64> {
    Some(crate::arch::time::deadline_after_ms(10_000))
}

fn cget() -> R<PdId> {
    jord::with(|j| j.cget(PdId::KERNEL)).map_err(|_| "cget failed")
}

fn cput(pd: PdId) {
    if let Ok(p) = jord::with(|j| j.cput(PdId::KERNEL, pd)) {
        p.finish();
    }
}

fn results_vma(owner: PdId, words: usize) -> R<u64> {
    let len = (words as u64 * 8).next_multiple_of(PAGE_SIZE);
    jord::with(|j| j.mmap(owner, len, Perm::RW, MapFlags::default())).map_err(|_| "mmap failed")
}

fn read_words(base: u64, words: usize) -> R<Vec<u64>> {
    let bytes = jord::with(|j| j.vma_bytes(base, 0, 8 * words)).map_err(|_| "no backing")?;
    Ok(bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
        .collect())
}

fn run(pd: PdId, prog: Program, args: [u64; 4]) -> R<u64> {
    let entry = crate::ktests::user_programs::entry(prog);
    call(pd, entry, args, deadline()).map_err(|_| "invocation failed")
}

fn column(words: &[u64], stride: usize, col: usize) -> Vec<u64> {
    words.chunks(stride).map(|c| c[col]).collect()
}

/// Ring-3 measurements in one PD: fault fill, mmap/touch/munmap, mprotect, PD switch.
fn ring3_ops(sys: Sys) -> R<()> {
    let p = cget()?;
    let q = cget()?;
    // Fault fill: first write to each page of a fresh 1 MiB VMA.
    let pages = 256;
    let area = jord::with(|j| j.mmap(p, pages as u64 * PAGE_SIZE, Perm::RW, MapFlags::default()))
        .map_err(|_| "mmap failed")?;
    let res = results_vma(p, pages)?;
    run(p, Program::TouchLoop, [area, pages as u64, res, 0])?;
    report_sys("pd", "vma_fault_fill", sys, &mut read_words(res, pages)?);

    let res = results_vma(p, 3 * N)?;
    run(p, Program::MmLoop, [N as u64, res, 0, 0])?;
    let w = read_words(res, 3 * N)?;
    report_sys("pd", "mmap_4k", sys, &mut column(&w, 3, 0));
    report_sys("pd", "first_touch_4k", sys, &mut column(&w, 3, 1));
    report_sys("pd", "munmap_4k", sys, &mut column(&w, 3, 2));
    let mut total: Vec<u64> = w.chunks(3).map(|c| c.iter().sum()).collect();
    report_sys("pd", "mmap_touch_munmap_4k", sys, &mut total);

    let page = results_vma(p, 512)?;
    let res = results_vma(p, 2 * N)?;
    run(p, Program::MprotectLoop, [page, N as u64, res, 0])?;
    let w = read_words(res, 2 * N)?;
    report_sys("pd", "mprotect_4k", sys, &mut column(&w, 2, 0));
    report_sys("pd", "mprotect_4k_widen", sys, &mut column(&w, 2, 1));

    // PD switch round trip: P ccalls a function in R (created by P), which creturns.
    let r = jord::with(|j| j.cget(p)).map_err(|_| "cget failed")?;
    let res = results_vma(p, N)?;
    let callee = crate::ktests::user_programs::entry(Program::ReturnInc);
    run(
        p,
        Program::CcallLoop,
        [u64::from(r.raw()), callee, N as u64, res],
    )?;
    report_sys("pd", "pd_switch_roundtrip", sys, &mut read_words(res, N)?);
    cput(r);
    cput(q);
    cput(p);
    Ok(())
}

/// Kernel-side measurements: PD create/destroy, pmove, whole invocations.
fn kernel_ops(sys: Sys) -> R<()> {
    let mut create = Vec::with_capacity(N);
    let mut destroy = Vec::with_capacity(N);
    for _ in 0..N {
        let t0 = cpu::rdtsc();
        let p = cget()?;
        let t1 = cpu::rdtsc();
        cput(p);
        let t2 = cpu::rdtsc();
        create.push(t1 - t0);
        destroy.push(t2 - t1);
    }
    report_sys("pd", "pd_create", sys, &mut create);
    report_sys("pd", "pd_destroy", sys, &mut destroy);

    let p = cget()?;
    let q = cget()?;
    let buf =
        jord::with(|j| j.mmap(p, PAGE_SIZE, Perm::RW, MapFlags::default())).map_err(|_| "mmap")?;
    run(p, Program::Write, [buf, 1, 0, 0])?;
    let mut pmove = Vec::with_capacity(N);
    for i in 0..N {
        let (from, to) = if i % 2 == 0 { (p, q) } else { (q, p) };
        let t0 = cpu::rdtsc();
        jord::with(|j| j.pmove(from, buf, to, Perm::RW))
            .map_err(|_| "pmove failed")?
            .finish();
        pmove.push(cpu::rdtsc() - t0);
    }
    report_sys("pd", "pmove", sys, &mut pmove);
    cput(q);
    cput(p);

    let argbuf = jord::with(|j| j.mmap(PdId::KERNEL, PAGE_SIZE, Perm::RW, MapFlags::default()))
        .map_err(|_| "mmap")?;
    let ret = crate::ktests::user_programs::entry(Program::ReturnInc);
    let work = crate::ktests::user_programs::entry(Program::Work);
    for (metric, entry, arg) in [
        ("invocation_isolation_overhead", ret, 0),
        ("invocation_20k_function", work, 5000),
    ] {
        let mut s = Vec::with_capacity(N);
        let mut steps: [Vec<u64>; 5] = Default::default();
        for _ in 0..N {
            let t0 = cpu::rdtsc();
            let p = cget()?;
            let t1 = cpu::rdtsc();
            jord::with(|j| j.pmove(PdId::KERNEL, argbuf, p, Perm::RW))
                .map_err(|_| "pmove in")?
                .finish();
            let t2 = cpu::rdtsc();
            call(p, entry, [arg, argbuf, 0, 0], deadline()).map_err(|_| "invoke")?;
            let t3 = cpu::rdtsc();
            jord::with(|j| j.pmove(p, argbuf, PdId::KERNEL, Perm::RW))
                .map_err(|_| "pmove out")?
                .finish();
            let t4 = cpu::rdtsc();
            cput(p);
            let t5 = cpu::rdtsc();
            s.push(t5 - t0);
            for (k, d) in [t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4]
                .into_iter()
                .enumerate()
            {
                steps[k].push(d);
            }
        }
        report_sys("pd", metric, sys, &mut s);
        if arg == 0 {
            let names = [
                "invocation_step_create",
                "invocation_step_pmove_in",
                "invocation_step_call",
                "invocation_step_pmove_out",
                "invocation_step_destroy",
            ];
            for (name, st) in names.iter().zip(steps.iter_mut()) {
                report_sys("pd", name, sys, st);
            }
        }
    }
    let _ = jord::with(|j| j.munmap(PdId::KERNEL, argbuf, PAGE_SIZE)).map(|p| p.finish());
    Ok(())
}

/// The baseline: isolate each invocation by building a fresh page table (code, stack and
/// argument buffer mapped anew), running the function in it, and tearing it down.
fn baseline_invocations() -> R<()> {
    let blob = crate::ktests::user_programs::blob();
    let code_pages = blob.len().div_ceil(PAGE_SIZE as usize);
    let code = frames::alloc_contiguous(code_pages, 1).map_err(|_| "frames")?;
    // SAFETY: fresh frames reached through the direct map.
    unsafe {
        core::ptr::copy_nonoverlapping(
            blob.as_ptr(),
            crate::mm::phys_to_virt(code) as *mut u8,
            blob.len(),
        )
    };
    let stack = frames::alloc_contiguous(4, 1).map_err(|_| "frames")?;
    let argbuf = frames::alloc_zeroed().map_err(|_| "frames")?;
    let base = fjord_kernel::layout::JORD_REGION_BASE;
    let (stack_va, arg_va) = (base + 0x10_0000, base + 0x20_0000);
    for (metric, prog, arg) in [
        ("invocation_isolation_overhead", Program::ReturnInc, 0),
        ("invocation_20k_function", Program::Work, 5000),
    ] {
        let mut s = Vec::with_capacity(N);
        for _ in 0..N {
            let t0 = cpu::rdtsc();
            let mut pt = PageTables::create_sharing_kernel(
                &DIRECT,
                &mut KernelFrames,
                kernel_tables::kernel_root(),
            )
            .map_err(|_| "root")?;
            for i in 0..code_pages as u64 {
                pt.map(
                    base + i * PAGE_SIZE,
                    code + i * PAGE_SIZE,
                    Flags::USER,
                    &mut KernelFrames,
                )
                .map_err(|_| "map")?;
            }
            let rw = Flags::USER | Flags::WRITABLE | Flags::NO_EXECUTE;
            for i in 0..4 {
                pt.map(
                    stack_va + i * PAGE_SIZE,
                    stack + i * PAGE_SIZE,
                    rw,
                    &mut KernelFrames,
                )
                .map_err(|_| "map")?;
            }
            pt.map(arg_va, argbuf, rw, &mut KernelFrames)
                .map_err(|_| "map")?;
            let mut ctx = UserContext::new(
                base + prog.offset(),
                stack_va + 4 * PAGE_SIZE,
                [arg, arg_va, 0, 0],
            );
            let exit = cpu::without_interrupts(|| {
                // SAFETY: the fresh root shares the kernel half with the kernel's tables.
                unsafe { cpu::write_cr3(pt.root()) };
                let e = user::run(&mut ctx, deadline());
                // SAFETY: back to the kernel's own tables.
                unsafe { cpu::write_cr3(kernel_tables::kernel_root()) };
                e
            });
            if !matches!(exit, UserExit::Request { .. } | UserExit::Exited(_)) {
                return Err("baseline function did not return");
            }
            pt.free_user_tables(&mut KernelFrames);
            s.push(cpu::rdtsc() - t0);
        }
        report_sys("pd", metric, Sys::Baseline, &mut s);
    }
    let _ = frames::free_contiguous(code, code_pages);
    let _ = frames::free_contiguous(stack, 4);
    let _ = frames::free(argbuf);
    Ok(())
}

/// Runs the whole `pd` group: Jord, then Jord_NI, then the baseline.
pub fn run_group() -> R<()> {
    state::reset(PdIsolation::Full).map_err(|_| "reset")?;
    ring3_ops(Sys::Fjord)?;
    kernel_ops(Sys::Fjord)?;
    let stats = jord::with(|j| j.stats);
    crate::kprintln!(
        "fjord: pd events: {} fills, {} protection faults, {} shootdowns ({} leaves), {} IPIs, {} PD switches",
        stats.fills,
        stats.protection_faults,
        stats.shootdowns,
        stats.leaves_removed,
        stats.ipis,
        stats.pd_switches
    );
    state::reset(PdIsolation::None).map_err(|_| "reset")?;
    ring3_ops(Sys::FjordNi)?;
    kernel_ops(Sys::FjordNi)?;
    state::reset(PdIsolation::Full).map_err(|_| "reset")?;
    baseline_invocations()
}
