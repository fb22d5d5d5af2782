//! Mapping a validated module: one Global read-execute VMA for the whole image, populated and
//! relocated once through the kernel's direct map.
//!
//! Real Jord hardware would map the code VMA once in the VMA table as Global read-execute; here
//! the same VTE is made, and each PD's page tables fill leaves from it on first use (VLB
//! misses). Writable segments are accepted only inside `PT_GNU_RELRO` (see
//! [`fjord_faas::module::shared_image`]), so after relocation nothing in the image needs to be
//! writable and RELRO is read-only for functions as it would be after `mprotect` in a process.

use crate::jord::{self, state::Jord};
use fjord_faas::module::{
    LoadPlan, ModuleError, RelocateError, WritableData, apply_relocations, check_shareable,
};
use fjord_pd::{MapFlags, PdId, Perm};

/// Why a module could not be deployed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadError {
    /// The validator rejected the ELF file.
    Invalid(ModuleError),
    /// The module has writable statics, which one shared image cannot hold.
    WritableData(WritableData),
    /// The manifest's name differs from the name it was deployed under.
    NameMismatch,
    /// Jord could not allocate the code VMA.
    NoMemory,
    /// Populating or relocating the image failed.
    Relocate(RelocateError),
    /// The key-value store's capacity is reserved by other namespaces: the manifest's
    /// `kv_quota` does not fit.
    NoKvRoom,
}

impl core::fmt::Display for LoadError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            LoadError::Invalid(e) => write!(f, "invalid module: {e}"),
            LoadError::WritableData(w) => write!(f, "{w}"),
            LoadError::NameMismatch => {
                f.write_str("the manifest name differs from the deployed name")
            }
            LoadError::NoMemory => f.write_str("no memory for the code VMA"),
            LoadError::Relocate(e) => write!(f, "relocation failed: {e:?}"),
            LoadError::NoKvRoom => {
                f.write_str("the key-value store has no room left for the namespace's kv_quota")
            }
        }
    }
}

/// A module's image in the current Jord state.
#[derive(Debug)]
pub struct MappedImage {
    /// Base of the Global read-execute code VMA.
    pub base: u64,
    /// Length of the VMA (the plan's page-rounded image size).
    pub len: u64,
    /// Which Jord state the VMA belongs to (see [`jord_epoch`]).
    pub epoch: u64,
}

/// Identifies the current Jord state: `jord::state::reset` replaces the state (and releases
/// every VMA, module code included) with one of a new generation.
pub fn jord_epoch() -> u64 {
    jord::state::current_generation()
}

fn current_epoch(j: &mut Jord) -> u64 {
    j.generation()
}

/// Maps `plan`'s image from `file` into a new Global read-execute VMA and relocates it there.
/// A program's writable statics are allowed: each of its μprocesses has its own copy in its
/// area (see [`super::ProgramArea`]), and this image is only the source of its shared pages.
pub fn map_image(file: &[u8], plan: &LoadPlan) -> Result<MappedImage, LoadError> {
    if plan.manifest.kind == fjord_faas::module::ModuleKind::Function {
        check_shareable(plan).map_err(LoadError::WritableData)?;
    }
    let global = MapFlags {
        global: true,
        privileged: false,
    };
    let len = plan.image_size;
    let size = usize::try_from(len).map_err(|_| LoadError::NoMemory)?;
    let (base, epoch) = jord::with(|j| {
        let base = j.mmap(PdId::KERNEL, len, Perm::RX, global).ok()?;
        Some((base, current_epoch(j)))
    })
    .ok_or(LoadError::NoMemory)?;
    // The image is built and relocated in kernel memory, then copied into the VMA's frames.
    let mut image = alloc::vec![0u8; size];
    let done = plan
        .populate(file, &mut image)
        .and_then(|()| apply_relocations(&mut image, base, plan));
    if let Err(e) = done {
        unmap_image(&MappedImage { base, len, epoch });
        return Err(LoadError::Relocate(e));
    }
    if jord::with(|j| j.vma_write(base, 0, &image)).is_err() {
        unmap_image(&MappedImage { base, len, epoch });
        return Err(LoadError::NoMemory);
    }
    Ok(MappedImage { base, len, epoch })
}

/// Unmaps an image if it belongs to the current Jord state (a reset already released it
/// otherwise). Every PD's leaves for it are shot down.
pub fn unmap_image(image: &MappedImage) {
    jord::settled(|j| {
        if current_epoch(j) != image.epoch {
            return None;
        }
        j.munmap(PdId::KERNEL, image.base, image.len).ok()
    });
}
