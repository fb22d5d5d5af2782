//! A function instance's life around its requests: taken from its pool or made (its `init` run
//! and its Groundhog snapshot taken), and given back at the request's end (restored as its
//! function's Groundhog mode says, or destroyed).

use super::warm;
use crate::groundhog::{InitLayout, Saved, Snapshot};
use crate::jord;
use crate::module::LoadedFunction;
use crate::module::instance::{
    Instance, Invocation, begin_tenant, destroy, fresh_header, heap_header, pd_failure,
};
use crate::orchestrator::InvokeFailure;
use fjord_kernel::layout::PAGE_SIZE;
use fjord_pd::PdId;

impl Instance {
    /// An instance of `f` for a request: an idle one from its pool, or a new one; marked as
    /// acting for `f`'s tenant (its key-value namespace and console budget, see
    /// [`jord::tenant`]).
    pub fn take(f: &LoadedFunction) -> Result<Instance, InvokeFailure> {
        if f.groundhog_mode() == fjord_groundhog::GroundhogMode::Fork {
            let fork = crate::module::forker().ok_or(InvokeFailure::OutOfMemory)?;
            let inst = fork(f)?;
            f.warm.note_made();
            begin_tenant(f, inst.pd);
            return Ok(inst);
        }
        if let Some(hooks) = crate::module::warm_hooks() {
            (hooks.requested)(f);
        }
        // An idle instance; else, while another request's instance awaits its restore, a new
        // one if the pools have room for it, so that this request need not wait for that
        // restore; else that restore now.
        let idle = if f.groundhog_mode().reuses() {
            crate::module::pool::take_idle(f).or_else(|| warm::take_deferred(f, true))
        } else {
            None
        };
        let inst = match idle {
            Some(inst) => inst,
            // Short of memory: one awaiting its restore, restored now; else the idle instances
            // of every function go, and it tries once more.
            None => match Instance::create_for_requests(f) {
                Err(InvokeFailure::OutOfMemory) => match warm::take_deferred(f, false) {
                    Some(inst) => inst,
                    None if warm::kept() > 0 => {
                        warm::drain();
                        Instance::create_for_requests(f)?
                    }
                    None => return Err(InvokeFailure::OutOfMemory),
                },
                r => r?,
            },
        };
        begin_tenant(f, inst.pd);
        Ok(inst)
    }

    /// A new instance of `f` ready for its first request: made, its `init` (if it has one) run
    /// with the manifest's warm-up input (or restored past its `init` from a checkpoint, when
    /// [`crate::module::WarmHooks`] give one), then snapshotted when `f`'s instances are
    /// restored between requests, or its layout after `init` recorded when they are reused as
    /// they are (mode `none`). Destroyed again on any failure.
    fn create_for_requests(f: &LoadedFunction) -> Result<Instance, InvokeFailure> {
        let restored = crate::module::warm_hooks().and_then(|h| (h.initialised)(f));
        let past_init = restored.is_some();
        let mut inst = match restored {
            Some(inst) => inst,
            None => Instance::create(f)?,
        };
        begin_tenant(f, inst.pd);
        let ready = (|| {
            if f.manifest.init && !past_init {
                inst.run_init(f)?;
            }
            let (base, len) = inst.vma(f);
            let pd = inst.pd;
            if f.groundhog_mode().restores() {
                let (snapshot, info) = jord::settled(|j| match Snapshot::take(j, pd, base, len) {
                    Ok((p, s, info)) => (Some(p), Ok((s, info))),
                    Err(e) => (None, Err(e)),
                })
                .map_err(pd_failure)?;
                inst.saved = Saved::Snapshot(alloc::boxed::Box::new(snapshot));
                f.warm
                    .note_held_beyond(info.mapped as usize + info.pages * PAGE_SIZE as usize);
                log::debug!(
                    "groundhog: snapshot of {} in {:?}: {} pages",
                    f.manifest.name.as_str(),
                    pd,
                    info.pages
                );
            } else if f.groundhog_mode() == fjord_groundhog::GroundhogMode::None {
                let layout = jord::settled(|j| match InitLayout::keep(j, pd, base, len) {
                    Ok((p, layout)) => (Some(p), Ok(layout)),
                    Err(e) => (None, Err(e)),
                })
                .map_err(pd_failure)?;
                f.warm.note_held_beyond(layout.mapped() as usize);
                inst.saved = Saved::Layout(layout);
            }
            Ok(())
        })();
        match ready {
            Ok(()) => {
                f.warm.note_made();
                Ok(inst)
            }
            Err(e) => {
                destroy(inst.pd);
                Err(e)
            }
        }
    }

    /// A fork-per-request function's zygote: a new instance of `f` that ran its `init` (if it has
    /// one), never to serve a request itself.
    pub fn create_zygote(f: &LoadedFunction) -> Result<Instance, InvokeFailure> {
        let inst = Instance::create(f)?;
        begin_tenant(f, inst.pd);
        if f.manifest.init
            && let Err(e) = inst.run_init(f)
        {
            destroy(inst.pd);
            return Err(e);
        }
        Ok(inst)
    }

