//! [`TestEnv`]: a workload's functions in one host process, for unit tests of whole call
//! graphs.
//!
//! A nested call runs the callee at once, inside `start` (a legal schedule of the kernel's
//! asynchronous calls), on an ArgBuf laid out as on Fjord: the request at its start, the
//! response room after [`response_offset`], the capacity rounded up to whole pages. The store
//! has the kernel store's key and value limits.

extern crate std;

use core::fmt;
use std::collections::BTreeMap;
use std::string::{String, ToString};
use std::vec;
use std::vec::Vec;

use fjord_libos::function::{FnError, argbuf_size, response_offset};
use fjord_libos::kv::{MAX_VALUE, key_fits};
use fjord_libos::text::Writer;

use crate::env::{Env, write_request};

/// A workload function as the test env runs it.
pub type Route = crate::env::Route<TestEnv>;

/// The `kv_quota` every workload's manifests declare (`kv_quota = "1M"`).
pub const WORKLOAD_KV_QUOTA: usize = 1 << 20;

/// Functions by name, a key-value store and call counts.
pub struct TestEnv {
    routes: Vec<(&'static str, Route)>,
    /// The key-value store.
    pub store: BTreeMap<Vec<u8>, Vec<u8>>,
    calls: BTreeMap<String, usize>,
}

impl TestEnv {
    /// An env serving `routes`.
    pub fn new(routes: &[(&'static str, Route)]) -> Self {
        TestEnv {
            routes: routes.to_vec(),
            store: BTreeMap::new(),
            calls: BTreeMap::new(),
        }
    }

    /// Invokes `name` as the gateway does, on an ArgBuf of
    /// [`external_capacity`](fjord_libos::function::external_capacity) bytes.
    pub fn invoke(&mut self, name: &str, request: &[u8]) -> Result<Vec<u8>, FnError> {
        let capacity = fjord_libos::function::external_capacity(request.len());
        self.run(name, request, capacity)
    }

    /// How often `name` was called (external and nested).
    pub fn calls(&self, name: &str) -> usize {
        self.calls.get(name).copied().unwrap_or(0)
    }

    /// How many calls were made in all.
    pub fn total_calls(&self) -> usize {
        self.calls.values().sum()
    }

    /// Forgets the call counts.
    pub fn reset_calls(&mut self) {
        self.calls.clear();
    }

    /// Bytes of keys and values in the store.
    pub fn store_bytes(&self) -> usize {
        self.store.iter().map(|(k, v)| k.len() + v.len()).sum()
    }

    /// Bytes the kernel would count against the namespace's `kv_quota`: keys, values and
    /// 64 bytes per entry.
    pub fn quota_bytes(&self) -> usize {
        self.store_bytes() + 64 * self.store.len()
    }

    /// Invokes every `(entry, request)` of `ops` `rounds` times and returns the most bytes the
    /// state was counted at ([`TestEnv::quota_bytes`]) after any round.
    pub fn most_state(&mut self, ops: &[(&str, &[u8])], rounds: usize) -> usize {
        let mut most = 0;
        for _ in 0..rounds {
            for &(entry, request) in ops {
                let _ = self.invoke(entry, request);
            }
            most = most.max(self.quota_bytes());
        }
        most
    }

    fn run(&mut self, name: &str, request: &[u8], capacity: usize) -> Result<Vec<u8>, FnError> {
        *self.calls.entry(name.to_string()).or_default() += 1;
        let route = self
            .routes
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, r)| r)
            .ok_or(FnError::Failed)?;
        let capacity = argbuf_size(capacity);
        let start = response_offset(request.len());
        let mut resp = vec![0u8; capacity.checked_sub(start).ok_or(FnError::BadArgBuf)?];
        let n = route(self, request, &mut resp)?;
        resp.truncate(n);
        Ok(resp)
    }
}

impl Env for TestEnv {
    type Pending = Result<Vec<u8>, FnError>;
    type Reply = Vec<u8>;

    fn start<F>(&mut self, name: &str, capacity: usize, build: F) -> Result<Self::Pending, FnError>
    where
        F: FnOnce(&mut Writer<'_>) -> fmt::Result,
    {
        let mut buf = vec![0u8; argbuf_size(capacity)];
        let len = write_request(&mut buf, build)?;
        Ok(self.run(name, &buf[..len], buf.len()))
    }

    fn wait(&mut self, pending: Self::Pending) -> Result<Vec<u8>, FnError> {
        pending
    }

    fn kv_get(&mut self, key: &[u8], out: &mut [u8]) -> Result<Option<usize>, FnError> {
        check_key(key)?;
        Ok(self.store.get(key).map(|v| {
            let n = v.len().min(out.len());
            out[..n].copy_from_slice(&v[..n]);
            v.len()
        }))
    }

    fn kv_put(&mut self, key: &[u8], value: &[u8]) -> Result<(), FnError> {
        check_key(key)?;
        if value.len() > MAX_VALUE {
            return Err(FnError::Failed);
        }
        self.store.insert(key.to_vec(), value.to_vec());
        Ok(())
    }
}

fn check_key(key: &[u8]) -> Result<(), FnError> {
    key_fits(key.len()).then_some(()).ok_or(FnError::Failed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Bytes;
    use core::fmt::Write;

    fn twice(env: &mut TestEnv, req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
        if req == b"leaf" {
            resp[..2].copy_from_slice(b"ok");
            return Ok(2);
        }
        let a = env.start("t", 4096, |w| w.write_str("leaf"))?;
        let b = env.start("t", 4096, |w| w.write_str("leaf"))?;
        let (a, b) = (env.wait(a)?, env.wait(b)?);
        let mut w = Writer::new(resp);
        let _ = w.bytes(a.bytes());
        let _ = w.bytes(b.bytes());
        w.finish()
    }

    #[test]
    fn nested_calls_run_in_process() {
        let mut env = TestEnv::new(&[("t", twice)]);
        assert_eq!(env.invoke("t", b"go").unwrap(), b"okok");
        assert_eq!(env.calls("t"), 3);
        assert_eq!(env.invoke("none", b"x"), Err(FnError::Failed));
    }
}
