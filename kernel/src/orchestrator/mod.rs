//! The orchestrators: one per group of cores, each with its central queues and JBSQ(k)
//! dispatch to the group's executors (Jord §3.3).
//!
//! The CPUs split into groups of consecutive cores (`fjord_faas::core_groups`; one group by
//! default, `orch_group=N` on the command line for groups of N). The first core of a group is
//! its orchestrator: it calls [`poll`], which pushes requests from the group's central queues to
//! its executors. CPU 0 orchestrates group 0 from the network poll loop (or the in-guest load
//! generator); the orchestrator cores of other groups run [`serve`]. Every other CPU is an
//! executor: a request runs there, in the executor's idle loop, and its completion is recorded
//! for the submitter. With JBSQ(k) an executor holds at most `k` requests (one running, the
//! rest queued locally); the rest wait centrally, nested (internal) requests before external
//! ones. External requests go to the groups in turn; a nested call or a resumed caller stays in
//! the group of its request. On a one-CPU machine CPU 0 is also the only executor and [`poll`]
//! runs requests inline.

pub mod metrics;

use crate::arch::user::UserFault;
use crate::arch::{cpu, percpu, smp};
use alloc::boxed::Box;
use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use fjord_faas::jbsq::{Dispatcher, Jbsq, JbsqConfig, RequestClass};
use fjord_libos::function::FnError;
use fjord_pd::{Error as PdError, PdId};
use spin::Mutex;

/// The work of one request; returns the response bytes or why it failed.
pub type Work = Box<dyn FnOnce() -> Outcome + Send>;

/// What a request ends with: the response, or how the invocation failed.
pub type Outcome = Result<Vec<u8>, InvokeFailure>;

/// How an invocation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InvokeFailure {
    /// No function of that name is deployed.
    NoSuchFunction,
    /// The request exceeds the runtime's largest request.
    RequestTooLarge,
    /// Code in `pd` raised an exception; `fault` has the vector, address and access.
    Faulted {
        /// The PD that faulted.
        pd: PdId,
        /// The fault.
        fault: UserFault,
    },
    /// The function ran past its time limit.
    TimedOut {
        /// The PD that was stopped.
        pd: PdId,
    },
    /// Jord had no memory for the PD, the ArgBuf or the instance VMA.
    OutOfMemory,
    /// The function returned one of the ABI's errors.
    Function(FnError),
    /// The function returned a value that is neither a response that fits nor an error code.
    BadResponse(u64),
    /// PrivLib refused an operation of the sequence (a bug or a hostile function).
    Refused(PdError),
    /// The orchestrator's queue was full.
    Busy,
    /// The module is a program (a μprocess), not a function.
    NotAFunction,
}

impl From<crate::jord::exec::CallError> for InvokeFailure {
    fn from(e: crate::jord::exec::CallError) -> Self {
        use crate::jord::exec::CallError;
        match e {
            CallError::Faulted { pd, fault } => InvokeFailure::Faulted { pd, fault },
            CallError::TimedOut { pd } => InvokeFailure::TimedOut { pd },
            CallError::Refused(e) => InvokeFailure::Refused(e),
        }
    }
}

impl core::fmt::Display for InvokeFailure {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            InvokeFailure::NoSuchFunction => f.write_str("no such function"),
            InvokeFailure::RequestTooLarge => f.write_str("request too large"),
            InvokeFailure::Faulted { pd, fault } => write!(
                f,
                "function faulted in {pd:?}: vector {} {:?} at {:#x} (rip {:#x})",
                fault.vector, fault.access, fault.addr, fault.rip
            ),
            InvokeFailure::TimedOut { pd } => write!(f, "function timed out in {pd:?}"),
            InvokeFailure::OutOfMemory => f.write_str("out of memory"),
            InvokeFailure::Function(e) => write!(f, "function error {e:?}"),
            InvokeFailure::BadResponse(v) => write!(f, "bad response value {v:#x}"),
            InvokeFailure::Refused(e) => write!(f, "PrivLib refused: {e:?}"),
            InvokeFailure::Busy => f.write_str("the orchestrator's queue is full"),
            InvokeFailure::NotAFunction => {
                f.write_str("a program, not a function: start it as a process")
            }
        }
    }
}

