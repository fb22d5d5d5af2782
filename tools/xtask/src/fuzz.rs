//! `cargo xtask fuzz <target>`: the host targets (`http`, `elf`, `manifest`) run the
//! `fjord-fuzz` crate's engine in an optimised, unwinding build; `syscalls` boots Fjord and has
//! the `hostile` function make random system calls from ring 3 (its `sysfuzz` verb), checking
//! that every call gets a result or a defined error code and that the kernel keeps serving.

use std::net::SocketAddr;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::http_client::Client;
use crate::qemu::{Accel, Machine};
use crate::{apps_build, e2e_http, host_deps, kernel_build, workspace};

/// The fuzz targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FuzzTarget {
    /// The gateway's HTTP/1.1 request parser (incremental reader, one-shot parser, router).
    Http,
    /// The ELF module validator and its load plan (populate, relocate).
    Elf,
    /// The `.fjord_manifest` parser.
    Manifest,
    /// System calls with random and boundary arguments from ring 3, in the kernel (QEMU).
    Syscalls,
}

impl FuzzTarget {
    /// The target's name on the command line and in `fuzz/corpus/`.
    pub fn name(self) -> &'static str {
        match self {
            FuzzTarget::Http => "http",
            FuzzTarget::Elf => "elf",
            FuzzTarget::Manifest => "manifest",
            FuzzTarget::Syscalls => "syscalls",
        }
    }
}

/// Options of `cargo xtask fuzz`.
#[derive(Clone, Debug)]
pub struct FuzzOptions {
    /// What to fuzz.
    pub target: FuzzTarget,
    /// Inputs to try (system calls for `syscalls`).
    pub iterations: u64,
    /// Seed: the same seed makes the same inputs.
    pub seed: u64,
    /// Threads of a host target (default: every CPU).
    pub jobs: Option<usize>,
    /// Fuzz a host target with AFL++ (coverage-guided, through `cargo afl`) for this many
    /// seconds instead.
    pub afl_seconds: Option<u64>,
    /// Echo the guest's serial output.
    pub verbose: bool,
}

/// Runs one fuzz target; `Ok(false)` when it found a crash (reported on the way).
pub fn run(options: &FuzzOptions) -> Result<bool> {
    match (options.target, options.afl_seconds) {
        (FuzzTarget::Syscalls, None) => syscalls(options),
        (FuzzTarget::Syscalls, Some(_)) => bail!("AFL++ fuzzes the host targets only"),
        (target, Some(seconds)) => afl(target, seconds),
        (target, None) => host(target, options),
    }
}

/// A host target: `cargo run --profile fuzz -p fjord-fuzz -- <target> …`.
fn host(target: FuzzTarget, options: &FuzzOptions) -> Result<bool> {
    let mut command = workspace::cargo();
    command.args([
        "run",
        "--quiet",
        "--profile",
        "fuzz",
        "--package",
        "fjord-fuzz",
        "--",
    ]);
    command.args([
        target.name(),
        "--iterations",
        &options.iterations.to_string(),
        "--seed",
        &options.seed.to_string(),
    ]);
    if let Some(jobs) = options.jobs {
        command.args(["--jobs", &jobs.to_string()]);
    }
    println!("xtask: {}", workspace::display_command(&command));
    let status = command
        .status()
        .with_context(|| format!("running {}", workspace::display_command(&command)))?;
    match status.code() {
        Some(0) => Ok(true),
        Some(1) => Ok(false),
        _ => bail!("the fuzzer did not run ({status})"),
    }
}

/// The `cargo-afl` release `--afl` installs (crates.io), with the AFL++ it builds.
const AFL_VERSION: &str = "0.18.2";

/// Runs `command`, failing with its rendering when it does not succeed.
fn succeed(command: &mut Command) -> Result<()> {
    let shown = workspace::display_command(command);
    let status = command
        .status()
        .with_context(|| format!("running {shown}"))?;
    if !status.success() {
        bail!("{shown} failed ({status})");
    }
    Ok(())
}

