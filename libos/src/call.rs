//! Calling other functions: ArgBufs, synchronous [`call`], and [`async_call`] / [`wait`].
//!
//! A nested call passes an [`ArgBuf`], a VMA of the caller's, to the callee by moving the
//! caller's permission on it (`pmove`): the request is written in place, the callee reads it and
//! writes its response after it, and the permission comes back when the callee returns. Nothing
//! is copied between caller and callee. While a call is outstanding the caller cannot touch the
//! buffer: [`async_call`] takes the [`ArgBuf`] by value and [`wait`] gives it back inside the
//! [`Reply`].
//!
//! ```ignore
//! let mut buf = ArgBuf::new(4096)?;
//! let n = write_request(buf.bytes_mut());
//! let reply = call("hotel-geo", buf, n)?;      // suspends this function until geo returns
//! parse(reply.bytes());
//! ```
//!
//! The request sits at `ArgBuf[0 .. request_len]`; the callee's response at
//! `ArgBuf[response_offset(request_len) ..]` (see [`crate::function`]). Outside Fjord (the host
//! build of a function) no other function is reachable and every call fails with
//! [`CallError::Unsupported`].

use crate::abi::{CALLEE_ERROR_BASE, Error};
use crate::function::{FnError, response_offset};

/// Why a nested call failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallError {
    /// No function of that name is deployed.
    NoSuchFunction,
    /// The callee returned this function error.
    Callee(FnError),
    /// The callee faulted, ran past its time limit or returned a malformed value.
    CalleeFailed,
    /// No memory for the ArgBuf or the callee's protection domain.
    NoMemory,
    /// The request does not fit in the ArgBuf, or the name is malformed.
    InvalidArgs,
    /// The kernel refused the call with this error.
    Kernel(Error),
    /// The kernel returned an error code this library does not know.
    Unknown(i64),
    /// Not running on Fjord (the host build of a function).
    Unsupported,
}

impl CallError {
    /// Decodes the error value of a `wait` or `async_call` system call.
    pub fn from_ret(ret: i64) -> CallError {
        let code = ret.checked_neg().unwrap_or(0);
        if code > CALLEE_ERROR_BASE {
            return FnError::from_code(code - CALLEE_ERROR_BASE)
                .map_or(CallError::Unknown(ret), CallError::Callee);
        }
        match Error::from_ret(ret) {
            Err(Some(Error::NoSuchFunction)) => CallError::NoSuchFunction,
            Err(Some(Error::CalleeFailed)) => CallError::CalleeFailed,
            Err(Some(Error::NoMemory)) => CallError::NoMemory,
            Err(Some(Error::InvalidArgs)) => CallError::InvalidArgs,
            Err(Some(e)) => CallError::Kernel(e),
            _ => CallError::Unknown(ret),
        }
    }

    /// The function error a handler should return when it cannot go on without the callee.
    pub fn to_fn_error(self) -> FnError {
        match self {
            CallError::Callee(e) => e,
            CallError::NoMemory => FnError::OutOfMemory,
            _ => FnError::Failed,
        }
    }
}

impl From<CallError> for FnError {
    fn from(e: CallError) -> FnError {
        e.to_fn_error()
    }
}

/// A buffer for passing a request to another function and getting its response back: a VMA of
/// the calling function's protection domain, a whole number of pages.
#[derive(Debug)]
pub struct ArgBuf {
    base: u64,
    capacity: usize,
}

/// Where the response of a finished call lies in its ArgBuf.
#[derive(Debug)]
pub struct Reply {
    buf: ArgBuf,
    start: usize,
    len: usize,
}

impl Reply {
    /// The callee's response.
    pub fn bytes(&self) -> &[u8] {
        &self.buf.bytes()[self.start..self.start + self.len]
    }

    /// The response length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the response is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The ArgBuf back, for another call.
    pub fn into_argbuf(self) -> ArgBuf {
        self.buf
    }
}

/// An outstanding [`async_call`]; [`wait`] for it to get the ArgBuf and the response back.
/// Dropping it waits too (the ArgBuf must come back before it can be freed).
#[derive(Debug)]
#[must_use = "an outstanding call is waited for when dropped"]
pub struct Pending {
    handle: u64,
    request_len: usize,
    buf: Option<ArgBuf>,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.buf.is_some() {
            let _ = sys::wait(self.handle);
        }
    }
}

impl ArgBuf {
    /// A new ArgBuf of at least `capacity` bytes (rounded up to whole pages), zeroed.
    pub fn new(capacity: usize) -> Result<ArgBuf, CallError> {
        let capacity = crate::function::argbuf_size(capacity);
        let base = sys::mmap(capacity)?;
        Ok(ArgBuf { base, capacity })
    }

    /// A new ArgBuf holding `request`, with room for a response of `response_room` bytes.
    pub fn with_request(request: &[u8], response_room: usize) -> Result<ArgBuf, CallError> {
        let mut buf = ArgBuf::new(response_offset(request.len()) + response_room)?;
        buf.bytes_mut()[..request.len()].copy_from_slice(request);
        Ok(buf)
    }

    /// Its size in bytes.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Its address (the VMA's base).
    pub fn address(&self) -> u64 {
        self.base
    }

    /// The whole buffer, for reading.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `base .. base + capacity` is a VMA this PD mapped read-write in `new` and owns
        // until `drop`; while a call is outstanding the ArgBuf is inside a `Pending`, so no
        // reference to it exists.
        unsafe { core::slice::from_raw_parts(self.base as *const u8, self.capacity) }
    }

    /// The whole buffer, for writing a request in place.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for `bytes`; `&mut self` makes this the only reference.
        unsafe { core::slice::from_raw_parts_mut(self.base as *mut u8, self.capacity) }
    }
}

