//! μprocesses' TCP sockets: `socket`, `bind`, `listen`, `accept`, `connect`, `shutdown`, `poll`
//! and `set_nonblocking`, and `read` and `write` on a socket, over the kernel's socket table
//! (`crate::sockets`).
//!
//! A socket is an open file ([`File::Socket`]): `fork` shares it, and its last `close` closes it,
//! so workers forked after `listen` share one listening socket and its accept queue. A call
//! that would wait on a blocking socket parks the μprocess ([`BlockReason::Socket`]) with the
//! table's generation it saw (and, in `poll`, the sockets and events it waits for); the network
//! loop calls [`super::wake_socket_waiters`] after each pass, which wakes a parked μprocess
//! whose generation is stale and, for `poll`, one of whose sockets is ready (or whose `poll`
//! timed out) to re-issue its call. Bytes go through a kernel buffer at every isolation level.

use super::files::{File, copy_in, copy_out, fd_error, file_of};
use super::{Blocked, Next, Pid, Procs, with};
use crate::arch::user::UserContext;
use crate::orchestrator::JobInfo;
use crate::sockets::{self, Readiness, SockError, SockId};
use alloc::vec::Vec;
use fjord_libos::abi::{Error as AbiError, encode};
use fjord_ufork::process::BlockReason;

/// Most entries one `poll` looks at.
pub const MAX_POLL: u64 = super::files::MAX_FDS as u64;
/// Most bytes one `read` or `write` on a socket moves.
const MAX_IO: usize = 64 * 1024;

/// `poll`'s event bits (POSIX values).
const POLLIN: u16 = 0x001;
const POLLOUT: u16 = 0x004;
const POLLERR: u16 = 0x008;
const POLLHUP: u16 = 0x010;
const POLLNVAL: u16 = 0x020;

/// The system-call error of a socket error.
pub(super) fn sock_error(e: SockError) -> AbiError {
    match e {
        SockError::WouldBlock => AbiError::WouldBlock,
        SockError::AddressInUse => AbiError::AddressInUse,
        SockError::ConnectionRefused => AbiError::ConnectionRefused,
        SockError::ConnectionReset => AbiError::ConnectionReset,
        SockError::NotConnected => AbiError::NotConnected,
        SockError::InvalidArgs => AbiError::InvalidArgs,
        SockError::Limit => AbiError::LimitReached,
        SockError::BadSocket => AbiError::BadFd,
        SockError::NoNetwork => AbiError::Io,
    }
}

/// The socket `fd` of `pid` names.
fn socket_of(p: &Procs, pid: Pid, fd: u64) -> Result<SockId, AbiError> {
    let fd = u32::try_from(fd).map_err(|_| AbiError::BadFd)?;
    match file_of(p, pid, fd)? {
        File::Socket(id) => Ok(id),
        _ => Err(AbiError::InvalidArgs),
    }
}

fn table<R>(
    f: impl FnOnce(&mut sockets::SocketTable) -> Result<R, SockError>,
) -> Result<R, AbiError> {
    sockets::with(f).and_then(|r| r).map_err(sock_error)
}

/// A μprocess parked on sockets.
pub struct SocketWaiter {
    /// Who.
    pub pid: Pid,
    /// The socket table's generation it saw.
    seen: u64,
    /// When its `poll` times out (TSC; `u64::MAX` for never).
    deadline: u64,
    /// For `poll`, the sockets and the events it waits for; `None` (a blocking call on one
    /// socket) waits for any change of the table.
    interest: Option<Vec<(SockId, u16)>>,
}

impl SocketWaiter {
    /// Whether its wait is over in table `t` (at `generation`) at TSC `now`.
    pub fn is_due(&self, t: &mut sockets::SocketTable, generation: u64, now: u64) -> bool {
        if now >= self.deadline {
            return true;
        }
        if self.seen == generation {
            return false;
        }
        match &self.interest {
            None => true,
            Some(list) => list
                .iter()
                .any(|&(id, events)| socket_revents(t.readiness(id), events) != 0),
        }
    }
}

/// Parks `pid` until the socket table changes from the generation `seen` and, with
/// `interest`, one of those sockets is ready (or `deadline`, a TSC value, passes), under the
/// lock of the call that found its socket not ready.
fn park_socket(
    p: &mut Procs,
    pid: Pid,
    blocked: Blocked,
    (seen, deadline, interest): (u64, u64, Option<Vec<(SockId, u16)>>),
    (ctx, info): (&UserContext, JobInfo),
) {
    super::park_locked(p, pid, (BlockReason::Socket, blocked), ctx, info);
    p.socket_waiters.push(SocketWaiter {
        pid,
        seen,
        deadline,
        interest,
    });
    super::SOCKET_WAITING.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
}

