//! The RDB loader: reads what [`super::write`] writes and what Redis (RDB versions 1 to 10)
//! writes for a keyspace of strings, from a source read in chunks, so a large file is never
//! held whole in memory.
//!
//! Accepted: the opcodes `AUX`, `SELECTDB 0`, `RESIZEDB`, `EXPIRETIME` (seconds),
//! `EXPIRETIME_MS`, `IDLE` and `FREQ` (skipped), `EOF`; values of type 0 (string) in any
//! string encoding: raw, the integers `0xC0`/`0xC1`/`0xC2`, LZF `0xC3`. Refused with an
//! error naming it: any other value type (lists, sets, hashes, sorted sets, streams,
//! modules), module AUX data, functions, a database other than 0. From version 5 on, the
//! CRC-64 after `EOF` is checked unless it is 0 (Redis's "checksum disabled"). As Redis does
//! when loading as a master, keys already expired are dropped.

use super::crc64::crc64;
use super::lzf;
use super::{
    OPCODE_AUX, OPCODE_EOF, OPCODE_EXPIRETIME, OPCODE_EXPIRETIME_MS, OPCODE_FREQ, OPCODE_IDLE,
    OPCODE_RESIZEDB, OPCODE_SELECTDB, RDB_VERSION, TYPE_STRING,
};
use crate::num::i64_to_vec;
use alloc::vec::Vec;
use core::fmt;

/// The largest string the loader accepts (the longest value Redis can hold).
pub const MAX_STRING: u64 = 512 << 20;

/// Why a file could not be loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoadError<E> {
    /// The source failed.
    Io(E),
    /// The file ends early.
    UnexpectedEof,
    /// It does not start with `REDIS`.
    BadSignature,
    /// A version other than 1 to 10.
    UnsupportedVersion(u32),
    /// A length with an undefined encoding, or too long.
    BadLength,
    /// A string with an undefined special encoding.
    BadStringEncoding(u8),
    /// An LZF string that does not decompress to its length.
    BadLzf,
    /// A value of a type other than string (the RDB type number).
    UnsupportedType(u8),
    /// An opcode this server cannot use (module AUX data `0xF7`, functions `0xF5`/`0xF6`).
    UnsupportedOpcode(u8),
    /// Keys of a database other than 0.
    UnsupportedDb(u64),
    /// The checksum after `EOF` is wrong.
    ChecksumMismatch {
        /// The file's.
        stored: u64,
        /// The loader's.
        computed: u64,
    },
    /// No memory for a string.
    OutOfMemory,
}

impl<E: fmt::Debug> fmt::Display for LoadError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Io(e) => write!(f, "read error: {e:?}"),
            LoadError::UnexpectedEof => write!(f, "unexpected end of file"),
            LoadError::BadSignature => write!(f, "wrong signature (not an RDB file)"),
            LoadError::UnsupportedVersion(v) => write!(f, "can't handle RDB format version {v}"),
            LoadError::BadLength => write!(f, "bad length encoding"),
            LoadError::BadStringEncoding(e) => write!(f, "unknown string encoding {e}"),
            LoadError::BadLzf => write!(f, "invalid LZF compressed string"),
            LoadError::UnsupportedType(t) => {
                write!(f, "value type {t} is not supported (only strings, type 0)")
            }
            LoadError::UnsupportedOpcode(o) => write!(f, "opcode {o:#x} is not supported"),
            LoadError::UnsupportedDb(d) => write!(f, "database {d} is not supported (only 0)"),
            LoadError::ChecksumMismatch { stored, computed } => write!(
                f,
                "RDB CRC error: stored {stored:#018x}, computed {computed:#018x}"
            ),
            LoadError::OutOfMemory => write!(f, "out of memory"),
        }
    }
}

/// What a load found besides the keys.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadSummary {
    /// The file's RDB version.
    pub version: u32,
    /// Keys passed to the caller.
    pub keys_loaded: u64,
    /// Keys dropped because they had expired.
    pub keys_expired: u64,
    /// The AUX fields, in file order.
    pub aux: Vec<(Vec<u8>, Vec<u8>)>,
    /// The checksum was checked (`false`: version below 5, or stored as 0).
    pub checksum_verified: bool,
}

