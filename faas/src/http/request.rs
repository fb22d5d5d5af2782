//! Incremental HTTP/1.1 request parsing with limits and keep-alive semantics.
//!
//! [`RequestParser::parse`] looks at the bytes received so far on a connection and says either
//! "need more" ([`Parsed::Incomplete`]), "here is one request and it used this many bytes"
//! ([`Parsed::Complete`]), or a typed [`HttpError`]. Limits are enforced as soon as they are
//! exceeded, without waiting for the rest of the request. [`super::RequestReader`] wraps it
//! with the connection's buffer.
//!
//! The parser never panics, on any input: every index is bounds-checked (property tests in
//! `reader.rs` feed it random bytes and mutated request streams with random splits).

use super::chunked::ChunkedDecoder;
use super::error::HttpError;
use alloc::string::String;
use alloc::vec::Vec;

/// Size limits applied while parsing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most bytes in the request line plus header lines plus the blank line (431 / 414 beyond).
    pub max_header_bytes: usize,
    /// Most header lines (431 beyond).
    pub max_headers: usize,
    /// Largest accepted `Content-Length` (413 beyond).
    pub max_body_bytes: usize,
}

impl Default for Limits {
    /// 8 KiB of headers, 64 header lines, 1 MiB bodies.
    fn default() -> Self {
        Limits {
            max_header_bytes: 8 * 1024,
            max_headers: 64,
            max_body_bytes: 1024 * 1024,
        }
    }
}

/// The request methods the gateway understands (others get 501).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    /// `GET`
    Get,
    /// `HEAD`
    Head,
    /// `POST`
    Post,
    /// `PUT`
    Put,
    /// `DELETE`
    Delete,
    /// `OPTIONS`
    Options,
    /// `PATCH`
    Patch,
}

impl Method {
    /// Parses a method token; `Ok(None)` means a valid token naming an unsupported method.
    fn from_token(token: &[u8]) -> Option<Method> {
        Some(match token {
            b"GET" => Method::Get,
            b"HEAD" => Method::Head,
            b"POST" => Method::Post,
            b"PUT" => Method::Put,
            b"DELETE" => Method::Delete,
            b"OPTIONS" => Method::Options,
            b"PATCH" => Method::Patch,
            _ => return None,
        })
    }

    /// The method's name as sent on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
            Method::Options => "OPTIONS",
            Method::Patch => "PATCH",
        }
    }
}

/// The protocol version of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Version {
    /// HTTP/1.0: connections close after each response unless `Connection: keep-alive`.
    Http10,
    /// HTTP/1.1: connections persist unless `Connection: close`.
    Http11,
}

/// One header field; the name keeps the client's spelling, lookups ignore case.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Field name as received.
    pub name: String,
    /// Field value with surrounding whitespace removed.
    pub value: String,
}

/// A complete, validated request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The method.
    pub method: Method,
    /// The origin-form target (`/path?query`), as received.
    pub target: String,
    /// The protocol version.
    pub version: Version,
    /// Header fields in order of arrival.
    pub headers: Vec<Header>,
    /// The body (`Content-Length` bytes; empty without that header).
    pub body: Vec<u8>,
    /// Whether the connection stays open after the response (version default and `Connection`).
    pub keep_alive: bool,
}

impl Request {
    /// The value of the first header named `name` (ASCII case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value.as_str())
    }

    /// The target's path, without the query string.
    pub fn path(&self) -> &str {
        self.target
            .split_once('?')
            .map_or(self.target.as_str(), |(p, _)| p)
    }

    /// The target's query string (after `?`), if any.
    pub fn query(&self) -> Option<&str> {
        self.target.split_once('?').map(|(_, q)| q)
    }
}

/// Outcome of one parse attempt over a connection's buffered bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// The bytes are a valid prefix of a request; wait for more.
    Incomplete,
    /// One request, which used the first `consumed` bytes of the buffer.
    Complete {
        /// The request.
        request: Request,
        /// Bytes of the buffer the request used (drop them before parsing the next one).
        consumed: usize,
    },
}

/// The stateless request parser: configure limits once, parse any buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestParser {
    limits: Limits,
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn is_token(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(|&b| is_tchar(b))
}

fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// Whether `b` may appear inside the request line (`in_request_line`) or a header line.
fn byte_allowed(b: u8, in_request_line: bool) -> bool {
    if in_request_line {
        b == b' ' || b.is_ascii_graphic()
    } else {
        b == b' ' || b == b'\t' || b.is_ascii_graphic() || b >= 0x80
    }
}

fn parse_request_line(line: &[u8]) -> Result<(Method, String, Version), HttpError> {
    let mut parts = line.split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HttpError::BadRequestLine);
    };
    let version = parse_version(version)?;
    if !is_token(method) {
        return Err(HttpError::BadRequestLine);
    }
    let method = Method::from_token(method).ok_or(HttpError::UnsupportedMethod)?;
    if target.first() != Some(&b'/') {
        return Err(HttpError::BadRequestLine);
    }
    // Checked graphic ASCII above, so this is valid UTF-8.
    let target = core::str::from_utf8(target).map_err(|_| HttpError::BadRequestLine)?;
    Ok((method, String::from(target), version))
}

fn parse_version(v: &[u8]) -> Result<Version, HttpError> {
    match v {
        b"HTTP/1.1" => Ok(Version::Http11),
        b"HTTP/1.0" => Ok(Version::Http10),
        [b'H', b'T', b'T', b'P', b'/', major, b'.', minor]
            if major.is_ascii_digit() && minor.is_ascii_digit() =>
        {
            Err(HttpError::UnsupportedVersion)
        }
        _ => Err(HttpError::BadRequestLine),
    }
}

pub(crate) fn parse_header(line: &[u8]) -> Result<Header, HttpError> {
    let colon = line
        .iter()
        .position(|&b| b == b':')
        .ok_or(HttpError::BadHeader)?;
    let (name, value) = (&line[..colon], trim_ows(&line[colon + 1..]));
    if !is_token(name) {
        return Err(HttpError::BadHeader);
    }
    if !value
        .iter()
        .all(|&b| b == b'\t' || b == b' ' || b.is_ascii_graphic() || b >= 0x80)
    {
        return Err(HttpError::BadHeader);
    }
    let value = core::str::from_utf8(value).map_err(|_| HttpError::BadHeader)?;
    let name = core::str::from_utf8(name).map_err(|_| HttpError::BadHeader)?;
    Ok(Header {
        name: String::from(name),
        value: String::from(value),
    })
}

fn parse_content_length(value: &str) -> Result<u64, HttpError> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(HttpError::BadContentLength);
    }
    value
        .parse::<u64>()
        .map_err(|_| HttpError::BadContentLength)
}

/// Whether a comma-separated header list (e.g. `Connection`) contains `token`.
fn has_token(headers: &[Header], name: &str, token: &str) -> bool {
    headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case(name))
        .flat_map(|h| h.value.split(','))
        .any(|t| t.trim_matches([' ', '\t']).eq_ignore_ascii_case(token))
}

/// How a request's body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// `Content-Length` bytes (0 without the header).
    Length(usize),
    /// `Transfer-Encoding: chunked`, decoded by [`super::chunked::ChunkedDecoder`].
    Chunked,
}

/// A request whose head (request line and header fields) has been parsed and accepted; its body
/// is still to be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Head {
    /// The method.
    pub method: Method,
    /// The origin-form target.
    pub target: String,
    /// The protocol version.
    pub version: Version,
    /// Header fields in order of arrival.
    pub headers: Vec<Header>,
    /// How the body is delimited.
    pub framing: Framing,
    /// Whether the connection stays open after the response.
    pub keep_alive: bool,
    /// Whether the client waits for `100 Continue` before sending the body: an HTTP/1.1
    /// request with `Expect: 100-continue` and a body (RFC 9110 §10.1.1; HTTP/1.0 clients'
    /// expectations are ignored).
    pub expects_continue: bool,
}

impl Head {
    /// The complete request, with its decoded `body`.
    pub fn into_request(self, body: Vec<u8>) -> Request {
        Request {
            method: self.method,
            target: self.target,
            version: self.version,
            headers: self.headers,
            body,
            keep_alive: self.keep_alive,
        }
    }
}

