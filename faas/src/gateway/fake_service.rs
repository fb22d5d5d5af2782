//! A scripted [`FunctionService`] for the gateway's tests.
//!
//! The test writes the answers beforehand, one queue per method ([`FakeService::deploy_gives`],
//! …); the fake records every call the gateway makes ([`FakeService::calls`]) and answers it
//! with the next scripted result. A call nothing was scripted for panics, so a test also fails
//! when the gateway calls the service where it should not. It runs invocations to completion
//! (the trait's default [`FunctionService::start`]); `tests::SlowService` covers invocations
//! that keep running.

use super::{DeployError, DeployOutcome, FunctionInfo, FunctionService, Generation, InvokeError};
use crate::FunctionName;
use alloc::collections::VecDeque;
use alloc::string::String;
use alloc::vec::Vec;
use core::cell::RefCell;

/// One call the gateway made, with its arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    /// `invoke(name, input)`.
    Invoke(String, Vec<u8>),
    /// `deploy(name, image)`.
    Deploy(String, Vec<u8>),
    /// `list()`.
    List,
    /// `remove(name)`.
    Remove(String),
}

/// The scripted service (see the module documentation).
#[derive(Debug, Default)]
pub struct FakeService {
    calls: RefCell<Vec<Call>>,
    invokes: VecDeque<Result<Vec<u8>, InvokeError>>,
    deploys: VecDeque<Result<DeployOutcome, DeployError>>,
    lists: RefCell<VecDeque<Vec<FunctionInfo>>>,
    removes: VecDeque<bool>,
}

impl FakeService {
    /// A service with nothing scripted.
    pub fn new() -> Self {
        FakeService::default()
    }

    /// The next `invoke` answers `result`.
    pub fn invoke_gives(mut self, result: Result<&[u8], InvokeError>) -> Self {
        self.invokes.push_back(result.map(Vec::from));
        self
    }

    /// The next `deploy` answers `result`.
    pub fn deploy_gives(mut self, result: Result<DeployOutcome, DeployError>) -> Self {
        self.deploys.push_back(result);
        self
    }

    /// The next `deploy` succeeds at `generation`, having replaced an older version or not.
    pub fn deployed(self, generation: Generation, replaced: bool) -> Self {
        self.deploy_gives(Ok(DeployOutcome {
            generation,
            replaced,
        }))
    }

    /// The next `list` answers `functions`, given as `(name, size, generation)`.
    pub fn list_gives(self, functions: &[(&str, usize, Generation)]) -> Self {
        let functions = functions
            .iter()
            .map(|&(name, size, generation)| FunctionInfo {
                name: FunctionName::new(name).expect("a valid test name"),
                size,
                generation,
                groundhog: crate::module::GroundhogMode::Restore,
            })
            .collect();
        self.lists.borrow_mut().push_back(functions);
        self
    }

    /// The next `remove` answers `found`.
    pub fn remove_gives(mut self, found: bool) -> Self {
        self.removes.push_back(found);
        self
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.calls.borrow().clone()
    }

    /// Whether every scripted answer has been given.
    pub fn script_done(&self) -> bool {
        self.invokes.is_empty()
            && self.deploys.is_empty()
            && self.lists.borrow().is_empty()
            && self.removes.is_empty()
    }

    fn record(&self, call: Call) {
        self.calls.borrow_mut().push(call);
    }
}

fn next<T>(queue: &mut VecDeque<T>, call: &Call) -> T {
    queue
        .pop_front()
        .unwrap_or_else(|| panic!("FakeService: no answer scripted for {call:?}"))
}

impl FunctionService for FakeService {
    fn invoke(&mut self, name: &FunctionName, input: &[u8]) -> Result<Vec<u8>, InvokeError> {
        let call = Call::Invoke(name.as_str().into(), input.to_vec());
        self.record(call.clone());
        next(&mut self.invokes, &call)
    }

    fn deploy(
        &mut self,
        name: FunctionName,
        image: &[u8],
        _: Option<crate::module::GroundhogMode>,
    ) -> Result<DeployOutcome, DeployError> {
        let call = Call::Deploy(name.as_str().into(), image.to_vec());
        self.record(call.clone());
        next(&mut self.deploys, &call)
    }

    fn list(&self) -> Vec<FunctionInfo> {
        self.record(Call::List);
        next(&mut self.lists.borrow_mut(), &Call::List)
    }

    fn remove(&mut self, name: &FunctionName) -> bool {
        let call = Call::Remove(name.as_str().into());
        self.record(call.clone());
        next(&mut self.removes, &call)
    }
}
