//! μFork for Fjord: POSIX `fork` inside one address space (μFork, SOSP '25), with the
//! capability tags it relies on emulated in software. This crate is the pure logic the kernel
//! calls; it touches no hardware and is tested on the host.
//!
//! # What it holds
//!
//! A μprocess lives in one contiguous, size-aligned *area* ([`area`]) holding its code, GOT,
//! data, allocator metadata, heap, TLS and stack, and has its own protection domain. `fork`
//! reserves a child area of the same size elsewhere, shares the parent's frames, copies and
//! relocates eagerly what the child needs first (GOT, allocator metadata, top of the stack),
//! relocates the saved registers by `child_base - parent_base` ([`relocate`]), and leaves the
//! rest to the copy mode ([`copy_mode`]): full copy, copy-on-write (isolation off only),
//! copy-on-access, or copy-on-pointer-access. The per-μprocess kernel state the system calls
//! need (PIDs, parents, exit statuses, `waitpid`, `kill`; descriptor tables and pipes) is in
//! [`process`], [`fd`] and [`pipe`].
//!
//! # What is emulated, and how it differs from CHERI
//!
//! μFork finds the pointers to relocate by their CHERI tags and keeps μprocesses apart with
//! CHERI bounds. Fjord runs on x86_64 under QEMU, with neither:
//!
//! - **Capabilities** ([`cap`]) have a 128-bit format (address word + a metadata word with
//!   area-relative bounds and permissions), but programs store and use plain 64-bit
//!   addresses; the metadata lives in the kernel, which uses it to check system-call
//!   arguments and to describe what it hands out. Bounds are not checked on every access by
//!   hardware: a μprocess is confined to its area by its page tables (its protection
//!   domain), with page granularity.
//! - **Tags**: CHERI keeps a hidden bit per 16-byte granule, set by capability stores and
//!   cleared by every other store, so it is exact. Fjord keeps a shadow table with one bit
//!   per 8-byte slot in kernel memory ([`tags`]), set where the kernel and loader create
//!   pointers (*precise* tags), and adds *inferred* tags: an aligned word whose value points
//!   into the μprocess's own area ([`source`]). Native stores do not maintain the table, so
//!   an integer that looks like an in-area address can be relocated and an encoded pointer
//!   can be missed; [`source`] states exactly when.
//! - **Copy-on-pointer-access** needs CHERI's fault-on-capability-load page bit; x86 has
//!   none, so pages without tags are shared copy-on-write and pages with tags are copied on
//!   the child's first access.
//! - **IsolationLevel does not rest on tags**: a missed pointer still names the parent's area,
//!   which the child's protection domain does not map, so using it faults and kills the child.
//!
//! Everything that reads tags goes through the one [`TagSource`] trait, so a CHERI backend
//! (CHERI-RISC-V, Morello) can supply hardware tags without any change to the fork code.
//!
//! Modules:
//! - [`area`]: a μprocess's contiguous, size-aligned area and the layout of its regions.
//! - [`cap`]: the 128-bit capability format (address word + area-relative bounds and
//!   permissions), its checks and its relocation.
//! - [`tags`]: the kernel-owned shadow tag table, one bit per aligned 8-byte pointer slot.
//! - [`source`]: the [`TagSource`] interface and its emulated sources (precise, inferred,
//!   their union); a CHERI backend plugs in here.
//! - [`relocate`]: relocation of one page's tagged words and of the saved registers.
//! - [`accuracy`]: memory images with known pointers and adversarial integers, and each
//!   source's false positives and negatives on them.
//! - [`copy_mode`]: copy modes (full, CoW, CoA, CoPA), isolation levels and the per-page
//!   decisions at fork and on later faults.
//! - [`process`]: the μprocess table (PIDs, parents, children, states, exit, kill, waitpid).
//! - [`fd`]: per-μprocess descriptor tables over shared, reference-counted open files.
//! - [`pipe`]: bounded pipes and the pipe table.
//! - [`image`]: a μprocess's checkpoint image (registers, tags, descriptors, page list), for
//!   restoring it at another address on another node (CXLfork).
//!
//! Cargo features: none. The crate needs `alloc` and nothing else.
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod accuracy;
pub mod area;
pub mod area_map;
pub mod cap;
pub mod copy_mode;
pub mod fd;
pub mod image;
pub mod known;
pub mod lazy;
pub mod pid_map;
pub mod pipe;
pub mod process;
pub mod relocate;
pub mod source;
pub mod tags;

pub use area::{Area, AreaError, AreaLayout, LayoutBuilder, PAGE_SIZE, Region};
pub use cap::{Cap, CapError, CapPerms, MAX_AREA_SIZE};
pub use copy_mode::{
    Access, CopyMode, ForkDecision, IsolationLevel, ModeError, OnFault, PageRole, PageState, Prot,
};
pub use fd::{Fd, FdError, FdTable, FileId, OpenFiles};
pub use image::{ImageError, ProcessImage};
pub use lazy::{FirstTouch, LazyPages, on_first_touch};
pub use pipe::{End, PIPE_BUF, Pipe, PipeError, PipeId, PipeTable};
pub use process::{
    BlockReason, ExitStatus, Pid, ProcError, Process, ProcessTable, Signal, State, WaitOptions,
    WaitOutcome, WaitStatus, WaitTarget,
};
pub use relocate::{
    Gpr, RegTags, Registers, RelocError, relocate_page, relocate_page_tallied, relocate_word,
};
pub use source::{BySource, Emulated, Inferred, Precise, TagChoice, TagSource, Tally, Union};
pub use tags::{PageWords, SLOT_SIZE, SLOTS_PER_PAGE, ShadowTags, SlotMask, TagError};
