//! μprocesses: programs with a `main` that run until they exit, and the POSIX-style calls they
//! make (`fork`, `waitpid`, `exit`, `getpid`, `getppid`, `sched_yield`).
//!
//! A program is built like a function (a static PIE module for `x86_64-unknown-none`) but
//! declared with [`program!`](crate::program!): the kernel starts it in a protection domain of
//! its own with one area holding its stack and heap, and time-slices it on the executor CPUs.
//! `fork` makes a child at another address of the same address space: the kernel copies the
//! area and relocates the pointers into it (see the `ufork` crate), so the child goes on as
//! the parent would, with its own memory.

use crate::abi::{Error, Sysno};
use crate::syscall::{syscall3, syscall4};

/// `waitpid` option: return at once (0) when no child has ended yet.
pub const WNOHANG: u64 = 1;

/// Waits for any child.
pub const ANY_CHILD: u64 = u64::MAX;

/// How a child ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    /// It called `exit` with this code (0–255).
    Exited(u8),
    /// It was killed: a fault (signal 11, SIGSEGV) or `kill` (the signal).
    Killed(u8),
}

impl ExitStatus {
    /// Decodes a POSIX status word (`WIFEXITED`/`WEXITSTATUS`, `WTERMSIG`).
    pub fn from_word(word: u32) -> ExitStatus {
        if word & 0x7f == 0 {
            ExitStatus::Exited(((word >> 8) & 0xff) as u8)
        } else {
            ExitStatus::Killed((word & 0x7f) as u8)
        }
    }
}

/// How `fork` gives the child its memory (μFork's copy modes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForkMode {
    /// Copy (and relocate) every page the parent holds during `fork`.
    Full = 0,
    /// Share pages read-only, copy on the first write, never relocate: the child reads the
    /// parent's pointers as they are. Refused unless the μprocess runs with isolation off.
    CopyOnWrite = 1,
    /// Copy and relocate each page on the child's first access to it.
    CopyOnAccess = 2,
    /// Copy and relocate pages holding pointers on first access; share the others read-only
    /// until written (the default).
    CopyOnPointerAccess = 3,
}

/// How strongly the calling μprocess is isolated (μFork's levels).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isolation {
    /// None: trusted programs; copy-on-write `fork` is allowed.
    None,
    /// Non-adversarial: memory isolation and argument checks.
    NonAdversarial,
    /// Full: also copies every system-call buffer in and out.
    Full,
}

/// The calling μprocess's isolation level.
pub fn isolation() -> Isolation {
    match syscall3(Sysno::Isolation, 0, 0, 0) {
        Ok(0) => Isolation::None,
        Ok(1) => Isolation::NonAdversarial,
        _ => Isolation::Full,
    }
}

/// Creates a child μprocess with the caller's default copy mode (see [`set_fork_mode`]);
/// returns its PID in the parent and 0 in the child.
pub fn fork() -> Result<u64, Option<Error>> {
    syscall3(Sysno::Fork, 0, 0, 0)
}

/// [`fork`] with `mode` for this call only.
pub fn fork_with(mode: ForkMode) -> Result<u64, Option<Error>> {
    syscall3(Sysno::Fork, mode as u64 + 1, 0, 0)
}

/// Sets the copy mode of the caller's later [`fork`] calls; returns the previous one.
/// [`Error::AccessDenied`] for copy-on-write unless isolation is off.
pub fn set_fork_mode(mode: ForkMode) -> Result<u64, Option<Error>> {
    syscall3(Sysno::SetForkMode, mode as u64, 0, 0)
}

/// Starts the deployed program `name` as a child of the caller, with the caller's
/// descriptors (what `posix_spawn` does, the counterpart of `fork` + `exec`); returns its PID.
pub fn spawn(name: &str) -> Result<u64, Option<Error>> {
    syscall3(Sysno::Spawn, name.as_ptr() as u64, name.len() as u64, 0)
}

/// The bytes of free physical memory the kernel has (what `sysinfo`'s `freeram` says on
/// Linux).
pub fn free_memory() -> u64 {
    syscall3(Sysno::MemInfo, 0, 0, 0).unwrap_or(0)
}

