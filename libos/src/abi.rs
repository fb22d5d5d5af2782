//! The Fjord system-call ABI: numbers, registers and error codes.
//!
//! A call puts its number in `rax` and up to six arguments in `rdi, rsi, rdx, r10, r8, r9`, then
//! executes `syscall`. The kernel returns a value in `rax`: a non-negative value is success, a
//! negative value `-code` is an [`Error`] with that code. `rcx` and `r11` are clobbered by the
//! instruction itself; every other register is preserved.

/// System-call numbers.
#[repr(u64)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sysno {
    /// Does nothing and returns 0: the cost of a kernel round trip.
    Null = 0,
    /// Ends the current user run with an exit code (first argument).
    Exit = 1,
    /// Writes a UTF-8 string (pointer, length) to the kernel console.
    Log = 2,
    /// Returns the id of the CPU the caller runs on.
    CpuId = 3,
    /// PrivLib `mmap(len, prot, flags)`: a new VMA owned by the caller; returns its base.
    Mmap = 16,
    /// PrivLib `munmap(addr, len)`: frees (or shrinks) a VMA the caller owns.
    Munmap = 17,
    /// PrivLib `mprotect(addr, len, prot)`: changes the caller's permission on a VMA.
    Mprotect = 18,
    /// PrivLib `pmove(addr, cid, prot)`: moves the caller's permission on a VMA to PD `cid`.
    Pmove = 19,
    /// PrivLib `pcopy(addr, cid, prot)`: grants PD `cid` a subset of the caller's permission.
    Pcopy = 20,
    /// PrivLib `cget()`: creates a PD; returns its id.
    Cget = 21,
    /// PrivLib `cput(cid)`: destroys a PD the caller created.
    Cput = 22,
    /// PrivLib `ccall(cid, func, arg)`: calls `func(arg)` in PD `cid`; returns its result.
    Ccall = 23,
    /// PrivLib `center(cid)`: resumes the suspended PD `cid`.
    Center = 24,
    /// PrivLib `cexit(value)`: suspends the calling PD, handing `value` to whoever entered it.
    Cexit = 25,
    /// Returns `value` from a function entered with `ccall` to its caller.
    Creturn = 26,
    /// Returns the caller's PD id (`ucid`).
    Ucid = 27,
    /// `async_call(name, name_len, argbuf, request_len)`: starts a nested invocation of the
    /// deployed function `name` on the caller's ArgBuf VMA at `argbuf` (moved to the callee by
    /// `pmove`, never copied); returns a call handle for [`Sysno::Wait`].
    AsyncCall = 28,
    /// `wait(handle)`: suspends the caller until the nested call `handle` finished; returns the
    /// callee's response length (the ArgBuf is the caller's again) or an error.
    Wait = 29,
    /// `kv_get(key, key_len, out, out_len)`: copies the value stored under `key` in the
    /// caller's namespace (its application's, or its function's) into `out`;
    /// returns its full length (which may exceed `out_len`), or [`Error::NotFound`].
    KvGet = 30,
    /// `kv_put(key, key_len, value, value_len)`: stores `value` under `key` (replacing it).
    KvPut = 31,
    /// PrivLib `pmove(argbuf, cid, prot)` then `ccall(cid, func, argbuf)` in one gate
    /// crossing: `ccall_move(cid, func, argbuf, prot)` calls `func(argbuf)` in PD `cid` with
    /// the caller's rights on the ArgBuf VMA at `argbuf` moved to it; returns its result.
    CcallMove = 32,
    /// PrivLib `pmove(argbuf, caller, prot)` then `creturn(value)`: `creturn_move(value,
    /// argbuf, prot)` moves the ArgBuf back to the PD that called and returns `value` to it.
    /// Does not return unless the move fails.
    CreturnMove = 33,
    /// `call(name, name_len, argbuf, request_len)`: [`Sysno::AsyncCall`] and [`Sysno::Wait`]
    /// in one gate crossing: the caller is suspended until the callee finished and gets
    /// `wait`'s result. Refused with [`Error::Busy`] (nothing started) when the caller cannot
    /// be suspended.
    Call = 34,
    /// `kv_delete(key, key_len)`: removes the value stored under `key`; returns 0, or
    /// [`Error::NotFound`] when there was none.
    KvDelete = 35,
    /// μprocesses: `fork()` duplicates the calling μprocess into a new area; returns the
    /// child's PID in the parent and 0 in the child.
    Fork = 40,
    /// `waitpid(pid, options)`: waits for the child `pid` (or any child for `u64::MAX`) to end
    /// and reaps it; returns `pid << 32 | status` (a POSIX status word), or 0 with `WNOHANG`
    /// when no child has ended yet.
    Waitpid = 41,
    /// `getpid()`: the calling μprocess's PID.
    Getpid = 42,
    /// `getppid()`: its parent's PID.
    Getppid = 43,
    /// `sched_yield()`: gives the rest of the time slice up.
    SchedYield = 44,
    /// `pipe(fds)`: a new pipe; writes its read and write descriptors (two `u32`) at `fds`.
    Pipe = 45,
    /// `read(fd, buf, len)`: reads up to `len` bytes; blocks on an empty pipe with a writer;
    /// returns 0 at end of file.
    Read = 46,
    /// `write(fd, buf, len)`: writes `len` bytes (descriptors 1 and 2 start as the console);
    /// blocks on a full pipe; [`Error::BrokenPipe`] when no reader is left.
    Write = 47,
    /// `close(fd)`.
    Close = 48,
    /// `dup2(old, new)`: makes `new` name what `old` names (closing what `new` named).
    Dup2 = 49,
    /// `kill(pid, signal)`: ends the μprocess `pid` as killed by `signal` (0 only checks it
    /// exists).
    Kill = 50,
    /// `sleep(nanoseconds)`: blocks the caller for at least that long.
    Sleep = 51,
    /// `set_fork_mode(mode)`: sets how the calling μprocess's later `fork` calls copy its
    /// memory by default (0 full, 1 copy-on-write, 2 copy-on-access, 3 copy-on-pointer-access);
    /// returns the previous mode.
    SetForkMode = 52,
    /// `meminfo(what)`: the bytes of free physical memory (frames) the kernel has (`what`
    /// 0), copied into the caller since its fork (1), at most held by the caller's area at
    /// once since it started (2), or held by it now (3).
    MemInfo = 53,
    /// `spawn(name, len)`: starts the deployed program `name` as a child of the caller (its
    /// descriptors inherited, as `posix_spawn` does); returns the child's PID.
    Spawn = 54,
    /// `isolation()`: the calling μprocess's isolation level (0 none, 1 non-adversarial,
    /// 2 full).
    Isolation = 55,
    /// `open(name, len, flags)`: opens the disk file `name` (of the caller's namespace) for
    /// reading (`flags` 0) or, created or emptied, for writing (`flags` 1); returns its
    /// descriptor. What is written reaches the disk, whole and atomically, at `fsync` or at the
    /// last `close`.
    Open = 56,
    /// `fsync(fd)`: makes the file open for writing on `fd` durable on the disk as written so
    /// far (replacing its previous contents atomically).
    Fsync = 57,
    /// `rename(names, from_len, to_len)`: renames the disk file whose name is the first
    /// `from_len` bytes at `names` to the `to_len` bytes after them, atomically, replacing a
    /// file of that name.
    Rename = 58,
    /// `unlink(name, len)`: removes the disk file `name`.
    Unlink = 59,
    /// `socket()`: a new, unbound TCP socket's descriptor (blocking).
    Socket = 60,
    /// `bind(fd, port)`: gives the socket `fd` the local port `port` (on the guest's address).
    Bind = 61,
    /// `listen(fd, backlog)`: makes the bound socket `fd` accept connections, up to `backlog`
    /// of them waiting to be accepted.
    Listen = 62,
    /// `accept(fd, peer)`: the descriptor of the next connection the listening socket `fd`
    /// accepted; blocks until one comes (unless non-blocking). When `peer` is not 0, the
    /// peer's IPv4 address and port are written there (4 bytes, then 2, network order).
    Accept = 63,
    /// `connect(fd, ip, port)`: connects the socket `fd` to the IPv4 address `ip` (network
    /// order in the low 32 bits) and `port`; blocks until the connection is established or
    /// refused (a non-blocking socket returns `WouldBlock` and connects in the background).
    Connect = 64,
    /// `shutdown(fd, how)`: ends the sending direction of the connection `fd` (`how` 1 or 2;
    /// 0, receiving only, is accepted and does nothing on the wire).
    Shutdown = 65,
    /// `poll(fds, n, timeout_ms)`: waits until one of the `n` entries at `fds` (8 bytes each:
    /// `u32` descriptor, `u16` events, `u16` returned events, POSIX `pollfd`'s layout and bits)
    /// is ready or `timeout_ms` passed (negative: no limit, 0: do not wait); returns how many
    /// are ready.
    Poll = 66,
    /// `set_nonblocking(fd, on)`: whether calls on the socket `fd` that would wait return
    /// `WouldBlock` instead (`O_NONBLOCK`; shared by every descriptor of the socket).
    SetNonblocking = 67,
    /// `clock(which)`: nanoseconds since boot (`which` 0, monotonic) or since the Unix epoch
    /// (`which` 1, from the board's real-time clock read at boot).
    Clock = 68,
    /// `discard(ranges, n)`: gives back the memory of the pages of `n` ranges of the caller's
    /// area (at most [`DISCARD_MAX`]; at `ranges`, two `u64` each: a page-aligned address and
    /// a length, rounded up to whole pages): they read as zero from then on, as after Linux's
    /// `madvise(MADV_DONTNEED)` (`process_madvise` for several ranges) on private memory; a
    /// forked child that discards a page it still shares with its parent spares the parent's
    /// later write a copy. Returns the number of frames given back.
    Discard = 69,
    /// `getrandom(buf, len)`: fills up to [`GETRANDOM_MAX`] bytes at `buf` with random bytes
    /// from the kernel's ChaCha20 generator, which the CPU's RDSEED or RDRAND seeded at boot
    /// (Linux's `getrandom(2)` with no flags); returns how many it wrote.
    GetRandom = 70,
}

