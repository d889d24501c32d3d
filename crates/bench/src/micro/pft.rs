//! `pagelab micro pft`: what lock statistics cost `run pft --mode threads`, resolved to a
//! percent on a small, shared host.
//!
//! Separate `run` processes alternating on and off (`scripts/bench-lockstat.sh` before this)
//! could not resolve 2%: single runs spread 12% on a quiet 2-vCPU guest, because each process
//! meets a different host (another engineer's build, the hypervisor's other guests) and pays
//! its own start-up. Here both settings run in one process, in many short rounds:
//!
//! * Each pass boots a fresh engine with the same profile and arena, makes `tasks` threads of
//!   one `Mm` on CPUs `0..tasks` (pinned to host cores `0..tasks`, as `run` pins them), runs one
//!   untimed pft repetition (so that page tables, per-CPU lists and slabs are warm, as a `run`'s
//!   later repetitions find them) and one timed repetition, then drops the engine. Every pass
//!   starts from the same state, whatever the other setting's pass left behind.
//! * A round is one pass with counting on and one with it off, back to back; which goes first
//!   alternates round by round, so that neither setting always follows the other (the first
//!   pass of a pair inherits the caches the previous round's teardown left).
//! * Each pair gives an on/off ratio of faults per wall-clock second and of faults per CPU
//!   second (the tasks' summed `CLOCK_THREAD_CPUTIME_ID`, which leaves out the time the host gave
//!   to other processes; spinning on a lock is still CPU time). Adjacent passes share the host's
//!   state of the moment, so the ratio cancels slow drifts that separate runs cannot.
//! * The ratios are summarised by their median with a distribution-free order-statistic
//!   interval ([`crate::stats::median_interval`]): the disturbed pairs (a preemption, a burst of
//!   other work in one pass) are the tails, and they move a median by one place at most.
//! * The host's load is reported with the figures: the load average before and after, and the
//!   share of the host's CPU time that other processes (and the hypervisor, as steal) took
//!   while the rounds ran, from `/proc/stat` less this process's own time.

use std::sync::atomic::{AtomicBool, Ordering};

use pagelab_mm::{Kernel, Policy};
use pagelab_workloads::engine;
use pagelab_workloads::pft::{self, PftParams};
use pagelab_workloads::{Mode, WorkloadKind};

use super::MicroError;
use crate::run::{Sizes, engine_arena};
use crate::stats::{MedianInterval, median_interval};

/// The confidence of the intervals reported.
pub const LEVEL: f64 = 0.95;

/// What to measure.
#[derive(Clone, Debug)]
pub struct PftCostConfig {
    /// The profile's name, for the report.
    pub profile: String,
    pub policy: Policy,
    /// Threads of one address space (pft's tasks), each faulting its slice of one VMA.
    pub tasks: usize,
    /// Bytes faulted per repetition, split between the tasks.
    pub bytes: u64,
    /// Rounds; with both settings, each round is one pair.
    pub rounds: usize,
    /// Lock statistics settings to measure (`[true, false]`: both, paired).
    pub lock_stat: Vec<bool>,
}

/// One timed repetition.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pass {
    pub faults: u64,
    pub wall_ns: u64,
    /// The tasks' CPU time, summed.
    pub cpu_ns: u64,
    /// Lock acquisitions counted from the start of the timed repetition to its end (its
    /// mapping and unmapping included); 0 with counting off.
    pub acquisitions: u64,
}

impl Pass {
    /// pft's `fault/wsec`.
    pub fn faults_per_sec(&self) -> f64 {
        self.faults as f64 * 1e9 / self.wall_ns.max(1) as f64
    }

    /// pft's `flt/cpu/s`.
    pub fn faults_per_cpu(&self) -> f64 {
        self.faults as f64 * 1e9 / self.cpu_ns.max(1) as f64
    }
}

/// One setting's passes.
#[derive(Clone, Debug, PartialEq)]
pub struct SettingResult {
    pub lock_stat: bool,
    pub passes: Vec<Pass>,
}

/// The on/off ratios of the pairs, and their summaries.
#[derive(Clone, Debug, PartialEq)]
pub struct PairRatios {
    /// (faults/sec on ÷ off, faults/cpu on ÷ off), one per round, in round order.
    pub pairs: Vec<(f64, f64)>,
    pub wall: MedianInterval,
    pub cpu: MedianInterval,
}

impl PairRatios {
    /// Summarises `pairs`; `None` when there are none.
    pub fn of(pairs: Vec<(f64, f64)>) -> Option<PairRatios> {
        let wall: Vec<f64> = pairs.iter().map(|p| p.0).collect();
        let cpu: Vec<f64> = pairs.iter().map(|p| p.1).collect();
        Some(PairRatios {
            wall: median_interval(&wall, LEVEL)?,
            cpu: median_interval(&cpu, LEVEL)?,
            pairs,
        })
    }
}

