//! The benchmark report: Fjord and the Linux guest side by side, measured in the same run.
//!
//! [`write_report`] writes, under the results directory (`bench/results/`):
//! - `<date>.json`: every measurement (merged with the day's earlier runs, see `bench_results`);
//! - `<date>.md`: per group, a table `| metric | Fjord | Linux | Fjord/Linux |` of medians in
//!   guest instructions, with wall time per operation as secondary columns, and the method in
//!   brief;
//! - `<date>-<group>.png`: horizontal bar charts of the same medians (`plot`).
//!
//! [`update_readme`] puts a summary, with the command that produced it, between the README's
//! `<!-- bench-report:start -->` and `<!-- bench-report:end -->` markers: one table of every
//! metric measured on both sides and of the [`HEADLINES`] measured on Fjord alone, each once.
//!
//! A metric measured on only one side shows `— (missing)` on the other: the report never
//! fills a gap with another source's number. No cargo features.

pub mod kvm;
mod plot;

pub use kvm::{update_readme_kvm, write_kvm_report};

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};

use crate::bench_results;
use crate::measure::{Measurement, System};

/// What an empty cell says.
pub const MISSING: &str = "— (missing)";

/// The unit of guest instructions counted under icount.
pub const INSNS: &str = "insns";

/// One metric's row: the measurement of each system, if any.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Row<'a> {
    /// Benchmark group.
    pub group: &'a str,
    /// Metric name.
    pub metric: &'a str,
    /// The Linux metric shown in this row when its name differs from `metric`.
    pub linux_metric: Option<&'a str>,
    /// The Fjord metric shown in this row when its name differs from `metric`.
    pub fjord_metric: Option<&'a str>,
    /// Fjord's measurement.
    pub fjord: Option<&'a Measurement>,
    /// The Linux guest's measurement.
    pub linux: Option<&'a Measurement>,
    /// Fjord's no-isolation mode (Jord_NI).
    pub fjord_ni: Option<&'a Measurement>,
    /// A baseline implemented inside Fjord.
    pub fjord_baseline: Option<&'a Measurement>,
}

impl Row<'_> {
    /// The metric's name as a table shows it, with the other side's name when it differs.
    pub fn label(&self) -> String {
        match (self.linux_metric, self.fjord_metric) {
            (Some(l), _) => format!("`{}` (Linux: `{l}`)", self.metric),
            (None, Some(f)) => format!("`{}` (Fjord: `{f}`)", self.metric),
            (None, None) => format!("`{}`", self.metric),
        }
    }

    /// The measurement of `system` in this row.
    pub fn get(&self, system: System) -> Option<&Measurement> {
        match system {
            System::Fjord => self.fjord,
            System::Linux => self.linux,
            System::FjordNi => self.fjord_ni,
            System::FjordBaseline => self.fjord_baseline,
        }
    }
}

/// Fjord metrics whose Linux counterpart has another name: a PD switch round trip (ccall and
/// creturn between two protection domains) against a pipe round trip between two processes;
/// the chain with one gate crossing per hop against the same chain of processes over pipes.
/// Starting a program and waiting for it: `spawn` against `fork` + `exec` + `wait`. The
/// `redis` program's `BGSAVE` fork with 100 MB of values against `fork` + `exit` + `wait` of a
/// Linux process with 100 MiB touched (Redis's `BGSAVE` on Linux is one `fork` of its process).
pub const COUNTERPARTS: &[(&str, &str)] = &[
    ("pd_switch_roundtrip", "pipe_pingpong_roundtrip"),
    ("chain_abcba_1k_move", "chain_abcba_1k"),
    ("spawn_wait", "fork_exec_wait"),
    ("redis_bgsave_fork_100mb", "fork_exit_wait_100mb"),
];

/// Fjord metrics without a Linux figure that the README's summary keeps: the comparisons the
/// targets name (a 100 MB fork in full copy against copy-on-pointer-access, the memory a forked
/// hello-world adds) and the costs of one invocation and its isolation.
pub const HEADLINES: &[&str] = &[
    "boot_to_first_line",
    "vma_fault_fill",
    "pd_create",
    "invocation_isolation_overhead",
    "fork_exit_wait_100mb_full",
    "fork_hello_memory",
    "redis_bgsave_100mb",
    "hello_invoke",
    "dispatch_latency",
    "work20k_throughput_at_slo",
];

