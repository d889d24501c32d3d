//! The `pagelab` command: a thin layer over the engine and harness libraries. Every error is
//! one line on stderr and a non-zero exit status.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand};
use pagelab_bench::host::HostInfo;
use pagelab_bench::micro::alloc::{AllocBenchConfig, run as run_alloc_bench};
use pagelab_bench::profiles;
use pagelab_bench::store::Store;

mod flags;
mod measure;
mod project_cmd;
mod report_cmd;
mod reproduce_cmd;
mod results_cmd;

/// A laboratory for Linux memory-management scalability: the kernel's page allocator, fault and
/// reclaim paths re-implemented in userspace, with every scalability technique a policy switch.
#[derive(Parser)]
#[command(
    name = "pagelab",
    version,
    about,
    long_about = None,
    after_help = "Documentation: docs/user-guide.md (measure, import, compare, write a profile, \
reproduce, project), docs/model.md (the projector's assumptions and validation), \
docs/contributor-guide.md (add a switch, a workload, a machine; the testing discipline)."
)]
struct Cli {
    /// The results store (SQLite). Default: $PAGELAB_DB, else the user's data directory
    /// (~/.local/share/pagelab/results.db).
    #[arg(long, global = true, value_name = "PATH")]
    db: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the host facts a benchmark report needs (CPU, cores, kernel, memory, THP mode).
    Info(InfoArgs),
    /// Micro-benchmarks of single engine mechanisms, policies measured side by side.
    #[command(subcommand)]
    Micro(Micro),
    /// List the shipped profiles, print one as TOML, or show what differs between two.
    Profiles(ProfilesArgs),
    /// Run a workload on the engine (with a profile) or on the host kernel, over task counts,
    /// and store every sample.
    Run(RunArgs),
    /// Run a published comparison (experiments/*.toml) here, project it to its machine, and
    /// print the published, projected and measured numbers side by side.
    Reproduce(ReproduceArgs),
    /// List the shipped experiments (seed, machine, what ships), or show one.
    Experiments(ExperimentsArgs),
    /// Compare stored results mmtests-style: the first label is the baseline.
    Compare(CompareArgs),
    /// List stored runs (filtered), or delete them; a run whose process died shows as abandoned.
    Runs(RunsArgs),
    /// Write stored samples as CSV or JSON.
    Export(ExportArgs),
    /// Store results produced by the real tools (will-it-scale, pft), a plain CSV of samples, or
    /// an mmtests run directory's wis and pft results.
    Import(ImportArgs),
    /// Plot stored results (SVG or PNG): a metric against the task count per label, or each
    /// label's percent change against the baseline; LABEL may be an experiment.
    Plot(report_cmd::PlotArgs),
    /// Write a self-contained HTML report of stored results: hosts, profiles, comparison
    /// tables, plots, engine counters, projections; LABEL may be an experiment.
    Report(report_cmd::ReportArgs),
    /// List the shipped machine descriptions, or print one.
    Machines(project_cmd::MachinesArgs),
    /// Measure this host and write its machine description.
    Calibrate(project_cmd::CalibrateArgs),
    /// Capture a trace: one task on the engine, its shared-resource events and compute.
    Capture(project_cmd::CaptureArgs),
    /// Summarise a trace file.
    Trace(project_cmd::TraceArgs),
    /// Project a workload's profiles to a machine description and store the rows (projected).
    Project(project_cmd::ProjectArgs),
    /// Project every experiment with a published table and compare; check this host against the
    /// engine measured here.
    Validate(project_cmd::ValidateArgs),
}

