//! Commands over the results store: `compare`, `runs`, `export`, `import`, and the run
//! selection that `compare`, `plot` and `report` share.
//!
//! Reading commands open the store read-only, so they work on a store they may not write and
//! can never alter it; `import` parses the whole file before it writes anything, and writes the
//! run in one transaction.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::io::{self, Write};
use std::path::Path;

use clap::Args;

use pagelab_bench::compare::{self, Comparison};
use pagelab_bench::csv_text::neutralise;
use pagelab_bench::experiments;
use pagelab_bench::import::{self, ImportOptions};
use pagelab_bench::lkp;
use pagelab_bench::mmtests;
use pagelab_bench::output::OutputFile;
use pagelab_bench::owner::Liveness;
use pagelab_bench::results::{RunFilter, SampleRow, Status, StoredRun, quote_label};
use pagelab_bench::stats;
use pagelab_bench::store::{Store, StoreError};
use pagelab_workloads::Mode;
use serde::ser::{SerializeSeq, Serializer};

use crate::flags::StatusFlag;
use crate::measure::check_label;
use crate::{
    CompareArgs, ExportArgs, ImportArgs, RunSelect, RunsArgs, command_line, open_store, store_path,
};

/// Output formats of a comparison table (`reproduce --format`, `project --format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// mmtests' compare-kernels table.
    Text,
    /// A GitHub-flavoured markdown table per section.
    #[value(alias = "md")]
    Markdown,
    Json,
    /// One line per row and label.
    Csv,
}

/// Output formats of `compare`: the formats of [`Format`], and the 0-day robot's rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CompareFormat {
    /// mmtests' compare-kernels table.
    Text,
    /// A GitHub-flavoured markdown table per section.
    #[value(alias = "md")]
    Markdown,
    Json,
    /// One line per row and label.
    Csv,
    /// The kernel test robot's (lkp-tests') comparison rows.
    Lkp,
}

pub fn render(c: &Comparison, f: Format) -> String {
    match f {
        Format::Text => c.render_text(),
        Format::Markdown => c.render_markdown(),
        Format::Json => c.render_json() + "\n",
        Format::Csv => c.render_csv(),
    }
}

/// Every label in the store.
pub(crate) fn stored_labels(store: &Store) -> Result<Vec<String>, String> {
    Ok(store
        .labels()
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|(l, _)| l)
        .collect())
}

pub(crate) fn open_read(db: Option<&Path>) -> Result<Store, String> {
    Store::open_read(&store_path(db)?).map_err(|e| e.to_string())
}

/// Which runs a comparison (and a plot or report) uses; every filter narrows the selection.
#[derive(Args, Clone, Debug)]
pub(crate) struct CompareSelect {
    /// Labels to compare, the baseline first (default with --experiment: its profiles).
    pub(crate) labels: Vec<String>,
    /// Only runs made for this experiment.
    #[arg(long)]
    pub(crate) experiment: Option<String>,
    /// Only this workload.
    #[arg(long)]
    pub(crate) workload: Option<String>,
    /// Only these run ids (repeatable).
    #[arg(long = "run", value_name = "ID")]
    pub(crate) runs: Vec<i64>,
    /// Only the newest run of each label (and workload) instead of pooling all of them.
    #[arg(long)]
    pub(crate) latest: bool,
    /// Also use runs that were interrupted.
    #[arg(long)]
    pub(crate) include_incomplete: bool,
    /// The significance rule. Default: the experiment's rule with --experiment, else interval.
    #[arg(long, value_enum)]
    pub(crate) significance: Option<crate::flags::SignificanceFlag>,
}

/// What a comparison works on: the store (read-only), the labels with the baseline first, the
/// significance rule and the selected runs.
pub(crate) struct Selection {
    pub(crate) store: Store,
    pub(crate) labels: Vec<String>,
    pub(crate) rule: stats::Significance,
    pub(crate) runs: Vec<StoredRun>,
}

