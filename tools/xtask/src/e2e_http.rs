//! End-to-end tests of the HTTP gateway: boot the kernel with a virtio-net card on QEMU user
//! networking, forward a free host port to guest port 80, and talk HTTP/1.1 to it from the host.
//!
//! [`run`] returns one outcome per check (name → `Ok` or the reason it failed), so the caller
//! reports them like the other test layers. [`metrics_round_trips`] is the latency probe used for
//! the gateway's round-trip measurement.

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::host_deps;
use crate::http_client::{Client, one};
use crate::qemu::{Accel, Device, HostForward, Machine, QemuConfig};
use crate::qemu_run::QemuRun;
use crate::tap::TapNet;

/// The line the kernel prints once the gateway accepts connections.
pub const LISTENING_LINE: &str = "fjord: http listening on ";
/// How long the kernel may take to boot and bring the network up.
const BOOT_LIMIT: Duration = Duration::from_secs(90);
/// A validator test fixture (its manifest names the function `hello`).
#[cfg(test)]
const FIXTURE: &str = "faas/tests/fixtures/hello-rela.elf";

/// One check's name and outcome.
pub type Outcome = (String, Result<(), String>);

/// Boots `kernel` (with `qemu`) on `machine` with a virtio-net card on user networking, waits
/// until the gateway listens, and returns the running VM and the host address forwarded to it.
pub fn boot_gateway(
    kernel: &Path,
    qemu: Option<&Path>,
    machine: Machine,
    accel: Accel,
) -> Result<(QemuRun, SocketAddr)> {
    boot_gateway_with(kernel, qemu, machine, accel, "")
}

/// [`boot_gateway`] with `options` added to the kernel command line.
pub fn boot_gateway_with(
    kernel: &Path,
    qemu: Option<&Path>,
    machine: Machine,
    accel: Accel,
    options: &str,
) -> Result<(QemuRun, SocketAddr)> {
    boot_gateway_on(kernel, qemu, machine, accel, options, None)
}

/// [`boot_gateway_with`] with the virtio-net card on host tap link `tap` when given (the guest
/// takes the link's address; the returned address is the guest's port 80), on user networking
/// otherwise.
pub fn boot_gateway_on(
    kernel: &Path,
    qemu: Option<&Path>,
    machine: Machine,
    accel: Accel,
    options: &str,
    tap: Option<&TapNet>,
) -> Result<(QemuRun, SocketAddr)> {
    boot_forwarding(
        kernel,
        (qemu, machine, accel),
        options,
        tap,
        &ProgramBoot::default(),
    )
    .map(|(vm, a, _)| (vm, a))
}

/// What a gateway boot for programs adds: guest ports forwarded from the host (where programs
/// listen), more memory, a disk image.
#[derive(Clone, Debug, Default)]
pub struct ProgramBoot<'a> {
    /// Guest ports to forward; their host addresses are returned in this order.
    pub ports: &'a [u16],
    /// Guest memory, when more than the default is needed.
    pub memory_mib: Option<u32>,
    /// A disk image to attach.
    pub disk: Option<PathBuf>,
}

/// [`boot_gateway_with`] on microvm with `extra`: returns the VM, the gateway's address and the
/// forwarded ports' host addresses.
pub fn boot_gateway_forwarding(
    kernel: &Path,
    accel: Accel,
    options: &str,
    extra: &ProgramBoot<'_>,
) -> Result<(QemuRun, SocketAddr, Vec<SocketAddr>)> {
    boot_forwarding(
        kernel,
        (None, Machine::Microvm, accel),
        options,
        None,
        extra,
    )
}

/// vCPUs of a gateway boot on microvm: one orchestrator group of three (two executors).
pub const MICROVM_CPUS: u32 = 3;

/// [`boot_gateway_forwarding`] with `qemu`, on tap link `tap` when given (then the programs'
/// ports are the guest's own address, nothing is forwarded): returns the VM, the gateway's
/// address and the forwarded ports' host addresses.
pub fn boot_programs_on(
    kernel: &Path,
    qemu: Option<&Path>,
    accel: Accel,
    tap: Option<&TapNet>,
    extra: &ProgramBoot<'_>,
) -> Result<(QemuRun, SocketAddr, Vec<SocketAddr>)> {
    boot_forwarding(kernel, (qemu, Machine::Microvm, accel), "", tap, extra)
}

fn boot_forwarding(
    kernel: &Path,
    (qemu, machine, accel): (Option<&Path>, Machine, Accel),
    options: &str,
    tap: Option<&TapNet>,
    extra: &ProgramBoot<'_>,
) -> Result<(QemuRun, SocketAddr, Vec<SocketAddr>)> {
    let mut config = QemuConfig::new(kernel);
    if let Some(mib) = extra.memory_mib {
        config.memory_mib = mib;
    }
    if let Some(image) = &extra.disk {
        config.devices.push(Device::Disk {
            image: image.clone(),
        });
    }
    if let Some(q) = qemu {
        config.qemu = q.to_path_buf();
    }
    config.machine = machine;
    config.use_accel(accel);
    // On q35, four CPUs in two orchestrator groups (CPU 0 orchestrates CPU 1, CPU 2 CPU 3), so
    // the HTTP checks also cover requests served by a second group; on microvm one group of
    // three (two executors). Either way a runaway function leaves an executor free.
    (config.smp, config.append) = match machine {
        Machine::Q35 => (4, "mode=run orch_group=2".to_owned()),
        _ => (MICROVM_CPUS, "mode=run".to_owned()),
    };
    if !options.is_empty() {
        config.append = format!("{} {options}", config.append);
    }
    let mut forwarded = Vec::new();
    let addr = match tap {
        Some(net) => {
            config.append = format!("{} {}", config.append, net.guest_cmdline());
            config.devices.push(Device::TapNet {
                ifname: net.ifname.clone(),
            });
            SocketAddr::from((net.guest, 80))
        }
        None => {
            let port = free_port()?;
            let mut hostfwd = vec![HostForward {
                host: port,
                guest: 80,
            }];
            for &guest in extra.ports {
                let host = free_port()?;
                hostfwd.push(HostForward { host, guest });
                forwarded.push(SocketAddr::from((Ipv4Addr::LOCALHOST, host)));
            }
            config.devices.push(Device::UserNet { hostfwd });
            SocketAddr::from((Ipv4Addr::LOCALHOST, port))
        }
    };
    let mut vm = QemuRun::spawn(&config, None)?;
    let limit = match accel {
        Accel::Tcg => BOOT_LIMIT,
        // A KVM that emulates ring 0 (the PVM backend) boots tens of times slower.
        Accel::Kvm => BOOT_LIMIT * 10,
    };
    if let Err(e) = vm.wait_for_line(|l| l.contains(LISTENING_LINE), limit) {
        let tail = vm.log_tail(20);
        vm.kill();
        bail!("the gateway did not come up: {e}\n{tail}\n{}", vm.stderr());
    }
    Ok((vm, addr, forwarded))
}

/// The PIDs `GET /processes` lists for `program`.
fn pids_of(addr: SocketAddr, program: &str) -> Result<Vec<String>, String> {
    let r = one(addr, "GET", "/processes", b"")?;
    r.expect(200)?;
    let tag = format!(",\"program\":\"{program}\"");
    Ok(r.text()
        .split("{\"pid\":")
        .filter(|e| e.contains(&tag))
        .filter_map(|e| e.split(',').next().map(str::to_owned))
        .collect())
}

