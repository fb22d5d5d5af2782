//! The gateway's runtime: deploys modules through the loader and runs invocations on executor
//! CPUs through the orchestrator (a [`FunctionService`] for `fjord_faas::gateway`).

use crate::orchestrator::{self, SubmitError};
use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use fjord_faas::FunctionName;
use fjord_faas::gateway::checkpoints::{
    CheckpointError, CheckpointId, CheckpointInfo, RestoreError, Tiering, Written,
};
use fjord_faas::gateway::{
    Completion, DeployError, DeployOutcome, FunctionInfo, FunctionService, Generation,
    InvocationId, InvokeError, ProcessError, ProcessInfo, ProcessOptions, Started,
};
use fjord_faas::jbsq::RequestClass;
use fjord_faas::module::{ModuleLimits, validate};
use fjord_kernel::fnv::FnvBuild;

/// Most functions deployed at once.
pub const MAX_FUNCTIONS: usize = 128;

/// Deploys with the module loader and invokes through the orchestrator.
pub struct RuntimeService {
    generations: BTreeMap<String, Generation>,
    next: Generation,
    /// Invocations whose connection went away: their completions are discarded.
    abandoned: Vec<orchestrator::Ticket>,
    /// Invocations started and not yet seen finished.
    running: hashbrown::HashSet<orchestrator::Ticket, FnvBuild>,
    /// Invocations seen finished ([`FunctionService::finished`]), not yet polled.
    ready: BTreeMap<orchestrator::Ticket, orchestrator::Done>,
    /// Scratch list of finished invocations.
    taken: Vec<(orchestrator::Ticket, orchestrator::Done)>,
}

impl RuntimeService {
    /// A service that already knows the functions deployed at boot (from the initrd).
    pub fn new() -> Self {
        let mut s = RuntimeService {
            generations: BTreeMap::new(),
            next: 1,
            abandoned: Vec::new(),
            running: hashbrown::HashSet::default(),
            ready: BTreeMap::new(),
            taken: Vec::new(),
        };
        for name in super::list() {
            let g = s.bump();
            s.generations.insert(name, g);
        }
        s
    }

    fn bump(&mut self) -> Generation {
        let g = self.next;
        self.next += 1;
        g
    }
}

/// The root task of an external invocation of `name` with `input`.
fn root_task(name: &FunctionName, input: &[u8]) -> Result<orchestrator::TaskWork, InvokeError> {
    let f = super::lookup(name.as_str()).ok_or(InvokeError::NotFound)?;
    Ok(super::task::root_work(f, input.to_vec()))
}

impl Default for RuntimeService {
    fn default() -> Self {
        Self::new()
    }
}

impl FunctionService for RuntimeService {
    fn invoke(&mut self, name: &FunctionName, input: &[u8]) -> Result<Vec<u8>, InvokeError> {
        let work = root_task(name, input)?;
        match orchestrator::run_external_task(work) {
            Ok(done) => done.result.map_err(|e| InvokeError::Failed(format!("{e}"))),
            Err(SubmitError::QueueFull) => Err(InvokeError::Unavailable),
        }
    }

    /// Queues the invocation on the orchestrator and returns at once: the gateway keeps serving
    /// other connections while executors run it.
    fn start(&mut self, name: &FunctionName, input: &[u8]) -> Started {
        let submitted = root_task(name, input).and_then(|work| {
            orchestrator::submit_task(RequestClass::External, work)
                .map_err(|SubmitError::QueueFull| InvokeError::Unavailable)
        });
        match submitted {
            Ok(ticket) => {
                self.running.insert(ticket);
                Started::Running(InvocationId(ticket))
            }
            Err(e) => Started::Done(Completion {
                result: Err(e),
                latency: None,
            }),
        }
    }

    /// Dispatches what the orchestrator holds, then reports `id` if it has finished, with its
    /// latency from the orchestrator's receipt to its completion, in nanoseconds.
    fn poll(&mut self, id: InvocationId) -> Option<Completion> {
        orchestrator::poll();
        let done = match self.ready.remove(&id.0) {
            Some(done) => done,
            None => {
                self.abandoned.retain(|&t| orchestrator::take(t).is_none());
                let done = orchestrator::take(id.0)?;
                self.running.remove(&id.0);
                done
            }
        };
        let ticks = done.finished.saturating_sub(done.arrived);
        let nanos = crate::arch::time::ticks_to_ns(ticks);
        Some(Completion {
            result: done.result.map_err(|e| InvokeError::Failed(format!("{e}"))),
            latency: Some(nanos),
        })
    }

