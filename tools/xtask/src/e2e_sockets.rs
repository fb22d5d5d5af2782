//! End-to-end tests of μprocesses' TCP sockets: the `tcpecho` program (two forked workers
//! sharing one listening socket, each serving its clients with `poll`) started through the
//! gateway's process API, and driven from the host through a forwarded port with plain TCP
//! clients: bytes both ways, a megabyte under flow control, many connections at once, clients
//! that vanish, and the errors the program checks in the guest; then the `prefork` web server
//! under `wrk` while one of its workers is killed.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::apps_build::BuiltApp;
use crate::e2e_http::{Outcome, boot_gateway_forwarding, deploy};
use crate::http_client::one;
use crate::qemu::Accel;

/// The guest port `tcpecho` listens on.
const ECHO_PORT: u16 = 7000;
/// The guest port the prefork web server listens on.
const PREFORK_PORT: u16 = 8000;
/// How long a client waits for an answer.
const PATIENCE: Duration = Duration::from_secs(20);

/// Boots a gateway with the echo port forwarded and runs every check.
pub fn run(kernel: &std::path::Path, accel: Accel, apps: &[BuiltApp]) -> Result<Vec<Outcome>> {
    let tcpecho = apps
        .iter()
        .find(|a| a.name == "tcpecho")
        .context("app tcpecho was not built")?;
    let prefork = apps
        .iter()
        .find(|a| a.name == "prefork")
        .context("app prefork was not built")?;
    let (mut vm, gateway, forwarded) = boot_gateway_forwarding(
        kernel,
        accel,
        "",
        &crate::e2e_http::ProgramBoot {
            ports: &[ECHO_PORT, PREFORK_PORT],
            ..Default::default()
        },
    )?;
    let echo = forwarded[0];
    let mut out = Vec::new();
    let mut check = |label: &str, result: Result<(), String>| {
        out.push((format!("sockets: {label}"), result));
    };
    let limit = match accel {
        Accel::Tcg => Duration::from_secs(30),
        Accel::Kvm => Duration::from_secs(300),
    };
    let mut pid = 0u64;
    check(
        "tcpecho is deployed and started through POST /processes",
        start(gateway, "tcpecho", &tcpecho.bytes).map(|p| pid = p),
    );
    check(
        "in the guest: a port in use, the gateway's port, a refused connect, calls in the wrong state and poll's time-out give their errors",
        vm.wait_for_line(
            |l| l.contains("tcpecho: errors checked") || l.contains("tcpecho: error check"),
            limit,
        )
        .map_err(|e| format!("{e}"))
        .and_then(|l| match l.contains("errors checked") {
            true => Ok(()),
            false => Err(l),
        }),
    );
    check(
        "it listens with its workers",
        vm.wait_for_line(|l| l.contains("tcpecho: listening"), limit)
            .map(drop)
            .map_err(|e| format!("{e}")),
    );
    check("a line sent comes back", echo_line(echo, b"hello, fjord\n"));
    check(
        "`who` is answered by a forked worker, not the parent",
        who(echo).and_then(|w| match w != pid {
            true => Ok(()),
            false => Err(format!("answered by the parent {pid}")),
        }),
    );
    check(
        "a worker connects out to a server on the host (blocking connect, write, read)",
        connects_out(echo),
    );
    check(
        "1 MiB goes through the echo and back intact (flow control both ways)",
        megabyte(echo),
    );
    check(
        "32 connections open at once are each served",
        many_at_once(echo, 32),
    );
    check(
        "a client that vanishes mid-line and one that half-closes leave the server serving",
        vanishing(echo),
    );
    check(
        "/metrics counts the connections the programs accepted, and their writes done in the call",
        one(gateway, "GET", "/metrics", b"").and_then(|r| {
            r.expect(200)?;
            let value = |series: &str| {
                crate::e2e_conns::series_value(&r.text(), series).ok_or(format!("no {series}"))
            };
            let accepted = value("fjord_sockets_connections_total{event=\"accepted\"}")?;
            // The echo server's replies to sockets with room never leave ring 3 for its step.
            let in_call = value("fjord_ufork_writes_in_call_total")?;
            match (accepted >= 36, in_call >= 36) {
                (true, true) => Ok(()),
                _ => Err(format!("{accepted} accepted, {in_call} writes in the call")),
            }
        }),
    );
    check(
        "DELETE /processes/<pid> of the parent and its workers; the port then serves nobody",
        kill_tree(gateway, pid).and_then(|()| {
            let deadline = Instant::now() + limit;
            loop {
                if echo_line(echo, b"anyone?\n").is_err() {
                    return Ok(());
                }
                if Instant::now() > deadline {
                    return Err("the echo still answers".into());
                }
                thread::sleep(Duration::from_millis(200));
            }
        }),
    );
    out.extend(prefork_checks(
        &vm,
        gateway,
        forwarded[1],
        &prefork.bytes,
        limit,
    ));
    vm.kill();
    Ok(out)
}

