//! `pagelab reproduce`'s second half: the projection to the experiment's own machine, and the
//! table that sets the three views of a published comparison side by side (what the posting
//! published, what pagelab projects for the posting's machine, what the engine measured here),
//! each with its change against the baseline profile; and `pagelab experiments`, which says
//! for each experiment which of the three it can give.
//!
//! Why one table: the three answer different questions (is the posting's effect real, does the
//! model give it on the posting's machine, does this 2-core host show it at all), and a reader
//! who has to gather them from `reproduce`, `project` and `data/published/` compares numbers
//! taken with different means at different task counts. Here every column of a row uses the
//! mean the published table uses (will-it-scale's arithmetic mean for the 2018 table, mmtests'
//! harmonic mean for the 2023 one; without a table the mmtests rule: harmonic for rates,
//! arithmetic otherwise), and rows any one view lacks are printed with `-` in its cell.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::sync::atomic::AtomicBool;

use clap::Args;
use pagelab_bench::compare::{Comparison, SetSummary, natural_cmp};
use pagelab_bench::experiments::{self, Experiment};
use pagelab_bench::host::HostInfo;
use pagelab_bench::results::Origin;
use pagelab_bench::run::parse_tasks;
use pagelab_bench::stats::{change_range, pct_change};
use pagelab_bench::store::Store;
use pagelab_project::machine::Machine;
use pagelab_project::project::{
    ProjectSpec, capture_all, default_label, project_traces, store_projection,
};
use pagelab_project::validate::{self, MeanKind, Published};
use pagelab_workloads::{Mode, WorkloadKind};

use crate::command_line;
use crate::results_cmd::Format;

/// Captures per profile in `reproduce`'s projection: one keeps the README's main job within a
/// few minutes on 2 cores; `pagelab project` takes 3 and `validate` 2.
const REPRODUCE_CAPTURES: u64 = 1;
/// Sample windows per projected will-it-scale row and capture (a pft row gives one value a
/// capture).
const REPRODUCE_SAMPLES: u64 = 3;
/// Faults per replayed CPU for fixed-work workloads (pft), as `project` and `validate`.
const REPRODUCE_OPS_PER_CPU: u64 = 8192;

/// Server threads (memcached `-t`) of kvcache's posting (Kairui Song, 2023): `reproduce`
/// projects kvcache at 1, 4 and this many threads unless told otherwise.
const KVCACHE_POSTED_SERVERS: usize = 16;

/// How `reproduce` projects: small, fast settings by default, each overridable.
#[derive(Args, Clone, Debug, Default)]
pub(crate) struct ProjectionArgs {
    /// Measure here only: skip the projection to the experiment's machine.
    #[arg(long)]
    pub(crate) no_project: bool,
    /// Task counts projected on the experiment's machine, mmtests style (default: 1, 4, 16, the
    /// machine's CPUs and the published table's task counts).
    #[arg(long, value_name = "LIST", conflicts_with = "no_project")]
    pub(crate) project_tasks: Option<String>,
    /// Sample windows per projected row and capture of a cyclic workload (will-it-scale;
    /// default 3). A fixed-work one (pft) gives one value a capture.
    #[arg(long, value_name = "N", conflicts_with = "no_project",
          value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub(crate) project_samples: Option<u64>,
    /// Captures of each profile on the engine for the projection, each replayed (default 1).
    #[arg(long, value_name = "N", conflicts_with = "no_project",
          value_parser = clap::value_parser!(u64).range(1..=20))]
    pub(crate) captures: Option<u64>,
    /// Fixed-work workloads (pft): faults per replayed CPU (default 8192).
    #[arg(long, value_name = "N", conflicts_with = "no_project",
          value_parser = clap::value_parser!(u64).range(64..))]
    pub(crate) ops_per_cpu: Option<u64>,
    /// The projection's seed (default 1).
    #[arg(long, value_name = "S", conflicts_with = "no_project")]
    pub(crate) seed: Option<u64>,
    /// Project with the machine file's `kernel.trap_ns`. By default an experiment that ships
    /// its published table has it fitted again on this host from the projection's own
    /// captures of the baseline, as `validate` does (the captured compute is this host's).
    #[arg(long, conflicts_with = "no_project")]
    pub(crate) trap_from_file: bool,
}

