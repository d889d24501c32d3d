//! `pagelab plot` and `pagelab report`: stored results drawn and written up.
//!
//! Both select runs exactly as `compare` does ([`results_cmd::select`]), open the store
//! read-only, and write nothing but the files asked for, each only once it is complete in
//! memory, so that bad input leaves neither the store nor half a file behind. Both also accept
//! an experiment in place of the labels (`pagelab report pft-pvl-2023`), which then stands for
//! every label stored for it: its profiles first, then for instance the projector's labels.

use std::path::{Path, PathBuf};
use std::rc::Rc;

use clap::Args;
use pagelab_bench::experiments;
use pagelab_bench::output;
use pagelab_bench::results::{Origin, RunFilter};
use pagelab_report::Results;
use pagelab_report::html::{self, ExperimentInfo, Meta};
use pagelab_report::plot::{self, Format, Kind};
use pagelab_report::series::{self, Filter};
use pagelab_workloads::Mode;

use crate::command_line;
use crate::flags::{PlotFormatFlag, PlotKindFlag};
use crate::results_cmd::{self, CompareSelect, open_read, stored_labels};

#[derive(Args)]
pub(crate) struct PlotArgs {
    #[command(flatten)]
    pub(crate) select: CompareSelect,
    /// Only this metric (faults/sec, faults/cpu, ops/sec, ...); default: every metric.
    #[arg(long)]
    pub(crate) metric: Option<String>,
    /// Only this mode; default: one panel per mode.
    #[arg(long, value_enum)]
    pub(crate) mode: Option<crate::flags::ModeFlag>,
    /// Only runs of this origin; default: all, drawn apart.
    #[arg(long, value_enum)]
    pub(crate) origin: Option<crate::flags::OriginFlag>,
    /// What to draw.
    #[arg(long, value_enum, default_value_t = PlotKindFlag::Scaling)]
    pub(crate) kind: PlotKindFlag,
    /// The image format. Default: the extension of --out, else svg.
    #[arg(long, value_enum)]
    pub(crate) format: Option<PlotFormatFlag>,
    /// A .svg or .png file for a single plot, or a directory that gets one file per workload
    /// and metric. Missing directories are created (as `mkdir -p`); an SQLite database (the
    /// results store) is never overwritten.
    #[arg(long, value_name = "PATH")]
    pub(crate) out: PathBuf,
}

#[derive(Args)]
pub(crate) struct ReportArgs {
    #[command(flatten)]
    pub(crate) select: CompareSelect,
    /// The directory the report is written to, as report.html. Missing directories are
    /// created (as `mkdir -p`); an SQLite database is never overwritten.
    #[arg(long, value_name = "DIR", required_unless_present = "verdicts")]
    pub(crate) out: Option<PathBuf>,
    /// Instead of a report: print the verdicts of the beyond-linux set (every stored run of a
    /// `beyond-linux-*` experiment, measured and projected) as a markdown table.
    #[arg(long, conflicts_with = "out")]
    pub(crate) verdicts: bool,
}

/// `pagelab report --verdicts`: the verdicts table of every stored beyond-linux run.
fn verdicts_cmd(db: Option<&Path>) -> Result<(), String> {
    let store = open_read(db)?;
    let mut ids = Vec::new();
    for name in experiments::set("beyond-linux") {
        let runs = store
            .runs(&RunFilter {
                experiment: Some(name.to_string()),
                ..RunFilter::default()
            })
            .map_err(|e| e.to_string())?;
        ids.extend(runs.iter().map(|r| r.id));
    }
    if ids.is_empty() {
        return Err(
            "no run of a beyond-linux experiment is stored; run `pagelab reproduce beyond-linux` (or scripts/beyond-linux) first"
                .into(),
        );
    }
    let sets = store.sample_stats(&ids).map_err(|e| e.to_string())?;
    let v = pagelab_report::verdicts::verdicts(&sets);
    print!("{}", pagelab_report::verdicts::markdown(&v));
    Ok(())
}

