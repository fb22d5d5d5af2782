//! The programs' TCP sockets: what `socket`, `bind`, `listen`, `accept`, `connect`, `read`,
//! `write`, `shutdown`, `close` and `poll` do, over one smoltcp socket set that the network loop
//! feeds (every TCP segment not for the HTTP gateway's port comes here).
//!
//! A listening socket keeps a few smoltcp sockets listening on its port ([`SPARES`]) and a
//! queue of connections that finished their handshake; [`SocketTable::refresh`] moves
//! connections from the spares to the queue and opens new spares, so `listen` has a real
//! accept queue of `backlog` connections (ArceOS's listen table does the same with a socket per
//! SYN). The network loop refreshes after each connection request it hands to the set, so a
//! burst of SYNs finds listening sockets. A closed connection lingers, sending what it still
//! holds and its FIN, until the peer acknowledges or [`LINGER`] passes.
//!
//! Everything here is plain logic over smoltcp, host-tested over smoltcp's loopback device.

use alloc::collections::VecDeque;
use alloc::vec;
use alloc::vec::Vec;
use smoltcp::iface::{Context, SocketHandle, SocketSet};
use smoltcp::socket::tcp::{self, State};
use smoltcp::time::Duration;
use smoltcp::wire::{IpAddress, IpEndpoint, Ipv4Address};

/// Bytes a connection buffers as received and not yet read.
pub const RX_BUFFER: usize = 64 * 1024;
/// Bytes a connection buffers as written and not yet acknowledged.
pub const TX_BUFFER: usize = 64 * 1024;
/// smoltcp sockets listening on a listening socket's port at once (more are opened as
/// connections arrive, up to the backlog).
pub const SPARES: usize = 4;
/// Largest backlog `listen` accepts (larger ones are clipped, as Linux's `somaxconn` does).
pub const MAX_BACKLOG: usize = 128;
/// Most smoltcp sockets (connections, lingering ones and listening spares) at once.
pub const MAX_SOCKETS: usize = 1024;
/// How long a closed connection may linger before it is dropped.
pub const LINGER: Duration = Duration::from_secs(10);
/// How long a connection stays quiet before it sends a keep-alive (which also recovers from a
/// lost window update after the peer's receive window was full).
pub const KEEP_ALIVE: Duration = Duration::from_secs(1);
/// The first local port `connect` picks (IANA's dynamic range).
pub const EPHEMERAL_FIRST: u16 = 49152;

/// A socket's identifier in the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SockId(u32);

impl SockId {
    /// Its number.
    pub fn raw(self) -> u32 {
        self.0
    }
}

/// Why a socket call failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SockError {
    /// The call would wait.
    WouldBlock,
    /// The port is bound by another socket, or reserved.
    AddressInUse,
    /// The peer refused the connection.
    ConnectionRefused,
    /// The peer reset the connection, or it timed out.
    ConnectionReset,
    /// The socket is not in the state the call needs.
    NotConnected,
    /// An argument is out of range (port 0, backlog 0, a broadcast address).
    InvalidArgs,
    /// The table has no room for another socket.
    Limit,
    /// No socket has this identifier.
    BadSocket,
    /// The network is not up (no card, or not the mode that serves it).
    NoNetwork,
}

/// What a socket is ready for (`poll`'s events).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Readiness {
    /// A read, or an accept, would not wait.
    pub readable: bool,
    /// A write would not wait.
    pub writable: bool,
    /// The peer closed its side, or the connection ended.
    pub hangup: bool,
    /// The connection failed (refused or reset).
    pub error: bool,
}

/// A connection (accepted, or made by `connect`).
struct Stream {
    handle: SocketHandle,
    /// The peer `connect` named, until the network loop starts the handshake.
    pending: Option<IpEndpoint>,
    local_port: u16,
    /// It reached `Established` once.
    connected: bool,
    /// The peer's FIN arrived.
    fin: bool,
    /// How it failed, once it did.
    failed: Option<SockError>,
}

enum Kind {
    /// Made by `socket`, perhaps bound.
    Fresh {
        port: Option<u16>,
    },
    /// Listening on `port`.
    Listening {
        port: u16,
        backlog: usize,
        spares: Vec<SocketHandle>,
        queue: VecDeque<SocketHandle>,
    },
    Stream(Stream),
}

