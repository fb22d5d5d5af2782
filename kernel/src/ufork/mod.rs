//! μprocesses (μFork, SOSP '25): programs that run `main` until they exit, time-sliced on the
//! executor CPUs beside function requests, with `fork`, `waitpid`, `exit`, `getpid`,
//! `getppid` and `sched_yield`.
//!
//! A μprocess is a long-lived PD on the executors' machinery: each time slice is one step of an
//! orchestrator request (the μprocess's own), run with the timer deadline of the slice; a slice
//! that runs out saves the context and queues the next step, a μprocess blocked in `waitpid`
//! queues nothing until a child ends, so it takes no CPU. The PID bookkeeping (parents,
//! children, zombies, `waitpid`) is `fjord_ufork::process`.
//!
//! Memory: a μprocess has one *area*, a VMA of its own holding its program's image (see
//! [`crate::module::ProgramArea`]: code and read-only pages shared with every μprocess of the
//! program, statics, GOT and vtables its own), its stack, the heap allocator's header and its
//! heap, aligned to its size class. Everything it can point to is in its area.
//!
//! `fork` (full-copy mode): the child gets a new PD and an area of the same size class at
//! another address; the pages of the parent's area it ever touched are copied into it (the others
//! are zero in both) and every tagged word (precise or inferred tags, `fjord_ufork::source`) is
//! relocated by `child - parent`, as are the instruction, stack, frame and thread pointers and
//! every general register that points into the area. The child's PD has no right on the
//! parent's area: a pointer the relocation missed faults in the child instead of reaching the
//! parent's memory. The lazy modes (copy-on-access, copy-on-pointer-access, copy-on-write) defer
//! the pages to the child's first access ([`lazy`]). What differs from μFork on
//! CHERI: tags the kernel did not write are inferred from values (an integer that happens to
//! look like an address in the area is relocated too).

pub mod lazy;
pub mod metrics;
pub mod snapshot;
pub mod tags;

use crate::arch::cpu;
use crate::arch::user::{self, UserContext, UserExit};
use crate::jord;
use crate::module::LoadedFunction;
use crate::module::instance::{self, Instance};
use crate::orchestrator::{self, JobInfo, Outcome, Ticket};
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use fjord_libos::abi::{Error as AbiError, Sysno, encode};
use fjord_pd::PdId;
use fjord_ufork::area::Area;
use fjord_ufork::copy_mode::{CopyMode, IsolationLevel};
use fjord_ufork::fd::{FdTable, OpenFiles};
use fjord_ufork::pid_map::PidMap;
use fjord_ufork::pipe::PipeTable;
use fjord_ufork::process::{
    BlockReason, ExitStatus, Pid, ProcError, ProcessTable, Signal, WaitOptions, WaitOutcome,
    WaitTarget,
};
use fjord_ufork::relocate::{Gpr, Registers, relocate_page_tallied};
use fjord_ufork::source::Tally;
use fjord_ufork::tags::{PageWords, SLOTS_PER_PAGE, ShadowTags, page_words};
use spin::Mutex;

pub mod files;
pub mod in_call;
pub mod net;

/// Most μprocesses at once (zombies included).
pub const MAX_PROCESSES: usize = 256;
/// A time slice, in milliseconds.
pub const SLICE_MS: u64 = 10;

/// A μprocess's kernel state besides its PID bookkeeping.
struct Proc {
    func: Arc<LoadedFunction>,
    instance: Instance,
    /// Base and length of its area VMA.
    area: (u64, u64),
    /// The capability its plain pointers carry (data permissions over its area VMA), against
    /// which the kernel checks what it passes (`files::area_offset`); `None` for an area larger
    /// than the format represents.
    area_cap: Option<(Area, fjord_ufork::cap::Cap)>,
    /// Its context while it is not running.
    ctx: Option<UserContext>,
    /// The system call it is blocked in, re-issued when it is woken.
    blocked: Option<Blocked>,
    /// Its descriptors.
    fds: FdTable,
    /// The step it was parked at, to queue its next step when woken.
    parked: Option<JobInfo>,
    /// The orchestrator request its steps belong to.
    ticket: Ticket,
    /// Whether the request's completion is recorded for someone to take: a child of init's
    /// carries its status to whoever started it; a μprocess's child's is not recorded (its
    /// parent learns of its end through `waitpid`).
    observed: bool,
    /// How its `fork` calls copy its memory unless a call says otherwise.
    mode: CopyMode,
    /// How strongly it is isolated (inherited by its children).
    isolation: IsolationLevel,
    /// Its tag source: its precise tags (the pointers the kernel wrote into its area) read as
    /// the boot option `tags=` chose (shared, unchanged, with the lazy forks that read them).
    /// Given up when it ends (a zombie has no memory to read tags of).
    source: Option<tags::Source>,
    /// The bound on its tree's μprocesses: the `max_processes` of the program at its root.
    bound: u16,
    /// Held still by a checkpoint ([`snapshot::freeze`]): its steps park instead of running.
    frozen: bool,
    /// A step arrived while it was frozen: the thaw queues it again.
    missed: bool,
    /// Restored from a checkpoint: its area may still lack pages its pager provides.
    restored: bool,
}

/// How a μprocess started by the kernel runs: its default copy mode and its isolation level
/// (a forked child inherits both from its parent).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpawnOptions {
    /// The copy mode of its `fork` calls (default: copy-on-pointer-access).
    pub mode: CopyMode,
    /// Its isolation level (default: full).
    pub isolation: IsolationLevel,
}

struct Procs {
    table: ProcessTable,
    /// The kernel's state of every μprocess (the table's slots: `MAX_PROCESSES`).
    procs: PidMap<Proc>,
    /// Every open file of every μprocess.
    files: OpenFiles<files::File>,
    pipes: PipeTable,
    /// Every open disk file.
    disk: files::DiskFiles,
    /// Sleeping μprocesses and when they wake (TSC).
    sleepers: Vec<(Pid, u64)>,
    /// μprocesses parked on sockets.
    socket_waiters: Vec<net::SocketWaiter>,
    /// What ended μprocesses left for the next ones to reuse instead of allocating.
    spares: Spares,
}

/// How many emptied descriptor tables and tag sources [`Spares`] keeps.
const SPARES: usize = 8;

/// Emptied descriptor tables (their vectors) and tag sources no one else holds, kept from
/// ended μprocesses for the next forks: a loop of forks allocates neither.
#[derive(Default)]
struct Spares {
    fds: Vec<FdTable>,
    sources: Vec<tags::Source>,
}

impl Spares {
    /// Keeps `fds`, emptied, if there is room.
    fn keep_fds(&mut self, fds: FdTable) {
        if self.fds.len() < SPARES {
            self.fds.push(fds);
        }
    }

    /// Keeps `source` if no one else holds it and there is room, emptied first (its shadow
    /// table may share pages with a live μprocess's, which would then copy on its next tag).
    fn keep_source(&mut self, mut source: tags::Source) {
        if self.sources.len() < SPARES
            && let Some(s) = alloc::sync::Arc::get_mut(&mut source)
        {
            s.forget();
            self.sources.push(source);
        }
    }
}

/// A blocking system call a μprocess waits in.
#[derive(Clone, Copy, Debug)]
enum Blocked {
    Wait(WaitTarget, WaitOptions),
    Read {
        fd: u32,
        buf: u64,
        len: u64,
    },
    Write {
        fd: u32,
        buf: u64,
        len: u64,
    },
    Sleep,
    Accept {
        fd: u64,
        peer: u64,
    },
    Connect {
        fd: u64,
    },
    Poll {
        fds: u64,
        n: u64,
        timeout_ms: i64,
        deadline: u64,
    },
}

static PROCS: Mutex<Option<Procs>> = Mutex::new(None);

fn with<R>(f: impl FnOnce(&mut Procs) -> R) -> R {
    cpu::without_interrupts(|| {
        let mut g = PROCS.lock();
        let p = g.get_or_insert_with(|| Procs {
            table: ProcessTable::new(MAX_PROCESSES, 1 << 20).expect("a valid table size"),
            procs: PidMap::with_slots(MAX_PROCESSES),
            files: OpenFiles::new(files::MAX_FILES),
            pipes: PipeTable::new(files::MAX_PIPES),
            disk: files::DiskFiles::default(),
            sleepers: Vec::new(),
            socket_waiters: Vec::new(),
            spares: Spares::default(),
        });
        f(p)
    })
}

/// Why a μprocess could not be started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpawnError {
    /// No module of that name is deployed.
    NoSuchProgram,
    /// The module is a function, not a program.
    NotAProgram,
    /// The process table is full.
    TableFull,
    /// The program's trees hold as many μprocesses as its `max_processes` allows.
    ProgramLimit(u16),
    /// No memory (or PD) for its area.
    NoMemory,
    /// Copy-on-write asked for with isolation on.
    CowNeedsIsolationOff,
}