#[derive(Args, Clone)]
pub(crate) struct ReproduceArgs {
    /// A shipped experiment name (see `pagelab experiments`) or a path to a .toml file; or the
    /// name of a set of shipped experiments (`beyond-linux`: every `beyond-linux-*`), run one
    /// after the other.
    pub(crate) experiment: String,
    /// Override the experiment's samples (repetitions for pft and lameter).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub(crate) samples: Option<u64>,
    /// Override the experiment's repeats.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub(crate) repeats: Option<u64>,
    /// Override the experiment's task counts (mmtests style: 1,2,4 or 1..8 or 2..16:2).
    #[arg(long)]
    pub(crate) tasks: Option<String>,
    /// Significance rule; default: the experiment's.
    #[arg(long, value_enum)]
    pub(crate) significance: Option<flags::SignificanceFlag>,
    /// The comparison table's layout.
    #[arg(long, value_enum, default_value_t = results_cmd::Format::Text)]
    pub(crate) format: results_cmd::Format,
    #[command(flatten)]
    pub(crate) projection: reproduce_cmd::ProjectionArgs,
}

#[derive(Args)]
struct ExperimentsArgs {
    /// Show this experiment in full.
    experiment: Option<String>,
}

#[derive(Args)]
pub(crate) struct CompareArgs {
    #[command(flatten)]
    pub(crate) select: results_cmd::CompareSelect,
    /// The output's layout.
    #[arg(long, value_enum, default_value_t = results_cmd::CompareFormat::Text)]
    pub(crate) format: results_cmd::CompareFormat,
}

/// Which stored runs a command works on; every filter narrows the selection.
#[derive(Args)]
pub(crate) struct RunSelect {
    /// Only this run id (repeatable).
    #[arg(long = "id", value_name = "ID")]
    pub(crate) ids: Vec<i64>,
    /// Only this label (repeatable).
    #[arg(long)]
    pub(crate) label: Vec<String>,
    #[arg(long)]
    pub(crate) workload: Option<String>,
    /// Only runs of this origin.
    #[arg(long, value_enum)]
    pub(crate) origin: Option<flags::OriginFlag>,
    /// Only runs of this status.
    #[arg(long, value_enum)]
    pub(crate) status: Option<flags::StatusFlag>,
    #[arg(long)]
    pub(crate) experiment: Option<String>,
}

#[derive(Args)]
pub(crate) struct RunsArgs {
    #[command(flatten)]
    pub(crate) select: RunSelect,
    /// Print as JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// Delete the selected runs (a filter is required, or --all).
    #[arg(long)]
    pub(crate) delete: bool,
    /// With --delete: every run in the store.
    #[arg(long, requires = "delete")]
    pub(crate) all: bool,
    /// With --delete: also delete runs marked running by a process on another host or in
    /// another pid namespace, which cannot be checked from here (a store moved between
    /// machines). A run whose process is alive on this host is never deleted.
    #[arg(long, requires = "delete")]
    pub(crate) elsewhere: bool,
}

#[derive(Args)]
pub(crate) struct ExportArgs {
    #[command(flatten)]
    pub(crate) select: RunSelect,
    /// The samples' layout.
    #[arg(long, value_enum, default_value_t = results_cmd::ExportFormat::Csv)]
    pub(crate) format: results_cmd::ExportFormat,
    /// Write to this file instead of standard output.
    #[arg(long, value_name = "FILE")]
    pub(crate) out: Option<PathBuf>,
}

#[derive(Args)]
pub(crate) struct ImportArgs {
    /// The file: will-it-scale output or runtest CSV, pft output, or a CSV of samples. At most
    /// 256 MiB is read (an endless stream such as /dev/zero is refused); a last data line
    /// without a newline is taken as a cut file and refused. Or a directory: an mmtests run
    /// (work/log/<run name>), whose wis and pft results are imported, one run per workload.
    pub(crate) file: PathBuf,
    /// The label its samples get (a comparison column). Required for a file; for an mmtests
    /// directory the default is the directory's name (the run name, usually the kernel's).
    #[arg(long)]
    pub(crate) label: Option<String>,
    /// The tool whose output the file is (default: recognised from the content).
    #[arg(long, value_enum)]
    pub(crate) format: Option<flags::ImportFormatFlag>,
    /// Workload name, where the file does not say.
    #[arg(long)]
    pub(crate) workload: Option<String>,
    /// The mode, where the file does not say.
    #[arg(long, value_enum)]
    pub(crate) mode: Option<flags::ModeFlag>,
    /// Task count, where the file does not say.
    #[arg(long)]
    pub(crate) tasks: Option<u32>,
    /// will-it-scale output without a measurement marker: per-second lines to skip.
    #[arg(long, default_value_t = 0)]
    pub(crate) warmup: usize,
    /// Free text describing the machine the results come from.
    #[arg(long)]
    pub(crate) machine: Option<String>,
}

