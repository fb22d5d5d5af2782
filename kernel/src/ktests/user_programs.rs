//! Small ring-3 programs the kernel's own tests and benchmarks run, as position-independent
//! machine code. The blob is copied into a user page; each program is entered at its offset
//! with arguments in rdi, rsi, rdx (see `userspace`).

use core::arch::global_asm;

global_asm!(
    r#"
    /* rax = the 64-bit TSC (guest instructions under icount); clobbers rdx. */
    .macro UPROG_TSC
    rdtsc
    shl rdx, 32
    or rax, rdx
    .endm

    .section .rodata.user_programs, "a"
    .balign 16
    .global user_programs_start
user_programs_start:

    /* hello: log a greeting, exit(42). */
    .global uprog_hello
uprog_hello:
    mov eax, 2
    lea rdi, [rip + 9f]
    mov esi, 18
    syscall
    mov eax, 1
    mov edi, 42
    syscall
    ud2
9:  .ascii "hello from ring 3!"

    /* null_loop(count, buf): time `count` null system calls, store each delta. */
    .global uprog_null_loop
uprog_null_loop:
    mov r12, rdi
    mov r13, rsi
    xor r14d, r14d
1:  cmp r14, r12
    jae 2f
    UPROG_TSC
    mov r15, rax
    xor eax, eax
    syscall
    UPROG_TSC
    sub rax, r15
    mov [r13 + r14 * 8], rax
    inc r14
    jmp 1b
2:  mov eax, 1
    xor edi, edi
    syscall
    ud2

    /* read(addr): exit with the u64 at addr. */
    .global uprog_read
uprog_read:
    mov rdi, [rdi]
    mov eax, 1
    syscall
    ud2

    /* write(addr, value): store value at addr, exit(0). */
    .global uprog_write
uprog_write:
    mov [rdi], rsi
    mov eax, 1
    xor edi, edi
    syscall
    ud2

    /* jump(addr): execute at addr. */
    .global uprog_jump
uprog_jump:
    jmp rdi

    /* syscall(no, a0, a1): make any system call, exit with its raw result. */
    .global uprog_syscall
uprog_syscall:
    mov rax, rdi
    mov rdi, rsi
    mov rsi, rdx
    syscall
    mov rdi, rax
    mov eax, 1
    syscall
    ud2

    /* spin: loop forever (ended by the run's deadline). */
    .global uprog_spin
uprog_spin:
    jmp uprog_spin

    /* cpu: exit with the id of the CPU it runs on. */
    .global uprog_cpu
uprog_cpu:
    mov eax, 3
    syscall
    mov rdi, rax
    mov eax, 1
    syscall
    ud2

    /* privileged: execute HLT in ring 3 (raises #GP). */
    .global uprog_privileged
uprog_privileged:
    hlt
    ud2

    /* syscall4(no, a0, a1, a2): make any call with three arguments, exit with its result. */
    .global uprog_syscall4
uprog_syscall4:
    mov rax, rdi
    mov rdi, rsi
    mov rsi, rdx
    mov rdx, rcx
    syscall
    mov rdi, rax
    mov eax, 1
    syscall
    ud2

    /* inc_loop(addr): increment the u64 at addr forever. */
    .global uprog_inc_loop
uprog_inc_loop:
    inc qword ptr [rdi]
    jmp uprog_inc_loop

    /* return_inc(arg): creturn(arg + 1). */
    .global uprog_return_inc
uprog_return_inc:
    lea rdi, [rdi + 1]
    mov eax, 26
    syscall
    ud2

    /* caller(cid, func, arg): exit with ccall(cid, func, arg). */
    .global uprog_caller
uprog_caller:
    mov eax, 23
    syscall
    mov rdi, rax
    mov eax, 1
    syscall
    ud2

    /* ccall_loop(cid, func, count, results): time `count` ccall round trips. */
    .global uprog_ccall_loop
uprog_ccall_loop:
    mov r12, rdi
    mov r13, rsi
    mov rbp, rdx
    mov rbx, rcx
    xor r14d, r14d
1:  cmp r14, rbp
    jae 2f
    UPROG_TSC
    mov r15, rax
    mov rdi, r12
    mov rsi, r13
    mov rdx, r14
    mov eax, 23
    syscall
    UPROG_TSC
    sub rax, r15
    mov [rbx + r14 * 8], rax
    inc r14
    jmp 1b
2:  mov eax, 1
    xor edi, edi
    syscall
    ud2

    /* mm_loop(count, results): time mmap(4 KiB), first touch, munmap; 3 words per round. */
    .global uprog_mm_loop
uprog_mm_loop:
    mov rbp, rdi
    mov rbx, rsi
    xor r14d, r14d
1:  cmp r14, rbp
    jae 2f
    UPROG_TSC
    mov r15, rax
    mov edi, 4096
    mov esi, 3
    xor edx, edx
    mov eax, 16
    syscall
    mov r12, rax
    UPROG_TSC
    mov r13, rax
    sub rax, r15
    mov [rbx], rax
    mov qword ptr [r12], 1
    UPROG_TSC
    mov r15, rax
    sub rax, r13
    mov [rbx + 8], rax
    mov rdi, r12
    mov esi, 4096
    mov eax, 17
    syscall
    UPROG_TSC
    sub rax, r15
    mov [rbx + 16], rax
    add rbx, 24
    inc r14
    jmp 1b
2:  mov eax, 1
    xor edi, edi
    syscall
    ud2

    /* mprotect_loop(addr, count, results): time mprotect to R and back to RW, then rewrite;
     * 2 words per round. */
    .global uprog_mprotect_loop
uprog_mprotect_loop:
    mov r12, rdi
    mov rbp, rsi
    mov rbx, rdx
    xor r14d, r14d
    mov qword ptr [r12], 0
1:  cmp r14, rbp
    jae 2f
    UPROG_TSC
    mov r15, rax
    mov rdi, r12
    mov esi, 4096
    mov edx, 1
    mov eax, 18
    syscall
    UPROG_TSC
    mov r13, rax
    sub rax, r15
    mov [rbx], rax
    mov rdi, r12
    mov esi, 4096
    mov edx, 3
    mov eax, 18
    syscall
    UPROG_TSC
    sub rax, r13
    mov [rbx + 8], rax
    mov [r12], r14
    add rbx, 16
    inc r14
    jmp 1b
2:  mov eax, 1
    xor edi, edi
    syscall
    ud2

    /* touch_loop(base, count, results): time the first write to each of `count` pages. */
    .global uprog_touch_loop
uprog_touch_loop:
    mov r12, rdi
    mov rbp, rsi
    mov rbx, rdx
    xor r14d, r14d
1:  cmp r14, rbp
    jae 2f
    UPROG_TSC
    mov r15, rax
    mov [r12], r14
    UPROG_TSC
    sub rax, r15
    mov [rbx + r14 * 8], rax
    add r12, 4096
    inc r14
    jmp 1b
2:  mov eax, 1
    xor edi, edi
    syscall
    ud2

    /* work(n): about 4n instructions of arithmetic, then creturn(result). */
    .global uprog_work
uprog_work:
    xor eax, eax
1:  add rax, rdi
    dec rdi
    jnz 1b
    mov rdi, rax
    mov eax, 26
    syscall
    ud2

    /* The chain A->B->C->B->A in two forms. The ArgBuf `buf` holds [0] hop index, [1] n,
     * [2..2+n] PD ids, [2+n] relay entry, payload at +256.
     *
     * CHAIN_DRIVER name, pass: PD A, `(buf, count, results)`. Each round hands `buf` to B with
     * `pass` (r13 = B, [rsp] = the relay entry, r12 = buf) and times the round trip. */
    .macro CHAIN_DRIVER name, pass
    .global \name
\name:
    mov r12, rdi
    mov rbp, rsi
    mov rbx, rdx
    mov r13, [r12 + 24]
    push qword ptr [r12 + 40]
    xor r14d, r14d
1:  cmp r14, rbp
    jae 2f
    mov qword ptr [r12], 1
    UPROG_TSC
    mov r15, rax
    \pass
    UPROG_TSC
    sub rax, r15
    mov [rbx + r14 * 8], rax
    inc r14
    jmp 1b
2:  mov eax, 1
    xor edi, edi
    syscall
    ud2
    .endm

    /* CHAIN_RELAY name, enter, pass, back: one hop, `(buf)`. Reads what `enter` needs of the
     * header first (r14 = this hop's index), hands `buf` on to the next PD with `pass`
     * (r15 = next PD, rbx = relay entry, r12 = buf) unless this is the last hop, where it
     * touches the payload, then gives it back with `back`. */
    .macro CHAIN_RELAY name, enter, pass, back
    .global \name
\name:
    mov r12, rdi
    mov r14, [r12]
    mov r13, [r12 + 8]
    \enter
    lea rax, [r14 + 1]
    cmp rax, r13
    jae 3f
    mov r15, [r12 + 24 + r14 * 8]
    mov rbx, [r12 + 40]
    mov [r12], rax
    \pass
    jmp 4f
3:  inc qword ptr [r12 + 256]
    inc qword ptr [r12 + 256 + 1016]
4:  \back
    ud2
    .endm

    /* Two system calls per hop: pmove(buf, next, RW), ccall(next, relay, buf). */
    .macro PASS_SPLIT next, entry
    mov rdi, r12
    mov rsi, \next
    mov edx, 3
    mov eax, 19
    syscall
    mov rdi, \next
    mov rsi, \entry
    mov rdx, r12
    mov eax, 23
    syscall
    .endm

    /* One: ccall_move(next, relay, buf, RW). */
    .macro PASS_MOVE next, entry
    mov rdi, \next
    mov rsi, \entry
    mov rdx, r12
    mov r10d, 3
    mov eax, 32
    syscall
    .endm

    .macro DRIVER_SPLIT
    PASS_SPLIT r13, [rsp]
    .endm
    .macro DRIVER_MOVE
    PASS_MOVE r13, [rsp]
    .endm
    .macro RELAY_SPLIT
    PASS_SPLIT r15, rbx
    .endm
    .macro RELAY_MOVE
    PASS_MOVE r15, rbx
    .endm

    /* The PD that called (the previous PD id in the header), read while the buffer is
     * still here: after a `pmove` round trip the buffer has no leaf in this PD. */
    .macro ENTER_SPLIT
    mov rbp, [r12 + 8 + r14 * 8]
    .endm
    .macro ENTER_MOVE
    .endm

    /* Back to the PD that called: pmove, then creturn. */
    .macro BACK_SPLIT
    mov rsi, rbp
    mov rdi, r12
    mov edx, 3
    mov eax, 19
    syscall
    xor edi, edi
    mov eax, 26
    syscall
    .endm

    /* creturn_move(0, buf, RW). */
    .macro BACK_MOVE
    xor edi, edi
    mov rsi, r12
    mov edx, 3
    mov eax, 33
    syscall
    .endm

    CHAIN_DRIVER uprog_chain_driver, DRIVER_SPLIT
    CHAIN_RELAY uprog_relay, ENTER_SPLIT, RELAY_SPLIT, BACK_SPLIT
    CHAIN_DRIVER uprog_chain_driver_move, DRIVER_MOVE
    CHAIN_RELAY uprog_relay_move, ENTER_MOVE, RELAY_MOVE, BACK_MOVE

    /* move_caller(cid, func, buf): reads buf, ccall_move(cid, func, buf, RW), then exits
     * with the word at buf (or with the call's error). */
    .global uprog_move_caller
uprog_move_caller:
    mov r12, rdx
    mov rax, [r12]
    mov r10d, 3
    mov eax, 32
    syscall
    test rax, rax
    js 1f
    mov rax, [r12]
1:  mov rdi, rax
    mov eax, 1
    syscall
    ud2

    /* bump_return_move(buf): increments the word at buf, then return_move(buf). */
    .global uprog_bump_return_move
uprog_bump_return_move:
    inc qword ptr [rdi]
    /* return_move(buf): creturn_move(0, buf, RW); if refused, creturn(error). */
    .global uprog_return_move
uprog_return_move:
    mov rsi, rdi
    xor edi, edi
    mov edx, 3
    mov eax, 33
    syscall
    mov rdi, rax
    mov eax, 26
    syscall
    ud2

    .global user_programs_end
user_programs_end:
    .text
"#
);

