//! Incremental decoding of `Transfer-Encoding: chunked` request bodies (RFC 9112 §7.1).
//!
//! ```text
//! chunked-body = *chunk last-chunk trailer-section CRLF
//! chunk        = chunk-size [ chunk-ext ] CRLF chunk-data CRLF
//! last-chunk   = 1*("0") [ chunk-ext ] CRLF
//! ```
//!
//! [`ChunkedDecoder`] is a byte-level state machine: it can be fed the body in pieces of any
//! size and its verdict depends only on the bytes, never on how they were split. Chunk
//! extensions are checked for stray control bytes and otherwise ignored; trailer fields are
//! checked like header lines and ignored. Limits:
//!
//! - the decoded size never exceeds `max_body_bytes` ([`HttpError::BodyTooLarge`], reported as
//!   soon as a chunk-size says so, before its data arrives);
//! - a chunk-size has at most [`MAX_SIZE_DIGITS`] hex digits (leading zeros included) and the
//!   extensions of all chunks together at most `max_header_bytes` bytes
//!   ([`HttpError::BadChunkedBody`]);
//! - the trailer section has at most `max_header_bytes` bytes ([`HttpError::HeaderTooLarge`])
//!   and `max_headers` fields ([`HttpError::TooManyHeaders`]).
//!
//! Any other framing error (a non-hex size, a missing CRLF after chunk data, a bare LF, a
//! malformed trailer line) is [`HttpError::BadChunkedBody`]: answer 400 and close.

use super::error::HttpError;
use super::request::Limits;
use alloc::vec::Vec;

/// Most hex digits in one chunk-size, leading zeros included.
pub const MAX_SIZE_DIGITS: usize = 32;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Reading the hex digits of a chunk-size (`digits` so far).
    Size { digits: usize },
    /// After whitespace that follows the size: only more whitespace or `;` may come.
    SizeSpace,
    /// Inside the chunk extensions, up to the CR.
    Extension,
    /// Saw the CR ending the chunk-size line.
    SizeLf,
    /// `remaining` bytes of chunk data still to come.
    Data { remaining: usize },
    /// Chunk data read, expecting its CR.
    DataCr,
    /// Expecting the LF after chunk data.
    DataLf,
    /// Reading a trailer line (or the empty line ending the body).
    Trailer,
    /// Saw the CR ending a trailer line.
    TrailerLf,
    /// The whole body has been read.
    Done,
}

/// Decodes one chunked body, fed in pieces (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkedDecoder {
    limits: Limits,
    state: State,
    /// The chunk-size being read.
    size: usize,
    /// Bytes of chunk extensions seen so far (all chunks).
    extension_bytes: usize,
    /// The trailer line being read.
    line: Vec<u8>,
    /// Bytes of the trailer section so far (CRLFs included).
    trailer_bytes: usize,
    /// Trailer fields so far.
    trailers: usize,
}

/// The value of a hex digit.
fn hex(b: u8) -> Option<usize> {
    match b {
        b'0'..=b'9' => Some(usize::from(b - b'0')),
        b'a'..=b'f' => Some(usize::from(b - b'a' + 10)),
        b'A'..=b'F' => Some(usize::from(b - b'A' + 10)),
        _ => None,
    }
}

/// Whether `b` may appear in a chunk extension (visible ASCII, space, tab, obs-text).
fn extension_byte(b: u8) -> bool {
    b == b' ' || b == b'\t' || b.is_ascii_graphic() || b >= 0x80
}

impl ChunkedDecoder {
    /// A decoder for one body, enforcing `limits`.
    pub fn new(limits: Limits) -> Self {
        ChunkedDecoder {
            limits,
            state: State::Size { digits: 0 },
            size: 0,
            extension_bytes: 0,
            line: Vec::new(),
            trailer_bytes: 0,
            trailers: 0,
        }
    }

