//! `pagelab run` and `pagelab reproduce`: measure, store every row as it is measured, print.
//!
//! A run is registered in the store before anything is measured (so a bad `--db` fails first),
//! each (mode, task count, repeat) row is written as soon as it is measured, and the run is
//! marked complete, or incomplete when Ctrl-C or a failure stopped it: what was measured stays.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use pagelab_bench::compare;
use pagelab_bench::experiments::{self, Experiment};
use pagelab_bench::host::HostInfo;
use pagelab_bench::profiles;
use pagelab_bench::results::{MAX_LABEL_CHARS, Origin, RunFilter, RunMeta, Status, quote_label};
use pagelab_bench::run::{
    Record, RunRequest, RunRow, Sizes, Target, check, parse_tasks, parse_tasks_for, render, run,
};
use pagelab_bench::store::{Store, StoreError};
use pagelab_workloads::runner::SampleSpec;
use pagelab_workloads::{ParseError, WorkloadKind};

use crate::flags::{LockStatFlag, ModesFlag, TargetFlag};

use pagelab_mm::reclaim::swap::Backing;

use crate::reproduce_cmd;
use crate::{ReproduceArgs, RunArgs, command_line, interrupt_flag, open_store, store_path};

/// The run being measured, for a second Ctrl-C: the handler marks it incomplete before it quits.
static CURRENT_RUN: Mutex<Option<(PathBuf, i64)>> = Mutex::new(None);

/// Called from the Ctrl-C handler on the second press: mark the run being measured incomplete
/// through a connection of its own (WAL lets it write beside the measuring thread's).
pub fn abandon_current_run() {
    let current = CURRENT_RUN.lock().ok().and_then(|g| g.clone());
    if let Some((path, id)) = current
        && let Ok(store) = Store::open(&path)
    {
        let _ = store.finish_run(id, Status::Incomplete);
        eprintln!(
            "pagelab: run {id} in {} keeps what was stored, marked incomplete",
            path.display()
        );
    }
}

/// A progress bar for the sweep: one message per (target, workload, tasks, mode), its samples.
fn progress_bar() -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {msg} [{bar:30}] {pos}/{len}")
            .expect("valid progress template")
            .progress_chars("=> "),
    );
    bar
}

/// Measure `req` as one stored run labelled `label`; returns the rows and the run id.
/// Open a run in the store for `req` (status: running until [`finish_recording`]).
fn begin_recording(
    store: &Store,
    req: &RunRequest,
    label: &str,
    experiment: Option<&str>,
    profile: Option<&profiles::Profile>,
) -> Result<i64, String> {
    let host = HostInfo::detect();
    let meta = RunMeta {
        label: label.to_string(),
        workload: req.workload.to_string(),
        target: match req.target {
            Target::Engine { .. } => "engine".into(),
            Target::Kernel => "kernel".into(),
        },
        origin: Origin::Measured,
        profile: profile.map(|p| p.name.clone()),
        profile_toml: profile.map(|p| p.policy.to_toml_string()),
        host_json: serde_json::to_string(&host).ok(),
        machine: None,
        experiment: experiment.map(str::to_string),
        pagelab_version: env!("CARGO_PKG_VERSION").into(),
        command: command_line(),
    };
    store.begin_run(&meta).map_err(|e| e.to_string())
}

/// Measure `req` into run `id`, each row stored as soon as it is measured.
fn record(
    store: &Store,
    id: i64,
    req: &RunRequest,
    stop: &AtomicBool,
) -> Result<Vec<RunRow>, String> {
    if let Ok(mut g) = CURRENT_RUN.lock() {
        *g = Some((store.path().to_path_buf(), id));
    }
    let bar = progress_bar();
    let mut sink = |record: Record<'_>| -> Result<(), StoreError> {
        let row = match record {
            // One transaction per sample (WAL: a commit appends a page or two to the log, well
            // under a millisecond against samples of 100 ms and more).
            Record::Samples { repeat, sets } => {
                return store.add_sample_sets(id, repeat, &sets);
            }
            Record::Row(row) => row,
        };
        let counters = row.counter_values();
        if !counters.is_empty() {
            store.add_counters(
                id,
                &row.mode.to_string(),
                row.tasks as u32,
                row.repeat,
                &counters,
            )?;
        }
        Ok(())
    };
    let result = run(
        req,
        stop,
        &mut |what, done, total| {
            bar.set_message(what.to_string());
            bar.set_length(total as u64);
            bar.set_position(done as u64);
        },
        &mut sink,
    );
    bar.finish_and_clear();
    if let Ok(mut g) = CURRENT_RUN.lock() {
        *g = None;
    }
    result.map_err(|e| e.to_string())
}

