//! `hipster-shipping`: shipping quotes and shipments (Online Boutique's shipping service).
//!
//! - `op=quote&items=<id:n,...>`: response `quote=<money>`: $8.99 for any non-empty order
//!   (the original's flat rate), nothing for an empty one;
//! - `op=ship&order=<id>&items=<id:n,...>&street=..&city=..&zip=..&country=..`: response
//!   `tracking=<id>`, shaped `XX-nnnn-nnnnnnnnn` like the original's but derived from
//!   the order and the address (the original draws random digits).

use core::fmt::Write;
use fjord_app_kit::hash::fnv1a64_parts;
use fjord_app_kit::{Env, args};
use fjord_libos::function::FnError;
use fjord_libos::text::Writer;

use crate::address::Address;
use crate::items::Items;
use crate::money::Money;

/// The flat shipping rate.
pub const FLAT_RATE: Money = Money::usd(8, 99);

/// The quote for `items`.
pub fn quote(items: &Items) -> Money {
    if items.is_empty() {
        Money {
            nanos: 0,
            ..FLAT_RATE
        }
    } else {
        FLAT_RATE
    }
}

/// The tracking id of an order shipped to `address`.
pub fn tracking_id(order: &[u8], address: &Address<'_>) -> [u8; 17] {
    let salt_len = address.street.len() + address.city.len();
    let h = fnv1a64_parts(&[
        order,
        address.street,
        address.city,
        address.zip,
        address.country,
    ]);
    let mut out = *b"XX-0000-000000000";
    out[0] = b'A' + (h % 26) as u8;
    out[1] = b'A' + (h / 26 % 26) as u8;
    out[3] = b'0' + (salt_len % 10) as u8;
    let mut digits = h / 676;
    for i in (4..7).chain(8..17) {
        if i == 8 {
            out[i] = b'0' + (salt_len / 2 % 10) as u8;
            continue;
        }
        out[i] = b'0' + (digits % 10) as u8;
        digits /= 10;
    }
    out
}

/// Serves one `hipster-shipping` request.
pub fn serve<E: Env>(_env: &mut E, req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let rec = args::record(req)?;
    let items = Items::parse(args::need(rec, "items")?).ok_or(FnError::BadRequest)?;
    let mut w = Writer::new(resp);
    match args::need(rec, "op")? {
        b"quote" => {
            let _ = write!(w, "quote={}", quote(&items));
        }
        b"ship" => {
            let order = args::need_token(rec, "order")?;
            let address = Address::from_record(rec)?;
            let id = tracking_id(order.as_bytes(), &address);
            let _ = w.bytes(b"tracking=");
            let _ = w.bytes(&id);
        }
        _ => return Err(FnError::BadRequest),
    }
    w.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracking_ids_are_shaped_and_stable() {
        let a = Address {
            street: b"1600+Amphitheatre+Parkway",
            city: b"Mountain+View",
            zip: b"94043",
            country: b"US",
        };
        let t = tracking_id(b"o1", &a);
        assert!(t[..2].iter().all(u8::is_ascii_uppercase));
        assert_eq!((t[2], t[7]), (b'-', b'-'));
        assert!(t[3..7].iter().chain(&t[8..]).all(u8::is_ascii_digit));
        assert_eq!(t, tracking_id(b"o1", &a));
        assert_ne!(t, tracking_id(b"o2", &a));
        assert_eq!(quote(&Items::default()).nanos, 0);
    }
}
