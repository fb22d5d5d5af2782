//! The μprocess table: PIDs, parents and children, run states, exit, kill and `waitpid`.
//!
//! A pure state machine: every system call is a method that checks its arguments, updates the
//! table and says what the kernel must do (block the caller, wake someone). The kernel does the
//! blocking and the scheduling.
//!
//! - PID 1 is init, created with the table; it cannot exit or be killed. PIDs are handed out
//!   in increasing order and wrap around to 2 after the largest, skipping those whose slot
//!   (the PID modulo the table's size, [`crate::pid_map`]) is taken, so a freed PID is reused
//!   as late as possible and every look-up by PID takes constant time.
//! - A μprocess that exits or is killed becomes a zombie holding its [`ExitStatus`] until its
//!   parent reaps it with [`ProcessTable::waitpid`]. Its children, live or zombie, are
//!   reparented to init, which reaps them ([`ProcessTable::init_reap`], or a user init that
//!   waits).
//! - `kill` has no signal handlers to run: it marks the target; the kernel takes the mark
//!   ([`ProcessTable::take_pending_kill`]) before the target next returns to user mode and
//!   terminates it. A fault (a missed pointer into another area, a write to code) terminates
//!   the μprocess the same way, with the fault's signal.
//! - Status words follow POSIX `wait`: `WIFEXITED`/`WEXITSTATUS` for an exit,
//!   `WIFSIGNALED`/`WTERMSIG` for a kill or a fault ([`WaitStatus`]).

use crate::pid_map::PidMap;
use alloc::collections::BTreeMap;
use alloc::vec::Vec;

/// Why a process-table operation was refused; the table is unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProcError {
    /// No μprocess has this PID, or it is a zombie where a live one is needed (`ESRCH`).
    NoSuchProcess,
    /// The caller has no child matching the request (`ECHILD`).
    NoChild,
    /// The table is full or no PID is free (`EAGAIN`).
    TableFull,
    /// The owner (the program that started the caller's tree) has as many μprocesses as its
    /// bound allows (`EAGAIN`).
    OwnerLimit,
    /// The operation targets init (`EPERM`).
    NotPermitted,
    /// A malformed argument: an unknown signal, option bit or wait target (`EINVAL`).
    InvalidArgument,
    /// The μprocess is not in a state the transition starts from.
    WrongState,
}

impl ProcError {
    /// The Linux errno value the system-call layer returns (negated).
    pub const fn errno(self) -> i32 {
        match self {
            ProcError::NoSuchProcess => 3,
            ProcError::NoChild => 10,
            ProcError::TableFull | ProcError::OwnerLimit => 11,
            ProcError::NotPermitted => 1,
            ProcError::InvalidArgument | ProcError::WrongState => 22,
        }
    }
}

/// A μprocess ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pid(u32);

impl Pid {
    /// init.
    pub const INIT: Pid = Pid(1);

    /// The raw number.
    pub const fn raw(self) -> u32 {
        self.0
    }

    /// The PID numbered `raw`, as [`Pid::raw`] gave it (whether a μprocess has it is the
    /// table's to say).
    pub const fn from_raw(raw: u32) -> Pid {
        Pid(raw)
    }
}

/// A signal number, 1 to 64. Every signal terminates: μprocesses have no handlers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Signal(u8);

impl Signal {
    /// Illegal instruction.
    pub const ILL: Signal = Signal(4);
    /// Trace or breakpoint trap.
    pub const TRAP: Signal = Signal(5);
    /// Bus error.
    pub const BUS: Signal = Signal(7);
    /// Arithmetic error.
    pub const FPE: Signal = Signal(8);
    /// Kill.
    pub const KILL: Signal = Signal(9);
    /// Invalid memory reference (what a fault outside the area, or a write to code, reports).
    pub const SEGV: Signal = Signal(11);
    /// Termination request.
    pub const TERM: Signal = Signal(15);

    /// The signal numbered `n`, if `1 <= n <= 64`.
    pub const fn new(n: u64) -> Result<Signal, ProcError> {
        if n >= 1 && n <= 64 {
            Ok(Signal(n as u8))
        } else {
            Err(ProcError::InvalidArgument)
        }
    }

    /// The number.
    pub const fn raw(self) -> u8 {
        self.0
    }

    /// The signal an x86-64 POSIX system (Linux) sends a process for a CPU exception with
    /// `vector` in user mode: divide error and x87/SIMD errors SIGFPE; debug and breakpoint
    /// SIGTRAP; invalid opcode SIGILL, as is a floating-point or vector instruction (no PD has
    /// those registers: device-not-available); stack-segment and alignment faults SIGBUS;
    /// page faults, general protection and the rest SIGSEGV.
    pub const fn for_exception(vector: u64) -> Signal {
        match vector {
            0 | 16 | 19 => Signal::FPE,
            1 | 3 => Signal::TRAP,
            6 | 7 => Signal::ILL,
            12 | 17 => Signal::BUS,
            _ => Signal::SEGV,
        }
    }
}

/// How a μprocess ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExitStatus {
    /// It called exit with this code (its low eight bits).
    Exited(u8),
    /// It was killed, or faulted.
    Signaled(Signal),
}

impl ExitStatus {
    /// The POSIX status word.
    pub const fn wait_status(self) -> WaitStatus {
        match self {
            ExitStatus::Exited(code) => WaitStatus((code as u32) << 8),
            ExitStatus::Signaled(sig) => WaitStatus(sig.0 as u32 & 0x7f),
        }
    }
}

/// A POSIX `wait` status word: `code << 8` for an exit, the signal number for a kill.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WaitStatus(pub u32);

impl WaitStatus {
    /// `WIFEXITED`: the μprocess exited.
    pub const fn if_exited(self) -> bool {
        self.0 & 0x7f == 0
    }

