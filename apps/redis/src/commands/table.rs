//! The command table: each command's name, arity and flags as Redis 7.0.15's `commands.c`
//! declares them, its key positions as `COMMAND` reports them, and its subcommands.
//!
//! Arity follows Redis: `n > 0` exactly `n` arguments (the name included), `n < 0` at least
//! `-n`. Names are matched ASCII case-insensitively.

/// Every command and subcommand this server runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmd {
    /// `APPEND`.
    Append,
    /// `BGSAVE`.
    Bgsave,
    /// `CLIENT`.
    Client,
    /// `CLIENT GETNAME`.
    ClientGetname,
    /// `CLIENT HELP`.
    ClientHelp,
    /// `CLIENT ID`.
    ClientId,
    /// `CLIENT SETNAME`.
    ClientSetname,
    /// `COMMAND`.
    Command,
    /// `COMMAND COUNT`.
    CommandCount,
    /// `COMMAND DOCS`.
    CommandDocs,
    /// `COMMAND HELP`.
    CommandHelp,
    /// `COMMAND INFO`.
    CommandInfo,
    /// `CONFIG`.
    Config,
    /// `CONFIG GET`.
    ConfigGet,
    /// `CONFIG HELP`.
    ConfigHelp,
    /// `CONFIG RESETSTAT`.
    ConfigResetstat,
    /// `CONFIG SET`.
    ConfigSet,
    /// `DBSIZE`.
    Dbsize,
    /// `DECR`.
    Decr,
    /// `DECRBY`.
    Decrby,
    /// `DEL`.
    Del,
    /// `ECHO`.
    Echo,
    /// `EXISTS`.
    Exists,
    /// `EXPIRE`.
    Expire,
    /// `EXPIREAT`.
    Expireat,
    /// `EXPIRETIME`.
    Expiretime,
    /// `FLUSHALL`.
    Flushall,
    /// `FLUSHDB`.
    Flushdb,
    /// `GET`.
    Get,
    /// `GETDEL`.
    Getdel,
    /// `GETSET`.
    Getset,
    /// `INCR`.
    Incr,
    /// `INCRBY`.
    Incrby,
    /// `INFO`.
    Info,
    /// `KEYS`.
    Keys,
    /// `LASTSAVE`.
    Lastsave,
    /// `MGET`.
    Mget,
    /// `MSET`.
    Mset,
    /// `MSETNX`.
    Msetnx,
    /// `PERSIST`.
    Persist,
    /// `PEXPIRE`.
    Pexpire,
    /// `PEXPIREAT`.
    Pexpireat,
    /// `PEXPIRETIME`.
    Pexpiretime,
    /// `PING`.
    Ping,
    /// `PSETEX`.
    Psetex,
    /// `PTTL`.
    Pttl,
    /// `QUIT`.
    Quit,
    /// `SAVE`.
    Save,
    /// `SELECT`.
    Select,
    /// `SET`.
    Set,
    /// `SETEX`.
    Setex,
    /// `SETNX`.
    Setnx,
    /// `SHUTDOWN`.
    Shutdown,
    /// `STRLEN`.
    Strlen,
    /// `TIME`.
    Time,
    /// `TOUCH`.
    Touch,
    /// `TTL`.
    Ttl,
    /// `TYPE`.
    Type,
    /// `UNLINK`.
    Unlink,
}

/// One command's entry.
#[derive(Debug)]
pub struct Spec {
    /// Its full name in lower case (`config|get` for a subcommand), as errors print it.
    pub name: &'static str,
    /// What runs.
    pub cmd: Cmd,
    /// Its arity.
    pub arity: i32,
    /// Its flags, as `COMMAND` lists them.
    pub flags: &'static [&'static str],
    /// Its first key, last key (negative: from the end) and step, as `COMMAND` lists them.
    pub keys: (i64, i64, i64),
    /// Its subcommands (a container command has no code of its own).
    pub subcommands: &'static [Spec],
}

