//! The `tcpecho` program: a TCP echo server on port 7000. It first checks the socket calls'
//! errors (a port in use, the gateway's port, a refused connection, calls in the wrong state)
//! and prints `tcpecho: errors checked` (or the failed check and exits with its number); then
//! it listens, forks [`WORKERS`] workers that share the listening socket, and waits for them.
//! Each worker serves many connections at once with `poll` over the non-blocking listener and
//! its clients: it echoes every byte, except that a line `who\n` is answered with
//! `worker <pid>\n`, a line `connect <port>\n` makes the worker connect to that port of the
//! host (10.0.2.2, QEMU's user network), send `hello from fjord\n`, read one line back and answer
//! `connected: <line>`, and a line `quit\n` ends the worker (exit 0) once its clients are
//! served.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
extern crate alloc;

#[cfg(target_os = "none")]
mod program {
    use alloc::format;
    use alloc::vec::Vec;
    use fjord_libos::abi::Error;
    use fjord_libos::net::{self, POLLHUP, POLLIN, POLLOUT, PollFd, TcpListener};
    use fjord_libos::process::{self, Fd};

    /// The port it listens on.
    pub const PORT: u16 = 7000;
    /// Workers forked after `listen`.
    pub const WORKERS: usize = 2;
    /// Most clients a worker serves at once.
    const MAX_CLIENTS: usize = 64;

    struct Client {
        fd: Fd,
        /// Bytes received and not yet answered (up to the end of a line).
        line: Vec<u8>,
        /// Bytes to send.
        out: Vec<u8>,
        /// The peer closed its side.
        closed: bool,
    }

    fn check(ok: bool, code: u8) -> Result<(), u8> {
        if ok { Ok(()) } else { Err(code) }
    }

    /// The errors of socket calls made wrongly.
    fn errors() -> Result<(), u8> {
        let l = TcpListener::bind(PORT, 16).map_err(|e| {
            process::print(&format!("tcpecho: listening on {PORT}: {e:?}"));
            1
        })?;
        let s = net::socket().map_err(|_| 2)?;
        check(net::bind(s, PORT) == Err(Some(Error::AddressInUse)), 3)?;
        check(net::bind(s, 80) == Err(Some(Error::AddressInUse)), 4)?;
        check(net::listen(s, 4) == Err(Some(Error::NotConnected)), 5)?;
        let mut buf = [0u8; 4];
        check(
            process::read(s, &mut buf) == Err(Some(Error::NotConnected)),
            6,
        )?;
        check(net::accept(s).map(drop) == Err(Some(Error::InvalidArgs)), 7)?;
        // Nothing listens on the host's port 1: QEMU's user network refuses for it.
        let r = net::connect(s, [10, 0, 2, 2], 1);
        check(
            matches!(
                r,
                Err(Some(Error::ConnectionRefused | Error::ConnectionReset))
            ),
            8,
        )?;
        check(process::close(s).is_ok(), 9)?;
        check(process::close(s) == Err(Some(Error::BadFd)), 10)?;
        net::set_nonblocking(l.fd(), true).map_err(|_| 11)?;
        check(
            l.accept().map(drop).err() == Some(Some(Error::WouldBlock)),
            12,
        )?;
        let mut none = [PollFd::new(l.fd(), POLLIN)];
        check(net::poll(&mut none, 0) == Ok(0), 13)?;
        check(net::poll(&mut none, 20) == Ok(0), 14)?;
        let mut bad = [PollFd::new(99, POLLIN)];
        check(
            net::poll(&mut bad, 0) == Ok(1) && bad[0].revents == net::POLLNVAL,
            15,
        )?;
        drop(l);
        // The port is free again once closed.
        let again = TcpListener::bind(PORT, 16).map_err(|_| 16)?;
        drop(again);
        Ok(())
    }

