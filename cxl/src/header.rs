//! The header page at offset 0: what the region holds and where, the CPU features its
//! checkpoints need, and the node table. Formatting and validating it.

use crate::AttachError;
use crate::region::{PAGE, Region};
use alloc::vec;

/// The first 8 bytes of a formatted region.
pub const MAGIC: [u8; 8] = *b"FJORDCXL";
/// The first 8 bytes while one node formats the region (claimed, not yet valid).
pub const FORMATTING: [u8; 8] = *b"FJORDFMT";
/// The format version this crate reads and writes.
pub const VERSION: u32 = 1;
/// Checkpoint slots in the directory.
pub const SLOTS: u32 = 256;
/// Bytes of one directory slot.
pub const SLOT_BYTES: u32 = 256;
/// Entries of the node table (nodes that can be joined at once).
pub const MAX_NODES: u32 = 16;
/// Offset of the node table in the header page.
pub const NODE_TABLE: u64 = 256;
/// Bytes of one node-table entry.
pub const NODE_BYTES: u64 = 32;

/// Bytes of the header's fixed fields, the CRC-32 included (the node table follows later).
const FIXED: usize = 128;
/// Offset of the CRC-32 over the fixed fields before it.
const CRC_AT: usize = FIXED - 4;

/// Where the parts of the region lie (byte offsets from its start).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The checkpoint directory: [`SLOTS`] slots of [`SLOT_BYTES`].
    pub directory: u64,
    /// Slots in the directory.
    pub slots: u32,
    /// Bytes per slot.
    pub slot_bytes: u32,
    /// The page allocator's owner table: one 8-byte word per data page.
    pub owners: u64,
    /// Bytes of the owner table (whole pages).
    pub owners_len: u64,
    /// The first data page.
    pub data: u64,
    /// Data pages.
    pub data_pages: u64,
}

impl Layout {
    /// The layout of a region of `size` bytes: header page, directory, owner table, then as
    /// many data pages as fit. `None` if `size` is not a whole number of pages or leaves no
    /// data page.
    pub fn for_size(size: u64) -> Option<Layout> {
        if !size.is_multiple_of(PAGE) {
            return None;
        }
        let directory = PAGE;
        let owners = directory + u64::from(SLOTS) * u64::from(SLOT_BYTES);
        let mut pages = size.checked_sub(owners)? / (PAGE + 8);
        // Page numbers are stored in 32 bits.
        pages = pages.min(u64::from(u32::MAX));
        let table = |pages: u64| (pages * 8).div_ceil(PAGE) * PAGE;
        while pages > 0 && owners + table(pages) + pages * PAGE > size {
            pages -= 1;
        }
        (pages > 0).then(|| Layout {
            directory,
            slots: SLOTS,
            slot_bytes: SLOT_BYTES,
            owners,
            owners_len: table(pages),
            data: owners + table(pages),
            data_pages: pages,
        })
    }
}

/// The header's fixed fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Format version ([`VERSION`]).
    pub version: u32,
    /// The region's size in bytes.
    pub region_size: u64,
    /// Bytes per page ([`PAGE`]).
    pub page_size: u32,
    /// CPU features every node using the region's checkpoints must have (a caller-defined mask,
    /// e.g. CPUID bits the kernel relies on): those of the node that formatted it.
    pub features: u64,
    /// Where the parts of the region lie.
    pub layout: Layout,
    /// Entries of the node table ([`MAX_NODES`]).
    pub max_nodes: u32,
}