    fn forget(&mut self, id: InvocationId) {
        if self.ready.remove(&id.0).is_none() && orchestrator::take(id.0).is_none() {
            // Still running: discarded when it finishes.
            self.abandoned.push(id.0);
        } else {
            self.running.remove(&id.0);
        }
    }

    /// Takes every invocation it started that has finished out of the orchestrator at once
    /// (abandoned ones are discarded, but listed too).
    fn finished(&mut self, out: &mut Vec<InvocationId>) -> bool {
        out.clear();
        if self.running.is_empty() {
            return true;
        }
        let running = &self.running;
        orchestrator::take_matching(|t| running.contains(&t), &mut self.taken);
        for (t, done) in self.taken.drain(..) {
            self.running.remove(&t);
            out.push(InvocationId(t));
            match self.abandoned.iter().position(|&a| a == t) {
                Some(i) => {
                    self.abandoned.swap_remove(i);
                }
                None => {
                    self.ready.insert(t, done);
                }
            }
        }
        true
    }

    fn deploy(
        &mut self,
        name: FunctionName,
        image: &[u8],
        mode: Option<fjord_groundhog::GroundhogMode>,
    ) -> Result<DeployOutcome, DeployError> {
        let plan = validate(image, &ModuleLimits::default()).map_err(DeployError::Invalid)?;
        if plan.manifest.name != name {
            return Err(DeployError::NameMismatch {
                manifest: plan.manifest.name,
            });
        }
        let replaced = super::lookup(name.as_str()).is_some();
        if !replaced && super::list().len() >= MAX_FUNCTIONS {
            return Err(DeployError::Full);
        }
        match super::deploy_with(name.as_str(), image, mode) {
            Ok(f) => {
                // Checkpoints of another version of it are stale: no one restores them again.
                crate::cxl::checkpoint::retire_program(name.as_str(), Some(f.digest));
                let generation = self.bump();
                self.generations
                    .insert(String::from(name.as_str()), generation);
                Ok(DeployOutcome {
                    generation,
                    replaced,
                })
            }
            Err(crate::module::loader::LoadError::Invalid(e)) => Err(DeployError::Invalid(e)),
            Err(crate::module::loader::LoadError::NoMemory) => Err(DeployError::Full),
            Err(e) => Err(DeployError::Unloadable(format!("{e}"))),
        }
    }

    fn list(&self) -> Vec<FunctionInfo> {
        super::list()
            .into_iter()
            .filter_map(|n| {
                let size = super::module_file(&n)?.len();
                let generation = self.generations.get(&n).copied().unwrap_or(0);
                let groundhog = super::groundhog_mode_of(&n)?;
                let name = FunctionName::new(&n).ok()?;
                Some(FunctionInfo {
                    name,
                    size,
                    generation,
                    groundhog,
                })
            })
            .collect()
    }

    fn remove(&mut self, name: &FunctionName) -> bool {
        self.generations.remove(name.as_str());
        let removed = super::remove(name.as_str());
        if removed {
            crate::cxl::checkpoint::retire_program(name.as_str(), None);
        }
        removed
    }

    fn start_process(
        &mut self,
        name: &FunctionName,
        options: ProcessOptions,
    ) -> Result<u64, ProcessError> {
        use crate::ufork::{SpawnError, SpawnOptions};
        let options = SpawnOptions {
            mode: options.mode,
            isolation: options.isolation,
        };
        crate::ufork::spawn_detached(name.as_str(), options).map_err(|e| match e {
            SpawnError::NoSuchProgram => ProcessError::NotFound,
            SpawnError::NotAProgram => ProcessError::NotAProgram,
            SpawnError::TableFull | SpawnError::NoMemory => ProcessError::Full,
            SpawnError::ProgramLimit(n) => ProcessError::ProgramLimit(n),
            SpawnError::CowNeedsIsolationOff => ProcessError::BadOptions,
        })
    }

