//! `virtio_drivers::Hal` over Fjord's memory management: DMA memory for virtio devices.
//!
//! DMA memory is contiguous frames from the frame allocator, reached through the direct map.
//! Buffers the driver shares with the device are translated in place when they live in the
//! direct map (the heap) or the identity-mapped kernel image; anything else (a header on a kernel
//! stack, whose frames need not be contiguous) goes through a bounce buffer of fresh frames that is
//! copied in on `share` and back on `unshare`. There is no IOMMU: the device sees guest-physical
//! addresses.

use super::{frames, kernel_tables};
use crate::mm;
use core::ptr::NonNull;
use fjord_kernel::layout::{PAGE_SIZE, align_up};
use virtio_drivers::{BufferDirection, Hal, PhysAddr};

/// The HAL type the virtio drivers are instantiated with.
pub struct FjordHal;

fn pages_for(len: usize) -> usize {
    (align_up(len as u64, PAGE_SIZE) / PAGE_SIZE) as usize
}

// SAFETY: `dma_alloc` returns zeroed, page-aligned, exclusively owned frames mapped at the
// returned pointer; `mmio_phys_to_virt` returns a fresh uncached mapping of the device region;
// `share` returns the physical address of memory holding the buffer's contents (the buffer
// itself, or a bounce copy that `unshare` copies back and frees).
unsafe impl Hal for FjordHal {
    fn dma_alloc(pages: usize, _direction: BufferDirection) -> (PhysAddr, NonNull<u8>) {
        let pa = frames::alloc_contiguous(pages, 1).expect("out of memory for virtio DMA");
        frames::zero(pa, pages);
        let va = NonNull::new(mm::phys_to_virt(pa) as *mut u8).expect("direct map is not null");
        (pa, va)
    }

    unsafe fn dma_dealloc(paddr: PhysAddr, _vaddr: NonNull<u8>, pages: usize) -> i32 {
        match frames::free_contiguous(paddr, pages) {
            Ok(()) => 0,
            Err(_) => -1,
        }
    }

    unsafe fn mmio_phys_to_virt(paddr: PhysAddr, size: usize) -> NonNull<u8> {
        let va = kernel_tables::map_mmio(paddr, size as u64).expect("MMIO window exhausted");
        NonNull::new(va as *mut u8).expect("MMIO window is not null")
    }

    unsafe fn share(buffer: NonNull<[u8]>, _direction: BufferDirection) -> PhysAddr {
        let va = buffer.as_ptr() as *mut u8 as u64;
        if let Some(pa) = mm::virt_to_phys(va) {
            return pa;
        }
        let len = buffer.len();
        let pa = frames::alloc_contiguous(pages_for(len), 1).expect("out of memory for a bounce");
        // SAFETY: the caller guarantees `buffer` is valid for `len` bytes and not accessed by
        // anyone else during the call; the bounce frames were just allocated and are mapped at
        // their direct-map address. Copying in both directions keeps device-writable buffers'
        // untouched bytes intact.
        unsafe {
            core::ptr::copy_nonoverlapping(
                buffer.as_ptr() as *const u8,
                mm::phys_to_virt(pa) as *mut u8,
                len,
            )
        };
        pa
    }

    unsafe fn unshare(paddr: PhysAddr, buffer: NonNull<[u8]>, direction: BufferDirection) {
        let va = buffer.as_ptr() as *mut u8 as u64;
        if mm::virt_to_phys(va).is_some() {
            return;
        }
        let len = buffer.len();
        if direction != BufferDirection::DriverToDevice {
            // SAFETY: `paddr` is the bounce buffer `share` made for this `buffer` (same length);
            // the device is done with it, and the caller guarantees exclusive access to `buffer`.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    mm::phys_to_virt(paddr) as *const u8,
                    buffer.as_ptr() as *mut u8,
                    len,
                )
            };
        }
        if let Err(e) = frames::free_contiguous(paddr, pages_for(len)) {
            log::error!("freeing a virtio bounce buffer at {paddr:#x}: {e:?}");
        }
    }
}