/// Close run `id`: complete, or incomplete (interrupted or failed; what was stored stays).
fn finish_recording(store: &Store, id: i64, complete: bool) -> Result<(), String> {
    let status = if complete {
        Status::Complete
    } else {
        Status::Incomplete
    };
    store.finish_run(id, status).map_err(|e| e.to_string())
}

fn measure_and_store(
    store: &Store,
    req: &RunRequest,
    label: &str,
    experiment: Option<&str>,
    profile: Option<&profiles::Profile>,
    stop: &AtomicBool,
) -> Result<(Vec<RunRow>, i64), String> {
    let id = begin_recording(store, req, label, experiment, profile)?;
    let result = record(store, id, req, stop);
    let complete = matches!(&result, Ok(rows) if !rows.iter().any(|r| r.interrupted));
    finish_recording(store, id, complete)?;
    match result {
        Ok(rows) => Ok((rows, id)),
        Err(e) => Err(format!(
            "{e} (run {id} in {} keeps what was measured, marked incomplete)",
            store.path().display()
        )),
    }
}

/// An experiment's profiles measured repetition by repetition, in turn (A1 B1 A2 B2 ...), each
/// into its own run: a shared, noisy machine drifts over minutes, and interleaving spreads the
/// drift over every profile instead of loading it onto whichever ran last.
fn measure_interleaved(
    store: &Store,
    e: &experiments::Experiment,
    reqs: &[RunRequest],
    stop: &AtomicBool,
) -> Result<Vec<i64>, String> {
    let mut ids = Vec::new();
    for (p, req) in e.profiles.iter().zip(reqs) {
        ids.push(begin_recording(
            store,
            req,
            &p.name,
            Some(&e.name),
            Some(p),
        )?);
    }
    // Every profile of an experiment runs the same number of repetitions.
    let repeats = reqs.first().map_or(1, |r| r.repeats.max(1));
    let mut outcome: Result<(), String> = Ok(());
    'all: for r in 0..repeats {
        for (i, (p, req)) in e.profiles.iter().zip(reqs).enumerate() {
            eprintln!("pagelab: {} repetition {}/{repeats}", p.name, r + 1);
            let one = RunRequest {
                repeats: 1,
                first_repeat: r,
                ..req.clone()
            };
            match record(store, ids[i], &one, stop) {
                Ok(rows) if rows.iter().any(|row| row.interrupted) => {
                    outcome = Err(format!(
                        "interrupted during {}; runs {ids:?} keep what was measured",
                        p.name
                    ));
                    break 'all;
                }
                Ok(_) => {}
                Err(err) => {
                    outcome = Err(format!(
                        "{err} (runs {ids:?} in {} keep what was measured, marked incomplete)",
                        store.path().display()
                    ));
                    break 'all;
                }
            }
        }
    }
    // Close every run before reporting any error, so none is left marked running.
    let mut closing = Ok(());
    for &id in &ids {
        if let Err(e) = finish_recording(store, id, outcome.is_ok()) {
            closing = closing.and(Err(e));
        }
    }
    outcome?;
    closing.map(|()| ids)
}