/// Starts the deployed program `name` as a child of init; returns its PID and the
/// orchestrator ticket that completes with its exit status (see [`status_of`]).
pub fn spawn(name: &str) -> Result<(u64, Ticket), SpawnError> {
    spawn_with(name, SpawnOptions::default())
}

/// [`spawn`] with `options`.
pub fn spawn_with(name: &str, options: SpawnOptions) -> Result<(u64, Ticket), SpawnError> {
    if options.mode.check(options.isolation).is_err() {
        return Err(SpawnError::CowNeedsIsolationOff);
    }
    let f = crate::module::lookup(name).ok_or(SpawnError::NoSuchProgram)?;
    if f.manifest.kind != fjord_faas::module::ModuleKind::Program {
        return Err(SpawnError::NotAProgram);
    }
    let inst = Instance::create(&f).map_err(|_| SpawnError::NoMemory)?;
    jord::tenant::begin_uprocess(inst.pd, f.namespace, log_limit(&f));
    let Some((area, ctx, tags)) = fresh_start(&f, &inst) else {
        instance::destroy(inst.pd);
        return Err(SpawnError::NoMemory);
    };
    let bound = f.manifest.max_processes;
    let owner = owner_of(f.manifest.name.as_str());
    let pid = match with(|p| p.table.start(owner, usize::from(bound))) {
        Ok(pid) => pid,
        Err(e) => {
            instance::destroy(inst.pd);
            return Err(match e {
                ProcError::OwnerLimit => SpawnError::ProgramLimit(bound),
                _ => SpawnError::TableFull,
            });
        }
    };
    let fds = with(files::console_fds);
    let ticket = start(pid, f, inst, area, ctx, fds, (options, tags, bound))?;
    Ok((u64::from(pid.raw()), ticket))
}

/// Records `pid`'s state and queues its first step as a request of its own.
fn start(
    pid: Pid,
    func: Arc<LoadedFunction>,
    instance: Instance,
    area: (u64, u64),
    ctx: UserContext,
    fds: FdTable,
    how: (SpawnOptions, tags::Source, u16),
) -> Result<Ticket, SpawnError> {
    start_with(pid, func, instance, area, ctx, fds, how, false)
}

/// [`start`], for a μprocess `restored` from a checkpoint or not.
#[allow(clippy::too_many_arguments)]
fn start_with(
    pid: Pid,
    func: Arc<LoadedFunction>,
    instance: Instance,
    area: (u64, u64),
    ctx: UserContext,
    fds: FdTable,
    (options, source, bound): (SpawnOptions, tags::Source, u16),
    restored: bool,
) -> Result<Ticket, SpawnError> {
    let mut observed = false;
    let inserted = with(|p| {
        observed = p.table.parent_of(pid) == Ok(Pid::INIT);
        p.procs
            .insert_new(
                pid,
                Proc {
                    func,
                    instance,
                    area,
                    area_cap: data_cap(area),
                    ctx: Some(ctx),
                    blocked: None,
                    fds,
                    parked: None,
                    ticket: 0,
                    observed,
                    mode: options.mode,
                    isolation: options.isolation,
                    source: Some(source),
                    bound,
                    frozen: false,
                    missed: false,
                    restored,
                },
            )
            .map_err(|taken| (taken.holder, taken.value.instance.pd))
    });
    if let Err((holder, pd)) = inserted {
        // The table gives a PID only a free slot, and this map holds only the table's PIDs.
        log::error!("μprocess {}: its slot holds {}", pid.raw(), holder.raw());
        instance::destroy(pd);
        let _ = with(|p| p.table.discard(pid));
        return Err(SpawnError::TableFull);
    }
    // Made on an executor (a fork, a spawn), it starts there when JBSQ admits it: it shares
    // its parent's pages, and the orchestrator core need not dispatch it.
    match orchestrator::submit_here(step_work(pid), !observed) {
        Ok(t) => {
            with(|p| {
                if let Some(pr) = p.procs.get_mut(pid) {
                    pr.ticket = t;
                }
            });
            Ok(t)
        }
        Err(_) => {
            // Never ran: it ends as if killed, and its parent reaps it.
            finish(pid, ExitStatus::Signaled(Signal::KILL));
            Err(SpawnError::TableFull)
        }
    }
}

/// The owner of the μprocess trees a program starts: its name's hash (a program replaced by
/// another of the same name keeps it).
fn owner_of(program: &str) -> u64 {
    use core::hash::Hasher;
    let mut h = fjord_kernel::fnv::Fnv1a::default();
    h.write(program.as_bytes());
    h.finish()
}

fn log_limit(f: &LoadedFunction) -> u32 {
    u32::try_from(f.manifest.log_limit).unwrap_or(u32::MAX)
}

fn step_work(pid: Pid) -> orchestrator::TaskWork {
    orchestrator::TaskWork::Call(
        |pid, info| step(Pid::from_raw(pid as u32), info),
        u64::from(pid.raw()),
    )
}

/// The exit status a μprocess's request completes with: one byte, the exit code for an exit,
/// `128 + signal` for a kill (as a shell reports it).
pub fn status_of(outcome: &Outcome) -> Option<u8> {
    outcome.as_ref().ok().and_then(|b| b.first().copied())
}

/// What a system call of a μprocess does next.
enum Next {
    /// Back to ring 3 with this `rax`.
    Continue(u64),
    /// The μprocess gave its slice up or blocked: its next step is queued when it may run.
    Stop,
}