/// `socket()`.
pub(super) fn socket(pid: Pid) -> Result<u64, AbiError> {
    let id = table(|t| t.create())?;
    let opened = with(|p| {
        let pr = p.procs.get_mut(pid).ok_or(AbiError::InvalidArgs)?;
        pr.fds
            .open(&mut p.files, File::Socket(id))
            .map_err(|(e, _)| fd_error(e))
    });
    if opened.is_err() {
        let _ = sockets::with(|t| t.close(id));
    }
    opened.map(u64::from)
}

/// `bind(fd, port)`.
pub(super) fn bind(pid: Pid, fd: u64, port: u64) -> Result<u64, AbiError> {
    let port = u16::try_from(port).map_err(|_| AbiError::InvalidArgs)?;
    let id = with(|p| socket_of(p, pid, fd))?;
    table(|t| t.bind(id, port)).map(|()| 0)
}

/// `listen(fd, backlog)`.
pub(super) fn listen(pid: Pid, fd: u64, backlog: u64) -> Result<u64, AbiError> {
    let id = with(|p| socket_of(p, pid, fd))?;
    let backlog = usize::try_from(backlog).unwrap_or(usize::MAX);
    table(|t| t.listen(id, backlog)).map(|()| 0)
}

/// `set_nonblocking(fd, on)`.
pub(super) fn set_nonblocking(pid: Pid, fd: u64, on: u64) -> Result<u64, AbiError> {
    let id = with(|p| socket_of(p, pid, fd))?;
    table(|t| t.set_nonblocking(id, on != 0)).map(|()| 0)
}

/// `shutdown(fd, how)`.
pub(super) fn shutdown(pid: Pid, fd: u64, how: u64) -> Result<u64, AbiError> {
    if how > 2 {
        return Err(AbiError::InvalidArgs);
    }
    let id = with(|p| socket_of(p, pid, fd))?;
    table(|t| t.shutdown(id, how != 0))?;
    sockets::kick();
    Ok(0)
}

/// What a socket call that may wait found.
enum Found<T> {
    Done(Result<T, AbiError>),
    /// Parked (a blocking socket that was not ready).
    Parked,
}

/// Runs `op` on socket `fd` of `pid`; on [`SockError::WouldBlock`] from a blocking socket,
/// parks `pid` in `blocked` under the same locks.
fn attempt<T>(
    pid: Pid,
    fd: u64,
    blocked: Blocked,
    (ctx, info): (&UserContext, JobInfo),
    op: impl FnOnce(&mut sockets::SocketTable, SockId) -> Result<T, SockError>,
) -> Found<T> {
    with(|p| {
        let id = match socket_of(p, pid, fd) {
            Ok(id) => id,
            Err(e) => return Found::Done(Err(e)),
        };
        let r = sockets::with(|t| {
            let r = op(t, id);
            let nonblocking = t.nonblocking(id).unwrap_or(true);
            (r, nonblocking, t.generation())
        });
        match r {
            Err(e) => Found::Done(Err(sock_error(e))),
            Ok((Err(SockError::WouldBlock), false, seen)) => {
                park_socket(p, pid, blocked, (seen, u64::MAX, None), (ctx, info));
                Found::Parked
            }
            Ok((r, _, _)) => Found::Done(r.map_err(sock_error)),
        }
    })
}

/// `accept(fd, peer)`.
pub(super) fn accept(pid: Pid, fd: u64, peer: u64, ctx: &mut UserContext, info: JobInfo) -> Next {
    let found = attempt(
        pid,
        fd,
        Blocked::Accept { fd, peer },
        (ctx, info),
        |t, id| t.accept(id),
    );
    let (conn, ip, port) = match found {
        Found::Parked => return Next::Stop,
        Found::Done(Err(e)) => return Next::Continue(encode(Err(e))),
        Found::Done(Ok(c)) => c,
    };
    let r = with(|p| {
        let pr = p.procs.get_mut(pid).ok_or(AbiError::InvalidArgs)?;
        pr.fds
            .open(&mut p.files, File::Socket(conn))
            .map_err(|(e, _)| fd_error(e))
    });
    let r = r.and_then(|newfd| {
        if peer != 0 {
            let mut bytes = [0u8; 6];
            bytes[..4].copy_from_slice(&ip);
            bytes[4..].copy_from_slice(&port.to_be_bytes());
            if let Err(e) = copy_out(pid, peer, &bytes) {
                let _ = super::files::close(pid, u64::from(newfd));
                return Err(e);
            }
        }
        Ok(u64::from(newfd))
    });
    if r.is_err() {
        // No descriptor for it: the connection is closed rather than lost in the table.
        let _ = sockets::with(|t| t.close(conn));
        sockets::kick();
    }
    Next::Continue(encode(r))
}

