//! Steering received frames among the HTTP server's socket sets and the programs' sockets.
//!
//! smoltcp hands a received TCP segment to the first socket of a set that accepts it, trying
//! them in order, and its transmit pass visits every socket of a set. The server therefore keeps
//! its listening sockets in one set and its connections in [`SHARDS`] small sets chosen by the
//! peer's address and port ([`shard_of`]); [`steer`] reads a frame's headers to find the set
//! that holds the socket it is for, so a segment is matched among a few sockets instead of all.

use core::hash::Hasher;

/// Socket sets holding connections.
pub const SHARDS: usize = 256;

/// Where a received frame goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Steer {
    /// The listening sockets' set: not TCP over IPv4 (ARP and the like concern the interface,
    /// not a socket).
    Listen,
    /// A connection request (SYN without ACK) from `ip`:`port`: the listening sockets' set,
    /// unless the connections' set `shard` holds that connection mid-handshake (the SYN is a
    /// retransmission, which a listening socket would take for a second connection).
    Connect {
        /// The set that would hold the connection.
        shard: usize,
        /// The peer's address.
        ip: [u8; 4],
        /// The peer's port.
        port: u16,
    },
    /// A segment for another port than the HTTP server's: the programs' sockets
    /// (`fjord_kernel::socket_table`), whose listening sockets want replenishing after a
    /// connection request.
    Program {
        /// Whether it is a connection request (SYN without ACK).
        connect: bool,
    },
    /// Any other segment from `ip`:`port`: the connections' set `shard` (below [`SHARDS`]),
    /// and within it the socket connected to that peer.
    Segment {
        /// The set holding the connection.
        shard: usize,
        /// The peer's address.
        ip: [u8; 4],
        /// The peer's port.
        port: u16,
    },
}

/// The connections' set that holds the connection with the peer `ip`:`port`.
pub fn shard_of(ip: [u8; 4], port: u16) -> usize {
    let mut h = crate::fnv::Fnv1a::default();
    h.write(&ip);
    h.write(&port.to_be_bytes());
    (h.finish() % SHARDS as u64) as usize
}

const ETHERNET_HEADER: usize = 14;
const ETHERTYPE_IPV4: u16 = 0x0800;
const PROTOCOL_TCP: u8 = 6;
const TCP_SYN: u8 = 0x02;
const TCP_ACK: u8 = 0x10;

