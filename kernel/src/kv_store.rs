//! The kernel's key-value store (the `kv_get` / `kv_put` system calls): a bounded hash map of
//! byte keys and values.
//!
//! Function instances start fresh for every request, so the workloads keep their persistent state
//! (reservations, posts, carts, counters) here, as the original applications keep it in
//! memcached or MongoDB. The store bounds key and value sizes, the number of entries and the
//! total bytes, and refuses what exceeds them instead of growing without limit.

use crate::fnv::{FnvBuild, FnvHashMap};
use alloc::vec::Vec;

/// The key and value limits of the function ABI (`fjord_libos::kv`), which the store enforces.
pub use fjord_libos::kv::{MAX_KEY, MAX_VALUE, key_fits};
/// Most entries held at once.
pub const MAX_ENTRIES: usize = 16 * 1024;
/// Most key and value bytes held at once.
pub const MAX_BYTES: usize = 16 << 20;

/// Why the store refused an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvError {
    /// The key is empty or longer than [`MAX_KEY`], or the value longer than [`MAX_VALUE`].
    TooLarge,
    /// The store holds [`MAX_ENTRIES`] entries or [`MAX_BYTES`] bytes already.
    Full,
}

/// A map from byte keys to byte values with fixed bounds.
#[derive(Debug, Default)]
pub struct KvStore {
    map: FnvHashMap<Vec<u8>, Vec<u8>>,
    bytes: usize,
}

impl KvStore {
    /// An empty store.
    pub const fn new() -> Self {
        KvStore {
            map: FnvHashMap::with_hasher(FnvBuild),
            bytes: 0,
        }
    }

    /// The value under `key`.
    pub fn get(&self, key: &[u8]) -> Option<&[u8]> {
        self.map.get(key).map(Vec::as_slice)
    }

    /// Stores `value` under `key`, replacing any old value.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), KvError> {
        if !key_fits(key.len()) || value.len() > MAX_VALUE {
            return Err(KvError::TooLarge);
        }
        match self.map.get_mut(key) {
            Some(old) => {
                let bytes = self.bytes - old.len() + value.len();
                if bytes > MAX_BYTES {
                    return Err(KvError::Full);
                }
                old.clear();
                old.extend_from_slice(value);
                self.bytes = bytes;
            }
            None => {
                let bytes = self.bytes + key.len() + value.len();
                if self.map.len() >= MAX_ENTRIES || bytes > MAX_BYTES {
                    return Err(KvError::Full);
                }
                self.map.insert(key.to_vec(), value.to_vec());
                self.bytes = bytes;
            }
        }
        Ok(())
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Key and value bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Removes every entry.
    pub fn clear(&mut self) {
        self.map.clear();
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_get_replace() {
        let mut s = KvStore::new();
        assert_eq!(s.get(b"a"), None);
        s.put(b"a", b"1").unwrap();
        s.put(b"a", b"22").unwrap();
        assert_eq!(s.get(b"a"), Some(&b"22"[..]));
        assert_eq!((s.len(), s.bytes()), (1, 3));
        s.put(b"b", b"").unwrap();
        assert_eq!(s.get(b"b"), Some(&b""[..]));
    }

    #[test]
    fn bounds_are_enforced() {
        let mut s = KvStore::new();
        assert_eq!(s.put(b"", b"x"), Err(KvError::TooLarge));
        assert_eq!(s.put(&[1; MAX_KEY + 1], b"x"), Err(KvError::TooLarge));
        assert_eq!(s.put(b"k", &[0; MAX_VALUE + 1]), Err(KvError::TooLarge));
        for i in 0..MAX_ENTRIES {
            s.put(&(i as u64).to_le_bytes(), b"").unwrap();
        }
        assert_eq!(s.put(b"one more", b""), Err(KvError::Full));
        s.put(&0u64.to_le_bytes(), b"replacing is fine").unwrap();
        s.clear();
        assert!(s.is_empty());
    }
}
