//! Module validation: from the bytes of an ELF file to a [`LoadPlan`], or a [`ModuleError`].
//!
//! What is accepted is what `rustc --target x86_64-unknown-none` links by default: an `ET_DYN`
//! static PIE whose only dynamic relocations are `R_X86_64_RELATIVE` (in a `DT_RELA` table, or
//! packed in `DT_RELR` with `-z pack-relative-relocs`). Checked: identification, header sizes,
//! every table inside the file, segment sizes/alignment/overlap, W^X, size limits, no
//! interpreter/shared libraries/TLS/text relocations, relocation targets inside writable
//! segments, the entry inside an executable segment, and the manifest.
//!
//! Addresses in the plan are offsets from the image base (the module is linked at 0), so the same
//! plan serves any load address.

use super::elf::*;
use super::error::{FilePart, ModuleError};
use super::manifest::Manifest;
use alloc::vec::Vec;
use core::ops::Range;

/// Page size of the page tables that enforce segment permissions.
pub const PAGE_SIZE: u64 = 4096;
/// Name of the manifest section.
pub const MANIFEST_SECTION: &[u8] = b".fjord_manifest";

/// Limits applied while validating a module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModuleLimits {
    /// Largest file and largest memory image, in bytes.
    pub max_image_bytes: u64,
    /// Most program headers.
    pub max_program_headers: usize,
    /// Most relocations.
    pub max_relocations: usize,
    /// Largest manifest section, in bytes.
    pub max_manifest_bytes: u64,
}

impl Default for ModuleLimits {
    /// 64 MiB images, 32 program headers, 1 Mi relocations, 4 KiB manifests.
    fn default() -> Self {
        ModuleLimits {
            max_image_bytes: 64 << 20,
            max_program_headers: 32,
            max_relocations: 1 << 20,
            max_manifest_bytes: 4096,
        }
    }
}

/// Access permissions of a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Perms {
    /// Readable.
    pub read: bool,
    /// Writable.
    pub write: bool,
    /// Executable.
    pub execute: bool,
}

impl Perms {
    fn from_flags(flags: u32) -> Self {
        Perms {
            read: flags & PF_R != 0,
            write: flags & PF_W != 0,
            execute: flags & PF_X != 0,
        }
    }
}

/// One region to map: `mem_size` bytes at `vaddr` (from the image base), the first `file_size`
/// copied from the file at `file_offset`, the rest zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentPlan {
    /// Offset of the segment from the image base.
    pub vaddr: u64,
    /// Bytes in memory.
    pub mem_size: u64,
    /// Where its contents start in the file.
    pub file_offset: u64,
    /// Bytes taken from the file (the rest is zero-filled).
    pub file_size: u64,
    /// Permissions once loaded (relocation happens before they are applied).
    pub perms: Perms,
}

impl SegmentPlan {
    /// The segment's memory range as offsets from the image base.
    pub fn range(&self) -> Range<u64> {
        self.vaddr..self.vaddr + self.mem_size
    }

    /// The range of whole pages it occupies.
    pub fn page_range(&self) -> Range<u64> {
        page_down(self.vaddr)..page_up(self.vaddr + self.mem_size)
    }
}

/// A relative relocation: write the 64-bit value `base + addend` at `base + offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Relocation {
    /// Offset of the 8-byte target from the image base.
    pub offset: u64,
    /// Value relative to the image base.
    pub addend: i64,
}

/// Everything needed to load a validated module at any base address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadPlan {
    /// Segments in increasing address order, never sharing a page.
    pub segments: Vec<SegmentPlan>,
    /// Relative relocations to apply after copying.
    pub relocations: Vec<Relocation>,
    /// Entry point offset from the image base (manifest override or `e_entry`).
    pub entry: u64,
    /// Bytes of address space from the base to the end of the last segment, page-rounded.
    pub image_size: u64,
    /// Range to make read-only after relocation (`PT_GNU_RELRO`), if any.
    pub relro: Option<Range<u64>>,
    /// A program's thread-local storage template (`PT_TLS`), if it has one.
    pub tls: Option<TlsTemplate>,
    /// The module's manifest.
    pub manifest: Manifest,
}

/// Largest thread-local storage block a program may ask for.
pub const MAX_TLS_BYTES: u64 = 64 << 10;
/// Largest alignment of a program's thread-local storage block: that of the thread pointer
/// (the heap header, 256-byte aligned).
pub const MAX_TLS_ALIGN: u64 = 256;

