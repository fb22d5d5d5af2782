//! The local APIC: x2APIC through MSRs where the CPU has it, xAPIC through MMIO otherwise.
//! Provides EOI, IPIs (fixed, INIT, SIPI) and the per-CPU timer.

use super::cpu::{self, IA32_APIC_BASE};
use super::trap::{APIC_ERROR_VECTOR, SPURIOUS_VECTOR, TIMER_VECTOR};
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

static X2APIC: AtomicBool = AtomicBool::new(false);
static MMIO_BASE: AtomicU64 = AtomicU64::new(0);

/// Address of the xAPIC EOI register in the mapped APIC page, 0 in x2APIC mode: the wake-up
/// entry (`trap::work_ipi_entry`, in assembly) reads it to pick how it signals end of
/// interrupt.
pub(super) static EOI_MMIO: AtomicU64 = AtomicU64::new(0);
static TSC_HZ: AtomicU64 = AtomicU64::new(0);
static APIC_TICKS_PER_MS: AtomicU64 = AtomicU64::new(0);

const REG_ID: u32 = 0x20;
const REG_TPR: u32 = 0x80;
const REG_EOI: u32 = 0xb0;
const REG_SVR: u32 = 0xf0;
const REG_ESR: u32 = 0x280;
const REG_ICR_LOW: u32 = 0x300;
const REG_ICR_HIGH: u32 = 0x310;
const REG_LVT_TIMER: u32 = 0x320;
const REG_LVT_ERROR: u32 = 0x370;
const REG_TIMER_INIT: u32 = 0x380;
const REG_TIMER_CURRENT: u32 = 0x390;
const REG_TIMER_DIVIDE: u32 = 0x3e0;

fn read(reg: u32) -> u32 {
    if X2APIC.load(Ordering::Relaxed) {
        // SAFETY: x2APIC mode is enabled, so MSR 0x800 + reg/16 is an APIC register.
        unsafe { cpu::rdmsr(0x800 + (reg >> 4)) as u32 }
    } else {
        let p = (MMIO_BASE.load(Ordering::Relaxed) + u64::from(reg)) as *const u32;
        // SAFETY: the APIC page is mapped uncached at MMIO_BASE (see `init_bsp`).
        unsafe { p.read_volatile() }
    }
}

fn write(reg: u32, value: u32) {
    if X2APIC.load(Ordering::Relaxed) {
        // SAFETY: x2APIC mode is enabled, so MSR 0x800 + reg/16 is an APIC register.
        unsafe { cpu::wrmsr(0x800 + (reg >> 4), u64::from(value)) };
    } else {
        let p = (MMIO_BASE.load(Ordering::Relaxed) + u64::from(reg)) as *mut u32;
        // SAFETY: the APIC page is mapped uncached at MMIO_BASE (see `init_bsp`).
        unsafe { p.write_volatile(value) };
    }
}

/// True when the APIC runs in x2APIC mode.
pub fn is_x2apic() -> bool {
    X2APIC.load(Ordering::Relaxed)
}

/// Chooses the APIC mode for all CPUs: x2APIC if `x2apic`, else xAPIC at `mmio_virt`.
pub fn select_mode(x2apic: bool, mmio_virt: u64) {
    X2APIC.store(x2apic, Ordering::Relaxed);
    MMIO_BASE.store(mmio_virt, Ordering::Relaxed);
    let eoi = if x2apic {
        0
    } else {
        mmio_virt + u64::from(REG_EOI)
    };
    EOI_MMIO.store(eoi, Ordering::Relaxed);
}

/// Enables the calling CPU's local APIC in the selected mode, with spurious and error vectors.
pub fn init_cpu() {
    // SAFETY: IA32_APIC_BASE exists on every x86_64 CPU; setting the enable bit (11) and, in
    // x2APIC mode, the extended bit (10) keeps the base address unchanged.
    unsafe {
        let base = cpu::rdmsr(IA32_APIC_BASE);
        let mut v = base | (1 << 11);
        if is_x2apic() {
            v |= 1 << 10;
        }
        cpu::wrmsr(IA32_APIC_BASE, v);
    }
    write(REG_TPR, 0);
    write(REG_LVT_ERROR, u32::from(APIC_ERROR_VECTOR));
    write(REG_ESR, 0);
    write(REG_SVR, 0x100 | u32::from(SPURIOUS_VECTOR));
    eoi();
}

/// This CPU's APIC id.
pub fn id() -> u32 {
    let v = read(REG_ID);
    if is_x2apic() { v } else { v >> 24 }
}

