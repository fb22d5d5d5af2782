//! Pipes: a bounded byte ring with counts of read ends and write ends, and the table of pipes.
//!
//! Semantics (POSIX, non-blocking view; the kernel blocks the caller on
//! [`PipeError::WouldBlock`] and wakes it when the other side moves):
//!
//! - read from an empty pipe: [`PipeError::WouldBlock`] while a write end is open, end of
//!   file (`Ok(0)`) once none is;
//! - write with no read end open: [`PipeError::BrokenPipe`] (`EPIPE`; there are no signal
//!   handlers, so no `SIGPIPE` is raised);
//! - a write of at most `min(PIPE_BUF, capacity)` bytes is atomic: all of it goes in or, if
//!   it does not fit, [`PipeError::WouldBlock`]; a longer write goes in partly when the pipe
//!   is nearly full and returns how much went in;
//! - bytes come out in the order they went in.
//!
//! The reader and writer counts count open *files* (see [`crate::fd`]), not descriptors:
//! fork and dup add descriptors to the same open file and leave them unchanged.

use crate::process::Pid;
use alloc::vec;
use alloc::vec::Vec;

/// Writes up to this many bytes are atomic (POSIX's minimum `PIPE_BUF`).
pub const PIPE_BUF: usize = 512;

/// The default capacity of a pipe (Linux's 64 KiB).
pub const DEFAULT_CAPACITY: usize = 64 * 1024;

/// Why a pipe operation did not move bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PipeError {
    /// Nothing can move now; try again after the other side acts (`EAGAIN`).
    WouldBlock,
    /// Write with no read end open (`EPIPE`).
    BrokenPipe,
    /// A zero capacity, or an operation on an end that is not open (`EINVAL`).
    InvalidArgument,
    /// The pipe table is full (`ENFILE`).
    TableFull,
}

impl PipeError {
    /// The Linux errno value the system-call layer returns (negated).
    pub const fn errno(self) -> i32 {
        match self {
            PipeError::WouldBlock => 11,
            PipeError::BrokenPipe => 32,
            PipeError::InvalidArgument => 22,
            PipeError::TableFull => 23,
        }
    }
}

/// One end of a pipe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum End {
    /// The read end.
    Read,
    /// The write end.
    Write,
}

/// A bounded pipe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pipe {
    buf: Vec<u8>,
    head: usize,
    len: usize,
    readers: u32,
    writers: u32,
    /// Who parked as a reader (index 0) or a writer (index 1) since the last
    /// [`Pipe::take_waiting`] of that end: a hint that spares looking for waiters when none can
    /// be there, and looking through every μprocess when one can.
    waiting: [Waiters; 2],
}

/// Who parked on one end of a pipe since it was last looked at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Waiters {
    /// Nobody: no μprocess can be waiting on that end.
    #[default]
    None,
    /// Only this μprocess (it may have been woken otherwise since).
    One(Pid),
    /// Several: any μprocess may be waiting on that end.
    Many,
}

impl Pipe {
    /// An empty pipe of `capacity` bytes with one read end and one write end open.
    pub fn new(capacity: usize) -> Result<Pipe, PipeError> {
        if capacity == 0 {
            return Err(PipeError::InvalidArgument);
        }
        Ok(Pipe {
            buf: vec![0; capacity],
            head: 0,
            len: 0,
            readers: 1,
            writers: 1,
            waiting: [Waiters::None; 2],
        })
    }

    /// Notes that `pid`, a caller of `end`, parks until the pipe changes.
    pub fn note_waiting(&mut self, end: End, pid: Pid) {
        let w = &mut self.waiting[end as usize];
        *w = match *w {
            Waiters::None => Waiters::One(pid),
            Waiters::One(p) if p == pid => Waiters::One(pid),
            _ => Waiters::Many,
        };
    }

    /// Who parked on `end` since the last call (clears the note).
    pub fn take_waiting(&mut self, end: End) -> Waiters {
        core::mem::take(&mut self.waiting[end as usize])
    }

    /// The capacity in bytes.
    pub fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// The bytes waiting to be read.
    pub const fn len(&self) -> usize {
        self.len
    }

