//! A running QEMU: its serial output collected line by line in a thread, waiting for a line or for
//! the exit with a time limit, and how it ended. QEMU is killed on timeout and when dropped.

use std::fmt;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::qemu::{EXIT_FAILURE, EXIT_SUCCESS, QemuConfig};
use crate::serial_log;
use crate::workspace;

/// What QEMU prints on stderr when KVM stops the vCPU (it then pauses the guest and waits).
pub const KVM_STOPPED_LINE: &str = "KVM internal error";

/// How a QEMU run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QemuExit {
    /// Exit status 33: the kernel reported success through `isa-debug-exit`.
    Success,
    /// Exit status 35: the kernel reported failure through `isa-debug-exit`.
    Failure,
    /// Any other exit status: QEMU failed, the guest reset (status 0 with `-no-reboot`), or the
    /// kernel wrote an unknown value to the exit port.
    Code(i32),
    /// Killed by a signal that we did not send.
    Signal(i32),
    /// We killed it because it did not exit within the time limit.
    TimedOut(Duration),
    /// We killed it on purpose (the test had seen what it needed).
    Killed,
    /// KVM stopped the vCPU (`KVM internal error`, e.g. an instruction its emulator cannot
    /// run) and QEMU paused the guest; we killed it.
    KvmStopped,
}

impl QemuExit {
    /// Classifies a QEMU exit status.
    pub fn from_status(status: ExitStatus) -> QemuExit {
        use std::os::unix::process::ExitStatusExt;
        match (status.code(), status.signal()) {
            (Some(EXIT_SUCCESS), _) => QemuExit::Success,
            (Some(EXIT_FAILURE), _) => QemuExit::Failure,
            (Some(code), _) => QemuExit::Code(code),
            (None, Some(signal)) => QemuExit::Signal(signal),
            (None, None) => QemuExit::Code(-1),
        }
    }
}

impl fmt::Display for QemuExit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            QemuExit::Success => write!(f, "kernel reported success (QEMU exit {EXIT_SUCCESS})"),
            QemuExit::Failure => write!(f, "kernel reported failure (QEMU exit {EXIT_FAILURE})"),
            QemuExit::Code(0) => f.write_str(
                "QEMU exited with status 0 without the exit device: the guest reset \
                 (triple fault?) or powered off",
            ),
            QemuExit::Code(1) => f.write_str("QEMU exited with status 1: QEMU itself failed"),
            QemuExit::Code(code) if code > 1 && code % 2 == 1 => write!(
                f,
                "QEMU exit {code}: the kernel wrote {:#x} to isa-debug-exit, which is neither \
                 success (0x10) nor failure (0x11)",
                code >> 1
            ),
            QemuExit::Code(code) => write!(f, "QEMU crashed (exit status {code})"),
            QemuExit::Signal(signal) => write!(f, "QEMU was killed by signal {signal}"),
            QemuExit::TimedOut(limit) => {
                write!(f, "hang: no exit within {} s, QEMU killed", limit.as_secs())
            }
            QemuExit::Killed => f.write_str("QEMU stopped by xtask"),
            QemuExit::KvmStopped => f.write_str(
                "KVM stopped the guest (`KVM internal error` on QEMU's stderr), QEMU killed",
            ),
        }
    }
}

/// Why [`QemuRun::wait_for_line`] found no line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineWaitError {
    /// No matching line within the time limit.
    TimedOut(Duration),
    /// The serial output ended (QEMU exited) without a matching line.
    OutputEnded,
}

impl fmt::Display for LineWaitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LineWaitError::TimedOut(limit) => {
                write!(f, "no such line within {} s", limit.as_secs())
            }
            LineWaitError::OutputEnded => f.write_str("QEMU exited before printing such a line"),
        }
    }
}

impl std::error::Error for LineWaitError {}

/// The serial lines seen so far, shared with the reader thread.
#[derive(Default)]
struct SerialLog {
    /// Lines so far (escape sequences and `\r` removed).
    lines: Mutex<SerialLines>,
    /// Signalled on every new line and at the end of the output.
    changed: Condvar,
}

/// The state behind [`SerialLog::lines`].
#[derive(Default)]
struct SerialLines {
    /// Every complete line (and a final unterminated one).
    lines: Vec<String>,
    /// The output has ended.
    closed: bool,
}

