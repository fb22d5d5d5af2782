//! Function modules from the initrd (boot with `modules=initrd`): invocation, isolation of
//! hostile functions, time limits, teardown without leaks, and run-time deployment.

use crate::arch::user::Access;
use crate::jord::{self, state};
use crate::ktest;
use crate::module::loader::LoadError;
use crate::runtime::{self, InvokeFailure, invoke};
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use fjord_faas::module::{ModuleLimits, validate};
use fjord_kernel::{kassert, kassert_eq};
use fjord_libos::function::FnError;
use fjord_pd::{MapFlags, PdId, PdIsolation, Perm};

type R<T> = Result<T, String>;

fn call(name: &str, req: &[u8]) -> Result<Vec<u8>, InvokeFailure> {
    invoke(name, req)
}

fn hostile(req: &str) -> Result<Vec<u8>, InvokeFailure> {
    invoke("hostile", req.as_bytes())
}

fn expect_fault(r: Result<Vec<u8>, InvokeFailure>, addr: u64, access: Access) -> R<()> {
    match r {
        Err(InvokeFailure::Faulted { pd, fault }) => {
            kassert!(pd != PdId::KERNEL);
            kassert_eq!(fault.vector, 14);
            kassert_eq!(fault.addr, addr);
            kassert_eq!(fault.access, access);
            Ok(())
        }
        other => Err(format!(
            "expected a {access:?} fault at {addr:#x}, got {other:?}"
        )),
    }
}

fn needs_modules() -> R<()> {
    let names = runtime::list();
    for f in ["echo", "hello", "hostile"] {
        kassert!(
            names.iter().any(|n| n == f),
            "function {f} is not deployed (boot with modules=initrd and the initrd from xtask)"
        );
    }
    Ok(())
}

ktest! {
    fn hello_and_echo_return_the_right_bytes() {
        needs_modules()?;
        kassert_eq!(call("hello", b"world").as_deref(), Ok(b"hello, world!".as_slice()));
        kassert_eq!(call("hello", b"").as_deref(), Ok(b"hello, !".as_slice()));
        kassert_eq!(call("echo", b"ping").as_deref(), Ok(b"ping".as_slice()));
        kassert_eq!(call("echo", b"").as_deref(), Ok(b"".as_slice()));
        // A request larger than a page: the ArgBuf grows to fit request and response.
        let big: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let got = call("echo", &big).map_err(|e| format!("echo: {e}"))?;
        kassert!(got == big, "echo returned {} different bytes", got.len());
        // A response larger than the ArgBuf's room is the function's typed error, not a fault.
        kassert_eq!(
            call("hostile", b"respond-too-much"),
            Err(InvokeFailure::Function(FnError::ResponseTooLarge))
        );
        kassert_eq!(call("nope", b""), Err(InvokeFailure::NoSuchFunction));
        Ok(())
    }
}

ktest! {
    fn hostile_function_faults_and_others_keep_working() {
        needs_modules()?;
        let faults = jord::with(|j| j.stats.protection_faults);
        // Kernel memory through the direct map.
        let kernel = crate::mm::phys_to_virt(0x10_0000);
        expect_fault(hostile(&format!("read {kernel:x}")), kernel, Access::Read)?;
        // Another PD's private VMA.
        let q = jord::with(|j| j.cget(PdId::KERNEL)).map_err(|e| format!("cget: {e:?}"))?;
        let v = jord::with(|j| j.mmap(q, 4096, Perm::RW, MapFlags::default()))
            .map_err(|e| format!("mmap: {e:?}"))?;
        expect_fault(hostile(&format!("read {v:x}")), v, Access::Read)?;
        expect_fault(hostile(&format!("write {v:x}")), v, Access::Write)?;
        if let Ok(p) = jord::with(|j| j.cput(PdId::KERNEL, q)) {
            p.finish();
        }
        // Its own code: the shared image is Global read-execute, never writable.
        let code = runtime::lookup("hostile").ok_or("hostile")?.image.base;
        kassert!(hostile(&format!("read {code:x}")).is_ok());
        expect_fault(hostile(&format!("write {code:x}")), code, Access::Write)?;
        // The VMA table.
        let table = jord::with(|j| j.vma_table_address());
        expect_fault(hostile(&format!("read {table:x}")), table, Access::Read)?;
        kassert!(jord::with(|j| j.stats.protection_faults) >= faults + 4);
        // A panic is reported as the function's error; a malformed request too.
        kassert_eq!(hostile("panic"), Err(InvokeFailure::Function(FnError::Panicked)));
        kassert_eq!(hostile("read xyz"), Err(InvokeFailure::Function(FnError::BadRequest)));
        // Everything else still works.
        kassert_eq!(call("hello", b"again").as_deref(), Ok(b"hello, again!".as_slice()));
        Ok(())
    }
}

