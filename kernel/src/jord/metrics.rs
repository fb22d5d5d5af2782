//! Jord's families in `/metrics`: isolation events of the PDs and their memory.

use alloc::vec::Vec;
use fjord_faas::gateway::Sample;
use fjord_faas::gateway::SampleKind::Counter;

/// Appends this subsystem's samples to `out`.
pub fn samples(out: &mut Vec<Sample>) {
    let j = super::with(|j| j.stats);
    out.extend([
        Sample::new(
            "fjord_isolation_events_total",
            Counter,
            "Jord isolation events.",
            &[("kind", "instance_restored")],
            j.instances_restored,
        ),
        Sample::new(
            "fjord_isolation_events_total",
            Counter,
            "Jord isolation events.",
            &[("kind", "pd_created")],
            j.pds_created,
        ),
        Sample::new(
            "fjord_isolation_events_total",
            Counter,
            "Jord isolation events.",
            &[("kind", "pd_destroyed")],
            j.pds_destroyed,
        ),
        Sample::new(
            "fjord_isolation_events_total",
            Counter,
            "Jord isolation events.",
            &[("kind", "pd_switch")],
            j.pd_switches,
        ),
        Sample::new(
            "fjord_isolation_events_total",
            Counter,
            "Jord isolation events.",
            &[("kind", "vlb_fill")],
            j.fills,
        ),
        Sample::new(
            "fjord_isolation_events_total",
            Counter,
            "Jord isolation events.",
            &[("kind", "argbuf_prefill")],
            j.prefills,
        ),
        Sample::new(
            "fjord_isolation_events_total",
            Counter,
            "Jord isolation events.",
            &[("kind", "protection_fault")],
            j.protection_faults,
        ),
        Sample::new(
            "fjord_isolation_events_total",
            Counter,
            "Jord isolation events.",
            &[("kind", "shootdown")],
            j.shootdowns,
        ),
        Sample::new(
            "fjord_isolation_events_total",
            Counter,
            "Jord isolation events.",
            &[("kind", "revocation_held_back")],
            j.revocations_deferred,
        ),
        Sample::new(
            "fjord_isolation_events_total",
            Counter,
            "Jord isolation events.",
            &[("kind", "revocation_withdrawn")],
            j.revocations_withdrawn,
        ),
    ]);
}
