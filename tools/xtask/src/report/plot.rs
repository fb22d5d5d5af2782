//! PNG bar charts of one group's medians (guest instructions): a pair of horizontal bars per
//! metric, Fjord above Linux, the value printed after each bar and `missing` where a side has
//! no measurement. The axis is logarithmic when the group's values span more than
//! [`LOG_SPAN`]×, linear otherwise. Text uses DejaVu Sans from Debian's `fonts-dejavu-core`,
//! registered with plotters' pure-Rust `ab_glyph` renderer (no fontconfig).

use std::path::Path;
use std::sync::OnceLock;

use anyhow::{Context, Result, anyhow};
use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{INSNS, Row};
use crate::host_deps;
use crate::measure::Measurement;

/// Largest/smallest value above which the axis is logarithmic.
pub const LOG_SPAN: f64 = 30.0;
/// The font file and the package that provides it.
const FONT: (&str, &str) = (
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "fonts-dejavu-core",
);
/// Bar colours.
const FJORD_COLOR: RGBColor = RGBColor(0x1f, 0x77, 0xb4);
/// Bar colours.
const LINUX_COLOR: RGBColor = RGBColor(0xe6, 0x73, 0x0b);
/// Width of the image and of the metric-name column, in pixels.
const WIDTH: u32 = 1100;
/// Width of the metric-name column.
const NAMES_WIDTH: u32 = 290;

/// A median in guest instructions, if the measurement exists and counts them.
fn insns(m: Option<&Measurement>) -> Option<f64> {
    m.filter(|m| m.unit == INSNS && m.median > 0.0)
        .map(|m| m.median)
}

/// Whether any row of the group has an instruction count to plot.
pub fn plottable(rows: &[Row<'_>]) -> bool {
    rows.iter()
        .any(|r| insns(r.fjord).is_some() || insns(r.linux).is_some())
}

/// A value for an axis or bar label: `950`, `12.5k`, `1.3M`, `2.1G`.
pub fn short_number(value: f64) -> String {
    let (scaled, suffix) = if value >= 1e9 {
        (value / 1e9, "G")
    } else if value >= 1e6 {
        (value / 1e6, "M")
    } else if value >= 1e3 {
        (value / 1e3, "k")
    } else {
        (value, "")
    };
    let text = if scaled >= 100.0 || suffix.is_empty() {
        format!("{scaled:.0}")
    } else {
        format!("{scaled:.1}")
    };
    format!("{}{suffix}", text.strip_suffix(".0").unwrap_or(&text))
}

/// Registers the font once; plotters' `sans-serif` family then renders with it.
fn ensure_font() -> Result<()> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            let (path, package) = FONT;
            if !Path::new(path).is_file() {
                host_deps::ensure_debian_packages(&[package]).map_err(|e| format!("{e:#}"))?;
            }
            let bytes = std::fs::read(path).map_err(|e| format!("reading {path}: {e}"))?;
            // plotters keeps fonts for the life of the process.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
                .map_err(|_| format!("{path} is not a usable font"))
        })
        .clone()
        .map_err(|e| anyhow!(e))
}

