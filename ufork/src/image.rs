//! A μprocess's checkpoint image: what besides its pages a clone needs to run it anywhere
//! (CXLfork, ASPLOS '25, over μFork's relocation).
//!
//! The image names the program (and a digest of its module, so a clone never runs another
//! version's pages), the area the pages were taken from (base and length, so the clone knows
//! what to relocate and by how much), its registers, its precise tags as area-relative slots,
//! the descriptors that can travel (the console), its copy mode and isolation level, and which
//! page of the area each checkpoint page is, and which pages it had accessed lately. [`ProcessImage::encode`] and
//! [`ProcessImage::decode`] are exact inverses; decoding checks every field against the others
//! and refuses what does not hold together ([`ImageError`]), never panics.
//!
//! Format (little-endian): magic `FJUPROC1`, then the fields in the order of [`ProcessImage`];
//! variable-length lists carry their length first.

use crate::area::Area;
use crate::copy_mode::{CopyMode, IsolationLevel};
use alloc::string::String;
use alloc::vec::Vec;

/// The image's first eight bytes.
pub const MAGIC: [u8; 8] = *b"FJUPROC1";
/// Longest program name an image holds.
pub const MAX_PROGRAM: usize = 64;
/// Registers an image holds: `rip`, `rsp`, `rflags`, the thread pointer, then the fifteen
/// general registers in [`crate::Gpr::ALL`] order.
pub const REGISTERS: usize = 19;
/// Most descriptors an image records.
pub const MAX_FDS: usize = 1024;

/// A μprocess as a checkpoint describes it (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessImage {
    /// The program it runs.
    pub program: String,
    /// A digest of the program's module file: a clone needs the same module.
    pub digest: u64,
    /// Where the module's code lies when it is outside the area (a function's code VMA, which
    /// pointers in its pages may name: a clone needs its code at the same address); 0 when
    /// the code is in the area (a program's).
    pub code_base: u64,
    /// Base of the area its pages were taken from.
    pub area_base: u64,
    /// Length of its area VMA in bytes.
    pub area_len: u64,
    /// Pages at the start of the area shared with every μprocess of the program (its code):
    /// never in a checkpoint, the clone's node maps its own.
    pub shared_pages: u32,
    /// `rip`, `rsp`, `rflags`, thread pointer, then the general registers ([`REGISTERS`]).
    pub registers: [u64; REGISTERS],
    /// Its default copy mode.
    pub mode: CopyMode,
    /// Its isolation level.
    pub isolation: IsolationLevel,
    /// The descriptors open on the console (the only kind that travels), ascending.
    pub console_fds: Vec<u32>,
    /// Its precise tags: slot indices (byte offset / 8) in the area, ascending.
    pub tags: Vec<u32>,
    /// For each checkpoint page in order, the area page it is, ascending.
    pub pages: Vec<u32>,
    /// The area pages the μprocess accessed since its accessed bits were last reset,
    /// ascending (what a hybrid-tiered clone copies on first access).
    pub hot: Vec<u32>,
}

/// Why bytes are not a valid image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageError {
    /// It ends before its fields do.
    Truncated,
    /// Bytes after the last field.
    TrailingBytes,
    /// Not an image (or one of another format version).
    BadMagic,
    /// The program name is empty, too long or not UTF-8.
    BadProgram,
    /// The area is not a valid one (size class, alignment), or its shared pages exceed it.
    BadArea,
    /// A copy mode or isolation level this version does not know, or a pair it forbids.
    BadMode,
    /// A list is too long, not ascending, or names a slot, page or descriptor outside the area.
    BadList,
}

impl ProcessImage {
    /// The area the pages were taken from, as a size class.
    pub fn area(&self) -> Result<Area, ImageError> {
        let size = self
            .area_len
            .checked_next_power_of_two()
            .ok_or(ImageError::BadArea)?;
        Area::new(self.area_base, size.max(crate::PAGE_SIZE)).map_err(|_| ImageError::BadArea)
    }

