//! Commands, one by one, against Redis 7.0.15's replies.

use super::*;
use crate::state::Config;
use alloc::string::String;
use alloc::vec;

struct T {
    db: Db,
    state: ServerState,
    client: ClientInfo,
    now: Now,
}

const T0: i64 = 1_700_000_000_000;

impl T {
    fn new() -> T {
        let now = Now {
            unix_ms: T0,
            mono_us: 1_000_000,
        };
        T {
            db: Db::new(),
            state: ServerState::new(Config::new(6379, 42, 7), now),
            client: ClientInfo { id: 3, name: None },
            now,
        }
    }

    fn advance_ms(&mut self, ms: i64) {
        self.now.unix_ms += ms;
        self.now.mono_us += ms as u64 * 1000;
    }

    fn run(&mut self, args: &[&[u8]]) -> Outcome {
        let args: Vec<Vec<u8>> = args.iter().map(|a| a.to_vec()).collect();
        execute(
            &mut self.db,
            &mut self.state,
            &mut self.client,
            &args,
            self.now,
        )
    }

    fn reply(&mut self, args: &[&[u8]]) -> Reply {
        match self.run(args) {
            Outcome::Reply(r) => r,
            other => panic!("{other:?}"),
        }
    }

    /// The reply's wire form, as text.
    fn wire(&mut self, args: &[&[u8]]) -> String {
        String::from_utf8_lossy(&self.reply(args).to_bytes()).into_owned()
    }
}

fn err(text: &str) -> String {
    alloc::format!("-{text}\r\n")
}

#[test]
fn ping_echo_time() {
    let mut t = T::new();
    assert_eq!(t.wire(&[b"PING"]), "+PONG\r\n");
    assert_eq!(t.wire(&[b"ping", b"hi"]), "$2\r\nhi\r\n");
    assert_eq!(
        t.wire(&[b"PING", b"a", b"b"]),
        err("ERR wrong number of arguments for 'ping' command")
    );
    assert_eq!(t.wire(&[b"ECHO", b"x y"]), "$3\r\nx y\r\n");
    assert_eq!(t.wire(&[b"TIME"]), "*2\r\n$10\r\n1700000000\r\n$1\r\n0\r\n");
}

#[test]
fn unknown_commands_and_arity_as_redis_7_0() {
    let mut t = T::new();
    assert_eq!(
        t.wire(&[b"foo", b"a", b"b"]),
        err("ERR unknown command 'foo', with args beginning with: 'a' 'b' ")
    );
    assert_eq!(
        t.wire(&[b"foo"]),
        err("ERR unknown command 'foo', with args beginning with: ")
    );
    // At most 128 bytes of arguments are quoted, each cut to what is left of them.
    let long = vec![b'x'; 200];
    let got = t.wire(&[b"nope", &long, b"second"]);
    let quoted = alloc::format!("'{}' ", "x".repeat(128));
    assert_eq!(
        got,
        err(&alloc::format!(
            "ERR unknown command 'nope', with args beginning with: {quoted}"
        ))
    );
    // CR and LF in the arguments are sent as spaces.
    assert_eq!(
        t.wire(&[b"a\r\nb"]),
        err("ERR unknown command 'a  b', with args beginning with: ")
    );
    assert_eq!(
        t.wire(&[b"GET"]),
        err("ERR wrong number of arguments for 'get' command")
    );
    assert_eq!(
        t.wire(&[b"get", b"a", b"b"]),
        err("ERR wrong number of arguments for 'get' command")
    );
    assert_eq!(
        t.wire(&[b"CONFIG", b"GET"]),
        err("ERR wrong number of arguments for 'config|get' command")
    );
    assert_eq!(
        t.wire(&[b"CONFIG"]),
        err("ERR wrong number of arguments for 'config' command")
    );
    assert_eq!(
        t.wire(&[b"config", b"nope"]),
        err("ERR unknown subcommand 'nope'. Try CONFIG HELP.")
    );
    assert_eq!(t.wire(&[b"GeT", b"missing"]), "$-1\r\n");
    assert_eq!(t.state.stats.commands_processed, 1);
}

