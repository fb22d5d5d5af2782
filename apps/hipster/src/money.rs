//! Money as Online Boutique's `Money` (currency code, units, nanos), kept as one count of
//! nanos, and the currency rates of its currency service (euros as the base).
//!
//! Text forms: `USD:19.990000000` between functions (exact), `USD 19.99` for people.

use core::fmt;

/// Nanos per unit.
pub const NANOS: u64 = 1_000_000_000;
/// Largest amount accepted, in units.
pub const MAX_UNITS: u64 = 1_000_000_000;

/// A currency code (three upper-case letters).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Code(pub [u8; 3]);

impl Code {
    /// Parses a supported currency's code.
    pub fn parse(text: &[u8]) -> Option<Code> {
        let code = Code(text.try_into().ok()?);
        rate(code).map(|_| code)
    }

    /// The code as text.
    pub fn as_str(&self) -> &str {
        core::str::from_utf8(&self.0).unwrap_or("???")
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Units of each currency per euro, times 10 000 (Online Boutique's
/// `currency_conversion.json`).
pub const RATES: &[(&str, u64)] = &[
    ("EUR", 10_000),
    ("USD", 11_305),
    ("JPY", 1_264_000),
    ("BGN", 19_558),
    ("CZK", 255_920),
    ("DKK", 74_609),
    ("GBP", 8_597),
    ("HUF", 3_155_100),
    ("PLN", 42_996),
    ("RON", 47_463),
    ("SEK", 105_375),
    ("CHF", 11_360),
    ("ISK", 1_368_000),
    ("NOK", 98_040),
    ("HRK", 74_210),
    ("RUB", 744_208),
    ("TRY", 61_247),
    ("AUD", 16_072),
    ("BRL", 42_682),
    ("CAD", 15_128),
    ("CNY", 75_857),
    ("HKD", 88_743),
    ("IDR", 159_994_000),
    ("ILS", 40_875),
    ("INR", 794_320),
    ("KRW", 12_750_500),
    ("MXN", 217_999),
    ("MYR", 46_289),
    ("NZD", 16_679),
    ("PHP", 590_830),
    ("SGD", 15_349),
    ("THB", 360_120),
    ("ZAR", 160_583),
];

/// The rate of `code` (units per euro × 10 000).
pub fn rate(code: Code) -> Option<u64> {
    RATES
        .iter()
        .find(|(c, _)| c.as_bytes() == code.0)
        .map(|&(_, r)| r)
}

/// An amount of money.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Money {
    /// The currency.
    pub code: Code,
    /// The amount in billionths of a unit.
    pub nanos: u64,
}

impl Money {
    /// A `const` amount in US dollars: `usd(19, 99)` is $19.99.
    pub const fn usd(units: u64, cents: u64) -> Money {
        Money {
            code: Code(*b"USD"),
            nanos: units * NANOS + cents * (NANOS / 100),
        }
    }

    /// Zero in `code`.
    pub const fn zero(code: Code) -> Money {
        Money { code, nanos: 0 }
    }

    /// Parses `USD:19.99` (at most 9 decimals, at most [`MAX_UNITS`] units).
    pub fn parse(text: &[u8]) -> Option<Money> {
        let code = Code::parse(text.get(..3)?)?;
        let amount = text.get(3..)?.strip_prefix(b":")?;
        let (units, frac) = match amount.iter().position(|&c| c == b'.') {
            Some(p) => (&amount[..p], &amount[p + 1..]),
            None => (amount, &b""[..]),
        };
        let units = fjord_libos::text::parse_u64(units).filter(|&u| u <= MAX_UNITS)?;
        if frac.len() > 9 || (amount.contains(&b'.') && frac.is_empty()) {
            return None;
        }
        let mut nanos = 0;
        for i in 0..9 {
            let digit = match frac.get(i) {
                Some(c) if c.is_ascii_digit() => u64::from(c - b'0'),
                Some(_) => return None,
                None => 0,
            };
            nanos = nanos * 10 + digit;
        }
        Some(Money {
            code,
            nanos: units * NANOS + nanos,
        })
    }

    /// This amount in `to` (through euros, rounded down like Online Boutique's carry
    /// arithmetic).
    pub fn convert(self, to: Code) -> Option<Money> {
        let (from_rate, to_rate) = (rate(self.code)?, rate(to)?);
        let nanos = u128::from(self.nanos) * u128::from(to_rate) / u128::from(from_rate);
        Some(Money {
            code: to,
            nanos: u64::try_from(nanos).ok()?,
        })
    }

    /// `quantity` times this amount.
    pub fn times(self, quantity: u64) -> Option<Money> {
        Some(Money {
            nanos: self.nanos.checked_mul(quantity)?,
            ..self
        })
    }

    /// The sum of two amounts in the same currency.
    pub fn plus(self, other: Money) -> Option<Money> {
        (self.code == other.code).then_some(())?;
        Some(Money {
            nanos: self.nanos.checked_add(other.nanos)?,
            ..self
        })
    }
}

impl fmt::Display for Money {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}.{:09}",
            self.code,
            self.nanos / NANOS,
            self.nanos % NANOS
        )
    }
}

/// An amount for people: `EUR 17.68` (cents rounded down, as Online Boutique renders).
#[derive(Clone, Copy, Debug)]
pub struct Pretty(pub Money);

impl fmt::Display for Pretty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(
            f,
            "{} {}.{:02}",
            m.code,
            m.nanos / NANOS,
            m.nanos % NANOS / (NANOS / 100)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    #[test]
    fn parses_and_prints() {
        let m = Money::parse(b"USD:19.99").unwrap();
        assert_eq!(m, Money::usd(19, 99));
        assert_eq!(m.to_string(), "USD:19.990000000");
        assert_eq!(Money::parse(m.to_string().as_bytes()), Some(m));
        assert_eq!(Pretty(m).to_string(), "USD 19.99");
        for bad in [
            &b"XXX:1"[..],
            b"USD19",
            b"USD:",
            b"USD:1.",
            b"USD:1.1234567890",
            b"USD:-1",
            b"US:1",
            b"USD:1.2a",
        ] {
            assert_eq!(Money::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn converts_through_euros() {
        let eur = Code(*b"EUR");
        // $11.305 is €10.
        assert_eq!(
            Money::parse(b"USD:11.305")
                .unwrap()
                .convert(eur)
                .unwrap()
                .nanos,
            10 * NANOS
        );
        // $19.99 is €17.682441...
        let e = Money::usd(19, 99).convert(eur).unwrap();
        assert_eq!(Pretty(e).to_string(), "EUR 17.68");
        let jpy = e.convert(Code(*b"JPY")).unwrap();
        assert_eq!(jpy.nanos / NANOS, 2235);
        assert_eq!(
            Money::usd(1, 0).convert(Code(*b"USD")),
            Some(Money::usd(1, 0))
        );
        assert_eq!(Money::usd(1, 0).plus(e), None);
        assert_eq!(e.times(3).unwrap().nanos, e.nanos * 3);
    }
}
