//! Prometheus text exposition format 0.0.4: names, escaping, sample lines, and [`Exposition`],
//! which groups samples into families so that the text is valid whatever order its producers
//! report them in.
//!
//! The format's rules that [`Exposition`] upholds: each family has one `# HELP` and one
//! `# TYPE` line, written before its first sample; all samples of a family are adjacent; metric
//! and label names match their grammars; label values escape `\`, `"` and newline; a series
//! (name and labels) appears once.

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::{self, Write};

/// The `Content-Type` of a `/metrics` response.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Whether `name` matches `[a-zA-Z_:][a-zA-Z0-9_:]*`.
pub fn valid_metric_name(name: &str) -> bool {
    let mut b = name.bytes();
    b.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_' || c == b':')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b':')
}

/// Whether `name` matches `[a-zA-Z_][a-zA-Z0-9_]*` and does not start with the reserved `__`.
pub fn valid_label_name(name: &str) -> bool {
    let mut b = name.bytes();
    !name.starts_with("__")
        && b.next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// Writes a label value with `\`, `"` and newline escaped.
pub fn write_label_value(out: &mut impl Write, value: &str) -> fmt::Result {
    for c in value.chars() {
        match c {
            '\\' => out.write_str("\\\\")?,
            '"' => out.write_str("\\\"")?,
            '\n' => out.write_str("\\n")?,
            c => out.write_char(c)?,
        }
    }
    Ok(())
}

/// Writes `# HELP` (with `\` and newline escaped) and `# TYPE` lines.
pub fn write_family_header(
    out: &mut impl Write,
    name: &str,
    kind: &str,
    help: &str,
) -> fmt::Result {
    write!(out, "# HELP {name} ")?;
    for c in help.chars() {
        match c {
            '\\' => out.write_str("\\\\")?,
            '\n' => out.write_str("\\n")?,
            c => out.write_char(c)?,
        }
    }
    writeln!(out, "\n# TYPE {name} {kind}")
}

/// A sample's value: an integer, or a decimal fraction written exactly (no floating point), such
/// as nanoseconds written as seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Value {
    /// The value times `10^scale`.
    units: u64,
    /// Digits after the decimal point (0 or 9).
    scale: u32,
}

impl Value {
    /// The integer `n`.
    pub const fn integer(n: u64) -> Self {
        Value { units: n, scale: 0 }
    }

    /// `nanos` nanoseconds, as seconds (`1500` is written `0.0000015`).
    pub const fn seconds_from_nanos(nanos: u64) -> Self {
        Value {
            units: nanos,
            scale: 9,
        }
    }
}

impl From<u64> for Value {
    fn from(n: u64) -> Self {
        Value::integer(n)
    }
}

/// The shortest exact decimal: `12`, `0.5`, `10.000001` (no exponent, no trailing zeros).
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let one = 10u64.pow(self.scale);
        let (whole, mut frac) = (self.units / one, self.units % one);
        write!(f, "{whole}")?;
        if frac == 0 {
            return Ok(());
        }
        let mut digits = self.scale as usize;
        while frac % 10 == 0 {
            frac /= 10;
            digits -= 1;
        }
        write!(f, ".{frac:0digits$}")
    }
}

/// Writes one sample line `name{l1="v1",...} value`.
pub fn write_sample(
    out: &mut impl Write,
    name: &str,
    labels: &[(&str, &str)],
    value: Value,
) -> fmt::Result {
    out.write_str(name)?;
    if !labels.is_empty() {
        out.write_char('{')?;
        for (i, (k, v)) in labels.iter().enumerate() {
            if i > 0 {
                out.write_char(',')?;
            }
            write!(out, "{k}=\"")?;
            write_label_value(out, v)?;
            out.write_char('"')?;
        }
        out.write_char('}')?;
    }
    writeln!(out, " {value}")
}

/// The type of a metric family, as written in its `# TYPE` line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FamilyType {
    /// `counter`
    Counter,
    /// `gauge`
    Gauge,
    /// `histogram` (samples `<name>_bucket`, `<name>_sum`, `<name>_count`)
    Histogram,
}

