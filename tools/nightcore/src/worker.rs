//! A worker process: runs one function, one invocation at a time, and is its [`Env`].
//!
//! A worker reads an invoke from its pipe, lays the request out as Fjord's ArgBuf (the request
//! at the start, the response room after [`response_offset`], the capacity in whole pages) and
//! runs the function's handler. A nested call writes an invoke for the engine into the
//! worker's outgoing pipe ([`Env::start`]); [`Env::wait`] reads the worker's incoming pipe
//! until that call's reply has arrived, keeping replies to its other outstanding calls. The
//! key-value store is the shared [`Store`].
//!
//! Under [`Isolation::Fork`] the worker process is a warmed parent that never runs the handler
//! itself: per invoke it forks a child, which runs the handler (its nested calls go through the
//! inherited pipes), writes the reply and exits; the parent reaps the child before it reads the
//! next invoke, so no invocation sees what an earlier one left in the process (Groundhog's
//! FORK baseline). The engine sends a worker nothing between an invoke and its reply but the
//! replies to the child's own calls, so parent and child never read the pipe at the same time.

use core::fmt;
use std::os::fd::RawFd;

use fjord_app_kit::{Bytes, Env};
use fjord_libos::function::{FnError, argbuf_size, response_offset};
use fjord_libos::text::Writer;

use crate::apps::{self, Route};
use crate::proto::{Framer, HEADER, Header, Kind, MAX_CAPACITY};
use crate::store::Store;
use crate::sys::{self, Exit};

/// A finished nested call's response.
#[derive(Debug)]
pub struct Reply(Vec<u8>);

impl Bytes for Reply {
    fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// An outstanding nested call: the worker's id for it.
#[derive(Debug)]
pub struct Pending(u64);

/// Where a worker runs each invocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isolation {
    /// In the worker process itself, which keeps whatever earlier invocations left.
    Warm,
    /// In a child process forked from the worker per invocation.
    Fork,
}

impl Isolation {
    /// `warm` or `fork`, as `--isolation` takes it and metric names end.
    pub fn name(self) -> &'static str {
        match self {
            Isolation::Warm => "warm",
            Isolation::Fork => "fork",
        }
    }
}

/// One worker process's state and its env.
pub struct Worker {
    table: &'static [(&'static str, Route)],
    input: RawFd,
    output: RawFd,
    framer: Framer,
    /// Outgoing message: header room, then the request a call builds.
    out: Vec<u8>,
    next_id: u64,
    /// Replies that arrived while waiting for another call.
    early: Vec<(u64, Result<Vec<u8>, FnError>)>,
    store: Store,
}

/// The exit status of a forked child whose reply could not be written.
const CHILD_BROKEN: i32 = 3;

/// The process cannot go on (a pipe broke or carried garbage).
#[derive(Debug)]
pub struct Broken(pub String);

