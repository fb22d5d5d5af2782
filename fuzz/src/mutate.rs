//! Byte-level mutations, as AFL's havoc stage makes them: flips, interesting values, inserted,
//! deleted, duplicated and spliced runs.

use crate::rng::Rng;

/// Values that sit on boundaries: zero, one, sign and width limits, page and size limits.
pub const INTERESTING: [u64; 20] = [
    0,
    1,
    2,
    7,
    8,
    0x10,
    0x40,
    0x7f,
    0x80,
    0xff,
    0x1000,
    0xffff,
    0x1_0000,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    0x1_0000_0000,
    i64::MAX as u64,
    1 << 63,
    u64::MAX,
];

/// Applies one random mutation to `data`, keeping it at most `max_len` bytes; `other` is
/// another corpus entry to splice from.
pub fn mutate(rng: &mut Rng, data: &mut Vec<u8>, other: &[u8], max_len: usize) {
    let len = data.len();
    match rng.below(11) {
        0 | 1 if len > 0 => {
            let at = rng.below(len);
            data[at] ^= 1 << rng.below(8);
        }
        2 if len > 0 => {
            let at = rng.below(len);
            data[at] = rng.next_u64() as u8;
        }
        3 if len > 0 => {
            // An interesting value of 1, 2, 4 or 8 bytes, little- or big-endian.
            let width = 1 << rng.below(4);
            let at = rng.below(len);
            let v = *rng.pick(&INTERESTING);
            let bytes = if rng.one_in(2) {
                v.to_le_bytes()
            } else {
                v.to_be_bytes()
            };
            let end = (at + width).min(len);
            let from = if rng.one_in(2) { 0 } else { 8 - width };
            data[at..end].copy_from_slice(&bytes[from..from + (end - at)]);
        }
        4 if len > 0 => {
            // Add or subtract a small amount at a word.
            let at = rng.below(len);
            let delta = rng.below(35) as u8;
            data[at] = if rng.one_in(2) {
                data[at].wrapping_add(delta)
            } else {
                data[at].wrapping_sub(delta)
            };
        }
        5 if len > 0 => {
            let at = rng.below(len);
            let n = rng.below((len - at).min(64)) + 1;
            data.drain(at..at + n);
        }
        6 if len < max_len => {
            let at = rng.below(len + 1);
            let n = (rng.below(32) + 1).min(max_len - len);
            let byte = rng.next_u64() as u8;
            let random = rng.one_in(2);
            let run: Vec<u8> = (0..n)
                .map(|_| if random { rng.next_u64() as u8 } else { byte })
                .collect();
            data.splice(at..at, run);
        }
        7 if len > 0 && len < max_len => {
            // Duplicate a run (repeated headers, chunks, table entries).
            let at = rng.below(len);
            let n = (rng.below((len - at).min(128)) + 1).min(max_len - len);
            let run = data[at..at + n].to_vec();
            let to = rng.below(len + 1);
            data.splice(to..to, run);
        }
        8 if !other.is_empty() => {
            // Splice: this input's head, the other's tail.
            let cut = rng.below(len + 1);
            let from = rng.below(other.len());
            data.truncate(cut);
            let room = max_len.saturating_sub(data.len());
            data.extend_from_slice(&other[from..other.len().min(from + room)]);
        }
        9 if len > 1 => {
            // Overwrite a run with a copy of another part of the input.
            let a = rng.below(len);
            let b = rng.below(len);
            let n = rng.below((len - a.max(b)).min(64)) + 1;
            let run = data[a..a + n].to_vec();
            data[b..b + n].copy_from_slice(&run);
        }
        _ => {
            let at = rng.below(len + 1);
            data.truncate(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_respect_the_length_bound() {
        let mut rng = Rng::new(3);
        let mut data = b"GET / HTTP/1.1\r\n\r\n".to_vec();
        for _ in 0..100_000 {
            mutate(&mut rng, &mut data, b"other input", 256);
            assert!(data.len() <= 256);
        }
    }
}
