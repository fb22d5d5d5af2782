//! Reading Linux kernel images without running them: where a bzImage keeps its compressed
//! kernel (the boot protocol's setup header), which compressor made it, and whether an
//! uncompressed `vmlinux` ELF carries the PVH entry note that lets QEMU boot it directly.
//!
//! Booting the uncompressed `vmlinux` skips the in-guest decompression (billions of guest
//! instructions for Debian's xz kernel under icount).

use std::ops::Range;

/// The compressor of a bzImage payload, recognised by its magic bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// `xz` (Debian's choice): FD 37 7A 58 5A 00.
    Xz,
    /// `gzip`: 1F 8B.
    Gzip,
    /// `zstd`: 28 B5 2F FD.
    Zstd,
}

impl Compression {
    /// Recognises the compressor from the first bytes of the payload.
    pub fn from_magic(payload: &[u8]) -> Option<Compression> {
        if payload.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0]) {
            Some(Compression::Xz)
        } else if payload.starts_with(&[0x1f, 0x8b]) {
            Some(Compression::Gzip)
        } else if payload.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Some(Compression::Zstd)
        } else {
            None
        }
    }

    /// The host command (program and arguments) that decompresses stdin to stdout. xz stops
    /// after the first stream: the kernel build appends the uncompressed size after it.
    pub fn decompressor(self) -> (&'static str, &'static [&'static str]) {
        match self {
            Compression::Xz => ("xz", &["-dc", "--single-stream"]),
            Compression::Gzip => ("gzip", &["-dc"]),
            Compression::Zstd => ("zstd", &["-dcq"]),
        }
    }
}

/// Why a bzImage's payload cannot be located.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PayloadError {
    /// No `HdrS` setup header: not a bzImage.
    NotBzImage,
    /// Boot protocol older than 2.08 (no payload fields).
    OldProtocol(u16),
    /// The payload fields point outside the file.
    OutOfBounds,
    /// The payload's magic bytes match no known compressor.
    UnknownCompression,
}

impl std::fmt::Display for PayloadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PayloadError::NotBzImage => f.write_str("no `HdrS` setup header: not a bzImage"),
            PayloadError::OldProtocol(v) => {
                write!(f, "boot protocol {v:#x} has no payload fields (need 2.08)")
            }
            PayloadError::OutOfBounds => f.write_str("payload lies outside the file"),
            PayloadError::UnknownCompression => f.write_str("unknown payload compression"),
        }
    }
}

impl std::error::Error for PayloadError {}

/// Reads a little-endian `u16` at `at` (caller checked the bounds).
fn u16_at(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([bytes[at], bytes[at + 1]])
}

/// Reads a little-endian `u32` at `at`, if in bounds.
fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

/// Reads a little-endian `u64` at `at`, if in bounds.
fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
}

/// Locates the compressed kernel inside a bzImage (Linux boot protocol, `setup_sects` at
/// 0x1f1, `payload_offset`/`payload_length` at 0x248/0x24c relative to the protected-mode code).
pub fn bzimage_payload(image: &[u8]) -> Result<(Range<usize>, Compression), PayloadError> {
    if image.len() < 0x250 || &image[0x202..0x206] != b"HdrS" {
        return Err(PayloadError::NotBzImage);
    }
    let version = u16_at(image, 0x206);
    if version < 0x208 {
        return Err(PayloadError::OldProtocol(version));
    }
    // setup_sects == 0 means 4, for compatibility with ancient images.
    let setup_sects = match image[0x1f1] {
        0 => 4,
        n => usize::from(n),
    };
    let offset = u32_at(image, 0x248).ok_or(PayloadError::OutOfBounds)? as usize;
    let length = u32_at(image, 0x24c).ok_or(PayloadError::OutOfBounds)? as usize;
    let start = (setup_sects + 1) * 512 + offset;
    let range = start..start.checked_add(length).ok_or(PayloadError::OutOfBounds)?;
    let payload = image.get(range.clone()).ok_or(PayloadError::OutOfBounds)?;
    let compression = Compression::from_magic(payload).ok_or(PayloadError::UnknownCompression)?;
    Ok((range, compression))
}

/// ELF note type of the 32-bit PVH entry point (`XEN_ELFNOTE_PHYS32_ENTRY`).
const XEN_ELFNOTE_PHYS32_ENTRY: u32 = 18;

/// Whether `elf` is a 64-bit little-endian ELF with a `Xen` note of type
/// `XEN_ELFNOTE_PHYS32_ENTRY` in a `PT_NOTE` segment: QEMU's `-kernel` then boots it through
/// PVH. Only the program headers and notes are read.
pub fn has_pvh_note(elf: &[u8]) -> bool {
    pvh_note(elf).unwrap_or(false)
}

/// [`has_pvh_note`], with `None` for a truncated or malformed file.
fn pvh_note(elf: &[u8]) -> Option<bool> {
    const PT_NOTE: u32 = 4;
    if elf.get(..6)? != b"\x7fELF\x02\x01" {
        return Some(false);
    }
    let phoff = usize::try_from(u64_at(elf, 0x20)?).ok()?;
    let phentsize = usize::from(u16::from_le_bytes(elf.get(0x36..0x38)?.try_into().ok()?));
    let phnum = usize::from(u16::from_le_bytes(elf.get(0x38..0x3a)?.try_into().ok()?));
    for index in 0..phnum {
        let ph = phoff.checked_add(index.checked_mul(phentsize)?)?;
        if u32_at(elf, ph)? != PT_NOTE {
            continue;
        }
        let offset = usize::try_from(u64_at(elf, ph + 8)?).ok()?;
        let size = usize::try_from(u64_at(elf, ph + 0x20)?).ok()?;
        let notes = elf.get(offset..offset.checked_add(size)?)?;
        if notes_contain(notes, b"Xen\0", XEN_ELFNOTE_PHYS32_ENTRY) {
            return Some(true);
        }
    }
    Some(false)
}

