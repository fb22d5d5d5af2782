//! Fjord FaaS runtime logic: the pure, host-testable parts of the orchestrator and gateway.
//!
//! Modules:
//! - [`jbsq`]: the [`jbsq::Dispatcher`] policy trait and JBSQ(k) with internal/external queues;
//! - [`core_groups`]: how the CPUs split into orchestrator groups;
//! - [`http`]: incremental HTTP/1.1 request parser, response writer, API router;
//! - [`module`]: function module (static-PIE ELF64) validation, the [`module::LoadPlan`] and
//!   relocation; [`module::manifest`] is the `.fjord_manifest` format;
//! - [`hdr`]: the HDR histogram the load generators keep latencies in;
//! - [`metrics`]: counters, latency histograms, quantiles and Prometheus text exposition;
//! - [`gateway`]: request handling of the HTTP gateway over a pluggable
//!   [`gateway::FunctionService`], and one connection's request/response stream;
//! - [`function_name`]: the validated [`FunctionName`] type they share;
//! - [`workloads`]: the ported Jord workloads' operations, with sample requests;
//! - [`open_loop`]: the open-loop load method (Poisson arrivals, the SLO search) of the
//!   benchmarks;
//! - [`restore_targets`]: the requests of the `restore` benchmark, named alike on Fjord and
//!   Linux.
//!
//! Cargo features: none. The crate is `no_std` + `alloc` and free of `unsafe`; the kernel drives
//! it, host tests (`cargo test -p fjord-faas`) check it.
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod core_groups;
pub mod function_name;
pub mod gateway;
pub mod hdr;
pub mod http;
pub mod jbsq;
pub mod metrics;
pub mod module;
pub mod open_loop;
pub mod restore_targets;
pub mod workloads;

pub use function_name::FunctionName;
