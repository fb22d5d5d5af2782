//! The HTTP gateway's request handling: from a parsed [`Request`] to a [`Response`], over a
//! pluggable [`FunctionService`], with its own Prometheus counters.
//!
//! Modules: [`service`] (the runtime trait, which the kernel implements), [`connection`] (one TCP
//! connection's byte stream to requests and responses), [`timeouts`] (its head, body and idle
//! deadlines), [`admission`] (the connection cap, the listening backlog, who gives way when
//! full), [`json`] (the JSON bodies).
//!
//! | request | answer |
//! |---|---|
//! | `GET /metrics` | 200, Prometheus text: gateway counters, kernel samples, per-function series |
//! | `GET /functions` | 200, JSON list of `{name, size, generation, groundhog}` |
//! | `PUT /functions/<name>[?groundhog=restore\|none\|fresh\|fork]` (`instances=fork` = `groundhog=fork`) | 201 created / 200 replaced; 400 invalid module or Groundhog mode (reason in the body), 413 too large, 503 no room |
//! | `DELETE /functions/<name>` | 204, or 404 |
//! | `POST /invoke/<fn>` | the function's output (200); 404 unknown, 500 the function failed (reason in the body), 503 no capacity |
//! | `POST /processes/<pid>/checkpoint`, `POST /functions/<name>/checkpoint` | 201 `{checkpoint, pages}`; 404, 400 not fork-per-request, 409 still running, 501 no region, 503 region full |
//! | `GET /checkpoints` | 200, JSON list of `{id, name, kind, pages, writer, clones}` |
//! | `DELETE /functions/<name>/zygote` | 204: this node's warm zygote of a fork-per-request function destroyed; 404 |
//! | `POST /checkpoints/<id>/restore[?tiering=write\|access\|hybrid]` | 201 `{pid}`; 404 unknown, retired or program absent, 409 other version, 422 corrupt |
//! | `DELETE /checkpoints/<id>` | 204, or 404 |
//!
//! Unknown paths are 404, known paths with another method 405, unparsable requests get the
//! parser's status and the connection closes.

pub mod admission;
pub mod checkpoints;
pub mod connection;
pub mod json;
pub mod service;
pub mod timeouts;

pub use connection::Connection;
pub use service::{
    Completion, DeployError, DeployOutcome, FunctionInfo, FunctionService, Generation,
    InvocationId, InvokeError, ProcessError, ProcessInfo, ProcessOptions, Started,
};
pub use timeouts::{Phase, Timeouts};

use crate::http::{HttpError, Method, Request, Response, Route, RouteError, Status, route};
use crate::metrics::exposition::{Exposition, FamilyType, Value};
use crate::metrics::{self, Buckets, CounterId, LatencyUnit, Metrics};
use crate::module::ModuleError;
use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;

/// Whether a kernel sample is a counter (only grows) or a gauge (goes up and down).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SampleKind {
    /// Prometheus `counter`.
    Counter,
    /// Prometheus `gauge`.
    Gauge,
}

/// One value the kernel reports in `/metrics` (timer ticks, free frames, heap usage, …).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    /// Metric name (`[a-zA-Z_:][a-zA-Z0-9_:]*`).
    pub name: &'static str,
    /// Counter or gauge.
    pub kind: SampleKind,
    /// The `# HELP` text.
    pub help: &'static str,
    /// Labels. Samples sharing a name share `kind` and `help` (the first one's are used); they
    /// need not be adjacent: the renderer groups them.
    pub labels: &'static [(&'static str, &'static str)],
    /// Further labels whose values are known only at run time (a key-value namespace's name,
    /// a clone's checkpoint), written after `labels`.
    pub runtime_labels: Vec<(&'static str, String)>,
    /// The value, in the unit its name ends in (seconds and bytes are Prometheus's base units).
    pub value: Value,
}

