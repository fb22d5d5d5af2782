//! The engine process: NightCore's engine, which receives external requests and routes every
//! internal call between the worker processes.
//!
//! Each function of the workload has a pool of worker processes (forked here), each with one
//! pipe from the engine and one to it. The engine dispatches an invoke to an idle worker of
//! the callee, or queues it until one becomes idle (a worker runs one invocation at a time and
//! stays busy while it waits for its own nested calls; the call graphs are DAGs by function
//! name, so a queued call always gets a worker eventually). A nested call is therefore caller
//! → engine → callee and its reply callee → engine → caller: four `read`/`write` copies of the
//! payload through the kernel per hop. The engine waits in `epoll_pwait2` on every worker's
//! pipe.

use std::collections::{HashMap, VecDeque};
use std::os::fd::RawFd;

use fjord_libos::function::{FnError, external_capacity};

use crate::apps::Route;
use crate::proto::{Framer, Header, Kind};
use crate::store::Store;
use crate::sys;
use crate::worker::{Isolation, Worker};

/// Who waits for a call's reply.
#[derive(Clone, Copy, Debug)]
enum Caller {
    /// An external request with this tag.
    External(u64),
    /// A worker, which knows the call by its own id.
    Worker { worker: usize, id: u64 },
}

/// A call waiting for an idle worker of its function.
struct Queued {
    id: u64,
    capacity: u32,
    payload: Vec<u8>,
}

/// A function's workers.
#[derive(Default)]
struct Func {
    idle: Vec<usize>,
    queue: VecDeque<Queued>,
}

/// The engine's side of one worker process.
struct Handle {
    func: u16,
    pid: libc::pid_t,
    /// Invokes and replies to the worker.
    to: RawFd,
    /// Invokes and replies from the worker.
    from: RawFd,
    framer: Framer,
}

/// A finished external request.
#[derive(Debug)]
pub struct Done {
    /// The tag given to [`Engine::submit`].
    pub tag: u64,
    /// The response, or the entry function's error.
    pub result: Result<Vec<u8>, FnError>,
    /// TSC when the engine read the reply.
    pub finished: u64,
}

/// The engine and its workers.
pub struct Engine {
    table: &'static [(&'static str, Route)],
    funcs: Vec<Func>,
    workers: Vec<Handle>,
    epoll: sys::Epoll,
    /// Workers whose pipe the last wait found readable.
    ready: Vec<usize>,
    calls: HashMap<u64, Caller>,
    next_id: u64,
    done: Vec<Done>,
}

/// The engine cannot go on: a system call failed, a worker died or broke the protocol.
#[derive(Debug)]
pub struct EngineError(pub String);

impl From<std::io::Error> for EngineError {
    fn from(e: std::io::Error) -> Self {
        EngineError(e.to_string())
    }
}