/// Bytes read from the source at a time.
const READ_CHUNK: usize = 64 * 1024;

/// A buffered source that keeps the CRC of what was consumed: `crc` covers the buffers
/// before the current one, whose consumed part is `buf[..pos]`.
struct Reader<R> {
    read: R,
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    crc: u64,
}

impl<R, E> Reader<R>
where
    R: FnMut(&mut [u8]) -> Result<usize, E>,
{
    /// Adds the buffer, all consumed, to the CRC and refills it.
    fn refill(&mut self) -> Result<(), LoadError<E>> {
        self.crc = crc64(self.crc, &self.buf[..self.end]);
        self.pos = 0;
        self.end = 0;
        let n = (self.read)(&mut self.buf).map_err(LoadError::Io)?;
        if n == 0 {
            return Err(LoadError::UnexpectedEof);
        }
        self.end = n.min(self.buf.len());
        Ok(())
    }

    /// The CRC of everything consumed so far.
    fn crc(&self) -> u64 {
        crc64(self.crc, &self.buf[..self.pos])
    }

    fn byte(&mut self) -> Result<u8, LoadError<E>> {
        if self.pos == self.end {
            self.refill()?;
        }
        let b = self.buf[self.pos];
        self.pos += 1;
        Ok(b)
    }

    fn exact<const N: usize>(&mut self) -> Result<[u8; N], LoadError<E>> {
        let mut out = [0u8; N];
        for b in &mut out {
            *b = self.byte()?;
        }
        Ok(out)
    }

    /// `n` bytes as a vector, grown as they arrive (a corrupt length fails at the end of
    /// the file, not with a huge allocation).
    fn bytes(&mut self, n: u64) -> Result<Vec<u8>, LoadError<E>> {
        if n > MAX_STRING {
            return Err(LoadError::BadLength);
        }
        let n = n as usize;
        let mut out = Vec::new();
        out.try_reserve_exact(n.min(1 << 20))
            .map_err(|_| LoadError::OutOfMemory)?;
        while out.len() < n {
            if self.pos == self.end {
                self.refill()?;
            }
            let take = (n - out.len()).min(self.end - self.pos);
            if out.capacity() < out.len() + take {
                let want = (out.capacity() * 2).max(out.len() + take).min(n);
                out.try_reserve_exact(want - out.len())
                    .map_err(|_| LoadError::OutOfMemory)?;
            }
            out.extend_from_slice(&self.buf[self.pos..self.pos + take]);
            self.pos += take;
        }
        Ok(out)
    }

    /// A length (`rdbLoadLen`): the value, and whether it is a special string encoding.
    fn len(&mut self) -> Result<(u64, bool), LoadError<E>> {
        let b = self.byte()?;
        match b >> 6 {
            0 => Ok((u64::from(b & 0x3f), false)),
            1 => Ok(((u64::from(b & 0x3f) << 8) | u64::from(self.byte()?), false)),
            3 => Ok((u64::from(b & 0x3f), true)),
            _ => match b {
                0x80 => Ok((u64::from(u32::from_be_bytes(self.exact()?)), false)),
                0x81 => Ok((u64::from_be_bytes(self.exact()?), false)),
                _ => Err(LoadError::BadLength),
            },
        }
    }

    fn plain_len(&mut self) -> Result<u64, LoadError<E>> {
        match self.len()? {
            (n, false) => Ok(n),
            (_, true) => Err(LoadError::BadLength),
        }
    }

    /// A string in any encoding (`rdbGenericLoadStringObject`).
    fn string(&mut self) -> Result<Vec<u8>, LoadError<E>> {
        let (len, encoded) = self.len()?;
        if !encoded {
            return self.bytes(len);
        }
        match len {
            0 => Ok(i64_to_vec(i64::from(self.byte()? as i8))),
            1 => Ok(i64_to_vec(i64::from(i16::from_le_bytes(self.exact()?)))),
            2 => Ok(i64_to_vec(i64::from(i32::from_le_bytes(self.exact()?)))),
            3 => {
                let clen = self.plain_len()?;
                let ulen = self.plain_len()?;
                if ulen > MAX_STRING {
                    return Err(LoadError::BadLength);
                }
                let data = self.bytes(clen)?;
                lzf::decompress(&data, ulen as usize).ok_or(LoadError::BadLzf)
            }
            other => Err(LoadError::BadStringEncoding(other as u8)),
        }
    }
}

