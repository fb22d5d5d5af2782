//! The disk images xtask attaches as the guest's virtio-blk disk: a persistent one for
//! `cargo xtask run` (kept between boots) and a scratch one per test boot (emptied each time).
//! Both are raw, sparse files: the guest's sector `n` is the file's bytes `512 n ..`.

use crate::workspace;
use anyhow::{Context, Result, bail};
use fjord_fs::{BLOCK, BlockDevice, FileStore};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

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
    scratch_image_of(name, SCRATCH_IMAGE_BYTES)
}

/// Makes `path` an all-zero file of `bytes` (sparse: no block is written).
fn sized(path: &std::path::Path, bytes: u64) -> Result<()> {
    let file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    file.set_len(bytes)
        .with_context(|| format!("sizing {} to {bytes} bytes", path.display()))
}

/// [`scratch_image`] of `bytes` instead of [`SCRATCH_IMAGE_BYTES`] (a benchmark's large saves).
pub fn scratch_image_of(name: &str, bytes: u64) -> Result<PathBuf> {
    let dir = workspace::target_dir().join("disks");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(format!("{name}.img"));
    sized(&path, bytes)?;
    Ok(path)
}

/// A disk image as the store's block device (read-only unless opened for writing).
pub struct ImageBlocks {
    file: File,
    blocks: u64,
}

impl ImageBlocks {
    /// Opens `path` for reading.
    pub fn open(path: &Path) -> Result<ImageBlocks> {
        let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
        let blocks = file.metadata()?.len() / BLOCK as u64;
        Ok(ImageBlocks { file, blocks })
    }

    /// Opens `path` for reading and writing (for tests that build an image as the guest would).
    pub fn open_writable(path: &Path) -> Result<ImageBlocks> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .with_context(|| format!("opening {}", path.display()))?;
        let blocks = file.metadata()?.len() / BLOCK as u64;
        Ok(ImageBlocks { file, blocks })
    }
}

impl BlockDevice for ImageBlocks {
    type Error = std::io::ErrorKind;

    fn blocks(&self) -> u64 {
        self.blocks
    }

    fn read_block(&mut self, n: u64, buf: &mut [u8]) -> Result<(), Self::Error> {
        self.file
            .seek(SeekFrom::Start(n * BLOCK as u64))
            .and_then(|_| self.file.read_exact(buf))
            .map_err(|e| e.kind())
    }

    fn write_block(&mut self, n: u64, data: &[u8]) -> Result<(), Self::Error> {
        self.file
            .seek(SeekFrom::Start(n * BLOCK as u64))
            .and_then(|_| self.file.write_all(data))
            .map_err(|e| e.kind())
    }

    fn flush(&mut self) -> Result<(), Self::Error> {
        self.file.sync_data().map_err(|e| e.kind())
    }
}

/// The store on the image at `path`, mounted read-only.
pub fn mount(path: &Path) -> Result<FileStore<ImageBlocks>> {
    FileStore::mount(ImageBlocks::open(path)?)
        .map_err(|e| anyhow::anyhow!("{}: no Fjord file store ({e:?})", path.display()))
}

/// `cargo xtask disk ls`: the files on the image, with their sizes.
pub fn list(image: &Path, out: &mut impl Write) -> Result<()> {
    let store = mount(image)?;
    for f in store.files() {
        writeln!(out, "{:>10}  {}", f.len, f.name)?;
    }
    writeln!(
        out,
        "{} file(s), {} of {} blocks free (generation {})",
        store.files().len(),
        store.free_blocks(),
        store.blocks(),
        store.generation()
    )?;
    Ok(())
}

/// `cargo xtask disk get <file>`: the file `name` (`<namespace>/<name>`, as `ls` shows it)
/// copied to `to` (or standard output), its checksum verified.
pub fn get(image: &Path, name: &str, to: Option<&Path>) -> Result<()> {
    let mut store = mount(image)?;
    let data = match store.read(name) {
        Ok(d) => d,
        Err(fjord_fs::FsError::NotFound) => bail!("{}: no file {name}", image.display()),
        Err(e) => bail!("{}: reading {name}: {e:?}", image.display()),
    };
    match to {
        Some(path) => {
            std::fs::write(path, &data).with_context(|| format!("writing {}", path.display()))?
        }
        None => std::io::stdout().write_all(&data)?,
    }
    Ok(())
}

/// What the in-kernel disk tests leave on a test boot's scratch image: `filetest/dump.dat`,
/// 100,000 bytes of its second save. Checked from the host, through the image file QEMU wrote.
pub fn check_ktest_files(image: &Path) -> Result<()> {
    let mut store = mount(image)?;
    let data = store
        .read("filetest/dump.dat")
        .map_err(|e| anyhow::anyhow!("filetest/dump.dat: {e:?}"))?;
    let expected: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8 ^ 2).collect();
    if data != expected {
        bail!("filetest/dump.dat on the host differs from what the guest wrote");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ls_and_get_read_what_the_store_wrote_into_an_image_file() {
        let path = scratch_image("xtask-unit-test-ls-get").unwrap();
        let dev = ImageBlocks::open_writable(&path).unwrap();
        let (mut store, formatted) = FileStore::mount_or_format(dev).unwrap();
        assert!(formatted);
        store.write("app/a.txt", b"alpha").unwrap();
        store.write("app/big", &vec![9u8; 10_000]).unwrap();
        drop(store);
        let mut listing = Vec::new();
        list(&path, &mut listing).unwrap();
        let listing = String::from_utf8(listing).unwrap();
        assert!(listing.contains("         5  app/a.txt"), "{listing}");
        assert!(listing.contains("     10000  app/big"), "{listing}");
        assert!(listing.contains("2 file(s)"), "{listing}");
        let out = path.with_extension("out");
        get(&path, "app/big", Some(&out)).unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), vec![9u8; 10_000]);
        let missing = get(&path, "app/none", Some(&out)).unwrap_err();
        assert!(
            format!("{missing:#}").contains("no file app/none"),
            "{missing:#}"
        );
        // A file that is not an image holds no store, and says so.
        let not_store = mount(&out).map(drop).unwrap_err();
        assert!(
            format!("{not_store:#}").contains("no Fjord file store"),
            "{not_store:#}"
        );
        std::fs::remove_file(&out).unwrap();
        std::fs::remove_file(&path).unwrap();
    }

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
