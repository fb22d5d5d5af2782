//! μprocesses' descriptors: the console, pipes (`pipe`, `read`, `write`, `close`, `dup2`) and
//! disk files (`open`, `fsync`, `rename`, `unlink`), over `fjord_ufork::fd` (descriptor tables,
//! reference-counted open files), `fjord_ufork::pipe` (bounded pipes) and `crate::fs` (the
//! disk's file store).
//!
//! Disk files follow the store: a file opened for reading is the version of that moment (a
//! small one read whole, a larger one in [`PIECE`]-byte pieces through a store reader that
//! keeps the version's blocks), and a file written replaces the previous contents when the
//! writer calls `fsync` or closes its last descriptor, atomically (a crash leaves the old file
//! or the new one). A program names files in its own
//! key-value namespace: the store holds `<namespace>/<name>`, so programs of other namespaces
//! neither see nor change them.
//!
//! Buffers follow the μprocess's isolation level (μFork §3): at `full`, every buffer a system
//! call reads or writes is copied through a kernel buffer (`write` copies the caller's bytes in
//! before acting on them, so a sibling sharing the memory cannot change them halfway; `read`
//! and `pipe` build their result in the kernel and copy it out through Jord's frames); at
//! `non-adversarial` and `none` the arguments are checked the same way but the bytes go
//! straight between the caller's pages, read and written through its own page tables, and the
//! pipe's ring. [`bytes_copied`] counts what went through kernel buffers. A destination
//! outside the area is refused with [`AbiError::BadAddress`]. A read from an empty pipe that
//! still has a writer, and a write to a full pipe, block the caller (no step is queued) until
//! the other side acts.

use super::{Blocked, Next, Pid, Procs, park_locked, wake, with};
use crate::arch::user::UserContext;
use crate::jord;
use crate::mm::user_memory::InlineBytes;
use crate::orchestrator::JobInfo;
use alloc::vec;
use alloc::vec::Vec;
use fjord_libos::abi::Error as AbiError;
use fjord_ufork::fd::{FdError, FdTable};
use fjord_ufork::pipe::{End, Pipe, PipeError, PipeId, Waiters};
use fjord_ufork::process::{BlockReason, ProcessTable, Woken};

/// Most open files over all μprocesses.
pub const MAX_FILES: usize = 4096;
/// Most pipes.
pub const MAX_PIPES: usize = 1024;
/// Most descriptors per μprocess (Linux's default soft `RLIMIT_NOFILE`): a server's
/// connections are descriptors. Beyond it `accept` closes the connection and fails.
pub const MAX_FDS: u32 = 1024;
/// A pipe's capacity in bytes.
pub const PIPE_CAPACITY: usize = 16 * 1024;
/// Most bytes one `read` or `write` moves.
const MAX_IO: u64 = 64 * 1024;

/// Bytes of system-call buffers copied through kernel buffers (isolation `full`).
static BYTES_COPIED: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

pub(super) fn count_copied(n: usize) {
    BYTES_COPIED.fetch_add(n as u64, core::sync::atomic::Ordering::Relaxed);
}

/// Bytes of system-call buffers μprocesses at isolation `full` had copied through kernel
/// buffers since boot.
pub fn bytes_copied() -> u64 {
    BYTES_COPIED.load(core::sync::atomic::Ordering::Relaxed)
}

/// Bytes a system call copied into the kernel: held inline up to [`InlineBytes::CAPACITY`]
/// bytes (a small pipe message allocates nothing and is not zeroed first), on the heap beyond.
pub(super) enum KernelCopy {
    /// A copy that fits inline.
    Inline(InlineBytes),
    /// A copy larger than the inline room.
    Heap(Vec<u8>),
}

impl KernelCopy {
    /// `a` followed by `b`.
    pub fn of_parts(a: &[u8], b: &[u8]) -> KernelCopy {
        match InlineBytes::from_parts(a, b) {
            Some(inline) => KernelCopy::Inline(inline),
            None => KernelCopy::Heap([a, b].concat()),
        }
    }

    /// A copy of `data`.
    pub fn of(data: &[u8]) -> KernelCopy {
        Self::of_parts(data, &[])
    }
}

impl core::ops::Deref for KernelCopy {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            KernelCopy::Inline(v) => v,
            KernelCopy::Heap(v) => v,
        }
    }
}

impl core::ops::DerefMut for KernelCopy {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            KernelCopy::Inline(v) => v,
            KernelCopy::Heap(v) => v,
        }
    }
}

/// Whether `pid` runs at an isolation level that copies system-call buffers.
fn copies(pid: Pid) -> Option<bool> {
    with(|p| p.procs.get(pid).map(|pr| pr.isolation.copies_buffers()))
}

/// Runs `f` with `pd`'s address space loaded (for reading and writing its memory through its
/// own page tables), interrupts off; the tables loaded before are loaded again after. Nothing
/// is switched when `pd`'s are loaded already (a μprocess's own system call, see
/// `super::keeps_space`).
pub(super) fn in_space<R>(pd: fjord_pd::PdId, f: impl FnOnce() -> R) -> R {
    crate::arch::cpu::without_interrupts(|| {
        let before = crate::arch::percpu::current().current_pd;
        if before == u64::from(pd.raw()) {
            return f();
        }
        jord::with(|j| j.switch_to(pd));
        let r = f();
        let before = fjord_pd::PdId::from_raw(before).unwrap_or(fjord_pd::PdId::KERNEL);
        jord::with(|j| j.switch_to(before));
        r
    })
}

