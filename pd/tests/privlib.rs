//! PrivLib operations, one behaviour per test, through the public API.

use fjord_pd::shootdown::Target;
use fjord_pd::size_class::PAGE_SIZE;
use fjord_pd::vaddr::{self, REGION_START};
use fjord_pd::{
    CallState, Error, Fault, MapFlags, PdId, PdIsolation, Perm, PrivLib, SizeClass, TableConfig,
};

const K: PdId = PdId::KERNEL;

fn lib(iso: PdIsolation) -> PrivLib {
    PrivLib::new(&TableConfig::uniform(8, 4), 64, iso).unwrap()
}

fn anon() -> MapFlags {
    MapFlags::default()
}

#[test]
fn mmap_places_by_size_class_and_owns() {
    let mut l = lib(PdIsolation::Full);
    let a = l.cget(K).unwrap();
    let va = l.mmap(a, 10_000, Perm::RW, anon()).unwrap();
    let d = vaddr::decode(va).unwrap();
    assert_eq!(d.vma.sc.size(), 16384);
    assert_eq!(d.offset, 0);
    assert_eq!(l.pds().owned(a).collect::<Vec<_>>(), [d.vma]);
    let g = l.lookup(a, va + 9_999).unwrap();
    assert_eq!((g.base, g.len, g.perm), (va, 10_000, Perm::RW));
    assert_eq!(l.lookup(K, va), Err(Fault::NoPermission));
    l.check_consistency().unwrap();
}

#[test]
fn mmap_rejects_bad_arguments() {
    let mut l = lib(PdIsolation::Full);
    let a = l.cget(K).unwrap();
    let ghost = PdId::from_raw(63).unwrap();
    assert_eq!(l.mmap(ghost, 4096, Perm::R, anon()), Err(Error::NoSuchPd));
    assert_eq!(l.mmap(a, 0, Perm::R, anon()), Err(Error::InvalidArgs));
    assert_eq!(
        l.mmap(a, SizeClass::MAX.size() + 1, Perm::R, anon()),
        Err(Error::InvalidArgs)
    );
    let global = MapFlags {
        global: true,
        privileged: false,
    };
    let privileged = MapFlags {
        global: false,
        privileged: true,
    };
    assert_eq!(l.mmap(a, 4096, Perm::R, global), Err(Error::AccessDenied));
    assert_eq!(
        l.mmap(a, 4096, Perm::R, privileged),
        Err(Error::AccessDenied)
    );
    assert!(l.mmap(K, 4096, Perm::RX, global).is_ok());
    for _ in 0..8 {
        l.mmap(a, 1 << 32, Perm::R, anon()).unwrap();
    }
    assert_eq!(l.mmap(a, 1 << 32, Perm::R, anon()), Err(Error::NoMemory));
    l.check_consistency().unwrap();
}

#[test]
fn munmap_frees_and_shoots_down_every_holder() {
    let mut l = PrivLib::new(&TableConfig::uniform(8, 4), 64, PdIsolation::Full).unwrap();
    let owner = l.cget(K).unwrap();
    let va = l.mmap(owner, 4096, Perm::RW, anon()).unwrap();
    let mut others = Vec::new();
    for _ in 0..25 {
        let p = l.cget(K).unwrap();
        l.pcopy(owner, va, p, Perm::R).unwrap();
        others.push(p);
    }
    l.check_consistency().unwrap();
    let stranger = others[0];
    assert_eq!(
        l.munmap(stranger, va, 4096).err(),
        Some(Error::AccessDenied)
    );
    let s = l.munmap(owner, va, 4096).unwrap();
    assert!(s.covers(owner, va));
    for p in &others {
        assert!(s.covers(*p, va + 4095));
        assert_eq!(l.lookup(*p, va), Err(Fault::Unmapped));
        assert_eq!(l.pds().granted(*p).count(), 0);
    }
    assert_eq!(l.munmap(owner, va, 4096).err(), Some(Error::NotMapped));
    l.check_consistency().unwrap();
}

#[test]
fn munmap_shrinks_from_the_tail_only() {
    let mut l = lib(PdIsolation::Full);
    let a = l.cget(K).unwrap();
    let b = l.cget(K).unwrap();
    let va = l.mmap(a, 3 * PAGE_SIZE, Perm::RW, anon()).unwrap();
    l.pcopy(a, va, b, Perm::R).unwrap();
    assert_eq!(l.munmap(a, va + 100, 4096).err(), Some(Error::InvalidArgs));
    assert_eq!(l.munmap(a, va + 4096, 0).err(), Some(Error::InvalidArgs));
    // A hole in the middle is not supported.
    assert_eq!(l.munmap(a, va + 4096, 4096).err(), Some(Error::InvalidArgs));
    // Past the VMA's end but inside its class chunk.
    assert_eq!(
        l.munmap(a, va + 3 * 4096, 4096).err(),
        Some(Error::BadAddress)
    );
    let s = l.munmap(a, va + 2 * 4096, 4096).unwrap();
    assert!(s.covers(b, va + 2 * 4096) && s.covers(a, va + 2 * 4096));
    assert!(!s.covers(b, va + 4096));
    assert_eq!(l.lookup(b, va + 2 * 4096), Err(Fault::Unmapped));
    assert_eq!(l.lookup(b, va + 4096).map(|g| g.len), Ok(2 * 4096));
    l.check_consistency().unwrap();
}