/// A program's `PT_TLS`: the template each μprocess's thread-local storage block starts as (its
/// first `file_size` bytes from the image, the rest zero), laid out below the thread pointer
/// as the x86-64 ABI's variant II says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TlsTemplate {
    /// Offset of the initial bytes from the image base (`.tdata`).
    pub vaddr: u64,
    /// Bytes with an initial value.
    pub file_size: u64,
    /// Bytes of the block (`.tdata` and `.tbss`).
    pub mem_size: u64,
    /// Alignment of the block (a power of two).
    pub align: u64,
}

impl TlsTemplate {
    /// Bytes from the block's start to the thread pointer: the size rounded up to the
    /// alignment, as the linker computed every `@tpoff` offset.
    pub const fn span(&self) -> u64 {
        self.mem_size.next_multiple_of(self.align)
    }
}

fn page_down(x: u64) -> u64 {
    x & !(PAGE_SIZE - 1)
}

fn page_up(x: u64) -> u64 {
    x.saturating_add(PAGE_SIZE - 1) & !(PAGE_SIZE - 1)
}

fn checked_end(start: u64, len: u64) -> Result<u64, ModuleError> {
    start.checked_add(len).ok_or(ModuleError::AddressOverflow)
}

/// Validates the ELF header and returns it.
fn check_header(file: &[u8]) -> Result<FileHeader, ModuleError> {
    if file.get(..4).is_none_or(|m| m != MAGIC) {
        return Err(ModuleError::NotElf);
    }
    let h = FileHeader::read(Bytes(file)).ok_or(ModuleError::Truncated(FilePart::Header))?;
    if h.class != CLASS_64 {
        return Err(ModuleError::WrongClass);
    }
    if h.data != DATA_LE {
        return Err(ModuleError::WrongEndianness);
    }
    if file[6] != 1 || h.version != 1 {
        return Err(ModuleError::BadVersion);
    }
    match h.kind {
        ET_DYN => {}
        ET_EXEC => return Err(ModuleError::NotPositionIndependent),
        _ => return Err(ModuleError::WrongType),
    }
    if h.machine != EM_X86_64 {
        return Err(ModuleError::WrongMachine);
    }
    if usize::from(h.ehsize) != EHDR_SIZE || usize::from(h.phentsize) != PHDR_SIZE {
        return Err(ModuleError::BadHeaderSize);
    }
    if h.shnum != 0 && usize::from(h.shentsize) != SHDR_SIZE {
        return Err(ModuleError::BadHeaderSize);
    }
    Ok(h)
}

/// Program headers sorted into the parts the loader cares about.
struct Segments {
    loads: Vec<SegmentPlan>,
    dynamic: Option<ProgramHeader>,
    relro: Option<Range<u64>>,
    tls: Option<TlsTemplate>,
}

