//! CXLporter's policy (CXLfork, ASPLOS '25 §6), as pure decisions the kernel asks for and
//! feeds with what it measures: where a request's instance of a fork-per-request function comes
//! from, when the function is checkpointed, which tiering its clones get, how long a warm zygote
//! is kept, and which checkpoints go when the region runs short.
//!
//! - **Source** ([`Policy::source`]): a local fork of the function's warm zygote when this node
//!   has one; else a restore from a checkpoint in the region when there is one (no `init` run);
//!   else a cold start (a zygote made here, its `init` run, then a fork of it).
//! - **Checkpoint** ([`Policy::should_checkpoint`]): once this node has served the function
//!   [`Policy::checkpoint_after`] times (16, as the paper) from a warm zygote and the region holds
//!   no checkpoint of that version of it.
//! - **Tiering** ([`Policy::tiering`]): under memory pressure (the node's memory at least
//!   [`Policy::high_mem_percent`] used, the paper's HighMem = 90 %) migrate-on-write, which keeps
//!   the most in the region; otherwise hybrid, unless the function's restored instances have
//!   been slower than its local forks by more than [`Policy::slower_percent`], then
//!   migrate-on-access (everything it touches moves to local memory at first touch).
//! - **Keep-alive** ([`Policy::keep_alive_ms`]): a zygote idle for 10 minutes goes; under
//!   memory pressure, after 10 seconds.
//! - **Reclaim** ([`Policy::reclaim`]): when the region's free pages fall under
//!   [`Policy::region_low_percent`], the checkpoints no clone holds, least recently used first,
//!   until enough pages would be free again.

use crate::Tiering;
use crate::directory::Cid;
use alloc::vec::Vec;

/// Where a request's instance comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A fork of this node's warm zygote.
    LocalFork,
    /// A clone of a checkpoint in the region.
    Restore,
    /// A zygote made here (its `init` run), then forked.
    ColdStart,
}

impl Source {
    /// Every source.
    pub const ALL: [Source; 3] = [Source::LocalFork, Source::Restore, Source::ColdStart];

    /// Its name in `/metrics` and logs.
    pub const fn name(self) -> &'static str {
        match self {
            Source::LocalFork => "local_fork",
            Source::Restore => "restore",
            Source::ColdStart => "cold_start",
        }
    }
}

/// A running mean of latencies (exponentially weighted, 1/8 per sample), in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mean {
    value: u64,
    samples: u64,
}

impl Mean {
    /// Adds one latency.
    pub fn add(&mut self, ns: u64) {
        self.value = if self.samples == 0 {
            ns
        } else {
            self.value - self.value / 8 + ns / 8
        };
        self.samples += 1;
    }

    /// The mean, once there is a sample.
    pub fn get(&self) -> Option<u64> {
        (self.samples > 0).then_some(self.value)
    }
}

/// A checkpoint [`Policy::reclaim`] may retire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// It.
    pub cid: Cid,
    /// Its pages in the region.
    pub pages: u64,
    /// References its clones hold (only unreferenced ones are reclaimed).
    pub clones: u64,
    /// When it was last restored or written (any monotonic clock; smaller is older).
    pub last_used: u64,
}

/// CXLporter's thresholds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Invocations served from a warm zygote before the function is checkpointed.
    pub checkpoint_after: u64,
    /// Memory use (percent of the node's memory) from which the node is under pressure.
    pub high_mem_percent: u8,
    /// How long an idle zygote is kept, in milliseconds.
    pub keep_alive_ms: u64,
    /// How long under memory pressure.
    pub pressure_keep_alive_ms: u64,
    /// Free region pages (percent) under which unused checkpoints are reclaimed.
    pub region_low_percent: u8,
    /// How much slower (percent) restored instances may be than local forks before their
    /// tiering turns to migrate-on-access.
    pub slower_percent: u64,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy::PAPER
    }
}

impl Policy {
    /// The paper's thresholds: checkpoint after 16 invocations, HighMem at 90 %, keep-alive
    /// of 10 minutes or 10 seconds under pressure; reclaim below 10 % free, tiering turns at
    /// 10 % slower.
    pub const PAPER: Policy = Policy {
        checkpoint_after: 16,
        high_mem_percent: 90,
        keep_alive_ms: 10 * 60 * 1000,
        pressure_keep_alive_ms: 10 * 1000,
        region_low_percent: 10,
        slower_percent: 10,
    };

    /// Where the next instance comes from, given whether this node has a warm zygote and
    /// whether the region has a checkpoint of the function's version.
    pub const fn source(&self, zygote: bool, checkpoint: bool) -> Source {
        if zygote {
            Source::LocalFork
        } else if checkpoint {
            Source::Restore
        } else {
            Source::ColdStart
        }
    }

    /// Whether to checkpoint the function now: `served` invocations from a warm zygote on this
    /// node, and no checkpoint of its version in the region.
    pub const fn should_checkpoint(&self, served: u64, zygote: bool, checkpoint: bool) -> bool {
        zygote && !checkpoint && served >= self.checkpoint_after
    }