impl Spec {
    /// Whether `argc` arguments satisfy its arity.
    pub fn arity_ok(&self, argc: usize) -> bool {
        let argc = argc as i64;
        let arity = i64::from(self.arity);
        if arity >= 0 {
            argc == arity
        } else {
            argc >= -arity
        }
    }

    /// Whether it may be refused when memory is over `maxmemory` (`denyoom`).
    pub fn deny_oom(&self) -> bool {
        self.flags.contains(&"denyoom")
    }

    /// Its name without the container's (`get` for `config|get`).
    pub fn short_name(&self) -> &'static str {
        self.name.rsplit('|').next().unwrap_or(self.name)
    }
}

const W: &[&str] = &["write"];
const WF: &[&str] = &["write", "fast"];
const WD: &[&str] = &["write", "denyoom"];
const WDF: &[&str] = &["write", "denyoom", "fast"];
const RF: &[&str] = &["readonly", "fast"];
const R: &[&str] = &["readonly"];
const LSF: &[&str] = &["loading", "stale", "fast"];
const LS: &[&str] = &["loading", "stale"];
const ADMIN: &[&str] = &["admin", "noscript", "loading", "stale"];
const NOKEYS: (i64, i64, i64) = (0, 0, 0);
const ONE: (i64, i64, i64) = (1, 1, 1);
const ALL: (i64, i64, i64) = (1, -1, 1);
const PAIRS: (i64, i64, i64) = (1, -1, 2);

const fn spec(
    name: &'static str,
    cmd: Cmd,
    arity: i32,
    flags: &'static [&'static str],
    keys: (i64, i64, i64),
) -> Spec {
    Spec {
        name,
        cmd,
        arity,
        flags,
        keys,
        subcommands: &[],
    }
}

const CLIENT_SUBCOMMANDS: &[Spec] = &[
    spec(
        "client|getname",
        Cmd::ClientGetname,
        2,
        &["noscript", "loading", "stale"],
        NOKEYS,
    ),
    spec("client|help", Cmd::ClientHelp, 2, LS, NOKEYS),
    spec(
        "client|id",
        Cmd::ClientId,
        2,
        &["noscript", "loading", "stale"],
        NOKEYS,
    ),
    spec(
        "client|setname",
        Cmd::ClientSetname,
        3,
        &["noscript", "loading", "stale"],
        NOKEYS,
    ),
];

const COMMAND_SUBCOMMANDS: &[Spec] = &[
    spec("command|count", Cmd::CommandCount, 2, LS, NOKEYS),
    spec("command|docs", Cmd::CommandDocs, -2, LS, NOKEYS),
    spec("command|help", Cmd::CommandHelp, 2, LS, NOKEYS),
    spec("command|info", Cmd::CommandInfo, -2, LS, NOKEYS),
];

const CONFIG_SUBCOMMANDS: &[Spec] = &[
    spec("config|get", Cmd::ConfigGet, -3, ADMIN, NOKEYS),
    spec("config|help", Cmd::ConfigHelp, 2, LS, NOKEYS),
    spec("config|resetstat", Cmd::ConfigResetstat, 2, ADMIN, NOKEYS),
    spec("config|set", Cmd::ConfigSet, -4, ADMIN, NOKEYS),
];

