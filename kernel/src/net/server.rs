//! The HTTP server: TCP sockets carrying gateway [`Connection`]s, a backlog of listening sockets
//! that grows and shrinks with the load, and the client deadlines.
//!
//! smoltcp resets a SYN that no listening socket takes, so the server keeps
//! [`Admission::backlog`] sockets listening and opens another as each one takes a connection;
//! a socket whose connection ended listens again, or is freed when the backlog is full. At
//! [`Admission::max_open`] connections a new one takes the place of an idle or slow connection
//! ([`admission::victim`]) or is answered 503; past the memory bound no socket listens and new
//! connections are refused by the stack, while established ones keep being served.
//!
//! Invocations do not block the server: each runs on an executor core while the server keeps
//! moving bytes for every other connection and polls for its completion.

use super::sockets::{LISTEN, Sockets};
use alloc::vec::Vec;
use fjord_faas::gateway::admission::{self, Admission, Candidate};
use fjord_faas::gateway::timeouts::{Deadline, Phase, Timeouts};
use fjord_faas::gateway::{Connection, FunctionService, Gateway, InvocationId, Sample};
use fjord_faas::http::Limits;
use fjord_kernel::fnv::FnvHashMap;
use fjord_kernel::steer::shard_of;
use smoltcp::iface::SocketHandle;
use smoltcp::socket::AnySocket;
use smoltcp::socket::tcp::{self, State};
use smoltcp::wire::{IpAddress, IpEndpoint};

/// Bytes of receive buffer per socket (the most a client may have in flight).
pub const RX_BUFFER: usize = 8 * 1024;
/// Bytes of transmit buffer per socket.
pub const TX_BUFFER: usize = 8 * 1024;
/// Heap bytes one connection costs: its socket buffers plus its connection state and request
/// buffers when small.
pub const CONNECTION_BYTES: usize = RX_BUFFER + TX_BUFFER + 2 * 1024;
/// No listening socket is added while less than this much heap is free.
const HEAP_RESERVE: usize = 4 << 20;
/// A socket the server closed that has not finished closing after this long is aborted (a
/// peer that never sends its FIN cannot hold it).
const LINGER_MS: u64 = 5_000;

/// How the server is set up.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// The TCP port.
    pub port: u16,
    /// Connection cap and backlog.
    pub admission: Admission,
    /// Client deadlines.
    pub timeouts: Timeouts,
    /// Request size limits.
    pub limits: Limits,
}

/// A connection carried by a socket.
struct Served {
    conn: Connection,
    deadline: Deadline,
    /// Refused, timed out or evicted: answered (if at all) and closing; not counted as open.
    leaving: bool,
    /// When the server closed the socket.
    closed_at: Option<u64>,
    /// Bytes handed to the socket.
    handed: u64,
    /// Bytes of those the client had acknowledged at the last visit.
    acked: u64,
}

/// One socket and the connection it carries, if any.
struct Slot {
    handle: SocketHandle,
    served: Option<Served>,
}

/// Numbers of the server's sockets, for `/metrics`.
#[derive(Clone, Copy, Debug, Default)]
pub struct SocketCounts {
    /// Connections being served (not counting those refused or closing on a timeout).
    pub open: usize,
    /// Sockets listening for new connections.
    pub listening: usize,
    /// Sockets in all.
    pub sockets: usize,
    /// Sockets the server has visited since it started.
    pub visits: u64,
}

/// How often the server visits every socket, marked or not, for the deadlines and closes.
const SWEEP_MS: u64 = 100;

/// What a visit found.
enum Visit {
    /// Nothing to do until a segment arrives or a deadline passes.
    Quiet,
    /// Work left: bytes to send, an invocation running, a state change.
    Busy,
    /// The socket is closed and may be reused.
    Closed,
}

/// What became of a visited socket.
enum Settled {
    /// Still in its set; whether it left work.
    Kept(bool),
    /// Closed, taken out of its set and put with [`Server::closed`].
    Closed,
}