    /// Connects to the host port named by `arg` (digits and a newline), says hello, and reads a
    /// line back: what to answer the client that asked.
    fn connect_out(arg: &[u8]) -> alloc::string::String {
        let port = core::str::from_utf8(arg)
            .ok()
            .and_then(|t| t.trim().parse::<u16>().ok());
        let Some(port) = port else {
            return "connect: bad port\n".into();
        };
        let s = match net::TcpStream::connect([10, 0, 2, 2], port) {
            Ok(s) => s,
            Err(e) => return format!("connect: {e:?}\n"),
        };
        if let Err(e) = s.write_all(b"hello from fjord\n") {
            return format!("connect: write {e:?}\n");
        }
        let mut line = Vec::new();
        let mut buf = [0u8; 64];
        while !line.ends_with(b"\n") && line.len() < 256 {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => line.extend_from_slice(&buf[..n]),
                Err(e) => return format!("connect: read {e:?}\n"),
            }
        }
        let text = core::str::from_utf8(&line).unwrap_or("?").trim_end();
        format!("connected: {text}\n")
    }

    /// Serves clients until asked to quit.
    fn worker(listener: Fd) -> u8 {
        let me = process::getpid();
        let mut clients: Vec<Client> = Vec::new();
        let mut quitting = false;
        loop {
            if quitting && clients.is_empty() {
                return 0;
            }
            let mut fds = Vec::with_capacity(clients.len() + 1);
            fds.push(PollFd::new(listener, if quitting { 0 } else { POLLIN }));
            for c in &clients {
                let mut ev = POLLIN;
                if !c.out.is_empty() {
                    ev |= POLLOUT;
                }
                fds.push(PollFd::new(c.fd, ev));
            }
            if net::poll(&mut fds, 1000).is_err() {
                return 20;
            }
            if fds[0].revents & POLLIN != 0 && clients.len() < MAX_CLIENTS {
                // Another worker may have taken it: WouldBlock then.
                if let Ok((fd, _, _)) = net::accept(listener) {
                    let _ = net::set_nonblocking(fd, true);
                    clients.push(Client {
                        fd,
                        line: Vec::new(),
                        out: Vec::new(),
                        closed: false,
                    });
                }
            }
            for (i, c) in clients.iter_mut().enumerate() {
                let Some(p) = fds.get(i + 1) else {
                    break;
                };
                if p.revents & (POLLIN | POLLHUP) != 0 {
                    let mut buf = [0u8; 16 * 1024];
                    match process::read(c.fd, &mut buf) {
                        Ok(0) => c.closed = true,
                        Ok(n) => {
                            for &b in &buf[..n] {
                                c.line.push(b);
                                if b == b'\n' {
                                    match c.line.as_slice() {
                                        b"who\n" => c
                                            .out
                                            .extend_from_slice(format!("worker {me}\n").as_bytes()),
                                        b"quit\n" => quitting = true,
                                        line if line.starts_with(b"connect ") => {
                                            let answer = connect_out(&line[8..]);
                                            c.out.extend_from_slice(answer.as_bytes());
                                        }
                                        line => c.out.extend_from_slice(line),
                                    }
                                    c.line.clear();
                                }
                            }
                            // Bytes of an unfinished line are echoed at once unless they
                            // may still become a command.
                            if c.line.len() > 5 {
                                c.out.append(&mut c.line);
                            }
                        }
                        Err(Some(Error::WouldBlock)) => {}
                        Err(_) => c.closed = true,
                    }
                }
                if !c.out.is_empty() {
                    match process::write(c.fd, &c.out) {
                        Ok(n) => {
                            c.out.drain(..n);
                        }
                        Err(Some(Error::WouldBlock)) => {}
                        Err(_) => {
                            c.out.clear();
                            c.closed = true;
                        }
                    }
                }
            }
            clients.retain(|c| {
                let done = c.closed && (c.out.is_empty() || quitting);
                if done {
                    let _ = process::close(c.fd);
                }
                !done
            });
        }
    }

    pub fn main() -> u8 {
        if let Err(code) = errors() {
            process::print(&format!("tcpecho: error check {code} failed"));
            return code;
        }
        process::print("tcpecho: errors checked");
        let Ok(listener) = TcpListener::bind(PORT, 64) else {
            return 30;
        };
        if net::set_nonblocking(listener.fd(), true).is_err() {
            return 31;
        }
        for _ in 0..WORKERS {
            match process::fork() {
                Ok(0) => process::exit(worker(listener.fd())),
                Ok(_) => {}
                Err(_) => return 32,
            }
        }
        process::print(&format!(
            "tcpecho: listening on port {PORT} with {WORKERS} workers"
        ));
        let mut worst = 0;
        for _ in 0..WORKERS {
            match process::waitpid(process::ANY_CHILD, 0) {
                Ok(Some((_, process::ExitStatus::Exited(0)))) => {}
                _ => worst = 33,
            }
        }
        worst
    }
}

#[cfg(target_os = "none")]
fjord_libos::program!(
    program::main,
    name = "tcpecho",
    stack_size = "64K",
    heap_size = "2M"
);

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!("tcpecho is a Fjord program: run it in Fjord (POST /processes/tcpecho)");
}
