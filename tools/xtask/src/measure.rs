//! One benchmark measurement, as every benchmark source (Fjord guest, Linux guest) reports it.

use serde::{Deserialize, Serialize};

/// Which system a measurement was taken on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum System {
    /// Fjord itself.
    Fjord,
    /// Fjord in its no-isolation mode (Jord_NI).
    FjordNi,
    /// A baseline implemented inside Fjord (e.g. fresh page table per function, copying chain).
    FjordBaseline,
    /// The Linux guest booted by the same QEMU.
    Linux,
}

/// A benchmark result: the median of `runs` samples of one metric.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    /// Benchmark group (`boot`, `syscall`, `fork`, `pd`, `faas`, ...), used to narrow runs.
    pub group: String,
    /// Metric name shared by every system that measures the same thing (e.g. `null_syscall`).
    pub metric: String,
    /// The system measured.
    pub system: System,
    /// Unit of `median`/`min`/`max`: `insns` (guest instructions under icount) unless stated.
    pub unit: String,
    /// Median over the samples.
    pub median: f64,
    /// Smallest sample.
    pub min: f64,
    /// Largest sample.
    pub max: f64,
    /// Number of samples.
    pub runs: u64,
    /// Wall-clock nanoseconds per operation on the host, when measured (noisy under TCG).
    pub wall_ns: Option<f64>,
    /// The 99th percentile of the samples, when the guest reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99: Option<f64>,
}

impl System {
    /// The name used in tables and in the guest's `BENCH` records (`fjord`, `fjord_ni`,
    /// `fjord_baseline`, `linux`).
    pub fn name(self) -> &'static str {
        match self {
            System::Fjord => "fjord",
            System::FjordNi => "fjord_ni",
            System::FjordBaseline => "fjord_baseline",
            System::Linux => "linux",
        }
    }

    /// The system named `name` (as [`System::name`] spells it; the serde spellings `fjordni` and
    /// `fjordbaseline` are accepted too).
    pub fn from_name(name: &str) -> Option<System> {
        match name {
            "fjord" => Some(System::Fjord),
            "fjord_ni" | "fjordni" => Some(System::FjordNi),
            "fjord_baseline" | "fjordbaseline" => Some(System::FjordBaseline),
            "linux" => Some(System::Linux),
            _ => None,
        }
    }
}