/// A request's identity, returned by [`submit`].
pub type Ticket = u64;

/// The identity of the request a [`TaskWork`] step belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobInfo {
    /// The request's ticket (kept by every step of the request).
    pub ticket: Ticket,
    /// TSC when the orchestrator first received the request.
    pub arrived: u64,
    /// The orchestrator group serving the request.
    pub group: usize,
}

impl JobInfo {
    /// Nobody takes the request's result (a μprocess's child, whose parent learns of its end
    /// through `waitpid`): its ticket has [`UNOBSERVED`] set, and its completion is counted,
    /// not recorded for [`take`], and wakes no orchestrator core.
    fn unobserved(&self) -> bool {
        self.ticket & UNOBSERVED != 0
    }
}

/// The bit of a [`Ticket`] that marks a request whose result nobody takes
/// ([`submit_here`]).
pub const UNOBSERVED: Ticket = 1 << 63;

/// One step of a request that may suspend: it returns the request's result when the request
/// finished, or `None` when it continues in a later step (submitted with [`resume`]) or belongs
/// to another request (a nested call).
pub enum TaskWork {
    /// A closure.
    Closure(Box<dyn FnOnce(JobInfo) -> Option<Outcome> + Send>),
    /// A function with its argument: queued without allocating (a μprocess's next slice).
    Call(fn(u64, JobInfo) -> Option<Outcome>, u64),
}

impl TaskWork {
    /// The step `f`.
    pub fn new(f: impl FnOnce(JobInfo) -> Option<Outcome> + Send + 'static) -> TaskWork {
        TaskWork::Closure(Box::new(f))
    }

    /// Runs the step as part of the request `info`.
    fn run(self, info: JobInfo) -> Option<Outcome> {
        match self {
            TaskWork::Closure(f) => f(info),
            TaskWork::Call(f, arg) => f(arg, info),
        }
    }
}

/// One step, in a central queue or an executor's step queue: kept to eight words, as it is
/// moved on every dispatch.
struct Job {
    info: JobInfo,
    dispatched: u64,
    work: TaskWork,
    /// The group and the executor within it the step was pushed to (set at dispatch).
    group: u16,
    executor: u16,
    /// Whether the executor had nothing else outstanding when it got this step.
    to_idle: bool,
    /// Whether the executor queued this step for itself ([`resume_here`]); `dispatched` then
    /// holds the ticks queueing it took until it is taken off the queue.
    local: bool,
}

impl Job {
    /// A step of the request `info` not yet dispatched.
    fn new(info: JobInfo, work: TaskWork) -> Job {
        Job {
            info,
            dispatched: 0,
            work,
            group: 0,
            executor: 0,
            to_idle: false,
            local: false,
        }
    }
}

/// A finished request.
pub struct Done {
    /// The response or the failure.
    pub result: Outcome,
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
    /// Requests (first steps: external requests and nested calls) accepted into a central
    /// queue; the later steps of suspended requests (resumptions) are not counted here.
    pub submitted: u64,
    /// Requests refused because the central queue was full.
    pub rejected: u64,
    /// Steps pushed to an executor (first steps and resumptions).
    pub dispatched: u64,
    /// Requests completed (with a result for their submitter; nested calls report to their
    /// caller instead and count as suspended).
    pub completed: u64,
    /// Steps that ended with their request suspended or handed on (nested calls).
    pub suspended: u64,
    /// Sum over every step run of the TSC ticks from its dispatch by the orchestrator to its
    /// start on the executor (the hand-off: run-on-CPU queue, IPI, wake-up).
    pub handoff_ticks: u64,
    /// [`OrchestratorStats::handoff_ticks`] of the steps dispatched to an idle executor only:
    /// the cost of dispatch itself, without waiting behind other work on the executor.
    pub idle_handoff_ticks: u64,
    /// Steps dispatched to an idle executor.
    pub idle_handoffs: u64,
    /// Resumed callers an executor queued for itself (see [`resume_here`]), not counted in
    /// [`OrchestratorStats::dispatched`].
    pub local_resumes: u64,
    /// New internal requests an executor queued for itself (see [`submit_here`]), not counted
    /// in [`OrchestratorStats::dispatched`].
    pub local_submits: u64,
    /// Sum of the TSC ticks from queueing to start of those steps.
    pub local_handoff_ticks: u64,
}

