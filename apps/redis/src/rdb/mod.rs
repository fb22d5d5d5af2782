//! RDB files, version 10, as Redis 7.0.15 writes them and Debian 12's `redis-check-rdb` and
//! `redis-server` accept them (source of truth: `src/rdb.h`, `src/rdb.c` at tag 7.0.15).
//!
//! - [`write`](mod@write): the streaming writer ([`write_snapshot`],
//!   [`write_snapshot_with_key_hook`], [`write_snapshot_dismissing`], [`RdbWriter`]);
//! - [`load`](mod@load): the loader of strings-only files ([`load()`], [`load_bytes`]);
//! - [`crc64`](mod@crc64): Redis's CRC-64;
//! - [`lzf`]: LZF decompression, for compressed strings.

pub mod crc64;
pub mod load;
pub mod lzf;
#[cfg(test)]
mod testdata;
pub mod write;

pub use crc64::crc64;
pub use load::{LoadError, LoadSummary, load, load_bytes};
pub use write::{
    AuxInfo, DISMISS_BATCH, RdbWriter, snapshot_bytes, write_snapshot, write_snapshot_dismissing,
    write_snapshot_with_key_hook,
};

/// The RDB version written, and the newest read.
pub const RDB_VERSION: u32 = 10;
/// The file's first 9 bytes.
pub const RDB_MAGIC: &[u8; 9] = b"REDIS0010";
/// The Redis version the files (and `INFO`) claim.
pub const REDIS_VERSION: &str = "7.0.15";