#[test]
fn address_forgery_is_rejected() {
    let mut l = lib(PdIsolation::Full);
    let a = l.cget(K).unwrap();
    let va = l.mmap(a, 4096, Perm::RW, anon()).unwrap();
    let b = l.cget(K).unwrap();
    for bad in [0, 0x1000, REGION_START - 4096, 0x2000_0000_0000, u64::MAX] {
        assert_eq!(
            l.mprotect(a, bad, 4096, Perm::R).err(),
            Some(Error::BadAddress)
        );
        assert_eq!(l.pmove(a, bad, b, Perm::R).err(), Some(Error::BadAddress));
        assert_eq!(l.munmap(a, bad, 4096).err(), Some(Error::BadAddress));
        assert_eq!(l.lookup(a, bad), Err(Fault::NotJord));
    }
    // Unused size-class code, beyond capacity, unaligned, free slot.
    let bad_sc = REGION_START + (25 << 39);
    assert_eq!(
        l.pcopy(a, bad_sc, b, Perm::R).err(),
        Some(Error::BadAddress)
    );
    let beyond = vaddr::encode(SizeClass::MIN, 8, 0).unwrap();
    assert_eq!(
        l.pcopy(a, beyond, b, Perm::R).err(),
        Some(Error::BadAddress)
    );
    assert_eq!(
        l.pcopy(a, va + 8, b, Perm::R).err(),
        Some(Error::BadAddress)
    );
    let free = vaddr::encode(SizeClass::MIN, 5, 0).unwrap();
    assert_eq!(l.pcopy(a, free, b, Perm::R).err(), Some(Error::NotMapped));
    assert_eq!(l.lookup(a, free), Err(Fault::Unmapped));
}

#[test]
fn mprotect_owner_sets_any_holder_only_narrows() {
    let mut l = lib(PdIsolation::Full);
    let a = l.cget(K).unwrap();
    let b = l.cget(K).unwrap();
    let va = l.mmap(a, 4096, Perm::RW, anon()).unwrap();
    l.pcopy(a, va, b, Perm::RW).unwrap();
    assert_eq!(
        l.mprotect(b, va, 4096, Perm::RWX).err(),
        Some(Error::AccessDenied)
    );
    assert_eq!(
        l.mprotect(a, va, 8192, Perm::R).err(),
        Some(Error::InvalidArgs)
    );
    let s = l.mprotect(b, va, 100, Perm::R).unwrap();
    assert!(s.covers(b, va) && !s.covers(a, va));
    assert_eq!(l.lookup(b, va).map(|g| g.perm), Ok(Perm::R));
    assert!(l.mprotect(b, va, 4096, Perm::R).unwrap().is_empty());
    // W^X: no one asks for write and execute, and only the kernel for execute.
    assert_eq!(
        l.mprotect(a, va, 4096, Perm::RWX).err(),
        Some(Error::AccessDenied)
    );
    assert_eq!(
        l.mprotect(a, va, 4096, Perm::RX).err(),
        Some(Error::AccessDenied)
    );
    assert_eq!(
        l.mmap(a, 4096, Perm::RX, anon()).err(),
        Some(Error::AccessDenied)
    );
    assert_eq!(
        l.mmap(K, 4096, Perm::RWX, anon()).err(),
        Some(Error::AccessDenied)
    );
    // The owner widens without a shootdown, and may drop to nothing and come back.
    assert!(l.mprotect(a, va, 4096, Perm::R).unwrap().covers(a, va));
    assert!(l.mprotect(a, va, 4096, Perm::RW).unwrap().is_empty());
    assert!(l.mprotect(a, va, 4096, Perm::NONE).unwrap().covers(a, va));
    assert_eq!(l.lookup(a, va), Err(Fault::NoPermission));
    assert!(l.mprotect(a, va, 4096, Perm::R).is_ok());
    // A PD with no right on the VMA cannot mprotect it.
    let c = l.cget(K).unwrap();
    assert_eq!(
        l.mprotect(c, va, 4096, Perm::NONE).err(),
        Some(Error::AccessDenied)
    );
    l.check_consistency().unwrap();
}

#[test]
fn pmove_moves_a_subset_and_keeps_ownership() {
    let mut l = lib(PdIsolation::Full);
    let a = l.cget(K).unwrap();
    let b = l.cget(K).unwrap();
    let va = l.mmap(a, 4096, Perm::R, anon()).unwrap();
    assert_eq!(l.pmove(a, va, b, Perm::RW).err(), Some(Error::AccessDenied));
    assert_eq!(l.pmove(a, va, a, Perm::R).err(), Some(Error::InvalidArgs));
    assert_eq!(
        l.pmove(a, va, b, Perm::NONE).err(),
        Some(Error::InvalidArgs)
    );
    let ghost = PdId::from_raw(40).unwrap();
    assert_eq!(l.pmove(a, va, ghost, Perm::R).err(), Some(Error::NoSuchPd));
    let s = l.pmove(a, va, b, Perm::R).unwrap();
    assert!(s.covers(a, va));
    assert_eq!(l.lookup(a, va), Err(Fault::NoPermission));
    assert_eq!(l.lookup(b, va).map(|g| g.perm), Ok(Perm::R));
    // b cannot move it on with more rights, nor munmap it; a still owns it.
    assert_eq!(l.pmove(b, va, a, Perm::RW).err(), Some(Error::AccessDenied));
    assert_eq!(l.munmap(b, va, 4096).err(), Some(Error::AccessDenied));
    assert!(l.pmove(b, va, a, Perm::R).unwrap().covers(b, va));
    assert_eq!(l.lookup(a, va).map(|g| g.perm), Ok(Perm::R));
    l.check_consistency().unwrap();
}

