//! Projection: an experiment's profiles, task counts and modes, replayed on a machine, as rows
//! the results store keeps beside measured ones (origin `projected`).
//!
//! Each profile is captured (one task on the engine, with as many virtual CPUs as the machine
//! has; twice, in turns with the other profiles, keeping the quicker) and the trace is
//! replayed for every mode and task count. Cyclic workloads
//! (will-it-scale) give `samples` sample windows from one replay, like will-it-scale's
//! per-second samples; fixed-work ones (pft) give one value per replay, replayed with
//! `samples` seeds, like pft's repetitions.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use pagelab_bench::profiles::Profile;
use pagelab_bench::results::{Origin, RunMeta, SampleKey, Status};
use pagelab_bench::store::Store;
use pagelab_workloads::{Mode, WorkloadKind};

use crate::capture::{CaptureSpec, capture, shape};
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
    pub seed: u64,
    /// Fixed-work workloads: operations per replayed CPU (a prefix of the trace).
    pub ops_per_cpu: u64,
}

impl ProjectSpec {
    /// Checks the request against the machine before anything is captured.
    pub fn check(&self) -> Result<(), String> {
        shape(self.workload)?;
        if self.profiles.is_empty() || self.modes.is_empty() || self.tasks.is_empty() {
            return Err("nothing to project: give profiles, modes and task counts".into());
        }
        if self.samples == 0 {
            return Err("--samples must be at least 1".into());
        }
        let max = self.tasks.iter().copied().max().unwrap_or(0);
        if max > self.machine.nr_cpus() {
            return Err(format!(
                "{max} tasks is more than the {} CPUs of {}; the projector runs one task per CPU",
                self.machine.nr_cpus(),
                self.machine.name
            ));
        }
        if self.tasks.contains(&0) {
            return Err("a task count must be at least 1".into());
        }
        Ok(())
    }
}

/// One projected row: a profile at one mode and task count.
#[derive(Clone, Debug)]
pub struct Row {
    pub mode: Mode,
    pub tasks: usize,
    /// `(metric, higher_is_better, samples)`.
    pub metrics: Vec<(String, bool, Vec<f64>)>,
    pub classes: Vec<ClassStats>,
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
        }
        out
    }
}

/// A profile's projection.
#[derive(Clone, Debug)]
pub struct Projection {
    pub profile: Profile,
    pub trace: Trace,
    pub rows: Vec<Row>,
}

/// Captures per profile; the quickest is kept.
pub const CAPTURE_ROUNDS: usize = 2;

/// Progress of a projection, for a bar or a log line.
pub enum Progress<'a> {
    Capturing { profile: &'a str },
    Replayed { done: usize, total: usize },
}

/// Replays `trace` for one row.
pub fn replay_row(
    machine: &Machine,
    trace: &Trace,
    mode: Mode,
    tasks: usize,
    samples: usize,
    seed: u64,
    ops_per_cpu: u64,
) -> Result<Row, String> {
    let t0 = Instant::now();
    let spec = ReplaySpec {
        tasks,
        threads: mode == Mode::Threads,
        seed,
        samples,
        ops_per_cpu: Some(ops_per_cpu),
    };
    let replay = Replay::new(machine, trace, spec)?;
    let mut events = 0;
    let (metrics, classes) = match trace.meta.window {
        Window::Cycle => {
            let r = replay.run(seed)?;
            events += r.events;
            (vec![("faults/sec".to_string(), true, r.samples)], r.classes)
        }
        Window::Once => {
            let (mut per_cpu, mut per_sec) = (Vec::new(), Vec::new());
            let mut classes: Vec<ClassStats> = Vec::new();
            for i in 0..samples {
                let r = replay.run(seed.wrapping_add(i as u64))?;
                events += r.events;
                per_sec.push(r.samples[0]);
                per_cpu.push(r.ops_per_cpu_sec.unwrap_or(0.0));
                for c in r.classes {
                    match classes.iter_mut().find(|x| x.name == c.name) {
                        Some(x) => {
                            x.acquisitions += c.acquisitions;
                            x.contended += c.contended;
                            x.wait_ns += c.wait_ns;
                            x.fallbacks += c.fallbacks;
                        }
                        None => classes.push(c),
                    }
                }
            }
            (
                vec![
                    ("faults/cpu".to_string(), true, per_cpu),
                    ("faults/sec".to_string(), true, per_sec),
                ],
                classes,
            )
        }
    };
    Ok(Row {
        mode,
        tasks,
        metrics,
        classes,
        events,
        seconds: t0.elapsed().as_secs_f64(),
    })
}

