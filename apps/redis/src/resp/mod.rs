//! RESP2, the protocol Redis clients speak: the incremental request parser ([`parse()`],
//! [`RequestParser`]) and the reply encoders ([`Reply`], [`write_bulk`] and the others).
//!
//! - [`parse`](mod@parse), multibulk and inline requests, with Redis's protocol errors;
//! - `inline`, splitting an inline line into arguments (quotes and escapes);
//! - [`encode`], the replies.

pub mod encode;
mod inline;
pub mod parse;

pub use encode::{
    Reply, write_array_len, write_bulk, write_error, write_integer, write_null_array,
    write_null_bulk, write_status,
};
pub use inline::split_args;
pub use parse::{
    ARG_OVERHEAD, MAX_BULK, MAX_INLINE, MAX_MULTIBULK, ProtocolError, QUERY_BUFFER_LIMIT, Request,
    RequestParser, parse,
};