#[test]
fn pcopy_unions_and_revoke_takes_back() {
    let mut l = lib(PdIsolation::Full);
    let a = l.cget(K).unwrap();
    let b = l.cget(K).unwrap();
    let va = l.mmap(K, 4096, Perm::RX, anon()).unwrap();
    l.pcopy(K, va, b, Perm::R).unwrap();
    l.pcopy(K, va, b, Perm::X).unwrap();
    assert_eq!(l.lookup(b, va).map(|g| g.perm), Ok(Perm::RX));
    assert_eq!(l.revoke(b, va, K).err(), Some(Error::AccessDenied));
    // W^X holds for what a PD is given too: the kernel makes its VMA writable and may not
    // hand write to a holder of execute.
    l.mprotect(K, va, 4096, Perm::RW).unwrap();
    assert_eq!(l.pcopy(K, va, b, Perm::W).err(), Some(Error::AccessDenied));
    assert_eq!(l.pmove(K, va, b, Perm::W).err(), Some(Error::AccessDenied));
    l.pcopy(K, va, a, Perm::W).unwrap();
    let s = l.revoke(K, va, b).unwrap();
    assert!(s.covers(b, va));
    assert_eq!(l.lookup(b, va), Err(Fault::NoPermission));
    assert!(l.revoke(K, va, b).unwrap().is_empty());
    l.check_consistency().unwrap();
}

#[test]
fn global_and_privileged_vmas() {
    let mut l = lib(PdIsolation::Full);
    let a = l.cget(K).unwrap();
    let global = MapFlags {
        global: true,
        privileged: false,
    };
    let code = l.mmap(K, 8192, Perm::RX, global).unwrap();
    assert_eq!(
        l.lookup(a, code).map(|g| (g.perm, g.global)),
        Ok((Perm::RX, true))
    );
    assert_eq!(l.pcopy(K, code, a, Perm::R).err(), Some(Error::InvalidArgs));
    assert_eq!(
        l.mprotect(a, code, 8192, Perm::R).err(),
        Some(Error::AccessDenied)
    );
    let s = l.mprotect(K, code, 8192, Perm::R).unwrap();
    assert_eq!(s.leaves().next().unwrap().target, Target::AllPds);
    assert!(s.covers(a, code + 4096));
    let privileged = MapFlags {
        global: false,
        privileged: true,
    };
    let table = l.mmap(K, 4096, Perm::RW, privileged).unwrap();
    assert_eq!(l.lookup(a, table), Err(Fault::Privileged));
    assert!(l.lookup(K, table).unwrap().privileged);
    assert_eq!(l.munmap(a, table, 4096).err(), Some(Error::AccessDenied));
    assert_eq!(
        l.mprotect(a, table, 4096, Perm::R).err(),
        Some(Error::AccessDenied)
    );
    assert_eq!(
        l.set_backing(a, table, 0x20_0000).err(),
        Some(Error::AccessDenied)
    );
    l.set_backing(K, table, 0x20_0000).unwrap();
    assert_eq!(l.lookup(K, table).unwrap().phys, Some(0x20_0000));
    assert_eq!(
        l.set_backing(K, table, 0x20_0001).err(),
        Some(Error::InvalidArgs)
    );
    assert!(l.munmap(K, code, 8192).unwrap().covers(a, code));
    l.check_consistency().unwrap();
}

#[test]
fn cput_cleans_up_and_ids_do_not_inherit() {
    let mut l = PrivLib::new(&TableConfig::uniform(8, 4), 3, PdIsolation::Full).unwrap();
    let a = l.cget(K).unwrap();
    let b = l.cget(K).unwrap();
    assert_eq!(l.cget(K), Err(Error::NoMemory));
    let mine = l.mmap(a, 4096, Perm::RW, anon()).unwrap();
    let theirs = l.mmap(b, 4096, Perm::RW, anon()).unwrap();
    l.pcopy(a, mine, b, Perm::R).unwrap();
    l.pcopy(b, theirs, a, Perm::R).unwrap();
    assert_eq!(l.cput(b, a).err(), Some(Error::AccessDenied));
    assert_eq!(l.cput(K, K).err(), Some(Error::InvalidArgs));
    l.ccall(K, a, 0).unwrap();
    assert_eq!(l.cput(K, a).err(), Some(Error::Busy));
    l.creturn(a, 0).unwrap();
    let s = l.cput(K, a).unwrap();
    assert_eq!(s.dropped(), [a]);
    assert!(s.covers(b, mine));
    assert_eq!(l.lookup(b, mine), Err(Fault::Unmapped));
    assert_eq!(l.lookup(b, theirs).map(|g| g.perm), Ok(Perm::RW));
    assert_eq!(l.cput(K, a).err(), Some(Error::NoSuchPd));
    assert_eq!(l.mmap(a, 4096, Perm::R, anon()), Err(Error::NoSuchPd));
    // The id comes back, with nothing of the old PD.
    let again = l.cget(K).unwrap();
    assert_eq!(again, a);
    assert_eq!(l.lookup(again, theirs), Err(Fault::NoPermission));
    assert_eq!(l.pds().owned(again).count(), 0);
    l.check_consistency().unwrap();
}