    /// True when no byte is waiting.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The room left for writers.
    pub fn free(&self) -> usize {
        self.capacity() - self.len
    }

    /// The open read ends.
    pub const fn readers(&self) -> u32 {
        self.readers
    }

    /// The open write ends.
    pub const fn writers(&self) -> u32 {
        self.writers
    }

    /// True when a read would not block (bytes waiting, or end of file).
    pub const fn readable(&self) -> bool {
        self.len > 0 || self.writers == 0
    }

    /// True when a write of `n` bytes would not block (room, or a broken pipe to report).
    pub fn writable(&self, n: usize) -> bool {
        self.readers == 0 || self.free() >= n.min(self.atomic_limit()).max(1)
    }

    fn atomic_limit(&self) -> usize {
        PIPE_BUF.min(self.capacity())
    }

    /// Opens one more end.
    pub fn open_end(&mut self, end: End) {
        match end {
            End::Read => self.readers = self.readers.saturating_add(1),
            End::Write => self.writers = self.writers.saturating_add(1),
        }
    }

    /// Closes one end; refused if no such end is open.
    pub fn close_end(&mut self, end: End) -> Result<(), PipeError> {
        let count = match end {
            End::Read => &mut self.readers,
            End::Write => &mut self.writers,
        };
        *count = count.checked_sub(1).ok_or(PipeError::InvalidArgument)?;
        if self.readers == 0 {
            // Nobody will read what is left.
            self.len = 0;
        }
        Ok(())
    }

    /// True when neither end is open: the pipe can be freed.
    pub const fn is_closed(&self) -> bool {
        self.readers == 0 && self.writers == 0
    }

    /// Reads up to `out.len()` bytes. `Ok(0)` is end of file (or an empty `out`).
    pub fn read(&mut self, out: &mut [u8]) -> Result<usize, PipeError> {
        if out.is_empty() {
            return Ok(0);
        }
        if self.len == 0 {
            return if self.writers == 0 {
                Ok(0)
            } else {
                Err(PipeError::WouldBlock)
            };
        }
        let n = out.len().min(self.len);
        let cap = self.capacity();
        let first = n.min(cap - self.head);
        out[..first].copy_from_slice(&self.buf[self.head..self.head + first]);
        if n > first {
            out[first..n].copy_from_slice(&self.buf[..n - first]);
        }
        self.head = (self.head + n) % cap;
        self.len -= n;
        Ok(n)
    }

    /// The bytes a [`Pipe::read`] of up to `max` bytes would return, as the two parts of the ring
    /// they lie in, without taking them ([`Pipe::consume`] does): for a reader that copies
    /// them straight to their destination. Empty parts are end of file (or `max == 0`).
    pub fn peek(&self, max: usize) -> Result<(&[u8], &[u8]), PipeError> {
        if max == 0 {
            return Ok((&[], &[]));
        }
        if self.len == 0 {
            return if self.writers == 0 {
                Ok((&[], &[]))
            } else {
                Err(PipeError::WouldBlock)
            };
        }
        let n = max.min(self.len);
        let first = n.min(self.capacity() - self.head);
        Ok((
            &self.buf[self.head..self.head + first],
            &self.buf[..n - first],
        ))
    }

    /// Takes the first `n` bytes a [`Pipe::peek`] showed (at most what the pipe holds).
    pub fn consume(&mut self, n: usize) {
        let n = n.min(self.len);
        self.head = (self.head + n) % self.capacity();
        self.len -= n;
    }

    /// Writes `data`, all of it or (beyond `PIPE_BUF`) as much as fits; returns how much.
    pub fn write(&mut self, data: &[u8]) -> Result<usize, PipeError> {
        if self.readers == 0 {
            return Err(PipeError::BrokenPipe);
        }
        if data.is_empty() {
            return Ok(0);
        }
        let free = self.free();
        if free == 0 || (data.len() <= self.atomic_limit() && data.len() > free) {
            return Err(PipeError::WouldBlock);
        }
        let n = data.len().min(free);
        let cap = self.capacity();
        let tail = (self.head + self.len) % cap;
        let first = n.min(cap - tail);
        self.buf[tail..tail + first].copy_from_slice(&data[..first]);
        if n > first {
            // The part that wraps around to the start of the ring.
            self.buf[..n - first].copy_from_slice(&data[first..n]);
        }
        self.len += n;
        Ok(n)
    }
}

