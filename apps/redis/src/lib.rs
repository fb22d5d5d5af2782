//! `fjord_redis`: a Redis-compatible server for Fjord, all of its logic as a `no_std` library
//! tested on the host; the `redis` program (`src/main.rs`) runs it as a μprocess with an
//! event loop over TCP sockets, and saves with `fork`.
//!
//! It speaks RESP2 as Redis 7.0.15 does (multibulk and inline requests, pipelining, Redis's
//! error texts), keeps string keys in memory with expiry, and saves them in RDB version 10
//! files that Redis 7.0 (Debian 12's `redis-server` and `redis-check-rdb`) reads: `SAVE` in
//! the foreground, `BGSAVE` and the save points in a forked child, as Redis does. At start
//! the program loads `dump.rdb` if there is one.
//!
//! # Commands
//!
//! - strings: `GET`, `SET key value [NX|XX] [GET] [EX s|PX ms|EXAT ts|PXAT ms-ts|KEEPTTL]`,
//!   `SETNX`, `SETEX`, `PSETEX`, `GETSET`, `GETDEL`, `APPEND`, `STRLEN`, `INCR`, `DECR`,
//!   `INCRBY`, `DECRBY`, `MGET`, `MSET`, `MSETNX`;
//! - keys: `DEL`, `UNLINK`, `EXISTS`, `TOUCH`, `KEYS pattern`, `TYPE`, `DBSIZE`,
//!   `FLUSHDB [ASYNC|SYNC]`, `FLUSHALL [ASYNC|SYNC]`, `EXPIRE`, `PEXPIRE`, `EXPIREAT`,
//!   `PEXPIREAT` (with `NX|XX|GT|LT`), `TTL`, `PTTL`, `EXPIRETIME`, `PEXPIRETIME`, `PERSIST`;
//! - connection: `PING [message]`, `ECHO`, `QUIT`, `SELECT 0`, `CLIENT ID|GETNAME|SETNAME|HELP`;
//! - server: `SAVE`, `BGSAVE [SCHEDULE]`, `LASTSAVE`, `SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE]`,
//!   `INFO [section ...]` (server, clients, memory, persistence, stats, replication, cluster,
//!   keyspace), `CONFIG GET|SET|RESETSTAT|HELP`, `COMMAND`, `COMMAND COUNT|DOCS|INFO|HELP`,
//!   `TIME`.
//!
//! `CONFIG SET` changes `save`, `maxmemory` and `rdb-key-save-delay` (`CONFIG GET` also
//! knows the fixed values of a few others, listed in `src/commands/admin.rs`).
//! `rdb-key-save-delay N`, the testing aid Redis's own tests
//! use to make a background save last, has the background save's child sleep N microseconds
//! after each key it writes ([`persist::Host::fork_save`]); 0, the default, and negative
//! values do not sleep. As in Redis it is a hidden parameter (`CONFIG GET` by its exact name
//! only) and takes -2147483648 to 2147483647.
//!
//! # How it differs from Redis 7.0.15
//!
//! - Strings only; one database (`SELECT` of another index: `ERR DB index is out of range`).
//!   No transactions, Pub/Sub, scripting, replication, ACLs, AOF, RESP3 (`HELLO`), `SCAN`,
//!   `OBJECT`, eviction (`maxmemory` refuses `denyoom` commands with Redis's `OOM` error,
//!   the `noeviction` policy).
//! - Limits: a bulk argument is at most 16 MiB ([`resp::MAX_BULK`]; Redis: 512 MiB), a request
//!   at most 1 Mi arguments ([`resp::MAX_MULTIBULK`]) and 32 MiB of them
//!   ([`resp::QUERY_BUFFER_LIMIT`]); 64 clients by default.
//! - `KEYS` lists keys sorted; Redis's order is its hash table's. `SAVE` and `BGSAVE` write
//!   keys in the table's order, as Redis does.
//! - The keyspace's table (`hashbrown`) doubles at once when it is 7/8 full: the write that
//!   grows a table of N keys moves all N, where Redis's `dict` rehashes a few buckets per
//!   operation.
//! - RDB files are written without LZF compression (`rdbcompression no`); compressed files
//!   from Redis load. A file holding other types than strings, or keys in another database,
//!   is refused at start with an error naming what it found.
//! - No `MISCONF`: a failed background save does not stop writes
//!   (`stop-writes-on-bgsave-error no`).
//! - `rdb-key-save-delay` slows the background save's child only; Redis's applies to every
//!   save (`SAVE`, `SHUTDOWN`'s). A negative value does not sleep at all; Redis's `-N` sleeps
//!   1 µs after a key with probability 1/N.
//! - `INFO`: see [`commands::info`] (`latest_fork_usec` also under `# Persistence`;
//!   `rdb_last_cow_size` is what the saving child reported its fork added;
//!   `used_memory` is an estimate). `COMMAND DOCS` replies with an empty array and `COMMAND`
//!   gives each command's name, arity, flags and key positions, without ACL categories or
//!   key specifications.
//!
//! # Modules
//!
//! - [`resp`]: the request parser and the reply encoders;
//! - [`db`]: the keyspace;
//! - [`commands`]: running commands;
//! - [`rdb`]: RDB files, written and read;
//! - [`persist`]: saving, in the foreground and in a forked child, through a [`persist::Host`];
//! - [`server`]: connections, pipelining and the periodic work, as a state machine;
//! - [`state`]: configuration, statistics, persistence state;
//! - [`glob`]: Redis's glob patterns;
//! - [`num`]: Redis's integer syntax.
//!
//! Cargo features: none.
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod commands;
pub mod db;
pub mod glob;
pub mod num;
pub mod persist;
pub mod rdb;
pub mod resp;
pub mod server;
pub mod state;

pub use commands::{ClientInfo, Outcome, execute};
pub use db::Db;
pub use persist::Host;
pub use resp::{ProtocolError, Reply, parse};
pub use server::Server;
pub use state::{Config, Now};
