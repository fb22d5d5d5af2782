//! The incremental request parser: what Redis's `processMultibulkBuffer` and
//! `processInlineBuffer` (`networking.c`, 7.0.15) accept, with the same error replies.
//!
//! A request whose first byte is `*` is a multibulk: `*<count>\r\n`, then `count` times
//! `$<len>\r\n<len bytes>\r\n`. Anything else is an inline command: one line, ended by `\n`
//! (a `\r` before it is dropped), split by [`split_args`]. Counts and lengths follow Redis's
//! `string2ll` (no sign but `-`, no leading zeros). As in Redis, a count of 0 or less and an
//! empty inline line are skipped, and the two bytes after a bulk's data are skipped without
//! being checked.
//!
//! The parser keeps its state between calls ([`RequestParser::advance`]) and consumes bulk
//! data as it arrives, so a large argument is copied once, into its own buffer, and the
//! caller's input buffer holds at most a header line or an inline request.
//!
//! Limits: Redis's `proto-max-bulk-len` is 512 MiB; here a bulk is at most [`MAX_BULK`]
//! (16 MiB) and a longer one gets Redis's `invalid bulk length` error. The count of a
//! multibulk is at most [`MAX_MULTIBULK`] (Redis 7.0 allows up to `INT_MAX`; older versions
//! had this 1 Mi limit), more is `invalid multibulk length`. One request may hold at most
//! [`QUERY_BUFFER_LIMIT`] bytes of arguments (Redis's `client-query-buffer-limit` is 1 GiB);
//! past that, as Redis does past its limit, the connection is closed without a reply.

use super::inline::split_args;
use crate::num::parse_i64;
use alloc::vec::Vec;

/// The longest bulk argument accepted (16 MiB; Redis's default is 512 MiB).
pub const MAX_BULK: usize = 16 << 20;
/// The most arguments one multibulk request may announce.
pub const MAX_MULTIBULK: i64 = 1024 * 1024;
/// The longest inline request, and the longest count line, kept while waiting for its end
/// (Redis's `PROTO_INLINE_MAX_SIZE`, 64 KiB).
pub const MAX_INLINE: usize = 64 * 1024;
/// The most bytes of arguments one request may hold (each argument counted with
/// [`ARG_OVERHEAD`] more).
pub const QUERY_BUFFER_LIMIT: usize = 2 * MAX_BULK + 64 * 1024;
/// What one argument costs beyond its bytes, for [`QUERY_BUFFER_LIMIT`].
pub const ARG_OVERHEAD: usize = 32;

/// Why a request cannot be parsed. After any of them the server replies (if
/// [`ProtocolError::reply`] says so) and closes the connection, as Redis does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProtocolError {
    /// The `*` line is not a number, or is above [`MAX_MULTIBULK`].
    InvalidMultibulkLength,
    /// The `$` line is not a number, is negative, or is above [`MAX_BULK`].
    InvalidBulkLength,
    /// An argument does not start with `$` (the byte it starts with).
    ExpectedDollar(u8),
    /// No end of line within [`MAX_INLINE`] bytes of an inline request.
    TooBigInline,
    /// No `\r` within [`MAX_INLINE`] bytes of a `*` line.
    TooBigMultibulkCount,
    /// No `\r` within [`MAX_INLINE`] bytes of a `$` line.
    TooBigBulkCount,
    /// An inline request with unbalanced quotes.
    UnbalancedQuotes,
    /// Not from Redis's parser: the request holds more than [`QUERY_BUFFER_LIMIT`] bytes.
    QueryBufferLimit,
    /// Not from Redis's parser: the heap had no room for an argument.
    OutOfMemory,
}

impl ProtocolError {
    /// The error reply Redis sends (the text after `-`, before CRLF), or `None` when the
    /// connection is closed without one.
    pub fn reply(&self) -> Option<Vec<u8>> {
        let text: &[u8] = match self {
            ProtocolError::InvalidMultibulkLength => b"invalid multibulk length",
            ProtocolError::InvalidBulkLength => b"invalid bulk length",
            ProtocolError::ExpectedDollar(c) => {
                let mut v = b"ERR Protocol error: expected '$', got '".to_vec();
                v.push(*c);
                v.push(b'\'');
                return Some(v);
            }
            ProtocolError::TooBigInline => b"too big inline request",
            ProtocolError::TooBigMultibulkCount => b"too big mbulk count string",
            ProtocolError::TooBigBulkCount => b"too big bulk count string",
            ProtocolError::UnbalancedQuotes => b"unbalanced quotes in request",
            ProtocolError::QueryBufferLimit | ProtocolError::OutOfMemory => return None,
        };
        let mut v = b"ERR Protocol error: ".to_vec();
        v.extend_from_slice(text);
        Some(v)
    }
}