/// One orchestrator group: its central queues and executors.
struct Group {
    jbsq: Jbsq<Job>,
    orchestrator_cpu: usize,
    executor_cpus: Vec<usize>,
}

struct State {
    groups: Vec<Group>,
    /// The group each CPU executes for (`usize::MAX` for pure orchestrator cores).
    group_of_cpu: Vec<usize>,
    /// The group the next external request goes to.
    next_group: usize,
    done: BTreeMap<Ticket, Done>,
    next: Ticket,
    stats: OrchestratorStats,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

/// Requests completed with a result, for [`completions`].
static COMPLETIONS: AtomicU64 = AtomicU64::new(0);

/// Advanced, under the state lock, by every change that may let a step be dispatched: a step
/// queued, an executor's slot freed, a new layout.
static DISPATCH_EPOCH: AtomicU64 = AtomicU64::new(1);

/// Per CPU: the [`DISPATCH_EPOCH`] at which its last [`poll`] scan found nothing to dispatch
/// (0: none yet). Read and written only by that CPU.
static IDLE_AT: [AtomicU64; smp::MAX_CPUS] = [const { AtomicU64::new(0) }; smp::MAX_CPUS];

/// Notes, under the state lock, a change that may make a step dispatchable.
fn dispatch_may_change() {
    DISPATCH_EPOCH.fetch_add(1, Ordering::Release);
}

/// Per CPU: the orchestrator core of the group it executes for (itself when it executes for
/// none), read without the state lock by [`orchestrator_at_work`].
static ORCHESTRATOR_OF: [AtomicUsize; smp::MAX_CPUS] =
    [const { AtomicUsize::new(usize::MAX) }; smp::MAX_CPUS];

/// Whether the orchestrator core of executor CPU `index`'s group is another CPU and at work
/// (not halted waiting for an interrupt): receiving, dispatching or collecting requests.
pub(crate) fn orchestrator_at_work(index: usize) -> bool {
    let Some(o) = ORCHESTRATOR_OF
        .get(index)
        .map(|o| o.load(Ordering::Relaxed))
    else {
        return false;
    };
    o != index && o < smp::MAX_CPUS && !smp::is_halted(o)
}

/// Background work the executors do when they have no step to run, and what follows a
/// response: the layers above install it ([`set_background_work`]); the orchestrator calls
/// nothing above itself.
#[derive(Clone, Copy)]
pub struct BackgroundWork {
    /// Units of work waiting.
    pub waiting: fn() -> usize,
    /// On executor `cpu`, waits while its group's orchestrator core is at work (briefly);
    /// false when a step is coming for the executor, so the work should not start now.
    pub wait_for_quiet: fn(cpu: usize) -> bool,
    /// Runs one unit of work.
    pub run_one: fn(),
    /// Runs on the executor right after a request completed; `requests_waiting` says whether
    /// another step is already queued for it or waits centrally.
    pub after_response: fn(requests_waiting: bool),
}

static BACKGROUND: spin::Once<BackgroundWork> = spin::Once::new();

/// What an orchestrator core does each time it looks for work, before dispatching (waking
/// μprocesses whose sleep is over).
static ON_POLL: spin::Once<fn()> = spin::Once::new();

/// Installs the executors' background work (the first call wins).
pub fn set_background_work(work: BackgroundWork) {
    BACKGROUND.call_once(|| work);
}

/// Installs what an orchestrator core runs each time it looks for work (the first call wins).
pub fn set_poll_hook(hook: fn()) {
    ON_POLL.call_once(|| hook);
}

fn on_poll() {
    if let Some(hook) = ON_POLL.get() {
        hook();
    }
}

/// Each executor CPU's queue of dispatched steps, run by its idle loop ([`run_queued`]). Typed
/// rather than boxed closures, so a dispatch allocates nothing once a queue has grown.
static STEPS: [Mutex<VecDeque<Job>>; smp::MAX_CPUS] =
    [const { Mutex::new(VecDeque::new()) }; smp::MAX_CPUS];

/// The executors' [`smp::IdleHook`]: runs the next step queued for CPU `index`, if any.
fn run_queued(index: usize) -> bool {
    let popped = cpu::rdtsc();
    let Some(job) = STEPS.get(index).and_then(|q| q.lock().pop_front()) else {
        // Nothing to serve: restore an instance whose request has ended, if one waits and no
        // step is on its way here (a caller resumed after its nested call, say).
        let Some(work) = BACKGROUND.get() else {
            return false;
        };
        if (work.waiting)() == 0 || steps_coming(index) {
            return false;
        }
        cpu::enable_interrupts();
        // A restore is background work: it waits for the orchestrator core to go idle.
        if (work.wait_for_quiet)(index) {
            (work.run_one)();
        }
        return true;
    };
    cpu::enable_interrupts();
    execute_popped(job, popped);
    true
}

/// Executes `job`, taken off this executor's step queue at `popped` (TSC).
#[inline(always)]
fn execute_popped(mut job: Job, popped: u64) {
    if job.local {
        // A step the executor queued for itself: its hand-off is what queueing it cost (kept
        // in `dispatched`) plus taking it off the queue, not the end of the step before it.
        job.dispatched = popped.saturating_sub(job.dispatched);
    }
    execute(job);
}

/// Whether a step is dispatched to executor CPU `index` or waits centrally in its group (every
/// executor of the group is then at its JBSQ bound, or about to get it).
pub(crate) fn steps_coming(index: usize) -> bool {
    with(|s| {
        let Some(g) = s.group_of_cpu.get(index).and_then(|&g| s.groups.get(g)) else {
            return false;
        };
        let mine = g.executor_cpus.iter().position(|&c| c == index);
        mine.is_some_and(|e| g.jbsq.outstanding(e) > 0)
            || g.jbsq.waiting(RequestClass::Internal) + g.jbsq.waiting(RequestClass::External) > 0
    })
}

/// Why a request was not accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubmitError {
    /// The central queue of its class is full (HTTP 503).
    QueueFull,
}