fn check_segments(
    file: &[u8],
    h: &FileHeader,
    limits: &ModuleLimits,
) -> Result<Segments, ModuleError> {
    if h.phnum == 0 {
        return Err(ModuleError::NoLoadSegments);
    }
    if usize::from(h.phnum) > limits.max_program_headers {
        return Err(ModuleError::TooManySegments);
    }
    let table_len = u64::from(h.phnum) * PHDR_SIZE as u64;
    Bytes(file)
        .slice(h.phoff, table_len)
        .ok_or(ModuleError::Truncated(FilePart::ProgramHeaders))?;
    let mut out = Segments {
        loads: Vec::new(),
        dynamic: None,
        relro: None,
        tls: None,
    };
    for i in 0..u64::from(h.phnum) {
        let ph = ProgramHeader::read(Bytes(file), h.phoff + i * PHDR_SIZE as u64)
            .ok_or(ModuleError::Truncated(FilePart::ProgramHeaders))?;
        match ph.kind {
            PT_INTERP => return Err(ModuleError::InterpreterRequested),
            PT_TLS if out.tls.is_some() => return Err(ModuleError::BadTls),
            PT_TLS => {
                let align = ph.align.max(1);
                if ph.filesz > ph.memsz
                    || ph.memsz > MAX_TLS_BYTES
                    || !align.is_power_of_two()
                    || align > MAX_TLS_ALIGN
                {
                    return Err(ModuleError::BadTls);
                }
                out.tls = Some(TlsTemplate {
                    vaddr: ph.vaddr,
                    file_size: ph.filesz,
                    mem_size: ph.memsz,
                    align,
                });
            }
            PT_DYNAMIC if out.dynamic.is_some() => return Err(ModuleError::MultipleDynamic),
            PT_DYNAMIC => out.dynamic = Some(ph),
            PT_GNU_RELRO => out.relro = Some(ph.vaddr..checked_end(ph.vaddr, ph.memsz)?),
            PT_LOAD => {
                if ph.filesz > ph.memsz {
                    return Err(ModuleError::FileSizeExceedsMemSize);
                }
                Bytes(file)
                    .slice(ph.offset, ph.filesz)
                    .ok_or(ModuleError::Truncated(FilePart::Segment))?;
                // The end, rounded up to a page, must not overflow either.
                checked_end(ph.vaddr, ph.memsz)?
                    .checked_add(PAGE_SIZE)
                    .ok_or(ModuleError::AddressOverflow)?;
                if ph.align > 1
                    && (!ph.align.is_power_of_two() || ph.vaddr % ph.align != ph.offset % ph.align)
                {
                    return Err(ModuleError::BadAlignment);
                }
                if ph.flags & PF_W != 0 && ph.flags & PF_X != 0 {
                    return Err(ModuleError::WritableExecutable);
                }
                if ph.memsz > 0 {
                    out.loads.push(SegmentPlan {
                        vaddr: ph.vaddr,
                        mem_size: ph.memsz,
                        file_offset: ph.offset,
                        file_size: ph.filesz,
                        perms: Perms::from_flags(ph.flags),
                    });
                }
            }
            _ => {}
        }
    }
    if out.loads.is_empty() {
        return Err(ModuleError::NoLoadSegments);
    }
    out.loads.sort_by_key(|s| s.vaddr);
    for pair in out.loads.windows(2) {
        if pair[0].page_range().end > pair[1].page_range().start {
            return Err(ModuleError::SegmentsOverlap);
        }
    }
    if let Some(tls) = &out.tls {
        let end = checked_end(tls.vaddr, tls.file_size)?;
        let inside = out
            .loads
            .iter()
            .any(|s| s.perms.write && s.vaddr <= tls.vaddr && end <= s.vaddr + s.file_size);
        if tls.file_size > 0 && !inside {
            return Err(ModuleError::BadTls);
        }
    }
    if let Some(relro) = &out.relro
        && !out
            .loads
            .iter()
            .any(|s| s.perms.write && s.vaddr <= relro.start && relro.end <= s.range().end)
    {
        return Err(ModuleError::RelroOutsideSegment);
    }
    Ok(out)
}

/// Translates a virtual range to the file bytes backing it (inside one segment's file part).
fn file_bytes<'a>(
    file: &'a [u8],
    loads: &[SegmentPlan],
    vaddr: u64,
    len: u64,
    part: FilePart,
) -> Result<&'a [u8], ModuleError> {
    let end = vaddr.checked_add(len).ok_or(ModuleError::Truncated(part))?;
    let seg = loads
        .iter()
        .find(|s| s.vaddr <= vaddr && end <= s.vaddr + s.file_size)
        .ok_or(ModuleError::Truncated(part))?;
    Bytes(file)
        .slice(seg.file_offset + (vaddr - seg.vaddr), len)
        .ok_or(ModuleError::Truncated(part))
}

/// The dynamic-array values the loader needs.
#[derive(Default)]
struct DynamicInfo {
    rela: Option<u64>,
    relasz: u64,
    relaent: Option<u64>,
    relr: Option<u64>,
    relrsz: u64,
    relrent: Option<u64>,
}

fn read_dynamic(file: &[u8], dynamic: &ProgramHeader) -> Result<DynamicInfo, ModuleError> {
    let table = Bytes(file)
        .slice(dynamic.offset, dynamic.filesz)
        .ok_or(ModuleError::Truncated(FilePart::Dynamic))?;
    let mut info = DynamicInfo::default();
    for entry in table.chunks_exact(16) {
        let b = Bytes(entry);
        let (tag, val) = (b.u64(0).unwrap_or(0), b.u64(8).unwrap_or(0));
        match tag {
            DT_NULL => break,
            DT_NEEDED => return Err(ModuleError::NeedsSharedLibraries),
            DT_TEXTREL => return Err(ModuleError::TextRelocations),
            DT_FLAGS if val & DF_TEXTREL != 0 => return Err(ModuleError::TextRelocations),
            DT_REL | DT_JMPREL => return Err(ModuleError::UnsupportedRelocationTable),
            DT_RELSZ if val != 0 => return Err(ModuleError::UnsupportedRelocationTable),
            DT_PLTRELSZ if val != 0 => return Err(ModuleError::UnsupportedRelocationTable),
            DT_RELA => info.rela = Some(val),
            DT_RELASZ => info.relasz = val,
            DT_RELAENT => info.relaent = Some(val),
            DT_RELR => info.relr = Some(val),
            DT_RELRSZ => info.relrsz = val,
            DT_RELRENT => info.relrent = Some(val),
            _ => {}
        }
    }
    Ok(info)
}

