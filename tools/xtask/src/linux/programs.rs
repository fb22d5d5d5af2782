//! The C benchmark programs of the Linux guest (`bench/linux/*.c`), the steps `/init` runs
//! them in, and their compilation with the host's `gcc -O2 -static`.
//!
//! Each step is one process started by `/init`, so a measurement never inherits another
//! step's memory. Every step lists the metrics it must print; a missing one fails the run.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use anyhow::{Context, Result, bail};

use super::nightcore;
use crate::host_deps;

/// Benchmark groups in the order `/init` runs them.
pub const GROUPS: &[&str] = &[
    "boot",
    "syscall",
    "ctxswitch",
    "fork",
    "mm",
    "chain",
    "checkpoint",
    "restore",
    "workloads",
];

/// Where the guest finds the programs (`/bench/<name>`).
pub const GUEST_DIR: &str = "/bench";

/// The header every program includes.
pub const HEADER: &str = "lbench.h";

/// One run of one program by `/init`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// The benchmark group the step belongs to.
    pub group: &'static str,
    /// The program (`bench/linux/<program>.c`, `/bench/<program>` in the guest).
    pub program: &'static str,
    /// Its arguments.
    pub args: &'static [&'static str],
    /// The metrics it prints.
    pub metrics: &'static [&'static str],
}

impl Step {
    /// The command line `/init` runs.
    pub fn command(&self) -> String {
        let mut command = format!("{GUEST_DIR}/{}", self.program);
        for arg in self.args {
            command.push(' ');
            command.push_str(arg);
        }
        command
    }
}

/// Shorthand for the table below.
const fn step(
    group: &'static str,
    program: &'static str,
    args: &'static [&'static str],
    metrics: &'static [&'static str],
) -> Step {
    Step {
        group,
        program,
        args,
        metrics,
    }
}

/// Every step, in order. `boot` must come first: it reads the TSC as early as possible.
pub const STEPS: &[Step] = &[
    step("boot", "boot", &[], &["boot_to_init"]),
    step("syscall", "syscall", &[], &["null_syscall"]),
    step("ctxswitch", "ctxswitch", &[], &["pipe_pingpong_roundtrip"]),
    step("fork", "fork", &["0"], &["fork_exit_wait_hello"]),
    step("fork", "fork", &["1"], &["fork_exit_wait_1mb"]),
    step("fork", "fork", &["10"], &["fork_exit_wait_10mb"]),
    step("fork", "fork", &["100"], &["fork_exit_wait_100mb"]),
    step("fork", "forkexec", &[], &["fork_exec_wait"]),
    step(
        "mm",
        "mm",
        &[],
        &[
            "mmap_4k",
            "munmap_4k",
            "mprotect_4k",
            "mmap_touch_munmap_4k",
        ],
    ),
    step("chain", "chain", &[], &["chain_abcba_1k"]),
    step(
        "checkpoint",
        "checkpoint",
        &["1"],
        &["checkpoint_full_copy_1mb", "restore_full_copy_1mb"],
    ),
    step(
        "checkpoint",
        "checkpoint",
        &["10"],
        &["checkpoint_full_copy_10mb", "restore_full_copy_10mb"],
    ),
    step(
        "checkpoint",
        "checkpoint",
        &["100"],
        &["checkpoint_full_copy_100mb", "restore_full_copy_100mb"],
    ),
    // Groundhog's baseline: a process forked per request from a warmed parent.
    step(
        "restore",
        "forkserve",
        &[],
        &[
            "hello_latency_restore",
            "hello_cycle_restore",
            "dirty_1_latency_restore",
            "dirty_1_cycle_restore",
            "dirty_10_latency_restore",
            "dirty_10_cycle_restore",
            "dirty_100_latency_restore",
            "dirty_100_cycle_restore",
            "dirty_1000_latency_restore",
            "dirty_1000_cycle_restore",
        ],
    ),
    // The same baseline for every target of Fjord's restore group, latency and throughput at
    // the SLO, on the NightCore-like runtime (see `nightcore`); its parameters file comes from
    // the Fjord run.
    step(
        "restore",
        nightcore::PROGRAM,
        &["--restore", RESTORE_PARAMS],
        nightcore::RESTORE_METRICS,
    ),
    // The NightCore-like runtime (Rust, `tools/nightcore`, see `nightcore`); its parameters
    // file comes from the Fjord run.
    step(
        "workloads",
        nightcore::PROGRAM,
        &[WORKLOADS_PARAMS],
        nightcore::METRICS,
    ),
];

/// The guest path of the `workloads` step's parameters file.
pub const WORKLOADS_PARAMS: &str = "/bench/workloads.params";

/// The guest path of the `restore` runner's parameters file.
pub const RESTORE_PARAMS: &str = "/bench/restore.params";

/// Whether `step` runs the NightCore-like runtime on the `restore` group's targets, which
/// needs [`RESTORE_PARAMS`].
pub fn is_restore_runner(step: &Step) -> bool {
    step.group == "restore" && step.program == nightcore::PROGRAM
}

/// Whether `program` is built with cargo (see `nightcore`) rather than compiled from C.
pub fn is_rust(program: &str) -> bool {
    program == nightcore::PROGRAM
}

/// Programs a step needs besides its own (`forkexec` executes `hello`).
fn helpers(program: &str) -> &'static [&'static str] {
    match program {
        "forkexec" => &["hello"],
        _ => &[],
    }
}

