//! One TCP connection of the gateway: received bytes in, serialized responses out.
//!
//! The network layer feeds what it receives with [`Connection::receive`], sends
//! [`Connection::output`] as the socket accepts it ([`Connection::sent`]), and closes the socket
//! once [`Connection::finished`] says so. Pipelined requests are answered in order; after a parse
//! error or a request with `Connection: close` the answer is sent and the connection ends. A
//! request with `Expect: 100-continue` whose head is acceptable gets `HTTP/1.1 100 Continue`
//! as soon as its head is parsed (once), then its final response when its body is complete; one
//! that matches no route (404, 405, 400 for a bad name) gets that answer at once instead, and
//! the connection closes.
//!
//! An invocation the runtime runs elsewhere leaves the connection [`Connection::waiting`]: the
//! requests behind it stay unparsed until [`Connection::poll`] finds the invocation finished,
//! so one slow function holds up only its own connection. Likewise, while [`OUTPUT_LIMIT`]
//! bytes of responses wait to be sent, the connection takes no more requests
//! ([`Connection::wants_input`]): a client that pipelines requests without reading the
//! answers is held back by TCP flow control instead of growing the output without bound.

use super::timeouts::Phase;
use super::{Answer, FunctionService, Gateway, InvocationId, PendingAnswer, Sample};
use crate::http::{Limits, RequestReader, Response, Status};
use alloc::vec::Vec;

/// Bytes of unsent responses past which a connection takes no more requests.
pub const OUTPUT_LIMIT: usize = 16 * 1024;

/// The state of one gateway connection.
#[derive(Clone, Debug)]
pub struct Connection {
    reader: RequestReader,
    out: Vec<u8>,
    sent: usize,
    closing: bool,
    pending: Option<PendingAnswer>,
    answered: bool,
}

impl Connection {
    /// A new connection whose requests are parsed with `limits`.
    pub fn new(limits: Limits) -> Self {
        Connection {
            reader: RequestReader::new(limits),
            out: Vec::new(),
            sent: 0,
            closing: false,
            pending: None,
            answered: false,
        }
    }