ktest! {
    fn fpu_and_vector_registers_are_no_function_s_to_use() {
        needs_modules()?;
        if crate::arch::user::fpu_reset_enabled() {
            // The hypervisor lets ring 3 use them: what one run leaves, the next cannot see.
            kassert_eq!(hostile("fpu-put").as_deref(), Ok([].as_slice()));
            let seen = hostile("fpu-get").map_err(|e| format!("fpu-get: {e:?}"))?;
            let mut expected = [0u8; 16];
            expected[8..].copy_from_slice(&0xfff8_0000_0000_0000u64.to_le_bytes());
            kassert_eq!(seen.as_slice(), expected.as_slice());
            kassert_eq!(call("hello", b"x").as_deref(), Ok(b"hello, x!".as_slice()));
            return Ok(());
        }
        // No PD gets x87, MMX or SSE registers, so none can read what another left there:
        // the instructions trap (#NM with CR0.EM, #UD for SSE), the fault is reported, and
        // other functions go on.
        for (req, vector) in [("x87", 7), ("sse", 6), ("fpu-put", 6), ("fpu-get", 6)] {
            match hostile(req) {
                Err(InvokeFailure::Faulted { pd, fault }) => {
                    kassert!(pd != PdId::KERNEL);
                    kassert!(fault.vector == vector, "{req}: vector {}", fault.vector);
                }
                other => return Err(format!("{req}: expected a fault, got {other:?}")),
            }
            kassert_eq!(call("hello", b"x").as_deref(), Ok(b"hello, x!".as_slice()));
        }
        Ok(())
    }
}

ktest! {
    fn runaway_function_times_out() {
        needs_modules()?;
        // Stopped at the manifest's time limit, on the path HTTP requests take.
        let r = hostile("loop");
        kassert!(matches!(r, Err(InvokeFailure::TimedOut { .. })), "got {r:?}");
        kassert_eq!(call("hello", b"x").as_deref(), Ok(b"hello, x!".as_slice()));
        Ok(())
    }
}

ktest! {
    fn memory_hog_hits_its_limit_and_gives_everything_back() {
        needs_modules()?;
        kassert!(hostile("alloc").is_err());
        let before = crate::mm::frames::free_frames();
        let r = hostile("alloc");
        kassert!(
            matches!(r, Err(InvokeFailure::Function(FnError::OutOfMemory))),
            "got {r:?}"
        );
        kassert_eq!(crate::mm::frames::free_frames(), before);
        kassert_eq!(call("hello", b"x").as_deref(), Ok(b"hello, x!".as_slice()));
        Ok(())
    }
}

ktest! {
    fn fifty_invocations_leak_no_frames() {
        needs_modules()?;
        let kernel = crate::mm::phys_to_virt(0x10_0000);
        let bad = format!("read {kernel:x}");
        let round = || -> R<()> {
            kassert_eq!(call("hello", b"leak").as_deref(), Ok(b"hello, leak!".as_slice()));
            kassert_eq!(call("echo", &[7u8; 5000]).map(|v| v.len()), Ok(5000));
            kassert!(hostile(&bad).is_err());
            Ok(())
        };
        // Warm up: destroyed PDs leave their root tables in a reuse cache.
        for _ in 0..3 {
            round()?;
        }
        let before = crate::mm::frames::free_frames();
        let pds = jord::with(|j| j.stats.pds_created - j.stats.pds_destroyed);
        for _ in 0..50 {
            round()?;
        }
        kassert_eq!(crate::mm::frames::free_frames(), before);
        kassert_eq!(jord::with(|j| j.stats.pds_created - j.stats.pds_destroyed), pds);
        Ok(())
    }
}

