//! A connection's receive side: buffered bytes in, requests out (pipelined ones included).

use super::chunked::ChunkedDecoder;
use super::error::HttpError;
use super::request::{Framing, Head, Limits, Method, Request, RequestParser};
use alloc::string::String;
use alloc::vec::Vec;

/// The interim response that tells a client waiting on `Expect: 100-continue` to send its body.
pub const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// The body of a request whose head has been accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
enum BodyReader {
    /// `Content-Length` bytes, taken whole once buffered.
    Length(usize),
    /// A chunked body, decoded as it arrives.
    Chunked(ChunkedDecoder),
}

/// A request whose head has been accepted and whose body is being read.
#[derive(Clone, Debug, PartialEq, Eq)]
struct InProgress {
    head: Head,
    reader: BodyReader,
    body: Vec<u8>,
}

/// A connection's receive side: buffers bytes and yields requests in order.
///
/// The head of a request is parsed once; its body is then read as it arrives (a chunked body is
/// decoded incrementally, so a body sent in many small pieces costs time linear in its size).
///
/// After a parse error every call returns that error (the stream can no longer be framed: answer
/// with [`HttpError::status`] and close). After a request with `keep_alive == false` no further
/// requests are returned, even if pipelined bytes follow.
///
/// When an accepted head asks for `Expect: 100-continue`, [`RequestReader::take_continue`]
/// says so once: the connection then sends [`CONTINUE`] ahead of the final response (or
/// refuses the request on its route at once). A head
/// refused on its own (e.g. a `Content-Length` over the limit) is an error instead, and no
/// `100 Continue` is due.
#[derive(Clone, Debug, Default)]
pub struct RequestReader {
    parser: RequestParser,
    buf: Vec<u8>,
    current: Option<InProgress>,
    continue_due: Option<(Method, String)>,
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
        if self.closed {
            return Ok(None);
        }
        match self.advance() {
            Ok(Some(request)) => {
                if !request.keep_alive {
                    self.closed = true;
                    self.buf.clear();
                }
                Ok(Some(request))
            }
            Ok(None) => Ok(None),
            Err(e) => {
                self.failed = Some(e);
                self.current = None;
                self.buf.clear();
                Err(e)
            }
        }
    }

    /// Parses what the buffer holds: the head if none is in progress, then as much body as
    /// has arrived.
    fn advance(&mut self) -> Result<Option<Request>, HttpError> {
        if self.current.is_none() {
            if self.buf.is_empty() {
                return Ok(None);
            }
            let Some((head, used)) = self.parser.parse_head(&self.buf)? else {
                return Ok(None);
            };
            self.buf.drain(..used);
            self.continue_due = head
                .expects_continue
                .then(|| (head.method, head.target.clone()));
            let reader = match head.framing {
                Framing::Length(n) => BodyReader::Length(n),
                Framing::Chunked => BodyReader::Chunked(ChunkedDecoder::new(self.parser.limits())),
            };
            self.current = Some(InProgress {
                head,
                reader,
                body: Vec::new(),
            });
        }
        let Some(cur) = &mut self.current else {
            return Ok(None);
        };
        match &mut cur.reader {
            BodyReader::Length(n) => {
                let n = *n;
                if self.buf.len() < n {
                    return Ok(None);
                }
                cur.body = self.buf.drain(..n).collect();
            }
            BodyReader::Chunked(decoder) => {
                let used = decoder.decode(&self.buf, &mut cur.body)?;
                self.buf.drain(..used);
                if !decoder.is_done() {
                    return Ok(None);
                }
            }
        }
        Ok(self
            .current
            .take()
            .map(|cur| cur.head.into_request(cur.body)))
    }

    /// Whether a `100 Continue` is due: the method and target of the request that asked for
    /// it, once per such request, from the moment its head was accepted (whatever its body
    /// turns out to be). The connection may still refuse the request on its route instead.
    pub fn take_continue(&mut self) -> Option<(Method, String)> {
        self.continue_due.take()
    }

    /// Bytes buffered but not yet part of a returned request (or decoded into its body).
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Whether a request's head has been accepted and its body is still arriving.
    pub fn reading_body(&self) -> bool {
        self.current.is_some()
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

    /// A pipelined stream of valid requests with the given bodies: even ones framed by
    /// `Content-Length`, odd ones chunked (chunks of up to 7 bytes, some with extensions, and
    /// a trailer field).
    fn stream(bodies: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, b) in bodies.iter().enumerate() {
            if i % 2 == 1 {
                let head = alloc::format!(
                    "POST /invoke/f{i} HTTP/1.1\r\nhost: h\r\ntransfer-encoding: chunked\r\n\r\n"
                );
                out.extend_from_slice(head.as_bytes());
                out.extend_from_slice(&chunked(b, 7));
                continue;
            }
            let head = alloc::format!(
                "POST /invoke/f{i} HTTP/1.1\r\nhost: h\r\ncontent-length: {}\r\n\r\n",
                b.len()
            );
            out.extend_from_slice(head.as_bytes());
            out.extend_from_slice(b);
        }
        out
    }

    /// `body` in the chunked coding, in chunks of at most `size` bytes.
    fn chunked(body: &[u8], size: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for (j, c) in body.chunks(size).enumerate() {
            let ext = if j % 2 == 1 { ";e=1" } else { "" };
            out.extend_from_slice(alloc::format!("{:X}{ext}\r\n", c.len()).as_bytes());
            out.extend_from_slice(c);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"0\r\nX-T: 1\r\n\r\n");
        out
    }

    #[test]
    fn chunked_request_split_at_every_byte_boundary() {
        let body: Vec<u8> = (0..40u8).collect();
        let mut data =
            b"PUT /functions/f HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        data.extend_from_slice(&chunked(&body, 9));
        data.extend_from_slice(b"GET /metrics HTTP/1.1\r\nHost: h\r\n\r\n");
        let (reqs, err) = collect(Limits::default(), &[&data]);
        assert_eq!(err, None);
        assert_eq!(reqs.len(), 2);
        assert_eq!(reqs[0].body, body);
        assert_eq!(reqs[1].path(), "/metrics");
        for i in 0..=data.len() {
            assert_eq!(
                collect(Limits::default(), &[&data[..i], &data[i..]]),
                (reqs.clone(), None),
                "split at {i}"
            );
        }
        let bytes: Vec<&[u8]> = data.chunks(1).collect();
        assert_eq!(collect(Limits::default(), &bytes), (reqs, None));
    }

    #[test]
    fn chunked_errors_close_the_stream() {
        let limits = Limits {
            max_body_bytes: 8,
            ..Limits::default()
        };
        let head = b"POST /invoke/f HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n";
        let over = [head.as_slice(), b"5\r\n01234\r\n4\r\n"].concat();
        assert_eq!(
            collect(limits, &[&over]),
            (vec![], Some(HttpError::BodyTooLarge))
        );
        let bad = [head.as_slice(), b"5\r\n01234XX"].concat();
        assert_eq!(
            collect(limits, &[&bad]),
            (vec![], Some(HttpError::BadChunkedBody))
        );
        let mut rd = RequestReader::new(limits);
        rd.feed(&bad);
        assert_eq!(rd.next_request(), Err(HttpError::BadChunkedBody));
        rd.feed(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n");
        assert_eq!(rd.next_request(), Err(HttpError::BadChunkedBody));
        assert_eq!(rd.buffered(), 0);
    }

    #[test]
    fn continue_is_due_once_per_accepted_head() {
        let mut rd = RequestReader::new(Limits {
            max_body_bytes: 16,
            ..Limits::default()
        });
        assert_eq!(rd.take_continue(), None);
        rd.feed(b"PUT /functions/f HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\n");
        assert_eq!(rd.next_request(), Ok(None));
        assert_eq!(rd.take_continue(), None, "not before the head is complete");
        rd.feed(b"Transfer-Encoding: chunked\r\n\r\n3\r\nab");
        assert_eq!(rd.next_request(), Ok(None));
        assert_eq!(
            rd.take_continue(),
            Some((Method::Put, String::from("/functions/f")))
        );
        assert_eq!(rd.take_continue(), None, "only once");
        rd.feed(b"c\r\n0\r\n\r\n");
        assert_eq!(rd.next_request().unwrap().unwrap().body, b"abc");
        assert_eq!(rd.take_continue(), None);
        // A second request on the connection asking again gets its own.
        rd.feed(b"PUT /functions/f HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi");
        assert_eq!(rd.next_request().unwrap().unwrap().body, b"hi");
        assert!(rd.take_continue().is_some());
        // A head refused on its own gets its error, no 100.
        rd.feed(b"PUT /functions/f HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 17\r\n\r\n");
        assert_eq!(rd.next_request(), Err(HttpError::BodyTooLarge));
        assert_eq!(rd.take_continue(), None);
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

    proptest! {
        /// A chunked head followed by random bytes biased towards chunked framing: never
        /// panics, and the verdict does not depend on the split.
        #[test]
        fn random_chunked_bodies_are_split_invariant(
            tail in prop::collection::vec(prop_oneof![
                Just(b'\r'), Just(b'\n'), Just(b'0'), Just(b'2'), Just(b'a'), Just(b';'),
                Just(b':'), Just(b' '), any::<u8>()
            ], 0..120),
            expect in any::<bool>(),
            cuts in prop::collection::vec(0usize..300, 0..6),
        ) {
            let expect = if expect { "Expect: 100-continue\r\n" } else { "" };
            let mut data = alloc::format!(
                "POST /invoke/f HTTP/1.1\r\nHost: h\r\n{expect}Transfer-Encoding: chunked\r\n\r\n"
            )
            .into_bytes();
            data.extend_from_slice(&tail);
            let limits = Limits { max_header_bytes: 128, max_headers: 4, max_body_bytes: 16 };
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
