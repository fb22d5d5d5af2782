//! Access permissions: the R/W/X bits a PD holds on a VMA.

use crate::error::{Error, Result};

/// A set of access rights on a VMA: any combination of read, write and execute.
///
/// The bit values are those of POSIX `PROT_READ` (1), `PROT_WRITE` (2) and `PROT_EXEC` (4), so the
/// system-call layer passes `prot` through [`Perm::from_raw`] unchanged. The empty set is
/// `PROT_NONE`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Perm(u8);

impl Perm {
    /// No access (`PROT_NONE`).
    pub const NONE: Perm = Perm(0);
    /// Read access (`PROT_READ`).
    pub const R: Perm = Perm(1);
    /// Write access (`PROT_WRITE`).
    pub const W: Perm = Perm(2);
    /// Execute access (`PROT_EXEC`).
    pub const X: Perm = Perm(4);
    /// Read and write.
    pub const RW: Perm = Perm(3);
    /// Read and execute.
    pub const RX: Perm = Perm(5);
    /// Every right.
    pub const RWX: Perm = Perm(7);

    /// Validates a raw `prot` value: only the three low bits may be set.
    pub fn from_raw(raw: u64) -> Result<Perm> {
        if raw & !7 != 0 {
            return Err(Error::InvalidArgs);
        }
        Ok(Perm(raw as u8))
    }

    /// Builds a permission from its three low bits, ignoring the others (for decoding stored
    /// entries).
    pub const fn from_bits_truncate(bits: u8) -> Perm {
        Perm(bits & 7)
    }

    /// The raw bits (R = 1, W = 2, X = 4).
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// True when no right is held.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// True when every right in `other` is also in `self`.
    pub const fn contains(self, other: Perm) -> bool {
        self.0 & other.0 == other.0
    }

    /// The rights held by either.
    pub const fn union(self, other: Perm) -> Perm {
        Perm(self.0 | other.0)
    }

    /// These rights but those of `other`.
    pub const fn without(self, other: Perm) -> Perm {
        Perm(self.0 & !other.0)
    }

    /// True when both write and execute are held: never allowed (W^X).
    pub const fn is_writable_and_executable(self) -> bool {
        self.0 & 6 == 6
    }

    /// Whether `caller_is_kernel` may ask for `self` at run time with `mmap` or `mprotect`:
    /// never write and execute together (W^X), and execute only for the kernel, which maps
    /// module code. So memory a function can write never becomes executable.
    pub const fn may_request(self, caller_is_kernel: bool) -> bool {
        // Write and execute for the kernel, execute alone for anyone else.
        let denied = if caller_is_kernel { 6 } else { 4 };
        self.0 & denied != denied
    }

    /// True when going from `self` to `new` takes away at least one right, so a cached
    /// translation carrying `self` must be shot down.
    pub const fn narrowed_by(self, new: Perm) -> bool {
        self.0 & !new.0 != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_prot_is_validated() {
        assert_eq!(Perm::from_raw(3), Ok(Perm::RW));
        assert_eq!(Perm::from_raw(0), Ok(Perm::NONE));
        assert_eq!(Perm::from_raw(8), Err(Error::InvalidArgs));
        assert_eq!(Perm::from_raw(u64::MAX), Err(Error::InvalidArgs));
    }

    #[test]
    fn without_takes_rights_away() {
        assert_eq!(Perm::RWX.without(Perm::W), Perm::RX);
        assert_eq!(Perm::R.without(Perm::W), Perm::R);
        assert_eq!(Perm::RW.without(Perm::RW), Perm::NONE);
    }

    #[test]
    fn subset_and_narrowing() {
        assert!(Perm::RWX.contains(Perm::RW));
        assert!(!Perm::R.contains(Perm::RW));
        assert!(Perm::RW.narrowed_by(Perm::R));
        assert!(!Perm::R.narrowed_by(Perm::RW));
        assert!(!Perm::R.narrowed_by(Perm::R));
        assert_eq!(Perm::R.union(Perm::X), Perm::RX);
    }

    #[test]
    fn write_xor_execute() {
        for raw in 0..8 {
            let p = Perm::from_raw(raw).unwrap();
            let wx = p.contains(Perm::W) && p.contains(Perm::X);
            assert_eq!(p.is_writable_and_executable(), wx);
            assert_eq!(p.may_request(true), !wx);
            assert_eq!(p.may_request(false), !p.contains(Perm::X));
        }
    }
}
