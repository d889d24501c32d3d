//! The projector's commands: `machines`, `calibrate`, `capture`, `trace`, `project`, `validate`.

use std::path::{Path, PathBuf};

use clap::Args;
use pagelab_bench::compare;
use pagelab_bench::experiments;
use pagelab_bench::host::HostInfo;
use pagelab_bench::output::{check_output_path, write_file};
use pagelab_bench::profiles;
use pagelab_bench::run::parse_tasks;
use pagelab_bench::stats::Significance;
use pagelab_project::capture::{CaptureSpec, capture};
use pagelab_project::machine::{self, Machine};
use pagelab_project::project::{
    DEFAULT_CAPTURES, LockStatLine, Progress, ProjectSpec, Projection, default_label, project,
    store_projection,
};
use pagelab_project::sensitivity;
use pagelab_project::trace::Trace;
use pagelab_project::validate;
use pagelab_workloads::{Mode, ParseError, WorkloadKind};

use crate::flags::ModesFlag;
use crate::measure::check_label;
use crate::results_cmd::{Format, render};
use crate::{command_line, interrupt_flag, open_store, store_path};

#[derive(Args)]
pub(crate) struct MachinesArgs {
    /// Print this machine (a shipped name or a .toml path) with every key.
    machine: Option<String>,
}

#[derive(Args)]
pub(crate) struct CalibrateArgs {
    /// The name of the description written.
    #[arg(long, default_value = "dev-host")]
    name: String,
    /// Write the description here (refused if the file exists, unless --force; the results
    /// store, any SQLite database and a directory are refused before measuring).
    #[arg(long, value_name = "PATH")]
    out: Option<PathBuf>,
    /// Overwrite --out.
    #[arg(long)]
    force: bool,
    /// Instead of measuring this host: recompute this shipped machine's `kernel.trap_ns` from
    /// a published table (with --from-table) and print the arithmetic and the keys its file
    /// holds.
    #[arg(long, conflicts_with_all = ["out", "force"])]
    machine: Option<String>,
    /// The published table to calibrate --machine against (its baseline one-task row).
    #[arg(long, value_name = "TABLE")]
    from_table: Option<String>,
}

#[derive(Args)]
pub(crate) struct CaptureArgs {
    /// page_fault1, page_fault2, page_fault3, pft, pft-vma-per-thread, lameter or kvcache.
    workload: String,
    /// The profile (a shipped name or a .toml path).
    #[arg(long, default_value = "linux-6.7")]
    profile: String,
    /// Size the engine's per-CPU structures for this machine's CPU count.
    #[arg(long, default_value = "dev-host")]
    machine: String,
    /// Where to write the trace (written whole or not at all; the results store and any SQLite
    /// database are refused before capturing).
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
}

#[derive(Args)]
pub(crate) struct TraceArgs {
    /// A trace file written by `pagelab capture`.
    file: PathBuf,
}

#[derive(Args)]
pub(crate) struct ProjectArgs {
    /// The machine: a shipped name (`pagelab machines`) or a .toml path (default with
    /// --experiment: the machine the experiment names).
    #[arg(long)]
    machine: Option<String>,
    /// Take workload, profiles and modes from this experiment (task counts default to the
    /// machine's: 1, 2, 4, ... up to its CPUs).
    #[arg(long)]
    experiment: Option<String>,
    /// Or: the workload ...
    workload: Option<String>,
    /// ... and its profiles, the baseline first (repeatable).
    #[arg(long = "profile")]
    profiles: Vec<String>,
    /// The modes to project (default: the experiment's, else both).
    #[arg(long, value_enum)]
    mode: Option<ModesFlag>,
    /// Task counts, mmtests style (1,4,16 or 1..8 or 2..64:2).
    #[arg(long)]
    tasks: Option<String>,
    /// Sample windows per row and capture of a cyclic workload (will-it-scale). A fixed-work
    /// one (pft) gives one value a capture: its repetitions are the captures.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=1000))]
    samples: u64,
    /// Captures of each profile on the engine, taken in turns and each replayed: the rows'
    /// spread, and compare's interval, hold the capture noise.
    #[arg(long, default_value_t = DEFAULT_CAPTURES as u64, value_parser = clap::value_parser!(u64).range(1..=20))]
    captures: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Fixed-work workloads (pft): faults per replayed CPU. For lameter with --experiment, the
    /// most: each CPU faults its slice of the experiment's size in the machine's pages.
    #[arg(long, default_value_t = 8192, value_parser = clap::value_parser!(u64).range(64..))]
    ops_per_cpu: u64,
    /// Store under this label instead of `<profile>@<machine>` (one profile only).
    #[arg(long)]
    label: Option<String>,
    /// The comparison table's layout.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Also print each profile's projected lock statistics: per row and lock (or line) class,
    /// acquisitions and wait per operation, the share that waited, the mean hold and the share
    /// of the run the class was held (what limits the row), as /proc/lock_stat would show
    /// them on the machine. With --format json the output is one document holding the
    /// comparison and the statistics; CSV has no layout for them.
    #[arg(long)]
    lock_stat: bool,
    /// After the projection, replay the same captures with each number of the machine file
    /// (clock, SMT gain, line transfers, atomic, bandwidths, the loaded latency's rise above
    /// idle, trap, wake-up, TLB shootdown) scaled down and up by PCT percent alone, and print
    /// how far each change between the profiles moves and whether its sign holds (text or
    /// markdown; nothing is stored).
    #[arg(long, value_name = "PCT", value_parser = clap::value_parser!(u64).range(1..=90))]
    sensitivity: Option<u64>,
}

