//! The key-value system calls (`kv_get`, `kv_put`, `kv_delete`), each acting in the namespace
//! of the tenant its caller acts for (see [`crate::jord::tenant`] and
//! [`fjord_kernel::kv_store`]). A PD that acts for no tenant has no namespace: its calls are
//! refused with [`Error::AccessDenied`].

pub mod metrics;

use crate::arch::{cpu, percpu};
use crate::jord::tenant;
use crate::mm::user_memory;
use alloc::vec::Vec;
use fjord_kernel::kv_store::{self, KvError, KvStore, NsId, Usage};
use fjord_libos::abi::Error;
use fjord_pd::PdId;

/// The store: every namespace.
static KV: spin::Mutex<KvStore> = spin::Mutex::new(KvStore::new(0));

fn locked<R>(f: impl FnOnce(&mut KvStore) -> R) -> R {
    cpu::without_interrupts(|| f(&mut KV.lock()))
}

/// Runs `f` on the store (kernel code and tests reaching a namespace by id).
pub fn with<R>(f: impl FnOnce(&mut KvStore) -> R) -> R {
    locked(f)
}

/// Sets what the namespaces' quotas may add up to (at boot: half the kernel heap).
pub fn init(capacity: usize) {
    locked(|kv| kv.set_capacity(capacity));
}

/// Empties every namespace, as at boot (the workload benchmarks start every system's run of
/// an operation from the same state).
pub fn clear() {
    locked(KvStore::clear);
}

/// A function deployed to act in namespace `name` with a quota of `quota` bytes: its
/// namespace's id, made or joined ([`KvStore::attach`]).
pub fn attach(name: &str, quota: usize) -> Result<NsId, KvError> {
    locked(|kv| kv.attach(name, quota))
}

/// A function acting in namespace `ns` went ([`KvStore::detach`]).
pub fn detach(ns: NsId) {
    locked(|kv| kv.detach(ns));
}

/// What each namespace holds, for `/metrics`.
pub fn usage() -> Vec<Usage> {
    locked(|kv| kv.usage())
}

/// The namespace the calling PD acts in.
fn caller_namespace() -> Result<NsId, Error> {
    let me = PdId::from_raw(percpu::current().current_pd).map_err(|_| Error::AccessDenied)?;
    tenant::namespace(me).ok_or(Error::AccessDenied)
}

fn kv_error(e: KvError) -> Error {
    match e {
        KvError::TooLarge => Error::TooLarge,
        KvError::Full => Error::LimitReached,
        KvError::NoNamespace => Error::AccessDenied,
        KvError::NoRoom => Error::NoMemory,
    }
}

/// The key of a call, after checking its length and that the caller may read it.
fn key<'a>(ptr: u64, len: u64) -> Result<&'a [u8], Error> {
    if !kv_store::key_fits(usize::try_from(len).unwrap_or(usize::MAX)) {
        return Err(Error::TooLarge);
    }
    Ok(user_memory::bytes(ptr, len)?)
}

/// `kv_get(key, key_len, out, out_len)`.
pub fn get(a: [u64; 4]) -> Result<u64, Error> {
    let ns = caller_namespace()?;
    let key = key(a[0], a[1])?;
    let out_len = a[3].min(kv_store::MAX_VALUE as u64);
    if out_len > 0 {
        user_memory::check_writable(a[2], out_len)?;
    }
    locked(|kv| {
        let value = kv.get(ns, key).map_err(kv_error)?.ok_or(Error::NotFound)?;
        let n = value.len().min(out_len as usize);
        user_memory::copy_to(a[2], &value[..n])?;
        Ok(value.len() as u64)
    })
}

/// `kv_put(key, key_len, value, value_len)`.
pub fn put(a: [u64; 4]) -> Result<u64, Error> {
    let ns = caller_namespace()?;
    if a[3] > kv_store::MAX_VALUE as u64 {
        return Err(Error::TooLarge);
    }
    let key = key(a[0], a[1])?;
    let value = user_memory::bytes(a[2], a[3])?;
    locked(|kv| kv.put(ns, key, value)).map_err(kv_error)?;
    Ok(0)
}

/// `kv_delete(key, key_len)`.
pub fn delete(a: [u64; 4]) -> Result<u64, Error> {
    let ns = caller_namespace()?;
    let key = key(a[0], a[1])?;
    match locked(|kv| kv.delete(ns, key)).map_err(kv_error)? {
        true => Ok(0),
        false => Err(Error::NotFound),
    }
}