impl FamilyType {
    /// The name in the `# TYPE` line.
    pub fn as_str(self) -> &'static str {
        match self {
            FamilyType::Counter => "counter",
            FamilyType::Gauge => "gauge",
            FamilyType::Histogram => "histogram",
        }
    }
}

/// Handle to a family of an [`Exposition`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FamilyId(usize);

#[derive(Clone, Debug)]
struct Family {
    name: String,
    kind: FamilyType,
    help: String,
    /// Sample lines, each `name{labels} value\n`.
    lines: String,
    /// The series (`name{labels}`) already written, to drop repeats.
    series: Vec<String>,
}

/// Why a family or a sample was left out of an [`Exposition`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejected {
    /// The metric or a label name does not match its grammar, or a label name repeats.
    BadName,
    /// The family exists with another type, or the name collides with a histogram's series.
    Conflict,
    /// The sample's name is not one of its family's series names.
    WrongFamily,
    /// The series (name and labels) is already in the family; the first value is kept.
    Duplicate,
}

/// A `/metrics` text under construction: families in order of first appearance, each with its
/// samples in order of arrival, however the producers interleave them.
#[derive(Clone, Debug, Default)]
pub struct Exposition {
    families: Vec<Family>,
    by_name: BTreeMap<String, usize>,
}

const HISTOGRAM_SUFFIXES: [&str; 3] = ["_bucket", "_sum", "_count"];

impl Exposition {
    /// An empty exposition.
    pub fn new() -> Self {
        Self::default()
    }

    /// The family `name`, added with `kind` and `help` if it is new (an existing family keeps
    /// its first help text).
    pub fn family(
        &mut self,
        name: &str,
        kind: FamilyType,
        help: &str,
    ) -> Result<FamilyId, Rejected> {
        if !valid_metric_name(name) {
            return Err(Rejected::BadName);
        }
        if let Some(&i) = self.by_name.get(name) {
            return match self.families.get(i) {
                Some(f) if f.kind == kind => Ok(FamilyId(i)),
                _ => Err(Rejected::Conflict),
            };
        }
        // A histogram's series names must not be families of their own, nor the reverse.
        let shadows = |fam: &str, kind: FamilyType, other: &str| {
            kind == FamilyType::Histogram
                && HISTOGRAM_SUFFIXES
                    .iter()
                    .any(|s| other.strip_suffix(s) == Some(fam))
        };
        if self
            .families
            .iter()
            .any(|f| shadows(&f.name, f.kind, name) || shadows(name, kind, &f.name))
        {
            return Err(Rejected::Conflict);
        }
        self.by_name.insert(String::from(name), self.families.len());
        self.families.push(Family {
            name: String::from(name),
            kind,
            help: String::from(help),
            lines: String::new(),
            series: Vec::new(),
        });
        Ok(FamilyId(self.families.len() - 1))
    }

    /// Adds the sample `name{labels} value` to `family`. `name` is the family's name, or for a
    /// histogram one of its `_bucket`, `_sum` and `_count` series.
    pub fn sample(
        &mut self,
        family: FamilyId,
        name: &str,
        labels: &[(&str, &str)],
        value: Value,
    ) -> Result<(), Rejected> {
        let f = self
            .families
            .get_mut(family.0)
            .ok_or(Rejected::WrongFamily)?;
        let belongs = match f.kind {
            FamilyType::Histogram => HISTOGRAM_SUFFIXES
                .iter()
                .any(|s| name.strip_suffix(s) == Some(f.name.as_str())),
            _ => name == f.name,
        };
        if !belongs {
            return Err(Rejected::WrongFamily);
        }
        let repeated = labels
            .iter()
            .enumerate()
            .any(|(i, (k, _))| labels[..i].iter().any(|(j, _)| j == k));
        if repeated || !labels.iter().all(|(k, _)| valid_label_name(k)) {
            return Err(Rejected::BadName);
        }
        let mut line = String::new();
        // Writing to a String cannot fail.
        let _ = write_sample(&mut line, name, labels, value);
        let series = line.rsplit_once(' ').map_or("", |(s, _)| s);
        if f.series.iter().any(|s| s == series) {
            return Err(Rejected::Duplicate);
        }
        f.series.push(String::from(series));
        f.lines.push_str(&line);
        Ok(())
    }

