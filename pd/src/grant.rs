//! The translation lookup: what the VLB refill (here the page-fault fill) asks the VMA table.

use crate::error::Fault;
use crate::pd_id::PdId;
use crate::perm::Perm;
use crate::size_class::page_round_up;
use crate::vaddr;
use crate::vma_table::VmaTable;

/// What a PD may do with the VMA that covers a faulting address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The VMA's base address.
    pub base: u64,
    /// The VMA's length in bytes; pages of `base..base + page_round_up(len)` may be mapped.
    pub len: u64,
    /// The rights the PD holds (the attr permission for a Global or Privileged VMA).
    pub perm: Perm,
    /// The VMA is Global: the same leaf is valid in every PD.
    pub global: bool,
    /// The VMA is Privileged: map it supervisor-only.
    pub privileged: bool,
    /// Physical base of the backing chunk, if the kernel recorded one.
    pub phys: Option<u64>,
}

impl Grant {
    /// True when an access needing `access` is allowed.
    pub const fn allows(&self, access: Perm) -> bool {
        self.perm.contains(access)
    }

    /// The page-rounded length that may be mapped.
    pub const fn map_len(&self) -> u64 {
        page_round_up(self.len)
    }
}

impl VmaTable {
    /// Walks the table for `pd` accessing `addr`, as the paper's VTW does: decode the address,
    /// index the VTE, check Valid, Privileged, Global, then the sub-array and the overflow
    /// list. No allocation; the common case reads one VTE.
    ///
    /// The caller checks the access kind against [`Grant::perm`] (a present grant whose
    /// permission lacks the access is a protection fault).
    #[inline(always)]
    pub fn lookup(&self, pd: PdId, addr: u64) -> Result<Grant, Fault> {
        let d = vaddr::decode(addr).map_err(|_| Fault::NotJord)?;
        let vte = self.vte(d.vma).ok_or(Fault::NotJord)?;
        if !vte.is_valid() || d.offset >= page_round_up(vte.len()) {
            return Err(Fault::Unmapped);
        }
        let mut grant = Grant {
            base: d.vma.base(),
            len: vte.len(),
            perm: vte.attr_perm(),
            global: vte.is_global(),
            privileged: vte.is_privileged(),
            phys: vte.phys(),
        };
        if vte.is_privileged() {
            return if pd == PdId::KERNEL {
                Ok(grant)
            } else {
                Err(Fault::Privileged)
            };
        }
        if vte.is_global() {
            return Ok(grant);
        }
        grant.perm = match vte.find_sub(pd) {
            Some((_, perm)) => perm,
            None => self.overflow_perm(vte, pd).ok_or(Fault::NoPermission)?,
        };
        Ok(grant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vma_table::TableConfig;
    use crate::vte::VmaAttrs;

    fn pd(n: u64) -> PdId {
        PdId::from_raw(n).unwrap()
    }

    #[test]
    fn lookup_walks_attr_sub_array_and_overflow() {
        let mut t = VmaTable::new(&TableConfig::uniform(4, 4)).unwrap();
        let a = t.alloc(pd(1), 5000, Perm::RW, VmaAttrs::default()).unwrap();
        let g = t.lookup(pd(1), a.base() + 4999).unwrap();
        assert_eq!(
            (g.base, g.len, g.perm, g.global),
            (a.base(), 5000, Perm::RW, false)
        );
        assert_eq!(g.map_len(), 8192);
        assert!(g.allows(Perm::W) && !g.allows(Perm::X));
        // Inside the page-rounded length, beyond it, and for another PD.
        assert!(t.lookup(pd(1), a.base() + 8191).is_ok());
        assert_eq!(t.lookup(pd(1), a.base() + 8192), Err(Fault::Unmapped));
        assert_eq!(t.lookup(pd(2), a.base()), Err(Fault::NoPermission));
        for n in 2..=25 {
            t.set_perm(a, pd(n), Perm::R).unwrap();
        }
        assert_eq!(t.lookup(pd(25), a.base()).map(|g| g.perm), Ok(Perm::R));
        assert_eq!(t.lookup(pd(0), 0x1000), Err(Fault::NotJord));
    }

    #[test]
    fn global_and_privileged() {
        let mut t = VmaTable::new(&TableConfig::uniform(4, 0)).unwrap();
        let attrs = VmaAttrs {
            global: true,
            privileged: false,
        };
        let g = t.alloc(PdId::KERNEL, 4096, Perm::RX, attrs).unwrap();
        let gr = t.lookup(pd(77), g.base()).unwrap();
        assert!(gr.global && gr.perm == Perm::RX);
        let attrs = VmaAttrs {
            global: false,
            privileged: true,
        };
        let p = t.alloc(PdId::KERNEL, 4096, Perm::RW, attrs).unwrap();
        assert_eq!(t.lookup(pd(3), p.base()), Err(Fault::Privileged));
        assert!(t.lookup(PdId::KERNEL, p.base()).unwrap().privileged);
    }
}
