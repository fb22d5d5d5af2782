//! `kprintln!`: unconditional console output (the banner, test and benchmark lines).

/// Prints a line on the serial console regardless of the log level.
#[macro_export]
macro_rules! kprintln {
    () => { $crate::arch::serial::write_fmt(format_args!("\n")) };
    ($($arg:tt)*) => {
        $crate::arch::serial::write_fmt(format_args!("{}\n", format_args!($($arg)*)))
    };
}
