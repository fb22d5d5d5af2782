//! Groundhog request isolation (boot with `modules=initrd`): snapshots after `init`, restores
//! of exactly the dirtied pages, the Groundhog modes, and the leak tests: what one request
//! leaves in the heap, the stack, a fresh VMA, the registers or the state `init` built is gone
//! for the next; a function cannot write its own snapshot.

use crate::arch::user::Access;
use crate::jord;
use crate::ktest;
use crate::orchestrator::{self, Ticket};
use crate::runtime::{self, InvokeFailure, LoadedFunction, invoke};
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use fjord_faas::jbsq::RequestClass;
use fjord_groundhog::GroundhogMode;
use fjord_kernel::{kassert, kassert_eq};

type R<T> = Result<T, String>;

const SECRET: u64 = 0x5ec2_e75e_c2e7_5ec2;

/// What `leak-init`'s `init` writes at the start of each page it maps.
const MAPPED: u64 = 0x1717_1717_1717_1717;

fn text(name: &str, req: &str) -> R<String> {
    as_text(name, req, invoke(name, req.as_bytes()))
}

/// `name`'s response `out` to `req` as text.
fn as_text(name: &str, req: &str, out: Result<alloc::vec::Vec<u8>, InvokeFailure>) -> R<String> {
    let bytes = out.map_err(|e| format!("{name} {req}: {e}"))?;
    String::from_utf8(bytes).map_err(|_| format!("{name} {req}: not UTF-8"))
}

/// Submits `req` to `f` as an external request, without waiting for it.
fn submit(f: &Arc<LoadedFunction>, req: &str) -> R<Ticket> {
    let work = runtime::task::root_work(f.clone(), req.as_bytes().to_vec());
    orchestrator::submit_task(RequestClass::External, work).map_err(|e| format!("{e:?}"))
}

/// The value of `key=<hex>` in a function's report.
fn field(report: &str, key: &str) -> R<u64> {
    let v = report
        .split(' ')
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .ok_or_else(|| format!("no {key} in {report:?}"))?;
    u64::from_str_radix(v, 16).map_err(|_| format!("bad {key} in {report:?}"))
}

fn needs(names: &[&str]) -> R<()> {
    let deployed = runtime::list();
    for f in names {
        kassert!(
            deployed.iter().any(|n| n == f),
            "function {f} is not deployed (boot with modules=initrd and the initrd from xtask)"
        );
    }
    Ok(())
}

/// Deploys `name` again, from its own module, in `mode`.
fn redeploy(name: &str, mode: GroundhogMode) -> R<()> {
    let elf = runtime::module_file(name).ok_or("no module file")?;
    runtime::deploy_with(name, &elf, Some(mode)).map_err(|e| format!("{e}"))?;
    Ok(())
}

/// Runs `f` with warm instances on, restoring the setting after.
fn warm(f: impl FnOnce() -> R<()>) -> R<()> {
    let was = crate::module::warm::enabled();
    crate::module::warm::set_enabled(true);
    crate::module::warm::drain();
    let r = f();
    crate::module::warm::set_enabled(was);
    r
}

/// `leak write` then `leak dump`: what the second sees of the first's secret.
fn leak_round() -> R<String> {
    let wrote = text("leak", &format!("write {SECRET:x}"))?;
    field(&wrote, "vma")?;
    text("leak", "dump")
}

ktest! {
    fn a_request_sees_nothing_the_last_one_wrote() {
        needs(&["leak"])?;
        warm(|| {
            let dump = leak_round()?;
            for k in ["heap", "stack", "vma"] {
                kassert!(field(&dump, k)? == 0, "{k} in {dump}");
            }
            for k in ["rbx", "r12", "r13", "r14", "r15"] {
                kassert!(field(&dump, k)? != SECRET, "{k} in {dump}");
            }
            // The same instance served both, restored in between.
            kassert_eq!(runtime::lookup("leak").ok_or("leak")?.warm.idle(), 1);
            let st = runtime::lookup("leak").ok_or("leak")?.restore_stats();
            kassert!(st.restores >= 2 && st.pages > 0, "{st:?}");
            // The VMA the request mapped is gone with it.
            let wrote = text("leak", &format!("write {SECRET:x}"))?;
            let vma = field(&wrote, "vma")?;
            // The dump maps a VMA of its own first, possibly at the same address: then it
            // reads zero there; otherwise the read faults.
            match invoke("leak", format!("peek {vma:x}").as_bytes()) {
                Ok(out) => kassert_eq!(out.get(..21), Some(&b"word=0000000000000000"[..])),
                Err(InvokeFailure::Faulted { fault, .. }) => kassert_eq!(fault.addr, vma),
                Err(e) => return Err(format!("peek: {e}")),
            }
            Ok(())
        })
    }
}

