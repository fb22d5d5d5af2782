//! The global Jord state: PrivLib's tables, each PD's root page table, the memory backing each
//! VMA, the sharer masks, and event counters.

use crate::arch::{cpu, percpu};
use crate::mm::frames::{self, DIRECT, KernelFrames};
use crate::mm::kernel_tables;
use alloc::collections::BTreeMap;
use alloc::vec;
use alloc::vec::Vec;
use fjord_kernel::layout::PAGE_SIZE;
use fjord_kernel::paging::PageTables;
use fjord_libos::abi::Error as AbiError;
use fjord_pd::{Error, Isolation, MapFlags, PdId, Perm, PrivLib, Sharers, Shootdown, TableConfig};
use spin::Mutex;

/// Most PDs alive at once.
pub const MAX_LIVE_PDS: usize = 1024;
/// VMA slots per size class.
const SLOTS_PER_CLASS: u32 = 1024;
/// Overflow lists for VMAs shared by more than 20 PDs.
const OVERFLOW_LISTS: u32 = 256;
/// Size of the stack VMA each PD gets at creation.
pub const PD_STACK_SIZE: u64 = 16 * 1024;

/// A list of (base, length) address ranges.
type Ranges = Vec<(u64, u64)>;

/// Most recycled PD root tables kept for reuse.
const ROOT_CACHE: usize = 64;

/// The frames behind one VMA and which of its pages have been initialised. Pages are zeroed
/// on their first fill rather than at `mmap`, so memory a function never touches costs nothing.
struct Backing {
    phys: u64,
    pages: usize,
    initialised: Vec<u64>,
}

impl Backing {
    fn new(phys: u64, pages: usize) -> Backing {
        Backing {
            phys,
            pages,
            initialised: vec![0; pages.div_ceil(64)],
        }
    }

    /// Zeroes page `i` unless it was initialised before; marks it initialised.
    fn initialise(&mut self, i: usize) {
        let (w, b) = (i / 64, 1u64 << (i % 64));
        if let Some(word) = self.initialised.get_mut(w)
            && *word & b == 0
        {
            frames::zero(self.phys + i as u64 * PAGE_SIZE, 1);
            *word |= b;
        }
    }

    fn initialise_all(&mut self) {
        for i in 0..self.pages {
            self.initialise(i);
        }
    }
}

/// Event counters (reported by benchmarks and metrics).
#[derive(Clone, Copy, Debug, Default)]
pub struct JordStats {
    /// VLB fills: ring-3 faults resolved by installing a leaf.
    pub fills: u64,
    /// Protection faults delivered to executors.
    pub protection_faults: u64,
    /// Shootdowns performed (operations that removed at least one leaf or dropped a PD).
    pub shootdowns: u64,
    /// Leaves removed by shootdowns.
    pub leaves_removed: u64,
    /// TLB-shootdown IPIs sent.
    pub ipis: u64,
    /// PDs created.
    pub pds_created: u64,
    /// PDs destroyed.
    pub pds_destroyed: u64,
    /// CR3 writes done to switch PDs.
    pub pd_switches: u64,
}

/// The Jord state of the machine.
pub struct Jord {
    pub(super) privlib: PrivLib,
    /// Root table of each PD (by PD id; 0 when the PD has none).
    roots: Vec<u64>,
    /// Under Jord_NI, the one root every PD shares.
    shared_root: u64,
    /// Physical backing of each VMA, by base address.
    backing: BTreeMap<u64, Backing>,
    /// Root tables of destroyed PDs, emptied of every non-Global leaf, ready for reuse.
    root_cache: Vec<u64>,
    /// Each PD's stack VMA: (base, length).
    stacks: Vec<(u64, u64)>,
    pub(super) sharers: Sharers,
    /// Base of the Global read-execute VMA holding the built-in user programs.
    code_base: u64,
    /// Event counters.
    pub stats: JordStats,
}