impl ProjectionArgs {
    /// The projection flag given, if any (for the error when there is nothing to project).
    fn given(&self) -> Option<&'static str> {
        [
            (self.project_tasks.is_some(), "--project-tasks"),
            (self.project_samples.is_some(), "--project-samples"),
            (self.captures.is_some(), "--captures"),
            (self.ops_per_cpu.is_some(), "--ops-per-cpu"),
            (self.seed.is_some(), "--seed"),
            (self.trap_from_file, "--trap-from-file"),
        ]
        .into_iter()
        .find_map(|(set, flag)| set.then_some(flag))
    }
}

/// Why an experiment cannot be projected (`None`: it can), in one line.
pub(crate) fn why_not_projectable(e: &Experiment) -> Option<String> {
    let Some(m) = &e.machine else {
        return Some(format!(
            "experiment {} names no machine (no `machine = \"...\"` key)",
            e.name
        ));
    };
    pagelab_project::capture::shape(e.workload)
        .err()
        .map(|why| format!("{why} (experiment {} on {m})", e.name))
}

/// What `reproduce` will project, decided (and checked) before anything is measured.
pub(crate) enum Plan {
    Project(Box<ProjectSpec>),
    /// No projection, and the one line saying why.
    Skip(String),
}

/// Task counts projected by default: 1, 4, 16 and the machine's CPUs, and every task count of
/// the published table (so that each published row has its projected cell beside it), those
/// the machine has.
fn default_tasks(
    m: &Machine,
    table: Option<&Published>,
    w: WorkloadKind,
) -> Result<Vec<usize>, String> {
    // netpipe's tasks are sender/receiver pairs: two CPUs each.
    let n = if w == WorkloadKind::Netpipe {
        m.nr_cpus() / 2
    } else {
        m.nr_cpus()
    };
    let mut v: Vec<usize> = vec![1, 4, 16, n];
    if let Some(t) = table {
        v.extend(t.rows().map_err(|e| e.to_string())?.iter().map(|r| r.tasks));
    }
    v.retain(|&t| t >= 1 && t <= n);
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

/// The projection `reproduce` makes of `e`, or why it makes none. Refuses, in one line, flags
/// that cannot apply: `--no-project` or a projection flag for an experiment with nothing to
/// project, and a projection the machine cannot hold.
pub(crate) fn plan(e: &Experiment, a: &ProjectionArgs) -> Result<Plan, String> {
    if let Some(why) = why_not_projectable(e) {
        if a.no_project {
            return Err(format!(
                "--no-project: there is no projection to skip: {why}"
            ));
        }
        if let Some(flag) = a.given() {
            return Err(format!(
                "{flag} applies to the projection, and there is none: {why}"
            ));
        }
        return Ok(Plan::Skip(why));
    }
    if a.no_project {
        return Ok(Plan::Skip("--no-project".into()));
    }
    let name = e
        .machine
        .as_deref()
        .expect("checked by why_not_projectable");
    let machine = Machine::load(name).map_err(|e| e.to_string())?;
    let tasks = match &a.project_tasks {
        Some(t) => parse_tasks(t).map_err(|err| format!("--project-tasks: {err}"))?,
        // kvcache's posting ran 16 memcached workers: its default rows stop there.
        None if e.workload == WorkloadKind::Kvcache => {
            let mut t = default_tasks(&machine, table_of(e)?, e.workload)?;
            t.retain(|&n| n <= KVCACHE_POSTED_SERVERS);
            t
        }
        None => default_tasks(&machine, table_of(e)?, e.workload)?,
    };
    let spec = ProjectSpec {
        machine,
        workload: e.workload,
        profiles: e.profiles.clone(),
        modes: e.modes.clone(),
        tasks,
        samples: a.project_samples.unwrap_or(REPRODUCE_SAMPLES) as usize,
        captures: a.captures.unwrap_or(REPRODUCE_CAPTURES) as usize,
        seed: a.seed.unwrap_or(1),
        ops_per_cpu: a.ops_per_cpu.unwrap_or(REPRODUCE_OPS_PER_CPU),
        // Lameter's test faults one region split between the threads (as `project` does).
        region_bytes: if e.workload == WorkloadKind::Lameter {
            e.size
        } else {
            None
        },
        kvcache: e.kvcache,
    };
    spec.check()
        .map_err(|err| format!("--project-tasks: {err}"))?;
    Ok(Plan::Project(Box::new(spec)))
}

/// Projects `spec` and stores each profile as a projected run labelled `<profile>@<machine>`
/// (as `pagelab project` does, so that compare, plot and report find them); returns the run
/// ids. An interruption stores what was projected, marked incomplete, and is an error.
///
/// With `refit_trap`, an experiment whose published table ships and was measured on the
/// projection's machine has that machine's `kernel.trap_ns` fitted again from the baseline's
/// captures before any row is replayed (`validate`'s refit, its arithmetic printed), so that
/// the projected column's level is this host's fit and not the file's.
pub(crate) fn project_and_store(
    store: &Store,
    e: &Experiment,
    spec: &ProjectSpec,
    refit_trap: bool,
    stop: &AtomicBool,
) -> Result<Vec<i64>, String> {
    let mut spec = spec.clone();
    let what = format!("{} on {}", e.workload, spec.machine.name);
    let mut progress = |p: pagelab_project::project::Progress<'_>| match p {
        pagelab_project::project::Progress::Capturing {
            profile,
            round,
            rounds,
        } => eprintln!(
            "pagelab: {what}: capturing a trace of {profile} on the engine ({round}/{rounds})"
        ),
        pagelab_project::project::Progress::Pacing {
            profiles,
            round,
            rounds,
        } => eprintln!(
            "pagelab: {what}: timing the {profiles} profiles side by side ({round}/{rounds})"
        ),
        pagelab_project::project::Progress::Replayed { done, total } => {
            eprintln!("pagelab: {what}: replayed {done}/{total} rows")
        }
        pagelab_project::project::Progress::Variant {
            done,
            total,
            param,
            factor,
        } => eprintln!(
            "pagelab: {what}: sensitivity, replayed {done}/{total} variants ({param} x{factor:.2})"
        ),
    };
    // The fit needs the table's fitted row's profile captured first, as the table's own
    // experiment does; an experiment file that orders its profiles otherwise keeps the file's.
    let baseline_first = |t: &Published| {
        pagelab_project::calibrate::fitted_rows(t)
            .ok()
            .and_then(|r| r.into_iter().next())
            .is_some_and(|row| e.profiles.first().is_some_and(|p| p.name == row.profile))
    };
    let refit_from = match table_of(e)? {
        Some(t) if refit_trap && t.machine == spec.machine.name && baseline_first(t) => Some(t),
        _ => None,
    };
    let (proj, interrupted) =
        match capture_all(&spec, &mut progress, stop).map_err(|e| e.to_string())? {
            None => (Vec::new(), true),
            Some(traces) => {
                if let Some(t) = refit_from {
                    let trap = pagelab_project::validate::TrapSource::refit(
                        t,
                        &spec.machine,
                        &traces[0],
                        spec.samples,
                        spec.seed,
                        spec.ops_for(1),
                    )
                    .map_err(|e| e.to_string())?;
                    eprintln!(
                        "pagelab: {what}: {} (from {}; --trap-from-file keeps the file's)",
                        trap.describe(spec.captures),
                        t.name
                    );
                    spec.machine.kernel.trap_ns = trap.used_ns();
                }
                project_traces(&spec, traces, &mut progress, stop).map_err(|e| e.to_string())?
            }
        };
    let m = &spec.machine;
    let host = serde_json::to_string(&HostInfo::detect()).ok();
    let mut ids = Vec::new();
    for p in &proj {
        let label = default_label(&p.profile.name, &m.name);
        ids.push(
            store_projection(
                store,
                p,
                &label,
                m,
                Some(&e.name),
                &command_line(),
                host.clone(),
                !interrupted,
            )
            .map_err(|e| e.to_string())?,
        );
    }
    if interrupted {
        return Err(format!(
            "interrupted while projecting; projected runs {ids:?} keep what was replayed, marked incomplete"
        ));
    }
    Ok(ids)
}