    /// Takes received bytes and queues the responses to every request they complete (up to
    /// the first one whose invocation keeps running).
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
        self.answer_requests(gateway, kernel);
    }

    /// Whether a request's answer waits for a running invocation.
    pub fn waiting(&self) -> bool {
        self.pending.is_some()
    }

    /// The invocation whose answer the connection waits for, if any.
    pub fn waiting_for(&self) -> Option<InvocationId> {
        self.pending.as_ref().map(PendingAnswer::id)
    }

    /// Whether the connection takes more received bytes now: no invocation runs and less than
    /// [`OUTPUT_LIMIT`] bytes wait to be sent.
    pub fn wants_input(&self) -> bool {
        !self.waiting() && self.output().len() < OUTPUT_LIMIT
    }

    /// Queues the response of the running invocation if it has finished, then answers the
    /// requests received behind it; returns whether the invocation had finished.
    pub fn poll<S: FunctionService>(
        &mut self,
        gateway: &mut Gateway<S>,
        kernel: &impl Fn() -> Vec<Sample>,
    ) -> bool {
        let Some(p) = &self.pending else {
            return false;
        };
        let Some(resp) = gateway.poll_answer(p) else {
            return false;
        };
        self.pending = None;
        if self.emit(&resp) {
            self.answer_requests(gateway, kernel);
        }
        true
    }

    /// The connection's phase for its deadlines: [`Phase::Busy`] while an invocation runs,
    /// [`Phase::Send`] while output waits to be sent, [`Phase::Busy`] while the connection
    /// closes, [`Phase::Body`] while a body arrives, [`Phase::Head`] while a head does (or a
    /// new connection has sent nothing), else [`Phase::Idle`].
    pub fn phase(&self) -> Phase {
        if self.pending.is_some() {
            Phase::Busy
        } else if !self.output().is_empty() {
            Phase::Send
        } else if self.closing {
            Phase::Busy
        } else if self.reader.reading_body() {
            Phase::Body
        } else if self.reader.buffered() > 0 || !self.answered {
            Phase::Head
        } else {
            Phase::Idle
        }
    }

    /// The phase when `unacknowledged` bytes already handed to the transport have not been
    /// taken by the client yet: an otherwise idle connection is [`Phase::Send`] until they are.
    pub fn phase_after(&self, unacknowledged: usize) -> Phase {
        match self.phase() {
            Phase::Idle if unacknowledged > 0 => Phase::Send,
            phase => phase,
        }
    }

    /// Refuses the connection (the gateway is full): queues a `503` that closes it.
    pub fn refuse<S: FunctionService>(&mut self, gateway: &mut Gateway<S>) {
        gateway.count_rejected();
        let text = "too many connections, retry later\n";
        let mut r = Response::text(Status::ServiceUnavailable, text)
            .header("Retry-After", "1")
            .unwrap_or_else(|_| Response::text(Status::ServiceUnavailable, text));
        r.keep_alive = false;
        self.finish_with(&r);
    }

    /// Ends the connection because `phase` took too long: a client that was sending a request
    /// gets `408` first; an idle one, or one that stopped reading its responses, is just
    /// closed (its unsent responses are dropped).
    pub fn time_out<S: FunctionService>(&mut self, phase: Phase, gateway: &mut Gateway<S>) {
        gateway.count_timed_out(phase);
        if matches!(phase, Phase::Head | Phase::Body) && self.pending.is_none() {
            let mut r = Response::text(Status::RequestTimeout, "request timed out\n");
            r.keep_alive = false;
            self.finish_with(&r);
        } else {
            self.abandon(gateway);
        }
    }

    /// Gives up its place to a new connection (the gateway is full and this one is idle or
    /// slow): it is closed without an answer.
    pub fn evict<S: FunctionService>(&mut self, gateway: &mut Gateway<S>) {
        gateway.count_evicted();
        self.abandon(gateway);
    }

    /// Queues `resp` as the connection's last output.
    fn finish_with(&mut self, resp: &Response) {
        if !self.closing {
            resp.write_to(&mut self.out);
        }
        self.closing = true;
    }

    /// Ends the connection without its answers: a running invocation is abandoned and unsent
    /// output dropped.
    pub fn abandon<S: FunctionService>(&mut self, gateway: &mut Gateway<S>) {
        if let Some(p) = self.pending.take() {
            gateway.abandon(p);
        }
        self.out.clear();
        self.sent = 0;
        self.closing = true;
    }

    fn answer_requests<S: FunctionService>(
        &mut self,
        gateway: &mut Gateway<S>,
        kernel: &impl Fn() -> Vec<Sample>,
    ) {
        while self.pending.is_none() {
            let next = self.reader.next_request();
            // An accepted head that asked for `Expect: 100-continue`: refuse it at once if it
            // can go nowhere (the client then need not send its body; the connection closes,
            // as the unread body can no longer be framed), else tell the client to send the
            // body (even if it already has: the interim response is harmless), ahead of the
            // final response.
            if let Some((method, target)) = self.reader.take_continue() {
                if let Some(refusal) = gateway.refuse_before_body(method, &target) {
                    refusal.write_to(&mut self.out);
                    self.closing = true;
                    break;
                }
                self.out.extend_from_slice(crate::http::reader::CONTINUE);
            }
            match next {
                Ok(Some(req)) => {
                    self.answered = true;
                    match gateway.answer(&req, kernel) {
                        Answer::Ready(resp) => {
                            if !self.emit(&resp) {
                                break;
                            }
                        }
                        Answer::Pending(p) => self.pending = Some(p),
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

    /// Queues `resp`; returns whether the connection stays open for more requests.
    fn emit(&mut self, resp: &crate::http::Response) -> bool {
        resp.write_to(&mut self.out);
        if !resp.keep_alive {
            self.closing = true;
        }
        resp.keep_alive
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
        self.closing && self.pending.is_none() && self.output().is_empty()
    }
}