/// The commands, sorted by name.
pub const COMMANDS: &[Spec] = &[
    spec("append", Cmd::Append, 3, WDF, ONE),
    spec(
        "bgsave",
        Cmd::Bgsave,
        -1,
        &["admin", "noscript", "no_async_loading"],
        NOKEYS,
    ),
    Spec {
        name: "client",
        cmd: Cmd::Client,
        arity: -2,
        flags: &[],
        keys: NOKEYS,
        subcommands: CLIENT_SUBCOMMANDS,
    },
    Spec {
        name: "command",
        cmd: Cmd::Command,
        arity: -1,
        flags: LS,
        keys: NOKEYS,
        subcommands: COMMAND_SUBCOMMANDS,
    },
    Spec {
        name: "config",
        cmd: Cmd::Config,
        arity: -2,
        flags: &[],
        keys: NOKEYS,
        subcommands: CONFIG_SUBCOMMANDS,
    },
    spec("dbsize", Cmd::Dbsize, 1, RF, NOKEYS),
    spec("decr", Cmd::Decr, 2, WDF, ONE),
    spec("decrby", Cmd::Decrby, 3, WDF, ONE),
    spec("del", Cmd::Del, -2, W, ALL),
    spec("echo", Cmd::Echo, 2, LSF, NOKEYS),
    spec("exists", Cmd::Exists, -2, RF, ALL),
    spec("expire", Cmd::Expire, -3, WF, ONE),
    spec("expireat", Cmd::Expireat, -3, WF, ONE),
    spec("expiretime", Cmd::Expiretime, 2, RF, ONE),
    spec("flushall", Cmd::Flushall, -1, W, NOKEYS),
    spec("flushdb", Cmd::Flushdb, -1, W, NOKEYS),
    spec("get", Cmd::Get, 2, RF, ONE),
    spec("getdel", Cmd::Getdel, 2, WF, ONE),
    spec("getset", Cmd::Getset, 3, WDF, ONE),
    spec("incr", Cmd::Incr, 2, WDF, ONE),
    spec("incrby", Cmd::Incrby, 3, WDF, ONE),
    spec("info", Cmd::Info, -1, LS, NOKEYS),
    spec("keys", Cmd::Keys, 2, R, NOKEYS),
    spec("lastsave", Cmd::Lastsave, 1, LSF, NOKEYS),
    spec("mget", Cmd::Mget, -2, RF, ALL),
    spec("mset", Cmd::Mset, -3, WD, PAIRS),
    spec("msetnx", Cmd::Msetnx, -3, WD, PAIRS),
    spec("persist", Cmd::Persist, 2, WF, ONE),
    spec("pexpire", Cmd::Pexpire, -3, WF, ONE),
    spec("pexpireat", Cmd::Pexpireat, -3, WF, ONE),
    spec("pexpiretime", Cmd::Pexpiretime, 2, RF, ONE),
    spec("ping", Cmd::Ping, -1, &["fast"], NOKEYS),
    spec("psetex", Cmd::Psetex, 4, WD, ONE),
    spec("pttl", Cmd::Pttl, 2, RF, ONE),
    spec(
        "quit",
        Cmd::Quit,
        -1,
        &[
            "allow_busy",
            "noscript",
            "loading",
            "stale",
            "fast",
            "no_auth",
        ],
        NOKEYS,
    ),
    spec(
        "save",
        Cmd::Save,
        1,
        &["admin", "noscript", "no_async_loading", "no_multi"],
        NOKEYS,
    ),
    spec("select", Cmd::Select, 2, LSF, NOKEYS),
    spec("set", Cmd::Set, -3, WD, ONE),
    spec("setex", Cmd::Setex, 4, WD, ONE),
    spec("setnx", Cmd::Setnx, 3, WDF, ONE),
    spec(
        "shutdown",
        Cmd::Shutdown,
        -1,
        &[
            "admin",
            "noscript",
            "loading",
            "stale",
            "no_multi",
            "allow_busy",
        ],
        NOKEYS,
    ),
    spec("strlen", Cmd::Strlen, 2, RF, ONE),
    spec("time", Cmd::Time, 1, LSF, NOKEYS),
    spec("touch", Cmd::Touch, -2, RF, ALL),
    spec("ttl", Cmd::Ttl, 2, RF, ONE),
    spec("type", Cmd::Type, 2, RF, ONE),
    spec("unlink", Cmd::Unlink, -2, WF, ALL),
];

/// The longest name looked up (longer ones are unknown).
const MAX_NAME: usize = 16;

/// `name` in lower case, if it is short enough to be a command's.
fn lower(name: &[u8]) -> Option<([u8; MAX_NAME], usize)> {
    if name.len() > MAX_NAME {
        return None;
    }
    let mut buf = [0u8; MAX_NAME];
    for (d, s) in buf.iter_mut().zip(name) {
        *d = s.to_ascii_lowercase();
    }
    Some((buf, name.len()))
}

