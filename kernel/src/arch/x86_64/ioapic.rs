//! An I/O APIC: routes one of its input lines to a vector on one CPU, edge-triggered, masked
//! until asked.
//!
//! Edge-triggered, a line the device keeps raised delivers once per time the device raises it
//! (QEMU's I/O APIC delivers on every assertion; a masked pin drops them), so the driver need
//! not acknowledge the device for the next interrupt to come. Fjord routes the virtio-net
//! card's line on `microvm` this way, so the network loop can halt until a frame arrives.

use crate::mm::kernel_tables;

/// Register select, then the data window.
const IOREGSEL: u64 = 0x00;
const IOWIN: u64 = 0x10;
/// The version register: bits 16–23 hold the highest redirection entry.
const REG_VERSION: u32 = 0x01;
/// Redirection entry `n`: low word at `0x10 + 2n`, high word after it.
const REG_REDIRECTION: u32 = 0x10;
/// A redirection entry's mask bit.
const MASKED: u32 = 1 << 16;

/// Why a line could not be routed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoApicError {
    /// Its registers could not be mapped.
    NotMapped,
    /// This I/O APIC has no such input.
    NoSuchLine(u32),
    /// No I/O APIC answers at the address.
    Absent,
}

/// One routed input line.
#[derive(Debug)]
pub struct Line {
    regs: u64,
    input: u32,
    /// The entry's low word, unmasked.
    low: u32,
}

fn read(regs: u64, reg: u32) -> u32 {
    // SAFETY: `regs` maps the I/O APIC's two registers; selecting then reading the window is
    // how its registers are read, with no other effect. The caller holds off other users of
    // this I/O APIC (only the network loop routes a line).
    unsafe {
        ((regs + IOREGSEL) as *mut u32).write_volatile(reg);
        ((regs + IOWIN) as *const u32).read_volatile()
    }
}

fn write(regs: u64, reg: u32, value: u32) {
    // SAFETY: as in `read`; the registers written are the routed line's own entry.
    unsafe {
        ((regs + IOREGSEL) as *mut u32).write_volatile(reg);
        ((regs + IOWIN) as *mut u32).write_volatile(value);
    }
}

/// Routes input `input` of the I/O APIC at physical address `base` to `vector` on the CPU with
/// local APIC id `apic_id`: fixed delivery, physical destination, active high,
/// edge-triggered; masked until [`Line::unmask`].
pub fn route(base: u64, input: u32, vector: u8, apic_id: u32) -> Result<Line, IoApicError> {
    let regs = kernel_tables::map_mmio(base, 0x20).map_err(|_| IoApicError::NotMapped)?;
    let version = read(regs, REG_VERSION);
    if version == u32::MAX || version == 0 {
        return Err(IoApicError::Absent);
    }
    let entries = (version >> 16) & 0xff;
    if input > entries {
        return Err(IoApicError::NoSuchLine(input));
    }
    let line = Line {
        regs,
        input,
        low: u32::from(vector),
    };
    write(regs, line.reg() + 1, apic_id << 24);
    line.mask();
    Ok(line)
}

impl Line {
    fn reg(&self) -> u32 {
        REG_REDIRECTION + 2 * self.input
    }

    /// Lets the line interrupt.
    pub fn unmask(&self) {
        write(self.regs, self.reg(), self.low);
    }

    /// Drops the line's interrupts until the next [`Line::unmask`].
    pub fn mask(&self) {
        write(self.regs, self.reg(), self.low | MASKED);
    }
}
