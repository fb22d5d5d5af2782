//! Jord's event counters.

use super::*;

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
    /// Function instances restored for reuse by [`Jord::restore_instance`] or
    /// [`Jord::begin_restore`].
    pub instances_restored: u64,
    /// Groundhog snapshots taken ([`Jord::take_snapshot`]).
    pub snapshots_taken: u64,
    /// Pages copied back or zeroed by snapshot restores.
    pub pages_restored: u64,
    /// VMAs a snapshot or a restore freed (created by `init` or by a request).
    pub vmas_scrubbed: u64,
    /// VMAs of a snapshot's layout that a restore made again (freed or shrunk by a request).
    pub vmas_remade: u64,
    /// Snapshot restores that skipped the scrub: the instance's layout and rights were as the
    /// last scrub left them ([`fjord_pd::PrivLib::scrubbed_since`]).
    pub scrubs_skipped: u64,
    /// μprocess areas emptied for the program's next μprocess ([`Jord::empty_area`]).
    pub areas_emptied: u64,
}

impl JordStats {
    /// Counts one shootdown that removed `removed` leaves (or `dropped_pd` whole tables) and
    /// owes the remote flushes in `pending`.
    pub(super) fn count_shootdown(&mut self, removed: usize, dropped_pd: bool, pending: &Pending) {
        if removed > 0 || dropped_pd {
            self.shootdowns += 1;
            self.leaves_removed += removed as u64;
        }
        if !pending.cpus.is_empty() {
            self.ipis += pending.cpus.len() as u64;
        }
    }
}