ktest! {
    fn without_restore_the_next_request_sees_the_secret() {
        needs(&["leak"])?;
        let r = warm(|| {
            redeploy("leak", GroundhogMode::None)?;
            let dump = leak_round()?;
            // Groundhog's insecure baseline: the heap and the stack still hold it.
            kassert!(field(&dump, "heap")? == SECRET, "{dump}");
            kassert!(field(&dump, "stack")? == SECRET, "{dump}");
            redeploy("leak", GroundhogMode::Fresh)?;
            let pds = || jord::with(|j| j.stats.pds_created);
            let before = pds();
            let dump = leak_round()?;
            kassert!(field(&dump, "heap")? == 0, "{dump}");
            kassert!(field(&dump, "stack")? == 0, "{dump}");
            // A new PD per request, none kept.
            kassert!(pds() >= before + 2);
            kassert_eq!(runtime::lookup("leak").ok_or("leak")?.warm.idle(), 0);
            Ok(())
        });
        redeploy("leak", GroundhogMode::Restore)?;
        r
    }
}

ktest! {
    fn without_restore_an_unchanged_instance_is_not_scrubbed_and_a_vma_a_request_mapped_goes() {
        needs(&["leak", "hello"])?;
        let r = warm(|| {
            redeploy("leak", GroundhogMode::None)?;
            redeploy("hello", GroundhogMode::None)?;
            let skipped = || jord::with(|j| j.stats.scrubs_skipped);
            invoke("hello", b"a").map_err(|e| format!("{e}"))?;
            // A request that left the layout as it was: nothing to scrub, as in mode `restore`.
            let before = skipped();
            invoke("hello", b"b").map_err(|e| format!("{e}"))?;
            kassert_eq!(skipped(), before + 1);
            // One that mapped a VMA: scrubbed, and the VMA is gone for the next (which maps
            // nothing, so the read faults at it).
            let before = skipped();
            let vma = field(&text("leak", &format!("write {SECRET:x}"))?, "vma")?;
            kassert_eq!(skipped(), before);
            match invoke("leak", format!("peek {vma:x}").as_bytes()) {
                Err(InvokeFailure::Faulted { fault, .. }) => kassert_eq!(fault.addr, vma),
                other => return Err(format!("peek of a freed VMA: {other:?}")),
            }
            Ok(())
        });
        redeploy("leak", GroundhogMode::Restore)?;
        redeploy("hello", GroundhogMode::Restore)?;
        r
    }
}

ktest! {
    fn init_state_is_restored_after_a_request_corrupts_it() {
        needs(&["leak-init"])?;
        warm(|| {
            // init built 1000 entries 3 * i and the label "snapshot" (the warm-up input).
            let expect = |dump: &str| -> R<()> {
                kassert!(field(dump, "len")? == 1000, "{dump}");
                kassert!(field(dump, "sum")? == 3 * 999 * 1000 / 2, "{dump}");
                kassert!(field(dump, "first")? == 0, "{dump}");
                kassert!(
                    field(dump, "label")? == u64::from_le_bytes(*b"snapshot"),
                    "{dump}"
                );
                // The pages init mapped are kept in the snapshot, their contents restored.
                kassert!(field(dump, "mapped")? == MAPPED, "{dump}");
                kassert!(field(dump, "tail")? == MAPPED, "{dump}");
                // So are those of the ten one-page VMAs it mapped besides.
                kassert!(field(dump, "scattered")? == 10, "{dump}");
                Ok(())
            };
            expect(&text("leak-init", "dump")?)?;
            let corrupted = text("leak-init", &format!("corrupt {SECRET:x}"))?;
            kassert_eq!(field(&corrupted, "len")?, 5000);
            expect(&text("leak-init", "dump")?)?;
            kassert_eq!(runtime::lookup("leak-init").ok_or("leak-init")?.warm.idle(), 1);
            // A request that faults mid-way: the instance is replaced, and the next request
            // starts from a new instance's snapshot, built by its own init.
            kassert!(invoke("leak-init", b"bogus").is_err());
            expect(&text("leak-init", "dump")?)?;
            Ok(())
        })
    }
}