/// The server's sockets and the gateway they feed.
pub struct Server<S> {
    /// Per socket set (indexed as in [`Sockets`]), its sockets.
    slots: Vec<Vec<Slot>>,
    config: Config,
    counts: SocketCounts,
    next_sweep_ms: u64,
    /// Sockets in `slots`, all sets together.
    held: usize,
    /// Scratch list of the sets a pass visits whole.
    marked: Vec<usize>,
    /// Scratch list of the sockets (set, peer) a pass visits.
    marked_peers: Vec<(usize, IpEndpoint)>,
    /// The set and peer of each connection whose invocation runs, by invocation.
    running: FnvHashMap<InvocationId, (usize, IpEndpoint)>,
    /// Sockets of connections that ended this pass, to listen again or be freed.
    closed: Vec<smoltcp::socket::Socket<'static>>,
    /// Scratch list of finished invocations.
    finished: Vec<InvocationId>,
    /// Whether the runtime lists finished invocations ([`Gateway::finished`]): then a
    /// connection waiting for one is visited when it finishes, not on every pass.
    notified: bool,
    /// The gateway answering requests.
    pub gateway: Gateway<S>,
}

/// Request/response traffic: send each response at once (no Nagle) and acknowledge at once
/// (no delayed ACK), or a keep-alive client waits for timers between requests.
fn configure(s: &mut tcp::Socket<'_>) {
    s.set_nagle_enabled(false);
    s.set_ack_delay(None);
    // No smoltcp timeout: it would also end a connection that is merely idle; the server's
    // own deadlines decide.
}

impl<S: FunctionService> Server<S> {
    /// A server on `config.port` with an empty backlog (the first [`Server::service`] fills it).
    pub fn new(config: Config, gateway: Gateway<S>) -> Self {
        Server {
            slots: Vec::new(),
            config,
            counts: SocketCounts::default(),
            held: 0,
            marked: Vec::new(),
            marked_peers: Vec::new(),
            running: FnvHashMap::default(),
            finished: Vec::new(),
            closed: Vec::new(),
            notified: false,
            next_sweep_ms: 0,
            gateway,
        }
    }

    /// The socket numbers after the last [`Server::service`].
    pub fn counts(&self) -> SocketCounts {
        self.counts
    }

    /// Puts `socket` (open, or just closed) into the listening set, listening on the port;
    /// `false` (after logging) if smoltcp refuses.
    fn listen(&mut self, sockets: &mut Sockets, socket: smoltcp::socket::Socket<'static>) -> bool {
        let handle = sockets.set(LISTEN).add(socket);
        let sock = sockets.set(LISTEN).get_mut::<tcp::Socket>(handle);
        configure(sock);
        if let Err(e) = sock.listen(self.config.port) {
            log::error!("net: listen on port {}: {e:?}", self.config.port);
            sockets.set(LISTEN).remove(handle);
            return false;
        }
        self.slots[LISTEN].push(Slot {
            handle,
            served: None,
        });
        self.held += 1;
        sockets.mark(LISTEN);
        true
    }

    /// Moves the listening sockets that took a connection to the set of their peer; returns
    /// whether there were any.
    fn settle_listeners(&mut self, sockets: &mut Sockets) -> bool {
        let mut moved = false;
        let mut i = 0;
        while i < self.slots[LISTEN].len() {
            let handle = self.slots[LISTEN][i].handle;
            let sock = sockets.set(LISTEN).get_mut::<tcp::Socket>(handle);
            let peer = sock.remote_endpoint();
            if sock.state() == State::Listen {
                i += 1;
                continue;
            }
            let set = match peer.map(|p| p.addr) {
                Some(IpAddress::Ipv4(ip)) => {
                    Sockets::shard(shard_of(ip.octets(), peer.map_or(0, |p| p.port)))
                }
                // Closed before it was moved (a reset during the handshake): it listens again.
                _ => {
                    sock.abort();
                    configure(sock);
                    if sock.listen(self.config.port).is_err() {
                        self.slots[LISTEN].swap_remove(i);
                        sockets.set(LISTEN).remove(handle);
                        self.held -= 1;
                    }
                    continue;
                }
            };
            self.slots[LISTEN].swap_remove(i);
            let socket = sockets.set(LISTEN).remove(handle);
            let handle = sockets.set(set).add(socket);
            self.slots[set].push(Slot {
                handle,
                served: None,
            });
            sockets.mark(set);
            moved = true;
        }
        moved
    }

