//! The string commands, after `t_string.c`: `GET`, `SET` (with `NX`, `XX`, `GET`, `KEEPTTL`,
//! `EX`, `PX`, `EXAT`, `PXAT` under Redis 7.0's rules), `SETNX`, `SETEX`, `PSETEX`, `GETSET`,
//! `GETDEL`, `APPEND`, `STRLEN`, `INCR`, `DECR`, `INCRBY`, `DECRBY`, `MGET`, `MSET`,
//! `MSETNX`.

use super::table::Spec;
use super::{Ctx, eq_ci, int_arg, wrong_arity};
use crate::db::Ttl;
use crate::num::i64_to_vec;
use crate::resp::{MAX_BULK, Reply};
use alloc::vec::Vec;

/// `ERR invalid expire time in 'set' command`.
fn invalid_expire(cmd: &str) -> Reply {
    let mut msg = b"ERR invalid expire time in '".to_vec();
    msg.extend_from_slice(cmd.as_bytes());
    msg.extend_from_slice(b"' command");
    Reply::error_owned(msg)
}

/// An expiry argument as an absolute Unix time in milliseconds
/// (`getExpireMillisecondsOrReply`): positive, in seconds or milliseconds, relative to `now`
/// or absolute.
fn expire_ms(
    ctx: &Ctx<'_>,
    arg: &[u8],
    seconds: bool,
    relative: bool,
    cmd: &str,
) -> Result<i64, Reply> {
    let v = int_arg(arg)?;
    if v <= 0 || (seconds && v > i64::MAX / 1000) {
        return Err(invalid_expire(cmd));
    }
    let mut ms = if seconds { v * 1000 } else { v };
    if relative {
        ms = ms
            .checked_add(ctx.now.unix_ms)
            .ok_or_else(|| invalid_expire(cmd))?;
    }
    if ms <= 0 {
        return Err(invalid_expire(cmd));
    }
    Ok(ms)
}

/// Looks `key` up for reading, counting a hit or a miss: its value.
fn lookup_read(ctx: &mut Ctx<'_>, key: &[u8]) -> Option<Vec<u8>> {
    match ctx.db.get(key, ctx.now.unix_ms) {
        Some(e) => {
            ctx.state.stats.keyspace_hits += 1;
            Some(e.value().to_vec())
        }
        None => {
            ctx.state.stats.keyspace_misses += 1;
            None
        }
    }
}

fn bulk_or_null(v: Option<Vec<u8>>) -> Reply {
    v.map_or(Reply::NullBulk, Reply::Bulk)
}

/// `GET key`.
pub fn get(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    bulk_or_null(lookup_read(ctx, &args[1]))
}

/// Which expiry option `SET` was given.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ExpireOpt {
    Ex,
    Px,
    Exat,
    Pxat,
}

/// `SET key value [NX|XX] [GET] [EX s|PX ms|EXAT ts|PXAT ms-ts|KEEPTTL]`.
pub fn set(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let (mut nx, mut xx, mut get, mut keepttl) = (false, false, false, false);
    let mut expire: Option<(ExpireOpt, &[u8])> = None;
    let mut j = 3;
    while j < args.len() {
        let opt = &args[j];
        let next = args.get(j + 1);
        let other_expire = |kind: ExpireOpt| expire.is_some_and(|(k, _)| k != kind);
        if eq_ci(opt, "nx") && !xx {
            nx = true;
        } else if eq_ci(opt, "xx") && !nx {
            xx = true;
        } else if eq_ci(opt, "get") {
            get = true;
        } else if eq_ci(opt, "keepttl") && expire.is_none() {
            keepttl = true;
        } else if let (Some(kind), Some(value)) = (expire_kind(opt), next) {
            if keepttl || other_expire(kind) {
                return super::SYNTAX_ERROR;
            }
            expire = Some((kind, value));
            j += 1;
        } else {
            return super::SYNTAX_ERROR;
        }
        j += 1;
    }
    let at = match expire {
        Some((kind, arg)) => {
            let (seconds, relative) = match kind {
                ExpireOpt::Ex => (true, true),
                ExpireOpt::Px => (false, true),
                ExpireOpt::Exat => (true, false),
                ExpireOpt::Pxat => (false, false),
            };
            match expire_ms(ctx, arg, seconds, relative, "set") {
                Ok(ms) => Some(ms),
                Err(e) => return e,
            }
        }
        None => None,
    };
    let old = if get {
        Some(lookup_read(ctx, &args[1]))
    } else {
        None
    };
    let found = match &old {
        Some(v) => v.is_some(),
        None => ctx.db.contains(&args[1], ctx.now.unix_ms),
    };
    if (nx && found) || (xx && !found) {
        return match old {
            Some(v) => bulk_or_null(v),
            None => Reply::NullBulk,
        };
    }
    let ttl = match at {
        Some(ms) => Ttl::At(ms),
        None if keepttl => Ttl::Keep,
        None => Ttl::Clear,
    };
    ctx.db.set(args[1].clone(), args[2].clone(), ttl);
    ctx.state.persistence.dirty += 1;
    match old {
        Some(v) => bulk_or_null(v),
        None => Reply::OK,
    }
}