ktest! {
    fn the_warm_pools_memory_bound_counts_what_init_mapped_and_the_snapshot() {
        needs(&["leak-init"])?;
        warm(|| {
            let f = runtime::lookup("leak-init").ok_or("leak-init")?;
            kassert_eq!(crate::module::warm::kept_bytes(), 0);
            text("leak-init", "dump")?;
            crate::module::warm::settle();
            kassert_eq!(crate::module::warm::kept(), 1);
            let m = &f.manifest;
            let own = (m.stack_size + m.heap_size + crate::jord::state::PD_STACK_SIZE) as usize;
            // Thirteen pages init mapped (two, one read-only, ten scattered), and at least as
            // many copied into the snapshot, beside the heap's.
            let held = crate::module::warm::kept_bytes();
            kassert!(held >= own + 2 * 13 * 4096, "{held} bytes for {own} of its own");
            crate::module::warm::drain();
            kassert_eq!(crate::module::warm::kept_bytes(), 0);
            Ok(())
        })
    }
}

ktest! {
    fn without_restore_the_vmas_init_mapped_stay_between_requests() {
        needs(&["leak-init"])?;
        let r = warm(|| {
            redeploy("leak-init", GroundhogMode::None)?;
            // The page init mapped is there for every request of the reused instance, and a
            // request's corruption stays (Groundhog's insecure baseline).
            for _ in 0..2 {
                let dump = text("leak-init", "dump")?;
                kassert!(field(&dump, "mapped")? == MAPPED, "{dump}");
                kassert!(field(&dump, "scattered")? == 10, "{dump}");
            }
            text("leak-init", &format!("corrupt {SECRET:x}"))?;
            let dump = text("leak-init", "dump")?;
            kassert!(field(&dump, "len")? == 5000, "{dump}");
            kassert!(field(&dump, "mapped")? == SECRET, "{dump}");
            kassert!(field(&dump, "scattered")? == 0, "{dump}");
            kassert_eq!(runtime::lookup("leak-init").ok_or("leak-init")?.warm.idle(), 1);
            Ok(())
        });
        redeploy("leak-init", GroundhogMode::Restore)?;
        r
    }
}

ktest! {
    fn a_vma_init_mapped_that_a_request_unmaps_shrinks_or_protects_is_put_back() {
        needs(&["leak-init"])?;
        warm(|| {
            text("leak-init", "dump")?;
            let pds_created = || jord::with(|j| j.stats.pds_created);
            let remade_now = || jord::with(|j| j.stats.vmas_remade);
            let (pds, remade) = (pds_created(), remade_now());
            let mut remade_total = 0;
            for (change, remakes) in [("unmap", 1), ("shrink", 1), ("protect", 0)] {
                text("leak-init", &format!("corrupt {SECRET:x}"))?;
                let done = text("leak-init", change)?;
                kassert!(field(&done, "done")? == 1, "{change}: {done}");
                let dump = text("leak-init", "dump")?;
                kassert!(field(&dump, "mapped")? == MAPPED, "after {change}: {dump}");
                kassert!(field(&dump, "tail")? == MAPPED, "after {change}: {dump}");
                kassert!(field(&dump, "len")? == 1000, "after {change}: {dump}");
                // Restored in place: the same instance, no new PD, the VMA remade if it went.
                kassert!(pds_created() == pds, "{change}: a new instance");
                remade_total += remakes;
                let n = remade_now() - remade;
                kassert!(n == remade_total, "{change}: {n} VMAs remade");
            }
            kassert_eq!(runtime::lookup("leak-init").ok_or("leak-init")?.warm.idle(), 1);
            Ok(())
        })
    }
}

ktest! {
    fn a_page_init_made_read_only_that_a_request_made_writable_and_wrote_is_put_back() {
        needs(&["leak-init"])?;
        warm(|| {
            let dump = text("leak-init", "dump")?;
            kassert!(field(&dump, "ro")? == MAPPED, "{dump}");
            for round in 0..2 {
                // The right goes back to read-only, removing the leaf the write made dirty.
                let done = text("leak-init", &format!("widen {SECRET:x}"))?;
                kassert!(field(&done, "done")? == 1, "{done}");
                let dump = text("leak-init", "dump")?;
                kassert!(field(&dump, "ro")? == MAPPED, "round {round}: {dump}");
                kassert!(field(&dump, "mapped")? == MAPPED, "round {round}: {dump}");
            }
            kassert_eq!(runtime::lookup("leak-init").ok_or("leak-init")?.warm.idle(), 1);
            Ok(())
        })
    }
}

