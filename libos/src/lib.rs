//! The SDK Fjord functions link against.
//!
//! - [`abi`]: the system-call numbers and error codes shared by the kernel and user code;
//! - [`syscall`]: raw `syscall` wrappers for ring-3 code (x86_64 only);
//! - [`privlib`]: the Jord PrivLib calls (`mmap`, `pmove`, `ccall`, ...) for function code;
//! - [`function`]: the function entry ABI, the [`function!`] macro, ArgBuf views and
//!   [`function::FnError`];
//! - [`call`]: nested calls to other functions ([`call::call`], [`call::async_call`],
//!   [`call::wait`]) over zero-copy [`call::ArgBuf`]s;
//! - [`kv`]: the kernel's key-value store, for state that outlives an invocation;
//! - [`process`]: μprocesses: the [`program!`] macro, `fork`, `waitpid`, `exit`, `getpid`;
//! - [`heap`]: the global allocator of function modules (`alloc` works in functions);
//! - [`text`]: formatting and parsing on fixed buffers, for code that avoids the heap.
//!
//! Cargo features: none.
#![no_std]

extern crate alloc;

pub mod abi;
pub mod call;
pub mod function;
pub mod heap;
pub mod kv;
#[cfg(target_arch = "x86_64")]
pub mod net;
#[cfg(target_arch = "x86_64")]
pub mod privlib;
#[cfg(target_arch = "x86_64")]
pub mod process;
pub mod rand;
#[cfg(target_arch = "x86_64")]
pub mod syscall;
pub mod text;
