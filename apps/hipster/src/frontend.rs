//! `hipster-frontend`: the entry of the hipster workload's operations (Online Boutique's
//! frontend handlers `/cart` and `/cart/checkout`).
//!
//! - `op=get_cart&user=<user>&currency=<code>`: `hipster-cart` (sync), then the cart's
//!   products from `hipster-catalog` and a `hipster-shipping` quote, started at once (async),
//!   then one `hipster-currency` conversion of every price and the quote (sync). Response
//!   `user=<user>&items=<n>&shipping=<CUR x.yy>&total=<CUR x.yy>`, then one line
//!   `product=<id>&name=<text>&quantity=<n>&price=<CUR x.yy>` per product.
//! - `op=place_order&user=<user>&currency=<code>[&add=<id:n,...>]&email=..&street=..&city=..
//!   &zip=..&country=..&card=..&cvv=..&exp_month=..&exp_year=..`: with `add` (a "buy now"
//!   form) first adds the items with `hipster-cart` (sync), then `hipster-checkout` (sync);
//!   response the checkout's.

use core::fmt::Write;
use fjord_app_kit::{Bytes, Env, SMALL, args};
use fjord_libos::function::FnError;
use fjord_libos::text::{Writer, field, lines};

use crate::data::PRODUCTS;
use crate::items::Items;
use crate::money::{Code, Money, Pretty};

/// The fields of `place_order` passed on to `hipster-checkout`.
const CHECKOUT_FIELDS: [&str; 9] = [
    "email",
    "street",
    "city",
    "zip",
    "country",
    "card",
    "cvv",
    "exp_month",
    "exp_year",
];

/// Serves one `hipster-frontend` request.
pub fn serve<E: Env>(env: &mut E, req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let rec = args::record(req)?;
    let user = args::need_token(rec, "user")?;
    let currency = Code::parse(args::need(rec, "currency")?).ok_or(FnError::BadRequest)?;
    match args::need(rec, "op")? {
        b"get_cart" => get_cart(env, user, currency, resp),
        b"place_order" => place_order(env, rec, user, currency, resp),
        _ => Err(FnError::BadRequest),
    }
}

fn get_cart<E: Env>(
    env: &mut E,
    user: &str,
    currency: Code,
    resp: &mut [u8],
) -> Result<usize, FnError> {
    let cart = env.call("hipster-cart", SMALL, |w| write!(w, "op=get&user={user}"))?;
    let items = field(cart.bytes(), "items")
        .and_then(Items::parse)
        .ok_or(FnError::Failed)?;
    let mut w = Writer::new(resp);
    if items.is_empty() {
        let zero = Pretty(Money::zero(currency));
        let _ = writeln!(w, "user={user}&items=0&shipping={zero}&total={zero}");
        return w.finish();
    }
    let products = env.start("hipster-catalog", SMALL, |w| {
        w.write_str("op=get&ids=")?;
        for (i, &(p, _)) in items.entries().iter().enumerate() {
            write!(w, "{}{}", if i > 0 { "," } else { "" }, PRODUCTS[p].id)?;
        }
        Ok(())
    })?;
    let quote = env.start("hipster-shipping", SMALL, |w| {
        write!(w, "op=quote&items={items}")
    })?;
    let (products, quote) = (env.wait(products)?, env.wait(quote)?);
    let quote = field(quote.bytes(), "quote").ok_or(FnError::Failed)?;
    let converted = env.call("hipster-currency", SMALL, |w| {
        write!(w, "op=convert&to={currency}&amounts=")?;
        for line in lines(products.bytes()) {
            w.bytes(field(line, "price").ok_or(core::fmt::Error)?)?;
            w.write_str(",")?;
        }
        w.bytes(quote)
    })?;
    let amounts = field(converted.bytes(), "amounts").ok_or(FnError::Failed)?;
    let mut prices = args::items(amounts).map(|a| Money::parse(a).ok_or(FnError::Failed));
    let mut lines_out = [(0usize, 0u64, Money::zero(currency)); crate::items::MAX_ITEMS];
    let mut total = Money::zero(currency);
    for (slot, &(p, quantity)) in lines_out.iter_mut().zip(items.entries()) {
        let price = prices.next().ok_or(FnError::Failed)??;
        total = price
            .times(quantity)
            .and_then(|l| total.plus(l))
            .ok_or(FnError::Failed)?;
        *slot = (p, quantity, price);
    }
    let shipping = prices.next().ok_or(FnError::Failed)??;
    let total = total.plus(shipping).ok_or(FnError::Failed)?;
    let _ = writeln!(
        w,
        "user={user}&items={}&shipping={}&total={}",
        items.count(),
        Pretty(shipping),
        Pretty(total)
    );
    for &(p, quantity, price) in &lines_out[..items.len()] {
        let product = &PRODUCTS[p];
        let _ = writeln!(
            w,
            "product={}&name={}&quantity={quantity}&price={}",
            product.id,
            product.name,
            Pretty(price)
        );
    }
    w.finish()
}

fn place_order<E: Env>(
    env: &mut E,
    rec: &[u8],
    user: &str,
    currency: Code,
    resp: &mut [u8],
) -> Result<usize, FnError> {
    if let Some(add) = field(rec, "add") {
        let add = Items::parse(add).ok_or(FnError::BadRequest)?;
        if !add.is_empty() {
            env.call("hipster-cart", SMALL, |w| {
                write!(w, "op=add&user={user}&items={add}")
            })?;
        }
    }
    let order = env.call("hipster-checkout", SMALL, |w| {
        write!(w, "user={user}&currency={currency}")?;
        for key in CHECKOUT_FIELDS {
            write!(w, "&{key}=")?;
            w.bytes(field(rec, key).unwrap_or(b""))?;
        }
        Ok(())
    })?;
    let mut w = Writer::new(resp);
    let _ = w.bytes(order.bytes());
    w.finish()
}
