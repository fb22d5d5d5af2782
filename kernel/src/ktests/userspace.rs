//! A minimal ring-3 address space for the kernel's own tests and benchmarks: its own root table
//! sharing the kernel half, the built-in user programs mapped read-execute, a stack and a data
//! area mapped read-write no-execute.

use crate::arch::cpu;
use crate::arch::user::{self, UserContext, UserExit};
use crate::ktests::user_programs::{self, Program};
use crate::mm::frames::{self, DIRECT, KernelFrames};
use crate::mm::kernel_tables;
use alloc::vec::Vec;
use fjord_kernel::layout::{PAGE_SIZE, USER_TEST_BASE};
use fjord_kernel::paging::{Flags, PageTables, PagingError};

/// User address of the code page(s).
pub const CODE_BASE: u64 = USER_TEST_BASE;
/// User address of the stack's lowest page.
pub const STACK_BASE: u64 = USER_TEST_BASE + 0x10_0000;
/// Stack size.
pub const STACK_SIZE: u64 = 4 * PAGE_SIZE;
/// User address of the data area.
pub const DATA_BASE: u64 = USER_TEST_BASE + 0x20_0000;

/// A ring-3 address space with the built-in programs.
pub struct UserSpace {
    root: u64,
    owned: Vec<(u64, usize)>,
    data_phys: u64,
    data_pages: usize,
}

impl UserSpace {
    /// Builds an address space with `data_pages` pages of data (physically contiguous).
    pub fn new(data_pages: usize) -> Result<UserSpace, PagingError> {
        let mut fa = KernelFrames;
        let mut pt =
            PageTables::create_sharing_kernel(&DIRECT, &mut fa, kernel_tables::kernel_root())?;
        let mut space = UserSpace {
            root: pt.root(),
            owned: Vec::new(),
            data_phys: 0,
            data_pages,
        };
        let blob = user_programs::blob();
        let code_pages = blob.len().div_ceil(PAGE_SIZE as usize);
        let code = frames::alloc_contiguous(code_pages, 1).map_err(|_| PagingError::OutOfMemory)?;
        space.owned.push((code, code_pages));
        frames::zero(code, code_pages);
        // SAFETY: `code` is a fresh run of `code_pages` frames, reachable through the direct map.
        unsafe {
            core::ptr::copy_nonoverlapping(
                blob.as_ptr(),
                crate::mm::phys_to_virt(code) as *mut u8,
                blob.len(),
            )
        };
        for i in 0..code_pages as u64 {
            pt.map(
                CODE_BASE + i * PAGE_SIZE,
                code + i * PAGE_SIZE,
                Flags::USER,
                &mut fa,
            )?;
        }
        let stack_pages = (STACK_SIZE / PAGE_SIZE) as usize;
        let stack =
            frames::alloc_contiguous(stack_pages, 1).map_err(|_| PagingError::OutOfMemory)?;
        space.owned.push((stack, stack_pages));
        let data =
            frames::alloc_contiguous(data_pages.max(1), 1).map_err(|_| PagingError::OutOfMemory)?;
        space.owned.push((data, data_pages.max(1)));
        space.data_phys = data;
        frames::zero(data, data_pages.max(1));
        let rw = Flags::USER | Flags::WRITABLE | Flags::NO_EXECUTE;
        for i in 0..stack_pages as u64 {
            pt.map(
                STACK_BASE + i * PAGE_SIZE,
                stack + i * PAGE_SIZE,
                rw,
                &mut fa,
            )?;
        }
        for i in 0..data_pages as u64 {
            pt.map(DATA_BASE + i * PAGE_SIZE, data + i * PAGE_SIZE, rw, &mut fa)?;
        }
        Ok(space)
    }

    /// The root table (CR3 value) of this address space.
    pub fn root(&self) -> u64 {
        self.root
    }

    /// Runs `f` in ring 0 with this address space loaded (and interrupts off), as a system call
    /// of its program would run.
    pub fn with_loaded<R>(&self, f: impl FnOnce() -> R) -> R {
        let kernel_root = kernel_tables::kernel_root();
        cpu::without_interrupts(|| {
            // SAFETY: this root shares the kernel image and kernel half with the kernel tables.
            unsafe { cpu::write_cr3(self.root) };
            let r = f();
            // SAFETY: switching back to the kernel's own tables.
            unsafe { cpu::write_cr3(kernel_root) };
            r
        })
    }

    /// Runs `prog` with `args` until it exits, faults, or runs past `deadline_ms` milliseconds.
    pub fn run(&mut self, prog: Program, args: [u64; 3], deadline_ms: Option<u64>) -> UserExit {
        let [a0, a1, a2] = args;
        let mut ctx = UserContext::new(
            CODE_BASE + prog.offset(),
            STACK_BASE + STACK_SIZE,
            [a0, a1, a2, 0],
        );
        let deadline = deadline_ms.map(crate::arch::time::deadline_after_ms);
        let kernel_root = kernel_tables::kernel_root();
        cpu::without_interrupts(|| {
            // SAFETY: this root shares the kernel image and kernel half with the kernel tables.
            unsafe { cpu::write_cr3(self.root) };
            let exit = user::run(&mut ctx, deadline);
            // SAFETY: switching back to the kernel's own tables.
            unsafe { cpu::write_cr3(kernel_root) };
            exit
        })
    }

    /// The data area as seen by the kernel.
    pub fn data(&self) -> &[u64] {
        let p = crate::mm::phys_to_virt(self.data_phys) as *const u64;
        // SAFETY: the data frames belong to this space and are mapped through the direct map.
        unsafe { core::slice::from_raw_parts(p, self.data_pages * (PAGE_SIZE as usize / 8)) }
    }
}

impl Drop for UserSpace {
    fn drop(&mut self) {
        PageTables::new(self.root, &DIRECT).free_user_tables(&mut KernelFrames);
        for &(pa, n) in &self.owned {
            if let Err(e) = frames::free_contiguous(pa, n) {
                log::error!("freeing user frames {pa:#x}: {e:?}");
            }
        }
    }
}
