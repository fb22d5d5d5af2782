//! The requests of the `restore` benchmark (Groundhog's restore between requests), in its
//! order. The kernel's group (`kernel/src/bench/restore.rs`) measures them on Fjord, and
//! `cargo xtask bench restore` asks the Linux runner for the same ones by their labels.

use crate::workloads::{OPERATIONS, Operation};
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

/// One request of the `restore` benchmark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestoreTarget {
    /// `hello` with `world`.
    Hello,
    /// A workload's operation with its sample request: the first of its workload.
    Operation(&'static Operation),
    /// `dirty` writing this many pages of its 64 MiB heap.
    Dirty(u32),
}

/// The pages a `dirty` request writes, one target each.
pub const DIRTY_PAGES: [u32; 4] = [1, 10, 100, 1000];

impl RestoreTarget {
    /// The metric prefix: `hello`, `<workload>_<operation>` or `dirty_<pages>`.
    pub fn label(&self) -> String {
        match self {
            RestoreTarget::Hello => "hello".into(),
            RestoreTarget::Operation(o) => format!("{}_{}", o.workload, o.name),
            RestoreTarget::Dirty(pages) => format!("dirty_{pages}"),
        }
    }
}

/// Every target in the benchmark's order: `hello`, the first operation of each workload (in
/// [`OPERATIONS`]' order), then `dirty` at each of [`DIRTY_PAGES`].
pub fn all() -> Vec<RestoreTarget> {
    let mut targets = alloc::vec![RestoreTarget::Hello];
    for (i, o) in OPERATIONS.iter().enumerate() {
        if !OPERATIONS[..i].iter().any(|p| p.workload == o.workload) {
            targets.push(RestoreTarget::Operation(o));
        }
    }
    targets.extend(DIRTY_PAGES.map(RestoreTarget::Dirty));
    targets
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_one_operation_per_workload_then_dirty() {
        let labels: Vec<String> = all().iter().map(RestoreTarget::label).collect();
        assert_eq!(
            labels,
            [
                "hello",
                "hipster_get_cart",
                "hotel_search_nearby",
                "media_upload_unique_id",
                "social_compose_post",
                "dirty_1",
                "dirty_10",
                "dirty_100",
                "dirty_1000"
            ]
        );
    }
}