    /// Whether the last chunk and the trailer section have been read.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Decodes from `input`, appending chunk data to `body`; returns how many bytes of `input`
    /// were used. Stops right after the body's final CRLF (what follows belongs to the next
    /// request), so fewer than `input.len()` bytes are used only once [`Self::is_done`].
    ///
    /// After an error the decoder must not be used again.
    pub fn decode(&mut self, input: &[u8], body: &mut Vec<u8>) -> Result<usize, HttpError> {
        let mut i = 0;
        while i < input.len() && self.state != State::Done {
            if let State::Data { remaining } = self.state {
                let n = remaining.min(input.len() - i);
                body.extend_from_slice(&input[i..i + n]);
                i += n;
                self.state = if n == remaining {
                    State::DataCr
                } else {
                    State::Data {
                        remaining: remaining - n,
                    }
                };
                continue;
            }
            self.step(input[i], body.len())?;
            i += 1;
        }
        Ok(i)
    }

    /// Advances over one framing byte; `decoded` is the body size so far.
    fn step(&mut self, b: u8, decoded: usize) -> Result<(), HttpError> {
        const BAD: HttpError = HttpError::BadChunkedBody;
        self.state = match self.state {
            State::Size { digits } => match (b, hex(b)) {
                (_, Some(d)) => {
                    if digits == MAX_SIZE_DIGITS {
                        return Err(BAD);
                    }
                    self.size = self
                        .size
                        .checked_mul(16)
                        .and_then(|s| s.checked_add(d))
                        .ok_or(BAD)?;
                    if self.size > self.limits.max_body_bytes.saturating_sub(decoded) {
                        return Err(HttpError::BodyTooLarge);
                    }
                    State::Size { digits: digits + 1 }
                }
                _ if digits == 0 => return Err(BAD),
                (b'\r', _) => State::SizeLf,
                (b' ' | b'\t', _) => {
                    self.extension()?;
                    State::SizeSpace
                }
                (b';', _) => {
                    self.extension()?;
                    State::Extension
                }
                _ => return Err(BAD),
            },
            State::SizeSpace => match b {
                b' ' | b'\t' => {
                    self.extension()?;
                    State::SizeSpace
                }
                b';' => {
                    self.extension()?;
                    State::Extension
                }
                _ => return Err(BAD),
            },
            State::Extension => match b {
                b'\r' => State::SizeLf,
                _ if extension_byte(b) => {
                    self.extension()?;
                    State::Extension
                }
                _ => return Err(BAD),
            },
            State::SizeLf => match b {
                b'\n' if self.size == 0 => State::Trailer,
                b'\n' => State::Data {
                    remaining: core::mem::take(&mut self.size),
                },
                _ => return Err(BAD),
            },
            State::Data { .. } => return Err(BAD), // handled in `decode`
            State::DataCr => match b {
                b'\r' => State::DataLf,
                _ => return Err(BAD),
            },
            State::DataLf => match b {
                b'\n' => State::Size { digits: 0 },
                _ => return Err(BAD),
            },
            State::Trailer => {
                self.trailer_byte()?;
                match b {
                    b'\r' => State::TrailerLf,
                    b'\n' => return Err(BAD),
                    _ => {
                        self.line.push(b);
                        State::Trailer
                    }
                }
            }
            State::TrailerLf => {
                self.trailer_byte()?;
                if b != b'\n' {
                    return Err(BAD);
                }
                if self.line.is_empty() {
                    State::Done
                } else {
                    self.trailer_line()?;
                    State::Trailer
                }
            }
            State::Done => State::Done,
        };
        Ok(())
    }

    /// Counts one byte of chunk extensions (whitespace before `;` included).
    fn extension(&mut self) -> Result<(), HttpError> {
        self.extension_bytes += 1;
        if self.extension_bytes > self.limits.max_header_bytes {
            return Err(HttpError::BadChunkedBody);
        }
        Ok(())
    }

    /// Counts one byte of the trailer section.
    fn trailer_byte(&mut self) -> Result<(), HttpError> {
        self.trailer_bytes += 1;
        if self.trailer_bytes > self.limits.max_header_bytes {
            return Err(HttpError::HeaderTooLarge);
        }
        Ok(())
    }

