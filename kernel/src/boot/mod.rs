//! Bring-up of the bootstrap processor and the top-level modes.

use crate::arch::exit::{ExitCode, exit_qemu};
use crate::arch::{cpu, percpu, platform, serial, smp};
use crate::kprintln;
use crate::mm::{self, frames, kernel_tables, stacks};
pub mod probe;

use crate::arch::pvh::{self, BootInfo};
use core::sync::atomic::{AtomicU64, Ordering};
use fjord_kernel::cmdline::{self, BootOptions, Crash, ModuleSource};
use fjord_kernel::layout::{KERNEL_BASE, LOW_MEMORY_END, PAGE_SIZE};

/// TSC value when the first kernel line was printed (guest instructions under icount).
static FIRST_LINE_TSC: AtomicU64 = AtomicU64::new(0);

static SYSCALL_PATH: spin::Once<probe::SyscallPath> = spin::Once::new();

/// Where a ring-3 SYSCALL arrives on this machine, as probed at boot.
pub fn syscall_path() -> probe::SyscallPath {
    *SYSCALL_PATH.get().unwrap_or(&probe::SyscallPath::Ring0)
}

/// Whether the hypervisor emulates the kernel's ring 0 instruction by instruction (KVM's PVM
/// backend), which the boot's SYSCALL probe tells: such a hypervisor leaves SYSCALL in ring 3.
pub fn ring0_emulated() -> bool {
    syscall_path() == probe::SyscallPath::StrandedInRing3
}

/// The boot information copied from the PVH start-info block.
pub fn boot_info() -> &'static BootInfo {
    pvh::boot_info().expect("boot stops when the start info is unusable")
}

/// The parsed command line (valid after boot).
pub fn options() -> BootOptions<'static> {
    cmdline::parse(boot_info().cmdline()).unwrap_or_default()
}

fn fail(msg: core::fmt::Arguments<'_>) -> ! {
    kprintln!("fjord: error: {msg}");
    exit_qemu(ExitCode::Failure)
}

/// Entry of the bootstrap processor from the long-mode stub, on the boot stack.
pub fn boot_main(entry_tsc: u64) -> ! {
    serial::init();
    FIRST_LINE_TSC.store(entry_tsc, Ordering::Relaxed);
    kprintln!("Fjord {} booting", env!("CARGO_PKG_VERSION"));

    let info = match pvh::boot_info() {
        Ok(i) => i,
        Err(e) => fail(format_args!("bad PVH start info: {e}")),
    };
    let opts = match cmdline::parse(info.cmdline()) {
        Ok(o) => o,
        Err(e) => fail(format_args!("{e}")),
    };
    crate::console::logger::init(opts.log_level);

    // Physical memory: everything usable except low memory, the kernel image and boot modules.
    let mut usable = info.usable.clone();
    usable.reserve(0, LOW_MEMORY_END);
    let img = kernel_tables::image();
    usable.reserve(KERNEL_BASE, img.data.1 - KERNEL_BASE);
    for &(pa, len) in &info.modules[..info.module_count] {
        usable.reserve(pa, len);
    }
    let usable_bytes = frames::init(&usable);
    if let Err(e) = kernel_tables::build_and_switch(info.ram_end) {
        fail(format_args!("building the kernel page tables: {e:?}"));
    }
    let heap_bytes = (usable_bytes / 4).clamp(4 << 20, 64 << 20);
    let heap_pages = (heap_bytes / PAGE_SIZE) as usize;
    match frames::alloc_contiguous(heap_pages, 1) {
        Ok(pa) => mm::heap::init(mm::phys_to_virt(pa), heap_bytes),
        Err(e) => fail(format_args!(
            "no memory for a {} MiB heap: {e:?}",
            heap_bytes >> 20
        )),
    }
    // The key-value namespaces may reserve half the heap between them.
    crate::kv::init(heap_bytes as usize / 2);
    let st = match stacks::allocate(0) {
        Ok(s) => s,
        Err(e) => fail(format_args!("mapping the boot CPU's stacks: {e:?}")),
    };
    STACKS0.call_once(|| st);
    cpu::continue_on_stack(&st, boot_on_stack)
}

static STACKS0: spin::Once<stacks::CpuStacks> = spin::Once::new();

