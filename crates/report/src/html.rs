//! The HTML report: one self-contained page (no script, no network: styles inline, plots as
//! `data:` URIs) that carries everything a reader needs to judge a comparison: the runs, the
//! hosts they ran on, how the profiles differ, plots, mmtests-style comparison tables with
//! significance, the engine's counters, and projected results apart from measured ones.
//!
//! The page is a minijinja template (`templates/report.html`, compiled in) rendered with HTML
//! auto-escaping on every value. Every string from the store (labels, profile names and
//! descriptions, command lines, host facts, workload and machine names) is user input; the
//! template never marks anything safe, and plots are embedded as base64 `data:` URIs in `<img>`,
//! where an SVG cannot run script either. A Content-Security-Policy forbids script and every
//! load but `data:` images, so the page stays inert and offline even if markup got in.

use std::collections::BTreeSet;

use base64::Engine as _;
use minijinja::value::Serde;
use minijinja::{AutoEscape, Environment, UndefinedBehavior};
use pagelab_bench::compare::{self, Comparison};
use pagelab_bench::profiles;
use pagelab_bench::results::{Origin, StoredRun};
use pagelab_bench::stats::Significance;
use pagelab_mm::Policy;
use pagelab_mm::arena::human_bytes;
use serde::Serialize;

use crate::Results;
use crate::counters::{self, Table};
use crate::plot::{self, Format, Kind};
use crate::provenance::{self, host_of};
use crate::series::{self, Filter, Source};

const TEMPLATE: &str = include_str!("../templates/report.html");

/// What the page says about itself.
#[derive(Clone, Debug)]
pub struct Meta {
    /// The page title (the experiment, or the labels).
    pub title: String,
    pub experiment: Option<ExperimentInfo>,
    /// The pagelab version that wrote the page.
    pub version: String,
    /// The command line that wrote it.
    pub command: String,
}

/// The experiment the report is about, as its file describes it.
#[derive(Clone, Debug, Serialize)]
pub struct ExperimentInfo {
    pub name: String,
    pub description: String,
    pub source: String,
}

