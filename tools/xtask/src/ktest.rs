//! The in-kernel test layer: boot the kernel with `mode=test` and judge its `ktest` lines, its
//! summary line and its exit code.

use std::time::Duration;

use crate::qemu::{Device, Machine, QemuConfig};
use crate::qemu_run::{QemuExit, QemuRun};
use crate::serial_log::KtestLine;
use crate::test_runner::{BootSetup, Tally};

/// Time limit of one test boot.
pub const TIME_LIMIT: Duration = Duration::from_secs(300);

/// Time limit of one test boot under a KVM that emulates the guest's ring 0 (about four
/// minutes on microvm with two CPUs here).
pub const EMULATED_TIME_LIMIT: Duration = Duration::from_secs(900);

/// The boards and CPU counts the kernel's tests run on.
pub const BOOTS: [(Machine, u32); 2] = [(Machine::Microvm, 2), (Machine::Q35, 4)];

/// What one test boot showed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Tests that passed (from the summary line, or counted when it is missing).
    pub passed: u64,
    /// Tests that failed, with their reasons.
    pub failures: Vec<(String, String)>,
    /// Failed tests according to the summary line.
    pub failed: u64,
    /// Tests the kernel left out (`slow_tests=skip`, or a device the board lacks).
    pub not_run: u64,
    /// What went wrong with the boot itself, if anything (no summary, wrong exit code).
    pub problem: Option<String>,
    /// The summary line said `0 passed, 0 failed`: no test was selected (the kernel then exits
    /// with the failure code, since a test run that ran nothing proves nothing).
    pub ran_none: bool,
}

impl Verdict {
    /// Judges the serial lines and the exit of one `mode=test` boot: it passed iff the last
    /// summary line says 0 failed and QEMU exited with the success code.
    pub fn judge(lines: &[String], exit: QemuExit) -> Verdict {
        let mut verdict = Verdict::default();
        let mut counted_passed = 0;
        let mut summary = None;
        for line in lines {
            match KtestLine::parse(line) {
                Some(KtestLine::Passed { .. }) => counted_passed += 1,
                Some(KtestLine::Failed { name, reason }) => verdict.failures.push((name, reason)),
                Some(KtestLine::NotRun { .. }) => verdict.not_run += 1,
                Some(KtestLine::Summary { passed, failed }) => summary = Some((passed, failed)),
                None => {}
            }
        }
        match summary {
            Some((passed, failed)) => {
                verdict.passed = passed;
                verdict.failed = failed;
                verdict.ran_none = passed == 0 && failed == 0;
                verdict.problem = match (failed, exit) {
                    (0, QemuExit::Success) | (1.., QemuExit::Failure) => None,
                    (0, exit) => Some(format!("summary says 0 failed, but {exit}")),
                    (_, exit) => Some(format!("summary says {failed} failed, but {exit}")),
                };
            }
            None => {
                verdict.passed = counted_passed;
                verdict.failed = verdict.failures.len() as u64;
                verdict.problem = Some(format!("no `ktest: N passed, M failed` line; {exit}"));
            }
        }
        verdict
    }

    /// The verdict as a tally: every failed test, plus one for a problem with the boot.
    pub fn tally(&self) -> Tally {
        Tally {
            passed: self.passed,
            failed: self.failed + u64::from(self.problem.is_some()),
        }
    }
}

/// Runs the kernel's tests on every board of [`BOOTS`], under the setup's accelerator. Under a
/// KVM that emulates ring 0 only the first board runs (each boot takes minutes there).
pub fn run(setup: &BootSetup, filter: Option<&str>) -> Tally {
    let mut tally = Tally::default();
    for (i, (machine, smp)) in BOOTS.into_iter().enumerate() {
        if i > 0 && setup.ring0_emulated {
            println!(
                "ktest {machine} smp={smp} {} ... not run: this KVM emulates ring 0 (minutes per boot); {} ran under it, TCG covers {machine}",
                setup.accel, BOOTS[0].0
            );
            continue;
        }
        tally.add(boot_once(setup, machine, smp, filter));
    }
    tally
}

