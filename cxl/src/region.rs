//! The shared memory every node maps, as a trait: plain reads and writes, 8-byte atomics, and a
//! flush-and-fence.

/// Bytes per page: the header, the directory and every data page are whole pages.
pub const PAGE: u64 = 4096;

/// A memory region shared by several nodes, addressed by byte offsets from its start.
///
/// The kernel implements it over the mapped ivshmem BAR; tests over a `Vec` (`VecRegion`,
/// feature `test-region`). The crate never reads or writes outside `0..len()`, and gives the
/// 8-byte operations 8-byte aligned offsets. Words are little-endian, so a word written with
/// [`Region::store_u64`] reads back through [`Region::read`] as its little-endian bytes.
///
/// Ordering the crate relies on:
/// - [`Region::compare_exchange_u64`] is sequentially consistent (a full fence, as x86's
///   `lock cmpxchg` is): the protocol's "increment my count, then look at the state" against
///   "change the state, then look at the counts" needs it.
/// - [`Region::load_u64`] is at least an acquire load and [`Region::store_u64`] at least a
///   release store.
/// - [`Region::persist`] makes the given bytes reach the shared memory and fences, so that every
///   node reads them from then on, and a crash of this node afterwards cannot lose them.
pub trait Region {
    /// The region's size in bytes.
    fn len(&self) -> u64;

    /// Whether the region has no bytes at all.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads `buf.len()` bytes from `offset`.
    fn read(&self, offset: u64, buf: &mut [u8]);

    /// Writes `data` at `offset`.
    fn write(&self, offset: u64, data: &[u8]);

    /// The 8-byte word at `offset` (8-byte aligned), read atomically.
    fn load_u64(&self, offset: u64) -> u64;

    /// Stores `value` at `offset` (8-byte aligned) atomically.
    fn store_u64(&self, offset: u64, value: u64);

    /// Replaces the word at `offset` (8-byte aligned) with `new` if it holds `current`,
    /// atomically: `Ok(current)` if it did, else `Err(the word it found)`.
    fn compare_exchange_u64(&self, offset: u64, current: u64, new: u64) -> Result<u64, u64>;

    /// Makes the `len` bytes from `offset` reach the shared memory, then fences. A no-op on
    /// coherent memory beyond the fence (ivshmem on one host); a cache-line flush of the range
    /// plus a store fence on memory that is not coherent.
    fn persist(&self, offset: u64, len: u64);
}

impl<R: Region + ?Sized> Region for &R {
    fn len(&self) -> u64 {
        (**self).len()
    }
    fn read(&self, offset: u64, buf: &mut [u8]) {
        (**self).read(offset, buf);
    }
    fn write(&self, offset: u64, data: &[u8]) {
        (**self).write(offset, data);
    }
    fn load_u64(&self, offset: u64) -> u64 {
        (**self).load_u64(offset)
    }
    fn store_u64(&self, offset: u64, value: u64) {
        (**self).store_u64(offset, value);
    }
    fn compare_exchange_u64(&self, offset: u64, current: u64, new: u64) -> Result<u64, u64> {
        (**self).compare_exchange_u64(offset, current, new)
    }
    fn persist(&self, offset: u64, len: u64) {
        (**self).persist(offset, len);
    }
}

/// Applies `f` to the word at `offset` with a compare-exchange loop until it sticks or `f`
/// declines (`None`): the word before the change, or `Err(word)` when `f` declined.
pub(crate) fn update_u64<R: Region + ?Sized>(
    region: &R,
    offset: u64,
    f: impl Fn(u64) -> Option<u64>,
) -> Result<u64, u64> {
    let mut old = region.load_u64(offset);
    loop {
        let new = f(old).ok_or(old)?;
        match region.compare_exchange_u64(offset, old, new) {
            Ok(_) => return Ok(old),
            Err(found) => old = found,
        }
    }
}
