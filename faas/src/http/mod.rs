//! The HTTP/1.1 gateway's pure parts: an incremental request parser, a response writer and the
//! API router.
//!
//! Modules: [`request`] (parser, limits, keep-alive), [`chunked`] (chunked body decoding),
//! [`reader`] (per-connection buffering, `100 Continue`), [`response`] (status codes and the
//! writer), [`router`] (the API's typed routes), [`error`] (parse errors and their status codes).
//!
//! Supported subset, chosen for a FaaS gateway: origin-form targets, CRLF line endings, bodies
//! framed by `Content-Length` or `Transfer-Encoding: chunked` (what `curl -T -` sends; chunk
//! extensions and trailer fields are accepted and ignored, the decoded size is held to the same
//! limit as a `Content-Length` body). Other transfer codings are refused with 501 Not
//! Implemented (RFC 9112 §6.1); a request carrying both `Content-Length` and `Transfer-Encoding`
//! is refused with 400 (request smuggling, RFC 9112 §6.3). `Expect: 100-continue` is answered
//! with an interim `100 Continue` once the head has been accepted (see [`RequestReader`]), never
//! for a request refused on its head alone. Obsolete line folding and bare-LF line endings are
//! refused with 400. After any parse error the connection must be closed: the byte stream can
//! no longer be framed.

pub mod chunked;
pub mod error;
pub mod reader;
pub mod request;
pub mod response;
pub mod router;

pub use chunked::ChunkedDecoder;
pub use error::HttpError;
pub use reader::RequestReader;
pub use request::{Framing, Head, Header, Limits, Method, Parsed, Request, RequestParser, Version};
pub use response::{Response, Status};
pub use router::{Route, RouteError, route};
