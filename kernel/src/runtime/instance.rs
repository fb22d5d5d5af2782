//! A function instance and its ArgBuf: what one request of a function runs in.
//!
//! An [`Instance`] is a PD with its creation stack and its *instance VMA* (the manifest's stack,
//! then its heap, with the heap allocator's header at the top of the stack region), taken from
//! the function's pool of idle instances ([`super::warm`]) or made new, and given back when the
//! request ends: restored into the pool if the function returned and the pool has room,
//! destroyed otherwise (with every PD the request created). An [`ArgBuf`] is the request's
//! buffer: a kernel-owned VMA the kernel fills (an external request, a copied hop) or the
//! caller's own VMA moved in (a nested call). An [`Invocation`] is the two together. A new
//! instance runs its function's `init` and, in isolation mode `restore`, is snapshotted before
//! its first request (see `docs/groundhog.md`).

use super::LoadedFunction;
use super::invoke::InvokeFailure;
use super::warm;
use crate::jord::{self, state::Handoff};
use fjord_faas::module::Manifest;
use fjord_kernel::layout::PAGE_SIZE;
use fjord_pd::{Error as PdError, MapFlags, PdId, Perm};

/// A PD with its stack and instance VMA, serving one request of its function at a time.
#[derive(Debug)]
pub struct Instance {
    /// Its PD.
    pub pd: PdId,
    /// The memory boundary: stack below, heap above.
    pub boundary: u64,
}