#[test]
fn ccall_center_cexit_follow_the_state_machine() {
    let mut l = lib(PdIsolation::Full);
    let a = l.cget(K).unwrap();
    let b = l.cget(K).unwrap();
    assert_eq!(l.ccall(a, b, 0).err(), Some(Error::Busy)); // a is not running
    l.ccall(K, a, 0).unwrap();
    assert_eq!(l.ccall(a, b, 0).err(), Some(Error::AccessDenied)); // a did not create b
    assert_eq!(l.cexit(a, 0).unwrap().to, K);
    assert_eq!(
        l.pds().call_state(a),
        Some(CallState::Suspended { return_to: K })
    );
    assert_eq!(l.center(b, a, 0).err(), Some(Error::Busy));
    assert_eq!(l.center(K, a, 1).unwrap().to, a);
    assert_eq!(l.creturn(a, 1).unwrap().to, K);
}

/// The per-invocation flow of the paper's Fig. 4, as an executor (the kernel) runs it.
#[test]
fn figure_4_invocation_flow() {
    let mut l = lib(PdIsolation::Full);
    let global = MapFlags {
        global: true,
        privileged: false,
    };
    let code = l.mmap(K, 64 * 1024, Perm::RX, global).unwrap();
    let argbuf = l.mmap(K, 2000, Perm::RW, anon()).unwrap();
    let f = l.cget(K).unwrap();
    let stack = l.mmap(K, 16 * 1024, Perm::RW, anon()).unwrap();
    l.pmove(K, stack, f, Perm::RW).unwrap();
    let s = l.pmove(K, argbuf, f, Perm::RW).unwrap();
    assert!(s.covers(K, argbuf));
    l.ccall(K, f, 3).unwrap();
    assert_eq!(l.lookup(f, code).map(|g| g.perm), Ok(Perm::RX));
    assert_eq!(l.lookup(f, argbuf).map(|g| g.perm), Ok(Perm::RW));
    let heap = l.mmap(f, 100_000, Perm::RW, anon()).unwrap();
    // The function hands the ArgBuf back itself, then returns.
    l.pmove(f, argbuf, K, Perm::RW).unwrap();
    l.creturn(f, 3).unwrap();
    let s = l.cput(K, f).unwrap();
    assert!(s.covers(f, heap) && s.covers(f, stack));
    assert_eq!(l.lookup(K, argbuf).map(|g| g.perm), Ok(Perm::RW));
    assert_eq!(l.lookup(K, heap), Err(Fault::Unmapped));
    // The kernel still owns the stack VMA (it created it), now with no holder.
    assert_eq!(l.lookup(K, stack), Err(Fault::NoPermission));
    l.check_consistency().unwrap();
}

#[test]
fn no_isolation_mode_bypasses_checks_on_the_same_paths() {
    let mut l = lib(PdIsolation::None);
    let a = l.cget(K).unwrap();
    let b = l.cget(K).unwrap();
    let va = l.mmap(a, 4096, Perm::R, anon()).unwrap();
    // Every PD may touch every VMA.
    assert_eq!(l.lookup(b, va).map(|g| g.perm), Ok(Perm::RWX));
    // Rights are not checked and nothing is revoked...
    assert!(l.pmove(b, va, a, Perm::RWX).unwrap().is_empty());
    assert!(l.mprotect(b, va, 4096, Perm::NONE).unwrap().is_empty());
    // ...but arguments still are.
    assert_eq!(
        l.pmove(b, va + 1, a, Perm::R).err(),
        Some(Error::BadAddress)
    );
    assert_eq!(
        l.mprotect(b, va, 3 * 4096, Perm::R).err(),
        Some(Error::InvalidArgs)
    );
    // Freeing memory still removes its translations everywhere.
    let s = l.munmap(b, va, 4096).unwrap();
    assert_eq!(s.leaves().next().unwrap().target, Target::AllPds);
    assert_eq!(l.lookup(a, va), Err(Fault::Unmapped));
    let privileged = MapFlags {
        global: false,
        privileged: true,
    };
    let p = l.mmap(K, 4096, Perm::RW, privileged).unwrap();
    assert_eq!(l.lookup(a, p), Err(Fault::Privileged));
    l.check_consistency().unwrap();
}