/// (Re)creates the orchestrators with JBSQ(`k`): one group of every CPU.
pub fn init(k: usize) {
    init_groups(k, 0);
}

/// (Re)creates the orchestrators with JBSQ(`k`) over groups of `group_size` CPUs (0: one group;
/// see `fjord_faas::core_groups::layout`), and starts [`serve`] on the orchestrator core of
/// every group but CPU 0's. Requests still queued under the previous layout are dropped.
pub fn init_groups(k: usize, group_size: usize) {
    let n = smp::cpu_count();
    let layout = fjord_faas::core_groups::layout(n, group_size);
    let mut group_of_cpu = alloc::vec![usize::MAX; n.max(1)];
    let groups: Vec<Group> = layout
        .into_iter()
        .enumerate()
        .map(|(i, g)| {
            for &c in &g.executors {
                group_of_cpu[c] = i;
            }
            let mut config = JbsqConfig::new(g.executors.len());
            config.k = k.max(1);
            Group {
                jbsq: Jbsq::new(config).expect("at least one executor and k >= 1"),
                orchestrator_cpu: g.orchestrator,
                executor_cpus: g.executors,
            }
        })
        .collect();
    let serving: Vec<usize> = groups
        .iter()
        .map(|g| g.orchestrator_cpu)
        .filter(|&c| c != 0)
        .collect();
    let state = State {
        groups,
        group_of_cpu,
        next_group: 0,
        done: BTreeMap::new(),
        next: 1,
        stats: OrchestratorStats::default(),
    };
    for (c, o) in ORCHESTRATOR_OF.iter().enumerate() {
        let g = state.group_of_cpu.get(c).and_then(|&g| state.groups.get(g));
        o.store(g.map_or(c, |g| g.orchestrator_cpu), Ordering::Relaxed);
    }
    cpu::without_interrupts(|| {
        for g in &state.groups {
            for &c in &g.executor_cpus {
                if let Some(q) = STEPS.get(c) {
                    q.lock().reserve(2 * k.max(1) + 4);
                }
            }
        }
        *STATE.lock() = Some(state);
        dispatch_may_change();
    });
    smp::set_idle_hook(run_queued);
    for c in serving {
        if smp::run_on(c, move || serve(c)).is_err() {
            log::error!("orchestrator: CPU {c} is offline");
        }
    }
}

