//! The HTTP server's socket sets: the listening sockets in one, connections spread over
//! [`SHARDS`] more by peer (see `fjord_kernel::steer`), each with flags saying whether the
//! stack should transmit from it and which of its sockets the server should visit next pass.
//!
//! A set is marked for transmitting when a frame is steered to it and when the server left
//! bytes in it. The server visits a socket when a segment from its peer arrived, when its
//! invocation finished and when it left work there (bytes to send, a state change); a whole set
//! when a socket joined it or its peer is unknown. Other sockets are visited only by the periodic
//! sweeps that run the deadlines, so idle connections cost nothing per pass, and a busy one
//! costs no visits of the others in its set.

use alloc::vec::Vec;
use fjord_kernel::steer::{SHARDS, Steer};
use smoltcp::iface::SocketSet;
use smoltcp::socket::Socket;
use smoltcp::socket::tcp::State;
use smoltcp::wire::{IpAddress, IpEndpoint, Ipv4Address};

/// The IPv4 endpoint `ip`:`port`, as smoltcp names a socket's peer.
fn endpoint(ip: [u8; 4], port: u16) -> IpEndpoint {
    IpEndpoint::new(IpAddress::Ipv4(Ipv4Address::from(ip)), port)
}

/// Index of the listening sockets' set.
pub const LISTEN: usize = 0;

/// The server's socket sets (index [`LISTEN`], then shard `s` at `s + 1`) and their flags.
pub struct Sockets {
    sets: Vec<SocketSet<'static>>,
    transmit: Marks,
    /// Sets whose every socket the server visits next pass.
    serve: Marks,
    /// Sockets, by set and peer, the server visits next pass (perhaps twice, perhaps in a set
    /// also marked whole).
    serve_peers: Vec<(usize, IpEndpoint)>,
}

/// Which sets are marked for one purpose: a flag per set, and the marked ones in a list, so a
/// pass finds them without looking at every set.
struct Marks {
    flags: Vec<bool>,
    /// Every set whose flag is set, perhaps with sets whose flag was cleared since.
    list: Vec<usize>,
}

impl Marks {
    fn new(sets: usize) -> Self {
        Marks {
            flags: alloc::vec![false; sets],
            list: Vec::new(),
        }
    }

    fn mark(&mut self, i: usize) {
        if !core::mem::replace(&mut self.flags[i], true) {
            self.list.push(i);
        }
    }

    /// The marked sets (every set when `all`), their marks cleared, into `out`.
    fn drain(&mut self, all: bool, out: &mut Vec<usize>) {
        out.clear();
        if all {
            out.extend(0..self.flags.len());
            self.flags.iter_mut().for_each(|f| *f = false);
            self.list.clear();
            return;
        }
        for i in self.list.drain(..) {
            if core::mem::take(&mut self.flags[i]) {
                out.push(i);
            }
        }
    }
}

impl Sockets {
    /// Empty sets, none marked.
    pub fn new() -> Self {
        Sockets {
            sets: (0..=SHARDS).map(|_| SocketSet::new(Vec::new())).collect(),
            transmit: Marks::new(SHARDS + 1),
            serve: Marks::new(SHARDS + 1),
            serve_peers: Vec::new(),
        }
    }

    /// Number of sets.
    pub fn len(&self) -> usize {
        self.sets.len()
    }

    /// The set of the connections' shard `shard`.
    pub fn shard(shard: usize) -> usize {
        shard + 1
    }

    /// The set a steered frame goes to, and the peer of the connection it is for if it is a
    /// segment of one.
    pub fn route(&self, steer: Steer) -> (usize, Option<IpEndpoint>) {
        match steer {
            // The programs' segments never reach the server's sets (the network loop hands
            // them to the socket table first); the listening set drops any stray one.
            Steer::Listen | Steer::Program { .. } => (LISTEN, None),
            Steer::Segment { shard, ip, port } => (Self::shard(shard), Some(endpoint(ip, port))),
            Steer::Connect { shard, ip, port } => {
                let set = Self::shard(shard);
                let peer = endpoint(ip, port);
                let known = self.sets[set].iter().any(|(_, s)| match s {
                    Socket::Tcp(t) => {
                        t.state() == State::SynReceived && t.remote_endpoint() == Some(peer)
                    }
                });
                (if known { set } else { LISTEN }, None)
            }
        }
    }

    /// Set `i`.
    pub fn set(&mut self, i: usize) -> &mut SocketSet<'static> {
        &mut self.sets[i]
    }

    /// Marks set `i` for the stack's next transmit pass and the server's next visit.
    pub fn mark(&mut self, i: usize) {
        self.transmit.mark(i);
        self.serve.mark(i);
    }

    /// Marks set `i` for the stack's next transmit pass.
    pub fn mark_transmit(&mut self, i: usize) {
        self.transmit.mark(i);
    }

    /// Marks every socket of set `i` for the server's next visit.
    pub fn mark_serve(&mut self, i: usize) {
        self.serve.mark(i);
    }

    /// Marks the socket of set `i` connected to `peer` for the server's next visit.
    pub fn mark_peer(&mut self, i: usize, peer: IpEndpoint) {
        self.serve_peers.push((i, peer));
    }

    /// The sets marked for transmitting (every set when `all`), into `out`; clears the marks.
    /// Sets marked meanwhile wait for the next call.
    pub fn drain_transmit(&mut self, all: bool, out: &mut Vec<usize>) {
        self.transmit.drain(all, out);
    }

    /// The sets marked whole for the server (every set when `all`) into `sets`, and the
    /// sockets marked by peer, sorted without repeats and without those of sets in `sets`, into
    /// `peers`; clears the marks. Marks made meanwhile wait for the next call.
    pub fn drain_serve(
        &mut self,
        all: bool,
        sets: &mut Vec<usize>,
        peers: &mut Vec<(usize, IpEndpoint)>,
    ) {
        self.serve.drain(all, sets);
        peers.clear();
        if all {
            self.serve_peers.clear();
            return;
        }
        core::mem::swap(peers, &mut self.serve_peers);
        peers.sort_unstable();
        peers.dedup();
        if !sets.is_empty() {
            peers.retain(|(set, _)| !sets.contains(set));
        }
    }
}
