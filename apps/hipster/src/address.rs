//! [`Address`]: a shipping address in a request's `street`, `city`, `zip` and `country`
//! fields, each form-encoded text of at most [`MAX_FIELD`] bytes.

use core::fmt;
use fjord_app_kit::{args, form};
use fjord_libos::function::FnError;

/// Longest address field, decoded.
pub const MAX_FIELD: usize = 64;

/// A shipping address (fields still form-encoded).
#[derive(Clone, Copy, Debug)]
pub struct Address<'a> {
    /// Street and number.
    pub street: &'a [u8],
    /// City.
    pub city: &'a [u8],
    /// Postal code.
    pub zip: &'a [u8],
    /// Country.
    pub country: &'a [u8],
}

impl<'a> Address<'a> {
    /// The address in `rec`.
    pub fn from_record(rec: &'a [u8]) -> Result<Address<'a>, FnError> {
        let get = |key| {
            let v = args::need(rec, key)?;
            if form::is_encoded(v, MAX_FIELD) {
                Ok(v)
            } else {
                Err(FnError::BadRequest)
            }
        };
        Ok(Address {
            street: get("street")?,
            city: get("city")?,
            zip: get("zip")?,
            country: get("country")?,
        })
    }
}

/// Writes the address as request fields, `street=..&city=..&zip=..&country=..`.
impl fmt::Display for Address<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fields = [
            ("street=", self.street),
            ("&city=", self.city),
            ("&zip=", self.zip),
            ("&country=", self.country),
        ];
        for (key, value) in fields {
            f.write_str(key)?;
            f.write_str(core::str::from_utf8(value).map_err(|_| fmt::Error)?)?;
        }
        Ok(())
    }
}