/// One test boot, reported on one line (plus failures and, on a problem, the log's end).
fn boot_once(setup: &BootSetup, machine: Machine, smp: u32, filter: Option<&str>) -> Tally {
    let label = format!("ktest {machine} smp={smp} {}", setup.accel);
    let mut config = QemuConfig::new(&setup.kernel);
    config.qemu = setup.qemu.clone();
    config.use_accel(setup.accel);
    config.machine = machine;
    config.smp = smp;
    // The function modules from the initrd are loaded at boot for the module tests.
    config.initrd = Some(setup.initrd.clone());
    config.append = "mode=test modules=initrd disk=scratch".to_owned();
    if let Some(filter) = filter {
        config.append.push_str(&format!(" test={filter}"));
    }
    // Where ring 0 is emulated, the tests that fork megabytes or run forktest in every mode
    // take minutes each; TCG has run them already.
    if setup.ring0_emulated {
        config.append.push_str(" slow_tests=skip");
    }
    // A scratch disk of its own: the disk tests leave a file there, checked below.
    let image = crate::disk::scratch_image(&format!("ktest-{machine}-{}", setup.accel));
    match &image {
        Ok(image) => config.devices.push(Device::Disk {
            image: image.clone(),
        }),
        Err(error) => {
            println!("{label} ... FAILED ({error:#})");
            return Tally {
                passed: 0,
                failed: 1,
            };
        }
    }
    // q35 has PCI: a scratch region of emulated CXL memory (ivshmem) for the cxl tests,
    // removed after the boot.
    let region = (machine == Machine::Q35).then(|| {
        std::path::PathBuf::from(format!(
            "/dev/shm/fjord-ktest-cxl-{}-{}",
            std::process::id(),
            setup.accel
        ))
    });
    if let Some(path) = &region {
        let made = std::fs::File::create(path).and_then(|f| f.set_len(CXL_TEST_MIB << 20));
        if let Err(error) = made {
            println!("{label} ... FAILED (creating {}: {error})", path.display());
            return Tally {
                passed: 0,
                failed: 1,
            };
        }
        config.devices.push(Device::Ivshmem {
            mem_path: path.clone(),
            size_mib: CXL_TEST_MIB,
        });
    }
    let tally = boot_with(setup, &config, &label, (machine, filter), image);
    if let Some(path) = region {
        let _ = std::fs::remove_file(path);
    }
    tally
}

/// Size of the q35 test boots' shared region, in MiB.
const CXL_TEST_MIB: u64 = 16;

