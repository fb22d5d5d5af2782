//! The `social-unique-id` function: post ids; see [`fjord_app_social::unique_id`].
#![cfg_attr(target_os = "none", no_std, no_main)]

use fjord_app_kit::Fjord;
use fjord_libos::function::FnError;

/// Serves one request on Fjord.
fn handler(req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    fjord_app_social::unique_id::serve(&mut Fjord, req, resp)
}

fjord_libos::function!(
    handler,
    name = "social-unique-id",
    app = "social",
    kv_quota = "1M",
    stack_size = "16K",
    heap_size = 0
);
