//! The `log` system call: a UTF-8 message from user memory on the console, within two bounds.
//!
//! - Each invocation may write its function's `log_limit` bytes (manifest; 16 KiB by default),
//!   the PDs it creates included ([`crate::jord::tenant::take_log`]).
//! - All functions together may write [`RATE_BYTES_PER_SEC`] bytes a second, with bursts of
//!   [`BURST_BYTES`]: the console is a slow serial line that every CPU shares, and a flood would
//!   stall the executors that wait for it.
//!
//! A message beyond either bound is dropped whole, counted ([`dropped`]) and refused with
//! [`Error::LimitReached`]; the function runs on.

use crate::arch::{percpu, time};
use crate::jord::tenant;
use core::sync::atomic::{AtomicU64, Ordering};
use fjord_libos::abi::Error;
use fjord_pd::PdId;

/// Longest message `log` accepts.
pub const MAX_LOG_LEN: u64 = 4096;
/// Console bytes a second all functions together may write.
pub const RATE_BYTES_PER_SEC: u64 = 64 * 1024;
/// Most bytes written at once after a quiet spell.
pub const BURST_BYTES: u64 = 64 * 1024;

/// Messages and bytes dropped because an invocation had used its `log_limit`.
static OVER_LIMIT: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];
/// Messages and bytes dropped because the console was written faster than its rate.
static OVER_RATE: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

/// What was dropped: (messages, bytes) over an invocation's limit, and over the console rate.
pub fn dropped() -> ((u64, u64), (u64, u64)) {
    let read = |c: &[AtomicU64; 2]| (c[0].load(Ordering::Relaxed), c[1].load(Ordering::Relaxed));
    (read(&OVER_LIMIT), read(&OVER_RATE))
}

fn count(c: &[AtomicU64; 2], len: u64) {
    c[0].fetch_add(1, Ordering::Relaxed);
    c[1].fetch_add(len, Ordering::Relaxed);
}

/// The console's token bucket: bytes that may be written now, and when it was last filled.
struct Bucket {
    tokens: u64,
    filled_at: u64,
}

static BUCKET: spin::Mutex<Bucket> = spin::Mutex::new(Bucket {
    tokens: BURST_BYTES,
    filled_at: 0,
});

/// Takes `len` bytes from the console's rate; false when they are not there.
fn take_rate(len: u64) -> bool {
    let now = time::now();
    let mut b = BUCKET.lock();
    let earned = u128::from(time::events_in(
        now.saturating_sub(b.filled_at),
        RATE_BYTES_PER_SEC,
    ));
    if earned > 0 {
        b.tokens = (u128::from(b.tokens) + earned).min(u128::from(BURST_BYTES)) as u64;
        b.filled_at = now;
    }
    match b.tokens.checked_sub(len) {
        Some(left) => {
            b.tokens = left;
            true
        }
        None => false,
    }
}

/// `log(ptr, len)`: prints a UTF-8 message from user memory on the console.
pub fn log(ptr: u64, len: u64) -> Result<u64, Error> {
    if len > MAX_LOG_LEN {
        return Err(Error::InvalidArgs);
    }
    let bytes = crate::mm::user_memory::bytes(ptr, len)?;
    let msg = core::str::from_utf8(bytes).map_err(|_| Error::InvalidArgs)?;
    let me = PdId::from_raw(percpu::current().current_pd).unwrap_or(PdId::KERNEL);
    if !tenant::take_log(me, len as u32) {
        count(&OVER_LIMIT, len);
        return Err(Error::LimitReached);
    }
    if !take_rate(len) {
        count(&OVER_RATE, len);
        return Err(Error::LimitReached);
    }
    crate::arch::serial::write_fmt(format_args!("[user cpu{}] {}\n", percpu::cpu_index(), msg));
    Ok(len)
}
