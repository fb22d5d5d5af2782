//! The kernel's key-value store (the `kv_get` / `kv_put` / `kv_delete` system calls): one
//! bounded hash map of byte keys and values per *namespace*.
//!
//! Function instances start fresh for every request, so the workloads keep their persistent
//! state (reservations, posts, carts, counters) here, as the original applications keep it in
//! memcached or MongoDB. Every deployed function acts in one namespace: its application's (the
//! manifest's `app`, shared by the functions named `<app>-…`) or else its own, named after it.
//! A function names keys only within its namespace, so no other tenant can read, overwrite or
//! delete them.
//!
//! Each namespace holds at most its *quota* of bytes, counting every entry as its key, its value
//! and [`ENTRY_OVERHEAD`]; the quotas of all namespaces together stay within the store's
//! capacity, reserved when a namespace is created. A tenant that fills its namespace therefore
//! gets [`KvError::Full`] without taking room from any other. A namespace lives while a deployed
//! function uses it; when the last one is removed, its data goes with it.

use crate::fnv::{FnvBuild, FnvHashMap};
use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;

/// The key and value limits of the function ABI (`fjord_libos::kv`), which the store enforces.
pub use fjord_libos::kv::{MAX_KEY, MAX_VALUE, key_fits};

/// Bytes every entry counts besides its key and value (the map's own bookkeeping), so a
/// namespace full of empty values is bounded too.
pub const ENTRY_OVERHEAD: usize = 64;

/// A namespace's id: stable while it lives, never reused after.
pub type NsId = u32;

/// Why the store refused an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvError {
    /// The key is empty or longer than [`MAX_KEY`], or the value longer than [`MAX_VALUE`].
    TooLarge,
    /// The namespace holds its quota already.
    Full,
    /// No namespace has this id (its functions were all removed).
    NoNamespace,
    /// The store's capacity is reserved by other namespaces: no room for this quota.
    NoRoom,
}

/// What a namespace holds, for `/metrics`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Usage {
    /// The namespace's name.
    pub name: String,
    /// Entries held.
    pub entries: usize,
    /// Bytes counted against the quota.
    pub bytes: usize,
    /// The quota.
    pub quota: usize,
    /// Puts refused because the namespace was full.
    pub refused: u64,
}

/// One namespace: its entries and what they count.
#[derive(Debug)]
struct Namespace {
    name: String,
    map: FnvHashMap<Vec<u8>, Vec<u8>>,
    bytes: usize,
    quota: usize,
    refused: u64,
    /// Deployed functions acting in it.
    users: usize,
}

/// Namespaces of byte keys and values with fixed bounds.
#[derive(Debug, Default)]
pub struct KvStore {
    namespaces: BTreeMap<NsId, Namespace>,
    by_name: BTreeMap<String, NsId>,
    next: NsId,
    /// Bytes the quotas of all namespaces may add up to.
    capacity: usize,
    /// Sum of the quotas of the namespaces.
    reserved: usize,
}

/// Bytes an entry counts against its namespace's quota.
fn cost(key: &[u8], value: &[u8]) -> usize {
    key.len() + value.len() + ENTRY_OVERHEAD
}

impl KvStore {
    /// An empty store whose namespaces' quotas may add up to `capacity` bytes.
    pub const fn new(capacity: usize) -> Self {
        KvStore {
            namespaces: BTreeMap::new(),
            by_name: BTreeMap::new(),
            next: 1,
            capacity,
            reserved: 0,
        }
    }

