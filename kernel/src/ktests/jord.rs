//! PdIsolation tests with hostile ring-3 code in Jord protection domains. Every attack must fault
//! or get an error, be reported, and leave the kernel and every other PD running.

use crate::arch::user::Access;
use crate::arch::{cpu, smp};
use crate::jord::exec::{CallError, call};
use crate::jord::state::Handoff;
use crate::jord::{self, state};
use crate::ktest;
use crate::ktests::user_programs::Program;
use alloc::format;
use alloc::string::String;
use fjord_kernel::{kassert, kassert_eq};
use fjord_libos::abi::{Error, Sysno, encode};
use fjord_pd::{MapFlags, PdId, PdIsolation, Perm};

type R<T> = Result<T, String>;

fn new_pd(creator: PdId) -> R<PdId> {
    jord::with(|j| j.cget(creator)).map_err(|e| format!("cget: {e:?}"))
}

fn put(pd: PdId) {
    if let Ok(p) = jord::with(|j| j.cput(PdId::KERNEL, pd)) {
        p.finish();
    }
}

fn mmap_for(owner: PdId, len: u64) -> R<u64> {
    jord::with(|j| j.mmap(owner, len, Perm::RW, MapFlags::default()))
        .map_err(|e| format!("mmap: {e:?}"))
}

fn run(pd: PdId, prog: Program, args: [u64; 4]) -> Result<u64, CallError> {
    let entry = crate::ktests::user_programs::entry(prog);
    let deadline = crate::arch::time::deadline_after_ms(1000);
    call(pd, entry, args, Some(deadline))
}

fn expect_fault(r: Result<u64, CallError>, pd: PdId, addr: u64, access: Access) -> R<()> {
    match r {
        Err(CallError::Faulted { pd: p, fault }) => {
            kassert_eq!(p, pd);
            kassert_eq!(fault.vector, 14);
            kassert_eq!(fault.addr, addr);
            kassert_eq!(fault.access, access);
            Ok(())
        }
        other => Err(format!(
            "expected a {access:?} fault at {addr:#x} in {pd:?}, got {other:?}"
        )),
    }
}

/// A PD `p` (created by the kernel), a PD `q` created by `p`, and a page of `p`'s that holds
/// `value` in its first word.
fn caller_callee_and_page(value: u64) -> R<(PdId, PdId, u64)> {
    let p = new_pd(PdId::KERNEL)?;
    let q = new_pd(p)?;
    let buf = mmap_for(p, 4096)?;
    kassert_eq!(run(p, Program::Write, [buf, value, 0, 0]), Ok(0));
    Ok((p, q, buf))
}

/// Reads the word at `offset` in the VMA at `base` through the kernel's direct map.
fn word_at(base: u64, offset: u64) -> R<u64> {
    let bytes = jord::with(|j| j.vma_bytes(base, offset, 8)).map_err(|e| format!("{e:?}"))?;
    Ok(u64::from_le_bytes(bytes.try_into().unwrap_or_default()))
}

ktest! {
    fn pd_reads_and_writes_its_own_vma() {
        let p = new_pd(PdId::KERNEL)?;
        let v = mmap_for(p, 4096)?;
        kassert_eq!(run(p, Program::Write, [v + 8, 0x5eed, 0, 0]), Ok(0));
        kassert_eq!(word_at(v, 8)?, 0x5eed);
        kassert_eq!(run(p, Program::Read, [v + 8, 0, 0, 0]), Ok(0x5eed));
        put(p);
        Ok(())
    }
}

ktest! {
    fn pd_cannot_touch_another_pds_vma() {
        let p = new_pd(PdId::KERNEL)?;
        let q = new_pd(PdId::KERNEL)?;
        let w = mmap_for(q, 4096)?;
        kassert_eq!(run(q, Program::Write, [w, 77, 0, 0]), Ok(0));
        let faults = jord::with(|j| j.stats.protection_faults);
        expect_fault(run(p, Program::Read, [w, 0, 0, 0]), p, w, Access::Read)?;
        expect_fault(run(p, Program::Write, [w, 1, 0, 0]), p, w, Access::Write)?;
        expect_fault(run(p, Program::Jump, [w, 0, 0, 0]), p, w, Access::Execute)?;
        kassert_eq!(jord::with(|j| j.stats.protection_faults), faults + 3);
        // Q is unaffected and its data intact; P still runs.
        kassert_eq!(run(q, Program::Read, [w, 0, 0, 0]), Ok(77));
        let own = mmap_for(p, 4096)?;
        kassert_eq!(run(p, Program::Write, [own, 1, 0, 0]), Ok(0));
        put(p);
        put(q);
        Ok(())
    }
}

