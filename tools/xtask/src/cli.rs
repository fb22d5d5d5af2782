//! The command line of `cargo xtask` and the dispatch to each command.

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::bench::{self, BenchOptions};
use crate::fn_cli::{self, Gateway};
use crate::fuzz::{self, FuzzOptions, FuzzTarget};
use crate::kernel_build;
use crate::qemu::{Accel, Machine};
use crate::run::{self, RunOptions};
use crate::soak::{self, SoakOptions};
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
    /// Run the benchmarks (icount, or KVM wall clock) and write bench/results/<date>.json.
    Bench(BenchArgs),
    /// The HTTP benchmark's part inside xtask's own network namespace (started by `bench`).
    #[command(hide = true)]
    BenchHttpInside(BenchHttpInsideArgs),
    /// The `redis` and `prefork` benchmarks' part inside xtask's own network namespace.
    #[command(hide = true)]
    BenchAppsInside(BenchAppsInsideArgs),
    /// Deploy, invoke, list and remove functions on a running Fjord (`cargo xtask run`).
    #[command(name = "fn")]
    Fn(FnArgs),
    /// Print a running Fjord's metrics (GET /metrics, Prometheus text).
    Metrics(MetricsArgs),
    /// Fuzz a parser or the system calls; crashing inputs go to fuzz/crashes/<target>/.
    Fuzz(FuzzArgs),
    /// Drive hello, chains and the workloads through the gateway; check memory and latency.
    Soak(SoakArgs),
    /// List or copy out the files on the disk image `cargo xtask run` attaches.
    Disk(DiskArgs),
    /// Start N Fjord nodes on q35 sharing one emulated CXL memory (ivshmem), behind HAProxy.
    Cluster(ClusterArgs),
    /// Exact guest instructions per kernel symbol over a window of a boot (icount, QEMU's
    /// log of executed blocks).
    Profile(ProfileArgs),
}

/// Arguments of `profile`.
#[derive(Debug, Args)]
pub struct ProfileArgs {
    /// The kernel command line of the boot to profile.
    #[arg(long, default_value = "mode=bench bench=fork modules=initrd")]
    pub append: String,
    /// vCPUs.
    #[arg(long, default_value_t = 2)]
    pub smp: u32,
    /// Guest RAM in MiB.
    #[arg(long, default_value_t = 1024)]
    pub mem: u32,
    /// The guest output line the delay counts from [default: the banner's last line].
    #[arg(long)]
    pub after: Option<String>,
    /// Host seconds from that line to the window.
    #[arg(long, default_value_t = 3.0)]
    pub delay: f64,
    /// Host seconds of logged executions (about 1.5 million guest instructions a second).
    #[arg(long, default_value_t = 1.0)]
    pub window: f64,
    /// Symbols shown per vCPU.
    #[arg(long, default_value_t = 40)]
    pub top: usize,
}

/// Arguments of `cluster`.
#[derive(Debug, Args)]
pub struct ClusterArgs {
    /// Nodes (2 or more).
    #[arg(long, default_value_t = 2)]
    pub nodes: u32,
    /// Size of the shared region in MiB (a power of two, 16 or more).
    #[arg(long, default_value_t = 256, value_name = "MIB")]
    pub region: u64,
    /// vCPUs per node.
    #[arg(long, default_value_t = 2)]
    pub smp: u32,
    /// Guest RAM per node in MiB.
    #[arg(long, default_value_t = 512)]
    pub mem: u32,
    /// The accelerator [default: KVM if /dev/kvm is usable, else TCG].
    #[arg(long, value_enum)]
    pub accel: Option<crate::qemu::Accel>,
    /// Extra kernel command-line options for every node.
    #[arg(long)]
    pub append: Option<String>,
    /// Stop the cluster another `cargo xtask cluster` started (and remove its shared file).
    #[arg(long)]
    pub stop: bool,
}

/// Arguments of `disk`.
#[derive(Debug, Args)]
pub struct DiskArgs {
    /// The image [default: target/fjord-disk.img].
    #[arg(long, global = true, value_name = "FILE")]
    pub image: Option<std::path::PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub verb: DiskCommand,
}