/// Submits `req` to `name` twice before waiting for either, so the second waits behind the
/// first for the executor; returns both responses once both instances are back.
fn queued_pair(name: &str, req: &str) -> R<[String; 2]> {
    queued(name, [req, req])
}

/// Submits both requests to `name` before waiting for either, so the second waits behind the
/// first for the executor; returns both responses once both instances are back.
fn queued(name: &str, reqs: [&str; 2]) -> R<[String; 2]> {
    let f = runtime::lookup(name).ok_or("not deployed")?;
    let tickets = [submit(&f, reqs[0])?, submit(&f, reqs[1])?];
    let out = tickets.map(|t| orchestrator::wait(t).result);
    crate::module::warm::settle();
    let [a, b] = out;
    Ok([as_text(name, reqs[0], a)?, as_text(name, reqs[1], b)?])
}

ktest! {
    fn a_request_waiting_for_the_executor_takes_another_instance_and_both_are_restored() {
        needs(&["leak"])?;
        warm(|| {
            let f = runtime::lookup("leak").ok_or("leak")?;
            text("leak", "dump")?;
            kassert_eq!(f.warm.idle(), 1);
            let before = f.restore_stats().restores;
            // With one executor, the second request waits for it behind the first: it does
            // not wait for the first one's restore too but takes a new instance, and the first
            // is restored once no request waits. (With more executors the second may run
            // beside the first, or after the first's restore, on an instance of either kind.)
            let one = crate::orchestrator::executors() == 1;
            let wrote = queued_pair("leak", &format!("write {SECRET:x}"))?;
            field(&wrote[1], "vma")?;
            let idle = f.warm.idle();
            kassert!(idle == 2 || (!one && idle == 1), "{idle} idle");
            kassert_eq!(f.restore_stats().restores - before, 2);
            kassert_eq!(crate::module::warm::deferred(), 0);
            // Two queued dumps, on both instances when there are two: every one was restored.
            for dump in queued_pair("leak", "dump")? {
                for k in ["heap", "stack", "vma"] {
                    kassert!(field(&dump, k)? == 0, "{k} in {dump}");
                }
            }
            kassert!(f.warm.idle() >= idle);
            Ok(())
        })
    }
}

ktest! {
    fn the_pools_count_every_instance_made_until_it_is_destroyed() {
        needs(&["leak"])?;
        warm(|| {
            let f = runtime::lookup("leak").ok_or("leak")?;
            kassert_eq!(f.warm.instances(), 0);
            let all = crate::module::warm::instances();
            text("leak", "dump")?;
            kassert_eq!((f.warm.instances(), f.warm.idle()), (1, 1));
            // The second request of a pair takes a new instance (there is room for it), and
            // both are kept; a fault (a read at address 0) destroys its instance.
            queued_pair("leak", "dump")?;
            kassert_eq!(f.warm.instances(), f.warm.idle());
            let two = f.warm.instances();
            kassert!(two == 1 || two == 2, "{two} instances");
            kassert_eq!(crate::module::warm::instances(), all + two);
            kassert!(text("leak", "peek 0").is_err());
            crate::module::warm::settle();
            kassert_eq!(f.warm.instances(), two - 1);
            crate::module::warm::drain();
            kassert_eq!((f.warm.instances(), crate::module::warm::instances()), (0, all));
            Ok(())
        })
    }
}

