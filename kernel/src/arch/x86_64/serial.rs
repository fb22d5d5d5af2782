//! The serial console (COM1, a 16550 UART at I/O port 0x3f8).

use core::fmt::{self, Write};
use spin::Mutex;
use uart_16550::SerialPort;

static COM1: Mutex<Option<SerialPort>> = Mutex::new(None);

/// Initialises COM1.
pub fn init() {
    // SAFETY: 0x3f8 is COM1 on every PC-compatible machine QEMU emulates (microvm and q35).
    let mut port = unsafe { SerialPort::new(0x3f8) };
    port.init();
    *COM1.lock() = Some(port);
}

/// Writes formatted text to the console, with interrupts off so a handler cannot deadlock.
pub fn write_fmt(args: fmt::Arguments<'_>) {
    super::cpu::without_interrupts(|| {
        if let Some(port) = COM1.lock().as_mut() {
            let _ = port.write_fmt(args);
        }
    });
}

/// Writes formatted text even if the console lock is held (used by panic and fault reports,
/// which may interrupt a holder of the lock on this CPU).
pub fn emergency_write_fmt(args: fmt::Arguments<'_>) {
    // SAFETY: COM1 exists on every machine Fjord boots on; concurrent writers can at worst
    // interleave characters, which is acceptable for a last-words report.
    let mut port = unsafe { SerialPort::new(0x3f8) };
    let _ = port.write_fmt(args);
}
