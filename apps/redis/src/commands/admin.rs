//! Connection and server commands: `PING`, `TIME`, `SAVE`, `BGSAVE`, `SHUTDOWN`, `CONFIG GET`
//! / `SET` / `RESETSTAT`, `COMMAND` / `COUNT` / `DOCS` / `INFO`, `CLIENT GETNAME` / `SETNAME`
//! and the containers' `HELP`.
//!
//! `CONFIG GET` knows these parameters (values as this server runs): `appendonly` (`no`),
//! `databases` (`1`), `dbfilename` (`dump.rdb`), `maxclients`, `maxmemory`,
//! `maxmemory-policy` (`noeviction`), `port`, `proto-max-bulk-len` (16 MiB),
//! `rdb-key-save-delay` (`0`), `rdbchecksum` (`yes`), `rdbcompression` (`no`), `save` (Redis
//! 7.0's default, `3600 1 300 100 60 10000`), `stop-writes-on-bgsave-error` (`no`).
//! `CONFIG SET` changes `save`, `maxmemory` and `rdb-key-save-delay`; setting another to its
//! current value is accepted, to anything else refused.
//!
//! `rdb-key-save-delay` is one of Redis's hidden parameters (`HIDDEN_CONFIG`): `CONFIG GET`
//! gives it for its exact name only, never for a pattern (`CONFIG GET rdb*` leaves it out).
//! Its value is an integer from -2147483648 to 2147483647 (`string2ll`'s syntax), as Redis's
//! `int` configurations take it.

use super::table::{self, Spec};
use super::{Ctx, Outcome, SYNTAX_ERROR, ShutdownSave, eq_ci, wrong_arity_name};
use crate::glob;
use crate::num::{i64_to_vec, parse_i64, push_u64};
use crate::resp::{MAX_BULK, Reply};
use crate::state::SavePoint;
use alloc::vec;
use alloc::vec::Vec;

/// `PING [message]`.
pub fn ping(args: &[Vec<u8>]) -> Reply {
    match args {
        [_] => Reply::Status("PONG"),
        [_, msg] => Reply::bulk(msg),
        _ => wrong_arity_name("ping"),
    }
}

/// `TIME`: Unix seconds and microseconds, as bulk strings.
pub fn time(ctx: &Ctx<'_>) -> Reply {
    let ms = ctx.now.unix_ms;
    Reply::Array(vec![
        Reply::Bulk(i64_to_vec(ms.div_euclid(1000))),
        Reply::Bulk(i64_to_vec(ms.rem_euclid(1000) * 1000)),
    ])
}

/// `SAVE` and `BGSAVE [SCHEDULE]`.
pub fn save(ctx: &mut Ctx<'_>, args: &[Vec<u8>], spec: &Spec) -> Outcome {
    let background = spec.cmd == table::Cmd::Bgsave;
    if background && args.len() > 1 && !(args.len() == 2 && eq_ci(&args[1], "schedule")) {
        return Outcome::Reply(SYNTAX_ERROR);
    }
    if ctx.state.persistence.child.is_some() {
        return Outcome::Reply(Reply::error("ERR Background save already in progress"));
    }
    if background {
        Outcome::BgSave
    } else {
        Outcome::Save
    }
}

/// `SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE]` (`ABORT`: no shutdown is ever in progress).
pub fn shutdown(args: &[Vec<u8>]) -> Outcome {
    let (mut nosave, mut save, mut force, mut abort, mut flags) =
        (false, false, false, false, false);
    for arg in &args[1..] {
        if eq_ci(arg, "nosave") {
            nosave = true;
        } else if eq_ci(arg, "save") {
            save = true;
        } else if eq_ci(arg, "now") {
        } else if eq_ci(arg, "force") {
            force = true;
        } else if eq_ci(arg, "abort") {
            abort = true;
            continue;
        } else {
            return Outcome::Reply(SYNTAX_ERROR);
        }
        flags = true;
    }
    if (abort && flags) || (nosave && save) {
        return Outcome::Reply(SYNTAX_ERROR);
    }
    if abort {
        return Outcome::Reply(Reply::error("ERR No shutdown in progress."));
    }
    let save = if nosave {
        ShutdownSave::NoSave
    } else if save {
        ShutdownSave::Save
    } else {
        ShutdownSave::Default
    };
    Outcome::Shutdown { save, force }
}

/// The parameters `CONFIG GET` knows.
const PARAMETERS: &[&str] = &[
    "appendonly",
    "databases",
    "dbfilename",
    "maxclients",
    "maxmemory",
    "maxmemory-policy",
    "port",
    "proto-max-bulk-len",
    "rdb-key-save-delay",
    "rdbchecksum",
    "rdbcompression",
    "save",
    "stop-writes-on-bgsave-error",
];

/// The parameters a pattern never matches (Redis's `HIDDEN_CONFIG`): only their exact name
/// gets them.
const HIDDEN: &[&str] = &["rdb-key-save-delay"];

