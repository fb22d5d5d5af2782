//! Interrupts and exceptions: the IDT, the entry stubs, and the dispatcher.
//!
//! Every vector has a 16-byte stub that pushes a dummy error code where the CPU pushes none,
//! then the vector number, and jumps to `trap_common`, which saves the registers as a
//! [`TrapFrame`] and calls [`trap_dispatch`]. The wake-up IPI is the exception: it only ends an
//! idle CPU's halt, so its entry (`work_ipi_entry`) counts it and signals end of interrupt in a
//! few instructions, saving nothing but the registers it uses. Exceptions in kernel code either
//! resume at an armed fix-up address (deliberate probes) or print a full report and exit QEMU
//! with the failure code; exceptions in user code end the user run with a typed event (see
//! `user`).

use super::exit::{ExitCode, exit_qemu};
use super::gdt::{IST_DOUBLE_FAULT, IST_MACHINE_CHECK, IST_NMI, KERNEL_CS};
use super::percpu::{self, CaughtFault, OFF_FAULT_FIXUP};
use super::{apic, cpu, serial, user};
use core::arch::{asm, global_asm};
use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};

/// Registers saved on entry to the kernel (trap or syscall), lowest address first.
#[derive(Clone, Copy, Default, Debug)]
#[repr(C)]
pub struct TrapFrame {
    /// General-purpose registers, in the order `trap_common` pushes them (reversed).
    pub r15: u64,
    #[allow(missing_docs)]
    pub r14: u64,
    #[allow(missing_docs)]
    pub r13: u64,
    #[allow(missing_docs)]
    pub r12: u64,
    #[allow(missing_docs)]
    pub r11: u64,
    #[allow(missing_docs)]
    pub r10: u64,
    #[allow(missing_docs)]
    pub r9: u64,
    #[allow(missing_docs)]
    pub r8: u64,
    #[allow(missing_docs)]
    pub rbp: u64,
    #[allow(missing_docs)]
    pub rdi: u64,
    #[allow(missing_docs)]
    pub rsi: u64,
    #[allow(missing_docs)]
    pub rdx: u64,
    #[allow(missing_docs)]
    pub rcx: u64,
    #[allow(missing_docs)]
    pub rbx: u64,
    #[allow(missing_docs)]
    pub rax: u64,
    /// Vector number (`SYSCALL_VECTOR` for the syscall path).
    pub vector: u64,
    /// Error code (0 when the CPU pushes none).
    pub error: u64,
    /// Interrupted instruction.
    pub rip: u64,
    /// Interrupted code segment.
    pub cs: u64,
    /// Interrupted flags.
    pub rflags: u64,
    /// Interrupted stack pointer.
    pub rsp: u64,
    /// Interrupted stack segment.
    pub ss: u64,
}

impl TrapFrame {
    /// True when the trap came from ring 3.
    pub fn is_from_user(&self) -> bool {
        self.cs & 3 == 3
    }
}

/// Pseudo vector recorded in frames built by the SYSCALL entry.
pub const SYSCALL_VECTOR: u64 = 0x100;
/// Vector of the local APIC timer.
pub const TIMER_VECTOR: u8 = 0x20;
/// Vector of the "run queued work" IPI.
pub const WORK_IPI_VECTOR: u8 = 0xf0;
/// Vector of the TLB-shootdown IPI.
pub const TLB_IPI_VECTOR: u8 = 0xf1;
/// Vector of the APIC error interrupt.
pub const APIC_ERROR_VECTOR: u8 = 0xfe;
/// Vector of the APIC spurious interrupt.
pub const SPURIOUS_VECTOR: u8 = 0xff;