/// One time slice of `pid`.
///
/// The μprocess's address space stays loaded across the system calls that touch only its own
/// memory and the kernel's (see [`keeps_space`]): the kernel's own tables are loaded only for
/// the others, and when the slice ends.
fn step(pid: Pid, info: JobInfo) -> Option<Outcome> {
    let mut kills_seen = KILLS.load(Ordering::Acquire);
    // Moved straight here from its saved place (a context is a few hundred bytes).
    let mut saved = None;
    let taken = with(|p| {
        let pr = p.procs.get_mut(pid)?;
        if pr.frozen {
            pr.parked = Some(info);
            pr.missed = true;
            return None;
        }
        let _ = p.table.run(pid);
        saved = pr.ctx.take();
        saved.as_ref()?;
        let blocked = pr.blocked.take();
        let copies = pr.isolation.copies_buffers();
        Some((
            pr.instance.pd,
            copies,
            blocked,
            p.table.take_pending_kill(pid),
        ))
    });
    let (pd, copies, blocked, killed) = taken?;
    // Used where it is: moving it out again would copy it once more.
    let ctx = saved.as_mut()?;
    let caller = files::Caller { pid, pd, copies };
    if let Some(sig) = killed {
        return finish(pid, ExitStatus::Signaled(sig));
    }
    let mut space = Space { pd, loaded: false };
    if let Some(b) = blocked {
        let next = match b {
            Blocked::Wait(target, options) => wait(pid, (target, options), ctx, info),
            Blocked::Read { fd, buf, len } => {
                space.enter();
                files::read(caller, fd, buf, len, ctx, info)
            }
            Blocked::Write { fd, buf, len } => {
                space.enter();
                files::write(caller, fd, buf, len, ctx, info)
            }
            Blocked::Sleep => Next::Continue(0),
            Blocked::Accept { fd, peer } => net::accept(pid, fd, peer, ctx, info),
            Blocked::Connect { fd } => net::connect_wait(pid, fd, ctx, info),
            Blocked::Poll {
                fds,
                n,
                timeout_ms,
                deadline,
            } => net::poll(pid, (fds, n, timeout_ms), Some(deadline), ctx, info),
        };
        match next {
            Next::Continue(v) => ctx.frame.rax = v,
            Next::Stop => {
                space.leave();
                return None;
            }
        }
    }
    let deadline = crate::arch::time::deadline_after_ms(SLICE_MS);
    loop {
        space.enter();
        in_call::running(Some((caller, kills_seen)));
        let exit = user::run(ctx, Some(deadline));
        in_call::running(None);
        if !matches!(exit, UserExit::Request { no, .. } if keeps_space(no)) {
            space.leave();
        }
        // A kill since the last look: lock and see whether it was this μprocess's.
        let kills = KILLS.load(Ordering::Acquire);
        if kills != kills_seen {
            kills_seen = kills;
            if let Some(sig) = with(|p| p.table.take_pending_kill(pid)) {
                space.leave();
                return finish(pid, ExitStatus::Signaled(sig));
            }
        }
        let next = match exit {
            UserExit::Exited(code) => return finish(pid, ExitStatus::Exited(code as u8)),
            UserExit::Fault(fault) => {
                let signal = Signal::for_exception(fault.vector);
                log::warn!(
                    "μprocess {}: fault, vector {} {:?} at {:#x} (rip {:#x}): killed by signal {}",
                    pid.raw(),
                    fault.vector,
                    fault.access,
                    fault.addr,
                    fault.rip,
                    signal.raw()
                );
                return finish(pid, ExitStatus::Signaled(signal));
            }
            UserExit::TimedOut => yield_now(pid, *ctx, info),
            UserExit::Request { no, args } => match Sysno::from_raw(no) {
                Some(Sysno::Fork) => Next::Continue(encode(fork(pid, ctx, args[0]))),
                Some(Sysno::SetForkMode) => Next::Continue(encode(set_fork_mode(pid, args[0]))),
                Some(Sysno::Spawn) => Next::Continue(encode(spawn_child(pid, args[0], args[1]))),
                Some(Sysno::Isolation) => Next::Continue(
                    with(|p| p.procs.get(pid).map(|pr| pr.isolation.raw())).unwrap_or(0),
                ),
                Some(Sysno::MemInfo) => Next::Continue(mem_info(pid, args[0])),
                Some(Sysno::Discard) => Next::Continue(encode(discard(pid, args[0], args[1]))),
                Some(Sysno::GetRandom) => Next::Continue(encode(getrandom(pid, args[0], args[1]))),
                Some(Sysno::Waitpid) => match decode_wait(args) {
                    Ok(w) => wait(pid, w, ctx, info),
                    Err(e) => Next::Continue(encode(Err(e))),
                },
                Some(Sysno::Getpid) => Next::Continue(u64::from(pid.raw())),
                Some(Sysno::Getppid) => Next::Continue(
                    with(|p| p.table.parent_of(pid)).map_or(0, |parent| u64::from(parent.raw())),
                ),
                Some(Sysno::SchedYield) => {
                    ctx.frame.rax = 0;
                    yield_now(pid, *ctx, info)
                }
                Some(Sysno::Pipe) => Next::Continue(encode(files::pipe(pid, args[0]))),
                Some(Sysno::Read) => {
                    let fd = u32::try_from(args[0]).unwrap_or(u32::MAX);
                    files::read(caller, fd, args[1], args[2], ctx, info)
                }
                Some(Sysno::Write) => {
                    let fd = u32::try_from(args[0]).unwrap_or(u32::MAX);
                    files::write(caller, fd, args[1], args[2], ctx, info)
                }
                Some(Sysno::Close) => Next::Continue(encode(files::close(pid, args[0]))),
                Some(Sysno::Dup2) => Next::Continue(encode(files::dup2(pid, args[0], args[1]))),
                Some(Sysno::Open) => {
                    Next::Continue(encode(files::open(pid, args[0], args[1], args[2])))
                }
                Some(Sysno::Fsync) => Next::Continue(encode(files::fsync(pid, args[0]))),
                Some(Sysno::Rename) => {
                    Next::Continue(encode(files::rename(pid, args[0], args[1], args[2])))
                }
                Some(Sysno::Unlink) => Next::Continue(encode(files::unlink(pid, args[0], args[1]))),
                Some(Sysno::Kill) => Next::Continue(encode(kill(Some(pid), args[0], args[1]))),
                Some(Sysno::Sleep) => sleep(pid, args[0], ctx, info),
                Some(Sysno::Socket) => Next::Continue(encode(net::socket(pid))),
                Some(Sysno::Bind) => Next::Continue(encode(net::bind(pid, args[0], args[1]))),
                Some(Sysno::Listen) => Next::Continue(encode(net::listen(pid, args[0], args[1]))),
                Some(Sysno::Accept) => net::accept(pid, args[0], args[1], ctx, info),
                Some(Sysno::Connect) => net::connect(pid, args[0], (args[1], args[2]), ctx, info),
                Some(Sysno::Shutdown) => {
                    Next::Continue(encode(net::shutdown(pid, args[0], args[1])))
                }
                Some(Sysno::Poll) => {
                    net::poll(pid, (args[0], args[1], args[2] as i64), None, ctx, info)
                }
                Some(Sysno::SetNonblocking) => {
                    Next::Continue(encode(net::set_nonblocking(pid, args[0], args[1])))
                }
                _ => Next::Continue(encode(Err(AbiError::NoSys))),
            },
        };
        match next {
            Next::Continue(v) => ctx.frame.rax = v,
            Next::Stop => {
                space.leave();
                return None;
            }
        }
    }
}

/// Whether the system call `no` is served with the caller's address space left loaded: it
/// reads and writes only the caller's own memory (through its page tables) and the kernel's.
/// Calls that make, change or end address spaces (`fork`, `spawn`, `exit`, `waitpid`'s reap,
/// `mmap`) run on the kernel's tables, which are loaded again whenever the step ends (a call
/// that parks the caller included).
fn keeps_space(no: u64) -> bool {
    Sysno::from_raw(no).is_some_and(|s| {
        s.is_socket()
            || matches!(
                s,
                Sysno::Read
                    | Sysno::Write
                    | Sysno::Close
                    | Sysno::Pipe
                    | Sysno::Getpid
                    | Sysno::Getppid
                    | Sysno::Isolation
                    | Sysno::Discard
                    | Sysno::GetRandom
            )
    })
}

/// Whether this CPU has a μprocess's address space loaded, so that it is loaded and left once
/// per run of system calls rather than around each.
struct Space {
    pd: PdId,
    loaded: bool,
}

impl Space {
    /// Loads the μprocess's tables (if they are not loaded yet).
    fn enter(&mut self) {
        if !self.loaded {
            jord::with(|j| j.switch_to(self.pd));
            self.loaded = true;
        }
    }

    /// Loads the kernel's tables (if the μprocess's are loaded).
    fn leave(&mut self) {
        if self.loaded {
            jord::with(|j| j.switch_to(PdId::KERNEL));
            self.loaded = false;
        }
    }
}

/// Kills since boot: a μprocess's step looks for a pending kill of its own only when this
/// moved since its last look (raised under the process-table lock, after the kill is noted).
static KILLS: AtomicU64 = AtomicU64::new(0);

/// Saves `pid`'s context and queues its next slice.
fn yield_now(pid: Pid, ctx: UserContext, info: JobInfo) -> Next {
    with(|p| {
        let _ = p.table.yield_cpu(pid);
        if let Some(pr) = p.procs.get_mut(pid) {
            pr.ctx = Some(ctx);
        }
    });
    orchestrator::resume(info, step_work(pid));
    Next::Stop
}

fn decode_wait(args: [u64; 4]) -> Result<(WaitTarget, WaitOptions), AbiError> {
    let target = WaitTarget::from_raw(args[0] as i64).map_err(|_| AbiError::InvalidArgs)?;
    let options = WaitOptions::from_raw(args[1]).map_err(|_| AbiError::InvalidArgs)?;
    Ok((target, options))
}

/// `waitpid`: a reaped child's `pid << 32 | status word`, 0 with `WNOHANG`, or blocks `pid`
/// (its context saved, nothing queued) until a child ends.
fn wait(pid: Pid, w: (WaitTarget, WaitOptions), ctx: &mut UserContext, info: JobInfo) -> Next {
    if !w.1.nohang
        && let WaitTarget::Child(child) = w.0
    {
        hand_off(pid, child);
    }
    let r = with(|p| {
        let r = p.table.waitpid(pid, w.0, w.1);
        if let Ok(WaitOutcome::MustBlock) = r
            && let Some(pr) = p.procs.get_mut(pid)
        {
            pr.ctx = Some(*ctx);
            pr.blocked = Some(Blocked::Wait(w.0, w.1));
            pr.parked = Some(info);
        }
        r
    });
    match r {
        Ok(WaitOutcome::Reaped { pid: child, status }) => {
            reap(child);
            let word = u64::from(status.wait_status().0);
            Next::Continue(u64::from(child.raw()) << 32 | word)
        }
        Ok(WaitOutcome::NoneYet) => Next::Continue(0),
        Ok(WaitOutcome::MustBlock) => Next::Stop,
        Err(ProcError::NoChild) => Next::Continue(encode(Err(AbiError::NoChild))),
        Err(_) => Next::Continue(encode(Err(AbiError::InvalidArgs))),
    }
}

/// Whether this CPU runs a step handed off to by a waiting parent ([`hand_off`]), one CPU each.
static HANDING_OFF: [AtomicBool; crate::arch::smp::MAX_CPUS] =
    [const { AtomicBool::new(false) }; crate::arch::smp::MAX_CPUS];

/// Before `parent` waits for `child`: when the child's step is the next one queued on this
/// executor (a child just forked or spawned here, as a rule), it runs now, nested in the
/// parent's step, rather than after the parent has parked and been dispatched again: a child
/// that ends within it is reaped at once. Only one level deep (a child that itself waits
/// parks as usual), and never out of the queue's order.
fn hand_off(parent: Pid, child: Pid) {
    let Some(flag) = HANDING_OFF.get(crate::arch::percpu::cpu_index()) else {
        return;
    };
    if flag.swap(true, Ordering::Acquire) {
        return;
    }
    let ticket = with(|p| {
        let parent_of = p.table.parent_of(child);
        p.procs
            .get(child)
            .filter(|c| c.ctx.is_some() && parent_of == Ok(parent))
            .map(|c| c.ticket)
    });
    if let Some(t) = ticket.filter(|&t| t != 0)
        && orchestrator::run_next_here(t)
    {
        HANDOFFS.fetch_add(1, Ordering::Relaxed);
    }
    flag.store(false, Ordering::Release);
}

