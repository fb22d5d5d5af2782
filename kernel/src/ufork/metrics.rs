//! μFork's families in `/metrics`: μprocesses and the pages of lazy forks.

use alloc::vec::Vec;
use fjord_faas::gateway::Sample;
use fjord_faas::gateway::SampleKind::{Counter, Gauge};

/// Appends this subsystem's samples to `out`.
pub fn samples(out: &mut Vec<Sample>) {
    let lazy = crate::jord::with(|j| j.lazy_stats());
    out.push(Sample::new(
        "fjord_uprocesses",
        Gauge,
        "Live and zombie μprocesses.",
        &[],
        super::count() as u64,
    ));
    out.extend(Sample::family(
        "fjord_ufork_pages_total",
        Counter,
        "Pages of lazy forks: left pending at fork, copied for a child, shared read-only.",
        &[
            (&[("event", "deferred")], lazy.pages_deferred),
            (&[("event", "copied")], lazy.pages_copied),
            (&[("event", "shared")], lazy.pages_shared),
        ],
    ));
}
