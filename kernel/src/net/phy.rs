//! The virtio-net card ([`crate::drivers::virtio_net::Card`]) as a smoltcp `Device`.
//!
//! A received frame is copied out of the card's buffer, so the receive token owns its bytes and
//! the transmit token alone borrows the card. Frames are first staged ([`NetDevice::stage`]) so
//! the network loop can read their headers and pick the socket set before the stack takes them.

use crate::drivers::virtio_net::Card;
use alloc::vec::Vec;
use smoltcp::phy::{self, DeviceCapabilities, Medium};
use smoltcp::time::Instant;

/// Largest IP packet (standard Ethernet MTU).
const MTU: usize = 1500;
/// Ethernet header bytes in front of the IP packet.
const ETHERNET_HEADER: usize = 14;

/// The card plus the frame the stack is about to take.
pub struct NetDevice {
    card: Card,
    /// A received frame the stack has not taken yet.
    staged: Option<Vec<u8>>,
}

impl NetDevice {
    /// Wraps an initialised card (its receive buffers posted).
    pub fn new(card: Card) -> Self {
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
        self.card.mac()
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