/// Waits that ran the awaited child's step at once ([`hand_off`]) since boot.
static HANDOFFS: AtomicU64 = AtomicU64::new(0);

/// Waits that ran the awaited child's step at once since boot.
pub fn handoffs() -> u64 {
    HANDOFFS.load(Ordering::Relaxed)
}

/// `spawn(name, len)` from `parent`: the PID of a new child running the program `name` from
/// its start, with the parent's descriptors, copy mode and isolation.
fn spawn_child(parent: Pid, name: u64, len: u64) -> Result<u64, AbiError> {
    if len > 64 {
        return Err(AbiError::InvalidArgs);
    }
    let name = files::copy_in(parent, name, len)?;
    let name = core::str::from_utf8(&name).map_err(|_| AbiError::InvalidArgs)?;
    let f = crate::module::lookup(name).ok_or(AbiError::NoSuchFunction)?;
    if f.manifest.kind != fjord_faas::module::ModuleKind::Program {
        return Err(AbiError::NoSuchFunction);
    }
    let (options, bound) = with(|p| {
        p.procs.get(parent).map(|pr| {
            let options = SpawnOptions {
                mode: pr.mode,
                isolation: pr.isolation,
            };
            (options, pr.bound)
        })
    })
    .ok_or(AbiError::InvalidArgs)?;
    let (child, fds, inst) = new_child(parent, &f, false, bound)?;
    let Some((area, ctx, tags)) = fresh_start(&f, &inst) else {
        return Err(abandon(child, fds, inst.pd));
    };
    start(child, f, inst, area, ctx, fds, (options, tags, bound)).map_err(|_| AbiError::Busy)?;
    Ok(u64::from(child.raw()))
}

/// A child of `parent` for `fork` (when `forked`: its instance has no heap header, the parent's
/// is copied) or `spawn` that has not run yet: its PID, its descriptors (the parent's, whose
/// open files gain a reference each) and a new instance of `func`, acting for `func`'s tenant.
/// [`AbiError::LimitReached`] when the table is full or the tree's owner has `bound`
/// μprocesses. On failure nothing of it is left.
fn new_child(
    parent: Pid,
    func: &LoadedFunction,
    forked: bool,
    bound: u16,
) -> Result<(Pid, FdTable, Instance), AbiError> {
    let fds = with(|p| {
        let pr = p.procs.get(parent)?;
        let into = p.spares.fds.pop().unwrap_or_else(|| FdTable::new(0));
        pr.fds.fork_into(&mut p.files, into).ok()
    })
    .ok_or(AbiError::BadFd)?;
    let child = match with(|p| p.table.fork_bounded(parent, usize::from(bound))) {
        Ok(c) => c,
        Err(_) => {
            files::close_all(fds);
            return Err(AbiError::LimitReached);
        }
    };
    let inst = instance_for(func, forked);
    match inst {
        Ok(inst) => {
            jord::tenant::begin_uprocess(inst.pd, func.namespace, log_limit(func));
            Ok((child, fds, inst))
        }
        Err(_) => {
            files::close_all(fds);
            with(|p| p.table.discard(child)).ok();
            Err(AbiError::NoMemory)
        }
    }
}

/// Undoes a [`new_child`] that could not be completed (it never ran: it is forgotten, and the
/// parent sees only the error): its descriptors close and its PD goes. The error to return.
fn abandon(child: Pid, fds: FdTable, pd: PdId) -> AbiError {
    files::close_all(fds);
    instance::destroy(pd);
    with(|p| p.table.discard(child)).ok();
    AbiError::NoMemory
}

/// `set_fork_mode(mode)`: the caller's previous default copy mode.
fn set_fork_mode(pid: Pid, raw: u64) -> Result<u64, AbiError> {
    let mode = CopyMode::from_raw(raw).map_err(|_| AbiError::InvalidArgs)?;
    with(|p| {
        let pr = p.procs.get_mut(pid).ok_or(AbiError::InvalidArgs)?;
        mode.check(pr.isolation)
            .map_err(|_| AbiError::AccessDenied)?;
        Ok(core::mem::replace(&mut pr.mode, mode).raw())
    })
}

/// `fork` from `parent`, whose context is `ctx` (stopped at the system call), in the copy mode
/// `raw_mode` names (0: the parent's default, else 1 + the mode's code): the child's PID.
fn fork(parent: Pid, ctx: &UserContext, raw_mode: u64) -> Result<u64, AbiError> {
    let (func, (base, len), parent_pd, options, default_mode, (tags, bound, restored, spare)) =
        with(|p| {
            let pr = p.procs.get(parent)?;
            let options = SpawnOptions {
                mode: pr.mode,
                isolation: pr.isolation,
            };
            let tags = pr.source.clone()?;
            Some((
                pr.func.clone(),
                pr.area,
                pr.instance.pd,
                options,
                pr.mode,
                (tags, pr.bound, pr.restored, p.spares.sources.pop()),
            ))
        })
        .ok_or(AbiError::InvalidArgs)?;
    if restored {
        // A clone's area may still lack pages of its checkpoint, which its own pager provides:
        // they come first, so that the fork copies (or shares) memory this node holds.
        jord::settled(|j| {
            j.settle_paged(base);
            j.take_pager_flushes()
        });
    }
    let call = match raw_mode {
        0 => None,
        r => Some(CopyMode::from_raw(r - 1).map_err(|_| AbiError::InvalidArgs)?),
    };
    let mode = CopyMode::for_call(default_mode, call, options.isolation)
        .map_err(|_| AbiError::AccessDenied)?;
    let (child, fds, inst) = new_child(parent, &func, true, bound)?;
    let (child_base, _) = area_of_instance(&func, &inst);
    let image = func.image_in_area();
    let stack_pages = (func.manifest.stack_size / 4096) as usize;
    let stack = base + image..base + image + func.manifest.stack_size;
    let by = at_fork(&tags, (base, len), stack, ctx);
    let copied = match mode {
        CopyMode::Full => copy_area(base, child_base, len, &*by),
        _ => fork_lazily(
            (parent_pd, base),
            (inst.pd, child_base),
            (len, mode, by.clone()),
            eager_pages(
                ctx.frame.rsp,
                base + image,
                stack_pages,
                (image / 4096) as usize,
            ),
        ),
    };
    let Ok((from, to)) = copied else {
        return Err(abandon(child, fds, inst.pd));
    };
    if mode == CopyMode::CopyOnWrite {
        // IsolationLevel is off: the child reads and writes the parent's memory through the
        // pointers it inherited unrelocated.
        let granted = jord::with(|j| j.pcopy(parent_pd, base, inst.pd, fjord_pd::Perm::RW));
        if granted.is_err() {
            return Err(abandon(child, fds, inst.pd));
        }
    }
    let mut child_ctx = *ctx;
    relocate_registers(&mut child_ctx, &from, &to, &*by);
    child_ctx.frame.rax = 0;
    start(
        child,
        func,
        inst,
        (child_base, len),
        child_ctx,
        fds,
        (
            options,
            tags::source_in(
                spare,
                tags.tags()
                    .copy_for(&to)
                    .unwrap_or_else(|_| ShadowTags::new(to)),
            ),
            bound,
        ),
    )
    .map_err(|_| AbiError::Busy)?;
    Ok(u64::from(child.raw()))
}

/// The tag source `fork` relocates the parent's area (`area`: base, length) by: the parent's
/// own, and, under precise tags alone, the transient tags of this moment
/// (`fjord_ufork::known`): the frame-pointer chain from the saved frame pointer through
/// `stack`, and the heap allocator's free lists from the header the thread pointer names.
/// They serve this fork only; the child's own table is a copy of the parent's. Under `both`
/// the walk would change nothing: every slot it tags holds a value in the area, which
/// inference tags already.
fn at_fork(
    tags: &tags::Source,
    (base, len): (u64, u64),
    stack: core::ops::Range<u64>,
    ctx: &UserContext,
) -> tags::Source {
    use fjord_ufork::known::{frame_chain, free_lists};
    use fjord_ufork::source::TagChoice;
    let Some(area) = area_of(base, len) else {
        return tags.clone();
    };
    if tags.choice() != TagChoice::Precise {
        return tags.clone();
    }
    let (fp, header) = (ctx.frame.rbp, ctx.fs_base);
    let heads = header.wrapping_add(fjord_libos::heap::FREE_LIST_HEADS);
    let slots = jord::with(|j| {
        let mut read = |a: u64| j.read_word(base, a.checked_sub(base)?);
        let mut slots = frame_chain(fp, stack, &area, &mut read);
        if area.contains_range(heads, 8 * fjord_libos::heap::CLASSES as u64) {
            slots.extend(free_lists(
                heads,
                fjord_libos::heap::CLASSES,
                &area,
                &mut read,
            ));
        }
        slots
    });
    if slots.is_empty() {
        return tags.clone();
    }
    let mut table = tags.tags().clone();
    for s in slots {
        let _ = table.set(s);
    }
    tags::source(table)
}

