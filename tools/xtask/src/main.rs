//! `cargo xtask`: Fjord's host tool. The work is done by the `xtask` library next to this file.

#![forbid(unsafe_code)]

use std::process::ExitCode;

fn main() -> ExitCode {
    xtask::cli::main()
}
