//! The streaming RDB writer: the file goes out in chunks of at most [`CHUNK`] bytes through
//! a sink, so a μprocess writes a 100 MB snapshot with 64 KiB of buffer.
//!
//! It writes what Redis 7.0.15's `rdbSaveRio` writes for a keyspace of strings with
//! `rdbcompression no`: the magic `REDIS0010`; the AUX fields `redis-ver`, `redis-bits`,
//! `ctime`, `used-mem`, `aof-base` in that order; when there are keys, `SELECTDB 0` and
//! `RESIZEDB` (keys, keys with an expiry); each key as an optional `EXPIRETIME_MS` (8 bytes,
//! little-endian), type 0, the key and the value; `EOF` and the CRC-64 of everything before
//! it, little-endian. Strings are saved as `rdbSaveRawString` does: one of at most 11 bytes
//! that reads as an integer (`string2ll`) fitting 32 bits takes the integer encodings `0xC0`
//! (8 bits), `0xC1` (16) or `0xC2` (32); any other is its length and bytes. No LZF: Redis's
//! `rdbcompression yes` would compress strings longer than 20 bytes, which saves disk but
//! costs the saving child CPU; both load the same.

use super::crc64::crc64;
use super::{
    OPCODE_AUX, OPCODE_EOF, OPCODE_EXPIRETIME_MS, OPCODE_RESIZEDB, OPCODE_SELECTDB, RDB_MAGIC,
    REDIS_VERSION, TYPE_STRING,
};
use crate::db::{Db, Entry};
use crate::num::{i64_to_vec, parse_i64};
use alloc::vec::Vec;

/// The most bytes the writer holds before passing them to the sink.
pub const CHUNK: usize = 64 * 1024;

/// The AUX fields that change from file to file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuxInfo {
    /// When the snapshot was taken (Unix seconds, `ctime`).
    pub ctime: i64,
    /// The memory the server used (`used-mem`).
    pub used_mem: u64,
}

/// Appends the RDB length encoding of `len` (`rdbSaveLen`): 6 bits in one byte, 14 bits in
/// two, then `0x80` and 32 bits or `0x81` and 64 bits, big-endian.
pub fn push_len(out: &mut Vec<u8>, len: u64) {
    if len < 1 << 6 {
        out.push(len as u8);
    } else if len < 1 << 14 {
        out.push(0x40 | (len >> 8) as u8);
        out.push(len as u8);
    } else if len <= u64::from(u32::MAX) {
        out.push(0x80);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&len.to_be_bytes());
    }
}

/// The integer encoding of `s` (`rdbTryIntegerEncoding`), if it has one.
fn integer_encoding(s: &[u8], out: &mut Vec<u8>) -> bool {
    if s.len() > 11 {
        return false;
    }
    let Some(v) = parse_i64(s) else {
        return false;
    };
    if let Ok(b) = i8::try_from(v) {
        out.extend_from_slice(&[0xc0, b as u8]);
    } else if let Ok(h) = i16::try_from(v) {
        out.push(0xc1);
        out.extend_from_slice(&h.to_le_bytes());
    } else if let Ok(w) = i32::try_from(v) {
        out.push(0xc2);
        out.extend_from_slice(&w.to_le_bytes());
    } else {
        return false;
    }
    true
}

/// A streaming RDB writer over `sink`, which takes each chunk as it is ready.
pub struct RdbWriter<F> {
    sink: F,
    buf: Vec<u8>,
    crc: u64,
    written: u64,
}

