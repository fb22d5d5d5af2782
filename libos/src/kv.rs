//! The kernel's key-value store: the small persistent state of the workloads (reservations,
//! posts, carts) that outlives one invocation.
//!
//! Each function sees one namespace: its application's (the manifest's `app`, shared by the
//! functions named `<app>-…`) or else its own. Keys name entries only within it; no other
//! function can read, change or delete them. A namespace holds at most the manifest's
//! `kv_quota` bytes, each entry counting its key, its value and 64 bytes.
//!
//! Function instances keep no state between requests (each starts from a fresh state), so data
//! that must persist lives here, as it would in the memcached/MongoDB tier of the original
//! applications. Keys are at most [`MAX_KEY`] bytes, values at most [`MAX_VALUE`];
//! both are copied through the kernel, like a request to a storage service.

use crate::abi::Error;

/// Longest key, in bytes.
pub const MAX_KEY: usize = 128;
/// Longest value, in bytes.
pub const MAX_VALUE: usize = 4096;

/// Whether a key of `len` bytes is allowed: not empty, at most [`MAX_KEY`].
pub const fn key_fits(len: usize) -> bool {
    len != 0 && len <= MAX_KEY
}

/// Why a store operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvError {
    /// The key or value is too large.
    TooLarge,
    /// The function's namespace holds its `kv_quota` already.
    Full,
    /// The kernel has no memory for the entry.
    NoMemory,
    /// The kernel refused the call with this error.
    Kernel(Error),
    /// Not running on Fjord (the host build of a function).
    Unsupported,
}

impl From<KvError> for crate::function::FnError {
    fn from(e: KvError) -> Self {
        match e {
            KvError::NoMemory | KvError::Full => crate::function::FnError::OutOfMemory,
            _ => crate::function::FnError::Failed,
        }
    }
}

/// Issues the store call `call` on `key` and the buffer `(ptr, len)`.
#[cfg(target_os = "none")]
fn kv_call(
    call: crate::abi::Sysno,
    key: &[u8],
    ptr: u64,
    len: usize,
) -> Result<Option<u64>, KvError> {
    let r = crate::syscall::syscall4(call, key.as_ptr() as u64, key.len() as u64, ptr, len as u64);
    match r {
        Ok(v) => Ok(Some(v)),
        Err(Some(Error::NotFound)) => Ok(None),
        Err(Some(Error::TooLarge)) => Err(KvError::TooLarge),
        Err(Some(Error::NoMemory)) => Err(KvError::NoMemory),
        Err(Some(Error::LimitReached)) => Err(KvError::Full),
        Err(Some(e)) => Err(KvError::Kernel(e)),
        Err(None) => Err(KvError::Kernel(Error::InvalidArgs)),
    }
}

/// Copies the value under `key` into `out` (as much as fits); returns the value's full length,
/// or `None` when the key has no value.
pub fn get(key: &[u8], out: &mut [u8]) -> Result<Option<usize>, KvError> {
    #[cfg(target_os = "none")]
    {
        let r = kv_call(
            crate::abi::Sysno::KvGet,
            key,
            out.as_mut_ptr() as u64,
            out.len(),
        );
        r.map(|v| v.map(|n| n as usize))
    }
    #[cfg(not(target_os = "none"))]
    {
        let _ = (key, out);
        Err(KvError::Unsupported)
    }
}

/// Stores `value` under `key`, replacing any value it had.
pub fn put(key: &[u8], value: &[u8]) -> Result<(), KvError> {
    #[cfg(target_os = "none")]
    {
        kv_call(
            crate::abi::Sysno::KvPut,
            key,
            value.as_ptr() as u64,
            value.len(),
        )
        .map(drop)
    }
    #[cfg(not(target_os = "none"))]
    {
        let _ = (key, value);
        Err(KvError::Unsupported)
    }
}

/// Removes the value under `key`; returns whether there was one.
pub fn delete(key: &[u8]) -> Result<bool, KvError> {
    #[cfg(target_os = "none")]
    {
        kv_call(crate::abi::Sysno::KvDelete, key, 0, 0).map(|v| v.is_some())
    }
    #[cfg(not(target_os = "none"))]
    {
        let _ = key;
        Err(KvError::Unsupported)
    }
}