/// The most bytes one `getrandom` call writes (Linux gives at most 32 MiB a call; a loop over
/// calls fills more).
pub const GETRANDOM_MAX: u64 = 4096;

impl Sysno {
    /// Every defined system call, in number order.
    pub const ALL: [Sysno; 55] = [
        Sysno::Null,
        Sysno::Exit,
        Sysno::Log,
        Sysno::CpuId,
        Sysno::Mmap,
        Sysno::Munmap,
        Sysno::Mprotect,
        Sysno::Pmove,
        Sysno::Pcopy,
        Sysno::Cget,
        Sysno::Cput,
        Sysno::Ccall,
        Sysno::Center,
        Sysno::Cexit,
        Sysno::Creturn,
        Sysno::Ucid,
        Sysno::AsyncCall,
        Sysno::Wait,
        Sysno::KvGet,
        Sysno::KvPut,
        Sysno::CcallMove,
        Sysno::CreturnMove,
        Sysno::Call,
        Sysno::KvDelete,
        Sysno::Fork,
        Sysno::Waitpid,
        Sysno::Getpid,
        Sysno::Getppid,
        Sysno::SchedYield,
        Sysno::Pipe,
        Sysno::Read,
        Sysno::Write,
        Sysno::Close,
        Sysno::Dup2,
        Sysno::Kill,
        Sysno::Sleep,
        Sysno::SetForkMode,
        Sysno::MemInfo,
        Sysno::Spawn,
        Sysno::Isolation,
        Sysno::Open,
        Sysno::Fsync,
        Sysno::Rename,
        Sysno::Unlink,
        Sysno::Socket,
        Sysno::Bind,
        Sysno::Listen,
        Sysno::Accept,
        Sysno::Connect,
        Sysno::Shutdown,
        Sysno::Poll,
        Sysno::SetNonblocking,
        Sysno::Clock,
        Sysno::Discard,
        Sysno::GetRandom,
    ];

