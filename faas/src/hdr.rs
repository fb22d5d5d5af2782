//! A high-dynamic-range (HDR) histogram, as wrk2 and HdrHistogram keep latencies: log-linear
//! buckets that hold every value with a bounded relative error, in fixed memory, so that
//! p50/p99/p99.9 of millions of samples cost no sorting.
//!
//! Values below `2^b` (b = sub-bucket bits) are counted exactly; above, each power-of-two range
//! `[2^k, 2^(k+1))` is split into `2^(b-1)` equal sub-buckets, so a value is known to within
//! `2^-(b-1)` of itself. With 3 significant decimal digits (`b = 11`) that is 0.1%.

use alloc::vec;
use alloc::vec::Vec;

/// A log-linear histogram of `u64` values up to a chosen maximum.
#[derive(Clone, Debug)]
pub struct HdrHistogram {
    bits: u32,
    counts: Vec<u64>,
    total: u64,
    min: u64,
    max: u64,
    highest_trackable: u64,
}

/// Why a value was not recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutOfRange(pub u64);

/// Why two histograms could not be added: their ranges or precisions differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShapeMismatch;

impl HdrHistogram {
    /// A histogram for values up to `highest_trackable` with `significant_digits` (1 to 5)
    /// decimal digits of precision.
    pub fn new(highest_trackable: u64, significant_digits: u8) -> Self {
        let digits = u32::from(significant_digits.clamp(1, 5));
        // Enough sub-buckets per power of two to tell 10^digits values apart: 2^(bits-1) >= 10^d.
        let bits = 10u64.pow(digits).next_power_of_two().trailing_zeros() + 1;
        let highest_trackable = highest_trackable.max(1);
        let mut h = HdrHistogram {
            bits,
            counts: Vec::new(),
            total: 0,
            min: u64::MAX,
            max: 0,
            highest_trackable,
        };
        h.counts = vec![0; h.index(highest_trackable) + 1];
        h
    }

    fn index(&self, v: u64) -> usize {
        let exact = 1u64 << self.bits;
        if v < exact {
            return v as usize;
        }
        let msb = 63 - v.leading_zeros();
        let shift = msb + 1 - self.bits;
        let half = exact / 2;
        let mantissa = v >> shift; // in [half, exact)
        (exact + u64::from(shift - 1) * half + (mantissa - half)) as usize
    }

    /// The largest value counted in bucket `i`.
    fn highest_in(&self, i: usize) -> u64 {
        let exact = 1u64 << self.bits;
        let i = i as u64;
        if i < exact {
            return i;
        }
        let half = exact / 2;
        let shift = (i - exact) / half + 1;
        let mantissa = half + (i - exact) % half;
        ((mantissa + 1) << shift) - 1
    }

    /// Counts `value`.
    pub fn record(&mut self, value: u64) -> Result<(), OutOfRange> {
        if value > self.highest_trackable {
            return Err(OutOfRange(value));
        }
        let i = self.index(value);
        self.counts[i] += 1;
        self.total += 1;
        self.min = self.min.min(value);
        self.max = self.max.max(value);
        Ok(())
    }

    /// Counts every value `other` counted, as if recorded here; [`ShapeMismatch`] (nothing
    /// added) unless both were made with the same range and precision.
    pub fn add(&mut self, other: &HdrHistogram) -> Result<(), ShapeMismatch> {
        if self.bits != other.bits || self.highest_trackable != other.highest_trackable {
            return Err(ShapeMismatch);
        }
        for (c, o) in self.counts.iter_mut().zip(&other.counts) {
            *c += o;
        }
        self.total += other.total;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        Ok(())
    }

    /// Number of values counted.
    pub fn len(&self) -> u64 {
        self.total
    }

    /// Whether nothing was counted.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// The largest value counted.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The smallest value counted (`u64::MAX` when empty).
    pub fn min(&self) -> u64 {
        self.min
    }

    /// The value at quantile `permille / 1000` (500 = median, 990 = p99, 999 = p99.9): the
    /// highest value equivalent to the smallest value with at least that share of the counts
    /// at or below it, capped at the largest value counted; `None` when empty.
    pub fn value_at_permille(&self, permille: u32) -> Option<u64> {
        if self.total == 0 {
            return None;
        }
        let permille = u64::from(permille.min(1000));
        let rank = (self.total * permille).div_ceil(1000).max(1);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(self.highest_in(i).min(self.max));
            }
        }
        Some(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn small_values_are_exact() {
        let mut h = HdrHistogram::new(1 << 40, 3);
        for v in 1..=1000 {
            h.record(v).unwrap();
        }
        assert_eq!(h.value_at_permille(500), Some(500));
        assert_eq!(h.value_at_permille(990), Some(990));
        assert_eq!(h.value_at_permille(1000), Some(1000));
        assert_eq!((h.min(), h.max(), h.len()), (1, 1000, 1000));
    }

    #[test]
    fn range_and_empty() {
        let mut h = HdrHistogram::new(1000, 2);
        assert_eq!(h.value_at_permille(500), None);
        assert!(h.is_empty());
        assert_eq!(h.record(1001), Err(OutOfRange(1001)));
        h.record(1000).unwrap();
        assert_eq!(h.value_at_permille(999), Some(1000));
    }

    #[test]
    fn histograms_of_other_shapes_do_not_add() {
        let mut h = HdrHistogram::new(1000, 2);
        h.record(5).unwrap();
        assert_eq!(h.add(&HdrHistogram::new(1000, 3)), Err(ShapeMismatch));
        assert_eq!(h.add(&HdrHistogram::new(2000, 2)), Err(ShapeMismatch));
        assert_eq!((h.len(), h.max()), (1, 5));
    }

    proptest! {
        #[test]
        fn adding_counts_as_recording_both(a in prop::collection::vec(0u64..(1 << 36), 0..200),
                                           b in prop::collection::vec(0u64..(1 << 36), 0..200)) {
            let mut one = HdrHistogram::new(1 << 36, 3);
            let mut other = HdrHistogram::new(1 << 36, 3);
            let mut both = HdrHistogram::new(1 << 36, 3);
            for &x in &a {
                one.record(x).unwrap();
                both.record(x).unwrap();
            }
            for &x in &b {
                other.record(x).unwrap();
                both.record(x).unwrap();
            }
            one.add(&other).unwrap();
            prop_assert_eq!((one.len(), one.min(), one.max()), (both.len(), both.min(), both.max()));
            for q in [1, 500, 990, 999, 1000] {
                prop_assert_eq!(one.value_at_permille(q), both.value_at_permille(q));
            }
        }

        #[test]
        fn quantiles_are_within_the_precision(mut v in prop::collection::vec(0u64..(1 << 36), 1..400),
                                              q in 1u32..=1000) {
            let mut h = HdrHistogram::new(1 << 36, 3);
            for &x in &v {
                h.record(x).unwrap();
            }
            v.sort_unstable();
            let rank = ((v.len() as u64 * u64::from(q)).div_ceil(1000).max(1)) as usize;
            let exact = v[rank - 1];
            let got = h.value_at_permille(q).unwrap();
            // Never below the exact value; above it by at most one sub-bucket (0.1%).
            prop_assert!(got >= exact, "{got} < {exact}");
            prop_assert!(got - exact <= exact / 1000 + 1, "{got} vs {exact}");
        }
    }
}
