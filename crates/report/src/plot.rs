//! Scalability plots of one [`Chart`] (a metric of a workload), as SVG or PNG, one panel per
//! mode side by side on a shared y axis so that processes and threads read against each other:
//!
//! - [`Kind::Scaling`]: each label's mean against the task count, with its spread as error bars
//!   (mmtests' Hmean ± HStddev for rates, Amean ± Stddev for times) and the baseline's perfect
//!   scaling as a grey guide;
//! - [`Kind::Change`]: each label's percent change against the baseline (the first label) per
//!   task count, positive is better as in `pagelab compare`, significant changes marked `*`;
//!   numbers from another source are compared among themselves (see
//!   [`crate::series::Panel::changes`]).
//!
//! Task counts go on a log2 axis, where 1, 2, 4, ... are evenly spaced, as scalability plots
//! usually draw them. A label keeps its colour everywhere; where a number comes from is drawn
//! in the line and the marker, and the legend says it in words: measured is solid with filled
//! circles, projected dashed with hollow circles, imported dotted with triangles.

use std::fmt;

use pagelab_bench::results::Origin;
use pagelab_bench::stats::Significance;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::fonts::{self, FAMILY};
use crate::raster::Raster;
use crate::series::{Chart, Source, summary_name};

/// What a plot shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The metric against the task count.
    Scaling,
    /// Percent change against the baseline label.
    Change,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Scaling => "scaling",
            Kind::Change => "change",
        }
    }
}

/// The file format of a plot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Svg,
    Png,
}

impl Format {
    pub fn extension(self) -> &'static str {
        match self {
            Format::Svg => "svg",
            Format::Png => "png",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.extension())
    }
}

/// What a plot says beyond its chart.
#[derive(Clone, Debug)]
pub struct Context {
    /// The first label: the scaling guide's and every change's reference.
    pub baseline: String,
    /// Where the numbers come from ([`crate::provenance::summary`]), the subtitle.
    pub provenance: String,
    /// The rule behind the `*` of change plots.
    pub rule: Significance,
}

impl Context {
    /// The context of `chart` within `res`: `baseline` as reference, the provenance of the
    /// runs of the chart's workload, the results' significance rule.
    pub fn of(res: &crate::Results, chart: &Chart, baseline: &str) -> Context {
        Context {
            baseline: baseline.to_string(),
            provenance: crate::provenance::summary(
                res.runs
                    .iter()
                    .filter(|r| r.meta.workload == chart.workload),
            ),
            rule: res.rule,
        }
    }
}

/// Draws `chart` as `kind` in `format`. Errors (one line) when there is nothing to draw: no
/// panel, or for a change plot no label besides the baseline with the baseline's task counts.
pub fn render(
    chart: &Chart,
    kind: Kind,
    format: Format,
    ctx: &Context,
) -> Result<Vec<u8>, PlotError> {
    fonts::ensure_registered();
    let fig = Figure::new(chart, kind, ctx)?;
    let (w, h) = fig.size;
    match format {
        Format::Svg => {
            let mut svg = String::new();
            {
                let root = SVGBackend::with_string(&mut svg, (w, h)).into_drawing_area();
                fig.draw(&root)?;
                root.present().map_err(draw_err)?;
            }
            Ok(svg.into_bytes())
        }
        Format::Png => {
            let mut rgb = vec![0u8; w as usize * h as usize * 3];
            {
                let root = Raster(BitMapBackend::with_buffer(&mut rgb, (w, h))).into_drawing_area();
                fig.draw(&root)?;
                root.present().map_err(draw_err)?;
            }
            encode_png(&rgb, w, h)
        }
    }
}

/// Why a plot could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// The chart has no panel.
    #[error("nothing to plot for {workload} {metric}")]
    Empty { workload: String, metric: String },
    /// No sample has a positive task count, so there is no x axis.
    #[error("nothing to plot for {workload} {metric}: no positive task count")]
    NoTaskCount { workload: String, metric: String },
    /// A change plot needs a label besides the baseline at the baseline's task counts.
    #[error(
        "no change to plot for {workload} {metric}: no two labels have samples at the same task counts from the same source"
    )]
    NoChange { workload: String, metric: String },
    /// The drawing backend failed. Its error type is generic over the backend, so the
    /// message is kept rather than the error.
    #[error("cannot draw the plot: {0}")]
    Draw(String),
    #[error("cannot encode PNG: {0}")]
    Png(#[from] png::EncodingError),
}

