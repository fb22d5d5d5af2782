//! The keyspace: binary-safe string keys and values in a hash table, each with an optional
//! absolute expiry in Unix milliseconds.
//!
//! Expiry is lazy, as in Redis: a key whose time has passed (`now > expire_at`, Redis's
//! `keyIsExpired`) is deleted by the next access to it; [`Db::purge_expired_step`] lets the
//! server delete some more on each tick (Redis's active expire cycle, walking the keys with an
//! expiry in order instead of sampling them), and [`Db::purge_expired`] deletes all of them.
//!
//! The table is `hashbrown`'s (SwissTable, open addressing): every key and entry sits in one
//! array of slots, as Redis's `dict` keeps one array of buckets. Keys hash with SipHash-1-3
//! under a 128-bit key ([`Db::set_hash_key`]), as Redis hashes with SipHash under a random
//! key, so clients cannot choose keys that collide. The keys with an expiry are also kept
//! in a sorted set, Redis's `expires` dict, which the active expiry walks. Keys and values of
//! up to [`INLINE`] bytes are held in the slots themselves ([`Bytes`]), longer ones in a heap
//! block of their own: a typical key (`key:000000012345` is 16 bytes) or small value costs
//! no allocation, and a forked child saving the keyspace reads the slot array and the long
//! values alone (μFork copies every page holding a pointer that a child reads, so a compact
//! array of full slots is what keeps that copy small: a B-tree built by appending keys
//! leaves its leaves half full).
//!
//! [`Db::used_bytes`] estimates the memory the keyspace holds in Fjord's heap: each key and
//! value longer than [`INLINE`] rounded up to the power-of-two block the heap gives it, plus
//! [`ENTRY_OVERHEAD`] for its share of the slot array.

use crate::glob;
use alloc::collections::BTreeSet;
use alloc::vec::Vec;
use core::hash::BuildHasher;
use core::ops::Bound;
use hashbrown::HashMap;
use hashbrown::hash_map;
use siphasher::sip::SipHasher13;
use smallvec::SmallVec;

/// Bytes a key or value holds in place (in the table's slot) before it needs a heap block.
pub const INLINE: usize = 16;

/// A key or value: in place up to [`INLINE`] bytes, else a heap block (24 bytes either way,
/// as a `Vec`).
pub type Bytes = SmallVec<[u8; INLINE]>;

/// `v` as [`Bytes`]: copied in place when short (the rest of the place zeroed), its heap
/// block kept when long.
///
/// A slot carries no stale bytes: μFork decides whether a page holds pointers by looking for
/// words that point into the μprocess's area, so leftover bytes of the stack in a short key
/// or value would make the table's pages look pointer-rich, and a saving child would copy
/// them.
fn bytes(v: Vec<u8>) -> Bytes {
    if v.len() <= INLINE {
        let mut place = [0u8; INLINE];
        place[..v.len()].copy_from_slice(&v);
        Bytes::from_buf_and_len(place, v.len())
    } else {
        Bytes::from_vec(v)
    }
}

/// Bytes an entry is estimated to cost beyond its key's and value's blocks: its 64-byte slot
/// and control byte in the table, which is between 7/16 and 7/8 full (it doubles when 7/8
/// of its slots are taken), about 2/3 on average.
pub const ENTRY_OVERHEAD: usize = 96;

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

/// An expiry in Unix milliseconds, or none: an `i64` whose every byte is set (an
/// `Option<i64>` leaves its payload's bytes undefined when it is `None`; see [`bytes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Expiry(i64);

impl Expiry {
    /// No expiry.
    const NEVER: Expiry = Expiry(i64::MIN);

    /// `t`, or none. The one time it cannot hold, `i64::MIN`, becomes the next one: both
    /// are long past.
    fn of(t: Option<i64>) -> Expiry {
        match t {
            Some(t) => Expiry(t.max(i64::MIN + 1)),
            None => Expiry::NEVER,
        }
    }

    fn get(self) -> Option<i64> {
        (self != Expiry::NEVER).then_some(self.0)
    }

    fn is_set(self) -> bool {
        self != Expiry::NEVER
    }
}

