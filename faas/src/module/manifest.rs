//! The function manifest carried in a module's `.fjord_manifest` section.
//!
//! Format (version 1): UTF-8 text, one `key=value` per line, LF line endings. The first
//! non-comment line must be `fjord-manifest=1`. Blank lines and lines starting with `#` are
//! ignored; trailing NUL bytes (padding of a fixed-size static) are ignored. Keys may appear at
//! most once; unknown keys are errors, so a typo never silently falls back to a default.
//!
//! | key | value | default |
//! |---|---|---|
//! | `name` | `[a-z0-9_-]{1,64}` | required |
//! | `entry` | entry offset from the image base (number) | the ELF header's `e_entry` |
//! | `stack_size` | bytes, multiple of 4096, at least 4096 | 64 KiB |
//! | `heap_size` | bytes, multiple of 4096 | 1 MiB |
//! | `groundhog` | `restore` / `none` / `fresh` / `fork`: what happens to an instance between requests (see [`GroundhogMode`]); the reserved key's old values `on` and `off` read as `restore` | `restore` |
//! | `instances` | `pool` (instances kept between requests, as `groundhog` says) or `fork` (fork per request from a zygote: `groundhog=fork`, and the two keys may not both be given) | `pool` |
//! | `init` | `on` / `off`: the module has an `init` entry, run once per instance before the snapshot (set by `function!`) | `off` |
//! | `warmup` | the input `init` runs with (text to the end of the line, at most 1 KiB) | empty |
//! | `memory_limit` | bytes the function may `mmap` at run time (ArgBufs for calls, buffers), multiple of 4096 | 16 MiB |
//! | `time_limit_ms` | wall-clock limit of one invocation, nested calls included (1 ms to 10 min) | 1000 |
//! | `max_pds` | PDs one invocation may create with `cget` and hold at once (0 to 256) | 16 |
//! | `app` | the application whose key-value namespace the function shares: `[a-z0-9_]{1,64}`, and the function's name must start with `<app>-` | none: the function's own namespace |
//! | `kv_quota` | bytes the key-value namespace may hold (each entry counts its key, value and 64 bytes); at most 16 MiB | 256 KiB |
//! | `log_limit` | bytes one invocation may write to the console (0 to 1 MiB) | 16 KiB |
//! | `kind` | `function` (serves requests) or `program` (a μprocess with a `main`) | `function` |
//! | `max_processes` | μprocesses (zombies included) the trees a program starts may hold at once, every descendant counted against the program at the root (1 to 256) | 64 |
//!
//! Numbers are decimal or `0x` hexadecimal, optionally followed by `K` or `M` (KiB, MiB).
//! A module embeds the manifest with a static such as
//! `#[unsafe(link_section = ".fjord_manifest")] #[used] static M: [u8; N] = *b"...";`.

use crate::function_name::{FunctionName, NameError};
use alloc::string::String;
use core::fmt::{self, Write};
pub use fjord_groundhog::GroundhogMode;

/// The manifest format version this crate reads and writes.
pub const MANIFEST_VERSION: u32 = 1;
/// Default stack size (64 KiB).
pub const DEFAULT_STACK_SIZE: u64 = 64 * 1024;
/// Default heap size (1 MiB).
pub const DEFAULT_HEAP_SIZE: u64 = 1024 * 1024;
/// Largest stack or heap size a manifest may ask for (1 GiB).
pub const MAX_REGION_SIZE: u64 = 1 << 30;
/// Default run-time `mmap` allowance of one invocation (16 MiB).
pub const DEFAULT_MEMORY_LIMIT: u64 = 16 << 20;
/// Default time limit of one invocation, in milliseconds.
pub const DEFAULT_TIME_LIMIT_MS: u64 = 1000;
/// Largest time limit a manifest may ask for (10 minutes), in milliseconds.
pub const MAX_TIME_LIMIT_MS: u64 = 600_000;
/// Default bound on the PDs one invocation may create and hold at once.
pub const DEFAULT_MAX_PDS: u16 = 16;
/// Largest `max_pds` a manifest may ask for.
pub const MAX_MAX_PDS: u16 = 256;
/// Default bound on the μprocesses a program's trees hold at once.
pub const DEFAULT_MAX_PROCESSES: u16 = 64;
/// Largest `max_processes` a manifest may ask for (the kernel's process table).
pub const MAX_MAX_PROCESSES: u16 = 256;
/// Default size of a function's key-value namespace (256 KiB).
pub const DEFAULT_KV_QUOTA: u64 = 256 << 10;
/// Largest `kv_quota` a manifest may ask for (16 MiB).
pub const MAX_KV_QUOTA: u64 = 16 << 20;
/// Default console bytes one invocation may write (16 KiB).
pub const DEFAULT_LOG_LIMIT: u64 = 16 << 10;
/// Largest `log_limit` a manifest may ask for (1 MiB).
pub const MAX_LOG_LIMIT: u64 = 1 << 20;
/// Longest `app` name.
pub const MAX_APP_LEN: usize = 64;
/// Longest `warmup` input.
pub const MAX_WARMUP_LEN: usize = 1024;

