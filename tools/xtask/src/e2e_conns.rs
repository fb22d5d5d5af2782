//! End-to-end tests of the gateway under many connections and abusive clients: a thousand
//! concurrent keep-alive connections, clients that send their heads a byte at a time, bodies
//! that never finish, idle connections, clients that never read their answers, and connections
//! past the limit.
//!
//! Two boots of their own (microvm): one with the default connection limit (from the heap's
//! size) for the thousand connections and the slow heads, one with `http_max_conns=8` for the
//! limit, eviction and the body, idle and send deadlines. Short deadlines keep the checks to seconds;
//! every wait is generous and the checks assert what happens, not how fast.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::e2e_http::{Outcome, boot_gateway_with, deploy};
use crate::http_client::{Client, one};
use crate::qemu::{Accel, Machine};

/// Concurrent connections of the many-connections check.
pub const MANY: usize = 1000;
/// Threads opening them (each holds `MANY / THREADS` connections).
const THREADS: usize = 25;
/// Between the first connections of consecutive threads of the many-connections check.
const STAGGER: Duration = Duration::from_millis(20);
/// Clients sending their heads a byte at a time.
const SLOW_CLIENTS: usize = 50;
/// The limit of the second boot.
const SMALL_CAP: usize = 8;
/// How long a connection or a read may take on a loaded machine.
const IO_LIMIT: Duration = Duration::from_secs(60);
/// The send deadline of the second boot (milliseconds).
const SEND_TIMEOUT_MS: u64 = 2000;
/// Requests the client that never reads sends at once: their answers (`/metrics`, kilobytes
/// each) are far more than QEMU's and the host's socket buffers hold.
const PIPELINED: usize = 2000;
/// The `hello` request and the answer's start.
const HELLO: &[u8] =
    b"POST /invoke/hello HTTP/1.1\r\nHost: fjord\r\nContent-Length: 5\r\n\r\nworld";

/// Boots twice and runs every check; `hello` is the `hello` module.
pub fn run(kernel: &std::path::Path, accel: Accel, hello: &[u8]) -> Result<Vec<Outcome>> {
    let mut out = Vec::new();
    let (mut vm, addr) = boot_gateway_with(
        kernel,
        None,
        Machine::Microvm,
        accel,
        "http_head_timeout_ms=2000 http_idle_timeout_ms=300000",
    )?;
    deploy_hello(addr, hello)?;
    let mut check = |label: &str, result: Result<(), String>| {
        out.push((format!("http-conns/{label}"), result));
    };
    check(
        &format!("{MANY} concurrent keep-alive connections are all answered"),
        many_connections(addr),
    );
    check(
        &format!(
            "{SLOW_CLIENTS} clients sending heads byte by byte: others are served, the slow ones get 408"
        ),
        slow_heads(addr),
    );
    check(
        "/metrics counts the head timeouts and is well-formed",
        metrics_show(
            addr,
            &[(
                "fjord_http_connections_timed_out_total{phase=\"head\"}",
                SLOW_CLIENTS as u64,
            )],
        ),
    );
    vm.kill();

    let (mut vm, addr) = boot_gateway_with(
        kernel,
        None,
        Machine::Microvm,
        accel,
        &format!(
            "http_max_conns={SMALL_CAP} http_head_timeout_ms=5000 http_body_timeout_ms=10000 http_idle_timeout_ms=2000 http_send_timeout_ms={SEND_TIMEOUT_MS}"
        ),
    )?;
    deploy_hello(addr, hello)?;
    let mut check = |label: &str, result: Result<(), String>| {
        out.push((format!("http-conns/{label}"), result));
    };
    check(
        "at the limit a new connection gets 503, the established ones are served",
        over_the_limit(addr),
    );
    check(
        "at the limit an idle keep-alive connection makes room for a new one",
        idle_makes_room(addr),
    );
    check(
        "a body that stops arriving gets 408 and the connection closes",
        body_times_out(addr),
    );
    check(
        "an idle keep-alive connection is closed",
        idle_times_out(addr),
    );
    check(
        &format!(
            "a client pipelining {PIPELINED} requests that never reads is cut off, others are served"
        ),
        never_reads(addr),
    );
    check(
        "/metrics counts refusals, evictions, body, idle and send timeouts",
        metrics_show(
            addr,
            &[
                ("fjord_http_connections_rejected_total", 1),
                ("fjord_http_connections_evicted_total", 1),
                ("fjord_http_connections_timed_out_total{phase=\"body\"}", 1),
                ("fjord_http_connections_timed_out_total{phase=\"idle\"}", 1),
                ("fjord_http_connections_timed_out_total{phase=\"send\"}", 1),
            ],
        ),
    );
    vm.kill();
    Ok(out)
}

