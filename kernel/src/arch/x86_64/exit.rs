//! Leaving QEMU with a verdict through the `isa-debug-exit` device (I/O port 0xf4).
//!
//! QEMU exits with status `(value << 1) | 1`: Fjord writes 0x10 for success (status 33) and 0x11
//! for failure (status 35). Any other status means QEMU or the kernel died some other way.

use x86_64::instructions::port::Port;

/// The verdict reported to the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitCode {
    /// Everything passed (QEMU exits with 33).
    Success = 0x10,
    /// Something failed (QEMU exits with 35).
    Failure = 0x11,
}

/// Exits QEMU with `code`. Without the device, halts forever.
pub fn exit_qemu(code: ExitCode) -> ! {
    let mut port = Port::<u32>::new(0xf4);
    // SAFETY: port 0xf4 is the isa-debug-exit device, or unused; writing it has no other effect.
    unsafe { port.write(code as u32) };
    super::cpu::halt_forever()
}