#[test]
fn moved_argbufs_stay_listed_until_compaction_and_cput_skips_them() {
    // Granted lists keep a VMA a PD handed on with `pmove` (so a buffer that comes back costs
    // one search); the lists stay bounded, and destroying such a PD leaves the VMA alone.
    let mut l = PrivLib::new(&TableConfig::uniform(8, 128), 64, PdIsolation::Full).unwrap();
    let (a, b) = (l.cget(K).unwrap(), l.cget(K).unwrap());
    let buf = l.mmap(a, 4096, Perm::RW, anon()).unwrap();
    for _ in 0..100 {
        l.pmove(a, buf, b, Perm::RW).unwrap();
        l.pmove(b, buf, a, Perm::RW).unwrap();
    }
    assert_eq!(
        l.pds().granted(b).count(),
        1,
        "a buffer moving back and forth is listed once"
    );
    l.check_consistency().unwrap();
    // B sees many different buffers go through it: its list is compacted as it grows.
    let mut bufs = Vec::new();
    for _ in 0..100 {
        let v = l.mmap(a, 4096, Perm::RW, anon()).unwrap();
        l.pmove(a, v, b, Perm::RW).unwrap();
        l.pmove(b, v, a, Perm::RW).unwrap();
        bufs.push(v);
        assert!(l.pds().granted(b).count() <= 34, "B's list is compacted");
    }
    l.check_consistency().unwrap();
    // B is destroyed while its list still names buffers A holds: A keeps them.
    l.pmove(a, buf, b, Perm::R).unwrap();
    l.pmove(b, buf, a, Perm::R).unwrap();
    let s = l.cput(K, b).unwrap();
    assert!(!s.covers(a, buf));
    for v in bufs.iter().chain([&buf]) {
        assert!(l.lookup(a, *v).is_ok());
    }
    l.check_consistency().unwrap();
}

/// A function instance `f` with a stack and a heap (its layout `keep`, as `scrub_with` takes
/// it) and another PD.
fn instance() -> (PrivLib, PdId, PdId, [(u64, u64, Perm); 2]) {
    let mut l = PrivLib::new(&TableConfig::uniform(8, 16), 64, PdIsolation::Full).unwrap();
    let (f, other) = (l.cget(K).unwrap(), l.cget(K).unwrap());
    let stack = l.mmap(f, 16384, Perm::RW, anon()).unwrap();
    let heap = l.mmap(f, 8192, Perm::RW, anon()).unwrap();
    (
        l,
        f,
        other,
        [(stack, 16384, Perm::RW), (heap, 8192, Perm::RW)],
    )
}

#[test]
fn scrub_keeps_the_instance_and_drops_everything_else() {
    // A function instance reused for the next request: its stack and heap stay, every other
    // VMA it made goes, and every right it was given is dropped.
    let (mut l, f, other, keep) = instance();
    let [(stack, ..), (heap, ..)] = keep;
    // During the request: a buffer of its own, a buffer lent by another PD, an ArgBuf that
    // came and went, and a right it still holds on the kernel's buffer.
    let own = l.mmap(f, 4096, Perm::RW, anon()).unwrap();
    let lent = l.mmap(other, 4096, Perm::RW, anon()).unwrap();
    l.pcopy(other, lent, f, Perm::R).unwrap();
    let argbuf = l.mmap(K, 4096, Perm::RW, anon()).unwrap();
    l.pmove(K, argbuf, f, Perm::RW).unwrap();
    let kept_buf = l.mmap(K, 4096, Perm::RW, anon()).unwrap();
    l.pcopy(K, kept_buf, f, Perm::R).unwrap();
    l.pmove(f, argbuf, K, Perm::RW).unwrap();
    let s = l.scrub_with(K, f, &keep, |_, _, _| {}).unwrap();
    assert!(s.covers(f, own) && s.covers(f, lent) && s.covers(f, kept_buf));
    assert!(!s.covers(f, stack) && !s.covers(f, heap));
    assert!(s.dropped().is_empty(), "the PD lives on");
    assert_eq!(l.lookup(f, own), Err(Fault::Unmapped));
    assert_eq!(l.lookup(f, lent), Err(Fault::NoPermission));
    assert_eq!(l.lookup(f, kept_buf), Err(Fault::NoPermission));
    assert_eq!(l.lookup(other, lent).map(|g| g.perm), Ok(Perm::RW));
    assert_eq!(l.lookup(f, stack).map(|g| g.perm), Ok(Perm::RW));
    assert_eq!(l.lookup(f, heap + 8191).map(|g| g.perm), Ok(Perm::RW));
    assert_eq!(l.pds().owned(f).count(), 2);
    assert_eq!(l.pds().granted(f).count(), 2);
    assert_eq!(l.pds().call_state(f), Some(CallState::Idle));
    l.check_consistency().unwrap();
    // Scrubbing a clean instance changes nothing.
    let s = l.scrub_with(K, f, &keep, |_, _, _| {}).unwrap();
    assert!(s.is_empty());
    l.check_consistency().unwrap();
}

