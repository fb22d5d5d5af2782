//! The gateway's HTTP/1.1 request parsing: [`RequestReader`] fed the bytes whole and in
//! pieces, [`RequestParser::parse`] on the whole buffer, and the router on every request.
//!
//! Invariants beyond "no panic": the requests and the error a connection yields do not depend
//! on how the bytes were split into arrivals (the parser's documented promise); the one-shot
//! parser agrees with the incremental reader on the first request; a parsed request's body
//! respects the limit; every error maps to a 4xx/5xx status.

use fjord_faas::http::{HttpError, Limits, Parsed, Request, RequestParser, RequestReader, route};

use crate::engine::{Target, Violation};
use crate::rng::{Rng, fnv};

/// The target.
pub const TARGET: Target = Target {
    name: "http",
    max_len: 16 * 1024,
    generate,
    check,
};

/// Small limits, so the fuzzer reaches them often; and the gateway's defaults.
fn limits_for(input: &[u8]) -> Limits {
    if input.len().is_multiple_of(3) {
        Limits {
            max_header_bytes: 256,
            max_headers: 6,
            max_body_bytes: 64,
        }
    } else {
        Limits::default()
    }
}

/// Every request the connection yields until it needs more bytes, closes or fails.
fn drain(reader: &mut RequestReader, out: &mut Vec<Result<Request, HttpError>>) -> bool {
    loop {
        let _ = reader.take_continue();
        match reader.next_request() {
            Ok(Some(r)) => out.push(Ok(r)),
            Ok(None) => return true,
            Err(e) => {
                out.push(Err(e));
                return false;
            }
        }
    }
}

fn check(input: &[u8]) -> Result<u64, Violation> {
    let limits = limits_for(input);
    // Whole.
    let mut whole = Vec::new();
    let mut reader = RequestReader::new(limits);
    reader.feed(input);
    drain(&mut reader, &mut whole);
    // In pieces of 1 to 17 bytes, sizes drawn from the input's hash.
    let mut pieces = Vec::new();
    let mut reader = RequestReader::new(limits);
    let mut rng = Rng::new(fnv(input));
    let mut at = 0;
    while at < input.len() {
        let n = (1 + rng.below(17)).min(input.len() - at);
        reader.feed(&input[at..at + n]);
        at += n;
        if !drain(&mut reader, &mut pieces) {
            break;
        }
    }
    if whole != pieces {
        return Err(Violation(format!(
            "fed whole the bytes give {:?}, in pieces {:?}",
            summary(&whole),
            summary(&pieces)
        )));
    }
    // The one-shot parser agrees on the first request.
    let parser = RequestParser::new(limits);
    match (parser.parse(input), whole.first()) {
        (Ok(Parsed::Complete { request, consumed }), first) => {
            if consumed > input.len() {
                return Err(Violation(format!("consumed {consumed} of {}", input.len())));
            }
            if first != Some(&Ok(request.clone())) {
                return Err(Violation(format!(
                    "parse gives {request:?}, the reader {first:?}"
                )));
            }
        }
        (Ok(Parsed::Incomplete), None) => {}
        (Ok(Parsed::Incomplete), Some(first)) => {
            return Err(Violation(format!(
                "parse wants more bytes, the reader gives {first:?}"
            )));
        }
        (Err(e), first) => {
            if first != Some(&Err(e)) {
                return Err(Violation(format!(
                    "parse fails {e:?}, the reader {first:?}"
                )));
            }
        }
    }
    let mut outcome = 0u64;
    for r in &whole {
        let code = match r {
            Ok(req) => {
                if req.body.len() > limits.max_body_bytes {
                    return Err(Violation(format!("a body of {} bytes", req.body.len())));
                }
                let _ = req.path();
                let _ = req.query();
                let _ = req.header("host");
                match route(req.method, &req.target) {
                    Ok(r) => {
                        fnv(format!("{r:?}").split('(').next().unwrap_or("").as_bytes()) & 0xff
                    }
                    Err(e) => {
                        let _ = e.response();
                        0x100 + u64::from(e.status().code())
                    }
                }
            }
            Err(e) => {
                let status = e.status().code();
                if !(400..600).contains(&status) {
                    return Err(Violation(format!("{e:?} answers {status}")));
                }
                0x1000 + *e as u64
            }
        };
        outcome = outcome.wrapping_mul(0x1_0001).wrapping_add(code);
    }
    Ok(outcome)
}

fn summary(rs: &[Result<Request, HttpError>]) -> Vec<String> {
    rs.iter()
        .map(|r| match r {
            Ok(req) => format!(
                "{} {} ({} body bytes)",
                req.method.as_str(),
                req.target,
                req.body.len()
            ),
            Err(e) => format!("{e:?}"),
        })
        .collect()
}

