//! Checkpoints of μprocesses in the shared region: written once by the node the μprocess runs
//! on, listed and restored on every node (CXLfork, ASPLOS '25 §4).
//!
//! [`checkpoint_process`] holds the μprocess still (`crate::ufork::snapshot::freeze`), writes
//! every page of its area it holds (its code excepted: each node maps its own copy of the
//! program, and a restore needs the same module) and that is not all zero, then its image
//! (`fjord_ufork::image::ProcessImage`: registers, precise tags, descriptors that travel,
//! layout, the pages it had accessed), and publishes it (`fjord_cxl::Writer::publish`: ready
//! flag last). The μprocess goes on as before. [`restore`] opens a checkpoint, checks it,
//! and starts a clone ([`super::clone`]).
//!
//! [`checkpoint_function`] writes a function's state after `init` the same way (a
//! fork-per-request function's zygote, or an instance made for the checkpoint);
//! [`clone_function`] clones it as a request's instance of a fork-per-request function, and
//! [`restore_warm`] copies it into a new warm instance of a function of another mode.

use super::clone::{self, Tiering};
use super::get;
use crate::jord;
use crate::module::LoadedFunction;
use crate::module::instance::Instance;
use crate::ufork::snapshot::{self, FreezeError, RestoreError};
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use fjord_cxl::{Checkpoint, Cid, CxlError, Kind};
use fjord_kernel::layout::PAGE_SIZE;
use fjord_ufork::image::ProcessImage;

/// Checkpoints this node wrote.
pub static WRITTEN: AtomicU64 = AtomicU64::new(0);
/// Pages this node wrote into checkpoints.
pub static PAGES_WRITTEN: AtomicU64 = AtomicU64::new(0);
/// Clones this node restored.
pub static RESTORED: AtomicU64 = AtomicU64::new(0);

/// How long a checkpoint waits for a running μprocess's slice to end.
const FREEZE_WAIT_MS: u64 = 200;

/// Why a checkpoint failed. Nothing of it is left in the region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckpointError {
    /// This node has no shared region.
    NoRegion,
    /// No such μprocess.
    NoSuchProcess,
    /// It kept running (or another checkpoint held it).
    Busy,
    /// The region refused it (full directory or region).
    Region(CxlError),
    /// No such function.
    NoSuchFunction,
    /// A program, not a function: its μprocesses are checkpointed one by one.
    NotAFunction,
    /// The function's `init` mapped memory beyond its instance VMA, which a checkpoint does
    /// not carry.
    MappedBeyondInstance,
    /// No memory for the zygote or instance (or its `init` failed).
    NoMemory,
}

/// Why a clone could not be restored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloneError {
    /// This node has no shared region.
    NoRegion,
    /// The region refused to open it: not found, retired, or corrupt.
    Region(CxlError),
    /// It is not a μprocess checkpoint, or its image does not check.
    BadImage,
    /// A page fails its CRC-32: refused, never restored.
    CorruptPage,
    /// This node cannot run it.
    Restore(RestoreError),
}

/// A checkpoint written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Written {
    /// Its identity.
    pub cid: Cid,
    /// Data pages.
    pub pages: u64,
}

/// Writes a checkpoint of μprocess `pid` (see the module documentation).
pub fn checkpoint_process(pid: u64) -> Result<Written, CheckpointError> {
    let cxl = get().ok_or(CheckpointError::NoRegion)?;
    let deadline = crate::arch::time::deadline_after_ms(FREEZE_WAIT_MS);
    let frozen = loop {
        match snapshot::freeze(pid) {
            Ok(f) => break f,
            Err(FreezeError::NoSuchProcess) => return Err(CheckpointError::NoSuchProcess),
            Err(_) if crate::arch::time::now() < deadline => core::hint::spin_loop(),
            Err(_) => return Err(CheckpointError::Busy),
        }
    };
    let mut image = frozen.image.clone();
    let w = write_area(cxl, Kind::Uprocess, (frozen.pd, frozen.area.0), &mut image)?;
    drop(frozen);
    publish(w, &image, "μprocess", &alloc::format!("{pid}"))
}