    /// Pages of the area VMA.
    pub fn area_pages(&self) -> u64 {
        self.area_len.div_ceil(crate::PAGE_SIZE)
    }

    /// The image as bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            128 + self.program.len()
                + 4 * (self.console_fds.len() + self.tags.len() + self.pages.len()),
        );
        out.extend_from_slice(&MAGIC);
        out.push(self.program.len() as u8);
        out.extend_from_slice(self.program.as_bytes());
        for v in [self.digest, self.code_base, self.area_base, self.area_len] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.shared_pages.to_le_bytes());
        for r in self.registers {
            out.extend_from_slice(&r.to_le_bytes());
        }
        out.push(self.mode.raw() as u8);
        out.push(self.isolation.raw() as u8);
        for list in [&self.console_fds, &self.tags, &self.pages, &self.hot] {
            out.extend_from_slice(&(list.len() as u32).to_le_bytes());
            for v in list.iter() {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        out
    }

    /// Reads and checks an image (see [`ImageError`]).
    pub fn decode(bytes: &[u8]) -> Result<ProcessImage, ImageError> {
        let mut r = Cursor { bytes, at: 0 };
        if r.take(8)? != MAGIC {
            return Err(ImageError::BadMagic);
        }
        let name_len = usize::from(r.u8()?);
        let name = r.take(name_len)?;
        let program = core::str::from_utf8(name)
            .ok()
            .filter(|n| !n.is_empty() && n.len() <= MAX_PROGRAM)
            .ok_or(ImageError::BadProgram)?;
        let (digest, code_base) = (r.u64()?, r.u64()?);
        let (area_base, area_len) = (r.u64()?, r.u64()?);
        let shared_pages = r.u32()?;
        let mut registers = [0u64; REGISTERS];
        for reg in &mut registers {
            *reg = r.u64()?;
        }
        let mode = CopyMode::from_raw(u64::from(r.u8()?)).map_err(|_| ImageError::BadMode)?;
        let isolation =
            IsolationLevel::from_raw(u64::from(r.u8()?)).map_err(|_| ImageError::BadMode)?;
        mode.check(isolation).map_err(|_| ImageError::BadMode)?;
        let mut image = ProcessImage {
            program: String::from(program),
            digest,
            code_base,
            area_base,
            area_len,
            shared_pages,
            registers,
            mode,
            isolation,
            console_fds: Vec::new(),
            tags: Vec::new(),
            pages: Vec::new(),
            hot: Vec::new(),
        };
        let area = image.area()?;
        let pages = image.area_pages();
        if area_len == 0 || area_len > area.size() || u64::from(shared_pages) > pages {
            return Err(ImageError::BadArea);
        }
        image.console_fds = r.list(MAX_FDS as u64)?;
        image.tags = r.list(area_len / 8)?;
        image.pages = r.list(pages)?;
        image.hot = r.list(pages)?;
        if image.pages.first().is_some_and(|&p| p < shared_pages) {
            return Err(ImageError::BadList);
        }
        if r.at != bytes.len() {
            return Err(ImageError::TrailingBytes);
        }
        Ok(image)
    }
}