extern "C" fn boot_on_stack() -> ! {
    let info = boot_info();
    let opts = options();
    let features = cpu::features();
    let stacks0 = STACKS0.get().expect("set before the stack switch");
    let mut map_mmio = |pa, len| kernel_tables::map_mmio(pa, len).ok();
    if let Err(e) = platform::init_boot_cpu(stacks0, &mut map_mmio) {
        fail(format_args!("{e}"));
    }

    let cpu_list = if info.rsdp != 0 {
        fjord_kernel::madt::find_cpus(&mm::AcpiReader, info.rsdp)
    } else {
        Err(fjord_kernel::madt::AcpiError::BadRsdp)
    };
    let ids: alloc::vec::Vec<u32> = match &cpu_list {
        Ok(c) => c.apic_ids().to_vec(),
        Err(e) => {
            log::warn!("no usable ACPI MADT ({e:?}); running on the boot CPU only");
            alloc::vec![platform::boot_cpu_id()]
        }
    };
    platform::start_other_cpus(&ids, mm::phys_to_virt(0), &mut |index| {
        stacks::allocate(index).ok()
    });

    match probe::syscall_path() {
        Ok(path) => {
            SYSCALL_PATH.call_once(|| path);
        }
        Err(e) => fail(format_args!("probing SYSCALL: {e:?}")),
    }
    match probe::fpu_traps_in_ring3() {
        Ok(true) => {}
        Ok(false) => {
            if let Err(e) = probe::install_fpu_reset() {
                fail(format_args!("mapping the FPU-reset page: {e:?}"));
            }
        }
        Err(e) => fail(format_args!("probing the FPU: {e:?}")),
    }
    print_banner(info, &features);
    match crate::random::init() {
        crate::random::SeedSource::Hardware(how) => {
            kprintln!("fjord: random numbers: ChaCha20 seeded from {how:?}")
        }
        crate::random::SeedSource::Clocks => kprintln!(
            "fjord: random numbers: ChaCha20 seeded from the clocks alone (this CPU has no \
             RDSEED or RDRAND): they are guessable by whoever knows the boot's timing"
        ),
    }
    if let Some((bytes, bus)) = crate::drivers::virtio_blk::init() {
        match crate::fs::mount() {
            Ok((blocks, crate::fs::Mounted::Existing(files))) => kprintln!(
                "fjord: disk: {} MiB on {bus}, {files} file(s) in {blocks} blocks",
                bytes >> 20
            ),
            Ok((blocks, crate::fs::Mounted::Formatted)) => kprintln!(
                "fjord: disk: {} MiB on {bus}, empty: formatted ({blocks} blocks)",
                bytes >> 20
            ),
            Err(e) => kprintln!(
                "fjord: disk: {} MiB on {bus}, not mounted: {e:?}",
                bytes >> 20
            ),
        }
    }
    match crate::cxl::init(opts.node) {
        crate::cxl::Found::NoDevice => {}
        crate::cxl::Found::Attached {
            bytes,
            formatted,
            node,
            checkpoints,
        } => kprintln!(
            "fjord: cxl: {} MiB shared region at {:#x}, {}; joined as node {} (entry {node}), {checkpoints} checkpoint(s) ready",
            bytes >> 20,
            fjord_kernel::layout::CXL_BASE,
            if formatted {
                "formatted here"
            } else {
                "attached"
            },
            opts.node
        ),
        crate::cxl::Found::Device(e) => {
            kprintln!("fjord: cxl: the ivshmem device is unusable: {e:?}")
        }
        crate::cxl::Found::Refused(e) => {
            kprintln!("fjord: cxl: the shared region was refused and left untouched: {e:?}")
        }
        crate::cxl::Found::Join(e) => kprintln!("fjord: cxl: could not join the region: {e:?}"),
    }
    check_initrd(info, &opts);
    crate::runtime::boot(initrd(info), &opts);
    crate::ufork::init();
    crate::cxl::porter::enable(opts.cxl_tiering);
    crate::ufork::tags::set_choice(opts.tags);
    crate::orchestrator::init_groups(opts.jbsq_k, opts.orch_group);
    crate::runtime::task::set_hop_mode(opts.hops);
    crate::module::warm::set_enabled(opts.warm);
    kprintln!(
        "fjord: {} orchestrator group(s), {} executor(s), JBSQ({}), nested calls {}, warm instances {}, μFork tags {}",
        crate::orchestrator::groups(),
        crate::orchestrator::executors(),
        opts.jbsq_k,
        match opts.hops {
            fjord_kernel::cmdline::Hops::Move => "move ArgBufs",
            fjord_kernel::cmdline::Hops::Copy => "copy ArgBufs (baseline)",
        },
        if opts.warm { "on" } else { "off" },
        opts.tags.name()
    );
    if let Some(crash) = opts.crash {
        crash_on_purpose(crash);
    }
    crate::run(&opts, FIRST_LINE_TSC.load(Ordering::Relaxed))
}

