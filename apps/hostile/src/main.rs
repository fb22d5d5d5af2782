//! The `hostile` function, for isolation tests: it does what the request says.
//!
//! - `read <hex address>`: reads the 8 bytes at the address (kernel memory, another PD's VMA,
//!   ...) and responds with them; outside what this PD may read, it faults;
//! - `write <hex address>`: writes zero there;
//! - `loop`: spins forever (the executor's deadline must stop it);
//! - `panic`: panics (the panic handler reports and returns an error);
//! - `respond-too-much`: answers one byte more than the ArgBuf holds, which is refused with
//!   [`FnError::ResponseTooLarge`];
//! - `alloc`: maps and touches 1 MiB after 1 MiB until `mmap` fails (the PD's memory limit, 2 MiB),
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
//! - `cget-flood`: creates PDs with `cget` until it is refused and responds with the number
//!   created (a little-endian `u64`) and the refusal's raw result (`i64`); the PDs are left for
//!   the kernel to destroy when the invocation ends;
//! - `kv-get <key>` / `kv-put <key>=<value>` / `kv-delete <key>`: the key-value calls in this
//!   function's namespace; `kv-get` responds with the value, the others with the raw result;
//! - `kv-fill`: puts 1 KiB values under new keys until refused; responds with the number stored
//!   and the refusal's raw result;
//! - `wx`: tries to get memory that is writable and executable, or executable after being
//!   writable: `mmap(RWX)`, `mmap(RX)`, and `mmap(RW)` then `mprotect(RX)`; responds with the
//!   three raw results;
//! - `log-flood`: logs 256-byte messages until refused (at most 10,000); responds with the
//!   number written and the refusal's raw result;
//! - `x87` / `sse`: executes an x87 instruction (`fld1`) or an SSE one (`xorps`): the kernel
//!   gives no PD floating-point or vector registers, so each faults (`#NM`, `#UD`);
//! - `fpu-put` / `fpu-get`: leaves a secret in xmm0 and pushes 1.0 on the x87 stack / responds
//!   with xmm0's low 8 bytes and st(0) popped as an `f64`'s bits. Both fault where the kernel
//!   traps the FPU; where a hypervisor ignores that trap (KVM's PVM backend) the kernel resets
//!   the registers before every ring-3 run, so `fpu-get` sees 0 and the x87 empty-stack NaN;
//! - `sysfuzz <seed> <calls>`: random system calls with boundary and random arguments
//!   ([`sysfuzz`]); responds with how many were made, succeeded, failed with an error code, and
//!   gave anything else.
#![cfg_attr(target_os = "none", no_std, no_main)]

use fjord_libos::function::FnError;

mod sysfuzz;

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

/// Writes `words` (little-endian) at the start of `resp`; returns the bytes written.
fn respond(resp: &mut [u8], words: &[u64]) -> Result<usize, FnError> {
    let out = resp
        .get_mut(..8 * words.len())
        .ok_or(FnError::ResponseTooLarge)?;
    for (chunk, w) in out.chunks_exact_mut(8).zip(words) {
        chunk.copy_from_slice(&w.to_le_bytes());
    }
    Ok(out.len())
}

/// The raw `rax` of a call made with `syscall4_raw`.
fn raw(no: fjord_libos::abi::Sysno, a: [u64; 4]) -> u64 {
    fjord_libos::syscall::syscall4_raw(no, a[0], a[1], a[2], a[3]) as u64
}

