//! A strict checker of Prometheus text exposition (format 0.0.4), for tests: the host tests
//! run it over rendered `/metrics` text, and the end-to-end tests over a booted guest's.
//!
//! Stricter than Prometheus's own parser where the format says "should": every family needs a
//! `# HELP` and a `# TYPE` line, once each, before its first sample.

use super::exposition::{valid_label_name, valid_metric_name};
use alloc::collections::BTreeSet;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

/// What a valid exposition holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Family names, in order.
    pub families: Vec<String>,
    /// Number of sample lines.
    pub samples: usize,
}

#[derive(Clone, Debug)]
struct Family {
    name: String,
    kind: Option<String>,
    help: bool,
    samples: usize,
}

/// Checks `text`; the error names the first offending line (1-based) and why.
///
/// Rules: lines end in `\n`; `# HELP` and `# TYPE` at most once per family and before its
/// samples; a family's lines are adjacent (once another family starts, it never continues);
/// sample names and label names match their grammars, label values use only the escapes `\\`,
/// `\"` and `\n`, a label name appears once per sample, and a series (name and labels) once
/// per text; a histogram's samples are `_bucket` (with `le`), `_sum` and `_count`; values are
/// numbers (or `+Inf`, `-Inf`, `NaN`), optionally followed by an integer timestamp.
pub fn check_exposition(text: &str) -> Result<Summary, String> {
    if !text.is_empty() && !text.ends_with('\n') {
        return Err("the text does not end in a newline".to_string());
    }
    let mut families: Vec<Family> = Vec::new();
    let mut series = BTreeSet::new();
    let mut summary = Summary::default();
    for (n, line) in text.lines().enumerate() {
        let n = n + 1;
        let at = |why: String| format!("line {n}: {why}: {line:?}");
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix('#') {
            let mut words = rest.trim_start_matches([' ', '\t']).splitn(3, [' ', '\t']);
            let (Some(keyword), name) = (words.next(), words.next()) else {
                continue;
            };
            if keyword != "HELP" && keyword != "TYPE" {
                continue; // a comment
            }
            let name = name.unwrap_or("");
            if !valid_metric_name(name) {
                return Err(at(format!("bad metric name {name:?}")));
            }
            let arg = words.next().unwrap_or("");
            let f = family_for_header(&mut families, name).map_err(&at)?;
            if f.samples > 0 {
                return Err(at(format!("# {keyword} after the samples of {name}")));
            }
            if keyword == "HELP" {
                if f.help {
                    return Err(at(format!("second # HELP for {name}")));
                }
                check_help(arg).map_err(&at)?;
                f.help = true;
            } else {
                if f.kind.is_some() {
                    return Err(at(format!("second # TYPE for {name}")));
                }
                let kind = arg.trim_end_matches([' ', '\t']);
                if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind) {
                    return Err(at(format!("unknown type {kind:?}")));
                }
                f.kind = Some(kind.to_string());
            }
            continue;
        }
        let (name, labels, rest) = split_sample(line).map_err(&at)?;
        let Some(f) = families.last_mut() else {
            return Err(at("sample before any # HELP / # TYPE".to_string()));
        };
        let kind = f.kind.as_deref().unwrap_or("");
        let belongs = match kind {
            "histogram" => ["_bucket", "_sum", "_count"]
                .iter()
                .any(|s| name.strip_suffix(s) == Some(f.name.as_str())),
            "summary" => {
                name == f.name
                    || ["_sum", "_count"]
                        .iter()
                        .any(|s| name.strip_suffix(s) == Some(f.name.as_str()))
            }
            _ => name == f.name,
        };
        if !belongs {
            let own = name == f.name;
            let kind = kind.to_string();
            let known = families.iter().any(|f| f.name == name);
            return Err(at(if own {
                format!("{name} is a {kind}: not one of its series names")
            } else if known {
                format!("sample of {name} apart from the rest of its family")
            } else {
                format!("sample of {name} without its # HELP / # TYPE header")
            }));
        }
        if !f.help || f.kind.is_none() {
            return Err(at(format!("family {} lacks # HELP or # TYPE", f.name)));
        }
        let pairs = parse_labels(labels).map_err(&at)?;
        if kind == "histogram" && name.ends_with("_bucket") && !pairs.iter().any(|(k, _)| k == "le")
        {
            return Err(at("histogram bucket without le".to_string()));
        }
        let mut key: Vec<(String, String)> = pairs;
        key.sort();
        if !series.insert((name.to_string(), key)) {
            return Err(at("repeated series".to_string()));
        }
        check_value(rest).map_err(&at)?;
        f.samples += 1;
        summary.samples += 1;
    }
    summary.families = families.into_iter().map(|f| f.name).collect();
    Ok(summary)
}

/// The family a `# HELP`/`# TYPE` line for `name` belongs to: the current one, or a new one.
fn family_for_header<'a>(
    families: &'a mut Vec<Family>,
    name: &str,
) -> Result<&'a mut Family, String> {
    let current = families.last().is_some_and(|f| f.name == name);
    if !current {
        if families.iter().any(|f| f.name == name) {
            return Err(format!("family {name} appears twice"));
        }
        families.push(Family {
            name: name.to_string(),
            kind: None,
            help: false,
            samples: 0,
        });
    }
    families.last_mut().ok_or_else(String::new)
}

/// A help text may escape only `\\` and newline.
fn check_help(help: &str) -> Result<(), String> {
    let mut chars = help.chars();
    while let Some(c) = chars.next() {
        if c == '\\' && !matches!(chars.next(), Some('\\' | 'n')) {
            return Err("bad escape in # HELP".to_string());
        }
    }
    Ok(())
}