/// Draws the chart of `group` into the PNG file `path`.
pub fn bar_chart(path: &Path, group: &str, rows: &[Row<'_>]) -> Result<()> {
    ensure_font()?;
    let rows: Vec<&Row<'_>> = rows
        .iter()
        .filter(|r| insns(r.fjord).is_some() || insns(r.linux).is_some())
        .collect();
    let values: Vec<f64> = rows
        .iter()
        .flat_map(|r| [insns(r.fjord), insns(r.linux)])
        .flatten()
        .collect();
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(0.0, f64::max);
    if values.is_empty() {
        return Err(anyhow!("no instruction counts in group {group}"));
    }
    let height = 120 + 70 * rows.len() as u32;
    let root = BitMapBackend::new(path, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    if hi / lo > LOG_SPAN {
        let floor = 10f64.powf(lo.log10().floor());
        // Room on the right for the value labels.
        let ceil = 10f64.powf((hi * 6.0).log10().ceil());
        let title = format!("{group}: median guest instructions (log scale)");
        draw(&root, &title, &rows, (floor..ceil).log_scale(), floor)?;
    } else {
        let title = format!("{group}: median guest instructions");
        draw(&root, &title, &rows, 0.0..hi * 1.3, 0.0)?;
    }
    root.present()
        .map_err(|e| anyhow!("{e}"))
        .context("writing the PNG")
}

/// Draws title, axis, bars, labels and legend; `floor` is where bars start on the x axis.
fn draw<X>(
    root: &DrawingArea<BitMapBackend<'_>, Shift>,
    title: &str,
    rows: &[&Row<'_>],
    x: X,
    floor: f64,
) -> Result<()>
where
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
{
    let err = |e: DrawingAreaErrorKind<_>| anyhow!("{e}");
    let n = rows.len();
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 24))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(NAMES_WIDTH)
        .build_cartesian_2d(x, -0.5f64..(n as f64 - 0.5))
        .map_err(err)?;
    let short = |v: &f64| short_number(*v);
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_labels(8)
        .x_label_formatter(&short)
        .x_desc("guest instructions (median, icount)")
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 16))
        .draw()
        .map_err(err)?;

    // Row i is drawn at y = n - 1 - i so the first metric is on top; Fjord above Linux.
    let centre = |i: usize| (n - 1 - i) as f64;
    let sides = [
        (
            "Fjord",
            FJORD_COLOR,
            0.06,
            0.40,
            rows.iter().map(|r| insns(r.fjord)).collect::<Vec<_>>(),
        ),
        (
            "Linux",
            LINUX_COLOR,
            -0.40,
            -0.06,
            rows.iter().map(|r| insns(r.linux)).collect(),
        ),
    ];
    for (_, color, y0, y1, values) in &sides {
        let bars = values.iter().enumerate().filter_map(|(i, v)| {
            v.map(|v| {
                Rectangle::new(
                    [(floor, centre(i) + y0), (v, centre(i) + y1)],
                    color.filled(),
                )
            })
        });
        chart.draw_series(bars).map_err(err)?;
        let left_centre = Pos::new(HPos::Left, VPos::Center);
        let labels = values.iter().enumerate().map(|(i, v)| {
            let y = centre(i) + (y0 + y1) / 2.0;
            let (at, text, colour) = match v {
                Some(v) => (*v, short_number(*v), BLACK),
                None => (floor, "missing".to_owned(), RGBColor(0x80, 0x80, 0x80)),
            };
            EmptyElement::at((at, y))
                + Text::new(
                    text,
                    (6, 0),
                    ("sans-serif", 15)
                        .into_font()
                        .color(&colour)
                        .pos(left_centre),
                )
        });
        chart.draw_series(labels).map_err(err)?;
    }
    // Legend in the title row, right-aligned, clear of the bars.
    for (k, (name, color, ..)) in sides.iter().enumerate() {
        let x = WIDTH as i32 - 190 + 90 * k as i32;
        root.draw(&Rectangle::new([(x, 14), (x + 16, 30)], color.filled()))
            .map_err(err)?;
        root.draw(&Text::new(
            name.to_string(),
            (x + 22, 22),
            ("sans-serif", 17)
                .into_font()
                .color(&BLACK)
                .pos(Pos::new(HPos::Left, VPos::Center)),
        ))
        .map_err(err)?;
    }

    // Metric names, right-aligned against the y axis.
    let right_centre = Pos::new(HPos::Right, VPos::Center);
    for (i, row) in rows.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(floor, centre(i)));
        root.draw(&Text::new(
            row.metric.to_owned(),
            (px - 10, py),
            ("sans-serif", 16)
                .into_font()
                .color(&BLACK)
                .pos(right_centre),
        ))
        .map_err(err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_numbers() {
        assert_eq!(short_number(950.0), "950");
        assert_eq!(short_number(10_575.0), "10.6k");
        assert_eq!(short_number(1_000_000.0), "1M");
        assert_eq!(short_number(13_115_836.0), "13.1M");
        assert_eq!(short_number(698_403_209.0), "698M");
        assert_eq!(short_number(2.1e9), "2.1G");
    }
}