/// Whether a block of ELF notes holds one named `name` (with its NUL) of type `kind`.
fn notes_contain(mut notes: &[u8], name: &[u8], kind: u32) -> bool {
    let align4 = |n: usize| n.div_ceil(4) * 4;
    while notes.len() >= 12 {
        let (Some(namesz), Some(descsz), Some(note_type)) =
            (u32_at(notes, 0), u32_at(notes, 4), u32_at(notes, 8))
        else {
            return false;
        };
        let name_end = 12 + namesz as usize;
        if notes.get(12..name_end) == Some(name) && note_type == kind {
            return true;
        }
        let next = 12 + align4(namesz as usize) + align4(descsz as usize);
        match notes.get(next..) {
            Some(rest) => notes = rest,
            None => return false,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake bzImage: `setup_sects` 3, protocol 2.15, payload of `payload` at offset 100.
    fn fake_bzimage(payload: &[u8]) -> Vec<u8> {
        let mut image = vec![0u8; 4 * 512 + 100];
        image[0x1f1] = 3;
        image[0x202..0x206].copy_from_slice(b"HdrS");
        image[0x206..0x208].copy_from_slice(&0x020fu16.to_le_bytes());
        image[0x248..0x24c].copy_from_slice(&100u32.to_le_bytes());
        image[0x24c..0x250].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        image.extend_from_slice(payload);
        image
    }

    #[test]
    fn finds_an_xz_payload() {
        let payload = [0xfd, b'7', b'z', b'X', b'Z', 0, 1, 2, 3];
        let image = fake_bzimage(&payload);
        let (range, compression) = bzimage_payload(&image).unwrap();
        assert_eq!(compression, Compression::Xz);
        assert_eq!(&image[range], &payload);
    }

    #[test]
    fn rejects_non_bzimages_and_bad_payloads() {
        assert_eq!(bzimage_payload(&[0; 100]), Err(PayloadError::NotBzImage));
        assert_eq!(bzimage_payload(&[0; 4096]), Err(PayloadError::NotBzImage));
        let mut image = fake_bzimage(&[1, 2, 3, 4]);
        assert_eq!(
            bzimage_payload(&image),
            Err(PayloadError::UnknownCompression)
        );
        image[0x24c..0x250].copy_from_slice(&1000u32.to_le_bytes());
        assert_eq!(bzimage_payload(&image), Err(PayloadError::OutOfBounds));
        image[0x206..0x208].copy_from_slice(&0x0206u16.to_le_bytes());
        assert_eq!(
            bzimage_payload(&image),
            Err(PayloadError::OldProtocol(0x206))
        );
    }

    #[test]
    fn recognises_compressors() {
        assert_eq!(
            Compression::from_magic(&[0x1f, 0x8b, 8]),
            Some(Compression::Gzip)
        );
        assert_eq!(
            Compression::from_magic(&[0x28, 0xb5, 0x2f, 0xfd]),
            Some(Compression::Zstd)
        );
        assert_eq!(Compression::from_magic(b"BZh"), None);
    }

    /// A minimal ELF64 with one PT_NOTE segment holding `notes`.
    fn fake_elf(notes: &[u8]) -> Vec<u8> {
        let mut elf = vec![0u8; 0x40 + 0x38];
        elf[..6].copy_from_slice(b"\x7fELF\x02\x01");
        elf[0x20..0x28].copy_from_slice(&0x40u64.to_le_bytes());
        elf[0x36..0x38].copy_from_slice(&0x38u16.to_le_bytes());
        elf[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        let ph = 0x40;
        elf[ph..ph + 4].copy_from_slice(&4u32.to_le_bytes());
        elf[ph + 8..ph + 16].copy_from_slice(&(0x78u64).to_le_bytes());
        elf[ph + 0x20..ph + 0x28].copy_from_slice(&(notes.len() as u64).to_le_bytes());
        elf.extend_from_slice(notes);
        elf
    }

    /// One ELF note.
    fn note(name: &[u8], kind: u32, desc: &[u8]) -> Vec<u8> {
        let mut n = Vec::new();
        n.extend_from_slice(&(name.len() as u32).to_le_bytes());
        n.extend_from_slice(&(desc.len() as u32).to_le_bytes());
        n.extend_from_slice(&kind.to_le_bytes());
        n.extend_from_slice(name);
        n.resize(n.len().div_ceil(4) * 4, 0);
        n.extend_from_slice(desc);
        n.resize(n.len().div_ceil(4) * 4, 0);
        n
    }

    #[test]
    fn finds_the_pvh_note_after_other_notes() {
        let mut notes = note(b"Xen\0", 6, b"linux\0");
        notes.extend(note(b"GNU\0", 18, &[0; 20]));
        assert!(!has_pvh_note(&fake_elf(&notes)));
        notes.extend(note(b"Xen\0", 18, &[0, 0, 0, 1]));
        assert!(has_pvh_note(&fake_elf(&notes)));
    }

    #[test]
    fn malformed_elves_have_no_note() {
        assert!(!has_pvh_note(b"\x7fELF"));
        assert!(!has_pvh_note(&[0; 200]));
        let mut elf = fake_elf(&note(b"Xen\0", 18, &[0; 4]));
        elf.truncate(0x80);
        assert!(!has_pvh_note(&elf));
    }
}
