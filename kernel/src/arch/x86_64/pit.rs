//! The 8254 programmable interval timer and the legacy 8259 PICs.
//!
//! The PIT is used once, to measure the TSC frequency: channel 0 counts down in mode 0 and is
//! read back with latch commands (microvm has no port 0x61, so channel 2's gate and output
//! cannot be used). The 8259 PICs are masked so that only the local APIC delivers interrupts.

use super::cpu::rdtsc;
use x86_64::instructions::port::Port;

/// The PIT's input clock in Hz.
const PIT_HZ: u64 = 1_193_182;

/// Masks every line of both legacy 8259 interrupt controllers.
pub fn mask_legacy_pic() {
    // SAFETY: 0x21 and 0xa1 are the 8259 data ports; writing 0xff masks all their lines, and on
    // machines without a PIC the writes go nowhere.
    unsafe {
        Port::<u8>::new(0x21).write(0xff);
        Port::<u8>::new(0xa1).write(0xff);
    }
}

fn read_channel0(cmd: &mut Port<u8>, data: &mut Port<u8>) -> u16 {
    // SAFETY: latch command for channel 0, then the latched low and high bytes.
    unsafe {
        cmd.write(0x00);
        let lo = data.read();
        let hi = data.read();
        u16::from_le_bytes([lo, hi])
    }
}

/// Measures the TSC frequency in Hz over `ms` milliseconds (at most 50) of PIT time.
/// Returns `None` if the PIT does not count (no PIT present).
pub fn measure_tsc_hz(ms: u64) -> Option<u64> {
    let ms = ms.clamp(1, 50);
    let ticks = (PIT_HZ * ms / 1000) as u16;
    let mut cmd = Port::<u8>::new(0x43);
    let mut data = Port::<u8>::new(0x40);
    // SAFETY: channel 0, low/high byte access, mode 0 (interrupt on terminal count), binary;
    // counting starts from 0xffff once both bytes are written. IRQ 0 is masked at the PIC.
    unsafe {
        cmd.write(0b0011_0000);
        data.write(0xff);
        data.write(0xff);
    }
    let first = read_channel0(&mut cmd, &mut data);
    let start = rdtsc();
    let mut spins: u64 = 0;
    loop {
        let now = read_channel0(&mut cmd, &mut data);
        if first.wrapping_sub(now) >= ticks && now <= first {
            break;
        }
        spins += 1;
        if spins > 50_000_000 {
            return None;
        }
    }
    let end = rdtsc();
    Some((end - start) * 1000 / ms)
}
