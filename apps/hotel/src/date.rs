//! Calendar dates `YYYY-MM-DD` as day numbers (days since 1970-01-01), for stays and rate
//! plan validity.

use core::fmt;

/// A date as its day number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Date(pub i64);

impl Date {
    /// The date `y-m-d` (proleptic Gregorian; `m` 1..=12, `d` 1..=31 unchecked).
    pub const fn ymd(y: i64, m: i64, d: i64) -> Date {
        // Howard Hinnant's days_from_civil.
        let y = if m <= 2 { y - 1 } else { y };
        let era = if y >= 0 { y } else { y - 399 } / 400;
        let yoe = y - era * 400;
        let mp = (m + 9) % 12;
        let doy = (153 * mp + 2) / 5 + d - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        Date(era * 146_097 + doe - 719_468)
    }

    /// Parses `YYYY-MM-DD` with a year in 2000..=2099 and a day that exists in its month.
    pub fn parse(text: &[u8]) -> Option<Date> {
        let [y0, y1, y2, y3, b'-', m0, m1, b'-', d0, d1] = *text else {
            return None;
        };
        let num = |ds: &[u8]| -> Option<i64> {
            ds.iter().try_fold(0i64, |a, &c| {
                c.is_ascii_digit().then(|| a * 10 + i64::from(c - b'0'))
            })
        };
        let (y, m, d) = (num(&[y0, y1, y2, y3])?, num(&[m0, m1])?, num(&[d0, d1])?);
        let date = Date::ymd(y, m, d);
        ((2000..=2099).contains(&y)
            && (1..=12).contains(&m)
            && d >= 1
            && date.to_ymd() == (y, m, d))
            .then_some(date)
    }

    /// The date's year, month and day.
    pub const fn to_ymd(self) -> (i64, i64, i64) {
        // Howard Hinnant's civil_from_days.
        let z = self.0 + 719_468;
        let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let d = doy - (153 * mp + 2) / 5 + 1;
        let m = if mp < 10 { mp + 3 } else { mp - 9 };
        (yoe + era * 400 + if m <= 2 { 1 } else { 0 }, m, d)
    }
}

impl fmt::Display for Date {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (y, m, d) = self.to_ymd();
        write!(f, "{y:04}-{m:02}-{d:02}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    #[test]
    fn round_trips_and_rejects() {
        assert_eq!(Date::ymd(1970, 1, 1), Date(0));
        assert_eq!(Date::ymd(2015, 4, 10).0 - Date::ymd(2015, 4, 9).0, 1);
        assert_eq!(Date::ymd(2016, 3, 1).0 - Date::ymd(2016, 2, 28).0, 2);
        let d = Date::parse(b"2015-04-09").unwrap();
        assert_eq!(d.to_string(), "2015-04-09");
        for bad in [
            &b"2015-02-29"[..],
            b"2015-13-01",
            b"1999-01-01",
            b"2015-4-09",
            b"2015-04-00",
        ] {
            assert_eq!(Date::parse(bad), None, "{bad:?}");
        }
        assert!(Date::parse(b"2016-02-29").is_some());
    }
}

/// Longest stay a request may ask for, in nights.
pub const MAX_NIGHTS: i64 = 14;

/// A stay: check-in and check-out dates, `in < out`, at most [`MAX_NIGHTS`] nights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stay {
    /// Check-in (the first night).
    pub check_in: Date,
    /// Check-out (the day after the last night).
    pub check_out: Date,
}

impl Stay {
    /// The stay in the `in` and `out` fields of a request.
    pub fn from_record(rec: &[u8]) -> Result<Stay, fjord_libos::function::FnError> {
        use fjord_libos::function::FnError::BadRequest;
        let date = |key| {
            fjord_libos::text::field(rec, key)
                .and_then(Date::parse)
                .ok_or(BadRequest)
        };
        let (check_in, check_out) = (date("in")?, date("out")?);
        let nights = check_out.0 - check_in.0;
        if !(1..=MAX_NIGHTS).contains(&nights) {
            return Err(BadRequest);
        }
        Ok(Stay {
            check_in,
            check_out,
        })
    }

    /// The nights of the stay.
    pub fn nights(&self) -> impl Iterator<Item = Date> {
        (self.check_in.0..self.check_out.0).map(Date)
    }
}

impl fmt::Display for Stay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "in={}&out={}", self.check_in, self.check_out)
    }
}
