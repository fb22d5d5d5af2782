//! The prefork web server's HTTP/1.1: finding complete requests in a connection's bytes
//! (pipelined or split anywhere), and the responses: a static page at `/`, `/worker` naming the
//! worker that answered, `/crash` (the worker faults, to test that the parent replaces it), 404
//! for other paths, 405 for methods other than GET and HEAD, 400 for malformed requests and
//! 413 for heads over [`MAX_HEAD`]. Keep-alive unless the client asks to close (or speaks
//! HTTP/1.0 without `Connection: keep-alive`). Plain logic, host-tested.
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]

extern crate alloc;

use alloc::format;
use alloc::vec::Vec;

/// Largest request head accepted.
pub const MAX_HEAD: usize = 8 * 1024;

/// The static page served at `/`.
pub const INDEX: &str = "<!doctype html>\n<html><head><title>Fjord prefork</title></head>\n<body><h1>Served by a forked worker of Fjord's prefork server</h1>\n<p>Each worker is a μprocess forked after <code>listen</code>; they share one listening socket.</p></body></html>\n";

/// What a complete request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// `/`: the static page.
    Index,
    /// `/worker`: which worker answered.
    Worker,
    /// `/crash`: the worker faults.
    Crash,
    /// Any other path.
    NotFound,
    /// A method other than GET or HEAD.
    BadMethod,
    /// A malformed request.
    Malformed,
    /// A head over [`MAX_HEAD`].
    TooLarge,
}

/// A complete request found at the start of a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// What it asks for.
    pub route: Route,
    /// Bytes of the buffer it took.
    pub len: usize,
    /// `HEAD`: the response has no body.
    pub head_only: bool,
    /// The connection stays open after the response.
    pub keep_alive: bool,
}

/// The first complete request in `buf`, or `None` when more bytes are needed. A malformed or
/// oversized head is a request too ([`Route::Malformed`], [`Route::TooLarge`]), after which the
/// connection closes.
pub fn parse(buf: &[u8]) -> Option<Request> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n");
    let Some(end) = end else {
        return (buf.len() > MAX_HEAD).then_some(Request {
            route: Route::TooLarge,
            len: buf.len(),
            head_only: false,
            keep_alive: false,
        });
    };
    let len = end + 4;
    let closing = |route| {
        Some(Request {
            route,
            len,
            head_only: false,
            keep_alive: false,
        })
    };
    if len > MAX_HEAD {
        return closing(Route::TooLarge);
    }
    let Ok(head) = core::str::from_utf8(&buf[..end]) else {
        return closing(Route::Malformed);
    };
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or("").split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (first.next(), first.next(), first.next(), first.next())
    else {
        return closing(Route::Malformed);
    };
    let http11 = match version {
        "HTTP/1.1" => true,
        "HTTP/1.0" => false,
        _ => return closing(Route::Malformed),
    };
    let mut keep_alive = http11;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return closing(Route::Malformed);
        };
        if name.eq_ignore_ascii_case("content-length") && value.trim() != "0"
            || name.eq_ignore_ascii_case("transfer-encoding")
        {
            // Bodies are not served here: a request with one cannot be framed safely.
            return closing(Route::BadMethod);
        }
        if name.eq_ignore_ascii_case("connection") {
            let v = value.trim();
            if v.eq_ignore_ascii_case("close") {
                keep_alive = false;
            } else if v.eq_ignore_ascii_case("keep-alive") {
                keep_alive = true;
            }
        }
    }
    let head_only = method == "HEAD";
    let path = target.split('?').next().unwrap_or("");
    let route = match (method, path) {
        ("GET" | "HEAD", "/" | "/index.html") => Route::Index,
        ("GET" | "HEAD", "/worker") => Route::Worker,
        ("GET", "/crash") => Route::Crash,
        ("GET" | "HEAD", _) => Route::NotFound,
        _ => Route::BadMethod,
    };
    Some(Request {
        route,
        len,
        head_only,
        keep_alive,
    })
}

