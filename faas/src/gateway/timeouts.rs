//! Per-connection deadlines: how long a client may take to send a request's head, its body, and
//! the next request on an idle keep-alive connection, and how long it may leave its responses
//! unread.
//!
//! A connection is always in one [`Phase`]; [`Deadline`] remembers when the current phase
//! began, and the phase's budget runs from then. Bytes arriving do not extend it: a client that
//! sends a head one byte at a time still has [`Timeouts::head_ms`] for the whole head, so slow
//! clients hold a connection for a bounded time whatever their pace. Sending is the exception:
//! a large response to a slow reader may take long, so [`Timeouts::send_ms`] runs from the
//! last time the client took any of it ([`Deadline::progress`]), and a client that stops
//! reading (its receive window stays closed) loses the connection after that long.

/// What a connection is doing, as far as its deadlines go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// Waiting for a request's head: a new connection, or part of a head is buffered.
    Head,
    /// The head is accepted; the body is arriving.
    Body,
    /// Between requests on a keep-alive connection, nothing buffered.
    Idle,
    /// Responses wait for the client to read them (to open its receive window).
    Send,
    /// An invocation runs or the connection is closing: the server, not the client, is
    /// holding things up, and no client deadline runs.
    Busy,
}

impl Phase {
    /// The label value of the phase in `/metrics` (`phase="head"`, …).
    pub fn label(self) -> &'static str {
        match self {
            Phase::Head => "head",
            Phase::Body => "body",
            Phase::Idle => "idle",
            Phase::Send => "send",
            Phase::Busy => "busy",
        }
    }

    /// The phases that time out, in the order their counters are listed.
    pub const TIMED: [Phase; 4] = [Phase::Head, Phase::Body, Phase::Idle, Phase::Send];
}

/// The time budgets of the client phases, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// From the start of a request (or the connection) to its complete head.
    pub head_ms: u64,
    /// From an accepted head to the complete body.
    pub body_ms: u64,
    /// From the end of a response to the first byte of the next request.
    pub idle_ms: u64,
    /// From the last time the client took some of its responses, while more wait.
    pub send_ms: u64,
}

/// Default [`Timeouts::head_ms`].
pub const DEFAULT_HEAD_MS: u64 = 10_000;
/// Default [`Timeouts::body_ms`].
pub const DEFAULT_BODY_MS: u64 = 30_000;
/// Default [`Timeouts::idle_ms`].
pub const DEFAULT_IDLE_MS: u64 = 60_000;
/// Default [`Timeouts::send_ms`].
pub const DEFAULT_SEND_MS: u64 = 30_000;

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            head_ms: DEFAULT_HEAD_MS,
            body_ms: DEFAULT_BODY_MS,
            idle_ms: DEFAULT_IDLE_MS,
            send_ms: DEFAULT_SEND_MS,
        }
    }
}

impl Timeouts {
    /// The budget of `phase`; `None` for [`Phase::Busy`], which has none.
    pub fn budget(&self, phase: Phase) -> Option<u64> {
        match phase {
            Phase::Head => Some(self.head_ms),
            Phase::Body => Some(self.body_ms),
            Phase::Idle => Some(self.idle_ms),
            Phase::Send => Some(self.send_ms),
            Phase::Busy => None,
        }
    }
}

/// The phase a connection is in and since when (milliseconds on any monotonic clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadline {
    phase: Phase,
    since_ms: u64,
}

impl Deadline {
    /// A connection accepted at `now_ms`: it owes its first request's head.
    pub fn new(now_ms: u64) -> Self {
        Deadline {
            phase: Phase::Head,
            since_ms: now_ms,
        }
    }

    /// Records the connection's phase at `now_ms`; a change of phase restarts the clock.
    pub fn observe(&mut self, phase: Phase, now_ms: u64) {
        if phase != self.phase {
            self.phase = phase;
            self.since_ms = now_ms;
        }
    }

