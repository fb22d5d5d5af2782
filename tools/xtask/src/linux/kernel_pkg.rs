//! Debian's kernel and busybox for the Linux guest, taken from their packages without
//! installing them: `apt-get download` the `.deb` into a cache directory and unpack only the
//! files we need (`dpkg-deb --fsys-tarfile | tar -x`, the selective form of `dpkg -x`; the
//! kernel's 390 MB of modules are never written). Nothing on the host's `/boot` or bootloader
//! changes, and root is not needed once the package lists exist.
//!
//! Cache layout under `<target>/linux-guest/`:
//! `debs/*.deb`, `kernel/<package>/boot/vmlinuz-<release>`, `kernel/<package>/vmlinux`
//! (decompressed from the bzImage when it carries a PVH note), `busybox/bin/busybox`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

use super::kernel_image::{self, Compression};
use crate::host_deps;

/// The Debian metapackage that names the current default kernel.
pub const KERNEL_METAPACKAGE: &str = "linux-image-amd64";
/// The Debian package with a statically linked busybox.
pub const BUSYBOX_PACKAGE: &str = "busybox-static";

/// How the guest kernel is booted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelFormat {
    /// The uncompressed ELF, entered through its PVH note (no in-guest decompression).
    Vmlinux,
    /// The compressed bzImage as shipped (decompresses itself in the guest).
    BzImage,
}

/// The guest kernel: which file QEMU loads and what it is.
#[derive(Clone, Debug)]
pub struct GuestKernel {
    /// The Debian package it came from (`linux-image-6.1.0-56-amd64`).
    pub package: String,
    /// The kernel release (`6.1.0-56-amd64`).
    pub release: String,
    /// The file given to `-kernel`.
    pub image: PathBuf,
    /// Whether `image` is the vmlinux or the bzImage.
    pub format: KernelFormat,
}

/// Makes sure the guest kernel is in `cache` (downloading and unpacking it once) and returns it.
pub fn ensure_kernel(cache: &Path) -> Result<GuestKernel> {
    let package = match resolve_kernel_package() {
        Ok(package) => package,
        Err(error) => match cached_kernel_packages(cache).pop() {
            Some(package) => {
                eprintln!("linux: {error:#}; using the cached {package}");
                package
            }
            None => return Err(error),
        },
    };
    let dir = cache.join("kernel").join(&package);
    if find_vmlinuz(&dir).is_none() {
        let deb = download(cache, &package)?;
        eprintln!("linux: unpacking /boot of {}", deb.display());
        extract(&deb, &dir, &["./boot"])?;
    }
    let (vmlinuz, release) =
        find_vmlinuz(&dir).with_context(|| format!("{package} has no /boot/vmlinuz-*"))?;
    let vmlinux = dir.join("vmlinux");
    if !vmlinux.is_file()
        && let Err(error) = decompress_vmlinux(&vmlinuz, &vmlinux)
    {
        eprintln!("linux: booting the bzImage, no usable vmlinux: {error:#}");
        return Ok(GuestKernel {
            package,
            release,
            image: vmlinuz,
            format: KernelFormat::BzImage,
        });
    }
    Ok(GuestKernel {
        package,
        release,
        image: vmlinux,
        format: KernelFormat::Vmlinux,
    })
}

/// The kernel modules a guest needs for a virtio-net card on microvm (found through ACPI), as
/// paths under `lib/modules/<release>/kernel/`, in load order: each after those it depends on
/// (Debian builds virtio, virtio-mmio and virtio-net as modules, and ships no `modules.dep`).
pub const NET_MODULES: &[&str] = &[
    "drivers/virtio/virtio_ring.ko",
    "drivers/virtio/virtio.ko",
    "drivers/virtio/virtio_mmio.ko",
    "net/core/failover.ko",
    "drivers/net/net_failover.ko",
    "drivers/net/virtio_net.ko",
];

/// Makes sure `kernel`'s [`NET_MODULES`] are unpacked in `cache` (once) and returns their
/// paths in load order.
pub fn ensure_net_modules(cache: &Path, kernel: &GuestKernel) -> Result<Vec<PathBuf>> {
    let dir = cache.join("kernel").join(&kernel.package);
    let members: Vec<String> = NET_MODULES
        .iter()
        .map(|m| format!("./lib/modules/{}/kernel/{m}", kernel.release))
        .collect();
    let paths: Vec<PathBuf> = members.iter().map(|m| dir.join(m)).collect();
    if !paths.iter().all(|p| p.is_file()) {
        let deb = download(cache, &kernel.package)?;
        eprintln!(
            "linux: unpacking the virtio-net modules of {}",
            deb.display()
        );
        let members: Vec<&str> = members.iter().map(String::as_str).collect();
        extract(&deb, &dir, &members)?;
    }
    if let Some(missing) = paths.iter().find(|p| !p.is_file()) {
        bail!("{} has no {}", kernel.package, missing.display());
    }
    Ok(paths)
}

