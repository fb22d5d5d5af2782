//! Building the Fjord kernel ELF with cargo.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};

use crate::workspace;

/// The kernel's package name.
pub const KERNEL_PACKAGE: &str = "fjord-kernel";
/// The target the kernel is built for.
pub const KERNEL_TARGET: &str = "x86_64-unknown-none";

/// Where `cargo build -p fjord-kernel --release --target x86_64-unknown-none` puts the kernel.
pub fn kernel_elf_path() -> PathBuf {
    workspace::target_dir()
        .join(KERNEL_TARGET)
        .join("release")
        .join(KERNEL_PACKAGE)
}

/// Builds the kernel in release mode and returns the path of its ELF. Cargo's output goes to the
/// terminal. The kernel's compiler flags come from `.cargo/config.toml` and its build script.
pub fn build_kernel() -> Result<PathBuf> {
    crate::host_deps::ensure_rust_target(KERNEL_TARGET)?;
    let mut command = workspace::cargo();
    command.args([
        "build",
        "--package",
        KERNEL_PACKAGE,
        "--release",
        "--target",
        KERNEL_TARGET,
    ]);
    let status = command
        .status()
        .with_context(|| format!("could not run `{}`", workspace::display_command(&command)))?;
    if !status.success() {
        bail!(
            "kernel build failed: `{}` ({status})",
            workspace::display_command(&command)
        );
    }
    let elf = kernel_elf_path();
    if !elf.is_file() {
        bail!(
            "kernel build succeeded but {} does not exist",
            elf.display()
        );
    }
    Ok(elf)
}
