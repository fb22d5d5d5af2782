//! The `INFO` text, laid out as Redis 7.0.15's `genRedisInfoString` lays it out: sections
//! `# Server`, `# Clients`, `# Memory`, `# Persistence`, `# Stats`, `# Replication`,
//! `# Cluster`, `# Keyspace`, each line `field:value\r\n`, sections separated by an empty
//! line. Each section has the fields this server can fill (the ones dashboards and
//! `redis-cli` read; the omitted ones describe machinery it does not have: Lua, modules,
//! active defrag, AOF rewrites, replicas, CPU usage).
//!
//! Differences from Redis: `latest_fork_usec` is also in `# Persistence` (Redis has it in
//! `# Stats` only) so that `INFO persistence` alone tells the fork's cost;
//! `rdb_last_cow_size` is what the last successful save's child reported its fork added (on
//! Fjord the most memory its area held of its own at once, `process::peak_private_memory`:
//! a high-water mark, where Redis on Linux reports the child's private dirty memory at its
//! end), and the `current_cow_*` fields are 0 (no progress reports during a save);
//! `used_memory` is the keyspace's estimate plus the clients' buffers
//! ([`crate::db::Db::used_bytes`]), and `used_memory_rss` the heap's high-water mark when the
//! program knows it.

use crate::db::Db;
use crate::rdb::REDIS_VERSION;
use crate::state::{Now, ServerState};
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write;

/// Every section, in order.
pub const SECTIONS: &[&str] = &[
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "cluster",
    "keyspace",
];

/// `n` bytes as Redis's `bytesToHuman` writes them (`1.50M`).
pub fn human(n: u64) -> String {
    const K: u64 = 1024;
    let (div, unit) = match n {
        _ if n < K => return alloc::format!("{n}B"),
        _ if n < K * K => (K, 'K'),
        _ if n < K * K * K => (K * K, 'M'),
        _ if n < K * K * K * K => (K * K * K, 'G'),
        _ if n < K * K * K * K * K => (K * K * K * K, 'T'),
        _ if n < K * K * K * K * K * K => (K * K * K * K * K, 'P'),
        _ => return alloc::format!("{n}B"),
    };
    alloc::format!("{:.2}{unit}", n as f64 / div as f64)
}

/// Which sections `args` ask for (`INFO [section ...]`; none: the default ones, which here
/// are all of them; `all`, `everything`, `default` too).
fn wanted(args: &[Vec<u8>]) -> [bool; SECTIONS.len()] {
    let mut want = [args.is_empty(); SECTIONS.len()];
    for arg in args {
        let all = ["all", "everything", "default"]
            .iter()
            .any(|w| arg.eq_ignore_ascii_case(w.as_bytes()));
        for (i, s) in SECTIONS.iter().enumerate() {
            if all || arg.eq_ignore_ascii_case(s.as_bytes()) {
                want[i] = true;
            }
        }
    }
    want
}

/// The `INFO` text for `args`.
pub fn info(db: &Db, state: &ServerState, now: Now, args: &[Vec<u8>]) -> Vec<u8> {
    let want = wanted(args);
    let mut out = String::new();
    for (i, name) in SECTIONS.iter().enumerate() {
        if !want[i] {
            continue;
        }
        if !out.is_empty() {
            out.push_str("\r\n");
        }
        let _ = section(&mut out, name, db, state, now);
    }
    out.into_bytes()
}