impl Sample {
    /// A sample of family `name` (`kind`, `help`) with the fixed `labels` and an integer value.
    pub fn new(
        name: &'static str,
        kind: SampleKind,
        help: &'static str,
        labels: Labels,
        value: u64,
    ) -> Sample {
        Sample {
            name,
            kind,
            help,
            labels,
            runtime_labels: Vec::new(),
            value: Value::from(value),
        }
    }

    /// This sample with the run-time label `name` = `value` after its others.
    pub fn with_label(mut self, name: &'static str, value: String) -> Sample {
        self.runtime_labels.push((name, value));
        self
    }

    /// The samples of one family (`name`, `kind`, `help`): one per fixed label set and value in
    /// `entries`.
    pub fn family<'a>(
        name: &'static str,
        kind: SampleKind,
        help: &'static str,
        entries: &'a [(Labels, u64)],
    ) -> impl Iterator<Item = Sample> + 'a {
        entries
            .iter()
            .map(move |&(labels, value)| Sample::new(name, kind, help, labels, value))
    }
}

/// A sample's fixed labels: `(name, value)` pairs.
pub type Labels = &'static [(&'static str, &'static str)];

/// A request whose response waits for a running invocation (see [`Gateway::answer`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingAnswer {
    id: InvocationId,
    function: crate::FunctionName,
    keep_alive: bool,
}

impl PendingAnswer {
    /// The running invocation.
    pub fn id(&self) -> InvocationId {
        self.id
    }
}

/// The gateway's answer to one request.
#[derive(Clone, Debug)]
pub enum Answer {
    /// The response, ready to send.
    Ready(Response),
    /// An invocation runs; [`Gateway::poll_answer`] gives the response once it has finished.
    Pending(PendingAnswer),
}

/// The gateway: request handling over a [`FunctionService`], plus its counters.
pub struct Gateway<S> {
    service: S,
    metrics: Metrics,
    requests: BTreeMap<(&'static str, u16), CounterId>,
    connections: CounterId,
    bytes_received: CounterId,
    bytes_sent: CounterId,
    timed_out: [CounterId; 4],
    rejected: CounterId,
    evicted: CounterId,
}

const REQUESTS: &str = "fjord_gateway_requests_total";
const REQUESTS_HELP: &str = "HTTP requests answered, by route and status code.";

impl<S: FunctionService> Gateway<S> {
    /// A gateway over `service` whose per-function latencies are in `unit`.
    pub fn new(service: S, unit: LatencyUnit) -> Self {
        let buckets = match unit {
            LatencyUnit::Nanoseconds => Buckets::nanoseconds(),
            LatencyUnit::Instructions => Buckets::instructions(),
        };
        let mut metrics = Metrics::new(unit, buckets);
        let mut counter = |name: &str, help: &str| {
            metrics
                .register_counter(name, help, &[])
                .expect("static counter names are valid and distinct")
        };
        let connections = counter(
            "fjord_gateway_connections_total",
            "TCP connections accepted by the gateway.",
        );
        let bytes_received = counter(
            "fjord_gateway_received_bytes_total",
            "Bytes received on gateway connections.",
        );
        let bytes_sent = counter(
            "fjord_gateway_sent_bytes_total",
            "Bytes sent on gateway connections.",
        );
        let rejected = counter(
            "fjord_http_connections_rejected_total",
            "Connections answered 503 and closed because the gateway was at its connection limit.",
        );
        let evicted = counter(
            "fjord_http_connections_evicted_total",
            "Idle or slow connections closed to make room for a new one at the connection limit.",
        );
        let timed_out = Phase::TIMED.map(|phase| {
            metrics
                .register_counter(
                    "fjord_http_connections_timed_out_total",
                    "Connections closed because the client took too long, by phase (head, body, idle, send).",
                    &[("phase", phase.label())],
                )
                .expect("static counter names are valid and distinct")
        });
        Gateway {
            service,
            metrics,
            requests: BTreeMap::new(),
            connections,
            bytes_received,
            bytes_sent,
            timed_out,
            rejected,
            evicted,
        }
    }