fn draw_err(e: impl fmt::Display) -> PlotError {
    PlotError::Draw(e.to_string())
}

fn encode_png(rgb: &[u8], w: u32, h: u32) -> Result<Vec<u8>, PlotError> {
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut writer = enc.write_header()?;
    writer.write_image_data(rgb)?;
    writer.finish()?;
    Ok(out)
}

/// Colour-blind-safe colours (Okabe and Ito), one per colour slot
/// ([`crate::series::Series::colour`]).
const PALETTE: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(90, 90, 90),
    RGBColor(140, 86, 75),
];
const GUIDE: RGBColor = RGBColor(150, 150, 150);
const INK: RGBColor = RGBColor(33, 33, 33);
const MUTED: RGBColor = RGBColor(100, 100, 100);

fn colour(slot: usize) -> RGBColor {
    PALETTE[slot % PALETTE.len()]
}

fn font(size: f64) -> FontDesc<'static> {
    FontDesc::new(FontFamily::Name(FAMILY), size, FontStyle::Normal)
}

fn bold(size: f64) -> FontDesc<'static> {
    FontDesc::new(FontFamily::Name(FAMILY), size, FontStyle::Bold)
}

/// How a line is stroked: where its numbers come from.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Dash {
    Solid,
    Dashed,
    Dotted,
}

/// The marker on each point: where its numbers come from.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Marker {
    Filled,
    Hollow,
    Triangle,
}

fn look(source: &Source) -> (Dash, Marker) {
    match source.origin {
        Origin::Measured => (Dash::Solid, Marker::Filled),
        Origin::Projected => (Dash::Dashed, Marker::Hollow),
        Origin::Imported => (Dash::Dotted, Marker::Triangle),
    }
}

/// A point as drawn: x is log2 of the task count.
#[derive(Clone, Debug)]
struct Dot {
    x: f64,
    y: f64,
    /// Error bar ends, when there is a spread.
    bar: Option<(f64, f64)>,
    /// Marked significant (change plots).
    star: bool,
}

#[derive(Clone, Debug)]
struct Curve {
    colour: RGBColor,
    dash: Dash,
    marker: Option<Marker>,
    width: u32,
    dots: Vec<Dot>,
}

#[derive(Clone, Debug)]
struct PanelFig {
    mode: String,
    /// Guides first (drawn under the data), then the labels' curves.
    curves: Vec<Curve>,
}

/// What a legend entry shows before its text.
#[derive(Clone, Debug)]
enum Glyph {
    Line(RGBColor, Dash, Option<Marker>, u32),
    Star,
}

/// The whole figure, laid out, before it meets a backend.
struct Figure {
    size: (u32, u32),
    title: String,
    subtitle: String,
    panels: Vec<PanelFig>,
    x_range: (f64, f64),
    x_ticks: Vec<f64>,
    y_range: (f64, f64),
    y_desc: String,
    y_fmt: YFormat,
    /// Entries with their top-left corner in the legend strip.
    legend: Vec<(Glyph, String, (i32, i32))>,
}

const TITLE_H: u32 = 78;
const PLOT_H: u32 = 470;
const LEGEND_ROW: i32 = 26;
const GLYPH_W: i32 = 40;

/// Perfect scaling of a metric: totals (faults or operations per second of all tasks) grow
/// with the task count; per-CPU rates and times stay where one task has them.
fn scales_with_tasks(metric: &str, higher_is_better: bool) -> bool {
    higher_is_better && !metric.contains("/cpu")
}

fn rule_name(rule: Significance) -> &'static str {
    match rule {
        Significance::Interval => "interval rule",
        Significance::TTest => "t-test, p < 0.10",
    }
}