struct Sock {
    kind: Kind,
    nonblocking: bool,
}

/// Counters for `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Connections accepted by listening sockets (queued for `accept`).
    pub accepted: u64,
    /// Connections refused because a listening socket's queue was full.
    pub dropped: u64,
    /// Connections made by `connect` that were established.
    pub connected: u64,
    /// Connections that ended in a reset or a time-out.
    pub reset: u64,
}

/// Every program socket, and the smoltcp set that holds their connections.
pub struct SocketTable {
    set: SocketSet<'static>,
    socks: Vec<Option<Sock>>,
    /// Closed connections sending what they hold, until they end or [`LINGER`] passes.
    lingering: Vec<SocketHandle>,
    /// smoltcp sockets in [`Self::set`].
    live: usize,
    next_ephemeral: u16,
    /// The port no program may bind (the HTTP gateway's).
    reserved: u16,
    /// Whether a `connect` waits for the network loop's [`SocketTable::start_connects`].
    connects_waiting: bool,
    /// Bumped whenever a socket may have become ready for something.
    generation: u64,
    counters: Counters,
}

fn new_tcp() -> tcp::Socket<'static> {
    let rx = tcp::SocketBuffer::new(vec![0; RX_BUFFER]);
    let tx = tcp::SocketBuffer::new(vec![0; TX_BUFFER]);
    let mut s = tcp::Socket::new(rx, tx);
    s.set_nagle_enabled(false);
    s.set_ack_delay(None);
    s.set_keep_alive(Some(KEEP_ALIVE));
    s
}

/// Whether a connection in `state` finished its handshake (perhaps ending since).
fn established(state: State) -> bool {
    !matches!(
        state,
        State::Listen | State::SynReceived | State::SynSent | State::Closed
    )
}

impl SocketTable {
    /// An empty table; `reserved` is the port programs may not bind.
    pub fn new(reserved: u16) -> Self {
        SocketTable {
            set: SocketSet::new(Vec::new()),
            socks: Vec::new(),
            lingering: Vec::new(),
            live: 0,
            next_ephemeral: EPHEMERAL_FIRST,
            reserved,
            connects_waiting: false,
            generation: 0,
            counters: Counters::default(),
        }
    }

