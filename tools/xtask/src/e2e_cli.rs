//! End-to-end tests of `cargo xtask fn …` and `cargo xtask metrics`: one gateway VM (booted as
//! `e2e_http` boots it), driven through the functions that implement the commands, with their
//! output captured in a buffer; then every command against an address where nothing listens.

use std::fs;
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};

use crate::apps_build;
use crate::e2e_http::{Outcome, boot_gateway};
use crate::fn_cli::{self, CONNECT_LIMIT, Gateway, write_url_file};
use crate::qemu::Machine;
use crate::test_runner::BootSetup;
use crate::workspace;

/// What a command printed, or its error (with causes).
type Printed = Result<String, String>;

/// A command run against a gateway, printing into a buffer.
type Verb<'a> = &'a dyn Fn(&Gateway, &mut Vec<u8>) -> Result<()>;

/// Runs one command implementation with a buffer as its output.
fn printed(command: impl FnOnce(&mut Vec<u8>) -> Result<()>) -> Printed {
    let mut out = Vec::new();
    match command(&mut out) {
        Ok(()) => Ok(String::from_utf8_lossy(&out).into_owned()),
        Err(e) => Err(format!("{e:#}")),
    }
}

/// `Ok` iff the command succeeded and its output passes `judge`.
fn expect_ok(got: Printed, judge: impl FnOnce(&str) -> Result<(), String>) -> Result<(), String> {
    let text = got.map_err(|e| format!("failed: {e}"))?;
    judge(&text).map_err(|why| format!("{why}; output {text:?}"))
}

/// `Ok` iff the command failed with an error containing every one of `needles`.
fn expect_err(got: Printed, needles: &[&str]) -> Result<(), String> {
    match got {
        Ok(text) => Err(format!("succeeded, printing {text:?}")),
        Err(e) => match needles.iter().find(|n| !e.contains(*n)) {
            Some(n) => Err(format!("error lacks {n:?}: {e}")),
            None => Ok(()),
        },
    }
}

/// Boots a gateway VM and runs every check against it, then the checks that need no VM.
pub fn run(setup: &BootSetup) -> Result<Vec<Outcome>> {
    let apps = apps_build::build_apps().context("building the function modules")?;
    let hello = apps
        .iter()
        .find(|a| a.name == "hello")
        .context("app hello was not built")?;
    let (mut vm, addr) = boot_gateway(
        &setup.kernel,
        Some(&setup.qemu),
        Machine::Microvm,
        setup.accel,
    )?;
    let mut outcomes = live_checks(&Gateway::at(addr), &hello.path);
    vm.kill();
    outcomes.extend(dead_checks(&hello.path));
    Ok(outcomes)
}

