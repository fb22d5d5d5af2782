//! The keyspace: binary-safe string keys and values in a `BTreeMap`, each with an optional
//! absolute expiry in Unix milliseconds.
//!
//! Expiry is lazy, as in Redis: a key whose time has passed (`now > expire_at`, Redis's
//! `keyIsExpired`) is deleted by the next access to it; [`Db::purge_expired_step`] lets the
//! server delete some more on each tick (Redis's active expire cycle, without sampling), and
//! [`Db::purge_expired`] deletes all of them.
//!
//! `BTreeMap` rather than a hash map: no hasher to seed (no hash flooding), `KEYS` comes out
//! sorted, and it needs no dependency. Keys and values of up to [`INLINE`] bytes are held in
//! the tree's nodes themselves ([`Bytes`]), longer ones in a heap block of their own: a
//! typical key (`key:000000012345` is 16 bytes) or small value costs no allocation, and a
//! forked child saving the keyspace reads the nodes and the long values alone, not pages of
//! small blocks (μFork copies every page holding a pointer that a child reads).
//! [`Db::used_bytes`] estimates the memory the keyspace holds in Fjord's heap: each key and
//! value longer than [`INLINE`] rounded up to the power-of-two block the heap gives it, plus
//! [`ENTRY_OVERHEAD`] for its share of the tree's nodes.

use crate::glob;
use alloc::collections::BTreeMap;
use alloc::collections::btree_map;
use alloc::vec::Vec;
use core::ops::Bound;
use smallvec::SmallVec;

/// Bytes a key or value holds in place (in the tree's node) before it needs a heap block.
pub const INLINE: usize = 16;

/// A key or value: in place up to [`INLINE`] bytes, else a heap block (24 bytes either way,
/// as a `Vec`).
pub type Bytes = SmallVec<[u8; INLINE]>;

/// `v` as [`Bytes`]: copied in place when short, its heap block kept when long.
fn bytes(v: Vec<u8>) -> Bytes {
    if v.len() <= INLINE {
        Bytes::from_slice(&v)
    } else {
        Bytes::from_vec(v)
    }
}

/// Bytes an entry is estimated to cost beyond its key's and value's blocks: its slot in a
/// B-tree leaf (an 11-slot leaf of 24-byte keys and 40-byte entries is a 1 KiB block, about
/// 8 slots used on average).
pub const ENTRY_OVERHEAD: usize = 128;

/// The heap block a key or value of `len` bytes takes (Fjord's heap: powers of two, at least
/// 16; none when it is held in place).
fn block(len: usize) -> usize {
    if len <= INLINE {
        0
    } else {
        len.next_power_of_two()
    }
}

fn cost(key: &[u8], value: &[u8]) -> usize {
    ENTRY_OVERHEAD + block(key.len()) + block(value.len())
}

/// One key's value and expiry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    value: Bytes,
    expire_at: Option<i64>,
}

impl Entry {
    /// The value.
    pub fn value(&self) -> &[u8] {
        &self.value
    }

    /// The value's bytes, to change in place (its length stays): what a saving child hands
    /// to `discard` once it has written them.
    pub fn value_mut(&mut self) -> &mut [u8] {
        &mut self.value
    }

    /// When it expires (Unix milliseconds), if it does.
    pub fn expire_at(&self) -> Option<i64> {
        self.expire_at
    }

    /// Whether it has expired at `now`.
    pub fn is_expired(&self, now: i64) -> bool {
        self.expire_at.is_some_and(|t| now > t)
    }
}

/// What a write does to the key's expiry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ttl {
    /// Removes it (a plain `SET`).
    Clear,
    /// Keeps the existing one (`SET ... KEEPTTL`, `INCR`).
    Keep,
    /// Sets it to this Unix time in milliseconds.
    At(i64),
}

