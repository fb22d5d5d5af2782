//! The emulated CXL memory this node shares with the other nodes of a cluster (`cargo xtask
//! cluster`): the ivshmem region (`crate::drivers::ivshmem`), attached at boot with the
//! `fjord-cxl` format and protocol (header, node table, checkpoint directory, page owners).
//!
//! At boot [`init`] finds the device; on a blank region it formats it (a race between nodes
//! formats once), otherwise it checks the header and refuses a bad, foreign or incompatible
//! region (another version or size, CPU features this CPU lacks) without writing to it. The
//! node then joins the node table under its number (`node=` on the command line; an entry an
//! earlier boot of the same number left is released first). Without the device, or with a
//! refused region, the node runs on its own.

pub mod checkpoint;
pub mod clone;
pub mod porter;

use crate::drivers::ivshmem::{self, IvshmemError, SharedMemory};
use alloc::vec::Vec;
use fjord_cxl::{AttachError, Attached, CxlError, Node};
use spin::Once;

/// The region this node attached, and its entry in the node table.
pub struct Cxl {
    /// The region.
    pub region: Attached<SharedMemory>,
    /// This node's entry.
    pub node: Node,
    /// The number it joined under.
    pub id: u32,
}

static CXL: Once<Cxl> = Once::new();

/// What [`init`] found.
#[derive(Debug)]
pub enum Found {
    /// No ivshmem device.
    NoDevice,
    /// The device is unusable.
    Device(IvshmemError),
    /// The region was refused (left unchanged).
    Refused(AttachError),
    /// The node table is full.
    Join(CxlError),
    /// Attached: the region's size, whether this node formatted it, this node's entry, and
    /// the ready checkpoints it holds.
    Attached {
        /// Bytes.
        bytes: u64,
        /// This node formatted it.
        formatted: bool,
        /// This node's entry in the node table.
        node: u8,
        /// Checkpoints ready.
        checkpoints: usize,
    },
}

/// How long a node waits for another node's format of the region to finish before it refuses
/// the region (a node that died mid-format leaves it so for good).
const FORMAT_WAIT_MS: u64 = 5_000;

/// Finds, checks (or formats) and joins the shared region as node `id`.
pub fn init(id: u32) -> Found {
    let mem = match ivshmem::find() {
        None => return Found::NoDevice,
        Some(Err(e)) => return Found::Device(e),
        Some(Ok(mem)) => mem,
    };
    let bytes = fjord_cxl::Region::len(&mem);
    let features = crate::arch::cpu::isa_features();
    // Nodes started together race to format a blank region; the losers find it being
    // formatted and wait for the winner (a format writes one header page).
    let deadline = crate::arch::time::deadline_after_ms(FORMAT_WAIT_MS);
    let (region, formatted) = loop {
        match Attached::format_or_attach(mem, features) {
            Ok(r) => break r,
            Err(AttachError::Formatting) if crate::arch::time::now() < deadline => {
                core::hint::spin_loop()
            }
            Err(e) => return Found::Refused(e),
        }
    };
    // An entry of this number is an earlier boot of this node: release it (and what it held).
    let stale: Vec<Node> = region
        .nodes()
        .into_iter()
        .filter(|n| n.id == id)
        .map(|n| n.node)
        .collect();
    for node in stale {
        let _ = region.leave(node);
    }
    let node = match region.join(id) {
        Ok(n) => n,
        Err(e) => return Found::Join(e),
    };
    let checkpoints = region.list().len();
    CXL.call_once(|| Cxl { region, node, id });
    Found::Attached {
        bytes,
        formatted,
        node: node.index(),
        checkpoints,
    }
}

/// The attached region, if any.
pub fn get() -> Option<&'static Cxl> {
    CXL.get()
}

