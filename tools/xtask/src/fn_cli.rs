//! `cargo xtask fn deploy|invoke|list|remove` and `cargo xtask metrics`: the gateway's HTTP API
//! from the command line, against a running Fjord.
//!
//! Which Fjord: `--url`, else `$FJORD_URL`, else the URL `cargo xtask run` writes to
//! [`url_file`] (`<target>/fjord/gateway-url`) once its gateway answers and removes when QEMU
//! exits. A URL where nothing listens (a stale file, a stopped VM) fails within
//! [`CONNECT_LIMIT`] with "no Fjord is running (…); start one with `cargo xtask run`".
//!
//! Every command writes its output to an `impl Write` (stdout from the command line, a buffer in
//! the end-to-end tests) and returns `Err` with the status and reason when the gateway refuses.

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use serde::Deserialize;

use crate::apps_build;
use crate::e2e_http::manifest_name;
use crate::http_client::{Client, HttpResponse};
use crate::workspace;

/// How long connecting to the gateway may take: a refused connection fails at once, an address
/// that drops packets after this.
pub const CONNECT_LIMIT: Duration = Duration::from_secs(2);
/// How long one read or write on a connection may block (an invocation's own time limit is far
/// shorter).
const IO_LIMIT: Duration = Duration::from_secs(30);
/// The environment variable naming the gateway.
pub const URL_ENV: &str = "FJORD_URL";
/// What to do when no Fjord answers.
const START_HINT: &str = "start one with `cargo xtask run`";

/// Where `cargo xtask run` writes its gateway's base URL while the VM runs.
pub fn url_file() -> PathBuf {
    workspace::target_dir().join("fjord").join("gateway-url")
}

/// A Fjord gateway to talk to.
#[derive(Clone, Debug)]
pub struct Gateway {
    /// The base URL as given (`http://127.0.0.1:8080/`).
    url: String,
    /// Where the URL came from (`--url`, `$FJORD_URL`, the URL file), for error messages.
    source: String,
    /// The address it resolves to.
    addr: SocketAddr,
    /// A path prefix from the URL (empty, or `/something` without a trailing slash).
    prefix: String,
}

impl Gateway {
    /// The gateway at `url` (`http://host:port[/prefix]` or `host:port`); `source` says where the
    /// URL came from.
    pub fn new(url: &str, source: impl Into<String>) -> Result<Gateway> {
        let source = source.into();
        let (authority, prefix) =
            split_url(url).with_context(|| format!("bad Fjord URL {url:?} ({source})"))?;
        let addr = authority
            .to_socket_addrs()
            .ok()
            .and_then(|mut addrs| addrs.next())
            .ok_or_else(|| anyhow!("cannot resolve {authority:?} in the Fjord URL ({source})"))?;
        Ok(Gateway {
            url: url.trim().to_owned(),
            source,
            addr,
            prefix,
        })
    }

    /// The gateway at `addr` (as the end-to-end tests boot it).
    pub fn at(addr: SocketAddr) -> Gateway {
        Gateway {
            url: format!("http://{addr}/"),
            source: "given".to_owned(),
            addr,
            prefix: String::new(),
        }
    }

    /// The gateway named by `flag` (`--url`), else by `$FJORD_URL`, else by [`url_file`].
    pub fn locate(flag: Option<&str>) -> Result<Gateway> {
        if let Some(url) = flag {
            return Gateway::new(url, "from --url");
        }
        if let Some(url) = std::env::var(URL_ENV).ok().filter(|u| !u.trim().is_empty()) {
            return Gateway::new(&url, format!("from ${URL_ENV}"));
        }
        Gateway::from_file(&url_file())
    }

    /// The gateway whose URL `path` holds (written by `cargo xtask run`).
    pub fn from_file(path: &Path) -> Result<Gateway> {
        let text = match fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
                "no Fjord is running (no --url, no ${URL_ENV}, no {}); {START_HINT}",
                path.display()
            ),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        let url = text.lines().next().unwrap_or_default().trim();
        if url.is_empty() {
            bail!(
                "no Fjord is running ({} is empty); {START_HINT}",
                path.display()
            );
        }
        Gateway::new(url, format!("from {}", path.display()))
    }

    /// The base URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The address the URL resolves to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// One request on a fresh connection. A failed connection is "no Fjord is running".
    pub fn request(&self, method: &str, path: &str, body: &[u8]) -> Result<HttpResponse> {
        let mut client = Client::connect_with(self.addr, CONNECT_LIMIT, IO_LIMIT).map_err(|e| {
            anyhow!(
                "no Fjord is running (nothing answers at {}, {}: {e}); {START_HINT}",
                self.url,
                self.source
            )
        })?;
        client
            .request(method, &format!("{}{path}", self.prefix), body)
            .map_err(|e| {
                anyhow!(
                    "Fjord at {} ({}) did not answer {method} {path}: {e}; is it still booting? \
                     If not, {START_HINT}",
                    self.url,
                    self.source
                )
            })
    }
}

