//! Multiprocessing: starting the application processors (APs), running work on a chosen CPU,
//! and TLB-shootdown IPIs.
//!
//! APs start with INIT-SIPI-SIPI at the 16-bit trampoline in `boot`, go through the same long-mode
//! entry as the BSP, switch to the kernel's page tables and a stack the BSP allocated for them,
//! and land in [`ap_main`]. APs are started one at a time.

use super::{apic, cpu, percpu, trap};
use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::sync::Arc;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use fjord_kernel::layout::AP_TRAMPOLINE_PHYS;
use spin::Mutex;

/// Maximum number of CPUs Fjord brings up.
pub const MAX_CPUS: usize = 8;

/// CR3 the next AP loads (read by the boot assembly).
pub static AP_CR3: AtomicU64 = AtomicU64::new(0);
/// Stack top the next AP uses (read by the boot assembly).
pub static AP_STACK_TOP: AtomicU64 = AtomicU64::new(0);
static AP_INDEX: AtomicUsize = AtomicUsize::new(0);
static AP_READY: AtomicBool = AtomicBool::new(false);

static APIC_IDS: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(u64::MAX) }; MAX_CPUS];
static ONLINE: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
static CPU_COUNT: AtomicUsize = AtomicUsize::new(1);

type Work = Box<dyn FnOnce() + Send>;
static WORK: [Mutex<VecDeque<Work>>; MAX_CPUS] = [const { Mutex::new(VecDeque::new()) }; MAX_CPUS];
/// Per CPU: how many closures its [`WORK`] queue holds (changed under the queue's lock), so the
/// idle loop looks at the queue without taking the lock when it is empty.
static WORK_QUEUED: [AtomicUsize; MAX_CPUS] = [const { AtomicUsize::new(0) }; MAX_CPUS];

/// Per CPU: whether it is halted in [`halt_idle`], waiting for an interrupt.
static HALTED: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];

static TLB_GENERATION: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
/// TLB-shootdown IPIs sent since boot.
pub static SHOOTDOWN_IPIS: AtomicU64 = AtomicU64::new(0);

unsafe extern "C" {
    static ap_trampoline_start: u8;
    static ap_trampoline_end: u8;
}

/// Errors of cross-CPU operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SmpError {
    /// No such CPU, or it is not online.
    NoSuchCpu(usize),
}

/// Number of CPUs online (including the BSP).
pub fn cpu_count() -> usize {
    CPU_COUNT.load(Ordering::Acquire)
}

/// What this architecture calls a CPU's [`hardware_id_of`].
pub const HARDWARE_ID: &str = "APIC id";

/// True when CPU `index` is online.
pub fn is_online(index: usize) -> bool {
    index < MAX_CPUS && ONLINE[index].load(Ordering::Acquire)
}

/// The interrupt controller's id of CPU `index` (on x86_64 its APIC id; the name the banner
/// gives it is [`HARDWARE_ID`]).
pub fn hardware_id_of(index: usize) -> Option<u32> {
    if index < MAX_CPUS {
        let v = APIC_IDS[index].load(Ordering::Acquire);
        (v != u64::MAX).then_some(v as u32)
    } else {
        None
    }
}

/// Records the BSP as CPU 0.
pub fn register_bsp(apic_id: u32) {
    APIC_IDS[0].store(u64::from(apic_id), Ordering::Release);
    ONLINE[0].store(true, Ordering::Release);
}

/// The tops of one CPU's stacks (mapped by the memory manager, each below a guard page).
#[derive(Clone, Copy, Debug)]
pub struct CpuStacks {
    /// Main kernel stack.
    pub kernel_top: u64,
    /// Trap stack (TSS RSP0 and SYSCALL entry).
    pub trap_top: u64,
    /// IST stacks 1..=3.
    pub ist_tops: [u64; 3],
}

/// Per-CPU setup shared by the BSP and the APs (GDT/TSS, IDT, per-CPU block, APIC, SYSCALL).
pub fn init_this_cpu(index: usize, stacks: &CpuStacks) {
    super::gdt::init_cpu(&super::gdt::CpuStacks {
        trap_top: stacks.trap_top,
        ist_tops: stacks.ist_tops,
    });
    trap::init_cpu();
    apic::init_cpu();
    let apic_id = apic::id();
    percpu::install(Box::new(percpu::PerCpu::new(
        index as u64,
        u64::from(apic_id),
        stacks.trap_top,
    )));
    super::user::init_cpu();
    let bits = super::cpu::protections(&super::cpu::features());
    // SAFETY: `protections` sets only bits CPUID reports; ring 0 never executes a user page
    // and never uses SGDT, SIDT, SLDT, SMSW or STR on behalf of ring 3.
    unsafe { super::cpu::set_cr4_bits(bits) };
}

