//! The virtio-net card: finding it (virtio-mmio slots on microvm, PCI bus 0 on q35) and its
//! buffers ([`Card`]), with the unsafe calls virtio-drivers' API asks for kept here behind a safe
//! interface.
//!
//! Every receive buffer stays posted to the card: a received frame is copied out and its buffer
//! goes straight back to the receive queue. Transmission does not wait for the card: a frame is
//! written into a buffer of its own, posted, and its buffer is taken back once the card reports
//! it sent (checked before each transmission and each receive). Only when every descriptor is
//! in flight does a transmission wait for one.
//!
//! The card is found by [`super::virtio::find`].

use crate::mm::dma::FjordHal;
use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;
use virtio_drivers::device::net::VirtIONetRaw;
use virtio_drivers::transport::SomeTransport;

/// Descriptors per virtqueue: receive buffers posted, and frames in flight to the card (QEMU's
/// virtio-net queues hold 256).
const QUEUE_SIZE: usize = 256;
/// Bytes per receive or transmit buffer: an Ethernet frame plus the virtio-net header.
const BUFFER_LEN: usize = 2048;

/// The network card as virtio-drivers drives it.
type Nic = VirtIONetRaw<FjordHal, SomeTransport<'static>, QUEUE_SIZE>;

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

/// Finds and initialises the first virtio-net card, its receive buffers posted, and names its
/// bus; `None` (after logging why) if there is none.
pub fn find() -> Option<(Card, &'static str)> {
    let (transport, bus) = super::virtio::find(super::virtio::Kind::Net)?;
    match VirtIONetRaw::new(transport) {
        Ok(nic) => Some((Card::new(nic), bus)),
        Err(e) => {
            log::warn!("net: initialising the virtio-net card failed: {e:?}");
            None
        }
    }
}

impl Card {
    /// Wraps an initialised card and posts its receive buffers.
    fn new(nic: Nic) -> Card {
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
        card
    }

    /// The card's MAC address.
    pub fn mac(&self) -> [u8; 6] {
        self.nic.mac_address()
    }

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
    pub fn fetch(&mut self) -> Option<Vec<u8>> {
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
    pub fn reclaim(&mut self) {
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
    pub fn transmit<R>(&mut self, len: usize, fill: impl FnOnce(&mut [u8]) -> R) -> R {
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
