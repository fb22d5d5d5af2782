//! Nested calls between function modules (boot with `modules=initrd`): synchronous chains,
//! asynchronous fan-out, zero-copy ArgBuf passing, the copying baseline, failing callees, and
//! teardown without leaks.

use crate::jord;
use crate::ktest;
use crate::orchestrator;
use crate::runtime::{self, task};
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::Ordering;
use fjord_kernel::{kassert, kassert_eq};

type R<T> = Result<T, String>;

/// Invokes `name` as an external request through the orchestrator, as the gateway does.
fn request(name: &str, req: &[u8]) -> R<Vec<u8>> {
    runtime::invoke(name, req).map_err(|e| format!("{e}"))
}

fn needs_modules() -> R<()> {
    let names = runtime::list();
    for f in ["relay", "fanout", "hostile"] {
        kassert!(names.iter().any(|n| n == f), "function {f} is not deployed");
    }
    Ok(())
}

/// The addresses in a relay response: (own ArgBuf, ArgBuf sent to the callee) per level,
/// then the leaf's own ArgBuf.
fn relay_addresses(resp: &str) -> R<(Vec<(u64, u64)>, u64)> {
    let hex =
        |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).map_err(|e| format!("{e}"));
    let mut levels = Vec::new();
    for part in resp.split(';').filter(|p| !p.is_empty()) {
        if let Some(rest) = part.strip_prefix("relay@") {
            let (own, sent) = rest.split_once(" sent@").ok_or("malformed relay level")?;
            levels.push((hex(own)?, hex(sent)?));
        } else if let Some(rest) = part.strip_prefix("leaf@") {
            let own = rest.split(' ').next().ok_or("malformed leaf")?;
            return Ok((levels, hex(own)?));
        }
    }
    Err(format!("no leaf in {resp:?}"))
}

ktest! {
    fn chain_moves_the_argbuf_without_copying() {
        needs_modules()?;
        task::set_hop_mode(task::HopMode::Move);
        let copied = task::HOP_BYTES_COPIED.load(Ordering::Relaxed);
        let calls = task::NESTED_CALLS.load(Ordering::Relaxed);
        let resp = request("relay", b"3 abc")?;
        let resp = String::from_utf8(resp).map_err(|_| "not UTF-8")?;
        let (levels, leaf) = relay_addresses(&resp)?;
        kassert!(levels.len() == 3, "{resp}");
        kassert!(resp.ends_with("sum=294;"), "{resp}");
        // Each callee ran on exactly the buffer its caller filled: the same VMA, moved.
        for w in levels.windows(2) {
            kassert_eq!(w[0].1, w[1].0);
        }
        kassert_eq!(levels[2].1, leaf);
        kassert_eq!(task::HOP_BYTES_COPIED.load(Ordering::Relaxed), copied);
        kassert_eq!(task::NESTED_CALLS.load(Ordering::Relaxed), calls + 3);
        kassert_eq!(task::outstanding(), (0, 0));
        Ok(())
    }
}

ktest! {
    fn async_fanout_waits_for_every_callee() {
        needs_modules()?;
        let suspended = task::SUSPENSIONS.load(Ordering::Relaxed);
        let resp = request("fanout", b"8")?;
        let resp = String::from_utf8(resp).map_err(|_| "not UTF-8")?;
        kassert!(resp.starts_with("fanout k=8;"), "{resp}");
        kassert!(resp.matches("leaf@").count() == 8, "{resp}");
        // Leaf i sums the digits of "i": responses come back in call order.
        kassert!(resp.ends_with("sum=55;"), "{resp}");
        // With one executor the callees can only run while the caller is suspended in `wait`;
        // with more, they may all have finished before it waits.
        if orchestrator::executors() == 1 {
            kassert!(task::SUSPENSIONS.load(Ordering::Relaxed) > suspended);
        }
        kassert!(request("fanout", b"0").is_err());
        kassert!(request("fanout", b"99").is_err());
        kassert_eq!(task::outstanding(), (0, 0));
        Ok(())
    }
}

ktest! {
    fn copying_baseline_copies_every_hop() {
        needs_modules()?;
        task::set_hop_mode(task::HopMode::Copy);
        let copied = task::HOP_BYTES_COPIED.load(Ordering::Relaxed);
        let r = request("relay", b"2 xyz");
        task::set_hop_mode(task::HopMode::Move);
        let resp = String::from_utf8(r?).map_err(|_| "not UTF-8")?;
        let (levels, leaf) = relay_addresses(&resp)?;
        kassert!(levels.len() == 2, "{resp}");
        kassert!(resp.ends_with("sum=363;"), "{resp}");
        // The callee got a fresh buffer holding a copy.
        kassert!(levels[0].1 != levels[1].0);
        kassert!(levels[1].1 != leaf);
        kassert!(task::HOP_BYTES_COPIED.load(Ordering::Relaxed) > copied);
        kassert_eq!(task::outstanding(), (0, 0));
        Ok(())
    }
}