    /// Sets what the namespaces' quotas may add up to (namespaces already made stay).
    pub fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity;
    }

    /// Bytes of capacity not reserved by any namespace.
    pub fn unreserved(&self) -> usize {
        self.capacity.saturating_sub(self.reserved)
    }

    /// A deployed function acts in namespace `name` with at least `quota` bytes: makes the
    /// namespace (reserving its quota) or joins it (raising its quota to `quota` if larger).
    /// [`KvError::NoRoom`] when the capacity cannot cover the quota; nothing changes then.
    pub fn attach(&mut self, name: &str, quota: usize) -> Result<NsId, KvError> {
        if let Some(&id) = self.by_name.get(name) {
            let ns = self.namespaces.get_mut(&id).ok_or(KvError::NoNamespace)?;
            let more = quota.saturating_sub(ns.quota);
            if more > self.capacity.saturating_sub(self.reserved) {
                return Err(KvError::NoRoom);
            }
            self.reserved += more;
            ns.quota += more;
            ns.users += 1;
            return Ok(id);
        }
        if quota > self.capacity.saturating_sub(self.reserved) {
            return Err(KvError::NoRoom);
        }
        let id = self.next;
        self.next += 1;
        self.reserved += quota;
        self.by_name.insert(String::from(name), id);
        self.namespaces.insert(
            id,
            Namespace {
                name: String::from(name),
                map: FnvHashMap::with_hasher(FnvBuild),
                bytes: 0,
                quota,
                refused: 0,
                users: 1,
            },
        );
        Ok(id)
    }

    /// A function acting in namespace `id` was removed (or replaced): the last one takes the
    /// namespace, its data and its reservation with it.
    pub fn detach(&mut self, id: NsId) {
        let Some(ns) = self.namespaces.get_mut(&id) else {
            return;
        };
        ns.users = ns.users.saturating_sub(1);
        if ns.users == 0 {
            let ns = self.namespaces.remove(&id).expect("looked up above");
            self.reserved -= ns.quota;
            self.by_name.remove(&ns.name);
        }
    }

    /// The id of the namespace `name`, if it exists.
    pub fn namespace(&self, name: &str) -> Option<NsId> {
        self.by_name.get(name).copied()
    }

    /// The value under `key` in namespace `ns`.
    pub fn get(&self, ns: NsId, key: &[u8]) -> Result<Option<&[u8]>, KvError> {
        let ns = self.namespaces.get(&ns).ok_or(KvError::NoNamespace)?;
        Ok(ns.map.get(key).map(Vec::as_slice))
    }

    /// Stores `value` under `key` in namespace `ns`, replacing any old value.
    pub fn put(&mut self, ns: NsId, key: &[u8], value: &[u8]) -> Result<(), KvError> {
        if !key_fits(key.len()) || value.len() > MAX_VALUE {
            return Err(KvError::TooLarge);
        }
        let ns = self.namespaces.get_mut(&ns).ok_or(KvError::NoNamespace)?;
        let old = ns.map.get(key).map_or(0, |v| cost(key, v));
        let bytes = ns.bytes - old + cost(key, value);
        if bytes > ns.quota {
            ns.refused += 1;
            return Err(KvError::Full);
        }
        match ns.map.get_mut(key) {
            Some(v) => {
                v.clear();
                v.extend_from_slice(value);
            }
            None => {
                ns.map.insert(key.to_vec(), value.to_vec());
            }
        }
        ns.bytes = bytes;
        Ok(())
    }

    /// Removes the value under `key` in namespace `ns`; returns whether there was one.
    pub fn delete(&mut self, ns: NsId, key: &[u8]) -> Result<bool, KvError> {
        let ns = self.namespaces.get_mut(&ns).ok_or(KvError::NoNamespace)?;
        match ns.map.remove_entry(key) {
            Some((k, v)) => {
                ns.bytes -= cost(&k, &v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Entries held over all namespaces.
    pub fn len(&self) -> usize {
        self.namespaces.values().map(|n| n.map.len()).sum()
    }

    /// Whether no namespace holds an entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What each namespace holds, by name.
    pub fn usage(&self) -> Vec<Usage> {
        let mut v: Vec<Usage> = self
            .namespaces
            .values()
            .map(|n| Usage {
                name: n.name.clone(),
                entries: n.map.len(),
                bytes: n.bytes,
                quota: n.quota,
                refused: n.refused,
            })
            .collect();
        v.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// Removes every entry of every namespace (the namespaces stay).
    pub fn clear(&mut self) {
        for ns in self.namespaces.values_mut() {
            ns.map.clear();
            ns.bytes = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_get_replace_delete() {
        let mut s = KvStore::new(1 << 20);
        let a = s.attach("a", 4096).unwrap();
        assert_eq!(s.get(a, b"k"), Ok(None));
        s.put(a, b"k", b"1").unwrap();
        s.put(a, b"k", b"22").unwrap();
        assert_eq!(s.get(a, b"k"), Ok(Some(&b"22"[..])));
        s.put(a, b"e", b"").unwrap();
        assert_eq!(s.get(a, b"e"), Ok(Some(&b""[..])));
        assert_eq!(s.usage()[0].bytes, 3 + 1 + 2 * ENTRY_OVERHEAD);
        assert_eq!(s.delete(a, b"k"), Ok(true));
        assert_eq!(s.delete(a, b"k"), Ok(false));
        assert_eq!(s.get(a, b"k"), Ok(None));
        assert_eq!(s.usage()[0].bytes, 1 + ENTRY_OVERHEAD);
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn namespaces_do_not_see_each_other() {
        let mut s = KvStore::new(1 << 20);
        let hotel = s.attach("hotel", 4096).unwrap();
        let evil = s.attach("evil", 4096).unwrap();
        s.put(hotel, b"rsv/1", b"alice").unwrap();
        assert_eq!(s.get(evil, b"rsv/1"), Ok(None));
        s.put(evil, b"rsv/1", b"mallory").unwrap();
        assert_eq!(s.delete(evil, b"rsv/1"), Ok(true));
        assert_eq!(s.get(hotel, b"rsv/1"), Ok(Some(&b"alice"[..])));
        // Functions of one application share its namespace.
        assert_eq!(s.attach("hotel", 1024), Ok(hotel));
        assert_eq!(s.namespace("hotel"), Some(hotel));
    }

    #[test]
    fn a_full_namespace_refuses_only_itself() {
        let mut s = KvStore::new(8192);
        let a = s.attach("a", 4096).unwrap();
        let b = s.attach("b", 4096).unwrap();
        let mut i = 0u32;
        while s.put(a, &i.to_le_bytes(), b"x").is_ok() {
            i += 1;
        }
        assert_eq!(i as usize, 4096 / (4 + 1 + ENTRY_OVERHEAD));
        assert_eq!(s.put(a, b"more", b""), Err(KvError::Full));
        assert_eq!(s.usage()[0].refused, 2);
        // Replacing within the quota still works, and the other namespace has all its room.
        s.put(a, &0u32.to_le_bytes(), b"y").unwrap();
        s.put(b, b"k", &[7; 1000]).unwrap();
        // No quota beyond the capacity: the reservations are all taken.
        assert_eq!(s.attach("c", 1), Err(KvError::NoRoom));
        assert_eq!(s.attach("a", 4097), Err(KvError::NoRoom));
        assert_eq!(s.unreserved(), 0);
    }

    #[test]
    fn the_last_function_takes_its_namespace_away() {
        let mut s = KvStore::new(8192);
        let a = s.attach("a", 4096).unwrap();
        assert_eq!(s.attach("a", 4096), Ok(a));
        s.put(a, b"k", b"v").unwrap();
        s.detach(a);
        assert_eq!(s.get(a, b"k"), Ok(Some(&b"v"[..])));
        s.detach(a);
        assert_eq!(s.get(a, b"k"), Err(KvError::NoNamespace));
        assert_eq!(s.put(a, b"k", b"v"), Err(KvError::NoNamespace));
        assert_eq!(s.unreserved(), 8192);
        // A namespace made again under the same name has a new id and nothing of the old.
        let again = s.attach("a", 4096).unwrap();
        assert_ne!(again, a);
        assert_eq!(s.get(again, b"k"), Ok(None));
    }

    #[test]
    fn bounds_are_enforced() {
        let mut s = KvStore::new(1 << 20);
        let a = s.attach("a", 1 << 20).unwrap();
        assert_eq!(s.put(a, b"", b"x"), Err(KvError::TooLarge));
        assert_eq!(s.put(a, &[1; MAX_KEY + 1], b"x"), Err(KvError::TooLarge));
        assert_eq!(s.put(a, b"k", &[0; MAX_VALUE + 1]), Err(KvError::TooLarge));
        s.put(a, b"k", b"v").unwrap();
        s.clear();
        assert!(s.is_empty());
        assert_eq!(s.usage()[0].bytes, 0);
    }
}