/// Checks that an 8-byte relocation target lies in a writable segment.
fn check_target(loads: &[SegmentPlan], offset: u64) -> Result<(), ModuleError> {
    let end = offset
        .checked_add(8)
        .ok_or(ModuleError::RelocationOutOfBounds)?;
    if loads
        .iter()
        .any(|s| s.perms.write && s.vaddr <= offset && end <= s.vaddr + s.mem_size)
    {
        Ok(())
    } else {
        Err(ModuleError::RelocationOutOfBounds)
    }
}

/// Where relocations go and what bounds them.
struct RelocContext<'a> {
    file: &'a [u8],
    loads: &'a [SegmentPlan],
    image_size: u64,
    limits: &'a ModuleLimits,
}

fn push_reloc(
    cx: &RelocContext<'_>,
    out: &mut Vec<Relocation>,
    offset: u64,
    addend: u64,
) -> Result<(), ModuleError> {
    check_target(cx.loads, offset)?;
    // A static PIE's pointers point into its own image (one past the end included).
    if addend > cx.image_size {
        return Err(ModuleError::AddendOutOfImage);
    }
    let r = Relocation {
        offset,
        addend: addend as i64,
    };
    if out.len() >= cx.limits.max_relocations {
        return Err(ModuleError::TooManyRelocations);
    }
    out.push(r);
    Ok(())
}

fn read_relocations(
    cx: &RelocContext<'_>,
    info: &DynamicInfo,
) -> Result<Vec<Relocation>, ModuleError> {
    let (file, loads) = (cx.file, cx.loads);
    let mut out = Vec::new();
    if let Some(rela) = info.rela {
        if info.relaent.unwrap_or(RELA_SIZE as u64) != RELA_SIZE as u64
            || !info.relasz.is_multiple_of(RELA_SIZE as u64)
        {
            return Err(ModuleError::BadRelocationTable);
        }
        let table = file_bytes(file, loads, rela, info.relasz, FilePart::Relocations)?;
        for e in table.chunks_exact(RELA_SIZE) {
            let b = Bytes(e);
            let (offset, r_info, addend) = (
                b.u64(0).unwrap_or(0),
                b.u64(8).unwrap_or(0),
                b.u64(16).unwrap_or(0),
            );
            match (r_info & 0xffff_ffff) as u32 {
                R_X86_64_NONE => {}
                R_X86_64_RELATIVE => push_reloc(cx, &mut out, offset, addend)?,
                other => return Err(ModuleError::UnsupportedRelocation(other)),
            }
        }
    } else if info.relasz != 0 {
        return Err(ModuleError::BadRelocationTable);
    }
    if let Some(relr) = info.relr {
        if info.relrent.unwrap_or(8) != 8 || !info.relrsz.is_multiple_of(8) {
            return Err(ModuleError::BadRelocationTable);
        }
        let table = file_bytes(file, loads, relr, info.relrsz, FilePart::Relocations)?;
        // RELR: an even word is an address to relocate and starts a run; an odd word is a bitmap
        // of the 63 words following the run's current position.
        let mut next: Option<u64> = None;
        for w in table.chunks_exact(8) {
            let word = Bytes(w).u64(0).unwrap_or(0);
            if word & 1 == 0 {
                push_relr(cx, &mut out, word)?;
                next = Some(
                    word.checked_add(8)
                        .ok_or(ModuleError::RelocationOutOfBounds)?,
                );
            } else {
                let base = next.ok_or(ModuleError::BadRelocationTable)?;
                for bit in 1..64 {
                    if (word >> bit) & 1 != 0 {
                        let off = base
                            .checked_add((bit - 1) * 8)
                            .ok_or(ModuleError::RelocationOutOfBounds)?;
                        push_relr(cx, &mut out, off)?;
                    }
                }
                next = Some(
                    base.checked_add(63 * 8)
                        .ok_or(ModuleError::RelocationOutOfBounds)?,
                );
            }
        }
    } else if info.relrsz != 0 {
        return Err(ModuleError::BadRelocationTable);
    }
    Ok(out)
}

