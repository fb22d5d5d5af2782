//! Creating and destroying PDs (`cget`, `cput`), their bounds, and their page tables.

use super::*;

impl Jord {
    /// Frees the root tables kept for reuse, with the intermediate tables they kept (which
    /// grow with the addresses their PDs used); returns how many roots went.
    pub fn trim_root_cache(&mut self) -> usize {
        let n = self.root_cache.len();
        for root in self.root_cache.drain(..) {
            PageTables::new(root, &DIRECT).free_user_tables(&mut KernelFrames);
        }
        n
    }

    /// The root table of `pd` (the kernel's own for PD 0).
    pub fn root_of(&self, pd: PdId) -> u64 {
        if pd == PdId::KERNEL {
            kernel_tables::kernel_root()
        } else if self.shared_root != 0 {
            self.shared_root
        } else {
            self.roots[pd.index()]
        }
    }

    /// The physical address `pd`'s own table maps `addr` to, if it holds a leaf for it (a
    /// present leaf need not be usable: see [`HeldBack`]).
    pub fn leaf_of(&self, pd: PdId, addr: u64) -> Option<u64> {
        let root = self.root_of(pd);
        PageTables::new(root, &DIRECT)
            .translate(addr)
            .map(|t| t.phys)
    }

    /// The level-1 table Jord remembers as `pd`'s for the 2 MiB region of `addr`, if any (see
    /// [`LeafHints`]); for tests.
    pub fn leaf_hint(&self, pd: PdId, addr: u64) -> Option<u64> {
        self.leaf_hints.get(pd.index(), addr)
    }

    /// The top of `pd`'s stack VMA.
    pub fn stack_top(&self, pd: PdId) -> u64 {
        let (base, len) = self.stacks[pd.index()];
        base + len
    }

    /// `cget`: a new PD with its own root table (unless Jord_NI) and a stack VMA.
    pub fn cget(&mut self, caller: PdId) -> Result<PdId, Error> {
        self.cget_with(caller, true)
    }

    /// [`Jord::cget`] of a PD that is never called into (a μprocess, which runs on the stack
    /// in its area from a saved context): no creation stack, so its [`Jord::stack_top`] is 0
    /// and a `ccall` into it has no stack to run on.
    pub fn cget_without_stack(&mut self, caller: PdId) -> Result<PdId, Error> {
        self.cget_with(caller, false)
    }

    fn cget_with(&mut self, caller: PdId, stack: bool) -> Result<PdId, Error> {
        let cid = self.privlib.cget(caller)?;
        crate::jord::tenant::adopt(cid, caller);
        if self.shared_root == 0 {
            let root = match self.root_cache.pop() {
                Some(r) => Ok(r),
                None => PageTables::create_sharing_kernel(
                    &DIRECT,
                    &mut KernelFrames,
                    kernel_tables::kernel_root(),
                )
                .map(|pt| pt.root()),
            };
            match root {
                Ok(r) => {
                    self.roots[cid.index()] = r;
                    self.leaf_hints.forget(cid.index());
                }
                Err(_) => {
                    let _ = self.privlib.cput(PdId::KERNEL, cid);
                    return Err(Error::NoMemory);
                }
            }
        }
        if stack {
            match self.mmap(cid, PD_STACK_SIZE, Perm::RW, MapFlags::default()) {
                Ok(base) => self.stacks[cid.index()] = (base, PD_STACK_SIZE),
                Err(e) => {
                    let _ = self.cput(PdId::KERNEL, cid);
                    return Err(e);
                }
            }
        }
        // The creation stack is not charged to the PD's `mmap` allowance.
        self.quotas[cid.index()] = (0, u64::MAX);
        self.stats.pds_created += 1;
        Ok(cid)
    }

    /// Bounds the PDs `root` (a PD the kernel created for a function instance) and the PDs it
    /// creates may create, all together, to `limit` besides `root`: `cget` then fails with
    /// [`Error::LimitReached`] instead of exhausting the PD table.
    pub fn set_pd_limit(&mut self, root: PdId, limit: u16) -> Result<(), Error> {
        self.privlib.set_tree_limit(PdId::KERNEL, root, limit)
    }

