//! Files on the disk: the `fjord-fs` store (whole or streamed files replaced, renamed and
//! removed atomically; see that crate and `docs/disk.md` for the format and its crash guarantees) over
//! the virtio-blk disk, mounted at boot, and formatted there when the disk is new (all zero).
//!
//! One store for the machine, behind one lock; every operation goes to the disk at once
//! (a change is durable when it returns: its data and directory were flushed).

use crate::drivers::virtio_blk::{self, DiskError, SECTOR};
use alloc::string::String;
use alloc::vec::Vec;
use fjord_fs::{BLOCK, BlockDevice, DraftId, FileStore, FsError, ReaderId};
use spin::Mutex;

/// Sectors per block of the store.
const SECTORS_PER_BLOCK: u64 = (BLOCK / SECTOR) as u64;

/// The machine's disk as the store's block device.
pub struct DiskBlocks {
    blocks: u64,
}

impl BlockDevice for DiskBlocks {
    type Error = DiskError;

    fn blocks(&self) -> u64 {
        self.blocks
    }

    fn read_block(&mut self, n: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        let sector = n
            .checked_mul(SECTORS_PER_BLOCK)
            .ok_or(DiskError::OutOfRange)?;
        virtio_blk::with(|d| d.read(sector, buf))
    }

    fn write_block(&mut self, n: u64, data: &[u8]) -> Result<(), DiskError> {
        let sector = n
            .checked_mul(SECTORS_PER_BLOCK)
            .ok_or(DiskError::OutOfRange)?;
        virtio_blk::with(|d| d.write(sector, data))
    }

    fn flush(&mut self) -> Result<(), DiskError> {
        virtio_blk::with(|d| d.flush())
    }

    fn read_blocks(&mut self, n: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        // One request per 64 blocks (256 KiB), as for writes.
        for (i, chunk) in buf.chunks_mut(64 * BLOCK).enumerate() {
            let sector = (n + 64 * i as u64)
                .checked_mul(SECTORS_PER_BLOCK)
                .ok_or(DiskError::OutOfRange)?;
            virtio_blk::with(|d| d.read(sector, chunk))?;
        }
        Ok(())
    }

    fn write_blocks(&mut self, n: u64, data: &[u8]) -> Result<(), DiskError> {
        // One request per 64 blocks (256 KiB), each with interrupts off only for its own time.
        for (i, chunk) in data.chunks(64 * BLOCK).enumerate() {
            let sector = (n + 64 * i as u64)
                .checked_mul(SECTORS_PER_BLOCK)
                .ok_or(DiskError::OutOfRange)?;
            virtio_blk::with(|d| d.write(sector, chunk))?;
        }
        Ok(())
    }
}

/// A store error as the kernel reports it.
pub type Error = FsError<DiskError>;

static STORE: Mutex<Option<FileStore<DiskBlocks>>> = Mutex::new(None);

/// What mounting found.
pub enum Mounted {
    /// A store with this many files.
    Existing(usize),
    /// An empty store, just formatted (the disk held none).
    Formatted,
}

/// Mounts the store on the disk, formatting a new (all-zero) one; its size in blocks and what
/// it found. An error for a disk holding anything else (left untouched) or failing.
pub fn mount() -> Result<(u64, Mounted), Error> {
    let sectors = virtio_blk::with(|d| Ok(d.sectors())).map_err(FsError::Device)?;
    let dev = DiskBlocks {
        blocks: sectors / SECTORS_PER_BLOCK,
    };
    let (store, formatted) = FileStore::mount_or_format(dev)?;
    let found = if formatted {
        Mounted::Formatted
    } else {
        Mounted::Existing(store.files().len())
    };
    let blocks = store.blocks();
    *STORE.lock() = Some(store);
    Ok((blocks, found))
}

/// Runs `f` on the store (an error when the machine has no disk).
fn with<R>(f: impl FnOnce(&mut FileStore<DiskBlocks>) -> Result<R, Error>) -> Result<R, Error> {
    match STORE.lock().as_mut() {
        Some(s) => f(s),
        None => Err(FsError::Device(DiskError::NoDisk)),
    }
}

/// The contents of `name`.
pub fn read(name: &str) -> Result<Vec<u8>, Error> {
    with(|s| s.read(name))
}

/// Opens `name`'s current version for reading in pieces, its CRC checked (see
/// [`fjord_fs::FileStore::open`]): the reader and the length in bytes.
pub fn open(name: &str) -> Result<(ReaderId, u64), Error> {
    with(|s| s.open(name))
}

/// Reads reader `id`'s bytes from `offset` into `buf`; how many (0 at the end).
pub fn read_at(id: ReaderId, offset: u64, buf: &mut [u8]) -> Result<usize, Error> {
    with(|s| s.read_at(id, offset, buf))
}

/// Ends reader `id`.
pub fn close(id: ReaderId) {
    let _ = with(|s| {
        s.close(id);
        Ok(())
    });
}

/// Starts streaming a new version of `name` (see [`fjord_fs::FileStore::create`]).
pub fn create(name: &str) -> Result<DraftId, Error> {
    with(|s| s.create(name))
}

/// Appends `data` to the streamed file `id` (whole blocks go to the disk now).
pub fn append(id: DraftId, data: &[u8]) -> Result<(), Error> {
    with(|s| s.append(id, data))
}

/// Names everything appended to `id` so far in its file, atomically and durably.
pub fn commit(id: DraftId) -> Result<(), Error> {
    with(|s| s.commit(id))
}

/// Ends the streamed file `id` (what a commit named stays).
pub fn discard(id: DraftId) {
    let _ = with(|s| {
        s.discard(id);
        Ok(())
    });
}

/// Renames `from` to `to` (replacing `to`), atomically and durably.
pub fn rename(from: &str, to: &str) -> Result<(), Error> {
    with(|s| s.rename(from, to))
}

/// Removes `name`, atomically and durably.
pub fn remove(name: &str) -> Result<(), Error> {
    with(|s| s.remove(name))
}

/// The files: (name, length in bytes).
pub fn list() -> Result<Vec<(String, u64)>, Error> {
    with(|s| Ok(s.files().iter().map(|f| (f.name.clone(), f.len)).collect()))
}

/// The length of `name`, if it exists.
pub fn len_of(name: &str) -> Result<Option<u64>, Error> {
    with(|s| Ok(s.stat(name).map(|f| f.len)))
}
