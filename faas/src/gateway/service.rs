//! The gateway's view of the FaaS runtime: the [`FunctionService`] trait and the types it
//! answers with. The kernel implements it (its registry of deployed functions, the loader and the
//! orchestrator behind it); the gateway's tests use a scripted fake.

use super::checkpoints::{
    CheckpointError, CheckpointId, CheckpointInfo, RestoreError, Tiering, Written,
};
use crate::function_name::FunctionName;
use crate::module::ModuleError;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

/// A function's version as the runtime reports it to deployers: every deployment gets a new,
/// greater one (the runtime keeps the count; the gateway only passes it on).
pub type Generation = u64;

/// Why an invocation produced no result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InvokeError {
    /// No function of that name is deployed (404).
    NotFound,
    /// The runtime is out of capacity (503).
    Unavailable,
    /// The function ran and failed (500); the text says how (fault, timeout, out of memory).
    Failed(String),
}

/// Why a deployment was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeployError {
    /// The module failed validation (400; 413 for [`ModuleError::ImageTooLarge`]).
    Invalid(ModuleError),
    /// The manifest names another function than the URL does (400).
    NameMismatch {
        /// The name in the module's manifest.
        manifest: FunctionName,
    },
    /// The runtime has no room for another function: it holds its maximum number of functions
    /// or is out of memory (503).
    Full,
    /// The module is valid ELF but the runtime cannot load it (400), e.g. it has writable
    /// statics that one shared image cannot hold; the text says why.
    Unloadable(String),
}

impl fmt::Display for DeployError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeployError::Invalid(e) => write!(f, "invalid function module: {e}"),
            DeployError::NameMismatch { manifest } => write!(
                f,
                "the module's manifest names function '{}', not the one in the URL",
                manifest.as_str()
            ),
            DeployError::Full => f.write_str("no room for another function"),
            DeployError::Unloadable(why) => write!(f, "the module cannot be loaded: {why}"),
        }
    }
}

/// What a successful deployment did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeployOutcome {
    /// Generation of the new version.
    pub generation: Generation,
    /// Whether an older version was replaced (200) rather than created (201).
    pub replaced: bool,
}

/// One line of `GET /functions`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionInfo {
    /// Function name.
    pub name: FunctionName,
    /// Size of the deployed ELF image in bytes.
    pub size: usize,
    /// Generation at which it was deployed.
    pub generation: Generation,
    /// What happens to its instances between requests.
    pub groundhog: crate::module::GroundhogMode,
}

/// One line of `GET /processes`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessInfo {
    /// Its PID.
    pub pid: u64,
    /// Its parent's PID (1, init, for the programs the kernel started).
    pub ppid: u64,
    /// The program it runs.
    pub program: String,
    /// `runnable`, `running`, `blocked` or `zombie`.
    pub state: &'static str,
    /// Base address of its area.
    pub area: u64,
    /// Size of its area in bytes.
    pub area_bytes: u64,
    /// Bytes of its area it has touched.
    pub memory_bytes: u64,
}

/// How a μprocess started over HTTP runs: `POST /processes/<program>?fork=…&isolation=…`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcessOptions {
    /// The copy mode of its `fork` calls: `full`, `cow`, `coa` or `copa` (the default).
    pub mode: fjord_ufork::CopyMode,
    /// Its isolation level: `none`, `non-adversarial` or `full` (the default).
    pub isolation: fjord_ufork::IsolationLevel,
}

impl ProcessOptions {
    /// The options a request target's query string names; unknown keys are ignored, an
    /// unknown value is an error naming the key.
    pub fn from_target(target: &str) -> Result<ProcessOptions, &'static str> {
        use fjord_ufork::{CopyMode, IsolationLevel};
        let mut o = ProcessOptions::default();
        let Some((_, query)) = target.split_once('?') else {
            return Ok(o);
        };
        for pair in query.split('&') {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "fork" => {
                    o.mode = match value {
                        "full" => CopyMode::Full,
                        "cow" => CopyMode::CopyOnWrite,
                        "coa" => CopyMode::CopyOnAccess,
                        "copa" => CopyMode::CopyOnPointerAccess,
                        _ => return Err("fork"),
                    }
                }
                "isolation" => {
                    o.isolation = match value {
                        "none" => IsolationLevel::None,
                        "non-adversarial" => IsolationLevel::NonAdversarial,
                        "full" => IsolationLevel::Full,
                        _ => return Err("isolation"),
                    }
                }
                _ => {}
            }
        }
        Ok(o)
    }
}

/// Why a program could not be started as a μprocess.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcessError {
    /// No module of that name is deployed (404).
    NotFound,
    /// The module is a function, not a program (400).
    NotAProgram,
    /// No room: the process table or memory is full (503).
    Full,
    /// The program's trees hold as many μprocesses as its manifest's `max_processes` (429).
    ProgramLimit(u16),
    /// The runtime has no μprocesses (501).
    Unsupported,
    /// The options are refused: copy-on-write with isolation on (400).
    BadOptions,
}

/// Names an invocation a runtime has started and not yet reported finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InvocationId(pub u64);

/// A finished invocation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The function's output, or why there is none.
    pub result: Result<Vec<u8>, InvokeError>,
    /// How long it took, in the gateway's latency unit, when the runtime measured it (only
    /// measured invocations enter the per-function metrics).
    pub latency: Option<u64>,
}

/// What starting an invocation gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Started {
    /// It finished (or failed) at once.
    Done(Completion),
    /// It runs; [`FunctionService::poll`] reports its completion.
    Running(InvocationId),
}