    /// `WEXITSTATUS`: the exit code, if it exited.
    pub const fn exit_status(self) -> Option<u8> {
        if self.if_exited() {
            Some((self.0 >> 8) as u8)
        } else {
            None
        }
    }

    /// `WIFSIGNALED`: it was killed by a signal (or faulted).
    pub const fn if_signaled(self) -> bool {
        let s = self.0 & 0x7f;
        s != 0 && s != 0x7f
    }

    /// `WTERMSIG`: the signal, if it was killed.
    pub const fn term_sig(self) -> Option<u8> {
        if self.if_signaled() {
            Some((self.0 & 0x7f) as u8)
        } else {
            None
        }
    }
}

/// Which children `waitpid` waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WaitTarget {
    /// Any child (`pid == -1`).
    Any,
    /// This child (`pid > 0`).
    Child(Pid),
}

impl WaitTarget {
    /// Decodes `waitpid`'s pid argument; process groups (`0`, `< -1`) do not exist here.
    pub const fn from_raw(pid: i64) -> Result<WaitTarget, ProcError> {
        if pid == -1 {
            Ok(WaitTarget::Any)
        } else if pid > 0 && pid <= u32::MAX as i64 {
            Ok(WaitTarget::Child(Pid(pid as u32)))
        } else {
            Err(ProcError::InvalidArgument)
        }
    }

    const fn matches(self, pid: Pid) -> bool {
        match self {
            WaitTarget::Any => true,
            WaitTarget::Child(p) => p.0 == pid.0,
        }
    }
}

/// `waitpid`'s options.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct WaitOptions {
    /// `WNOHANG`: return at once when no child has ended.
    pub nohang: bool,
}

impl WaitOptions {
    /// The `WNOHANG` bit.
    pub const WNOHANG: u64 = 1;

    /// Decodes the options word; bits other than `WNOHANG` are refused.
    pub const fn from_raw(raw: u64) -> Result<WaitOptions, ProcError> {
        if raw & !Self::WNOHANG != 0 {
            return Err(ProcError::InvalidArgument);
        }
        Ok(WaitOptions {
            nohang: raw & Self::WNOHANG != 0,
        })
    }
}

/// What `waitpid` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WaitOutcome {
    /// A zombie child was reaped: return its PID and store its status word.
    Reaped {
        /// The child.
        pid: Pid,
        /// How it ended.
        status: ExitStatus,
    },
    /// `WNOHANG` and no matching child has ended: return 0.
    NoneYet,
    /// The caller is now blocked; the kernel switches away and, when the caller is woken,
    /// calls `waitpid` again.
    MustBlock,
}

/// Why a μprocess is blocked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockReason {
    /// In `waitpid` for these children.
    Wait(WaitTarget),
    /// In `sleep` until this time (kernel clock, nanoseconds).
    Sleep {
        /// The wake-up time.
        until: u64,
    },
    /// Reading from an empty pipe (kernel's identifier of the open file).
    Read(u32),
    /// Writing to a full pipe (kernel's identifier of the open file).
    Write(u32),
    /// Waiting for a socket to become ready (`accept`, `connect`, `read`, `write`, `poll`).
    Socket,
}

/// A μprocess's run state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum State {
    /// Ready to run.
    Runnable,
    /// On a CPU.
    Running,
    /// Waiting for an event.
    Blocked(BlockReason),
    /// Ended, waiting to be reaped.
    Zombie(ExitStatus),
}

/// One μprocess's entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Process {
    pid: Pid,
    parent: Pid,
    children: Vec<Pid>,
    state: State,
    pending_kill: Option<Signal>,
    owner: u64,
}

impl Process {
    /// Its owner: the program that started its tree (a child inherits its parent's; init's is
    /// 0). Its μprocesses count against that program's bound, and only they may signal it.
    pub const fn owner(&self) -> u64 {
        self.owner
    }

    /// Its PID.
    pub const fn pid(&self) -> Pid {
        self.pid
    }

    /// Its parent (init is its own parent).
    pub const fn parent(&self) -> Pid {
        self.parent
    }

    /// Its children, live and zombie, oldest first.
    pub fn children(&self) -> &[Pid] {
        &self.children
    }

    /// Its run state.
    pub const fn state(&self) -> State {
        self.state
    }

    /// The signal `kill` marked it with, not yet acted on.
    pub const fn pending_kill(&self) -> Option<Signal> {
        self.pending_kill
    }

    /// True when it has ended.
    pub const fn is_zombie(&self) -> bool {
        matches!(self.state, State::Zombie(_))
    }
}

/// The μprocesses woken by an operation (now [`State::Runnable`]), in the order they were
/// woken. Most operations wake none or one: those are held without allocating.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Woken {
    first: Option<Pid>,
    rest: Vec<Pid>,
}

impl Woken {
    /// None woken.
    pub const fn new() -> Woken {
        Woken {
            first: None,
            rest: Vec::new(),
        }
    }

    /// Adds `pid`, woken after the others.
    pub fn push(&mut self, pid: Pid) {
        match self.first {
            None => self.first = Some(pid),
            Some(_) => self.rest.push(pid),
        }
    }

    /// `pids`, lowest first.
    fn lowest_first(mut pids: Vec<Pid>) -> Woken {
        pids.sort_unstable();
        let mut woken = Woken::new();
        for pid in pids {
            woken.push(pid);
        }
        woken
    }

    /// Whether none was woken.
    pub fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    /// How many were woken.
    pub fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.rest.len()
    }

    /// The woken PIDs, in order.
    pub fn to_vec(&self) -> Vec<Pid> {
        self.clone().into_iter().collect()
    }
}

impl IntoIterator for Woken {
    type Item = Pid;
    type IntoIter = core::iter::Chain<core::option::IntoIter<Pid>, alloc::vec::IntoIter<Pid>>;

