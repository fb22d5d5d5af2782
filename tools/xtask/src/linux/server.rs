//! The Linux guest as a network server: the peer of Fjord's `redis` and `prefork` programs in
//! `cargo xtask bench redis` and `bench prefork`.
//!
//! The guest is Debian's kernel (`kernel_pkg`) with its virtio-net modules, on a virtio-net
//! card attached to a host tap link ([`TapNet`], inside xtask's own network namespace), and an
//! initramfs holding busybox, one server from Debian's packages and the shared libraries `ldd`
//! names for it: `redis-server` (7.0, the host's installed package, the same binary the e2e
//! tests compare against) or `nginx` (1.22, `apt-get download`ed and unpacked, never installed
//! on the host). `/init` loads the modules, gives the card the link's guest address, starts the
//! server, prints [`READY_LINE`] and waits. The host drives the server over the link and kills
//! the VM when done.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use super::kernel_pkg;
use crate::cpio::CpioWriter;
use crate::qemu::{Device, Machine, QemuConfig};
use crate::qemu_run::QemuRun;
use crate::tap::TapNet;
use crate::{host_deps, workspace};

/// What `/init` prints once the server is started.
pub const READY_LINE: &str = "LSERVER ready";
/// The port both servers listen on for HTTP (Fjord's prefork server's port).
pub const HTTP_PORT: u16 = 8000;
/// Redis's port.
pub const REDIS_PORT: u16 = 6379;
/// How long the guest may take from QEMU's start to [`READY_LINE`].
const BOOT_LIMIT: Duration = Duration::from_secs(180);

/// A server the Linux guest can run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Server {
    /// Debian's `redis-server` on [`REDIS_PORT`], without persistence configured (BGSAVE writes
    /// `/tmp/dump.rdb`, in the initramfs's RAM file system).
    Redis,
    /// Debian's `nginx` on [`HTTP_PORT`] with `workers` worker processes, serving `page` at `/`
    /// and naming the worker process that answered at `/worker`, as Fjord's prefork server does.
    Nginx {
        /// Worker processes.
        workers: u32,
        /// The static page.
        page: Vec<u8>,
    },
}

/// The Linux guest's QEMU settings for a server run: microvm, `-cpu max`, `smp` vCPUs,
/// `memory_mib`, TCG without icount (the host's load generator measures wall time).
#[derive(Clone, Debug)]
pub struct ServerBoot<'a> {
    /// The QEMU binary.
    pub qemu: &'a Path,
    /// vCPUs.
    pub smp: u32,
    /// Guest RAM.
    pub memory_mib: u32,
    /// The tap link the card is attached to (the guest takes its guest address).
    pub net: &'a TapNet,
    /// Print every serial line, prefixed with `[linux] `.
    pub echo: bool,
}