/// The prefork web server (three workers sharing port 8000): its pages, `wrk` with 64
/// connections while a worker is killed, the parent replacing it and saying so.
fn prefork_checks(
    vm: &crate::qemu_run::QemuRun,
    gateway: SocketAddr,
    web: SocketAddr,
    prefork: &[u8],
    limit: Duration,
) -> Vec<Outcome> {
    let mut out = Vec::new();
    let mut check = |label: &str, result: Result<(), String>| {
        out.push((format!("sockets: prefork: {label}"), result));
    };
    let mut pid = 0u64;
    check("deployed and started; it says it listens with 3 workers", {
        start(gateway, "prefork", prefork).and_then(|p| {
            pid = p;
            vm.wait_for_line(
                |l| l.contains("prefork: listening on port 8000 with 3 workers"),
                limit,
            )
            .map(drop)
            .map_err(|e| format!("{e}"))
        })
    });
    check(
        "GET / is the static page, and `Connection: close` is honoured",
        {
            http_get(web, "GET", "/").and_then(|(head, body)| {
                match head.starts_with("HTTP/1.1 200")
                    && head.contains("Connection: close")
                    && body.contains("forked worker")
                {
                    true => Ok(()),
                    false => Err(format!("{head}{body}")),
                }
            })
        },
    );
    check("GET /worker names a worker forked by the server", {
        let workers = children_of(gateway, pid).unwrap_or_default();
        http_get(web, "GET", "/worker").and_then(|(head, body)| {
            let w: Option<u64> = body.split_whitespace().nth(1).and_then(|n| n.parse().ok());
            match w {
                Some(w) if workers.contains(&w) && head.contains(&format!("X-Worker: {w}")) => {
                    Ok(())
                }
                _ => Err(format!("{body:?} (workers {workers:?})")),
            }
        })
    });
    check("unknown paths get 404, POST gets 405, HEAD no body", {
        let statuses = (|| -> Result<_, String> {
            let a = http_get(web, "GET", "/nope")?;
            let b = http_get(web, "POST", "/")?;
            let c = http_get(web, "HEAD", "/")?;
            Ok((
                a.0.starts_with("HTTP/1.1 404"),
                b.0.starts_with("HTTP/1.1 405"),
                c.0.starts_with("HTTP/1.1 200") && c.1.is_empty(),
            ))
        })();
        match statuses {
            Ok((true, true, true)) => Ok(()),
            Ok(got) => Err(format!("{got:?}")),
            Err(e) => Err(e),
        }
    });
    check(
        "wrk with 64 connections keeps being served while a worker is killed; the parent replaces it and reports it",
        wrk_with_a_kill(vm, gateway, web, pid, limit),
    );
    check(
        "a worker that crashes (GET /crash) is replaced and reported as signal 11",
        {
            let _ = http_get(web, "GET", "/crash");
            vm.wait_for_line(|l| l.contains("killed by signal 11; worker"), limit)
                .map(drop)
                .map_err(|e| format!("{e}"))
                .and_then(|()| http_get(web, "GET", "/worker").map(drop))
        },
    );
    check(
        "the server and its workers are killed",
        kill_tree(gateway, pid),
    );
    out
}

/// Deploys and starts program `name`; its PID.
pub fn start(gateway: SocketAddr, name: &str, bytes: &[u8]) -> Result<u64, String> {
    match deploy(gateway, name, bytes)? {
        200 | 201 => {}
        s => return Err(format!("deploying {name} answered {s}")),
    }
    let r = one(gateway, "POST", &format!("/processes/{name}"), b"")?;
    r.expect(201)?;
    r.text()
        .trim()
        .trim_start_matches("{\"pid\":")
        .trim_end_matches('}')
        .parse()
        .map_err(|e| format!("no pid in {:?}: {e}", r.text()))
}

/// One request on a connection of its own: the response's head and body (read to the end:
/// the request asks to close).
fn http_get(addr: SocketAddr, method: &str, path: &str) -> Result<(String, String), String> {
    let mut s = connect(addr)?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: fjord\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("write: {e}"))?;
    let mut all = Vec::new();
    s.read_to_end(&mut all).map_err(|e| format!("read: {e}"))?;
    let text = String::from_utf8_lossy(&all).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no head in {text:?}"))?;
    Ok((format!("{head}\r\n"), body.to_owned()))
}