/// One view's cell: the row's mean, its change against the baseline profile, and for a
/// measured change the significance verdict, for a projected one the range over its captures.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub(crate) struct Cell {
    pub(crate) value: Option<f64>,
    pub(crate) change_pct: Option<f64>,
    /// Measured: whether compare's rule finds the change significant.
    pub(crate) significant: Option<bool>,
    /// Projected with more than one capture: the change's range over the captures.
    pub(crate) range: Option<(f64, f64)>,
}

/// One row of the side-by-side table.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub(crate) struct SideRow {
    pub(crate) mode: String,
    pub(crate) tasks: u32,
    pub(crate) metric: String,
    pub(crate) profile: String,
    pub(crate) published: Cell,
    pub(crate) projected: Cell,
    pub(crate) measured: Cell,
}

/// The three views of an experiment, row by row.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct SideBySide {
    pub(crate) experiment: String,
    pub(crate) baseline: String,
    /// The published table's name, if one ships.
    pub(crate) table: Option<String>,
    /// The machine projected to, if a projection was made.
    pub(crate) machine: Option<String>,
    /// Why there is no projection, if there is none.
    pub(crate) no_projection: Option<String>,
    /// Captures per profile of the projection, if one was made.
    pub(crate) captures: Option<usize>,
    /// The mean every column uses: the table's, else mmtests' rule per metric.
    pub(crate) mean: String,
    pub(crate) rows: Vec<SideRow>,
}

