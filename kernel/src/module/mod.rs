//! Deployed modules: the registry of functions and programs, their code mapped by the loader,
//! their instances (a PD with its stack and instance VMA) and each function's pool of idle
//! instances.
//!
//! - [`loader`]: one Global read-execute code VMA per module, relocated once;
//! - [`instance`]: an instance of a module and the ArgBuf a request runs on;
//! - [`pool`]: a function's idle instances and the bounds over all pools (Groundhog's
//!   `crate::module::warm` decides what enters them and restores them).
//!
//! The registry keeps each module's ELF bytes and its [`LoadPlan`] so that it can map the code
//! again after `jord::state::reset` (switching between full isolation and Jord_NI) released it;
//! each state has its own generation, so a stale mapping is never mistaken for a live one.

pub mod instance;
pub mod lifecycle;
pub mod loader;
pub mod metrics;
pub mod pool;
pub mod warm;

use crate::kprintln;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use fjord_faas::module::{LoadPlan, Manifest, ModuleLimits, validate};
use fjord_kernel::fnv::{FnvBuild, FnvHashMap};
use loader::{LoadError, MappedImage, jord_epoch, map_image, unmap_image};
use spin::Mutex;

/// Where boot-time modules live in the initrd: `functions/<name>.elf`.
pub const INITRD_DIR: &str = "functions/";

/// A deployed function as invocations see it: its code is mapped while this value lives.
#[derive(Debug)]
pub struct LoadedFunction {
    /// The function's manifest.
    pub manifest: Manifest,
    /// Absolute address of the entry point (in the code VMA).
    pub entry: u64,
    /// The code VMA.
    pub image: MappedImage,
    /// Number of relocations applied at load.
    pub relocations: usize,
    /// Idle instances kept for the next requests.
    pub warm: pool::Pool,
    /// The key-value namespace its invocations act in.
    pub namespace: fjord_kernel::kv_store::NsId,
    /// Its Groundhog restores so far.
    pub restores: Mutex<fjord_groundhog::RestoreStats>,
    /// For a program, its image as each of its μprocesses' areas holds it.
    pub program: Option<ProgramArea>,
    /// In Groundhog mode `fork`: the instance that ran `init` and that each request's instance
    /// is forked from (made by the first request; destroyed with this value).
    pub zygote: Mutex<Option<instance::Instance>>,
    /// FNV-1a of its module file: the same on every node that deployed the same file (a
    /// checkpoint records it, and is restored only where it matches).
    pub digest: u64,
}

/// Makes a request's instance of a function in Groundhog mode `fork` (μFork's fork of its
/// zygote; set by `crate::ufork`, which lies above this layer).
pub type Forker =
    fn(&LoadedFunction) -> Result<instance::Instance, crate::orchestrator::InvokeFailure>;

static FORKER: Mutex<Option<Forker>> = Mutex::new(None);

/// Sets how instances of fork-per-request functions are made.
pub fn set_forker(f: Forker) {
    crate::arch::cpu::without_interrupts(|| *FORKER.lock() = Some(f));
}

/// Told that a request's instance of a fork-per-request function ends (before it goes);
/// answers whether the instance may be kept for the function's next fork ([`ForkRetire`]):
/// not one cloned from a checkpoint, whose area sits where the next clones want theirs.
pub type ForkEnd = fn(&LoadedFunction, fjord_pd::PdId) -> bool;

static FORK_END: Mutex<Option<ForkEnd>> = Mutex::new(None);

/// Sets what is told when a fork-per-request function's instance ends.
pub fn set_fork_end(f: ForkEnd) {
    crate::arch::cpu::without_interrupts(|| *FORK_END.lock() = Some(f));
}

/// The hook [`set_fork_end`] set.
pub fn fork_end() -> Option<ForkEnd> {
    crate::arch::cpu::without_interrupts(|| *FORK_END.lock())
}

/// Gives back a request's instance of a fork-per-request function once its request ended (and
/// [`ForkEnd`] was told): kept for the function's next fork, or destroyed (set by
/// `crate::ufork`).
pub type ForkRetire = fn(&LoadedFunction, instance::Instance);

static FORK_RETIRE: Mutex<Option<ForkRetire>> = Mutex::new(None);

/// Sets how the instances of fork-per-request functions are given back.
pub fn set_fork_retire(f: ForkRetire) {
    crate::arch::cpu::without_interrupts(|| *FORK_RETIRE.lock() = Some(f));
}

