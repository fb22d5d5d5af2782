//! Memory management: physical frames, the kernel's page tables, kernel stacks and the heap.
//!
//! Physical memory is reached through the direct map (see `layout`). Before the kernel's own
//! tables are live, the boot tables identity-map the first 1 GiB and the direct-map offset is 0.

pub mod dma;
pub mod frames;
pub mod heap;
pub mod kernel_tables;
pub mod metrics;
pub mod stacks;
pub mod user_memory;

use core::sync::atomic::{AtomicU64, Ordering};
use fjord_kernel::paging::PhysMemory;

static PHYS_OFFSET: AtomicU64 = AtomicU64::new(0);

/// The virtual address at which physical address `pa` can be accessed.
pub fn phys_to_virt(pa: u64) -> u64 {
    pa + PHYS_OFFSET.load(Ordering::Relaxed)
}

/// Switches physical accesses to the direct map (called once the kernel tables are live).
pub fn use_direct_map() {
    PHYS_OFFSET.store(fjord_kernel::layout::DIRECT_MAP_BASE, Ordering::Relaxed);
}

/// Page-table access through the direct map (or identity before it exists).
pub struct DirectMap;

impl PhysMemory for DirectMap {
    fn read_entry(&self, table: u64, index: usize) -> u64 {
        let p = phys_to_virt(table + 8 * index as u64) as *const u64;
        // SAFETY: `table` is a page-table frame owned by the kernel and mapped at this address.
        unsafe { p.read_volatile() }
    }

    fn write_entry(&self, table: u64, index: usize, value: u64) {
        let p = phys_to_virt(table + 8 * index as u64) as *mut u64;
        // SAFETY: as for `read_entry`; page-table frames are only written through this path.
        unsafe { p.write_volatile(value) }
    }
}

/// Physical-memory reads for the ACPI parser.
pub struct AcpiReader;

impl fjord_kernel::madt::AcpiMemory for AcpiReader {
    fn read(&self, phys: u64, buf: &mut [u8]) {
        let src = phys_to_virt(phys) as *const u8;
        // SAFETY: ACPI tables live in RAM below the top of the direct map; reads have no effect.
        unsafe { core::ptr::copy_nonoverlapping(src, buf.as_mut_ptr(), buf.len()) };
    }
}

/// The bytes of a boot module (the initrd) at physical `[pa, pa + len)`, through the direct
/// map. The boot sequence reserves every boot module's frames from the frame allocator before
/// anything allocates, and nothing writes them, so the bytes stay as they are for the kernel's
/// lifetime; pass only a module's range from the boot information.
pub fn boot_module(pa: u64, len: usize) -> &'static [u8] {
    // SAFETY: the range is a boot module's, reserved and never written (see above), and the
    // direct map covers all RAM.
    unsafe { core::slice::from_raw_parts(phys_to_virt(pa) as *const u8, len) }
}

/// The physical address of kernel virtual address `va`, for addresses whose translation is
/// fixed: the direct map (after [`use_direct_map`]) and the identity-mapped kernel image.
/// Returns `None` for anything else (stacks, the MMIO window, user memory), whose frames are
/// not physically contiguous in general.
pub fn virt_to_phys(va: u64) -> Option<u64> {
    let offset = PHYS_OFFSET.load(Ordering::Relaxed);
    if offset != 0 && (offset..offset + frames::MAX_PHYS).contains(&va) {
        return Some(va - offset);
    }
    let img = kernel_tables::image();
    (fjord_kernel::layout::KERNEL_BASE..img.data.1)
        .contains(&va)
        .then_some(va)
}