/// Waits until `GET /processes` lists no μprocess of `program`.
fn program_ended(addr: SocketAddr, program: &str, patience: Duration) -> Result<(), String> {
    let deadline = Instant::now() + patience;
    while !pids_of(addr, program)?.is_empty() {
        if Instant::now() > deadline {
            return Err(format!(
                "{program} still runs after {} s",
                patience.as_secs()
            ));
        }
        thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}

/// Boots `kernel` on `machine` with networking and runs every gateway check against it.
pub fn run(kernel: &Path, machine: Machine, accel: Accel) -> Result<Vec<Outcome>> {
    let (mut qemu, addr) = boot_gateway(kernel, None, machine, accel)?;
    let apps = crate::apps_build::build_apps().context("building the function modules")?;
    let app = |n: &str| -> Result<Vec<u8>> {
        apps.iter()
            .find(|a| a.name == n)
            .map(|a| a.bytes.clone())
            .with_context(|| format!("app {n} was not built"))
    };
    let mut outcomes = checks(addr, &app("hello")?, &app("echo")?, &app("hostile")?);
    outcomes.extend(heap_checks(addr, &app("wordfreq")?));
    outcomes.extend(nested_checks(addr, &apps));
    outcomes.extend(workload_checks(addr, &apps));
    outcomes.extend(tenant_checks(addr, &app("hostile")?, accel));
    outcomes.extend(process_checks(
        addr,
        &app("sleeper")?,
        &app("forktest")?,
        &app("forkbomb")?,
    ));
    outcomes.extend(framing_checks(addr, &app("echo")?));
    outcomes.extend(crate::e2e_groundhog::checks(
        addr,
        &app("leak")?,
        &app("leak-init")?,
        accel,
    ));
    // The workloads again, each request in a child forked from a zygote (groundhog=fork): on
    // microvm (the kernel code is the same on q35).
    if machine == Machine::Microvm {
        outcomes.extend(fork_mode_checks(addr, &apps));
    }
    // Last, when every family has samples (functions, namespaces, refusals).
    outcomes.extend(metrics_format_checks(addr));
    qemu.kill();
    Ok(outcomes)
}

/// The workloads' checks with every function forked per request, and the forks counted: most
/// requests after a function's first few fork into the PD an ended request left.
fn fork_mode_checks(addr: SocketAddr, apps: &[crate::apps_build::BuiltApp]) -> Vec<Outcome> {
    let mut outcomes = workload_checks_with(addr, apps, "?instances=fork");
    let metrics = one(addr, "GET", "/metrics", b"")
        .map(|r| r.text())
        .unwrap_or_default();
    let value = |name| crate::e2e_conns::series_value(&metrics, name);
    let forked = value("fjord_ufork_request_instances_forked_total");
    outcomes.push((
        "http: /metrics counts request instances forked from zygotes".to_owned(),
        forked
            .filter(|&n| n >= fjord_faas::workloads::OPERATIONS.len() as u64 * 3)
            .map(drop)
            .ok_or_else(|| "too few forked instances".to_owned()),
    ));
    outcomes.push((
        "http: forked request instances reuse the PDs of ended ones".to_owned(),
        match (value("fjord_ufork_request_instances_reused_total"), forked) {
            (Some(reused), Some(forked)) if reused > 0 && reused < forked => Ok(()),
            other => Err(format!("reused and forked: {other:?}")),
        },
    ));
    outcomes
}

/// Runs a host tool, or says why it could not be had.
fn tool(ensure: fn() -> Result<PathBuf>) -> Result<PathBuf, String> {
    ensure().map_err(|e| format!("{e:#}"))
}

/// HTTP/1.1 as clients send it: `curl` uploading chunked from stdin and waiting for
/// `100 Continue`, and raw requests with chunked framing errors and limits. `echo` is the
/// echo module, deployed by [`checks`] as `echo`.
fn framing_checks(addr: SocketAddr, echo: &[u8]) -> Vec<Outcome> {
    let mut out = Vec::new();
    let mut check = |label: &str, result: Result<(), String>| {
        out.push((format!("http: {label}"), result));
    };
    let curl = tool(host_deps::ensure_curl);
    let base = format!("http://{addr}");
    check("curl -T - (chunked) to /invoke/echo gets the echo back", {
        let data: Vec<u8> = (0..5000u32).map(|i| b'a' + (i % 26) as u8).collect();
        curl.clone().and_then(|c| {
            // -T uploads with PUT; the invocation route is POST.
            let r = run_curl(
                &c,
                &["-X", "POST", "-T", "-", &format!("{base}/invoke/echo")],
                &data,
            )?;
            r.expect_sent("Transfer-Encoding: chunked")?;
            r.expect_status(200)?;
            if r.body == data {
                Ok(())
            } else {
                Err(format!(
                    "echo answered {} bytes, not the {} sent",
                    r.body.len(),
                    data.len()
                ))
            }
        })
    });
    check("curl -T - (chunked PUT) deploys a module", {
        curl.clone().and_then(|c| {
            let r = run_curl(&c, &["-T", "-", &format!("{base}/functions/echo")], echo)?;
            r.expect_sent("Transfer-Encoding: chunked")?;
            r.expect_status(200)
        })
    });
    check(
        "curl PUT of a module with Expect: 100-continue gets 100, then 200",
        {
            curl.clone().and_then(|c| {
                let file =
                    std::env::temp_dir().join(format!("fjord-e2e-echo-{}.elf", std::process::id()));
                std::fs::write(&file, echo)
                    .map_err(|e| format!("writing {}: {e}", file.display()))?;
                let path = file.to_string_lossy().into_owned();
                // A long expect100 time-out: the body goes only on the 100, not after a wait.
                let r = run_curl(
                    &c,
                    &[
                        "-H",
                        "Expect: 100-continue",
                        "--expect100-timeout",
                        "60",
                        "-T",
                        &path,
                        &format!("{base}/functions/echo"),
                    ],
                    b"",
                );
                let _ = std::fs::remove_file(&file);
                let r = r?;
                r.expect_sent("Expect: 100-continue")?;
                r.expect_received("HTTP/1.1 100 Continue")?;
                r.expect_status(200)
            })
        },
    );
    check(
        "Expect: 100-continue: one interim 100, then the answer",
        expect_continue(addr),
    );
    check(
        "Expect: 100-continue with an oversized Content-Length is 413 at once",
        expect_continue_oversized(addr),
    );
    check(
        "Expect: 100-continue to no route is answered at once (no 100) and closes",
        expect_continue_nowhere(addr),
    );
    check(
        "a chunked body over the limit is 413 and closes",
        chunked_over_limit(addr),
    );
    check("malformed chunking is 400 and closes", {
        refused(
            addr,
            "Transfer-Encoding: chunked\r\n\r\n5\r\nabcdefg\r\n",
            400,
        )
        .and_then(|()| refused(addr, "Transfer-Encoding: chunked\r\n\r\nzz\r\n", 400))
    });
    check("Content-Length with chunked is 400, gzip coding 501", {
        refused(
            addr,
            "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            400,
        )
        .and_then(|()| refused(addr, "Transfer-Encoding: gzip\r\n\r\n", 501))
        .and_then(|()| one(addr, "GET", "/functions", b""))
        .and_then(|r| r.expect(200))
    });
    out
}

/// What `curl -v` said: the response body, the status, and its trace.
struct CurlRun {
    body: Vec<u8>,
    status: u16,
    trace: String,
}

impl CurlRun {
    fn expect_status(&self, status: u16) -> Result<(), String> {
        if self.status == status {
            Ok(())
        } else {
            Err(format!(
                "curl got status {}, expected {status}: {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            ))
        }
    }

    /// Whether curl sent the request header line `line`.
    fn expect_sent(&self, line: &str) -> Result<(), String> {
        self.expect_trace(&format!("> {line}"))
    }

    /// Whether curl received the line `line`.
    fn expect_received(&self, line: &str) -> Result<(), String> {
        self.expect_trace(&format!("< {line}"))
    }

    fn expect_trace(&self, needle: &str) -> Result<(), String> {
        if self.trace.lines().any(|l| l.trim_end() == needle) {
            Ok(())
        } else {
            Err(format!("curl's trace lacks {needle:?}:\n{}", self.trace))
        }
    }
}

/// Runs `curl -sS -v <args>` with `stdin`; the status comes from `--write-out`.
fn run_curl(curl: &Path, args: &[&str], stdin: &[u8]) -> Result<CurlRun, String> {
    use std::process::{Command, Stdio};
    const MARK: &str = "\n@fjord-status@";
    let mut child = Command::new(curl)
        .args(["-sS", "-v", "--max-time", "120", "--write-out"])
        .arg(format!("{MARK}%{{http_code}}"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("could not run {}: {e}", curl.display()))?;
    let mut input = child.stdin.take().ok_or("no stdin")?;
    let stdin = stdin.to_vec();
    let writer = thread::spawn(move || input.write_all(&stdin));
    let output = child.wait_with_output().map_err(|e| e.to_string())?;
    let _ = writer.join();
    let trace = String::from_utf8_lossy(&output.stderr).into_owned();
    if !output.status.success() {
        return Err(format!("curl failed ({}):\n{trace}", output.status));
    }
    let mark = MARK.as_bytes();
    let at = output
        .stdout
        .windows(mark.len())
        .rposition(|w| w == mark)
        .ok_or("curl printed no status")?;
    let status = String::from_utf8_lossy(&output.stdout[at + mark.len()..])
        .trim()
        .parse()
        .map_err(|e| format!("curl's status: {e}"))?;
    Ok(CurlRun {
        body: output.stdout[..at].to_vec(),
        status,
        trace,
    })
}

/// `Expect: 100-continue` by hand: the interim response comes after the head, once, before the
/// body is sent; then the final response.
fn expect_continue(addr: SocketAddr) -> Result<(), String> {
    let mut c = Client::connect(addr)?;
    c.send_raw(
        b"POST /invoke/echo HTTP/1.1\r\nHost: fjord\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n",
    )?;
    c.read_interim_continue()?;
    c.send_raw(b"hello")?;
    let r = c.read_response()?;
    r.expect(200)?;
    r.expect_body_eq("hello")?;
    // A chunked body on the same connection, asking again.
    c.send_raw(
        b"POST /invoke/echo HTTP/1.1\r\nHost: fjord\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n",
    )?;
    c.read_interim_continue()?;
    c.send_raw(b"3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nX-Trailer: t\r\n\r\n")?;
    let r = c.read_response()?;
    r.expect(200)?;
    r.expect_body_eq("abcde")
}

/// A body announced over the limit is refused on its head: 413 and close, no `100 Continue`.
fn expect_continue_oversized(addr: SocketAddr) -> Result<(), String> {
    let mut c = Client::connect(addr)?;
    c.send_raw(
        b"PUT /functions/echo HTTP/1.1\r\nHost: fjord\r\nExpect: 100-continue\r\nContent-Length: 67108864\r\n\r\n",
    )?;
    let r = c.read_response()?;
    r.expect(413)?;
    c.closed_by_server()
}

/// A request waiting for `100 Continue` that can go nowhere is refused on its head: the client
/// need not send its body.
fn expect_continue_nowhere(addr: SocketAddr) -> Result<(), String> {
    let mut c = Client::connect(addr)?;
    c.send_raw(
        b"PUT /functions/BAD! HTTP/1.1\r\nHost: fjord\r\nExpect: 100-continue\r\nContent-Length: 100000\r\n\r\n",
    )?;
    let r = c.read_response()?;
    r.expect(400)?;
    if r.header("connection") != Some("close") {
        return Err(format!("400 without Connection: close: {:?}", r.headers));
    }
    c.closed_by_server()
}

/// Two chunks of 1 MiB (the gateway's limit is 2 MiB) are taken; one more byte is 413.
fn chunked_over_limit(addr: SocketAddr) -> Result<(), String> {
    let mut c = Client::connect(addr)?;
    let mut req =
        b"POST /invoke/echo HTTP/1.1\r\nHost: fjord\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..2 {
        req.extend_from_slice(b"100000\r\n");
        req.extend(std::iter::repeat_n(b'x', 1 << 20));
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"1\r\n");
    c.send_raw(&req)?;
    let r = c.read_response()?;
    r.expect(413)?;
    c.closed_by_server()
}

/// A `POST /invoke/echo` with the header lines and body `rest` gets `status` with
/// `Connection: close`, and the server closes.
fn refused(addr: SocketAddr, rest: &str, status: u16) -> Result<(), String> {
    let mut c = Client::connect(addr)?;
    c.send_raw(format!("POST /invoke/echo HTTP/1.1\r\nHost: fjord\r\n{rest}").as_bytes())?;
    let r = c.read_response()?;
    r.expect(status)?;
    if r.header("connection") != Some("close") {
        return Err(format!(
            "{status} without Connection: close: {:?}",
            r.headers
        ));
    }
    c.closed_by_server()
}

/// `/metrics` parses with Prometheus's own parser (`promtool check metrics`) and passes the
/// gateway's strict checker (each family's HELP and TYPE once, its samples adjacent).
fn metrics_format_checks(addr: SocketAddr) -> Vec<Outcome> {
    let text = one(addr, "GET", "/metrics", b"").and_then(|r| {
        r.expect(200)?;
        Ok(r.text())
    });
    let strict = text.clone().and_then(|t| {
        fjord_faas::metrics::check::check_exposition(&t)
            .map(|_| ())
            .map_err(|e| format!("{e}\n{t}"))
    });
    let promtool = text.and_then(|t| {
        let p = tool(host_deps::ensure_promtool)?;
        promtool_check(&p, &t)
    });
    vec![
        (
            "http: /metrics is well-formed exposition (strict checker)".to_owned(),
            strict,
        ),
        (
            "http: /metrics passes promtool check metrics".to_owned(),
            promtool,
        ),
    ]
}

/// Runs `promtool check metrics` over `text`. Only exit 0 with nothing printed passes: a parse
/// error, and lint problems too (exit 3, naming advice such as a missing `_total` or a unit
/// that is not a base unit), fail with promtool's lines.
pub(crate) fn promtool_check(promtool: &Path, text: &str) -> Result<(), String> {
    use std::process::{Command, Stdio};
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("could not run {}: {e}", promtool.display()))?;
    let mut input = child.stdin.take().ok_or("no stdin")?;
    let body = text.as_bytes().to_vec();
    let writer = thread::spawn(move || input.write_all(&body));
    let output = child.wait_with_output().map_err(|e| e.to_string())?;
    let _ = writer.join();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if output.status.success() && said.trim().is_empty() {
        Ok(())
    } else {
        Err(format!(
            "promtool check metrics failed ({}):\n{said}",
            output.status
        ))
    }
}

/// Runs the checks in order (later ones depend on earlier deployments). `hello`, `echo` and
/// `hostile` are the ELF modules built from `apps/`.
fn checks(addr: SocketAddr, hello: &[u8], echo: &[u8], hostile: &[u8]) -> Vec<Outcome> {
    let name = manifest_name(hello).unwrap_or_else(|| "hello".to_owned());
    let deployed = format!("/functions/{name}");
    let invoke = format!("/invoke/{name}");
    let truncated = &hello[..hello.len() / 3];
    let mut out = Vec::new();
    let mut check = |label: &str, result: Result<(), String>| {
        out.push((format!("http: {label}"), result));
    };

    check("GET /metrics is Prometheus text", {
        one(addr, "GET", "/metrics", b"").and_then(|r| {
            r.expect(200)?;
            r.expect_body_contains("# TYPE ")?;
            r.expect_body_contains("fjord_kernel_free_frames ")
        })
    });
    check("GET /functions is empty", {
        one(addr, "GET", "/functions", b"").and_then(|r| {
            r.expect(200)?;
            r.expect_body_eq("[]")
        })
    });
    check("PUT garbage is 400 with a reason", {
        one(addr, "PUT", &deployed, b"this is not an ELF file").and_then(|r| {
            r.expect(400)?;
            r.expect_body_contains("not an ELF")
        })
    });
    check("PUT a truncated module is 400", {
        one(addr, "PUT", &deployed, truncated).and_then(|r| {
            r.expect(400)?;
            r.expect_body_contains("invalid function module")
        })
    });
    check("PUT a module under another name is 400", {
        one(addr, "PUT", "/functions/other", hello).and_then(|r| r.expect(400))
    });
    check("PUT an oversized body is 413", oversized(addr, &deployed));
    check(&format!("PUT the {name} module is 201"), {
        one(addr, "PUT", &deployed, hello).and_then(|r| r.expect(201))
    });
    check("GET /functions lists it", {
        one(addr, "GET", "/functions", b"").and_then(|r| {
            r.expect(200)?;
            r.expect_body_contains(&format!("\"name\":\"{name}\""))?;
            r.expect_body_contains(&format!("\"size\":{}", hello.len()))
        })
    });
    check("PUT it again replaces it (200)", {
        one(addr, "PUT", &deployed, hello).and_then(|r| r.expect(200))
    });
    check("POST /invoke/nope is 404", {
        one(addr, "POST", "/invoke/nope", b"x").and_then(|r| r.expect(404))
    });
    check(
        &format!("POST {invoke} runs the function"),
        post_answers(addr, &invoke, b"world", "hello, world!"),
    );
    check("echo returns 3000 bytes unchanged", {
        let body: Vec<u8> = (0..3000u32).map(|i| b'a' + (i % 26) as u8).collect();
        one(addr, "PUT", "/functions/echo", echo)
            .and_then(|r| r.expect(201))
            .and_then(|()| one(addr, "POST", "/invoke/echo", &body))
            .and_then(|r| {
                r.expect(200)?;
                if r.body == body {
                    Ok(())
                } else {
                    Err("echo changed the bytes".into())
                }
            })
    });
    check(
        "a function reading kernel memory gets 500 with the fault; others go on",
        {
            one(addr, "PUT", "/functions/hostile", hostile)
                .and_then(|r| r.expect(201))
                .and_then(|()| one(addr, "POST", "/invoke/hostile", b"read ffff800000100000"))
                .and_then(|r| {
                    r.expect(500)?;
                    r.expect_body_contains("fault")
                })
                .and_then(|()| post_answers(addr, &invoke, b"again", "hello, again!"))
        },
    );
    check("a function exhausting its memory gets 500 'OutOfMemory'", {
        post_expect(addr, "/invoke/hostile", b"alloc", 500, "OutOfMemory")
    });
    check("a runaway function gets 500 'timed out'", {
        post_expect(addr, "/invoke/hostile", b"loop", 500, "timed out")
    });
    check(
        "a runaway function holds up only its own connection",
        runaway_holds_only_its_connection(addr, &invoke),
    );
    check(
        "4 concurrent clients invoke hello",
        concurrent_invokes(addr, &invoke, 4),
    );
    check("GET /metrics has per-function count, errors, latency", {
        one(addr, "GET", "/metrics", b"").and_then(|r| {
            r.expect(200)?;
            r.expect_body_contains(&format!(
                "fjord_function_invocations_total{{function=\"{name}\"}} "
            ))?;
            r.expect_body_contains("fjord_function_errors_total{function=\"hostile\"} ")?;
            r.expect_body_contains(&format!(
                "fjord_function_latency_seconds_count{{function=\"{name}\"}} "
            ))
        })
    });
    check("unknown path is 404, wrong method 405", {
        one(addr, "GET", "/nowhere", b"")
            .and_then(|r| r.expect(404))
            .and_then(|()| one(addr, "DELETE", "/metrics", b""))
            .and_then(|r| r.expect(405))
    });
    check("DELETE is 204, then 404", {
        one(addr, "DELETE", &deployed, b"")
            .and_then(|r| r.expect(204))
            .and_then(|()| one(addr, "DELETE", &deployed, b""))
            .and_then(|r| r.expect(404))
    });
    check(
        "malformed request is 400, then the server serves on",
        malformed(addr),
    );
    check(
        "keep-alive: two requests on one connection",
        keep_alive(addr),
    );
    check("4 concurrent clients", concurrent(addr, 4));
    check("100 keep-alive GET /metrics", {
        metrics_round_trips(addr, 100).map(|times| {
            let mut t = times;
            t.sort();
            println!(
                "  http: GET /metrics round trip over keep-alive: median {:?}, min {:?}, max {:?}",
                t[t.len() / 2],
                t[0],
                t[t.len() - 1]
            );
        })
    });
    out
}

/// A function using the heap (`alloc` types from the libos allocator), and one whose heap
/// runs out.
fn heap_checks(addr: SocketAddr, wordfreq: &[u8]) -> Vec<Outcome> {
    let mut out = Vec::new();
    let mut check = |label: &str, result: Result<(), String>| {
        out.push((format!("http: {label}"), result));
    };
    check("PUT the wordfreq module is 201", {
        one(addr, "PUT", "/functions/wordfreq", wordfreq).and_then(|r| r.expect(201))
    });
    check(
        "wordfreq counts words with a BTreeMap on its heap",
        post_answers(
            addr,
            "/invoke/wordfreq",
            b"The cat, the DOG; the cat!",
            "the 3\ncat 2\ndog 1",
        ),
    );
    check(
        "a function exhausting its heap gets 500; the next call works",
        {
            // 60,000 distinct words need far more than the module's 256 KiB heap.
            let words: String = (0..60_000).map(|i| format!("w{i} ")).collect();
            post_expect(addr, "/invoke/wordfreq", words.as_bytes(), 500, "Panicked")
                .and_then(|()| post_answers(addr, "/invoke/wordfreq", b"b a b", "b 2\na 1"))
        },
    );
    out
}

/// Nested calls over HTTP: chains, asynchronous fan-out, a failing callee, concurrent chains.
/// Runs after [`checks`] (which deployed `hostile`).
fn nested_checks(addr: SocketAddr, apps: &[crate::apps_build::BuiltApp]) -> Vec<Outcome> {
    let mut out = Vec::new();
    let mut check = |label: &str, result: Result<(), String>| {
        out.push((format!("http: {label}"), result));
    };
    for name in ["relay", "fanout"] {
        check(&format!("PUT the {name} module is 201"), {
            apps.iter()
                .find(|a| a.name == name)
                .ok_or_else(|| format!("{name} was not built"))
                .and_then(|a| one(addr, "PUT", &format!("/functions/{name}"), &a.bytes))
                .and_then(|r| r.expect(201))
        });
    }
    check("a chain of 4 nested calls answers through every level", {
        one(addr, "POST", "/invoke/relay", b"3 abc").and_then(|r| {
            r.expect(200)?;
            if r.text().matches("relay@").count() != 3 {
                return Err(format!("expected 3 relay levels: {}", r.text()));
            }
            r.expect_body_contains("sum=294;")
        })
    });
    check("async fan-out to 8 callees collects 8 responses", {
        one(addr, "POST", "/invoke/fanout", b"8").and_then(|r| {
            r.expect(200)?;
            if r.text().matches("leaf@").count() != 8 {
                return Err(format!("expected 8 leaves: {}", r.text()));
            }
            Ok(())
        })
    });
    check(
        "a faulting callee is reported to its caller, which answers",
        post_answers(
            addr,
            "/invoke/relay",
            b"call:hostile:read ffff800000100000",
            "err:CalleeFailed",
        ),
    );
    check(
        "calling an unknown function is reported to the caller",
        post_answers(addr, "/invoke/relay", b"call:nope:x", "err:NoSuchFunction"),
    );
    check("4 concurrent clients run nested chains", {
        let threads: Vec<_> = (0..4)
            .map(|i| {
                thread::spawn(move || -> Result<(), String> {
                    let mut c = Client::connect(addr)?;
                    for j in 0..5u8 {
                        let r =
                            c.request("POST", "/invoke/relay", format!("2 {i}{j}").as_bytes())?;
                        r.expect(200)?;
                        let sum = u32::from(b'0' + i as u8) + u32::from(b'0' + j);
                        r.expect_body_contains(&format!("sum={sum};"))?;
                    }
                    Ok(())
                })
            })
            .collect();
        threads.into_iter().try_for_each(|t| {
            t.join()
                .map_err(|_| "a client thread panicked".to_owned())?
        })
    });
    check(
        "GET /metrics has dispatch, isolation, nested-call and warm-instance counters",
        {
            one(addr, "GET", "/metrics", b"").and_then(|r| {
                r.expect(200)?;
                r.expect_body_contains("fjord_dispatch_total{event=\"dispatched\"} ")?;
                r.expect_body_contains("fjord_isolation_events_total{kind=\"pd_created\"} ")?;
                r.expect_body_contains("fjord_nested_copied_bytes_total 0\n")?;
                let calls = r
                    .text()
                    .lines()
                    .find_map(|l| l.strip_prefix("fjord_nested_calls_total "))
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .ok_or("no fjord_nested_calls_total sample")?;
                // 4 + 8 + 1 + 4 clients x 5 chains x 2 calls at least.
                if calls < 50 {
                    return Err(format!("only {calls} nested calls counted"));
                }
                // Functions that returned went back to their pools as warm instances.
                r.expect_body_contains("fjord_dispatch_total{event=\"resumed_locally\"} ")?;
                r.expect_body_contains("fjord_warm_instances ")?;
                let restored = r
                    .text()
                    .lines()
                    .find_map(|l| {
                        l.strip_prefix("fjord_isolation_events_total{kind=\"instance_restored\"} ")
                    })
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .ok_or("no instance_restored sample")?;
                if restored < 50 {
                    return Err(format!("only {restored} instances restored for reuse"));
                }
                Ok(())
            })
        },
    );
    out
}

/// The paper's workloads over HTTP: deploys every function of the four applications, then runs
/// each operation of `fjord_faas::workloads::OPERATIONS` three times and checks its response.
fn workload_checks(addr: SocketAddr, apps: &[crate::apps_build::BuiltApp]) -> Vec<Outcome> {
    workload_checks_with(addr, apps, "")
}

/// The workloads' checks with every function deployed with the query `query` (`""`: as its
/// manifest says; `"?instances=fork"`: a child forked from a zygote per request).
fn workload_checks_with(
    addr: SocketAddr,
    apps: &[crate::apps_build::BuiltApp],
    query: &str,
) -> Vec<Outcome> {
    use fjord_faas::workloads::{OPERATIONS, WORKLOADS};
    let mut out = Vec::new();
    let mut check = |label: &str, result: Result<(), String>| {
        out.push((format!("http: {label}{query}"), result));
    };
    for workload in WORKLOADS {
        let prefix = format!("{workload}-");
        check(&format!("PUT every {workload} function"), {
            apps.iter()
                .filter(|a| a.name.starts_with(&prefix))
                .try_for_each(
                    |a| match deploy(addr, &format!("{}{query}", a.name), &a.bytes)? {
                        201 | 200 => Ok(()),
                        s => Err(format!("deploying {} answered {s}", a.name)),
                    },
                )
        });
    }
    for op in OPERATIONS {
        check(&format!("{} {} answers (3 times)", op.workload, op.name), {
            let path = format!("/invoke/{}", op.entry);
            let expect = String::from_utf8_lossy(op.expect).into_owned();
            (0..3).try_for_each(|_| post_expect(addr, &path, op.request, 200, &expect))
        });
    }
    check(
        "a malformed workload request is a 500 with the function's error",
        {
            post_expect(
                addr,
                "/invoke/hotel-frontend",
                b"op=nonsense",
                500,
                "BadRequest",
            )
        },
    );
    out
}

/// A hostile tenant against the others (run after the workloads are deployed): it cannot read
/// or change another application's keys, keep PDs past its invocation, get memory it can
/// write and execute, flood the console, or fill the store for others; `/metrics` shows it.
fn tenant_checks(addr: SocketAddr, hostile: &[u8], accel: Accel) -> Vec<Outcome> {
    use fjord_libos::abi::Error;
    let mut out = Vec::new();
    let mut check = |label: &str, result: Result<(), String>| {
        out.push((format!("http: tenants: {label}"), result));
    };
    let code = |e: Error| e.to_ret() as u64;
    let reservation = fjord_faas::workloads::find("hotel", "make_reservation")
        .expect("make_reservation is a paper operation");
    let reserve = || {
        let expect = String::from_utf8_lossy(reservation.expect).into_owned();
        post_expect(
            addr,
            "/invoke/hotel-frontend",
            reservation.request,
            200,
            &expect,
        )
    };
    check("PUT hostile", {
        match deploy(addr, "hostile", hostile) {
            Ok(200 | 201) => Ok(()),
            other => Err(format!("deploying hostile: {other:?}")),
        }
    });
    check("another application's keys cannot be read", {
        reserve().and_then(|()| {
            post_expect(
                addr,
                "/invoke/hostile",
                b"kv-get hotel/last/Cornell_1",
                500,
                "BadRequest",
            )
        })
    });
    check(
        "writing the same key changes only the tenant's own namespace",
        {
            hostile_words(addr, b"kv-put hotel/last/Cornell_1=mallory")
                .and_then(|w| expect_words(&w, &[0]))
                .and_then(|()| {
                    post_answers(
                        addr,
                        "/invoke/hostile",
                        b"kv-get hotel/last/Cornell_1",
                        "mallory",
                    )
                })
                .and_then(|()| reserve())
        },
    );
    check(
        "PDs a function creates are bounded and go with its invocation",
        {
            let want = [16, code(Error::LimitReached)];
            hostile_words(addr, b"cget-flood")
                .and_then(|w| expect_words(&w, &want))
                .and_then(|()| hostile_words(addr, b"cget-flood"))
                .and_then(|w| expect_words(&w, &want))
        },
    );
    check("memory a function can write never becomes executable", {
        let denied = code(Error::AccessDenied);
        hostile_words(addr, b"wx").and_then(|w| expect_words(&w, &[denied, denied, denied]))
    });
    check("a console flood stops at the invocation's log_limit", {
        hostile_words(addr, b"log-flood")
            .and_then(|w| expect_words(&w, &[2048 / 256, code(Error::LimitReached)]))
    });
    check("a full namespace refuses only its own function", {
        hostile_words(addr, b"kv-fill").and_then(|w| {
            if w.len() != 2 || w[1] != code(Error::LimitReached) || w[0] == 0 {
                return Err(format!("kv-fill answered {w:?}"));
            }
            reserve()
        })
    });
    check("a panic and a time-out are answered 500", {
        post_expect(addr, "/invoke/hostile", b"panic", 500, "Panicked")
    });
    check(
        "/metrics shows namespaces, console drops, time-outs and panics",
        {
            one(addr, "GET", "/metrics", b"").and_then(|r| {
                r.expect(200)?;
                for needle in [
                    "fjord_kv_namespace_bytes{namespace=\"hotel\"} ",
                    "fjord_kv_namespace_quota_bytes{namespace=\"hotel\"} 1048576",
                    "fjord_kv_namespace_entries{namespace=\"hostile\"} ",
                    "fjord_kv_namespace_refused_total{namespace=\"hostile\"} 1",
                    "fjord_console_dropped_messages_total{reason=\"invocation_limit\"} 1",
                    "fjord_isolation_events_total{kind=\"function_timeout\"} ",
                    "fjord_isolation_events_total{kind=\"function_panic\"} ",
                ] {
                    r.expect_body_contains(needle)?;
                }
                for zero in ["function_timeout\"} 0\n", "function_panic\"} 0\n"] {
                    if r.text().contains(zero) {
                        return Err(format!("{zero:?} in /metrics"));
                    }
                }
                Ok(())
            })
        },
    );
    // Last: its random calls may log and fill its namespace, which the counts above exclude.
    check(
        "20,000 random system calls from ring 3 get results or error codes; others go on",
        {
            let expect = String::from_utf8_lossy(reservation.expect).into_owned();
            let hotel = (
                "/invoke/hotel-frontend",
                reservation.request,
                expect.as_str(),
            );
            // Under KVM the calls go in smaller invocations: where it emulates ring 0 a call
            // costs tens of times more than under TCG, and each invocation has one second.
            let per_invocation = match accel {
                Accel::Tcg => crate::fuzz::CALLS_PER_INVOCATION,
                Accel::Kvm => 200,
            };
            crate::fuzz::sysfuzz(addr, 1, 20_000, per_invocation, hotel).and_then(|t| {
                match t.calls {
                    20_000 => Ok(()),
                    n => Err(format!("{n} calls made")),
                }
            })
        },
    );
    out
}

/// The μprocess API: start a program, list it, kill it; functions and unknown names refused;
/// a fork bomb held at its program's bound while another program starts.
fn process_checks(
    addr: SocketAddr,
    sleeper: &[u8],
    forktest: &[u8],
    forkbomb: &[u8],
) -> Vec<Outcome> {
    let mut out = Vec::new();
    let mut check = |label: &str, result: Result<(), String>| {
        out.push((format!("http: processes: {label}"), result));
    };
    let listed = |pid: &str| -> Result<bool, String> {
        let r = one(addr, "GET", "/processes", b"")?;
        r.expect(200)?;
        Ok(r.text().contains(&format!("\"pid\":{pid},")))
    };
    check("PUT the sleeper, forktest and forkbomb programs", {
        [
            ("sleeper", sleeper),
            ("forktest", forktest),
            ("forkbomb", forkbomb),
        ]
        .into_iter()
        .try_for_each(|(name, bytes)| match deploy(addr, name, bytes)? {
            200 | 201 => Ok(()),
            s => Err(format!("deploying {name} answered {s}")),
        })
    });
    let mut pid = String::new();
    check("POST /processes/sleeper starts it (201, its pid)", {
        one(addr, "POST", "/processes/sleeper", b"").and_then(|r| {
            r.expect(201)?;
            let text = r.text();
            pid = text
                .trim()
                .strip_prefix("{\"pid\":")
                .and_then(|t| t.strip_suffix('}'))
                .ok_or_else(|| format!("no pid in {text:?}"))?
                .to_owned();
            Ok(())
        })
    });
    check("GET /processes lists it, blocked in sleep", {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let r = one(addr, "GET", "/processes", b"");
            match r {
                Ok(r)
                    if r.text().contains(&format!(
                        "\"pid\":{pid},\"ppid\":1,\"program\":\"sleeper\",\"state\":\"blocked\""
                    )) =>
                {
                    break Ok(());
                }
                Ok(r) if Instant::now() > deadline => {
                    break Err(format!("not listed as blocked: {}", r.text()));
                }
                Err(e) => break Err(e),
                _ => thread::sleep(Duration::from_millis(100)),
            }
        }
    });
    check("DELETE /processes/<pid> kills it (204), then it is gone", {
        one(addr, "DELETE", &format!("/processes/{pid}"), b"")
            .and_then(|r| r.expect(204))
            .and_then(|()| {
                let deadline = Instant::now() + Duration::from_secs(10);
                while listed(&pid)? {
                    if Instant::now() > deadline {
                        return Err("still listed after the kill".into());
                    }
                    thread::sleep(Duration::from_millis(100));
                }
                Ok(())
            })
            .and_then(|()| one(addr, "DELETE", &format!("/processes/{pid}"), b""))
            .and_then(|r| r.expect(404))
    });
    check("a program that forks runs to its end", {
        one(addr, "POST", "/processes/forktest", b"").and_then(|r| r.expect(201))
    });
    check(
        "GET /metrics counts μprocesses and the pages lazy forks copied",
        {
            // forktest (started above) forks in the default mode, copy-on-pointer-access.
            (|| -> Result<(), String> {
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
                loop {
                    let r = one(addr, "GET", "/metrics", b"")?;
                    let text = r.text();
                    let copied = text
                        .lines()
                        .find(|l| l.starts_with("fjord_ufork_pages_total{event=\"copied\"}"))
                        .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok());
                    if !text.contains("fjord_uprocesses ") {
                        break Err("no fjord_uprocesses gauge".to_owned());
                    }
                    match copied {
                        Some(n) if n > 0 => break Ok(()),
                        _ if std::time::Instant::now() > deadline => {
                            break Err(format!("no copied pages counted: {copied:?}"));
                        }
                        _ => std::thread::sleep(std::time::Duration::from_millis(200)),
                    }
                }
            })()
        },
    );
    check(
        "copy modes and isolation levels are options of POST /processes",
        {
            // The forktest started above ends with a fork bomb up to its program's bound:
            // more of it can start once that one has ended.
            program_ended(addr, "forktest", Duration::from_secs(120))
                .and_then(|()| one(addr, "POST", "/processes/forktest?fork=coa", b""))
                .and_then(|r| r.expect(201))
                .and_then(|()| {
                    one(
                        addr,
                        "POST",
                        "/processes/forktest?fork=full&isolation=non-adversarial",
                        b"",
                    )
                })
                .and_then(|r| r.expect(201))
                .and_then(|()| one(addr, "POST", "/processes/sleeper?fork=cow", b""))
                .and_then(|r| {
                    r.expect(400)?;
                    r.expect_body_contains("cow needs isolation=none")
                })
                .and_then(|()| one(addr, "POST", "/processes/sleeper?fork=quick", b""))
                .and_then(|r| r.expect(400))
        },
    );
    check(
        "a fork bomb stops at its program's bound (429 for one more), another program starts, and the operator ends them",
        (|| -> Result<(), String> {
            let pids_of = |program: &str| pids_of(addr, program);
            // The forktests started above end first (their own fork bombs fill their bound).
            program_ended(addr, "forktest", Duration::from_secs(120))?;
            one(addr, "POST", "/processes/forkbomb", b"")?.expect(201)?;
            let deadline = Instant::now() + Duration::from_secs(60);
            while pids_of("forkbomb")?.len() < 64 {
                if Instant::now() > deadline {
                    return Err(format!(
                        "forkbomb holds {} μprocesses",
                        pids_of("forkbomb")?.len()
                    ));
                }
                thread::sleep(Duration::from_millis(200));
            }
            thread::sleep(Duration::from_millis(500));
            let held = pids_of("forkbomb")?.len();
            if held != 64 {
                return Err(format!(
                    "forkbomb holds {held} μprocesses, not its bound of 64"
                ));
            }
            let more = one(addr, "POST", "/processes/forkbomb", b"")?;
            more.expect(429)?;
            more.expect_body_contains("max_processes = 64")?;
            one(addr, "POST", "/processes/sleeper", b"")?.expect(201)?;
            for program in ["forkbomb", "sleeper"] {
                for pid in pids_of(program)? {
                    let _ = one(addr, "DELETE", &format!("/processes/{pid}"), b"")?;
                }
            }
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let left = pids_of("forkbomb")?.len() + pids_of("sleeper")?.len();
                if left == 0 {
                    break Ok(());
                }
                if Instant::now() > deadline {
                    break Err(format!("{left} μprocesses left after the kills"));
                }
                thread::sleep(Duration::from_millis(200));
            }
        })(),
    );
    check("a function is not a program (400), an unknown name 404", {
        one(addr, "POST", "/processes/echo", b"")
            .and_then(|r| r.expect(400))
            .and_then(|()| one(addr, "POST", "/processes/nope", b""))
            .and_then(|r| r.expect(404))
            .and_then(|()| one(addr, "POST", "/invoke/sleeper", b""))
            .and_then(|r| {
                r.expect(500)?;
                r.expect_body_contains("not a function")
            })
    });
    out
}

