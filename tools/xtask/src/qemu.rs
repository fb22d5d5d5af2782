//! The QEMU command line as typed values: a [`QemuConfig`] turns into a `std::process::Command`.
//!
//! TCG is the default [`Accel`]; `cargo xtask run` asks for KVM where [`kvm_usable`] finds it,
//! `cargo xtask test` runs its boots under both, and `bench --accel kvm` under KVM
//! ([`QemuConfig::use_accel`] picks the CPU model that goes with each). Every run never reboots (a triple fault ends QEMU), has no display, and
//! has the `isa-debug-exit` device through which the kernel ends QEMU with [`EXIT_SUCCESS`] or
//! [`EXIT_FAILURE`]. Supervising a started QEMU is `qemu_run`'s job.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::host_deps::QEMU_BINARY;

/// QEMU's exit status when the kernel reports success (it writes 0x10 to port 0xf4:
/// `(0x10 << 1) | 1`).
pub const EXIT_SUCCESS: i32 = 33;
/// QEMU's exit status when the kernel reports failure (it writes 0x11 to port 0xf4).
pub const EXIT_FAILURE: i32 = 35;
/// The I/O port of the `isa-debug-exit` device.
pub const DEBUG_EXIT_IOBASE: u16 = 0xf4;

/// The emulated board.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Machine {
    /// `-M microvm`: minimal board with virtio-mmio, fastest boot (default for tests).
    #[default]
    Microvm,
    /// `-M q35`: PC with PCI (needed for ivshmem).
    Q35,
}

impl fmt::Display for Machine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Machine::Microvm => "microvm",
            Machine::Q35 => "q35",
        })
    }
}

/// The accelerator (`-accel`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Accel {
    /// TCG, QEMU's emulator: every host, deterministic with icount (the benchmarks' reference;
    /// every test runs under it).
    #[default]
    Tcg,
    /// KVM, hardware virtualisation: needs a usable `/dev/kvm`.
    Kvm,
}

impl fmt::Display for Accel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Accel::Tcg => "tcg",
            Accel::Kvm => "kvm",
        })
    }
}

/// The KVM device.
pub const KVM_DEVICE: &str = "/dev/kvm";

/// The CPU model of KVM guests: the host's CPU without the `IA32_ARCH_CAPABILITIES` MSR
/// (0x10a). The KVM of some hosts refuses QEMU 7.2's write of that MSR when the vCPU starts
/// (`failed to set MSR 0x10a`, then an assertion), and Fjord does not read it: it lists the
/// CPU's speculative-execution fixes, for an OS choosing its mitigations.
pub const KVM_CPU: &str = "host,-arch-capabilities";

/// Whether this host can run `machine` under KVM: `/dev/kvm` opens read-write, `qemu` lists `kvm`
/// among its accelerators, and QEMU, started paused with `-accel kvm -cpu` [`KVM_CPU`], quits cleanly
/// (under some nested hypervisors the first two pass but QEMU aborts setting up the vCPU). `Err`
/// says why not, in a few words.
pub fn kvm_usable(qemu: &Path, machine: Machine) -> Result<(), String> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(KVM_DEVICE)
        .map_err(|e| format!("cannot open {KVM_DEVICE}: {e}"))?;
    let output = Command::new(qemu)
        .args(["-accel", "help"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run `{} -accel help`: {e}", qemu.display()))?;
    if !accelerators_include_kvm(&String::from_utf8_lossy(&output.stdout)) {
        return Err(format!("{} was built without KVM", qemu.display()));
    }
    kvm_trial(qemu, machine)
}

/// Starts QEMU paused under KVM with its monitor on stdin, tells it to quit, and judges the exit.
fn kvm_trial(qemu: &Path, machine: Machine) -> Result<(), String> {
    use std::io::{Read, Write};
    let config = QemuConfig {
        machine,
        ..QemuConfig::new("")
    };
    let mut child = Command::new(qemu)
        .args([
            "-M",
            &config.machine_arg(),
            "-accel",
            "kvm",
            "-cpu",
            KVM_CPU,
            "-m",
            "64M",
        ])
        .args(["-nodefaults", "-display", "none", "-serial", "none", "-S"])
        .args(["-monitor", "stdio"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", qemu.display()))?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(b"quit\n");
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err("QEMU under KVM did not quit within 10 s".to_owned());
            }
        }
    };
    if status.success() {
        return Ok(());
    }
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        let _ = pipe.read_to_string(&mut stderr);
    }
    Err(kvm_trial_failure(&stderr))
}

