//! The kernel's own page tables (see `layout` for the map they implement): the kernel image with
//! W^X per section, the direct map of RAM with NX, guarded stacks, and an uncached MMIO window.

use super::frames::{DIRECT, KernelFrames};
use core::sync::atomic::{AtomicU64, Ordering};
use fjord_kernel::layout::{
    DIRECT_MAP_BASE, KERNEL_STACKS_BASE, LARGE_PAGE_SIZE, MMIO_BASE, MMIO_SIZE, PAGE_SIZE,
    align_down, align_up,
};
use fjord_kernel::paging::{Flags, PageSize, PageTables, PagingError, PhysMemory, TableAllocator};
use spin::Mutex;

static KERNEL_ROOT: AtomicU64 = AtomicU64::new(0);
static MMIO_NEXT: Mutex<u64> = Mutex::new(MMIO_BASE);
/// Serialises edits of the kernel's tables (shared by every address space).
static EDIT: Mutex<()> = Mutex::new(());

unsafe extern "C" {
    static __text_start: u8;
    static __text_end: u8;
    static __rodata_start: u8;
    static __rodata_end: u8;
    static __data_start: u8;
    static __kernel_end: u8;
}

fn sym(s: *const u8) -> u64 {
    s as u64
}

/// Section boundaries of the loaded kernel image.
pub struct ImageLayout {
    /// `[start, end)` of the executable text.
    pub text: (u64, u64),
    /// `[start, end)` of read-only data (includes the test registry).
    pub rodata: (u64, u64),
    /// `[start, end)` of writable data and bss.
    pub data: (u64, u64),
}

/// The kernel image's section boundaries, from the linker script's symbols.
pub fn image() -> ImageLayout {
    ImageLayout {
        text: (sym(&raw const __text_start), sym(&raw const __text_end)),
        rodata: (sym(&raw const __rodata_start), sym(&raw const __rodata_end)),
        data: (
            sym(&raw const __data_start),
            align_up(sym(&raw const __kernel_end), PAGE_SIZE),
        ),
    }
}

/// Builds the kernel tables covering RAM up to `ram_end` and switches to them.
pub fn build_and_switch(ram_end: u64) -> Result<(), PagingError> {
    let mut fa = KernelFrames;
    let mut pt = PageTables::create(&DIRECT, &mut fa)?;
    let img = image();
    for ((start, end), flags) in [
        (img.text, Flags::KERNEL_RX),
        (img.rodata, Flags::KERNEL_RO),
        (img.data, Flags::KERNEL_RW),
    ] {
        for va in (align_down(start, PAGE_SIZE)..end).step_by(PAGE_SIZE as usize) {
            pt.map(va, va, flags | Flags::GLOBAL, &mut fa)?;
        }
    }
    let end = align_up(ram_end, LARGE_PAGE_SIZE);
    for pa in (0..end).step_by(LARGE_PAGE_SIZE as usize) {
        pt.map_sized(
            DIRECT_MAP_BASE + pa,
            pa,
            Flags::KERNEL_RW | Flags::GLOBAL,
            PageSize::Large,
            &mut fa,
        )?;
    }
    // Every PD root copies the kernel half's top-level entries when it is created, so every
    // top-level slot the kernel will ever use must exist now (stacks, MMIO window).
    for va in [KERNEL_STACKS_BASE, MMIO_BASE] {
        let slot = ((va >> 39) & 511) as usize;
        if DIRECT.read_entry(pt.root(), slot) & Flags::PRESENT.0 == 0 {
            let table = fa.alloc_table().ok_or(PagingError::OutOfMemory)?;
            DIRECT.write_entry(
                pt.root(),
                slot,
                table | (Flags::PRESENT | Flags::WRITABLE).0,
            );
        }
    }
    KERNEL_ROOT.store(pt.root(), Ordering::Release);
    // SAFETY: the new tables map the kernel image where it runs (identity), its data and the
    // boot stack (in .bss), so execution continues seamlessly.
    unsafe { crate::arch::cpu::write_cr3(pt.root()) };
    super::use_direct_map();
    Ok(())
}

