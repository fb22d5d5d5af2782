//! End-to-end boots: start the whole kernel as a user would and check its serial log and exit
//! code, including the failure paths (bad option, panic, page fault, missing initrd).

use std::time::Duration;

use anyhow::Context;

use crate::qemu::{Machine, QemuConfig};
use crate::qemu_run::{LineWaitError, QemuExit, QemuRun};
use crate::serial_log::{self, READY_LINE};
use crate::test_runner::{BootSetup, Tally};

/// Time limit of one end-to-end boot.
pub const TIME_LIMIT: Duration = Duration::from_secs(120);

/// Time limit of one end-to-end boot under a KVM that emulates the guest's ring 0.
pub const EMULATED_TIME_LIMIT: Duration = Duration::from_secs(600);

/// What a case expects of the boot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// The kernel reaches `fjord: ready` and its banner names this many CPUs; then we stop it.
    Ready {
        /// CPUs the banner must announce.
        cpus: u32,
    },
    /// The serial log contains this text and QEMU exits with the failure code.
    FailsWith(&'static str),
    /// The serial log comes to contain this text (a program started with `init=` printed it);
    /// then we stop the kernel.
    Prints(&'static str),
}

/// One end-to-end case.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    /// Name printed in `e2e <name> ... ok`.
    pub name: &'static str,
    /// Kernel command line.
    pub append: &'static str,
    /// Pass the initrd with `-initrd`.
    pub initrd: bool,
    /// vCPUs (microvm).
    pub smp: u32,
    /// What must happen.
    pub expect: Expect,
}

/// Every end-to-end case, in order.
pub const CASES: [Case; 8] = [
    Case {
        name: "boot",
        append: "mode=run",
        initrd: true,
        smp: 2,
        expect: Expect::Ready { cpus: 2 },
    },
    Case {
        name: "bad-option",
        append: "mode=run bogus=1",
        initrd: true,
        smp: 1,
        expect: Expect::FailsWith("unknown command-line option"),
    },
    Case {
        name: "panic",
        append: "mode=run crash=panic",
        initrd: true,
        smp: 1,
        expect: Expect::FailsWith("panicked at"),
    },
    Case {
        name: "page-fault",
        append: "mode=run crash=pagefault",
        initrd: true,
        smp: 1,
        expect: Expect::FailsWith("PAGE FAULT"),
    },
    Case {
        name: "runtime-options",
        append: "mode=run modules=initrd jbsq_k=4 hops=copy",
        initrd: true,
        smp: 2,
        expect: Expect::Ready { cpus: 2 },
    },
    Case {
        name: "bad-jbsq-k",
        append: "mode=run jbsq_k=0",
        initrd: true,
        smp: 1,
        expect: Expect::FailsWith("bad value '0' for command-line option 'jbsq_k'"),
    },
    Case {
        name: "init-program-forks",
        append: "mode=run modules=initrd init=forktest",
        initrd: true,
        smp: 2,
        expect: Expect::Prints("forktest: every child saw its own relocated copy"),
    },
    Case {
        name: "no-initrd",
        append: "mode=run modules=initrd",
        initrd: false,
        smp: 1,
        expect: Expect::FailsWith("no initrd"),
    },
];

/// The boot cases and groups that also run under a KVM that emulates the guest's ring 0, where
/// a boot takes about a minute: a μprocess that forks and exits, the `fn` commands (`hello`
/// invoked through the gateway) and the Redis program. With the in-kernel tests there, they
/// keep `cargo xtask test` inside CI's 20 minutes; TCG runs every case.
const EMULATED_RING0_SET: &[&str] = &["init-program-forks", "cli", "redis"];