/// Splits `http://host:port/prefix` (or `host:port`) into `host:port` (port 80 when absent) and
/// the prefix without its trailing slash.
fn split_url(url: &str) -> Result<(String, String)> {
    let url = url.trim();
    let rest = match url.split_once("://") {
        Some(("http", rest)) => rest,
        Some((scheme, _)) => bail!("only http:// is supported, not {scheme}://"),
        None => url,
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    if authority.is_empty() {
        bail!("no host");
    }
    let authority = if authority
        .rsplit_once(':')
        .is_some_and(|(_, port)| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()))
    {
        authority.to_owned()
    } else if authority.ends_with(']') || !authority.contains(':') {
        format!("{authority}:80")
    } else {
        bail!("bad port in {authority:?}");
    };
    Ok((authority, path.trim_end_matches('/').to_owned()))
}

/// A failed request's status, reason phrase and body, in one line.
fn refused(what: &str, r: &HttpResponse) -> anyhow::Error {
    let body = r.text();
    let body = body.trim();
    if body.is_empty() {
        anyhow!("{what}: {} {}", r.status, r.reason)
    } else {
        anyhow!("{what}: {} {}: {body}", r.status, r.reason)
    }
}

/// One module to deploy: the function's name and the ELF file's bytes.
struct Module {
    name: String,
    bytes: Vec<u8>,
}

/// `fn deploy <target>`: the ELF file `target` under its manifest name, or every function of the
/// app `target` in `apps/` (built first). One line per function; `Err` if any was refused.
pub fn deploy(gateway: &Gateway, target: &str, out: &mut impl Write) -> Result<()> {
    // Is anyone there? Before building the apps, which takes a while.
    gateway.request("GET", "/functions", b"")?;
    let modules = modules_to_deploy(target)?;
    let mut failed = 0;
    for module in &modules {
        let r = gateway.request("PUT", &format!("/functions/{}", module.name), &module.bytes)?;
        match r.status {
            200 | 201 => {
                let generation = serde_json::from_slice::<serde_json::Value>(&r.body)
                    .ok()
                    .and_then(|v| v.get("generation").and_then(serde_json::Value::as_u64));
                let what = if r.status == 201 {
                    "deployed"
                } else {
                    "replaced"
                };
                write!(
                    out,
                    "{what} {}: {} {} ({} bytes",
                    module.name,
                    r.status,
                    r.reason,
                    module.bytes.len()
                )?;
                match generation {
                    Some(g) => writeln!(out, ", generation {g})")?,
                    None => writeln!(out, ")")?,
                }
            }
            _ => {
                failed += 1;
                writeln!(out, "{}", refused(&format!("refused {}", module.name), &r))?;
            }
        }
    }
    if failed > 0 {
        bail!(
            "{failed} of {} function(s) not deployed to {}",
            modules.len(),
            gateway.url
        );
    }
    Ok(())
}

/// The modules `fn deploy <target>` sends: a file, or an app built from `apps/`.
fn modules_to_deploy(target: &str) -> Result<Vec<Module>> {
    let path = Path::new(target);
    if path.exists() || target.contains('/') {
        let bytes = fs::read(path).with_context(|| format!("reading {target}"))?;
        let name = manifest_name(&bytes).with_context(|| {
            format!("{target} has no Fjord manifest (a `name=` line in .fjord_manifest)")
        })?;
        return Ok(vec![Module { name, bytes }]);
    }
    let names = apps_build::select(target);
    if names.is_empty() {
        bail!(
            "{target:?} is neither a file nor an app in apps/ (apps: {})",
            apps_build::app_names().join(", ")
        );
    }
    let built = apps_build::build_apps()?;
    Ok(built
        .into_iter()
        .filter(|app| names.contains(&app.name.as_str()))
        .map(|app| Module {
            name: app.name,
            bytes: app.bytes,
        })
        .collect())
}

/// The request body of `fn invoke --data`: none, the text, `@FILE`'s contents or (`@-`) stdin.
pub fn request_body(data: Option<&str>) -> Result<Vec<u8>> {
    match data {
        None => Ok(Vec::new()),
        Some("@-") => {
            let mut bytes = Vec::new();
            std::io::stdin()
                .read_to_end(&mut bytes)
                .context("reading the request body from stdin")?;
            Ok(bytes)
        }
        Some(data) => match data.strip_prefix('@') {
            Some(file) => fs::read(file).with_context(|| format!("reading {file} (--data @FILE)")),
            None => Ok(data.as_bytes().to_vec()),
        },
    }
}

