//! What one tenant cannot do to the others: crash the kernel with a system call's arguments,
//! keep PDs past its invocation, reach another namespace's keys, run code it wrote, or flood
//! the console. Every attack gets an error code, and the kernel and every other function go on.

use crate::jord::exec::{CallError, call};
use crate::jord::state::MAX_LIVE_PDS;
use crate::ktest;
use crate::ktests::user_programs::Program;
use crate::runtime::{self, InvokeFailure, invoke};
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use fjord_kernel::{kassert, kassert_eq};
use fjord_libos::abi::{Error, Sysno};
use fjord_libos::function::FnError;
use fjord_pd::{MAX_PDS, MapFlags, PdId, Perm, SizeClass, vaddr};

type R<T> = Result<T, String>;

fn new_pd(creator: PdId) -> R<PdId> {
    crate::jord::with(|j| j.cget(creator)).map_err(|e| format!("cget: {e:?}"))
}

fn put(pd: PdId) {
    if let Ok(p) = crate::jord::with(|j| j.cput(PdId::KERNEL, pd)) {
        p.finish();
    }
}

fn run(pd: PdId, prog: Program, args: [u64; 4]) -> Result<u64, CallError> {
    let entry = crate::ktests::user_programs::entry(prog);
    let deadline = crate::arch::time::deadline_after_ms(1000);
    call(pd, entry, args, Some(deadline))
}

/// Makes system call `no` with `args` from ring 3 in `pd`; `Ok` with its raw result when that is
/// a success or a defined error code, else what went wrong.
fn syscall(pd: PdId, no: Sysno, args: [u64; 3]) -> R<u64> {
    let r = run(
        pd,
        Program::Syscall4,
        [no as u64, args[0], args[1], args[2]],
    );
    match r {
        Ok(v) if (v as i64) >= 0 || Error::from_ret(v as i64).is_err_and(|e| e.is_some()) => Ok(v),
        other => Err(format!("{no:?}{args:x?} gave {other:?}")),
    }
}

/// The live PDs (the kernel included).
fn live_pds() -> usize {
    crate::jord::with(|j| j.live_pds())
}

ktest! {
    fn cput_of_ids_the_pd_table_does_not_hold_is_an_error() {
        let p = new_pd(PdId::KERNEL)?;
        for id in [MAX_LIVE_PDS as u64, MAX_LIVE_PDS as u64 + 1, 4000, MAX_PDS as u64 - 1] {
            for no in [Sysno::Cput, Sysno::Center, Sysno::Ccall] {
                let r = syscall(p, no, [id, 0, 0])?;
                kassert!(r == Error::NoSuchPd.to_ret() as u64, "{no:?}({id}) gave {r:#x}");
            }
        }
        put(p);
        Ok(())
    }
}

