//! The kernel command line: `key=value` words separated by spaces.
//!
//! | option | values | meaning |
//! |---|---|---|
//! | `mode` | `run` (default), `test`, `bench` | boot to the idle console, run the in-kernel tests, or run the benchmarks |
//! | `log` | `error`, `warn`, `info` (default), `debug`, `trace` | console log level |
//! | `test` | any text | run only the in-kernel tests whose name contains it |
//! | `bench` | any text | run only the benchmark groups whose name contains it |
//! | `bench_clock` | `tsc` (default), `ns` | report benchmark samples as raw TSC deltas (guest instructions under icount) or as nanoseconds of the calibrated TSC (wall time under KVM) |
//! | `modules` | `none` (default), `initrd` | load function modules from the initrd (an initrd is then required) |
//! | `crash` | `panic`, `pagefault` | deliberately crash after boot, to test the failure paths |
//! | `ip` | `A.B.C.D/N` (default `10.0.2.15/24`) | the guest's IPv4 address and prefix length |
//! | `gw` | `A.B.C.D` (default `10.0.2.2`) | the default IPv4 gateway |
//! | `jbsq_k` | 1 to 64 (default 2) | the JBSQ bound: most requests one executor holds at once |
//! | `orch_group` | 0 (default: one group of every CPU), or 2 to 256 | CPUs per orchestrator group (the first of each group orchestrates, the others execute) |
//! | `hops` | `move` (default), `copy` | nested calls move ArgBufs (Jord) or copy them through a kernel channel (the NightCore-like baseline) |
//! | `warm` | `on` (default), `off` | keep idle function instances between requests, restored to a fresh state, or destroy each after its request |
//! | `disk` | `keep` (default), `scratch` | whether the disk is the user's (tests leave it as they found it) or a scratch disk xtask made for one test boot (tests leave files there for the host to check) |
//! | `tags` | `both` (default), `inferred`, `precise` | which emulated capability tags μFork's `fork` relocates by: the kernel's shadow table, inference from values, or their union |
//! | `http_head_timeout_ms` | 100 to 3600000 (default 10000) | time a client has to send a request's head |
//! | `http_body_timeout_ms` | 100 to 3600000 (default 30000) | time a client has to send a request's body once its head is in |
//! | `http_idle_timeout_ms` | 100 to 3600000 (default 60000) | time a keep-alive connection may stay idle between requests |
//! | `http_send_timeout_ms` | 100 to 3600000 (default 30000) | time a client may leave its responses unread (its receive window closed) before the connection is dropped |
//! | `http_max_conns` | 0 (default: from the heap's size), or 1 to 100000 | most HTTP connections served at once |
//!
//! Any other word is an error that names the word and lists the known options.

use core::fmt;

/// What the kernel does once it has booted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Print the banner and idle until QEMU is stopped.
    Run,
    /// Run the in-kernel tests and exit QEMU with their verdict.
    Test,
    /// Run the benchmarks and exit QEMU.
    Bench,
}

/// Console log level (most severe first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    /// Errors only.
    Error,
    /// Errors and warnings.
    Warn,
    /// Informational messages (default).
    Info,
    /// Debugging detail.
    Debug,
    /// Everything.
    Trace,
}

/// Where function modules come from at boot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModuleSource {
    /// No modules are loaded at boot.
    None,
    /// Modules are read from the initrd; an initrd must be present.
    Initrd,
}

/// A deliberate crash, used by the end-to-end tests of the failure paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Crash {
    /// `panic!` after boot.
    Panic,
    /// Read an unmapped kernel address after boot.
    PageFault,
}

/// How nested calls pass ArgBufs (`hops=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hops {
    /// Jord: the ArgBuf moves to the callee by `pmove`.
    Move,
    /// The NightCore-like baseline: request and response are copied through a kernel channel.
    Copy,
}

/// The default JBSQ bound.
pub const DEFAULT_JBSQ_K: usize = 2;
/// The largest JBSQ bound accepted.
pub const MAX_JBSQ_K: usize = 64;

/// The shortest HTTP timeout accepted, in milliseconds.
pub const MIN_HTTP_TIMEOUT_MS: u64 = 100;
/// The longest HTTP timeout accepted, in milliseconds (an hour).
pub const MAX_HTTP_TIMEOUT_MS: u64 = 3_600_000;
/// The largest `http_max_conns` accepted.
pub const MAX_HTTP_CONNS: usize = 100_000;