/// Makes sure `file` (an absolute path in the package, `/usr/sbin/nginx`) of Debian's package
/// `package` is unpacked in `cache/<package>/` (downloaded once, never installed) and returns
/// its path there.
pub fn ensure_package_file(cache: &Path, package: &str, file: &str) -> Result<PathBuf> {
    let dir = cache.join(package);
    let path = dir.join(file.trim_start_matches('/'));
    if !path.is_file() {
        let deb = download(cache, package)?;
        extract(&deb, &dir, &[&format!(".{file}")])?;
        if !path.is_file() {
            bail!("{} holds no {file}", deb.display());
        }
    }
    Ok(path)
}

/// Makes sure busybox (static) is in `cache` and returns its path.
pub fn ensure_busybox(cache: &Path) -> Result<PathBuf> {
    let dir = cache.join("busybox");
    let busybox = dir.join("bin/busybox");
    if !busybox.is_file() {
        let deb = download(cache, BUSYBOX_PACKAGE)?;
        extract(&deb, &dir, &["./bin/busybox"])?;
        if !busybox.is_file() {
            bail!("{} holds no /bin/busybox", deb.display());
        }
    }
    Ok(busybox)
}

/// The kernel package `linux-image-amd64` depends on, from `apt-cache depends`.
fn resolve_kernel_package() -> Result<String> {
    let output = Command::new("apt-cache")
        .args(["depends", KERNEL_METAPACKAGE])
        .stderr(Stdio::piped())
        .output()
        .context("could not run apt-cache (is this a Debian system?)")?;
    let text = String::from_utf8_lossy(&output.stdout);
    match kernel_dependency(&text) {
        Some(package) if output.status.success() => Ok(package.to_owned()),
        _ => bail!(
            "apt-cache knows no {KERNEL_METAPACKAGE} (run `apt-get update` as root): {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ),
    }
}

/// The `linux-image-*` package named on a `Depends:` line of `apt-cache depends` output.
pub fn kernel_dependency(apt_cache_depends: &str) -> Option<&str> {
    apt_cache_depends.lines().find_map(|line| {
        let package = line.trim().strip_prefix("Depends:")?.trim();
        let package = package.trim_start_matches('<').trim_end_matches('>');
        package.starts_with("linux-image-").then_some(package)
    })
}

/// Kernel packages already unpacked in the cache, sorted.
fn cached_kernel_packages(cache: &Path) -> Vec<String> {
    let mut packages: Vec<String> = fs::read_dir(cache.join("kernel"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| find_vmlinuz(&entry.path()).is_some())
        .filter_map(|entry| entry.file_name().into_string().ok())
        .collect();
    packages.sort();
    packages
}

/// `<dir>/boot/vmlinuz-<release>` and the release, if unpacked.
fn find_vmlinuz(dir: &Path) -> Option<(PathBuf, String)> {
    fs::read_dir(dir.join("boot"))
        .ok()?
        .flatten()
        .find_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let release = name.strip_prefix("vmlinuz-")?.to_owned();
            Some((entry.path(), release))
        })
}

/// Downloads `package`'s `.deb` into `<cache>/debs` (unless there) and returns its path.
fn download(cache: &Path, package: &str) -> Result<PathBuf> {
    let debs = cache.join("debs");
    fs::create_dir_all(&debs).with_context(|| format!("creating {}", debs.display()))?;
    if let Some(deb) = find_deb(&debs, package) {
        return Ok(deb);
    }
    eprintln!("linux: apt-get download {package}");
    let mut command = Command::new("apt-get");
    command.arg("download").arg(package).current_dir(&debs);
    if host_deps::is_root() {
        // apt's `_apt` user cannot write into our cache; root downloads it itself, quietly.
        command.args(["-o", "APT::Sandbox::User=root"]);
    }
    let output = command.output().context("could not run apt-get")?;
    if !output.status.success() {
        bail!(
            "`apt-get download {package}` failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    find_deb(&debs, package).with_context(|| {
        format!(
            "apt-get download {package} left no .deb in {}",
            debs.display()
        )
    })
}

