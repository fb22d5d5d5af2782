//! The orchestrator's families in `/metrics`: dispatch events.

use alloc::vec::Vec;
use fjord_faas::gateway::Sample;
use fjord_faas::gateway::SampleKind::Counter;

/// Appends this subsystem's samples to `out`.
pub fn samples(out: &mut Vec<Sample>) {
    let o = super::stats();
    out.extend([
        Sample::new(
            "fjord_dispatch_total",
            Counter,
            "Orchestrator dispatch events.",
            &[("event", "submitted")],
            o.submitted,
        ),
        Sample::new(
            "fjord_dispatch_total",
            Counter,
            "Orchestrator dispatch events.",
            &[("event", "dispatched")],
            o.dispatched,
        ),
        Sample::new(
            "fjord_dispatch_total",
            Counter,
            "Orchestrator dispatch events.",
            &[("event", "completed")],
            o.completed,
        ),
        Sample::new(
            "fjord_dispatch_total",
            Counter,
            "Orchestrator dispatch events.",
            &[("event", "rejected")],
            o.rejected,
        ),
        Sample::new(
            "fjord_dispatch_total",
            Counter,
            "Orchestrator dispatch events.",
            &[("event", "suspended")],
            o.suspended,
        ),
        Sample::new(
            "fjord_dispatch_total",
            Counter,
            "Orchestrator dispatch events.",
            &[("event", "resumed_locally")],
            o.local_resumes,
        ),
    ]);
}
