//! The disk images xtask attaches as the guest's virtio-blk disk: a persistent one for
//! `cargo xtask run` (kept between boots) and a scratch one per test boot (emptied each time).
//! Both are raw, sparse files: the guest's sector `n` is the file's bytes `512 n ..`.

use crate::workspace;
use anyhow::{Context, Result};
use std::path::PathBuf;

/// Size of the image `cargo xtask run` attaches.
pub const RUN_IMAGE_BYTES: u64 = 64 << 20;
/// Size of a test boot's scratch image.
pub const SCRATCH_IMAGE_BYTES: u64 = 4 << 20;

/// The image `cargo xtask run` attaches (`target/fjord-disk.img`), made empty of
/// [`RUN_IMAGE_BYTES`] if it does not exist yet; what the guest wrote on earlier boots stays.
pub fn run_image() -> Result<PathBuf> {
    let path = workspace::target_dir().join("fjord-disk.img");
    if !path.exists() {
        sized(&path, RUN_IMAGE_BYTES)?;
    }
    Ok(path)
}

/// A test boot's scratch image `target/disks/<name>.img`, emptied (all zero, sparse) to
/// [`SCRATCH_IMAGE_BYTES`].
pub fn scratch_image(name: &str) -> Result<PathBuf> {
    let dir = workspace::target_dir().join("disks");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(format!("{name}.img"));
    sized(&path, SCRATCH_IMAGE_BYTES)?;
    Ok(path)
}

/// Makes `path` an all-zero file of `bytes` (sparse: no block is written).
fn sized(path: &std::path::Path, bytes: u64) -> Result<()> {
    let file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    file.set_len(bytes)
        .with_context(|| format!("sizing {} to {bytes} bytes", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scratch_image_is_emptied_each_time() {
        let path = scratch_image("xtask-unit-test").unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), SCRATCH_IMAGE_BYTES);
        std::fs::write(&path, b"left over").unwrap();
        let again = scratch_image("xtask-unit-test").unwrap();
        assert_eq!(again, path);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len() as u64, SCRATCH_IMAGE_BYTES);
        assert!(bytes.iter().all(|&b| b == 0));
        std::fs::remove_file(&path).unwrap();
    }
}