/// Bytes below the stack pointer that x86-64's System V ABI lets a leaf function use (the red
/// zone): live at a system call for all the kernel knows.
const RED_ZONE: u64 = 128;

/// The pages a lazily forked child gets during `fork`: its stack from the page holding the
/// stack pointer `rsp` to the top of the stack region (`stack_pages` pages from `stack`),
/// which holds the heap allocator's header; as page indices of the area, whose stack region
/// starts `image_pages` pages in. With them, the first live slot of the first page: the
/// words below `rsp` and its red zone belong to no frame, and the child gets zeros there.
fn eager_pages(
    rsp: u64,
    stack: u64,
    stack_pages: usize,
    image_pages: usize,
) -> (core::ops::Range<usize>, usize) {
    let offset = rsp.checked_sub(stack);
    let first = offset.map_or(0, |o| (o / 4096) as usize).min(stack_pages);
    let live = offset
        .filter(|_| first < stack_pages)
        .map_or(0, |o| (o % 4096).saturating_sub(RED_ZONE) / 8) as usize;
    (image_pages + first..image_pages + stack_pages, live)
}

/// Makes the child's area (`child`: PD and VMA base) a lazy copy of the parent's of `len`
/// bytes in `mode`, with the `eager` pages copied and relocated now; returns the two areas.
fn fork_lazily(
    parent: (PdId, u64),
    child: (PdId, u64),
    (len, mode, source): (u64, CopyMode, tags::Source),
    eager: (core::ops::Range<usize>, usize),
) -> Result<(Area, Area), ()> {
    let (src, dst) = (
        area_of(parent.1, len).ok_or(())?,
        area_of(child.1, len).ok_or(())?,
    );
    let f = lazy::LazyFork {
        parent_pd: parent.0,
        parent_base: parent.1,
        child_pd: child.0,
        child_base: child.1,
        from: src,
        to: dst,
        mode,
        source,
    };
    jord::settled(|j| {
        let (pending, _) = lazy::fork(j, &f, eager)?;
        Ok::<_, fjord_pd::Error>(pending)
    })
    .map_err(|_| ())?;
    Ok((src, dst))
}

/// The area (base, length) of `f`'s μprocess in `inst`: its program's image, its stack and
/// its heap, in one VMA.
fn area_of_instance(f: &LoadedFunction, inst: &Instance) -> (u64, u64) {
    let m = &f.manifest;
    let image = f.image_in_area();
    (
        inst.boundary - m.stack_size - image,
        image + m.stack_size + m.heap_size,
    )
}

/// Readies a new (not forked) μprocess of `f` in `inst`: writes its image's private part
/// (statics, GOT, vtables) relocated for its area; returns the area, the first context (at the
/// entry in the area's copy of the code, on the stack's top, with its heap header as thread
/// pointer) and its precise tags: the pointers the loader's relocations wrote, and the first
/// three words of the heap header the kernel wrote (its own address, the heap's next free byte
/// and its end, which may be the area's end).
fn fresh_start(
    f: &LoadedFunction,
    inst: &Instance,
) -> Option<((u64, u64), UserContext, tags::Source)> {
    let area = area_of_instance(f, inst);
    let mut tags = ShadowTags::new(area_of(area.0, area.1)?);
    let header = inst.thread_pointer();
    let _ = tags.set_all((0..3).map(|w| header + 8 * w));
    let program = f.program.as_ref()?;
    let data = program.image.relocated_data(area.0).ok()?;
    let first = program.image.shared.len();
    jord::with(|j| {
        for (k, page) in data.chunks(4096).enumerate() {
            j.write_page(area.0, first + k, page)?;
        }
        Ok::<(), fjord_pd::Error>(())
    })
    .ok()?;
    let _ = tags.set_all(
        program
            .image
            .pointer_offsets()
            .map(|offset| area.0 + offset),
    );
    // The libos entry puts the stack `HEADER_BYTES` below the address it is given: the memory
    // boundary, or the thread-local storage block's start.
    let stack_from = match program.image.tls {
        Some(tls) => {
            let block = thread_local_block(f, inst, &data, &mut tags, tls)?;
            block + fjord_libos::heap::HEADER_BYTES
        }
        None => inst.boundary,
    };
    let entry = area.0 + (f.entry - f.image.base);
    let ctx = UserContext {
        fs_base: header,
        ..UserContext::new(entry, inst.boundary, [0, 0, 0, stack_from])
    };
    Some((area, ctx, tags::source(tags)))
}

/// Writes a new μprocess's thread-local storage block (x86-64 variant II): right below its
/// thread pointer (the heap header, whose first word is its own address, as the ABI's thread
/// control block's is), the template's initial bytes, taken from `data` (the image's private
/// part, relocated), then zeros; its pointers' slots are tagged in `tags`. Returns the block's
/// start; `None` when the block would take more than half the stack region.
fn thread_local_block(
    f: &LoadedFunction,
    inst: &Instance,
    data: &[u8],
    tags: &mut ShadowTags,
    tls: fjord_faas::module::TlsTemplate,
) -> Option<u64> {
    let program = f.program.as_ref()?;
    if tls.span() > f.manifest.stack_size / 2 {
        return None;
    }
    let tp = inst.thread_pointer();
    let block = tp - tls.span();
    let mut bytes = vec![0u8; tls.span() as usize];
    let init = program.image.tls_init(data)?;
    bytes[..init.len()].copy_from_slice(init);
    let (base, _) = area_of_instance(f, inst);
    write_area(base, block - base, &bytes).ok()?;
    for offset in program.image.pointer_offsets() {
        if (tls.vaddr..tls.vaddr + tls.file_size).contains(&offset) {
            let _ = tags.set(block + (offset - tls.vaddr));
        }
    }
    Some(block)
}

/// Writes `bytes` at byte `offset` of the area VMA at `base`, page by page (touching only the
/// pages written).
fn write_area(base: u64, offset: u64, bytes: &[u8]) -> Result<(), fjord_pd::Error> {
    let mut page = [0u8; 4096];
    let mut done = 0usize;
    jord::with(|j| {
        while done < bytes.len() {
            let at = offset as usize + done;
            let (index, within) = (at / 4096, at % 4096);
            let n = (4096 - within).min(bytes.len() - done);
            j.read_page(base, index, &mut page)?;
            page[within..within + n].copy_from_slice(&bytes[done..done + n]);
            j.write_page(base, index, &page)?;
            done += n;
        }
        Ok(())
    })
}

/// The capability a μprocess's plain pointers carry in the `area` (base, length) VMA: data
/// permissions over the VMA; `None` for an area over the 256 MiB the format represents.
fn data_cap(area: (u64, u64)) -> Option<(Area, fjord_ufork::cap::Cap)> {
    use fjord_ufork::cap::{Cap, CapPerms};
    let (base, size) = area;
    let a = area_of(base, size)?;
    Some((a, Cap::new(&a, base, size, CapPerms::DATA).ok()?))
}

/// The area of a VMA of `len` bytes at `base`: its size class, to which Jord aligns it.
pub(crate) fn area_of(base: u64, len: u64) -> Option<Area> {
    let size = len.next_power_of_two().max(4096);
    Area::new(base, size).ok()
}

/// Copies the pages of the area at `from` that the parent ever touched (the others are zero in
/// both) to the area at `to`, relocating every aligned word that points into the source area;
/// returns the two areas.
fn copy_area(
    from: u64,
    to: u64,
    len: u64,
    source: &dyn fjord_ufork::source::TagSource,
) -> Result<(Area, Area), ()> {
    let (src, dst) = (area_of(from, len).ok_or(())?, area_of(to, len).ok_or(())?);
    let mut tally = Tally::default();
    let pages = jord::with(|j| j.initialised_pages(from));
    let mut bytes = [0u8; 4096];
    // A batch of pages per Jord lock: few round trips, and other CPUs are not held up long.
    for batch in pages.chunks(COPY_BATCH) {
        let mut words: Vec<(usize, PageWords)> = Vec::with_capacity(batch.len());
        jord::with(|j| {
            for &i in batch {
                j.read_page(from, i, &mut bytes).map_err(|_| ())?;
                let mut w: PageWords = [0; SLOTS_PER_PAGE];
                page_words(&bytes, &mut w);
                words.push((i, w));
            }
            Ok::<(), ()>(())
        })?;
        for (i, w) in &mut words {
            let page = from + *i as u64 * 4096;
            relocate_page_tallied(source, &src, &dst, page, w, &mut tally).map_err(|_| ())?;
        }
        jord::with(|j| {
            for (i, w) in &words {
                fjord_ufork::tags::page_bytes(w, &mut bytes);
                j.write_page(to, *i, &bytes).map_err(|_| ())?;
            }
            Ok::<(), ()>(())
        })?;
    }
    tags::count_words(&tally);
    Ok((src, dst))
}

