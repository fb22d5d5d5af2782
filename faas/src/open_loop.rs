//! The open-loop method of the `faas` and `workloads` benchmarks: Poisson arrivals from a
//! xorshift64* generator, and the bisection of the offered load for the highest throughput within
//! the SLO. The kernel's in-guest generator (`kernel/src/bench_faas.rs`,
//! `kernel/src/bench_workloads.rs`) and the NightCore-like Linux runner (`tools/nightcore`) both
//! use this module, so both systems are driven alike: the same generator, seeds, load points and
//! search.

use crate::hdr::HdrHistogram;
use alloc::vec::Vec;

/// The SLO is this many times the minimal-load service time under Jord_NI, as in the paper.
pub const SLO_FACTOR: u64 = 10;

/// Requests per load point of the sweep.
pub const REQUESTS: usize = 1600;
/// Requests one at a time for the minimal-load service time.
pub const MIN_LOAD_REQUESTS: usize = 40;
/// Lowest offered load searched, in percent of Jord_NI's capacity (1 / its minimal-load
/// service time); every system is searched over the same range with the same arrival seeds.
pub const LOW_LOAD: f64 = 25.0;
/// Highest offered load searched, in percent of Jord_NI's capacity.
pub const HIGH_LOAD: f64 = 105.0;
/// Open-loop runs per search (the result is within 80% / 2^7 = 0.6% of capacity).
pub const BISECTIONS: u64 = 7;
/// Seed of the first run of a search; run `step` uses `SEED + step`.
pub const SEED: u64 = 7000;
/// Seed of the warm-up run [`bisect_common`] makes before its search: arrivals other than the
/// measured ones.
pub const WARM_UP_SEED: u64 = SEED - 1;
/// Halvings of [`LOW_LOAD`] a search tries, lowest last, when no run in its range was within
/// the SLO (down to 25% / 2^6, 0.4% of capacity).
pub const DESCENTS: u64 = 6;
/// Runs bisecting between the first halving within the SLO and the load above it.
pub const REFINEMENTS: u64 = 3;
/// Most runs [`bisect_common_fine`] adds to a search to reach its resolution.
pub const FINE_RUNS: u64 = 4;
/// Largest latency the HDR histogram tracks (2^40 ticks, about 18 minutes at 1 GHz).
pub const HDR_MAX: u64 = 1 << 40;

/// The small deterministic generator of the arrival times (xorshift64*).
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    /// A uniform sample in (0, 1).
    pub fn next_unit(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d);
        ((x >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// An exponential sample with the given mean.
    pub fn exponential(&mut self, mean: f64) -> u64 {
        (-libm::log(self.next_unit()) * mean) as u64
    }
}

/// What one open-loop run measured, in ticks of the measuring clock.
pub struct LoadRun {
    /// Every latency (arrival to completion), sorted.
    pub latencies: Vec<u64>,
    /// The same latencies in an HDR histogram (3 significant digits), as wrk2 keeps them.
    pub hdr: HdrHistogram,
    /// Ticks from the first arrival to the last completion.
    pub span: u64,
}

impl LoadRun {
    /// p50, p99 and p99.9 from the HDR histogram.
    pub fn quantiles(&self) -> (u64, u64, u64) {
        let q = |p| self.hdr.value_at_permille(p).unwrap_or(0);
        (q(500), q(990), q(999))
    }

    /// Completed requests per second over the run, for a clock of `hz` ticks per second.
    pub fn achieved(&self, hz: f64) -> f64 {
        self.latencies.len() as f64 * hz / self.span.max(1) as f64
    }

    /// Adds `other`, a run of another arrival sequence at the same load, to this one: their
    /// latencies pooled (so quantiles are over both) and their spans summed (so the throughput
    /// achieved is over both).
    pub fn pool(&mut self, other: LoadRun) {
        // Both made by the one constructor (`HDR_MAX`, 3 digits): the shapes match.
        let _ = self.hdr.add(&other.hdr);
        // Kept sorted, as the runners leave them (`run_open_loop` in the kernel,
        // `fjord-nightcore`).
        self.latencies.extend_from_slice(&other.latencies);
        self.latencies.sort_unstable();
        self.span += other.span;
    }

    /// An empty run, to pool runs into.
    pub fn empty() -> LoadRun {
        LoadRun {
            latencies: Vec::new(),
            hdr: HdrHistogram::new(HDR_MAX, 3),
            span: 0,
        }
    }
}

/// Seeds apart of the arrival sequences one load point pools ([`sequence_seed`]): more than
/// any search's runs ([`BISECTIONS`], [`DESCENTS`], [`REFINEMENTS`], [`FINE_RUNS`]) span, so
/// that no sequence of a point is one that another run of the search used.
pub const SEQUENCE_STRIDE: u64 = 1000;

/// The seed of arrival sequence `j` of a load point whose run is seeded `seed` (sequence 0 is
/// `seed` itself).
pub fn sequence_seed(seed: u64, j: u64) -> u64 {
    seed + j * SEQUENCE_STRIDE
}

/// What one open-loop run at a load point found.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    /// Whether the p99 latency stayed within the SLO.
    pub within: bool,
    /// Completed requests per second.
    pub achieved: f64,
}

