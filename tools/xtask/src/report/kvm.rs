//! The real-time report of `cargo xtask bench --accel kvm --report`: wall-clock nanoseconds of
//! Fjord's calibrated TSC under KVM, beside the Linux guest booted under KVM with the same QEMU
//! settings in the same run, and the Jord paper's targets as ratios of the two.
//!
//! [`write_kvm_report`] writes `<date>-kvm.md` (and `<date>-kvm.json` through
//! `bench_results`); [`update_readme_kvm`] puts the summary between the README's
//! `<!-- bench-kvm:start -->` and `<!-- bench-kvm:end -->` markers. The icount report stays the
//! reproducible reference; this one says what the same code costs in time on this host.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::{MISSING, linux_counterpart, today};
use crate::bench_results;
use crate::measure::{Measurement, System};

/// The unit of the KVM runs.
pub const NS: &str = "ns";

/// README marker before the KVM block.
pub const README_KVM_START: &str = "<!-- bench-kvm:start -->";
/// README marker after the KVM block.
pub const README_KVM_END: &str = "<!-- bench-kvm:end -->";

/// Jord's per-invocation isolation overhead on hardware, the paper's bound in nanoseconds.
pub const JORD_ISOLATION_NS: f64 = 120.0;

/// A target of the issue that asked for real-time numbers: Fjord's metric, the Linux metric it
/// is compared with, and the largest Fjord/Linux ratio that meets it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RatioTarget {
    /// Fjord's metric.
    pub fjord: &'static str,
    /// The bound on Fjord/Linux.
    pub at_most: f64,
}

/// The targets, as ratios in one run under KVM.
pub const RATIO_TARGETS: &[RatioTarget] = &[
    RatioTarget {
        fjord: "pd_switch_roundtrip",
        at_most: 0.1,
    },
    RatioTarget {
        fjord: "chain_abcba_1k_move",
        at_most: 0.1,
    },
    RatioTarget {
        fjord: "fork_exit_wait_hello",
        at_most: 0.1,
    },
    RatioTarget {
        fjord: "mmap_touch_munmap_4k",
        at_most: 0.2,
    },
];

/// The measurement of `metric` on `system` in nanoseconds, if any (the last one wins).
fn find<'a>(ms: &'a [Measurement], metric: &str, system: System) -> Option<&'a Measurement> {
    ms.iter()
        .rev()
        .find(|m| m.metric == metric && m.system == system && m.unit == NS)
}

/// A nanosecond value with a unit that reads well (`812 ns`, `4.20 µs`, `1.31 ms`).
pub fn format_ns(ns: f64) -> String {
    if ns < 1_000.0 {
        format!("{ns:.0} ns")
    } else if ns < 1_000_000.0 {
        format!("{:.2} µs", ns / 1_000.0)
    } else {
        format!("{:.2} ms", ns / 1_000_000.0)
    }
}

/// `median (p99; min–max)` of a measurement in nanoseconds.
fn cell(m: Option<&Measurement>) -> String {
    match m {
        None => MISSING.to_owned(),
        Some(m) => {
            let p99 = m
                .p99
                .map_or(String::new(), |p| format!(" (p99 {};", format_ns(p)));
            let spread = format!(" {}–{}", format_ns(m.min), format_ns(m.max));
            match p99.is_empty() {
                true => format!("{} ({})", format_ns(m.median), spread.trim_start()),
                false => format!("{}{p99}{spread})", format_ns(m.median)),
            }
        }
    }
}