/// Loads the address space whose root table is `root` on this CPU.
///
/// `root` must be the kernel's root ([`kernel_root`]) or a table made with
/// `PageTables::create_sharing_kernel` from it, as every PD's root and every scratch address
/// space is: those map the kernel image and the kernel half exactly as the kernel's own tables
/// do, so the kernel goes on running after the switch.
pub fn load_space(root: u64) {
    // SAFETY: `root` shares the kernel image and kernel half with the kernel's tables (the
    // precondition above, kept by every caller in the kernel).
    unsafe { crate::arch::cpu::write_cr3(root) };
}

/// Physical address of the kernel's root table.
pub fn kernel_root() -> u64 {
    KERNEL_ROOT.load(Ordering::Acquire)
}

/// The kernel's page tables. Mappings made here in PML4 slot 0 or the kernel half are visible in
/// every address space created with `PageTables::create_sharing_kernel`.
pub fn kernel() -> PageTables<'static, super::DirectMap> {
    PageTables::new(kernel_root(), &DIRECT)
}

/// Device memory mapped into the MMIO window by [`map_mmio_window`]: its registers, read
/// through bounds-checked volatile loads.
#[derive(Clone, Copy, Debug)]
pub struct MmioWindow {
    base: u64,
    len: u64,
}

impl MmioWindow {
    /// The virtual address of the mapped device memory's start.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// The 32-bit register at byte `offset` (4-aligned); `None` beyond the window.
    pub fn read_u32(&self, offset: u64) -> Option<u32> {
        if !offset.is_multiple_of(4) || offset.checked_add(4)? > self.len {
            return None;
        }
        // SAFETY: `[base, base + len)` is device memory mapped uncached for the kernel's
        // lifetime (the MMIO window is never unmapped), and the load is aligned and inside it.
        Some(unsafe { ((self.base + offset) as *const u32).read_volatile() })
    }
}

/// Maps `size` bytes of device memory at physical `pa` into the MMIO window, for reading its
/// registers ([`MmioWindow::read_u32`]) or handing its address to a driver.
pub fn map_mmio_window(pa: u64, size: u64) -> Result<MmioWindow, PagingError> {
    map_mmio(pa, size).map(|base| MmioWindow { base, len: size })
}

/// Maps the shared CXL region, `size` bytes of memory at physical `pa` (page-aligned), at
/// [`fjord_kernel::layout::CXL_BASE`], write-back and not executable, once; returns that address.
pub fn map_cxl_region(pa: u64, size: u64) -> Result<u64, PagingError> {
    use fjord_kernel::layout::{CXL_BASE, CXL_SIZE};
    static MAPPED: Mutex<bool> = Mutex::new(false);
    let mut mapped = MAPPED.lock();
    if *mapped || size > CXL_SIZE || !pa.is_multiple_of(PAGE_SIZE) {
        return Err(PagingError::OutOfMemory);
    }
    let _g = EDIT.lock();
    let mut pt = kernel();
    for off in (0..align_up(size, PAGE_SIZE)).step_by(PAGE_SIZE as usize) {
        pt.map(
            CXL_BASE + off,
            pa + off,
            Flags::KERNEL_RW,
            &mut KernelFrames,
        )?;
    }
    *mapped = true;
    Ok(CXL_BASE)
}

/// Maps `size` bytes of device memory at physical `pa` into the MMIO window; returns the
/// virtual address of `pa`.
pub fn map_mmio(pa: u64, size: u64) -> Result<u64, PagingError> {
    let _g = EDIT.lock();
    let base = align_down(pa, PAGE_SIZE);
    let len = align_up(pa + size, PAGE_SIZE) - base;
    let mut next = MMIO_NEXT.lock();
    if *next + len > MMIO_BASE + MMIO_SIZE {
        return Err(PagingError::OutOfMemory);
    }
    let va = *next;
    let mut pt = kernel();
    for off in (0..len).step_by(PAGE_SIZE as usize) {
        pt.map(va + off, base + off, Flags::MMIO, &mut KernelFrames)?;
    }
    *next += len;
    Ok(va + (pa - base))
}
