//! The hipster workload: Google's Online Boutique ("Hipster Shop") as nested Fjord
//! functions.
//!
//! One module per function, each with a `serve` handler generic over the
//! [`Env`](fjord_app_kit::Env) (the binaries in `src/bin/` run them on Fjord); the catalog in
//! [`data`], money and currencies in [`money`], cart contents in [`items`]. Operations (entry
//! `hipster-frontend`, see [`frontend`]):
//! - `get_cart`: frontend → cart, then (catalog ∥ shipping quote), then currency;
//! - `place_order`: frontend → cart add, then checkout → cart, (catalog × items ∥ quote),
//!   (currency × items ∥ currency), payment, (shipping ∥ cart empty), email.
//!
//! See `apps/WORKLOADS.md` for the formats. Cargo features: none.
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]

pub mod address;
pub mod cart;
pub mod catalog;
pub mod checkout;
pub mod currency;
pub mod data;
pub mod email;
pub mod frontend;
pub mod items;
pub mod money;
pub mod payment;
pub mod shipping;

#[cfg(test)]
mod tests;

/// The workload's functions: (name, handler), for in-process tests.
#[cfg(test)]
pub(crate) fn routes() -> [(&'static str, fjord_app_kit::test_env::Route); 8] {
    use fjord_app_kit::test_env::TestEnv;
    [
        ("hipster-frontend", frontend::serve::<TestEnv>),
        ("hipster-cart", cart::serve::<TestEnv>),
        ("hipster-catalog", catalog::serve::<TestEnv>),
        ("hipster-currency", currency::serve::<TestEnv>),
        ("hipster-shipping", shipping::serve::<TestEnv>),
        ("hipster-payment", payment::serve::<TestEnv>),
        ("hipster-email", email::serve::<TestEnv>),
        ("hipster-checkout", checkout::serve::<TestEnv>),
    ]
}