impl Engine {
    /// Forks `per_func` workers for every function of `table`, sharing `store`, each running
    /// its invocations as `isolation` says.
    pub fn spawn(
        table: &'static [(&'static str, Route)],
        per_func: usize,
        isolation: Isolation,
        store: Store,
    ) -> Result<Engine, EngineError> {
        let mut engine = Engine {
            table,
            funcs: table.iter().map(|_| Func::default()).collect(),
            workers: Vec::new(),
            epoll: sys::Epoll::new()?,
            ready: Vec::new(),
            calls: HashMap::new(),
            next_id: 0,
            done: Vec::new(),
        };
        for func in 0..table.len() {
            for _ in 0..per_func {
                let (to_r, to_w) = sys::pipe()?;
                let (from_r, from_w) = sys::pipe()?;
                let pid = sys::fork()?;
                if pid == 0 {
                    // The worker keeps only its own two pipe ends.
                    for h in &engine.workers {
                        sys::close(h.to);
                        sys::close(h.from);
                    }
                    sys::close(to_w);
                    sys::close(from_r);
                    let worker = Worker::new(table, to_r, from_w, store);
                    let status = match worker.serve(func as u16, isolation) {
                        Ok(()) => 0,
                        Err(e) => {
                            eprintln!("LERROR worker {}: {}", table[func].0, e.0);
                            1
                        }
                    };
                    sys::exit_child(status);
                }
                sys::close(to_r);
                sys::close(from_w);
                engine.funcs[func].idle.push(engine.workers.len());
                engine.epoll.add(from_r, engine.workers.len() as u64)?;
                engine.workers.push(Handle {
                    func: func as u16,
                    pid,
                    to: to_w,
                    from: from_r,
                    framer: Framer::new(),
                });
            }
        }
        Ok(engine)
    }

    /// The index of function `name`.
    pub fn function(&self, name: &str) -> Option<u16> {
        crate::apps::index(self.table, name)
    }

    /// Starts an external request for `func`, in an ArgBuf sized as Fjord's gateway sizes it.
    pub fn submit(&mut self, tag: u64, func: u16, request: &[u8]) -> Result<(), EngineError> {
        let id = self.new_call(Caller::External(tag));
        let capacity = external_capacity(request.len()) as u32;
        self.dispatch(func, id, capacity, request)
    }

    /// Takes the external requests finished so far.
    pub fn take_done(&mut self) -> impl Iterator<Item = Done> + '_ {
        self.done.drain(..)
    }

    /// Whether finished requests are waiting to be taken.
    pub fn has_done(&self) -> bool {
        !self.done.is_empty()
    }

    /// Waits until a worker wrote something or `timeout_ns` passed (`None`: no limit), then
    /// handles every message that arrived.
    pub fn pump(&mut self, timeout_ns: Option<u64>) -> Result<(), EngineError> {
        let mut ready = std::mem::take(&mut self.ready);
        ready.clear();
        ready.extend(self.epoll.wait(timeout_ns)?.map(|t| t as usize));
        for &w in &ready {
            self.drain(w)?;
        }
        self.ready = ready;
        Ok(())
    }

    /// Reads what worker `w` wrote and handles its whole messages.
    fn drain(&mut self, w: usize) -> Result<(), EngineError> {
        let mut framer = std::mem::take(&mut self.workers[w].framer);
        let result = (|| {
            let n = sys::read(self.workers[w].from, framer.room())?;
            if n == 0 {
                return Err(EngineError(format!(
                    "a worker of {} exited",
                    self.table[usize::from(self.workers[w].func)].0
                )));
            }
            framer.filled(n);
            while let Some((h, range)) = framer
                .next_message()
                .map_err(|_| EngineError("bad message from a worker".into()))?
            {
                self.handle(w, h, &framer.bytes()[range])?;
            }
            Ok(())
        })();
        self.workers[w].framer = framer;
        result
    }

    fn new_call(&mut self, caller: Caller) -> u64 {
        self.next_id += 1;
        self.calls.insert(self.next_id, caller);
        self.next_id
    }

    /// One message from worker `w`.
    fn handle(&mut self, w: usize, h: Header, payload: &[u8]) -> Result<(), EngineError> {
        match h.kind {
            Kind::Invoke => {
                if usize::from(h.func) >= self.table.len() {
                    return Err(EngineError(format!(
                        "invoke of unknown function {}",
                        h.func
                    )));
                }
                let id = self.new_call(Caller::Worker {
                    worker: w,
                    id: h.id,
                });
                self.dispatch(h.func, id, h.capacity, payload)
            }
            Kind::Reply => {
                let finished = sys::rdtsc();
                let caller = self
                    .calls
                    .remove(&h.id)
                    .ok_or_else(|| EngineError(format!("reply to unknown call {}", h.id)))?;
                let result = h.result();
                match caller {
                    Caller::External(tag) => self.done.push(Done {
                        tag,
                        result: result.map(|()| payload.to_vec()),
                        finished,
                    }),
                    Caller::Worker { worker, id } => {
                        let header = Header::reply(id, result.map(|()| payload.len())).encode();
                        sys::write_all(self.workers[worker].to, &[&header, payload])?;
                    }
                }
                // The worker is free: give it the oldest queued call of its function.
                let func = self.workers[w].func;
                match self.funcs[usize::from(func)].queue.pop_front() {
                    Some(q) => self.send_invoke(w, func, q.id, q.capacity, &q.payload),
                    None => {
                        self.funcs[usize::from(func)].idle.push(w);
                        Ok(())
                    }
                }
            }
        }
    }

    /// Sends call `id` of `func` to an idle worker, or queues it.
    fn dispatch(
        &mut self,
        func: u16,
        id: u64,
        capacity: u32,
        payload: &[u8],
    ) -> Result<(), EngineError> {
        match self.funcs[usize::from(func)].idle.pop() {
            Some(w) => self.send_invoke(w, func, id, capacity, payload),
            None => {
                self.funcs[usize::from(func)].queue.push_back(Queued {
                    id,
                    capacity,
                    payload: payload.to_vec(),
                });
                Ok(())
            }
        }
    }

    fn send_invoke(
        &mut self,
        w: usize,
        func: u16,
        id: u64,
        capacity: u32,
        payload: &[u8],
    ) -> Result<(), EngineError> {
        let header = Header::invoke(id, func, capacity, payload.len()).encode();
        sys::write_all(self.workers[w].to, &[&header, payload])?;
        Ok(())
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        for h in &self.workers {
            sys::close(h.to);
            sys::close(h.from);
            sys::kill_and_reap(h.pid);
        }
    }
}
