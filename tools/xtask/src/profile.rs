//! `cargo xtask profile`: an exact instruction profile of a window of a boot.
//!
//! QEMU runs under icount with `-d in_asm,nochain`: every translated block's instructions are
//! logged once, when it is translated, and block chaining is off, so that every execution of a
//! block passes QEMU's main loop. After a delay (counted from a line of the guest's output),
//! the monitor's `log in_asm,exec,nochain` logs every execution too, for a window of host time;
//! then logging goes back to translations only and QEMU is stopped. Each executed block counts
//! its logged instruction count towards its symbol (QEMU names the kernel's symbols from its
//! ELF; ring-3 code shows as `user`) and its vCPU. Under icount these are the guest
//! instructions the benchmarks count, so the profile adds up to what they measure.
//!
//! Each execution counts the size of the latest translation at its address (QEMU may split a
//! block differently when it translates an address again); `rep movs` counts once per
//! iteration, as icount does.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::qemu::{Machine, QemuConfig};
use crate::qemu_run::QemuRun;
use crate::{host_deps, initrd, kernel_build, workspace};

/// What to profile and for how long.
#[derive(Clone, Debug)]
pub struct ProfileOptions {
    /// The kernel command line (`mode=bench bench=fork modules=initrd`, …).
    pub append: String,
    /// vCPUs.
    pub smp: u32,
    /// Guest RAM in MiB.
    pub memory_mib: u32,
    /// The guest line that starts the delay (the banner's last line when `None`).
    pub after: Option<String>,
    /// Host seconds from that line to the window.
    pub delay: f64,
    /// Host seconds of logged executions.
    pub window: f64,
    /// Symbols shown per vCPU.
    pub top: usize,
}

/// Instructions per symbol, per vCPU, in the window.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Profile {
    /// `(cpu, symbol) → instructions`.
    pub counts: HashMap<(u32, String), u64>,
    /// Executed blocks whose translation the log did not show (counted as one instruction).
    pub unsized_blocks: u64,
}

impl Profile {
    /// Reads a QEMU log of `in_asm` blocks and `exec` traces (`Trace <cpu>: <host ptr>
    /// [<cs base>/<pc>/<flags>/<cflags>] <symbol>`).
    pub fn from_log(log: impl BufRead) -> Result<Profile> {
        let mut size: HashMap<u64, u64> = HashMap::new();
        // The block being read: its address and instructions so far.
        let mut block: Option<(u64, u64)> = None;
        let mut profile = Profile::default();
        for line in log.lines() {
            let line = line.context("reading the QEMU log")?;
            let address = instruction_address(&line);
            if address.is_none()
                && let Some((pc, n)) = block.take()
            {
                size.insert(pc, n);
            }
            if let Some(pc) = address {
                match &mut block {
                    Some((_, n)) => *n += 1,
                    None => block = Some((pc, 1)),
                }
            } else if let Some((cpu, pc, symbol)) =
                line.strip_prefix("Trace ").and_then(parse_trace)
            {
                // A block is translated before it runs: its size is known by now.
                let n = size.get(&pc).copied().unwrap_or_else(|| {
                    profile.unsized_blocks += 1;
                    1
                });
                *profile.counts.entry((cpu, symbol)).or_default() += n;
            }
        }
        Ok(profile)
    }

    /// The vCPUs, each with its total and its `top` symbols, most instructions first.
    pub fn by_cpu(&self, top: usize) -> Vec<CpuProfile> {
        let mut cpus: Vec<u32> = self.counts.keys().map(|(c, _)| *c).collect();
        cpus.sort_unstable();
        cpus.dedup();
        cpus.into_iter()
            .map(|cpu| {
                let mut rows: Vec<(String, u64)> = self
                    .counts
                    .iter()
                    .filter(|((c, _), _)| *c == cpu)
                    .map(|((_, s), n)| (s.clone(), *n))
                    .collect();
                let total = rows.iter().map(|(_, n)| n).sum();
                rows.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
                rows.truncate(top);
                CpuProfile { cpu, total, rows }
            })
            .collect()
    }
}

