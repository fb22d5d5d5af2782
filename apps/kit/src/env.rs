//! The [`Env`] seam between a function's logic and the system: nested calls and the
//! key-value store.

use core::fmt;
use fjord_libos::call::{self, ArgBuf, Pending, Reply};
use fjord_libos::function::FnError;
use fjord_libos::kv;
use fjord_libos::text::Writer;

/// The response bytes of a finished nested call.
pub trait Bytes {
    /// The callee's response.
    fn bytes(&self) -> &[u8];
}

impl Bytes for Reply {
    fn bytes(&self) -> &[u8] {
        Reply::bytes(self)
    }
}

impl Bytes for [u8] {
    fn bytes(&self) -> &[u8] {
        self
    }
}

#[cfg(any(test, feature = "test-env"))]
impl Bytes for std::vec::Vec<u8> {
    fn bytes(&self) -> &[u8] {
        self
    }
}

/// A workload function's handler run with the env `E`: request in, response room out, the
/// response's length back. Each workload crate lists its functions by name as `routes::<E>()`,
/// for every system that runs them in one process per env (host tests, the Linux baseline).
pub type Route<E> = fn(&mut E, &[u8], &mut [u8]) -> Result<usize, FnError>;

/// What a workload function may do besides computing: call other functions and use the
/// key-value store. Errors are already the caller's [`FnError`]s (a callee's error is passed
/// on, see [`call::CallError::to_fn_error`]).
pub trait Env {
    /// An outstanding nested call.
    type Pending;
    /// A finished nested call's response.
    type Reply: Bytes;

    /// Starts `name` on a request that `build` writes in place into a new ArgBuf of
    /// `capacity` bytes; the rest of the ArgBuf is the response room.
    fn start<F>(&mut self, name: &str, capacity: usize, build: F) -> Result<Self::Pending, FnError>
    where
        F: FnOnce(&mut Writer<'_>) -> fmt::Result;

    /// Waits for a call started with [`Env::start`].
    fn wait(&mut self, pending: Self::Pending) -> Result<Self::Reply, FnError>;

    /// Calls `name` and waits for its response.
    fn call<F>(&mut self, name: &str, capacity: usize, build: F) -> Result<Self::Reply, FnError>
    where
        F: FnOnce(&mut Writer<'_>) -> fmt::Result,
    {
        let pending = self.start(name, capacity, build)?;
        self.wait(pending)
    }

    /// Copies the value under `key` into `out` (as much as fits); its full length, or `None`.
    fn kv_get(&mut self, key: &[u8], out: &mut [u8]) -> Result<Option<usize>, FnError>;

    /// Stores `value` under `key`.
    fn kv_put(&mut self, key: &[u8], value: &[u8]) -> Result<(), FnError>;
}

/// The env of a function running on Fjord: ArgBuf calls and the kernel's store.
#[derive(Clone, Copy, Debug, Default)]
pub struct Fjord;

impl Env for Fjord {
    type Pending = Pending;
    type Reply = Reply;

    fn start<F>(&mut self, name: &str, capacity: usize, build: F) -> Result<Pending, FnError>
    where
        F: FnOnce(&mut Writer<'_>) -> fmt::Result,
    {
        let (buf, len) = new_request(capacity, build)?;
        Ok(call::async_call(name, buf, len)?)
    }

    fn wait(&mut self, pending: Pending) -> Result<Reply, FnError> {
        Ok(call::wait(pending)?)
    }

    /// One system call that starts the callee and suspends until it finished.
    fn call<F>(&mut self, name: &str, capacity: usize, build: F) -> Result<Reply, FnError>
    where
        F: FnOnce(&mut Writer<'_>) -> fmt::Result,
    {
        let (buf, len) = new_request(capacity, build)?;
        Ok(call::call(name, buf, len)?)
    }

    fn kv_get(&mut self, key: &[u8], out: &mut [u8]) -> Result<Option<usize>, FnError> {
        Ok(kv::get(key, out)?)
    }

    fn kv_put(&mut self, key: &[u8], value: &[u8]) -> Result<(), FnError> {
        Ok(kv::put(key, value)?)
    }
}

/// A new ArgBuf of `capacity` bytes with the request `build` writes at its start, and the
/// request's length.
fn new_request<F>(capacity: usize, build: F) -> Result<(ArgBuf, usize), FnError>
where
    F: FnOnce(&mut Writer<'_>) -> fmt::Result,
{
    let mut buf = ArgBuf::new(capacity)?;
    let len = write_request(buf.bytes_mut(), build)?;
    Ok((buf, len))
}

/// Writes a request with `build` at the start of `buf`; its length. A request that does not
/// fit is a limit of the caller's own logic, reported as [`FnError::Failed`].
pub fn write_request<F>(buf: &mut [u8], build: F) -> Result<usize, FnError>
where
    F: FnOnce(&mut Writer<'_>) -> fmt::Result,
{
    let mut w = Writer::new(buf);
    build(&mut w).map_err(|_| FnError::Failed)?;
    w.finish().map_err(|_| FnError::Failed)
}