/// Pages copied per Jord lock by `fork`.
const COPY_BATCH: usize = 16;

/// Relocates the registers of a context from `from` to `to`: the instruction pointer (into the
/// area's image), the stack pointer and the thread pointer when they point into `from` (the
/// kernel knows what they are), and each general register the tag source tags
/// ([`TagSource::register_tags`](fjord_ufork::source::TagSource::register_tags)) that points into
/// `from`.
fn relocate_registers(
    ctx: &mut UserContext,
    from: &Area,
    to: &Area,
    source: &dyn fjord_ufork::source::TagSource,
) {
    let delta = from.delta_to(to);
    let f = &mut ctx.frame;
    let gprs = [
        &mut f.rax, &mut f.rbx, &mut f.rcx, &mut f.rdx, &mut f.rsi, &mut f.rdi, &mut f.rbp,
        &mut f.r8, &mut f.r9, &mut f.r10, &mut f.r11, &mut f.r12, &mut f.r13, &mut f.r14,
        &mut f.r15,
    ];
    let mut regs = Registers::default();
    for (r, v) in Gpr::ALL.into_iter().zip(gprs.iter()) {
        regs.set(r, **v);
    }
    let tagged = source.register_tags(&regs, from);
    let mut tally = Tally::default();
    for (r, v) in Gpr::ALL.into_iter().zip(gprs) {
        // A register relocated holds a value in the area, so inference tags it as well.
        if tagged.test(r) && from.contains(*v) {
            *v = v.wrapping_add(delta);
            tally.inferred += 1;
        }
    }
    for v in [&mut f.rip, &mut f.rsp, &mut ctx.fs_base] {
        if from.contains_range(*v, 0) {
            *v = v.wrapping_add(delta);
            tally.precise += 1;
        }
    }
    tags::count_registers(&tally);
}

/// `mem_info(what)`: 0, the bytes of free physical memory; 1, the bytes copied into the
/// caller's area since its fork (its fork's added memory; 0 if it was not lazily forked).
fn mem_info(pid: Pid, what: u64) -> u64 {
    let area = || with(|p| p.procs.get(pid).map(|pr| pr.area.0));
    match what {
        0 => (crate::mm::frames::free_frames() as u64).saturating_mul(4096),
        1 => area().map_or(0, |base| {
            lazy::copied_pages(base).saturating_mul(fjord_kernel::layout::PAGE_SIZE)
        }),
        2 | 3 => area().map_or(0, |base| {
            let (now, peak) = jord::with(|j| j.resident(base));
            let pages = if what == 2 { peak } else { now };
            (pages as u64).saturating_mul(fjord_kernel::layout::PAGE_SIZE)
        }),
        _ => encode(Err(AbiError::InvalidArgs)),
    }
}

/// Pages μprocesses gave back with `discard`.
static DISCARDED: AtomicU64 = AtomicU64::new(0);

/// Pages μprocesses gave back with `discard` since boot.
pub fn pages_discarded() -> u64 {
    DISCARDED.load(Ordering::Relaxed)
}

/// `discard(ranges, n)` from `pid`: the frames of the pages of the `n` ranges (address and
/// length, two `u64` each) at `ranges` go back (see [`crate::jord::Jord::discard`]); how many
/// did. Ranges are done in order; the first bad one ends the call with its error (those before
/// it are done): memory outside its area is refused (`BadAddress`), as is an address not
/// page-aligned (`InvalidArgs`), and so are more than [`fjord_libos::abi::DISCARD_MAX`] ranges.
/// `getrandom(buf, len)` for `pid`: up to [`fjord_libos::abi::GETRANDOM_MAX`] random bytes
/// into its area (checked as every buffer it hands the kernel is).
fn getrandom(pid: Pid, buf: u64, len: u64) -> Result<u64, AbiError> {
    crate::random::fill_user(len, |at, bytes| files::copy_out(pid, buf + at, bytes))
}

fn discard(pid: Pid, ranges: u64, n: u64) -> Result<u64, AbiError> {
    use fjord_libos::abi::DISCARD_MAX;
    let n = usize::try_from(n)
        .ok()
        .filter(|&n| n <= DISCARD_MAX)
        .ok_or(AbiError::InvalidArgs)?;
    let pd = with(|p| p.procs.get(pid).map(|pr| pr.instance.pd)).ok_or(AbiError::InvalidArgs)?;
    let mut raw = [0u8; DISCARD_MAX * 16];
    let raw = &mut raw[..n * 16];
    files::in_space(pd, || crate::mm::user_memory::copy_from(raw, ranges))
        .map_err(|_| AbiError::BadAddress)?;
    let word = |k: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&raw[k * 8..k * 8 + 8]);
        u64::from_le_bytes(w)
    };
    let mut list = [(0u64, 0u64); DISCARD_MAX];
    let list = &mut list[..n];
    for (k, r) in list.iter_mut().enumerate() {
        *r = (word(2 * k), word(2 * k + 1));
    }
    // The ranges before the first outside the caller's area (checked as every buffer it
    // hands the kernel is) are done; that one fails the call.
    let outside = with(|p| {
        let pr = p.procs.get(pid)?;
        Some(
            list.iter()
                .position(|&(a, len)| files::area_offset_of(pr, a, len).is_err()),
        )
    })
    .ok_or(AbiError::InvalidArgs)?;
    let (mut given, mut failed) = (0, outside.map(|_| AbiError::BadAddress));
    let pending = jord::with(|j| {
        let mut pending = crate::jord::state::Pending::default();
        for &(addr, len) in &list[..outside.unwrap_or(n)] {
            match j.discard(pd, addr, len) {
                Ok((g, p)) => {
                    given += g;
                    pending.absorb(p);
                }
                Err(e) => {
                    failed = Some(crate::jord::state::abi_error(e));
                    break;
                }
            }
        }
        pending
    });
    pending.finish();
    DISCARDED.fetch_add(given as u64, Ordering::Relaxed);
    match failed {
        Some(e) => Err(e),
        None => Ok(given as u64),
    }
}

/// `pid` ended with `status`: it becomes a zombie, its memory goes, a parent blocked in
/// `waitpid` is woken, and its request completes (see [`status_of`]).
fn finish(pid: Pid, status: ExitStatus) -> Option<Outcome> {
    let ended = with(|p| {
        let pr = p.procs.get_mut(pid)?;
        pr.ctx = None;
        if let Some(source) = pr.source.take() {
            p.spares.keep_source(source);
        }
        forget_sleeper(&mut p.sleepers, pid);
        Some((
            (
                pr.func.clone(),
                (pr.instance.pd, pr.instance.boundary),
                pr.instance.scrubbed,
            ),
            core::mem::replace(&mut pr.fds, FdTable::new(0)),
            pr.area,
            pr.observed,
        ))
    });
    // Whether anyone takes the request's result: its exit status.
    let mut observed = true;
    if let Some((instance, fds, area, o)) = ended {
        observed = o;
        files::close_all(fds);
        // Its memory goes before the parent can learn of the end: a parent that reaps its
        // child and checks the memory it left (or ends, and its own waiter checks) must find
        // it gone. A zombie's entry stays until its parent reaps it.
        let (func, (pd, boundary), scrubbed) = instance;
        retire(&func, (pd, boundary), scrubbed, area);
    }
    let (woken, gone) = with(|p| {
        let woken = p.table.terminate(pid, status).unwrap_or_default();
        // Children of init are reaped by the kernel (their request carries the status).
        let gone: Vec<Proc> = p
            .table
            .init_reap()
            .into_iter()
            .filter_map(|(child, _)| p.procs.remove(child))
            .collect();
        // Usually the parent alone: held without allocating.
        let (mut first, mut rest) = (None, Vec::new());
        for w in woken {
            if let Some(info) = p.procs.get_mut(w).and_then(|pr| pr.parked.take()) {
                match first {
                    None => first = Some((w, info)),
                    Some(_) => rest.push((w, info)),
                }
            }
        }
        ((first, rest), gone)
    });
    drop(gone);
    collect_stale();
    let (first, rest) = woken;
    for (w, info) in first.into_iter().chain(rest) {
        orchestrator::resume_here(info, step_work(w));
    }
    if !observed {
        return Some(Ok(Vec::new()));
    }
    let byte = match status {
        ExitStatus::Exited(code) => code,
        ExitStatus::Signaled(sig) => 128u8.wrapping_add(sig.raw()),
    };
    Some(Ok(vec![byte]))
}

