//! Runs the `fjord-nightcore` binary (engine and worker processes) over every operation of the
//! four workloads with `--check`: each response is checked for the operation's expected bytes
//! and a service time is reported.

use std::process::Command;

#[test]
fn every_operation_runs_through_engine_and_workers() {
    let params: String = fjord_faas::workloads::OPERATIONS
        .iter()
        .map(|o| format!("{} {} 100000 1000000\n", o.workload, o.name))
        .collect();
    let path = std::env::temp_dir().join(format!("nightcore-params-{}", std::process::id()));
    std::fs::write(&path, params).unwrap();
    for workers in ["1", "2"] {
        let out = Command::new(env!("CARGO_BIN_EXE_fjord-nightcore"))
            .args(["--workers", workers, "--check"])
            .arg(&path)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stdout}\n{stderr}");
        for o in fjord_faas::workloads::OPERATIONS {
            let metric = format!("\"metric\":\"{}_{}_service\"", o.workload, o.name);
            assert!(
                stdout
                    .lines()
                    .any(|l| l.starts_with("LBENCH ") && l.contains(&metric)),
                "{metric} missing:\n{stdout}"
            );
        }
        assert!(!stdout.contains("throughput_at_slo"), "{stdout}");
    }
    std::fs::remove_file(path).unwrap();
}