impl Figure {
    fn new(chart: &Chart, kind: Kind, ctx: &Context) -> Result<Figure, PlotError> {
        if chart.panels.is_empty() {
            return Err(PlotError::Empty {
                workload: chart.workload.clone(),
                metric: chart.metric.clone(),
            });
        }
        let mut tasks: Vec<u32> = chart
            .panels
            .iter()
            .flat_map(|p| {
                p.series
                    .iter()
                    .flat_map(|s| s.points.iter().map(|p| p.tasks))
            })
            .filter(|&t| t > 0)
            .collect();
        tasks.sort_unstable();
        tasks.dedup();
        let (Some(&tmin), Some(&tmax)) = (tasks.first(), tasks.last()) else {
            return Err(PlotError::NoTaskCount {
                workload: chart.workload.clone(),
                metric: chart.metric.clone(),
            });
        };
        let lg = |t: u32| f64::from(t).log2();
        let x_range = if tmin == tmax {
            (lg(tmin) - 1.0, lg(tmax) + 1.0)
        } else {
            let pad = (lg(tmax) - lg(tmin)) * 0.08 + 0.15;
            (lg(tmin) - pad, lg(tmax) + pad)
        };
        let x_ticks: Vec<f64> = if tasks.len() <= 10 {
            tasks.iter().map(|&t| lg(t)).collect()
        } else {
            (0..32)
                .map(f64::from)
                .filter(|&e| e >= lg(tmin) && e <= lg(tmax))
                .collect()
        };
        let mut legend_items: Vec<(Glyph, String)> = Vec::new();
        let mut seen: Vec<(usize, Source)> = Vec::new();
        let mut panels = Vec::new();
        let (title, y_desc, y_range, y_fmt);
        match kind {
            Kind::Scaling => {
                let top = chart
                    .panels
                    .iter()
                    .flat_map(|p| p.series.iter().flat_map(|s| s.points.iter()))
                    .map(|p| p.mean + p.spread.max(0.0))
                    .filter(|v| v.is_finite())
                    .fold(0.0, f64::max);
                let y_top = if top > 0.0 { top * 1.12 } else { 1.0 };
                let linear = scales_with_tasks(&chart.metric, chart.higher_is_better);
                // (source, label whose 1-task mean the guide starts from)
                let mut guides_seen: Vec<(Source, String)> = Vec::new();
                for p in &chart.panels {
                    let mut curves = Vec::new();
                    // Perfect scaling per source, from the 1-task mean of the source's first
                    // label (the baseline, where the source has it).
                    let mut sources: Vec<&Source> = p.series.iter().map(|s| &s.source).collect();
                    sources.sort();
                    sources.dedup();
                    for src in sources {
                        let Some(s) = p
                            .series
                            .iter()
                            .filter(|s| s.source == *src)
                            .min_by_key(|s| s.label_index)
                        else {
                            continue;
                        };
                        let Some(one) = s.points.iter().find(|p| p.tasks == 1) else {
                            continue;
                        };
                        if !(one.mean.is_finite() && one.mean > 0.0) {
                            continue;
                        }
                        // As far as this source has task counts in this panel.
                        let reach = p
                            .series
                            .iter()
                            .filter(|o| o.source == s.source)
                            .flat_map(|o| o.points.iter().map(|p| p.tasks))
                            .max()
                            .unwrap_or(1);
                        let (dash, _) = look(&s.source);
                        curves.push(Curve {
                            colour: GUIDE,
                            dash,
                            marker: None,
                            width: 2,
                            dots: guide(one.mean, reach, linear, y_top),
                        });
                        let key = (s.source.clone(), s.label.clone());
                        if !guides_seen.contains(&key) {
                            guides_seen.push(key);
                        }
                    }
                    for s in &p.series {
                        let (dash, marker) = look(&s.source);
                        curves.push(Curve {
                            colour: colour(s.colour),
                            dash,
                            marker: Some(marker),
                            width: 2,
                            dots: s
                                .points
                                .iter()
                                .filter(|p| p.tasks > 0 && p.mean.is_finite())
                                .map(|p| Dot {
                                    x: lg(p.tasks),
                                    y: p.mean,
                                    bar: (p.spread.is_finite() && p.spread > 0.0)
                                        .then_some((p.mean - p.spread, p.mean + p.spread)),
                                    star: false,
                                })
                                .collect(),
                        });
                        if !seen.contains(&(s.label_index, s.source.clone())) {
                            seen.push((s.label_index, s.source.clone()));
                        }
                    }
                    panels.push(PanelFig {
                        mode: p.mode.clone(),
                        curves,
                    });
                }
                seen.sort();
                for (i, src) in &seen {
                    let (dash, marker) = look(src);
                    let Some(s) = chart
                        .panels
                        .iter()
                        .flat_map(|p| p.series.iter())
                        .find(|s| s.label_index == *i)
                    else {
                        continue;
                    };
                    legend_items.push((
                        Glyph::Line(colour(s.colour), dash, Some(marker), 2),
                        format!("{} ({})", s.label, src.describe()),
                    ));
                }
                guides_seen.sort();
                for (src, from) in &guides_seen {
                    let (dash, _) = look(src);
                    let how = if linear {
                        "1-task mean × tasks"
                    } else {
                        "1-task mean"
                    };
                    legend_items.push((
                        Glyph::Line(GUIDE, dash, None, 2),
                        format!("perfect scaling of {from} ({how}, {})", src.describe()),
                    ));
                }
                title = format!("{}: {} by task count", chart.workload, chart.metric);
                y_desc = format!("{}, {}", chart.metric, summary_name(chart.higher_is_better));
                y_range = (0.0, y_top);
                y_fmt = YFormat::for_max(y_top);
            }
            Kind::Change => {
                let mut lo: f64 = 0.0;
                let mut hi: f64 = 0.0;
                let mut any_star = false;
                let mut any_interval = false;
                let mut all_changes = Vec::new();
                for p in &chart.panels {
                    let changes = p.changes(chart.higher_is_better, ctx.rule);
                    let mut curves = Vec::new();
                    for c in &changes {
                        let (dash, marker) = look(&c.source);
                        for pt in &c.points {
                            let (l, h) = pt.interval.unwrap_or((pt.pct, pt.pct));
                            lo = lo.min(pt.pct).min(l);
                            hi = hi.max(pt.pct).max(h);
                            any_star |= pt.significant;
                            any_interval |= pt.interval.is_some();
                        }
                        curves.push(Curve {
                            colour: colour(c.colour),
                            dash,
                            marker: Some(marker),
                            width: 2,
                            dots: c
                                .points
                                .iter()
                                .filter(|p| p.tasks > 0)
                                .map(|p| Dot {
                                    x: lg(p.tasks),
                                    y: p.pct,
                                    bar: p.interval,
                                    star: p.significant,
                                })
                                .collect(),
                        });
                        if !seen.contains(&(c.label_index, c.source.clone())) {
                            seen.push((c.label_index, c.source.clone()));
                        }
                    }
                    panels.push(PanelFig {
                        mode: p.mode.clone(),
                        curves,
                    });
                    all_changes.extend(changes);
                }
                if seen.is_empty() {
                    return Err(PlotError::NoChange {
                        workload: chart.workload.clone(),
                        metric: chart.metric.clone(),
                    });
                }
                // The zero line is the baseline itself.
                for p in &mut panels {
                    p.curves.insert(
                        0,
                        Curve {
                            colour: INK,
                            dash: Dash::Solid,
                            marker: None,
                            width: 1,
                            dots: [x_range.0, x_range.1]
                                .into_iter()
                                .map(|x| Dot {
                                    x,
                                    y: 0.0,
                                    bar: None,
                                    star: false,
                                })
                                .collect(),
                        },
                    );
                }
                seen.sort();
                legend_items.push((
                    Glyph::Line(INK, Dash::Solid, None, 1),
                    format!("baseline: {}", ctx.baseline),
                ));
                for (i, src) in &seen {
                    let (dash, marker) = look(src);
                    let c = all_changes
                        .iter()
                        .find(|c| c.label_index == *i && c.source == *src);
                    let Some(c) = c else { continue };
                    // A source without the report's baseline is compared with its own first label.
                    let against = if c.baseline != ctx.baseline {
                        format!(", against {}", c.baseline)
                    } else {
                        String::new()
                    };
                    legend_items.push((
                        Glyph::Line(colour(c.colour), dash, Some(marker), 2),
                        format!("{} ({}{against})", c.label, src.describe()),
                    ));
                }
                if any_star {
                    legend_items.push((
                        Glyph::Star,
                        format!("significant ({})", rule_name(ctx.rule)),
                    ));
                }
                if any_interval {
                    legend_items.push((
                        Glyph::Line(INK, Dash::Solid, None, 1),
                        "bars on projected curves: range of the change over the captures' pairings (no significance test)".into(),
                    ));
                }
                let span = (hi - lo).max(2.0);
                title = format!(
                    "{}: {}, change against {}",
                    chart.workload, chart.metric, ctx.baseline
                );
                y_desc = format!(
                    "% change of the {} (positive is better)",
                    if chart.higher_is_better {
                        "Hmean"
                    } else {
                        "Amean"
                    }
                );
                y_range = (lo - span * 0.12, hi + span * 0.18);
                y_fmt = YFormat::Percent {
                    decimals: if span >= 20.0 { 0 } else { 1 },
                };
            }
        }
        let n = panels.len() as u32;
        let width = if n == 1 { 860 } else { 640 * n };
        let legend = layout_legend(legend_items, width as i32 - 40);
        let rows = legend
            .iter()
            .map(|(_, _, (_, y))| y / LEGEND_ROW + 1)
            .max()
            .unwrap_or(0);
        let height = TITLE_H + PLOT_H + rows as u32 * LEGEND_ROW as u32 + 24;
        Ok(Figure {
            size: (width, height),
            title,
            subtitle: ctx.provenance.clone(),
            panels,
            x_range,
            x_ticks,
            y_range,
            y_desc,
            y_fmt,
            legend,
        })
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), PlotError> {
        root.fill(&WHITE).map_err(draw_err)?;
        let (top, rest) = root.split_vertically(TITLE_H);
        let (plots, legend) = rest.split_vertically(PLOT_H);
        let width = self.size.0 as i32;
        let title = fit(&self.title, &bold(22.0), width - 40);
        top.draw(&Text::new(title, (20, 14), bold(22.0).color(&INK)))
            .map_err(draw_err)?;
        let subtitle = fit(&self.subtitle, &font(15.0), width - 40);
        top.draw(&Text::new(subtitle, (20, 46), font(15.0).color(&MUTED)))
            .map_err(draw_err)?;
        let areas = plots.split_evenly((1, self.panels.len()));
        for (area, p) in areas.iter().zip(&self.panels) {
            self.draw_panel(area, p)?;
        }
        for (glyph, text, (x, y)) in &self.legend {
            let (x, y) = (x + 20, y + 8);
            let mid = y + LEGEND_ROW / 2;
            match glyph {
                Glyph::Line(c, dash, marker, w) => {
                    for seg in dashes((x, mid), (x + GLYPH_W - 6, mid), *dash) {
                        legend
                            .draw(&PathElement::new(seg, c.stroke_width(*w)))
                            .map_err(draw_err)?;
                    }
                    if let Some(m) = marker {
                        draw_marker(&legend, (x + (GLYPH_W - 6) / 2, mid), *m, *c)?;
                    }
                }
                Glyph::Star => {
                    legend
                        .draw(&Text::new(
                            "*",
                            (x + (GLYPH_W - 6) / 2, mid + 4),
                            bold(22.0)
                                .color(&INK)
                                .pos(Pos::new(HPos::Center, VPos::Center)),
                        ))
                        .map_err(draw_err)?;
                }
            }
            legend
                .draw(&Text::new(
                    text.clone(),
                    (x + GLYPH_W + 4, mid),
                    font(14.0)
                        .color(&INK)
                        .pos(Pos::new(HPos::Left, VPos::Center)),
                ))
                .map_err(draw_err)?;
        }
        Ok(())
    }