/// The reason in QEMU's messages when the KVM trial failed: its first message, without the
/// program name.
fn kvm_trial_failure(stderr: &str) -> String {
    stderr
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with("(qemu)") && !l.starts_with("QEMU "))
        .map(|l| {
            let l = l.split_once(": ").map_or(l, |(program, rest)| {
                if program.starts_with("qemu-system") {
                    rest
                } else {
                    l
                }
            });
            format!("QEMU cannot start a KVM guest here: {l}")
        })
        .unwrap_or_else(|| "QEMU cannot start a KVM guest here".to_owned())
}

/// Whether the output of `qemu-system-x86_64 -accel help` lists `kvm`.
pub fn accelerators_include_kvm(help: &str) -> bool {
    help.lines().any(|line| line.trim() == "kvm")
}

/// What `cargo xtask run` boots with: KVM when asked for (`--accel kvm`) or when `auto` and the
/// probe found it usable, TCG otherwise. icount needs TCG. The message, if any, is the one line
/// to print about the choice.
pub fn choose_accel(
    requested: Option<Accel>,
    icount: bool,
    probe: impl FnOnce() -> Result<(), String>,
) -> (Accel, Option<String>) {
    match requested {
        Some(Accel::Tcg) => (Accel::Tcg, None),
        Some(Accel::Kvm) if icount => (
            Accel::Tcg,
            Some("KVM cannot count instructions (--icount); using TCG".to_owned()),
        ),
        Some(Accel::Kvm) => (Accel::Kvm, None),
        None if icount => (Accel::Tcg, None),
        None => match probe() {
            Ok(()) => (Accel::Kvm, None),
            Err(why) => (
                Accel::Tcg,
                Some(format!("KVM not available ({why}); using TCG")),
            ),
        },
    }
}

/// Options of the microvm board.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MicrovmOptions {
    /// Describe the board with ACPI tables (MADT for CPUs, DSDT for virtio-mmio devices). With
    /// ACPI off, QEMU appends `virtio_mmio.device=…` to the kernel command line instead.
    pub acpi: bool,
}

impl Default for MicrovmOptions {
    fn default() -> Self {
        MicrovmOptions { acpi: true }
    }
}

/// A host port forwarded to a guest port over QEMU user networking (TCP, host side bound to
/// 127.0.0.1 only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostForward {
    /// Port on the host (127.0.0.1).
    pub host: u16,
    /// Port in the guest.
    pub guest: u16,
}

/// An extra device attached to the VM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Device {
    /// A virtio-net NIC on QEMU's user-mode network (slirp), with TCP port forwards.
    UserNet {
        /// Host-to-guest TCP port forwards.
        hostfwd: Vec<HostForward>,
    },
    /// A virtio-net NIC on an existing host tap interface (no helper scripts).
    TapNet {
        /// The host interface's name.
        ifname: String,
    },
    /// A virtio-blk disk backed by a raw host image file.
    Disk {
        /// The image file (its size is the disk's).
        image: PathBuf,
    },
    /// An `ivshmem-plain` PCI device backed by a shared host file (emulated CXL memory; q35 only).
    Ivshmem {
        /// The host file shared between VMs (e.g. under `/dev/shm`).
        mem_path: PathBuf,
        /// Size of the shared region in MiB (a power of two).
        size_mib: u64,
    },
}

