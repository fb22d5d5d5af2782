//! Runtime metrics: per-function counters and latency histograms, named global counters, and
//! their Prometheus text exposition (format 0.0.4) for `GET /metrics`.
//!
//! Modules: [`histogram`] (buckets, histograms, quantiles), [`exposition`] (the text format,
//! families grouped whatever order samples come in), [`check`] (a strict checker of the text,
//! for tests).
//!
//! Per function the gateway exposes `fjord_function_invocations_total`,
//! `fjord_function_errors_total` and the histogram `fjord_function_latency_seconds` (recorded in
//! nanoseconds, exposed in seconds, Prometheus's base unit), or
//! `fjord_function_latency_instructions` when latency counts guest instructions (under
//! `-icount`, the deterministic clock), all labelled `function="<name>"`. Global counters
//! (dispatch decisions, isolation events, ...) are registered by name, help text and a fixed
//! label set; counters with the same name form one family.

pub mod check;
pub mod exposition;
pub mod histogram;

pub use exposition::{CONTENT_TYPE, Value};
pub use histogram::{Buckets, Histogram, MetricsError, Quantiles, exact_quantile};

use crate::function_name::FunctionName;
use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write;
use exposition::{Exposition, FamilyType, valid_label_name, valid_metric_name};

/// What latency observations count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LatencyUnit {
    /// Wall-clock nanoseconds, exposed as seconds.
    Nanoseconds,
    /// Guest instructions (`-icount shift=0`: deterministic).
    Instructions,
}

impl LatencyUnit {
    /// The unit of the exposed histogram: its name's suffix and its help text's last word.
    fn exposed(self) -> &'static str {
        match self {
            LatencyUnit::Nanoseconds => "seconds",
            LatencyUnit::Instructions => "instructions",
        }
    }

    /// An observation (a bucket bound or a sum) in the exposed unit.
    fn value(self, observed: u64) -> Value {
        match self {
            LatencyUnit::Nanoseconds => Value::seconds_from_nanos(observed),
            LatencyUnit::Instructions => Value::integer(observed),
        }
    }
}

/// Statistics of one function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionStats {
    /// Completed invocations (successful or not).
    pub invocations: u64,
    /// Invocations that failed (fault, timeout, out of memory).
    pub errors: u64,
    /// Latency of completed invocations.
    pub latency: Histogram,
}

/// One line of a human-readable report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionReport {
    /// Function name.
    pub name: String,
    /// Completed invocations.
    pub invocations: u64,
    /// Failed invocations.
    pub errors: u64,
    /// Estimated latency quantiles (`None` before the first invocation).
    pub quantiles: Option<Quantiles>,
}

/// Handle to a registered global counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CounterId(usize);

#[derive(Clone, Debug)]
struct Counter {
    name: String,
    help: String,
    labels: Vec<(String, String)>,
    value: u64,
}

const BUILTIN: [&str; 3] = [
    "fjord_function_invocations_total",
    "fjord_function_errors_total",
    "fjord_function_latency_",
];

/// All metrics of one gateway.
#[derive(Clone, Debug)]
pub struct Metrics {
    unit: LatencyUnit,
    buckets: Buckets,
    functions: BTreeMap<String, FunctionStats>,
    counters: Vec<Counter>,
}

impl Metrics {
    /// Empty metrics whose latency histograms use `unit` and `buckets`.
    pub fn new(unit: LatencyUnit, buckets: Buckets) -> Self {
        Metrics {
            unit,
            buckets,
            functions: BTreeMap::new(),
            counters: Vec::new(),
        }
    }

    /// Records a completed invocation of `function`.
    pub fn record_invocation(&mut self, function: &FunctionName, latency: u64, ok: bool) {
        let buckets = &self.buckets;
        let s = self
            .functions
            .entry(String::from(function.as_str()))
            .or_insert_with(|| FunctionStats {
                invocations: 0,
                errors: 0,
                latency: Histogram::new(buckets.clone()),
            });
        s.invocations += 1;
        s.errors += u64::from(!ok);
        s.latency.observe(latency);
    }

    /// Statistics of `function`, if it has been invoked.
    pub fn function(&self, function: &str) -> Option<&FunctionStats> {
        self.functions.get(function)
    }

    /// Forgets a function's statistics (after it is removed).
    pub fn remove_function(&mut self, function: &str) -> Option<FunctionStats> {
        self.functions.remove(function)
    }

    /// Registers a global counter `name{labels}` with `help`; counters sharing a name must share
    /// the help text and differ in labels.
    pub fn register_counter(
        &mut self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
    ) -> Result<CounterId, MetricsError> {
        if !valid_metric_name(name)
            || BUILTIN.iter().any(|b| name.starts_with(b))
            || !labels.iter().all(|(k, _)| valid_label_name(k))
        {
            return Err(MetricsError::BadName);
        }
        for c in self.counters.iter().filter(|c| c.name == name) {
            if c.help != help {
                return Err(MetricsError::HelpMismatch);
            }
            let same = c.labels.len() == labels.len()
                && c.labels
                    .iter()
                    .zip(labels)
                    .all(|((a, b), (c, d))| a == c && b == d);
            if same {
                return Err(MetricsError::Duplicate);
            }
        }
        self.counters.push(Counter {
            name: String::from(name),
            help: String::from(help),
            labels: labels
                .iter()
                .map(|&(k, v)| (String::from(k), String::from(v)))
                .collect(),
            value: 0,
        });
        Ok(CounterId(self.counters.len() - 1))
    }