/// `connect(fd, ip, port)`: starts the handshake, then waits for it like a re-issued call.
pub(super) fn connect(
    pid: Pid,
    fd: u64,
    (ip, port): (u64, u64),
    ctx: &mut UserContext,
    info: JobInfo,
) -> Next {
    let (Ok(ip), Ok(port)) = (u32::try_from(ip), u16::try_from(port)) else {
        return Next::Continue(encode(Err(AbiError::InvalidArgs)));
    };
    let started = with(|p| socket_of(p, pid, fd))
        .and_then(|id| table(|t| t.connect(id, ip.to_be_bytes(), port)));
    if let Err(e) = started {
        return Next::Continue(encode(Err(e)));
    }
    sockets::kick();
    connect_wait(pid, fd, ctx, info)
}

/// Waits for the handshake `connect` started on `fd`.
pub(super) fn connect_wait(pid: Pid, fd: u64, ctx: &mut UserContext, info: JobInfo) -> Next {
    let found = attempt(
        pid,
        fd,
        Blocked::Connect { fd },
        (ctx, info),
        |t, id| match t.connect_result(id)? {
            true => Ok(0),
            false => Err(SockError::WouldBlock),
        },
    );
    match found {
        Found::Parked => Next::Stop,
        Found::Done(r) => Next::Continue(encode(r)),
    }
}

/// `read(fd, buf, len)` on a socket.
pub(super) fn read(
    pid: Pid,
    fd: u32,
    (buf, len): (u64, u64),
    ctx: &mut UserContext,
    info: JobInfo,
) -> Next {
    let len = (len as usize).min(MAX_IO);
    // Check the destination before taking bytes off the connection.
    if let Err(e) = with(|p| super::files::area_offset(p, pid, buf, len as u64)) {
        return Next::Continue(encode(Err(e)));
    }
    let blocked = Blocked::Read {
        fd,
        buf,
        len: len as u64,
    };
    let found = attempt(pid, u64::from(fd), blocked, (ctx, info), |t, id| {
        t.recv_up_to(id, len)
    });
    match found {
        Found::Parked => Next::Stop,
        Found::Done(Err(e)) => Next::Continue(encode(Err(e))),
        Found::Done(Ok(data)) => {
            let n = data.len();
            if n > 0 {
                // The receive window opened: the peer may be told.
                sockets::kick();
            }
            super::files::count_copied(n);
            match copy_out(pid, buf, &data) {
                Ok(()) => Next::Continue(n as u64),
                Err(e) => Next::Continue(encode(Err(e))),
            }
        }
    }
}

/// `data` queued on socket `id` if it has room for some of it (see `super::in_call`): how
/// much, or `None` when the step must do the call (the socket is full, and may park it).
#[inline(never)]
pub(super) fn send_now(id: SockId, data: &[u8]) -> Option<Result<u64, AbiError>> {
    let data = &data[..data.len().min(MAX_IO)];
    match sockets::with(|t| t.send(id, data)).and_then(|r| r) {
        Err(SockError::WouldBlock) => None,
        Err(e) => Some(Err(sock_error(e))),
        Ok(n) => {
            sockets::kick();
            Some(Ok(n as u64))
        }
    }
}

/// `write(fd, buf, len)` on a socket, of `data` (the caller's bytes, already copied in).
pub(super) fn write(
    pid: Pid,
    fd: u32,
    data: &[u8],
    (buf, len): (u64, u64),
    (ctx, info): (&UserContext, JobInfo),
) -> Next {
    let data = &data[..data.len().min(MAX_IO)];
    let blocked = Blocked::Write { fd, buf, len };
    let found = attempt(pid, u64::from(fd), blocked, (ctx, info), |t, id| {
        t.send(id, data)
    });
    match found {
        Found::Parked => Next::Stop,
        Found::Done(r) => {
            if r.is_ok() {
                sockets::kick();
            }
            Next::Continue(encode(r.map(|n| n as u64)))
        }
    }
}

