//! The HTTP/1.1 gateway's pure parts: an incremental request parser, a response writer and the
//! API router.
//!
//! Modules: [`request`] (parser, limits, keep-alive), [`reader`] (per-connection buffering),
//! [`response`] (status codes and the writer), [`router`] (the API's typed routes), [`error`]
//! (parse errors and their status codes).
//!
//! Supported subset, chosen for a FaaS gateway: origin-form targets, `Content-Length` bodies,
//! CRLF line endings. `Transfer-Encoding` (chunked) request bodies are refused with
//! 501 Not Implemented, as RFC 9112 §6.1 allows for a transfer coding the server does not
//! implement; clients must send `Content-Length`. Obsolete line folding and bare-LF line endings
//! are refused with 400. After any parse error the connection must be closed: the byte stream can
//! no longer be framed.

pub mod error;
pub mod reader;
pub mod request;
pub mod response;
pub mod router;

pub use error::HttpError;
pub use reader::RequestReader;
pub use request::{Header, Limits, Method, Parsed, Request, RequestParser, Version};
pub use response::{Response, Status};
pub use router::{Route, RouteError, route};