#[test]
fn get_and_set() {
    let mut t = T::new();
    assert_eq!(t.wire(&[b"SET", b"k", b"v\r\n\0"]), "+OK\r\n");
    assert_eq!(t.wire(&[b"GET", b"k"]), "$4\r\nv\r\n\0\r\n");
    assert_eq!(t.wire(&[b"SET", b"k", b"w", b"NX"]), "$-1\r\n");
    assert_eq!(t.wire(&[b"SET", b"new", b"w", b"XX"]), "$-1\r\n");
    assert_eq!(
        t.wire(&[b"SET", b"k", b"w", b"xx", b"GET"]),
        "$4\r\nv\r\n\0\r\n"
    );
    assert_eq!(t.wire(&[b"SET", b"k", b"z", b"NX", b"GET"]), "$1\r\nw\r\n");
    assert_eq!(t.wire(&[b"GET", b"k"]), "$1\r\nw\r\n");
    assert_eq!(t.wire(&[b"SET", b"fresh", b"1", b"GET"]), "$-1\r\n");
    assert_eq!(t.state.persistence.dirty, 3);
    assert_eq!(
        (t.state.stats.keyspace_hits, t.state.stats.keyspace_misses),
        (4, 1)
    );
}

#[test]
fn set_options_follow_redis_rules() {
    let mut t = T::new();
    let syntax = err("ERR syntax error");
    for bad in [
        &[&b"SET"[..], b"k", b"v", b"NX", b"XX"][..],
        &[b"SET", b"k", b"v", b"EX"],
        &[b"SET", b"k", b"v", b"EX", b"1", b"PX", b"1"],
        &[b"SET", b"k", b"v", b"KEEPTTL", b"EX", b"1"],
        &[b"SET", b"k", b"v", b"EX", b"1", b"KEEPTTL"],
        &[b"SET", b"k", b"v", b"PERSIST"],
        &[b"SET", b"k", b"v", b"foo"],
    ] {
        assert_eq!(t.wire(bad), syntax, "{bad:?}");
    }
    let invalid = err("ERR invalid expire time in 'set' command");
    assert_eq!(t.wire(&[b"SET", b"k", b"v", b"EX", b"0"]), invalid);
    assert_eq!(t.wire(&[b"SET", b"k", b"v", b"PX", b"-5"]), invalid);
    assert_eq!(
        t.wire(&[b"SET", b"k", b"v", b"EX", b"9223372036854776"]),
        invalid
    );
    assert_eq!(
        t.wire(&[b"SET", b"k", b"v", b"PX", b"9223372036854775807"]),
        invalid
    );
    assert_eq!(
        t.wire(&[b"SET", b"k", b"v", b"EX", b"1.5"]),
        err("ERR value is not an integer or out of range")
    );
    assert!(t.db.is_empty());
    // The last of repeated EX wins.
    assert_eq!(
        t.wire(&[b"SET", b"k", b"v", b"ex", b"10", b"EX", b"20"]),
        "+OK\r\n"
    );
    assert_eq!(t.wire(&[b"TTL", b"k"]), ":20\r\n");
    assert_eq!(t.wire(&[b"SET", b"k", b"v2", b"KEEPTTL"]), "+OK\r\n");
    assert_eq!(t.wire(&[b"PTTL", b"k"]), ":20000\r\n");
    assert_eq!(t.wire(&[b"SET", b"k", b"v3"]), "+OK\r\n");
    assert_eq!(t.wire(&[b"TTL", b"k"]), ":-1\r\n");
    let at = alloc::format!("{}", T0 + 5000);
    assert_eq!(
        t.wire(&[b"SET", b"k", b"v", b"PXAT", at.as_bytes()]),
        "+OK\r\n"
    );
    assert_eq!(
        t.wire(&[b"PEXPIRETIME", b"k"]),
        alloc::format!(":{}\r\n", T0 + 5000)
    );
    assert_eq!(
        t.wire(&[b"SET", b"k", b"v", b"EXAT", b"1700000100"]),
        "+OK\r\n"
    );
    assert_eq!(t.wire(&[b"EXPIRETIME", b"k"]), ":1700000100\r\n");
    assert_eq!(t.wire(&[b"SET", b"k", b"v", b"PX", b"100"]), "+OK\r\n");
    t.advance_ms(100);
    assert_eq!(t.wire(&[b"GET", b"k"]), "$1\r\nv\r\n");
    t.advance_ms(1);
    assert_eq!(t.wire(&[b"GET", b"k"]), "$-1\r\n");
    assert_eq!(t.db.expired_keys(), 1);
}

