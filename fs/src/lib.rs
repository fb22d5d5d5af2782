//! Fjord's file store: named files on a block device, each written whole and replaced,
//! renamed or removed atomically, so that a crash at any moment leaves every file either as it
//! was or as it was to become, never torn.
//!
//! The format is Fjord's own (written by hand: no no_std FAT crate on crates.io builds on
//! stable with rename), small enough to check by reading:
//!
//! - The device is cut into 4 KiB blocks. Blocks 0–3 and 4–7 hold two copies of the
//!   *directory*: magic, version, the device's size in blocks, a generation number and up to
//!   [`MAX_FILES`] entries (name, first block, length, CRC-32 of the contents), sealed by a CRC-32
//!   of the whole copy. Every other block holds file data; a file is one run of contiguous
//!   blocks.
//! - Mounting reads both copies and takes the valid one with the higher generation.
//! - Every change writes the new data (if any) into blocks no file of the current directory uses,
//!   flushes, then writes the new directory, one generation up, over the *other* copy, and
//!   flushes again. Until that second write is whole, the current copy stands and still names
//!   only blocks nothing overwrote; once it is whole (its CRC checks), the change is done. A torn
//!   directory write fails its CRC and is ignored at the next mount.
//! - Reading a file checks its contents' CRC, so a block the device corrupted later is reported
//!   ([`FsError::Corrupt`]) rather than returned.
//!
//! Files are written whole ([`FileStore::write`]), or streamed ([`FileStore::create`]): a
//! *draft* reserves a run of free blocks, takes appended bytes block by block (only the last
//! partial block stays in memory), and [`FileStore::commit`] names what it holds in a new
//! directory, as `write` does. Until then the directory knows nothing of it, so a crash leaves
//! the file as it was. A draft reserves the largest free run; another draft takes the upper
//! half of the largest room a draft has left. A program saving a file writes a temporary name
//! and renames it over the old one, as Redis does with its RDB file.
//!
//! Files are read whole ([`FileStore::read`]), or in pieces through a *reader*
//! ([`FileStore::open`]): opening checks the version's CRC (reading it through in
//! [`READ_RUN`]-block requests, never holding more than one in memory) and keeps that version's
//! blocks reserved until [`FileStore::close`], so a reader goes on seeing the file it opened
//! while the name is replaced, renamed or removed.

#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

/// Bytes per block.
pub const BLOCK: usize = 4096;
/// Blocks of one directory copy.
pub const COPY_BLOCKS: u64 = 4;
/// Blocks holding the two directory copies (file data starts after them).
pub const DIRECTORY_BLOCKS: u64 = 2 * COPY_BLOCKS;
/// Longest file name, in bytes.
pub const MAX_NAME: usize = 103;

const COPY: usize = COPY_BLOCKS as usize * BLOCK;
const MAGIC: &[u8; 8] = b"FJORDFS1";
const VERSION: u32 = 1;
const HEADER: usize = 64;
const ENTRY: usize = 128;
/// Blocks per device request when a file is read through: 256 KiB.
pub const READ_RUN: usize = 64;
/// Most files a store holds.
pub const MAX_FILES: usize = (COPY - HEADER - 4) / ENTRY;

/// A device of [`BLOCK`]-byte blocks.
pub trait BlockDevice {
    /// The device's error.
    type Error: core::fmt::Debug;
    /// Its size in blocks.
    fn blocks(&self) -> u64;
    /// Reads block `n` into `buf` (one block).
    fn read_block(&mut self, n: u64, buf: &mut [u8]) -> Result<(), Self::Error>;
    /// Writes `data` (one block) to block `n`.
    fn write_block(&mut self, n: u64, data: &[u8]) -> Result<(), Self::Error>;
    /// Makes every block written so far durable.
    fn flush(&mut self) -> Result<(), Self::Error>;
    /// Writes `data` (whole blocks) to the blocks from `n`; a device that can do it in one
    /// request overrides this.
    fn write_blocks(&mut self, n: u64, data: &[u8]) -> Result<(), Self::Error> {
        for (i, block) in data.chunks(BLOCK).enumerate() {
            self.write_block(n + i as u64, block)?;
        }
        Ok(())
    }
    /// Reads the blocks from `n` into `buf` (whole blocks); a device that can do it in one
    /// request overrides this.
    fn read_blocks(&mut self, n: u64, buf: &mut [u8]) -> Result<(), Self::Error> {
        for (i, block) in buf.chunks_mut(BLOCK).enumerate() {
            self.read_block(n + i as u64, block)?;
        }
        Ok(())
    }
}