/// Boots `config` and judges its tests (and the file the disk test leaves on `image`).
fn boot_with(
    setup: &BootSetup,
    config: &QemuConfig,
    label: &str,
    (machine, filter): (Machine, Option<&str>),
    image: anyhow::Result<std::path::PathBuf>,
) -> Tally {
    let echo = setup.verbose.then(|| format!("[{machine}] "));
    let mut run = match QemuRun::spawn(config, echo) {
        Ok(run) => run,
        Err(error) => {
            println!("{label} ... FAILED ({error:#})");
            return Tally {
                passed: 0,
                failed: 1,
            };
        }
    };
    let exit = run.wait_exit(if setup.ring0_emulated {
        EMULATED_TIME_LIMIT
    } else {
        TIME_LIMIT
    });
    let seconds = run.elapsed().as_secs_f64();
    let verdict = Verdict::judge(&run.lines(), exit);
    if verdict.ran_none
        && let Some(filter) = filter
    {
        // A filter meant for other layers, or only slow tests: not a failure of this one.
        match verdict.not_run {
            0 => println!("{label} ... no in-kernel test matches `{filter}`"),
            n => println!(
                "{label} ... not run: the {n} tests matching `{filter}` do not run on this boot (each says why)"
            ),
        }
        return Tally::default();
    }
    let not_run = match verdict.not_run {
        0 => String::new(),
        n => format!(", {n} not run (each line says why)"),
    };
    let counts = format!(
        "{} passed, {} failed{not_run}; {seconds:.1} s",
        verdict.passed, verdict.failed
    );
    match &verdict.problem {
        None if verdict.failed == 0 => println!("{label} ... ok ({counts})"),
        None => println!("{label} ... FAILED ({counts})"),
        Some(problem) => println!("{label} ... FAILED ({problem}; {counts})"),
    }
    for (name, reason) in &verdict.failures {
        println!("  ktest {name} FAILED: {reason}");
    }
    if verdict.problem.is_some() {
        print!("{}", run.log_tail(30));
    }
    let mut tally = verdict.tally();
    // The file the guest's disk test left, read from the host through the image QEMU wrote.
    let wrote = run
        .lines()
        .iter()
        .any(|l| l.starts_with(&format!("ktest {FILE_TEST} ... ok")));
    if wrote && let Ok(image) = &image {
        match crate::disk::check_ktest_files(image) {
            Ok(()) => {
                println!("{label} host: the file the guest saved reads back from the image ... ok");
                tally.passed += 1;
            }
            Err(e) => {
                println!("{label} host: the file the guest saved ... FAILED ({e:#})");
                tally.failed += 1;
            }
        }
    }
    tally
}

/// The in-kernel test whose file the host checks on the scratch image.
const FILE_TEST: &str = "disk::a_program_writes_saves_renames_shares_and_removes_its_disk_files";

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(str::to_owned).collect()
    }

    #[test]
    fn all_passed_and_success_exit_passes() {
        let log =
            lines("Fjord 0.1.0 booting\nktest a ... ok\nktest b ... ok\nktest: 2 passed, 0 failed");
        let verdict = Verdict::judge(&log, QemuExit::Success);
        assert_eq!(verdict.problem, None);
        assert_eq!(
            verdict.tally(),
            Tally {
                passed: 2,
                failed: 0
            }
        );
    }

    #[test]
    fn failures_are_listed() {
        let log = lines("ktest a ... ok\nktest b ... FAILED: 1 != 2\nktest: 1 passed, 1 failed");
        let verdict = Verdict::judge(&log, QemuExit::Failure);
        assert_eq!(verdict.problem, None);
        assert_eq!(verdict.failures, [("b".to_owned(), "1 != 2".to_owned())]);
        assert_eq!(
            verdict.tally(),
            Tally {
                passed: 1,
                failed: 1
            }
        );
    }

    #[test]
    fn wrong_exit_code_is_a_problem() {
        let log = lines("ktest a ... ok\nktest: 1 passed, 0 failed");
        let verdict = Verdict::judge(&log, QemuExit::Code(0));
        assert!(verdict.problem.unwrap().contains("status 0"));
        let verdict = Verdict::judge(&log, QemuExit::Failure);
        assert_eq!(
            verdict.tally(),
            Tally {
                passed: 1,
                failed: 1
            }
        );
    }

    #[test]
    fn no_selected_test_is_noted() {
        let verdict = Verdict::judge(&lines("ktest: 0 passed, 0 failed"), QemuExit::Failure);
        assert!(verdict.ran_none);
        assert!(verdict.problem.is_some());
    }

    #[test]
    fn missing_summary_counts_what_was_seen_plus_one() {
        let log = lines("ktest a ... ok\npanicked at kernel/src/x.rs:1:1: boom");
        let verdict = Verdict::judge(&log, QemuExit::Failure);
        assert_eq!(
            verdict.tally(),
            Tally {
                passed: 1,
                failed: 1
            }
        );
        let hang = Verdict::judge(&[], QemuExit::TimedOut(TIME_LIMIT));
        assert!(hang.problem.unwrap().contains("hang"));
    }
}
