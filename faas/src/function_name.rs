//! Validated function names, shared by the router, the manifest and the gateway's service.

use alloc::string::String;
use core::fmt;

/// Longest accepted function name, in bytes.
pub const MAX_FUNCTION_NAME_LEN: usize = 64;

/// A function name: 1 to 64 bytes from `[a-z0-9_-]`.
///
/// The restricted alphabet means a name never needs escaping in a URL path, a Prometheus label
/// or a manifest line.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FunctionName(String);

/// Why a string is not a valid [`FunctionName`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameError {
    /// The name is empty.
    Empty,
    /// The name is longer than [`MAX_FUNCTION_NAME_LEN`] bytes.
    TooLong,
    /// The name contains a byte outside `[a-z0-9_-]`.
    InvalidByte,
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NameError::Empty => "function name is empty",
            NameError::TooLong => "function name is longer than 64 bytes",
            NameError::InvalidByte => "function name may only contain [a-z0-9_-]",
        })
    }
}

impl FunctionName {
    /// Checks `name` against `[a-z0-9_-]{1,64}` and wraps it.
    pub fn new(name: &str) -> Result<Self, NameError> {
        validate(name)?;
        Ok(FunctionName(String::from(name)))
    }

    /// The name as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Checks `name` against `[a-z0-9_-]{1,64}` without allocating.
pub fn validate(name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > MAX_FUNCTION_NAME_LEN {
        return Err(NameError::TooLong);
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
    {
        return Err(NameError::InvalidByte);
    }
    Ok(())
}

impl fmt::Display for FunctionName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Lets maps keyed by `FunctionName` be searched with a `&str` (ordering and hashing agree with
/// `str`'s, since the name is a plain `String`).
impl core::borrow::Borrow<str> for FunctionName {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for FunctionName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_valid_names() {
        for n in ["a", "hello", "img-resize_2", "0", &"x".repeat(64)] {
            assert_eq!(FunctionName::new(n).unwrap().as_str(), n);
        }
    }

    #[test]
    fn rejects_invalid_names() {
        assert_eq!(FunctionName::new(""), Err(NameError::Empty));
        assert_eq!(FunctionName::new(&"x".repeat(65)), Err(NameError::TooLong));
        for n in ["Hello", "a b", "a/b", "a.b", "é", "a%41", "a\n"] {
            assert_eq!(FunctionName::new(n), Err(NameError::InvalidByte), "{n:?}");
        }
    }
}
