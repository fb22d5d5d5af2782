//! End-to-end tests of the `redis` program with Debian's Redis tools (`redis-tools` and
//! `redis-server`, installed by xtask like QEMU): one script of commands sent byte for byte to
//! Fjord's server and to a real `redis-server` on the host's loopback, replies compared byte for
//! byte; `redis-cli` and `redis-benchmark` against it; a `BGSAVE` in the middle of a sequence
//! of writes, under a `redis-benchmark` write load, whose file `redis-check-rdb` accepts and a
//! real `redis-server` loads with exactly the sequence's keys written before the fork.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::apps_build::BuiltApp;
use crate::e2e_http::{Outcome, ProgramBoot, boot_gateway_forwarding, free_port};
use crate::host_deps::ensure_program;
use crate::http_client::one;
use crate::qemu::Accel;

/// Redis's port, in the guest and for the reference server's choice of a free one.
const REDIS_PORT: u16 = 6379;
/// How long a client waits for a reply.
const PATIENCE: Duration = Duration::from_secs(30);

/// The script whose replies must match Redis 7.0's byte for byte (each entry one request, as
/// sent; inline commands included).
const SCRIPT: &[&[u8]] = &[
    b"PING\r\n",
    b"*2\r\n$4\r\nPING\r\n$5\r\nhello\r\n",
    b"*2\r\n$4\r\nECHO\r\n$3\r\na b\r\n",
    b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n",
    b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n",
    b"*2\r\n$3\r\nGET\r\n$7\r\nmissing\r\n",
    b"SET k v2 NX\r\n",
    b"SET k v3 XX\r\n",
    b"GET k\r\n",
    b"SET n 10\r\n",
    b"INCR n\r\n",
    b"DECR n\r\n",
    b"INCRBY n 5\r\n",
    b"DECRBY n 3\r\n",
    b"INCRBY n abc\r\n",
    b"INCR k\r\n",
    b"SET big 9223372036854775807\r\n",
    b"INCR big\r\n",
    b"MSET a 1 b 2 c 3\r\n",
    b"MSET a\r\n",
    b"MGET a b missing c\r\n",
    b"EXISTS a b missing a\r\n",
    b"DEL a b missing\r\n",
    b"KEYS c\r\n",
    b"KEYS [a-c]\r\n",
    b"DBSIZE\r\n",
    b"EXPIRE c 100\r\n",
    b"TTL c\r\n",
    b"TTL missing\r\n",
    b"TTL n\r\n",
    b"PERSIST c\r\n",
    b"TTL c\r\n",
    b"SET e v EX 100\r\n",
    b"TTL e\r\n",
    b"SET e v EX 0\r\n",
    b"SET e v EX abc\r\n",
    b"SET e v NX XX\r\n",
    b"SET e v PX 100000 GET\r\n",
    b"SELECT 0\r\n",
    b"SELECT 16\r\n",
    b"CONFIG GET save\r\n",
    b"CONFIG GET appendonly\r\n",
    b"GET\r\n",
    b"*2\r\n$3\r\nSET\r\n$1\r\nk\r\n",
    b"FOO bar baz\r\n",
    b"TYPE k\r\n",
    b"TYPE missing\r\n",
    b"*3\r\n$3\r\nSET\r\n$3\r\nbin\r\n$4\r\n\x00\r\n\xff\r\n",
    b"GET bin\r\n",
    b"FLUSHALL\r\n",
    b"DBSIZE\r\n",
];

/// Requests that end the connection with a protocol error (the reply, then the close).
const MALFORMED: &[&[u8]] = &[
    b"*1\r\n$-5\r\n",
    b"*a\r\n",
    b"*1\r\n+PING\r\n",
    b"*1\r\n$999999999999\r\n",
];

