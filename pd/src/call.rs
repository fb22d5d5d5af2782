//! The per-PD call state machine behind `ccall`, `cexit` and `center` (Jord §3.2, §3.4).
//!
//! ```text
//!            ccall                cexit
//!   Idle ───────────▶ Running ───────────▶ Suspended
//!    ▲                 │  ▲                   │
//!    └──── return ─────┘  └────── center ─────┘
//! ```
//!
//! A PD that enters a child with `ccall`/`center` (when it is not the kernel) waits in
//! `Blocked` until the child returns or exits. The kernel (the executors) is not tracked: it
//! runs on every CPU at once. This module only checks and records transitions; the kernel does
//! the register save/scrub/restore and the CR3 switch named by the returned [`Switch`].

use crate::error::{Error, Result};
use crate::pd_id::PdId;
use crate::pd_table::PdTable;

/// Where a PD is in its call life cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallState {
    /// Created or returned; may be entered with `ccall`.
    Idle,
    /// Executing on `cpu`; control goes back to `return_to` when it returns or exits.
    Running {
        /// The CPU it runs on.
        cpu: u32,
        /// The PD that entered it.
        return_to: PdId,
    },
    /// Waiting inside `ccall`/`center` for `callee`.
    Blocked {
        /// The PD it entered.
        callee: PdId,
        /// The PD that entered it.
        return_to: PdId,
    },
    /// Suspended by `cexit`; may be resumed with `center` by `return_to`'s side.
    Suspended {
        /// The PD that entered it last.
        return_to: PdId,
    },
}

/// A PD switch the kernel must perform: load `to`'s page table (and `ucid = to`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Switch {
    /// The PD that was running.
    pub from: PdId,
    /// The PD to run next.
    pub to: PdId,
}

impl PdTable {
    /// Checks that `caller` is live and, when it is not the kernel, running on `cpu`.
    fn check_caller_on(&self, caller: PdId, cpu: u32) -> Result<()> {
        self.check_live(caller)?;
        if caller == PdId::KERNEL {
            return Ok(());
        }
        match self.call_state(caller) {
            Some(CallState::Running { cpu: c, .. }) if c == cpu => Ok(()),
            _ => Err(Error::Busy),
        }
    }

    /// Moves `caller` (not the kernel) into `Blocked` on `callee`.
    fn block(&mut self, caller: PdId, callee: PdId) {
        if caller == PdId::KERNEL {
            return;
        }
        if let Some(CallState::Running { return_to, .. }) = self.call_state(caller) {
            self.set_call_state(caller, CallState::Blocked { callee, return_to });
        }
    }

    /// Wakes `to` (not the kernel) from `Blocked` on `from`, running on `cpu`.
    fn unblock(&mut self, to: PdId, from: PdId, cpu: u32) {
        if let Some(CallState::Blocked { callee, return_to }) = self.call_state(to)
            && callee == from
        {
            self.set_call_state(to, CallState::Running { cpu, return_to });
        }
    }

    fn enter(
        &mut self,
        caller: PdId,
        cid: PdId,
        cpu: u32,
        from: CallState,
        checks: bool,
    ) -> Result<Switch> {
        self.check_live(cid)?;
        self.check_caller_on(caller, cpu)?;
        if cid == PdId::KERNEL || cid == caller {
            return Err(Error::InvalidArgs);
        }
        if checks && !self.may_control(caller, cid) {
            return Err(Error::AccessDenied);
        }
        let state = self.call_state(cid).ok_or(Error::NoSuchPd)?;
        let ok = matches!(
            (from, state),
            (CallState::Idle, CallState::Idle)
                | (CallState::Suspended { .. }, CallState::Suspended { .. })
        );
        if !ok {
            return Err(Error::Busy);
        }
        self.block(caller, cid);
        self.set_call_state(
            cid,
            CallState::Running {
                cpu,
                return_to: caller,
            },
        );
        Ok(Switch {
            from: caller,
            to: cid,
        })
    }

    /// `ccall(cid)`: `caller` (running on `cpu`) enters the idle PD `cid`. With `checks`, only
    /// the kernel or `cid`'s creator may.
    pub fn ccall(&mut self, caller: PdId, cid: PdId, cpu: u32, checks: bool) -> Result<Switch> {
        self.enter(caller, cid, cpu, CallState::Idle, checks)
    }