    fn draw_panel<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        p: &PanelFig,
    ) -> Result<(), PlotError> {
        let (x0, x1) = self.x_range;
        let (y0, y1) = self.y_range;
        let mut chart = ChartBuilder::on(area)
            .caption(&p.mode, bold(16.0).color(&INK))
            .margin(12)
            .margin_right(26)
            .x_label_area_size(50)
            .y_label_area_size(86)
            .build_cartesian_2d(
                TaskAxis {
                    inner: (x0..x1).into(),
                    ticks: self.x_ticks.clone(),
                },
                y0..y1,
            )
            .map_err(draw_err)?;
        let x_desc = match p.mode.as_str() {
            "processes" | "threads" => format!("number of {} (log scale)", p.mode),
            other => format!("tasks, {other} (log scale)"),
        };
        let y_fmt = self.y_fmt;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc(self.y_desc.as_str())
            .axis_desc_style(font(15.0).color(&INK))
            .label_style(font(13.0).color(&INK))
            .y_label_formatter(&|y| y_fmt.format(*y))
            .y_labels(8)
            .bold_line_style(RGBColor(222, 222, 222))
            .light_line_style(TRANSPARENT)
            .axis_style(MUTED)
            .draw()
            .map_err(draw_err)?;
        // Error bars under everything else.
        for c in &p.curves {
            let style = c.colour.stroke_width(1);
            for d in &c.dots {
                let Some((lo, hi)) = d.bar else { continue };
                chart
                    .draw_series([PathElement::new(vec![(d.x, lo), (d.x, hi)], style)])
                    .map_err(draw_err)?;
                for end in [lo, hi] {
                    chart
                        .draw_series([EmptyElement::at((d.x, end))
                            + PathElement::new(vec![(-5, 0), (5, 0)], style)])
                        .map_err(draw_err)?;
                }
            }
        }
        for c in &p.curves {
            let style = c.colour.stroke_width(c.width);
            let pts: Vec<(f64, f64)> = c.dots.iter().map(|d| (d.x, d.y)).collect();
            match c.dash {
                Dash::Solid => {
                    chart
                        .draw_series(LineSeries::new(pts, style))
                        .map_err(draw_err)?;
                }
                Dash::Dashed => {
                    chart
                        .draw_series(DashedLineSeries::new(pts, 9, 6, style))
                        .map_err(draw_err)?;
                }
                Dash::Dotted => {
                    chart
                        .draw_series(DashedLineSeries::new(pts, 2, 5, style))
                        .map_err(draw_err)?;
                }
            }
        }
        for c in &p.curves {
            let Some(m) = c.marker else { continue };
            for d in &c.dots {
                let colour = c.colour;
                match m {
                    Marker::Filled => chart
                        .draw_series([Circle::new((d.x, d.y), 5, colour.filled())])
                        .map(|_| ()),
                    Marker::Hollow => chart
                        .draw_series([EmptyElement::at((d.x, d.y))
                            + Circle::new((0, 0), 5, WHITE.filled())
                            + Circle::new((0, 0), 5, colour.stroke_width(2))])
                        .map(|_| ()),
                    Marker::Triangle => chart
                        .draw_series([TriangleMarker::new((d.x, d.y), 7, colour.filled())])
                        .map(|_| ()),
                }
                .map_err(draw_err)?;
                if d.star {
                    chart
                        .draw_series([EmptyElement::at((d.x, d.y))
                            + Text::new(
                                "*",
                                (0, -12),
                                bold(22.0)
                                    .color(&INK)
                                    .pos(Pos::new(HPos::Center, VPos::Center)),
                            )])
                        .map_err(draw_err)?;
                }
            }
        }
        Ok(())
    }
}

