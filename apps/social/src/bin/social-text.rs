//! The `social-text` function: mentions and short URLs of a post's text; see [`fjord_app_social::text`].
#![cfg_attr(target_os = "none", no_std, no_main)]

use fjord_app_kit::Fjord;
use fjord_libos::function::FnError;

/// Serves one request on Fjord.
fn handler(req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    fjord_app_social::text::serve(&mut Fjord, req, resp)
}

fjord_libos::function!(
    handler,
    name = "social-text",
    app = "social",
    kv_quota = "1M",
    stack_size = "64K",
    heap_size = 0
);
