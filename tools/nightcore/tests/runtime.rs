//! Runs the `fjord-nightcore` binary (engine and worker processes) with `--check`: over every
//! operation of the four workloads, each response checked for the operation's expected bytes
//! and a service time reported; and over the `restore` group's targets with each invocation in
//! a child forked from its worker, each response checked and no request seeing what an earlier
//! one wrote.

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

/// Runs the binary with `args` and a parameters file of `params`; its stdout, after asserting
/// it succeeded.
fn run_with(args: &[&str], params: &str) -> String {
    let path = std::env::temp_dir().join(format!(
        "nightcore-params-{}-{}",
        std::process::id(),
        args.join("")
    ));
    std::fs::write(&path, params).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_fjord-nightcore"))
        .args(args)
        .arg(&path)
        .output()
        .unwrap();
    std::fs::remove_file(path).unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    stdout
}

/// The `restore` group's labels: `hello`, each workload's first operation, `dirty_<n>`.
fn restore_labels() -> Vec<String> {
    let mut labels = vec!["hello".to_owned()];
    for w in fjord_faas::workloads::WORKLOADS {
        let op = fjord_faas::workloads::OPERATIONS
            .iter()
            .find(|o| o.workload == w)
            .unwrap();
        labels.push(format!("{}_{}", op.workload, op.name));
    }
    labels.extend([1, 10, 100, 1000].map(|n| format!("dirty_{n}")));
    labels
}

#[test]
fn fork_per_request_serves_every_restore_target_and_isolates_requests() {
    let params: String = restore_labels()
        .iter()
        .map(|l| format!("{l} 100000 1000000\n"))
        .collect();
    for workers in ["1", "2"] {
        // Each target's responses are checked (exactly for hello and dirty) before its latency
        // is reported; a dirty request after others must find none of their pages.
        let stdout = run_with(&["--restore", "--check", "--workers", workers], &params);
        for label in restore_labels() {
            let metric = format!("\"metric\":\"{label}_latency_fork\"");
            assert!(
                stdout
                    .lines()
                    .any(|l| l.starts_with("LBENCH {\"group\":\"restore\"") && l.contains(&metric)),
                "{metric} missing:\n{stdout}"
            );
        }
        for n in [1, 10, 100, 1000] {
            let seen = format!("the next request found 0 of the {n} pages written");
            assert!(stdout.contains(&seen), "{seen}:\n{stdout}");
        }
        assert!(!stdout.contains("throughput_at_slo"), "{stdout}");
    }
    // Without the fork, the one worker keeps what a request wrote: the check can see a leak.
    let stdout = run_with(
        &[
            "--restore",
            "--check",
            "--workers",
            "1",
            "--isolation",
            "warm",
        ],
        "dirty_10 100000 1000000\n",
    );
    assert!(
        stdout.contains("the next request found 10 of the 10 pages written"),
        "{stdout}"
    );
    assert!(
        stdout.contains("\"metric\":\"dirty_10_latency_warm\""),
        "{stdout}"
    );
}

#[test]
fn fork_per_request_runs_every_operation_through_engine_and_workers() {
    let params: String = fjord_faas::workloads::OPERATIONS
        .iter()
        .map(|o| format!("{} {} 100000 1000000\n", o.workload, o.name))
        .collect();
    let stdout = run_with(&["--isolation", "fork", "--check"], &params);
    for o in fjord_faas::workloads::OPERATIONS {
        let metric = format!("\"metric\":\"{}_{}_service\"", o.workload, o.name);
        assert!(stdout.contains(&metric), "{metric} missing:\n{stdout}");
    }
}

#[test]
fn a_target_slower_than_its_slo_unloaded_has_no_throughput_at_the_slo() {
    let stdout = run_with(&["--restore"], "hello 100000 1\n");
    assert!(stdout.contains("no sweep"), "{stdout}");
    assert!(
        stdout.lines().any(|l| l.starts_with("LBENCH ")
            && l.contains("\"metric\":\"hello_throughput_at_slo_fork\"")
            && l.contains("\"median\":0,")),
        "{stdout}"
    );
    assert!(!stdout.contains("offered"), "{stdout}");
}
