//! The runner's parameters: `fjord-nightcore [--workers N] [--check] [--restore]
//! [--isolation warm|fork] <params file>`.
//!
//! Without `--restore` (the `workloads` group) the file has one line per operation to measure,
//! `<workload> <operation> <ni_service> <slo>`: Jord_NI's minimal-load service time and the
//! p99 SLO, in instructions, from the Fjord run of the same `cargo xtask bench --report`. With
//! `--restore` (the `restore` group) it has one line per target, `<label> <none_latency> <slo>`
//! (see [`crate::restore`]). Empty lines and lines starting with `#` are ignored.

use fjord_faas::workloads::{self, Operation};

use crate::worker::Isolation;

/// Worker processes per function unless `--workers` says otherwise.
pub const DEFAULT_WORKERS: usize = 2;

/// One operation to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpParams {
    /// The operation (sample request, expected bytes).
    pub op: &'static Operation,
    /// Jord_NI's minimal-load service time (instructions).
    pub ni_service: u64,
    /// The p99 bound (instructions).
    pub slo: u64,
}

/// Which benchmark group the runner measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    /// The workloads' operations, beside Jord_NI.
    Workloads,
    /// Groundhog's targets, beside Fjord's Groundhog modes.
    Restore,
}

/// The whole command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The group measured (`--restore`: [`Group::Restore`]).
    pub group: Group,
    /// Where workers run invocations: [`Isolation::Warm`] for `workloads`,
    /// [`Isolation::Fork`] for `restore`, unless `--isolation` says otherwise.
    pub isolation: Isolation,
    /// Worker processes per function.
    pub workers: usize,
    /// Only check the responses and measure the latencies (no open-loop sweep), for tests.
    pub check_only: bool,
    /// The path of the parameters file.
    pub params: String,
}

/// Parses the arguments after the program name:
/// `[--workers N] [--check] [--restore] [--isolation warm|fork] <params file>`.
pub fn parse_args(args: &[String]) -> Result<Config, String> {
    let usage = || {
        "usage: fjord-nightcore [--workers N] [--check] [--restore] [--isolation warm|fork] <params file>"
            .to_owned()
    };
    let mut config = Config {
        group: Group::Workloads,
        isolation: Isolation::Warm,
        workers: DEFAULT_WORKERS,
        check_only: false,
        params: String::new(),
    };
    let mut isolation = None;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--workers" => {
                let n = rest.next().ok_or_else(usage)?;
                config.workers = n.parse().ok().filter(|&n| n > 0).ok_or_else(usage)?;
            }
            "--check" => config.check_only = true,
            "--restore" => config.group = Group::Restore,
            "--isolation" => {
                isolation = Some(match rest.next().map(String::as_str) {
                    Some("warm") => Isolation::Warm,
                    Some("fork") => Isolation::Fork,
                    _ => return Err(usage()),
                });
            }
            path if !path.starts_with("--") && config.params.is_empty() => {
                config.params = path.to_owned();
            }
            _ => return Err(usage()),
        }
    }
    if config.params.is_empty() {
        return Err(usage());
    }
    config.isolation = isolation.unwrap_or(match config.group {
        Group::Workloads => Isolation::Warm,
        Group::Restore => Isolation::Fork,
    });
    Ok(config)
}

/// Parses the parameters file's text.
pub fn parse_params(text: &str) -> Result<Vec<OpParams>, String> {
    read_lines(
        text,
        "<workload> <operation> <ni_service> <slo>",
        2,
        |names, ni_service, slo| {
            let (workload, name) = (names[0], names[1]);
            let op = workloads::find(workload, name)
                .ok_or_else(|| format!("unknown operation {workload} {name}"))?;
            Ok(OpParams {
                op,
                ni_service,
                slo,
            })
        },
    )
}

/// Reads a parameters file whose lines are `names` words and two nonzero counts (`shape` spells
/// them out for errors): `make` turns each line's words and counts into an entry, or names
/// what it does not know. Empty lines and lines starting with `#` are skipped; errors give the
/// line's number.
pub fn read_lines<T>(
    text: &str,
    shape: &str,
    names: usize,
    mut make: impl FnMut(&[&str], u64, u64) -> Result<T, String>,
) -> Result<Vec<T>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = || format!("line {}: expected `{shape}`: {line}", n + 1);
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.len() != names + 2 {
            return Err(bad());
        }
        let count = |w: &str| w.parse::<u64>().ok().filter(|&v| v != 0).ok_or_else(bad);
        let (a, b) = (count(words[names])?, count(words[names + 1])?);
        out.push(make(&words[..names], a, b).map_err(|e| format!("line {}: {e}", n + 1))?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments() {
        let a = |s: &[&str]| parse_args(&s.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            a(&["p"]).unwrap(),
            Config {
                group: Group::Workloads,
                isolation: Isolation::Warm,
                workers: DEFAULT_WORKERS,
                check_only: false,
                params: "p".into()
            }
        );
        let c = a(&["--workers", "3", "--check", "p"]).unwrap();
        assert_eq!((c.workers, c.check_only, c.params.as_str()), (3, true, "p"));
        assert!(a(&[]).is_err());
        assert!(a(&["--check"]).is_err());
        assert!(a(&["p", "q"]).is_err());
        assert!(a(&["--workers", "0", "p"]).is_err());
        assert!(a(&["--workers", "x", "p"]).is_err());
        assert!(a(&["--fast", "p"]).is_err());
    }

    #[test]
    fn restore_forks_unless_told_and_isolation_is_a_choice() {
        let a = |s: &[&str]| parse_args(&s.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let c = a(&["--restore", "r"]).unwrap();
        assert_eq!(
            (c.group, c.isolation, c.params.as_str()),
            (Group::Restore, Isolation::Fork, "r")
        );
        let c = a(&["r", "--isolation", "warm", "--restore"]).unwrap();
        assert_eq!((c.group, c.isolation), (Group::Restore, Isolation::Warm));
        let c = a(&["--isolation", "fork", "p"]).unwrap();
        assert_eq!((c.group, c.isolation), (Group::Workloads, Isolation::Fork));
        assert!(a(&["--isolation", "p"]).is_err());
        assert!(a(&["--isolation", "none", "p"]).is_err());
        assert!(a(&["--restore"]).is_err());
    }

    #[test]
    fn params_lines() {
        let p = parse_params(
            "# from Fjord\n\nhotel search_nearby 100000 1000000\nmedia read_page 5 50\n",
        )
        .unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(
            (p[0].op.entry, p[0].ni_service, p[0].slo),
            ("hotel-frontend", 100_000, 1_000_000)
        );
        assert_eq!(p[1].op.name, "read_page");
        assert!(
            parse_params("hotel nope 1 2")
                .unwrap_err()
                .contains("unknown")
        );
        assert!(parse_params("hotel search_nearby 1").is_err());
        assert!(parse_params("hotel search_nearby 0 2").is_err());
        assert!(parse_params("hotel search_nearby x 2").is_err());
    }
}