/// Writes a checkpoint of function `name`'s state after its `init`: a fork-per-request
/// function's zygote (made, its `init` run, if this node has none), or, for the other modes, an
/// instance made for it (its `init` run) and destroyed again: the warm state every instance
/// starts from.
pub fn checkpoint_function(name: &str) -> Result<Written, CheckpointError> {
    let cxl = get().ok_or(CheckpointError::NoRegion)?;
    let f = crate::module::lookup(name).ok_or(CheckpointError::NoSuchFunction)?;
    if f.manifest.kind != fjord_faas::module::ModuleKind::Function {
        return Err(CheckpointError::NotAFunction);
    }
    if f.groundhog_mode() == fjord_groundhog::GroundhogMode::Fork {
        let (pd, (base, _), mut image) =
            snapshot::describe_zygote(&f).map_err(|_| CheckpointError::NoMemory)?;
        let w = write_area(cxl, Kind::Function, (pd, base), &mut image)?;
        return publish(w, &image, "function", name);
    }
    let inst = Instance::create_zygote(&f).map_err(|_| CheckpointError::NoMemory)?;
    let written = (|| {
        let (pd, (base, len), mut image) = snapshot::describe_instance(&f, inst.pd, inst.boundary);
        // Its creation stack and its instance VMA, or more: what `init` mapped.
        if jord::with(|j| j.kept_layout(pd, base, len).0.len()) > 2 {
            return Err(CheckpointError::MappedBeyondInstance);
        }
        let w = write_area(cxl, Kind::Function, (pd, base), &mut image)?;
        publish(w, &image, "function", name)
    })();
    crate::module::instance::destroy(inst.pd);
    written
}

/// A new warm instance of function `f` (instances not forked) from checkpoint `cid` of its
/// state after `init`, instead of running `init`: its instance VMA made at the checkpoint's
/// own address when that slot is free here, elsewhere otherwise, and every checkpoint page
/// copied into it, checked by CRC, with the words pointing into the checkpoint's instance VMA
/// (inferred tags: a function checkpoint carries no precise ones) relocated when it lies
/// elsewhere and those pointing into the code moved when this node mapped the code elsewhere.
/// Groundhog's snapshot, taken next, needs every page in local memory: nothing is left in the
/// region.
pub fn restore_warm(f: &LoadedFunction, cid: Cid) -> Result<Instance, CloneError> {
    let (reader, image) = open_image(cid, Kind::Function)?;
    if reader.info().name != f.manifest.name.as_str() || f.digest != image.digest {
        return Err(CloneError::Restore(RestoreError::OtherVersion));
    }
    let from = image.area().map_err(|_| CloneError::BadImage)?;
    let inst = Instance::create_at(f, image.area_base)
        .map_err(|_| CloneError::Restore(RestoreError::NoMemory))?;
    let (base, len) = inst.vma(f);
    let code = snapshot::code_move(f, &image);
    let source = fjord_ufork::source::Inferred::new(from);
    let copied = (|| {
        let to = crate::ufork::area_of(base, len)
            .filter(|_| len == image.area_len)
            .ok_or(CloneError::BadImage)?;
        let relocates = to.base() != from.base() || code.is_some();
        let mut bytes = [0u8; PAGE_SIZE as usize];
        let mut words: fjord_ufork::tags::PageWords = [0; (PAGE_SIZE / 8) as usize];
        for (k, &i) in image.pages.iter().enumerate() {
            reader
                .page(k as u64, &mut bytes)
                .map_err(|_| CloneError::CorruptPage)?;
            if relocates {
                fjord_ufork::tags::page_words(&bytes, &mut words);
                let page = from.base() + u64::from(i) * PAGE_SIZE;
                clone::relocate(&source, (&from, &to), code.as_ref(), page, &mut words)
                    .map_err(|_| CloneError::BadImage)?;
                fjord_ufork::tags::page_bytes(&words, &mut bytes);
            }
            jord::with(|j| j.write_page(base, i as usize, &bytes))
                .map_err(|_| CloneError::Restore(RestoreError::NoMemory))?;
        }
        Ok(())
    })();
    if let Err(e) = copied {
        if e == CloneError::CorruptPage {
            clone::PAGES_REFUSED.fetch_add(1, Relaxed);
        }
        crate::module::instance::destroy(inst.pd);
        return Err(e);
    }
    let n = image.pages.len() as u64;
    clone::PAGES_COPIED.fetch_add(n, Relaxed);
    clone::PAGES_MIGRATED.fetch_add(n, Relaxed);
    RESTORED.fetch_add(1, Relaxed);
    Ok(inst)
}

