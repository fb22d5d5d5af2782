//! The function registry: deployed functions by unique name, each stamped with a generation.
//!
//! Every change (deploy, replace, remove) advances one registry-wide generation counter; an entry
//! remembers the generation it was deployed at. Executors compare generations to tell a warm
//! instance of an old version from one of the current version, and the gateway reports the
//! generation to the deployer. The registry is generic over what it stores per function (the
//! kernel stores the load plan and the code VMA).

use crate::function_name::FunctionName;
use alloc::collections::BTreeMap;
use alloc::vec::Vec;

/// A registry-wide, strictly increasing version number.
pub type Generation = u64;

/// Why a registry operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegistryError {
    /// A function with this name is already deployed (use [`Registry::deploy_or_replace`]).
    AlreadyDeployed,
    /// No function with this name.
    NotFound,
    /// The registry holds its maximum number of functions.
    Full,
}

/// One deployed function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry<F> {
    /// Its name.
    pub name: FunctionName,
    /// The generation at which this version was deployed.
    pub generation: Generation,
    /// The deployed payload.
    pub function: F,
}

/// What a deployment did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deployed<F> {
    /// Generation of the new version.
    pub generation: Generation,
    /// The version it replaced, if any (the caller tears down its instances).
    pub replaced: Option<Entry<F>>,
}

/// Deployed functions, unique by name, listed in name order.
#[derive(Clone, Debug)]
pub struct Registry<F> {
    entries: BTreeMap<FunctionName, Entry<F>>,
    generation: Generation,
    capacity: usize,
}

impl<F> Registry<F> {
    /// An empty registry holding at most `capacity` functions.
    pub fn new(capacity: usize) -> Self {
        Registry {
            entries: BTreeMap::new(),
            generation: 0,
            capacity,
        }
    }

    fn next_generation(&mut self) -> Generation {
        self.generation += 1;
        self.generation
    }

    /// Deploys a new function; fails if the name is taken or the registry is full.
    pub fn deploy(&mut self, name: FunctionName, function: F) -> Result<Generation, RegistryError> {
        if self.entries.contains_key(&name) {
            return Err(RegistryError::AlreadyDeployed);
        }
        self.deploy_or_replace(name, function).map(|d| d.generation)
    }

    /// Deploys `function`, replacing any function of the same name (HTTP `PUT` semantics).
    pub fn deploy_or_replace(
        &mut self,
        name: FunctionName,
        function: F,
    ) -> Result<Deployed<F>, RegistryError> {
        if !self.entries.contains_key(&name) && self.entries.len() >= self.capacity {
            return Err(RegistryError::Full);
        }
        let generation = self.next_generation();
        let entry = Entry {
            name: name.clone(),
            generation,
            function,
        };
        let replaced = self.entries.insert(name, entry);
        Ok(Deployed {
            generation,
            replaced,
        })
    }

    /// The function named `name`.
    pub fn lookup(&self, name: &str) -> Option<&Entry<F>> {
        self.entries.get(name)
    }

    /// Removes the function named `name` and returns it.
    pub fn remove(&mut self, name: &str) -> Result<Entry<F>, RegistryError> {
        let entry = self.entries.remove(name).ok_or(RegistryError::NotFound)?;
        self.next_generation();
        Ok(entry)
    }

    /// All functions in name order.
    pub fn list(&self) -> Vec<&Entry<F>> {
        self.entries.values().collect()
    }

    /// Number of deployed functions.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no function is deployed.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The generation of the latest change (0 before any).
    pub fn generation(&self) -> Generation {
        self.generation
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use proptest::prelude::*;

    fn n(s: &str) -> FunctionName {
        FunctionName::new(s).unwrap()
    }

    #[test]
    fn deploy_lookup_list_remove() {
        let mut r = Registry::new(8);
        assert!(r.is_empty());
        assert_eq!(r.deploy(n("b"), 1), Ok(1));
        assert_eq!(r.deploy(n("a"), 2), Ok(2));
        assert_eq!(r.deploy(n("a"), 3), Err(RegistryError::AlreadyDeployed));
        assert_eq!(
            r.lookup("a").map(|e| (e.function, e.generation)),
            Some((2, 2))
        );
        assert!(r.lookup("A").is_none());
        let names: Vec<_> = r.list().iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, vec!["a", "b"]);
        let d = r.deploy_or_replace(n("a"), 4).unwrap();
        assert_eq!(d.generation, 3);
        assert_eq!(d.replaced.map(|e| e.function), Some(2));
        assert_eq!(r.remove("b").map(|e| e.function), Ok(1));
        assert_eq!(r.generation(), 4);
        assert_eq!(r.remove("b"), Err(RegistryError::NotFound));
        assert_eq!(r.remove("B!"), Err(RegistryError::NotFound));
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn capacity_limits_new_names_only() {
        let mut r = Registry::new(1);
        r.deploy(n("a"), ()).unwrap();
        assert_eq!(r.deploy(n("b"), ()), Err(RegistryError::Full));
        assert!(r.deploy_or_replace(n("a"), ()).is_ok());
    }

    proptest! {
        /// Against a model map: names stay unique, generations strictly increase with each change.
        #[test]
        fn matches_model(ops in prop::collection::vec((0u8..3, 0u8..4), 0..100)) {
            let mut r = Registry::new(3);
            let mut model: BTreeMap<u8, u32> = BTreeMap::new();
            let mut last = 0;
            for (i, (op, k)) in ops.into_iter().enumerate() {
                let name = alloc::format!("f{k}");
                match op {
                    0 => {
                        let res = r.deploy(n(&name), i as u32);
                        if model.contains_key(&k) {
                            prop_assert_eq!(res, Err(RegistryError::AlreadyDeployed));
                        } else if model.len() == 3 {
                            prop_assert_eq!(res, Err(RegistryError::Full));
                        } else {
                            prop_assert!(res.unwrap() > last);
                            model.insert(k, i as u32);
                        }
                    }
                    1 => {
                        if model.len() < 3 || model.contains_key(&k) {
                            prop_assert!(r.deploy_or_replace(n(&name), i as u32).unwrap().generation > last);
                            model.insert(k, i as u32);
                        }
                    }
                    _ => prop_assert_eq!(r.remove(&name).map(|e| e.function).ok(), model.remove(&k)),
                }
                prop_assert!(r.generation() >= last);
                last = r.generation();
                let got: Vec<u32> = r.list().iter().map(|e| e.function).collect();
                let want: Vec<u32> = model.values().copied().collect();
                prop_assert_eq!(got, want);
            }
        }
    }
}
