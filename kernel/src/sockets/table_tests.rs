//! The socket table over smoltcp's loopback device: listening, accepting, connecting, moving
//! bytes both ways, closing, resets and the errors of each call.

use super::*;
use smoltcp::iface::{Config, Interface};
use smoltcp::phy::{Loopback, Medium};
use smoltcp::time::Instant;
use smoltcp::wire::{EthernetAddress, IpCidr};

const HOST: [u8; 4] = [127, 0, 0, 1];

struct Net {
    iface: Interface,
    dev: Loopback,
    table: SocketTable,
    now: Instant,
}

impl Net {
    fn new() -> Self {
        let mut dev = Loopback::new(Medium::Ethernet);
        let config = Config::new(EthernetAddress([2, 0, 0, 0, 0, 1]).into());
        let now = Instant::from_millis(0);
        let mut iface = Interface::new(config, &mut dev, now);
        iface.update_ip_addrs(|a| {
            a.push(IpCidr::new(IpAddress::v4(127, 0, 0, 1), 8)).unwrap();
        });
        Net {
            iface,
            dev,
            table: SocketTable::new(80),
            now,
        }
    }

    /// Runs the stack as the network loop does (a refresh after each received frame, so a
    /// burst of SYNs finds spares), `rounds` times, a millisecond apart.
    fn pump(&mut self, rounds: usize) {
        use smoltcp::iface::PollIngressSingleResult;
        for _ in 0..rounds {
            self.table.start_connects(self.iface.context());
            self.iface.poll_maintenance(self.now);
            while self
                .iface
                .poll_ingress_single(self.now, &mut self.dev, self.table.set())
                != PollIngressSingleResult::None
            {
                self.table.refresh(false);
            }
            self.iface
                .poll_egress(self.now, &mut self.dev, self.table.set());
            self.table.refresh(true);
            self.now += Duration::from_millis(1);
        }
    }

    fn listener(&mut self, port: u16, backlog: usize) -> SockId {
        let l = self.table.create().unwrap();
        self.table.bind(l, port).unwrap();
        self.table.listen(l, backlog).unwrap();
        l
    }

    fn connected(&mut self, port: u16) -> SockId {
        let c = self.table.create().unwrap();
        self.table.connect(c, HOST, port).unwrap();
        self.pump(20);
        assert_eq!(self.table.connect_result(c), Ok(true));
        c
    }

    fn read_all(&mut self, id: SockId) -> Vec<u8> {
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match self.table.recv(id, &mut buf) {
                Ok(0) => return out,
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(SockError::WouldBlock) => return out,
                Err(e) => panic!("recv: {e:?}"),
            }
        }
    }
}

#[test]
fn a_connection_is_accepted_and_carries_bytes_both_ways() {
    let mut n = Net::new();
    let l = n.listener(6379, 16);
    assert_eq!(n.table.accept(l), Err(SockError::WouldBlock));
    assert!(!n.table.readiness(l).unwrap().readable);
    let c = n.connected(6379);
    assert!(n.table.readiness(l).unwrap().readable);
    let (s, ip, port) = n.table.accept(l).unwrap();
    assert_eq!(ip, HOST);
    assert!(port >= EPHEMERAL_FIRST);
    assert_eq!(n.table.send(c, b"PING\r\n"), Ok(6));
    n.pump(5);
    assert!(n.table.readiness(s).unwrap().readable);
    assert_eq!(n.read_all(s), b"PING\r\n");
    assert_eq!(n.table.send(s, b"+PONG\r\n"), Ok(7));
    n.pump(5);
    assert_eq!(n.read_all(c), b"+PONG\r\n");
    assert_eq!(n.table.counters().accepted, 1);
    assert_eq!(n.table.counters().connected, 1);
}