/// The orchestrator loop of a group's orchestrator core other than CPU 0: dispatches, and halts
/// until an IPI (a submission, a completion) or 10 ms pass. Returns when a new layout no longer
/// makes `cpu` an orchestrator.
pub fn serve(cpu_index: usize) {
    while with(|s| s.groups.iter().any(|g| g.orchestrator_cpu == cpu_index)) {
        idle_until(crate::arch::time::deadline_after_ms(10), &mut || false);
    }
    // Back to an executor's periodic tick (time limits of user code rely on it).
    crate::arch::time::start_tick();
}

/// Dispatches what the orchestrator can, then halts the orchestrator core until `deadline` or
/// an interrupt, unless `done()` holds. A dispatch leaves nothing more to dispatch until an
/// executor reports back (which interrupts the halt), so the core halts right after it; the
/// timer that ends the halt is armed before the dispatch, so that it does not stand between a
/// dispatch and the executor's start where the vCPUs take turns (TCG). Interrupts stay off
/// from the dispatch to the halt (`sti; hlt` is atomic), so a wake-up IPI or the timer that
/// arrives meanwhile ends the halt at once instead of being lost.
pub fn idle_until(deadline: u64, done: &mut dyn FnMut() -> bool) {
    cpu::disable_interrupts();
    let now = cpu::rdtsc();
    if now < deadline {
        crate::arch::time::arm_oneshot(deadline - now);
    }
    on_poll();
    poll();
    // On a one-CPU machine `poll` runs steps inline, with interrupts on: the timer may have
    // fired meanwhile, so halt only before the deadline.
    if !done() && cpu::rdtsc() < deadline {
        smp::halt_idle(percpu::cpu_index());
    } else {
        cpu::enable_interrupts();
    }
}

