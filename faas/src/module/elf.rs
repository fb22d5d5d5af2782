//! Bounds-checked reading of the ELF64 little-endian structures a module loader needs.
//!
//! Only the fields Fjord uses are decoded. Every read goes through [`Bytes`], which returns
//! `None` instead of panicking when a structure runs past the end of the file.

/// `e_ident` magic.
pub const MAGIC: [u8; 4] = [0x7f, b'E', b'L', b'F'];
/// `EI_CLASS` value for 64-bit objects.
pub const CLASS_64: u8 = 2;
/// `EI_DATA` value for little-endian objects.
pub const DATA_LE: u8 = 1;
/// `e_type` of an executable with fixed addresses.
pub const ET_EXEC: u16 = 2;
/// `e_type` of a position-independent object (PIE or shared library).
pub const ET_DYN: u16 = 3;
/// `e_machine` for x86_64.
pub const EM_X86_64: u16 = 62;
/// Size of the ELF64 file header.
pub const EHDR_SIZE: usize = 64;
/// Size of one ELF64 program header.
pub const PHDR_SIZE: usize = 56;
/// Size of one ELF64 section header.
pub const SHDR_SIZE: usize = 64;

/// Loadable segment.
pub const PT_LOAD: u32 = 1;
/// Dynamic section segment.
pub const PT_DYNAMIC: u32 = 2;
/// Interpreter request (a dynamically linked program).
pub const PT_INTERP: u32 = 3;
/// Thread-local storage template.
pub const PT_TLS: u32 = 7;
/// Range made read-only after relocation.
pub const PT_GNU_RELRO: u32 = 0x6474_e552;

/// Segment permission: execute.
pub const PF_X: u32 = 1;
/// Segment permission: write.
pub const PF_W: u32 = 2;
/// Segment permission: read.
pub const PF_R: u32 = 4;

/// Section without file contents (`.bss`).
pub const SHT_NOBITS: u32 = 8;

/// End of the dynamic array.
pub const DT_NULL: u64 = 0;
/// A needed shared library.
pub const DT_NEEDED: u64 = 1;
/// Size of the PLT relocations.
pub const DT_PLTRELSZ: u64 = 2;
/// Address of the RELA table.
pub const DT_RELA: u64 = 7;
/// Size of the RELA table.
pub const DT_RELASZ: u64 = 8;
/// Size of one RELA entry.
pub const DT_RELAENT: u64 = 9;
/// Address of a REL (implicit addend) table.
pub const DT_REL: u64 = 17;
/// Size of the REL table.
pub const DT_RELSZ: u64 = 18;
/// Relocations may write to read-only segments.
pub const DT_TEXTREL: u64 = 22;
/// Address of the PLT relocations.
pub const DT_JMPREL: u64 = 23;
/// Flags (`DF_TEXTREL` is bit 2).
pub const DT_FLAGS: u64 = 30;
/// Size of the RELR table.
pub const DT_RELRSZ: u64 = 35;
/// Address of the RELR (packed relative) table.
pub const DT_RELR: u64 = 36;
/// Size of one RELR entry.
pub const DT_RELRENT: u64 = 37;
/// `DT_FLAGS` bit: text relocations.
pub const DF_TEXTREL: u64 = 4;

/// No relocation.
pub const R_X86_64_NONE: u32 = 0;
/// `base + addend`: the only relocation a static PIE needs.
pub const R_X86_64_RELATIVE: u32 = 8;
/// Size of one RELA entry.
pub const RELA_SIZE: usize = 24;

/// A byte slice with little-endian, bounds-checked reads.
#[derive(Clone, Copy, Debug)]
pub struct Bytes<'a>(pub &'a [u8]);