/// `pagelab report EXPERIMENT` and `pagelab plot EXPERIMENT`: a single name that is not a
/// stored label but names an experiment is taken as `--experiment`; with an experiment and no
/// labels, the labels are the experiment's profiles, then every other label stored for it.
/// Labels not in the store are left out (its profiles may not all have been run).
fn resolve(mut sel: CompareSelect, db: Option<&Path>, what: &str) -> Result<CompareSelect, String> {
    let store = open_read(db)?;
    let known = stored_labels(&store)?;
    if sel.experiment.is_none()
        && let [name] = sel.labels.as_slice()
        && !known.contains(name)
        && experiments::load(name).is_ok()
    {
        sel.experiment = Some(name.clone());
        sel.labels.clear();
    }
    for (i, l) in sel.labels.iter().enumerate() {
        if sel.labels[..i].contains(l) {
            return Err(format!(
                "label {} is named twice",
                pagelab_bench::results::quote_label(l)
            ));
        }
    }
    if sel.labels.is_empty() {
        let Some(name) = &sel.experiment else {
            return Err(format!(
                "nothing to {what}: name labels (baseline first) or an experiment; `pagelab runs` lists the labels"
            ));
        };
        let exp = experiments::load(name).map_err(|e| e.to_string())?;
        let mut labels: Vec<String> = exp.profiles.iter().map(|p| p.name.clone()).collect();
        let runs = store
            .runs(&RunFilter {
                experiment: Some(exp.name.clone()),
                ..RunFilter::default()
            })
            .map_err(|e| e.to_string())?;
        for r in runs {
            if !labels.contains(&r.meta.label) {
                labels.push(r.meta.label);
            }
        }
        labels.retain(|l| known.contains(l));
        if labels.is_empty() {
            return Err(format!(
                "nothing to {what}: no run of experiment {} is stored; run `pagelab reproduce {}` first",
                exp.name, exp.name
            ));
        }
        sel.labels = labels;
    }
    Ok(sel)
}

/// The selected runs with the summaries of their sample sets (and, for reports, their counters
/// summed per run), read as streams: memory grows with the number of sets, not of samples. The
/// store stays open behind [`Results::best`] for the best-P rows of the comparison tables.
fn results(sel: &CompareSelect, db: Option<&Path>, counters: bool) -> Result<Results, String> {
    let s = results_cmd::select(sel, db)?;
    let ids: Vec<i64> = s.runs.iter().map(|r| r.id).collect();
    let sets = s.store.sample_stats(&ids).map_err(|e| e.to_string())?;
    let counters = if counters {
        s.store.counter_totals(&ids).map_err(|e| e.to_string())?
    } else {
        Vec::new()
    };
    Ok(Results {
        labels: s.labels,
        runs: s.runs,
        sets,
        best: Rc::new(s.store),
        counters,
        rule: s.rule,
    })
}

/// A file-name-safe form of a stored name: `faults/sec` -> `faults-sec`.
fn file_part(s: &str) -> String {
    let cleaned: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let trimmed = cleaned.trim_matches(|c| c == '-' || c == '.');
    if trimmed.is_empty() {
        "x".into()
    } else {
        trimmed.chars().take(60).collect()
    }
}

/// The results store in use, which no output may replace (none if it cannot be named).
fn store_in_use(db: Option<&Path>) -> Option<PathBuf> {
    crate::store_path(db).ok()
}

/// Refuse `path` as an output file before any work: the store in use, any SQLite database,
/// a directory.
fn check_out_file(path: &Path, store: Option<&Path>) -> Result<(), String> {
    output::check_output_path(path, store).map_err(|e| e.to_string())
}

/// Write an output file whole or not at all (a temporary file renamed into place), creating
/// missing directories: plots and reports go through the same rules as every other output.
fn write_file(path: &Path, store: Option<&Path>, bytes: &[u8]) -> Result<(), String> {
    output::write_file(path, store, bytes).map_err(|e| format!("cannot write {e}"))
}

fn not_a_directory(dir: &Path) -> String {
    format!(
        "{} exists and is not a directory; give a directory (or for one plot a .svg or .png file)",
        dir.display()
    )
}

fn create_dir(dir: &Path) -> Result<(), String> {
    if dir.exists() && !dir.is_dir() {
        return Err(not_a_directory(dir));
    }
    std::fs::create_dir_all(dir)
        .map_err(|e| format!("cannot create directory {}: {e}", dir.display()))
}