    /// The smoltcp set the network loop hands segments to and sends from.
    pub fn set(&mut self) -> &mut SocketSet<'static> {
        &mut self.set
    }

    /// A number that changes whenever a socket may have become ready.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Notes that sockets may have become ready (a segment arrived, or was sent).
    pub fn touch(&mut self) {
        self.generation = self.generation.wrapping_add(1);
    }

    /// The counters since the table was made.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Program sockets open, and smoltcp sockets (connections, lingering ones, spares).
    pub fn sizes(&self) -> (usize, usize) {
        (self.socks.iter().flatten().count(), self.live)
    }

    fn add(&mut self) -> Result<SocketHandle, SockError> {
        if self.live >= MAX_SOCKETS {
            return Err(SockError::Limit);
        }
        self.live += 1;
        Ok(self.set.add(new_tcp()))
    }

    fn remove(&mut self, h: SocketHandle) {
        self.set.remove(h);
        self.live -= 1;
    }

    fn tcp(&mut self, h: SocketHandle) -> &mut tcp::Socket<'static> {
        self.set.get_mut::<tcp::Socket>(h)
    }

    fn sock(&mut self, id: SockId) -> Result<&mut Sock, SockError> {
        self.socks
            .get_mut(id.0 as usize)
            .and_then(Option::as_mut)
            .ok_or(SockError::BadSocket)
    }

    fn insert(&mut self, sock: Sock) -> SockId {
        match self.socks.iter().position(Option::is_none) {
            Some(i) => {
                self.socks[i] = Some(sock);
                SockId(i as u32)
            }
            None => {
                self.socks.push(Some(sock));
                SockId(self.socks.len() as u32 - 1)
            }
        }
    }

    /// `socket()`: a new socket, neither bound nor connected.
    pub fn create(&mut self) -> Result<SockId, SockError> {
        if self.socks.iter().flatten().count() >= MAX_SOCKETS {
            return Err(SockError::Limit);
        }
        Ok(self.insert(Sock {
            kind: Kind::Fresh { port: None },
            nonblocking: false,
        }))
    }

    /// Whether a socket of the table holds local port `port`.
    fn port_taken(&self, port: u16) -> bool {
        port == self.reserved
            || self.socks.iter().flatten().any(|s| match &s.kind {
                Kind::Fresh { port: p } => *p == Some(port),
                Kind::Listening { port: p, .. } => *p == port,
                Kind::Stream(st) => st.local_port == port && st.pending.is_some(),
            })
            || self.set.iter().any(|(_, s)| {
                let smoltcp::socket::Socket::Tcp(t) = s;
                t.local_endpoint().is_some_and(|e| e.port == port)
                    || (t.state() == State::Listen && t.listen_endpoint().port == port)
            })
    }

    /// `bind(port)`.
    pub fn bind(&mut self, id: SockId, port: u16) -> Result<(), SockError> {
        if port == 0 {
            return Err(SockError::InvalidArgs);
        }
        if !matches!(self.sock(id)?.kind, Kind::Fresh { port: None }) {
            return Err(SockError::InvalidArgs);
        }
        if self.port_taken(port) {
            return Err(SockError::AddressInUse);
        }
        self.sock(id)?.kind = Kind::Fresh { port: Some(port) };
        Ok(())
    }

    /// `listen(backlog)` on a bound socket (again on a listening one changes its backlog).
    pub fn listen(&mut self, id: SockId, backlog: usize) -> Result<(), SockError> {
        let backlog = backlog.clamp(1, MAX_BACKLOG);
        let port = match &mut self.sock(id)?.kind {
            Kind::Fresh { port: Some(p) } => *p,
            Kind::Listening { backlog: b, .. } => {
                *b = backlog;
                return Ok(());
            }
            _ => return Err(SockError::NotConnected),
        };
        self.sock(id)?.kind = Kind::Listening {
            port,
            backlog,
            spares: Vec::new(),
            queue: VecDeque::new(),
        };
        self.replenish(id);
        if let Kind::Listening { spares, .. } = &self.sock(id)?.kind
            && spares.is_empty()
        {
            self.sock(id)?.kind = Kind::Fresh { port: Some(port) };
            return Err(SockError::Limit);
        }
        Ok(())
    }

    /// Opens spares on listening socket `id` until it has [`SPARES`] or spares, queue and
    /// handshakes in progress reach the backlog.
    fn replenish(&mut self, id: SockId) {
        loop {
            let Ok(Sock {
                kind:
                    Kind::Listening {
                        port,
                        backlog,
                        spares,
                        queue,
                    },
                ..
            }) = self.sock(id)
            else {
                return;
            };
            let (port, backlog, queued) = (*port, *backlog, queue.len());
            let handles = spares.clone();
            let listening = handles
                .iter()
                .filter(|&&h| self.tcp(h).state() == State::Listen)
                .count();
            if listening >= SPARES || handles.len() + queued >= backlog {
                return;
            }
            let Ok(h) = self.add() else {
                return;
            };
            if self.tcp(h).listen(port).is_err() {
                self.remove(h);
                return;
            }
            if let Ok(Sock {
                kind: Kind::Listening { spares, .. },
                ..
            }) = self.sock(id)
            {
                spares.push(h);
            }
        }
    }

    /// Moves established connections from every listening socket's spares to its queue (or
    /// resets them when the queue is full), opens new spares,
    /// notes what streams learnt (a FIN, a failure) and, when `reap`, drops the lingering
    /// connections that ended (only after the stack sent what they had to send, such as a
    /// reset). Returns whether anything changed.
    pub fn refresh(&mut self, reap: bool) -> bool {
        let mut changed = false;
        for i in 0..self.socks.len() {
            let id = SockId(i as u32);
            let Some(Sock { kind, .. }) = self.socks[i].as_mut() else {
                continue;
            };
            match kind {
                Kind::Listening { .. } => changed |= self.refresh_listening(id),
                Kind::Stream(st) => {
                    if st.pending.is_some() || st.failed.is_some() {
                        continue;
                    }
                    let state = self.set.get::<tcp::Socket>(st.handle).state();
                    if established(state) && !st.connected {
                        st.connected = true;
                        self.counters.connected += 1;
                        changed = true;
                    }
                    if matches!(
                        state,
                        State::CloseWait | State::LastAck | State::Closing | State::TimeWait
                    ) && !st.fin
                    {
                        st.fin = true;
                        changed = true;
                    }
                    if state == State::Closed && !st.fin {
                        st.failed = Some(if st.connected {
                            SockError::ConnectionReset
                        } else {
                            SockError::ConnectionRefused
                        });
                        self.counters.reset += 1;
                        changed = true;
                    }
                }
                Kind::Fresh { .. } => {}
            }
        }
        let mut i = 0;
        while reap && i < self.lingering.len() {
            let h = self.lingering[i];
            if matches!(self.tcp(h).state(), State::Closed | State::TimeWait) {
                self.lingering.swap_remove(i);
                self.remove(h);
            } else {
                i += 1;
            }
        }
        if changed {
            self.touch();
        }
        changed
    }

    /// [`Self::refresh`] of the listening socket `id`: its established spares go to its queue
    /// (or are reset when it is full), failed handshakes listen again, and new spares open.
    /// Returns whether a connection arrived.
    fn refresh_listening(&mut self, id: SockId) -> bool {
        let Ok(Sock {
            kind: Kind::Listening { spares, port, .. },
            ..
        }) = self.sock(id)
        else {
            return false;
        };
        let port = *port;
        let handles = core::mem::take(spares);
        let mut keep = Vec::with_capacity(handles.len());
        let mut ready = Vec::new();
        for h in handles {
            let t = self.tcp(h);
            match t.state() {
                State::Listen | State::SynReceived => keep.push(h),
                s if established(s) => ready.push(h),
                // A handshake that failed: listen again.
                _ => {
                    t.abort();
                    if t.listen(port).is_ok() {
                        keep.push(h);
                    } else {
                        self.remove(h);
                    }
                }
            }
        }
        let Ok(Sock {
            kind:
                Kind::Listening {
                    spares,
                    queue,
                    backlog,
                    ..
                },
            ..
        }) = self.sock(id)
        else {
            return false;
        };
        *spares = keep;
        let backlog = *backlog;
        let mut dropped = Vec::new();
        for &h in &ready {
            if queue.len() < backlog {
                queue.push_back(h);
            } else {
                dropped.push(h);
            }
        }
        self.counters.accepted += (ready.len() - dropped.len()) as u64;
        self.counters.dropped += dropped.len() as u64;
        for h in dropped {
            self.tcp(h).abort();
            self.lingering.push(h);
        }
        self.replenish(id);
        !ready.is_empty()
    }

    /// `accept()`: the next connection of listening socket `id`, and its peer.
    pub fn accept(&mut self, id: SockId) -> Result<(SockId, [u8; 4], u16), SockError> {
        let h = match &mut self.sock(id)?.kind {
            Kind::Listening { queue, .. } => queue.pop_front().ok_or(SockError::WouldBlock)?,
            _ => return Err(SockError::InvalidArgs),
        };
        let t = self.tcp(h);
        let (ip, port) = match t.remote_endpoint() {
            Some(IpEndpoint {
                addr: IpAddress::Ipv4(a),
                port,
            }) => (a.octets(), port),
            _ => ([0; 4], 0),
        };
        let local_port = t.local_endpoint().map_or(0, |e| e.port);
        let fin = !t.may_recv();
        self.replenish(id);
        let conn = self.insert(Sock {
            kind: Kind::Stream(Stream {
                handle: h,
                pending: None,
                local_port,
                connected: true,
                fin,
                failed: None,
            }),
            nonblocking: false,
        });
        Ok((conn, ip, port))
    }

    /// `connect(ip, port)`: starts connecting socket `id` (the network loop sends the SYN, see
    /// [`Self::start_connects`]); [`Self::connect_result`] says how it went.
    pub fn connect(&mut self, id: SockId, ip: [u8; 4], port: u16) -> Result<(), SockError> {
        let addr = Ipv4Address::from(ip);
        if port == 0 || addr.is_unspecified() || addr.is_broadcast() || addr.is_multicast() {
            return Err(SockError::InvalidArgs);
        }
        let bound = match self.sock(id)?.kind {
            Kind::Fresh { port } => port,
            Kind::Stream(_) => return Err(SockError::InvalidArgs),
            Kind::Listening { .. } => return Err(SockError::InvalidArgs),
        };
        let local_port = match bound {
            Some(p) => p,
            None => self.ephemeral().ok_or(SockError::AddressInUse)?,
        };
        let handle = self.add()?;
        self.sock(id)?.kind = Kind::Stream(Stream {
            handle,
            pending: Some(IpEndpoint::new(IpAddress::Ipv4(addr), port)),
            local_port,
            connected: false,
            fin: false,
            failed: None,
        });
        self.connects_waiting = true;
        Ok(())
    }

    /// A free local port from the dynamic range.
    fn ephemeral(&mut self) -> Option<u16> {
        for _ in 0..=(u16::MAX - EPHEMERAL_FIRST) {
            let p = self.next_ephemeral;
            self.next_ephemeral = if p == u16::MAX {
                EPHEMERAL_FIRST
            } else {
                p + 1
            };
            if !self.port_taken(p) {
                return Some(p);
            }
        }
        None
    }

    /// Whether a `connect` waits for [`Self::start_connects`].
    pub fn connects_waiting(&self) -> bool {
        self.connects_waiting
    }

    /// Sends the SYN of every connection `connect` started (`cx` is the interface's context,
    /// which picks the source address and initial sequence number).
    pub fn start_connects(&mut self, cx: &mut Context) {
        if !core::mem::take(&mut self.connects_waiting) {
            return;
        }
        let mut failed = false;
        for slot in self.socks.iter_mut() {
            let Some(Sock {
                kind: Kind::Stream(st),
                ..
            }) = slot
            else {
                continue;
            };
            let Some(peer) = st.pending.take() else {
                continue;
            };
            let t = self.set.get_mut::<tcp::Socket>(st.handle);
            if t.connect(cx, peer, st.local_port).is_err() {
                st.failed = Some(SockError::ConnectionRefused);
                failed = true;
            }
        }
        if failed {
            self.touch();
        }
    }

    /// How `connect` on socket `id` went: `Ok(true)` connected, `Ok(false)` still under way.
    pub fn connect_result(&mut self, id: SockId) -> Result<bool, SockError> {
        match &self.sock(id)?.kind {
            Kind::Stream(st) => match st.failed {
                Some(e) => Err(e),
                None => Ok(st.connected),
            },
            _ => Err(SockError::NotConnected),
        }
    }

    fn stream(&mut self, id: SockId) -> Result<&mut Stream, SockError> {
        match &mut self.sock(id)?.kind {
            Kind::Stream(st) => Ok(st),
            _ => Err(SockError::NotConnected),
        }
    }

    /// `read`: bytes received into `buf`; 0 once the peer closed its side and everything was
    /// read.
    pub fn recv(&mut self, id: SockId, buf: &mut [u8]) -> Result<usize, SockError> {
        let st = self.stream(id)?;
        let (h, failed, pending) = (st.handle, st.failed, st.pending.is_some());
        if pending {
            return Err(SockError::WouldBlock);
        }
        let t = self.tcp(h);
        if t.can_recv() {
            let n = t.recv_slice(buf).map_err(|_| SockError::NotConnected)?;
            if n > 0 {
                // Room in the window: the stack may want to tell the peer.
                self.touch();
            }
            return Ok(n);
        }
        if let Some(e) = failed {
            return Err(e);
        }
        if buf.is_empty() {
            return Ok(0);
        }
        match t.state() {
            State::SynSent | State::SynReceived | State::Listen => Err(SockError::WouldBlock),
            State::Closed => Ok(0),
            _ if t.may_recv() => Err(SockError::WouldBlock),
            _ => Ok(0),
        }
    }

    /// `read` of up to `max` bytes into a buffer of the size received, not of `max`: a server
    /// that reads into a 16 KiB buffer costs the kernel only the bytes that arrived.
    pub fn recv_up_to(&mut self, id: SockId, max: usize) -> Result<Vec<u8>, SockError> {
        let h = self.stream(id)?.handle;
        let queued = self.tcp(h).recv_queue();
        // One byte at least when nothing is queued: an empty buffer would read as the end of
        // the stream, where the caller must learn whether to wait.
        let mut buf = alloc::vec![0u8; max.min(queued.max(1))];
        let n = self.recv(id, &mut buf)?;
        buf.truncate(n);
        Ok(buf)
    }

    /// `write`: bytes of `data` queued for sending.
    pub fn send(&mut self, id: SockId, data: &[u8]) -> Result<usize, SockError> {
        let st = self.stream(id)?;
        let (h, failed, pending) = (st.handle, st.failed, st.pending.is_some());
        if let Some(e) = failed {
            return Err(e);
        }
        if pending {
            return Err(SockError::WouldBlock);
        }
        let t = self.tcp(h);
        match t.state() {
            State::SynSent | State::SynReceived => return Err(SockError::WouldBlock),
            _ if !t.may_send() => return Err(SockError::ConnectionReset),
            _ => {}
        }
        if data.is_empty() {
            return Ok(0);
        }
        match t.send_slice(data) {
            Ok(0) => Err(SockError::WouldBlock),
            Ok(n) => Ok(n),
            Err(_) => Err(SockError::ConnectionReset),
        }
    }

    /// `shutdown(how)`: `write` true ends the sending side (a FIN after what is queued).
    pub fn shutdown(&mut self, id: SockId, write: bool) -> Result<(), SockError> {
        let h = self.stream(id)?.handle;
        if write {
            self.tcp(h).close();
        }
        Ok(())
    }

    /// Sets whether calls on socket `id` return [`SockError::WouldBlock`] instead of waiting.
    pub fn set_nonblocking(&mut self, id: SockId, on: bool) -> Result<(), SockError> {
        self.sock(id)?.nonblocking = on;
        Ok(())
    }

    /// Whether socket `id` is non-blocking.
    pub fn nonblocking(&mut self, id: SockId) -> Result<bool, SockError> {
        Ok(self.sock(id)?.nonblocking)
    }

    /// What socket `id` is ready for.
    pub fn readiness(&mut self, id: SockId) -> Result<Readiness, SockError> {
        let sock = self
            .socks
            .get(id.0 as usize)
            .and_then(Option::as_ref)
            .ok_or(SockError::BadSocket)?;
        let r = match &sock.kind {
            Kind::Fresh { .. } => Readiness {
                writable: true,
                hangup: true,
                ..Readiness::default()
            },
            Kind::Listening { queue, .. } => Readiness {
                readable: !queue.is_empty(),
                ..Readiness::default()
            },
            Kind::Stream(st) => {
                if st.pending.is_some() {
                    return Ok(Readiness::default());
                }
                let (failed, fin) = (st.failed, st.fin);
                let t = self.set.get::<tcp::Socket>(st.handle);
                let state = t.state();
                let ended = failed.is_some() || state == State::Closed;
                Readiness {
                    readable: t.can_recv() || fin || ended || !t.may_recv() && established(state),
                    writable: ended || (established(state) && (t.can_send() || !t.may_send())),
                    hangup: fin || ended,
                    error: failed.is_some(),
                }
            }
        };
        Ok(r)
    }

    /// `close()` of the last descriptor of socket `id`: a connection sends what it holds and
    /// its FIN, then ends (see [`LINGER`]); a listening socket resets the connections it had
    /// not handed out.
    pub fn close(&mut self, id: SockId) -> Result<(), SockError> {
        let sock = self
            .socks
            .get_mut(id.0 as usize)
            .and_then(Option::take)
            .ok_or(SockError::BadSocket)?;
        match sock.kind {
            Kind::Fresh { .. } => {}
            Kind::Listening { spares, queue, .. } => {
                for h in spares.into_iter().chain(queue) {
                    self.tcp(h).abort();
                    self.lingering.push(h);
                }
            }
            Kind::Stream(st) => {
                let t = self.tcp(st.handle);
                if st.pending.is_some() {
                    t.abort();
                } else {
                    t.close();
                    t.set_timeout(Some(LINGER));
                }
                self.lingering.push(st.handle);
            }
        }
        self.touch();
        Ok(())
    }
}

#[cfg(test)]
#[path = "table_tests.rs"]
mod tests;