    /// The function service.
    pub fn service(&self) -> &S {
        &self.service
    }

    /// The gateway's metrics (per-function series are recorded by the runtime through this).
    pub fn metrics_mut(&mut self) -> &mut Metrics {
        &mut self.metrics
    }

    /// Counts an accepted connection.
    pub fn count_connection(&mut self) {
        let _ = self.metrics.add(self.connections, 1);
    }

    /// Counts a connection closed because its client took too long in `phase`.
    pub fn count_timed_out(&mut self, phase: Phase) {
        if let Some(i) = Phase::TIMED.iter().position(|&p| p == phase) {
            let _ = self.metrics.add(self.timed_out[i], 1);
        }
    }

    /// Counts a connection refused at the connection limit.
    pub fn count_rejected(&mut self) {
        let _ = self.metrics.add(self.rejected, 1);
    }

    /// Counts a connection evicted to make room for a new one.
    pub fn count_evicted(&mut self) {
        let _ = self.metrics.add(self.evicted, 1);
    }

    /// Counts bytes received and sent.
    pub fn count_bytes(&mut self, received: usize, sent: usize) {
        let _ = self.metrics.add(self.bytes_received, received as u64);
        let _ = self.metrics.add(self.bytes_sent, sent as u64);
    }

    /// Counts a request answered with `status` on `route` (a short label such as `"invoke"`).
    fn count_request(&mut self, route: &'static str, status: Status) {
        let key = (route, status.code());
        let id = match self.requests.get(&key) {
            Some(&id) => id,
            None => {
                let code = alloc::format!("{}", status.code());
                let labels = [("route", route), ("status", code.as_str())];
                match self
                    .metrics
                    .register_counter(REQUESTS, REQUESTS_HELP, &labels)
                {
                    Ok(id) => {
                        self.requests.insert(key, id);
                        id
                    }
                    Err(_) => return,
                }
            }
        };
        let _ = self.metrics.add(id, 1);
    }

    /// The response to a request that could not be parsed (the connection then closes).
    pub fn parse_error(&mut self, err: HttpError) -> Response {
        let r = Response::for_parse_error(err);
        self.count_request("invalid", r.status);
        r
    }

    /// Answers one request, waiting for an invocation to finish; `kernel` supplies the kernel's
    /// samples for `/metrics`.
    pub fn handle(&mut self, req: &Request, kernel: impl FnOnce() -> Vec<Sample>) -> Response {
        match self.answer(req, kernel) {
            Answer::Ready(r) => r,
            Answer::Pending(p) => loop {
                if let Some(r) = self.poll_answer(&p) {
                    return r;
                }
                core::hint::spin_loop();
            },
        }
    }

