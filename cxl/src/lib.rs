//! Fjord's CXL memory: one region shared by several Fjord VMs ("nodes"), holding checkpoints
//! that any node writes once and every node restores from (CXLfork, ASPLOS '25). This crate is
//! the region's format and protocol as pure logic over a [`Region`] trait; the kernel implements
//! the trait over the mapped BAR, tests over a `Vec` (`VecRegion`, feature `test-region`).
//!
//! **What is emulated.** The region is a QEMU `ivshmem-plain` device backed by one host
//! shared-memory file, mapped write-back at the same address on every node. On one host that
//! memory is cache-coherent and as fast as local memory, and its 8-byte atomics are the host's
//! locked instructions, so the compare-exchanges here are truly atomic across nodes. CXL 3
//! shared memory is coherent too; CXL 2 memory shared by several hosts is not, and there:
//! - [`Region::persist`] must write the lines back (`clwb`/`clflushopt` + `sfence`, or
//!   non-temporal stores), as the protocol already calls it before every flag it sets;
//! - a reader would also have to invalidate its cached copy of a range before reading it (the
//!   trait has no such call yet: on ivshmem it would be a no-op);
//! - cross-host compare-exchange is not available at all: the slot, page and node claims would
//!   need a device-side atomic or a lock service, so this crate's protocol as written needs
//!   coherent atomics on the region (ivshmem on one host, or CXL 3).
//!
//! **Format** (little-endian; the [`PAGE`] size is 4 KiB):
//!
//! | offset | size | contents |
//! |---|---|---|
//! | 0 | 128 B | header: magic `FJORDCXL`, version, page size, region size, CPU features, layout, node count, CRC-32 ([`header`]) |
//! | 256 | 16 × 32 B | node table: id and joined flag, heartbeat, joins ([`node`]) |
//! | 4 KiB | 256 × 256 B | checkpoint directory: state word, references per node, metadata + CRC-32 ([`directory`]) |
//! | 68 KiB | ⌈8 × D / 4 KiB⌉ pages | owner table: one word per data page, zero when free ([`page_alloc`]) |
//! | after it | D × 4 KiB | data pages: checkpoint pages, images, page lists |
//!
//! D is as many data pages as fit ([`Layout::for_size`]; 65 391 in 256 MiB).
//!
//! **Guarantees**, each kept by one compare-exchange or by the order of writes, so that a node
//! may die at any point:
//! - *Format once*: a node formats only a region whose header page is all zero, claiming it by
//!   a compare-exchange of the magic word and setting the real magic last; a concurrent
//!   formatter loses and attaches (a formatter that dies midway leaves the region refused as
//!   [`AttachError::Formatting`]: it holds nothing yet, so a fresh file is the cure).
//!   [`Attached::attach`] only reads, and refuses a bad magic, a
//!   bad CRC, another version, another size, a layout that does not fit the size, and a node
//!   lacking CPU features the region's checkpoints need, each with its own [`AttachError`].
//! - *Publish last*: a writer claims a Free slot (Writing), writes and persists every page, the
//!   image, the page list (a CRC-32 per page) and the metadata (with CRC-32s of itself and of
//!   the list), and only then sets Ready with one compare-exchange. A writer that dies leaves
//!   its slot Writing, which no one lists or opens; [`Attached::gc`] frees it and its pages once
//!   the caller's liveness test says its node is dead. A Ready checkpoint never changes. The
//!   liveness test is policy, and must call a node dead only once it can no longer write.
//! - *Checked reads*: [`Attached::list`] shows only Ready checkpoints whose CRCs hold;
//!   [`Attached::open`] also checks the image, and [`Reader::page`] each page, so torn or
//!   corrupted data is refused ([`CxlError::Corrupt`]), never returned. A page mapped in place
//!   ([`Reader::page_offset`]) is checked only if the caller asks ([`Reader::verify`]).
//! - *No use after free*: a clone holds a reference (a count per node, so a dead node's
//!   references can be dropped for it); [`Attached::retire`] turns Ready into Dead, and the pages
//!   are freed only when a Dead checkpoint has no reference, by whoever drops the last one or by
//!   a collection. An opener counts itself then looks at the state, a retirer changes the state
//!   then looks at the counts; with compare-exchange a full fence, one of them sees the other.
//! - *Nothing leaks*: every data page is owned by one slot in one epoch, so a page whose
//!   checkpoint is gone is found and freed by a sweep.
//!
//! The tests kill a node after each of its region operations (also losing what it had not
//! persisted, as on memory that is not coherent) and run another node between any two of one
//! node's operations, and check these guarantees each time.
//!
//! Cargo features:
//! - `test-region`: `VecRegion`, a region in memory that can simulate a node's crash after any
//!   number of operations (always on for this crate's own tests).