/// Signals end of interrupt.
pub fn eoi() {
    write(REG_EOI, 0);
}

fn send_icr(dest: u32, low: u32) {
    cpu::without_interrupts(|| {
        if is_x2apic() {
            // SAFETY: in x2APIC mode the ICR is the single 64-bit MSR 0x830.
            unsafe { cpu::wrmsr(0x830, (u64::from(dest) << 32) | u64::from(low)) };
        } else {
            write(REG_ICR_HIGH, dest << 24);
            write(REG_ICR_LOW, low);
            while read(REG_ICR_LOW) & (1 << 12) != 0 {
                core::hint::spin_loop();
            }
        }
    });
}

/// Sends a fixed interrupt with `vector` to the CPU with APIC id `dest`.
pub fn send_ipi(dest: u32, vector: u8) {
    send_icr(dest, u32::from(vector));
}

/// Sends INIT (assert) to `dest`.
pub fn send_init(dest: u32) {
    send_icr(dest, 0x4500);
}

/// Sends a start-up IPI to `dest`, starting it in real mode at `page * 4096`.
pub fn send_sipi(dest: u32, page: u8) {
    send_icr(dest, 0x4600 | u32::from(page));
}

/// The measured TSC frequency in Hz (0 before calibration).
pub fn tsc_hz() -> u64 {
    TSC_HZ.load(Ordering::Relaxed)
}

/// Busy-waits for `us` microseconds using the calibrated TSC.
pub fn delay_us(us: u64) {
    let hz = tsc_hz().max(1_000_000);
    let end = cpu::rdtsc() + hz / 1_000_000 * us;
    while cpu::rdtsc() < end {
        core::hint::spin_loop();
    }
}

/// Measures the TSC against the PIT and the APIC timer against the TSC (on the BSP, once).
pub fn calibrate() -> Result<(), &'static str> {
    let hz = super::pit::measure_tsc_hz(10).ok_or("the PIT did not count down")?;
    TSC_HZ.store(hz, Ordering::Relaxed);
    // APIC timer: divide by 16, count down from the maximum for 10 ms of TSC time.
    super::percpu::current().timer_oneshot = false;
    write(REG_TIMER_DIVIDE, 0b0011);
    write(REG_LVT_TIMER, 1 << 16); // masked, one-shot
    write(REG_TIMER_INIT, u32::MAX);
    delay_us(10_000);
    let elapsed = u32::MAX - read(REG_TIMER_CURRENT);
    write(REG_TIMER_INIT, 0);
    APIC_TICKS_PER_MS.store(u64::from(elapsed) / 10, Ordering::Relaxed);
    Ok(())
}

/// APIC timer ticks per millisecond (0 before calibration).
pub fn apic_ticks_per_ms() -> u64 {
    APIC_TICKS_PER_MS.load(Ordering::Relaxed)
}

/// Starts the calling CPU's periodic timer at `hz` interrupts per second.
pub fn start_periodic_timer(hz: u64) {
    let per_ms = apic_ticks_per_ms().max(1);
    let count = (per_ms * 1000 / hz.max(1)).clamp(1, u64::from(u32::MAX)) as u32;
    super::percpu::current().timer_oneshot = false;
    write(REG_TIMER_DIVIDE, 0b0011);
    write(REG_LVT_TIMER, (1 << 17) | u32::from(TIMER_VECTOR)); // periodic
    write(REG_TIMER_INIT, count);
}

/// Arms the calling CPU's timer to fire once after `tsc_ticks` TSC ticks (replacing the periodic
/// timer until [`start_periodic_timer`] is called again).
pub fn arm_oneshot(tsc_ticks: u64) {
    let per_ms = apic_ticks_per_ms().max(1);
    let tsc_per_ms = (tsc_hz() / 1000).max(1);
    // 64-bit arithmetic when the product fits (waits of days at the usual rates), a 128-bit
    // division only beyond.
    let count = match tsc_ticks.checked_mul(per_ms) {
        Some(p) => (p / tsc_per_ms).clamp(1, u64::from(u32::MAX)) as u32,
        None => (u128::from(tsc_ticks) * u128::from(per_ms) / u128::from(tsc_per_ms))
            .clamp(1, u128::from(u32::MAX)) as u32,
    };
    let pc = super::percpu::current();
    if !pc.timer_oneshot {
        write(REG_TIMER_DIVIDE, 0b0011);
        write(REG_LVT_TIMER, u32::from(TIMER_VECTOR)); // one-shot
        pc.timer_oneshot = true;
    }
    write(REG_TIMER_INIT, count);
}