/// One vCPU's share of a [`Profile`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuProfile {
    /// The vCPU.
    pub cpu: u32,
    /// Its instructions in the window.
    pub total: u64,
    /// Its symbols with the most instructions, most first.
    pub rows: Vec<(String, u64)>,
}

/// `(cpu, pc, symbol)` of a trace line after `Trace `; the symbol is `user` for ring-3
/// addresses (the kernel image sits below 4 GiB, its other mappings in the upper half, the
/// μprocess and function areas between) and the address itself where QEMU names none.
fn parse_trace(rest: &str) -> Option<(u32, u64, String)> {
    let (cpu, rest) = rest.split_once(':')?;
    let cpu = cpu.trim().parse().ok()?;
    let open = rest.find('[')?;
    let close = open + rest[open..].find(']')?;
    let fields: Vec<&str> = rest[open + 1..close].split('/').collect();
    let pc = u64::from_str_radix(fields.get(1)?, 16).ok()?;
    let symbol = rest[close + 1..].trim();
    let symbol = if (1 << 32..1 << 47).contains(&pc) {
        "user".to_owned()
    } else if symbol.is_empty() {
        format!("{pc:#x}")
    } else {
        symbol.to_owned()
    };
    Some((cpu, pc, symbol))
}

/// The address an `in_asm` instruction line starts with (`0x0000000000101000:  mov …`).
fn instruction_address(line: &str) -> Option<u64> {
    let hex = line.strip_prefix("0x")?;
    let end = hex.find(':')?;
    u64::from_str_radix(&hex[..end], 16).ok()
}