#[derive(Args)]
pub(crate) struct RunArgs {
    /// page_fault1, page_fault2, page_fault3, pft, pft-vma-per-thread, lameter, netpipe,
    /// kvcache, mapbench, mapbench-shared, cortenmm-mmap, cortenmm-mmap-pf,
    /// cortenmm-mmap-high, cortenmm-mmap-pf-high, cortenmm-pf-low, cortenmm-pf-high,
    /// cortenmm-munmap-low or cortenmm-munmap-high.
    pub(crate) workload: String,
    /// What runs the workload.
    #[arg(long, value_enum, default_value_t = flags::TargetFlag::Engine)]
    pub(crate) target: flags::TargetFlag,
    /// Profile for the engine (default linux-6.7): a shipped name or a path to a .toml file.
    #[arg(long)]
    pub(crate) profile: Option<String>,
    /// Task counts, mmtests style: 1,2,4 or 1..8 or 2..16:2.
    #[arg(long, default_value = "1,2")]
    pub(crate) tasks: String,
    /// The modes to measure (default: processes; threads for mapbench-shared and the cortenmm
    /// tests, which have no processes mode).
    #[arg(long, value_enum)]
    pub(crate) mode: Option<flags::ModesFlag>,
    /// Samples kept per task count (repetitions for pft and lameter).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub(crate) samples: u64,
    /// Samples discarded first (continuous workloads).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(0..=1000))]
    pub(crate) warmup: u64,
    /// Repeat each measurement this often (a fresh engine or fresh processes each time).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub(crate) repeats: u64,
    /// The label the run is stored under (default: the profile, or kernel-<release>).
    #[arg(long)]
    pub(crate) label: Option<String>,
    /// Sample interval in milliseconds (continuous workloads).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..=3_600_000))]
    pub(crate) interval_ms: u64,
    /// Mapping per iteration for page_fault1/2/3 (will-it-scale: 128M).
    #[arg(long, default_value = "128M", value_parser = parse_bytes)]
    pub(crate) memsize: u64,
    /// Bytes faulted per repetition for pft and lameter.
    #[arg(long, default_value = "1G", value_parser = parse_bytes)]
    pub(crate) size: u64,
    /// mapbench and mapbench-shared: pages in each task's region (RadixVM's npg).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1 << 30))]
    pub(crate) map_pages: u64,
    /// The cortenmm tests: requests per task per round (CortenMM: 32).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub(crate) requests: u64,
    /// Engine lock statistics. kvcache always counts.
    #[arg(long, value_enum, default_value_t = flags::LockStatFlag::On)]
    pub(crate) lock_stat: flags::LockStatFlag,
    #[command(flatten)]
    pub(crate) kvcache: KvcacheArgs,
}

/// kvcache's shape (memtier and memcached flags in parentheses); task counts are the numbers of
/// memcached worker tasks and of memtier client threads.
#[derive(Args, Clone, Debug)]
pub(crate) struct KvcacheArgs {
    /// kvcache: keys 1..=N (memtier --key-maximum).
    #[arg(long, default_value_t = 65536, value_parser = clap::value_parser!(u64).range(1..=1 << 32))]
    pub(crate) keys: u64,
    /// kvcache: value bytes, a multiple of 8 (memtier --data-size).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(8..=1 << 20))]
    pub(crate) value_size: u64,
    /// kvcache: the memory cgroup's limit as a percentage of the item data.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..=100))]
    pub(crate) memcg_percent: u64,
    /// kvcache: connections per client thread (memtier -c).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub(crate) connections: u64,
    /// kvcache: requests in flight per connection (memtier --pipeline), sent in one socket
    /// segment of at most 64 KiB.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub(crate) pipeline: u64,
    /// kvcache: gets per set (memtier --ratio 1:N); 0 is set-only.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub(crate) get_ratio: u32,
    /// kvcache: the swap device: memory (a RAM disk), lz4 (zram with LZ4) or a file path.
    #[arg(long, default_value = "memory")]
    pub(crate) swap: String,
}