/// Loads an RDB file read through `read` (which fills its buffer and returns how many bytes
/// it put there, 0 at the end), calling `on_key(key, value, expire_at)` for each key that has
/// not expired at `now` (Unix milliseconds). Bytes after the checksum are not read.
pub fn load<R, E, K>(read: R, now: i64, mut on_key: K) -> Result<LoadSummary, LoadError<E>>
where
    R: FnMut(&mut [u8]) -> Result<usize, E>,
    K: FnMut(Vec<u8>, Vec<u8>, Option<i64>),
{
    let mut buf = Vec::new();
    buf.try_reserve_exact(READ_CHUNK)
        .map_err(|_| LoadError::OutOfMemory)?;
    buf.resize(READ_CHUNK, 0);
    let mut r = Reader {
        read,
        buf,
        pos: 0,
        end: 0,
        crc: 0,
    };
    let magic: [u8; 9] = r.exact()?;
    if &magic[..5] != b"REDIS" {
        return Err(LoadError::BadSignature);
    }
    // `atoi`: the leading digits.
    let version = magic[5..]
        .iter()
        .take_while(|c| c.is_ascii_digit())
        .fold(0u32, |v, c| v * 10 + u32::from(c - b'0'));
    if !(1..=RDB_VERSION).contains(&version) {
        return Err(LoadError::UnsupportedVersion(version));
    }
    let mut summary = LoadSummary {
        version,
        ..LoadSummary::default()
    };
    let mut expire_at: Option<i64> = None;
    loop {
        match r.byte()? {
            OPCODE_EXPIRETIME => {
                expire_at = Some(i64::from(i32::from_le_bytes(r.exact()?)) * 1000);
            }
            OPCODE_EXPIRETIME_MS => expire_at = Some(i64::from_le_bytes(r.exact()?)),
            OPCODE_FREQ => {
                r.byte()?;
            }
            OPCODE_IDLE => {
                r.plain_len()?;
            }
            OPCODE_EOF => break,
            OPCODE_SELECTDB => {
                let db = r.plain_len()?;
                if db != 0 {
                    return Err(LoadError::UnsupportedDb(db));
                }
            }
            OPCODE_RESIZEDB => {
                r.plain_len()?;
                r.plain_len()?;
            }
            OPCODE_AUX => {
                let key = r.string()?;
                let value = r.string()?;
                summary.aux.push((key, value));
            }
            TYPE_STRING => {
                let key = r.string()?;
                let value = r.string()?;
                match expire_at.take() {
                    Some(t) if t < now => summary.keys_expired += 1,
                    t => {
                        summary.keys_loaded += 1;
                        on_key(key, value, t);
                    }
                }
            }
            op @ 0xf5..=0xf7 => return Err(LoadError::UnsupportedOpcode(op)),
            other => return Err(LoadError::UnsupportedType(other)),
        }
    }
    if version >= 5 {
        let computed = r.crc();
        let stored = u64::from_le_bytes(r.exact()?);
        if stored != 0 {
            if stored != computed {
                return Err(LoadError::ChecksumMismatch { stored, computed });
            }
            summary.checksum_verified = true;
        }
    }
    Ok(summary)
}

/// [`load`] from bytes in memory.
pub fn load_bytes<K>(
    data: &[u8],
    now: i64,
    on_key: K,
) -> Result<LoadSummary, LoadError<core::convert::Infallible>>
where
    K: FnMut(Vec<u8>, Vec<u8>, Option<i64>),
{
    let mut rest = data;
    load(
        |buf: &mut [u8]| {
            let n = buf.len().min(rest.len());
            buf[..n].copy_from_slice(&rest[..n]);
            rest = &rest[n..];
            Ok(n)
        },
        now,
        on_key,
    )
}
