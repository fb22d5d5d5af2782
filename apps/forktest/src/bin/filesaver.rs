//! The `filesaver` program: saves `dump.dat` over and over the crash-safe way (`save.tmp`,
//! `fsync`, `rename`), 1 MiB each round, round `r` holding the bytes `(i % 251) ^ r`, and prints
//! `filesaver: saved round r` after each rename. The end-to-end test kills the VM while it saves
//! and then checks, from the host, that the file on the disk is one whole round.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
extern crate alloc;

#[cfg(target_os = "none")]
mod program {
    use alloc::vec::Vec;
    use core::fmt::Write;
    use fjord_libos::function::StackText;
    use fjord_libos::process::{self, OpenMode};

    /// Bytes per round.
    pub const BYTES: u32 = 1 << 20;

    fn save(round: u8) -> bool {
        let data: Vec<u8> = (0..BYTES).map(|i| (i % 251) as u8 ^ round).collect();
        let Ok(fd) = process::open("save.tmp", OpenMode::Write) else {
            return false;
        };
        let written = data
            .chunks(64 * 1024)
            .all(|c| process::write(fd, c) == Ok(c.len()));
        written
            && process::fsync(fd).is_ok()
            && process::close(fd).is_ok()
            && process::rename("save.tmp", "dump.dat").is_ok()
    }

    pub fn main() -> u8 {
        for round in 1..=u8::MAX {
            if !save(round) {
                return 1;
            }
            let mut line = StackText::<64>::new();
            let _ = write!(line, "filesaver: saved round {round}");
            process::print(line.as_str());
        }
        0
    }
}

#[cfg(target_os = "none")]
fjord_libos::program!(
    program::main,
    name = "filesaver",
    stack_size = "32K",
    heap_size = "4M"
);

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!("filesaver is a Fjord program: the end-to-end tests run it");
}