impl KvcacheArgs {
    pub(crate) fn params(&self) -> pagelab_workloads::kvcache::KvParams {
        pagelab_workloads::kvcache::KvParams {
            keys: self.keys,
            value_size: self.value_size,
            memcg_percent: self.memcg_percent,
            connections: self.connections as usize,
            pipeline: self.pipeline as usize,
            get_ratio: self.get_ratio,
            ..Default::default()
        }
    }
}

#[derive(Args)]
struct InfoArgs {
    /// Print as JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ProfilesArgs {
    /// A profile name or path to show in full; without it, list the shipped ones.
    profile: Option<String>,
    /// A second profile: show the keys whose values differ from the first.
    other: Option<String>,
}

#[derive(Subcommand)]
enum Micro {
    /// The page allocator: per-CPU lists against the zone alone, high-order lists, and a
    /// cross-CPU producer/consumer, with zone->lock counts.
    Alloc(AllocArgs),
    /// The anonymous fault path on the engine against the host kernel, with zeroing measured
    /// apart so that the fault path without it can be read off.
    Fault(FaultArgs),
    /// What lock statistics cost `run pft --mode threads`: many short rounds in one process,
    /// each a fresh engine per setting, on and off alternating, rated by the median of the
    /// pairs' on/off ratios (wall clock and the tasks' CPU time) with its interval and the
    /// host's load.
    Pft(PftArgs),
}

#[derive(Args)]
struct PftArgs {
    /// Engine profile (a shipped name or a path to a .toml file).
    #[arg(long, default_value = "linux-6.7", value_name = "NAME|PATH")]
    profile: String,
    /// Threads of one address space, faulting slices of one VMA.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=256))]
    tasks: u64,
    /// Bytes faulted per repetition, split between the tasks.
    #[arg(long, default_value = "128M", value_parser = parse_bytes)]
    size: u64,
    /// Rounds: with `--lock-stat both`, pairs of passes. The interval narrows as the square
    /// root of their number.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    rounds: u64,
    /// Engine lock statistics.
    #[arg(long, value_enum, default_value_t = flags::LockStatsFlag::Both)]
    lock_stat: flags::LockStatsFlag,
}

#[derive(Args)]
struct FaultArgs {
    /// Mapping written per pass.
    #[arg(long, default_value = "128M", value_parser = parse_bytes)]
    size: u64,
    /// Timed passes per target; the median is reported.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=1000))]
    rounds: u64,
    /// Engine profiles to measure (shipped names or paths). Repeatable; default linux-6.7.
    #[arg(long = "profile", value_name = "NAME|PATH")]
    profiles: Vec<String>,
    /// Engine lock statistics.
    #[arg(long, value_enum, default_value_t = flags::LockStatsFlag::Both)]
    lock_stat: flags::LockStatsFlag,
}

#[derive(Args)]
struct AllocArgs {
    /// Arena per policy (e.g. 512M, 1G). 1 GiB or more gives the kernel's default batch of 63.
    #[arg(long, default_value = "1G", value_parser = parse_bytes)]
    arena: u64,
    /// Operations per timed pass.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    ops: u64,
    /// Timed passes per policy; the median is reported.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=1000))]
    rounds: u64,
    /// Also measure this profile (a shipped name or a path to a .toml file). Repeatable.
    #[arg(long = "profile", value_name = "NAME|PATH")]
    profiles: Vec<String>,
}