/// Runs every case whose name contains `filter`, one line each, under the setup's accelerator;
/// every name starts with it (`tcg/boot`, `kvm/boot`). Under a KVM that emulates the guest's
/// ring 0 only [`EMULATED_RING0_SET`] runs; the rest is left to TCG, each with a line saying
/// so.
pub fn run(setup: &BootSetup, filter: Option<&str>) -> Tally {
    let mut tally = Tally::default();
    let accel = setup.accel;
    let slow = setup.ring0_emulated;
    let not_run = |name: &str| {
        println!(
            "e2e {accel}/{name} ... not run: this KVM emulates ring 0, tens of times slower than TCG here; TCG runs it"
        );
    };
    let skipped = |name: &str| slow && !EMULATED_RING0_SET.contains(&name);
    for case in CASES
        .iter()
        .filter(|case| filter.is_none_or(|filter| case.name.contains(filter)))
    {
        if skipped(case.name) {
            not_run(case.name);
            continue;
        }
        let (result, run) = run_case(setup, case);
        match &result {
            Ok(()) => println!("e2e {accel}/{} ... ok", case.name),
            Err(why) => {
                println!("e2e {accel}/{} ... FAILED ({why})", case.name);
                if let Some(run) = &run {
                    print!("{}", run.log_tail(25));
                }
            }
        }
        tally.record(result.is_ok());
    }
    // A VM killed while a program saves a file: the file on the disk is one whole save.
    if filter.is_none_or(|f| "disk-crash".contains(f) || f.contains("disk")) {
        if skipped("disk-crash") {
            not_run("disk-crash");
        } else {
            let name = format!(
                "{accel}/disk-crash/a VM killed mid-save leaves one whole save, and the disk mounts again"
            );
            let result = disk_crash(setup);
            report(&mut tally, &name, &result);
        }
    }
    // The HTTP gateway, from the host, on both boards (virtio-mmio and virtio-pci).
    for (board, machine) in [("microvm", Machine::Microvm), ("q35", Machine::Q35)] {
        let prefix = format!("http-{board}");
        if filter.is_some_and(|f| !prefix.contains(f) && !f.contains("http") || f.contains("conns"))
        {
            continue;
        }
        if skipped(&prefix) {
            not_run(&prefix);
            continue;
        }
        let outcomes = crate::e2e_http::run(&setup.kernel, machine, accel);
        report_group(&mut tally, &format!("{accel}/{prefix}"), true, outcomes);
    }
    // Many connections, slow and idle clients, the connection limit (microvm, boots of their own).
    if filter.is_none_or(|f| "http-conns".contains(f) || f.contains("http")) {
        if slow {
            not_run("http-conns");
        } else {
            let outcomes = crate::apps_build::build_apps()
                .context("building the function modules")
                .and_then(|apps| {
                    let hello = apps
                        .iter()
                        .find(|a| a.name == "hello")
                        .context("app hello was not built")?;
                    crate::e2e_conns::run(&setup.kernel, accel, &hello.bytes)
                });
            report_group(&mut tally, &format!("{accel}"), true, outcomes);
        }
    }
    // Programs' TCP sockets, driven from the host through a forwarded port.
    if filter.is_none_or(|f| "sockets".contains(f) || f.contains("sockets")) {
        if skipped("sockets") {
            not_run("sockets");
        } else {
            let outcomes = crate::apps_build::build_apps()
                .context("building the function modules")
                .and_then(|apps| crate::e2e_sockets::run(&setup.kernel, accel, &apps));
            report_group(&mut tally, &format!("{accel}"), true, outcomes);
        }
    }
    // The Redis-compatible program, against Debian's Redis tools and server.
    if filter.is_none_or(|f| "redis".contains(f) || f.contains("redis")) {
        let outcomes = crate::apps_build::build_apps()
            .context("building the function modules")
            .and_then(|apps| crate::e2e_redis::run(&setup.kernel, accel, &apps, slow));
        report_group(&mut tally, &format!("{accel}"), true, outcomes);
    }
    // A cluster of two nodes sharing the emulated CXL memory, behind HAProxy.
    if filter.is_none_or(|f| "cluster".contains(f) || f.contains("cluster")) {
        if slow {
            not_run("cluster");
        } else {
            report_group(
                &mut tally,
                &format!("{accel}"),
                true,
                crate::e2e_cluster::run(accel),
            );
        }
    }
    // A short soak: memory back to its baseline after the mix, latency reported.
    if filter.is_none_or(|f| "soak".contains(f) || f.contains("soak")) {
        let name = format!(
            "{accel}/soak/{SOAK_INVOCATIONS} invocations of hello, chains and the workloads; memory back to baseline"
        );
        if slow {
            not_run("soak");
        } else {
            let options = crate::soak::SoakOptions {
                max_drift: SOAK_MAX_DRIFT,
                progress: false,
                accel,
                ..crate::soak::SoakOptions::new(SOAK_INVOCATIONS)
            };
            let result = crate::soak::boot_and_soak(&setup.kernel, &setup.qemu, &options)
                .map_err(|e| format!("{e:#}"))
                .and_then(|problems| match problems.is_empty() {
                    true => Ok(()),
                    false => Err(problems.join("; ")),
                });
            report(&mut tally, &name, &result);
        }
    }
    // The `fn` and `metrics` commands against a gateway of their own.
    if filter.is_none_or(|f| "cli".contains(f) || f.contains("cli")) {
        report_group(
            &mut tally,
            &format!("{accel}"),
            true,
            crate::e2e_cli::run(setup),
        );
    }
    tally
}

