//! A network namespace of xtask's own, for load tests that need a real link to a guest.
//!
//! The host is shared: load must never go to an address in the host's own namespace. A
//! [`NetNs`] is made with `ip netns add fjord-<pid>-<n>` (its loopback up, nothing else in it)
//! and deleted with `ip netns del` when dropped; the tap for the guest is made inside it
//! ([`crate::tap::Tap::create_in`]), and QEMU and the load generators run inside it too, started
//! with `ip netns exec` ([`NetNs::command`]). Needs root (or `CAP_SYS_ADMIN`) and iproute2.

use std::ffi::OsStr;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Context, Result, bail};

/// Namespaces made by this process so far (the last part of a unique name).
static CREATED: AtomicU32 = AtomicU32::new(0);

/// A network namespace, deleted on drop.
#[derive(Debug)]
pub struct NetNs {
    name: String,
}

impl NetNs {
    /// Creates an empty namespace with its loopback interface up, first deleting any left by
    /// an xtask that was killed before it could.
    pub fn create() -> Result<NetNs> {
        if let Ok(list) = ip_output(&["netns", "list"]) {
            for stale in stale_names(&list, |pid| {
                std::path::Path::new(&format!("/proc/{pid}")).exists()
            }) {
                let _ = run_ip(&["netns", "del", &stale]);
            }
        }
        let name = format!(
            "fjord-{}-{}",
            std::process::id(),
            CREATED.fetch_add(1, Ordering::Relaxed)
        );
        run_ip(&["netns", "add", &name])?;
        // From here the guard deletes the namespace if a later step fails.
        let ns = NetNs { name };
        ns.ip(&["link", "set", "dev", "lo", "up"])?;
        Ok(ns)
    }

    /// The namespace's name (`ip netns list` shows it while it exists).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `ip -n <name> <args>`.
    pub fn ip(&self, args: &[&str]) -> Result<()> {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        run_ip(&all)
    }

    /// A command that runs `program` inside the namespace (`ip netns exec <name> <program>`).
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &self.name])
            .arg(program.as_ref());
        command
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        if let Err(e) = run_ip(&["netns", "del", &self.name]) {
            eprintln!(
                "warning: could not delete network namespace {}: {e:#}",
                self.name
            );
        }
    }
}

/// Runs `ip` with `args`; an error names the command and quotes its message.
pub fn run_ip(args: &[&str]) -> Result<()> {
    ip_output(args).map(drop)
}

/// Runs `ip` with `args` and returns its standard output.
pub fn ip_output(args: &[&str]) -> Result<String> {
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

/// The namespaces in `ip netns list` output that an xtask process made and that `alive` says
/// is gone (names `fjord-<pid>-<n>`).
pub fn stale_names(list: &str, alive: impl Fn(u32) -> bool) -> Vec<String> {
    list.lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| {
            let mut parts = name.strip_prefix("fjord-").unwrap_or("").split('-');
            match (
                parts.next().map(str::parse::<u32>),
                parts.next().map(str::parse::<u32>),
                parts.next(),
            ) {
                (Some(Ok(pid)), Some(Ok(_)), None) => !alive(pid),
                _ => false,
            }
        })
        .map(str::to_owned)
        .collect()
}

/// Whether `ip netns list` output names namespace `name`.
pub fn listed(list: &str, name: &str) -> bool {
    list.lines()
        .any(|line| line.split_whitespace().next() == Some(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listed_namespaces_are_found_by_exact_name() {
        let list = "fjord-12-0 (id: 3)\nfjord-12-10\n";
        assert!(listed(list, "fjord-12-0"));
        assert!(listed(list, "fjord-12-10"));
        assert!(!listed(list, "fjord-12-1"));
        assert!(!listed("", "fjord-12-0"));
    }

    #[test]
    fn only_namespaces_of_dead_xtasks_are_stale() {
        let list = "fjord-10-0 (id: 1)\nfjord-11-2\nother\nfjord-x-1\nfjord-12-0-extra\n";
        assert_eq!(stale_names(list, |pid| pid == 11), ["fjord-10-0"]);
        assert!(stale_names(list, |_| true).is_empty());
    }

    #[test]
    fn a_namespace_is_made_and_deleted_when_root() {
        let Ok(ns) = NetNs::create() else {
            // Not root, or no iproute2: nothing to check here.
            return;
        };
        let name = ns.name().to_owned();
        assert!(listed(&ip_output(&["netns", "list"]).unwrap(), &name));
        let out = ns
            .command("ip")
            .args(["-o", "link", "show"])
            .output()
            .unwrap();
        let links = String::from_utf8_lossy(&out.stdout);
        assert!(
            links.contains("lo:") && links.lines().count() == 1,
            "{links}"
        );
        drop(ns);
        assert!(!listed(&ip_output(&["netns", "list"]).unwrap(), &name));
    }
}