/// What a module is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ModuleKind {
    /// A function: invoked per request.
    Function,
    /// A program: started as a μprocess that runs `main` until it exits.
    Program,
}

/// A parsed, validated manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    /// The function's name.
    pub name: FunctionName,
    /// Entry offset from the image base; `None` means the ELF header's entry point.
    pub entry: Option<u64>,
    /// Private stack size in bytes.
    pub stack_size: u64,
    /// Private heap size in bytes.
    pub heap_size: u64,
    /// Groundhog request isolation: what happens to an instance between requests.
    pub groundhog: GroundhogMode,
    /// Whether the module has an `init` entry, run once per instance before the snapshot.
    pub init: bool,
    /// The input `init` runs with.
    pub warmup: String,
    /// Time limit of one invocation in milliseconds (the APIC timer preempts it then).
    pub time_limit_ms: u64,
    /// Bytes one invocation may map with `mmap` at run time.
    pub memory_limit: u64,
    /// PDs one invocation may create and hold at once.
    pub max_pds: u16,
    /// The application whose key-value namespace the function shares (`None`: its own).
    pub app: Option<String>,
    /// Bytes the function's key-value namespace may hold.
    pub kv_quota: u64,
    /// Console bytes one invocation may write.
    pub log_limit: u64,
    /// Function or program.
    pub kind: ModuleKind,
    /// For a program: μprocesses its trees may hold at once (zombies included).
    pub max_processes: u16,
}

/// Why a manifest was rejected; `line` numbers count from 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ManifestError {
    /// The manifest is not UTF-8.
    NotUtf8,
    /// The first line is not `fjord-manifest=<version>`.
    MissingVersion,
    /// The version is not one this crate reads.
    UnsupportedVersion,
    /// A line has no `=`.
    MissingEquals {
        /// Line number.
        line: u32,
    },
    /// A key this version does not define.
    UnknownKey {
        /// Line number.
        line: u32,
    },
    /// A key given twice.
    DuplicateKey {
        /// Line number.
        line: u32,
    },
    /// A value that does not parse for its key.
    BadValue {
        /// Line number.
        line: u32,
    },
    /// A stack or heap size that is zero (stack), not page-aligned or above 1 GiB.
    BadSize {
        /// Line number.
        line: u32,
    },
    /// No `name` key.
    MissingName,
    /// The name is not `[a-z0-9_-]{1,64}`.
    InvalidName(NameError),
    /// The `app` is not `[a-z0-9_]{1,64}`, or the function's name does not start with
    /// `<app>-`.
    BadApp {
        /// Line number.
        line: u32,
    },
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ManifestError::NotUtf8 => f.write_str("manifest is not UTF-8"),
            ManifestError::MissingVersion => {
                f.write_str("manifest must start with fjord-manifest=1")
            }
            ManifestError::UnsupportedVersion => f.write_str("unsupported manifest version"),
            ManifestError::MissingEquals { line } => {
                write!(f, "manifest line {line}: expected key=value")
            }
            ManifestError::UnknownKey { line } => write!(f, "manifest line {line}: unknown key"),
            ManifestError::DuplicateKey { line } => {
                write!(f, "manifest line {line}: duplicate key")
            }
            ManifestError::BadValue { line } => write!(f, "manifest line {line}: invalid value"),
            ManifestError::BadSize { line } => {
                write!(
                    f,
                    "manifest line {line}: size must be a multiple of 4096, at most 1 GiB"
                )
            }
            ManifestError::MissingName => f.write_str("manifest has no name"),
            ManifestError::InvalidName(e) => write!(f, "manifest name: {e}"),
            ManifestError::BadApp { line } => write!(
                f,
                "manifest line {line}: app must be [a-z0-9_]{{1,64}} and the function's name must start with <app>-"
            ),
        }
    }
}

