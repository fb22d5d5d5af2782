//! How the CPUs split into orchestrator groups (Jord §3.3: one orchestrator per group of cores).
//!
//! Each group is a run of consecutive CPUs: the first is the group's orchestrator core (central
//! queues, JBSQ dispatch), the others its executors. A machine with one CPU has one group whose
//! orchestrator core is also its only executor.

use alloc::vec::Vec;

/// One orchestrator group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoreGroup {
    /// The orchestrator core.
    pub orchestrator: usize,
    /// The executor cores (never empty).
    pub executors: Vec<usize>,
}

/// Splits `cpus` CPUs into groups of `group_size` (orchestrator included); `group_size` 0 or
/// at least `cpus` means one group. A last run of a single CPU joins the group before it as an
/// executor, so that every group has at least one executor.
pub fn layout(cpus: usize, group_size: usize) -> Vec<CoreGroup> {
    if cpus <= 1 {
        return alloc::vec![CoreGroup {
            orchestrator: 0,
            executors: alloc::vec![0],
        }];
    }
    let size = if group_size < 2 || group_size >= cpus {
        cpus
    } else {
        group_size
    };
    let mut groups: Vec<CoreGroup> = Vec::new();
    let mut start = 0;
    while start < cpus {
        let end = (start + size).min(cpus);
        if end - start == 1 {
            if let Some(last) = groups.last_mut() {
                last.executors.push(start);
            }
        } else {
            groups.push(CoreGroup {
                orchestrator: start,
                executors: (start + 1..end).collect(),
            });
        }
        start = end;
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn shape(groups: &[CoreGroup]) -> Vec<(usize, Vec<usize>)> {
        groups
            .iter()
            .map(|g| (g.orchestrator, g.executors.clone()))
            .collect()
    }

    #[test]
    fn one_cpu_runs_everything() {
        assert_eq!(shape(&layout(1, 0)), vec![(0, vec![0])]);
        assert_eq!(shape(&layout(0, 4)), vec![(0, vec![0])]);
    }

    #[test]
    fn default_is_one_group() {
        assert_eq!(shape(&layout(4, 0)), vec![(0, vec![1, 2, 3])]);
        assert_eq!(shape(&layout(4, 9)), vec![(0, vec![1, 2, 3])]);
    }

    #[test]
    fn groups_split_and_absorb_a_lone_cpu() {
        assert_eq!(shape(&layout(4, 2)), vec![(0, vec![1]), (2, vec![3])]);
        assert_eq!(shape(&layout(5, 2)), vec![(0, vec![1]), (2, vec![3, 4])]);
        assert_eq!(
            shape(&layout(8, 4)),
            vec![(0, vec![1, 2, 3]), (4, vec![5, 6, 7])]
        );
    }

    #[test]
    fn every_cpu_has_one_role() {
        for cpus in 1..20 {
            for size in 0..22 {
                let groups = layout(cpus, size);
                let mut seen: Vec<usize> = groups
                    .iter()
                    .flat_map(|g| {
                        core::iter::once(g.orchestrator).chain(g.executors.iter().copied())
                    })
                    .collect();
                seen.sort_unstable();
                if cpus > 1 {
                    seen.dedup();
                    assert_eq!(seen, (0..cpus).collect::<Vec<_>>());
                }
                assert!(groups.iter().all(|g| !g.executors.is_empty()));
            }
        }
    }
}