/// Reads fields in order.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], ImageError> {
        let end = self.at.checked_add(n).ok_or(ImageError::Truncated)?;
        let s = self.bytes.get(self.at..end).ok_or(ImageError::Truncated)?;
        self.at = end;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8, ImageError> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, ImageError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64, ImageError> {
        let b = self.take(8)?;
        let mut w = [0u8; 8];
        w.copy_from_slice(b);
        Ok(u64::from_le_bytes(w))
    }

    /// A strictly ascending list of values below `bound`.
    fn list(&mut self, bound: u64) -> Result<Vec<u32>, ImageError> {
        let n = u64::from(self.u32()?);
        if n > bound {
            return Err(ImageError::BadList);
        }
        // Every value takes 4 bytes: a length the bytes cannot hold is truncated, not a
        // reason to allocate.
        if n * 4 > (self.bytes.len() - self.at) as u64 {
            return Err(ImageError::Truncated);
        }
        let mut out = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let v = self.u32()?;
            if u64::from(v) >= bound || out.last().is_some_and(|&last| last >= v) {
                return Err(ImageError::BadList);
            }
            out.push(v);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ProcessImage {
        ProcessImage {
            program: String::from("ticker"),
            digest: 0x1234_5678_9abc_def0,
            code_base: 0,
            area_base: 0x4000_0000,
            area_len: 0x5_3000,
            shared_pages: 3,
            registers: core::array::from_fn(|i| 0x4000_0000 + i as u64 * 8),
            mode: CopyMode::CopyOnPointerAccess,
            isolation: IsolationLevel::Full,
            console_fds: alloc::vec![0, 1, 2],
            tags: alloc::vec![0, 5, 900, 10_000],
            pages: alloc::vec![3, 4, 80],
            hot: alloc::vec![4],
        }
    }

    #[test]
    fn decodes_what_it_encodes() {
        let i = sample();
        assert_eq!(ProcessImage::decode(&i.encode()), Ok(i.clone()));
        assert_eq!(i.area().unwrap().size(), 0x8_0000);
        assert_eq!(i.area_pages(), 0x53);
        let empty = ProcessImage {
            console_fds: Vec::new(),
            tags: Vec::new(),
            pages: Vec::new(),
            hot: Vec::new(),
            ..i
        };
        assert_eq!(ProcessImage::decode(&empty.encode()), Ok(empty));
    }

    #[test]
    fn every_truncation_is_refused() {
        let bytes = sample().encode();
        for n in 0..bytes.len() {
            assert!(
                ProcessImage::decode(&bytes[..n]).is_err(),
                "prefix of {n} bytes"
            );
        }
        let mut long = bytes.clone();
        long.push(0);
        assert_eq!(ProcessImage::decode(&long), Err(ImageError::TrailingBytes));
    }

    #[test]
    fn refuses_what_does_not_hold_together() {
        let check = |f: &dyn Fn(&mut ProcessImage), e| {
            let mut i = sample();
            f(&mut i);
            assert_eq!(ProcessImage::decode(&i.encode()), Err(e));
        };
        check(&|i| i.program.clear(), ImageError::BadProgram);
        check(&|i| i.area_base = 0x4000_1000, ImageError::BadArea);
        check(&|i| i.area_len = 0, ImageError::BadArea);
        check(&|i| i.shared_pages = 0x54, ImageError::BadArea);
        check(&|i| i.pages = alloc::vec![4, 3], ImageError::BadList);
        check(&|i| i.pages = alloc::vec![4, 4], ImageError::BadList);
        check(&|i| i.pages = alloc::vec![2, 4], ImageError::BadList);
        check(&|i| i.pages = alloc::vec![0x53], ImageError::BadList);
        check(&|i| i.tags = alloc::vec![0x5_3000 / 8], ImageError::BadList);
        check(&|i| i.hot = alloc::vec![0x53], ImageError::BadList);
        check(
            &|i| {
                i.mode = CopyMode::CopyOnWrite;
                i.isolation = IsolationLevel::Full;
            },
            ImageError::BadMode,
        );
        let mut bytes = sample().encode();
        bytes[0] ^= 1;
        assert_eq!(ProcessImage::decode(&bytes), Err(ImageError::BadMagic));
    }

    #[test]
    fn a_huge_list_length_is_refused_without_allocating() {
        let mut bytes = sample().encode();
        // The page list's length: the 4 bytes before its 3 entries (and the hot list's 1).
        let at = bytes.len() - 4 * 3 - 4 - 8;
        bytes[at..at + 4].copy_from_slice(&0x52u32.to_le_bytes());
        assert_eq!(ProcessImage::decode(&bytes), Err(ImageError::Truncated));
        bytes[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(ProcessImage::decode(&bytes), Err(ImageError::BadList));
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let good = sample().encode();
        for round in 0..20_000 {
            let mut b = good.clone();
            for _ in 0..(round % 6) + 1 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let at = (x as usize) % b.len();
                b[at] = (x >> 32) as u8;
            }
            let _ = ProcessImage::decode(&b);
        }
    }
}
