//! `cargo xtask run`: build, pack the initrd and boot Fjord with its serial console on the
//! terminal until Ctrl-A X.
//!
//! It uses KVM when `/dev/kvm` and QEMU allow (`qemu::choose_accel`), TCG otherwise, and while
//! the VM runs it keeps the gateway's URL in `fn_cli::url_file()` for the `fn` and `metrics`
//! commands.

use std::net::{Ipv4Addr, SocketAddr};

use anyhow::{Context, Result, bail};

use crate::fn_cli::{self, UrlPublisher};
use crate::qemu::{self, Accel, Device, HostForward, Machine, QemuConfig};
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
    /// The accelerator; `None` means KVM if usable, else TCG.
    pub accel: Option<Accel>,
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
    let (accel, note) = qemu::choose_accel(options.accel, options.icount, || {
        qemu::kvm_usable(&config.qemu, options.machine)
    });
    if let Some(note) = note {
        println!("xtask: {note}");
    }
    config.use_accel(accel);
    let disk = crate::disk::run_image()?;
    config.devices.push(Device::Disk {
        image: disk.clone(),
    });
    let port = gateway_port();
    let mut hostfwd = vec![HostForward {
        host: port,
        guest: 80,
    }];
    let programs: Vec<HostForward> = PROGRAM_PORTS
        .iter()
        .map(|&guest| HostForward {
            host: free_port_near(guest),
            guest,
        })
        .collect();
    hostfwd.extend(programs.iter().copied());
    config.devices.push(Device::UserNet { hostfwd });
    let mut command = config.command()?;
    println!(
        "xtask: booting Fjord on {} ({}) with {} CPUs, {} MiB ({}); Ctrl-A X quits",
        options.machine, accel, options.smp, options.memory_mib, config.append
    );
    println!(
        "xtask: disk {} ({} MiB, kept between boots)",
        disk.display(),
        std::fs::metadata(&disk).map_or(0, |m| m.len() >> 20)
    );
    let url = format!("http://127.0.0.1:{port}/");
    let url_file = fn_cli::url_file();
    println!(
        "xtask: HTTP gateway at {url} once the kernel prints `fjord: http listening` \
         (saved in {} while it runs)",
        url_file.display()
    );
    for f in &programs {
        println!(
            "xtask: program port {} forwarded from 127.0.0.1:{}",
            f.guest, f.host
        );
    }
    println!("xtask:   cargo xtask fn list");
    println!("xtask:   cargo xtask fn invoke hello --data world");
    println!("xtask:   curl --data world {url}invoke/hello");
    let mut child = command
        .spawn()
        .with_context(|| format!("could not start `{}`", workspace::display_command(&command)))?;
    let publisher =
        UrlPublisher::start(url, SocketAddr::from((Ipv4Addr::LOCALHOST, port)), url_file);
    let status = child.wait().context("waiting for QEMU");
    drop(publisher);
    match QemuExit::from_status(status?) {
        QemuExit::Success | QemuExit::Code(0) => Ok(()),
        exit => bail!("{exit}"),
    }
}

/// The guest ports programs listen on that `run` forwards from the host: Redis's (the `redis`
/// program), the `tcpecho` test server's and the prefork web server's.
pub const PROGRAM_PORTS: &[u16] = &[6379, 7000, 8000];

/// `port` on the host when it is free, otherwise any free port.
fn free_port_near(port: u16) -> u16 {
    std::net::TcpListener::bind(("127.0.0.1", port))
        .or_else(|_| std::net::TcpListener::bind(("127.0.0.1", 0)))
        .and_then(|l| l.local_addr())
        .map_or(port, |a| a.port())
}

/// The host port forwarded to the gateway: 8080 when free, otherwise any free port.
fn gateway_port() -> u16 {
    free_port_near(8080)
}

/// The kernel command line: `mode=run` unless the user chose a mode, and `modules=initrd` (the
/// demo functions) unless the user chose a module source, then the user's options.
pub fn command_line(append: Option<&str>) -> String {
    let append = append.unwrap_or("").trim();
    let has = |key: &str| append.split_whitespace().any(|w| w.starts_with(key));
    let mut words = Vec::new();
    if !has("mode=") {
        words.push("mode=run");
    }
    if !has("modules=") {
        words.push("modules=initrd");
    }
    if !append.is_empty() {
        words.push(append);
    }
    words.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_run_is_the_default() {
        assert_eq!(command_line(None), "mode=run modules=initrd");
        assert_eq!(
            command_line(Some("log=debug")),
            "mode=run modules=initrd log=debug"
        );
        assert_eq!(
            command_line(Some("mode=test test=smp")),
            "modules=initrd mode=test test=smp"
        );
        assert_eq!(command_line(Some("modules=none")), "mode=run modules=none");
    }
}