fn print_banner(info: &BootInfo, f: &cpu::Features) {
    let p = platform::describe();
    let n = smp::cpu_count();
    let mut ids = alloc::string::String::new();
    for i in 0..n {
        if let Some(id) = smp::hardware_id_of(i) {
            if !ids.is_empty() {
                ids.push(',');
            }
            ids.push_str(&alloc::format!("{id}"));
        }
    }
    kprintln!(
        "fjord: {n} CPU{} ({}s {ids}), {} MiB RAM ({} MiB free, heap {} MiB)",
        if n == 1 { "" } else { "s" },
        smp::HARDWARE_ID,
        info.usable.total() >> 20,
        (frames::free_frames() as u64 * PAGE_SIZE) >> 20,
        mm::heap::total() >> 20,
    );
    kprintln!(
        "fjord: {} {}, TSC {} MHz, {} {} ticks/ms, PCID {}, INVPCID {}, PKU {}, 1G pages {}, invariant TSC {}, NX {}, SMEP {}, SMAP {}, UMIP {}, PVH start info v{}",
        core::str::from_utf8(&f.vendor).unwrap_or("?"),
        p.interrupt_controller,
        p.clock_mhz,
        p.timer,
        p.timer_per_ms,
        yes_no(f.pcid),
        yes_no(f.invpcid),
        yes_no(f.pku),
        yes_no(f.gbpages),
        yes_no(f.invariant_tsc),
        yes_no(f.nx),
        yes_no(f.smep),
        yes_no(f.smap),
        yes_no(f.umip),
        info.version,
    );
    kprintln!(
        "fjord: uses NX, {}{}{}; not used: PCID{} (every CR3 write flushes the TLB), PKU, 1G pages, SMAP{}",
        p.interrupt_controller,
        if f.smep { ", SMEP" } else { "" },
        if f.umip { ", UMIP" } else { "" },
        if f.invpcid { " and INVPCID" } else { "" },
        if f.smap {
            " (the kernel touches user memory directly)"
        } else {
            ""
        },
    );
    kprintln!(
        "fjord: SYSCALL {}",
        match syscall_path() {
            probe::SyscallPath::Ring0 => "enters ring 0 (SYSRET returns)",
            probe::SyscallPath::StrandedInRing3 =>
                "is left in ring 3 by the hypervisor (KVM PVM): served from the entry's fetch fault",
        }
    );
    kprintln!(
        "fjord: x87/MMX/SSE in ring 3 {}",
        if crate::arch::user::fpu_reset_enabled() {
            "run (the hypervisor ignores CR0.EM): registers reset before every ring-3 run"
        } else {
            "trap (CR0.EM): no PD has FPU or vector registers"
        }
    );
    kprintln!("fjord: command line '{}'", info.cmdline());
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

/// The initrd's bytes, if the boot loader gave one.
pub fn initrd(info: &BootInfo) -> Option<&'static [u8]> {
    let (pa, len) = info.initrd()?;
    Some(mm::boot_module(pa, len as usize))
}

fn check_initrd(info: &BootInfo, opts: &BootOptions<'_>) {
    match initrd(info) {
        None if opts.modules == ModuleSource::Initrd => fail(format_args!(
            "no initrd was given, but modules=initrd needs one (pass -initrd <archive>; \
             `cargo xtask run` does this)"
        )),
        None => kprintln!("fjord: no initrd"),
        Some(bytes) => {
            let mut files = 0;
            for entry in fjord_kernel::cpio::Reader::new(bytes) {
                match entry {
                    Ok(e) => {
                        files += 1;
                        log::info!("initrd: {} ({} bytes)", e.name, e.data.len());
                    }
                    Err(e) => {
                        if opts.modules == ModuleSource::Initrd {
                            fail(format_args!(
                                "the initrd is not a valid cpio archive: {e:?}"
                            ));
                        }
                        log::warn!("the initrd is not a valid cpio archive: {e:?}");
                        break;
                    }
                }
            }
            kprintln!(
                "fjord: initrd of {} KiB with {files} files",
                bytes.len() / 1024
            );
        }
    }
}

fn crash_on_purpose(crash: Crash) {
    match crash {
        Crash::Panic => panic!("deliberate panic requested on the command line (crash=panic)"),
        Crash::PageFault => {
            let v = crate::arch::trap::read_unmapped_on_purpose();
            log::error!("read {v} from an unmapped address");
        }
    }
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    cpu::disable_interrupts();
    let cpu = percpu::cpu_index();
    match info.location() {
        Some(l) => serial::emergency_write_fmt(format_args!(
            "\n!!! kernel panicked at {}:{}:{} on cpu {cpu}: {}\n",
            l.file(),
            l.line(),
            l.column(),
            info.message()
        )),
        None => serial::emergency_write_fmt(format_args!(
            "\n!!! kernel panicked on cpu {cpu}: {}\n",
            info.message()
        )),
    }
    exit_qemu(ExitCode::Failure)
}