#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod directory;
pub mod gc;
pub mod header;
pub mod node;
// The file is the page allocator; `alloc` is the name of the alloc crate.
#[path = "alloc.rs"]
pub mod page_alloc;
pub mod porter;
pub mod reader;
pub mod region;
pub mod tiering;
#[cfg(any(test, feature = "test-region"))]
pub mod vec_region;
pub mod writer;

pub use directory::{Checkpoint, Cid, Kind, MAX_NAME, SlotState, State};
pub use gc::GcReport;
pub use header::{Header, Layout, format};
pub use node::{Node, NodeInfo};
pub use page_alloc::Owner;
pub use reader::Reader;
pub use region::{PAGE, Region};
pub use tiering::Tiering;
#[cfg(any(test, feature = "test-region"))]
pub use vec_region::VecRegion;
pub use writer::Writer;

use core::sync::atomic::AtomicU64;

/// Why a region cannot be formatted or attached. Attaching never changes the region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachError {
    /// The region's size is not a whole number of pages, or too small for one data page.
    BadSize,
    /// Formatting: the header page is not all zero (formatted, or being formatted by another).
    NotBlank,
    /// The magic word is zero: nothing formatted the region.
    NotFormatted,
    /// Another node is formatting the region (or died doing so).
    Formatting,
    /// The first 8 bytes are neither the magic nor zero: not a Fjord region.
    BadMagic,
    /// A region of another format version.
    Version(u32),
    /// The header's CRC-32 does not match.
    BadCrc,
    /// The header was written for a region of another size.
    SizeMismatch {
        /// The size the header records.
        header: u64,
        /// The region's size.
        region: u64,
    },
    /// The layout (offsets, counts, page size) does not fit the region's size.
    BadLayout,
    /// The region's checkpoints need CPU features this node lacks (the missing bits).
    MissingFeatures(u64),
}

/// Why an operation on an attached region failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CxlError {
    /// Every directory slot is in use.
    DirectoryFull,
    /// No free data page (or run of pages, for a page list) is left.
    RegionFull,
    /// Every node-table entry is taken.
    NodeTableFull,
    /// No such checkpoint: a slot out of range, or not (or no longer) holding it, or not yet
    /// published.
    NotFound,
    /// Metadata, page list, image or page contents do not match their CRC-32.
    Corrupt,
    /// The checkpoint was retired (and perhaps freed since): it can no longer be opened.
    Retired,
    /// The slot is not in the state the operation needs (e.g. retiring an unpublished one, or
    /// publishing a slot a collector took back).
    BadState,
    /// A checkpoint name that is empty or longer than [`MAX_NAME`] bytes.
    BadName,
    /// A buffer of the wrong length (a page is [`PAGE`] bytes).
    BadLength,
    /// A page index past the checkpoint's pages.
    OutOfRange,
}

/// A region this node has checked and may use: its header, and this node's view of it.
pub struct Attached<R: Region> {
    region: R,
    header: Header,
    /// Where this view's next page search starts (local, a hint only).
    cursor: AtomicU64,
}

impl<R: Region> Attached<R> {
    /// Attaches to a formatted region as a node with CPU `features` (see
    /// [`header::read_header`] for the checks). Reads only.
    pub fn attach(region: R, features: u64) -> Result<Attached<R>, AttachError> {
        let header = header::read_header(&region, features)?;
        Ok(Attached::new(region, header))
    }

    /// Attaches to `region`, formatting it first if it is blank: the view and whether this call
    /// formatted it. Losing a format race to another node attaches to its format, or gives
    /// [`AttachError::Formatting`] while that node is still at it (try again shortly).
    pub fn format_or_attach(region: R, features: u64) -> Result<(Attached<R>, bool), AttachError> {
        match header::read_header(&region, features) {
            Err(AttachError::NotFormatted) => match format(&region, features) {
                Ok(header) => Ok((Attached::new(region, header), true)),
                Err(AttachError::NotBlank) => {
                    Attached::attach(region, features).map(|a| (a, false))
                }
                Err(e) => Err(e),
            },
            Ok(header) => Ok((Attached::new(region, header), false)),
            Err(e) => Err(e),
        }
    }

    fn new(region: R, header: Header) -> Attached<R> {
        Attached {
            region,
            header,
            cursor: AtomicU64::new(0),
        }
    }

    /// The region's header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The region.
    pub fn region(&self) -> &R {
        &self.region
    }
}

#[cfg(test)]
mod tests;