/// Resolves a comparison's selection as `compare` does: an experiment (name or path) gives its
/// name, rule and default labels; every label must be in the store; only complete runs (unless
/// asked), optionally only the newest per (label, workload). Opens the store read-only.
pub(crate) fn select(a: &CompareSelect, db: Option<&Path>) -> Result<Selection, String> {
    let mut a = a.clone();
    let mut labels = a.labels.clone();
    // An experiment given by path is stored under its name.
    let exp = a
        .experiment
        .as_deref()
        .map(experiments::load)
        .transpose()
        .map_err(|e| e.to_string())?;
    if let Some(e) = &exp {
        a.experiment = Some(e.name.clone());
    }
    let rule = match (&a.significance, &exp) {
        (Some(r), _) => (*r).into(),
        (None, Some(e)) => e.significance,
        (None, None) => stats::Significance::Interval,
    };
    if labels.is_empty() {
        match &exp {
            Some(e) => labels = e.profiles.iter().map(|p| p.name.clone()).collect(),
            None => {
                return Err(
                    "nothing to compare: name labels (baseline first) or --experiment; `pagelab runs` lists the labels"
                        .into(),
                );
            }
        }
    }
    let store = open_read(db)?;
    let known = stored_labels(&store)?;
    if let Some(l) = labels.iter().find(|l| !known.contains(l)) {
        return Err(format!(
            "unknown label {}; labels in {}: {}",
            quote_label(l),
            store.path().display(),
            if known.is_empty() {
                "none yet".to_string()
            } else {
                known.join(", ")
            }
        ));
    }
    let mut runs = store
        .runs(&RunFilter {
            ids: a.runs.clone(),
            labels: labels.to_vec(),
            workload: a.workload.clone(),
            experiment: a.experiment.clone(),
            ..RunFilter::default()
        })
        .map_err(|e| e.to_string())?;
    // A run whose process died (abandoned) is as incomplete as an interrupted one; a run
    // still being measured is never used.
    runs.retain(|r| r.status == Status::Complete || (a.include_incomplete && r.incomplete()));
    if a.latest {
        let mut newest: BTreeMap<(String, String), i64> = BTreeMap::new();
        for r in &runs {
            let e = newest
                .entry((r.meta.label.clone(), r.meta.workload.clone()))
                .or_insert(r.id);
            *e = (*e).max(r.id);
        }
        runs.retain(|r| newest.values().any(|&id| id == r.id));
    }
    if runs.is_empty() {
        return Err("no complete run matches; `pagelab runs` lists what is stored (add --include-incomplete for interrupted runs)".into());
    }
    Ok(Selection {
        store,
        labels,
        rule,
        runs,
    })
}

pub fn compare_cmd(a: CompareArgs, db: Option<&Path>) -> Result<(), String> {
    let sel = select(&a.select, db)?;
    let ids: Vec<i64> = sel.runs.iter().map(|r| r.id).collect();
    let format = match a.format {
        CompareFormat::Text => Format::Text,
        CompareFormat::Markdown => Format::Markdown,
        CompareFormat::Json => Format::Json,
        CompareFormat::Csv => Format::Csv,
        CompareFormat::Lkp => {
            // The robot's rows need only each set's mean and spread: no significance rule, no
            // best-P rows.
            let sets = sel.store.sample_stats(&ids).map_err(|e| e.to_string())?;
            print!(
                "{}",
                lkp::render(&sets, &sel.labels).map_err(|e| e.to_string())?
            );
            return Ok(());
        }
    };
    let c =
        compare::from_store(&sel.store, &ids, &sel.labels, sel.rule).map_err(|e| e.to_string())?;
    print!("{}", render(&c, format));
    Ok(())
}

/// A run selection: the store's filter, and for the derived statuses whether the run must be
/// abandoned (`--status abandoned`) or must not be (`--status running`).
struct Selector {
    filter: RunFilter,
    abandoned: Option<bool>,
}

impl Selector {
    fn of(a: &RunSelect) -> Result<Selector, String> {
        let (status, abandoned) = match a.status {
            None => (None, None),
            // Both are stored as running; whether the process is alive says which.
            Some(StatusFlag::Abandoned) => (Some(Status::Running), Some(true)),
            Some(StatusFlag::Running) => (Some(Status::Running), Some(false)),
            Some(StatusFlag::Complete) => (Some(Status::Complete), None),
            Some(StatusFlag::Incomplete) => (Some(Status::Incomplete), None),
        };
        Ok(Selector {
            filter: RunFilter {
                ids: a.ids.clone(),
                labels: a.label.clone(),
                workload: a.workload.clone(),
                origin: a.origin.map(Into::into),
                status,
                experiment: a.experiment.clone(),
            },
            abandoned,
        })
    }