/// What a descriptor names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum File {
    /// The kernel console: writes are printed, reads are at end of file.
    Console,
    /// A pipe's read end.
    PipeRead(PipeId),
    /// A pipe's write end.
    PipeWrite(PipeId),
    /// A disk file, by its slot in [`DiskFiles`].
    Disk(u32),
    /// A TCP socket of the kernel's socket table (`super::net`).
    Socket(crate::sockets::SockId),
}

/// Longest name a program gives a disk file.
pub const MAX_NAME: usize = 32;
/// Most bytes the open disk files of every μprocess hold in the kernel at once (a file read
/// holds one piece, a file written what was written since it last went to the disk; files
/// themselves are bounded only by the disk): `NoMemory` beyond.
pub const MAX_OPEN_BYTES: usize = 48 << 20;
/// Bytes written to a file that make the writing `write` stream them to the disk.
const STREAM_AT: usize = 256 << 10;
/// Bytes of a file read at a time: a file this long or shorter is read whole at `open`.
const PIECE: usize = 256 << 10;

/// Serialises streaming to the disk, so that the bytes of files shared across `fork` reach
/// their drafts in the order they were written.
static STREAMING: spin::Mutex<()> = spin::Mutex::new(());

/// A disk file open in some μprocess.
pub struct DiskFile {
    /// Its name in the store (`<namespace>/<name>`).
    stored: alloc::string::String,
    /// Open for writing (else for reading).
    writing: bool,
    /// Read: the piece of its contents from byte `data_at`. Written: the bytes not yet
    /// streamed to the disk.
    data: Vec<u8>,
    data_at: u64,
    /// Read: its length, and the store's reader of the version opened when it is read in
    /// pieces (longer than [`PIECE`]).
    len: u64,
    reader: Option<fjord_fs::ReaderId>,
    /// Read: the next byte `read` returns.
    pos: u64,
    /// Writes so far, and how many of them the store holds.
    version: u64,
    synced: u64,
    /// Written: the store's draft the bytes stream into (`fjord_fs::FileStore::create`).
    draft: Option<fjord_fs::DraftId>,
    /// Written: streaming failed (the disk is full or failed); every later `write` and
    /// `fsync` returns this. Read: the next piece could not be read; `read` returns this once
    /// the piece it has is consumed.
    failed: Option<AbiError>,
}

impl DiskFile {
    /// Read: `read` has consumed the piece it holds, and more of the file is left.
    fn piece_used_up(&self) -> bool {
        self.pos == self.data_at + self.data.len() as u64 && self.pos < self.len
    }

    /// Gives back what the store keeps for it: the draft of a file written (what a commit
    /// named stays), the reader of a file read.
    fn let_go(&self) {
        if let Some(draft) = self.draft {
            crate::fs::discard(draft);
        }
        if let Some(reader) = self.reader {
            crate::fs::close(reader);
        }
    }
}

/// Every open disk file, by slot, and the bytes they hold.
#[derive(Default)]
pub struct DiskFiles {
    slots: Vec<Option<DiskFile>>,
    bytes: usize,
}

impl DiskFiles {
    /// Whether `more` bytes may be held on top of what the open files hold.
    fn has_room(&self, more: usize) -> bool {
        self.bytes.saturating_add(more) <= MAX_OPEN_BYTES
    }

    fn insert(&mut self, f: DiskFile) -> u32 {
        self.bytes += f.data.len();
        match self.slots.iter().position(Option::is_none) {
            Some(i) => {
                self.slots[i] = Some(f);
                i as u32
            }
            None => {
                self.slots.push(Some(f));
                (self.slots.len() - 1) as u32
            }
        }
    }

    fn get(&self, id: u32) -> Option<&DiskFile> {
        self.slots.get(id as usize).and_then(Option::as_ref)
    }

    fn get_mut(&mut self, id: u32) -> Option<&mut DiskFile> {
        self.slots.get_mut(id as usize).and_then(Option::as_mut)
    }

    /// Appends `data` to the file open for writing in slot `id`; whether it now holds
    /// [`STREAM_AT`] bytes or more (they should go to the disk).
    fn append(&mut self, id: u32, data: &[u8]) -> Result<bool, AbiError> {
        let room = self.has_room(data.len());
        let f = self.get_mut(id).ok_or(AbiError::BadFd)?;
        if !f.writing {
            return Err(AbiError::BadFd);
        }
        if let Some(e) = f.failed {
            return Err(e);
        }
        if !room {
            return Err(AbiError::NoMemory);
        }
        f.data.extend_from_slice(data);
        f.version += 1;
        let full = f.data.len() >= STREAM_AT;
        self.bytes += data.len();
        Ok(full)
    }

    fn remove(&mut self, id: u32) -> Option<DiskFile> {
        let f = self.slots.get_mut(id as usize).and_then(Option::take)?;
        self.bytes -= f.data.len();
        Some(f)
    }
}

/// A new μprocess's descriptors: 0, 1 and 2 name the console.
pub(super) fn console_fds(p: &mut Procs) -> FdTable {
    let mut fds = FdTable::new(MAX_FDS);
    if let Ok(fd) = fds.open(&mut p.files, File::Console) {
        let _ = fds.dup(&mut p.files, fd);
        let _ = fds.dup(&mut p.files, fd);
    }
    fds
}

/// A descriptor table with the console open at each of `fds` (a restored μprocess's: the
/// console is the one kind of file that travels with a checkpoint).
pub(super) fn console_fds_at(p: &mut Procs, fds: &[u32]) -> FdTable {
    let mut table = FdTable::new(MAX_FDS);
    let Some((&first, rest)) = fds.split_first() else {
        return table;
    };
    if let Ok(fd) = table.open(&mut p.files, File::Console) {
        for &want in core::iter::once(&first).chain(rest) {
            let _ = table.dup2(&mut p.files, fd, want);
        }
        if !fds.contains(&fd) {
            let _ = table.close(&mut p.files, fd);
        }
    }
    table
}