/// Why a store operation failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FsError<E> {
    /// The device failed.
    Device(E),
    /// Neither directory copy is valid: the device holds no store (see [`FileStore::format`]).
    NotFormatted,
    /// A store of another format version.
    Version(u32),
    /// The device is too small for a store (more than [`DIRECTORY_BLOCKS`] blocks).
    TooSmall,
    /// No file of that name.
    NotFound,
    /// A name that is empty, too long, or holds a NUL byte.
    BadName,
    /// The directory is full.
    TooManyFiles,
    /// No run of free blocks is long enough.
    NoSpace,
    /// A file's contents do not match its checksum.
    Corrupt,
}

/// One file of the directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Its name.
    pub name: String,
    /// Its first block.
    pub start: u64,
    /// Its length in bytes.
    pub len: u64,
    /// CRC-32 of its contents.
    pub crc: u32,
}

impl Entry {
    /// Blocks it occupies.
    pub fn blocks(&self) -> u64 {
        self.len.div_ceil(BLOCK as u64)
    }
}

/// A mounted store.
pub struct FileStore<D: BlockDevice> {
    dev: D,
    generation: u64,
    /// The copy (0 or 1) holding the current directory.
    slot: u64,
    files: Vec<Entry>,
    /// Files being streamed, by [`DraftId`].
    drafts: Vec<Option<Draft>>,
    /// The versions open readers see, by [`ReaderId`]: their blocks stay reserved.
    readers: Vec<Option<Entry>>,
}

/// A file version open for reading ([`FileStore::open`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReaderId(pub u32);

/// A file being streamed into the store ([`FileStore::create`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DraftId(pub u32);

/// A draft's state: its reserved run and what it holds so far.
struct Draft {
    name: String,
    /// First block of its reserved run.
    start: u64,
    /// Blocks reserved.
    capacity: u64,
    /// Whole blocks written (from `start`).
    full: u64,
    /// Bytes after the whole blocks (less than a block).
    tail: Vec<u8>,
    /// CRC-32 state of every byte appended.
    crc: crc32fast::Hasher,
    /// The directory names its blocks (a commit happened since the last append): the next
    /// append moves it to a fresh run first, so a committed block is never rewritten.
    committed: bool,
}

impl Draft {
    fn len(&self) -> u64 {
        self.full * BLOCK as u64 + self.tail.len() as u64
    }

    /// Blocks it uses, the partial one included.
    fn used(&self) -> u64 {
        self.full + u64::from(!self.tail.is_empty())
    }
}

/// Puts `value` in the first empty slot of `slots` (a new one at the end if none is empty);
/// its index.
fn put_in_free_slot<T>(slots: &mut Vec<Option<T>>, value: T) -> u32 {
    match slots.iter().position(Option::is_none) {
        Some(i) => {
            slots[i] = Some(value);
            i as u32
        }
        None => {
            slots.push(Some(value));
            (slots.len() - 1) as u32
        }
    }
}

fn is_valid_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_NAME && !name.bytes().any(|b| b == 0)
}