/// The x axis: log2 of the task count, with a tick at each task count measured (or at the
/// powers of two when there are many), labelled with the task count itself.
struct TaskAxis {
    inner: plotters::coord::types::RangedCoordf64,
    ticks: Vec<f64>,
}

impl Ranged for TaskAxis {
    type FormatOption = plotters::coord::ranged1d::NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(value, limit)
    }

    fn key_points<H: plotters::coord::ranged1d::KeyPointHint>(&self, _: H) -> Vec<f64> {
        self.ticks.clone()
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.inner.range()
    }
}

impl plotters::coord::ranged1d::ValueFormatter<f64> for TaskAxis {
    fn format_ext(&self, x: &f64) -> String {
        format!("{}", x.exp2().round())
    }
}

/// The points of a perfect-scaling guide from the 1-task mean `one` up to `tmax` tasks: `one ×
/// tasks` when the metric scales with tasks, else `one` throughout; cut where it leaves the
/// plot at `y_top`, so that it does not squash the data it is a reference for.
fn guide(one: f64, tmax: u32, linear: bool, y_top: f64) -> Vec<Dot> {
    let end = f64::from(tmax.max(1)).log2();
    let dot = |x: f64, y: f64| Dot {
        x,
        y,
        bar: None,
        star: false,
    };
    if !linear {
        return vec![dot(0.0, one), dot(end.max(0.0), one)];
    }
    // y = one * 2^x leaves the plot at x = log2(y_top / one).
    let cut = (y_top / one).log2().min(end);
    if cut <= 0.0 {
        return vec![dot(0.0, one)];
    }
    let steps = 48;
    (0..=steps)
        .map(|i| {
            let x = cut * f64::from(i) / f64::from(steps);
            dot(x, one * x.exp2())
        })
        .collect()
}