/// Boots the Linux guest running `server` and returns it once the server is started.
pub fn boot(server: &Server, how: &ServerBoot<'_>) -> Result<QemuRun> {
    let cache = workspace::target_dir().join("linux-guest");
    let kernel = kernel_pkg::ensure_kernel(&cache)?;
    let busybox = kernel_pkg::ensure_busybox(&cache)?;
    let modules = kernel_pkg::ensure_net_modules(&cache, &kernel)?;
    let binary = match server {
        Server::Redis => host_deps::ensure_program("redis-server", "redis-server")?,
        Server::Nginx { .. } => {
            kernel_pkg::ensure_package_file(&cache, "nginx", "/usr/sbin/nginx")?
        }
    };
    let mut cpio = CpioWriter::new();
    for dir in [
        "proc", "sys", "dev", "tmp", "etc", "bin", "lib", "var", "www",
    ] {
        cpio.dir(dir, 0o755)?;
    }
    cpio.char_device("dev/console", 0o600, 5, 1)?;
    cpio.char_device("dev/null", 0o666, 1, 3)?;
    cpio.file("bin/busybox", 0o755, &read(&busybox)?)?;
    let mut names = Vec::new();
    for module in &modules {
        let name = module
            .file_name()
            .and_then(|n| n.to_str())
            .context("module without a name")?;
        cpio.file(&format!("lib/{name}"), 0o644, &read(module)?)?;
        names.push(name.to_owned());
    }
    for lib in shared_libraries(&binary)? {
        let inside = lib.to_str().context("library path is not UTF-8")?;
        cpio.file(inside.trim_start_matches('/'), 0o755, &read(&lib)?)?;
    }
    cpio.file("etc/passwd", 0o644, b"root:x:0:0:root:/:/bin/sh\n")?;
    cpio.file("etc/group", 0o644, b"root:x:0:\n")?;
    let command = match server {
        Server::Redis => {
            cpio.file("bin/redis-server", 0o755, &read(&binary)?)?;
            format!(
                "/bin/redis-server --port {REDIS_PORT} --bind 0.0.0.0 --protected-mode no \
                 --save '' --appendonly no --dir /tmp --daemonize yes --logfile /tmp/redis.log"
            )
        }
        Server::Nginx { workers, page } => {
            cpio.file("bin/nginx", 0o755, &read(&binary)?)?;
            cpio.file("www/index.html", 0o644, page)?;
            cpio.file("etc/nginx.conf", 0o644, nginx_conf(*workers).as_bytes())?;
            "/bin/busybox mkdir -p /var/lib/nginx /var/log/nginx && /bin/nginx -c /etc/nginx.conf"
                .to_owned()
        }
    };
    cpio.file(
        "init",
        0o755,
        init_script(&names, how.net, &command).as_bytes(),
    )?;
    let initrd = cache.join("server-initramfs.cpio");
    std::fs::write(&initrd, cpio.finish())
        .with_context(|| format!("writing {}", initrd.display()))?;

    let mut config = QemuConfig::new(&kernel.image);
    config.qemu = how.qemu.to_path_buf();
    config.machine = Machine::Microvm;
    config.cpu = "max".to_owned();
    config.smp = how.smp;
    config.memory_mib = how.memory_mib;
    config.icount = false;
    config.initrd = Some(initrd);
    // `tsc=reliable`: without it the kernel finds the TSC unstable under TCG and times with
    // 4 ms jiffies, which Redis's `latest_fork_usec` would show.
    config.append = format!(
        "{} tsc_early_khz={} tsc=reliable",
        super::KERNEL_CMDLINE,
        host_tsc_khz()
    );
    config.devices.push(Device::TapNet {
        ifname: how.net.ifname.clone(),
    });
    let mut vm = QemuRun::spawn(&config, how.echo.then(|| "[linux] ".to_owned()))?;
    if let Err(e) = vm.wait_for_line(|l| l.contains(READY_LINE), BOOT_LIMIT) {
        let tail = vm.log_tail(30);
        vm.kill();
        bail!("the Linux guest's server did not start: {e}\n{tail}");
    }
    Ok(vm)
}

/// nginx's configuration: `workers` worker processes (as root: the initramfs has no other
/// user), no logs, `/` from `/www`, `/worker` answering with the worker's PID, no limit on
/// requests per connection (as Fjord's server). `sendfile off` and `open_file_cache` served
/// the static page fastest in this guest of the settings tried (Debian's `sendfile on;
/// tcp_nopush on;` about 40 % slower).
pub fn nginx_conf(workers: u32) -> String {
    format!(
        "user root;\n\
         worker_processes {workers};\n\
         pid /tmp/nginx.pid;\n\
         error_log stderr;\n\
         events {{ worker_connections 1024; }}\n\
         http {{\n\
         \x20 access_log off;\n\
         \x20 sendfile off;\n\
         \x20 open_file_cache max=100;\n\
         \x20 default_type text/html;\n\
         \x20 keepalive_requests 1000000;\n\
         \x20 server {{\n\
         \x20   listen {HTTP_PORT} backlog=128;\n\
         \x20   root /www;\n\
         \x20   location = /worker {{ default_type text/plain; return 200 \"worker $pid\\n\"; }}\n\
         \x20 }}\n\
         }}\n"
    )
}