/// The Linux metric that measures the same thing as Fjord's `metric` (a μprocess metric
/// measured at an isolation level, `…_iso_full` or `…_iso_nonadv`, has its base's counterpart).
pub fn linux_counterpart(metric: &str) -> &str {
    let base = ["_iso_full", "_iso_nonadv"]
        .iter()
        .find_map(|s| metric.strip_suffix(s))
        .unwrap_or(metric);
    COUNTERPARTS
        .iter()
        .find(|(f, _)| *f == base)
        .map_or(base, |(_, l)| l)
}

/// Groups the measurements into rows, groups in order of first appearance and metrics in order
/// of first appearance within their group. A later measurement of the same (group, metric,
/// system) replaces an earlier one.
pub fn rows(measurements: &[Measurement]) -> Vec<(&str, Vec<Row<'_>>)> {
    let mut groups: Vec<(&str, Vec<Row<'_>>)> = Vec::new();
    for m in measurements {
        let index = match groups.iter().position(|(g, _)| *g == m.group) {
            Some(index) => index,
            None => {
                groups.push((&m.group, Vec::new()));
                groups.len() - 1
            }
        };
        let rows = &mut groups[index].1;
        let row = match rows.iter().position(|r| r.metric == m.metric) {
            Some(at) => &mut rows[at],
            None => {
                rows.push(Row {
                    group: &m.group,
                    metric: &m.metric,
                    ..Row::default()
                });
                rows.last_mut().expect("just pushed")
            }
        };
        let slot = match m.system {
            System::Fjord => &mut row.fjord,
            System::Linux => &mut row.linux,
            System::FjordNi => &mut row.fjord_ni,
            System::FjordBaseline => &mut row.fjord_baseline,
        };
        *slot = Some(m);
    }
    // A row that lacks one side borrows the counterpart measured in another group (Fjord's
    // `pd` group against Linux's `mm` and `ctxswitch` groups, for instance).
    for (_, rows) in &mut groups {
        for row in rows.iter_mut() {
            if row.linux.is_none() && row.fjord.is_some() {
                let want = linux_counterpart(row.metric);
                row.linux = measurements
                    .iter()
                    .find(|m| m.system == System::Linux && m.metric == want);
                if row.linux.is_some() && want != row.metric {
                    row.linux_metric = Some(linux_counterpart(row.metric));
                }
            }
            if row.fjord.is_none() && row.linux.is_some() {
                row.fjord = measurements.iter().find(|m| {
                    m.system == System::Fjord && linux_counterpart(&m.metric) == row.metric
                });
                if let Some(f) = row.fjord.filter(|f| f.metric != row.metric) {
                    row.fjord_metric = Some(&f.metric);
                }
            }
        }
    }
    groups
}

/// Fjord's median over Linux's, when both exist in the same unit and Linux's is positive.
pub fn ratio(fjord: Option<&Measurement>, linux: Option<&Measurement>) -> Option<f64> {
    let (fjord, linux) = (fjord?, linux?);
    (fjord.unit == linux.unit && linux.median > 0.0).then(|| fjord.median / linux.median)
}

/// A ratio with two or three significant digits and a `×` (`0.42×`, `3.14×`, `12.3×`, `120×`).
pub fn format_ratio(ratio: f64) -> String {
    if ratio >= 99.5 {
        format!("{ratio:.0}×")
    } else if ratio >= 9.95 {
        format!("{ratio:.1}×")
    } else if ratio >= 0.0995 {
        format!("{ratio:.2}×")
    } else {
        format!("{ratio:.3}×")
    }
}

/// A median in a table cell: instructions as a grouped integer, other units with their unit.
pub fn format_value(m: Option<&Measurement>) -> String {
    match m {
        None => MISSING.to_owned(),
        Some(m) if m.unit == INSNS => bench_results::format_number(m.median.round()),
        Some(m) if m.unit == "ns" => format_duration_ns(m.median),
        Some(m) => format!("{} {}", bench_results::format_number(m.median), m.unit),
    }
}

/// Nanoseconds in the largest unit that keeps at least one whole digit (`850 ns`, `12.3 µs`).
pub fn format_duration_ns(ns: f64) -> String {
    let (value, unit) = if ns >= 1e9 {
        (ns / 1e9, "s")
    } else if ns >= 1e6 {
        (ns / 1e6, "ms")
    } else if ns >= 1e3 {
        (ns / 1e3, "µs")
    } else {
        (ns, "ns")
    };
    if value >= 100.0 || unit == "ns" {
        format!("{value:.0} {unit}")
    } else {
        format!("{value:.1} {unit}")
    }
}

/// The ratio cell: `—` when a side is missing or the units differ.
fn ratio_cell(row: &Row<'_>) -> String {
    match (row.fjord, row.linux) {
        (Some(f), Some(l)) if f.unit != l.unit => "— (units differ)".to_owned(),
        _ => ratio(row.fjord, row.linux).map_or_else(|| "—".to_owned(), format_ratio),
    }
}

/// The main table of one group: `| metric | Fjord | Linux | Fjord/Linux |`, then a column for
/// each Fjord variant measured in the group, then the wall time per operation of Fjord and
/// Linux (secondary, noisy) when either has one.
pub fn group_table(rows: &[Row<'_>]) -> String {
    let variants: Vec<(System, &str)> = [
        (System::FjordNi, "Fjord NI"),
        (System::FjordBaseline, "Fjord baseline"),
    ]
    .into_iter()
    .filter(|(system, _)| rows.iter().any(|r| r.get(*system).is_some()))
    .collect();
    let has_wall = |m: Option<&Measurement>| m.and_then(|m| m.wall_ns).is_some();
    let walls = rows.iter().any(|r| has_wall(r.fjord) || has_wall(r.linux));
    let wall = |m: Option<&Measurement>| {
        m.and_then(|m| m.wall_ns)
            .map_or_else(|| "—".to_owned(), format_duration_ns)
    };
    let mut table = String::from("| metric | Fjord | Linux | Fjord/Linux |");
    let mut rule = String::from("|---|---:|---:|---:|");
    for (_, title) in &variants {
        let _ = write!(table, " {title} |");
        rule.push_str("---:|");
    }
    if walls {
        table.push_str(" Fjord wall | Linux wall |");
        rule.push_str("---:|---:|");
    }
    table.push('\n');
    table.push_str(&rule);
    table.push('\n');
    for row in rows {
        let _ = write!(
            table,
            "| {} | {} | {} | {} |",
            row.label(),
            format_value(row.fjord),
            format_value(row.linux),
            ratio_cell(row)
        );
        for (system, _) in &variants {
            let _ = write!(table, " {} |", format_value(row.get(*system)));
        }
        if walls {
            let _ = write!(table, " {} | {} |", wall(row.fjord), wall(row.linux));
        }
        table.push('\n');
    }
    table
}

/// The method, briefly; `docs/benchmarking.md` has the whole of it.
pub const METHOD: &str = "\
Both systems run under the same QEMU (TCG) with `-M microvm -cpu max -smp 1 -m 512M \
-icount shift=0,sleep=off -seed 1 -rtc base=2024-01-01T00:00:00,clock=vm`, in one invocation. \
Numbers are **guest instructions** (RDTSC pairs under icount count exactly one per \
instruction; the Linux programs subtract the pair's own cost, Fjord's numbers include it, \
at most about ten instructions), **medians** over the `runs` in the JSON file \
(odd counts, so the median is a real sample). TCG models no caches, TLBs or pipelines: fewer \
instructions is less work, not necessarily less time on hardware, and each iteration of a \
`rep` string instruction counts as one (the Linux checkpoint copies use `rep movsq`; a Fjord \
counterpart must use the same primitive to compare). Wall time is host time per operation, noisy and secondary. The Linux guest is Debian's kernel with \
`transparent_hugepage=never` (4 KiB pages) and static C programs from `bench/linux/`; its \
`workloads` numbers come from a NightCore-like runtime (`tools/nightcore`: engine and worker \
processes over pipes) running the same workload functions under Fjord's open-loop method and \
SLO. Method and caveats: `docs/benchmarking.md`.";

/// The whole Markdown report for `date`, produced by `command`.
pub fn markdown(measurements: &[Measurement], date: &str, command: &str) -> String {
    let mut md = format!(
        "# Fjord vs Linux, {date}\n\nProduced by `{command}`.\n\n{METHOD}\n\n\
         Cells marked {MISSING} have no measurement on that side yet. Wall times are host time \
         per operation (noisy).\n"
    );
    for (group, rows) in rows(measurements) {
        let _ = write!(md, "\n## {group}\n\n{}", group_table(&rows));
        if plot::plottable(&rows) {
            let _ = write!(md, "\n![{group}]({date}-{group}.png)\n");
        }
    }
    md
}

/// Marks the start of the README's generated results section.
pub const README_START: &str = "<!-- bench-report:start -->";
/// Marks its end.
pub const README_END: &str = "<!-- bench-report:end -->";

/// The rows at isolation `full` (a μprocess's default) that the README shows: those the
/// targets name.
pub const LEVEL_ROWS: &[&str] = &[
    "fork_exit_wait_hello_iso_full",
    "pipe_pingpong_roundtrip_iso_full",
];

/// The README's summary rows: in report order, every row with a Fjord/Linux ratio and every
/// [`HEADLINES`] row, each Fjord metric once (a metric measured in two groups appears in the
/// first). Of the workloads, only the throughput at the SLO (their service times are in the
/// report); of the μprocess rows measured at an isolation level (`…_iso_full`), only
/// [`LEVEL_ROWS`] (the others are in the report).
pub fn readme_rows<'a>(groups: &[(&'a str, Vec<Row<'a>>)]) -> Vec<Row<'a>> {
    let mut shown: Vec<&str> = Vec::new();
    let mut out = Vec::new();
    for (_, rows) in groups {
        for row in rows {
            let Some(fjord) = row.fjord else { continue };
            let service_time = row.group == "workloads" && row.metric.ends_with("_service");
            let other_level =
                fjord.metric.contains("_iso_") && !LEVEL_ROWS.contains(&fjord.metric.as_str());
            let keep = (ratio(row.fjord, row.linux).is_some() && !service_time && !other_level)
                || HEADLINES.contains(&row.metric);
            if keep && !shown.contains(&fjord.metric.as_str()) {
                shown.push(&fjord.metric);
                out.push(row.clone());
            }
        }
    }
    out
}

/// The README's results section: the command and date, then one summary table
/// `| group | metric | Fjord | Linux | Fjord/Linux |` ([`readme_rows`]); the whole report is in
/// `bench/results/<date>.md`.
pub fn readme_block(measurements: &[Measurement], date: &str, command: &str) -> String {
    let mut block = format!(
        "{README_START}\nMeasured on {date} with `{command}` (guest instructions under QEMU \
         icount, medians; every metric, the variants and plots in \
         [`bench/results/{date}.md`](bench/results/{date}.md), method in \
         `docs/benchmarking.md`).\n\n\
         | group | metric | Fjord | Linux | Fjord/Linux |\n|---|---|---:|---:|---:|\n"
    );
    for row in readme_rows(&rows(measurements)) {
        let _ = writeln!(
            block,
            "| {} | {} | {} | {} | {} |",
            row.group,
            row.label(),
            format_value(row.fjord),
            format_value(row.linux),
            ratio_cell(&row)
        );
    }
    block.push_str(README_END);
    block
}

/// `text` with the part from [`README_START`] to [`README_END`] (inclusive) replaced by
/// `block`, or `None` when the markers are absent or out of order.
pub fn replace_readme_block(text: &str, block: &str) -> Option<String> {
    let start = text.find(README_START)?;
    let end = start + text[start..].find(README_END)? + README_END.len();
    Some(format!("{}{block}{}", &text[..start], &text[end..]))
}

/// Rewrites the results section of the README at `readme` (between [`README_START`] and
/// [`README_END`]) with [`readme_block`]. Returns `false`, changing nothing, when the README
/// has no such section.
pub fn update_readme(readme: &Path, measurements: &[Measurement]) -> Result<bool> {
    let text =
        std::fs::read_to_string(readme).with_context(|| format!("reading {}", readme.display()))?;
    let block = readme_block(measurements, &today(), &this_command());
    match replace_readme_block(&text, &block) {
        Some(updated) => {
            std::fs::write(readme, updated)
                .with_context(|| format!("writing {}", readme.display()))?;
            Ok(true)
        }
        None => Ok(false),
    }
}

/// Today's UTC date, `YYYY-MM-DD`.
fn today() -> String {
    let days = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs() / 86_400);
    bench_results::date_from_days(days as i64)
}

/// The command that is running, as the user typed it (`cargo xtask bench --report`).
fn this_command() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    format!("cargo xtask {}", args.join(" "))
        .trim_end()
        .to_owned()
}