/// Boots a gateway with Redis's port forwarded, 1 GiB (a fork of the 256 MiB heap commits as
/// much again) and a scratch disk, and runs every check; under a KVM that emulates ring 0
/// (`slow`), the load and the two saves of thousands of sequential writes stay TCG-only.
pub fn run(kernel: &Path, accel: Accel, apps: &[BuiltApp], slow: bool) -> Result<Vec<Outcome>> {
    let redis = apps
        .iter()
        .find(|a| a.name == "redis")
        .context("app redis was not built")?;
    let cli = ensure_program("redis-cli", "redis-tools")?;
    let bench = ensure_program("redis-benchmark", "redis-tools")?;
    let check_rdb = ensure_program("redis-check-rdb", "redis-tools")?;
    let server = ensure_program("redis-server", "redis-server")?;
    let image = crate::disk::scratch_image("e2e-redis")?;
    let (mut vm, gateway, forwarded) = boot_gateway_forwarding(
        kernel,
        accel,
        "",
        &ProgramBoot {
            ports: &[REDIS_PORT],
            memory_mib: Some(1024),
            disk: Some(image.clone()),
        },
    )?;
    let fjord = forwarded[0];
    let limit = match accel {
        Accel::Tcg => Duration::from_secs(60),
        Accel::Kvm => Duration::from_secs(400),
    };
    let mut out = Vec::new();
    let mut check = |label: &str, result: Result<(), String>| {
        out.push((format!("redis: {label}"), result));
    };
    let mut pid = 0u64;
    check("deployed and started; it says it is ready", {
        crate::e2e_sockets::start(gateway, "redis", &redis.bytes).and_then(|p| {
            pid = p;
            vm.wait_for_line(|l| l.contains("redis: ready to accept connections"), limit)
                .map(drop)
                .map_err(|e| format!("{e}"))
        })
    });
    let reference = RedisServer::reference(&server);
    check(
        "every reply of the command script matches Debian's redis-server byte for byte",
        reference
            .as_ref()
            .map_err(|e| format!("{e:#}"))
            .and_then(|r| compare_script(fjord, r.addr)),
    );
    check(
        "malformed requests get Redis's protocol errors, then the connection closes",
        reference
            .as_ref()
            .map_err(|e| format!("{e:#}"))
            .and_then(|r| compare_malformed(fjord, r.addr)),
    );
    check("redis-cli sets and gets a value", {
        let port = fjord.port().to_string();
        let run = |args: &[&str]| -> Result<String, String> {
            let o = Command::new(&cli)
                .args(["-h", "127.0.0.1", "-p", &port])
                .args(args)
                .output()
                .map_err(|e| format!("redis-cli: {e}"))?;
            Ok(String::from_utf8_lossy(&o.stdout).trim().to_owned())
        };
        run(&["set", "greeting", "hello fjord"]).and_then(|a| {
            let b = run(&["get", "greeting"])?;
            match (a.as_str(), b.as_str()) {
                ("OK", "hello fjord") => Ok(()),
                got => Err(format!("{got:?}")),
            }
        })
    });
    if slow {
        for name in [
            "redis-benchmark's PING_INLINE, SET and GET complete without errors",
            "a BGSAVE amid writes under a redis-benchmark load holds exactly the writes before the fork",
            "a saving child killed mid-save leaves the previous dump.rdb whole",
            "restarted, it loads a dump.rdb of over 256 KiB with every key",
        ] {
            println!(
                "e2e {accel}/redis: {name} ... not run: this KVM emulates ring 0, tens of times \
                 slower than TCG here; TCG runs it"
            );
        }
    } else {
        check(
            "redis-benchmark's PING_INLINE, SET and GET complete without errors",
            benchmark(&bench, fjord, &["-t", "ping_inline,set,get", "-n", "2000"]),
        );
        check(
            "a BGSAVE amid writes under a redis-benchmark load holds exactly the writes before the fork (8 KiB values the child gave back once written included), the server keeps the writes after it; redis-check-rdb accepts the file and redis-server loads it; rdb_last_cow_size reports the memory the fork added",
            bgsave_consistency(fjord, &bench, &image, (&check_rdb, &server), limit),
        );
        check(
            "a saving child killed mid-save leaves the previous dump.rdb whole, and the failed save is reported",
            crash_mid_save(gateway, fjord, pid, (&image, &check_rdb), limit),
        );
        check(
            "restarted, it loads a dump.rdb of over 256 KiB (read a piece at a time) with every key",
            restart_loads_the_dump(gateway, fjord, (pid, &redis.bytes), (&vm, &image), limit),
        );
    }
    if let Ok(mut r) = reference {
        r.stop();
    }
    vm.kill();
    Ok(out)
}

