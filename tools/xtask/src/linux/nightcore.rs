//! The `workloads` step of the Linux guest: `fjord-nightcore` (`tools/nightcore`), a
//! NightCore-like runtime running the workload functions Fjord runs, measured by Fjord's
//! open-loop method; and its `restore` step, the same runtime with every invocation in a child
//! forked from a warmed worker (Groundhog's baseline), over the `restore` group's targets.
//!
//! The runner is a Rust program, built here for the host target as a static executable
//! (`+crt-static`) in its own target directory under the Linux-guest cache, so the normal
//! build cache is untouched. Its parameters come from the Fjord measurements of the same run
//! and reach the guest as files in the initramfs: for `workloads` ([`PARAMS_FILE`]) per
//! operation Jord_NI's minimal-load service time and the SLO ([`params`]); for `restore`
//! ([`RESTORE_PARAMS_FILE`]) per target Fjord's minimal-load latency without isolation and the
//! SLO ([`restore_params`]).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use fjord_faas::open_loop::SLO_FACTOR;

use crate::measure::{Measurement, System};
use crate::workspace;

/// The runner's package and binary name.
pub const PROGRAM: &str = "fjord-nightcore";

/// The parameters file's name under `/bench` in the guest.
pub const PARAMS_FILE: &str = "workloads.params";

/// Time the `workloads` step may add to the guest run: eight operations of 11,000 requests
/// each, every request a few hundred thousand guest instructions.
pub const TIME_LIMIT: Duration = Duration::from_secs(2400);

/// The `restore` step's parameters file's name under `/bench` in the guest.
pub const RESTORE_PARAMS_FILE: &str = "restore.params";

/// Time the `restore` step may add to the guest run. A target sweeps only when its fastest
/// unloaded request is within the SLO, so a sweep (at most 17 runs of 1,600 requests) costs at
/// most about 17 x 1,600 x the SLO: 126 billion instructions for the nine targets' SLOs
/// (4.7 million instructions summed), about 19 minutes at the 113 million guest instructions
/// per second measured; twice that for a slower host. With no target within its SLO the step
/// takes seconds.
pub const RESTORE_TIME_LIMIT: Duration = Duration::from_secs(2400);

/// The metrics the `restore` step prints: per target of [`restore_labels`], its minimal-load
/// latency and its throughput at the SLO with a process forked per request.
pub const RESTORE_METRICS: &[&str] = &[
    "hello_latency_fork",
    "hello_throughput_at_slo_fork",
    "hipster_get_cart_latency_fork",
    "hipster_get_cart_throughput_at_slo_fork",
    "hotel_search_nearby_latency_fork",
    "hotel_search_nearby_throughput_at_slo_fork",
    "media_upload_unique_id_latency_fork",
    "media_upload_unique_id_throughput_at_slo_fork",
    "social_compose_post_latency_fork",
    "social_compose_post_throughput_at_slo_fork",
    "dirty_1_latency_fork",
    "dirty_1_throughput_at_slo_fork",
    "dirty_10_latency_fork",
    "dirty_10_throughput_at_slo_fork",
    "dirty_100_latency_fork",
    "dirty_100_throughput_at_slo_fork",
    "dirty_1000_latency_fork",
    "dirty_1000_throughput_at_slo_fork",
];

/// The labels of Fjord's `restore` group's targets, in its order
/// ([`fjord_faas::restore_targets::all`]).
pub fn restore_labels() -> Vec<String> {
    fjord_faas::restore_targets::all()
        .iter()
        .map(|t| t.label())
        .collect()
}

/// The latest positive instruction count of `group`/`metric` measured on `system`.
fn latest_insns(fjord: &[Measurement], group: &str, metric: &str, system: System) -> Option<f64> {
    fjord
        .iter()
        .rev()
        .find(|m| {
            m.group == group
                && m.metric == metric
                && m.system == system
                && m.unit == "insns"
                && m.median > 0.0
        })
        .map(|m| m.median)
}