    /// Adds `n` to a global counter (saturating).
    pub fn add(&mut self, id: CounterId, n: u64) -> Result<(), MetricsError> {
        let c = self
            .counters
            .get_mut(id.0)
            .ok_or(MetricsError::UnknownCounter)?;
        c.value = c.value.saturating_add(n);
        Ok(())
    }

    /// The value of a global counter.
    pub fn counter(&self, id: CounterId) -> Option<u64> {
        self.counters.get(id.0).map(|c| c.value)
    }

    /// Per-function counts and p50/p99/p99.9 estimates, by function name.
    pub fn report(&self) -> Vec<FunctionReport> {
        self.functions
            .iter()
            .map(|(name, s)| FunctionReport {
                name: name.clone(),
                invocations: s.invocations,
                errors: s.errors,
                quantiles: Quantiles::from_histogram(&s.latency),
            })
            .collect()
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut e = Exposition::new();
        self.expose(&mut e);
        e.render()
    }

    /// Adds every metric to `e`: per-function counters and histograms, then the global
    /// counters (families in order of registration).
    pub fn expose(&self, e: &mut Exposition) {
        // The names are valid and distinct by construction (see `register_counter`), so
        // nothing is rejected here.
        let fams = [
            (
                "fjord_function_invocations_total",
                "Completed invocations per function.",
            ),
            (
                "fjord_function_errors_total",
                "Failed invocations per function.",
            ),
        ];
        for (i, (fam, help)) in fams.iter().enumerate() {
            let Ok(id) = e.family(fam, FamilyType::Counter, help) else {
                continue;
            };
            for (name, s) in &self.functions {
                let v = if i == 0 { s.invocations } else { s.errors };
                let _ = e.sample(id, fam, &[("function", name)], Value::from(v));
            }
        }
        let hist = alloc::format!("fjord_function_latency_{}", self.unit.exposed());
        let help = alloc::format!(
            "Invocation latency per function, in {}.",
            self.unit.exposed()
        );
        if let Ok(id) = e.family(&hist, FamilyType::Histogram, &help) {
            let (bucket, sum, count) = (
                alloc::format!("{hist}_bucket"),
                alloc::format!("{hist}_sum"),
                alloc::format!("{hist}_count"),
            );
            let mut le = String::new();
            for (name, s) in &self.functions {
                for (bound, c) in s.latency.cumulative() {
                    le.clear();
                    match bound {
                        Some(b) => {
                            let _ = write!(le, "{}", self.unit.value(b));
                        }
                        None => le.push_str("+Inf"),
                    }
                    let _ = e.sample(
                        id,
                        &bucket,
                        &[("function", name), ("le", &le)],
                        Value::from(c),
                    );
                }
                let sum_value = self.unit.value(s.latency.sum());
                let _ = e.sample(id, &sum, &[("function", name)], sum_value);
                let count_value = Value::from(s.latency.count());
                let _ = e.sample(id, &count, &[("function", name)], count_value);
            }
        }
        for c in &self.counters {
            let labels: Vec<(&str, &str)> = c
                .labels
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let value = Value::from(c.value);
            let _ = e.add(&c.name, FamilyType::Counter, &c.help, &labels, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> FunctionName {
        FunctionName::new(s).unwrap()
    }

    #[test]
    fn renders_exact_text() {
        let mut m = Metrics::new(
            LatencyUnit::Nanoseconds,
            Buckets::new(&[100, 1000]).unwrap(),
        );
        m.record_invocation(&name("hello"), 50, true);
        m.record_invocation(&name("hello"), 500, true);
        m.record_invocation(&name("hello"), 5000, false);
        m.record_invocation(&name("add"), 100, true);
        let d = m
            .register_counter("fjord_dispatch_total", "Dispatch decisions.", &[])
            .unwrap();
        let r = m
            .register_counter(
                "fjord_isolation_events_total",
                "Isolation events.",
                &[("kind", "groundhog_restore")],
            )
            .unwrap();
        let f = m
            .register_counter(
                "fjord_isolation_events_total",
                "Isolation events.",
                &[("kind", "pd_fault")],
            )
            .unwrap();
        m.add(d, 4).unwrap();
        m.add(r, 3).unwrap();
        m.add(f, 1).unwrap();
        let expected = "\
# HELP fjord_function_invocations_total Completed invocations per function.
# TYPE fjord_function_invocations_total counter
fjord_function_invocations_total{function=\"add\"} 1
fjord_function_invocations_total{function=\"hello\"} 3
# HELP fjord_function_errors_total Failed invocations per function.
# TYPE fjord_function_errors_total counter
fjord_function_errors_total{function=\"add\"} 0
fjord_function_errors_total{function=\"hello\"} 1
# HELP fjord_function_latency_seconds Invocation latency per function, in seconds.
# TYPE fjord_function_latency_seconds histogram
fjord_function_latency_seconds_bucket{function=\"add\",le=\"0.0000001\"} 1
fjord_function_latency_seconds_bucket{function=\"add\",le=\"0.000001\"} 1
fjord_function_latency_seconds_bucket{function=\"add\",le=\"+Inf\"} 1
fjord_function_latency_seconds_sum{function=\"add\"} 0.0000001
fjord_function_latency_seconds_count{function=\"add\"} 1
fjord_function_latency_seconds_bucket{function=\"hello\",le=\"0.0000001\"} 1
fjord_function_latency_seconds_bucket{function=\"hello\",le=\"0.000001\"} 2
fjord_function_latency_seconds_bucket{function=\"hello\",le=\"+Inf\"} 3
fjord_function_latency_seconds_sum{function=\"hello\"} 0.00000555
fjord_function_latency_seconds_count{function=\"hello\"} 3
# HELP fjord_dispatch_total Dispatch decisions.
# TYPE fjord_dispatch_total counter
fjord_dispatch_total 4
# HELP fjord_isolation_events_total Isolation events.
# TYPE fjord_isolation_events_total counter
fjord_isolation_events_total{kind=\"groundhog_restore\"} 3
fjord_isolation_events_total{kind=\"pd_fault\"} 1
";
        assert_eq!(m.render(), expected);
    }

    #[test]
    fn empty_and_instruction_unit() {
        let m = Metrics::new(LatencyUnit::Instructions, Buckets::instructions());
        let text = m.render();
        assert!(text.contains("# TYPE fjord_function_latency_instructions histogram\n"));
        assert_eq!(text.lines().count(), 6);
        assert!(m.report().is_empty());
        let mut m = Metrics::new(LatencyUnit::Instructions, Buckets::new(&[1000]).unwrap());
        m.record_invocation(&name("f"), 1500, true);
        let text = m.render();
        for line in [
            "fjord_function_latency_instructions_bucket{function=\"f\",le=\"1000\"} 0\n",
            "fjord_function_latency_instructions_bucket{function=\"f\",le=\"+Inf\"} 1\n",
            "fjord_function_latency_instructions_sum{function=\"f\"} 1500\n",
        ] {
            assert!(text.contains(line), "{line:?} not in {text}");
        }
    }

    #[test]
    fn default_second_buckets_from_a_microsecond_to_ten_seconds() {
        let mut m = Metrics::new(LatencyUnit::Nanoseconds, Buckets::nanoseconds());
        m.record_invocation(&name("f"), 2_500_000, true);
        let text = m.render();
        let les: Vec<&str> = text
            .lines()
            .filter_map(|l| l.split("le=\"").nth(1)?.split('"').next())
            .collect();
        assert_eq!(les.first(), Some(&"0.000001"));
        assert_eq!(&les[les.len() - 3..], &["5", "10", "+Inf"]);
        assert!(text.contains("fjord_function_latency_seconds_sum{function=\"f\"} 0.0025\n"));
        assert!(check::check_exposition(&text).is_ok(), "{text}");
    }

    #[test]
    fn counter_registration_rules() {
        let mut m = Metrics::new(LatencyUnit::Nanoseconds, Buckets::nanoseconds());
        assert_eq!(
            m.register_counter("bad-name", "h", &[]),
            Err(MetricsError::BadName)
        );
        assert_eq!(
            m.register_counter("fjord_function_errors_total", "h", &[]),
            Err(MetricsError::BadName)
        );
        assert_eq!(
            m.register_counter("x", "h", &[("__x", "v")]),
            Err(MetricsError::BadName)
        );
        let a = m.register_counter("x", "h", &[("k", "v")]).unwrap();
        assert_eq!(
            m.register_counter("x", "other", &[("k", "w")]),
            Err(MetricsError::HelpMismatch)
        );
        assert_eq!(
            m.register_counter("x", "h", &[("k", "v")]),
            Err(MetricsError::Duplicate)
        );
        m.add(a, u64::MAX).unwrap();
        m.add(a, 1).unwrap();
        assert_eq!(m.counter(a), Some(u64::MAX));
        assert_eq!(m.add(CounterId(9), 1), Err(MetricsError::UnknownCounter));
    }

    #[test]
    fn report_quantiles() {
        let mut m = Metrics::new(LatencyUnit::Nanoseconds, Buckets::nanoseconds());
        for i in 1..=1000u64 {
            m.record_invocation(&name("f"), i * 1000, i != 1);
        }
        let r = &m.report()[0];
        assert_eq!((r.name.as_str(), r.invocations, r.errors), ("f", 1000, 1));
        assert_eq!(
            r.quantiles,
            Some(Quantiles {
                p50: 500_000,
                p99: 1_000_000,
                p999: 1_000_000
            })
        );
        assert!(m.remove_function("f").is_some());
        assert!(m.function("f").is_none());
    }
}
