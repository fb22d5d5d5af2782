//! Free text in records, `application/x-www-form-urlencoded`: a space is `+`, any byte but
//! `[A-Za-z0-9-_.~/:@]` is `%XX`. Encoded text holds no `&`, `=` or newline, so it can sit in
//! a `k=v&...` record and be forwarded unchanged.

use core::fmt;

/// Decodes `src` into `dst`; the decoded length, or `None` if `src` is malformed or `dst`
/// too small.
pub fn decode(src: &[u8], dst: &mut [u8]) -> Option<usize> {
    let mut i = 0;
    let mut n = 0;
    while i < src.len() {
        let b = match src[i] {
            b'+' => b' ',
            b'%' => {
                let hex = src.get(i + 1..i + 3)?;
                i += 2;
                hex_value(hex[0])? << 4 | hex_value(hex[1])?
            }
            b'&' | b'=' | b'\n' => return None,
            b => b,
        };
        *dst.get_mut(n)? = b;
        n += 1;
        i += 1;
    }
    Some(n)
}

fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Displays raw bytes form-encoded.
#[derive(Clone, Copy, Debug)]
pub struct Encoded<'a>(pub &'a [u8]);

impl fmt::Display for Encoded<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const HEX: &[u8; 16] = b"0123456789ABCDEF";
        let mut rest = self.0;
        while !rest.is_empty() {
            let plain = rest.iter().take_while(|&&b| is_plain(b)).count();
            if plain > 0 {
                f.write_str(core::str::from_utf8(&rest[..plain]).map_err(|_| fmt::Error)?)?;
                rest = &rest[plain..];
                continue;
            }
            let b = rest[0];
            rest = &rest[1..];
            if b == b' ' {
                f.write_str("+")?;
            } else {
                let esc = [b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]];
                f.write_str(core::str::from_utf8(&esc).map_err(|_| fmt::Error)?)?;
            }
        }
        Ok(())
    }
}

fn is_plain(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/' | b':' | b'@')
}

/// Whether `v` is well-formed encoded text that decodes to at most `max` bytes.
pub fn is_encoded(v: &[u8], max: usize) -> bool {
    let mut i = 0;
    let mut total = 0;
    while i < v.len() {
        match v[i] {
            b'%' => match v.get(i + 1..i + 3) {
                Some(h) if hex_value(h[0]).is_some() && hex_value(h[1]).is_some() => i += 3,
                _ => return false,
            },
            b'&' | b'=' | b'\n' => return false,
            _ => i += 1,
        }
        total += 1;
    }
    total <= max
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    #[test]
    fn round_trips() {
        let text = b"Hi @bob & see https://x.io/a?b=c\n100%!";
        let enc = Encoded(text).to_string();
        assert!(!enc.contains(['&', '=', '\n', ' ']));
        let mut out = [0u8; 64];
        let n = decode(enc.as_bytes(), &mut out).unwrap();
        assert_eq!(&out[..n], text);
        assert!(is_encoded(enc.as_bytes(), text.len()));
        assert!(!is_encoded(enc.as_bytes(), text.len() - 1));
    }

    #[test]
    fn rejects_malformed() {
        let mut out = [0u8; 8];
        assert_eq!(decode(b"a%2", &mut out), None);
        assert_eq!(decode(b"a%zz", &mut out), None);
        assert_eq!(decode(b"a=b", &mut out), None);
        assert_eq!(decode(b"123456789", &mut out), None);
        assert_eq!(decode(b"a+b", &mut out), Some(3));
        assert!(!is_encoded(b"%4", 10));
        let long = "%41".repeat(40);
        assert!(is_encoded(long.as_bytes(), 40));
    }
}
