//! The server's state besides the keyspace: its configuration, counters for `INFO`, and the
//! persistence state (changes since the last save, the background save in progress, the
//! last save's outcome).

use alloc::vec::Vec;

/// The time, read once per event-loop turn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Now {
    /// Milliseconds since the Unix epoch (expiry, `LASTSAVE`, `ctime`).
    pub unix_ms: i64,
    /// Microseconds of a monotonic clock (uptime, durations).
    pub mono_us: u64,
}

impl Now {
    /// Seconds since the Unix epoch.
    pub fn unix_secs(&self) -> i64 {
        self.unix_ms.div_euclid(1000)
    }
}

/// One save point (`save <seconds> <changes>`): save in the background when at least
/// `changes` writes happened and more than `seconds` passed since the last save.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SavePoint {
    /// Seconds since the last save.
    pub seconds: u64,
    /// Writes since the last save.
    pub changes: u64,
}

/// Redis 7.0's default save points, `save 3600 1 300 100 60 10000`.
pub const DEFAULT_SAVE_POINTS: [SavePoint; 3] = [
    SavePoint {
        seconds: 3600,
        changes: 1,
    },
    SavePoint {
        seconds: 300,
        changes: 100,
    },
    SavePoint {
        seconds: 60,
        changes: 10_000,
    },
];

/// The configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The TCP port (`INFO`'s `tcp_port`, `CONFIG GET port`).
    pub port: u16,
    /// The process id (`INFO`'s `process_id`).
    pub pid: u64,
    /// The most clients connected at once.
    pub maxclients: usize,
    /// Bytes of used memory above which `denyoom` commands are refused (0: no limit).
    pub maxmemory: u64,
    /// The save points (empty: no automatic saves).
    pub save_points: Vec<SavePoint>,
    /// `rdb-key-save-delay`: microseconds the background save's child sleeps after writing
    /// each key (Redis's range, `INT_MIN`..=`INT_MAX`; 0, the default, and negative values:
    /// no delay). A testing aid, as in Redis.
    pub rdb_key_save_delay: i32,
    /// The 40 hex characters of `run_id`.
    pub run_id: [u8; 40],
}

impl Config {
    /// The defaults for `port` and `pid`, with a `run_id` derived from `seed`.
    pub fn new(port: u16, pid: u64, seed: u64) -> Config {
        Config {
            port,
            pid,
            maxclients: 64,
            maxmemory: 0,
            save_points: DEFAULT_SAVE_POINTS.to_vec(),
            rdb_key_save_delay: 0,
            run_id: run_id(seed),
        }
    }
}

/// 40 hex characters from `seed` (splitmix64).
fn run_id(mut seed: u64) -> [u8; 40] {
    let mut out = [0u8; 40];
    for chunk in out.chunks_mut(16) {
        seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        for (i, c) in chunk.iter_mut().enumerate() {
            *c = b"0123456789abcdef"[((z >> (4 * i)) & 0xf) as usize];
        }
    }
    out
}

/// Counters of `INFO stats`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Connections accepted.
    pub connections_received: u64,
    /// Connections refused (too many clients).
    pub rejected_connections: u64,
    /// Commands run.
    pub commands_processed: u64,
    /// Bytes read from clients.
    pub net_input_bytes: u64,
    /// Bytes written to clients.
    pub net_output_bytes: u64,
    /// Lookups that found their key.
    pub keyspace_hits: u64,
    /// Lookups that did not.
    pub keyspace_misses: u64,
    /// Error replies sent.
    pub error_replies: u64,
    /// Forks made.
    pub total_forks: u64,
    /// The last `fork`'s duration in microseconds.
    pub latest_fork_usec: u64,
    /// Commands per second over the last samples.
    pub ops_per_sec: u64,
    /// The last sample: when (monotonic µs) and the command count then.
    pub last_sample: (u64, u64),
    /// Recent samples of commands per second.
    pub samples: [u64; 16],
    /// The next sample's slot.
    pub sample_index: usize,
}

impl Stats {
    /// Takes a commands-per-second sample at least every 100 ms (Redis's
    /// `instantaneous_ops_per_sec`: the mean of the last 16).
    pub fn sample(&mut self, now_us: u64) {
        let (at, count) = self.last_sample;
        let elapsed = now_us.saturating_sub(at);
        if elapsed < 100_000 {
            return;
        }
        let ops = self.commands_processed.saturating_sub(count);
        self.samples[self.sample_index] = ops * 1_000_000 / elapsed;
        self.sample_index = (self.sample_index + 1) % self.samples.len();
        self.ops_per_sec = self.samples.iter().sum::<u64>() / self.samples.len() as u64;
        self.last_sample = (now_us, self.commands_processed);
    }
}

