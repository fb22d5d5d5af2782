//! Fixed-bucket latency histograms and quantile estimates.

use alloc::vec;
use alloc::vec::Vec;

/// Why a bucket layout or metric definition was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricsError {
    /// Bucket bounds are empty or not strictly increasing.
    BadBuckets,
    /// A metric or label name does not match the Prometheus grammar (or uses the reserved `__`
    /// prefix or a built-in name).
    BadName,
    /// The same metric name was registered with a different help text.
    HelpMismatch,
    /// The same metric name and labels were registered twice.
    Duplicate,
    /// A counter id from another [`super::Metrics`].
    UnknownCounter,
}

/// Upper bounds (inclusive) of a histogram's finite buckets, strictly increasing; the `+Inf`
/// bucket is implicit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Buckets(Vec<u64>);

impl Buckets {
    /// Checks that `bounds` is non-empty and strictly increasing.
    pub fn new(bounds: &[u64]) -> Result<Self, MetricsError> {
        if bounds.is_empty() || bounds.windows(2).any(|w| w[0] >= w[1]) {
            return Err(MetricsError::BadBuckets);
        }
        Ok(Buckets(bounds.to_vec()))
    }

    /// A 1-2-5 series from 1 µs to 10 s, in nanoseconds.
    pub fn nanoseconds() -> Self {
        Self::series(1_000, 10_000_000_000)
    }

    /// A 1-2-5 series from 1 000 to 10^10 guest instructions (for `-icount` runs).
    pub fn instructions() -> Self {
        Self::series(1_000, 10_000_000_000)
    }

    /// The 1-2-5 series from `first` (a power of ten) to `last`.
    fn series(first: u64, last: u64) -> Self {
        let mut v = Vec::new();
        let mut decade = first;
        while decade <= last {
            for m in [1, 2, 5] {
                if decade * m <= last {
                    v.push(decade * m);
                }
            }
            decade *= 10;
        }
        Buckets(v)
    }

    /// The finite upper bounds.
    pub fn bounds(&self) -> &[u64] {
        &self.0
    }
}

/// A histogram over fixed [`Buckets`], with sum, count and maximum.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Histogram {
    buckets: Buckets,
    /// Per-bucket (not cumulative) counts; the last is the `+Inf` bucket.
    counts: Vec<u64>,
    sum: u64,
    count: u64,
    max: u64,
}

impl Histogram {
    /// An empty histogram over `buckets`.
    pub fn new(buckets: Buckets) -> Self {
        let n = buckets.0.len() + 1;
        Histogram {
            buckets,
            counts: vec![0; n],
            sum: 0,
            count: 0,
            max: 0,
        }
    }

    /// Records one observation.
    pub fn observe(&mut self, value: u64) {
        let i = self.buckets.0.partition_point(|&b| b < value);
        self.counts[i] += 1;
        self.sum = self.sum.saturating_add(value);
        self.count += 1;
        self.max = self.max.max(value);
    }

    /// Number of observations.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Sum of observations (saturating).
    pub fn sum(&self) -> u64 {
        self.sum
    }

    /// Largest observation (0 when empty).
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The bucket layout.
    pub fn buckets(&self) -> &Buckets {
        &self.buckets
    }

    /// `(upper bound, cumulative count)` per bucket; `None` is `+Inf`.
    pub fn cumulative(&self) -> impl Iterator<Item = (Option<u64>, u64)> + '_ {
        let bounds = self.buckets.0.iter().map(|&b| Some(b)).chain([None]);
        bounds.zip(self.counts.iter().scan(0u64, |acc, &c| {
            *acc += c;
            Some(*acc)
        }))
    }

    /// Estimated quantile `per_mille / 1000` (e.g. 500, 990, 999) by nearest rank: the upper
    /// bound of the bucket holding that rank, capped at the maximum observed (so the estimate
    /// never undershoots the true value by more than a bucket and never exceeds the max).
    /// `None` when empty.
    pub fn quantile(&self, per_mille: u32) -> Option<u64> {
        let target = rank(self.count, per_mille)?;
        self.cumulative()
            .find(|&(_, c)| c >= target)
            .map(|(bound, _)| bound.map_or(self.max, |b| b.min(self.max)))
    }
}