/// The directory in `copy` (one directory copy, [`COPY_BLOCKS`] blocks), if it is whole:
/// (generation, files); `Err(version)` for a valid copy of another version.
fn decode(copy: &[u8], blocks: u64) -> Option<Result<(u64, Vec<Entry>), u32>> {
    let (body, seal) = copy.split_at(COPY - 4);
    let crc = u32::from_le_bytes(seal.try_into().ok()?);
    if &body[..8] != MAGIC || crc32fast::hash(body) != crc {
        return None;
    }
    let word = |at: usize| u64::from_le_bytes(body[at..at + 8].try_into().unwrap_or_default());
    let version = u32::from_le_bytes(body[8..12].try_into().ok()?);
    if version != VERSION {
        return Some(Err(version));
    }
    if word(16) != blocks {
        return None;
    }
    let generation = word(24);
    let count = usize::try_from(word(32)).ok()?.min(MAX_FILES);
    let mut files = Vec::with_capacity(count);
    for i in 0..count {
        let e = &body[HEADER + i * ENTRY..HEADER + (i + 1) * ENTRY];
        let len = usize::from(e[0]).min(MAX_NAME);
        let name = core::str::from_utf8(&e[1..1 + len]).ok()?;
        let field = |at: usize| u64::from_le_bytes(e[at..at + 8].try_into().unwrap_or_default());
        files.push(Entry {
            name: String::from(name),
            start: field(104),
            len: field(112),
            crc: u32::from_le_bytes(e[120..124].try_into().ok()?),
        });
    }
    Some(Ok((generation, files)))
}

/// The directory copy for `files` at `generation` on a device of `blocks` blocks.
fn encode(generation: u64, files: &[Entry], blocks: u64) -> Vec<u8> {
    let mut b = vec![0u8; COPY];
    b[..8].copy_from_slice(MAGIC);
    b[8..12].copy_from_slice(&VERSION.to_le_bytes());
    b[12..16].copy_from_slice(&(BLOCK as u32).to_le_bytes());
    b[16..24].copy_from_slice(&blocks.to_le_bytes());
    b[24..32].copy_from_slice(&generation.to_le_bytes());
    b[32..40].copy_from_slice(&(files.len() as u64).to_le_bytes());
    for (i, f) in files.iter().enumerate() {
        let e = &mut b[HEADER + i * ENTRY..HEADER + (i + 1) * ENTRY];
        e[0] = f.name.len() as u8;
        e[1..1 + f.name.len()].copy_from_slice(f.name.as_bytes());
        e[104..112].copy_from_slice(&f.start.to_le_bytes());
        e[112..120].copy_from_slice(&f.len.to_le_bytes());
        e[120..124].copy_from_slice(&f.crc.to_le_bytes());
    }
    let crc = crc32fast::hash(&b[..COPY - 4]);
    b[COPY - 4..].copy_from_slice(&crc.to_le_bytes());
    b
}

/// Reads directory copy `slot` (0 or 1).
fn read_copy<D: BlockDevice>(dev: &mut D, slot: u64) -> Result<Vec<u8>, D::Error> {
    let mut copy = vec![0u8; COPY];
    for (i, block) in copy.chunks_mut(BLOCK).enumerate() {
        dev.read_block(slot * COPY_BLOCKS + i as u64, block)?;
    }
    Ok(copy)
}

/// Writes directory copy `slot` (0 or 1).
fn write_copy<D: BlockDevice>(dev: &mut D, slot: u64, copy: &[u8]) -> Result<(), D::Error> {
    for (i, block) in copy.chunks(BLOCK).enumerate() {
        dev.write_block(slot * COPY_BLOCKS + i as u64, block)?;
    }
    Ok(())
}

impl<D: BlockDevice> FileStore<D> {
    /// Writes an empty store over `dev` (both directory copies; no file block is touched).
    pub fn format(mut dev: D) -> Result<FileStore<D>, FsError<D::Error>> {
        let blocks = dev.blocks();
        if blocks <= DIRECTORY_BLOCKS {
            return Err(FsError::TooSmall);
        }
        write_copy(&mut dev, 1, &vec![0u8; COPY]).map_err(FsError::Device)?;
        write_copy(&mut dev, 0, &encode(1, &[], blocks)).map_err(FsError::Device)?;
        dev.flush().map_err(FsError::Device)?;
        Ok(FileStore {
            dev,
            generation: 1,
            slot: 0,
            files: Vec::new(),
            drafts: Vec::new(),
            readers: Vec::new(),
        })
    }