/// The `.deb` of `package` in `dir` (file names are `<package>_<version>_<arch>.deb`).
fn find_deb(dir: &Path, package: &str) -> Option<PathBuf> {
    let prefix = format!("{package}_");
    fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|path| {
            path.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".deb"))
        })
}

/// Unpacks `members` (files or directories, spelled as in the archive: `./boot`) of the data
/// archive of `deb` into `dir`: `dpkg-deb --fsys-tarfile deb | tar -x -C dir members…`.
fn extract(deb: &Path, dir: &Path, members: &[&str]) -> Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut dpkg = Command::new("dpkg-deb")
        .arg("--fsys-tarfile")
        .arg(deb)
        .stdout(Stdio::piped())
        .spawn()
        .context("could not run dpkg-deb")?;
    let tar_input = dpkg
        .stdout
        .take()
        .context("dpkg-deb's stdout is not piped")?;
    let tar = Command::new("tar")
        .arg("-x")
        .arg("-C")
        .arg(dir)
        .args(members)
        .stdin(tar_input)
        .status()
        .context("could not run tar");
    let dpkg = dpkg.wait().context("waiting for dpkg-deb")?;
    let tar = tar?;
    if !dpkg.success() || !tar.success() {
        bail!(
            "unpacking {} from {} failed (dpkg-deb {dpkg}, tar {tar})",
            members.join(" "),
            deb.display()
        );
    }
    Ok(())
}

/// Decompresses the kernel inside the bzImage `vmlinuz` into `vmlinux`, keeping it only if it
/// is an ELF with a PVH entry note.
fn decompress_vmlinux(vmlinuz: &Path, vmlinux: &Path) -> Result<()> {
    let image = fs::read(vmlinuz).with_context(|| format!("reading {}", vmlinuz.display()))?;
    let (range, compression) = kernel_image::bzimage_payload(&image)?;
    let (program, args) = compression.decompressor();
    let package = match compression {
        Compression::Xz => "xz-utils",
        Compression::Gzip => "gzip",
        Compression::Zstd => "zstd",
    };
    host_deps::ensure_debian_packages(&[package])?;
    eprintln!(
        "linux: decompressing the kernel ({} MB of {compression:?}) into {}",
        range.len() >> 20,
        vmlinux.display()
    );
    let elf = pipe_through(program, args, &image[range])?;
    if !kernel_image::has_pvh_note(&elf) {
        bail!("the decompressed kernel has no PVH entry note");
    }
    let partial = vmlinux.with_extension("partial");
    fs::write(&partial, &elf).with_context(|| format!("writing {}", partial.display()))?;
    fs::rename(&partial, vmlinux).with_context(|| format!("renaming to {}", vmlinux.display()))
}

/// Runs `program args` with `input` on stdin and returns its stdout.
fn pipe_through(program: &str, args: &[&str], input: &[u8]) -> Result<Vec<u8>> {
    use std::io::Write;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("could not run {program}"))?;
    let mut stdin = child.stdin.take().context("stdin is not piped")?;
    let input = input.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let output = child
        .wait_with_output()
        .with_context(|| format!("waiting for {program}"))?;
    let written = writer
        .join()
        .map_err(|_| anyhow::anyhow!("stdin writer panicked"))?;
    if !output.status.success() {
        bail!(
            "{program} {} failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    // A decompressor may stop reading after its stream (the kernel build appends the size after
    // it), so a broken pipe after a successful exit is fine; the caller checks the output.
    if let Err(error) = written
        && error.kind() != std::io::ErrorKind::BrokenPipe
    {
        return Err(error).with_context(|| format!("feeding {program}"));
    }
    Ok(output.stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_kernel_dependency() {
        let text = "linux-image-amd64\n  Depends: linux-image-6.1.0-56-amd64\n";
        assert_eq!(kernel_dependency(text), Some("linux-image-6.1.0-56-amd64"));
        let virtual_dep = "linux-image-amd64\n  Depends: <linux-image-6.1.0-9-amd64>\n";
        assert_eq!(
            kernel_dependency(virtual_dep),
            Some("linux-image-6.1.0-9-amd64")
        );
        assert_eq!(
            kernel_dependency("busybox-static\n  Conflicts: busybox\n"),
            None
        );
    }
}
