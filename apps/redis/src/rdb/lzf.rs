//! LZF decompression (`lzf_d.c`), for the compressed strings (encoding `0xC3`) Redis writes
//! when `rdbcompression` is on. Every read and copy is bounds-checked: a corrupt stream is an
//! error, never a panic.
//!
//! The format is a sequence of items: a control byte below 32 starts a literal run of
//! `ctrl + 1` bytes; otherwise `ctrl >> 5` is a length (7: add the next byte) and the low 5
//! bits with the next byte an offset, and `length + 2` bytes are copied from `offset + 1`
//! bytes back (the copy may overlap itself).

use alloc::vec::Vec;

/// Decompresses `input`, which must expand to exactly `out_len` bytes (as Redis checks).
pub fn decompress(input: &[u8], out_len: usize) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    out.try_reserve_exact(out_len).ok()?;
    let mut ip = 0;
    while ip < input.len() {
        let ctrl = usize::from(input[ip]);
        ip += 1;
        if ctrl < 32 {
            let run = ctrl + 1;
            if out.len() + run > out_len || ip + run > input.len() {
                return None;
            }
            out.extend_from_slice(&input[ip..ip + run]);
            ip += run;
        } else {
            let mut len = ctrl >> 5;
            if len == 7 {
                len += usize::from(*input.get(ip)?);
                ip += 1;
            }
            let back = ((ctrl & 0x1f) << 8) + usize::from(*input.get(ip)?) + 1;
            ip += 1;
            len += 2;
            if out.len() + len > out_len || back > out.len() {
                return None;
            }
            let start = out.len() - back;
            for i in start..start + len {
                let b = out[i];
                out.push(b);
            }
        }
    }
    (out.len() == out_len).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_compressed_by_redis() {
        // The value of `long` in `testdata::STRINGS` (written by Redis 7.0.15): `0xC3`, the
        // compressed length 58, the length 360, then the stream.
        let file = crate::rdb::testdata::STRINGS;
        let at = file.windows(5).position(|w| w == b"\x04long").unwrap() + 5;
        assert_eq!(file[at..at + 4], [0xc3, 0x3a, 0x41, 0x68]);
        let data = &file[at + 4..at + 4 + 58];
        let want = b"The quick brown fox jumps over the lazy dog. ".repeat(8);
        assert_eq!(decompress(data, 360), Some(want));
        assert_eq!(decompress(data, 359), None);
        assert_eq!(decompress(data, 361), None);
        assert_eq!(decompress(&data[..57], 360), None);
    }

    #[test]
    fn a_run_of_one_byte() {
        // 137 `a`s: the literal "a", then 136 bytes copied from 1 back (length 7 + 127, + 2).
        let data = [0x00, b'a', 0xe0, 0x7f, 0x00];
        assert_eq!(decompress(&data, 137), Some(alloc::vec![b'a'; 137]));
        assert_eq!(decompress(&data, 136), None);
        assert_eq!(decompress(&data, 138), None);
    }

    #[test]
    fn literals_and_back_references() {
        // "abcabcabcX": literal "abc", copy 6 from 3 back, literal "X".
        let data = [0x02, b'a', b'b', b'c', 0x80, 0x02, 0x00, b'X'];
        assert_eq!(decompress(&data, 10).as_deref(), Some(&b"abcabcabcX"[..]));
    }

    #[test]
    fn corrupt_streams_are_errors() {
        assert_eq!(decompress(&[0x05, b'a'], 6), None); // literal past the input
        assert_eq!(decompress(&[0x20, 0x00], 3), None); // reference before the start
        assert_eq!(decompress(&[0x00, b'a', 0xe0], 10), None); // truncated length byte
        assert_eq!(decompress(&[0x00, b'a', 0x20], 10), None); // truncated offset byte
        assert_eq!(decompress(&[], 0), Some(Vec::new()));
    }

    proptest::proptest! {
        #[test]
        fn never_panics(data in proptest::collection::vec(proptest::num::u8::ANY, 0..64), len in 0usize..300) {
            let _ = decompress(&data, len);
        }
    }
}
