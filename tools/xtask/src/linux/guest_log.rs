//! The lines the Linux guest's `/init` and benchmark programs print on the serial console, and
//! how they become [`Measurement`]s.
//!
//! | line | printed by | meaning |
//! |---|---|---|
//! | `LSTEP <i> <n> <group> <cmd…>` | `/init` | step `i` of `n` starts |
//! | `LINFO <text>` | both | information kept for the log (THP setting, RDTSC pair cost) |
//! | `LBEGIN <metric>` | program | a timed loop that does only the measured operation starts |
//! | `LBENCH {json}` | program | one metric's result (median, min, max, runs) |
//! | `LFAIL <cmd…> <status>` | `/init` | a benchmark program exited with a non-zero status |
//! | `LDONE` | `/init` | every step ran; the guest powers off next |

use serde::Deserialize;

use crate::measure::{Measurement, System};

/// One `LBENCH {json}` record: the statistics a benchmark program computed in the guest.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinuxRecord {
    /// Benchmark group (`syscall`, `fork`, …).
    pub group: String,
    /// Metric name shared with Fjord (`null_syscall`, …).
    pub metric: String,
    /// Unit of the numbers; `insns` = guest instructions under icount.
    pub unit: String,
    /// Median of the samples (one of the samples: the programs use odd run counts).
    pub median: u64,
    /// Smallest sample.
    pub min: u64,
    /// Largest sample.
    pub max: u64,
    /// Number of samples.
    pub runs: u64,
}

impl LinuxRecord {
    /// The record as a [`Measurement`] of [`System::Linux`], with the host-measured wall time
    /// per operation if there is one.
    pub fn into_measurement(self, wall_ns: Option<f64>) -> Measurement {
        // Counts stay far below 2^53, so the conversions to f64 are exact.
        Measurement {
            group: self.group,
            metric: self.metric,
            system: System::Linux,
            unit: self.unit,
            median: self.median as f64,
            min: self.min as f64,
            max: self.max as f64,
            runs: self.runs,
            wall_ns,
            p99: None,
        }
    }
}

/// One meaningful line of guest output.
#[derive(Clone, Debug, PartialEq)]
pub enum GuestLine {
    /// `/init` starts step `index` (1-based) of `total`, in `group`, running `command`.
    Step {
        /// 1-based step number.
        index: u32,
        /// Number of steps.
        total: u32,
        /// The step's benchmark group.
        group: String,
        /// The program and its arguments.
        command: String,
    },
    /// Informative text.
    Info(String),
    /// A timed loop for `metric` starts.
    Begin(String),
    /// A result.
    Bench(LinuxRecord),
    /// A malformed `LBENCH` line (the text after the tag, and the JSON error).
    BadBench(String, String),
    /// A program failed: its command line and exit status.
    Fail(String),
    /// All steps ran.
    Done,
    /// Anything else (kernel messages, a program's stderr).
    Other,
}

/// Classifies one serial line (leading kernel-timestamp-free; surrounding spaces ignored).
pub fn parse_line(line: &str) -> GuestLine {
    let line = line.trim();
    let (tag, rest) = line.split_once(' ').unwrap_or((line, ""));
    let rest = rest.trim();
    match tag {
        "LSTEP" => parse_step(rest).unwrap_or(GuestLine::Other),
        "LINFO" => GuestLine::Info(rest.to_owned()),
        "LBEGIN" if !rest.is_empty() => GuestLine::Begin(rest.to_owned()),
        "LBENCH" => match serde_json::from_str::<LinuxRecord>(rest) {
            Ok(record) => GuestLine::Bench(record),
            Err(error) => GuestLine::BadBench(rest.to_owned(), error.to_string()),
        },
        "LFAIL" => GuestLine::Fail(rest.to_owned()),
        "LDONE" if rest.is_empty() => GuestLine::Done,
        _ => GuestLine::Other,
    }
}

