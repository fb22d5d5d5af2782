//! End-to-end checks of Groundhog request isolation over HTTP: the Groundhog mode set at
//! deploy time (`PUT /functions/<name>?groundhog=…`) and shown by `GET /functions`, and the
//! leak tests: one client's request leaves a secret in the heap, the stack, a fresh VMA and
//! the registers (`leak`) or corrupts what `init` built (`leak-init`); the next request, on
//! another connection, dumps it all and sees only the snapshot's values. Under `none`
//! (Groundhog's insecure baseline) the same dump shows the secret, so the check can see a leak.

use std::net::SocketAddr;

use crate::e2e_http::Outcome;
use crate::http_client::one;
use crate::qemu::Accel;

/// The secret the first request leaves behind.
const SECRET: &str = "5ec2e75ec2e75ec2";

/// Runs the checks against the gateway at `addr`, deploying `leak` and `leak-init` from
/// `leak` and `leak_init` (their module bytes).
pub fn checks(addr: SocketAddr, leak: &[u8], leak_init: &[u8], accel: Accel) -> Vec<Outcome> {
    let mut out = Vec::new();
    let mut check = |label: &str, result: Result<(), String>| {
        out.push((format!("http: groundhog: {label}"), result));
    };
    check(
        "PUT with an unknown Groundhog mode is 400",
        one(addr, "PUT", "/functions/leak?groundhog=bogus", leak).and_then(|r| r.expect(400)),
    );
    check(
        "PUT leak is 201 and GET /functions shows groundhog restore",
        deploy_in(addr, "leak", leak, None, 201),
    );
    check(
        "restore: a request sees nothing of the last client's secret",
        leak_round(addr).and_then(|dump| {
            for k in ["heap", "stack", "vma"] {
                if field(&dump, k) != Some(0) {
                    return Err(format!("{k} is not zero in {dump:?}"));
                }
            }
            no_secret(&dump)
        }),
    );
    if accel == Accel::Kvm {
        // Open: under this machine's KVM (ring 0 emulated, two executors) requests after the
        // earlier checks kept landing on new instances of `leak`, so the baseline's leak is not
        // seen reliably there (docs/kvm.md). The check runs under TCG.
        println!(
            "e2e kvm/http-…/http: groundhog: none: the same dump shows the secret ... not run: \
             instances are not reliably reused under this KVM (docs/kvm.md)"
        );
    } else {
        check(
            "none: the same dump shows the secret (Groundhog's insecure baseline)",
            deploy_in(addr, "leak", leak, Some("none"), 200).and_then(|()| {
                // The next request may meet another instance while the first is still being
                // given back; one of a few rounds meets the same one.
                let mut last = String::new();
                for _ in 0..5 {
                    last = leak_round(addr)?;
                    if last.contains(SECRET) {
                        return Ok(());
                    }
                }
                Err(format!("no round showed the secret: {last:?}"))
            }),
        );
    }
    check(
        "fresh: a new instance per request sees nothing",
        deploy_in(addr, "leak", leak, Some("fresh"), 200)
            .and_then(|()| leak_round(addr))
            .and_then(|dump| no_secret(&dump)),
    );
    check(
        "back to restore by PUT ?groundhog=restore",
        deploy_in(addr, "leak", leak, Some("restore"), 200)
            .and_then(|()| leak_round(addr))
            .and_then(|dump| no_secret(&dump)),
    );
    check(
        "leak-init: a request's corruption of init's state is gone for the next client",
        deploy_in(addr, "leak-init", leak_init, None, 201).and_then(|()| {
            let before = invoke(addr, "leak-init", "dump")?;
            let want = "len=00000000000003e8 sum=000000000016dd84";
            // Ten one-page VMAs init mapped, each starting with its mark.
            if !before.contains(want) || !before.contains("scattered=000000000000000a") {
                return Err(format!("init's state is not there: {before:?}"));
            }
            let corrupted = invoke(addr, "leak-init", &format!("corrupt {SECRET}"))?;
            if !corrupted.contains("len=0000000000001388") {
                return Err(format!("the corruption did not happen: {corrupted:?}"));
            }
            let after = invoke(addr, "leak-init", "dump")?;
            if after != before {
                return Err(format!("dumped {after:?} after, {before:?} before"));
            }
            Ok(())
        }),
    );
    check(
        "GET /metrics has restores and pages restored per function",
        one(addr, "GET", "/metrics", b"").and_then(|r| {
            r.expect(200)?;
            for needle in [
                "fjord_groundhog_restores_total{function=\"leak-init\"}",
                "fjord_groundhog_pages_restored_total{function=\"leak\"}",
                "fjord_groundhog_restore_seconds_total{function=\"leak\"}",
            ] {
                r.expect_body_contains(needle)?;
            }
            Ok(())
        }),
    );
    out
}

/// Deploys `bytes` as `name` (with `?groundhog=<mode>` when given), expects `status`, and
/// checks that `GET /functions` shows the mode (`restore` when none was given).
fn deploy_in(
    addr: SocketAddr,
    name: &str,
    bytes: &[u8],
    mode: Option<&str>,
    status: u16,
) -> Result<(), String> {
    let path = match mode {
        Some(m) => format!("/functions/{name}?groundhog={m}"),
        None => format!("/functions/{name}"),
    };
    one(addr, "PUT", &path, bytes)?.expect(status)?;
    let list = one(addr, "GET", "/functions", b"")?;
    list.expect(200)?;
    let text = list.text();
    let entry = text
        .split('{')
        .find(|e| e.contains(&format!("\"name\":\"{name}\"")))
        .ok_or_else(|| format!("{name} is not listed: {text}"))?;
    let mode = mode.unwrap_or("restore");
    if entry.contains(&format!("\"groundhog\":\"{mode}\"")) {
        Ok(())
    } else {
        Err(format!(
            "{name} is not listed with groundhog {mode}: {entry}"
        ))
    }
}

/// `POST /invoke/<name>` with `body` on a connection of its own: the 200 answer's text.
fn invoke(addr: SocketAddr, name: &str, body: &str) -> Result<String, String> {
    let r = one(addr, "POST", &format!("/invoke/{name}"), body.as_bytes())?;
    r.expect(200)?;
    Ok(r.text())
}

/// One client's `leak write <secret>`, then another's `leak dump`: the dump.
fn leak_round(addr: SocketAddr) -> Result<String, String> {
    let wrote = invoke(addr, "leak", &format!("write {SECRET}"))?;
    if field(&wrote, "vma").is_none() {
        return Err(format!("write answered {wrote:?}"));
    }
    invoke(addr, "leak", "dump")
}

/// The value of `key=<hex>` in a report.
fn field(report: &str, key: &str) -> Option<u64> {
    let v = report
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))?;
    u64::from_str_radix(v, 16).ok()
}

fn no_secret(dump: &str) -> Result<(), String> {
    if dump.contains(SECRET) {
        Err(format!("the secret leaked: {dump:?}"))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_hex_words() {
        let d = "heap=0000000000000000 stack=5ec2e75ec2e75ec2 ";
        assert_eq!(field(d, "heap"), Some(0));
        assert_eq!(field(d, "stack"), Some(0x5ec2_e75e_c2e7_5ec2));
        assert_eq!(field(d, "vma"), None);
        assert!(no_secret(d).is_err());
        assert!(no_secret("heap=0000000000000000").is_ok());
    }
}