/// The bytes copied into the caller's memory since it was forked (pages copied from its parent
/// on its access or its parent's write): what its fork added, the counterpart of Linux's
/// private dirty memory of a forked child (Redis's `rdb_last_cow_size`). 0 for a μprocess that
/// was not forked lazily.
pub fn copied_memory() -> u64 {
    syscall3(Sysno::MemInfo, 1, 0, 0).unwrap_or(0)
}

/// The most memory the caller's area has held in frames of its own at once since the
/// μprocess started, in bytes: for a forked child, what its fork added at its peak (the pages
/// copied from its parent and those it wrote itself; not the pages it reads from its parent's
/// frames), Linux's private dirty memory of a forked child as a high-water mark.
pub fn peak_private_memory() -> u64 {
    syscall3(Sysno::MemInfo, 2, 0, 0).unwrap_or(0)
}

/// The memory the caller's area holds in frames of its own now, in bytes (for a forked
/// child, what its fork adds at this moment: Linux's private dirty memory of the child).
pub fn private_memory() -> u64 {
    syscall3(Sysno::MemInfo, 3, 0, 0).unwrap_or(0)
}

/// Gives back the memory of the whole pages inside `buf` (Linux's `madvise(MADV_DONTNEED)`
/// on private memory): they read as zero from now on and cost a frame again only when next
/// used. A forked child that is done with a page it still shares with its parent (Redis's
/// child after saving a large value) spares the parent's later write a copy; the bytes of
/// `buf` outside whole pages are left as they are. Returns the number of frames given back.
pub fn discard(buf: &mut [u8]) -> Result<u64, Option<Error>> {
    discard_all(&mut [buf])
}

/// [`discard`] for each of `bufs`, [`crate::abi::DISCARD_MAX`] of them per system call
/// (Linux's `process_madvise`); a buffer without a whole page makes no call.
pub fn discard_all(bufs: &mut [&mut [u8]]) -> Result<u64, Option<Error>> {
    let mut ranges = [[0u64; 2]; crate::abi::DISCARD_MAX];
    let (mut n, mut given) = (0, 0);
    for buf in bufs.iter_mut() {
        let start = (buf.as_ptr() as u64).next_multiple_of(4096);
        let end = (buf.as_ptr() as u64 + buf.len() as u64) & !4095;
        if end <= start {
            continue;
        }
        ranges[n] = [start, end - start];
        n += 1;
        if n == ranges.len() {
            given += syscall3(Sysno::Discard, ranges.as_ptr() as u64, n as u64, 0)?;
            n = 0;
        }
    }
    if n > 0 {
        given += syscall3(Sysno::Discard, ranges.as_ptr() as u64, n as u64, 0)?;
    }
    Ok(given)
}

/// Waits for the child `pid` (or any, [`ANY_CHILD`]) to end and reaps it: its PID and how it
/// ended; `None` with [`WNOHANG`] when none has ended yet.
pub fn waitpid(pid: u64, options: u64) -> Result<Option<(u64, ExitStatus)>, Option<Error>> {
    let r = syscall3(Sysno::Waitpid, pid, options, 0)?;
    if r == 0 {
        return Ok(None);
    }
    Ok(Some((r >> 32, ExitStatus::from_word(r as u32))))
}

/// The calling μprocess's PID.
pub fn getpid() -> u64 {
    syscall3(Sysno::Getpid, 0, 0, 0).unwrap_or(0)
}

/// The parent's PID.
pub fn getppid() -> u64 {
    syscall3(Sysno::Getppid, 0, 0, 0).unwrap_or(0)
}

/// Gives the rest of the time slice up.
pub fn sched_yield() {
    let _ = syscall3(Sysno::SchedYield, 0, 0, 0);
}

/// Ends the calling μprocess with `code` (0–255); does not return.
pub fn exit(code: u8) -> ! {
    crate::syscall::exit(u64::from(code))
}

/// A descriptor.
pub type Fd = u32;

/// `pipe()`: a new pipe's read and write descriptors.
pub fn pipe() -> Result<(Fd, Fd), Option<Error>> {
    let mut fds = [0u32; 2];
    syscall3(Sysno::Pipe, fds.as_mut_ptr() as u64, 0, 0)?;
    Ok((fds[0], fds[1]))
}

/// `read(fd, buf)`: how many bytes were read (0 at end of file); blocks on an empty pipe.
pub fn read(fd: Fd, buf: &mut [u8]) -> Result<usize, Option<Error>> {
    syscall3(
        Sysno::Read,
        u64::from(fd),
        buf.as_mut_ptr() as u64,
        buf.len() as u64,
    )
    .map(|n| n as usize)
}

