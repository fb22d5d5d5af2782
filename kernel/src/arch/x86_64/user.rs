//! Ring 3: entering user code, the SYSCALL gate, and user code's way back into the kernel.
//!
//! The kernel runs user code with [`run`], which saves the kernel's callee-saved registers, loads
//! the user context and `iretq`s to ring 3. Three things bring the CPU back:
//! - a system call, handled on the per-CPU trap stack and normally returned with `sysretq`;
//! - an exception in user code, which ends the run with [`UserExit::Fault`];
//! - a timer tick past the run's deadline, which ends it with [`UserExit::TimedOut`].
//!
//! Ending a run copies the user registers back into the [`UserContext`] and returns from `run`
//! on the kernel stack it was called on; the trap stack is simply abandoned.

use super::cpu::{self, IA32_EFER, IA32_FMASK, IA32_LSTAR, IA32_STAR};
use super::gdt::{KERNEL_CS, USER_CS, USER_DS};
use super::percpu::{
    self, OFF_KERNEL_RESUME_RSP, OFF_TRAP_STACK_TOP, OFF_USER_CTX, OFF_USER_RSP, RawExit,
};
use super::trap::{SYSCALL_VECTOR, TrapFrame};
use core::arch::global_asm;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

global_asm!(
    r#"
    .section .text.user, "ax"
    .global user_enter
user_enter:
    push rbx
    push rbp
    push r12
    push r13
    push r14
    push r15
    pushfq
    cli
    mov gs:[{resume}], rsp
    mov gs:[{ctx}], rdi
    mov rsp, rdi
    jmp trap_return

    .global user_return_to_kernel
user_return_to_kernel:
    mov rsp, gs:[{resume}]
    popfq
    pop r15
    pop r14
    pop r13
    pop r12
    pop rbp
    pop rbx
    ret

    .global syscall_entry
syscall_entry:
    swapgs
    mov gs:[{user_rsp}], rsp
    mov rsp, gs:[{trap_top}]
    push {user_ds}
    push qword ptr gs:[{user_rsp}]
    push r11
    push {user_cs}
    push rcx
    push 0
    push {sysvec}
    push rax
    push rbx
    push rcx
    push rdx
    push rsi
    push rdi
    push rbp
    push r8
    push r9
    push r10
    push r11
    push r12
    push r13
    push r14
    push r15
    mov rdi, rsp
    call {dispatch}
    pop r15
    pop r14
    pop r13
    pop r12
    pop r11
    pop r10
    pop r9
    pop r8
    pop rbp
    pop rdi
    pop rsi
    pop rdx
    pop rcx
    pop rbx
    pop rax
    add rsp, 16
    mov rcx, [rsp]
    mov r11, [rsp + 16]
    mov rsp, [rsp + 24]
    swapgs
    sysretq
    .text
"#,
    resume = const OFF_KERNEL_RESUME_RSP,
    ctx = const OFF_USER_CTX,
    user_rsp = const OFF_USER_RSP,
    trap_top = const OFF_TRAP_STACK_TOP,
    user_ds = const USER_DS,
    user_cs = const USER_CS,
    sysvec = const SYSCALL_VECTOR,
    dispatch = sym syscall_dispatch,
);

global_asm!(
    r#"
    /* Ring-3 code that resets the FPU and vector registers (rdi: XSAVE present; rsi: a
       64-byte-aligned area whose header asks for every component's initial state), then
       exits. Copied into a user page only where ring 3's FPU use does not trap (see
       `enable_fpu_reset`). */
    .section .rodata.fpu_reset, "a"
    .balign 16
    .global fpu_reset_start
    .global fpu_reset_end
fpu_reset_start:
    test edi, edi
    jz 1f
    mov eax, -1
    mov edx, -1
    xrstor64 [rsi]
    jmp 2f
1:
    fxrstor64 [rsi]
2:
    mov eax, {exit}
    xor edi, edi
    syscall
    ud2
fpu_reset_end:
    .text
"#,
    exit = const 1,
);

unsafe extern "C" {
    static fpu_reset_start: u8;
    static fpu_reset_end: u8;
    fn user_enter(ctx: *mut TrapFrame);
    fn user_return_to_kernel() -> !;
    fn syscall_entry();
}

