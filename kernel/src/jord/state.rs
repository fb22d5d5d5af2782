//! The global Jord state: PrivLib's tables, each PD's root page table, the memory backing each
//! VMA, the sharer masks, and event counters.

use crate::arch::{cpu, percpu};
use crate::mm::frames::{self, DIRECT, KernelFrames};
use crate::mm::kernel_tables;
use alloc::vec;
use alloc::vec::Vec;
use fjord_kernel::held_back::{HeldBack, Note};
use fjord_kernel::layout::PAGE_SIZE;
use fjord_kernel::leaf_hints::{LeafHints, Way};
use fjord_kernel::paging::{Flags, PageTables};
use fjord_libos::abi::Error as AbiError;
use fjord_pd::{Error, Isolation, MapFlags, PdId, Perm, PrivLib, Sharers, Shootdown, TableConfig};
use spin::Mutex;

mod restore;
pub use restore::InstanceLayout;

/// Most PDs alive at once.
pub const MAX_LIVE_PDS: usize = 1024;
/// VMA slots per size class.
pub const SLOTS_PER_CLASS: u32 = 1024;
/// Overflow lists for VMAs shared by more than 20 PDs.
const OVERFLOW_LISTS: u32 = 256;
/// Size of the stack VMA each PD gets at creation.
pub const PD_STACK_SIZE: u64 = 16 * 1024;

/// Most recycled PD root tables kept for reuse.
const ROOT_CACHE: usize = 64;

/// Which pages of a backing have been initialised: one bit per page, in place for VMAs of up
/// to 64 pages (almost all of them), on the heap beyond.
enum InitBits {
    Inline(u64),
    Heap(Vec<u64>),
}

/// The frames behind one VMA and which of its pages have been initialised. Pages are zeroed
/// on their first fill rather than at `mmap`, so memory a function never touches costs nothing.
/// `pages == 0` marks a VMA slot without backing.
struct Backing {
    base: u64,
    phys: u64,
    pages: usize,
    initialised: InitBits,
}

impl Backing {
    const NONE: Backing = Backing {
        base: 0,
        phys: 0,
        pages: 0,
        initialised: InitBits::Inline(0),
    };

    fn new(base: u64, phys: u64, pages: usize) -> Backing {
        let initialised = if pages <= 64 {
            InitBits::Inline(0)
        } else {
            InitBits::Heap(vec![0; pages.div_ceil(64)])
        };
        Backing {
            base,
            phys,
            pages,
            initialised,
        }
    }

    /// Zeroes page `i` unless it was initialised before; marks it initialised.
    fn initialise(&mut self, i: usize) {
        if i >= self.pages {
            return;
        }
        let (w, b) = (i / 64, 1u64 << (i % 64));
        let word = match &mut self.initialised {
            InitBits::Inline(word) => word,
            InitBits::Heap(words) => &mut words[w],
        };
        if *word & b == 0 {
            frames::zero(self.phys + i as u64 * PAGE_SIZE, 1);
            *word |= b;
        }
    }

    /// Whether page `i` has been initialised.
    fn is_initialised(&self, i: usize) -> bool {
        let (w, b) = (i / 64, 1u64 << (i % 64));
        let word = match &self.initialised {
            InitBits::Inline(word) => Some(*word),
            InitBits::Heap(words) => words.get(w).copied(),
        };
        i < self.pages && word.is_some_and(|word| word & b != 0)
    }

    /// Zeroes every initialised page again (they stay initialised): what a request wrote is
    /// gone, and the pages it never touched still cost nothing.
    fn rezero_initialised(&mut self) {
        let words: &[u64] = match &self.initialised {
            InitBits::Inline(w) => core::slice::from_ref(w),
            InitBits::Heap(ws) => ws,
        };
        for (w, &word) in words.iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                // One run of consecutive initialised pages: a single zeroing pass.
                let first = bits.trailing_zeros() as usize;
                let run = (bits >> first).trailing_ones() as usize;
                let page = w * 64 + first;
                frames::zero(self.phys + page as u64 * PAGE_SIZE, run);
                bits &= !(((1u128 << run) - 1) << first) as u64;
            }
        }
    }

    fn initialise_all(&mut self) {
        if let InitBits::Inline(w) = self.initialised
            && self.pages <= 64
            && w == u64::MAX >> (64 - self.pages.max(1))
        {
            return;
        }
        for i in 0..self.pages {
            self.initialise(i);
        }
    }
}

/// Most pages of a VMA whose leaves [`Jord::prefill`] installs at once (ArgBufs).
const PREFILL_PAGES: usize = 4;

