//! Writing a checkpoint: claim a slot, fill pages, publish with the ready flag last.

use crate::directory::{
    Cid, ENTRY, Entry, Kind, MAX_NAME, META, Meta, SlotState, State, encode_list,
};
use crate::header::SLOTS;
use crate::node::Node;
use crate::page_alloc::Owner;
use crate::region::{PAGE, Region};
use crate::{Attached, CxlError};
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

/// A checkpoint being written ([`Attached::begin`]): its slot is Writing and owned by this
/// node. Dropped without [`Writer::publish`], it gives its pages and its slot back (a writer
/// that dies instead leaves them to [`Attached::gc`]).
pub struct Writer<'a, R: Region> {
    cx: &'a Attached<R>,
    cid: Cid,
    node: Node,
    name: String,
    generation: u64,
    kind: Kind,
    pages: Vec<Entry>,
    image: Vec<Entry>,
    image_len: u64,
    image_crc: u32,
    /// The page list's run, once published.
    list: Option<(u32, u64)>,
    /// One page, zero-padded, as written.
    buf: Vec<u8>,
    published: bool,
}

impl<R: Region> Attached<R> {
    /// Starts a checkpoint of function or program `name` (1 to [`MAX_NAME`] bytes) at
    /// `generation`, written by `node`: claims the first Free slot with a compare-exchange into
    /// Writing, one epoch up ([`CxlError::DirectoryFull`] if none is free).
    pub fn begin(
        &self,
        name: &str,
        generation: u64,
        kind: Kind,
        node: Node,
    ) -> Result<Writer<'_, R>, CxlError> {
        if name.is_empty() || name.len() > MAX_NAME {
            return Err(CxlError::BadName);
        }
        let r = self.region();
        for slot in 0..SLOTS {
            let at = self.slot_at(slot);
            let word = r.load_u64(at);
            let Some(s) = SlotState::from_word(word) else {
                continue;
            };
            // A slot claimed 2^32 - 1 times is never claimed again (epochs do not wrap).
            if s.state != State::Free || s.epoch == u32::MAX {
                continue;
            }
            let writing = SlotState {
                state: State::Writing,
                node,
                epoch: s.epoch + 1,
            };
            if r.compare_exchange_u64(at, word, writing.word()).is_ok() {
                r.persist(at, 8);
                return Ok(Writer {
                    cx: self,
                    cid: Cid {
                        slot,
                        epoch: writing.epoch,
                    },
                    node,
                    name: String::from(name),
                    generation,
                    kind,
                    pages: Vec::new(),
                    image: Vec::new(),
                    image_len: 0,
                    image_crc: crc32fast::hash(&[]),
                    list: None,
                    buf: vec![0; PAGE as usize],
                    published: false,
                });
            }
        }
        Err(CxlError::DirectoryFull)
    }
}

