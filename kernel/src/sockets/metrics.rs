//! The programs' sockets in `/metrics`.

use alloc::vec::Vec;
use fjord_faas::gateway::Sample;
use fjord_faas::gateway::SampleKind::{Counter, Gauge};

/// Appends this subsystem's samples to `out` (nothing while the sockets are off).
pub fn samples(out: &mut Vec<Sample>) {
    let Ok((c, (open, tcp))) = super::with(|t| (t.counters(), t.sizes())) else {
        return;
    };
    out.push(Sample::new(
        "fjord_sockets_open",
        Gauge,
        "Sockets programs hold open.",
        &[],
        open as u64,
    ));
    out.push(Sample::new(
        "fjord_sockets_tcp",
        Gauge,
        "smoltcp sockets behind the programs' sockets: connections, listening spares, closing ones.",
        &[],
        tcp as u64,
    ));
    out.extend(Sample::family(
        "fjord_sockets_connections_total",
        Counter,
        "Program connections: accepted into a listen queue, dropped for a full queue, established by connect, ended by a reset or time-out.",
        &[
            (&[("event", "accepted")], c.accepted),
            (&[("event", "dropped")], c.dropped),
            (&[("event", "connected")], c.connected),
            (&[("event", "reset")], c.reset),
        ],
    ));
}
