//! The `filetest` program: disk files as a μprocess uses them. It writes, syncs and reads back a
//! file; saves another the crash-safe way (a temporary name, `fsync`, `rename` over the old
//! one) twice; streams one of 1 MiB, writes to it after an `fsync`, and reads it back (in
//! pieces) while it is replaced and removed; shares a file open for writing with a forked
//! child; checks the errors of bad names, missing files and wrong directions; removes its
//! scratch file; and leaves `dump.dat` (100,000 bytes of a known pattern) for the host to read. Exit code 0 when every check held,
//! the number of the first that failed otherwise.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
extern crate alloc;

#[cfg(target_os = "none")]
mod program {
    use alloc::vec;
    use alloc::vec::Vec;
    use fjord_libos::abi::Error;
    use fjord_libos::process::{self, ExitStatus, OpenMode};

    /// The pattern `dump.dat` holds after save number `round`.
    fn pattern(round: u8) -> Vec<u8> {
        (0..100_000u32).map(|i| (i % 251) as u8 ^ round).collect()
    }

    fn read_all(name: &str) -> Result<Vec<u8>, Option<Error>> {
        let fd = process::open(name, OpenMode::Read)?;
        let mut out = Vec::new();
        let mut buf = vec![0u8; 7000];
        loop {
            let n = process::read(fd, &mut buf)?;
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
        process::close(fd)?;
        Ok(out)
    }

    /// Saves `data` as `name` the way Redis saves its RDB file.
    fn save(name: &str, data: &[u8]) -> Result<(), Option<Error>> {
        let fd = process::open("save.tmp", OpenMode::Write)?;
        for chunk in data.chunks(30_000) {
            process::write(fd, chunk)?;
        }
        process::fsync(fd)?;
        process::close(fd)?;
        process::rename("save.tmp", name)
    }

    fn check(ok: bool, code: u8) -> Result<(), u8> {
        if ok { Ok(()) } else { Err(code) }
    }

    fn run() -> Result<(), u8> {
        // Written, synced, read back.
        let fd = process::open("notes.txt", OpenMode::Write).map_err(|_| 1)?;
        check(process::write(fd, b"hello ") == Ok(6), 2)?;
        check(process::write(fd, b"disk") == Ok(4), 3)?;
        check(process::fsync(fd).is_ok(), 4)?;
        // Reading needs a descriptor opened for reading.
        check(
            process::read(fd, &mut [0u8; 4]) == Err(Some(Error::BadFd)),
            5,
        )?;
        check(process::close(fd).is_ok(), 6)?;
        check(read_all("notes.txt").as_deref() == Ok(b"hello disk"), 7)?;
        // Saved twice over the same name: each time the whole new contents, no temporary left.
        for round in 1..=2 {
            check(save("dump.dat", &pattern(round)).is_ok(), 10 + round)?;
            check(read_all("dump.dat") == Ok(pattern(round)), 20 + round)?;
            check(
                read_all("save.tmp") == Err(Some(Error::NotFound)),
                30 + round,
            )?;
        }
        // A file of 1 MiB streams to the disk as it is written (the kernel keeps 256 KiB at
        // most); written to after an `fsync`, it is saved again whole at its last close.
        let big: Vec<u8> = (0..1_048_576u32).map(|i| (i % 253) as u8).collect();
        let fd = process::open("stream.dat", OpenMode::Write).map_err(|_| 70)?;
        for chunk in big.chunks(7000) {
            check(process::write(fd, chunk) == Ok(chunk.len()), 71)?;
        }
        check(process::fsync(fd).is_ok(), 72)?;
        check(read_all("stream.dat") == Ok(big.clone()), 73)?;
        check(process::write(fd, b"tail") == Ok(4), 74)?;
        check(process::close(fd).is_ok(), 75)?;
        let mut whole = big;
        whole.extend_from_slice(b"tail");
        check(read_all("stream.dat") == Ok(whole.clone()), 76)?;
        // A reader keeps the version it opened (read a piece at a time) while the file is
        // replaced and removed; a new reader sees the new contents.
        let fd = process::open("stream.dat", OpenMode::Read).map_err(|_| 78)?;
        let mut seen = vec![0u8; 100];
        check(process::read(fd, &mut seen) == Ok(100), 79)?;
        check(save("stream.dat", b"replaced").is_ok(), 80)?;
        check(read_all("stream.dat").as_deref() == Ok(b"replaced"), 81)?;
        check(process::unlink("stream.dat").is_ok(), 77)?;
        let mut buf = vec![0u8; 50_000];
        loop {
            match process::read(fd, &mut buf) {
                Ok(0) => break,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
                Err(_) => return Err(82),
            }
        }
        check(seen == whole, 83)?;
        check(process::close(fd).is_ok(), 84)?;
        // A descriptor open for writing, shared with a forked child: both writes land.
        let fd = process::open("shared.log", OpenMode::Write).map_err(|_| 40)?;
        match process::fork() {
            Ok(0) => {
                let ok = process::write(fd, b"child\n") == Ok(6);
                process::exit(if ok { 0 } else { 1 })
            }
            Ok(child) => {
                check(
                    matches!(
                        process::waitpid(child, 0),
                        Ok(Some((_, ExitStatus::Exited(0))))
                    ),
                    41,
                )?;
                check(process::write(fd, b"parent\n") == Ok(7), 42)?;
                check(process::close(fd).is_ok(), 43)?;
                check(
                    read_all("shared.log").as_deref() == Ok(b"child\nparent\n"),
                    44,
                )?;
            }
            Err(_) => return Err(45),
        }
        // Errors: bad names, a missing file, a file opened for reading written to, bad flags.
        for bad in [
            "",
            "../etc",
            "a/b",
            ".",
            "this-name-is-longer-than-32-bytes",
        ] {
            check(
                process::open(bad, OpenMode::Write) == Err(Some(Error::InvalidArgs)),
                50,
            )?;
        }
        check(
            process::open("missing", OpenMode::Read) == Err(Some(Error::NotFound)),
            51,
        )?;
        check(process::unlink("missing") == Err(Some(Error::NotFound)), 52)?;
        check(
            process::rename("missing", "x") == Err(Some(Error::NotFound)),
            53,
        )?;
        let fd = process::open("notes.txt", OpenMode::Read).map_err(|_| 54)?;
        check(process::write(fd, b"x") == Err(Some(Error::BadFd)), 55)?;
        check(process::close(fd).is_ok(), 56)?;
        // Removed files are gone.
        for name in ["notes.txt", "shared.log"] {
            check(process::unlink(name).is_ok(), 60)?;
            check(read_all(name) == Err(Some(Error::NotFound)), 61)?;
        }
        Ok(())
    }

    pub fn main() -> u8 {
        match run() {
            Ok(()) => {
                process::print("filetest: files written, saved, renamed, shared and removed");
                0
            }
            Err(code) => code,
        }
    }
}

#[cfg(target_os = "none")]
fjord_libos::program!(
    program::main,
    name = "filetest",
    stack_size = "32K",
    heap_size = "16M"
);

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!("filetest is a Fjord program: the in-kernel tests run it");
}