/// The hook [`set_fork_retire`] set.
pub fn fork_retire() -> Option<ForkRetire> {
    crate::arch::cpu::without_interrupts(|| *FORK_RETIRE.lock())
}

/// The forker [`set_forker`] set.
pub fn forker() -> Option<Forker> {
    crate::arch::cpu::without_interrupts(|| *FORKER.lock())
}

/// What a layer above may do for functions whose instances are not forked (set once, by
/// `crate::cxl`'s CXLporter on a node with a shared region).
#[derive(Clone, Copy)]
pub struct WarmHooks {
    /// A new instance of `f` already past its `init` (restored from a checkpoint), or `None`:
    /// one is made and its `init` run.
    pub initialised: fn(&LoadedFunction) -> Option<instance::Instance>,
    /// A request of `f` is about to take an instance.
    pub requested: fn(&LoadedFunction),
}

static WARM_HOOKS: spin::Once<WarmHooks> = spin::Once::new();

/// Sets the [`WarmHooks`] (once; later calls change nothing).
pub fn set_warm_hooks(hooks: WarmHooks) {
    WARM_HOOKS.call_once(|| hooks);
}

/// The hooks [`set_warm_hooks`] set.
pub fn warm_hooks() -> Option<&'static WarmHooks> {
    WARM_HOOKS.get()
}

/// How a program's image lies at the bottom of each of its μprocesses' areas.
#[derive(Debug)]
pub struct ProgramArea {
    /// The image's layout and the initial bytes of its private part.
    pub image: fjord_faas::module::ProgramImage,
    /// The rights of its shared pages (the frames of [`LoadedFunction::image`]).
    pub shared: Arc<[fjord_pd::Perm]>,
}

impl ProgramArea {
    fn new(plan: &LoadPlan, file: &[u8]) -> Result<ProgramArea, LoadError> {
        let image =
            fjord_faas::module::ProgramImage::new(plan, file).map_err(LoadError::Relocate)?;
        let shared = image
            .shared
            .iter()
            .map(|p| {
                if p.execute {
                    fjord_pd::Perm::RX
                } else {
                    fjord_pd::Perm::R
                }
            })
            .collect();
        Ok(ProgramArea { image, shared })
    }
}

impl LoadedFunction {
    /// Bytes at the bottom of an instance's VMA before its stack: a program's image, nothing for
    /// a function (whose code is the shared image alone).
    pub fn image_in_area(&self) -> u64 {
        self.program.as_ref().map_or(0, |p| p.image.size)
    }

    /// What happens to its instances between requests (the manifest's `groundhog` key, or the
    /// mode it was deployed with).
    pub fn groundhog_mode(&self) -> fjord_groundhog::GroundhogMode {
        self.manifest.groundhog
    }

    /// Its restore metrics so far.
    pub fn restore_stats(&self) -> fjord_groundhog::RestoreStats {
        crate::arch::cpu::without_interrupts(|| *self.restores.lock())
    }
}

impl Drop for LoadedFunction {
    fn drop(&mut self) {
        self.warm.drain();
        if let Some(z) = self.zygote.get_mut().take() {
            instance::destroy(z.pd);
        }
        unmap_image(&self.image);
    }
}

/// One registry entry: the module file and plan, its key-value namespace and its current
/// mapping.
struct Deployed {
    file: Vec<u8>,
    plan: LoadPlan,
    namespace: fjord_kernel::kv_store::NsId,
    loaded: Arc<LoadedFunction>,
}

impl Drop for Deployed {
    fn drop(&mut self) {
        crate::kv::detach(self.namespace);
    }
}

/// Deployed functions by name (hashed: every nested call looks its callee up here).
static REGISTRY: Mutex<FnvHashMap<String, Deployed>> =
    Mutex::new(FnvHashMap::with_hasher(FnvBuild));

fn map(
    file: &[u8],
    plan: &LoadPlan,
    namespace: fjord_kernel::kv_store::NsId,
) -> Result<Arc<LoadedFunction>, LoadError> {
    let program = match plan.manifest.kind {
        fjord_faas::module::ModuleKind::Program => Some(ProgramArea::new(plan, file)?),
        fjord_faas::module::ModuleKind::Function => None,
    };
    let image = map_image(file, plan)?;
    Ok(Arc::new(LoadedFunction {
        program,
        manifest: plan.manifest.clone(),
        entry: image.base + plan.entry,
        relocations: plan.relocations.len(),
        image,
        warm: pool::Pool::default(),
        namespace,
        restores: Mutex::new(fjord_groundhog::RestoreStats::default()),
        zygote: Mutex::new(None),
        digest: {
            use core::hash::Hasher;
            let mut h = fjord_kernel::fnv::Fnv1a::default();
            h.write(file);
            h.finish()
        },
    }))
}