/// Parses a number: decimal or `0x` hex, optional `K`/`M` suffix.
fn parse_number(s: &str) -> Option<u64> {
    let (digits, scale) = match s.as_bytes().last()? {
        b'K' => (&s[..s.len() - 1], 1024),
        b'M' => (&s[..s.len() - 1], 1024 * 1024),
        _ => (s, 1),
    };
    let n = match digits.strip_prefix("0x") {
        Some(hex) if !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()) => {
            u64::from_str_radix(hex, 16).ok()?
        }
        Some(_) => return None,
        None if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => {
            digits.parse().ok()?
        }
        None => return None,
    };
    n.checked_mul(scale)
}

fn parse_size(value: &str, line: u32, min: u64) -> Result<u64, ManifestError> {
    let n = parse_number(value).ok_or(ManifestError::BadValue { line })?;
    if n < min || !n.is_multiple_of(4096) || n > MAX_REGION_SIZE {
        return Err(ManifestError::BadSize { line });
    }
    Ok(n)
}

impl Manifest {
    /// A manifest for `name` with every other field at its default.
    pub fn new(name: FunctionName) -> Self {
        Manifest {
            name,
            entry: None,
            stack_size: DEFAULT_STACK_SIZE,
            heap_size: DEFAULT_HEAP_SIZE,
            groundhog: GroundhogMode::Restore,
            init: false,
            warmup: String::new(),
            time_limit_ms: DEFAULT_TIME_LIMIT_MS,
            memory_limit: DEFAULT_MEMORY_LIMIT,
            max_pds: DEFAULT_MAX_PDS,
            app: None,
            kv_quota: DEFAULT_KV_QUOTA,
            log_limit: DEFAULT_LOG_LIMIT,
            kind: ModuleKind::Function,
            max_processes: DEFAULT_MAX_PROCESSES,
        }
    }

    /// The name of the function's key-value namespace: its `app`, else its own name.
    pub fn namespace(&self) -> &str {
        self.app.as_deref().unwrap_or(self.name.as_str())
    }

    /// The time limit of one invocation, in milliseconds.
    pub fn time_limit_ms(&self) -> u64 {
        self.time_limit_ms
    }

