//! `hipster-checkout`: places an order (Online Boutique's checkout service `PlaceOrder`).
//!
//! Request `user=<user>&currency=<code>&email=<address>&street=..&city=..&zip=..&country=..
//! &card=<digits>&cvv=<digits>&exp_month=<m>&exp_year=<y>`; response
//! ```text
//! order=<id>&items=<n>&shipping=<CUR x.yy>&total=<CUR x.yy>&transaction=<id>&tracking=<id>
//! to=<address>&subject=<text>        (the confirmation email's header)
//! ```
//! or `order=none&items=0&reason=empty-cart` for an empty cart (a success: a concurrent
//! order of the same user may just have emptied it).
//!
//! Calls, as the original (`prepareOrderItemsAndShippingQuoteFromCart`, then charge, ship,
//! empty the cart, send the confirmation):
//! 1. `hipster-cart` get (sync);
//! 2. `hipster-catalog` per item and a `hipster-shipping` quote, all started at once (async);
//! 3. `hipster-currency` per item price and for the quote, all started at once (async);
//! 4. `hipster-payment` (sync);
//! 5. `hipster-shipping` ship and `hipster-cart` empty, started at once (async); then
//!    `hipster-email` with the tracking id (sync).
//!
//! The order id is a hash of a counter under `hipster/counter/order` (the original draws a
//! UUID).

use core::fmt::Write;
use fjord_app_kit::hash::fnv1a64_parts;
use fjord_app_kit::store::{Key, next_counter};
use fjord_app_kit::{Bytes, Env, SMALL, args};
use fjord_libos::function::FnError;
use fjord_libos::text::{Writer, field};

use crate::address::Address;
use crate::data::PRODUCTS;
use crate::email::valid_email;
use crate::items::{Items, MAX_ITEMS};
use crate::money::{Code, Money, Pretty};

fn money(reply: &[u8], key: &str) -> Result<Money, FnError> {
    field(reply, key)
        .and_then(Money::parse)
        .ok_or(FnError::Failed)
}

/// Serves one `hipster-checkout` request.
pub fn serve<E: Env>(env: &mut E, req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let rec = args::record(req)?;
    let user = args::need_token(rec, "user")?;
    let currency = Code::parse(args::need(rec, "currency")?).ok_or(FnError::BadRequest)?;
    let email = args::need_str(rec, "email")?;
    if !valid_email(email.as_bytes()) {
        return Err(FnError::BadRequest);
    }
    let address = Address::from_record(rec)?;
    let card = args::need_token(rec, "card")?;
    let cvv = args::need_token(rec, "cvv")?;
    let (month, year) = (
        args::need_u64(rec, "exp_month")?,
        args::need_u64(rec, "exp_year")?,
    );
    let mut w = Writer::new(resp);

    let cart = env.call("hipster-cart", SMALL, |w| write!(w, "op=get&user={user}"))?;
    let items = field(cart.bytes(), "items")
        .and_then(Items::parse)
        .ok_or(FnError::Failed)?;
    if items.is_empty() {
        let _ = write!(w, "order=none&items=0&reason=empty-cart");
        return w.finish();
    }

    let mut products: [Option<E::Pending>; MAX_ITEMS] = Default::default();
    for (slot, &(p, _)) in products.iter_mut().zip(items.entries()) {
        *slot = Some(env.start("hipster-catalog", SMALL, |w| {
            write!(w, "op=get&ids={}", PRODUCTS[p].id)
        })?);
    }
    let quote = env.start("hipster-shipping", SMALL, |w| {
        write!(w, "op=quote&items={items}")
    })?;
    let mut prices = [None; MAX_ITEMS];
    for (price, p) in prices.iter_mut().zip(products) {
        if let Some(p) = p {
            *price = Some(money(env.wait(p)?.bytes(), "price")?);
        }
    }
    let quote = money(env.wait(quote)?.bytes(), "quote")?;

    let mut converted: [Option<E::Pending>; MAX_ITEMS] = Default::default();
    for (slot, price) in converted.iter_mut().zip(prices) {
        if let Some(price) = price {
            *slot = Some(env.start("hipster-currency", SMALL, |w| {
                write!(w, "op=convert&to={currency}&amounts={price}")
            })?);
        }
    }
    let shipping = env.start("hipster-currency", SMALL, |w| {
        write!(w, "op=convert&to={currency}&amounts={quote}")
    })?;
    let mut total = Money::zero(currency);
    for (p, &(_, quantity)) in converted.into_iter().flatten().zip(items.entries()) {
        let line = money(env.wait(p)?.bytes(), "amounts")?.times(quantity);
        total = line
            .and_then(|l| total.plus(l))
            .ok_or(FnError::BadRequest)?;
    }
    let shipping = money(env.wait(shipping)?.bytes(), "amounts")?;
    let total = total.plus(shipping).ok_or(FnError::BadRequest)?;

    let n = next_counter(env, &Key::new(format_args!("hipster/counter/order"))?)?;
    let order = fnv1a64_parts(&[user.as_bytes(), &n.to_le_bytes()]);
    let charge = env.call("hipster-payment", SMALL, |w| {
        write!(
            w,
            "op=charge&order={order:016x}&amount={total}&card={card}&cvv={cvv}"
        )?;
        write!(w, "&exp_month={month}&exp_year={year}")
    })?;
    let transaction = field(charge.bytes(), "transaction").ok_or(FnError::Failed)?;

    let ship = env.start("hipster-shipping", SMALL, |w| {
        write!(w, "op=ship&order={order:016x}&items={items}&{address}")
    })?;
    let empty = env.start("hipster-cart", SMALL, |w| write!(w, "op=empty&user={user}"))?;
    let ship = env.wait(ship)?;
    let tracking = field(ship.bytes(), "tracking").ok_or(FnError::Failed)?;
    let confirmation = env.call("hipster-email", SMALL, |w| {
        write!(w, "op=confirm&email={email}&order={order:016x}&tracking=")?;
        w.bytes(tracking)?;
        write!(w, "&total={total}&items={}&{address}", items.count())
    })?;
    env.wait(empty)?;

    let _ = write!(
        w,
        "order={order:016x}&items={}&shipping={}&total={}&transaction=",
        items.count(),
        Pretty(shipping),
        Pretty(total)
    );
    let _ = w.bytes(transaction);
    let _ = w.bytes(b"&tracking=");
    let _ = w.bytes(tracking);
    let _ = writeln!(w);
    let header = confirmation
        .bytes()
        .split(|&b| b == b'\n')
        .next()
        .unwrap_or(b"");
    let _ = w.bytes(header);
    let _ = writeln!(w);
    w.finish()
}