#[test]
fn owned_alone_lists_what_a_scrub_can_keep() {
    // What a snapshot keeps of an instance: the VMAs it owns and alone holds, with its right.
    let mut l = PrivLib::new(&TableConfig::uniform(8, 16), 64, PdIsolation::Full).unwrap();
    let (f, other) = (l.cget(K).unwrap(), l.cget(K).unwrap());
    let heap = l.mmap(f, 8192, Perm::RW, anon()).unwrap();
    let table = l.mmap(f, 4096, Perm::R, anon()).unwrap();
    let shared = l.mmap(f, 4096, Perm::RW, anon()).unwrap();
    l.pcopy(f, shared, other, Perm::R).unwrap();
    let lent = l.mmap(other, 4096, Perm::RW, anon()).unwrap();
    l.pcopy(other, lent, f, Perm::R).unwrap();
    let mut own = l.owned_alone(f);
    own.sort_unstable_by_key(|v| v.0);
    let mut expect = vec![(heap, 8192, Perm::RW), (table, 4096, Perm::R)];
    expect.sort_unstable_by_key(|v| v.0);
    assert_eq!(own, expect);
    // All of them kept at once; the shared one and the lent right go.
    l.revoke(f, shared, other).unwrap();
    l.munmap(f, shared, 4096).unwrap();
    let s = l.scrub_with(K, f, &expect, |_, _, _| {}).unwrap();
    assert!(s.covers(f, lent));
    assert_eq!(l.lookup(f, table).map(|g| g.perm), Ok(Perm::R));
    l.check_consistency().unwrap();
}

#[test]
fn a_scrub_keeps_any_number_of_vmas_and_follows_changes_to_each() {
    // An instance whose `init` mapped many VMAs keeps them all; a change to the last one
    // counts as one to the first.
    let mut l = PrivLib::new(&TableConfig::uniform(8, 64), 64, PdIsolation::Full).unwrap();
    let f = l.cget(K).unwrap();
    let keep: Vec<_> = (0..20)
        .map(|_| (l.mmap(f, 4096, Perm::RW, anon()).unwrap(), 4096, Perm::RW))
        .collect();
    let own = l.mmap(f, 4096, Perm::RW, anon()).unwrap();
    let s = l.scrub_with(K, f, &keep, |_, _, _| {}).unwrap();
    assert!(s.covers(f, own));
    for &(base, ..) in &keep {
        assert_eq!(l.lookup(f, base).map(|g| g.perm), Ok(Perm::RW));
    }
    let at = l.changes(f).unwrap();
    assert!(l.scrubbed_since(K, f, at, keep.len()));
    let (last, ..) = keep[keep.len() - 1];
    l.mprotect(f, last, 4096, Perm::R).unwrap();
    assert!(!l.scrubbed_since(K, f, at, keep.len()));
    // A refused scrub (a kept VMA narrowed) leaves the record of the last one as it was.
    assert_eq!(l.scrub_with(K, f, &keep, |_, _, _| {}), Err(Error::Busy));
    l.mprotect(f, last, 4096, Perm::RW).unwrap();
    let at = l.changes(f).unwrap();
    l.mprotect(f, keep[0].0, 4096, Perm::R).unwrap();
    assert_ne!(
        l.changes(f),
        Some(at),
        "the first kept VMA is still followed"
    );
    l.check_consistency().unwrap();
}

#[test]
fn scrub_refuses_an_instance_that_gave_its_memory_away() {
    let mut l = PrivLib::new(&TableConfig::uniform(8, 16), 64, PdIsolation::Full).unwrap();
    let (f, other) = (l.cget(K).unwrap(), l.cget(K).unwrap());
    let heap = l.mmap(f, 8192, Perm::RW, anon()).unwrap();
    let keep = [(heap, 8192, Perm::RW)];
    let own = l.mmap(f, 4096, Perm::RW, anon()).unwrap();
    // Another PD was given a right on the heap: the next request's data would leak to it.
    l.pcopy(f, heap, other, Perm::R).unwrap();
    assert_eq!(
        l.scrub_with(K, f, &keep, |_, _, _| {}).err(),
        Some(Error::Busy)
    );
    assert!(l.lookup(f, own).is_ok(), "nothing changed");
    l.revoke(f, heap, other).unwrap();
    // Narrowed, or shrunk: not the instance it was.
    l.mprotect(f, heap, 8192, Perm::R).unwrap();
    assert_eq!(
        l.scrub_with(K, f, &keep, |_, _, _| {}).err(),
        Some(Error::Busy)
    );
    l.mprotect(f, heap, 8192, Perm::RW).unwrap();
    l.munmap(f, heap + 4096, 4096).unwrap();
    assert_eq!(
        l.scrub_with(K, f, &keep, |_, _, _| {}).err(),
        Some(Error::Busy)
    );
    // Its creator only, not while it runs, not with children of its own.
    let g = l.cget(K).unwrap();
    let small = l.mmap(g, 4096, Perm::RW, anon()).unwrap();
    let keep = [(small, 4096, Perm::RW)];
    assert_eq!(
        l.scrub_with(f, g, &keep, |_, _, _| {}).err(),
        Some(Error::AccessDenied)
    );
    l.ccall(K, g, 0).unwrap();
    assert_eq!(
        l.scrub_with(K, g, &keep, |_, _, _| {}).err(),
        Some(Error::Busy)
    );
    l.creturn(g, 0).unwrap();
    let child = l.cget(g).unwrap();
    assert_eq!(
        l.scrub_with(K, g, &keep, |_, _, _| {}).err(),
        Some(Error::Busy)
    );
    l.cput(g, child).unwrap();
    assert!(l.scrub_with(K, g, &keep, |_, _, _| {}).is_ok());
    l.check_consistency().unwrap();
}