/// How busy the host was while the rounds ran.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HostLoad {
    /// `/proc/loadavg`'s 1, 5 and 15 minute averages before the first round.
    pub loadavg_before: [f64; 3],
    /// The same after the last.
    pub loadavg_after: [f64; 3],
    /// The share of all the host's CPU time, over the rounds, that went to other processes or
    /// to the hypervisor (steal): busy and stolen time in `/proc/stat`, less this process's
    /// own user and system time (`/proc/self/stat`). `None` where those files cannot be read.
    pub others_share: Option<f64>,
    /// CPUs `/proc/stat` lists.
    pub cpus: usize,
}

/// `/proc/stat`'s first line: (busy and stolen ticks, all ticks, CPUs).
fn host_ticks() -> Option<(u64, u64, usize)> {
    let s = std::fs::read_to_string("/proc/stat").ok()?;
    let mut lines = s.lines();
    let f: Vec<u64> = lines
        .next()?
        .strip_prefix("cpu ")?
        .split_whitespace()
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal [guest guest_nice]: guest time is already
    // in user and nice, so only the first eight add up to the total.
    if f.len() < 8 {
        return None;
    }
    let total: u64 = f[..8].iter().sum();
    let idle = f[3] + f[4];
    let cpus = lines.filter(|l| l.starts_with("cpu")).count();
    Some((total - idle, total, cpus))
}

/// This process's user and system ticks (`/proc/self/stat` fields 14 and 15, after the command
/// name, which may hold spaces and so is skipped to its closing parenthesis).
fn own_ticks() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state): utime is field 14, index 11 here.
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

fn loadavg() -> [f64; 3] {
    let s = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut v = s.split_whitespace().map(|x| x.parse().unwrap_or(f64::NAN));
    [(); 3].map(|_| v.next().unwrap_or(f64::NAN))
}

/// What the share of others is computed from, taken before and after.
struct LoadMark {
    loadavg: [f64; 3],
    host: Option<(u64, u64, usize)>,
    own: Option<u64>,
}

impl LoadMark {
    fn now() -> LoadMark {
        LoadMark {
            loadavg: loadavg(),
            host: host_ticks(),
            own: own_ticks(),
        }
    }

    fn until(&self, end: &LoadMark) -> HostLoad {
        let others_share = match (self.host, end.host, self.own, end.own) {
            (Some((b0, t0, _)), Some((b1, t1, _)), Some(o0), Some(o1)) if t1 > t0 => {
                let others = (b1 - b0).saturating_sub(o1.saturating_sub(o0));
                Some(others as f64 / (t1 - t0) as f64)
            }
            _ => None,
        };
        HostLoad {
            loadavg_before: self.loadavg,
            loadavg_after: end.loadavg,
            others_share,
            cpus: end.host.map_or(0, |h| h.2),
        }
    }
}

/// The whole report.
#[derive(Clone, Debug, PartialEq)]
pub struct PftCostReport {
    pub profile: String,
    pub tasks: usize,
    pub bytes: u64,
    /// Rounds completed.
    pub rounds: usize,
    pub settings: Vec<SettingResult>,
    /// With both settings: the pairs' on/off ratios.
    pub ratios: Option<PairRatios>,
    pub load: HostLoad,
    pub interrupted: bool,
}

/// Lock acquisitions counted so far in `k`'s statistics domain.
fn acquisitions(k: &Kernel) -> u64 {
    k.lock_stat_domain()
        .classes()
        .iter()
        .map(|(_, s)| s.total().acquisitions)
        .sum()
}

/// One pass on a fresh engine: a warm-up repetition, then the timed one.
fn pass(cfg: &PftCostConfig, on: bool) -> Result<Pass, MicroError> {
    let engine_err = |source| MicroError::Engine {
        policy: cfg.profile.clone(),
        source,
    };
    let sizes = Sizes {
        pft_bytes: cfg.bytes,
        ..Sizes::default()
    };
    let arena = engine_arena(WorkloadKind::Pft, cfg.tasks, sizes);
    let k = engine::boot(&cfg.policy, arena, cfg.tasks).map_err(engine_err)?;
    let (_run, vms) = engine::tasks(&k, cfg.tasks, Mode::Threads, false).map_err(engine_err)?;
    let params = PftParams {
        bytes: cfg.bytes,
        repetitions: 2,
        vma_per_task: false,
    };
    // The flag is read by the pass's own threads only; nothing interrupts a pass halfway.
    let never = AtomicBool::new(false);
    let mut marks = Vec::with_capacity(2);
    pagelab_sync::stats::set_enabled(on);
    // Called after each repetition, before the tasks start the next one's faults.
    let r = pft::run(vms, true, params, &never, &mut |_, _, _| {
        marks.push(acquisitions(&k))
    });
    pagelab_sync::stats::set_enabled(false);
    let (reps, _) = r.map_err(engine_err)?;
    let timed = reps
        .last()
        .ok_or(MicroError::Nothing("pft ran no repetition"))?;
    Ok(Pass {
        faults: timed.faults(),
        wall_ns: timed.wall_ns,
        cpu_ns: timed.tasks.iter().map(|t| t.cpu_ns).sum(),
        acquisitions: match marks[..] {
            [a, b] => b - a,
            _ => 0,
        },
    })
}

