//! Shared prefixes: the first pages of a VMA backed by another VMA's frames, with rights of
//! their own.
//!
//! A μprocess's area starts with its program's image (see
//! [`fjord_faas::module::ProgramImage`]): the pages without writable bytes (code, read-only
//! data) are the frames of the module's one image, mapped read-execute or read-only in every
//! area of the program, while the rest of the area is the area's own read-write memory. Jord's
//! VMA hardware gives one VMA one set of rights; this extension gives a VMA's first pages the
//! rights of their segment instead, enforced per page by the leaves the VLB fill installs. A
//! page of the prefix is never writable, and no other page of the VMA executable, so memory stays
//! W^X page by page. Only the kernel sets a prefix.

use super::*;
use alloc::collections::BTreeMap;
use alloc::sync::Arc;

/// The first pages of a VMA, backed by the frames of the VMA at `source` (page `i` by its page
/// `i`) with the rights `perms[i]`.
#[derive(Clone, Debug)]
pub(super) struct SharedPrefix {
    source: u64,
    perms: Arc<[Perm]>,
}

/// Pages of a shared prefix one VLB miss maps (an aligned block around the missing page).
pub const FAULT_AROUND: usize = 16;

/// Every VMA with a shared prefix, by base.
pub(super) type SharedPrefixes = BTreeMap<u64, SharedPrefix>;

impl Jord {
    /// Backs the first `perms.len()` pages of the VMA at `base` by the frames of the VMA at
    /// `source` with rights `perms` (each without write), in place of the VMA's own rights and
    /// frames for those pages. [`Error::InvalidArgs`] if either VMA is shorter, a right includes
    /// write, or the VMA's own pages there were ever initialised.
    pub fn share_prefix(
        &mut self,
        base: u64,
        source: u64,
        perms: Arc<[Perm]>,
    ) -> Result<(), Error> {
        if perms.iter().any(|p| p.contains(Perm::W)) {
            return Err(Error::InvalidArgs);
        }
        let n = perms.len();
        let src_pages = self.backing_mut(source).ok_or(Error::NotMapped)?.pages;
        let b = self.backing_mut(base).ok_or(Error::NotMapped)?;
        if n > b.pages || n > src_pages || (0..n).any(|i| b.is_initialised(i)) {
            return Err(Error::InvalidArgs);
        }
        self.shared.insert(base, SharedPrefix { source, perms });
        Ok(())
    }

    /// The frame and rights of page `index` of the VMA at `base` if it lies in a shared prefix.
    pub(in crate::jord) fn shared_page(&mut self, base: u64, index: usize) -> Option<(u64, Perm)> {
        if self.shared.is_empty() {
            return None;
        }
        let p = self.shared.get(&base)?;
        let perm = *p.perms.get(index)?;
        let source = p.source;
        Some((self.backing_mut(source)?.frame_of(index)?, perm))
    }

    /// Copies page `index` of a shared prefix of the VMA at `base` into `buf`; `None` when the
    /// page is not in one.
    pub(super) fn read_shared_page(
        &mut self,
        base: u64,
        index: usize,
        buf: &mut [u8],
    ) -> Option<()> {
        if self.shared.is_empty() {
            return None;
        }
        let p = self.shared.get(&base)?;
        p.perms.get(index)?;
        let source = p.source;
        let b = self.backing_mut(source)?;
        b.initialise(index);
        b.frames.read_at(index * PAGE_SIZE as usize, buf);
        Some(())
    }

    /// Whether page `index` of the VMA at `base` is in a shared prefix (never written).
    pub(super) fn in_shared_prefix(&self, base: u64, index: usize) -> bool {
        !self.shared.is_empty()
            && self
                .shared
                .get(&base)
                .is_some_and(|p| index < p.perms.len())
    }

    /// After a VLB miss on page `index` of the shared prefix of the VMA at `base`, whose leaf
    /// (to the frame `pa`) went into the level-1 table `table` under `root`: installs there the
    /// leaves of the other pages of the prefix in the same aligned block of [`FAULT_AROUND`]
    /// pages (and the same 2 MiB region), as Linux maps the pages around a file fault. A
    /// program's first run of its code then takes one miss per block rather than one per page.
    /// Returns the leaves added.
    pub(in crate::jord) fn fault_around(
        &mut self,
        (root, table): (u64, u64),
        base: u64,
        (index, pa): (usize, u64),
    ) -> usize {
        let Some(prefix) = self.shared.get(&base) else {
            return 0;
        };
        // The prefix's frames are one contiguous run, page `j` at `first_frame + j` pages.
        let first_frame = pa - index as u64 * PAGE_SIZE;
        let first = index & !(FAULT_AROUND - 1);
        let end = (first + FAULT_AROUND).min(prefix.perms.len());
        let region = (base + index as u64 * PAGE_SIZE) >> 21;
        let tables = PageTables::new(root, &DIRECT);
        let mut added = 0;
        for (j, &perm) in prefix.perms[first..end].iter().enumerate() {
            let j = first + j;
            let va = base + j as u64 * PAGE_SIZE;
            if j == index || va >> 21 != region {
                continue;
            }
            let flags = crate::jord::vlb::leaf_flags(perm);
            // A page that never had a leaf here is in no TLB: nothing to flush.
            tables.install_in_table(table, va, first_frame + j as u64 * PAGE_SIZE, flags);
            added += 1;
        }
        self.stats.prefills += added as u64;
        added
    }

    /// Bytes of the VMA at `base` in a shared prefix (0 without one).
    pub(super) fn shared_prefix_len(&self, base: u64) -> u64 {
        if self.shared.is_empty() {
            return 0;
        }
        self.shared
            .get(&base)
            .map_or(0, |p| p.perms.len() as u64 * PAGE_SIZE)
    }

    /// Forgets the shared prefix of the VMA at `base`, which is going.
    pub(super) fn drop_shared_prefix(&mut self, base: u64) {
        if !self.shared.is_empty() {
            self.shared.remove(&base);
        }
    }
}
