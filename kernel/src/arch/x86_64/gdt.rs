//! The GDT and TSS of each CPU, with IST stacks for faults that must not use a broken stack.
//!
//! Selector layout (fixed, SYSCALL/SYSRET depend on it):
//! `0x08` kernel code, `0x10` kernel data, `0x1b` user data, `0x23` user code, `0x28` TSS.

use alloc::boxed::Box;
use x86_64::VirtAddr;
use x86_64::instructions::segmentation::{CS, DS, ES, SS, Segment};
use x86_64::instructions::tables::load_tss;
use x86_64::registers::segmentation::SegmentSelector;
use x86_64::structures::gdt::{Descriptor, GlobalDescriptorTable};
use x86_64::structures::tss::TaskStateSegment;

/// Kernel code selector.
pub const KERNEL_CS: u16 = 0x08;
/// Kernel data selector.
pub const KERNEL_DS: u16 = 0x10;
/// User data selector (RPL 3).
pub const USER_DS: u16 = 0x1b;
/// User code selector (RPL 3).
pub const USER_CS: u16 = 0x23;

/// IST slot (1-based, as in the IDT) for double faults.
pub const IST_DOUBLE_FAULT: u8 = 1;
/// IST slot for NMIs.
pub const IST_NMI: u8 = 2;
/// IST slot for machine checks.
pub const IST_MACHINE_CHECK: u8 = 3;

/// The stacks a CPU's TSS points to.
pub struct CpuStacks {
    /// RSP0: where ring-3 interrupts and exceptions land (also the SYSCALL stack).
    pub trap_top: u64,
    /// Tops of IST stacks 1..=3.
    pub ist_tops: [u64; 3],
}

/// Builds and loads a GDT and TSS for the calling CPU; both are leaked.
pub fn init_cpu(stacks: &CpuStacks) {
    let tss = Box::leak(Box::new(TaskStateSegment::new()));
    tss.privilege_stack_table[0] = VirtAddr::new(stacks.trap_top);
    for (i, top) in stacks.ist_tops.iter().enumerate() {
        tss.interrupt_stack_table[i] = VirtAddr::new(*top);
    }
    let gdt = Box::leak(Box::new(GlobalDescriptorTable::<8>::empty()));
    let kcs = gdt.append(Descriptor::kernel_code_segment());
    let kds = gdt.append(Descriptor::kernel_data_segment());
    let uds = gdt.append(Descriptor::user_data_segment());
    let ucs = gdt.append(Descriptor::user_code_segment());
    let tss_sel = gdt.append(Descriptor::tss_segment(tss));
    debug_assert_eq!(
        (kcs.0, kds.0, uds.0, ucs.0),
        (KERNEL_CS, KERNEL_DS, USER_DS, USER_CS)
    );
    gdt.load();
    // SAFETY: the selectors index the descriptors just appended to the loaded GDT.
    unsafe {
        CS::set_reg(SegmentSelector(KERNEL_CS));
        DS::set_reg(SegmentSelector(KERNEL_DS));
        ES::set_reg(SegmentSelector(KERNEL_DS));
        SS::set_reg(SegmentSelector(KERNEL_DS));
        load_tss(tss_sel);
    }
}