/// The transfer codings of the `Transfer-Encoding` fields, if any: `Ok(true)` when they are
/// exactly `chunked`.
fn transfer_coding(headers: &[Header]) -> Result<bool, HttpError> {
    let mut present = false;
    let mut chunked = false;
    let mut other = false;
    for h in headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("transfer-encoding"))
    {
        present = true;
        for coding in h.value.split(',').map(|t| t.trim_matches([' ', '\t'])) {
            // A coding is a token, maybe with `;`-separated parameters.
            let name = coding
                .split(';')
                .next()
                .unwrap_or("")
                .trim_matches([' ', '\t']);
            if !is_token(name.as_bytes()) {
                return Err(HttpError::BadTransferEncoding);
            }
            if name.eq_ignore_ascii_case("chunked") && name.len() == coding.len() {
                // `chunked` must be the final coding, applied once (RFC 9112 §6.1, §6.3).
                if chunked {
                    return Err(HttpError::BadTransferEncoding);
                }
                chunked = true;
            } else if chunked {
                return Err(HttpError::BadTransferEncoding);
            } else {
                other = true;
            }
        }
    }
    match (present, other) {
        (false, _) => Ok(false),
        (true, true) => Err(HttpError::UnsupportedTransferEncoding),
        (true, false) => Ok(true),
    }
}

/// The body's framing, or the error that makes the request unacceptable.
fn framing(headers: &[Header], version: Version, limits: &Limits) -> Result<Framing, HttpError> {
    let hosts = headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("host"))
        .count();
    if version == Version::Http11 && hosts != 1 {
        return Err(HttpError::BadHost);
    }
    let te = headers
        .iter()
        .any(|h| h.name.eq_ignore_ascii_case("transfer-encoding"));
    let mut length = None;
    for h in headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("content-length"))
    {
        let n = parse_content_length(&h.value)?;
        if length.is_some_and(|l| l != n) {
            return Err(HttpError::BadContentLength);
        }
        length = Some(n);
    }
    match (te, length) {
        (true, Some(_)) => Err(HttpError::ConflictingFraming),
        (true, None) => match transfer_coding(headers)? {
            true => Ok(Framing::Chunked),
            // Unreachable: a present header either is chunked or is an error.
            false => Err(HttpError::BadTransferEncoding),
        },
        (false, None) => Ok(Framing::Length(0)),
        (false, Some(n)) => match usize::try_from(n) {
            Ok(n) if n <= limits.max_body_bytes => Ok(Framing::Length(n)),
            _ => Err(HttpError::BodyTooLarge),
        },
    }
}

impl RequestParser {
    /// A parser enforcing `limits`.
    pub fn new(limits: Limits) -> Self {
        RequestParser { limits }
    }

    /// The limits this parser enforces.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Parses the request at the start of `buf` (bytes received so far on a connection),
    /// body included.
    ///
    /// This re-reads `buf` from its start on every call; [`super::RequestReader`] instead
    /// parses the head once with [`RequestParser::parse_head`] and decodes the body as it
    /// arrives. Both give the same verdict on the same bytes.
    pub fn parse(&self, buf: &[u8]) -> Result<Parsed, HttpError> {
        let Some((head, used)) = self.parse_head(buf)? else {
            return Ok(Parsed::Incomplete);
        };
        let rest = &buf[used..];
        let (body, body_used) = match head.framing {
            Framing::Length(len) => match rest.get(..len) {
                Some(body) => (Vec::from(body), len),
                None => return Ok(Parsed::Incomplete),
            },
            Framing::Chunked => {
                let mut decoder = ChunkedDecoder::new(self.limits);
                let mut body = Vec::new();
                let n = decoder.decode(rest, &mut body)?;
                if !decoder.is_done() {
                    return Ok(Parsed::Incomplete);
                }
                (body, n)
            }
        };
        Ok(Parsed::Complete {
            request: head.into_request(body),
            consumed: used + body_used,
        })
    }

