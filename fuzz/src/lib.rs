//! Fjord's host fuzzer: structured generation and mutation of what hostile clients and
//! tenants hand the gateway and the loader, on stable Rust.
//!
//! Each target ([`targets`]) makes structured inputs (HTTP requests, ELF modules, manifests)
//! and checks the code under test on them: no panic, and invariants that a wrong answer would
//! break. The [`engine`] mixes fresh inputs with mutations ([`mutate`]) of a seed corpus
//! (`fuzz/corpus/<target>/`) and of inputs that gave outcomes not seen before, catches panics,
//! and saves crashing inputs (`fuzz/crashes/<target>/`). Runs are repeatable for a seed.
//! `cargo xtask fuzz <target>` runs it; `docs/fuzzing.md` says why it is built this way.
//!
//! Cargo features: none.
#![forbid(unsafe_code)]

pub mod engine;
pub mod mutate;
pub mod rng;
pub mod targets;

use std::path::Path;

/// The files of a corpus folder (sorted by name, so runs repeat); none if it does not exist.
pub fn load_corpus(dir: &Path) -> std::io::Result<Vec<Vec<u8>>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut paths: Vec<_> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    paths.sort();
    paths.iter().map(std::fs::read).collect()
}

#[cfg(test)]
mod tests {
    //! A short, bounded pass of every target over its checked-in corpus: the host test layer
    //! of `cargo xtask test` runs these, and every crash the fuzzer ever found is a file of
    //! `fuzz/corpus/<target>/` (named `regression-*`), replayed here.
    use super::*;
    use crate::engine::{Config, fuzz, run_one};

    fn corpus(name: &str) -> Vec<Vec<u8>> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("corpus")
            .join(name);
        let corpus = load_corpus(&dir).unwrap();
        assert!(!corpus.is_empty(), "no seed corpus in {}", dir.display());
        corpus
    }

    /// Inputs of one short pass (a second or so per target in the test profile).
    const SHORT_PASS: u64 = 100_000;

    fn short_pass(name: &str) {
        let target = targets::find(name).unwrap();
        for input in corpus(name) {
            assert_eq!(run_one(&target, &input).err(), None, "{input:?}");
        }
        let report = fuzz(
            &target,
            &Config {
                iterations: SHORT_PASS,
                seed: 1,
                jobs: 1,
                corpus: corpus(name),
                crash_dir: None,
            },
        );
        assert_eq!(report.inputs, SHORT_PASS);
        assert!(report.crashes.is_empty(), "{:?}", report.crashes);
        assert!(report.outcomes > 5, "{} outcomes", report.outcomes);
    }

    #[test]
    fn fuzz_http_short_pass() {
        short_pass("http");
    }

    #[test]
    fn fuzz_elf_short_pass() {
        short_pass("elf");
    }

    #[test]
    fn fuzz_manifest_short_pass() {
        short_pass("manifest");
    }
}