/// `POST /invoke/hostile` with `body`: the little-endian words of its 200 answer.
fn hostile_words(addr: SocketAddr, body: &[u8]) -> Result<Vec<u64>, String> {
    let r = one(addr, "POST", "/invoke/hostile", body)?;
    r.expect(200)?;
    Ok(r.body
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect())
}

fn expect_words(got: &[u64], want: &[u64]) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("answered {got:x?}, expected {want:x?}"))
    }
}

/// `POST path` with `body`; passes when the answer is 200 with exactly `want` as its body
/// (ignoring a trailing newline).
fn post_answers(addr: SocketAddr, path: &str, body: &[u8], want: &str) -> Result<(), String> {
    one(addr, "POST", path, body).and_then(|r| {
        r.expect(200)?;
        r.expect_body_eq(want)
    })
}

/// `POST path` with `body`; passes when the answer has `status` and its body contains
/// `needle`.
fn post_expect(
    addr: SocketAddr,
    path: &str,
    body: &[u8],
    status: u16,
    needle: &str,
) -> Result<(), String> {
    one(addr, "POST", path, body).and_then(|r| {
        r.expect(status)?;
        r.expect_body_contains(needle)
    })
}

/// Deploys the module `bytes` as `name`; returns the HTTP status.
pub fn deploy(addr: SocketAddr, name: &str, bytes: &[u8]) -> Result<u16, String> {
    one(addr, "PUT", &format!("/functions/{name}"), bytes).map(|r| r.status)
}