/// The identifier of a pipe in a [`PipeTable`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PipeId(u32);

impl PipeId {
    /// The slot number.
    pub const fn raw(self) -> u32 {
        self.0
    }
}

/// Every pipe, by id; a pipe is freed when its last end closes.
#[derive(Clone, Debug, Default)]
pub struct PipeTable {
    slots: Vec<Option<Pipe>>,
    free: Vec<u32>,
    limit: usize,
}

impl PipeTable {
    /// An empty table for at most `limit` pipes.
    pub const fn new(limit: usize) -> PipeTable {
        PipeTable {
            slots: Vec::new(),
            free: Vec::new(),
            limit,
        }
    }

    /// `pipe()`: a new pipe with one read end and one write end open.
    pub fn create(&mut self, capacity: usize) -> Result<PipeId, PipeError> {
        let pipe = Pipe::new(capacity)?;
        if let Some(i) = self.free.pop() {
            self.slots[i as usize] = Some(pipe);
            return Ok(PipeId(i));
        }
        if self.slots.len() >= self.limit || self.slots.len() >= u32::MAX as usize {
            return Err(PipeError::TableFull);
        }
        self.slots.push(Some(pipe));
        Ok(PipeId(self.slots.len() as u32 - 1))
    }

    /// The pipe `id`.
    pub fn get(&self, id: PipeId) -> Option<&Pipe> {
        self.slots.get(id.0 as usize)?.as_ref()
    }

    /// The pipe `id`, mutably.
    pub fn get_mut(&mut self, id: PipeId) -> Option<&mut Pipe> {
        self.slots.get_mut(id.0 as usize)?.as_mut()
    }

    /// Closes one end of `id` (its open file went away); frees the pipe when no end is left.
    /// Returns true when the pipe was freed.
    pub fn close_end(&mut self, id: PipeId, end: End) -> Result<bool, PipeError> {
        let slot = self
            .slots
            .get_mut(id.0 as usize)
            .ok_or(PipeError::InvalidArgument)?;
        let pipe = slot.as_mut().ok_or(PipeError::InvalidArgument)?;
        pipe.close_end(end)?;
        if pipe.is_closed() {
            *slot = None;
            self.free.push(id.0);
            return Ok(true);
        }
        Ok(false)
    }

