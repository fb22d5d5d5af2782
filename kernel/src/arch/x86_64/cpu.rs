//! CPU identification, model-specific registers, control registers and the time-stamp counter.

use core::arch::asm;
use core::arch::x86_64::{__cpuid, __cpuid_count, _rdtsc};

/// CPU features Fjord cares about, read once from CPUID.
#[derive(Clone, Copy, Debug, Default)]
pub struct Features {
    /// The local APIC supports x2APIC mode.
    pub x2apic: bool,
    /// Process-context identifiers (CR4.PCIDE).
    pub pcid: bool,
    /// The INVPCID instruction.
    pub invpcid: bool,
    /// Protection keys for user pages.
    pub pku: bool,
    /// 1 GiB pages.
    pub gbpages: bool,
    /// The invariant TSC.
    pub invariant_tsc: bool,
    /// No-execute pages (EFER.NXE), which the boot stub turns on.
    pub nx: bool,
    /// Supervisor-mode execution prevention (CR4.SMEP).
    pub smep: bool,
    /// Supervisor-mode access prevention (CR4.SMAP).
    pub smap: bool,
    /// User-mode instruction prevention (CR4.UMIP).
    pub umip: bool,
    /// The CPU vendor string.
    pub vendor: [u8; 12],
}

/// Reads the CPU's features.
pub fn features() -> Features {
    let l0 = __cpuid(0);
    let mut vendor = [0u8; 12];
    vendor[..4].copy_from_slice(&l0.ebx.to_le_bytes());
    vendor[4..8].copy_from_slice(&l0.edx.to_le_bytes());
    vendor[8..].copy_from_slice(&l0.ecx.to_le_bytes());
    let l1 = __cpuid(1);
    let l7 = if l0.eax >= 7 {
        __cpuid_count(7, 0)
    } else {
        __cpuid(0)
    };
    let ext_max = __cpuid(0x8000_0000).eax;
    let e1 = if ext_max >= 0x8000_0001 {
        __cpuid(0x8000_0001).edx
    } else {
        0
    };
    let e7 = if ext_max >= 0x8000_0007 {
        __cpuid(0x8000_0007).edx
    } else {
        0
    };
    Features {
        x2apic: l1.ecx & (1 << 21) != 0,
        pcid: l1.ecx & (1 << 17) != 0,
        invpcid: l0.eax >= 7 && l7.ebx & (1 << 10) != 0,
        pku: l0.eax >= 7 && l7.ecx & (1 << 3) != 0,
        gbpages: e1 & (1 << 26) != 0,
        invariant_tsc: e7 & (1 << 8) != 0,
        nx: e1 & (1 << 20) != 0,
        smep: l0.eax >= 7 && l7.ebx & (1 << 7) != 0,
        smap: l0.eax >= 7 && l7.ebx & (1 << 20) != 0,
        umip: l0.eax >= 7 && l7.ecx & (1 << 2) != 0,
        vendor,
    }
}

/// The instruction-set features user code may use, as one mask: CPUID leaf 1's ECX (SSE3 to
/// AVX, XSAVE, ...) in the low half and leaf 7's EBX (AVX2, BMI, ...) in the high half. A
/// checkpoint taken on one CPU runs on another whose mask has every bit of its own.
pub fn isa_features() -> u64 {
    let l0 = __cpuid(0);
    let ecx = u64::from(__cpuid(1).ecx);
    let ebx = if l0.eax >= 7 {
        u64::from(__cpuid_count(7, 0).ebx)
    } else {
        0
    };
    ecx | ebx << 32
}

/// The CPU's random-number instructions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HwRandom {
    /// RDSEED: the conditioned output of the CPU's entropy source.
    Rdseed,
    /// RDRAND: a generator the CPU keeps reseeding from that source.
    Rdrand,
}

/// One 64-bit number from the CPU's random-number instructions: RDSEED where CPUID advertises
/// it, else RDRAND; `None` when the CPU has neither, or when each failed ten times in a row
/// (they report a momentarily empty source by clearing CF; Intel advises ten retries).
pub fn hardware_random() -> Option<(u64, HwRandom)> {
    let rdseed = __cpuid(0).eax >= 7 && __cpuid_count(7, 0).ebx & (1 << 18) != 0;
    let rdrand = __cpuid(1).ecx & (1 << 30) != 0;
    let from_rdseed = rdseed.then(|| {
        // SAFETY: CPUID advertises RDSEED.
        (0..10).find_map(|_| unsafe { rdseed_once() })
    });
    if let Some(Some(v)) = from_rdseed {
        return Some((v, HwRandom::Rdseed));
    }
    let from_rdrand = rdrand.then(|| {
        // SAFETY: CPUID advertises RDRAND.
        (0..10).find_map(|_| unsafe { rdrand_once() })
    });
    from_rdrand.flatten().map(|v| (v, HwRandom::Rdrand))
}

