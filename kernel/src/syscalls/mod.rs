//! System-call policy: which calls return straight to ring 3, which end the run, and which go
//! to the executor; plus the built-in calls that need more than a register.
//!
//! PrivLib calls act for the PD running on this CPU (`ucid`). Ring-3 code that runs outside any
//! PD (the kernel's own self-test address spaces, `ucid` 0) may not use them.

pub mod log;
pub mod metrics;

use crate::arch::percpu;
use crate::arch::user::SyscallAction as Action;
use crate::jord::{self, Owes, state::abi_error};
use fjord_libos::abi::{Error, Sysno, encode};
use fjord_pd::{Error as PdError, MapFlags, PdId, Perm};

/// A μprocess's call goes to the executor; outside any PD (the kernel's own test spaces,
/// `ucid` 0) it is refused.
fn delegate() -> Action {
    match percpu::current().current_pd {
        0 => Action::Return(encode(Err(Error::AccessDenied))),
        _ => Action::Delegate,
    }
}

/// Decides and performs system call `no` with `args` for the code running on this CPU.
pub fn dispatch(no: u64, args: [u64; 4]) -> Action {
    let Some(call) = Sysno::from_raw(no) else {
        return Action::Return(encode(Err(Error::NoSys)));
    };
    let r = match call {
        Sysno::Null => Ok(0),
        Sysno::Exit => return Action::Exit(args[0]),
        Sysno::Log => log::log(args[0], args[1]),
        Sysno::CpuId => Ok(percpu::cpu_index() as u64),
        Sysno::Ucid => Ok(percpu::current().current_pd),
        // Outside any PD (the kernel's own test spaces) a function's return ends the run.
        Sysno::Creturn if percpu::current().current_pd == 0 => return Action::Exit(args[0]),
        Sysno::KvGet => crate::kv::get(args),
        Sysno::KvPut => crate::kv::put(args),
        Sysno::KvDelete => crate::kv::delete(args),
        Sysno::Ccall
        | Sysno::CcallMove
        | Sysno::CreturnMove
        | Sysno::Center
        | Sysno::Cexit
        | Sysno::Creturn
        | Sysno::AsyncCall
        | Sysno::Wait
        | Sysno::Call
        | Sysno::Fork
        | Sysno::Waitpid
        | Sysno::SchedYield
        | Sysno::Pipe
        | Sysno::Read
        | Sysno::Close
        | Sysno::Dup2
        | Sysno::Kill
        | Sysno::Sleep
        | Sysno::SetForkMode
        | Sysno::MemInfo
        | Sysno::Spawn
        | Sysno::Isolation
        | Sysno::Open
        | Sysno::Fsync
        | Sysno::Rename
        | Sysno::Unlink
        | Sysno::Discard => return delegate(),
        s if s.is_socket() => return delegate(),
        // A μprocess's PIDs, and its write to a pipe or socket with room, complete here; the
        // rest is its step's.
        Sysno::Getpid => match crate::ufork::in_call::getpid() {
            Some(v) => return Action::Return(v),
            None => return delegate(),
        },
        Sysno::Getppid => match crate::ufork::in_call::getppid() {
            Some(v) => return Action::Return(v),
            None => return delegate(),
        },
        Sysno::Write => match crate::ufork::in_call::write(args) {
            Some(v) => return Action::Return(v),
            None => return delegate(),
        },
        Sysno::Clock => clock(args[0]),
        // A μprocess's area may hold pages its lazy fork has not settled: its executor copies.
        Sysno::GetRandom => match PdId::from_raw(percpu::current().current_pd) {
            Ok(pd) if jord::tenant::is_uprocess(pd) => return delegate(),
            _ => getrandom(args[0], args[1]),
        },
        _ => privlib(call, args),
    };
    Action::Return(encode(r))
}