fn section(
    out: &mut String,
    name: &str,
    db: &Db,
    state: &ServerState,
    now: Now,
) -> core::fmt::Result {
    let p = &state.persistence;
    let s = &state.stats;
    let c = &state.config;
    let secs = now.unix_secs();
    match name {
        "server" => {
            let uptime = now.mono_us.saturating_sub(state.started.mono_us) / 1_000_000;
            let run_id = core::str::from_utf8(&c.run_id).unwrap_or("");
            write!(
                out,
                "# Server\r\n\
                 redis_version:{REDIS_VERSION}\r\n\
                 redis_git_sha1:00000000\r\n\
                 redis_git_dirty:0\r\n\
                 redis_build_id:0\r\n\
                 redis_mode:standalone\r\n\
                 os:Fjord x86_64\r\n\
                 arch_bits:64\r\n\
                 monotonic_clock:Fjord clock\r\n\
                 multiplexing_api:poll\r\n\
                 atomicvar_api:none\r\n\
                 gcc_version:0.0.0\r\n\
                 process_id:{}\r\n\
                 process_supervised:no\r\n\
                 run_id:{run_id}\r\n\
                 tcp_port:{}\r\n\
                 server_time_usec:{}\r\n\
                 uptime_in_seconds:{uptime}\r\n\
                 uptime_in_days:{}\r\n\
                 hz:10\r\n\
                 configured_hz:10\r\n\
                 lru_clock:{}\r\n\
                 executable:\r\n\
                 config_file:\r\n\
                 io_threads_active:0\r\n",
                c.pid,
                c.port,
                now.unix_ms.saturating_mul(1000),
                uptime / 86_400,
                secs.rem_euclid(1 << 24),
            )
        }
        "clients" => write!(
            out,
            "# Clients\r\n\
             connected_clients:{}\r\n\
             cluster_connections:0\r\n\
             maxclients:{}\r\n\
             client_recent_max_input_buffer:{}\r\n\
             client_recent_max_output_buffer:{}\r\n\
             blocked_clients:0\r\n\
             tracking_clients:0\r\n\
             clients_in_timeout_table:0\r\n",
            state.connected_clients, c.maxclients, state.client_max_input, state.client_max_output,
        ),
        "memory" => {
            let used = state.used_memory(db);
            let peak = state.peak_memory.max(used);
            let rss = state.heap_high_water.unwrap_or(used).max(used);
            write!(
                out,
                "# Memory\r\n\
                 used_memory:{used}\r\n\
                 used_memory_human:{}\r\n\
                 used_memory_rss:{rss}\r\n\
                 used_memory_rss_human:{}\r\n\
                 used_memory_peak:{peak}\r\n\
                 used_memory_peak_human:{}\r\n\
                 used_memory_dataset:{}\r\n\
                 maxmemory:{}\r\n\
                 maxmemory_human:{}\r\n\
                 maxmemory_policy:noeviction\r\n\
                 mem_allocator:fjord-libos\r\n",
                human(used),
                human(rss),
                human(peak),
                db.used_bytes(),
                c.maxmemory,
                human(c.maxmemory),
            )
        }
        "persistence" => {
            let in_progress = p.child.is_some();
            let current = if in_progress {
                secs - p.child_started
            } else {
                -1
            };
            write!(
                out,
                "# Persistence\r\n\
                 loading:0\r\n\
                 async_loading:0\r\n\
                 current_cow_peak:0\r\n\
                 current_cow_size:0\r\n\
                 current_cow_size_age:0\r\n\
                 current_fork_perc:0.00\r\n\
                 current_save_keys_processed:0\r\n\
                 current_save_keys_total:0\r\n\
                 rdb_changes_since_last_save:{}\r\n\
                 rdb_bgsave_in_progress:{}\r\n\
                 rdb_last_save_time:{}\r\n\
                 rdb_last_bgsave_status:{}\r\n\
                 rdb_last_bgsave_time_sec:{}\r\n\
                 rdb_current_bgsave_time_sec:{current}\r\n\
                 rdb_saves:{}\r\n\
                 rdb_last_cow_size:{}\r\n\
                 rdb_last_load_keys_expired:{}\r\n\
                 rdb_last_load_keys_loaded:{}\r\n\
                 aof_enabled:0\r\n\
                 aof_rewrite_in_progress:0\r\n\
                 aof_rewrite_scheduled:0\r\n\
                 aof_last_rewrite_time_sec:-1\r\n\
                 aof_current_rewrite_time_sec:-1\r\n\
                 aof_last_bgrewrite_status:ok\r\n\
                 aof_rewrites:0\r\n\
                 aof_rewrites_consecutive_failures:0\r\n\
                 aof_last_write_status:ok\r\n\
                 aof_last_cow_size:0\r\n\
                 module_fork_in_progress:0\r\n\
                 module_fork_last_cow_size:0\r\n\
                 latest_fork_usec:{}\r\n",
                p.dirty,
                u8::from(in_progress),
                p.lastsave,
                if p.last_bgsave_ok { "ok" } else { "err" },
                p.last_bgsave_time_sec,
                p.rdb_saves,
                p.rdb_last_cow_size,
                p.keys_expired_at_load,
                p.keys_loaded,
                s.latest_fork_usec,
            )
        }
        "stats" => write!(
            out,
            "# Stats\r\n\
             total_connections_received:{}\r\n\
             total_commands_processed:{}\r\n\
             instantaneous_ops_per_sec:{}\r\n\
             total_net_input_bytes:{}\r\n\
             total_net_output_bytes:{}\r\n\
             rejected_connections:{}\r\n\
             expired_keys:{}\r\n\
             evicted_keys:0\r\n\
             keyspace_hits:{}\r\n\
             keyspace_misses:{}\r\n\
             latest_fork_usec:{}\r\n\
             total_forks:{}\r\n\
             total_error_replies:{}\r\n",
            s.connections_received,
            s.commands_processed,
            s.ops_per_sec,
            s.net_input_bytes,
            s.net_output_bytes,
            s.rejected_connections,
            db.expired_keys(),
            s.keyspace_hits,
            s.keyspace_misses,
            s.latest_fork_usec,
            s.total_forks,
            s.error_replies,
        ),
        "replication" => {
            let replid = core::str::from_utf8(&c.run_id).unwrap_or("");
            write!(
                out,
                "# Replication\r\n\
                 role:master\r\n\
                 connected_slaves:0\r\n\
                 master_failover_state:no-failover\r\n\
                 master_replid:{replid}\r\n\
                 master_replid2:0000000000000000000000000000000000000000\r\n\
                 master_repl_offset:0\r\n\
                 second_repl_offset:-1\r\n\
                 repl_backlog_active:0\r\n\
                 repl_backlog_size:1048576\r\n\
                 repl_backlog_first_byte_offset:0\r\n\
                 repl_backlog_histlen:0\r\n"
            )
        }
        "cluster" => write!(out, "# Cluster\r\ncluster_enabled:0\r\n"),
        _ => {
            write!(out, "# Keyspace\r\n")?;
            if !db.is_empty() || db.expires_len() > 0 {
                write!(
                    out,
                    "db0:keys={},expires={},avg_ttl=0\r\n",
                    db.len(),
                    db.expires_len()
                )?;
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_sizes() {
        assert_eq!(human(0), "0B");
        assert_eq!(human(1023), "1023B");
        assert_eq!(human(1024), "1.00K");
        assert_eq!(human(1536), "1.50K");
        assert_eq!(human(100 << 20), "100.00M");
        assert_eq!(human(3 << 30), "3.00G");
    }
}
