//! The function runtime: invoking deployed functions in their instances, requests as tasks
//! that call other functions, and the gateway's service.
//!
//! - [`invoke`]: the Jord invocation sequence (`cget`, ArgBuf `pmove`, `ccall`, `pmove` back,
//!   `cput`) and its typed failures;
//! - [`task`]: requests as tasks that call other functions (`async_call`/`wait`), suspend and
//!   resume through the orchestrator's internal queue;
//! - [`service`]: what the HTTP gateway calls (deploy, invoke, processes).
//!
//! The deployed modules and their instances are `crate::module`'s; what happens to an instance
//! between requests is Groundhog's (`crate::groundhog`). The function entry ABI is defined in
//! [`fjord_libos::function`].

pub mod invoke;
pub mod metrics;
pub mod service;
pub mod task;

use crate::kprintln;
use crate::module::warm;

pub use crate::module::{
    LoadedFunction, deploy, deploy_with, groundhog_mode_of, list, load_initrd, loaded, lookup,
    module_file, remove,
};
pub use invoke::{InvokeFailure, invoke};

/// Starts the runtime: installs the warm instances' restores as the executors' background
/// work and, with `modules=initrd`, deploys the function modules of `initrd` (the boot
/// module's bytes, when there is one).
pub fn boot(initrd: Option<&[u8]>, opts: &fjord_kernel::cmdline::BootOptions<'_>) {
    crate::orchestrator::set_background_work(crate::orchestrator::BackgroundWork {
        waiting: warm::deferred,
        wait_for_quiet: warm::wait_for_quiet,
        run_one: || {
            let _ = warm::run_one_deferred();
        },
        after_response: warm::after_response,
    });
    if opts.modules != fjord_kernel::cmdline::ModuleSource::Initrd {
        return;
    }
    let Some(bytes) = initrd else {
        return;
    };
    let (ok, failed) = load_initrd(bytes);
    kprintln!("fjord: {ok} function modules deployed from the initrd, {failed} rejected");
}
