//! Restoring a function instance for its next request (Groundhog-style reuse, Jord §3.4 and
//! the Groundhog paper): instead of `cput` after a request and `cget` plus `mmap` before the
//! next one, the executor keeps the PD with its stack and instance VMA and puts back the state
//! a fresh instance would have.

use super::{Jord, PAGE_SIZE};
use fjord_pd::{Error, PdId, Perm};

/// What a fresh instance of a function looks like: the instance VMA the executor mapped and
/// the heap header it wrote.
#[derive(Clone, Copy, Debug)]
pub struct InstanceLayout<'a> {
    /// Base of the instance VMA (stack, then heap).
    pub base: u64,
    /// Its length in bytes.
    pub len: u64,
    /// Byte offset of the heap header in the VMA.
    pub header_offset: u64,
    /// The header's words.
    pub header: &'a [u64],
    /// The PD's `mmap` allowance.
    pub memory_limit: u64,
}

impl Jord {
    /// [`Error::InvalidArgs`] unless `pd` may be a function instance: not the kernel, and a
    /// PD id Jord manages.
    pub(super) fn check_instance_pd(&self, pd: PdId) -> Result<(), Error> {
        if pd == PdId::KERNEL || pd.index() >= self.stacks.len() {
            return Err(Error::InvalidArgs);
        }
        Ok(())
    }

    /// Restores `pd`, an idle function instance whose request has ended, to the state the
    /// executor gave it before its first request: PrivLib frees every VMA it owns beyond its
    /// stack and its instance VMA and drops every right it was given (see
    /// [`fjord_pd::PrivLib::scrub_with`]), the pages of both VMAs that were touched are zeroed
    /// again, the heap header is written back and the `mmap` allowance is reset. Translations
    /// of the kept pages stay installed, so the next request takes no VLB miss on them.
    ///
    /// [`Error::Busy`] (nothing changed) when the instance is not reusable: it is running or
    /// suspended, created PDs that are still alive, or gave its own memory away; destroy it
    /// then ([`Jord::cput`] takes the PDs it created with it).
    pub fn restore_instance(
        &mut self,
        pd: PdId,
        layout: &InstanceLayout<'_>,
    ) -> Result<super::Pending, Error> {
        self.check_instance_pd(pd)?;
        if self.held_back.holds(pd) {
            self.settle_pd(pd);
        }
        let (stack, stack_len) = self.stacks[pd.index()];
        let keep = [
            (stack, stack_len, Perm::RW),
            (layout.base, layout.len, Perm::RW),
        ];
        self.scratch.clear();
        let scratch = &mut self.scratch;
        let s = self
            .privlib
            .scrub_with(PdId::KERNEL, pd, &keep, |id, _, owned| {
                if owned {
                    scratch.push(id.base());
                }
            })?;
        let pending = self.apply(&s);
        self.free_scratch_backings();
        for base in [stack, layout.base] {
            if let Some(b) = self.backing_mut(base) {
                b.rezero_initialised();
            }
        }
        debug_assert!(layout.header_offset + 8 * layout.header.len() as u64 <= layout.len);
        debug_assert!(layout.len.is_multiple_of(PAGE_SIZE));
        self.write_words(layout.base, layout.header_offset, layout.header)?;
        self.quotas[pd.index()] = (0, layout.memory_limit);
        self.stats.instances_restored += 1;
        Ok(pending)
    }
}