#[test]
fn other_string_commands() {
    let mut t = T::new();
    assert_eq!(t.wire(&[b"SETNX", b"a", b"1"]), ":1\r\n");
    assert_eq!(t.wire(&[b"SETNX", b"a", b"2"]), ":0\r\n");
    assert_eq!(t.wire(&[b"SETEX", b"b", b"10", b"x"]), "+OK\r\n");
    assert_eq!(t.wire(&[b"TTL", b"b"]), ":10\r\n");
    assert_eq!(
        t.wire(&[b"SETEX", b"b", b"0", b"x"]),
        err("ERR invalid expire time in 'setex' command")
    );
    assert_eq!(t.wire(&[b"PSETEX", b"c", b"1500", b"y"]), "+OK\r\n");
    assert_eq!(t.wire(&[b"TTL", b"c"]), ":2\r\n");
    assert_eq!(
        t.wire(&[b"PSETEX", b"c", b"-1", b"y"]),
        err("ERR invalid expire time in 'psetex' command")
    );
    assert_eq!(t.wire(&[b"GETSET", b"b", b"new"]), "$1\r\nx\r\n");
    assert_eq!(t.wire(&[b"TTL", b"b"]), ":-1\r\n");
    assert_eq!(t.wire(&[b"GETDEL", b"b"]), "$3\r\nnew\r\n");
    assert_eq!(t.wire(&[b"GETDEL", b"b"]), "$-1\r\n");
    assert_eq!(t.wire(&[b"APPEND", b"s", b"ab"]), ":2\r\n");
    assert_eq!(t.wire(&[b"APPEND", b"s", b"cde"]), ":5\r\n");
    assert_eq!(t.wire(&[b"STRLEN", b"s"]), ":5\r\n");
    assert_eq!(t.wire(&[b"STRLEN", b"none"]), ":0\r\n");
    assert_eq!(t.wire(&[b"TYPE", b"s"]), "+string\r\n");
    assert_eq!(t.wire(&[b"TYPE", b"none"]), "+none\r\n");
}

#[test]
fn counters() {
    let mut t = T::new();
    assert_eq!(t.wire(&[b"INCR", b"n"]), ":1\r\n");
    assert_eq!(t.wire(&[b"INCRBY", b"n", b"41"]), ":42\r\n");
    assert_eq!(t.wire(&[b"DECR", b"n"]), ":41\r\n");
    assert_eq!(t.wire(&[b"DECRBY", b"n", b"50"]), ":-9\r\n");
    assert_eq!(t.wire(&[b"GET", b"n"]), "$2\r\n-9\r\n");
    let not_int = err("ERR value is not an integer or out of range");
    assert_eq!(t.wire(&[b"INCRBY", b"n", b"x"]), not_int);
    assert_eq!(t.wire(&[b"SET", b"s", b"abc"]), "+OK\r\n");
    assert_eq!(t.wire(&[b"INCR", b"s"]), not_int);
    assert_eq!(t.wire(&[b"SET", b"s", b" 1"]), "+OK\r\n");
    assert_eq!(t.wire(&[b"INCR", b"s"]), not_int);
    assert_eq!(t.wire(&[b"SET", b"max", b"9223372036854775807"]), "+OK\r\n");
    assert_eq!(
        t.wire(&[b"INCR", b"max"]),
        err("ERR increment or decrement would overflow")
    );
    assert_eq!(
        t.wire(&[b"SET", b"min", b"-9223372036854775808"]),
        "+OK\r\n"
    );
    assert_eq!(
        t.wire(&[b"DECR", b"min"]),
        err("ERR increment or decrement would overflow")
    );
    assert_eq!(
        t.wire(&[b"DECRBY", b"n", b"-9223372036854775808"]),
        err("ERR decrement would overflow")
    );
    // INCR keeps the expiry.
    assert_eq!(t.wire(&[b"SET", b"ttl", b"1", b"EX", b"100"]), "+OK\r\n");
    assert_eq!(t.wire(&[b"INCR", b"ttl"]), ":2\r\n");
    assert_eq!(t.wire(&[b"TTL", b"ttl"]), ":100\r\n");
}

