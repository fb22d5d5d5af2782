//! The `restore` group's targets and their parameters: Fjord's targets
//! (`kernel/src/bench/restore.rs`) served on Linux by a process forked per request from a
//! warmed parent.
//!
//! The parameters file has one line per target, `<label> <none_latency> <slo>`: Fjord's
//! minimal-load latency of the target without isolation (the capacity the sweep's loads are
//! percentages of) and the p99 SLO, in instructions, from the Fjord run of the same
//! `cargo xtask bench restore`. Labels: `hello`, `<workload>_<operation>` (an operation of
//! [`fjord_faas::workloads::OPERATIONS`]) and `dirty_<n>`.

use fjord_faas::workloads::OPERATIONS;

use crate::apps::{self, DIRTY_HEAP, RESTORE, Route};

/// One target: which function a request enters and what it must answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestoreTarget {
    /// The metric prefix.
    pub label: String,
    /// The functions of the target (a workload's, or [`RESTORE`]).
    pub table: &'static [(&'static str, Route)],
    /// The function requests enter.
    pub entry: &'static str,
    /// The request.
    pub request: Vec<u8>,
    /// Bytes a successful response contains, or (`exact`) is.
    pub expect: Vec<u8>,
    /// Whether the response must be exactly `expect`.
    pub exact: bool,
    /// For `dirty_<n>`: `n`, the pages a request writes.
    pub dirty_pages: Option<usize>,
}

/// The target called `label`, if there is one.
pub fn target(label: &str) -> Option<RestoreTarget> {
    if label == "hello" {
        return Some(RestoreTarget {
            label: label.to_owned(),
            table: RESTORE,
            entry: "hello",
            request: b"world".to_vec(),
            expect: b"hello, world!".to_vec(),
            exact: true,
            dirty_pages: None,
        });
    }
    if let Some(n) = label.strip_prefix("dirty_") {
        let pages: usize = n.parse().ok()?;
        if pages == 0 || pages > DIRTY_HEAP / 4096 || n != pages.to_string() {
            return None;
        }
        return Some(RestoreTarget {
            label: label.to_owned(),
            table: RESTORE,
            entry: "dirty",
            request: n.as_bytes().to_vec(),
            expect: n.as_bytes().to_vec(),
            exact: true,
            dirty_pages: Some(pages),
        });
    }
    let op = OPERATIONS.iter().find(|o| {
        label
            .strip_prefix(o.workload)
            .and_then(|r| r.strip_prefix('_'))
            == Some(o.name)
    })?;
    Some(RestoreTarget {
        label: label.to_owned(),
        table: apps::functions(op.workload)?,
        entry: op.entry,
        request: op.request.to_vec(),
        expect: op.expect.to_vec(),
        exact: false,
        dirty_pages: None,
    })
}

/// One target to measure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestoreParams {
    /// The target.
    pub target: RestoreTarget,
    /// Fjord's minimal-load latency without isolation (instructions).
    pub none_latency: u64,
    /// The p99 bound (instructions).
    pub slo: u64,
}

/// Parses the parameters file's text.
pub fn parse_params(text: &str) -> Result<Vec<RestoreParams>, String> {
    crate::config::read_lines(
        text,
        "<label> <none_latency> <slo>",
        1,
        |names, none_latency, slo| {
            let label = names[0];
            let target = target(label).ok_or_else(|| format!("unknown target {label}"))?;
            Ok(RestoreParams {
                target,
                none_latency,
                slo,
            })
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_by_label() {
        let hello = target("hello").unwrap();
        assert_eq!(
            (
                hello.entry,
                &hello.request[..],
                &hello.expect[..],
                hello.exact
            ),
            ("hello", &b"world"[..], &b"hello, world!"[..], true)
        );
        let dirty = target("dirty_100").unwrap();
        assert_eq!(
            (dirty.entry, &dirty.request[..], dirty.dirty_pages),
            ("dirty", &b"100"[..], Some(100))
        );
        assert!(apps::index(dirty.table, dirty.entry).is_some());
        for o in OPERATIONS {
            let t = target(&format!("{}_{}", o.workload, o.name)).unwrap();
            assert_eq!((t.entry, &t.request[..]), (o.entry, o.request));
            assert!(!t.exact && t.dirty_pages.is_none());
            assert!(apps::index(t.table, t.entry).is_some());
        }
        for bad in [
            "",
            "hi",
            "dirty_",
            "dirty_0",
            "dirty_x",
            "dirty_010",
            "dirty_16385",
            "hotel_",
            "hotel_nope",
            "hotelsearch_nearby",
            "chain_abc",
        ] {
            assert!(target(bad).is_none(), "{bad}");
        }
        assert!(target("dirty_16384").is_some());
    }

    #[test]
    fn params_lines() {
        let p = parse_params(
            "# from Fjord\n\nhello 20000 200000\nhotel_search_nearby 100000 1000000\ndirty_10 5 50\n",
        )
        .unwrap();
        assert_eq!(p.len(), 3);
        assert_eq!(
            (p[1].target.entry, p[1].none_latency, p[1].slo),
            ("hotel-frontend", 100_000, 1_000_000)
        );
        assert_eq!((p[0].target.label.as_str(), p[2].slo), ("hello", 50));
        assert!(parse_params("nope 1 2").unwrap_err().contains("unknown"));
        assert!(parse_params("hello 1").is_err());
        assert!(parse_params("hello 1 2 3").is_err());
        assert!(parse_params("hello 0 2").is_err());
        assert!(parse_params("hello 1 x").is_err());
    }
}