pub(super) fn fd_error(_: FdError) -> AbiError {
    AbiError::BadFd
}

/// The area of `pid` and the byte offset in it of `[addr, addr + len)`, which the kernel is
/// about to write: checked as μFork checks a pointer a μprocess passes (SOSP '25 §4), against the
/// capability its plain pointers carry (data permissions over its area VMA,
/// `fjord_ufork::cap`), for a store. An area over the 256 MiB the capability format represents
/// is checked against the VMA's bounds directly.
pub(super) fn area_offset(
    p: &Procs,
    pid: Pid,
    addr: u64,
    len: u64,
) -> Result<(u64, u64), AbiError> {
    area_offset_of(p.procs.get(pid).ok_or(AbiError::InvalidArgs)?, addr, len)
}

/// [`area_offset`] for the μprocess `pr`.
pub(super) fn area_offset_of(
    pr: &super::Proc,
    addr: u64,
    len: u64,
) -> Result<(u64, u64), AbiError> {
    use fjord_ufork::cap::CapPerms;
    let (base, size) = pr.area;
    let fits = match &pr.area_cap {
        Some((area, cap)) => cap.check_range(area, addr, len, CapPerms::W).is_ok(),
        None => addr >= base && addr.checked_add(len).is_some_and(|end| end <= base + size),
    };
    if !fits {
        return Err(AbiError::BadAddress);
    }
    Ok((base, addr - base))
}

/// What `fd` of `pid` names, once `[buf, buf + len)` is checked to lie in `pid`'s area (one
/// look-up of `pid` for both).
fn checked_file(p: &Procs, pid: Pid, fd: u32, (buf, len): (u64, u64)) -> Result<File, AbiError> {
    let pr = p.procs.get(pid).ok_or(AbiError::InvalidArgs)?;
    area_offset_of(pr, buf, len)?;
    let id = pr.fds.get(fd).map_err(fd_error)?;
    p.files.get(id).copied().ok_or(AbiError::BadFd)
}

/// Copies `len` bytes `pid` may read at `addr` (its area, its code and read-only data): read
/// through its own page tables, loaded for the copy, so it reads only what it could itself.
pub(super) fn copy_in(pid: Pid, addr: u64, len: u64) -> Result<KernelCopy, AbiError> {
    let pd = with(|p| p.procs.get(pid).map(|pr| pr.instance.pd)).ok_or(AbiError::InvalidArgs)?;
    read_into_kernel(pd, addr, len)
}

/// The `len` bytes at `addr` as `pd` may read them (through its own page tables), copied into
/// the kernel.
fn read_into_kernel(pd: fjord_pd::PdId, addr: u64, len: u64) -> Result<KernelCopy, AbiError> {
    in_space(pd, || match InlineBytes::from_user(addr, len)? {
        Some(inline) => Ok(KernelCopy::Inline(inline)),
        // Checked before the kernel allocates room for it.
        None => crate::mm::user_memory::bytes(addr, len).map(KernelCopy::of),
    })
    .map_err(AbiError::from)
}

/// Copies `data` into `pid`'s area at `addr`, through its own page tables (loaded for the
/// copy), so it writes only what it could itself.
pub(super) fn copy_out(pid: Pid, addr: u64, data: &[u8]) -> Result<(), AbiError> {
    let pd = with(|p| {
        let pr = p.procs.get(pid).ok_or(AbiError::InvalidArgs)?;
        area_offset_of(pr, addr, data.len() as u64).map(|_| pr.instance.pd)
    })?;
    in_space(pd, || crate::mm::user_memory::copy_to(addr, data)).map_err(AbiError::from)
}

/// `pipe(fds)`: two descriptors, written as two `u32` at `fds`.
pub(super) fn pipe(pid: Pid, out: u64) -> Result<u64, AbiError> {
    // Check the destination before anything is made.
    with(|p| area_offset(p, pid, out, 8))?;
    let (r, w) = with(|p| {
        let id = p
            .pipes
            .create(PIPE_CAPACITY)
            .map_err(|_| AbiError::NoMemory)?;
        let pr = p.procs.get_mut(pid).ok_or(AbiError::InvalidArgs)?;
        let r = pr.fds.open(&mut p.files, File::PipeRead(id));
        let r = match r {
            Ok(fd) => fd,
            Err(_) => {
                let _ = p.pipes.close_end(id, End::Read);
                let _ = p.pipes.close_end(id, End::Write);
                return Err(AbiError::BadFd);
            }
        };
        match pr.fds.open(&mut p.files, File::PipeWrite(id)) {
            Ok(w) => Ok((r, w)),
            Err(_) => {
                let _ = pr.fds.close(&mut p.files, r);
                let _ = p.pipes.close_end(id, End::Read);
                let _ = p.pipes.close_end(id, End::Write);
                Err(AbiError::BadFd)
            }
        }
    })?;
    let mut bytes = [0u8; 8];
    bytes[..4].copy_from_slice(&r.to_le_bytes());
    bytes[4..].copy_from_slice(&w.to_le_bytes());
    let copies = copies(pid).ok_or(AbiError::InvalidArgs)?;
    copy_out(pid, out, &bytes)?;
    if copies {
        count_copied(bytes.len());
    }
    Ok(0)
}

