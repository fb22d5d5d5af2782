//! Request validation: every workload function takes one `k1=v1&k2=v2` record, checks it with
//! [`record`], and reads its fields with the accessors here, which answer
//! [`FnError::BadRequest`] for anything missing or malformed.

use fjord_libos::function::FnError;
use fjord_libos::text::{field, parse_u64};

/// Longest request record a workload function accepts.
pub const MAX_RECORD: usize = 3072;
/// Longest token (user name, product id, ...).
pub const MAX_TOKEN: usize = 64;

/// The request as one record: non-empty, at most [`MAX_RECORD`] bytes, printable ASCII or
/// UTF-8 text without control characters (one trailing newline is dropped).
pub fn record(req: &[u8]) -> Result<&[u8], FnError> {
    let rec = req.strip_suffix(b"\n").unwrap_or(req);
    let printable = rec.iter().all(|&b| b >= 0x20 && b != 0x7f);
    if rec.is_empty() || rec.len() > MAX_RECORD || !printable {
        return Err(FnError::BadRequest);
    }
    core::str::from_utf8(rec).map_err(|_| FnError::BadRequest)?;
    Ok(rec)
}

/// The non-empty value of `key`.
pub fn need<'a>(rec: &'a [u8], key: &str) -> Result<&'a [u8], FnError> {
    match field(rec, key) {
        Some(v) if !v.is_empty() => Ok(v),
        _ => Err(FnError::BadRequest),
    }
}

/// The value of `key` as text.
pub fn need_str<'a>(rec: &'a [u8], key: &str) -> Result<&'a str, FnError> {
    core::str::from_utf8(need(rec, key)?).map_err(|_| FnError::BadRequest)
}

/// The value of `key` as a decimal number.
pub fn need_u64(rec: &[u8], key: &str) -> Result<u64, FnError> {
    parse_u64(need(rec, key)?).ok_or(FnError::BadRequest)
}

/// The value of `key` as a number in `range`.
pub fn need_in(
    rec: &[u8],
    key: &str,
    range: core::ops::RangeInclusive<u64>,
) -> Result<u64, FnError> {
    let v = need_u64(rec, key)?;
    if range.contains(&v) {
        Ok(v)
    } else {
        Err(FnError::BadRequest)
    }
}

/// The value of `key` as a [token](is_token).
pub fn need_token<'a>(rec: &'a [u8], key: &str) -> Result<&'a str, FnError> {
    let v = need(rec, key)?;
    token(v)
}

/// `v` as a [token](is_token).
pub fn token(v: &[u8]) -> Result<&str, FnError> {
    if is_token(v) {
        core::str::from_utf8(v).map_err(|_| FnError::BadRequest)
    } else {
        Err(FnError::BadRequest)
    }
}

/// The value of `key` if present, as a number (present but malformed is an error).
pub fn opt_u64(rec: &[u8], key: &str) -> Result<Option<u64>, FnError> {
    match field(rec, key) {
        None => Ok(None),
        Some(v) => parse_u64(v).map(Some).ok_or(FnError::BadRequest),
    }
}

/// Whether `v` is a token: 1 to [`MAX_TOKEN`] bytes of `[A-Za-z0-9_.-]`, safe to embed in
/// keys, records and comma-separated lists.
pub fn is_token(v: &[u8]) -> bool {
    !v.is_empty()
        && v.len() <= MAX_TOKEN
        && v.iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// The comma-separated items of a list value (an empty value has none).
pub fn items(v: &[u8]) -> impl Iterator<Item = &[u8]> {
    v.split(|&b| b == b',').filter(|i| !i.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_checked() {
        assert_eq!(record(b"a=1\n"), Ok(&b"a=1"[..]));
        assert!(record(b"").is_err());
        assert!(record(b"a=1\nb=2").is_err());
        assert!(record(&[b'a'; MAX_RECORD + 1]).is_err());
        assert!(record(b"a=\xff").is_err());
    }

    #[test]
    fn fields_are_checked() {
        let r = b"op=x&n=42&name=bob_1&bad=a b&empty=";
        assert_eq!(need(r, "op"), Ok(&b"x"[..]));
        assert_eq!(need(r, "empty"), Err(FnError::BadRequest));
        assert_eq!(need_u64(r, "n"), Ok(42));
        assert_eq!(need_in(r, "n", 0..=10), Err(FnError::BadRequest));
        assert_eq!(need_token(r, "name"), Ok("bob_1"));
        assert_eq!(need_token(r, "bad"), Err(FnError::BadRequest));
        assert_eq!(opt_u64(r, "none"), Ok(None));
        assert_eq!(opt_u64(r, "name"), Err(FnError::BadRequest));
        assert_eq!(items(b"a,,b").count(), 2);
    }
}
