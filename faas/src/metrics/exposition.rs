//! Prometheus text exposition format 0.0.4: names, escaping and sample lines.

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

/// Writes one sample line `name{l1="v1",...} value`.
pub fn write_sample(
    out: &mut impl Write,
    name: &str,
    labels: &[(&str, &str)],
    value: u64,
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

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::String;

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
        write_sample(&mut s, "m", &[("a", "x\\y\"z\nw"), ("b", "é")], 3).unwrap();
        assert_eq!(s, "m{a=\"x\\\\y\\\"z\\nw\",b=\"é\"} 3\n");
        let mut s = String::new();
        write_family_header(&mut s, "m", "counter", "a \"b\"\\c\nd").unwrap();
        assert_eq!(s, "# HELP m a \"b\"\\\\c\\nd\n# TYPE m counter\n");
    }
}