/// The `restore` step's parameters file from Fjord's `restore` measurements: one line
/// `<label> <none_latency> <slo>` per target of [`restore_labels`], where `none_latency` is
/// Fjord's `restore/<label>_latency_none` and the SLO [`SLO_FACTOR`] times it, as Fjord's
/// sweep takes them. Fails, naming them, when targets lack that measurement.
pub fn restore_params(fjord: &[Measurement]) -> Result<String, String> {
    let mut text = String::from("# <label> <Fjord latency without isolation> <SLO>, from Fjord\n");
    let mut missing = Vec::new();
    for label in restore_labels() {
        let metric = format!("{label}_latency_none");
        match latest_insns(fjord, "restore", &metric, System::Fjord) {
            Some(median) => {
                let latency = median.round() as u64;
                text.push_str(&format!("{label} {latency} {}\n", SLO_FACTOR * latency));
            }
            None => missing.push(format!("restore/{metric}")),
        }
    }
    if missing.is_empty() {
        Ok(text)
    } else {
        Err(format!("no Fjord measurement of {}", missing.join(", ")))
    }
}

/// The metrics the runner prints: per operation of `fjord_faas::workloads::OPERATIONS`, its
/// service time and its throughput at the SLO.
pub const METRICS: &[&str] = &[
    "hipster_get_cart_service",
    "hipster_get_cart_throughput_at_slo",
    "hipster_place_order_service",
    "hipster_place_order_throughput_at_slo",
    "hotel_search_nearby_service",
    "hotel_search_nearby_throughput_at_slo",
    "hotel_make_reservation_service",
    "hotel_make_reservation_throughput_at_slo",
    "media_upload_unique_id_service",
    "media_upload_unique_id_throughput_at_slo",
    "media_read_page_service",
    "media_read_page_throughput_at_slo",
    "social_compose_post_service",
    "social_compose_post_throughput_at_slo",
    "social_follow_service",
    "social_follow_throughput_at_slo",
];

/// The parameters file for the runner from Fjord's `workloads` measurements: one line
/// `<workload> <operation> <ni_service> <slo>` per operation. Fails, naming them, when an
/// operation lacks Jord_NI's service time.
pub fn params(fjord: &[Measurement]) -> Result<String, String> {
    let mut text = String::from("# <workload> <operation> <Jord_NI service> <SLO>, from Fjord\n");
    let mut missing = Vec::new();
    for op in fjord_faas::workloads::OPERATIONS {
        let metric = format!("{}_{}_service", op.workload, op.name);
        match latest_insns(fjord, "workloads", &metric, System::FjordNi) {
            Some(median) => {
                let service = median.round() as u64;
                let slo = (SLO_FACTOR as f64 * median).round() as u64;
                text.push_str(&format!("{} {} {service} {slo}\n", op.workload, op.name));
            }
            None => missing.push(metric),
        }
    }
    if missing.is_empty() {
        Ok(text)
    } else {
        Err(format!("no Jord_NI measurement of {}", missing.join(", ")))
    }
}

/// Builds the runner with `cargo build --release --target x86_64-unknown-linux-gnu` and
/// `-C target-feature=+crt-static` into `<cache>/cargo`; returns the executable.
pub fn build(cache: &Path) -> Result<PathBuf> {
    const TARGET: &str = "x86_64-unknown-linux-gnu";
    let target_dir = cache.join("cargo");
    let mut command = workspace::cargo();
    command
        .args([
            "build",
            "--release",
            "--package",
            PROGRAM,
            "--target",
            TARGET,
        ])
        .arg("--target-dir")
        .arg(&target_dir)
        .env(
            "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS",
            "-C target-feature=+crt-static -C strip=debuginfo",
        );
    run(&mut command)?;
    let binary = target_dir.join(TARGET).join("release").join(PROGRAM);
    if !binary.is_file() {
        bail!(
            "{} did not produce {}",
            workspace::display_command(&command),
            binary.display()
        );
    }
    Ok(binary)
}