/// The attacks on other tenants' resources: PDs, key-value data, W^X, the console.
fn tenant_attack(req: &[u8], resp: &mut [u8]) -> Option<Result<usize, FnError>> {
    use fjord_libos::abi::Sysno;
    if req == b"cget-flood" {
        let mut made = 0u64;
        loop {
            let r = raw(Sysno::Cget, [0; 4]);
            if (r as i64) < 0 || made > 10_000 {
                return Some(respond(resp, &[made, r]));
            }
            made += 1;
        }
    }
    if let Some(key) = req.strip_prefix(b"kv-get ") {
        let n = match fjord_libos::kv::get(key, resp) {
            Ok(Some(n)) => n.min(resp.len()),
            Ok(None) => return Some(Err(FnError::BadRequest)),
            Err(_) => return Some(Err(FnError::Failed)),
        };
        return Some(Ok(n));
    }
    if let Some(kv) = req.strip_prefix(b"kv-put ") {
        let at = kv.iter().position(|&b| b == b'=')?;
        let (k, v) = (&kv[..at], &kv[at + 1..]);
        let r = raw(
            Sysno::KvPut,
            [
                k.as_ptr() as u64,
                k.len() as u64,
                v.as_ptr() as u64,
                v.len() as u64,
            ],
        );
        return Some(respond(resp, &[r]));
    }
    if let Some(k) = req.strip_prefix(b"kv-delete ") {
        let r = raw(Sysno::KvDelete, [k.as_ptr() as u64, k.len() as u64, 0, 0]);
        return Some(respond(resp, &[r]));
    }
    if req == b"kv-fill" {
        let value = [0x5a; 1024];
        let mut stored = 0u64;
        loop {
            let key = stored.to_le_bytes();
            let r = raw(
                Sysno::KvPut,
                [key.as_ptr() as u64, 8, value.as_ptr() as u64, 1024],
            );
            if (r as i64) < 0 || stored > 100_000 {
                return Some(respond(resp, &[stored, r]));
            }
            stored += 1;
        }
    }
    if req == b"wx" {
        use fjord_libos::privlib::{PROT_EXEC, PROT_READ, PROT_WRITE};
        let rwx = raw(
            Sysno::Mmap,
            [4096, PROT_READ | PROT_WRITE | PROT_EXEC, 0, 0],
        );
        let rx = raw(Sysno::Mmap, [4096, PROT_READ | PROT_EXEC, 0, 0]);
        let rw = raw(Sysno::Mmap, [4096, PROT_READ | PROT_WRITE, 0, 0]);
        let protect = if (rw as i64) < 0 {
            rw
        } else {
            raw(Sysno::Mprotect, [rw, 4096, PROT_READ | PROT_EXEC, 0])
        };
        return Some(respond(resp, &[rwx, rx, protect]));
    }
    if req == b"log-flood" {
        let line = [b'x'; 256];
        let msg = core::str::from_utf8(&line).ok()?;
        let mut written = 0u64;
        loop {
            let r = raw(Sysno::Log, [msg.as_ptr() as u64, msg.len() as u64, 0, 0]);
            if (r as i64) < 0 || written >= 10_000 {
                return Some(respond(resp, &[written, r]));
            }
            written += 1;
        }
    }
    None
}

/// What `fpu-put` leaves in xmm0 for a later `fpu-get` to find.
#[cfg(target_os = "none")]
const FPU_SECRET: u64 = 0x5ec2_e7f0_0d15_ea5e;

/// xmm0's low 8 bytes and st(0), popped as an `f64`'s bits (what `fpu-get` responds).
#[cfg(target_os = "none")]
fn fpu_registers() -> [u64; 2] {
    let xmm0: u64;
    let mut st0 = 0u64;
    // SAFETY: none intended, as for `fpu-put`: where the kernel traps the FPU this faults.
    unsafe {
        core::arch::asm!(
            "movq {x}, xmm0",
            "fstp qword ptr [{st}]",
            x = out(reg) xmm0,
            st = in(reg) &mut st0,
            options(nostack),
        );
    }
    [xmm0, st0]
}

/// On the host (unit builds) there is nothing to read.
#[cfg(not(target_os = "none"))]
fn fpu_registers() -> [u64; 2] {
    [0, 0]
}

/// Serves one hostile request.
fn hostile(req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    if let Some(r) = tenant_attack(req, resp) {
        return r;
    }
    if let Some(args) = req.strip_prefix(b"sysfuzz ") {
        return sysfuzz::sysfuzz(args, resp);
    }
    if req == b"loop" {
        loop {
            core::hint::spin_loop();
        }
    }
    if req == b"panic" {
        panic!("asked to panic");
    }
    if req == b"respond-too-much" {
        // One byte more than the ArgBuf holds after the request.
        let room = resp.len();
        resp.get_mut(..room + 1)
            .ok_or(FnError::ResponseTooLarge)?
            .fill(b'x');
        return Ok(room + 1);
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
    if req == b"x87" || req == b"sse" {
        #[cfg(target_os = "none")]
        // SAFETY: none intended: the instruction is an attempt to reach registers the kernel
        // gives no PD; it faults and ends the invocation.
        unsafe {
            if req == b"x87" {
                core::arch::asm!("fld1", "fstp st(0)", options(nostack));
            } else {
                core::arch::asm!("xorps xmm0, xmm0", out("xmm0") _, options(nostack, nomem));
            }
        }
        return Ok(0);
    }
    if req == b"fpu-put" {
        #[cfg(target_os = "none")]
        // SAFETY: none intended: where the kernel traps the FPU this faults; where a hypervisor
        // does not honour that trap, it leaves a secret in xmm0 and st(0) for `fpu-get`.
        unsafe {
            core::arch::asm!(
                "movq xmm0, {secret}",
                "fld1",
                secret = in(reg) FPU_SECRET,
                out("xmm0") _,
                options(nostack, nomem),
            );
        }
        return Ok(0);
    }
    if req == b"fpu-get" {
        let out = resp.get_mut(..16).ok_or(FnError::ResponseTooLarge)?;
        let [xmm0, st0] = fpu_registers();
        out[..8].copy_from_slice(&xmm0.to_le_bytes());
        out[8..].copy_from_slice(&st0.to_le_bytes());
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

fjord_libos::function!(
    hostile,
    name = "hostile",
    stack_size = "16K",
    heap_size = 0,
    // Small, so that `alloc` reaches it in well under the 1 s time limit where every page it
    // touches is a fault the hypervisor emulates (KVM PVM): 512 pages.
    memory_limit = "2M",
    log_limit = "2K"
);