/// The value of parameter `name`.
fn parameter(ctx: &Ctx<'_>, name: &str) -> Vec<u8> {
    let config = &ctx.state.config;
    let number = |n: u64| {
        let mut v = Vec::new();
        push_u64(&mut v, n);
        v
    };
    match name {
        "appendonly" | "rdbcompression" | "stop-writes-on-bgsave-error" => b"no".to_vec(),
        "databases" => b"1".to_vec(),
        "dbfilename" => b"dump.rdb".to_vec(),
        "maxclients" => number(config.maxclients as u64),
        "maxmemory" => number(config.maxmemory),
        "maxmemory-policy" => b"noeviction".to_vec(),
        "port" => number(u64::from(config.port)),
        "proto-max-bulk-len" => number(MAX_BULK as u64),
        "rdb-key-save-delay" => i64_to_vec(i64::from(config.rdb_key_save_delay)),
        "rdbchecksum" => b"yes".to_vec(),
        "save" => {
            let mut v = Vec::new();
            for (i, sp) in config.save_points.iter().enumerate() {
                if i > 0 {
                    v.push(b' ');
                }
                push_u64(&mut v, sp.seconds);
                v.push(b' ');
                push_u64(&mut v, sp.changes);
            }
            v
        }
        _ => Vec::new(),
    }
}

fn find_parameter(name: &[u8]) -> Option<&'static str> {
    PARAMETERS
        .iter()
        .copied()
        .find(|p| name.eq_ignore_ascii_case(p.as_bytes()))
}

/// `CONFIG GET pattern [pattern ...]`: a flat array of names and values.
pub fn config_get(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let mut matched = [false; PARAMETERS.len()];
    for pattern in &args[2..] {
        let is_glob = pattern.iter().any(|c| matches!(c, b'[' | b'*' | b'?'));
        for (i, p) in PARAMETERS.iter().enumerate() {
            if if is_glob {
                !HIDDEN.contains(p) && glob::matches(pattern, p.as_bytes(), true)
            } else {
                pattern.eq_ignore_ascii_case(p.as_bytes())
            } {
                matched[i] = true;
            }
        }
    }
    let mut out = Vec::new();
    for (i, p) in PARAMETERS.iter().enumerate() {
        if matched[i] {
            out.push(Reply::bulk(p.as_bytes()));
            out.push(Reply::Bulk(parameter(ctx, p)));
        }
    }
    Reply::Array(out)
}

/// Parses `save`'s value (`setConfigSaveOption`): pairs of seconds (at least 1) and changes.
fn parse_save(value: &[u8]) -> Option<Vec<SavePoint>> {
    let words: Vec<&[u8]> = value
        .split(|c| c.is_ascii_whitespace())
        .filter(|w| !w.is_empty())
        .collect();
    if !words.len().is_multiple_of(2) {
        return None;
    }
    let num = |w: &[u8]| -> Option<u64> {
        let s = core::str::from_utf8(w).ok()?;
        s.parse::<u64>().ok()
    };
    words
        .chunks(2)
        .map(|pair| {
            let seconds = num(pair[0]).filter(|&s| s >= 1)?;
            let changes = num(pair[1])?;
            Some(SavePoint { seconds, changes })
        })
        .collect()
}

/// Parses a memory amount (`memtoull`): a number and an optional unit (`b`, `k`, `kb`, `m`,
/// `mb`, `g`, `gb`; `k` is 1000, `kb` 1024).
fn parse_memory(value: &[u8]) -> Option<u64> {
    let split = value
        .iter()
        .position(|c| !c.is_ascii_digit())
        .unwrap_or(value.len());
    let (digits, unit) = value.split_at(split);
    let n: u64 = core::str::from_utf8(digits).ok()?.parse().ok()?;
    let mul: u64 = match unit.to_ascii_lowercase().as_slice() {
        b"" | b"b" => 1,
        b"k" => 1000,
        b"kb" => 1024,
        b"m" => 1000 * 1000,
        b"mb" => 1024 * 1024,
        b"g" => 1000 * 1000 * 1000,
        b"gb" => 1024 * 1024 * 1024,
        _ => return None,
    };
    n.checked_mul(mul)
}

fn set_failed(name: &str, why: &str) -> Reply {
    let mut msg = b"ERR CONFIG SET failed (possibly related to argument '".to_vec();
    msg.extend_from_slice(name.as_bytes());
    msg.extend_from_slice(b"') - ");
    msg.extend_from_slice(why.as_bytes());
    Reply::error_owned(msg)
}

