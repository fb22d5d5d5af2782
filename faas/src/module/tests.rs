//! Module validation tests on real rustc output (`faas/tests/fixtures/`) and mutations of it.

use super::elf::*;
use super::*;
use alloc::vec;
use alloc::vec::Vec;
use proptest::prelude::*;

const RELA: &[u8] = include_bytes!("../../tests/fixtures/hello-rela.elf");
const RELR: &[u8] = include_bytes!("../../tests/fixtures/hello-relr.elf");

fn check(file: &[u8]) -> Result<LoadPlan, ModuleError> {
    validate(file, &ModuleLimits::default())
}

fn header(file: &[u8]) -> FileHeader {
    FileHeader::read(Bytes(file)).unwrap()
}

/// File offset of the `nth` program header of type `kind`.
fn phdr(file: &[u8], kind: u32, nth: usize) -> usize {
    let h = header(file);
    (0..h.phnum as usize)
        .map(|i| h.phoff as usize + i * PHDR_SIZE)
        .filter(|&o| Bytes(file).u32(o as u64) == Some(kind))
        .nth(nth)
        .expect("program header")
}

/// File offset of the dynamic entry with `tag`.
fn dyn_entry(file: &[u8], tag: u64) -> usize {
    let d = ProgramHeader::read(Bytes(file), phdr(file, PT_DYNAMIC, 0) as u64).unwrap();
    (0..d.filesz as usize / 16)
        .map(|i| d.offset as usize + i * 16)
        .find(|&o| Bytes(file).u64(o as u64) == Some(tag))
        .expect("dynamic tag")
}

/// File offset of the section header named `name`.
fn section(file: &[u8], name: &[u8]) -> usize {
    let h = header(file);
    let strtab = SectionHeader::read(Bytes(file), h.shoff + h.shstrndx as u64 * 64).unwrap();
    (0..h.shnum as usize)
        .map(|i| h.shoff as usize + i * SHDR_SIZE)
        .find(|&o| {
            let s = SectionHeader::read(Bytes(file), o as u64).unwrap();
            let at = (strtab.offset + s.name as u64) as usize;
            file[at..].starts_with(name) && file[at + name.len()] == 0
        })
        .expect("section")
}