impl Worker {
    /// A worker serving functions of `table`, reading invokes and replies from `input` and
    /// writing invokes and replies to `output`.
    pub fn new(
        table: &'static [(&'static str, Route)],
        input: RawFd,
        output: RawFd,
        store: Store,
    ) -> Worker {
        Worker {
            table,
            input,
            output,
            framer: Framer::new(),
            out: vec![0; HEADER + MAX_CAPACITY],
            next_id: 0,
            early: Vec::new(),
            store,
        }
    }

    /// Serves invokes of function `func` until the engine closes the pipe, each as `isolation`
    /// says.
    pub fn serve(mut self, func: u16, isolation: Isolation) -> Result<(), Broken> {
        let route = self.table[usize::from(func)].1;
        let mut request = vec![0u8; MAX_CAPACITY];
        // The response room, reused: allocated (and zeroed) once, like an ArgBuf's pages.
        let mut room = vec![0u8; MAX_CAPACITY];
        loop {
            let Some((h, range)) = self.receive()? else {
                return Ok(());
            };
            if h.kind != Kind::Invoke || h.func != func {
                return Err(Broken(format!("unexpected message {h:?}")));
            }
            let len = range.len();
            request[..len].copy_from_slice(&self.framer.bytes()[range]);
            match isolation {
                Isolation::Warm => self.invoke(route, h, &request[..len], &mut room)?,
                Isolation::Fork => self.invoke_in_child(route, h, &request[..len], &mut room)?,
            }
        }
    }

    /// Runs one invocation and writes its reply.
    fn invoke(
        &mut self,
        route: Route,
        h: Header,
        request: &[u8],
        room: &mut [u8],
    ) -> Result<(), Broken> {
        let capacity = argbuf_size(h.capacity as usize);
        let result = match capacity.checked_sub(response_offset(request.len())) {
            Some(n) if n <= room.len() => route(self, request, &mut room[..n]),
            _ => Err(FnError::BadArgBuf),
        };
        let result = result.and_then(|n| {
            if n <= room.len() {
                Ok(n)
            } else {
                Err(FnError::ResponseTooLarge)
            }
        });
        let body = match result {
            Ok(n) => &room[..n],
            Err(_) => &[][..],
        };
        let header = Header::reply(h.id, result).encode();
        sys::write_all(self.output, &[&header, body]).map_err(|e| Broken(format!("write: {e}")))
    }

    /// Runs one invocation in a child forked for it and reaps the child. A child that ended
    /// without replying (killed by a signal, or a panic's abort) gets an error reply from here.
    fn invoke_in_child(
        &mut self,
        route: Route,
        h: Header,
        request: &[u8],
        room: &mut [u8],
    ) -> Result<(), Broken> {
        let pid = sys::fork().map_err(|e| Broken(format!("fork: {e}")))?;
        if pid == 0 {
            let status = match self.invoke(route, h, request, room) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("LERROR worker child: {}", e.0);
                    CHILD_BROKEN
                }
            };
            sys::exit_child(status);
        }
        match sys::wait(pid).map_err(|e| Broken(format!("waitpid: {e}")))? {
            Exit::Code(0) => Ok(()),
            Exit::Code(CHILD_BROKEN) => Err(Broken("the child could not reply".into())),
            how => {
                let name = self.table[usize::from(h.func)].0;
                eprintln!(
                    "LERROR worker {name}: the child serving call {} ended: {how:?}",
                    h.id
                );
                let header = Header::reply(h.id, Err(FnError::Failed)).encode();
                sys::write_all(self.output, &[&header]).map_err(|e| Broken(format!("write: {e}")))
            }
        }
    }

    /// The next whole message from the engine; `None` at end of file.
    fn receive(&mut self) -> Result<Option<(Header, core::ops::Range<usize>)>, Broken> {
        loop {
            if let Some(m) = self
                .framer
                .next_message()
                .map_err(|_| Broken("bad message".into()))?
            {
                return Ok(Some(m));
            }
            let n = sys::read(self.input, self.framer.room())
                .map_err(|e| Broken(format!("read: {e}")))?;
            if n == 0 {
                return Ok(None);
            }
            self.framer.filled(n);
        }
    }
}

impl Env for Worker {
    type Pending = Pending;
    type Reply = Reply;

    fn start<F>(&mut self, name: &str, capacity: usize, build: F) -> Result<Pending, FnError>
    where
        F: FnOnce(&mut Writer<'_>) -> fmt::Result,
    {
        let func = apps::index(self.table, name).ok_or(FnError::Failed)?;
        if capacity > MAX_CAPACITY {
            return Err(FnError::OutOfMemory);
        }
        let room = argbuf_size(capacity).min(MAX_CAPACITY);
        let len = fjord_app_kit::env::write_request(&mut self.out[HEADER..HEADER + room], build)?;
        self.next_id += 1;
        let id = self.next_id;
        let header = Header::invoke(id, func, capacity as u32, len).encode();
        self.out[..HEADER].copy_from_slice(&header);
        sys::write_all(self.output, &[&self.out[..HEADER + len]]).map_err(|_| FnError::Failed)?;
        Ok(Pending(id))
    }

    fn wait(&mut self, pending: Pending) -> Result<Reply, FnError> {
        if let Some(at) = self.early.iter().position(|(id, _)| *id == pending.0) {
            return self.early.swap_remove(at).1.map(Reply);
        }
        loop {
            let Ok(Some((h, range))) = self.receive() else {
                return Err(FnError::Failed);
            };
            if h.kind != Kind::Reply {
                return Err(FnError::Failed);
            }
            let result = h.result().map(|()| self.framer.bytes()[range].to_vec());
            if h.id == pending.0 {
                return result.map(Reply);
            }
            self.early.push((h.id, result));
        }
    }

    fn kv_get(&mut self, key: &[u8], out: &mut [u8]) -> Result<Option<usize>, FnError> {
        self.store.get(key, out).map_err(|_| FnError::Failed)
    }

    fn kv_put(&mut self, key: &[u8], value: &[u8]) -> Result<(), FnError> {
        self.store.put(key, value).map_err(|_| FnError::Failed)
    }
}
