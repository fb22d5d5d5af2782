//! The `hostile` function, for isolation tests: it does what the request says.
//!
//! - `read <hex address>`: reads the 8 bytes at the address (kernel memory, another PD's VMA,
//!   ...) and responds with them; outside what this PD may read, it faults;
//! - `write <hex address>`: writes zero there;
//! - `loop`: spins forever (the executor's deadline must stop it);
//! - `panic`: panics (the panic handler reports and returns an error);
//! - `alloc`: maps and touches 1 MiB after 1 MiB until `mmap` fails (the PD's memory limit),
//!   then returns [`FnError::OutOfMemory`].
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
    if let Some(addr) = req.strip_prefix(b"write ") {
        let p = parse_hex(addr)? as *mut u64;
        // SAFETY: none intended, as for `read`: the write is an attack the PD must not survive.
        unsafe { p.write_volatile(0) };
        return Ok(0);
    }
    Err(FnError::BadRequest)
}

fjord_libos::function!(hostile, name = "hostile", stack_size = "16K", heap_size = 0);
