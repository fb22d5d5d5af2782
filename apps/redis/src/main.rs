//! The `redis` program: a Redis-compatible server on TCP port 6379, as a Fjord μprocess.
//!
//! At start it loads `dump.rdb` from its disk namespace if the file exists (a file it cannot
//! load stops it with exit code 1, as Redis refuses to start), then serves up to 64 clients
//! from one event loop: `poll` over the non-blocking listening socket and every connection,
//! with a 100 ms timeout so that the periodic work ([`fjord_redis::Server::tick`]: reaping
//! the saving child, the save points, active expiry) runs even when no client talks.
//! Everything else, parsing, commands, replies, is the `fjord_redis` library; this file only
//! moves bytes and implements its [`fjord_redis::Host`]:
//!
//! - `SAVE` writes `temp-<pid>.rdb` in the foreground, `fsync`s it and renames it over
//!   `dump.rdb`;
//! - `BGSAVE` (and the save points) `fork`: the child writes the file the same way and exits
//!   with 0 (1 on failure); it never returns to the event loop and never touches a client
//!   socket. `fork`'s duration, from the monotonic clock, is `latest_fork_usec`. The parent
//!   reaps the child with `waitpid(child, WNOHANG)` on each tick. With `CONFIG SET
//!   rdb-key-save-delay N` (N > 0) the child `sleep`s N microseconds after each key it
//!   writes, to make a background save last (Redis's testing aid); `SAVE` never sleeps.
//!
//! Memory: the heap is 256 MiB (the manifest below) and `maxmemory` 192 MiB, so the keyspace
//! estimate refuses writes (`-OOM`) before the heap runs out. A μprocess's area is committed
//! whole when it is created, and so is a forked child's: `BGSAVE` needs about 2 × 256 MiB of
//! free guest memory (`cargo xtask run --mem 1024`).
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
extern crate alloc;

#[cfg(target_os = "none")]
mod program {
    use alloc::format;
    use alloc::vec;
    use alloc::vec::Vec;
    use fjord_libos::abi::Error;
    use fjord_libos::heap::FunctionHeap;
    use fjord_libos::net::{
        self, POLLERR, POLLHUP, POLLIN, POLLNVAL, POLLOUT, PollFd, TcpListener,
    };
    use fjord_libos::process::{self, Clock, ExitStatus, Fd, OpenMode, WNOHANG};
    use fjord_redis::persist::{ChildStatus, ForkFailed, Forked, Host};
    use fjord_redis::rdb::{self, AuxInfo};
    use fjord_redis::server::{ClientId, MAX_CLIENTS_REPLY, Server};
    use fjord_redis::{Config, Db, Now};

    /// The port it listens on (Redis's).
    pub const PORT: u16 = 6379;
    /// Connections waiting to be accepted.
    const BACKLOG: u32 = 128;
    /// The heap, as the manifest declares it.
    const HEAP_BYTES: u64 = 256 << 20;
    /// `maxmemory`: three quarters of the heap.
    const MAXMEMORY: u64 = 192 << 20;
    /// Bytes read from a socket at a time.
    const READ_CHUNK: usize = 16 * 1024;
    /// Reads from one connection per turn of the loop (fairness between clients).
    const READS_PER_TURN: usize = 4;
    /// Connections accepted per turn of the loop.
    const ACCEPTS_PER_TURN: usize = 16;
    /// `poll`'s timeout: the period of the periodic work.
    const TICK_MS: i64 = 100;
    /// The RDB file.
    const DUMP: &str = "dump.rdb";

    fn now() -> Now {
        Now {
            unix_ms: (process::clock_ns(Clock::Realtime) / 1_000_000) as i64,
            mono_us: process::clock_ns(Clock::Monotonic) / 1_000,
        }
    }

    fn log(msg: &str) {
        process::print(msg);
    }

    /// Writes all of `data` to the file `fd`.
    fn write_all(fd: Fd, mut data: &[u8]) -> Result<(), Option<Error>> {
        while !data.is_empty() {
            let n = process::write(fd, data)?;
            if n == 0 {
                return Err(Some(Error::Io));
            }
            data = &data[n.min(data.len())..];
        }
        Ok(())
    }

