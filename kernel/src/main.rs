//! The Fjord kernel binary: boot, bring-up order, and what to do once up (`mode=`).
//!
//! Boot order: serial console → start info and command line → frame allocator → kernel page
//! tables → heap → guarded stacks → GDT/TSS, IDT, per-CPU data, SYSCALL → local APIC and timer
//! calibration → CPUs from the ACPI MADT → APs → banner → random-number seed → run, test or
//! bench.
//!
//! On the host this file builds to a stub that says how to run the kernel.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!("fjord-kernel runs under QEMU: use `cargo xtask run`");
}

#[cfg(target_os = "none")]
extern crate alloc;

#[cfg(target_os = "none")]
mod arch;
#[cfg(target_os = "none")]
mod bench;
#[cfg(target_os = "none")]
mod boot;
#[cfg(target_os = "none")]
mod console;
#[cfg(target_os = "none")]
mod cxl;
#[cfg(target_os = "none")]
mod drivers;
#[cfg(target_os = "none")]
mod fs;
#[cfg(target_os = "none")]
mod groundhog;
#[cfg(target_os = "none")]
mod jord;
#[cfg(target_os = "none")]
mod ktests;
#[cfg(target_os = "none")]
mod kv;
#[cfg(target_os = "none")]
mod mm;
#[cfg(target_os = "none")]
mod module;
#[cfg(target_os = "none")]
mod net;
#[cfg(target_os = "none")]
mod orchestrator;
#[cfg(target_os = "none")]
mod random;
#[cfg(target_os = "none")]
mod runtime;
#[cfg(target_os = "none")]
mod sockets;
#[cfg(target_os = "none")]
mod syscalls;
#[cfg(target_os = "none")]
mod ufork;

// What `arch/` calls in the layers above it, named here at the root (which composes the
// layers) so that `arch/` imports no folder above it, and bound at link time, so that the
// system-call path costs no indirect call.

/// The kernel's entry from the architecture's boot code, on the bootstrap processor and its boot
/// stack (`entry_tsc`: the clock when the architecture's code started): the boot sequence.
#[cfg(target_os = "none")]
pub fn kernel_entry(entry_tsc: u64) -> ! {
    boot::boot_main(entry_tsc)
}

/// The kernel's handler of system call `no` with `args`, for the code running on this CPU: the
/// policy in `syscalls/`.
#[cfg(target_os = "none")]
#[inline]
pub fn kernel_syscall(no: u64, args: [u64; 4]) -> arch::user::SyscallAction {
    syscalls::dispatch(no, args)
}

/// The kernel's handler of a ring-3 page fault at `addr` (error code `error`): Jord's VLB fill;
/// true when the access can be retried.
#[cfg(target_os = "none")]
#[inline]
pub fn kernel_user_page_fault(addr: u64, error: u64) -> bool {
    jord::vlb::on_user_page_fault(addr, error)
}

/// What the kernel does once it is up (`mode=`): serve HTTP, run the in-kernel tests, or run the
/// benchmarks. Decided here, at the root, so that no kernel module imports the tests or the
/// benchmarks; they get what they need as arguments (`first_line_tsc`: the TSC when the first
/// line was printed).
#[cfg(target_os = "none")]
fn run(opts: &fjord_kernel::cmdline::BootOptions<'_>, first_line_tsc: u64) -> ! {
    use fjord_kernel::cmdline::Mode;
    match opts.mode {
        Mode::Run => {
            // Programs' sockets are served by the network loop this CPU runs (below); on before
            // `init=` starts, so that a server started at boot can listen at once.
            sockets::enable(net::HTTP_PORT, arch::percpu::cpu_index());
            if let Some(name) = opts.init {
                match ufork::spawn_detached(name, ufork::SpawnOptions::default()) {
                    Ok(pid) => kprintln!("fjord: started {name} as μprocess {pid}"),
                    Err(e) => kprintln!("fjord: init={name}: {e:?}"),
                }
            }
            kprintln!("fjord: ready");
            // Serves HTTP forever; returns only when there is no network card.
            net::run(opts);
            // Without one, this CPU still orchestrates (μprocesses started with `init=`).
            orchestrator::serve(0);
            arch::smp::idle_loop(0)
        }
        Mode::Test => ktests::run_all(opts.test_filter, opts.run_slow_tests),
        Mode::Bench => bench::run_all(opts.bench_filter, opts.bench_ns, first_line_tsc),
    }
}
