//! Request dispatch: the [`Dispatcher`] policy trait and [`Jbsq`], Join-Bounded-Shortest-Queue.
//!
//! The orchestrator owns one dispatcher for its group of executors. It calls
//! [`Dispatcher::submit`] when a request arrives (from the network: [`RequestClass::External`];
//! from a running function's nested call: [`RequestClass::Internal`]), [`Dispatcher::complete`]
//! when an executor reports a request finished, and after either drains
//! [`Dispatcher::next_dispatch`] until it returns `None`, pushing each result to its executor.
//!
//! JBSQ(k) (Jord §3.2–3.3; the bound handling is the digest's reconstruction): an executor is
//! eligible while it has fewer than `k` outstanding requests (queued on it plus running plus
//! suspended in a nested call: the executor decides when a request is complete, so a suspended
//! continuation keeps counting until it finishes). The head request goes to the eligible executor
//! with the fewest outstanding requests (ties: the lowest executor id); when none is eligible it
//! waits in the central queue. Internal requests have strict priority: an external request is
//! dispatched only while the internal queue is empty, so external load cannot starve nested calls.

use alloc::collections::VecDeque;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

/// Index of an executor within one dispatcher (`0..executors`).
pub type ExecutorId = usize;

/// Where a request comes from, which decides its central queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RequestClass {
    /// A nested call made by a running function; served before any external request.
    Internal,
    /// A request from the network gateway.
    External,
}

/// A dispatch decision: push `request` to `executor`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dispatch<R> {
    /// The executor that must run the request.
    pub executor: ExecutorId,
    /// The class the request was submitted with.
    pub class: RequestClass,
    /// The request itself.
    pub request: R,
}

/// A request refused because its central queue is full; the caller gets it back (HTTP 503).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueFull<R> {
    /// The refused request.
    pub request: R,
}

/// Errors reported by a dispatcher.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DispatchError {
    /// The executor id is not below the number of executors.
    UnknownExecutor,
    /// A completion was reported for an executor with no outstanding request.
    NothingOutstanding,
    /// The configuration asks for zero executors.
    NoExecutors,
    /// The configuration asks for a bound `k` of zero.
    ZeroBound,
}

impl fmt::Display for DispatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DispatchError::UnknownExecutor => "unknown executor id",
            DispatchError::NothingOutstanding => {
                "completion for an executor with nothing outstanding"
            }
            DispatchError::NoExecutors => "a dispatcher needs at least one executor",
            DispatchError::ZeroBound => "the JBSQ bound k must be at least 1",
        })
    }
}

/// A pluggable dispatch policy (one per orchestrator), in the manner of Unikraft's scheduler ops.
pub trait Dispatcher<R> {
    /// Queues `request` centrally in its class; fails when that queue is full.
    fn submit(&mut self, class: RequestClass, request: R) -> Result<(), QueueFull<R>>;
    /// Records that `executor` finished one outstanding request.
    fn complete(&mut self, executor: ExecutorId) -> Result<(), DispatchError>;
    /// Takes the next request that may be pushed to an executor now, if any.
    fn next_dispatch(&mut self) -> Option<Dispatch<R>>;
    /// Number of executors this dispatcher serves.
    fn executors(&self) -> usize;
    /// Requests pushed to `executor` and not yet completed (0 for an unknown id).
    fn outstanding(&self, executor: ExecutorId) -> usize;
    /// Requests waiting in the central queue of `class`.
    fn waiting(&self, class: RequestClass) -> usize;
}

/// Configuration of a [`Jbsq`] dispatcher.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JbsqConfig {
    /// Number of executors served.
    pub executors: usize,
    /// The bound `k`: the most outstanding requests one executor may hold.
    pub k: usize,
    /// Capacity of each central queue (internal and external separately).
    pub max_waiting: usize,
}

impl JbsqConfig {
    /// The default bound `k` (JBSQ(2)).
    pub const DEFAULT_K: usize = 2;

    /// JBSQ(2) over `executors` executors with central queues of 4096 requests each.
    pub fn new(executors: usize) -> Self {
        JbsqConfig {
            executors,
            k: Self::DEFAULT_K,
            max_waiting: 4096,
        }
    }
}