const EXCEPTION_NAMES: [&str; 32] = [
    "DIVIDE ERROR",
    "DEBUG",
    "NMI",
    "BREAKPOINT",
    "OVERFLOW",
    "BOUND RANGE EXCEEDED",
    "INVALID OPCODE",
    "DEVICE NOT AVAILABLE",
    "DOUBLE FAULT",
    "COPROCESSOR SEGMENT OVERRUN",
    "INVALID TSS",
    "SEGMENT NOT PRESENT",
    "STACK-SEGMENT FAULT",
    "GENERAL PROTECTION FAULT",
    "PAGE FAULT",
    "RESERVED 15",
    "x87 FLOATING-POINT EXCEPTION",
    "ALIGNMENT CHECK",
    "MACHINE CHECK",
    "SIMD FLOATING-POINT EXCEPTION",
    "VIRTUALIZATION EXCEPTION",
    "CONTROL PROTECTION EXCEPTION",
    "RESERVED 22",
    "RESERVED 23",
    "RESERVED 24",
    "RESERVED 25",
    "RESERVED 26",
    "RESERVED 27",
    "HYPERVISOR INJECTION EXCEPTION",
    "VMM COMMUNICATION EXCEPTION",
    "SECURITY EXCEPTION",
    "RESERVED 31",
];

/// Name of an exception vector.
pub fn exception_name(vector: u64) -> &'static str {
    EXCEPTION_NAMES
        .get(vector as usize)
        .copied()
        .unwrap_or("INTERRUPT")
}

global_asm!(
    r#"
    .section .text.trap, "ax"
    .balign 16
    .global trap_stubs
trap_stubs:
    .set vec, 0
    .rept 256
    .balign 16
    .if (vec == 8) || ((vec >= 10) && (vec <= 14)) || (vec == 17) || (vec == 21) || (vec == 29) || (vec == 30)
    .else
    push 0
    .endif
    push vec
    jmp trap_common
    .set vec, vec + 1
    .endr

trap_common:
    /* [rsp]: vector, +8 error, +16 rip, +24 cs */
    test qword ptr [rsp + 24], 3
    jz 1f
    swapgs
1:
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
    cld
    call {dispatch}
    .global trap_return
trap_return:
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
    test qword ptr [rsp + 24], 3
    jz 2f
    swapgs
2:
    add rsp, 16
    iretq

    /* The wake-up IPI (WORK_IPI_VECTOR): it only ends a halt, so it counts itself and
       signals end of interrupt without a TrapFrame. [rsp]: rip, +8 cs. */
    .balign 16
    .global work_ipi_entry
work_ipi_entry:
    test qword ptr [rsp + 8], 3
    jz 1f
    swapgs
1:
    lock inc qword ptr gs:[{ipis}]
    push rax
    mov rax, qword ptr [rip + {eoi_mmio}]
    test rax, rax
    jz 2f
    mov dword ptr [rax], 0
    pop rax
    jmp 3f
2:
    push rcx
    push rdx
    mov ecx, 0x80b
    xor eax, eax
    xor edx, edx
    wrmsr
    pop rdx
    pop rcx
    pop rax
3:
    test qword ptr [rsp + 8], 3
    jz 4f
    swapgs
4:
    iretq
    .text
"#,
    dispatch = sym trap_dispatch,
    ipis = const percpu::OFF_IPIS,
    eoi_mmio = sym apic::EOI_MMIO,
);

unsafe extern "C" {
    static trap_stubs: u8;
    static work_ipi_entry: u8;
}

/// One IDT gate descriptor.
#[derive(Clone, Copy)]
#[repr(C)]
struct Gate {
    offset_low: u16,
    selector: u16,
    ist: u8,
    attrs: u8,
    offset_mid: u16,
    offset_high: u32,
    reserved: u32,
}

#[repr(C, align(16))]
struct Idt([Gate; 256]);

static IDT: spin::Once<Idt> = spin::Once::new();

