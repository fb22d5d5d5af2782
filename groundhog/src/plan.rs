//! A restore plan: what undoes a request's writes to one region, given the pages it dirtied
//! and what the snapshot holds.
//!
//! A dirtied page the snapshot holds is copied back from its slot; one the snapshot does not
//! hold (it was never used before the snapshot) is zeroed. Neighbouring pages with
//! neighbouring slots become one copy, neighbouring zero pages one fill, as Groundhog coalesces
//! its writes; the plan's cost follows the dirtied pages, never the region's size.

use crate::SnapshotIndex;
use alloc::vec::Vec;

/// One step of a restore plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Copy `count` pages from snapshot slot `slot` on to the region's pages from `page`.
    Copy {
        /// First page of the region.
        page: u32,
        /// First slot of the snapshot.
        slot: u32,
        /// Pages.
        count: u32,
    },
    /// Zero `count` pages of the region from `page`.
    Zero {
        /// First page of the region.
        page: u32,
        /// Pages.
        count: u32,
    },
}

/// The steps that restore one region, in address order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RestorePlan {
    actions: Vec<Action>,
    pages: usize,
}

impl RestorePlan {
    /// An empty plan, to be filled with [`RestorePlan::build`] (kept to reuse its memory).
    pub const fn new() -> RestorePlan {
        RestorePlan {
            actions: Vec::new(),
            pages: 0,
        }
    }

    /// Replaces the plan by the one that restores the pages `dirty` (in address order;
    /// repeats are ignored) of a region whose snapshot is `index`.
    pub fn build(&mut self, index: &SnapshotIndex, dirty: &[u32]) {
        self.actions.clear();
        self.pages = 0;
        let mut last = None;
        for &page in dirty {
            if last.is_some_and(|l| page <= l) {
                continue;
            }
            last = Some(page);
            self.pages += 1;
            let next = match index.slot_of(page) {
                Some(slot) => Action::Copy {
                    page,
                    slot: slot as u32,
                    count: 1,
                },
                None => Action::Zero { page, count: 1 },
            };
            match (self.actions.last_mut(), next) {
                (
                    Some(Action::Copy {
                        page: p,
                        slot: s,
                        count,
                    }),
                    Action::Copy {
                        page: np, slot: ns, ..
                    },
                ) if *p + *count == np && *s + *count == ns => *count += 1,
                (Some(Action::Zero { page: p, count }), Action::Zero { page: np, .. })
                    if *p + *count == np =>
                {
                    *count += 1
                }
                _ => self.actions.push(next),
            }
        }
    }

    /// The steps, in address order.
    pub fn actions(&self) -> &[Action] {
        &self.actions
    }

    /// Pages the plan restores.
    pub fn pages(&self) -> usize {
        self.pages
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn neighbours_coalesce_and_holes_are_zeroed() {
        let ix = SnapshotIndex::new(alloc::vec![0, 1, 2, 7, 8]);
        let mut plan = RestorePlan::new();
        plan.build(&ix, &[1, 2, 3, 4, 7, 8, 8, 20]);
        assert_eq!(
            plan.actions(),
            &[
                Action::Copy {
                    page: 1,
                    slot: 1,
                    count: 2
                },
                Action::Zero { page: 3, count: 2 },
                Action::Copy {
                    page: 7,
                    slot: 3,
                    count: 2
                },
                Action::Zero { page: 20, count: 1 },
            ]
        );
        assert_eq!(plan.pages(), 7);
        plan.build(&ix, &[]);
        assert!(plan.actions().is_empty());
        assert_eq!(plan.pages(), 0);
    }

    proptest! {
        /// Applying the plan to any region content gives the snapshot's content on every
        /// dirtied page and leaves every other page alone.
        #[test]
        fn plan_restores_exactly_the_dirtied_pages(
            held in proptest::collection::btree_set(0u32..64, 0..40),
            dirty in proptest::collection::btree_set(0u32..64, 0..40),
        ) {
            let ix = SnapshotIndex::new(held.iter().copied().collect());
            // Snapshot content of a held page: its page number + 1; of any other: 0.
            let snap: Vec<u32> = ix.pages().iter().map(|p| p + 1).collect();
            let mut region = [u32::MAX; 64];
            let dirty: Vec<u32> = dirty.into_iter().collect();
            let mut plan = RestorePlan::new();
            plan.build(&ix, &dirty);
            for a in plan.actions() {
                match *a {
                    Action::Copy { page, slot, count } => {
                        for i in 0..count {
                            region[(page + i) as usize] = snap[(slot + i) as usize];
                        }
                    }
                    Action::Zero { page, count } => {
                        for i in 0..count {
                            region[(page + i) as usize] = 0;
                        }
                    }
                }
            }
            prop_assert_eq!(plan.pages(), dirty.len());
            for p in 0..64u32 {
                let want = if dirty.contains(&p) {
                    if held.contains(&p) { p + 1 } else { 0 }
                } else {
                    u32::MAX
                };
                prop_assert_eq!(region[p as usize], want);
            }
        }
    }
}