/// The open file `fd` of `pid` names.
pub(super) fn file_of(p: &Procs, pid: Pid, fd: u32) -> Result<File, AbiError> {
    let pr = p.procs.get(pid).ok_or(AbiError::InvalidArgs)?;
    let id = pr.fds.get(fd).map_err(fd_error)?;
    p.files.get(id).copied().ok_or(AbiError::BadFd)
}

/// Parks `pid` in `blocked`, a read or write of the pipe `id`, under the lock that found the
/// pipe empty or full (see [`park_locked`]).
fn park_on(
    p: &mut Procs,
    pid: Pid,
    id: PipeId,
    blocked: Blocked,
    (ctx, info): (&UserContext, JobInfo),
) {
    let end = match blocked {
        Blocked::Read { .. } => End::Read,
        _ => End::Write,
    };
    if let Some(pipe) = p.pipes.get_mut(id) {
        pipe.note_waiting(end, pid);
    }
    park_locked(p, pid, (block_reason(id, end), blocked), ctx, info);
}

/// Why a μprocess parked on the `end` of pipe `id` waits.
fn block_reason(id: PipeId, end: End) -> BlockReason {
    match end {
        End::Read => BlockReason::Read(id.raw()),
        End::Write => BlockReason::Write(id.raw()),
    }
}

/// Wakes the μprocesses parked on the `end` of pipe `id` (the pipe changed for them); looks
/// for them only if one parked since the last look ([`park_on`] notes it).
fn wake_waiters(table: &mut ProcessTable, pipe: &mut Pipe, id: PipeId, end: End) -> Woken {
    let reason = block_reason(id, end);
    match pipe.take_waiting(end) {
        Waiters::None => Woken::new(),
        Waiters::One(pid) => {
            let mut woken = Woken::new();
            if table.wake_if(pid, reason) {
                woken.push(pid);
            }
            woken
        }
        Waiters::Many => table.wake_all(reason),
    }
}

/// The μprocess making a system call, as its step knows it: no lookup needed.
#[derive(Clone, Copy, Debug)]
pub(super) struct Caller {
    /// Its PID.
    pub pid: Pid,
    /// Its PD.
    pub pd: fjord_pd::PdId,
    /// Whether its isolation copies system-call buffers.
    pub copies: bool,
}

/// `read(fd, buf, len)`.
pub(super) fn read(
    caller: Caller,
    fd: u32,
    buf: u64,
    len: u64,
    ctx: &mut UserContext,
    info: JobInfo,
) -> Next {
    let (pid, len) = (caller.pid, len.min(MAX_IO));
    let mut attempts = 0;
    loop {
        let mut socket = false;
        let (next, used_up) = match caller.copies {
            true => read_copying(caller, fd, (buf, len), (ctx, info), &mut socket),
            false => in_space(caller.pd, || {
                read_direct(pid, fd, (buf, len), (ctx, info), &mut socket)
            }),
        };
        if socket {
            return super::net::read(pid, fd, (buf, len), ctx, info);
        }
        // A disk file's piece is used up: the next one, outside the lock and out of the
        // caller's address space; a read that got nothing (another reader of the same open
        // file used the piece up) tries again.
        if let Some((id, got_nothing)) = used_up {
            next_piece(id);
            if got_nothing && attempts < 3 {
                attempts += 1;
                continue;
            }
        }
        return next;
    }
}

/// `read` at isolation `full`: the bytes are gathered in the kernel, then copied out. With it,
/// the slot of a disk file whose piece the read used up, and whether the read got nothing.
/// `socket` is set, and nothing done, when `fd` names a socket.
fn read_copying(
    caller: Caller,
    fd: u32,
    (buf, len): (u64, u64),
    (ctx, info): (&mut UserContext, JobInfo),
    socket: &mut bool,
) -> (Next, Option<(u32, bool)>) {
    let (pid, mut used_up) = (caller.pid, None);
    let r = with(|p| {
        match checked_file(p, pid, fd, (buf, len))? {
            File::Console => Ok(Some((KernelCopy::of(&[]), Woken::new()))),
            File::Socket(_) => {
                *socket = true;
                Err(AbiError::BadFd)
            }
            File::PipeWrite(_) => Err(AbiError::BadFd),
            File::Disk(id) => {
                let (bytes, done) = disk_read(p, id, len)?;
                used_up = done.then_some((id, bytes.is_empty()));
                Ok(Some((KernelCopy::of(bytes), Woken::new())))
            }
            File::PipeRead(id) => {
                let pipe = p.pipes.get_mut(id).ok_or(AbiError::BadFd)?;
                match pipe.peek(len as usize) {
                    Ok((a, b)) => {
                        let data = KernelCopy::of_parts(a, b);
                        pipe.consume(data.len());
                        // Room was made: writers blocked on this pipe may go on.
                        let woken = wake_waiters(&mut p.table, pipe, id, End::Write);
                        Ok(Some((data, woken)))
                    }
                    Err(PipeError::WouldBlock) => {
                        park_on(p, pid, id, Blocked::Read { fd, buf, len }, (ctx, info));
                        Ok(None)
                    }
                    Err(_) => Err(AbiError::InvalidArgs),
                }
            }
        }
    });
    let r = r.map(|d| {
        d.map(|(data, woken)| {
            wake(woken);
            data
        })
    });
    let next = match r {
        // `checked_file` found the buffer in the caller's area.
        Ok(Some(data)) => match in_space(caller.pd, || crate::mm::user_memory::copy_to(buf, &data))
        {
            Ok(()) => {
                count_copied(data.len());
                Next::Continue(data.len() as u64)
            }
            Err(e) => Next::Continue(fjord_libos::abi::encode(Err(e.into()))),
        },
        // Parked already, under the lock that saw the pipe empty.
        Ok(None) => Next::Stop,
        Err(e) => Next::Continue(fjord_libos::abi::encode(Err(e))),
    };
    (next, used_up)
}

