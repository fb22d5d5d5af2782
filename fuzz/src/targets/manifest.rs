//! The `.fjord_manifest` parser ([`Manifest::parse`]).
//!
//! Invariants beyond "no panic": an accepted manifest's values lie within the documented
//! bounds, and its canonical text ([`Manifest::to_text`]) parses back to an equal manifest.

use fjord_faas::module::Manifest;
use fjord_faas::module::manifest::{MAX_KV_QUOTA, MAX_LOG_LIMIT, MAX_MAX_PDS, MAX_TIME_LIMIT_MS};

use crate::engine::{Target, Violation};
use crate::rng::{Rng, fnv};

/// The target.
pub const TARGET: Target = Target {
    name: "manifest",
    max_len: 4096,
    generate,
    check,
};

fn check(input: &[u8]) -> Result<u64, Violation> {
    match Manifest::parse(input) {
        Ok(m) => {
            let in_bounds = m.stack_size >= 4096
                && m.stack_size % 4096 == 0
                && m.heap_size % 4096 == 0
                && m.memory_limit % 4096 == 0
                && (1..=MAX_TIME_LIMIT_MS).contains(&m.time_limit_ms())
                && m.max_pds <= MAX_MAX_PDS
                && m.kv_quota <= MAX_KV_QUOTA
                && m.log_limit <= MAX_LOG_LIMIT;
            if !in_bounds {
                return Err(Violation(format!("accepted out of bounds: {m:?}")));
            }
            let text = m.to_text();
            match Manifest::parse(text.as_bytes()) {
                Ok(again) if again == m => Ok(1),
                other => Err(Violation(format!(
                    "{m:?} as text {text:?} parses to {other:?}"
                ))),
            }
        }
        Err(e) => Ok(fnv(format!("{e:?}").as_bytes())),
    }
}

const KEYS: &[&str] = &[
    "name",
    "entry",
    "stack_size",
    "heap_size",
    "groundhog",
    "time_limit_ms",
    "memory_limit",
    "max_pds",
    "app",
    "kv_quota",
    "log_limit",
    "kind",
    "Name",
    "unknown",
    "",
];
const VALUES: &[&str] = &[
    "hello",
    "hotel-frontend",
    "hotel",
    "a",
    "A",
    "x_y-z",
    "0",
    "1",
    "4096",
    "4095",
    "0x1000",
    "0X1000",
    "0x",
    "16K",
    "1M",
    "1G",
    "64k",
    "1024M",
    "1025M",
    "16777216",
    "16777217",
    "600000",
    "600001",
    "256",
    "257",
    "1048576",
    "1048577",
    "18446744073709551615",
    "18446744073709551616",
    "0xffffffffffffffff",
    "0xfffffffffffffffff",
    "17592186044416K",
    "on",
    "off",
    "full",
    "none",
    "function",
    "program",
    "-1",
    "+1",
    "1 K",
    "",
    "é",
];

/// A manifest: usually the version line first, then keys with values from the pools.
fn generate(rng: &mut Rng, out: &mut Vec<u8>) {
    match rng.below(12) {
        0 => {}
        1 => out.extend_from_slice(b"fjord-manifest=2\n"),
        2 => out.extend_from_slice(b"# comment\n\n  fjord-manifest=1  \r\n"),
        _ => out.extend_from_slice(b"fjord-manifest=1\n"),
    }
    let app = rng.one_in(3);
    if !rng.one_in(10) {
        out.extend_from_slice(if app {
            b"name=hotel-frontend\n".as_slice()
        } else {
            b"name=hello\n".as_slice()
        });
    }
    if app {
        out.extend_from_slice(b"app=hotel\n");
    }
    for _ in 0..rng.below(8) {
        if rng.one_in(10) {
            out.extend_from_slice(b"# a comment\n");
        }
        out.extend_from_slice(rng.pick(KEYS).as_bytes());
        if !rng.one_in(12) {
            out.extend_from_slice(if rng.one_in(6) { b" = " } else { b"=" });
        }
        out.extend_from_slice(rng.pick(VALUES).as_bytes());
        out.extend_from_slice(if rng.one_in(8) { b"\r\n" } else { b"\n" });
    }
    if rng.one_in(4) {
        // Padding of a fixed-size static.
        out.extend(std::iter::repeat_n(0, rng.below(32)));
    }
}