    fn runs(&self, store: &Store) -> Result<Vec<StoredRun>, String> {
        let mut runs = store.runs(&self.filter).map_err(|e| e.to_string())?;
        if let Some(want) = self.abandoned {
            runs.retain(|r| r.abandoned() == want);
        }
        Ok(runs)
    }
}

/// Why run `r` must not be deleted now, if it must not: its process may still be writing it.
/// With `elsewhere`, a run whose owner cannot be seen from here (another host or pid
/// namespace) may go; one whose process is alive here never does.
fn still_written(r: &StoredRun, elsewhere: bool) -> Option<String> {
    if r.status != Status::Running || r.abandoned() {
        return None;
    }
    let owner = r.owner.as_ref()?;
    Some(match owner.liveness() {
        Liveness::Elsewhere(_) if elsewhere => return None,
        Liveness::Elsewhere(place) => format!(
            "run {} is running on {place}, whose processes cannot be seen from here; delete it there once its process has ended, or add --elsewhere if it has",
            r.id
        ),
        _ => format!(
            "run {} is still being measured by process {}; stop it first (Ctrl-C, or kill {}), then delete it",
            r.id, owner.pid, owner.pid
        ),
    })
}

/// `runs --delete`: the selected runs, all of them or none. A run still being measured is
/// refused (its process would fail at its next sample, and its results would be lost without
/// anyone having asked for that); a run whose process is gone (abandoned) is deleted like any.
fn delete_runs(a: &RunsArgs, sel: &Selector, db: Option<&Path>) -> Result<(), String> {
    if a.all && (sel.filter != RunFilter::default() || sel.abandoned.is_some()) {
        return Err("--all deletes every run; give it without filters".into());
    }
    if !a.all && sel.filter == RunFilter::default() {
        return Err("--delete needs a filter (--id, --label, --workload, ...) or --all".into());
    }
    // Deleting never creates a store: open it for reading first, to fail on a missing one.
    open_read(db)?;
    let store = open_store(db)?;
    let runs = sel.runs(&store)?;
    if runs.is_empty() && !a.all {
        return Err("no run matches; `pagelab runs` lists what is stored".into());
    }
    if let Some(why) = runs.iter().find_map(|r| still_written(r, a.elsewhere)) {
        return Err(format!("{why}; nothing was deleted"));
    }
    // Exactly the runs checked: one begun since is not deleted unseen.
    let ids: Vec<i64> = runs.iter().map(|r| r.id).collect();
    let n = if ids.is_empty() {
        0
    } else {
        store
            .delete_runs(&RunFilter {
                ids,
                ..RunFilter::default()
            })
            .map_err(|e| e.to_string())?
    };
    println!("deleted {n} run(s) from {}", store.path().display());
    Ok(())
}

pub fn runs_cmd(a: RunsArgs, db: Option<&Path>) -> Result<(), String> {
    let sel = Selector::of(&a.select)?;
    if a.delete {
        return delete_runs(&a, &sel, db);
    }
    let store = open_read(db)?;
    let runs = sel.runs(&store)?;
    if a.json {
        // The derived status (abandoned) replaces the stored one, as in the table.
        let mut out = Vec::with_capacity(runs.len());
        for r in &runs {
            let mut v = serde_json::to_value(r).map_err(|e| e.to_string())?;
            v["status"] = r.shown_status().into();
            out.push(v);
        }
        println!(
            "{}",
            serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?
        );
        return Ok(());
    }
    use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header([
        "id",
        "label",
        "workload",
        "target",
        "origin",
        "status",
        "started",
        "samples",
        "experiment",
    ]);
    for r in &runs {
        t.add_row(vec![
            r.id.to_string(),
            r.meta.label.clone(),
            r.meta.workload.clone(),
            r.meta.target.clone(),
            r.meta.origin.to_string(),
            r.shown_status().to_string(),
            r.started.clone(),
            r.nr_samples.to_string(),
            r.meta.experiment.clone().unwrap_or_default(),
        ]);
    }
    println!("{t}");
    println!("{} run(s) in {}", runs.len(), store.path().display());
    Ok(())
}

