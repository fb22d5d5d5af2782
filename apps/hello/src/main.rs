//! The `hello` function: responds `hello, <request>!`.
//!
//! Built as a static-PIE module for `x86_64-unknown-none` by `cargo xtask build`; on the host it
//! serves one request from stdin (`echo -n world | cargo run -p fjord-app-hello`).
#![cfg_attr(target_os = "none", no_std, no_main)]

use fjord_libos::function::FnError;

/// Writes `hello, <req>!` into `resp`.
fn hello(req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let parts: [&[u8]; 3] = [b"hello, ", req, b"!"];
    let mut n = 0;
    for part in parts {
        resp.get_mut(n..n + part.len())
            .ok_or(FnError::ResponseTooLarge)?
            .copy_from_slice(part);
        n += part.len();
    }
    Ok(n)
}

fjord_libos::function!(hello, name = "hello", stack_size = "16K", heap_size = 0);
