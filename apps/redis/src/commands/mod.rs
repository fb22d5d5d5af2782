//! Running commands: [`execute`] finds the command ([`table`]), checks its arity and
//! `maxmemory`, and runs it against the keyspace and the server state, returning the reply
//! or, for the commands the program carries out (`SAVE`, `BGSAVE`, `FLUSHALL`'s save, `QUIT`,
//! `SHUTDOWN`), an [`Outcome`] saying what to do.
//!
//! - [`table`]: names, arities, flags;
//! - `strings`: `GET`, `SET`, `INCR`, `MGET`, `MSET` and the other string commands;
//! - `keyspace`: `DEL`, `EXISTS`, `KEYS`, `EXPIRE`, `TTL` and the other key commands;
//! - `admin`: `PING`, `CONFIG`, `COMMAND`, `CLIENT`, `SAVE`, `BGSAVE` and the like;
//! - [`info`]: the `INFO` text.

mod admin;
pub mod info;
mod keyspace;
mod strings;
pub mod table;

use crate::db::Db;
use crate::resp::Reply;
use crate::state::{Now, ServerState};
use alloc::vec::Vec;
use table::{Cmd, Lookup, Spec};

/// What a connection's commands may know and change about it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientInfo {
    /// Its id (`CLIENT ID`).
    pub id: u64,
    /// Its name (`CLIENT SETNAME`).
    pub name: Option<Vec<u8>>,
}

/// How `SHUTDOWN` treats the dataset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShutdownSave {
    /// Save if save points are configured (no argument).
    Default,
    /// `SAVE`: save.
    Save,
    /// `NOSAVE`: do not.
    NoSave,
}

/// What running a command produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A reply.
    Reply(Reply),
    /// `SAVE`: save in the foreground, then reply `+OK` (or `-ERR` on failure).
    Save,
    /// `BGSAVE`: fork a saving child, then reply `+Background saving started` (or `-ERR`).
    BgSave,
    /// `FLUSHALL` emptied the keyspace: kill a running background save and, with save
    /// points configured, save the empty dataset; reply `+OK`.
    FlushAll,
    /// `QUIT`: reply `+OK` and close the connection.
    Quit,
    /// `SHUTDOWN`: save as asked, then end the program (`NOW`/`FORCE`: `force` ignores a
    /// failed save).
    Shutdown {
        /// Whether to save.
        save: ShutdownSave,
        /// Exit even if the save failed.
        force: bool,
    },
}

/// A command's view of the server.
pub(crate) struct Ctx<'a> {
    pub db: &'a mut Db,
    pub state: &'a mut ServerState,
    pub client: &'a mut ClientInfo,
    pub now: Now,
}

/// `s` up to its first NUL, as C's `%s` prints it.
pub(crate) fn c_str(s: &[u8]) -> &[u8] {
    match s.iter().position(|&c| c == 0) {
        Some(end) => &s[..end],
        None => s,
    }
}

/// `s` up to its first NUL and at most `max` bytes (`%.*s`).
fn c_str_max(s: &[u8], max: usize) -> &[u8] {
    let s = c_str(s);
    &s[..s.len().min(max)]
}

/// Redis 7.0's reply to an unknown command: `ERR unknown command 'foo', with args beginning
/// with: 'a' 'b' ` (each argument quoted and followed by a space, 128 bytes of them at most).
pub fn unknown_command(args: &[Vec<u8>]) -> Reply {
    let mut listed: Vec<u8> = Vec::new();
    for arg in args.iter().skip(1) {
        if listed.len() >= 128 {
            break;
        }
        let room = 128 - listed.len();
        listed.push(b'\'');
        listed.extend_from_slice(c_str_max(arg, room));
        listed.extend_from_slice(b"' ");
    }
    let mut msg = b"ERR unknown command '".to_vec();
    msg.extend_from_slice(c_str_max(args.first().map_or(&[][..], |a| a), 128));
    msg.extend_from_slice(b"', with args beginning with: ");
    msg.extend_from_slice(&listed);
    Reply::error_owned(msg)
}

/// The reply to an unknown subcommand: `ERR unknown subcommand 'x'. Try CONFIG HELP.`
pub fn unknown_subcommand(args: &[Vec<u8>]) -> Reply {
    let mut msg = b"ERR unknown subcommand '".to_vec();
    msg.extend_from_slice(c_str_max(args.get(1).map_or(&[][..], |a| a), 128));
    msg.extend_from_slice(b"'. Try ");
    msg.extend(c_str(&args[0]).iter().map(|c| c.to_ascii_uppercase()));
    msg.extend_from_slice(b" HELP.");
    Reply::error_owned(msg)
}

/// `ERR wrong number of arguments for 'get' command`.
pub fn wrong_arity(spec: &Spec) -> Reply {
    wrong_arity_name(spec.name)
}

fn wrong_arity_name(name: &str) -> Reply {
    let mut msg = b"ERR wrong number of arguments for '".to_vec();
    msg.extend_from_slice(name.as_bytes());
    msg.extend_from_slice(b"' command");
    Reply::error_owned(msg)
}

/// `ERR syntax error`.
pub const SYNTAX_ERROR: Reply = Reply::error("ERR syntax error");
/// `ERR value is not an integer or out of range`.
pub const NOT_AN_INTEGER: Reply = Reply::error("ERR value is not an integer or out of range");
/// Redis's `OOM` error.
pub const OOM: Reply = Reply::error("OOM command not allowed when used memory > 'maxmemory'.");