    fn processes(&self) -> Vec<ProcessInfo> {
        crate::ufork::list()
            .into_iter()
            .map(|p| ProcessInfo {
                pid: p.pid,
                ppid: p.ppid,
                program: p.program,
                state: p.state,
                area: p.area.0,
                area_bytes: p.area.1,
                memory_bytes: p.touched,
            })
            .collect()
    }

    fn kill_process(&mut self, pid: u64) -> bool {
        crate::ufork::kill_pid(pid)
    }

    fn checkpoint_process(&mut self, pid: u64) -> Result<Written, CheckpointError> {
        checkpoint_answer(crate::cxl::checkpoint::checkpoint_process(pid))
    }

    fn checkpoint_function(&mut self, name: &FunctionName) -> Result<Written, CheckpointError> {
        let written = crate::cxl::checkpoint::checkpoint_function(name.as_str());
        if let Ok(w) = &written {
            crate::cxl::porter::note_checkpoint(name.as_str(), w.cid);
        }
        checkpoint_answer(written)
    }

    fn drop_zygote(&mut self, name: &FunctionName) -> bool {
        super::lookup(name.as_str()).is_some_and(|f| crate::ufork::drop_zygote(&f))
    }

    fn reset_accessed(&mut self, pid: u64) -> bool {
        crate::cxl::checkpoint::reset_accessed(pid)
    }

    fn checkpoints(&self) -> Vec<CheckpointInfo> {
        crate::cxl::checkpoint::list()
            .into_iter()
            .map(|c| CheckpointInfo {
                id: CheckpointId {
                    slot: c.info.cid.slot,
                    epoch: c.info.cid.epoch,
                },
                kind: match c.info.kind {
                    fjord_cxl::Kind::Uprocess => "uprocess",
                    fjord_cxl::Kind::Function => "function",
                },
                name: c.info.name,
                pages: c.info.pages,
                writer: c.info.writer.index(),
                clones: c.clones,
            })
            .collect()
    }

    fn restore_checkpoint(
        &mut self,
        id: CheckpointId,
        tiering: Tiering,
    ) -> Result<u64, RestoreError> {
        use crate::cxl::checkpoint::{self, CloneError as E};
        use crate::ufork::snapshot::RestoreError as R;
        use fjord_cxl::CxlError;
        let cid = fjord_cxl::Cid {
            slot: id.slot,
            epoch: id.epoch,
        };
        checkpoint::restore(cid, tiering).map_err(|e| match e {
            E::NoRegion => RestoreError::NoRegion,
            E::Region(CxlError::Retired) => RestoreError::Retired,
            E::Region(CxlError::Corrupt)
            | E::BadImage
            | E::CorruptPage
            | E::Restore(R::BadImage) => RestoreError::Corrupt,
            E::Region(_) => RestoreError::NotFound,
            E::Restore(R::NoSuchProgram) => RestoreError::NoSuchProgram,
            E::Restore(R::OtherVersion) => RestoreError::OtherVersion,
            E::Restore(R::TableFull | R::NoMemory) => RestoreError::Full,
        })
    }

    fn retire_checkpoint(&mut self, id: CheckpointId) -> bool {
        crate::cxl::checkpoint::retire(fjord_cxl::Cid {
            slot: id.slot,
            epoch: id.epoch,
        })
    }
}

/// A checkpoint's outcome as the gateway reports it.
fn checkpoint_answer(
    r: Result<crate::cxl::checkpoint::Written, crate::cxl::checkpoint::CheckpointError>,
) -> Result<Written, CheckpointError> {
    use crate::cxl::checkpoint::CheckpointError as E;
    use fjord_cxl::CxlError;
    r.map(|w| Written {
        id: CheckpointId {
            slot: w.cid.slot,
            epoch: w.cid.epoch,
        },
        pages: w.pages,
    })
    .map_err(|e| match e {
        E::NoRegion => CheckpointError::NoRegion,
        E::NoSuchProcess => CheckpointError::NoSuchProcess,
        E::Busy => CheckpointError::Busy,
        E::Region(CxlError::DirectoryFull | CxlError::RegionFull) => CheckpointError::RegionFull,
        E::Region(_) => CheckpointError::Busy,
        E::NoSuchFunction => CheckpointError::NoSuchFunction,
        E::NotAFunction => CheckpointError::NotAFunction,
        E::MappedBeyondInstance => CheckpointError::MappedBeyondInstance,
        E::NoMemory => CheckpointError::NoMemory,
    })
}