/// What `export` can fail on while it streams: reading the store, or writing the output.
enum ExportError {
    Store(StoreError),
    Write(io::Error),
}

impl From<StoreError> for ExportError {
    fn from(e: StoreError) -> ExportError {
        ExportError::Store(e)
    }
}

impl From<io::Error> for ExportError {
    fn from(e: io::Error) -> ExportError {
        ExportError::Write(e)
    }
}

impl From<csv::Error> for ExportError {
    fn from(e: csv::Error) -> ExportError {
        ExportError::Write(e.into())
    }
}

impl From<serde_json::Error> for ExportError {
    fn from(e: serde_json::Error) -> ExportError {
        ExportError::Write(e.into())
    }
}

/// Export formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ExportFormat {
    /// One line per sample, which `pagelab import` reads back.
    Csv,
    /// An array of samples.
    Json,
}

/// The columns of a CSV export, which `pagelab import` reads back.
const EXPORT_COLUMNS: [&str; 12] = [
    "run_id",
    "label",
    "workload",
    "origin",
    "status",
    "mode",
    "tasks",
    "metric",
    "higher_is_better",
    "repeat",
    "seq",
    "value",
];

/// Writes every sample of `ids` to `w` as it is read from the store: a CSV row, or a JSON array
/// element, at a time, so memory does not grow with the number of samples. JSON is one
/// pretty-printed array, valid once the last element is written. CSV text cells go through
/// [`neutralise`], so a spreadsheet never takes a label for a formula.
fn write_export(
    store: &Store,
    ids: &[i64],
    status: &HashMap<i64, Status>,
    format: ExportFormat,
    w: &mut dyn Write,
) -> Result<(), ExportError> {
    let status_of = |id: i64| status.get(&id).copied().unwrap_or(Status::Complete);
    match format {
        ExportFormat::Json => {
            let mut ser = serde_json::Serializer::pretty(&mut *w);
            let mut seq = ser.serialize_seq(None)?;
            store.for_each_sample(ids, |s: &SampleRow| {
                seq.serialize_element(s).map_err(ExportError::from)
            })?;
            seq.end()?;
            w.write_all(b"\n")?;
        }
        ExportFormat::Csv => {
            let mut csv = csv::Writer::from_writer(&mut *w);
            csv.write_record(EXPORT_COLUMNS)?;
            let mut num = String::new();
            store.for_each_sample(ids, |s: &SampleRow| {
                let mut field = |csv: &mut csv::Writer<_>, v: &dyn std::fmt::Display| {
                    num.clear();
                    let _ = write!(num, "{v}");
                    csv.write_field(&num)
                };
                field(&mut csv, &s.run_id)?;
                csv.write_field(neutralise(&s.label).as_ref())?;
                csv.write_field(neutralise(&s.workload).as_ref())?;
                csv.write_field(s.origin.as_str())?;
                csv.write_field(status_of(s.run_id).as_str())?;
                csv.write_field(neutralise(&s.key.mode).as_ref())?;
                field(&mut csv, &s.key.tasks)?;
                csv.write_field(neutralise(&s.key.metric).as_ref())?;
                field(&mut csv, &s.key.higher_is_better)?;
                field(&mut csv, &s.repeat)?;
                field(&mut csv, &s.seq)?;
                field(&mut csv, &s.value)?;
                csv.write_record(None::<&[u8]>)?;
                Ok::<(), ExportError>(())
            })?;
            csv.flush()?;
        }
    }
    w.flush()?;
    Ok(())
}

pub fn export_cmd(a: ExportArgs, db: Option<&Path>) -> Result<(), String> {
    let format = a.format;
    let store = open_read(db)?;
    let runs = Selector::of(&a.select)?.runs(&store)?;
    if runs.is_empty() {
        return Err("no run matches; `pagelab runs` lists what is stored".into());
    }
    let ids: Vec<i64> = runs.iter().map(|r| r.id).collect();
    let status: HashMap<i64, Status> = runs.iter().map(|r| (r.id, r.status)).collect();
    let failed = |e: ExportError, dest: &str| match e {
        ExportError::Store(e) => e.to_string(),
        ExportError::Write(e) => format!("cannot write {dest}: {e}"),
    };
    match &a.out {
        Some(p) => {
            // Refuses the store in use and any database before anything is written; the
            // temporary file replaces the target only once the export is complete.
            let mut f = OutputFile::create(p, Some(store.path())).map_err(|e| e.to_string())?;
            write_export(&store, &ids, &status, format, &mut f)
                .map_err(|e| failed(e, &p.display().to_string()))?;
            f.commit().map_err(|e| e.to_string())?;
        }
        None => {
            let mut out = io::BufWriter::new(io::stdout().lock());
            write_export(&store, &ids, &status, format, &mut out)
                .map_err(|e| failed(e, "standard output"))?;
        }
    }
    Ok(())
}

