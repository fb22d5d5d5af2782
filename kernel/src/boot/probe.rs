//! Boot-time probes of what the CPU, or the hypervisor beneath it, really does where CPUID
//! cannot say: each runs a few bytes of ring-3 code in a scratch address space.

use crate::arch::cpu;
use crate::arch::user::{self, UserContext, UserExit};
use crate::mm::frames::{DIRECT, FrameRun, KernelFrames};
use crate::mm::kernel_tables;
use fjord_kernel::layout::{FPU_RESET_PAGE, USER_TEST_BASE};
use fjord_kernel::paging::{Flags, PageTables, PagingError};

/// Where a ring-3 SYSCALL arrives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyscallPath {
    /// In ring 0 at `IA32_LSTAR`, as the architecture defines (hardware, VMX, SVM, TCG).
    Ring0,
    /// Still in ring 3, at `IA32_LSTAR`: the hypervisor emulated the instruction without the
    /// privilege switch (KVM's PVM backend). The kernel serves such calls from the fetch fault.
    StrandedInRing3,
}

/// `xor eax, eax; syscall` (the null call, which returns 0), then `mov edi, eax; mov eax, 1;
/// syscall` (exit with that result).
const SYSCALL_PROBE: [u8; 13] = [
    0x31, 0xc0, 0x0f, 0x05, 0x89, 0xc7, 0xb8, 0x01, 0x00, 0x00, 0x00, 0x0f, 0x05,
];

/// `fld1; fstp st(0)`, then `xor edi, edi; mov eax, 1; syscall` (exit with 0).
const FPU_PROBE: [u8; 13] = [
    0xd9, 0xe8, 0xdd, 0xd8, 0x31, 0xff, 0xb8, 0x01, 0x00, 0x00, 0x00, 0x0f, 0x05,
];

/// Makes one SYSCALL from ring 3 and reports where it arrived.
pub fn syscall_path() -> Result<SyscallPath, PagingError> {
    let before = user::stranded_syscalls();
    let exit = run_ring3(&SYSCALL_PROBE)?;
    if exit != UserExit::Exited(0) {
        log::warn!("SYSCALL probe ended unexpectedly: {exit:?}");
    }
    Ok(if user::stranded_syscalls() > before {
        SyscallPath::StrandedInRing3
    } else {
        SyscallPath::Ring0
    })
}

/// Runs one x87 instruction in ring 3: true when it trapped (#NM, CR0.EM honoured).
pub fn fpu_traps_in_ring3() -> Result<bool, PagingError> {
    Ok(match run_ring3(&FPU_PROBE)? {
        UserExit::Fault(f) if f.vector == 7 => true,
        UserExit::Exited(0) => false,
        other => {
            log::warn!("FPU probe ended unexpectedly: {other:?}");
            true
        }
    })
}

/// Maps the FPU-reset code at [`FPU_RESET_PAGE`] in the kernel's tables (PML4 slot 0, which
/// every root shares), read-execute for ring 3, and turns the reset on. Must run before any
/// address space other than the kernel's is created.
pub fn install_fpu_reset() -> Result<(), PagingError> {
    let mut page = code_page(user::fpu_reset_code())?;
    let mut area = [0u8; 576];
    user::fpu_initial_area(&mut area);
    page.write_at(user::FPU_RESET_AREA, &area);
    // The page stays mapped for the kernel's lifetime: its frame is never freed.
    kernel_tables::kernel().map(FPU_RESET_PAGE, page.phys(), Flags::USER, &mut KernelFrames)?;
    let xsave = core::arch::x86_64::__cpuid(1).ecx & (1 << 26) != 0;
    user::enable_fpu_reset(FPU_RESET_PAGE, xsave);
    Ok(())
}

/// A zeroed frame with `code` at its start.
fn code_page(code: &[u8]) -> Result<FrameRun, PagingError> {
    let mut page = FrameRun::alloc(1).map_err(|_| PagingError::OutOfMemory)?;
    page.zero(0, 1);
    if !page.write_at(0, code) {
        // Only code longer than a page; every probe is a few bytes.
        page.free();
        return Err(PagingError::OutOfMemory);
    }
    Ok(page)
}

/// Runs `code` in ring 3 at [`USER_TEST_BASE`] of a scratch address space, with no stack.
fn run_ring3(code: &[u8]) -> Result<UserExit, PagingError> {
    let mut fa = KernelFrames;
    let pt = PageTables::create_sharing_kernel(&DIRECT, &mut fa, kernel_tables::kernel_root())?;
    let root = pt.root();
    let result = (|| {
        let page = code_page(code)?;
        let exit = PageTables::new(root, &DIRECT)
            .map(USER_TEST_BASE, page.phys(), Flags::USER, &mut fa)
            .map(|()| {
                let mut ctx = UserContext::new(USER_TEST_BASE, 0, [0; 4]);
                let deadline = crate::arch::time::deadline_after_ms(100);
                cpu::without_interrupts(|| {
                    kernel_tables::load_space(root);
                    let exit = user::run(&mut ctx, Some(deadline));
                    kernel_tables::load_space(kernel_tables::kernel_root());
                    exit
                })
            });
        page.free();
        exit
    })();
    PageTables::new(root, &DIRECT).free_user_tables(&mut fa);
    result
}
