//! Projection: an experiment's profiles, task counts and modes, replayed on a machine, as rows
//! the results store keeps beside measured ones (origin `projected`).
//!
//! Each profile is captured `captures` times (one task on the engine, with as many virtual CPUs
//! as the machine has; in turns with the other profiles) and every capture is replayed for
//! every mode and task count, so that a row's samples hold the capture noise as well as the
//! replay's. Cyclic workloads (will-it-scale) give `samples` sample windows from each replay,
//! like will-it-scale's per-second samples; fixed-work ones (pft) give one value per replay,
//! one replay a capture, so that pft's repetitions are the captures (replays of one pft capture
//! with other seeds differ by about a tenth of a percent: [`replay_row`]). A row is stored with one
//! repeat per capture, which is what `compare`'s uncertainty interval of a projected column is
//! made of.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use pagelab_bench::profiles::Profile;
use pagelab_bench::results::{Origin, RunMeta, SampleKey, Status};
use pagelab_bench::stats::{amean, hmean};
use pagelab_bench::store::Store;
use pagelab_workloads::{Mode, WorkloadKind};

use crate::capture::{CaptureSpec, PFT_BYTES, RawCapture, capture, capture_raw, pace, shape};
use crate::error::ProjectError;
use crate::machine::Machine;
use crate::replay::{ClassStats, Replay, ReplaySpec};
use crate::trace::{Trace, Window};

/// What to project.
#[derive(Clone, Debug)]
pub struct ProjectSpec {
    pub machine: Machine,
    pub workload: WorkloadKind,
    pub profiles: Vec<Profile>,
    pub modes: Vec<Mode>,
    pub tasks: Vec<usize>,
    pub samples: usize,
    /// Captures of each profile, each replayed (at least 1).
    pub captures: usize,
    pub seed: u64,
    /// Fixed-work workloads: operations per replayed CPU (a prefix of the trace).
    pub ops_per_cpu: u64,
    /// Fixed-work workloads whose repetition is one region split between the tasks (Lameter's
    /// test: `Gb` per repetition): its bytes. Each replayed CPU then faults its slice, in the
    /// machine's pages (`region / (tasks x memory.page_size)`), at most `ops_per_cpu`; `None`
    /// replays `ops_per_cpu` faults per CPU whatever the task count.
    pub region_bytes: Option<u64>,
    /// kvcache's shape (the experiment's `[kvcache]` table), for its capture; `None` for the
    /// workload's defaults and for every other workload.
    pub kvcache: Option<pagelab_workloads::kvcache::KvParams>,
}

impl ProjectSpec {
    /// Checks the request against the machine before anything is captured.
    pub fn check(&self) -> Result<(), ProjectError> {
        shape(self.workload)?;
        if self.profiles.is_empty() || self.modes.is_empty() || self.tasks.is_empty() {
            return Err(ProjectError::Request(
                "nothing to project: give profiles, modes and task counts".into(),
            ));
        }
        if self.samples == 0 {
            return Err(ProjectError::Request("--samples must be at least 1".into()));
        }
        if self.captures == 0 {
            return Err(ProjectError::Request(
                "--captures must be at least 1".into(),
            ));
        }
        let max = self.tasks.iter().copied().max().unwrap_or(0);
        // netpipe's tasks are sender/receiver pairs, two CPUs each.
        let max = if self.workload == WorkloadKind::Netpipe {
            2 * max
        } else {
            max
        };
        if max > self.machine.nr_cpus() {
            return Err(ProjectError::Request(format!(
                "{max} tasks is more than the {} CPUs of {}; the projector runs one task per CPU",
                self.machine.nr_cpus(),
                self.machine.name
            )));
        }
        if self.tasks.contains(&0) {
            return Err(ProjectError::Request(
                "a task count must be at least 1".into(),
            ));
        }
        Ok(())
    }

    /// Faults each replayed CPU makes at `tasks` tasks: `ops_per_cpu`, or its slice of the
    /// region in the machine's pages when the spec has one (at least one fault).
    pub fn ops_for(&self, tasks: usize) -> u64 {
        match self.region_bytes {
            Some(bytes) => {
                let per =
                    bytes / (tasks.max(1) as u64).saturating_mul(self.machine.memory.page_size);
                per.clamp(1, self.ops_per_cpu)
            }
            None => self.ops_per_cpu,
        }
    }
}

/// One replay of one capture at one mode and task count.
#[derive(Clone, Debug)]
pub struct Row {
    pub mode: Mode,
    pub tasks: usize,
    /// `(metric, higher_is_better, samples)`.
    pub metrics: Vec<(String, bool, Vec<f64>)>,
    pub classes: Vec<ClassStats>,
    /// Operations completed in the measured span, and that span in simulated ns: what turns
    /// the classes' totals into figures per operation and shares of the run
    /// ([`ProjRow::lock_stat`]).
    pub ops: u64,
    pub span_ns: f64,
    /// Simulated events and the seconds they took (the speed benchmark).
    pub events: u64,
    pub seconds: f64,
}