pub fn run_cmd(a: RunArgs, db: Option<&Path>) -> Result<(), String> {
    let workload: WorkloadKind = a.workload.parse().map_err(|e: ParseError| e.to_string())?;
    // The research designs' benchmarks are about one address space: threads unless asked.
    let default_mode = if workload.threads_only() {
        ModesFlag::Threads
    } else {
        ModesFlag::Processes
    };
    let modes = a.mode.unwrap_or(default_mode).modes();
    let (target, profile) = match a.target {
        TargetFlag::Engine => {
            let p = profiles::load(a.profile.as_deref().unwrap_or("linux-6.7"))
                .map_err(|e| e.to_string())?;
            (
                Target::Engine {
                    profile: p.name.clone(),
                    policy: p.policy.clone(),
                },
                Some(p),
            )
        }
        TargetFlag::Kernel if a.profile.is_some() => {
            return Err(
                "--profile applies to the engine; the kernel target runs this machine's kernel"
                    .into(),
            );
        }
        TargetFlag::Kernel => (Target::Kernel, None),
    };
    let tasks = parse_tasks_for(&a.tasks, &target).map_err(|e| e.to_string())?;
    let label = match (&a.label, &profile) {
        (Some(l), _) => check_label(l)?,
        (None, Some(p)) => p.name.clone(),
        (None, None) => format!("kernel-{}", HostInfo::detect().kernel),
    };
    let req = RunRequest {
        workload,
        target,
        tasks,
        modes,
        spec: SampleSpec {
            samples: a.samples as usize,
            warmup: a.warmup as usize,
            interval: Duration::from_millis(a.interval_ms),
        },
        sizes: Sizes {
            memsize: a.memsize,
            pft_bytes: a.size,
            kvcache: a.kvcache.params(),
            map_pages: a.map_pages,
            requests: a.requests,
        },
        repeats: a.repeats as usize,
        first_repeat: 0,
        swap: pagelab_workloads::kvcache::parse_swap(&a.kvcache.swap).map_err(|e| e.to_string())?,
        lock_stat: a.lock_stat == LockStatFlag::On,
    };
    if let Backing::File(swap) = &req.swap {
        refuse_store_as_swap(swap, &store_path(db)?)?;
    }
    check(&req).map_err(|e| e.to_string())?;
    let store = open_store(db)?;
    let stop = interrupt_flag();
    let (rows, id) = measure_and_store(&store, &req, &label, None, profile.as_ref(), &stop)?;
    print!("{}", render(&req, &rows));
    println!(
        "stored as run {id} (label {label}) in {}",
        store.path().display()
    );
    if rows.iter().any(|r| r.interrupted) {
        return Err(format!(
            "interrupted; run {id} keeps what was measured, marked incomplete"
        ));
    }
    Ok(())
}

/// `--swap` naming the results store in use (or its `-wal`, `-shm` or `-journal` file), even
/// before the store exists: refused before the store is opened, so that nothing is written.
/// [`check`] refuses every other file that is not a pagelab swap file.
fn refuse_store_as_swap(swap: &Path, store: &Path) -> Result<(), String> {
    let names_store = ["", "-wal", "-shm", "-journal"].iter().any(|suffix| {
        let mut s = store.as_os_str().to_owned();
        s.push(suffix);
        same_path(swap, Path::new(&s))
    });
    if names_store {
        return Err(format!(
            "--swap {} is the results store in use; it was left untouched; give the swap file a path that does not exist yet",
            swap.display()
        ));
    }
    Ok(())
}

/// Whether two paths name one file: by inode when both exist, else by their resolved
/// directories and names (a file not created yet has no inode).
fn same_path(a: &Path, b: &Path) -> bool {
    fn resolved(p: &Path) -> Option<PathBuf> {
        if let Ok(c) = p.canonicalize() {
            return Some(c);
        }
        let dir = match p.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        Some(dir.canonicalize().ok()?.join(p.file_name()?))
    }
    pagelab_bench::output::same_file(a, b)
        || matches!((resolved(a), resolved(b)), (Some(x), Some(y)) if x == y)
}

/// Labels are names in tables and file names in reports: printable, no surprises.
pub fn check_label(l: &str) -> Result<String, String> {
    if l.is_empty()
        || l.len() > MAX_LABEL_CHARS
        || l.chars().any(|c| c.is_control() || c.is_whitespace())
    {
        return Err(format!(
            "label {} must be 1 to {MAX_LABEL_CHARS} characters without spaces or control characters",
            quote_label(l)
        ));
    }
    Ok(l.to_string())
}

/// The request an experiment makes for one of its profiles, with command-line overrides.
fn experiment_request(
    e: &Experiment,
    p: &profiles::Profile,
    a: &ReproduceArgs,
) -> Result<RunRequest, String> {
    let d = Sizes::default();
    Ok(RunRequest {
        workload: e.workload,
        target: Target::Engine {
            profile: p.name.clone(),
            policy: p.policy.clone(),
        },
        tasks: match &a.tasks {
            Some(t) => parse_tasks(t).map_err(|e| e.to_string())?,
            None => e.tasks.clone(),
        },
        modes: e.modes.clone(),
        spec: SampleSpec {
            samples: a.samples.map_or(e.samples, |s| s as usize),
            warmup: e.warmup,
            interval: Duration::from_millis(e.interval_ms),
        },
        sizes: Sizes {
            memsize: e.memsize.unwrap_or(d.memsize),
            pft_bytes: e.size.unwrap_or(d.pft_bytes),
            kvcache: e.kvcache.unwrap_or(d.kvcache),
            ..d
        },
        repeats: a.repeats.map_or(e.repeats, |r| r as usize),
        first_repeat: 0,
        swap: Backing::Memory { compress: false },
        lock_stat: true,
    })
}

