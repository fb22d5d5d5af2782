//! `cargo xtask cluster`: several Fjord VMs ("nodes") on q35 sharing one emulated CXL memory,
//! behind Debian's HAProxy.
//!
//! The shared memory is one host file under `/dev/shm` of a power-of-two size (QEMU refuses
//! others), attached to every node as an `ivshmem-plain` device: each node finds it on PCI, maps
//! it and joins the region's node table (`kernel/src/cxl/`, crate `fjord-cxl`). Each node's HTTP
//! gateway is forwarded to a loopback port of its own; HAProxy (installed by xtask like QEMU)
//! listens on one more, checks every node's health (`GET /functions` each second) and spreads
//! requests over the healthy ones, at most [`NODE_MAXCONN`] at a time per node (JBSQ at the
//! load balancer), queueing the rest. `cargo xtask cluster --stop` or Ctrl-C ends all of it and
//! removes the shared file.

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::e2e_http::free_port;
use crate::qemu::{Accel, Device, HostForward, Machine, QemuConfig};
use crate::qemu_run::QemuRun;
use crate::{host_deps, initrd, kernel_build, workspace};

/// Requests HAProxy sends one node at a time; the rest wait in HAProxy's queue.
pub const NODE_MAXCONN: u32 = 8;
/// How long a node may take to boot and open its gateway.
const BOOT_LIMIT: Duration = Duration::from_secs(120);

/// How to build a cluster.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    /// Nodes (at least 2).
    pub nodes: u32,
    /// Size of the shared region in MiB (a power of two).
    pub region_mib: u64,
    /// vCPUs per node.
    pub smp: u32,
    /// RAM per node in MiB.
    pub memory_mib: u32,
    /// The accelerator; `None` means KVM if usable, else TCG.
    pub accel: Option<Accel>,
    /// Extra kernel command line for every node.
    pub append: String,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            nodes: 2,
            region_mib: 256,
            smp: 2,
            memory_mib: 512,
            accel: None,
            append: String::new(),
        }
    }
}

impl ClusterOptions {
    /// Refuses what QEMU or the design would: fewer than two nodes, a region size that is not
    /// a power of two or is under 16 MiB.
    pub fn check(&self) -> Result<()> {
        if self.nodes < 2 {
            bail!("a cluster needs at least 2 nodes (got {})", self.nodes);
        }
        if !self.region_mib.is_power_of_two() || self.region_mib < 16 {
            bail!(
                "the shared region must be a power of two of at least 16 MiB (got {} MiB): ivshmem refuses other sizes",
                self.region_mib
            );
        }
        Ok(())
    }
}

/// One node: its VM and the loopback address of its gateway.
pub struct Node {
    /// The VM.
    pub vm: QemuRun,
    /// Its HTTP gateway, forwarded from the host.
    pub gateway: SocketAddr,
    config: QemuConfig,
}

/// A running cluster; dropping it stops every node and HAProxy and removes the shared file.
pub struct Cluster {
    /// The nodes, by index.
    pub nodes: Vec<Node>,
    /// HAProxy's frontend: the cluster's one HTTP entry point.
    pub entry: SocketAddr,
    /// The shared-memory file.
    pub region: PathBuf,
    /// HAProxy, once the nodes are up.
    haproxy: Option<Child>,
    dir: PathBuf,
    echo: bool,
}

/// What `--stop` needs to find a cluster started by another `cargo xtask cluster`.
#[derive(Debug, Serialize, Deserialize)]
struct State {
    /// The `cargo xtask cluster` process.
    xtask: u32,
    /// QEMU and HAProxy processes.
    pids: Vec<u32>,
    region: PathBuf,
    entry: String,
}

fn state_file() -> PathBuf {
    workspace::target_dir().join("cluster.json")
}

