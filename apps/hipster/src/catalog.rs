//! `hipster-catalog`: products (Online Boutique's product-catalog service `GetProduct`).
//!
//! Request `op=get&ids=<id,...>`; response one line
//! `id=<id>&name=<text>&price=<money>&categories=<list>` per product, in request order.

use core::fmt::Write;
use fjord_app_kit::{Env, args};
use fjord_libos::function::FnError;
use fjord_libos::text::Writer;

use crate::data::{PRODUCTS, product_index};
use crate::items::MAX_ITEMS;

/// Serves one `hipster-catalog` request.
pub fn serve<E: Env>(_env: &mut E, req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let rec = args::record(req)?;
    if args::need(rec, "op")? != b"get" {
        return Err(FnError::BadRequest);
    }
    let ids = args::need(rec, "ids")?;
    if args::items(ids).count() > MAX_ITEMS {
        return Err(FnError::BadRequest);
    }
    let mut w = Writer::new(resp);
    for id in args::items(ids) {
        let p = &PRODUCTS[product_index(id).ok_or(FnError::BadRequest)?];
        let _ = writeln!(
            w,
            "id={}&name={}&price={}&categories={}",
            p.id, p.name, p.price, p.categories
        );
    }
    w.finish()
}
