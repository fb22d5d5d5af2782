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
    transmit: Marks,
    serve: Marks,
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
        self.transmit.mark(i);
        self.serve.mark(i);
    }

    /// Marks set `i` for the server's next visit.
    pub fn mark_serve(&mut self, i: usize) {
        self.serve.mark(i);
    }

    /// The sets marked for transmitting (every set when `all`), into `out`; clears the marks.
    /// Sets marked meanwhile wait for the next call.
    pub fn drain_transmit(&mut self, all: bool, out: &mut Vec<usize>) {
        self.transmit.drain(all, out);
    }

    /// The sets marked for the server (every set when `all`), into `out`; clears the marks.
    /// Sets marked meanwhile wait for the next call.
    pub fn drain_serve(&mut self, all: bool, out: &mut Vec<usize>) {
        self.serve.drain(all, out);
    }
}