/// A bulk argument being read.
#[derive(Debug)]
struct Bulk {
    /// Its announced length.
    len: usize,
    /// Its bytes so far.
    data: Vec<u8>,
    /// Bytes of its terminator still to skip.
    terminator: usize,
}

/// A request's arguments, the command name first.
pub type Request = Vec<Vec<u8>>;

/// What a call to [`RequestParser::advance`] produced besides the bytes it consumed.
pub type Step = Result<Option<Request>, ProtocolError>;

/// The parser of one connection's requests, keeping a multibulk request's state between
/// reads.
#[derive(Debug, Default)]
pub struct RequestParser {
    /// Arguments of the current multibulk still to read (0: between requests).
    remaining: usize,
    /// The argument being read.
    bulk: Option<Bulk>,
    /// The arguments read so far.
    args: Vec<Vec<u8>>,
    /// Bytes the arguments hold, each counted with [`ARG_OVERHEAD`] more.
    held: usize,
}

fn find(haystack: &[u8], byte: u8) -> Option<usize> {
    haystack.iter().position(|&c| c == byte)
}

/// Makes room in `v` for `additional` more bytes, growing geometrically but never beyond
/// `cap` (the argument's announced length).
fn grow(v: &mut Vec<u8>, additional: usize, cap: usize) -> Result<(), ProtocolError> {
    let need = v.len() + additional;
    if need <= v.capacity() {
        return Ok(());
    }
    let target = need
        .max(v.capacity().saturating_mul(2))
        .max(4096)
        .min(cap.max(need));
    v.try_reserve_exact(target - v.len())
        .map_err(|_| ProtocolError::OutOfMemory)
}

impl RequestParser {
    /// A parser between requests.
    pub fn new() -> RequestParser {
        RequestParser::default()
    }

    /// Whether it holds part of a request.
    pub fn in_request(&self) -> bool {
        self.remaining > 0
    }

    /// Bytes of arguments it holds (each counted with [`ARG_OVERHEAD`] more).
    pub fn held_bytes(&self) -> usize {
        self.held + self.bulk.as_ref().map_or(0, |b| b.data.capacity())
    }

    /// Parses from `buf`, the bytes not consumed by earlier calls: returns how many bytes
    /// it consumed and a complete request's arguments, `None` when it needs more bytes, or
    /// an error. After an error the parser's state is unspecified (the connection closes).
    pub fn advance(&mut self, buf: &[u8]) -> (usize, Step) {
        let mut pos = 0;
        let step = self.step(buf, &mut pos);
        (pos, step)
    }

    fn step(&mut self, buf: &[u8], pos: &mut usize) -> Step {
        while self.remaining == 0 {
            let rest = &buf[*pos..];
            let Some(&first) = rest.first() else {
                return Ok(None);
            };
            if first != b'*' {
                let Some(nl) = find(rest, b'\n') else {
                    return if rest.len() > MAX_INLINE {
                        Err(ProtocolError::TooBigInline)
                    } else {
                        Ok(None)
                    };
                };
                let end = if nl > 0 && rest[nl - 1] == b'\r' {
                    nl - 1
                } else {
                    nl
                };
                let args = split_args(&rest[..end]).ok_or(ProtocolError::UnbalancedQuotes)?;
                *pos += nl + 1;
                if args.is_empty() {
                    continue;
                }
                return Ok(Some(args));
            }
            let Some(cr) = find(rest, b'\r') else {
                return if rest.len() > MAX_INLINE {
                    Err(ProtocolError::TooBigMultibulkCount)
                } else {
                    Ok(None)
                };
            };
            if cr + 2 > rest.len() {
                return Ok(None);
            }
            let count = parse_i64(&rest[1..cr])
                .filter(|&n| n <= MAX_MULTIBULK)
                .ok_or(ProtocolError::InvalidMultibulkLength)?;
            *pos += cr + 2;
            if count <= 0 {
                continue;
            }
            self.remaining = count as usize;
            self.args = Vec::new();
            self.args
                .try_reserve_exact(self.remaining.min(1024))
                .map_err(|_| ProtocolError::OutOfMemory)?;
            self.held = 0;
        }
        while self.remaining > 0 {
            if self.bulk.is_none() {
                let rest = &buf[*pos..];
                let Some(cr) = find(rest, b'\r') else {
                    return if rest.len() > MAX_INLINE {
                        Err(ProtocolError::TooBigBulkCount)
                    } else {
                        Ok(None)
                    };
                };
                if cr + 2 > rest.len() {
                    return Ok(None);
                }
                if rest[0] != b'$' {
                    return Err(ProtocolError::ExpectedDollar(rest[0]));
                }
                let len = parse_i64(&rest[1..cr])
                    .and_then(|n| usize::try_from(n).ok())
                    .filter(|&n| n <= MAX_BULK)
                    .ok_or(ProtocolError::InvalidBulkLength)?;
                if self.held + len + ARG_OVERHEAD > QUERY_BUFFER_LIMIT {
                    return Err(ProtocolError::QueryBufferLimit);
                }
                *pos += cr + 2;
                self.bulk = Some(Bulk {
                    len,
                    data: Vec::new(),
                    terminator: 2,
                });
            }
            let Some(bulk) = self.bulk.as_mut() else {
                continue;
            };
            let rest = &buf[*pos..];
            let take = (bulk.len - bulk.data.len()).min(rest.len());
            if take > 0 {
                grow(&mut bulk.data, take, bulk.len)?;
                bulk.data.extend_from_slice(&rest[..take]);
                *pos += take;
            }
            if bulk.data.len() < bulk.len {
                return Ok(None);
            }
            let skip = bulk.terminator.min(buf.len() - *pos);
            *pos += skip;
            bulk.terminator -= skip;
            if bulk.terminator > 0 {
                return Ok(None);
            }
            let data = core::mem::take(&mut bulk.data);
            self.bulk = None;
            self.held += data.len() + ARG_OVERHEAD;
            self.args
                .try_reserve(1)
                .map_err(|_| ProtocolError::OutOfMemory)?;
            self.args.push(data);
            self.remaining -= 1;
        }
        self.held = 0;
        Ok(Some(core::mem::take(&mut self.args)))
    }
}

