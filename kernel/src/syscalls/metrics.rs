//! The console's families in `/metrics`: function log messages dropped.

use alloc::vec::Vec;
use fjord_faas::gateway::Sample;
use fjord_faas::gateway::SampleKind::Counter;

/// Appends this subsystem's samples to `out`.
pub fn samples(out: &mut Vec<Sample>) {
    let ((messages_over_limit, bytes_over_limit), (messages_over_rate, bytes_over_rate)) =
        super::log::dropped();
    out.extend(Sample::family(
        "fjord_console_dropped_messages_total",
        Counter,
        "Function log messages dropped: over the invocation's log_limit, or over the console's rate.",
        &[
            (&[("reason", "invocation_limit")], messages_over_limit),
            (&[("reason", "rate_limit")], messages_over_rate),
        ],
    ));
    out.extend(Sample::family(
        "fjord_console_dropped_bytes_total",
        Counter,
        "Bytes of function log messages dropped.",
        &[
            (&[("reason", "invocation_limit")], bytes_over_limit),
            (&[("reason", "rate_limit")], bytes_over_rate),
        ],
    ));
}