/// Programs SYSCALL/SYSRET on the calling CPU.
pub fn init_cpu() {
    // SAFETY: these MSRs exist on every x86_64 CPU. STAR selects kernel CS 0x08 / SS 0x10 on
    // SYSCALL and user CS 0x23 / SS 0x1b on SYSRET (see `gdt`); FMASK clears IF, TF, DF and AC
    // on entry; EFER.SCE enables the instructions.
    unsafe {
        let sysret_base = u64::from(USER_DS & !3) - 8;
        cpu::wrmsr(
            IA32_STAR,
            (sysret_base << 48) | (u64::from(KERNEL_CS) << 32),
        );
        cpu::wrmsr(IA32_LSTAR, syscall_entry as *const () as u64);
        cpu::wrmsr(IA32_FMASK, (1 << 9) | (1 << 8) | (1 << 10) | (1 << 18));
        let efer = cpu::rdmsr(IA32_EFER);
        cpu::wrmsr(IA32_EFER, efer | 1);
    }
}

/// Where the FPU-reset code of [`enable_fpu_reset`] is mapped (0: it is not).
static FPU_RESET_PAGE: AtomicU64 = AtomicU64::new(0);
/// Whether the reset code may use XRSTOR (else FXRSTOR).
static FPU_RESET_XSAVE: AtomicBool = AtomicBool::new(false);
/// Offset of the initial-state area in the FPU-reset page.
pub const FPU_RESET_AREA: usize = 0x400;

/// The bytes of the FPU-reset code, to be copied to offset 0 of a user page.
pub fn fpu_reset_code() -> &'static [u8] {
    let start = &raw const fpu_reset_start;
    let end = &raw const fpu_reset_end;
    // SAFETY: both symbols delimit the code in .rodata, which is mapped and never written.
    unsafe { core::slice::from_raw_parts(start, end as usize - start as usize) }
}

/// Fills `area` (at least 576 bytes) with the initial-state image the reset code loads: x87
/// control word 0x37f, MXCSR 0x1f80, everything else zero (an XSAVE header asking for every
/// component's initial state).
pub fn fpu_initial_area(area: &mut [u8]) {
    area[..576].fill(0);
    area[0..2].copy_from_slice(&0x037fu16.to_le_bytes());
    area[24..28].copy_from_slice(&0x1f80u32.to_le_bytes());
}

/// Resets the FPU and vector registers before every ring-3 run, with the code mapped
/// user-executable at `page` (the same address in every address space).
///
/// On hardware and under VMX or SVM, CR0.EM makes every x87, MMX and SSE instruction of ring
/// 3 trap, so no PD has registers another could read. A hypervisor that runs ring 3 on its
/// own control registers (KVM's PVM backend) lets them run, and its emulated ring 0 cannot
/// execute them: ring 3 clears them itself, from this page, before each run.
pub fn enable_fpu_reset(page: u64, xsave: bool) {
    FPU_RESET_XSAVE.store(xsave, Ordering::Relaxed);
    FPU_RESET_PAGE.store(page, Ordering::Release);
}

/// True when ring-3 runs are preceded by an FPU reset.
pub fn fpu_reset_enabled() -> bool {
    FPU_RESET_PAGE.load(Ordering::Acquire) != 0
}

/// Runs the reset code in ring 3 on this CPU, in whatever address space is loaded.
fn reset_fpu(page: u64) {
    let xsave = FPU_RESET_XSAVE.load(Ordering::Relaxed);
    let mut ctx = UserContext::new(
        page,
        0,
        [u64::from(xsave), page + FPU_RESET_AREA as u64, 0, 0],
    );
    match enter(&mut ctx, None) {
        UserExit::Exited(0) => {}
        other if xsave => {
            log::warn!("FPU reset with XRSTOR failed ({other:?}); using FXRSTOR");
            FPU_RESET_XSAVE.store(false, Ordering::Relaxed);
            reset_fpu(page);
        }
        other => log::error!("FPU reset failed: {other:?}"),
    }
}

/// The register state of a user thread.
#[derive(Clone, Copy, Debug, Default)]
pub struct UserContext {
    /// Saved registers; `rip`, `rsp` and the argument registers are set by the caller.
    pub frame: TrapFrame,
    /// The thread pointer (FS base) while this context runs; ring 3 cannot change it.
    pub fs_base: u64,
}

impl UserContext {
    /// A context that starts at `entry` with stack `stack_top` and arguments in rdi, rsi, rdx
    /// and rcx.
    pub fn new(entry: u64, stack_top: u64, args: [u64; 4]) -> Self {
        let frame = TrapFrame {
            rip: entry,
            rsp: stack_top,
            cs: u64::from(USER_CS),
            ss: u64::from(USER_DS),
            rflags: 0x202, // IF set
            rdi: args[0],
            rsi: args[1],
            rdx: args[2],
            rcx: args[3],
            ..TrapFrame::default()
        };
        UserContext { frame, fs_base: 0 }
    }
}

/// The kind of access that faulted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// A data read.
    Read,
    /// A data write.
    Write,
    /// An instruction fetch.
    Execute,
}

