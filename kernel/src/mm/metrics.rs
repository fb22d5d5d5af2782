//! Memory's families in `/metrics`: free and committed frames, the kernel heap.

use super::{frames, heap};
use alloc::vec::Vec;
use fjord_faas::gateway::Sample;
use fjord_faas::gateway::SampleKind::Gauge;

/// Appends this subsystem's samples to `out`.
pub fn samples(out: &mut Vec<Sample>) {
    out.extend([
        Sample::new(
            "fjord_kernel_free_frames",
            Gauge,
            "Free 4 KiB physical frames.",
            &[],
            frames::free_frames() as u64,
        ),
        Sample::new(
            "fjord_kernel_committed_frames",
            Gauge,
            "Free frames promised to μprocess areas, taken page by page on first use.",
            &[],
            frames::committed_frames() as u64,
        ),
        Sample::new(
            "fjord_kernel_heap_used_bytes",
            Gauge,
            "Bytes allocated from the kernel heap.",
            &[],
            heap::used() as u64,
        ),
        Sample::new(
            "fjord_kernel_heap_size_bytes",
            Gauge,
            "Bytes managed by the kernel heap.",
            &[],
            heap::total() as u64,
        ),
    ]);
}