    /// Answers one request, or starts the invocation it asks for and returns at once.
    pub fn answer(&mut self, req: &Request, kernel: impl FnOnce() -> Vec<Sample>) -> Answer {
        let (label, mut response) = match route(req.method, &req.target) {
            Err(e) => ("unmatched", route_error(e)),
            Ok(Route::Metrics) => ("metrics", self.metrics_response(&kernel())),
            Ok(Route::ListFunctions) => {
                let body = json::function_list(&self.service.list());
                ("list", json_response(Status::Ok, &body))
            }
            Ok(Route::Deploy(name)) => match fjord_groundhog::mode::from_query(req.query()) {
                Ok(mode) => ("deploy", self.deploy(name, &req.body, mode)),
                Err(()) => (
                    "deploy",
                    Response::text(
                        Status::BadRequest,
                        "groundhog must be restore, none, fresh or fork (or instances=fork)\n",
                    ),
                ),
            },
            Ok(Route::StartProcess(name)) => {
                let started = match ProcessOptions::from_target(&req.target) {
                    Ok(options) => self.service.start_process(&name, options),
                    Err(_) => Err(ProcessError::BadOptions),
                };
                let r = match started {
                    Ok(pid) => json_response(Status::Created, &json::started(pid)),
                    Err(ProcessError::NotFound) => {
                        Response::text(Status::NotFound, "no such program\n")
                    }
                    Err(ProcessError::NotAProgram) => Response::text(
                        Status::BadRequest,
                        "a function, not a program: invoke it with POST /invoke/<name>\n",
                    ),
                    Err(ProcessError::Full) => {
                        Response::text(Status::ServiceUnavailable, "no room for a process\n")
                    }
                    Err(ProcessError::ProgramLimit(n)) => Response::text(
                        Status::TooManyRequests,
                        &alloc::format!(
                            "the program's μprocesses are at its bound (max_processes = {n}); wait for some to end\n"
                        ),
                    ),
                    Err(ProcessError::Unsupported) => {
                        Response::text(Status::NotImplemented, "no processes here\n")
                    }
                    Err(ProcessError::BadOptions) => Response::text(
                        Status::BadRequest,
                        "bad options: fork=full|cow|coa|copa, isolation=none|non-adversarial|full; cow needs isolation=none\n",
                    ),
                };
                ("process_start", r)
            }
            Ok(Route::ListProcesses) => {
                let body = json::process_list(&self.service.processes());
                ("process_list", json_response(Status::Ok, &body))
            }
            Ok(Route::KillProcess(pid)) => {
                let r = if self.service.kill_process(pid) {
                    Response::new(Status::NoContent)
                } else {
                    Response::text(Status::NotFound, "no such process\n")
                };
                ("process_kill", r)
            }
            Ok(Route::CheckpointFunction(name)) => {
                let r = checkpoint_response(self.service.checkpoint_function(&name));
                ("checkpoint", r)
            }
            Ok(Route::DropZygote(name)) => {
                let r = if self.service.drop_zygote(&name) {
                    Response::new(Status::NoContent)
                } else {
                    Response::text(Status::NotFound, "no such function, or no zygote of it\n")
                };
                ("drop_zygote", r)
            }
            Ok(Route::CheckpointProcess(pid)) => {
                let r = checkpoint_response(self.service.checkpoint_process(pid));
                ("checkpoint", r)
            }
            Ok(Route::ResetAccessed(pid)) => {
                let r = if self.service.reset_accessed(pid) {
                    Response::new(Status::NoContent)
                } else {
                    Response::text(Status::NotFound, "no such process\n")
                };
                ("reset_accessed", r)
            }
            Ok(Route::ListCheckpoints) => {
                let body = json::checkpoint_list(&self.service.checkpoints());
                ("checkpoint_list", json_response(Status::Ok, &body))
            }
            Ok(Route::RestoreCheckpoint(id)) => {
                use checkpoints::RestoreError as E;
                let restored = match checkpoints::tiering_from_target(&req.target) {
                    Ok(t) => self.service.restore_checkpoint(id, t),
                    Err(checkpoints::UnknownTiering) => Err(E::BadOptions),
                };
                let r = match restored {
                    Ok(pid) => json_response(Status::Created, &json::started(pid)),
                    Err(E::NotFound) => Response::text(Status::NotFound, "no such checkpoint\n"),
                    Err(E::Retired) => Response::text(
                        Status::NotFound,
                        "the checkpoint was retired (its program was replaced or deleted)\n",
                    ),
                    Err(E::Corrupt) => Response::text(
                        Status::UnprocessableContent,
                        "the checkpoint is corrupt: refused\n",
                    ),
                    Err(E::NoSuchProgram) => Response::text(
                        Status::NotFound,
                        "the checkpoint's program is not deployed on this node\n",
                    ),
                    Err(E::OtherVersion) => Response::text(
                        Status::Conflict,
                        "the program deployed here is another version than the checkpoint's\n",
                    ),
                    Err(E::Full) => {
                        Response::text(Status::ServiceUnavailable, "no room for a process\n")
                    }
                    Err(E::NoRegion) => {
                        Response::text(Status::NotImplemented, "no shared region on this node\n")
                    }
                    Err(E::BadOptions) => Response::text(
                        Status::BadRequest,
                        "bad options: tiering=write|access|hybrid\n",
                    ),
                };
                ("restore", r)
            }
            Ok(Route::RetireCheckpoint(id)) => {
                let r = if self.service.retire_checkpoint(id) {
                    Response::new(Status::NoContent)
                } else {
                    Response::text(Status::NotFound, "no such checkpoint\n")
                };
                ("checkpoint_retire", r)
            }
            Ok(Route::Remove(name)) => {
                let r = if self.service.remove(&name) {
                    self.metrics.remove_function(name.as_str());
                    Response::new(Status::NoContent)
                } else {
                    Response::text(Status::NotFound, "no such function\n")
                };
                ("remove", r)
            }
            Ok(Route::Invoke(name)) => {
                return match self.service.start(&name, &req.body) {
                    Started::Done(c) => Answer::Ready(self.finish(&name, c, req.keep_alive)),
                    Started::Running(id) => Answer::Pending(PendingAnswer {
                        id,
                        function: name,
                        keep_alive: req.keep_alive,
                    }),
                };
            }
        };
        response.keep_alive = req.keep_alive;
        self.count_request(label, response.status);
        Answer::Ready(response)
    }