/// The steps of the chosen groups (all steps when `groups` is empty). Unknown groups are an
/// error that lists the known ones.
pub fn select(groups: &[String]) -> Result<Vec<Step>> {
    if let Some(unknown) = groups.iter().find(|g| !GROUPS.contains(&g.as_str())) {
        bail!(
            "unknown Linux benchmark group `{unknown}` (groups: {})",
            GROUPS.join(", ")
        );
    }
    Ok(STEPS
        .iter()
        .filter(|step| groups.is_empty() || groups.iter().any(|g| g == step.group))
        .copied()
        .collect())
}

/// Every program the steps run or execute, sorted.
pub fn programs_needed(steps: &[Step]) -> BTreeSet<&'static str> {
    steps
        .iter()
        .flat_map(|step| std::iter::once(step.program).chain(helpers(step.program).iter().copied()))
        .collect()
}

/// The host packages compilation needs.
pub const BUILD_PACKAGES: &[&str] = &["gcc", "libc6-dev"];

/// Compiles each C program in `programs` from `src_dir/<name>.c` into `out_dir/<name>` with
/// `gcc -O2 -static`, unless the binary is newer than its source and the header. Returns the
/// (name, binary) pairs; Rust programs ([`is_rust`]) are left to their own build.
pub fn compile(
    src_dir: &Path,
    out_dir: &Path,
    programs: &BTreeSet<&'static str>,
) -> Result<Vec<(&'static str, PathBuf)>> {
    host_deps::ensure_debian_packages(BUILD_PACKAGES)?;
    fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let header = src_dir.join(HEADER);
    let mut binaries = Vec::new();
    for &name in programs.iter().filter(|p| !is_rust(p)) {
        let source = src_dir.join(format!("{name}.c"));
        let binary = out_dir.join(name);
        if is_stale(&binary, &[&source, &header])? {
            let mut command = Command::new("gcc");
            command
                .args([
                    "-O2",
                    "-static",
                    "-std=gnu11",
                    "-Wall",
                    "-Wextra",
                    "-Werror",
                    "-o",
                ])
                .arg(&binary)
                .arg(&source);
            let output = command.output().context("could not run gcc")?;
            if !output.status.success() {
                bail!(
                    "compiling {} failed:\n{}",
                    source.display(),
                    String::from_utf8_lossy(&output.stderr)
                );
            }
        }
        binaries.push((name, binary));
    }
    Ok(binaries)
}

/// Whether `target` is missing or older than one of `inputs` (which must exist).
fn is_stale(target: &Path, inputs: &[&Path]) -> Result<bool> {
    let modified = |path: &Path| -> Result<SystemTime> {
        fs::metadata(path)
            .and_then(|m| m.modified())
            .with_context(|| format!("reading the time of {}", path.display()))
    };
    let Ok(built) = modified(target) else {
        return Ok(true);
    };
    for input in inputs {
        if modified(input)? > built {
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_step_is_in_a_known_group_and_boot_is_first() {
        assert_eq!(STEPS[0].group, "boot");
        for step in STEPS {
            assert!(GROUPS.contains(&step.group), "{step:?}");
            assert!(!step.metrics.is_empty(), "{step:?}");
        }
    }

    #[test]
    fn metric_names_are_unique() {
        let mut seen = BTreeSet::new();
        for metric in STEPS.iter().flat_map(|s| s.metrics) {
            assert!(seen.insert(metric), "{metric} twice");
        }
    }

    #[test]
    fn selecting_fork_runs_every_fork_size_and_needs_hello() {
        let steps = select(&["fork".to_owned()]).unwrap();
        let commands: Vec<String> = steps.iter().map(Step::command).collect();
        assert_eq!(
            commands,
            [
                "/bench/fork 0",
                "/bench/fork 1",
                "/bench/fork 10",
                "/bench/fork 100",
                "/bench/forkexec"
            ]
        );
        let programs: Vec<_> = programs_needed(&steps).into_iter().collect();
        assert_eq!(programs, ["fork", "forkexec", "hello"]);
    }

    #[test]
    fn workloads_runs_the_rust_runner_on_its_parameters_file() {
        let steps = select(&["workloads".to_owned()]).unwrap();
        assert_eq!(steps.len(), 1);
        assert_eq!(
            steps[0].command(),
            "/bench/fjord-nightcore /bench/workloads.params"
        );
        let programs = programs_needed(&steps);
        assert!(programs.iter().all(|p| is_rust(p)), "{programs:?}");
        assert!(!is_rust("chain"));
    }

    #[test]
    fn restore_runs_forkserve_and_the_rust_runner_on_its_parameters_file() {
        let steps = select(&["restore".to_owned()]).unwrap();
        let commands: Vec<String> = steps.iter().map(Step::command).collect();
        assert_eq!(
            commands,
            [
                "/bench/forkserve",
                "/bench/fjord-nightcore --restore /bench/restore.params"
            ]
        );
        assert!(!is_restore_runner(&steps[0]) && is_restore_runner(&steps[1]));
        let workloads = select(&["workloads".to_owned()]).unwrap();
        assert!(!is_restore_runner(&workloads[0]));
    }

    #[test]
    fn empty_selection_is_everything_and_unknown_groups_fail() {
        assert_eq!(select(&[]).unwrap().len(), STEPS.len());
        let error = select(&["forks".to_owned()]).unwrap_err().to_string();
        assert!(
            error.contains("forks") && error.contains("checkpoint"),
            "{error}"
        );
    }

    #[test]
    fn every_program_has_a_source() {
        let dir = crate::workspace::root().join("bench/linux");
        for program in programs_needed(STEPS).into_iter().filter(|p| !is_rust(p)) {
            assert!(dir.join(format!("{program}.c")).is_file(), "{program}.c");
        }
        assert!(dir.join(HEADER).is_file());
    }
}
