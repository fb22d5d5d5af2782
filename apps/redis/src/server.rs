//! The server as a pure state machine: connections' input and output buffers, request
//! parsing, command execution and the periodic work. The program's event loop only moves
//! bytes between sockets and these buffers and calls [`Server::tick`]; everything it does
//! with the disk and `fork` goes through a [`Host`].
//!
//! Per connection: bytes received are parsed as they come ([`RequestParser`]), every
//! complete request is run at once (pipelining), and the replies are appended to the
//! output buffer. While a connection's unsent output is [`OUTPUT_SOFT_LIMIT`] or more, its
//! requests wait (and [`Server::wants_input`] says to stop reading it), so a client that
//! pipelines without reading cannot grow the server's memory without bound; one reply may
//! still exceed the limit (a 16 MiB value). A protocol error gets Redis's error reply and
//! closes the connection once the reply is sent, as `QUIT` does; a request over the query
//! limit, or without memory for its arguments, closes it at once.

use crate::commands::{self, ClientInfo, Outcome, ShutdownSave};
use crate::db::Db;
use crate::persist::{self, Host};
use crate::resp::{Reply, RequestParser};
use crate::state::{Config, Now, ServerState};
use alloc::collections::BTreeMap;
use alloc::vec::Vec;

pub use crate::persist::{ChildStatus, ForkFailed, Forked};

/// Unsent output at which a connection's further requests wait (1 MiB).
pub const OUTPUT_SOFT_LIMIT: usize = 1 << 20;

/// The reply to a connection over `maxclients`, before it is closed.
pub const MAX_CLIENTS_REPLY: &[u8] = b"-ERR max number of clients reached\r\n";

/// Keys the periodic work looks at for expiry on each tick.
pub const EXPIRE_SCAN_PER_TICK: usize = 1000;

/// A connection's handle.
pub type ClientId = u64;

/// `maxclients` connections are open already.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooManyClients;

/// One connection.
#[derive(Debug, Default)]
struct Client {
    info: ClientInfo,
    parser: RequestParser,
    /// Bytes received and not yet consumed by the parser.
    input: Vec<u8>,
    /// Replies not yet sent: `output[sent..]`.
    output: Vec<u8>,
    sent: usize,
    /// Close once the output is sent (`QUIT`, a protocol error).
    close_after_reply: bool,
    /// Close now, dropping the output (query limit, no memory).
    close_now: bool,
}

impl Client {
    fn pending(&self) -> usize {
        self.output.len() - self.sent
    }

    fn buffered(&self) -> usize {
        self.input.capacity() + self.output.capacity() + self.parser.held_bytes()
    }
}

/// The server.
#[derive(Debug)]
pub struct Server {
    db: Db,
    state: ServerState,
    clients: BTreeMap<ClientId, Client>,
    next_id: ClientId,
}

impl Server {
    /// A server with an empty keyspace, starting at `now`.
    pub fn new(config: Config, now: Now) -> Server {
        Server {
            db: Db::new(),
            state: ServerState::new(config, now),
            clients: BTreeMap::new(),
            next_id: 1,
        }
    }

    /// The keyspace.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// The keyspace, to fill it (loading at start).
    pub fn db_mut(&mut self) -> &mut Db {
        &mut self.db
    }

    /// The server state.
    pub fn state(&self) -> &ServerState {
        &self.state
    }

    /// The server state, to change it (the program records what it loaded and the heap's
    /// high-water mark).
    pub fn state_mut(&mut self) -> &mut ServerState {
        &mut self.state
    }

    /// Records what was loaded at start.
    pub fn loaded(&mut self, keys: u64, expired: u64) {
        self.state.persistence.keys_loaded = keys;
        self.state.persistence.keys_expired_at_load = expired;
    }

    /// A new connection: its id, or an error when `maxclients` are connected already (the
    /// program then sends [`MAX_CLIENTS_REPLY`] and closes it).
    pub fn connect(&mut self) -> Result<ClientId, TooManyClients> {
        if self.clients.len() >= self.state.config.maxclients {
            self.state.stats.rejected_connections += 1;
            return Err(TooManyClients);
        }
        let id = self.next_id;
        self.next_id += 1;
        self.clients.insert(
            id,
            Client {
                info: ClientInfo { id, name: None },
                ..Client::default()
            },
        );
        self.state.stats.connections_received += 1;
        self.state.connected_clients = self.clients.len();
        Ok(id)
    }

    /// Forgets a connection (closed by either side).
    pub fn disconnect(&mut self, id: ClientId) {
        self.clients.remove(&id);
        self.state.connected_clients = self.clients.len();
    }

