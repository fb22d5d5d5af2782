//! The node table in the header page: which nodes use the region, a heartbeat each.
//!
//! Entry `i` ([`NODE_BYTES`] at [`NODE_TABLE`]` + i * `[`NODE_BYTES`]): a state word (zero when
//! free, else the joined bit and the node's caller-given id), a heartbeat the node increments,
//! and a count of the times the entry was joined. A node is named everywhere else in the region
//! by its entry's index ([`Node`]).

use crate::gc::GcReport;
use crate::header::{MAX_NODES, NODE_BYTES, NODE_TABLE};
use crate::region::{Region, update_u64};
use crate::{Attached, CxlError};
use alloc::vec::Vec;

const JOINED: u64 = 1 << 63;
const HEARTBEAT: u64 = 8;
const JOINS: u64 = 16;

/// A node: the index of its entry in the node table (below [`MAX_NODES`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Node(u8);

impl Node {
    /// The node of entry `index`, if there is such an entry.
    pub fn from_index(index: u8) -> Option<Node> {
        (u32::from(index) < MAX_NODES).then_some(Node(index))
    }

    /// Its entry's index.
    pub fn index(self) -> u8 {
        self.0
    }

    /// Every node of the table.
    pub fn all() -> impl Iterator<Item = Node> {
        (0..MAX_NODES as u8).map(Node)
    }
}

/// A joined node as the table shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    /// Its entry.
    pub node: Node,
    /// The id it joined with (e.g. its VM number).
    pub id: u32,
    /// Its heartbeat: it increments it while alive ([`Attached::heartbeat`]).
    pub heartbeat: u64,
    /// Times this entry has been joined.
    pub joins: u64,
}

fn entry(node: Node) -> u64 {
    NODE_TABLE + u64::from(node.0) * NODE_BYTES
}

impl<R: Region> Attached<R> {
    /// Joins the region as a node with caller-given `id`: takes the first free entry of the
    /// node table with a compare-exchange ([`CxlError::NodeTableFull`] if none is free).
    pub fn join(&self, id: u32) -> Result<Node, CxlError> {
        let r = self.region();
        for node in Node::all() {
            let at = entry(node);
            if r.load_u64(at) == 0
                && r.compare_exchange_u64(at, 0, JOINED | u64::from(id))
                    .is_ok()
            {
                let _ = update_u64(r, at + JOINS, |n| Some(n.wrapping_add(1)));
                r.persist(at, NODE_BYTES);
                return Ok(node);
            }
        }
        Err(CxlError::NodeTableFull)
    }

    /// Increments `node`'s heartbeat; its new value.
    pub fn heartbeat(&self, node: Node) -> u64 {
        let at = entry(node) + HEARTBEAT;
        let old = update_u64(self.region(), at, |n| Some(n.wrapping_add(1))).unwrap_or_default();
        self.region().persist(at, 8);
        old.wrapping_add(1)
    }

    /// `node`'s entry, if it is joined.
    pub fn node_info(&self, node: Node) -> Option<NodeInfo> {
        let r = self.region();
        let at = entry(node);
        let word = r.load_u64(at);
        (word & JOINED != 0).then(|| NodeInfo {
            node,
            id: word as u32,
            heartbeat: r.load_u64(at + HEARTBEAT),
            joins: r.load_u64(at + JOINS),
        })
    }

    /// The joined nodes.
    pub fn nodes(&self) -> Vec<NodeInfo> {
        Node::all().filter_map(|n| self.node_info(n)).collect()
    }

    /// Leaves the region: gives up everything `node` holds (its clones' references, a checkpoint
    /// it was writing or freeing), then frees its entry.
    pub fn leave(&self, node: Node) -> GcReport {
        self.reclaim_from(node, node)
    }

    /// Frees `node`'s entry if it is joined; whether this call freed it.
    pub(crate) fn release_node(&self, node: Node) -> bool {
        let r = self.region();
        let at = entry(node);
        let word = r.load_u64(at);
        let released = word & JOINED != 0 && r.compare_exchange_u64(at, word, 0).is_ok();
        r.persist(at, 8);
        released
    }
}