ktest! {
    fn pd_cannot_reach_unmapped_jord_kernel_memory_or_the_vma_table() {
        let p = new_pd(PdId::KERNEL)?;
        let unmapped = crate::ktests::unmapped_jord_address();
        expect_fault(run(p, Program::Read, [unmapped, 0, 0, 0]), p, unmapped, Access::Read)?;
        let kernel = crate::mm::phys_to_virt(0x10_0000);
        expect_fault(run(p, Program::Read, [kernel, 0, 0, 0]), p, kernel, Access::Read)?;
        let text = crate::mm::kernel_tables::image().text.0;
        expect_fault(run(p, Program::Jump, [text, 0, 0, 0]), p, text, Access::Execute)?;
        let table = jord::with(|j| j.vma_table_address());
        expect_fault(run(p, Program::Write, [table, 0, 0, 0]), p, table, Access::Write)?;
        // The code VMA is Global read-execute: readable, not writable.
        let code = crate::ktests::user_programs::entry(Program::Hello);
        kassert!(run(p, Program::Read, [code, 0, 0, 0]).is_ok());
        expect_fault(run(p, Program::Write, [code, 0, 0, 0]), p, code, Access::Write)?;
        put(p);
        Ok(())
    }
}

ktest! {
    fn forged_ids_and_addresses_get_typed_errors() {
        let p = new_pd(PdId::KERNEL)?;
        let q = new_pd(PdId::KERNEL)?;
        let w = mmap_for(q, 4096)?;
        let own = mmap_for(p, 4096)?;
        let e = |e: Error| Ok(encode(Err(e)));
        let q_id = u64::from(q.raw());
        let sys = |no: Sysno, a: u64, b: u64, c: u64| run(p, Program::Syscall4, [no as u64, a, b, c]);
        type Case = (&'static str, Result<u64, CallError>, Result<u64, CallError>);
        let cases: [Case; 14] = [
            ("mmap bad prot", sys(Sysno::Mmap, 4096, 99, 0), e(Error::InvalidArgs)),
            ("mmap zero", sys(Sysno::Mmap, 0, 3, 0), e(Error::InvalidArgs)),
            ("mmap flags", sys(Sysno::Mmap, 4096, 3, 1), e(Error::InvalidArgs)),
            ("munmap other's", sys(Sysno::Munmap, w, 4096, 0), e(Error::AccessDenied)),
            ("munmap forged", sys(Sysno::Munmap, 0x1234_5000, 4096, 0), e(Error::BadAddress)),
            ("mprotect other's", sys(Sysno::Mprotect, w, 4096, 3), e(Error::AccessDenied)),
            ("pmove other's", sys(Sysno::Pmove, w, q_id, 1), e(Error::AccessDenied)),
            ("pmove to forged pd", sys(Sysno::Pmove, own, 9999, 1), e(Error::NoSuchPd)),
            ("pmove to dead pd", sys(Sysno::Pmove, own, 1000, 1), e(Error::NoSuchPd)),
            ("pcopy other's", sys(Sysno::Pcopy, w, q_id, 3), e(Error::AccessDenied)),
            ("cput not creator", sys(Sysno::Cput, q_id, 0, 0), e(Error::AccessDenied)),
            ("cput kernel", sys(Sysno::Cput, 0, 0, 0), e(Error::InvalidArgs)),
            ("ccall not creator", sys(Sysno::Ccall, q_id, 0, 0), e(Error::AccessDenied)),
            ("center forged", sys(Sysno::Center, 4242, 0, 0), e(Error::NoSuchPd)),
        ];
        for (name, got, want) in cases {
            kassert!(got == want, "{name}: got {got:?}, want {want:?}");
        }
        // Nothing was changed by the refused calls: Q still owns and uses its VMA.
        kassert_eq!(run(q, Program::Write, [w, 5, 0, 0]), Ok(0));
        put(p);
        put(q);
        Ok(())
    }
}

ktest! {
    fn argbuf_is_unusable_after_pmove() {
        let p = new_pd(PdId::KERNEL)?;
        let q = new_pd(PdId::KERNEL)?;
        let buf = mmap_for(p, 4096)?;
        kassert_eq!(run(p, Program::Write, [buf, 1234, 0, 0]), Ok(0));
        let before = jord::with(|j| j.stats.shootdowns);
        let r = run(p, Program::Syscall4, [Sysno::Pmove as u64, buf, u64::from(q.raw()), 3]);
        kassert_eq!(r, Ok(0));
        kassert!(jord::with(|j| j.stats.shootdowns) > before, "pmove must shoot down P's leaf");
        expect_fault(run(p, Program::Read, [buf, 0, 0, 0]), p, buf, Access::Read)?;
        // Zero copy: Q sees the very bytes P wrote.
        kassert_eq!(run(q, Program::Read, [buf, 0, 0, 0]), Ok(1234));
        put(p);
        put(q);
        Ok(())
    }
}

ktest! {
    fn nested_ccall_returns_through_the_caller() {
        let p = new_pd(PdId::KERNEL)?;
        let q = new_pd(p)?;
        let callee = crate::ktests::user_programs::entry(Program::ReturnInc);
        kassert_eq!(run(p, Program::Caller, [u64::from(q.raw()), callee, 41, 0]), Ok(42));
        // A fault in the callee is reported against the callee.
        let bad = crate::ktests::unmapped_jord_address();
        let read = crate::ktests::user_programs::entry(Program::Read);
        match run(p, Program::Caller, [u64::from(q.raw()), read, bad, 0]) {
            Err(CallError::Faulted { pd, fault }) => {
                kassert_eq!(pd, q);
                kassert_eq!(fault.addr, bad);
            }
            other => return Err(format!("{other:?}")),
        }
        put(q);
        put(p);
        Ok(())
    }
}

ktest! {
    fn revoke_on_one_cpu_stops_the_pd_on_another() {
        if smp::cpu_count() < 2 {
            return Err("needs at least 2 CPUs".into());
        }
        let p = new_pd(PdId::KERNEL)?;
        let v = jord::with(|j| j.mmap(PdId::KERNEL, 4096, Perm::RW, MapFlags::default()))
            .map_err(|e| format!("{e:?}"))?;
        jord::with(|j| j.pcopy(PdId::KERNEL, v, p, Perm::RW)).map_err(|e| format!("{e:?}"))?;
        let slot = alloc::sync::Arc::new(spin::Mutex::new(None));
        let s2 = slot.clone();
        smp::run_on(1, move || {
            let r = run(p, Program::IncLoop, [v, 0, 0, 0]);
            *s2.lock() = Some(r);
        })
        .map_err(|e| format!("{e:?}"))?;
        let start = cpu::rdtsc();
        while word_at(v, 0)? < 1000 {
            kassert!(cpu::rdtsc() - start < crate::arch::time::ticks_per_second(), "the PD never ran on CPU 1");
            core::hint::spin_loop();
        }
        let ipis = jord::with(|j| j.stats.ipis);
        jord::with(|j| j.revoke(PdId::KERNEL, v, p)).map_err(|e| format!("{e:?}"))?.finish();
        kassert!(jord::with(|j| j.stats.ipis) > ipis, "CPU 1 ran P, so it must get an IPI");
        let r = loop {
            if let Some(r) = slot.lock().take() {
                break r;
            }
            core::hint::spin_loop();
        };
        // The leaf is gone, so `inc [v]` faults. The error code of a read-modify-write is
        // the CPU's to choose: hardware reports the write, QEMU's TCG the read.
        let access = match &r {
            Err(CallError::Faulted { fault, .. }) if fault.access == Access::Write => {
                Access::Write
            }
            _ => Access::Read,
        };
        expect_fault(r, p, v, access)?;
        let count = word_at(v, 0)?;
        kassert!(count >= 1000, "count {count}");
        put(p);
        let _ = jord::with(|j| j.munmap(PdId::KERNEL, v, 4096)).map(|p| p.finish());
        Ok(())
    }
}

ktest! {
    fn no_isolation_mode_skips_the_checks() {
        state::reset(PdIsolation::None).map_err(|e| format!("{e:?}"))?;
        let result = (|| -> R<()> {
            let p = new_pd(PdId::KERNEL)?;
            let q = new_pd(PdId::KERNEL)?;
            let w = mmap_for(q, 4096)?;
            kassert_eq!(run(q, Program::Write, [w, 9, 0, 0]), Ok(0));
            // Jord_NI: P reads Q's VMA without a fault, and both share one root table.
            kassert_eq!(run(p, Program::Read, [w, 0, 0, 0]), Ok(9));
            kassert_eq!(jord::with(|j| j.root_of(p)), jord::with(|j| j.root_of(q)));
            Ok(())
        })();
        state::reset(PdIsolation::Full).map_err(|e| format!("{e:?}"))?;
        result
    }
}

ktest! {
    fn pd_teardown_returns_its_memory() {
        // Destroyed PDs leave their root tables in a reuse cache: warm it up first.
        let warm = new_pd(PdId::KERNEL)?;
        let v = mmap_for(warm, 64 * 1024)?;
        kassert_eq!(run(warm, Program::Write, [v + 60 * 1024, 1, 0, 0]), Ok(0));
        put(warm);
        let before = crate::mm::frames::free_frames();
        for _ in 0..20 {
            let p = new_pd(PdId::KERNEL)?;
            let v = mmap_for(p, 64 * 1024)?;
            kassert_eq!(run(p, Program::Write, [v + 60 * 1024, 1, 0, 0]), Ok(0));
            put(p);
        }
        kassert_eq!(crate::mm::frames::free_frames(), before);
        Ok(())
    }
}

ktest! {
    fn ccall_move_hands_the_argbuf_over_and_back_without_a_walk() {
        let callee = crate::ktests::user_programs::entry(Program::BumpReturnMove);
        // The same calls once before counting: the first PDs of a boot also fill the page
        // every PD's root table keeps once recycled, which is not what this test counts
        // (whether this test runs first depends on the link order of the tests).
        let (p, q, buf) = caller_callee_and_page(41)?;
        kassert_eq!(run(p, Program::MoveCaller, [u64::from(q.raw()), callee, buf, 0]), Ok(42));
        put(q);
        put(p);
        let (p, q, buf) = caller_callee_and_page(41)?;
        let before = jord::with(|j| j.stats);
        let r = run(p, Program::MoveCaller, [u64::from(q.raw()), callee, buf, 0]);
        kassert_eq!(r, Ok(42));
        let after = jord::with(|j| j.stats);
        // P's leaf was held back while Q ran and was valid again once the buffer came back:
        // only Q's increment needed a VLB fill; P read its response without one.
        kassert_eq!(after.revocations_deferred - before.revocations_deferred, 2);
        kassert_eq!(after.revocations_withdrawn - before.revocations_withdrawn, 1);
        kassert_eq!(after.fills - before.fills, 1);
        // Q's leaf is still in Q's table, held back; it is cleared before Q runs again.
        kassert!(jord::with(|j| j.leaf_of(q, buf)).is_some());
        expect_fault(run(q, Program::Read, [buf, 0, 0, 0]), q, buf, Access::Read)?;
        kassert!(jord::with(|j| j.leaf_of(q, buf)).is_none());
        kassert_eq!(run(p, Program::Read, [buf, 0, 0, 0]), Ok(42));
        put(q);
        put(p);
        Ok(())
    }
}

ktest! {
    fn a_caller_whose_argbuf_did_not_come_back_faults_on_it() {
        let (p, q, buf) = caller_callee_and_page(7)?;
        // Q returns with a plain creturn and keeps the buffer: P's held-back leaf must be
        // gone when P resumes and reads it.
        let keeps = crate::ktests::user_programs::entry(Program::ReturnInc);
        let r = run(p, Program::MoveCaller, [u64::from(q.raw()), keeps, buf, 0]);
        expect_fault(r, p, buf, Access::Read)?;
        kassert_eq!(run(q, Program::Read, [buf, 0, 0, 0]), Ok(7));
        put(q);
        put(p);
        Ok(())
    }
}

ktest! {
    fn refused_ccall_move_and_creturn_move_move_nothing() {
        let (p, q, buf) = caller_callee_and_page(9)?;
        let callee = crate::ktests::user_programs::entry(Program::BumpReturnMove);
        // No such PD: refused before anything moved.
        let r = run(p, Program::MoveCaller, [1 << 20, callee, buf, 0]);
        kassert_eq!(r, Ok(encode(Err(Error::NoSuchPd))));
        // Not the caller's buffer: refused, the caller keeps its rights.
        let other = mmap_for(q, 4096)?;
        let r = run(p, Program::MoveCaller, [u64::from(q.raw()), callee, other, 0]);
        kassert!(r.is_err(), "P cannot read Q's VMA: {r:?}");
        // A callee returning a buffer it does not hold gets an error and goes on running.
        let returns = crate::ktests::user_programs::entry(Program::ReturnMove);
        let r = run(p, Program::Caller, [u64::from(q.raw()), returns, buf, 0]);
        kassert_eq!(r, Ok(encode(Err(Error::AccessDenied))));
        kassert_eq!(run(p, Program::Read, [buf, 0, 0, 0]), Ok(9));
        put(q);
        put(p);
        Ok(())
    }
}

ktest! {
    fn held_back_leaves_go_before_the_frames_and_before_the_table_is_reused() {
        let p = new_pd(PdId::KERNEL)?;
        let q = new_pd(PdId::KERNEL)?;
        let buf = mmap_for(p, 4096)?;
        kassert_eq!(run(p, Program::Write, [buf, 3, 0, 0]), Ok(0));
        // P is loaded on no CPU: its leaf is held back.
        let before = jord::with(|j| j.stats.revocations_deferred);
        jord::with(|j| j.pmove_with(p, buf, q, Perm::RW, Handoff::LEAVING))
            .map_err(|e| format!("{e:?}"))?
            .finish();
        kassert_eq!(jord::with(|j| j.stats.revocations_deferred), before + 1);
        kassert!(jord::with(|j| j.leaf_of(p, buf)).is_some());
        // The owner frees the VMA: the leaf goes before its frames can be reused.
        jord::with(|j| j.munmap(p, buf, 4096))
            .map_err(|e| format!("{e:?}"))?
            .finish();
        kassert!(jord::with(|j| j.leaf_of(p, buf)).is_none());
        // Held back, then the PD is destroyed: its recycled table holds nothing of the VMA.
        let buf2 = mmap_for(p, 4096)?;
        kassert_eq!(run(p, Program::Write, [buf2, 3, 0, 0]), Ok(0));
        jord::with(|j| j.pmove_with(p, buf2, q, Perm::RW, Handoff::LEAVING))
            .map_err(|e| format!("{e:?}"))?
            .finish();
        let root = jord::with(|j| j.root_of(p));
        put(p);
        let r = new_pd(PdId::KERNEL)?;
        if jord::with(|j| j.root_of(r)) == root {
            kassert!(jord::with(|j| j.leaf_of(r, buf2)).is_none());
        }
        // The VMA went with its owner, so Q's right went too.
        expect_fault(run(q, Program::Read, [buf2, 0, 0, 0]), q, buf2, Access::Read)?;
        put(r);
        put(q);
        Ok(())
    }
}

ktest! {
    fn leaf_hints_follow_a_pds_root_through_recycling() {
        // P's one-page VMA is populated (its level-1 table is remembered), then P goes and its
        // root is recycled: a PD created after it, likely with the same id and root, must get
        // leaves and lose them on pmove exactly as a fresh one.
        let p = new_pd(PdId::KERNEL)?;
        let first = mmap_for(p, 4096)?;
        jord::with(|j| j.populate(p, first, Perm::RW));
        kassert!(jord::with(|j| j.leaf_of(p, first)).is_some(), "one page is populated");
        jord::with(|j| j.munmap(p, first, 4096))
            .map_err(|e| format!("{e:?}"))?
            .finish();
        kassert!(jord::with(|j| j.leaf_of(p, first)).is_none());
        kassert!(jord::with(|j| j.leaf_hint(p, first)).is_some());
        put(p);
        kassert!(
            jord::with(|j| j.leaf_hint(p, first)).is_none(),
            "a destroyed PD's hint is forgotten with its root"
        );
        for round in 0..3u64 {
            let a = new_pd(PdId::KERNEL)?;
            let b = new_pd(PdId::KERNEL)?;
            let buf = mmap_for(a, 4096)?;
            jord::with(|j| j.populate(a, buf, Perm::RW));
            kassert_eq!(run(a, Program::Write, [buf, 40 + round, 0, 0]), Ok(0));
            jord::with(|j| j.pmove_with(a, buf, b, Perm::RW, Handoff::TO_NEXT))
                .map_err(|e| format!("{e:?}"))?
                .finish();
            kassert!(jord::with(|j| j.leaf_of(a, buf)).is_none(), "A's leaf went");
            kassert!(jord::with(|j| j.leaf_of(b, buf)).is_some(), "B's leaf was filled");
            expect_fault(run(a, Program::Read, [buf, 0, 0, 0]), a, buf, Access::Read)?;
            kassert_eq!(run(b, Program::Read, [buf, 0, 0, 0]), Ok(40 + round));
            put(a);
            put(b);
        }
        Ok(())
    }
}