    /// The number of pipes.
    pub fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// True when there is no pipe.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiting_notes_are_per_end_and_cleared_when_taken() {
        let mut p = Pipe::new(4).unwrap();
        let (a, b) = (Pid::from_raw(3), Pid::from_raw(4));
        assert_eq!(p.take_waiting(End::Read), Waiters::None);
        assert_eq!(p.take_waiting(End::Write), Waiters::None);
        p.note_waiting(End::Read, a);
        p.note_waiting(End::Read, a);
        assert_eq!(p.take_waiting(End::Write), Waiters::None);
        assert_eq!(p.take_waiting(End::Read), Waiters::One(a));
        assert_eq!(p.take_waiting(End::Read), Waiters::None, "taken once");
        p.note_waiting(End::Write, a);
        p.note_waiting(End::Write, b);
        assert_eq!(p.take_waiting(End::Write), Waiters::Many);
    }

    #[test]
    fn peek_and_consume_read_what_read_would_across_the_wrap() {
        let mut a = Pipe::new(8).unwrap();
        let mut b = Pipe::new(8).unwrap();
        for p in [&mut a, &mut b] {
            assert_eq!(p.peek(4), Err(PipeError::WouldBlock));
            p.write(b"abcdef").unwrap();
            let mut out = [0u8; 5];
            p.read(&mut out).unwrap();
            p.write(b"ghijk").unwrap();
        }
        let (x, y) = a.peek(5).unwrap();
        assert_eq!((x, y), (&b"fgh"[..], &b"ij"[..]));
        a.consume(5);
        let mut out = [0u8; 5];
        assert_eq!(b.read(&mut out), Ok(5));
        assert_eq!(&out, b"fghij");
        assert_eq!(
            a.peek(8).map(|(x, y)| (x.to_vec(), y.to_vec())),
            Ok((b"k".to_vec(), alloc::vec::Vec::new()))
        );
        a.consume(1);
        a.close_end(End::Write).unwrap();
        assert_eq!(a.peek(8), Ok((&[][..], &[][..])));
    }
    use crate::fd::{FdError, FdTable, OpenFiles};

    #[test]
    fn empty_pipe_blocks_then_reports_eof() {
        let mut p = Pipe::new(8).unwrap();
        let mut out = [0u8; 4];
        assert_eq!(p.read(&mut out), Err(PipeError::WouldBlock));
        assert!(!p.readable());
        assert_eq!(p.read(&mut []), Ok(0));
        p.close_end(End::Write).unwrap();
        assert!(p.readable());
        assert_eq!(p.read(&mut out), Ok(0));
        assert_eq!(p.close_end(End::Write), Err(PipeError::InvalidArgument));
    }

    #[test]
    fn write_without_readers_is_a_broken_pipe() {
        let mut p = Pipe::new(8).unwrap();
        p.write(b"abc").unwrap();
        p.close_end(End::Read).unwrap();
        assert_eq!(p.len(), 0);
        assert_eq!(p.write(b"x"), Err(PipeError::BrokenPipe));
        assert_eq!(p.write(b""), Err(PipeError::BrokenPipe));
        assert!(p.writable(1));
        p.close_end(End::Write).unwrap();
        assert!(p.is_closed());
        assert_eq!(PipeError::BrokenPipe.errno(), 32);
    }

    #[test]
    fn ring_wraps_and_keeps_order() {
        let mut p = Pipe::new(8).unwrap();
        let mut out = [0u8; 8];
        assert_eq!(p.write(b"abcdef"), Ok(6));
        assert_eq!(p.read(&mut out[..4]), Ok(4));
        assert_eq!(&out[..4], b"abcd");
        assert_eq!(p.write(b"ghijkl"), Ok(6));
        assert!(!p.writable(1));
        assert_eq!(p.write(b"m"), Err(PipeError::WouldBlock));
        assert_eq!(p.read(&mut out), Ok(8));
        assert_eq!(&out, b"efghijkl");
        assert_eq!(p.read(&mut out), Err(PipeError::WouldBlock));
    }

    #[test]
    fn small_writes_are_atomic_large_ones_partial() {
        let mut p = Pipe::new(1024).unwrap();
        assert_eq!(p.write(&[1; 1020]), Ok(1020));
        // 8 bytes do not fit in 4: an atomic write waits rather than splitting.
        assert!(!p.writable(8));
        assert_eq!(p.write(&[2; 8]), Err(PipeError::WouldBlock));
        assert!(p.writable(4));
        let mut out = [0u8; 1020];
        assert_eq!(p.read(&mut out), Ok(1020));
        assert_eq!(p.write(&[3; 600]), Ok(600));
        // A write longer than PIPE_BUF goes in partly.
        assert_eq!(p.write(&[4; 600]), Ok(424));
        assert_eq!(p.free(), 0);
        // With a capacity under PIPE_BUF, a write of the whole capacity is still possible.
        let mut small = Pipe::new(4).unwrap();
        assert_eq!(small.write(b"abcd"), Ok(4));
        assert_eq!(small.read(&mut out[..2]), Ok(2));
        assert_eq!(small.write(b"xyz"), Err(PipeError::WouldBlock));
        assert_eq!(small.write(b"xy"), Ok(2));
        assert_eq!(Pipe::new(0), Err(PipeError::InvalidArgument));
    }

    #[test]
    fn table_frees_a_pipe_when_its_last_end_closes() {
        let mut t = PipeTable::new(2);
        let a = t.create(16).unwrap();
        let b = t.create(16).unwrap();
        assert_eq!(t.create(16), Err(PipeError::TableFull));
        assert_eq!(t.close_end(a, End::Read), Ok(false));
        assert_eq!(t.close_end(a, End::Write), Ok(true));
        assert!(t.get(a).is_none());
        assert_eq!(t.close_end(a, End::Write), Err(PipeError::InvalidArgument));
        assert_eq!(t.create(16), Ok(a));
        assert_eq!(t.len(), 2);
        t.get_mut(b).unwrap().write(b"hi").unwrap();
        assert_eq!(t.get(b).unwrap().len(), 2);
        assert_eq!(
            t.close_end(PipeId(9), End::Read),
            Err(PipeError::InvalidArgument)
        );
    }

    /// The open-file object a kernel would keep for a pipe end.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    struct PipeEnd(PipeId, End);

    fn close(
        t: &mut FdTable,
        files: &mut OpenFiles<PipeEnd>,
        pipes: &mut PipeTable,
        fd: u32,
    ) -> Result<(), FdError> {
        if let Some(PipeEnd(id, end)) = t.close(files, fd)? {
            pipes.close_end(id, end).unwrap();
        }
        Ok(())
    }

    #[test]
    fn pipe_across_fork_with_descriptors() {
        let mut files = OpenFiles::new(16);
        let mut pipes = PipeTable::new(4);
        let mut parent = FdTable::new(16);
        let id = pipes.create(64).unwrap();
        let r = parent.open(&mut files, PipeEnd(id, End::Read)).unwrap();
        let w = parent.open(&mut files, PipeEnd(id, End::Write)).unwrap();
        let mut child = parent.fork(&mut files).unwrap();
        // The child writes and closes its read end; the parent closes its write end.
        close(&mut child, &mut files, &mut pipes, r).unwrap();
        close(&mut parent, &mut files, &mut pipes, w).unwrap();
        assert_eq!(pipes.get(id).unwrap().writers(), 1);
        assert_eq!(pipes.get(id).unwrap().readers(), 1);
        let PipeEnd(cid, _) = *files.get(child.get(w).unwrap()).unwrap();
        pipes.get_mut(cid).unwrap().write(b"ping").unwrap();
        // The child exits: its write end goes, the parent drains then sees end of file.
        for PipeEnd(id, end) in child.close_all(&mut files) {
            pipes.close_end(id, end).unwrap();
        }
        let PipeEnd(pid, _) = *files.get(parent.get(r).unwrap()).unwrap();
        let mut out = [0u8; 8];
        assert_eq!(pipes.get_mut(pid).unwrap().read(&mut out), Ok(4));
        assert_eq!(&out[..4], b"ping");
        assert_eq!(pipes.get_mut(pid).unwrap().read(&mut out), Ok(0));
        close(&mut parent, &mut files, &mut pipes, r).unwrap();
        assert!(pipes.is_empty() && files.is_empty());
    }

    mod props {
        use super::super::*;
        use alloc::collections::VecDeque;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn preserves_byte_order(cap in 1usize..2000,
                                    ops in proptest::collection::vec((any::<bool>(), 0usize..1500), 0..100)) {
                let mut p = Pipe::new(cap).unwrap();
                let mut model: VecDeque<u8> = VecDeque::new();
                let mut next = 0u8;
                for (is_write, n) in ops {
                    if is_write {
                        let data: Vec<u8> = (0..n).map(|i| next.wrapping_add(i as u8)).collect();
                        match p.write(&data) {
                            Ok(k) => {
                                prop_assert!(k == n || (n > PIPE_BUF.min(cap) && k < n));
                                prop_assert!(k > 0 || n == 0);
                                model.extend(&data[..k]);
                                next = next.wrapping_add(k as u8);
                            }
                            Err(e) => {
                                prop_assert_eq!(e, PipeError::WouldBlock);
                                prop_assert!(p.free() < n.min(PIPE_BUF.min(cap)).max(1));
                            }
                        }
                    } else {
                        let mut out = alloc::vec![0u8; n];
                        match p.read(&mut out) {
                            Ok(k) => {
                                prop_assert_eq!(k, n.min(model.len()));
                                for &b in &out[..k] {
                                    prop_assert_eq!(Some(b), model.pop_front());
                                }
                            }
                            Err(e) => {
                                prop_assert_eq!(e, PipeError::WouldBlock);
                                prop_assert!(model.is_empty());
                            }
                        }
                    }
                    prop_assert_eq!(p.len(), model.len());
                    prop_assert!(p.len() <= cap);
                }
            }
        }
    }
}