#[derive(Args)]
pub(crate) struct ValidateArgs {
    /// Only this published table (default: all of them).
    #[arg(long)]
    table: Option<String>,
    /// Skip the self-consistency check (this host projected against the engine measured here).
    #[arg(long, conflicts_with = "self_check_only")]
    no_self_check: bool,
    /// Skip the published tables (only the self-consistency check).
    #[arg(long)]
    self_check_only: bool,
    /// Sample windows per row and capture of a cyclic table (page_fault1); a fixed-work one
    /// (pft) gives one value a capture.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=100))]
    samples: u64,
    /// Captures of each profile on the engine, taken in turns and each replayed. Two by
    /// default (`project` takes 3): validating both tables with 2 took 1 min 31 s of CPU time
    /// here, with 3 2 min 12 s, and validation should finish within 2 minutes.
    #[arg(long, default_value_t = VALIDATE_CAPTURES, value_parser = clap::value_parser!(u64).range(1..=20))]
    captures: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long, default_value_t = 8192, value_parser = clap::value_parser!(u64).range(64..))]
    ops_per_cpu: u64,
    /// Replay with the machine file's `kernel.trap_ns` instead of fitting it again on this
    /// host from the validation's own captures of the baseline (the fit `pagelab calibrate
    /// --from-table` prints; the captured compute is this host's, the file's fit another's).
    #[arg(long, conflicts_with = "self_check_only")]
    trap_from_file: bool,
    /// Also write the reports as JSON here.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// text: every table's rows and changes, then the self-check. markdown-summary: only the
    /// agreement per published comparison, as the README's table (no self-check).
    #[arg(long, value_enum, default_value_t = ValidateFormat::Text, conflicts_with = "self_check_only")]
    format: ValidateFormat,
    /// Also the held-out tables, after the others and outside their summary over all tables:
    /// results nothing of pagelab is fitted to (data/published/README.md). `--table NAME`
    /// runs one of them alone.
    #[arg(long, conflicts_with_all = ["self_check_only", "table"])]
    held_out: bool,
    /// After each table, replay its captures again with each number of its machine scaled
    /// down and up by PCT percent alone (the trap fitted again for each variant, unless
    /// --trap-from-file), and show, per published change, its lowest and highest projection and
    /// the variants that give it the published sign: whether an estimate in the machine file
    /// could account for an error. About 24 replays of each table (minutes); best with
    /// --table.
    #[arg(long, value_name = "PCT", value_parser = clap::value_parser!(u64).range(1..=90), conflicts_with = "self_check_only")]
    sensitivity: Option<u64>,
}

/// What `validate` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ValidateFormat {
    Text,
    /// The README's agreement table: one row per shipped experiment.
    MarkdownSummary,
}

/// `validate`'s default number of captures per profile.
const VALIDATE_CAPTURES: u64 = 2;

pub(crate) fn machines_cmd(a: MachinesArgs) -> Result<(), String> {
    match a.machine {
        None => {
            for (name, _) in machine::BUILTIN {
                let m = Machine::load(name).map_err(|e| e.to_string())?;
                println!("{name:<24} {:>4} CPUs  {}", m.nr_cpus(), m.description);
            }
        }
        Some(n) => print!(
            "{}",
            Machine::load(&n).map_err(|e| e.to_string())?.to_toml()
        ),
    }
    Ok(())
}