    fn into_iter(self) -> Self::IntoIter {
        self.first.into_iter().chain(self.rest)
    }
}

/// Every μprocess, by PID.
#[derive(Clone, Debug)]
pub struct ProcessTable {
    procs: PidMap<Process>,
    next: u32,
    max_pid: u32,
    limit: usize,
    /// μprocesses (zombies included) per owner.
    owned: BTreeMap<u64, usize>,
    /// Init may have a zombie child: one ended whose parent was init or who left zombie
    /// children to it, since [`ProcessTable::init_reap`] last reaped them all.
    init_may_reap: bool,
}

impl ProcessTable {
    /// A table holding only init (Runnable), for at most `limit` μprocesses (zombies included)
    /// with PIDs up to `max_pid`.
    pub fn new(limit: usize, max_pid: u32) -> Result<ProcessTable, ProcError> {
        if limit == 0 || max_pid < 2 {
            return Err(ProcError::InvalidArgument);
        }
        let mut procs = PidMap::with_slots(limit);
        let _ = procs.insert(
            Pid::INIT,
            Process {
                pid: Pid::INIT,
                parent: Pid::INIT,
                children: Vec::new(),
                state: State::Runnable,
                pending_kill: None,
                owner: 0,
            },
        );
        Ok(ProcessTable {
            procs,
            next: 2,
            max_pid,
            limit,
            owned: BTreeMap::new(),
            init_may_reap: false,
        })
    }

    /// The number of μprocesses, zombies included.
    pub fn len(&self) -> usize {
        self.procs.len()
    }

    /// Never true: init is always there.
    pub fn is_empty(&self) -> bool {
        self.procs.is_empty()
    }

    /// The entry of `pid`, live or zombie.
    pub fn get(&self, pid: Pid) -> Option<&Process> {
        self.procs.get(pid)
    }

    /// The PID of a raw number, if a μprocess has it.
    pub fn lookup(&self, raw: u64) -> Option<Pid> {
        let pid = Pid(u32::try_from(raw).ok()?);
        self.procs.contains(pid).then_some(pid)
    }