impl Row {
    /// The rows' counters as the store keeps them (`lock:<class>:...`).
    pub fn counters(&self) -> Vec<(String, f64)> {
        let mut out = Vec::new();
        for c in &self.classes {
            out.push((
                format!("lock:{}:acquisitions", c.name),
                c.acquisitions as f64,
            ));
            out.push((format!("lock:{}:contended", c.name), c.contended as f64));
            out.push((format!("lock:{}:wait_ns", c.name), c.wait_ns));
            // Failed trylocks that took the engine's fallback (absent: none).
            if c.fallbacks > 0 {
                out.push((format!("lock:{}:fallbacks", c.name), c.fallbacks as f64));
            }
            // Exclusive holds and their summed length (lock_stat's holdtime-total).
            if c.holds > 0 {
                out.push((format!("lock:{}:holds", c.name), c.holds as f64));
                out.push((format!("lock:{}:hold_ns", c.name), c.hold_ns));
            }
        }
        out
    }
}

/// One class's projected lock statistics in one row, over all of the row's replays: the
/// figures `/proc/lock_stat` gives a kernel developer (acquisitions, contentions, wait time,
/// hold time), per operation of the workload so that rows of different lengths and task
/// counts compare, and the share of the run the class was held, which says what limits the
/// row: a class held nearly all the time on each of its instances is the row's bottleneck.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct LockStatLine {
    pub class: String,
    /// Acquisitions per operation (lock_stat's `acquisitions` over the operations).
    pub acquisitions_per_op: f64,
    /// The share of acquisitions that waited (`contentions / acquisitions`).
    pub contended: f64,
    /// What the acquisitions waited per operation, ns (`waittime-total` over the operations).
    pub wait_ns_per_op: f64,
    /// The mean exclusive hold, ns (`holdtime-total / holds`); `None` for a class that is
    /// never held exclusively (a line, a reader-only hold).
    pub hold_ns: Option<f64>,
    /// The exclusive hold time of all the class's instances over the run's span: 1.0 is one
    /// instance held all the time, so a class with one instance per node (`zone->lock`,
    /// `lru_lock`) reaches the number of nodes the row uses when it limits the row.
    pub held: f64,
    /// What the transfers of the class's lines (plain reads and writes of its own lines, and
    /// of the list entries named relative to them) made CPUs wait per operation, ns, the time
    /// queued for a line left out (it is in `wait_ns_per_op`): where a hold's length comes from
    /// beyond its compute. A lock word's own atomics are not in it.
    pub line_ns_per_op: f64,
}

impl ProjRow {
    /// The row's projected lock statistics, one line per class that was acquired, held or
    /// transferred, every capture's replay merged (each field is a sum over the replays, so
    /// the merge reads as one longer run), the classes that waited most first. None for a row
    /// that completed no operation: it has nothing to give per operation.
    pub fn lock_stat(&self) -> Vec<LockStatLine> {
        let mut merged: Vec<ClassStats> = Vec::new();
        for c in self.captures.iter().flat_map(|r| &r.classes) {
            ClassStats::merge_into(&mut merged, c);
        }
        let ops = self.captures.iter().map(|r| r.ops).sum::<u64>();
        if ops == 0 {
            return Vec::new();
        }
        let ops = ops as f64;
        let span = self.captures.iter().map(|r| r.span_ns).sum::<f64>();
        let mut out: Vec<LockStatLine> = merged
            .into_iter()
            .filter(|c| c.acquisitions > 0 || c.holds > 0 || c.line_events > 0)
            .map(|c| LockStatLine {
                acquisitions_per_op: c.acquisitions as f64 / ops,
                contended: if c.acquisitions > 0 {
                    c.contended as f64 / c.acquisitions as f64
                } else {
                    0.0
                },
                wait_ns_per_op: c.wait_ns / ops,
                hold_ns: (c.holds > 0).then(|| c.hold_ns / c.holds as f64),
                held: if span > 0.0 { c.hold_ns / span } else { 0.0 },
                line_ns_per_op: (c.line_ns - c.line_queued_ns).max(0.0) / ops,
                class: c.name,
            })
            .collect();
        out.sort_by(|a, b| {
            b.wait_ns_per_op
                .total_cmp(&a.wait_ns_per_op)
                .then(b.held.total_cmp(&a.held))
        });
        out
    }
}

/// One projected row: a profile at one mode and task count, replayed once for each capture.
///
/// The captures are the model's uncertainty: each is one run of the engine on a shared host,
/// and what ran beside it (a neighbour's load on the caches and memory bus, where the
/// scheduler put the engine's threads) changes its compute times by a few percent. Replaying
/// every capture, not the quickest, keeps that spread in the projected row, where a reader
/// can see how much of a difference between profiles it could explain.
#[derive(Clone, Debug)]
pub struct ProjRow {
    pub mode: Mode,
    pub tasks: usize,
    /// One replay of each capture, in capture order.
    pub captures: Vec<Row>,
}

impl ProjRow {
    /// Every sample of `metric` over all captures, in capture order.
    pub fn values(&self, metric: &str) -> Vec<f64> {
        self.captures
            .iter()
            .flat_map(|r| r.metrics.iter().filter(|(m, _, _)| m == metric))
            .flat_map(|(_, _, v)| v.iter().copied())
            .collect()
    }

