//! The CRC-64 RDB files end with: the Jones polynomial `0xad93d23594c935a9`, reflected input and
//! output, initial value 0, no final XOR (the catalogue's CRC-64/REDIS; check value of
//! `"123456789"`: `0xe9c6d914c4b8d9ca`). Table-driven, eight bytes a step ("slicing by 8"),
//! with the tables built at compile time.

/// The Jones polynomial, bit-reversed for the reflected algorithm.
const POLY_REFLECTED: u64 = 0x95ac_9329_ac4b_c9b5;

const fn tables() -> [[u64; 256]; 8] {
    let mut t = [[0u64; 256]; 8];
    let mut n = 0;
    while n < 256 {
        let mut crc = n as u64;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ POLY_REFLECTED
            } else {
                crc >> 1
            };
            bit += 1;
        }
        t[0][n] = crc;
        n += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut n = 0;
        while n < 256 {
            let prev = t[k - 1][n];
            t[k][n] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            n += 1;
        }
        k += 1;
    }
    t
}

/// The lookup tables (16 KiB, read-only).
static TABLES: [[u64; 256]; 8] = tables();

/// Continues the CRC `crc` (0 to start) over `data`: `crc64(crc64(0, a), b)` is the CRC of
/// `a` followed by `b`.
pub fn crc64(mut crc: u64, data: &[u8]) -> u64 {
    let t = &TABLES;
    let mut chunks = data.chunks_exact(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        crc ^= u64::from_le_bytes(word);
        crc = t[7][(crc & 0xff) as usize]
            ^ t[6][((crc >> 8) & 0xff) as usize]
            ^ t[5][((crc >> 16) & 0xff) as usize]
            ^ t[4][((crc >> 24) & 0xff) as usize]
            ^ t[3][((crc >> 32) & 0xff) as usize]
            ^ t[2][((crc >> 40) & 0xff) as usize]
            ^ t[1][((crc >> 48) & 0xff) as usize]
            ^ t[0][(crc >> 56) as usize];
    }
    for &b in chunks.remainder() {
        crc = t[0][((crc ^ u64::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition of a reflected CRC, one input bit at a time, for reference.
    fn bitwise(mut crc: u64, data: &[u8]) -> u64 {
        for &b in data {
            crc ^= u64::from(b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ POLY_REFLECTED
                } else {
                    crc >> 1
                };
            }
        }
        crc
    }

    #[test]
    fn check_value() {
        assert_eq!(crc64(0, b"123456789"), 0xe9c6_d914_c4b8_d9ca);
        assert_eq!(bitwise(0, b"123456789"), 0xe9c6_d914_c4b8_d9ca);
        assert_eq!(crc64(0, b""), 0);
    }

    proptest::proptest! {
        #[test]
        fn tables_agree_with_the_definition_and_chain(
            a in proptest::collection::vec(proptest::num::u8::ANY, 0..100),
            b in proptest::collection::vec(proptest::num::u8::ANY, 0..100),
        ) {
            let mut ab = a.clone();
            ab.extend_from_slice(&b);
            proptest::prop_assert_eq!(crc64(0, &ab), bitwise(0, &ab));
            proptest::prop_assert_eq!(crc64(crc64(0, &a), &b), crc64(0, &ab));
        }
    }
}
