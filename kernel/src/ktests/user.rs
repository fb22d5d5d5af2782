//! Tests of ring 3: entry, the syscall round trip, typed user faults, and preemption.

use crate::arch::smp;
use crate::arch::user::{Access, UserExit};
use crate::ktest;
use crate::ktests::user_programs::Program;
use crate::ktests::userspace::{CODE_BASE, DATA_BASE, UserSpace};
use fjord_kernel::{kassert, kassert_eq};
use fjord_libos::abi::{Error, Sysno, encode};

fn space() -> Result<UserSpace, alloc::string::String> {
    UserSpace::new(1).map_err(|e| alloc::format!("{e:?}"))
}

ktest! {
    fn ring3_hello_logs_and_exits() {
        let mut s = space()?;
        kassert_eq!(s.run(Program::Hello, [0; 3], Some(1000)), UserExit::Exited(42));
        Ok(())
    }
}

ktest! {
    fn null_syscall_round_trip_from_ring3() {
        let mut s = space()?;
        kassert_eq!(s.run(Program::NullLoop, [16, DATA_BASE, 0], Some(1000)), UserExit::Exited(0));
        let d = &s.data()[..16];
        kassert!(d.iter().all(|&t| t > 0 && t < 10_000_000), "deltas {d:?}");
        Ok(())
    }
}

ktest! {
    fn user_read_of_kernel_memory_faults_and_is_reported() {
        let mut s = space()?;
        let target = crate::mm::phys_to_virt(0x10_0000);
        match s.run(Program::Read, [target, 0, 0], Some(1000)) {
            UserExit::Fault(f) => {
                kassert_eq!(f.vector, 14);
                kassert_eq!(f.addr, target);
                kassert_eq!(f.access, Access::Read);
                // Hardware reports a present, supervisor-only page (P=1); a hypervisor that
                // runs ring 3 on page tables without the kernel's pages (KVM's PVM backend)
                // reports a missing one. Either way ring 3 reads nothing.
                if !crate::boot::ring0_emulated() {
                    kassert!(f.protection, "the page is present but supervisor-only");
                }
            }
            other => return Err(alloc::format!("expected a fault, got {other:?}")),
        }
        // The kernel goes on: the same space runs again.
        kassert_eq!(s.run(Program::Hello, [0; 3], Some(1000)), UserExit::Exited(42));
        Ok(())
    }
}

ktest! {
    fn user_write_to_code_and_execute_of_data_fault() {
        let mut s = space()?;
        match s.run(Program::Write, [CODE_BASE, 1, 0], Some(1000)) {
            UserExit::Fault(f) => kassert!(f.vector == 14 && f.access == Access::Write, "{f:?}"),
            other => return Err(alloc::format!("write to code: {other:?}")),
        }
        match s.run(Program::Jump, [DATA_BASE, 0, 0], Some(1000)) {
            UserExit::Fault(f) => kassert!(f.vector == 14 && f.access == Access::Execute, "{f:?}"),
            other => return Err(alloc::format!("execute data: {other:?}")),
        }
        match s.run(Program::Read, [0x10, 0, 0], Some(1000)) {
            UserExit::Fault(f) => kassert!(f.vector == 14 && !f.protection, "{f:?}"),
            other => return Err(alloc::format!("read unmapped: {other:?}")),
        }
        Ok(())
    }
}

