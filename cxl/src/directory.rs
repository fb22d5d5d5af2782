//! The checkpoint directory: [`SLOTS`] fixed slots, each a checkpoint's life (state word),
//! its clones' references (a count per node) and its metadata, sealed by a CRC-32.
//!
//! A slot ([`SLOT_BYTES`] bytes):
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 8 | state word: state (bits 0–7), node (8–15), epoch (32–63) |
//! | 8 | 8 × [`MAX_NODES`] | references held by each node's clones |
//! | 136 | 8 | generation of the function the checkpoint was taken from |
//! | 144 | 8 | data pages |
//! | 152 | 8 | image length in bytes |
//! | 160 | 8 | offset of the page list (0 when it is empty) |
//! | 168 | 4 | CRC-32 of the page list |
//! | 172 | 4 | CRC-32 of the image |
//! | 176 | 1 | kind (1 function instance, 2 μprocess) |
//! | 177 | 1 | the node that wrote it |
//! | 178 | 1 | name length |
//! | 180 | 64 | name |
//! | 252 | 4 | CRC-32 of bytes 136..252, the slot number and the epoch |
//!
//! The page list: one 8-byte entry per page, data pages then image pages, each a data-page
//! number and the CRC-32 of that page's 4 KiB; it fills whole pages taken in one run.
//!
//! A slot's life in one epoch: Free → Writing(writer) → Ready → Dead → Freeing(freer) → Free,
//! the writer's abort or a collector going straight from Writing (or a dead freer's Freeing) to
//! Free. Every change is one compare-exchange of the state word, so exactly one node makes it.
//! Claiming a Free slot bumps its epoch, so the state word never repeats and a [`Cid`] (slot and
//! epoch) names one checkpoint forever. The metadata and page list are written while Writing and
//! never change after Ready.

use crate::header::{MAX_NODES, SLOT_BYTES, SLOTS};
use crate::node::Node;
use crate::page_alloc::Owner;
use crate::region::{PAGE, Region, update_u64};
use crate::{Attached, CxlError};
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

/// Longest checkpoint name, in bytes.
pub const MAX_NAME: usize = 64;

const REFS: u64 = 8;
/// Offset of the metadata in a slot.
pub(crate) const META: u64 = REFS + 8 * MAX_NODES as u64;
const META_LEN: usize = (SLOT_BYTES as u64 - META) as usize;
const META_CRC: usize = META_LEN - 4;
/// Bytes of a page-list entry.
pub(crate) const ENTRY: u64 = 8;

/// Where a slot is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Holds nothing; can be claimed.
    Free,
    /// Claimed by a writer node, not yet published.
    Writing,
    /// Published: whole and immutable; can be opened.
    Ready,
    /// Retired: no new opens; freed when the last reference goes.
    Dead,
    /// A node is giving its pages back.
    Freeing,
}

/// A slot's state word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotState {
    /// Its state.
    pub state: State,
    /// The writer (Writing, Ready, Dead), the freer (Freeing), or the node that freed it
    /// (Free; node 0 in a fresh region).
    pub node: Node,
    /// Times the slot has been claimed.
    pub epoch: u32,
}

impl SlotState {
    pub(crate) fn word(self) -> u64 {
        let code = match self.state {
            State::Free => 0,
            State::Writing => 1,
            State::Ready => 2,
            State::Dead => 3,
            State::Freeing => 4,
        };
        code | (u64::from(self.node.index()) << 8) | (u64::from(self.epoch) << 32)
    }

    pub(crate) fn from_word(word: u64) -> Option<SlotState> {
        let state = match word & 0xff {
            0 => State::Free,
            1 => State::Writing,
            2 => State::Ready,
            3 => State::Dead,
            4 => State::Freeing,
            _ => return None,
        };
        if (word >> 16) & 0xffff != 0 {
            return None;
        }
        Some(SlotState {
            state,
            node: Node::from_index((word >> 8) as u8)?,
            epoch: (word >> 32) as u32,
        })
    }

