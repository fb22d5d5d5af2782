//! The kernel's clock: the CPU's time-stamp counter (TSC), its calibrated rate, and deadlines.
//!
//! Every time in the kernel is a TSC value ("ticks"); these helpers turn durations into ticks
//! and back, so that no other module does its own arithmetic with the rate. Under QEMU's
//! `-icount shift=0` the TSC counts guest instructions, so the same code measures instructions.

use super::{apic, cpu};

/// Timer interrupts per second on every CPU.
pub const TIMER_HZ: u64 = 100;

/// The clock now, in ticks.
#[inline]
pub fn now() -> u64 {
    cpu::rdtsc()
}

/// Ticks per second (the calibrated TSC rate; 0 before calibration).
#[inline]
pub fn ticks_per_second() -> u64 {
    apic::tsc_hz()
}

/// Ticks in `ms` milliseconds.
#[inline]
pub fn ms_to_ticks(ms: u64) -> u64 {
    (ticks_per_second() / 1000).saturating_mul(ms)
}

/// The clock `ms` milliseconds from now.
#[inline]
pub fn deadline_after_ms(ms: u64) -> u64 {
    now().saturating_add(ms_to_ticks(ms))
}

/// Ticks in `ns` nanoseconds (at most `u64::MAX / 2`, so that a deadline never wraps).
pub fn ns_to_ticks(ns: u64) -> u64 {
    let ticks = u128::from(ns) * u128::from(ticks_per_second()) / 1_000_000_000;
    ticks.min(u128::from(u64::MAX / 2)) as u64
}

/// Nanoseconds in `ticks` (0 before calibration).
pub fn ticks_to_ns(ticks: u64) -> u64 {
    scale(ticks, 1_000_000_000)
}

/// Microseconds in `ticks` (0 before calibration).
pub fn ticks_to_us(ticks: u64) -> u64 {
    scale(ticks, 1_000_000)
}

/// How many of an event at `per_second` per second happen in `ticks` (0 before calibration).
pub fn events_in(ticks: u64, per_second: u64) -> u64 {
    scale(ticks, per_second)
}

/// `ticks * per_second / rate`, saturating.
fn scale(ticks: u64, per_second: u64) -> u64 {
    let hz = u128::from(ticks_per_second().max(1));
    (u128::from(ticks) * u128::from(per_second) / hz).min(u128::from(u64::MAX)) as u64
}

/// Starts this CPU's periodic tick at [`TIMER_HZ`] (time limits of user code rely on it).
pub fn start_tick() {
    apic::start_periodic_timer(TIMER_HZ);
}

/// Arms this CPU's timer to interrupt once after `ticks`, replacing its periodic tick until
/// [`start_tick`].
pub fn arm_oneshot(ticks: u64) {
    apic::arm_oneshot(ticks);
}