/// The highest achieved throughput of a run within the SLO: bisects the offered load (percent
/// of capacity) between [`LOW_LOAD`] and [`HIGH_LOAD`] in [`BISECTIONS`] runs of `run_at(pct,
/// seed)`. If none was within, it halves [`LOW_LOAD`] up to [`DESCENTS`] times until a run is,
/// then bisects between that load and the one above it in [`REFINEMENTS`] runs. 0 when
/// nothing was. Run `n` of a search uses seed `SEED + n`; the benchmarks search with
/// [`bisect_common`].
fn bisect<E>(mut run_at: impl FnMut(f64, u64) -> Result<Point, E>) -> Result<f64, E> {
    let mut seed = SEED;
    let mut run = |pct: f64| {
        seed += 1;
        run_at(pct, seed - 1)
    };
    let mut best = 0.0f64;
    between(&mut run, LOW_LOAD, HIGH_LOAD, BISECTIONS, &mut best)?;
    let mut above = LOW_LOAD;
    for _ in 0..DESCENTS {
        if best > 0.0 {
            break;
        }
        let low = above / 2.0;
        let p = run(low)?;
        if p.within {
            best = p.achieved;
            between(&mut run, low, above, REFINEMENTS, &mut best)?;
        }
        above = low;
    }
    Ok(best)
}

/// The highest achieved throughput of a run within the SLO, searched as `bisect` (above) does,
/// but every run uses the one arrival sequence seeded with [`SEED`], scaled to its offered load
/// (common random numbers): two modes or systems searched this way meet the same arrivals at
/// every load, so their difference is theirs, not the seeds'.
///
/// Before the search, one warm-up run at the search's first load (seeded with
/// [`WARM_UP_SEED`]) is made and not counted: a system that keeps warm instances for bursts
/// makes them there, so no run of the search measures their cold starts, whichever load it
/// comes first at.
pub fn bisect_common<E>(mut run_at: impl FnMut(f64, u64) -> Result<Point, E>) -> Result<f64, E> {
    run_at(first_load(), WARM_UP_SEED)?;
    bisect(|pct, _| run_at(pct, SEED))
}

/// [`bisect_common`], then more runs on the same arrivals, bisecting between the highest load
/// found within the SLO and the lowest above it, until the two are within `resolution` (a
/// fraction, 0.005 for 0.5 %) of the lower, or [`FINE_RUNS`] were made. The plain search's
/// step is a fixed share of the capacity (0.6 %), so for a system whose SLO point lies low in
/// the range it is a larger share of the throughput found (for one at a third of the
/// capacity, 1.9 %): a comparison of two systems that must tell differences of a few percent
/// apart searches to a resolution finer than them.
pub fn bisect_common_fine<E>(
    resolution: f64,
    mut run_at: impl FnMut(f64, u64) -> Result<Point, E>,
) -> Result<f64, E> {
    let mut runs: Vec<(f64, Point)> = Vec::new();
    let mut best = bisect_common(|pct, seed| {
        let p = run_at(pct, seed)?;
        if seed != WARM_UP_SEED {
            runs.push((pct, p));
        }
        Ok(p)
    })?;
    if best <= 0.0 {
        return Ok(best);
    }
    let mut lo = runs
        .iter()
        .filter(|r| r.1.within)
        .map(|r| r.0)
        .fold(0.0f64, f64::max);
    let mut hi = runs
        .iter()
        .filter(|r| !r.1.within && r.0 > lo)
        .map(|r| r.0)
        .fold(f64::INFINITY, f64::min);
    let mut run = |pct: f64| run_at(pct, SEED);
    for _ in 0..FINE_RUNS {
        if !hi.is_finite() || hi - lo <= resolution * lo {
            break;
        }
        (lo, hi) = between(&mut run, lo, hi, 1, &mut best)?;
    }
    Ok(best)
}