    pub(crate) fn with(self, state: State, node: Node) -> SlotState {
        SlotState {
            state,
            node,
            ..self
        }
    }
}

/// A checkpoint's identity: its slot and the slot's epoch when it was claimed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cid {
    /// The directory slot.
    pub slot: u32,
    /// The slot's epoch.
    pub epoch: u32,
}

/// What a checkpoint holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A function instance (a warm function, restored per request).
    Function,
    /// A μprocess (a whole program).
    Uprocess,
}

/// A published checkpoint, as listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    /// Its identity.
    pub cid: Cid,
    /// The function or program it was taken from.
    pub name: String,
    /// The generation of that function.
    pub generation: u64,
    /// What it holds.
    pub kind: Kind,
    /// Data pages.
    pub pages: u64,
    /// Length of its image (the description the kernel serialises) in bytes.
    pub image_len: u64,
    /// The node that wrote it.
    pub writer: Node,
}

/// One page of a page list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) page: u32,
    pub(crate) crc: u32,
}

/// A checkpoint's metadata and page list, read and checked.
pub(crate) struct Loaded {
    pub(crate) info: Checkpoint,
    /// Data pages, then image pages.
    pub(crate) entries: Vec<Entry>,
    pub(crate) image_crc: u32,
    /// The run of pages holding the list: first page and count.
    pub(crate) list: Option<(u32, u64)>,
}

/// The metadata as written by a writer (`name` as given, at most [`MAX_NAME`] bytes).
pub(crate) struct Meta<'n> {
    pub(crate) generation: u64,
    pub(crate) data_pages: u64,
    pub(crate) image_len: u64,
    pub(crate) list_offset: u64,
    pub(crate) list_crc: u32,
    pub(crate) image_crc: u32,
    pub(crate) kind: Kind,
    pub(crate) writer: Node,
    pub(crate) name: &'n str,
}

fn seal(body: &[u8], cid: Cid) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(body);
    h.update(&cid.slot.to_le_bytes());
    h.update(&cid.epoch.to_le_bytes());
    h.finalize()
}

impl Meta<'_> {
    pub(crate) fn encode(&self, cid: Cid) -> [u8; META_LEN] {
        let mut b = [0u8; META_LEN];
        b[0..8].copy_from_slice(&self.generation.to_le_bytes());
        b[8..16].copy_from_slice(&self.data_pages.to_le_bytes());
        b[16..24].copy_from_slice(&self.image_len.to_le_bytes());
        b[24..32].copy_from_slice(&self.list_offset.to_le_bytes());
        b[32..36].copy_from_slice(&self.list_crc.to_le_bytes());
        b[36..40].copy_from_slice(&self.image_crc.to_le_bytes());
        b[40] = match self.kind {
            Kind::Function => 1,
            Kind::Uprocess => 2,
        };
        b[41] = self.writer.index();
        b[42] = self.name.len() as u8;
        b[44..44 + self.name.len()].copy_from_slice(self.name.as_bytes());
        let crc = seal(&b[..META_CRC], cid);
        b[META_CRC..].copy_from_slice(&crc.to_le_bytes());
        b
    }
}

/// The list entries as stored.
pub(crate) fn encode_list(entries: &[Entry]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(entries.len() * ENTRY as usize);
    for e in entries {
        bytes.extend_from_slice(&e.page.to_le_bytes());
        bytes.extend_from_slice(&e.crc.to_le_bytes());
    }
    bytes
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from(le32(b, at)) | (u64::from(le32(b, at + 4)) << 32)
}

impl<R: Region> Attached<R> {
    /// Offset of slot `slot`'s state word.
    pub(crate) fn slot_at(&self, slot: u32) -> u64 {
        self.header().layout.directory + u64::from(slot) * u64::from(SLOT_BYTES)
    }

    fn refs_at(&self, slot: u32, node: Node) -> u64 {
        self.slot_at(slot) + REFS + 8 * u64::from(node.index())
    }

