//! `cargo xtask`: Fjord's host tool. The work is done by the `xtask` library next to this file.

use std::process::ExitCode;

fn main() -> ExitCode {
    xtask::cli::main()
}