/// `CONFIG SET parameter value [parameter value ...]`: all or nothing.
pub fn config_set(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    if !args.len().is_multiple_of(2) {
        return SYNTAX_ERROR;
    }
    let mut changes: Vec<(&'static str, &[u8])> = Vec::new();
    for pair in args[2..].chunks(2) {
        let Some(name) = find_parameter(&pair[0]) else {
            let mut msg = b"ERR Unknown option or number of arguments for CONFIG SET - '".to_vec();
            msg.extend_from_slice(super::c_str(&pair[0]));
            msg.push(b'\'');
            return Reply::error_owned(msg);
        };
        changes.push((name, &pair[1]));
    }
    let mut save_points = None;
    let mut maxmemory = None;
    let mut key_save_delay = None;
    for &(name, value) in &changes {
        match name {
            "save" => match parse_save(value) {
                Some(sp) => save_points = Some(sp),
                None => return set_failed(name, "Invalid save parameters"),
            },
            "maxmemory" => match parse_memory(value) {
                Some(n) => maxmemory = Some(n),
                None => return set_failed(name, "argument must be a memory value"),
            },
            "rdb-key-save-delay" => match parse_i64(value).map(i32::try_from) {
                Some(Ok(n)) => key_save_delay = Some(n),
                Some(Err(_)) => {
                    return set_failed(
                        name,
                        "argument must be between -2147483648 and 2147483647 inclusive",
                    );
                }
                None => return set_failed(name, "argument couldn't be parsed into an integer"),
            },
            _ if parameter(ctx, name).eq_ignore_ascii_case(value) => {}
            _ => return set_failed(name, "not supported by this server"),
        }
    }
    if let Some(sp) = save_points {
        ctx.state.config.save_points = sp;
    }
    if let Some(n) = maxmemory {
        ctx.state.config.maxmemory = n;
    }
    if let Some(n) = key_save_delay {
        ctx.state.config.rdb_key_save_delay = n;
    }
    Reply::OK
}

/// `CONFIG RESETSTAT`.
pub fn config_resetstat(ctx: &mut Ctx<'_>) -> Reply {
    let stats = &mut ctx.state.stats;
    let sample = stats.last_sample.0;
    *stats = crate::state::Stats::default();
    stats.last_sample = (sample, 0);
    ctx.state.persistence.rdb_saves = 0;
    ctx.db.reset_stats();
    Reply::OK
}

/// One command's `COMMAND INFO` entry (Redis 7.0's ten fields; ACL categories, tips and key
/// specifications are left empty).
fn command_entry(spec: &Spec) -> Reply {
    Reply::Array(vec![
        Reply::bulk(spec.name.as_bytes()),
        Reply::Integer(i64::from(spec.arity)),
        Reply::Array(spec.flags.iter().map(|f| Reply::Status(f)).collect()),
        Reply::Integer(spec.keys.0),
        Reply::Integer(spec.keys.1),
        Reply::Integer(spec.keys.2),
        Reply::Array(Vec::new()),
        Reply::Array(Vec::new()),
        Reply::Array(Vec::new()),
        Reply::Array(spec.subcommands.iter().map(command_entry).collect()),
    ])
}

/// `COMMAND`: every command's entry.
pub fn command_list() -> Reply {
    Reply::Array(table::COMMANDS.iter().map(command_entry).collect())
}

/// `COMMAND INFO [name ...]`: the named commands' entries (null for unknown names), all of
/// them without names.
pub fn command_info(args: &[Vec<u8>]) -> Reply {
    if args.len() == 2 {
        return command_list();
    }
    Reply::Array(
        args[2..]
            .iter()
            .map(|name| match table::find_by_full_name(name) {
                Some(spec) => command_entry(spec),
                None => Reply::NullArray,
            })
            .collect(),
    )
}

/// `CLIENT GETNAME`.
pub fn client_getname(ctx: &Ctx<'_>) -> Reply {
    match &ctx.client.name {
        Some(name) => Reply::bulk(name),
        None => Reply::NullBulk,
    }
}

/// `CLIENT SETNAME name` (empty: no name).
pub fn client_setname(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let name = &args[2];
    if name.iter().any(|&c| !(b'!'..=b'~').contains(&c)) {
        return Reply::error(
            "ERR Client names cannot contain spaces, newlines or special characters.",
        );
    }
    ctx.client.name = if name.is_empty() {
        None
    } else {
        Some(name.clone())
    };
    Reply::OK
}

/// A container's `HELP`.
pub fn help(spec: &Spec) -> Reply {
    let lines: &[&'static str] = match spec.cmd {
        table::Cmd::ConfigHelp => &[
            "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "GET <pattern>",
            "    Return parameters matching the glob-like <pattern> and their values.",
            "SET <directive> <value>",
            "    Set the configuration <directive> to <value>.",
            "RESETSTAT",
            "    Reset statistics reported by the INFO command.",
            "HELP",
            "    Print this help.",
        ],
        table::Cmd::CommandHelp => &[
            "COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "(no subcommand)",
            "    Return details about all Redis commands.",
            "COUNT",
            "    Return the total number of commands in this Redis server.",
            "DOCS <command-name>",
            "    Return documentation details about multiple Redis commands (none here).",
            "INFO [<command-name> ...]",
            "    Return details about multiple Redis commands.",
            "HELP",
            "    Print this help.",
        ],
        _ => &[
            "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "GETNAME",
            "    Return the name of the current connection.",
            "ID",
            "    Return the ID of the current connection.",
            "SETNAME <name>",
            "    Assign the name <name> to the current connection.",
            "HELP",
            "    Print this help.",
        ],
    };
    Reply::Array(lines.iter().map(|l| Reply::Status(l)).collect())
}