/// Starts every AP in `apic_ids` (the BSP's own id is skipped); returns how many came online.
/// `direct_map` is the virtual address of physical address 0; `stacks_for(index)` maps the
/// stacks of CPU `index`.
pub fn start_aps(
    apic_ids: &[u32],
    bsp_apic_id: u32,
    direct_map: u64,
    stacks_for: &mut dyn FnMut(usize) -> Option<CpuStacks>,
) -> usize {
    let len = (&raw const ap_trampoline_end as usize) - (&raw const ap_trampoline_start as usize);
    let dst = (direct_map + AP_TRAMPOLINE_PHYS) as *mut u8;
    // SAFETY: the trampoline blob is `len` bytes of rodata; physical page 0x8000 is reserved for
    // it (never handed out by the frame allocator) and reachable through the direct map.
    unsafe { core::ptr::copy_nonoverlapping(&raw const ap_trampoline_start, dst, len) };
    AP_CR3.store(cpu::read_cr3(), Ordering::Release);
    let mut started = 0;
    for &id in apic_ids.iter().filter(|&&id| id != bsp_apic_id) {
        let index = started + 1;
        if index >= MAX_CPUS {
            log::warn!("smp: only {MAX_CPUS} CPUs are supported; APIC id {id} stays off");
            break;
        }
        let Some(stacks) = stacks_for(index) else {
            log::error!("smp: no memory for the stacks of CPU {index}; APIC id {id} stays off");
            break;
        };
        AP_STACK_TOP.store(stacks.kernel_top, Ordering::Release);
        AP_INDEX.store(index, Ordering::Release);
        AP_READY.store(false, Ordering::Release);
        STACKS_FOR_AP.lock().replace(stacks);
        apic::send_init(id);
        apic::delay_us(10_000);
        let page = (AP_TRAMPOLINE_PHYS >> 12) as u8;
        for _ in 0..2 {
            apic::send_sipi(id, page);
            if wait_ready(200) {
                break;
            }
        }
        if wait_ready(1_000_000) {
            APIC_IDS[index].store(u64::from(id), Ordering::Release);
            started += 1;
            CPU_COUNT.store(started + 1, Ordering::Release);
        } else {
            log::error!("smp: CPU with APIC id {id} did not come up");
        }
    }
    started
}

static STACKS_FOR_AP: Mutex<Option<CpuStacks>> = Mutex::new(None);

fn wait_ready(us: u64) -> bool {
    let hz = apic::tsc_hz().max(1_000_000);
    let end = cpu::rdtsc() + hz / 1_000_000 * us;
    while cpu::rdtsc() < end {
        if AP_READY.load(Ordering::Acquire) {
            return true;
        }
        core::hint::spin_loop();
    }
    AP_READY.load(Ordering::Acquire)
}

/// Entry of every AP once it runs 64-bit code on its own stack with the kernel's page tables.
pub extern "C" fn ap_main() -> ! {
    let index = AP_INDEX.load(Ordering::Acquire);
    let stacks = STACKS_FOR_AP
        .lock()
        .take()
        .expect("BSP published the AP's stacks");
    init_this_cpu(index, &stacks);
    super::time::start_tick();
    ONLINE[index].store(true, Ordering::Release);
    AP_READY.store(true, Ordering::Release);
    log::debug!("cpu {index} online (APIC id {})", apic::id());
    idle_loop(index)
}

/// Work an idle CPU looks for besides its [`run_on`] queue (the orchestrator's executor
/// queues): called with interrupts disabled, it either takes one unit of work for CPU `index`,
/// enables interrupts, runs it and returns true, or returns false with interrupts still
/// disabled (the CPU then halts until an interrupt).
pub type IdleHook = fn(index: usize) -> bool;

static IDLE_HOOK: spin::Once<IdleHook> = spin::Once::new();

/// Installs the [`IdleHook`] of every CPU (once; later calls are ignored).
pub fn set_idle_hook(hook: IdleHook) {
    IDLE_HOOK.call_once(|| hook);
}

