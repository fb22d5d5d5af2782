//! Integers as Redis reads and writes them: `string2ll`'s strict rules (no `+`, no leading
//! zeros, no spaces, `-0` refused, at most 20 characters) and decimal formatting without the
//! `core::fmt` machinery on the hot path.

use alloc::vec::Vec;

/// Parses `s` as Redis's `string2ll` does: an optional `-`, then `0` alone or a digit 1–9
/// followed by digits, within `i64`; anything else (empty, `+1`, `01`, `-0`, ` 1`, 21 or more
/// characters) is `None`.
pub fn parse_i64(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() >= 21 {
        return None;
    }
    if s == b"0" {
        return Some(0);
    }
    let (negative, digits) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, s),
    };
    match digits.first() {
        Some(b'1'..=b'9') => {}
        _ => return None,
    }
    let mut v: u64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    if negative {
        if v > i64::MAX as u64 + 1 {
            return None;
        }
        // v = 2^63 maps to i64::MIN, which wrapping_neg keeps.
        Some((v as i64).wrapping_neg())
    } else {
        i64::try_from(v).ok()
    }
}

/// Appends the decimal text of `v` to `out`.
pub fn push_i64(out: &mut Vec<u8>, v: i64) {
    if v < 0 {
        out.push(b'-');
    }
    push_u64(out, v.unsigned_abs());
}

/// Appends the decimal text of `v` to `out`.
pub fn push_u64(out: &mut Vec<u8>, mut v: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// The decimal text of `v`.
pub fn i64_to_vec(v: i64) -> Vec<u8> {
    let mut out = Vec::with_capacity(20);
    push_i64(&mut out, v);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_as_string2ll() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"12"), Some(12));
        assert_eq!(parse_i64(b"-12"), Some(-12));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b""[..],
            b"-",
            b"-0",
            b"01",
            b"+1",
            b" 1",
            b"1 ",
            b"1a",
            b"9223372036854775808",
            b"-9223372036854775809",
            b"99999999999999999999",
            b"000000000000000000001",
        ] {
            assert_eq!(parse_i64(bad), None, "{:?}", core::str::from_utf8(bad));
        }
    }

    #[test]
    fn formats_every_width() {
        for v in [0, 7, -7, 10, 12345, i64::MAX, i64::MIN, -1] {
            assert_eq!(i64_to_vec(v), alloc::format!("{v}").into_bytes());
        }
        let mut out = Vec::new();
        push_u64(&mut out, u64::MAX);
        assert_eq!(out, b"18446744073709551615");
    }

    proptest::proptest! {
        #[test]
        fn formatting_round_trips(v: i64) {
            proptest::prop_assert_eq!(parse_i64(&i64_to_vec(v)), Some(v));
        }
    }
}