/// The HAProxy configuration for `nodes` (their gateways), listening on `entry`, with its
/// runtime API on the Unix socket `admin`.
pub fn haproxy_config(entry: SocketAddr, nodes: &[SocketAddr], admin: &Path) -> String {
    let mut cfg = format!(
        "global\n    maxconn 4096\n    stats socket {} mode 600 level admin\n\n\
         defaults\n    mode http\n    timeout connect 5s\n    timeout client 60s\n    \
         timeout server 60s\n    timeout queue 60s\n    retries 3\n    option redispatch\n\n\
         frontend fjord\n    bind {entry}\n    default_backend nodes\n\n\
         backend nodes\n    balance leastconn\n    http-reuse always\n    \
         option httpchk GET /functions\n    http-check expect status 200\n    \
         default-server check inter 1s fall 2 rise 2 maxconn {NODE_MAXCONN}\n",
        admin.display()
    );
    for (i, node) in nodes.iter().enumerate() {
        cfg.push_str(&format!("    server node{i} {node}\n"));
    }
    cfg
}

/// What every node boots from and attaches.
struct NodeFiles<'a> {
    qemu: &'a Path,
    kernel: &'a Path,
    initrd: &'a Path,
    region: &'a Path,
}

/// Node `i`'s VM: q35, its gateway forwarded from `gateway`, the region attached, `node=i`.
fn node_config(
    files: &NodeFiles<'_>,
    accel: Accel,
    options: &ClusterOptions,
    i: u32,
    gateway: SocketAddr,
) -> QemuConfig {
    let mut config = QemuConfig::new(files.kernel);
    config.qemu = files.qemu.to_path_buf();
    config.machine = Machine::Q35;
    config.smp = options.smp;
    config.memory_mib = options.memory_mib;
    config.initrd = Some(files.initrd.to_path_buf());
    config.append = crate::run::command_line(Some(&format!("node={i} {}", options.append)));
    config.use_accel(accel);
    config.devices.push(Device::UserNet {
        hostfwd: vec![HostForward {
            host: gateway.port(),
            guest: 80,
        }],
    });
    config.devices.push(Device::Ivshmem {
        mem_path: files.region.to_path_buf(),
        size_mib: options.region_mib,
    });
    config
}

/// Boots one node, number `i`, on the region file `region` of `region_mib` MiB (for tests of
/// what a node does with a region it is given).
pub fn boot_node_on(region: &Path, region_mib: u64, accel: Accel, i: u32) -> Result<QemuRun> {
    let qemu = host_deps::ensure_qemu()?;
    let kernel = kernel_build::build_kernel()?;
    let initrd = initrd::pack_initrd()?;
    let files = NodeFiles {
        qemu: &qemu,
        kernel: &kernel,
        initrd: &initrd,
        region,
    };
    let options = ClusterOptions {
        region_mib,
        ..ClusterOptions::default()
    };
    let gateway = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?));
    QemuRun::spawn(&node_config(&files, accel, &options, i, gateway), None)
}

impl Cluster {
    /// HAProxy's runtime API (a Unix socket, admin level).
    pub fn admin_socket(&self) -> PathBuf {
        self.dir.join("haproxy.sock")
    }