ktest! {
    fn reused_instances_keep_nothing_of_the_last_request() {
        needs_modules()?;
        let was = crate::module::warm::enabled();
        crate::module::warm::set_enabled(true);
        crate::module::warm::drain();
        let restored = || jord::with(|j| j.stats.instances_restored);
        let before = restored();
        kassert_eq!(hostile("remember 5eedf00d").as_deref(), Ok(&[][..]));
        // The instance went back to its pool.
        kassert_eq!(restored(), before + 1);
        let idle = runtime::lookup("hostile").ok_or("hostile")?.warm.idle();
        kassert_eq!(idle, 1);
        // The next request runs in the same PD, with the same stack: what the last one wrote
        // there is gone.
        kassert_eq!(hostile("recall").as_deref(), Ok(&[0u8; 8][..]));
        kassert_eq!(restored(), before + 2);
        // A fault destroys the instance instead.
        let kernel = crate::mm::phys_to_virt(0x10_0000);
        kassert!(hostile(&format!("read {kernel:x}")).is_err());
        kassert_eq!(runtime::lookup("hostile").ok_or("hostile")?.warm.idle(), 0);
        kassert_eq!(restored(), before + 2);
        // Off, every instance is destroyed after its request.
        crate::module::warm::set_enabled(false);
        let pds = jord::with(|j| j.stats.pds_created - j.stats.pds_destroyed);
        kassert_eq!(call("hello", b"x").as_deref(), Ok(b"hello, x!".as_slice()));
        kassert_eq!(jord::with(|j| j.stats.pds_created - j.stats.pds_destroyed), pds);
        kassert_eq!(crate::module::warm::kept(), 0);
        crate::module::warm::set_enabled(was);
        Ok(())
    }
}

ktest! {
    fn deploy_validates_and_replaces_at_run_time() {
        needs_modules()?;
        let elf = runtime::module_file("echo").ok_or("echo has no file")?;
        // Malformed bytes get the validator's own error.
        for bad in [&b"not an elf"[..], &elf[..100], &elf[..elf.len() / 2]] {
            let want = validate(bad, &ModuleLimits::default()).err().ok_or("validator accepted")?;
            kassert_eq!(runtime::deploy("echo", bad).err(), Some(LoadError::Invalid(want)));
        }
        kassert_eq!(runtime::deploy("other", &elf).err(), Some(LoadError::NameMismatch));
        // Re-deploying maps a new image; the old one goes when its last user is gone.
        let old = runtime::lookup("echo").ok_or("echo")?.image.base;
        let new = runtime::deploy("echo", &elf).map_err(|e| format!("{e}"))?;
        kassert!(new.image.base != old);
        kassert_eq!(call("echo", b"v2").as_deref(), Ok(b"v2".as_slice()));
        kassert!(runtime::remove("echo"));
        kassert!(!runtime::list().iter().any(|n| n == "echo"));
        kassert_eq!(call("echo", b""), Err(InvokeFailure::NoSuchFunction));
        runtime::deploy("echo", &elf).map_err(|e| format!("{e}"))?;
        kassert_eq!(call("echo", b"back").as_deref(), Ok(b"back".as_slice()));
        Ok(())
    }
}

ktest! {
    fn functions_survive_a_switch_to_no_isolation_and_back() {
        needs_modules()?;
        state::reset(PdIsolation::None).map_err(|e| format!("{e:?}"))?;
        let ni = call("hello", b"ni");
        state::reset(PdIsolation::Full).map_err(|e| format!("{e:?}"))?;
        kassert_eq!(ni.as_deref(), Ok(b"hello, ni!".as_slice()));
        kassert_eq!(call("hello", b"full").as_deref(), Ok(b"hello, full!".as_slice()));
        Ok(())
    }
}