/// `fn invoke <name>`: the response body, raw, to `out`; `Err` with the status and reason
/// unless 200.
pub fn invoke(gateway: &Gateway, name: &str, body: &[u8], out: &mut impl Write) -> Result<()> {
    let r = gateway.request("POST", &format!("/invoke/{name}"), body)?;
    if r.status != 200 {
        return Err(refused(&format!("invoking {name}"), &r));
    }
    out.write_all(&r.body)?;
    out.flush()?;
    Ok(())
}

/// One row of `GET /functions`.
#[derive(Debug, Deserialize, PartialEq, Eq)]
pub struct FunctionRow {
    /// The function's name.
    pub name: String,
    /// Its module's size in bytes.
    pub size: u64,
    /// How many times a module was deployed under this name.
    pub generation: u64,
}

/// `fn list`: a table of the deployed functions (name, size, generation).
pub fn list(gateway: &Gateway, out: &mut impl Write) -> Result<()> {
    let r = gateway.request("GET", "/functions", b"")?;
    if r.status != 200 {
        return Err(refused("listing functions", &r));
    }
    let rows: Vec<FunctionRow> = serde_json::from_slice(&r.body)
        .with_context(|| format!("GET /functions answered {:?}", r.text()))?;
    write_table(&rows, out)?;
    Ok(())
}

/// The table of [`list`].
pub fn write_table(rows: &[FunctionRow], out: &mut impl Write) -> std::io::Result<()> {
    if rows.is_empty() {
        return writeln!(out, "no functions deployed");
    }
    let width = rows.iter().map(|r| r.name.len()).max().unwrap_or(0).max(4);
    writeln!(
        out,
        "{:<width$}  {:>10}  {:>10}",
        "NAME", "SIZE", "GENERATION"
    )?;
    for r in rows {
        writeln!(
            out,
            "{:<width$}  {:>10}  {:>10}",
            r.name, r.size, r.generation
        )?;
    }
    Ok(())
}

/// `fn remove <name>`.
pub fn remove(gateway: &Gateway, name: &str, out: &mut impl Write) -> Result<()> {
    let r = gateway.request("DELETE", &format!("/functions/{name}"), b"")?;
    match r.status {
        200 | 204 => {
            writeln!(out, "removed {name}")?;
            Ok(())
        }
        _ => Err(refused(&format!("removing {name}"), &r)),
    }
}

/// `metrics [--grep PATTERN]`: the `/metrics` text, or only its lines containing `pattern`.
pub fn metrics(gateway: &Gateway, pattern: Option<&str>, out: &mut impl Write) -> Result<()> {
    let r = gateway.request("GET", "/metrics", b"")?;
    if r.status != 200 {
        return Err(refused("GET /metrics", &r));
    }
    let Some(pattern) = pattern else {
        out.write_all(&r.body)?;
        return Ok(());
    };
    let text = r.text();
    let mut found = false;
    for line in text.lines().filter(|l| l.contains(pattern)) {
        writeln!(out, "{line}")?;
        found = true;
    }
    if !found {
        bail!("no line of /metrics contains {pattern:?}");
    }
    Ok(())
}

/// While `cargo xtask run`'s VM runs: polls its gateway and writes `url` to a file once it
/// answers; when dropped (QEMU exited), stops polling and removes the file if it still holds
/// `url` (another `run` may have replaced it).
pub struct UrlPublisher {
    /// The file.
    path: PathBuf,
    /// The URL written.
    url: String,
    /// Tells the poller to stop.
    stop: Arc<AtomicBool>,
    /// The poller.
    poller: Option<JoinHandle<()>>,
}

impl UrlPublisher {
    /// Starts polling `GET /functions` at `addr` every 200 ms; once it is answered with a JSON
    /// list, writes `url` to `path`.
    pub fn start(url: String, addr: SocketAddr, path: PathBuf) -> UrlPublisher {
        let stop = Arc::new(AtomicBool::new(false));
        let poller = {
            let (stop, path, url) = (Arc::clone(&stop), path.clone(), url.clone());
            thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if gateway_answers(addr) {
                        let _ = write_url_file(&path, &url);
                        return;
                    }
                    thread::sleep(Duration::from_millis(200));
                }
            })
        };
        UrlPublisher {
            path,
            url,
            stop,
            poller: Some(poller),
        }
    }
}

