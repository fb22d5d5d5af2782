//! Saving: the [`Host`] the program implements (writing the file, forking the child, reaping
//! it) and the persistence logic around it, as Redis 7.0's `rdb.c` and `serverCron` do it:
//! `SAVE` in the foreground, `BGSAVE` in a forked child, the save points checked on each
//! tick, the child's exit recorded when it is reaped.

use crate::db::Db;
use crate::rdb::AuxInfo;
use crate::state::{Now, ServerState};

/// Redis's `CONFIG_BGSAVE_RETRY_DELAY`: after a failed background save, the save points wait
/// this many seconds before trying again.
pub const BGSAVE_RETRY_DELAY: i64 = 5;

/// The signal a background save's child is killed with when its result is no longer wanted
/// (`SIGUSR1`, which Redis does not count as a failure).
pub const SIGUSR1: u8 = 10;

/// `fork` failed (or the save could not start).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForkFailed;

/// A child that was forked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Forked {
    /// Its process id.
    pub pid: u64,
    /// How long `fork` took, in microseconds.
    pub fork_usec: u64,
}

/// How a child is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChildStatus {
    /// It runs.
    Running,
    /// It exited with this code (0: the file was saved).
    Exited(u8),
    /// It was killed by this signal.
    Killed(u8),
    /// There is no such child (it was reaped already, or never existed).
    Gone,
}

/// What the server needs from the program to save.
pub trait Host {
    /// Writes `db` to the RDB file in the foreground (`temp-<pid>.rdb`, synced, renamed to
    /// `dump.rdb`); whether it worked.
    fn save(&mut self, db: &Db, aux: &AuxInfo) -> bool;
    /// Forks a child that writes `db` as [`Host::save`] does and exits with 0 on success, 1
    /// on failure; in the parent, the child. The child must never return from this call.
    /// After writing each key the child sleeps `key_delay_us` microseconds (0: not at all;
    /// `rdb-key-save-delay`, see [`crate::rdb::write_snapshot_with_key_hook`]).
    /// The child has `db` to itself (its own copy): it may change it, as it gives back the
    /// memory of the values it has written.
    fn fork_save(
        &mut self,
        db: &mut Db,
        aux: &AuxInfo,
        key_delay_us: u64,
    ) -> Result<Forked, ForkFailed>;
    /// Reaps the child `pid` if it ended, without waiting.
    fn poll_child(&mut self, pid: u64) -> ChildStatus;
    /// Kills the child `pid` with `signal` (it is reaped later by [`Host::poll_child`]).
    fn kill_child(&mut self, pid: u64, signal: u8);
    /// The memory the fork of the ended child `pid` added, in bytes, as the child reported it
    /// before exiting (Linux Redis's child reports its private dirty memory); 0 when it
    /// reported nothing.
    fn child_copied_bytes(&mut self, pid: u64) -> u64;
}

/// The AUX fields of a snapshot taken now.
pub fn aux_info(db: &Db, state: &ServerState, now: Now) -> AuxInfo {
    AuxInfo {
        ctime: now.unix_secs(),
        used_mem: state.used_memory(db),
    }
}

/// Saves in the foreground (`rdbSave`); on success the changes count restarts.
pub fn save(db: &Db, state: &mut ServerState, host: &mut dyn Host, now: Now) -> bool {
    state.persistence.rdb_saves += 1;
    if host.save(db, &aux_info(db, state, now)) {
        let p = &mut state.persistence;
        p.dirty = 0;
        p.lastsave = now.unix_secs();
        p.last_bgsave_ok = true;
        true
    } else {
        false
    }
}

/// Starts a background save (`rdbSaveBackground`); the caller checked none runs. The child
/// sleeps `rdb-key-save-delay` microseconds after each key (a foreground save never does;
/// Redis's `rdbSaveKeyValuePair` delays every save).
pub fn start_bgsave(
    db: &mut Db,
    state: &mut ServerState,
    host: &mut dyn Host,
    now: Now,
) -> Result<(), ForkFailed> {
    state.persistence.last_bgsave_try = now.unix_secs();
    state.persistence.dirty_before_bgsave = state.persistence.dirty;
    let aux = aux_info(db, state, now);
    match host.fork_save(db, &aux, state.key_save_delay_us()) {
        Ok(forked) => {
            let p = &mut state.persistence;
            p.child = Some(forked.pid);
            p.child_started = now.unix_secs();
            p.rdb_saves += 1;
            state.stats.latest_fork_usec = forked.fork_usec;
            state.stats.total_forks += 1;
            Ok(())
        }
        Err(e) => {
            state.persistence.last_bgsave_ok = false;
            Err(e)
        }
    }
}