/// The store in use, for refusing it as an output file (`None` when there is no default path,
/// in which case only databases in general are refused).
fn store_in_use(db: Option<&Path>) -> Option<PathBuf> {
    store_path(db).ok()
}

/// Refuses `out` before any work: the store in use, any SQLite database, a directory.
fn check_out(out: &Path, db: Option<&Path>) -> Result<(), String> {
    check_output_path(out, store_in_use(db).as_deref()).map_err(|e| e.to_string())
}

/// `pagelab calibrate --machine M --from-table T`: the trap fit, redone here and printed.
fn calibrate_from_table(machine: &str, table: &str) -> Result<(), String> {
    let t = validate::published(table).map_err(|e| e.to_string())?;
    if t.held_out {
        return Err(format!(
            "--from-table {table} is held out: nothing is fitted to it (data/published/README.md); calibrate from a table that is not"
        ));
    }
    if t.machine != machine {
        return Err(format!(
            "--from-table {table} was measured on {}, not on --machine {machine}",
            t.machine
        ));
    }
    Machine::load(machine).map_err(|e| e.to_string())?;
    let stop = interrupt_flag();
    let what = format!("calibrate {machine}");
    let replayed = pagelab_project::calibrate::replay_untrapped_ns(
        t,
        3,
        1,
        8192,
        &mut progress_printer(&what),
        &stop,
    )
    .map_err(|e| e.to_string())?;
    let fit = pagelab_project::calibrate::trap_fit(t, replayed).map_err(|e| e.to_string())?;
    let host = HostInfo::detect();
    let date = pagelab_bench::store::now_rfc3339()[..10].to_string();
    print!("{}", fit.render(&host.cpu_model, &date));
    Ok(())
}

pub(crate) fn calibrate_cmd(a: CalibrateArgs, db: Option<&Path>) -> Result<(), String> {
    match (&a.machine, &a.from_table) {
        (Some(m), Some(t)) => return calibrate_from_table(m, t),
        (Some(_), None) => {
            return Err("--machine needs --from-table: the published table to fit it to".into());
        }
        (None, Some(_)) => {
            return Err("--from-table needs --machine: the table's machine".into());
        }
        (None, None) => {}
    }
    // Everything that can be refused is refused before a minute of measuring.
    machine::check_name(&a.name).map_err(|e| format!("--name: {e}"))?;
    if let Some(out) = &a.out {
        check_out(out, db)?;
        if out.exists() && !a.force {
            return Err(format!(
                "{} exists; give --force to overwrite it",
                out.display()
            ));
        }
    }
    if machine::BUILTIN.iter().any(|(n, _)| *n == a.name) {
        eprintln!(
            "pagelab: note: `{}` is a shipped machine's name; a file of that name loads only while it is identical to machines/{}.toml (give --name for a machine of your own)",
            a.name, a.name
        );
    }
    let (m, notes) = pagelab_project::calibrate::measure_host(&a.name, &mut |what| {
        eprintln!("pagelab: measuring {what}")
    })
    .map_err(|e| e.to_string())?;
    let text = format!(
        "# Measured by `pagelab calibrate --name {}` on {} ({}), {}.\n{}",
        a.name,
        HostInfo::detect().hostname,
        m.cpu.model,
        &pagelab_bench::store::now_rfc3339()[..10],
        pagelab_project::calibrate::annotate(&m, &notes)
    );
    match a.out {
        Some(out) => write_file(&out, store_in_use(db).as_deref(), text.as_bytes())
            .map_err(|e| e.to_string())?,
        None => print!("{text}"),
    }
    Ok(())
}

fn projectable(w: &str) -> Result<WorkloadKind, String> {
    let w: WorkloadKind = w.parse().map_err(|e: ParseError| e.to_string())?;
    pagelab_project::capture::shape(w).map_err(|e| e.to_string())?;
    Ok(w)
}