/// Where the Ethernet frame `frame` goes, when the HTTP server listens on `http_port`. A frame
/// too short to read is steered to [`Steer::Listen`], whose stack drops it like any malformed
/// frame.
pub fn steer(frame: &[u8], http_port: u16) -> Steer {
    let be16 = |at: usize| {
        frame
            .get(at..at + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
    };
    if be16(12) != Some(ETHERTYPE_IPV4) {
        return Steer::Listen;
    }
    let ip = ETHERNET_HEADER;
    let Some(&version_ihl) = frame.get(ip) else {
        return Steer::Listen;
    };
    let header_len = usize::from(version_ihl & 0x0f) * 4;
    if version_ihl >> 4 != 4 || header_len < 20 || frame.get(ip + 9) != Some(&PROTOCOL_TCP) {
        return Steer::Listen;
    }
    let Some(&[a, b, c, d]) = frame.get(ip + 12..ip + 16) else {
        return Steer::Listen;
    };
    let src = [a, b, c, d];
    let tcp = ip + header_len;
    let (Some(port), Some(dst), Some(&flags)) = (be16(tcp), be16(tcp + 2), frame.get(tcp + 13))
    else {
        return Steer::Listen;
    };
    if dst != http_port {
        return Steer::Program {
            connect: flags & TCP_SYN != 0 && flags & TCP_ACK == 0,
        };
    }
    let shard = shard_of(src, port);
    if flags & TCP_SYN != 0 && flags & TCP_ACK == 0 {
        return Steer::Connect {
            shard,
            ip: src,
            port,
        };
    }
    Steer::Segment {
        shard,
        ip: src,
        port,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    /// An Ethernet frame carrying an IPv4 TCP segment from `src`:`port` with `flags`.
    fn tcp_frame(src: [u8; 4], port: u16, flags: u8) -> Vec<u8> {
        let mut f = alloc::vec![0u8; 14 + 20 + 20];
        f[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        f[14] = 0x45;
        f[14 + 9] = PROTOCOL_TCP;
        f[14 + 12..14 + 16].copy_from_slice(&src);
        f[14 + 16..14 + 20].copy_from_slice(&[10, 0, 2, 15]);
        f[34..36].copy_from_slice(&port.to_be_bytes());
        f[36..38].copy_from_slice(&80u16.to_be_bytes());
        f[34 + 13] = flags;
        f
    }

    /// What a segment (not a connection request) from `ip`:`port` steers to.
    fn segment(ip: [u8; 4], port: u16) -> Steer {
        Steer::Segment {
            shard: shard_of(ip, port),
            ip,
            port,
        }
    }

    #[test]
    fn connection_requests_name_the_peer_and_its_shard() {
        let f = tcp_frame([10, 0, 2, 2], 40_000, TCP_SYN);
        assert_eq!(
            steer(&f, 80),
            Steer::Connect {
                shard: shard_of([10, 0, 2, 2], 40_000),
                ip: [10, 0, 2, 2],
                port: 40_000
            }
        );
    }

    #[test]
    fn segments_of_a_connection_go_to_its_shard_and_name_the_peer() {
        let src = [10, 0, 2, 2];
        let want = segment(src, 40_000);
        for flags in [
            TCP_ACK,
            TCP_SYN | TCP_ACK,
            TCP_ACK | 0x08,
            0x04,
            0x01 | TCP_ACK,
        ] {
            assert_eq!(
                steer(&tcp_frame(src, 40_000, flags), 80),
                want,
                "flags {flags:#x}"
            );
        }
    }

    #[test]
    fn segments_for_other_ports_go_to_the_programs() {
        let mut f = tcp_frame([10, 0, 2, 2], 40_000, TCP_SYN);
        f[36..38].copy_from_slice(&6379u16.to_be_bytes());
        assert_eq!(steer(&f, 80), Steer::Program { connect: true });
        f[34 + 13] = TCP_ACK;
        assert_eq!(steer(&f, 80), Steer::Program { connect: false });
        assert_eq!(steer(&f, 6379), segment([10, 0, 2, 2], 40_000));
    }

    #[test]
    fn ip_options_are_skipped() {
        let mut f = tcp_frame([10, 0, 2, 2], 40_001, TCP_ACK);
        f[14] = 0x46;
        f.splice(34..34, [1, 1, 1, 1]);
        assert_eq!(steer(&f, 80), segment([10, 0, 2, 2], 40_001));
    }

    #[test]
    fn other_frames_and_short_frames_go_to_the_listeners() {
        let mut arp = tcp_frame([10, 0, 2, 2], 1, TCP_ACK);
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(steer(&arp, 80), Steer::Listen);
        let mut udp = tcp_frame([10, 0, 2, 2], 1, TCP_ACK);
        udp[14 + 9] = 17;
        assert_eq!(steer(&udp, 80), Steer::Listen);
        let whole = tcp_frame([10, 0, 2, 2], 1, TCP_ACK);
        for len in 0..48 {
            assert_eq!(steer(&whole[..len], 80), Steer::Listen, "{len} bytes");
        }
    }

    #[test]
    fn consecutive_client_ports_spread_over_the_shards() {
        let mut count = [0usize; SHARDS];
        for port in 40_000..50_000u16 {
            count[shard_of([10, 0, 2, 2], port)] += 1;
        }
        // About 39 each.
        let (min, max) = (count.iter().min(), count.iter().max());
        assert!(min >= Some(&15) && max <= Some(&70), "{count:?}");
    }

    /// Whatever the bytes, steering never panics and names an existing set.
    #[test]
    fn any_bytes_steer_somewhere() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for len in 0..80 {
            for _ in 0..200 {
                let mut f = tcp_frame([10, 0, 2, 2], 1, TCP_ACK);
                f.resize(80, 0);
                for b in &mut f {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // Keep the Ethernet type and IP version half the time, so the TCP path runs.
                    *b = if x % 2 == 0 { *b } else { x as u8 };
                }
                if let Steer::Segment { shard: s, .. } | Steer::Connect { shard: s, .. } =
                    steer(&f[..len], 80)
                {
                    assert!(s < SHARDS);
                }
            }
        }
    }
}