/// The persistence state (`INFO persistence`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Persistence {
    /// Writes since the last successful save (`rdb_changes_since_last_save`).
    pub dirty: u64,
    /// `dirty` when the running background save started.
    pub dirty_before_bgsave: u64,
    /// The last successful save (Unix seconds; the start time before any).
    pub lastsave: i64,
    /// Whether the last background save succeeded.
    pub last_bgsave_ok: bool,
    /// When a background save was last tried (Unix seconds).
    pub last_bgsave_try: i64,
    /// The background save's child, while it runs.
    pub child: Option<u64>,
    /// When it started (Unix seconds).
    pub child_started: i64,
    /// Children killed and not yet reaped.
    pub killed: Vec<u64>,
    /// How long the last background save took, seconds (-1: none yet).
    pub last_bgsave_time_sec: i64,
    /// Saves started (`rdb_saves`).
    pub rdb_saves: u64,
    /// A `BGSAVE SCHEDULE` waits for the running save to end.
    pub bgsave_scheduled: bool,
    /// Keys loaded at start.
    pub keys_loaded: u64,
    /// Keys dropped at start because they had expired.
    pub keys_expired_at_load: u64,
    /// The memory the last successful background save's fork added, bytes
    /// (`rdb_last_cow_size`).
    pub rdb_last_cow_size: u64,
}

impl Persistence {
    /// The state at start, at Unix second `now`.
    pub fn new(now: i64) -> Persistence {
        Persistence {
            dirty: 0,
            dirty_before_bgsave: 0,
            lastsave: now,
            last_bgsave_ok: true,
            last_bgsave_try: 0,
            child: None,
            child_started: 0,
            killed: Vec::new(),
            last_bgsave_time_sec: -1,
            rdb_saves: 0,
            bgsave_scheduled: false,
            keys_loaded: 0,
            keys_expired_at_load: 0,
            rdb_last_cow_size: 0,
        }
    }
}

/// Everything but the keyspace and the connections.
#[derive(Clone, Debug)]
pub struct ServerState {
    /// The configuration.
    pub config: Config,
    /// The counters.
    pub stats: Stats,
    /// The persistence state.
    pub persistence: Persistence,
    /// When the server started.
    pub started: Now,
    /// Clients connected.
    pub connected_clients: usize,
    /// Bytes the clients' buffers hold.
    pub client_buffer_bytes: usize,
    /// The largest input buffer of a client recently.
    pub client_max_input: usize,
    /// The largest output buffer of a client recently.
    pub client_max_output: usize,
    /// The most memory used so far.
    pub peak_memory: u64,
    /// Bytes of heap handed out at least once (a high-water mark), when the program knows.
    pub heap_high_water: Option<u64>,
    /// `SHUTDOWN` succeeded: the program should exit.
    pub shutdown: bool,
}

impl ServerState {
    /// The state of a server starting at `now`.
    pub fn new(config: Config, now: Now) -> ServerState {
        ServerState {
            config,
            stats: Stats {
                last_sample: (now.mono_us, 0),
                ..Stats::default()
            },
            persistence: Persistence::new(now.unix_secs()),
            started: now,
            connected_clients: 0,
            client_buffer_bytes: 0,
            client_max_input: 0,
            client_max_output: 0,
            peak_memory: 0,
            heap_high_water: None,
            shutdown: false,
        }
    }

    /// The memory used: the keyspace's estimate and the clients' buffers.
    pub fn used_memory(&self, db: &crate::db::Db) -> u64 {
        (db.used_bytes() + self.client_buffer_bytes) as u64
    }

    /// The background save's delay after each key, in microseconds (`rdb-key-save-delay`;
    /// 0 for 0 and negative values).
    pub fn key_save_delay_us(&self) -> u64 {
        u64::try_from(self.config.rdb_key_save_delay).unwrap_or(0)
    }

    /// Whether memory is over `maxmemory`.
    pub fn over_maxmemory(&self, db: &crate::db::Db) -> bool {
        self.config.maxmemory != 0 && self.used_memory(db) > self.config.maxmemory
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_are_hex_and_differ() {
        let a = run_id(1);
        assert!(a.iter().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, run_id(2));
    }

    #[test]
    fn ops_per_sec_samples() {
        let mut s = Stats {
            commands_processed: 1000,
            ..Stats::default()
        };
        s.sample(50_000);
        assert_eq!(s.ops_per_sec, 0);
        s.sample(100_000);
        assert_eq!(s.samples[0], 10_000);
        assert_eq!(s.ops_per_sec, 10_000 / 16);
    }
}