/// Most pages of a VMA a PD maps with its own `mmap` that [`Jord::populate`] fills at once.
pub const POPULATE_PAGES: usize = 1;

/// What the kernel knows of a `pmove`'s two PDs beyond PrivLib's rights update
/// ([`Jord::pmove_with`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Handoff {
    /// The caller is the PD loaded on this CPU, and this CPU switches away from it (with
    /// [`Jord::switch_to`]) before it runs again: `ccall_move`, `creturn_move`, and `call`,
    /// which suspends it. When no other CPU may hold the caller's translations, its leaves are
    /// not cleared now but held back (see [`HeldBack`]); a buffer that comes back before the
    /// caller runs again (the chain A→B→C→B→A, a nested call's response) then costs no
    /// page-table work at all.
    pub leaving: bool,
    /// The target is the PD the executor runs next and reads the buffer first thing (a callee
    /// its request, a resumed caller its response): install its leaves for the initialised
    /// pages of a small VMA (an ArgBuf) at once, as VLB fills would on its first touches,
    /// saving one VLB miss per page. The leaves carry the rights just moved (a subset of what
    /// the VMA table now gives the target). Leaves only held back in the target's table, valid
    /// again, need none; under Jord_NI the shared table keeps its leaves anyway. A plain
    /// `pmove` stays lazy, since a receiver that only passes the buffer on would not touch it.
    pub prefill: bool,
}

impl Handoff {
    /// The caller leaves: `ccall_move`, `creturn_move`.
    pub const LEAVING: Handoff = Handoff {
        leaving: true,
        prefill: false,
    };
    /// The executor hands the buffer to the PD it runs next.
    pub const TO_NEXT: Handoff = Handoff {
        leaving: false,
        prefill: true,
    };
    /// Both: `call` hands its buffer to the callee and suspends the caller.
    pub const CALL: Handoff = Handoff {
        leaving: true,
        prefill: true,
    };
}

/// Most revocations held back at once ([`HeldBack`]); a `pmove` beyond them revokes at once.
const MAX_DEFERRED: usize = 16;

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
    /// Leaves installed ahead of use by [`Jord::prefill`] (VLB misses avoided).
    pub prefills: u64,
    /// CR3 writes done to switch PDs.
    pub pd_switches: u64,
    /// `pmove`s whose sender's leaves were left in its table until it is loaded again
    /// ([`Handoff::leaving`]).
    pub revocations_deferred: u64,
    /// Deferred revocations withdrawn because the VMA came back to the PD (with at least the
    /// rights it had) before the PD ran again: its leaves stayed valid and were never walked.
    pub revocations_withdrawn: u64,
    /// Function instances restored for reuse by [`Jord::restore_instance`].
    pub instances_restored: u64,
}

impl JordStats {
    /// Counts one shootdown that removed `removed` leaves (or `dropped_pd` whole tables) and
    /// owes the remote flushes in `pending`.
    fn count_shootdown(&mut self, removed: usize, dropped_pd: bool, pending: &Pending) {
        if removed > 0 || dropped_pd {
            self.shootdowns += 1;
            self.leaves_removed += removed as u64;
        }
        if !pending.cpus.is_empty() {
            self.ipis += pending.cpus.len() as u64;
        }
    }
}

/// The Jord state of the machine.
pub struct Jord {
    pub(super) privlib: PrivLib,
    /// Root table of each PD (by PD id; 0 when the PD has none).
    roots: Vec<u64>,
    /// Under Jord_NI, the one root every PD shares.
    shared_root: u64,
    /// Physical backing of each VMA, by VMA table slot.
    backing: Vec<Backing>,
    /// Scratch list of VMA bases (kept to avoid allocating per operation).
    scratch: Vec<u64>,
    /// Root tables of destroyed PDs, emptied of every non-Global leaf, ready for reuse.
    root_cache: Vec<u64>,
    /// Each PD's stack VMA: (base, length).
    stacks: Vec<(u64, u64)>,
    /// Each PD's memory quota for its own `mmap` calls: (bytes used, limit).
    quotas: Vec<(u64, u64)>,
    pub(super) sharers: Sharers,
    /// Base of the Global read-execute VMA holding the built-in user programs.
    code_base: u64,
    /// Event counters.
    pub stats: JordStats,
    /// Which state this is: every [`reset`] makes a state with a new generation.
    generation: u64,
    /// Revocations held back until their PD is loaded again (see [`HeldBack`]).
    pub(super) held_back: HeldBack,
    /// Per PD, the level-1 tables of its last single-leaf edits (see [`LeafHints`]).
    pub(super) leaf_hints: LeafHints,
}