/// JBSQ(k) over a fixed set of executors with internal/external central queues.
#[derive(Clone, Debug)]
pub struct Jbsq<R> {
    k: usize,
    max_waiting: usize,
    outstanding: Vec<usize>,
    internal: VecDeque<R>,
    external: VecDeque<R>,
}

impl<R> Jbsq<R> {
    /// Builds a dispatcher; rejects zero executors or `k == 0`.
    pub fn new(config: JbsqConfig) -> Result<Self, DispatchError> {
        if config.executors == 0 {
            return Err(DispatchError::NoExecutors);
        }
        if config.k == 0 {
            return Err(DispatchError::ZeroBound);
        }
        Ok(Jbsq {
            k: config.k,
            max_waiting: config.max_waiting,
            outstanding: vec![0; config.executors],
            internal: VecDeque::new(),
            external: VecDeque::new(),
        })
    }

    /// The bound `k`.
    pub fn bound(&self) -> usize {
        self.k
    }

    /// Changes the bound `k` at run time. Lowering it below an executor's outstanding count is
    /// allowed: that executor is simply ineligible until it drains below the new bound.
    pub fn set_bound(&mut self, k: usize) -> Result<(), DispatchError> {
        if k == 0 {
            return Err(DispatchError::ZeroBound);
        }
        self.k = k;
        Ok(())
    }

    /// The eligible executor with the fewest outstanding requests (lowest id on ties).
    fn shortest_eligible(&self) -> Option<ExecutorId> {
        self.outstanding
            .iter()
            .enumerate()
            .filter(|&(_, &n)| n < self.k)
            .min_by_key(|&(i, &n)| (n, i))
            .map(|(i, _)| i)
    }
}

impl<R> Jbsq<R> {
    /// Queues a later step of a request that was already admitted (a caller resumed after its
    /// nested call finished) in the internal queue. It is never refused: the request was
    /// bounded when it was first submitted, and dropping it would lose a suspended caller.
    pub fn resume(&mut self, request: R) {
        self.internal.push_back(request);
    }

    /// Admits a later step of a request (a caller whose callee just finished) on `executor`,
    /// the executor that ran the callee, instead of queueing it centrally: the continuation
    /// stays with an executor, as in the paper's executor loop. Allowed when `executor` holds
    /// fewer than `k` requests and no internal request waits (internal work keeps its order);
    /// the step then counts as outstanding there. Returns whether it was admitted; if not,
    /// queue it with [`Jbsq::resume`].
    pub fn resume_on(&mut self, executor: ExecutorId) -> bool {
        match self.outstanding.get_mut(executor) {
            Some(n) if *n < self.k && self.internal.is_empty() => {
                *n += 1;
                true
            }
            _ => false,
        }
    }
}

impl<R> Dispatcher<R> for Jbsq<R> {
    fn submit(&mut self, class: RequestClass, request: R) -> Result<(), QueueFull<R>> {
        let queue = match class {
            RequestClass::Internal => &mut self.internal,
            RequestClass::External => &mut self.external,
        };
        if queue.len() >= self.max_waiting {
            return Err(QueueFull { request });
        }
        queue.push_back(request);
        Ok(())
    }

    fn complete(&mut self, executor: ExecutorId) -> Result<(), DispatchError> {
        let n = self
            .outstanding
            .get_mut(executor)
            .ok_or(DispatchError::UnknownExecutor)?;
        if *n == 0 {
            return Err(DispatchError::NothingOutstanding);
        }
        *n -= 1;
        Ok(())
    }

    fn next_dispatch(&mut self) -> Option<Dispatch<R>> {
        // Nothing waits (the orchestrator's usual last look): skip the executor scan.
        if self.internal.is_empty() && self.external.is_empty() {
            return None;
        }
        let executor = self.shortest_eligible()?;
        let (class, request) = if let Some(r) = self.internal.pop_front() {
            (RequestClass::Internal, r)
        } else {
            (RequestClass::External, self.external.pop_front()?)
        };
        self.outstanding[executor] += 1;
        Some(Dispatch {
            executor,
            class,
            request,
        })
    }

    fn executors(&self) -> usize {
        self.outstanding.len()
    }

    fn outstanding(&self, executor: ExecutorId) -> usize {
        self.outstanding.get(executor).copied().unwrap_or(0)
    }