/// The `revents` of a `poll` entry for file `file` wanting `events`.
fn revents(file: Option<File>, events: u16) -> u16 {
    let r = match file {
        None => return POLLNVAL,
        Some(File::Socket(id)) => match sockets::with(|t| t.readiness(id)) {
            Ok(r) => return socket_revents(r, events),
            Err(_) => return POLLERR,
        },
        // Pipes, disk files and the console: reported ready for what is asked (a read or write
        // on them blocks only while a pipe is empty or full).
        Some(_) => Readiness {
            readable: true,
            writable: true,
            ..Readiness::default()
        },
    };
    ready_bits(r, events)
}

/// `poll`'s bits for a socket whose readiness is `r` (an error for a socket that went).
fn socket_revents(r: Result<Readiness, SockError>, events: u16) -> u16 {
    match r {
        Ok(r) => ready_bits(r, events),
        Err(_) => POLLERR,
    }
}

/// The bits of `events` that readiness `r` satisfies, with `POLLERR` and `POLLHUP`.
fn ready_bits(r: Readiness, events: u16) -> u16 {
    let mut bits = 0;
    if r.readable {
        bits |= POLLIN;
    }
    if r.writable {
        bits |= POLLOUT;
    }
    (bits & events) | if r.error { POLLERR } else { 0 } | if r.hangup { POLLHUP } else { 0 }
}

/// `poll(fds, n, timeout_ms)`; `deadline` is the TSC value a re-issued call gives up at.
pub(super) fn poll(
    pid: Pid,
    (fds, n, timeout_ms): (u64, u64, i64),
    deadline: Option<u64>,
    ctx: &mut UserContext,
    info: JobInfo,
) -> Next {
    if n > MAX_POLL {
        return Next::Continue(encode(Err(AbiError::InvalidArgs)));
    }
    let bytes = match copy_in(pid, fds, n * 8) {
        Ok(b) => b,
        Err(e) => return Next::Continue(encode(Err(e))),
    };
    if let Err(e) = with(|p| super::files::area_offset(p, pid, fds, n * 8)) {
        return Next::Continue(encode(Err(e)));
    }
    let deadline = deadline.unwrap_or_else(|| match timeout_ms {
        t if t < 0 => u64::MAX,
        t => crate::arch::cpu::rdtsc().saturating_add(crate::arch::time::ms_to_ticks(t as u64)),
    });
    let mut entries: Vec<(u32, u16, u16)> = bytes
        .chunks_exact(8)
        .map(|e| {
            let fd = u32::from_le_bytes([e[0], e[1], e[2], e[3]]);
            (fd, u16::from_le_bytes([e[4], e[5]]), 0)
        })
        .collect();
    let ready = with(|p| {
        let seen = sockets::with(|t| t.generation()).unwrap_or(0);
        let mut ready = 0;
        // The sockets and events a parked call waits for (when nothing is ready, every entry
        // is a socket: anything else reads as ready).
        let mut interest = Vec::new();
        for e in entries.iter_mut() {
            let file = file_of(p, pid, e.0).ok();
            if let Some(File::Socket(id)) = file {
                interest.push((id, e.1));
            }
            e.2 = revents(file, e.1);
            ready += usize::from(e.2 != 0);
        }
        if ready == 0 && timeout_ms != 0 && crate::arch::cpu::rdtsc() < deadline {
            let blocked = Blocked::Poll {
                fds,
                n,
                timeout_ms,
                deadline,
            };
            park_socket(
                p,
                pid,
                blocked,
                (seen, deadline, Some(interest)),
                (ctx, info),
            );
            return None;
        }
        Some(ready)
    });
    let Some(ready) = ready else {
        return Next::Stop;
    };
    let mut out = bytes;
    for (e, chunk) in entries.iter().zip(out.chunks_exact_mut(8)) {
        chunk[6..8].copy_from_slice(&e.2.to_le_bytes());
    }
    match copy_out(pid, fds, &out) {
        Ok(()) => Next::Continue(ready as u64),
        Err(e) => Next::Continue(encode(Err(e))),
    }
}

/// The last descriptor of socket `id` closed.
pub(super) fn release(id: SockId) {
    let _ = sockets::with(|t| t.close(id));
    sockets::kick();
}
