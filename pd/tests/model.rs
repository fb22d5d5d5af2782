//! Property tests: random sequences of PrivLib operations against a simple reference model.
//!
//! After every step: the real result (value or exact error) equals the model's prediction; the
//! tables pass `check_consistency` (no slot both free and allocated, free lists without
//! duplicates, bookkeeping in step); the VMAs, owners, lengths and holders equal the model's;
//! every right that the step took away (freed, shrunk, narrowed, moved, revoked, or held by a
//! destroyed PD) is covered by the returned shootdown set; a new PD id was not live before.

use std::collections::{BTreeMap, BTreeSet};

use fjord_pd::size_class::page_round_up;
use fjord_pd::vaddr;
use fjord_pd::{
    CallState, Error, Fault, MapFlags, PdId, PdIsolation, Perm, PrivLib, Shootdown, SizeClass,
    TableConfig,
};
use proptest::prelude::*;

const K: PdId = PdId::KERNEL;
const MAX_PDS: usize = 26;
const OVERFLOW_LISTS: u32 = 1;

fn config() -> TableConfig {
    let mut c = TableConfig::uniform(1, OVERFLOW_LISTS);
    c.capacity[0] = 6;
    c.capacity[1] = 3;
    c.capacity[2] = 2;
    c
}

#[derive(Clone, Debug)]
struct MVma {
    owner: PdId,
    len: u64,
    perms: BTreeMap<PdId, Perm>,
}

#[derive(Clone, Debug)]
struct MPd {
    parent: PdId,
    running: bool,
}

#[derive(Clone, Debug)]
struct Model {
    pds: BTreeMap<PdId, MPd>,
    vmas: BTreeMap<u64, MVma>,
    cap: [u32; SizeClass::COUNT],
}

#[derive(Clone, Debug)]
enum Op {
    Cget {
        caller: u8,
    },
    Cput {
        caller: u8,
        target: u8,
    },
    Mmap {
        caller: u8,
        len: u32,
        prot: u8,
    },
    Munmap {
        caller: u8,
        vma: u8,
        skip_pages: u8,
        len_pages: u8,
        misalign: bool,
    },
    Mprotect {
        caller: u8,
        vma: u8,
        prot: u8,
        extra_len: bool,
    },
    Pmove {
        caller: u8,
        vma: u8,
        target: u8,
        prot: u8,
    },
    Pcopy {
        caller: u8,
        vma: u8,
        target: u8,
        prot: u8,
    },
    Revoke {
        caller: u8,
        vma: u8,
        target: u8,
    },
    /// `scrub_with` of `target`, keeping the VMA `vma` (with the model's length and the
    /// target's permission, or a wrong one with `tamper`).
    Scrub {
        caller: u8,
        target: u8,
        vma: u8,
        tamper: bool,
    },
    ShareAll {
        vma: u8,
    },
    Ccall {
        target: u8,
    },
    Creturn {
        target: u8,
    },
    Lookup {
        pd: u8,
        vma: u8,
        off: u32,
    },
    Forged {
        pd: u8,
        addr: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let s = any::<u8>;
    prop_oneof![
        3 => s().prop_map(|caller| Op::Cget { caller }),
        1 => (s(), s()).prop_map(|(caller, target)| Op::Cput { caller, target }),
        4 => (s(), 0u32..40_000, 0u8..8).prop_map(|(caller, len, prot)| Op::Mmap { caller, len, prot }),
        2 => (s(), s(), 0u8..4, 0u8..5, proptest::bool::weighted(0.1)).prop_map(
            |(caller, vma, skip_pages, len_pages, misalign)| Op::Munmap { caller, vma, skip_pages, len_pages, misalign }),
        2 => (s(), s(), 0u8..8, proptest::bool::weighted(0.1)).prop_map(
            |(caller, vma, prot, extra_len)| Op::Mprotect { caller, vma, prot, extra_len }),
        3 => (s(), s(), s(), 0u8..8).prop_map(|(caller, vma, target, prot)| Op::Pmove { caller, vma, target, prot }),
        3 => (s(), s(), s(), 0u8..8).prop_map(|(caller, vma, target, prot)| Op::Pcopy { caller, vma, target, prot }),
        1 => (s(), s(), s()).prop_map(|(caller, vma, target)| Op::Revoke { caller, vma, target }),
        1 => (s(), s(), s(), proptest::bool::weighted(0.2)).prop_map(
            |(caller, target, vma, tamper)| Op::Scrub { caller, target, vma, tamper }),
        1 => s().prop_map(|vma| Op::ShareAll { vma }),
        1 => s().prop_map(|target| Op::Ccall { target }),
        1 => s().prop_map(|target| Op::Creturn { target }),
        4 => (s(), s(), any::<u32>()).prop_map(|(pd, vma, off)| Op::Lookup { pd, vma, off }),
        1 => (s(), any::<u64>()).prop_map(|(pd, addr)| Op::Forged { pd, addr }),
    ]
}

impl Model {
    fn new() -> Model {
        let mut pds = BTreeMap::new();
        pds.insert(
            K,
            MPd {
                parent: K,
                running: false,
            },
        );
        Model {
            pds,
            vmas: BTreeMap::new(),
            cap: config().capacity,
        }
    }

