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

/// The workload's functions by name, with the env `E`: what the function modules run
/// (`src/bin/*.rs`, with the Fjord env), for systems that run them in one process per env
/// (host tests, the NightCore-like Linux baseline).
pub const fn routes<E: fjord_app_kit::Env>() -> [(&'static str, fjord_app_kit::Route<E>); 8] {
    [
        ("hipster-frontend", frontend::serve::<E>),
        ("hipster-cart", cart::serve::<E>),
        ("hipster-catalog", catalog::serve::<E>),
        ("hipster-currency", currency::serve::<E>),
        ("hipster-shipping", shipping::serve::<E>),
        ("hipster-payment", payment::serve::<E>),
        ("hipster-email", email::serve::<E>),
        ("hipster-checkout", checkout::serve::<E>),
    ]
}