/// The generation of the next Jord state.
static NEXT_GENERATION: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(1);

static JORD: Mutex<Option<Jord>> = Mutex::new(None);

/// The PD a system-call argument names: [`Error::NoSuchPd`] for a value beyond the
/// [`MAX_LIVE_PDS`] ids Jord manages (PrivLib's encoding would accept up to
/// [`fjord_pd::MAX_PDS`]), checked before any per-PD table is indexed with it.
pub fn pd_arg(raw: u64) -> Result<PdId, Error> {
    match PdId::from_raw(raw) {
        Ok(pd) if pd.index() < MAX_LIVE_PDS => Ok(pd),
        _ => Err(Error::NoSuchPd),
    }
}

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
        Error::LimitReached => AbiError::LimitReached,
    }
}

/// Runs `f` on the Jord state (initialising it with full isolation on first use).
#[inline]
pub fn with<R>(f: impl FnOnce(&mut Jord) -> R) -> R {
    cpu::without_interrupts(|| {
        let mut g = JORD.lock();
        let j = match g.as_mut() {
            Some(j) => j,
            None => first_use(&mut g),
        };
        f(j)
    })
}

/// The generation of the installed Jord state (0 before the first is made).
static CURRENT_GENERATION: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// The generation of the current Jord state ([`Jord::generation`]) without taking its lock.
pub fn current_generation() -> u64 {
    match CURRENT_GENERATION.load(core::sync::atomic::Ordering::Acquire) {
        0 => with(|j| j.generation()),
        g => g,
    }
}

/// The Jord state made on first use, with full isolation (kept out of line: it runs once).
#[cold]
#[inline(never)]
fn first_use(slot: &mut Option<Jord>) -> &mut Jord {
    let j = slot.insert(Jord::new(Isolation::Full).expect("memory for the VMA table"));
    CURRENT_GENERATION.store(j.generation, core::sync::atomic::Ordering::Release);
    j
}

