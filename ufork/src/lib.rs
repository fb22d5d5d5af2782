//! μFork for Fjord: fork inside one address space, with capability tags emulated in software.
//!
//! Modules:
//! - [`area`]: a μprocess's contiguous, size-aligned area and the layout of its regions.
//! - [`cap`]: the 128-bit capability format (address word + area-relative bounds and
//!   permissions), its checks and its relocation.
//! - [`tags`]: the kernel-owned shadow tag table, one bit per aligned 8-byte pointer slot.
//! - [`source`]: the [`TagSource`] interface and its emulated sources (precise, inferred,
//!   their union); a CHERI backend plugs in here.
//! - [`relocate`]: relocation of one page's tagged words and of the saved registers.
//! - [`copy_mode`]: copy modes (full, CoW, CoA, CoPA), isolation levels and the per-page
//!   decisions at fork and on later faults.
//! - [`process`]: the μprocess table (PIDs, parents, children, states, exit, kill, waitpid).
//! - [`fd`]: per-μprocess descriptor tables over shared, reference-counted open files.
//! - [`pipe`]: bounded pipes and the pipe table.
//!
//! Cargo features: none. The crate needs `alloc` and nothing else.
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod area;
pub mod cap;
pub mod copy_mode;
pub mod fd;
pub mod pipe;
pub mod process;
pub mod relocate;
pub mod source;
pub mod tags;

pub use area::{Area, AreaError, AreaLayout, LayoutBuilder, PAGE_SIZE, Region};
pub use cap::{Cap, CapError, CapPerms, MAX_AREA_SIZE};
pub use copy_mode::{
    Access, CopyMode, ForkDecision, Isolation, ModeError, OnFault, PageRole, PageState, Prot,
};
pub use fd::{Fd, FdError, FdTable, FileId, OpenFiles};
pub use pipe::{End, PIPE_BUF, Pipe, PipeError, PipeId, PipeTable};
pub use process::{
    BlockReason, ExitStatus, Pid, ProcError, Process, ProcessTable, Signal, State, WaitOptions,
    WaitOutcome, WaitStatus, WaitTarget,
};
pub use relocate::{Gpr, RegTags, Registers, RelocError, relocate_page, relocate_word};
pub use source::{Inferred, Precise, TagSource, Union};
pub use tags::{PageWords, SLOT_SIZE, SLOTS_PER_PAGE, ShadowTags, SlotMask, TagError};