/// `--afl`: coverage-guided fuzzing of a host target by AFL++ through `cargo afl`, everything
/// under `target/afl/`: `cargo-afl` installed from crates.io and AFL++ built from the source it
/// carries (once each), the harness `fuzz/afl/` built with AFL's instrumentation, then
/// `cargo afl fuzz` from the seed corpus for `seconds`. Crashes are copied to
/// `fuzz/crashes/<target>/`.
fn afl(target: FuzzTarget, seconds: u64) -> Result<bool> {
    let dir = workspace::target_dir().join("afl");
    let bin = dir.join("bin");
    let cargo_afl = bin.join("cargo-afl");
    let path = std::env::join_paths(
        std::iter::once(bin.clone()).chain(
            std::env::var_os("PATH")
                .iter()
                .flat_map(std::env::split_paths),
        ),
    )?;
    let afl_command = || {
        let mut c = Command::new(&cargo_afl);
        c.arg("afl")
            .current_dir(workspace::root())
            .env("PATH", &path)
            .env("XDG_DATA_HOME", dir.join("data"))
            .env("CARGO_TARGET_DIR", dir.join("build"));
        c
    };
    if !cargo_afl.is_file() {
        println!(
            "xtask: installing cargo-afl {AFL_VERSION} into {}",
            dir.display()
        );
        succeed(
            workspace::cargo()
                .args(["install", "--quiet", "--locked", "cargo-afl"])
                .args(["--version", AFL_VERSION, "--root"])
                .arg(&dir),
        )?;
    }
    if !dir.join("data/afl.rs").is_dir() {
        println!("xtask: building AFL++ (cargo afl config --build)");
        succeed(afl_command().args(["config", "--build"]))?;
    }
    succeed(afl_command().args([
        "build",
        "--quiet",
        "--release",
        "--manifest-path",
        "fuzz/afl/Cargo.toml",
    ]))?;
    let harness = dir.join("build/release/fjord-fuzz-afl");
    let out = dir.join("out").join(target.name());
    if out.exists() {
        std::fs::remove_dir_all(&out).with_context(|| format!("removing {}", out.display()))?;
    }
    std::fs::create_dir_all(&out)?;
    let log = std::fs::File::create(dir.join("out").join(format!("{}.log", target.name())))?;
    let corpus = workspace::root().join("fuzz/corpus").join(target.name());
    println!(
        "xtask: AFL++ on {} for {seconds} s (log in {})",
        target.name(),
        dir.join("out").display()
    );
    let mut fuzz = afl_command();
    fuzz.arg("fuzz")
        .arg("-i")
        .arg(&corpus)
        .arg("-o")
        .arg(&out)
        .args(["-V", &seconds.to_string()])
        .arg(&harness)
        .env("FJORD_FUZZ_TARGET", target.name())
        .env("AFL_SKIP_CPUFREQ", "1")
        .env("AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES", "1")
        .env("AFL_NO_UI", "1")
        .env("AFL_NO_AFFINITY", "1")
        .stdout(log.try_clone()?)
        .stderr(log);
    succeed(&mut fuzz)?;
    let stats = std::fs::read_to_string(out.join("default/fuzzer_stats"))
        .context("reading AFL++'s fuzzer_stats")?;
    let stat = |key: &str| {
        stats
            .lines()
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.trim() == key)
            .map_or("?", |(_, v)| v.trim())
            .to_owned()
    };
    let crashes: Vec<_> = std::fs::read_dir(out.join("default/crashes"))
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    let crashes: Vec<_> = crashes
        .into_iter()
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("id:"))
        })
        .collect();
    if !crashes.is_empty() {
        let keep = workspace::root().join("fuzz/crashes").join(target.name());
        std::fs::create_dir_all(&keep)?;
        for (i, c) in crashes.iter().enumerate() {
            std::fs::copy(c, keep.join(format!("afl-{i}")))?;
        }
    }
    println!(
        "fuzz {} (AFL++): {} inputs in {seconds} s ({}/s), {} corpus entries, {} edges ({} of the map), {} crashes",
        target.name(),
        stat("execs_done"),
        stat("execs_per_sec"),
        stat("corpus_count"),
        stat("edges_found"),
        stat("bitmap_cvg"),
        crashes.len()
    );
    Ok(crashes.is_empty())
}

/// System calls one `sysfuzz` invocation makes (within the function's one-second limit under
/// TCG; a KVM that emulates ring 0 takes about 250 in that time).
pub const CALLS_PER_INVOCATION: u64 = 2_000;

/// What a run of `hostile`'s `sysfuzz` gave.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyscallTally {
    /// Invocations answered 200.
    pub invocations: u64,
    /// System calls made in them.
    pub calls: u64,
    /// Calls that succeeded.
    pub ok: u64,
    /// Calls that failed with a defined error code.
    pub errors: u64,
    /// Calls whose result was neither (a kernel bug).
    pub undefined: u64,
    /// The first such call, as the function reported it.
    pub first_undefined: Option<String>,
}

impl SyscallTally {
    /// Adds one `sysfuzz` response (four little-endian `u64`s).
    pub fn add_response(&mut self, body: &[u8]) -> Result<(), String> {
        let words: Vec<u64> = body
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
            .collect();
        let Some((&[calls, ok, errors, undefined], rest)) = words.split_first_chunk::<4>() else {
            return Err(format!("sysfuzz answered {body:?}, not four words"));
        };
        if let [no, a0, a1, a2, a3, ret] = rest[..] {
            self.first_undefined = Some(format!(
                "system call {no}({a0:#x}, {a1:#x}, {a2:#x}, {a3:#x}) returned {ret:#x}"
            ));
        }
        self.invocations += 1;
        self.calls += calls;
        self.ok += ok;
        self.errors += errors;
        self.undefined += undefined;
        Ok(())
    }
}

/// Another function's request, path, body and what its answer contains: checked between
/// `sysfuzz` invocations to show the kernel still serves others.
pub type Bystander<'a> = (&'a str, &'a [u8], &'a str);

