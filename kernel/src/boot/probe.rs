//! Boot-time probes of what the CPU, or the hypervisor beneath it, really does, where CPUID
//! cannot say.

use crate::arch::cpu;
use crate::arch::user::{self, UserContext, UserExit};
use crate::mm::frames::{self, DIRECT, KernelFrames};
use crate::mm::kernel_tables;
use fjord_kernel::layout::USER_TEST_BASE;
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

/// Ring-3 code of the probe: `xor eax, eax; syscall` (the null call, which returns 0), then
/// `mov edi, eax; mov eax, 1; syscall` (exit with that result).
const PROBE_CODE: [u8; 13] = [
    0x31, 0xc0, 0x0f, 0x05, 0x89, 0xc7, 0xb8, 0x01, 0x00, 0x00, 0x00, 0x0f, 0x05,
];

/// Makes one SYSCALL from ring 3 in a scratch address space and reports where it arrived.
pub fn syscall_path() -> Result<SyscallPath, PagingError> {
    let mut fa = KernelFrames;
    let pt = PageTables::create_sharing_kernel(&DIRECT, &mut fa, kernel_tables::kernel_root())?;
    let root = pt.root();
    let result = (|| {
        let code = frames::alloc_zeroed().map_err(|_| PagingError::OutOfMemory)?;
        // SAFETY: `code` is a fresh frame, reachable through the direct map and used by no one.
        unsafe {
            core::ptr::copy_nonoverlapping(
                PROBE_CODE.as_ptr(),
                crate::mm::phys_to_virt(code) as *mut u8,
                PROBE_CODE.len(),
            )
        };
        let mut pt = PageTables::new(root, &DIRECT);
        let mapped = pt.map(USER_TEST_BASE, code, Flags::USER, &mut fa);
        let exit = mapped.map(|()| run_probe(root));
        let _ = frames::free(code);
        exit
    })();
    PageTables::new(root, &DIRECT).free_user_tables(&mut fa);
    let before_after = result?;
    Ok(if before_after.1 > before_after.0 {
        SyscallPath::StrandedInRing3
    } else {
        SyscallPath::Ring0
    })
}

/// Runs the probe in `root` and returns the stranded-call count before and after.
fn run_probe(root: u64) -> (u64, u64) {
    let before = user::stranded_syscalls();
    let mut ctx = UserContext::new(USER_TEST_BASE, 0, [0; 4]);
    let deadline = cpu::rdtsc() + crate::arch::apic::tsc_hz() / 10;
    let exit = cpu::without_interrupts(|| {
        // SAFETY: `root` shares the kernel image and kernel half with the kernel's tables.
        unsafe { cpu::write_cr3(root) };
        let exit = user::run(&mut ctx, Some(deadline));
        // SAFETY: back to the kernel's own tables.
        unsafe { cpu::write_cr3(kernel_tables::kernel_root()) };
        exit
    });
    if exit != UserExit::Exited(0) {
        log::warn!("SYSCALL probe ended unexpectedly: {exit:?}");
    }
    (before, user::stranded_syscalls())
}
