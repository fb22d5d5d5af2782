//! Restore metrics of one function: how many restores, how many pages they copied back and
//! how long they took.

/// What one restore did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RestoreReport {
    /// Pages copied back from the snapshot or zeroed.
    pub pages: u64,
    /// Whether every page was restored (the dirty bits could not be trusted: a leaf of the
    /// instance was removed during the request).
    pub full: bool,
    /// VMAs created during the request and freed.
    pub vmas_freed: u64,
    /// Time it took, in TSC ticks (guest instructions under `-icount`).
    pub ticks: u64,
    /// Whether it stopped between two steps for a waiting request and was resumed later.
    pub interrupted: bool,
}

/// Running totals of a function's restores.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RestoreStats {
    /// Restores done.
    pub restores: u64,
    /// Of those, full restores.
    pub full: u64,
    /// Pages restored over all.
    pub pages: u64,
    /// Ticks spent over all.
    pub ticks: u64,
    /// The slowest restore, in ticks.
    pub max_ticks: u64,
    /// The most pages one restore restored.
    pub max_pages: u64,
    /// Instances destroyed and replaced instead (faulted, timed out, or unfit for reuse).
    pub replaced: u64,
    /// Restores that stopped between two steps for a waiting request and were resumed later.
    pub interrupted: u64,
}

impl RestoreStats {
    /// Adds one restore.
    pub fn record(&mut self, r: &RestoreReport) {
        self.restores += 1;
        self.full += u64::from(r.full);
        self.interrupted += u64::from(r.interrupted);
        self.pages += r.pages;
        self.ticks += r.ticks;
        self.max_ticks = self.max_ticks.max(r.ticks);
        self.max_pages = self.max_pages.max(r.pages);
    }

    /// Mean pages per restore (0 before the first).
    pub fn mean_pages(&self) -> u64 {
        self.pages.checked_div(self.restores).unwrap_or(0)
    }

    /// Mean ticks per restore (0 before the first).
    pub fn mean_ticks(&self) -> u64 {
        self.ticks.checked_div(self.restores).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_means_and_maxima() {
        let mut s = RestoreStats::default();
        assert_eq!((s.mean_pages(), s.mean_ticks()), (0, 0));
        s.record(&RestoreReport {
            pages: 2,
            full: false,
            vmas_freed: 0,
            ticks: 100,
            interrupted: false,
        });
        s.record(&RestoreReport {
            pages: 10,
            full: true,
            vmas_freed: 1,
            ticks: 300,
            interrupted: true,
        });
        assert_eq!((s.restores, s.full, s.pages, s.ticks), (2, 1, 12, 400));
        assert_eq!(s.interrupted, 1);
        assert_eq!((s.mean_pages(), s.mean_ticks()), (6, 200));
        assert_eq!((s.max_pages, s.max_ticks), (10, 300));
    }
}
