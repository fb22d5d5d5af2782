//! `getrandom`: bytes from the kernel's generator, different on every call, as many as asked
//! (a request over [`GETRANDOM_MAX`] is served in several calls); bad buffers get error
//! codes; and a forked child's bytes land in its own copy of a page it shared with its parent.

use fjord_libos::abi::{Error, GETRANDOM_MAX, Sysno};
use fjord_libos::process::{self, ExitStatus};
use fjord_libos::syscall::syscall3;

/// Whether `a` looks like random bytes: at most a few zero bytes (a uniform byte is zero one
/// time in 256) and not all equal.
fn looks_random(a: &[u8]) -> bool {
    let zeros = a.iter().filter(|&&b| b == 0).count();
    zeros <= a.len() / 64 + 4 && a.iter().any(|&b| b != a[0])
}

/// Runs the checks; `Err` carries the exit code (150 to 159).
pub fn random_bytes() -> Result<(), u8> {
    let (mut a, mut b) = ([0u8; 64], [0u8; 64]);
    process::getrandom(&mut a).map_err(|_| 150)?;
    process::getrandom(&mut b).map_err(|_| 150)?;
    if !looks_random(&a) || !looks_random(&b) || a == b {
        return Err(151);
    }
    // More than one call serves: every byte is filled.
    let mut big = alloc::vec![0u8; 3 * GETRANDOM_MAX as usize + 100];
    process::getrandom(&mut big).map_err(|_| 152)?;
    if !looks_random(&big) || !looks_random(&big[big.len() - 64..]) {
        return Err(153);
    }
    // One call writes at most GETRANDOM_MAX, and says so; none, or a buffer outside the
    // area, is an error or nothing.
    if syscall3(
        Sysno::GetRandom,
        big.as_mut_ptr() as u64,
        big.len() as u64,
        0,
    ) != Ok(GETRANDOM_MAX)
    {
        return Err(154);
    }
    if syscall3(Sysno::GetRandom, big.as_mut_ptr() as u64, 0, 0) != Ok(0) {
        return Err(155);
    }
    if syscall3(Sysno::GetRandom, 0x1000, 16, 0) != Err(Some(Error::BadAddress)) {
        return Err(156);
    }
    // After fork, the child's bytes go to its own copy of the page; the parent's stays.
    let mut m = process::map(1).ok_or(157)?;
    m.bytes_mut().fill(0x5a);
    match process::fork() {
        Ok(0) => {
            let page = m.bytes_mut();
            let ok = process::getrandom(&mut page[..256]).is_ok()
                && looks_random(&page[..256])
                && page[256..].iter().all(|&x| x == 0x5a);
            process::exit(if ok { 0 } else { 1 });
        }
        Ok(child) => match process::waitpid(child, 0) {
            Ok(Some((_, ExitStatus::Exited(0)))) => {}
            _ => return Err(158),
        },
        Err(_) => return Err(157),
    }
    if !m.bytes_mut().iter().all(|&x| x == 0x5a) {
        return Err(159);
    }
    Ok(())
}