/// Parses one request from the start of `buf`: its arguments and the bytes it took,
/// `Ok(None)` when `buf` ends before the request does, or the protocol error.
pub fn parse(buf: &[u8]) -> Result<Option<(Request, usize)>, ProtocolError> {
    let mut parser = RequestParser::new();
    match parser.advance(buf) {
        (consumed, Ok(Some(args))) => Ok(Some((args, consumed))),
        (_, Ok(None)) => Ok(None),
        (_, Err(e)) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    fn args(list: &[&[u8]]) -> Vec<Vec<u8>> {
        list.iter().map(|a| a.to_vec()).collect()
    }

    #[test]
    fn multibulk_and_inline() {
        let req = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n";
        assert_eq!(
            parse(req),
            Ok(Some((args(&[b"SET", b"k", b"hello"]), req.len())))
        );
        assert_eq!(parse(b"PING\r\n"), Ok(Some((args(&[b"PING"]), 6))));
        assert_eq!(parse(b"PING\n"), Ok(Some((args(&[b"PING"]), 5))));
        assert_eq!(
            parse(b"set a  b\r\nGET a\r\n"),
            Ok(Some((args(&[b"set", b"a", b"b"]), 10)))
        );
        assert_eq!(parse(b"*1\r\n$0\r\n\r\n"), Ok(Some((vec![Vec::new()], 10))));
        // Empty requests are skipped.
        assert_eq!(
            parse(b"\r\n\n*0\r\n*-1\r\nPING\r\n"),
            Ok(Some((args(&[b"PING"]), 18)))
        );
        // Binary-safe.
        let req = b"*2\r\n$3\r\nGET\r\n$4\r\n\r\n\0\xff\r\n";
        assert_eq!(
            parse(req),
            Ok(Some((args(&[b"GET", b"\r\n\0\xff"]), req.len())))
        );
    }

    #[test]
    fn incomplete_requests_wait() {
        for partial in [
            &b""[..],
            b"PING",
            b"PING\r",
            b"*",
            b"*2",
            b"*2\r",
            b"*2\r\n",
            b"*2\r\n$3",
            b"*2\r\n$3\r",
            b"*2\r\n$3\r\nGET",
            b"*2\r\n$3\r\nGET\r",
            b"*2\r\n$3\r\nGET\r\n$1\r\nk\r",
        ] {
            assert_eq!(
                parse(partial),
                Ok(None),
                "{:?}",
                core::str::from_utf8(partial)
            );
        }
    }

    #[test]
    fn redis_error_messages() {
        let err = |b: &[u8]| parse(b).unwrap_err().reply().unwrap();
        assert_eq!(
            err(b"*x\r\n"),
            b"ERR Protocol error: invalid multibulk length"
        );
        assert_eq!(
            err(b"*+1\r\n"),
            b"ERR Protocol error: invalid multibulk length"
        );
        assert_eq!(
            err(b"*1048577\r\n"),
            b"ERR Protocol error: invalid multibulk length"
        );
        assert_eq!(
            err(b"*1\r\n$-1\r\n"),
            b"ERR Protocol error: invalid bulk length"
        );
        assert_eq!(
            err(b"*1\r\n$01\r\n"),
            b"ERR Protocol error: invalid bulk length"
        );
        assert_eq!(
            err(b"*1\r\n$16777217\r\n"),
            b"ERR Protocol error: invalid bulk length"
        );
        assert_eq!(
            err(b"*1\r\nfoo\r\n"),
            b"ERR Protocol error: expected '$', got 'f'"
        );
        assert_eq!(
            err(b"\"abc\r\n"),
            b"ERR Protocol error: unbalanced quotes in request"
        );
        assert_eq!(
            err(&vec![b'a'; MAX_INLINE + 1]),
            b"ERR Protocol error: too big inline request"
        );
        let mut long = b"*".to_vec();
        long.resize(MAX_INLINE + 2, b'1');
        assert_eq!(
            err(&long),
            b"ERR Protocol error: too big mbulk count string"
        );
        let mut long = b"*1\r\n$".to_vec();
        long.resize(MAX_INLINE + 10, b'1');
        assert_eq!(err(&long), b"ERR Protocol error: too big bulk count string");
        // A bulk of exactly the limit is fine (only its header is parsed here).
        assert_eq!(parse(b"*1\r\n$16777216\r\nab"), Ok(None));
    }

    #[test]
    fn the_parser_keeps_state_between_calls() {
        let req = b"*2\r\n$3\r\nGET\r\n$10\r\n0123456789\r\n";
        let mut p = RequestParser::new();
        let (n, r) = p.advance(&req[..20]);
        assert_eq!(r, Ok(None));
        assert!(p.in_request());
        // Consumed the header lines and the start of the bulk.
        assert_eq!(n, 20);
        let (m, r) = p.advance(&req[20..]);
        assert_eq!(r, Ok(Some(args(&[b"GET", b"0123456789"]))));
        assert_eq!(n + m, req.len());
        assert!(!p.in_request());
    }

    #[test]
    fn a_huge_argument_count_holds_nothing_up_front() {
        let mut p = RequestParser::new();
        let (n, r) = p.advance(b"*1048576\r\n");
        assert_eq!((n, r), (10, Ok(None)));
        assert!(p.args.capacity() <= 1024);
    }

    #[test]
    fn the_query_buffer_limit_closes_without_reply() {
        let mut p = RequestParser::new();
        let mut req = b"*3\r\n".to_vec();
        for _ in 0..2 {
            req.extend_from_slice(b"$16777216\r\n");
            req.extend_from_slice(&vec![b'x'; MAX_BULK]);
            req.extend_from_slice(b"\r\n");
        }
        req.extend_from_slice(b"$16777216\r\n");
        let (_, r) = p.advance(&req);
        assert_eq!(r, Err(ProtocolError::QueryBufferLimit));
        assert_eq!(ProtocolError::QueryBufferLimit.reply(), None);
    }

    fn encode_request(a: &[Vec<u8>]) -> Vec<u8> {
        let mut out = alloc::format!("*{}\r\n", a.len()).into_bytes();
        for arg in a {
            out.extend_from_slice(alloc::format!("${}\r\n", arg.len()).as_bytes());
            out.extend_from_slice(arg);
            out.extend_from_slice(b"\r\n");
        }
        out
    }

    proptest::proptest! {
        #[test]
        fn any_split_gives_the_same_requests(
            reqs in proptest::collection::vec(
                proptest::collection::vec(proptest::collection::vec(proptest::num::u8::ANY, 0..20), 1..5),
                1..4),
            cuts in proptest::collection::vec(0usize..200, 0..6),
        ) {
            let mut stream = Vec::new();
            for r in &reqs {
                stream.extend_from_slice(&encode_request(r));
            }
            stream.extend_from_slice(b"PING x\r\n");
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (stream.len() + 1)).collect();
            cuts.push(stream.len());
            cuts.sort_unstable();
            let mut p = RequestParser::new();
            let mut got = Vec::new();
            let mut buffer = Vec::new();
            let mut fed = 0;
            for cut in cuts {
                buffer.extend_from_slice(&stream[fed..cut]);
                fed = cut;
                loop {
                    let (n, r) = p.advance(&buffer);
                    buffer.drain(..n);
                    match r {
                        Ok(Some(a)) => got.push(a),
                        Ok(None) => break,
                        Err(e) => panic!("{e:?}"),
                    }
                }
            }
            let mut want = reqs.clone();
            want.push(args(&[b"PING", b"x"]));
            proptest::prop_assert_eq!(got, want);
            proptest::prop_assert!(buffer.is_empty());
        }

        #[test]
        fn never_panics_on_garbage(data in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            let mut p = RequestParser::new();
            let mut rest = &data[..];
            loop {
                let (n, r) = p.advance(rest);
                proptest::prop_assert!(n <= rest.len());
                rest = &rest[n..];
                match r {
                    Ok(Some(_)) => continue,
                    _ => break,
                }
            }
        }
    }
}