impl Drop for ArgBuf {
    fn drop(&mut self) {
        sys::munmap(self.base, self.capacity);
    }
}

/// Starts `name` on the request `buf[..request_len]` and returns at once; the ArgBuf travels
/// to the callee until [`wait`] brings it back.
pub fn async_call(name: &str, buf: ArgBuf, request_len: usize) -> Result<Pending, CallError> {
    if request_len > buf.capacity {
        return Err(CallError::InvalidArgs);
    }
    let handle = sys::async_call(name, buf.base, request_len)?;
    Ok(Pending {
        handle,
        request_len,
        buf: Some(buf),
    })
}

/// Waits for the call `pending` to finish; returns its response in the ArgBuf.
pub fn wait(mut pending: Pending) -> Result<Reply, CallError> {
    let r = sys::wait(pending.handle);
    let buf = pending.buf.take().ok_or(CallError::InvalidArgs)?;
    reply(buf, pending.request_len, r?)
}

/// Calls `name` on the request `buf[..request_len]` and waits for its response: one system
/// call that starts the callee and suspends this function until it finished (the same as
/// [`wait`] on [`async_call`], one gate crossing fewer).
pub fn call(name: &str, buf: ArgBuf, request_len: usize) -> Result<Reply, CallError> {
    if request_len > buf.capacity {
        return Err(CallError::InvalidArgs);
    }
    let len = sys::call(name, buf.base, request_len)?;
    reply(buf, request_len, len)
}

/// The response of a finished call of `request_len` bytes whose callee answered `len` bytes.
fn reply(buf: ArgBuf, request_len: usize, len: usize) -> Result<Reply, CallError> {
    let start = response_offset(request_len);
    if start.checked_add(len).is_none_or(|end| end > buf.capacity) {
        return Err(CallError::CalleeFailed);
    }
    Ok(Reply { buf, start, len })
}

/// Calls `name` on a copy of `request` with `response_room` bytes for the response: a
/// convenience for small requests built elsewhere (the copy is into this function's own new
/// ArgBuf; the call itself still copies nothing).
pub fn call_bytes(name: &str, request: &[u8], response_room: usize) -> Result<Reply, CallError> {
    let buf = ArgBuf::with_request(request, response_room)?;
    call(name, buf, request.len())
}

#[cfg(target_os = "none")]
mod sys {
    use super::CallError;
    use crate::abi::Sysno;
    use crate::privlib::{self, PROT_READ, PROT_WRITE};
    use crate::syscall::syscall4_raw;

    pub fn mmap(len: usize) -> Result<u64, CallError> {
        privlib::mmap(len as u64, PROT_READ | PROT_WRITE).map_err(|e| match e {
            Some(crate::abi::Error::NoMemory) => CallError::NoMemory,
            Some(e) => CallError::Kernel(e),
            None => CallError::Unknown(0),
        })
    }

    pub fn munmap(base: u64, len: usize) {
        let _ = privlib::munmap(base, len as u64);
    }

    pub fn async_call(name: &str, buf: u64, request_len: usize) -> Result<u64, CallError> {
        on_function(Sysno::AsyncCall, name, buf, request_len)
    }

    pub fn wait(handle: u64) -> Result<usize, CallError> {
        value(syscall4_raw(Sysno::Wait, handle, 0, 0, 0)).map(|n| n as usize)
    }

    pub fn call(name: &str, buf: u64, request_len: usize) -> Result<usize, CallError> {
        on_function(Sysno::Call, name, buf, request_len).map(|n| n as usize)
    }

    /// A call that names a function and hands it the ArgBuf at `buf` (`async_call`, `call`).
    fn on_function(no: Sysno, name: &str, buf: u64, request_len: usize) -> Result<u64, CallError> {
        value(syscall4_raw(
            no,
            name.as_ptr() as u64,
            name.len() as u64,
            buf,
            request_len as u64,
        ))
    }

    /// A raw result: a value, or the error a negative one carries.
    fn value(r: i64) -> Result<u64, CallError> {
        if r < 0 {
            Err(CallError::from_ret(r))
        } else {
            Ok(r as u64)
        }
    }
}

#[cfg(not(target_os = "none"))]
mod sys {
    use super::CallError;

    pub fn mmap(_: usize) -> Result<u64, CallError> {
        Err(CallError::Unsupported)
    }

    pub fn munmap(_: u64, _: usize) {}

    pub fn async_call(_: &str, _: u64, _: usize) -> Result<u64, CallError> {
        Err(CallError::Unsupported)
    }

    pub fn wait(_: u64) -> Result<usize, CallError> {
        Err(CallError::Unsupported)
    }

    pub fn call(_: &str, _: u64, _: usize) -> Result<usize, CallError> {
        Err(CallError::Unsupported)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callee_errors_decode() {
        for e in FnError::ALL {
            let ret = -(CALLEE_ERROR_BASE + e as i64);
            assert_eq!(CallError::from_ret(ret), CallError::Callee(e));
        }
        assert_eq!(
            CallError::from_ret(Error::NoSuchFunction.to_ret()),
            CallError::NoSuchFunction
        );
        assert_eq!(
            CallError::from_ret(Error::CalleeFailed.to_ret()),
            CallError::CalleeFailed
        );
        assert_eq!(
            CallError::from_ret(Error::Busy.to_ret()),
            CallError::Kernel(Error::Busy)
        );
        assert_eq!(CallError::from_ret(-1000), CallError::Unknown(-1000));
    }

    #[test]
    fn host_build_has_no_other_functions() {
        assert_eq!(ArgBuf::new(10).unwrap_err(), CallError::Unsupported);
        assert_eq!(
            call_bytes("x", b"y", 10).unwrap_err(),
            CallError::Unsupported
        );
    }
}
