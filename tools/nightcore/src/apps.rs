//! The workloads' functions by name: each workload crate's `routes` (the same handlers Fjord's
//! modules run, `apps/*/src/bin/*.rs`), instantiated with the [`Worker`] env; and the `restore`
//! group's `hello` and `dirty` ([`RESTORE`]).

use core::fmt::Write as _;
use std::sync::OnceLock;

use fjord_app_leak::{DirtyRequest, parse_dirty};
use fjord_libos::function::FnError;
use fjord_libos::text::Writer;

use crate::sys;
use crate::worker::Worker;

/// A workload function as a worker runs it.
pub type Route = fjord_app_kit::Route<Worker>;

const HOTEL: &[(&str, Route)] = &fjord_app_hotel::routes::<Worker>();
const SOCIAL: &[(&str, Route)] = &fjord_app_social::routes::<Worker>();
const MEDIA: &[(&str, Route)] = &fjord_app_media::routes::<Worker>();
const HIPSTER: &[(&str, Route)] = &fjord_app_hipster::routes::<Worker>();

/// The functions of `workload` (`hotel`, `social`, `media`, `hipster`).
pub fn functions(workload: &str) -> Option<&'static [(&'static str, Route)]> {
    match workload {
        "hotel" => Some(HOTEL),
        "social" => Some(SOCIAL),
        "media" => Some(MEDIA),
        "hipster" => Some(HIPSTER),
        _ => None,
    }
}

/// The index of `name` in `table`.
pub fn index(table: &[(&str, Route)], name: &str) -> Option<u16> {
    table.iter().position(|(n, _)| *n == name).map(|i| i as u16)
}

/// Groundhog's microbenchmark functions of the `restore` group, with state a process builds once
/// at init ([`init_restore`]) and every process forked from it inherits:
///
/// - `hello`: request `world`, response `hello, world!` (the `hello, ` comes from the greeting
///   init built);
/// - `dirty`: request `<n>` writes one byte into each of the first `n` pages of the 64 MiB heap
///   init mapped and left untouched (at most all of it) and responds `n`; request `check <n>`
///   responds with how many of the first `n` pages hold that byte (0 in a process that starts
///   from init's state), as Fjord's `dirty` (`apps/leak`).
pub const RESTORE: &[(&str, Route)] = &[("hello", hello), ("dirty", dirty)];

/// The `dirty` function's heap (Fjord's `heap_size`).
pub const DIRTY_HEAP: usize = 64 << 20;

const PAGE: usize = 4096;

/// The greeting `hello` answers with, built by [`init_restore`].
static GREETING: OnceLock<Box<[u8]>> = OnceLock::new();

/// The address of `dirty`'s heap, mapped by [`init_restore`].
static HEAP: OnceLock<usize> = OnceLock::new();

/// The init of the [`RESTORE`] functions: builds `hello`'s greeting on the process heap and maps
/// `dirty`'s heap, untouched. Idempotent.
pub fn init_restore() -> std::io::Result<()> {
    GREETING.get_or_init(|| b"hello, ".to_vec().into_boxed_slice());
    if HEAP.get().is_none() {
        let heap = sys::private_memory(DIRTY_HEAP)?;
        HEAP.get_or_init(|| heap as usize);
    }
    Ok(())
}

fn hello(_: &mut Worker, req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let greeting = GREETING.get().ok_or(FnError::Failed)?;
    let mut n = 0;
    for part in [&greeting[..], req, b"!"] {
        resp.get_mut(n..n + part.len())
            .ok_or(FnError::ResponseTooLarge)?
            .copy_from_slice(part);
        n += part.len();
    }
    Ok(n)
}

fn dirty(_: &mut Worker, req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let base = *HEAP.get().ok_or(FnError::Failed)? as *mut u8;
    let DirtyRequest { check, pages } = parse_dirty(req, (DIRTY_HEAP / PAGE) as u64)?;
    let n = pages as usize;
    let mut answer = n;
    if check {
        answer = (0..n)
            // SAFETY: the page lies in the heap init mapped (`n` is at most its page count).
            .filter(|page| unsafe { base.add(page * PAGE).read_volatile() } == 1)
            .count();
    } else {
        for page in 0..n {
            // SAFETY: the page lies in the heap init mapped (`n` is at most its page count).
            unsafe { base.add(page * PAGE).write_volatile(1) };
        }
    }
    let mut w = Writer::new(resp);
    write!(w, "{answer}").map_err(|_| FnError::ResponseTooLarge)?;
    Ok(w.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_has_its_entry_and_names_are_unique() {
        for op in fjord_faas::workloads::OPERATIONS {
            let table = functions(op.workload).unwrap();
            assert!(index(table, op.entry).is_some(), "{}", op.entry);
        }
        for w in fjord_faas::workloads::WORKLOADS {
            let table = functions(w).unwrap();
            for (i, (name, _)) in table.iter().enumerate() {
                assert!(name.starts_with(w));
                assert_eq!(index(table, name), Some(i as u16));
            }
        }
        assert!(functions("chain").is_none());
    }

    #[test]
    fn hello_and_dirty_answer_as_fjords() {
        init_restore().unwrap();
        let store = crate::store::Store::new_shared().unwrap();
        let mut env = Worker::new(RESTORE, -1, -1, store);
        let mut resp = [0u8; 64];
        let mut call = |name: &str, req: &[u8]| {
            let route = RESTORE[usize::from(index(RESTORE, name).unwrap())].1;
            route(&mut env, req, &mut resp).map(|n| resp[..n].to_vec())
        };
        assert_eq!(call("hello", b"world").unwrap(), b"hello, world!");
        assert_eq!(call("dirty", b"check 3").unwrap(), b"0");
        assert_eq!(call("dirty", b"3").unwrap(), b"3");
        // Within one process a later request sees the pages: only a fork per request hides them.
        assert_eq!(call("dirty", b"check 5").unwrap(), b"3");
        assert_eq!(call("dirty", b"99999").unwrap(), b"16384");
        assert_eq!(call("dirty", b"x"), Err(FnError::BadRequest));
        let mut tiny = [0u8; 4];
        let route = RESTORE[0].1;
        assert_eq!(
            route(
                &mut Worker::new(RESTORE, -1, -1, store),
                b"world",
                &mut tiny
            ),
            Err(FnError::ResponseTooLarge)
        );
    }
}
