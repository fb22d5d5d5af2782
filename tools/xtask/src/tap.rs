//! A host tap device for a guest's virtio-net card: the host reaches the guest's own IP address
//! directly, without QEMU's user-mode network stack (slirp) in between.
//!
//! [`Tap::create`] makes a persistent tap interface with a name unique to this process, gives
//! the host side the `.2` address of a private /24 that no host route covers, and brings it up;
//! dropping the [`Tap`] deletes the interface. It needs root (or `CAP_NET_ADMIN`), `/dev/net/tun`
//! and the `ip` command; [`Tap::create`]'s error says which one was missing.

use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Context, Result, bail};

/// The tun/tap character device.
pub const TUN_DEVICE: &str = "/dev/net/tun";
/// The first two octets of the /24 subnets tried for the host–guest link.
const SUBNET_PREFIX: [u8; 2] = [10, 77];
/// The host's address within the subnet (the guest's gateway).
const HOST_OCTET: u8 = 2;
/// The guest's address within the subnet.
const GUEST_OCTET: u8 = 15;
/// Frames the host may queue for the guest before the tap drops them (Linux's default is
/// 1,000). A closed loop over 1,000 connections has a request and an acknowledgement in flight
/// per connection; with the default queue the host drops some of them while QEMU's main thread
/// is busy, and each drop costs its request a retransmission timeout.
const TX_QUEUE_LEN: u32 = 10_000;
/// Longest Linux interface name (`IFNAMSIZ` less the terminating zero).
const IFNAME_MAX: usize = 15;

/// Taps made by this process so far (the second part of a unique interface name).
static CREATED: AtomicU32 = AtomicU32::new(0);

/// A host–guest link over a tap interface: its name and the addresses of both ends (a /24).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TapNet {
    /// The host interface's name.
    pub ifname: String,
    /// The host side's address, which is the guest's gateway.
    pub host: Ipv4Addr,
    /// The guest's address.
    pub guest: Ipv4Addr,
}

impl TapNet {
    /// The link on subnet `10.77.<third>.0/24` through interface `ifname`.
    pub fn new(ifname: String, third: u8) -> Self {
        let [a, b] = SUBNET_PREFIX;
        TapNet {
            ifname,
            host: Ipv4Addr::new(a, b, third, HOST_OCTET),
            guest: Ipv4Addr::new(a, b, third, GUEST_OCTET),
        }
    }

    /// The kernel command-line options that give the guest its end of the link.
    pub fn guest_cmdline(&self) -> String {
        format!("ip={}/24 gw={}", self.guest, self.host)
    }
}

/// A tap interface on the host, deleted on drop.
#[derive(Debug)]
pub struct Tap {
    net: TapNet,
}

impl Tap {
    /// Creates, addresses and brings up a tap interface for one guest.
    pub fn create() -> Result<Tap> {
        if !std::path::Path::new(TUN_DEVICE).exists() {
            bail!("{TUN_DEVICE} does not exist (no tun/tap support)");
        }
        let routes = ip_output(&["-4", "route", "show", "table", "all"])?;
        let pid = std::process::id();
        let third =
            free_subnet(&routes, pid).context("every 10.77.x.0/24 subnet overlaps a host route")?;
        let ifname = ifname_for(pid, CREATED.fetch_add(1, Ordering::Relaxed));
        let net = TapNet::new(ifname, third);
        ip(&["tuntap", "add", "dev", &net.ifname, "mode", "tap"])?;
        // From here the guard deletes the interface if a later step fails.
        let tap = Tap { net };
        let n = &tap.net;
        ip(&["addr", "add", &format!("{}/24", n.host), "dev", &n.ifname])?;
        let qlen = TX_QUEUE_LEN.to_string();
        ip(&["link", "set", "dev", &n.ifname, "txqueuelen", &qlen, "up"])?;
        Ok(tap)
    }

    /// The link: interface name and both addresses.
    pub fn net(&self) -> &TapNet {
        &self.net
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        if let Err(e) = ip(&["link", "del", "dev", &self.net.ifname]) {
            eprintln!("warning: could not delete tap {}: {e:#}", self.net.ifname);
        }
    }
}

/// The interface name of this process's `n`th tap: `fjtap<pid>` and, from the second on, `.<n>`,
/// cut to the kernel's 15 characters.
pub fn ifname_for(pid: u32, n: u32) -> String {
    let mut name = format!("fjtap{pid}");
    if n > 0 {
        name.push_str(&format!(".{n}"));
    }
    if name.len() > IFNAME_MAX {
        // A pid and counter this long cannot both fit: keep the counter's end, which differs.
        name = format!("fjt{}", &name[name.len() - (IFNAME_MAX - 3)..]);
    }
    name
}