    /// `cput`: destroys `cid`, every PD it created (directly or not), and their VMAs, and
    /// recycles their root tables. Nothing changes unless every one of them may go (none is
    /// running or waiting for a callee).
    pub fn cput(&mut self, caller: PdId, cid: PdId) -> Result<Pending, Error> {
        // The per-PD arrays hold MAX_LIVE_PDS entries (PrivLib's ids go further): refuse
        // beyond them before indexing; PrivLib checks the rest.
        if cid.index() >= self.roots.len() {
            return Err(Error::NoSuchPd);
        }
        if self.privlib.pds().children(cid).is_empty() {
            self.cput_one(caller, cid)
        } else {
            self.cput_tree(caller, cid)
        }
    }

    /// [`Jord::cput`] of a PD that created PDs: every one may go, or nothing changes.
    #[cold]
    fn cput_tree(&mut self, caller: PdId, cid: PdId) -> Result<Pending, Error> {
        self.privlib.check_cput(caller, cid)?;
        let descendants = self.privlib.pds().descendants(cid);
        for &d in &descendants {
            self.privlib.check_cput(PdId::KERNEL, d)?;
        }
        let mut pending = Pending::default();
        for d in descendants {
            pending.absorb(self.cput_one(PdId::KERNEL, d)?);
        }
        pending.absorb(self.cput_one(caller, cid)?);
        Ok(pending)
    }

    /// Destroys `cid` alone (PDs it created pass to the kernel; see [`Jord::cput`]); `cid` is
    /// below `MAX_LIVE_PDS`, and PrivLib checks the call before anything changes.
    pub(super) fn cput_one(&mut self, caller: PdId, cid: PdId) -> Result<Pending, Error> {
        // The PD's root table is recycled: as PrivLib walks what the PD owned or was granted,
        // clear exactly those leaves from it (Global leaves stay valid for any PD) and keep
        // its tables for reuse. Note which VMAs it owns: their frames are freed once the
        // shootdown let them go.
        if self.held_back.holds(cid) {
            self.settle_pd(cid);
        }
        let root = self.roots[cid.index()];
        self.scratch.clear();
        let scratch = &mut self.scratch;
        let mut pt = PageTables::new(root, &DIRECT);
        let s = self.privlib.cput_with(caller, cid, |id, len, owned| {
            if owned {
                scratch.push(id.base());
            }
            if root == 0 {
                return;
            }
            let len = len.next_multiple_of(PAGE_SIZE);
            if len >= 2 << 20 {
                // The root is kept for reuse: drop the tables a large VMA (a μprocess area)
                // filled, or every later unmap of that range walks them again.
                pt.unmap_range_freeing(id.base(), len, &mut KernelFrames);
            } else {
                pt.unmap_range(id.base(), len);
            }
        })?;
        self.roots[cid.index()] = 0;
        self.leaf_hints.forget(cid.index());
        let p = self.apply(&s);
        if root != 0 {
            if self.root_cache.len() < ROOT_CACHE {
                self.root_cache.push(root);
            } else {
                PageTables::new(root, &DIRECT).free_user_tables(&mut KernelFrames);
            }
        }
        self.free_scratch_backings();
        let mut p = p;
        p.absorb(core::mem::take(&mut self.pager_owed));
        self.stacks[cid.index()] = (0, 0);
        self.quotas[cid.index()] = (0, u64::MAX);
        self.unwatch_leaves(cid);
        self.stats.pds_destroyed += 1;
        Ok(p)
    }

    /// Frees the backing frames of the VMAs listed in `scratch` (VMAs just freed) and empties
    /// the list, keeping its storage.
    pub(super) fn free_scratch_backings(&mut self) {
        let mut freed = core::mem::take(&mut self.scratch);
        for &b in &freed {
            self.free_backing(b);
        }
        freed.clear();
        self.scratch = freed;
    }
}
