//! TCP sockets for μprocesses: the system calls ([`socket`], [`bind`], [`listen`], [`accept`],
//! [`connect`], [`shutdown`], [`poll`], [`set_nonblocking`]) and two owning wrappers,
//! [`TcpListener`] and [`TcpStream`], that close their descriptor when dropped.
//!
//! A socket is a descriptor like a pipe's: [`crate::process::read`], [`crate::process::write`]
//! and [`crate::process::close`] work on it, `fork` shares it with the child, and
//! [`crate::process::dup2`] copies it. The kernel's TCP/IP stack serves the guest's one IPv4
//! address; a program listens on a port of its own (the HTTP gateway keeps port 80), which
//! `cargo xtask run` forwards from the host when it is one of the forwarded ports.
//!
//! Errors: [`Error::WouldBlock`] from a non-blocking socket that would wait,
//! [`Error::AddressInUse`] for a bound port, [`Error::ConnectionRefused`],
//! [`Error::ConnectionReset`] for a peer that vanished, [`Error::NotConnected`] for a call in
//! the wrong state, [`Error::LimitReached`] when the kernel has no socket left.

use crate::abi::{Error, Sysno};
use crate::process::{Fd, close, read, write};
use crate::syscall::syscall3;

/// Data to read, or a connection to accept (`POLLIN`).
pub const POLLIN: u16 = 0x001;
/// Room to write (`POLLOUT`).
pub const POLLOUT: u16 = 0x004;
/// The connection failed or was reset (`POLLERR`, always reported).
pub const POLLERR: u16 = 0x008;
/// The peer closed its side (`POLLHUP`, always reported).
pub const POLLHUP: u16 = 0x010;
/// The descriptor is not open (`POLLNVAL`, always reported).
pub const POLLNVAL: u16 = 0x020;

/// One entry of [`poll`]: POSIX `struct pollfd`'s layout.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PollFd {
    /// The descriptor.
    pub fd: u32,
    /// What the caller waits for ([`POLLIN`], [`POLLOUT`]).
    pub events: u16,
    /// What is ready (set by [`poll`]).
    pub revents: u16,
}

impl PollFd {
    /// An entry waiting for `events` on `fd`.
    pub fn new(fd: Fd, events: u16) -> Self {
        PollFd {
            fd,
            events,
            revents: 0,
        }
    }
}

/// How [`shutdown`] ends a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shutdown {
    /// Receiving (nothing changes on the wire).
    Read = 0,
    /// Sending: the peer reads end of file once what was written is delivered.
    Write = 1,
    /// Both.
    Both = 2,
}

/// `socket()`: a new TCP socket, blocking, not yet bound.
pub fn socket() -> Result<Fd, Option<Error>> {
    syscall3(Sysno::Socket, 0, 0, 0).map(|fd| fd as Fd)
}

/// `bind(fd, port)`: the local port of socket `fd` (on the guest's address).
pub fn bind(fd: Fd, port: u16) -> Result<(), Option<Error>> {
    syscall3(Sysno::Bind, u64::from(fd), u64::from(port), 0).map(drop)
}

/// `listen(fd, backlog)`: the bound socket `fd` accepts connections, holding up to `backlog`
/// (1 to 128) not yet accepted.
pub fn listen(fd: Fd, backlog: u32) -> Result<(), Option<Error>> {
    syscall3(Sysno::Listen, u64::from(fd), u64::from(backlog), 0).map(drop)
}

/// `accept(fd)`: the next accepted connection and its peer's address and port.
pub fn accept(fd: Fd) -> Result<(Fd, [u8; 4], u16), Option<Error>> {
    let mut peer = [0u8; 6];
    let conn = syscall3(Sysno::Accept, u64::from(fd), peer.as_mut_ptr() as u64, 0)?;
    let ip = [peer[0], peer[1], peer[2], peer[3]];
    Ok((conn as Fd, ip, u16::from_be_bytes([peer[4], peer[5]])))
}

/// `connect(fd, ip, port)`: connects socket `fd` to `ip`:`port`.
pub fn connect(fd: Fd, ip: [u8; 4], port: u16) -> Result<(), Option<Error>> {
    syscall3(
        Sysno::Connect,
        u64::from(fd),
        u64::from(u32::from_be_bytes(ip)),
        u64::from(port),
    )
    .map(drop)
}

/// `shutdown(fd, how)`.
pub fn shutdown(fd: Fd, how: Shutdown) -> Result<(), Option<Error>> {
    syscall3(Sysno::Shutdown, u64::from(fd), how as u64, 0).map(drop)
}

/// `poll(fds, timeout_ms)`: waits until an entry is ready or the time passed (negative: no
/// limit); returns how many entries have `revents` set.
pub fn poll(fds: &mut [PollFd], timeout_ms: i64) -> Result<usize, Option<Error>> {
    syscall3(
        Sysno::Poll,
        fds.as_mut_ptr() as u64,
        fds.len() as u64,
        timeout_ms as u64,
    )
    .map(|n| n as usize)
}

/// `set_nonblocking(fd, on)`.
pub fn set_nonblocking(fd: Fd, on: bool) -> Result<(), Option<Error>> {
    syscall3(Sysno::SetNonblocking, u64::from(fd), u64::from(on), 0).map(drop)
}

/// A listening socket, closed when dropped.
#[derive(Debug)]
pub struct TcpListener(Fd);

impl TcpListener {
    /// Listens on `port` with room for `backlog` connections not yet accepted.
    pub fn bind(port: u16, backlog: u32) -> Result<TcpListener, Option<Error>> {
        let fd = socket()?;
        let l = TcpListener(fd);
        bind(fd, port)?;
        listen(fd, backlog)?;
        Ok(l)
    }

    /// The next connection, and its peer's address and port.
    pub fn accept(&self) -> Result<(TcpStream, [u8; 4], u16), Option<Error>> {
        accept(self.0).map(|(fd, ip, port)| (TcpStream(fd), ip, port))
    }

    /// Its descriptor.
    pub fn fd(&self) -> Fd {
        self.0
    }
}

impl Drop for TcpListener {
    fn drop(&mut self) {
        let _ = close(self.0);
    }
}

/// A TCP connection, closed when dropped.
#[derive(Debug)]
pub struct TcpStream(Fd);

impl TcpStream {
    /// Connects to `ip`:`port`.
    pub fn connect(ip: [u8; 4], port: u16) -> Result<TcpStream, Option<Error>> {
        let s = TcpStream(socket()?);
        connect(s.0, ip, port)?;
        Ok(s)
    }

    /// Takes ownership of the connection `fd`.
    pub fn from_fd(fd: Fd) -> TcpStream {
        TcpStream(fd)
    }

    /// Bytes received (0: the peer closed its side).
    pub fn read(&self, buf: &mut [u8]) -> Result<usize, Option<Error>> {
        read(self.0, buf)
    }

    /// Bytes queued for sending.
    pub fn write(&self, data: &[u8]) -> Result<usize, Option<Error>> {
        write(self.0, data)
    }

    /// Writes all of `data` (on a blocking socket).
    pub fn write_all(&self, mut data: &[u8]) -> Result<(), Option<Error>> {
        while !data.is_empty() {
            let n = write(self.0, data)?;
            data = &data[n..];
        }
        Ok(())
    }

    /// Its descriptor.
    pub fn fd(&self) -> Fd {
        self.0
    }
}

impl Drop for TcpStream {
    fn drop(&mut self) {
        let _ = close(self.0);
    }
}