/// The third octet of a `10.77.x.0/24` subnet that no route in `routes` (the output of
/// `ip -4 route show`) overlaps, trying from a start that `seed` picks.
pub fn free_subnet(routes: &str, seed: u32) -> Option<u8> {
    let taken: Vec<(u32, u8)> = routes.lines().filter_map(route_destination).collect();
    (0..=255u32)
        .map(|i| ((seed + i) % 256) as u8)
        .find(|&third| {
            let [a, b] = SUBNET_PREFIX;
            let ours = u32::from(Ipv4Addr::new(a, b, third, 0));
            !taken.iter().any(|&(net, len)| overlaps(ours, 24, net, len))
        })
}

/// The destination prefix of one `ip route` line (a bare address is a /32; `default` and other
/// keywords are not a subnet of ours to avoid). A leading route type such as `local` is skipped.
fn route_destination(line: &str) -> Option<(u32, u8)> {
    let mut words = line.split_whitespace();
    let mut dest = words.next()?;
    if matches!(
        dest,
        "unicast" | "local" | "broadcast" | "multicast" | "unreachable" | "blackhole" | "prohibit"
    ) {
        dest = words.next()?;
    }
    let (addr, len) = match dest.split_once('/') {
        Some((addr, len)) => (addr, len.parse().ok().filter(|&l| l <= 32)?),
        None => (dest, 32),
    };
    Some((u32::from(addr.parse::<Ipv4Addr>().ok()?), len))
}

/// Whether prefixes `a/alen` and `b/blen` share an address.
fn overlaps(a: u32, alen: u8, b: u32, blen: u8) -> bool {
    let len = alen.min(blen);
    if len == 0 {
        return true;
    }
    let mask = u32::MAX << (32 - u32::from(len));
    a & mask == b & mask
}

/// Runs `ip` with `args`; an error names the command and quotes its message.
fn ip(args: &[&str]) -> Result<()> {
    ip_output(args).map(drop)
}

/// Runs `ip` with `args` and returns its standard output.
fn ip_output(args: &[&str]) -> Result<String> {
    let line = format!("ip {}", args.join(" "));
    let out = Command::new("ip")
        .args(args)
        .output()
        .with_context(|| format!("cannot run `{line}` (is iproute2 installed?)"))?;
    if !out.status.success() {
        bail!(
            "`{line}` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_names_are_unique_and_fit() {
        assert_eq!(ifname_for(4242, 0), "fjtap4242");
        assert_eq!(ifname_for(4242, 1), "fjtap4242.1");
        // The largest Linux pid (2^22) with a counter.
        let long = ifname_for(4_194_304, 123);
        assert!(long.len() <= IFNAME_MAX, "{long}");
        assert_ne!(long, ifname_for(4_194_304, 124));
        for n in 0..1000 {
            assert!(ifname_for(u32::MAX, n).len() <= IFNAME_MAX);
        }
    }

    #[test]
    fn the_subnet_avoids_host_routes() {
        let routes = "default via 192.0.2.1 dev eth0\n\
                      192.0.2.0/24 dev eth0 proto kernel scope link src 192.0.2.2\n";
        assert_eq!(free_subnet(routes, 0), Some(0));
        assert_eq!(free_subnet(routes, 300), Some(44));
        let routes = "10.77.0.0/24 dev fjtap1 scope link\n10.77.1.0/24 dev fjtap2\n\
                      local 10.77.2.2 dev fjtap3 table local proto kernel\n";
        assert_eq!(free_subnet(routes, 0), Some(3));
        // A wider route covers every candidate.
        assert_eq!(free_subnet("10.0.0.0/8 via 192.0.2.1 dev eth0\n", 7), None);
        assert_eq!(free_subnet("10.77.0.0/16 dev br0\n", 7), None);
    }

    #[test]
    fn route_lines_parse() {
        assert_eq!(route_destination("default via 10.0.0.1 dev eth0"), None);
        assert_eq!(
            route_destination("10.77.5.0/24 dev x"),
            Some((u32::from(Ipv4Addr::new(10, 77, 5, 0)), 24))
        );
        assert_eq!(
            route_destination("broadcast 10.77.5.255 dev x table local"),
            Some((u32::from(Ipv4Addr::new(10, 77, 5, 255)), 32))
        );
        assert_eq!(route_destination("fe80::/64 dev x"), None);
        assert_eq!(route_destination(""), None);
    }

    #[test]
    fn guest_options_match_the_link() {
        let net = TapNet::new("fjtap1".into(), 9);
        assert_eq!(net.host, Ipv4Addr::new(10, 77, 9, 2));
        assert_eq!(net.guest, Ipv4Addr::new(10, 77, 9, 15));
        assert_eq!(net.guest_cmdline(), "ip=10.77.9.15/24 gw=10.77.9.2");
    }
}