    fn waiting(&self, class: RequestClass) -> usize {
        match class {
            RequestClass::Internal => self.internal.len(),
            RequestClass::External => self.external.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn drain<R>(d: &mut impl Dispatcher<R>) -> Vec<Dispatch<R>> {
        core::iter::from_fn(|| d.next_dispatch()).collect()
    }

    fn jbsq(executors: usize, k: usize) -> Jbsq<u32> {
        Jbsq::new(JbsqConfig {
            executors,
            k,
            max_waiting: 1000,
        })
        .unwrap()
    }

    #[test]
    fn resume_on_the_finishing_executor_respects_the_bound_and_internal_order() {
        let mut d = jbsq(2, 2);
        d.submit(RequestClass::External, 1).unwrap();
        let first = d.next_dispatch().unwrap();
        assert_eq!(first.executor, 0);
        // The callee runs on executor 0; its caller resumes there too.
        assert!(d.resume_on(0));
        assert_eq!(d.outstanding(0), 2);
        // At the bound: refused.
        assert!(!d.resume_on(0));
        d.complete(0).unwrap();
        // An internal request waits: the resumption must queue behind it.
        d.submit(RequestClass::Internal, 2).unwrap();
        assert!(!d.resume_on(0));
        assert!(!d.resume_on(7), "unknown executor");
        assert_eq!(d.outstanding(0), 1);
    }

    #[test]
    fn rejects_bad_config() {
        assert_eq!(
            Jbsq::<u32>::new(JbsqConfig::new(0)).err(),
            Some(DispatchError::NoExecutors)
        );
        let c = JbsqConfig {
            k: 0,
            ..JbsqConfig::new(2)
        };
        assert_eq!(Jbsq::<u32>::new(c).err(), Some(DispatchError::ZeroBound));
        assert_eq!(Jbsq::<u32>::new(JbsqConfig::new(3)).unwrap().bound(), 2);
    }

    #[test]
    fn spreads_to_shortest_queue_then_waits() {
        let mut d = jbsq(3, 2);
        for r in 0..8 {
            d.submit(RequestClass::External, r).unwrap();
        }
        let got: Vec<_> = drain(&mut d)
            .iter()
            .map(|x| (x.executor, x.request))
            .collect();
        assert_eq!(got, vec![(0, 0), (1, 1), (2, 2), (0, 3), (1, 4), (2, 5)]);
        assert_eq!(d.waiting(RequestClass::External), 2);
        d.complete(1).unwrap();
        let got = drain(&mut d);
        assert_eq!((got.len(), got[0].executor, got[0].request), (1, 1, 6));
        assert!(drain(&mut d).is_empty());
    }

    #[test]
    fn internal_has_strict_priority_and_fifo_within_class() {
        let mut d = jbsq(1, 1);
        d.submit(RequestClass::External, 1).unwrap();
        let first = d.next_dispatch().unwrap();
        assert_eq!(first.request, 1);
        d.submit(RequestClass::External, 2).unwrap();
        d.submit(RequestClass::Internal, 10).unwrap();
        d.submit(RequestClass::External, 3).unwrap();
        d.submit(RequestClass::Internal, 11).unwrap();
        assert!(d.next_dispatch().is_none());
        let mut order = Vec::new();
        for _ in 0..4 {
            d.complete(0).unwrap();
            let x = d.next_dispatch().unwrap();
            order.push((x.class, x.request));
        }
        use RequestClass::*;
        assert_eq!(
            order,
            vec![(Internal, 10), (Internal, 11), (External, 2), (External, 3)]
        );
    }

    #[test]
    fn bound_can_change_at_run_time() {
        let mut d = jbsq(1, 3);
        for r in 0..4 {
            d.submit(RequestClass::External, r).unwrap();
        }
        assert_eq!(drain(&mut d).len(), 3);
        assert_eq!(d.set_bound(0), Err(DispatchError::ZeroBound));
        d.set_bound(1).unwrap();
        d.complete(0).unwrap();
        assert!(d.next_dispatch().is_none(), "2 outstanding, bound 1");
        d.complete(0).unwrap();
        d.complete(0).unwrap();
        assert_eq!(d.next_dispatch().map(|x| x.request), Some(3));
        assert!(d.next_dispatch().is_none());
    }

    #[test]
    fn completion_errors_and_queue_full() {
        let mut d = Jbsq::new(JbsqConfig {
            executors: 2,
            k: 1,
            max_waiting: 1,
        })
        .unwrap();
        assert_eq!(d.complete(5), Err(DispatchError::UnknownExecutor));
        assert_eq!(d.complete(0), Err(DispatchError::NothingOutstanding));
        d.submit(RequestClass::External, 1).unwrap();
        assert_eq!(
            d.submit(RequestClass::External, 2),
            Err(QueueFull { request: 2 })
        );
        d.submit(RequestClass::Internal, 3).unwrap();
        assert_eq!(d.outstanding(9), 0);
    }

    #[derive(Clone, Debug)]
    enum Op {
        Arrive(bool),
        Complete(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            any::<bool>().prop_map(Op::Arrive),
            (0usize..8).prop_map(Op::Complete)
        ]
    }

    proptest! {
        /// Random arrivals and completions: the bound holds, the policy is work-conserving, each
        /// class is FIFO, internal requests go first, and every request is dispatched exactly once.
        #[test]
        fn jbsq_invariants(executors in 1usize..6, k in 1usize..4, ops in prop::collection::vec(op(), 0..300)) {
            let mut d: Jbsq<(RequestClass, u32)> =
                Jbsq::new(JbsqConfig { executors, k, max_waiting: usize::MAX }).unwrap();
            let mut next_id = 0u32;
            let mut last_dispatched = [None::<u32>, None];
            let mut running: Vec<usize> = vec![0; executors];
            let mut dispatched = 0usize;
            for op in ops {
                match op {
                    Op::Arrive(internal) => {
                        let class = if internal { RequestClass::Internal } else { RequestClass::External };
                        d.submit(class, (class, next_id)).unwrap();
                        next_id += 1;
                    }
                    Op::Complete(e) => {
                        let e = e % executors;
                        let res = d.complete(e);
                        if running[e] == 0 {
                            prop_assert_eq!(res, Err(DispatchError::NothingOutstanding));
                        } else {
                            prop_assert_eq!(res, Ok(()));
                            running[e] -= 1;
                        }
                    }
                }
                // JBSQ's choice is the least-loaded eligible executor; verify against a model.
                while let Some(x) = d.next_dispatch() {
                    let min = *running.iter().min().unwrap();
                    prop_assert_eq!(running[x.executor], min);
                    prop_assert!(running[x.executor] < k);
                    let (class, id) = x.request;
                    prop_assert_eq!(class, x.class);
                    let slot = (class == RequestClass::External) as usize;
                    prop_assert!(last_dispatched[slot].is_none_or(|p| p < id), "FIFO within class");
                    last_dispatched[slot] = Some(id);
                    if class == RequestClass::External {
                        prop_assert_eq!(d.waiting(RequestClass::Internal), 0);
                    }
                    running[x.executor] += 1;
                    dispatched += 1;
                }
                for (e, &n) in running.iter().enumerate() {
                    prop_assert!(n <= k);
                    prop_assert_eq!(d.outstanding(e), n);
                }
                let waiting = d.waiting(RequestClass::Internal) + d.waiting(RequestClass::External);
                if waiting > 0 {
                    prop_assert!(running.iter().all(|&n| n == k), "work-conserving");
                }
                prop_assert_eq!(dispatched + waiting, next_id as usize);
            }
        }
    }

    #[test]
    fn resumed_steps_bypass_the_bound_and_go_first() {
        let mut config = JbsqConfig::new(1);
        config.max_waiting = 1;
        let mut d = Jbsq::new(config).unwrap();
        d.submit(RequestClass::External, 1).unwrap();
        d.submit(RequestClass::Internal, 2).unwrap();
        assert!(d.submit(RequestClass::Internal, 3).is_err());
        d.resume(4);
        assert_eq!(d.waiting(RequestClass::Internal), 2);
        let order: Vec<i32> = core::iter::from_fn(|| {
            let r = d.next_dispatch().map(|x| x.request);
            let _ = d.complete(0);
            r
        })
        .collect();
        assert_eq!(order, vec![2, 4, 1]);
    }
}
