//! Summaries of benchmark samples.

/// Median, extremes and count of a set of samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Summary {
    /// The median (the lower middle sample for an even count).
    pub median: u64,
    /// The smallest sample.
    pub min: u64,
    /// The largest sample.
    pub max: u64,
    /// The 99th percentile (the smallest sample at least 99 % of the samples do not exceed).
    pub p99: u64,
    /// How many samples there were.
    pub runs: usize,
}

/// Summarises `samples` (sorting them in place); `None` when there are none.
pub fn summarize(samples: &mut [u64]) -> Option<Summary> {
    if samples.is_empty() {
        return None;
    }
    samples.sort_unstable();
    Some(Summary {
        median: samples[(samples.len() - 1) / 2],
        min: samples[0],
        max: samples[samples.len() - 1],
        p99: samples[(samples.len() * 99).div_ceil(100) - 1],
        runs: samples.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_extremes() {
        assert_eq!(summarize(&mut []), None);
        let s = summarize(&mut [5, 1, 9, 3, 7]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.runs), (5, 1, 9, 5));
        assert_eq!(summarize(&mut [4, 2, 8, 6]).unwrap().median, 4);
        let mut hundred: [u64; 100] = core::array::from_fn(|i| i as u64 + 1);
        assert_eq!(summarize(&mut hundred).unwrap().p99, 99);
        assert_eq!(summarize(&mut [3]).unwrap().p99, 3);
    }
}
