//! The global Jord state: PrivLib's tables, each PD's root page table, the memory backing each
//! VMA, the sharer masks, and event counters.
//!
//! - [`memory`]: VMAs and their frames (`mmap`, `munmap`, `mprotect`, `pcopy`, `revoke`);
//! - [`handoff`]: `pmove` and what the kernel knows of a hand-off's two PDs ([`Handoff`]);
//! - [`pds`]: creating and destroying PDs, their bounds and page tables;
//! - [`shootdown`]: clearing stale leaves and the remote flushes still owed ([`Pending`]);
//! - [`reuse`]: a function instance restored for its next request, and what Groundhog's
//!   snapshots are built on;
//! - [`pager`]: VMAs whose pages a subsystem above Jord provides (μFork's lazy copies);
//! - [`shared_prefix`]: VMAs whose first pages are another VMA's frames (a program's image);
//! - [`backing`], [`stats`]: the frames behind a VMA, the event counters.

use crate::arch::{cpu, percpu};
use crate::mm::frames::{self, DIRECT, KernelFrames};
use crate::mm::kernel_tables;
use alloc::vec;
use alloc::vec::Vec;
use fjord_kernel::layout::PAGE_SIZE;
use fjord_kernel::paging::{Flags, PageTables};
use fjord_libos::abi::Error as AbiError;
use fjord_pd::held_back::{HeldBack, Note};
use fjord_pd::leaf_hints::{LeafHints, Way};
use fjord_pd::{
    Error, MapFlags, PdId, PdIsolation, Perm, PrivLib, Sharers, Shootdown, TableConfig,
};
use spin::Mutex;

mod backing;
mod handoff;
mod memory;
mod pager;
mod pds;
mod reuse;
mod shared_prefix;
mod shootdown;
mod stats;

pub use backing::Backing;
use backing::Store;
use handoff::MAX_DEFERRED;
pub use handoff::{Handoff, POPULATE_PAGES};
pub use pager::{Frames, PageWords, Pager};
pub use reuse::{InstanceLayout, KeptVma};
pub use shared_prefix::FAULT_AROUND;
pub use shootdown::Pending;
pub(super) use shootdown::leaf_table;
use shootdown::map_leaf;
pub use stats::JordStats;

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
    /// Event counters.
    pub stats: JordStats,
    /// Which state this is: every [`reset`] makes a state with a new generation.
    generation: u64,
    /// Revocations held back until their PD is loaded again (see [`HeldBack`]).
    pub(super) held_back: HeldBack,
    /// Per PD, the level-1 tables of its last single-leaf edits (see [`LeafHints`]).
    pub(super) leaf_hints: LeafHints,
    /// How many VMAs have a pager (μFork's lazy copies): none, and no path asks.
    paged: usize,
    /// Flushes the pagers owe (see [`Jord::take_pager_flushes`]).
    pager_owed: Pending,
    /// Per PD, the leaves whose removal its owner wants to know of (see
    /// [`Jord::watch_leaves`]).
    leaf_watches: Vec<Option<reuse::LeafLossWatch>>,
    /// How many entries of `leaf_watches` hold one.
    live_watches: usize,
    /// VMAs whose first pages are another VMA's frames.
    shared: shared_prefix::SharedPrefixes,
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
    let j = slot.insert(Jord::new(PdIsolation::Full).expect("memory for the VMA table"));
    CURRENT_GENERATION.store(j.generation, core::sync::atomic::Ordering::Release);
    j
}

/// Replaces the Jord state by a fresh one in `isolation` mode, releasing everything the old one
/// held. No PD may be running.
pub fn reset(isolation: PdIsolation) -> Result<(), Error> {
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
    fn new(isolation: PdIsolation) -> Result<Jord, Error> {
        let privlib = PrivLib::new(
            &TableConfig::uniform(SLOTS_PER_CLASS, OVERFLOW_LISTS),
            MAX_LIVE_PDS,
            isolation,
        )?;
        let shared_root = if isolation == PdIsolation::None {
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
            stats: JordStats::default(),
            held_back: HeldBack::new(MAX_DEFERRED, MAX_LIVE_PDS),
            leaf_hints: LeafHints::new(MAX_LIVE_PDS),
            paged: 0,
            pager_owed: Pending::default(),
            leaf_watches: reuse::no_watches(),
            live_watches: 0,
            shared: shared_prefix::SharedPrefixes::new(),
        };
        j.backing.resize_with(slots, || Backing::NONE);
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

    /// This state's generation, different for every state since boot: VMAs (such as module
    /// code) mapped in one state do not exist in another.
    pub fn generation(&self) -> u64 {
        self.generation
    }
}