impl Drop for UrlPublisher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(poller) = self.poller.take() {
            let _ = poller.join();
        }
        if fs::read_to_string(&self.path).is_ok_and(|text| text.trim() == self.url) {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Whether a Fjord gateway answers `GET /functions` at `addr`.
fn gateway_answers(addr: SocketAddr) -> bool {
    let limit = Duration::from_millis(500);
    Client::connect_with(addr, limit, Duration::from_secs(2))
        .ok()
        .and_then(|mut c| c.request("GET", "/functions", b"").ok())
        .is_some_and(|r| r.status == 200 && r.body.starts_with(b"["))
}

/// Writes `url` and a newline to `path` (creating its directory).
pub fn write_url_file(path: &Path, url: &str) -> Result<()> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    fs::write(path, format!("{url}\n")).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, TcpListener};
    use std::time::Instant;

    #[test]
    fn urls_split_into_authority_and_prefix() {
        let split = |u: &str| split_url(u).unwrap();
        assert_eq!(
            split("http://127.0.0.1:8080/"),
            ("127.0.0.1:8080".into(), String::new())
        );
        assert_eq!(
            split("127.0.0.1:8080"),
            ("127.0.0.1:8080".into(), String::new())
        );
        assert_eq!(
            split("http://localhost/fjord/"),
            ("localhost:80".into(), "/fjord".into())
        );
        assert_eq!(split("http://[::1]:81"), ("[::1]:81".into(), String::new()));
        assert!(split_url("https://x:1/").is_err());
        assert!(split_url("http:///x").is_err());
        assert!(split_url("http://x:port/").is_err());
    }

    #[test]
    fn data_is_text_or_a_file() {
        assert_eq!(request_body(None).unwrap(), b"");
        assert_eq!(request_body(Some("world")).unwrap(), b"world");
        let path = std::env::temp_dir().join(format!("fjord-data-{}", std::process::id()));
        fs::write(&path, b"from \x00 a file").unwrap();
        let arg = format!("@{}", path.display());
        assert_eq!(request_body(Some(&arg)).unwrap(), b"from \x00 a file");
        fs::remove_file(&path).unwrap();
        let e = request_body(Some(&arg)).unwrap_err();
        assert!(format!("{e:#}").contains("--data @FILE"), "{e:#}");
    }

    #[test]
    fn table_has_a_row_per_function() {
        let rows = [
            FunctionRow {
                name: "hello".into(),
                size: 10240,
                generation: 1,
            },
            FunctionRow {
                name: "hotel-frontend".into(),
                size: 123456,
                generation: 3,
            },
        ];
        let mut out = Vec::new();
        write_table(&rows, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "NAME                  SIZE  GENERATION\n\
             hello                10240           1\n\
             hotel-frontend      123456           3\n"
        );
        let mut out = Vec::new();
        write_table(&[], &mut out).unwrap();
        assert_eq!(out, b"no functions deployed\n");
    }

    /// A port nothing listens on: 1 (tcpmux), which no service here offers. An ephemeral
    /// port bound and released could be taken at once by a test running in parallel.
    fn dead_port() -> u16 {
        1
    }

    #[test]
    fn a_stale_url_file_says_no_fjord_is_running() {
        let dir = std::env::temp_dir().join(format!("fjord-url-{}", std::process::id()));
        let path = dir.join("gateway-url");
        let e = Gateway::from_file(&path).unwrap_err().to_string();
        assert!(e.starts_with("no Fjord is running (no --url"), "{e}");
        assert!(e.ends_with("start one with `cargo xtask run`"), "{e}");

        write_url_file(&path, &format!("http://127.0.0.1:{}/", dead_port())).unwrap();
        let gateway = Gateway::from_file(&path).unwrap();
        let started = Instant::now();
        let e = list(&gateway, &mut Vec::new()).unwrap_err().to_string();
        assert!(started.elapsed() < CONNECT_LIMIT, "{:?}", started.elapsed());
        assert!(
            e.starts_with("no Fjord is running (nothing answers at"),
            "{e}"
        );
        assert!(e.contains("gateway-url"), "{e}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_publisher_writes_the_url_once_answered_and_removes_it() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        // Answers every connection (the poller retries if a loaded machine made it give up on
        // one); the thread ends with the test process.
        thread::spawn(move || {
            for mut s in listener.incoming().flatten() {
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf);
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n[]\n");
            }
        });
        let dir = std::env::temp_dir().join(format!("fjord-pub-{}", std::process::id()));
        let path = dir.join("gateway-url");
        let url = format!("http://{addr}/");
        let publisher = UrlPublisher::start(url.clone(), addr, path.clone());
        let deadline = Instant::now() + Duration::from_secs(60);
        while !path.exists() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(fs::read_to_string(&path).unwrap(), format!("{url}\n"));
        assert_eq!(Gateway::from_file(&path).unwrap().addr(), addr);
        drop(publisher);
        assert!(!path.exists());
        fs::remove_dir_all(&dir).unwrap();
    }
}