    /// Finds or adds the family, then adds the sample: [`Exposition::family`] and
    /// [`Exposition::sample`] in one call, for a family whose only series is its name.
    pub fn add(
        &mut self,
        name: &str,
        kind: FamilyType,
        help: &str,
        labels: &[(&str, &str)],
        value: Value,
    ) -> Result<(), Rejected> {
        let id = self.family(name, kind, help)?;
        self.sample(id, name, labels, value)
    }

    /// Writes every family: its `# HELP` and `# TYPE` lines, then its samples.
    pub fn write_to(&self, out: &mut impl Write) -> fmt::Result {
        for f in &self.families {
            write_family_header(out, &f.name, f.kind.as_str(), &f.help)?;
            out.write_str(&f.lines)?;
        }
        Ok(())
    }

    /// The text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = self.write_to(&mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(valid_metric_name("fjord_dispatch_total"));
        assert!(valid_metric_name(":a1"));
        assert!(!valid_metric_name("1a"));
        assert!(!valid_metric_name("a-b"));
        assert!(!valid_metric_name(""));
        assert!(valid_label_name("kind"));
        assert!(!valid_label_name("__name__"));
        assert!(!valid_label_name("a:b"));
    }

    #[test]
    fn escaping() {
        let mut s = String::new();
        write_sample(
            &mut s,
            "m",
            &[("a", "x\\y\"z\nw"), ("b", "é")],
            Value::from(3),
        )
        .unwrap();
        assert_eq!(s, "m{a=\"x\\\\y\\\"z\\nw\",b=\"é\"} 3\n");
        let mut s = String::new();
        write_family_header(&mut s, "m", "counter", "a \"b\"\\c\nd").unwrap();
        assert_eq!(s, "# HELP m a \"b\"\\\\c\\nd\n# TYPE m counter\n");
    }

    #[test]
    fn values_are_exact_decimals() {
        let shown = |v: Value| alloc::format!("{v}");
        assert_eq!(shown(Value::integer(0)), "0");
        assert_eq!(shown(Value::from(u64::MAX)), "18446744073709551615");
        assert_eq!(shown(Value::seconds_from_nanos(0)), "0");
        assert_eq!(shown(Value::seconds_from_nanos(1)), "0.000000001");
        assert_eq!(shown(Value::seconds_from_nanos(1_500)), "0.0000015");
        assert_eq!(shown(Value::seconds_from_nanos(20_000)), "0.00002");
        assert_eq!(shown(Value::seconds_from_nanos(10_000_000_000)), "10");
        assert_eq!(
            shown(Value::seconds_from_nanos(1_000_000_001)),
            "1.000000001"
        );
        assert_eq!(
            shown(Value::seconds_from_nanos(u64::MAX)),
            "18446744073.709551615"
        );
        let mut s = String::new();
        write_sample(
            &mut s,
            "t_seconds_sum",
            &[],
            Value::seconds_from_nanos(2_500_000),
        )
        .unwrap();
        assert_eq!(s, "t_seconds_sum 0.0025\n");
    }

    #[test]
    fn exposition_groups_interleaved_families() {
        let mut e = Exposition::new();
        let g = FamilyType::Gauge;
        e.add("b", g, "B.", &[("k", "1")], Value::from(1)).unwrap();
        e.add("a_total", FamilyType::Counter, "A.", &[], Value::from(2))
            .unwrap();
        e.add(
            "b",
            g,
            "other help: the first one stays",
            &[("k", "2")],
            Value::from(3),
        )
        .unwrap();
        let h = e.family("h", FamilyType::Histogram, "H.").unwrap();
        e.sample(h, "h_bucket", &[("le", "+Inf")], Value::from(1))
            .unwrap();
        e.sample(h, "h_count", &[], Value::from(1)).unwrap();
        e.sample(h, "h_sum", &[], Value::from(7)).unwrap();
        e.add("b", g, "B.", &[("k", "v\"\\\n")], Value::from(4))
            .unwrap();
        assert_eq!(
            e.render(),
            "# HELP b B.\n# TYPE b gauge\nb{k=\"1\"} 1\nb{k=\"2\"} 3\nb{k=\"v\\\"\\\\\\n\"} 4\n\
             # HELP a_total A.\n# TYPE a_total counter\na_total 2\n\
             # HELP h H.\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\nh_count 1\nh_sum 7\n"
        );
        assert!(super::super::check::check_exposition(&e.render()).is_ok());
    }

    #[test]
    fn exposition_leaves_out_what_the_format_cannot_carry() {
        let mut e = Exposition::new();
        let (c, g) = (FamilyType::Counter, FamilyType::Gauge);
        e.add("x", c, "X.", &[("k", "v")], Value::from(1)).unwrap();
        assert_eq!(
            e.add("x", g, "X.", &[], Value::from(1)),
            Err(Rejected::Conflict)
        );
        assert_eq!(
            e.add("x", c, "X.", &[("k", "v")], Value::from(2)),
            Err(Rejected::Duplicate)
        );
        assert_eq!(
            e.add("bad-name", c, "X.", &[], Value::from(1)),
            Err(Rejected::BadName)
        );
        assert_eq!(
            e.add("x", c, "X.", &[("__k", "v")], Value::from(1)),
            Err(Rejected::BadName)
        );
        assert_eq!(
            e.add("x", c, "X.", &[("j", "v"), ("j", "w")], Value::from(1)),
            Err(Rejected::BadName)
        );
        let h = e.family("h", FamilyType::Histogram, "H.").unwrap();
        assert_eq!(
            e.sample(h, "h", &[], Value::from(1)),
            Err(Rejected::WrongFamily)
        );
        assert_eq!(
            e.sample(h, "x", &[], Value::from(1)),
            Err(Rejected::WrongFamily)
        );
        assert_eq!(
            e.add("h_count", g, "C.", &[], Value::from(1)),
            Err(Rejected::Conflict)
        );
        e.add("z_sum", g, "Z.", &[], Value::from(1)).unwrap();
        assert_eq!(
            e.family("z", FamilyType::Histogram, "Z."),
            Err(Rejected::Conflict)
        );
        assert_eq!(
            e.render(),
            "# HELP x X.\n# TYPE x counter\nx{k=\"v\"} 1\n# HELP h H.\n# TYPE h histogram\n\
             # HELP z_sum Z.\n# TYPE z_sum gauge\nz_sum 1\n"
        );
    }

    proptest::proptest! {
        /// Whatever families, kinds, labels and values producers report, in whatever order,
        /// the text passes the strict checker.
        #[test]
        fn any_samples_render_valid_text(
            samples in proptest::collection::vec(
                (0usize..6, proptest::bool::ANY, "[a-z_]{0,3}", "\\PC{0,6}|[\\\\\"\n]{0,3}", proptest::num::u64::ANY, proptest::bool::ANY),
                0..40,
            )
        ) {
            const NAMES: [&str; 6] = ["a", "b_total", "h_sum", "c", "bad-name", "h_count"];
            let mut e = Exposition::new();
            let _ = e.family("h", FamilyType::Histogram, "H.");
            for (n, gauge, label, value, v, seconds) in &samples {
                let kind = if *gauge { FamilyType::Gauge } else { FamilyType::Counter };
                let v = if *seconds { Value::seconds_from_nanos(*v) } else { Value::from(*v) };
                let _ = e.add(NAMES[*n], kind, "help \\ with\nnewline", &[(label.as_str(), value.as_str())], v);
            }
            let text = e.render();
            proptest::prop_assert!(super::super::check::check_exposition(&text).is_ok(), "{}", text);
        }
    }
}