    /// Builds the kernel and initrd, creates the shared file, boots every node, waits for
    /// their gateways and starts HAProxy in front of them.
    pub fn start(options: &ClusterOptions, echo: bool) -> Result<Cluster> {
        options.check()?;
        let qemu = host_deps::ensure_qemu()?;
        let haproxy = host_deps::ensure_program("haproxy", "haproxy")?;
        let kernel = kernel_build::build_kernel()?;
        let initrd = initrd::pack_initrd()?;
        let (accel, note) = crate::qemu::choose_accel(options.accel, false, || {
            crate::qemu::kvm_usable(&qemu, Machine::Q35)
        });
        if let Some(note) = note {
            println!("xtask: {note}");
        }
        let id = std::process::id();
        let region = PathBuf::from(format!("/dev/shm/fjord-cxl-{id}"));
        let file = std::fs::File::create(&region)
            .with_context(|| format!("creating {}", region.display()))?;
        file.set_len(options.region_mib << 20)
            .with_context(|| format!("sizing {}", region.display()))?;
        let dir = workspace::target_dir().join(format!("cluster-{id}"));
        std::fs::create_dir_all(&dir)?;
        let mut cluster = Cluster {
            nodes: Vec::new(),
            entry: SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?)),
            region,
            haproxy: None,
            dir,
            echo,
        };
        for i in 0..options.nodes {
            let gateway = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?));
            let files = NodeFiles {
                qemu: &qemu,
                kernel: &kernel,
                initrd: &initrd,
                region: &cluster.region,
            };
            let config = node_config(&files, accel, options, i, gateway);
            let vm = QemuRun::spawn(&config, echo.then(|| format!("[node{i}] ")))?;
            cluster.nodes.push(Node {
                vm,
                gateway,
                config,
            });
        }
        for i in 0..cluster.nodes.len() {
            cluster.wait_ready(i)?;
        }
        let admin = cluster.admin_socket();
        let gateways: Vec<SocketAddr> = cluster.nodes.iter().map(|n| n.gateway).collect();
        let cfg = cluster.dir.join("haproxy.cfg");
        std::fs::write(&cfg, haproxy_config(cluster.entry, &gateways, &admin))?;
        let mut proxy = Command::new(&haproxy);
        proxy.arg("-db").arg("-f").arg(&cfg);
        proxy.stdin(Stdio::null());
        if !echo {
            proxy.stdout(Stdio::null()).stderr(Stdio::null());
        }
        cluster.haproxy = Some(
            proxy
                .spawn()
                .with_context(|| format!("starting {}", haproxy.display()))?,
        );
        cluster.wait_entry()?;
        Ok(cluster)
    }

    /// Waits until node `i` says its gateway listens and its region is attached.
    fn wait_ready(&self, i: usize) -> Result<()> {
        let vm = &self.nodes[i].vm;
        vm.wait_for_line(|l| l.contains("fjord: http listening"), BOOT_LIMIT)
            .map_err(|e| anyhow::anyhow!("node {i} did not open its gateway: {e}"))?;
        Ok(())
    }

    /// Waits until HAProxy answers through its frontend.
    fn wait_entry(&mut self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.haproxy_exit()? {
                bail!(
                    "HAProxy exited at start ({status}); its configuration is in {}",
                    self.dir.display()
                );
            }
            if let Ok(r) = crate::http_client::one(self.entry, "GET", "/functions", b"")
                && r.status == 200
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("HAProxy at {} did not answer within 30 s", self.entry);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// How HAProxy ended, if it has.
    fn haproxy_exit(&mut self) -> Result<Option<std::process::ExitStatus>> {
        match &mut self.haproxy {
            Some(h) => Ok(h.try_wait()?),
            None => Ok(None),
        }
    }

    /// Kills node `i`'s VM (HAProxy's health checks then route around it).
    pub fn kill_node(&mut self, i: usize) {
        self.nodes[i].vm.kill();
    }

    /// Boots node `i` again with the same configuration and gateway port, and waits for it.
    pub fn restart_node(&mut self, i: usize) -> Result<()> {
        let echo = self.echo.then(|| format!("[node{i}] "));
        let vm = QemuRun::spawn(&self.nodes[i].config, echo)?;
        self.nodes[i].vm = vm;
        self.wait_ready(i)
    }

    /// Every process of the cluster: QEMU's and HAProxy's.
    fn pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self.nodes.iter().map(|n| n.vm.pid()).collect();
        pids.extend(self.haproxy.as_ref().map(Child::id));
        pids
    }

    /// Stops HAProxy and every node, and removes the shared file and the working directory.
    pub fn stop(&mut self) {
        if let Some(h) = &mut self.haproxy {
            let _ = h.kill();
            let _ = h.wait();
        }
        for node in &mut self.nodes {
            node.vm.kill();
        }
        let _ = std::fs::remove_file(&self.region);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `cargo xtask cluster`: starts the cluster, prints where it is, and keeps it until Ctrl-C,
/// `cargo xtask cluster --stop`, or a node or HAProxy ends.
pub fn run(options: &ClusterOptions) -> Result<()> {
    if let Ok(text) = std::fs::read_to_string(state_file())
        && let Ok(state) = serde_json::from_str::<State>(&text)
        && is_running(state.xtask)
    {
        bail!(
            "a cluster already runs (entry {}); `cargo xtask cluster --stop` ends it",
            state.entry
        );
    }
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst))
        .context("installing the Ctrl-C handler")?;
    println!(
        "xtask: starting {} Fjord nodes on q35 sharing a {} MiB region, behind HAProxy",
        options.nodes, options.region_mib
    );
    let mut cluster = Cluster::start(options, true)?;
    let state = State {
        xtask: std::process::id(),
        pids: cluster.pids(),
        region: cluster.region.clone(),
        entry: format!("http://{}/", cluster.entry),
    };
    std::fs::write(state_file(), serde_json::to_string_pretty(&state)?)?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "xtask: cluster entry (HAProxy) at http://{}/",
        cluster.entry
    )?;
    for (i, n) in cluster.nodes.iter().enumerate() {
        writeln!(out, "xtask: node{i} gateway at http://{}/", n.gateway)?;
    }
    writeln!(out, "xtask: shared region {}", cluster.region.display())?;
    writeln!(
        out,
        "xtask:   cargo xtask fn deploy hello --url http://{}/",
        cluster.entry
    )?;
    writeln!(
        out,
        "xtask:   curl --data world http://{}/invoke/hello",
        cluster.entry
    )?;
    writeln!(out, "xtask: Ctrl-C or `cargo xtask cluster --stop` ends it")?;
    drop(out);
    let ended = loop {
        if stop.load(Ordering::SeqCst) {
            break None;
        }
        if let Ok(Some(status)) = cluster.haproxy_exit() {
            break Some(format!("HAProxy exited ({status})"));
        }
        if let Some(i) = cluster.nodes.iter_mut().position(|n| n.vm.has_exited()) {
            break Some(format!("node{i} stopped"));
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    cluster.stop();
    let _ = std::fs::remove_file(state_file());
    match ended {
        None => {
            println!(
                "xtask: cluster stopped; {} removed",
                cluster.region.display()
            );
            Ok(())
        }
        Some(why) => bail!("{why}; the cluster was stopped"),
    }
}

/// `cargo xtask cluster --stop`: ends the cluster another `cargo xtask cluster` started.
pub fn stop_running() -> Result<()> {
    let path = state_file();
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("no cluster is running ({} is missing)", path.display()))?;
    let state: State = serde_json::from_str(&text)?;
    // The running `cargo xtask cluster` stops everything itself on SIGINT.
    let _ = Command::new("kill")
        .arg("-INT")
        .arg(state.xtask.to_string())
        .status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while is_running(state.xtask) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    // Whatever is left (the xtask process was killed some other way).
    for pid in &state.pids {
        if is_running(*pid) {
            let _ = Command::new("kill").arg(pid.to_string()).status();
        }
    }
    let _ = std::fs::remove_file(&state.region);
    let _ = std::fs::remove_file(&path);
    println!("xtask: cluster at {} stopped", state.entry);
    Ok(())
}

