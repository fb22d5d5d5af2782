//! The in-kernel test registry and runner (`mode=test`).
//!
//! `ktest!` places a [`KTest`] in the `.ktests` linker section; the runner walks the section,
//! prints `ktest <name> ... ok` or `ktest <name> ... FAILED: <reason>` for each test, then
//! `ktest: N passed, M failed`, and exits QEMU with the success or failure code.

mod cxl;
mod disk;
mod groundhog;
mod jord;
mod memory;
mod modules;
mod nested;
mod orchestrator;
mod smp;
mod tenancy;
mod traps;
mod ufork;
mod user;
pub mod user_programs;
pub mod userspace;

use crate::arch::exit::{ExitCode, exit_qemu};
use crate::kprintln;
use fjord_kernel::ktest::KTest;

/// An address in the Jord region that no VMA covers, whatever modules are loaded: the last
/// slot of the largest size class, beyond what the VMA table gives out. (Slot 0 of a class is
/// where the first module image of that size goes, readable by every PD.)
pub fn unmapped_jord_address() -> u64 {
    use fjord_pd::{SizeClass, vaddr};
    let sc = SizeClass::MAX;
    vaddr::encode(sc, vaddr::max_index(sc) - 1, 0).unwrap_or(vaddr::REGION_END - 4096)
}

/// Defines an in-kernel test: `ktest! { fn name() { ...; Ok(()) } }`, or `ktest! { slow fn
/// name() { ... } }` for one that `slow_tests=skip` leaves out.
#[macro_export]
macro_rules! ktest {
    ($(#[$m:meta])* fn $name:ident() $body:block) => {
        $crate::ktest! { @entry false, $(#[$m])* fn $name() $body }
    };
    ($(#[$m:meta])* slow fn $name:ident() $body:block) => {
        $crate::ktest! { @entry true, $(#[$m])* fn $name() $body }
    };
    (@entry $slow:expr, $(#[$m:meta])* fn $name:ident() $body:block) => {
        $(#[$m])*
        fn $name() -> fjord_kernel::ktest::TestResult $body

        const _: () = {
            #[used]
            #[unsafe(link_section = ".ktests")]
            static ENTRY: fjord_kernel::ktest::KTest = fjord_kernel::ktest::KTest {
                name: concat!(module_path!(), "::", stringify!($name)),
                run: $name,
                slow: $slow,
            };
        };
    };
}

unsafe extern "C" {
    static __ktests_start: u8;
    static __ktests_end: u8;
}

/// Every registered test.
pub fn registry() -> &'static [KTest] {
    let start = (&raw const __ktests_start).cast::<KTest>();
    let end = (&raw const __ktests_end).cast::<KTest>();
    let n = (end as usize - start as usize) / core::mem::size_of::<KTest>();
    // SAFETY: the linker script places only `KTest` statics (via `ktest!`) between the two
    // symbols, 8-byte aligned, in read-only memory that lives forever.
    unsafe { core::slice::from_raw_parts(start, n) }
}

/// Runs every test whose name contains `filter` (the slow ones only if `run_slow`), prints the
/// summary and exits QEMU. A slow test left out prints `ktest <name> ... not run: slow`, and a
/// test of a device the board lacks returns an error starting `not run: `, printed the same
/// way; neither counts as passed or failed.
pub fn run_all(filter: Option<&str>, run_slow: bool) -> ! {
    let tests = registry();
    kprintln!("ktest: running {} tests", tests.len());
    let (mut passed, mut failed) = (0, 0);
    for t in tests
        .iter()
        .filter(|t| filter.is_none_or(|f| t.name.contains(f)))
    {
        let name = t.name.trim_start_matches("fjord_kernel::ktests::");
        if t.slow && !run_slow {
            kprintln!("ktest {name} ... not run: slow where ring 0 is emulated (slow_tests=skip)");
            continue;
        }
        match (t.run)() {
            Ok(()) => {
                passed += 1;
                kprintln!("ktest {name} ... ok");
            }
            // A test of hardware this board does not have says so.
            Err(msg) if msg.starts_with("not run: ") => kprintln!("ktest {name} ... {msg}"),
            Err(msg) => {
                failed += 1;
                kprintln!("ktest {name} ... FAILED: {msg}");
            }
        }
    }
    kprintln!("ktest: {passed} passed, {failed} failed");
    exit_qemu(if failed == 0 && passed > 0 {
        ExitCode::Success
    } else {
        ExitCode::Failure
    })
}