    /// Parses the raw bytes of a `.fjord_manifest` section.
    pub fn parse(bytes: &[u8]) -> Result<Self, ManifestError> {
        let end = bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        let text = core::str::from_utf8(&bytes[..end]).map_err(|_| ManifestError::NotUtf8)?;
        let mut lines = text
            .split('\n')
            .enumerate()
            .map(|(i, l)| {
                (
                    u32::try_from(i + 1).unwrap_or(u32::MAX),
                    l.trim_end_matches('\r'),
                )
            })
            .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
        match lines.next() {
            Some((_, l)) if l.trim() == "fjord-manifest=1" => {}
            Some((_, l)) if l.trim().starts_with("fjord-manifest=") => {
                return Err(ManifestError::UnsupportedVersion);
            }
            _ => return Err(ManifestError::MissingVersion),
        }
        let mut name = None;
        let (mut entry, mut stack_size, mut heap_size) =
            (None, DEFAULT_STACK_SIZE, DEFAULT_HEAP_SIZE);
        let mut groundhog = GroundhogMode::Restore;
        let (mut init, mut warmup) = (false, String::new());
        let mut time_limit_ms = DEFAULT_TIME_LIMIT_MS;
        let mut memory_limit = DEFAULT_MEMORY_LIMIT;
        let (mut max_pds, mut app, mut app_line) = (DEFAULT_MAX_PDS, None, 0);
        let (mut kv_quota, mut log_limit) = (DEFAULT_KV_QUOTA, DEFAULT_LOG_LIMIT);
        let mut kind = ModuleKind::Function;
        let mut max_processes = DEFAULT_MAX_PROCESSES;
        let mut seen = [false; 16];
        for (line, l) in lines {
            let (key, value) = l
                .split_once('=')
                .ok_or(ManifestError::MissingEquals { line })?;
            let (key, value) = (key.trim(), value.trim());
            let slot = match key {
                "name" => 0,
                "entry" => 1,
                "stack_size" => 2,
                "heap_size" => 3,
                "groundhog" => 4,
                "max_processes" => 5,
                "time_limit_ms" => 6,
                "memory_limit" => 7,
                "max_pds" => 8,
                "app" => 9,
                "kv_quota" => 10,
                "log_limit" => 11,
                "kind" => 12,
                "init" => 13,
                "warmup" => 14,
                "instances" => 15,
                _ => return Err(ManifestError::UnknownKey { line }),
            };
            if core::mem::replace(&mut seen[slot], true) {
                return Err(ManifestError::DuplicateKey { line });
            }
            let bad = ManifestError::BadValue { line };
            match slot {
                0 => name = Some(FunctionName::new(value).map_err(ManifestError::InvalidName)?),
                1 => entry = Some(parse_number(value).ok_or(bad)?),
                2 => stack_size = parse_size(value, line, 4096)?,
                3 => heap_size = parse_size(value, line, 0)?,
                4 if seen[15] => return Err(bad),
                4 => {
                    groundhog = match value {
                        "on" | "off" => GroundhogMode::Restore,
                        v => GroundhogMode::parse(v).ok_or(bad)?,
                    }
                }
                15 => match value {
                    "pool" if !seen[4] => {}
                    "fork" if !seen[4] => groundhog = GroundhogMode::Fork,
                    _ => return Err(bad),
                },
                13 => {
                    init = match value {
                        "on" => true,
                        "off" => false,
                        _ => return Err(bad),
                    }
                }
                14 => {
                    if value.len() > MAX_WARMUP_LEN {
                        return Err(bad);
                    }
                    warmup = String::from(value);
                }
                5 => {
                    max_processes = parse_number(value)
                        .filter(|n| (1..=u64::from(MAX_MAX_PROCESSES)).contains(n))
                        .ok_or(bad)? as u16
                }
                7 => memory_limit = parse_size(value, line, 0)?,
                8 => {
                    max_pds = parse_number(value)
                        .filter(|n| *n <= u64::from(MAX_MAX_PDS))
                        .ok_or(bad)? as u16
                }
                9 => {
                    let ok = (1..=MAX_APP_LEN).contains(&value.len())
                        && value
                            .bytes()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
                    if !ok {
                        return Err(ManifestError::BadApp { line });
                    }
                    app = Some(String::from(value));
                    app_line = line;
                }
                10 => {
                    kv_quota = parse_number(value)
                        .filter(|n| *n <= MAX_KV_QUOTA)
                        .ok_or(bad)?
                }
                12 => {
                    kind = match value {
                        "function" => ModuleKind::Function,
                        "program" => ModuleKind::Program,
                        _ => return Err(bad),
                    }
                }
                11 => {
                    log_limit = parse_number(value)
                        .filter(|n| *n <= MAX_LOG_LIMIT)
                        .ok_or(bad)?
                }
                _ => {
                    time_limit_ms = parse_number(value)
                        .filter(|n| (1..=MAX_TIME_LIMIT_MS).contains(n))
                        .ok_or(bad)?
                }
            }
        }
        let name: FunctionName = name.ok_or(ManifestError::MissingName)?;
        if let Some(app) = &app {
            let member = name
                .as_str()
                .strip_prefix(app.as_str())
                .is_some_and(|rest| rest.len() > 1 && rest.starts_with('-'));
            if !member {
                return Err(ManifestError::BadApp { line: app_line });
            }
        }
        Ok(Manifest {
            name,
            entry,
            stack_size,
            heap_size,
            groundhog,
            init,
            warmup,
            time_limit_ms,
            memory_limit,
            max_pds,
            app,
            kv_quota,
            log_limit,
            kind,
            max_processes,
        })
    }

