//! An instance of a deployed module and the ArgBuf of a request: what one request of a function,
//! or one μprocess of a program, runs in.
//!
//! An [`Instance`] is a PD with its creation stack (a function's; a μprocess runs on the stack in
//! its area) and its *instance VMA* (the manifest's stack, then its heap, with the heap
//! allocator's header at the top of the stack region). For a
//! request it is taken from the function's pool of idle instances ([`super::pool`]) or made new,
//! and given back when the request ends (`crate::module::warm`): restored into the pool if the
//! function returned and the pool has room, destroyed otherwise (with every PD the request
//! created). An [`ArgBuf`] is the request's
//! buffer: a kernel-owned VMA the kernel fills (an external request, a copied hop) or the
//! caller's own VMA moved in (a nested call). An [`Invocation`] is the two together. A new
//! instance runs its function's `init` and, in Groundhog mode `restore`, is snapshotted before
//! its first request (see `docs/groundhog.md`).

use super::LoadedFunction;
use crate::jord::{self, state::Handoff};
use crate::orchestrator::InvokeFailure;
use fjord_faas::module::Manifest;
use fjord_pd::{Error as PdError, MapFlags, PdId, Perm};

/// A PD with its stack and instance VMA, serving one request of its function at a time.
#[derive(Debug)]
pub struct Instance {
    /// Its PD.
    pub pd: PdId,
    /// The memory boundary: stack below, heap above.
    pub boundary: u64,
    /// What it holds for its reuse (its Groundhog snapshot or layout), freed with it.
    pub saved: crate::groundhog::Saved,
    /// For an ended μprocess's instance kept by its program: PrivLib's change counter of its
    /// PD after the scrub that emptied it (a PD unchanged since needs no scrub the next time).
    pub scrubbed: Option<u64>,
}

impl Instance {
    /// The instance VMA of this instance of `f` (base, length): its stack, then its heap,
    /// ending at the boundary.
    pub fn vma(&self, f: &LoadedFunction) -> (u64, u64) {
        let m = &f.manifest;
        (self.boundary - m.stack_size, m.stack_size + m.heap_size)
    }

    /// The thread pointer the function runs with: its heap header.
    pub fn thread_pointer(&self) -> u64 {
        heap_header(self.boundary)
    }

    /// A new PD for `f` with its instance VMA and heap header, its memory allowance and its
    /// bound on the PDs it may create (not from the pool: a μprocess's area, too).
    pub fn create(f: &LoadedFunction) -> Result<Instance, InvokeFailure> {
        Self::create_with(f, true, None)
    }

    /// [`Instance::create`] without the heap header: for a forked μprocess, whose stack
    /// region's top page (the header's) is its parent's copy.
    pub fn create_for_fork(f: &LoadedFunction) -> Result<Instance, InvokeFailure> {
        Self::create_with(f, false, None)
    }

    /// [`Instance::create`] of a function whose instances are not forked, with its instance VMA
    /// at `base` when that slot is free (a warm instance restored from a checkpoint: nothing
    /// to relocate), elsewhere otherwise.
    pub fn create_at(f: &LoadedFunction, base: u64) -> Result<Instance, InvokeFailure> {
        Self::create_with(f, true, Some(base))
    }

    /// [`Instance::create_for_fork`] whose area lies at `base` when that slot is free (a clone
    /// restored where its checkpoint's area was: nothing to relocate), elsewhere otherwise.
    pub fn create_for_fork_at(f: &LoadedFunction, base: u64) -> Result<Instance, InvokeFailure> {
        Self::create_with(f, false, Some(base))
    }

    /// This instance of an ended μprocess of program `f`, kept with its area emptied
    /// (`crate::module::pool::put_spare`), made ready for a new μprocess: its area's frames
    /// committed again and, when `header`, the heap header written (a forked child's comes
    /// from its parent). Its PD when memory is short (the caller destroys it).
    pub fn reuse(self, f: &LoadedFunction, header: bool) -> Result<Instance, PdId> {
        let m = &f.manifest;
        let image = f.image_in_area();
        let base = self.boundary - m.stack_size - image;
        let ready = jord::with(|j| {
            j.refill_area(base)?;
            if header {
                let (offset, words) = fresh_header(m, base + image);
                j.write_words(base, image + offset, &words)?;
            }
            Ok::<_, PdError>(())
        });
        match ready {
            Ok(()) => Ok(self),
            Err(_) => Err(self.pd),
        }
    }