/// `write(fd, data)`: how many bytes were written; blocks on a full pipe.
pub fn write(fd: Fd, data: &[u8]) -> Result<usize, Option<Error>> {
    syscall3(
        Sysno::Write,
        u64::from(fd),
        data.as_ptr() as u64,
        data.len() as u64,
    )
    .map(|n| n as usize)
}

/// `close(fd)`.
pub fn close(fd: Fd) -> Result<(), Option<Error>> {
    syscall3(Sysno::Close, u64::from(fd), 0, 0).map(drop)
}

/// How [`open`] opens a disk file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// For reading: the file's contents as they are now.
    Read = 0,
    /// For writing: created or emptied; what is written is saved, whole and atomically, at
    /// [`fsync`] or when the last descriptor closes.
    Write = 1,
}

/// `open(name, mode)`: a descriptor for the disk file `name` of the caller's namespace (1 to 32
/// bytes of letters, digits, `.`, `_`, `-`). [`Error::NotFound`] for a file to read that does
/// not exist, [`Error::InvalidArgs`] for a bad name.
pub fn open(name: &str, mode: OpenMode) -> Result<Fd, Option<Error>> {
    syscall3(
        Sysno::Open,
        name.as_ptr() as u64,
        name.len() as u64,
        mode as u64,
    )
    .map(|fd| fd as Fd)
}

/// `fsync(fd)`: saves the file open for writing on `fd` as written so far, replacing its
/// previous contents atomically, and returns once it is on the disk. Does nothing for other
/// descriptors.
pub fn fsync(fd: Fd) -> Result<(), Option<Error>> {
    syscall3(Sysno::Fsync, u64::from(fd), 0, 0).map(drop)
}

/// `rename(from, to)`: renames the disk file `from` to `to` atomically, replacing `to`.
pub fn rename(from: &str, to: &str) -> Result<(), Option<Error>> {
    let mut names = [0u8; 64];
    let (f, t) = (from.as_bytes(), to.as_bytes());
    if f.len() + t.len() > names.len() {
        return Err(Some(Error::InvalidArgs));
    }
    names[..f.len()].copy_from_slice(f);
    names[f.len()..f.len() + t.len()].copy_from_slice(t);
    syscall3(
        Sysno::Rename,
        names.as_ptr() as u64,
        f.len() as u64,
        t.len() as u64,
    )
    .map(drop)
}

/// `unlink(name)`: removes the disk file `name`.
pub fn unlink(name: &str) -> Result<(), Option<Error>> {
    syscall3(Sysno::Unlink, name.as_ptr() as u64, name.len() as u64, 0).map(drop)
}

/// `dup2(old, new)`: `new` names what `old` names.
pub fn dup2(old: Fd, new: Fd) -> Result<Fd, Option<Error>> {
    syscall3(Sysno::Dup2, u64::from(old), u64::from(new), 0).map(|fd| fd as Fd)
}

/// `kill(pid, signal)`.
pub fn kill(pid: u64, signal: u64) -> Result<(), Option<Error>> {
    syscall3(Sysno::Kill, pid, signal, 0).map(drop)
}

/// `sleep`: blocks for at least `nanoseconds`.
pub fn sleep(nanoseconds: u64) {
    let _ = syscall3(Sysno::Sleep, nanoseconds, 0, 0);
}

/// Which clock [`clock_ns`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    /// Time since boot, never going back.
    Monotonic = 0,
    /// Time since the Unix epoch (1970-01-01 UTC), from the real-time clock read at boot.
    Realtime = 1,
}

/// `clock(which)`: the time in nanoseconds.
pub fn clock_ns(which: Clock) -> u64 {
    syscall3(Sysno::Clock, which as u64, 0, 0).unwrap_or(0)
}

/// Fills `buf` with random bytes from the kernel (`getrandom`, as many calls as it takes): for
/// keys, seeds and anything a client must not predict.
pub fn getrandom(buf: &mut [u8]) -> Result<(), Option<Error>> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        let n = syscall3(
            Sysno::GetRandom,
            rest.as_mut_ptr() as u64,
            rest.len() as u64,
            0,
        )?;
        if n == 0 {
            return Err(Some(Error::InvalidArgs));
        }
        done += n as usize;
    }
    Ok(())
}

