//! A host tap device for a guest's virtio-net card: the host reaches the guest's own IP address
//! directly, without QEMU's user-mode network stack (slirp) in between.
//!
//! [`Tap::create`] makes a network namespace of xtask's own ([`NetNs`]) and in it a tap
//! interface with a name unique to this process, gives the host side the `.2` address of
//! `10.77.0.0/24` and brings it up; dropping the [`Tap`] deletes the namespace and the interface.
//! Load goes only to the guest inside that namespace, never to an address in the host's own.
//! It needs root (or `CAP_NET_ADMIN` and `CAP_SYS_ADMIN`), `/dev/net/tun` and the `ip` command;
//! [`Tap::create`]'s error says which one was missing.

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Result, bail};

use crate::netns::NetNs;

/// The tun/tap character device.
pub const TUN_DEVICE: &str = "/dev/net/tun";
/// The first two octets of the host–guest link's /24 subnet.
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

/// A tap interface in a network namespace of its own; dropping it deletes the namespace and
/// with it the interface.
#[derive(Debug)]
pub struct Tap {
    net: TapNet,
    ns: NetNs,
}

impl Tap {
    /// Creates a network namespace of xtask's own and, inside it, a tap interface for one
    /// guest, addressed and up. QEMU and the load generators must run inside the namespace
    /// too ([`Tap::netns`]); nothing of this is visible in the host's own namespace.
    pub fn create() -> Result<Tap> {
        if !std::path::Path::new(TUN_DEVICE).exists() {
            bail!("{TUN_DEVICE} does not exist (no tun/tap support)");
        }
        let ns = NetNs::create()?;
        let ifname = ifname_for(std::process::id(), CREATED.fetch_add(1, Ordering::Relaxed));
        // The namespace is empty, so any subnet is free in it.
        let net = TapNet::new(ifname, 0);
        ns.ip(&["tuntap", "add", "dev", &net.ifname, "mode", "tap"])?;
        ns.ip(&[
            "addr",
            "add",
            &format!("{}/24", net.host),
            "dev",
            &net.ifname,
        ])?;
        let qlen = TX_QUEUE_LEN.to_string();
        ns.ip(&["link", "set", "dev", &net.ifname, "txqueuelen", &qlen, "up"])?;
        Ok(Tap { net, ns })
    }

    /// The link: interface name and both addresses.
    pub fn net(&self) -> &TapNet {
        &self.net
    }

    /// The namespace the interface lives in.
    pub fn netns(&self) -> &NetNs {
        &self.ns
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
    fn guest_options_match_the_link() {
        let net = TapNet::new("fjtap1".into(), 9);
        assert_eq!(net.host, Ipv4Addr::new(10, 77, 9, 2));
        assert_eq!(net.guest, Ipv4Addr::new(10, 77, 9, 15));
        assert_eq!(net.guest_cmdline(), "ip=10.77.9.15/24 gw=10.77.9.2");
    }
}