/// While `hostile loop` spins on one connection until its time limit (1 s), an invocation on
/// another connection is answered: functions run on executor cores, and the server keeps
/// serving while they do (this needs two executors).
fn runaway_holds_only_its_connection(addr: SocketAddr, path: &str) -> Result<(), String> {
    let mut slow = Client::connect(addr)?;
    slow.send_raw(
        b"POST /invoke/hostile HTTP/1.1\r\nHost: fjord\r\nContent-Length: 4\r\n\r\nloop",
    )?;
    thread::sleep(Duration::from_millis(100));
    post_answers(addr, path, b"meanwhile", "hello, meanwhile!")?;
    if slow.has_bytes()? {
        return Err("the runaway function was answered first: the server waited for it".into());
    }
    let r = slow.read_response()?;
    r.expect(500)?;
    r.expect_body_contains("timed out")
}

/// `clients` threads each invoking `path` five times on their own connection.
fn concurrent_invokes(addr: SocketAddr, path: &str, clients: usize) -> Result<(), String> {
    let threads: Vec<_> = (0..clients)
        .map(|i| {
            let path = path.to_owned();
            thread::spawn(move || -> Result<(), String> {
                let mut c = Client::connect(addr)?;
                for j in 0..5 {
                    let who = format!("c{i}r{j}");
                    let r = c.request("POST", &path, who.as_bytes())?;
                    r.expect(200)?;
                    r.expect_body_eq(&format!("hello, {who}!"))?;
                }
                Ok(())
            })
        })
        .collect();
    for t in threads {
        t.join()
            .map_err(|_| "a client thread panicked".to_owned())??;
    }
    Ok(())
}