/// Writes `msg` to the kernel console (one line).
pub fn print(msg: &str) {
    let _ = syscall4(Sysno::Log, msg.as_ptr() as u64, msg.len() as u64, 0, 0);
}

/// One page of memory a μprocess mapped (see [`map`]).
#[derive(Clone)]
#[repr(C, align(4096))]
pub struct Page(pub [u8; 4096]);

/// Page-aligned, zeroed memory a μprocess mapped with [`map`]: it lies in the μprocess's area
/// (it comes from its heap), so a child forked later gets its own copy of it as of the fork,
/// like the rest of the heap. Dropping it gives the pages back to the heap.
pub struct Mapping(alloc::vec::Vec<Page>);

impl Mapping {
    /// The address of its first byte (page-aligned).
    pub fn address(&self) -> u64 {
        self.0.as_ptr() as u64
    }

    /// Its pages.
    pub fn pages(&self) -> &[Page] {
        &self.0
    }

    /// Its pages, to write.
    pub fn pages_mut(&mut self) -> &mut [Page] {
        &mut self.0
    }

    /// All its bytes, to write (or to [`discard`]).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        let len = self.0.len() * core::mem::size_of::<Page>();
        // SAFETY: a `Page` is exactly 4096 bytes with no padding (`repr(C)` over one byte
        // array), the `Vec`'s pages are contiguous and initialised, and the slice borrows
        // `self` exclusively for its lifetime.
        unsafe { core::slice::from_raw_parts_mut(self.0.as_mut_ptr().cast::<u8>(), len) }
    }
}

/// Maps `pages` zeroed pages for a μprocess, in its area: `None` when its heap has no room. A
/// μprocess has no other way to map memory: everything it can point to is in its area, and the
/// kernel's `mmap` ([`crate::privlib::mmap`]) refuses it with `AccessDenied`.
pub fn map(pages: usize) -> Option<Mapping> {
    let mut v = alloc::vec::Vec::new();
    v.try_reserve_exact(pages).ok()?;
    v.resize(pages, Page([0; 4096]));
    Some(Mapping(v))
}

/// Declares the crate a Fjord program whose `main` (a `fn() -> u8`, the exit code) runs when
/// the kernel starts it.
///
/// ```ignore
/// #![cfg_attr(target_os = "none", no_std, no_main)]
/// fn main() -> u8 { fjord_libos::process::print("hi"); 0 }
/// fjord_libos::program!(main, name = "hi", stack_size = "64K", heap_size = "256K");
/// ```
///
/// It emits the `.fjord_manifest` section (with `kind=program`), the `_start` stub (the stack
/// below the heap header under the memory boundary in `rcx`, as for functions), the heap
/// allocator and a panic handler that logs the message and exits with code 101.
#[macro_export]
macro_rules! program {
    ($main:path, name = $name:literal $(, $key:ident = $value:literal)* $(,)?) => {
        #[cfg(target_os = "none")]
        const _: () = {
            const TEXT: &str =
                $crate::manifest_text!(name = $name, kind = "program" $(, $key = $value)*);

            #[unsafe(link_section = ".fjord_manifest")]
            #[used]
            static MANIFEST: [u8; TEXT.len()] = $crate::function::manifest_bytes(TEXT);

            extern "C" fn fjord_program_main() -> ! {
                let main: fn() -> u8 = $main;
                $crate::process::exit(main())
            }

            $crate::__entry!(fjord_program_main);

            #[panic_handler]
            fn panic(info: &::core::panic::PanicInfo<'_>) -> ! {
                use ::core::fmt::Write;
                let mut text = $crate::function::StackText::<256>::new();
                let _ = write!(text, "program panicked: {info}");
                $crate::process::print(text.as_str());
                $crate::process::exit(101)
            }
        };

        #[cfg(not(target_os = "none"))]
        fn main() {
            ::std::eprintln!("{} is a Fjord program: run it with `cargo xtask run`", $name);
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_words_decode_as_posix_does() {
        assert_eq!(ExitStatus::from_word(0), ExitStatus::Exited(0));
        assert_eq!(ExitStatus::from_word(42 << 8), ExitStatus::Exited(42));
        assert_eq!(ExitStatus::from_word(11), ExitStatus::Killed(11));
        assert_eq!(ExitStatus::from_word(9), ExitStatus::Killed(9));
    }
}