/// A started QEMU (non-interactive configuration).
pub struct QemuRun {
    /// The QEMU process.
    child: Child,
    /// Serial output read by `serial_reader`.
    serial: Arc<SerialLog>,
    /// QEMU's own messages (stderr), read by `stderr_reader`.
    stderr: Arc<Mutex<String>>,
    /// Thread reading the serial output.
    serial_reader: Option<JoinHandle<()>>,
    /// Thread reading stderr.
    stderr_reader: Option<JoinHandle<()>>,
    /// QEMU printed [`KVM_STOPPED_LINE`]: the guest is paused for good.
    kvm_stopped: Arc<AtomicBool>,
    /// When QEMU was started.
    started: Instant,
    /// How it ended, once known.
    exit: Option<QemuExit>,
}

impl QemuRun {
    /// Starts QEMU. If `echo_prefix` is given, every serial line is also printed to stdout after
    /// that prefix.
    pub fn spawn(config: &QemuConfig, echo_prefix: Option<String>) -> Result<QemuRun> {
        let mut config = config.clone();
        config.interactive = false;
        QemuRun::start(config.command()?, echo_prefix)
    }

    /// Starts `command` (stdout and stderr piped) and the threads that read its output.
    fn start(mut command: Command, echo_prefix: Option<String>) -> Result<QemuRun> {
        let mut child = command.spawn().with_context(|| {
            format!("could not start `{}`", workspace::display_command(&command))
        })?;
        let started = Instant::now();
        let stdout = child.stdout.take().context("QEMU's stdout is not piped")?;
        let mut stderr_pipe = child.stderr.take().context("QEMU's stderr is not piped")?;

        let serial = Arc::new(SerialLog::default());
        let serial_reader = {
            let serial = Arc::clone(&serial);
            thread::spawn(move || read_serial(stdout, &serial, echo_prefix.as_deref()))
        };
        let stderr = Arc::new(Mutex::new(String::new()));
        let kvm_stopped = Arc::new(AtomicBool::new(false));
        let stderr_reader = {
            let stderr = Arc::clone(&stderr);
            let serial = Arc::clone(&serial);
            let kvm_stopped = Arc::clone(&kvm_stopped);
            thread::spawn(move || {
                let mut lines = BufReader::new(&mut stderr_pipe);
                let mut line = Vec::new();
                while matches!(lines.read_until(b'\n', &mut line), Ok(n) if n > 0) {
                    let text = String::from_utf8_lossy(&line).into_owned();
                    line.clear();
                    if text.contains(KVM_STOPPED_LINE) {
                        // QEMU pauses the guest and waits: end every wait on its output.
                        kvm_stopped.store(true, Ordering::Release);
                        let mut state = serial.lines.lock().unwrap_or_else(PoisonError::into_inner);
                        state.closed = true;
                        serial.changed.notify_all();
                    }
                    stderr
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push_str(&text);
                }
            })
        };
        Ok(QemuRun {
            child,
            serial,
            stderr,
            serial_reader: Some(serial_reader),
            stderr_reader: Some(stderr_reader),
            kvm_stopped,
            started,
            exit: None,
        })
    }