ktest! {
    fn callers_survive_failing_callees() {
        needs_modules()?;
        let kernel = crate::mm::phys_to_virt(0x10_0000);
        let missing = request("relay", b"call:no-such-fn:x")?;
        kassert_eq!(missing.as_slice(), b"err:NoSuchFunction".as_slice());
        let attack = format!("call:hostile:read {kernel:x}");
        let faulted = request("relay", attack.as_bytes())?;
        kassert_eq!(faulted.as_slice(), b"err:CalleeFailed".as_slice());
        let panicked = request("relay", b"call:hostile:panic")?;
        kassert_eq!(panicked.as_slice(), b"err:Callee(Panicked)".as_slice());
        kassert_eq!(request("relay", b"call:relay:0 a")?.as_slice()[..8], *b"ok:leaf@");
        kassert_eq!(task::outstanding(), (0, 0));
        Ok(())
    }
}

ktest! {
    fn nested_requests_leak_no_frames() {
        needs_modules()?;
        let round = || -> R<()> {
            request("relay", b"2 leak")?;
            request("fanout", b"3")?;
            Ok(())
        };
        for _ in 0..5 {
            round()?;
        }
        // Idle instances kept for reuse hold frames and PDs; how many depends on how the
        // calls overlapped. Count without them.
        crate::module::warm::drain();
        jord::with(|j| j.trim_root_cache());
        let before = crate::mm::frames::free_frames();
        let pds = jord::with(|j| j.stats.pds_created - j.stats.pds_destroyed);
        const ROUNDS: usize = 30;
        for _ in 0..ROUNDS {
            round()?;
        }
        // Recycled PD root tables keep the page-table pages of the addresses their PDs used
        // in a reuse cache, whose contents depend on how callees overlapped on the executors:
        // empty it before each count. A leak of even one frame per round would show as at
        // least ROUNDS.
        crate::module::warm::drain();
        jord::with(|j| j.trim_root_cache());
        let after = crate::mm::frames::free_frames();
        kassert!(after + ROUNDS / 2 > before, "free frames {before} -> {after} over {ROUNDS} rounds");
        kassert_eq!(jord::with(|j| j.stats.pds_created - j.stats.pds_destroyed), pds);
        Ok(())
    }
}

ktest! {
    fn nested_calls_work_in_every_orchestrator_group() {
        needs_modules()?;
        orchestrator::init_groups(2, 2);
        let run = || -> R<()> {
            for _ in 0..orchestrator::groups() * 2 {
                let resp = request("relay", b"2 grp")?;
                kassert!(resp.ends_with(b"sum=329;"), "{:?}", String::from_utf8_lossy(&resp));
                let resp = request("fanout", b"4")?;
                kassert!(resp.starts_with(b"fanout k=4;"));
            }
            Ok(())
        };
        let r = run();
        orchestrator::init(2);
        r?;
        kassert_eq!(task::outstanding(), (0, 0));
        Ok(())
    }
}

ktest! {
    fn a_synchronous_call_holds_the_callers_leaves_back() {
        needs_modules()?;
        task::set_hop_mode(task::HopMode::Move);
        let counts = || {
            jord::with(|j| {
                (
                    j.stats.revocations_deferred,
                    j.stats.revocations_withdrawn,
                )
            })
        };
        let (held, withdrawn) = counts();
        let resp = request("relay", b"3 abc")?;
        let resp = String::from_utf8(resp).map_err(|_| "not UTF-8")?;
        kassert!(resp.ends_with("sum=294;"), "{resp}");
        // Each of the three callers was suspended in `call` with its leaves for the ArgBuf
        // held back, and got the buffer back with those leaves valid again.
        let (held2, withdrawn2) = counts();
        kassert_eq!(held2 - held, 3);
        kassert_eq!(withdrawn2 - withdrawn, 3);
        kassert_eq!(task::outstanding(), (0, 0));
        Ok(())
    }
}

ktest! {
    fn a_call_with_forged_arguments_is_refused_and_the_caller_goes_on() {
        needs_modules()?;
        let before = task::NESTED_CALLS.load(Ordering::Relaxed);
        // An address in the Jord region that no VMA of the caller's covers, and kernel memory.
        for addr in [crate::ktests::unmapped_jord_address(), 0x10_0000] {
            let resp = request("hostile", format!("forge-call {addr:x}").as_bytes())?;
            kassert_eq!(resp.len(), 16);
            let word = |i: usize| i64::from_le_bytes(resp[i..i + 8].try_into().unwrap_or([0; 8]));
            kassert!(word(0) < 0, "a forged ArgBuf must be refused: {}", word(0));
            kassert!(word(8) < 0, "a forged name must be refused: {}", word(8));
        }
        kassert_eq!(task::NESTED_CALLS.load(Ordering::Relaxed), before);
        kassert_eq!(task::outstanding(), (0, 0));
        Ok(())
    }
}

ktest! {
    fn callers_resume_on_the_executor_that_ran_their_callee() {
        needs_modules()?;
        if crate::arch::smp::cpu_count() < 2 {
            // One CPU: the orchestrator runs every step inline.
            return Ok(());
        }
        // JBSQ(2): room on the executor for the caller beside its finishing callee.
        orchestrator::init(2);
        let before = orchestrator::stats();
        // A chain of synchronous calls: each caller waits for one callee at a time, so when
        // the callee returns no internal request is waiting and its executor resumes the
        // caller itself.
        let r = request("relay", b"2 local")?;
        kassert!(String::from_utf8_lossy(&r).contains("sum="));
        let after = orchestrator::stats();
        kassert!(after.local_resumes >= before.local_resumes + 2);
        // Those steps were not dispatched by the orchestrator core.
        kassert!(after.dispatched - before.dispatched <= 3);
        Ok(())
    }
}