/// The HTTP gateway's client deadlines and connection limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HttpOptions {
    /// Time a client has to send a request's head (`http_head_timeout_ms=`).
    pub head_timeout_ms: u64,
    /// Time a client has to send a body once its head is in (`http_body_timeout_ms=`).
    pub body_timeout_ms: u64,
    /// Time a keep-alive connection may stay idle (`http_idle_timeout_ms=`).
    pub idle_timeout_ms: u64,
    /// Time a client may take none of its waiting responses (`http_send_timeout_ms=`).
    pub send_timeout_ms: u64,
    /// Most connections served at once; 0 derives it from the heap's size (`http_max_conns=`).
    pub max_conns: usize,
}

impl Default for HttpOptions {
    fn default() -> Self {
        use fjord_faas::gateway::timeouts::{
            DEFAULT_BODY_MS, DEFAULT_HEAD_MS, DEFAULT_IDLE_MS, DEFAULT_SEND_MS,
        };
        HttpOptions {
            head_timeout_ms: DEFAULT_HEAD_MS,
            body_timeout_ms: DEFAULT_BODY_MS,
            idle_timeout_ms: DEFAULT_IDLE_MS,
            send_timeout_ms: DEFAULT_SEND_MS,
            max_conns: 0,
        }
    }
}

/// An IPv4 address and prefix length (`ip=10.0.2.15/24`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Cidr {
    /// The address.
    pub addr: [u8; 4],
    /// The prefix length (0..=32).
    pub prefix_len: u8,
}

/// QEMU user networking's guest address, `10.0.2.15/24`.
pub const DEFAULT_IP: Ipv4Cidr = Ipv4Cidr {
    addr: [10, 0, 2, 15],
    prefix_len: 24,
};
/// QEMU user networking's router, `10.0.2.2`.
pub const DEFAULT_GATEWAY: [u8; 4] = [10, 0, 2, 2];

/// Parses a dotted-quad IPv4 address.
pub fn parse_ipv4(s: &str) -> Option<[u8; 4]> {
    let mut out = [0u8; 4];
    let mut parts = s.split('.');
    for byte in &mut out {
        let p = parts.next()?;
        if p.is_empty() || p.len() > 3 || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        *byte = p.parse().ok()?;
    }
    parts.next().is_none().then_some(out)
}

/// Parses `A.B.C.D/N`.
pub fn parse_cidr(s: &str) -> Option<Ipv4Cidr> {
    let (addr, len) = s.split_once('/')?;
    if len.is_empty() || len.len() > 2 || !len.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let prefix_len: u8 = len.parse().ok().filter(|&n| n <= 32)?;
    Some(Ipv4Cidr {
        addr: parse_ipv4(addr)?,
        prefix_len,
    })
}

/// Options parsed from the command line. The `'a` lifetime borrows filter strings from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BootOptions<'a> {
    /// What to do after boot.
    pub mode: Mode,
    /// Console log level.
    pub log_level: LogLevel,
    /// Substring filter for in-kernel tests.
    pub test_filter: Option<&'a str>,
    /// Whether in-kernel tests marked slow run (`slow_tests=run`, the default) or are reported
    /// as not run (`slow_tests=skip`, for a KVM that emulates the guest's ring 0).
    pub run_slow_tests: bool,
    /// Substring filter for benchmark groups.
    pub bench_filter: Option<&'a str>,
    /// Whether benchmark samples are reported in nanoseconds (`bench_clock=ns`) rather than
    /// as TSC deltas.
    pub bench_ns: bool,
    /// Where function modules come from.
    pub modules: ModuleSource,
    /// A deliberate crash to perform after boot.
    pub crash: Option<Crash>,
    /// The guest's IPv4 address.
    pub ip: Ipv4Cidr,
    /// The default IPv4 gateway.
    pub gateway: [u8; 4],
    /// The JBSQ bound `k`.
    pub jbsq_k: usize,
    /// How nested calls pass ArgBufs.
    pub hops: Hops,
    /// CPUs per orchestrator group (0: one group).
    pub orch_group: usize,
    /// Whether idle function instances are kept for reuse (`warm=`).
    pub warm: bool,
    /// A program to start as a μprocess once the kernel is up (`init=<name>`, `mode=run`).
    pub init: Option<&'a str>,
    /// Which emulated tags μFork's `fork` relocates by (`tags=`).
    pub tags: fjord_ufork::source::TagChoice,
    /// The disk is a scratch disk of this boot (`disk=scratch`): tests may leave files on it.
    pub scratch_disk: bool,
    /// The HTTP gateway's deadlines and connection limit.
    pub http: HttpOptions,
    /// This VM's number in a cluster (`node=`), under which it joins the shared CXL region.
    pub node: u32,
    /// The tiering every clone of a function gets (`cxl_tiering=`), instead of CXLporter's
    /// choice (`None`, `auto`).
    pub cxl_tiering: Option<fjord_cxl::Tiering>,
}