    fn create_with(
        f: &LoadedFunction,
        header: bool,
        at: Option<u64>,
    ) -> Result<Instance, InvokeFailure> {
        let m = &f.manifest;
        let r = jord::settled(|j| {
            // A μprocess runs on the stack in its area, from a saved context: its PD needs no
            // creation stack.
            let made = if f.program.is_some() {
                j.cget_without_stack(PdId::KERNEL)
            } else {
                j.cget(PdId::KERNEL)
            };
            let pd = match made {
                Ok(pd) => pd,
                Err(e) => return (None, Err(e)),
            };
            j.set_memory_limit(pd, m.memory_limit);
            // Cannot fail: the kernel just made `pd`.
            let _ = j.set_pd_limit(pd, m.max_pds);
            match map_instance(j, pd, f, (header, at)) {
                Ok(boundary) => (
                    None,
                    Ok(Instance {
                        pd,
                        boundary,
                        saved: crate::groundhog::Saved::Nothing,
                        scrubbed: None,
                    }),
                ),
                Err(e) => (j.cput(PdId::KERNEL, pd).ok(), Err(e)),
            }
        });
        r.map_err(pd_failure)
    }
}

/// Marks `pd` as acting for `f`'s tenant (its key-value namespace and console budget).
pub fn begin_tenant(f: &LoadedFunction, pd: PdId) {
    let log_limit = u32::try_from(f.manifest.log_limit).unwrap_or(u32::MAX);
    jord::tenant::begin(pd, f.namespace, log_limit);
}

/// Destroys `pd` with everything it owns and every PD it created.
pub fn destroy(pd: PdId) {
    let _ = jord::settled(|j| j.cput(PdId::KERNEL, pd));
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
    (header, at): (bool, Option<u64>),
) -> Result<u64, PdError> {
    let m = &f.manifest;
    let image = f.image_in_area();
    let len = image + m.stack_size + m.heap_size;
    // Every instance VMA is placed as a μprocess area is, so that μFork's inferred tags never
    // take a small integer over a stale pointer's upper half for one of its addresses (a fork,
    // or a checkpoint restored elsewhere, relocates by them). A program's is a μprocess area,
    // and so is a fork-per-request function's (its instances are forked): paged.
    let paged = f.program.is_some() || f.groundhog_mode() == fjord_groundhog::GroundhogMode::Fork;
    let instance = j.mmap_area(pd, len, at, paged)?;
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
pub fn fresh_header(m: &Manifest, base: u64) -> (u64, [u64; 4]) {
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
pub fn heap_header(boundary: u64) -> u64 {
    boundary - fjord_libos::heap::HEADER_BYTES
}

/// The invocation failure for a PrivLib error of the sequence.
pub fn pd_failure(e: PdError) -> InvokeFailure {
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
    /// zeroed (`crate::module::warm::map_argbuf` drains idle instances once if memory is
    /// short).
    pub fn map(capacity: u64, request: &[u8]) -> Result<ArgBuf, PdError> {
        jord::settled(|j| {
            let base = match j.mmap(PdId::KERNEL, capacity, Perm::RW, MapFlags::default()) {
                Ok(base) => base,
                Err(e) => return (None, Err(e)),
            };
            match j.vma_write(base, 0, request) {
                Ok(()) => (
                    None,
                    Ok(ArgBuf {
                        base,
                        capacity,
                        kernels: true,
                    }),
                ),
                Err(e) => (j.munmap(PdId::KERNEL, base, capacity).ok(), Err(e)),
            }
        })
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
            let _ = jord::settled(|j| j.munmap(PdId::KERNEL, self.base, self.capacity));
        }
    }
}

fn move_between(base: u64, from: PdId, to: PdId, how: Handoff) -> Result<(), PdError> {
    jord::settled(|j| j.pmove_with(from, base, to, Perm::RW, how))
}

/// An instance and the ArgBuf of its request.
#[derive(Debug)]
pub struct Invocation {
    /// The instance.
    pub instance: Instance,
    /// Its request's ArgBuf.
    pub argbuf: ArgBuf,
}
