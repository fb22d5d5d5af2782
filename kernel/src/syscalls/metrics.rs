//! The console's families in `/metrics`: function log messages dropped.

use alloc::vec::Vec;
use fjord_faas::gateway::Sample;
use fjord_faas::gateway::SampleKind::Counter;

/// Appends this subsystem's samples to `out`.
pub fn samples(out: &mut Vec<Sample>) {
    let dropped = super::log::dropped();
    out.extend([
        Sample::new(
            "fjord_console_dropped_messages_total",
            Counter,
            "Function log messages dropped: over the invocation's log_limit, or over the console's rate.",
            &[("reason", "invocation_limit")],
            dropped.0.0,
        ),
        Sample::new(
            "fjord_console_dropped_messages_total",
            Counter,
            "Function log messages dropped: over the invocation's log_limit, or over the console's rate.",
            &[("reason", "rate_limit")],
            dropped.1.0,
        ),
        Sample::new(
            "fjord_console_dropped_bytes_total",
            Counter,
            "Bytes of function log messages dropped.",
            &[("reason", "invocation_limit")],
            dropped.0.1,
        ),
        Sample::new(
            "fjord_console_dropped_bytes_total",
            Counter,
            "Bytes of function log messages dropped.",
            &[("reason", "rate_limit")],
            dropped.1.1,
        ),
    ]);
}