/// Prints one check as `e2e <name> ... ok` or `... FAILED (why)` and counts it.
fn report(tally: &mut Tally, name: &str, result: &Result<(), String>) {
    match result {
        Ok(()) => println!("e2e {name} ... ok"),
        Err(why) => println!("e2e {name} ... FAILED ({why})"),
    }
    tally.record(result.is_ok());
}

/// Reports the checks of the group `group` (their names under `group/` when `prefixed`), or
/// one failure named `group` when the group could not run.
fn report_group(
    tally: &mut Tally,
    group: &str,
    prefixed: bool,
    outcomes: anyhow::Result<Vec<crate::e2e_http::Outcome>>,
) {
    match outcomes {
        Ok(outcomes) => {
            for (name, result) in outcomes {
                match prefixed {
                    true => report(tally, &format!("{group}/{name}"), &result),
                    false => report(tally, &name, &result),
                }
            }
        }
        Err(e) => {
            println!("e2e {group} ... FAILED ({e:#})");
            tally.record(false);
        }
    }
}

/// Invocations of the test layer's short soak (`cargo xtask soak` makes a million).
const SOAK_INVOCATIONS: u64 = 10_000;
/// Latency drift the short soak tolerates: its windows of 1,000 requests on a shared CI machine
/// vary more than the 10% that `cargo xtask soak` holds a long run to.
const SOAK_MAX_DRIFT: f64 = 1.0;

/// How long a boot may take under the setup's accelerator.
fn time_limit(setup: &BootSetup) -> Duration {
    if setup.ring0_emulated {
        EMULATED_TIME_LIMIT
    } else {
        TIME_LIMIT
    }
}

/// Boots `filesaver` on a scratch disk, kills QEMU as soon as it has saved its third round
/// (so mid-way through a later one, as a rule), then checks from the host that the store
/// mounts, that `filesaver/dump.dat` is one whole round (its checksum verified, every byte of
/// that round), that every file there reads back whole, and that the kernel mounts the disk
/// again at the next boot.
fn disk_crash(setup: &BootSetup) -> Result<(), String> {
    let limit = time_limit(setup);
    let image = crate::disk::scratch_image(&format!("e2e-crash-{}", setup.accel))
        .map_err(|e| format!("{e:#}"))?;
    let boot = |append: &str| {
        let mut config = QemuConfig::new(&setup.kernel);
        config.qemu = setup.qemu.clone();
        config.machine = Machine::Microvm;
        config.use_accel(setup.accel);
        config.smp = 2;
        config.append = append.to_owned();
        config.initrd = Some(setup.initrd.clone());
        config.devices.push(crate::qemu::Device::Disk {
            image: image.clone(),
        });
        QemuRun::spawn(&config, setup.verbose.then(|| "[disk-crash] ".to_owned()))
            .map_err(|e| format!("{e:#}"))
    };
    let mut run = boot("mode=run modules=initrd init=filesaver")?;
    let third = run.wait_for_line(|l| l.contains("filesaver: saved round 3"), limit);
    run.kill();
    third.map_err(|e| format!("no `saved round 3` line: {e:?}"))?;
    let saved = run
        .lines()
        .iter()
        .filter(|l| l.contains("filesaver: saved round"))
        .count();
    let mut store = crate::disk::mount(&image).map_err(|e| format!("{e:#}"))?;
    let names: Vec<String> = store.files().iter().map(|f| f.name.clone()).collect();
    for name in &names {
        store
            .read(name)
            .map_err(|e| format!("{name} does not read back whole: {e:?}"))?;
    }
    let dump = store
        .read("filesaver/dump.dat")
        .map_err(|e| format!("filesaver/dump.dat: {e:?}"))?;
    let round = dump.first().copied().unwrap_or(0);
    let whole = dump.len() == 1 << 20
        && dump
            .iter()
            .enumerate()
            .all(|(i, &b)| b == (i % 251) as u8 ^ round);
    if !whole || (round as usize) < saved {
        return Err(format!(
            "dump.dat is not one whole round of at least {saved} (first byte {round}, {} bytes)",
            dump.len()
        ));
    }
    // The next boot mounts what the crash left.
    let mut again = boot("mode=run")?;
    let mounted = again.wait_for_line(|l| l.contains("fjord: disk:"), limit);
    again.kill();
    let line = mounted.map_err(|e| format!("no disk line at the next boot: {e:?}"))?;
    if !line.contains("file(s) in") {
        return Err(format!("the next boot did not mount the disk: {line}"));
    }
    Ok(())
}