    /// Mounts the store on `dev`: the valid directory copy with the higher generation.
    pub fn mount(mut dev: D) -> Result<FileStore<D>, FsError<D::Error>> {
        let blocks = dev.blocks();
        if blocks <= DIRECTORY_BLOCKS {
            return Err(FsError::TooSmall);
        }
        let mut best: Option<(u64, u64, Vec<Entry>)> = None;
        let mut other_version = None;
        for slot in 0..2 {
            let copy = read_copy(&mut dev, slot).map_err(FsError::Device)?;
            match decode(&copy, blocks) {
                Some(Ok((generation, files))) if best.as_ref().is_none_or(|b| generation > b.0) => {
                    best = Some((generation, slot, files));
                }
                Some(Ok(_)) => {}
                Some(Err(version)) => other_version = Some(version),
                None => {}
            }
        }
        match (best, other_version) {
            (Some((generation, slot, files)), _) => Ok(FileStore {
                dev,
                generation,
                slot,
                files,
                drafts: Vec::new(),
                readers: Vec::new(),
            }),
            (None, Some(v)) => Err(FsError::Version(v)),
            (None, None) => Err(FsError::NotFormatted),
        }
    }

    /// Mounts the store on `dev`, or formats it when its directory blocks are all zero (a new
    /// disk); whether it formatted. A device holding anything else there is left untouched
    /// ([`FsError::NotFormatted`], or [`FsError::Version`]).
    pub fn mount_or_format(mut dev: D) -> Result<(FileStore<D>, bool), FsError<D::Error>> {
        if dev.blocks() <= DIRECTORY_BLOCKS {
            return Err(FsError::TooSmall);
        }
        let mut blank = true;
        for slot in 0..2 {
            let copy = read_copy(&mut dev, slot).map_err(FsError::Device)?;
            blank &= copy.iter().all(|&b| b == 0);
        }
        if blank {
            Self::format(dev).map(|s| (s, true))
        } else {
            Self::mount(dev).map(|s| (s, false))
        }
    }

    /// The files, in directory order.
    pub fn files(&self) -> &[Entry] {
        &self.files
    }

    /// The generation of the current directory (one up per change).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The device's size in blocks.
    pub fn blocks(&self) -> u64 {
        self.dev.blocks()
    }

    /// Blocks no file uses (file blocks only).
    pub fn free_blocks(&self) -> u64 {
        let used: u64 = self.files.iter().map(Entry::blocks).sum();
        self.dev.blocks() - DIRECTORY_BLOCKS - used
    }

    /// The entry of `name`.
    pub fn stat(&self, name: &str) -> Option<&Entry> {
        self.files.iter().find(|f| f.name == name)
    }

    /// Gives the device back.
    pub fn into_device(self) -> D {
        self.dev
    }

    /// The contents of `name`, checked against its CRC.
    pub fn read(&mut self, name: &str) -> Result<Vec<u8>, FsError<D::Error>> {
        let e = self.stat(name).ok_or(FsError::NotFound)?.clone();
        let mut out = vec![0u8; usize::try_from(e.blocks()).map_err(|_| FsError::Corrupt)? * BLOCK];
        for (i, run) in out.chunks_mut(READ_RUN * BLOCK).enumerate() {
            self.dev
                .read_blocks(e.start + (i * READ_RUN) as u64, run)
                .map_err(FsError::Device)?;
        }
        out.truncate(e.len as usize);
        if crc32fast::hash(&out) != e.crc {
            return Err(FsError::Corrupt);
        }
        Ok(out)
    }

    /// Opens the current version of `name` for reading in pieces ([`Self::read_at`]): checks
    /// its contents against the CRC first ([`FsError::Corrupt`]), then keeps its blocks
    /// reserved until [`Self::close`]. The reader and the file's length in bytes.
    pub fn open(&mut self, name: &str) -> Result<(ReaderId, u64), FsError<D::Error>> {
        let e = self.stat(name).ok_or(FsError::NotFound)?.clone();
        let mut crc = crc32fast::Hasher::new();
        let mut run = vec![0u8; READ_RUN * BLOCK];
        let mut at = 0u64;
        while at < e.len {
            let blocks = (e.blocks() - at / BLOCK as u64).min(READ_RUN as u64) as usize;
            let run = &mut run[..blocks * BLOCK];
            self.dev
                .read_blocks(e.start + at / BLOCK as u64, run)
                .map_err(FsError::Device)?;
            let take = (e.len - at).min(run.len() as u64) as usize;
            crc.update(&run[..take]);
            at += take as u64;
        }
        if crc.finalize() != e.crc {
            return Err(FsError::Corrupt);
        }
        let len = e.len;
        Ok((ReaderId(put_in_free_slot(&mut self.readers, e)), len))
    }