ktest! {
    fn a_restore_stopped_for_a_waiting_request_is_finished_before_its_instance_serves_again() {
        needs(&["dirty"])?;
        warm(|| {
            let f = runtime::lookup("dirty").ok_or("dirty")?;
            let response = |req: &str| as_text("dirty", req, orchestrator::wait(submit(&f, req)?).result);
            text("dirty", "0")?;
            kassert_eq!(f.warm.idle(), 1);
            let one = orchestrator::executors() == 1;
            // A restore of 8,000 pages takes 500 steps (tens of milliseconds under TCG); the
            // check, sent as soon as the write's response is out, arrives during it. The
            // restore stops at its next step and the check runs on a new instance (or on the
            // first, its restore finished first), never on a half restored one: a restore puts
            // the highest pages back first, so the check reads the lowest. The check's arrival
            // during the restore depends on how the host schedules the vCPUs' threads, so the
            // pair is sent until a restore stopped, sixteen times at most.
            // Where the hypervisor emulates ring 0 instruction by instruction (KVM's PVM
            // backend, found by the boot's SYSCALL probe), 8,000 pages do not fit in the
            // function's one-second limit, and 1,000 take longer than 8,000 do under TCG.
            let n = if crate::boot::ring0_emulated() { 1000 } else { 8000 };
            let low = 64;
            let mut stopped = 0;
            for _ in 0..16 {
                if stopped > 0 {
                    break;
                }
                let before = f.restore_stats();
                kassert_eq!(response(&format!("{n}"))?, format!("{n}"));
                kassert_eq!(response(&format!("check {low}"))?, "0");
                crate::module::warm::settle();
                let after = f.restore_stats();
                stopped += after.interrupted - before.interrupted;
                if !one {
                    // Another executor may take the check and still be restoring its instance;
                    // and with the check on a third instance beside two 64 MiB ones, the pools'
                    // memory bound may send one away instead of keeping it.
                    continue;
                }
                kassert_eq!(after.replaced, before.replaced);
                kassert_eq!(after.restores - before.restores, 2);
                kassert!(after.pages - before.pages >= n, "{} pages", after.pages);
                kassert_eq!(crate::module::warm::deferred(), 0);
            }
            kassert!(stopped > 0 || !one, "no restore stopped for the waiting check");
            // Every instance is whole again: two queued checks take one each when there are two.
            kassert!(f.warm.idle() >= 1);
            for seen in queued("dirty", [&format!("check {n}"), &format!("check {n}")])? {
                kassert_eq!(seen, "0");
            }
            Ok(())
        })
    }
}

ktest! {
    fn a_restore_copies_back_exactly_the_dirtied_pages() {
        needs(&["dirty"])?;
        warm(|| {
            let f = runtime::lookup("dirty").ok_or("dirty")?;
            let pages = || f.restore_stats().pages;
            // The handler's own stack pages, whatever it dirties in the heap.
            text("dirty", "0")?;
            let p0 = pages();
            text("dirty", "0")?;
            let base = pages() - p0;
            for n in [1u64, 10, 100, 1000] {
                let before = pages();
                kassert_eq!(text("dirty", &format!("{n}"))?, format!("{n}"));
                kassert!(pages() - before == base + n, "dirtying {n} pages");
            }
            kassert_eq!(f.warm.idle(), 1);
            Ok(())
        })
    }
}

ktest! {
    fn a_function_cannot_write_its_snapshot() {
        needs(&["hostile"])?;
        warm(|| {
            kassert_eq!(invoke("hostile", b"recall").as_deref(), Ok(&[0u8; 8][..]));
            let f = runtime::lookup("hostile").ok_or("hostile")?;
            let frames = f.warm.idle_snapshot_frames();
            let frame = frames.first().ok_or("no idle hostile instance")?.ok_or("no snapshot")?;
            // The snapshot is reachable only through the kernel's direct map.
            let va = crate::mm::phys_to_virt(frame);
            for (op, access) in [("write", Access::Write), ("read", Access::Read)] {
                match invoke("hostile", format!("{op} {va:x}").as_bytes()) {
                    Err(InvokeFailure::Faulted { fault, .. }) => {
                        kassert_eq!(fault.addr, va);
                        kassert_eq!(fault.access, access);
                    }
                    other => return Err(format!("{op} of the snapshot: {other:?}")),
                }
            }
            // The faulting instance was replaced; a new one serves, from its own snapshot.
            kassert_eq!(invoke("hostile", b"recall").as_deref(), Ok(&[0u8; 8][..]));
            Ok(())
        })
    }
}

ktest! {
    fn without_isolation_every_instance_is_restored_too() {
        // Jord_NI: every PD shares one page table, so two instances' pages share its level-2
        // entries. A restore of one must not hide what the other dirtied from its own.
        needs(&["leak"])?;
        let reset = |i| jord::state::reset(i).map_err(|e| format!("{e:?}"));
        reset(fjord_pd::PdIsolation::None)?;
        let r = warm(|| {
            let f = runtime::lookup("leak").ok_or("leak")?;
            for round in 0..3 {
                let wrote = queued_pair("leak", &format!("write {SECRET:x}"))?;
                field(&wrote[1], "vma")?;
                for dump in queued_pair("leak", "dump")? {
                    for k in ["heap", "stack", "vma"] {
                        kassert!(field(&dump, k)? == 0, "round {round}: {k} in {dump}");
                    }
                }
            }
            kassert!(f.warm.idle() >= 1);
            Ok(())
        });
        reset(fjord_pd::PdIsolation::Full)?;
        r
    }
}