fn parse_bytes(s: &str) -> Result<u64, String> {
    pagelab_bench::experiments::parse_bytes(s).map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            // One line, as every other error: clap's first line names the problem.
            let text = e.render().to_string();
            let mut lines = text.lines();
            let first = lines.next().unwrap_or("bad arguments");
            let first = first.strip_prefix("error: ").unwrap_or(first);
            // A first line ending in a colon ("the following required arguments were not
            // provided:") is followed by what it names, one indented line each: kept, or the
            // line would not say which argument is missing.
            let named: Vec<&str> = if first.ends_with(':') {
                lines
                    .take_while(|l| l.starts_with(' ') && !l.trim().is_empty())
                    .map(str::trim)
                    .collect()
            } else {
                Vec::new()
            };
            let first = if named.is_empty() {
                first.to_string()
            } else {
                format!("{first} {}", named.join(", "))
            };
            // A value not among a flag's choices: the choices go on the same line.
            let choices = text
                .lines()
                .map(str::trim)
                .find(|l| l.starts_with("[possible values:"))
                .map_or(String::new(), |l| format!(" {l}"));
            eprintln!("pagelab: error: {first}{choices} (see pagelab --help)");
            return ExitCode::from(2);
        }
    };
    // The docs' examples that take minutes are checked against the parser only
    // (crates/cli/tests/docs.rs): parsed as any command line, then nothing run.
    if std::env::var_os("PAGELAB_PARSE_ONLY").is_some() {
        return ExitCode::SUCCESS;
    }
    match dispatch(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pagelab: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Ctrl-C, SIGTERM and SIGHUP set the returned flag; long runs poll it and stop cleanly after
/// the current sample. All three mean the same thing: a terminal closed, a `kill` or a service
/// manager stopping pagelab must leave the run marked incomplete with what it measured, exactly
/// as Ctrl-C does, not marked running by a process that no longer exists. A second signal quits
/// at once, still marking the run incomplete.
fn interrupt_flag() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    // A second handler cannot be installed; that only happens in tests calling this twice.
    let _ = ctrlc::set_handler(move || {
        if s.swap(true, Ordering::Relaxed) {
            // Quit now, but leave the run being measured marked incomplete, not running.
            measure::abandon_current_run();
            // `exit` runs no destructor: the swap file a run made would stay behind.
            pagelab_mm::reclaim::swap::remove_swap_files();
            std::process::exit(130);
        }
        eprintln!(
            "pagelab: stopping after the current sample (interrupt or terminate again to quit now)"
        );
    });
    stop
}

/// The store path: `--db`, else `$PAGELAB_DB`, else the user's data directory.
pub(crate) fn store_path(db: Option<&Path>) -> Result<PathBuf, String> {
    match db {
        Some(p) => Ok(p.to_path_buf()),
        None => Store::default_path().map_err(|e| e.to_string()),
    }
}

/// Open the store for writing (creating it on first use).
pub(crate) fn open_store(db: Option<&Path>) -> Result<Store, String> {
    Store::open(&store_path(db)?).map_err(|e| e.to_string())
}

/// The command line as typed, kept with every run.
pub(crate) fn command_line() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}