fn wrk_with_a_kill(
    vm: &crate::qemu_run::QemuRun,
    gateway: SocketAddr,
    web: SocketAddr,
    pid: u64,
    limit: Duration,
) -> Result<(), String> {
    let load = crate::loadgen::ClosedLoad {
        addr: web,
        method: "GET".into(),
        path: "/worker".into(),
        body: Vec::new(),
        connections: 64,
        duration: Duration::from_secs(4),
    };
    let run = thread::spawn(move || crate::wrk::run_closed(&load));
    thread::sleep(Duration::from_millis(1500));
    let victim = *children_of(gateway, pid)?
        .first()
        .ok_or("the server has no workers")?;
    one(gateway, "DELETE", &format!("/processes/{victim}"), b"")?.expect(204)?;
    let report = run
        .join()
        .map_err(|_| "wrk's thread panicked")?
        .map_err(|e| format!("{e:#}"))?;
    let line = vm
        .wait_for_line(
            |l| {
                l.contains(&format!(
                    "prefork: worker {victim} killed by signal 9; worker"
                ))
            },
            limit,
        )
        .map_err(|e| format!("no report of the replacement: {e}"))?;
    let after = children_of(gateway, pid)?;
    if after.len() != 3 || after.contains(&victim) {
        return Err(format!("workers after the kill: {after:?} ({line})"));
    }
    if report.ok == 0 {
        return Err(format!("no request answered ({} errors)", report.errors));
    }
    // Served after the kill, by the workers alive now.
    for _ in 0..5 {
        let (head, body) = http_get(web, "GET", "/worker")?;
        let w: Option<u64> = body.split_whitespace().nth(1).and_then(|n| n.parse().ok());
        if !head.starts_with("HTTP/1.1 200") || !w.is_some_and(|w| after.contains(&w)) {
            return Err(format!("after the kill: {head}{body} (workers {after:?})"));
        }
    }
    Ok(())
}

/// Kills `pid` and its children (a killed parent's children live on, as on POSIX systems).
fn kill_tree(gateway: SocketAddr, pid: u64) -> Result<(), String> {
    let mut victims = vec![pid];
    victims.extend(children_of(gateway, pid)?);
    if victims.len() < 2 {
        return Err(format!("no workers of {pid}"));
    }
    for v in victims {
        one(gateway, "DELETE", &format!("/processes/{v}"), b"")?.expect(204)?;
    }
    Ok(())
}

/// The live children of `pid`, from `GET /processes`.
pub fn children_of(gateway: SocketAddr, pid: u64) -> Result<Vec<u64>, String> {
    let r = one(gateway, "GET", "/processes", b"")?;
    r.expect(200)?;
    let text = r.text();
    let mut children = Vec::new();
    for entry in text.split("{\"pid\":").skip(1) {
        let mut fields = entry.splitn(3, [',', ':']);
        let child = fields.next().and_then(|p| p.parse::<u64>().ok());
        let parent = entry
            .split("\"ppid\":")
            .nth(1)
            .and_then(|t| t.split(',').next())
            .and_then(|p| p.parse::<u64>().ok());
        if let (Some(child), Some(parent)) = (child, parent)
            && parent == pid
            && !entry.contains("\"state\":\"zombie\"")
        {
            children.push(child);
        }
    }
    Ok(children)
}

fn connect(addr: SocketAddr) -> Result<TcpStream, String> {
    connect_within(addr, PATIENCE)
}

/// A connection to `addr` whose connect, reads and writes each give up after `patience`.
pub fn connect_within(addr: SocketAddr, patience: Duration) -> Result<TcpStream, String> {
    let s = TcpStream::connect_timeout(&addr, patience).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(patience))
        .and_then(|()| s.set_write_timeout(Some(patience)))
        .map_err(|e| format!("{e}"))?;
    Ok(s)
}

/// Reads exactly `n` bytes.
fn read_n(s: &mut TcpStream, n: usize) -> Result<Vec<u8>, String> {
    let mut got = vec![0u8; n];
    s.read_exact(&mut got)
        .map_err(|e| format!("reading {n} bytes: {e}"))?;
    Ok(got)
}

fn echo_line(addr: SocketAddr, line: &[u8]) -> Result<(), String> {
    let mut s = connect(addr)?;
    s.write_all(line).map_err(|e| format!("write: {e}"))?;
    let got = read_n(&mut s, line.len())?;
    match got == line {
        true => Ok(()),
        false => Err(format!("sent {line:?}, got {got:?}")),
    }
}

