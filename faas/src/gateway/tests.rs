//! Gateway tests over fake runtimes: [`FakeService`] (scripted answers, recorded calls) for
//! deployment, listing, removal and invocations that finish at once, and [`SlowService`] for
//! invocations that keep running while the gateway serves other connections.

use super::fake_service::{Call, FakeService};
use super::*;
use crate::FunctionName;
use crate::http::Limits;
use crate::module::{ModuleLimits, validate};
use alloc::string::ToString;
use alloc::vec;

const HELLO: &[u8] = include_bytes!("../../tests/fixtures/hello-rela.elf");

fn gateway(service: FakeService) -> Gateway<FakeService> {
    Gateway::new(service, LatencyUnit::Nanoseconds)
}

fn request(method: &str, path: &str, body: &[u8]) -> Vec<u8> {
    let mut r = alloc::format!(
        "{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

/// Sends one request on a fresh connection and returns the whole response as text.
fn call_raw<S: FunctionService>(
    gw: &mut Gateway<S>,
    method: &str,
    path: &str,
    body: &[u8],
) -> String {
    let mut c = Connection::new(Limits::default());
    c.receive(&request(method, path, body), gw, &no_samples);
    String::from_utf8_lossy(c.output()).to_string()
}

/// Sends one request on a fresh connection and returns the status code and body text.
fn call<S: FunctionService>(
    gw: &mut Gateway<S>,
    method: &str,
    path: &str,
    body: &[u8],
) -> (u16, String) {
    parse_response(call_raw(gw, method, path, body).as_bytes())
}

fn parse_response(raw: &[u8]) -> (u16, String) {
    let text = String::from_utf8_lossy(raw).to_string();
    let code = text[9..12].parse().unwrap();
    let body = text.split_once("\r\n\r\n").unwrap().1.to_string();
    (code, body)
}

fn no_samples() -> Vec<Sample> {
    Vec::new()
}

fn name(s: &str) -> FunctionName {
    FunctionName::new(s).unwrap()
}

/// Why `validate` refuses `image` under `limits`, as the runtime reports it.
fn invalid(image: &[u8], limits: &ModuleLimits) -> Result<DeployOutcome, DeployError> {
    Err(DeployError::Invalid(validate(image, limits).unwrap_err()))
}

#[test]
fn deploy_list_invoke_remove() {
    let fake = FakeService::new()
        .list_gives(&[])
        .deployed(1, false)
        .list_gives(&[("hello", HELLO.len(), 1)])
        .deployed(2, true)
        .invoke_gives(Err(InvokeError::NotFound))
        .invoke_gives(Ok(b"hello, x"))
        .remove_gives(true)
        .remove_gives(false)
        .invoke_gives(Err(InvokeError::NotFound));
    let mut gw = gateway(fake);
    assert_eq!(
        call(&mut gw, "GET", "/functions", b""),
        (200, "[]\n".into())
    );
    let (code, body) = call(&mut gw, "PUT", "/functions/hello", HELLO);
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        body,
        "{\"name\":\"hello\",\"generation\":1,\"replaced\":false}\n"
    );
    let (code, body) = call(&mut gw, "GET", "/functions", b"");
    assert_eq!(code, 200);
    assert_eq!(
        body,
        alloc::format!(
            "[{{\"name\":\"hello\",\"size\":{},\"generation\":1,\"groundhog\":\"restore\"}}]\n",
            HELLO.len()
        )
    );
    assert_eq!(
        call(&mut gw, "PUT", "/functions/hello", HELLO),
        (
            200,
            "{\"name\":\"hello\",\"generation\":2,\"replaced\":true}\n".into()
        )
    );
    assert_eq!(
        call(&mut gw, "POST", "/invoke/nope", b""),
        (404, "no such function\n".into())
    );
    assert_eq!(
        call(&mut gw, "POST", "/invoke/hello", b"x"),
        (200, "hello, x".into())
    );
    assert_eq!(call(&mut gw, "DELETE", "/functions/hello", b"").0, 204);
    assert_eq!(call(&mut gw, "DELETE", "/functions/hello", b"").0, 404);
    assert_eq!(call(&mut gw, "POST", "/invoke/hello", b"").0, 404);
    // Names, images and inputs reach the service as sent.
    assert_eq!(
        gw.service().calls(),
        vec![
            Call::List,
            Call::Deploy("hello".into(), HELLO.to_vec()),
            Call::List,
            Call::Deploy("hello".into(), HELLO.to_vec()),
            Call::Invoke("nope".into(), vec![]),
            Call::Invoke("hello".into(), b"x".to_vec()),
            Call::Remove("hello".into()),
            Call::Remove("hello".into()),
            Call::Invoke("hello".into(), vec![]),
        ]
    );
    assert!(gw.service().script_done());
}

#[test]
fn bad_modules_are_refused_with_a_reason() {
    let limits = ModuleLimits::default();
    let small = ModuleLimits {
        max_image_bytes: 100,
        ..Default::default()
    };
    let fake = FakeService::new()
        .deploy_gives(invalid(b"garbage", &limits))
        .deploy_gives(invalid(&HELLO[..HELLO.len() / 2], &limits))
        .deploy_gives(Err(DeployError::NameMismatch {
            manifest: name("hello"),
        }))
        .deploy_gives(invalid(HELLO, &small));
    let mut gw = gateway(fake);
    let (code, body) = call(&mut gw, "PUT", "/functions/hello", b"garbage");
    assert_eq!(code, 400);
    assert!(body.contains("not an ELF file"), "{body}");
    let (code, body) = call(
        &mut gw,
        "PUT",
        "/functions/hello",
        &HELLO[..HELLO.len() / 2],
    );
    assert_eq!(code, 400);
    assert!(body.contains("invalid function module"), "{body}");
    let (code, body) = call(&mut gw, "PUT", "/functions/other", HELLO);
    assert_eq!(code, 400);
    assert!(body.contains("'hello'"), "{body}");
    assert_eq!(call(&mut gw, "PUT", "/functions/hello", HELLO).0, 413);
    assert!(gw.service().script_done());
    let m = gw.render_metrics(&[]);
    for want in [
        "fjord_gateway_requests_total{route=\"deploy\",status=\"400\"} 3",
        "fjord_gateway_requests_total{route=\"deploy\",status=\"413\"} 1",
    ] {
        assert!(m.contains(want), "missing {want:?} in\n{m}");
    }
}

#[test]
fn modules_the_runtime_cannot_take_are_refused_with_a_reason() {
    let fake = FakeService::new()
        .deploy_gives(Err(DeployError::Unloadable("writable statics".into())))
        .deploy_gives(Err(DeployError::Full));
    let mut gw = gateway(fake);
    assert_eq!(
        call(&mut gw, "PUT", "/functions/hello", HELLO),
        (
            400,
            "the module cannot be loaded: writable statics\n".into()
        )
    );
    assert_eq!(
        call(&mut gw, "PUT", "/functions/hello", HELLO),
        (503, "no room for another function\n".into())
    );
    assert!(gw.service().script_done());
}

#[test]
fn invoke_outcomes_map_to_status_codes() {
    let fake = FakeService::new()
        .invoke_gives(Ok(b"\x00out"))
        .invoke_gives(Err(InvokeError::NotFound))
        .invoke_gives(Err(InvokeError::Unavailable))
        .invoke_gives(Err(InvokeError::Failed("page fault at 0x0".into())));
    let mut gw = gateway(fake);
    let raw = call_raw(&mut gw, "POST", "/invoke/echo", b"in");
    assert!(raw.starts_with("HTTP/1.1 200 "), "{raw}");
    assert!(
        raw.contains("Content-Type: application/octet-stream\r\n"),
        "{raw}"
    );
    assert!(raw.ends_with("\r\n\r\n\x00out"), "{raw}");
    assert_eq!(
        call(&mut gw, "POST", "/invoke/gone", b""),
        (404, "no such function\n".into())
    );
    assert_eq!(
        call(&mut gw, "POST", "/invoke/echo", b""),
        (503, "no capacity, retry later\n".into())
    );
    assert_eq!(
        call(&mut gw, "POST", "/invoke/echo", b"boom"),
        (500, "page fault at 0x0\n".into())
    );
    assert_eq!(
        gw.service().calls(),
        vec![
            Call::Invoke("echo".into(), b"in".to_vec()),
            Call::Invoke("gone".into(), vec![]),
            Call::Invoke("echo".into(), vec![]),
            Call::Invoke("echo".into(), b"boom".to_vec()),
        ]
    );
    let m = gw.render_metrics(&[]);
    for want in [
        "fjord_gateway_requests_total{route=\"invoke\",status=\"200\"} 1",
        "fjord_gateway_requests_total{route=\"invoke\",status=\"404\"} 1",
        "fjord_gateway_requests_total{route=\"invoke\",status=\"503\"} 1",
        "fjord_gateway_requests_total{route=\"invoke\",status=\"500\"} 1",
    ] {
        assert!(m.contains(want), "missing {want:?} in\n{m}");
    }
    // Only invocations the runtime timed enter the per-function series.
    assert!(!m.contains("function=\"echo\""), "{m}");
}

#[test]
fn an_unknown_groundhog_mode_is_refused_before_deploying() {
    let mut gw = gateway(FakeService::new());
    for q in [
        "groundhog=bogus",
        "groundhog",
        "groundhog=none&groundhog=fresh",
        "instances=pool",
    ] {
        let (code, body) = call(
            &mut gw,
            "PUT",
            &alloc::format!("/functions/hello?{q}"),
            HELLO,
        );
        assert_eq!(code, 400, "{q}: {body}");
        assert!(body.contains("restore, none, fresh or fork"), "{body}");
    }
}

#[test]
fn list_is_the_services_in_its_order() {
    let fake = FakeService::new().list_gives(&[("b", 10, 3), ("a-2", 2048, 7)]);
    let mut gw = gateway(fake);
    let raw = call_raw(&mut gw, "GET", "/functions", b"");
    assert!(raw.starts_with("HTTP/1.1 200 "), "{raw}");
    assert!(raw.contains("Content-Type: application/json\r\n"), "{raw}");
    assert!(
        raw.ends_with(
            "\r\n\r\n[{\"name\":\"b\",\"size\":10,\"generation\":3,\"groundhog\":\"restore\"},\
             {\"name\":\"a-2\",\"size\":2048,\"generation\":7,\"groundhog\":\"restore\"}]\n"
        ),
        "{raw}"
    );
    assert_eq!(gw.service().calls(), vec![Call::List]);
}

#[test]
fn removing_a_function_drops_its_series() {
    let fake = FakeService::new().remove_gives(true).remove_gives(false);
    let mut gw = gateway(fake);
    gw.metrics_mut()
        .record_invocation(&name("hello"), 1500, true);
    gw.metrics_mut()
        .record_invocation(&name("other"), 900, false);
    assert_eq!(call(&mut gw, "DELETE", "/functions/hello", b"").0, 204);
    assert_eq!(
        call(&mut gw, "DELETE", "/functions/nope", b""),
        (404, "no such function\n".into())
    );
    let m = gw.render_metrics(&[]);
    assert!(!m.contains("function=\"hello\""), "{m}");
    for want in [
        "fjord_function_invocations_total{function=\"other\"} 1",
        "fjord_function_errors_total{function=\"other\"} 1",
        "fjord_gateway_requests_total{route=\"remove\",status=\"204\"} 1",
        "fjord_gateway_requests_total{route=\"remove\",status=\"404\"} 1",
    ] {
        assert!(m.contains(want), "missing {want:?} in\n{m}");
    }
    assert_eq!(
        gw.service().calls(),
        vec![Call::Remove("hello".into()), Call::Remove("nope".into())]
    );
}

#[test]
fn routing_errors() {
    let mut gw = gateway(FakeService::new());
    assert_eq!(call(&mut gw, "GET", "/nope", b"").0, 404);
    assert_eq!(call(&mut gw, "POST", "/metrics", b"").0, 405);
    assert_eq!(call(&mut gw, "GET", "/invoke/x", b"").0, 405);
    assert_eq!(call(&mut gw, "PUT", "/functions/BAD!", b"").0, 400);
    assert_eq!(gw.service().calls(), vec![]);
}

#[test]
fn malformed_request_closes_after_400() {
    let mut gw = gateway(FakeService::new());
    let mut c = Connection::new(Limits::default());
    c.receive(b"NOT A REQUEST\r\n\r\n", &mut gw, &no_samples);
    let out = String::from_utf8_lossy(c.output()).to_string();
    assert!(out.starts_with("HTTP/1.1 400 "), "{out}");
    assert!(out.contains("Connection: close"), "{out}");
    let n = c.output().len();
    c.sent(n);
    assert!(c.finished());
    c.receive(&request("GET", "/functions", b""), &mut gw, &no_samples);
    assert!(c.output().is_empty());
    assert_eq!(gw.service().calls(), vec![]);
}

#[test]
fn oversized_body_is_413() {
    let mut gw = gateway(FakeService::new());
    let mut c = Connection::new(Limits {
        max_body_bytes: 10,
        ..Limits::default()
    });
    c.receive(
        b"PUT /functions/a HTTP/1.1\r\nHost: t\r\nContent-Length: 11\r\n\r\n",
        &mut gw,
        &no_samples,
    );
    assert_eq!(parse_response(c.output()).0, 413);
    assert_eq!(gw.service().calls(), vec![]);
}

#[test]
fn keep_alive_and_pipelining() {
    let mut gw = gateway(FakeService::new().list_gives(&[]));
    let mut c = Connection::new(Limits::default());
    let mut two = request("GET", "/functions", b"");
    two.extend(request("GET", "/nope", b""));
    for chunk in two.chunks(5) {
        c.receive(chunk, &mut gw, &no_samples);
    }
    let out = String::from_utf8_lossy(c.output()).to_string();
    assert_eq!(out.matches("HTTP/1.1 ").count(), 2, "{out}");
    assert!(out.contains("HTTP/1.1 404 "), "{out}");
    let n = c.output().len();
    c.sent(n);
    assert!(!c.finished());
    assert_eq!(gw.service().calls(), vec![Call::List]);
}

#[test]
fn metrics_have_gateway_kernel_and_function_series() {
    let mut gw = gateway(FakeService::new());
    gw.count_connection();
    gw.count_bytes(10, 20);
    call(&mut gw, "GET", "/nope", b"");
    gw.metrics_mut()
        .record_invocation(&name("hello"), 1500, true);
    let samples = || {
        vec![
            Sample {
                name: "fjord_kernel_free_frames",
                kind: SampleKind::Gauge,
                help: "Free physical frames.",
                labels: &[],
                runtime_labels: Vec::new(),
                value: Value::from(42),
            },
            Sample {
                name: "fjord_kernel_timer_ticks_total",
                kind: SampleKind::Counter,
                help: "Timer interrupts.",
                labels: &[("cpu", "0")],
                runtime_labels: Vec::new(),
                value: Value::from(7),
            },
            Sample {
                name: "fjord_kv_namespace_bytes",
                kind: SampleKind::Gauge,
                help: "Bytes held.",
                labels: &[],
                runtime_labels: alloc::vec![("namespace", "a\"b".into())],
                value: Value::from(9),
            },
        ]
    };
    let mut c = Connection::new(Limits::default());
    c.receive(&request("GET", "/metrics", b""), &mut gw, &samples);
    let (code, body) = parse_response(c.output());
    assert_eq!(code, 200);
    for want in [
        "# TYPE fjord_gateway_requests_total counter",
        "fjord_gateway_requests_total{route=\"unmatched\",status=\"404\"} 1",
        "fjord_gateway_connections_total 1",
        "fjord_gateway_received_bytes_total 10",
        "fjord_gateway_sent_bytes_total 20",
        "# TYPE fjord_kernel_free_frames gauge",
        "fjord_kernel_free_frames 42",
        "fjord_kernel_timer_ticks_total{cpu=\"0\"} 7",
        "fjord_kv_namespace_bytes{namespace=\"a\\\"b\"} 9",
        "fjord_function_invocations_total{function=\"hello\"} 1",
        "fjord_function_latency_seconds_sum{function=\"hello\"} 0.0000015",
    ] {
        assert!(body.contains(want), "missing {want:?} in\n{body}");
    }
}

/// A runtime whose invocations finish only after a few polls (as on executor cores), echoing
/// their input; `fail` fails them.
#[derive(Default)]
struct SlowService {
    running: alloc::collections::BTreeMap<u64, (Vec<u8>, u32)>,
    next: u64,
    forgotten: Vec<InvocationId>,
}

impl FunctionService for SlowService {
    fn invoke(&mut self, _: &crate::FunctionName, input: &[u8]) -> Result<Vec<u8>, InvokeError> {
        Ok(input.to_vec())
    }
    fn start(&mut self, name: &crate::FunctionName, input: &[u8]) -> Started {
        if name.as_str() == "missing" {
            return Started::Done(Completion {
                result: Err(InvokeError::NotFound),
                latency: None,
            });
        }
        self.next += 1;
        self.running.insert(self.next, (input.to_vec(), 3));
        Started::Running(InvocationId(self.next))
    }
    fn poll(&mut self, id: InvocationId) -> Option<Completion> {
        let (_, left) = self.running.get_mut(&id.0)?;
        *left -= 1;
        if *left > 0 {
            return None;
        }
        let (input, _) = self.running.remove(&id.0)?;
        let result = if input == b"fail" {
            Err(InvokeError::Failed("it failed".into()))
        } else {
            Ok(input)
        };
        Some(Completion {
            result,
            latency: Some(2_000),
        })
    }
    fn forget(&mut self, id: InvocationId) {
        self.running.remove(&id.0);
        self.forgotten.push(id);
    }
    fn deploy(
        &mut self,
        _: crate::FunctionName,
        _: &[u8],
        _: Option<crate::module::GroundhogMode>,
    ) -> Result<DeployOutcome, DeployError> {
        Err(DeployError::Full)
    }
    fn list(&self) -> Vec<FunctionInfo> {
        Vec::new()
    }
    fn remove(&mut self, _: &crate::FunctionName) -> bool {
        false
    }
}

#[test]
fn a_running_invocation_holds_only_its_own_connection() {
    let mut gw = Gateway::new(SlowService::default(), LatencyUnit::Nanoseconds);
    let mut a = Connection::new(Limits::default());
    let mut b = Connection::new(Limits::default());
    // A pipelines two invocations; the second waits unparsed behind the first.
    let mut two = request("POST", "/invoke/echo", b"one");
    two.extend(request("POST", "/invoke/echo", b"two"));
    a.receive(&two, &mut gw, &no_samples);
    assert!(a.waiting() && a.output().is_empty());
    // Meanwhile B is served: a request that needs no invocation, and a failing one.
    b.receive(
        &request("POST", "/invoke/missing", b""),
        &mut gw,
        &no_samples,
    );
    assert!(!b.waiting());
    assert_eq!(parse_response(b.output()).0, 404);
    let n = b.output().len();
    b.sent(n);
    b.receive(
        &request("POST", "/invoke/echo", b"fail"),
        &mut gw,
        &no_samples,
    );
    let mut polls = 0;
    while a.waiting() || b.waiting() {
        a.poll(&mut gw, &no_samples);
        b.poll(&mut gw, &no_samples);
        polls += 1;
        assert!(polls < 20, "the invocations never finished");
    }
    let (code, body) = parse_response(b.output());
    assert_eq!((code, body.as_str()), (500, "it failed\n"));
    // A's answers come in request order.
    let out = String::from_utf8_lossy(a.output()).to_string();
    let one = out.find("\r\n\r\none").expect("first answer");
    let two = out.find("\r\n\r\ntwo").expect("second answer");
    assert!(one < two, "{out}");
    // Every finished invocation is in the per-function metrics, failures as errors.
    let m = gw.render_metrics(&[]);
    for want in [
        "fjord_function_invocations_total{function=\"echo\"} 3",
        "fjord_function_errors_total{function=\"echo\"} 1",
        "fjord_gateway_requests_total{route=\"invoke\",status=\"200\"} 2",
        "fjord_gateway_requests_total{route=\"invoke\",status=\"404\"} 1",
        "fjord_gateway_requests_total{route=\"invoke\",status=\"500\"} 1",
    ] {
        assert!(m.contains(want), "missing {want:?} in\n{m}");
    }
}

#[test]
fn a_connection_that_goes_away_abandons_its_invocation() {
    let mut gw = Gateway::new(SlowService::default(), LatencyUnit::Nanoseconds);
    let mut c = Connection::new(Limits::default());
    c.receive(&request("POST", "/invoke/echo", b"x"), &mut gw, &no_samples);
    assert!(c.waiting() && !c.finished());
    c.abandon(&mut gw);
    assert!(!c.waiting() && c.finished());
    assert_eq!(gw.service().forgotten, vec![InvocationId(1)]);
}

#[test]
fn handle_waits_for_a_running_invocation() {
    let mut gw = Gateway::new(SlowService::default(), LatencyUnit::Nanoseconds);
    let mut reader = crate::http::RequestReader::new(Limits::default());
    reader.feed(&request("POST", "/invoke/echo", b"hi"));
    let r = reader.next_request().unwrap().unwrap();
    let resp = gw.handle(&r, no_samples);
    assert_eq!(resp.status, crate::http::Status::Ok);
    assert_eq!(resp.body, b"hi");
}

/// Feeds `raw` to `c` in pieces of `piece` bytes, then polls until no invocation runs.
fn feed_and_finish<S: FunctionService>(
    c: &mut Connection,
    gw: &mut Gateway<S>,
    raw: &[u8],
    piece: usize,
) -> String {
    for p in raw.chunks(piece) {
        c.receive(p, gw, &no_samples);
    }
    let mut polls = 0;
    while c.waiting() {
        c.poll(gw, &no_samples);
        polls += 1;
        assert!(polls < 20, "the invocation never finished");
    }
    String::from_utf8_lossy(c.output()).to_string()
}

#[test]
fn chunked_uploads_are_invoked_with_their_decoded_body() {
    let raw = b"POST /invoke/echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n\
                4;x=y\r\ndata\r\n7\r\n, more!\r\n0\r\nX-Checksum: 1\r\n\r\n";
    for piece in [1, 2, 3, 5, raw.len()] {
        let mut gw = Gateway::new(SlowService::default(), LatencyUnit::Nanoseconds);
        let mut c = Connection::new(Limits::default());
        let out = feed_and_finish(&mut c, &mut gw, raw, piece);
        assert!(out.starts_with("HTTP/1.1 200 "), "{out}");
        assert!(out.ends_with("\r\n\r\ndata, more!"), "{out}");
        assert!(!out.contains("100 Continue"), "{out}");
        assert!(!c.finished());
    }
}

#[test]
fn expect_continue_gets_one_interim_response_before_the_body() {
    let mut gw = Gateway::new(SlowService::default(), LatencyUnit::Nanoseconds);
    let mut c = Connection::new(Limits::default());
    c.receive(
        b"POST /invoke/echo HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n",
        &mut gw,
        &no_samples,
    );
    assert_eq!(c.output(), crate::http::reader::CONTINUE);
    let n = c.output().len();
    c.sent(n);
    let out = feed_and_finish(&mut c, &mut gw, b"hello", 2);
    assert!(out.starts_with("HTTP/1.1 200 "), "{out}");
    assert!(out.ends_with("\r\n\r\nhello"), "{out}");
    // Chunked, and everything at once: still exactly one 100, ahead of the final response.
    let mut c = Connection::new(Limits::default());
    let raw = b"POST /invoke/echo HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n";
    let out = feed_and_finish(&mut c, &mut gw, raw, raw.len());
    assert!(
        out.starts_with("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 "),
        "{out}"
    );
    assert_eq!(out.matches("100 Continue").count(), 1, "{out}");
    assert!(out.ends_with("\r\n\r\nhi"), "{out}");
}

#[test]
fn expect_continue_over_the_limit_gets_413_at_once() {
    let mut gw = gateway(FakeService::new());
    let mut c = Connection::new(Limits {
        max_body_bytes: 10,
        ..Limits::default()
    });
    c.receive(
        b"PUT /functions/a HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 11\r\n\r\n",
        &mut gw,
        &no_samples,
    );
    let out = String::from_utf8_lossy(c.output()).to_string();
    assert!(out.starts_with("HTTP/1.1 413 "), "{out}");
    assert!(!out.contains("100 Continue"), "{out}");
    assert!(out.contains("Connection: close"), "{out}");
    assert_eq!(gw.service().calls(), vec![]);
}

#[test]
fn chunked_framing_errors_are_answered_and_close() {
    let limits = Limits {
        max_body_bytes: 10,
        ..Limits::default()
    };
    let head = "POST /invoke/echo HTTP/1.1\r\nHost: t\r\n";
    for (rest, code) in [
        (
            "Transfer-Encoding: chunked\r\n\r\n6\r\n012345\r\n5\r\n",
            413,
        ),
        ("Transfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
        ("Transfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n", 400),
        (
            "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
            400,
        ),
        ("Transfer-Encoding: gzip\r\n\r\n", 501),
    ] {
        let mut gw = gateway(FakeService::new());
        let mut c = Connection::new(limits);
        let raw = alloc::format!("{head}{rest}");
        c.receive(raw.as_bytes(), &mut gw, &no_samples);
        let out = String::from_utf8_lossy(c.output()).to_string();
        assert_eq!(parse_response(c.output()).0, code, "{rest:?}: {out}");
        assert!(out.contains("Connection: close"), "{out}");
        let n = c.output().len();
        c.sent(n);
        assert!(c.finished(), "{rest:?}");
        assert_eq!(gw.service().calls(), vec![]);
    }
}

/// A kernel sample list like `kernel_samples` in the kernel's `net` module, with families
/// interleaved the way a careless producer might, and namespaces with awkward names.
fn realistic_kernel_samples() -> Vec<Sample> {
    use SampleKind::{Counter, Gauge};
    let s = Sample::new;
    let dispatch = "Orchestrator dispatch events.";
    let isolation = "Jord isolation events.";
    let mut v = vec![
        s(
            "fjord_dispatch_total",
            Counter,
            dispatch,
            &[("event", "submitted")],
            9,
        ),
        s(
            "fjord_dispatch_total",
            Counter,
            dispatch,
            &[("event", "dispatched")],
            9,
        ),
        s(
            "fjord_isolation_events_total",
            Counter,
            isolation,
            &[("kind", "pd_created")],
            3,
        ),
        // Interleaved: the dispatch family again after another family started.
        s(
            "fjord_dispatch_total",
            Counter,
            dispatch,
            &[("event", "completed")],
            8,
        ),
        s(
            "fjord_isolation_events_total",
            Counter,
            isolation,
            &[("kind", "pd_switch")],
            30,
        ),
        s(
            "fjord_warm_instances",
            Gauge,
            "Idle function instances kept for reuse.",
            &[],
            2,
        ),
        s(
            "fjord_kernel_timer_ticks_total",
            Counter,
            "Timer interrupts.",
            &[("cpu", "0")],
            700,
        ),
        s(
            "fjord_kernel_free_frames",
            Gauge,
            "Free 4 KiB physical frames.",
            &[],
            12345,
        ),
        s(
            "fjord_kernel_heap_used_bytes",
            Gauge,
            "Bytes allocated from the kernel heap.",
            &[],
            1 << 20,
        ),
        s(
            "fjord_console_dropped_messages_total",
            Counter,
            "Function log messages dropped: over the invocation's log_limit, or over the \\ rate.",
            &[("reason", "invocation_limit")],
            1,
        ),
        s(
            "fjord_console_dropped_messages_total",
            Counter,
            "Function log messages dropped: over the invocation's log_limit, or over the \\ rate.",
            &[("reason", "rate_limit")],
            0,
        ),
        // A repeated series and a family name reused with another type: left out.
        s(
            "fjord_warm_instances",
            Gauge,
            "Idle function instances kept for reuse.",
            &[],
            5,
        ),
        s(
            "fjord_kernel_free_frames",
            Counter,
            "Free frames.",
            &[("x", "y")],
            1,
        ),
        // The gateway's own family, reported again by the kernel: merged into it.
        s(
            "fjord_gateway_requests_total",
            Counter,
            "HTTP requests answered, by route and status code.",
            &[("route", "kernel"), ("status", "200")],
            1,
        ),
    ];
    for ns in ["default", "we\"ird\\name\nx", "ünïcode"] {
        for (name, kind) in [
            ("fjord_kv_namespace_entries", Gauge),
            ("fjord_kv_namespace_refused_total", Counter),
        ] {
            v.push(Sample {
                name,
                kind,
                help: "Per-namespace usage.\nSecond line.",
                labels: &[],
                runtime_labels: alloc::vec![("namespace", ns.into())],
                value: Value::from(1),
            });
        }
    }
    v.push(Sample {
        name: "fjord_groundhog_restore_seconds_total",
        kind: Counter,
        help: "Time spent restoring instances.",
        labels: &[],
        runtime_labels: alloc::vec![("function", "echo".into())],
        value: Value::seconds_from_nanos(1_500_000),
    });
    v
}

#[test]
fn metrics_text_is_valid_exposition_with_each_family_once() {
    use crate::metrics::check::check_exposition;
    let fake = FakeService::new().invoke_gives(Ok(b"x"));
    let mut gw = gateway(fake);
    gw.count_connection();
    gw.count_bytes(100, 200);
    call(&mut gw, "GET", "/nope", b"");
    call(&mut gw, "POST", "/invoke/echo", b"in");
    gw.metrics_mut()
        .record_invocation(&name("echo"), 1500, true);
    gw.metrics_mut().record_invocation(&name("b-2"), 15, false);
    let mut c = Connection::new(Limits::default());
    c.receive(
        &request("GET", "/metrics", b""),
        &mut gw,
        &realistic_kernel_samples,
    );
    let (code, text) = parse_response(c.output());
    assert_eq!(code, 200);
    let summary = match check_exposition(&text) {
        Ok(s) => s,
        Err(e) => panic!("{e}\n{text}"),
    };
    for fam in [
        "fjord_function_invocations_total",
        "fjord_function_latency_seconds",
        "fjord_gateway_requests_total",
        "fjord_gateway_connections_total",
        "fjord_dispatch_total",
        "fjord_isolation_events_total",
        "fjord_kernel_free_frames",
        "fjord_console_dropped_messages_total",
        "fjord_kv_namespace_entries",
        "fjord_kv_namespace_refused_total",
        "fjord_groundhog_restore_seconds_total",
    ] {
        assert!(summary.families.iter().any(|f| f == fam), "no {fam}");
        let header = alloc::format!("# TYPE {fam} ");
        assert_eq!(text.matches(&header).count(), 1, "{fam}\n{text}");
    }
    let mut sorted = summary.families.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), summary.families.len());
    for want in [
        "fjord_dispatch_total{event=\"completed\"} 8\n",
        "fjord_kv_namespace_entries{namespace=\"we\\\"ird\\\\name\\nx\"} 1\n",
        "fjord_gateway_requests_total{route=\"kernel\",status=\"200\"} 1\n",
        "fjord_warm_instances 2\n",
        "fjord_groundhog_restore_seconds_total{function=\"echo\"} 0.0015\n",
        "fjord_function_latency_seconds_sum{function=\"echo\"} 0.0000015\n",
        "fjord_function_latency_seconds_bucket{function=\"b-2\",le=\"0.000001\"} 1\n",
        "# HELP fjord_kv_namespace_entries Per-namespace usage.\\nSecond line.\n",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
    assert!(!text.contains("fjord_warm_instances 5"), "{text}");
    assert!(!text.contains("x=\"y\""), "{text}");
}

#[test]
fn expect_continue_to_nowhere_is_refused_before_the_body() {
    for (method, path, code) in [
        ("PUT", "/functions/BAD!", 400),
        ("POST", "/nowhere", 404),
        ("POST", "/metrics", 405),
    ] {
        let mut gw = gateway(FakeService::new());
        let mut c = Connection::new(Limits::default());
        let head = alloc::format!(
            "{method} {path} HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n"
        );
        c.receive(head.as_bytes(), &mut gw, &no_samples);
        let out = String::from_utf8_lossy(c.output()).to_string();
        assert_eq!(parse_response(c.output()).0, code, "{out}");
        assert!(!out.contains("100 Continue"), "{out}");
        assert!(out.contains("Connection: close"), "{out}");
        // Whatever follows is not read.
        c.receive(
            b"bodyGET /functions HTTP/1.1\r\nHost: t\r\n\r\n",
            &mut gw,
            &no_samples,
        );
        assert_eq!(c.output().len(), out.len());
        let n = c.output().len();
        c.sent(n);
        assert!(c.finished());
        assert_eq!(gw.service().calls(), vec![]);
    }
}

proptest::proptest! {
    /// Requests with `Content-Length` or chunked bodies, some expecting `100 Continue`, some
    /// to nowhere, fed in random pieces: the bytes the connection answers with do not depend on
    /// the split (each 100 exactly where its head was accepted).
    #[test]
    fn connection_output_is_split_invariant(
        reqs in proptest::collection::vec(
            (proptest::collection::vec(proptest::num::u8::ANY, 0..20), 0u8..8),
            1..5,
        ),
        cuts in proptest::collection::vec(0usize..1000, 0..8),
    ) {
        let mut data = Vec::new();
        for (body, shape) in &reqs {
            let path = if shape & 4 == 0 { "/invoke/echo" } else { "/nowhere" };
            let expect = if shape & 1 == 1 { "Expect: 100-continue\r\n" } else { "" };
            let head = alloc::format!("POST {path} HTTP/1.1\r\nHost: t\r\n{expect}");
            data.extend_from_slice(head.as_bytes());
            if shape & 2 == 0 {
                data.extend_from_slice(alloc::format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
                data.extend_from_slice(body);
            } else {
                data.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
                for c in body.chunks(6) {
                    data.extend_from_slice(alloc::format!("{:x}\r\n", c.len()).as_bytes());
                    data.extend_from_slice(c);
                    data.extend_from_slice(b"\r\n");
                }
                data.extend_from_slice(b"0\r\n\r\n");
            }
        }
        let answer = |pieces: &[&[u8]]| {
            let mut gw = Gateway::new(SlowService::default(), LatencyUnit::Nanoseconds);
            let mut c = Connection::new(Limits::default());
            for p in pieces {
                c.receive(p, &mut gw, &no_samples);
                while c.waiting() {
                    c.poll(&mut gw, &no_samples);
                }
            }
            (c.output().to_vec(), c.finished())
        };
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (data.len() + 1)).collect();
        cuts.sort_unstable();
        let mut pieces: Vec<&[u8]> = Vec::new();
        let mut prev = 0;
        for c in cuts {
            pieces.push(&data[prev..c]);
            prev = c;
        }
        pieces.push(&data[prev..]);
        let whole = answer(&[&data]);
        proptest::prop_assert_eq!(answer(&pieces), whole);
    }
}

#[test]
fn a_runtime_without_processes_answers_the_process_api_plainly() {
    let mut gw = gateway(FakeService::new());
    assert_eq!(call(&mut gw, "POST", "/processes/init", b"").0, 501);
    assert_eq!(
        call(&mut gw, "GET", "/processes", b""),
        (200, "[]\n".into())
    );
    assert_eq!(call(&mut gw, "DELETE", "/processes/7", b"").0, 404);
    assert_eq!(call(&mut gw, "DELETE", "/processes/seven", b"").0, 400);
}

#[test]
fn process_lists_are_json() {
    let p = super::ProcessInfo {
        pid: 2,
        ppid: 1,
        program: "for\"ktest".into(),
        state: "blocked",
        area: 0x1000,
        area_bytes: 8192,
        memory_bytes: 4096,
    };
    assert_eq!(
        super::json::process_list(&[p]),
        "[{\"pid\":2,\"ppid\":1,\"program\":\"for\\\"ktest\",\"state\":\"blocked\",\"area\":\"0x1000\",\"area_bytes\":8192,\"memory_bytes\":4096}]\n"
    );
    assert_eq!(super::json::started(9), "{\"pid\":9}\n");
}

#[test]
fn a_connection_moves_through_head_body_send_idle() {
    let mut gw = gateway(FakeService::new().deployed(1, false));
    let mut c = Connection::new(Limits::default());
    assert_eq!(c.phase(), Phase::Head, "a new connection owes a head");
    c.receive(b"PUT /functions/a HTTP/1.1\r\nHo", &mut gw, &no_samples);
    assert_eq!(c.phase(), Phase::Head);
    c.receive(
        b"st: t\r\nContent-Length: 4\r\n\r\nab",
        &mut gw,
        &no_samples,
    );
    assert_eq!(c.phase(), Phase::Body);
    c.receive(b"cd", &mut gw, &no_samples);
    assert_eq!(c.phase(), Phase::Send, "the answer waits to be sent");
    let n = c.output().len();
    c.sent(n);
    assert_eq!(c.phase(), Phase::Idle);
    assert_eq!(c.phase_after(10), Phase::Send, "sent, not yet taken");
    assert_eq!(c.phase_after(0), Phase::Idle);
    c.receive(b"G", &mut gw, &no_samples);
    assert_eq!(c.phase(), Phase::Head);
}

#[test]
fn timed_out_and_refused_connections_are_answered_counted_and_close() {
    let mut gw = gateway(FakeService::new());
    let mut head = Connection::new(Limits::default());
    head.receive(b"GET /functions HTTP/1.1\r\n", &mut gw, &no_samples);
    head.time_out(Phase::Head, &mut gw);
    assert_eq!(parse_response(head.output()).0, 408);
    assert!(String::from_utf8_lossy(head.output()).contains("Connection: close"));
    let n = head.output().len();
    head.sent(n);
    assert!(head.finished());

    let mut idle = Connection::new(Limits::default());
    idle.time_out(Phase::Idle, &mut gw);
    assert!(idle.output().is_empty() && idle.finished());

    let mut full = Connection::new(Limits::default());
    full.refuse(&mut gw);
    let out = String::from_utf8_lossy(full.output()).to_string();
    assert!(out.starts_with("HTTP/1.1 503 "), "{out}");
    assert!(
        out.contains("Retry-After: 1") && out.contains("Connection: close"),
        "{out}"
    );
    // Bytes the refused client sends are not answered.
    full.receive(&request("GET", "/functions", b""), &mut gw, &no_samples);
    assert_eq!(full.output().len(), out.len());

    let mut old = Connection::new(Limits::default());
    old.evict(&mut gw);
    assert!(old.finished());

    let text = gw.render_metrics(&[]);
    for line in [
        "fjord_http_connections_timed_out_total{phase=\"head\"} 1",
        "fjord_http_connections_timed_out_total{phase=\"body\"} 0",
        "fjord_http_connections_timed_out_total{phase=\"idle\"} 1",
        "fjord_http_connections_rejected_total 1",
        "fjord_http_connections_evicted_total 1",
    ] {
        assert!(text.contains(line), "{line} missing from\n{text}");
    }
    assert!(crate::metrics::check::check_exposition(&text).is_ok());
}

#[test]
fn a_client_that_never_reads_is_held_back_then_timed_out() {
    let mut gw = gateway(FakeService::new());
    let mut c = Connection::new(Limits::default());
    let one = request("GET", "/nowhere", b"");
    let mut fed = 0;
    // Pipelined requests, none of the answers taken: the connection stops taking requests
    // once the unsent answers pass the limit.
    while c.wants_input() {
        c.receive(&one, &mut gw, &no_samples);
        fed += 1;
        assert!(fed < 10_000, "the output never reached the limit");
    }
    let held = c.output().len();
    assert!(held >= super::connection::OUTPUT_LIMIT, "{held}");
    assert!(held < super::connection::OUTPUT_LIMIT + 1024, "{held}");
    assert_eq!(c.phase(), Phase::Send);
    assert_eq!(c.phase_after(0), Phase::Send);
    // Sending some lets it take requests again.
    c.sent(held - 100);
    assert!(c.wants_input());
    c.receive(&one, &mut gw, &no_samples);
    // The client stops reading altogether: the send timeout drops what is left and ends it.
    c.time_out(Phase::Send, &mut gw);
    assert!(c.output().is_empty() && c.finished());
    assert_eq!(fed as u64 + 1, {
        let text = gw.render_metrics(&[]);
        let line = text
            .lines()
            .find(|l| {
                l.starts_with("fjord_gateway_requests_total{route=\"unmatched\",status=\"404\"}")
            })
            .expect("unmatched requests counted")
            .to_string();
        line.rsplit(' ').next().unwrap().parse::<u64>().unwrap()
    });
    let text = gw.render_metrics(&[]);
    assert!(
        text.contains("fjord_http_connections_timed_out_total{phase=\"send\"} 1"),
        "{text}"
    );
    assert!(crate::metrics::check::check_exposition(&text).is_ok());
}

#[test]
fn a_head_sent_byte_by_byte_is_parsed() {
    let mut gw = gateway(FakeService::new().list_gives(&[]));
    let mut c = Connection::new(Limits::default());
    let head =
        b"GET /functions HTTP/1.1\r\nHost: fjord\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    for b in head {
        assert!(
            c.output().is_empty(),
            "{}",
            String::from_utf8_lossy(c.output())
        );
        c.receive(&[*b], &mut gw, &no_samples);
    }
    assert_eq!(parse_response(c.output()).0, 200);
}

