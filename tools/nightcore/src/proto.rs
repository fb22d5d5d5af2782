//! The messages on the pipes between the engine and the workers, and [`Framer`], which cuts
//! a byte stream read from a pipe into messages.
//!
//! A message is a 24-byte little-endian [`Header`] followed by `len` payload bytes. An invoke
//! carries the request and the callee's ArgBuf capacity; a reply carries the response (or an
//! error status and no payload). Ids are chosen by whoever waits for the reply: a worker's own
//! numbering for the calls it makes, the engine's for the calls it dispatches.

use fjord_libos::function::FnError;

/// Bytes of a [`Header`] on the wire.
pub const HEADER: usize = 24;

/// The largest ArgBuf capacity a call may ask for (the workloads use 4 and 8 KiB).
pub const MAX_CAPACITY: usize = 64 * 1024;

/// The largest payload of a message: a request or response fits in its ArgBuf.
pub const MAX_PAYLOAD: usize = MAX_CAPACITY;

/// What a message asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Run function `func` on the payload, in an ArgBuf of `capacity` bytes.
    Invoke,
    /// The response to call `id` (payload), or its error (`status`).
    Reply,
}

/// A message's fixed part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Invoke or reply.
    pub kind: Kind,
    /// 0 for success, else the [`FnError`] code of a failed call (replies only).
    pub status: u8,
    /// The callee's index in the workload's function table (invokes only).
    pub func: u16,
    /// Payload bytes following the header.
    pub len: u32,
    /// The call's id, chosen by the side that waits for the reply.
    pub id: u64,
    /// The callee's ArgBuf capacity in bytes (invokes only).
    pub capacity: u32,
}

/// A malformed message: the stream cannot be trusted any more.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadMessage;

impl Header {
    /// An invoke of `func` with a request of `len` bytes.
    pub fn invoke(id: u64, func: u16, capacity: u32, len: usize) -> Header {
        Header {
            kind: Kind::Invoke,
            status: 0,
            func,
            len: len as u32,
            id,
            capacity,
        }
    }

    /// The reply to call `id`: `Ok(len)` for a response of `len` bytes, or the error.
    pub fn reply(id: u64, result: Result<usize, FnError>) -> Header {
        let (status, len) = match result {
            Ok(len) => (0, len as u32),
            Err(e) => (e as i64 as u8, 0),
        };
        Header {
            kind: Kind::Reply,
            status,
            func: 0,
            len,
            id,
            capacity: 0,
        }
    }

    /// The wire form.
    pub fn encode(&self) -> [u8; HEADER] {
        let mut b = [0u8; HEADER];
        b[0] = match self.kind {
            Kind::Invoke => 1,
            Kind::Reply => 2,
        };
        b[1] = self.status;
        b[2..4].copy_from_slice(&self.func.to_le_bytes());
        b[4..8].copy_from_slice(&self.len.to_le_bytes());
        b[8..16].copy_from_slice(&self.id.to_le_bytes());
        b[16..20].copy_from_slice(&self.capacity.to_le_bytes());
        b
    }

    /// Parses the wire form; rejects unknown kinds, statuses and oversized payloads.
    pub fn decode(b: &[u8; HEADER]) -> Result<Header, BadMessage> {
        let kind = match b[0] {
            1 => Kind::Invoke,
            2 => Kind::Reply,
            _ => return Err(BadMessage),
        };
        let word = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let mut id = [0u8; 8];
        id.copy_from_slice(&b[8..16]);
        let h = Header {
            kind,
            status: b[1],
            func: u16::from_le_bytes([b[2], b[3]]),
            len: word(4),
            id: u64::from_le_bytes(id),
            capacity: word(16),
        };
        let bad_status = h.status != 0 && status_error(h.status).is_none();
        if h.len as usize > MAX_PAYLOAD || bad_status || h.capacity as usize > MAX_CAPACITY {
            return Err(BadMessage);
        }
        Ok(h)
    }

    /// A reply's outcome: `Ok(())` or the callee's error.
    pub fn result(&self) -> Result<(), FnError> {
        match status_error(self.status) {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }
}

/// The [`FnError`] with code `status` (0 is success: `None`).
fn status_error(status: u8) -> Option<FnError> {
    FnError::ALL
        .into_iter()
        .find(|e| *e as i64 == i64::from(status))
}

/// Buffers the bytes read from one pipe and hands out whole messages.
#[derive(Debug, Default)]
pub struct Framer {
    buf: Vec<u8>,
    /// Start of the first unconsumed byte.
    head: usize,
    /// End of the bytes read so far.
    tail: usize,
}

impl Framer {
    /// A framer with room for the largest message and then some.
    pub fn new() -> Framer {
        Framer {
            buf: vec![0; 2 * (HEADER + MAX_PAYLOAD)],
            head: 0,
            tail: 0,
        }
    }