/// `read` below isolation `full`, with the caller's address space loaded: the pipe's bytes go
/// straight into the caller's buffer, through its own page tables. With it, the slot of a disk
/// file whose piece the read used up, and whether the read got nothing. `socket` is set, and
/// nothing done, when `fd` names a socket.
fn read_direct(
    pid: Pid,
    fd: u32,
    (buf, len): (u64, u64),
    (ctx, info): (&mut UserContext, JobInfo),
    socket: &mut bool,
) -> (Next, Option<(u32, bool)>) {
    let mut used_up = None;
    let r = with(|p| {
        match checked_file(p, pid, fd, (buf, len))? {
            File::Console => Ok(Some((0, Woken::new()))),
            File::Socket(_) => {
                *socket = true;
                Err(AbiError::BadFd)
            }
            File::PipeWrite(_) => Err(AbiError::BadFd),
            File::Disk(id) => {
                let (bytes, done) = disk_read(p, id, len)?;
                crate::mm::user_memory::copy_to(buf, bytes)?;
                used_up = done.then_some((id, bytes.is_empty()));
                Ok(Some((bytes.len(), Woken::new())))
            }
            File::PipeRead(id) => {
                let pipe = p.pipes.get_mut(id).ok_or(AbiError::BadFd)?;
                match pipe.peek(len as usize) {
                    Ok((a, b)) => {
                        crate::mm::user_memory::copy_to(buf, a)?;
                        crate::mm::user_memory::copy_to(buf + a.len() as u64, b)?;
                        let n = a.len() + b.len();
                        pipe.consume(n);
                        // Room was made: writers blocked on this pipe may go on.
                        let woken = match n > 0 {
                            true => wake_waiters(&mut p.table, pipe, id, End::Write),
                            false => Woken::new(),
                        };
                        Ok(Some((n, woken)))
                    }
                    Err(PipeError::WouldBlock) => {
                        park_on(p, pid, id, Blocked::Read { fd, buf, len }, (ctx, info));
                        Ok(None)
                    }
                    Err(_) => Err(AbiError::InvalidArgs),
                }
            }
        }
    });
    let next = match r {
        Ok(Some((n, woken))) => {
            wake(woken);
            Next::Continue(n as u64)
        }
        // Parked already, under the lock that saw the pipe empty.
        Ok(None) => Next::Stop,
        Err(e) => Next::Continue(fjord_libos::abi::encode(Err(e))),
    };
    (next, used_up)
}

/// `write(fd, buf, len)`.
pub(super) fn write(
    caller: Caller,
    fd: u32,
    buf: u64,
    len: u64,
    ctx: &mut UserContext,
    info: JobInfo,
) -> Next {
    let (pid, pd, len) = (caller.pid, caller.pd, len.min(MAX_IO));
    // A disk file that the write filled to `STREAM_AT` streams to the disk afterwards, out of
    // the caller's address space (an error shows at the next `write` or `fsync`).
    let mut full = None;
    let mut socket = false;
    let next = if caller.copies {
        // Full isolation: the bytes are copied into the kernel first, so a sibling changing
        // them meanwhile cannot make the kernel act on two versions.
        match read_into_kernel(pd, buf, len) {
            Ok(data) => {
                count_copied(data.len());
                let to = (&mut full, &mut socket);
                let next = write_from(pid, fd, &data, (buf, len), (&mut *ctx, info), to);
                match socket {
                    true => super::net::write(pid, fd, &data, (buf, len), (ctx, info)),
                    false => next,
                }
            }
            Err(e) => Next::Continue(fjord_libos::abi::encode(Err(e))),
        }
    } else {
        // Lesser isolation: straight from the caller's pages (checked, through its own tables).
        in_space(pd, || match crate::mm::user_memory::bytes(buf, len) {
            Ok(data) => {
                let ctx = (&mut *ctx, info);
                write_from(pid, fd, data, (buf, len), ctx, (&mut full, &mut socket))
            }
            Err(e) => Next::Continue(fjord_libos::abi::encode(Err(e.into()))),
        })
    };
    if socket && !caller.copies {
        // Copied in at every isolation level: the socket's buffer is the kernel's.
        return match read_into_kernel(pd, buf, len) {
            Ok(data) => {
                count_copied(data.len());
                super::net::write(pid, fd, &data, (buf, len), (ctx, info))
            }
            Err(e) => Next::Continue(fjord_libos::abi::encode(Err(e))),
        };
    }
    if let Some(id) = full {
        let _ = stream(id, false);
    }
    next
}

