//! The module validator and load plan: [`validate`], then what the kernel's loader does with
//! an accepted plan ([`LoadPlan::populate`], [`apply_relocations`], [`check_shareable`]).
//!
//! Inputs are real modules (the seed corpus: rustc's static PIEs) with structure-aware
//! changes: header, program-header, dynamic-entry, relocation and section-header fields set to
//! boundary or random values, and the manifest section rewritten. Invariants beyond "no
//! panic": an accepted plan has sorted segments on distinct pages, none writable and
//! executable, an entry in an executable segment, an image size covering every segment and
//! within the limit; populating and relocating it at any base succeeds; validation is
//! deterministic.

use fjord_faas::module::elf::{
    Bytes, FileHeader, PHDR_SIZE, PT_DYNAMIC, ProgramHeader, SHDR_SIZE, SectionHeader,
};
use fjord_faas::module::{LoadPlan, ModuleLimits, apply_relocations, check_shareable, validate};

use crate::engine::{Target, Violation};
use crate::mutate::INTERESTING;
use crate::rng::{Rng, fnv};

/// The target.
pub const TARGET: Target = Target {
    name: "elf",
    max_len: 64 * 1024,
    generate,
    check,
};

/// The seed modules the generator starts from (also in `fuzz/corpus/elf/`).
const SEEDS: [&[u8]; 3] = [
    include_bytes!("../../corpus/elf/hello-rela.elf"),
    include_bytes!("../../corpus/elf/hello-relr.elf"),
    include_bytes!("../../corpus/elf/echo.elf"),
];

/// Small limits, so the fuzzer reaches them, for inputs whose length is a multiple of 5.
fn limits_for(input: &[u8]) -> ModuleLimits {
    if input.len().is_multiple_of(5) {
        ModuleLimits {
            max_image_bytes: 64 << 10,
            max_program_headers: 4,
            max_relocations: 8,
            max_manifest_bytes: 128,
        }
    } else {
        ModuleLimits::default()
    }
}

/// Largest image the check populates (larger accepted images are only checked on paper).
const MAX_POPULATED: u64 = 4 << 20;

fn check(input: &[u8]) -> Result<u64, Violation> {
    let limits = limits_for(input);
    let result = validate(input, &limits);
    if validate(input, &limits) != result {
        return Err(Violation("validation is not deterministic".into()));
    }
    match result {
        Ok(plan) => {
            check_plan(&plan, &limits)?;
            if plan.image_size <= MAX_POPULATED {
                let mut image = vec![0u8; plan.image_size as usize];
                plan.populate(input, &mut image)
                    .map_err(|e| Violation(format!("populate: {e:?}")))?;
                for base in [0x4000_0000u64, 0x7fff_ffff_0000, 0] {
                    apply_relocations(&mut image, base, &plan)
                        .map_err(|e| Violation(format!("relocate at {base:#x}: {e:?}")))?;
                }
            }
            let shareable = check_shareable(&plan).is_ok();
            Ok(2 + u64::from(shareable) + (plan.segments.len() as u64) * 4)
        }
        Err(e) => Ok(fnv(format!("{e:?}").as_bytes())),
    }
}

fn check_plan(plan: &LoadPlan, limits: &ModuleLimits) -> Result<(), Violation> {
    let bad = |what: &str| Err(Violation(format!("accepted plan {what}: {plan:?}")));
    if plan.segments.is_empty() {
        return bad("has no segment");
    }
    for pair in plan.segments.windows(2) {
        if pair[0].page_range().end > pair[1].page_range().start {
            return bad("has segments sharing a page");
        }
    }
    for s in &plan.segments {
        if s.perms.write && s.perms.execute {
            return bad("has a writable executable segment");
        }
        if s.file_size > s.mem_size || s.page_range().end > plan.image_size {
            return bad("has a segment outside its image");
        }
    }
    if plan.image_size > limits.max_image_bytes {
        return bad("exceeds the image limit");
    }
    if plan.relocations.len() > limits.max_relocations {
        return bad("exceeds the relocation limit");
    }
    if !plan
        .segments
        .iter()
        .any(|s| s.perms.execute && s.range().contains(&plan.entry))
    {
        return bad("enters outside its code");
    }
    for r in &plan.relocations {
        if r.offset
            .checked_add(8)
            .is_none_or(|end| end > plan.image_size)
        {
            return bad("relocates outside its image");
        }
    }
    Ok(())
}

