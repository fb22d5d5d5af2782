//! Opening a published checkpoint: a reference counted against retiring it, its metadata, page
//! list and image checked before anything is handed out.

use crate::directory::{Checkpoint, Cid, Entry, SlotState, State};
use crate::header::SLOTS;
use crate::node::Node;
use crate::region::{PAGE, Region};
use crate::{Attached, CxlError};
use alloc::vec;
use alloc::vec::Vec;

/// An open checkpoint ([`Attached::open`]): a clone's reference to it, which keeps its pages
/// from being freed until the reader is closed or dropped.
pub struct Reader<'a, R: Region> {
    cx: &'a Attached<R>,
    node: Node,
    info: Checkpoint,
    pages: Vec<Entry>,
    image: Vec<u8>,
}

/// Why a state word does not let `cid` be opened.
fn refusal(word: u64, cid: Cid) -> CxlError {
    match SlotState::from_word(word) {
        None => CxlError::Corrupt,
        Some(s) if s.epoch != cid.epoch => CxlError::NotFound,
        Some(s) => match s.state {
            // Free in the checkpoint's own epoch: it was published (its id was handed out)
            // and has been retired and freed since.
            State::Dead | State::Freeing | State::Free => CxlError::Retired,
            State::Ready => CxlError::BadState,
            State::Writing => CxlError::NotFound,
        },
    }
}

fn is_open(word: u64, cid: Cid) -> bool {
    SlotState::from_word(word).is_some_and(|s| s.state == State::Ready && s.epoch == cid.epoch)
}

impl<R: Region> Attached<R> {
    /// Opens checkpoint `cid` for a clone on `node`: takes a reference (a compare-exchange on
    /// `node`'s count), then checks the metadata, the page list and the image against their
    /// CRC-32s. [`CxlError::NotFound`] (no such checkpoint, or not published),
    /// [`CxlError::Retired`], or [`CxlError::Corrupt`]; on any error the reference is dropped.
    pub fn open(&self, cid: Cid, node: Node) -> Result<Reader<'_, R>, CxlError> {
        if cid.slot >= SLOTS {
            return Err(CxlError::NotFound);
        }
        let r = self.region();
        let at = self.slot_at(cid.slot);
        let word = r.load_u64(at);
        if !is_open(word, cid) {
            return Err(refusal(word, cid));
        }
        self.add_ref(cid.slot, node);
        // After the reference, the state: a retirer changes the state before it counts the
        // references, so one of the two sees the other.
        let now = r.load_u64(at);
        let checked = if now == word {
            self.load(cid).and_then(|loaded| {
                let image = self.read_image(&loaded.entries[loaded.info.pages as usize..])?;
                let image = &image[..loaded.info.image_len as usize];
                if crc32fast::hash(image) != loaded.image_crc {
                    return Err(CxlError::Corrupt);
                }
                Ok((loaded, image.to_vec()))
            })
        } else {
            Err(refusal(now, cid))
        };
        match checked {
            Ok((mut loaded, image)) => {
                loaded.entries.truncate(loaded.info.pages as usize);
                Ok(Reader {
                    cx: self,
                    node,
                    info: loaded.info,
                    pages: loaded.entries,
                    image,
                })
            }
            Err(e) => {
                self.drop_ref(cid.slot, node);
                Err(e)
            }
        }
    }

    /// The image pages `entries`, each checked against its CRC-32, end to end.
    fn read_image(&self, entries: &[Entry]) -> Result<Vec<u8>, CxlError> {
        let mut image = vec![0u8; entries.len() * PAGE as usize];
        for (e, page) in entries.iter().zip(image.chunks_mut(PAGE as usize)) {
            self.region().read(self.page_offset(e.page), page);
            if crc32fast::hash(page) != e.crc {
                return Err(CxlError::Corrupt);
            }
        }
        Ok(image)
    }
}

impl<R: Region> Reader<'_, R> {
    /// What the checkpoint is.
    pub fn info(&self) -> &Checkpoint {
        &self.info
    }

    /// Data pages.
    pub fn pages(&self) -> u64 {
        self.pages.len() as u64
    }

    /// Reads data page `i` into `buf` (a page) and checks it against its CRC-32
    /// ([`CxlError::Corrupt`]; [`CxlError::OutOfRange`], [`CxlError::BadLength`]).
    pub fn page(&self, i: u64, buf: &mut [u8]) -> Result<(), CxlError> {
        let e = usize::try_from(i)
            .ok()
            .and_then(|i| self.pages.get(i))
            .ok_or(CxlError::OutOfRange)?;
        if buf.len() != PAGE as usize {
            return Err(CxlError::BadLength);
        }
        self.cx.region().read(self.cx.page_offset(e.page), buf);
        if crc32fast::hash(buf) != e.crc {
            return Err(CxlError::Corrupt);
        }
        Ok(())
    }

    /// Byte offset in the region of data page `i`, for mapping it read-only in place (a page
    /// used this way is not checked: see [`Reader::verify`]).
    pub fn page_offset(&self, i: u64) -> Option<u64> {
        let e = self.pages.get(usize::try_from(i).ok()?)?;
        Some(self.cx.page_offset(e.page))
    }

    /// Checks every data page against its CRC-32.
    pub fn verify(&self) -> Result<(), CxlError> {
        let mut buf = vec![0u8; PAGE as usize];
        (0..self.pages()).try_for_each(|i| self.page(i, &mut buf))
    }

    /// The image, as written.
    pub fn image(&self) -> &[u8] {
        &self.image
    }

    /// Closes the checkpoint: drops the reference, freeing it if it was retired and this was
    /// the last one. Dropping the reader does the same.
    pub fn close(self) {}
}

impl<R: Region> Drop for Reader<'_, R> {
    fn drop(&mut self) {
        self.cx.drop_ref(self.info.cid.slot, self.node);
    }
}
