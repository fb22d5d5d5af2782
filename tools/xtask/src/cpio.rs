//! A writer for cpio "newc" archives (magic `070701`), the format of Linux's initramfs and of
//! Fjord's initrd, built in memory.
//!
//! Each entry is a 110-byte ASCII header (13 fields of 8 hex digits), the NUL-terminated name
//! padded to a multiple of 4 bytes (counting the header), then the data padded to 4 bytes. The
//! archive ends with an entry named `TRAILER!!!`. Timestamps and owners are 0 so that archives are
//! reproducible.

use std::collections::BTreeSet;
use std::fmt;

/// File type bits of `mode` (as in `st_mode`).
pub const S_IFMT: u32 = 0o170_000;
/// Regular file.
pub const S_IFREG: u32 = 0o100_000;
/// Directory.
pub const S_IFDIR: u32 = 0o040_000;
/// Symbolic link (the data is the target).
pub const S_IFLNK: u32 = 0o120_000;
/// Character device.
pub const S_IFCHR: u32 = 0o020_000;

/// The magic that starts every newc header.
const MAGIC: &str = "070701";
/// The name of the last entry.
const TRAILER: &str = "TRAILER!!!";
/// Size of a newc header.
const HEADER_LEN: usize = 110;

/// Why an entry cannot be added.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CpioError {
    /// The path is empty, or has `.`/`..` or empty components.
    BadPath(String),
    /// The path was already added.
    Duplicate(String),
    /// The data is larger than a newc size field (4 GiB - 1).
    TooLarge(String),
}

impl fmt::Display for CpioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CpioError::BadPath(path) => write!(f, "cpio: bad path {path:?}"),
            CpioError::Duplicate(path) => write!(f, "cpio: {path:?} added twice"),
            CpioError::TooLarge(path) => write!(f, "cpio: {path:?} is larger than 4 GiB"),
        }
    }
}

impl std::error::Error for CpioError {}

/// One archive member: a path (relative; a leading `/` is dropped), a full `st_mode` (type and
/// permission bits), its bytes, and for device nodes the device numbers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Path inside the archive, e.g. `fjord/README`.
    pub path: String,
    /// Type and permission bits, e.g. `S_IFREG | 0o644`.
    pub mode: u32,
    /// File contents, or the target of a symbolic link; empty for directories and devices.
    pub data: Vec<u8>,
    /// Major and minor device number of a device node.
    pub rdev: (u32, u32),
}

impl Entry {
    /// A regular file with permission bits `perm`.
    pub fn file(path: impl Into<String>, perm: u32, data: impl Into<Vec<u8>>) -> Entry {
        Entry {
            path: path.into(),
            mode: S_IFREG | (perm & 0o7777),
            data: data.into(),
            rdev: (0, 0),
        }
    }
}

/// An archive being written. Parent directories of files are added automatically (mode 0755)
/// before the file, as Linux's initramfs unpacker needs them to exist first.
#[derive(Debug)]
pub struct CpioWriter {
    /// The bytes so far.
    bytes: Vec<u8>,
    /// Inode number for the next entry (starting at 1; every entry has its own).
    next_ino: u32,
    /// Every path added so far.
    paths: BTreeSet<String>,
}

impl Default for CpioWriter {
    fn default() -> Self {
        CpioWriter::new()
    }
}

impl CpioWriter {
    /// An empty archive.
    pub fn new() -> CpioWriter {
        CpioWriter {
            bytes: Vec::new(),
            next_ino: 1,
            paths: BTreeSet::new(),
        }
    }

    /// Adds a regular file with permission bits `perm`.
    pub fn file(&mut self, path: &str, perm: u32, data: &[u8]) -> Result<(), CpioError> {
        self.add(&Entry::file(path, perm, data))
    }

    /// Adds a directory with permission bits `perm`.
    pub fn dir(&mut self, path: &str, perm: u32) -> Result<(), CpioError> {
        self.add(&Entry {
            path: path.into(),
            mode: S_IFDIR | (perm & 0o7777),
            data: Vec::new(),
            rdev: (0, 0),
        })
    }

    /// Adds a symbolic link at `path` pointing to `target`.
    pub fn symlink(&mut self, path: &str, target: &str) -> Result<(), CpioError> {
        self.add(&Entry {
            path: path.into(),
            mode: S_IFLNK | 0o777,
            data: target.into(),
            rdev: (0, 0),
        })
    }

    /// Adds a character device node (e.g. `dev/console`, 5:1).
    pub fn char_device(
        &mut self,
        path: &str,
        perm: u32,
        major: u32,
        minor: u32,
    ) -> Result<(), CpioError> {
        self.add(&Entry {
            path: path.into(),
            mode: S_IFCHR | (perm & 0o7777),
            data: Vec::new(),
            rdev: (major, minor),
        })
    }