/// File offsets and widths of the fields worth changing in `file`.
fn fields(file: &[u8]) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = vec![
        (4, 1),
        (5, 1),
        (6, 1),
        (16, 2),
        (18, 2),
        (20, 4),
        (24, 8),
        (32, 8),
        (40, 8),
        (52, 2),
        (54, 2),
        (56, 2),
        (58, 2),
        (60, 2),
        (62, 2),
    ];
    let Some(h) = FileHeader::read(Bytes(file)) else {
        return out;
    };
    for i in 0..u64::from(h.phnum).min(32) {
        let at = h.phoff.saturating_add(i * PHDR_SIZE as u64);
        let Some(ph) = ProgramHeader::read(Bytes(file), at) else {
            break;
        };
        let at = at as usize;
        out.extend(
            [(0, 4), (4, 4), (8, 8), (16, 8), (32, 8), (40, 8), (48, 8)].map(|(o, w)| (at + o, w)),
        );
        if ph.kind == PT_DYNAMIC {
            // Tags and values of the dynamic entries.
            for e in 0..(ph.filesz / 8).min(64) {
                out.push(((ph.offset as usize).saturating_add(e as usize * 8), 8));
            }
        }
    }
    for i in 0..u64::from(h.shnum).min(64) {
        let at = h.shoff.saturating_add(i * SHDR_SIZE as u64);
        let Some(sh) = SectionHeader::read(Bytes(file), at) else {
            break;
        };
        let at = at as usize;
        out.extend([(0, 4), (4, 4), (24, 8), (32, 8)].map(|(o, w)| (at + o, w)));
        // Relocation tables (RELA, RELR) are sections too: their words.
        if matches!(sh.kind, 4 | 19) {
            for e in 0..(sh.size / 8).min(64) {
                out.push(((sh.offset as usize).saturating_add(e as usize * 8), 8));
            }
        }
    }
    out.retain(|&(at, w)| at.checked_add(w).is_some_and(|end| end <= file.len()));
    out
}

/// Writes `value`'s low `width` bytes at `at`.
fn put(file: &mut [u8], at: usize, width: usize, value: u64) {
    if let Some(slot) = file.get_mut(at..at + width) {
        slot.copy_from_slice(&value.to_le_bytes()[..width]);
    }
}

/// A seed module with one to four fields changed, and sometimes a new manifest.
fn generate(rng: &mut Rng, out: &mut Vec<u8>) {
    out.extend_from_slice(SEEDS[rng.below(SEEDS.len())]);
    let fields = fields(out);
    for _ in 0..1 + rng.below(4) {
        let &(at, width) = rng.pick(&fields);
        let old = {
            let mut b = [0u8; 8];
            b[..width].copy_from_slice(&out[at..at + width]);
            u64::from_le_bytes(b)
        };
        let value = match rng.below(6) {
            0 => *rng.pick(&INTERESTING),
            1 => rng.next_u64(),
            2 => old.wrapping_add(rng.below(0x2000) as u64),
            3 => old.wrapping_sub(rng.below(0x2000) as u64),
            4 => old ^ (1 << rng.below(width * 8)),
            _ => out.len() as u64 - rng.below(64) as u64,
        };
        put(out, at, width, value);
    }
    if rng.one_in(4) {
        rewrite_manifest(rng, out);
    }
}

/// Replaces the manifest section's text with a generated manifest (padded with NULs or cut).
fn rewrite_manifest(rng: &mut Rng, file: &mut [u8]) {
    let Some(h) = FileHeader::read(Bytes(file)) else {
        return;
    };
    let Some(names) = SectionHeader::read(
        Bytes(file),
        h.shoff.saturating_add(u64::from(h.shstrndx) * 64),
    ) else {
        return;
    };
    for i in 0..u64::from(h.shnum) {
        let Some(s) =
            SectionHeader::read(Bytes(file), h.shoff.saturating_add(i * SHDR_SIZE as u64))
        else {
            return;
        };
        let name_at = names.offset.saturating_add(u64::from(s.name)) as usize;
        if file
            .get(name_at..)
            .is_some_and(|n| n.starts_with(b".fjord_manifest\0"))
        {
            let mut text = Vec::new();
            (super::manifest::TARGET.generate)(rng, &mut text);
            let Some(slot) =
                file.get_mut(s.offset as usize..s.offset.saturating_add(s.size) as usize)
            else {
                return;
            };
            slot.fill(0);
            let n = text.len().min(slot.len());
            slot[..n].copy_from_slice(&text[..n]);
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seeds_are_accepted_and_their_fields_found() {
        for seed in SEEDS {
            assert!(validate(seed, &ModuleLimits::default()).is_ok());
            assert!(check(seed).is_ok());
            assert!(fields(seed).len() > 40);
        }
    }
}
