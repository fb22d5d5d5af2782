//! Why a function module was rejected.

use super::manifest::ManifestError;
use core::fmt;

/// The part of the file that ended too early or lies outside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FilePart {
    /// The 64-byte file header.
    Header,
    /// The program header table.
    ProgramHeaders,
    /// The section header table.
    SectionHeaders,
    /// The section-name string table.
    SectionNames,
    /// A loadable segment's file contents.
    Segment,
    /// The dynamic array.
    Dynamic,
    /// A relocation table.
    Relocations,
    /// The `.fjord_manifest` section.
    Manifest,
}

/// A module validation failure; [`fmt::Display`] gives the message for the deployer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModuleError {
    /// The file does not start with the ELF magic.
    NotElf,
    /// Not a 64-bit ELF.
    WrongClass,
    /// Not little-endian.
    WrongEndianness,
    /// `e_version` / `EI_VERSION` is not 1.
    BadVersion,
    /// Not built for x86_64.
    WrongMachine,
    /// `ET_EXEC`: linked at a fixed address; build a static PIE (the default of
    /// `x86_64-unknown-none`).
    NotPositionIndependent,
    /// Neither `ET_DYN` nor `ET_EXEC` (e.g. a relocatable object or core file).
    WrongType,
    /// A header or table size field disagrees with ELF64.
    BadHeaderSize,
    /// The named part is truncated or lies outside the file.
    Truncated(FilePart),
    /// No `PT_LOAD` segment with contents.
    NoLoadSegments,
    /// More program headers than the limit.
    TooManySegments,
    /// A segment's file size exceeds its memory size.
    FileSizeExceedsMemSize,
    /// `p_align` is not a power of two or `p_vaddr` and `p_offset` disagree modulo it.
    BadAlignment,
    /// Address arithmetic overflows 64 bits.
    AddressOverflow,
    /// Two segments share a 4 KiB page (page tables protect whole pages).
    SegmentsOverlap,
    /// A segment is both writable and executable.
    WritableExecutable,
    /// The file or the memory image exceeds the configured limit.
    ImageTooLarge,
    /// `PT_GNU_RELRO` is not inside one writable segment.
    RelroOutsideSegment,
    /// `PT_INTERP`: the module wants a dynamic linker.
    InterpreterRequested,
    /// `DT_NEEDED`: the module wants shared libraries.
    NeedsSharedLibraries,
    /// `PT_TLS` in a function module: thread-local storage is for programs only.
    TlsUnsupported,
    /// A program's `PT_TLS` is malformed: more than one, larger in file than in memory, an
    /// alignment that is not a power of two up to 256, over 64 KiB, or its initial bytes
    /// outside a writable segment.
    BadTls,
    /// More than one `PT_DYNAMIC`.
    MultipleDynamic,
    /// Text relocations (`DT_TEXTREL`): relocations into code.
    TextRelocations,
    /// A relocation table kind a static PIE must not need (`DT_REL`, PLT relocations).
    UnsupportedRelocationTable,
    /// A relocation table's entry size or total size is inconsistent.
    BadRelocationTable,
    /// A relocation type other than `R_X86_64_RELATIVE` / `R_X86_64_NONE` (the value).
    UnsupportedRelocation(u32),
    /// A relocation target is not 8 bytes inside a writable segment.
    RelocationOutOfBounds,
    /// A relocation's value (`base + addend`) would point outside the module image.
    AddendOutOfImage,
    /// More relocations than the limit.
    TooManyRelocations,
    /// The entry point is not inside an executable segment.
    EntryNotExecutable,
    /// No `.fjord_manifest` section (or no section headers at all).
    MissingManifest,
    /// More than one `.fjord_manifest` section.
    DuplicateManifest,
    /// The manifest section exceeds the size limit.
    ManifestTooLarge,
    /// The manifest is invalid.
    Manifest(ManifestError),
}

impl fmt::Display for ModuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ModuleError::*;
        match self {
            NotElf => f.write_str("not an ELF file"),
            WrongClass => f.write_str("not a 64-bit ELF"),
            WrongEndianness => f.write_str("not a little-endian ELF"),
            BadVersion => f.write_str("unknown ELF version"),
            WrongMachine => f.write_str("not built for x86_64"),
            NotPositionIndependent => {
                f.write_str("ET_EXEC: build a static PIE for x86_64-unknown-none")
            }
            WrongType => f.write_str("not an executable (ET_DYN) ELF"),
            BadHeaderSize => f.write_str("ELF header or table entry size is wrong"),
            Truncated(part) => write!(f, "truncated or out-of-file: {part:?}"),
            NoLoadSegments => f.write_str("no loadable segments"),
            TooManySegments => f.write_str("too many program headers"),
            FileSizeExceedsMemSize => f.write_str("segment file size exceeds memory size"),
            BadAlignment => f.write_str("segment alignment is invalid"),
            AddressOverflow => f.write_str("segment addresses overflow"),
            SegmentsOverlap => f.write_str("segments overlap or share a page"),
            WritableExecutable => f.write_str("segment is writable and executable"),
            ImageTooLarge => f.write_str("module image exceeds the size limit"),
            RelroOutsideSegment => f.write_str("PT_GNU_RELRO is not inside a writable segment"),
            InterpreterRequested => f.write_str("module requests a dynamic linker (PT_INTERP)"),
            NeedsSharedLibraries => f.write_str("module needs shared libraries (DT_NEEDED)"),
            TlsUnsupported => {
                f.write_str("thread-local storage (PT_TLS) is supported in programs only")
            }
            BadTls => f.write_str(
                "malformed PT_TLS: at most one, at most 64 KiB, alignment a power of two up to 256, its initial bytes in a writable segment",
            ),
            MultipleDynamic => f.write_str("more than one PT_DYNAMIC"),
            TextRelocations => f.write_str("module has text relocations"),
            UnsupportedRelocationTable => f.write_str("REL or PLT relocations are not supported"),
            BadRelocationTable => f.write_str("relocation table size is inconsistent"),
            UnsupportedRelocation(t) => write!(f, "unsupported relocation type {t}"),
            RelocationOutOfBounds => f.write_str("relocation target outside writable segments"),
            AddendOutOfImage => f.write_str("relocation value points outside the image"),
            TooManyRelocations => f.write_str("too many relocations"),
            EntryNotExecutable => f.write_str("entry point is not in an executable segment"),
            MissingManifest => f.write_str("no .fjord_manifest section"),
            DuplicateManifest => f.write_str("more than one .fjord_manifest section"),
            ManifestTooLarge => f.write_str(".fjord_manifest is too large"),
            Manifest(e) => write!(f, "{e}"),
        }
    }
}