    /// `center(cid)`: `caller` resumes the suspended PD `cid` on `cpu`.
    pub fn center(&mut self, caller: PdId, cid: PdId, cpu: u32, checks: bool) -> Result<Switch> {
        self.enter(
            caller,
            cid,
            cpu,
            CallState::Suspended { return_to: caller },
            checks,
        )
    }

    fn leave(&mut self, cid: PdId, cpu: u32, next: fn(PdId) -> CallState) -> Result<Switch> {
        self.check_live(cid)?;
        match self.call_state(cid) {
            Some(CallState::Running { cpu: c, return_to }) if c == cpu => {
                self.set_call_state(cid, next(return_to));
                self.unblock(return_to, cid, cpu);
                Ok(Switch {
                    from: cid,
                    to: return_to,
                })
            }
            _ => Err(Error::Busy),
        }
    }

    /// The return half of `ccall`: the function running in `cid` on `cpu` returned; it becomes
    /// idle and control goes back to whoever entered it.
    pub fn creturn(&mut self, cid: PdId, cpu: u32) -> Result<Switch> {
        self.leave(cid, cpu, |_| CallState::Idle)
    }

    /// `cexit()`: the PD running on `cpu` suspends itself; control goes back to whoever entered
    /// it.
    pub fn cexit(&mut self, cid: PdId, cpu: u32) -> Result<Switch> {
        self.leave(cid, cpu, |return_to| CallState::Suspended { return_to })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_exit_resume_return() {
        let mut t = PdTable::new(8).unwrap();
        let k = PdId::KERNEL;
        let a = t.create(k).unwrap();
        let s = t.ccall(k, a, 0, true).unwrap();
        assert_eq!((s.from, s.to), (k, a));
        assert_eq!(t.ccall(k, a, 1, true), Err(Error::Busy));
        assert_eq!(t.center(k, a, 0, true), Err(Error::Busy));
        assert_eq!(t.cexit(a, 1), Err(Error::Busy)); // not running on cpu 1
        assert_eq!(t.cexit(a, 0).unwrap().to, k);
        assert_eq!(t.call_state(a), Some(CallState::Suspended { return_to: k }));
        assert_eq!(t.ccall(k, a, 0, true), Err(Error::Busy));
        assert_eq!(t.center(k, a, 3, true).unwrap().to, a);
        assert_eq!(t.creturn(a, 3).unwrap().to, k);
        assert_eq!(t.call_state(a), Some(CallState::Idle));
        assert_eq!(t.creturn(a, 3), Err(Error::Busy));
    }

    #[test]
    fn nested_calls_block_the_caller() {
        let mut t = PdTable::new(8).unwrap();
        let k = PdId::KERNEL;
        let a = t.create(k).unwrap();
        let b = t.create(a).unwrap();
        let c = t.create(k).unwrap();
        t.ccall(k, a, 2, true).unwrap();
        assert_eq!(t.ccall(a, c, 2, true), Err(Error::AccessDenied));
        assert_eq!(t.ccall(a, b, 1, true), Err(Error::Busy)); // a is not on cpu 1
        t.ccall(a, b, 2, true).unwrap();
        assert_eq!(
            t.call_state(a),
            Some(CallState::Blocked {
                callee: b,
                return_to: k
            })
        );
        assert_eq!(t.cexit(a, 2), Err(Error::Busy));
        assert_eq!(t.creturn(b, 2).unwrap().to, a);
        assert_eq!(
            t.call_state(a),
            Some(CallState::Running {
                cpu: 2,
                return_to: k
            })
        );
    }

    #[test]
    fn forged_and_self_targets() {
        let mut t = PdTable::new(8).unwrap();
        let k = PdId::KERNEL;
        let ghost = PdId::from_raw(5).unwrap();
        assert_eq!(t.ccall(k, ghost, 0, true), Err(Error::NoSuchPd));
        assert_eq!(t.ccall(k, k, 0, true), Err(Error::InvalidArgs));
        assert_eq!(t.cexit(k, 0), Err(Error::Busy));
        let a = t.create(k).unwrap();
        let b = t.create(k).unwrap();
        // a is not running, so it cannot call anyone.
        assert_eq!(t.ccall(a, b, 0, true), Err(Error::Busy));
        // Without checks the creator rule is skipped, not the state machine.
        t.ccall(k, a, 0, false).unwrap();
        assert_eq!(t.ccall(a, b, 0, false).map(|s| s.to), Ok(b));
    }
}
