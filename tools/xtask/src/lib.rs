//! Fjord's host tool, run as `cargo xtask <command>` (see `cli` for the commands).
//!
//! It builds the kernel, packs the initrd, starts QEMU from a typed configuration (`qemu`), reads
//! the guest's serial log (`qemu_run`, `serial_log`) and runs every test layer (`test_runner`) and
//! the benchmarks (`bench`). It has no cargo features.
//!
//! `linux` boots the Linux-guest baseline with the same `qemu` and `cpio` modules, and `report`
//! turns benchmark results into the Markdown table and plots.
//!
//! `fn_cli` is the `fn` and `metrics` commands: the gateway's HTTP API (`http_client`) from the
//! command line, against the Fjord that `cargo xtask run` started.

#![forbid(unsafe_code)]

pub mod apps_build;
pub mod bench;
pub mod bench_apps;
pub mod bench_cxl;
pub mod bench_results;
pub mod cli;
pub mod cluster;
pub mod cpio;
pub mod disk;
pub mod e2e;
pub mod e2e_cli;
pub mod e2e_cluster;
pub mod e2e_conns;
pub mod e2e_groundhog;
pub mod e2e_http;
pub mod e2e_redis;
pub mod e2e_sockets;
pub mod fn_cli;
pub mod fuzz;
pub mod host_checks;
pub mod host_deps;
pub mod http_client;
pub mod initrd;
pub mod kernel_build;
pub mod ktest;
pub mod layers;
pub mod linux;
pub mod loadgen;
pub mod measure;
pub mod netns;
pub mod profile;
pub mod qemu;
pub mod qemu_run;
pub mod report;
pub mod run;
pub mod serial_log;
pub mod soak;
pub mod tap;
pub mod test_runner;
pub mod workspace;
pub mod wrk;