fn run(command: &mut Command) -> Result<()> {
    let shown = workspace::display_command(command);
    let output = command
        .output()
        .with_context(|| format!("running {shown}"))?;
    if !output.status.success() {
        bail!(
            "{shown} failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ni(metric: &str, median: f64) -> Measurement {
        Measurement {
            group: "workloads".into(),
            metric: metric.into(),
            system: System::FjordNi,
            unit: "insns".into(),
            median,
            min: median,
            max: median,
            runs: 40,
            wall_ns: None,
            p99: None,
        }
    }

    #[test]
    fn the_step_reads_the_file_the_initramfs_holds() {
        let path = format!("{}/{PARAMS_FILE}", super::super::programs::GUEST_DIR);
        assert_eq!(path, super::super::programs::WORKLOADS_PARAMS);
        let path = format!(
            "{}/{RESTORE_PARAMS_FILE}",
            super::super::programs::GUEST_DIR
        );
        assert_eq!(path, super::super::programs::RESTORE_PARAMS);
    }

    #[test]
    fn restore_metrics_are_every_targets_latency_and_throughput() {
        // The labels themselves are pinned by `fjord_faas::restore_targets`' own test.
        let labels = restore_labels();
        let expected: Vec<String> = labels
            .iter()
            .flat_map(|l| {
                [
                    format!("{l}_latency_fork"),
                    format!("{l}_throughput_at_slo_fork"),
                ]
            })
            .collect();
        assert_eq!(RESTORE_METRICS, expected);
    }

    fn fjord_restore(metric: &str, median: f64) -> Measurement {
        Measurement {
            group: "restore".into(),
            system: System::Fjord,
            ..ni(metric, median)
        }
    }

    #[test]
    fn restore_params_come_from_fjords_latency_without_isolation() {
        let mut fjord: Vec<Measurement> = restore_labels()
            .iter()
            .flat_map(|l| {
                [
                    fjord_restore(&format!("{l}_latency_none"), 20_000.0),
                    fjord_restore(&format!("{l}_latency_restore"), 1.0),
                ]
            })
            .collect();
        fjord.push(fjord_restore("dirty_100_latency_none", 34_567.4));
        let text = params_ok(restore_params(&fjord));
        assert!(text.starts_with("# "), "{text}");
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(lines.len(), 9);
        assert_eq!(lines[0], "hello 20000 200000");
        assert_eq!(lines[7], "dirty_100 34567 345670");
        // Another system's or group's measurement does not count.
        let mut other = fjord.clone();
        other.retain(|m| m.metric != "hotel_search_nearby_latency_none");
        other.push(Measurement {
            system: System::Linux,
            ..fjord_restore("hotel_search_nearby_latency_none", 5.0)
        });
        other.push(Measurement {
            group: "workloads".into(),
            ..fjord_restore("hotel_search_nearby_latency_none", 5.0)
        });
        other.retain(|m| m.metric != "dirty_1_latency_none");
        let error = restore_params(&other).unwrap_err();
        assert!(
            error.contains("restore/hotel_search_nearby_latency_none")
                && error.contains("restore/dirty_1_latency_none"),
            "{error}"
        );
        assert!(!error.contains("hello"), "{error}");
        assert!(restore_params(&[]).is_err());
    }

    fn params_ok(p: Result<String, String>) -> String {
        p.unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn metrics_are_every_operations_service_and_throughput() {
        let expected: Vec<String> = fjord_faas::workloads::OPERATIONS
            .iter()
            .flat_map(|o| {
                let label = format!("{}_{}", o.workload, o.name);
                [
                    format!("{label}_service"),
                    format!("{label}_throughput_at_slo"),
                ]
            })
            .collect();
        assert_eq!(METRICS, expected);
    }

    #[test]
    fn params_come_from_jord_ni_service_times() {
        let mut fjord: Vec<Measurement> = fjord_faas::workloads::OPERATIONS
            .iter()
            .map(|o| ni(&format!("{}_{}_service", o.workload, o.name), 10_000.0))
            .collect();
        fjord[2] = ni("hotel_search_nearby_service", 123_456.0);
        let mut jord = ni("hotel_search_nearby_service", 1.0);
        jord.system = System::Fjord;
        fjord.push(jord);
        let text = params(&fjord).unwrap();
        assert!(
            text.contains("\nhotel search_nearby 123456 1234560\n"),
            "{text}"
        );
        assert_eq!(text.lines().filter(|l| !l.starts_with('#')).count(), 8);
        fjord.remove(5);
        let error = params(&fjord).unwrap_err();
        assert!(error.contains("media_read_page_service"), "{error}");
        assert!(params(&[]).is_err());
    }
}