static JORD: Mutex<Option<Jord>> = Mutex::new(None);

/// Maps a PrivLib error to the system-call ABI's code.
pub fn abi_error(e: Error) -> AbiError {
    match e {
        Error::InvalidArgs => AbiError::InvalidArgs,
        Error::BadAddress => AbiError::BadAddress,
        Error::NotMapped => AbiError::NotMapped,
        Error::AccessDenied => AbiError::AccessDenied,
        Error::NoSuchPd => AbiError::NoSuchPd,
        Error::Busy => AbiError::Busy,
        Error::NoMemory => AbiError::NoMemory,
    }
}

/// Runs `f` on the Jord state (initialising it with full isolation on first use).
pub fn with<R>(f: impl FnOnce(&mut Jord) -> R) -> R {
    cpu::without_interrupts(|| {
        let mut g = JORD.lock();
        let j =
            g.get_or_insert_with(|| Jord::new(Isolation::Full).expect("memory for the VMA table"));
        f(j)
    })
}

/// Replaces the Jord state by a fresh one in `isolation` mode, releasing everything the old one
/// held. No PD may be running.
pub fn reset(isolation: Isolation) -> Result<(), Error> {
    let fresh = Jord::new(isolation)?;
    let old = cpu::without_interrupts(|| JORD.lock().replace(fresh));
    if let Some(mut old) = old {
        old.release_all();
    }
    Ok(())
}

impl Jord {
    fn new(isolation: Isolation) -> Result<Jord, Error> {
        let privlib = PrivLib::new(
            &TableConfig::uniform(SLOTS_PER_CLASS, OVERFLOW_LISTS),
            MAX_LIVE_PDS,
            isolation,
        )?;
        let shared_root = if isolation == Isolation::None {
            PageTables::create_sharing_kernel(
                &DIRECT,
                &mut KernelFrames,
                kernel_tables::kernel_root(),
            )
            .map_err(|_| Error::NoMemory)?
            .root()
        } else {
            0
        };
        let mut j = Jord {
            privlib,
            roots: vec![0; MAX_LIVE_PDS],
            shared_root,
            backing: BTreeMap::new(),
            root_cache: Vec::new(),
            stacks: vec![(0, 0); MAX_LIVE_PDS],
            sharers: Sharers::new(MAX_LIVE_PDS, crate::arch::smp::MAX_CPUS),
            code_base: 0,
            stats: JordStats::default(),
        };
        // The built-in programs: code is one Global read-execute VMA shared by every PD.
        let blob = crate::arch::user_programs::blob();
        let global = MapFlags {
            global: true,
            privileged: false,
        };
        j.code_base = j.mmap(PdId::KERNEL, blob.len() as u64, Perm::RX, global)?;
        let phys = j.initialised_backing(j.code_base).ok_or(Error::NoMemory)?;
        // SAFETY: the VMA's backing frames were just allocated for it and are mapped through the
        // direct map; no PD has run yet, so nothing else reads them.
        unsafe {
            core::ptr::copy_nonoverlapping(
                blob.as_ptr(),
                crate::mm::phys_to_virt(phys) as *mut u8,
                blob.len(),
            )
        };
        Ok(j)
    }

    /// Where the VMA table's entries live in kernel memory (for isolation tests).
    pub fn vma_table_address(&self) -> u64 {
        self.privlib.vmas() as *const fjord_pd::VmaTable as u64
    }

    /// The address of a built-in program in the Global code VMA.
    pub fn entry(&self, prog: crate::arch::user_programs::Program) -> u64 {
        self.code_base + prog.offset()
    }