/// Invokes `hostile`'s `sysfuzz` with seeds `seed..` until `calls` system calls were made,
/// checking every 16 invocations and at the end that `bystander` still answers. `Err` on the
/// first sign of a kernel failure: a call with an undefined result, an answer other than 200,
/// the gateway gone.
pub fn sysfuzz(
    addr: SocketAddr,
    seed: u64,
    calls: u64,
    per_invocation: u64,
    bystander: Bystander<'_>,
) -> Result<SyscallTally, String> {
    let mut tally = SyscallTally::default();
    let mut client = Client::connect(addr)?;
    let mut i = 0u64;
    while tally.calls < calls {
        let n = per_invocation.max(1).min(calls - tally.calls);
        let s = seed.wrapping_add(i);
        let r = client.request(
            "POST",
            "/invoke/hostile",
            format!("sysfuzz {s} {n}").as_bytes(),
        )?;
        if r.status != 200 {
            return Err(format!(
                "sysfuzz seed {s}: {} {}",
                r.status,
                r.text().trim_end()
            ));
        }
        let before = tally.undefined;
        tally.add_response(&r.body)?;
        if tally.undefined > before {
            return Err(format!(
                "sysfuzz seed {s}: {}",
                tally
                    .first_undefined
                    .as_deref()
                    .unwrap_or("a call gave an undefined result")
            ));
        }
        i += 1;
        if i.is_multiple_of(16) || tally.calls >= calls {
            let (path, body, expect) = bystander;
            let r = client.request("POST", path, body)?;
            r.expect(200)?;
            r.expect_body_contains(expect)?;
        }
    }
    Ok(tally)
}

/// `cargo xtask fuzz syscalls`: boots Fjord, deploys `hostile` and `hello`, runs [`sysfuzz`].
fn syscalls(options: &FuzzOptions) -> Result<bool> {
    let qemu = host_deps::ensure_qemu()?;
    let kernel = kernel_build::build_kernel()?;
    let apps = apps_build::build_apps()?;
    let (mut vm, addr) =
        e2e_http::boot_gateway(&kernel, Some(&qemu), Machine::Microvm, Accel::Tcg)?;
    for name in ["hostile", "hello"] {
        let app = apps
            .iter()
            .find(|a| a.name == name)
            .with_context(|| format!("app {name} was not built"))?;
        let status = e2e_http::deploy(addr, name, &app.bytes).map_err(anyhow::Error::msg)?;
        if !(200..300).contains(&status) {
            bail!("deploying {name} answered {status}");
        }
    }
    let started = Instant::now();
    let hello = ("/invoke/hello", b"x".as_slice(), "hello, x!");
    let result = sysfuzz(
        addr,
        options.seed,
        options.iterations,
        CALLS_PER_INVOCATION,
        hello,
    );
    let secs = started.elapsed().as_secs_f64();
    let serving = crate::http_client::one(addr, "GET", "/metrics", b"").map(|r| r.status);
    let tail = vm.log_tail(20);
    let exit = vm.kill();
    if options.verbose {
        println!("{tail}");
    }
    match (result, serving) {
        (Ok(t), Ok(200)) => {
            println!(
                "fuzz syscalls: {} calls in {} invocations, {secs:.1} s ({:.0}/s, seed {}): {} succeeded, {} defined errors, 0 undefined; the kernel still serves",
                t.calls,
                t.invocations,
                t.calls as f64 / secs.max(1e-9),
                options.seed,
                t.ok,
                t.errors
            );
            Ok(true)
        }
        (result, serving) => {
            println!(
                "fuzz syscalls: FAILED after {secs:.1} s: {:?}; /metrics afterwards: {serving:?}; QEMU: {exit}\n{tail}",
                result.err()
            );
            Ok(false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(w: &[u64]) -> Vec<u8> {
        w.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn tallies_sysfuzz_answers() {
        let mut t = SyscallTally::default();
        t.add_response(&words(&[2000, 150, 1850, 0])).unwrap();
        t.add_response(&words(&[10, 1, 8, 1, 29, 1, 2, 3, 4, (-99i64) as u64]))
            .unwrap();
        assert_eq!(
            (t.invocations, t.calls, t.ok, t.errors, t.undefined),
            (2, 2010, 151, 1858, 1)
        );
        assert_eq!(
            t.first_undefined.as_deref(),
            Some("system call 29(0x1, 0x2, 0x3, 0x4) returned 0xffffffffffffff9d")
        );
        assert!(t.add_response(b"OK").is_err());
        assert!(t.add_response(&words(&[1, 2, 3])).is_err());
    }

    #[test]
    fn target_names_match_the_corpus_folders() {
        for t in [FuzzTarget::Http, FuzzTarget::Elf, FuzzTarget::Manifest] {
            assert!(
                workspace::root()
                    .join("fuzz/corpus")
                    .join(t.name())
                    .is_dir()
            );
        }
    }
}