fn build_idt() -> Idt {
    // SAFETY: `trap_stubs` is the label of the stub table defined above; only its address is used.
    let base = unsafe { &trap_stubs as *const u8 as u64 };
    let mut idt = Idt([Gate {
        offset_low: 0,
        selector: 0,
        ist: 0,
        attrs: 0,
        offset_mid: 0,
        offset_high: 0,
        reserved: 0,
    }; 256]);
    // SAFETY: as above, the label of the wake-up entry.
    let wake = unsafe { &work_ipi_entry as *const u8 as u64 };
    for (v, gate) in idt.0.iter_mut().enumerate() {
        let addr = if v == usize::from(WORK_IPI_VECTOR) {
            wake
        } else {
            base + 16 * v as u64
        };
        let ist = match v {
            8 => IST_DOUBLE_FAULT,
            2 => IST_NMI,
            18 => IST_MACHINE_CHECK,
            _ => 0,
        };
        // Present, DPL 0, 64-bit interrupt gate (IF cleared on entry); int3 is allowed from ring 3.
        let dpl = if v == 3 { 3 << 5 } else { 0 };
        *gate = Gate {
            offset_low: addr as u16,
            selector: KERNEL_CS,
            ist,
            attrs: 0x8e | dpl,
            offset_mid: (addr >> 16) as u16,
            offset_high: (addr >> 32) as u32,
            reserved: 0,
        };
    }
    idt
}

/// Loads the IDT on the calling CPU (built once, shared by all CPUs).
pub fn init_cpu() {
    let idt = IDT.call_once(build_idt);
    let ptr = x86_64::structures::DescriptorTablePointer {
        limit: (core::mem::size_of::<Idt>() - 1) as u16,
        base: x86_64::VirtAddr::new(idt as *const Idt as u64),
    };
    // SAFETY: the IDT is static and every gate points at a valid stub.
    unsafe { x86_64::instructions::tables::lidt(&ptr) };
}

/// Counts of interrupts by kind, for tests and metrics.
pub static SPURIOUS_COUNT: AtomicU64 = AtomicU64::new(0);
/// Kernel breakpoints (`int3` in ring 0) handled and resumed.
pub static BREAKPOINT_COUNT: AtomicU64 = AtomicU64::new(0);

/// The Rust side of every trap.
extern "C" fn trap_dispatch(frame: &mut TrapFrame) {
    let v = frame.vector;
    match v {
        0..=31 => exception(frame),
        _ if v == u64::from(TIMER_VECTOR) => {
            percpu::count_tick();
            apic::eoi();
            if frame.is_from_user() {
                user::on_timer_from_user(frame);
            }
        }
        _ if v == u64::from(TLB_IPI_VECTOR) => {
            percpu::current().ipis.fetch_add(1, Ordering::Relaxed);
            super::smp::on_tlb_ipi();
            apic::eoi();
        }
        _ if v == u64::from(SPURIOUS_VECTOR) => {
            SPURIOUS_COUNT.fetch_add(1, Ordering::Relaxed);
        }
        _ => {
            log::warn!(
                "unexpected interrupt vector {v:#x} on cpu {}",
                percpu::cpu_index()
            );
            apic::eoi();
        }
    }
}

fn exception(frame: &mut TrapFrame) {
    let cr2 = cpu::read_cr2();
    if frame.vector == 3 && !frame.is_from_user() {
        // Breakpoints resume after the int3.
        BREAKPOINT_COUNT.fetch_add(1, Ordering::Relaxed);
        log::info!("breakpoint at {:#x}", frame.rip);
        return;
    }
    if frame.is_from_user() {
        user::on_exception_from_user(frame, cr2);
        return;
    }
    // A fallible copy to or from ring-3 memory: filled as ring 3's access, or failed.
    if frame.vector == 14 && super::user_copy::on_fault(&mut frame.rip, cr2, frame.error) {
        return;
    }
    // A kernel fault: resume at the fix-up address if a probe armed one.
    if percpu::is_installed() {
        let pc = percpu::current();
        if pc.fault_fixup != 0 && frame.vector != 8 {
            pc.caught = CaughtFault {
                vector: frame.vector,
                error: frame.error,
                addr: cr2,
                rip: frame.rip,
            };
            frame.rip = pc.fault_fixup;
            pc.fault_fixup = 0;
            return;
        }
    }
    report_kernel_fault(frame, cr2);
}

