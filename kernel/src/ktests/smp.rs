//! Tests of multiprocessing: every CPU checks in, runs work on request, and answers IPIs.

use crate::arch::{percpu, smp};
use crate::ktest;
use alloc::vec::Vec;
use core::sync::atomic::Ordering;
use fjord_kernel::{kassert, kassert_eq};

ktest! {
    fn every_cpu_checks_in() {
        let n = smp::cpu_count();
        let mut seen = Vec::new();
        for c in 0..n {
            let (idx, apic) = smp::run_on_and_wait(c, || {
                (percpu::cpu_index(), crate::arch::apic::id())
            }).map_err(|e| alloc::format!("{e:?}"))?;
            kassert_eq!(idx, c);
            kassert_eq!(Some(apic), smp::hardware_id_of(c));
            seen.push(apic);
        }
        seen.dedup();
        kassert_eq!(seen.len(), n);
        Ok(())
    }
}

ktest! {
    fn work_ipis_are_counted() {
        if smp::cpu_count() < 2 {
            return Ok(());
        }
        let before = smp::run_on_and_wait(1, || percpu::current().ipis.load(Ordering::Relaxed)).unwrap();
        for _ in 0..5 {
            smp::run_on_and_wait(1, || ()).unwrap();
        }
        let after = smp::run_on_and_wait(1, || percpu::current().ipis.load(Ordering::Relaxed)).unwrap();
        kassert!(after >= before + 5, "ipis {before} -> {after}");
        Ok(())
    }
}

ktest! {
    fn tlb_shootdown_reaches_every_other_cpu() {
        let n = smp::cpu_count();
        let before = smp::SHOOTDOWN_IPIS.load(Ordering::Relaxed);
        let sent = smp::tlb_shootdown(0..n);
        kassert_eq!(sent, n - 1);
        kassert_eq!(smp::SHOOTDOWN_IPIS.load(Ordering::Relaxed), before + (n as u64 - 1));
        Ok(())
    }
}

ktest! {
    fn unknown_cpu_is_an_error() {
        kassert!(smp::run_on(smp::MAX_CPUS + 3, || ()).is_err());
        Ok(())
    }
}