#[test]
fn reinstate_undoes_what_an_owner_did_to_a_kept_vma() {
    use fjord_pd::Reinstated;
    let mut l = PrivLib::new(&TableConfig::uniform(8, 16), 64, PdIsolation::Full).unwrap();
    let (f, other) = (l.cget(K).unwrap(), l.cget(K).unwrap());
    let heap = l.mmap(f, 8192, Perm::RW, anon()).unwrap();
    let kept = (heap, 8192, Perm::RW);
    assert_eq!(l.reinstate(f, kept).unwrap().0, Reinstated::Intact);
    // Narrowed: the right comes back, and the narrowing's leaves are already gone.
    l.mprotect(f, heap, 8192, Perm::R).unwrap();
    let (r, s) = l.reinstate(f, kept).unwrap();
    assert_eq!(r, Reinstated::RightRestored);
    assert!(s.is_empty(), "widening removes no leaf");
    assert_eq!(l.lookup(f, heap).map(|g| g.perm), Ok(Perm::RW));
    // Shrunk: freed and made again at the same base and length.
    l.munmap(f, heap + 4096, 4096).unwrap();
    let (r, s) = l.reinstate(f, kept).unwrap();
    assert_eq!(r, Reinstated::Remade);
    assert!(s.covers(f, heap));
    let g = l.lookup(f, heap + 8191).unwrap();
    assert_eq!((g.base, g.len, g.perm), (heap, 8192, Perm::RW));
    l.check_consistency().unwrap();
    // Freed: made again in its slot.
    l.munmap(f, heap, 8192).unwrap();
    assert_eq!(l.reinstate(f, kept).unwrap().0, Reinstated::Remade);
    assert_eq!(l.pds().owned(f).count(), 1);
    assert!(l.scrub_with(K, f, &[kept], |_, _, _| {}).is_ok());
    l.check_consistency().unwrap();
    // Freed, and its slot taken by another PD's VMA: not this instance's to undo.
    l.munmap(f, heap, 8192).unwrap();
    let theirs = l.mmap(other, 8192, Perm::RW, anon()).unwrap();
    assert_eq!(theirs, heap, "the freed slot is reused first");
    assert_eq!(l.reinstate(f, kept).err(), Some(Error::Busy));
    assert_eq!(l.lookup(other, heap).map(|g| g.perm), Ok(Perm::RW));
    // Shared with another PD: Busy, nothing changed.
    let mine = l.mmap(f, 4096, Perm::RW, anon()).unwrap();
    l.pcopy(f, mine, other, Perm::R).unwrap();
    l.mprotect(f, mine, 4096, Perm::R).unwrap();
    assert_eq!(
        l.reinstate(f, (mine, 4096, Perm::RW)).err(),
        Some(Error::Busy)
    );
    assert_eq!(l.lookup(f, mine).map(|g| g.perm), Ok(Perm::R));
    assert_eq!(
        l.reinstate(f, (mine, 4096, Perm::RWX)).err(),
        Some(Error::InvalidArgs)
    );
    l.check_consistency().unwrap();
}