/// The `/init` script: load `modules` (in order), bring up loopback and `eth0` with the link's
/// guest address, run `command`, print [`READY_LINE`], wait.
pub fn init_script(modules: &[String], net: &TapNet, command: &str) -> String {
    let mut s = String::from(
        "#!/bin/busybox sh\n\
         # Generated by `cargo xtask bench` (tools/xtask/src/linux/server.rs).\n\
         bb=/bin/busybox\n\
         $bb mount -t proc proc /proc\n\
         $bb mount -t sysfs sysfs /sys\n",
    );
    for m in modules {
        s.push_str(&format!(
            "$bb insmod /lib/{m} || echo \"LFAIL insmod {m}\"\n"
        ));
    }
    s.push_str(&format!(
        "$bb ip link set lo up\n\
         $bb ip link set eth0 up\n\
         $bb ip addr add {}/24 dev eth0\n\
         $bb ip route add default via {}\n\
         {command} || echo \"LFAIL {command}\"\n\
         echo \"{READY_LINE}\"\n\
         while true; do $bb sleep 3600; done\n",
        net.guest, net.host
    ));
    s
}

/// The shared libraries `ldd` says `binary` loads (the dynamic loader included), as absolute
/// host paths, each once; fails if one is missing on the host.
fn shared_libraries(binary: &Path) -> Result<Vec<PathBuf>> {
    let out = Command::new("ldd")
        .arg(binary)
        .output()
        .context("could not run ldd")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!("ldd {} failed: {text}", binary.display());
    }
    let libs = parse_ldd(&text).map_err(|missing| {
        anyhow::anyhow!(
            "{} needs {missing}, which this host lacks",
            binary.display()
        )
    })?;
    Ok(libs.into_iter().collect())
}

/// The library paths in `ldd`'s output, or the first library it could not find.
pub fn parse_ldd(text: &str) -> Result<BTreeSet<PathBuf>, String> {
    let mut libs = BTreeSet::new();
    for line in text.lines() {
        let line = line.trim();
        if line.contains("not found") {
            return Err(line.split_whitespace().next().unwrap_or(line).to_owned());
        }
        let path = match line.split_once("=>") {
            Some((_, right)) => right.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(path) = path.filter(|p| p.starts_with('/')) {
            libs.insert(PathBuf::from(path));
        }
    }
    Ok(libs)
}

/// The host CPU's clock in kHz (`/proc/cpuinfo`), which the guest kernel takes as its TSC
/// frequency: without icount, calibrating the TSC under TCG's jitter can hang a microvm boot.
fn host_tsc_khz() -> u64 {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("cpu MHz"))
                .and_then(|l| l.split(':').nth(1))
                .and_then(|v| v.trim().parse::<f64>().ok())
        })
        .map_or(2_000_000, |mhz| (mhz * 1000.0) as u64)
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_output_gives_every_library_once_and_names_a_missing_one() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\
                    \tlibz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x00007f5a)\n\
                    \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f5b)\n\
                    \t/lib64/ld-linux-x86-64.so.2 (0x00007f5c)\n";
        let libs = parse_ldd(text).unwrap();
        let libs: Vec<_> = libs.iter().map(|p| p.to_str().unwrap()).collect();
        assert_eq!(
            libs,
            [
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib/x86_64-linux-gnu/libz.so.1",
                "/lib64/ld-linux-x86-64.so.2"
            ]
        );
        assert_eq!(
            parse_ldd("\tlibpcre2-8.so.0 => not found\n"),
            Err("libpcre2-8.so.0".to_owned())
        );
    }

    #[test]
    fn init_loads_the_modules_in_order_then_starts_the_server() {
        let net = TapNet::new("fjtap0".to_owned(), 0);
        let s = init_script(&["a.ko".into(), "b.ko".into()], &net, "/bin/srv");
        let a = s.find("insmod /lib/a.ko").unwrap();
        let b = s.find("insmod /lib/b.ko").unwrap();
        let addr = s.find("ip addr add 10.77.0.15/24 dev eth0").unwrap();
        let srv = s.find("/bin/srv ||").unwrap();
        let ready = s.find(READY_LINE).unwrap();
        assert!(a < b && b < addr && addr < srv && srv < ready, "{s}");
    }

    #[test]
    fn nginx_runs_the_asked_workers_on_the_prefork_port() {
        let conf = nginx_conf(3);
        assert!(conf.contains("worker_processes 3;"));
        assert!(conf.contains("listen 8000 backlog=128;"));
        assert!(conf.contains("return 200 \"worker $pid\\n\""));
    }
}