/// Replaces the Jord state by a fresh one in `isolation` mode, releasing everything the old one
/// held. No PD may be running.
pub fn reset(isolation: Isolation) -> Result<(), Error> {
    let fresh = Jord::new(isolation)?;
    let generation = fresh.generation;
    let old = cpu::without_interrupts(|| {
        let mut g = JORD.lock();
        CURRENT_GENERATION.store(generation, core::sync::atomic::Ordering::Release);
        g.replace(fresh)
    });
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
        let slots = privlib.vmas().slot_count();
        let mut j = Jord {
            privlib,
            roots: vec![0; MAX_LIVE_PDS],
            shared_root,
            backing: Vec::new(),
            scratch: Vec::new(),
            root_cache: Vec::new(),
            generation: NEXT_GENERATION.fetch_add(1, core::sync::atomic::Ordering::Relaxed),
            stacks: vec![(0, 0); MAX_LIVE_PDS],
            quotas: vec![(0, u64::MAX); MAX_LIVE_PDS],
            sharers: Sharers::new(MAX_LIVE_PDS, crate::arch::smp::MAX_CPUS),
            code_base: 0,
            stats: JordStats::default(),
            held_back: HeldBack::new(MAX_DEFERRED, MAX_LIVE_PDS),
            leaf_hints: LeafHints::new(MAX_LIVE_PDS),
        };
        j.backing.resize_with(slots, || Backing::NONE);
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

    /// Live PDs, the kernel included.
    pub fn live_pds(&self) -> usize {
        let pds = self.privlib.pds();
        pds.max_pds() - pds.free_count()
    }

    /// PrivLib's check that its tables agree with each other (for tests).
    pub fn check_consistency(&self) -> Result<(), &'static str> {
        self.privlib.check_consistency()
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
        let bases: Vec<u64> = self
            .backing
            .iter()
            .filter(|b| b.pages != 0)
            .map(|b| b.base)
            .collect();
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

    /// The physical address `pd`'s own table maps `addr` to, if it holds a leaf for it (a
    /// present leaf need not be usable: see [`HeldBack`]).
    pub fn leaf_of(&self, pd: PdId, addr: u64) -> Option<u64> {
        let root = self.root_of(pd);
        PageTables::new(root, &DIRECT)
            .translate(addr)
            .map(|t| t.phys)
    }

    /// The level-1 table Jord remembers as `pd`'s for the 2 MiB region of `addr`, if any (see
    /// [`LeafHints`]); for tests.
    pub fn leaf_hint(&self, pd: PdId, addr: u64) -> Option<u64> {
        self.leaf_hints.get(pd.index(), addr)
    }

    /// The top of `pd`'s stack VMA.
    pub fn stack_top(&self, pd: PdId) -> u64 {
        let (base, len) = self.stacks[pd.index()];
        base + len
    }

    /// The backing slot of the VMA based at `base` (whether or not it is backed).
    fn slot_of(&self, base: u64) -> Option<usize> {
        let d = fjord_pd::vaddr::decode(base).ok()?;
        if d.offset != 0 {
            return None;
        }
        self.privlib.vmas().slot(d.vma)
    }

    fn backing_mut(&mut self, base: u64) -> Option<&mut Backing> {
        let slot = self.slot_of(base)?;
        self.backing
            .get_mut(slot)
            .filter(|b| b.pages != 0 && b.base == base)
    }

    /// Physical backing of the VMA at `base` as (address, pages), if it has any, with every
    /// page initialised first: the kernel never reads what the frames held before the VMA.
    pub fn backing_of(&mut self, base: u64) -> Option<(u64, usize)> {
        let b = self.backing_mut(base)?;
        b.initialise_all();
        Some((b.phys, b.pages))
    }

    /// Writes `words` at byte `offset` (8-aligned, within one page) of the VMA at `base`,
    /// initialising (zeroing) only that page first: how the executor lays out a PD's heap
    /// header without touching the rest of its memory.
    pub fn write_words(&mut self, base: u64, offset: u64, words: &[u64]) -> Result<(), Error> {
        let bytes = words.len() as u64 * 8;
        let page = offset / PAGE_SIZE;
        if !offset.is_multiple_of(8) || (offset + bytes).div_ceil(PAGE_SIZE) > page + 1 {
            return Err(Error::InvalidArgs);
        }
        let b = self.backing_mut(base).ok_or(Error::NotMapped)?;
        if page as usize >= b.pages {
            return Err(Error::InvalidArgs);
        }
        b.initialise(page as usize);
        let at = crate::mm::phys_to_virt(b.phys + offset) as *mut u64;
        // SAFETY: the bytes lie in one initialised page of the VMA's backing frames, reached
        // through the direct map; no code of the PD runs while the executor sets it up.
        unsafe { core::ptr::copy_nonoverlapping(words.as_ptr(), at, words.len()) };
        Ok(())
    }

    /// Limits the bytes `pd` may map with its own `mmap` calls (see [`Jord::charge`]).
    pub fn set_memory_limit(&mut self, pd: PdId, limit: u64) {
        if let Some(q) = self.quotas.get_mut(pd.index()) {
            *q = (0, limit);
        }
    }

    /// Charges `len` bytes (rounded up to pages) of a system-call `mmap` to `pd`'s quota;
    /// [`Error::NoMemory`] when it would exceed the limit.
    pub fn charge(&mut self, pd: PdId, len: u64) -> Result<(), Error> {
        let len = len.next_multiple_of(PAGE_SIZE);
        let q = self.quotas.get_mut(pd.index()).ok_or(Error::NoSuchPd)?;
        let used =
            q.0.checked_add(len)
                .filter(|&u| u <= q.1)
                .ok_or(Error::NoMemory)?;
        q.0 = used;
        Ok(())
    }

    /// Returns `len` bytes (rounded up to pages) to `pd`'s quota.
    pub fn uncharge(&mut self, pd: PdId, len: u64) {
        if let Some(q) = self.quotas.get_mut(pd.index()) {
            q.0 = q.0.saturating_sub(len.next_multiple_of(PAGE_SIZE));
        }
    }

    /// This state's generation, different for every state since boot: VMAs (such as module
    /// code) mapped in one state do not exist in another.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Length of the VMA based at `base`, rounded up to whole pages.
    pub fn vma_len(&self, base: u64) -> Result<u64, Error> {
        let (_, v) = self.privlib.vmas().resolve_base(base)?;
        Ok(v.len().next_multiple_of(PAGE_SIZE))
    }

    /// Physical address of the VMA at `base` with every page initialised, for kernel access.
    pub fn initialised_backing(&mut self, base: u64) -> Option<u64> {
        let b = self.backing_mut(base)?;
        b.initialise_all();
        Some(b.phys)
    }

    /// Initialises (zeroes on first use) page `index` of the VMA at `base` before it is mapped.
    pub(super) fn initialise_page(&mut self, base: u64, index: usize) {
        if let Some(b) = self.backing_mut(base) {
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
        if let Some(slot) = self.slot_of(base) {
            self.backing[slot] = Backing::new(base, phys, pages);
        }
        Ok(base)
    }

    fn free_backing(&mut self, base: u64) {
        self.settle_vma(base);
        if let Some(b) = self.backing_mut(base) {
            let b = core::mem::replace(b, Backing::NONE);
            let _ = frames::free_contiguous(b.phys, b.pages);
        }
    }

    /// Frees backing frames beyond what the VMA at `base` still covers (all of them if freed).
    fn trim_backing(&mut self, base: u64) {
        self.settle_vma(base);
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
                if let Some(b) = self.backing_mut(base)
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
        let p = self.apply(&s);
        match fjord_pd::vaddr::decode(addr) {
            // The whole VMA went: free all its frames.
            Ok(d) if d.offset == 0 => self.free_backing(addr),
            // The VMA shrank: free the frames beyond its new end.
            Ok(d) => self.trim_backing(d.vma.base()),
            Err(_) => {}
        }
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
        Ok(self.apply(&s))
    }

    /// `pmove` as a system call from running code makes it (no [`Handoff`]).
    pub fn pmove(
        &mut self,
        caller: PdId,
        addr: u64,
        cid: PdId,
        prot: Perm,
    ) -> Result<Pending, Error> {
        self.pmove_as(caller, addr, cid, prot, false)
            .map(|(p, _)| p)
    }

    /// `pmove` with what the kernel knows of the two PDs ([`Handoff`]): the caller is about to
    /// be switched away from (its leaves may be held back), the target is about to run (its
    /// leaves are installed now).
    #[inline(always)]
    pub fn pmove_with(
        &mut self,
        caller: PdId,
        addr: u64,
        cid: PdId,
        prot: Perm,
        how: Handoff,
    ) -> Result<Pending, Error> {
        let (p, withdrawn) = self.pmove_as(caller, addr, cid, prot, how.leaving)?;
        if how.prefill
            && !withdrawn
            && cid != PdId::KERNEL
            && self.shared_root == 0
            && prot.contains(Perm::R)
        {
            self.prefill(cid, addr, prot);
        }
        Ok(p)
    }

    /// `pmove`, holding the caller's leaves back when `leaving` allows it; also says whether
    /// `cid`'s own leaves for the VMA were valid again (a held-back revocation withdrawn).
    fn pmove_as(
        &mut self,
        caller: PdId,
        addr: u64,
        cid: PdId,
        prot: Perm,
        leaving: bool,
    ) -> Result<(Pending, bool), Error> {
        let Some(r) = self.privlib.pmove_revoking(caller, addr, cid, prot)? else {
            return Ok((Pending::default(), false));
        };
        let withdrawn = self.held_back.holds(cid) && self.withdraw(cid, r.leaf.base, prot);
        if leaving
            && self.may_defer(caller)
            && self.held_back.push(Note {
                pd: caller,
                base: r.leaf.base,
                len: r.leaf.len,
                had: r.had,
            })
        {
            self.stats.revocations_deferred += 1;
            return Ok((Pending::default(), withdrawn));
        }
        Ok((
            self.revoke_leaves(caller, r.leaf.base, r.leaf.len),
            withdrawn,
        ))
    }

    /// Whether `caller`, loaded on this CPU and about to be switched away from, may keep its
    /// revoked leaves for now: no other CPU may cache its translations.
    fn may_defer(&self, caller: PdId) -> bool {
        if self.shared_root != 0 || caller == PdId::KERNEL || self.held_back.is_full() {
            return false;
        }
        let mut others = self.sharers.mask(caller);
        // A PD is loaded here, so this CPU's per-CPU data exists.
        others.remove(percpu::current().index as u32);
        others.is_empty()
    }

    /// The VMA at `base` came back to `pd` with `prot`: a revocation held back for it is
    /// withdrawn when `prot` covers every right its leaves can carry, and carried out now
    /// otherwise (`pd` is loaded nowhere while it has one). Returns true when withdrawn.
    fn withdraw(&mut self, pd: PdId, base: u64, prot: Perm) -> bool {
        let Some(n) = self.held_back.take(pd, base) else {
            return false;
        };
        if prot.contains(n.had) {
            self.stats.revocations_withdrawn += 1;
            true
        } else {
            self.clear_held_back(n);
            false
        }
    }

    /// Carries out every revocation held back for `pd` (before `pd` is loaded or recycled).
    #[cold]
    #[inline(never)]
    pub(super) fn settle_pd(&mut self, pd: PdId) {
        for n in self.held_back.take_pd(pd) {
            self.clear_held_back(n);
        }
    }

    /// Carries out at once every revocation held back for `pd` while `pd` is loaded on this
    /// CPU: a suspension that was expected did not happen (the call was refused), so `pd`
    /// runs on without a switch.
    pub fn settle_running(&mut self, pd: PdId) -> Pending {
        let mut pending = Pending::default();
        for n in self.held_back.take_pd(pd) {
            pending.absorb(self.revoke_leaves(n.pd, n.base, n.len));
        }
        pending
    }

    /// Carries out every revocation held back for the VMA at `base` (before its frames go).
    fn settle_vma(&mut self, base: u64) {
        for n in self.held_back.take_vma(base) {
            self.clear_held_back(n);
        }
    }

    /// Clears a held-back revocation's leaves. Its PD is loaded on no CPU and no TLB holds its
    /// translations, so no flush is owed.
    fn clear_held_back(&mut self, n: Note) {
        let root = self.roots[n.pd.index()];
        if root != 0 {
            let removed = PageTables::new(root, &DIRECT).unmap_range(n.base, n.len);
            self.stats
                .count_shootdown(removed, false, &Pending::default());
        }
    }

    fn prefill(&mut self, pd: PdId, base: u64, perm: Perm) {
        let root = self.roots[pd.index()];
        let Some(b) = self
            .slot_of(base)
            .and_then(|slot| self.backing.get(slot))
            .filter(|b| b.pages != 0 && b.base == base && b.pages <= PREFILL_PAGES)
        else {
            return;
        };
        if root == 0 {
            return;
        }
        let flags = super::vlb::leaf_flags(perm);
        let mut installed = 0;
        for i in 0..b.pages {
            // A page never touched stays for its first fill (which zeroes it); a leaf that is
            // already present stays as it is. A leaf that was not present needs no TLB flush
            // anywhere when it appears.
            let off = i as u64 * PAGE_SIZE;
            if b.is_initialised(i)
                && map_leaf(
                    &mut self.leaf_hints,
                    pd,
                    root,
                    base + off,
                    b.phys + off,
                    flags,
                )
            {
                installed += 1;
            }
        }
        self.stats.prefills += installed;
    }

    /// Fills `pd`'s translations of its new VMA at `base` (of at most [`POPULATE_PAGES`] pages)
    /// at once, zeroing its pages, as the VLB misses of its first touches would one page at a
    /// time: a small VMA a function maps is, as a rule, an ArgBuf it fills right away. Larger
    /// VMAs stay lazy.
    pub fn populate(&mut self, pd: PdId, base: u64, perm: Perm) {
        if pd == PdId::KERNEL || perm.is_empty() {
            return;
        }
        let root = self.root_of(pd);
        let Some(b) = self.backing_mut(base).filter(|b| b.pages <= POPULATE_PAGES) else {
            return;
        };
        b.initialise_all();
        let (phys, pages) = (b.phys, b.pages);
        let flags = super::vlb::leaf_flags(perm);
        for i in 0..pages as u64 {
            // A new VMA has no leaf anywhere yet, so one appearing needs no TLB flush.
            let off = i * PAGE_SIZE;
            if map_leaf(
                &mut self.leaf_hints,
                pd,
                root,
                base + off,
                phys + off,
                flags,
            ) {
                self.stats.fills += 1;
            }
        }
    }

    /// `pcopy`.
    pub fn pcopy(&mut self, caller: PdId, addr: u64, cid: PdId, prot: Perm) -> Result<(), Error> {
        self.privlib.pcopy(caller, addr, cid, prot)
    }

    /// Takes `cid`'s permission on the VMA at `addr` away (owner only).
    pub fn revoke(&mut self, caller: PdId, addr: u64, cid: PdId) -> Result<Pending, Error> {
        let s = self.privlib.revoke(caller, addr, cid)?;
        Ok(self.apply(&s))
    }

    /// `cget`: a new PD with its own root table (unless Jord_NI) and a stack VMA.
    pub fn cget(&mut self, caller: PdId) -> Result<PdId, Error> {
        let cid = self.privlib.cget(caller)?;
        super::tenant::adopt(cid, caller);
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
                Ok(r) => {
                    self.roots[cid.index()] = r;
                    self.leaf_hints.forget(cid.index());
                }
                Err(_) => {
                    let _ = self.privlib.cput(PdId::KERNEL, cid);
                    return Err(Error::NoMemory);
                }
            }
        }
        match self.mmap(cid, PD_STACK_SIZE, Perm::RW, MapFlags::default()) {
            Ok(base) => {
                self.stacks[cid.index()] = (base, PD_STACK_SIZE);
                self.quotas[cid.index()] = (0, u64::MAX);
            }
            Err(e) => {
                let _ = self.cput(PdId::KERNEL, cid);
                return Err(e);
            }
        }
        self.stats.pds_created += 1;
        Ok(cid)
    }

    /// Bounds the PDs `root` (a PD the kernel created for a function instance) and the PDs it
    /// creates may create, all together, to `limit` besides `root`: `cget` then fails with
    /// [`Error::LimitReached`] instead of exhausting the PD table.
    pub fn set_pd_limit(&mut self, root: PdId, limit: u16) -> Result<(), Error> {
        self.privlib.set_tree_limit(PdId::KERNEL, root, limit)
    }

    /// `cput`: destroys `cid`, every PD it created (directly or not), and their VMAs, and
    /// recycles their root tables. Nothing changes unless every one of them may go (none is
    /// running or waiting for a callee).
    pub fn cput(&mut self, caller: PdId, cid: PdId) -> Result<Pending, Error> {
        self.privlib.check_cput(caller, cid)?;
        if self.privlib.pds().children(cid).is_empty() {
            return self.cput_one(caller, cid);
        }
        let descendants = self.privlib.pds().descendants(cid);
        for &d in &descendants {
            self.privlib.check_cput(PdId::KERNEL, d)?;
        }
        let mut pending = Pending::default();
        for d in descendants {
            pending.absorb(self.cput_one(PdId::KERNEL, d)?);
        }
        pending.absorb(self.cput_one(caller, cid)?);
        Ok(pending)
    }

    /// Destroys `cid` alone (PDs it created pass to the kernel; see [`Jord::cput`]).
    fn cput_one(&mut self, caller: PdId, cid: PdId) -> Result<Pending, Error> {
        self.privlib.check_cput(caller, cid)?;
        // The PD's root table is recycled: as PrivLib walks what the PD owned or was granted,
        // clear exactly those leaves from it (Global leaves stay valid for any PD) and keep
        // its tables for reuse. Note which VMAs it owns: their frames are freed once the
        // shootdown let them go.
        if self.held_back.holds(cid) {
            self.settle_pd(cid);
        }
        let root = self.roots[cid.index()];
        self.scratch.clear();
        let scratch = &mut self.scratch;
        let mut pt = PageTables::new(root, &DIRECT);
        let s = self.privlib.cput_with(caller, cid, |id, len, owned| {
            if owned {
                scratch.push(id.base());
            }
            if root != 0 {
                pt.unmap_range(id.base(), len.next_multiple_of(PAGE_SIZE));
            }
        })?;
        self.roots[cid.index()] = 0;
        self.leaf_hints.forget(cid.index());
        let p = self.apply(&s);
        if root != 0 {
            if self.root_cache.len() < ROOT_CACHE {
                self.root_cache.push(root);
            } else {
                PageTables::new(root, &DIRECT).free_user_tables(&mut KernelFrames);
            }
        }
        self.free_scratch_backings();
        self.stacks[cid.index()] = (0, 0);
        self.quotas[cid.index()] = (0, u64::MAX);
        self.stats.pds_destroyed += 1;
        Ok(p)
    }

    /// Frees the backing frames of the VMAs listed in `scratch` (VMAs just freed) and empties
    /// the list, keeping its storage.
    fn free_scratch_backings(&mut self) {
        let mut freed = core::mem::take(&mut self.scratch);
        for &b in &freed {
            self.free_backing(b);
        }
        freed.clear();
        self.scratch = freed;
    }

    /// Removes the stale leaves of `s` from the PD tables, flushes this CPU, and returns the
    /// other CPUs that must flush before the operation completes (see [`Pending::finish`]).
    /// [`Jord::apply`] for one PD's leaves, `pmove`'s whole shootdown.
    fn revoke_leaves(&mut self, pd: PdId, base: u64, len: u64) -> Pending {
        let mut pending = Pending::default();
        let mut ctx = Clear::new(
            &self.roots,
            &self.leaf_hints,
            self.shared_root,
            &mut self.sharers,
            &mut pending,
        );
        let removed = ctx.clear_leaves(pd, base, len);
        self.stats.count_shootdown(removed, false, &pending);
        pending
    }

    fn apply(&mut self, s: &Shootdown) -> Pending {
        let mut pending = Pending::default();
        if s.is_empty() {
            return pending;
        }
        let mut removed = 0usize;
        let mut ctx = Clear::new(
            &self.roots,
            &self.leaf_hints,
            self.shared_root,
            &mut self.sharers,
            &mut pending,
        );
        for leaf in s.leaves() {
            match leaf.target {
                fjord_pd::Target::Pd(pd) => {
                    removed += ctx.clear_leaves(pd, leaf.base, leaf.len);
                }
                fjord_pd::Target::AllPds if self.shared_root != 0 => {
                    // Jord_NI: one shared table.
                    removed += ctx.clear_leaves(PdId::KERNEL, leaf.base, leaf.len);
                }
                fjord_pd::Target::AllPds => {
                    for pd in self.privlib.pds().live() {
                        if pd != PdId::KERNEL {
                            removed += ctx.clear_leaves(pd, leaf.base, leaf.len);
                        }
                    }
                    for &root in &self.root_cache {
                        removed += PageTables::new(root, &DIRECT).unmap_range(leaf.base, leaf.len);
                    }
                }
            }
        }
        for &pd in s.dropped() {
            let t = ctx.sharers.take_targets(pd, ctx.me);
            ctx.pending.cpus = ctx.pending.cpus.union(&t);
        }
        self.stats.count_shootdown(removed, s.drops_any(), &pending);
        pending
    }
}

