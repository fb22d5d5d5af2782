//! The `fanout` function: asynchronous nested calls.
//!
//! Request `<k>` (1 to 16): starts `k` calls of `relay` with `0 <i>` at once with `async_call`,
//! then waits for each, and responds `fanout k=<k>;` followed by the `k` responses in order.
#![cfg_attr(target_os = "none", no_std, no_main)]

use core::fmt::Write;
use fjord_libos::call::{ArgBuf, Pending, async_call, wait};
use fjord_libos::function::FnError;
use fjord_libos::text::{Writer, parse_u64};

/// Most calls one request may start.
const MAX_FANOUT: usize = 16;

/// Serves one fanout request.
fn fanout(req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let k = parse_u64(req).ok_or(FnError::BadRequest)? as usize;
    if k == 0 || k > MAX_FANOUT {
        return Err(FnError::BadRequest);
    }
    let mut pending: [Option<Pending>; MAX_FANOUT] = Default::default();
    for (i, slot) in pending.iter_mut().enumerate().take(k) {
        let mut buf = ArgBuf::new(4096)?;
        let len = {
            let mut w = Writer::new(buf.bytes_mut());
            let _ = write!(w, "0 {i}");
            w.finish()?
        };
        *slot = Some(async_call("relay", buf, len)?);
    }
    let mut out = Writer::new(resp);
    let _ = write!(out, "fanout k={k};");
    for slot in pending.iter_mut().take(k) {
        let p = slot.take().ok_or(FnError::Failed)?;
        let reply = wait(p)?;
        let _ = out.bytes(reply.bytes());
    }
    out.finish()
}

fjord_libos::function!(fanout, name = "fanout", stack_size = "32K", heap_size = 0);