#[test]
fn scrubbed_since_follows_every_change_to_what_an_instance_owns_or_holds() {
    let (mut l, f, other, keep) = instance();
    let [(stack, ..), (heap, ..)] = keep;
    l.scrub_with(K, f, &keep, |_, _, _| {}).unwrap();
    let at = l.changes(f).unwrap();
    let clean = |l: &PrivLib| l.scrubbed_since(K, f, at, keep.len());
    assert!(clean(&l));
    assert!(!l.scrubbed_since(K, f, at, 1), "another layout");
    assert!(!l.scrubbed_since(K, f, at + 1, 2), "another count");
    // What reads the tables, calls and a request's ArgBuf moved in and back out change
    // nothing a scrub would undo.
    let _ = l.lookup(f, heap);
    let _ = l.owned_alone(f);
    let argbuf = l.mmap(K, 4096, Perm::RW, anon()).unwrap();
    l.pmove(K, argbuf, f, Perm::RW).unwrap();
    assert!(!clean(&l), "it holds the ArgBuf");
    l.ccall(K, f, 0).unwrap();
    l.creturn(f, 0).unwrap();
    l.pmove(f, argbuf, K, Perm::RW).unwrap();
    assert!(clean(&l));
    l.munmap(K, argbuf, 4096).unwrap();
    assert!(clean(&l));
    // Other PDs' changes to their own VMAs do not count.
    let theirs = l.mmap(other, 4096, Perm::RW, anon()).unwrap();
    l.munmap(other, theirs, 4096).unwrap();
    assert!(clean(&l));
    // Nor a VMA of its own made, lent out and back, and freed (a nested call's ArgBuf).
    let own = l.mmap(f, 4096, Perm::RW, anon()).unwrap();
    assert!(!clean(&l), "it owns the ArgBuf");
    l.pmove(f, own, other, Perm::RW).unwrap();
    l.pmove(other, own, f, Perm::RW).unwrap();
    l.munmap(f, own, 4096).unwrap();
    assert!(clean(&l));
    // A scrub records its layout: it moves the counter.
    assert!(l.scrub_with(K, f, &keep, |_, _, _| {}).unwrap().is_empty());
    assert!(!clean(&l));
    let at = l.changes(f).unwrap();
    let clean = |l: &PrivLib| l.scrubbed_since(K, f, at, keep.len());
    assert!(clean(&l));
    // Running: a scrub would refuse it.
    l.ccall(K, f, 0).unwrap();
    assert!(!clean(&l));
    l.creturn(f, 0).unwrap();
    // Each change below leaves the instance needing a scrub; the scrub (with the kept VMAs
    // put back where it refuses) makes it clean again at a new count.
    type Change = fn(&mut PrivLib, PdId, PdId, u64, u64);
    let changes: [(&str, Change); 12] = [
        ("mmap", |l, f, _, _, _| {
            l.mmap(f, 4096, Perm::RW, anon()).unwrap();
        }),
        ("mmap with no right", |l, f, _, _, _| {
            l.mmap(f, 4096, Perm::NONE, anon()).unwrap();
        }),
        ("munmap and mmap again", |l, f, _, _, heap| {
            l.munmap(f, heap, 8192).unwrap();
            l.mmap(f, 8192, Perm::RW, anon()).unwrap();
        }),
        ("shrink", |l, f, _, _, heap| {
            l.munmap(f, heap + 4096, 4096).unwrap();
        }),
        ("mprotect", |l, f, _, _, heap| {
            l.mprotect(f, heap, 8192, Perm::R).unwrap();
        }),
        ("mprotect there and back", |l, f, _, _, heap| {
            l.mprotect(f, heap, 8192, Perm::R).unwrap();
            l.mprotect(f, heap, 8192, Perm::RW).unwrap();
        }),
        ("pcopy of its own", |l, f, o, _, heap| {
            l.pcopy(f, heap, o, Perm::R).unwrap();
        }),
        ("pcopy and revoke of its own", |l, f, o, _, heap| {
            l.pcopy(f, heap, o, Perm::R).unwrap();
            l.revoke(f, heap, o).unwrap();
        }),
        ("pmove of its own there and back", |l, f, o, _, heap| {
            l.pmove(f, heap, o, Perm::RW).unwrap();
            l.pmove(o, heap, f, Perm::RW).unwrap();
        }),
        ("a right given", |l, f, o, _, _| {
            let v = l.mmap(o, 4096, Perm::RW, anon()).unwrap();
            l.pcopy(o, v, f, Perm::R).unwrap();
        }),
        ("a child", |l, f, _, _, _| {
            l.cget(f).unwrap();
        }),
        ("a child made and destroyed", |l, f, _, _, _| {
            let c = l.cget(f).unwrap();
            l.cput(f, c).unwrap();
        }),
    ];
    for (what, change) in changes {
        let at = l.changes(f).unwrap();
        change(&mut l, f, other, stack, heap);
        assert!(!l.scrubbed_since(K, f, at, keep.len()), "{what}");
        // Back to the layout: children destroyed, the kept VMAs put back, then a scrub.
        for c in l.pds().children(f).to_vec() {
            l.cput(K, c).unwrap();
        }
        for &k in &keep {
            let _ = l.revoke(f, k.0, other);
            l.reinstate(f, k).unwrap();
        }
        l.scrub_with(K, f, &keep, |_, _, _| {}).unwrap();
        let at = l.changes(f).unwrap();
        assert!(l.scrubbed_since(K, f, at, keep.len()), "{what}: scrubbed");
        l.check_consistency().unwrap();
    }
}

#[test]
fn mmap_area_at_takes_that_slot_or_says_why_not() {
    let mut l = lib(PdIsolation::Full);
    let a = l.cget(K).unwrap();
    let b = l.cget(K).unwrap();
    let va = l.mmap_area(a, 40_000, Perm::RW).unwrap();
    // The slot is a's: b cannot have it, at its base or inside it.
    assert_eq!(l.mmap_area_at(b, va, 40_000, Perm::RW), Err(Error::Busy));
    assert_eq!(
        l.mmap_area_at(b, va + 4096, 40_000, Perm::RW),
        Err(Error::BadAddress)
    );
    l.munmap(a, va, 40_000).unwrap();
    // Free again: b gets that very slot, owns it, and may use it.
    assert_eq!(l.mmap_area_at(b, va, 40_000, Perm::RW), Ok(va));
    let g = l.lookup(b, va + 39_999).unwrap();
    assert_eq!((g.base, g.len, g.perm), (va, 40_000, Perm::RW));
    assert_eq!(l.lookup(a, va), Err(Fault::NoPermission));
    // A length its class cannot hold, and an address outside every class.
    l.munmap(b, va, 40_000).unwrap();
    let class = vaddr::decode(va).unwrap().vma.sc.size();
    assert_eq!(
        l.mmap_area_at(b, va, class + 1, Perm::RW),
        Err(Error::InvalidArgs)
    );
    assert_eq!(
        l.mmap_area_at(b, REGION_START - 4096, 4096, Perm::RW),
        Err(Error::BadAddress)
    );
    l.check_consistency().unwrap();
}