const METHODS: &[&str] = &[
    "GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "TRACE", "PATCH", "get", "G@T", "",
];
const TARGETS: &[&str] = &[
    "/invoke/hello",
    "/invoke/hotel-frontend?x=1",
    "/functions",
    "/functions/hello",
    "/functions/",
    "/functions/Hello",
    "/processes",
    "/processes/12",
    "/processes/-1",
    "/processes/99999999999999999999",
    "/metrics",
    "/",
    "*",
    "http://a/b",
    "/invoke/",
    "/invoke/a/b",
    "/%00",
    "/invoke/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
];
const VERSIONS: &[&str] = &[
    "HTTP/1.1",
    "HTTP/1.0",
    "HTTP/2.0",
    "HTTP/1.10",
    "http/1.1",
    "HTTP/",
];
const HEADER_NAMES: &[&str] = &[
    "Host",
    "Content-Length",
    "content-length",
    "Transfer-Encoding",
    "Expect",
    "Connection",
    "User-Agent",
    "X-Long",
    "Bad Name",
    "",
];
const HEADER_VALUES: &[&str] = &[
    "localhost",
    "0",
    "5",
    "64",
    "65",
    "+5",
    "-1",
    "18446744073709551616",
    "99999999999999999999999",
    "chunked",
    "gzip, chunked",
    "chunked, chunked",
    "identity",
    "100-continue",
    "close",
    "keep-alive",
    "",
    " \t ",
    "a\u{80}b",
];
const LINE_ENDS: &[&[u8]] = &[b"\r\n", b"\r\n", b"\r\n", b"\r\n", b"\n", b"\r", b" \r\n"];

/// One request: a request line, headers, a body framed (or misframed) by them.
fn generate_request(rng: &mut Rng, out: &mut Vec<u8>) {
    let end = |rng: &mut Rng| *rng.pick(LINE_ENDS);
    if rng.one_in(10) {
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(rng.pick(METHODS).as_bytes());
    out.push(b' ');
    out.extend_from_slice(rng.pick(TARGETS).as_bytes());
    if rng.one_in(8) {
        out.extend_from_slice(b" extra");
    }
    out.push(b' ');
    out.extend_from_slice(rng.pick(VERSIONS).as_bytes());
    out.extend_from_slice(end(rng));
    let body: Vec<u8> = (0..rng.below(80)).map(|i| b'a' + (i % 26) as u8).collect();
    let chunked = rng.one_in(3);
    if !rng.one_in(8) {
        out.extend_from_slice(b"Host: fjord\r\n");
    }
    if chunked {
        out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
    } else if !rng.one_in(4) {
        let declared = if rng.one_in(4) {
            rng.below(100)
        } else {
            body.len()
        };
        out.extend_from_slice(format!("Content-Length: {declared}\r\n").as_bytes());
    }
    for _ in 0..rng.below(5) {
        out.extend_from_slice(rng.pick(HEADER_NAMES).as_bytes());
        out.push(if rng.one_in(12) { b' ' } else { b':' });
        if !rng.one_in(4) {
            out.push(b' ');
        }
        out.extend_from_slice(rng.pick(HEADER_VALUES).as_bytes());
        if rng.one_in(16) {
            // Obsolete line folding.
            out.extend_from_slice(b"\r\n continued");
        }
        out.extend_from_slice(end(rng));
    }
    out.extend_from_slice(end(rng));
    if chunked {
        let mut rest = &body[..];
        while !rest.is_empty() {
            let n = (1 + rng.below(20)).min(rest.len());
            let shown = if rng.one_in(12) { n + 1 } else { n };
            out.extend_from_slice(format!("{shown:x}").as_bytes());
            if rng.one_in(6) {
                out.extend_from_slice(b";ext=\"v\"");
            }
            out.extend_from_slice(end(rng));
            out.extend_from_slice(&rest[..n]);
            out.extend_from_slice(end(rng));
            rest = &rest[n..];
        }
        out.extend_from_slice(if rng.one_in(10) { b"00000" } else { b"0" });
        out.extend_from_slice(end(rng));
        if rng.one_in(4) {
            out.extend_from_slice(b"Trailer-Field: x\r\n");
        }
        out.extend_from_slice(end(rng));
    } else {
        out.extend_from_slice(&body);
    }
}

/// One to three pipelined requests.
fn generate(rng: &mut Rng, out: &mut Vec<u8>) {
    for _ in 0..1 + rng.below(3) {
        generate_request(rng, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_a_plain_pipeline() {
        let input = b"GET /metrics HTTP/1.1\r\nHost: a\r\n\r\nPOST /invoke/hello HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nworld";
        assert!(check(input).is_ok());
    }
}
