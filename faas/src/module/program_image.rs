//! A program's image as it lies at the bottom of each of its μprocesses' areas.
//!
//! μFork (SOSP '25, §3.7) keeps everything a μprocess can point to in its area, its code and
//! statics included, so that `fork` relocates a pointer by adding one constant. A program's
//! image is therefore mapped at the start of every area of the program, split in two at the
//! first page that holds a writable byte:
//!
//! - the *shared* pages below it (headers, read-only data, code) hold no relocation (the
//!   validator puts every relocation target in a writable segment) and are the same at every
//!   base: every area maps the frames of the module's one image, read-only or read-execute;
//! - the *private* pages from it on (RELRO with the GOT and vtables, `.data`, `.bss`) are copied
//!   into each area and relocated for its base; their relocated words are the image's pointers,
//!   which the kernel records as precise tags.
//!
//! Unlike a function's shared image, a program may have writable statics: each μprocess has its
//! own copy. RELRO stays writable in the area (page rights come from the segment split only).

use super::load_plan::TlsTemplate;
use super::load_plan::{LoadPlan, PAGE_SIZE, Perms, Relocation};
use super::relocate::RelocateError;
use alloc::vec;
use alloc::vec::Vec;

/// How a program's image is laid out in an area, and the initial bytes of its private part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgramImage {
    /// The rights of each shared page, from the image base: execute (and read) for pages of an
    /// executable segment, read for the others.
    pub shared: Vec<Perms>,
    /// The private part's initial bytes, from [`ProgramImage::private_offset`], before
    /// relocation; the rest of the image up to [`ProgramImage::size`] starts zero.
    pub data: Vec<u8>,
    /// The relocations, all inside the private part.
    pub relocations: Vec<Relocation>,
    /// Bytes of address space the image takes (whole pages).
    pub size: u64,
    /// Its thread-local storage template (`PT_TLS`), whose initial bytes lie in the private
    /// part.
    pub tls: Option<TlsTemplate>,
}

impl ProgramImage {
    /// The image of the validated module `plan` read from `file`.
    pub fn new(plan: &LoadPlan, file: &[u8]) -> Result<ProgramImage, RelocateError> {
        let first_private = plan
            .segments
            .iter()
            .filter(|s| s.perms.write)
            .map(|s| s.vaddr & !(PAGE_SIZE - 1))
            .min()
            .unwrap_or(plan.image_size);
        let shared_pages = (first_private / PAGE_SIZE) as usize;
        let mut shared = vec![
            Perms {
                read: true,
                write: false,
                execute: false
            };
            shared_pages
        ];
        for s in plan.segments.iter().filter(|s| s.perms.execute) {
            let pages = s.page_range();
            for p in (pages.start / PAGE_SIZE)..(pages.end / PAGE_SIZE) {
                if let Some(perms) = shared.get_mut(p as usize) {
                    perms.execute = true;
                }
            }
        }
        // The private part's file-backed bytes, and room for every relocation target.
        let end = plan
            .segments
            .iter()
            .filter(|s| s.vaddr >= first_private)
            .map(|s| s.vaddr + s.file_size)
            .chain(plan.relocations.iter().map(|r| r.offset.saturating_add(8)))
            .max()
            .unwrap_or(first_private)
            .max(first_private);
        let size = usize::try_from(plan.image_size).map_err(|_| RelocateError::ImageTooSmall)?;
        let mut image = vec![0u8; size];
        plan.populate(file, &mut image)?;
        let data = usize::try_from(end)
            .ok()
            .and_then(|end| image.get(first_private as usize..end))
            .ok_or(RelocateError::OutOfBounds {
                offset: end.saturating_sub(8),
            })?
            .to_vec();
        if let Some(r) = plan.relocations.iter().find(|r| r.offset < first_private) {
            return Err(RelocateError::OutOfBounds { offset: r.offset });
        }
        Ok(ProgramImage {
            shared,
            data,
            relocations: plan.relocations.clone(),
            size: plan.image_size,
            tls: plan.tls,
        })
    }