fn deploy_hello(addr: SocketAddr, hello: &[u8]) -> Result<()> {
    let status = deploy(addr, "hello", hello)
        .map_err(|e| anyhow::anyhow!(e))
        .context("deploying hello")?;
    anyhow::ensure!(
        (200..300).contains(&status),
        "deploying hello answered {status}"
    );
    Ok(())
}

/// A raw connection with the I/O limit. A connection attempt that times out is tried again
/// (twice): QEMU's user networking listens on the host with a backlog of one, so a burst of
/// connections waits in the host's SYN retries, which back off exponentially.
fn connect(addr: SocketAddr) -> Result<TcpStream, String> {
    let mut tries = 0;
    let s = loop {
        match TcpStream::connect_timeout(&addr, IO_LIMIT) {
            Ok(s) => break s,
            Err(e) if tries < 2 && e.kind() == std::io::ErrorKind::TimedOut => tries += 1,
            Err(e) => return Err(format!("connect: {e}")),
        }
    };
    s.set_read_timeout(Some(IO_LIMIT))
        .map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(IO_LIMIT))
        .map_err(|e| e.to_string())?;
    let _ = s.set_nodelay(true);
    Ok(s)
}

/// How long a new connection's first answer may take before the attempt is given up.
const FIRST_ANSWER: Duration = Duration::from_secs(20);

/// A connection that has reached the guest: `request` is sent on a fresh connection and its
/// answer read; returns the connection and the answer's status. An attempt whose answer does
/// not come within [`FIRST_ANSWER`] is abandoned and made again (twice): QEMU's user networking
/// accepts host connections with a backlog of one, and on a loaded machine the host kernel can
/// leave a connection the client believes open waiting in its handshake retries for a minute
/// before QEMU takes it (the host's `TcpExtListenOverflows` counts these); such a connection
/// never reached the gateway. A 408 is made again too: `request` goes in one write, so the
/// gateway saw the connection but not its head within the head timeout, which happens when
/// QEMU's user networking holds the segment back on a loaded host.
fn established(addr: SocketAddr, request: &[u8]) -> Result<(TcpStream, u16), String> {
    let mut last = String::new();
    for _ in 0..3 {
        let mut s = connect(addr)?;
        s.set_read_timeout(Some(FIRST_ANSWER))
            .map_err(|e| e.to_string())?;
        s.write_all(request).map_err(|e| format!("write: {e}"))?;
        match read_status(&mut s) {
            Ok(408) => last = "408: the head came after the head timeout".into(),
            Ok(status) => {
                s.set_read_timeout(Some(IO_LIMIT))
                    .map_err(|e| e.to_string())?;
                return Ok((s, status));
            }
            Err(e) if e.contains("temporarily unavailable") || e.contains("timed out") => last = e,
            Err(e) => return Err(e),
        }
    }
    Err(format!("no answer on three fresh connections: {last}"))
}

