//! The `hipster-catalog` function: the product catalog; see [`fjord_app_hipster::catalog`].
#![cfg_attr(target_os = "none", no_std, no_main)]

use fjord_app_kit::Fjord;
use fjord_libos::function::FnError;

/// Serves one request on Fjord.
fn handler(req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    fjord_app_hipster::catalog::serve(&mut Fjord, req, resp)
}

fjord_libos::function!(
    handler,
    name = "hipster-catalog",
    app = "hipster",
    kv_quota = "1M",
    stack_size = "16K",
    heap_size = 0
);