/// Runs queued work for CPU `index` forever, halting while there is none.
pub fn idle_loop(index: usize) -> ! {
    loop {
        cpu::disable_interrupts();
        // A closure queued after this look comes with a wake-up IPI, which ends the halt below
        // at once (interrupts are off until `sti; hlt`).
        let job = if WORK_QUEUED[index].load(Ordering::Acquire) == 0 {
            None
        } else {
            let mut q = WORK[index].lock();
            let job = q.pop_front();
            WORK_QUEUED[index].store(q.len(), Ordering::Release);
            job
        };
        match job {
            Some(f) => {
                cpu::enable_interrupts();
                f();
            }
            None => {
                if !IDLE_HOOK.get().is_some_and(|hook| hook(index)) {
                    halt_idle(index);
                }
            }
        }
    }
}

/// Halts this CPU, `index`, until an interrupt (`sti; hlt`: called with interrupts disabled,
/// it loses no wake-up), marked meanwhile as halted for [`is_halted`].
pub fn halt_idle(index: usize) {
    let halted = HALTED.get(index);
    if let Some(h) = halted {
        h.store(true, Ordering::Release);
    }
    cpu::enable_and_halt();
    if let Some(h) = halted {
        h.store(false, Ordering::Release);
    }
}

/// Whether CPU `index` is halted waiting for an interrupt ([`halt_idle`]): it has nothing to
/// do until one comes.
pub fn is_halted(index: usize) -> bool {
    HALTED.get(index).is_some_and(|h| h.load(Ordering::Acquire))
}

/// Wakes CPU `index` (from [`idle_loop`]'s halt) to look for work.
pub fn wake(index: usize) -> Result<(), SmpError> {
    if !is_online(index) {
        return Err(SmpError::NoSuchCpu(index));
    }
    let id = hardware_id_of(index).ok_or(SmpError::NoSuchCpu(index))?;
    apic::send_ipi(id, trap::WORK_IPI_VECTOR);
    Ok(())
}

/// Queues `f` to run on CPU `index` (in its idle loop) and wakes it with an IPI.
pub fn run_on(index: usize, f: impl FnOnce() + Send + 'static) -> Result<(), SmpError> {
    if !is_online(index) {
        return Err(SmpError::NoSuchCpu(index));
    }
    cpu::without_interrupts(|| {
        let mut q = WORK[index].lock();
        q.push_back(Box::new(f));
        WORK_QUEUED[index].store(q.len(), Ordering::Release);
    });
    wake(index)
}

/// Runs `f` on CPU `index` and waits for its result. On the calling CPU it runs directly.
pub fn run_on_and_wait<R: Send + 'static>(
    index: usize,
    f: impl FnOnce() -> R + Send + 'static,
) -> Result<R, SmpError> {
    if index == percpu::cpu_index() {
        return Ok(f());
    }
    let slot: Arc<Mutex<Option<R>>> = Arc::new(Mutex::new(None));
    let s2 = slot.clone();
    run_on(index, move || {
        let r = f();
        *s2.lock() = Some(r);
    })?;
    loop {
        if let Some(r) = slot.lock().take() {
            return Ok(r);
        }
        core::hint::spin_loop();
    }
}

/// Flushes the TLB of every CPU in `cpus` (except the caller, which flushes itself) with an IPI
/// and waits until each has done so. Returns the number of IPIs sent.
pub fn tlb_shootdown(cpus: impl Iterator<Item = usize>) -> usize {
    let me = percpu::cpu_index();
    let mut waits: [Option<u64>; MAX_CPUS] = [None; MAX_CPUS];
    let mut sent = 0;
    for c in cpus.filter(|&c| c != me && is_online(c)) {
        waits[c] = Some(TLB_GENERATION[c].load(Ordering::Acquire));
        if let Some(id) = hardware_id_of(c) {
            apic::send_ipi(id, trap::TLB_IPI_VECTOR);
            sent += 1;
        }
    }
    SHOOTDOWN_IPIS.fetch_add(sent as u64, Ordering::Relaxed);
    for (c, w) in waits.iter().enumerate() {
        if let Some(g) = w {
            while TLB_GENERATION[c].load(Ordering::Acquire) == *g {
                core::hint::spin_loop();
            }
        }
    }
    sent
}

/// Handles a TLB-shootdown IPI: flushes this CPU's non-global TLB entries.
pub fn on_tlb_ipi() {
    cpu::flush_tlb();
    TLB_GENERATION[percpu::cpu_index()].fetch_add(1, Ordering::Release);
}