/// Reads one response with a `Content-Length` body; returns its status code.
fn read_status(s: &mut TcpStream) -> Result<u16, String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_string();
            let status = head
                .get(9..12)
                .and_then(|c| c.parse().ok())
                .ok_or_else(|| format!("bad status line in {head:?}"))?;
            let len: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
            while buf.len() < end + 4 + len {
                let n = s.read(&mut chunk).map_err(|e| format!("read: {e}"))?;
                if n == 0 {
                    return Err("closed mid-body".into());
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            return Ok(status);
        }
        let n = s.read(&mut chunk).map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err("closed before a response".into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Whether the server closes `s` (EOF or reset) within the I/O limit, reading past any answer.
fn closes(s: &mut TcpStream) -> Result<(), String> {
    let mut chunk = [0u8; 4096];
    loop {
        match s.read(&mut chunk) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(()),
            Err(e) => return Err(format!("not closed: {e}")),
        }
    }
}

/// `MANY` connections opened by `THREADS` threads, each answered once; then, with all of them
/// open at once (the open-connections gauge says so), each answered again.
fn many_connections(addr: SocketAddr) -> Result<(), String> {
    let barrier = Arc::new(Barrier::new(THREADS + 1));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let answered = Arc::new(Mutex::new((0usize, 0usize)));
    let workers: Vec<_> = (0..THREADS)
        .map(|i| {
            let (barrier, failures, answered) =
                (barrier.clone(), failures.clone(), answered.clone());
            thread::spawn(move || {
                // Staggered starts: connections opened at the same instant retry their
                // handshakes in step, so each wave finds QEMU's backlog of one full again.
                thread::sleep(STAGGER * i as u32);
                let mut conns = Vec::new();
                let round = |conns: &mut Vec<TcpStream>, fresh: bool| {
                    let mut kept = Vec::new();
                    let todo: Vec<Option<TcpStream>> = if fresh {
                        (0..MANY / THREADS).map(|_| None).collect()
                    } else {
                        conns.drain(..).map(Some).collect()
                    };
                    for c in todo {
                        let r = match c {
                            None => established(addr, HELLO),
                            Some(mut s) => s
                                .write_all(HELLO)
                                .map_err(|e| format!("write: {e}"))
                                .and_then(|()| read_status(&mut s))
                                .map(|status| (s, status)),
                        };
                        match r {
                            Ok((s, 200)) => {
                                answered.lock().unwrap().0 += 1;
                                kept.push(s);
                            }
                            Ok((_, 503)) => answered.lock().unwrap().1 += 1,
                            Ok((_, other)) => {
                                failures.lock().unwrap().push(format!("status {other}"))
                            }
                            Err(e) => failures.lock().unwrap().push(e),
                        }
                    }
                    *conns = kept;
                };
                round(&mut conns, true);
                barrier.wait();
                barrier.wait();
                round(&mut conns, false);
            })
        })
        .collect();
    barrier.wait();
    let open = metric(addr, "fjord_http_connections_open");
    barrier.wait();
    for w in workers {
        w.join()
            .map_err(|_| "a client thread panicked".to_owned())?;
    }
    let failures = failures.lock().unwrap();
    let (ok, refused) = *answered.lock().unwrap();
    if !failures.is_empty() {
        return Err(format!(
            "{} failures ({ok} answered 200, {refused} 503), e.g. {:?}",
            failures.len(),
            &failures[..failures.len().min(3)]
        ));
    }
    let open = open?;
    if open < MANY as u64 || ok != 2 * MANY {
        return Err(format!(
            "{open} connections open at once (want {MANY}), {ok} answered 200, {refused} 503"
        ));
    }
    Ok(())
}

/// `SLOW_CLIENTS` clients each send a request head a byte every 100 ms; meanwhile fresh
/// connections are answered; each slow client gets 408 and is closed. The slow clients'
/// connections are opened one after another, each shown to have reached the gateway by a first
/// request, and then start dribbling together: QEMU's user networking accepts host connections
/// with a backlog of one, and connections opened at the same instant repeat their handshakes
/// in step, each wave finding that backlog full again, so some of fifty opened at once could
/// wait longer than any reasonable limit.
fn slow_heads(addr: SocketAddr) -> Result<(), String> {
    let mut conns = Vec::with_capacity(SLOW_CLIENTS);
    for _ in 0..SLOW_CLIENTS {
        let (s, status) = established(addr, b"GET /functions HTTP/1.1\r\nHost: fjord\r\n\r\n")?;
        if status != 200 {
            return Err(format!("a slow client's first request got {status}"));
        }
        conns.push(s);
    }
    let slow: Vec<_> = conns
        .into_iter()
        .map(|mut s| {
            thread::spawn(move || -> Result<(), String> {
                let head = b"GET /functions HTTP/1.1\r\nHost: fjord\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
                let started = Instant::now();
                for b in head {
                    if s.write_all(&[*b]).is_err() {
                        break; // Closed by the server.
                    }
                    thread::sleep(Duration::from_millis(100));
                    if started.elapsed() > IO_LIMIT {
                        return Err("the slow head was never cut off".into());
                    }
                    s.set_nonblocking(true).map_err(|e| e.to_string())?;
                    let mut peek = [0u8; 1];
                    let answered = !matches!(s.peek(&mut peek), Err(ref e) if e.kind() == std::io::ErrorKind::WouldBlock);
                    s.set_nonblocking(false).map_err(|e| e.to_string())?;
                    if answered {
                        break;
                    }
                }
                match read_status(&mut s) {
                    Ok(408) => closes(&mut s),
                    Ok(other) => Err(format!("a slow client got {other}, not 408")),
                    Err(e) => Err(format!("a slow client got no 408: {e}")),
                }
            })
        })
        .collect();
    // Ask on fresh connections while the slow clients dribble.
    thread::sleep(Duration::from_millis(300));
    let mut served = Ok(());
    for _ in 0..20 {
        served = established(addr, HELLO).and_then(|(_, status)| match status {
            200 => Ok(()),
            other => Err(format!("status {other}")),
        });
        if served.is_err() {
            break;
        }
    }
    let mut errors = Vec::new();
    for t in slow {
        match t.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => errors.push(e),
            Err(_) => errors.push("a slow client thread panicked".into()),
        }
    }
    served.map_err(|e| format!("a normal client was not served beside the slow ones: {e}"))?;
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} slow clients: {:?}",
            errors.len(),
            &errors[..errors.len().min(3)]
        ))
    }
}