    /// Moves bytes between the sockets and their connections, enforces the deadlines and
    /// refills the backlog; `now_ms` is the time, `heap_free` the free heap bytes. Visits the
    /// sockets that are marked (those of connections whose invocation finished among them), the
    /// sets marked whole, and every socket each [`SWEEP_MS`]. Returns whether anything moved or
    /// an invocation runs.
    pub fn service(
        &mut self,
        sockets: &mut Sockets,
        now_ms: u64,
        heap_free: usize,
        kernel: &impl Fn() -> Vec<Sample>,
    ) -> bool {
        if self.slots.is_empty() {
            self.slots = (0..sockets.len()).map(|_| Vec::new()).collect();
        }
        let sweep = now_ms >= self.next_sweep_ms;
        if sweep {
            self.next_sweep_ms = now_ms + SWEEP_MS;
        }
        // The sets of connections whose invocation finished.
        self.notified = self.gateway.finished(&mut self.finished);
        for id in self.finished.drain(..) {
            if let Some((set, peer)) = self.running.remove(&id) {
                sockets.mark_peer(set, peer);
            }
        }
        if sweep {
            // Every connection is visited: those still waiting are noted again (an entry of a
            // connection that went away lasts until here).
            self.running.clear();
        }
        let mut marked = core::mem::take(&mut self.marked);
        let mut marked_peers = core::mem::take(&mut self.marked_peers);
        sockets.drain_serve(sweep, &mut marked, &mut marked_peers);
        let mut busy = marked.contains(&LISTEN) && self.settle_listeners(sockets);
        let mut open = self.counts.open;
        for &set in marked.iter().filter(|&&set| set != LISTEN) {
            let mut i = 0;
            while i < self.slots[set].len() {
                let visit = self.visit(sockets, set, i, now_ms, &mut open, kernel);
                match self.settle(sockets, set, i, visit) {
                    Settled::Kept(work) => {
                        busy |= work;
                        i += 1;
                    }
                    Settled::Closed => busy = true,
                }
            }
        }
        for &(set, peer) in &marked_peers {
            let Some(i) = self.slot_of(sockets, set, peer) else {
                continue; // Gone since it was marked.
            };
            let visit = self.visit(sockets, set, i, now_ms, &mut open, kernel);
            match self.settle(sockets, set, i, visit) {
                Settled::Kept(work) => busy |= work,
                Settled::Closed => busy = true,
            }
        }
        // Sockets whose connection ended listen again while the backlog is short; the others
        // are freed.
        for socket in core::mem::take(&mut self.closed) {
            if !self
                .config
                .admission
                .retire_listener(self.slots[LISTEN].len())
            {
                self.listen(sockets, socket);
            }
        }
        // Refill the backlog, as far as the cap and the heap allow.
        let listening = self.slots[LISTEN].len();
        let total = self.held;
        let add = self.config.admission.listeners_to_add(
            open,
            listening,
            total.saturating_sub(open + listening),
        );
        if heap_free > HEAP_RESERVE + add * CONNECTION_BYTES {
            for _ in 0..add {
                let rx = tcp::SocketBuffer::new(alloc::vec![0; RX_BUFFER]);
                let tx = tcp::SocketBuffer::new(alloc::vec![0; TX_BUFFER]);
                if !self.listen(sockets, tcp::Socket::new(rx, tx).upcast()) {
                    break;
                }
            }
        }
        self.counts = SocketCounts {
            open,
            listening: self.slots[LISTEN].len(),
            sockets: self.held,
            visits: self.counts.visits,
        };
        self.marked = marked;
        self.marked_peers = marked_peers;
        // The network loop keeps polling (it does not halt) while invocations run.
        busy || !self.running.is_empty()
    }