/// A printable exception report.
pub struct FaultReport<'a> {
    frame: &'a TrapFrame,
    cr2: u64,
    cpu: usize,
}

impl fmt::Display for FaultReport<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = self.frame;
        writeln!(
            f,
            "!!! {} (vector {}) in {} mode on cpu {}",
            exception_name(t.vector),
            t.vector,
            if t.is_from_user() { "user" } else { "kernel" },
            self.cpu
        )?;
        writeln!(
            f,
            "    error code {:#x}  RIP {:#018x}  CR2 {:#018x}",
            t.error, t.rip, self.cr2
        )?;
        if t.vector == 14 {
            writeln!(f, "    page fault: {}", PageFaultCause(t.error))?;
        }
        writeln!(
            f,
            "    CS {:#x}  SS {:#x}  RSP {:#018x}  RFLAGS {:#x}",
            t.cs, t.ss, t.rsp, t.rflags
        )?;
        writeln!(
            f,
            "    RAX {:#018x} RBX {:#018x} RCX {:#018x} RDX {:#018x}",
            t.rax, t.rbx, t.rcx, t.rdx
        )?;
        writeln!(
            f,
            "    RSI {:#018x} RDI {:#018x} RBP {:#018x} R8  {:#018x}",
            t.rsi, t.rdi, t.rbp, t.r8
        )?;
        writeln!(
            f,
            "    R9  {:#018x} R10 {:#018x} R11 {:#018x} R12 {:#018x}",
            t.r9, t.r10, t.r11, t.r12
        )?;
        write!(
            f,
            "    R13 {:#018x} R14 {:#018x} R15 {:#018x} CR3 {:#018x}",
            t.r13,
            t.r14,
            t.r15,
            cpu::read_cr3()
        )
    }
}

/// Decodes a page-fault error code.
pub struct PageFaultCause(pub u64);

impl fmt::Display for PageFaultCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = self.0;
        let access = if e & 16 != 0 {
            "instruction fetch"
        } else if e & 2 != 0 {
            "write"
        } else {
            "read"
        };
        let why = if e & 1 != 0 {
            "protection violation"
        } else {
            "page not present"
        };
        write!(
            f,
            "{access}, {why}{}",
            if e & 4 != 0 { ", from ring 3" } else { "" }
        )
    }
}

fn report_kernel_fault(frame: &TrapFrame, cr2: u64) -> ! {
    let report = FaultReport {
        frame,
        cr2,
        cpu: percpu::cpu_index(),
    };
    serial::emergency_write_fmt(format_args!(
        "\n{report}\nfjord: fatal kernel exception, exiting\n"
    ));
    exit_qemu(ExitCode::Failure)
}

/// Reads a `u64` at `addr`, returning the caught fault instead of crashing if the read faults.
pub fn probe_read(addr: u64) -> Result<u64, CaughtFault> {
    let (value, faulted) = cpu::without_interrupts(|| {
        let (value, faulted): (u64, u64);
        // SAFETY: the read may fault; the trap handler then resumes at label 2 (the armed
        // fix-up) with the fault recorded in per-CPU data. Interrupts are disabled so nothing
        // else can observe or disturb the armed fix-up.
        unsafe {
            asm!(
                "lea {tmp}, [rip + 2f]",
                "mov gs:[{fixup}], {tmp}",
                "xor {flag:e}, {flag:e}",
                "mov {val}, [{addr}]",
                "jmp 3f",
                "2:",
                "mov {flag:e}, 1",
                "xor {val:e}, {val:e}",
                "3:",
                "mov qword ptr gs:[{fixup}], 0",
                addr = in(reg) addr,
                val = out(reg) value,
                flag = out(reg) faulted,
                tmp = out(reg) _,
                fixup = const OFF_FAULT_FIXUP,
                options(nostack),
            )
        };
        (value, faulted)
    });
    if faulted != 0 {
        Err(percpu::current().caught)
    } else {
        Ok(value)
    }
}