/// Value type: a string.
pub const TYPE_STRING: u8 = 0;
/// Opcode: an LRU idle time follows (a length).
pub const OPCODE_IDLE: u8 = 0xf8;
/// Opcode: an LFU frequency follows (one byte).
pub const OPCODE_FREQ: u8 = 0xf9;
/// Opcode: an AUX field (two strings).
pub const OPCODE_AUX: u8 = 0xfa;
/// Opcode: the database's size hints (two lengths).
pub const OPCODE_RESIZEDB: u8 = 0xfb;
/// Opcode: the next key's expiry, Unix milliseconds (8 bytes, little-endian).
pub const OPCODE_EXPIRETIME_MS: u8 = 0xfc;
/// Opcode: the next key's expiry, Unix seconds (4 bytes, little-endian; old files).
pub const OPCODE_EXPIRETIME: u8 = 0xfd;
/// Opcode: the database of the keys that follow (a length).
pub const OPCODE_SELECTDB: u8 = 0xfe;
/// Opcode: the end of the file; the CRC-64 follows.
pub const OPCODE_EOF: u8 = 0xff;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::{Db, Ttl};
    use alloc::vec;
    use alloc::vec::Vec;

    const AUX: AuxInfo = AuxInfo {
        ctime: 1_700_000_000,
        used_mem: 1_000_000,
    };

    /// The AUX fields of [`AUX`], byte by byte.
    fn header() -> Vec<u8> {
        let mut f = b"REDIS0010".to_vec();
        f.extend_from_slice(b"\xfa\x09redis-ver\x067.0.15");
        f.extend_from_slice(b"\xfa\x0aredis-bits\xc0\x40");
        f.extend_from_slice(b"\xfa\x05ctime\xc2\x00\xf1\x53\x65"); // 1700000000 = 0x6553f100
        f.extend_from_slice(b"\xfa\x08used-mem\xc2\x40\x42\x0f\x00"); // 1000000 = 0x0f4240
        f.extend_from_slice(b"\xfa\x08aof-base\xc0\x00");
        f
    }

    /// A loaded key: name, value, expiry.
    type Key = (Vec<u8>, Vec<u8>, Option<i64>);

    fn collect(data: &[u8], now: i64) -> (LoadSummary, Vec<Key>) {
        let mut keys = Vec::new();
        let summary = load_bytes(data, now, |k, v, t| keys.push((k, v, t))).unwrap();
        (summary, keys)
    }

    #[test]
    fn one_key_file_byte_for_byte() {
        let mut db = Db::new();
        db.set(b"foo".to_vec(), b"bar".to_vec(), Ttl::Clear);
        let mut want = header();
        want.extend_from_slice(b"\xfe\x00\xfb\x01\x00");
        want.extend_from_slice(b"\x00\x03foo\x03bar");
        want.push(0xff);
        // CRC-64/REDIS of everything above, little-endian, computed independently.
        want.extend_from_slice(&0x5247_4dfd_6f96_8bb0u64.to_le_bytes());
        assert_eq!(snapshot_bytes(&db, &AUX), want);
        assert_eq!(crc64(0, &want[..want.len() - 8]), 0x5247_4dfd_6f96_8bb0);
        assert_eq!(crc64(0, b"123456789"), 0xe9c6_d914_c4b8_d9ca);
    }

    #[test]
    fn expiry_integer_and_empty_values_byte_for_byte() {
        // One key per file: a file of several keys holds them in the table's order.
        let mut db = Db::new();
        db.set(
            b"counter".to_vec(),
            b"1000".to_vec(),
            Ttl::At(1_800_000_000_000),
        );
        let mut want = header();
        want.extend_from_slice(b"\xfe\x00\xfb\x01\x01");
        want.push(0xfc);
        want.extend_from_slice(&1_800_000_000_000i64.to_le_bytes());
        want.extend_from_slice(b"\x00\x07counter\xc1\xe8\x03");
        want.push(0xff);
        want.extend_from_slice(&0xc888_aed3_c939_5267u64.to_le_bytes());
        assert_eq!(snapshot_bytes(&db, &AUX), want);

        let mut db = Db::new();
        db.set(b"empty".to_vec(), Vec::new(), Ttl::Clear);
        let mut want = header();
        want.extend_from_slice(b"\xfe\x00\xfb\x01\x00");
        want.extend_from_slice(b"\x00\x05empty\x00");
        want.push(0xff);
        want.extend_from_slice(&0xfbd3_cff1_b67e_88d9u64.to_le_bytes());
        assert_eq!(snapshot_bytes(&db, &AUX), want);
    }

    #[test]
    fn an_empty_keyspace_has_no_selectdb() {
        let mut want = header();
        want.push(0xff);
        want.extend_from_slice(&0xe415_712e_18ac_6258u64.to_le_bytes());
        assert_eq!(snapshot_bytes(&Db::new(), &AUX), want);
        let (s, keys) = collect(&want, 0);
        assert!(keys.is_empty());
        assert!(s.checksum_verified);
        assert_eq!(s.aux.len(), 5);
        assert_eq!(s.aux[2], (b"ctime".to_vec(), b"1700000000".to_vec()));
    }

    /// The keys of `testdata::STRINGS`, sorted by name.
    fn strings_keys() -> Vec<Key> {
        let key = |k: &[u8], v: &[u8]| (k.to_vec(), v.to_vec(), None);
        vec![
            key(b"big", b"9223372036854775807"),
            key(b"bin", b"\x00\x01\xfe\xff\r\n"),
            key(b"empty", b""),
            key(b"hello", b"world"),
            key(b"i16", b"1000"),
            key(b"i32", b"100000"),
            (
                b"later".to_vec(),
                b"forever".to_vec(),
                Some(4_102_444_800_000),
            ),
            key(
                b"long",
                &b"The quick brown fox jumps over the lazy dog. ".repeat(8),
            ),
            key(b"min32", b"-2147483648"),
            key(b"neg", b"-7"),
            key(b"small", b"7"),
        ]
    }

    fn contains(haystack: &[u8], needle: &[u8]) -> bool {
        haystack.windows(needle.len()).any(|w| w == needle)
    }

    #[test]
    fn a_file_written_by_redis_loads() {
        let file = testdata::STRINGS;
        let (s, mut keys) = collect(file, 1_800_000_000_000);
        assert_eq!(s.version, 10);
        assert!(s.checksum_verified);
        let aux: Vec<(&[u8], &[u8])> = s
            .aux
            .iter()
            .map(|(k, v)| (k.as_slice(), v.as_slice()))
            .collect();
        assert_eq!(
            aux,
            [
                (&b"redis-ver"[..], &b"7.0.15"[..]),
                (b"redis-bits", b"64"),
                (b"ctime", b"1795925239"), // 2026-11-29T04:07:19Z
                (b"used-mem", b"1162520"),
                (b"aof-base", b"0"),
            ]
        );
        assert_eq!((s.keys_loaded, s.keys_expired), (11, 0));
        keys.sort();
        assert_eq!(keys, strings_keys());
        // The encodings Redis chose: integers in 8, 16 and 32 bits, LZF for the long value
        // (58 bytes for 360), raw for the rest (a 64-bit integer included).
        for record in [
            &b"\x00\x05small\xc0\x07"[..],
            b"\x00\x03neg\xc0\xf9",
            b"\x00\x03i16\xc1\xe8\x03",
            b"\x00\x03i32\xc2\xa0\x86\x01\x00",
            b"\x00\x05min32\xc2\x00\x00\x00\x80",
            b"\x00\x03big\x139223372036854775807",
            b"\x00\x05empty\x00",
            b"\x00\x03bin\x06\x00\x01\xfe\xff\r\n",
            b"\xfc\x00\xd8\xc3\x2c\xbb\x03\x00\x00\x00\x05later\x07forever",
            b"\x00\x04long\xc3\x3a\x41\x68",
        ] {
            assert!(contains(file, record), "{record:?}");
        }
        // The key with an expiry is dropped once it has passed, as Redis drops it.
        let (s, keys) = collect(file, 4_102_444_800_001);
        assert_eq!((s.keys_loaded, s.keys_expired), (10, 1));
        assert!(keys.iter().all(|k| k.0 != b"later"));
        // Bytes after the checksum are not read.
        let mut longer = file.to_vec();
        longer.extend_from_slice(b"*1\r\n$4\r\nPING\r\n");
        assert_eq!(collect(&longer, 0).1.len(), 11);
    }

    #[test]
    fn the_writer_writes_what_redis_writes() {
        // Every key Redis stored without LZF is a record our writer writes byte for byte.
        for (k, v, t) in strings_keys() {
            if k == b"long" {
                continue;
            }
            let mut db = Db::new();
            db.set(k.clone(), v, t.map_or(Ttl::Clear, Ttl::At));
            let f = snapshot_bytes(&db, &AUX);
            // After the header, SELECTDB and RESIZEDB (5 bytes); before EOF and the CRC.
            let record = &f[header().len() + 5..f.len() - 9];
            assert!(contains(testdata::STRINGS, record), "{k:?}");
        }
        // An empty keyspace: the same file, AUX fields included, given Redis's AUX values.
        let aux = AuxInfo {
            ctime: 1_795_925_242,
            used_mem: 1_210_672,
        };
        assert_eq!(snapshot_bytes(&Db::new(), &aux), testdata::EMPTY);
        let (s, keys) = collect(testdata::EMPTY, 0);
        assert!(keys.is_empty());
        assert!(s.checksum_verified);
        assert_eq!(s.aux.len(), 5);
    }

    #[test]
    fn files_of_other_types_are_refused() {
        let err = load_bytes(testdata::HASH, 0, |_, _, _| {}).unwrap_err();
        assert_eq!(err, LoadError::UnsupportedType(16));
        assert_eq!(
            alloc::format!("{err}"),
            "value type 16 is not supported (only strings, type 0)"
        );
        let err = load_bytes(testdata::LIST, 0, |_, _, _| {}).unwrap_err();
        assert_eq!(err, LoadError::UnsupportedType(18));
        assert_eq!(
            alloc::format!("{err}"),
            "value type 18 is not supported (only strings, type 0)"
        );
    }

    #[test]
    fn corruption_is_detected() {
        let mut file = testdata::STRINGS.to_vec();
        assert!(load_bytes(&file, 0, |_, _, _| {}).is_ok());
        let world = file.windows(5).position(|w| w == b"world").unwrap();
        file[world + 1] ^= 1; // "wnrld"
        assert!(matches!(
            load_bytes(&file, 0, |_, _, _| {}),
            Err(LoadError::ChecksumMismatch { .. })
        ));
        // A stored checksum of 0 means "not computed".
        let n = file.len();
        file[n - 8..].fill(0);
        let (s, keys) = collect(&file, 0);
        assert!(!s.checksum_verified);
        assert!(keys.contains(&(b"hello".to_vec(), b"wnrld".to_vec(), None)));
        // Truncated anywhere: an error, never a panic.
        for cut in 0..file.len() {
            assert!(
                load_bytes(&file[..cut], 0, |_, _, _| {}).is_err(),
                "cut at {cut}"
            );
        }
        assert_eq!(
            load_bytes(&testdata::STRINGS[..200], 0, |_, _, _| {}),
            Err(LoadError::UnexpectedEof)
        );
        // The long value's LZF data damaged: refused, as Redis refuses it.
        let mut file = testdata::STRINGS.to_vec();
        let lzf = file.windows(4).position(|w| w == b"long").unwrap() + 8;
        file[lzf] = 0x1e; // the first literal run one byte shorter
        assert_eq!(load_bytes(&file, 0, |_, _, _| {}), Err(LoadError::BadLzf));
        assert_eq!(
            load_bytes(b"REDIS0011", 0, |_, _, _| {}),
            Err(LoadError::UnsupportedVersion(11))
        );
        assert_eq!(
            load_bytes(b"RODIS0010", 0, |_, _, _| {}),
            Err(LoadError::BadSignature)
        );
        let mut db1 = header();
        db1.extend_from_slice(b"\xfe\x01");
        assert_eq!(
            load_bytes(&db1, 0, |_, _, _| {}),
            Err(LoadError::UnsupportedDb(1))
        );
    }

    #[test]
    fn redis_string_encodings_load() {
        let mut f = b"REDIS0010".to_vec();
        f.extend_from_slice(b"\xfe\x00\xfb\x05\x01");
        f.extend_from_slice(b"\x00\xc0\x07\xc0\xf9"); // 7 => -7
        f.extend_from_slice(b"\x00\x01a\xc2\x00\x00\x00\x80"); // i32::MIN
        // "compressible" => 137 'a's, LZF (5 bytes): the literal "a", then 136 bytes copied
        // from 1 back (length 7 + 127, plus 2).
        f.extend_from_slice(b"\x00\x0ccompressible\xc3\x05\x40\x89\x00\x61\xe0\x7f\x00");
        f.extend_from_slice(b"\xf8\x05\xf9\x03\x00\x01b\x01c"); // IDLE, FREQ, then b=c
        f.extend_from_slice(b"\xfd\x01\x00\x00\x00\x00\x01d\x01e"); // EXPIRETIME 1 s: expired
        f.push(0xff);
        let crc = crc64(0, &f);
        f.extend_from_slice(&crc.to_le_bytes());
        let (s, keys) = collect(&f, 5_000);
        assert_eq!(
            keys,
            vec![
                (b"7".to_vec(), b"-7".to_vec(), None),
                (b"a".to_vec(), b"-2147483648".to_vec(), None),
                (b"compressible".to_vec(), vec![b'a'; 137], None),
                (b"b".to_vec(), b"c".to_vec(), None),
            ]
        );
        assert_eq!((s.keys_loaded, s.keys_expired), (4, 1));
    }

    #[test]
    fn big_files_stream_in_small_reads() {
        let mut db = Db::new();
        for i in 0..3000u32 {
            let ttl = if i % 2 == 0 {
                Ttl::At(i64::from(i) + 10_000)
            } else {
                Ttl::Clear
            };
            db.set(
                alloc::format!("key:{i:06}").into_bytes(),
                vec![(i % 251) as u8; (i as usize * 7) % 300],
                ttl,
            );
        }
        db.set(b"huge".to_vec(), vec![9; 300_000], Ttl::Clear);
        let file = snapshot_bytes(&db, &AUX);
        // Read 1000 bytes at a time.
        let mut rest = &file[..];
        let mut back = Db::new();
        let summary = load(
            |buf: &mut [u8]| {
                let n = buf.len().min(rest.len()).min(1000);
                buf[..n].copy_from_slice(&rest[..n]);
                rest = &rest[n..];
                Ok::<usize, ()>(n)
            },
            0,
            |k, v, t| back.insert_loaded(k, v, t),
        )
        .unwrap();
        assert!(summary.checksum_verified);
        assert_eq!(summary.keys_loaded, 3001);
        assert_eq!(db.sorted(), back.sorted());
    }

    proptest::proptest! {
        #[test]
        fn round_trips(entries in proptest::collection::btree_map(
            proptest::collection::vec(proptest::num::u8::ANY, 0..24),
            (proptest::collection::vec(proptest::num::u8::ANY, 0..80), proptest::option::of(0i64..i64::MAX)),
            0..40,
        ), ints in proptest::collection::vec(proptest::num::i64::ANY, 0..10)) {
            let mut db = Db::new();
            for (k, (v, t)) in &entries {
                db.set(k.clone(), v.clone(), t.map_or(Ttl::Clear, Ttl::At));
            }
            for (i, n) in ints.iter().enumerate() {
                db.set(alloc::format!("int{i}").into_bytes(), alloc::format!("{n}").into_bytes(), Ttl::Clear);
            }
            let file = snapshot_bytes(&db, &AUX);
            let mut back = Db::new();
            let summary = load_bytes(&file, 0, |k, v, t| back.insert_loaded(k, v, t)).unwrap();
            proptest::prop_assert!(summary.checksum_verified);
            proptest::prop_assert_eq!(db.sorted(), back.sorted());
        }

        #[test]
        fn the_loader_never_panics(data in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            let mut f = b"REDIS0010".to_vec();
            f.extend_from_slice(&data);
            let _ = load_bytes(&f, 0, |_, _, _| {});
        }
    }
}
