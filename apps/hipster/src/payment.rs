//! `hipster-payment`: charges a credit card (Online Boutique's payment service, which
//! validates the card with `simple-card-validator` and returns a transaction id).
//!
//! Request `op=charge&order=<id>&amount=<money>&card=<digits>&cvv=<digits>&exp_month=<m>&exp_year=<y>`;
//! response `transaction=<id>&card_type=<visa|mastercard>&last4=<digits>`. A card that fails
//! the Luhn check, is neither Visa nor MasterCard, or has expired (against [`TODAY`]; Fjord
//! functions have no clock) is a bad request, as the original's errors are.

use core::fmt::Write;
use fjord_app_kit::hash::fnv1a64_parts;
use fjord_app_kit::{Env, args};
use fjord_libos::function::FnError;
use fjord_libos::text::Writer;

use crate::money::Money;

/// The date cards' expiry is checked against: (year, month).
pub const TODAY: (u64, u64) = (2025, 6);

/// Whether `digits` (ASCII digits only) pass the Luhn check.
pub fn luhn(digits: &[u8]) -> bool {
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return false;
    }
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &c)| {
            let d = u32::from(c - b'0');
            if i % 2 == 1 {
                if d * 2 > 9 { d * 2 - 9 } else { d * 2 }
            } else {
                d
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

/// The accepted card type of a card number, by its prefix and length.
pub fn card_type(digits: &[u8]) -> Option<&'static str> {
    let prefix = |n: usize| fjord_libos::text::parse_u64(digits.get(..n)?);
    if digits.first() == Some(&b'4') && matches!(digits.len(), 13 | 16 | 19) {
        return Some("visa");
    }
    let mc = prefix(2).is_some_and(|p| (51..=55).contains(&p))
        || prefix(4).is_some_and(|p| (2221..=2720).contains(&p));
    (mc && digits.len() == 16).then_some("mastercard")
}

/// Checks a card; its type.
pub fn validate(card: &[u8], cvv: &[u8], month: u64, year: u64) -> Result<&'static str, FnError> {
    let kind = card_type(card).ok_or(FnError::BadRequest)?;
    let cvv_ok = matches!(cvv.len(), 3 | 4) && cvv.iter().all(u8::is_ascii_digit);
    let expired = year * 12 + month < TODAY.0 * 12 + TODAY.1;
    if !luhn(card) || !cvv_ok || !(1..=12).contains(&month) || expired {
        return Err(FnError::BadRequest);
    }
    Ok(kind)
}

/// Serves one `hipster-payment` request.
pub fn serve<E: Env>(_env: &mut E, req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let rec = args::record(req)?;
    if args::need(rec, "op")? != b"charge" {
        return Err(FnError::BadRequest);
    }
    let order = args::need_token(rec, "order")?;
    let amount = Money::parse(args::need(rec, "amount")?).ok_or(FnError::BadRequest)?;
    let card = args::need(rec, "card")?;
    let kind = validate(
        card,
        args::need(rec, "cvv")?,
        args::need_u64(rec, "exp_month")?,
        args::need_u64(rec, "exp_year")?,
    )?;
    let mut amount_text = [0u8; 48];
    let mut a = Writer::new(&mut amount_text);
    let _ = write!(a, "{amount}");
    let tx = fnv1a64_parts(&[order.as_bytes(), card, a.written()]);
    let mut w = Writer::new(resp);
    let _ = write!(w, "transaction={tx:016x}&card_type={kind}&last4=");
    let _ = w.bytes(&card[card.len().saturating_sub(4)..]);
    w.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn luhn_accepts_valid_numbers_only() {
        assert!(luhn(b"4432801561520454"));
        assert!(luhn(b"5555555555554444"));
        assert!(luhn(b"79927398713"));
        assert!(!luhn(b"4432801561520455"));
        assert!(!luhn(b"44328015615204a4"));
        assert!(!luhn(b""));
    }

    #[test]
    fn only_visa_and_mastercard_that_have_not_expired() {
        assert_eq!(validate(b"4432801561520454", b"672", 1, 2030), Ok("visa"));
        assert_eq!(
            validate(b"5555555555554444", b"123", 6, 2025),
            Ok("mastercard")
        );
        assert_eq!(
            validate(b"2223003122003222", b"123", 6, 2026),
            Ok("mastercard")
        );
        // American Express, expired, bad month, bad cvv, Luhn failure.
        assert!(validate(b"378282246310005", b"1234", 1, 2030).is_err());
        assert!(validate(b"4432801561520454", b"672", 5, 2025).is_err());
        assert!(validate(b"4432801561520454", b"672", 13, 2030).is_err());
        assert!(validate(b"4432801561520454", b"67", 1, 2030).is_err());
        assert!(validate(b"4432801561520455", b"672", 1, 2030).is_err());
    }
}