macro_rules! programs {
    ($($name:ident => $sym:ident : $doc:literal),* $(,)?) => {
        unsafe extern "C" {
            static user_programs_start: u8;
            static user_programs_end: u8;
            $(static $sym: u8;)*
        }

        /// The built-in user programs.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Program {
            $(#[doc = $doc] $name,)*
        }

        impl Program {
            /// Byte offset of the program's entry in the blob.
            pub fn offset(self) -> u64 {
                let start = &raw const user_programs_start as u64;
                match self {
                    $(Program::$name => (&raw const $sym as u64) - start,)*
                }
            }
        }
    };
}

programs! {
    Hello => uprog_hello: "Logs a greeting and exits with 42.",
    NullLoop => uprog_null_loop: "`(count, buf)`: times `count` null system calls into `buf`.",
    Read => uprog_read: "`(addr)`: exits with the value at `addr`.",
    Write => uprog_write: "`(addr, value)`: writes `value` at `addr`, exits with 0.",
    Jump => uprog_jump: "`(addr)`: jumps to `addr`.",
    Syscall => uprog_syscall: "`(no, a0, a1)`: makes the call and exits with its raw result.",
    Spin => uprog_spin: "Loops forever.",
    Cpu => uprog_cpu: "Exits with the id of the CPU it runs on.",
    Privileged => uprog_privileged: "Executes HLT, a privileged instruction.",
    Syscall4 => uprog_syscall4: "`(no, a0, a1, a2)`: makes the call and exits with its raw result.",
    IncLoop => uprog_inc_loop: "`(addr)`: increments the word at `addr` forever.",
    ReturnInc => uprog_return_inc: "`(arg)`: returns `arg + 1` with `creturn`.",
    Caller => uprog_caller: "`(cid, func, arg)`: exits with `ccall(cid, func, arg)`.",
    CcallLoop => uprog_ccall_loop: "`(cid, func, count, results)`: times `count` ccall round trips.",
    MmLoop => uprog_mm_loop: "`(count, results)`: times mmap, first touch and munmap of 4 KiB.",
    MprotectLoop => uprog_mprotect_loop: "`(addr, count, results)`: times mprotect R and RW.",
    TouchLoop => uprog_touch_loop: "`(base, count, results)`: times the first write to each page.",
    Work => uprog_work: "`(n)`: about 4n instructions of work, then `creturn`.",
    ChainDriver => uprog_chain_driver: "`(buf, count, results)`: PD A of an A->B->C->B->A chain.",
    Relay => uprog_relay: "`(buf)`: one hop of the chain: pass the ArgBuf on or touch it, hand it back.",
    ChainDriverMove => uprog_chain_driver_move: "`(buf, count, results)`: `ChainDriver` with `ccall_move`.",
    RelayMove => uprog_relay_move: "`(buf)`: `Relay` with `ccall_move` and `creturn_move`.",
    MoveCaller => uprog_move_caller: "`(cid, func, buf)`: exits with `buf`'s word after `ccall_move(cid, func, buf)`.",
    BumpReturnMove => uprog_bump_return_move: "`(buf)`: increments `buf`'s word, then `ReturnMove`.",
    ReturnMove => uprog_return_move: "`(buf)`: `creturn_move(0, buf)`; if refused, `creturn(error)`.",
}

/// The whole blob of user programs.
pub fn blob() -> &'static [u8] {
    let start = &raw const user_programs_start;
    let len = (&raw const user_programs_end as usize) - (start as usize);
    // SAFETY: the symbols delimit the blob in .rodata, which is immutable and lives forever.
    unsafe { core::slice::from_raw_parts(start, len) }
}

/// Where the programs' code VMA is mapped in the Jord state of one generation.
static MAPPED: spin::Mutex<(u64, u64)> = spin::Mutex::new((0, 0));

/// The address of `prog` in the current Jord state: the programs are mapped there, as one
/// Global read-execute VMA every PD may run, the first time a test or benchmark asks (the
/// production kernel never maps them).
pub fn entry(prog: Program) -> u64 {
    let base = crate::arch::cpu::without_interrupts(|| {
        let mut mapped = MAPPED.lock();
        let generation = crate::jord::state::current_generation();
        if mapped.0 != generation || mapped.1 == 0 {
            let base = crate::jord::with(|j| j.map_code(blob()))
                .expect("memory for the test programs' code VMA");
            *mapped = (generation, base);
        }
        mapped.1
    });
    base + prog.offset()
}
