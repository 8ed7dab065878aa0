//! An SVG plot of a tsunami run: committed and offered transactions per second on top, the
//! P50 and P99 response times below (log scale), over the same time axis. Plain SVG text, no
//! dependencies; every number drawn comes from the rows given.

use super::tsunami::Row;
use std::fmt::Write as _;

const W: f64 = 900.0;
const H: f64 = 560.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 20.0;
const TOP_Y: (f64, f64) = (50.0, 270.0);
const BOTTOM_Y: (f64, f64) = (320.0, 520.0);

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// A "nice" upper bound for an axis (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 times a power of ten,
/// at least `v`), so quarters of it are round numbers and the data fills most of the panel.
fn nice_ceil(v: f64) -> f64 {
    if v <= 0.0 {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    for m in [1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0] {
        if m * p >= v {
            return m * p;
        }
    }
    10.0 * p
}

/// A horizontal grid line at `y` across the plot, labelled on the left.
fn gridline(out: &mut String, y: f64, label: &str) {
    let _ = writeln!(
        out,
        r##"<line x1="{LEFT}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" font-size="11" text-anchor="end">{}</text>"##,
        W - RIGHT,
        LEFT - 6.0,
        y + 4.0,
        esc(label)
    );
}

/// The vertical title of the panel spanning `ys`.
fn axis_title(out: &mut String, ys: (f64, f64), title: &str) {
    let mid = (ys.0 + ys.1) / 2.0;
    let _ = writeln!(
        out,
        r#"<text x="16" y="{mid}" font-size="12" transform="rotate(-90 16 {mid})" text-anchor="middle">{}</text>"#,
        esc(title)
    );
}

fn polyline(out: &mut String, pts: &[(f64, f64)], color: &str, dash: bool) {
    if pts.is_empty() {
        return;
    }
    let points: Vec<String> = pts.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
    let _ = writeln!(
        out,
        r#"<polyline fill="none" stroke="{color}" stroke-width="1.8"{} points="{}"/>"#,
        if dash { r#" stroke-dasharray="6,4""# } else { "" },
        points.join(" ")
    );
}

fn legend(out: &mut String, x: f64, y: f64, items: &[(&str, &str, bool)]) {
    let mut x = x;
    for (label, color, dash) in items {
        let _ = writeln!(
            out,
            r#"<line x1="{x}" y1="{y}" x2="{}" y2="{y}" stroke="{color}" stroke-width="2"{}/><text x="{}" y="{}" font-size="12">{}</text>"#,
            x + 24.0,
            if *dash { r#" stroke-dasharray="6,4""# } else { "" },
            x + 30.0,
            y + 4.0,
            esc(label)
        );
        x += 40.0 + 7.0 * label.len() as f64;
    }
}

/// The plot of `rows` (one per second) as an SVG document.
pub fn tsunami_svg(title: &str, rows: &[Row]) -> String {
    let n = rows.len().max(1) as f64;
    let x_of = |sec: f64| LEFT + (W - LEFT - RIGHT) * sec / n;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{}" y="22" font-size="13" text-anchor="middle">{}</text>"#,
        W / 2.0,
        esc(title)
    );
    // Spike shading, on both panels.
    let spike: Vec<u64> = rows.iter().filter(|r| r.phase == "spike").map(|r| r.second).collect();
    if let (Some(&a), Some(&b)) = (spike.first(), spike.last()) {
        for (y0, y1) in [TOP_Y, BOTTOM_Y] {
            let _ = writeln!(
                out,
                r##"<rect x="{:.1}" y="{y0}" width="{:.1}" height="{}" fill="#fde8d8"/>"##,
                x_of(a as f64),
                x_of(b as f64 + 1.0) - x_of(a as f64),
                y1 - y0
            );
        }
    }
    // Top: transactions per second, linear.
    let ymax = nice_ceil(rows.iter().map(|r| r.offered_tps.max(r.tps as f64)).fold(0.0, f64::max));
    let y_tps = |v: f64| TOP_Y.1 - (TOP_Y.1 - TOP_Y.0) * v / ymax;
    for i in 0..=4 {
        let v = ymax * i as f64 / 4.0;
        gridline(&mut out, y_tps(v), &format!("{v:.0}"));
    }
    axis_title(&mut out, TOP_Y, "transactions per second");
    let step = |f: &dyn Fn(&Row) -> f64| -> Vec<(f64, f64)> {
        rows.iter()
            .flat_map(|r| {
                let y = f(r);
                [(x_of(r.second as f64), y), (x_of(r.second as f64 + 1.0), y)]
            })
            .collect()
    };
    polyline(&mut out, &step(&|r| y_tps(r.offered_tps)), "#888", true);
    polyline(&mut out, &step(&|r| y_tps(r.tps as f64)), "#1f77b4", false);
    legend(
        &mut out,
        LEFT + 10.0,
        TOP_Y.0 - 10.0,
        &[("committed tps", "#1f77b4", false), ("offered tps", "#888", true)],
    );
    // Bottom: response time, log10 scale in microseconds.
    let lat: Vec<f64> = rows
        .iter()
        .flat_map(|r| [r.p50_us, r.p99_us])
        .filter(|v| *v > 0.0)
        .collect();
    let lo = lat.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = lat.iter().copied().fold(0.0, f64::max);
    let (d0, d1) = if lat.is_empty() {
        (0, 3)
    } else {
        let d0 = lo.log10().floor() as i32;
        (d0, (hi.log10().ceil() as i32).max(d0 + 1))
    };
    let y_lat = |v: f64| {
        let l = v.max(10f64.powi(d0)).log10();
        BOTTOM_Y.1 - (BOTTOM_Y.1 - BOTTOM_Y.0) * (l - f64::from(d0)) / f64::from(d1 - d0)
    };
    for d in d0..=d1 {
        let v = 10f64.powi(d);
        let y = y_lat(v);
        let label = if v >= 1e6 {
            format!("{} s", v / 1e6)
        } else if v >= 1e3 {
            format!("{} ms", v / 1e3)
        } else {
            format!("{v} us")
        };
        gridline(&mut out, y, &label);
    }
    axis_title(&mut out, BOTTOM_Y, "response time");
    let points = |f: &dyn Fn(&Row) -> f64| -> Vec<(f64, f64)> {
        rows.iter()
            .filter(|r| r.tps > 0)
            .map(|r| (x_of(r.second as f64 + 0.5), y_lat(f(r))))
            .collect()
    };
    polyline(&mut out, &points(&|r| r.p99_us), "#d62728", false);
    polyline(&mut out, &points(&|r| r.p50_us), "#2ca02c", false);
    legend(
        &mut out,
        LEFT + 10.0,
        BOTTOM_Y.0 - 10.0,
        &[
            ("P50", "#2ca02c", false),
            ("P99", "#d62728", false),
            ("spike", "#f4a582", false),
        ],
    );
    // Time axis.
    let tick = nice_ceil(n / 10.0).max(1.0) as u64;
    let mut s = 0;
    while s as f64 <= n {
        let x = x_of(s as f64);
        let _ = writeln!(
            out,
            r#"<line x1="{x:.1}" y1="{}" x2="{x:.1}" y2="{}" stroke="black"/><text x="{x:.1}" y="{}" font-size="11" text-anchor="middle">{s}</text>"#,
            BOTTOM_Y.1,
            BOTTOM_Y.1 + 5.0,
            BOTTOM_Y.1 + 18.0
        );
        s += tick;
    }
    for (y0, y1) in [TOP_Y, BOTTOM_Y] {
        let _ = writeln!(
            out,
            r#"<rect x="{LEFT}" y="{y0}" width="{}" height="{}" fill="none" stroke="black"/>"#,
            W - LEFT - RIGHT,
            y1 - y0
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" font-size="12" text-anchor="middle">seconds since start</text>"#,
        (LEFT + W - RIGHT) / 2.0,
        H - 8.0
    );
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(second: u64, phase: &'static str, tps: u64, p99: f64) -> Row {
        Row {
            second,
            phase,
            offered_tps: tps as f64,
            tps,
            qps: tps,
            p50_us: p99 / 2.0,
            p99_us: p99,
            max_us: p99,
            aborts: 0,
        }
    }

    #[test]
    fn axes_are_nice_and_the_plot_draws_every_second() {
        assert_eq!(nice_ceil(0.0), 1.0);
        assert_eq!(nice_ceil(7.0), 8.0);
        assert_eq!(nice_ceil(120.0), 120.0);
        assert_eq!(nice_ceil(52_525.0), 60_000.0);
        assert_eq!(nice_ceil(50_000.0), 50_000.0);
        let rows = vec![
            row(0, "before", 100, 300.0),
            row(1, "spike", 10_000, 900.0),
            row(2, "after", 100, 310.0),
        ];
        let svg = tsunami_svg("a <title> & more", &rows);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("a &lt;title&gt; &amp; more"));
        // Two step lines of 3 seconds (6 points each) and two latency lines of 3 points.
        let polylines: Vec<&str> = svg.lines().filter(|l| l.starts_with("<polyline")).collect();
        assert_eq!(polylines.len(), 4);
        let counts: Vec<usize> = polylines
            .iter()
            .map(|l| l.split("points=\"").nth(1).unwrap().split(' ').count())
            .collect();
        assert_eq!(counts, [6, 6, 3, 3]);
        // The spike is shaded on both panels.
        assert_eq!(svg.matches("#fde8d8").count(), 2);
    }
}