fn put16(f: &mut [u8], at: usize, v: u16) {
    f[at..at + 2].copy_from_slice(&v.to_le_bytes());
}
fn put32(f: &mut [u8], at: usize, v: u32) {
    f[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
fn put64(f: &mut [u8], at: usize, v: u64) {
    f[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// A file edit and the error it must produce.
type Case = (fn(&mut Vec<u8>), ModuleError);

/// Applies `edit` to a copy of `base` and validates the result.
fn mutated(base: &[u8], edit: impl FnOnce(&mut Vec<u8>)) -> Result<LoadPlan, ModuleError> {
    let mut f = base.to_vec();
    edit(&mut f);
    check(&f)
}

#[test]
fn accepts_real_rustc_static_pie_with_rela() {
    let plan = check(RELA).unwrap();
    let perms: Vec<_> = plan
        .segments
        .iter()
        .map(|s| (s.vaddr, s.perms.write, s.perms.execute))
        .collect();
    assert_eq!(
        perms,
        vec![
            (0, false, false),
            (0x1300, false, true),
            (0x2328, true, false)
        ]
    );
    assert_eq!(plan.segments[2].file_size, 0x110);
    assert_eq!(plan.segments[2].mem_size, 0xcd8);
    assert_eq!(plan.image_size, 0x3000);
    assert_eq!(plan.entry, 0x1300);
    assert_eq!(plan.relro, Some(0x2328..0x3000));
    let relocs: Vec<_> = plan
        .relocations
        .iter()
        .map(|r| (r.offset, r.addend))
        .collect();
    assert_eq!(
        relocs,
        vec![(0x2328, 0x2c8), (0x2338, 0x2c9), (0x2348, 0x2cb)]
    );
    assert_eq!(plan.manifest.name.as_str(), "hello");
    assert_eq!(plan.manifest.stack_size, 64 * 1024);
    assert_eq!(
        plan.manifest.groundhog,
        crate::module::GroundhogMode::Restore
    );
}

#[test]
fn accepts_packed_relr_relocations() {
    let plan = check(RELR).unwrap();
    let relocs: Vec<_> = plan
        .relocations
        .iter()
        .map(|r| (r.offset, r.addend))
        .collect();
    assert_eq!(
        relocs,
        vec![(0x22f8, 0x290), (0x2308, 0x291), (0x2318, 0x293)]
    );
}

#[test]
fn populates_and_relocates_an_image() {
    let plan = check(RELA).unwrap();
    let mut image = vec![0xaa; plan.image_size as usize];
    plan.populate(RELA, &mut image).unwrap();
    assert_eq!(&image[0x1300..0x1327], &RELA[0x300..0x327]);
    assert!(
        image[0x2328 + 0x110..].iter().all(|&b| b == 0),
        "bss zeroed"
    );
    let base = 0xffff_8000_0010_0000;
    assert_eq!(apply_relocations(&mut image, base, &plan), Ok(3));
    let word = |o: usize| u64::from_le_bytes(image[o..o + 8].try_into().unwrap());
    assert_eq!(word(0x2328), base + 0x2c8);
    assert_eq!(word(0x2348), base + 0x2cb);
    assert_eq!(&image[0x2c8..0x2cc], b"abbc");
}

#[test]
fn relocation_and_populate_bounds_are_checked() {
    let plan = check(RELA).unwrap();
    let mut small = vec![0; 0x2330];
    assert_eq!(
        plan.populate(RELA, &mut small),
        Err(RelocateError::ImageTooSmall)
    );
    assert_eq!(
        plan.populate(&RELA[..0x400], &mut vec![0; 0x3000]),
        Err(RelocateError::FileTooShort)
    );
    let before = small.clone();
    assert_eq!(
        apply_relocations(&mut small, 0, &plan),
        Err(RelocateError::OutOfBounds { offset: 0x2338 })
    );
    assert_eq!(small, before, "no partial writes");
    let mut neg = plan.clone();
    neg.relocations[0].addend = -0x1000;
    let mut image = vec![0; 0x3000];
    assert_eq!(
        apply_relocations(&mut image, 0x10, &neg),
        Err(RelocateError::Overflow { offset: 0x2328 })
    );
    assert_eq!(apply_relocations(&mut image, 0x2000, &neg), Ok(3));
    assert_eq!(&image[0x2328..0x2330], &0x1000u64.to_le_bytes());
}

#[test]
fn every_truncation_is_rejected() {
    for len in 0..RELA.len() {
        assert!(
            check(&RELA[..len]).is_err(),
            "prefix of {len} bytes accepted"
        );
    }
    assert_eq!(check(&RELA[..3]), Err(ModuleError::NotElf));
    assert_eq!(
        check(&RELA[..40]),
        Err(ModuleError::Truncated(FilePart::Header))
    );
    assert_eq!(
        check(&RELA[..100]),
        Err(ModuleError::Truncated(FilePart::ProgramHeaders))
    );
    assert_eq!(
        check(&RELA[..0x300]),
        Err(ModuleError::Truncated(FilePart::Segment))
    );
}

#[test]
fn header_field_rejections() {
    use ModuleError::*;
    let cases: Vec<Case> = vec![
        (|f| f[0] = 0x7e, NotElf),
        (|f| f[4] = 1, WrongClass),
        (|f| f[5] = 2, WrongEndianness),
        (|f| f[6] = 0, BadVersion),
        (|f| put32(f, 20, 2), BadVersion),
        (|f| put16(f, 16, ET_EXEC), NotPositionIndependent),
        (|f| put16(f, 16, 1), WrongType),
        (|f| put16(f, 18, 3), WrongMachine),
        (|f| put16(f, 52, 52), BadHeaderSize),
        (|f| put16(f, 54, 32), BadHeaderSize),
        (|f| put16(f, 58, 40), BadHeaderSize),
        (|f| put16(f, 56, 0), NoLoadSegments),
        (|f| put16(f, 56, 0xffff), TooManySegments),
        (
            |f| put64(f, 32, u64::MAX - 8),
            Truncated(FilePart::ProgramHeaders),
        ),
        (
            |f| put64(f, 40, 0x10_0000),
            Truncated(FilePart::SectionHeaders),
        ),
        (|f| put16(f, 62, 200), Truncated(FilePart::SectionNames)),
        (|f| put16(f, 60, 0), MissingManifest),
        (|f| put64(f, 24, 0), EntryNotExecutable),
    ];
    for (i, (edit, err)) in cases.into_iter().enumerate() {
        assert_eq!(mutated(RELA, edit), Err(err), "case {i}");
    }
}

#[test]
fn segment_rejections() {
    use ModuleError::*;
    let load = |f: &[u8], n| phdr(f, PT_LOAD, n);
    let cases: Vec<Case> = vec![
        (
            |f| {
                let o = phdr(f, PT_LOAD, 1);
                put32(f, o + 4, PF_R | PF_W | PF_X)
            },
            WritableExecutable,
        ),
        (
            |f| {
                let o = phdr(f, PT_LOAD, 2);
                put64(f, o + 32, 0x10000)
            },
            FileSizeExceedsMemSize,
        ),
        (
            |f| {
                let o = phdr(f, PT_LOAD, 2);
                put64(f, o + 8, 0x329)
            },
            BadAlignment,
        ),
        (
            |f| {
                let o = phdr(f, PT_LOAD, 2);
                put64(f, o + 8, 0x10_0328)
            },
            Truncated(FilePart::Segment),
        ),
        (
            |f| {
                let o = phdr(f, PT_LOAD, 2);
                put64(f, o + 48, 0x1001)
            },
            BadAlignment,
        ),
        (
            |f| {
                let o = phdr(f, PT_LOAD, 2);
                put64(f, o + 40, u64::MAX - 0x2000)
            },
            AddressOverflow,
        ),
        (
            |f| {
                let o = phdr(f, PT_LOAD, 2);
                put64(f, o + 40, 1 << 40)
            },
            ImageTooLarge,
        ),
        // Move the RW segment into the code segment's page.
        (
            |f| {
                let o = phdr(f, PT_LOAD, 2);
                put64(f, o + 16, 0x1328);
                put64(f, o + 48, 8)
            },
            SegmentsOverlap,
        ),
        (
            |f| {
                let o = phdr(f, PT_GNU_RELRO, 0);
                put64(f, o + 40, 0x1000)
            },
            RelroOutsideSegment,
        ),
        (
            |f| {
                let o = phdr(f, PT_GNU_RELRO, 0);
                put64(f, o + 16, 0x1300)
            },
            RelroOutsideSegment,
        ),
        (
            |f| {
                let o = phdr(f, 0x6474_e551, 0);
                put32(f, o, PT_INTERP)
            },
            InterpreterRequested,
        ),
        (
            |f| {
                let o = phdr(f, 0x6474_e551, 0);
                put32(f, o, PT_TLS)
            },
            TlsUnsupported,
        ),
        (
            |f| {
                // A 128 KiB block: over the limit.
                let o = phdr(f, 0x6474_e551, 0);
                put32(f, o, PT_TLS);
                put64(f, o + 40, 128 << 10)
            },
            BadTls,
        ),
        (
            |f| {
                // Aligned beyond the thread pointer's 256 bytes.
                let o = phdr(f, 0x6474_e551, 0);
                put32(f, o, PT_TLS);
                put64(f, o + 48, 512)
            },
            BadTls,
        ),
        (
            |f| {
                // Initial bytes outside every segment's file part.
                let o = phdr(f, 0x6474_e551, 0);
                put32(f, o, PT_TLS);
                put64(f, o + 16, 0x10_0000);
                put64(f, o + 32, 8);
                put64(f, o + 40, 8)
            },
            BadTls,
        ),
        (
            |f| {
                let (o, d) = (phdr(f, 0x6474_e551, 0), phdr(f, PT_DYNAMIC, 0));
                f.copy_within(d..d + 56, o)
            },
            MultipleDynamic,
        ),
        (
            |f| {
                for n in 0..3 {
                    let o = phdr(f, PT_LOAD, n);
                    put64(f, o + 40, 0);
                    put64(f, o + 32, 0)
                }
            },
            NoLoadSegments,
        ),
    ];
    for (i, (edit, err)) in cases.into_iter().enumerate() {
        assert_eq!(mutated(RELA, edit), Err(err), "case {i}");
    }
    assert_eq!(load(RELA, 0), 64 + 56);
}

#[test]
fn dynamic_and_relocation_rejections() {
    use ModuleError::*;
    let cases: Vec<Case> = vec![
        (
            |f| {
                let o = dyn_entry(f, 21);
                put64(f, o, DT_NEEDED)
            },
            NeedsSharedLibraries,
        ),
        (
            |f| {
                let o = dyn_entry(f, 21);
                put64(f, o, DT_TEXTREL)
            },
            TextRelocations,
        ),
        (
            |f| {
                let o = dyn_entry(f, DT_FLAGS);
                put64(f, o + 8, DF_TEXTREL)
            },
            TextRelocations,
        ),
        (
            |f| {
                let o = dyn_entry(f, 21);
                put64(f, o, DT_REL)
            },
            UnsupportedRelocationTable,
        ),
        (
            |f| {
                let o = dyn_entry(f, 21);
                put64(f, o, DT_JMPREL)
            },
            UnsupportedRelocationTable,
        ),
        (
            |f| {
                let o = dyn_entry(f, DT_RELAENT);
                put64(f, o + 8, 16)
            },
            BadRelocationTable,
        ),
        (
            |f| {
                let o = dyn_entry(f, DT_RELASZ);
                put64(f, o + 8, 70)
            },
            BadRelocationTable,
        ),
        (
            |f| {
                let o = dyn_entry(f, DT_RELASZ);
                put64(f, o + 8, 0x24_0000)
            },
            Truncated(FilePart::Relocations),
        ),
        (
            |f| {
                let o = dyn_entry(f, DT_RELA);
                put64(f, o, 21)
            },
            BadRelocationTable,
        ),
        // First RELA entry (at 0x248): type R_X86_64_64, then a target in the code segment.
        (|f| put64(f, 0x248 + 8, 1), UnsupportedRelocation(1)),
        (|f| put64(f, 0x248, 0x1300), RelocationOutOfBounds),
        (|f| put64(f, 0x248, 0x2ffc), RelocationOutOfBounds),
        (|f| put64(f, 0x248, u64::MAX - 3), RelocationOutOfBounds),
        (|f| put64(f, 0x248 + 16, 0x3001), AddendOutOfImage),
        (|f| put64(f, 0x248 + 16, u64::MAX), AddendOutOfImage),
        (
            |f| {
                let o = phdr(f, PT_DYNAMIC, 0);
                put64(f, o + 8, 0x10_0000)
            },
            Truncated(FilePart::Dynamic),
        ),
    ];
    for (i, (edit, err)) in cases.into_iter().enumerate() {
        assert_eq!(mutated(RELA, edit), Err(err), "case {i}");
    }
    // R_X86_64_NONE entries are skipped; no PT_DYNAMIC means no relocations.
    assert_eq!(
        mutated(RELA, |f| put64(f, 0x248 + 8, 0))
            .unwrap()
            .relocations
            .len(),
        2
    );
    let no_dyn = mutated(RELA, |f| {
        let o = phdr(f, PT_DYNAMIC, 0);
        put32(f, o, 0)
    });
    assert!(no_dyn.unwrap().relocations.is_empty());
}

#[test]
fn relr_rejections() {
    use ModuleError::*;
    // RELR table at 0x248: one address word then one bitmap word.
    assert_eq!(
        mutated(RELR, |f| put64(f, 0x248, 0x1300)),
        Err(RelocationOutOfBounds)
    );
    assert_eq!(
        mutated(RELR, |f| put64(f, 0x248, 0x3)),
        Err(BadRelocationTable)
    );
    assert_eq!(
        mutated(RELR, |f| {
            put64(f, 0x248, 0x2ff8);
            put64(f, 0x250, u64::MAX)
        }),
        Err(RelocationOutOfBounds)
    );
    assert_eq!(
        mutated(RELR, |f| put64(f, 0x250, 0b111))
            .unwrap()
            .relocations
            .len(),
        3
    );
    // The implicit addend (the word at the target) must point into the image.
    assert_eq!(
        mutated(RELR, |f| put64(f, 0x2f8, 0x10_0000)),
        Err(AddendOutOfImage)
    );
    assert_eq!(
        mutated(RELR, |f| {
            let o = dyn_entry(f, DT_RELRENT);
            put64(f, o + 8, 4)
        }),
        Err(BadRelocationTable)
    );
    let bitmap_only_first = mutated(RELR, |f| put64(f, 0x250, 0b11)).unwrap();
    assert_eq!(bitmap_only_first.relocations.len(), 2);
}

#[test]
fn manifest_rejections_and_limits() {
    use ModuleError::*;
    let manifest_at = |f: &[u8]| {
        SectionHeader::read(Bytes(f), section(f, MANIFEST) as u64)
            .unwrap()
            .offset as usize
    };
    const MANIFEST: &[u8] = b".fjord_manifest";
    let name_at = |f: &[u8]| {
        let h = header(f);
        let strtab = SectionHeader::read(Bytes(f), h.shoff + h.shstrndx as u64 * 64).unwrap();
        let s = SectionHeader::read(Bytes(f), section(f, MANIFEST) as u64).unwrap();
        (strtab.offset + s.name as u64) as usize
    };
    let mut f = RELA.to_vec();
    let at = name_at(&f);
    f[at + 14] = b'X';
    assert_eq!(check(&f), Err(MissingManifest));
    let mut f = RELA.to_vec();
    let at = manifest_at(&f);
    f[at + 17..at + 22].copy_from_slice(b"nome=");
    assert_eq!(
        check(&f),
        Err(Manifest(ManifestError::UnknownKey { line: 2 }))
    );
    let mut f = RELA.to_vec();
    let o = section(&f, MANIFEST);
    put32(&mut f, o + 4, SHT_NOBITS);
    assert_eq!(check(&f), Err(Truncated(FilePart::Manifest)));
    let mut f = RELA.to_vec();
    let o = section(&f, MANIFEST);
    put64(&mut f, o + 24, 0x10_0000);
    assert_eq!(check(&f), Err(Truncated(FilePart::Manifest)));
    // Point .rodata's name at the manifest's name: two manifests.
    let mut f = RELA.to_vec();
    let (m, r) = (section(&f, MANIFEST), section(&f, b".rodata"));
    f.copy_within(m..m + 4, r);
    assert_eq!(check(&f), Err(DuplicateManifest));
    // Manifest entry override must be executable.
    let mut f = RELA.to_vec();
    let at = manifest_at(&f);
    f[at + 28..at + 42].copy_from_slice(b"entry=0x2c8\n\n\n");
    assert_eq!(check(&f), Err(EntryNotExecutable));
    f[at + 28..at + 42].copy_from_slice(b"entry=0x1310\n\n");
    assert_eq!(check(&f).unwrap().entry, 0x1310);

    let lim = |l: ModuleLimits| validate(RELA, &l);
    let d = ModuleLimits::default();
    assert_eq!(
        lim(ModuleLimits {
            max_image_bytes: 0x2000,
            ..d
        }),
        Err(ImageTooLarge)
    );
    assert_eq!(
        lim(ModuleLimits {
            max_image_bytes: 0x3000,
            ..d
        })
        .map(|p| p.image_size),
        Ok(0x3000)
    );
    assert_eq!(
        lim(ModuleLimits {
            max_program_headers: 4,
            ..d
        }),
        Err(TooManySegments)
    );
    assert_eq!(
        lim(ModuleLimits {
            max_relocations: 2,
            ..d
        }),
        Err(TooManyRelocations)
    );
    assert_eq!(
        lim(ModuleLimits {
            max_manifest_bytes: 16,
            ..d
        }),
        Err(ManifestTooLarge)
    );
}

#[test]
fn errors_have_messages() {
    use alloc::string::ToString;
    assert_eq!(
        ModuleError::WritableExecutable.to_string(),
        "segment is writable and executable"
    );
    assert!(
        ModuleError::Manifest(ManifestError::MissingName)
            .to_string()
            .contains("no name")
    );
}

proptest! {
    /// Random byte edits of a real module never panic; whatever validates also loads.
    #[test]
    fn mutations_never_panic(edits in prop::collection::vec((0usize..RELA.len(), any::<u8>()), 1..8),
                             cut in 0usize..=RELA.len(), relr in any::<bool>()) {
        let mut f = if relr { RELR.to_vec() } else { RELA.to_vec() };
        for (at, b) in edits {
            if at < f.len() { f[at] = b; }
        }
        f.truncate(cut.max(64));
        if let Ok(plan) = check(&f) {
            let mut image = vec![0; plan.image_size as usize];
            prop_assert_eq!(plan.populate(&f, &mut image), Ok(()));
            prop_assert_eq!(apply_relocations(&mut image, 0x4000_0000, &plan), Ok(plan.relocations.len()));
        }
    }
}
