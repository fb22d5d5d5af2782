//! The emulated VLB: filling a PD's page table from the VMA table on a ring-3 page fault, and
//! switching the current PD (`ucid`).

use super::state::{Jord, with};
use crate::arch::{cpu, percpu};
use crate::mm::frames::DIRECT;
use fjord_kernel::layout::{PAGE_SIZE, align_down};
use fjord_kernel::paging::{Flags, PageTables};
use fjord_pd::leaf_hints::Way;
use fjord_pd::{PdId, Perm};

/// The access a page-fault error code describes.
pub fn access_of(error: u64) -> Perm {
    if error & 16 != 0 {
        Perm::X
    } else if error & 2 != 0 {
        Perm::W
    } else {
        Perm::R
    }
}

/// The page-table flags of a user leaf carrying `perm`.
pub(super) fn leaf_flags(perm: Perm) -> Flags {
    let mut flags = Flags::USER;
    if perm.contains(Perm::W) {
        flags = flags | Flags::WRITABLE;
    }
    if !perm.contains(Perm::X) {
        flags = flags | Flags::NO_EXECUTE;
    }
    flags
}

impl Jord {
    /// Handles a VLB miss of `pd` at `addr`: installs the leaf if the VMA table grants the
    /// access, and returns false (a protection fault) otherwise.
    pub fn fill(&mut self, pd: PdId, addr: u64, error: u64) -> bool {
        let Ok(grant) = self.privlib.lookup(pd, addr) else {
            self.stats.protection_faults += 1;
            return false;
        };
        let access = access_of(error);
        let (Some(phys), false) = (grant.phys, grant.privileged) else {
            self.stats.protection_faults += 1;
            return false;
        };
        let page = align_down(addr, PAGE_SIZE);
        let index = ((page - grant.base) / PAGE_SIZE) as usize;
        let shared = self.shared_page(grant.base, index);
        let (pa, perm) = if let Some((pa, perm)) = shared {
            // A program's image in its area: the page's own rights, for any PD that may read
            // the area.
            if !grant.perm.contains(Perm::R) || !perm.contains(access) {
                self.stats.protection_faults += 1;
                return false;
            }
            (pa, perm)
        } else {
            if !grant.allows(access) {
                self.stats.protection_faults += 1;
                return false;
            }
            match self.pager_fill(grant.base, index, access, grant.perm) {
                // A pager that refuses the page (e.g. its contents failed a check) grants
                // rights without the access: a protection fault.
                Some((_, perm)) if !perm.contains(access) => {
                    self.stats.protection_faults += 1;
                    return false;
                }
                Some(paged) => paged,
                None => match self.initialise_page(grant.base, index) {
                    Some(Some(pa)) => (pa, grant.perm),
                    // A VMA whose frames the kernel recorded without a backing of Jord's.
                    Some(None) => (phys + (page - grant.base), grant.perm),
                    None => {
                        self.stats.protection_faults += 1;
                        return false;
                    }
                },
            }
        };
        let flags = leaf_flags(perm);
        // A leaf that is present already (with fewer rights than now granted, e.g. after
        // pcopy, or stale) is replaced.
        let root = self.root_of(pd);
        let Some(table) =
            super::state::leaf_table(&mut self.leaf_hints, pd, root, page, flags, Way::Fill)
        else {
            return false;
        };
        PageTables::new(root, &DIRECT).install_in_table(table, page, pa, flags);
        cpu::invlpg(page);
        self.stats.fills += 1;
        if shared.is_some() {
            self.fault_around((root, table), grant.base, (index, pa));
        } else {
            self.paged_fault_around((root, table), grant.base, index, grant.perm);
        }
        true
    }

    /// Makes `pd` the current PD of this CPU: loads its root table and updates the sharer masks.
    #[inline(always)]
    pub fn switch_to(&mut self, pd: PdId) {
        // A CPU that switches PDs has its per-CPU block (it is installed before ring 3 runs).
        let pc = percpu::current();
        let me = pc.index as u32;
        let prev = PdId::from_raw(pc.current_pd).unwrap_or(PdId::KERNEL);
        if self.held_back.holds(pd) {
            self.settle_pd(pd);
        }
        let root = self.root_of(pd);
        if cpu::read_cr3() & !0xfff != root {
            // Every PD root shares the kernel image and kernel half with the kernel's tables.
            crate::mm::kernel_tables::load_space(root);
            self.stats.pd_switches += 1;
            // Without PCID the CR3 write flushed this CPU's TLB: it no longer caches `prev`.
            if prev != PdId::KERNEL {
                self.sharers.note_left(prev, me, true);
            }
        }
        if pd != PdId::KERNEL {
            self.sharers.note_ran(pd, me);
        }
        pc.current_pd = u64::from(pd.raw());
    }
}

/// The page-fault hook: resolves a VLB miss of the PD running on this CPU.
pub fn on_user_page_fault(addr: u64, error: u64) -> bool {
    let pd = percpu::current().current_pd;
    if pd == 0 {
        return false;
    }
    match PdId::from_raw(pd) {
        Ok(pd) => {
            let (filled, owed) = with(|j| (j.fill(pd, addr, error), j.take_pager_flushes()));
            if let Some(owed) = owed {
                owed.finish();
            }
            filled
        }
        Err(_) => false,
    }
}