/// `import` of an mmtests run directory: every wis and pft log parsed first, then one run per
/// workload stored in one transaction.
fn import_mmtests(a: ImportArgs, db: Option<&Path>) -> Result<(), String> {
    let name = a.file.display().to_string();
    let given = |flag: &str, set: bool| {
        if set {
            Err(format!(
                "{flag} does not apply to an mmtests directory ({name}): its logs say it"
            ))
        } else {
            Ok(())
        }
    };
    given("--format", a.format.is_some())?;
    given("--workload", a.workload.is_some())?;
    given("--tasks", a.tasks.is_some())?;
    given("--warmup", a.warmup != 0)?;
    let label = match &a.label {
        Some(l) => check_label(l)?,
        None => {
            // The run name, as compare-kernels.sh shows it; `.` or `..` say nothing.
            let dir =
                std::fs::canonicalize(&a.file).map_err(|e| format!("cannot read {name}: {e}"))?;
            let base = dir
                .file_name()
                .and_then(|b| b.to_str())
                .ok_or_else(|| format!("{name}: the directory's name is no label; give --label"))?;
            check_label(base).map_err(|e| format!("{e} (the directory's name); give --label"))?
        }
    };
    let opts = ImportOptions {
        label: label.clone(),
        workload: None,
        mode: a.mode.map(|m| Mode::from(m).to_string()),
        tasks: None,
        warmup: 0,
        machine: a.machine.clone(),
        command: command_line(),
    };
    let runs = mmtests::read_dir(&a.file, &opts).map_err(|e| e.to_string())?;
    let store = open_store(db)?;
    let ids = store.insert_runs(&runs).map_err(|e| e.to_string())?;
    for (data, id) in runs.iter().zip(ids) {
        let n: usize = data.samples.iter().map(|(_, _, v)| v.len()).sum();
        println!(
            "imported {n} samples of {} (mmtests {}) as run {id}, label {label}, into {}",
            data.meta.workload,
            data.meta.target,
            store.path().display()
        );
    }
    Ok(())
}

pub fn import_cmd(a: ImportArgs, db: Option<&Path>) -> Result<(), String> {
    if a.file.is_dir() {
        return import_mmtests(a, db);
    }
    let label = check_label(a.label.as_deref().ok_or_else(|| {
        format!(
            "--label is required for a file ({}); only an mmtests directory has a default",
            a.file.display()
        )
    })?)?;
    let name = a.file.display().to_string();
    // At most import::MAX_INPUT_BYTES is read: `/dev/zero` or a pipe that never closes ends in
    // an error, with memory bounded, before the store is opened.
    let file = std::fs::File::open(&a.file).map_err(|e| format!("cannot read {name}: {e}"))?;
    let text = import::read_input(&name, file).map_err(|e| e.to_string())?;
    let format = match &a.format {
        Some(f) => (*f).into(),
        None => import::detect(&name, &text).map_err(|e| e.to_string())?,
    };
    let opts = ImportOptions {
        label: label.clone(),
        workload: a.workload.clone(),
        mode: a.mode.map(|m| Mode::from(m).to_string()),
        tasks: a.tasks,
        warmup: a.warmup,
        machine: a.machine.clone(),
        command: command_line(),
    };
    // Parse everything first: a malformed file never reaches the store.
    let data = import::parse_named(format, &name, &text, &opts).map_err(|e| e.to_string())?;
    let store = open_store(db)?;
    let id = store.insert_run(&data).map_err(|e| e.to_string())?;
    let n: usize = data.samples.iter().map(|(_, _, v)| v.len()).sum();
    println!(
        "imported {n} samples of {} ({} format) as run {id}, label {label}, into {}",
        data.meta.workload,
        format.as_str(),
        store.path().display()
    );
    Ok(())
}