/// The target table: each ratio target with both medians, the ratio and whether it is met, and
/// the isolation overhead against Jord's bound.
pub fn targets_table(ms: &[Measurement]) -> String {
    let mut t =
        String::from("| target | Fjord | Linux | Fjord/Linux | met? |\n|---|---:|---:|---:|---|\n");
    for target in RATIO_TARGETS {
        let linux_metric = linux_counterpart(target.fjord);
        let fjord = find(ms, target.fjord, System::Fjord);
        let linux = find(ms, linux_metric, System::Linux);
        let ratio = fjord
            .zip(linux)
            .filter(|(_, l)| l.median > 0.0)
            .map(|(f, l)| f.median / l.median);
        let verdict = match ratio {
            Some(r) if r <= target.at_most => "yes".to_owned(),
            Some(_) => "no".to_owned(),
            None => "not measured".to_owned(),
        };
        let _ = writeln!(
            t,
            "| `{}` ≤ {}× Linux `{linux_metric}` | {} | {} | {} | {verdict} |",
            target.fjord,
            target.at_most,
            fjord.map_or(MISSING.to_owned(), |m| format_ns(m.median)),
            linux.map_or(MISSING.to_owned(), |m| format_ns(m.median)),
            ratio.map_or("—".to_owned(), |r| format!("{r:.3}×")),
        );
    }
    let iso = find(ms, "invocation_isolation_overhead", System::Fjord);
    let _ = writeln!(
        t,
        "| `invocation_isolation_overhead` < {JORD_ISOLATION_NS:.0} ns (Jord) | {} | — | — | {} |",
        iso.map_or(MISSING.to_owned(), |m| format_ns(m.median)),
        match iso {
            Some(m) if m.median < JORD_ISOLATION_NS => "yes",
            Some(_) => "no",
            None => "not measured",
        }
    );
    t
}

/// Every Fjord metric measured in nanoseconds, with the Linux counterpart where there is one.
pub fn metrics_table(ms: &[Measurement]) -> String {
    let mut t = String::from(
        "| group | metric | Fjord: median (p99; min–max) | Linux: median (p99; min–max) |\n|---|---|---|---|\n",
    );
    let mut seen = Vec::new();
    for m in ms
        .iter()
        .filter(|m| m.system == System::Fjord && m.unit == NS)
    {
        if seen.contains(&(&m.group, &m.metric)) {
            continue;
        }
        seen.push((&m.group, &m.metric));
        let linux = find(ms, linux_counterpart(&m.metric), System::Linux);
        let _ = writeln!(
            t,
            "| {} | `{}` | {} | {} |",
            m.group,
            m.metric,
            cell(find(ms, &m.metric, System::Fjord)),
            cell(linux)
        );
    }
    t
}

/// The README block: what was measured, how, and the target table.
pub fn readme_block(ms: &[Measurement], linux_note: Option<&str>, host: &[String]) -> String {
    let mut b = String::from(README_KVM_START);
    let _ = write!(
        b,
        "\nMeasured on {} with `cargo xtask bench --accel kvm --report`: medians in wall-clock \
         time of the kernel's calibrated TSC under `-accel kvm -cpu host`; every metric with its \
         p99 and spread in [`bench/results/{}-kvm.md`](bench/results/{}-kvm.md).",
        today(),
        today(),
        today()
    );
    // The SYSCALL line says whether the hypervisor emulates ring 0; the CPU line is in the report.
    for line in host
        .iter()
        .filter(|l| l.starts_with(crate::serial_log::SYSCALL_LINE))
    {
        let _ = write!(b, " This host: `{line}`.");
    }
    b.push('\n');
    if let Some(note) = linux_note {
        let _ = writeln!(
            b,
            "The Linux guest gave no numbers under this KVM: {}.",
            note.lines().next().unwrap_or(note).trim_end_matches('.')
        );
    }
    b.push('\n');
    b.push_str(&targets_table(ms));
    b.push_str(README_KVM_END);
    b
}

