//! The `forkoom` program: forks until memory runs out. Each child holds its 24 MiB area and
//! sleeps; the `fork` that finds no memory for another must fail with `NoMemory`, the parent
//! must go on (its own memory intact: a list it built before checks out), and every child is
//! then killed and reaped. Exit code 0 means all of that held; the in-kernel test also checks
//! that every frame and PD came back.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
extern crate alloc;

#[cfg(target_os = "none")]
#[path = "../sleepers.rs"]
mod sleepers;

#[cfg(target_os = "none")]
mod program {
    use crate::sleepers::{NotReaped, fork_until_refused, kill_and_reap};
    use alloc::vec::Vec;
    use fjord_libos::abi::Error;
    use fjord_libos::process::{self, ExitStatus};

    pub fn main() -> u8 {
        let list: Vec<u64> = (0..1000).collect();
        let Some((kids, refused)) = fork_until_refused(200) else {
            return 1;
        };
        if refused != Some(Error::NoMemory) {
            return 2;
        }
        if kids.is_empty() || list.iter().sum::<u64>() != 999 * 1000 / 2 {
            return 3;
        }
        match kill_and_reap(&kids) {
            Ok(()) => {}
            Err(NotReaped::KillRefused) => return 4,
            Err(NotReaped::OtherEnd) => return 5,
        }
        // Memory is back: a fork works again.
        match process::fork() {
            Ok(0) => process::exit(0),
            Ok(pid) => match process::waitpid(pid, 0) {
                Ok(Some((_, ExitStatus::Exited(0)))) => 0,
                _ => 6,
            },
            Err(_) => 7,
        }
    }
}

#[cfg(target_os = "none")]
fjord_libos::program!(
    program::main,
    name = "forkoom",
    stack_size = "16K",
    heap_size = "24M"
);

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!("forkoom is a Fjord program: the in-kernel tests run it");
}