/// `write(fd, buf, len)` completed without the caller's step when `fd` is a pipe or a socket
/// with room (see `super::in_call`): the result, or `None` when the step must do the call
/// (another kind of file, a full pipe or socket, a bad descriptor). Copies and checks as
/// [`write`] does.
pub(super) fn write_now(caller: Caller, fd: u32, buf: u64, len: u64) -> Option<u64> {
    let len = len.min(MAX_IO);
    let r = if caller.copies {
        let data = match read_into_kernel(caller.pd, buf, len) {
            Ok(data) => data,
            Err(e) => return Some(fjord_libos::abi::encode(Err(e))),
        };
        let mut socket = None;
        let r = match write_pipe_now(caller.pid, fd, &data, &mut socket) {
            Some(r) => r,
            None => super::net::send_now(socket?, &data)?,
        };
        count_copied(data.len());
        r
    } else {
        in_space(caller.pd, || {
            match crate::mm::user_memory::bytes(buf, len) {
                Ok(data) => {
                    let mut socket = None;
                    match write_pipe_now(caller.pid, fd, data, &mut socket) {
                        Some(r) => Some(r),
                        None => {
                            let r = super::net::send_now(socket?, data)?;
                            // Copied in at every isolation level: the socket's buffer is the
                            // kernel's.
                            count_copied(data.len());
                            Some(r)
                        }
                    }
                }
                Err(e) => Some(Err(e.into())),
            }
        })?
    };
    Some(fjord_libos::abi::encode(r))
}

/// `data` written to `fd` of `pid` if it is a pipe with room for some of it (readers woken);
/// `None` otherwise, with `socket` set when `fd` names a socket.
fn write_pipe_now(
    pid: Pid,
    fd: u32,
    data: &[u8],
    socket: &mut Option<crate::sockets::SockId>,
) -> Option<Result<u64, AbiError>> {
    let r = with(|p| {
        let file = file_of(p, pid, fd).ok()?;
        let File::PipeWrite(id) = file else {
            if let File::Socket(id) = file {
                *socket = Some(id);
            }
            return None;
        };
        let pipe = p.pipes.get_mut(id)?;
        Some(match pipe.write(data) {
            Ok(n) => Ok((n, wake_waiters(&mut p.table, pipe, id, End::Read))),
            Err(PipeError::WouldBlock) => return None,
            Err(PipeError::BrokenPipe) => Err(AbiError::BrokenPipe),
            Err(_) => Err(AbiError::InvalidArgs),
        })
    })?;
    Some(r.map(|(n, woken)| {
        wake(woken);
        n as u64
    }))
}

/// `write` of `data` (the caller's `buf` and `len`) to `fd`; `full` gets the slot of a disk
/// file the write filled to [`STREAM_AT`]; `socket` is set, and nothing done, when `fd` names
/// a socket.
fn write_from(
    pid: Pid,
    fd: u32,
    data: &[u8],
    (buf, len): (u64, u64),
    (ctx, info): (&mut UserContext, JobInfo),
    (full, socket): (&mut Option<u32>, &mut bool),
) -> Next {
    let r = with(|p| match file_of(p, pid, fd)? {
        File::Console => Ok(Some((data.len(), None))),
        File::Socket(_) => {
            *socket = true;
            Err(AbiError::BadFd)
        }
        File::PipeRead(_) => Err(AbiError::BadFd),
        File::Disk(id) => {
            if p.disk.append(id, data)? {
                *full = Some(id);
            }
            Ok(Some((data.len(), Some(Woken::new()))))
        }
        File::PipeWrite(id) => {
            let pipe = p.pipes.get_mut(id).ok_or(AbiError::BadFd)?;
            match pipe.write(data) {
                // Readers blocked on this pipe may go on.
                Ok(n) => Ok(Some((
                    n,
                    Some(wake_waiters(&mut p.table, pipe, id, End::Read)),
                ))),
                Err(PipeError::WouldBlock) => {
                    park_on(p, pid, id, Blocked::Write { fd, buf, len }, (ctx, info));
                    Ok(None)
                }
                Err(PipeError::BrokenPipe) => Err(AbiError::BrokenPipe),
                Err(_) => Err(AbiError::InvalidArgs),
            }
        }
    });
    match r {
        Ok(Some((n, woken))) => {
            if woken.is_none() {
                console(pid, data);
            }
            wake(woken.unwrap_or_default());
            Next::Continue(n as u64)
        }
        // Parked already, under the lock that saw the pipe full.
        Ok(None) => Next::Stop,
        Err(e) => Next::Continue(fjord_libos::abi::encode(Err(e))),
    }
}

/// Prints what `pid` wrote to the console, within its console budget.
fn console(pid: Pid, data: &[u8]) {
    let pd = with(|p| p.procs.get(pid).map(|pr| pr.instance.pd));
    let text = core::str::from_utf8(data).unwrap_or("(not UTF-8)");
    if let Some(pd) = pd
        && jord::tenant::take_log(pd, data.len() as u32)
    {
        crate::kprintln!("[μprocess {}] {}", pid.raw(), text.trim_end_matches('\n'));
    }
}

/// `close(fd)`.
pub(super) fn close(pid: Pid, fd: u64) -> Result<u64, AbiError> {
    let fd = u32::try_from(fd).map_err(|_| AbiError::BadFd)?;
    let last = with(|p| {
        let pr = p.procs.get_mut(pid).ok_or(AbiError::InvalidArgs)?;
        pr.fds.close(&mut p.files, fd).map_err(fd_error)
    })?;
    if let Some(file) = last {
        release(file);
    }
    Ok(0)
}

/// `dup2(old, new)`.
pub(super) fn dup2(pid: Pid, old: u64, new: u64) -> Result<u64, AbiError> {
    let old = u32::try_from(old).map_err(|_| AbiError::BadFd)?;
    let new = u32::try_from(new).map_err(|_| AbiError::BadFd)?;
    let (fd, last) = with(|p| {
        let pr = p.procs.get_mut(pid).ok_or(AbiError::InvalidArgs)?;
        pr.fds.dup2(&mut p.files, old, new).map_err(fd_error)
    })?;
    if let Some(file) = last {
        release(file);
    }
    Ok(u64::from(fd))
}