    /// What a save does with `db` once a key is written.
    enum AfterKey<'a> {
        /// Nothing: a foreground save (`SAVE`), whose keyspace goes on serving.
        Keep(&'a Db),
        /// Gives the value's memory back ([`process::discard`]): the forked child, whose copy
        /// of the keyspace is its own and never read again (Redis's `dismissObject`), so that
        /// the parent's later write to that value copies nothing.
        Discard(&'a mut Db),
    }

    /// Saves the keyspace as Redis's `rdbSave` does: `temp-<pid>.rdb`, synced, renamed to
    /// `dump.rdb` (the temporary file is removed on failure); the file's size. After each key
    /// it sleeps `key_delay_us` microseconds (0: not at all; `rdb-key-save-delay`).
    fn save_file(db: AfterKey<'_>, aux: &AuxInfo, key_delay_us: u64) -> Result<u64, Option<Error>> {
        let tmp = format!("temp-{}.rdb", process::getpid());
        let fd = process::open(&tmp, OpenMode::Write)?;
        let delay_ns = key_delay_us.saturating_mul(1_000);
        let pause = || {
            if delay_ns > 0 {
                process::sleep(delay_ns);
            }
        };
        let sink = |chunk: &[u8]| write_all(fd, chunk);
        let written = match db {
            AfterKey::Keep(db) => rdb::write_snapshot_with_key_hook(db, aux, sink, pause),
            AfterKey::Discard(db) => rdb::write_snapshot_dismissing(
                db,
                aux,
                sink,
                |values| {
                    let _ = process::discard_all(values);
                },
                pause,
            ),
        }
        .and_then(|n| process::fsync(fd).map(|()| n));
        let closed = process::close(fd);
        let result = written
            .and_then(|n| closed.map(|()| n))
            .and_then(|n| process::rename(&tmp, DUMP).map(|()| n));
        if result.is_err() {
            let _ = process::unlink(&tmp);
        }
        result
    }

    /// Saving with Fjord's files, `fork` and `waitpid`.
    /// The program's [`Host`]: what each saving child reports through a pipe (the read end,
    /// by child) and what the ended ones reported.
    #[derive(Default)]
    struct FjordHost {
        reports: alloc::collections::BTreeMap<u64, Fd>,
        copied: alloc::collections::BTreeMap<u64, u64>,
    }

    impl Host for FjordHost {
        fn save(&mut self, db: &Db, aux: &AuxInfo) -> bool {
            let t0 = process::clock_ns(Clock::Monotonic);
            match save_file(AfterKey::Keep(db), aux, 0) {
                Ok(bytes) => {
                    let ms = (process::clock_ns(Clock::Monotonic) - t0) / 1_000_000;
                    log(&format!("redis: DB saved on disk ({bytes} bytes, {ms} ms)"));
                    true
                }
                Err(e) => {
                    log(&format!("redis: failed saving the DB: {e:?}"));
                    false
                }
            }
        }

        fn fork_save(
            &mut self,
            db: &mut Db,
            aux: &AuxInfo,
            key_delay_us: u64,
        ) -> Result<Forked, ForkFailed> {
            // The child reports the memory its fork added through a pipe, as Redis's child
            // reports its copy-on-write size; without a pipe the save goes on unreported.
            let report = process::pipe().ok();
            let t0 = process::clock_ns(Clock::Monotonic);
            match process::fork() {
                Ok(0) => {
                    // The child: it writes its copy of the keyspace and exits, never going
                    // back to the event loop or touching a client's socket.
                    let saved = save_file(AfterKey::Discard(db), aux, key_delay_us);
                    let peak = process::peak_private_memory();
                    if let Some((r, w)) = report {
                        let _ = process::close(r);
                        let _ = write_all(w, &peak.to_le_bytes());
                    }
                    let code = match saved {
                        Ok(bytes) => {
                            // As Redis's child logs its copy-on-write size.
                            log(&format!(
                                "redis: DB saved on disk by the child ({bytes} bytes); RDB: {} \
                                 KiB of memory used by copy-on-write at most, {} KiB at the \
                                 end ({} KiB copied from the parent)",
                                peak >> 10,
                                process::private_memory() >> 10,
                                process::copied_memory() >> 10
                            ));
                            0
                        }
                        Err(e) => {
                            log(&format!("redis: the child failed saving the DB: {e:?}"));
                            1
                        }
                    };
                    process::exit(code)
                }
                Ok(pid) => {
                    let fork_usec = process::clock_ns(Clock::Monotonic).saturating_sub(t0) / 1_000;
                    if let Some((r, w)) = report {
                        let _ = process::close(w);
                        self.reports.insert(pid, r);
                    }
                    log(&format!(
                        "redis: background saving started by pid {pid} (fork: {fork_usec} us)"
                    ));
                    Ok(Forked { pid, fork_usec })
                }
                Err(e) => {
                    if let Some((r, w)) = report {
                        let _ = process::close(r);
                        let _ = process::close(w);
                    }
                    log(&format!("redis: can't save in background: fork: {e:?}"));
                    Err(ForkFailed)
                }
            }
        }

        fn poll_child(&mut self, pid: u64) -> ChildStatus {
            let status = self.reap(pid);
            if status != ChildStatus::Running
                && let Some(fd) = self.reports.remove(&pid)
            {
                // The child has ended: its report is in the pipe, or it wrote none (EOF).
                let mut bytes = [0u8; 8];
                if process::read(fd, &mut bytes) == Ok(8) {
                    self.copied.insert(pid, u64::from_le_bytes(bytes));
                }
                let _ = process::close(fd);
            }
            status
        }

        fn child_copied_bytes(&mut self, pid: u64) -> u64 {
            self.copied.remove(&pid).unwrap_or(0)
        }

        fn kill_child(&mut self, pid: u64, signal: u8) {
            let _ = process::kill(pid, u64::from(signal));
        }
    }

    impl FjordHost {
        /// Reaps the child `pid` if it ended.
        fn reap(&mut self, pid: u64) -> ChildStatus {
            match process::waitpid(pid, WNOHANG) {
                Ok(None) => ChildStatus::Running,
                Ok(Some((_, ExitStatus::Exited(code)))) => {
                    log(&format!(
                        "redis: background saving child {pid} exited with {code}"
                    ));
                    ChildStatus::Exited(code)
                }
                Ok(Some((_, ExitStatus::Killed(signal)))) => {
                    log(&format!(
                        "redis: background saving child {pid} killed by signal {signal}"
                    ));
                    let _ = process::unlink(&format!("temp-{pid}.rdb"));
                    ChildStatus::Killed(signal)
                }
                Err(_) => ChildStatus::Gone,
            }
        }
    }

    /// Loads `dump.rdb` if it exists.
    fn load(server: &mut Server) -> Result<(), ()> {
        let fd = match process::open(DUMP, OpenMode::Read) {
            Ok(fd) => fd,
            Err(Some(Error::NotFound)) => return Ok(()),
            Err(e) => {
                log(&format!("redis: can't open {DUMP}: {e:?}"));
                return Err(());
            }
        };
        let t = now();
        // Collected, then added at once into a table sized for all (see `Db::load_all`).
        let mut keys = Vec::new();
        let result = rdb::load(
            |buf: &mut [u8]| process::read(fd, buf),
            t.unix_ms,
            |key, value, expire_at| keys.push((key, value, expire_at)),
        );
        let _ = process::close(fd);
        server.db_mut().load_all(keys);
        match result {
            Ok(summary) => {
                server.loaded(summary.keys_loaded, summary.keys_expired);
                let ms = (now().mono_us - t.mono_us) / 1000;
                log(&format!(
                    "redis: DB loaded from disk: {} keys ({} expired) in {ms} ms",
                    summary.keys_loaded, summary.keys_expired
                ));
                Ok(())
            }
            Err(e) => {
                log(&format!("redis: can't load {DUMP}: {e}"));
                Err(())
            }
        }
    }

    /// One connection.
    struct Conn {
        fd: Fd,
        id: ClientId,
    }

    /// What reading a connection found.
    #[derive(PartialEq, Eq)]
    enum Read {
        /// It stays open.
        Open,
        /// The peer closed its side: send what can be sent, then close.
        PeerClosed,
        /// It failed (reset): close.
        Failed,
    }

    /// Reads what the client sent and runs it.
    fn read_from(
        c: &Conn,
        server: &mut Server,
        host: &mut FjordHost,
        buf: &mut [u8],
        t: Now,
    ) -> Read {
        for _ in 0..READS_PER_TURN {
            if !server.wants_input(c.id) {
                return Read::Open;
            }
            match process::read(c.fd, buf) {
                Ok(0) => return Read::PeerClosed,
                Ok(n) => {
                    let n = n.min(buf.len());
                    server.receive(c.id, &buf[..n], t, host);
                    if n < buf.len() {
                        return Read::Open;
                    }
                }
                Err(Some(Error::WouldBlock)) => return Read::Open,
                Err(_) => return Read::Failed,
            }
        }
        Read::Open
    }

    /// Sends what the client has to receive, running the requests that waited for it;
    /// whether the connection is gone.
    fn flush(c: &Conn, server: &mut Server, host: &mut FjordHost, t: Now) -> bool {
        loop {
            let out = server.output(c.id);
            if out.is_empty() {
                if server.has_waiting_input(c.id) && server.wants_input(c.id) {
                    server.receive(c.id, &[], t, host);
                    if !server.output(c.id).is_empty() {
                        continue;
                    }
                }
                return false;
            }
            match process::write(c.fd, out) {
                Ok(0) | Err(Some(Error::WouldBlock)) => return false,
                Ok(n) => server.consume_output(c.id, n),
                Err(_) => return true,
            }
        }
    }

    /// Accepts waiting connections; over `maxclients`, replies with Redis's error and closes.
    fn accept_all(listener: &TcpListener, server: &mut Server, conns: &mut Vec<Conn>) {
        for _ in 0..ACCEPTS_PER_TURN {
            let Ok((fd, _, _)) = net::accept(listener.fd()) else {
                return;
            };
            let _ = net::set_nonblocking(fd, true);
            match server.connect() {
                Ok(id) => conns.push(Conn { fd, id }),
                Err(_) => {
                    let _ = process::write(fd, MAX_CLIENTS_REPLY);
                    let _ = process::close(fd);
                }
            }
        }
    }

    pub fn main() -> u8 {
        let start = now();
        let seed = start.mono_us ^ (start.unix_ms as u64).rotate_left(32) ^ process::getpid();
        let mut config = Config::new(PORT, process::getpid(), seed);
        config.maxmemory = MAXMEMORY;
        let mut server = Server::new(config, start);
        // The keyspace's SipHash key, from the kernel's generator (Redis reads /dev/urandom).
        let mut key = [0u8; 16];
        if process::getrandom(&mut key).is_err() {
            return 1;
        }
        let word = |i: usize| u64::from_le_bytes(key[i..i + 8].try_into().unwrap_or([0; 8]));
        server.db_mut().set_hash_key([word(0), word(8)]);
        let mut host = FjordHost::default();
        if load(&mut server).is_err() {
            return 1;
        }
        let listener = match TcpListener::bind(PORT, BACKLOG) {
            Ok(l) => l,
            Err(e) => {
                log(&format!("redis: can't listen on port {PORT}: {e:?}"));
                return 2;
            }
        };
        if net::set_nonblocking(listener.fd(), true).is_err() {
            return 3;
        }
        log(&format!(
            "redis: ready to accept connections on port {PORT}"
        ));
        let mut conns: Vec<Conn> = Vec::new();
        let mut fds: Vec<PollFd> = Vec::new();
        let mut buf = vec![0u8; READ_CHUNK];
        loop {
            fds.clear();
            fds.push(PollFd::new(listener.fd(), POLLIN));
            for c in &conns {
                let mut events = 0;
                if server.wants_input(c.id) {
                    events |= POLLIN;
                }
                if !server.output(c.id).is_empty() {
                    events |= POLLOUT;
                }
                fds.push(PollFd::new(c.fd, events));
            }
            if net::poll(&mut fds, TICK_MS).is_err() {
                // Not expected; do not spin.
                process::sleep(10_000_000);
            }
            let t = now();
            let mut kept = Vec::with_capacity(conns.len());
            for (i, c) in conns.into_iter().enumerate() {
                let revents = fds.get(i + 1).map_or(0, |p| p.revents);
                let mut gone = revents & POLLNVAL != 0;
                if !gone && revents & (POLLIN | POLLHUP | POLLERR) != 0 {
                    match read_from(&c, &mut server, &mut host, &mut buf, t) {
                        Read::Open => {}
                        Read::PeerClosed => {
                            // Replies to what it sent before closing go out if they can.
                            let _ = flush(&c, &mut server, &mut host, t);
                            gone = true;
                        }
                        Read::Failed => gone = true,
                    }
                }
                if !gone {
                    gone = flush(&c, &mut server, &mut host, t);
                }
                if gone || server.should_close(c.id) {
                    let _ = process::close(c.fd);
                    server.disconnect(c.id);
                } else {
                    kept.push(c);
                }
            }
            conns = kept;
            if fds[0].revents & POLLIN != 0 {
                accept_all(&listener, &mut server, &mut conns);
            }
            server.state_mut().heap_high_water =
                Some(HEAP_BYTES.saturating_sub(FunctionHeap::heap().untouched()));
            server.tick(t, &mut host);
            if server.shutdown_requested() {
                for c in &conns {
                    let _ = process::close(c.fd);
                }
                log("redis: ready to exit, bye bye");
                return 0;
            }
        }
    }
}

#[cfg(target_os = "none")]
fjord_libos::program!(
    program::main,
    name = "redis",
    stack_size = "64K",
    heap_size = "256M"
);

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!(
        "redis is a Fjord program: run it in Fjord (the fjord_redis library holds its logic)"
    );
}
