//! The `hostile` function, for isolation tests: it does what the request says.
//!
//! - `read <hex address>`: reads the 8 bytes at the address (kernel memory, another PD's VMA,
//!   ...) and responds with them; outside what this PD may read, it faults;
//! - `write <hex address>`: writes zero there;
//! - `loop`: spins forever (the executor's deadline must stop it);
//! - `panic`: panics (the panic handler reports and returns an error);
//! - `alloc`: maps and touches 1 MiB after 1 MiB until `mmap` fails (the PD's memory limit),
//!   then returns [`FnError::OutOfMemory`];
//! - `remember <hex value>`: writes the value 2 KiB below its stack pointer, where the next
//!   request's `recall` looks (an instance reused for the next request starts at the same
//!   stack pointer);
//! - `recall`: responds with the 8 bytes 2 KiB below its stack pointer: zero unless something
//!   of an earlier request survived;
//! - `forge-call <hex address>`: makes the `call` system call twice with forged arguments, an
//!   ArgBuf at the address (not this PD's) and a function name at the address, and responds
//!   with the two raw results (little-endian `i64`s): both must be errors, and this function
//!   goes on running.
#![cfg_attr(target_os = "none", no_std, no_main)]

use fjord_libos::function::FnError;

fn parse_hex(text: &[u8]) -> Result<u64, FnError> {
    let text = text.strip_prefix(b"0x").unwrap_or(text);
    if text.is_empty() || text.len() > 16 {
        return Err(FnError::BadRequest);
    }
    text.iter().try_fold(0u64, |acc, &c| {
        let d = (c as char).to_digit(16).ok_or(FnError::BadRequest)?;
        Ok((acc << 4) | u64::from(d))
    })
}

/// Where `remember` and `recall` look: 2 KiB below the stack pointer, in this PD's stack.
fn below_stack() -> *mut u64 {
    let sp: u64;
    // SAFETY: reads the stack pointer into a register; no memory is touched.
    unsafe { core::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack)) };
    ((sp - 2048) & !7) as *mut u64
}

/// Serves one hostile request.
fn hostile(req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    if req == b"loop" {
        loop {
            core::hint::spin_loop();
        }
    }
    if req == b"panic" {
        panic!("asked to panic");
    }
    if req == b"alloc" {
        use fjord_libos::privlib::{PROT_READ, PROT_WRITE, mmap};
        const CHUNK: u64 = 1 << 20;
        loop {
            let Ok(base) = mmap(CHUNK, PROT_READ | PROT_WRITE) else {
                return Err(FnError::OutOfMemory);
            };
            for page in (0..CHUNK).step_by(4096) {
                // SAFETY: `base .. base + CHUNK` was just mapped read-write for this PD.
                unsafe { ((base + page) as *mut u8).write_volatile(1) };
            }
        }
    }
    if let Some(addr) = req.strip_prefix(b"read ") {
        let p = parse_hex(addr)? as *const u64;
        // SAFETY: none intended: this function exists to try reads it may not make; the PD's
        // page tables decide, and a forbidden read faults and ends the invocation.
        let v = unsafe { p.read_volatile() };
        let out = resp.get_mut(..8).ok_or(FnError::ResponseTooLarge)?;
        out.copy_from_slice(&v.to_le_bytes());
        return Ok(8);
    }
    if let Some(value) = req.strip_prefix(b"remember ") {
        let v = parse_hex(value)?;
        // SAFETY: the address is in this PD's stack VMA (16 KiB, below the frames in use).
        unsafe { below_stack().write_volatile(v) };
        return Ok(0);
    }
    if req == b"recall" {
        // SAFETY: as for `remember`; the stack page is this PD's (zeroed when first used).
        let v = unsafe { below_stack().read_volatile() };
        let out = resp.get_mut(..8).ok_or(FnError::ResponseTooLarge)?;
        out.copy_from_slice(&v.to_le_bytes());
        return Ok(8);
    }
    if let Some(addr) = req.strip_prefix(b"forge-call ") {
        use fjord_libos::abi::Sysno;
        use fjord_libos::syscall::syscall4_raw;
        let addr = parse_hex(addr)?;
        let name = b"echo";
        let forged_buf = syscall4_raw(Sysno::Call, name.as_ptr() as u64, 4, addr, 0);
        let forged_name = syscall4_raw(Sysno::Call, addr, 4, addr, 0);
        let out = resp.get_mut(..16).ok_or(FnError::ResponseTooLarge)?;
        out[..8].copy_from_slice(&forged_buf.to_le_bytes());
        out[8..].copy_from_slice(&forged_name.to_le_bytes());
        return Ok(16);
    }
    if let Some(addr) = req.strip_prefix(b"write ") {
        let p = parse_hex(addr)? as *mut u64;
        // SAFETY: none intended, as for `read`: the write is an attack the PD must not survive.
        unsafe { p.write_volatile(0) };
        return Ok(0);
    }
    Err(FnError::BadRequest)
}

fjord_libos::function!(hostile, name = "hostile", stack_size = "16K", heap_size = 0);