ktest! {
    fn privlib_calls_get_error_codes_for_any_argument() {
        // An mmap the memory cannot cover drains the idle instances: count without them.
        crate::module::warm::drain();
        let before = live_pds();
        let p = new_pd(PdId::KERNEL)?;
        let q = new_pd(PdId::KERNEL)?;
        crate::jord::with(|j| j.set_pd_limit(p, 4)).map_err(|e| format!("{e:?}"))?;
        let own = crate::jord::with(|j| j.mmap(p, 4096, Perm::RW, MapFlags::default()))
            .map_err(|e| format!("{e:?}"))?;
        let other = crate::jord::with(|j| j.mmap(q, 4096, Perm::RW, MapFlags::default()))
            .map_err(|e| format!("{e:?}"))?;
        let child = u64::from(new_pd(p)?.raw());
        let table = crate::jord::state::SLOTS_PER_CLASS as u64;
        let slot = |i: u64| vaddr::encode(SizeClass::MIN, i, 0).unwrap_or(0);
        let max = MAX_LIVE_PDS as u64;
        let ids = [
            0, 1, u64::from(p.raw()), u64::from(q.raw()), child, max - 1, max, max + 1,
            MAX_PDS as u64 - 1, MAX_PDS as u64, MAX_PDS as u64 + 1, u64::MAX, 1 << 32,
        ];
        let addrs = [
            0, 1, own, own + 1, own + 4096, other, slot(table - 1), slot(table), slot(table + 1),
            vaddr::REGION_START, vaddr::REGION_END - 4096, 1 << 47, u64::MAX, u64::MAX - 4095,
            crate::mm::phys_to_virt(0x10_0000),
        ];
        let lens = [
            0, 1, 4095, 4096, 4097, 1 << 30, (1 << 30) + 1, SizeClass::MAX.size(),
            SizeClass::MAX.size() + 1, i64::MAX as u64, u64::MAX, u64::MAX - 4095,
        ];
        let perms = [0, 1, 2, 3, 4, 5, 6, 7, 8, 1 << 32, u64::MAX];
        let flags = [0, 1, 2, u64::MAX];
        let mut calls = 0usize;
        let mut go = |no: Sysno, a: [u64; 3]| -> R<()> {
            calls += 1;
            syscall(p, no, a).map(drop)
        };
        for &len in &lens {
            for &prot in &perms {
                for &f in &flags {
                    go(Sysno::Mmap, [len, prot, f])?;
                }
            }
        }
        for &addr in &addrs {
            for &len in &lens {
                go(Sysno::Munmap, [addr, len, 0])?;
                for &prot in &perms {
                    go(Sysno::Mprotect, [addr, len, prot])?;
                }
            }
            for &id in &ids {
                for &prot in &perms {
                    go(Sysno::Pmove, [addr, id, prot])?;
                    go(Sysno::Pcopy, [addr, id, prot])?;
                }
            }
        }
        let entry = crate::ktests::user_programs::entry(Program::ReturnInc);
        for &id in &ids {
            go(Sysno::Center, [id, 0, 0])?;
            go(Sysno::Ccall, [id, entry, 0])?;
            go(Sysno::Cput, [id, 0, 0])?;
            go(Sysno::Cget, [id, 0, 0])?;
        }
        // Random calls, with arguments from the boundary values and from anywhere.
        let privlib = [
            Sysno::Mmap, Sysno::Munmap, Sysno::Mprotect, Sysno::Pmove, Sysno::Pcopy, Sysno::Cget,
            Sysno::Cput, Sysno::Center, Sysno::KvDelete,
        ];
        let pools: [&[u64]; 4] = [&ids, &addrs, &lens, &perms];
        // Seeded, so a failure repeats.
        let mut rng = fjord_libos::rand::XorShift(0x5eed_1234_abcd_ef01);
        for _ in 0..2000 {
            let no = privlib[(rng.next_u64() % privlib.len() as u64) as usize];
            let mut a = [0u64; 3];
            for x in &mut a {
                let pool = pools[(rng.next_u64() % 5).min(3) as usize];
                *x = match rng.next_u64() % 3 {
                    0 => rng.next_u64(),
                    _ => pool[(rng.next_u64() % pool.len() as u64) as usize],
                };
            }
            go(no, a)?;
        }
        kassert!(calls > 8_000, "{calls} calls");
        crate::jord::with(|j| j.check_consistency()).map_err(String::from)?;
        // The other PD and its memory are untouched: it still writes its VMA.
        kassert_eq!(run(q, Program::Write, [other, 5, 0, 0]), Ok(0));
        put(p);
        put(q);
        kassert_eq!(live_pds(), before);
        Ok(())
    }
}

ktest! {
    fn getrandom_writes_only_what_the_caller_may() {
        let p = new_pd(PdId::KERNEL)?;
        let q = new_pd(PdId::KERNEL)?;
        let own = crate::jord::with(|j| j.mmap(p, 4096, Perm::RW, MapFlags::default()))
            .map_err(|e| format!("{e:?}"))?;
        let other = crate::jord::with(|j| j.mmap(q, 4096, Perm::RW, MapFlags::default()))
            .map_err(|e| format!("{e:?}"))?;
        let bad = fjord_libos::abi::encode(Err(Error::BadAddress));
        kassert_eq!(syscall(p, Sysno::GetRandom, [own, 64, 0])?, 64);
        kassert_eq!(syscall(p, Sysno::GetRandom, [own, 0, 0])?, 0);
        // At most GETRANDOM_MAX a call; past the caller's memory, nothing.
        kassert_eq!(syscall(p, Sysno::GetRandom, [own, 10_000, 0])?, 4096);
        kassert_eq!(syscall(p, Sysno::GetRandom, [own + 8, 4096, 0])?, bad);
        kassert_eq!(syscall(p, Sysno::GetRandom, [other, 16, 0])?, bad);
        let kernel = crate::mm::phys_to_virt(0x10_0000);
        kassert_eq!(syscall(p, Sysno::GetRandom, [kernel, 16, 0])?, bad);
        kassert_eq!(syscall(p, Sysno::GetRandom, [u64::MAX - 7, 16, 0])?, bad);
        // The kernel's generator gives different bytes each time.
        let (mut a, mut b) = ([0u8; 32], [0u8; 32]);
        crate::random::fill(&mut a);
        crate::random::fill(&mut b);
        kassert!(a != b && a != [0; 32], "{a:x?} {b:x?}");
        kassert_eq!(run(q, Program::Write, [other, 5, 0, 0]), Ok(0));
        put(p);
        put(q);
        Ok(())
    }
}

fn needs_hostile() -> R<()> {
    kassert!(
        runtime::lookup("hostile").is_some(),
        "hostile is not deployed (boot with modules=initrd)"
    );
    Ok(())
}

/// The little-endian words of a hostile response.
fn words(r: Result<Vec<u8>, InvokeFailure>) -> R<Vec<u64>> {
    let bytes = r.map_err(|e| format!("{e}"))?;
    Ok(bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
        .collect())
}