/// The response to `req`, answered by worker `worker` (its PID) of `workers`, which has served
/// `served` requests before this one.
pub fn respond(req: &Request, worker: u64, served: u64, out: &mut Vec<u8>) {
    let (status, body, kind) = match req.route {
        Route::Index => ("200 OK", alloc::string::String::from(INDEX), "text/html"),
        Route::Worker => (
            "200 OK",
            format!("worker {worker} served {served} requests before this one\n"),
            "text/plain",
        ),
        Route::Crash | Route::NotFound => (
            "404 Not Found",
            alloc::string::String::from("not found\n"),
            "text/plain",
        ),
        Route::BadMethod => (
            "405 Method Not Allowed",
            alloc::string::String::from("only GET and HEAD\n"),
            "text/plain",
        ),
        Route::Malformed => (
            "400 Bad Request",
            alloc::string::String::from("bad request\n"),
            "text/plain",
        ),
        Route::TooLarge => (
            "413 Content Too Large",
            alloc::string::String::from("request head too large\n"),
            "text/plain",
        ),
    };
    let connection = if req.keep_alive {
        "keep-alive"
    } else {
        "close"
    };
    out.extend_from_slice(
        format!(
            "HTTP/1.1 {status}\r\nServer: fjord-prefork\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nX-Worker: {worker}\r\nConnection: {connection}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    );
    if !req.head_only {
        out.extend_from_slice(body.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(text: &str) -> Option<Request> {
        parse(text.as_bytes())
    }

    #[test]
    fn routes_and_keep_alive() {
        let r = req("GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert_eq!(r.route, Route::Index);
        assert!(r.keep_alive && !r.head_only);
        assert_eq!(r.len, 27);
        let r = req("GET /worker HTTP/1.0\r\n\r\n").unwrap();
        assert_eq!((r.route, r.keep_alive), (Route::Worker, false));
        let r = req("GET /worker?x=1 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").unwrap();
        assert_eq!((r.route, r.keep_alive), (Route::Worker, true));
        let r = req("HEAD /nope HTTP/1.1\r\nConnection: close\r\n\r\n").unwrap();
        assert_eq!(
            (r.route, r.keep_alive, r.head_only),
            (Route::NotFound, false, true)
        );
        assert_eq!(
            req("POST / HTTP/1.1\r\n\r\n").unwrap().route,
            Route::BadMethod
        );
        assert_eq!(
            req("GET /crash HTTP/1.1\r\n\r\n").unwrap().route,
            Route::Crash
        );
    }

    #[test]
    fn incomplete_malformed_and_oversized_heads() {
        assert_eq!(req("GET / HTTP/1.1\r\nHost: x\r\n"), None);
        for bad in [
            "GET /\r\n\r\n",
            "GET / HTTP/2\r\n\r\n",
            "GET / HTTP/1.1 extra\r\n\r\n",
            "GET / HTTP/1.1\r\nno colon\r\n\r\n",
        ] {
            let r = req(bad).unwrap();
            assert_eq!(
                (r.route, r.keep_alive),
                (Route::Malformed, false),
                "{bad:?}"
            );
        }
        let big = alloc::vec![b'a'; MAX_HEAD + 1];
        assert_eq!(parse(&big).unwrap().route, Route::TooLarge);
        let body = req("GET / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello").unwrap();
        assert_eq!((body.route, body.keep_alive), (Route::BadMethod, false));
    }

    #[test]
    fn pipelined_requests_split_anywhere_parse_the_same() {
        let two = b"GET / HTTP/1.1\r\n\r\nGET /worker HTTP/1.1\r\n\r\n";
        for cut in 0..two.len() {
            let mut buf = Vec::new();
            let mut found = Vec::new();
            for part in [&two[..cut], &two[cut..]] {
                buf.extend_from_slice(part);
                while let Some(r) = parse(&buf) {
                    found.push(r.route);
                    buf.drain(..r.len);
                }
            }
            assert_eq!(found, [Route::Index, Route::Worker], "cut at {cut}");
            assert!(buf.is_empty());
        }
    }

    #[test]
    fn responses_carry_length_worker_and_connection() {
        let mut out = Vec::new();
        let r = req("GET /worker HTTP/1.1\r\n\r\n").unwrap();
        respond(&r, 7, 41, &mut out);
        let text = core::str::from_utf8(&out).unwrap();
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"));
        assert!(text.contains("X-Worker: 7\r\n"));
        assert!(text.contains("Connection: keep-alive\r\n"));
        let body = "worker 7 served 41 requests before this one\n";
        assert!(text.ends_with(body));
        assert!(text.contains(&format!("Content-Length: {}\r\n", body.len())));
        out.clear();
        let h = req("HEAD / HTTP/1.1\r\n\r\n").unwrap();
        respond(&h, 1, 0, &mut out);
        let text = core::str::from_utf8(&out).unwrap();
        assert!(text.ends_with("\r\n\r\n"));
        assert!(text.contains(&format!("Content-Length: {}\r\n", INDEX.len())));
    }
}

/// The server itself: a μprocess listening on [`PORT`] with forked workers.
#[cfg(target_os = "none")]
pub mod server {
    use super::{Route, parse, respond};
    use alloc::format;
    use alloc::vec::Vec;
    use fjord_libos::abi::Error;
    use fjord_libos::net::{self, POLLHUP, POLLIN, POLLOUT, PollFd, TcpListener};
    use fjord_libos::process::{self, ExitStatus, Fd};

    /// The port it listens on.
    pub const PORT: u16 = 8000;
    /// Most connections a worker serves at once.
    const MAX_CLIENTS: usize = 256;
    /// The signal a worker asked to crash sends itself (SIGSEGV).
    const SIGSEGV: u64 = 11;

    struct Conn {
        fd: Fd,
        input: Vec<u8>,
        out: Vec<u8>,
        /// Close once `out` is sent.
        closing: bool,
    }

    /// Listens on [`PORT`], forks `workers` workers sharing the socket, and replaces each that
    /// dies, reporting it on the console. Returns only if it cannot listen or fork.
    pub fn serve(workers: usize) -> u8 {
        let listener = match TcpListener::bind(PORT, 128) {
            Ok(l) => l,
            Err(e) => {
                process::print(&format!("prefork: cannot listen on port {PORT}: {e:?}"));
                return 1;
            }
        };
        if net::set_nonblocking(listener.fd(), true).is_err() {
            return 2;
        }
        for _ in 0..workers {
            if spawn_worker(listener.fd()).is_none() {
                return 3;
            }
        }
        process::print(&format!(
            "prefork: listening on port {PORT} with {workers} workers"
        ));
        loop {
            match process::waitpid(process::ANY_CHILD, 0) {
                Ok(Some((pid, status))) => {
                    let how = match status {
                        ExitStatus::Exited(code) => format!("exited with {code}"),
                        ExitStatus::Killed(sig) => format!("killed by signal {sig}"),
                    };
                    match spawn_worker(listener.fd()) {
                        Some(new) => process::print(&format!(
                            "prefork: worker {pid} {how}; worker {new} replaces it"
                        )),
                        None => process::print(&format!(
                            "prefork: worker {pid} {how}; no replacement (fork failed)"
                        )),
                    }
                }
                Ok(None) => {}
                Err(_) => return 4,
            }
        }
    }

    /// Forks a worker serving `listener`; its PID.
    fn spawn_worker(listener: Fd) -> Option<u64> {
        match process::fork() {
            Ok(0) => process::exit(worker(listener)),
            Ok(pid) => Some(pid),
            Err(_) => None,
        }
    }

    /// Serves connections until killed.
    fn worker(listener: Fd) -> u8 {
        let me = process::getpid();
        let mut served = 0u64;
        let mut conns: Vec<Conn> = Vec::new();
        let mut fds: Vec<PollFd> = Vec::new();
        let mut buf = alloc::vec![0u8; 16 * 1024];
        loop {
            fds.clear();
            let room = conns.len() < MAX_CLIENTS;
            fds.push(PollFd::new(listener, if room { POLLIN } else { 0 }));
            for c in &conns {
                let ev = if c.out.is_empty() { POLLIN } else { POLLOUT };
                fds.push(PollFd::new(c.fd, ev));
            }
            if net::poll(&mut fds, -1).is_err() {
                return 10;
            }
            if fds[0].revents & POLLIN != 0 {
                // Taken by another worker first: WouldBlock.
                while conns.len() < MAX_CLIENTS {
                    let Ok((fd, _, _)) = net::accept(listener) else {
                        break;
                    };
                    let _ = net::set_nonblocking(fd, true);
                    conns.push(Conn {
                        fd,
                        input: Vec::new(),
                        out: Vec::new(),
                        closing: false,
                    });
                }
            }
            for (c, p) in conns.iter_mut().zip(fds.iter().skip(1)) {
                if p.revents & (POLLIN | POLLHUP) != 0 && !c.closing {
                    match process::read(c.fd, &mut buf) {
                        Ok(0) => c.closing = true,
                        Ok(n) => c.input.extend_from_slice(&buf[..n]),
                        Err(Some(Error::WouldBlock)) => {}
                        Err(_) => {
                            c.closing = true;
                            c.out.clear();
                        }
                    }
                    while let Some(req) = parse(&c.input) {
                        c.input.drain(..req.len);
                        if req.route == Route::Crash {
                            process::print(&format!("prefork: worker {me} crashes as asked"));
                            let _ = process::kill(me, SIGSEGV);
                        }
                        respond(&req, me, served, &mut c.out);
                        served += 1;
                        if !req.keep_alive {
                            c.closing = true;
                            c.input.clear();
                            break;
                        }
                    }
                }
                flush(c);
            }
            conns.retain(|c| {
                let done = c.closing && c.out.is_empty();
                if done {
                    let _ = process::close(c.fd);
                }
                !done
            });
        }
    }

    /// Sends what `c` has queued, as far as the socket takes it.
    fn flush(c: &mut Conn) {
        while !c.out.is_empty() {
            match process::write(c.fd, &c.out) {
                Ok(n) => {
                    c.out.drain(..n);
                }
                Err(Some(Error::WouldBlock)) => return,
                Err(_) => {
                    c.out.clear();
                    c.closing = true;
                    return;
                }
            }
        }
    }
}