/// Why a [`QemuConfig`] cannot be turned into a command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// The device needs a bus the machine does not have.
    DeviceNeedsPci(&'static str),
    /// Fewer than one CPU or no memory.
    NoResources,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::DeviceNeedsPci(device) => {
                write!(f, "{device} needs PCI: use `--machine q35`")
            }
            ConfigError::NoResources => f.write_str("a VM needs at least one CPU and some memory"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Everything that decides how QEMU is started.
#[derive(Clone, Debug, PartialEq)]
pub struct QemuConfig {
    /// The QEMU program (default `qemu-system-x86_64`, found on `PATH`).
    pub qemu: PathBuf,
    /// The board.
    pub machine: Machine,
    /// Board options used when `machine` is microvm.
    pub microvm: MicrovmOptions,
    /// The accelerator, default TCG.
    pub accel: Accel,
    /// CPU model (`-cpu`), default `max` (`host` goes with KVM).
    pub cpu: String,
    /// Number of vCPUs (`-smp`).
    pub smp: u32,
    /// Guest RAM in MiB (`-m`).
    pub memory_mib: u32,
    /// The kernel ELF (PVH) loaded with `-kernel`.
    pub kernel: PathBuf,
    /// The initrd (cpio newc archive) loaded with `-initrd`, if any.
    pub initrd: Option<PathBuf>,
    /// The kernel command line (`-append`); omitted when empty.
    pub append: String,
    /// Deterministic instruction counting: `-icount shift=0,sleep=off -seed 1 -rtc base=…`.
    pub icount: bool,
    /// Serial console and monitor on the terminal (Ctrl-A X quits); otherwise the serial output is
    /// a pipe for the caller to read and there is no monitor.
    pub interactive: bool,
    /// Extra devices.
    pub devices: Vec<Device>,
    /// QEMU's monitor on this Unix socket (non-interactive runs; otherwise the path in
    /// `FJORD_QEMU_MONITOR`, if set, or none).
    pub monitor: Option<PathBuf>,
    /// QEMU's log of translated blocks (`-d in_asm,nochain -D <path>`): each block's
    /// instructions when it is translated, and with chaining off every execution can be logged
    /// (`log in_asm,exec,nochain` from the monitor), as `cargo xtask profile` does.
    pub trace_log: Option<PathBuf>,
}

impl QemuConfig {
    /// A configuration with the defaults (microvm with ACPI, TCG, `-cpu max`, 1 CPU, 512 MiB, no
    /// initrd, empty command line, no icount, not interactive, no devices).
    pub fn new(kernel: impl Into<PathBuf>) -> Self {
        QemuConfig {
            qemu: PathBuf::from(QEMU_BINARY),
            machine: Machine::Microvm,
            microvm: MicrovmOptions::default(),
            accel: Accel::Tcg,
            cpu: "max".to_owned(),
            smp: 1,
            memory_mib: 512,
            kernel: kernel.into(),
            initrd: None,
            append: String::new(),
            icount: false,
            interactive: false,
            devices: Vec::new(),
            monitor: None,
            trace_log: None,
        }
    }

    /// Sets the accelerator and the CPU model that goes with it: the host's CPU under KVM,
    /// QEMU's `max` model under TCG.
    pub fn use_accel(&mut self, accel: Accel) {
        self.accel = accel;
        self.cpu = match accel {
            Accel::Kvm => KVM_CPU,
            Accel::Tcg => "max",
        }
        .to_owned();
    }

    /// The QEMU arguments (without the program name).
    pub fn args(&self) -> Result<Vec<OsString>, ConfigError> {
        if self.smp == 0 || self.memory_mib == 0 {
            return Err(ConfigError::NoResources);
        }
        let mut args = Args::default();
        args.pair("-M", self.machine_arg());
        args.pair("-accel", self.accel.to_string());
        args.pair("-cpu", &self.cpu);
        args.pair("-smp", self.smp.to_string());
        args.pair("-m", format!("{}M", self.memory_mib));
        // Only the devices asked for: no default NIC, VGA, floppy or CD-ROM.
        args.flag("-nodefaults");
        args.pair("-display", "none");
        args.flag("-no-reboot");
        args.pair(
            "-device",
            format!("isa-debug-exit,iobase={DEBUG_EXIT_IOBASE:#x},iosize=0x04"),
        );
        if self.interactive {
            // Serial and monitor multiplexed on the terminal: Ctrl-A X quits, Ctrl-A C switches.
            args.pair("-serial", "mon:stdio");
        } else {
            args.pair("-serial", "stdio");
            let from_env = std::env::var("FJORD_QEMU_MONITOR")
                .ok()
                .filter(|p| !p.is_empty())
                .map(PathBuf::from);
            match self.monitor.clone().or(from_env) {
                Some(path) => {
                    args.pair("-monitor", format!("unix:{},server,nowait", path.display()))
                }
                None => args.pair("-monitor", "none"),
            }
        }
        if let Some(log) = &self.trace_log {
            args.pair("-d", "in_asm,nochain");
            args.pair("-D", log.clone());
        }
        if self.icount {
            args.pair("-icount", "shift=0,sleep=off");
            args.pair("-seed", "1");
            args.pair("-rtc", "base=2024-01-01T00:00:00,clock=vm");
        }
        args.pair("-kernel", self.kernel.clone());
        if let Some(initrd) = &self.initrd {
            args.pair("-initrd", initrd.clone());
        }
        if !self.append.is_empty() {
            args.pair("-append", &self.append);
        }
        for (index, device) in self.devices.iter().enumerate() {
            self.device_args(&mut args, index, device)?;
        }
        Ok(args.0)
    }

    /// The command that starts QEMU. Interactive runs inherit the terminal; the others have stdin
    /// from `/dev/null` and the serial output (stdout) and QEMU's messages (stderr) piped.
    pub fn command(&self) -> Result<Command, ConfigError> {
        let mut command = Command::new(&self.qemu);
        command.args(self.args()?);
        if self.interactive {
            command
                .stdin(Stdio::inherit())
                .stdout(Stdio::inherit())
                .stderr(Stdio::inherit());
        } else {
            command
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
        }
        Ok(command)
    }

    /// The `-M` value.
    fn machine_arg(&self) -> String {
        match self.machine {
            Machine::Microvm => {
                format!("microvm,acpi={}", on_off(self.microvm.acpi))
            }
            Machine::Q35 => "q35".to_owned(),
        }
    }

    /// The `-device` value of the virtio-net card on netdev `net<index>`, on the machine's bus.
    fn nic_arg(&self, index: usize) -> String {
        let nic = match self.machine {
            Machine::Microvm => "virtio-net-device",
            Machine::Q35 => "virtio-net-pci",
        };
        format!("{nic},netdev=net{index}")
    }

    /// Appends the arguments of one extra device; `index` makes QEMU ids unique.
    fn device_args(
        &self,
        args: &mut Args,
        index: usize,
        device: &Device,
    ) -> Result<(), ConfigError> {
        match device {
            Device::UserNet { hostfwd } => {
                let mut netdev = format!("user,id=net{index}");
                for forward in hostfwd {
                    netdev.push_str(&format!(
                        ",hostfwd=tcp:127.0.0.1:{}-:{}",
                        forward.host, forward.guest
                    ));
                }
                args.pair("-netdev", netdev);
                args.pair("-device", self.nic_arg(index));
            }
            Device::TapNet { ifname } => {
                args.pair(
                    "-netdev",
                    format!("tap,id=net{index},ifname={ifname},script=no,downscript=no"),
                );
                args.pair("-device", self.nic_arg(index));
            }
            Device::Disk { image } => {
                let mut drive = OsString::from(format!("if=none,id=disk{index},format=raw,file="));
                drive.push(image);
                args.pair("-drive", drive);
                let blk = match self.machine {
                    Machine::Microvm => "virtio-blk-device",
                    Machine::Q35 => "virtio-blk-pci",
                };
                args.pair("-device", format!("{blk},drive=disk{index}"));
            }
            Device::Ivshmem { mem_path, size_mib } => {
                if self.machine != Machine::Q35 {
                    return Err(ConfigError::DeviceNeedsPci("ivshmem"));
                }
                let mut object = OsString::from(format!(
                    "memory-backend-file,id=shm{index},share=on,size={size_mib}M,mem-path="
                ));
                object.push(mem_path);
                args.pair("-object", object);
                args.pair("-device", format!("ivshmem-plain,memdev=shm{index}"));
            }
        }
        Ok(())
    }
}

/// QEMU's spelling of a boolean property.
fn on_off(value: bool) -> &'static str {
    if value { "on" } else { "off" }
}

/// An argument list under construction.
#[derive(Default)]
struct Args(Vec<OsString>);

impl Args {
    /// Adds an option without a value.
    fn flag(&mut self, option: &str) {
        self.0.push(option.into());
    }

    /// Adds an option and its value.
    fn pair(&mut self, option: &str, value: impl Into<OsString>) {
        self.0.push(option.into());
        self.0.push(value.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rendered(config: &QemuConfig) -> String {
        config
            .args()
            .unwrap()
            .iter()
            .map(|arg| arg.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn default_microvm_command_line() {
        let mut config = QemuConfig::new("/k/fjord-kernel");
        config.smp = 2;
        config.append = "mode=test".into();
        assert_eq!(
            rendered(&config),
            "-M microvm,acpi=on -accel tcg -cpu max -smp 2 -m 512M -nodefaults -display none \
             -no-reboot -device isa-debug-exit,iobase=0xf4,iosize=0x04 -serial stdio \
             -monitor none -kernel /k/fjord-kernel -append mode=test"
        );
    }

    #[test]
    fn append_is_one_argument() {
        let mut config = QemuConfig::new("k");
        config.append = "mode=run log=debug".into();
        let args = config.args().unwrap();
        let at = args.iter().position(|arg| arg == "-append").unwrap();
        assert_eq!(args[at + 1], "mode=run log=debug");
    }

    #[test]
    fn interactive_q35_with_icount_and_initrd() {
        let mut config = QemuConfig::new("k");
        config.machine = Machine::Q35;
        config.smp = 4;
        config.memory_mib = 1024;
        config.icount = true;
        config.interactive = true;
        config.initrd = Some("initrd.cpio".into());
        let line = rendered(&config);
        assert!(line.starts_with("-M q35 -accel tcg "), "{line}");
        assert!(line.contains("-smp 4 -m 1024M"), "{line}");
        assert!(line.contains("-serial mon:stdio"), "{line}");
        assert!(!line.contains("-monitor"), "{line}");
        assert!(!line.contains("-nographic"), "{line}");
        assert!(
            line.contains(
                "-icount shift=0,sleep=off -seed 1 -rtc base=2024-01-01T00:00:00,clock=vm"
            ),
            "{line}"
        );
        assert!(line.ends_with("-kernel k -initrd initrd.cpio"), "{line}");
    }

    #[test]
    fn microvm_without_acpi() {
        let mut config = QemuConfig::new("k");
        config.microvm.acpi = false;
        assert!(rendered(&config).starts_with("-M microvm,acpi=off "));
    }

    #[test]
    fn user_net_uses_the_machine_bus() {
        let mut config = QemuConfig::new("k");
        config.devices.push(Device::UserNet {
            hostfwd: vec![HostForward {
                host: 8080,
                guest: 80,
            }],
        });
        let line = rendered(&config);
        assert!(
            line.contains("-netdev user,id=net0,hostfwd=tcp:127.0.0.1:8080-:80"),
            "{line}"
        );
        assert!(
            line.contains("-device virtio-net-device,netdev=net0"),
            "{line}"
        );
        config.machine = Machine::Q35;
        assert!(rendered(&config).contains("-device virtio-net-pci,netdev=net0"));
    }

    #[test]
    fn tap_net_has_no_scripts_and_the_same_card() {
        let mut config = QemuConfig::new("k");
        config.devices.push(Device::TapNet {
            ifname: "fjtap42".into(),
        });
        let line = rendered(&config);
        assert!(
            line.contains(
                "-netdev tap,id=net0,ifname=fjtap42,script=no,downscript=no \
                 -device virtio-net-device,netdev=net0"
            ),
            "{line}"
        );
        config.machine = Machine::Q35;
        assert!(rendered(&config).contains("-device virtio-net-pci,netdev=net0"));
    }

    #[test]
    fn a_disk_is_a_raw_drive_on_the_machines_virtio_blk() {
        let mut config = QemuConfig::new("k");
        config.devices.push(Device::Disk {
            image: "/tmp/d.img".into(),
        });
        let line = rendered(&config);
        assert!(
            line.contains(
                "-drive if=none,id=disk0,format=raw,file=/tmp/d.img \
                 -device virtio-blk-device,drive=disk0"
            ),
            "{line}"
        );
        config.machine = Machine::Q35;
        assert!(rendered(&config).contains("-device virtio-blk-pci,drive=disk0"));
    }

    #[test]
    fn ivshmem_needs_q35() {
        let mut config = QemuConfig::new("k");
        config.devices.push(Device::Ivshmem {
            mem_path: "/dev/shm/cxl".into(),
            size_mib: 64,
        });
        assert_eq!(config.args(), Err(ConfigError::DeviceNeedsPci("ivshmem")));
        config.machine = Machine::Q35;
        let line = rendered(&config);
        assert!(
            line.contains(
                "-object memory-backend-file,id=shm0,share=on,size=64M,mem-path=/dev/shm/cxl \
                 -device ivshmem-plain,memdev=shm0"
            ),
            "{line}"
        );
    }

    #[test]
    fn kvm_accel_and_host_cpu() {
        let mut config = QemuConfig::new("k");
        config.accel = Accel::Kvm;
        config.cpu = KVM_CPU.into();
        assert!(
            rendered(&config)
                .starts_with("-M microvm,acpi=on -accel kvm -cpu host,-arch-capabilities ")
        );
    }

    #[test]
    fn accel_help_lists_kvm() {
        assert!(accelerators_include_kvm(
            "Accelerators supported in QEMU binary:\ntcg\nkvm\n"
        ));
        assert!(!accelerators_include_kvm(
            "Accelerators supported in QEMU binary:\ntcg\n"
        ));
        assert!(!accelerators_include_kvm(""));
    }

    #[test]
    fn kvm_trial_failure_names_qemus_reason() {
        assert_eq!(
            kvm_trial_failure(
                "qemu-system-x86_64: error: failed to set MSR 0x10a to 0x69\n\
                 qemu-system-x86_64: ../../target/i386/kvm/kvm.c:3183: kvm_buf_set_msrs: \
                 Assertion failed.\n"
            ),
            "QEMU cannot start a KVM guest here: error: failed to set MSR 0x10a to 0x69"
        );
        assert_eq!(kvm_trial_failure(""), "QEMU cannot start a KVM guest here");
    }

    /// On this host, whatever it has: the probe answers within its time limit, and a refusal
    /// says why.
    #[test]
    fn kvm_probe_answers() {
        let Some(qemu) = crate::host_deps::find_on_path(QEMU_BINARY) else {
            eprintln!("QEMU not installed: skipping");
            return;
        };
        match kvm_usable(&qemu, Machine::Microvm) {
            Ok(()) => eprintln!("KVM usable"),
            Err(why) => assert!(!why.is_empty()),
        }
    }

    #[test]
    fn kvm_is_chosen_only_when_usable() {
        let usable = || Ok(());
        let missing = || Err("cannot open /dev/kvm: No such file or directory".to_owned());
        assert_eq!(choose_accel(None, false, usable), (Accel::Kvm, None));
        let (accel, note) = choose_accel(None, false, missing);
        assert_eq!(accel, Accel::Tcg);
        assert_eq!(
            note.as_deref(),
            Some("KVM not available (cannot open /dev/kvm: No such file or directory); using TCG")
        );
        // An explicit choice skips the probe.
        let never = || -> Result<(), String> { panic!("probed") };
        assert_eq!(
            choose_accel(Some(Accel::Tcg), false, never),
            (Accel::Tcg, None)
        );
        assert_eq!(
            choose_accel(Some(Accel::Kvm), false, never),
            (Accel::Kvm, None)
        );
        // icount needs TCG.
        assert_eq!(choose_accel(None, true, never), (Accel::Tcg, None));
        assert_eq!(choose_accel(Some(Accel::Kvm), true, never).0, Accel::Tcg);
    }

    #[test]
    fn zero_cpus_is_rejected() {
        let mut config = QemuConfig::new("k");
        config.smp = 0;
        assert_eq!(config.args(), Err(ConfigError::NoResources));
    }
}