ktest! {
    fn pds_an_invocation_creates_go_with_it_and_are_bounded() {
        needs_hostile()?;
        let limit = runtime::lookup("hostile").ok_or("hostile")?.manifest.max_pds;
        crate::module::warm::drain();
        let before = live_pds();
        for _ in 0..3 {
            let w = words(invoke("hostile", b"cget-flood"))?;
            kassert_eq!(w, [u64::from(limit), Error::LimitReached.to_ret() as u64]);
            crate::module::warm::drain();
            kassert!(live_pds() == before, "PDs outlived their invocation");
        }
        // Others still create PDs and run.
        kassert_eq!(invoke("hello", b"x").as_deref(), Ok(b"hello, x!".as_slice()));
        Ok(())
    }
}

ktest! {
    fn a_function_names_keys_only_in_its_own_namespace() {
        needs_hostile()?;
        let hotel = crate::kv::with(|kv| kv.namespace("hotel")).ok_or("no hotel namespace")?;
        crate::kv::with(|kv| kv.put(hotel, b"ktest/secret", b"alice"))
            .map_err(|e| format!("{e:?}"))?;
        let read = invoke("hostile", b"kv-get ktest/secret");
        kassert_eq!(read, Err(InvokeFailure::Function(FnError::BadRequest)));
        let put = words(invoke("hostile", b"kv-put ktest/secret=mallory"))?;
        kassert_eq!(put, [0]);
        kassert_eq!(invoke("hostile", b"kv-get ktest/secret").as_deref(), Ok(&b"mallory"[..]));
        kassert_eq!(words(invoke("hostile", b"kv-delete ktest/secret"))?, [0]);
        kassert_eq!(
            words(invoke("hostile", b"kv-delete ktest/secret"))?,
            [Error::NotFound.to_ret() as u64]
        );
        let got = crate::kv::with(|kv| kv.get(hotel, b"ktest/secret").map(|v| v.map(Vec::from)));
        kassert_eq!(got, Ok(Some(Vec::from(&b"alice"[..]))));
        crate::kv::with(|kv| kv.delete(hotel, b"ktest/secret")).map_err(|e| format!("{e:?}"))?;
        Ok(())
    }
}

ktest! {
    fn a_full_namespace_refuses_its_function_only() {
        needs_hostile()?;
        let w = words(invoke("hostile", b"kv-fill"))?;
        let refused = w.get(1).copied() == Some(Error::LimitReached.to_ret() as u64);
        kassert!(refused, "{w:?}");
        let quota = runtime::lookup("hostile").ok_or("hostile")?.manifest.kv_quota;
        kassert_eq!(w[0], quota / (8 + 1024 + 64));
        let usage = crate::kv::usage();
        let mine = usage.iter().find(|u| u.name == "hostile").ok_or("no usage")?;
        kassert!(mine.refused >= 1 && mine.bytes <= mine.quota);
        // Another namespace still takes entries.
        let hotel = crate::kv::with(|kv| kv.namespace("hotel")).ok_or("no hotel namespace")?;
        crate::kv::with(|kv| kv.put(hotel, b"ktest/after", b"ok")).map_err(|e| format!("{e:?}"))?;
        crate::kv::with(|kv| kv.delete(hotel, b"ktest/after")).map_err(|e| format!("{e:?}"))?;
        let hostile = crate::kv::with(|kv| kv.namespace("hostile")).ok_or("hostile ns")?;
        for i in 0..w[0] {
            let _ = crate::kv::with(|kv| kv.delete(hostile, &i.to_le_bytes()));
        }
        Ok(())
    }
}

ktest! {
    fn memory_a_function_can_write_never_runs() {
        needs_hostile()?;
        let denied = Error::AccessDenied.to_ret() as u64;
        kassert_eq!(words(invoke("hostile", b"wx"))?, [denied, denied, denied]);
        Ok(())
    }
}

ktest! {
    fn console_floods_stop_at_the_invocation_limit() {
        needs_hostile()?;
        let limit = runtime::lookup("hostile").ok_or("hostile")?.manifest.log_limit;
        let (before, _) = crate::syscalls::log::dropped();
        let w = words(invoke("hostile", b"log-flood"))?;
        kassert_eq!(w, [limit / 256, Error::LimitReached.to_ret() as u64]);
        let (after, _) = crate::syscalls::log::dropped();
        kassert_eq!(after.0, before.0 + 1);
        kassert_eq!(after.1, before.1 + 256);
        Ok(())
    }
}

ktest! {
    fn time_outs_and_panics_are_counted() {
        needs_hostile()?;
        use core::sync::atomic::Ordering::Relaxed;
        let (t, p) = (runtime::invoke::TIMEOUTS.load(Relaxed), runtime::invoke::PANICS.load(Relaxed));
        kassert_eq!(invoke("hostile", b"panic"), Err(InvokeFailure::Function(FnError::Panicked)));
        let r = invoke("hostile", b"loop");
        kassert!(matches!(r, Err(InvokeFailure::TimedOut { .. })), "{r:?}");
        kassert_eq!(runtime::invoke::PANICS.load(Relaxed), p + 1);
        kassert_eq!(runtime::invoke::TIMEOUTS.load(Relaxed), t + 1);
        Ok(())
    }
}