    /// Serializes to the canonical text form (every key, sizes in hex), which [`Manifest::parse`]
    /// reads back to an equal manifest.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        // Writing to a String cannot fail.
        let _ = writeln!(s, "fjord-manifest={MANIFEST_VERSION}");
        let _ = writeln!(s, "name={}", self.name);
        if let Some(e) = self.entry {
            let _ = writeln!(s, "entry={e:#x}");
        }
        let _ = writeln!(s, "stack_size={:#x}", self.stack_size);
        let _ = writeln!(s, "heap_size={:#x}", self.heap_size);
        let _ = writeln!(s, "groundhog={}", self.groundhog);
        if self.init {
            let _ = writeln!(s, "init=on");
        }
        if !self.warmup.is_empty() {
            let _ = writeln!(s, "warmup={}", self.warmup);
        }
        let _ = writeln!(s, "time_limit_ms={}", self.time_limit_ms);
        let _ = writeln!(s, "memory_limit={:#x}", self.memory_limit);
        let _ = writeln!(s, "max_pds={}", self.max_pds);
        if let Some(app) = &self.app {
            let _ = writeln!(s, "app={app}");
        }
        let _ = writeln!(s, "kv_quota={:#x}", self.kv_quota);
        let _ = writeln!(s, "log_limit={:#x}", self.log_limit);
        if self.kind == ModuleKind::Program {
            let _ = writeln!(s, "kind=program");
        }
        if self.max_processes != DEFAULT_MAX_PROCESSES {
            let _ = writeln!(s, "max_processes={}", self.max_processes);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_full_manifest_with_padding_and_comments() {
        let text = b"# hello function\nfjord-manifest=1\nname=hello\r\nentry=0x12d0\n\nstack_size=128K\nheap_size = 2M\ngroundhog=on\n\0\0\0";
        let m = Manifest::parse(text).unwrap();
        assert_eq!(m.name.as_str(), "hello");
        assert_eq!(m.entry, Some(0x12d0));
        assert_eq!((m.stack_size, m.heap_size), (128 * 1024, 2 * 1024 * 1024));
        assert_eq!(m.groundhog, GroundhogMode::Restore);
        assert!(!m.init && m.warmup.is_empty());
        let m = Manifest::parse(
            b"fjord-manifest=1\nname=f\ngroundhog=fresh\ninit=on\nwarmup=op=a&b=1\n",
        )
        .unwrap();
        assert_eq!(m.groundhog, GroundhogMode::Fresh);
        let fork = Manifest::parse(b"fjord-manifest=1\nname=f\ninstances=fork\n").unwrap();
        assert_eq!(fork.groundhog, GroundhogMode::Fork);
        let pool = Manifest::parse(b"fjord-manifest=1\nname=f\ninstances=pool\n").unwrap();
        assert_eq!(pool.groundhog, GroundhogMode::Restore);
        for both in [
            &b"fjord-manifest=1\nname=f\ninstances=fork\ngroundhog=none\n"[..],
            b"fjord-manifest=1\nname=f\ngroundhog=none\ninstances=fork\n",
            b"fjord-manifest=1\nname=f\ninstances=forks\n",
        ] {
            assert!(matches!(
                Manifest::parse(both),
                Err(ManifestError::BadValue { .. })
            ));
        }
        assert!(m.init);
        assert_eq!(m.warmup, "op=a&b=1");
        let long = alloc::format!("fjord-manifest=1\nname=f\nwarmup={}\n", "x".repeat(1025));
        assert!(Manifest::parse(long.as_bytes()).is_err());
        assert_eq!(m.time_limit_ms, DEFAULT_TIME_LIMIT_MS);
        let m = Manifest::parse(b"fjord-manifest=1\nname=f\ntime_limit_ms=250\n").unwrap();
        assert_eq!(m.time_limit_ms(), 250);
        for bad in [&b"0"[..], b"600001", b"x"] {
            let mut t = b"fjord-manifest=1\nname=f\ntime_limit_ms=".to_vec();
            t.extend_from_slice(bad);
            assert_eq!(
                Manifest::parse(&t),
                Err(ManifestError::BadValue { line: 3 })
            );
        }
    }

    #[test]
    fn defaults() {
        let m = Manifest::parse(b"fjord-manifest=1\nname=f\n").unwrap();
        assert_eq!(m, Manifest::new(FunctionName::new("f").unwrap()));
        assert_eq!(m.namespace(), "f");
    }

    #[test]
    fn tenant_bounds_and_app() {
        let m = Manifest::parse(
            b"fjord-manifest=1\nname=hotel-geo\napp=hotel\nmax_pds=0\nkv_quota=2M\nlog_limit=0\n",
        )
        .unwrap();
        assert_eq!(m.app.as_deref(), Some("hotel"));
        assert_eq!(m.namespace(), "hotel");
        assert_eq!((m.max_pds, m.kv_quota, m.log_limit), (0, 2 << 20, 0));
        let p = Manifest::parse(b"fjord-manifest=1\nname=init\nkind=program\n").unwrap();
        assert_eq!(p.kind, ModuleKind::Program);
        assert_eq!(
            Manifest::parse(b"fjord-manifest=1\nname=f\nkind=daemon\n"),
            Err(ManifestError::BadValue { line: 3 })
        );
    }

    #[test]
    fn rejections() {
        use ManifestError::*;
        let cases: &[(&[u8], ManifestError)] = &[
            (b"", MissingVersion),
            (b"name=f\n", MissingVersion),
            (b"fjord-manifest=2\nname=f", UnsupportedVersion),
            (b"\xff", NotUtf8),
            (b"fjord-manifest=1\n", MissingName),
            (
                b"fjord-manifest=1\nname=F",
                InvalidName(NameError::InvalidByte),
            ),
            (
                b"fjord-manifest=1\nname=f\nnoequals",
                MissingEquals { line: 3 },
            ),
            (
                b"fjord-manifest=1\nname=f\nstack=4096",
                UnknownKey { line: 3 },
            ),
            (
                b"fjord-manifest=1\nname=f\nname=g",
                DuplicateKey { line: 3 },
            ),
            (b"fjord-manifest=1\nname=f\nentry=0x", BadValue { line: 3 }),
            (b"fjord-manifest=1\nname=f\nentry=12a", BadValue { line: 3 }),
            (
                b"fjord-manifest=1\nname=f\nentry=0xffffffffffffffffK",
                BadValue { line: 3 },
            ),
            (
                b"fjord-manifest=1\nname=f\nstack_size=0",
                BadSize { line: 3 },
            ),
            (
                b"fjord-manifest=1\nname=f\nheap_size=4097",
                BadSize { line: 3 },
            ),
            (
                b"fjord-manifest=1\nname=f\nheap_size=2048M",
                BadSize { line: 3 },
            ),
            (
                b"fjord-manifest=1\nname=f\ngroundhog=yes",
                BadValue { line: 3 },
            ),
            (
                b"fjord-manifest=1\nname=f\nisolation=none",
                UnknownKey { line: 3 },
            ),
            (
                b"fjord-manifest=1\nname=f\nmax_pds=257",
                BadValue { line: 3 },
            ),
            (
                b"fjord-manifest=1\nname=f\nmax_processes=0",
                BadValue { line: 3 },
            ),
            (
                b"fjord-manifest=1\nname=f\nmax_processes=257",
                BadValue { line: 3 },
            ),
            (
                b"fjord-manifest=1\nname=f\nkv_quota=17M",
                BadValue { line: 3 },
            ),
            (
                b"fjord-manifest=1\nname=f\nlog_limit=2M",
                BadValue { line: 3 },
            ),
            (
                b"fjord-manifest=1\nname=hotel-x\napp=Hotel",
                BadApp { line: 3 },
            ),
            (b"fjord-manifest=1\nname=hotel-x\napp=", BadApp { line: 3 }),
            // A function joins only the application its name says it belongs to.
            (
                b"fjord-manifest=1\nname=evil\napp=hotel",
                BadApp { line: 3 },
            ),
            (
                b"fjord-manifest=1\nname=hotelx\napp=hotel",
                BadApp { line: 3 },
            ),
            (
                b"fjord-manifest=1\nname=hotel-\napp=hotel",
                BadApp { line: 3 },
            ),
            (
                b"fjord-manifest=1\nname=hotel\napp=hotel",
                BadApp { line: 3 },
            ),
        ];
        for (text, err) in cases {
            assert_eq!(
                Manifest::parse(text),
                Err(*err),
                "{}",
                String::from_utf8_lossy(text)
            );
        }
    }

    proptest! {
        #[test]
        fn round_trips(name in "[a-z0-9_-]{1,64}", entry in any::<Option<u64>>(),
                       stack in 1u64..=(1 << 18), heap in 0u64..=(1 << 18),
                       groundhog in 0usize..4,
                       init in any::<bool>(), warmup in "[a-z0-9=&]{0,20}",
                       limit in 1u64..=MAX_TIME_LIMIT_MS, mem in 0u64..=(1 << 18),
                       max_pds in 0..=MAX_MAX_PDS, in_app in any::<bool>(),
                       kv_quota in 0..=MAX_KV_QUOTA, log_limit in 0..=MAX_LOG_LIMIT,
                       max_processes in 1..=MAX_MAX_PROCESSES) {
            let (name, app) = if in_app {
                (alloc::format!("app-{}", &name[..name.len().min(60)]), Some(String::from("app")))
            } else {
                (name, None)
            };
            let m = Manifest {
                name: FunctionName::new(&name).unwrap(),
                entry,
                stack_size: stack * 4096,
                heap_size: heap * 4096,
                groundhog: GroundhogMode::ALL[groundhog],
                init,
                warmup,
                time_limit_ms: limit,
                memory_limit: mem * 4096,
                max_pds,
                app,
                kv_quota,
                log_limit,
                kind: if in_app { ModuleKind::Program } else { ModuleKind::Function },
                max_processes,
            };
            prop_assert_eq!(Manifest::parse(m.to_text().as_bytes()), Ok(m));
        }

        #[test]
        fn never_panics(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
            let _ = Manifest::parse(&bytes);
        }
    }
}
