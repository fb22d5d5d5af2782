//! `hipster-email`: the order confirmation email (Online Boutique's email service, which
//! renders `confirmation.html` and, in the demo, only logs it).
//!
//! Request `op=confirm&email=<address>&order=<id>&tracking=<id>&total=<money>&items=<n>&street=..&city=..&zip=..&country=..`;
//! response the rendered email: a header line `to=<address>&subject=<text>`, then the body's
//! lines.

use core::fmt::Write;
use fjord_app_kit::{Env, args, form};
use fjord_libos::function::FnError;
use fjord_libos::text::Writer;

use crate::address::{Address, MAX_FIELD};
use crate::money::{Money, Pretty};

/// Whether `email` looks like `local@domain.tld` (token characters only).
pub fn valid_email(email: &[u8]) -> bool {
    let Some(at) = email.iter().position(|&b| b == b'@') else {
        return false;
    };
    let (local, domain) = (&email[..at], &email[at + 1..]);
    let dot = domain.iter().rposition(|&b| b == b'.');
    args::is_token(local)
        && args::is_token(domain)
        && dot.is_some_and(|d| d > 0 && d + 1 < domain.len())
}

fn decoded<'a>(v: &[u8], buf: &'a mut [u8; MAX_FIELD]) -> &'a str {
    let n = form::decode(v, buf).unwrap_or(0);
    core::str::from_utf8(&buf[..n]).unwrap_or("")
}

/// Serves one `hipster-email` request.
pub fn serve<E: Env>(_env: &mut E, req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let rec = args::record(req)?;
    if args::need(rec, "op")? != b"confirm" {
        return Err(FnError::BadRequest);
    }
    let email = args::need_str(rec, "email")?;
    if !valid_email(email.as_bytes()) {
        return Err(FnError::BadRequest);
    }
    let order = args::need_token(rec, "order")?;
    let tracking = args::need_token(rec, "tracking")?;
    let total = Money::parse(args::need(rec, "total")?).ok_or(FnError::BadRequest)?;
    let items = args::need_u64(rec, "items")?;
    let a = Address::from_record(rec)?;
    let mut bufs = [[0u8; MAX_FIELD]; 4];
    let [b0, b1, b2, b3] = &mut bufs;
    let (street, city, zip, country) = (
        decoded(a.street, b0),
        decoded(a.city, b1),
        decoded(a.zip, b2),
        decoded(a.country, b3),
    );
    let mut w = Writer::new(resp);
    let _ = writeln!(
        w,
        "to={email}&subject=Your Confirmation Email - Order {order}"
    );
    let _ = writeln!(
        w,
        "Hello! Thank you for shopping with Online Boutique. Your order {order} is complete."
    );
    let _ = writeln!(
        w,
        "Items: {items}. Total paid: {}. Tracking number: {tracking}.",
        Pretty(total)
    );
    let _ = writeln!(w, "Shipping to: {street}, {city} {zip}, {country}.");
    w.finish()
}

#[cfg(test)]
mod tests {
    #[test]
    fn emails_are_checked() {
        assert!(super::valid_email(b"bob@example.com"));
        for bad in [
            &b"bob"[..],
            b"@example.com",
            b"bob@",
            b"bob@example",
            b"bob@example.",
            b"b b@x.io",
            b"a@b@c.io",
        ] {
            assert!(!super::valid_email(bad), "{bad:?}");
        }
    }
}
