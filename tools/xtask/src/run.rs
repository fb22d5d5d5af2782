//! `cargo xtask run`: build, pack the initrd and boot Fjord with its serial console on the
//! terminal until Ctrl-A X.

use anyhow::{Context, Result, bail};

use crate::qemu::{Machine, QemuConfig};
use crate::qemu_run::QemuExit;
use crate::{host_deps, initrd, kernel_build, workspace};

/// Options of `cargo xtask run`.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The board.
    pub machine: Machine,
    /// vCPUs.
    pub smp: u32,
    /// RAM in MiB.
    pub memory_mib: u32,
    /// Extra kernel command line.
    pub append: Option<String>,
    /// Deterministic instruction counting.
    pub icount: bool,
}

/// Boots Fjord interactively.
pub fn run(options: &RunOptions) -> Result<()> {
    let qemu = host_deps::ensure_qemu()?;
    let kernel = kernel_build::build_kernel()?;
    let initrd = initrd::pack_initrd()?;
    let mut config = QemuConfig::new(kernel);
    config.qemu = qemu;
    config.machine = options.machine;
    config.smp = options.smp;
    config.memory_mib = options.memory_mib;
    config.initrd = Some(initrd);
    config.append = command_line(options.append.as_deref());
    config.icount = options.icount;
    config.interactive = true;
    let mut command = config.command()?;
    println!(
        "xtask: booting Fjord on {} with {} CPUs, {} MiB ({}); Ctrl-A X quits",
        options.machine, options.smp, options.memory_mib, config.append
    );
    let status = command
        .status()
        .with_context(|| format!("could not start `{}`", workspace::display_command(&command)))?;
    match QemuExit::from_status(status) {
        QemuExit::Success | QemuExit::Code(0) => Ok(()),
        exit => bail!("{exit}"),
    }
}

/// The kernel command line: `mode=run` unless the user chose a mode, then the user's options.
pub fn command_line(append: Option<&str>) -> String {
    let append = append.unwrap_or("").trim();
    let has_mode = append
        .split_whitespace()
        .any(|word| word.starts_with("mode="));
    match (has_mode, append.is_empty()) {
        (true, _) => append.to_owned(),
        (false, true) => "mode=run".to_owned(),
        (false, false) => format!("mode=run {append}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_run_is_the_default() {
        assert_eq!(command_line(None), "mode=run");
        assert_eq!(command_line(Some("log=debug")), "mode=run log=debug");
        assert_eq!(
            command_line(Some("mode=test test=smp")),
            "mode=test test=smp"
        );
    }
}
