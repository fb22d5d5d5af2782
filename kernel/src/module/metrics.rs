//! Groundhog's families in `/metrics`: idle instances kept, and per function its restores.

use alloc::string::String;
use alloc::vec::Vec;
use fjord_faas::gateway::{Sample, SampleKind};
use fjord_faas::metrics::Value;

/// Appends Groundhog's samples to `out`.
pub fn samples(out: &mut Vec<Sample>) {
    use SampleKind::Gauge;
    out.push(Sample::new(
        "fjord_warm_instances",
        Gauge,
        "Idle function instances kept for reuse.",
        &[],
        crate::module::warm::kept() as u64,
    ));
    restore_samples(out);
}

/// Per function whose instances are restored to a snapshot: restores, pages restored, time
/// spent restoring (seconds, from the TSC) and instances replaced instead (each family's samples
/// together).
fn restore_samples(out: &mut Vec<Sample>) {
    use SampleKind::Counter;
    let functions: Vec<_> = crate::module::loaded()
        .into_iter()
        .filter(|f| f.groundhog_mode().restores())
        .map(|f| (String::from(f.manifest.name.as_str()), f.restore_stats()))
        .collect();
    let families: [(&'static str, &'static str); 5] = [
        (
            "fjord_groundhog_restores_total",
            "Instances restored to their snapshot after a request.",
        ),
        (
            "fjord_groundhog_pages_restored_total",
            "Pages copied back from a snapshot or zeroed by restores.",
        ),
        (
            "fjord_groundhog_restore_seconds_total",
            "Seconds spent restoring instances, from the TSC (virtual time under icount).",
        ),
        (
            "fjord_groundhog_replaced_total",
            "Instances destroyed instead of restored (faulted, timed out, unfit for reuse).",
        ),
        (
            "fjord_groundhog_restores_interrupted_total",
            "Restores that stopped between two steps for a waiting request and finished later.",
        ),
    ];
    let seconds = |ticks: u64| Value::seconds_from_nanos(crate::arch::time::ticks_to_ns(ticks));
    for (i, (name, help)) in families.into_iter().enumerate() {
        for (f, st) in &functions {
            let value = match i {
                0 => Value::from(st.restores),
                1 => Value::from(st.pages),
                2 => seconds(st.ticks),
                3 => Value::from(st.replaced),
                _ => Value::from(st.interrupted),
            };
            out.push(Sample {
                name,
                kind: Counter,
                help,
                labels: &[],
                runtime_labels: alloc::vec![("function", f.clone())],
                value,
            });
        }
    }
}
