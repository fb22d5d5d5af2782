//! The AFL++ harness: runs the host fuzz target named by `$FJORD_FUZZ_TARGET` (`http`, `elf`,
//! `manifest`) on each input AFL++ hands it, and panics (which AFL++ records as a crash) when
//! the target's check fails. `cargo xtask fuzz <target> --afl` builds and runs it.
#![forbid(unsafe_code)]

fn main() {
    let name = std::env::var("FJORD_FUZZ_TARGET").unwrap_or_default();
    let Some(target) = fjord_fuzz::targets::find(&name) else {
        eprintln!("fjord-fuzz-afl: FJORD_FUZZ_TARGET names no target: {name:?}");
        std::process::exit(2);
    };
    afl::fuzz!(|data: &[u8]| {
        if let Err(violation) = (target.check)(data) {
            panic!("{}", violation.0);
        }
    });
}
