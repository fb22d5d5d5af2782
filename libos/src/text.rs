//! Formatting into and parsing out of fixed byte buffers, for functions without a heap.
//!
//! The workloads exchange small text messages: one record per line, fields as `key=value`
//! separated by `&`, as in a URL query (`user=42&hotel=7`). [`Writer`] formats into a response
//! or request region; [`field`] and [`fields`] read such records.

use core::fmt;

/// Writes formatted text into a byte slice; writing past its end fails and keeps what fit.
pub struct Writer<'a> {
    buf: &'a mut [u8],
    len: usize,
    overflowed: bool,
}

impl<'a> Writer<'a> {
    /// A writer filling `buf` from its start.
    pub fn new(buf: &'a mut [u8]) -> Self {
        Writer {
            buf,
            len: 0,
            overflowed: false,
        }
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether some write did not fit.
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// The bytes written so far.
    pub fn written(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// Appends raw bytes; `Err` (and nothing written) when they do not fit.
    pub fn bytes(&mut self, b: &[u8]) -> Result<(), fmt::Error> {
        match self.buf.get_mut(self.len..self.len + b.len()) {
            Some(dst) => {
                dst.copy_from_slice(b);
                self.len += b.len();
                Ok(())
            }
            None => {
                self.overflowed = true;
                Err(fmt::Error)
            }
        }
    }

    /// The length written, or `Err(FnError::ResponseTooLarge)` if anything did not fit.
    pub fn finish(&self) -> Result<usize, crate::function::FnError> {
        if self.overflowed {
            Err(crate::function::FnError::ResponseTooLarge)
        } else {
            Ok(self.len)
        }
    }
}

impl fmt::Write for Writer<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.bytes(s.as_bytes())
    }
}

/// The `key=value` pairs of a record `k1=v1&k2=v2` (a trailing newline is ignored).
pub fn fields(record: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    let record = record.strip_suffix(b"\n").unwrap_or(record);
    record.split(|&b| b == b'&').filter_map(|kv| {
        let eq = kv.iter().position(|&b| b == b'=')?;
        Some((&kv[..eq], &kv[eq + 1..]))
    })
}

/// The value of `key` in the record `k1=v1&k2=v2`.
pub fn field<'a>(record: &'a [u8], key: &str) -> Option<&'a [u8]> {
    fields(record)
        .find(|(k, _)| *k == key.as_bytes())
        .map(|(_, v)| v)
}

/// A decimal unsigned number (at most 19 digits, no sign or spaces).
pub fn parse_u64(text: &[u8]) -> Option<u64> {
    if text.is_empty() || text.len() > 19 {
        return None;
    }
    text.iter().try_fold(0u64, |acc, &c| {
        c.is_ascii_digit().then(|| acc * 10 + u64::from(c - b'0'))
    })
}

/// A decimal number field of a record.
pub fn field_u64(record: &[u8], key: &str) -> Option<u64> {
    field(record, key).and_then(parse_u64)
}

/// The lines of `text`, without their newlines, skipping empty ones.
pub fn lines(text: &[u8]) -> impl Iterator<Item = &[u8]> {
    text.split(|&b| b == b'\n').filter(|l| !l.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::fmt::Write;

    #[test]
    fn writer_formats_and_reports_overflow() {
        let mut buf = [0u8; 8];
        let mut w = Writer::new(&mut buf);
        write!(w, "a={}", 12).unwrap();
        assert_eq!(w.written(), b"a=12");
        assert_eq!(w.finish(), Ok(4));
        assert!(write!(w, "&b=12345").is_err());
        assert!(w.overflowed());
        assert!(w.finish().is_err());
    }

    #[test]
    fn fields_parse() {
        let r = b"user=42&hotel=7&name=x=y\n";
        assert_eq!(field(r, "user"), Some(&b"42"[..]));
        assert_eq!(field_u64(r, "hotel"), Some(7));
        assert_eq!(field(r, "name"), Some(&b"x=y"[..]));
        assert_eq!(field(r, "none"), None);
        assert_eq!(parse_u64(b"12a"), None);
        assert_eq!(parse_u64(b""), None);
        assert_eq!(parse_u64(b"99999999999999999999"), None);
        assert_eq!(lines(b"a\n\nb\n").count(), 2);
    }
}