/// Boots the kernel as `options` say, logs a window of executions and prints the profile.
pub fn run(options: &ProfileOptions) -> Result<()> {
    let qemu = host_deps::ensure_qemu()?;
    let demangler = host_deps::ensure_program("c++filt", "binutils")?;
    let kernel = kernel_build::build_kernel()?;
    let dir = workspace::target_dir().join("profile");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let (log, monitor) = (dir.join("qemu.log"), dir.join("monitor.sock"));
    for stale in [&log, &monitor] {
        let _ = std::fs::remove_file(stale);
    }
    let mut config = QemuConfig::new(&kernel);
    config.qemu = qemu;
    config.machine = Machine::Microvm;
    config.smp = options.smp;
    config.memory_mib = options.memory_mib;
    config.icount = true;
    config.initrd = Some(initrd::pack_initrd()?);
    config.append = options.append.clone();
    config.monitor = Some(monitor.clone());
    config.trace_log = Some(log.clone());
    println!(
        "profile: booting `{}` (icount, {} vCPU(s))",
        config.append, config.smp
    );
    let mut run = QemuRun::spawn(&config, None)?;
    let marker = options
        .after
        .clone()
        .unwrap_or_else(|| "orchestrator group".to_owned());
    let started = Instant::now();
    while !run.output_contains(&marker) {
        if started.elapsed() > Duration::from_secs(600) {
            let _ = run.kill();
            bail!("the guest never printed `{marker}`");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs_f64(options.delay));
    let mut mon = UnixStream::connect(&monitor)
        .with_context(|| format!("connecting to QEMU's monitor at {}", monitor.display()))?;
    mon.write_all(b"log in_asm,exec,nochain\n")?;
    std::thread::sleep(Duration::from_secs_f64(options.window));
    mon.write_all(b"log in_asm,nochain\n")?;
    std::thread::sleep(Duration::from_millis(300));
    let _ = run.kill();
    let file = std::fs::File::open(&log).with_context(|| format!("opening {}", log.display()))?;
    let profile = Profile::from_log(BufReader::new(file))?;
    print_profile(&profile, options.top, &demangler)?;
    println!("profile: the log is {}", log.display());
    Ok(())
}

/// Prints each vCPU's total and top symbols, demangled.
fn print_profile(profile: &Profile, top: usize, demangler: &Path) -> Result<()> {
    let cpus = profile.by_cpu(top);
    let names: Vec<String> = cpus
        .iter()
        .flat_map(|c| c.rows.iter().map(|(s, _)| s.clone()))
        .collect();
    let readable = demangle(demangler, &names)?;
    for CpuProfile { cpu, total, rows } in cpus {
        println!("== vCPU {cpu}: {total} instructions");
        for (symbol, n) in rows {
            let share = 100.0 * n as f64 / total.max(1) as f64;
            let name = readable.get(&symbol).unwrap_or(&symbol);
            println!("{share:5.1}% {n:>10} {name}");
        }
    }
    if profile.unsized_blocks > 0 {
        println!(
            "profile: {} executed blocks had no logged translation (counted as 1 instruction)",
            profile.unsized_blocks
        );
    }
    Ok(())
}

/// Rust symbol names made readable with `c++filt` (which knows Rust's legacy mangling), the
/// trailing hash dropped.
fn demangle(demangler: &Path, names: &[String]) -> Result<HashMap<String, String>> {
    let mut child = Command::new(demangler)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", demangler.display()))?;
    let input = names.join("\n");
    child
        .stdin
        .take()
        .context("c++filt's input")?
        .write_all(input.as_bytes())?;
    let out = child.wait_with_output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(names
        .iter()
        .cloned()
        .zip(text.lines().map(strip_hash))
        .collect())
}

/// `name` without a trailing `::h<16 hex digits>`.
fn strip_hash(name: &str) -> String {
    match name.rsplit_once("::h") {
        Some((head, hash)) if hash.len() == 16 && hash.chars().all(|c| c.is_ascii_hexdigit()) => {
            head.to_owned()
        }
        _ => name.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "\
----------------
IN: _ZN4kern4read17h0123456789abcdefE
0x0000000000101000:  mov rax, rbx
0x0000000000101003:  add rax, 1
0x0000000000101007:  jmp 0x101100

----------------
IN: _ZN4kern5write17h0123456789abcdefE
0x0000000000102000:  ret

Trace 1: 0x7f00 [0000000000000000/0000000000101000/0800c4b0/ff020200] _ZN4kern4read17h0123456789abcdefE
Trace 1: 0x7f00 [0000000000000000/0000000000101000/0800c4b0/ff020200] _ZN4kern4read17h0123456789abcdefE
Trace 0: 0x7f40 [0000000000000000/0000000000102000/0800c4b0/ff020200] _ZN4kern5write17h0123456789abcdefE
Trace 1: 0x7f80 [0000000000000000/0000120001003e97/0800c4b0/ff020200]
Trace 1: 0x7f90 [0000000000000000/0000000000103000/0800c4b0/ff020200]
";

    #[test]
    fn executed_blocks_count_their_translated_instructions() {
        let p = Profile::from_log(LOG.as_bytes()).unwrap();
        let read = "_ZN4kern4read17h0123456789abcdefE".to_owned();
        assert_eq!(
            p.counts[&(1, read.clone())],
            6,
            "two runs of a 3-instruction block"
        );
        assert_eq!(
            p.counts[&(0, "_ZN4kern5write17h0123456789abcdefE".to_owned())],
            1
        );
        // Ring-3 code, and a kernel address QEMU has no symbol for, without a translation.
        assert_eq!(p.counts[&(1, "user".to_owned())], 1);
        assert_eq!(p.counts[&(1, "0x103000".to_owned())], 1);
        assert_eq!(p.unsized_blocks, 2);
        let cpus = p.by_cpu(1);
        assert_eq!(
            cpus[1],
            CpuProfile {
                cpu: 1,
                total: 8,
                rows: vec![(read, 6)]
            }
        );
    }

    #[test]
    fn trailing_hashes_are_dropped() {
        assert_eq!(strip_hash("kern::read::h0123456789abcdef"), "kern::read");
        assert_eq!(strip_hash("kern::h"), "kern::h");
        assert_eq!(strip_hash("kern::read"), "kern::read");
    }
}