/// The segments of a legend line sample.
fn dashes(from: (i32, i32), to: (i32, i32), dash: Dash) -> Vec<Vec<(i32, i32)>> {
    let (on, off) = match dash {
        Dash::Solid => return vec![vec![from, to]],
        Dash::Dashed => (9, 6),
        Dash::Dotted => (2, 5),
    };
    let mut out = Vec::new();
    let mut x = from.0;
    while x < to.0 {
        out.push(vec![(x, from.1), ((x + on).min(to.0), from.1)]);
        x += on + off;
    }
    out
}

fn draw_marker<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    at: (i32, i32),
    m: Marker,
    c: RGBColor,
) -> Result<(), PlotError> {
    match m {
        Marker::Filled => area.draw(&Circle::new(at, 5, c.filled())),
        Marker::Hollow => area
            .draw(&Circle::new(at, 5, WHITE.filled()))
            .and_then(|_| area.draw(&Circle::new(at, 5, c.stroke_width(2)))),
        Marker::Triangle => area.draw(&TriangleMarker::new(at, 7, c.filled())),
    }
    .map_err(draw_err)
}

/// Places legend entries left to right, wrapping to a new row where one would overflow
/// `width`; returns each entry with its top-left corner.
fn layout_legend(items: Vec<(Glyph, String)>, width: i32) -> Vec<(Glyph, String, (i32, i32))> {
    let f = font(14.0);
    let mut out = Vec::new();
    let (mut x, mut y) = (0, 0);
    for (g, text) in items {
        let text = fit(&text, &f, width - GLYPH_W - 8);
        let w = GLYPH_W + 4 + text_width(&text, &f) + 28;
        if x > 0 && x + w > width {
            x = 0;
            y += LEGEND_ROW;
        }
        out.push((g, text, (x, y)));
        x += w;
    }
    out
}

