//! Bringing the machine up: the boot CPU's interrupt controller, per-CPU state and calibrated
//! tick, then the other CPUs; and what the boot banner says of the platform.
//!
//! On x86_64 the interrupt controller is the local APIC (x2APIC where CPUID has it, else xAPIC
//! through an MMIO window), the tick its timer calibrated against the PIT, and the other CPUs
//! are started by INIT/SIPI with the ids the firmware's ACPI MADT lists.

use super::smp::{self, CpuStacks};
use super::{apic, cpu, pit, time};

/// Why the platform could not be brought up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BringUpError {
    /// The interrupt controller's MMIO window could not be mapped.
    MapInterruptController,
    /// The timer could not be calibrated (the reason).
    Calibration(&'static str),
}

impl core::fmt::Display for BringUpError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            BringUpError::MapInterruptController => {
                f.write_str("mapping the local APIC's MMIO window failed")
            }
            BringUpError::Calibration(why) => write!(f, "timer calibration failed: {why}"),
        }
    }
}

/// Physical address and size of the interrupt controller's MMIO window (xAPIC).
const APIC_MMIO: (u64, u64) = (0xfee0_0000, 4096);

/// Brings up the boot CPU on its `stacks`: the interrupt controller (its MMIO window, when it
/// needs one, mapped by `map_mmio(physical, size)`), the GDT, IDT, per-CPU block and SYSCALL,
/// the clock calibrated and ticking at [`time::TIMER_HZ`], interrupts on.
pub fn init_boot_cpu(
    stacks: &CpuStacks,
    map_mmio: &mut dyn FnMut(u64, u64) -> Option<u64>,
) -> Result<(), BringUpError> {
    let features = cpu::features();
    let mmio = if features.x2apic {
        0
    } else {
        map_mmio(APIC_MMIO.0, APIC_MMIO.1).ok_or(BringUpError::MapInterruptController)?
    };
    apic::select_mode(features.x2apic, mmio);
    pit::mask_legacy_pic();
    smp::init_this_cpu(0, stacks);
    smp::register_bsp(apic::id());
    apic::calibrate().map_err(BringUpError::Calibration)?;
    time::start_tick();
    cpu::enable_interrupts();
    Ok(())
}

/// The boot CPU's hardware id (its APIC id).
pub fn boot_cpu_id() -> u32 {
    apic::id()
}

/// Starts the other CPUs among `hardware_ids` (the boot CPU's own is skipped): `direct_map` is
/// the virtual address of physical 0, `stacks_for(index)` maps CPU `index`'s stacks. Returns
/// how many came online.
pub fn start_other_cpus(
    hardware_ids: &[u32],
    direct_map: u64,
    stacks_for: &mut dyn FnMut(usize) -> Option<CpuStacks>,
) -> usize {
    smp::start_aps(hardware_ids, apic::id(), direct_map, stacks_for)
}

/// What the banner says of the platform.
#[derive(Clone, Copy, Debug)]
pub struct Description {
    /// The interrupt controller's kind.
    pub interrupt_controller: &'static str,
    /// The clock's rate in MHz.
    pub clock_mhz: u64,
    /// The tick timer's name.
    pub timer: &'static str,
    /// The tick timer's counts per millisecond.
    pub timer_per_ms: u64,
}

/// The platform as brought up.
pub fn describe() -> Description {
    Description {
        interrupt_controller: if apic::is_x2apic() { "x2APIC" } else { "xAPIC" },
        clock_mhz: time::ticks_per_second() / 1_000_000,
        timer: "APIC timer",
        timer_per_ms: apic::apic_ticks_per_ms(),
    }
}
