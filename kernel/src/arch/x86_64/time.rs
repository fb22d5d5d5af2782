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

/// Whether this CPU's timer can be armed ([`arm_oneshot`]): its rate was calibrated at boot.
pub fn timer_ready() -> bool {
    apic::apic_ticks_per_ms() != 0
}

/// Arms this CPU's timer to interrupt once after `ticks`, replacing its periodic tick until
/// [`start_tick`].
pub fn arm_oneshot(ticks: u64) {
    apic::arm_oneshot(ticks);
}

/// The wall-clock time at boot, in nanoseconds since the Unix epoch: the board's real-time
/// clock (the CMOS RTC, which QEMU sets from the host's clock in UTC), read once, minus the time
/// since boot. Whole seconds: the RTC has no finer resolution.
pub fn boot_unix_ns() -> u64 {
    use core::sync::atomic::{AtomicU64, Ordering};
    static BOOT_UNIX_NS: AtomicU64 = AtomicU64::new(0);
    let cached = BOOT_UNIX_NS.load(Ordering::Relaxed);
    if cached != 0 {
        return cached;
    }
    let at = cpu::without_interrupts(rtc_unix_seconds).saturating_mul(1_000_000_000);
    let boot = at.saturating_sub(ticks_to_ns(now())).max(1);
    BOOT_UNIX_NS.store(boot, Ordering::Relaxed);
    boot
}

/// Seconds since the Unix epoch, as the CMOS real-time clock says (UTC).
fn rtc_unix_seconds() -> u64 {
    use x86_64::instructions::port::Port;
    let read = |reg: u8| -> u8 {
        let mut index = Port::<u8>::new(0x70);
        let mut data = Port::<u8>::new(0x71);
        // SAFETY: ports 0x70/0x71 are the PC's CMOS index and data registers; selecting a
        // register (NMI left enabled) and reading it has no other effect.
        unsafe {
            index.write(reg);
            data.read()
        }
    };
    // Wait out an update in progress, then read until two reads agree.
    let snapshot = || {
        let mut spins = 0;
        while read(0x0a) & 0x80 != 0 && spins < 1_000_000 {
            spins += 1;
        }
        [
            read(0x00),
            read(0x02),
            read(0x04),
            read(0x07),
            read(0x08),
            read(0x09),
            read(0x32),
        ]
    };
    let mut v = snapshot();
    for _ in 0..8 {
        let again = snapshot();
        if again == v {
            break;
        }
        v = again;
    }
    let status_b = read(0x0b);
    let bcd = status_b & 0x04 == 0;
    let dec = |x: u8| if bcd { (x & 0x0f) + (x >> 4) * 10 } else { x };
    let [s, m, h, day, month, year, century] = v;
    let pm = h & 0x80 != 0;
    let mut hour = dec(h & 0x7f);
    if status_b & 0x02 == 0 {
        // 12-hour clock.
        hour %= 12;
        if pm {
            hour += 12;
        }
    }
    let century = match dec(century) {
        c @ 19..=21 => u64::from(c),
        _ => 20,
    };
    let year = century * 100 + u64::from(dec(year));
    let days = days_from_civil(year, u64::from(dec(month)), u64::from(dec(day)));
    days * 86_400 + u64::from(hour) * 3600 + u64::from(dec(m)) * 60 + u64::from(dec(s))
}

/// Days from 1970-01-01 to the date `y`-`m`-`d` (proleptic Gregorian; dates before 1970 give 0).
fn days_from_civil(y: u64, m: u64, d: u64) -> u64 {
    let (y, m) = if m <= 2 {
        (y.saturating_sub(1), m + 9)
    } else {
        (y, m - 3)
    };
    let era = y / 400;
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d.saturating_sub(1);
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    (era * 146_097 + doe).saturating_sub(719_468)
}
