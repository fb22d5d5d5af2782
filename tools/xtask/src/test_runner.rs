//! `cargo xtask test`: every test layer in order (lint, host unit tests, in-kernel tests,
//! end-to-end boots), one line per check, a per-layer summary and the final
//! `xtask: N passed, M failed` line.

use std::fmt;
use std::path::PathBuf;
use std::time::Instant;

use crate::qemu::{self, Accel, Machine};
use crate::{e2e, host_checks, host_deps, initrd, kernel_build, ktest};

/// A test layer, in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Layer {
    /// `cargo fmt --check` and `cargo clippy -D warnings` (host and kernel target).
    Lint,
    /// `cargo test --workspace`.
    Host,
    /// The kernel's own tests (`mode=test`) on microvm and q35.
    Ktest,
    /// Whole-system boots checked from the serial log and exit code.
    E2e,
}

impl Layer {
    /// Every layer, in order.
    pub const ALL: [Layer; 4] = [Layer::Lint, Layer::Host, Layer::Ktest, Layer::E2e];

    /// Whether the layer boots the kernel.
    fn boots_kernel(self) -> bool {
        matches!(self, Layer::Ktest | Layer::E2e)
    }
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `pad` so that width and alignment in format strings apply.
        f.pad(match self {
            Layer::Lint => "lint",
            Layer::Host => "host",
            Layer::Ktest => "ktest",
            Layer::E2e => "e2e",
        })
    }
}

/// Passed and failed checks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Checks that passed.
    pub passed: u64,
    /// Checks that failed.
    pub failed: u64,
}

impl Tally {
    /// One check's outcome.
    pub fn record(&mut self, ok: bool) {
        if ok {
            self.passed += 1;
        } else {
            self.failed += 1;
        }
    }

    /// Adds another tally.
    pub fn add(&mut self, other: Tally) {
        self.passed += other.passed;
        self.failed += other.failed;
    }
}

/// What the booting layers need: QEMU, the kernel ELF and the initrd.
#[derive(Clone, Debug)]
pub struct BootSetup {
    /// The QEMU binary.
    pub qemu: PathBuf,
    /// The kernel ELF.
    pub kernel: PathBuf,
    /// The packed initrd.
    pub initrd: PathBuf,
    /// Echo every serial line.
    pub verbose: bool,
    /// The accelerator the boots use.
    pub accel: Accel,
    /// Under KVM: the hypervisor emulates the guest's ring 0 instruction by instruction (KVM's
    /// PVM backend, told by the boot banner), which makes a boot tens of times slower than
    /// under TCG, so the slowest checks are left to TCG.
    pub ring0_emulated: bool,
}

/// Options of `cargo xtask test`.
#[derive(Clone, Debug, Default)]
pub struct TestOptions {
    /// Narrows host tests (cargo's filter), in-kernel tests (`test=<filter>`) and end-to-end cases
    /// (substring of the name). Lints always run.
    pub filter: Option<String>,
    /// Layers to run; empty means all.
    pub layers: Vec<Layer>,
    /// Echo the guests' serial output.
    pub verbose: bool,
}

/// Runs the selected layers and prints the summary; returns whether everything passed.
pub fn run_tests(options: &TestOptions) -> bool {
    let started = Instant::now();
    let layers: Vec<Layer> = if options.layers.is_empty() {
        Layer::ALL.to_vec()
    } else {
        Layer::ALL
            .into_iter()
            .filter(|layer| options.layers.contains(layer))
            .collect()
    };
    let filter = options.filter.as_deref();

    // Build the kernel once, before anything else, if some layer boots it.
    let setup = if layers.iter().any(|layer| layer.boots_kernel()) {
        println!("== kernel build");
        match prepare_boot(options.verbose) {
            Ok(setup) => Some(setup),
            Err(error) => {
                println!("kernel build ... FAILED ({error:#})");
                None
            }
        }
    } else {
        None
    };

    // The booting layers run under TCG everywhere and, where KVM works, under KVM too.
    let kvm = setup.as_ref().and_then(|setup| {
        match qemu::kvm_usable(&setup.qemu, Machine::Microvm) {
            Ok(()) => match kvm_ring0_emulated(setup) {
                Ok(emulated) => {
                    println!(
                        "== kvm: usable, so the booting layers also run under KVM{}",
                        if emulated {
                            " (this KVM emulates the guest's ring 0: the slowest checks stay TCG-only)"
                        } else {
                            ""
                        }
                    );
                    Some(BootSetup {
                        accel: Accel::Kvm,
                        ring0_emulated: emulated,
                        ..setup.clone()
                    })
                }
                Err(e) => {
                    println!("== kvm: usable, but the kernel did not boot under it ({e:#})");
                    Some(BootSetup {
                        accel: Accel::Kvm,
                        ..setup.clone()
                    })
                }
            },
            Err(why) => {
                println!("== kvm: not usable ({why}); the booting layers run under TCG only");
                None
            }
        }
    });

    let mut results = Vec::new();
    for layer in layers {
        println!("== {layer}");
        let tally = match (layer, &setup) {
            (Layer::Lint, _) => host_checks::lint(),
            (Layer::Host, _) => host_checks::unit_tests(filter),
            (Layer::Ktest, Some(setup)) => {
                let mut tally = ktest::run(setup, filter);
                if let Some(kvm) = &kvm {
                    tally.add(ktest::run(kvm, filter));
                }
                tally
            }
            (Layer::E2e, Some(setup)) => {
                let mut tally = e2e::run(setup, filter);
                if let Some(kvm) = &kvm {
                    tally.add(e2e::run(kvm, filter));
                }
                tally
            }
            (Layer::Ktest | Layer::E2e, None) => {
                println!("{layer} ... FAILED (no kernel to boot)");
                Tally {
                    passed: 0,
                    failed: 1,
                }
            }
        };
        results.push((layer, tally));
    }

    let mut total = Tally::default();
    println!("== summary ({:.0} s)", started.elapsed().as_secs_f64());
    for (layer, tally) in &results {
        println!(
            "  {layer:<6} passed {:>4}   failed {:>3}",
            tally.passed, tally.failed
        );
        total.add(*tally);
    }
    println!("xtask: {} passed, {} failed", total.passed, total.failed);
    total.failed == 0
}

/// Finds (or installs) QEMU, builds the kernel and packs the initrd.
fn prepare_boot(verbose: bool) -> anyhow::Result<BootSetup> {
    let qemu = host_deps::ensure_qemu()?;
    let kernel = kernel_build::build_kernel()?;
    let initrd = initrd::pack_initrd()?;
    Ok(BootSetup {
        qemu,
        kernel,
        initrd,
        verbose,
        accel: Accel::Tcg,
        ring0_emulated: false,
    })
}

/// Boots the kernel once under KVM to its banner and reads whether ring 0 is emulated.
fn kvm_ring0_emulated(setup: &BootSetup) -> anyhow::Result<bool> {
    let mut config = crate::qemu::QemuConfig::new(&setup.kernel);
    config.qemu = setup.qemu.clone();
    config.use_accel(Accel::Kvm);
    config.smp = 1;
    config.append = "mode=run".to_owned();
    let mut run = crate::qemu_run::QemuRun::spawn(&config, None)?;
    let line = run.wait_for_line(
        |line| line.starts_with(crate::serial_log::SYSCALL_LINE),
        std::time::Duration::from_secs(120),
    );
    run.kill();
    match line {
        Ok(line) => Ok(line.contains(crate::serial_log::RING0_EMULATED)),
        Err(e) => anyhow::bail!("no SYSCALL line in the banner: {e:?}\n{}", run.log_tail(10)),
    }
}