pub fn plot_cmd(a: PlotArgs, db: Option<&Path>) -> Result<(), String> {
    let kind: Kind = a.kind.into();
    let origin: Option<Origin> = a.origin.map(Into::into);
    let ext = a
        .out
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let file_format = match ext.as_deref() {
        Some("svg") => Some(Format::Svg),
        Some("png") => Some(Format::Png),
        _ => None,
    };
    let format = match (a.format.map(Format::from), file_format) {
        (Some(f), Some(g)) if f != g => {
            return Err(format!(
                "--format {f} does not match the file name {}",
                a.out.display()
            ));
        }
        (Some(f), _) | (None, Some(f)) => f,
        (None, None) => Format::Svg,
    };
    let store = store_in_use(db);
    if file_format.is_some() {
        check_out_file(&a.out, store.as_deref())?;
    } else if a.out.exists() && !a.out.is_dir() {
        return Err(not_a_directory(&a.out));
    }
    let sel = resolve(a.select, db, "plot")?;
    let mut res = results(&sel, db, false)?;
    if let Some(o) = origin {
        res.runs.retain(|r| r.meta.origin == o);
        res.sets.retain(|s| s.origin == o);
        if res.sets.is_empty() {
            return Err(format!(
                "nothing to plot: no {o} samples in the selected runs"
            ));
        }
    }
    let mode = a.mode.map(|m| Mode::from(m).to_string());
    let filter = Filter {
        metric: a.metric.clone(),
        mode: mode.clone(),
    };
    let charts = series::charts(&res, &filter);
    if charts.is_empty() {
        let all = series::charts(&res, &Filter::default());
        let mut metrics: Vec<&str> = all.iter().map(|c| c.metric.as_str()).collect();
        metrics.dedup();
        let mut modes: Vec<&str> = all
            .iter()
            .flat_map(|c| c.panels.iter().map(|p| p.mode.as_str()))
            .collect();
        modes.sort_unstable();
        modes.dedup();
        return Err(format!(
            "nothing to plot: no samples{}{} in the selected runs; metrics: {}; modes: {}",
            a.metric
                .as_deref()
                .map_or(String::new(), |m| format!(" of metric `{m}`")),
            mode.as_deref()
                .map_or(String::new(), |m| format!(" in mode `{m}`")),
            metrics.join(", "),
            modes.join(", ")
        ));
    }
    if file_format.is_some() && charts.len() > 1 {
        let names: Vec<String> = charts
            .iter()
            .map(|c| format!("{} {}", c.workload, c.metric))
            .collect();
        return Err(format!(
            "{} plots match ({}); give a directory to --out, or choose one with --workload and --metric",
            charts.len(),
            names.join(", ")
        ));
    }
    let baseline = res.labels[0].clone();
    // Render everything first: a failure leaves no file behind. In a directory, a chart with
    // nothing to draw (no change where only the baseline has samples) is skipped with a word
    // on stderr, as long as something is drawn.
    let mut files = Vec::new();
    let mut skipped = Vec::new();
    for chart in &charts {
        let ctx = plot::Context::of(&res, chart, &baseline);
        let bytes = match plot::render(chart, kind, format, &ctx) {
            Ok(b) => b,
            Err(e) if file_format.is_none() => {
                skipped.push(e.to_string());
                continue;
            }
            Err(e) => return Err(e.to_string()),
        };
        let path = match file_format {
            Some(_) => a.out.clone(),
            None => a.out.join(format!(
                "{}_{}_{}.{}",
                file_part(&chart.workload),
                file_part(&chart.metric),
                kind.as_str(),
                format.extension()
            )),
        };
        files.push((path, bytes));
    }
    if files.is_empty() {
        return Err(skipped
            .into_iter()
            .next()
            .unwrap_or_else(|| "nothing to plot".into()));
    }
    for e in &skipped {
        eprintln!("pagelab: skipped: {e}");
    }
    if file_format.is_none() {
        create_dir(&a.out)?;
    }
    for (path, bytes) in &files {
        write_file(path, store.as_deref(), bytes)?;
        println!("{}", path.display());
    }
    Ok(())
}

pub fn report_cmd(a: ReportArgs, db: Option<&Path>) -> Result<(), String> {
    let Some(out) = a.out.clone() else {
        return verdicts_cmd(db);
    };
    if out.exists() && !out.is_dir() {
        return Err(format!(
            "{} exists and is not a directory; --out names the directory the report is written to",
            out.display()
        ));
    }
    let store = store_in_use(db);
    let path = out.join("report.html");
    check_out_file(&path, store.as_deref())?;
    let sel = resolve(a.select, db, "report")?;
    let experiment = sel
        .experiment
        .as_deref()
        .map(experiments::load)
        .transpose()
        .map_err(|e| e.to_string())?;
    let res = results(&sel, db, true)?;
    let title = match &experiment {
        Some(e) => format!("pagelab report: {}", e.name),
        None => format!("pagelab report: {}", res.labels.join(" vs ")),
    };
    let meta = Meta {
        title,
        experiment: experiment.map(|e| ExperimentInfo {
            name: e.name,
            description: e.description,
            source: e.source,
        }),
        version: env!("CARGO_PKG_VERSION").into(),
        command: command_line(),
    };
    let page = html::render(&res, &meta).map_err(|e| e.to_string())?;
    create_dir(&out)?;
    write_file(&path, store.as_deref(), page.as_bytes())?;
    println!("{}", path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_parts_are_safe_names() {
        assert_eq!(file_part("faults/sec"), "faults-sec");
        assert_eq!(file_part("../../etc"), "etc");
        assert_eq!(file_part("<b>"), "b");
        assert_eq!(file_part("///"), "x");
        assert_eq!(file_part("latency-p99.9-us"), "latency-p99.9-us");
    }
}
