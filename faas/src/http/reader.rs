//! A connection's receive side: buffered bytes in, requests out (pipelined ones included).

use super::error::HttpError;
use super::request::{Limits, Parsed, Request, RequestParser};
use alloc::vec::Vec;

/// A connection's receive side: buffers bytes and yields requests in order.
///
/// After a parse error every call returns that error (the stream can no longer be framed: answer
/// with [`HttpError::status`] and close). After a request with `keep_alive == false` no further
/// requests are returned, even if pipelined bytes follow.
#[derive(Clone, Debug, Default)]
pub struct RequestReader {
    parser: RequestParser,
    buf: Vec<u8>,
    failed: Option<HttpError>,
    closed: bool,
}

impl RequestReader {
    /// A reader for one connection, enforcing `limits`.
    pub fn new(limits: Limits) -> Self {
        RequestReader {
            parser: RequestParser::new(limits),
            ..Default::default()
        }
    }

    /// Appends bytes received from the network.
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.failed.is_none() && !self.closed {
            self.buf.extend_from_slice(bytes);
        }
    }

    /// The next complete request, `Ok(None)` if more bytes are needed (or the connection is
    /// closing), or the parse error.
    pub fn next_request(&mut self) -> Result<Option<Request>, HttpError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        if self.closed || self.buf.is_empty() {
            return Ok(None);
        }
        match self.parser.parse(&self.buf) {
            Ok(Parsed::Incomplete) => Ok(None),
            Ok(Parsed::Complete { request, consumed }) => {
                self.buf.drain(..consumed);
                if !request.keep_alive {
                    self.closed = true;
                    self.buf.clear();
                }
                Ok(Some(request))
            }
            Err(e) => {
                self.failed = Some(e);
                self.buf.clear();
                Err(e)
            }
        }
    }

    /// Bytes buffered but not yet part of a returned request.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Whether the last request asked to close the connection.
    pub fn is_closed(&self) -> bool {
        self.closed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::String;
    use alloc::vec;
    use proptest::prelude::*;

    #[test]
    fn reader_handles_pipelining_and_close() {
        let mut rd = RequestReader::new(Limits::default());
        let a = b"GET /functions HTTP/1.1\r\nHost: h\r\n\r\n";
        let b = b"POST /invoke/f HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nhi";
        let c = b"GET /metrics HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n";
        let all = [a.as_slice(), b, c, b"GET / HTTP/1.1\r\n\r\n"].concat();
        for chunk in all.chunks(7) {
            rd.feed(chunk);
        }
        let paths: Vec<String> = core::iter::from_fn(|| rd.next_request().unwrap())
            .map(|r| String::from(r.path()))
            .collect();
        assert_eq!(paths, vec!["/functions", "/invoke/f", "/metrics"]);
        assert!(rd.is_closed());
        assert_eq!(rd.buffered(), 0);
    }

    #[test]
    fn reader_errors_are_sticky() {
        let mut rd = RequestReader::new(Limits::default());
        rd.feed(b"BAD\x00");
        assert_eq!(rd.next_request(), Err(HttpError::BadRequestLine));
        rd.feed(b"GET / HTTP/1.0\r\n\r\n");
        assert_eq!(rd.next_request(), Err(HttpError::BadRequestLine));
    }

    proptest! {
        /// Random bytes fed in random pieces never panic, and the reader's verdict does not depend
        /// on how the stream was split.
        #[test]
        fn never_panics_and_split_invariant(data in prop::collection::vec(any::<u8>(), 0..400),
                                            cuts in prop::collection::vec(0usize..400, 0..8)) {
            let limits = Limits { max_header_bytes: 128, max_headers: 4, max_body_bytes: 64 };
            let whole = collect(limits, &[&data]);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (data.len() + 1)).collect();
            cuts.sort_unstable();
            let mut pieces = Vec::new();
            let mut prev = 0;
            for c in cuts { pieces.push(&data[prev..c]); prev = c; }
            pieces.push(&data[prev..]);
            prop_assert_eq!(collect(limits, &pieces), whole);
        }

        /// Valid requests with random header content survive any split and round-trip their body.
        #[test]
        fn valid_requests_parse_under_any_split(body in prop::collection::vec(any::<u8>(), 0..100),
                                               val in "[ -~]{0,20}", split in 0usize..300) {
            let mut raw = alloc::format!("PUT /functions/f HTTP/1.1\r\nHost: h\r\nX-V: {val}\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
            raw.extend_from_slice(&body);
            let split = split.min(raw.len());
            let mut rd = RequestReader::new(Limits::default());
            rd.feed(&raw[..split]);
            let first = rd.next_request().unwrap();
            rd.feed(&raw[split..]);
            let r = first.or_else(|| rd.next_request().unwrap()).unwrap();
            prop_assert_eq!(&r.body, &body);
            prop_assert_eq!(r.header("x-v"), Some(val.trim_matches([' ', '\t'])));
        }
    }

    /// A pipelined stream of `n` valid requests with the given bodies.
    fn stream(bodies: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, b) in bodies.iter().enumerate() {
            let head = alloc::format!(
                "POST /invoke/f{i} HTTP/1.1\r\nhost: h\r\ncontent-length: {}\r\n\r\n",
                b.len()
            );
            out.extend_from_slice(head.as_bytes());
            out.extend_from_slice(b);
        }
        out
    }

    /// Splits `data` at the (sorted, clamped) cut points.
    fn split<'a>(data: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (data.len() + 1)).collect();
        cuts.sort_unstable();
        let mut pieces = Vec::new();
        let mut prev = 0;
        for c in cuts {
            pieces.push(&data[prev..c]);
            prev = c;
        }
        pieces.push(&data[prev..]);
        pieces
    }

    proptest! {
        /// Pipelined valid requests come out complete and in order under any split.
        #[test]
        fn pipelined_requests_under_any_split(
            bodies in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 1..6),
            cuts in prop::collection::vec(0usize..2000, 0..12),
        ) {
            let data = stream(&bodies);
            let (reqs, err) = collect(Limits::default(), &split(&data, &cuts));
            prop_assert_eq!(err, None);
            prop_assert_eq!(reqs.len(), bodies.len());
            for (i, (r, b)) in reqs.iter().zip(&bodies).enumerate() {
                let path = alloc::format!("/invoke/f{i}");
                prop_assert_eq!(r.path(), path.as_str());
                prop_assert_eq!(&r.body, b);
            }
        }

        /// A valid stream with random byte edits: never panics, and the outcome does not depend
        /// on the split (this reaches deep parser states that random bytes rarely do).
        #[test]
        fn mutated_streams_are_split_invariant(
            bodies in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..20), 1..4),
            edits in prop::collection::vec((0usize..400, any::<u8>()), 1..4),
            cuts in prop::collection::vec(0usize..400, 0..10),
        ) {
            let mut data = stream(&bodies);
            for (at, b) in edits {
                let at = at % data.len();
                data[at] = b;
            }
            let limits = Limits { max_header_bytes: 60, max_headers: 2, max_body_bytes: 16 };
            let whole = collect(limits, &[&data]);
            prop_assert_eq!(collect(limits, &split(&data, &cuts)), whole);
        }
    }

    /// Feeds `pieces` to a reader, taking requests after each, until the stream ends or fails.
    fn collect(limits: Limits, pieces: &[&[u8]]) -> (Vec<Request>, Option<HttpError>) {
        let mut rd = RequestReader::new(limits);
        let mut out = Vec::new();
        for p in pieces {
            rd.feed(p);
            loop {
                match rd.next_request() {
                    Ok(Some(r)) => out.push(r),
                    Ok(None) => break,
                    Err(e) => return (out, Some(e)),
                }
            }
        }
        (out, None)
    }
}
