//! One TCP connection of the gateway: received bytes in, serialized responses out.
//!
//! The network layer feeds what it receives with [`Connection::receive`], sends
//! [`Connection::output`] as the socket accepts it ([`Connection::sent`]), and closes the socket
//! once [`Connection::finished`] says so. Pipelined requests are answered in order; after a parse
//! error or a request with `Connection: close` the answer is sent and the connection ends.

use super::{FunctionService, Gateway, Sample};
use crate::http::{Limits, RequestReader};
use alloc::vec::Vec;

/// The state of one gateway connection.
#[derive(Clone, Debug)]
pub struct Connection {
    reader: RequestReader,
    out: Vec<u8>,
    sent: usize,
    closing: bool,
}

impl Connection {
    /// A new connection whose requests are parsed with `limits`.
    pub fn new(limits: Limits) -> Self {
        Connection {
            reader: RequestReader::new(limits),
            out: Vec::new(),
            sent: 0,
            closing: false,
        }
    }

    /// Takes received bytes and queues the responses to every request they complete.
    pub fn receive<S: FunctionService>(
        &mut self,
        bytes: &[u8],
        gateway: &mut Gateway<S>,
        kernel: &impl Fn() -> Vec<Sample>,
    ) {
        if self.closing {
            return;
        }
        self.reader.feed(bytes);
        loop {
            match self.reader.next_request() {
                Ok(Some(req)) => {
                    let resp = gateway.handle(&req, kernel);
                    resp.write_to(&mut self.out);
                    if !resp.keep_alive {
                        self.closing = true;
                        break;
                    }
                }
                Ok(None) => {
                    if self.reader.is_closed() {
                        self.closing = true;
                    }
                    break;
                }
                Err(e) => {
                    gateway.parse_error(e).write_to(&mut self.out);
                    self.closing = true;
                    break;
                }
            }
        }
    }

    /// Bytes waiting to be sent.
    pub fn output(&self) -> &[u8] {
        &self.out[self.sent..]
    }

    /// Records that the first `n` bytes of [`Connection::output`] were sent.
    pub fn sent(&mut self, n: usize) {
        self.sent = (self.sent + n).min(self.out.len());
        if self.sent == self.out.len() {
            self.out.clear();
            self.sent = 0;
        }
    }

    /// Whether everything is sent and the connection should now be closed.
    pub fn finished(&self) -> bool {
        self.closing && self.output().is_empty()
    }
}