/// Captures every profile and replays every row. Stops between rows when `stop` is set
/// (returning what was projected, and `true`).
pub fn project(
    spec: &ProjectSpec,
    progress: &mut dyn FnMut(Progress<'_>),
    stop: &AtomicBool,
) -> Result<(Vec<Projection>, bool), String> {
    spec.check()?;
    // Capture every profile, in turns, `CAPTURE_ROUNDS` times, and keep each profile's
    // quickest untraced run: on a shared host, whatever else runs slows the captures taken
    // meanwhile, and taking turns spreads that over all profiles alike (as `reproduce`
    // interleaves its repetitions).
    let mut traces: Vec<Option<Trace>> = vec![None; spec.profiles.len()];
    for _ in 0..CAPTURE_ROUNDS {
        for (i, p) in spec.profiles.iter().enumerate() {
            if stop.load(Ordering::Relaxed) {
                return Ok((Vec::new(), true));
            }
            progress(Progress::Capturing { profile: &p.name });
            let t = capture(&CaptureSpec::new(
                spec.workload,
                p.clone(),
                spec.machine.nr_cpus(),
            ))?;
            let per_op = |t: &Trace| t.meta.untraced_ns / t.meta.ops.max(1) as f64;
            if traces[i].as_ref().is_none_or(|b| per_op(&t) < per_op(b)) {
                traces[i] = Some(t);
            }
        }
    }
    let total = spec.profiles.len() * spec.modes.len() * spec.tasks.len();
    let mut done = 0;
    let mut out = Vec::new();
    for (p, trace) in spec.profiles.iter().zip(traces) {
        let trace = trace.expect("every profile was captured");
        let mut rows = Vec::new();
        for &mode in &spec.modes {
            for &tasks in &spec.tasks {
                if stop.load(Ordering::Relaxed) {
                    out.push(Projection {
                        profile: p.clone(),
                        trace,
                        rows,
                    });
                    return Ok((out, true));
                }
                rows.push(replay_row(
                    &spec.machine,
                    &trace,
                    mode,
                    tasks,
                    spec.samples,
                    spec.seed,
                    spec.ops_per_cpu,
                )?);
                done += 1;
                progress(Progress::Replayed { done, total });
            }
        }
        out.push(Projection {
            profile: p.clone(),
            trace,
            rows,
        });
    }
    Ok((out, false))
}

/// The label a projected profile is stored under by default: `<profile>@<machine>`.
pub fn default_label(profile: &str, machine: &str) -> String {
    format!("{profile}@{machine}")
}

/// Refuses a projection with a figure no machine could give (not finite, negative, or a task
/// count beyond any machine's) before anything of it is stored: a replay defect must show up as
/// an error, not as a plausible-looking row that `compare` pools with the others.
pub fn check_rows(p: &Projection) -> Result<(), String> {
    for row in &p.rows {
        let at = || format!("{} {} {}", p.profile.name, row.mode, row.tasks);
        if row.tasks == 0 || row.tasks > crate::machine::MAX_CPUS {
            return Err(format!(
                "projection of {}: {} tasks; nothing was stored",
                at(),
                row.tasks
            ));
        }
        let values = row
            .metrics
            .iter()
            .flat_map(|(m, _, v)| v.iter().map(move |x| (m.clone(), *x)))
            .chain(row.counters());
        for (what, v) in values {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!(
                    "projection of {}: {what} is {v}, not a finite figure; nothing was stored",
                    at()
                ));
            }
        }
    }
    Ok(())
}

/// Stores one projection as a run of origin `projected`; returns its id.
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
) -> Result<i64, String> {
    check_rows(p)?;
    let meta = RunMeta {
        label: label.to_string(),
        workload: p.trace.meta.workload.clone(),
        target: "projector".into(),
        origin: Origin::Projected,
        profile: Some(p.profile.name.clone()),
        profile_toml: Some(p.trace.meta.profile_toml.clone()),
        host_json,
        machine: Some(machine.name.clone()),
        experiment: experiment.map(str::to_string),
        pagelab_version: env!("CARGO_PKG_VERSION").to_string(),
        command: command.to_string(),
    };
    let id = store.begin_run(&meta).map_err(|e| e.to_string())?;
    let result = (|| -> Result<(), String> {
        for row in &p.rows {
            for (metric, hib, values) in &row.metrics {
                let key = SampleKey {
                    mode: row.mode.to_string(),
                    tasks: row.tasks as u32,
                    metric: metric.clone(),
                    higher_is_better: *hib,
                };
                store
                    .add_samples(id, &key, 0, values)
                    .map_err(|e| e.to_string())?;
            }
            store
                .add_counters(
                    id,
                    &row.mode.to_string(),
                    row.tasks as u32,
                    0,
                    &row.counters(),
                )
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    })();
    let status = if result.is_ok() && complete {
        Status::Complete
    } else {
        Status::Incomplete
    };
    store.finish_run(id, status).map_err(|e| e.to_string())?;
    result.map(|()| id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{Event, Pinning, TraceMeta};
    use pagelab_bench::results::RunFilter;

    fn trace() -> Trace {
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
                compute_scale: 1.0,
            },
            instances: Vec::new(),
            events: vec![
                Event::Compute { ns: 500.0 },
                Event::Ops { n: 1 },
                Event::Compute { ns: 500.0 },
                Event::Ops { n: 1 },
            ],
            fallbacks: Vec::new(),
        }
    }

    #[test]
    fn a_projection_with_a_non_finite_figure_is_refused_and_nothing_stored() {
        let m = Machine::load("dev-host").unwrap();
        let t = trace();
        let row = replay_row(&m, &t, Mode::Threads, 2, 2, 1, 64).unwrap();
        let good = Projection {
            profile: pagelab_bench::profiles::load("linux-6.7").unwrap(),
            trace: t,
            rows: vec![row],
        };
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("r.db")).unwrap();
        store_projection(&store, &good, "ok@dev-host", &m, None, "test", None, true).unwrap();
        let stored = |s: &Store| s.runs(&RunFilter::default()).unwrap().len();
        assert_eq!(stored(&store), 1);
        for bad in [f64::NAN, f64::INFINITY, -1.0] {
            let mut p = good.clone();
            p.rows[0].metrics[1].2[0] = bad;
            let e = store_projection(&store, &p, "bad@dev-host", &m, None, "test", None, true)
                .unwrap_err();
            assert!(
                e.contains("faults/sec is") && e.contains("nothing was stored"),
                "{e}"
            );
        }
        let mut p = good.clone();
        p.rows[0].classes.push(ClassStats {
            name: "zone->lock".into(),
            wait_ns: f64::NAN,
            ..Default::default()
        });
        let e =
            store_projection(&store, &p, "bad@dev-host", &m, None, "test", None, true).unwrap_err();
        assert!(e.contains("lock:zone->lock:wait_ns is NaN"), "{e}");
        assert_eq!(stored(&store), 1, "no run begun for a refused projection");
    }
}
