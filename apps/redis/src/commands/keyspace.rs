//! The key commands, after `db.c` and `expire.c`: `DEL`, `UNLINK`, `EXISTS`, `TOUCH`, `KEYS`,
//! `FLUSHDB`, `FLUSHALL`, `EXPIRE`, `PEXPIRE`, `EXPIREAT`, `PEXPIREAT` (with `NX`, `XX`, `GT`,
//! `LT`), `TTL`, `PTTL`, `EXPIRETIME`, `PEXPIRETIME`, `PERSIST`, `TYPE`, `SELECT`.

use super::table::Spec;
use super::{Ctx, c_str, eq_ci, int_arg};
use crate::resp::Reply;
use alloc::vec::Vec;

/// `DEL key [key ...]` and `UNLINK`: how many existed.
pub fn del(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let now = ctx.now.unix_ms;
    let deleted = args[1..].iter().filter(|k| ctx.db.remove(k, now)).count();
    ctx.state.persistence.dirty += deleted as u64;
    Reply::Integer(deleted as i64)
}

/// `EXISTS key [key ...]` and `TOUCH`: how many exist (a key named twice counts twice).
pub fn exists(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let now = ctx.now.unix_ms;
    Reply::Integer(args[1..].iter().filter(|k| ctx.db.contains(k, now)).count() as i64)
}

/// `KEYS pattern`.
pub fn keys(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    Reply::Array(
        ctx.db
            .keys_matching(&args[1], ctx.now.unix_ms)
            .into_iter()
            .map(Reply::Bulk)
            .collect(),
    )
}

/// `FLUSHDB [ASYNC|SYNC]` and `FLUSHALL`'s keyspace part (both run synchronously).
pub fn flush(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    match args {
        [_] => {}
        [_, mode] if eq_ci(mode, "sync") || eq_ci(mode, "async") => {}
        _ => return super::SYNTAX_ERROR,
    }
    ctx.state.persistence.dirty += ctx.db.clear() as u64;
    Reply::OK
}

fn invalid_expire(spec: &Spec) -> Reply {
    let mut msg = b"ERR invalid expire time in '".to_vec();
    msg.extend_from_slice(spec.name.as_bytes());
    msg.extend_from_slice(b"' command");
    Reply::error_owned(msg)
}

/// `EXPIRE key seconds [NX|XX|GT|LT]` and the others (`seconds`: the unit; `relative`: from
/// now rather than the epoch), after `expireGenericCommand`.
pub fn expire(
    ctx: &mut Ctx<'_>,
    args: &[Vec<u8>],
    spec: &Spec,
    seconds: bool,
    relative: bool,
) -> Reply {
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for opt in &args[3..] {
        if eq_ci(opt, "nx") {
            nx = true;
        } else if eq_ci(opt, "xx") {
            xx = true;
        } else if eq_ci(opt, "gt") {
            gt = true;
        } else if eq_ci(opt, "lt") {
            lt = true;
        } else {
            let mut msg = b"ERR Unsupported option ".to_vec();
            msg.extend_from_slice(c_str(opt));
            return Reply::error_owned(msg);
        }
    }
    if nx && (xx || gt || lt) {
        return Reply::error("ERR NX and XX, GT or LT options at the same time are not compatible");
    }
    if gt && lt {
        return Reply::error("ERR GT and LT options at the same time are not compatible");
    }
    let mut when = match int_arg(&args[2]) {
        Ok(n) => n,
        Err(e) => return e,
    };
    if seconds {
        match when.checked_mul(1000) {
            Some(ms) => when = ms,
            None => return invalid_expire(spec),
        }
    }
    let base = if relative { ctx.now.unix_ms } else { 0 };
    match when.checked_add(base) {
        Some(t) => when = t,
        None => return invalid_expire(spec),
    }
    let key = &args[1];
    let now = ctx.now.unix_ms;
    if !ctx.db.contains(key, now) {
        return Reply::Integer(0);
    }
    let current = ctx.db.peek(key).and_then(|e| e.expire_at());
    let refused = (nx && current.is_some())
        || (xx && current.is_none())
        || (gt && current.is_none_or(|c| when <= c))
        || (lt && current.is_some_and(|c| when >= c));
    if refused {
        return Reply::Integer(0);
    }
    if when <= now {
        ctx.db.remove(key, now);
    } else {
        ctx.db.set_expire(key, when);
    }
    ctx.state.persistence.dirty += 1;
    Reply::Integer(1)
}

/// `TTL`, `PTTL` (`ms`), `EXPIRETIME`, `PEXPIRETIME` (`absolute`): -2 for a missing key,
/// -1 for one without expiry.
pub fn ttl(ctx: &mut Ctx<'_>, args: &[Vec<u8>], ms: bool, absolute: bool) -> Reply {
    let now = ctx.now.unix_ms;
    let Some(entry) = ctx.db.get(&args[1], now) else {
        return Reply::Integer(-2);
    };
    let Some(at) = entry.expire_at() else {
        return Reply::Integer(-1);
    };
    let t = if absolute { at } else { at.saturating_sub(now) }.max(0);
    Reply::Integer(if ms { t } else { t.saturating_add(500) / 1000 })
}

/// `PERSIST key`.
pub fn persist(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let now = ctx.now.unix_ms;
    if ctx.db.contains(&args[1], now) && ctx.db.persist(&args[1]) {
        ctx.state.persistence.dirty += 1;
        Reply::Integer(1)
    } else {
        Reply::Integer(0)
    }
}

/// `TYPE key`: `string` or `none`.
pub fn type_of(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    if ctx.db.contains(&args[1], ctx.now.unix_ms) {
        Reply::Status("string")
    } else {
        Reply::Status("none")
    }
}

/// `SELECT index`: only database 0 exists.
pub fn select(args: &[Vec<u8>]) -> Reply {
    match int_arg(&args[1]) {
        Ok(0) => Reply::OK,
        Ok(n) if i32::try_from(n).is_err() => {
            Reply::error("ERR value is out of range, value must between -2147483648 and 2147483647")
        }
        Ok(_) => Reply::error("ERR DB index is out of range"),
        Err(e) => e,
    }
}