/// How long the gateway's `100 Continue` may take before a connection is taken for one that
/// never reached the guest and is made again.
const CONTINUE_WAIT: Duration = Duration::from_secs(3);

/// A connection the gateway holds mid-body: a head with `Expect: 100-continue` is sent, the
/// gateway's `100 Continue` read (so the connection is known to have reached the guest), and
/// ten of the body's 100 bytes sent. A connection whose `100` does not come within
/// [`CONTINUE_WAIT`] (or that is refused) is dropped and made again (twice): QEMU's user networking accepts host
/// connections with a backlog of one, so a connection the client believes open can wait in the
/// host's handshake retries for seconds before QEMU takes it.
fn mid_body(addr: SocketAddr) -> Result<TcpStream, String> {
    let mut last = String::new();
    for _ in 0..3 {
        let mut s = connect(addr)?;
        s.set_read_timeout(Some(CONTINUE_WAIT))
            .map_err(|e| e.to_string())?;
        s.write_all(
            b"POST /invoke/hello HTTP/1.1\r\nHost: fjord\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n",
        )
        .map_err(|e| format!("write: {e}"))?;
        match read_status(&mut s) {
            Ok(100) => {
                s.set_read_timeout(Some(IO_LIMIT))
                    .map_err(|e| e.to_string())?;
                s.write_all(b"0123456789")
                    .map_err(|e| format!("write: {e}"))?;
                return Ok(s);
            }
            // A connection given up on earlier can still hold a place for a moment.
            Ok(503) => {
                last = "503".into();
                thread::sleep(Duration::from_millis(500));
            }
            Ok(other) => return Err(format!("a head with Expect: 100-continue got {other}")),
            Err(e) => last = e,
        }
    }
    Err(format!("no 100 Continue in three attempts: {last}"))
}

/// The gateway filled with `SMALL_CAP` connections mid-body, each confirmed in the guest; the
/// fill starts again (up to three times) if it took so long that the first connections' body
/// deadline would come before the checks that follow are done.
fn fill_mid_body(addr: SocketAddr) -> Result<Vec<TcpStream>, String> {
    const FILL_BUDGET: Duration = Duration::from_secs(4);
    for _ in 0..3 {
        let start = std::time::Instant::now();
        let full: Vec<TcpStream> = (0..SMALL_CAP)
            .map(|_| mid_body(addr))
            .collect::<Result<_, _>>()?;
        if start.elapsed() < FILL_BUDGET {
            return Ok(full);
        }
        // Closed mid-body, the connections leave the gateway at once.
        drop(full);
        thread::sleep(Duration::from_secs(1));
    }
    Err(format!(
        "filling the gateway with {SMALL_CAP} connections took over {FILL_BUDGET:?} three times"
    ))
}

/// `SMALL_CAP` connections mid-body fill the gateway; a new connection is answered 503 and
/// closed; the full ones then finish their bodies and are answered.
fn over_the_limit(addr: SocketAddr) -> Result<(), String> {
    let mut full = fill_mid_body(addr)?;
    let mut s = connect(addr)?;
    s.write_all(b"GET /functions HTTP/1.1\r\nHost: fjord\r\nConnection: close\r\n\r\n")
        .map_err(|e| format!("write: {e}"))?;
    match read_status(&mut s)? {
        503 => closes(&mut s)?,
        other => return Err(format!("a connection past the limit got {other}")),
    }
    for s in &mut full {
        s.write_all(&[b'x'; 90])
            .map_err(|e| format!("write: {e}"))?;
        match read_status(s)? {
            // hello answers whatever the body.
            200 => {}
            other => return Err(format!("an established connection got {other}")),
        }
    }
    Ok(())
}