/// Kills the running background save's child, if any (`killRDBChild`); its end is not
/// counted as a failure.
pub fn kill_bgsave(state: &mut ServerState, host: &mut dyn Host) {
    if let Some(pid) = state.persistence.child.take() {
        host.kill_child(pid, SIGUSR1);
        state.persistence.killed.push(pid);
        state.persistence.bgsave_scheduled = false;
    }
}

/// Records the end of the background save (`backgroundSaveDoneHandlerDisk`), whose child
/// reported `copied` bytes added by its fork.
fn bgsave_done(state: &mut ServerState, status: ChildStatus, now: Now, copied: u64) {
    let p = &mut state.persistence;
    match status {
        ChildStatus::Exited(0) => {
            p.dirty = p.dirty.saturating_sub(p.dirty_before_bgsave);
            p.lastsave = now.unix_secs();
            p.last_bgsave_ok = true;
            p.rdb_last_cow_size = copied;
        }
        ChildStatus::Killed(SIGUSR1) => {}
        _ => p.last_bgsave_ok = false,
    }
    p.last_bgsave_time_sec = now.unix_secs() - p.child_started;
    p.child = None;
}

/// The periodic work (`serverCron`'s part): reaps the child and records how it ended, then
/// starts a background save if one was scheduled or a save point is reached.
pub fn cron(db: &mut Db, state: &mut ServerState, host: &mut dyn Host, now: Now) {
    state
        .persistence
        .killed
        .retain(|&pid| host.poll_child(pid) == ChildStatus::Running);
    if let Some(pid) = state.persistence.child {
        match host.poll_child(pid) {
            ChildStatus::Running => return,
            status => {
                let copied = host.child_copied_bytes(pid);
                bgsave_done(state, status, now, copied)
            }
        }
    }
    let p = &state.persistence;
    let secs = now.unix_secs();
    let due = p.bgsave_scheduled
        || state.config.save_points.iter().any(|sp| {
            p.dirty >= sp.changes
                && secs - p.lastsave > sp.seconds as i64
                && (secs - p.last_bgsave_try > BGSAVE_RETRY_DELAY || p.last_bgsave_ok)
        });
    if due {
        state.persistence.bgsave_scheduled = false;
        let _ = start_bgsave(db, state, host, now);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::rdb;
    use crate::state::Config;
    use alloc::vec::Vec;

    /// A host that keeps the files in memory and forks by saving at once.
    #[derive(Default)]
    pub struct MemHost {
        /// The last file saved.
        pub file: Option<Vec<u8>>,
        /// Foreground saves fail.
        pub fail_save: bool,
        /// Forks fail.
        pub fail_fork: bool,
        /// The next children's status.
        pub child_status: Option<ChildStatus>,
        /// What every child reports its fork added.
        pub copied: u64,
        /// Children forked.
        pub forks: Vec<u64>,
        /// The per-key delay each child was given, microseconds.
        pub key_delays: Vec<u64>,
        /// Per-key delays the children would have slept, microseconds, in all.
        pub slept_us: u64,
        /// Children killed.
        pub kills: Vec<(u64, u8)>,
    }

    impl Host for MemHost {
        fn save(&mut self, db: &Db, aux: &AuxInfo) -> bool {
            if self.fail_save {
                return false;
            }
            self.file = Some(rdb::snapshot_bytes(db, aux));
            true
        }

        fn fork_save(
            &mut self,
            db: &mut Db,
            aux: &AuxInfo,
            key_delay_us: u64,
        ) -> Result<Forked, ForkFailed> {
            if self.fail_fork {
                return Err(ForkFailed);
            }
            let pid = 100 + self.forks.len() as u64;
            self.forks.push(pid);
            self.key_delays.push(key_delay_us);
            let mut file = Vec::new();
            let slept = &mut self.slept_us;
            let r: Result<u64, core::convert::Infallible> = rdb::write_snapshot_with_key_hook(
                db,
                aux,
                |chunk| {
                    file.extend_from_slice(chunk);
                    Ok(())
                },
                || *slept += key_delay_us,
            );
            let _ = r;
            self.file = Some(file);
            Ok(Forked {
                pid,
                fork_usec: 250,
            })
        }

        fn poll_child(&mut self, pid: u64) -> ChildStatus {
            if self.kills.iter().any(|&(p, _)| p == pid) {
                return ChildStatus::Killed(SIGUSR1);
            }
            self.child_status.unwrap_or(ChildStatus::Running)
        }

        fn kill_child(&mut self, pid: u64, signal: u8) {
            self.kills.push((pid, signal));
        }

        fn child_copied_bytes(&mut self, _pid: u64) -> u64 {
            self.copied
        }
    }

    fn at(secs: i64) -> Now {
        Now {
            unix_ms: secs * 1000,
            mono_us: secs as u64 * 1_000_000,
        }
    }

    #[test]
    fn a_background_save_runs_to_its_end() {
        let mut db = Db::new();
        let mut state = ServerState::new(Config::new(6379, 1, 0), at(1000));
        let mut host = MemHost::default();
        state.persistence.dirty = 5;
        start_bgsave(&mut db, &mut state, &mut host, at(1001)).unwrap();
        assert_eq!(state.persistence.child, Some(100));
        assert_eq!(state.stats.latest_fork_usec, 250);
        state.persistence.dirty = 8; // three writes during the save
        cron(&mut db, &mut state, &mut host, at(1002));
        assert_eq!(state.persistence.child, Some(100));
        host.child_status = Some(ChildStatus::Exited(0));
        host.copied = 12_288;
        cron(&mut db, &mut state, &mut host, at(1004));
        let p = &state.persistence;
        assert_eq!(
            (p.child, p.dirty, p.lastsave, p.last_bgsave_ok),
            (None, 3, 1004, true)
        );
        assert_eq!(p.rdb_last_cow_size, 12_288);
        assert_eq!(p.last_bgsave_time_sec, 3);
    }

    #[test]
    fn the_child_gets_rdb_key_save_delay() {
        let mut db = Db::new();
        for key in [&b"a"[..], b"b", b"c"] {
            db.set(key.to_vec(), b"v".to_vec(), crate::db::Ttl::Clear);
        }
        let mut state = ServerState::new(Config::new(6379, 1, 0), at(0));
        let mut host = MemHost::default();
        start_bgsave(&mut db, &mut state, &mut host, at(1)).unwrap();
        state.persistence.child = None;
        state.config.rdb_key_save_delay = 1500;
        start_bgsave(&mut db, &mut state, &mut host, at(2)).unwrap();
        state.persistence.child = None;
        state.config.rdb_key_save_delay = -7;
        start_bgsave(&mut db, &mut state, &mut host, at(3)).unwrap();
        assert_eq!(host.key_delays, [0, 1500, 0]);
        assert_eq!(host.slept_us, 3 * 1500);
        assert_eq!(
            host.file,
            Some(rdb::snapshot_bytes(&db, &aux_info(&db, &state, at(3))))
        );
    }

    #[test]
    fn a_failed_child_is_an_error_and_a_killed_one_is_not() {
        let mut db = Db::new();
        let mut state = ServerState::new(Config::new(6379, 1, 0), at(0));
        state.config.save_points.clear();
        let mut host = MemHost::default();
        start_bgsave(&mut db, &mut state, &mut host, at(1)).unwrap();
        host.child_status = Some(ChildStatus::Exited(1));
        cron(&mut db, &mut state, &mut host, at(2));
        assert!(!state.persistence.last_bgsave_ok);
        host.child_status = None;
        state.persistence.last_bgsave_ok = true;
        start_bgsave(&mut db, &mut state, &mut host, at(3)).unwrap();
        kill_bgsave(&mut state, &mut host);
        assert_eq!(host.kills, [(101, SIGUSR1)]);
        assert_eq!(state.persistence.child, None);
        cron(&mut db, &mut state, &mut host, at(4));
        assert!(state.persistence.killed.is_empty());
        assert!(state.persistence.last_bgsave_ok);
    }

    #[test]
    fn save_points_trigger_background_saves() {
        let mut db = Db::new();
        let mut state = ServerState::new(Config::new(6379, 1, 0), at(0));
        let mut host = MemHost::default();
        state.persistence.dirty = 100;
        cron(&mut db, &mut state, &mut host, at(300));
        assert!(host.forks.is_empty(), "300 s is not more than 300 s");
        cron(&mut db, &mut state, &mut host, at(301));
        assert_eq!(host.forks.len(), 1);
        // A failed fork waits for the retry delay.
        let mut state = ServerState::new(Config::new(6379, 1, 0), at(0));
        state.persistence.dirty = 1;
        host.fail_fork = true;
        cron(&mut db, &mut state, &mut host, at(3601));
        assert!(!state.persistence.last_bgsave_ok);
        host.fail_fork = false;
        cron(&mut db, &mut state, &mut host, at(3604));
        assert_eq!(host.forks.len(), 1);
        cron(&mut db, &mut state, &mut host, at(3607));
        assert_eq!(host.forks.len(), 2);
    }
}
