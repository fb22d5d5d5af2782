//! Status codes and the response writer.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write;

/// The status codes the gateway sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// 200
    Ok,
    /// 201
    Created,
    /// 204
    NoContent,
    /// 400
    BadRequest,
    /// 404
    NotFound,
    /// 405 (send an `Allow` header with it)
    MethodNotAllowed,
    /// 408
    RequestTimeout,
    /// 409
    Conflict,
    /// 411
    LengthRequired,
    /// 413
    PayloadTooLarge,
    /// 414
    UriTooLong,
    /// 422
    UnprocessableContent,
    /// 429
    TooManyRequests,
    /// 431
    RequestHeaderFieldsTooLarge,
    /// 500
    InternalServerError,
    /// 501
    NotImplemented,
    /// 503
    ServiceUnavailable,
    /// 504
    GatewayTimeout,
    /// 505
    HttpVersionNotSupported,
}

impl Status {
    /// The numeric code.
    pub fn code(self) -> u16 {
        match self {
            Status::Ok => 200,
            Status::Created => 201,
            Status::NoContent => 204,
            Status::BadRequest => 400,
            Status::NotFound => 404,
            Status::MethodNotAllowed => 405,
            Status::RequestTimeout => 408,
            Status::Conflict => 409,
            Status::LengthRequired => 411,
            Status::PayloadTooLarge => 413,
            Status::UriTooLong => 414,
            Status::UnprocessableContent => 422,
            Status::TooManyRequests => 429,
            Status::RequestHeaderFieldsTooLarge => 431,
            Status::InternalServerError => 500,
            Status::NotImplemented => 501,
            Status::ServiceUnavailable => 503,
            Status::GatewayTimeout => 504,
            Status::HttpVersionNotSupported => 505,
        }
    }

    /// The reason phrase.
    pub fn reason(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::Created => "Created",
            Status::NoContent => "No Content",
            Status::BadRequest => "Bad Request",
            Status::NotFound => "Not Found",
            Status::MethodNotAllowed => "Method Not Allowed",
            Status::RequestTimeout => "Request Timeout",
            Status::Conflict => "Conflict",
            Status::LengthRequired => "Length Required",
            Status::PayloadTooLarge => "Content Too Large",
            Status::UriTooLong => "URI Too Long",
            Status::UnprocessableContent => "Unprocessable Content",
            Status::TooManyRequests => "Too Many Requests",
            Status::RequestHeaderFieldsTooLarge => "Request Header Fields Too Large",
            Status::InternalServerError => "Internal Server Error",
            Status::NotImplemented => "Not Implemented",
            Status::ServiceUnavailable => "Service Unavailable",
            Status::GatewayTimeout => "Gateway Timeout",
            Status::HttpVersionNotSupported => "HTTP Version Not Supported",
        }
    }
}

/// A header the writer refuses: a bad name, a CR/LF or control byte in the value (response
/// splitting), or a `Content-Length`/`Connection` header, which the writer owns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InvalidHeader;

/// A response under construction; [`Response::write_to`] serializes it as HTTP/1.1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: Status,
    headers: Vec<(String, String)>,
    /// Body bytes (`Content-Length` is derived from them).
    pub body: Vec<u8>,
    /// Whether the connection stays open (`Connection: keep-alive` or `close`).
    pub keep_alive: bool,
}

impl Response {
    /// An empty keep-alive response with `status`.
    pub fn new(status: Status) -> Self {
        Response {
            status,
            headers: Vec::new(),
            body: Vec::new(),
            keep_alive: true,
        }
    }

    /// A response with a `text/plain` body.
    pub fn text(status: Status, body: &str) -> Self {
        let mut r = Response::new(status);
        r.headers.push((
            String::from("Content-Type"),
            String::from("text/plain; charset=utf-8"),
        ));
        r.body = Vec::from(body.as_bytes());
        r
    }

    /// The response for a request that could not be parsed: status, message, connection closes.
    pub fn for_parse_error(err: super::HttpError) -> Self {
        let mut r = Response::text(err.status(), &alloc::format!("{err}\n"));
        r.keep_alive = false;
        r
    }

    /// Adds a header; refuses names that are not tokens, values with control bytes, and the
    /// headers the writer generates itself.
    pub fn header(mut self, name: &str, value: &str) -> Result<Self, InvalidHeader> {
        let token = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        let clean = value
            .bytes()
            .all(|b| b == b'\t' || b == b' ' || b.is_ascii_graphic() || b >= 0x80);
        let owned =
            name.eq_ignore_ascii_case("content-length") || name.eq_ignore_ascii_case("connection");
        if !token || !clean || owned {
            return Err(InvalidHeader);
        }
        self.headers.push((String::from(name), String::from(value)));
        Ok(self)
    }

    /// Extra headers in insertion order.
    pub fn headers(&self) -> &[(String, String)] {
        &self.headers
    }

    /// Appends the serialized response: status line, headers, `Content-Length`, `Connection`,
    /// blank line, body.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        let mut head = String::new();
        // Writing to a String cannot fail.
        let _ = write!(
            head,
            "HTTP/1.1 {} {}\r\n",
            self.status.code(),
            self.status.reason()
        );
        for (n, v) in &self.headers {
            let _ = write!(head, "{n}: {v}\r\n");
        }
        let _ = write!(head, "Content-Length: {}\r\n", self.body.len());
        let conn = if self.keep_alive {
            "keep-alive"
        } else {
            "close"
        };
        let _ = write!(head, "Connection: {conn}\r\n\r\n");
        out.extend_from_slice(head.as_bytes());
        out.extend_from_slice(&self.body);
    }

    /// The serialized response as a new buffer.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.write_to(&mut v);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::HttpError;

    #[test]
    fn writes_exact_bytes() {
        let r = Response::text(Status::Ok, "hi")
            .header("X-Fn", "hello")
            .unwrap();
        assert_eq!(
            r.to_bytes(),
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nX-Fn: hello\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nhi"
        );
        let e = Response::for_parse_error(HttpError::BodyTooLarge);
        assert!(
            e.to_bytes()
                .starts_with(b"HTTP/1.1 413 Content Too Large\r\n")
        );
        assert!(
            e.to_bytes()
                .windows(19)
                .any(|w| w == b"Connection: close\r\n")
        );
        assert_eq!(
            Response::new(Status::NoContent).to_bytes(),
            b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nConnection: keep-alive\r\n\r\n"
        );
    }

    #[test]
    fn refuses_header_injection() {
        let r = || Response::new(Status::Ok);
        assert_eq!(r().header("X", "a\r\nSet-Cookie: x"), Err(InvalidHeader));
        assert_eq!(r().header("X Y", "a"), Err(InvalidHeader));
        assert_eq!(r().header("", "a"), Err(InvalidHeader));
        assert_eq!(r().header("content-length", "5"), Err(InvalidHeader));
        assert!(r().header("Allow", "GET, PUT").is_ok());
    }

    #[test]
    fn reason_phrases_cover_all_codes() {
        for s in [
            Status::Ok,
            Status::MethodNotAllowed,
            Status::HttpVersionNotSupported,
        ] {
            assert!(!s.reason().is_empty() && (200..600).contains(&s.code()));
        }
    }
}
