//! Tests of the orchestrator: JBSQ(k) dispatch to executor CPUs, internal-before-external
//! priority, and PD invocations through it.

use crate::arch::{cpu, smp};
use crate::jord::{self, exec};
use crate::ktest;
use crate::ktests::user_programs::Program;
use crate::orchestrator::{self, Done};
use crate::runtime::InvokeFailure;
use alloc::boxed::Box;
use alloc::format;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, Ordering};
use fjord_faas::jbsq::RequestClass;
use fjord_kernel::{kassert, kassert_eq};
use fjord_pd::PdId;

ktest! {
    fn requests_run_on_executor_cpus() {
        orchestrator::init(2);
        let d = orchestrator::run_external(Box::new(|| Ok(b"pong".to_vec())))
            .map_err(|e| format!("{e:?}"))?;
        kassert_eq!(d.result, Ok(b"pong".to_vec()));
        if smp::cpu_count() > 1 {
            kassert!(d.cpu != 0, "CPU 0 is the orchestrator, not an executor");
        }
        kassert!(d.arrived <= d.started && d.started <= d.finished);
        Ok(())
    }
}

/// Jobs that hold their executor until [`RELEASE`] is set, so dispatch decisions can be
/// observed without depending on timing.
static RELEASE: AtomicBool = AtomicBool::new(false);

fn blocking_job(tag: u8) -> orchestrator::Work {
    Box::new(move || {
        while !RELEASE.load(Ordering::Acquire) {
            core::hint::spin_loop();
        }
        Ok(alloc::vec![tag])
    })
}

ktest! {
    fn jbsq_bounds_outstanding_requests_per_executor() {
        if smp::cpu_count() < 2 {
            return Err("needs an executor CPU besides the orchestrator".into());
        }
        let k = 2;
        orchestrator::init(k);
        RELEASE.store(false, Ordering::Release);
        let before = orchestrator::stats();
        let tickets: Vec<_> = (0..8u8)
            .map(|i| orchestrator::submit(RequestClass::External, blocking_job(i)))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("{e:?}"))?;
        let pushed = orchestrator::poll();
        // Nothing can complete while blocked: exactly k per executor were pushed.
        kassert_eq!(pushed, (k * orchestrator::executors()).min(8));
        kassert_eq!(orchestrator::poll(), 0);
        RELEASE.store(true, Ordering::Release);
        for (i, t) in tickets.into_iter().enumerate() {
            let d: Done = orchestrator::wait(t);
            kassert_eq!(d.result, Ok(alloc::vec![i as u8]));
        }
        let after = orchestrator::stats();
        kassert_eq!(after.completed - before.completed, 8);
        kassert_eq!(after.dispatched - before.dispatched, 8);
        Ok(())
    }
}

ktest! {
    fn a_submission_after_an_empty_poll_is_dispatched() {
        orchestrator::init(2);
        kassert_eq!(orchestrator::poll(), 0);
        // Nothing new since that empty scan: this poll takes the lock-free path.
        kassert_eq!(orchestrator::poll(), 0);
        let t = orchestrator::submit(RequestClass::External, Box::new(|| Ok(b"late".to_vec())))
            .map_err(|e| format!("{e:?}"))?;
        kassert_eq!(orchestrator::poll(), 1);
        kassert_eq!(orchestrator::wait(t).result, Ok(b"late".to_vec()));
        Ok(())
    }
}

ktest! {
    fn internal_requests_go_before_waiting_external_ones() {
        if smp::cpu_count() < 2 {
            return Err("needs an executor CPU besides the orchestrator".into());
        }
        orchestrator::init(1);
        RELEASE.store(false, Ordering::Release);
        let busy: Vec<_> = (0..orchestrator::executors())
            .map(|i| orchestrator::submit(RequestClass::External, blocking_job(i as u8)))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("{e:?}"))?;
        orchestrator::poll();
        let ext = orchestrator::submit(RequestClass::External, Box::new(|| Ok(Vec::new())))
            .map_err(|e| format!("{e:?}"))?;
        let int = orchestrator::submit(RequestClass::Internal, Box::new(|| Ok(Vec::new())))
            .map_err(|e| format!("{e:?}"))?;
        kassert_eq!(orchestrator::poll(), 0);
        RELEASE.store(true, Ordering::Release);
        let e = orchestrator::wait(ext);
        let i = orchestrator::wait(int);
        for b in busy {
            orchestrator::wait(b);
        }
        // Back to the boot's JBSQ(2): later tests count on it.
        orchestrator::init(2);
        kassert!(i.dispatched < e.dispatched, "internal dispatched at {} after external at {}", i.dispatched, e.dispatched);
        Ok(())
    }
}

