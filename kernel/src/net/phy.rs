//! The virtio-net card as a smoltcp `Device`.
//!
//! Every receive buffer stays posted to the card: a received frame is copied out and its buffer
//! goes straight back to the receive queue, so the receive token owns its bytes and the
//! transmit token alone borrows the card. Frames are first staged ([`NetDevice::stage`]) so the
//! network loop can read their headers and pick the socket set before the stack takes them.
//!
//! Transmission does not wait for the card: a frame is written into a buffer of its own, posted,
//! and its buffer is taken back once the card reports it sent (checked before each transmission
//! and each receive). Only when every descriptor is in flight does a transmission wait for one.

use super::nic::{BUFFER_LEN, Nic, QUEUE_SIZE};
use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;
use smoltcp::phy::{self, DeviceCapabilities, Medium};
use smoltcp::time::Instant;

/// Largest IP packet (standard Ethernet MTU).
const MTU: usize = 1500;
/// Ethernet header bytes in front of the IP packet.
const ETHERNET_HEADER: usize = 14;

/// A buffer the card may read or write; boxed, so it stays where the card was told it is.
type Buffer = Box<[u8]>;

/// The card with its buffers and packet counters.
pub struct Card {
    nic: Nic,
    /// Receive buffers posted to the card, by the token it gave for each.
    posted: Vec<Option<Buffer>>,
    /// Frames in flight to the card, by token: the buffer and the bytes posted from it.
    in_flight: Vec<Option<(Buffer, usize)>>,
    /// Transmit buffers the card gave back, for the next frames.
    spare: Vec<Buffer>,
    /// Frames received.
    pub rx_packets: u64,
    /// Frames sent (posted to the card).
    pub tx_packets: u64,
    /// Frames the driver failed to send or receive.
    pub errors: u64,
}

/// The card plus the frame the stack is about to take.
pub struct NetDevice {
    card: Card,
    /// A received frame the stack has not taken yet.
    staged: Option<Vec<u8>>,
}

impl NetDevice {
    /// Wraps an initialised card and posts its receive buffers.
    pub fn new(nic: Nic) -> Self {
        let mut card = Card {
            nic,
            posted: (0..QUEUE_SIZE).map(|_| None).collect(),
            in_flight: (0..QUEUE_SIZE).map(|_| None).collect(),
            spare: Vec::new(),
            rx_packets: 0,
            tx_packets: 0,
            errors: 0,
        };
        for _ in 0..QUEUE_SIZE {
            card.post(vec![0; BUFFER_LEN].into_boxed_slice());
        }
        NetDevice { card, staged: None }
    }

    /// Frames received so far.
    pub fn rx_packets(&self) -> u64 {
        self.card.rx_packets
    }

    /// Frames sent so far.
    pub fn tx_packets(&self) -> u64 {
        self.card.tx_packets
    }

    /// Frames the driver failed to send or receive.
    pub fn errors(&self) -> u64 {
        self.card.errors
    }

    /// The next received frame, kept until the stack takes it (`receive` hands out only a
    /// staged frame); `None` if none has arrived.
    pub fn stage(&mut self) -> Option<&[u8]> {
        if self.staged.is_none() {
            self.card.reclaim();
            self.staged = self.card.fetch();
        }
        self.staged.as_deref()
    }

    /// The card's MAC address.
    pub fn mac(&self) -> [u8; 6] {
        self.card.nic.mac_address()
    }
}

impl Card {
    /// Posts `buf` to the receive queue.
    fn post(&mut self, mut buf: Buffer) {
        // SAFETY: `buf` is kept in `posted` under the token until the card hands it back
        // (`fetch`), and nothing touches it meanwhile; the box keeps it in place.
        match unsafe { self.nic.receive_begin(&mut buf) } {
            Ok(token) => match self.posted.get_mut(usize::from(token)) {
                Some(slot) => *slot = Some(buf),
                None => {
                    self.errors += 1;
                    log::error!("net: the card gave receive token {token} (queue {QUEUE_SIZE})");
                    // The card may write into it: it must never be freed.
                    let _ = Box::leak(buf);
                }
            },
            Err(e) => {
                self.errors += 1;
                log::warn!("net: posting a receive buffer failed: {e:?}");
            }
        }
    }