    /// The index in set `set` of the socket connected to `peer`.
    fn slot_of(&self, sockets: &mut Sockets, set: usize, peer: IpEndpoint) -> Option<usize> {
        let sockets = sockets.set(set);
        self.slots[set].iter().position(|slot| {
            sockets.get::<tcp::Socket>(slot.handle).remote_endpoint() == Some(peer)
        })
    }

    /// After a visit of socket `i` of set `set` that found `visit`: marks the socket for the
    /// next pass if it left work, or moves it from the set to [`Server::closed`] if it closed
    /// (then socket `i` is another one).
    fn settle(&mut self, sockets: &mut Sockets, set: usize, i: usize, visit: Visit) -> Settled {
        match visit {
            Visit::Quiet => Settled::Kept(false),
            Visit::Busy => {
                let handle = self.slots[set][i].handle;
                sockets.mark_transmit(set);
                match sockets
                    .set(set)
                    .get::<tcp::Socket>(handle)
                    .remote_endpoint()
                {
                    Some(peer) => sockets.mark_peer(set, peer),
                    None => sockets.mark_serve(set),
                }
                Settled::Kept(true)
            }
            Visit::Closed => {
                let slot = self.slots[set].swap_remove(i);
                self.held -= 1;
                let socket = sockets.set(set).remove(slot.handle);
                self.closed.push(socket);
                Settled::Closed
            }
        }
    }

    /// Serves the socket `i` of set `set`: admits a new connection, moves its bytes, enforces
    /// its deadline and closes it when it is done.
    fn visit(
        &mut self,
        sockets: &mut Sockets,
        set: usize,
        i: usize,
        now_ms: u64,
        open: &mut usize,
        kernel: &impl Fn() -> Vec<Sample>,
    ) -> Visit {
        self.counts.visits += 1;
        let handle = self.slots[set][i].handle;
        let sock = sockets.set(set).get_mut::<tcp::Socket>(handle);
        // A connection the server closed first: skip TIME-WAIT (the peer has closed too) so
        // the socket can take the next connection at once.
        if sock.state() == State::TimeWait {
            sock.abort();
        }
        let state = sock.state();
        if state == State::Closed {
            // A connection reset or closed under a running invocation: nobody waits for it.
            if let Some(mut s) = self.slots[set][i].served.take() {
                s.conn.abandon(&mut self.gateway);
                if !s.leaving {
                    *open = open.saturating_sub(1);
                }
            }
            return Visit::Closed;
        }
        let mut busy = false;
        if self.slots[set][i].served.is_none() {
            match state {
                State::SynReceived => return Visit::Quiet,
                // A reset during the handshake sends a socket back to listening (smoltcp): it
                // returns to the listening set.
                State::Listen => {
                    sock.abort();
                    return Visit::Closed;
                }
                _ => {}
            }
            // A new connection: served, in the place of another, or refused.
            self.gateway.count_connection();
            let mut s = Served {
                conn: Connection::new(self.config.limits),
                deadline: Deadline::new(now_ms),
                leaving: false,
                closed_at: None,
                handed: 0,
                acked: 0,
            };
            if self.config.admission.admits(*open) {
                *open += 1;
            } else if !self.evict_one(sockets, now_ms) {
                s.conn.refuse(&mut self.gateway);
                s.leaving = true;
            }
            self.slots[set][i].served = Some(s);
            busy = true;
        }
        let sock = sockets.set(set).get_mut::<tcp::Socket>(handle);
        let Some(s) = self.slots[set][i].served.as_mut() else {
            return Visit::Quiet;
        };
        busy |= serve(sock, s, &mut self.gateway, kernel, self.notified);
        if let (Some(id), Some(peer)) = (s.conn.waiting_for(), sock.remote_endpoint()) {
            self.running.insert(id, (set, peer));
        }
        // The deadlines: a client that takes too long in its phase is answered 408 (or,
        // idle, just closed); one that stopped reading (even a refused or timed-out one that
        // never reads its answer) is cut off.
        let unacknowledged = sock.send_queue();
        s.deadline
            .observe(s.conn.phase_after(unacknowledged), now_ms);
        let acked = s.handed.saturating_sub(unacknowledged as u64);
        if acked > s.acked {
            s.acked = acked;
            s.deadline.progress(now_ms);
        }
        let expired = s.deadline.expired(&self.config.timeouts, now_ms);
        if let Some(phase) = expired.filter(|&p| !s.leaving || p == Phase::Send) {
            s.conn.time_out(phase, &mut self.gateway);
            if !s.leaving {
                *open = open.saturating_sub(1);
            }
            s.leaving = true;
            if phase == Phase::Send {
                sock.abort();
                return Visit::Busy;
            }
            busy |= serve(sock, s, &mut self.gateway, kernel, self.notified);
        }
        if s.conn.finished() && sock.may_send() {
            sock.close();
            busy = true;
        }
        if !sock.may_send() && s.closed_at.is_none() {
            s.closed_at = Some(now_ms);
        }
        if s.closed_at
            .is_some_and(|t| now_ms.saturating_sub(t) >= LINGER_MS)
        {
            sock.abort();
            busy = true;
        }
        if busy { Visit::Busy } else { Visit::Quiet }
    }

