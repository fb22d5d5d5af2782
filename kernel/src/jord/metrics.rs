//! Jord's families in `/metrics`: isolation events of the PDs and their memory.

use alloc::vec::Vec;
use fjord_faas::gateway::Sample;
use fjord_faas::gateway::SampleKind::Counter;

/// The family of isolation events (the runtime adds functions' time-outs and panics to it).
pub const ISOLATION_EVENTS: &str = "fjord_isolation_events_total";
/// Its help text.
pub const ISOLATION_EVENTS_HELP: &str = "Jord isolation events.";

/// Appends this subsystem's samples to `out`.
pub fn samples(out: &mut Vec<Sample>) {
    let j = super::with(|j| j.stats);
    out.extend(Sample::family(
        ISOLATION_EVENTS,
        Counter,
        ISOLATION_EVENTS_HELP,
        &[
            (&[("kind", "instance_restored")], j.instances_restored),
            (&[("kind", "pd_created")], j.pds_created),
            (&[("kind", "pd_destroyed")], j.pds_destroyed),
            (&[("kind", "pd_switch")], j.pd_switches),
            (&[("kind", "vlb_fill")], j.fills),
            (&[("kind", "argbuf_prefill")], j.prefills),
            (&[("kind", "protection_fault")], j.protection_faults),
            (&[("kind", "shootdown")], j.shootdowns),
            (&[("kind", "revocation_held_back")], j.revocations_deferred),
            (&[("kind", "revocation_withdrawn")], j.revocations_withdrawn),
        ],
    ));
}