    fn release_all(&mut self) {
        let live: Vec<PdId> = self
            .privlib
            .pds()
            .live()
            .filter(|p| *p != PdId::KERNEL)
            .collect();
        for pd in live {
            let _ = self.cput(PdId::KERNEL, pd);
        }
        let bases: Vec<u64> = self.backing.keys().copied().collect();
        for b in bases {
            let _ = self.munmap(PdId::KERNEL, b, u64::MAX);
            self.free_backing(b);
        }
        if self.shared_root != 0 {
            PageTables::new(self.shared_root, &DIRECT).free_user_tables(&mut KernelFrames);
        }
        for root in self.root_cache.drain(..) {
            PageTables::new(root, &DIRECT).free_user_tables(&mut KernelFrames);
        }
    }

    /// The root table of `pd` (the kernel's own for PD 0).
    pub fn root_of(&self, pd: PdId) -> u64 {
        if pd == PdId::KERNEL {
            kernel_tables::kernel_root()
        } else if self.shared_root != 0 {
            self.shared_root
        } else {
            self.roots[pd.index()]
        }
    }

    /// The top of `pd`'s stack VMA.
    pub fn stack_top(&self, pd: PdId) -> u64 {
        let (base, len) = self.stacks[pd.index()];
        base + len
    }

    /// Physical backing of the VMA at `base` as (address, pages), if it has any. Pages no PD
    /// has touched yet are not initialised: use [`Self::initialised_backing`] to write them.
    pub fn backing_of(&self, base: u64) -> Option<(u64, usize)> {
        self.backing.get(&base).map(|b| (b.phys, b.pages))
    }

    /// Physical address of the VMA at `base` with every page initialised, for kernel access.
    pub fn initialised_backing(&mut self, base: u64) -> Option<u64> {
        let b = self.backing.get_mut(&base)?;
        b.initialise_all();
        Some(b.phys)
    }

    /// Initialises (zeroes on first use) page `index` of the VMA at `base` before it is mapped.
    pub(super) fn initialise_page(&mut self, base: u64, index: usize) {
        if let Some(b) = self.backing.get_mut(&base) {
            b.initialise(index);
        }
    }

    /// `mmap`: a new VMA for `caller`, backed by physically contiguous frames that are zeroed
    /// page by page on first use.
    pub fn mmap(
        &mut self,
        caller: PdId,
        len: u64,
        prot: Perm,
        flags: MapFlags,
    ) -> Result<u64, Error> {
        let base = self.privlib.mmap(caller, len, prot, flags)?;
        let pages = len.div_ceil(PAGE_SIZE) as usize;
        let phys = match frames::alloc_contiguous(pages, 1) {
            Ok(p) => p,
            Err(_) => {
                let _ = self.privlib.munmap(PdId::KERNEL, base, len);
                return Err(Error::NoMemory);
            }
        };
        self.privlib.set_backing(PdId::KERNEL, base, phys)?;
        self.backing.insert(base, Backing::new(phys, pages));
        Ok(base)
    }

    fn free_backing(&mut self, base: u64) {
        if let Some(b) = self.backing.remove(&base) {
            let _ = frames::free_contiguous(b.phys, b.pages);
        }
    }

    /// Frees backing frames beyond what the VMA at `base` still covers (all of them if freed).
    fn trim_backing(&mut self, base: u64) {
        let still = self
            .privlib
            .vmas()
            .resolve_base(base)
            .ok()
            .map(|(_, v)| v.len());
        match still {
            None => self.free_backing(base),
            Some(len) => {
                let keep = len.div_ceil(PAGE_SIZE) as usize;
                if let Some(b) = self.backing.get_mut(&base)
                    && keep < b.pages
                {
                    let _ =
                        frames::free_contiguous(b.phys + keep as u64 * PAGE_SIZE, b.pages - keep);
                    b.pages = keep;
                }
            }
        }
    }

    /// `munmap`.
    pub fn munmap(&mut self, caller: PdId, addr: u64, len: u64) -> Result<Pending, Error> {
        let s = self.privlib.munmap(caller, addr, len)?;
        let p = self.apply(s);
        self.trim_backing(addr);
        Ok(p)
    }