#[test]
fn a_waiting_connection_names_its_invocation_and_a_plain_runtime_lists_none_finished() {
    let mut gw = Gateway::new(SlowService::default(), LatencyUnit::Nanoseconds);
    let mut a = Connection::new(Limits::default());
    assert_eq!(a.waiting_for(), None);
    a.receive(
        &request("POST", "/invoke/echo", b"one"),
        &mut gw,
        &no_samples,
    );
    assert_eq!(a.waiting_for(), Some(InvocationId(1)));
    // A runtime that cannot tell which invocations finished says so: its callers poll.
    let mut out = alloc::vec![InvocationId(9)];
    assert!(!gw.finished(&mut out));
    assert!(out.is_empty());
    while a.waiting() {
        a.poll(&mut gw, &no_samples);
    }
    assert_eq!(a.waiting_for(), None);
    assert_eq!(parse_response(a.output()).0, 200);
}

#[test]
fn a_family_is_one_sample_per_label_set_in_order() {
    let v: Vec<Sample> = Sample::family(
        "fjord_x_total",
        SampleKind::Counter,
        "X events.",
        &[(&[("kind", "a")], 1), (&[("kind", "b")], 20)],
    )
    .collect();
    assert_eq!(
        v,
        [
            Sample::new(
                "fjord_x_total",
                SampleKind::Counter,
                "X events.",
                &[("kind", "a")],
                1
            ),
            Sample::new(
                "fjord_x_total",
                SampleKind::Counter,
                "X events.",
                &[("kind", "b")],
                20
            ),
        ]
    );
}