/// Writes a `u64` at `addr`, returning the caught fault instead of crashing if the write faults.
pub fn probe_write(addr: u64, value: u64) -> Result<(), CaughtFault> {
    let faulted = cpu::without_interrupts(|| {
        let faulted: u64;
        // SAFETY: as for `probe_read`; the write may fault and is then skipped.
        unsafe {
            asm!(
                "lea {tmp}, [rip + 2f]",
                "mov gs:[{fixup}], {tmp}",
                "xor {flag:e}, {flag:e}",
                "mov [{addr}], {val}",
                "jmp 3f",
                "2:",
                "mov {flag:e}, 1",
                "3:",
                "mov qword ptr gs:[{fixup}], 0",
                addr = in(reg) addr,
                val = in(reg) value,
                flag = out(reg) faulted,
                tmp = out(reg) _,
                fixup = const OFF_FAULT_FIXUP,
                options(nostack),
            )
        };
        faulted
    });
    if faulted != 0 {
        Err(percpu::current().caught)
    } else {
        Ok(())
    }
}

/// Executes `ud2` with a fix-up armed and returns the caught fault (an invalid-opcode test).
pub fn probe_invalid_opcode() -> Result<(), CaughtFault> {
    let faulted = cpu::without_interrupts(|| {
        let faulted: u64;
        // SAFETY: UD2 raises #UD; the handler resumes at label 2 with the fault recorded.
        unsafe {
            asm!(
                "lea {tmp}, [rip + 2f]",
                "mov gs:[{fixup}], {tmp}",
                "xor {flag:e}, {flag:e}",
                "ud2",
                "jmp 3f",
                "2:",
                "mov {flag:e}, 1",
                "3:",
                "mov qword ptr gs:[{fixup}], 0",
                flag = out(reg) faulted,
                tmp = out(reg) _,
                fixup = const OFF_FAULT_FIXUP,
                options(nostack),
            )
        };
        faulted
    });
    if faulted != 0 {
        Err(percpu::current().caught)
    } else {
        Ok(())
    }
}

/// Divides `a` by `b` with a fix-up armed, returning the caught #DE when `b` is 0.
pub fn probe_divide(a: u64, b: u64) -> Result<u64, CaughtFault> {
    let (q, faulted) = cpu::without_interrupts(|| {
        let (q, faulted): (u64, u64);
        // SAFETY: DIV by zero raises #DE; the handler resumes at label 2 with the fault recorded.
        unsafe {
            asm!(
                "lea {tmp}, [rip + 2f]",
                "mov gs:[{fixup}], {tmp}",
                "xor {flag:e}, {flag:e}",
                "xor edx, edx",
                "div {b}",
                "jmp 3f",
                "2:",
                "mov {flag:e}, 1",
                "3:",
                "mov qword ptr gs:[{fixup}], 0",
                b = in(reg) b,
                flag = out(reg) faulted,
                tmp = out(reg) _,
                inout("rax") a => q,
                out("rdx") _,
                fixup = const OFF_FAULT_FIXUP,
                options(nostack),
            )
        };
        (q, faulted)
    });
    if faulted != 0 {
        Err(percpu::current().caught)
    } else {
        Ok(q)
    }
}

/// Reads an unmapped kernel address on purpose (`crash=pagefault`): the page-fault handler
/// reports the fault and exits QEMU, so this returns only if the read did not fault.
pub fn read_unmapped_on_purpose() -> u64 {
    let p = 0xffff_8fff_dead_0000u64 as *const u64;
    // SAFETY: deliberately faulting: the address is unmapped in every address space, so the
    // read never returns data; the exception handler reports it and exits QEMU.
    unsafe { p.read_volatile() }
}