/// The pages of `pages` (of the area VMA at `base`) that `pd` accessed since the last call,
/// ascending; clears their accessed bits (and flushes, so that later accesses set them again).
fn take_accessed(pd: fjord_pd::PdId, base: u64, pages: &[usize]) -> Vec<u32> {
    let (hot, owed) = jord::with(|j| j.take_accessed(pd, base, pages));
    owed.finish();
    hot
}

/// Starts a checkpoint of `kind` described by `image` and writes into it the pages of the area
/// VMA at `base` that are not all zero, from the image's first private page on, listing them
/// in `image` with the pages `pd` accessed; the writer, to publish.
fn write_area<'a>(
    cxl: &'a super::Cxl,
    kind: Kind,
    (pd, base): (fjord_pd::PdId, u64),
    image: &mut ProcessImage,
) -> Result<fjord_cxl::Writer<'a, crate::drivers::ivshmem::SharedMemory>, CheckpointError> {
    let mut w = cxl
        .region
        .begin(&image.program, image.digest, kind, cxl.node)
        .map_err(CheckpointError::Region)?;
    let held = jord::with(|j| j.initialised_pages(base));
    image.hot = take_accessed(pd, base, &held);
    let mut page = [0u8; PAGE_SIZE as usize];
    for i in held {
        if i < image.shared_pages as usize {
            continue;
        }
        jord::with(|j| j.read_page(base, i, &mut page))
            .map_err(|_| CheckpointError::NoSuchProcess)?;
        // A page never written but touched reads as zero in a clone anyway.
        if page.iter().all(|&b| b == 0) {
            continue;
        }
        w.push_page(&page).map_err(CheckpointError::Region)?;
        image.pages.push(i as u32);
    }
    Ok(w)
}

/// Writes the image and publishes the checkpoint; counts and logs it.
fn publish(
    mut w: fjord_cxl::Writer<'_, crate::drivers::ivshmem::SharedMemory>,
    image: &ProcessImage,
    what: &str,
    who: &str,
) -> Result<Written, CheckpointError> {
    let pages = w.pages();
    w.write_image(&image.encode())
        .map_err(CheckpointError::Region)?;
    let cid = w.publish().map_err(CheckpointError::Region)?;
    WRITTEN.fetch_add(1, Relaxed);
    PAGES_WRITTEN.fetch_add(pages, Relaxed);
    log::info!(
        "cxl: checkpoint {}.{} of {what} {who} ({}): {pages} pages, {} tags, {} accessed",
        cid.slot,
        cid.epoch,
        image.program,
        image.tags.len(),
        image.hot.len()
    );
    Ok(Written { cid, pages })
}

/// A request's instance of fork-per-request function `f` cloned from checkpoint `cid` of
/// its zygote, with `tiering`.
pub fn clone_function(
    f: &LoadedFunction,
    cid: Cid,
    tiering: Tiering,
) -> Result<Instance, CloneError> {
    let (reader, image) = open_image(cid, Kind::Function)?;
    if reader.info().name != f.manifest.name.as_str() {
        return Err(CloneError::BadImage);
    }
    let (pages, hot) = (image.pages.clone(), image.hot.clone());
    let inst = snapshot::clone_instance(f, &image, move |a| {
        clone::attach(a, reader, pages, hot, tiering)
    })
    .map_err(CloneError::Restore)?;
    RESTORED.fetch_add(1, Relaxed);
    Ok(inst)
}