/// Installs `pd`'s leaf `va` → `pa` with `flags` in its table at `root`, unless one is there,
/// through the PD's level-1 table hint (walking, and remembering the table, on a miss).
/// Returns whether it installed the leaf.
fn map_leaf(hints: &mut LeafHints, pd: PdId, root: u64, va: u64, pa: u64, flags: Flags) -> bool {
    leaf_table(hints, pd, root, va, flags, Way::Handoff)
        .is_some_and(|table| PageTables::new(root, &DIRECT).map_in_table(table, va, pa, flags))
}

/// `pd`'s level-1 table (under `root`) for the page `va`, from its hints or by a walk that
/// creates missing tables for a leaf with `flags` and becomes the PD's hint of `way`; `None`
/// when a table cannot be had (no memory, a large page in the way).
pub(super) fn leaf_table(
    hints: &mut LeafHints,
    pd: PdId,
    root: u64,
    va: u64,
    flags: Flags,
    way: Way,
) -> Option<u64> {
    if let Some(t) = hints.get(pd.index(), va) {
        return Some(t);
    }
    let t = PageTables::new(root, &DIRECT)
        .leaf_table_creating(va, flags, &mut KernelFrames)
        .ok()?;
    hints.remember(pd.index(), way, va, t);
    Some(t)
}

