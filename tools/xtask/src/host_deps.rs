//! Host packages Fjord needs (QEMU, the HTTP checks' `curl` and `promtool`, and whatever the
//! Linux baseline needs), installed with apt when we run as root, or named precisely when we
//! cannot install them.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

/// The QEMU binary Fjord boots with.
pub const QEMU_BINARY: &str = "qemu-system-x86_64";
/// The Debian package that provides [`QEMU_BINARY`].
pub const QEMU_PACKAGE: &str = "qemu-system-x86";

/// The command-line HTTP client the gateway's end-to-end checks drive (chunked uploads,
/// `Expect: 100-continue`).
pub const CURL_BINARY: &str = "curl";
/// The Debian package that provides [`CURL_BINARY`].
pub const CURL_PACKAGE: &str = "curl";
/// Prometheus's checker, which parses `/metrics` in the end-to-end checks.
pub const PROMTOOL_BINARY: &str = "promtool";
/// The Debian package that provides [`PROMTOOL_BINARY`] (with the Prometheus server, which
/// the checks never start).
pub const PROMTOOL_PACKAGE: &str = "prometheus";

/// Returns the path of `qemu-system-x86_64`, installing Debian's `qemu-system-x86` first if it is
/// missing and we are root.
pub fn ensure_qemu() -> Result<PathBuf> {
    ensure_program(QEMU_BINARY, QEMU_PACKAGE)
}

/// Returns the path of `curl`, installing Debian's `curl` first if it is missing and we are root.
pub fn ensure_curl() -> Result<PathBuf> {
    ensure_program(CURL_BINARY, CURL_PACKAGE)
}

/// Returns the path of `promtool`, installing Debian's `prometheus` first if it is missing and
/// we are root.
pub fn ensure_promtool() -> Result<PathBuf> {
    ensure_program(PROMTOOL_BINARY, PROMTOOL_PACKAGE)
}

/// Returns the path of `binary`, installing the Debian `package` that provides it first if it is
/// missing and we are root; otherwise fails saying what to install.
pub fn ensure_program(binary: &str, package: &str) -> Result<PathBuf> {
    if let Some(path) = find_on_path(binary) {
        return Ok(path);
    }
    // Threads of one process (tests run in parallel) install one at a time; whoever waited
    // looks again, since the one before may have installed it.
    let _one_at_a_time = INSTALLING.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(path) = find_on_path(binary) {
        return Ok(path);
    }
    if !is_root() {
        bail!(
            "{binary} is not on PATH. Install it with:\n    \
             sudo apt-get install {package}\n(or run `cargo xtask` as root to let it install it)"
        );
    }
    eprintln!("xtask: {binary} not found; installing Debian package {package}");
    install_debian_packages(&[package])?;
    find_on_path(binary)
        .with_context(|| format!("installed {package}, but {binary} is still not on PATH"))
}

/// Makes sure the Rust standard library for `target` is installed in the active toolchain.
///
/// rustup installs `rust-toolchain.toml`'s targets only when it installs the toolchain itself; a
/// machine that already had the pinned toolchain without them gets them here, with
/// `rustup target add`. Without rustup, fails naming what is missing.
pub fn ensure_rust_target(target: &str) -> Result<()> {
    if rust_target_installed(target) {
        return Ok(());
    }
    if find_on_path("rustup").is_none() {
        bail!(
            "the Rust target {target} is not installed and rustup is not on PATH: install it \
             with your toolchain's installer"
        );
    }
    eprintln!("xtask: Rust target {target} not installed; running `rustup target add {target}`");
    let status = Command::new("rustup")
        .args(["target", "add", target])
        .current_dir(crate::workspace::root())
        .stdin(Stdio::null())
        .status()
        .context("could not run rustup")?;
    if !status.success() || !rust_target_installed(target) {
        bail!("`rustup target add {target}` failed ({status})");
    }
    Ok(())
}

/// Whether the active toolchain's sysroot holds the standard library for `target`.
fn rust_target_installed(target: &str) -> bool {
    let Ok(out) = Command::new(std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into()))
        .args(["--print", "sysroot"])
        .current_dir(crate::workspace::root())
        .stderr(Stdio::null())
        .output()
    else {
        return false;
    };
    let sysroot = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    out.status.success()
        && Path::new(&sysroot)
            .join("lib/rustlib")
            .join(target)
            .join("lib")
            .is_dir()
}

/// Makes sure every named Debian package is installed: checks with `dpkg -s`, and installs the
/// missing ones with `apt-get` when running as root; otherwise fails naming what to install.
pub fn ensure_debian_packages(packages: &[&str]) -> Result<()> {
    let _one_at_a_time = INSTALLING.lock().unwrap_or_else(|e| e.into_inner());
    let missing: Vec<&str> = packages
        .iter()
        .copied()
        .filter(|package| !debian_package_installed(package))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !is_root() {
        bail!(
            "missing Debian packages: {list}. Install them with:\n    sudo apt-get install {list}",
            list = missing.join(" ")
        );
    }
    eprintln!("xtask: installing Debian packages: {}", missing.join(" "));
    install_debian_packages(&missing)
}

/// Whether `dpkg -s <package>` reports the package as installed.
pub fn debian_package_installed(package: &str) -> bool {
    Command::new("dpkg")
        .args(["-s", package])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// Runs `apt-get update` and `apt-get install -y --no-install-recommends <packages>`
/// non-interactively. Needs root.
fn install_debian_packages(packages: &[&str]) -> Result<()> {
    run_apt(&["update"])?;
    let mut args = vec!["install", "-y", "--no-install-recommends"];
    args.extend_from_slice(packages);
    run_apt(&args)
}

/// Held while xtask installs packages: two `apt-get`s at once fail on apt's lock.
static INSTALLING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs one `apt-get` command with no terminal interaction, failing on a non-zero exit. An
/// `apt-get` of another process holding apt's lock is waited for (up to five minutes).
fn run_apt(args: &[&str]) -> Result<()> {
    let status = Command::new("apt-get")
        .args(["-o", "DPkg::Lock::Timeout=300"])
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .status()
        .context("could not start apt-get (is this a Debian-based system?)")?;
    if !status.success() {
        bail!("`apt-get {}` failed ({status})", args.join(" "));
    }
    Ok(())
}

/// The first executable file named `name` in a directory of `$PATH`.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

/// Whether `path` is a regular file with an execute bit set.
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// Whether this process runs with effective user id 0 (read from `/proc/self/status`).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| effective_uid(&status))
        == Some(0)
}

/// The effective uid from the text of `/proc/<pid>/status` (`Uid: real effective saved fs`).
fn effective_uid(status: &str) -> Option<u32> {
    let line = status.lines().find(|line| line.starts_with("Uid:"))?;
    line["Uid:".len()..].split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn effective_uid_is_the_second_uid_field() {
        let status =
            "Name:\tcat\nUmask:\t0022\nUid:\t1000\t0\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\n";
        assert_eq!(effective_uid(status), Some(0));
        assert_eq!(effective_uid("Uid:\t1000\t1000\t1000\t1000\n"), Some(1000));
        assert_eq!(effective_uid("Name:\tcat\n"), None);
    }

    #[test]
    fn finds_sh_on_path() {
        assert!(find_on_path("sh").is_some());
        assert!(find_on_path("surely-not-a-program-fjord").is_none());
    }
}