/// Whether `metric` is a rate (higher is better) as the stored sets say; published tables hold
/// rates only.
fn higher_is_better(sets: &[&SetSummary], metric: &str) -> bool {
    sets.iter()
        .find(|s| s.key.metric == metric)
        .is_none_or(|s| s.key.higher_is_better)
}

/// Builds the table. `measured` and `projected` are the stored sample sets of the measured
/// runs (labelled by profile) and of the projected ones (labelled `<profile>@<machine>`);
/// `verdicts` is the measured comparison, whose mean rows give the significance.
pub(crate) fn side_by_side(
    e: &Experiment,
    table: Option<&Published>,
    machine: Option<&str>,
    no_projection: Option<String>,
    measured: &[SetSummary],
    projected: &[SetSummary],
    verdicts: &Comparison,
) -> Result<SideBySide, String> {
    let published = match table {
        Some(t) => t.rows().map_err(|e| e.to_string())?,
        None => Vec::new(),
    };
    let profiles: Vec<&str> = e.profiles.iter().map(|p| p.name.as_str()).collect();
    let baseline = profiles[0];
    let all: Vec<&SetSummary> = measured.iter().chain(projected).collect();
    let mean_kind = |metric: &str| -> MeanKind {
        match table {
            Some(t) => t.mean,
            None if higher_is_better(&all, metric) => MeanKind::Harmonic,
            None => MeanKind::Arithmetic,
        }
    };
    // Every (mode, tasks, metric) any view has, for every profile; modes in the experiment's
    // order.
    let mut mode_names: Vec<String> = e.modes.iter().map(Mode::to_string).collect();
    let found = all
        .iter()
        .map(|s| s.key.mode.clone())
        .chain(published.iter().map(|r| r.mode.to_string()));
    for m in found {
        if !mode_names.contains(&m) {
            mode_names.push(m);
        }
    }
    let rank = |m: &str| mode_names.iter().position(|x| x == m).unwrap_or(0);
    let mut keys: BTreeSet<(usize, u32, String)> = BTreeSet::new();
    for s in &all {
        keys.insert((rank(&s.key.mode), s.key.tasks, s.key.metric.clone()));
    }
    for r in &published {
        keys.insert((rank(&r.mode.to_string()), r.tasks as u32, r.metric.clone()));
    }
    let mut keys: Vec<(usize, u32, String)> = keys.into_iter().collect();
    keys.sort_by(|a, b| {
        (a.0, a.1)
            .cmp(&(b.0, b.1))
            .then_with(|| natural_cmp(&a.2, &b.2))
    });

    // A stored view's set of (profile's label, mode, tasks, metric).
    let find = |sets: &[SetSummary], label: &str, mode: &str, tasks: u32, metric: &str| {
        sets.iter()
            .find(|s| {
                s.label == label
                    && s.key.mode == mode
                    && s.key.tasks == tasks
                    && s.key.metric == metric
                    && s.summary.n() > 0
            })
            .cloned()
    };
    let proj_label = |p: &str| machine.map(|m| default_label(p, m)).unwrap_or_default();
    let verdict = |mode: &str, tasks: u32, metric: &str, profile: &str| -> Option<bool> {
        let col = verdicts.columns.iter().position(|c| c.label == profile)?;
        verdicts
            .sections
            .iter()
            .filter(|s| s.mode == mode && s.workload == e.workload.to_string())
            .flat_map(|s| &s.rows)
            .find(|r| {
                r.tasks == tasks && r.metric == metric && (r.stat == "Hmean" || r.stat == "Amean")
            })
            .and_then(|r| r.cells.get(col))
            .and_then(|c| c.significant)
    };

    let mut rows = Vec::new();
    for (mode_i, tasks, metric) in &keys {
        let mode = mode_names[*mode_i].clone();
        let kind = mean_kind(metric);
        let harmonic = kind == MeanKind::Harmonic;
        let hib = higher_is_better(&all, metric);
        let pub_value = |profile: &str| {
            published
                .iter()
                .find(|r| {
                    r.profile == profile
                        && r.mode.to_string() == mode
                        && r.tasks as u32 == *tasks
                        && r.metric == *metric
                })
                .map(|r| r.value)
        };
        let meas = |profile: &str| find(measured, profile, &mode, *tasks, metric);
        let proj = |profile: &str| find(projected, &proj_label(profile), &mode, *tasks, metric);
        let mean = |s: &SetSummary| Some(s.summary.mean_of(harmonic)).filter(|v| v.is_finite());
        let (pb, mb, qb) = (
            pub_value(baseline),
            meas(baseline).and_then(|s| mean(&s)),
            proj(baseline),
        );
        let qb_mean = qb.as_ref().and_then(mean);
        for &profile in &profiles {
            let is_base = profile == baseline;
            let change = |base: Option<f64>, v: Option<f64>| match (base, v) {
                (Some(b), Some(v)) if !is_base => Some(pct_change(b, v, hib)),
                _ => None,
            };
            let pv = pub_value(profile);
            let ms = meas(profile);
            let mv = ms.as_ref().and_then(mean);
            let qs = proj(profile);
            let qv = qs.as_ref().and_then(mean);
            let range = match (&qb, &qs) {
                (Some(b), Some(q)) if !is_base && b.repeats.len() > 1 => {
                    let means = |s: &SetSummary| -> Vec<f64> {
                        s.repeats.iter().map(|(_, r)| r.mean_of(harmonic)).collect()
                    };
                    change_range(&means(b), &means(q), hib)
                }
                _ => None,
            };
            if pv.is_none() && mv.is_none() && qv.is_none() {
                continue;
            }
            rows.push(SideRow {
                mode: mode.clone(),
                tasks: *tasks,
                metric: metric.clone(),
                profile: profile.to_string(),
                published: Cell {
                    value: pv,
                    change_pct: change(pb, pv),
                    ..Cell::default()
                },
                projected: Cell {
                    value: qv,
                    change_pct: change(qb_mean, qv),
                    range,
                    ..Cell::default()
                },
                measured: Cell {
                    value: mv,
                    change_pct: change(mb, mv),
                    significant: if is_base || mv.is_none() {
                        None
                    } else {
                        verdict(&mode, *tasks, metric, profile)
                    },
                    range: None,
                },
            });
        }
    }
    let mean = match table {
        Some(t) => format!("{} means, as {} publishes", t.mean.name(), t.name),
        None => "harmonic means of rates, arithmetic of times (mmtests)".into(),
    };
    Ok(SideBySide {
        experiment: e.name.clone(),
        baseline: baseline.to_string(),
        table: table.map(|t| t.name.to_string()),
        machine: machine.map(str::to_string),
        no_projection,
        // The caller says how many captures its projection made.
        captures: None,
        mean,
        rows,
    })
}