/// What clearing leaves needs from [`Jord`], borrowed apart from the PD table.
struct Clear<'a> {
    roots: &'a [u64],
    hints: &'a LeafHints,
    shared_root: u64,
    sharers: &'a mut Sharers,
    current_root: u64,
    me: u32,
    pending: &'a mut Pending,
}

impl<'a> Clear<'a> {
    /// A context for clearing leaves on this CPU, whose loaded root it reads.
    fn new(
        roots: &'a [u64],
        hints: &'a LeafHints,
        shared_root: u64,
        sharers: &'a mut Sharers,
        pending: &'a mut Pending,
    ) -> Clear<'a> {
        Clear {
            roots,
            hints,
            shared_root,
            sharers,
            current_root: cpu::read_cr3() & !0xfff,
            me: percpu::cpu_index() as u32,
            pending,
        }
    }

    /// Clears `[base, base + len)` in `pd`'s table (the shared table when `pd` is the kernel
    /// under Jord_NI), flushing locally and collecting the CPUs to IPI.
    fn clear_leaves(&mut self, pd: PdId, base: u64, len: u64) -> usize {
        let root = if pd == PdId::KERNEL || self.shared_root != 0 {
            self.shared_root
        } else {
            self.roots[pd.index()]
        };
        if root == 0 {
            return 0;
        }
        let mut pt = PageTables::new(root, &DIRECT);
        // One page of a PD (an ArgBuf's revocation, as a rule): straight to the leaf when a
        // hint of the PD covers it.
        let table = (len == PAGE_SIZE && base.is_multiple_of(PAGE_SIZE) && pd != PdId::KERNEL)
            .then(|| self.hints.get(pd.index(), base))
            .flatten();
        let n = match table {
            Some(table) => usize::from(pt.unmap_in_table(table, base)),
            None => pt.unmap_range(base, len),
        };
        if n == 0 {
            return 0;
        }
        if root == self.current_root {
            if len <= 16 * PAGE_SIZE {
                for va in (base..base + len).step_by(PAGE_SIZE as usize) {
                    cpu::invlpg(va);
                }
            } else {
                self.pending.reload_local = true;
            }
        }
        if pd != PdId::KERNEL {
            let t = self.sharers.take_targets(pd, self.me);
            self.pending.cpus = self.pending.cpus.union(&t);
        }
        n
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
    /// Adds the flushes `other` owes to these.
    fn absorb(&mut self, other: Pending) {
        self.cpus = self.cpus.union(&other.cpus);
        self.reload_local |= other.reload_local;
    }

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
