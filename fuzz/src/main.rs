//! `fjord-fuzz <target> [--iterations N] [--seed S] [--jobs J] [--replay FILE]`: fuzzes one
//! host target (`http`, `elf`, `manifest`) from its corpus in `fuzz/corpus/<target>/`, saves
//! crashing inputs in `fuzz/crashes/<target>/`, prints one summary line and exits non-zero on
//! any crash. `cargo xtask fuzz` builds and runs it.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use fjord_fuzz::engine::{Config, fuzz, run_one};
use fjord_fuzz::{load_corpus, targets};

/// The parsed command line.
struct Options {
    target: String,
    iterations: u64,
    seed: u64,
    jobs: usize,
    replay: Option<PathBuf>,
}

fn parse_number(text: &str) -> Result<u64, String> {
    let clean = text.replace(['_', ','], "");
    match clean.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => clean.parse(),
    }
    .map_err(|_| format!("not a number: {text}"))
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Options, String> {
    let mut options = Options {
        target: String::new(),
        iterations: 1_000_000,
        seed: 1,
        jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
        replay: None,
    };
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--iterations" | "-n" => options.iterations = parse_number(&value()?)?,
            "--seed" => options.seed = parse_number(&value()?)?,
            "--jobs" | "-j" => options.jobs = parse_number(&value()?)?.max(1) as usize,
            "--replay" => options.replay = Some(PathBuf::from(value()?)),
            _ if arg.starts_with('-') => return Err(format!("unknown option {arg}")),
            _ if options.target.is_empty() => options.target = arg,
            _ => return Err(format!("unexpected argument {arg}")),
        }
    }
    if options.target.is_empty() {
        return Err("which target? http, elf or manifest".into());
    }
    Ok(options)
}

fn main() -> ExitCode {
    let options = match parse_args(std::env::args().skip(1)) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("fjord-fuzz: {e}");
            return ExitCode::from(2);
        }
    };
    let Some(target) = targets::find(&options.target) else {
        eprintln!(
            "fjord-fuzz: no target {} (http, elf, manifest)",
            options.target
        );
        return ExitCode::from(2);
    };
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    if let Some(file) = options.replay {
        let input = match std::fs::read(&file) {
            Ok(i) => i,
            Err(e) => {
                eprintln!("fjord-fuzz: {}: {e}", file.display());
                return ExitCode::from(2);
            }
        };
        return match run_one(&target, &input) {
            Ok(outcome) => {
                println!(
                    "fuzz {}: {} passes (outcome {outcome:#x})",
                    target.name,
                    file.display()
                );
                ExitCode::SUCCESS
            }
            Err(v) => {
                println!("fuzz {}: {} fails: {}", target.name, file.display(), v.0);
                ExitCode::FAILURE
            }
        };
    }
    let corpus_dir = root.join("corpus").join(target.name);
    let corpus = match load_corpus(&corpus_dir) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("fjord-fuzz: {}: {e}", corpus_dir.display());
            return ExitCode::from(2);
        }
    };
    let config = Config {
        iterations: options.iterations,
        seed: options.seed,
        jobs: options.jobs,
        corpus,
        crash_dir: Some(root.join("crashes").join(target.name)),
    };
    let seeds = config.corpus.len();
    let report = fuzz(&target, &config);
    let secs = report.elapsed.as_secs_f64();
    println!(
        "fuzz {}: {} inputs in {:.1} s ({:.0}/s, {} jobs, seed {}), {} seeds, {} distinct outcomes, {} crashes",
        target.name,
        report.inputs,
        secs,
        report.inputs as f64 / secs.max(1e-9),
        config.jobs,
        config.seed,
        seeds,
        report.outcomes,
        report.crash_count
    );
    for crash in &report.crashes {
        let at = crash
            .saved
            .as_ref()
            .map_or_else(|| "not saved".to_owned(), |p| p.display().to_string());
        println!("  crash ({at}): {}", crash.reason);
    }
    if report.crash_count == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