fn is_running(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn haproxy_checks_every_node_and_bounds_its_requests() {
        let entry: SocketAddr = "127.0.0.1:9000".parse().unwrap();
        let nodes: Vec<SocketAddr> = vec![
            "127.0.0.1:9001".parse().unwrap(),
            "127.0.0.1:9002".parse().unwrap(),
        ];
        let cfg = haproxy_config(entry, &nodes, Path::new("/tmp/x.sock"));
        assert!(cfg.contains("bind 127.0.0.1:9000"));
        assert!(cfg.contains("server node0 127.0.0.1:9001\n"));
        assert!(cfg.contains("server node1 127.0.0.1:9002\n"));
        assert!(cfg.contains("option httpchk GET /functions"));
        assert!(cfg.contains(&format!(
            "check inter 1s fall 2 rise 2 maxconn {NODE_MAXCONN}"
        )));
        assert!(cfg.contains("stats socket /tmp/x.sock mode 600 level admin"));
    }

    #[test]
    fn sizes_and_node_counts_qemu_would_refuse_are_refused() {
        let ok = ClusterOptions::default();
        assert!(ok.check().is_ok());
        assert!(
            ClusterOptions {
                nodes: 1,
                ..ok.clone()
            }
            .check()
            .is_err()
        );
        assert!(
            ClusterOptions {
                region_mib: 100,
                ..ok.clone()
            }
            .check()
            .is_err()
        );
        assert!(
            ClusterOptions {
                region_mib: 8,
                ..ok
            }
            .check()
            .is_err()
        );
    }
}