/// The PID of the worker that answers `who`.
fn who(addr: SocketAddr) -> Result<u64, String> {
    let mut s = connect(addr)?;
    s.write_all(b"who\n").map_err(|e| format!("write: {e}"))?;
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while line.last() != Some(&b'\n') && line.len() < 64 {
        s.read_exact(&mut b).map_err(|e| format!("read: {e}"))?;
        line.push(b[0]);
    }
    let text = String::from_utf8_lossy(&line);
    text.trim()
        .strip_prefix("worker ")
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| format!("answered {text:?}"))
}

/// Asks a worker to connect to a listener of ours on the host and checks both ends.
fn connects_out(echo: SocketAddr) -> Result<(), String> {
    let listener =
        std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("listen: {e}"))?;
    let port = listener.local_addr().map_err(|e| format!("{e}"))?.port();
    let server = thread::spawn(move || -> Result<(), String> {
        let (mut s, _) = listener.accept().map_err(|e| format!("accept: {e}"))?;
        s.set_read_timeout(Some(PATIENCE))
            .map_err(|e| format!("{e}"))?;
        let got = read_n(&mut s, 17)?;
        if got != b"hello from fjord\n" {
            return Err(format!("the guest said {got:?}"));
        }
        s.write_all(b"hi from the host\n")
            .map_err(|e| format!("write: {e}"))
    });
    let mut s = connect(echo)?;
    s.write_all(format!("connect {port}\n").as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    let want = b"connected: hi from the host\n";
    let got = read_n(&mut s, want.len())?;
    server.join().map_err(|_| "the host server panicked")??;
    match got == want {
        true => Ok(()),
        false => Err(format!(
            "the worker answered {:?}",
            String::from_utf8_lossy(&got)
        )),
    }
}

fn megabyte(addr: SocketAddr) -> Result<(), String> {
    let s = connect(addr)?;
    let data: Vec<u8> = (0..1u32 << 20).map(|i| (i * 7 % 251) as u8).collect();
    let mut reader = s.try_clone().map_err(|e| format!("{e}"))?;
    let want = data.len();
    let read = thread::spawn(move || {
        let mut got = Vec::with_capacity(want);
        let mut buf = vec![0u8; 64 * 1024];
        while got.len() < want {
            match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) => return Err(format!("read after {} bytes: {e}", got.len())),
            }
        }
        Ok(got)
    });
    (&s).write_all(&data).map_err(|e| format!("write: {e}"))?;
    let got = read.join().map_err(|_| "the reader panicked")??;
    match got == data {
        true => Ok(()),
        false => Err(format!("{} bytes came back, not the same", got.len())),
    }
}

fn many_at_once(addr: SocketAddr, n: usize) -> Result<(), String> {
    // QEMU's user network takes host connections one at a time: open them in turn, each
    // answered before the next opens, and keep them all open.
    let mut conns = Vec::new();
    for i in 0..n {
        let mut s = connect(addr)?;
        let line = format!("first {i}\n");
        s.write_all(line.as_bytes())
            .map_err(|e| format!("write: {e}"))?;
        let got = read_n(&mut s, line.len())?;
        if got != line.as_bytes() {
            return Err(format!("connection {i}: got {got:?}"));
        }
        conns.push(s);
    }
    for (i, s) in conns.iter_mut().enumerate().rev() {
        let line = format!("again {i}\n");
        s.write_all(line.as_bytes())
            .map_err(|e| format!("write: {e}"))?;
        let got = read_n(s, line.len())?;
        if got != line.as_bytes() {
            return Err(format!("connection {i} again: got {got:?}"));
        }
    }
    Ok(())
}

fn vanishing(addr: SocketAddr) -> Result<(), String> {
    {
        let mut gone = connect(addr)?;
        gone.write_all(b"half a li").map_err(|e| format!("{e}"))?;
    }
    {
        let mut half = connect(addr)?;
        half.write_all(b"closing\n").map_err(|e| format!("{e}"))?;
        half.shutdown(Shutdown::Write)
            .map_err(|e| format!("shutdown: {e}"))?;
        let mut rest = Vec::new();
        half.read_to_end(&mut rest)
            .map_err(|e| format!("read to end: {e}"))?;
        if rest != b"closing\n" {
            return Err(format!("after a half-close got {rest:?}"));
        }
    }
    echo_line(addr, b"still here\n")
}