pub(crate) fn capture_cmd(a: CaptureArgs, db: Option<&Path>) -> Result<(), String> {
    let w = projectable(&a.workload)?;
    let p = profiles::load(&a.profile).map_err(|e| e.to_string())?;
    let m = Machine::load(&a.machine).map_err(|e| e.to_string())?;
    if let Some(dir) = a.out.parent()
        && !dir.as_os_str().is_empty()
        && !dir.is_dir()
    {
        return Err(format!("{}: no such directory", dir.display()));
    }
    check_out(&a.out, db)?;
    eprintln!(
        "pagelab: capturing {w} with {} ({} virtual CPUs, as {})",
        p.name,
        m.nr_cpus(),
        m.name
    );
    let t = capture(&CaptureSpec::for_machine(w, p, &m)).map_err(|e| e.to_string())?;
    write_file(&a.out, store_in_use(db).as_deref(), &t.encode()).map_err(|e| e.to_string())?;
    let size = std::fs::metadata(&a.out).map_or(0, |m| m.len());
    print!("{}", t.summary());
    println!(
        "wrote {} ({} bytes, {:.1} bytes per {})",
        a.out.display(),
        size,
        size as f64 / t.meta.ops.max(1) as f64,
        t.meta.op_unit.trim_end_matches('s')
    );
    Ok(())
}

pub(crate) fn trace_cmd(a: TraceArgs) -> Result<(), String> {
    let t = Trace::load(&a.file).map_err(|e| e.to_string())?;
    print!("{}", t.summary());
    Ok(())
}

/// Task counts for a machine when none are given: powers of two up to its CPUs, and its CPUs.
fn machine_tasks(m: &Machine) -> Vec<usize> {
    let mut v: Vec<usize> = std::iter::successors(Some(1usize), |x| Some(x * 2))
        .take_while(|&x| x <= m.nr_cpus())
        .collect();
    if v.last() != Some(&m.nr_cpus()) {
        v.push(m.nr_cpus());
    }
    v
}