/// Why the report could not be written: only the template can fail, which the tests rule out
/// for every shape of input they build.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("the report template is invalid: {0}")]
    Template(#[source] minijinja::Error),
    #[error("the report template is missing: {0}")]
    Missing(#[source] minijinja::Error),
    #[error("cannot render the report: {0}")]
    Render(#[source] minijinja::Error),
}

/// Renders the report of `res`.
pub fn render(res: &Results, meta: &Meta) -> Result<String, ReportError> {
    let page = page(res, meta);
    let mut env = Environment::new();
    env.set_auto_escape_callback(|_| AutoEscape::Html);
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.add_template("report.html", TEMPLATE)
        .map_err(ReportError::Template)?;
    let tmpl = env
        .get_template("report.html")
        .map_err(ReportError::Missing)?;
    tmpl.render(Serde(&page)).map_err(ReportError::Render)
}

#[derive(Serialize)]
struct Page {
    title: String,
    lede: String,
    experiment: Option<ExperimentInfo>,
    baseline: String,
    rule: &'static str,
    version: String,
    command: String,
    runs: Vec<RunLine>,
    hosts: Hosts,
    machines: Vec<String>,
    profiles: ProfileTable,
    plots: Vec<PlotOut>,
    plot_notes: Vec<String>,
    sections: Vec<SourceSection>,
    /// The beyond-linux verdicts, when the baseline and a research profile are selected.
    verdicts: Option<crate::verdicts::Section>,
}

#[derive(Serialize)]
struct RunLine {
    id: i64,
    label: String,
    workload: String,
    target: String,
    origin: &'static str,
    machine: String,
    status: &'static str,
    started: String,
    samples: u64,
    experiment: String,
    command: String,
}

#[derive(Serialize)]
struct Hosts {
    columns: Vec<String>,
    rows: Vec<NamedRow>,
}

#[derive(Serialize)]
struct NamedRow {
    name: String,
    cells: Vec<String>,
}

#[derive(Serialize)]
struct ProfileTable {
    columns: Vec<ProfileColumn>,
    rows: Vec<ProfileRow>,
    notes: Vec<String>,
}

#[derive(Serialize)]
struct ProfileColumn {
    label: String,
    profile: String,
    description: String,
    runs: String,
    toml: String,
    #[serde(skip)]
    policy: Policy,
}

#[derive(Serialize)]
struct ProfileRow {
    key: String,
    cells: Vec<ProfileCell>,
}

#[derive(Serialize)]
struct ProfileCell {
    value: String,
    differs: bool,
}

#[derive(Serialize)]
struct PlotOut {
    src: String,
    alt: String,
    caption: String,
}

#[derive(Serialize)]
struct SourceSection {
    id: String,
    heading: String,
    projected: bool,
    machine: String,
    provenance: String,
    notes: Vec<String>,
    comparisons: Vec<CompTable>,
    plots: Vec<PlotOut>,
    counters: Vec<Table>,
    counter_note: Option<String>,
}

#[derive(Serialize)]
struct CompTable {
    workload: String,
    mode: String,
    columns: Vec<String>,
    rows: Vec<CompRow>,
}

#[derive(Serialize)]
struct CompRow {
    stat: String,
    metric: String,
    tasks: u32,
    mean: bool,
    cells: Vec<CompCell>,
}

#[derive(Serialize)]
struct CompCell {
    value: String,
    change: String,
    significant: bool,
    /// `better` or `worse` for significant changes, else empty.
    direction: &'static str,
}

fn rule_text(rule: Significance) -> &'static str {
    match rule {
        Significance::Interval => {
            "interval (the current mmtests rule: mean ± 1.959964 sd intervals, HStddev for Hmean rows, do not overlap)"
        }
        Significance::TTest => {
            "t-test (the 2018-2024 mmtests rule: two-sided p < 0.10, df = n1 + n2 - 2)"
        }
    }
}

fn page(res: &Results, meta: &Meta) -> Page {
    let selected: Vec<&StoredRun> = res
        .runs
        .iter()
        .filter(|r| res.labels.contains(&r.meta.label))
        .collect();
    let (plots, plot_notes) = plots(res);
    let verdicts = crate::verdicts::applies(&res.labels)
        .then(|| crate::verdicts::section(&crate::verdicts::verdicts(&res.sets)))
        .flatten();
    Page {
        verdicts,
        title: meta.title.clone(),
        lede: format!(
            "{} label{} ({}) over {} run{}; {}.",
            res.labels.len(),
            if res.labels.len() == 1 { "" } else { "s" },
            res.labels.join(", "),
            selected.len(),
            if selected.len() == 1 { "" } else { "s" },
            provenance::summary(selected.iter().copied())
        ),
        experiment: meta.experiment.clone(),
        baseline: res.labels.first().cloned().unwrap_or_default(),
        rule: rule_text(res.rule),
        version: meta.version.clone(),
        command: meta.command.clone(),
        runs: selected.iter().map(|r| run_line(r)).collect(),
        hosts: hosts(&selected),
        machines: machines(&selected),
        profiles: profile_table(&selected, &res.labels),
        plots,
        plot_notes,
        sections: sections(res, &selected),
    }
}

fn run_line(r: &StoredRun) -> RunLine {
    RunLine {
        id: r.id,
        label: r.meta.label.clone(),
        workload: r.meta.workload.clone(),
        target: r.meta.target.clone(),
        origin: r.meta.origin.as_str(),
        machine: r.meta.machine.clone().unwrap_or_default(),
        status: r.shown_status(),
        started: r.started.clone(),
        samples: r.nr_samples,
        experiment: r.meta.experiment.clone().unwrap_or_default(),
        command: r.meta.command.clone(),
    }
}

/// `runs 1, 2 (a, b)`.
fn run_list(runs: &[&StoredRun]) -> String {
    let ids: Vec<String> = runs.iter().map(|r| r.id.to_string()).collect();
    let mut labels: Vec<&str> = Vec::new();
    for r in runs {
        if !labels.contains(&r.meta.label.as_str()) {
            labels.push(&r.meta.label);
        }
    }
    format!(
        "run{} {} ({})",
        if ids.len() == 1 { "" } else { "s" },
        ids.join(", "),
        labels.join(", ")
    )
}

/// The distinct hosts side by side, one column each. Runs on one host differ only in the
/// memory available when each started, which is shown as a range rather than as another host.
fn hosts(runs: &[&StoredRun]) -> Hosts {
    // (identity: the facts without the available memory, or the raw text; the runs)
    let mut distinct: Vec<(String, Vec<&StoredRun>)> = Vec::new();
    for r in runs {
        let Some(json) = &r.meta.host_json else {
            continue;
        };
        let identity = match host_of(r) {
            Some(mut h) => {
                h.mem_available = 0;
                serde_json::to_string(&h).unwrap_or_else(|_| json.clone())
            }
            None => json.clone(),
        };
        match distinct.iter_mut().find(|(j, _)| *j == identity) {
            Some((_, rs)) => rs.push(r),
            None => distinct.push((identity, vec![r])),
        }
    }
    let names = [
        "runs",
        "hostname",
        "cpu",
        "logical cpus",
        "cores",
        "sockets",
        "kernel",
        "arch",
        "memory",
        "available",
        "swap",
        "thp",
        "cgroup",
        "pagelab",
    ];
    let mut columns = Vec::new();
    let mut rows: Vec<NamedRow> = names
        .iter()
        .map(|n| NamedRow {
            name: n.to_string(),
            cells: Vec::new(),
        })
        .collect();
    let mut raw = NamedRow {
        name: "as stored".into(),
        cells: Vec::new(),
    };
    for (i, (_, rs)) in distinct.iter().enumerate() {
        let opt = |v: Option<usize>| v.map_or("unknown".to_string(), |n| n.to_string());
        let cells: Vec<String> = match host_of(rs[0]) {
            Some(h) => {
                columns.push(format!("host {} ({})", i + 1, h.hostname));
                raw.cells.push(String::new());
                let avail: Vec<u64> = rs
                    .iter()
                    .filter_map(|r| host_of(r).map(|h| h.mem_available))
                    .collect();
                let (lo, hi) = (
                    avail.iter().copied().min().unwrap_or(0),
                    avail.iter().copied().max().unwrap_or(0),
                );
                vec![
                    run_list(rs),
                    h.hostname,
                    h.cpu_model,
                    h.cpus.to_string(),
                    opt(h.cores),
                    opt(h.sockets),
                    h.kernel,
                    h.arch,
                    human_bytes(h.mem_total),
                    if lo == hi {
                        human_bytes(lo)
                    } else {
                        format!("{} – {}", human_bytes(lo), human_bytes(hi))
                    },
                    human_bytes(h.swap_total),
                    h.thp,
                    h.cgroup,
                    h.pagelab_version,
                ]
            }
            None => {
                columns.push(format!("host {}", i + 1));
                raw.cells
                    .push(rs[0].meta.host_json.clone().unwrap_or_default());
                let mut v = vec!["-".to_string(); names.len()];
                v[0] = run_list(rs);
                v
            }
        };
        for (row, c) in rows.iter_mut().zip(cells) {
            row.cells.push(c);
        }
    }
    if raw.cells.iter().any(|c| !c.is_empty()) {
        rows.push(raw);
    }
    Hosts { columns, rows }
}

/// One sentence per projected or imported machine.
fn machines(runs: &[&StoredRun]) -> Vec<String> {
    let sources: BTreeSet<Source> = runs
        .iter()
        .map(|r| Source::of(r))
        .filter(|s| s.origin != Origin::Measured)
        .collect();
    sources
        .into_iter()
        .map(|s| {
            let mine: Vec<&StoredRun> = runs
                .iter()
                .copied()
                .filter(|r| Source::of(r) == s)
                .collect();
            let what = match (s.origin, &s.machine) {
                (Origin::Projected, Some(m)) => {
                    format!("Projected by pagelab's projector for the machine description {m}")
                }
                (Origin::Projected, None) => "Projected for an unnamed machine".into(),
                (_, Some(m)) => format!("Imported from the real tools' output, on {m}"),
                (_, None) => "Imported from the real tools' output".into(),
            };
            format!("{what}: {}.", run_list(&mine))
        })
        .collect()
}

/// The profiles of the labels side by side: one column per (label, profile as run), the keys
/// on which any two differ (via [`profiles::diff`] against the first), the full TOML of each.
fn profile_table(runs: &[&StoredRun], labels: &[String]) -> ProfileTable {
    let mut columns: Vec<ProfileColumn> = Vec::new();
    let mut col_runs: Vec<Vec<&StoredRun>> = Vec::new();
    let mut notes = Vec::new();
    for l in labels {
        for r in runs.iter().filter(|r| &r.meta.label == l) {
            let Some(toml) = &r.meta.profile_toml else {
                continue;
            };
            if let Some(i) = columns
                .iter()
                .position(|c| c.label == *l && c.toml == *toml)
            {
                col_runs[i].push(r);
                continue;
            }
            match Policy::from_toml_str(toml) {
                Ok(policy) => {
                    columns.push(ProfileColumn {
                        label: l.clone(),
                        profile: r
                            .meta
                            .profile
                            .clone()
                            .or_else(|| policy.name.clone())
                            .unwrap_or_default(),
                        description: policy.description.clone().unwrap_or_default(),
                        runs: String::new(),
                        toml: toml.clone(),
                        policy,
                    });
                    col_runs.push(vec![r]);
                }
                Err(e) => notes.push(format!(
                    "The profile stored with run {} ({l}) cannot be read by this pagelab: {e}",
                    r.id
                )),
            }
        }
    }
    for (c, rs) in columns.iter_mut().zip(&col_runs) {
        c.runs = run_list(rs);
    }
    let mut keys: Vec<String> = Vec::new();
    if let Some(first) = columns.first() {
        for c in &columns[1..] {
            for (k, _, _) in profiles::diff(&first.policy, &c.policy) {
                if !keys.contains(&k) {
                    keys.push(k);
                }
            }
        }
        let order: Vec<String> = profiles::flatten(&first.policy)
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        keys.sort_by_key(|k| order.iter().position(|o| o == k));
    }
    let flat: Vec<Vec<(String, String)>> = columns
        .iter()
        .map(|c| profiles::flatten(&c.policy))
        .collect();
    let value = |i: usize, k: &str| {
        flat[i]
            .iter()
            .find(|(kk, _)| kk == k)
            .map_or_else(|| "-".to_string(), |(_, v)| v.clone())
    };
    let rows = keys
        .iter()
        .map(|k| ProfileRow {
            key: k.clone(),
            cells: (0..columns.len())
                .map(|i| ProfileCell {
                    value: value(i, k),
                    differs: value(i, k) != value(0, k),
                })
                .collect(),
        })
        .collect();
    ProfileTable {
        columns,
        rows,
        notes,
    }
}

fn data_uri(svg: &[u8]) -> String {
    format!(
        "data:image/svg+xml;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(svg)
    )
}

/// A scaling and, with two labels or more, a change plot per (workload, metric).
fn plots(res: &Results) -> (Vec<PlotOut>, Vec<String>) {
    let mut out = Vec::new();
    let mut notes = Vec::new();
    let baseline = res.labels.first().cloned().unwrap_or_default();
    for chart in series::charts(res, &Filter::default()) {
        let ctx = plot::Context::of(res, &chart, &baseline);
        let mut kinds = vec![Kind::Scaling];
        if res.labels.len() > 1 {
            kinds.push(Kind::Change);
        }
        for kind in kinds {
            match plot::render(&chart, kind, Format::Svg, &ctx) {
                Ok(svg) => {
                    let what = match kind {
                        Kind::Scaling => format!(
                            "{} {} by task count ({}; error bars: {})",
                            chart.workload,
                            chart.metric,
                            series::summary_name(chart.higher_is_better),
                            if chart.higher_is_better {
                                "HStddev"
                            } else {
                                "Stddev"
                            }
                        ),
                        Kind::Change => format!(
                            "{} {}: percent change against {baseline}, positive is better; * significant (measured); bars on projected curves: range over the captures",
                            chart.workload, chart.metric
                        ),
                    };
                    out.push(PlotOut {
                        src: data_uri(&svg),
                        alt: what.clone(),
                        caption: format!("{what}. {}.", ctx.provenance),
                    });
                }
                Err(e) => notes.push(e.to_string()),
            }
        }
    }
    (out, notes)
}

/// One section per source: measured, then each imported and each projected machine, each
/// with its own comparison tables and counters, and, when the report has several sources,
/// its own plots (measured numbers are not squashed by projections for a machine ten times the
/// size).
fn sections(res: &Results, runs: &[&StoredRun]) -> Vec<SourceSection> {
    let sources: BTreeSet<Source> = runs.iter().map(|r| Source::of(r)).collect();
    let several = sources.len() > 1;
    sources
        .into_iter()
        .enumerate()
        .map(|(i, source)| {
            let part = res.only(&source);
            let present: Vec<String> = res
                .labels
                .iter()
                .filter(|l| part.sets.iter().any(|s| &s.label == *l))
                .cloned()
                .collect();
            let mut notes = Vec::new();
            if let (Some(first), Some(base)) = (present.first(), res.labels.first())
                && first != base
            {
                notes.push(format!(
                    "The baseline {base} has no {} results: the tables compare against {first}.",
                    source.describe()
                ));
            }
            let comparisons = if present.is_empty() {
                notes.push("No samples.".into());
                Vec::new()
            } else {
                match compare::build_from(&part.sets, &present, res.rule, &*part.best) {
                    Ok(c) => {
                        if c.has_projected() {
                            notes.push(String::from(
                                "The changes of mean rows here show [low, high], the range of the change over every pairing of a baseline capture's mean with one of the column's captures; they carry no significance asterisks: a projection's spread is the model's capture noise, not a sample of the machine. The change plots draw that range as error bars."
                            ));
                        }
                        comp_tables(&c)
                    }
                    Err(e) => {
                        notes.push(e.to_string());
                        Vec::new()
                    }
                }
            };
            let (plots, plot_notes) = if several {
                plots(&part)
            } else {
                (Vec::new(), Vec::new())
            };
            notes.extend(plot_notes);
            let counters: Vec<Table> = counters::tables(&part)
                .into_iter()
                .flat_map(|c| c.tables)
                .collect();
            let counter_note = (counters.is_empty() && source.origin == Origin::Measured).then(
                || "No engine counters are stored for these runs (runs on the host kernel, and interrupted windows, record none).".to_string(),
            );
            let (id, heading) = match source.origin {
                Origin::Measured => ("measured".to_string(), "Measured".to_string()),
                Origin::Imported => (
                    format!("imported-{i}"),
                    match &source.machine {
                        Some(m) => format!("Imported from {m}"),
                        None => "Imported".into(),
                    },
                ),
                Origin::Projected => (
                    format!("projected-{i}"),
                    match &source.machine {
                        Some(m) => format!("Projected for {m}"),
                        None => "Projected".into(),
                    },
                ),
            };
            SourceSection {
                id,
                heading,
                projected: source.origin == Origin::Projected,
                machine: source.machine.clone().unwrap_or_else(|| "(unnamed)".into()),
                provenance: provenance::summary(&part.runs),
                notes,
                comparisons,
                plots,
                counters,
                counter_note,
            }
        })
        .collect()
}

fn comp_tables(c: &Comparison) -> Vec<CompTable> {
    let columns: Vec<String> = c.columns.iter().map(|c| c.label.clone()).collect();
    c.sections
        .iter()
        .map(|s| CompTable {
            workload: s.workload.clone(),
            mode: s.mode.clone(),
            columns: columns.clone(),
            rows: s
                .rows
                .iter()
                .map(|r| CompRow {
                    stat: r.stat.clone(),
                    metric: r.metric.clone(),
                    tasks: r.tasks,
                    mean: r.stat == "Hmean" || r.stat == "Amean",
                    cells: r
                        .cells
                        .iter()
                        .map(|cell| {
                            let significant = cell.significant == Some(true);
                            let (change, direction) = match cell.pct_change {
                                // A projected column: the change and its range over the
                                // captures' pairings, as `pagelab compare` prints it.
                                Some(p) if p.is_finite() && cell.interval.is_some() => {
                                    let (lo, hi) = cell.interval.unwrap_or_default();
                                    (format!("({p:.2}% [{lo:.2}, {hi:.2}])"), "")
                                }
                                Some(p) if p.is_finite() && significant => (
                                    format!("*{p:.2}%*"),
                                    if p > 0.0 {
                                        "better"
                                    } else if p < 0.0 {
                                        "worse"
                                    } else {
                                        ""
                                    },
                                ),
                                Some(p) if p.is_finite() => (format!("({p:.2}%)"), ""),
                                _ => ("(NA)".to_string(), ""),
                            };
                            CompCell {
                                // As `pagelab compare` prints it.
                                value: match cell.value {
                                    Some(v) if v.is_finite() => format!("{v:.4}"),
                                    Some(_) => "NaN".into(),
                                    None => "-".into(),
                                },
                                change,
                                significant,
                                direction,
                            }
                        })
                        .collect(),
                })
                .collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::series::tests::{example, example_parts, run, samples};
    use pagelab_bench::results::CounterRow;

    fn meta() -> Meta {
        Meta {
            title: "pagelab report: base, new".into(),
            experiment: None,
            version: "0.1.0".into(),
            command: "pagelab report base new --out x".into(),
        }
    }

    #[test]
    fn template_never_marks_anything_safe_and_has_no_script() {
        assert!(!TEMPLATE.contains("|safe") && !TEMPLATE.contains("| safe"));
        // Whatever got in would neither run nor load: no script, nothing from the network.
        assert!(
            TEMPLATE.contains(
                "content=\"default-src 'none'; img-src data:; style-src 'unsafe-inline'\""
            )
        );
        assert!(!TEMPLATE.to_lowercase().contains("<script"));
        assert!(!TEMPLATE.contains("http://") && !TEMPLATE.contains("https://"));
    }

    #[test]
    fn page_has_tables_plots_counters_and_a_projected_section() {
        let (labels, runs, samples) = example_parts();
        let counters = [CounterRow {
            run_id: 1,
            mode: "threads".into(),
            tasks: 2,
            repeat: 0,
            name: "event:vma_lock_abort".into(),
            value: 42.0,
        }];
        let r = Results::from_samples(labels, runs, samples, &counters, Significance::Interval);
        let html = render(&r, &meta()).unwrap();
        // A scaling and a change plot of everything, then of each source (measured, projected).
        assert_eq!(
            html.matches("<img src=\"data:image&#x2f;svg+xml;base64,")
                .count(),
            6
        );
        assert!(html.contains("<h2>Measured</h2>"));
        assert!(html.contains("<h2>Projected for big-box</h2>"));
        assert!(html.contains("Projected, not measured"));
        assert!(html.contains("class=\"comparison\""));
        // The compare numbers: base 1 task Hmean 100, new 110 significant +10%.
        assert!(
            html.contains(
                "<td class=\"num\">110.0000</td><td class=\"chg sig better\">*10.00%*</td>"
            ),
            "{html}"
        );
        assert!(html.contains("vma_lock_abort"));
        assert!(html.contains("<td class=\"num\">42</td>"));
        // The projected section: new is 10% worse at every task count, with no spread; its
        // mean rows show the interval and no asterisk, and a note says what it is.
        assert!(
            html.contains("<td class=\"chg\">(-10.00% [-10.00, -10.00])</td>"),
            "{html}"
        );
        assert!(!html.contains("*-10.00%*"), "{html}");
        assert!(html.contains("range of the change over every pairing"));
    }

    /// With linux-6.7 and a research profile selected, the page carries the verdicts: each
    /// profile's change against linux-6.7, here and projected, and the designs' headlines.
    #[test]
    fn the_verdicts_section_renders_for_research_profiles() {
        let base = run(1, "linux-6.7", Origin::Measured, None);
        let rv = run(2, "range-vm", Origin::Measured, None);
        let pbase = run(3, "linux-6.7@big-box", Origin::Projected, Some("big-box"));
        let prv = run(4, "range-vm@big-box", Origin::Projected, Some("big-box"));
        let mut s = samples(&base, "threads", 1, "ops/sec", &[100.0, 100.0]);
        s.extend(samples(&rv, "threads", 1, "ops/sec", &[120.0, 120.0]));
        s.extend(samples(&pbase, "threads", 128, "ops/sec", &[100.0, 100.0]));
        s.extend(samples(&prv, "threads", 128, "ops/sec", &[300.0, 300.0]));
        let labels = vec![
            "linux-6.7".into(),
            "range-vm".into(),
            "linux-6.7@big-box".into(),
            "range-vm@big-box".into(),
        ];
        let r = Results::from_samples(
            labels,
            vec![base, rv, pbase, prv],
            s,
            &[],
            Significance::Interval,
        );
        let html = render(&r, &meta()).unwrap();
        assert!(html.contains("<section id=\"verdicts\">"), "{html}");
        assert!(
            html.contains("<td>pft</td><td>range-vm</td><td>+20% [+20, +20]</td><td>+200% [+200, +200]</td><td>better</td>"),
            "{html}"
        );
        assert!(html.contains("RadixVM"));
        // Not for a comparison without a research profile.
        let plain = render(&example(), &meta()).unwrap();
        assert!(!plain.contains("id=\"verdicts\""));
    }

    #[test]
    fn every_stored_string_is_escaped() {
        let evil = "<script>alert(1)</script>";
        let evil2 = "\"><img src=x onerror=alert(2)>";
        let (_, mut runs, mut samples) = example_parts();
        for run in &mut runs {
            run.meta.label = if run.meta.label == "base" {
                evil.into()
            } else {
                evil2.into()
            };
            run.meta.command = format!("pagelab run {evil2}");
            run.meta.workload = "<b>pft</b>".into();
            run.meta.profile = Some(evil.into());
            run.meta.profile_toml = Some(format!(
                "name = \"{}\"\ndescription = \"{}\"\n",
                evil,
                evil2.replace('"', "\\\"")
            ));
            run.meta.host_json = Some(format!("{{\"not\": \"{}\"}}", evil2.replace('"', "'")));
            if run.meta.machine.is_some() {
                run.meta.machine = Some("<i>big</i>".into());
            }
        }
        for s in &mut samples {
            s.label = if s.run_id % 2 == 1 {
                evil.into()
            } else {
                evil2.into()
            };
            s.workload = "<b>pft</b>".into();
        }
        let labels = vec![evil.into(), evil2.into()];
        let r = Results::from_samples(labels, runs, samples, &[], Significance::Interval);
        let mut m = meta();
        m.title = evil.into();
        m.command = evil2.into();
        let html = render(&r, &m).unwrap();
        assert!(!html.contains("<script"), "raw script tag");
        assert!(!html.contains("<img src=x"), "raw injected img");
        assert!(!html.contains("<b>") && !html.contains("<i>"), "raw markup");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;&#x2f;script&gt;"));
        assert!(html.contains("&quot;&gt;&lt;img src=x onerror=alert(2)&gt;"));
        // The labels reach the plots too, escaped inside the SVG.
        let b64 = html
            .split("data:image&#x2f;svg+xml;base64,")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .unwrap()
            .replace("&#x2f;", "/");
        let svg = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        let svg = String::from_utf8(svg).unwrap();
        assert!(
            svg.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{svg}"
        );
        assert!(!svg.contains("<script"));
    }

    #[test]
    fn profiles_differences_are_side_by_side() {
        let mut r = example();
        let a = pagelab_bench::profiles::load("mm-unstable-20230210").unwrap();
        let b = pagelab_bench::profiles::load("pvl-v2").unwrap();
        for run in &mut r.runs {
            let p = if run.meta.label == "base" { &a } else { &b };
            run.meta.profile = Some(p.name.clone());
            run.meta.profile_toml = Some(p.policy.to_toml_string());
        }
        r.runs[3].meta.profile_toml = Some("[pcp]\nbatch = 5000\nhigh = 1\n".into());
        let t = profile_table(&r.runs.iter().collect::<Vec<_>>(), &r.labels);
        assert_eq!(t.columns.len(), 2);
        assert_eq!(t.columns[0].runs, "runs 1, 3 (base)");
        let vma = t.rows.iter().find(|row| row.key == "mm.vma_lock").unwrap();
        assert_eq!(vma.cells[0].value, "\"none\"");
        assert_eq!(vma.cells[1].value, "\"rwsem\"");
        assert!(vma.cells[1].differs && !vma.cells[0].differs);
        assert_eq!(t.notes.len(), 1);
        assert!(t.notes[0].contains("run 4 (new)"), "{:?}", t.notes);
    }

    #[test]
    fn hosts_are_listed_once_each() {
        let mut r = example();
        let h = pagelab_bench::host::HostInfo::detect();
        let json = serde_json::to_string(&h).unwrap();
        r.runs[0].meta.host_json = Some(json.clone());
        // The same host, with less memory available when the second run started.
        let mut later = h.clone();
        later.mem_available = h.mem_available / 2;
        r.runs[1].meta.host_json = Some(serde_json::to_string(&later).unwrap());
        r.runs[2].meta.host_json = Some("{\"cpu\": \"imaginary\"}".into());
        let sel: Vec<&StoredRun> = r.runs.iter().collect();
        let hs = hosts(&sel);
        assert_eq!(hs.columns.len(), 2);
        assert_eq!(hs.rows[0].cells[0], "runs 1, 2 (base, new)");
        assert_eq!(hs.rows[1].cells[0], h.hostname);
        let avail = hs.rows.iter().find(|r| r.name == "available").unwrap();
        assert!(avail.cells[0].contains(" – "), "{:?}", avail.cells);
        let raw = hs.rows.last().unwrap();
        assert_eq!(raw.name, "as stored");
        assert!(raw.cells[1].contains("imaginary"));
        assert_eq!(
            machines(&sel),
            [
                "Projected by pagelab's projector for the machine description big-box: runs 3, 4 (base, new)."
            ]
        );
    }

    #[test]
    fn a_single_label_gets_a_summary_and_no_change_plot() {
        let (mut labels, runs, mut s) = example_parts();
        labels.truncate(1);
        s.extend(samples(
            &run(9, "base", Origin::Measured, None),
            "threads",
            4,
            "faults/sec",
            &[1.0],
        ));
        let r = Results::from_samples(labels, runs, s, &[], Significance::Interval);
        let html = render(&r, &meta()).unwrap();
        // Scaling plots only: of everything, of the measured and of the projected runs.
        assert_eq!(html.matches("<img ").count(), 3);
        assert!(html.contains("class=\"comparison\""));
    }
}
