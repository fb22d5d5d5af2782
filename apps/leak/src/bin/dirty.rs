//! The `dirty` function, for the restore benchmark: a 64 MiB heap of which a request writes
//! as many pages as it asks for.
//!
//! - `<n>` (decimal): writes one byte into each of the first `n` pages of the heap (at most
//!   all of it) and responds with `n`.
//! - `check <n>`: responds with how many of the first `n` pages hold that byte (0 on an
//!   instance restored to its snapshot).
#![cfg_attr(target_os = "none", no_std, no_main)]

use fjord_app_leak::{DirtyRequest, heap_base, parse_dirty};
use fjord_libos::function::FnError;

/// The heap's size (the manifest's `heap_size`).
const HEAP: u64 = 64 << 20;

fn dirty(req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let DirtyRequest { check, pages: n } = parse_dirty(req, HEAP / 4096)?;
    let base = heap_base();
    let mut answer = n;
    if check {
        answer = (0..n)
            .filter(|page| {
                // SAFETY: the page lies in this instance's heap (`n` is at most its page count).
                let byte = unsafe { ((base + page * 4096) as *const u8).read_volatile() };
                byte == 1
            })
            .count() as u64;
    } else {
        for page in 0..n {
            // SAFETY: the page lies in this instance's heap (`n` is at most its page count).
            unsafe { ((base + page * 4096) as *mut u8).write_volatile(1) };
        }
    }
    let mut w = fjord_libos::text::Writer::new(resp);
    core::fmt::Write::write_fmt(&mut w, format_args!("{answer}")).map_err(|_| FnError::Failed)?;
    Ok(w.len())
}

fjord_libos::function!(
    dirty,
    name = "dirty",
    stack_size = "16K",
    heap_size = "64M",
    // Dirtying thousands of pages takes seconds where the hypervisor emulates ring 0.
    time_limit_ms = "10000"
);