/// A value as the tables print it: whole numbers for rates of thousands, else 2 decimals.
fn number(v: f64) -> String {
    if v.abs() >= 1000.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

impl Cell {
    /// `value change`: `-` for a missing value; the measured change `*-9.51%*` when significant
    /// and `(-0.84%)` when not (compare's marks); a projected change with its captures' range.
    fn render(&self) -> String {
        let Some(v) = self.value else {
            return "-".into();
        };
        let mut s = number(v);
        if let Some(c) = self.change_pct {
            match self.significant {
                Some(true) => {
                    let _ = write!(s, " *{c:+.2}%*");
                }
                Some(false) => {
                    let _ = write!(s, " ({c:+.2}%)");
                }
                None => {
                    let _ = write!(s, " {c:+.2}%");
                }
            }
            if let Some((lo, hi)) = self.range {
                let _ = write!(s, " [{lo:+.1}, {hi:+.1}]");
            }
        }
        s
    }
}

impl SideBySide {
    fn headers(&self) -> [String; 3] {
        [
            match &self.table {
                Some(t) => format!("published ({t})"),
                None => "published".into(),
            },
            match &self.machine {
                Some(m) => format!("projected ({m})"),
                None => "projected".into(),
            },
            "measured (here)".into(),
        ]
    }

    fn notes(&self) -> Vec<String> {
        let mut v = vec![format!(
            "{}: published, projected and measured side by side; {}; changes against {} (positive is better)",
            self.experiment, self.mean, self.baseline
        )];
        if self.table.is_none() {
            v.push("published: no table of this comparison ships with pagelab".into());
        }
        match &self.no_projection {
            Some(why) => v.push(format!("projected: none: {why}")),
            None if self.captures.is_some_and(|c| c > 1) => v.push(
                "projected: a change's [range] is its spread over the captures, no significance test applies".into(),
            ),
            // One capture a profile (`reproduce`'s default): the change has no spread to show,
            // and a capture's own noise is inside it, unseen.
            None => v.push(
                "projected: one capture per profile, so a change shows no range and carries that capture's noise unseen; --captures 3 gives each change its range".into(),
            ),
        }
        v.push("measured: a significant change between asterisks, others in parentheses".into());
        v
    }

    pub(crate) fn render(&self, format: Format) -> String {
        match format {
            Format::Text => self.render_text(),
            Format::Markdown => self.render_markdown(),
            // `reproduce` puts the table in one JSON document with the measured comparison.
            Format::Json => serde_json::to_string_pretty(self).unwrap_or_default() + "\n",
            Format::Csv => self.render_csv(),
        }
    }

    fn render_text(&self) -> String {
        let mut s = String::new();
        for n in self.notes() {
            let _ = writeln!(s, "{n}");
        }
        let cells: Vec<[String; 3]> = self
            .rows
            .iter()
            .map(|r| {
                [
                    r.published.render(),
                    r.projected.render(),
                    r.measured.render(),
                ]
            })
            .collect();
        let heads = self.headers();
        let w = |i: usize| {
            cells
                .iter()
                .map(|c| c[i].len())
                .chain([heads[i].len()])
                .max()
                .unwrap_or(0)
        };
        let (w0, w1, w2) = (w(0), w(1), w(2));
        let wp = self
            .rows
            .iter()
            .map(|r| r.profile.len())
            .chain([7])
            .max()
            .unwrap_or(7);
        let wm = self
            .rows
            .iter()
            .map(|r| r.metric.len())
            .chain([6])
            .max()
            .unwrap_or(6);
        let _ = writeln!(
            s,
            "{:<9} {:>5} {:<wm$} {:<wp$}  {:>w0$}  {:>w1$}  {:>w2$}",
            "mode", "tasks", "metric", "profile", heads[0], heads[1], heads[2]
        );
        for (r, c) in self.rows.iter().zip(&cells) {
            let _ = writeln!(
                s,
                "{:<9} {:>5} {:<wm$} {:<wp$}  {:>w0$}  {:>w1$}  {:>w2$}",
                r.mode, r.tasks, r.metric, r.profile, c[0], c[1], c[2]
            );
        }
        s
    }

    fn render_markdown(&self) -> String {
        let mut s = String::new();
        for n in self.notes() {
            let _ = writeln!(s, "{}  ", n.replace('*', "\\*"));
        }
        let h = self.headers();
        let _ = writeln!(
            s,
            "\n| mode | tasks | metric | profile | {} | {} | {} |\n|---|---:|---|---|---:|---:|---:|",
            h[0], h[1], h[2]
        );
        for r in &self.rows {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} |",
                r.mode,
                r.tasks,
                r.metric,
                r.profile,
                r.published.render().replace('*', "\\*"),
                r.projected.render().replace('*', "\\*"),
                r.measured.render().replace('*', "\\*"),
            );
        }
        s
    }

    fn render_csv(&self) -> String {
        let mut s = String::from(
            "mode,tasks,metric,profile,published,published_change,projected,projected_change,measured,measured_change,measured_significant\n",
        );
        let opt = |v: Option<f64>| v.map_or(String::new(), |v| v.to_string());
        for r in &self.rows {
            let _ = writeln!(
                s,
                "{},{},{},{},{},{},{},{},{},{},{}",
                r.mode,
                r.tasks,
                pagelab_bench::csv_text::neutralise(&r.metric),
                pagelab_bench::csv_text::neutralise(&r.profile),
                opt(r.published.value),
                opt(r.published.change_pct),
                opt(r.projected.value),
                opt(r.projected.change_pct),
                opt(r.measured.value),
                opt(r.measured.change_pct),
                r.measured
                    .significant
                    .map_or(String::new(), |b| b.to_string()),
            );
        }
        s
    }
}