    /// Adds any entry, after its missing parent directories.
    pub fn add(&mut self, entry: &Entry) -> Result<(), CpioError> {
        let path = normalize(&entry.path)?;
        if self.paths.contains(&path) {
            // A directory added implicitly before may be added again explicitly: keep the first.
            if entry.mode & S_IFMT == S_IFDIR {
                return Ok(());
            }
            return Err(CpioError::Duplicate(path));
        }
        let size =
            u32::try_from(entry.data.len()).map_err(|_| CpioError::TooLarge(path.clone()))?;
        let mut parent = String::new();
        for component in path
            .split('/')
            .collect::<Vec<_>>()
            .split_last()
            .map_or(&[][..], |(_, dirs)| dirs)
        {
            if !parent.is_empty() {
                parent.push('/');
            }
            parent.push_str(component);
            if !self.paths.contains(&parent) {
                let ino = self.take_ino();
                self.write_entry(&parent, ino, S_IFDIR | 0o755, 2, (0, 0), &[]);
                self.paths.insert(parent.clone());
            }
        }
        let nlink = if entry.mode & S_IFMT == S_IFDIR { 2 } else { 1 };
        let ino = self.take_ino();
        self.write_entry(
            &path,
            ino,
            entry.mode,
            nlink,
            entry.rdev,
            &entry.data[..size as usize],
        );
        self.paths.insert(path);
        Ok(())
    }

    /// Appends the trailer and returns the archive.
    pub fn finish(mut self) -> Vec<u8> {
        self.write_entry(TRAILER, 0, 0, 1, (0, 0), &[]);
        self.bytes
    }

    /// The next inode number.
    fn take_ino(&mut self) -> u32 {
        let ino = self.next_ino;
        self.next_ino += 1;
        ino
    }

    /// Writes one header, name and data with their padding.
    fn write_entry(
        &mut self,
        name: &str,
        ino: u32,
        mode: u32,
        nlink: u32,
        rdev: (u32, u32),
        data: &[u8],
    ) {
        let fields = [
            ino,
            mode,
            0, // uid
            0, // gid
            nlink,
            0, // mtime
            data.len() as u32,
            0, // devmajor
            0, // devminor
            rdev.0,
            rdev.1,
            name.len() as u32 + 1, // namesize counts the NUL
            0,                     // check (only used by the "070702" crc format)
        ];
        let start = self.bytes.len();
        self.bytes.extend_from_slice(MAGIC.as_bytes());
        for field in fields {
            self.bytes
                .extend_from_slice(format!("{field:08X}").as_bytes());
        }
        debug_assert_eq!(self.bytes.len() - start, HEADER_LEN);
        self.bytes.extend_from_slice(name.as_bytes());
        self.bytes.push(0);
        self.pad();
        self.bytes.extend_from_slice(data);
        self.pad();
    }

    /// Pads with NULs to a multiple of 4 bytes.
    fn pad(&mut self) {
        while !self.bytes.len().is_multiple_of(4) {
            self.bytes.push(0);
        }
    }
}

/// Builds an archive from `entries` (plus their parent directories and the trailer).
pub fn archive(entries: &[Entry]) -> Result<Vec<u8>, CpioError> {
    let mut writer = CpioWriter::new();
    for entry in entries {
        writer.add(entry)?;
    }
    Ok(writer.finish())
}