/// Number of orchestrator groups.
pub fn groups() -> usize {
    with(|s| s.groups.len())
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
    (info, unobserved): (Option<JobInfo>, bool),
    work: TaskWork,
) -> Result<(Ticket, usize), SubmitError> {
    let arrived = cpu::rdtsc();
    let here = percpu::cpu_index();
    with(|s| {
        let info = info.unwrap_or_else(|| {
            let ticket = new_ticket(s, unobserved);
            // A nested request stays in the group of the executor that made it; external
            // requests go to the groups in turn.
            let mine = s
                .group_of_cpu
                .get(here)
                .copied()
                .filter(|&g| g < s.groups.len());
            let group = match (class, mine) {
                (RequestClass::Internal, Some(g)) => g,
                _ => {
                    let g = s.next_group % s.groups.len();
                    s.next_group = s.next_group.wrapping_add(1);
                    g
                }
            };
            JobInfo {
                ticket,
                arrived,
                group,
            }
        });
        let job = Job::new(info, work);
        let group = info.group.min(s.groups.len() - 1);
        match s.groups[group].jbsq.submit(class, job) {
            Ok(()) => {
                dispatch_may_change();
                s.stats.submitted += 1;
                Ok((info.ticket, group))
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
    let (t, group) = enqueue(class, (None, false), TaskWork::new(move |_| Some(work())))?;
    wake_orchestrator_of(Some(group));
    Ok(t)
}

/// Queues the first step of a request that may suspend (see [`TaskWork`]); a nested call
/// (internal class) submitted from an executor wakes the orchestrator core to dispatch it.
pub fn submit_task(class: RequestClass, work: TaskWork) -> Result<Ticket, SubmitError> {
    let (t, group) = enqueue(class, (None, false), work)?;
    wake_orchestrator_of(Some(group));
    Ok(t)
}

/// Queues a later step of the request `info` in the internal queue (strict priority over
/// external requests), to run on whichever executor JBSQ picks. Never refused (see
/// `Jbsq::resume`).
pub fn resume(info: JobInfo, work: TaskWork) {
    let job = Job::new(info, work);
    let group = with(|s| {
        let g = info.group.min(s.groups.len() - 1);
        s.groups[g].jbsq.resume(job);
        dispatch_may_change();
        g
    });
    wake_orchestrator_of(Some(group));
}

/// Resumes the request `info` (a caller whose nested call just finished on this executor) on
/// this executor, through its own step queue, when JBSQ admits it there (see
/// `Jbsq::resume_on`: below the bound, no internal request waiting); otherwise as [`resume`].
/// The continuation stays with the executor that ran its callee, as in the paper's executor
/// loop, and no dispatch by the orchestrator core (queue, IPI, wake-up) is needed.
pub fn resume_here(info: JobInfo, work: TaskWork) {
    let t0 = cpu::rdtsc();
    let here = percpu::cpu_index();
    let admitted = with(|s| {
        let (g, e) = admit_here(s, here)?;
        s.stats.local_resumes += 1;
        Some((g, e))
    });
    let Some((g, e)) = admitted else {
        return resume(info, work);
    };
    push_here(Job::new(info, work), (here, g, e), t0);
}

/// Runs, nested in the step under way on this executor, the step queued first here when it is
/// one of the request `ticket` (a μprocess's child, which its parent is about to block waiting
/// for): the step that would have run next runs now, so the queue keeps its order. Whether one
/// ran.
pub fn run_next_here(ticket: Ticket) -> bool {
    let popped = cpu::rdtsc();
    let Some(q) = STEPS.get(percpu::cpu_index()) else {
        return false;
    };
    let job = cpu::without_interrupts(|| {
        let mut q = q.lock();
        if q.front().is_some_and(|j| j.info.ticket == ticket) {
            q.pop_front()
        } else {
            None
        }
    });
    let Some(job) = job else {
        return false;
    };
    execute_popped(job, popped);
    true
}

/// Submits a new internal request made on an executor (a μprocess's forked or spawned child) to
/// this executor's own step queue when JBSQ admits it there, as [`resume_here`] does for a
/// woken step (below the bound, no internal request waiting), so that it needs no dispatch by
/// the orchestrator core; otherwise (on the orchestrator core, or not admitted) as
/// [`submit_task`].
pub fn submit_here(work: TaskWork, unobserved: bool) -> Result<Ticket, SubmitError> {
    let t0 = cpu::rdtsc();
    let here = percpu::cpu_index();
    let admitted = with(|s| {
        let (g, e) = admit_here(s, here)?;
        s.stats.submitted += 1;
        s.stats.local_submits += 1;
        let info = JobInfo {
            ticket: new_ticket(s, unobserved),
            arrived: t0,
            group: g,
        };
        Some((info, g, e))
    });
    let Some((info, g, e)) = admitted else {
        let (t, group) = enqueue(RequestClass::Internal, (None, unobserved), work)?;
        wake_orchestrator_of(Some(group));
        return Ok(t);
    };
    push_here(Job::new(info, work), (here, g, e), t0);
    Ok(info.ticket)
}

/// A ticket no request had, with [`UNOBSERVED`] set for a request nobody observes.
fn new_ticket(s: &mut State, unobserved: bool) -> Ticket {
    let ticket = s.next;
    s.next += 1;
    if unobserved {
        ticket | UNOBSERVED
    } else {
        ticket
    }
}

/// Admits one more step on executor CPU `here` when JBSQ allows it there (below the bound, no
/// internal request waiting: `Jbsq::resume_on`): its group and executor index. `None` on the
/// orchestrator core, which runs its group's steps inline from its poll loop.
#[inline(always)]
fn admit_here(s: &mut State, here: usize) -> Option<(usize, usize)> {
    let g = *s.group_of_cpu.get(here)?;
    let group = s.groups.get_mut(g)?;
    if group.orchestrator_cpu == here {
        return None;
    }
    let e = group.executor_cpus.iter().position(|&c| c == here)?;
    group.jbsq.resume_on(e).then_some((g, e))
}

/// Queues `job`, admitted on executor `e` of group `g` (this CPU, `here`), on this CPU's step
/// queue; `t0`: when its queueing began.
#[inline(always)]
fn push_here(mut job: Job, (here, g, e): (usize, usize, usize), t0: u64) {
    job.local = true;
    job.group = g as u16;
    job.executor = e as u16;
    // This CPU runs its queue as soon as the step under way ends: no wake-up. (An executor
    // CPU is below `MAX_CPUS`, so its queue exists.)
    if let Some(q) = STEPS.get(here) {
        cpu::without_interrupts(|| {
            let mut q = q.lock();
            // What queueing cost, measured up to the push (see `run_queued`).
            job.dispatched = cpu::rdtsc() - t0;
            q.push_back(job);
        });
    }
}

/// Interrupts the orchestrator core of `group` (of this CPU's group when `None`) if it is
/// another CPU: it may have halted waiting for work.
fn wake_orchestrator_of(group: Option<usize>) {
    let here = percpu::cpu_index();
    let target = with(|s| {
        let g = group
            .or_else(|| s.group_of_cpu.get(here).copied())
            .filter(|&g| g < s.groups.len())
            .unwrap_or(0);
        s.groups[g].orchestrator_cpu
    });
    wake_orchestrator(target);
}

/// Interrupts the orchestrator core `cpu` unless it is this CPU.
fn wake_orchestrator(cpu: usize) {
    if cpu != percpu::cpu_index() {
        // An orchestrator core is online; there is nothing to do if it were not.
        let _ = smp::wake(cpu);
    }
}

/// Pushes every request JBSQ allows to its executor, in the groups this CPU orchestrates.
/// Returns how many were dispatched.
///
/// One scan under the state lock dispatches everything it can; the executors are woken once
/// the lock is released. A poll that finds the dispatch epoch where this CPU's last scan found
/// nothing to dispatch returns at once, without the lock: nothing has been queued or freed
/// since.
pub fn poll() -> usize {
    let here = percpu::cpu_index();
    let Some(idle_at) = IDLE_AT.get(here) else {
        return 0;
    };
    if idle_at.load(Ordering::Relaxed) == DISPATCH_EPOCH.load(Ordering::Acquire) {
        return 0;
    }
    let mut n = 0;
    loop {
        let mut woken = 0u64;
        let local = with(|s| {
            let epoch = DISPATCH_EPOCH.load(Ordering::Relaxed);
            for (i, g) in s.groups.iter_mut().enumerate() {
                if g.orchestrator_cpu != here {
                    continue;
                }
                while let Some(d) = g.jbsq.next_dispatch() {
                    s.stats.dispatched += 1;
                    n += 1;
                    let mut job = d.request;
                    job.to_idle = g.jbsq.outstanding(d.executor) == 1;
                    job.group = i as u16;
                    job.executor = d.executor as u16;
                    job.dispatched = cpu::rdtsc();
                    let target = g.executor_cpus[d.executor];
                    if target == here {
                        return Some(job);
                    }
                    match STEPS.get(target) {
                        Some(q) => {
                            q.lock().push_back(job);
                            woken |= 1 << target;
                        }
                        None => log::error!(
                            "orchestrator: executor CPU {target} is beyond the CPU limit"
                        ),
                    }
                }
            }
            idle_at.store(epoch, Ordering::Relaxed);
            None
        });
        while woken != 0 {
            let target = woken.trailing_zeros() as usize;
            woken &= woken - 1;
            if smp::wake(target).is_err() {
                log::error!("orchestrator: executor CPU {target} is offline");
            }
        }
        match local {
            Some(job) => execute(job),
            None => return n,
        }
    }
}

fn execute(job: Job) {
    let started = cpu::rdtsc();
    let (group, executor) = (usize::from(job.group), usize::from(job.executor));
    let result = job.work.run(job.info);
    let finished = cpu::rdtsc();
    // A request completed (its response is published below), not one step of a nested call.
    let completed = result.is_some();
    // The result of a request nobody observes goes nowhere.
    let recorded = completed && !job.info.unobserved();
    let done = result.filter(|_| recorded).map(|result| Done {
        result,
        arrived: job.info.arrived,
        dispatched: job.dispatched,
        started,
        finished,
        cpu: percpu::cpu_index(),
    });
    let (requests_waiting, orchestrator) = with(|s| {
        let handoff = started.saturating_sub(job.dispatched);
        s.stats.handoff_ticks += handoff;
        if job.to_idle {
            s.stats.idle_handoff_ticks += handoff;
            s.stats.idle_handoffs += 1;
        }
        if job.local {
            s.stats.local_handoff_ticks += handoff;
        }
        match done {
            Some(done) => {
                s.done.insert(job.info.ticket, done);
                s.stats.completed += 1;
                COMPLETIONS.fetch_add(1, Ordering::Release);
            }
            None if completed => s.stats.completed += 1,
            None => s.stats.suspended += 1,
        }
        // A completion from before a re-layout has no slot to release any more.
        dispatch_may_change();
        let Some(g) = s.groups.get_mut(group) else {
            return (false, None);
        };
        if let Err(e) = g.jbsq.complete(executor) {
            log::error!("orchestrator: completion for executor {executor}: {e}");
        }
        // A step waiting centrally (every executor is then at its bound, this one included
        // until the next dispatch).
        let central =
            g.jbsq.waiting(RequestClass::Internal) + g.jbsq.waiting(RequestClass::External) > 0;
        // The orchestrator core, if it may have halted waiting for this: a completion (its
        // submitter may wait on it) or a slot for a step waiting centrally. A step that only
        // suspended, with nothing waiting, leaves it asleep: whatever is queued later wakes it.
        let orchestrator = (recorded || central).then_some(g.orchestrator_cpu);
        (g.jbsq.outstanding(executor) > 0 || central, orchestrator)
    });
    if let Some(cpu) = orchestrator {
        wake_orchestrator(cpu);
    }
    // Off the response path: once a request's response is out, the instances it and its
    // nested calls used are restored (a callee's restore waits, so its caller resumes first),
    // after the requests waiting for this executor when there are any: they take other idle
    // instances, and the executor restores these when it runs out of requests (`run_queued`).
    if let Some(work) = BACKGROUND.get().filter(|_| completed) {
        (work.after_response)(requests_waiting);
    }
}

/// Requests completed so far (with a result for their submitter), readable without the
/// orchestrator's lock: a waiter compares it with its last look before calling [`take`].
pub fn completions() -> u64 {
    COMPLETIONS.load(Ordering::Acquire)
}

/// Takes the result of `ticket` if it has finished.
pub fn take(ticket: Ticket) -> Option<Done> {
    with(|s| s.done.remove(&ticket))
}

/// Moves every finished request whose ticket `mine` accepts out of the orchestrator into
/// `out`, under one hold of its lock (the finished requests not yet taken are few).
pub fn take_matching(mine: impl Fn(Ticket) -> bool, out: &mut Vec<(Ticket, Done)>) {
    with(|s| {
        if s.done.is_empty() {
            return;
        }
        let tickets: Vec<Ticket> = s.done.keys().copied().filter(|&t| mine(t)).collect();
        for t in tickets {
            if let Some(d) = s.done.remove(&t) {
                out.push((t, d));
            }
        }
    });
}

/// Moves every finished request whose ticket is in `tickets` out of the orchestrator, in
/// ticket order, into `out`: one pass for a load generator with many requests in flight.
pub fn take_range(tickets: core::ops::Range<Ticket>, out: &mut Vec<(Ticket, Done)>) {
    with(|s| {
        if s.done.is_empty() {
            return;
        }
        let mut rest = s.done.split_off(&tickets.start);
        let mut beyond = rest.split_off(&tickets.end);
        out.extend(rest);
        s.done.append(&mut beyond);
    });
}

/// Dispatches until `done()` holds or `deadline` (a [`crate::arch::time`] deadline) passes;
/// whether it held (the orchestrator core's blocking path, for a condition other than a
/// ticket's end).
pub fn wait_until(done: impl Fn() -> bool, deadline: u64) -> bool {
    loop {
        if done() {
            return true;
        }
        if crate::arch::time::now() > deadline {
            return false;
        }
        on_poll();
        poll();
        core::hint::spin_loop();
    }
}

/// Dispatches and waits until `ticket` has finished (the orchestrator core's blocking path).
pub fn wait(ticket: Ticket) -> Done {
    loop {
        on_poll();
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

/// Number of executors, over every group.
pub fn executors() -> usize {
    with(|s| s.groups.iter().map(|g| g.executor_cpus.len()).sum())
}
