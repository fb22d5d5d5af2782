//! Finding the CPUs: the ACPI RSDP → RSDT/XSDT → MADT walk, and the MADT's processor entries.
//!
//! Physical memory is read through [`AcpiMemory`], so the walk runs on the host over byte
//! buffers in tests and over the direct map in the kernel.

/// Read access to physical memory holding ACPI tables.
pub trait AcpiMemory {
    /// Copies `buf.len()` bytes starting at physical address `phys` into `buf`.
    fn read(&self, phys: u64, buf: &mut [u8]);
}

/// Why the CPU list could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcpiError {
    /// The RSDP signature or checksum is wrong.
    BadRsdp,
    /// A system table's checksum is wrong (its signature is given).
    BadChecksum([u8; 4]),
    /// No MADT ("APIC") table is listed.
    NoMadt,
    /// A table is shorter than its own header says.
    Truncated,
}

/// Maximum number of CPUs Fjord records.
pub const MAX_CPUS: usize = 64;

/// The processors the MADT lists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuList {
    /// Physical address of the local APIC registers.
    pub local_apic_addr: u64,
    /// APIC ids of the usable processors, in table order (the first is normally the BSP).
    apic_ids: [u32; MAX_CPUS],
    count: usize,
}

impl CpuList {
    /// APIC ids of the usable processors.
    pub fn apic_ids(&self) -> &[u32] {
        &self.apic_ids[..self.count]
    }

    fn push(&mut self, id: u32) {
        if self.count < MAX_CPUS && !self.apic_ids().contains(&id) {
            self.apic_ids[self.count] = id;
            self.count += 1;
        }
    }
}

fn checksum_ok(bytes: &[u8]) -> bool {
    bytes.iter().fold(0u8, |a, b| a.wrapping_add(*b)) == 0
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from(u32_at(b, off)) | (u64::from(u32_at(b, off + 4)) << 32)
}

/// Largest system table Fjord reads (bytes).
const MAX_TABLE: usize = 4096;

/// Reads a whole system table into `buf`, checking its checksum; returns its length.
fn read_table(
    mem: &impl AcpiMemory,
    phys: u64,
    buf: &mut [u8; MAX_TABLE],
) -> Result<usize, AcpiError> {
    mem.read(phys, &mut buf[..36]);
    let len = u32_at(buf, 4) as usize;
    if !(36..=MAX_TABLE).contains(&len) {
        return Err(AcpiError::Truncated);
    }
    mem.read(phys, &mut buf[..len]);
    if !checksum_ok(&buf[..len]) {
        return Err(AcpiError::BadChecksum([buf[0], buf[1], buf[2], buf[3]]));
    }
    Ok(len)
}

/// Walks from the RSDP at `rsdp` to the MADT and returns the usable processors.
pub fn find_cpus(mem: &impl AcpiMemory, rsdp: u64) -> Result<CpuList, AcpiError> {
    let mut r = [0u8; 36];
    mem.read(rsdp, &mut r);
    if &r[..8] != b"RSD PTR " || !checksum_ok(&r[..20]) {
        return Err(AcpiError::BadRsdp);
    }
    let (root, entry_size) = if r[15] >= 2 && u64_at(&r, 24) != 0 {
        (u64_at(&r, 24), 8)
    } else {
        (u64::from(u32_at(&r, 16)), 4)
    };
    let mut buf = [0u8; MAX_TABLE];
    let len = read_table(mem, root, &mut buf)?;
    let mut madt = None;
    let mut off = 36;
    while off + entry_size <= len {
        let addr = if entry_size == 8 {
            u64_at(&buf, off)
        } else {
            u64::from(u32_at(&buf, off))
        };
        let mut sig = [0u8; 4];
        mem.read(addr, &mut sig);
        if &sig == b"APIC" {
            madt = Some(addr);
            break;
        }
        off += entry_size;
    }
    let madt = madt.ok_or(AcpiError::NoMadt)?;
    let len = read_table(mem, madt, &mut buf)?;
    parse_madt(&buf[..len])
}

