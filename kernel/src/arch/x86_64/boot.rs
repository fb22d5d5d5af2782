//! The PVH entry: the Xen ELF note QEMU looks for, the 32-bit entry stub that enters long mode,
//! and the 16-bit trampoline that brings application processors up the same way.
//!
//! The boot page tables identity-map the first 1 GiB with 2 MiB pages; they are used only until
//! the kernel has built its own tables (`mm::kernel_tables`), and again by each AP on its way in.

use core::arch::global_asm;

/// The bootstrap processor's first Rust code, on the boot stack with the boot tables: records
/// the PVH start info, then enters the kernel's boot sequence.
extern "C" fn bsp_main(start_info: u32) -> ! {
    let entry_tsc = super::cpu::rdtsc();
    // SAFETY: EBX carried the start-info address (the stub passes it on) and the boot tables
    // identity-map low memory.
    unsafe { super::pvh::record(u64::from(start_info)) };
    crate::kernel_entry(entry_tsc)
}

/// Size of the bootstrap processor's boot stack.
pub const BOOT_STACK_SIZE: usize = 64 * 1024;

global_asm!(
    r#"
    .section .note.Xen, "a"
    .balign 4
    .long 4            /* name size: "Xen\0" */
    .long 8            /* descriptor size */
    .long 18           /* XEN_ELFNOTE_PHYS32_ENTRY */
    .asciz "Xen"
    .balign 4
    .quad pvh_start32

    .section .bss.boot, "aw", @nobits
    .balign 4096
    .global boot_pml4
boot_pml4:  .skip 4096
boot_pdpt:  .skip 4096
boot_pd:    .skip 4096
boot_stack_bottom:
    .skip {stack_size}
    .global boot_stack_top
boot_stack_top:

    .section .rodata.boot, "a"
    .balign 16
boot_gdt:
    .quad 0
    .quad 0x00af9a000000ffff   /* 0x08: 64-bit code */
    .quad 0x00cf92000000ffff   /* 0x10: data */
boot_gdt_end:
    .global boot_gdt_ptr
boot_gdt_ptr:
    .word boot_gdt_end - boot_gdt - 1
    .quad boot_gdt

    .section .text.boot, "ax"
    .code32
    .global pvh_start32
pvh_start32:
    cli
    cld
    mov esi, ebx                       /* hvm_start_info (physical) */
    /* Zero the three boot tables. */
    mov edi, offset boot_pml4
    xor eax, eax
    mov ecx, 3 * 1024
    rep stosd
    /* PD: 512 x 2 MiB identity entries (present, writable, large). */
    mov edi, offset boot_pd
    mov eax, 0x83
    xor ecx, ecx
2:  mov [edi + ecx * 8], eax
    add eax, 0x200000
    inc ecx
    cmp ecx, 512
    jne 2b
    mov eax, offset boot_pd
    or eax, 3
    mov [boot_pdpt], eax
    mov eax, offset boot_pdpt
    or eax, 3
    mov [boot_pml4], eax
    mov edi, 1                         /* edi = 1: bootstrap processor */
    jmp enter_long_mode

    /* Application processors arrive here from the trampoline, in 32-bit protected mode. */
    .global ap_start32
ap_start32:
    xor esi, esi
    xor edi, edi                       /* edi = 0: application processor */

enter_long_mode:
    mov eax, cr4
    or eax, 1 << 5                     /* PAE */
    mov cr4, eax
    mov eax, offset boot_pml4
    mov cr3, eax
    mov ecx, 0xC0000080                /* EFER */
    rdmsr
    or eax, (1 << 8) | (1 << 11)       /* LME, NXE */
    wrmsr
    mov eax, cr0
    /* PG, WP, PE; EM: x87 and MMX instructions trap (#NM) and, with CR4.OSFXSR clear, SSE
       ones too (#UD), so no PD has FPU or vector registers another could read. */
    or eax, (1 << 31) | (1 << 16) | (1 << 2) | 1
    mov cr0, eax
    lgdt [boot_gdt_ptr]
    /* Far jump to 64-bit code: jmp 0x08:long_mode_entry */
    .byte 0xea
    .long long_mode_entry
    .word 0x08

    .code64
long_mode_entry:
    mov ax, 0x10
    mov ds, ax
    mov es, ax
    mov ss, ax
    xor eax, eax
    mov fs, ax
    mov gs, ax
    test edi, edi
    jz 3f
    mov rsp, offset boot_stack_top
    xor ebp, ebp
    mov edi, esi                       /* first argument: hvm_start_info address */
    call {bsp_entry}
    ud2
3:
    /* AP: switch to the kernel's tables and stack published by the BSP, then enter Rust. */
    mov rax, [rip + {ap_cr3}]
    mov cr3, rax
    mov rsp, [rip + {ap_stack}]
    xor ebp, ebp
    call {ap_entry}
    ud2

    /* The AP trampoline: copied to AP_TRAMPOLINE_PHYS (0x8000) and started by SIPI in real
     * mode with CS = 0x0800, IP = 0. It only uses addresses relative to 0x8000. */
    .section .rodata.ap_trampoline, "a"
    .global ap_trampoline_start
    .global ap_trampoline_end
    .code16
ap_trampoline_start:
    cli
    cld
    xor ax, ax
    mov ds, ax
    /* lgdt [0x8000 + tramp_gdt_ptr offset] (16-bit addressing, DS = 0) */
    .byte 0x0f, 0x01, 0x16
    .word 0x8000 + (tramp_gdt_ptr - ap_trampoline_start)
    mov eax, cr0
    or eax, 1
    mov cr0, eax
    /* jmp dword 0x08:(0x8000 + tramp_pm - ap_trampoline_start) */
    .byte 0x66, 0xea
    .long 0x8000 + (tramp_pm - ap_trampoline_start)
    .word 0x08
    .code32
tramp_pm:
    mov ax, 0x10
    mov ds, ax
    mov es, ax
    mov ss, ax
    mov eax, offset ap_start32
    jmp eax
    .balign 8
tramp_gdt:
    .quad 0
    .quad 0x00cf9a000000ffff           /* 0x08: 32-bit code */
    .quad 0x00cf92000000ffff           /* 0x10: data */
tramp_gdt_ptr:
    .word 23
    .long 0x8000 + (tramp_gdt - ap_trampoline_start)
ap_trampoline_end:
    .code64
    .text
"#,
    stack_size = const BOOT_STACK_SIZE,
    bsp_entry = sym bsp_main,
    ap_entry = sym crate::arch::smp::ap_main,
    ap_cr3 = sym crate::arch::smp::AP_CR3,
    ap_stack = sym crate::arch::smp::AP_STACK_TOP,
);
