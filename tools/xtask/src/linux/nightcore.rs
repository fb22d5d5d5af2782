//! The `workloads` step of the Linux guest: `fjord-nightcore` (`tools/nightcore`), a
//! NightCore-like runtime running the workload functions Fjord runs, measured by Fjord's
//! open-loop method.
//!
//! The runner is a Rust program, built here for the host target as a static executable
//! (`+crt-static`) in its own target directory under the Linux-guest cache, so the normal
//! build cache is untouched. Its parameters (per operation, Jord_NI's minimal-load service
//! time and the SLO) come from the Fjord measurements of the same `cargo xtask bench --report`
//! and reach the guest as a file in the initramfs, [`PARAMS_FILE`].

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
        let ni = fjord.iter().rev().find(|m| {
            m.group == "workloads"
                && m.metric == metric
                && m.system == System::FjordNi
                && m.unit == "insns"
                && m.median > 0.0
        });
        match ni {
            Some(m) => {
                let service = m.median.round() as u64;
                let slo = (SLO_FACTOR as f64 * m.median).round() as u64;
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
        }
    }

    #[test]
    fn the_step_reads_the_file_the_initramfs_holds() {
        let path = format!("{}/{PARAMS_FILE}", super::super::programs::GUEST_DIR);
        assert_eq!(path, super::super::programs::WORKLOADS_PARAMS);
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
