//! Fjord's initrd: a cpio newc archive of the function modules, passed to QEMU with `-initrd`.

use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::cpio::CpioWriter;
use crate::workspace;

/// What `fjord/README` in the initrd says.
const README_TEXT: &str = "Fjord initrd: function modules live under fjord/.\n";

/// The archive's bytes. For now it holds only `fjord/README`; the function modules built from
/// `apps/` will go under `fjord/` too.
pub fn initrd_bytes() -> Vec<u8> {
    let mut writer = CpioWriter::new();
    writer
        .file("fjord/README", 0o644, README_TEXT.as_bytes())
        .expect("fixed path is valid");
    writer.finish()
}

/// Writes the initrd to `<target>/fjord/initrd.cpio` and returns its path.
pub fn pack_initrd() -> Result<PathBuf> {
    let dir = workspace::target_dir().join("fjord");
    std::fs::create_dir_all(&dir).with_context(|| format!("could not create {}", dir.display()))?;
    let path = dir.join("initrd.cpio");
    std::fs::write(&path, initrd_bytes())
        .with_context(|| format!("could not write {}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initrd_holds_the_readme() {
        let bytes = initrd_bytes();
        assert!(bytes.starts_with(b"070701"));
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains("fjord/README\0"));
        assert!(text.contains(README_TEXT));
        assert!(text.contains("TRAILER!!!"));
    }
}
