//! The SDK Fjord functions link against.
//!
//! - [`abi`]: the system-call numbers and error codes shared by the kernel and user code;
//! - [`syscall`]: raw `syscall` wrappers for ring-3 code (x86_64 only);
//! - [`privlib`]: the Jord PrivLib calls (`mmap`, `pmove`, `ccall`, ...) for function code;
//! - [`function`]: the function entry ABI, the [`function!`] macro, ArgBuf views and
//!   [`function::FnError`].
//!
//! Cargo features: none.
#![no_std]

pub mod abi;
pub mod function;
#[cfg(target_arch = "x86_64")]
pub mod privlib;
#[cfg(target_arch = "x86_64")]
pub mod syscall;