    /// Every PID, lowest first.
    pub fn pids(&self) -> impl Iterator<Item = Pid> + '_ {
        self.procs.pids().into_iter()
    }

    fn live_mut(&mut self, pid: Pid) -> Result<&mut Process, ProcError> {
        match self.procs.get_mut(pid) {
            Some(p) if !p.is_zombie() => Ok(p),
            _ => Err(ProcError::NoSuchProcess),
        }
    }

    /// `getppid`: the parent of a live μprocess.
    pub fn parent_of(&self, pid: Pid) -> Result<Pid, ProcError> {
        match self.procs.get(pid) {
            Some(p) if !p.is_zombie() => Ok(p.parent),
            _ => Err(ProcError::NoSuchProcess),
        }
    }

    fn alloc_pid(&self) -> Option<u32> {
        let candidates = (self.next..=self.max_pid).chain(2..self.next);
        candidates
            .into_iter()
            .find(|&n| self.procs.is_free_for(Pid(n)))
    }

    /// `fork`: a new Runnable child of `parent` (which must be live), of its owner, with no
    /// bound but the table's. Returns its PID.
    pub fn fork(&mut self, parent: Pid) -> Result<Pid, ProcError> {
        self.fork_bounded(parent, usize::MAX)
    }

    /// A new tree: a Runnable child of init owned by `owner`, refused with
    /// [`ProcError::OwnerLimit`] when `owner` already has `bound` μprocesses.
    pub fn start(&mut self, owner: u64, bound: usize) -> Result<Pid, ProcError> {
        self.fork_as(Pid::INIT, owner, bound)
    }

    /// [`ProcessTable::fork`] refused with [`ProcError::OwnerLimit`] when `parent`'s owner
    /// already has `bound` μprocesses (zombies included): one program's fork bomb stops at its
    /// own bound and leaves the rest of the table to the others.
    pub fn fork_bounded(&mut self, parent: Pid, bound: usize) -> Result<Pid, ProcError> {
        let owner = self.live_mut(parent)?.owner;
        self.fork_as(parent, owner, bound)
    }

    /// How many μprocesses (zombies included) `owner` has.
    pub fn owned(&self, owner: u64) -> usize {
        self.owned.get(&owner).copied().unwrap_or(0)
    }

    fn fork_as(&mut self, parent: Pid, owner: u64, bound: usize) -> Result<Pid, ProcError> {
        self.live_mut(parent)?;
        if self.procs.len() >= self.limit {
            return Err(ProcError::TableFull);
        }
        if self.owned(owner) >= bound {
            return Err(ProcError::OwnerLimit);
        }
        let n = self.alloc_pid().ok_or(ProcError::TableFull)?;
        self.next = if n >= self.max_pid { 2 } else { n + 1 };
        let pid = Pid(n);
        self.procs
            .insert(
                pid,
                Process {
                    pid,
                    parent,
                    children: Vec::new(),
                    state: State::Runnable,
                    pending_kill: None,
                    owner,
                },
            )
            .map_err(|_| ProcError::TableFull)?;
        *self.owned.entry(owner).or_default() += 1;
        if let Some(p) = self.procs.get_mut(parent) {
            p.children.push(pid);
        }
        Ok(pid)
    }

    /// Forgets `pid`, a child [`ProcessTable::fork`] just made that never ran (the fork failed
    /// after it): it leaves its parent's children and the table, and no `waitpid` sees it.
    /// [`ProcError::NotPermitted`] when it has children of its own or is init.
    pub fn discard(&mut self, pid: Pid) -> Result<(), ProcError> {
        let p = self.procs.get(pid).ok_or(ProcError::NoSuchProcess)?;
        if pid == Pid::INIT || !p.children.is_empty() {
            return Err(ProcError::NotPermitted);
        }
        let parent = p.parent;
        self.remove(pid);
        if let Some(pp) = self.procs.get_mut(parent) {
            pp.children.retain(|&c| c != pid);
        }
        Ok(())
    }

    /// `exit`: `pid` ends with `code`.
    pub fn exit(&mut self, pid: Pid, code: u8) -> Result<Woken, ProcError> {
        self.terminate(pid, ExitStatus::Exited(code))
    }

    /// `pid` ends with `status` (exit, kill taken, or fault): it becomes a zombie, its
    /// children go to init, and a parent (or init) blocked in a matching `waitpid` is woken.
    pub fn terminate(&mut self, pid: Pid, status: ExitStatus) -> Result<Woken, ProcError> {
        if pid == Pid::INIT {
            return Err(ProcError::NotPermitted);
        }
        let p = self.live_mut(pid)?;
        p.state = State::Zombie(status);
        p.pending_kill = None;
        let parent = p.parent;
        let orphans = core::mem::take(&mut p.children);
        let mut woken = Woken::new();
        let mut orphan_zombie = false;
        for &c in &orphans {
            if let Some(cp) = self.procs.get_mut(c) {
                cp.parent = Pid::INIT;
                orphan_zombie |= cp.is_zombie();
            }
        }
        if let Some(init) = self.procs.get_mut(Pid::INIT) {
            init.children.extend_from_slice(&orphans);
        }
        self.init_may_reap |= parent == Pid::INIT || orphan_zombie;
        if self.wake_waiter(parent, pid) {
            woken.push(parent);
        }
        if orphan_zombie && parent != Pid::INIT && self.wake_waiter(Pid::INIT, Pid::INIT) {
            woken.push(Pid::INIT);
        }
        Ok(woken)
    }

    /// Wakes `waiter` if it is blocked in a `waitpid` that `child` matches (`Any` always
    /// matches).
    fn wake_waiter(&mut self, waiter: Pid, child: Pid) -> bool {
        match self.procs.get_mut(waiter) {
            Some(w) => match w.state {
                State::Blocked(BlockReason::Wait(t)) if t.matches(child) => {
                    w.state = State::Runnable;
                    true
                }
                _ => false,
            },
            None => false,
        }
    }

    /// Takes `pid` out of the table and its owner's count.
    fn remove(&mut self, pid: Pid) {
        if let Some(p) = self.procs.remove(pid)
            && let Some(n) = self.owned.get_mut(&p.owner)
        {
            *n -= 1;
            if *n == 0 {
                self.owned.remove(&p.owner);
            }
        }
    }

    /// `kill(target, sig)` from the μprocess `caller`: [`ProcessTable::kill`] when both have
    /// the same owner (the program that started their trees), [`ProcError::NotPermitted`]
    /// otherwise, as for init.
    pub fn kill_from(&mut self, caller: Pid, target: Pid, sig: u64) -> Result<bool, ProcError> {
        let owner = |pid| self.procs.get(pid).map(|p: &Process| p.owner);
        match (owner(caller), owner(target)) {
            (_, None) => Err(ProcError::NoSuchProcess),
            (Some(a), Some(b)) if a == b => self.kill(target, sig),
            _ => Err(ProcError::NotPermitted),
        }
    }

    /// `kill(target, sig)`: marks a live target to be terminated with `sig` (the first mark
    /// stays) and wakes it if it is blocked so that it can die. Signal 0 only checks that the
    /// target exists. Returns true when the target was woken. A zombie target is left as is.
    pub fn kill(&mut self, target: Pid, sig: u64) -> Result<bool, ProcError> {
        let signal = if sig == 0 {
            None
        } else {
            Some(Signal::new(sig)?)
        };
        let p = self.procs.get_mut(target).ok_or(ProcError::NoSuchProcess)?;
        if target == Pid::INIT {
            return Err(ProcError::NotPermitted);
        }
        let Some(signal) = signal else {
            return Ok(false);
        };
        if p.is_zombie() {
            return Ok(false);
        }
        p.pending_kill.get_or_insert(signal);
        if matches!(p.state, State::Blocked(_)) {
            p.state = State::Runnable;
            return Ok(true);
        }
        Ok(false)
    }

    /// Takes the kill mark of `pid`, if any: the kernel then calls
    /// [`ProcessTable::terminate`] with [`ExitStatus::Signaled`].
    pub fn take_pending_kill(&mut self, pid: Pid) -> Option<Signal> {
        self.procs.get_mut(pid)?.pending_kill.take()
    }

    /// `waitpid(target, options)` called by `caller`: reaps a matching zombie child (oldest
    /// first), or reports that none has ended (`WNOHANG`), or blocks the caller.
    pub fn waitpid(
        &mut self,
        caller: Pid,
        target: WaitTarget,
        options: WaitOptions,
    ) -> Result<WaitOutcome, ProcError> {
        let me = match self.procs.get(caller) {
            Some(p) if !p.is_zombie() => p,
            _ => return Err(ProcError::NoSuchProcess),
        };
        if !me.children.iter().any(|&c| target.matches(c)) {
            return Err(ProcError::NoChild);
        }
        let zombie = me.children.iter().find_map(|&c| match self.procs.get(c) {
            Some(p) if target.matches(c) => match p.state {
                State::Zombie(status) => Some((c, status)),
                _ => None,
            },
            _ => None,
        });
        if let Some((pid, status)) = zombie {
            self.remove(pid);
            if let Some(me) = self.procs.get_mut(caller) {
                me.children.retain(|&c| c != pid);
            }
            return Ok(WaitOutcome::Reaped { pid, status });
        }
        if options.nohang {
            return Ok(WaitOutcome::NoneYet);
        }
        if let Some(me) = self.procs.get_mut(caller) {
            me.state = State::Blocked(BlockReason::Wait(target));
        }
        Ok(WaitOutcome::MustBlock)
    }

    /// The kernel's init loop: reaps every zombie child of init and returns them.
    pub fn init_reap(&mut self) -> Vec<(Pid, ExitStatus)> {
        let mut reaped = Vec::new();
        if !core::mem::take(&mut self.init_may_reap) {
            return reaped;
        }
        while let Ok(WaitOutcome::Reaped { pid, status }) =
            self.waitpid(Pid::INIT, WaitTarget::Any, WaitOptions { nohang: true })
        {
            reaped.push((pid, status));
        }
        reaped
    }

    /// Runnable → Running (the scheduler picked it).
    pub fn run(&mut self, pid: Pid) -> Result<(), ProcError> {
        let p = self.live_mut(pid)?;
        match p.state {
            State::Runnable => {
                p.state = State::Running;
                Ok(())
            }
            _ => Err(ProcError::WrongState),
        }
    }

    /// Running → Runnable (`sched_yield`, or preemption).
    pub fn yield_cpu(&mut self, pid: Pid) -> Result<(), ProcError> {
        let p = self.live_mut(pid)?;
        match p.state {
            State::Running => {
                p.state = State::Runnable;
                Ok(())
            }
            _ => Err(ProcError::WrongState),
        }
    }

    /// A live, not yet blocked μprocess blocks (`sleep`, a pipe that is empty or full).
    pub fn block(&mut self, pid: Pid, reason: BlockReason) -> Result<(), ProcError> {
        let p = self.live_mut(pid)?;
        match p.state {
            State::Running | State::Runnable => {
                p.state = State::Blocked(reason);
                Ok(())
            }
            _ => Err(ProcError::WrongState),
        }
    }

    /// Blocked → Runnable (the event came). Returns false if it was not blocked.
    pub fn wake(&mut self, pid: Pid) -> bool {
        match self.procs.get_mut(pid) {
            Some(p) if matches!(p.state, State::Blocked(_)) => {
                p.state = State::Runnable;
                true
            }
            _ => false,
        }
    }

    /// Wakes `pid` if it is blocked for `reason`; whether it was.
    pub fn wake_if(&mut self, pid: Pid, reason: BlockReason) -> bool {
        match self.procs.get_mut(pid) {
            Some(p) if p.state == State::Blocked(reason) => {
                p.state = State::Runnable;
                true
            }
            _ => false,
        }
    }

    /// Wakes every μprocess whose sleep ends at or before `now`.
    pub fn wake_sleepers(&mut self, now: u64) -> Woken {
        let mut woken = Vec::new();
        for p in self.procs.values_mut() {
            if let State::Blocked(BlockReason::Sleep { until }) = p.state
                && until <= now
            {
                p.state = State::Runnable;
                woken.push(p.pid);
            }
        }
        Woken::lowest_first(woken)
    }

    /// Wakes every μprocess blocked for this reason (the pipe became readable or writable).
    pub fn wake_all(&mut self, reason: BlockReason) -> Woken {
        let mut woken = Vec::new();
        for p in self.procs.values_mut() {
            if p.state == State::Blocked(reason) {
                p.state = State::Runnable;
                woken.push(p.pid);
            }
        }
        Woken::lowest_first(woken)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> ProcessTable {
        ProcessTable::new(64, 1000).unwrap()
    }

    const ANY: WaitTarget = WaitTarget::Any;
    const HANG: WaitOptions = WaitOptions { nohang: false };
    const NOHANG: WaitOptions = WaitOptions { nohang: true };

    #[test]
    fn status_words_follow_posix() {
        let e = ExitStatus::Exited(3).wait_status();
        assert_eq!(e, WaitStatus(0x300));
        assert!(e.if_exited() && !e.if_signaled());
        assert_eq!((e.exit_status(), e.term_sig()), (Some(3), None));
        let k = ExitStatus::Signaled(Signal::SEGV).wait_status();
        assert_eq!(k, WaitStatus(11));
        assert!(!k.if_exited() && k.if_signaled());
        assert_eq!((k.exit_status(), k.term_sig()), (None, Some(11)));
        assert_eq!(ExitStatus::Exited(0).wait_status(), WaitStatus(0));
        assert_eq!(Signal::new(0), Err(ProcError::InvalidArgument));
        assert_eq!(Signal::new(65), Err(ProcError::InvalidArgument));
        assert_eq!(Signal::new(9), Ok(Signal::KILL));
    }

    #[test]
    fn raw_arguments() {
        assert_eq!(WaitTarget::from_raw(-1), Ok(ANY));
        assert_eq!(WaitTarget::from_raw(7), Ok(WaitTarget::Child(Pid(7))));
        assert_eq!(WaitTarget::from_raw(0), Err(ProcError::InvalidArgument));
        assert_eq!(WaitTarget::from_raw(-5), Err(ProcError::InvalidArgument));
        assert_eq!(
            WaitTarget::from_raw(1 << 40),
            Err(ProcError::InvalidArgument)
        );
        assert_eq!(WaitOptions::from_raw(1), Ok(NOHANG));
        assert_eq!(WaitOptions::from_raw(2), Err(ProcError::InvalidArgument));
        assert_eq!(ProcError::NoChild.errno(), 10);
        assert!(ProcessTable::new(0, 10).is_err());
        assert!(ProcessTable::new(1, 1).is_err());
    }

    #[test]
    fn fork_exit_wait() {
        let mut t = table();
        let a = t.fork(Pid::INIT).unwrap();
        assert_eq!(a, Pid(2));
        let b = t.fork(a).unwrap();
        assert_eq!(t.parent_of(b), Ok(a));
        assert_eq!(t.get(a).unwrap().children(), [b]);
        assert_eq!(t.waitpid(a, ANY, NOHANG), Ok(WaitOutcome::NoneYet));
        assert_eq!(t.waitpid(a, ANY, HANG), Ok(WaitOutcome::MustBlock));
        assert_eq!(
            t.get(a).unwrap().state(),
            State::Blocked(BlockReason::Wait(ANY))
        );
        assert_eq!(t.exit(b, 7).map(|w| w.to_vec()), Ok(alloc::vec![a]));
        assert_eq!(t.get(a).unwrap().state(), State::Runnable);
        assert_eq!(
            t.waitpid(a, ANY, HANG),
            Ok(WaitOutcome::Reaped {
                pid: b,
                status: ExitStatus::Exited(7)
            })
        );
        assert!(t.get(b).is_none());
        assert_eq!(t.waitpid(a, ANY, HANG), Err(ProcError::NoChild));
        assert_eq!(t.exit(b, 0), Err(ProcError::NoSuchProcess));
    }

    #[test]
    fn waitpid_for_a_specific_child() {
        let mut t = table();
        let a = t.fork(Pid::INIT).unwrap();
        let b = t.fork(a).unwrap();
        let c = t.fork(a).unwrap();
        let other = t.fork(Pid::INIT).unwrap();
        assert_eq!(
            t.waitpid(a, WaitTarget::Child(other), HANG),
            Err(ProcError::NoChild)
        );
        assert_eq!(
            t.waitpid(a, WaitTarget::Child(c), HANG),
            Ok(WaitOutcome::MustBlock)
        );
        // b's exit does not wake a waiter for c.
        assert_eq!(t.exit(b, 1), Ok(Woken::new()));
        assert_eq!(
            t.terminate(c, ExitStatus::Signaled(Signal::SEGV))
                .map(|w| w.to_vec()),
            Ok(alloc::vec![a])
        );
        assert_eq!(
            t.waitpid(a, WaitTarget::Child(c), NOHANG),
            Ok(WaitOutcome::Reaped {
                pid: c,
                status: ExitStatus::Signaled(Signal::SEGV)
            })
        );
        assert_eq!(
            t.waitpid(a, ANY, NOHANG),
            Ok(WaitOutcome::Reaped {
                pid: b,
                status: ExitStatus::Exited(1)
            })
        );
    }

    #[test]
    fn orphans_go_to_init_which_reaps() {
        let mut t = table();
        let a = t.fork(Pid::INIT).unwrap();
        let b = t.fork(a).unwrap();
        let c = t.fork(a).unwrap();
        t.exit(c, 4).unwrap();
        assert_eq!(t.waitpid(Pid::INIT, ANY, HANG), Ok(WaitOutcome::MustBlock));
        // a exits: init is woken once (a is its child, and it inherits zombie c).
        assert_eq!(t.exit(a, 0).map(|w| w.to_vec()), Ok(alloc::vec![Pid::INIT]));
        assert_eq!(t.parent_of(b), Ok(Pid::INIT));
        let mut reaped = t.init_reap();
        reaped.sort_by_key(|r| r.0);
        assert_eq!(
            reaped,
            [(a, ExitStatus::Exited(0)), (c, ExitStatus::Exited(4))]
        );
        assert_eq!(t.get(Pid::INIT).unwrap().children(), [b]);
        t.exit(b, 9).unwrap();
        assert_eq!(t.init_reap(), [(b, ExitStatus::Exited(9))]);
        assert_eq!(t.len(), 1);
        assert_eq!(t.waitpid(Pid::INIT, ANY, NOHANG), Err(ProcError::NoChild));
    }

    #[test]
    fn orphaned_zombie_wakes_a_waiting_init() {
        let mut t = table();
        let a = t.fork(Pid::INIT).unwrap();
        let b = t.fork(a).unwrap();
        let keep = t.fork(Pid::INIT).unwrap();
        t.exit(b, 0).unwrap();
        assert_eq!(
            t.waitpid(Pid::INIT, WaitTarget::Child(keep), HANG),
            Ok(WaitOutcome::MustBlock)
        );
        // init waits for `keep` only: a's exit wakes nobody.
        assert_eq!(t.exit(a, 0), Ok(Woken::new()));
        t.wake(Pid::INIT);
        assert_eq!(
            t.waitpid(Pid::INIT, ANY, HANG),
            Ok(WaitOutcome::Reaped {
                pid: a,
                status: ExitStatus::Exited(0)
            })
        );
    }

    #[test]
    fn init_is_protected() {
        let mut t = table();
        assert_eq!(t.exit(Pid::INIT, 0), Err(ProcError::NotPermitted));
        assert_eq!(t.kill(Pid::INIT, 9), Err(ProcError::NotPermitted));
        assert_eq!(t.parent_of(Pid::INIT), Ok(Pid::INIT));
    }

    #[test]
    fn kill_marks_and_wakes() {
        let mut t = table();
        let a = t.fork(Pid::INIT).unwrap();
        t.block(a, BlockReason::Sleep { until: 100 }).unwrap();
        assert_eq!(t.kill(a, 0), Ok(false));
        assert_eq!(t.get(a).unwrap().pending_kill(), None);
        assert_eq!(t.kill(a, 15), Ok(true));
        assert_eq!(t.kill(a, 9), Ok(false));
        assert_eq!(t.get(a).unwrap().state(), State::Runnable);
        assert_eq!(t.take_pending_kill(a), Some(Signal::TERM));
        assert_eq!(t.take_pending_kill(a), None);
        t.terminate(a, ExitStatus::Signaled(Signal::TERM)).unwrap();
        assert_eq!(t.kill(a, 9), Ok(false));
        assert_eq!(t.kill(Pid(999), 9), Err(ProcError::NoSuchProcess));
        assert_eq!(t.kill(a, 100), Err(ProcError::InvalidArgument));
        let st = match t.waitpid(Pid::INIT, ANY, NOHANG) {
            Ok(WaitOutcome::Reaped { status, .. }) => status.wait_status(),
            other => panic!("{other:?}"),
        };
        assert_eq!(st.term_sig(), Some(15));
    }

    #[test]
    fn a_discarded_child_leaves_no_trace() {
        let mut t = ProcessTable::new(8, 100).unwrap();
        let p = t.fork(Pid::INIT).unwrap();
        let c = t.fork(p).unwrap();
        let gc = t.fork(c).unwrap();
        assert_eq!(t.discard(c), Err(ProcError::NotPermitted), "it has a child");
        assert_eq!(t.discard(Pid::INIT), Err(ProcError::NotPermitted));
        t.discard(gc).unwrap();
        t.discard(c).unwrap();
        assert_eq!(t.discard(c), Err(ProcError::NoSuchProcess));
        assert!(t.get(p).unwrap().children().is_empty());
        assert_eq!(
            t.waitpid(p, WaitTarget::Any, WaitOptions::default()),
            Err(ProcError::NoChild)
        );
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn an_owner_bound_stops_one_programs_fork_bomb_and_leaves_room_to_the_others() {
        let mut t = ProcessTable::new(16, 1000).unwrap();
        let a = t.start(7, 4).unwrap();
        // a's tree grows to its bound, zombies included, then stops.
        let mut tree = alloc::vec![a];
        while let Ok(c) = t.fork_bounded(*tree.last().unwrap(), 4) {
            tree.push(c);
        }
        assert_eq!(tree.len(), 4);
        assert_eq!(t.fork_bounded(a, 4), Err(ProcError::OwnerLimit));
        assert_eq!(t.owned(7), 4);
        // Another program still starts, and forks.
        let b = t.start(9, 4).unwrap();
        assert!(t.fork_bounded(b, 4).is_ok());
        assert_eq!(t.start(7, 4), Err(ProcError::OwnerLimit));
        // Reaping one of a's frees a place in its bound.
        let last = *tree.last().unwrap();
        t.exit(last, 0).unwrap();
        assert_eq!(t.fork_bounded(a, 4), Err(ProcError::OwnerLimit));
        let parent = tree[tree.len() - 2];
        assert!(matches!(
            t.waitpid(parent, WaitTarget::Child(last), WaitOptions::default()),
            Ok(WaitOutcome::Reaped { .. })
        ));
        assert_eq!(t.owned(7), 3);
        assert!(t.fork_bounded(a, 4).is_ok());
        assert_eq!(ProcError::OwnerLimit.errno(), 11);
    }

    #[test]
    fn only_the_same_owner_may_signal() {
        let mut t = table();
        let a = t.start(1, 10).unwrap();
        let a2 = t.fork_bounded(a, 10).unwrap();
        let b = t.start(2, 10).unwrap();
        assert_eq!(t.get(a2).map(Process::owner), Some(1));
        assert_eq!(t.kill_from(a, b, 9), Err(ProcError::NotPermitted));
        assert_eq!(t.kill_from(b, a2, 9), Err(ProcError::NotPermitted));
        assert_eq!(t.get(b).unwrap().pending_kill(), None);
        assert_eq!(t.kill_from(a2, a, 0), Ok(false));
        assert_eq!(t.kill_from(a2, a, 9), Ok(false));
        assert_eq!(t.get(a).unwrap().pending_kill(), Signal::new(9).ok());
        assert_eq!(t.kill_from(a, Pid(999), 9), Err(ProcError::NoSuchProcess));
        assert_eq!(t.kill_from(a, Pid::INIT, 9), Err(ProcError::NotPermitted));
    }

    #[test]
    fn exceptions_map_to_the_signals_linux_sends() {
        let cases = [
            (0, 8),
            (1, 5),
            (3, 5),
            (4, 11),
            (6, 4),
            (7, 4),
            (12, 7),
            (13, 11),
            (14, 11),
            (16, 8),
            (17, 7),
            (19, 8),
        ];
        for (vector, signal) in cases {
            assert_eq!(
                Signal::for_exception(vector).raw(),
                signal,
                "vector {vector}"
            );
        }
    }

    #[test]
    fn scheduling_states() {
        let mut t = table();
        let a = t.fork(Pid::INIT).unwrap();
        assert_eq!(t.run(a), Ok(()));
        assert_eq!(t.run(a), Err(ProcError::WrongState));
        assert_eq!(t.yield_cpu(a), Ok(()));
        assert_eq!(t.yield_cpu(a), Err(ProcError::WrongState));
        t.block(a, BlockReason::Sleep { until: 50 }).unwrap();
        assert_eq!(t.block(a, BlockReason::Read(3)), Err(ProcError::WrongState));
        assert!(t.wake_sleepers(49).is_empty());
        assert_eq!(t.wake_sleepers(50).to_vec(), [a]);
        t.block(a, BlockReason::Read(3)).unwrap();
        assert!(t.wake_all(BlockReason::Write(3)).is_empty());
        assert_eq!(t.wake_all(BlockReason::Read(3)).to_vec(), [a]);
        assert!(!t.wake(a));
        assert_eq!(t.lookup(2), Some(a));
        assert_eq!(t.lookup(3), None);
        assert_eq!(t.lookup(u64::MAX), None);
    }

    #[test]
    fn pids_are_reused_late_and_the_table_fills() {
        // Four slots: a PID takes slot `pid % 4`, init slot 1.
        let mut t = ProcessTable::new(4, 10).unwrap();
        let a = t.fork(Pid::INIT).unwrap(); // 2
        let b = t.fork(Pid::INIT).unwrap(); // 3
        assert_eq!((a, b), (Pid(2), Pid(3)));
        t.exit(a, 0).unwrap();
        t.init_reap();
        // 2 is free but 4 comes first; 5 would share init's slot.
        assert_eq!(t.fork(Pid::INIT), Ok(Pid(4)));
        assert_eq!(t.fork(Pid::INIT), Ok(Pid(6)));
        assert_eq!(t.fork(Pid::INIT), Err(ProcError::TableFull));
        t.exit(b, 0).unwrap();
        t.init_reap();
        assert_eq!(t.fork(Pid::INIT), Ok(Pid(7)));
        t.exit(Pid(7), 0).unwrap();
        t.init_reap();
        // 8, 9, 10 and, after the wrap, 2 fall in taken slots: 3 is next.
        assert_eq!(t.fork(Pid::INIT), Ok(Pid(3)));
        assert_eq!(t.fork(Pid(99)), Err(ProcError::NoSuchProcess));
        assert_eq!(
            t.pids().collect::<Vec<_>>(),
            [Pid(1), Pid(3), Pid(4), Pid(6)]
        );
    }

    mod props {
        use super::super::*;
        use alloc::collections::BTreeMap;
        use proptest::prelude::*;

        #[derive(Clone, Debug)]
        enum Op {
            Fork(usize),
            Exit(usize, u8),
            Kill(usize),
            Wait(usize, Option<usize>, bool),
            InitReap,
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                any::<usize>().prop_map(Op::Fork),
                (any::<usize>(), any::<u8>()).prop_map(|(i, c)| Op::Exit(i, c)),
                any::<usize>().prop_map(Op::Kill),
                (
                    any::<usize>(),
                    proptest::option::of(any::<usize>()),
                    any::<bool>()
                )
                    .prop_map(|(i, j, n)| Op::Wait(i, j, n)),
                Just(Op::InitReap),
            ]
        }

        fn check_links(t: &ProcessTable) -> Result<(), TestCaseError> {
            for pid in t.pids() {
                let p = t.get(pid).unwrap();
                if pid != Pid::INIT {
                    let parent = t.get(p.parent()).unwrap();
                    prop_assert!(!parent.is_zombie());
                    prop_assert_eq!(parent.children().iter().filter(|&&c| c == pid).count(), 1);
                }
                for &c in p.children() {
                    prop_assert_eq!(t.get(c).unwrap().parent(), pid);
                }
            }
            Ok(())
        }

        proptest! {
            #[test]
            fn waitpid_never_loses_a_zombie(ops in proptest::collection::vec(op(), 0..150)) {
                let mut t = ProcessTable::new(24, 40).unwrap();
                // Zombies not yet reaped and the status they must be reaped with.
                let mut expected: BTreeMap<Pid, ExitStatus> = BTreeMap::new();
                let mut exits = 0usize;
                let mut reaps = 0usize;
                let reap = |pid: Pid, status: ExitStatus,
                                expected: &mut BTreeMap<Pid, ExitStatus>| {
                    prop_assert_eq!(expected.remove(&pid), Some(status));
                    Ok(())
                };
                for op in ops {
                    let live: alloc::vec::Vec<Pid> =
                        t.pids().filter(|&p| !t.get(p).unwrap().is_zombie()).collect();
                    match op {
                        Op::Fork(i) => { let _ = t.fork(live[i % live.len()]); }
                        Op::Exit(i, code) => {
                            let p = live[i % live.len()];
                            if t.exit(p, code).is_ok() {
                                expected.insert(p, ExitStatus::Exited(code));
                                exits += 1;
                            }
                        }
                        Op::Kill(i) => {
                            let p = live[i % live.len()];
                            if t.kill(p, 9).is_ok() && let Some(s) = t.take_pending_kill(p) {
                                t.terminate(p, ExitStatus::Signaled(s)).unwrap();
                                expected.insert(p, ExitStatus::Signaled(s));
                                exits += 1;
                            }
                        }
                        Op::Wait(i, j, nohang) => {
                            let caller = live[i % live.len()];
                            let kids = t.get(caller).unwrap().children().to_vec();
                            let target = match j {
                                Some(j) if !kids.is_empty() => WaitTarget::Child(kids[j % kids.len()]),
                                Some(j) => WaitTarget::Child(Pid(j as u32 % 50 + 1)),
                                None => WaitTarget::Any,
                            };
                            let any_zombie = kids.iter().any(|&k| target.matches(k)
                                && t.get(k).unwrap().is_zombie());
                            let any_match = kids.iter().any(|&k| target.matches(k));
                            match t.waitpid(caller, target, WaitOptions { nohang }) {
                                Ok(WaitOutcome::Reaped { pid, status }) => {
                                    prop_assert!(any_zombie);
                                    reap(pid, status, &mut expected)?;
                                    reaps += 1;
                                }
                                Ok(WaitOutcome::NoneYet) => prop_assert!(nohang && any_match && !any_zombie),
                                Ok(WaitOutcome::MustBlock) => {
                                    prop_assert!(!nohang && any_match && !any_zombie);
                                    t.wake(caller);
                                }
                                Err(e) => {
                                    prop_assert_eq!(e, ProcError::NoChild);
                                    prop_assert!(!any_match);
                                }
                            }
                        }
                        Op::InitReap => {
                            for (pid, status) in t.init_reap() {
                                reap(pid, status, &mut expected)?;
                                reaps += 1;
                            }
                        }
                    }
                    check_links(&t)?;
                    let zombies = t.pids().filter(|&p| t.get(p).unwrap().is_zombie()).count();
                    prop_assert_eq!(zombies, expected.len());
                    prop_assert_eq!(exits, reaps + zombies);
                }
                // End everything: every zombie is eventually reaped, by its parent or by init.
                let live: alloc::vec::Vec<Pid> =
                    t.pids().filter(|&p| p != Pid::INIT && !t.get(p).unwrap().is_zombie()).collect();
                for p in live {
                    t.exit(p, 0).unwrap();
                    expected.insert(p, ExitStatus::Exited(0));
                }
                for (pid, status) in t.init_reap() {
                    reap(pid, status, &mut expected)?;
                }
                prop_assert!(expected.is_empty());
                prop_assert_eq!(t.len(), 1);
            }
        }
    }
}
