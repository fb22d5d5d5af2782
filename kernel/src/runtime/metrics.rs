//! The runtime's families in `/metrics`: function time-outs and panics, nested calls.

use alloc::vec::Vec;
use core::sync::atomic::Ordering;
use fjord_faas::gateway::Sample;
use fjord_faas::gateway::SampleKind::Counter;

/// Appends this subsystem's samples to `out`.
pub fn samples(out: &mut Vec<Sample>) {
    use super::{invoke, task};
    let nested = |c: &core::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    out.extend([
        Sample::new(
            "fjord_isolation_events_total",
            Counter,
            "Jord isolation events.",
            &[("kind", "function_timeout")],
            invoke::TIMEOUTS.load(Ordering::Relaxed),
        ),
        Sample::new(
            "fjord_isolation_events_total",
            Counter,
            "Jord isolation events.",
            &[("kind", "function_panic")],
            invoke::PANICS.load(Ordering::Relaxed),
        ),
        Sample::new(
            "fjord_nested_calls_total",
            Counter,
            "Nested function calls started.",
            &[],
            nested(&task::NESTED_CALLS),
        ),
        Sample::new(
            "fjord_nested_suspensions_total",
            Counter,
            "Callers suspended waiting for a nested call.",
            &[],
            nested(&task::SUSPENSIONS),
        ),
        Sample::new(
            "fjord_nested_copied_bytes_total",
            Counter,
            "Payload bytes copied by nested calls (zero unless the copying baseline is on).",
            &[],
            nested(&task::HOP_BYTES_COPIED),
        ),
    ]);
}
