//! The orchestrator: one central queue per group of cores with JBSQ(k) dispatch to per-core
//! executors (Jord §3.3, DESIGN.md §4).
//!
//! CPU 0 is the orchestrator core: it runs the network poll loop (or the in-guest load
//! generator) and calls [`poll`], which pushes requests from the central queues to executors.
//! Every other CPU is an executor: a request runs there, in the executor's idle loop, and its
//! completion is recorded for the submitter. With JBSQ(k) an executor holds at most `k`
//! requests (one running, the rest queued locally); the rest wait centrally, nested (internal)
//! requests before external ones. On a one-CPU machine CPU 0 is also the only executor and
//! [`poll`] runs requests inline.

use crate::arch::{cpu, percpu, smp};
use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;
use fjord_faas::jbsq::{Dispatcher, Jbsq, JbsqConfig, RequestClass};
use spin::Mutex;

/// The work of one request; returns the response bytes or why it failed.
pub type Work = Box<dyn FnOnce() -> Result<Vec<u8>, String> + Send>;

/// A request's identity, returned by [`submit`].
pub type Ticket = u64;

/// The identity of the request a [`TaskWork`] step belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobInfo {
    /// The request's ticket (kept by every step of the request).
    pub ticket: Ticket,
    /// TSC when the orchestrator first received the request.
    pub arrived: u64,
}

/// One step of a request that may suspend: it returns the request's result when the request
/// finished, or `None` when it continues in a later step (submitted with [`resume`]) or belongs
/// to another request (a nested call).
pub type TaskWork = Box<dyn FnOnce(JobInfo) -> Option<Result<Vec<u8>, String>> + Send>;

enum JobWork {
    Simple(Work),
    Task(TaskWork),
}

struct Job {
    info: JobInfo,
    dispatched: u64,
    work: JobWork,
}

/// A finished request.
pub struct Done {
    /// The response or the failure.
    pub result: Result<Vec<u8>, String>,
    /// TSC when the orchestrator received the request.
    pub arrived: u64,
    /// TSC when the orchestrator pushed it to an executor.
    pub dispatched: u64,
    /// TSC when an executor started it.
    pub started: u64,
    /// TSC when it finished.
    pub finished: u64,
    /// The CPU that ran it.
    pub cpu: usize,
}

/// Dispatch counters.
#[derive(Clone, Copy, Debug, Default)]
pub struct OrchestratorStats {
    /// Requests accepted into a central queue.
    pub submitted: u64,
    /// Requests refused because the central queue was full.
    pub rejected: u64,
    /// Requests pushed to an executor.
    pub dispatched: u64,
    /// Requests completed.
    pub completed: u64,
    /// Steps that ended with their request suspended or handed on (nested calls).
    pub suspended: u64,
    /// Sum over every step run of the TSC ticks from its dispatch by the orchestrator to its
    /// start on the executor (the hand-off: run-on-CPU queue, IPI, wake-up).
    pub handoff_ticks: u64,
}

struct State {
    jbsq: Jbsq<Job>,
    executor_cpus: Vec<usize>,
    done: BTreeMap<Ticket, Done>,
    next: Ticket,
    stats: OrchestratorStats,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

/// Why a request was not accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubmitError {
    /// The central queue of its class is full (HTTP 503).
    QueueFull,
}

/// (Re)creates the orchestrator with JBSQ(`k`) over every CPU but the orchestrator core.
pub fn init(k: usize) {
    let n = smp::cpu_count();
    let executor_cpus: Vec<usize> = if n > 1 {
        (1..n).collect()
    } else {
        alloc::vec![0]
    };
    let mut config = JbsqConfig::new(executor_cpus.len());
    config.k = k.max(1);
    let jbsq = Jbsq::new(config).expect("at least one executor and k >= 1");
    let state = State {
        jbsq,
        executor_cpus,
        done: BTreeMap::new(),
        next: 1,
        stats: OrchestratorStats::default(),
    };
    cpu::without_interrupts(|| *STATE.lock() = Some(state));
}

fn with<R>(f: impl FnOnce(&mut State) -> R) -> R {
    cpu::without_interrupts(|| {
        let mut g = STATE.lock();
        if g.is_none() {
            drop(g);
            init(JbsqConfig::DEFAULT_K);
            g = STATE.lock();
        }
        f(g.as_mut().expect("initialised above"))
    })
}

