//! The `pagelab` command: a thin layer over the engine and harness libraries. Every error is
//! one line on stderr and a non-zero exit status.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::{Args, Parser, Subcommand};
use pagelab_bench::host::HostInfo;
use pagelab_bench::micro::alloc::{AllocBenchConfig, run as run_alloc_bench};
use pagelab_bench::profiles;

/// A laboratory for Linux memory-management scalability: the kernel's page allocator, fault and
/// reclaim paths re-implemented in userspace, with every scalability technique a policy switch.
#[derive(Parser)]
#[command(name = "pagelab", version, about, long_about = None)]
struct Cli {
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
    /// List the shipped profiles, or print one as TOML.
    Profiles(ProfilesArgs),
    /// Run a workload on the engine (with a profile) or on the host kernel, over task counts.
    Run(RunArgs),
}

#[derive(Args)]
struct RunArgs {
    /// page_fault1, page_fault2, page_fault3, pft, pft-vma-per-thread or lameter.
    workload: String,
    /// engine (the userspace kernel with --profile) or kernel (this machine's kernel, for real).
    #[arg(long, default_value = "engine")]
    target: String,
    /// Profile for the engine: a shipped name or a path to a .toml file.
    #[arg(long, default_value = "linux-6.7")]
    profile: String,
    /// Task counts, mmtests style: 1,2,4 or 1..8 or 2..16:2.
    #[arg(long, default_value = "1,2")]
    tasks: String,
    /// processes, threads or both.
    #[arg(long, default_value = "processes")]
    mode: String,
    /// Samples kept per task count (repetitions for pft and lameter).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    samples: u64,
    /// Samples discarded first (continuous workloads).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(0..=1000))]
    warmup: u64,
    /// Sample interval in milliseconds (continuous workloads).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..=3_600_000))]
    interval_ms: u64,
    /// Mapping per iteration for page_fault1/2/3 (will-it-scale: 128M).
    #[arg(long, default_value = "128M", value_parser = parse_bytes)]
    memsize: u64,
    /// Bytes faulted per repetition for pft and lameter.
    #[arg(long, default_value = "1G", value_parser = parse_bytes)]
    size: u64,
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
}

#[derive(Subcommand)]
enum Micro {
    /// The page allocator: per-CPU lists against the zone alone, high-order lists, and a
    /// cross-CPU producer/consumer, with zone->lock counts.
    Alloc(AllocArgs),
    /// The anonymous fault path on the engine against the host kernel, with zeroing measured
    /// apart so that the fault path without it can be read off.
    Fault(FaultArgs),
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
    let v = parse_size::Config::new()
        .with_binary()
        .parse_size(s)
        .map_err(|e| format!("`{s}` is not a size ({e}); write e.g. 512M or 2G"))?;
    if v == 0 {
        return Err("a size of zero is not allowed".into());
    }
    Ok(v)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match dispatch(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pagelab: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Ctrl-C sets the returned flag; long runs poll it and stop cleanly.
fn interrupt_flag() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    // A second handler cannot be installed; that only happens in tests calling this twice.
    let _ = ctrlc::set_handler(move || {
        if s.swap(true, Ordering::Relaxed) {
            std::process::exit(130);
        }
        eprintln!("pagelab: stopping after the current pass (Ctrl-C again to quit now)");
    });
    stop
}

fn run_cmd(a: RunArgs) -> Result<(), String> {
    use pagelab_bench::run::{RunRequest, Sizes, Target, parse_tasks, render, run};
    use pagelab_workloads::runner::SampleSpec;
    use pagelab_workloads::{Mode, WorkloadKind};
    let workload: WorkloadKind = a.workload.parse()?;
    let tasks = parse_tasks(&a.tasks)?;
    let modes = match a.mode.as_str() {
        "both" => vec![Mode::Processes, Mode::Threads],
        m => vec![m.parse::<Mode>().map_err(|e| format!("{e} (or both)"))?],
    };
    let target = match a.target.as_str() {
        "engine" => {
            let p = profiles::load(&a.profile)?;
            Target::Engine {
                profile: p.name,
                policy: p.policy,
            }
        }
        "kernel" => Target::Kernel,
        t => return Err(format!("unknown target `{t}`; expected engine or kernel")),
    };
    let req = RunRequest {
        workload,
        target,
        tasks,
        modes,
        spec: SampleSpec {
            samples: a.samples as usize,
            warmup: a.warmup as usize,
            interval: std::time::Duration::from_millis(a.interval_ms),
        },
        sizes: Sizes {
            memsize: a.memsize,
            pft_bytes: a.size,
        },
    };
    let stop = interrupt_flag();
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {msg} [{bar:30}] {pos}/{len}")
            .expect("valid progress template")
            .progress_chars("=> "),
    );
    let rows = run(&req, &stop, &mut |label, done, total| {
        bar.set_message(label.to_string());
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    });
    bar.finish_and_clear();
    let rows = rows?;
    print!("{}", render(&req, &rows));
    if rows.iter().any(|r| r.interrupted) {
        return Err("interrupted".into());
    }
    Ok(())
}

fn dispatch(cli: Cli) -> Result<(), String> {
    match cli.cmd {
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
                        let p = profiles::load(name)?;
                        println!(
                            "{name:<22} {}",
                            p.policy.description.as_deref().unwrap_or("")
                        );
                    }
                }
                Some(n) => {
                    let p = profiles::load(&n)?;
                    println!("# {} (every key, defaults filled in)", p.name);
                    print!("{}", p.policy.to_toml_string());
                }
            }
            Ok(())
        }
        Command::Run(a) => run_cmd(a),
        Command::Micro(Micro::Fault(a)) => {
            let names = if a.profiles.is_empty() {
                vec!["linux-6.7".to_string()]
            } else {
                a.profiles
            };
            let profs = names
                .iter()
                .map(|n| profiles::load(n).map(|p| (p.name, p.policy)))
                .collect::<Result<Vec<_>, _>>()?;
            let stop = interrupt_flag();
            let rep = pagelab_bench::micro::fault::run(&profs, a.size, a.rounds as usize, &stop)?;
            print!("{}", rep.render());
            Ok(())
        }
        Command::Micro(Micro::Alloc(a)) => {
            let extra = a
                .profiles
                .iter()
                .map(|p| profiles::load(p))
                .collect::<Result<Vec<_>, _>>()?;
            let cfg = AllocBenchConfig {
                arena_bytes: a.arena,
                ops: a.ops,
                rounds: a.rounds as usize,
                extra,
            };
            let stop = interrupt_flag();
            let rep = run_alloc_bench(&cfg, |what| eprintln!("pagelab: measuring {what}"), &stop)?;
            print!("{}", rep.render());
            if rep.interrupted {
                return Err("interrupted".into());
            }
            Ok(())
        }
    }
}