/// The commands against a running gateway with no functions, in order.
fn live_checks(gateway: &Gateway, hello_elf: &Path) -> Vec<Outcome> {
    let hello_path = hello_elf.display().to_string();
    let hello_size = fs::metadata(hello_elf).map_or(0, |m| m.len());
    let request_file = workspace::target_dir().join("fjord/e2e-cli-request.txt");
    let mut out = Vec::new();
    let mut check = |label: &str, result: Result<(), String>| {
        out.push((format!("cli: {label}"), result));
    };

    check("fn deploy <hello ELF file> deploys it as hello", {
        let got = printed(|o| fn_cli::deploy(gateway, &hello_path, o));
        expect_ok(got, |text| {
            if text.starts_with("deployed hello: 201 Created (")
                && text.contains(&format!("{hello_size} bytes, generation 1)"))
                && text.lines().count() == 1
            {
                Ok(())
            } else {
                Err("not one `deployed hello: 201 Created (… generation 1)` line".into())
            }
        })
    });
    check("fn deploy hotel deploys every hotel-* function", {
        let got = printed(|o| fn_cli::deploy(gateway, "hotel", o));
        expect_ok(got, |text| {
            let want = apps_build::select("hotel");
            let lines: Vec<&str> = text.lines().collect();
            let deployed = want.iter().all(|f| {
                lines
                    .iter()
                    .any(|l| l.starts_with(&format!("deployed {f}: 201 Created")))
            });
            if deployed && lines.len() == want.len() {
                Ok(())
            } else {
                Err(format!(
                    "expected one `deployed …` line for each of {want:?}"
                ))
            }
        })
    });
    check("fn deploy hello again replaces it (200)", {
        let got = printed(|o| fn_cli::deploy(gateway, &hello_path, o));
        expect_ok(got, |text| {
            // Generations count every deployment: hello's first was 1, the hotel's 2 to 8.
            let generation = 2 + apps_build::select("hotel").len();
            if text.starts_with("replaced hello: 200 OK (")
                && text.contains(&format!("generation {generation})"))
            {
                Ok(())
            } else {
                Err(format!(
                    "no `replaced hello: 200 OK (… generation {generation})` line"
                ))
            }
        })
    });
    check("fn list shows them with size and generation", {
        let got = printed(|o| fn_cli::list(gateway, o));
        expect_ok(got, |text| {
            let rows: Vec<Vec<&str>> = text
                .lines()
                .map(|l| l.split_whitespace().collect())
                .collect();
            let generation = 2 + apps_build::select("hotel").len();
            let hello_row = [
                "hello".to_owned(),
                hello_size.to_string(),
                generation.to_string(),
            ];
            let has = |row: &[String]| rows.iter().any(|r| r == row);
            if rows
                .first()
                .is_none_or(|h| h != &["NAME", "SIZE", "GENERATION"])
            {
                Err("no NAME SIZE GENERATION header".into())
            } else if !has(&hello_row) {
                Err(format!("no row {hello_row:?}"))
            } else if rows.len() != 1 + 1 + apps_build::select("hotel").len()
                || !rows.iter().any(|r| r[0] == "hotel-frontend")
            {
                Err("expected hello and the 7 hotel-* functions".into())
            } else {
                Ok(())
            }
        })
    });
    check("fn invoke hello --data world prints the response", {
        let got = printed(|o| fn_cli::invoke(gateway, "hello", b"world", o));
        expect_ok(got, |text| {
            (text.trim_end() == "hello, world!")
                .then_some(())
                .ok_or_else(|| "not `hello, world!`".into())
        })
    });
    check("fn invoke hello --data @FILE sends the file", {
        let arg = format!("@{}", request_file.display());
        // The file's bytes exactly (no newline), so the answer is `hello, from a file!`.
        let got = request_file
            .parent()
            .map_or(Ok(()), fs::create_dir_all)
            .and_then(|()| fs::write(&request_file, "from a file"))
            .map_err(anyhow::Error::from)
            .and_then(|()| fn_cli::request_body(Some(&arg)))
            .map_err(|e| format!("{e:#}"))
            .and_then(|body| printed(|o| fn_cli::invoke(gateway, "hello", &body, o)));
        let _ = fs::remove_file(&request_file);
        expect_ok(got, |text| {
            (text.trim_end() == "hello, from a file!")
                .then_some(())
                .ok_or_else(|| "not `hello, from a file!`".into())
        })
    });
    check("fn invoke hotel-frontend answers a workload request", {
        match fjord_faas::workloads::find("hotel", "search_nearby") {
            None => Err("no hotel operation in fjord_faas::workloads".into()),
            Some(op) => {
                let got = printed(|o| fn_cli::invoke(gateway, "hotel-frontend", op.request, o));
                let want = String::from_utf8_lossy(op.expect).into_owned();
                expect_ok(got, |text| {
                    text.contains(&want)
                        .then_some(())
                        .ok_or_else(|| format!("lacks {want:?}"))
                })
            }
        }
    });
    check("fn invoke of an unknown function fails with 404", {
        let got = printed(|o| fn_cli::invoke(gateway, "nope", b"x", o));
        expect_err(got, &["invoking nope: 404 Not Found", "no such function"])
    });
    check("fn deploy of a file without a manifest fails", {
        let not_a_module = workspace::root().join("Cargo.toml");
        let got = printed(|o| fn_cli::deploy(gateway, &not_a_module.display().to_string(), o));
        expect_err(got, &["has no Fjord manifest"])
    });
    check("fn deploy of an unknown app fails and names the apps", {
        let got = printed(|o| fn_cli::deploy(gateway, "no-such-app", o));
        expect_err(got, &["neither a file nor an app", "hotel"])
    });
    check("fn remove hello, then fn list lacks it", {
        let got = printed(|o| fn_cli::remove(gateway, "hello", o));
        expect_ok(got, |text| {
            (text == "removed hello\n")
                .then_some(())
                .ok_or_else(|| "not `removed hello`".into())
        })
        .and_then(|()| {
            expect_ok(printed(|o| fn_cli::list(gateway, o)), |text| {
                if text.lines().any(|l| l.starts_with("hello ")) {
                    Err("hello is still listed".into())
                } else if !text.contains("hotel-frontend") {
                    Err("the hotel functions are gone too".into())
                } else {
                    Ok(())
                }
            })
        })
    });
    check("fn remove of an absent function fails with 404", {
        let got = printed(|o| fn_cli::remove(gateway, "hello", o));
        expect_err(got, &["removing hello: 404 Not Found"])
    });
    check("metrics prints /metrics with fjord_kernel_free_frames", {
        let got = printed(|o| fn_cli::metrics(gateway, None, o));
        expect_ok(got, |text| {
            if text.contains("# TYPE ") && text.contains("\nfjord_kernel_free_frames ") {
                Ok(())
            } else {
                Err("lacks `# TYPE` or `fjord_kernel_free_frames`".into())
            }
        })
    });
    check("metrics --grep keeps only matching lines", {
        let got = printed(|o| fn_cli::metrics(gateway, Some("fjord_kernel_free_frames"), o));
        expect_ok(got, |text| {
            if text.lines().count() >= 1
                && text.lines().all(|l| l.contains("fjord_kernel_free_frames"))
            {
                Ok(())
            } else {
                Err("other lines, or none".into())
            }
        })
        .and_then(|()| {
            let got = printed(|o| fn_cli::metrics(gateway, Some("no_such_metric_xyz"), o));
            expect_err(got, &["no line of /metrics contains"])
        })
    });
    check("the URL file cargo xtask run writes finds this gateway", {
        let file = workspace::target_dir().join("fjord/e2e-cli-gateway-url");
        let got = write_url_file(&file, gateway.url())
            .and_then(|()| Gateway::from_file(&file))
            .map_err(|e| format!("{e:#}"))
            .and_then(|found| printed(|o| fn_cli::list(&found, o)));
        let _ = fs::remove_file(&file);
        expect_ok(got, |text| {
            text.contains("hotel-frontend")
                .then_some(())
                .ok_or_else(|| "no hotel-frontend".into())
        })
    });
    out
}

