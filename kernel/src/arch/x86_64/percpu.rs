//! Per-CPU data, reached through the GS base register while in the kernel.
//!
//! The first fields are read by assembly (syscall entry, trap entry, user-mode entry) at fixed
//! offsets, so the struct is `repr(C)` and the offsets are exported as constants.

use super::cpu;
use core::mem::offset_of;
use core::sync::atomic::{AtomicU64, Ordering};

/// Why a run of user code came back to the kernel (filled in by the trap and syscall paths).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RawExit {
    /// Kind of exit (see `user::ExitKind`).
    pub kind: u64,
    /// First detail word (exit code, or faulting vector).
    pub a: u64,
    /// Second detail word (faulting address).
    pub b: u64,
    /// Third detail word (error code).
    pub c: u64,
}

/// A fault the kernel caught on purpose (see `trap::probe_read`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct CaughtFault {
    /// Exception vector.
    pub vector: u64,
    /// Error code pushed by the CPU (0 when none).
    pub error: u64,
    /// CR2 at the time of the fault.
    pub addr: u64,
    /// Where the faulting instruction was.
    pub rip: u64,
}

/// The per-CPU block. One is allocated for each CPU and never freed.
#[repr(C)]
pub struct PerCpu {
    /// Address of this block (so `gs:[0]` yields a pointer to it).
    pub self_ptr: u64,
    /// Top of the trap stack: RSP0 of the TSS and the SYSCALL entry stack.
    pub trap_stack_top: u64,
    /// Scratch slot for the user RSP during SYSCALL entry.
    pub user_rsp: u64,
    /// Kernel RSP saved by `user::enter`, restored when user code exits to the kernel.
    pub kernel_resume_rsp: u64,
    /// The user context being run (`*mut TrapFrame`).
    pub user_ctx: u64,
    /// Address to resume at if the kernel faults on purpose (0: none armed).
    pub fault_fixup: u64,
    /// Dense CPU index (0 = bootstrap processor).
    pub index: u64,
    /// Local APIC id.
    pub apic_id: u64,
    /// Deadline (TSC) for the current user run; a timer tick past it ends the run (0: none).
    pub user_deadline: u64,
    /// How the last user run ended.
    pub exit: RawExit,
    /// The last fault caught through `fault_fixup`.
    pub caught: CaughtFault,
    /// Timer interrupts taken on this CPU.
    pub timer_ticks: AtomicU64,
    /// IPIs received on this CPU.
    pub ipis: AtomicU64,
    /// The protection domain whose code this CPU runs (`ucid`; 0 = the kernel).
    pub current_pd: u64,
    /// The FS base last loaded for ring 3 (the kernel itself never uses FS).
    pub user_fs_base: u64,
    /// The local APIC timer is in one-shot mode with its divider set (by `apic::arm_oneshot`),
    /// so re-arming it takes only the initial count.
    pub timer_oneshot: bool,
}

/// Offset of [`PerCpu::trap_stack_top`].
pub const OFF_TRAP_STACK_TOP: usize = offset_of!(PerCpu, trap_stack_top);
/// Offset of [`PerCpu::user_rsp`].
pub const OFF_USER_RSP: usize = offset_of!(PerCpu, user_rsp);
/// Offset of [`PerCpu::kernel_resume_rsp`].
pub const OFF_KERNEL_RESUME_RSP: usize = offset_of!(PerCpu, kernel_resume_rsp);
/// Offset of [`PerCpu::user_ctx`].
pub const OFF_USER_CTX: usize = offset_of!(PerCpu, user_ctx);
/// Offset of [`PerCpu::fault_fixup`].
pub const OFF_FAULT_FIXUP: usize = offset_of!(PerCpu, fault_fixup);
/// Offset of [`PerCpu::ipis`].
pub const OFF_IPIS: usize = offset_of!(PerCpu, ipis);

impl PerCpu {
    /// A block for CPU `index` with the given APIC id and trap stack.
    pub fn new(index: u64, apic_id: u64, trap_stack_top: u64) -> Self {
        PerCpu {
            self_ptr: 0,
            trap_stack_top,
            user_rsp: 0,
            kernel_resume_rsp: 0,
            user_ctx: 0,
            fault_fixup: 0,
            index,
            apic_id,
            user_deadline: 0,
            exit: RawExit::default(),
            caught: CaughtFault::default(),
            timer_ticks: AtomicU64::new(0),
            ipis: AtomicU64::new(0),
            current_pd: 0,
            user_fs_base: 0,
            timer_oneshot: false,
        }
    }
}

/// Installs `block` as this CPU's per-CPU data (GS base) and leaks it.
pub fn install(block: alloc::boxed::Box<PerCpu>) {
    let p = alloc::boxed::Box::leak(block);
    p.self_ptr = p as *mut PerCpu as u64;
    // SAFETY: GS_BASE and KERNEL_GS_BASE exist on every x86_64 CPU; the block is leaked, so the
    // pointer stays valid forever. User GS starts as 0.
    unsafe {
        cpu::wrmsr(cpu::IA32_GS_BASE, p.self_ptr);
        cpu::wrmsr(cpu::IA32_KERNEL_GS_BASE, 0);
    }
}

/// This CPU's block.
///
/// Only valid after [`install`] ran on this CPU. The reference is shared; fields that change
/// after boot are either atomics or touched only by this CPU with interrupts disabled.
pub fn current() -> &'static mut PerCpu {
    let p: u64;
    // SAFETY: gs:[0] is `self_ptr` of the installed block (see `install`).
    unsafe {
        core::arch::asm!("mov {}, gs:[0]", out(reg) p, options(nostack, readonly, preserves_flags))
    };
    // SAFETY: the block is leaked and only this CPU mutates its non-atomic fields.
    unsafe { &mut *(p as *mut PerCpu) }
}

/// True once this CPU has a per-CPU block (GS base set).
pub fn is_installed() -> bool {
    // SAFETY: reading GS_BASE has no side effects.
    unsafe { cpu::rdmsr(cpu::IA32_GS_BASE) != 0 }
}

/// This CPU's dense index (0 before per-CPU data exists).
pub fn cpu_index() -> usize {
    if is_installed() {
        current().index as usize
    } else {
        0
    }
}

/// Counts a timer tick on this CPU.
pub fn count_tick() {
    current().timer_ticks.fetch_add(1, Ordering::Relaxed);
}
