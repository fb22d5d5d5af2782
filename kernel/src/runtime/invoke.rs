//! Invoking a function: the Jord executor sequence for one request (Jord §3.4).
//!
//! 1. take an instance of the function ([`crate::module::instance`]): an idle one from its pool, or a new
//!    PD (`cget`, which gives it a root table and a small creation stack) with its instance
//!    VMA: the manifest's stack, then its heap (see the entry ABI in
//!    [`fjord_libos::function`]), and the heap allocator's header below the boundary;
//! 2. `mmap` an ArgBuf VMA owned by the kernel, copy the request in, and `pmove` it to the PD:
//!    a permission move, no copy. An HTTP request body is copied three times on its way here:
//!    from the socket into the gateway's request, into the task that carries it to an executor
//!    CPU, and into the ArgBuf; from then on, nested calls move it and never copy it;
//! 3. `ccall` the entry (`exec::call`) with a deadline;
//! 4. `pmove` the ArgBuf back to the kernel, read the response;
//! 5. give the instance back: restored into its pool if the function returned (see
//!    [`crate::module::warm`]), else `cput` (its stack and instance VMA go with it); `munmap` the
//!    ArgBuf.
//!
//! The instance is given back and the ArgBuf freed whatever happened; every failure is typed.

use crate::module::instance::ArgBuf;
use alloc::vec::Vec;
use fjord_libos::function::{FnError, FnReturn, response_offset};

pub use crate::orchestrator::InvokeFailure;
pub use fjord_libos::function::DEFAULT_RESPONSE_ROOM;
/// Largest request accepted (bounds the ArgBuf).
pub const MAX_REQUEST: usize = 16 << 20;

/// Invocations stopped at their time limit.
pub static TIMEOUTS: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
/// Invocations whose function panicked (it returned [`FnError::Panicked`]).
pub static PANICS: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// Counts how an invocation's call ended, when it was a time-out or a panic: `called` is the
/// function's `creturn` value or the executor's failure.
pub(crate) fn count_ending(called: &Result<u64, InvokeFailure>) {
    use core::sync::atomic::Ordering::Relaxed;
    match called {
        Err(InvokeFailure::TimedOut { .. }) => {
            TIMEOUTS.fetch_add(1, Relaxed);
        }
        Ok(v) if FnReturn::decode(*v) == FnReturn::Error(FnError::Panicked) => {
            PANICS.fetch_add(1, Relaxed);
        }
        _ => {}
    }
}

/// Invokes the deployed function `name` on `request` as an external request through the
/// orchestrator, the path HTTP requests take (nested calls included), and waits for it and
/// for its instance to be given back.
pub fn invoke(name: &str, request: &[u8]) -> Result<Vec<u8>, InvokeFailure> {
    let f = super::lookup(name).ok_or(InvokeFailure::NoSuchFunction)?;
    let work = super::task::root_work(f, request.to_vec());
    let r = match crate::orchestrator::run_external_task(work) {
        Ok(done) => done.result,
        Err(crate::orchestrator::SubmitError::QueueFull) => Err(InvokeFailure::Busy),
    };
    // The instance is given back after the response; callers here (tests, benchmarks) see
    // it back in its pool.
    crate::module::warm::settle();
    r
}

/// Decodes the function's return value and copies the response out of its kernel-owned
/// ArgBuf.
pub(crate) fn response(
    argbuf: &ArgBuf,
    request_len: usize,
    value: u64,
) -> Result<Vec<u8>, InvokeFailure> {
    match FnReturn::decode(value) {
        FnReturn::Response(n) => {
            let start = response_offset(request_len);
            let end = usize::try_from(n)
                .ok()
                .and_then(|n| start.checked_add(n))
                .filter(|&end| end <= argbuf.capacity as usize)
                .ok_or(InvokeFailure::BadResponse(value))?;
            argbuf
                .read(start, end - start)
                .ok_or(InvokeFailure::BadResponse(value))
        }
        FnReturn::Error(e) => Err(InvokeFailure::Function(e)),
        FnReturn::UnknownError(_) => Err(InvokeFailure::BadResponse(value)),
    }
}
