//! What the leak-test functions share: reading the heap through the thread pointer, a stack
//! slot every request finds at the same address, hex formatting, the `dirty` function's requests
//! (which the Linux baseline of `tools/nightcore` parses alike).
#![no_std]

use fjord_libos::function::FnError;
use fjord_libos::text::Writer;

/// The first byte of this instance's heap (just above the heap header the thread pointer
/// names).
#[cfg(target_os = "none")]
pub fn heap_base() -> u64 {
    let header: u64;
    // SAFETY: the executor points FS at the heap header, whose first word is its own address
    // (entry ABI); reading it has no other effect.
    unsafe {
        core::arch::asm!("mov {}, qword ptr fs:[0]", out(reg) header,
            options(nostack, readonly, preserves_flags));
    }
    header + fjord_libos::heap::HEADER_BYTES
}

/// On the host there is no instance heap.
#[cfg(not(target_os = "none"))]
pub fn heap_base() -> u64 {
    0
}

/// A stack slot 2 KiB below the caller's stack pointer: the same address in every request of
/// an instance (each enters at the same stack pointer).
#[inline(always)]
pub fn below_stack() -> *mut u64 {
    let sp: u64;
    // SAFETY: reads the stack pointer into a register; no memory is touched.
    unsafe { core::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack)) };
    ((sp - 2048) & !7) as *mut u64
}

/// Parses a hexadecimal `u64` (optionally `0x`-prefixed).
pub fn parse_hex(text: &[u8]) -> Result<u64, FnError> {
    let text = text.strip_prefix(b"0x").unwrap_or(text);
    if text.is_empty() || text.len() > 16 {
        return Err(FnError::BadRequest);
    }
    text.iter().try_fold(0u64, |acc, &c| {
        let d = (c as char).to_digit(16).ok_or(FnError::BadRequest)?;
        Ok((acc << 4) | u64::from(d))
    })
}

/// Writes `key=<16 hex digits> ` for each pair into `resp`; returns the length.
pub fn report(resp: &mut [u8], pairs: &[(&str, u64)]) -> Result<usize, FnError> {
    use core::fmt::Write;
    let mut w = Writer::new(resp);
    for (k, v) in pairs {
        write!(w, "{k}={v:016x} ").map_err(|_| FnError::ResponseTooLarge)?;
    }
    Ok(w.len())
}

/// A request of the `dirty` function: `<n>` writes one byte into each of the first `n` pages of
/// its heap, `check <n>` counts how many of them hold that byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirtyRequest {
    /// Whether it only counts (`check <n>`).
    pub check: bool,
    /// The pages it covers, at most the heap's `pages`.
    pub pages: u64,
}

/// Parses a `dirty` request for a heap of `pages` pages.
pub fn parse_dirty(req: &[u8], pages: u64) -> Result<DirtyRequest, FnError> {
    let text = core::str::from_utf8(req)
        .map_err(|_| FnError::BadRequest)?
        .trim();
    let (check, count) = match text.strip_prefix("check ") {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let n = count
        .trim()
        .parse::<u64>()
        .map_err(|_| FnError::BadRequest)?;
    Ok(DirtyRequest {
        check,
        pages: n.min(pages),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirty_requests() {
        let req = |check, pages| DirtyRequest { check, pages };
        assert_eq!(parse_dirty(b"7", 100), Ok(req(false, 7)));
        assert_eq!(parse_dirty(b" check 3\n", 100), Ok(req(true, 3)));
        assert_eq!(parse_dirty(b"5000", 100), Ok(req(false, 100)));
        for bad in [&b""[..], b"check", b"-1", b"seven", b"\xff"] {
            assert_eq!(parse_dirty(bad, 100), Err(FnError::BadRequest));
        }
    }
}