fn text_width(text: &str, f: &FontDesc) -> i32 {
    f.box_size(text)
        .map_or(text.len() as i32 * 8, |(w, _)| w as i32)
}

/// `text`, shortened with an ellipsis where it would be wider than `width` pixels.
fn fit(text: &str, f: &FontDesc, width: i32) -> String {
    if text_width(text, f) <= width {
        return text.to_string();
    }
    let mut chars: Vec<char> = text.chars().collect();
    while !chars.is_empty() {
        chars.pop();
        let s: String = chars.iter().collect::<String>() + "…";
        if text_width(&s, f) <= width {
            return s;
        }
    }
    "…".into()
}

/// How the y axis writes its numbers.
#[derive(Clone, Copy, Debug, PartialEq)]
enum YFormat {
    /// Divided by `div` and suffixed (`2.5M`), with `decimals`.
    Scaled {
        div: f64,
        suffix: &'static str,
        decimals: usize,
    },
    Percent {
        decimals: usize,
    },
}

impl YFormat {
    /// A format whose ticks (about eight up to `max`) read without repeated digits.
    fn for_max(max: f64) -> YFormat {
        let (div, suffix) = if max >= 1e9 {
            (1e9, "G")
        } else if max >= 1e6 {
            (1e6, "M")
        } else if max >= 1e4 {
            (1e3, "k")
        } else {
            (1.0, "")
        };
        let step = max / div / 8.0;
        // plotters steps by 1, 2 or 5 times a power of ten, at most about `step`.
        let decimals = if step >= 1.0 {
            0
        } else if step >= 0.1 {
            1
        } else if step >= 0.01 {
            2
        } else {
            3
        };
        YFormat::Scaled {
            div,
            suffix,
            decimals,
        }
    }

