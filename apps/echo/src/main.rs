//! The `echo` function: responds with the request bytes.
//!
//! Built as a static-PIE module for `x86_64-unknown-none` by `cargo xtask build`; on the host it
//! serves one request from stdin.
#![cfg_attr(target_os = "none", no_std, no_main)]

use fjord_libos::function::FnError;

/// Copies the request into the response.
fn echo(req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    resp.get_mut(..req.len())
        .ok_or(FnError::ResponseTooLarge)?
        .copy_from_slice(req);
    Ok(req.len())
}

fjord_libos::function!(echo, name = "echo", stack_size = "16K", heap_size = "64K");