fn expire_kind(opt: &[u8]) -> Option<ExpireOpt> {
    if eq_ci(opt, "ex") {
        Some(ExpireOpt::Ex)
    } else if eq_ci(opt, "px") {
        Some(ExpireOpt::Px)
    } else if eq_ci(opt, "exat") {
        Some(ExpireOpt::Exat)
    } else if eq_ci(opt, "pxat") {
        Some(ExpireOpt::Pxat)
    } else {
        None
    }
}

/// `SETNX key value`.
pub fn setnx(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    if ctx.db.contains(&args[1], ctx.now.unix_ms) {
        return Reply::Integer(0);
    }
    ctx.db.set(args[1].clone(), args[2].clone(), Ttl::Clear);
    ctx.state.persistence.dirty += 1;
    Reply::Integer(1)
}

/// `SETEX key seconds value` (`seconds`) and `PSETEX key milliseconds value`.
pub fn setex(ctx: &mut Ctx<'_>, args: &[Vec<u8>], seconds: bool) -> Reply {
    let name = if seconds { "setex" } else { "psetex" };
    let at = match expire_ms(ctx, &args[2], seconds, true, name) {
        Ok(ms) => ms,
        Err(e) => return e,
    };
    ctx.db.set(args[1].clone(), args[3].clone(), Ttl::At(at));
    ctx.state.persistence.dirty += 1;
    Reply::OK
}

/// `GETSET key value`.
pub fn getset(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let old = lookup_read(ctx, &args[1]);
    ctx.db.set(args[1].clone(), args[2].clone(), Ttl::Clear);
    ctx.state.persistence.dirty += 1;
    bulk_or_null(old)
}

/// `GETDEL key`.
pub fn getdel(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let old = lookup_read(ctx, &args[1]);
    if old.is_some() && ctx.db.remove(&args[1], ctx.now.unix_ms) {
        ctx.state.persistence.dirty += 1;
    }
    bulk_or_null(old)
}

/// `APPEND key value`: the new length (at most [`MAX_BULK`], Redis's
/// `proto-max-bulk-len` check).
pub fn append(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let now = ctx.now.unix_ms;
    let old_len = ctx.db.get(&args[1], now).map_or(0, |e| e.value().len());
    if old_len + args[2].len() > MAX_BULK {
        return Reply::error("ERR string exceeds maximum allowed size (proto-max-bulk-len)");
    }
    let len = ctx.db.append(&args[1], &args[2], now);
    ctx.state.persistence.dirty += 1;
    Reply::Integer(len as i64)
}

/// `STRLEN key`.
pub fn strlen(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    Reply::Integer(
        ctx.db
            .get(&args[1], ctx.now.unix_ms)
            .map_or(0, |e| e.value().len()) as i64,
    )
}

/// `INCR`, `DECR` (`by` given) and `INCRBY` (`by` the second argument).
pub fn incr_by(ctx: &mut Ctx<'_>, args: &[Vec<u8>], by: Option<i64>) -> Reply {
    let incr = match by {
        Some(n) => n,
        None => match int_arg(&args[2]) {
            Ok(n) => n,
            Err(e) => return e,
        },
    };
    incr_decr(ctx, &args[1], incr)
}

/// `DECRBY key decrement`.
pub fn decrby(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    match int_arg(&args[2]) {
        Ok(i64::MIN) => Reply::error("ERR decrement would overflow"),
        Ok(n) => incr_decr(ctx, &args[1], -n),
        Err(e) => e,
    }
}

/// `incrDecrCommand`: adds `incr` to the integer at `key` (0 if missing), keeping its
/// expiry.
fn incr_decr(ctx: &mut Ctx<'_>, key: &[u8], incr: i64) -> Reply {
    let now = ctx.now.unix_ms;
    let (exists, value) = match ctx.db.get(key, now) {
        Some(e) => match crate::num::parse_i64(e.value()) {
            Some(v) => (true, v),
            None => return super::NOT_AN_INTEGER,
        },
        None => (false, 0),
    };
    let Some(new) = value.checked_add(incr) else {
        return Reply::error("ERR increment or decrement would overflow");
    };
    let ttl = if exists { Ttl::Keep } else { Ttl::Clear };
    ctx.db.set(key.to_vec(), i64_to_vec(new), ttl);
    ctx.state.persistence.dirty += 1;
    Reply::Integer(new)
}

/// `MGET key [key ...]`.
pub fn mget(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    Reply::Array(
        args[1..]
            .iter()
            .map(|k| bulk_or_null(lookup_read(ctx, k)))
            .collect(),
    )
}

/// `MSET key value [key value ...]` and `MSETNX` (`nx`: all or none, only if no key
/// exists).
pub fn mset(ctx: &mut Ctx<'_>, args: &[Vec<u8>], spec: &Spec, nx: bool) -> Reply {
    if args.len().is_multiple_of(2) {
        return wrong_arity(spec);
    }
    let now = ctx.now.unix_ms;
    if nx && args[1..].chunks(2).any(|kv| ctx.db.contains(&kv[0], now)) {
        return Reply::Integer(0);
    }
    for kv in args[1..].chunks(2) {
        ctx.db.set(kv[0].clone(), kv[1].clone(), Ttl::Clear);
    }
    ctx.state.persistence.dirty += (args.len() as u64 - 1) / 2;
    if nx { Reply::Integer(1) } else { Reply::OK }
}
