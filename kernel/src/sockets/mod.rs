//! The programs' TCP sockets ([`fjord_kernel::socket_table`]), shared by the network loop,
//! which hands them their segments and sends what they hold, and by the system calls of the
//! μprocesses that use them (`crate::ufork`).
//!
//! The table is off until the network loop is up ([`enable`]): without a network card, or in
//! the in-kernel tests, every call answers [`SockError::NoNetwork`]. A system call that leaves
//! something to send (a write, a close, a connect, a read that reopens the receive window)
//! [`kick`]s the network loop, waking its CPU if it halted, so the bytes leave at once rather
//! than at its next timer tick.

pub mod metrics;

use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
pub use fjord_kernel::socket_table::{Readiness, SockError, SockId, SocketTable};
use spin::Mutex;

static TABLE: Mutex<Option<SocketTable>> = Mutex::new(None);
/// Whether a system call left something for the network loop to send.
static DIRTY: AtomicBool = AtomicBool::new(false);
/// The CPU the network loop runs on (`usize::MAX` before [`enable`]).
static NET_CPU: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Turns the sockets on: the network loop, on CPU `cpu`, serves them; `reserved` is the port
/// programs may not bind (the HTTP gateway's).
pub fn enable(reserved: u16, cpu: usize) {
    crate::arch::cpu::without_interrupts(|| {
        *TABLE.lock() = Some(SocketTable::new(reserved));
    });
    NET_CPU.store(cpu, Ordering::Release);
}

/// Turns the sockets off (there is no network card): every socket call fails from now on.
pub fn disable() {
    crate::arch::cpu::without_interrupts(|| *TABLE.lock() = None);
    NET_CPU.store(usize::MAX, Ordering::Release);
}

/// Runs `f` on the table (interrupts off, under its lock), or fails with
/// [`SockError::NoNetwork`] when the sockets are off.
pub fn with<R>(f: impl FnOnce(&mut SocketTable) -> R) -> Result<R, SockError> {
    crate::arch::cpu::without_interrupts(|| TABLE.lock().as_mut().map(f))
        .ok_or(SockError::NoNetwork)
}

/// Tells the network loop a socket has something to send, waking its CPU if it is halted.
pub fn kick() {
    DIRTY.store(true, Ordering::Release);
    let cpu = NET_CPU.load(Ordering::Acquire);
    if cpu != crate::arch::percpu::cpu_index() && crate::arch::smp::is_halted(cpu) {
        let _ = crate::arch::smp::wake(cpu);
    }
}

/// Whether a socket was [`kick`]ed since the last call (the network loop's question).
pub fn take_kicked() -> bool {
    DIRTY.swap(false, Ordering::AcqRel)
}
