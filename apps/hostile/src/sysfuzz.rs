//! `sysfuzz <seed> <calls>`: random system calls from ring 3, for `cargo xtask fuzz syscalls`.
//!
//! Each call is a random number (usually a defined one, sometimes any) with arguments drawn
//! from boundary values, addresses (this PD's own buffers and what it mapped, other PDs', the
//! kernel's, non-canonical ones), PD ids (its own, ones it created, the table's limits) and
//! random bits. Calls that end the run (`exit`, `cexit`, `creturn`, `creturn_move`) are left
//! out, so one invocation makes every call it was asked for, and so are calls into itself or the
//! PDs it created at random addresses (the callee faults, ending the invocation); `sleep` is
//! kept under 1 ms. The
//! response is four little-endian `u64`s: calls made, successes, defined errors, and results
//! that are neither (a kernel bug: every failure must be an [`Error`] code, or for `wait` and
//! `call` a callee's [`FnError`] past [`CALLEE_ERROR_BASE`]); when there were
//! such results, six more: the first one's number, four arguments and result.

use fjord_libos::abi::{CALLEE_ERROR_BASE, Error, Sysno};
use fjord_libos::function::FnError;
use fjord_libos::privlib::{PROT_READ, PROT_WRITE};
use fjord_libos::rand::XorShift;
use fjord_libos::syscall::syscall4;

/// System call `no` with four arguments, the number unchecked (undefined numbers included).
fn raw_syscall(no: u64, a: [u64; 4]) -> i64 {
    let ret: i64;
    // SAFETY: `syscall` enters the kernel, which validates the number and every argument and
    // preserves every register but rax (the result), rcx and r11 (clobbered by the
    // instruction). No memory of this program is handed over except through the arguments,
    // which the kernel checks against this PD's rights.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") no => ret,
            in("rdi") a[0], in("rsi") a[1], in("rdx") a[2], in("r10") a[3],
            lateout("rcx") _, lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// Parses `<seed> <calls>` (decimal).
fn parse(args: &[u8]) -> Option<(u64, u64)> {
    let text = core::str::from_utf8(args).ok()?;
    let (seed, calls) = text.split_once(' ')?;
    Some((seed.trim().parse().ok()?, calls.trim().parse().ok()?))
}

/// Calls that would end this run before its last call.
const RUN_ENDING: [Sysno; 4] = [
    Sysno::Exit,
    Sysno::Cexit,
    Sysno::Creturn,
    Sysno::CreturnMove,
];

/// Runs the calls the request asks for; see the module documentation.
pub fn sysfuzz(args: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let (seed, calls) = parse(args).ok_or(FnError::BadRequest)?;
    let mut rng = XorShift(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    // A page of its own for pointer arguments (names, keys, buffers): not the stack nor the
    // ArgBuf, which a call moved or unmapped would take from under this loop.
    let own = syscall4(Sysno::Mmap, 8192, PROT_READ | PROT_WRITE, 0, 0)
        .map_err(|_| FnError::OutOfMemory)?;
    // SAFETY: `own` is the start of 8 KiB just mapped read-write for this PD; nothing else
    // refers to it yet.
    unsafe { core::ptr::copy_nonoverlapping(b"hello".as_ptr(), own as *mut u8, 5) };
    let me = raw_syscall(Sysno::Ucid as u64, [0; 4]) as u64;
    // Addresses this PD mapped and PDs it created, filled in as calls succeed.
    let mut mapped = [0u64; 8];
    let mut made = [0u64; 64];
    let mut created = 0;
    let numbers: [u64; 32] = core::array::from_fn(|i| {
        let mut defined = Sysno::ALL.iter().filter(|s| !RUN_ENDING.contains(s));
        defined.nth(i).map_or(999, |s| *s as u64)
    });
    let (mut ok, mut errors, mut undefined) = (0u64, 0u64, 0u64);
    let mut first_undefined = [0u64; 6];
    for i in 0..calls {
        let mut no = match rng.next_u64() % 16 {
            0 => rng.next_u64() % 64,
            1 => rng.next_u64(),
            _ => rng.pick(&numbers),
        };
        if RUN_ENDING.iter().any(|s| *s as u64 == no) {
            no += 64;
        }
        let mut a = [0u64; 4];
        for x in &mut a {
            *x = match rng.next_u64() % 8 {
                0 => rng.next_u64(),
                1 => rng.pick(&[
                    0,
                    1,
                    2,
                    5,
                    4095,
                    4096,
                    4097,
                    1 << 20,
                    1 << 30,
                    1 << 31,
                    1 << 32,
                    i64::MAX as u64,
                    1 << 63,
                    u64::MAX,
                    u64::MAX - 4095,
                ]),
                2 => rng.pick(&[own, own + 1, own + 4091, own + 8192, own.wrapping_neg()]),
                3 => rng.pick(&mapped) + rng.pick(&[0, 1, 4096, 8192]),
                4 => rng.pick(&[
                    0xffff_8000_0000_0000,
                    0xffff_ffff_8000_0000,
                    0xffff_ffff_ffff_f000,
                    0x0000_8000_0000_0000,
                    0x1000,
                    0x10_0000,
                ]),
                5 => rng.pick(&[me, made[0], made[1], 0, 1, 1023, 1024, 8191, 8192, u64::MAX]),
                6 => rng.pick(&[0, 1, 2, 3, 4, 5, 6, 7, 8]),
                _ => rng.next_u64() % 0x2_0000,
            };
        }
        if no == Sysno::Sleep as u64 {
            a[0] %= 1_000_000;
        }
        // This PD's code is not at a random address, and a PD it created holds none: calling
        // into either faults, which ends the invocation (as it should) and with it the run;
        // such calls go to an id past the table. Calls into other tenants' PDs stay.
        let into_own = a[0] == me || made.contains(&a[0]);
        if (no == Sysno::Ccall as u64 || no == Sysno::CcallMove as u64) && into_own {
            a[0] = a[0].wrapping_add(1 << 16);
        }
        let r = raw_syscall(no, a);
        match Error::from_ret(r) {
            Ok(v) => {
                ok += 1;
                if no == Sysno::Mmap as u64 {
                    mapped[(i % 8) as usize] = v;
                } else if no == Sysno::Cget as u64
                    && let Some(slot) = made.get_mut(created)
                {
                    *slot = v;
                    created += 1;
                }
            }
            Err(Some(_)) => errors += 1,
            // `wait` and `call` also report the callee's function error.
            Err(None)
                if (no == Sysno::Wait as u64 || no == Sysno::Call as u64)
                    && FnError::from_code(r.wrapping_neg().wrapping_sub(CALLEE_ERROR_BASE))
                        .is_some() =>
            {
                errors += 1
            }
            Err(None) => {
                if undefined == 0 {
                    first_undefined = [no, a[0], a[1], a[2], a[3], r as u64];
                }
                undefined += 1;
            }
        }
    }
    let mut words = [0u64; 10];
    words[..4].copy_from_slice(&[calls, ok, errors, undefined]);
    words[4..].copy_from_slice(&first_undefined);
    let n = if undefined == 0 { 4 } else { 10 };
    let out = resp.get_mut(..8 * n).ok_or(FnError::ResponseTooLarge)?;
    for (chunk, w) in out.chunks_exact_mut(8).zip(words) {
        chunk.copy_from_slice(&w.to_le_bytes());
    }
    Ok(8 * n)
}