/// Runs `cfg.rounds` rounds, stopping early (with what finished) when `stop` is set.
pub fn run(cfg: &PftCostConfig, stop: &AtomicBool) -> Result<PftCostReport, MicroError> {
    if cfg.lock_stat.is_empty() {
        return Err(MicroError::Nothing("no lock statistics setting to measure"));
    }
    if cfg.tasks == 0 || cfg.rounds == 0 {
        return Err(MicroError::Nothing(
            "--tasks and --rounds must be at least 1",
        ));
    }
    if cfg.bytes / cfg.tasks as u64 / 4096 == 0 {
        return Err(MicroError::Nothing(
            "--size must give every task at least one page",
        ));
    }
    let was = pagelab_sync::stats::enabled();
    let r = run_rounds(cfg, stop);
    pagelab_sync::stats::set_enabled(was);
    r
}

fn run_rounds(cfg: &PftCostConfig, stop: &AtomicBool) -> Result<PftCostReport, MicroError> {
    let mut settings: Vec<SettingResult> = cfg
        .lock_stat
        .iter()
        .map(|&lock_stat| SettingResult {
            lock_stat,
            passes: Vec::new(),
        })
        .collect();
    // One pass of each setting first, not kept: the process's first engine pays for faulting
    // in the binary's code and the allocator's first arenas.
    for &on in &cfg.lock_stat {
        pass(cfg, on)?;
    }
    let start = LoadMark::now();
    let mut rounds = 0;
    let mut interrupted = false;
    for round in 0..cfg.rounds {
        let mut order: Vec<usize> = (0..settings.len()).collect();
        order.rotate_left(round % settings.len());
        for j in order {
            let p = pass(cfg, settings[j].lock_stat)?;
            settings[j].passes.push(p);
        }
        rounds += 1;
        if stop.load(Ordering::Relaxed) {
            interrupted = true;
            break;
        }
    }
    let load = start.until(&LoadMark::now());
    let on = settings.iter().find(|s| s.lock_stat);
    let off = settings.iter().find(|s| !s.lock_stat);
    let ratios = match (on, off) {
        (Some(on), Some(off)) => PairRatios::of(
            on.passes
                .iter()
                .zip(&off.passes)
                .map(|(a, b)| {
                    (
                        a.faults_per_sec() / b.faults_per_sec(),
                        a.faults_per_cpu() / b.faults_per_cpu(),
                    )
                })
                .collect(),
        ),
        _ => None,
    };
    Ok(PftCostReport {
        profile: cfg.profile.clone(),
        tasks: cfg.tasks,
        bytes: cfg.bytes,
        rounds,
        settings,
        ratios,
        load,
        interrupted,
    })
}

fn pct(r: f64) -> String {
    format!("{:+.2}%", (r - 1.0) * 100.0)
}

