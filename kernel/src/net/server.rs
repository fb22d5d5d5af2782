//! The HTTP server: a pool of listening TCP sockets, each carrying one gateway [`Connection`].
//!
//! Invocations do not block the server: each runs on an executor core while the server keeps
//! moving bytes for every other connection and polls for its completion.

use alloc::vec::Vec;
use fjord_faas::gateway::{Connection, FunctionService, Gateway, Sample};
use fjord_faas::http::Limits;
use smoltcp::iface::{SocketHandle, SocketSet};
use smoltcp::socket::tcp::{self, State};

/// Bytes of receive and of transmit buffer per socket.
const SOCKET_BUFFER: usize = 64 * 1024;

/// One socket of the pool and the connection it carries, if any.
struct Slot {
    handle: SocketHandle,
    conn: Option<Connection>,
}

/// The server's sockets and the gateway they feed.
pub struct Server<S> {
    slots: Vec<Slot>,
    port: u16,
    limits: Limits,
    /// The gateway answering requests.
    pub gateway: Gateway<S>,
}

/// Request/response traffic: send each response at once (no Nagle) and acknowledge at once
/// (no delayed ACK), or a keep-alive client waits for timers between requests.
fn configure(s: &mut tcp::Socket<'_>) {
    s.set_nagle_enabled(false);
    s.set_ack_delay(None);
}

impl<S: FunctionService> Server<S> {
    /// Creates `count` sockets listening on `port` (each accepts one connection at a time).
    pub fn new(sockets: &mut SocketSet<'_>, count: usize, port: u16, gateway: Gateway<S>) -> Self {
        let mut slots = Vec::with_capacity(count);
        for _ in 0..count {
            let rx = tcp::SocketBuffer::new(alloc::vec![0; SOCKET_BUFFER]);
            let tx = tcp::SocketBuffer::new(alloc::vec![0; SOCKET_BUFFER]);
            let mut s = tcp::Socket::new(rx, tx);
            configure(&mut s);
            if let Err(e) = s.listen(port) {
                log::error!("net: listen on port {port}: {e:?}");
            }
            slots.push(Slot {
                handle: sockets.add(s),
                conn: None,
            });
        }
        Server {
            slots,
            port,
            limits: Limits {
                max_body_bytes: 2 << 20,
                ..Limits::default()
            },
            gateway,
        }
    }

    /// Moves bytes between the sockets and their connections; returns whether anything moved.
    pub fn service(
        &mut self,
        sockets: &mut SocketSet<'_>,
        kernel: &impl Fn() -> Vec<Sample>,
    ) -> bool {
        let mut busy = false;
        let Server {
            slots,
            port,
            limits,
            gateway,
        } = self;
        for slot in slots.iter_mut() {
            let sock = sockets.get_mut::<tcp::Socket>(slot.handle);
            // A connection the server closed first: skip TIME-WAIT (the peer has closed too) so
            // the socket can take the next connection at once.
            if sock.state() == State::TimeWait {
                sock.abort();
            }
            if sock.state() == State::Closed {
                // A connection reset or closed under a running invocation: nobody waits for it.
                if let Some(mut conn) = slot.conn.take() {
                    conn.abandon(gateway);
                }
                configure(sock);
                if let Err(e) = sock.listen(*port) {
                    log::error!("net: listen on port {port}: {e:?}");
                }
                continue;
            }
            if slot.conn.is_none() && sock.is_active() && sock.state() != State::SynReceived {
                slot.conn = Some(Connection::new(*limits));
                gateway.count_connection();
                busy = true;
            }
            let Some(conn) = slot.conn.as_mut() else {
                continue;
            };
            // A finished invocation's answer, then the requests queued behind it.
            if conn.poll(gateway, kernel) {
                busy = true;
            }
            let (mut received, mut sent) = (0, 0);
            // While an invocation runs, later requests wait in the socket (TCP flow control
            // holds the peer back).
            while sock.can_recv() && !conn.waiting() {
                let r = sock.recv(|buf| {
                    conn.receive(buf, gateway, kernel);
                    (buf.len(), buf.len())
                });
                match r {
                    Ok(0) | Err(_) => break,
                    Ok(n) => received += n,
                }
            }
            while !conn.output().is_empty() && sock.can_send() {
                match sock.send_slice(conn.output()) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        conn.sent(n);
                        sent += n;
                    }
                }
            }
            let peer_done = !sock.may_recv() && !conn.waiting() && conn.output().is_empty();
            if (conn.finished() || peer_done) && sock.may_send() {
                sock.close();
                busy = true;
            }
            if received + sent > 0 {
                gateway.count_bytes(received, sent);
                busy = true;
            }
            // The network loop keeps polling (it does not halt) while an invocation runs.
            busy |= conn.waiting();
        }
        busy
    }
}