/// Gives back the instance (PD, boundary; `scrubbed` as [`Instance::scrubbed`]) of an ended
/// μprocess of `func`, or of an ended request of the fork-per-request function `func`, whose
/// area is `area`: its area emptied ([`jord::state::Jord::empty_area`]: its frames go, its PD,
/// page tables and the leaves of its image stay) and kept for the next μprocess or fork
/// ([`instance_for`]) when `func`'s spares have room, destroyed otherwise; either way the
/// count of pages its fork copied ([`lazy::copied_pages`]) goes.
fn retire(
    func: &LoadedFunction,
    (pd, boundary): (PdId, u64),
    scrubbed: Option<u64>,
    (base, len): (u64, u64),
) {
    let keeps =
        func.program.is_some() || func.groundhog_mode() == fjord_groundhog::GroundhogMode::Fork;
    let emptied = if keeps && crate::module::pool::spare_room(func) {
        jord::settled(|j| {
            lazy::forget_copied_in(j, base);
            j.empty_area(pd, (base, len), scrubbed)
        })
        .ok()
    } else {
        lazy::forget_copied(base);
        None
    };
    if let Some(scrubbed) = emptied {
        let spare = Instance {
            pd,
            boundary,
            saved: crate::groundhog::Saved::Nothing,
            scrubbed,
        };
        if let Err(spare) =
            crate::module::pool::put_spare(func, spare, crate::module::loader::jord_epoch())
        {
            instance::destroy(spare.pd);
        }
    } else {
        instance::destroy(pd);
    }
}

/// An instance for a new μprocess of `func`, or for a request of the fork-per-request
/// function `func` (`forked`: a forked child, whose parent's copy gives it its heap header): an
/// ended one's that `func` kept ([`retire`]), or else a new one.
fn instance_for(
    func: &LoadedFunction,
    forked: bool,
) -> Result<Instance, orchestrator::InvokeFailure> {
    if let Some(spare) = crate::module::pool::take_spare(func) {
        match spare.reuse(func, !forked) {
            Ok(inst) => {
                let reused = if func.program.is_some() {
                    &PDS_REUSED
                } else {
                    &REQUEST_PDS_REUSED
                };
                reused.fetch_add(1, Ordering::Relaxed);
                return Ok(inst);
            }
            Err(pd) => instance::destroy(pd),
        }
    }
    if forked {
        Instance::create_for_fork(func)
    } else {
        Instance::create(func)
    }
}

/// μprocesses started in an ended μprocess's PD since boot ([`instance_for`]).
static PDS_REUSED: AtomicU64 = AtomicU64::new(0);

/// μprocesses that started in the PD and emptied area of an ended μprocess of their program
/// since boot.
pub fn pds_reused() -> u64 {
    PDS_REUSED.load(Ordering::Relaxed)
}

/// Request instances of fork-per-request functions forked into an ended request's PD since boot
/// ([`instance_for`]).
static REQUEST_PDS_REUSED: AtomicU64 = AtomicU64::new(0);

/// Request instances of fork-per-request functions forked into the PD and emptied area of an
/// ended request's instance since boot.
pub fn request_pds_reused() -> u64 {
    REQUEST_PDS_REUSED.load(Ordering::Relaxed)
}

/// Requests of reaped children whose completion was not recorded yet when they were reaped.
static STALE: Mutex<Vec<Ticket>> = Mutex::new(Vec::new());

/// How many tickets [`STALE`] holds, read without its lock.
static STALE_COUNT: AtomicUsize = AtomicUsize::new(0);

/// Drops the completion records of reaped children that have appeared since.
fn collect_stale() {
    if STALE_COUNT.load(Ordering::Acquire) == 0 {
        return;
    }
    cpu::without_interrupts(|| {
        let mut stale = STALE.lock();
        stale.retain(|&t| orchestrator::take(t).is_none());
        STALE_COUNT.store(stale.len(), Ordering::Release);
    });
}

/// Forgets a reaped child (its memory went when it ended).
fn reap(child: Pid) {
    let ticket = with(|p| {
        p.procs
            .remove_with(child, |pr| pr.observed.then_some(pr.ticket))
            .flatten()
    });
    if let Some(t) = ticket {
        // Nobody waits for a forked child's request: drop the record of its completion, now
        // or, if its last step has not recorded it yet, later.
        if orchestrator::take(t).is_none() {
            cpu::without_interrupts(|| {
                let mut stale = STALE.lock();
                stale.push(t);
                STALE_COUNT.store(stale.len(), Ordering::Release);
            });
        }
    }
}

/// Live and zombie μprocesses, for tests and `/metrics`.
pub fn count() -> usize {
    with(|p| p.table.len().saturating_sub(1))
}

/// Wakes `pids` (now runnable): queues the step each was parked at, on this executor when
/// JBSQ admits it there (the waker usually blocks next, and the woken runs without a dispatch).
fn wake(pids: impl IntoIterator<Item = Pid>) {
    for w in pids {
        if let Some(info) = with(|p| p.procs.get_mut(w)?.parked.take()) {
            orchestrator::resume_here(info, step_work(w));
        }
    }
}

/// Parks `pid` in `blocked` (its context saved, nothing queued) until it is woken.
fn park(pid: Pid, reason: BlockReason, blocked: Blocked, ctx: &UserContext, info: JobInfo) {
    with(|p| park_locked(p, pid, (reason, blocked), ctx, info));
}

/// [`park`] under the lock the caller holds: a μprocess that found a pipe empty or full must
/// be parked in the same critical section, or the other side's wake-up could come between the
/// two and be lost.
fn park_locked(
    p: &mut Procs,
    pid: Pid,
    (reason, blocked): (BlockReason, Blocked),
    ctx: &UserContext,
    info: JobInfo,
) {
    let _ = p.table.block(pid, reason);
    if let Some(pr) = p.procs.get_mut(pid) {
        pr.ctx = Some(*ctx);
        pr.blocked = Some(blocked);
        pr.parked = Some(info);
    }
}

/// `kill(pid, signal)` from `caller` (a μprocess: only one of its own program's trees, see
/// [`ProcessTable::kill_from`]; `None`: the operator, any μprocess): a blocked target is woken
/// to die; a running or runnable one dies at
/// its next system call or slice.
fn kill(caller: Option<Pid>, target: u64, sig: u64) -> Result<u64, AbiError> {
    let woken = with(|p| {
        let pid = u32::try_from(target)
            .ok()
            .and_then(|t| p.table.lookup(u64::from(t)))
            .ok_or(AbiError::NoSuchProcess)?;
        let killed = match caller {
            Some(caller) => p.table.kill_from(caller, pid, sig),
            None => p.table.kill(pid, sig),
        };
        if killed.is_ok() {
            KILLS.fetch_add(1, Ordering::Release);
        }
        let woken = killed.map_err(|e| match e {
            ProcError::InvalidArgument => AbiError::InvalidArgs,
            ProcError::NotPermitted => AbiError::AccessDenied,
            _ => AbiError::NoSuchProcess,
        })?;
        forget_sleeper(&mut p.sleepers, pid);
        Ok::<_, AbiError>(woken.then_some(pid))
    })?;
    if let Some(pid) = woken {
        wake([pid]);
    }
    Ok(0)
}

/// `sleep(ns)`: parks `pid` until [`wake_sleepers`] finds its time has come.
fn sleep(pid: Pid, ns: u64, ctx: &mut UserContext, info: JobInfo) -> Next {
    let until = crate::arch::time::now().saturating_add(crate::arch::time::ns_to_ticks(ns));
    ctx.frame.rax = 0;
    park(pid, BlockReason::Sleep { until }, Blocked::Sleep, ctx, info);
    with(|p| p.sleepers.push((pid, until)));
    SLEEPING.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
    Next::Stop
}

/// How many μprocesses sleep (so that looking for due sleepers costs one load when none do).
static SLEEPING: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);

/// Starts μprocess support: the orchestrator cores wake sleeping μprocesses whenever they look
/// for work.
pub fn init() {
    orchestrator::set_poll_hook(wake_sleepers);
    crate::module::set_forker(fork_instance);
    crate::module::set_fork_retire(retire_forked);
}

/// Gives back the instance of a fork-per-request function's ended request as a μprocess's is
/// given back ([`retire`]): its PD and emptied area kept for the function's next fork.
fn retire_forked(f: &LoadedFunction, inst: Instance) {
    let area = area_of_instance(f, &inst);
    retire(f, (inst.pd, inst.boundary), inst.scrubbed, area);
}

