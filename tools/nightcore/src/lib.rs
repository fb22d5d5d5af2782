//! A NightCore-like FaaS runtime on Linux (Jia and Witchel, ASPLOS '21, adapted), running the
//! same workload functions as Fjord (`apps/hotel`, `social`, `media`, `hipster`): the Linux
//! guest's baseline of the `workloads` benchmark, and (each invocation in a process forked from
//! a warmed parent) of the `restore` benchmark.
//!
//! - [`engine`]: the engine process, which receives external requests and routes every
//!   internal call between worker processes over pipes;
//! - [`worker`]: a worker process per function instance, and the [`fjord_app_kit::Env`] that
//!   turns a function's nested calls into messages to the engine;
//! - [`proto`]: the messages on the pipes;
//! - [`store`]: the key-value store in memory shared by all processes;
//! - [`apps`]: the workloads' function tables, and the `restore` group's `hello` and `dirty`;
//! - [`restore`]: the `restore` group's targets (Groundhog's baseline: a process forked per
//!   request from a warmed parent, [`worker::Isolation::Fork`]);
//! - [`bench`]: the measurements, by Fjord's open-loop method ([`fjord_faas::open_loop`]);
//! - [`config`]: the command line and the per-operation parameters from the Fjord run;
//! - [`sys`]: the system calls.
//!
//! Linux (x86_64) only. No cargo features. See `docs/benchmarking.md` for how it differs from
//! NightCore.

pub mod apps;
pub mod bench;
pub mod config;
pub mod engine;
pub mod proto;
pub mod restore;
pub mod store;
pub mod sys;
pub mod worker;