/// Appends the shared region's samples to `out` (nothing without a region).
pub fn samples(out: &mut Vec<fjord_faas::gateway::Sample>) {
    use fjord_faas::gateway::Sample;
    use fjord_faas::gateway::SampleKind::{Counter, Gauge};
    let Some(c) = get() else {
        return;
    };
    let r = &c.region;
    let gauges: [(&str, &str, u64); 6] = [
        (
            "fjord_cxl_region_bytes",
            "Size of the shared CXL region this node attached.",
            fjord_cxl::Region::len(r.region()),
        ),
        (
            "fjord_cxl_free_pages",
            "Data pages of the shared region that no checkpoint owns.",
            r.free_pages(),
        ),
        (
            "fjord_cxl_nodes_joined",
            "Nodes joined to the shared region.",
            r.nodes().len() as u64,
        ),
        (
            "fjord_cxl_checkpoints_ready",
            "Checkpoints ready in the shared region.",
            r.list().len() as u64,
        ),
        (
            "fjord_cxl_node_id",
            "This node's number in its cluster (node=), under which it joined.",
            u64::from(c.id),
        ),
        (
            "fjord_cxl_node_entry",
            "This node's entry in the region's node table.",
            u64::from(c.node.index()),
        ),
    ];
    for (name, help, value) in gauges {
        out.push(Sample::new(name, Gauge, help, &[], value));
    }
    use core::sync::atomic::Ordering::Relaxed;
    let counters: [(&str, &str, u64); 8] = [
        (
            "fjord_cxl_checkpoints_written_total",
            "Checkpoints of μprocesses this node wrote into the region.",
            checkpoint::WRITTEN.load(Relaxed),
        ),
        (
            "fjord_cxl_checkpoint_pages_written_total",
            "Pages this node wrote into checkpoints.",
            checkpoint::PAGES_WRITTEN.load(Relaxed),
        ),
        (
            "fjord_cxl_restores_total",
            "Clones this node restored from checkpoints.",
            checkpoint::RESTORED.load(Relaxed),
        ),
        (
            "fjord_cxl_pages_attached_total",
            "Checkpoint pages clones mapped read-only in place from the region.",
            clone::PAGES_ATTACHED.load(Relaxed),
        ),
        (
            "fjord_cxl_pages_copied_total",
            "Checkpoint pages copied (migrated) from the region into clones' local memory.",
            clone::PAGES_COPIED.load(Relaxed),
        ),
        (
            "fjord_cxl_pages_migrated_total",
            "Of the pages copied, those copied at a first read (migrated), not at a write.",
            clone::PAGES_MIGRATED.load(Relaxed),
        ),
        (
            "fjord_cxl_pages_refused_total",
            "Checkpoint pages refused because they failed their CRC-32.",
            clone::PAGES_REFUSED.load(Relaxed),
        ),
        (
            "fjord_cxl_words_relocated_total",
            "Words relocated in checkpoint pages copied into clones.",
            clone::WORDS_RELOCATED.load(Relaxed),
        ),
    ];
    for (name, help, value) in counters {
        out.push(Sample::new(name, Counter, help, &[], value));
    }
    for (d, c) in porter::DECISIONS.iter().zip(&porter::COUNTS) {
        out.push(Sample::new(
            "fjord_cxlporter_decisions_total",
            Counter,
            "CXLporter's decisions for fork-per-request functions, by kind.",
            d,
            c.load(Relaxed),
        ));
    }
    out.push(Sample::new(
        "fjord_cxl_clones_attached",
        Gauge,
        "Clones on this node that still take pages from the region.",
        &[],
        clone::attached_clones(),
    ));
    out.push(Sample::new(
        "fjord_cxl_clone_pages_in_region",
        Gauge,
        "Pages this node's clones still take from the region (not in local memory).",
        &[],
        clone::pages_in_region(),
    ));
    per_clone_samples(out);
    out.push(Sample::new(
        "fjord_cxl_out_of_range_total",
        Counter,
        "Accesses outside the shared region that were refused (a corrupt layout).",
        &[],
        ivshmem::OUT_OF_RANGE.load(core::sync::atomic::Ordering::Relaxed),
    ));
}

/// Appends one sample per clone of this node and measure (`fjord_cxl_clone_*`), labelled with
/// its checkpoint, its area's base and, for a μprocess, its PID.
fn per_clone_samples(out: &mut Vec<fjord_faas::gateway::Sample>) {
    use fjord_faas::gateway::Sample;
    use fjord_faas::gateway::SampleKind::Gauge;
    let clones = clone::per_clone();
    if clones.is_empty() {
        return;
    }
    let procs = crate::ufork::list();
    for c in clones {
        let pid = procs
            .iter()
            .find(|p| p.area.0 == c.base && p.state != "zombie")
            .map(|p| p.pid);
        let measures: [(&'static str, &'static str, u64); 5] = [
            (
                "fjord_cxl_clone_pages_pending",
                "Checkpoint pages a clone still takes from the region (mapped in place or untouched).",
                c.in_region,
            ),
            (
                "fjord_cxl_clone_pages_mapped",
                "Checkpoint pages a clone has mapped read-only in place from the region.",
                c.mapped,
            ),
            (
                "fjord_cxl_clone_pages_copied",
                "Checkpoint pages copied into a clone's local memory at a write.",
                c.copied,
            ),
            (
                "fjord_cxl_clone_pages_migrated",
                "Checkpoint pages copied into a clone's local memory at a first read.",
                c.migrated,
            ),
            (
                "fjord_cxl_clone_local_bytes",
                "Local memory a clone's area holds: pages copied from its checkpoint and pages it wrote since.",
                c.local_bytes,
            ),
        ];
        for (name, help, value) in measures {
            let mut sample = Sample::new(name, Gauge, help, &[], value)
                .with_label(
                    "checkpoint",
                    alloc::format!("{}.{}", c.cid.slot, c.cid.epoch),
                )
                .with_label("area", alloc::format!("{:#x}", c.base));
            if let Some(pid) = pid {
                sample = sample.with_label("pid", alloc::format!("{pid}"));
            }
            out.push(sample);
        }
    }
}