    /// The free room at the end for the next read (after moving unconsumed bytes to the
    /// front when needed, so that a whole message always fits).
    pub fn room(&mut self) -> &mut [u8] {
        if self.head == self.tail {
            self.head = 0;
            self.tail = 0;
        } else if self.buf.len() - self.tail < HEADER + MAX_PAYLOAD {
            self.buf.copy_within(self.head..self.tail, 0);
            self.tail -= self.head;
            self.head = 0;
        }
        &mut self.buf[self.tail..]
    }

    /// Records that `n` bytes were read into [`Framer::room`].
    pub fn filled(&mut self, n: usize) {
        self.tail = (self.tail + n).min(self.buf.len());
    }

    /// Appends `bytes` (as if read), for tests.
    pub fn push(&mut self, bytes: &[u8]) {
        let room = self.room();
        room[..bytes.len()].copy_from_slice(bytes);
        self.filled(bytes.len());
    }

    /// The next whole message: its header and the payload's range in [`Framer::bytes`];
    /// `Ok(None)` until one has arrived completely.
    pub fn next_message(
        &mut self,
    ) -> Result<Option<(Header, core::ops::Range<usize>)>, BadMessage> {
        if self.tail - self.head < HEADER {
            return Ok(None);
        }
        let mut raw = [0u8; HEADER];
        raw.copy_from_slice(&self.buf[self.head..self.head + HEADER]);
        let h = Header::decode(&raw)?;
        let start = self.head + HEADER;
        let end = start + h.len as usize;
        if end > self.tail {
            return Ok(None);
        }
        self.head = end;
        Ok(Some((h, start..end)))
    }

    /// The buffer that [`Framer::next_message`]'s ranges index (valid until the next read).
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(h: Header, payload: &[u8]) -> Vec<u8> {
        let mut m = h.encode().to_vec();
        m.extend_from_slice(payload);
        m
    }

    #[test]
    fn headers_round_trip_and_bad_ones_are_refused() {
        let i = Header::invoke(7, 3, 8192, 41);
        assert_eq!(Header::decode(&i.encode()), Ok(i));
        let r = Header::reply(9, Err(FnError::BadRequest));
        assert_eq!(
            Header::decode(&r.encode()).unwrap().result(),
            Err(FnError::BadRequest)
        );
        assert_eq!(Header::reply(9, Ok(5)).result(), Ok(()));
        let mut bad = i.encode();
        bad[0] = 3;
        assert_eq!(Header::decode(&bad), Err(BadMessage));
        let mut big = i.encode();
        big[4..8].copy_from_slice(&(MAX_PAYLOAD as u32 + 1).to_le_bytes());
        assert_eq!(Header::decode(&big), Err(BadMessage));
        let mut status = r.encode();
        status[1] = 99;
        assert_eq!(Header::decode(&status), Err(BadMessage));
    }

    #[test]
    fn framer_cuts_partial_and_merged_reads_into_messages() {
        let a = message(Header::invoke(1, 0, 4096, 3), b"abc");
        let b = message(Header::reply(2, Ok(2)), b"ok");
        let mut f = Framer::new();
        f.push(&a[..10]);
        assert_eq!(f.next_message(), Ok(None));
        f.push(&a[10..a.len() - 1]);
        assert_eq!(f.next_message(), Ok(None));
        let mut rest = vec![a[a.len() - 1]];
        rest.extend_from_slice(&b);
        f.push(&rest);
        let (h, r) = f.next_message().unwrap().unwrap();
        assert_eq!((h.id, &f.bytes()[r]), (1, &b"abc"[..]));
        let (h, r) = f.next_message().unwrap().unwrap();
        assert_eq!((h.kind, &f.bytes()[r]), (Kind::Reply, &b"ok"[..]));
        assert_eq!(f.next_message(), Ok(None));
    }

    #[test]
    fn framer_keeps_room_for_a_whole_message() {
        let big = message(Header::reply(1, Ok(MAX_PAYLOAD)), &vec![7u8; MAX_PAYLOAD]);
        let mut f = Framer::new();
        for _ in 0..5 {
            f.push(&big[..100]);
            assert!(f.room().len() >= HEADER + MAX_PAYLOAD);
            f.push(&big[100..]);
            let (_, r) = f.next_message().unwrap().unwrap();
            assert_eq!(r.len(), MAX_PAYLOAD);
        }
    }
}