/// The published table an experiment names, if one ships.
pub(crate) fn table_of(e: &Experiment) -> Result<Option<&'static Published>, String> {
    e.published
        .as_deref()
        .map(validate::published)
        .transpose()
        .map_err(|e| e.to_string())
}

/// The sample sets of `ids`, split into measured and projected.
pub(crate) fn stored_sets(
    store: &Store,
    ids: &[i64],
) -> Result<(Vec<SetSummary>, Vec<SetSummary>), String> {
    let sets = store.sample_stats(ids).map_err(|e| e.to_string())?;
    Ok(sets
        .into_iter()
        .partition(|s| s.origin != Origin::Projected))
}

/// `pagelab experiments`: per experiment its seed (where it was published), its machine, and
/// what ships with it; or one experiment in full.
pub(crate) fn experiments_cmd(experiment: Option<String>) -> Result<(), String> {
    let yes_no = |b: bool| if b { "yes" } else { "no" };
    match experiment {
        None => {
            let all = experiments::BUILTIN
                .iter()
                .map(|(n, _)| experiments::load(n))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.to_string())?;
            let wn = all.iter().map(|e| e.name.len()).max().unwrap_or(0).max(10);
            let wm = all
                .iter()
                .map(|e| e.machine.as_deref().unwrap_or("-").len())
                .max()
                .unwrap_or(0)
                .max(7);
            println!(
                "{:<wn$}  {:<wm$}  {:<9}  {:<11}  seed",
                "experiment", "machine", "published", "projectable"
            );
            for e in &all {
                println!(
                    "{:<wn$}  {:<wm$}  {:<9}  {:<11}  {}",
                    e.name,
                    e.machine.as_deref().unwrap_or("-"),
                    e.published.as_deref().map_or("no", |_| "yes"),
                    yes_no(why_not_projectable(e).is_none()),
                    e.source
                );
            }
        }
        Some(n) => {
            let e = experiments::load(&n).map_err(|e| e.to_string())?;
            let names: Vec<&str> = e.profiles.iter().map(|p| p.name.as_str()).collect();
            let modes: Vec<String> = e.modes.iter().map(|m| m.to_string()).collect();
            let tasks: Vec<String> = e.tasks.iter().map(|t| t.to_string()).collect();
            println!("{}: {}", e.name, e.description);
            println!("seed:       {}", e.source);
            println!("machine:    {}", e.machine.as_deref().unwrap_or("-"));
            println!(
                "published:  {}",
                e.published
                    .as_deref()
                    .map_or("no table ships".to_string(), |t| format!(
                        "table {t} (data/published/{t}.csv)"
                    ))
            );
            println!(
                "projectable: {}",
                match why_not_projectable(&e) {
                    None => "yes".to_string(),
                    Some(why) => format!("no: {why}"),
                }
            );
            println!("workload:   {}", e.workload);
            println!("profiles:   {} (baseline first)", names.join(", "));
            println!("modes:      {}", modes.join(", "));
            println!("tasks:      {}", tasks.join(", "));
            println!(
                "samples:    {} (warm-up {}), repeats {}",
                e.samples, e.warmup, e.repeats
            );
            println!("significance: {:?}", e.significance);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(captures: usize, range: Option<(f64, f64)>) -> SideBySide {
        let cell = Cell {
            value: Some(1.0),
            change_pct: Some(2.0),
            significant: None,
            range,
        };
        SideBySide {
            experiment: "e".into(),
            baseline: "a".into(),
            table: None,
            machine: Some("m".into()),
            no_projection: None,
            captures: Some(captures),
            mean: "harmonic means".into(),
            rows: vec![SideRow {
                mode: "threads".into(),
                tasks: 4,
                metric: "faults/sec".into(),
                profile: "b".into(),
                published: Cell::default(),
                projected: cell,
                measured: Cell::default(),
            }],
        }
    }

    /// The projected column's note says what its changes carry, from the captures made: a range
    /// over the captures, or, from one capture a profile, no range and that capture's noise
    /// unseen.
    #[test]
    fn the_projected_note_says_whether_changes_carry_a_range() {
        let with = table(3, Some((1.0, 3.0))).notes().join("\n");
        assert!(
            with.contains("[range] is its spread over the captures"),
            "{with}"
        );
        let one = table(1, None).notes().join("\n");
        assert!(one.contains("one capture per profile"), "{one}");
        assert!(!one.contains("[range]"), "{one}");
    }
}