/// Drops a leading `/` or `./` and rejects empty, `.` and `..` components.
fn normalize(path: &str) -> Result<String, CpioError> {
    let trimmed = path.trim_start_matches("./").trim_start_matches('/');
    let trimmed = trimmed.trim_end_matches('/');
    if trimmed.is_empty()
        || trimmed
            .split('/')
            .any(|part| part.is_empty() || part == "." || part == "..")
    {
        return Err(CpioError::BadPath(path.to_owned()));
    }
    Ok(trimmed.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A parsed header: (name, ino, mode, nlink, rdev, data).
    type Parsed = (String, u32, u32, u32, (u32, u32), Vec<u8>);

    /// Reads an archive back, checking magic, padding and the trailer.
    fn parse(bytes: &[u8]) -> Vec<Parsed> {
        let mut entries = Vec::new();
        let mut at = 0;
        loop {
            assert_eq!(at % 4, 0, "entry not 4-byte aligned");
            let header = std::str::from_utf8(&bytes[at..at + HEADER_LEN]).unwrap();
            assert_eq!(&header[..6], MAGIC);
            let field = |i: usize| u32::from_str_radix(&header[6 + 8 * i..14 + 8 * i], 16).unwrap();
            let (ino, mode, nlink, size, rdev) = (
                field(0),
                field(1),
                field(4),
                field(6) as usize,
                (field(9), field(10)),
            );
            let namesize = field(11) as usize;
            let name_start = at + HEADER_LEN;
            assert_eq!(
                bytes[name_start + namesize - 1],
                0,
                "name not NUL-terminated"
            );
            let name = std::str::from_utf8(&bytes[name_start..name_start + namesize - 1])
                .unwrap()
                .to_owned();
            let data_start = (name_start + namesize).next_multiple_of(4);
            let data = bytes[data_start..data_start + size].to_vec();
            at = (data_start + size).next_multiple_of(4);
            if name == TRAILER {
                assert_eq!(at, bytes.len(), "bytes after the trailer");
                return entries;
            }
            entries.push((name, ino, mode, nlink, rdev, data));
        }
    }

    #[test]
    fn empty_archive_is_just_the_trailer() {
        let bytes = CpioWriter::new().finish();
        assert!(bytes.starts_with(b"070701"));
        assert_eq!(bytes.len(), 124); // 110 + 11 ("TRAILER!!!\0") padded to 124
        assert!(parse(&bytes).is_empty());
    }

    #[test]
    fn files_get_parent_directories_and_padding() {
        let bytes = archive(&[
            Entry::file("/fjord/README", 0o644, b"Fjord initrd\n".to_vec()),
            Entry::file("fjord/apps/hello", 0o755, vec![0x7f, b'E', b'L', b'F', 1]),
        ])
        .unwrap();
        let entries = parse(&bytes);
        let names: Vec<&str> = entries.iter().map(|e| e.0.as_str()).collect();
        assert_eq!(
            names,
            ["fjord", "fjord/README", "fjord/apps", "fjord/apps/hello"]
        );
        assert_eq!(entries[0].2, S_IFDIR | 0o755);
        assert_eq!(entries[0].3, 2);
        assert_eq!(entries[1].2, S_IFREG | 0o644);
        assert_eq!(entries[1].5, b"Fjord initrd\n");
        assert_eq!(entries[3].5, [0x7f, b'E', b'L', b'F', 1]);
        let inos: BTreeSet<u32> = entries.iter().map(|e| e.1).collect();
        assert_eq!(inos.len(), entries.len(), "inode numbers must be unique");
    }

    #[test]
    fn links_and_devices() {
        let mut writer = CpioWriter::new();
        writer.dir("dev", 0o755).unwrap();
        writer.char_device("dev/console", 0o600, 5, 1).unwrap();
        writer.symlink("bin/sh", "busybox").unwrap();
        let entries = parse(&writer.finish());
        assert_eq!(entries[1].0, "dev/console");
        assert_eq!(entries[1].2, S_IFCHR | 0o600);
        assert_eq!(entries[1].4, (5, 1));
        assert_eq!(entries[3].0, "bin/sh");
        assert_eq!(entries[3].2, S_IFLNK | 0o777);
        assert_eq!(entries[3].5, b"busybox");
    }

    #[test]
    fn rejects_bad_and_duplicate_paths() {
        let mut writer = CpioWriter::new();
        assert_eq!(
            writer.file("", 0o644, b""),
            Err(CpioError::BadPath("".into()))
        );
        assert_eq!(
            writer.file("a/../b", 0o644, b""),
            Err(CpioError::BadPath("a/../b".into()))
        );
        writer.file("a/b", 0o644, b"1").unwrap();
        assert_eq!(
            writer.file("/a/b", 0o644, b"2"),
            Err(CpioError::Duplicate("a/b".into()))
        );
        writer.dir("a", 0o700).unwrap(); // already there implicitly: fine
    }

    /// Cross-checks with GNU cpio when it is installed (skipped otherwise).
    #[test]
    fn gnu_cpio_lists_the_archive() {
        use std::io::Write;
        use std::process::{Command, Stdio};
        if crate::host_deps::find_on_path("cpio").is_none() {
            eprintln!("cpio not installed: skipping the cross-check");
            return;
        }
        let bytes = archive(&[
            Entry::file("fjord/README", 0o644, b"x".to_vec()),
            Entry::file("odd-name.bin", 0o600, vec![1, 2, 3]),
        ])
        .unwrap();
        let mut child = Command::new("cpio")
            .args(["-t", "--quiet", "-H", "newc"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(&bytes).unwrap();
        let output = child.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert_eq!(
            String::from_utf8(output.stdout).unwrap(),
            "fjord\nfjord/README\nodd-name.bin\n"
        );
    }
}
