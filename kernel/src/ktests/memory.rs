//! Tests of the frame allocator, page tables, kernel image protection and the heap.

use crate::arch::trap;
use crate::ktest;
use crate::mm::frames::{self, DIRECT, KernelFrames};
use crate::mm::kernel_tables;
use alloc::boxed::Box;
use alloc::vec::Vec;
use fjord_kernel::layout::{PAGE_SIZE, USER_TEST_BASE};
use fjord_kernel::paging::{Flags, PageTables};
use fjord_kernel::{kassert, kassert_eq};

ktest! {
    fn frames_alloc_free_roundtrip() {
        let before = frames::free_frames();
        let got: Vec<u64> = (0..64).map(|_| frames::alloc().unwrap()).collect();
        kassert_eq!(frames::free_frames(), before - 64);
        let mut sorted = got.clone();
        sorted.sort();
        sorted.dedup();
        kassert_eq!(sorted.len(), 64);
        kassert!(got.iter().all(|&pa| pa % PAGE_SIZE == 0 && pa >= 0x10_0000));
        for pa in got {
            frames::free(pa).unwrap();
        }
        kassert_eq!(frames::free_frames(), before);
        let c = frames::alloc_contiguous(16, 16).unwrap();
        kassert_eq!(c % (16 * PAGE_SIZE), 0);
        frames::free_contiguous(c, 16).unwrap();
        kassert!(frames::free(c).is_err(), "double free must be rejected");
        Ok(())
    }
}

ktest! {
    fn page_tables_map_translate_unmap_in_a_new_root() {
        let mut fa = KernelFrames;
        let mut pt = PageTables::create_sharing_kernel(&DIRECT, &mut fa, kernel_tables::kernel_root())
            .map_err(|e| alloc::format!("{e:?}"))?;
        let frame = frames::alloc_zeroed().unwrap();
        let va = USER_TEST_BASE + 0x4000_0000;
        pt.map(va, frame, Flags::USER | Flags::WRITABLE | Flags::NO_EXECUTE, &mut fa).unwrap();
        let t = pt.translate(va + 8).unwrap();
        kassert_eq!(t.phys, frame + 8);
        // The kernel half is shared: the heap is visible through the new root.
        let b = Box::new(7u64);
        let hv = &*b as *const u64 as u64;
        kassert!(pt.translate(hv).is_some(), "heap must be mapped in every root");
        kassert!(kernel_tables::kernel().translate(va).is_none(), "user mapping leaked into the kernel root");
        pt.protect(va, Flags::USER).unwrap();
        kassert!(!pt.translate(va).unwrap().flags.contains(Flags::WRITABLE));
        kassert_eq!(pt.unmap(va), Ok(frame));
        kassert!(pt.translate(va).is_none());
        pt.free_user_tables(&mut fa);
        frames::free(frame).unwrap();
        Ok(())
    }
}

ktest! {
    fn hardware_sets_accessed_and_dirty_bits() {
        let frame = frames::alloc_zeroed().unwrap();
        let va = 0xffff_8800_0000_0000u64;
        let mut kt = kernel_tables::kernel();
        kt.map(va, frame, Flags::KERNEL_RW, &mut KernelFrames).unwrap();
        crate::arch::cpu::invlpg(va);
        kassert_eq!(kt.take_bits(va, Flags::ACCESSED | Flags::DIRTY).unwrap(), Flags::EMPTY);
        let _ = trap::probe_read(va).unwrap();
        crate::arch::cpu::invlpg(va);
        kassert_eq!(kt.take_bits(va, Flags::ACCESSED | Flags::DIRTY).unwrap(), Flags::ACCESSED);
        trap::probe_write(va, 5).unwrap();
        crate::arch::cpu::invlpg(va);
        kassert!(kt.take_bits(va, Flags::DIRTY).unwrap().contains(Flags::DIRTY));
        kt.unmap(va).unwrap();
        crate::arch::cpu::invlpg(va);
        kassert!(trap::probe_read(va).is_err(), "unmapped page must fault");
        frames::free(frame).unwrap();
        Ok(())
    }
}

ktest! {
    fn kernel_image_is_w_xor_x() {
        let img = kernel_tables::image();
        let kt = kernel_tables::kernel();
        let text = kt.translate(img.text.0).unwrap().flags;
        kassert!(!text.contains(Flags::WRITABLE) && !text.contains(Flags::NO_EXECUTE), "text {text:?}");
        let ro = kt.translate(img.rodata.0).unwrap().flags;
        kassert!(!ro.contains(Flags::WRITABLE) && ro.contains(Flags::NO_EXECUTE), "rodata {ro:?}");
        let data = kt.translate(img.data.0).unwrap().flags;
        kassert!(data.contains(Flags::WRITABLE) && data.contains(Flags::NO_EXECUTE), "data {data:?}");
        // A write to kernel text is a protection fault, caught by the probe.
        let f = trap::probe_write(img.text.0 + 64, 0).unwrap_err();
        kassert_eq!(f.vector, 14);
        kassert!(f.error & 1 != 0 && f.error & 2 != 0, "error code {:#x}", f.error);
        kassert!(kt.translate(0).is_none(), "page 0 must be unmapped");
        Ok(())
    }
}

ktest! {
    fn heap_serves_small_and_large_allocations() {
        let before = crate::mm::heap::used();
        let v: Vec<u64> = (0..100_000).collect();
        kassert_eq!(v.iter().sum::<u64>(), 99_999 * 100_000 / 2);
        let big = alloc::vec![0xabu8; 4 << 20];
        kassert!(big.iter().all(|&b| b == 0xab));
        let boxes: Vec<Box<[u8; 24]>> = (0..1000).map(|i| Box::new([i as u8; 24])).collect();
        kassert!(boxes.iter().enumerate().all(|(i, b)| b[23] == i as u8));
        drop((v, big, boxes));
        kassert_eq!(crate::mm::heap::used(), before);
        Ok(())
    }
}

ktest! {
    fn stack_guard_pages_are_unmapped() {
        let slot = fjord_kernel::layout::KERNEL_STACKS_BASE;
        kassert!(kernel_tables::kernel().translate(slot).is_none(), "guard page below CPU 0's stack");
        kassert!(trap::probe_read(slot).is_err());
        Ok(())
    }
}