    /// `mprotect`.
    pub fn mprotect(
        &mut self,
        caller: PdId,
        addr: u64,
        len: u64,
        prot: Perm,
    ) -> Result<Pending, Error> {
        let s = self.privlib.mprotect(caller, addr, len, prot)?;
        Ok(self.apply(s))
    }

    /// `pmove`.
    pub fn pmove(
        &mut self,
        caller: PdId,
        addr: u64,
        cid: PdId,
        prot: Perm,
    ) -> Result<Pending, Error> {
        let s = self.privlib.pmove(caller, addr, cid, prot)?;
        Ok(self.apply(s))
    }

    /// `pcopy`.
    pub fn pcopy(&mut self, caller: PdId, addr: u64, cid: PdId, prot: Perm) -> Result<(), Error> {
        self.privlib.pcopy(caller, addr, cid, prot)
    }

    /// Takes `cid`'s permission on the VMA at `addr` away (owner only).
    pub fn revoke(&mut self, caller: PdId, addr: u64, cid: PdId) -> Result<Pending, Error> {
        let s = self.privlib.revoke(caller, addr, cid)?;
        Ok(self.apply(s))
    }

    /// `cget`: a new PD with its own root table (unless Jord_NI) and a stack VMA.
    pub fn cget(&mut self, caller: PdId) -> Result<PdId, Error> {
        let cid = self.privlib.cget(caller)?;
        if self.shared_root == 0 {
            let root = match self.root_cache.pop() {
                Some(r) => Ok(r),
                None => PageTables::create_sharing_kernel(
                    &DIRECT,
                    &mut KernelFrames,
                    kernel_tables::kernel_root(),
                )
                .map(|pt| pt.root()),
            };
            match root {
                Ok(r) => self.roots[cid.index()] = r,
                Err(_) => {
                    let _ = self.privlib.cput(PdId::KERNEL, cid);
                    return Err(Error::NoMemory);
                }
            }
        }
        match self.mmap(cid, PD_STACK_SIZE, Perm::RW, MapFlags::default()) {
            Ok(base) => self.stacks[cid.index()] = (base, PD_STACK_SIZE),
            Err(e) => {
                let _ = self.cput(PdId::KERNEL, cid);
                return Err(e);
            }
        }
        self.stats.pds_created += 1;
        Ok(cid)
    }

    /// The (base, length) of every VMA `cid` owns, and of every VMA it was granted.
    fn vmas_of(&self, cid: PdId) -> (Ranges, Ranges) {
        if !self.privlib.pds().is_live(cid) {
            return (Vec::new(), Vec::new());
        }
        let range =
            |v: fjord_pd::VmaId| (v.base(), self.privlib.vmas().vte(v).map_or(0, |e| e.len()));
        (
            self.privlib.pds().owned(cid).map(range).collect(),
            self.privlib.pds().granted(cid).map(range).collect(),
        )
    }

    /// `cput`: destroys `cid` and its VMAs, and recycles its root table.
    pub fn cput(&mut self, caller: PdId, cid: PdId) -> Result<Pending, Error> {
        let (owned, granted) = self.vmas_of(cid);
        let s = self.privlib.cput(caller, cid)?;
        let p = self.apply(s);
        // Recycle the root table: clear exactly the leaves the PD could have had (what it owned
        // or was granted; Global leaves stay valid for any PD) and keep its tables for reuse.
        let root = core::mem::replace(&mut self.roots[cid.index()], 0);
        if root != 0 {
            let mut pt = PageTables::new(root, &DIRECT);
            for &(base, len) in owned.iter().chain(granted.iter()) {
                pt.unmap_range(base, len.next_multiple_of(PAGE_SIZE));
            }
            if self.root_cache.len() < ROOT_CACHE {
                self.root_cache.push(root);
            } else {
                pt.free_user_tables(&mut KernelFrames);
            }
        }
        for (b, _) in owned {
            self.free_backing(b);
        }
        self.stacks[cid.index()] = (0, 0);
        self.stats.pds_destroyed += 1;
        Ok(p)
    }