/// A fault raised by user code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UserFault {
    /// Exception vector (14 for a page fault).
    pub vector: u64,
    /// Faulting address (page faults) or 0.
    pub addr: u64,
    /// Access type (page faults).
    pub access: Access,
    /// True when the page was present (a protection violation rather than a missing page).
    pub protection: bool,
    /// Instruction that faulted.
    pub rip: u64,
}

/// How a run of user code ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UserExit {
    /// The code called `exit` with this code.
    Exited(u64),
    /// The code raised an exception.
    Fault(UserFault),
    /// The code ran past its deadline and was preempted by the timer.
    TimedOut,
    /// The code made a system call that the kernel thread running it must handle (a call
    /// between protection domains). The context is left just after the `syscall`; resume it
    /// with the result in `rax`.
    Request {
        /// System-call number.
        no: u64,
        /// Arguments (rdi, rsi, rdx, r10).
        args: [u64; 4],
    },
}

const EXIT_EXITED: u64 = 1;
const EXIT_FAULT: u64 = 2;
const EXIT_TIMEOUT: u64 = 3;
const EXIT_REQUEST: u64 = 4;

/// User faults seen since boot, on all CPUs.
pub static USER_FAULTS: AtomicU64 = AtomicU64::new(0);

/// Runs `ctx` in ring 3 on this CPU until it exits, faults or passes `deadline` (a TSC value).
/// The caller must have loaded page tables that map the context's code and stack for ring 3.
pub fn run(ctx: &mut UserContext, deadline: Option<u64>) -> UserExit {
    let page = FPU_RESET_PAGE.load(Ordering::Acquire);
    if page != 0 {
        reset_fpu(page);
    }
    enter(ctx, deadline)
}

/// [`run`] without the FPU reset.
fn enter(ctx: &mut UserContext, deadline: Option<u64>) -> UserExit {
    let pc = percpu::current();
    pc.user_deadline = deadline.unwrap_or(0);
    pc.exit = RawExit::default();
    if pc.user_fs_base != ctx.fs_base {
        // SAFETY: IA32_FS_BASE exists on every x86_64 CPU and only affects FS-relative
        // accesses, which only ring-3 code makes.
        unsafe { cpu::wrmsr(cpu::IA32_FS_BASE, ctx.fs_base) };
        pc.user_fs_base = ctx.fs_base;
    }
    // SAFETY: `ctx.frame` is a valid user frame (ring-3 selectors, set by `UserContext::new` or
    // left by a previous run); user_enter returns here once the run ends.
    unsafe { user_enter(&mut ctx.frame) };
    let e = percpu::current().exit;
    match e.kind {
        EXIT_EXITED => UserExit::Exited(e.a),
        EXIT_TIMEOUT => UserExit::TimedOut,
        EXIT_REQUEST => UserExit::Request {
            no: e.a,
            args: [ctx.frame.rdi, ctx.frame.rsi, ctx.frame.rdx, ctx.frame.r10],
        },
        _ => UserExit::Fault(UserFault {
            vector: e.a,
            addr: e.b,
            access: if e.c & 16 != 0 {
                Access::Execute
            } else if e.c & 2 != 0 {
                Access::Write
            } else {
                Access::Read
            },
            protection: e.c & 1 != 0,
            rip: ctx.frame.rip,
        }),
    }
}

/// Ends the current user run: saves `frame` into the running context and returns from `run`.
fn end_run(frame: &TrapFrame, exit: RawExit) -> ! {
    let pc = percpu::current();
    pc.exit = exit;
    pc.user_deadline = 0;
    // SAFETY: `user_ctx` was set by `user_enter` to the context of the run in progress, which
    // lives in the caller of `run` and outlives the run.
    unsafe { *(pc.user_ctx as *mut TrapFrame) = *frame };
    // SAFETY: a run is in progress on this CPU (we came from ring 3), so the resume RSP holds
    // the frame pushed by `user_enter`.
    unsafe { user_return_to_kernel() }
}

/// System calls that arrived as an instruction-fetch fault at the SYSCALL entry in ring 3
/// (see [`is_stranded_syscall`]), since boot, on all CPUs.
static STRANDED_SYSCALLS: AtomicU64 = AtomicU64::new(0);

/// System calls served from a fetch fault at the entry point since boot (see
/// [`is_stranded_syscall`]).
pub fn stranded_syscalls() -> u64 {
    STRANDED_SYSCALLS.load(Ordering::Relaxed)
}

/// Page-fault error code bits: the access was made in ring 3, and was an instruction fetch.
const PF_USER: u64 = 1 << 2;
const PF_FETCH: u64 = 1 << 4;