impl<F, E> RdbWriter<F>
where
    F: FnMut(&[u8]) -> Result<(), E>,
{
    /// A writer with an empty buffer (nothing written yet).
    pub fn new(sink: F) -> RdbWriter<F> {
        RdbWriter {
            sink,
            buf: Vec::with_capacity(CHUNK),
            crc: 0,
            written: 0,
        }
    }

    fn flush(&mut self) -> Result<(), E> {
        if !self.buf.is_empty() {
            self.crc = crc64(self.crc, &self.buf);
            self.written += self.buf.len() as u64;
            (self.sink)(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Sends the buffer on if `more` bytes would not fit.
    fn room(&mut self, more: usize) -> Result<(), E> {
        if self.buf.len() + more > CHUNK {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes `bytes`, straight to the sink when they are a chunk or more.
    fn put(&mut self, bytes: &[u8]) -> Result<(), E> {
        if bytes.len() >= CHUNK {
            self.flush()?;
            self.crc = crc64(self.crc, bytes);
            self.written += bytes.len() as u64;
            (self.sink)(bytes)
        } else {
            self.room(bytes.len())?;
            self.buf.extend_from_slice(bytes);
            Ok(())
        }
    }

    /// Writes an RDB string (`rdbSaveRawString` without compression).
    fn string(&mut self, s: &[u8]) -> Result<(), E> {
        self.room(16)?;
        if integer_encoding(s, &mut self.buf) {
            return Ok(());
        }
        push_len(&mut self.buf, s.len() as u64);
        self.put(s)
    }

    /// Writes the magic and the AUX fields Redis 7.0 writes.
    pub fn header(&mut self, aux: &AuxInfo) -> Result<(), E> {
        self.put(RDB_MAGIC)?;
        self.aux(b"redis-ver", REDIS_VERSION.as_bytes())?;
        self.aux(b"redis-bits", b"64")?;
        self.aux(b"ctime", &i64_to_vec(aux.ctime))?;
        self.aux(
            b"used-mem",
            &i64_to_vec(aux.used_mem.min(i64::MAX as u64) as i64),
        )?;
        self.aux(b"aof-base", b"0")
    }

    /// Writes an AUX field.
    pub fn aux(&mut self, key: &[u8], value: &[u8]) -> Result<(), E> {
        self.put(&[OPCODE_AUX])?;
        self.string(key)?;
        self.string(value)
    }

    /// Writes `SELECTDB db` and `RESIZEDB keys expires`.
    pub fn select_db(&mut self, db: u64, keys: u64, expires: u64) -> Result<(), E> {
        self.room(32)?;
        self.buf.push(OPCODE_SELECTDB);
        push_len(&mut self.buf, db);
        self.buf.push(OPCODE_RESIZEDB);
        push_len(&mut self.buf, keys);
        push_len(&mut self.buf, expires);
        Ok(())
    }

    /// Writes a string key, its expiry (Unix milliseconds) first if it has one.
    pub fn key_value(&mut self, key: &[u8], value: &[u8], expire_at: Option<i64>) -> Result<(), E> {
        self.room(10)?;
        if let Some(t) = expire_at {
            self.buf.push(OPCODE_EXPIRETIME_MS);
            self.buf.extend_from_slice(&t.to_le_bytes());
        }
        self.buf.push(TYPE_STRING);
        self.string(key)?;
        self.string(value)
    }

    /// Writes `EOF` and the checksum; returns the file's size.
    pub fn finish(mut self) -> Result<u64, E> {
        self.put(&[OPCODE_EOF])?;
        self.flush()?;
        (self.sink)(&self.crc.to_le_bytes())?;
        Ok(self.written + 8)
    }
}

/// Writes `db` as an RDB file through `sink`; returns its size.
pub fn write_snapshot<F, E>(db: &Db, aux: &AuxInfo, sink: F) -> Result<u64, E>
where
    F: FnMut(&[u8]) -> Result<(), E>,
{
    write_snapshot_with_key_hook(db, aux, sink, || {})
}

/// [`write_snapshot`], calling `after_key` once after each key is written (to the buffer:
/// the key's bytes may reach `sink` later), as Redis's `rdbSaveKeyValuePair` ends with
/// `rdb-key-save-delay`'s sleep. The writer stops at the first error of `sink`, so the hook
/// is not called for the keys after it.
pub fn write_snapshot_with_key_hook<F, E, H>(
    db: &Db,
    aux: &AuxInfo,
    sink: F,
    mut after_key: H,
) -> Result<u64, E>
where
    F: FnMut(&[u8]) -> Result<(), E>,
    H: FnMut(),
{
    let counts = (db.len() as u64, db.expires_len() as u64);
    write_entries(counts, db.iter(), aux, sink, |_| after_key())
}

/// Values a [`write_snapshot_dismissing`] hands to its `give_back` at a time.
pub const DISMISS_BATCH: usize = 64;

/// Bytes of a page: values this long or longer hold whole pages worth giving back.
const PAGE: usize = 4096;

/// [`write_snapshot_with_key_hook`] for a forked child that has `db` to itself: once written
/// (its bytes are in the buffer or at `sink`, never read again), each value of a page or more
/// goes to `give_back`, [`DISMISS_BATCH`] at a time and the rest at the end, as Redis's child
/// gives a large value's memory back after saving it (`dismissObject`), so that its parent's
/// later write to the value copies nothing. `after_key` runs after each key.
pub fn write_snapshot_dismissing<'a, F, E, G, H>(
    db: &'a mut Db,
    aux: &AuxInfo,
    sink: F,
    mut give_back: G,
    mut after_key: H,
) -> Result<u64, E>
where
    F: FnMut(&[u8]) -> Result<(), E>,
    G: FnMut(&mut [&'a mut [u8]]),
    H: FnMut(),
{
    let counts = (db.len() as u64, db.expires_len() as u64);
    let mut batch: Vec<&'a mut [u8]> = Vec::with_capacity(DISMISS_BATCH);
    let written = write_entries(counts, db.iter_mut(), aux, sink, |e: &'a mut Entry| {
        let value = Entry::value_mut(e);
        if value.len() >= PAGE {
            batch.push(value);
            if batch.len() == DISMISS_BATCH {
                give_back(&mut batch);
                batch.clear();
            }
        }
        after_key();
    });
    if !batch.is_empty() {
        give_back(&mut batch);
    }
    written
}

/// The snapshot of a keyspace of `keys` keys (`expires` of them with an expiry) whose
/// entries are `entries`, in key order.
fn write_entries<'a, F, E, V, H>(
    (keys, expires): (u64, u64),
    entries: impl Iterator<Item = (&'a [u8], V)>,
    aux: &AuxInfo,
    sink: F,
    mut after_key: H,
) -> Result<u64, E>
where
    F: FnMut(&[u8]) -> Result<(), E>,
    V: core::ops::Deref<Target = Entry>,
    H: FnMut(V),
{
    let mut w = RdbWriter::new(sink);
    w.header(aux)?;
    if keys != 0 {
        w.select_db(0, keys, expires)?;
        for (key, entry) in entries {
            w.key_value(key, entry.value(), entry.expire_at())?;
            after_key(entry);
        }
    }
    w.finish()
}

/// [`write_snapshot`] into memory.
pub fn snapshot_bytes(db: &Db, aux: &AuxInfo) -> Vec<u8> {
    let mut out = Vec::new();
    let r: Result<u64, core::convert::Infallible> = write_snapshot(db, aux, |chunk| {
        out.extend_from_slice(chunk);
        Ok(())
    });
    let _ = r;
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    /// The AUX fields of the hook tests.
    const AUX: AuxInfo = AuxInfo {
        ctime: 5,
        used_mem: 6,
    };

    #[test]
    fn lengths_as_rdb_save_len() {
        let enc = |n: u64| {
            let mut v = Vec::new();
            push_len(&mut v, n);
            v
        };
        assert_eq!(enc(0), [0x00]);
        assert_eq!(enc(63), [0x3f]);
        assert_eq!(enc(64), [0x40, 0x40]);
        assert_eq!(enc(16383), [0x7f, 0xff]);
        assert_eq!(enc(16384), [0x80, 0x00, 0x00, 0x40, 0x00]);
        assert_eq!(enc(u64::from(u32::MAX)), [0x80, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(enc(1 << 32), [0x81, 0, 0, 0, 1, 0, 0, 0, 0]);
    }

    #[test]
    fn integer_encodings_as_rdb_try_integer_encoding() {
        let enc = |s: &[u8]| {
            let mut v = Vec::new();
            integer_encoding(s, &mut v).then_some(v)
        };
        assert_eq!(enc(b"0"), Some(vec![0xc0, 0x00]));
        assert_eq!(enc(b"-128"), Some(vec![0xc0, 0x80]));
        assert_eq!(enc(b"64"), Some(vec![0xc0, 0x40]));
        assert_eq!(enc(b"128"), Some(vec![0xc1, 0x80, 0x00]));
        assert_eq!(enc(b"-32768"), Some(vec![0xc1, 0x00, 0x80]));
        assert_eq!(enc(b"65536"), Some(vec![0xc2, 0x00, 0x00, 0x01, 0x00]));
        assert_eq!(enc(b"-2147483648"), Some(vec![0xc2, 0, 0, 0, 0x80]));
        assert_eq!(enc(b"2147483648"), None);
        assert_eq!(enc(b"007"), None);
        assert_eq!(enc(b"12345678901"), None);
        assert_eq!(enc(b"abc"), None);
    }

    #[test]
    fn chunks_never_exceed_the_limit_and_large_values_pass_through() {
        let mut db = Db::new();
        db.set(
            b"big".to_vec(),
            vec![7u8; 3 * CHUNK + 5],
            crate::db::Ttl::Clear,
        );
        for i in 0..5000 {
            db.set(
                alloc::format!("k{i}").into_bytes(),
                vec![1u8; 40],
                crate::db::Ttl::At(1_700_000_000_000),
            );
        }
        let mut chunks = Vec::new();
        let size = write_snapshot(
            &db,
            &AuxInfo {
                ctime: 1,
                used_mem: 2,
            },
            |c: &[u8]| {
                chunks.push(c.to_vec());
                Ok::<(), ()>(())
            },
        )
        .unwrap();
        let total: usize = chunks.iter().map(|c| c.len()).sum();
        assert_eq!(total as u64, size);
        assert!(chunks.iter().filter(|c| c.len() > CHUNK).count() == 1);
        let joined: Vec<u8> = chunks.concat();
        assert_eq!(
            joined,
            snapshot_bytes(
                &db,
                &AuxInfo {
                    ctime: 1,
                    used_mem: 2
                }
            )
        );
        let body = &joined[..joined.len() - 8];
        assert_eq!(&joined[joined.len() - 8..], &crc64(0, body).to_le_bytes());
    }

    #[test]
    fn the_key_hook_runs_once_per_key() {
        let aux = AUX;
        let mut db = Db::new();
        let mut calls = 0;
        let mut out = Vec::new();
        let size = write_snapshot_with_key_hook(
            &db,
            &aux,
            |c: &[u8]| {
                out.extend_from_slice(c);
                Ok::<(), ()>(())
            },
            || calls += 1,
        )
        .unwrap();
        assert_eq!((calls, size), (0, out.len() as u64));
        for i in 0..300 {
            db.set(
                alloc::format!("key:{i}").into_bytes(),
                vec![b'v'; i],
                crate::db::Ttl::Clear,
            );
        }
        let mut out = Vec::new();
        let mut calls = 0;
        let size = write_snapshot_with_key_hook(
            &db,
            &aux,
            |c: &[u8]| {
                out.extend_from_slice(c);
                Ok::<(), ()>(())
            },
            || calls += 1,
        )
        .unwrap();
        assert_eq!(calls, 300);
        assert_eq!(size, out.len() as u64);
        assert_eq!(out, snapshot_bytes(&db, &aux), "the hook changes no byte");
    }

    #[test]
    fn a_dismissing_save_gives_back_each_large_value_after_writing_it() {
        let aux = AUX;
        let mut db = Db::new();
        for i in 0..300 {
            // Short values (in place), a page, one byte short of a page, a chunk-sized one
            // (straight to the sink).
            let len = [i, 4096, 4095, CHUNK + 1][i % 4];
            db.set(
                alloc::format!("key:{i}").into_bytes(),
                vec![b'a' + (i % 26) as u8; len],
                crate::db::Ttl::Clear,
            );
        }
        let expected = snapshot_bytes(&db, &aux);
        let mut out = Vec::new();
        let (mut keys, mut given, mut batches) = (0, 0, Vec::new());
        let size = write_snapshot_dismissing(
            &mut db,
            &aux,
            |c: &[u8]| {
                out.extend_from_slice(c);
                Ok::<(), ()>(())
            },
            |values| {
                batches.push(values.len());
                for v in values.iter_mut() {
                    // What a saving child's `discard` does to a value: its bytes read as zero.
                    v.fill(0);
                    given += 1;
                }
            },
            || keys += 1,
        )
        .unwrap();
        assert_eq!(
            (keys, given),
            (300, 150),
            "the two kinds of values of a page or more"
        );
        assert_eq!(
            batches,
            [DISMISS_BATCH, DISMISS_BATCH, 150 - 2 * DISMISS_BATCH]
        );
        assert_eq!(size, out.len() as u64);
        assert_eq!(
            out, expected,
            "each value was written before it was given back"
        );
        for (_, e) in db.iter().filter(|(_, e)| !e.value().is_empty()) {
            let zero = e.value().iter().all(|&b| b == 0);
            assert_eq!(zero, e.value().len() >= 4096, "{}", e.value().len());
        }
    }

    #[test]
    fn sink_errors_stop_the_writer() {
        let mut db = Db::new();
        db.set(b"k".to_vec(), vec![0; 200_000], crate::db::Ttl::Clear);
        let mut calls = 0;
        let r = write_snapshot(
            &db,
            &AuxInfo {
                ctime: 0,
                used_mem: 0,
            },
            |_| {
                calls += 1;
                if calls == 2 { Err("disk full") } else { Ok(()) }
            },
        );
        assert_eq!(r, Err("disk full"));
        assert_eq!(calls, 2);
    }
}
