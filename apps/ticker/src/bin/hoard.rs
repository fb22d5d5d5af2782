//! The `hoard` program: fills 32 MiB of its heap with a pattern (no page zero), in 32 vectors
//! of 1 MiB, says
//! `hoard: μprocess P holds N pages`, then sleeps. Its checkpoint takes long enough to be
//! interrupted: the cluster tests kill its node in the middle of one.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
extern crate alloc;

#[cfg(target_os = "none")]
mod program {
    use alloc::vec::Vec;
    use fjord_libos::process;

    const VECTORS: usize = 32;
    const WORDS: usize = 1 << 17;

    pub fn main() -> u8 {
        let held: Vec<Vec<u64>> = (0..VECTORS)
            .map(|v| (0..WORDS as u64).map(|w| (w << 8) | v as u64 | 1).collect())
            .collect();
        let mut line = fjord_libos::function::StackText::<80>::new();
        let _ = core::fmt::Write::write_fmt(
            &mut line,
            format_args!(
                "hoard: μprocess {} holds {} pages",
                process::getpid(),
                VECTORS * WORDS / 512
            ),
        );
        process::print(line.as_str());
        loop {
            process::sleep(1_000_000_000);
            if held.iter().any(|v| v[WORDS / 2] & 1 == 0) {
                return 1;
            }
        }
    }
}

#[cfg(target_os = "none")]
fjord_libos::program!(
    program::main,
    name = "hoard",
    stack_size = "16K",
    heap_size = "40M"
);

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!("hoard is a Fjord program: start it with POST /processes/hoard");
}
