//! Children that sleep until they are killed: how `forktest`'s fork bomb and `forkoom` fill the
//! process table or memory, and how they end them.

use alloc::vec::Vec;
use fjord_libos::abi::Error;
use fjord_libos::process::{self, ANY_CHILD, ExitStatus};

/// Forks children that sleep a minute until `fork` fails: the children and the failure
/// (`None` for an error code the library does not know), or `None` when more than `limit`
/// forks succeeded.
pub fn fork_until_refused(limit: usize) -> Option<(Vec<u64>, Option<Error>)> {
    let mut kids = Vec::new();
    loop {
        match process::fork() {
            Ok(0) => {
                process::sleep(60_000_000_000);
                process::exit(0);
            }
            Ok(pid) => kids.push(pid),
            Err(e) => return Some((kids, e)),
        }
        if kids.len() > limit {
            return None;
        }
    }
}

/// Why [`kill_and_reap`] failed.
pub enum NotReaped {
    /// `kill` refused a child.
    KillRefused,
    /// A child ended otherwise than killed by signal 9.
    OtherEnd,
}

/// Kills each of `kids` with signal 9 and reaps as many children.
pub fn kill_and_reap(kids: &[u64]) -> Result<(), NotReaped> {
    for &k in kids {
        process::kill(k, 9).map_err(|_| NotReaped::KillRefused)?;
    }
    for _ in kids {
        match process::waitpid(ANY_CHILD, 0) {
            Ok(Some((_, ExitStatus::Killed(9)))) => {}
            _ => return Err(NotReaped::OtherEnd),
        }
    }
    Ok(())
}
