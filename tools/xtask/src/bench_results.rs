//! Benchmark results on the host: the table printed to the terminal and the JSON file
//! `bench/results/<YYYY-MM-DD>.json` (an array of `Measurement`).

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};

use crate::measure::Measurement;
use crate::workspace;

/// Formats measurements as an aligned text table.
pub fn format_table(measurements: &[Measurement]) -> String {
    let header = ["metric", "system", "median", "min", "max", "runs", "unit"];
    let rows: Vec<[String; 7]> = measurements
        .iter()
        .map(|m| {
            [
                format!("{}/{}", m.group, m.metric),
                m.system.name().to_owned(),
                format_number(m.median),
                format_number(m.min),
                format_number(m.max),
                m.runs.to_string(),
                m.unit.clone(),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut text = String::new();
    let mut push_row = |cells: &[&str]| {
        let mut line = String::new();
        for (column, (cell, width)) in cells.iter().zip(widths).enumerate() {
            if column > 0 {
                line.push_str(" | ");
            }
            // Text columns left-aligned, numbers right-aligned.
            if (2..=5).contains(&column) {
                line.push_str(&format!("{cell:>width$}"));
            } else {
                line.push_str(&format!("{cell:<width$}"));
            }
        }
        text.push_str(line.trim_end());
        text.push('\n');
    };
    push_row(&header);
    let rule: Vec<String> = widths.iter().map(|width| "-".repeat(*width)).collect();
    push_row(&rule.iter().map(String::as_str).collect::<Vec<_>>());
    for row in &rows {
        push_row(&row.iter().map(String::as_str).collect::<Vec<_>>());
    }
    text
}

/// Whole numbers without decimals and with thousands separators; others with two decimals.
pub fn format_number(value: f64) -> String {
    if value.fract() != 0.0 || value.abs() >= 1e15 {
        return format!("{value:.2}");
    }
    let digits = format!("{}", value.abs() as u64);
    let mut grouped = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    if value < 0.0 {
        format!("-{grouped}")
    } else {
        grouped
    }
}

/// `bench/results/<today>.json` under the repository root.
pub fn results_path_for_today() -> PathBuf {
    results_path_for_today_with("")
}

/// [`results_path_for_today`] with `suffix` after the date (`-kvm` for the wall-clock runs).
pub fn results_path_for_today_with(suffix: &str) -> PathBuf {
    let days = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs() / 86_400);
    workspace::root()
        .join("bench")
        .join("results")
        .join(format!("{}{suffix}.json", date_from_days(days as i64)))
}

/// Writes `measurements` to `path` as a JSON array. Entries already in the file for other
/// (group, metric, system) keys are kept, so runs of different groups on one day add up. The file
/// is written to a `.tmp` sibling first and renamed.
pub fn write_results(path: &Path, measurements: &[Measurement]) -> Result<()> {
    let dir = path.parent().context("results path has no directory")?;
    std::fs::create_dir_all(dir).with_context(|| format!("could not create {}", dir.display()))?;
    let mut all: Vec<Measurement> = match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text)
            .with_context(|| format!("{} is not an array of measurements", path.display()))?,
        Err(_) => Vec::new(),
    };
    let key = |m: &Measurement| (m.group.clone(), m.metric.clone(), m.system);
    all.retain(|old| !measurements.iter().any(|new| key(new) == key(old)));
    all.extend_from_slice(measurements);
    let json = serde_json::to_string_pretty(&all)?;
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, json + "\n")
        .with_context(|| format!("could not write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("could not write {}", path.display()))?;
    Ok(())
}

/// The UTC date `days` days after 1970-01-01, as `YYYY-MM-DD` (proleptic Gregorian calendar;
/// H. Hinnant's `civil_from_days`).
pub fn date_from_days(days: i64) -> String {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::System;

    fn measurement(metric: &str, system: System, median: f64) -> Measurement {
        Measurement {
            group: "boot".into(),
            metric: metric.into(),
            system,
            unit: "insns".into(),
            median,
            min: median,
            max: median,
            runs: 1,
            wall_ns: None,
            p99: None,
        }
    }

    #[test]
    fn dates() {
        assert_eq!(date_from_days(0), "1970-01-01");
        assert_eq!(date_from_days(19_723), "2024-01-01");
        assert_eq!(date_from_days(19_782), "2024-02-29");
        assert_eq!(date_from_days(-1), "1969-12-31");
    }

    #[test]
    fn numbers() {
        assert_eq!(format_number(1_234_567.0), "1,234,567");
        assert_eq!(format_number(999.0), "999");
        assert_eq!(format_number(1.5), "1.50");
        assert_eq!(format_number(-1000.0), "-1,000");
    }

    #[test]
    fn table_has_header_rule_and_rows() {
        let table = format_table(&[
            measurement("boot_to_first_line", System::Fjord, 1234.0),
            measurement("x", System::FjordNi, 5.0),
        ]);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(lines[0].starts_with("metric"));
        assert!(
            lines[2].starts_with("boot/boot_to_first_line | fjord    |  1,234 |"),
            "{table}"
        );
        assert!(lines[3].contains("fjord_ni"));
    }

    #[test]
    fn results_file_merges_by_key() {
        let dir = std::env::temp_dir().join(format!("xtask-bench-{}", std::process::id()));
        let path = dir.join("results").join("2024-01-01.json");
        write_results(
            &path,
            &[
                measurement("a", System::Fjord, 1.0),
                measurement("b", System::Fjord, 2.0),
            ],
        )
        .unwrap();
        write_results(&path, &[measurement("a", System::Fjord, 3.0)]).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let all: Vec<Measurement> = serde_json::from_str(&text).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all.iter().find(|m| m.metric == "a").unwrap().median, 3.0);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
