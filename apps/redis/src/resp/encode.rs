//! RESP2 replies: the [`Reply`] value commands return and the encoders that write the wire
//! form (`+OK\r\n`, `-ERR ...\r\n`, `:1\r\n`, `$3\r\nfoo\r\n`, `$-1\r\n`, `*2\r\n...`,
//! `*-1\r\n`).

use crate::num::push_i64;
use alloc::borrow::Cow;
use alloc::vec::Vec;

/// One reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// A simple string (`+OK`).
    Status(&'static str),
    /// An error: its text after the `-` (`ERR syntax error`); CR and LF in it are sent as
    /// spaces, as Redis does.
    Error(Cow<'static, [u8]>),
    /// An integer (`:1`).
    Integer(i64),
    /// A bulk string (`$3\r\nfoo`).
    Bulk(Vec<u8>),
    /// The null bulk string (`$-1`).
    NullBulk,
    /// An array.
    Array(Vec<Reply>),
    /// The null array (`*-1`).
    NullArray,
}

impl Reply {
    /// `+OK`.
    pub const OK: Reply = Reply::Status("OK");

    /// An error with a fixed text (`"ERR syntax error"`).
    pub const fn error(text: &'static str) -> Reply {
        Reply::Error(Cow::Borrowed(text.as_bytes()))
    }

    /// An error with a text built at run time.
    pub fn error_owned(text: Vec<u8>) -> Reply {
        Reply::Error(Cow::Owned(text))
    }

    /// A bulk string copied from `data`.
    pub fn bulk(data: &[u8]) -> Reply {
        Reply::Bulk(data.to_vec())
    }

    /// Whether it is an error.
    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }

    /// Appends its wire form to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Reply::Status(s) => write_status(out, s.as_bytes()),
            Reply::Error(e) => write_error(out, e),
            Reply::Integer(n) => write_integer(out, *n),
            Reply::Bulk(b) => write_bulk(out, b),
            Reply::NullBulk => write_null_bulk(out),
            Reply::Array(items) => {
                write_array_len(out, items.len());
                for item in items {
                    item.encode(out);
                }
            }
            Reply::NullArray => write_null_array(out),
        }
    }

    /// Its wire form.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }
}

/// Writes a simple string (`+text\r\n`); CR and LF in `text` become spaces.
pub fn write_status(out: &mut Vec<u8>, text: &[u8]) {
    out.push(b'+');
    push_line(out, text);
}

/// Writes an error (`-text\r\n`); CR and LF in `text` become spaces.
pub fn write_error(out: &mut Vec<u8>, text: &[u8]) {
    out.push(b'-');
    push_line(out, text);
}

fn push_line(out: &mut Vec<u8>, text: &[u8]) {
    out.extend(
        text.iter()
            .map(|&c| if c == b'\r' || c == b'\n' { b' ' } else { c }),
    );
    out.extend_from_slice(b"\r\n");
}

/// Writes an integer (`:n\r\n`).
pub fn write_integer(out: &mut Vec<u8>, n: i64) {
    out.push(b':');
    push_i64(out, n);
    out.extend_from_slice(b"\r\n");
}

/// Writes a bulk string (`$len\r\ndata\r\n`).
pub fn write_bulk(out: &mut Vec<u8>, data: &[u8]) {
    out.reserve(data.len() + 16);
    out.push(b'$');
    push_i64(out, data.len() as i64);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// Writes the null bulk string (`$-1\r\n`).
pub fn write_null_bulk(out: &mut Vec<u8>) {
    out.extend_from_slice(b"$-1\r\n");
}

/// Writes an array header (`*len\r\n`); the caller writes the `len` items.
pub fn write_array_len(out: &mut Vec<u8>, len: usize) {
    out.push(b'*');
    push_i64(out, len as i64);
    out.extend_from_slice(b"\r\n");
}

/// Writes the null array (`*-1\r\n`).
pub fn write_null_array(out: &mut Vec<u8>) {
    out.extend_from_slice(b"*-1\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn wire_forms() {
        assert_eq!(Reply::OK.to_bytes(), b"+OK\r\n");
        assert_eq!(
            Reply::error("ERR syntax error").to_bytes(),
            b"-ERR syntax error\r\n"
        );
        assert_eq!(
            Reply::error_owned(b"ERR a\r\nb".to_vec()).to_bytes(),
            b"-ERR a  b\r\n"
        );
        assert_eq!(Reply::Integer(-42).to_bytes(), b":-42\r\n");
        assert_eq!(Reply::bulk(b"foo").to_bytes(), b"$3\r\nfoo\r\n");
        assert_eq!(Reply::bulk(b"").to_bytes(), b"$0\r\n\r\n");
        assert_eq!(Reply::NullBulk.to_bytes(), b"$-1\r\n");
        assert_eq!(Reply::NullArray.to_bytes(), b"*-1\r\n");
        assert_eq!(
            Reply::Array(vec![
                Reply::bulk(b"a"),
                Reply::NullBulk,
                Reply::Integer(1),
                Reply::Array(vec![])
            ])
            .to_bytes(),
            b"*4\r\n$1\r\na\r\n$-1\r\n:1\r\n*0\r\n"
        );
        assert!(Reply::error("ERR").is_error());
        assert!(!Reply::OK.is_error());
    }
}