    /// Checks the trailer field just read (then forgets it).
    fn trailer_line(&mut self) -> Result<(), HttpError> {
        let line = core::mem::take(&mut self.line);
        self.trailers += 1;
        if self.trailers > self.limits.max_headers {
            return Err(HttpError::TooManyHeaders);
        }
        if matches!(line.first(), Some(b' ' | b'\t')) {
            return Err(HttpError::BadChunkedBody); // obsolete line folding
        }
        super::request::parse_header(&line).map_err(|_| HttpError::BadChunkedBody)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use proptest::prelude::*;

    fn limits(max_body_bytes: usize) -> Limits {
        Limits {
            max_body_bytes,
            max_header_bytes: 64,
            max_headers: 2,
        }
    }

    /// Decodes `pieces` in order: the body and the bytes used, once done; `None` if more were
    /// needed; or the error.
    fn decode(limits: Limits, pieces: &[&[u8]]) -> Result<Option<(Vec<u8>, usize)>, HttpError> {
        let mut d = ChunkedDecoder::new(limits);
        let mut body = Vec::new();
        let mut used = 0;
        for p in pieces {
            let n = d.decode(p, &mut body)?;
            assert!(
                n == p.len() || d.is_done(),
                "stopped early without finishing"
            );
            used += n;
            if d.is_done() {
                return Ok(Some((body, used)));
            }
        }
        Ok(None)
    }

    fn whole(raw: &[u8]) -> Result<Option<(Vec<u8>, usize)>, HttpError> {
        decode(limits(1024), &[raw])
    }

    const BODY: &[u8] =
        b"4;name=\"a;b\" ; x\r\nWiki\r\n5\r\npedia\r\nE \t;y\r\n in\r\n\r\nchunks.\r\n0;last\r\nExpires: never\r\nX-Sum: 9\r\n\r\nNEXT";

    #[test]
    fn decodes_extensions_and_trailers_and_stops_at_the_end() {
        let (body, used) = whole(BODY).unwrap().unwrap();
        assert_eq!(body, b"Wikipedia in\r\n\r\nchunks.");
        assert_eq!(&BODY[used..], b"NEXT");
        assert_eq!(whole(b"0\r\n\r\n"), Ok(Some((vec![], 5))));
        assert_eq!(whole(b"000\r\n\r\n"), Ok(Some((vec![], 7))));
        assert_eq!(whole(b"1\r\nx\r\n0\r\n"), Ok(None));
    }

    #[test]
    fn any_split_point_gives_the_same_body() {
        let expected = whole(BODY);
        for i in 0..=BODY.len() {
            assert_eq!(
                decode(limits(1024), &[&BODY[..i], &BODY[i..]]),
                expected,
                "split at {i}"
            );
        }
        let bytes: Vec<&[u8]> = BODY.chunks(1).collect();
        assert_eq!(decode(limits(1024), &bytes), expected);
    }

    #[test]
    fn malformed_framing_is_400() {
        for raw in [
            b"\r\n".as_slice(),       // no size
            b"x\r\n",                 // not hex
            b"-1\r\n",                // not hex
            b"0x5\r\nhello\r\n",      // no 0x prefix
            b"5\nhello\r\n",          // bare LF after the size
            b"5\r\rhello\r\n",        // CR not followed by LF
            b"5\r\nhelloX\r\n",       // data longer than its size
            b"5\r\nhello\n0\r\n\r\n", // bare LF after data
            b"5\r\nhello0\r\n\r\n",   // no CRLF after data
            b"5 \r\nhello\r\n",       // whitespace not followed by an extension
            b"5 x\r\nhello\r\n",      // junk after the size
            b";a\r\n",                // extension without a size
            b"5;a\x00\r\nhello\r\n",  // control byte in an extension
            b"5;a\nhello\r\n",        // bare LF ending an extension
            b"0\r\nbad trailer\r\n\r\n",
            b"0\r\nA : b\r\n\r\n",
            b"0\r\nA: b\r\n folded\r\n\r\n",
            b"0\r\nA: \x01\r\n\r\n",
            b"0\r\n\n", // bare LF ending the trailer section
            b"0\r\n\rX",
        ] {
            assert_eq!(
                whole(raw),
                Err(HttpError::BadChunkedBody),
                "{}",
                alloc::string::String::from_utf8_lossy(raw)
            );
        }
    }

    #[test]
    fn size_overflow_and_digit_limits() {
        // With no body limit to stop it, a size past usize is an overflow (400).
        let huge = b"FFFFFFFFFFFFFFFFFFFF\r\n";
        assert_eq!(
            decode(limits(usize::MAX), &[huge]),
            Err(HttpError::BadChunkedBody)
        );
        // With the default limit the size is refused as soon as it passes the limit (413).
        assert_eq!(whole(huge), Err(HttpError::BodyTooLarge));
        // Leading zeros count towards the digit limit.
        let zeros = [vec![b'0'; MAX_SIZE_DIGITS], b"1\r\nx\r\n0\r\n\r\n".to_vec()].concat();
        assert_eq!(whole(&zeros), Err(HttpError::BadChunkedBody));
        let ok = [
            vec![b'0'; MAX_SIZE_DIGITS - 1],
            b"1\r\nx\r\n0\r\n\r\n".to_vec(),
        ]
        .concat();
        assert_eq!(whole(&ok).unwrap().unwrap().0, b"x");
    }

    #[test]
    fn decoded_size_is_limited() {
        let l = limits(10);
        assert_eq!(
            decode(l, &[b"5\r\n01234\r\n5\r\n56789\r\n0\r\n\r\n"]).map(|r| r.map(|r| r.0)),
            Ok(Some(b"0123456789".to_vec()))
        );
        // The eleventh byte is refused when its chunk-size arrives, before its data.
        assert_eq!(
            decode(l, &[b"5\r\n01234\r\n6\r\n"]),
            Err(HttpError::BodyTooLarge)
        );
        assert_eq!(decode(l, &[b"b\r\n"]), Err(HttpError::BodyTooLarge));
        assert_eq!(HttpError::BodyTooLarge.status().code(), 413);
    }

    #[test]
    fn extension_and_trailer_limits() {
        // 64 bytes of extensions in all, trailers of at most 64 bytes and 2 fields.
        let ext = alloc::format!("1;{}\r\nx\r\n0\r\n\r\n", "e".repeat(63));
        assert!(whole(ext.as_bytes()).unwrap().is_some());
        let ext = alloc::format!("1;{}\r\nx\r\n0\r\n\r\n", "e".repeat(64));
        assert_eq!(whole(ext.as_bytes()), Err(HttpError::BadChunkedBody));
        let spread = "1;eeeeeeeeeeeeeee\r\nx\r\n".repeat(5);
        assert_eq!(whole(spread.as_bytes()), Err(HttpError::BadChunkedBody));
        let big = alloc::format!("0\r\nA: {}\r\n\r\n", "v".repeat(60));
        assert_eq!(whole(big.as_bytes()), Err(HttpError::HeaderTooLarge));
        assert_eq!(
            whole(b"0\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n"),
            Err(HttpError::TooManyHeaders)
        );
        assert!(whole(b"0\r\nA: 1\r\nB: 2\r\n\r\n").unwrap().is_some());
    }

    proptest! {
        /// Random bytes after a valid prefix never panic, and the verdict does not depend on the
        /// split.
        #[test]
        fn random_input_is_split_invariant(
            data in prop::collection::vec(prop_oneof![
                Just(b'\r'), Just(b'\n'), Just(b'0'), Just(b'3'), Just(b'f'), Just(b';'),
                Just(b':'), Just(b' '), any::<u8>()
            ], 0..200),
            cut in 0usize..200,
        ) {
            let cut = cut.min(data.len());
            let l = limits(64);
            prop_assert_eq!(decode(l, &[&data[..cut], &data[cut..]]), decode(l, &[&data]));
        }

        /// Any body, encoded in chunks of random sizes, decodes back to itself.
        #[test]
        fn round_trips(body in prop::collection::vec(any::<u8>(), 0..300),
                       sizes in prop::collection::vec(1usize..40, 1..20),
                       cut in 0usize..2000) {
            let mut raw = Vec::new();
            let mut rest = body.as_slice();
            let mut i = 0;
            while !rest.is_empty() {
                let n = sizes[i % sizes.len()].min(rest.len());
                raw.extend_from_slice(alloc::format!("{n:x}\r\n").as_bytes());
                raw.extend_from_slice(&rest[..n]);
                raw.extend_from_slice(b"\r\n");
                rest = &rest[n..];
                i += 1;
            }
            raw.extend_from_slice(b"0\r\n\r\n");
            let cut = cut.min(raw.len());
            let got = decode(limits(1024), &[&raw[..cut], &raw[cut..]]);
            prop_assert_eq!(got, Ok(Some((body, raw.len()))));
        }
    }
}