    /// Whether the node is under memory pressure with `used_percent` of its memory in use.
    pub const fn under_pressure(&self, used_percent: u8) -> bool {
        used_percent >= self.high_mem_percent
    }

    /// The tiering of the function's next clone (see the module documentation): `restored` and
    /// `local` are the function's mean latencies served by clones and by local forks.
    pub fn tiering(&self, used_percent: u8, restored: Mean, local: Mean) -> Tiering {
        if self.under_pressure(used_percent) {
            return Tiering::MigrateOnWrite;
        }
        match (restored.get(), local.get()) {
            (Some(r), Some(l))
                if r.saturating_mul(100) > l.saturating_mul(100 + self.slower_percent) =>
            {
                Tiering::MigrateOnAccess
            }
            _ => Tiering::Hybrid,
        }
    }

    /// How long an idle zygote is kept with `used_percent` of the node's memory in use.
    pub const fn keep_alive_ms(&self, used_percent: u8) -> u64 {
        if self.under_pressure(used_percent) {
            self.pressure_keep_alive_ms
        } else {
            self.keep_alive_ms
        }
    }

    /// The checkpoints to retire with `free` of `total` region pages free: none while enough
    /// are free; else unreferenced candidates, least recently used first, until the free pages
    /// would be back above the threshold.
    pub fn reclaim(&self, free: u64, total: u64, candidates: &[Candidate]) -> Vec<Cid> {
        let low = total * u64::from(self.region_low_percent) / 100;
        if free >= low {
            return Vec::new();
        }
        let mut idle: Vec<&Candidate> = candidates.iter().filter(|c| c.clones == 0).collect();
        idle.sort_by_key(|c| (c.last_used, c.cid));
        let mut freed = free;
        let mut out = Vec::new();
        for c in idle {
            if freed >= low {
                break;
            }
            freed += c.pages;
            out.push(c.cid);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cid(slot: u32) -> Cid {
        Cid { slot, epoch: 1 }
    }

    #[test]
    fn sources_prefer_a_warm_zygote_then_a_checkpoint() {
        let p = Policy::default();
        assert_eq!(p.source(true, true), Source::LocalFork);
        assert_eq!(p.source(true, false), Source::LocalFork);
        assert_eq!(p.source(false, true), Source::Restore);
        assert_eq!(p.source(false, false), Source::ColdStart);
    }

    #[test]
    fn checkpoints_after_the_sixteenth_invocation_once() {
        let p = Policy::default();
        assert!(!p.should_checkpoint(15, true, false));
        assert!(p.should_checkpoint(16, true, false));
        assert!(!p.should_checkpoint(16, true, true));
        assert!(!p.should_checkpoint(40, false, false));
    }

    #[test]
    fn tiering_follows_memory_then_latency() {
        let p = Policy::default();
        let (mut fast, mut slow) = (Mean::default(), Mean::default());
        assert_eq!(p.tiering(50, fast, slow), Tiering::Hybrid);
        fast.add(1_000);
        slow.add(1_200);
        // Restored slower than local by 20 %: migrate on access.
        assert_eq!(p.tiering(50, slow, fast), Tiering::MigrateOnAccess);
        assert_eq!(p.tiering(50, fast, slow), Tiering::Hybrid);
        // Within 10 %: hybrid.
        let mut near = Mean::default();
        near.add(1_090);
        assert_eq!(p.tiering(50, near, fast), Tiering::Hybrid);
        // Memory pressure wins.
        assert_eq!(p.tiering(90, slow, fast), Tiering::MigrateOnWrite);
        assert_eq!(p.tiering(89, slow, fast), Tiering::MigrateOnAccess);
    }

    #[test]
    fn keep_alive_shortens_under_pressure() {
        let p = Policy::default();
        assert_eq!(p.keep_alive_ms(10), 600_000);
        assert_eq!(p.keep_alive_ms(95), 10_000);
    }

    #[test]
    fn the_mean_moves_an_eighth_a_sample() {
        let mut m = Mean::default();
        assert_eq!(m.get(), None);
        m.add(800);
        assert_eq!(m.get(), Some(800));
        m.add(1_600);
        assert_eq!(m.get(), Some(900));
    }

    #[test]
    fn reclaims_unreferenced_least_recently_used_until_enough_is_free() {
        let p = Policy::default();
        let c = [
            Candidate {
                cid: cid(0),
                pages: 30,
                clones: 0,
                last_used: 5,
            },
            Candidate {
                cid: cid(1),
                pages: 30,
                clones: 2,
                last_used: 1,
            },
            Candidate {
                cid: cid(2),
                pages: 30,
                clones: 0,
                last_used: 2,
            },
            Candidate {
                cid: cid(3),
                pages: 30,
                clones: 0,
                last_used: 9,
            },
        ];
        assert!(p.reclaim(100, 1000, &c).is_empty());
        // 50 free of 1000: 50 more needed, so the two oldest unreferenced ones.
        assert_eq!(p.reclaim(50, 1000, &c), [cid(2), cid(0)]);
        // Not enough unreferenced ones: all of them.
        assert_eq!(p.reclaim(0, 1000, &c), [cid(2), cid(0), cid(3)]);
    }
}