/// The runtime behind the gateway: deploy, list, remove and invoke functions.
///
/// The gateway maps each result to a status code; the runtime never sees HTTP. A runtime that
/// executes functions elsewhere (on executor cores) implements [`FunctionService::start`] and
/// [`FunctionService::poll`] so that the gateway keeps serving other connections meanwhile.
pub trait FunctionService {
    /// Runs `name` with `input` to completion and returns its output.
    fn invoke(&mut self, name: &FunctionName, input: &[u8]) -> Result<Vec<u8>, InvokeError>;
    /// Starts `name` with `input`. The default runs it to completion with
    /// [`FunctionService::invoke`].
    fn start(&mut self, name: &FunctionName, input: &[u8]) -> Started {
        Started::Done(Completion {
            result: self.invoke(name, input),
            latency: None,
        })
    }
    /// The completion of the started invocation `id` once it has finished (reported once);
    /// `None` while it runs.
    fn poll(&mut self, id: InvocationId) -> Option<Completion> {
        let _ = id;
        None
    }
    /// Nobody waits for `id` any more (its connection went away): discard its completion.
    fn forget(&mut self, id: InvocationId) {
        let _ = id;
    }
    /// Lists in `out` the started invocations that finished since the last call (each once;
    /// [`FunctionService::poll`] then reports them), so a caller need not poll the others.
    /// `false` (the default) when the runtime cannot tell: callers then poll every running
    /// invocation.
    fn finished(&mut self, out: &mut Vec<InvocationId>) -> bool {
        out.clear();
        false
    }
    /// Validates `image` and deploys it as `name` (replacing any older version), with the
    /// Groundhog mode `mode` instead of its manifest's when one is given.
    fn deploy(
        &mut self,
        name: FunctionName,
        image: &[u8],
        mode: Option<crate::module::GroundhogMode>,
    ) -> Result<DeployOutcome, DeployError>;
    /// The deployed functions in name order.
    fn list(&self) -> Vec<FunctionInfo>;
    /// Removes `name`; `false` if it was not deployed.
    fn remove(&mut self, name: &FunctionName) -> bool;
    /// Starts the program `name` as a μprocess; returns its PID.
    fn start_process(
        &mut self,
        name: &FunctionName,
        options: ProcessOptions,
    ) -> Result<u64, ProcessError> {
        let _ = (name, options);
        Err(ProcessError::Unsupported)
    }
    /// The μprocesses, by PID.
    fn processes(&self) -> Vec<ProcessInfo> {
        Vec::new()
    }
    /// Kills the μprocess `pid` (signal 9); `false` if there is none.
    fn kill_process(&mut self, pid: u64) -> bool {
        let _ = pid;
        false
    }
    /// Checkpoints the μprocess `pid` into the shared region.
    fn checkpoint_process(&mut self, pid: u64) -> Result<Written, CheckpointError> {
        let _ = pid;
        Err(CheckpointError::NoRegion)
    }
    /// Checkpoints the zygote of the fork-per-request function `name` into the shared region.
    fn checkpoint_function(&mut self, name: &FunctionName) -> Result<Written, CheckpointError> {
        let _ = name;
        Err(CheckpointError::NoRegion)
    }
    /// Destroys this node's warm zygote of the fork-per-request function `name`; `false` if it
    /// has none.
    fn drop_zygote(&mut self, name: &FunctionName) -> bool {
        let _ = name;
        false
    }
    /// Clears the accessed bits of μprocess `pid`; `false` if there is none.
    fn reset_accessed(&mut self, pid: u64) -> bool {
        let _ = pid;
        false
    }
    /// The ready checkpoints of the shared region.
    fn checkpoints(&self) -> Vec<CheckpointInfo> {
        Vec::new()
    }
    /// Restores checkpoint `id` as a μprocess of this node; its PID.
    fn restore_checkpoint(
        &mut self,
        id: CheckpointId,
        tiering: Tiering,
    ) -> Result<u64, RestoreError> {
        let _ = (id, tiering);
        Err(RestoreError::NoRegion)
    }
    /// Retires checkpoint `id`; `false` if there is no such ready checkpoint.
    fn retire_checkpoint(&mut self, id: CheckpointId) -> bool {
        let _ = id;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::ProcessOptions;
    use fjord_ufork::{CopyMode, IsolationLevel};

    #[test]
    fn process_options_come_from_the_query() {
        assert_eq!(
            ProcessOptions::from_target("/processes/p"),
            Ok(ProcessOptions::default())
        );
        let o = ProcessOptions::from_target("/processes/p?fork=coa&isolation=non-adversarial&x=1")
            .unwrap();
        assert_eq!(o.mode, CopyMode::CopyOnAccess);
        assert_eq!(o.isolation, IsolationLevel::NonAdversarial);
        let o = ProcessOptions::from_target("/processes/p?isolation=none&fork=cow").unwrap();
        assert_eq!(
            (o.mode, o.isolation),
            (CopyMode::CopyOnWrite, IsolationLevel::None)
        );
        assert_eq!(
            ProcessOptions::from_target("/processes/p?fork=fast"),
            Err("fork")
        );
        assert_eq!(
            ProcessOptions::from_target("/processes/p?isolation"),
            Err("isolation")
        );
        assert_eq!(
            ProcessOptions::from_target("/processes/p?fork=full").map(|o| o.mode),
            Ok(CopyMode::Full)
        );
    }
}
