//! The key-value store's families in `/metrics`.

use alloc::vec::Vec;
use fjord_faas::gateway::{Sample, SampleKind};
use fjord_faas::metrics::Value;

/// Appends, per key-value namespace, its entries, bytes, quota and refused puts to `out` (each
/// family's samples together).
pub fn samples(out: &mut Vec<Sample>) {
    use SampleKind::{Counter, Gauge};
    let usage = super::usage();
    let families: [(&'static str, SampleKind, &'static str); 4] = [
        (
            "fjord_kv_namespace_entries",
            Gauge,
            "Entries held by a key-value namespace.",
        ),
        (
            "fjord_kv_namespace_bytes",
            Gauge,
            "Bytes a key-value namespace holds against its quota (keys, values, 64 per entry).",
        ),
        (
            "fjord_kv_namespace_quota_bytes",
            Gauge,
            "Bytes a key-value namespace may hold.",
        ),
        (
            "fjord_kv_namespace_refused_total",
            Counter,
            "Puts refused because the namespace was full.",
        ),
    ];
    for (i, (name, kind, help)) in families.into_iter().enumerate() {
        for u in &usage {
            let value = Value::from(match i {
                0 => u.entries as u64,
                1 => u.bytes as u64,
                2 => u.quota as u64,
                _ => u.refused,
            });
            out.push(Sample {
                name,
                kind,
                help,
                labels: &[],
                runtime_labels: alloc::vec![("namespace", u.name.clone())],
                value,
            });
        }
    }
}