    /// The initial bytes of the thread-local storage block (its first `file_size` bytes; the
    /// rest is zero) in `relocated`, the private part as [`ProgramImage::relocated_data`] gave
    /// it; `None` without a template or when they lie outside the private part.
    pub fn tls_init<'a>(&self, relocated: &'a [u8]) -> Option<&'a [u8]> {
        let tls = self.tls?;
        if tls.file_size == 0 {
            return Some(&[]);
        }
        let start = usize::try_from(tls.vaddr.checked_sub(self.private_offset())?).ok()?;
        relocated.get(start..start + usize::try_from(tls.file_size).ok()?)
    }

    /// Offset from the image base of the first private byte (a page boundary).
    pub fn private_offset(&self) -> u64 {
        self.shared.len() as u64 * PAGE_SIZE
    }

    /// The private part's initial bytes relocated for an image at `base`.
    pub fn relocated_data(&self, base: u64) -> Result<Vec<u8>, RelocateError> {
        let mut data = self.data.clone();
        let start = self.private_offset();
        for r in &self.relocations {
            let value = base
                .checked_add_signed(r.addend)
                .ok_or(RelocateError::Overflow { offset: r.offset })?;
            let at = (r.offset - start) as usize;
            data.get_mut(at..at + 8)
                .ok_or(RelocateError::OutOfBounds { offset: r.offset })?
                .copy_from_slice(&value.to_le_bytes());
        }
        Ok(data)
    }

    /// Offsets from the image base of the words relocation fills: the pointers the loader
    /// writes (GOT entries, vtables, pointer tables).
    pub fn pointer_offsets(&self) -> impl Iterator<Item = u64> + '_ {
        self.relocations.iter().map(|r| r.offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::module::{ModuleLimits, validate};

    fn fixture() -> (&'static [u8], LoadPlan) {
        let file = include_bytes!("../../tests/fixtures/hello-rela.elf");
        (file, validate(file, &ModuleLimits::default()).unwrap())
    }

    #[test]
    fn shared_pages_end_where_writable_data_starts() {
        let (file, plan) = fixture();
        let image = ProgramImage::new(&plan, file).unwrap();
        let rw = plan.segments.iter().find(|s| s.perms.write).unwrap();
        assert_eq!(image.private_offset(), rw.vaddr & !(PAGE_SIZE - 1));
        assert!(image.shared.iter().all(|p| p.read && !p.write));
        // The entry lies in an executable shared page.
        assert!(image.shared[(plan.entry / PAGE_SIZE) as usize].execute);
        // Pages of read-only segments are not executable.
        let ro = plan.segments.iter().find(|s| !s.perms.execute).unwrap();
        assert!(!image.shared[(ro.vaddr / PAGE_SIZE) as usize].execute);
        assert_eq!(image.size, plan.image_size);
    }

    #[test]
    fn relocation_gives_the_same_bytes_as_the_whole_image_loader() {
        let (file, plan) = fixture();
        let image = ProgramImage::new(&plan, file).unwrap();
        assert!(!image.relocations.is_empty());
        let base = 0x4000_0000_0000;
        let mut whole = vec![0u8; plan.image_size as usize];
        plan.populate(file, &mut whole).unwrap();
        crate::module::apply_relocations(&mut whole, base, &plan).unwrap();
        let data = image.relocated_data(base).unwrap();
        let start = image.private_offset() as usize;
        assert_eq!(&whole[start..start + data.len()], &data[..]);
        // The rest of the image is zero (.bss).
        assert!(whole[start + data.len()..].iter().all(|&b| b == 0));
        // Every pointer the loader wrote points into the image.
        for off in image.pointer_offsets() {
            let at = off as usize;
            let v = u64::from_le_bytes(whole[at..at + 8].try_into().unwrap());
            assert!(
                (base..base + plan.image_size).contains(&v),
                "{off:#x}: {v:#x}"
            );
        }
    }

    #[test]
    fn a_relocation_outside_the_private_part_is_refused() {
        let (file, mut plan) = fixture();
        plan.relocations.push(Relocation {
            offset: 0,
            addend: 0,
        });
        assert_eq!(
            ProgramImage::new(&plan, file),
            Err(RelocateError::OutOfBounds { offset: 0 })
        );
    }
}
