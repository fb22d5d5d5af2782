//! Request parse errors and the status code each one maps to.

use super::response::Status;
use core::fmt;

/// Why a request could not be parsed; each maps to a status code with [`HttpError::status`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HttpError {
    /// The request line is not `METHOD SP origin-form SP HTTP-version CRLF` (400).
    BadRequestLine,
    /// A header line is malformed: no colon, bad name, whitespace before the colon, obsolete
    /// line folding, a control byte or non-UTF-8 in the value (400).
    BadHeader,
    /// A line ends in a bare LF or a stray CR (400).
    BadLineEnding,
    /// `Content-Length` is not a decimal number, overflows, or appears twice with different
    /// values (400).
    BadContentLength,
    /// Both `Content-Length` and `Transfer-Encoding` are present (400, RFC 9112 §6.3: a
    /// request-smuggling vector).
    ConflictingFraming,
    /// `Transfer-Encoding` is empty, malformed, applies `chunked` twice, or does not end in
    /// `chunked` (400, RFC 9112 §6.3).
    BadTransferEncoding,
    /// A chunked body is malformed: a chunk-size that is not hex or has too many digits, a
    /// missing CRLF, a bad extension or trailer line (400).
    BadChunkedBody,
    /// An HTTP/1.1 request lacks `Host` or carries it twice (400, RFC 9112 §3.2).
    BadHost,
    /// The request line alone exceeds the header limit (414).
    UriTooLong,
    /// The request line plus headers exceed the header byte limit (431).
    HeaderTooLarge,
    /// More header lines than the header count limit (431).
    TooManyHeaders,
    /// `Content-Length`, or the decoded size of a chunked body, exceeds the body limit (413).
    BodyTooLarge,
    /// A syntactically valid method the gateway does not implement, e.g. `TRACE` (501).
    UnsupportedMethod,
    /// A transfer coding other than `chunked`, such as `gzip` (501, RFC 9112 §6.1).
    UnsupportedTransferEncoding,
    /// An HTTP version other than 1.0 and 1.1 (505).
    UnsupportedVersion,
}

impl HttpError {
    /// The status code the gateway answers with (then it closes the connection).
    pub fn status(self) -> Status {
        match self {
            HttpError::BadRequestLine
            | HttpError::BadHeader
            | HttpError::BadLineEnding
            | HttpError::BadContentLength
            | HttpError::ConflictingFraming
            | HttpError::BadTransferEncoding
            | HttpError::BadChunkedBody
            | HttpError::BadHost => Status::BadRequest,
            HttpError::UriTooLong => Status::UriTooLong,
            HttpError::HeaderTooLarge | HttpError::TooManyHeaders => {
                Status::RequestHeaderFieldsTooLarge
            }
            HttpError::BodyTooLarge => Status::PayloadTooLarge,
            HttpError::UnsupportedMethod | HttpError::UnsupportedTransferEncoding => {
                Status::NotImplemented
            }
            HttpError::UnsupportedVersion => Status::HttpVersionNotSupported,
        }
    }
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HttpError::BadRequestLine => "malformed request line",
            HttpError::BadHeader => "malformed header line",
            HttpError::BadLineEnding => "lines must end in CRLF",
            HttpError::BadContentLength => "invalid Content-Length",
            HttpError::ConflictingFraming => "both Content-Length and Transfer-Encoding",
            HttpError::BadTransferEncoding => "invalid Transfer-Encoding",
            HttpError::BadChunkedBody => "malformed chunked body",
            HttpError::BadHost => "HTTP/1.1 request needs exactly one Host header",
            HttpError::UriTooLong => "request line too long",
            HttpError::HeaderTooLarge => "header section too large",
            HttpError::TooManyHeaders => "too many header fields",
            HttpError::BodyTooLarge => "request body too large",
            HttpError::UnsupportedMethod => "method not implemented",
            HttpError::UnsupportedTransferEncoding => {
                "transfer coding not implemented; send chunked or Content-Length"
            }
            HttpError::UnsupportedVersion => "HTTP version not supported",
        })
    }
}
