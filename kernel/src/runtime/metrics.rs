//! The runtime's families in `/metrics`: function time-outs and panics, nested calls.

use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};
use fjord_faas::gateway::Sample;
use fjord_faas::gateway::SampleKind::Counter;

/// Appends this subsystem's samples to `out`.
pub fn samples(out: &mut Vec<Sample>) {
    use super::{invoke, task};
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    use crate::jord::metrics::{ISOLATION_EVENTS, ISOLATION_EVENTS_HELP};
    out.extend(Sample::family(
        ISOLATION_EVENTS,
        Counter,
        ISOLATION_EVENTS_HELP,
        &[
            (&[("kind", "function_timeout")], load(&invoke::TIMEOUTS)),
            (&[("kind", "function_panic")], load(&invoke::PANICS)),
        ],
    ));
    out.extend([
        Sample::new(
            "fjord_nested_calls_total",
            Counter,
            "Nested function calls started.",
            &[],
            load(&task::NESTED_CALLS),
        ),
        Sample::new(
            "fjord_nested_suspensions_total",
            Counter,
            "Callers suspended waiting for a nested call.",
            &[],
            load(&task::SUSPENSIONS),
        ),
        Sample::new(
            "fjord_nested_copied_bytes_total",
            Counter,
            "Payload bytes copied by nested calls (zero unless the copying baseline is on).",
            &[],
            load(&task::HOP_BYTES_COPIED),
        ),
    ]);
}
