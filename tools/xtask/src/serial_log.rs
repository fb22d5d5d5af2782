//! Reading the kernel's serial protocol: in-kernel test lines, the test summary, `BENCH` records
//! and the boot banner.

use serde::Deserialize;

/// The line the kernel prints in run mode once it is up.
pub const READY_LINE: &str = "fjord: ready";

/// The boot banner's SYSCALL line starts with this (`fjord: SYSCALL enters ring 0 …` or
/// `fjord: SYSCALL is left in ring 3 by the hypervisor …`).
pub const SYSCALL_LINE: &str = "fjord: SYSCALL ";

/// What the SYSCALL line says when the hypervisor emulates the guest's ring 0 (KVM's PVM
/// backend): every kernel instruction then costs a trip through KVM's instruction emulator.
pub const RING0_EMULATED: &str = "is left in ring 3 by the hypervisor";

/// One line of in-kernel test output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KtestLine {
    /// `ktest <name> ... ok`
    Passed {
        /// Test name.
        name: String,
    },
    /// `ktest <name> ... FAILED: <reason>`
    Failed {
        /// Test name.
        name: String,
        /// What the test reported.
        reason: String,
    },
    /// `ktest <name> ... not run: <why>` (a slow test under `slow_tests=skip`)
    NotRun {
        /// Test name.
        name: String,
    },
    /// `ktest: N passed, M failed`
    Summary {
        /// Tests that passed.
        passed: u64,
        /// Tests that failed.
        failed: u64,
    },
}

impl KtestLine {
    /// Parses a serial line; `None` if it is not part of the test protocol.
    pub fn parse(line: &str) -> Option<KtestLine> {
        let line = line.trim();
        if let Some(counts) = line.strip_prefix("ktest:") {
            let (passed, failed) = parse_counts(counts)?;
            return Some(KtestLine::Summary { passed, failed });
        }
        let rest = line.strip_prefix("ktest ")?;
        // Test names never contain " ... "; a failure reason may.
        let (name, outcome) = rest.split_once(" ... ")?;
        let name = name.trim().to_owned();
        if outcome == "ok" {
            Some(KtestLine::Passed { name })
        } else if let Some(reason) = outcome.strip_prefix("FAILED") {
            let reason = reason.trim_start_matches(':').trim().to_owned();
            Some(KtestLine::Failed { name, reason })
        } else if outcome.starts_with("not run") {
            Some(KtestLine::NotRun { name })
        } else {
            None
        }
    }
}

/// Parses `N passed, M failed` (surrounding whitespace allowed).
pub fn parse_counts(text: &str) -> Option<(u64, u64)> {
    let (passed, failed) = text.trim().split_once(',')?;
    let passed = passed.trim().strip_suffix(" passed")?.trim().parse().ok()?;
    let failed = failed.trim().strip_suffix(" failed")?.trim().parse().ok()?;
    Some((passed, failed))
}

/// One `BENCH {json}` record as the guest prints it.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct BenchRecord {
    /// Benchmark group (`boot`, `syscall`, …).
    pub group: String,
    /// Metric name.
    pub metric: String,
    /// Unit of the numbers (`insns` for guest instructions under icount).
    pub unit: String,
    /// Median of the samples.
    pub median: f64,
    /// Smallest sample.
    pub min: f64,
    /// Largest sample.
    pub max: f64,
    /// Number of samples.
    pub runs: u64,
    /// `fjord` (default), `fjord_ni` or `fjord_baseline`.
    #[serde(default)]
    pub system: Option<String>,
    /// Host wall-clock nanoseconds per operation, if the guest measured them.
    #[serde(default)]
    pub wall_ns: Option<f64>,
    /// The 99th percentile of the samples (reported with `bench_clock=ns`).
    #[serde(default)]
    pub p99: Option<f64>,
}

/// Parses a `BENCH {json}` line: `None` if the line is not a bench record, `Some(Err)` if it is one
/// but its JSON is malformed. A record a user program printed (`[user cpuN] BENCH {json}`, the
/// `fork` group's) counts as well.
pub fn parse_bench_line(line: &str) -> Option<Result<BenchRecord, serde_json::Error>> {
    let line = line.trim();
    let line = match line.strip_prefix("[user cpu") {
        Some(rest) => rest.split_once("] ")?.1,
        None => line,
    };
    let json = line.strip_prefix("BENCH ")?;
    Some(serde_json::from_str(json.trim()))
}