/// Writes `<date>-kvm.json` and `<date>-kvm.md` into `out_dir`; returns the Markdown path.
pub fn write_kvm_report(
    ms: &[Measurement],
    linux_note: Option<&str>,
    host: &[String],
    out_dir: &Path,
) -> Result<PathBuf> {
    let date = today();
    std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    bench_results::write_results(&out_dir.join(format!("{date}-kvm.json")), ms)?;
    let mut md = format!("# Fjord under KVM, {date}\n\n");
    md.push_str(
        "Wall-clock nanoseconds of the kernel's calibrated TSC (`bench_clock=ns`) under \
         `-accel kvm -cpu host`, microvm, one CPU for the single-CPU groups; the Linux guest \
         (Debian's kernel, the C programs of `bench/linux/`) under the same QEMU settings in the \
         same run, its TSC deltas turned into nanoseconds with Fjord's calibration of the same \
         TSC. The icount report stays the reproducible reference.\n\n",
    );
    for line in host {
        let _ = writeln!(md, "- Fjord's boot: `{line}`");
    }
    if let Some(note) = linux_note {
        let _ = writeln!(
            md,
            "- The Linux guest gave no numbers under this KVM: {note}"
        );
    }
    md.push_str("\n## Targets\n\n");
    md.push_str(&targets_table(ms));
    md.push_str("\n## Every metric\n\n");
    md.push_str(&metrics_table(ms));
    let path = out_dir.join(format!("{date}-kvm.md"));
    std::fs::write(&path, md).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// Rewrites the README's KVM block; `false` (changing nothing) when it has no markers.
pub fn update_readme_kvm(
    readme: &Path,
    ms: &[Measurement],
    linux_note: Option<&str>,
    host: &[String],
) -> Result<bool> {
    let text =
        std::fs::read_to_string(readme).with_context(|| format!("reading {}", readme.display()))?;
    let Some(start) = text.find(README_KVM_START) else {
        return Ok(false);
    };
    let Some(end) = text[start..].find(README_KVM_END) else {
        return Ok(false);
    };
    let end = start + end + README_KVM_END.len();
    let updated = format!(
        "{}{}{}",
        &text[..start],
        readme_block(ms, linux_note, host),
        &text[end..]
    );
    std::fs::write(readme, updated).with_context(|| format!("writing {}", readme.display()))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(metric: &str, system: System, median: f64) -> Measurement {
        Measurement {
            group: "pd".into(),
            metric: metric.into(),
            system,
            unit: NS.into(),
            median,
            min: median * 0.9,
            max: median * 2.0,
            runs: 1000,
            wall_ns: None,
            p99: Some(median * 1.5),
        }
    }

    #[test]
    fn targets_are_judged_on_ratios_of_one_run() {
        let ms = [
            m("pd_switch_roundtrip", System::Fjord, 500.0),
            m("pipe_pingpong_roundtrip", System::Linux, 10_000.0),
            m("mmap_touch_munmap_4k", System::Fjord, 3_000.0),
            m("mmap_touch_munmap_4k", System::Linux, 10_000.0),
            m("invocation_isolation_overhead", System::Fjord, 90.0),
        ];
        let t = targets_table(&ms);
        assert!(t.contains("| 0.050× | yes |"), "{t}");
        assert!(t.contains("| 0.300× | no |"), "{t}");
        assert!(t.contains("`chain_abcba_1k_move`"), "{t}");
        assert!(t.contains("not measured"), "{t}");
        assert!(t.contains("| 90 ns | — | — | yes |"), "{t}");
    }

    #[test]
    fn instruction_counts_are_not_mistaken_for_nanoseconds() {
        let mut icount = m("pd_switch_roundtrip", System::Fjord, 500.0);
        icount.unit = "insns".into();
        assert!(targets_table(&[icount]).contains("| — (missing) |"));
    }

    #[test]
    fn cells_show_median_p99_and_spread() {
        let c = cell(Some(&m("x", System::Fjord, 2_000.0)));
        assert_eq!(c, "2.00 µs (p99 3.00 µs; 1.80 µs–4.00 µs)");
        assert_eq!(format_ns(1_500_000.0), "1.50 ms");
    }

    #[test]
    fn the_readme_block_replaces_only_its_markers() {
        let dir = std::env::temp_dir().join(format!("fjord-kvm-readme-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let readme = dir.join("README.md");
        std::fs::write(
            &readme,
            format!("a\n{README_KVM_START}\nold\n{README_KVM_END}\nb\n"),
        )
        .unwrap();
        let ms = [m("pd_switch_roundtrip", System::Fjord, 500.0)];
        assert!(update_readme_kvm(&readme, &ms, Some("emulation failure"), &[]).unwrap());
        let text = std::fs::read_to_string(&readme).unwrap();
        assert!(text.starts_with("a\n<!-- bench-kvm:start -->"));
        assert!(text.ends_with("<!-- bench-kvm:end -->\nb\n"));
        assert!(text.contains("emulation failure"));
        assert!(!text.contains("old"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