/// The PD and instance boundary of `f`'s zygote, made (its `init` run) if it has none yet.
pub fn zygote(f: &LoadedFunction) -> Result<(PdId, u64), orchestrator::InvokeFailure> {
    use orchestrator::InvokeFailure;
    let zygote_of =
        || cpu::without_interrupts(|| f.zygote.lock().as_ref().map(|z| (z.pd, z.boundary)));
    if let Some(z) = zygote_of() {
        return Ok(z);
    }
    let made = Instance::create_zygote(f)?;
    let extra = cpu::without_interrupts(|| {
        let mut slot = f.zygote.lock();
        match *slot {
            None => {
                *slot = Some(made);
                None
            }
            Some(_) => Some(made),
        }
    });
    // Another request made one meanwhile: that one is the zygote.
    if let Some(extra) = extra {
        instance::destroy(extra.pd);
    }
    zygote_of().ok_or(InvokeFailure::OutOfMemory)
}

/// Whether `f` has a zygote now.
pub fn has_zygote(f: &LoadedFunction) -> bool {
    cpu::without_interrupts(|| f.zygote.lock().is_some())
}

/// Destroys `f`'s zygote, if it has one (its children keep what they took from it).
pub fn drop_zygote(f: &LoadedFunction) -> bool {
    let z = cpu::without_interrupts(|| f.zygote.lock().take());
    match z {
        Some(z) => {
            instance::destroy(z.pd);
            true
        }
        None => false,
    }
}

/// A request's instance of the fork-per-request function `f` (Groundhog mode `fork`): a child
/// of `f`'s zygote (made, its `init` run, by the first request), whose instance VMA is a lazy
/// copy of the zygote's (copy on pointer access, tagged words relocated as pages are copied,
/// tags as `tags=` chose), with the page of the heap header copied at once. The zygote never
/// runs again, so every child sees it as `init` left it; the child ends with its request.
pub fn fork_instance(f: &LoadedFunction) -> Result<Instance, orchestrator::InvokeFailure> {
    use orchestrator::InvokeFailure;
    let (zygote_pd, zygote_boundary) = zygote(f)?;
    // An ended request's PD and emptied area when the function kept one ([`retire_forked`]).
    let child = instance_for(f, true)?;
    let m = &f.manifest;
    let image = f.image_in_area();
    let len = image + m.stack_size + m.heap_size;
    let zygote_base = zygote_boundary - m.stack_size - image;
    let (child_base, _) = area_of_instance(f, &child);
    let Some(area) = area_of(zygote_base, len) else {
        instance::destroy(child.pd);
        return Err(InvokeFailure::OutOfMemory);
    };
    let header_page = ((image + m.stack_size) / 4096) as usize - 1;
    let forked = fork_lazily(
        (zygote_pd, zygote_base),
        (child.pd, child_base),
        (
            len,
            CopyMode::CopyOnPointerAccess,
            tags::source(ShadowTags::new(area)),
        ),
        (header_page..header_page + 1, 0),
    );
    match forked {
        Ok(_) => {
            FORKED_INSTANCES.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
            Ok(child)
        }
        Err(()) => {
            instance::destroy(child.pd);
            Err(InvokeFailure::OutOfMemory)
        }
    }
}

/// Request instances forked from zygotes since boot.
static FORKED_INSTANCES: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// Request instances forked from fork-per-request functions' zygotes since boot.
pub fn forked_instances() -> u64 {
    FORKED_INSTANCES.load(core::sync::atomic::Ordering::Relaxed)
}

/// Wakes the μprocesses whose sleep is over (called by the CPU that orchestrates, each time
/// it looks for work).
pub fn wake_sleepers() {
    if SLEEPING.load(core::sync::atomic::Ordering::Relaxed) == 0 {
        return;
    }
    let now = cpu::rdtsc();
    wake_due(|p| {
        let due: Vec<Pid> = p
            .sleepers
            .extract_if(.., |&mut (_, until)| until <= now)
            .map(|(pid, _)| pid)
            .collect();
        SLEEPING.fetch_sub(due.len(), core::sync::atomic::Ordering::Relaxed);
        due
    });
}

/// μprocesses parked on sockets (the length of `Procs::socket_waiters`), so that the network
/// loop's passes take no lock while none is.
static SOCKET_WAITING: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);

/// Wakes the μprocesses parked on sockets whose wait is over: the socket table changed since
/// they looked and (for `poll`) one of their sockets is ready for what they asked, or their
/// `poll` timed out (called by the network loop after each pass). Workers polling their own
/// connections are not woken by one another's traffic.
pub fn wake_socket_waiters() {
    if SOCKET_WAITING.load(core::sync::atomic::Ordering::Relaxed) == 0 {
        return;
    }
    let now = cpu::rdtsc();
    wake_due(|p| {
        let due: Vec<Pid> = crate::sockets::with(|t| {
            let generation = t.generation();
            p.socket_waiters
                .extract_if(.., |w| w.is_due(t, generation, now))
                .map(|w| w.pid)
                .collect()
        })
        .unwrap_or_default();
        SOCKET_WAITING.fetch_sub(due.len(), core::sync::atomic::Ordering::Relaxed);
        due
    });
}

/// Wakes the blocked μprocesses `take` picks: it runs under the process table's lock, unless
/// another CPU holds it (then nothing happens, and the next call looks again).
fn wake_due(take: impl FnOnce(&mut Procs) -> Vec<Pid>) {
    let due = cpu::without_interrupts(|| {
        let Some(mut g) = PROCS.try_lock() else {
            return Vec::new();
        };
        let Some(p) = g.as_mut() else {
            return Vec::new();
        };
        let mut due = take(p);
        due.retain(|&pid| p.table.wake(pid));
        due
    });
    if !due.is_empty() {
        wake(due);
    }
}

/// Takes `pid` off the sleepers (it ended or was killed).
fn forget_sleeper(sleepers: &mut Vec<(Pid, u64)>, pid: Pid) {
    let before = sleepers.len();
    sleepers.retain(|&(s, _)| s != pid);
    SLEEPING.fetch_sub(
        before - sleepers.len(),
        core::sync::atomic::Ordering::Relaxed,
    );
}

/// Starts the program `name` as a μprocess nobody waits for (`init=`, `POST /processes`): its
/// request's completion is dropped once it ends. Returns its PID.
pub fn spawn_detached(name: &str, options: SpawnOptions) -> Result<u64, SpawnError> {
    let (pid, ticket) = spawn_with(name, options)?;
    cpu::without_interrupts(|| STALE.lock().push(ticket));
    collect_stale();
    Ok(pid)
}

/// What `GET /processes` shows of a μprocess.
pub struct Info {
    /// Its PID.
    pub pid: u64,
    /// Its parent's.
    pub ppid: u64,
    /// The program.
    pub program: alloc::string::String,
    /// `runnable`, `running`, `blocked` or `zombie`.
    pub state: &'static str,
    /// Its area: base and size.
    pub area: (u64, u64),
    /// Bytes of its area it touched and holds in frames of its own.
    pub touched: u64,
}

/// Every μprocess, by PID.
pub fn list() -> Vec<Info> {
    use fjord_ufork::process::State;
    let mut v: Vec<Info> = with(|p| {
        p.procs
            .iter()
            .filter_map(|(pid, pr)| {
                let entry = p.table.get(pid)?;
                Some(Info {
                    pid: u64::from(pid.raw()),
                    ppid: u64::from(entry.parent().raw()),
                    program: alloc::string::String::from(pr.func.manifest.name.as_str()),
                    state: match entry.state() {
                        State::Runnable => "runnable",
                        State::Running => "running",
                        State::Blocked(_) => "blocked",
                        State::Zombie(_) => "zombie",
                    },
                    area: pr.area,
                    touched: 0,
                })
            })
            .collect()
    });
    v.sort_unstable_by_key(|info| info.pid);
    for info in &mut v {
        // Pages of its own: those it lacks still (a lazy fork's) are its parent's frames.
        info.touched = jord::with(|j| {
            let base = info.area.0;
            let own = j.initialised_pages(base).len() - j.pager_held(base);
            own as u64 * 4096
        });
    }
    v
}

/// The PD and area (base, length) of μprocess `pid`, if it lives (a zombie's PD is gone).
pub fn pd_and_area(pid: u64) -> Option<(PdId, (u64, u64))> {
    with(|p| {
        let pid = p.table.lookup(pid)?;
        let entry = p.table.get(pid)?;
        if matches!(entry.state(), fjord_ufork::process::State::Zombie(_)) {
            return None;
        }
        let pr = p.procs.get(pid)?;
        Some((pr.instance.pd, pr.area))
    })
}

/// `kill(target, sig)` as the μprocess `caller` calls it: [`AbiError::AccessDenied`] for a
/// target another program's tree holds (for tests and tools that act for a μprocess).
pub fn kill_as(caller: u64, target: u64, sig: u64) -> Result<u64, AbiError> {
    let caller = with(|p| p.table.lookup(caller)).ok_or(AbiError::NoSuchProcess)?;
    kill(Some(caller), target, sig)
}

/// Kills the μprocess `pid` with signal 9 (as `kill` does, for the operator:
/// `DELETE /processes/<pid>`); false if there is none.
pub fn kill_pid(pid: u64) -> bool {
    kill(None, pid, 9).is_ok()
}
