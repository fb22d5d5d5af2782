//! A seeded pseudo-random generator for tests and fuzzers that must repeat themselves: the
//! same seed gives the same sequence. Not for anything that needs unpredictability.

/// Marsaglia's 64-bit xorshift (13, 7, 17). A zero state stays zero; seed with a nonzero value.
#[derive(Clone, Debug)]
pub struct XorShift(pub u64);

impl XorShift {
    /// The next value of the sequence.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// One of `items`, chosen by the next value (`items` must not be empty).
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[(self.next_u64() % items.len() as u64) as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_repeats_its_sequence() {
        let (mut a, mut b) = (XorShift(7), XorShift(7));
        let xs: [u64; 4] = core::array::from_fn(|_| a.next_u64());
        let ys: [u64; 4] = core::array::from_fn(|_| b.next_u64());
        assert_eq!(xs, ys);
        let mut x = 7u64;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        assert_eq!(xs[0], x);
        assert_ne!(xs[1], xs[0]);
        assert_eq!(XorShift(0).next_u64(), 0);
        assert_eq!(a.pick(&[5u8]), 5);
    }
}
