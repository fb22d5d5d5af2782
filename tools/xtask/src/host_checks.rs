//! The host-side test layers: lints (`cargo fmt`, `cargo clippy` for the host and for the kernel
//! target, the kernel's layering) and the host unit tests (`cargo test --workspace`).

use std::process::Command;
use std::time::Instant;

use crate::kernel_build::{KERNEL_PACKAGE, KERNEL_TARGET};
use crate::test_runner::Tally;
use crate::{serial_log, workspace};

/// Runs the four lints, one line each; prints a failing lint's output.
pub fn lint() -> Tally {
    let mut tally = layering();
    if let Err(e) = crate::host_deps::ensure_rust_target(KERNEL_TARGET) {
        eprintln!("xtask: {e:#}");
    }
    let checks: [(&str, &[&str]); 3] = [
        ("fmt", &["fmt", "--all", "--check"]),
        (
            "clippy-host",
            &["clippy", "--workspace", "--", "-D", "warnings"],
        ),
        (
            "clippy-kernel",
            &[
                "clippy",
                "--package",
                KERNEL_PACKAGE,
                "--target",
                KERNEL_TARGET,
                "--",
                "-D",
                "warnings",
            ],
        ),
    ];
    for (name, args) in checks {
        let mut command = workspace::cargo();
        command.args(args);
        let started = Instant::now();
        let result = run_captured(&mut command);
        let seconds = started.elapsed().as_secs_f64();
        match result {
            Ok(_) => {
                println!("lint {name} ... ok ({seconds:.1} s)");
                tally.passed += 1;
            }
            Err(output) => {
                println!(
                    "lint {name} ... FAILED (`{}`)",
                    workspace::display_command(&command)
                );
                print_indented(&output, 80);
                tally.failed += 1;
            }
        }
    }
    tally
}

/// The kernel's layering check ([`crate::layers`]): one line, and each finding when it fails.
fn layering() -> Tally {
    let src = workspace::root().join("kernel/src");
    let findings = match crate::layers::read_tree(&src) {
        Ok(sources) => crate::layers::check(&sources)
            .iter()
            .map(ToString::to_string)
            .collect(),
        Err(e) => vec![format!("could not read {}: {e}", src.display())],
    };
    if findings.is_empty() {
        println!("lint layers ... ok ({})", crate::layers::ORDER.join(" < "));
        Tally {
            passed: 1,
            failed: 0,
        }
    } else {
        println!(
            "lint layers ... FAILED ({} findings; order: {})",
            findings.len(),
            crate::layers::ORDER.join(" < ")
        );
        for f in &findings {
            println!("  {f}");
        }
        Tally {
            passed: 0,
            failed: 1,
        }
    }
}

/// Runs `cargo test --workspace [filter]`, sums its `test result:` lines and prints one line;
/// on failure also the end of cargo's output.
pub fn unit_tests(filter: Option<&str>) -> Tally {
    // xtask's own tests check `/metrics` texts with promtool: installed here, once, not by
    // tests running in parallel.
    if let Err(e) = crate::host_deps::ensure_promtool() {
        eprintln!("xtask: {e:#}");
    }
    let mut command = workspace::cargo();
    command.args(["test", "--workspace"]);
    if let Some(filter) = filter {
        command.args(["--", filter]);
    }
    let started = Instant::now();
    let result = run_captured(&mut command);
    let seconds = started.elapsed().as_secs_f64();
    let (output, completed) = match result {
        Ok(output) => (output, true),
        Err(output) => (output, false),
    };
    let counts = TestCounts::parse(&output);
    let mut tally = Tally {
        passed: counts.passed,
        failed: counts.failed,
    };
    let summary = format!(
        "{} passed, {} failed, {} ignored in {} test binaries; {seconds:.1} s",
        counts.passed, counts.failed, counts.ignored, counts.suites
    );
    if completed && counts.failed == 0 {
        println!("host cargo test ... ok ({summary})");
    } else {
        if counts.failed == 0 {
            // cargo failed without a failing test: it did not build, or a test binary crashed.
            tally.failed += 1;
        }
        println!("host cargo test ... FAILED ({summary})");
        print_indented(&output, 120);
    }
    tally
}

/// Sums of cargo's `test result:` lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TestCounts {
    /// Tests that passed.
    pub passed: u64,
    /// Tests that failed.
    pub failed: u64,
    /// Tests ignored.
    pub ignored: u64,
    /// Number of `test result:` lines (test binaries and doc-test runs).
    pub suites: u64,
}

impl TestCounts {
    /// Sums every `test result: ok. 3 passed; 0 failed; 1 ignored; …` line in `output`.
    pub fn parse(output: &str) -> TestCounts {
        let mut counts = TestCounts::default();
        for line in output.lines() {
            let Some(rest) = line.trim().strip_prefix("test result: ") else {
                continue;
            };
            counts.suites += 1;
            let fields = rest.split_once(". ").map_or(rest, |(_, fields)| fields);
            for field in fields.split(';') {
                let mut words = field.split_whitespace();
                let (Some(number), Some(what)) = (words.next(), words.next()) else {
                    continue;
                };
                let Ok(number) = number.parse::<u64>() else {
                    continue;
                };
                match what {
                    "passed" => counts.passed += number,
                    "failed" => counts.failed += number,
                    "ignored" => counts.ignored += number,
                    _ => {}
                }
            }
        }
        counts
    }
}

/// Runs a command with stdin closed and returns its stdout and stderr together, `Err` when it
/// could not start or exited non-zero.
fn run_captured(command: &mut Command) -> Result<String, String> {
    command
        .stdin(std::process::Stdio::null())
        .env("CARGO_TERM_COLOR", "never");
    match command.output() {
        Ok(output) => {
            let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&output.stderr));
            if output.status.success() {
                Ok(text)
            } else {
                Err(text)
            }
        }
        Err(error) => Err(format!("could not start: {error}")),
    }
}

/// Prints the last `max_lines` lines of `text`, indented.
fn print_indented(text: &str, max_lines: usize) {
    let lines: Vec<&str> = text.lines().collect();
    let skipped = lines.len().saturating_sub(max_lines);
    if skipped > 0 {
        println!("    | … {skipped} earlier lines");
    }
    for line in &lines[skipped..] {
        println!("    | {}", serial_log::clean_line(line));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_test_result_lines() {
        let output = "\
running 3 tests
test a ... ok
test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s

test result: FAILED. 5 passed; 2 failed; 0 ignored; 0 measured; 3 filtered out; finished in 1.20s
   Doc-tests fjord_pd
test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s
";
        assert_eq!(
            TestCounts::parse(output),
            TestCounts {
                passed: 8,
                failed: 2,
                ignored: 1,
                suites: 3
            }
        );
        assert_eq!(
            TestCounts::parse("error[E0425]: cannot find value"),
            TestCounts::default()
        );
    }
}