/// The `disk` verbs.
#[derive(Debug, Subcommand)]
pub enum DiskCommand {
    /// List the files (`<namespace>/<name>`) and their sizes.
    #[command(visible_alias = "ls")]
    List,
    /// Copy a file out (checksum verified), to standard output or `--out`.
    Get {
        /// The file, as `ls` names it (`<namespace>/<name>`).
        name: String,
        /// Where to write it [default: standard output].
        #[arg(long, short, value_name = "FILE")]
        out: Option<std::path::PathBuf>,
    },
}

/// Arguments of `soak`.
#[derive(Debug, Args)]
pub struct SoakArgs {
    /// Invocations after the warm-up.
    #[arg(long, short = 'n', default_value_t = 1_000_000)]
    pub invocations: u64,
    /// Keep-alive client connections.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub connections: u64,
    /// Most the p50 and p99 latency may grow from the start to the end, in percent.
    #[arg(long, default_value_t = 10.0, value_name = "PERCENT")]
    pub max_drift: f64,
}

/// Arguments of `fuzz`.
#[derive(Debug, Args)]
pub struct FuzzArgs {
    /// What to fuzz.
    #[arg(value_enum)]
    pub target: FuzzTarget,
    /// Inputs to try (system calls for `syscalls`).
    #[arg(long, short = 'n', default_value_t = 1_000_000)]
    pub iterations: u64,
    /// Seed of the generator: the same seed tries the same inputs.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Threads of a host target [default: every CPU].
    #[arg(long, short = 'j')]
    pub jobs: Option<usize>,
    /// Fuzz a host target with AFL++ (coverage-guided; installs cargo-afl into target/afl)
    /// for this many seconds instead.
    #[arg(long, value_name = "SECONDS")]
    pub afl: Option<u64>,
}

/// Which Fjord the `fn` and `metrics` commands talk to.
#[derive(Debug, Args)]
pub struct GatewayArgs {
    /// The gateway's base URL, e.g. http://127.0.0.1:8080/ [default: $FJORD_URL, else the URL
    /// `cargo xtask run` saved in target/fjord/gateway-url]
    #[arg(long, global = true, value_name = "URL")]
    pub url: Option<String>,
}

/// Arguments of `fn`.
#[derive(Debug, Args)]
pub struct FnArgs {
    /// The gateway.
    #[command(flatten)]
    pub gateway: GatewayArgs,
    /// What to do.
    #[command(subcommand)]
    pub verb: FnCommand,
}

/// The `fn` verbs.
#[derive(Debug, Subcommand)]
pub enum FnCommand {
    /// Deploy an ELF module file under its manifest's name, or every function of an app in apps/.
    Deploy {
        /// A module file, or an app name (`hello`; `hotel` deploys every hotel-* function).
        #[arg(value_name = "APP|FILE")]
        target: String,
    },
    /// Invoke a function and print its response body.
    Invoke {
        /// The function.
        name: String,
        /// The request body: TEXT, @FILE for a file's bytes, @- for stdin [default: empty].
        #[arg(short, long, value_name = "TEXT|@FILE")]
        data: Option<String>,
    },
    /// List the deployed functions (name, size, generation).
    #[command(visible_alias = "ls")]
    List,
    /// Remove a deployed function.
    #[command(visible_alias = "rm")]
    Remove {
        /// The function.
        name: String,
    },
}

/// Arguments of `metrics`.
#[derive(Debug, Args)]
pub struct MetricsArgs {
    /// The gateway.
    #[command(flatten)]
    pub gateway: GatewayArgs,
    /// Print only the lines containing PATTERN.
    #[arg(long, value_name = "PATTERN")]
    pub grep: Option<String>,
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
    /// Run only the benchmark groups whose name contains this (boot, syscall, fork, pd, faas, …);
    /// `cxl` (only when named) runs CXLfork on one q35 node with a shared region; `redis` and
    /// `prefork` run Fjord's programs beside redis-server and nginx in the Linux guest.
    pub group: Option<String>,
    /// Also run the Linux baseline and write the report.
    #[arg(long)]
    pub report: bool,
    /// `tcg` (default): exact guest instructions under `-icount`, the reproducible reference;
    /// `kvm`: wall-clock nanoseconds of the calibrated TSC under KVM.
    #[arg(long, value_enum, default_value_t = Accel::Tcg)]
    pub accel: Accel,
}