/// Closes every descriptor of a μprocess that ended.
pub(super) fn close_all(mut fds: FdTable) {
    let last = with(|p| {
        let last = fds.close_all(&mut p.files);
        p.spares.keep_fds(fds);
        last
    });
    for file in last {
        release(file);
    }
}

/// The last descriptor of `file` went: a pipe end closes, and whoever waits on the other end
/// is woken (a reader sees end of file, a writer a broken pipe).
fn release(file: File) {
    if let File::Socket(id) = file {
        super::net::release(id);
        return;
    }
    if let File::Disk(id) = file {
        let saved = save(id);
        if let Some(f) = with(|p| p.disk.remove(id)) {
            if let Err(e) = saved {
                log::warn!("disk file {}: not saved at its last close: {e:?}", f.stored);
            }
            f.let_go();
        }
        return;
    }
    let woken = with(|p| match file {
        File::Console | File::Disk(_) | File::Socket(_) => Woken::new(),
        File::PipeRead(id) => {
            let _ = p.pipes.close_end(id, End::Read);
            p.table.wake_all(BlockReason::Write(id.raw()))
        }
        File::PipeWrite(id) => {
            let _ = p.pipes.close_end(id, End::Write);
            p.table.wake_all(BlockReason::Read(id.raw()))
        }
    });
    wake(woken);
}

/// Up to `len` bytes of the disk file in slot `id` from its position, which moves past them
/// (no more than its piece holds), and whether the piece is now used up with more of the file
/// to come: then the caller reads the next piece in with [`next_piece`], outside the lock.
fn disk_read(p: &mut Procs, id: u32, len: u64) -> Result<(&[u8], bool), AbiError> {
    let f = p.disk.get_mut(id).ok_or(AbiError::BadFd)?;
    if f.writing {
        return Err(AbiError::BadFd);
    }
    let start = usize::try_from(f.pos - f.data_at)
        .unwrap_or(usize::MAX)
        .min(f.data.len());
    let end = start.saturating_add(len as usize).min(f.data.len());
    f.pos = f.data_at + end as u64;
    let used_up = f.piece_used_up();
    if used_up
        && start == end
        && let Some(e) = f.failed
    {
        return Err(e);
    }
    Ok((&f.data[start..end], used_up))
}

/// Reads the piece of the disk file in slot `id` that starts at its position, unless another
/// reader of the same open file did already; a failure is kept for `read` to return.
fn next_piece(id: u32) {
    let want = with(|p| {
        let f = p.disk.get(id)?;
        let reader = f
            .reader
            .filter(|_| f.piece_used_up() && f.failed.is_none())?;
        let size = usize::try_from(f.len - f.pos).unwrap_or(PIECE).min(PIECE);
        Some((reader, f.pos, size, p.disk.has_room(size)))
    });
    let Some((reader, pos, size, room)) = want else {
        return;
    };
    let piece = match room {
        false => Err(AbiError::NoMemory),
        true => {
            let mut piece = vec![0u8; size];
            match crate::fs::read_at(reader, pos, &mut piece) {
                Ok(n) if n == size => Ok(piece),
                Ok(_) => Err(AbiError::Io),
                Err(e) => Err(fs_error(e)),
            }
        }
    };
    with(|p| {
        let disk = &mut p.disk;
        let Some(f) = disk.slots.get_mut(id as usize).and_then(Option::as_mut) else {
            return;
        };
        if f.pos != pos || !f.piece_used_up() {
            return;
        }
        match piece {
            Ok(piece) => {
                disk.bytes = disk.bytes - f.data.len() + piece.len();
                f.data = piece;
                f.data_at = pos;
            }
            Err(e) => f.failed = Some(e),
        }
    });
}

/// The store's name of the file `pid` calls by the `len` bytes at `addr`: checked (1 to
/// [`MAX_NAME`] bytes of letters, digits, `.`, `_` and `-`, not `.` or `..`) and put in its
/// program's namespace.
fn stored_name(pid: Pid, addr: u64, len: u64) -> Result<alloc::string::String, AbiError> {
    if len == 0 || len > MAX_NAME as u64 {
        return Err(AbiError::InvalidArgs);
    }
    let bytes = copy_in(pid, addr, len)?;
    stored_name_of(pid, &bytes)
}

fn stored_name_of(pid: Pid, bytes: &[u8]) -> Result<alloc::string::String, AbiError> {
    let ok = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-');
    if bytes.is_empty()
        || bytes.len() > MAX_NAME
        || !bytes.iter().all(ok)
        || bytes == b"."
        || bytes == b".."
    {
        return Err(AbiError::InvalidArgs);
    }
    let name = core::str::from_utf8(bytes).map_err(|_| AbiError::InvalidArgs)?;
    let ns = with(|p| {
        p.procs
            .get(pid)
            .map(|pr| alloc::string::String::from(pr.func.manifest.namespace()))
    })
    .ok_or(AbiError::InvalidArgs)?;
    Ok(alloc::format!("{ns}/{name}"))
}

/// The system-call error of a store error.
fn fs_error(e: crate::fs::Error) -> AbiError {
    use fjord_fs::FsError;
    match e {
        FsError::NotFound => AbiError::NotFound,
        FsError::NoSpace | FsError::TooManyFiles => AbiError::NoSpace,
        FsError::BadName => AbiError::InvalidArgs,
        e => {
            log::warn!("disk: {e:?}");
            AbiError::Io
        }
    }
}