    /// Waits until some serial line (from the start of the output) satisfies `matches` and
    /// returns it, or fails after `limit` or when the output ends first. Each line is offered to
    /// `matches` once, in order. QEMU keeps running.
    pub fn wait_for_line(
        &self,
        matches: impl Fn(&str) -> bool,
        limit: Duration,
    ) -> Result<String, LineWaitError> {
        let deadline = Instant::now() + limit;
        let mut checked = 0;
        let mut state = self
            .serial
            .lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(line) = state.lines[checked..].iter().find(|line| matches(line)) {
                return Ok(line.clone());
            }
            checked = state.lines.len();
            if state.closed {
                return Err(LineWaitError::OutputEnded);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(LineWaitError::TimedOut(limit));
            }
            state = self
                .serial
                .changed
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Waits until more than `seen` serial lines have arrived (then `lines()[seen..]` is new), or
    /// fails after `limit` or when the output ends with no more lines.
    pub fn wait_for_more_lines(&self, seen: usize, limit: Duration) -> Result<(), LineWaitError> {
        let deadline = Instant::now() + limit;
        let mut state = self
            .serial
            .lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        loop {
            if state.lines.len() > seen {
                return Ok(());
            }
            if state.closed {
                return Err(LineWaitError::OutputEnded);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(LineWaitError::TimedOut(limit));
            }
            state = self
                .serial
                .changed
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Waits for QEMU to exit, killing it after `limit`. Returns how it ended; once every line
    /// of serial output has been read.
    pub fn wait_exit(&mut self, limit: Duration) -> QemuExit {
        if let Some(exit) = self.exit {
            return exit;
        }
        let deadline = Instant::now() + limit;
        let exit = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break QemuExit::from_status(status),
                Ok(None) if self.kvm_stopped.load(Ordering::Acquire) => {
                    self.stop();
                    break QemuExit::KvmStopped;
                }
                Ok(None) if Instant::now() >= deadline => {
                    self.stop();
                    break QemuExit::TimedOut(limit);
                }
                Ok(None) => thread::sleep(Duration::from_millis(20)),
                Err(_) => {
                    self.stop();
                    break QemuExit::Killed;
                }
            }
        };
        self.join_readers();
        self.exit = Some(exit);
        exit
    }

    /// QEMU's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether QEMU has exited (or was killed).
    pub fn has_exited(&mut self) -> bool {
        self.exit.is_some() || matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Kills QEMU now (if still running) and returns how it ended.
    pub fn kill(&mut self) -> QemuExit {
        if let Some(exit) = self.exit {
            return exit;
        }
        let exit = match self.child.try_wait() {
            Ok(Some(status)) => QemuExit::from_status(status),
            _ => {
                self.stop();
                QemuExit::Killed
            }
        };
        self.join_readers();
        self.exit = Some(exit);
        exit
    }

    /// A copy of every serial line so far.
    pub fn lines(&self) -> Vec<String> {
        self.serial
            .lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .lines
            .clone()
    }

    /// Whether some serial line so far contains `text`.
    pub fn output_contains(&self, text: &str) -> bool {
        self.serial
            .lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .lines
            .iter()
            .any(|line| line.contains(text))
    }

    /// QEMU's own messages (complete once QEMU has exited).
    pub fn stderr(&self) -> String {
        self.stderr
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Time since QEMU was started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// The last `count` serial lines and QEMU's messages, indented, for a failure report.
    pub fn log_tail(&self, count: usize) -> String {
        let lines = self.lines();
        let mut text = String::new();
        let skipped = lines.len().saturating_sub(count);
        if skipped > 0 {
            text.push_str(&format!("    | … {skipped} earlier lines\n"));
        }
        for line in &lines[skipped..] {
            text.push_str(&format!("    | {line}\n"));
        }
        if lines.is_empty() {
            text.push_str("    | (no serial output)\n");
        }
        for line in self.stderr().lines().filter(|line| !line.trim().is_empty()) {
            text.push_str(&format!("    qemu: {line}\n"));
        }
        text
    }

    /// Kills and reaps the child.
    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for the reader threads (they end when QEMU's pipes close).
    fn join_readers(&mut self) {
        for handle in [self.serial_reader.take(), self.stderr_reader.take()]
            .into_iter()
            .flatten()
        {
            let _ = handle.join();
        }
    }
}

impl Drop for QemuRun {
    fn drop(&mut self) {
        if self.exit.is_none() {
            self.kill();
        }
    }
}

/// Reader thread body: splits the serial output into lines and publishes them.
fn read_serial(stdout: impl Read, serial: &SerialLog, echo_prefix: Option<&str>) {
    let mut reader = BufReader::new(stdout);
    let mut raw = Vec::new();
    loop {
        raw.clear();
        match reader.read_until(b'\n', &mut raw) {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                let text = String::from_utf8_lossy(&raw);
                let line = serial_log::clean_line(text.trim_end_matches('\n'));
                if let Some(prefix) = echo_prefix {
                    println!("{prefix}{line}");
                }
                let mut state = serial.lines.lock().unwrap_or_else(PoisonError::into_inner);
                state.lines.push(line);
                serial.changed.notify_all();
            }
        }
    }
    let mut state = serial.lines.lock().unwrap_or_else(PoisonError::into_inner);
    state.closed = true;
    serial.changed.notify_all();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;
    use std::process::Stdio;

    #[test]
    fn classifies_exit_statuses() {
        let exited = |code: i32| ExitStatus::from_raw(code << 8);
        assert_eq!(QemuExit::from_status(exited(33)), QemuExit::Success);
        assert_eq!(QemuExit::from_status(exited(35)), QemuExit::Failure);
        assert_eq!(QemuExit::from_status(exited(1)), QemuExit::Code(1));
        assert_eq!(
            QemuExit::from_status(ExitStatus::from_raw(9)),
            QemuExit::Signal(9)
        );
        assert!(
            QemuExit::Code(3)
                .to_string()
                .contains("0x1 to isa-debug-exit")
        );
    }

    #[test]
    fn reader_splits_lines_and_closes() {
        let serial = SerialLog::default();
        read_serial(
            &b"Fjord 0.1.0 booting\r\nfjord: ready\npartial"[..],
            &serial,
            None,
        );
        let state = serial.lines.lock().unwrap();
        assert_eq!(
            state.lines,
            ["Fjord 0.1.0 booting", "fjord: ready", "partial"]
        );
        assert!(state.closed);
    }

    /// Runs `sh -c script` under `QemuRun` in QEMU's place: the process handling needs no
    /// kernel.
    fn spawn_shell(script: &str) -> QemuRun {
        let mut command = Command::new("sh");
        command
            .args(["-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        QemuRun::start(command, None).unwrap()
    }

    #[test]
    fn waits_for_a_line_then_for_the_exit_code() {
        let mut run =
            spawn_shell("echo booting; sleep 0.2; echo 'fjord: ready'; echo oops >&2; exit 35");
        let line = run
            .wait_for_line(|line| line == "fjord: ready", Duration::from_secs(10))
            .unwrap();
        assert_eq!(line, "fjord: ready");
        assert_eq!(run.wait_exit(Duration::from_secs(10)), QemuExit::Failure);
        assert_eq!(run.lines(), ["booting", "fjord: ready"]);
        assert_eq!(run.stderr(), "oops\n");
        assert!(run.log_tail(1).contains("… 1 earlier lines"));
    }

    #[test]
    fn times_out_and_kills_a_hang() {
        let mut run = spawn_shell("echo up; exec sleep 30");
        assert_eq!(
            run.wait_for_line(|line| line == "never", Duration::from_millis(200)),
            Err(LineWaitError::TimedOut(Duration::from_millis(200)))
        );
        let started = Instant::now();
        assert_eq!(
            run.wait_exit(Duration::from_millis(200)),
            QemuExit::TimedOut(Duration::from_millis(200))
        );
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn waits_for_more_lines() {
        let mut run = spawn_shell("echo one; sleep 0.2; echo two; exit 33");
        run.wait_for_more_lines(1, Duration::from_secs(10)).unwrap();
        assert_eq!(run.lines()[1], "two");
        assert_eq!(
            run.wait_for_more_lines(2, Duration::from_secs(10)),
            Err(LineWaitError::OutputEnded)
        );
        assert_eq!(run.wait_exit(Duration::from_secs(10)), QemuExit::Success);
    }

    #[test]
    fn output_end_stops_the_wait() {
        let mut run = spawn_shell("echo only; exit 33");
        assert_eq!(
            run.wait_for_line(|line| line == "never", Duration::from_secs(10)),
            Err(LineWaitError::OutputEnded)
        );
        assert_eq!(run.wait_exit(Duration::from_secs(10)), QemuExit::Success);
    }

    /// Real QEMU (skipped when not installed) accepts the whole command line of both boards and
    /// fails with status 1 on a kernel without a PVH note: QEMU's own failure is told apart.
    #[test]
    fn real_qemu_accepts_the_command_line() {
        use crate::qemu::{Device, HostForward, Machine};
        if crate::host_deps::find_on_path(crate::host_deps::QEMU_BINARY).is_none() {
            eprintln!("QEMU not installed: skipping");
            return;
        }
        for machine in [Machine::Microvm, Machine::Q35] {
            let mut config = QemuConfig::new("/bin/true");
            config.machine = machine;
            config.smp = 2;
            config.icount = true;
            config.append = "mode=test".into();
            config.devices.push(Device::UserNet {
                hostfwd: vec![HostForward { host: 0, guest: 80 }],
            });
            let mut run = QemuRun::spawn(&config, None).unwrap();
            assert_eq!(
                run.wait_exit(Duration::from_secs(30)),
                QemuExit::Code(1),
                "{machine}"
            );
            let stderr = run.stderr();
            assert!(stderr.contains("PVH ELF Note"), "{machine}: {stderr}");
        }
    }

    #[test]
    fn kill_stops_a_running_child() {
        let mut run = spawn_shell("exec sleep 30");
        assert_eq!(run.kill(), QemuExit::Killed);
    }
}