/// The 1-based nearest rank of quantile `per_mille / 1000` among `n` samples.
fn rank(n: u64, per_mille: u32) -> Option<u64> {
    if n == 0 {
        return None;
    }
    let q = u128::from(per_mille.min(1000));
    let r = (u128::from(n) * q).div_ceil(1000);
    Some(u64::try_from(r).unwrap_or(n).clamp(1, n))
}

/// Exact quantile `per_mille / 1000` of sorted samples by the nearest-rank method; `None` when
/// empty.
pub fn exact_quantile(sorted: &[u64], per_mille: u32) -> Option<u64> {
    let r = rank(sorted.len() as u64, per_mille)?;
    sorted.get(usize::try_from(r - 1).ok()?).copied()
}

/// The p50 / p99 / p99.9 triple a report prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quantiles {
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
}

impl Quantiles {
    /// Estimates from a histogram; `None` when empty.
    pub fn from_histogram(h: &Histogram) -> Option<Self> {
        Some(Quantiles {
            p50: h.quantile(500)?,
            p99: h.quantile(990)?,
            p999: h.quantile(999)?,
        })
    }

    /// Exact values from sorted samples; `None` when empty.
    pub fn exact(sorted: &[u64]) -> Option<Self> {
        Some(Quantiles {
            p50: exact_quantile(sorted, 500)?,
            p99: exact_quantile(sorted, 990)?,
            p999: exact_quantile(sorted, 999)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn buckets_validate_and_default_series() {
        assert_eq!(Buckets::new(&[]), Err(MetricsError::BadBuckets));
        assert_eq!(Buckets::new(&[5, 5]), Err(MetricsError::BadBuckets));
        assert_eq!(Buckets::new(&[5, 3]), Err(MetricsError::BadBuckets));
        let ns = Buckets::nanoseconds();
        assert_eq!(&ns.bounds()[..4], &[1_000, 2_000, 5_000, 10_000]);
        assert_eq!(*ns.bounds().last().unwrap(), 10_000_000_000);
        assert_eq!(ns.bounds().len(), 22);
    }

    #[test]
    fn observe_is_inclusive_upper_bound() {
        let mut h = Histogram::new(Buckets::new(&[10, 20]).unwrap());
        for v in [0, 10, 11, 20, 21, 1000] {
            h.observe(v);
        }
        let c: Vec<_> = h.cumulative().collect();
        assert_eq!(c, vec![(Some(10), 2), (Some(20), 4), (None, 6)]);
        assert_eq!((h.count(), h.sum(), h.max()), (6, 1062, 1000));
        assert_eq!(h.quantile(500), Some(20));
        assert_eq!(h.quantile(999), Some(1000));
        assert_eq!(h.quantile(0), Some(10));
    }

    #[test]
    fn exact_quantiles_nearest_rank() {
        let v: Vec<u64> = (1..=1000).collect();
        assert_eq!(
            Quantiles::exact(&v),
            Some(Quantiles {
                p50: 500,
                p99: 990,
                p999: 999
            })
        );
        assert_eq!(exact_quantile(&[7], 999), Some(7));
        assert_eq!(exact_quantile(&[], 500), None);
        assert_eq!(exact_quantile(&[1, 2], 1000), Some(2));
        assert_eq!(exact_quantile(&[1, 2], 5000), Some(2));
    }

    proptest! {
        /// The histogram estimate is never below the exact value and never above the bucket
        /// bound that contains the exact value (or the max).
        #[test]
        fn estimate_brackets_exact(mut v in prop::collection::vec(0u64..100_000, 1..300), q in 0u32..=1000) {
            let b = Buckets::new(&[10, 100, 1000, 10_000]).unwrap();
            let mut h = Histogram::new(b.clone());
            for &x in &v { h.observe(x); }
            v.sort_unstable();
            let exact = exact_quantile(&v, q).unwrap();
            let est = h.quantile(q).unwrap();
            prop_assert!(est >= exact);
            let bound = b.bounds().iter().copied().find(|&x| x >= exact).unwrap_or(u64::MAX);
            prop_assert!(est <= bound.min(h.max()));
        }
    }
}
