//! The command line of `cargo xtask` and the dispatch to each command.

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::bench::{self, BenchOptions};
use crate::kernel_build;
use crate::qemu::{Accel, Machine};
use crate::run::{self, RunOptions};
use crate::test_runner::{self, Layer, TestOptions};

/// Fjord's host tool: build, run, test and benchmark the kernel under QEMU.
#[derive(Debug, Parser)]
#[command(name = "cargo xtask", version, about)]
pub struct Cli {
    /// Echo the guest's serial output while testing or benchmarking.
    #[arg(short, long, global = true)]
    pub verbose: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Build the kernel (x86_64-unknown-none, release) and the function modules in `apps/`.
    Build,
    /// Build and boot Fjord with the serial console on this terminal (Ctrl-A X quits).
    Run(RunArgs),
    /// Run every test layer: lint, host unit tests, in-kernel tests, end-to-end boots.
    Test(TestArgs),
    /// Run the benchmarks under icount and write bench/results/<date>.json.
    Bench(BenchArgs),
}

/// Arguments of `run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The emulated board.
    #[arg(long, value_enum, default_value_t = Machine::Microvm)]
    pub machine: Machine,
    /// Number of vCPUs.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub smp: u32,
    /// Guest RAM in MiB.
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u32).range(16..))]
    pub mem: u32,
    /// Extra kernel command-line options (e.g. "log=debug"); `mode=run` unless a mode is given.
    #[arg(long)]
    pub append: Option<String>,
    /// Count guest instructions deterministically (-icount shift=0,sleep=off; implies TCG).
    #[arg(long)]
    pub icount: bool,
    /// The accelerator [default: KVM if /dev/kvm is usable, else TCG].
    #[arg(long, value_enum)]
    pub accel: Option<Accel>,
}

/// Arguments of `test`.
#[derive(Debug, Args)]
pub struct TestArgs {
    /// Run only tests whose name contains this (host tests, in-kernel tests, end-to-end cases).
    #[arg(long)]
    pub filter: Option<String>,
    /// Run only these layers (repeat or separate with commas); all by default.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub only: Vec<Layer>,
}

/// Arguments of `bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Run only the benchmark groups whose name contains this (boot, syscall, fork, pd, faas, …).
    pub group: Option<String>,
    /// Also run the Linux baseline and write the report.
    #[arg(long)]
    pub report: bool,
}

/// Parses the command line, runs the command and turns the outcome into the exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match dispatch(cli) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("xtask: error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs one command; `Ok(false)` means it ran and reported failures itself.
fn dispatch(cli: Cli) -> anyhow::Result<bool> {
    match cli.command {
        Command::Build => {
            let elf = kernel_build::build_kernel()?;
            println!("xtask: kernel: {}", elf.display());
            for app in crate::apps_build::build_apps()? {
                println!("xtask: function {}: {}", app.name, app.path.display());
            }
            Ok(true)
        }
        Command::Run(args) => {
            run::run(&RunOptions {
                machine: args.machine,
                smp: args.smp,
                memory_mib: args.mem,
                append: args.append,
                icount: args.icount,
                accel: args.accel,
            })?;
            Ok(true)
        }
        Command::Test(args) => Ok(test_runner::run_tests(&TestOptions {
            filter: args.filter,
            layers: args.only,
            verbose: cli.verbose,
        })),
        Command::Bench(args) => {
            bench::run(&BenchOptions {
                group: args.group,
                report: args.report,
                verbose: cli.verbose,
            })?;
            Ok(true)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn parses_run_and_test_options() {
        let cli = Cli::parse_from(["xtask", "run", "--machine", "q35", "--smp", "4", "--icount"]);
        let Command::Run(args) = cli.command else {
            panic!("not run")
        };
        assert_eq!(
            (args.machine, args.smp, args.mem, args.icount),
            (Machine::Q35, 4, 512, true)
        );

        let cli = Cli::parse_from(["xtask", "test", "--only", "lint,host", "--filter", "vma"]);
        let Command::Test(args) = cli.command else {
            panic!("not test")
        };
        assert_eq!(args.only, [Layer::Lint, Layer::Host]);
        assert_eq!(args.filter.as_deref(), Some("vma"));

        let cli = Cli::parse_from(["xtask", "bench", "boot", "--report"]);
        let Command::Bench(args) = cli.command else {
            panic!("not bench")
        };
        assert_eq!((args.group.as_deref(), args.report), (Some("boot"), true));
    }

    #[test]
    fn run_chooses_the_accelerator() {
        let accel = |argv: &[&str]| {
            let Command::Run(args) = Cli::parse_from(argv).command else {
                panic!("not run")
            };
            args.accel
        };
        assert_eq!(accel(&["xtask", "run"]), None);
        assert_eq!(accel(&["xtask", "run", "--accel", "tcg"]), Some(Accel::Tcg));
        assert_eq!(accel(&["xtask", "run", "--accel", "kvm"]), Some(Accel::Kvm));
        assert!(Cli::try_parse_from(["xtask", "run", "--accel", "hvf"]).is_err());
    }
}