    /// Runs `f`'s `init` in this new instance, on an ArgBuf holding the warm-up input: the
    /// heap header's init word asks for it (see [`fjord_libos::function::serve_stateful`]).
    fn run_init(&self, f: &LoadedFunction) -> Result<(), InvokeFailure> {
        use fjord_libos::function::{FnReturn, argbuf_capacity};
        use fjord_libos::heap::{INIT_PENDING, INIT_WORD};
        let m = &f.manifest;
        let warmup = m.warmup.as_bytes();
        let argbuf = warm::map_argbuf(argbuf_capacity(warmup.len(), 0) as u64, warmup)
            .map_err(pd_failure)?;
        let base = self.boundary - m.stack_size;
        let word = heap_header(self.boundary) - base + 8 * INIT_WORD as u64;
        let ran = (|| {
            argbuf
                .move_to(PdId::KERNEL, self.pd)
                .map_err(InvokeFailure::Refused)?;
            jord::with(|j| j.write_words(base, word, &[INIT_PENDING])).map_err(pd_failure)?;
            let deadline = crate::arch::time::deadline_after_ms(m.time_limit_ms());
            let args = [
                argbuf.base,
                warmup.len() as u64,
                argbuf.capacity,
                self.boundary,
            ];
            let v = jord::exec::call_tp(
                self.pd,
                f.entry,
                args,
                self.thread_pointer(),
                Some(deadline),
            )
            .map_err(InvokeFailure::from)?;
            let _ = argbuf.move_to(self.pd, PdId::KERNEL);
            match FnReturn::decode(v) {
                FnReturn::Response(_) => Ok(()),
                FnReturn::Error(e) => Err(InvokeFailure::Function(e)),
                FnReturn::UnknownError(_) => Err(InvokeFailure::BadResponse(v)),
            }
        })();
        argbuf.free();
        if let Err(e) = &ran {
            log::warn!("init of {}: {e}", m.name.as_str());
        }
        ran
    }

    /// Ends the request: into `f`'s pool when `reusable` (the function returned), `f`'s
    /// instances are reused and the instance is fit for reuse and the pool has room (restored
    /// to its snapshot first, in mode `restore`); destroyed otherwise.
    pub fn give_back(self, f: &LoadedFunction, reusable: bool) {
        self.give_back_with(f, reusable, warm::Finish::Now);
    }

    /// [`Instance::give_back`], with a restore that may stop for a request as `finish` says
    /// (then the instance waits in the deferred queue: [`warm::Ran::Stopped`]).
    pub fn give_back_with(
        self,
        f: &LoadedFunction,
        reusable: bool,
        finish: warm::Finish<'_>,
    ) -> warm::Ran {
        let kept = if reusable {
            self.keep(f, finish)
        } else {
            warm::Kept::Refused(self)
        };
        match kept {
            warm::Kept::Pooled => warm::Ran::Kept,
            warm::Kept::Stopped => warm::Ran::Stopped,
            warm::Kept::Refused(instance) => {
                if f.groundhog_mode().restores() {
                    crate::arch::cpu::without_interrupts(|| f.restores.lock().replaced += 1);
                }
                if f.groundhog_mode() == fjord_groundhog::GroundhogMode::Fork {
                    let keep = crate::module::fork_end().is_none_or(|ended| ended(f, instance.pd));
                    match crate::module::fork_retire().filter(|_| keep) {
                        Some(retire) => retire(f, instance),
                        None => destroy(instance.pd),
                    }
                } else {
                    destroy(instance.pd);
                }
                f.warm.note_gone();
                warm::Ran::Gone
            }
        }
    }

    /// Restores this instance as `f`'s Groundhog mode asks and keeps it in `f`'s pool, if
    /// [`warm::keep`] takes it.
    fn keep(self, f: &LoadedFunction, finish: warm::Finish<'_>) -> warm::Kept {
        use fjord_groundhog::GroundhogMode;
        let m = &f.manifest;
        let (base, len) = self.vma(f);
        let (header_offset, header) = fresh_header(m, base);
        let fresh = jord::state::InstanceLayout {
            base,
            len,
            header_offset,
            header: &header,
            memory_limit: m.memory_limit,
        };
        let how = match f.groundhog_mode() {
            GroundhogMode::Fresh | GroundhogMode::Fork => return warm::Kept::Refused(self),
            GroundhogMode::Restore => warm::Reset::Snapshot { fresh },
            GroundhogMode::None => warm::Reset::LayoutOnly { base, len },
        };
        warm::keep(f, self, how, finish)
    }
}

impl Invocation {
    /// An instance of `f` with a kernel-owned ArgBuf of `capacity` bytes holding `request`,
    /// moved to the instance's PD; everything is released again on failure.
    pub fn prepare(
        f: &LoadedFunction,
        request: &[u8],
        capacity: u64,
    ) -> Result<Invocation, InvokeFailure> {
        let instance = Instance::take(f)?;
        let argbuf = match warm::map_argbuf(capacity, request) {
            Ok(a) => a,
            Err(e) => {
                instance.give_back(f, true);
                return Err(pd_failure(e));
            }
        };
        let inv = Invocation { instance, argbuf };
        if let Err(e) = inv.argbuf.move_to(PdId::KERNEL, inv.instance.pd) {
            inv.end(f, false);
            return Err(InvokeFailure::Refused(e));
        }
        Ok(inv)
    }

    /// Ends the request: gives the instance back (to its pool when `reusable`: the function
    /// returned) and frees a kernel-owned ArgBuf.
    pub fn end(self, f: &LoadedFunction, reusable: bool) {
        self.end_with(f, reusable, warm::Finish::Now);
    }

    /// [`Invocation::end`], with a restore that may stop for a request as `finish` says.
    pub fn end_with(
        self,
        f: &LoadedFunction,
        reusable: bool,
        finish: warm::Finish<'_>,
    ) -> warm::Ran {
        let ran = self.instance.give_back_with(f, reusable, finish);
        self.argbuf.free();
        ran
    }
}
