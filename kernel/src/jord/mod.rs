//! Jord protection domains on emulated VMA hardware: the kernel glue around the `fjord-pd`
//! crate's VMA table and PrivLib semantics.
//!
//! What is emulated, and how (Jord, ISCA '25, §4):
//! - **VMA table**: real, as the paper lays it out (see `fjord-pd`), kept in kernel memory that
//!   ring 3 cannot reach (the paper's Privileged VMA).
//! - **VLB** (the VMA lookaside buffer): emulated by the MMU. Every PD has its own root page
//!   table sharing the kernel half; a ring-3 page fault is a VLB miss whose handler walks the VMA
//!   table for the current PD and installs one 4 KiB leaf (or reports a protection fault). Real
//!   Jord hardware would translate once and check permissions per VMA in the VLB; here a
//!   permission is enforced per page by the page tables, and a miss costs a trap. Single-leaf
//!   edits (a fill, an ArgBuf's leaf installed in the PD it moves to or cleared in the PD it
//!   leaves, a one-page `mmap` populated) go through a per-PD memo of the level-1 tables of
//!   recent edits (`fjord_pd::leaf_hints`) instead of walking from the root each time.
//! - **VLB shootdown**: revocations clear the leaves in every affected PD table, flush the local
//!   TLB and IPI only the CPUs in the PD's sharer mask (the paper's VTD). Without PCID every
//!   CR3 write flushes the TLB, so a CPU leaves a PD's mask when it switches away.
//! - **PD switch** (`ucid` change): a CR3 write (PCID is not used: QEMU TCG lacks it).
//!
//! Jord_NI ([`fjord_pd::PdIsolation::None`]) runs the same paths with the isolation work bypassed:
//! one shared root table for every PD (no CR3 switch), full rights from every lookup, and no
//! per-PD revocation.

pub mod exec;
pub mod metrics;
pub mod state;
pub mod tenant;
pub mod vlb;

pub use state::with;

/// Runs `f` on the Jord state and settles the remote TLB flushes its operation owes once the
/// lock is released (they wait for other CPUs, never under the lock): what `f` returns without
/// its [`state::Pending`] flushes (see [`Owes`]).
pub fn settled<O: Owes>(f: impl FnOnce(&mut state::Jord) -> O) -> O::Settled {
    with(f).settle()
}

/// The result of an operation on the Jord state together with the remote TLB flushes it owes;
/// [`Owes::settle`] finishes them and leaves the result. Every operation that revokes a leaf
/// another CPU may cache returns one, and [`settled`] is how the rest of the kernel settles it.
pub trait Owes {
    /// The result once the flushes are done.
    type Settled;
    /// Finishes the flushes (outside the Jord lock) and returns the result.
    fn settle(self) -> Self::Settled;
}

impl Owes for state::Pending {
    type Settled = ();
    fn settle(self) {
        self.finish();
    }
}

impl<T: Owes> Owes for Option<T> {
    type Settled = Option<T::Settled>;
    fn settle(self) -> Self::Settled {
        self.map(Owes::settle)
    }
}

impl<T: Owes, E> Owes for Result<T, E> {
    type Settled = Result<T::Settled, E>;
    fn settle(self) -> Self::Settled {
        self.map(Owes::settle)
    }
}

/// An operation's flushes and its result.
impl<R> Owes for (state::Pending, R) {
    type Settled = R;
    fn settle(self) -> R {
        self.0.finish();
        self.1
    }
}

/// An operation's flushes, if it owes any, and its result.
impl<R> Owes for (Option<state::Pending>, R) {
    type Settled = R;
    fn settle(self) -> R {
        if let Some(p) = self.0 {
            p.finish();
        }
        self.1
    }
}
