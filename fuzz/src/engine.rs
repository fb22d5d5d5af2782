//! The fuzzing loop: generate or mutate an input, run the target on it, catch panics and broken
//! invariants, and keep inputs with outcomes not seen before as further material.

use std::collections::HashSet;
use std::panic::{self, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::mutate::mutate;
use crate::rng::{Rng, fnv};

/// What a target found wrong with an input, beyond not panicking.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation(pub String);

/// A fuzz target: how to make inputs and how to check one.
#[derive(Clone, Copy)]
pub struct Target {
    /// The name `cargo xtask fuzz` knows it by.
    pub name: &'static str,
    /// Longest input it is given.
    pub max_len: usize,
    /// Writes a new structured input into the buffer (cleared first).
    pub generate: fn(&mut Rng, &mut Vec<u8>),
    /// Runs the code under test on one input: `Ok` with a number naming the outcome (inputs
    /// with new outcomes are kept for mutation), or the invariant it broke.
    pub check: fn(&[u8]) -> Result<u64, Violation>,
}

/// How a run goes.
#[derive(Clone, Debug)]
pub struct Config {
    /// Inputs to try, in all threads together.
    pub iterations: u64,
    /// Seed of the first thread (thread `i` uses `seed + i`).
    pub seed: u64,
    /// Threads.
    pub jobs: usize,
    /// Seed inputs (the checked-in corpus).
    pub corpus: Vec<Vec<u8>>,
    /// Where crashing inputs are written (`None`: not written).
    pub crash_dir: Option<PathBuf>,
}

/// One input that panicked or broke an invariant.
#[derive(Clone, Debug)]
pub struct Crash {
    /// The input.
    pub input: Vec<u8>,
    /// The panic message or the broken invariant.
    pub reason: String,
    /// Where it was saved, if it was.
    pub saved: Option<PathBuf>,
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Inputs tried.
    pub inputs: u64,
    /// Distinct outcomes seen.
    pub outcomes: usize,
    /// Crashing inputs (at most [`MAX_CRASHES_KEPT`] per thread).
    pub crashes: Vec<Crash>,
    /// Crashes in all (the same bug usually crashes many inputs).
    pub crash_count: u64,
    /// Wall time.
    pub elapsed: Duration,
}

/// Crashing inputs one thread keeps and saves.
pub const MAX_CRASHES_KEPT: usize = 16;
/// Inputs with new outcomes one thread keeps beside the seed corpus.
const MAX_DISCOVERED: usize = 4096;

/// Runs `check` on `input`, turning a panic into a [`Violation`].
pub fn run_one(target: &Target, input: &[u8]) -> Result<u64, Violation> {
    match panic::catch_unwind(AssertUnwindSafe(|| (target.check)(input))) {
        Ok(result) => result,
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic".to_owned());
            Err(Violation(format!("panic: {message}")))
        }
    }
}

/// Silences the default panic message while fuzzing (panics are reported as crashes); the
/// previous hook comes back when the guard is dropped.
struct QuietPanics(Option<PanicHook>);

/// A panic hook, as [`panic::take_hook`] returns it.
type PanicHook = Box<dyn Fn(&panic::PanicHookInfo<'_>) + Sync + Send + 'static>;

static HOOK_LOCK: Mutex<()> = Mutex::new(());

impl QuietPanics {
    fn install() -> Self {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(|_| {}));
        QuietPanics(Some(previous))
    }
}

impl Drop for QuietPanics {
    fn drop(&mut self) {
        if let Some(previous) = self.0.take() {
            panic::set_hook(previous);
        }
    }
}

/// Fuzzes `target` as `config` says and reports what happened.
pub fn fuzz(target: &Target, config: &Config) -> Report {
    let started = Instant::now();
    let _lock = HOOK_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let _quiet = QuietPanics::install();
    let jobs = config.jobs.max(1) as u64;
    let reports: Vec<Report> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..jobs)
            .map(|j| {
                let share = config.iterations / jobs + u64::from(j < config.iterations % jobs);
                let seed = config.seed.wrapping_add(j);
                scope.spawn(move || fuzz_thread(target, config, seed, share))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let mut total = Report::default();
    for r in reports {
        total.inputs += r.inputs;
        total.outcomes = total.outcomes.max(r.outcomes);
        total.crash_count += r.crash_count;
        total.crashes.extend(r.crashes);
    }
    total.elapsed = started.elapsed();
    total
}

fn fuzz_thread(target: &Target, config: &Config, seed: u64, iterations: u64) -> Report {
    let mut rng = Rng::new(seed);
    let mut pool: Vec<Vec<u8>> = config.corpus.clone();
    let seeds = pool.len();
    let mut seen = HashSet::new();
    let mut report = Report::default();
    let mut input = Vec::with_capacity(target.max_len);
    for i in 0..iterations {
        input.clear();
        if pool.is_empty() || rng.one_in(4) {
            (target.generate)(&mut rng, &mut input);
            input.truncate(target.max_len);
        } else {
            // Seeds and discovered inputs alike; the seeds a little more often.
            let from = if seeds > 0 && rng.one_in(3) {
                rng.below(seeds)
            } else {
                rng.below(pool.len())
            };
            input.extend_from_slice(&pool[from]);
            let other = rng.below(pool.len());
            for _ in 0..1 + rng.below(6) {
                mutate(&mut rng, &mut input, &pool[other], target.max_len);
            }
        }
        report.inputs = i + 1;
        match run_one(target, &input) {
            Ok(outcome) => {
                if seen.insert(outcome) && pool.len() < seeds + MAX_DISCOVERED {
                    pool.push(input.clone());
                }
            }
            Err(Violation(reason)) => {
                report.crash_count += 1;
                if report.crashes.len() < MAX_CRASHES_KEPT {
                    let saved = save(config, &input, &reason);
                    report.crashes.push(Crash {
                        input: input.clone(),
                        reason,
                        saved,
                    });
                }
            }
        }
    }
    report.outcomes = seen.len();
    report
}

/// Writes a crashing input (and its reason beside it) to the crash folder.
fn save(config: &Config, input: &[u8], reason: &str) -> Option<PathBuf> {
    let dir = config.crash_dir.as_ref()?;
    std::fs::create_dir_all(dir).ok()?;
    let path = dir.join(format!("crash-{:016x}", fnv(input)));
    std::fs::write(&path, input).ok()?;
    std::fs::write(path.with_extension("txt"), reason).ok()?;
    Some(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn panics_on_bang(input: &[u8]) -> Result<u64, Violation> {
        if input.contains(&b'!') {
            panic!("found a bang");
        }
        if input.len() > 40 {
            return Err(Violation("too long".into()));
        }
        Ok(input.len() as u64)
    }

    fn letters(rng: &mut Rng, out: &mut Vec<u8>) {
        for _ in 0..rng.below(8) {
            out.push(b'a' + rng.below(26) as u8);
        }
    }

    #[test]
    fn finds_panics_and_violations_and_repeats_for_a_seed() {
        let target = Target {
            name: "toy",
            max_len: 64,
            generate: letters,
            check: panics_on_bang,
        };
        let config = Config {
            iterations: 20_000,
            seed: 5,
            jobs: 2,
            corpus: vec![b"hello".to_vec()],
            crash_dir: None,
        };
        let r = fuzz(&target, &config);
        assert_eq!(r.inputs, 20_000);
        assert!(r.crash_count > 0);
        assert!(r.crashes.iter().any(|c| c.reason.contains("found a bang")));
        assert!(r.crashes.iter().any(|c| c.reason == "too long"));
        assert_eq!(fuzz(&target, &config).crash_count, r.crash_count);
    }
}
