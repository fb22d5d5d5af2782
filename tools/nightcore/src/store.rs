//! The key-value store of the workloads, in memory shared by the engine and every worker.
//!
//! Fjord's store is a kernel service reached by a system call; here it is a fixed-size hash
//! table (open addressing, linear probing, no deletion: the workloads never delete) in one
//! `MAP_SHARED` anonymous mapping made before the workers are forked, behind one lock. A store
//! access is therefore not a message through the engine: the comparison with Fjord is about
//! the hops between functions. The lock spins with `sched_yield`, which is safe on one vCPU
//! (a waiter gives the CPU to the holder). Keys and values have the kernel store's limits,
//! [`MAX_KEY`] and [`MAX_VALUE`].

use core::sync::atomic::{AtomicU32, Ordering};

use fjord_libos::kv::{MAX_KEY, MAX_VALUE, key_fits};

use crate::sys;

/// Slots in the table (a power of two); the workloads keep a few hundred keys.
pub const SLOTS: usize = 4096;

/// One slot's bytes: used flag, key length, value length, key, value.
const SLOT: usize = (12 + MAX_KEY + MAX_VALUE).next_multiple_of(8);
/// The lock word and padding before the first slot.
const PREFIX: usize = 64;

/// Why a store operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreError {
    /// An empty or too long key, or a too long value.
    Limits,
    /// Every slot is taken.
    Full,
}

/// A handle on the shared table; copies in forked processes address the same memory.
#[derive(Clone, Copy, Debug)]
pub struct Store {
    base: *mut u8,
}

impl Store {
    /// Maps a new, empty table shared with processes forked afterwards.
    pub fn new_shared() -> std::io::Result<Store> {
        let base = sys::shared_memory(PREFIX + SLOTS * SLOT)?;
        Ok(Store { base })
    }

    fn lock(&self) -> &AtomicU32 {
        // SAFETY: the mapping starts with a 4-byte-aligned word (mmap returns page-aligned
        // memory) that is only ever accessed atomically, and it lives as long as the process.
        unsafe { &*self.base.cast::<AtomicU32>() }
    }

    /// Runs `f` on the table with the lock held.
    fn locked<T>(&self, f: impl FnOnce(&mut [u8]) -> T) -> T {
        while self
            .lock()
            .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            sys::yield_cpu();
        }
        // SAFETY: the slots follow the prefix inside the mapping; the lock gives this process
        // exclusive access to them until it is released below.
        let table = unsafe { core::slice::from_raw_parts_mut(self.base.add(PREFIX), SLOTS * SLOT) };
        let r = f(table);
        self.lock().store(0, Ordering::Release);
        r
    }

    /// Removes every key (between two operations' measurements, with no request in flight).
    pub fn clear(&self) {
        self.locked(|t| t.fill(0));
    }

    /// Copies the value of `key` into `out` (as much as fits); its full length, or `None`.
    pub fn get(&self, key: &[u8], out: &mut [u8]) -> Result<Option<usize>, StoreError> {
        check_key(key)?;
        Ok(self.locked(|t| {
            let (i, found) = find(t, key)?;
            if !found {
                return None;
            }
            let s = &t[i * SLOT..(i + 1) * SLOT];
            let len = word(s, 8) as usize;
            let n = len.min(out.len());
            out[..n].copy_from_slice(&s[12 + MAX_KEY..12 + MAX_KEY + n]);
            Some(len)
        }))
    }

    /// Stores `value` under `key`.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        check_key(key)?;
        if value.len() > MAX_VALUE {
            return Err(StoreError::Limits);
        }
        self.locked(|t| {
            let (i, _) = find(t, key).ok_or(StoreError::Full)?;
            let s = &mut t[i * SLOT..(i + 1) * SLOT];
            s[0..4].copy_from_slice(&1u32.to_le_bytes());
            s[4..8].copy_from_slice(&(key.len() as u32).to_le_bytes());
            s[8..12].copy_from_slice(&(value.len() as u32).to_le_bytes());
            s[12..12 + key.len()].copy_from_slice(key);
            s[12 + MAX_KEY..12 + MAX_KEY + value.len()].copy_from_slice(value);
            Ok(())
        })
    }
}

fn check_key(key: &[u8]) -> Result<(), StoreError> {
    key_fits(key.len()).then_some(()).ok_or(StoreError::Limits)
}

fn word(s: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([s[at], s[at + 1], s[at + 2], s[at + 3]])
}

/// The slot holding `key` (`true`) or the free slot where it would go (`false`); `None` when
/// the key is absent and the table full.
fn find(t: &[u8], key: &[u8]) -> Option<(usize, bool)> {
    let start = fnv1a(key) as usize & (SLOTS - 1);
    for probe in 0..SLOTS {
        let i = (start + probe) & (SLOTS - 1);
        let s = &t[i * SLOT..(i + 1) * SLOT];
        if word(s, 0) == 0 {
            return Some((i, false));
        }
        let len = word(s, 4) as usize;
        if &s[12..12 + len] == key {
            return Some((i, true));
        }
    }
    None
}

/// FNV-1a, 64 bits.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_put_overwrite_and_limits() {
        let s = Store::new_shared().unwrap();
        let mut out = [0u8; 8];
        assert_eq!(s.get(b"a", &mut out), Ok(None));
        s.put(b"a", b"hello world").unwrap();
        assert_eq!(s.get(b"a", &mut out), Ok(Some(11)));
        assert_eq!(&out, b"hello wo");
        s.put(b"a", b"hi").unwrap();
        assert_eq!(s.get(b"a", &mut out), Ok(Some(2)));
        assert_eq!(&out[..2], b"hi");
        assert_eq!(s.put(b"", b"x"), Err(StoreError::Limits));
        assert_eq!(s.put(&[1; MAX_KEY + 1], b"x"), Err(StoreError::Limits));
        assert_eq!(
            s.put(b"k", &vec![0; MAX_VALUE + 1]),
            Err(StoreError::Limits)
        );
        s.put(&[b'k'; MAX_KEY], &vec![9; MAX_VALUE]).unwrap();
        let mut big = vec![0; MAX_VALUE];
        assert_eq!(s.get(&[b'k'; MAX_KEY], &mut big), Ok(Some(MAX_VALUE)));
        assert!(big.iter().all(|&b| b == 9));
    }

    #[test]
    fn many_keys_and_a_full_table() {
        let s = Store::new_shared().unwrap();
        for i in 0..SLOTS {
            s.put(format!("key/{i}").as_bytes(), &i.to_le_bytes())
                .unwrap();
        }
        let mut out = [0u8; 8];
        for i in (0..SLOTS).step_by(97) {
            assert_eq!(s.get(format!("key/{i}").as_bytes(), &mut out), Ok(Some(8)));
            assert_eq!(usize::from_le_bytes(out), i);
        }
        assert_eq!(s.put(b"one more", b"x"), Err(StoreError::Full));
        s.put(b"key/5", b"still writable").unwrap();
        s.clear();
        assert_eq!(s.get(b"key/5", &mut out), Ok(None));
        s.put(b"one more", b"x").unwrap();
        assert_eq!(s.get(b"one more", &mut out), Ok(Some(1)));
    }
}