    /// Whether this is one of the TCP socket calls (`socket` to `set_nonblocking`, `poll`).
    pub const fn is_socket(self) -> bool {
        matches!(
            self,
            Sysno::Socket
                | Sysno::Bind
                | Sysno::Listen
                | Sysno::Accept
                | Sysno::Connect
                | Sysno::Shutdown
                | Sysno::Poll
                | Sysno::SetNonblocking
        )
    }

    /// The call with number `n`, if one is defined.
    #[inline]
    pub fn from_raw(n: u64) -> Option<Sysno> {
        usize::try_from(n)
            .ok()
            .and_then(|i| SYSNO_BY_NUMBER.get(i).copied())
            .flatten()
    }
}

/// [`Sysno::ALL`] indexed by number: every system call decodes with one bounds check and one
/// load, however many calls are defined.
const SYSNO_BY_NUMBER: [Option<Sysno>; Sysno::ALL[Sysno::ALL.len() - 1] as usize + 1] = {
    let mut table = [None; Sysno::ALL[Sysno::ALL.len() - 1] as usize + 1];
    let mut i = 0;
    while i < Sysno::ALL.len() {
        table[Sysno::ALL[i] as usize] = Some(Sysno::ALL[i]);
        i += 1;
    }
    table
};

/// Errors a system call can return; the discriminant is the stable code (returned negated).
#[repr(i64)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// No system call has this number.
    NoSys = 1,
    /// An argument is out of range or malformed.
    InvalidArgs = 2,
    /// A pointer argument names memory the caller may not access.
    BadAddress = 3,
    /// The caller lacks the permission the call needs.
    AccessDenied = 4,
    /// The kernel ran out of memory for the request.
    NoMemory = 5,
    /// No VMA is mapped at the address.
    NotMapped = 6,
    /// No live protection domain has this id.
    NoSuchPd = 7,
    /// The protection domain is running or blocked in a call.
    Busy = 8,
    /// No function of that name is deployed.
    NoSuchFunction = 9,
    /// No outstanding nested call of the caller has this handle.
    NoSuchCall = 10,
    /// The callee faulted, ran past its time limit or returned a malformed value.
    CalleeFailed = 11,
    /// No value is stored under the key.
    NotFound = 12,
    /// A key or value is larger than the store accepts.
    TooLarge = 13,
    /// The caller's function reached one of its manifest's bounds: the PDs its invocation may
    /// create (`max_pds`), its key-value namespace's size (`kv_quota`), or what it may log
    /// in one invocation (`log_limit`).
    LimitReached = 14,
    /// The caller has no child to wait for (`ECHILD`), or is not a μprocess.
    NoChild = 15,
    /// The descriptor is not open (`EBADF`), or too many are (`EMFILE`).
    BadFd = 16,
    /// A write to a pipe whose read ends are all closed (`EPIPE`).
    BrokenPipe = 17,
    /// No μprocess has this PID (`ESRCH`), or it may not be signalled.
    NoSuchProcess = 18,
    /// The disk failed, or a file on it does not match its checksum (`EIO`).
    Io = 19,
    /// The disk, or its directory, has no room left (`ENOSPC`).
    NoSpace = 20,
    /// The call would wait, and the descriptor is non-blocking (`EAGAIN`); for `connect`, the
    /// connection is under way (`EINPROGRESS`).
    WouldBlock = 21,
    /// The port is bound by another socket already (`EADDRINUSE`).
    AddressInUse = 22,
    /// The peer refused the connection (`ECONNREFUSED`).
    ConnectionRefused = 23,
    /// The peer reset the connection, or it timed out (`ECONNRESET`).
    ConnectionReset = 24,
    /// The socket is not connected, or not in the state the call needs (`ENOTCONN`,
    /// `EINVAL` for `listen` on an unbound socket).
    NotConnected = 25,
}