fn dispatch(cli: Cli) -> Result<(), String> {
    let db = cli.db.as_deref();
    match cli.cmd {
        Command::Reproduce(a) => measure::reproduce_cmd(a, db),
        Command::Compare(a) => results_cmd::compare_cmd(a, db),
        Command::Runs(a) => results_cmd::runs_cmd(a, db),
        Command::Export(a) => results_cmd::export_cmd(a, db),
        Command::Import(a) => results_cmd::import_cmd(a, db),
        Command::Plot(a) => report_cmd::plot_cmd(a, db),
        Command::Report(a) => report_cmd::report_cmd(a, db),
        Command::Experiments(a) => reproduce_cmd::experiments_cmd(a.experiment),
        Command::Machines(a) => project_cmd::machines_cmd(a),
        Command::Calibrate(a) => project_cmd::calibrate_cmd(a, db),
        Command::Capture(a) => project_cmd::capture_cmd(a, db),
        Command::Trace(a) => project_cmd::trace_cmd(a),
        Command::Project(a) => project_cmd::project_cmd(a, db),
        Command::Validate(a) => project_cmd::validate_cmd(a, db),
        Command::Info(a) => {
            let h = HostInfo::detect();
            if a.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&h).map_err(|e| e.to_string())?
                );
            } else {
                println!("{h}");
            }
            Ok(())
        }
        Command::Profiles(a) => {
            match a.profile {
                None => {
                    for (name, _) in profiles::BUILTIN {
                        let p = profiles::load(name).map_err(|e| e.to_string())?;
                        println!(
                            "{name:<22} {}",
                            p.policy.description.as_deref().unwrap_or("")
                        );
                    }
                }
                Some(n) => {
                    let p = profiles::load(&n).map_err(|e| e.to_string())?;
                    match a.other {
                        None => {
                            println!("# {} (every key, defaults filled in)", p.name);
                            print!("{}", p.policy.to_toml_string());
                        }
                        Some(o) => {
                            let q = profiles::load(&o).map_err(|e| e.to_string())?;
                            let d = profiles::diff(&p.policy, &q.policy);
                            if d.is_empty() {
                                println!("{} and {} set every key alike", p.name, q.name);
                            }
                            let w = d.iter().map(|x| x.0.len()).max().unwrap_or(0).max(3);
                            let wa = d
                                .iter()
                                .map(|x| x.1.len())
                                .max()
                                .unwrap_or(0)
                                .max(p.name.len());
                            if !d.is_empty() {
                                println!("{:<w$}  {:<wa$}  {}", "key", p.name, q.name);
                            }
                            for (k, va, vb) in d {
                                println!("{k:<w$}  {va:<wa$}  {vb}");
                            }
                        }
                    }
                }
            }
            Ok(())
        }
        Command::Run(a) => measure::run_cmd(a, db),
        Command::Micro(Micro::Fault(a)) => {
            let names = if a.profiles.is_empty() {
                vec!["linux-6.7".to_string()]
            } else {
                a.profiles
            };
            let profs = names
                .iter()
                .map(|n| profiles::load(n).map(|p| (p.name, p.policy)))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.to_string())?;
            let stop = interrupt_flag();
            let lock_stat = a.lock_stat.settings();
            let rep = pagelab_bench::micro::fault::run(
                &profs,
                a.size,
                a.rounds as usize,
                lock_stat,
                &stop,
            )
            .map_err(|e| e.to_string())?;
            print!("{}", rep.render());
            Ok(())
        }
        Command::Micro(Micro::Pft(a)) => {
            let p = profiles::load(&a.profile).map_err(|e| e.to_string())?;
            let cfg = pagelab_bench::micro::pft::PftCostConfig {
                profile: p.name,
                policy: p.policy,
                tasks: a.tasks as usize,
                bytes: a.size,
                rounds: a.rounds as usize,
                lock_stat: a.lock_stat.settings().to_vec(),
            };
            let stop = interrupt_flag();
            let rep = pagelab_bench::micro::pft::run(&cfg, &stop).map_err(|e| e.to_string())?;
            print!("{}", rep.render());
            Ok(())
        }
        Command::Micro(Micro::Alloc(a)) => {
            let extra = a
                .profiles
                .iter()
                .map(|p| profiles::load(p))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.to_string())?;
            let cfg = AllocBenchConfig {
                arena_bytes: a.arena,
                ops: a.ops,
                rounds: a.rounds as usize,
                extra,
            };
            let stop = interrupt_flag();
            let rep = run_alloc_bench(&cfg, |what| eprintln!("pagelab: measuring {what}"), &stop)
                .map_err(|e| e.to_string())?;
            print!("{}", rep.render());
            if rep.interrupted {
                return Err("interrupted".into());
            }
            Ok(())
        }
    }
}