impl Instance {
    /// An instance of `f` for a request: an idle one from its pool, or a new one; marked as
    /// acting for `f`'s tenant (its key-value namespace and console budget, see
    /// [`jord::tenant`]).
    pub fn take(f: &LoadedFunction) -> Result<Instance, InvokeFailure> {
        // An idle instance; else, while another request's instance awaits its restore, a new
        // one if the pools have room for it, so that this request need not wait for that
        // restore; else that restore now.
        let idle = if f.isolation().reuses() {
            warm::take_idle(f).or_else(|| warm::take_deferred(f, true))
        } else {
            None
        };
        let inst = match idle {
            Some((pd, boundary)) => Instance { pd, boundary },
            // Short of memory: one awaiting its restore, restored now; else the idle instances
            // of every function go, and it tries once more.
            None => match Instance::create_for_requests(f) {
                Err(InvokeFailure::OutOfMemory) => match warm::take_deferred(f, false) {
                    Some((pd, boundary)) => Instance { pd, boundary },
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
    /// with the manifest's warm-up input, then snapshotted when `f`'s instances are restored
    /// between requests, or its layout after `init` recorded when they are reused as they are
    /// (mode `none`). Destroyed again on any failure.
    fn create_for_requests(f: &LoadedFunction) -> Result<Instance, InvokeFailure> {
        let inst = Instance::create(f)?;
        begin_tenant(f, inst.pd);
        let ready = (|| {
            if f.manifest.init {
                inst.run_init(f)?;
            }
            let (base, len) = inst.vma(f);
            if f.isolation().restores() {
                let (pending, info) =
                    jord::with(|j| j.take_snapshot(inst.pd, base, len)).map_err(pd_failure)?;
                pending.finish();
                f.warm
                    .note_held_beyond(info.mapped as usize + info.pages * PAGE_SIZE as usize);
                log::debug!(
                    "groundhog: snapshot of {} in {:?}: {} pages",
                    f.manifest.name.as_str(),
                    inst.pd,
                    info.pages
                );
            } else if f.isolation() == fjord_groundhog::IsolationMode::None {
                let (pending, mapped) =
                    jord::with(|j| j.keep_init_layout(inst.pd, base, len)).map_err(pd_failure)?;
                pending.finish();
                f.warm.note_held_beyond(mapped as usize);
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

    /// Runs `f`'s `init` in this new instance, on an ArgBuf holding the warm-up input: the
    /// heap header's init word asks for it (see [`fjord_libos::function::serve_stateful`]).
    fn run_init(&self, f: &LoadedFunction) -> Result<(), InvokeFailure> {
        use fjord_libos::function::{FnReturn, argbuf_capacity};
        use fjord_libos::heap::{INIT_PENDING, INIT_WORD};
        let m = &f.manifest;
        let warmup = m.warmup.as_bytes();
        let argbuf =
            ArgBuf::map(argbuf_capacity(warmup.len(), 0) as u64, warmup).map_err(pd_failure)?;
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
            .map_err(super::invoke::exec_failure)?;
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
        let ran = if reusable {
            self.keep(f, finish)
        } else {
            warm::Ran::Gone
        };
        if ran == warm::Ran::Gone {
            if f.isolation().restores() {
                crate::arch::cpu::without_interrupts(|| f.restores.lock().replaced += 1);
            }
            destroy(self.pd);
            f.warm.note_gone();
        }
        ran
    }

    /// The instance VMA of this instance of `f` (base, length): its stack, then its heap,
    /// ending at the boundary.
    fn vma(&self, f: &LoadedFunction) -> (u64, u64) {
        let m = &f.manifest;
        (self.boundary - m.stack_size, m.stack_size + m.heap_size)
    }

    /// Restores this instance as `f`'s isolation mode asks and keeps it in `f`'s pool, if
    /// [`warm::keep`] takes it.
    fn keep(&self, f: &LoadedFunction, finish: warm::Finish<'_>) -> warm::Ran {
        use fjord_groundhog::IsolationMode;
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
        let how = match f.isolation() {
            IsolationMode::Fresh => return warm::Ran::Gone,
            IsolationMode::Restore => warm::Reset::Snapshot { fresh },
            IsolationMode::None => warm::Reset::LayoutOnly { base, len },
        };
        warm::keep(f, self.pd, self.boundary, how, finish)
    }

    /// The thread pointer the function runs with: its heap header.
    pub fn thread_pointer(&self) -> u64 {
        heap_header(self.boundary)
    }

    /// A new PD for `f` with its instance VMA and heap header, its memory allowance and its
    /// bound on the PDs it may create (not from the pool: a μprocess's area, too).
    pub fn create(f: &LoadedFunction) -> Result<Instance, InvokeFailure> {
        Self::create_with(f, true)
    }

    /// [`Instance::create`] without the heap header: for a forked μprocess, whose stack
    /// region's top page (the header's) is its parent's copy.
    pub fn create_for_fork(f: &LoadedFunction) -> Result<Instance, InvokeFailure> {
        Self::create_with(f, false)
    }

    fn create_with(f: &LoadedFunction, header: bool) -> Result<Instance, InvokeFailure> {
        let m = &f.manifest;
        let mut owed = None;
        let r = jord::with(|j| {
            let pd = j.cget(PdId::KERNEL)?;
            j.set_memory_limit(pd, m.memory_limit);
            // Cannot fail: the kernel just made `pd`.
            let _ = j.set_pd_limit(pd, m.max_pds);
            match map_instance(j, pd, f, header) {
                Ok(boundary) => Ok(Instance { pd, boundary }),
                Err(e) => {
                    owed = j.cput(PdId::KERNEL, pd).ok();
                    Err(e)
                }
            }
        });
        if let Some(p) = owed {
            p.finish();
        }
        r.map_err(pd_failure)
    }
}

/// Marks `pd` as acting for `f`'s tenant (its key-value namespace and console budget).
fn begin_tenant(f: &LoadedFunction, pd: PdId) {
    let log_limit = u32::try_from(f.manifest.log_limit).unwrap_or(u32::MAX);
    jord::tenant::begin(pd, f.namespace, log_limit);
}

/// Destroys `pd` with everything it owns and every PD it created.
pub fn destroy(pd: PdId) {
    let _ = jord::flushed(|j| j.cput(PdId::KERNEL, pd));
}

/// Maps `pd`'s instance VMA for `f` (a program's image, see [`super::ProgramArea`], then the
/// stack, then the heap) and, when `header`, writes the heap allocator's header at the top of
/// the stack region; returns the memory boundary. A program's image pages without writable bytes are the frames of
/// its module's image; its private part is left to the caller (a new μprocess writes it, a
/// forked one copies its parent's). On failure the VMA goes with the PD.
fn map_instance(
    j: &mut jord::state::Jord,
    pd: PdId,
    f: &LoadedFunction,
    header: bool,
) -> Result<u64, PdError> {
    let m = &f.manifest;
    let image = f.image_in_area();
    let instance = j.mmap(
        pd,
        image + m.stack_size + m.heap_size,
        Perm::RW,
        MapFlags::default(),
    )?;
    if let Some(p) = &f.program {
        j.share_prefix(instance, f.image.base, p.shared.clone())?;
    }
    if header {
        let (offset, words) = fresh_header(m, instance + image);
        j.write_words(instance, image + offset, &words)?;
    }
    Ok(instance + image + m.stack_size)
}

/// The heap header a fresh instance of a function with manifest `m` starts with, when its stack
/// region starts at `base`: its byte offset from there and its words.
fn fresh_header(m: &Manifest, base: u64) -> (u64, [u64; 4]) {
    let boundary = base + m.stack_size;
    let header = heap_header(boundary);
    (
        header - base,
        fjord_libos::heap::header_words(header, boundary, m.heap_size),
    )
}

/// Where the heap header of an instance whose memory boundary is `boundary` lives: the top
/// [`HEADER_BYTES`](fjord_libos::heap::HEADER_BYTES) of its stack region. The function runs
/// with it as its thread pointer.
fn heap_header(boundary: u64) -> u64 {
    boundary - fjord_libos::heap::HEADER_BYTES
}

/// The invocation failure for a PrivLib error of the sequence.
pub(super) fn pd_failure(e: PdError) -> InvokeFailure {
    match e {
        PdError::NoMemory => InvokeFailure::OutOfMemory,
        e => InvokeFailure::Refused(e),
    }
}

/// A request's ArgBuf: the request at its start, the response room after it.
#[derive(Debug)]
pub struct ArgBuf {
    /// Base of the VMA.
    pub base: u64,
    /// Its size in bytes (whole pages).
    pub capacity: u64,
    /// Whether the kernel owns it (it frees it when the request ends).
    kernels: bool,
}

impl ArgBuf {
    /// A kernel-owned ArgBuf of `capacity` bytes holding `request` at its start, the rest
    /// zeroed (draining idle instances once if memory is short).
    pub fn map(capacity: u64, request: &[u8]) -> Result<ArgBuf, PdError> {
        warm::or_drain(
            || ArgBuf::map_once(capacity, request),
            |e| *e == PdError::NoMemory,
        )
    }

    fn map_once(capacity: u64, request: &[u8]) -> Result<ArgBuf, PdError> {
        let mut owed = None;
        let r = jord::with(|j| {
            let base = j.mmap(PdId::KERNEL, capacity, Perm::RW, MapFlags::default())?;
            match j.vma_write(base, 0, request) {
                Ok(()) => Ok(ArgBuf {
                    base,
                    capacity,
                    kernels: true,
                }),
                Err(e) => {
                    owed = j.munmap(PdId::KERNEL, base, capacity).ok();
                    Err(e)
                }
            }
        });
        if let Some(p) = owed {
            p.finish();
        }
        r
    }

    /// A caller's ArgBuf VMA of `capacity` bytes at `base`, handed on to a callee.
    pub fn callers(base: u64, capacity: u64) -> ArgBuf {
        ArgBuf {
            base,
            capacity,
            kernels: false,
        }
    }

    /// Whether the kernel owns it (it frees it when the request ends).
    pub fn is_kernels(&self) -> bool {
        self.kernels
    }

    /// A copy of the `len` bytes at byte `offset` of a kernel-owned ArgBuf (the response, read
    /// once the call ended); `None` for a caller's or beyond its end.
    pub fn read(&self, offset: usize, len: usize) -> Option<alloc::vec::Vec<u8>> {
        if !self.kernels {
            return None;
        }
        jord::with(|j| j.vma_bytes(self.base, offset as u64, len)).ok()
    }

    /// Moves the buffer from `from` to `to` (read-write) and, `to` being a PD about to run,
    /// installs its leaves for the buffer at once (see `Handoff::prefill`).
    pub fn move_to(&self, from: PdId, to: PdId) -> Result<(), PdError> {
        move_between(self.base, from, to, Handoff::TO_NEXT)
    }

    /// [`ArgBuf::move_to`] from `from`, the PD running on this CPU, which is suspended before
    /// it runs again: its leaves for the buffer may be held back (see `Handoff::leaving`).
    pub fn move_leaving(&self, from: PdId, to: PdId) -> Result<(), PdError> {
        move_between(self.base, from, to, Handoff::CALL)
    }

    /// Frees a kernel-owned ArgBuf (every right left on it is revoked); a caller's stays.
    pub fn free(self) {
        if self.kernels {
            let _ = jord::flushed(|j| j.munmap(PdId::KERNEL, self.base, self.capacity));
        }
    }
}

fn move_between(base: u64, from: PdId, to: PdId, how: Handoff) -> Result<(), PdError> {
    jord::flushed(|j| j.pmove_with(from, base, to, Perm::RW, how))
}

/// An instance and the ArgBuf of its request.
#[derive(Debug)]
pub struct Invocation {
    /// The instance.
    pub instance: Instance,
    /// Its request's ArgBuf.
    pub argbuf: ArgBuf,
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
        let argbuf = match ArgBuf::map(capacity, request) {
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