/// The keyspace.
#[derive(Debug, Default)]
pub struct Db {
    map: BTreeMap<Bytes, Entry>,
    /// Keys with an expiry.
    expires: usize,
    /// The estimate [`Db::used_bytes`] returns.
    used: usize,
    /// Keys deleted because they expired (`expired_keys` of `INFO stats`).
    expired_keys: u64,
    /// Where the next [`Db::purge_expired_step`] starts.
    cursor: Option<Bytes>,
}

impl Db {
    /// An empty keyspace.
    pub fn new() -> Db {
        Db::default()
    }

    /// The number of keys (expired ones not yet deleted included, as Redis's `DBSIZE`).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether it has no keys.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The number of keys with an expiry.
    pub fn expires_len(&self) -> usize {
        self.expires
    }

    /// The estimated bytes of heap the keyspace holds.
    pub fn used_bytes(&self) -> usize {
        self.used
    }

    /// Keys deleted so far because they expired.
    pub fn expired_keys(&self) -> u64 {
        self.expired_keys
    }

    /// Restarts [`Db::expired_keys`] from 0 (`CONFIG RESETSTAT`).
    pub fn reset_stats(&mut self) {
        self.expired_keys = 0;
    }

    fn remove_entry(&mut self, key: &[u8]) -> Option<Entry> {
        let (k, e) = self.map.remove_entry(key)?;
        self.used -= cost(&k, &e.value);
        if e.expire_at.is_some() {
            self.expires -= 1;
        }
        Some(e)
    }

    /// Deletes `key` if it expired at `now`; whether it did.
    fn expire_if_needed(&mut self, key: &[u8], now: i64) -> bool {
        if self.map.get(key).is_some_and(|e| e.is_expired(now)) {
            self.remove_entry(key);
            self.expired_keys += 1;
            true
        } else {
            false
        }
    }

    /// The entry of `key` at `now` (deleting it first if it expired).
    pub fn get(&mut self, key: &[u8], now: i64) -> Option<&Entry> {
        self.expire_if_needed(key, now);
        self.map.get(key)
    }

    /// The entry of `key`, expired or not, without deleting anything.
    pub fn peek(&self, key: &[u8]) -> Option<&Entry> {
        self.map.get(key)
    }

    /// Whether `key` exists at `now` (deleting it first if it expired).
    pub fn contains(&mut self, key: &[u8], now: i64) -> bool {
        self.get(key, now).is_some()
    }

    /// Sets `key` to `value`, its expiry as `ttl` says (with [`Ttl::Keep`] a new key has
    /// none).
    pub fn set(&mut self, key: Vec<u8>, value: Vec<u8>, ttl: Ttl) {
        let new_cost = cost(&key, &value);
        let value = bytes(value);
        match self.map.entry(bytes(key)) {
            btree_map::Entry::Occupied(mut o) => {
                let old_cost = cost(o.key(), &o.get().value);
                let entry = o.get_mut();
                let had = entry.expire_at.is_some();
                entry.value = value;
                match ttl {
                    Ttl::Clear => entry.expire_at = None,
                    Ttl::Keep => {}
                    Ttl::At(t) => entry.expire_at = Some(t),
                }
                let has = entry.expire_at.is_some();
                self.used = self.used - old_cost + new_cost;
                self.expires = self.expires + usize::from(has) - usize::from(had);
            }
            btree_map::Entry::Vacant(v) => {
                let expire_at = match ttl {
                    Ttl::At(t) => Some(t),
                    Ttl::Clear | Ttl::Keep => None,
                };
                self.expires += usize::from(expire_at.is_some());
                self.used += new_cost;
                v.insert(Entry { value, expire_at });
            }
        }
    }

    /// Appends `data` to the value of `key` (creating it empty first); the new length.
    pub fn append(&mut self, key: &[u8], data: &[u8], now: i64) -> usize {
        self.expire_if_needed(key, now);
        if let Some((k, entry)) = self.map.get_key_value(key) {
            let old_cost = cost(k, &entry.value);
            let new_len = entry.value.len() + data.len();
            let new_cost = ENTRY_OVERHEAD + block(k.len()) + block(new_len);
            if let Some(entry) = self.map.get_mut(key) {
                entry.value.extend_from_slice(data);
            }
            self.used = self.used - old_cost + new_cost;
            new_len
        } else {
            self.set(key.to_vec(), data.to_vec(), Ttl::Clear);
            data.len()
        }
    }

