//! Deterministic ids: FNV-1a hashing and base-62 text.
//!
//! The original services draw random ids (UUIDs, random short URLs); Fjord functions have no
//! entropy source and must be repeatable, so they derive ids from their inputs and counters.

use core::fmt;

/// The 64-bit FNV-1a hash of `bytes` (usable in `const` tables).
pub const fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325_u64;
    let mut i = 0;
    while i < bytes.len() {
        h ^= bytes[i] as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    h
}

/// The FNV-1a hash of several parts, each followed by a separator byte.
pub fn fnv1a64_parts(parts: &[&[u8]]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325_u64;
    for part in parts {
        for &b in part.iter().chain(&[0xff]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// `value` as `digits` base-62 characters (`0-9A-Za-z`), least significant first.
#[derive(Clone, Copy, Debug)]
pub struct Base62 {
    /// The number.
    pub value: u64,
    /// How many characters to write.
    pub digits: usize,
}

impl fmt::Display for Base62 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const ALPHABET: &[u8; 62] =
            b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
        let mut v = self.value;
        for _ in 0..self.digits {
            let c = ALPHABET[(v % 62) as usize];
            f.write_str(core::str::from_utf8(&[c]).map_err(|_| fmt::Error)?)?;
            v /= 62;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    #[test]
    fn fnv_matches_reference_values() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_ne!(fnv1a64_parts(&[b"ab", b"c"]), fnv1a64_parts(&[b"a", b"bc"]));
    }

    #[test]
    fn base62_has_fixed_width() {
        assert_eq!(
            Base62 {
                value: 0,
                digits: 3
            }
            .to_string(),
            "000"
        );
        assert_eq!(
            Base62 {
                value: 61 + 62,
                digits: 2
            }
            .to_string(),
            "z1"
        );
    }
}
