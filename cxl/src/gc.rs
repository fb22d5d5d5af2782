//! Collecting what dead nodes left: their clones' references, the checkpoints they were writing
//! or freeing, retired checkpoints no one holds, and orphan pages.
//!
//! Which nodes are dead is the caller's policy (a heartbeat gone stale, the VM known killed),
//! passed in as `is_alive`. It must only call a node dead once that node can no longer touch
//! the region: a node wrongly called dead loses its references, and a checkpoint it goes on
//! writing is refused at publish ([`CxlError::BadState`](crate::CxlError::BadState)) but may
//! have written into pages given to others meanwhile, which their CRC-32s then catch.

use crate::Attached;
use crate::directory::{SlotState, State};
use crate::header::SLOTS;
use crate::node::Node;
use crate::region::Region;
use alloc::vec::Vec;

/// What a collection did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Slots made Free (abandoned writes and frees, retired checkpoints no one held).
    pub slots_freed: u32,
    /// Data pages given back.
    pub pages_freed: u64,
    /// References dropped for dead nodes.
    pub refs_dropped: u64,
    /// Node-table entries freed.
    pub nodes_released: u32,
}

impl<R: Region> Attached<R> {
    /// Collects for every joined node other than `me` that `is_alive` calls dead, then frees
    /// their node-table entries. Also frees retired checkpoints no clone holds and orphan pages,
    /// so it is worth running now and then with no dead node at all.
    pub fn gc(&self, me: Node, is_alive: impl Fn(Node) -> bool) -> GcReport {
        let dead: Vec<Node> = Node::all()
            .filter(|&n| n != me && self.node_info(n).is_some() && !is_alive(n))
            .collect();
        self.collect(me, &dead)
    }

    /// Collects what node `dead` left (it must be gone for good, or be `me` leaving), then frees
    /// its node-table entry. Idempotent: a collector that dies midway leaves work the next
    /// collection finishes.
    pub fn reclaim_from(&self, me: Node, dead: Node) -> GcReport {
        self.collect(me, &[dead])
    }

    fn collect(&self, me: Node, dead: &[Node]) -> GcReport {
        let r = self.region();
        let mut report = GcReport::default();
        for slot in 0..SLOTS {
            for &n in dead {
                report.refs_dropped += self.clear_refs(slot, n);
            }
            let at = self.slot_at(slot);
            let word = r.load_u64(at);
            if let Some(s) = SlotState::from_word(word)
                && matches!(s.state, State::Writing | State::Freeing)
                && dead.contains(&s.node)
                && r.compare_exchange_u64(at, word, s.with(State::Free, me).word())
                    .is_ok()
            {
                // Its pages are orphans now; the sweep below frees them.
                r.persist(at, 8);
                report.slots_freed += 1;
            }
            if let Some(pages) = self.maybe_free(slot, me) {
                report.slots_freed += 1;
                report.pages_freed += pages;
            }
        }
        report.pages_freed += self.sweep();
        for &n in dead {
            report.nodes_released += u32::from(self.release_node(n));
        }
        report
    }
}