    /// Takes a frame from the card and posts its buffer again.
    fn fetch(&mut self) -> Option<Vec<u8>> {
        let token = self.nic.poll_receive()?;
        let Some(mut buf) = self
            .posted
            .get_mut(usize::from(token))
            .and_then(Option::take)
        else {
            self.errors += 1;
            log::error!("net: the card returned receive token {token}, which holds no buffer");
            return None;
        };
        // SAFETY: `buf` is the buffer posted under `token`.
        let frame = match unsafe { self.nic.receive_complete(token, &mut buf) } {
            Ok((header, len)) => buf.get(header..header + len).map(Vec::from),
            Err(e) => {
                log::warn!("net: receive failed: {e:?}");
                None
            }
        };
        self.post(buf);
        match frame {
            Some(_) => self.rx_packets += 1,
            None => self.errors += 1,
        }
        frame
    }

    /// Takes back the buffers of every frame the card has sent.
    fn reclaim(&mut self) {
        while let Some(token) = self.nic.poll_transmit() {
            let Some((buf, len)) = self
                .in_flight
                .get_mut(usize::from(token))
                .and_then(Option::take)
            else {
                self.errors += 1;
                log::error!(
                    "net: the card returned transmit token {token}, which is not in flight"
                );
                return;
            };
            // SAFETY: `buf[..len]` is what was posted under `token`.
            if let Err(e) = unsafe { self.nic.transmit_complete(token, &buf[..len]) } {
                self.errors += 1;
                log::warn!("net: completing a transmission failed: {e:?}");
            }
            self.spare.push(buf);
        }
    }

    /// Posts a frame of `len` bytes that `fill` writes; waits only while every descriptor is in
    /// flight.
    fn transmit<R>(&mut self, len: usize, fill: impl FnOnce(&mut [u8]) -> R) -> R {
        self.reclaim();
        let mut buf = self
            .spare
            .pop()
            .unwrap_or_else(|| vec![0; BUFFER_LEN].into_boxed_slice());
        let header = match self.nic.fill_buffer_header(&mut buf) {
            Ok(h) => h,
            Err(e) => {
                log::warn!("net: writing a frame's header failed: {e:?}");
                0
            }
        };
        if header + len > buf.len() {
            // Larger than the MTU: the stack never asks for this.
            buf = vec![0; header + len].into_boxed_slice();
            let _ = self.nic.fill_buffer_header(&mut buf);
        }
        let total = header + len;
        let r = fill(&mut buf[header..total]);
        loop {
            // SAFETY: `buf` is kept in `in_flight` under the token until the card reports it
            // sent (`reclaim`), and nothing touches it meanwhile; the box keeps it in place.
            match unsafe { self.nic.transmit_begin(&buf[..total]) } {
                Ok(token) => {
                    match self.in_flight.get_mut(usize::from(token)) {
                        Some(slot) => *slot = Some((buf, total)),
                        None => {
                            self.errors += 1;
                            log::error!("net: the card gave transmit token {token}");
                            let _ = Box::leak(buf);
                        }
                    }
                    self.tx_packets += 1;
                    return r;
                }
                Err(virtio_drivers::Error::QueueFull) => {
                    core::hint::spin_loop();
                    self.reclaim();
                }
                Err(e) => {
                    self.errors += 1;
                    log::warn!("net: send failed: {e:?}");
                    self.spare.push(buf);
                    return r;
                }
            }
        }
    }
}

/// A received frame.
pub struct RxToken(Vec<u8>);

/// Permission to send one frame.
pub struct TxToken<'a>(&'a mut Card);

impl phy::Device for NetDevice {
    type RxToken<'a> = RxToken;
    type TxToken<'a> = TxToken<'a>;

    fn receive(&mut self, _now: Instant) -> Option<(RxToken, TxToken<'_>)> {
        let frame = self.staged.take()?;
        Some((RxToken(frame), TxToken(&mut self.card)))
    }

    fn transmit(&mut self, _now: Instant) -> Option<TxToken<'_>> {
        Some(TxToken(&mut self.card))
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        caps.max_transmission_unit = MTU + ETHERNET_HEADER;
        caps.max_burst_size = Some(1);
        caps
    }
}

impl phy::RxToken for RxToken {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(&self.0)
    }
}

impl phy::TxToken for TxToken<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        self.0.transmit(len, f)
    }
}
