//! The console logger behind the `log` crate's macros: `[LEVEL cpuN] message` on the serial port.

use crate::arch::{percpu, serial};
use fjord_kernel::cmdline::LogLevel;
use log::{Level, LevelFilter, Log, Metadata, Record};

struct SerialLogger;

impl Log for SerialLogger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &Record<'_>) {
        if self.enabled(record.metadata()) {
            let tag = match record.level() {
                Level::Error => "ERROR",
                Level::Warn => " WARN",
                Level::Info => " INFO",
                Level::Debug => "DEBUG",
                Level::Trace => "TRACE",
            };
            serial::write_fmt(format_args!(
                "[{tag} cpu{}] {}\n",
                percpu::cpu_index(),
                record.args()
            ));
        }
    }

    fn flush(&self) {}
}

static LOGGER: SerialLogger = SerialLogger;

/// Installs the logger at `level`.
pub fn init(level: LogLevel) {
    let _ = log::set_logger(&LOGGER);
    set_level(level);
}

/// Changes the log level.
pub fn set_level(level: LogLevel) {
    log::set_max_level(match level {
        LogLevel::Error => LevelFilter::Error,
        LogLevel::Warn => LevelFilter::Warn,
        LogLevel::Info => LevelFilter::Info,
        LogLevel::Debug => LevelFilter::Debug,
        LogLevel::Trace => LevelFilter::Trace,
    });
}