    /// Parses the head of the request at the start of `buf`: `Ok(None)` if more bytes are
    /// needed, else the head and how many bytes of `buf` it used (the body starts there).
    ///
    /// Empty lines before the request line are skipped (RFC 9112 §2.2) and count as used.
    /// The head is scanned byte by byte in order and the first violation found is reported, so
    /// the verdict depends only on the bytes, never on how they were split into arrivals.
    pub fn parse_head(&self, buf: &[u8]) -> Result<Option<(Head, usize)>, HttpError> {
        let max = self.limits.max_header_bytes;
        let mut i = 0;
        while buf.get(i..i + 2) == Some(b"\r\n") {
            i += 2;
        }
        let mut line_start = i;
        let mut request_line = None;
        let mut headers = Vec::new();
        loop {
            let Some(&b) = buf.get(i) else {
                return Ok(None);
            };
            if i >= max {
                return Err(if request_line.is_none() {
                    HttpError::UriTooLong
                } else {
                    HttpError::HeaderTooLarge
                });
            }
            match b {
                b'\r' => match buf.get(i + 1) {
                    None => return Ok(None),
                    Some(b'\n') => {}
                    Some(_) => return Err(HttpError::BadLineEnding),
                },
                b'\n' => {
                    if i == line_start || buf[i - 1] != b'\r' {
                        return Err(HttpError::BadLineEnding);
                    }
                    let line = &buf[line_start..i - 1];
                    line_start = i + 1;
                    if request_line.is_none() {
                        request_line = Some(parse_request_line(line)?);
                    } else if line.is_empty() {
                        break;
                    } else if matches!(line.first(), Some(b' ' | b'\t')) {
                        return Err(HttpError::BadHeader); // obsolete line folding
                    } else if headers.len() == self.limits.max_headers {
                        return Err(HttpError::TooManyHeaders);
                    } else {
                        headers.push(parse_header(line)?);
                    }
                }
                _ if !byte_allowed(b, request_line.is_none()) => {
                    return Err(if request_line.is_none() {
                        HttpError::BadRequestLine
                    } else {
                        HttpError::BadHeader
                    });
                }
                _ => {}
            }
            i += 1;
        }
        let Some((method, target, version)) = request_line else {
            return Err(HttpError::BadRequestLine);
        };
        let framing = framing(&headers, version, &self.limits)?;
        let keep_alive = match version {
            Version::Http11 => !has_token(&headers, "connection", "close"),
            // A 1.0 message with Transfer-Encoding has faulty framing by RFC 9112 §6.1: read
            // it, answer, and close.
            Version::Http10 => {
                has_token(&headers, "connection", "keep-alive")
                    && !has_token(&headers, "connection", "close")
                    && framing != Framing::Chunked
            }
        };
        let has_body = framing != Framing::Length(0);
        let expects_continue =
            version == Version::Http11 && has_body && has_token(&headers, "expect", "100-continue");
        let head = Head {
            method,
            target,
            version,
            headers,
            framing,
            keep_alive,
            expects_continue,
        };
        Ok(Some((head, line_start)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &[u8]) -> Result<Parsed, HttpError> {
        RequestParser::default().parse(s)
    }

    fn complete(s: &[u8]) -> (Request, usize) {
        match parse(s) {
            Ok(Parsed::Complete { request, consumed }) => (request, consumed),
            other => panic!("expected a request, got {other:?}"),
        }
    }

    #[test]
    fn parses_a_post_with_body() {
        let raw = b"POST /invoke/hello?x=1 HTTP/1.1\r\nHost: fjord\r\ncontent-LENGTH: 5\r\nX-A:  v a \r\n\r\nhelloEXTRA";
        let (r, used) = complete(raw);
        assert_eq!(used, raw.len() - 5);
        assert_eq!(r.method, Method::Post);
        assert_eq!((r.path(), r.query()), ("/invoke/hello", Some("x=1")));
        assert_eq!(r.version, Version::Http11);
        assert_eq!(r.header("Content-Length"), Some("5"));
        assert_eq!(r.header("x-a"), Some("v a"));
        assert_eq!(r.body, b"hello");
        assert!(r.keep_alive);
    }

    #[test]
    fn every_strict_prefix_is_incomplete() {
        let raw = b"\r\nPUT /functions/f HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc";
        for i in 0..raw.len() {
            assert_eq!(parse(&raw[..i]), Ok(Parsed::Incomplete), "prefix {i}");
        }
        assert_eq!(complete(raw).1, raw.len());
    }

    #[test]
    fn keep_alive_semantics() {
        let ka = |s: &[u8]| complete(s).0.keep_alive;
        assert!(ka(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n"));
        assert!(!ka(
            b"GET / HTTP/1.1\r\nHost: h\r\nConnection: foo, Close\r\n\r\n"
        ));
        assert!(!ka(b"GET / HTTP/1.0\r\n\r\n"));
        assert!(ka(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"));
    }

    #[test]
    fn errors_map_to_status_codes() {
        use HttpError::*;
        let cases: &[(&[u8], HttpError, u16)] = &[
            (b"GET /\r\n\r\n", BadRequestLine, 400),
            (b"GET  / HTTP/1.1\r\n", BadRequestLine, 400),
            (b"GET http://x/ HTTP/1.1\r\n", BadRequestLine, 400),
            (b"G\x01T / HTTP/1.1\r\n", BadRequestLine, 400),
            (b"GET / HTTP/1.1\n", BadLineEnding, 400),
            (b"GET / HTTP/1.1\r\nHost: h\n", BadLineEnding, 400),
            (b"GET / HTTP/1.1\rX", BadLineEnding, 400),
            (b"GET / HTTP/1.1\r\nHost : h\r\n", BadHeader, 400),
            (b"GET / HTTP/1.1\r\nNoColon\r\n", BadHeader, 400),
            (b"GET / HTTP/1.1\r\nHost: h\r\n folded\r\n", BadHeader, 400),
            (b"GET / HTTP/1.1\r\nA: \x7f\r\n", BadHeader, 400),
            (b"GET / HTTP/1.1\r\nA: \xff\r\n", BadHeader, 400),
            (b"GET / HTTP/1.1\r\n\r\n", BadHost, 400),
            (
                b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
                BadHost,
                400,
            ),
            (
                b"POST / HTTP/1.0\r\nContent-Length: 1x\r\n\r\n",
                BadContentLength,
                400,
            ),
            (
                b"POST / HTTP/1.0\r\nContent-Length: -1\r\n\r\n",
                BadContentLength,
                400,
            ),
            (
                b"POST / HTTP/1.0\r\nContent-Length: 99999999999999999999999\r\n\r\n",
                BadContentLength,
                400,
            ),
            (
                b"POST / HTTP/1.0\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                BadContentLength,
                400,
            ),
            (
                b"POST / HTTP/1.0\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
                ConflictingFraming,
                400,
            ),
            (
                b"POST / HTTP/1.0\r\nTransfer-Encoding: gzip\r\n\r\n",
                UnsupportedTransferEncoding,
                501,
            ),
            (
                b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\nX\r\n",
                BadChunkedBody,
                400,
            ),
            (
                b"POST / HTTP/1.0\r\nContent-Length: 1048577\r\n\r\n",
                BodyTooLarge,
                413,
            ),
            (b"TRACE / HTTP/1.1\r\n", UnsupportedMethod, 501),
            (b"get / HTTP/1.1\r\n", UnsupportedMethod, 501),
            (b"GET / HTTP/2.0\r\n", UnsupportedVersion, 505),
            (b"GET / HTTQ/1.1\r\n", BadRequestLine, 400),
        ];
        for (raw, err, code) in cases {
            assert_eq!(parse(raw), Err(*err), "{}", String::from_utf8_lossy(raw));
            assert_eq!(err.status().code(), *code);
        }
        // Duplicate but equal Content-Length values are accepted.
        let (r, _) =
            complete(b"POST / HTTP/1.0\r\nContent-Length: 1\r\ncontent-length: 1\r\n\r\nx");
        assert_eq!(r.body, b"x");
    }

    #[test]
    fn limits_fire_before_the_data_is_complete() {
        let p = RequestParser::new(Limits {
            max_header_bytes: 64,
            max_headers: 2,
            max_body_bytes: 4,
        });
        let long_line = [b"GET /".as_slice(), &[b'a'; 70]].concat();
        assert_eq!(p.parse(&long_line), Err(HttpError::UriTooLong));
        assert_eq!(HttpError::UriTooLong.status().code(), 414);
        let mut big = b"GET / HTTP/1.1\r\nHost: h\r\nX: ".to_vec();
        big.extend_from_slice(&[b'v'; 60]);
        assert_eq!(p.parse(&big), Err(HttpError::HeaderTooLarge));
        assert_eq!(HttpError::HeaderTooLarge.status().code(), 431);
        let many = b"GET / HTTP/1.1\r\nHost: h\r\nA: 1\r\nB: 2\r\n";
        assert_eq!(p.parse(many), Err(HttpError::TooManyHeaders));
        let body = b"POST / HTTP/1.0\r\nContent-Length: 5\r\n\r\n";
        assert_eq!(p.parse(body), Err(HttpError::BodyTooLarge));
        let ok = b"POST / HTTP/1.0\r\nContent-Length: 4\r\n\r\nabcd";
        assert!(matches!(p.parse(ok), Ok(Parsed::Complete { .. })));
    }

    /// The head of `raw` (which must be complete and acceptable).
    fn head(raw: &[u8]) -> Head {
        match RequestParser::default().parse_head(raw) {
            Ok(Some((head, _))) => head,
            other => panic!("expected a head, got {other:?}"),
        }
    }

    #[test]
    fn transfer_encoding_rules() {
        use HttpError::*;
        let te = |v: &str| {
            let raw =
                alloc::format!("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: {v}\r\n\r\n");
            RequestParser::default()
                .parse_head(raw.as_bytes())
                .map(|h| h.map(|(h, _)| h.framing))
        };
        assert_eq!(te("chunked"), Ok(Some(Framing::Chunked)));
        assert_eq!(te("Chunked"), Ok(Some(Framing::Chunked)));
        assert_eq!(te("gzip"), Err(UnsupportedTransferEncoding));
        assert_eq!(te("gzip, chunked"), Err(UnsupportedTransferEncoding));
        assert_eq!(te("x-custom;q=1"), Err(UnsupportedTransferEncoding));
        assert_eq!(te("chunked;q=1"), Err(UnsupportedTransferEncoding));
        // chunked must be last and applied once: the length cannot be determined otherwise.
        assert_eq!(te("chunked, gzip"), Err(BadTransferEncoding));
        assert_eq!(te("chunked, chunked"), Err(BadTransferEncoding));
        assert_eq!(te(""), Err(BadTransferEncoding));
        assert_eq!(te("chunked,"), Err(BadTransferEncoding));
        assert_eq!(te("a b"), Err(BadTransferEncoding));
        // Split over two fields, the codings still count together.
        let two = b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(parse(two), Err(BadTransferEncoding));
        // Both framings: request smuggling, refused whatever the order.
        for raw in [
            b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n".as_slice(),
            b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: gzip\r\n\r\n",
        ] {
            assert_eq!(parse(raw), Err(ConflictingFraming));
            assert_eq!(ConflictingFraming.status().code(), 400);
        }
        assert_eq!(BadTransferEncoding.status().code(), 400);
        assert_eq!(UnsupportedTransferEncoding.status().code(), 501);
        assert_eq!(BadChunkedBody.status().code(), 400);
    }

    #[test]
    fn parses_chunked_bodies_whole() {
        let raw = b"PUT /functions/f HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=\"v\"\r\nhello\r\nA\r\n, chunked!\r\n0\r\nX-Sum: 1\r\n\r\nGET";
        let (r, used) = complete(raw);
        assert_eq!(r.body, b"hello, chunked!");
        assert_eq!(used, raw.len() - 3);
        assert!(r.keep_alive);
        for i in 0..raw.len() - 3 {
            assert_eq!(parse(&raw[..i]), Ok(Parsed::Incomplete), "prefix {i}");
        }
        // HTTP/1.0 with Transfer-Encoding: read, answer, then close (RFC 9112 §6.1).
        let old =
            b"POST / HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
        let (r, _) = complete(old);
        assert!(r.body.is_empty());
        assert!(!r.keep_alive);
    }

    #[test]
    fn expect_continue_is_noted_only_for_acceptable_bodies() {
        let e = |raw: &[u8]| head(raw).expects_continue;
        assert!(e(
            b"PUT /f HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"
        ));
        assert!(e(
            b"PUT /f HTTP/1.1\r\nHost: h\r\nexpect: 100-Continue\r\nTransfer-Encoding: chunked\r\n\r\n"
        ));
        // No body, an HTTP/1.0 client, no expectation: nothing to continue.
        assert!(!e(
            b"PUT /f HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\n"
        ));
        assert!(!e(
            b"PUT /f HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"
        ));
        assert!(!e(
            b"PUT /f HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\n"
        ));
        // A body over the limit is refused on the head alone.
        let p = RequestParser::new(Limits {
            max_body_bytes: 4,
            ..Limits::default()
        });
        assert_eq!(
            p.parse_head(
                b"PUT /f HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"
            ),
            Err(HttpError::BodyTooLarge)
        );
    }
}