/// Every command against a URL where nothing listens (from `--url` and from a stale URL file)
/// fails within the connect limit with "no Fjord is running".
fn dead_checks(hello_elf: &Path) -> Vec<Outcome> {
    // Port 1 (tcpmux): nothing listens on it here, while an ephemeral port bound and released
    // could be taken at once by a test or a VM started in parallel.
    let url = "http://127.0.0.1:1/".to_owned();
    let stale = workspace::target_dir().join("fjord/e2e-cli-stale-url");
    let gateways = [
        (
            "--url",
            Gateway::new(&url, "from --url").map_err(|e| format!("{e:#}")),
        ),
        (
            "a stale URL file",
            write_url_file(&stale, &url)
                .and_then(|()| Gateway::from_file(&stale))
                .map_err(|e| format!("{e:#}")),
        ),
    ];
    let _ = fs::remove_file(&stale);
    let hello_path = hello_elf.display().to_string();
    let mut out = Vec::new();
    for (how, gateway) in gateways {
        let verbs: [(&str, Verb); 6] = [
            ("fn deploy <file>", &|g, o| {
                fn_cli::deploy(g, &hello_path, o)
            }),
            ("fn deploy hotel", &|g, o| fn_cli::deploy(g, "hotel", o)),
            ("fn invoke", &|g, o| fn_cli::invoke(g, "hello", b"x", o)),
            ("fn list", &|g, o| fn_cli::list(g, o)),
            ("fn remove", &|g, o| fn_cli::remove(g, "hello", o)),
            ("metrics", &|g, o| fn_cli::metrics(g, None, o)),
        ];
        let result = gateway.and_then(|gateway| {
            for (verb, command) in verbs {
                let started = Instant::now();
                let got = printed(|o| command(&gateway, o));
                let took = started.elapsed();
                expect_err(
                    got,
                    &["no Fjord is running (", "start one with `cargo xtask run`"],
                )
                .map_err(|e| format!("{verb}: {e}"))?;
                if took >= CONNECT_LIMIT {
                    return Err(format!("{verb} took {took:?}"));
                }
            }
            Ok(())
        });
        out.push((
            format!("cli: every command fails fast when nothing listens ({how})"),
            result,
        ));
    }
    out
}