/// A port that was free on 127.0.0.1 a moment ago.
/// A port of 127.0.0.1 nobody listens on now.
pub fn free_port() -> Result<u16> {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("binding a free port")?;
    Ok(l.local_addr()?.port())
}

/// The function name in a module's `.fjord_manifest` (`name=` line), found in the raw bytes.
pub fn manifest_name(module: &[u8]) -> Option<String> {
    let magic = b"fjord-manifest=1\n";
    let start = module.windows(magic.len()).position(|w| w == magic)?;
    let text = &module[start..];
    let end = text.iter().position(|&b| b == 0).unwrap_or(text.len());
    let text = std::str::from_utf8(&text[..end]).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("name="))
        .map(|n| n.trim().to_owned())
}

fn oversized(addr: SocketAddr, path: &str) -> Result<(), String> {
    let mut c = Client::connect(addr)?;
    c.send_raw(
        format!("PUT {path} HTTP/1.1\r\nHost: fjord\r\nContent-Length: 67108864\r\n\r\n")
            .as_bytes(),
    )?;
    let r = c.read_response()?;
    r.expect(413)?;
    c.closed_by_server()
}

fn malformed(addr: SocketAddr) -> Result<(), String> {
    let mut c = Client::connect(addr)?;
    c.send_raw(b"THIS IS NOT HTTP\r\n\r\n")?;
    let r = c.read_response()?;
    r.expect(400)?;
    if r.header("connection") != Some("close") {
        return Err(format!("400 without Connection: close: {:?}", r.headers));
    }
    c.closed_by_server()?;
    one(addr, "GET", "/functions", b"")?.expect(200)
}

