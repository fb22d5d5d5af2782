//! Ring-3 memory as the kernel reaches it in a system call: the current address space's user
//! half, accessed as ring 3 would access it.
//!
//! A system call runs with the caller's root table loaded and interrupts off. The kernel does
//! not walk the tables before an access: it makes the access through the fallible routines of
//! [`crate::arch::user_copy`], and the MMU refuses what ring 3 could not do. A page the caller
//! may use but whose leaf is not installed yet (a VLB miss under Jord, a page a forked child
//! copies lazily) is filled through the kernel's ring-3 page-fault handler
//! ([`crate::arch::user::resolve_user_fault`]), as a ring-3 access would be.

use crate::arch::user_copy;

/// Why a range of user memory cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadUserAddress;

impl From<BadUserAddress> for fjord_libos::abi::Error {
    fn from(_: BadUserAddress) -> Self {
        fjord_libos::abi::Error::BadAddress
    }
}

impl From<user_copy::Faulted> for BadUserAddress {
    fn from(_: user_copy::Faulted) -> Self {
        BadUserAddress
    }
}

/// Checks that ring 3 may write `[addr, addr + len)` in the loaded address space (one store
/// per page, which changes nothing).
pub fn check_writable(addr: u64, len: u64) -> Result<(), BadUserAddress> {
    Ok(user_copy::probe(addr, len, true)?)
}

/// The `len` bytes of user memory at `addr`, after checking that ring 3 may read them in the
/// loaded address space (one load per page); empty for `len == 0`.
pub fn bytes<'a>(addr: u64, len: u64) -> Result<&'a [u8], BadUserAddress> {
    if len == 0 {
        return Ok(&[]);
    }
    user_copy::probe(addr, len, false)?;
    // SAFETY: every page of the range was just read as ring 3 would, so it is mapped
    // user-readable in this address space, which cannot change while this CPU runs the system
    // call with interrupts off.
    Ok(unsafe { core::slice::from_raw_parts(addr as *const u8, len as usize) })
}

/// Copies `data` to user memory at `addr`, as a ring-3 store would; on an error, the bytes
/// before the first page ring 3 may not write may have been written.
pub fn copy_to(addr: u64, data: &[u8]) -> Result<(), BadUserAddress> {
    if data.is_empty() {
        return Ok(());
    }
    Ok(user_copy::copy_to_user(addr, data)?)
}

/// Fills `out` from user memory at `addr`, as a ring-3 load would.
pub fn copy_from(out: &mut [u8], addr: u64) -> Result<(), BadUserAddress> {
    if out.is_empty() {
        return Ok(());
    }
    Ok(user_copy::copy_from_user(out, addr)?)
}

/// Up to [`InlineBytes::CAPACITY`] bytes held inline, without a heap allocation: a small
/// system-call copy. Only the bytes it holds are ever written (nothing is zeroed first), and
/// only they are ever read.
pub struct InlineBytes {
    len: usize,
    bytes: core::mem::MaybeUninit<[u8; InlineBytes::CAPACITY]>,
}

impl InlineBytes {
    /// Most bytes held.
    pub const CAPACITY: usize = 128;

    /// `a` followed by `b`; `None` when they do not fit.
    pub fn from_parts(a: &[u8], b: &[u8]) -> Option<InlineBytes> {
        let len = a
            .len()
            .checked_add(b.len())
            .filter(|&n| n <= Self::CAPACITY)?;
        let mut copy = InlineBytes {
            len,
            bytes: core::mem::MaybeUninit::uninit(),
        };
        let dst = copy.bytes.as_mut_ptr().cast::<u8>();
        // SAFETY: `a` and `b` fit in the buffer (checked), which they cannot overlap (it is
        // new); afterwards its first `len` bytes are written, which is all it exposes.
        unsafe {
            core::ptr::copy_nonoverlapping(a.as_ptr(), dst, a.len());
            if !b.is_empty() {
                core::ptr::copy_nonoverlapping(b.as_ptr(), dst.add(a.len()), b.len());
            }
        }
        Some(copy)
    }

    /// The `len` bytes of user memory at `addr`, read as a ring-3 load would (see [`copy_from`]);
    /// `Ok(None)` when they do not fit.
    pub fn from_user(addr: u64, len: u64) -> Result<Option<InlineBytes>, BadUserAddress> {
        let Some(len) = usize::try_from(len).ok().filter(|&n| n <= Self::CAPACITY) else {
            return Ok(None);
        };
        let mut copy = InlineBytes {
            len: 0,
            bytes: core::mem::MaybeUninit::uninit(),
        };
        if len > 0 {
            let dst = copy.bytes.as_mut_ptr().cast::<u8>();
            // SAFETY: the buffer has room for `len <= CAPACITY` bytes.
            unsafe { user_copy::copy_from_user_raw(dst, addr, len)? };
        }
        // The routine wrote all `len` bytes (it failed otherwise).
        copy.len = len;
        Ok(Some(copy))
    }
}

impl core::ops::Deref for InlineBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the first `len` bytes were written by the constructor (`len <= CAPACITY`).
        unsafe { core::slice::from_raw_parts(self.bytes.as_ptr().cast::<u8>(), self.len) }
    }
}

impl core::ops::DerefMut for InlineBytes {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for `deref`; the borrow of `self` is exclusive.
        unsafe { core::slice::from_raw_parts_mut(self.bytes.as_mut_ptr().cast::<u8>(), self.len) }
    }
}