    /// The answer to a request that waits for `100 Continue` and matches no route, given before
    /// its body is read (the connection then closes); `None` if the body should be sent.
    pub fn refuse_before_body(&mut self, method: Method, target: &str) -> Option<Response> {
        let mut r = route(method, target).err().map(route_error)?;
        r.keep_alive = false;
        self.count_request("unmatched", r.status);
        Some(r)
    }

    /// The response to a pending answer once its invocation has finished.
    pub fn poll_answer(&mut self, p: &PendingAnswer) -> Option<Response> {
        let c = self.service.poll(p.id)?;
        Some(self.finish(&p.function, c, p.keep_alive))
    }

    /// The started invocations that finished since the last call, into `out`; `false` when
    /// the runtime cannot tell (see [`FunctionService::finished`]).
    pub fn finished(&mut self, out: &mut Vec<InvocationId>) -> bool {
        self.service.finished(out)
    }

    /// Gives up a pending answer (its connection is gone).
    pub fn abandon(&mut self, p: PendingAnswer) {
        self.service.forget(p.id);
    }

    /// The response to a finished invocation of `name`, counted and timed.
    fn finish(&mut self, name: &crate::FunctionName, c: Completion, keep_alive: bool) -> Response {
        if let Some(latency) = c.latency {
            self.metrics
                .record_invocation(name, latency, c.result.is_ok());
        }
        let mut r = invoke_response(c.result);
        r.keep_alive = keep_alive;
        self.count_request("invoke", r.status);
        r
    }

    fn deploy(
        &mut self,
        name: crate::FunctionName,
        image: &[u8],
        mode: Option<crate::module::GroundhogMode>,
    ) -> Response {
        match self.service.deploy(name.clone(), image, mode) {
            Ok(d) => {
                let status = if d.replaced {
                    Status::Ok
                } else {
                    Status::Created
                };
                let body = json::deployed(name.as_str(), d.generation, d.replaced);
                json_response(status, &body)
            }
            Err(e) => {
                let status = match e {
                    DeployError::Invalid(ModuleError::ImageTooLarge) => Status::PayloadTooLarge,
                    DeployError::Invalid(_)
                    | DeployError::NameMismatch { .. }
                    | DeployError::Unloadable(_) => Status::BadRequest,
                    DeployError::Full => Status::ServiceUnavailable,
                };
                Response::text(status, &alloc::format!("{e}\n"))
            }
        }
    }