    /// The connections' ids.
    pub fn clients(&self) -> impl Iterator<Item = ClientId> + '_ {
        self.clients.keys().copied()
    }

    /// Takes bytes received on connection `id` and runs the complete requests among them
    /// (`data` may be empty: then requests that waited for the output to drain run).
    pub fn receive(&mut self, id: ClientId, data: &[u8], now: Now, host: &mut dyn Host) {
        let Server {
            db, state, clients, ..
        } = self;
        let Some(client) = clients.get_mut(&id) else {
            return;
        };
        if client.close_after_reply || client.close_now {
            return;
        }
        state.stats.net_input_bytes += data.len() as u64;
        if client.input.try_reserve(data.len()).is_err() {
            client.close_now = true;
            return;
        }
        client.input.extend_from_slice(data);
        state.client_max_input = state.client_max_input.max(client.input.len());
        let mut pos = 0;
        while !client.close_after_reply && client.pending() < OUTPUT_SOFT_LIMIT && !state.shutdown {
            let (consumed, step) = client.parser.advance(&client.input[pos..]);
            pos += consumed;
            match step {
                Ok(Some(args)) => run(db, state, client, &args, now, host),
                Ok(None) => break,
                Err(e) => {
                    match e.reply() {
                        Some(text) => {
                            Reply::error_owned(text).encode(&mut client.output);
                            state.stats.error_replies += 1;
                            client.close_after_reply = true;
                        }
                        None => client.close_now = true,
                    }
                    break;
                }
            }
        }
        client.input.drain(..pos);
        if client.input.is_empty() && client.input.capacity() > 64 * 1024 {
            client.input = Vec::new();
        }
        state.client_max_output = state.client_max_output.max(client.pending());
    }

    /// The bytes connection `id` has to send.
    pub fn output(&self, id: ClientId) -> &[u8] {
        self.clients
            .get(&id)
            .map_or(&[][..], |c| &c.output[c.sent..])
    }

    /// Records that `n` bytes of [`Server::output`] were sent.
    pub fn consume_output(&mut self, id: ClientId, n: usize) {
        let Some(c) = self.clients.get_mut(&id) else {
            return;
        };
        let n = n.min(c.pending());
        c.sent += n;
        self.state.stats.net_output_bytes += n as u64;
        if c.sent == c.output.len() {
            c.output.clear();
            c.sent = 0;
            if c.output.capacity() > OUTPUT_SOFT_LIMIT {
                c.output = Vec::new();
            }
        } else if c.sent >= 64 * 1024 && c.sent * 2 >= c.output.len() {
            c.output.drain(..c.sent);
            c.sent = 0;
        }
    }

    /// Whether the program should read more from connection `id`.
    pub fn wants_input(&self, id: ClientId) -> bool {
        self.clients.get(&id).is_some_and(|c| {
            !c.close_after_reply && !c.close_now && c.pending() < OUTPUT_SOFT_LIMIT
        })
    }

    /// Whether connection `id` holds received bytes that may form requests once its output
    /// drains (the program then calls [`Server::receive`] with no data).
    pub fn has_waiting_input(&self, id: ClientId) -> bool {
        self.clients.get(&id).is_some_and(|c| !c.input.is_empty())
    }

    /// Whether the program should close connection `id` now.
    pub fn should_close(&self, id: ClientId) -> bool {
        self.clients
            .get(&id)
            .is_none_or(|c| c.close_now || (c.close_after_reply && c.pending() == 0))
    }

    /// Whether `SHUTDOWN` asked the program to exit.
    pub fn shutdown_requested(&self) -> bool {
        self.state.shutdown
    }

    /// The periodic work, about every 100 ms: reaps the saving child, starts the saves the
    /// save points ask for, deletes some expired keys, samples the statistics.
    pub fn tick(&mut self, now: Now, host: &mut dyn Host) {
        persist::cron(&mut self.db, &mut self.state, host, now);
        self.db
            .purge_expired_step(now.unix_ms, EXPIRE_SCAN_PER_TICK);
        self.state.stats.sample(now.mono_us);
        self.state.client_buffer_bytes = self.clients.values().map(Client::buffered).sum();
        let used = self.state.used_memory(&self.db);
        self.state.peak_memory = self.state.peak_memory.max(used);
    }
}

/// Runs one request of `client` and appends its reply.
fn run(
    db: &mut Db,
    state: &mut ServerState,
    client: &mut Client,
    args: &[Vec<u8>],
    now: Now,
    host: &mut dyn Host,
) {
    let reply = match commands::execute(db, state, &mut client.info, args, now) {
        Outcome::Reply(reply) => reply,
        Outcome::Save => {
            if persist::save(db, state, host, now) {
                Reply::OK
            } else {
                Reply::error("ERR")
            }
        }
        Outcome::BgSave => match persist::start_bgsave(db, state, host, now) {
            Ok(()) => Reply::Status("Background saving started"),
            Err(_) => Reply::error("ERR"),
        },
        Outcome::FlushAll => {
            persist::kill_bgsave(state, host);
            if !state.config.save_points.is_empty() {
                let _ = persist::save(db, state, host, now);
            }
            Reply::OK
        }
        Outcome::Quit => {
            client.close_after_reply = true;
            Reply::OK
        }
        Outcome::Shutdown { save, force } => {
            persist::kill_bgsave(state, host);
            let wants_save = match save {
                ShutdownSave::Save => true,
                ShutdownSave::NoSave => false,
                ShutdownSave::Default => !state.config.save_points.is_empty(),
            };
            if wants_save && !persist::save(db, state, host, now) && !force {
                Reply::error("ERR Errors trying to SHUTDOWN. Check logs.")
            } else {
                state.shutdown = true;
                client.close_now = true;
                return;
            }
        }
    };
    if reply.is_error() {
        state.stats.error_replies += 1;
    }
    reply.encode(&mut client.output);
}

#[cfg(test)]
mod tests;