    /// Slot `slot`'s state (`None` if there is no such slot or its state word is corrupt).
    pub fn slot_state(&self, slot: u32) -> Option<SlotState> {
        (slot < SLOTS)
            .then(|| SlotState::from_word(self.region().load_u64(self.slot_at(slot))))
            .flatten()
    }

    /// References held on slot `slot` by all nodes' clones.
    fn total_refs(&self, slot: u32) -> u64 {
        Node::all().fold(0u64, |sum, n| {
            sum.saturating_add(self.region().load_u64(self.refs_at(slot, n)))
        })
    }

    /// References held on checkpoint `cid` by all nodes' clones (`None` if the slot is in another
    /// epoch).
    pub fn refcount(&self, cid: Cid) -> Option<u64> {
        let s = self.slot_state(cid.slot)?;
        (s.epoch == cid.epoch).then(|| self.total_refs(cid.slot))
    }

    /// The metadata and page list of `cid`, checked: [`CxlError::Corrupt`] unless both CRCs hold
    /// and every field is in range. The caller makes sure the slot stays in that epoch.
    pub(crate) fn load(&self, cid: Cid) -> Result<Loaded, CxlError> {
        let r = self.region();
        let layout = self.header().layout;
        let mut b = [0u8; META_LEN];
        r.read(self.slot_at(cid.slot) + META, &mut b);
        if seal(&b[..META_CRC], cid) != le32(&b, META_CRC) {
            return Err(CxlError::Corrupt);
        }
        let (data_pages, image_len, list_offset) = (le64(&b, 8), le64(&b, 16), le64(&b, 24));
        let kind = match b[40] {
            1 => Kind::Function,
            2 => Kind::Uprocess,
            _ => return Err(CxlError::Corrupt),
        };
        let writer = Node::from_index(b[41]).ok_or(CxlError::Corrupt)?;
        let name = b
            .get(44..44 + usize::from(b[42]))
            .filter(|n| n.len() <= MAX_NAME);
        let name = name.and_then(|n| core::str::from_utf8(n).ok());
        let name = String::from(name.ok_or(CxlError::Corrupt)?);
        // Bounds before any allocation or read they size.
        let count = data_pages
            .checked_add(image_len.div_ceil(PAGE))
            .filter(|&c| c <= layout.data_pages)
            .ok_or(CxlError::Corrupt)?;
        let list_pages = (count * ENTRY).div_ceil(PAGE);
        let list = if count == 0 {
            (list_offset == 0).then_some(None)
        } else {
            list_offset
                .checked_sub(layout.data)
                .filter(|rel| rel % PAGE == 0 && rel / PAGE + list_pages <= layout.data_pages)
                .map(|rel| Some(((rel / PAGE) as u32, list_pages)))
        };
        let list = list.ok_or(CxlError::Corrupt)?;
        let mut bytes = vec![0u8; (count * ENTRY) as usize];
        if count > 0 {
            r.read(list_offset, &mut bytes);
        }
        if crc32fast::hash(&bytes) != le32(&b, 32) {
            return Err(CxlError::Corrupt);
        }
        let entries: Vec<Entry> = bytes
            .chunks_exact(ENTRY as usize)
            .map(|e| Entry {
                page: le32(e, 0),
                crc: le32(e, 4),
            })
            .collect();
        if entries
            .iter()
            .any(|e| u64::from(e.page) >= layout.data_pages)
        {
            return Err(CxlError::Corrupt);
        }
        Ok(Loaded {
            info: Checkpoint {
                cid,
                name,
                generation: le64(&b, 0),
                kind,
                pages: data_pages,
                image_len,
                writer,
            },
            entries,
            image_crc: le32(&b, 36),
            list,
        })
    }

