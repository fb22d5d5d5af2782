//! The CPU's families in `/metrics`: timer interrupts, IPIs, TLB shootdowns, user faults.

use super::smp;
use alloc::vec::Vec;
use core::sync::atomic::Ordering;
use fjord_faas::gateway::Sample;
use fjord_faas::gateway::SampleKind::Counter;

/// Appends this subsystem's samples to `out`.
pub fn samples(out: &mut Vec<Sample>) {
    let this = super::percpu::current();
    out.extend([
        Sample::new(
            "fjord_kernel_timer_ticks_total",
            Counter,
            "Local APIC timer interrupts taken by the CPU running the network loop.",
            &[("cpu", "0")],
            this.timer_ticks.load(Ordering::Relaxed),
        ),
        Sample::new(
            "fjord_kernel_ipis_received_total",
            Counter,
            "Inter-processor interrupts received by the CPU running the network loop.",
            &[("cpu", "0")],
            this.ipis.load(Ordering::Relaxed),
        ),
        Sample::new(
            "fjord_kernel_tlb_shootdown_ipis_total",
            Counter,
            "TLB-shootdown IPIs sent.",
            &[],
            smp::SHOOTDOWN_IPIS.load(Ordering::Relaxed),
        ),
        Sample::new(
            "fjord_kernel_user_faults_total",
            Counter,
            "Faults taken in user mode.",
            &[],
            crate::arch::user::USER_FAULTS.load(Ordering::Relaxed),
        ),
    ]);
}