/// What a run's report adds when `seed` is the warm-up's.
pub fn warm_up_note(seed: u64) -> &'static str {
    if seed == WARM_UP_SEED {
        "  (warm-up, not counted)"
    } else {
        ""
    }
}

/// The load a search's first run offers: the middle of its range.
pub fn first_load() -> f64 {
    (LOW_LOAD + HIGH_LOAD) / 2.0
}

/// `steps` runs of a bisection between `lo` (assumed within) and `hi`; `best` grows to the
/// highest achieved throughput of a run within. Returns the bracket it ends with.
fn between<E>(
    run: &mut impl FnMut(f64) -> Result<Point, E>,
    mut lo: f64,
    mut hi: f64,
    steps: u64,
    best: &mut f64,
) -> Result<(f64, f64), E> {
    for _ in 0..steps {
        let mid = (lo + hi) / 2.0;
        let p = run(mid)?;
        if p.within {
            *best = best.max(p.achieved);
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok((lo, hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pooled_runs_have_both_runs_latencies_and_spans() {
        let run = |lat: &[u64], span| {
            let mut r = LoadRun::empty();
            for &l in lat {
                r.hdr.record(l).unwrap();
            }
            r.latencies = lat.to_vec();
            r.span = span;
            r
        };
        let mut a = LoadRun::empty();
        a.pool(run(&[1, 4, 9], 100));
        a.pool(run(&[2, 3, 10, 11], 250));
        assert_eq!(a.latencies, [1, 2, 3, 4, 9, 10, 11]);
        assert_eq!((a.span, a.hdr.len()), (350, 7));
        assert_eq!(a.quantiles().0, 4);
        assert_eq!(a.achieved(350.0), 7.0);
    }

    #[test]
    fn sequences_of_a_point_use_seeds_no_search_run_uses() {
        let search = WARM_UP_SEED..=SEED + BISECTIONS + DESCENTS + REFINEMENTS + FINE_RUNS;
        for j in 1..8 {
            assert!(!search.contains(&sequence_seed(SEED, j)));
            assert!(!search.contains(&sequence_seed(WARM_UP_SEED, j)));
        }
        assert_eq!(sequence_seed(SEED, 0), SEED);
    }

    #[test]
    fn generator_is_xorshift64_star() {
        let mut r = Rng(7000);
        let first = r.next_unit();
        // x ^= x>>12; x ^= x<<25; x ^= x>>27 from 7000, times the constant, top 53 bits.
        let mut x: u64 = 7000;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let expect = ((x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 + 0.5) / 2f64.powi(53);
        assert_eq!(first, expect);
        let mut r = Rng(7001);
        let n = 20_000;
        let mean = (0..n).map(|_| r.exponential(1000.0)).sum::<u64>() as f64 / n as f64;
        assert!((mean - 1000.0).abs() < 30.0, "{mean}");
    }

    #[test]
    fn bisection_follows_fjords_steps_and_seeds() {
        let mut seen = Vec::new();
        let best = bisect(|pct, seed| {
            seen.push((pct, seed));
            Ok::<_, ()>(within_60(pct))
        })
        .unwrap();
        assert_eq!(seen.len(), 7);
        assert_eq!(seen[0], (65.0, 7000));
        assert_eq!(seen[1], (45.0, 7001));
        assert_eq!(seen[6].1, 7006);
        assert!(best > 590.0 && best <= 600.0, "{best}");
        // Nothing within: a run at half the lowest load, then three between it and the lowest.
        let mut seen = Vec::new();
        let best = bisect(|pct, seed| {
            seen.push((pct, seed));
            Ok::<_, ()>(Point {
                within: pct < 20.0,
                achieved: if seed == 7007 { 5.0 } else { 1.0 },
            })
        })
        .unwrap();
        assert_eq!(best, 5.0);
        let pcts: Vec<f64> = seen[7..].iter().map(|s| s.0).collect();
        assert_eq!(pcts, [12.5, 18.75, 21.875, 20.3125]);
        assert_eq!(seen.last().unwrap().1, 7010);
    }

    /// A system that keeps its SLO up to 60% of capacity.
    fn within_60(pct: f64) -> Point {
        Point {
            within: pct <= 60.0,
            achieved: pct * 10.0,
        }
    }

    #[test]
    fn common_bisection_warms_up_then_gives_every_run_the_first_seed() {
        let mut seen = Vec::new();
        let best = bisect_common(|pct, seed| {
            seen.push((pct, seed));
            // The warm-up is not counted, though here it would be the best.
            Ok::<_, ()>(if seed == WARM_UP_SEED {
                Point {
                    within: true,
                    achieved: 1e9,
                }
            } else {
                within_60(pct)
            })
        })
        .unwrap();
        assert_eq!(seen.len(), 1 + 7);
        assert_eq!(seen[0], (65.0, WARM_UP_SEED));
        assert!(seen[1..].iter().all(|&(_, seed)| seed == SEED));
        assert_eq!((seen[1].0, seen[2].0), (65.0, 45.0));
        assert!(best > 590.0 && best <= 600.0, "{best}");
    }

    #[test]
    fn fine_bisection_goes_on_to_its_resolution_on_the_same_arrivals() {
        // Within up to 33.3% of capacity: the plain search ends between 33.125 and 33.75
        // (0.625 apart, 1.9% of 33.125); to 0.5% it takes two more runs (0.156 apart).
        let within_33 = |pct: f64| Point {
            within: pct <= 33.3,
            achieved: pct * 10.0,
        };
        let mut seen = Vec::new();
        let best = bisect_common_fine(0.005, |pct, seed| {
            seen.push((pct, seed));
            Ok::<_, ()>(within_33(pct))
        })
        .unwrap();
        assert_eq!(seen.len(), 1 + 7 + 2);
        assert!(seen[8..].iter().all(|&(_, seed)| seed == SEED));
        assert_eq!((seen[8].0, seen[9].0), (33.4375, 33.28125));
        assert!(best > 332.0 && best <= 333.0, "{best}");
        // A coarse resolution adds nothing; a system never within is not refined.
        let mut runs = 0;
        bisect_common_fine(0.05, |pct, _| {
            runs += 1;
            Ok::<_, ()>(within_33(pct))
        })
        .unwrap();
        assert_eq!(runs, 1 + 7);
        let mut runs = 0;
        let best = bisect_common_fine(0.005, |_, _| {
            runs += 1;
            Ok::<_, ()>(Point {
                within: false,
                achieved: 1.0,
            })
        })
        .unwrap();
        assert_eq!((runs, best), (1 + 7 + DESCENTS, 0.0));
    }

    #[test]
    fn bisection_descends_until_a_run_is_within() {
        // A system within its SLO only below 2% of capacity: 12.5, 6.25, 3.125 fail, 1.5625
        // is within, then the search refines between 1.5625 and 3.125.
        let mut seen = Vec::new();
        let best = bisect(|pct, _| {
            seen.push(pct);
            Ok::<_, ()>(Point {
                within: pct <= 2.0,
                achieved: pct * 10.0,
            })
        })
        .unwrap();
        assert_eq!(seen.len(), 7 + 4 + 3);
        assert_eq!(seen[7..11], [12.5, 6.25, 3.125, 1.5625]);
        assert!(best > 19.0 && best <= 20.0, "{best}");
        // Never within: every halving is tried, and the result is 0.
        let mut runs = 0;
        let best = bisect(|_, _| {
            runs += 1;
            Ok::<_, ()>(Point {
                within: false,
                achieved: 1.0,
            })
        })
        .unwrap();
        assert_eq!((runs, best), (7 + DESCENTS, 0.0));
    }
}