impl Default for BootOptions<'_> {
    fn default() -> Self {
        BootOptions {
            mode: Mode::Run,
            log_level: LogLevel::Info,
            test_filter: None,
            run_slow_tests: true,
            bench_filter: None,
            bench_ns: false,
            modules: ModuleSource::None,
            crash: None,
            ip: DEFAULT_IP,
            gateway: DEFAULT_GATEWAY,
            jbsq_k: DEFAULT_JBSQ_K,
            hops: Hops::Move,
            orch_group: 0,
            warm: true,
            scratch_disk: false,
            init: None,
            tags: fjord_ufork::source::TagChoice::Both,
            http: HttpOptions::default(),
            node: 0,
            cxl_tiering: None,
        }
    }
}

/// The option names the parser knows, for error messages.
pub const KNOWN_OPTIONS: &str = "mode, log, test, slow_tests, bench, node, cxl_tiering, bench_clock, modules, crash, ip, gw, jbsq_k, hops, orch_group, warm, init, tags, disk, \
     http_head_timeout_ms, http_body_timeout_ms, http_idle_timeout_ms, http_send_timeout_ms, http_max_conns";

/// Why a command line was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmdlineError<'a> {
    /// A word whose key is not a known option.
    UnknownOption(&'a str),
    /// A known option with a value it does not accept.
    BadValue {
        /// The option.
        key: &'a str,
        /// The rejected value.
        value: &'a str,
        /// The accepted values.
        expected: &'static str,
    },
    /// A known option given without `=value`.
    MissingValue(&'a str),
}

impl fmt::Display for CmdlineError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CmdlineError::UnknownOption(word) => write!(
                f,
                "unknown command-line option '{word}' (known options: {KNOWN_OPTIONS})"
            ),
            CmdlineError::BadValue {
                key,
                value,
                expected,
            } => write!(
                f,
                "bad value '{value}' for command-line option '{key}' (expected one of: {expected})"
            ),
            CmdlineError::MissingValue(key) => {
                write!(f, "command-line option '{key}' needs a value ('{key}=...')")
            }
        }
    }
}