/// Whether a banner line announces `cpus` CPUs (`fjord: 2 CPUs (APIC ids 0,1), …`).
pub fn banner_reports_cpus(line: &str, cpus: u32) -> bool {
    let word = if cpus == 1 { "CPU" } else { "CPUs" };
    let wanted = format!("{cpus} {word}");
    line.starts_with("fjord:")
        && line.match_indices(&wanted).any(|(at, _)| {
            let before = line[..at].chars().next_back();
            let after = line[at + wanted.len()..].chars().next();
            !before.is_some_and(|c| c.is_ascii_digit()) && !after.is_some_and(char::is_alphanumeric)
        })
}

/// Removes ANSI escape sequences (colours) and a trailing carriage return from a serial line.
pub fn clean_line(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                // CSI: parameters and intermediates, then one final byte in @..~.
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            } else if let Some('(' | ')' | '*' | '+') = chars.next() {
                // Character-set designation: one more byte.
                chars.next();
            }
        } else if c != '\r' {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ktest_lines() {
        assert_eq!(
            KtestLine::parse("ktest frame_alloc::reuses_frames ... ok"),
            Some(KtestLine::Passed {
                name: "frame_alloc::reuses_frames".into()
            })
        );
        assert_eq!(
            KtestLine::parse("ktest smp::ipi ... FAILED: no reply from CPU 1 ... after 5 s"),
            Some(KtestLine::Failed {
                name: "smp::ipi".into(),
                reason: "no reply from CPU 1 ... after 5 s".into()
            })
        );
        assert_eq!(
            KtestLine::parse("ktest: 41 passed, 2 failed\r"),
            Some(KtestLine::Summary {
                passed: 41,
                failed: 2
            })
        );
        assert_eq!(
            KtestLine::parse("ktest ufork::big ... not run: slow where ring 0 is emulated"),
            Some(KtestLine::NotRun {
                name: "ufork::big".to_owned()
            })
        );
        assert_eq!(KtestLine::parse("ktest: 41 passed"), None);
        assert_eq!(KtestLine::parse("fjord: ready"), None);
        assert_eq!(KtestLine::parse("ktest x ... running"), None);
    }

    #[test]
    fn parses_counts() {
        assert_eq!(parse_counts(" 3 passed, 0 failed"), Some((3, 0)));
        assert_eq!(parse_counts("3 passed; 0 failed"), None);
    }

    #[test]
    fn parses_bench_lines() {
        let line = r#"BENCH {"group":"boot","metric":"boot_to_first_line","unit":"insns","median":1234,"min":1200,"max":1300,"runs":5}"#;
        let record = parse_bench_line(line).unwrap().unwrap();
        assert_eq!(record.group, "boot");
        assert_eq!(record.metric, "boot_to_first_line");
        assert_eq!(record.median, 1234.0);
        assert_eq!(record.runs, 5);
        assert_eq!(record.system, None);

        let ni = r#"BENCH {"group":"pd","metric":"pd_switch","unit":"insns","median":1.5,"min":1,"max":2,"runs":3,"system":"fjord_ni"}"#;
        assert_eq!(
            parse_bench_line(ni).unwrap().unwrap().system.as_deref(),
            Some("fjord_ni")
        );

        assert!(parse_bench_line("BENCH {not json").unwrap().is_err());
        let user = r#"[user cpu1] BENCH {"group":"fork","metric":"fork_exit_wait_1mb","unit":"insns","median":5,"min":4,"max":6,"runs":3}"#;
        assert_eq!(
            parse_bench_line(user).unwrap().unwrap().metric,
            "fork_exit_wait_1mb"
        );
        assert!(parse_bench_line("[user cpu1] hello").is_none());
        assert!(parse_bench_line("fjord: ready").is_none());
    }

    #[test]
    fn recognises_cpu_count_in_banner() {
        let banner = "fjord: 2 CPUs (APIC ids 0,1), 512 MiB RAM (503 MiB free)";
        assert!(banner_reports_cpus(banner, 2));
        assert!(!banner_reports_cpus(banner, 1));
        assert!(!banner_reports_cpus("fjord: 12 CPUs (…)", 2));
        assert!(banner_reports_cpus(
            "fjord: 1 CPU (APIC id 0), 512 MiB RAM",
            1
        ));
        assert!(!banner_reports_cpus("Fjord 0.1.0 booting 2 CPUs", 2));
    }

    #[test]
    fn cleans_colours_and_carriage_returns() {
        assert_eq!(clean_line("\u{1b}[32mINFO\u{1b}[0m hello\r"), "INFO hello");
        assert_eq!(clean_line("plain"), "plain");
        assert_eq!(clean_line("\u{1b}(B\u{1b}[m+    x"), "+    x");
    }
}
