//! The `hipster-frontend` function: the entry of get_cart and place_order; see [`fjord_app_hipster::frontend`].
#![cfg_attr(target_os = "none", no_std, no_main)]

use fjord_app_kit::Fjord;
use fjord_libos::function::FnError;

/// Serves one request on Fjord.
fn handler(req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    fjord_app_hipster::frontend::serve(&mut Fjord, req, resp)
}

fjord_libos::function!(
    handler,
    name = "hipster-frontend",
    app = "hipster",
    kv_quota = "1M",
    stack_size = "64K",
    heap_size = 0
);
