//! The host fuzz targets, one module each.

pub mod elf;
pub mod http;
pub mod manifest;

use crate::engine::Target;

/// Every host target.
pub const ALL: [Target; 3] = [http::TARGET, elf::TARGET, manifest::TARGET];

/// The host target called `name`.
pub fn find(name: &str) -> Option<Target> {
    ALL.into_iter().find(|t| t.name == name)
}
