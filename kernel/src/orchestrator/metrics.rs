//! The orchestrator's families in `/metrics`: dispatch events.

use alloc::vec::Vec;
use fjord_faas::gateway::Sample;
use fjord_faas::gateway::SampleKind::Counter;

/// Appends this subsystem's samples to `out`.
pub fn samples(out: &mut Vec<Sample>) {
    let o = super::stats();
    out.extend(Sample::family(
        "fjord_dispatch_total",
        Counter,
        "Orchestrator dispatch events.",
        &[
            (&[("event", "submitted")], o.submitted),
            (&[("event", "dispatched")], o.dispatched),
            (&[("event", "completed")], o.completed),
            (&[("event", "rejected")], o.rejected),
            (&[("event", "suspended")], o.suspended),
            (&[("event", "resumed_locally")], o.local_resumes),
            (&[("event", "submitted_locally")], o.local_submits),
        ],
    ));
}