/// Arguments of the hidden `bench-apps-inside`.
#[derive(Debug, Args)]
pub struct BenchAppsInsideArgs {
    /// `redis` or `prefork`.
    #[arg(long)]
    pub group: String,
    /// The kernel ELF.
    #[arg(long)]
    pub kernel: std::path::PathBuf,
    /// The QEMU binary.
    #[arg(long)]
    pub qemu: std::path::PathBuf,
    /// The tap interface, already made in this namespace.
    #[arg(long)]
    pub tap: String,
    /// Where to write the measurements (JSON).
    #[arg(long)]
    pub out: std::path::PathBuf,
}

/// Arguments of the hidden `bench-http-inside`.
#[derive(Debug, Args)]
pub struct BenchHttpInsideArgs {
    /// The kernel ELF.
    #[arg(long)]
    pub kernel: std::path::PathBuf,
    /// The QEMU binary.
    #[arg(long)]
    pub qemu: std::path::PathBuf,
    /// The accelerator.
    #[arg(long, value_enum)]
    pub accel: Accel,
    /// The tap interface, already made in this namespace.
    #[arg(long)]
    pub tap: String,
    /// Where to write the measurements (JSON).
    #[arg(long)]
    pub out: std::path::PathBuf,
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
        Command::BenchHttpInside(args) => {
            bench::http_gateway_inside(&args.kernel, &args.qemu, args.accel, &args.tap, &args.out)?;
            Ok(true)
        }
        Command::BenchAppsInside(args) => {
            crate::bench_apps::inside(
                &args.group,
                &args.kernel,
                &args.qemu,
                &args.tap,
                &args.out,
                cli.verbose,
            )?;
            Ok(true)
        }
        Command::Bench(args) => {
            bench::run(&BenchOptions {
                group: args.group,
                report: args.report,
                verbose: cli.verbose,
                accel: args.accel,
            })?;
            Ok(true)
        }
        Command::Fn(args) => {
            let gateway = Gateway::locate(args.gateway.url.as_deref())?;
            let mut out = std::io::stdout().lock();
            match args.verb {
                FnCommand::Deploy { target } => fn_cli::deploy(&gateway, &target, &mut out)?,
                FnCommand::Invoke { name, data } => {
                    let body = fn_cli::request_body(data.as_deref())?;
                    fn_cli::invoke(&gateway, &name, &body, &mut out)?;
                }
                FnCommand::List => fn_cli::list(&gateway, &mut out)?,
                FnCommand::Remove { name } => fn_cli::remove(&gateway, &name, &mut out)?,
            }
            Ok(true)
        }
        Command::Fuzz(args) => fuzz::run(&FuzzOptions {
            target: args.target,
            iterations: args.iterations,
            seed: args.seed,
            jobs: args.jobs,
            afl_seconds: args.afl,
            verbose: cli.verbose,
        }),
        Command::Soak(args) => soak::run(&SoakOptions {
            connections: args.connections as usize,
            max_drift: args.max_drift / 100.0,
            verbose: cli.verbose,
            ..SoakOptions::new(args.invocations)
        }),
        Command::Disk(args) => {
            let image = match args.image {
                Some(p) => p,
                None => crate::workspace::target_dir().join("fjord-disk.img"),
            };
            match args.verb {
                DiskCommand::List => crate::disk::list(&image, &mut std::io::stdout().lock())?,
                DiskCommand::Get { name, out } => crate::disk::get(&image, &name, out.as_deref())?,
            }
            Ok(true)
        }
        Command::Profile(args) => {
            crate::profile::run(&crate::profile::ProfileOptions {
                append: args.append,
                smp: args.smp,
                memory_mib: args.mem,
                after: args.after,
                delay: args.delay,
                window: args.window,
                top: args.top,
            })?;
            Ok(true)
        }
        Command::Cluster(args) => {
            if args.stop {
                crate::cluster::stop_running()?;
            } else {
                crate::cluster::run(&crate::cluster::ClusterOptions {
                    nodes: args.nodes,
                    region_mib: args.region,
                    smp: args.smp,
                    memory_mib: args.mem,
                    accel: args.accel,
                    append: args.append.unwrap_or_default(),
                })?;
            }
            Ok(true)
        }
        Command::Metrics(args) => {
            let gateway = Gateway::locate(args.gateway.url.as_deref())?;
            fn_cli::metrics(
                &gateway,
                args.grep.as_deref(),
                &mut std::io::stdout().lock(),
            )?;
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

    fn fn_verb(argv: &[&str]) -> (Option<String>, FnCommand) {
        let Command::Fn(args) = Cli::parse_from(argv).command else {
            panic!("not fn")
        };
        (args.gateway.url, args.verb)
    }

    #[test]
    fn parses_fn_verbs() {
        let (url, verb) = fn_verb(&["xtask", "fn", "deploy", "hotel"]);
        assert_eq!(url, None);
        assert!(matches!(verb, FnCommand::Deploy { target } if target == "hotel"));

        let (_, verb) = fn_verb(&["xtask", "fn", "deploy", "target/apps/hello"]);
        assert!(matches!(verb, FnCommand::Deploy { target } if target == "target/apps/hello"));

        let (_, verb) = fn_verb(&["xtask", "fn", "invoke", "hello", "--data", "world"]);
        assert!(
            matches!(verb, FnCommand::Invoke { name, data } if name == "hello" && data.as_deref() == Some("world"))
        );
        let (_, verb) = fn_verb(&["xtask", "fn", "invoke", "hello", "-d", "@req.txt"]);
        assert!(
            matches!(verb, FnCommand::Invoke { data, .. } if data.as_deref() == Some("@req.txt"))
        );
        let (_, verb) = fn_verb(&["xtask", "fn", "invoke", "hello"]);
        assert!(matches!(verb, FnCommand::Invoke { data: None, .. }));

        assert!(matches!(
            fn_verb(&["xtask", "fn", "list"]).1,
            FnCommand::List
        ));
        assert!(matches!(fn_verb(&["xtask", "fn", "ls"]).1, FnCommand::List));
        let (_, verb) = fn_verb(&["xtask", "fn", "remove", "hello"]);
        assert!(matches!(verb, FnCommand::Remove { name } if name == "hello"));
        let (_, verb) = fn_verb(&["xtask", "fn", "rm", "hello"]);
        assert!(matches!(verb, FnCommand::Remove { name } if name == "hello"));

        // Missing operands and unknown verbs are usage errors.
        for argv in [
            &["xtask", "fn"][..],
            &["xtask", "fn", "deploy"],
            &["xtask", "fn", "invoke"],
            &["xtask", "fn", "remove"],
            &["xtask", "fn", "update", "x"],
            &["xtask", "fn", "list", "extra"],
        ] {
            assert!(Cli::try_parse_from(argv).is_err(), "{argv:?}");
        }
    }

    #[test]
    fn url_goes_before_or_after_the_verb() {
        let url = Some("http://127.0.0.1:9000/".to_owned());
        assert_eq!(
            fn_verb(&["xtask", "fn", "--url", "http://127.0.0.1:9000/", "list"]).0,
            url
        );
        assert_eq!(
            fn_verb(&["xtask", "fn", "list", "--url", "http://127.0.0.1:9000/"]).0,
            url
        );
    }

    #[test]
    fn parses_fuzz() {
        let Command::Fuzz(args) = Cli::parse_from(["xtask", "fuzz", "http"]).command else {
            panic!("not fuzz")
        };
        assert_eq!(
            (args.target, args.iterations, args.seed),
            (FuzzTarget::Http, 1_000_000, 1)
        );
        let Command::Fuzz(args) = Cli::parse_from([
            "xtask",
            "fuzz",
            "syscalls",
            "--iterations",
            "500",
            "--seed",
            "9",
        ])
        .command
        else {
            panic!("not fuzz")
        };
        assert_eq!(
            (args.target, args.iterations, args.seed),
            (FuzzTarget::Syscalls, 500, 9)
        );
        assert!(Cli::try_parse_from(["xtask", "fuzz", "everything"]).is_err());
    }

    #[test]
    fn parses_metrics() {
        let Command::Metrics(args) = Cli::parse_from(["xtask", "metrics"]).command else {
            panic!("not metrics")
        };
        assert_eq!((args.gateway.url, args.grep), (None, None));
        let Command::Metrics(args) = Cli::parse_from([
            "xtask",
            "metrics",
            "--grep",
            "free_frames",
            "--url",
            "127.0.0.1:8080",
        ])
        .command
        else {
            panic!("not metrics")
        };
        assert_eq!(args.grep.as_deref(), Some("free_frames"));
        assert_eq!(args.gateway.url.as_deref(), Some("127.0.0.1:8080"));
    }
}