/// One RDSEED; `None` when it reports an empty source.
///
/// # Safety
/// The CPU must have RDSEED (CPUID leaf 7 EBX bit 18).
unsafe fn rdseed_once() -> Option<u64> {
    let (v, ok): (u64, u8);
    // SAFETY: the caller guarantees RDSEED exists; it writes only the two registers named.
    unsafe {
        asm!("rdseed {v}", "setc {ok}", v = out(reg) v, ok = out(reg_byte) ok, options(nomem, nostack))
    };
    (ok != 0).then_some(v)
}

/// One RDRAND; `None` when it reports an empty source.
///
/// # Safety
/// The CPU must have RDRAND (CPUID leaf 1 ECX bit 30).
unsafe fn rdrand_once() -> Option<u64> {
    let (v, ok): (u64, u8);
    // SAFETY: the caller guarantees RDRAND exists; it writes only the two registers named.
    unsafe {
        asm!("rdrand {v}", "setc {ok}", v = out(reg) v, ok = out(reg_byte) ok, options(nomem, nostack))
    };
    (ok != 0).then_some(v)
}

/// Reads the time-stamp counter (under `-icount shift=0` it counts guest instructions).
#[inline(always)]
pub fn rdtsc() -> u64 {
    // SAFETY: RDTSC has no side effects and is always available on x86_64.
    unsafe { _rdtsc() }
}

/// Reads model-specific register `msr`.
///
/// # Safety
/// `msr` must exist on this CPU (reading an absent MSR raises #GP).
pub unsafe fn rdmsr(msr: u32) -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: the caller guarantees the MSR exists.
    unsafe { asm!("rdmsr", in("ecx") msr, out("eax") lo, out("edx") hi, options(nomem, nostack)) };
    u64::from(lo) | (u64::from(hi) << 32)
}

/// Writes model-specific register `msr`.
///
/// # Safety
/// `msr` must exist and `value` must be valid for it; the write may change how the CPU behaves.
pub unsafe fn wrmsr(msr: u32, value: u64) {
    // SAFETY: the caller guarantees the MSR and value are valid.
    unsafe {
        asm!("wrmsr", in("ecx") msr, in("eax") value as u32, in("edx") (value >> 32) as u32,
             options(nostack))
    };
}

/// MSR: the local APIC base.
pub const IA32_APIC_BASE: u32 = 0x1b;
/// MSR: extended feature enables (SCE, LME, NXE).
pub const IA32_EFER: u32 = 0xc000_0080;
/// MSR: SYSCALL/SYSRET segment selectors.
pub const IA32_STAR: u32 = 0xc000_0081;
/// MSR: SYSCALL entry point.
pub const IA32_LSTAR: u32 = 0xc000_0082;
/// MSR: RFLAGS bits cleared on SYSCALL.
pub const IA32_FMASK: u32 = 0xc000_0084;
/// MSR: the FS base (ring 3's thread pointer).
pub const IA32_FS_BASE: u32 = 0xc000_0100;
/// MSR: the active GS base.
pub const IA32_GS_BASE: u32 = 0xc000_0101;
/// MSR: the GS base SWAPGS exchanges with.
pub const IA32_KERNEL_GS_BASE: u32 = 0xc000_0102;

/// Reads CR2 (the faulting address of the last page fault).
pub fn read_cr2() -> u64 {
    let v;
    // SAFETY: reading CR2 has no side effects.
    unsafe { asm!("mov {}, cr2", out(reg) v, options(nomem, nostack, preserves_flags)) };
    v
}

/// Reads CR3 (the current root page table).
pub fn read_cr3() -> u64 {
    let v;
    // SAFETY: reading CR3 has no side effects.
    unsafe { asm!("mov {}, cr3", out(reg) v, options(nomem, nostack, preserves_flags)) };
    v
}

/// Switches to the page tables rooted at `root` (flushes the non-global TLB).
///
/// # Safety
/// `root` must be a valid PML4 that maps the running code, its stack and all kernel data.
pub unsafe fn write_cr3(root: u64) {
    // SAFETY: the caller guarantees the new tables keep the kernel mapped.
    unsafe { asm!("mov cr3, {}", in(reg) root, options(nostack, preserves_flags)) };
}

/// CR4.UMIP: SGDT, SIDT, SLDT, SMSW and STR fault in ring 3.
pub const CR4_UMIP: u64 = 1 << 11;
/// CR4.SMEP: ring 0 faults on fetching from a user page.
pub const CR4_SMEP: u64 = 1 << 20;