/// Validates the module `file` and deploys it as `name` (its manifest must say the same name),
/// replacing any function of that name; invocations already running keep the old code until
/// they end.
pub fn deploy(name: &str, file: &[u8]) -> Result<Arc<LoadedFunction>, LoadError> {
    deploy_with(name, file, None)
}

/// [`deploy`] with the Groundhog mode `mode` instead of the manifest's, when given.
pub fn deploy_with(
    name: &str,
    file: &[u8],
    mode: Option<fjord_groundhog::GroundhogMode>,
) -> Result<Arc<LoadedFunction>, LoadError> {
    let mut plan = validate(file, &ModuleLimits::default()).map_err(LoadError::Invalid)?;
    if let Some(mode) = mode {
        plan.manifest.groundhog = mode;
    }
    if plan.manifest.name.as_str() != name {
        return Err(LoadError::NameMismatch);
    }
    let m = &plan.manifest;
    let namespace =
        crate::kv::attach(m.namespace(), m.kv_quota as usize).map_err(|_| LoadError::NoKvRoom)?;
    let loaded = match map(file, &plan, namespace) {
        Ok(l) => l,
        Err(e) => {
            crate::kv::detach(namespace);
            return Err(e);
        }
    };
    let entry = Deployed {
        file: file.to_vec(),
        plan,
        namespace,
        loaded: loaded.clone(),
    };
    let old = REGISTRY.lock().insert(String::from(name), entry);
    drop(old);
    Ok(loaded)
}

/// Removes the function `name`; its code is unmapped when the last running invocation ends.
/// Returns whether it was deployed.
pub fn remove(name: &str) -> bool {
    let old = REGISTRY.lock().remove(name);
    old.is_some()
}

/// The deployed function `name`, with its code mapped in the current Jord state.
pub fn lookup(name: &str) -> Option<Arc<LoadedFunction>> {
    let epoch = jord_epoch();
    let mut registry = REGISTRY.lock();
    let d = registry.get_mut(name)?;
    if d.loaded.image.epoch != epoch {
        // The Jord state was reset since the code was mapped: map it again.
        match map(&d.file, &d.plan, d.namespace) {
            Ok(l) => d.loaded = l,
            Err(e) => {
                log::error!("modules: re-mapping {name} failed: {e}");
                return None;
            }
        }
    }
    Some(d.loaded.clone())
}

/// Every deployed function as currently mapped (without mapping again what a reset released).
pub fn loaded() -> Vec<Arc<LoadedFunction>> {
    REGISTRY.lock().values().map(|d| d.loaded.clone()).collect()
}

/// The Groundhog mode the function `name` was deployed with.
pub fn groundhog_mode_of(name: &str) -> Option<fjord_groundhog::GroundhogMode> {
    REGISTRY.lock().get(name).map(|d| d.plan.manifest.groundhog)
}

/// The ELF file the function `name` was deployed from.
pub fn module_file(name: &str) -> Option<Vec<u8>> {
    REGISTRY.lock().get(name).map(|d| d.file.clone())
}

/// The names of every deployed function, in order.
pub fn list() -> Vec<String> {
    let mut names: Vec<String> = REGISTRY.lock().keys().cloned().collect();
    names.sort_unstable();
    names
}

/// Deploys every `functions/<name>.elf` of the initrd archive `bytes`; returns how many were
/// deployed and how many were rejected (each rejection is logged).
pub fn load_initrd(bytes: &[u8]) -> (usize, usize) {
    let (mut ok, mut failed) = (0, 0);
    for entry in fjord_kernel::cpio::Reader::new(bytes) {
        let Ok(e) = entry else {
            log::warn!("modules: the initrd is not a valid cpio archive");
            failed += 1;
            break;
        };
        let Some(name) = e
            .name
            .strip_prefix(INITRD_DIR)
            .and_then(|n| n.strip_suffix(".elf"))
        else {
            continue;
        };
        match deploy(name, e.data) {
            Ok(f) => {
                ok += 1;
                kprintln!(
                    "fjord: function {name}: {} KiB code at {:#x}, entry {:#x}, {} relocations",
                    f.image.len / 1024,
                    f.image.base,
                    f.entry,
                    f.relocations
                );
            }
            Err(err) => {
                failed += 1;
                kprintln!("fjord: function {name} rejected: {err}");
            }
        }
    }
    (ok, failed)
}
