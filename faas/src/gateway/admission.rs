//! Connection accounting: how many connections the gateway holds, how many listening sockets
//! wait for new ones (the backlog), and what happens to a connection past the limit.
//!
//! A TCP stack like smoltcp's answers a SYN that no listening socket takes with a reset, so the
//! server keeps [`Admission::backlog`] sockets listening and adds one for each that a new
//! connection takes. Connections are capped ([`Admission::max_open`], derived from the memory
//! the gateway may use with [`cap_for_memory`]); one accepted at the cap takes the place of an
//! idle keep-alive connection, or of one that has spent a while on its head (a slow client),
//! if there is one ([`victim`]), and is otherwise answered `503` and closed, so established
//! connections keep being served.

use super::timeouts::Phase;

/// The connection limits of one server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admission {
    /// Most connections served at once.
    pub max_open: usize,
    /// Sockets kept listening for new connections.
    pub backlog: usize,
}

/// Default [`Admission::backlog`].
pub const DEFAULT_BACKLOG: usize = 64;

/// A connection that has spent at least this long on its head may lose its place to a new
/// connection when the gateway is full (a client sending its head at once never does).
pub const EVICT_HEAD_AFTER_MS: u64 = 1000;

/// The most connections that fit in `budget_bytes` when each (served or listening) costs
/// `per_connection_bytes`, after `backlog` listening sockets; at least one.
pub fn cap_for_memory(budget_bytes: usize, per_connection_bytes: usize, backlog: usize) -> usize {
    (budget_bytes / per_connection_bytes.max(1))
        .saturating_sub(backlog)
        .max(1)
}

impl Admission {
    /// How many listening sockets to add when `open` connections are served and `listening`
    /// sockets wait (and `pending` others are mid-handshake): enough to refill the backlog,
    /// without the sockets in all exceeding `max_open + backlog`.
    pub fn listeners_to_add(&self, open: usize, listening: usize, pending: usize) -> usize {
        let room = (self.max_open + self.backlog).saturating_sub(open + listening + pending);
        self.backlog.saturating_sub(listening).min(room)
    }

    /// Whether a socket whose connection ended should be dropped rather than listen again:
    /// the backlog is already full.
    pub fn retire_listener(&self, listening: usize) -> bool {
        listening >= self.backlog
    }

    /// Whether a new connection may be served when `open` others are.
    pub fn admits(&self, open: usize) -> bool {
        open < self.max_open
    }
}

/// One served connection, as [`victim`] sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The connection's phase.
    pub phase: Phase,
    /// How long it has been in that phase (milliseconds).
    pub age_ms: u64,
}

/// Which connection (by index in `candidates`) a new connection takes the place of when the
/// gateway is full: the longest-idle keep-alive connection, else the connection longest on its
/// head if that is at least [`EVICT_HEAD_AFTER_MS`]; `None` if every connection is working
/// (then the new one is refused).
pub fn victim(candidates: impl IntoIterator<Item = Candidate>) -> Option<usize> {
    let mut idle: Option<(usize, u64)> = None;
    let mut head: Option<(usize, u64)> = None;
    for (i, c) in candidates.into_iter().enumerate() {
        let slot = match c.phase {
            Phase::Idle => &mut idle,
            Phase::Head if c.age_ms >= EVICT_HEAD_AFTER_MS => &mut head,
            _ => continue,
        };
        if slot.is_none_or(|(_, age)| c.age_ms > age) {
            *slot = Some((i, c.age_ms));
        }
    }
    idle.or(head).map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn c(phase: Phase, age_ms: u64) -> Candidate {
        Candidate { phase, age_ms }
    }

    #[test]
    fn cap_leaves_room_for_the_backlog() {
        assert_eq!(cap_for_memory(24 << 20, 18 << 10, 64), 1301);
        assert_eq!(cap_for_memory(0, 18 << 10, 64), 1);
        assert_eq!(cap_for_memory(100, 0, 0), 100);
    }

    #[test]
    fn the_backlog_is_refilled_up_to_the_limit() {
        let a = Admission {
            max_open: 10,
            backlog: 4,
        };
        assert_eq!(a.listeners_to_add(0, 0, 0), 4);
        assert_eq!(a.listeners_to_add(3, 1, 0), 3);
        assert_eq!(a.listeners_to_add(9, 2, 1), 2);
        assert_eq!(a.listeners_to_add(12, 0, 0), 2);
        assert_eq!(a.listeners_to_add(14, 0, 0), 0);
        assert_eq!(a.listeners_to_add(0, 4, 0), 0);
        assert!(a.retire_listener(4) && !a.retire_listener(3));
        assert!(a.admits(9) && !a.admits(10));
    }

    #[test]
    fn idle_connections_go_first_then_old_heads() {
        let all = [
            c(Phase::Head, 5000),
            c(Phase::Idle, 10),
            c(Phase::Idle, 20),
            c(Phase::Busy, 99_999),
        ];
        assert_eq!(victim(all), Some(2));
        let heads = [
            c(Phase::Head, 10),
            c(Phase::Head, 3000),
            c(Phase::Body, 9000),
        ];
        assert_eq!(victim(heads), Some(1));
    }

    #[test]
    fn working_connections_and_young_heads_are_kept() {
        assert_eq!(
            victim([
                c(Phase::Busy, 10_000),
                c(Phase::Body, 10_000),
                c(Phase::Head, EVICT_HEAD_AFTER_MS - 1)
            ]),
            None
        );
        assert_eq!(victim([]), None);
    }

    proptest! {
        /// The victim is never busy or mid-body, and is idle whenever an idle connection exists.
        #[test]
        fn victims_are_idle_or_slow(v in proptest::collection::vec((0u8..4, 0u64..3000), 0..50)) {
            let cs: alloc::vec::Vec<Candidate> = v.iter().map(|&(p, age)| {
                c([Phase::Head, Phase::Body, Phase::Idle, Phase::Busy][usize::from(p)], age)
            }).collect();
            match victim(cs.iter().copied()) {
                Some(i) => {
                    let chosen = cs[i];
                    prop_assert!(matches!(chosen.phase, Phase::Idle | Phase::Head));
                    if cs.iter().any(|x| x.phase == Phase::Idle) {
                        prop_assert_eq!(chosen.phase, Phase::Idle);
                        prop_assert!(cs.iter().filter(|x| x.phase == Phase::Idle).all(|x| x.age_ms <= chosen.age_ms));
                    } else {
                        prop_assert!(chosen.age_ms >= EVICT_HEAD_AFTER_MS);
                    }
                }
                None => prop_assert!(cs.iter().all(|x| x.phase == Phase::Busy || x.phase == Phase::Body
                    || (x.phase == Phase::Head && x.age_ms < EVICT_HEAD_AFTER_MS))),
            }
        }
    }
}