/// Writes `<date>.json`, `<date>.md` and one `<date>-<group>.png` per group with instruction
/// counts into `out_dir`, and returns the Markdown file's path.
pub fn write_report(measurements: &[Measurement], out_dir: &Path) -> Result<PathBuf> {
    write_report_named(measurements, out_dir, None)
}

/// [`write_report`], the Markdown file named `<date>-<name>.md` when a run measured only
/// `name`'s group (so that it does not replace the day's report of the other groups).
pub fn write_report_named(
    measurements: &[Measurement],
    out_dir: &Path,
    name: Option<&str>,
) -> Result<PathBuf> {
    let date = today();
    std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    bench_results::write_results(&out_dir.join(format!("{date}.json")), measurements)?;
    for (group, rows) in rows(measurements) {
        if plot::plottable(&rows) {
            let path = out_dir.join(format!("{date}-{group}.png"));
            plot::bar_chart(&path, group, &rows)
                .with_context(|| format!("plotting {}", path.display()))?;
        }
    }
    let path = match name {
        Some(name) => out_dir.join(format!("{date}-{name}.md")),
        None => out_dir.join(format!("{date}.md")),
    };
    std::fs::write(&path, markdown(measurements, &date, &this_command()))
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(group: &str, metric: &str, system: System, median: f64) -> Measurement {
        Measurement {
            group: group.into(),
            metric: metric.into(),
            system,
            unit: INSNS.into(),
            median,
            min: median,
            max: median,
            runs: 3,
            wall_ns: None,
            p99: None,
        }
    }

    fn sample() -> Vec<Measurement> {
        vec![
            m("syscall", "null_syscall", System::Linux, 323.0),
            m("fork", "fork_exit_wait_hello", System::Linux, 241_092.0),
            m("syscall", "null_syscall", System::Fjord, 161.0),
            m("fork", "fork_exec_wait", System::Linux, 785_966.0),
            m("pd", "pd_switch", System::Fjord, 90.0),
        ]
    }

    #[test]
    fn rows_keep_first_appearance_order_and_pair_systems() {
        let measurements = sample();
        let groups = rows(&measurements);
        let names: Vec<&str> = groups.iter().map(|(g, _)| *g).collect();
        assert_eq!(names, ["syscall", "fork", "pd"]);
        let syscall = &groups[0].1[0];
        assert_eq!(syscall.fjord.unwrap().median, 161.0);
        assert_eq!(syscall.linux.unwrap().median, 323.0);
        assert_eq!(groups[1].1.len(), 2);
        assert!(groups[2].1[0].linux.is_none());
    }

    #[test]
    fn ratio_needs_both_sides_and_one_unit() {
        let f = m("a", "b", System::Fjord, 50.0);
        let l = m("a", "b", System::Linux, 200.0);
        assert_eq!(ratio(Some(&f), Some(&l)), Some(0.25));
        assert_eq!(ratio(None, Some(&l)), None);
        assert_eq!(ratio(Some(&f), None), None);
        let mut ns = l.clone();
        ns.unit = "ns".into();
        assert_eq!(ratio(Some(&f), Some(&ns)), None);
        let zero = m("a", "b", System::Linux, 0.0);
        assert_eq!(ratio(Some(&f), Some(&zero)), None);
    }

    #[test]
    fn ratios_have_two_or_three_significant_digits() {
        assert_eq!(format_ratio(0.4987), "0.50×");
        assert_eq!(format_ratio(3.1249), "3.12×");
        assert_eq!(format_ratio(12.34), "12.3×");
        assert_eq!(format_ratio(123.4), "123×");
        assert_eq!(format_ratio(0.0123), "0.012×");
    }

    #[test]
    fn table_shows_missing_cells_and_never_invents_a_ratio() {
        let measurements = sample();
        let groups = rows(&measurements);
        let syscall = group_table(&groups[0].1);
        assert_eq!(
            syscall,
            "| metric | Fjord | Linux | Fjord/Linux |\n|---|---:|---:|---:|\n\
             | `null_syscall` | 161 | 323 | 0.50× |\n"
        );
        let fork = group_table(&groups[1].1);
        assert!(
            fork.contains("| `fork_exit_wait_hello` | — (missing) | 241,092 | — |"),
            "{fork}"
        );
        let pd = group_table(&groups[2].1);
        assert!(
            pd.contains("| `pd_switch` | 90 | — (missing) | — |"),
            "{pd}"
        );
    }

    #[test]
    fn variant_columns_appear_only_with_data() {
        let mut measurements = sample();
        measurements.push(m("syscall", "null_syscall", System::FjordNi, 120.0));
        let groups = rows(&measurements);
        let table = group_table(&groups[0].1);
        assert!(
            table.starts_with("| metric | Fjord | Linux | Fjord/Linux | Fjord NI |\n"),
            "{table}"
        );
        assert!(table.contains("| 0.50× | 120 |"), "{table}");
        assert!(!group_table(&groups[1].1).contains("NI"));
    }

    #[test]
    fn units_other_than_instructions_are_spelled_out() {
        let mut wall = m("boot", "boot_to_exit_wall", System::Fjord, 1.5e9);
        wall.unit = "ns".into();
        assert_eq!(format_value(Some(&wall)), "1.5 s");
        let mut other = wall.clone();
        other.unit = "bytes".into();
        other.median = 4096.0;
        assert_eq!(format_value(Some(&other)), "4,096 bytes");
        assert_eq!(format_value(None), MISSING);
        let linux = m("boot", "boot_to_exit_wall", System::Linux, 7.0);
        let row = Row {
            group: "boot",
            metric: "boot_to_exit_wall",
            fjord: Some(&wall),
            linux: Some(&linux),
            ..Row::default()
        };
        assert_eq!(ratio_cell(&row), "— (units differ)");
    }

    #[test]
    fn durations() {
        assert_eq!(format_duration_ns(850.4), "850 ns");
        assert_eq!(format_duration_ns(12_345.0), "12.3 µs");
        assert_eq!(format_duration_ns(123_456.0), "123 µs");
        assert_eq!(format_duration_ns(4.5e6), "4.5 ms");
    }

    #[test]
    fn wall_columns_appear_only_with_wall_times() {
        let mut measurements = sample();
        measurements[0].wall_ns = Some(2_000.0);
        let groups = rows(&measurements);
        assert_eq!(
            group_table(&groups[0].1),
            "| metric | Fjord | Linux | Fjord/Linux | Fjord wall | Linux wall |\n\
             |---|---:|---:|---:|---:|---:|\n\
             | `null_syscall` | 161 | 323 | 0.50× | — | 2.0 µs |\n"
        );
        assert!(!group_table(&groups[1].1).contains("wall"));
    }

    #[test]
    fn readme_block_replaces_only_the_marked_section() {
        let block = readme_block(&sample(), "2026-11-22", "cargo xtask bench --report");
        assert!(block.starts_with(README_START) && block.ends_with(README_END));
        assert!(block.contains("with `cargo xtask bench --report`"));
        assert!(
            block.contains("| syscall | `null_syscall` | 161 | 323 | 0.50× |\n"),
            "{block}"
        );
        // Rows without a Linux figure are left to the full report.
        assert!(!block.contains("pd_switch"), "{block}");
        let readme = format!("# Fjord\n\n{README_START}\nold\n{README_END}\n\n## Layout\n");
        let updated = replace_readme_block(&readme, &block).unwrap();
        assert!(updated.starts_with("# Fjord\n\n<!-- bench-report:start -->\nMeasured on"));
        assert!(updated.ends_with("<!-- bench-report:end -->\n\n## Layout\n"));
        assert!(!updated.contains("old"));
        assert_eq!(replace_readme_block("# Fjord\n", &block), None);
        let reversed = format!("{README_END}\n{README_START}\n");
        assert_eq!(replace_readme_block(&reversed, &block), None);
    }

    #[test]
    fn readme_rows_keep_comparisons_and_headlines_once() {
        let mut measurements = sample();
        measurements.push(m("fork", "spawn_wait", System::Fjord, 15_000.0));
        measurements.push(m("fork", "fork_hello_memory", System::Fjord, 49_152.0));
        measurements.push(m("mm", "null_syscall", System::Linux, 323.0));
        measurements.push(m("mm", "null_syscall", System::Fjord, 161.0));
        let groups = rows(&measurements);
        let kept: Vec<(&str, &str)> = readme_rows(&groups)
            .iter()
            .map(|r| (r.group, r.metric))
            .collect();
        assert_eq!(
            kept,
            [
                ("syscall", "null_syscall"),
                ("fork", "fork_exec_wait"),
                ("fork", "fork_hello_memory")
            ]
        );
        // `fork_exec_wait` borrowed Fjord's counterpart, `spawn_wait`, so it is not shown twice.
        assert_eq!(readme_rows(&groups)[1].fjord.unwrap().metric, "spawn_wait");
    }

    #[test]
    fn isolation_rows_compare_with_the_same_linux_row_and_only_the_named_reach_the_readme() {
        let measurements = vec![
            m("fork", "fork_exit_wait_hello", System::Linux, 240_000.0),
            m("fork", "fork_exit_wait_1mb", System::Linux, 360_000.0),
            m(
                "fork",
                "fork_exit_wait_hello_iso_full",
                System::Fjord,
                24_000.0,
            ),
            m(
                "fork",
                "fork_exit_wait_1mb_iso_full",
                System::Fjord,
                100_000.0,
            ),
            m(
                "ctxswitch",
                "pipe_pingpong_roundtrip",
                System::Linux,
                10_000.0,
            ),
            m(
                "ctxswitch",
                "pipe_pingpong_roundtrip_iso_full",
                System::Fjord,
                6_000.0,
            ),
        ];
        assert_eq!(
            linux_counterpart("fork_exit_wait_1mb_iso_full"),
            "fork_exit_wait_1mb"
        );
        assert_eq!(
            linux_counterpart("pd_switch_roundtrip_iso_nonadv"),
            "pipe_pingpong_roundtrip"
        );
        let groups = rows(&measurements);
        let iso = groups[0]
            .1
            .iter()
            .find(|r| r.metric == "fork_exit_wait_1mb_iso_full")
            .unwrap();
        assert_eq!(ratio(iso.fjord, iso.linux), Some(100_000.0 / 360_000.0));
        let kept: Vec<&str> = readme_rows(&groups)
            .iter()
            .filter_map(|r| r.fjord.map(|f| f.metric.as_str()))
            .collect();
        assert_eq!(
            kept,
            [
                "fork_exit_wait_hello_iso_full",
                "pipe_pingpong_roundtrip_iso_full"
            ]
        );
    }

    #[test]
    fn markdown_has_command_method_sections_and_plots() {
        let md = markdown(&sample(), "2026-11-22", "cargo xtask bench --report");
        assert!(md.starts_with(
            "# Fjord vs Linux, 2026-11-22\n\nProduced by `cargo xtask bench --report`.\n"
        ));
        assert!(md.contains("-icount shift=0,sleep=off"));
        assert!(md.contains("\n## syscall\n\n| metric |"));
        assert!(md.contains("![fork](2026-11-22-fork.png)"));
    }

    #[test]
    fn write_report_writes_json_markdown_and_pngs() {
        let dir = std::env::temp_dir().join(format!("xtask-report-{}", std::process::id()));
        let md = write_report(&sample(), &dir).unwrap();
        let date = today();
        assert_eq!(md, dir.join(format!("{date}.md")));
        for file in [
            format!("{date}.json"),
            format!("{date}-syscall.png"),
            format!("{date}-fork.png"),
        ] {
            let bytes = std::fs::read(dir.join(&file)).unwrap();
            assert!(!bytes.is_empty(), "{file}");
        }
        let png = std::fs::read(dir.join(format!("{date}-pd.png"))).unwrap();
        assert!(png.starts_with(b"\x89PNG"));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
