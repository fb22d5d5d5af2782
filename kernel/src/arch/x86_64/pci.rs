//! PCI configuration space through the PC's legacy ports 0xCF8 (address) / 0xCFC (data), as
//! the virtio drivers' PCI root reads and writes it.

use virtio_drivers::transport::pci::bus::{ConfigurationAccess, DeviceFunction};
use x86_64::instructions::port::Port;

/// PCI configuration space through the legacy ports 0xCF8 (address) / 0xCFC (data).
pub struct ConfigPorts;

static PCI_PORTS: spin::Mutex<()> = spin::Mutex::new(());

impl ConfigPorts {
    fn address(df: DeviceFunction, offset: u8) -> u32 {
        0x8000_0000
            | u32::from(df.bus) << 16
            | u32::from(df.device) << 11
            | u32::from(df.function) << 8
            | u32::from(offset & 0xfc)
    }
}

impl ConfigurationAccess for ConfigPorts {
    fn read_word(&self, df: DeviceFunction, offset: u8) -> u32 {
        let _g = PCI_PORTS.lock();
        // SAFETY: 0xCF8/0xCFC are the PC's PCI configuration ports; the lock keeps the
        // address/data pair atomic, and configuration reads have no side effects we rely on.
        unsafe {
            Port::<u32>::new(0xcf8).write(Self::address(df, offset));
            Port::<u32>::new(0xcfc).read()
        }
    }

    fn write_word(&mut self, df: DeviceFunction, offset: u8, data: u32) {
        let _g = PCI_PORTS.lock();
        // SAFETY: as for `read_word`; the caller (the PCI transport or `find_pci`) writes only
        // registers of the device it drives.
        unsafe {
            Port::<u32>::new(0xcf8).write(Self::address(df, offset));
            Port::<u32>::new(0xcfc).write(data);
        }
    }

    unsafe fn unsafe_clone(&self) -> Self {
        ConfigPorts
    }
}
