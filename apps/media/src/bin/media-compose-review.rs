//! The `media-compose-review` function: collects a review's parts; see [`fjord_app_media::compose`].
#![cfg_attr(target_os = "none", no_std, no_main)]

use fjord_app_kit::Fjord;
use fjord_libos::function::FnError;

/// Serves one request on Fjord.
fn handler(req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    fjord_app_media::compose::compose_review(&mut Fjord, req, resp)
}

fjord_libos::function!(
    handler,
    name = "media-compose-review",
    app = "media",
    kv_quota = "1M",
    stack_size = "64K",
    heap_size = 0
);