    fn format(self, v: f64) -> String {
        match self {
            YFormat::Scaled {
                div,
                suffix,
                decimals,
            } => {
                if v == 0.0 {
                    "0".into()
                } else {
                    format!("{:.*}{suffix}", decimals, v / div)
                }
            }
            YFormat::Percent { decimals } => {
                if v.abs() < 1e-9 {
                    "0%".into()
                } else {
                    format!("{v:+.decimals$}%")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::series::{Filter, charts, tests::example};

    fn ctx() -> Context {
        Context {
            baseline: "base".into(),
            provenance: "measured: engine on a test host".into(),
            rule: Significance::Interval,
        }
    }

    #[test]
    fn svg_has_titles_legend_and_distinct_styles_per_source() {
        let c = &charts(&example(), &Filter::default())[0];
        let svg =
            String::from_utf8(render(c, Kind::Scaling, Format::Svg, &ctx()).unwrap()).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..100]);
        for want in [
            "pft: faults/sec by task count",
            "measured: engine on a test host",
            "base (measured)",
            "new (projected for big-box)",
            "perfect scaling of base (1-task mean × tasks, measured)",
            "perfect scaling of base (1-task mean × tasks, projected for big-box)",
            "number of threads (log scale)",
            "faults/sec, Hmean ± HStddev",
            ">\nprocesses\n</text>",
            ">\nthreads\n</text>",
        ] {
            assert!(svg.contains(want), "missing {want:?}");
        }
        // The text is set in the shipped face, with a fallback for viewers without it.
        assert!(svg.contains("font-family=\"DejaVu Sans, sans-serif\""));
        // Hollow markers: white-filled circles stroked in a label colour (projected).
        assert!(svg.contains("<circle") && svg.contains("fill=\"#FFFFFF\""));
    }

    #[test]
    fn imported_results_get_a_third_style() {
        let (labels, mut runs, mut s) = crate::series::tests::example_parts();
        let imp = crate::series::tests::run(5, "base", Origin::Imported, Some("lab"));
        s.extend(crate::series::tests::samples(
            &imp,
            "threads",
            2,
            "faults/sec",
            &[150.0],
        ));
        runs.push(imp);
        let r = crate::Results::from_samples(labels, runs, s, &[], Significance::Interval);
        let c = &charts(&r, &Filter::default())[0];
        let svg =
            String::from_utf8(render(c, Kind::Scaling, Format::Svg, &ctx()).unwrap()).unwrap();
        assert!(svg.contains("base (imported from lab)"));
        // Triangles: the legend's and the point's.
        assert_eq!(svg.matches("<polygon").count(), 2, "{svg}");
    }

    #[test]
    fn change_plot_marks_significant_points_and_names_the_rule() {
        let c = &charts(&example(), &Filter::default())[0];
        let svg = String::from_utf8(render(c, Kind::Change, Format::Svg, &ctx()).unwrap()).unwrap();
        for want in [
            "pft: faults/sec, change against base",
            "baseline: base",
            "new (measured)",
            "new (projected for big-box)",
            "significant (interval rule)",
            "% change of the Hmean (positive is better)",
        ] {
            assert!(svg.contains(want), "missing {want:?}");
        }
        assert!(
            svg.contains(">\n*\n</text>"),
            "a significant point is starred"
        );
    }

    #[test]
    fn png_is_a_decodable_non_blank_picture() {
        let c = &charts(&example(), &Filter::default())[0];
        let png = render(c, Kind::Scaling, Format::Png, &ctx()).unwrap();
        let dec = png::Decoder::new(std::io::Cursor::new(png));
        let mut reader = dec.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        // Two panels side by side; the legend takes two rows.
        assert_eq!(
            (info.width, info.height),
            (1280, TITLE_H + PLOT_H + 2 * 26 + 24)
        );
        let px = &buf[..info.buffer_size()];
        let non_white = px.chunks(3).filter(|p| *p != [255, 255, 255]).count();
        let blueish = px.chunks(3).filter(|p| *p == [0, 114, 178]).count();
        assert!(non_white > 10_000, "{non_white} non-white pixels");
        assert!(blueish > 100, "the baseline's colour is drawn: {blueish}");
    }

    #[test]
    fn change_plot_without_a_second_label_is_an_error() {
        let mut r = example();
        r.labels.truncate(1);
        let c = &charts(&r, &Filter::default())[0];
        let e = render(c, Kind::Change, Format::Svg, &ctx()).unwrap_err();
        // Callers can tell this case from a drawing failure, and it reads as one line.
        assert!(
            matches!(&e, PlotError::NoChange { workload, .. } if workload == &c.workload),
            "{e:?}"
        );
        let e = e.to_string();
        assert!(e.contains("no change to plot") && !e.contains('\n'), "{e}");
    }

    #[test]
    fn perfect_scaling_guide_is_cut_at_the_top() {
        let g = guide(100.0, 8, true, 450.0);
        let last = g.last().unwrap();
        assert!((last.y - 450.0).abs() < 1e-6 && last.x < 3.0, "{last:?}");
        assert!((g[0].y - 100.0).abs() < 1e-9);
        let flat = guide(100.0, 8, false, 450.0);
        assert_eq!(flat.len(), 2);
        assert!(flat.iter().all(|d| d.y == 100.0));
        assert!(!scales_with_tasks("faults/cpu", true));
        assert!(scales_with_tasks("faults/sec", true));
        assert!(!scales_with_tasks("latency-p99-us", false));
    }

    #[test]
    fn axis_numbers_read_short() {
        let f = YFormat::for_max(3_000_000.0);
        assert_eq!(f.format(2_500_000.0), "2.5M");
        assert_eq!(f.format(0.0), "0");
        assert_eq!(YFormat::for_max(80.0).format(40.0), "40");
        assert_eq!(YFormat::Percent { decimals: 1 }.format(-9.51), "-9.5%");
        assert_eq!(YFormat::Percent { decimals: 0 }.format(12.0), "+12%");
    }

    #[test]
    fn long_text_is_shortened_to_fit() {
        fonts::ensure_registered();
        let f = font(14.0);
        let long = "x".repeat(400);
        let s = fit(&long, &f, 200);
        assert!(s.ends_with('…') && text_width(&s, &f) <= 200, "{s}");
        assert_eq!(fit("short", &f, 200), "short");
    }
}