/// Boots one case and judges it; returns the run too, for the log on failure.
fn run_case(setup: &BootSetup, case: &Case) -> (Result<(), String>, Option<QemuRun>) {
    let limit = time_limit(setup);
    let mut config = QemuConfig::new(&setup.kernel);
    config.qemu = setup.qemu.clone();
    config.machine = Machine::Microvm;
    config.use_accel(setup.accel);
    config.smp = case.smp;
    config.append = case.append.to_owned();
    config.initrd = case.initrd.then(|| setup.initrd.clone());
    let echo = setup.verbose.then(|| format!("[{}] ", case.name));
    let mut run = match QemuRun::spawn(&config, echo) {
        Ok(run) => run,
        Err(error) => return (Err(format!("{error:#}")), None),
    };
    let result = match case.expect {
        Expect::Ready { cpus } => expect_ready(&mut run, cpus, limit),
        Expect::FailsWith(text) => {
            let exit = run.wait_exit(limit);
            judge_failure(run.output_contains(text), text, exit)
        }
        Expect::Prints(text) => {
            let seen = run.wait_for_line(|line| line.contains(text), limit);
            run.kill();
            seen.map(drop)
                .map_err(|e| format!("no line with `{text}`: {e:?}"))
        }
    };
    (result, Some(run))
}

/// Waits for `fjord: ready`, checks the banner's CPU count, then stops QEMU.
fn expect_ready(run: &mut QemuRun, cpus: u32, limit: Duration) -> Result<(), String> {
    let waited = run.wait_for_line(|line| line.trim() == READY_LINE, limit);
    if let Err(error) = waited {
        let exit = match error {
            LineWaitError::OutputEnded => run.wait_exit(Duration::from_secs(10)),
            LineWaitError::TimedOut(_) => {
                run.kill();
                QemuExit::TimedOut(limit)
            }
        };
        return Err(format!("no `{READY_LINE}` line: {exit}"));
    }
    let banner = run
        .lines()
        .iter()
        .any(|line| serial_log::banner_reports_cpus(line, cpus));
    let exit = run.kill();
    if exit != QemuExit::Killed {
        return Err(format!(
            "the kernel did not stay up after `{READY_LINE}`: {exit}"
        ));
    }
    if !banner {
        return Err(format!("no banner line `fjord: {cpus} CPUs …`"));
    }
    Ok(())
}

/// A failure case passes iff the log has the expected text and QEMU exited with the failure code.
fn judge_failure(found: bool, text: &str, exit: QemuExit) -> Result<(), String> {
    match (found, exit) {
        (true, QemuExit::Failure) => Ok(()),
        (true, exit) => Err(format!("expected exit 35 (failure), got: {exit}")),
        (false, exit) => Err(format!("serial log lacks `{text}`; {exit}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_cases_need_text_and_exit_code() {
        assert_eq!(judge_failure(true, "PAGE FAULT", QemuExit::Failure), Ok(()));
        assert!(judge_failure(true, "PAGE FAULT", QemuExit::Code(0)).is_err());
        assert!(
            judge_failure(false, "PAGE FAULT", QemuExit::Failure)
                .unwrap_err()
                .contains("PAGE FAULT")
        );
    }

    #[test]
    fn case_names_are_unique() {
        let mut names: Vec<&str> = CASES.iter().map(|case| case.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), CASES.len());
    }
}
