//! Kernel stacks: each CPU gets a slot in the stack area holding its kernel stack, trap stack and
//! three IST stacks, each below an unmapped guard page, so an overflow faults instead of
//! corrupting memory.

use super::frames::{self, KernelFrames};
use super::kernel_tables;
use fjord_kernel::layout::{KERNEL_STACK_SLOT, KERNEL_STACKS_BASE, PAGE_SIZE};
use fjord_kernel::paging::{Flags, PagingError};

/// Size of a CPU's main kernel stack.
pub const KERNEL_STACK_SIZE: u64 = 256 * 1024;
/// Size of the trap (RSP0 / SYSCALL) stack.
pub const TRAP_STACK_SIZE: u64 = 64 * 1024;
/// Size of each IST stack.
pub const IST_STACK_SIZE: u64 = 16 * 1024;

pub use crate::arch::smp::CpuStacks;

fn map_stack(base: u64, size: u64) -> Result<u64, PagingError> {
    let mut pt = kernel_tables::kernel();
    for off in (0..size).step_by(PAGE_SIZE as usize) {
        let pa = frames::alloc_zeroed().map_err(|_| PagingError::OutOfMemory)?;
        pt.map(base + off, pa, Flags::KERNEL_RW, &mut KernelFrames)?;
    }
    Ok(base + size)
}

/// Maps the stacks of CPU `index` in its slot.
pub fn allocate(index: usize) -> Result<CpuStacks, PagingError> {
    let slot = KERNEL_STACKS_BASE + index as u64 * KERNEL_STACK_SLOT;
    // Layout: [guard][kernel][guard][trap][guard][ist1][guard][ist2][guard][ist3]
    let mut cursor = slot + PAGE_SIZE;
    let kernel_top = map_stack(cursor, KERNEL_STACK_SIZE)?;
    cursor = kernel_top + PAGE_SIZE;
    let trap_top = map_stack(cursor, TRAP_STACK_SIZE)?;
    cursor = trap_top + PAGE_SIZE;
    let mut ist_tops = [0; 3];
    for top in &mut ist_tops {
        *top = map_stack(cursor, IST_STACK_SIZE)?;
        cursor = *top + PAGE_SIZE;
    }
    debug_assert!(cursor <= slot + KERNEL_STACK_SLOT);
    Ok(CpuStacks {
        kernel_top,
        trap_top,
        ist_tops,
    })
}