/// Parses a command line into [`BootOptions`].
pub fn parse(line: &str) -> Result<BootOptions<'_>, CmdlineError<'_>> {
    let mut opts = BootOptions::default();
    for word in line.split_ascii_whitespace() {
        let (key, value) = match word.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (word, None),
        };
        let known = [
            "mode",
            "log",
            "test",
            "slow_tests",
            "node",
            "cxl_tiering",
            "bench",
            "bench_clock",
            "modules",
            "crash",
            "ip",
            "gw",
            "jbsq_k",
            "hops",
            "orch_group",
            "warm",
            "init",
            "tags",
            "disk",
            "http_head_timeout_ms",
            "http_body_timeout_ms",
            "http_idle_timeout_ms",
            "http_send_timeout_ms",
            "http_max_conns",
        ];
        if !known.contains(&key) {
            return Err(CmdlineError::UnknownOption(word));
        }
        let value = value.ok_or(CmdlineError::MissingValue(key))?;
        let bad = |expected| CmdlineError::BadValue {
            key,
            value,
            expected,
        };
        match key {
            "mode" => {
                opts.mode = match value {
                    "run" => Mode::Run,
                    "test" => Mode::Test,
                    "bench" => Mode::Bench,
                    _ => return Err(bad("run, test, bench")),
                }
            }
            "log" => {
                opts.log_level = match value {
                    "error" => LogLevel::Error,
                    "warn" => LogLevel::Warn,
                    "info" => LogLevel::Info,
                    "debug" => LogLevel::Debug,
                    "trace" => LogLevel::Trace,
                    _ => return Err(bad("error, warn, info, debug, trace")),
                }
            }
            "test" => opts.test_filter = Some(value),
            "node" => {
                opts.node = value
                    .parse()
                    .ok()
                    .filter(|&n: &u32| n < 1 << 16)
                    .ok_or(bad("a number from 0 to 65535"))?
            }
            "cxl_tiering" => {
                opts.cxl_tiering = match value {
                    "auto" => None,
                    v => Some(
                        fjord_cxl::Tiering::from_name(v)
                            .ok_or(bad("auto, write, access, hybrid"))?,
                    ),
                }
            }
            "slow_tests" => {
                opts.run_slow_tests = match value {
                    "run" => true,
                    "skip" => false,
                    _ => return Err(bad("run, skip")),
                }
            }
            "bench" => opts.bench_filter = Some(value),
            "init" => opts.init = Some(value),
            "modules" => {
                opts.modules = match value {
                    "none" => ModuleSource::None,
                    "initrd" => ModuleSource::Initrd,
                    _ => return Err(bad("none, initrd")),
                }
            }
            "crash" => {
                opts.crash = Some(match value {
                    "panic" => Crash::Panic,
                    "pagefault" => Crash::PageFault,
                    _ => return Err(bad("panic, pagefault")),
                })
            }
            "ip" => {
                opts.ip =
                    parse_cidr(value).ok_or(bad("an IPv4 address/prefix, e.g. 10.0.2.15/24"))?
            }
            "gw" => {
                opts.gateway = parse_ipv4(value).ok_or(bad("an IPv4 address, e.g. 10.0.2.2"))?
            }
            "jbsq_k" => {
                opts.jbsq_k = value
                    .parse()
                    .ok()
                    .filter(|k| (1..=MAX_JBSQ_K).contains(k))
                    .ok_or(bad("a number from 1 to 64"))?
            }
            "orch_group" => {
                opts.orch_group = value
                    .parse()
                    .ok()
                    .filter(|&n: &usize| n == 0 || (2..=256).contains(&n))
                    .ok_or(bad("0, or a number from 2 to 256"))?
            }
            "hops" => {
                opts.hops = match value {
                    "move" => Hops::Move,
                    "copy" => Hops::Copy,
                    _ => return Err(bad("move, copy")),
                }
            }
            "bench_clock" => {
                opts.bench_ns = match value {
                    "tsc" => false,
                    "ns" => true,
                    _ => return Err(bad("tsc, ns")),
                }
            }
            "tags" => {
                opts.tags = fjord_ufork::source::TagChoice::parse(value)
                    .ok_or(bad("both, inferred, precise"))?;
            }
            "disk" => {
                opts.scratch_disk = match value {
                    "keep" => false,
                    "scratch" => true,
                    _ => return Err(bad("keep, scratch")),
                }
            }
            "warm" => {
                opts.warm = match value {
                    "on" => true,
                    "off" => false,
                    _ => return Err(bad("on, off")),
                }
            }
            "http_head_timeout_ms"
            | "http_body_timeout_ms"
            | "http_idle_timeout_ms"
            | "http_send_timeout_ms" => {
                let ms = value
                    .parse()
                    .ok()
                    .filter(|ms| (MIN_HTTP_TIMEOUT_MS..=MAX_HTTP_TIMEOUT_MS).contains(ms))
                    .ok_or(bad("a number of milliseconds from 100 to 3600000"))?;
                match key {
                    "http_head_timeout_ms" => opts.http.head_timeout_ms = ms,
                    "http_body_timeout_ms" => opts.http.body_timeout_ms = ms,
                    "http_idle_timeout_ms" => opts.http.idle_timeout_ms = ms,
                    _ => opts.http.send_timeout_ms = ms,
                }
            }
            "http_max_conns" => {
                opts.http.max_conns = value
                    .parse()
                    .ok()
                    .filter(|&n: &usize| n <= MAX_HTTP_CONNS)
                    .ok_or(bad(
                        "0 (from the heap's size), or a number from 1 to 100000",
                    ))?
            }
            _ => unreachable!("key checked against the known list"),
        }
    }
    Ok(opts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn runtime_options() {
        assert!(parse("disk=scratch").unwrap().scratch_disk);
        assert!(!parse("disk=keep").unwrap().scratch_disk && !parse("").unwrap().scratch_disk);
        assert!(parse("disk=maybe").is_err());
        let o = parse("jbsq_k=4 hops=copy orch_group=2 warm=off").unwrap();
        assert_eq!(
            (o.jbsq_k, o.hops, o.orch_group, o.warm),
            (4, Hops::Copy, 2, false)
        );
        assert!(parse("").unwrap().warm);
        assert_eq!(
            parse("tags=precise").unwrap().tags,
            fjord_ufork::source::TagChoice::Precise
        );
        assert_eq!(
            parse("").unwrap().tags,
            fjord_ufork::source::TagChoice::Both
        );
        assert!(!parse("").unwrap().bench_ns);
        assert!(parse("bench_clock=ns").unwrap().bench_ns);
        assert!(!parse("bench_clock=tsc").unwrap().bench_ns);
        assert_eq!(parse("").unwrap().jbsq_k, DEFAULT_JBSQ_K);
        for bad in [
            "jbsq_k=0",
            "jbsq_k=65",
            "jbsq_k=x",
            "hops=share",
            "warm=maybe",
            "tags=cheri",
            "bench_clock=cycles",
            "orch_group=1",
        ] {
            assert!(
                matches!(parse(bad), Err(CmdlineError::BadValue { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn http_options() {
        let o = parse("http_head_timeout_ms=1500 http_body_timeout_ms=2500 http_idle_timeout_ms=100 http_send_timeout_ms=700 http_max_conns=8").unwrap();
        assert_eq!(
            o.http,
            HttpOptions {
                head_timeout_ms: 1500,
                body_timeout_ms: 2500,
                idle_timeout_ms: 100,
                send_timeout_ms: 700,
                max_conns: 8
            }
        );
        let d = parse("").unwrap().http;
        assert_eq!(
            (
                d.head_timeout_ms,
                d.body_timeout_ms,
                d.idle_timeout_ms,
                d.send_timeout_ms,
                d.max_conns
            ),
            (10_000, 30_000, 60_000, 30_000, 0)
        );
        for bad in [
            "http_head_timeout_ms=99",
            "http_body_timeout_ms=3600001",
            "http_idle_timeout_ms=x",
            "http_send_timeout_ms=50",
            "http_head_timeout_ms=-1",
            "http_max_conns=100001",
            "http_max_conns=many",
        ] {
            assert!(
                matches!(parse(bad), Err(CmdlineError::BadValue { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn empty_line_gives_defaults() {
        assert_eq!(parse("").unwrap(), BootOptions::default());
        assert_eq!(parse("   ").unwrap(), BootOptions::default());
    }

    #[test]
    fn parses_every_option() {
        let o = parse("mode=test log=debug test=smp bench=pd modules=initrd crash=panic").unwrap();
        assert_eq!(o.mode, Mode::Test);
        assert_eq!(o.log_level, LogLevel::Debug);
        assert_eq!(o.test_filter, Some("smp"));
        assert_eq!(o.bench_filter, Some("pd"));
        assert_eq!(parse("init=forktest").unwrap().init, Some("forktest"));
        assert_eq!(o.init, None);
        assert_eq!(o.modules, ModuleSource::Initrd);
        assert_eq!(o.crash, Some(Crash::Panic));
        assert!(o.run_slow_tests);
        assert!(!parse("slow_tests=skip").unwrap().run_slow_tests);
        assert!(parse("slow_tests=maybe").is_err());
        assert_eq!(parse("node=3").unwrap().node, 3);
        assert_eq!(
            parse("cxl_tiering=access").unwrap().cxl_tiering,
            Some(fjord_cxl::Tiering::MigrateOnAccess)
        );
        assert_eq!(parse("cxl_tiering=auto").unwrap().cxl_tiering, None);
        assert!(parse("cxl_tiering=fast").is_err());
        assert!(parse("node=x").is_err());
        assert!(parse("node=70000").is_err());
    }

    #[test]
    fn parses_network_options() {
        let o = parse("").unwrap();
        assert_eq!((o.ip, o.gateway), (DEFAULT_IP, DEFAULT_GATEWAY));
        let o = parse("ip=192.168.1.20/16 gw=192.168.0.1").unwrap();
        assert_eq!(
            o.ip,
            Ipv4Cidr {
                addr: [192, 168, 1, 20],
                prefix_len: 16
            }
        );
        assert_eq!(o.gateway, [192, 168, 0, 1]);
        for bad in [
            "ip=10.0.2.15",
            "ip=10.0.2.15/33",
            "ip=10.0.2/24",
            "ip=10.0.2.256/24",
            "ip=10.0.2.15.1/24",
            "ip=a.b.c.d/8",
            "ip=1.2.3.4/+8",
            "gw=10.0.2",
            "gw=10.0.2.2/24",
            "gw=",
        ] {
            assert!(
                matches!(parse(bad), Err(CmdlineError::BadValue { .. })),
                "{bad} was accepted"
            );
        }
    }

    #[test]
    fn unknown_option_is_named_in_the_error() {
        let e = parse("mode=run bogus=1").unwrap_err();
        assert_eq!(e, CmdlineError::UnknownOption("bogus=1"));
        let msg = e.to_string();
        assert!(
            msg.contains("unknown command-line option 'bogus=1'"),
            "{msg}"
        );
        assert!(msg.contains("mode, log"), "{msg}");
    }

    #[test]
    fn bad_and_missing_values_are_rejected() {
        assert!(matches!(
            parse("mode=fly"),
            Err(CmdlineError::BadValue { key: "mode", .. })
        ));
        assert_eq!(parse("mode"), Err(CmdlineError::MissingValue("mode")));
        assert!(
            parse("log=loud")
                .unwrap_err()
                .to_string()
                .contains("expected one of")
        );
    }
}
