//! The `leak-init` function, for Groundhog's request-isolation tests: its `init` builds a
//! table and a label from the warm-up input on its heap, maps two pages of its own, each
//! starting with [`MAPPED`], a third that it makes read-only after writing [`MAPPED`], and
//! ten more, one VMA each, starting with [`MAPPED`] (all part of the instance's
//! snapshot); a request may corrupt them, or unmap, shrink or
//! write-protect the mapping, or make the read-only page writable again and write it, and the
//! next one sees only the snapshot's values.
//!
//! - `corrupt <hex secret>`: overwrites every table entry, the label and the read-write mapped
//!   pages' first words with the secret and appends entries; responds `len=…`;
//! - `unmap`, `shrink`, `protect`: unmaps both mapped pages, unmaps the second, or makes both
//!   read-only; responds `done=1`;
//! - `widen <hex secret>`: makes the read-only page writable and writes the secret at its
//!   start; responds `done=1`;
//! - `dump`: responds `len=… sum=… first=… label=… mapped=… tail=… ro=… scattered=…` (16 hex
//!   digits each; the label's first 8 bytes; the mapped pages' first words, 0 on the host;
//!   how many of the scattered pages start with [`MAPPED`]): after `init`, 1000 entries
//!   `3 * i`, the label the warm-up input, [`MAPPED`] three times, ten.
#![cfg_attr(target_os = "none", no_std, no_main)]

extern crate alloc;

use alloc::vec::Vec;
use fjord_app_leak::{parse_hex, report};
use fjord_libos::function::FnError;

/// What `init` writes into the page it maps.
const MAPPED: u64 = 0x1717_1717_1717_1717;

/// How many one-page VMAs `init` maps besides the first three (more than a handful: the
/// snapshot keeps every VMA `init` mapped).
#[cfg(target_os = "none")]
const SCATTERED: usize = 10;

/// What `init` builds.
struct State {
    table: Vec<u64>,
    label: Vec<u8>,
    /// The first of the two pages `init` mapped (0 on the host).
    page: u64,
    /// The page `init` made read-only (0 on the host).
    ro: u64,
    /// The one-page VMAs `init` mapped besides (none on the host).
    scattered: Vec<u64>,
}

fn init(warmup: &[u8]) -> Result<State, FnError> {
    let page = map_pages()?;
    write_word(page, MAPPED);
    write_word(second(page), MAPPED);
    let ro = map_read_only()?;
    let scattered = map_scattered()?;
    scattered.iter().for_each(|&p| write_word(p, MAPPED));
    Ok(State {
        table: (0..1000).map(|i| 3 * i).collect(),
        label: warmup.to_vec(),
        page,
        ro,
        scattered,
    })
}

/// A new page of this instance holding [`MAPPED`] at its start, made read-only.
fn map_read_only() -> Result<u64, FnError> {
    #[cfg(target_os = "none")]
    {
        use fjord_libos::privlib::{PROT_READ, PROT_WRITE, mmap, mprotect};
        let page = mmap(4096, PROT_READ | PROT_WRITE).map_err(|_| FnError::Failed)?;
        write_word(page, MAPPED);
        mprotect(page, 4096, PROT_READ).map_err(|_| FnError::Failed)?;
        Ok(page)
    }
    #[cfg(not(target_os = "none"))]
    Ok(0)
}

/// Ten new one-page read-write VMAs of this instance (none on the host).
fn map_scattered() -> Result<Vec<u64>, FnError> {
    #[cfg(target_os = "none")]
    {
        use fjord_libos::privlib::{PROT_READ, PROT_WRITE, mmap};
        (0..SCATTERED)
            .map(|_| mmap(4096, PROT_READ | PROT_WRITE).map_err(|_| FnError::Failed))
            .collect()
    }
    #[cfg(not(target_os = "none"))]
    Ok(Vec::new())
}