/// Splits a sample line into its name, the text between the braces (empty without labels) and
/// what follows (value and timestamp).
fn split_sample(line: &str) -> Result<(&str, &str, &str), String> {
    let end = line
        .find(['{', ' ', '\t'])
        .ok_or("a sample needs a value")?;
    let name = &line[..end];
    if !valid_metric_name(name) {
        return Err(format!("bad metric name {name:?}"));
    }
    let rest = &line[end..];
    let Some(after) = rest.strip_prefix('{') else {
        return Ok((name, "", rest));
    };
    // Find the closing brace outside quoted values.
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in after.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '}' if !quoted => return Ok((name, &after[..i], &after[i + 1..])),
            _ => {}
        }
    }
    Err("unclosed label set".to_string())
}

/// Parses `a="x",b="y"` (a trailing comma allowed) into pairs with the values unescaped.
fn parse_labels(mut s: &str) -> Result<Vec<(String, String)>, String> {
    let mut out: Vec<(String, String)> = Vec::new();
    loop {
        s = s.trim_start_matches([' ', '\t']);
        if s.is_empty() {
            return Ok(out);
        }
        let (name, rest) = s.split_once('=').ok_or("label without =")?;
        let name = name.trim_end_matches([' ', '\t']);
        if !valid_label_name(name) && name != "le" {
            return Err(format!("bad label name {name:?}"));
        }
        if out.iter().any(|(k, _)| k == name) {
            return Err(format!("label {name} twice"));
        }
        let rest = rest
            .trim_start_matches([' ', '\t'])
            .strip_prefix('"')
            .ok_or("label value not quoted")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                None => return Err("unterminated label value".to_string()),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    _ => return Err("bad escape in a label value".to_string()),
                },
                Some((_, c)) => value.push(c),
            }
        };
        out.push((name.to_string(), value));
        s = rest[end + 1..].trim_start_matches([' ', '\t']);
        match s.strip_prefix(',') {
            Some(r) => s = r,
            None if s.is_empty() => return Ok(out),
            None => return Err("labels must be separated by commas".to_string()),
        }
    }
}

/// ` value [timestamp]`.
fn check_value(rest: &str) -> Result<(), String> {
    if !rest.starts_with([' ', '\t']) {
        return Err("no space before the value".to_string());
    }
    let mut words = rest.split_whitespace();
    let value = words.next().ok_or("no value")?;
    let number = matches!(value, "+Inf" | "-Inf" | "NaN")
        || (value.parse::<f64>().is_ok()
            && value
                .bytes()
                .all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b)));
    if !number {
        return Err(format!("bad value {value:?}"));
    }
    if let Some(ts) = words.next()
        && ts.parse::<i64>().is_err()
    {
        return Err(format!("bad timestamp {ts:?}"));
    }
    if words.next().is_some() {
        return Err("junk after the value".to_string());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_valid_text() {
        let text = "# HELP a_total A.\n# TYPE a_total counter\na_total{k=\"x\\\\\\\"\\n\"} 1\na_total{k=\"y\",} 2 1700000000\n\
                    # Free comment.\n# TYPE h histogram\n# HELP h H \\\\ \\n.\nh_bucket{le=\"1\"} 0\nh_bucket{le=\"+Inf\"} 1\nh_sum 3\nh_count 1\n";
        let s = check_exposition(text).unwrap();
        assert_eq!(s.families, ["a_total", "h"]);
        assert_eq!(s.samples, 6);
        assert_eq!(check_exposition(""), Ok(Summary::default()));
    }

    #[test]
    fn refuses_what_the_format_forbids() {
        let head = "# HELP a A.\n# TYPE a gauge\n";
        for (text, why) in [
            ("a 1\n", "sample before"),
            ("# HELP a A.\na 1\n", "lacks"),
            (&*format!("{head}a 1"), "newline"),
            (&*format!("{head}# HELP a A.\na 1\n"), "second # HELP"),
            (&*format!("{head}# TYPE a gauge\na 1\n"), "second # TYPE"),
            (&*format!("{head}a 1\n# HELP a A.\n"), "after the samples"),
            (
                &*format!("{head}a 1\n# HELP b B.\n# TYPE b gauge\nb 1\na 2\n"),
                "apart",
            ),
            (
                &*format!("{head}a 1\n# HELP b B.\n# TYPE b gauge\nb 1\n# HELP a A.\n"),
                "twice",
            ),
            (&*format!("{head}b 1\n"), "without its"),
            (
                &*format!("{head}a{{k=\"v\"}} 1\na{{k=\"v\"}} 2\n"),
                "repeated",
            ),
            (&*format!("{head}a{{k=\"v\",k=\"w\"}} 1\n"), "twice"),
            (&*format!("{head}a{{k=\"v\\x\"}} 1\n"), "bad escape"),
            (&*format!("{head}a{{k=v}} 1\n"), "not quoted"),
            (&*format!("{head}a{{1k=\"v\"}} 1\n"), "bad label name"),
            (&*format!("{head}a{{k=\"v\" j=\"w\"}} 1\n"), "commas"),
            (&*format!("{head}a{{k=\"v}} 1\n"), "unclosed"),
            (&*format!("{head}a x\n"), "bad value"),
            (&*format!("{head}a 1 2 3\n"), "junk"),
            ("# HELP a-b A.\n", "bad metric name"),
            ("# TYPE a countr\n", "unknown type"),
            ("# TYPE h histogram\n# HELP h H.\nh 1\n", "series names"),
            (
                "# TYPE h histogram\n# HELP h H.\nh_bucket 1\n",
                "without le",
            ),
        ] {
            let err = check_exposition(text).unwrap_err();
            assert!(err.contains(why), "{text:?}: {err}");
        }
    }
}