/// Whether `arg` is `word` in any case.
pub(crate) fn eq_ci(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

/// `arg` as an integer, or Redis's error.
pub(crate) fn int_arg(arg: &[u8]) -> Result<i64, Reply> {
    crate::num::parse_i64(arg).ok_or(NOT_AN_INTEGER)
}

/// Runs the command `args` (name first) for `client` at `now`.
pub fn execute(
    db: &mut Db,
    state: &mut ServerState,
    client: &mut ClientInfo,
    args: &[Vec<u8>],
    now: Now,
) -> Outcome {
    if args.is_empty() {
        return Outcome::Reply(unknown_command(&[Vec::new()]));
    }
    let spec = match table::lookup(args) {
        Lookup::Found(spec) => spec,
        Lookup::UnknownCommand => return Outcome::Reply(unknown_command(args)),
        Lookup::UnknownSubcommand => return Outcome::Reply(unknown_subcommand(args)),
    };
    if !spec.arity_ok(args.len()) {
        return Outcome::Reply(wrong_arity(spec));
    }
    if spec.deny_oom() && state.over_maxmemory(db) {
        return Outcome::Reply(OOM);
    }
    state.stats.commands_processed += 1;
    let mut ctx = Ctx {
        db,
        state,
        client,
        now,
    };
    dispatch(&mut ctx, spec, args)
}

fn dispatch(ctx: &mut Ctx<'_>, spec: &'static Spec, args: &[Vec<u8>]) -> Outcome {
    let reply = match spec.cmd {
        Cmd::Get => strings::get(ctx, args),
        Cmd::Set => strings::set(ctx, args),
        Cmd::Setnx => strings::setnx(ctx, args),
        Cmd::Setex => strings::setex(ctx, args, true),
        Cmd::Psetex => strings::setex(ctx, args, false),
        Cmd::Getset => strings::getset(ctx, args),
        Cmd::Getdel => strings::getdel(ctx, args),
        Cmd::Append => strings::append(ctx, args),
        Cmd::Strlen => strings::strlen(ctx, args),
        Cmd::Incr => strings::incr_by(ctx, args, Some(1)),
        Cmd::Decr => strings::incr_by(ctx, args, Some(-1)),
        Cmd::Incrby => strings::incr_by(ctx, args, None),
        Cmd::Decrby => strings::decrby(ctx, args),
        Cmd::Mget => strings::mget(ctx, args),
        Cmd::Mset => strings::mset(ctx, args, spec, false),
        Cmd::Msetnx => strings::mset(ctx, args, spec, true),
        Cmd::Del | Cmd::Unlink => keyspace::del(ctx, args),
        Cmd::Exists | Cmd::Touch => keyspace::exists(ctx, args),
        Cmd::Keys => keyspace::keys(ctx, args),
        Cmd::Dbsize => Reply::Integer(ctx.db.len() as i64),
        Cmd::Flushdb => keyspace::flush(ctx, args),
        Cmd::Flushall => {
            let reply = keyspace::flush(ctx, args);
            if reply.is_error() {
                reply
            } else {
                return Outcome::FlushAll;
            }
        }
        Cmd::Expire => keyspace::expire(ctx, args, spec, true, true),
        Cmd::Pexpire => keyspace::expire(ctx, args, spec, false, true),
        Cmd::Expireat => keyspace::expire(ctx, args, spec, true, false),
        Cmd::Pexpireat => keyspace::expire(ctx, args, spec, false, false),
        Cmd::Ttl => keyspace::ttl(ctx, args, false, false),
        Cmd::Pttl => keyspace::ttl(ctx, args, true, false),
        Cmd::Expiretime => keyspace::ttl(ctx, args, false, true),
        Cmd::Pexpiretime => keyspace::ttl(ctx, args, true, true),
        Cmd::Persist => keyspace::persist(ctx, args),
        Cmd::Type => keyspace::type_of(ctx, args),
        Cmd::Select => keyspace::select(args),
        Cmd::Ping => admin::ping(args),
        Cmd::Echo => Reply::bulk(&args[1]),
        Cmd::Quit => return Outcome::Quit,
        Cmd::Time => admin::time(ctx),
        Cmd::Info => Reply::Bulk(info::info(ctx.db, ctx.state, ctx.now, &args[1..])),
        Cmd::Lastsave => Reply::Integer(ctx.state.persistence.lastsave),
        Cmd::Save | Cmd::Bgsave => return admin::save(ctx, args, spec),
        Cmd::Shutdown => return admin::shutdown(args),
        Cmd::ConfigGet => admin::config_get(ctx, args),
        Cmd::ConfigSet => admin::config_set(ctx, args),
        Cmd::ConfigResetstat => admin::config_resetstat(ctx),
        Cmd::Command => admin::command_list(),
        Cmd::CommandCount => Reply::Integer(table::COMMANDS.len() as i64),
        Cmd::CommandDocs => Reply::Array(Vec::new()),
        Cmd::CommandInfo => admin::command_info(args),
        Cmd::ClientId => Reply::Integer(ctx.client.id as i64),
        Cmd::ClientGetname => admin::client_getname(ctx),
        Cmd::ClientSetname => admin::client_setname(ctx, args),
        Cmd::ConfigHelp | Cmd::CommandHelp | Cmd::ClientHelp => admin::help(spec),
        // Containers called alone fail the arity check first.
        Cmd::Config | Cmd::Client => wrong_arity(spec),
    };
    Outcome::Reply(reply)
}

#[cfg(test)]
mod tests;