impl<'a> Bytes<'a> {
    /// `len` bytes at `offset`, if in bounds.
    pub fn slice(self, offset: u64, len: u64) -> Option<&'a [u8]> {
        let start = usize::try_from(offset).ok()?;
        let end = start.checked_add(usize::try_from(len).ok()?)?;
        self.0.get(start..end)
    }

    /// A little-endian `u16` at `offset`.
    pub fn u16(self, offset: u64) -> Option<u16> {
        self.slice(offset, 2)?
            .try_into()
            .ok()
            .map(u16::from_le_bytes)
    }

    /// A little-endian `u32` at `offset`.
    pub fn u32(self, offset: u64) -> Option<u32> {
        self.slice(offset, 4)?
            .try_into()
            .ok()
            .map(u32::from_le_bytes)
    }

    /// A little-endian `u64` at `offset`.
    pub fn u64(self, offset: u64) -> Option<u64> {
        self.slice(offset, 8)?
            .try_into()
            .ok()
            .map(u64::from_le_bytes)
    }
}

/// The ELF64 file header fields the loader uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileHeader {
    /// `e_ident[EI_CLASS]`.
    pub class: u8,
    /// `e_ident[EI_DATA]`.
    pub data: u8,
    /// `e_type`.
    pub kind: u16,
    /// `e_machine`.
    pub machine: u16,
    /// `e_version`.
    pub version: u32,
    /// `e_entry`.
    pub entry: u64,
    /// `e_phoff`.
    pub phoff: u64,
    /// `e_shoff`.
    pub shoff: u64,
    /// `e_ehsize`.
    pub ehsize: u16,
    /// `e_phentsize`.
    pub phentsize: u16,
    /// `e_phnum`.
    pub phnum: u16,
    /// `e_shentsize`.
    pub shentsize: u16,
    /// `e_shnum`.
    pub shnum: u16,
    /// `e_shstrndx`.
    pub shstrndx: u16,
}

impl FileHeader {
    /// Decodes the header; `None` if the file is shorter than 64 bytes.
    pub fn read(b: Bytes<'_>) -> Option<Self> {
        let ident = b.slice(0, 16)?;
        Some(FileHeader {
            class: ident[4],
            data: ident[5],
            kind: b.u16(16)?,
            machine: b.u16(18)?,
            version: b.u32(20)?,
            entry: b.u64(24)?,
            phoff: b.u64(32)?,
            shoff: b.u64(40)?,
            ehsize: b.u16(52)?,
            phentsize: b.u16(54)?,
            phnum: b.u16(56)?,
            shentsize: b.u16(58)?,
            shnum: b.u16(60)?,
            shstrndx: b.u16(62)?,
        })
    }
}

/// One program header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProgramHeader {
    /// `p_type`.
    pub kind: u32,
    /// `p_flags` (`PF_R | PF_W | PF_X`).
    pub flags: u32,
    /// `p_offset`.
    pub offset: u64,
    /// `p_vaddr`.
    pub vaddr: u64,
    /// `p_filesz`.
    pub filesz: u64,
    /// `p_memsz`.
    pub memsz: u64,
    /// `p_align`.
    pub align: u64,
}

impl ProgramHeader {
    /// Decodes the program header at `offset`.
    pub fn read(b: Bytes<'_>, offset: u64) -> Option<Self> {
        let b = Bytes(b.slice(offset, PHDR_SIZE as u64)?);
        Some(ProgramHeader {
            kind: b.u32(0)?,
            flags: b.u32(4)?,
            offset: b.u64(8)?,
            vaddr: b.u64(16)?,
            filesz: b.u64(32)?,
            memsz: b.u64(40)?,
            align: b.u64(48)?,
        })
    }
}

/// One section header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SectionHeader {
    /// `sh_name`: offset of the name in the section-name string table.
    pub name: u32,
    /// `sh_type`.
    pub kind: u32,
    /// `sh_offset`.
    pub offset: u64,
    /// `sh_size`.
    pub size: u64,
}

impl SectionHeader {
    /// Decodes the section header at `offset`.
    pub fn read(b: Bytes<'_>, offset: u64) -> Option<Self> {
        let b = Bytes(b.slice(offset, SHDR_SIZE as u64)?);
        Some(SectionHeader {
            name: b.u32(0)?,
            kind: b.u32(4)?,
            offset: b.u64(24)?,
            size: b.u64(32)?,
        })
    }
}