    /// Records that the client took some of its responses at `now_ms`: in [`Phase::Send`] the
    /// budget runs from now (in other phases nothing changes).
    pub fn progress(&mut self, now_ms: u64) {
        if self.phase == Phase::Send {
            self.since_ms = now_ms;
        }
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// How long the connection has been in its phase at `now_ms` (zero if the clock went
    /// back).
    pub fn age_ms(&self, now_ms: u64) -> u64 {
        now_ms.saturating_sub(self.since_ms)
    }

    /// The phase whose budget ran out by `now_ms`, if it did.
    pub fn expired(&self, timeouts: &Timeouts, now_ms: u64) -> Option<Phase> {
        let budget = timeouts.budget(self.phase)?;
        (self.age_ms(now_ms) >= budget).then_some(self.phase)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t() -> Timeouts {
        Timeouts {
            head_ms: 100,
            body_ms: 200,
            idle_ms: 300,
            send_ms: 400,
        }
    }

    #[test]
    fn a_new_connection_owes_a_head() {
        let d = Deadline::new(1000);
        assert_eq!(d.phase(), Phase::Head);
        assert_eq!(d.expired(&t(), 1099), None);
        assert_eq!(d.expired(&t(), 1100), Some(Phase::Head));
    }

    #[test]
    fn staying_in_a_phase_does_not_extend_it() {
        let mut d = Deadline::new(0);
        for now in (0..100).step_by(10) {
            d.observe(Phase::Head, now);
        }
        assert_eq!(d.expired(&t(), 100), Some(Phase::Head));
    }

    #[test]
    fn each_phase_has_its_own_budget_and_busy_none() {
        let mut d = Deadline::new(0);
        d.observe(Phase::Body, 50);
        assert_eq!(d.expired(&t(), 249), None);
        assert_eq!(d.expired(&t(), 250), Some(Phase::Body));
        d.observe(Phase::Busy, 250);
        assert_eq!(d.expired(&t(), 1_000_000), None);
        d.observe(Phase::Idle, 1_000_000);
        assert_eq!(d.expired(&t(), 1_000_299), None);
        assert_eq!(d.expired(&t(), 1_000_300), Some(Phase::Idle));
    }

    #[test]
    fn a_clock_going_back_expires_nothing() {
        let d = Deadline::new(500);
        assert_eq!(d.age_ms(10), 0);
        assert_eq!(d.expired(&t(), 10), None);
    }

    #[test]
    fn labels_are_distinct() {
        let labels: alloc::vec::Vec<_> = Phase::TIMED.iter().map(|p| p.label()).collect();
        assert_eq!(labels, ["head", "body", "idle", "send"]);
    }

    #[test]
    fn sending_times_out_only_without_progress() {
        let mut d = Deadline::new(0);
        d.observe(Phase::Send, 100);
        // The client keeps taking bytes: the budget keeps restarting.
        for now in (200..2_000).step_by(300) {
            d.observe(Phase::Send, now);
            d.progress(now);
            assert_eq!(d.expired(&t(), now + 399), None);
        }
        // It stops reading.
        assert_eq!(d.expired(&t(), 1_700 + 399), None);
        assert_eq!(d.expired(&t(), 1_700 + 400), Some(Phase::Send));
    }

    #[test]
    fn progress_does_not_extend_other_phases() {
        let mut d = Deadline::new(0);
        d.progress(50);
        assert_eq!(d.expired(&t(), 100), Some(Phase::Head));
        d.observe(Phase::Idle, 100);
        d.progress(350);
        assert_eq!(d.expired(&t(), 400), Some(Phase::Idle));
    }

    proptest! {
        /// Whatever the sequence of observations, a phase expires exactly when its budget has
        /// passed since it began, and never while busy.
        #[test]
        fn expiry_matches_the_phase_start(steps in proptest::collection::vec((0u8..4, 0u64..500), 1..40)) {
            let timeouts = t();
            let mut d = Deadline::new(0);
            let (mut now, mut phase, mut since) = (0u64, Phase::Head, 0u64);
            for (p, dt) in steps {
                now += dt;
                let p = [Phase::Head, Phase::Body, Phase::Idle, Phase::Busy][usize::from(p)];
                d.observe(p, now);
                if p != phase {
                    phase = p;
                    since = now;
                }
                let later = now + 150;
                let want = timeouts.budget(phase).filter(|&b| later - since >= b).map(|_| phase);
                prop_assert_eq!(d.expired(&timeouts, later), want);
            }
        }
    }
}