    /// A PD id: mostly a live one, sometimes any id (forged or dead).
    fn pd(&self, sel: u8) -> PdId {
        if sel & 0x80 != 0 || self.pds.is_empty() {
            PdId::from_raw((sel & 0x7f) as u64 % (MAX_PDS as u64 + 4)).unwrap()
        } else {
            *self.pds.keys().nth(sel as usize % self.pds.len()).unwrap()
        }
    }

    /// A VMA base: mostly an allocated one, sometimes a slot that may be free.
    fn vma(&self, sel: u8) -> u64 {
        if sel & 0x80 != 0 || self.vmas.is_empty() {
            let sc = SizeClass::from_code(sel % 4).unwrap();
            vaddr::encode(sc, ((sel >> 2) % 8) as u64, 0).unwrap()
        } else {
            *self
                .vmas
                .keys()
                .nth(sel as usize % self.vmas.len())
                .unwrap()
        }
    }

    fn live(&self, pd: PdId) -> Result<(), Error> {
        if self.pds.contains_key(&pd) {
            Ok(())
        } else {
            Err(Error::NoSuchPd)
        }
    }

    /// `(base, offset)` of an address naming a slot within capacity, as the table decodes it.
    fn slot(&self, addr: u64) -> Result<(u64, u64), Error> {
        let d = vaddr::decode(addr)?;
        if d.vma.index >= self.cap[d.vma.sc.index()] {
            return Err(Error::BadAddress);
        }
        Ok((d.vma.base(), d.offset))
    }

    fn resolve(&self, caller: PdId, addr: u64) -> Result<u64, Error> {
        self.live(caller)?;
        let (base, off) = self.slot(addr)?;
        if off != 0 {
            return Err(Error::BadAddress);
        }
        if !self.vmas.contains_key(&base) {
            return Err(Error::NotMapped);
        }
        Ok(base)
    }

    fn lists_in_use(&self) -> usize {
        self.vmas.values().filter(|v| v.perms.len() > 20).count()
    }

    /// Would adding a new holder to `base` need an overflow list that is not available?
    fn no_room_for_new_holder(&self, base: u64, pd: PdId) -> bool {
        let v = &self.vmas[&base];
        !v.perms.contains_key(&pd)
            && v.perms.len() == 20
            && self.lists_in_use() >= OVERFLOW_LISTS as usize
    }