/// A RELR entry: the addend is the word already stored at the target (zero in `.bss`).
fn push_relr(
    cx: &RelocContext<'_>,
    out: &mut Vec<Relocation>,
    offset: u64,
) -> Result<(), ModuleError> {
    check_target(cx.loads, offset)?;
    let addend = file_bytes(cx.file, cx.loads, offset, 8, FilePart::Relocations)
        .ok()
        .and_then(|b| Bytes(b).u64(0))
        .unwrap_or(0);
    push_reloc(cx, out, offset, addend)
}

fn find_manifest(
    file: &[u8],
    h: &FileHeader,
    limits: &ModuleLimits,
) -> Result<Manifest, ModuleError> {
    if h.shnum == 0 {
        return Err(ModuleError::MissingManifest);
    }
    let b = Bytes(file);
    let table_len = u64::from(h.shnum) * SHDR_SIZE as u64;
    b.slice(h.shoff, table_len)
        .ok_or(ModuleError::Truncated(FilePart::SectionHeaders))?;
    let section = |i: u16| {
        SectionHeader::read(b, h.shoff + u64::from(i) * SHDR_SIZE as u64)
            .ok_or(ModuleError::Truncated(FilePart::SectionHeaders))
    };
    if h.shstrndx >= h.shnum {
        return Err(ModuleError::Truncated(FilePart::SectionNames));
    }
    let names = section(h.shstrndx)?;
    let names = b
        .slice(names.offset, names.size)
        .ok_or(ModuleError::Truncated(FilePart::SectionNames))?;
    let mut found = None;
    for i in 0..h.shnum {
        let s = section(i)?;
        let name = names
            .get(s.name as usize..)
            .ok_or(ModuleError::Truncated(FilePart::SectionNames))?;
        let is_manifest = name
            .strip_prefix(MANIFEST_SECTION)
            .is_some_and(|rest| rest.first() == Some(&0));
        if is_manifest {
            if found.is_some() {
                return Err(ModuleError::DuplicateManifest);
            }
            found = Some(s);
        }
    }
    let s = found.ok_or(ModuleError::MissingManifest)?;
    if s.kind == SHT_NOBITS {
        return Err(ModuleError::Truncated(FilePart::Manifest));
    }
    if s.size > limits.max_manifest_bytes {
        return Err(ModuleError::ManifestTooLarge);
    }
    let bytes = b
        .slice(s.offset, s.size)
        .ok_or(ModuleError::Truncated(FilePart::Manifest))?;
    Manifest::parse(bytes).map_err(ModuleError::Manifest)
}

/// Validates a function module and computes its load plan.
pub fn validate(file: &[u8], limits: &ModuleLimits) -> Result<LoadPlan, ModuleError> {
    let h = check_header(file)?;
    if file.len() as u64 > limits.max_image_bytes {
        return Err(ModuleError::ImageTooLarge);
    }
    let segs = check_segments(file, &h, limits)?;
    let image_size = segs
        .loads
        .iter()
        .map(|s| s.page_range().end)
        .max()
        .unwrap_or(0);
    if image_size > limits.max_image_bytes {
        return Err(ModuleError::ImageTooLarge);
    }
    let relocations = match &segs.dynamic {
        Some(d) => {
            let cx = RelocContext {
                file,
                loads: &segs.loads,
                image_size,
                limits,
            };
            read_relocations(&cx, &read_dynamic(file, d)?)?
        }
        None => Vec::new(),
    };
    let manifest = find_manifest(file, &h, limits)?;
    if segs.tls.is_some() && manifest.kind != crate::module::manifest::ModuleKind::Program {
        return Err(ModuleError::TlsUnsupported);
    }
    let entry = manifest.entry.unwrap_or(h.entry);
    if !segs
        .loads
        .iter()
        .any(|s| s.perms.execute && s.range().contains(&entry))
    {
        return Err(ModuleError::EntryNotExecutable);
    }
    Ok(LoadPlan {
        segments: segs.loads,
        relocations,
        entry,
        image_size,
        relro: segs.relro,
        tls: segs.tls,
        manifest,
    })
}
