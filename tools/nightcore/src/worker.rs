//! A worker process: runs one function, one invocation at a time, and is its [`Env`].
//!
//! A worker reads an invoke from its pipe, lays the request out as Fjord's ArgBuf (the request
//! at the start, the response room after [`response_offset`], the capacity in whole pages) and
//! runs the function's handler. A nested call writes an invoke for the engine into the
//! worker's outgoing pipe ([`Env::start`]); [`Env::wait`] reads the worker's incoming pipe
//! until that call's reply has arrived, keeping replies to its other outstanding calls. The
//! key-value store is the shared [`Store`].

use core::fmt;
use std::os::fd::RawFd;

use fjord_app_kit::{Bytes, Env};
use fjord_libos::function::{FnError, argbuf_size, response_offset};
use fjord_libos::text::Writer;

use crate::apps::{self, Route};
use crate::proto::{Framer, HEADER, Header, Kind, MAX_CAPACITY};
use crate::store::Store;
use crate::sys;

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

    /// Serves invokes of function `func` until the engine closes the pipe.
    pub fn serve(mut self, func: u16) -> Result<(), Broken> {
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
            let capacity = argbuf_size(h.capacity as usize);
            let result = match capacity.checked_sub(response_offset(len)) {
                Some(n) if n <= room.len() => route(&mut self, &request[..len], &mut room[..n]),
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
            sys::write_all(self.output, &[&header, body])
                .map_err(|e| Broken(format!("write: {e}")))?;
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
