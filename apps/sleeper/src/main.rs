//! The `sleeper` program: prints its PID, sleeps a minute (taking no CPU), then exits with 0.
//! The process API's tests start it, list it and kill it.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
mod program {
    use fjord_libos::process;

    pub fn main() -> u8 {
        let mut line = fjord_libos::function::StackText::<64>::new();
        let _ = core::fmt::Write::write_fmt(
            &mut line,
            format_args!("sleeper: μprocess {} sleeps", process::getpid()),
        );
        process::print(line.as_str());
        process::sleep(60_000_000_000);
        0
    }
}

#[cfg(target_os = "none")]
fjord_libos::program!(
    program::main,
    name = "sleeper",
    stack_size = "16K",
    heap_size = "16K"
);

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!("sleeper is a Fjord program: start it with POST /processes/sleeper");
}
