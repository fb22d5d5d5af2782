//! Function modules: the manifest format, validation of the ELF file into a [`LoadPlan`], and
//! relocation.
//!
//! Modules: [`manifest`] (the `.fjord_manifest` text format), [`elf`] (bounds-checked ELF64
//! reading), [`load_plan`] (validation and the plan), [`relocate`] (populate an image buffer and
//! apply relative relocations), [`program_image`] (a program's image in a μprocess area),
//! [`shared_image`] (the no-writable-statics rule of a shared
//! code image), [`error`] (the typed rejection reasons).

pub mod elf;
pub mod error;
pub mod load_plan;
pub mod manifest;
pub mod program_image;
pub mod relocate;
pub mod shared_image;

#[cfg(test)]
mod tests;

pub use error::{FilePart, ModuleError};
pub use load_plan::{
    LoadPlan, ModuleLimits, Perms, Relocation, SegmentPlan, TlsTemplate, validate,
};
pub use manifest::{GroundhogMode, Manifest, ManifestError, ModuleKind};
pub use program_image::ProgramImage;
pub use relocate::{RelocateError, apply_relocations};
pub use shared_image::{WritableData, check_shareable};
