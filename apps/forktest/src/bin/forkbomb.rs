//! The `forkbomb` program: forks children that sleep until `fork` is refused, which must happen
//! at its own bound (`max_processes`, 64 by default: itself and 63 children) with
//! `LimitReached`, long before the kernel's process table (256) is full. It then prints how many
//! children it holds and sleeps, holding them, until it is killed: the in-kernel test starts
//! other programs meanwhile, and their starts must succeed.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
extern crate alloc;

// Shared with forktest and forkoom; this program does not kill its children itself.
#[cfg(target_os = "none")]
#[path = "../sleepers.rs"]
#[allow(dead_code)]
mod sleepers;

#[cfg(target_os = "none")]
mod program {
    use crate::sleepers::fork_until_refused;
    use fjord_libos::abi::Error;
    use fjord_libos::process;

    pub fn main() -> u8 {
        let Some((kids, refused)) = fork_until_refused(255) else {
            return 1;
        };
        if refused != Some(Error::LimitReached) {
            return 2;
        }
        let mut line = fjord_libos::function::StackText::<64>::new();
        let _ = core::fmt::Write::write_fmt(
            &mut line,
            format_args!("forkbomb: holds {} children", kids.len()),
        );
        process::print(line.as_str());
        process::sleep(120_000_000_000);
        0
    }
}

#[cfg(target_os = "none")]
fjord_libos::program!(
    program::main,
    name = "forkbomb",
    stack_size = "16K",
    heap_size = "16K"
);

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!("forkbomb is a Fjord program: start it with POST /processes/forkbomb");
}