#[test]
fn a_read_up_to_a_large_size_takes_what_arrived_and_still_tells_waiting_from_the_end() {
    let mut n = Net::new();
    let l = n.listener(7001, 4);
    let c = n.connected(7001);
    let (s, _, _) = n.table.accept(l).unwrap();
    // Nothing yet: wait, not the end of the stream.
    assert_eq!(n.table.recv_up_to(s, 16 * 1024), Err(SockError::WouldBlock));
    n.table.send(c, b"GET k\r\n").unwrap();
    n.pump(5);
    let got = n.table.recv_up_to(s, 16 * 1024).unwrap();
    assert_eq!(
        (got.as_slice(), got.capacity() < 64),
        (&b"GET k\r\n"[..], true)
    );
    n.table.send(c, b"abcdef").unwrap();
    n.pump(5);
    assert_eq!(n.table.recv_up_to(s, 4).unwrap(), b"abcd");
    assert_eq!(n.table.recv_up_to(s, 0).unwrap(), b"");
    assert_eq!(n.table.recv_up_to(s, 4).unwrap(), b"ef");
    n.table.close(c).unwrap();
    n.pump(10);
    assert_eq!(n.table.recv_up_to(s, 16 * 1024).unwrap(), b"");
}

#[test]
fn a_closed_peer_reads_as_end_of_file_after_its_bytes() {
    let mut n = Net::new();
    let l = n.listener(7000, 4);
    let c = n.connected(7000);
    let (s, _, _) = n.table.accept(l).unwrap();
    n.table.send(c, b"last words").unwrap();
    n.table.close(c).unwrap();
    n.pump(10);
    let r = n.table.readiness(s).unwrap();
    assert!(r.readable && r.hangup && !r.error);
    let mut buf = [0u8; 64];
    assert_eq!(n.table.recv(s, &mut buf), Ok(10));
    assert_eq!(n.table.recv(s, &mut buf), Ok(0));
    n.table.close(s).unwrap();
    n.pump(10);
    // Both ends ended and were dropped; only the listener's spares remain.
    assert_eq!(n.table.sizes().0, 1);
}

#[test]
fn many_connections_queue_up_to_the_backlog() {
    let mut n = Net::new();
    let l = n.listener(8000, 60);
    let clients: Vec<SockId> = (0..60)
        .map(|_| {
            let c = n.table.create().unwrap();
            n.table.connect(c, HOST, 8000).unwrap();
            c
        })
        .collect();
    n.pump(30);
    for &c in &clients {
        assert_eq!(n.table.connect_result(c), Ok(true));
    }
    let mut accepted = 0;
    while n.table.accept(l).is_ok() {
        accepted += 1;
    }
    assert_eq!(accepted, 60);
}

#[test]
fn a_connection_beyond_the_backlog_is_refused_not_lost() {
    let mut n = Net::new();
    let l = n.listener(8001, 1);
    let a = n.connected(8001);
    let b = n.table.create().unwrap();
    n.table.connect(b, HOST, 8001).unwrap();
    n.pump(30);
    assert_eq!(n.table.connect_result(b), Err(SockError::ConnectionRefused));
    assert!(n.table.readiness(b).unwrap().error);
    // The first one is still there to accept.
    let (s, _, _) = n.table.accept(l).unwrap();
    n.table.send(a, b"x").unwrap();
    n.pump(5);
    assert_eq!(n.read_all(s), b"x");
}

#[test]
fn connecting_to_a_port_nobody_listens_on_is_refused() {
    let mut n = Net::new();
    let c = n.table.create().unwrap();
    n.table.connect(c, HOST, 9).unwrap();
    assert_eq!(n.table.connect_result(c), Ok(false));
    n.pump(10);
    assert_eq!(n.table.connect_result(c), Err(SockError::ConnectionRefused));
    let mut buf = [0u8; 4];
    assert_eq!(n.table.recv(c, &mut buf), Err(SockError::ConnectionRefused));
    assert_eq!(n.table.send(c, b"x"), Err(SockError::ConnectionRefused));
}