    /// The mean of `metric` over each capture's samples (harmonic or arithmetic), in capture
    /// order.
    pub fn capture_means(&self, metric: &str, harmonic: bool) -> Vec<f64> {
        self.captures
            .iter()
            .filter_map(|r| r.metrics.iter().find(|(m, _, _)| m == metric))
            .map(|(_, _, v)| if harmonic { hmean(v) } else { amean(v) })
            .collect()
    }

    /// Simulated events of all its replays.
    pub fn events(&self) -> u64 {
        self.captures.iter().map(|r| r.events).sum()
    }

    /// Replay seconds of all its replays.
    pub fn seconds(&self) -> f64 {
        self.captures.iter().map(|r| r.seconds).sum()
    }
}

/// A profile's projection.
#[derive(Clone, Debug)]
pub struct Projection {
    pub profile: Profile,
    /// The captures, in the order they were taken (at least one).
    pub traces: Vec<Trace>,
    pub rows: Vec<ProjRow>,
}

/// Captures per profile when none is asked for: each is replayed, so the projected rows
/// carry the capture noise (`pagelab project --captures`).
pub const DEFAULT_CAPTURES: usize = 3;

/// Progress of a projection, for a bar or a log line.
pub enum Progress<'a> {
    Capturing {
        profile: &'a str,
        round: usize,
        rounds: usize,
    },
    /// The round's profiles run side by side to set their captures' compute
    /// ([`crate::capture::pace`]).
    Pacing {
        profiles: usize,
        round: usize,
        rounds: usize,
    },
    Replayed {
        done: usize,
        total: usize,
    },
    /// A sensitivity variant replayed: the machine with `param` scaled by `factor`
    /// ([`crate::sensitivity`]).
    Variant {
        done: usize,
        total: usize,
        param: &'a str,
        factor: f64,
    },
}

/// Replays `trace` for one row: `samples` windows of a cyclic trace's replay, one value of a
/// fixed-work trace's (which `samples` does not multiply).
pub fn replay_row(
    machine: &Machine,
    trace: &Trace,
    mode: Mode,
    tasks: usize,
    samples: usize,
    seed: u64,
    ops_per_cpu: u64,
) -> Result<Row, ProjectError> {
    let t0 = Instant::now();
    // A pair trace's tasks are pairs, and its metric is its send size's.
    let pair_metric = trace
        .receiver_turns()
        .map(|_| crate::netpipe::metric_of(trace));
    let spec = ReplaySpec {
        tasks: if pair_metric.is_some() {
            2 * tasks
        } else {
            tasks
        },
        threads: mode == Mode::Threads,
        seed,
        samples,
        ops_per_cpu: Some(ops_per_cpu),
    };
    let replay = Replay::new(machine, trace, spec)?;
    // One replay, whatever the window: a fixed-work replay gives one value, whatever `samples`
    // says. The seed draws where each CPU starts, which spinner a ticket lock serves next and
    // the host's time slices (a self-check row). Over four seeds (2026-11-30, `REPLAY_SEEDS=4`
    // of `replay_speed`) pft's rows moved by 0.01 to 0.13% of their rate (a pvl-v2 capture at
    // 4 to 128 threads), against captures' ranges of 1 to 3%; a ticket-lock convoy moves more
    // (lameter-2005's linux-2.6.13 on the Altix: 2.7% at 64 threads, where the kernels differ
    // by a factor of 16; docs/model-history.md, round 41). More seeds would multiply the
    // replay's time for that; a row's repetitions are its captures.
    let r = replay.run(seed)?;
    let metrics = match trace.meta.window {
        // The trace's operations per second: `faults/sec` for will-it-scale, `ops/sec` for
        // kvcache and the research benchmarks' iterations or requests (their measured metric),
        // or a netpipe pair's send size's metric.
        Window::Cycle => vec![(
            pair_metric.unwrap_or_else(|| format!("{}/sec", trace.meta.op_unit)),
            true,
            r.samples,
        )],
        Window::Once => vec![
            (
                "faults/cpu".to_string(),
                true,
                vec![r.ops_per_cpu_sec.unwrap_or(0.0)],
            ),
            ("faults/sec".to_string(), true, r.samples),
        ],
    };
    Ok(Row {
        mode,
        tasks,
        metrics,
        classes: r.classes,
        ops: r.ops,
        span_ns: r.span_ns,
        events: r.events,
        seconds: t0.elapsed().as_secs_f64(),
    })
}