    /// Clears `[base, base + len)` in `pd`'s table (the shared table when `pd` is the kernel
    /// under Jord_NI), flushing locally and collecting the CPUs to IPI.
    fn clear_leaves(
        &mut self,
        pd: PdId,
        base: u64,
        len: u64,
        current_root: u64,
        me: u32,
        pending: &mut Pending,
    ) -> usize {
        let root = if pd == PdId::KERNEL {
            self.shared_root
        } else {
            self.root_of(pd)
        };
        if root == 0 {
            return 0;
        }
        let n = PageTables::new(root, &DIRECT).unmap_range(base, len);
        if n == 0 {
            return 0;
        }
        if root == current_root {
            if len <= 16 * PAGE_SIZE {
                for va in (base..base + len).step_by(PAGE_SIZE as usize) {
                    cpu::invlpg(va);
                }
            } else {
                pending.reload_local = true;
            }
        }
        if pd != PdId::KERNEL {
            pending.cpus = pending.cpus.union(&self.sharers.take_targets(pd, me));
        }
        n
    }

    /// Removes the stale leaves of `s` from the PD tables, flushes this CPU, and returns the
    /// other CPUs that must flush before the operation completes (see [`Pending::finish`]).
    fn apply(&mut self, s: Shootdown) -> Pending {
        let me = percpu::cpu_index() as u32;
        let current_root = cpu::read_cr3() & !0xfff;
        let mut pending = Pending::default();
        let mut removed = 0usize;
        for leaf in s.leaves() {
            match leaf.target {
                fjord_pd::Target::Pd(pd) => {
                    removed +=
                        self.clear_leaves(pd, leaf.base, leaf.len, current_root, me, &mut pending);
                }
                fjord_pd::Target::AllPds if self.shared_root != 0 => {
                    // Jord_NI: one shared table.
                    removed += self.clear_leaves(
                        PdId::KERNEL,
                        leaf.base,
                        leaf.len,
                        current_root,
                        me,
                        &mut pending,
                    );
                }
                fjord_pd::Target::AllPds => {
                    let all: Vec<PdId> = self
                        .privlib
                        .pds()
                        .live()
                        .filter(|p| *p != PdId::KERNEL)
                        .collect();
                    for pd in all {
                        removed += self.clear_leaves(
                            pd,
                            leaf.base,
                            leaf.len,
                            current_root,
                            me,
                            &mut pending,
                        );
                    }
                    for &root in &self.root_cache {
                        removed += PageTables::new(root, &DIRECT).unmap_range(leaf.base, leaf.len);
                    }
                }
            }
        }
        for pd in s.dropped() {
            pending.cpus = pending.cpus.union(&self.sharers.take_targets(pd, me));
        }
        if removed > 0 || s.drops_any() {
            self.stats.shootdowns += 1;
            self.stats.leaves_removed += removed as u64;
        }
        self.stats.ipis += pending.cpus.len() as u64;
        pending
    }
}

/// Remote TLB flushes an operation still owes; finish them after releasing the Jord lock.
#[derive(Default)]
#[must_use = "the remote flushes must be finished before the operation returns"]
pub struct Pending {
    cpus: fjord_pd::CpuMask,
    reload_local: bool,
}

impl Pending {
    /// Flushes this CPU (if needed) and every CPU in the mask, waiting for them.
    pub fn finish(self) {
        if self.reload_local {
            // SAFETY: reloading CR3 only flushes non-global TLB entries.
            unsafe { cpu::write_cr3(cpu::read_cr3()) };
        }
        if !self.cpus.is_empty() {
            crate::arch::smp::tlb_shootdown(self.cpus.iter().map(|c| c as usize));
        }
    }
}
