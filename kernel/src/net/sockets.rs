//! The HTTP server's socket sets: the listening sockets in one, connections spread over
//! [`SHARDS`] more by peer (see `fjord_kernel::steer`), each with flags saying whether the
//! stack should transmit from it and the server visit it on the next pass.
//!
//! A set is marked when a frame is steered to it, when its sockets sent something, and when the
//! server left work in it (bytes to send, an invocation running); other sets are visited only
//! by the periodic sweeps that run the timers and deadlines, so idle connections cost nothing
//! per pass.

use alloc::vec::Vec;
use fjord_kernel::steer::{SHARDS, Steer};
use smoltcp::iface::SocketSet;
use smoltcp::socket::Socket;
use smoltcp::socket::tcp::State;
use smoltcp::wire::{IpAddress, IpEndpoint, Ipv4Address};

/// Index of the listening sockets' set.
pub const LISTEN: usize = 0;

/// The server's socket sets (index [`LISTEN`], then shard `s` at `s + 1`) and their flags.
pub struct Sockets {
    sets: Vec<SocketSet<'static>>,
    transmit: Vec<bool>,
    serve: Vec<bool>,
}

impl Sockets {
    /// Empty sets, none marked.
    pub fn new() -> Self {
        Sockets {
            sets: (0..=SHARDS).map(|_| SocketSet::new(Vec::new())).collect(),
            transmit: alloc::vec![false; SHARDS + 1],
            serve: alloc::vec![false; SHARDS + 1],
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

    /// The set a steered frame goes to.
    pub fn route(&self, steer: Steer) -> usize {
        match steer {
            Steer::Listen => LISTEN,
            Steer::Shard(s) => Self::shard(s),
            Steer::Connect { shard, ip, port } => {
                let set = Self::shard(shard);
                let peer = IpEndpoint::new(IpAddress::Ipv4(Ipv4Address::from(ip)), port);
                let known = self.sets[set].iter().any(|(_, s)| match s {
                    Socket::Tcp(t) => {
                        t.state() == State::SynReceived && t.remote_endpoint() == Some(peer)
                    }
                });
                if known { set } else { LISTEN }
            }
        }
    }

    /// Set `i`.
    pub fn set(&mut self, i: usize) -> &mut SocketSet<'static> {
        &mut self.sets[i]
    }

    /// Marks set `i` for the stack's next transmit pass and the server's next visit.
    pub fn mark(&mut self, i: usize) {
        self.transmit[i] = true;
        self.serve[i] = true;
    }

    /// Marks set `i` for the server's next visit.
    pub fn mark_serve(&mut self, i: usize) {
        self.serve[i] = true;
    }

    /// Whether set `i` is marked for transmitting; clears the mark.
    pub fn take_transmit(&mut self, i: usize) -> bool {
        core::mem::take(&mut self.transmit[i])
    }

    /// Whether set `i` is marked for the server; clears the mark.
    pub fn take_serve(&mut self, i: usize) -> bool {
        core::mem::take(&mut self.serve[i])
    }
}