#[test]
fn multi_key_commands() {
    let mut t = T::new();
    assert_eq!(t.wire(&[b"MSET", b"a", b"1", b"b", b"2"]), "+OK\r\n");
    assert_eq!(
        t.wire(&[b"MGET", b"a", b"x", b"b"]),
        "*3\r\n$1\r\n1\r\n$-1\r\n$1\r\n2\r\n"
    );
    assert_eq!(
        t.wire(&[b"MSET", b"a", b"1", b"b"]),
        err("ERR wrong number of arguments for 'mset' command")
    );
    assert_eq!(t.wire(&[b"MSETNX", b"c", b"3", b"a", b"9"]), ":0\r\n");
    assert_eq!(t.wire(&[b"MSETNX", b"c", b"3", b"d", b"4"]), ":1\r\n");
    assert_eq!(t.wire(&[b"EXISTS", b"a", b"a", b"zz", b"c"]), ":3\r\n");
    assert_eq!(t.wire(&[b"DEL", b"a", b"a", b"zz", b"c"]), ":2\r\n");
    assert_eq!(t.wire(&[b"UNLINK", b"b"]), ":1\r\n");
    assert_eq!(t.wire(&[b"DBSIZE"]), ":1\r\n");
    assert_eq!(t.wire(&[b"TOUCH", b"d", b"b"]), ":1\r\n");
}

#[test]
fn keys_patterns() {
    let mut t = T::new();
    for k in ["key:1", "key:2", "key:10", "other", "k[x"] {
        t.reply(&[b"SET", k.as_bytes(), b"v"]);
    }
    assert_eq!(
        t.wire(&[b"KEYS", b"key:?"]),
        "*2\r\n$5\r\nkey:1\r\n$5\r\nkey:2\r\n"
    );
    assert_eq!(t.wire(&[b"KEYS", b"key:[^1]*"]), "*1\r\n$5\r\nkey:2\r\n");
    assert_eq!(t.wire(&[b"KEYS", b"k\\[*"]), "*1\r\n$3\r\nk[x\r\n");
    assert_eq!(t.wire(&[b"KEYS", b"nomatch*"]), "*0\r\n");
    match t.reply(&[b"KEYS", b"*"]) {
        Reply::Array(items) => assert_eq!(items.len(), 5),
        other => panic!("{other:?}"),
    }
}

#[test]
fn flushes() {
    let mut t = T::new();
    t.reply(&[b"MSET", b"a", b"1", b"b", b"2"]);
    assert_eq!(t.wire(&[b"FLUSHDB", b"now"]), err("ERR syntax error"));
    assert_eq!(t.wire(&[b"FLUSHDB", b"ASYNC"]), "+OK\r\n");
    assert!(t.db.is_empty());
    t.reply(&[b"SET", b"a", b"1"]);
    assert_eq!(t.run(&[b"FLUSHALL", b"sync"]), Outcome::FlushAll);
    assert!(t.db.is_empty());
    assert_eq!(t.run(&[b"FLUSHALL", b"x"]), Outcome::Reply(SYNTAX_ERROR));
}

