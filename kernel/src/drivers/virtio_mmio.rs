//! Finding virtio-mmio devices on QEMU's `microvm` board by probing its fixed transport slots.
//!
//! QEMU's microvm places its virtio-mmio transports at `0xfeb0_0000 + 512 * i` and attaches
//! devices to the highest free slot first. A board with ACPI (QEMU 7.2's default) has a second
//! I/O APIC and 24 slots, so the first device lands at `0xfeb0_2e00`; without ACPI there are 8
//! and it lands at `0xfeb0_0e00`. With ACPI on (the default)
//! the board describes them only in the DSDT, which Fjord does not parse (it would need an AML
//! interpreter); with `acpi=off` QEMU appends `virtio_mmio.device=512@0x…:irq` to the command
//! line instead. Probing works in both cases: every slot either holds a transport, whose first
//! word is the magic value `"virt"`, or reads as zero (an empty transport has device id 0).
//!
//! This module only decodes what a probe read; reading the registers is the kernel's job.

/// Physical address of the first transport slot.
pub const MICROVM_BASE: u64 = 0xfeb0_0000;
/// Bytes per transport slot (registers plus device configuration space).
pub const SLOT_SIZE: u64 = 512;
/// Slots probed: enough for QEMU's largest microvm layout.
pub const SLOT_COUNT: usize = 24;
/// The magic value at offset 0 of a transport (`"virt"` little-endian).
pub const MAGIC: u32 = 0x7472_6976;
/// Virtio device id of a network card.
pub const DEVICE_NET: u32 = 1;
/// Virtio device id of a block device.
pub const DEVICE_BLOCK: u32 = 2;

/// Register offsets read by a probe.
pub mod reg {
    /// Magic value.
    pub const MAGIC: u64 = 0x000;
    /// Transport version (1 legacy, 2 modern).
    pub const VERSION: u64 = 0x004;
    /// Device id (0: no device behind this transport).
    pub const DEVICE_ID: u64 = 0x008;
}

/// Physical address of slot `index`.
pub const fn slot_address(index: usize) -> u64 {
    MICROVM_BASE + SLOT_SIZE * index as u64
}

/// What a probed slot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// Nothing answers here (not a virtio-mmio transport).
    Absent,
    /// A transport with no device plugged in.
    Empty,
    /// A device of the given virtio id behind a transport of the given version.
    Device {
        /// Virtio device id (1 = network, 2 = block, …).
        device_id: u32,
        /// Transport version (1 or 2).
        version: u32,
    },
    /// A transport with a version this kernel does not know.
    UnknownVersion(u32),
}

/// Decodes the three registers read from a slot.
pub fn decode(magic: u32, version: u32, device_id: u32) -> Slot {
    if magic != MAGIC {
        return Slot::Absent;
    }
    if !(1..=2).contains(&version) {
        return Slot::UnknownVersion(version);
    }
    if device_id == 0 {
        return Slot::Empty;
    }
    Slot::Device { device_id, version }
}

/// Slot indices in probe order: highest first, where QEMU puts the first device.
pub fn probe_order() -> impl Iterator<Item = usize> {
    (0..SLOT_COUNT).rev()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_match_qemu() {
        assert_eq!(slot_address(0), 0xfeb0_0000);
        assert_eq!(slot_address(7), 0xfeb0_0e00);
        assert_eq!(probe_order().next(), Some(SLOT_COUNT - 1));
        assert_eq!(probe_order().count(), SLOT_COUNT);
    }

    #[test]
    fn decodes_probe_results() {
        assert_eq!(decode(0, 0, 0), Slot::Absent);
        assert_eq!(decode(0xffff_ffff, 2, 1), Slot::Absent);
        assert_eq!(decode(MAGIC, 2, 0), Slot::Empty);
        assert_eq!(
            decode(MAGIC, 2, DEVICE_NET),
            Slot::Device {
                device_id: 1,
                version: 2
            }
        );
        assert_eq!(
            decode(MAGIC, 1, 2),
            Slot::Device {
                device_id: 2,
                version: 1
            }
        );
        assert_eq!(decode(MAGIC, 3, 1), Slot::UnknownVersion(3));
    }
}