/// Parses the part of an `LSTEP` line after the tag: `<index> <total> <group> <command…>`.
fn parse_step(rest: &str) -> Option<GuestLine> {
    let mut words = rest.splitn(4, ' ');
    let index = words.next()?.parse().ok()?;
    let total = words.next()?.parse().ok()?;
    let group = words.next()?.to_owned();
    let command = words.next()?.trim().to_owned();
    Some(GuestLine::Step {
        index,
        total,
        group,
        command,
    })
}

/// Wall-clock nanoseconds per operation from the host times at which `LBEGIN` and `LBENCH`
/// arrived. `None` when there was no `LBEGIN`, no runs, or the clock went backwards.
pub fn wall_ns_per_op(begin_ns: Option<u128>, bench_ns: u128, runs: u64) -> Option<f64> {
    let begin_ns = begin_ns?;
    if runs == 0 || bench_ns < begin_ns {
        return None;
    }
    Some((bench_ns - begin_ns) as f64 / runs as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FORK_1MB: &str = r#"LBENCH {"group":"fork","metric":"fork_exit_wait_1mb","unit":"insns","median":363250,"min":362172,"max":432243,"runs":51}"#;

    #[test]
    fn parses_a_bench_line_into_a_linux_measurement() {
        let GuestLine::Bench(record) = parse_line(FORK_1MB) else {
            panic!("not a bench line");
        };
        let m = record.into_measurement(Some(12.5));
        assert_eq!(m.system, System::Linux);
        assert_eq!(
            (m.group.as_str(), m.metric.as_str()),
            ("fork", "fork_exit_wait_1mb")
        );
        assert_eq!(m.unit, "insns");
        assert_eq!(
            (m.median, m.min, m.max, m.runs),
            (363250.0, 362172.0, 432243.0, 51)
        );
        assert_eq!(m.wall_ns, Some(12.5));
    }

    #[test]
    fn tolerates_carriage_returns_and_spaces() {
        let line = format!("  {FORK_1MB}\r");
        assert!(matches!(parse_line(&line), GuestLine::Bench(_)));
    }

    #[test]
    fn malformed_bench_json_is_reported_not_dropped() {
        match parse_line(r#"LBENCH {"group":"fork","metric":"x","median":-3}"#) {
            GuestLine::BadBench(text, _) => assert!(text.starts_with('{')),
            other => panic!("{other:?}"),
        }
        // Unknown fields are rejected, so a protocol change cannot go unnoticed.
        let extra = FORK_1MB.replace(r#""runs":51"#, r#""runs":51,"mean":3"#);
        assert!(matches!(parse_line(&extra), GuestLine::BadBench(..)));
    }

    #[test]
    fn parses_protocol_lines() {
        assert_eq!(
            parse_line("LSTEP 3 12 fork /bench/fork 10"),
            GuestLine::Step {
                index: 3,
                total: 12,
                group: "fork".into(),
                command: "/bench/fork 10".into()
            }
        );
        assert_eq!(parse_line("LSTEP x 12 fork a"), GuestLine::Other);
        assert_eq!(
            parse_line("LBEGIN null_syscall"),
            GuestLine::Begin("null_syscall".into())
        );
        assert_eq!(parse_line("LBEGIN"), GuestLine::Other);
        assert_eq!(
            parse_line("LINFO thp always madvise [never]"),
            GuestLine::Info("thp always madvise [never]".into())
        );
        assert_eq!(
            parse_line("LFAIL /bench/mm 1"),
            GuestLine::Fail("/bench/mm 1".into())
        );
        assert_eq!(parse_line("LDONE"), GuestLine::Done);
        assert_eq!(
            parse_line("[    0.504576] reboot: Power down"),
            GuestLine::Other
        );
        assert_eq!(parse_line("LBENCHMARK"), GuestLine::Other);
    }

    #[test]
    fn wall_time_per_operation() {
        assert_eq!(wall_ns_per_op(Some(1_000), 11_000, 10), Some(1_000.0));
        assert_eq!(wall_ns_per_op(None, 11_000, 10), None);
        assert_eq!(wall_ns_per_op(Some(1_000), 11_000, 0), None);
        assert_eq!(wall_ns_per_op(Some(12_000), 11_000, 10), None);
    }
}