    /// The `/metrics` body: per-function series and gateway counters, then `kernel`'s samples.
    ///
    /// Samples are grouped by family (in order of first appearance), so each family's `# HELP`
    /// and `# TYPE` lines are written once and its samples are adjacent even if `kernel`
    /// interleaves families or reuses a gateway family's name. A kernel sample the format
    /// cannot carry (a bad metric or label name, a family seen before with another type, a
    /// repeated series) is left out rather than making the whole text unparsable.
    pub fn render_metrics(&self, kernel: &[Sample]) -> String {
        let mut e = Exposition::new();
        self.metrics.expose(&mut e);
        for s in kernel {
            let kind = match s.kind {
                SampleKind::Counter => FamilyType::Counter,
                SampleKind::Gauge => FamilyType::Gauge,
            };
            let _ = if s.runtime_labels.is_empty() {
                e.add(s.name, kind, s.help, s.labels, s.value)
            } else {
                let mut labels: Vec<(&str, &str)> = s.labels.to_vec();
                labels.extend(s.runtime_labels.iter().map(|(k, v)| (*k, v.as_str())));
                e.add(s.name, kind, s.help, &labels, s.value)
            };
        }
        e.render()
    }

    fn metrics_response(&self, kernel: &[Sample]) -> Response {
        let mut r = Response::new(Status::Ok);
        r.body = self.render_metrics(kernel).into_bytes();
        r.header("Content-Type", metrics::CONTENT_TYPE)
            .unwrap_or_else(|_| Response::new(Status::InternalServerError))
    }
}

/// The response carrying an invocation's result.
fn invoke_response(result: Result<Vec<u8>, InvokeError>) -> Response {
    match result {
        Ok(output) => {
            let mut r = Response::new(Status::Ok);
            r.body = output;
            r.header("Content-Type", "application/octet-stream")
                .unwrap_or_else(|_| Response::new(Status::InternalServerError))
        }
        Err(InvokeError::NotFound) => Response::text(Status::NotFound, "no such function\n"),
        Err(InvokeError::Unavailable) => {
            Response::text(Status::ServiceUnavailable, "no capacity, retry later\n")
        }
        Err(InvokeError::Failed(why)) => {
            Response::text(Status::InternalServerError, &alloc::format!("{why}\n"))
        }
    }
}

fn route_error(e: RouteError) -> Response {
    e.response()
}

fn json_response(status: Status, body: &str) -> Response {
    let mut r = Response::new(status);
    r.body = Vec::from(body.as_bytes());
    r.header("Content-Type", "application/json")
        .unwrap_or_else(|_| Response::new(Status::InternalServerError))
}

/// The answer to a checkpoint request.
fn checkpoint_response(
    written: Result<checkpoints::Written, checkpoints::CheckpointError>,
) -> Response {
    use checkpoints::CheckpointError as E;
    match written {
        Ok(w) => json_response(Status::Created, &json::checkpoint_written(&w)),
        Err(E::NoSuchProcess) => Response::text(Status::NotFound, "no such process\n"),
        Err(E::NoSuchFunction) => Response::text(Status::NotFound, "no such function\n"),
        Err(E::NotAFunction) => Response::text(
            Status::BadRequest,
            "a program: checkpoint one of its μprocesses (POST /processes/<pid>/checkpoint)\n",
        ),
        Err(E::MappedBeyondInstance) => Response::text(
            Status::Conflict,
            "the function's init mapped memory beyond its instance, which a checkpoint does not carry\n",
        ),
        Err(E::NoMemory) => Response::text(
            Status::ServiceUnavailable,
            "no memory for the function's zygote, or its init failed\n",
        ),
        Err(E::Busy) => Response::text(
            Status::Conflict,
            "the process kept running or is being checkpointed; try again\n",
        ),
        Err(E::RegionFull) => Response::text(
            Status::ServiceUnavailable,
            "the shared region is full (no free checkpoint slot or page)\n",
        ),
        Err(E::NoRegion) => {
            Response::text(Status::NotImplemented, "no shared region on this node\n")
        }
    }
}

#[cfg(test)]
mod fake_service;
#[cfg(test)]
mod tests;
