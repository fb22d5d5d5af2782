//! The virtio-net card as a smoltcp `Device`.
//!
//! A received frame is copied out of the driver's buffer, which goes straight back to the
//! receive queue, so the receive token owns its bytes and the transmit token alone borrows the
//! card. Frames are first staged ([`NetDevice::stage`]) so the network loop can read their
//! headers and pick the socket set before the stack takes them. Transmission waits for the
//! device to consume the frame (microseconds under QEMU).

use super::nic::Nic;
use alloc::vec::Vec;
use smoltcp::phy::{self, DeviceCapabilities, Medium};
use smoltcp::time::Instant;

/// Largest IP packet (standard Ethernet MTU).
const MTU: usize = 1500;
/// Ethernet header bytes in front of the IP packet.
const ETHERNET_HEADER: usize = 14;

/// The card plus packet counters.
pub struct NetDevice {
    nic: Nic,
    /// Frames received.
    pub rx_packets: u64,
    /// Frames sent.
    pub tx_packets: u64,
    /// Frames the driver failed to send or receive.
    pub errors: u64,
    /// A received frame the stack has not taken yet.
    staged: Option<Vec<u8>>,
}

impl NetDevice {
    /// Wraps an initialised card.
    pub fn new(nic: Nic) -> Self {
        NetDevice {
            nic,
            rx_packets: 0,
            tx_packets: 0,
            errors: 0,
            staged: None,
        }
    }

    /// The next received frame, kept until the stack takes it (`receive` hands out only a
    /// staged frame); `None` if none has arrived.
    pub fn stage(&mut self) -> Option<&[u8]> {
        if self.staged.is_none() {
            self.staged = self.fetch();
        }
        self.staged.as_deref()
    }

    /// Takes a frame from the card.
    fn fetch(&mut self) -> Option<Vec<u8>> {
        let buf = match self.nic.receive() {
            Ok(b) => b,
            Err(virtio_drivers::Error::NotReady) => return None,
            Err(e) => {
                self.errors += 1;
                log::warn!("net: receive failed: {e:?}");
                return None;
            }
        };
        let frame = Vec::from(buf.packet());
        if let Err(e) = self.nic.recycle_rx_buffer(buf) {
            self.errors += 1;
            log::warn!("net: recycling a receive buffer failed: {e:?}");
        }
        self.rx_packets += 1;
        Some(frame)
    }

    /// The card's MAC address.
    pub fn mac(&self) -> [u8; 6] {
        self.nic.mac_address()
    }
}

/// A received frame.
pub struct RxToken(Vec<u8>);

/// Permission to send one frame.
pub struct TxToken<'a> {
    nic: &'a mut Nic,
    sent: &'a mut u64,
    errors: &'a mut u64,
}

impl phy::Device for NetDevice {
    type RxToken<'a> = RxToken;
    type TxToken<'a> = TxToken<'a>;

    fn receive(&mut self, _now: Instant) -> Option<(RxToken, TxToken<'_>)> {
        let frame = self.staged.take()?;
        let tx = TxToken {
            nic: &mut self.nic,
            sent: &mut self.tx_packets,
            errors: &mut self.errors,
        };
        Some((RxToken(frame), tx))
    }

    fn transmit(&mut self, _now: Instant) -> Option<TxToken<'_>> {
        Some(TxToken {
            nic: &mut self.nic,
            sent: &mut self.tx_packets,
            errors: &mut self.errors,
        })
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
        let mut buf = self.nic.new_tx_buffer(len);
        let r = f(buf.packet_mut());
        match self.nic.send(buf) {
            Ok(()) => *self.sent += 1,
            Err(e) => {
                *self.errors += 1;
                log::warn!("net: send failed: {e:?}");
            }
        }
        r
    }
}