/// Captures every profile `captures` times, in turns (A1 B1 A2 B2 ...): whatever else runs on
/// a shared host slows the captures taken meanwhile, and taking turns spreads that over all
/// profiles alike (as `reproduce` interleaves its repetitions). Returns each profile's
/// captures, or `None` when `stop` was set.
///
/// A capture lasts seconds, and this host's speed drifts as fast, so after each round of a
/// workload that [`pace::paceable`], the round's profiles also run side by side in short
/// turns ([`pace::pace`]), and each capture of the round is given the compute per operation
/// the pacing says its profile has against the others, at the level the round's captures
/// measured together ([`pace::Paced::targets`]). Each round is paced on its own, so the
/// spread between captures still holds the pacing's noise.
///
/// The rounds' levels are then brought to the quickest round's ([`Trace::scale_compute`]):
/// every profile of a round keeps its compute relative to the others, and the round's level
/// is multiplied by the quickest level over the round's own. The level is the engine's
/// speed on this host while the round ran, and the host's drift between rounds a few
/// seconds apart is large: the baseline's paced compute in `validate`'s two rounds of
/// page_fault1-2018 came out 313 and 493 ns an operation in one run, 429 and 336 in another
/// (2026-11-30). A slower level lengthens every critical section, which at 64 processes
/// moved the baseline's projected row by up to a third between its captures. What slows
/// the engine here (the host's other guests, its interruptions) only adds time, so the
/// quickest round is the nearest to the engine's own speed. (The least of a few noisy levels
/// is biased low, more so with more rounds: with `validate`'s two rounds the bias is that of
/// the lesser of two.)
pub fn capture_all(
    spec: &ProjectSpec,
    progress: &mut dyn FnMut(Progress<'_>),
    stop: &AtomicBool,
) -> Result<Option<Vec<Vec<Trace>>>, ProjectError> {
    spec.check()?;
    let mut traces: Vec<Vec<Trace>> = vec![Vec::new(); spec.profiles.len()];
    let paced = pace::paceable(spec.workload) && spec.profiles.len() >= 2;
    // Each paced round's level, where it had one.
    let mut levels: Vec<Option<f64>> = Vec::new();
    for round in 0..spec.captures {
        let mut raws: Vec<RawCapture> = Vec::new();
        for (i, p) in spec.profiles.iter().enumerate() {
            if stop.load(Ordering::Relaxed) {
                return Ok(None);
            }
            progress(Progress::Capturing {
                profile: &p.name,
                round: round + 1,
                rounds: spec.captures,
            });
            if spec.workload == WorkloadKind::Netpipe {
                // One pair trace per send size, each replayed as a capture of its own metric.
                for &send_size in &pagelab_workloads::netpipe::SEND_SIZES {
                    traces[i].push(crate::netpipe::capture_pair(
                        &crate::netpipe::PairCaptureSpec {
                            profile: p.clone(),
                            kernel_cpus: spec.machine.nr_cpus(),
                            send_size,
                            messages: crate::netpipe::MESSAGES,
                        },
                    )?);
                }
                continue;
            }
            let mut cs = CaptureSpec::for_machine(spec.workload, p.clone(), &spec.machine);
            cs.kvcache = spec.kvcache;
            if paced {
                raws.push(capture_raw(&cs)?);
            } else {
                traces[i].push(capture(&cs)?);
            }
        }
        if paced {
            if stop.load(Ordering::Relaxed) {
                return Ok(None);
            }
            progress(Progress::Pacing {
                profiles: spec.profiles.len(),
                round: round + 1,
                rounds: spec.captures,
            });
            let timed = pace::pace(
                spec.workload,
                &spec.profiles,
                spec.machine.nr_cpus(),
                PFT_BYTES,
                pace::TURNS,
            )?;
            let measured: Vec<Option<f64>> = raws.iter().map(|r| r.compute_per_op()).collect();
            if let (Some(targets), Some(rel)) = (timed.targets(&measured), timed.relative()) {
                for ((r, t), rel) in raws.iter_mut().zip(targets).zip(rel) {
                    r.pace_to(t, rel, pace::TURNS);
                }
            }
            levels.push(timed.level(&measured));
            for (i, r) in raws.into_iter().enumerate() {
                traces[i].push(r.build());
            }
        }
    }
    if paced {
        level_rounds(&mut traces, &levels);
    }
    Ok(Some(traces))
}

/// Brings every paced round's compute to the quickest round's level ([`capture_all`]):
/// `traces[p][r]` is profile `p`'s capture of round `r`, `levels[r]` that round's level.
/// A round without a level (its pacing or captures gave none) is left as it is.
fn level_rounds(traces: &mut [Vec<Trace>], levels: &[Option<f64>]) {
    let quickest = levels
        .iter()
        .flatten()
        .copied()
        .filter(|l| l.is_finite() && *l > 0.0)
        .reduce(f64::min);
    let Some(quickest) = quickest else {
        return;
    };
    for caps in traces.iter_mut() {
        for (t, level) in caps.iter_mut().zip(levels) {
            if let Some(l) = level.filter(|l| l.is_finite() && *l > 0.0)
                && t.meta.paced.is_some()
            {
                t.scale_compute(quickest / l);
            }
        }
    }
}

/// Captures every profile and replays every row of every capture. Stops between rows when
/// `stop` is set (returning what was projected, and `true`).
pub fn project(
    spec: &ProjectSpec,
    progress: &mut dyn FnMut(Progress<'_>),
    stop: &AtomicBool,
) -> Result<(Vec<Projection>, bool), ProjectError> {
    match capture_all(spec, progress, stop)? {
        None => Ok((Vec::new(), true)),
        Some(traces) => project_traces(spec, traces, progress, stop),
    }
}

/// The seed of capture `c`'s replay: each capture of a row replays with a seed of its own, so
/// that the captures' replays are not the same draws of the replay's randomness. (Until
/// 2026-11-30 a fixed-work row took `samples` seeds a capture, and capture `c` started at
/// `seed + c x samples`; now `--samples` counts a cyclic replay's windows only, and no seed
/// depends on it.)
fn capture_seed(spec: &ProjectSpec, c: usize) -> u64 {
    spec.seed.wrapping_add(c as u64)
}

/// Replays every row of every capture in `traces` (one list per profile of `spec`, in its
/// order, at least one capture each). Rows are independent replays, so they run on as many
/// threads as the host offers; the result does not depend on how many (each replay's seed is
/// fixed by its capture and the spec).
pub fn project_traces(
    spec: &ProjectSpec,
    traces: Vec<Vec<Trace>>,
    progress: &mut dyn FnMut(Progress<'_>),
    stop: &AtomicBool,
) -> Result<(Vec<Projection>, bool), ProjectError> {
    spec.check()?;
    if traces.len() != spec.profiles.len() || traces.iter().any(Vec::is_empty) {
        return Err(ProjectError::Request(format!(
            "{} profiles to project but captures for {}",
            spec.profiles.len(),
            traces.iter().filter(|t| !t.is_empty()).count()
        )));
    }
    // One job per (profile, mode, tasks, capture), in the order the rows are stored.
    let mut jobs = Vec::new();
    for (p, caps) in traces.iter().enumerate() {
        for &mode in &spec.modes {
            for &tasks in &spec.tasks {
                for c in 0..caps.len() {
                    jobs.push((p, mode, tasks, c));
                }
            }
        }
    }
    let total = jobs.len();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(total.max(1));
    let (tx, rx) = std::sync::mpsc::channel::<(usize, Result<Row, ProjectError>)>();
    let mut results: Vec<Option<Row>> = vec![None; total];
    let mut first_error: Option<(usize, ProjectError)> = None;
    std::thread::scope(|s| {
        for _ in 0..workers {
            let tx = tx.clone();
            let (jobs, traces, next) = (&jobs, &traces, &next);
            s.spawn(move || {
                loop {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let j = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&(p, mode, tasks, c)) = jobs.get(j) else {
                        return;
                    };
                    let r = replay_row(
                        &spec.machine,
                        &traces[p][c],
                        mode,
                        tasks,
                        spec.samples,
                        capture_seed(spec, c),
                        spec.ops_for(tasks),
                    );
                    let failed = r.is_err();
                    if tx.send((j, r)).is_err() || failed {
                        // An error ends the projection: the other workers stop at their next row.
                        next.store(jobs.len(), Ordering::Relaxed);
                        return;
                    }
                }
            });
        }
        drop(tx);
        let mut done = 0;
        for (j, r) in rx {
            match r {
                Ok(row) => {
                    results[j] = Some(row);
                    done += 1;
                    progress(Progress::Replayed { done, total });
                }
                Err(e) => {
                    if first_error.as_ref().is_none_or(|(k, _)| j < *k) {
                        first_error = Some((j, e));
                    }
                }
            }
        }
    });
    if let Some((_, e)) = first_error {
        return Err(e);
    }
    // Assemble each profile's rows, in order, up to the first row not replayed (an interrupt).
    let mut out = Vec::new();
    let mut results = results.into_iter();
    let mut interrupted = false;
    for (p, caps) in spec.profiles.iter().zip(traces) {
        let mut rows = Vec::new();
        'rows: for &mode in &spec.modes {
            for &tasks in &spec.tasks {
                let mut captures = Vec::new();
                for _ in 0..caps.len() {
                    match results.next().flatten() {
                        Some(r) if !interrupted => captures.push(r),
                        _ => {
                            interrupted = true;
                            break 'rows;
                        }
                    }
                }
                rows.push(ProjRow {
                    mode,
                    tasks,
                    captures,
                });
            }
        }
        if interrupted && rows.is_empty() {
            break;
        }
        out.push(Projection {
            profile: p.clone(),
            traces: caps,
            rows,
        });
        if interrupted {
            break;
        }
    }
    Ok((out, interrupted))
}

/// The label a projected profile is stored under by default: `<profile>@<machine>`.
pub fn default_label(profile: &str, machine: &str) -> String {
    format!("{profile}@{machine}")
}

/// Refuses a projection with a figure no machine could give (not finite, negative, or a task
/// count beyond any machine's) before anything of it is stored: a replay defect must show up as
/// an error, not as a plausible-looking row that `compare` pools with the others.
pub fn check_rows(p: &Projection) -> Result<(), ProjectError> {
    for row in p.rows.iter().flat_map(|r| &r.captures) {
        let at = || format!("{} {} {}", p.profile.name, row.mode, row.tasks);
        if row.tasks == 0 || row.tasks > crate::machine::MAX_CPUS {
            return Err(ProjectError::Replay(format!(
                "projection of {}: {} tasks; nothing was stored",
                at(),
                row.tasks
            )));
        }
        let values = row
            .metrics
            .iter()
            .flat_map(|(m, _, v)| v.iter().map(move |x| (m.clone(), *x)))
            .chain(row.counters());
        for (what, v) in values {
            if !(v.is_finite() && v >= 0.0) {
                return Err(ProjectError::Replay(format!(
                    "projection of {}: {what} is {v}, not a finite figure; nothing was stored",
                    at()
                )));
            }
        }
    }
    Ok(())
}

/// Stores one projection as a run of origin `projected`, each capture's samples and lock
/// counters as one repeat of its row; returns its id.
#[allow(clippy::too_many_arguments)]
pub fn store_projection(
    store: &Store,
    p: &Projection,
    label: &str,
    machine: &Machine,
    experiment: Option<&str>,
    command: &str,
    host_json: Option<String>,
    complete: bool,
) -> Result<i64, ProjectError> {
    check_rows(p)?;
    let meta = RunMeta {
        label: label.to_string(),
        workload: p.traces[0].meta.workload.clone(),
        target: "projector".into(),
        origin: Origin::Projected,
        profile: Some(p.profile.name.clone()),
        profile_toml: Some(p.traces[0].meta.profile_toml.clone()),
        host_json,
        machine: Some(machine.name.clone()),
        experiment: experiment.map(str::to_string),
        pagelab_version: env!("CARGO_PKG_VERSION").to_string(),
        command: command.to_string(),
    };
    let id = store.begin_run(&meta)?;
    let result = (|| -> Result<(), ProjectError> {
        for (repeat, row) in p.rows.iter().flat_map(|r| r.captures.iter().enumerate()) {
            let repeat = repeat as u32;
            for (metric, hib, values) in &row.metrics {
                let key = SampleKey {
                    mode: row.mode.to_string(),
                    tasks: row.tasks as u32,
                    metric: metric.clone(),
                    higher_is_better: *hib,
                };
                store.add_samples(id, &key, repeat, values)?;
            }
            store.add_counters(
                id,
                &row.mode.to_string(),
                row.tasks as u32,
                repeat,
                &row.counters(),
            )?;
        }
        Ok(())
    })();
    let status = if result.is_ok() && complete {
        Status::Complete
    } else {
        Status::Incomplete
    };
    store.finish_run(id, status)?;
    result.map(|()| id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{Event, Pinning, TraceMeta};
    use pagelab_bench::results::RunFilter;

    fn trace() -> Trace {
        trace_of(500.0)
    }

    /// A pft trace of two faults, each `ns` of compute.
    fn trace_of(ns: f64) -> Trace {
        Trace {
            meta: TraceMeta {
                workload: "pft".into(),
                profile: "linux-6.7".into(),
                profile_toml: String::new(),
                op_unit: "faults".into(),
                window: Window::Once,
                pinning: Pinning::Spread,
                shared_vma: true,
                kernel_cpus: 2,
                host_cpu: "test".into(),
                host_ghz: 3.0,
                ops: 2,
                raw_events: 0,
                overhead_ns_per_event: 0.0,
                traced_ns: 1.0,
                untraced_ns: 1.0,
                untraced_write_ns: None,
                event_cost_ns: None,
                untraced_unmap_ns: None,
                unmap_event_cost_ns: None,
                untraced_holds: Vec::new(),
                compute_scale: 1.0,
                guard: None,
                paced: None,
                iterations: 1,
            },
            instances: Vec::new(),
            events: vec![
                Event::Compute { ns },
                Event::Ops { n: 1 },
                Event::Compute { ns },
                Event::Ops { n: 1 },
            ],
            fallbacks: Vec::new(),
        }
    }

    /// A paced trace of two faults, each `ns` of compute.
    fn paced_of(ns: f64) -> Trace {
        let mut t = trace_of(ns);
        t.meta.paced = Some(crate::trace::PacedCompute {
            measured_ns: ns,
            compute_ns: ns,
            relative: 1.0,
            turns: 10,
            level_scale: 1.0,
        });
        t
    }

    fn compute_of(t: &Trace) -> f64 {
        t.events
            .iter()
            .map(|e| match *e {
                Event::Compute { ns } => ns,
                _ => 0.0,
            })
            .sum()
    }

    /// Three rounds of two profiles, levels 400, 300 and 600 (one profile at 1.2 times the
    /// other within each): every round is brought to 300, each keeping its profiles' ratio,
    /// and the trace says by how much; a round without a level and an unpaced trace are
    /// left alone.
    #[test]
    fn paced_rounds_are_brought_to_the_quickest_rounds_level() {
        let levels = [Some(400.0), Some(300.0), Some(600.0), None];
        let mut traces: Vec<Vec<Trace>> = [1.0, 1.2]
            .iter()
            .map(|rel| {
                levels
                    .iter()
                    .map(|l| paced_of(rel * l.unwrap_or(500.0)))
                    .collect()
            })
            .collect();
        traces[0][0] = trace_of(400.0);
        let measured: Vec<f64> = traces[1]
            .iter()
            .map(|t| t.meta.untraced_measured_ns())
            .collect();
        level_rounds(&mut traces, &levels);
        for (p, rel) in [1.0, 1.2].iter().enumerate() {
            for r in (0..3).filter(|&r| p == 1 || r > 0) {
                let t = &traces[p][r];
                let want = 2.0 * rel * 300.0;
                assert!(
                    (compute_of(t) - want).abs() < 1e-6,
                    "profile {p} round {r}: {}",
                    compute_of(t)
                );
                let paced = t.meta.paced.as_ref().unwrap();
                assert!((paced.compute_ns - rel * 300.0).abs() < 1e-9);
                assert!((paced.level_scale - 300.0 / levels[r].unwrap()).abs() < 1e-12);
                assert!((t.meta.compute_scale - paced.level_scale).abs() < 1e-12);
            }
        }
        assert_eq!(compute_of(&traces[0][0]), 800.0, "unpaced: as it was");
        assert_eq!(compute_of(&traces[1][3]), 1200.0, "no level: as it was");
        // What the captures measured is what they measured, whatever they were given.
        for (t, m) in traces[1].iter().zip(measured) {
            assert!((t.meta.untraced_measured_ns() - m).abs() < 1e-6);
        }
        // No round with a level: nothing changes.
        let mut alone = vec![vec![paced_of(400.0)]];
        level_rounds(&mut alone, &[None]);
        assert_eq!(compute_of(&alone[0][0]), 800.0);
    }

    #[test]
    fn a_projection_with_a_non_finite_figure_is_refused_and_nothing_stored() {
        let m = Machine::load("dev-host").unwrap();
        let t = trace();
        let row = replay_row(&m, &t, Mode::Threads, 2, 2, 1, 64).unwrap();
        let good = Projection {
            profile: pagelab_bench::profiles::load("linux-6.7").unwrap(),
            traces: vec![t],
            rows: vec![ProjRow {
                mode: Mode::Threads,
                tasks: 2,
                captures: vec![row],
            }],
        };
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("r.db")).unwrap();
        store_projection(&store, &good, "ok@dev-host", &m, None, "test", None, true).unwrap();
        let stored = |s: &Store| s.runs(&RunFilter::default()).unwrap().len();
        assert_eq!(stored(&store), 1);
        for bad in [f64::NAN, f64::INFINITY, -1.0] {
            let mut p = good.clone();
            p.rows[0].captures[0].metrics[1].2[0] = bad;
            let e = store_projection(&store, &p, "bad@dev-host", &m, None, "test", None, true)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("faults/sec is") && e.contains("nothing was stored"),
                "{e}"
            );
        }
        let mut p = good.clone();
        p.rows[0].captures[0].classes.push(ClassStats {
            name: "zone->lock".into(),
            wait_ns: f64::NAN,
            ..Default::default()
        });
        let e = store_projection(&store, &p, "bad@dev-host", &m, None, "test", None, true)
            .unwrap_err()
            .to_string();
        assert!(e.contains("lock:zone->lock:wait_ns is NaN"), "{e}");
        assert_eq!(stored(&store), 1, "no run begun for a refused projection");
    }

    /// A row's lock statistics merge its captures' replays as one longer run: acquisitions
    /// and waits per operation over both replays' operations, the mean hold over both
    /// replays' holds, the held share over both spans; classes that were never taken, held
    /// or transferred are left out, and the classes come in the order of their waits, then
    /// of their shares held.
    #[test]
    fn lock_statistics_merge_the_captures_per_operation() {
        let class =
            |name: &str, acq: u64, cont: u64, wait: f64, holds: u64, hold: f64| ClassStats {
                name: name.into(),
                acquisitions: acq,
                contended: cont,
                wait_ns: wait,
                holds,
                hold_ns: hold,
                ..Default::default()
            };
        let row = |ops: u64, span_ns: f64, classes: Vec<ClassStats>| Row {
            mode: Mode::Processes,
            tasks: 4,
            metrics: Vec::new(),
            classes,
            ops,
            span_ns,
            events: 0,
            seconds: 0.0,
        };
        // 30 accesses: 20 of the line itself, 100 ns of it queued (also in the waits), and 10
        // list entries (their 100 ns are in `line_ns` too).
        let mut line = class("free_area", 0, 0, 100.0, 0, 0.0);
        line.line_events = 30;
        line.line_ns = 500.0;
        line.line_queued_ns = 100.0;
        line.entry_events = 10;
        line.entry_ns = 100.0;
        let r = ProjRow {
            mode: Mode::Processes,
            tasks: 4,
            captures: vec![
                row(
                    1000,
                    1e6,
                    vec![
                        class("zone->lock", 100, 50, 20_000.0, 100, 100_000.0),
                        class("lru_lock", 200, 0, 0.0, 200, 50_000.0),
                        class("never", 0, 0, 0.0, 0, 0.0),
                        line,
                    ],
                ),
                row(
                    3000,
                    3e6,
                    vec![class("zone->lock", 300, 250, 180_000.0, 300, 500_000.0)],
                ),
            ],
        };
        let s = r.lock_stat();
        let names: Vec<&str> = s.iter().map(|l| l.class.as_str()).collect();
        // Waits first, then the share held.
        assert_eq!(names, ["zone->lock", "free_area", "lru_lock"]);
        let z = &s[0];
        assert_eq!(z.acquisitions_per_op, 400.0 / 4000.0);
        assert_eq!(z.contended, 300.0 / 400.0);
        assert_eq!(z.wait_ns_per_op, 200_000.0 / 4000.0);
        assert_eq!(z.hold_ns, Some(600_000.0 / 400.0));
        assert_eq!(z.held, 600_000.0 / 4e6);
        assert_eq!(s[2].contended, 0.0);
        assert_eq!(s[2].held, 50_000.0 / 4e6);
        assert_eq!(s[1].hold_ns, None);
        assert_eq!(s[1].wait_ns_per_op, 100.0 / 4000.0);
        assert_eq!(
            s[1].line_ns_per_op,
            400.0 / 4000.0,
            "transfers, queueing apart"
        );
        // A row that completed nothing has nothing per operation.
        let mut idle = r.clone();
        for c in &mut idle.captures {
            c.ops = 0;
        }
        assert!(idle.lock_stat().is_empty());
        // The holds reach the store beside the waits.
        let counters = r.captures[0].counters();
        assert!(counters.contains(&("lock:zone->lock:hold_ns".into(), 100_000.0)));
        assert!(counters.contains(&("lock:lru_lock:holds".into(), 200.0)));
        assert!(!counters.iter().any(|(k, _)| k == "lock:never:holds"));
    }

    /// Two captures of one profile, one twice as slow as the other (a neighbour's load during
    /// the second): both are replayed, the row's samples and capture means hold both speeds,
    /// and the stored run keeps one repeat per capture. Keeping only the quicker capture (as
    /// the projector did) would have hidden the second.
    #[test]
    fn a_rows_spread_holds_every_capture() {
        let m = Machine::load("dev-host").unwrap();
        let profile = pagelab_bench::profiles::load("linux-6.7").unwrap();
        let spec = ProjectSpec {
            machine: m.clone(),
            workload: WorkloadKind::Pft,
            profiles: vec![profile],
            modes: vec![Mode::Threads],
            tasks: vec![1, 2],
            samples: 2,
            captures: 2,
            seed: 1,
            ops_per_cpu: 64,
            region_bytes: None,
            kvcache: None,
        };
        let stop = AtomicBool::new(false);
        let (proj, interrupted) = project_traces(
            &spec,
            vec![vec![trace_of(500.0), trace_of(1000.0)]],
            &mut |_| {},
            &stop,
        )
        .unwrap();
        assert!(!interrupted);
        assert_eq!(proj[0].rows.len(), 2);
        let row = &proj[0].rows[0];
        assert_eq!((row.tasks, row.captures.len()), (1, 2));
        let means = row.capture_means("faults/sec", true);
        assert_eq!(means.len(), 2);
        // One fault is 500 or 1000 ns of compute (the clock ratio applies alike to both).
        let ratio = means[0] / means[1];
        assert!((ratio - 2.0).abs() < 0.05, "{means:?}");
        // One value a capture: a fixed-work row is not replayed again with other seeds, so its
        // values are its captures' means.
        let v = row.values("faults/sec");
        assert_eq!(v.len(), means.len(), "{v:?} {means:?}");
        for (x, m) in v.iter().zip(&means) {
            assert!((x - m).abs() <= 1e-9 * m, "{v:?} {means:?}");
        }
        // Stored as one repeat per capture.
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("r.db")).unwrap();
        let id =
            store_projection(&store, &proj[0], "x@dev-host", &m, None, "test", None, true).unwrap();
        let samples = store.samples(&[id]).unwrap();
        let repeats: std::collections::BTreeSet<u32> = samples.iter().map(|s| s.repeat).collect();
        assert_eq!(repeats.into_iter().collect::<Vec<_>>(), [0, 1]);
        assert_eq!(
            samples.len(),
            2 * 2 * 2,
            "rows x captures x metrics: one replay a capture, whatever `samples` says"
        );
        // The replays are the same whatever the number of worker threads: a second run gives
        // the same numbers.
        let (again, _) = project_traces(
            &spec,
            vec![vec![trace_of(500.0), trace_of(1000.0)]],
            &mut |_| {},
            &stop,
        )
        .unwrap();
        assert_eq!(
            again[0].rows[1].values("faults/cpu"),
            proj[0].rows[1].values("faults/cpu")
        );
    }

    #[test]
    fn captures_must_match_the_profiles() {
        let m = Machine::load("dev-host").unwrap();
        let spec = ProjectSpec {
            machine: m,
            workload: WorkloadKind::Pft,
            profiles: vec![pagelab_bench::profiles::load("linux-6.7").unwrap()],
            modes: vec![Mode::Threads],
            tasks: vec![1],
            samples: 1,
            captures: 0,
            seed: 1,
            ops_per_cpu: 64,
            region_bytes: None,
            kvcache: None,
        };
        let stop = AtomicBool::new(false);
        let e = project_traces(&spec, vec![vec![trace()]], &mut |_| {}, &stop)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--captures must be at least 1"), "{e}");
        let spec = ProjectSpec {
            captures: 1,
            ..spec
        };
        let e = project_traces(&spec, vec![vec![]], &mut |_| {}, &stop)
            .unwrap_err()
            .to_string();
        assert!(e.contains("captures for 0"), "{e}");
    }
}
