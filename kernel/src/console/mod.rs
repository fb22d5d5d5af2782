//! The console: `kprintln!`, unconditional output (the banner, test and benchmark lines), and
//! the [`logger`] behind the `log` crate's macros, both on the serial line.

pub mod logger;

/// Prints a line on the serial console regardless of the log level.
#[macro_export]
macro_rules! kprintln {
    () => { $crate::arch::serial::write_fmt(format_args!("\n")) };
    ($($arg:tt)*) => {
        $crate::arch::serial::write_fmt(format_args!("{}\n", format_args!($($arg)*)))
    };
}