/// Reads CR4.
pub fn read_cr4() -> u64 {
    let v;
    // SAFETY: reading CR4 has no side effects.
    unsafe { asm!("mov {}, cr4", out(reg) v, options(nomem, nostack, preserves_flags)) };
    v
}

/// Sets `bits` in CR4 on this CPU.
///
/// # Safety
/// The CPU must support every bit set, and the kernel must keep the rules they enforce.
pub unsafe fn set_cr4_bits(bits: u64) {
    let v = read_cr4() | bits;
    // SAFETY: the caller guarantees the bits are supported and their rules kept.
    unsafe { asm!("mov cr4, {}", in(reg) v, options(nostack, preserves_flags)) };
}

/// The CR4 protections the kernel turns on where the CPU has them: SMEP (ring 0 never runs
/// user code) and UMIP (ring 3 cannot read the descriptor-table registers). SMAP is not used:
/// the kernel reads and writes user memory directly in system calls.
pub fn protections(f: &Features) -> u64 {
    (if f.smep { CR4_SMEP } else { 0 }) | (if f.umip { CR4_UMIP } else { 0 })
}

/// Flushes this CPU's non-global TLB entries by reloading the current root table.
pub fn flush_tlb() {
    // SAFETY: reloading the root table already loaded changes no translation; it only drops
    // the cached non-global ones.
    unsafe { write_cr3(read_cr3()) };
}

/// Invalidates the TLB entry for the page containing `va` on this CPU.
pub fn invlpg(va: u64) {
    // SAFETY: INVLPG only drops a cached translation.
    unsafe { asm!("invlpg [{}]", in(reg) va, options(nostack, preserves_flags)) };
}

/// Enables interrupts.
pub fn enable_interrupts() {
    // SAFETY: the IDT is loaded before any caller enables interrupts.
    unsafe { asm!("sti", options(nomem, nostack)) };
}

/// Disables interrupts and returns whether they were enabled.
pub fn disable_interrupts() -> bool {
    let flags: u64;
    // SAFETY: reading RFLAGS and clearing IF has no other effect.
    unsafe { asm!("pushfq; pop {}; cli", out(reg) flags, options(nomem)) };
    flags & (1 << 9) != 0
}

/// Runs `f` with interrupts disabled, restoring the previous state afterwards.
pub fn without_interrupts<R>(f: impl FnOnce() -> R) -> R {
    let was = disable_interrupts();
    let r = f();
    if was {
        enable_interrupts();
    }
    r
}

/// Atomically enables interrupts and halts until the next one arrives.
pub fn enable_and_halt() {
    // SAFETY: STI's one-instruction shadow makes STI;HLT atomic, so no wake-up is lost.
    unsafe { asm!("sti; hlt", options(nomem, nostack)) };
}

/// Halts forever with interrupts disabled.
pub fn halt_forever() -> ! {
    loop {
        // SAFETY: halting with interrupts off stops this CPU; nothing depends on it afterwards.
        unsafe { asm!("cli; hlt", options(nomem, nostack)) };
    }
}

/// Moves this CPU onto the fresh stack `stacks.kernel_top` and calls `cont` there; the old
/// stack is not used again.
pub fn continue_on_stack(stacks: &super::smp::CpuStacks, cont: extern "C" fn() -> !) -> ! {
    // SAFETY: the stack is mapped read-write and unused (the memory manager made it for this
    // CPU); `cont` never returns, so nothing refers to the old stack afterwards.
    unsafe {
        core::arch::asm!(
            "mov rsp, {top}",
            "xor ebp, ebp",
            "call {cont}",
            "ud2",
            top = in(reg) stacks.kernel_top,
            cont = in(reg) cont,
            options(noreturn),
        )
    }
}

/// Copies the 4 KiB page at virtual address `src` over the one at `dst` with `rep movsq` (the
/// fastest copy of a whole page here: no call, no checks).
///
/// # Safety
/// Both pages must be mapped, 8-aligned, not overlap, and have no Rust reference into them.
#[inline(always)]
pub unsafe fn copy_page(dst: u64, src: u64) {
    // SAFETY: guaranteed by the caller. `rep movsq` moves RCX words from [RSI] to [RDI] upwards
    // (the ABI keeps the direction flag clear) and touches no other memory, no stack and no
    // flags.
    unsafe {
        core::arch::asm!(
            "rep movsq",
            inout("rcx") 4096u64 / 8 => _,
            inout("rdi") dst => _,
            inout("rsi") src => _,
            options(nostack, preserves_flags),
        );
    }
}