impl PftCostReport {
    pub fn render(&self) -> String {
        use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED);
        t.set_header([
            "lock statistics",
            "faults/sec, median (range)",
            "faults/cpu, median (range)",
            "lock acquisitions per fault",
        ]);
        let range = |v: Vec<f64>| {
            if v.is_empty() {
                return "-".to_string();
            }
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            format!(
                "{:.3}M ({:.3}M to {:.3}M)",
                crate::stats::median(&v) / 1e6,
                lo / 1e6,
                hi / 1e6
            )
        };
        for s in &self.settings {
            let faults: u64 = s.passes.iter().map(|p| p.faults).sum();
            let acq: u64 = s.passes.iter().map(|p| p.acquisitions).sum();
            t.add_row(vec![
                if s.lock_stat { "on" } else { "off" }.to_string(),
                range(s.passes.iter().map(Pass::faults_per_sec).collect()),
                range(s.passes.iter().map(Pass::faults_per_cpu).collect()),
                if s.lock_stat {
                    format!("{:.2}", acq as f64 / faults.max(1) as f64)
                } else {
                    "-".into()
                },
            ]);
        }
        let mut out = format!(
            "pft --mode threads --tasks {} on engine:{}, {} MiB per repetition; {} rounds, each a fresh engine per setting (one warm-up repetition, one timed), settings alternating which goes first\n{t}\n",
            self.tasks,
            self.profile,
            self.bytes >> 20,
            self.rounds
        );
        if let Some(r) = &self.ratios {
            for (what, m) in [("faults/sec (wall)", &r.wall), ("faults/cpu", &r.cpu)] {
                out += &format!(
                    "on/off {what}: median of {} pair ratios {:.4} ({}), {:.1}% interval {:.4} to {:.4} ({} to {})\n",
                    r.pairs.len(),
                    m.median,
                    pct(m.median),
                    m.coverage * 100.0,
                    m.lo,
                    m.hi,
                    pct(m.lo),
                    pct(m.hi)
                );
            }
        }
        let l = &self.load;
        let [a, b, c] = l.loadavg_before;
        let [d, e, f] = l.loadavg_after;
        out += &format!(
            "host load: load average {a:.2} {b:.2} {c:.2} before, {d:.2} {e:.2} {f:.2} after"
        );
        match l.others_share {
            Some(s) => {
                out += &format!(
                    "; other processes and steal took {:.1}% of the host's {} CPUs' time during the rounds\n",
                    s * 100.0,
                    l.cpus
                )
            }
            None => out += "\n",
        }
        if self.interrupted {
            out += "interrupted: the figures hold the rounds that finished\n";
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(lock_stat: Vec<bool>) -> PftCostConfig {
        PftCostConfig {
            profile: "default".into(),
            policy: Policy::default(),
            tasks: 2,
            bytes: 8 << 20,
            rounds: 2,
            lock_stat,
        }
    }

    #[test]
    fn both_settings_are_paired_round_by_round() {
        let _switch = crate::micro::stats_switch();
        let stop = AtomicBool::new(false);
        let r = run(&cfg(vec![true, false]), &stop).unwrap();
        assert_eq!(r.rounds, 2);
        assert_eq!(r.settings.len(), 2);
        for s in &r.settings {
            assert_eq!(s.passes.len(), 2);
            for p in &s.passes {
                assert_eq!(p.faults, (8 << 20) / 4096);
                assert!(p.wall_ns > 0 && p.cpu_ns > 0, "{p:?}");
                // Counted only when on: a fault takes its VMA lock (or mmap_lock) and the PTL.
                let per_fault = p.acquisitions as f64 / p.faults as f64;
                if s.lock_stat {
                    assert!((2.0..20.0).contains(&per_fault), "{p:?}");
                } else {
                    assert_eq!(p.acquisitions, 0, "{p:?}");
                }
            }
        }
        let ratios = r.ratios.as_ref().unwrap();
        assert_eq!(ratios.pairs.len(), 2);
        let (w, c) = ratios.pairs[0];
        let on = r.settings[0].passes[0];
        let off = r.settings[1].passes[0];
        assert_eq!(w, on.faults_per_sec() / off.faults_per_sec());
        assert_eq!(c, on.faults_per_cpu() / off.faults_per_cpu());
        assert!(ratios.cpu.lo <= ratios.cpu.median && ratios.cpu.median <= ratios.cpu.hi);
        let text = r.render();
        for want in [
            "on/off faults/cpu: median of 2 pair ratios",
            "host load: load average",
        ] {
            assert!(text.contains(want), "{want}: {text}");
        }
        // Counting is left as it was found.
        assert!(!pagelab_sync::stats::enabled());
    }

    #[test]
    fn one_setting_has_no_ratio_and_nothing_to_measure_is_refused() {
        let _switch = crate::micro::stats_switch();
        let stop = AtomicBool::new(false);
        let mut c = cfg(vec![false]);
        c.rounds = 1;
        let r = run(&c, &stop).unwrap();
        assert!(r.ratios.is_none());
        assert!(!r.render().contains("on/off"));
        assert!(run(&cfg(vec![]), &stop).is_err());
        let mut c = cfg(vec![true, false]);
        c.tasks = 0;
        assert!(run(&c, &stop).is_err());
        let mut c = cfg(vec![true, false]);
        c.bytes = 4096;
        let e = run(&c, &stop).unwrap_err();
        assert!(e.to_string().contains("--size"), "{e}");
    }

    #[test]
    fn host_load_reads_the_proc_files() {
        let a = LoadMark::now();
        // Some work of our own, which must not count as the others'.
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let l = a.until(&LoadMark::now());
        assert!(l.loadavg_before.iter().all(|v| *v >= 0.0), "{l:?}");
        if let Some(s) = l.others_share {
            assert!((0.0..=1.0).contains(&s), "{l:?}");
            assert!(l.cpus >= 1, "{l:?}");
        }
    }
}
