//! Which modules can run from one shared image.
//!
//! Fjord maps a module's code once, as one Global read-execute VMA that every instance of the
//! function shares (Jord §3.4). Code refers to its statics RIP-relatively, so a static has one
//! address for every instance: a writable static would be shared state between requests and
//! tenants, and there is no way to give each instance a private copy at the same address.
//!
//! The rule: every writable segment must lie inside `PT_GNU_RELRO`. Such data (the GOT,
//! `.data.rel.ro`, `.dynamic`) is written only by the loader, which applies the relocations once,
//! and is read-only afterwards. Per-instance state lives on the stack, in the heap VMA and in the
//! ArgBuf, which are private to each PD. `static mut`, atomics or `UnsafeCell` statics with
//! initial values land in `.data`/`.bss` and are rejected.

use super::load_plan::LoadPlan;
use core::fmt;

/// Why a module cannot share one image between its instances.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WritableData {
    /// Offset from the image base of the first writable byte outside `PT_GNU_RELRO`.
    pub offset: u64,
    /// How many writable bytes of that segment lie outside it.
    pub len: u64,
}

impl fmt::Display for WritableData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "module has {} bytes of writable data at {:#x} (writable statics cannot be shared \
             between instances; keep state on the stack, the heap or the ArgBuf)",
            self.len, self.offset
        )
    }
}

/// Checks that every writable segment of `plan` lies inside its `PT_GNU_RELRO` range, so the
/// whole image can be one read-only (read-execute) VMA after relocation.
pub fn check_shareable(plan: &LoadPlan) -> Result<(), WritableData> {
    for s in plan.segments.iter().filter(|s| s.perms.write) {
        let r = s.range();
        let (start, end) = match &plan.relro {
            Some(relro) if relro.start <= r.start && r.end <= relro.end => continue,
            Some(relro) if relro.start <= r.start && r.start < relro.end => (relro.end, r.end),
            _ => (r.start, r.end),
        };
        return Err(WritableData {
            offset: start,
            len: end - start,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::module::{ModuleLimits, validate};

    fn fixture() -> LoadPlan {
        let file = include_bytes!("../../tests/fixtures/hello-rela.elf");
        validate(file, &ModuleLimits::default()).unwrap()
    }

    #[test]
    fn relro_only_module_is_shareable() {
        assert_eq!(check_shareable(&fixture()), Ok(()));
    }

    #[test]
    fn writable_data_outside_relro_is_rejected() {
        let mut plan = fixture();
        let rw = *plan.segments.iter().find(|s| s.perms.write).unwrap();
        // Without RELRO the whole segment is shared writable data.
        plan.relro = None;
        assert_eq!(
            check_shareable(&plan),
            Err(WritableData {
                offset: rw.vaddr,
                len: rw.mem_size
            })
        );
        // RELRO covering only the first 16 bytes leaves the tail (a `.data`/`.bss`) writable.
        plan.relro = Some(rw.vaddr..rw.vaddr + 16);
        assert_eq!(
            check_shareable(&plan),
            Err(WritableData {
                offset: rw.vaddr + 16,
                len: rw.mem_size - 16
            })
        );
    }
}