fn keep_alive(addr: SocketAddr) -> Result<(), String> {
    let mut c = Client::connect(addr)?;
    c.request("GET", "/functions", b"")?.expect(200)?;
    let r = c.request("GET", "/metrics", b"")?;
    r.expect(200)?;
    r.expect_body_contains("fjord_gateway_connections_total")
}

fn concurrent(addr: SocketAddr, clients: usize) -> Result<(), String> {
    // All connect first, so the server really holds `clients` connections at once.
    let conns: Vec<Client> = (0..clients)
        .map(|_| Client::connect(addr))
        .collect::<Result<_, _>>()?;
    let handles: Vec<_> = conns
        .into_iter()
        .enumerate()
        .map(|(i, mut c)| {
            thread::spawn(move || -> Result<(), String> {
                for _ in 0..5 {
                    let path = if i % 2 == 0 { "/metrics" } else { "/functions" };
                    c.request("GET", path, b"")?.expect(200)?;
                }
                Ok(())
            })
        })
        .collect();
    for h in handles {
        h.join()
            .map_err(|_| "client thread panicked".to_owned())??;
    }
    Ok(())
}

/// Round-trip times of `count` `GET /metrics` requests on one keep-alive connection.
pub fn metrics_round_trips(addr: SocketAddr, count: usize) -> Result<Vec<Duration>, String> {
    let mut c = Client::connect(addr)?;
    c.request("GET", "/metrics", b"")?.expect(200)?;
    let mut times = Vec::with_capacity(count);
    for _ in 0..count {
        let t = Instant::now();
        c.request("GET", "/metrics", b"")?.expect(200)?;
        times.push(t.elapsed());
    }
    Ok(times)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixture_manifest_names_hello() {
        let bytes = std::fs::read(crate::workspace::root().join(FIXTURE)).unwrap();
        assert_eq!(manifest_name(&bytes).as_deref(), Some("hello"));
        assert_eq!(manifest_name(b"no manifest"), None);
    }

    /// [`promtool_check`] passes only a text Prometheus's parser and linter are silent on:
    /// parse errors and lint problems both fail, with promtool's lines.
    #[test]
    fn promtool_parse_errors_and_lint_problems_fail() {
        let promtool = host_deps::ensure_promtool().expect("promtool is needed");
        let clean = "# HELP a_total A.\n# TYPE a_total counter\na_total{k=\"v\\\"\"} 1\n";
        assert_eq!(promtool_check(&promtool, clean), Ok(()));
        let seconds = "# HELP a_seconds A.\n# TYPE a_seconds histogram\n\
                       a_seconds_bucket{le=\"1e-06\"} 1\na_seconds_bucket{le=\"+Inf\"} 1\n\
                       a_seconds_sum 0.0000015\na_seconds_count 1\n";
        assert_eq!(promtool_check(&promtool, seconds), Ok(()));
        for (lint_only, problem) in [
            (
                "# HELP a A.\n# TYPE a counter\na 1\n",
                "counter metrics should have \"_total\" suffix",
            ),
            (
                "# HELP a_nanoseconds A.\n# TYPE a_nanoseconds gauge\na_nanoseconds 1\n",
                "use base unit \"seconds\"",
            ),
        ] {
            let err = promtool_check(&promtool, lint_only).unwrap_err();
            assert!(err.contains(problem), "{lint_only:?}: {err}");
        }
        for broken in [
            "# HELP a_total A.\n# TYPE a_total counter\na_total 1\n# HELP a_total A.\n",
            "a_total{k=\"\\q\"} 1\n",
            "a_total{k=v} 1\n",
        ] {
            let err = promtool_check(&promtool, broken).unwrap_err();
            assert!(err.contains("parsing error"), "{broken:?}: {err}");
        }
    }

    /// The per-function families as the gateway renders them, in either latency unit, are
    /// clean under promtool (nothing printed, exit 0).
    #[test]
    fn rendered_function_metrics_pass_promtool() {
        use fjord_faas::FunctionName;
        use fjord_faas::metrics::{Buckets, LatencyUnit, Metrics};
        let promtool = host_deps::ensure_promtool().expect("promtool is needed");
        for (unit, buckets, family) in [
            (
                LatencyUnit::Nanoseconds,
                Buckets::nanoseconds(),
                "fjord_function_latency_seconds",
            ),
            (
                LatencyUnit::Instructions,
                Buckets::instructions(),
                "fjord_function_latency_instructions",
            ),
        ] {
            let mut m = Metrics::new(unit, buckets);
            let f = FunctionName::new("hello").unwrap();
            m.record_invocation(&f, 1_500, true);
            m.record_invocation(&f, 2_500_000_000, false);
            let sent = m
                .register_counter("fjord_gateway_sent_bytes_total", "Bytes sent.", &[])
                .unwrap();
            m.add(sent, 7).unwrap();
            let text = m.render();
            assert!(
                text.contains(&format!("# TYPE {family} histogram\n")),
                "{text}"
            );
            assert_eq!(promtool_check(&promtool, &text), Ok(()), "{text}");
        }
    }

    /// The whole suite against a built kernel: `FJORD_KERNEL=<path> [FJORD_MACHINE=q35] cargo
    /// test -p xtask e2e_http -- --ignored --nocapture` (normally run by `cargo xtask test`).
    #[test]
    #[ignore = "boots QEMU; needs FJORD_KERNEL"]
    fn gateway_end_to_end() {
        let kernel = std::env::var("FJORD_KERNEL").expect("set FJORD_KERNEL to the kernel ELF");
        let machine = match std::env::var("FJORD_MACHINE").as_deref() {
            Ok("q35") => Machine::Q35,
            _ => Machine::Microvm,
        };
        let outcomes = run(Path::new(&kernel), machine, Accel::Tcg).unwrap();
        let mut failed = 0;
        for (name, r) in &outcomes {
            match r {
                Ok(()) => println!("ok   {name}"),
                Err(e) => {
                    failed += 1;
                    println!("FAIL {name}: {e}");
                }
            }
        }
        assert_eq!(failed, 0, "{failed} of {} checks failed", outcomes.len());
    }
}