impl Header {
    /// The fixed fields as stored, CRC-32 last.
    fn encode(&self) -> [u8; FIXED] {
        let mut b = [0u8; FIXED];
        let l = &self.layout;
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&self.version.to_le_bytes());
        b[12..16].copy_from_slice(&self.page_size.to_le_bytes());
        b[16..24].copy_from_slice(&self.region_size.to_le_bytes());
        b[24..32].copy_from_slice(&self.features.to_le_bytes());
        b[32..40].copy_from_slice(&l.directory.to_le_bytes());
        b[40..44].copy_from_slice(&l.slots.to_le_bytes());
        b[44..48].copy_from_slice(&l.slot_bytes.to_le_bytes());
        b[48..56].copy_from_slice(&l.owners.to_le_bytes());
        b[56..64].copy_from_slice(&l.owners_len.to_le_bytes());
        b[64..72].copy_from_slice(&l.data.to_le_bytes());
        b[72..80].copy_from_slice(&l.data_pages.to_le_bytes());
        b[80..84].copy_from_slice(&self.max_nodes.to_le_bytes());
        let crc = crc32fast::hash(&b[..CRC_AT]);
        b[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// The fields of `b` (no check beyond the byte layout).
    fn decode(b: &[u8; FIXED]) -> Header {
        let u32_at = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let u64_at = |at: usize| u64::from(u32_at(at)) | (u64::from(u32_at(at + 4)) << 32);
        Header {
            version: u32_at(8),
            page_size: u32_at(12),
            region_size: u64_at(16),
            features: u64_at(24),
            layout: Layout {
                directory: u64_at(32),
                slots: u32_at(40),
                slot_bytes: u32_at(44),
                owners: u64_at(48),
                owners_len: u64_at(56),
                data: u64_at(64),
                data_pages: u64_at(72),
            },
            max_nodes: u32_at(80),
        }
    }
}

/// Formats `region` for checkpoints taken with CPU `features`, if its header page is all zero
/// (a fresh shared-memory file): zeroes the directory and the owner table, writes the header,
/// and sets the magic last. Data pages are not touched.
///
/// Two nodes formatting at once: the first compare-exchange of the magic word (zero to
/// [`FORMATTING`]) wins, the other gets [`AttachError::NotBlank`] and should attach. A region
/// whose formatter died midway keeps [`FORMATTING`] and is refused by [`read_header`] with
/// [`AttachError::Formatting`]; nothing can have been stored in it, so the cure is a fresh file.
pub fn format<R: Region + ?Sized>(region: &R, features: u64) -> Result<Header, AttachError> {
    let size = region.len();
    let layout = Layout::for_size(size).ok_or(AttachError::BadSize)?;
    let mut page = vec![0u8; PAGE as usize];
    region.read(0, &mut page);
    if page.iter().any(|&b| b != 0) {
        return Err(AttachError::NotBlank);
    }
    if region
        .compare_exchange_u64(0, 0, u64::from_le_bytes(FORMATTING))
        .is_err()
    {
        return Err(AttachError::NotBlank);
    }
    region.persist(0, 8);
    let zero = vec![0u8; PAGE as usize];
    let mut at = layout.directory;
    while at < layout.data {
        region.write(at, &zero);
        at += PAGE;
    }
    region.persist(layout.directory, layout.data - layout.directory);
    let header = Header {
        version: VERSION,
        region_size: size,
        page_size: PAGE as u32,
        features,
        layout,
        max_nodes: MAX_NODES,
    };
    let bytes = header.encode();
    region.write(8, &bytes[8..]);
    region.persist(8, FIXED as u64 - 8);
    region.store_u64(0, u64::from_le_bytes(MAGIC));
    region.persist(0, 8);
    Ok(header)
}

/// The header of `region` if a node with CPU `features` may use it; reads only.
///
/// Checked in this order, each failure its own error: the magic ([`AttachError::NotFormatted`]
/// for zeroes, [`AttachError::Formatting`], [`AttachError::BadMagic`]), the version, the CRC-32,
/// the region's size, the layout against the size, and the features.
pub fn read_header<R: Region + ?Sized>(region: &R, features: u64) -> Result<Header, AttachError> {
    if region.len() < PAGE {
        return Err(AttachError::BadSize);
    }
    let mut b = [0u8; FIXED];
    region.read(0, &mut b);
    let mut magic = [0u8; 8];
    magic.copy_from_slice(&b[..8]);
    match magic {
        MAGIC => {}
        FORMATTING => return Err(AttachError::Formatting),
        [0, 0, 0, 0, 0, 0, 0, 0] => return Err(AttachError::NotFormatted),
        _ => return Err(AttachError::BadMagic),
    }
    let header = Header::decode(&b);
    if header.version != VERSION {
        return Err(AttachError::Version(header.version));
    }
    if crc32fast::hash(&b[..CRC_AT]).to_le_bytes() != b[CRC_AT..] {
        return Err(AttachError::BadCrc);
    }
    if header.region_size != region.len() {
        return Err(AttachError::SizeMismatch {
            header: header.region_size,
            region: region.len(),
        });
    }
    if header.page_size != PAGE as u32
        || header.max_nodes != MAX_NODES
        || Layout::for_size(header.region_size) != Some(header.layout)
    {
        return Err(AttachError::BadLayout);
    }
    let missing = header.features & !features;
    if missing != 0 {
        return Err(AttachError::MissingFeatures(missing));
    }
    Ok(header)
}

#[cfg(test)]
pub(crate) fn encode_for_test(header: &Header) -> [u8; FIXED] {
    header.encode()
}