    /// Closes the idle or slow connection that a new one may replace (see
    /// [`admission::victim`]); returns whether there was one.
    fn evict_one(&mut self, sockets: &mut Sockets, now_ms: u64) -> bool {
        fn serving(slot: &Slot) -> Option<&Served> {
            slot.served.as_ref().filter(|s| !s.leaving)
        }
        let candidates = self
            .slots
            .iter()
            .flatten()
            .filter_map(serving)
            .map(|s| Candidate {
                phase: s.conn.phase(),
                age_ms: s.deadline.age_ms(now_ms),
            });
        let Some(n) = admission::victim(candidates) else {
            return false;
        };
        let Some((set, slot)) = self
            .slots
            .iter_mut()
            .enumerate()
            .flat_map(|(set, slots)| slots.iter_mut().map(move |slot| (set, slot)))
            .filter(|(_, slot)| serving(slot).is_some())
            .nth(n)
        else {
            return false;
        };
        let Some(s) = slot.served.as_mut() else {
            return false;
        };
        s.conn.evict(&mut self.gateway);
        s.leaving = true;
        s.closed_at = Some(now_ms);
        sockets.set(set).get_mut::<tcp::Socket>(slot.handle).close();
        sockets.mark(set);
        true
    }
}

/// Moves one connection's bytes: a finished invocation's answer, then the requests received
/// behind it, then the output; returns whether anything moved (or, unless the runtime is
/// `notified` of finished invocations, an invocation runs).
fn serve<S: FunctionService>(
    sock: &mut tcp::Socket<'_>,
    s: &mut Served,
    gateway: &mut Gateway<S>,
    kernel: &impl Fn() -> Vec<Sample>,
    notified: bool,
) -> bool {
    let conn = &mut s.conn;
    let mut busy = conn.poll(gateway, kernel);
    let (mut received, mut sent) = (0, 0);
    // While an invocation runs, or answers pile up unsent, later requests wait in the socket
    // (TCP flow control holds the peer back).
    while sock.can_recv() && conn.wants_input() {
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
                s.handed += n as u64;
            }
        }
    }
    // The peer closed its side and nothing is left to answer: close ours.
    if !sock.may_recv() && !conn.waiting() && conn.output().is_empty() && sock.may_send() {
        sock.close();
        busy = true;
    }
    if received + sent > 0 {
        gateway.count_bytes(received, sent);
        busy = true;
    }
    // While an invocation runs, the connection is visited again when the runtime lists it
    // finished, or, with a runtime that cannot tell, on every pass.
    busy || (conn.waiting() && !notified)
}