/// `clock(which)`: nanoseconds since boot (0) or since the Unix epoch (1).
fn clock(which: u64) -> Result<u64, Error> {
    let since_boot = crate::arch::time::ticks_to_ns(crate::arch::time::now());
    match which {
        0 => Ok(since_boot),
        1 => Ok(crate::arch::time::boot_unix_ns().saturating_add(since_boot)),
        _ => Err(Error::InvalidArgs),
    }
}

/// `getrandom(buf, len)` for the code running on this CPU: up to
/// [`fjord_libos::abi::GETRANDOM_MAX`] bytes of the kernel's generator at `buf`.
fn getrandom(buf: u64, len: u64) -> Result<u64, Error> {
    use crate::mm::user_memory;
    user_memory::check_writable(buf, len.min(fjord_libos::abi::GETRANDOM_MAX))?;
    crate::random::fill_user(len, |at, bytes| {
        user_memory::copy_to(buf + at, bytes).map_err(Error::from)
    })
}

/// Why a PD's own `mmap` failed: the kernel ran out of VMAs or frames, or anything else
/// (its allowance included).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Short {
    Memory,
    Other(PdError),
}

/// `mmap` for `me` from its allowance, populating a small VMA at once.
fn map_own(me: PdId, len: u64, prot: Perm) -> Result<u64, Short> {
    jord::with(|j| {
        j.charge(me, len).map_err(Short::Other)?;
        let base = j.mmap(me, len, prot, MapFlags::default()).map_err(|e| {
            j.uncharge(me, len);
            match e {
                PdError::NoMemory => Short::Memory,
                e => Short::Other(e),
            }
        })?;
        j.populate(me, base, prot);
        Ok(base)
    })
}

fn privlib(call: Sysno, a: [u64; 4]) -> Result<u64, Error> {
    let me = percpu::current().current_pd;
    if me == 0 {
        return Err(Error::AccessDenied);
    }
    let me = PdId::from_raw(me).map_err(abi_error)?;
    let perm = |raw: u64| Perm::from_raw(raw).map_err(abi_error);
    let pd = |raw: u64| jord::state::pd_arg(raw).map_err(abi_error);
    // A μprocess's memory is its one area: it maps from its heap (libos `process::map`) and
    // creates no PD.
    if matches!(call, Sysno::Mmap | Sysno::Cget) && jord::tenant::is_uprocess(me) {
        return Err(Error::AccessDenied);
    }
    let owed = match call {
        Sysno::Mmap => {
            let prot = perm(a[1])?;
            if a[2] != 0 {
                return Err(Error::InvalidArgs);
            }
            // Idle function instances may hold the memory this needs.
            let r =
                crate::module::warm::or_drain(|| map_own(me, a[0], prot), |e| *e == Short::Memory);
            let r = r.map_err(|e| match e {
                Short::Memory => PdError::NoMemory,
                Short::Other(e) => e,
            });
            return r.map_err(abi_error);
        }
        Sysno::Munmap => jord::with(|j| {
            let p = j.munmap(me, a[0], a[1])?;
            j.uncharge(me, a[1]);
            Ok(p)
        }),
        Sysno::Mprotect => {
            let prot = perm(a[2])?;
            jord::with(|j| j.mprotect(me, a[0], a[1], prot))
        }
        Sysno::Pmove => {
            let (cid, prot) = (pd(a[1])?, perm(a[2])?);
            jord::with(|j| j.pmove(me, a[0], cid, prot))
        }
        Sysno::Pcopy => {
            let (cid, prot) = (pd(a[1])?, perm(a[2])?);
            return jord::with(|j| j.pcopy(me, a[0], cid, prot))
                .map(|()| 0)
                .map_err(abi_error);
        }
        Sysno::Cget => {
            return jord::with(|j| j.cget(me))
                .map(|c| u64::from(c.raw()))
                .map_err(abi_error);
        }
        Sysno::Cput => {
            let cid = pd(a[0])?;
            jord::with(|j| j.cput(me, cid))
        }
        _ => return Err(Error::NoSys),
    };
    owed.map_err(abi_error)?.settle();
    Ok(0)
}