/// Opens checkpoint `cid` for a clone of this node: a reference to it, and its image, which
/// must be of `kind` and list as many pages as the checkpoint holds.
fn open_image(
    cid: Cid,
    kind: Kind,
) -> Result<
    (
        fjord_cxl::Reader<'static, crate::drivers::ivshmem::SharedMemory>,
        ProcessImage,
    ),
    CloneError,
> {
    let cxl = get().ok_or(CloneError::NoRegion)?;
    let reader = cxl.region.open(cid, cxl.node).map_err(CloneError::Region)?;
    if reader.info().kind != kind {
        return Err(CloneError::BadImage);
    }
    let image = ProcessImage::decode(reader.image()).map_err(|_| CloneError::BadImage)?;
    if image.pages.len() as u64 != reader.pages() {
        return Err(CloneError::BadImage);
    }
    Ok((reader, image))
}

/// Restores checkpoint `cid` as a new μprocess of this node with `tiering`; its PID.
pub fn restore(cid: Cid, tiering: Tiering) -> Result<u64, CloneError> {
    let (reader, image) = open_image(cid, Kind::Uprocess)?;
    let (pages, hot) = (image.pages.clone(), image.hot.clone());
    let pid = snapshot::restore(&image, move |a| {
        clone::attach(a, reader, pages, hot, tiering)
    })
    .map_err(CloneError::Restore)?;
    RESTORED.fetch_add(1, Relaxed);
    log::info!(
        "cxl: restored checkpoint {}.{} ({}) as μprocess {pid}, tiering {}",
        cid.slot,
        cid.epoch,
        image.program,
        tiering.name()
    );
    Ok(pid)
}

/// A checkpoint as `GET /checkpoints` lists it.
pub struct Listed {
    /// What the directory says of it.
    pub info: Checkpoint,
    /// References its clones hold, on every node.
    pub clones: u64,
}

/// The ready checkpoints of the region (none without one).
pub fn list() -> Vec<Listed> {
    let Some(cxl) = get() else {
        return Vec::new();
    };
    cxl.region
        .list()
        .into_iter()
        .map(|info| Listed {
            clones: cxl.region.refcount(info.cid).unwrap_or(0),
            info,
        })
        .collect()
}

/// Clears the accessed bits of μprocess `pid`'s pages, so that its next checkpoint records
/// the pages it accesses from now on (what a hybrid-tiered clone copies first); false if
/// there is no such μprocess.
pub fn reset_accessed(pid: u64) -> bool {
    let Some((pd, (base, _))) = crate::ufork::pd_and_area(pid) else {
        return false;
    };
    let pages = jord::with(|j| j.initialised_pages(base));
    take_accessed(pd, base, &pages);
    true
}

/// Retires checkpoint `cid`: no one restores it again, and its pages are freed once its last
/// clone lets go. False if there is no such ready checkpoint.
pub fn retire(cid: Cid) -> bool {
    get().is_some_and(|cxl| cxl.region.retire(cid, cxl.node).is_ok())
}

/// Retires every checkpoint of program or function `name` whose module digest is not `keep`
/// (all of them when `keep` is `None`: it was deleted); how many.
pub fn retire_program(name: &str, keep: Option<u64>) -> usize {
    let Some(cxl) = get() else {
        return 0;
    };
    let stale: Vec<Cid> = cxl
        .region
        .list()
        .into_iter()
        .filter(|c| c.name == name && Some(c.generation) != keep)
        .map(|c| c.cid)
        .collect();
    stale
        .into_iter()
        .filter(|&cid| cxl.region.retire(cid, cxl.node).is_ok())
        .count()
}