impl Error {
    /// Every defined error, in code order.
    pub const ALL: [Error; 25] = [
        Error::NoSys,
        Error::InvalidArgs,
        Error::BadAddress,
        Error::AccessDenied,
        Error::NoMemory,
        Error::NotMapped,
        Error::NoSuchPd,
        Error::Busy,
        Error::NoSuchFunction,
        Error::NoSuchCall,
        Error::CalleeFailed,
        Error::NotFound,
        Error::TooLarge,
        Error::LimitReached,
        Error::NoChild,
        Error::BadFd,
        Error::BrokenPipe,
        Error::NoSuchProcess,
        Error::Io,
        Error::NoSpace,
        Error::WouldBlock,
        Error::AddressInUse,
        Error::ConnectionRefused,
        Error::ConnectionReset,
        Error::NotConnected,
    ];

    /// The value placed in `rax` for this error.
    pub fn to_ret(self) -> i64 {
        -(self as i64)
    }

    /// Decodes a raw `rax` value: `Ok(value)` when non-negative, `Err(Some(e))` for a known
    /// error code and `Err(None)` for an unknown negative code.
    pub fn from_ret(ret: i64) -> Result<u64, Option<Error>> {
        if ret >= 0 {
            Ok(ret as u64)
        } else {
            Err(Self::ALL.into_iter().find(|e| *e as i64 == -ret))
        }
    }
}

/// [`Sysno::Wait`] returns `-(CALLEE_ERROR_BASE + code)` when the callee returned the function
/// error `code` (a [`crate::function::FnError`]).
pub const CALLEE_ERROR_BASE: i64 = 64;

/// Most ranges one [`Sysno::Discard`] takes.
pub const DISCARD_MAX: usize = 64;

/// Encodes a kernel result as the `rax` value the caller sees.
pub fn encode(result: Result<u64, Error>) -> u64 {
    match result {
        Ok(v) => v,
        Err(e) => e.to_ret() as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysno_round_trips() {
        for s in Sysno::ALL {
            assert_eq!(Sysno::from_raw(s as u64), Some(s));
        }
        assert_eq!(Sysno::from_raw(9999), None);
        assert_eq!(Sysno::from_raw(u64::MAX), None);
        let defined = |n: u64| Sysno::ALL.iter().any(|s| *s as u64 == n);
        for n in (0..=Sysno::ALL[Sysno::ALL.len() - 1] as u64 + 1).filter(|n| !defined(*n)) {
            assert_eq!(Sysno::from_raw(n), None);
        }
    }

    #[test]
    fn errors_round_trip_through_rax() {
        for e in Error::ALL {
            assert_eq!(Error::from_ret(encode(Err(e)) as i64), Err(Some(e)));
        }
        assert_eq!(Error::from_ret(encode(Ok(42)) as i64), Ok(42));
        assert_eq!(Error::from_ret(-999), Err(None));
    }
}