    /// Deletes `key`; whether it existed at `now` (an expired key is deleted too, but
    /// counted as missing).
    pub fn remove(&mut self, key: &[u8], now: i64) -> bool {
        if self.expire_if_needed(key, now) {
            return false;
        }
        self.remove_entry(key).is_some()
    }

    /// Sets the expiry of the existing `key`; whether it exists.
    pub fn set_expire(&mut self, key: &[u8], at: i64) -> bool {
        match self.map.get_mut(key) {
            Some(e) => {
                if e.expire_at.is_none() {
                    self.expires += 1;
                }
                e.expire_at = Some(at);
                true
            }
            None => false,
        }
    }

    /// Removes the expiry of `key`; whether it had one.
    pub fn persist(&mut self, key: &[u8]) -> bool {
        match self.map.get_mut(key) {
            Some(e) if e.expire_at.is_some() => {
                e.expire_at = None;
                self.expires -= 1;
                true
            }
            _ => false,
        }
    }

    /// Deletes every key; how many there were.
    pub fn clear(&mut self) -> usize {
        let n = self.map.len();
        self.map = BTreeMap::new();
        self.expires = 0;
        self.used = 0;
        self.cursor = None;
        n
    }

    /// Every key and entry, in key order (expired ones not yet deleted included).
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &Entry)> {
        self.map.iter().map(|(k, e)| (&k[..], e))
    }

    /// [`Db::iter`], each entry to change in place.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&[u8], &mut Entry)> {
        self.map.iter_mut().map(|(k, e)| (&k[..], e))
    }

    /// The keys matching the glob `pattern` that have not expired at `now`, in order (`KEYS`).
    pub fn keys_matching(&self, pattern: &[u8], now: i64) -> Vec<Vec<u8>> {
        let all = pattern == b"*";
        self.map
            .iter()
            .filter(|(k, e)| (all || glob::matches(pattern, k, false)) && !e.is_expired(now))
            .map(|(k, _)| k.to_vec())
            .collect()
    }

    /// Adds the keys read from an RDB file, in any order (a later one replaces an earlier one
    /// of the same name), as [`Db::insert_loaded`] one by one would. An empty keyspace is built
    /// in one pass from the sorted keys, which fills the tree's nodes: inserting keys in order
    /// leaves every leaf about half full, so the tree would take about twice the pages (and a
    /// forked saving child would copy them all, as they hold pointers).
    pub fn load_all(&mut self, keys: Vec<(Vec<u8>, Vec<u8>, Option<i64>)>) {
        if !self.map.is_empty() {
            for (key, value, expire_at) in keys {
                self.insert_loaded(key, value, expire_at);
            }
            return;
        }
        // `from_iter` sorts stably and keeps the last of equal keys.
        self.map = keys
            .into_iter()
            .map(|(k, v, expire_at)| {
                (
                    bytes(k),
                    Entry {
                        value: bytes(v),
                        expire_at,
                    },
                )
            })
            .collect();
        self.used = self.map.iter().map(|(k, e)| cost(k, &e.value)).sum();
        self.expires = self.map.values().filter(|e| e.expire_at.is_some()).count();
    }

    /// Adds a key read from an RDB file (replacing one of the same name).
    pub fn insert_loaded(&mut self, key: Vec<u8>, value: Vec<u8>, expire_at: Option<i64>) {
        let ttl = match expire_at {
            Some(t) => Ttl::At(t),
            None => Ttl::Clear,
        };
        self.set(key, value, ttl);
    }

    /// Deletes every key expired at `now`; how many.
    pub fn purge_expired(&mut self, now: i64) -> usize {
        if self.expires == 0 {
            return 0;
        }
        let dead: Vec<Bytes> = self
            .map
            .iter()
            .filter(|(_, e)| e.is_expired(now))
            .map(|(k, _)| k.clone())
            .collect();
        for k in &dead {
            self.remove_entry(k);
        }
        self.expired_keys += dead.len() as u64;
        dead.len()
    }

    /// Looks at up to `budget` keys after where the last call stopped (wrapping around) and
    /// deletes those expired at `now`; how many it deleted.
    pub fn purge_expired_step(&mut self, now: i64, budget: usize) -> usize {
        if self.expires == 0 || budget == 0 {
            return 0;
        }
        let start = match &self.cursor {
            Some(k) => Bound::Excluded(&k[..]),
            None => Bound::Unbounded,
        };
        let mut dead = Vec::new();
        let mut last = None;
        let mut seen = 0;
        for (k, e) in self.map.range::<[u8], _>((start, Bound::Unbounded)) {
            if seen == budget {
                break;
            }
            seen += 1;
            if e.is_expired(now) {
                dead.push(k.clone());
            }
            last = Some(k);
        }
        self.cursor = if seen == budget { last.cloned() } else { None };
        for k in &dead {
            self.remove_entry(k);
        }
        self.expired_keys += dead.len() as u64;
        dead.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn k(s: &str) -> Vec<u8> {
        s.as_bytes().to_vec()
    }

    #[test]
    fn set_get_and_lazy_expiry() {
        let mut db = Db::new();
        db.set(k("a"), k("1"), Ttl::Clear);
        db.set(k("b"), k("2"), Ttl::At(1000));
        assert_eq!(db.len(), 2);
        assert_eq!(db.expires_len(), 1);
        assert_eq!(db.get(b"b", 1000).map(|e| e.value()), Some(&b"2"[..]));
        assert_eq!(db.get(b"b", 1001), None);
        assert_eq!(db.len(), 1);
        assert_eq!(db.expires_len(), 0);
        assert_eq!(db.expired_keys(), 1);
        db.set(k("a"), k("3"), Ttl::Keep);
        assert_eq!(db.peek(b"a").unwrap().expire_at(), None);
        db.set_expire(b"a", 5);
        db.set(k("a"), k("4"), Ttl::Keep);
        assert_eq!(db.peek(b"a").unwrap().expire_at(), Some(5));
        db.set(k("a"), k("5"), Ttl::Clear);
        assert_eq!(db.peek(b"a").unwrap().expire_at(), None);
        assert_eq!(db.expires_len(), 0);
    }

    #[test]
    fn used_bytes_tracks_every_change() {
        let mut db = Db::new();
        assert_eq!(db.used_bytes(), 0);
        db.set(k("key"), vec![0; 1000], Ttl::Clear);
        assert_eq!(db.used_bytes(), ENTRY_OVERHEAD + 1024);
        db.append(b"key", &[0; 100], 0);
        assert_eq!(db.used_bytes(), ENTRY_OVERHEAD + 2048);
        db.set(k("key"), k(""), Ttl::Clear);
        assert_eq!(db.used_bytes(), ENTRY_OVERHEAD);
        db.set(k("a-key-of-17-bytes"), k("x"), Ttl::Clear);
        assert_eq!(db.used_bytes(), 2 * ENTRY_OVERHEAD + 32);
        assert!(db.remove(b"a-key-of-17-bytes", 0));
        assert!(db.remove(b"key", 0));
        assert_eq!(db.used_bytes(), 0);
        db.set(k("x"), k("y"), Ttl::At(0));
        db.purge_expired(1);
        assert_eq!((db.used_bytes(), db.len()), (0, 0));
    }

    #[test]
    fn short_keys_and_values_live_in_the_tree_and_long_ones_keep_their_block() {
        assert_eq!(
            core::mem::size_of::<Bytes>(),
            core::mem::size_of::<Vec<u8>>()
        );
        let mut db = Db::new();
        let long = vec![7u8; 4096];
        let block = long.as_ptr();
        db.set(k("key:000000012345"), long, Ttl::Clear);
        db.set(k("b"), k("0123456789abcdef"), Ttl::Clear);
        let (key, e) = db.map.iter().next().unwrap();
        assert_eq!((&key[..], key.spilled()), (&b"b"[..], false));
        assert_eq!(
            (e.value(), e.value.spilled()),
            (&b"0123456789abcdef"[..], false)
        );
        let (key, e) = db.map.iter().nth(1).unwrap();
        assert!(!key.spilled() && e.value.spilled());
        assert_eq!(
            e.value().as_ptr(),
            block,
            "a long value keeps the block it came in"
        );
        db.append(b"b", b"!", 0);
        assert_eq!(db.peek(b"b").unwrap().value(), b"0123456789abcdef!");
        assert_eq!(db.keys_matching(b"*", 0), [k("b"), k("key:000000012345")]);
    }

    #[test]
    fn removing_an_expired_key_reports_missing() {
        let mut db = Db::new();
        db.set(k("a"), k("1"), Ttl::At(10));
        assert!(!db.remove(b"a", 11));
        assert!(db.is_empty());
    }

    #[test]
    fn purge_steps_cover_every_key() {
        let mut db = Db::new();
        for i in 0..100 {
            let ttl = if i % 3 == 0 { Ttl::At(50) } else { Ttl::Clear };
            db.set(alloc::format!("k{i:03}").into_bytes(), k("v"), ttl);
        }
        let mut purged = 0;
        for _ in 0..12 {
            purged += db.purge_expired_step(100, 10);
        }
        assert_eq!(purged, 34);
        assert_eq!(db.len(), 66);
        assert_eq!(db.expires_len(), 0);
        assert_eq!(db.purge_expired_step(100, 10), 0);
    }

    #[test]
    fn keys_skip_expired_and_match_globs() {
        let mut db = Db::new();
        db.set(k("user:1"), k("a"), Ttl::Clear);
        db.set(k("user:2"), k("b"), Ttl::At(5));
        db.set(k("other"), k("c"), Ttl::Clear);
        db.set(k(""), k("d"), Ttl::Clear);
        assert_eq!(
            db.keys_matching(b"user:*", 0),
            vec![k("user:1"), k("user:2")]
        );
        assert_eq!(db.keys_matching(b"user:*", 6), vec![k("user:1")]);
        assert_eq!(
            db.keys_matching(b"*", 6),
            vec![k(""), k("other"), k("user:1")]
        );
        assert_eq!(db.keys_matching(b"**", 6), vec![k("other"), k("user:1")]);
        assert_eq!(db.len(), 4);
    }

    #[test]
    fn a_keyspace_loaded_at_once_is_the_one_inserted_key_by_key() {
        let mut keys = Vec::new();
        for i in 0..500u32 {
            // Out of order, some twice (the later wins), some with an expiry, short and long.
            let k = alloc::format!("k{:04}", (i * 7919) % 450).into_bytes();
            let v = alloc::vec![b'a' + (i % 26) as u8; (i as usize * 13) % 40];
            keys.push((k, v, (i % 5 == 0).then_some(i64::from(i) + 1_000)));
        }
        let mut one_by_one = Db::new();
        for (k, v, t) in keys.clone() {
            one_by_one.insert_loaded(k, v, t);
        }
        let mut at_once = Db::new();
        at_once.load_all(keys.clone());
        assert!(at_once.iter().eq(one_by_one.iter()));
        assert_eq!(
            (at_once.len(), at_once.expires_len(), at_once.used_bytes()),
            (
                one_by_one.len(),
                one_by_one.expires_len(),
                one_by_one.used_bytes()
            )
        );
        // Into a keyspace that has keys: one by one.
        let mut more = Db::new();
        more.set(b"k0001".to_vec(), b"old".to_vec(), Ttl::Clear);
        more.load_all(keys);
        assert!(more.iter().eq(one_by_one.iter()));
        assert_eq!(more.used_bytes(), one_by_one.used_bytes());
    }
}
