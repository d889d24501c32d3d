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
