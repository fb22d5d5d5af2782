//! Keys, counters and id lists in the key-value store, over an [`Env`].
//!
//! Every workload keeps its state under its own prefix (`hotel/`, `social/`, `media/`,
//! `hipster/`) and bounds it: slots are reused (`id % slots`), lists are capped.

use core::fmt::{self, Write};
use fjord_libos::function::FnError;
use fjord_libos::kv::MAX_KEY;
use fjord_libos::text::{Writer, parse_u64};

use crate::{Env, IdList};

/// A key formatted on the stack.
pub struct Key {
    buf: [u8; MAX_KEY],
    len: usize,
}

impl Key {
    /// Formats a key (`Key::new(format_args!("hotel/rsv/{id}"))`); `Failed` if too long.
    pub fn new(args: fmt::Arguments<'_>) -> Result<Key, FnError> {
        let mut buf = [0; MAX_KEY];
        let mut w = Writer::new(&mut buf);
        w.write_fmt(args).map_err(|_| FnError::Failed)?;
        let len = w.len();
        Ok(Key { buf, len })
    }

    /// The key's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// The decimal number under `key` (0 when absent).
pub fn get_u64<E: Env>(env: &mut E, key: &Key) -> Result<u64, FnError> {
    let mut buf = [0u8; 20];
    match env.kv_get(key.as_bytes(), &mut buf)? {
        None | Some(0) => Ok(0),
        Some(n) if n <= buf.len() => parse_u64(&buf[..n]).ok_or(FnError::Failed),
        Some(_) => Err(FnError::Failed),
    }
}

/// Stores `value` under `key` in decimal.
pub fn put_u64<E: Env>(env: &mut E, key: &Key, value: u64) -> Result<(), FnError> {
    let mut buf = [0u8; 20];
    let mut w = Writer::new(&mut buf);
    let _ = write!(w, "{value}");
    let n = w.finish()?;
    env.kv_put(key.as_bytes(), &buf[..n])
}

/// Increments the counter under `key` and returns its new value (1 the first time).
///
/// Not atomic: two concurrent callers may draw the same value (the original services use
/// atomic memcached/Redis increments; the kernel store has only get and put).
pub fn next_counter<E: Env>(env: &mut E, key: &Key) -> Result<u64, FnError> {
    let next = get_u64(env, key)? + 1;
    put_u64(env, key, next)?;
    Ok(next)
}

/// The id list under `key`, `None` when the key has no value.
pub fn get_list<E: Env, const N: usize>(
    env: &mut E,
    key: &Key,
) -> Result<Option<IdList<N>>, FnError> {
    let mut buf = [0u8; 512];
    match env.kv_get(key.as_bytes(), &mut buf)? {
        None => Ok(None),
        Some(n) if n <= buf.len() => IdList::parse(&buf[..n]).map(Some).ok_or(FnError::Failed),
        Some(_) => Err(FnError::Failed),
    }
}

/// Stores `list` under `key`.
pub fn put_list<E: Env, const N: usize>(
    env: &mut E,
    key: &Key,
    list: &IdList<N>,
) -> Result<(), FnError> {
    let mut buf = [0u8; 512];
    let mut w = Writer::new(&mut buf);
    write!(w, "{list}").map_err(|_| FnError::Failed)?;
    let n = w.finish()?;
    env.kv_put(key.as_bytes(), &buf[..n])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_env::TestEnv;

    #[test]
    fn counters_and_lists_round_trip() {
        let mut env = TestEnv::new(&[]);
        let k = Key::new(format_args!("t/{}", 7)).unwrap();
        assert_eq!(k.as_bytes(), b"t/7");
        assert_eq!(get_u64(&mut env, &k), Ok(0));
        assert_eq!(next_counter(&mut env, &k), Ok(1));
        assert_eq!(next_counter(&mut env, &k), Ok(2));
        let l = Key::new(format_args!("l")).unwrap();
        assert_eq!(get_list::<_, 4>(&mut env, &l), Ok(None));
        let list = IdList::<4>::parse(b"4,5").unwrap();
        put_list(&mut env, &l, &list).unwrap();
        assert_eq!(get_list::<_, 4>(&mut env, &l), Ok(Some(list)));
        assert!(Key::new(format_args!("{:200}", 1)).is_err());
    }
}