/// RFLAGS bits ring 3 may carry back through a stranded system call's R11: the arithmetic
/// flags, DF, TF and AC. Never IOPL, NT, RF or VM, which ring 3 cannot set for itself.
const USER_RFLAGS: u64 = 0x4_0dd5;

/// True when `frame` is a ring-3 instruction fetch of the SYSCALL entry point itself.
///
/// On hardware, and under KVM on VMX or SVM, SYSCALL enters ring 0 at `IA32_LSTAR`. Some
/// hypervisors emulate SYSCALL for a guest that runs in hardware ring 3 and set RIP, RCX, R11
/// and RFLAGS as the instruction does but leave the guest in user mode (seen under KVM's PVM
/// backend): ring 3 then fetches the kernel's entry point and faults. RCX and R11 already hold
/// the return address and the caller's flags, so the fault is the system call, and it is
/// served as one.
fn is_stranded_syscall(frame: &TrapFrame, cr2: u64) -> bool {
    frame.vector == 14
        && frame.error & (PF_USER | PF_FETCH) == PF_USER | PF_FETCH
        && cr2 == frame.rip
        && frame.rip == syscall_entry as *const () as u64
}

/// Serves a system call that [`is_stranded_syscall`] found: it returns to RCX with R11's
/// flags, as SYSRET would, through the trap return (IRETQ).
fn serve_stranded_syscall(frame: &mut TrapFrame) {
    STRANDED_SYSCALLS.fetch_add(1, Ordering::Relaxed);
    frame.rip = frame.rcx;
    // Ring 3 could also have jumped to the entry point with any R11, so only the flags it may
    // set itself are kept, with IF on as on every return to ring 3.
    frame.rflags = (frame.r11 & USER_RFLAGS) | 0x202;
    frame.vector = SYSCALL_VECTOR;
    frame.error = 0;
    syscall_dispatch(frame);
}

/// Called by the trap dispatcher for an exception raised in ring 3. A page fault that the
/// kernel resolves (a VLB fill, or a system call the hypervisor left in ring 3) returns so the
/// user code goes on; anything else ends the run.
pub fn on_exception_from_user(frame: &mut TrapFrame, cr2: u64) {
    if is_stranded_syscall(frame, cr2) {
        serve_stranded_syscall(frame);
        return;
    }
    if frame.vector == 14 && resolve_user_fault(cr2, frame.error) {
        return;
    }
    USER_FAULTS.fetch_add(1, Ordering::Relaxed);
    let addr = if frame.vector == 14 { cr2 } else { 0 };
    end_run(
        frame,
        RawExit {
            kind: EXIT_FAULT,
            a: frame.vector,
            b: addr,
            c: frame.error,
        },
    )
}

/// Called by the trap dispatcher for a timer tick that interrupted ring 3.
pub fn on_timer_from_user(frame: &TrapFrame) {
    let deadline = percpu::current().user_deadline;
    if deadline != 0 && cpu::rdtsc() >= deadline {
        end_run(
            frame,
            RawExit {
                kind: EXIT_TIMEOUT,
                ..RawExit::default()
            },
        );
    }
}

/// What the system-call entry does once the kernel's handler ran.
pub enum SyscallAction {
    /// Return to the caller with this `rax`.
    Return(u64),
    /// End the run: the code exited with this code.
    Exit(u64),
    /// End the run: the executor running this code handles the call (`UserExit::Request`).
    Delegate,
}

/// Resolves a ring-3 page fault at `addr` with error code `error` through the kernel's handler
/// (the crate root's `kernel_user_page_fault`: Jord's VLB fill), as the trap path does; the
/// kernel's checks of user memory use it to fill misses. True when the page is now mapped as
/// the access needs.
#[inline]
pub fn resolve_user_fault(addr: u64, error: u64) -> bool {
    crate::kernel_user_page_fault(addr, error)
}

extern "C" fn syscall_dispatch(frame: &mut TrapFrame) {
    let args = [frame.rdi, frame.rsi, frame.rdx, frame.r10];
    // The kernel's system-call policy, named by the crate root (`kernel_syscall`).
    match crate::kernel_syscall(frame.rax, args) {
        SyscallAction::Return(v) => frame.rax = v,
        SyscallAction::Exit(code) => end_run(
            frame,
            RawExit {
                kind: EXIT_EXITED,
                a: code,
                ..RawExit::default()
            },
        ),
        SyscallAction::Delegate => end_run(
            frame,
            RawExit {
                kind: EXIT_REQUEST,
                a: frame.rax,
                ..RawExit::default()
            },
        ),
    }
}
