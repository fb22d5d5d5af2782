//! Reading the PVH `hvm_start_info` block QEMU passes in EBX, while the boot tables still
//! identity-map low memory. Everything needed later is copied into a [`BootInfo`].

use fjord_kernel::memmap::{MemoryKind, UsableMemory};

const START_INFO_MAGIC: u32 = 0x336e_c578;

#[repr(C)]
struct StartInfo {
    magic: u32,
    version: u32,
    flags: u32,
    nr_modules: u32,
    modlist_paddr: u64,
    cmdline_paddr: u64,
    rsdp_paddr: u64,
    memmap_paddr: u64,
    memmap_entries: u32,
    reserved: u32,
}

#[repr(C)]
struct ModlistEntry {
    paddr: u64,
    size: u64,
    cmdline_paddr: u64,
    reserved: u64,
}

#[repr(C)]
struct MemmapEntry {
    addr: u64,
    size: u64,
    kind: u32,
    reserved: u32,
}

/// Longest command line kept.
pub const MAX_CMDLINE: usize = 1024;
/// Most boot modules kept.
pub const MAX_MODULES: usize = 4;

/// What the kernel keeps from the start-info block.
pub struct BootInfo {
    cmdline: [u8; MAX_CMDLINE],
    cmdline_len: usize,
    /// RAM the memory map lists as usable.
    pub usable: UsableMemory,
    /// Highest end address of any RAM-like region (for the direct map).
    pub ram_end: u64,
    /// Physical address of the ACPI RSDP (0 if none was given).
    pub rsdp: u64,
    /// Boot modules as (physical address, size); the first is the initrd.
    pub modules: [(u64, u64); MAX_MODULES],
    /// Number of valid entries in `modules`.
    pub module_count: usize,
    /// Start-info version.
    pub version: u32,
}

/// Why the start-info block was rejected.
#[derive(Debug)]
pub enum PvhError {
    /// The magic number is wrong: not booted through PVH.
    BadMagic(u32),
    /// No memory map was given (start-info version 0).
    NoMemoryMap,
    /// Nothing was recorded: the kernel was not entered through the PVH entry.
    NotRecorded,
}

impl core::fmt::Display for PvhError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            PvhError::BadMagic(m) => write!(
                f,
                "start-info magic {m:#x} is wrong: not booted through PVH"
            ),
            PvhError::NoMemoryMap => f.write_str("the start info has no memory map (version 0)"),
            PvhError::NotRecorded => f.write_str("no start info was recorded at entry"),
        }
    }
}

impl BootInfo {
    /// The kernel command line.
    pub fn cmdline(&self) -> &str {
        core::str::from_utf8(&self.cmdline[..self.cmdline_len]).unwrap_or("")
    }

    /// The initrd, if QEMU was given one.
    pub fn initrd(&self) -> Option<(u64, u64)> {
        (self.module_count > 0).then(|| self.modules[0])
    }
}

/// Reads the start-info block at physical address `pa` (identity-mapped).
///
/// # Safety
/// `pa` must be the address QEMU passed in EBX, and low memory must be identity-mapped.
pub unsafe fn read(pa: u64) -> Result<BootInfo, PvhError> {
    // SAFETY: the caller guarantees `pa` points at the start-info block.
    let si = unsafe { &*(pa as *const StartInfo) };
    if si.magic != START_INFO_MAGIC {
        return Err(PvhError::BadMagic(si.magic));
    }
    let mut info = BootInfo {
        cmdline: [0; MAX_CMDLINE],
        cmdline_len: 0,
        usable: UsableMemory::default(),
        ram_end: 0,
        rsdp: si.rsdp_paddr,
        modules: [(0, 0); MAX_MODULES],
        module_count: 0,
        version: si.version,
    };
    if si.cmdline_paddr != 0 {
        let p = si.cmdline_paddr as *const u8;
        while info.cmdline_len < MAX_CMDLINE {
            // SAFETY: the command line is a NUL-terminated string in identity-mapped memory.
            let b = unsafe { p.add(info.cmdline_len).read() };
            if b == 0 {
                break;
            }
            info.cmdline[info.cmdline_len] = b;
            info.cmdline_len += 1;
        }
    }
    if si.version < 1 || si.memmap_entries == 0 {
        return Err(PvhError::NoMemoryMap);
    }
    for i in 0..si.memmap_entries as usize {
        // SAFETY: the memory map has `memmap_entries` entries at `memmap_paddr`.
        let e = unsafe { &*(si.memmap_paddr as *const MemmapEntry).add(i) };
        let kind = MemoryKind::from_e820(e.kind);
        if kind == MemoryKind::Ram {
            info.usable.add(e.addr, e.size);
        }
        if matches!(
            kind,
            MemoryKind::Ram | MemoryKind::AcpiReclaimable | MemoryKind::AcpiNvs
        ) {
            info.ram_end = info.ram_end.max(e.addr + e.size);
        }
    }
    for i in 0..(si.nr_modules as usize).min(MAX_MODULES) {
        // SAFETY: the module list has `nr_modules` entries at `modlist_paddr`.
        let m = unsafe { &*(si.modlist_paddr as *const ModlistEntry).add(i) };
        info.modules[i] = (m.paddr, m.size);
        info.module_count += 1;
    }
    Ok(info)
}

static RECORDED: spin::Once<Result<BootInfo, PvhError>> = spin::Once::new();

/// Reads and keeps the start-info block at physical address `pa`, on the entry path, while low
/// memory is still identity-mapped.
///
/// # Safety
/// As for [`read`].
pub(super) unsafe fn record(pa: u64) {
    // SAFETY: guaranteed by the caller.
    RECORDED.call_once(|| unsafe { read(pa) });
}

/// The boot information the loader passed, read on the entry path; why it is unusable when it
/// is.
pub fn boot_info() -> Result<&'static BootInfo, &'static PvhError> {
    match RECORDED.get() {
        Some(Ok(info)) => Ok(info),
        Some(Err(e)) => Err(e),
        None => Err(&PvhError::NotRecorded),
    }
}
