//! Protection-domain identifiers (the paper's `cid`, held in `ucid` while a PD runs).

use crate::error::{Error, Result};

/// Number of bits a PD id occupies in a VTE sub-array slot (the other 3 bits hold the permission).
pub const PD_ID_BITS: u32 = 13;

/// Number of PD ids the encoding can name: ids are `0..MAX_PDS`.
pub const MAX_PDS: usize = 1 << PD_ID_BITS;

/// The identifier of a protection domain.
///
/// Id 0 ([`PdId::KERNEL`]) is the kernel, which plays PrivLib and the executor/orchestrator
/// runtime; it always exists and is never destroyed. Ids fit in [`PD_ID_BITS`] bits so that a
/// (PD id, permission) pair packs into 16 bits of a VTE.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PdId(u16);

impl PdId {
    /// The kernel's PD (PrivLib, executors, orchestrators).
    pub const KERNEL: PdId = PdId(0);

    /// Validates a raw id coming from an untrusted caller; ids at or above [`MAX_PDS`] are
    /// rejected with [`Error::NoSuchPd`] (whether the PD is live is the PD table's business).
    pub fn from_raw(raw: u64) -> Result<PdId> {
        if raw < MAX_PDS as u64 {
            Ok(PdId(raw as u16))
        } else {
            Err(Error::NoSuchPd)
        }
    }

    /// The raw id.
    pub const fn raw(self) -> u16 {
        self.0
    }

    /// The id as an index into per-PD arrays.
    pub const fn index(self) -> usize {
        self.0 as usize
    }

    /// Builds an id from a value already known to be below [`MAX_PDS`] (masked otherwise).
    pub(crate) const fn from_bits(bits: u16) -> PdId {
        PdId(bits & (MAX_PDS as u16 - 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_ids_are_range_checked() {
        assert_eq!(PdId::from_raw(0), Ok(PdId::KERNEL));
        assert_eq!(PdId::from_raw(MAX_PDS as u64 - 1).map(PdId::raw), Ok(8191));
        assert_eq!(PdId::from_raw(MAX_PDS as u64), Err(Error::NoSuchPd));
        assert_eq!(PdId::from_raw(u64::MAX), Err(Error::NoSuchPd));
    }
}
