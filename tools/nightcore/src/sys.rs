//! The few Linux system calls the runtime makes, as safe functions over raw file descriptors.
//!
//! Every wrapper retries on `EINTR` where that is the right thing to do and turns failures into
//! [`std::io::Error`]s.

use std::io::{Error, Result};
use std::os::fd::RawFd;

/// Reads the time-stamp counter: one tick per guest instruction under QEMU's
/// `-icount shift=0`.
#[inline]
pub fn rdtsc() -> u64 {
    // SAFETY: RDTSC has no preconditions; user mode may execute it (CR4.TSD is clear on
    // Linux).
    unsafe { core::arch::x86_64::_rdtsc() }
}

fn check(ret: libc::c_int) -> Result<libc::c_int> {
    if ret < 0 {
        Err(Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// A pipe `(read end, write end)`, its buffer enlarged to 1 MiB so that a burst of messages
/// never fills it.
pub fn pipe() -> Result<(RawFd, RawFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: F_SETPIPE_SZ takes an int argument; the descriptor is ours.
    check(unsafe { libc::fcntl(fds[1], libc::F_SETPIPE_SZ, 1 << 20) })?;
    Ok((fds[0], fds[1]))
}

/// Closes `fd`.
pub fn close(fd: RawFd) {
    // SAFETY: closing a descriptor the caller owns; errors are irrelevant here.
    unsafe { libc::close(fd) };
}

/// One `read(2)` into `buf`: the byte count, 0 at end of file.
pub fn read(fd: RawFd, buf: &mut [u8]) -> Result<usize> {
    loop {
        // SAFETY: `buf` is valid for writes of its length.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Writes all of `parts`, in order, with `writev(2)` (one call unless the pipe is full).
pub fn write_all(fd: RawFd, parts: &[&[u8]]) -> Result<()> {
    let mut skip: usize = 0;
    let total: usize = parts.iter().map(|p| p.len()).sum();
    while skip < total {
        let mut iov = [libc::iovec {
            iov_base: core::ptr::null_mut(),
            iov_len: 0,
        }; 2];
        let mut count = 0;
        let mut offset = skip;
        for part in parts {
            if offset >= part.len() {
                offset -= part.len();
                continue;
            }
            let rest = &part[offset..];
            offset = 0;
            if count < iov.len() {
                iov[count] = libc::iovec {
                    iov_base: rest.as_ptr() as *mut libc::c_void,
                    iov_len: rest.len(),
                };
                count += 1;
            }
        }
        // SAFETY: the iovecs point into `parts`, which outlive the call; writev only reads.
        let n = unsafe { libc::writev(fd, iov.as_ptr(), count as libc::c_int) };
        if n < 0 {
            let e = Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        skip += n as usize;
    }
    Ok(())
}

/// An epoll instance (NightCore's engine waits on its pipes with epoll, through libuv).
#[derive(Debug)]
pub struct Epoll {
    fd: RawFd,
    events: Vec<libc::epoll_event>,
}

impl Epoll {
    /// A new epoll instance.
    pub fn new() -> Result<Epoll> {
        // SAFETY: epoll_create1 has no memory arguments.
        let fd = check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        Ok(Epoll {
            fd,
            events: Vec::new(),
        })
    }

    /// Watches `fd` for input; [`Epoll::wait`] reports it as `token`.
    pub fn add(&mut self, fd: RawFd, token: u64) -> Result<()> {
        let mut event = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        // SAFETY: `event` is a valid epoll_event for the call's duration.
        check(unsafe { libc::epoll_ctl(self.fd, libc::EPOLL_CTL_ADD, fd, &mut event) })?;
        self.events.push(event);
        Ok(())
    }

    /// Waits with `epoll_pwait2(2)` until a watched descriptor is readable or `timeout_ns`
    /// passed (`None`: no limit); the tokens of the ready descriptors (none after the timeout).
    pub fn wait(&mut self, timeout_ns: Option<u64>) -> Result<impl Iterator<Item = u64> + '_> {
        let ts = timeout_ns.map(|ns| libc::timespec {
            tv_sec: (ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (ns % 1_000_000_000) as libc::c_long,
        });
        let tp = ts
            .as_ref()
            .map_or(core::ptr::null(), |t| t as *const libc::timespec);
        let n = loop {
            // SAFETY: `events` has room for `len` entries, `tp` is null or a valid timespec,
            // no signal mask.
            let n = unsafe {
                libc::epoll_pwait2(
                    self.fd,
                    self.events.as_mut_ptr(),
                    self.events.len() as libc::c_int,
                    tp,
                    core::ptr::null(),
                )
            };
            if n >= 0 {
                break n as usize;
            }
            let e = Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        };
        Ok(self.events[..n].iter().map(|e| e.u64))
    }
}

impl Drop for Epoll {
    fn drop(&mut self) {
        close(self.fd);
    }
}

/// Sets this process's timer slack to 1 ns, so that poll timeouts expire when asked (the
/// default slack is 50 µs).
pub fn precise_timers() -> Result<()> {
    // SAFETY: PR_SET_TIMERSLACK takes one unsigned long.
    check(unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) }).map(drop)
}

/// `fork(2)`: `Ok(0)` in the child, the child's pid in the parent.
pub fn fork() -> Result<libc::pid_t> {
    // SAFETY: the runtime is single-threaded when it forks, so the child's copy of the
    // allocator and stdio locks is consistent.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        Err(Error::last_os_error())
    } else {
        Ok(pid)
    }
}

/// Ends a worker process at once, without running the parent's exit handlers.
pub fn exit_child(status: i32) -> ! {
    // SAFETY: `_exit` never returns and has no preconditions.
    unsafe { libc::_exit(status) }
}

/// How a child process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this status.
    Code(i32),
    /// A signal with this number killed it.
    Signal(i32),
}

/// Waits for child `pid` to end and reaps it.
pub fn wait(pid: libc::pid_t) -> Result<Exit> {
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: `status` is a valid int to write; `pid` is our child.
        let ret = unsafe { libc::waitpid(pid, &mut status, 0) };
        if ret == pid {
            break;
        }
        if ret >= 0 {
            return Err(Error::other(format!("waitpid({pid}) returned {ret}")));
        }
        let e = Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    if libc::WIFEXITED(status) {
        Ok(Exit::Code(libc::WEXITSTATUS(status)))
    } else {
        Ok(Exit::Signal(libc::WTERMSIG(status)))
    }
}

/// Kills `pid` and reaps it.
pub fn kill_and_reap(pid: libc::pid_t) {
    // SAFETY: signalling and reaping our own child; a failure (already gone) is harmless.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        libc::waitpid(pid, core::ptr::null_mut(), 0);
    }
}

/// Gives up the CPU (for a spin lock on one vCPU).
pub fn yield_cpu() {
    // SAFETY: sched_yield has no preconditions.
    unsafe { libc::sched_yield() };
}

/// A zero-filled anonymous mapping of `bytes` shared with every process forked later.
pub fn shared_memory(bytes: usize) -> Result<*mut u8> {
    // SAFETY: a fresh anonymous mapping; no existing memory is affected.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        Err(Error::last_os_error())
    } else {
        Ok(p.cast())
    }
}

/// A zero-filled private anonymous mapping of `bytes`, left untouched: a process forked later
/// gets its own copy of every page it writes.
pub fn private_memory(bytes: usize) -> Result<*mut u8> {
    // SAFETY: a fresh anonymous mapping; no existing memory is affected.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        Err(Error::last_os_error())
    } else {
        Ok(p.cast())
    }
}

/// CLOCK_MONOTONIC in nanoseconds.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Sleeps for `ns` nanoseconds.
pub fn sleep_ns(ns: u64) {
    std::thread::sleep(std::time::Duration::from_nanos(ns));
}