ktest! {
    fn kernel_access_to_user_memory_gets_exactly_what_ring3_may() {
        use crate::mm::user_memory::{BadUserAddress, bytes, check_writable, copy_from, copy_to};
        use fjord_kernel::layout::PAGE_SIZE;
        let mut s = space()?;
        let end = DATA_BASE + PAGE_SIZE;
        let got = s.with_loaded(|| {
            let mut back = [0u8; 3];
            let written = copy_to(DATA_BASE + 8, &[1, 2, 3]).and_then(|()| copy_from(&mut back, DATA_BASE + 8));
            let mut tail = [0u8; 4];
            [
                written.map(|()| back == [1, 2, 3]),
                check_writable(DATA_BASE, PAGE_SIZE).map(|()| true),
                bytes(CODE_BASE, 16).map(|b| b.len() == 16),
                // Read-only to ring 3, so to the kernel on its behalf.
                copy_to(CODE_BASE, &[0x90]).map(|()| true),
                check_writable(CODE_BASE, 1).map(|()| true),
                // Unmapped, and straddling the end of the data page.
                copy_to(end + PAGE_SIZE, &[0]).map(|()| true),
                copy_from(&mut tail, end - 2).map(|()| true),
                copy_to(end - 2, &[7; 4]).map(|()| true),
                check_writable(end - 2, 4).map(|()| true),
                // The kernel image (supervisor-only, in the user half) and the kernel half.
                bytes(0x10_0000, 8).map(|_| true),
                bytes(crate::mm::phys_to_virt(0x10_0000), 8).map(|_| true),
                bytes(u64::MAX - 4, 8).map(|_| true),
            ]
        });
        kassert_eq!(&got[..3], &[Ok(true), Ok(true), Ok(true)]);
        kassert!(got[3..].iter().all(|r| *r == Err(BadUserAddress)), "{got:?}");
        // Nothing was written where the copies failed, and the page ring 3 may write kept the
        // bytes before the fault.
        kassert_eq!(s.data()[1] & 0xff_ffff, 0x03_0201);
        kassert_eq!(s.data()[511] >> 48, 0x0707);
        kassert_eq!(s.run(Program::Hello, [0; 3], Some(1000)), UserExit::Exited(42));
        Ok(())
    }
}

ktest! {
    fn privileged_instruction_in_ring3_is_a_gp_fault() {
        let mut s = space()?;
        match s.run(Program::Privileged, [0; 3], Some(1000)) {
            UserExit::Fault(f) => kassert_eq!(f.vector, 13),
            other => return Err(alloc::format!("{other:?}")),
        }
        Ok(())
    }
}

ktest! {
    fn bad_syscalls_get_typed_errors() {
        let mut s = space()?;
        let code = |e: Error| encode(Err(e));
        kassert_eq!(s.run(Program::Syscall, [999, 0, 0], Some(1000)), UserExit::Exited(code(Error::NoSys)));
        let kernel_ptr = crate::mm::phys_to_virt(0x10_0000);
        kassert_eq!(
            s.run(Program::Syscall, [Sysno::Log as u64, kernel_ptr, 8], Some(1000)),
            UserExit::Exited(code(Error::BadAddress))
        );
        kassert_eq!(
            s.run(Program::Syscall, [Sysno::Log as u64, DATA_BASE, 1 << 20], Some(1000)),
            UserExit::Exited(code(Error::InvalidArgs))
        );
        kassert_eq!(
            s.run(Program::Syscall, [Sysno::Log as u64, u64::MAX - 4, 8], Some(1000)),
            UserExit::Exited(code(Error::BadAddress))
        );
        Ok(())
    }
}

ktest! {
    fn runaway_user_code_is_preempted_at_its_deadline() {
        let mut s = space()?;
        kassert_eq!(s.run(Program::Spin, [0; 3], Some(30)), UserExit::TimedOut);
        kassert_eq!(s.run(Program::Hello, [0; 3], Some(1000)), UserExit::Exited(42));
        Ok(())
    }
}

ktest! {
    fn ring3_runs_on_every_cpu() {
        for c in 0..smp::cpu_count() {
            let exit = smp::run_on_and_wait(c, || {
                let mut s = UserSpace::new(1).expect("user space");
                s.run(Program::Cpu, [0; 3], Some(1000))
            }).map_err(|e| alloc::format!("{e:?}"))?;
            kassert_eq!(exit, UserExit::Exited(c as u64));
        }
        Ok(())
    }
}