/// `SMALL_CAP` idle keep-alive connections; a new one is still answered (one idle connection
/// is closed for it).
fn idle_makes_room(addr: SocketAddr) -> Result<(), String> {
    let mut idle = Vec::new();
    for _ in 0..SMALL_CAP {
        let mut c = Client::connect(addr)?;
        c.request("GET", "/functions", b"")?.expect(200)?;
        idle.push(c);
    }
    let r = one(addr, "POST", "/invoke/hello", b"world")?;
    drop(idle);
    r.expect(200)
}

/// A request whose body stops arriving is answered 408 after the body deadline and closed.
fn body_times_out(addr: SocketAddr) -> Result<(), String> {
    // Earlier checks' connections close first (their idle deadline is 2 s).
    thread::sleep(Duration::from_secs(3));
    let mut s = mid_body(addr)?;
    match read_status(&mut s)? {
        408 => closes(&mut s),
        other => Err(format!("got {other}, not 408")),
    }
}

/// An idle keep-alive connection is closed by the server after the idle deadline.
fn idle_times_out(addr: SocketAddr) -> Result<(), String> {
    let mut s = connect(addr)?;
    s.write_all(b"GET /functions HTTP/1.1\r\nHost: fjord\r\n\r\n")
        .map_err(|e| format!("write: {e}"))?;
    match read_status(&mut s)? {
        200 => closes(&mut s),
        other => Err(format!("got {other}")),
    }
}

/// A client sends [`PIPELINED`] requests at once and reads none of the answers: its
/// connection is cut off after the send deadline (counted in `/metrics`), while other clients
/// are served.
fn never_reads(addr: SocketAddr) -> Result<(), String> {
    let before = metric(
        addr,
        "fjord_http_connections_timed_out_total{phase=\"send\"}",
    )?;
    let mut s = connect(addr)?;
    let writer = s.try_clone().map_err(|e| e.to_string())?;
    // The writes block once every buffer toward the guest is full: a thread of their own.
    let sender = thread::spawn(move || {
        let mut w = writer;
        let _ = w.set_write_timeout(Some(Duration::from_secs(20)));
        let req = b"GET /metrics HTTP/1.1\r\nHost: fjord\r\n\r\n".repeat(PIPELINED);
        let _ = w.write_all(&req);
    });
    let started = Instant::now();
    let mut served = 0;
    let cut = loop {
        thread::sleep(Duration::from_millis(500));
        one(addr, "POST", "/invoke/hello", b"world")
            .and_then(|r| r.expect(200))
            .map_err(|e| format!("another client was not served beside it: {e}"))?;
        served += 1;
        let now = metric(
            addr,
            "fjord_http_connections_timed_out_total{phase=\"send\"}",
        )?;
        if now > before {
            break started.elapsed();
        }
        if started.elapsed() > IO_LIMIT {
            return Err(format!(
                "not cut off after {:?} ({served} other requests served)",
                started.elapsed()
            ));
        }
    };
    if cut < Duration::from_millis(SEND_TIMEOUT_MS) {
        return Err(format!("cut off after {cut:?}, before the send deadline"));
    }
    let _ = sender.join();
    // What it never read is still in the host's buffers; past it, the connection is closed.
    closes(&mut s)
}

/// `GET /metrics` passes the gateway's exposition checker and each `(series, at_least)` holds.
fn metrics_show(addr: SocketAddr, want: &[(&str, u64)]) -> Result<(), String> {
    let text = one(addr, "GET", "/metrics", b"")?.text();
    fjord_faas::metrics::check::check_exposition(&text)?;
    for &(series, least) in want {
        let v = series_value(&text, series).ok_or_else(|| format!("no {series} in /metrics"))?;
        if v < least {
            return Err(format!("{series} is {v}, want at least {least}"));
        }
    }
    Ok(())
}

/// The value of one series of `/metrics`.
pub fn metric(addr: SocketAddr, series: &str) -> Result<u64, String> {
    let text = one(addr, "GET", "/metrics", b"")?.text();
    series_value(&text, series).ok_or_else(|| format!("no {series} in /metrics"))
}

/// The value of the sample `series` (name and labels as written) in exposition text.
pub fn series_value(text: &str, series: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_series_values() {
        let text = "# HELP a x\n# TYPE a counter\na 3\nab 4\na{phase=\"head\"} 5\n";
        assert_eq!(series_value(text, "a"), Some(3));
        assert_eq!(series_value(text, "ab"), Some(4));
        assert_eq!(series_value(text, "a{phase=\"head\"}"), Some(5));
        assert_eq!(series_value(text, "b"), None);
    }
}