    /// Reads the bytes of reader `id`'s version from `offset` into `buf`; how many (fewer than
    /// `buf.len()` only at the end of the file; 0 at or past it).
    pub fn read_at(
        &mut self,
        id: ReaderId,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<usize, FsError<D::Error>> {
        let e = self
            .readers
            .get(id.0 as usize)
            .and_then(Option::as_ref)
            .ok_or(FsError::NotFound)?;
        let (start, len) = (e.start, e.len);
        let n = (len.saturating_sub(offset)).min(buf.len() as u64) as usize;
        if n == 0 {
            return Ok(0);
        }
        let first = offset / BLOCK as u64;
        let last = (offset + n as u64).div_ceil(BLOCK as u64);
        let skip = (offset % BLOCK as u64) as usize;
        let mut blocks = vec![0u8; (last - first) as usize * BLOCK];
        for (i, run) in blocks.chunks_mut(READ_RUN * BLOCK).enumerate() {
            self.dev
                .read_blocks(start + first + (i * READ_RUN) as u64, run)
                .map_err(FsError::Device)?;
        }
        buf[..n].copy_from_slice(&blocks[skip..skip + n]);
        Ok(n)
    }

    /// Ends reader `id`: its version's blocks are free again unless a file still names them.
    pub fn close(&mut self, id: ReaderId) {
        if let Some(slot) = self.readers.get_mut(id.0 as usize) {
            *slot = None;
        }
    }

    /// The runs (start, end) of blocks files of the current directory, drafts or readers hold,
    /// sorted (possibly overlapping: a reader of a current version).
    fn used_runs(&self) -> Vec<(u64, u64)> {
        let mut used: Vec<(u64, u64)> = self
            .files
            .iter()
            .filter(|f| f.blocks() > 0)
            .map(|f| (f.start, f.start + f.blocks()))
            .chain(
                self.drafts
                    .iter()
                    .flatten()
                    .map(|d| (d.start, d.start + d.capacity)),
            )
            .chain(
                self.readers
                    .iter()
                    .flatten()
                    .filter(|f| f.blocks() > 0)
                    .map(|f| (f.start, f.start + f.blocks())),
            )
            .collect();
        used.sort_unstable();
        used
    }

    /// The free runs (start, length), in block order.
    fn free_runs(&self) -> Vec<(u64, u64)> {
        let mut runs = Vec::new();
        let mut at = DIRECTORY_BLOCKS;
        for (start, end) in self.used_runs() {
            if start > at {
                runs.push((at, start - at));
            }
            at = at.max(end);
        }
        if self.dev.blocks() > at {
            runs.push((at, self.dev.blocks() - at));
        }
        runs
    }

    /// The first run of `count` blocks no file of the current directory and no draft uses.
    fn free_run(&self, count: u64) -> Option<u64> {
        if count == 0 {
            return Some(DIRECTORY_BLOCKS);
        }
        self.free_runs()
            .into_iter()
            .find(|&(_, len)| len >= count)
            .map(|(start, _)| start)
    }

    /// A run for a new draft: the largest free run, or the upper half of the largest room a
    /// draft has left (that draft's reservation shrinks); (start, blocks).
    fn reserve(&mut self) -> Option<(u64, u64)> {
        let free = self.free_runs().into_iter().max_by_key(|&(_, len)| len);
        let spare = self
            .drafts
            .iter()
            .enumerate()
            .filter_map(|(i, d)| d.as_ref().map(|d| (i, d.capacity - d.used())))
            .max_by_key(|&(_, room)| room);
        match (free, spare) {
            (Some((start, len)), Some((_, room))) if len >= room / 2 => Some((start, len)),
            (Some((start, len)), None) => Some((start, len)),
            (_, Some((i, room))) if room >= 2 => {
                let d = self.drafts[i].as_mut()?;
                let give = room / 2;
                d.capacity -= give;
                Some((d.start + d.capacity, give))
            }
            (free, _) => free,
        }
    }

    /// The top `count` blocks of the draft with the most room left, which gives them up: for a
    /// whole-file write that finds no free run outside the drafts' reservations.
    fn take_from_a_draft(&mut self, count: u64) -> Option<u64> {
        let d = self
            .drafts
            .iter_mut()
            .flatten()
            .filter(|d| d.capacity - d.used() >= count)
            .max_by_key(|d| d.capacity - d.used())?;
        d.capacity -= count;
        Some(d.start + d.capacity)
    }

    /// Starts streaming a new version of `name` (created or replaced at [`Self::commit`]):
    /// reserves a run of free blocks for it.
    pub fn create(&mut self, name: &str) -> Result<DraftId, FsError<D::Error>> {
        if !is_valid_name(name) {
            return Err(FsError::BadName);
        }
        let (start, capacity) = self.reserve().ok_or(FsError::NoSpace)?;
        let draft = Draft {
            name: String::from(name),
            start,
            capacity,
            full: 0,
            tail: Vec::new(),
            crc: crc32fast::Hasher::new(),
            committed: false,
        };
        Ok(DraftId(put_in_free_slot(&mut self.drafts, draft)))
    }

    fn draft_mut(&mut self, id: DraftId) -> Result<&mut Draft, FsError<D::Error>> {
        self.drafts
            .get_mut(id.0 as usize)
            .and_then(Option::as_mut)
            .ok_or(FsError::NotFound)
    }

    /// Moves a committed draft's blocks to a fresh run (copying its whole blocks), so that
    /// appending never rewrites a block the directory names.
    fn move_committed(&mut self, id: DraftId) -> Result<(), FsError<D::Error>> {
        let (old, full) = {
            let d = self.draft_mut(id)?;
            if !d.committed {
                return Ok(());
            }
            (d.start, d.full)
        };
        // The old run stays reserved (and named) until the copy is done.
        let (start, capacity) = self.reserve().ok_or(FsError::NoSpace)?;
        if capacity < full + 1 {
            return Err(FsError::NoSpace);
        }
        let mut block = vec![0u8; BLOCK];
        for i in 0..full {
            self.dev
                .read_block(old + i, &mut block)
                .map_err(FsError::Device)?;
            self.dev
                .write_block(start + i, &block)
                .map_err(FsError::Device)?;
        }
        let d = self.draft_mut(id)?;
        (d.start, d.capacity, d.committed) = (start, capacity, false);
        Ok(())
    }

    /// Appends `data` to draft `id`: every block it completes is written to the device.
    /// [`FsError::NoSpace`] when its reserved run is full (nothing of `data` is taken then).
    pub fn append(&mut self, id: DraftId, data: &[u8]) -> Result<(), FsError<D::Error>> {
        self.move_committed(id)?;
        let d = self.draft_mut(id)?;
        let end = d.len() + data.len() as u64;
        if end.div_ceil(BLOCK as u64) > d.capacity {
            return Err(FsError::NoSpace);
        }
        d.crc.update(data);
        // The blocks `data` completes, in one run from the first.
        let first = d.start + d.full;
        let mut done = Vec::new();
        let mut rest = data;
        while !rest.is_empty() {
            let take = (BLOCK - d.tail.len()).min(rest.len());
            d.tail.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
            if d.tail.len() == BLOCK {
                done.append(&mut d.tail);
                d.full += 1;
            }
        }
        if !done.is_empty() {
            self.dev
                .write_blocks(first, &done)
                .map_err(FsError::Device)?;
        }
        Ok(())
    }

    /// Makes `name` hold everything appended to draft `id` so far, atomically: after a crash
    /// the file holds either its old contents (or does not exist) or these. The draft stays
    /// open for more appends.
    pub fn commit(&mut self, id: DraftId) -> Result<(), FsError<D::Error>> {
        let name = self.draft_mut(id)?.name.clone();
        self.room_for(&name)?;
        let d = self.draft_mut(id)?;
        let (start, full, len, crc) = (d.start, d.full, d.len(), d.crc.clone().finalize());
        let tail = (!d.tail.is_empty()).then(|| {
            let mut block = vec![0u8; BLOCK];
            block[..d.tail.len()].copy_from_slice(&d.tail);
            block
        });
        if let Some(block) = tail {
            self.dev
                .write_block(start + full, &block)
                .map_err(FsError::Device)?;
        }
        if len > 0 {
            self.dev.flush().map_err(FsError::Device)?;
        }
        self.name_file(Entry {
            name,
            start: if len > 0 { start } else { 0 },
            len,
            crc,
        })?;
        self.draft_mut(id)?.committed = true;
        Ok(())
    }

    /// Ends draft `id`, releasing its reservation (blocks a commit named stay the file's).
    pub fn discard(&mut self, id: DraftId) {
        if let Some(slot) = self.drafts.get_mut(id.0 as usize) {
            *slot = None;
        }
    }

    /// Makes `files` the directory: written over the other copy, one generation up, flushed.
    fn commit_directory(&mut self, files: Vec<Entry>) -> Result<(), FsError<D::Error>> {
        let generation = self.generation + 1;
        let slot = 1 - self.slot;
        let copy = encode(generation, &files, self.dev.blocks());
        write_copy(&mut self.dev, slot, &copy).map_err(FsError::Device)?;
        self.dev.flush().map_err(FsError::Device)?;
        self.generation = generation;
        self.slot = slot;
        self.files = files;
        Ok(())
    }

    /// Creates `name` with `data`, or replaces its contents, atomically: after a crash the
    /// file holds either its old contents (or does not exist) or `data`.
    pub fn write(&mut self, name: &str, data: &[u8]) -> Result<(), FsError<D::Error>> {
        if !is_valid_name(name) {
            return Err(FsError::BadName);
        }
        self.room_for(name)?;
        let count = (data.len() as u64).div_ceil(BLOCK as u64);
        // The new contents go where no file of the current directory is, the old file's
        // blocks included: they stay whole until the new directory is.
        let start = self
            .free_run(count)
            .or_else(|| self.take_from_a_draft(count))
            .ok_or(FsError::NoSpace)?;
        let mut block = vec![0u8; BLOCK];
        for (i, chunk) in data.chunks(BLOCK).enumerate() {
            block[..chunk.len()].copy_from_slice(chunk);
            block[chunk.len()..].fill(0);
            self.dev
                .write_block(start + i as u64, &block)
                .map_err(FsError::Device)?;
        }
        if count > 0 {
            self.dev.flush().map_err(FsError::Device)?;
        }
        self.name_file(Entry {
            name: String::from(name),
            start: if count > 0 { start } else { 0 },
            len: data.len() as u64,
            crc: crc32fast::hash(data),
        })
    }

    /// [`FsError::TooManyFiles`] when `name` is not a file yet and the directory is full.
    fn room_for(&self, name: &str) -> Result<(), FsError<D::Error>> {
        match self.stat(name).is_some() || self.files.len() < MAX_FILES {
            true => Ok(()),
            false => Err(FsError::TooManyFiles),
        }
    }

    /// Makes `entry` the file of its name in a new directory (replacing one of that name).
    fn name_file(&mut self, entry: Entry) -> Result<(), FsError<D::Error>> {
        let mut files = self.files.clone();
        match files.iter_mut().find(|f| f.name == entry.name) {
            Some(f) => *f = entry,
            None => files.push(entry),
        }
        self.commit_directory(files)
    }

    /// Renames `from` to `to` atomically, replacing a file called `to`.
    pub fn rename(&mut self, from: &str, to: &str) -> Result<(), FsError<D::Error>> {
        if !is_valid_name(to) {
            return Err(FsError::BadName);
        }
        let mut files = self.files.clone();
        let i = files
            .iter()
            .position(|f| f.name == from)
            .ok_or(FsError::NotFound)?;
        if from == to {
            return Ok(());
        }
        let moved = files.remove(i);
        files.retain(|f| f.name != to);
        files.push(Entry {
            name: String::from(to),
            ..moved
        });
        self.commit_directory(files)
    }

    /// Removes `name` atomically.
    pub fn remove(&mut self, name: &str) -> Result<(), FsError<D::Error>> {
        let mut files = self.files.clone();
        let before = files.len();
        files.retain(|f| f.name != name);
        if files.len() == before {
            return Err(FsError::NotFound);
        }
        self.commit_directory(files)
    }
}

#[cfg(test)]
mod tests;