#[test]
fn expiry_commands() {
    let mut t = T::new();
    t.reply(&[b"SET", b"k", b"v"]);
    assert_eq!(t.wire(&[b"TTL", b"missing"]), ":-2\r\n");
    assert_eq!(t.wire(&[b"TTL", b"k"]), ":-1\r\n");
    assert_eq!(t.wire(&[b"EXPIRE", b"missing", b"10"]), ":0\r\n");
    assert_eq!(t.wire(&[b"EXPIRE", b"k", b"10", b"XX"]), ":0\r\n");
    assert_eq!(t.wire(&[b"EXPIRE", b"k", b"10", b"GT"]), ":0\r\n");
    assert_eq!(t.wire(&[b"EXPIRE", b"k", b"10", b"NX"]), ":1\r\n");
    assert_eq!(t.wire(&[b"EXPIRE", b"k", b"20", b"NX"]), ":0\r\n");
    assert_eq!(t.wire(&[b"EXPIRE", b"k", b"5", b"GT"]), ":0\r\n");
    assert_eq!(t.wire(&[b"EXPIRE", b"k", b"20", b"gt"]), ":1\r\n");
    assert_eq!(t.wire(&[b"EXPIRE", b"k", b"30", b"LT"]), ":0\r\n");
    assert_eq!(t.wire(&[b"PEXPIRE", b"k", b"1499", b"LT"]), ":1\r\n");
    assert_eq!(t.wire(&[b"TTL", b"k"]), ":1\r\n");
    assert_eq!(t.wire(&[b"PTTL", b"k"]), ":1499\r\n");
    assert_eq!(t.wire(&[b"PERSIST", b"k"]), ":1\r\n");
    assert_eq!(t.wire(&[b"PERSIST", b"k"]), ":0\r\n");
    assert_eq!(t.wire(&[b"PERSIST", b"missing"]), ":0\r\n");
    assert_eq!(
        t.wire(&[b"EXPIRE", b"k", b"10", b"NX", b"XX"]),
        err("ERR NX and XX, GT or LT options at the same time are not compatible")
    );
    assert_eq!(
        t.wire(&[b"EXPIRE", b"k", b"10", b"GT", b"LT"]),
        err("ERR GT and LT options at the same time are not compatible")
    );
    assert_eq!(
        t.wire(&[b"EXPIRE", b"k", b"10", b"foo"]),
        err("ERR Unsupported option foo")
    );
    assert_eq!(
        t.wire(&[b"EXPIRE", b"k", b"9223372036854776"]),
        err("ERR invalid expire time in 'expire' command")
    );
    assert_eq!(
        t.wire(&[b"PEXPIRE", b"k", b"9223372036854775807"]),
        err("ERR invalid expire time in 'pexpire' command")
    );
    assert_eq!(
        t.wire(&[b"EXPIRE", b"k", b"x"]),
        err("ERR value is not an integer or out of range")
    );
    let at = alloc::format!("{}", T0 / 1000 + 100);
    assert_eq!(t.wire(&[b"EXPIREAT", b"k", at.as_bytes()]), ":1\r\n");
    assert_eq!(t.wire(&[b"TTL", b"k"]), ":100\r\n");
    assert_eq!(t.wire(&[b"EXPIRETIME", b"k"]), alloc::format!(":{at}\r\n"));
    // A time in the past deletes the key.
    assert_eq!(t.wire(&[b"EXPIRE", b"k", b"-1"]), ":1\r\n");
    assert_eq!(t.wire(&[b"EXISTS", b"k"]), ":0\r\n");
    t.reply(&[b"SET", b"k", b"v"]);
    assert_eq!(t.wire(&[b"PEXPIREAT", b"k", b"1"]), ":1\r\n");
    assert_eq!(t.wire(&[b"DBSIZE"]), ":0\r\n");
    // The far future does not overflow.
    t.reply(&[b"SET", b"k", b"v"]);
    assert_eq!(
        t.wire(&[b"PEXPIREAT", b"k", b"9223372036854775807"]),
        ":1\r\n"
    );
    assert_eq!(t.wire(&[b"EXPIRETIME", b"k"]), ":9223372036854775\r\n");
    assert_eq!(
        t.wire(&[b"TTL", b"k"]),
        alloc::format!(":{}\r\n", (i64::MAX - T0) / 1000 + 1)
    );
}