fn enqueue(
    class: RequestClass,
    info: Option<JobInfo>,
    work: JobWork,
) -> Result<Ticket, SubmitError> {
    let arrived = cpu::rdtsc();
    with(|s| {
        let info = info.unwrap_or_else(|| {
            let ticket = s.next;
            s.next += 1;
            JobInfo { ticket, arrived }
        });
        let job = Job {
            info,
            dispatched: 0,
            work,
        };
        match s.jbsq.submit(class, job) {
            Ok(()) => {
                s.stats.submitted += 1;
                Ok(info.ticket)
            }
            Err(_) => {
                s.stats.rejected += 1;
                Err(SubmitError::QueueFull)
            }
        }
    })
}

/// Queues `work` in the central queue of `class`.
pub fn submit(class: RequestClass, work: Work) -> Result<Ticket, SubmitError> {
    enqueue(class, None, JobWork::Simple(work))
}

/// Queues the first step of a request that may suspend (see [`TaskWork`]); a nested call
/// (internal class) submitted from an executor wakes the orchestrator core to dispatch it.
pub fn submit_task(class: RequestClass, work: TaskWork) -> Result<Ticket, SubmitError> {
    let t = enqueue(class, None, JobWork::Task(work))?;
    if class == RequestClass::Internal {
        wake_orchestrator();
    }
    Ok(t)
}

/// Queues a later step of the request `info` in the internal queue (strict priority over
/// external requests), to run on whichever executor JBSQ picks. Never refused (see
/// `Jbsq::resume`).
pub fn resume(info: JobInfo, work: TaskWork) {
    let job = Job {
        info,
        dispatched: 0,
        work: JobWork::Task(work),
    };
    with(|s| s.jbsq.resume(job));
    wake_orchestrator();
}

/// Interrupts the orchestrator core (CPU 0) if it halted waiting for work.
fn wake_orchestrator() {
    if percpu::cpu_index() != 0
        && let Some(id) = smp::apic_id_of(0)
    {
        crate::arch::apic::send_ipi(id, crate::arch::trap::WORK_IPI_VECTOR);
    }
}

/// Pushes every request JBSQ allows to its executor. Returns how many were dispatched.
pub fn poll() -> usize {
    let mut n = 0;
    loop {
        let next = with(|s| {
            s.jbsq.next_dispatch().map(|d| {
                s.stats.dispatched += 1;
                (d.executor, s.executor_cpus[d.executor], d.request)
            })
        });
        let Some((executor, cpu_index, mut job)) = next else {
            return n;
        };
        job.dispatched = cpu::rdtsc();
        n += 1;
        let run = move || execute(executor, job);
        if cpu_index == percpu::cpu_index() {
            run();
        } else if smp::run_on(cpu_index, run).is_err() {
            log::error!("orchestrator: executor CPU {cpu_index} is offline");
        }
    }
}

fn execute(executor: usize, job: Job) {
    let started = cpu::rdtsc();
    let result = match job.work {
        JobWork::Simple(work) => Some(work()),
        JobWork::Task(work) => work(job.info),
    };
    let finished = cpu::rdtsc();
    let done = result.map(|result| Done {
        result,
        arrived: job.info.arrived,
        dispatched: job.dispatched,
        started,
        finished,
        cpu: percpu::cpu_index(),
    });
    with(|s| {
        s.stats.handoff_ticks += started.saturating_sub(job.dispatched);
        match done {
            Some(done) => {
                s.done.insert(job.info.ticket, done);
                s.stats.completed += 1;
            }
            None => s.stats.suspended += 1,
        }
        if let Err(e) = s.jbsq.complete(executor) {
            log::error!("orchestrator: completion for executor {executor}: {e}");
        }
    });
    // Wake the orchestrator core if it halted waiting for work to finish.
    wake_orchestrator();
}

/// Takes the result of `ticket` if it has finished.
pub fn take(ticket: Ticket) -> Option<Done> {
    with(|s| s.done.remove(&ticket))
}

/// Dispatches and waits until `ticket` has finished (the orchestrator core's blocking path).
pub fn wait(ticket: Ticket) -> Done {
    loop {
        poll();
        if let Some(d) = take(ticket) {
            return d;
        }
        core::hint::spin_loop();
    }
}

/// Submits the request `work` (which may suspend) as an external request and waits for it.
pub fn run_external_task(work: TaskWork) -> Result<Done, SubmitError> {
    submit_task(RequestClass::External, work).map(wait)
}

/// Submits `work` as an external request and waits for it.
pub fn run_external(work: Work) -> Result<Done, SubmitError> {
    submit(RequestClass::External, work).map(wait)
}

/// Dispatch counters so far.
pub fn stats() -> OrchestratorStats {
    with(|s| s.stats)
}

/// Number of executors.
pub fn executors() -> usize {
    with(|s| s.executor_cpus.len())
}