/// Debian's `redis-server` on a free loopback port with its files in `dir`, which goes when
/// it stops.
struct RedisServer {
    child: Child,
    addr: SocketAddr,
    dir: PathBuf,
}

impl RedisServer {
    /// Starts it with `args` besides the port, address and directory, and waits until it
    /// listens.
    fn start(server: &Path, dir: PathBuf, args: &[&str]) -> Result<RedisServer> {
        let port = free_port()?;
        std::fs::create_dir_all(&dir)?;
        let child = Command::new(server)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(args)
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting redis-server")?;
        let mut running = RedisServer {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(running.addr).is_err() {
            if Instant::now() > deadline {
                running.stop();
                anyhow::bail!("redis-server did not listen on {}", running.addr);
            }
            thread::sleep(Duration::from_millis(50));
        }
        Ok(running)
    }

    /// The reference for the script: Redis's default save points, no AOF.
    fn reference(server: &Path) -> Result<RedisServer> {
        let dir = std::env::temp_dir().join(format!("fjord-redis-ref-{}", std::process::id()));
        let args = ["--save", "3600 1 300 100 60 10000", "--appendonly", "no"];
        RedisServer::start(server, dir, &args)
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `bytes` as `dump.rdb` in a new directory named after `tag`, checked by `redis-check-rdb`;
/// the directory.
fn checked_dump(check_rdb: &Path, bytes: &[u8], tag: &str) -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(format!("fjord-redis-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{e}"))?;
    let file = dir.join("dump.rdb");
    std::fs::write(&file, bytes).map_err(|e| format!("{e}"))?;
    let checked = match Command::new(check_rdb).arg(&file).output() {
        Ok(o) if o.status.success() => Ok(dir.clone()),
        Ok(o) => Err(format!(
            "redis-check-rdb refused the file: {}",
            String::from_utf8_lossy(&o.stdout)
        )),
        Err(e) => Err(format!("redis-check-rdb: {e}")),
    };
    if checked.is_err() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    checked
}

/// A connection to a Redis server at `addr`.
pub fn connect(addr: SocketAddr) -> Result<TcpStream, String> {
    crate::e2e_sockets::connect_within(addr, PATIENCE)
}

/// Reads one RESP reply (its bytes, as received).
pub fn read_reply(s: &mut TcpStream, buf: &mut Vec<u8>) -> Result<Vec<u8>, String> {
    loop {
        if let Some(n) = reply_len(buf) {
            return Ok(buf.drain(..n).collect());
        }
        let mut chunk = [0u8; 4096];
        let n = s.read(&mut chunk).map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err(format!("closed after {:?}", String::from_utf8_lossy(buf)));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The length of the complete RESP reply at the start of `b`, if it is complete.
fn reply_len(b: &[u8]) -> Option<usize> {
    let line_end = b.windows(2).position(|w| w == b"\r\n")?;
    let line = std::str::from_utf8(&b[1..line_end]).ok()?;
    let after = line_end + 2;
    match b.first()? {
        b'+' | b'-' | b':' => Some(after),
        b'$' => {
            let n: i64 = line.parse().ok()?;
            if n < 0 {
                return Some(after);
            }
            let end = after + n as usize + 2;
            (b.len() >= end).then_some(end)
        }
        b'*' => {
            let n: i64 = line.parse().ok()?;
            let mut at = after;
            for _ in 0..n.max(0) {
                at += reply_len(&b[at..])?;
            }
            Some(at)
        }
        _ => None,
    }
}

/// The replies of `SCRIPT` from a server.
fn script_replies(addr: SocketAddr) -> Result<Vec<Vec<u8>>, String> {
    let mut s = connect(addr)?;
    let mut buf = Vec::new();
    SCRIPT
        .iter()
        .map(|req| {
            s.write_all(req).map_err(|e| format!("write: {e}"))?;
            read_reply(&mut s, &mut buf)
        })
        .collect()
}

fn compare_script(fjord: SocketAddr, reference: SocketAddr) -> Result<(), String> {
    let want = script_replies(reference)?;
    let got = script_replies(fjord)?;
    for ((req, w), g) in SCRIPT.iter().zip(&want).zip(&got) {
        if w != g {
            return Err(format!(
                "{:?}: redis-server said {:?}, Fjord {:?}",
                String::from_utf8_lossy(req),
                String::from_utf8_lossy(w),
                String::from_utf8_lossy(g)
            ));
        }
    }
    Ok(())
}

/// Everything a server sends until it closes, after `req`.
fn until_close(addr: SocketAddr, req: &[u8]) -> Result<Vec<u8>, String> {
    let mut s = connect(addr)?;
    s.write_all(req).map_err(|e| format!("write: {e}"))?;
    let mut all = Vec::new();
    s.read_to_end(&mut all)
        .map_err(|e| format!("read to the close: {e}"))?;
    Ok(all)
}

fn compare_malformed(fjord: SocketAddr, reference: SocketAddr) -> Result<(), String> {
    for req in MALFORMED {
        let want = until_close(reference, req)?;
        let got = until_close(fjord, req)?;
        if want != got {
            return Err(format!(
                "{:?}: redis-server said {:?}, Fjord {:?}",
                String::from_utf8_lossy(req),
                String::from_utf8_lossy(&want),
                String::from_utf8_lossy(&got)
            ));
        }
    }
    Ok(())
}

/// Runs `redis-benchmark` with `args` (one connection at a time: QEMU's user network takes
/// host connections one by one) and checks it finished every test.
fn benchmark(bench: &Path, addr: SocketAddr, args: &[&str]) -> Result<(), String> {
    let o = Command::new(bench)
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &addr.port().to_string(),
            "-c",
            "1",
            "-q",
        ])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("redis-benchmark: {e}"))?;
    let text = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    let finished = text.matches("requests per second").count();
    let wanted = args
        .iter()
        .position(|a| *a == "-t")
        .and_then(|i| args.get(i + 1))
        .map_or(1, |t| t.split(',').count());
    if !o.status.success() || finished < wanted || err.contains("Error") {
        return Err(format!("{}: {text} {err}", o.status));
    }
    Ok(())
}

/// Sends `SET seq:<i> <i>` for `range`, one at a time on `s`.
fn write_sequence(
    s: &mut TcpStream,
    buf: &mut Vec<u8>,
    range: std::ops::Range<u32>,
) -> Result<(), String> {
    for i in range {
        let (k, v) = (format!("seq:{i}"), i.to_string());
        let req = format!(
            "*3\r\n$3\r\nSET\r\n${}\r\n{k}\r\n${}\r\n{v}\r\n",
            k.len(),
            v.len()
        );
        s.write_all(req.as_bytes())
            .map_err(|e| format!("write: {e}"))?;
        let r = read_reply(s, buf)?;
        if r != b"+OK\r\n" {
            return Err(format!("SET {k}: {:?}", String::from_utf8_lossy(&r)));
        }
    }
    Ok(())
}

/// `SET key value` with a binary `value`, which must answer `+OK`.
fn set_bytes(s: &mut TcpStream, buf: &mut Vec<u8>, key: &str, value: &[u8]) -> Result<(), String> {
    let mut req = format!(
        "*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${}\r\n",
        key.len(),
        value.len()
    )
    .into_bytes();
    req.extend_from_slice(value);
    req.extend_from_slice(b"\r\n");
    s.write_all(&req).map_err(|e| format!("write: {e}"))?;
    let r = read_reply(s, buf)?;
    if r != b"+OK\r\n" {
        return Err(format!("SET {key}: {:?}", String::from_utf8_lossy(&r)));
    }
    Ok(())
}

/// `GET key` answered with exactly `value`.
fn holds_bytes(
    s: &mut TcpStream,
    buf: &mut Vec<u8>,
    key: &str,
    value: &[u8],
) -> Result<bool, String> {
    let req = format!("*2\r\n$3\r\nGET\r\n${}\r\n{key}\r\n", key.len());
    s.write_all(req.as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    let r = read_reply(s, buf)?;
    let mut want = format!("${}\r\n", value.len()).into_bytes();
    want.extend_from_slice(value);
    want.extend_from_slice(b"\r\n");
    Ok(r == want)
}

/// Sends the inline command `line` and reads its reply.
pub fn command(s: &mut TcpStream, buf: &mut Vec<u8>, line: &str) -> Result<String, String> {
    s.write_all(format!("{line}\r\n").as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    read_reply(s, buf).map(|r| String::from_utf8_lossy(&r).into_owned())
}

fn bgsave_consistency(
    addr: SocketAddr,
    bench: &Path,
    image: &Path,
    (check_rdb, server): (&Path, &Path),
    limit: Duration,
) -> Result<(), String> {
    const BEFORE: u32 = 3000;
    const AFTER: u32 = 1000;
    const BIG: usize = 48;
    let big_value = |i: usize, round: usize| -> Vec<u8> {
        (0..8192)
            .map(|j| ((i * 131 + j * 7 + round * 59) % 251) as u8)
            .collect()
    };
    let mut s = connect(addr)?;
    let mut buf = Vec::new();
    command(&mut s, &mut buf, "FLUSHALL")?;
    // A write load on other keys, from redis-benchmark, all along.
    let load_bench = bench.to_path_buf();
    let load = thread::spawn(move || {
        benchmark(
            &load_bench,
            addr,
            &["-t", "set", "-n", "3000", "-r", "100000", "-d", "64"],
        )
    });
    write_sequence(&mut s, &mut buf, 0..BEFORE)?;
    // Values of whole pages, which the saving child gives back (`discard`) once written,
    // overwritten while it saves: the file holds the old ones, the server the new ones.
    for i in 0..BIG {
        set_bytes(&mut s, &mut buf, &format!("big:{i}"), &big_value(i, 0))?;
    }
    let started = command(&mut s, &mut buf, "BGSAVE")?;
    if started != "+Background saving started\r\n" {
        return Err(format!("BGSAVE answered {started:?}"));
    }
    write_sequence(&mut s, &mut buf, BEFORE..BEFORE + AFTER)?;
    for i in 0..BIG {
        set_bytes(&mut s, &mut buf, &format!("big:{i}"), &big_value(i, 1))?;
    }
    let status = bgsave_status(&mut s, &mut buf, limit)?;
    if status != "ok" {
        return Err(format!("the save failed: rdb_last_bgsave_status:{status}"));
    }
    for i in 0..BIG {
        if !holds_bytes(&mut s, &mut buf, &format!("big:{i}"), &big_value(i, 1))? {
            return Err(format!(
                "after the save, the server's big:{i} is not its new value"
            ));
        }
    }
    // The child read every page of the keyspace, and pages holding pointers are copied to it
    // (copy-on-pointer-access): its report of what its fork added is not zero.
    let info = command(&mut s, &mut buf, "INFO persistence")?;
    let cow = info
        .lines()
        .find_map(|l| l.strip_prefix("rdb_last_cow_size:"))
        .and_then(|v| v.trim().parse::<u64>().ok());
    if !cow.is_some_and(|bytes| bytes > 0 && bytes % 4096 == 0) {
        return Err(format!("rdb_last_cow_size after the save: {cow:?}"));
    }
    load.join().map_err(|_| "the load's thread panicked")??;
    // The file, read from the disk image the guest wrote, loaded by a real redis-server.
    let dir = checked_dump(check_rdb, &dump_on_disk(image)?, "load")?;
    let mut loader = RedisServer::start(server, dir, &["--save", "", "--dbfilename", "dump.rdb"])
        .map_err(|e| format!("redis-server did not start on the file: {e:#}"))?;
    let loaded = (|| -> Result<(), String> {
        let mut r = connect(loader.addr)?;
        let mut buf = Vec::new();
        let keys = command(
            &mut r,
            &mut buf,
            "EVAL \"return #redis.call('KEYS','seq:*')\" 0",
        )?;
        let first = command(&mut r, &mut buf, "GET seq:0")?;
        let last = command(&mut r, &mut buf, &format!("GET seq:{}", BEFORE - 1))?;
        let after = command(&mut r, &mut buf, &format!("EXISTS seq:{BEFORE}"))?;
        for i in 0..BIG {
            if !holds_bytes(&mut r, &mut buf, &format!("big:{i}"), &big_value(i, 0))? {
                return Err(format!(
                    "the loaded file's big:{i} is not its value at the fork"
                ));
            }
        }
        let want = (
            format!(":{BEFORE}\r\n"),
            "$1\r\n0\r\n".to_owned(),
            format!("${}\r\n{}\r\n", (BEFORE - 1).to_string().len(), BEFORE - 1),
            ":0\r\n".to_owned(),
        );
        let got = (keys, first, last, after);
        match got == want {
            true => Ok(()),
            false => Err(format!(
                "the loaded file does not hold exactly seq:0..{BEFORE}: KEYS seq:* counted, \
                 GET seq:0, GET seq:{}, EXISTS seq:{BEFORE} answered {got:?}",
                BEFORE - 1
            )),
        }
    })();
    loader.stop();
    loaded
}

/// Saves 64 keys of 8 KiB (binary values) with `SAVE`, kills the server through `DELETE
/// /processes`, starts it again and compares every key it loaded: a dump this long is read
/// through the kernel a 256 KiB piece at a time.
fn restart_loads_the_dump(
    gateway: SocketAddr,
    addr: SocketAddr,
    (pid, program): (u64, &[u8]),
    (vm, image): (&crate::qemu_run::QemuRun, &Path),
    limit: Duration,
) -> Result<(), String> {
    const KEYS: usize = 64;
    let value =
        |i: usize| -> Vec<u8> { (0..8192).map(|j| ((i * 31 + j * 7) % 256) as u8).collect() };
    let mut s = connect(addr)?;
    let mut buf = Vec::new();
    command(&mut s, &mut buf, "FLUSHALL")?;
    for i in 0..KEYS {
        set_bytes(&mut s, &mut buf, &format!("big:{i}"), &value(i))?;
    }
    let saved = command(&mut s, &mut buf, "SAVE")?;
    if saved != "+OK\r\n" {
        return Err(format!("SAVE answered {saved:?}"));
    }
    let size = dump_on_disk(image)?.len();
    if size <= 256 << 10 {
        return Err(format!("dump.rdb is only {size} bytes"));
    }
    drop(s);
    one(gateway, "DELETE", &format!("/processes/{pid}"), b"")?.expect(204)?;
    // Its listening socket goes with it: wait until it has, then start it again.
    let deadline = Instant::now() + limit;
    while one(gateway, "GET", "/processes", b"")?
        .text()
        .contains(&format!("{{\"pid\":{pid},"))
    {
        if Instant::now() > deadline {
            return Err(format!("process {pid} did not end"));
        }
        thread::sleep(Duration::from_millis(100));
    }
    crate::e2e_sockets::start(gateway, "redis", program)?;
    let loaded = format!("redis: DB loaded from disk: {KEYS} keys");
    vm.wait_for_line(|l| l.contains(&loaded), limit)
        .map_err(|e| format!("no `{loaded}` line: {e}"))?;
    // It listens only after loading: wait for the ready line that follows the load (QEMU's
    // port forward accepts a connection even when nothing listens in the guest, then resets it).
    let after_load = std::cell::Cell::new(false);
    vm.wait_for_line(
        |l| {
            if l.contains(&loaded) {
                after_load.set(true);
            }
            after_load.get() && l.contains("redis: ready to accept connections")
        },
        limit,
    )
    .map_err(|e| format!("not ready after loading: {e}"))?;
    let mut s = connect(addr)?;
    let mut buf = Vec::new();
    let size = command(&mut s, &mut buf, "DBSIZE")?;
    if size != format!(":{KEYS}\r\n") {
        return Err(format!("DBSIZE after the restart: {size:?}"));
    }
    for i in 0..KEYS {
        s.write_all(format!("GET big:{i}\r\n").as_bytes())
            .map_err(|e| format!("write: {e}"))?;
        let r = read_reply(&mut s, &mut buf)?;
        let mut want = b"$8192\r\n".to_vec();
        want.extend_from_slice(&value(i));
        want.extend_from_slice(b"\r\n");
        if r != want {
            return Err(format!("big:{i} differs after the restart"));
        }
    }
    Ok(())
}

/// The dump on the disk image, as the guest last saved it.
fn dump_on_disk(image: &Path) -> Result<Vec<u8>, String> {
    let mut store = crate::disk::mount(image).map_err(|e| format!("{e:#}"))?;
    let name = store
        .files()
        .iter()
        .map(|f| f.name.clone())
        .find(|n| n.ends_with("/dump.rdb"))
        .ok_or("no dump.rdb on the disk")?;
    store
        .read(&name)
        .map_err(|e| format!("reading {name}: {e:?}"))
}

/// Waits for the background save to end; its `rdb_last_bgsave_status`.
fn bgsave_status(s: &mut TcpStream, buf: &mut Vec<u8>, limit: Duration) -> Result<String, String> {
    let deadline = Instant::now() + limit;
    loop {
        let info = command(s, buf, "INFO persistence")?;
        if info.contains("rdb_bgsave_in_progress:0") {
            return info
                .lines()
                .find_map(|l| l.strip_prefix("rdb_last_bgsave_status:"))
                .map(|v| v.trim().to_owned())
                .ok_or_else(|| format!("no rdb_last_bgsave_status in {info}"));
        }
        if Instant::now() > deadline {
            return Err("the save did not end".into());
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// A foreground `SAVE` of 500 keys, then 500 more and a `BGSAVE` slowed down by Redis's
/// `rdb-key-save-delay` (20 ms a key), whose child is killed through `DELETE /processes`:
/// the file on the disk is still the first save, byte for byte, and `redis-check-rdb`
/// accepts it; `INFO` says the save failed.
fn crash_mid_save(
    gateway: SocketAddr,
    addr: SocketAddr,
    redis_pid: u64,
    (image, check_rdb): (&Path, &Path),
    limit: Duration,
) -> Result<(), String> {
    let mut s = connect(addr)?;
    let mut buf = Vec::new();
    command(&mut s, &mut buf, "FLUSHALL")?;
    write_sequence(&mut s, &mut buf, 0..500)?;
    let saved = command(&mut s, &mut buf, "SAVE")?;
    if saved != "+OK\r\n" {
        return Err(format!("SAVE answered {saved:?}"));
    }
    let before = dump_on_disk(image)?;
    write_sequence(&mut s, &mut buf, 500..1000)?;
    command(&mut s, &mut buf, "CONFIG SET rdb-key-save-delay 20000")?;
    let started = command(&mut s, &mut buf, "BGSAVE")?;
    if started != "+Background saving started\r\n" {
        return Err(format!("BGSAVE answered {started:?}"));
    }
    let child = *crate::e2e_sockets::children_of(gateway, redis_pid)?
        .first()
        .ok_or("no saving child in GET /processes")?;
    one(gateway, "DELETE", &format!("/processes/{child}"), b"")?.expect(204)?;
    let status = bgsave_status(&mut s, &mut buf, limit)?;
    command(&mut s, &mut buf, "CONFIG SET rdb-key-save-delay 0")?;
    if status != "err" {
        return Err(format!(
            "rdb_last_bgsave_status:{status} after the child was killed"
        ));
    }
    let after = dump_on_disk(image)?;
    if after != before {
        return Err(format!(
            "dump.rdb changed: {} bytes before, {} after",
            before.len(),
            after.len()
        ));
    }
    let dir = checked_dump(check_rdb, &after, "crash")?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