    /// The published checkpoints whose metadata and page list check (data pages are checked
    /// when read).
    pub fn list(&self) -> Vec<Checkpoint> {
        let r = self.region();
        (0..SLOTS)
            .filter_map(|slot| {
                let word = r.load_u64(self.slot_at(slot));
                let s = SlotState::from_word(word).filter(|s| s.state == State::Ready)?;
                let loaded = self.load(Cid {
                    slot,
                    epoch: s.epoch,
                });
                // Unchanged state word: the slot stayed Ready in that epoch while we read.
                (r.load_u64(self.slot_at(slot)) == word).then_some(loaded.ok()?.info)
            })
            .collect()
    }

    /// Retires checkpoint `cid` (its function was replaced or deleted, or policy reclaims it):
    /// Ready → Dead, so no one opens it again; its pages are freed now if no clone holds it,
    /// else by whoever drops the last reference (or [`Attached::gc`]). `node` is the caller.
    pub fn retire(&self, cid: Cid, node: Node) -> Result<(), CxlError> {
        if cid.slot >= SLOTS {
            return Err(CxlError::NotFound);
        }
        let r = self.region();
        let at = self.slot_at(cid.slot);
        loop {
            let word = r.load_u64(at);
            let s = SlotState::from_word(word).ok_or(CxlError::Corrupt)?;
            if s.epoch != cid.epoch {
                return Err(CxlError::NotFound);
            }
            match s.state {
                State::Ready => {}
                State::Dead | State::Freeing => return Err(CxlError::Retired),
                State::Writing => return Err(CxlError::BadState),
                State::Free => return Err(CxlError::NotFound),
            }
            if r.compare_exchange_u64(at, word, s.with(State::Dead, s.node).word())
                .is_ok()
            {
                r.persist(at, 8);
                break;
            }
        }
        self.maybe_free(cid.slot, node);
        Ok(())
    }

    /// Adds a reference of `node` to slot `slot`.
    pub(crate) fn add_ref(&self, slot: u32, node: Node) {
        let at = self.refs_at(slot, node);
        let _ = update_u64(self.region(), at, |n| n.checked_add(1));
        self.region().persist(at, 8);
    }

    /// Drops a reference of `node` to slot `slot`, and frees the slot if it is Dead and that
    /// was the last reference.
    pub(crate) fn drop_ref(&self, slot: u32, node: Node) {
        let at = self.refs_at(slot, node);
        let _ = update_u64(self.region(), at, |n| n.checked_sub(1));
        self.region().persist(at, 8);
        self.maybe_free(slot, node);
    }

    /// Drops every reference `node` holds on slot `slot`: how many it held.
    pub(crate) fn clear_refs(&self, slot: u32, node: Node) -> u64 {
        let at = self.refs_at(slot, node);
        let held = update_u64(self.region(), at, |n| (n != 0).then_some(0)).unwrap_or(0);
        self.region().persist(at, 8);
        held
    }

    /// Frees slot `slot` if it is Dead and no clone holds it, `me` doing it: pages freed.
    pub(crate) fn maybe_free(&self, slot: u32, me: Node) -> Option<u64> {
        let word = self.region().load_u64(self.slot_at(slot));
        let s = SlotState::from_word(word).filter(|s| s.state == State::Dead)?;
        if self.total_refs(slot) != 0 {
            return None;
        }
        let r = self.region();
        let at = self.slot_at(slot);
        let freeing = s.with(State::Freeing, me).word();
        r.compare_exchange_u64(at, word, freeing).ok()?;
        r.persist(at, 8);
        let owner = Owner {
            slot,
            epoch: s.epoch,
        };
        let freed = match self.load(Cid {
            slot,
            epoch: s.epoch,
        }) {
            Ok(loaded) => {
                let run = loaded
                    .list
                    .map_or(0..0, |(first, n)| first..first + n as u32);
                let pages = loaded.entries.iter().map(|e| e.page).chain(run);
                pages.filter(|&p| self.free_page(p, owner)).count() as u64
            }
            // The list cannot be trusted: find the pages by their owner tag.
            Err(_) => self.free_owned_by(owner),
        };
        let free = s.with(State::Free, me).word();
        let _ = r.compare_exchange_u64(at, freeing, free);
        r.persist(at, 8);
        Some(freed)
    }
}
