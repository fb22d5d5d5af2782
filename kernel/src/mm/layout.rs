//! Fjord's virtual-memory layout (x86_64, 4-level paging, 48-bit addresses).
//!
//! ```text
//! 0x0000_0000_0000_0000 ─ 0x0000_0000_000f_efff  unmapped: null guard, real-mode area, AP trampoline
//! 0x0000_0000_000f_f000 ─ 0x0000_0000_000f_ffff  FPU-reset page, user R-X, only where ring 3's
//!                                                 FPU use does not trap (see `arch::user`)
//! 0x0000_0000_0010_0000 ─ __kernel_end           kernel image, identity-mapped, supervisor-only:
//!                                                 .text R-X, .rodata R--, .data/.bss RW- (NX)
//! 0x0000_0800_0000_0000 ─ 0x0000_0800_ffff_ffff  kernel self-test user area (ring-3 test programs)
//! 0x0000_1000_0000_0000 ─ 0x0000_1fff_ffff_ffff  Jord region: function VMAs (see the `pd` crate)
//! 0xffff_8000_0000_0000 ─ + RAM size             direct map of physical memory, RW-, NX, 2 MiB pages
//! 0xffff_c000_0000_0000 ─ + 1 MiB per CPU        kernel stacks, each below an unmapped guard page
//! 0xffff_e000_0000_0000 ─ + 64 GiB               the shared CXL region (ivshmem BAR2), write-back,
//!                                                 NX, at this address on every node
//! 0xffff_f000_0000_0000 ─ + 1 GiB                device MMIO window (local APIC, ...), uncached, NX
//! ```
//!
//! PML4 slot 0 (the kernel image) and slots 256–511 (the kernel half) are shared by every root
//! page table; user mappings live only in slots 1–255.

/// Where the kernel image is linked and loaded (virtual = physical).
pub const KERNEL_BASE: u64 = 0x10_0000;
/// The FPU-reset page: ring-3 code that clears the FPU and vector registers, mapped in PML4
/// slot 0 (shared by every root) only on machines where CR0.EM does not trap ring 3.
pub const FPU_RESET_PAGE: u64 = 0xf_f000;
/// Base of the kernel self-test user area.
pub const USER_TEST_BASE: u64 = 0x0000_0800_0000_0000;
/// Base of the Jord function region.
pub const JORD_REGION_BASE: u64 = 0x0000_1000_0000_0000;
/// One past the last user-half address.
pub const USER_END: u64 = 0x0000_8000_0000_0000;
/// Virtual address of physical address 0 in the direct map.
pub const DIRECT_MAP_BASE: u64 = 0xffff_8000_0000_0000;
/// Base of the per-CPU kernel stack area.
pub const KERNEL_STACKS_BASE: u64 = 0xffff_c000_0000_0000;
/// Size of each CPU's slot in the kernel stack area.
pub const KERNEL_STACK_SLOT: u64 = 1 << 20;
/// Where the shared CXL region is mapped, on every node.
pub const CXL_BASE: u64 = 0xffff_e000_0000_0000;
/// Most bytes of the CXL window.
pub const CXL_SIZE: u64 = 64 << 30;
/// The guest-physical address every node programs the region's BAR to (64 GiB: above any
/// RAM these guests have, and within the 36 physical address bits every x86_64 CPU has).
pub const CXL_PHYS: u64 = 64 << 30;
/// Base of the device MMIO window.
pub const MMIO_BASE: u64 = 0xffff_f000_0000_0000;
/// Size of the device MMIO window.
pub const MMIO_SIZE: u64 = 1 << 30;
/// Page size.
pub const PAGE_SIZE: u64 = 4096;
/// Size of a large (2 MiB) page.
pub const LARGE_PAGE_SIZE: u64 = 2 << 20;
/// Physical memory below this address is never handed out (BIOS data, AP trampoline).
pub const LOW_MEMORY_END: u64 = 0x10_0000;
/// Physical page the application-processor trampoline is copied to.
pub const AP_TRAMPOLINE_PHYS: u64 = 0x8000;

/// First PML4 slot of the kernel half; slots from here on are shared by every address space.
pub const KERNEL_HALF_FIRST_SLOT: usize = 256;

/// True when `addr` is in the user half and above the unmapped low area.
pub fn is_user_address(addr: u64) -> bool {
    (LOW_MEMORY_END..USER_END).contains(&addr)
}

/// True when `[addr, addr + len)` lies entirely in the user half.
pub fn is_user_range(addr: u64, len: u64) -> bool {
    match addr.checked_add(len) {
        Some(end) => is_user_address(addr) && end <= USER_END,
        None => false,
    }
}

/// Rounds `x` down to a multiple of `align` (a power of two).
pub const fn align_down(x: u64, align: u64) -> u64 {
    x & !(align - 1)
}

/// Rounds `x` up to a multiple of `align` (a power of two); saturates at the top.
pub const fn align_up(x: u64, align: u64) -> u64 {
    match x.checked_add(align - 1) {
        Some(v) => v & !(align - 1),
        None => !(align - 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_ranges() {
        assert!(is_user_range(USER_TEST_BASE, 4096));
        assert!(!is_user_range(0, 16));
        assert!(!is_user_range(USER_END - 8, 16));
        assert!(!is_user_range(DIRECT_MAP_BASE, 1));
        assert!(!is_user_range(u64::MAX - 1, 4));
    }

    #[test]
    fn alignment() {
        assert_eq!(align_down(0x1fff, 0x1000), 0x1000);
        assert_eq!(align_up(0x1001, 0x1000), 0x2000);
        assert_eq!(align_up(0x1000, 0x1000), 0x1000);
    }

    #[test]
    fn regions_do_not_overlap_kernel_half() {
        const { assert!(JORD_REGION_BASE > USER_TEST_BASE) };
        assert_eq!((DIRECT_MAP_BASE >> 39) & 511, KERNEL_HALF_FIRST_SLOT as u64);
        const { assert!((USER_TEST_BASE >> 39) & 511 >= 1) };
    }
}