ktest! {
    fn pd_invocations_run_through_the_orchestrator() {
        orchestrator::init(2);
        let entry = crate::ktests::user_programs::entry(Program::ReturnInc);
        let tickets: Vec<_> = (0..6u64)
            .map(|i| {
                orchestrator::submit(RequestClass::External, Box::new(move || {
                    let pd = jord::with(|j| j.cget(PdId::KERNEL)).map_err(InvokeFailure::Refused)?;
                    let deadline = crate::arch::time::deadline_after_ms(1000);
                    let r = exec::call(pd, entry, [i, 0, 0, 0], Some(deadline));
                    if let Ok(p) = jord::with(|j| j.cput(PdId::KERNEL, pd)) {
                        p.finish();
                    }
                    let v = r.map_err(crate::runtime::InvokeFailure::from)?;
                    Ok(v.to_le_bytes().to_vec())
                }))
                .map_err(|e| format!("{e:?}"))
            })
            .collect::<Result<_, _>>()?;
        for (i, t) in tickets.into_iter().enumerate() {
            let d = orchestrator::wait(t);
            kassert_eq!(d.result, Ok((i as u64 + 1).to_le_bytes().to_vec()));
        }
        Ok(())
    }
}

ktest! {
    fn orchestrator_groups_share_out_external_requests() {
        // Groups of two CPUs: on 4 CPUs, CPU 0 orchestrates CPU 1 and CPU 2 orchestrates CPU 3.
        orchestrator::init_groups(2, 2);
        let groups = orchestrator::groups();
        let mut cpus = Vec::new();
        let mut r = Ok(());
        for i in 0..8u8 {
            let d = orchestrator::run_external(Box::new(move || {
                Ok(alloc::vec![i, crate::arch::percpu::cpu_index() as u8])
            }));
            match d {
                Ok(d) if d.result == Ok(alloc::vec![i, d.cpu as u8]) => cpus.push(d.cpu),
                other => {
                    r = Err(format!("request {i}: {:?}", other.map(|d| d.result)));
                    break;
                }
            }
        }
        orchestrator::init(2);
        r?;
        if smp::cpu_count() >= 4 {
            kassert_eq!(groups, 2);
            // External requests alternate between the groups: CPU 1, CPU 3, CPU 1, ...
            kassert!(cpus.iter().all(|&c| c == 1 || c == 3), "ran on {cpus:?}");
            kassert!(cpus.contains(&1) && cpus.contains(&3), "ran on {cpus:?}");
        } else {
            kassert_eq!(groups, 1);
        }
        Ok(())
    }
}

ktest! {
    fn an_idle_executor_is_marked_halted_and_sees_its_orchestrator_at_work() {
        if smp::cpu_count() < 2 {
            return Err("needs an executor CPU besides the orchestrator".into());
        }
        orchestrator::init(2);
        // CPU 1 has nothing queued: its idle loop halts in `smp::halt_idle` (within 100 ms).
        let deadline = crate::arch::time::deadline_after_ms(100);
        while !smp::is_halted(1) && cpu::rdtsc() < deadline {
            core::hint::spin_loop();
        }
        kassert!(smp::is_halted(1), "the idle executor is not marked halted");
        // This CPU runs the test: awake, so not halted, and at work as executor 1's
        // orchestrator; the orchestrator core itself has no other orchestrator to wait for.
        kassert!(!smp::is_halted(0));
        kassert!(orchestrator::orchestrator_at_work(1));
        kassert!(!orchestrator::orchestrator_at_work(0));
        // A restore on CPU 0 (its own orchestrator) never waits.
        kassert!(crate::module::warm::wait_for_quiet(0));
        Ok(())
    }
}
