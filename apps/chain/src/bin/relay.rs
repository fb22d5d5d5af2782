//! The `relay` function: nested synchronous calls, for tests and the chain benchmark.
//!
//! Requests:
//! - `<n> <payload>`: with `n > 0`, calls `relay` with `<n-1> <payload>` in a new ArgBuf and
//!   responds `relay@<own ArgBuf> sent@<callee's ArgBuf>;` followed by the callee's response;
//!   with `n == 0` responds `leaf@<own ArgBuf> sum=<byte sum of payload>;`. The addresses show
//!   that each callee received exactly the buffer its caller filled (moved, not copied);
//! - `call:<name>:<payload>`: calls `name` with `payload` and responds `ok:<response>` or
//!   `err:<error>`, so a test can watch a caller survive a failing callee.
#![cfg_attr(target_os = "none", no_std, no_main)]

use core::fmt::Write;
use fjord_libos::call::{ArgBuf, call, call_bytes};
use fjord_libos::function::FnError;
use fjord_libos::text::{Writer, parse_u64};

fn split_once(b: &[u8], sep: u8) -> Option<(&[u8], &[u8])> {
    let i = b.iter().position(|&c| c == sep)?;
    Some((&b[..i], &b[i + 1..]))
}

/// Serves one relay request.
fn relay(req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let here = req.as_ptr() as u64;
    let mut out = Writer::new(resp);
    if let Some(rest) = req.strip_prefix(b"call:") {
        let (name, payload) = split_once(rest, b':').ok_or(FnError::BadRequest)?;
        let name = core::str::from_utf8(name).map_err(|_| FnError::BadRequest)?;
        match call_bytes(name, payload, 4096) {
            Ok(reply) => {
                let _ = out.bytes(b"ok:");
                let _ = out.bytes(reply.bytes());
            }
            Err(e) => {
                let _ = write!(out, "err:{e:?}");
            }
        }
        return out.finish();
    }
    let (n, payload) = split_once(req, b' ').unwrap_or((req, b""));
    let n = parse_u64(n).ok_or(FnError::BadRequest)?;
    if n == 0 {
        let sum: u64 = payload.iter().map(|&b| u64::from(b)).sum();
        let _ = write!(out, "leaf@{here:#x} sum={sum};");
        return out.finish();
    }
    let mut buf = ArgBuf::new(payload.len() + 32 + 4096)?;
    let sent = buf.address();
    let len = {
        let mut w = Writer::new(buf.bytes_mut());
        let _ = write!(w, "{} ", n - 1);
        let _ = w.bytes(payload);
        w.finish()?
    };
    let reply = call("relay", buf, len)?;
    let _ = write!(out, "relay@{here:#x} sent@{sent:#x};");
    let _ = out.bytes(reply.bytes());
    out.finish()
}

fjord_libos::function!(relay, name = "relay", stack_size = "32K", heap_size = 0);