    fn mmap_class(&self, len: u64) -> Result<SizeClass, Error> {
        let first = SizeClass::for_len(len).ok_or(Error::InvalidArgs)?;
        SizeClass::all()
            .filter(|sc| *sc >= first)
            .find(|sc| {
                let used = self
                    .vmas
                    .keys()
                    .filter(|b| vaddr::decode(**b).unwrap().vma.sc == *sc)
                    .count();
                (used as u32) < self.cap[sc.index()]
            })
            .ok_or(Error::NoMemory)
    }
}

/// Every (PD, address range) whose right shrank between two model states.
fn revoked(before: &Model, after: &Model) -> Vec<(PdId, u64, u64)> {
    let mut out = Vec::new();
    for (base, v) in &before.vmas {
        let old_end = base + page_round_up(v.len);
        for (pd, perm) in &v.perms {
            match after.vmas.get(base) {
                None => out.push((*pd, *base, old_end)),
                Some(a) => {
                    let new_end = base + page_round_up(a.len);
                    let np = a.perms.get(pd).copied().unwrap_or(Perm::NONE);
                    if perm.narrowed_by(np) || !after.pds.contains_key(pd) {
                        out.push((*pd, *base, old_end));
                    } else if new_end < old_end {
                        out.push((*pd, new_end, old_end));
                    }
                }
            }
        }
    }
    out
}

fn check_covered(s: &Shootdown, before: &Model, after: &Model) -> Result<(), TestCaseError> {
    for (pd, start, end) in revoked(before, after) {
        prop_assert!(
            s.covers(pd, start),
            "{pd:?} at {start:#x} not shot down: {s:?}"
        );
        prop_assert!(
            s.covers(pd, end - 1),
            "{pd:?} at {:#x} not shot down: {s:?}",
            end - 1
        );
    }
    Ok(())
}

fn check_same(lib: &PrivLib, m: &Model) -> Result<(), TestCaseError> {
    if let Err(e) = lib.check_consistency() {
        return Err(TestCaseError::fail(e));
    }
    prop_assert_eq!(lib.vmas().allocated().count(), m.vmas.len());
    for (base, v) in &m.vmas {
        let id = vaddr::decode(*base).unwrap().vma;
        let vte = lib.vmas().vte(id).unwrap();
        prop_assert!(vte.is_valid());
        prop_assert_eq!(vte.owner(), v.owner);
        prop_assert_eq!(vte.len(), v.len);
        let holders: BTreeMap<PdId, Perm> =
            lib.vmas().holders(id).map(|h| (h.pd, h.perm)).collect();
        prop_assert_eq!(&holders, &v.perms);
    }
    let live: BTreeSet<PdId> = lib.pds().live().collect();
    let mlive: BTreeSet<PdId> = m.pds.keys().copied().collect();
    prop_assert_eq!(live, mlive);
    for (pd, p) in &m.pds {
        prop_assert_eq!(lib.pds().parent(*pd), Some(p.parent));
        let owned: BTreeSet<u64> = lib.pds().owned(*pd).map(|id| id.base()).collect();
        let mowned: BTreeSet<u64> = m
            .vmas
            .iter()
            .filter(|(_, v)| v.owner == *pd)
            .map(|(b, _)| *b)
            .collect();
        prop_assert_eq!(owned, mowned);
    }
    Ok(())
}

fn expect<T: std::fmt::Debug>(
    real: &Result<T, Error>,
    want: Result<(), Error>,
) -> Result<(), TestCaseError> {
    match (real, want) {
        (Ok(_), Ok(())) => Ok(()),
        (Err(e), Err(w)) if *e == w => Ok(()),
        _ => Err(TestCaseError::fail(format!(
            "got {real:?}, model says {want:?}"
        ))),
    }
}

/// The W^X rule: write and execute never together, execute only for the kernel.
fn wx(caller: PdId, prot: Perm) -> Result<(), Error> {
    let both = prot.contains(Perm::W) && prot.contains(Perm::X);
    if both || (caller != K && prot.contains(Perm::X)) {
        Err(Error::AccessDenied)
    } else {
        Ok(())
    }
}

fn step(lib: &mut PrivLib, m: &mut Model, op: &Op) -> Result<(), TestCaseError> {
    let before = m.clone();
    let mut shot = Shootdown::new();
    match *op {
        Op::Cget { caller } => {
            let c = m.pd(caller);
            let want = m
                .live(c)
                .and_then(|_| (m.pds.len() < MAX_PDS).then_some(()).ok_or(Error::NoMemory));
            let r = lib.cget(c);
            expect(&r, want)?;
            if let Ok(pd) = r {
                prop_assert!(!m.pds.contains_key(&pd), "PD id reused while live");
                m.pds.insert(
                    pd,
                    MPd {
                        parent: c,
                        running: false,
                    },
                );
            }
        }
        Op::Cput { caller, target } => {
            let (c, t) = (m.pd(caller), m.pd(target));
            let want = m.live(c).and_then(|_| m.live(t)).and_then(|_| {
                if t == K {
                    Err(Error::InvalidArgs)
                } else if c != K && m.pds[&t].parent != c {
                    Err(Error::AccessDenied)
                } else if m.pds[&t].running {
                    Err(Error::Busy)
                } else {
                    Ok(())
                }
            });
            let r = lib.cput(c, t);
            expect(&r, want)?;
            if let Ok(s) = r {
                prop_assert_eq!(s.dropped(), [t]);
                m.vmas.retain(|_, v| v.owner != t);
                for v in m.vmas.values_mut() {
                    v.perms.remove(&t);
                }
                m.pds.remove(&t);
                for p in m.pds.values_mut() {
                    if p.parent == t {
                        p.parent = K;
                    }
                }
                shot = s;
            }
        }
        Op::Mmap { caller, len, prot } => {
            let c = m.pd(caller);
            let len = len as u64;
            let prot = Perm::from_raw(prot as u64).unwrap();
            let want = m
                .live(c)
                .and_then(|_| wx(c, prot))
                .and_then(|_| m.mmap_class(len));
            let r = lib.mmap(c, len, prot, MapFlags::default());
            expect(&r, want.map(|_| ()))?;
            if let Ok(va) = r {
                prop_assert_eq!(vaddr::decode(va).unwrap().vma.sc, want.unwrap());
                prop_assert!(!m.vmas.contains_key(&va));
                let mut perms = BTreeMap::new();
                if !prot.is_empty() {
                    perms.insert(c, prot);
                }
                m.vmas.insert(
                    va,
                    MVma {
                        owner: c,
                        len,
                        perms,
                    },
                );
            }
        }
        Op::Munmap {
            caller,
            vma,
            skip_pages,
            len_pages,
            misalign,
        } => {
            let c = m.pd(caller);
            let addr = m.vma(vma) + skip_pages as u64 * 4096 + if misalign { 17 } else { 0 };
            let len = len_pages as u64 * 4096;
            let want = m
                .live(c)
                .and_then(|_| m.slot(addr))
                .and_then(|(base, off)| {
                    let v = m.vmas.get(&base).ok_or(Error::NotMapped)?;
                    let mapped = page_round_up(v.len);
                    if !addr.is_multiple_of(4096) || len == 0 {
                        Err(Error::InvalidArgs)
                    } else if off >= mapped {
                        Err(Error::BadAddress)
                    } else if v.owner != c {
                        Err(Error::AccessDenied)
                    } else if off + len < mapped {
                        Err(Error::InvalidArgs)
                    } else {
                        Ok((base, off))
                    }
                });
            let r = lib.munmap(c, addr, len);
            expect(&r, want.map(|_| ()))?;
            if let (Ok(s), Ok((base, off))) = (r, want) {
                if off == 0 {
                    m.vmas.remove(&base);
                } else {
                    m.vmas.get_mut(&base).unwrap().len = off;
                }
                shot = s;
            }
        }
        Op::Mprotect {
            caller,
            vma,
            prot,
            extra_len,
        } => {
            let c = m.pd(caller);
            let addr = m.vma(vma);
            let prot = Perm::from_raw(prot as u64).unwrap();
            let len = m.vmas.get(&addr).map_or(4096, |v| v.len) + if extra_len { 4096 } else { 0 };
            let want = m.resolve(c, addr).and_then(|base| {
                wx(c, prot)?;
                let v = &m.vmas[&base];
                let old = v.perms.get(&c).copied();
                if page_round_up(len) != page_round_up(v.len) {
                    Err(Error::InvalidArgs)
                } else if v.owner != c && !old.is_some_and(|o| o.contains(prot)) {
                    Err(Error::AccessDenied)
                } else if !prot.is_empty() && m.no_room_for_new_holder(base, c) {
                    Err(Error::NoMemory)
                } else {
                    Ok(())
                }
            });
            let r = lib.mprotect(c, addr, len, prot);
            expect(&r, want)?;
            if let Ok(s) = r {
                let v = m.vmas.get_mut(&addr).unwrap();
                if prot.is_empty() {
                    v.perms.remove(&c);
                } else {
                    v.perms.insert(c, prot);
                }
                shot = s;
            }
        }
        Op::Pmove {
            caller,
            vma,
            target,
            prot,
        }
        | Op::Pcopy {
            caller,
            vma,
            target,
            prot,
        } => {
            let moving = matches!(op, Op::Pmove { .. });
            let (c, t) = (m.pd(caller), m.pd(target));
            let addr = m.vma(vma);
            let prot = Perm::from_raw(prot as u64).unwrap();
            let want = m.resolve(c, addr).and_then(|base| {
                m.live(t)?;
                let v = &m.vmas[&base];
                if t == c || prot.is_empty() {
                    Err(Error::InvalidArgs)
                } else if !v.perms.get(&c).is_some_and(|p| p.contains(prot))
                    || v.perms
                        .get(&t)
                        .copied()
                        .unwrap_or(Perm::NONE)
                        .union(prot)
                        .contains(Perm::W.union(Perm::X))
                {
                    // Not a subset of the caller's rights, or the target would hold W and X.
                    Err(Error::AccessDenied)
                } else if !moving && m.no_room_for_new_holder(base, t) {
                    Err(Error::NoMemory)
                } else {
                    Ok(())
                }
            });
            if moving {
                let r = lib.pmove(c, addr, t, prot);
                expect(&r, want)?;
                if let Ok(s) = r {
                    shot = s;
                }
            } else {
                expect(&lib.pcopy(c, addr, t, prot), want)?;
            }
            if want.is_ok() {
                let v = m.vmas.get_mut(&addr).unwrap();
                if moving {
                    v.perms.remove(&c);
                }
                let old = v.perms.get(&t).copied().unwrap_or(Perm::NONE);
                v.perms.insert(t, old.union(prot));
            }
        }
        Op::Revoke {
            caller,
            vma,
            target,
        } => {
            let (c, t) = (m.pd(caller), m.pd(target));
            let addr = m.vma(vma);
            let want = m.resolve(c, addr).and_then(|base| {
                m.live(t)?;
                if m.vmas[&base].owner != c {
                    Err(Error::AccessDenied)
                } else {
                    Ok(())
                }
            });
            let r = lib.revoke(c, addr, t);
            expect(&r, want)?;
            if let Ok(s) = r {
                m.vmas.get_mut(&addr).unwrap().perms.remove(&t);
                shot = s;
            }
        }
        Op::Scrub {
            caller,
            target,
            vma,
            tamper,
        } => {
            let (c, t) = (m.pd(caller), m.pd(target));
            let addr = m.vma(vma);
            let (len, perm) = m.vmas.get(&addr).map_or((4096, Perm::RW), |v| {
                (v.len, v.perms.get(&t).copied().unwrap_or(Perm::RW))
            });
            let (len, perm) = if tamper {
                (len + 4096, perm)
            } else {
                (len, perm)
            };
            let want = m.live(c).and_then(|_| m.live(t)).and_then(|_| {
                if t == K {
                    Err(Error::InvalidArgs)
                } else if c != K && m.pds[&t].parent != c {
                    Err(Error::AccessDenied)
                } else if m.pds[&t].running || m.pds.values().any(|p| p.parent == t) {
                    Err(Error::Busy)
                } else {
                    let (base, off) = m.slot(addr)?;
                    if off != 0 {
                        return Err(Error::BadAddress);
                    }
                    let v = m.vmas.get(&base).ok_or(Error::NotMapped)?;
                    let sole = v.owner == t
                        && v.perms.len() == 1
                        && v.perms.get(&t) == Some(&perm)
                        && v.len == len;
                    if sole { Ok(()) } else { Err(Error::Busy) }
                }
            });
            let r = lib.scrub_with(c, t, &[(addr, len, perm)], |_, _, _| {});
            expect(&r, want)?;
            if let Ok(s) = r {
                prop_assert!(s.dropped().is_empty());
                // Everything else the PD owned is freed; every other right it held is gone.
                m.vmas.retain(|b, v| v.owner != t || *b == addr);
                for (b, v) in m.vmas.iter_mut() {
                    if *b != addr {
                        v.perms.remove(&t);
                    }
                }
                shot = s;
            }
        }
        Op::ShareAll { vma } => {
            // Fill the PD table, then the owner hands R to every live PD, one checked step at
            // a time: this drives VMAs past the 20-slot sub-array into the overflow pool.
            while m.pds.len() < MAX_PDS - 1 {
                step(lib, m, &Op::Cget { caller: 0 })?;
            }
            let addr = m.vma(vma);
            if let Some(owner) = m.vmas.get(&addr).map(|v| v.owner) {
                let caller = m.pds.keys().position(|k| *k == owner).unwrap() as u8;
                for target in 0..m.pds.len() as u8 {
                    step(
                        lib,
                        m,
                        &Op::Pcopy {
                            caller,
                            vma,
                            target,
                            prot: 1,
                        },
                    )?;
                }
            }
            return Ok(());
        }
        Op::Ccall { target } => {
            let t = m.pd(target);
            let want = m.live(t).and_then(|_| {
                if t == K {
                    Err(Error::InvalidArgs)
                } else if m.pds[&t].running {
                    Err(Error::Busy)
                } else {
                    Ok(())
                }
            });
            expect(&lib.ccall(K, t, 0), want)?;
            if want.is_ok() {
                m.pds.get_mut(&t).unwrap().running = true;
            }
        }
        Op::Creturn { target } => {
            let t = m.pd(target);
            let want = m.live(t).and_then(|_| {
                if m.pds[&t].running {
                    Ok(())
                } else {
                    Err(Error::Busy)
                }
            });
            expect(&lib.creturn(t, 0), want)?;
            if want.is_ok() {
                m.pds.get_mut(&t).unwrap().running = false;
                prop_assert_eq!(lib.pds().call_state(t), Some(CallState::Idle));
            }
        }
        Op::Lookup { pd, vma, off } => {
            let p = m.pd(pd);
            let base = m.vma(vma);
            let span = m
                .vmas
                .get(&base)
                .map_or(4096, |v| page_round_up(v.len) + 4096);
            check_lookup(lib, m, p, base + off as u64 % span)?;
        }
        Op::Forged { pd, addr } => {
            let p = m.pd(pd);
            // Mostly in the region, sometimes anywhere.
            let addr = if addr & 1 == 0 {
                vaddr::REGION_START + (addr >> 20)
            } else {
                addr
            };
            check_lookup(lib, m, p, addr)?;
            let want = m.resolve(p, addr).and_then(|base| {
                let v = &m.vmas[&base];
                if v.owner != p && !v.perms.contains_key(&p) {
                    Err(Error::AccessDenied)
                } else {
                    Ok(())
                }
            });
            // A no-op mprotect (owner keeps its rights) exercises the address checks only.
            if want.is_err() {
                let len = m.vmas.get(&addr).map_or(4096, |v| v.len);
                let keep = m
                    .vmas
                    .get(&addr)
                    .and_then(|v| v.perms.get(&p).copied())
                    .unwrap_or(Perm::NONE);
                expect(&lib.mprotect(p, addr, len, keep), want)?;
            }
        }
    }
    check_same(lib, m)?;
    check_covered(&shot, &before, m)
}

fn check_lookup(lib: &PrivLib, m: &Model, pd: PdId, addr: u64) -> Result<(), TestCaseError> {
    let want = match m.slot(addr) {
        Err(_) => Err(Fault::NotJord),
        Ok((base, off)) => match m.vmas.get(&base) {
            Some(v) if off < page_round_up(v.len) => match v.perms.get(&pd) {
                Some(p) => Ok((base, v.len, *p)),
                None => Err(Fault::NoPermission),
            },
            _ => Err(Fault::Unmapped),
        },
    };
    let got = lib.lookup(pd, addr).map(|g| (g.base, g.len, g.perm));
    prop_assert_eq!(got, want, "lookup({:?}, {:#x})", pd, addr);
    Ok(())
}

#[test]
fn share_all_reaches_the_overflow_pool() {
    let mut lib = PrivLib::new(&config(), MAX_PDS, PdIsolation::Full).unwrap();
    let mut m = Model::new();
    let ops = [
        Op::Mmap {
            caller: 0,
            len: 4096,
            prot: 3,
        },
        Op::Mmap {
            caller: 0,
            len: 4096,
            prot: 3,
        },
        Op::ShareAll { vma: 0 },
        Op::ShareAll { vma: 1 },
        Op::Pmove {
            caller: 0,
            vma: 0,
            target: 3,
            prot: 1,
        },
        Op::Cput {
            caller: 0,
            target: 5,
        },
        Op::Munmap {
            caller: 0,
            vma: 0,
            skip_pages: 0,
            len_pages: 1,
            misalign: false,
        },
    ];
    let mut saw_overflow = false;
    for op in &ops {
        step(&mut lib, &mut m, op).unwrap();
        saw_overflow |= lib.vmas().allocated().any(|(_, v)| v.overflow().is_some());
    }
    assert!(saw_overflow);
}

/// Everything PrivLib holds about `pd`: the VMAs it owns (entries and every holder), the PDs
/// it created and the rights it holds on others' VMAs.
type Layout = (
    Vec<(u64, [u8; fjord_pd::vte::VTE_SIZE], Vec<(PdId, Perm)>)>,
    Vec<PdId>,
    Vec<(u64, Perm)>,
);

fn vma_state(
    lib: &PrivLib,
    id: fjord_pd::vaddr::VmaId,
) -> (u64, [u8; fjord_pd::vte::VTE_SIZE], Vec<(PdId, Perm)>) {
    let bytes = lib.vmas().vte(id).map_or([0; 64], |v| v.to_bytes());
    let mut holders: Vec<_> = lib.vmas().holders(id).map(|h| (h.pd, h.perm)).collect();
    holders.sort_unstable_by_key(|h| h.0);
    (id.base(), bytes, holders)
}

fn layout_of(lib: &PrivLib, pd: PdId) -> Layout {
    let mut owned: Vec<_> = lib.pds().owned(pd).map(|id| vma_state(lib, id)).collect();
    owned.sort_unstable_by_key(|o| o.0);
    let mut foreign: Vec<_> = lib
        .vmas()
        .allocated()
        .filter(|(_, v)| v.owner() != pd)
        .filter_map(|(id, _)| Some((id.base(), lib.vmas().perm_of(id, pd)?)))
        .collect();
    foreign.sort_unstable_by_key(|f| f.0);
    (owned, lib.pds().children(pd).to_vec(), foreign)
}

/// Per PD scrubbed: its change counter after the scrub and the layout kept.
type Scrubbed = BTreeMap<PdId, (u64, Vec<(u64, u64, Perm)>)>;

/// Runs `op` on the PDs and VMAs `lib` has (selectors taken modulo their numbers), ignoring
/// results; a scrub keeps what the PD owns alone and, when it succeeds, is recorded in
/// `scrubbed` with the PD's change counter after it.
fn loose_step(lib: &mut PrivLib, op: &Op, scrubbed: &mut Scrubbed) {
    let live: Vec<PdId> = lib.pds().live().collect();
    let pd = |sel: u8| live[sel as usize % live.len()];
    let vmas: Vec<u64> = lib.vmas().allocated().map(|(id, _)| id.base()).collect();
    let vma = |sel: u8| {
        vmas.get(sel as usize % vmas.len().max(1))
            .copied()
            .unwrap_or(0)
    };
    let prot = |p: u8| Perm::from_raw(u64::from(p % 4)).unwrap();
    // Half the time, the VMA's owner acts on it.
    let by = |sel: u8, v: u8| match lib.vmas().resolve_base(vma(v)) {
        Ok((_, vte)) if sel.is_multiple_of(2) => vte.owner(),
        _ => pd(sel),
    };
    let _ = match *op {
        Op::Cget { caller } => lib.cget(pd(caller)).map(|_| ()),
        Op::Cput { caller, target } => lib.cput(pd(caller), pd(target)).map(|_| ()),
        Op::Mmap {
            caller,
            len,
            prot: p,
        } => lib
            .mmap(
                pd(caller),
                u64::from(len % 20_000) + 1,
                prot(p),
                MapFlags::default(),
            )
            .map(|_| ()),
        Op::Munmap {
            caller,
            vma: v,
            skip_pages,
            len_pages,
            ..
        } => {
            let (c, skip) = (by(caller, v), u64::from(skip_pages % 4) * 4096);
            lib.munmap(c, vma(v) + skip, u64::from(len_pages) * 4096 + 4096)
                .map(|_| ())
        }
        Op::Mprotect {
            caller,
            vma: v,
            prot: p,
            ..
        } => {
            let len = lib
                .vmas()
                .resolve_base(vma(v))
                .map_or(0, |(_, vte)| vte.len());
            lib.mprotect(by(caller, v), vma(v), len, prot(p))
                .map(|_| ())
        }
        Op::Pmove {
            caller,
            vma: v,
            target,
            prot: p,
        } => lib
            .pmove(by(caller, v), vma(v), pd(target), prot(p))
            .map(|_| ()),
        Op::Pcopy {
            caller,
            vma: v,
            target,
            prot: p,
        } => lib.pcopy(by(caller, v), vma(v), pd(target), prot(p)),
        Op::Revoke {
            caller,
            vma: v,
            target,
        } => lib.revoke(by(caller, v), vma(v), pd(target)).map(|_| ()),
        Op::Scrub {
            caller,
            target,
            vma: v,
            tamper,
        } => {
            let t = pd(target);
            let mut keep = lib.owned_alone(t);
            keep.sort_unstable_by_key(|k| k.0);
            if tamper {
                // Put back what the PD changed of its last layout first.
                if let Some((_, last)) = scrubbed.get(&t) {
                    for &k in last {
                        let _ = lib.reinstate(t, k);
                    }
                }
                let _ = v;
            }
            lib.scrub_with(pd(caller), t, &keep, |_, _, _| {}).map(|_| {
                scrubbed.insert(t, (lib.changes(t).unwrap(), keep));
            })
        }
        Op::ShareAll { vma: v } => {
            let owner = lib.vmas().resolve_base(vma(v)).map(|(_, vte)| vte.owner());
            if let Ok(o) = owner {
                for &p in &live {
                    let _ = lib.pcopy(o, vma(v), p, Perm::R);
                }
            }
            Ok(())
        }
        Op::Ccall { target } => lib.ccall(K, pd(target), 0).map(|_| ()),
        Op::Creturn { target } => lib.creturn(pd(target), 0).map(|_| ()),
        Op::Lookup { .. } | Op::Forged { .. } => Ok(()),
    };
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn scrubbed_since_means_a_scrub_would_change_nothing(ops in prop::collection::vec(op(), 1..200)) {
        // After a PD's scrub, its change counter moves with every change to the VMAs it kept
        // and the PDs it created, and it owns and holds exactly those VMAs again only when
        // whatever else it made or was given went: then a scrub with the same layout (which
        // `scrubbed_since` says it needs not) would change nothing. The operations run on the
        // live PDs and VMAs as they are (no model); a scrub keeps what the PD owns alone.
        let mut lib = PrivLib::new(&config(), MAX_PDS, PdIsolation::Full).unwrap();
        let mut scrubbed = Scrubbed::new();
        for op in &ops {
            loose_step(&mut lib, op, &mut scrubbed);
            lib.check_consistency().map_err(TestCaseError::fail)?;
            scrubbed.retain(|pd, _| lib.pds().is_live(*pd));
            for (&pd, (changes, keep)) in &scrubbed {
                if !lib.scrubbed_since(K, pd, *changes, keep.len()) {
                    continue;
                }
                let mut again = lib.clone();
                let mut visits = 0;
                let s = again.scrub_with(K, pd, keep, |_, _, _| visits += 1);
                prop_assert!(s.as_ref().is_ok_and(Shootdown::is_empty), "{:?} after {:?}: {:?}", pd, op, s);
                prop_assert_eq!(visits, 0);
                for q in lib.pds().live() {
                    prop_assert_eq!(layout_of(&lib, q), layout_of(&again, q), "{:?} after {:?}", q, op);
                }
            }
        }
    }

    #[test]
    fn random_operations_keep_tables_consistent(ops in prop::collection::vec(op(), 1..150)) {
        let mut lib = PrivLib::new(&config(), MAX_PDS, PdIsolation::Full).unwrap();
        let mut m = Model::new();
        for op in &ops {
            step(&mut lib, &mut m, op)?;
        }
        // Tear everything down: every PD, then the kernel's VMAs; nothing may be left.
        while let Some(pd) = m.pds.keys().copied().find(|p| *p != K) {
            if m.pds[&pd].running {
                lib.creturn(pd, 0).unwrap();
                m.pds.get_mut(&pd).unwrap().running = false;
            }
            let before = m.clone();
            let s = lib.cput(K, pd).unwrap();
            m.vmas.retain(|_, v| v.owner != pd);
            for v in m.vmas.values_mut() {
                v.perms.remove(&pd);
            }
            m.pds.remove(&pd);
            for p in m.pds.values_mut() {
                if p.parent == pd {
                    p.parent = K;
                }
            }
            check_same(&lib, &m)?;
            check_covered(&s, &before, &m)?;
        }
        for base in m.vmas.keys().copied().collect::<Vec<_>>() {
            lib.munmap(K, base, 1 << 32).unwrap();
        }
        prop_assert_eq!(lib.vmas().allocated().count(), 0);
        for sc in SizeClass::all() {
            prop_assert_eq!(lib.vmas().free_count(sc), lib.vmas().capacity(sc) as usize);
        }
        prop_assert_eq!(lib.pds().free_count(), MAX_PDS - 1);
        lib.check_consistency().map_err(TestCaseError::fail)?;
    }

    #[test]
    fn no_isolation_mode_stays_consistent(ops in prop::collection::vec(op(), 1..100)) {
        // Jord_NI: the same operations must never corrupt the tables or panic, and every
        // valid VMA is reachable by every PD.
        let mut lib = PrivLib::new(&config(), MAX_PDS, PdIsolation::None).unwrap();
        let mut m = Model::new();
        for op in &ops {
            let pd = m.pd(0);
            let _ = match *op {
                Op::Cget { caller } => lib.cget(m.pd(caller)).map(|p| {
                    m.pds.insert(p, MPd { parent: K, running: false });
                }),
                Op::Cput { caller, target } => lib.cput(m.pd(caller), m.pd(target)).map(|_| {
                    m.pds.remove(&m.pd(target));
                }),
                Op::Mmap { caller, len, prot } => lib
                    .mmap(m.pd(caller), len as u64, Perm::from_raw(prot as u64).unwrap(), MapFlags::default())
                    .map(|_| ()),
                Op::Munmap { caller, vma, skip_pages, len_pages, .. } => {
                    let addr = lib.vmas().allocated().nth(vma as usize % 8).map_or(0, |(id, _)| id.base());
                    lib.munmap(m.pd(caller), addr + skip_pages as u64 * 4096, len_pages as u64 * 4096).map(|_| ())
                }
                Op::Pmove { caller, vma, target, prot } => {
                    let addr = lib.vmas().allocated().nth(vma as usize % 8).map_or(0, |(id, _)| id.base());
                    lib.pmove(m.pd(caller), addr, m.pd(target), Perm::from_raw(prot as u64).unwrap()).map(|s| {
                        assert!(s.is_empty());
                    })
                }
                _ => Ok(()),
            };
            m.pds = lib.pds().live().map(|p| (p, MPd { parent: K, running: false })).collect();
            lib.check_consistency().map_err(TestCaseError::fail)?;
            for (id, vte) in lib.vmas().allocated() {
                let g = lib.lookup(pd, id.base()).unwrap();
                prop_assert_eq!((g.perm, g.len), (Perm::RWX, vte.len()));
            }
        }
    }
}