#[test]
fn closing_a_listener_resets_its_unaccepted_connections() {
    let mut n = Net::new();
    let l = n.listener(8002, 4);
    let c = n.connected(8002);
    n.table.close(l).unwrap();
    n.pump(10);
    let r = n.table.readiness(c).unwrap();
    assert!(r.error && r.hangup);
    assert_eq!(n.table.send(c, b"x"), Err(SockError::ConnectionReset));
    // The port is free again.
    let again = n.table.create().unwrap();
    assert_eq!(n.table.bind(again, 8002), Ok(()));
}

#[test]
fn ports_in_use_reserved_or_zero_are_refused() {
    let mut n = Net::new();
    let _l = n.listener(6379, 4);
    let s = n.table.create().unwrap();
    assert_eq!(n.table.bind(s, 6379), Err(SockError::AddressInUse));
    assert_eq!(n.table.bind(s, 80), Err(SockError::AddressInUse));
    assert_eq!(n.table.bind(s, 0), Err(SockError::InvalidArgs));
    assert_eq!(n.table.listen(s, 4), Err(SockError::NotConnected));
    assert_eq!(n.table.bind(s, 6380), Ok(()));
    assert_eq!(n.table.bind(s, 6381), Err(SockError::InvalidArgs));
}

#[test]
fn calls_in_the_wrong_state_fail_cleanly() {
    let mut n = Net::new();
    let s = n.table.create().unwrap();
    let mut buf = [0u8; 4];
    assert_eq!(n.table.recv(s, &mut buf), Err(SockError::NotConnected));
    assert_eq!(n.table.send(s, b"x"), Err(SockError::NotConnected));
    assert_eq!(n.table.accept(s), Err(SockError::InvalidArgs));
    assert_eq!(n.table.shutdown(s, true), Err(SockError::NotConnected));
    assert_eq!(
        n.table.connect(s, [0, 0, 0, 0], 80),
        Err(SockError::InvalidArgs)
    );
    assert_eq!(n.table.connect(s, HOST, 0), Err(SockError::InvalidArgs));
    n.table.close(s).unwrap();
    assert_eq!(n.table.close(s), Err(SockError::BadSocket));
    assert_eq!(n.table.recv(s, &mut buf), Err(SockError::BadSocket));
}

#[test]
fn a_full_send_buffer_would_block_until_the_peer_reads() {
    let mut n = Net::new();
    let l = n.listener(8003, 4);
    let c = n.connected(8003);
    let (s, _, _) = n.table.accept(l).unwrap();
    let chunk = vec![7u8; 16 * 1024];
    let mut sent = 0;
    loop {
        match n.table.send(c, &chunk) {
            Ok(k) => sent += k,
            Err(SockError::WouldBlock) => break,
            Err(e) => panic!("{e:?}"),
        }
        n.pump(2);
    }
    assert!(sent >= RX_BUFFER, "sent {sent}");
    assert!(!n.table.readiness(c).unwrap().writable);
    let mut got = 0;
    // Up to 5 s of stack time: the last byte, sent as a zero-window probe, waits for the next
    // keep-alive to learn that the window opened.
    for _ in 0..500 {
        got += n.read_all(s).len();
        n.pump(10);
        if got == sent {
            break;
        }
    }
    assert_eq!(got, sent);
    assert!(n.table.readiness(c).unwrap().writable);
}

#[test]
fn shutdown_of_the_sending_side_delivers_end_of_file_and_keeps_receiving() {
    let mut n = Net::new();
    let l = n.listener(8004, 4);
    let c = n.connected(8004);
    let (s, _, _) = n.table.accept(l).unwrap();
    n.table.shutdown(c, true).unwrap();
    n.pump(5);
    let mut buf = [0u8; 8];
    assert_eq!(n.table.recv(s, &mut buf), Ok(0));
    n.table.send(s, b"reply").unwrap();
    n.pump(5);
    assert_eq!(n.read_all(c), b"reply");
}

#[test]
fn the_table_bounds_its_sockets() {
    let mut n = Net::new();
    let mut made = 0;
    while n.table.create().is_ok() {
        made += 1;
    }
    assert_eq!(made, MAX_SOCKETS);
    assert_eq!(n.table.create(), Err(SockError::Limit));
}
