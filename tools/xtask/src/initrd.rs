//! Fjord's initrd: a cpio newc archive of the function modules, passed to QEMU with `-initrd`.
//!
//! Layout: `fjord/README`, and each function module built from `apps/` as
//! `functions/<name>.elf` (read by the kernel with `modules=initrd`).

use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::apps_build::{self, BuiltApp};
use crate::cpio::CpioWriter;
use crate::workspace;

/// What `fjord/README` in the initrd says.
const README_TEXT: &str = "Fjord initrd: function modules live under functions/<name>.elf.\n";

/// The archive's bytes: `fjord/README` and `functions/<name>.elf` for each of `functions`.
pub fn initrd_bytes(functions: &[BuiltApp]) -> Result<Vec<u8>> {
    let mut writer = CpioWriter::new();
    writer
        .file("fjord/README", 0o644, README_TEXT.as_bytes())
        .expect("fixed path is valid");
    for f in functions {
        let path = apps_build::initrd_path(&f.name);
        writer
            .file(&path, 0o755, &f.bytes)
            .map_err(|e| anyhow::anyhow!("adding {path} to the initrd: {e:?}"))?;
    }
    Ok(writer.finish())
}

/// Builds and validates the function modules, writes the initrd to
/// `<target>/fjord/initrd.cpio` and returns its path.
pub fn pack_initrd() -> Result<PathBuf> {
    let functions = apps_build::build_apps()?;
    let dir = workspace::target_dir().join("fjord");
    std::fs::create_dir_all(&dir).with_context(|| format!("could not create {}", dir.display()))?;
    let path = dir.join("initrd.cpio");
    std::fs::write(&path, initrd_bytes(&functions)?)
        .with_context(|| format!("could not write {}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initrd_holds_the_readme() {
        let bytes = initrd_bytes(&[]).unwrap();
        assert!(bytes.starts_with(b"070701"));
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains("fjord/README\0"));
        assert!(text.contains(README_TEXT));
        assert!(text.contains("TRAILER!!!"));
    }

    #[test]
    fn functions_go_under_functions() {
        let fixture = workspace::root().join("faas/tests/fixtures/hello-rela.elf");
        let bytes = std::fs::read(&fixture).unwrap();
        let plan = apps_build::check_module("hello", &bytes).unwrap();
        let app = BuiltApp {
            name: "hello".into(),
            path: fixture,
            bytes: bytes.clone(),
            plan,
        };
        let archive = initrd_bytes(&[app]).unwrap();
        let text = String::from_utf8_lossy(&archive);
        assert!(text.contains("functions/hello.elf\0"));
        assert!(archive.windows(bytes.len()).any(|w| w == bytes));
    }
}