impl<R: Region> Writer<'_, R> {
    /// The checkpoint's identity (valid for opening once published).
    pub fn cid(&self) -> Cid {
        self.cid
    }

    /// Data pages written so far.
    pub fn pages(&self) -> u64 {
        self.pages.len() as u64
    }

    fn owner(&self) -> Owner {
        Owner {
            slot: self.cid.slot,
            epoch: self.cid.epoch,
        }
    }

    /// Takes a page, writes `data` (at most a page) into it zero-padded, and persists it.
    fn put(&mut self, data: &[u8]) -> Result<Entry, CxlError> {
        let page = self.cx.alloc_page(self.owner())?;
        self.buf[..data.len()].copy_from_slice(data);
        self.buf[data.len()..].fill(0);
        let at = self.cx.page_offset(page);
        self.cx.region().write(at, &self.buf);
        self.cx.region().persist(at, PAGE);
        Ok(Entry {
            page,
            crc: crc32fast::hash(&self.buf),
        })
    }

    fn free(&self, entries: &[Entry]) {
        for e in entries {
            self.cx.free_page(e.page, self.owner());
        }
    }

    /// Appends data page `data` (at most [`PAGE`] bytes, zero-padded to a page): its index in
    /// the checkpoint. [`CxlError::RegionFull`] leaves the writer as it was.
    pub fn push_page(&mut self, data: &[u8]) -> Result<u64, CxlError> {
        if data.len() > PAGE as usize {
            return Err(CxlError::BadLength);
        }
        let entry = self.put(data)?;
        self.pages.push(entry);
        Ok(self.pages.len() as u64 - 1)
    }

    /// Stores the checkpoint's image (the layout, registers and tags the kernel serialises),
    /// replacing any image written before. On [`CxlError::RegionFull`] the writer has no image.
    pub fn write_image(&mut self, image: &[u8]) -> Result<(), CxlError> {
        let old = core::mem::take(&mut self.image);
        self.free(&old);
        self.image_len = 0;
        self.image_crc = crc32fast::hash(&[]);
        let mut entries = Vec::with_capacity(image.len().div_ceil(PAGE as usize));
        for chunk in image.chunks(PAGE as usize) {
            match self.put(chunk) {
                Ok(e) => entries.push(e),
                Err(err) => {
                    self.free(&entries);
                    return Err(err);
                }
            }
        }
        self.image = entries;
        self.image_len = image.len() as u64;
        self.image_crc = crc32fast::hash(image);
        Ok(())
    }

    /// Publishes the checkpoint. Every page is already written and persisted; this writes and
    /// persists the page list, then the metadata with its CRC-32, and only then sets the ready
    /// flag (Writing → Ready, one compare-exchange) and persists it. A crash before that last
    /// step leaves the slot Writing, which no one opens or lists.
    ///
    /// On an error (a full region for the list, or [`CxlError::BadState`] when a collector took
    /// the slot from a writer it believed dead) the writer gives everything back.
    pub fn publish(mut self) -> Result<Cid, CxlError> {
        let r = self.cx.region();
        let entries: Vec<Entry> = self.pages.iter().chain(&self.image).copied().collect();
        let list_bytes = encode_list(&entries);
        let list_offset = if entries.is_empty() {
            0
        } else {
            let count = (entries.len() as u64 * ENTRY).div_ceil(PAGE);
            let first = self.cx.alloc_run(count, self.owner())?;
            self.list = Some((first, count));
            let at = self.cx.page_offset(first);
            r.write(at, &list_bytes);
            r.persist(at, list_bytes.len() as u64);
            at
        };
        let meta = Meta {
            generation: self.generation,
            data_pages: self.pages.len() as u64,
            image_len: self.image_len,
            list_offset,
            list_crc: crc32fast::hash(&list_bytes),
            image_crc: self.image_crc,
            kind: self.kind,
            writer: self.node,
            name: &self.name,
        };
        let at = self.cx.slot_at(self.cid.slot);
        let meta_at = at + META;
        let bytes = meta.encode(self.cid);
        r.write(meta_at, &bytes);
        r.persist(meta_at, bytes.len() as u64);
        let writing = self.writing();
        let ready = writing.with(State::Ready, self.node);
        r.compare_exchange_u64(at, writing.word(), ready.word())
            .map_err(|_| CxlError::BadState)?;
        r.persist(at, 8);
        self.published = true;
        Ok(self.cid)
    }

    fn writing(&self) -> SlotState {
        SlotState {
            state: State::Writing,
            node: self.node,
            epoch: self.cid.epoch,
        }
    }

    /// Gives up the checkpoint: frees its pages and its slot.
    pub fn abort(self) {}
}

impl<R: Region> Drop for Writer<'_, R> {
    fn drop(&mut self) {
        if self.published {
            return;
        }
        self.free(&self.pages);
        self.free(&self.image);
        if let Some((first, count)) = self.list {
            for page in first..first + count as u32 {
                self.cx.free_page(page, self.owner());
            }
        }
        let r = self.cx.region();
        let at = self.cx.slot_at(self.cid.slot);
        let writing = self.writing();
        let free = writing.with(State::Free, self.node);
        let _ = r.compare_exchange_u64(at, writing.word(), free.word());
        r.persist(at, 8);
    }
}