/// `pagelab reproduce`: the experiment measured here (profiles interleaved repetition by
/// repetition) and printed as compare prints it, then projected to the experiment's machine
/// (unless `--no-project`, or it names none) and the published, projected and measured numbers
/// printed side by side. Everything that can be refused is refused before the engine runs.
pub fn reproduce_cmd(a: ReproduceArgs, db: Option<&Path>) -> Result<(), String> {
    let set = experiments::set(&a.experiment);
    if set.is_empty() {
        return reproduce_one(a, db);
    }
    // A set of experiments (one per workload): each in turn, each stored and printed as alone.
    for (i, name) in set.iter().enumerate() {
        eprintln!("pagelab: {} {}/{}: {name}", a.experiment, i + 1, set.len());
        let mut one = a.clone();
        one.experiment = name.to_string();
        reproduce_one(one, db)?;
    }
    Ok(())
}

fn reproduce_one(a: ReproduceArgs, db: Option<&Path>) -> Result<(), String> {
    let e = experiments::load(&a.experiment).map_err(|e| e.to_string())?;
    let rule = a.significance.map_or(e.significance, Into::into);
    let format = a.format;
    let reqs = e
        .profiles
        .iter()
        .map(|p| experiment_request(&e, p, &a))
        .collect::<Result<Vec<_>, _>>()?;
    for r in &reqs {
        check(r).map_err(|e| e.to_string())?;
    }
    let plan = reproduce_cmd::plan(&e, &a.projection)?;
    let a_trap_from_file = a.projection.trap_from_file;
    let table = reproduce_cmd::table_of(&e)?;
    let store = open_store(db)?;
    let stop = interrupt_flag();
    eprintln!("pagelab: {} — {}", e.name, e.description);
    eprintln!("pagelab: published as: {}", e.source);
    let ids = measure_interleaved(&store, &e, &reqs, &stop)?;
    let labels: Vec<String> = e.profiles.iter().map(|p| p.name.clone()).collect();
    let c = compare::from_store(&store, &ids, &labels, rule).map_err(|e| e.to_string())?;
    // JSON is one document with both tables, printed at the end; the others print the
    // measured table now, before the projection's minute.
    let json = format == crate::results_cmd::Format::Json;
    if !json {
        print!("{}", crate::results_cmd::render(&c, format));
    }
    let (machine, no_projection, projected_ids, captures) = match &plan {
        reproduce_cmd::Plan::Project(spec) => {
            let pids =
                reproduce_cmd::project_and_store(&store, &e, spec, !a_trap_from_file, &stop)?;
            (
                Some(spec.machine.name.clone()),
                None,
                pids,
                Some(spec.captures),
            )
        }
        reproduce_cmd::Plan::Skip(why) => (None, Some(why.clone()), Vec::new(), None),
    };
    let (measured, _) = reproduce_cmd::stored_sets(&store, &ids)?;
    let (_, projected) = reproduce_cmd::stored_sets(&store, &projected_ids)?;
    let mut side = reproduce_cmd::side_by_side(
        &e,
        table,
        machine.as_deref(),
        no_projection,
        &measured,
        &projected,
        &c,
    )?;
    side.captures = captures;
    if json {
        let doc = serde_json::json!({ "measured": c, "side_by_side": side });
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?
        );
    } else {
        println!();
        print!("{}", side.render(format));
    }
    let all: Vec<i64> = ids.iter().chain(&projected_ids).copied().collect();
    let runs = store
        .runs(&RunFilter {
            ids: all,
            ..RunFilter::default()
        })
        .map_err(|e| e.to_string())?;
    eprintln!(
        "pagelab: stored as runs {} in {}; `pagelab compare --experiment {} --latest` shows them again",
        runs.iter()
            .map(|r| r.id.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        store.path().display(),
        e.name
    );
    Ok(())
}