/// `open(name, len, flags)`: flags 0 reads the file (the version of now: read whole now if it
/// is at most [`PIECE`] bytes long, else a piece at a time), 1 writes it (created or emptied,
/// saved at `fsync` or the last `close`).
pub(super) fn open(pid: Pid, name: u64, len: u64, flags: u64) -> Result<u64, AbiError> {
    let stored = stored_name(pid, name, len)?;
    let file = match flags {
        0 => open_for_reading(stored)?,
        // A new file, streamed into a draft: saved (empty, if nothing is written) at `fsync`
        // or its last close.
        1 => DiskFile {
            draft: Some(crate::fs::create(&stored).map_err(fs_error)?),
            stored,
            writing: true,
            data: Vec::new(),
            data_at: 0,
            len: 0,
            reader: None,
            pos: 0,
            version: 1,
            synced: 0,
            failed: None,
        },
        _ => return Err(AbiError::InvalidArgs),
    };
    with(|p| {
        let id = p.disk.insert(file);
        let pr = p.procs.get_mut(pid).ok_or(AbiError::InvalidArgs)?;
        match pr.fds.open(&mut p.files, File::Disk(id)) {
            Ok(fd) => Ok(u64::from(fd)),
            Err((e, _)) => {
                if let Some(f) = p.disk.remove(id) {
                    f.let_go();
                }
                Err(fd_error(e))
            }
        }
    })
}

/// The current version of the stored file `stored`, open for reading: read whole if it is
/// short, else through a store reader with its first piece read.
fn open_for_reading(stored: alloc::string::String) -> Result<DiskFile, AbiError> {
    let size = crate::fs::len_of(&stored)
        .map_err(fs_error)?
        .ok_or(AbiError::NotFound)?;
    let first = usize::try_from(size).unwrap_or(usize::MAX).min(PIECE);
    if !with(|p| p.disk.has_room(first)) {
        return Err(AbiError::NoMemory);
    }
    let mut file = DiskFile {
        stored,
        writing: false,
        data: Vec::new(),
        data_at: 0,
        len: 0,
        reader: None,
        pos: 0,
        version: 0,
        synced: 0,
        draft: None,
        failed: None,
    };
    if first as u64 == size {
        file.data = crate::fs::read(&file.stored).map_err(fs_error)?;
        file.len = file.data.len() as u64;
        return Ok(file);
    }
    let (reader, len) = crate::fs::open(&file.stored).map_err(fs_error)?;
    (file.reader, file.len) = (Some(reader), len);
    let mut piece = vec![0u8; first.min(usize::try_from(len).unwrap_or(usize::MAX))];
    match crate::fs::read_at(reader, 0, &mut piece) {
        Ok(n) => {
            piece.truncate(n);
            file.data = piece;
            Ok(file)
        }
        Err(e) => {
            crate::fs::close(reader);
            Err(fs_error(e))
        }
    }
}

/// `fsync(fd)`: the file open for writing on `fd` saved as written so far.
pub(super) fn fsync(pid: Pid, fd: u64) -> Result<u64, AbiError> {
    let fd = u32::try_from(fd).map_err(|_| AbiError::BadFd)?;
    match with(|p| file_of(p, pid, fd))? {
        File::Disk(id) => save(id).map(|()| 0),
        // The console, pipes and sockets hold nothing to save.
        _ => Ok(0),
    }
}

/// Streams what was written to the disk file in slot `id` into its draft and, with `commit`,
/// names it all in the store; a file that was not written since its last save is left alone.
fn stream(id: u32, commit: bool) -> Result<(), AbiError> {
    let _order = STREAMING.lock();
    let taken = with(|p| -> Result<_, AbiError> {
        let f = p.disk.get_mut(id).ok_or(AbiError::BadFd)?;
        if !f.writing || (commit && f.synced == f.version) {
            return Ok(None);
        }
        if let Some(e) = f.failed {
            return Err(e);
        }
        let data = core::mem::take(&mut f.data);
        let (draft, version) = (f.draft.ok_or(AbiError::BadFd)?, f.version);
        p.disk.bytes -= data.len();
        Ok(Some((draft, data, version)))
    })?;
    let Some((draft, data, version)) = taken else {
        return Ok(());
    };
    let done = crate::fs::append(draft, &data).and_then(|()| match commit {
        true => crate::fs::commit(draft),
        false => Ok(()),
    });
    let done = done.map_err(fs_error);
    with(|p| {
        if let Some(f) = p.disk.get_mut(id) {
            match done {
                Ok(()) if commit => f.synced = f.synced.max(version),
                Ok(()) => {}
                Err(e) => f.failed = Some(e),
            }
        }
    });
    done
}

/// Saves the disk file in slot `id` as written so far ([`stream`] with a commit).
fn save(id: u32) -> Result<(), AbiError> {
    stream(id, true)
}

/// `rename(names, from_len, to_len)`.
pub(super) fn rename(pid: Pid, names: u64, from_len: u64, to_len: u64) -> Result<u64, AbiError> {
    if from_len == 0 || to_len == 0 || from_len > MAX_NAME as u64 || to_len > MAX_NAME as u64 {
        return Err(AbiError::InvalidArgs);
    }
    let bytes = copy_in(pid, names, from_len + to_len)?;
    let (from, to) = bytes.split_at(from_len as usize);
    let (from, to) = (stored_name_of(pid, from)?, stored_name_of(pid, to)?);
    crate::fs::rename(&from, &to).map_err(fs_error)?;
    Ok(0)
}

/// `unlink(name, len)`.
pub(super) fn unlink(pid: Pid, name: u64, len: u64) -> Result<u64, AbiError> {
    let stored = stored_name(pid, name, len)?;
    crate::fs::remove(&stored).map_err(fs_error)?;
    Ok(0)
}
