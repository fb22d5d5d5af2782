//! The `index` function: a warm instance worth keeping. Its `init` builds an index on its heap
//! from the warm-up input: a `BTreeMap` of 6000 boxed entries, each with a label string and a
//! vector of small integers, and a table of boxed closures (pointers into the heap and into the
//! code everywhere: a clone must relocate them, or share them unchanged). Its instances are
//! forked from a zygote that ran `init` (`groundhog = "fork"`), so `init` runs once per node,
//! or not at all on a node that restores a checkpoint of the zygote.
//!
//! Requests: `get <key>` answers `key=… value=… label=…` for one entry (a few pages touched);
//! `sum` walks the whole index and answers `entries=… sum=…` (every page read); `bump <key>`
//! changes one entry and answers its new value (the change dies with the request's instance).
//! The answers depend only on the warm-up input and the request.
#![cfg_attr(target_os = "none", no_std, no_main)]

extern crate alloc;

use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write;
use fjord_libos::function::FnError;

/// Entries `init` builds.
const ENTRIES: u32 = 6000;

struct Entry {
    value: u64,
    label: String,
    small: Vec<u32>,
}

struct Index {
    entries: BTreeMap<u32, Box<Entry>>,
    mixers: Vec<Box<dyn Fn(u64) -> u64>>,
}

fn init(warmup: &[u8]) -> Result<Index, FnError> {
    let seed = warmup
        .iter()
        .fold(7u64, |h, &b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    let mut entries = BTreeMap::new();
    for k in 0..ENTRIES {
        let mut label = String::new();
        let _ = write!(label, "entry-{k}-{}", seed % 1000);
        let value = seed.wrapping_mul(u64::from(k) + 1) % 1_000_003;
        let small = (0..(k % 5) + 1).map(|i| (k + i) % 97).collect();
        entries.insert(
            k,
            Box::new(Entry {
                value,
                label,
                small,
            }),
        );
    }
    let mixers = (1..=8u64)
        .map(|m| Box::new(move |x: u64| x.rotate_left(m as u32) ^ m) as Box<dyn Fn(u64) -> u64>)
        .collect();
    Ok(Index { entries, mixers })
}

fn key(arg: &[u8]) -> Result<u32, FnError> {
    core::str::from_utf8(arg)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or(FnError::BadRequest)
}

fn answer(resp: &mut [u8], args: core::fmt::Arguments<'_>) -> Result<usize, FnError> {
    let mut line = fjord_libos::function::StackText::<160>::new();
    line.write_fmt(args)
        .map_err(|_| FnError::ResponseTooLarge)?;
    let bytes = line.as_str().as_bytes();
    let out = resp
        .get_mut(..bytes.len())
        .ok_or(FnError::ResponseTooLarge)?;
    out.copy_from_slice(bytes);
    Ok(bytes.len())
}

fn serve(ix: &mut Index, req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    if let Some(arg) = req.strip_prefix(b"get ") {
        let k = key(arg)?;
        let e = ix.entries.get(&k).ok_or(FnError::BadRequest)?;
        let mixed = ix.mixers.iter().fold(e.value, |v, f| f(v));
        return answer(
            resp,
            format_args!(
                "key={k} value={} label={} mixed={mixed:x}",
                e.value, e.label
            ),
        );
    }
    if let Some(arg) = req.strip_prefix(b"bump ") {
        let k = key(arg)?;
        let e = ix.entries.get_mut(&k).ok_or(FnError::BadRequest)?;
        e.value += 1;
        e.small.push(1);
        return answer(resp, format_args!("key={k} value={}", e.value));
    }
    if req.trim_ascii() == b"sum" {
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for (k, e) in &ix.entries {
            h = (h ^ u64::from(*k)).wrapping_mul(0x0100_0000_01b3);
            h = (h ^ e.value).wrapping_mul(0x0100_0000_01b3);
            for b in e.label.bytes().chain(e.small.iter().map(|&s| s as u8)) {
                h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            }
        }
        let h = ix.mixers.iter().fold(h, |v, f| f(v));
        return answer(
            resp,
            format_args!("entries={} sum={h:016x}", ix.entries.len()),
        );
    }
    Err(FnError::BadRequest)
}

fjord_libos::function!(
    serve,
    init = init,
    name = "index",
    stack_size = "32K",
    heap_size = "2M",
    warmup = "fjord",
    groundhog = "fork"
);