/// The top-level command called `name` (any case).
pub fn find(name: &[u8]) -> Option<&'static Spec> {
    let (buf, len) = lower(name)?;
    let name = &buf[..len];
    COMMANDS
        .binary_search_by(|s| s.name.as_bytes().cmp(name))
        .ok()
        .map(|i| &COMMANDS[i])
}

/// The subcommand `sub` (any case) of `container`.
pub fn find_subcommand(container: &'static Spec, sub: &[u8]) -> Option<&'static Spec> {
    let (buf, len) = lower(sub)?;
    let sub = &buf[..len];
    container
        .subcommands
        .iter()
        .find(|s| s.short_name().as_bytes() == sub)
}

/// What the arguments name.
#[derive(Debug)]
pub enum Lookup {
    /// A command (or subcommand).
    Found(&'static Spec),
    /// No command of that name.
    UnknownCommand,
    /// A container command without that subcommand.
    UnknownSubcommand,
}

/// The command `args` name, as Redis's `lookupCommand` finds it: a container with a second
/// argument names a subcommand.
pub fn lookup(args: &[alloc::vec::Vec<u8>]) -> Lookup {
    let Some(spec) = args.first().and_then(|n| find(n)) else {
        return Lookup::UnknownCommand;
    };
    if spec.subcommands.is_empty() || args.len() == 1 {
        return Lookup::Found(spec);
    }
    match find_subcommand(spec, &args[1]) {
        Some(sub) => Lookup::Found(sub),
        None => Lookup::UnknownSubcommand,
    }
}

/// The full name `name` (`get`, `config|get`) looks up, as `COMMAND INFO` takes it.
pub fn find_by_full_name(name: &[u8]) -> Option<&'static Spec> {
    let mut parts = name.splitn(2, |&c| c == b'|');
    let base = find(parts.next()?)?;
    match parts.next() {
        None => Some(base),
        Some(sub) => find_subcommand(base, sub),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_and_consistent() {
        for pair in COMMANDS.windows(2) {
            assert!(
                pair[0].name < pair[1].name,
                "{} {}",
                pair[0].name,
                pair[1].name
            );
        }
        for s in COMMANDS {
            assert!(s.name.len() <= MAX_NAME);
            assert_eq!(s.name, s.name.to_ascii_lowercase());
            for sub in s.subcommands {
                assert!(sub.name.starts_with(s.name));
                assert!(sub.name[s.name.len()..].starts_with('|'));
            }
        }
    }

    #[test]
    fn lookups() {
        assert_eq!(find(b"GeT").map(|s| s.cmd), Some(Cmd::Get));
        assert!(find(b"nope").is_none());
        assert!(find(b"averyveryverylongname").is_none());
        let args = |a: &[&str]| {
            a.iter()
                .map(|s| s.as_bytes().to_vec())
                .collect::<alloc::vec::Vec<_>>()
        };
        assert!(
            matches!(lookup(&args(&["config", "GET", "save"])), Lookup::Found(s) if s.cmd == Cmd::ConfigGet)
        );
        assert!(matches!(lookup(&args(&["config"])), Lookup::Found(s) if s.cmd == Cmd::Config));
        assert!(matches!(
            lookup(&args(&["config", "nope"])),
            Lookup::UnknownSubcommand
        ));
        assert!(matches!(lookup(&args(&["nope"])), Lookup::UnknownCommand));
        assert_eq!(
            find_by_full_name(b"config|set").map(|s| s.cmd),
            Some(Cmd::ConfigSet)
        );
        assert!(find(b"set").unwrap().arity_ok(3));
        assert!(!find(b"set").unwrap().arity_ok(2));
        assert!(find(b"get").unwrap().arity_ok(2));
        assert!(!find(b"get").unwrap().arity_ok(3));
        assert_eq!(find(b"set").unwrap().short_name(), "set");
        assert_eq!(
            find_by_full_name(b"config|get").unwrap().short_name(),
            "get"
        );
    }
}