fn progress_printer(total_label: &str) -> impl FnMut(Progress<'_>) + '_ {
    move |p| match p {
        Progress::Capturing {
            profile,
            round,
            rounds,
        } => eprintln!(
            "pagelab: {total_label}: capturing a trace of {profile} on the engine ({round}/{rounds})"
        ),
        Progress::Pacing {
            profiles,
            round,
            rounds,
        } => eprintln!(
            "pagelab: {total_label}: timing the {profiles} profiles side by side ({round}/{rounds})"
        ),
        Progress::Replayed { done, total } => {
            eprintln!("pagelab: {total_label}: replayed {done}/{total} rows")
        }
        Progress::Variant {
            done,
            total,
            param,
            factor,
        } => eprintln!(
            "pagelab: {total_label}: sensitivity, replayed {done}/{total} variants ({param} x{factor:.2})"
        ),
    }
}

pub(crate) fn project_cmd(a: ProjectArgs, db: Option<&Path>) -> Result<(), String> {
    let machine = match (&a.machine, &a.experiment) {
        (Some(m), _) => m.clone(),
        (None, Some(e)) => experiments::load(e)
            .map_err(|e| e.to_string())?
            .machine
            .ok_or_else(|| format!("--machine is needed: experiment {e} names no machine"))?,
        (None, None) => return Err("--machine is needed: the machine to project to".into()),
    };
    let m = Machine::load(&machine).map_err(|e| e.to_string())?;
    let format = a.format;
    if a.lock_stat && format == Format::Csv {
        return Err("--lock-stat has no CSV layout: use --format text, markdown or json".into());
    }
    if a.sensitivity.is_some() && matches!(format, Format::Json | Format::Csv) {
        return Err(
            "--sensitivity has no JSON or CSV layout: use --format text or markdown".into(),
        );
    }
    // Lameter's test faults one region per repetition, split between the threads: each
    // replayed CPU faults its slice of the experiment's size, in the machine's pages.
    let mut region_bytes = None;
    // kvcache's shape, from the experiment's `[kvcache]` table.
    let mut kvcache = None;
    let (workload, profs, modes, experiment, rule) = match (&a.experiment, &a.workload) {
        (Some(_), Some(_)) => {
            return Err("give an experiment or a workload with profiles, not both".into());
        }
        (Some(e), None) => {
            if !a.profiles.is_empty() {
                return Err("--profile does not go with --experiment (it names its own)".into());
            }
            let e = experiments::load(e).map_err(|e| e.to_string())?;
            if e.workload == WorkloadKind::Lameter {
                region_bytes = e.size;
            }
            kvcache = e.kvcache;
            (
                e.workload,
                e.profiles.clone(),
                e.modes.clone(),
                Some(e.name.clone()),
                e.significance,
            )
        }
        (None, Some(w)) => {
            let w: WorkloadKind = w.parse().map_err(|e: ParseError| e.to_string())?;
            let names = if a.profiles.is_empty() {
                vec!["linux-6.7".to_string()]
            } else {
                a.profiles.clone()
            };
            let profs = names
                .iter()
                .map(|n| profiles::load(n))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.to_string())?;
            let modes = match pagelab_project::capture::shape(w)
                .map_err(|e| e.to_string())?
                .0
            {
                // memcached is one process: its workers are threads.
                _ if w == WorkloadKind::Kvcache => vec![Mode::Threads],
                pagelab_project::trace::Window::Cycle => vec![Mode::Processes, Mode::Threads],
                pagelab_project::trace::Window::Once => vec![Mode::Threads],
            };
            (w, profs, modes, None, Significance::Interval)
        }
        (None, None) => {
            return Err("nothing to project: give --experiment NAME or a workload".into());
        }
    };
    let modes = match &a.mode {
        Some(s) => s.modes(),
        None => modes,
    };
    let tasks = match &a.tasks {
        Some(t) => parse_tasks(t).map_err(|e| e.to_string())?,
        None => machine_tasks(&m),
    };
    if a.sensitivity.is_some() && profs.len() < 2 {
        return Err(
            "--sensitivity moves the changes between profiles: give at least two profiles".into(),
        );
    }
    if a.label.is_some() && profs.len() > 1 {
        return Err(
            "--label names one run; with several profiles each is stored as <profile>@<machine>"
                .into(),
        );
    }
    if let Some(l) = &a.label {
        check_label(l)?;
    }
    let spec = ProjectSpec {
        machine: m.clone(),
        workload,
        profiles: profs,
        modes,
        tasks,
        samples: a.samples as usize,
        captures: a.captures as usize,
        seed: a.seed,
        ops_per_cpu: a.ops_per_cpu,
        region_bytes,
        kvcache,
    };
    spec.check().map_err(|e| e.to_string())?;
    // Open the store first: a store that cannot be written fails before minutes of work.
    let store = open_store(db)?;
    eprintln!("pagelab: {}", m.trap_source(&machine));
    let stop = interrupt_flag();
    let what = format!("{workload} on {}", m.name);
    let (proj, interrupted) =
        project(&spec, &mut progress_printer(&what), &stop).map_err(|e| e.to_string())?;
    let host = serde_json::to_string(&HostInfo::detect()).ok();
    let mut labels = Vec::new();
    let mut ids = Vec::new();
    for p in &proj {
        let label = a
            .label
            .clone()
            .unwrap_or_else(|| default_label(&p.profile.name, &m.name));
        let id = store_projection(
            &store,
            p,
            &label,
            &m,
            experiment.as_deref(),
            &command_line(),
            host.clone(),
            !interrupted,
        )
        .map_err(|e| e.to_string())?;
        eprintln!(
            "pagelab: stored run {id} as `{label}` (projected, {} rows x {} captures, {:.1} M simulated events in {:.1} s)",
            p.rows.len(),
            p.traces.len(),
            p.rows.iter().map(|r| r.events()).sum::<u64>() as f64 / 1e6,
            p.rows.iter().map(|r| r.seconds()).sum::<f64>()
        );
        for (c, t) in p.traces.iter().enumerate() {
            if let Some(g) = &t.meta.guard {
                // A netpipe projection captures one pair per send size: name the size.
                let which = if t.receiver_turns().is_some() {
                    pagelab_project::netpipe::metric_of(t)
                } else {
                    format!("capture {}", c + 1)
                };
                eprintln!("pagelab: {which} of {}: {}", p.profile.name, g.describe());
            }
        }
        labels.push(label);
        ids.push(id);
    }
    if interrupted {
        return Err(if proj.is_empty() {
            "interrupted while capturing; nothing was stored".into()
        } else {
            "interrupted; what was projected is stored, marked incomplete".into()
        });
    }
    let c = compare::from_store(&store, &ids, &labels, rule).map_err(|e| e.to_string())?;
    if a.lock_stat && format == Format::Json {
        // One document: the comparison as `--format json` prints it, and the statistics.
        let comparison: serde_json::Value =
            serde_json::from_str(&c.render_json()).map_err(|e| e.to_string())?;
        let doc = serde_json::json!({
            "comparison": comparison,
            "lock_stat": lock_stat_json(&proj, &labels),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?
        );
        return Ok(());
    }
    print!("{}", render(&c, format));
    // JSON and CSV are documents a program reads: nothing may follow them.
    if matches!(format, Format::Json | Format::Csv) {
        return Ok(());
    }
    if a.lock_stat {
        for (p, label) in proj.iter().zip(&labels) {
            print!("{}", render_lock_stat(p, label, format));
        }
    }
    for p in &proj {
        let top = p
            .rows
            .iter()
            .filter_map(|r| r.captures.first())
            .filter_map(|r| {
                r.classes
                    .iter()
                    .filter(|c| c.wait_ns > 0.0)
                    .max_by(|a, b| a.wait_ns.total_cmp(&b.wait_ns))
                    .map(|c| (r, c))
            })
            .filter(|(r, _)| r.tasks == *spec.tasks.iter().max().unwrap_or(&1))
            .map(|(r, c)| format!("{} {}: {}", r.mode, r.tasks, c.name))
            .collect::<Vec<_>>();
        if !top.is_empty() {
            println!(
                "most waited-for lock, {} at the largest task count: {}",
                p.profile.name,
                top.join("; ")
            );
        }
    }
    if let Some(pct) = a.sensitivity {
        let f = pct as f64 / 100.0;
        let traces: Vec<Vec<_>> = proj.iter().map(|p| p.traces.clone()).collect();
        let s = sensitivity::sensitivity(
            &spec,
            &traces,
            &proj,
            &sensitivity::Param::ALL,
            &[1.0 - f, 1.0 + f],
            &mut |v| match v.error {
                None => eprintln!(
                    "pagelab: sensitivity: replayed {}/{} variants ({} x{:.2})",
                    v.done,
                    v.total,
                    v.param.key(),
                    v.factor
                ),
                Some(e) => eprintln!(
                    "pagelab: sensitivity: variant {}/{} ({} x{:.2}) not replayed: {e}",
                    v.done,
                    v.total,
                    v.param.key(),
                    v.factor
                ),
            },
            &stop,
        )
        .map_err(|e| e.to_string())?;
        print!("{}", sensitivity::render(&s, format == Format::Markdown));
        if s.interrupted {
            return Err(
                "interrupted during the sensitivity replays; the projection is stored".into(),
            );
        }
    }
    Ok(())
}

/// The lines of a row's projected lock statistics worth a reader's eye: classes that waited,
/// were held or moved lines, or were taken at least once per thousand operations.
fn shown(l: &LockStatLine) -> bool {
    l.wait_ns_per_op > 0.0
        || l.held >= 1e-3
        || l.line_ns_per_op > 0.0
        || l.acquisitions_per_op >= 1e-3
}

/// `project --lock-stat` as text (aligned columns) or markdown: per row, its classes.
fn render_lock_stat(p: &Projection, label: &str, format: Format) -> String {
    use std::fmt::Write as _;
    const HEAD: [&str; 9] = [
        "mode",
        "tasks",
        "class",
        "acq/op",
        "contended",
        "wait ns/op",
        "hold ns",
        "held",
        "lines ns/op",
    ];
    let mut rows: Vec<[String; 9]> = Vec::new();
    for r in &p.rows {
        for l in r.lock_stat().iter().filter(|l| shown(l)) {
            rows.push([
                r.mode.to_string(),
                r.tasks.to_string(),
                l.class.clone(),
                format!("{:.4}", l.acquisitions_per_op),
                format!("{:.1}%", l.contended * 100.0),
                format!("{:.1}", l.wait_ns_per_op),
                l.hold_ns.map_or("-".into(), |h| format!("{h:.1}")),
                format!("{:.3}", l.held),
                format!("{:.1}", l.line_ns_per_op),
            ]);
        }
    }
    let mut out = String::new();
    let captures = p.traces.len();
    let intro = format!(
        "projected lock statistics of {label}, per operation, the {captures} capture(s) merged; \
         held: the class's hold time over the run, summed over its instances (a class with one \
         instance per node limits the row as it nears the nodes in use)"
    );
    if format == Format::Markdown {
        let _ = writeln!(out, "\n{intro}\n");
        let _ = writeln!(out, "| {} |", HEAD.join(" | "));
        let _ = writeln!(
            out,
            "|{}",
            HEAD.iter()
                .enumerate()
                .map(|(i, _)| if i < 3 { "---|" } else { "---:|" })
                .collect::<String>()
        );
        for r in &rows {
            let _ = writeln!(out, "| {} |", r.join(" | "));
        }
        return out;
    }
    let widths: Vec<usize> = (0..HEAD.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].len())
                .chain([HEAD[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &[&str]| {
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i < 3 {
                    format!("{c:<w$}", w = widths[i])
                } else {
                    format!("{c:>w$}", w = widths[i])
                }
            })
            .collect::<Vec<_>>()
            .join("  ")
    };
    let _ = writeln!(out, "\n{intro}");
    let _ = writeln!(out, "{}", line(&HEAD));
    for r in &rows {
        let cells: Vec<&str> = r.iter().map(String::as_str).collect();
        let _ = writeln!(out, "{}", line(&cells));
    }
    out
}

/// `project --lock-stat --format json`'s statistics: per label, per row, every class.
fn lock_stat_json(proj: &[Projection], labels: &[String]) -> serde_json::Value {
    proj.iter()
        .zip(labels)
        .map(|(p, label)| {
            serde_json::json!({
                "label": label,
                "captures": p.traces.len(),
                "rows": p.rows.iter().map(|r| serde_json::json!({
                    "mode": r.mode.to_string(),
                    "tasks": r.tasks,
                    "classes": r.lock_stat(),
                })).collect::<Vec<_>>(),
            })
        })
        .collect()
}

/// The tables `validate` runs, in order, and the held-out ones it leaves out: `table` alone when
/// named; otherwise every calibration table, then the held-out ones with `held_out`.
fn tables_to_validate(
    table: Option<&str>,
    held_out: bool,
) -> Result<(Vec<&'static validate::Published>, Vec<&'static str>), String> {
    if let Some(t) = table {
        return Ok((
            vec![validate::published(t).map_err(|e| e.to_string())?],
            Vec::new(),
        ));
    }
    let (held, mut run): (Vec<_>, Vec<_>) = validate::BUILTIN.iter().partition(|t| t.held_out);
    if held_out {
        run.extend(held);
        return Ok((run, Vec::new()));
    }
    Ok((run, held.iter().map(|t| t.name).collect()))
}

pub(crate) fn validate_cmd(a: ValidateArgs, db: Option<&Path>) -> Result<(), String> {
    if let Some(p) = &a.json {
        check_out(p, db)?;
    }
    let stop = interrupt_flag();
    let mut json = serde_json::Map::new();
    let summary_only = a.format == ValidateFormat::MarkdownSummary;
    if summary_only && a.sensitivity.is_some() {
        return Err(
            "--sensitivity shows each change's variants, which the markdown summary has no room for: use --format text".into(),
        );
    }
    let mut reports = Vec::new();
    if !a.self_check_only {
        let (tables, skipped) = tables_to_validate(a.table.as_deref(), a.held_out)?;
        let (mut all_changes, mut all_rows) = (Vec::new(), Vec::new());
        for t in tables {
            let what = format!("validate {}", t.name);
            let r = validate::validate_table(
                t,
                a.samples as usize,
                a.captures as usize,
                a.seed,
                a.ops_per_cpu,
                !a.trap_from_file,
                a.sensitivity.map(|p| p as f64 / 100.0),
                &mut progress_printer(&what),
                &stop,
            )
            .map_err(|e| e.to_string())?;
            if !summary_only {
                print!("{}", r.render());
                println!(
                    "replay: {:.1} M simulated events in {:.1} s ({:.1} M events/s)\n",
                    r.events as f64 / 1e6,
                    r.replay_seconds,
                    r.events as f64 / 1e6 / r.replay_seconds.max(1e-9)
                );
            }
            if !t.held_out {
                all_changes.extend(r.changes.iter().cloned());
                all_rows.extend(r.rows.iter().cloned());
            }
            json.insert(
                t.name.to_string(),
                serde_json::to_value(&r).map_err(|e| e.to_string())?,
            );
            reports.push(r);
        }
        if summary_only {
            let how = format!(
                "--samples {} --captures {} --ops-per-cpu {} --seed {}{}{}",
                a.samples,
                a.captures,
                a.ops_per_cpu,
                a.seed,
                if a.trap_from_file {
                    " --trap-from-file"
                } else {
                    ""
                },
                if a.held_out { " --held-out" } else { "" }
            );
            print!("{}", agreement_table(&reports, &how)?);
        } else if !all_changes.is_empty() {
            // The overall figures: every table's changes and rows together.
            let s = validate::Summaries::of(&all_rows, &all_changes);
            println!("{}", s.render("all tables"));
            if !skipped.is_empty() {
                println!(
                    "held-out tables, not run (`--held-out` runs them after these, `--table NAME` alone; nothing is fitted to them): {}\n",
                    skipped.join(", ")
                );
            }
            json.insert(
                "all-tables".into(),
                serde_json::to_value(&s).map_err(|e| e.to_string())?,
            );
        }
    }
    if !a.no_self_check && !summary_only {
        let r = validate::self_check(
            a.seed,
            &mut |w| eprintln!("pagelab: self-check: {w}"),
            &stop,
        )
        .map_err(|e| e.to_string())?;
        print!("{}", r.render());
        json.insert(
            "self-check".into(),
            serde_json::to_value(&r).map_err(|e| e.to_string())?,
        );
    }
    if let Some(p) = a.json {
        let text = serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?;
        write_file(&p, store_in_use(db).as_deref(), text.as_bytes()).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The first line of the README's agreement table, which its test finds the table by.
pub(crate) const AGREEMENT_HEADER: &str = "| published comparison | experiment | machine | table | changes beyond the noise: published sign | within 10 points | median error (points) | changes within the noise: published sign | median row error |";

/// The README's agreement table: one row per shipped experiment, in the order they ship, with
/// the validation of its published table when one ships (`reports`, from `validate_table`), and
/// the settings it was made with (`how`, as `validate`'s flags). Experiments without a table
/// are listed too, saying so: the table says which comparisons pagelab can check at all.
pub(crate) fn agreement_table(
    reports: &[validate::TableReport],
    how: &str,
) -> Result<String, String> {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(s, "{AGREEMENT_HEADER}");
    let _ = writeln!(s, "|---|---|---|---|---:|---:|---:|---:|---:|");
    let frac = |k: usize, n: usize| {
        if n == 0 {
            "-".to_string()
        } else {
            format!("{k} of {n}")
        }
    };
    let num = |v: Option<f64>, unit: &str| v.map_or("-".to_string(), |v| format!("{v:.1}{unit}"));
    for (name, _) in experiments::BUILTIN {
        // A set's members compare no published table; the set has its own table (README,
        // "Beyond Linux").
        if experiments::set_of(name).is_some() {
            continue;
        }
        let e = experiments::load(name).map_err(|e| e.to_string())?;
        let machine = e.machine.as_deref().unwrap_or("-");
        let report = reports.iter().find(|r| r.experiment == e.name);
        let held_out = e
            .published
            .as_deref()
            .and_then(|t| validate::published(t).ok())
            .is_some_and(|t| t.held_out);
        let label = |t: &str| {
            if held_out {
                format!("{t} (held out)")
            } else {
                t.to_string()
            }
        };
        let cells = match (&e.published, report) {
            (Some(t), Some(r)) => {
                let t = label(t);
                let (b, w) = (&r.summary.beyond_noise, &r.summary.within_noise);
                format!(
                    "{t} | {} | {} | {} | {} | {} |",
                    frac(b.right_sign, b.changes),
                    frac(b.within_10_points, b.changes),
                    num(b.median_error_points, ""),
                    frac(w.right_sign, w.changes),
                    num(r.summary.median_row_error_pct, "%"),
                )
            }
            (Some(t), None) => {
                format!("{} | not validated in this run | - | - | - | - |", label(t))
            }
            (None, _) => "none ships | - | - | - | - | - |".to_string(),
        };
        let _ = writeln!(
            s,
            "| {} | {} | {machine} | {cells}",
            e.source.replace('|', "/"),
            e.name
        );
    }
    let _ = writeln!(
        s,
        "\nGenerated by `pagelab validate --format markdown-summary` ({how}); pagelab {}.",
        env!("CARGO_PKG_VERSION")
    );
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The held-out tables run only when asked for (`--held-out`, after the calibration
    /// tables, or `--table NAME` alone), and a default run names the ones it left out.
    #[test]
    fn held_out_tables_run_only_when_asked_for() {
        let names = |v: &[&validate::Published]| v.iter().map(|t| t.name).collect::<Vec<_>>();
        let (run, skipped) = tables_to_validate(None, false).unwrap();
        assert_eq!(names(&run), ["page_fault1-2018", "pft-single-vma-2023"]);
        assert_eq!(skipped, ["page_fault2-gnr-2025", "page_fault2-skl-2024"]);
        let (run, skipped) = tables_to_validate(None, true).unwrap();
        assert_eq!(
            names(&run),
            [
                "page_fault1-2018",
                "pft-single-vma-2023",
                "page_fault2-gnr-2025",
                "page_fault2-skl-2024"
            ]
        );
        assert!(skipped.is_empty());
        let (run, skipped) = tables_to_validate(Some("page_fault2-gnr-2025"), false).unwrap();
        assert_eq!(names(&run), ["page_fault2-gnr-2025"]);
        assert!(skipped.is_empty());
        assert!(tables_to_validate(Some("nope"), false).is_err());
    }
}