/// Makes the read-only page writable again (nothing on the host).
fn widen(page: u64) -> Result<(), FnError> {
    #[cfg(target_os = "none")]
    {
        use fjord_libos::privlib::{PROT_READ, PROT_WRITE, mprotect};
        mprotect(page, 4096, PROT_READ | PROT_WRITE).map_err(|_| FnError::Failed)
    }
    #[cfg(not(target_os = "none"))]
    {
        let _ = page;
        Ok(())
    }
}

/// Bytes `init` maps.
#[cfg(target_os = "none")]
const MAPPED_LEN: u64 = 8192;

/// A new two-page read-write VMA of this instance.
fn map_pages() -> Result<u64, FnError> {
    #[cfg(target_os = "none")]
    {
        use fjord_libos::privlib::{PROT_READ, PROT_WRITE, mmap};
        mmap(MAPPED_LEN, PROT_READ | PROT_WRITE).map_err(|_| FnError::Failed)
    }
    #[cfg(not(target_os = "none"))]
    Ok(0)
}

/// The second mapped page (0 on the host).
fn second(page: u64) -> u64 {
    if page == 0 { 0 } else { page + 4096 }
}

/// Unmaps, shrinks or write-protects the mapping (nothing on the host).
fn change_mapping(page: u64, how: &[u8]) -> Result<(), FnError> {
    #[cfg(target_os = "none")]
    {
        use fjord_libos::privlib::{PROT_READ, mprotect, munmap};
        let done = match how {
            b"unmap" => munmap(page, MAPPED_LEN),
            b"shrink" => munmap(page + 4096, 4096),
            b"protect" => mprotect(page, MAPPED_LEN, PROT_READ),
            _ => return Err(FnError::BadRequest),
        };
        done.map_err(|_| FnError::Failed)
    }
    #[cfg(not(target_os = "none"))]
    {
        let _ = (page, how);
        Ok(())
    }
}

fn write_word(page: u64, v: u64) {
    if page != 0 {
        // SAFETY: `page` is the read-write page `init` mapped, which the instance keeps.
        unsafe { (page as *mut u64).write_volatile(v) };
    }
}

fn read_word(page: u64) -> u64 {
    if page == 0 {
        return 0;
    }
    // SAFETY: as in `write_word`.
    unsafe { (page as *const u64).read_volatile() }
}

fn serve(s: &mut State, req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    if let Some(secret) = req.strip_prefix(b"corrupt ") {
        let secret = parse_hex(secret)?;
        s.table.iter_mut().for_each(|e| *e = secret);
        s.table.extend(core::iter::repeat_n(secret, 4000));
        s.label.clear();
        s.label.extend_from_slice(&secret.to_le_bytes());
        write_word(s.page, secret);
        write_word(second(s.page), secret);
        s.scattered.iter().for_each(|&p| write_word(p, secret));
        return report(resp, &[("len", s.table.len() as u64)]);
    }
    if let Some(secret) = req.strip_prefix(b"widen ") {
        let secret = parse_hex(secret)?;
        widen(s.ro)?;
        write_word(s.ro, secret);
        return report(resp, &[("done", 1)]);
    }
    if matches!(req, b"unmap" | b"shrink" | b"protect") {
        change_mapping(s.page, req)?;
        return report(resp, &[("done", 1)]);
    }
    if req != b"dump" {
        return Err(FnError::BadRequest);
    }
    let mut label = [0u8; 8];
    let n = s.label.len().min(8);
    label[..n].copy_from_slice(&s.label[..n]);
    report(
        resp,
        &[
            ("len", s.table.len() as u64),
            ("sum", s.table.iter().fold(0u64, |a, &e| a.wrapping_add(e))),
            ("first", s.table.first().copied().unwrap_or(0)),
            ("label", u64::from_le_bytes(label)),
            ("mapped", read_word(s.page)),
            ("tail", read_word(second(s.page))),
            ("ro", read_word(s.ro)),
            (
                "scattered",
                s.scattered
                    .iter()
                    .filter(|&&p| read_word(p) == MAPPED)
                    .count() as u64,
            ),
        ],
    )
}

fjord_libos::function!(
    serve,
    init = init,
    name = "leak-init",
    stack_size = "16K",
    heap_size = "256K",
    warmup = "snapshot"
);