/// One key's value and expiry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    value: Bytes,
    expire_at: Expiry,
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
        self.expire_at.get()
    }

    /// Whether it has expired at `now`.
    pub fn is_expired(&self, now: i64) -> bool {
        self.expire_at.get().is_some_and(|t| now > t)
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

/// The key SipHash uses until [`Db::set_hash_key`] gives one (tests, and tools that load
/// files no client chose).
const FIXED_HASH_KEY: [u64; 2] = [0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210];

/// Builds the keyspace's hashers: SipHash-1-3 under a 128-bit key.
#[derive(Clone, Copy, Debug)]
pub struct KeyedHash {
    key: [u64; 2],
}

impl BuildHasher for KeyedHash {
    type Hasher = SipHasher13;

    fn build_hasher(&self) -> SipHasher13 {
        SipHasher13::new_with_keys(self.key[0], self.key[1])
    }
}

/// The keyspace.
#[derive(Debug)]
pub struct Db {
    map: HashMap<Bytes, Entry, KeyedHash>,
    /// The keys with an expiry, in order.
    expiring: BTreeSet<Bytes>,
    /// The estimate [`Db::used_bytes`] returns.
    used: usize,
    /// Keys deleted because they expired (`expired_keys` of `INFO stats`).
    expired_keys: u64,
    /// Where the next [`Db::purge_expired_step`] starts in [`Db::expiring`].
    cursor: Option<Bytes>,
}

impl Default for Db {
    fn default() -> Db {
        Db {
            map: HashMap::with_hasher(KeyedHash {
                key: FIXED_HASH_KEY,
            }),
            expiring: BTreeSet::new(),
            used: 0,
            expired_keys: 0,
            cursor: None,
        }
    }
}

impl Db {
    /// An empty keyspace, hashing under a fixed key until [`Db::set_hash_key`].
    pub fn new() -> Db {
        Db::default()
    }

    /// Hashes keys under `key` from now on (the keys held are moved into a new table). A
    /// server sets it once at start from random bytes (`getrandom`).
    pub fn set_hash_key(&mut self, key: [u64; 2]) {
        let table = HashMap::with_capacity_and_hasher(self.map.len(), KeyedHash { key });
        let old = core::mem::replace(&mut self.map, table);
        self.map.extend(old);
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
        self.expiring.len()
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
        if e.expire_at.is_set() {
            self.expiring.remove(&k);
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
            hash_map::Entry::Occupied(mut o) => {
                let old_cost = cost(o.key(), &o.get().value);
                let entry = o.get_mut();
                let had = entry.expire_at.is_set();
                entry.value = value;
                match ttl {
                    Ttl::Clear => entry.expire_at = Expiry::NEVER,
                    Ttl::Keep => {}
                    Ttl::At(t) => entry.expire_at = Expiry::of(Some(t)),
                }
                let has = entry.expire_at.is_set();
                self.used = self.used - old_cost + new_cost;
                if has && !had {
                    self.expiring.insert(o.key().clone());
                } else if had && !has {
                    self.expiring.remove(o.key());
                }
            }
            hash_map::Entry::Vacant(v) => {
                let expire_at = match ttl {
                    Ttl::At(t) => Expiry::of(Some(t)),
                    Ttl::Clear | Ttl::Keep => Expiry::NEVER,
                };
                self.used += new_cost;
                if expire_at.is_set() {
                    self.expiring.insert(v.key().clone());
                }
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
        match self.map.get_key_value_mut(key) {
            Some((k, e)) => {
                if !e.expire_at.is_set() {
                    self.expiring.insert(k.clone());
                }
                e.expire_at = Expiry::of(Some(at));
                true
            }
            None => false,
        }
    }

    /// Removes the expiry of `key`; whether it had one.
    pub fn persist(&mut self, key: &[u8]) -> bool {
        match self.map.get_mut(key) {
            Some(e) if e.expire_at.is_set() => {
                e.expire_at = Expiry::NEVER;
                self.expiring.remove(key);
                true
            }
            _ => false,
        }
    }

    /// Deletes every key; how many there were.
    pub fn clear(&mut self) -> usize {
        let n = self.map.len();
        self.map = HashMap::with_hasher(*self.map.hasher());
        self.expiring = BTreeSet::new();
        self.used = 0;
        self.cursor = None;
        n
    }

    /// Every key and entry, in the table's order (expired ones not yet deleted included).
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &Entry)> {
        self.map.iter().map(|(k, e)| (&k[..], e))
    }

    /// Every key and entry, sorted by key (tests compare keyspaces with it).
    #[cfg(test)]
    pub(crate) fn sorted(&self) -> Vec<(&[u8], &Entry)> {
        let mut all: Vec<_> = self.iter().collect();
        all.sort_unstable_by_key(|(k, _)| *k);
        all
    }

    /// [`Db::iter`], each entry to change in place.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&[u8], &mut Entry)> {
        self.map.iter_mut().map(|(k, e)| (&k[..], e))
    }

    /// The keys matching the glob `pattern` that have not expired at `now`, sorted (`KEYS`;
    /// Redis gives them in its table's order, which no client may rely on).
    pub fn keys_matching(&self, pattern: &[u8], now: i64) -> Vec<Vec<u8>> {
        let all = pattern == b"*";
        let mut keys: Vec<Vec<u8>> = self
            .map
            .iter()
            .filter(|(k, e)| (all || glob::matches(pattern, k, false)) && !e.is_expired(now))
            .map(|(k, _)| k.to_vec())
            .collect();
        keys.sort_unstable();
        keys
    }

    /// Adds the keys read from an RDB file, in any order (a later one replaces an earlier one
    /// of the same name), as [`Db::insert_loaded`] one by one would, with the table sized for
    /// all of them first (it does not grow, and rehash, on the way).
    pub fn load_all(&mut self, keys: Vec<(Vec<u8>, Vec<u8>, Option<i64>)>) {
        self.map.reserve(keys.len());
        for (key, value, expire_at) in keys {
            self.insert_loaded(key, value, expire_at);
        }
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
        let dead: Vec<Bytes> = self
            .expiring
            .iter()
            .filter(|k| self.map.get(&k[..]).is_some_and(|e| e.is_expired(now)))
            .cloned()
            .collect();
        for k in &dead {
            self.remove_entry(k);
        }
        self.expired_keys += dead.len() as u64;
        dead.len()
    }

    /// Looks at up to `budget` keys with an expiry after where the last call stopped (wrapping
    /// around) and deletes those expired at `now`; how many it deleted.
    pub fn purge_expired_step(&mut self, now: i64, budget: usize) -> usize {
        if self.expiring.is_empty() || budget == 0 {
            return 0;
        }
        let start = match &self.cursor {
            Some(k) => Bound::Excluded(&k[..]),
            None => Bound::Unbounded,
        };
        let mut dead = Vec::new();
        let mut last = None;
        let mut seen = 0;
        for k in self.expiring.range::<[u8], _>((start, Bound::Unbounded)) {
            if seen == budget {
                break;
            }
            seen += 1;
            if self.map.get(&k[..]).is_some_and(|e| e.is_expired(now)) {
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
    fn short_keys_and_values_live_in_the_slots_and_long_ones_keep_their_block() {
        assert_eq!(
            core::mem::size_of::<Bytes>(),
            core::mem::size_of::<Vec<u8>>()
        );
        // A slot of the table: key, value and expiry, no padding.
        assert_eq!(core::mem::size_of::<(Bytes, Entry)>(), 56);
        let mut db = Db::new();
        let long = vec![7u8; 4096];
        let block = long.as_ptr();
        db.set(k("key:000000012345"), long, Ttl::Clear);
        db.set(k("b"), k("0123456789abcdef"), Ttl::Clear);
        let (key, e) = db.map.get_key_value(&b"b"[..]).unwrap();
        assert_eq!((&key[..], key.spilled()), (&b"b"[..], false));
        assert_eq!(
            (e.value(), e.value.spilled()),
            (&b"0123456789abcdef"[..], false)
        );
        let (key, e) = db.map.get_key_value(&b"key:000000012345"[..]).unwrap();
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
    fn the_earliest_expiry_is_an_expiry() {
        let mut db = Db::new();
        db.insert_loaded(k("old"), k("v"), Some(i64::MIN));
        assert_eq!(db.expires_len(), 1);
        assert_eq!(db.peek(b"old").unwrap().expire_at(), Some(i64::MIN + 1));
        assert!(db.get(b"old", i64::MIN + 2).is_none());
        assert_eq!(db.expires_len(), 0);
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
        assert_eq!(at_once.sorted(), one_by_one.sorted());
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
        assert_eq!(more.sorted(), one_by_one.sorted());
        assert_eq!(more.used_bytes(), one_by_one.used_bytes());
    }

    #[test]
    fn a_new_hash_key_keeps_every_key() {
        let mut db = Db::new();
        for i in 0..1000u32 {
            let ttl = if i % 4 == 0 {
                Ttl::At(i64::from(i))
            } else {
                Ttl::Clear
            };
            db.set(
                alloc::format!("k{i}").into_bytes(),
                i.to_le_bytes().to_vec(),
                ttl,
            );
        }
        let before: Vec<(Vec<u8>, Entry)> = db
            .sorted()
            .into_iter()
            .map(|(k, e)| (k.to_vec(), e.clone()))
            .collect();
        let used = db.used_bytes();
        db.set_hash_key([1, 2]);
        let after: Vec<(Vec<u8>, Entry)> = db
            .sorted()
            .into_iter()
            .map(|(k, e)| (k.to_vec(), e.clone()))
            .collect();
        assert_eq!(before, after);
        assert_eq!(
            (db.len(), db.expires_len(), db.used_bytes()),
            (1000, 250, used)
        );
        assert_eq!(
            db.get(b"k999", 0).map(|e| e.value()),
            Some(&999u32.to_le_bytes()[..])
        );
    }

    /// What the keyspace should hold: key to value and expiry.
    type Model = alloc::collections::BTreeMap<Vec<u8>, (Vec<u8>, Option<i64>)>;

    proptest::proptest! {
        /// Whatever sequence of writes, expiries and deletes, the table agrees with a sorted
        /// map doing the same, and the set of keys with an expiry is exactly theirs.
        #[test]
        fn the_table_agrees_with_a_sorted_map(ops in proptest::collection::vec(
            (0u8..7, 0u8..24, 0usize..40, 0i64..60), 0..300,
        )) {
            let mut db = Db::new();
            let mut model = Model::new();
            for (op, key, len, t) in ops {
                let k = alloc::format!("key{key}").into_bytes();
                let now = 30;
                // What a lazy expiry at `now` does to the model before a read or delete.
                let expire = |m: &mut Model| {
                    if m.get(&k).is_some_and(|(_, e)| e.is_some_and(|e| now > e)) {
                        m.remove(&k);
                    }
                };
                match op {
                    0 => {
                        db.set(k.clone(), alloc::vec![key; len], Ttl::Clear);
                        model.insert(k, (alloc::vec![key; len], None));
                    }
                    1 => {
                        db.set(k.clone(), alloc::vec![key; len], Ttl::At(t));
                        model.insert(k, (alloc::vec![key; len], Some(t)));
                    }
                    2 => {
                        db.set(k.clone(), alloc::vec![key; len], Ttl::Keep);
                        let keep = model.get(&k).and_then(|(_, e)| *e);
                        model.insert(k, (alloc::vec![key; len], keep));
                    }
                    3 => {
                        let had = db.set_expire(&k, t);
                        proptest::prop_assert_eq!(had, model.contains_key(&k));
                        if let Some(v) = model.get_mut(&k) {
                            v.1 = Some(t);
                        }
                    }
                    4 => {
                        let had = db.persist(&k);
                        let want = model.get(&k).is_some_and(|(_, e)| e.is_some());
                        proptest::prop_assert_eq!(had, want);
                        if let Some(v) = model.get_mut(&k) {
                            v.1 = None;
                        }
                    }
                    5 => {
                        expire(&mut model);
                        proptest::prop_assert_eq!(db.remove(&k, now), model.remove(&k).is_some());
                    }
                    _ => {
                        db.purge_expired_step(now, 3);
                        let dead: Vec<Vec<u8>> = model
                            .iter()
                            .filter(|(_, (_, e))| e.is_some_and(|e| now > e))
                            .map(|(k, _)| k.clone())
                            .filter(|k| db.peek(k).is_none())
                            .collect();
                        for k in dead {
                            model.remove(&k);
                        }
                    }
                }
                let got: Model = db
                    .sorted()
                    .into_iter()
                    .map(|(k, e)| (k.to_vec(), (e.value().to_vec(), e.expire_at())))
                    .collect();
                proptest::prop_assert_eq!(db.len(), model.len());
                proptest::prop_assert_eq!(&got, &model);
                let expiring: Vec<&[u8]> = db.expiring.iter().map(|k| &k[..]).collect();
                let want: Vec<&[u8]> = model
                    .iter()
                    .filter(|(_, (_, e))| e.is_some())
                    .map(|(k, _)| &k[..])
                    .collect();
                proptest::prop_assert_eq!(expiring, want);
            }
            let with_ttl = model.values().filter(|(_, e)| e.is_some()).count();
            proptest::prop_assert_eq!(db.purge_expired(1_000), with_ttl);
            proptest::prop_assert_eq!(db.expires_len(), 0);
        }
    }
}