#[test]
fn select_only_zero() {
    let mut t = T::new();
    assert_eq!(t.wire(&[b"SELECT", b"0"]), "+OK\r\n");
    assert_eq!(
        t.wire(&[b"SELECT", b"1"]),
        err("ERR DB index is out of range")
    );
    assert_eq!(
        t.wire(&[b"SELECT", b"-1"]),
        err("ERR DB index is out of range")
    );
    assert_eq!(
        t.wire(&[b"SELECT", b"x"]),
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(
        t.wire(&[b"SELECT", b"4294967296"]),
        err("ERR value is out of range, value must between -2147483648 and 2147483647")
    );
}

#[test]
fn config() {
    let mut t = T::new();
    assert_eq!(
        t.wire(&[b"CONFIG", b"GET", b"save"]),
        "*2\r\n$4\r\nsave\r\n$23\r\n3600 1 300 100 60 10000\r\n"
    );
    assert_eq!(
        t.wire(&[b"CONFIG", b"GET", b"appendonly"]),
        "*2\r\n$10\r\nappendonly\r\n$2\r\nno\r\n"
    );
    assert_eq!(
        t.wire(&[b"config", b"get", b"SAVE", b"appendonly"])
            .matches("\r\n$")
            .count(),
        4
    );
    assert_eq!(t.wire(&[b"CONFIG", b"GET", b"nothing"]), "*0\r\n");
    match t.reply(&[b"CONFIG", b"GET", b"*max*"]) {
        Reply::Array(items) => assert_eq!(items.len(), 8),
        other => panic!("{other:?}"),
    }
    assert_eq!(t.wire(&[b"CONFIG", b"SET", b"save", b""]), "+OK\r\n");
    assert_eq!(
        t.wire(&[b"CONFIG", b"GET", b"save"]),
        "*2\r\n$4\r\nsave\r\n$0\r\n\r\n"
    );
    assert!(t.state.config.save_points.is_empty());
    assert_eq!(
        t.wire(&[b"CONFIG", b"SET", b"save", b"900 1 300 10"]),
        "+OK\r\n"
    );
    assert_eq!(t.state.config.save_points.len(), 2);
    assert_eq!(
        t.wire(&[b"CONFIG", b"SET", b"save", b"900"]),
        err(
            "ERR CONFIG SET failed (possibly related to argument 'save') - Invalid save parameters"
        )
    );
    assert_eq!(
        t.wire(&[b"CONFIG", b"SET", b"save", b"0 1"]),
        err(
            "ERR CONFIG SET failed (possibly related to argument 'save') - Invalid save parameters"
        )
    );
    assert_eq!(
        t.wire(&[b"CONFIG", b"SET", b"nope", b"1"]),
        err("ERR Unknown option or number of arguments for CONFIG SET - 'nope'")
    );
    assert_eq!(
        t.wire(&[b"CONFIG", b"SET", b"save", b"1", b"x"]),
        err("ERR syntax error")
    );
    assert_eq!(
        t.wire(&[b"CONFIG", b"SET", b"maxmemory", b"2mb"]),
        "+OK\r\n"
    );
    assert_eq!(t.state.config.maxmemory, 2 << 20);
    assert_eq!(
        t.wire(&[b"CONFIG", b"SET", b"appendonly", b"no"]),
        "+OK\r\n"
    );
    assert_eq!(
        t.wire(&[b"CONFIG", b"SET", b"appendonly", b"yes"]),
        err(
            "ERR CONFIG SET failed (possibly related to argument 'appendonly') - not supported by this server"
        )
    );
    t.reply(&[b"GET", b"x"]);
    assert_eq!(t.wire(&[b"CONFIG", b"RESETSTAT"]), "+OK\r\n");
    assert_eq!(t.state.stats.keyspace_misses, 0);
    assert!(
        t.wire(&[b"CONFIG", b"HELP"])
            .starts_with("*9\r\n+CONFIG <subcommand>")
    );
}

#[test]
fn config_rdb_key_save_delay() {
    let mut t = T::new();
    let get = "*2\r\n$18\r\nrdb-key-save-delay\r\n";
    assert_eq!(
        t.wire(&[b"CONFIG", b"GET", b"rdb-key-save-delay"]),
        alloc::format!("{get}$1\r\n0\r\n")
    );
    assert_eq!(
        t.wire(&[b"config", b"set", b"RDB-KEY-SAVE-DELAY", b"10000"]),
        "+OK\r\n"
    );
    assert_eq!(t.state.config.rdb_key_save_delay, 10_000);
    assert_eq!(t.state.key_save_delay_us(), 10_000);
    assert_eq!(
        t.wire(&[b"CONFIG", b"GET", b"rdb-key-save-delay"]),
        alloc::format!("{get}$5\r\n10000\r\n")
    );
    // A hidden parameter: patterns never match it.
    assert_eq!(
        t.wire(&[b"CONFIG", b"GET", b"rdb*"]),
        "*4\r\n$11\r\nrdbchecksum\r\n$3\r\nyes\r\n$14\r\nrdbcompression\r\n$2\r\nno\r\n"
    );
    assert_eq!(t.wire(&[b"CONFIG", b"GET", b"*delay*"]), "*0\r\n");
    // Redis's int range; negative values are accepted and do not sleep.
    assert_eq!(
        t.wire(&[b"CONFIG", b"SET", b"rdb-key-save-delay", b"-2147483648"]),
        "+OK\r\n"
    );
    assert_eq!(
        t.wire(&[b"CONFIG", b"GET", b"rdb-key-save-delay"]),
        alloc::format!("{get}$11\r\n-2147483648\r\n")
    );
    assert_eq!(t.state.key_save_delay_us(), 0);
    assert_eq!(
        t.wire(&[b"CONFIG", b"SET", b"rdb-key-save-delay", b"2147483647"]),
        "+OK\r\n"
    );
    assert_eq!(t.state.key_save_delay_us(), 2_147_483_647);
    let parse_error = err(
        "ERR CONFIG SET failed (possibly related to argument 'rdb-key-save-delay') - argument couldn't be parsed into an integer",
    );
    for bad in [&b"abc"[..], b"", b"1.5", b"+1", b"01", b" 1", b"1us"] {
        assert_eq!(
            t.wire(&[b"CONFIG", b"SET", b"rdb-key-save-delay", bad]),
            parse_error,
            "{bad:?}"
        );
    }
    assert_eq!(
        t.wire(&[b"CONFIG", b"SET", b"rdb-key-save-delay", b"2147483648"]),
        err(
            "ERR CONFIG SET failed (possibly related to argument 'rdb-key-save-delay') - argument must be between -2147483648 and 2147483647 inclusive"
        )
    );
    // All or nothing: a bad value elsewhere leaves the delay alone.
    assert_eq!(
        t.wire(&[
            b"CONFIG",
            b"SET",
            b"rdb-key-save-delay",
            b"5",
            b"save",
            b"900"
        ]),
        err(
            "ERR CONFIG SET failed (possibly related to argument 'save') - Invalid save parameters"
        )
    );
    assert_eq!(t.state.config.rdb_key_save_delay, 2_147_483_647);
    assert_eq!(
        t.wire(&[b"CONFIG", b"SET", b"rdb-key-save-delay", b"0"]),
        "+OK\r\n"
    );
    assert_eq!(t.state.key_save_delay_us(), 0);
}

#[test]
fn command_introspection() {
    let mut t = T::new();
    assert_eq!(t.wire(&[b"COMMAND", b"DOCS"]), "*0\r\n");
    assert_eq!(t.wire(&[b"COMMAND", b"DOCS", b"get"]), "*0\r\n");
    assert_eq!(
        t.wire(&[b"COMMAND", b"COUNT"]),
        alloc::format!(":{}\r\n", table::COMMANDS.len())
    );
    assert_eq!(
        t.wire(&[b"COMMAND", b"INFO", b"get", b"nope"]),
        "*2\r\n*10\r\n$3\r\nget\r\n:2\r\n*2\r\n+readonly\r\n+fast\r\n:1\r\n:1\r\n:1\r\n*0\r\n*0\r\n*0\r\n*0\r\n*-1\r\n"
    );
    match t.reply(&[b"COMMAND"]) {
        Reply::Array(items) => assert_eq!(items.len(), table::COMMANDS.len()),
        other => panic!("{other:?}"),
    }
}

#[test]
fn client_names() {
    let mut t = T::new();
    assert_eq!(t.wire(&[b"CLIENT", b"GETNAME"]), "$-1\r\n");
    assert_eq!(t.wire(&[b"CLIENT", b"SETNAME", b"bench"]), "+OK\r\n");
    assert_eq!(t.wire(&[b"client", b"getname"]), "$5\r\nbench\r\n");
    assert_eq!(
        t.wire(&[b"CLIENT", b"SETNAME", b"a b"]),
        err("ERR Client names cannot contain spaces, newlines or special characters.")
    );
    assert_eq!(t.wire(&[b"CLIENT", b"SETNAME", b""]), "+OK\r\n");
    assert_eq!(t.wire(&[b"CLIENT", b"GETNAME"]), "$-1\r\n");
    assert_eq!(t.wire(&[b"CLIENT", b"ID"]), ":3\r\n");
    assert_eq!(
        t.wire(&[b"CLIENT", b"KILL"]),
        err("ERR unknown subcommand 'KILL'. Try CLIENT HELP.")
    );
}

#[test]
fn saving_commands() {
    let mut t = T::new();
    assert_eq!(t.run(&[b"SAVE"]), Outcome::Save);
    assert_eq!(t.run(&[b"bgsave"]), Outcome::BgSave);
    assert_eq!(t.run(&[b"BGSAVE", b"SCHEDULE"]), Outcome::BgSave);
    assert_eq!(t.run(&[b"BGSAVE", b"x"]), Outcome::Reply(SYNTAX_ERROR));
    assert_eq!(
        t.run(&[b"SAVE", b"x"]),
        Outcome::Reply(wrong_arity_name("save"))
    );
    t.state.persistence.child = Some(9);
    let busy = Outcome::Reply(Reply::error("ERR Background save already in progress"));
    assert_eq!(t.run(&[b"BGSAVE"]), busy);
    assert_eq!(t.run(&[b"SAVE"]), busy);
    assert_eq!(t.wire(&[b"LASTSAVE"]), ":1700000000\r\n");
    assert_eq!(t.run(&[b"QUIT"]), Outcome::Quit);
    assert_eq!(
        t.run(&[b"SHUTDOWN", b"NOSAVE", b"NOW"]),
        Outcome::Shutdown {
            save: ShutdownSave::NoSave,
            force: false
        }
    );
    assert_eq!(
        t.run(&[b"SHUTDOWN", b"force"]),
        Outcome::Shutdown {
            save: ShutdownSave::Default,
            force: true
        }
    );
    assert_eq!(
        t.run(&[b"SHUTDOWN", b"SAVE", b"NOSAVE"]),
        Outcome::Reply(SYNTAX_ERROR)
    );
    assert_eq!(
        t.run(&[b"SHUTDOWN", b"ABORT"]),
        Outcome::Reply(Reply::error("ERR No shutdown in progress."))
    );
}

#[test]
fn maxmemory_refuses_denyoom_commands() {
    let mut t = T::new();
    t.reply(&[b"SET", b"k", b"v"]);
    t.state.config.maxmemory = 1;
    assert_eq!(
        t.wire(&[b"SET", b"k2", b"v"]),
        err("OOM command not allowed when used memory > 'maxmemory'.")
    );
    assert_eq!(
        t.wire(&[b"INCR", b"n"]),
        err("OOM command not allowed when used memory > 'maxmemory'.")
    );
    assert_eq!(t.wire(&[b"GET", b"k"]), "$1\r\nv\r\n");
    assert_eq!(t.wire(&[b"DEL", b"k"]), ":1\r\n");
    assert_eq!(t.wire(&[b"SET", b"k2", b"v"]), "+OK\r\n");
}

#[test]
fn info_sections() {
    let mut t = T::new();
    t.reply(&[b"SET", b"a", b"1", b"EX", b"100"]);
    t.reply(&[b"SET", b"b", b"2"]);
    t.advance_ms(5000);
    let all = String::from_utf8(match t.reply(&[b"INFO"]) {
        Reply::Bulk(b) => b,
        other => panic!("{other:?}"),
    })
    .unwrap();
    for needle in [
        "# Server\r\nredis_version:7.0.15\r\n",
        "redis_mode:standalone\r\n",
        "process_id:42\r\n",
        "tcp_port:6379\r\n",
        "uptime_in_seconds:5\r\n",
        "\r\n\r\n# Clients\r\n",
        "# Memory\r\nused_memory:",
        "# Persistence\r\nloading:0\r\n",
        "rdb_changes_since_last_save:2\r\n",
        "rdb_bgsave_in_progress:0\r\n",
        "rdb_last_save_time:1700000000\r\n",
        "rdb_last_bgsave_status:ok\r\n",
        "rdb_last_bgsave_time_sec:-1\r\n",
        "latest_fork_usec:0\r\n",
        "rdb_last_cow_size:0\r\n",
        "# Stats\r\n",
        "# Replication\r\nrole:master\r\n",
        "# Keyspace\r\ndb0:keys=2,expires=1,avg_ttl=0\r\n",
    ] {
        assert!(all.contains(needle), "{needle:?} not in {all}");
    }
    assert!(all.ends_with("\r\n"));
    for line in all
        .split("\r\n")
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        assert!(line.contains(':'), "{line:?}");
    }
    let persistence = String::from_utf8(match t.reply(&[b"INFO", b"PERSISTENCE"]) {
        Reply::Bulk(b) => b,
        other => panic!("{other:?}"),
    })
    .unwrap();
    assert!(persistence.starts_with("# Persistence\r\n"));
    assert!(!persistence.contains("# Server"));
    assert_eq!(
        t.reply(&[b"INFO", b"nosuchsection"]),
        Reply::Bulk(Vec::new())
    );
    match t.reply(&[b"INFO", b"server", b"keyspace"]) {
        Reply::Bulk(b) => {
            let s = String::from_utf8(b).unwrap();
            assert!(s.starts_with("# Server\r\n") && s.contains("\r\n\r\n# Keyspace\r\n"));
        }
        other => panic!("{other:?}"),
    }
}