/// Parses a MADT (header included) into its usable processors.
pub fn parse_madt(t: &[u8]) -> Result<CpuList, AcpiError> {
    if t.len() < 44 {
        return Err(AcpiError::Truncated);
    }
    let mut cpus = CpuList {
        local_apic_addr: u64::from(u32_at(t, 36)),
        apic_ids: [0; MAX_CPUS],
        count: 0,
    };
    let mut off = 44;
    while off + 2 <= t.len() {
        let (kind, len) = (t[off], t[off + 1] as usize);
        if len < 2 || off + len > t.len() {
            return Err(AcpiError::Truncated);
        }
        let e = &t[off..off + len];
        match kind {
            // Processor local APIC: enabled (bit 0) or online-capable (bit 1).
            0 if len >= 8 && u32_at(e, 4) & 3 != 0 => cpus.push(u32::from(e[3])),
            // Processor local x2APIC.
            9 if len >= 16 && u32_at(e, 8) & 3 != 0 => cpus.push(u32_at(e, 4)),
            // Local APIC address override.
            5 if len >= 12 => cpus.local_apic_addr = u64_at(e, 4),
            _ => {}
        }
        off += len;
    }
    Ok(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    struct Mem(Vec<u8>);
    impl AcpiMemory for Mem {
        fn read(&self, phys: u64, buf: &mut [u8]) {
            let p = phys as usize;
            buf.copy_from_slice(&self.0[p..p + buf.len()]);
        }
    }

    fn fix_checksum(t: &mut [u8], at: usize) {
        t[at] = 0;
        let s = t.iter().fold(0u8, |a, b| a.wrapping_add(*b));
        t[at] = 0u8.wrapping_sub(s);
    }

    fn sdt(sig: &[u8; 4], body: &[u8]) -> Vec<u8> {
        let mut t = vec![0u8; 36];
        t[..4].copy_from_slice(sig);
        t.extend_from_slice(body);
        let len = t.len() as u32;
        t[4..8].copy_from_slice(&len.to_le_bytes());
        fix_checksum(&mut t, 9);
        t
    }

    fn madt_body() -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&0xfee0_0000u32.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        for (id, flags) in [(0u8, 1u32), (1, 1), (2, 0), (3, 2)] {
            b.extend_from_slice(&[0, 8, id, id]);
            b.extend_from_slice(&flags.to_le_bytes());
        }
        b.extend_from_slice(&[9, 16, 0, 0]);
        b.extend_from_slice(&300u32.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b
    }

    fn image(xsdt: bool) -> Mem {
        let mut m = vec![0u8; 0x3000];
        let madt = sdt(b"APIC", &madt_body());
        m[0x2000..0x2000 + madt.len()].copy_from_slice(&madt);
        let root = if xsdt {
            sdt(b"XSDT", &0x2000u64.to_le_bytes())
        } else {
            sdt(b"RSDT", &0x2000u32.to_le_bytes())
        };
        m[0x1000..0x1000 + root.len()].copy_from_slice(&root);
        let mut r = vec![0u8; 36];
        r[..8].copy_from_slice(b"RSD PTR ");
        r[15] = if xsdt { 2 } else { 0 };
        r[16..20].copy_from_slice(&0x1000u32.to_le_bytes());
        if xsdt {
            r[16..20].copy_from_slice(&0u32.to_le_bytes());
            r[24..32].copy_from_slice(&0x1000u64.to_le_bytes());
        }
        fix_checksum(&mut r[..20], 8);
        m[0x100..0x100 + 36].copy_from_slice(&r);
        Mem(m)
    }

    #[test]
    fn finds_enabled_cpus_through_rsdt_and_xsdt() {
        for xsdt in [false, true] {
            let cpus = find_cpus(&image(xsdt), 0x100).unwrap();
            assert_eq!(cpus.apic_ids(), &[0, 1, 3, 300]);
            assert_eq!(cpus.local_apic_addr, 0xfee0_0000);
        }
    }

    #[test]
    fn rejects_bad_signature_and_checksum() {
        let mut m = image(false);
        m.0[0x100] = b'X';
        assert_eq!(find_cpus(&m, 0x100), Err(AcpiError::BadRsdp));
        let mut m = image(false);
        m.0[0x2000 + 40] ^= 0xff;
        assert_eq!(find_cpus(&m, 0x100), Err(AcpiError::BadChecksum(*b"APIC")));
    }

    #[test]
    fn truncated_entries_are_errors_not_panics() {
        let mut t = sdt(b"APIC", &madt_body());
        t.truncate(50);
        assert_eq!(parse_madt(&t), Err(AcpiError::Truncated));
        assert_eq!(parse_madt(&t[..10]), Err(AcpiError::Truncated));
    }
}
