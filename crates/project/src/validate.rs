//! Validation: every experiment with a published table, projected on the table's machine and
//! compared row by row; and the self-consistency check, this host projected against the engine
//! measured here.
//!
//! The published tables live in `data/published/` (embedded). For each row the report gives the
//! published and projected means and the error; then, for each percent change between a profile
//! and the experiment's baseline at one mode, task count and metric, whether the projected change
//! has the published sign, and the median absolute error of the changes in percentage points.
//! The absolute level depends on how much slower a real fault is than the engine's (the
//! machine's `trap_ns`); the scaling columns divide each row by its profile's one-task row, so
//! that the shape of a curve can be judged apart from its level.

use std::fmt::Write as _;
use std::sync::atomic::AtomicBool;

use pagelab_bench::experiments;
use pagelab_bench::profiles::Profile;
use pagelab_bench::stats::{hmean, pct_change};
use pagelab_workloads::{Mode, WorkloadKind};
use serde::Serialize;

use crate::machine::Machine;
use crate::project::{Progress, ProjectSpec, project};

/// A published table: which experiment it belongs to and which machine it was measured on.
#[derive(Debug)]
pub struct Published {
    pub name: &'static str,
    pub experiment: &'static str,
    pub machine: &'static str,
    pub csv: &'static str,
}

/// The shipped tables.
pub const BUILTIN: &[Published] = &[
    Published {
        name: "page_fault1-2018",
        experiment: "page_fault1-lru-lock-2018",
        machine: "broadwell-2s-44c",
        csv: include_str!("../../../data/published/page_fault1-2018.csv"),
    },
    Published {
        name: "pft-single-vma-2023",
        experiment: "pft-pvl-2023",
        machine: "icelake-2s-64c",
        csv: include_str!("../../../data/published/pft-single-vma-2023.csv"),
    },
];

/// One published row.
#[derive(Clone, Debug, PartialEq)]
pub struct PubRow {
    pub profile: String,
    pub mode: Mode,
    pub tasks: usize,
    pub metric: String,
    pub value: f64,
}

impl Published {
    /// The table's rows.
    pub fn rows(&self) -> Result<Vec<PubRow>, String> {
        let mut r = csv::Reader::from_reader(self.csv.as_bytes());
        let mut out = Vec::new();
        for rec in r.records() {
            let rec = rec.map_err(|e| format!("published table {}: {e}", self.name))?;
            let field = |i: usize| rec.get(i).unwrap_or("").trim().to_string();
            let bad = |what: &str| format!("published table {}: bad {what} in {rec:?}", self.name);
            out.push(PubRow {
                profile: field(0),
                mode: field(1).parse().map_err(|_| bad("mode"))?,
                tasks: field(2).parse().map_err(|_| bad("tasks"))?,
                metric: field(3),
                value: field(4).parse().map_err(|_| bad("value"))?,
            });
        }
        Ok(out)
    }
}

/// One compared row.
#[derive(Clone, Debug, Serialize)]
pub struct Compared {
    pub profile: String,
    pub mode: String,
    pub tasks: usize,
    pub metric: String,
    pub published: f64,
    pub projected: f64,
    /// (projected - published) / published, percent.
    pub error_pct: f64,
    /// The row over its profile's one-task row, published and projected.
    pub published_scaling: Option<f64>,
    pub projected_scaling: Option<f64>,
}

/// One percent change against the baseline profile.
#[derive(Clone, Debug, Serialize)]
pub struct Change {
    pub profile: String,
    pub mode: String,
    pub tasks: usize,
    pub metric: String,
    pub published_pct: f64,
    pub projected_pct: f64,
}

impl Change {
    /// Both changes have the same sign (no change counts as neither sign: right only if the
    /// other is no change too).
    pub fn sign_right(&self) -> bool {
        let sign = |v: f64| {
            if v > 0.0 {
                1
            } else if v < 0.0 {
                -1
            } else {
                0
            }
        };
        sign(self.published_pct) == sign(self.projected_pct)
    }

    pub fn error_points(&self) -> f64 {
        (self.projected_pct - self.published_pct).abs()
    }
}

/// The validation of one table.
#[derive(Clone, Debug, Serialize)]
pub struct TableReport {
    pub table: String,
    pub experiment: String,
    pub machine: String,
    pub rows: Vec<Compared>,
    pub changes: Vec<Change>,
    /// The rows the machine's `trap_ns` was fitted to ([`crate::calibrate::fitted_rows`]):
    /// they agree by construction, so no error summary counts them.
    pub fitted: Vec<crate::calibrate::RowKey>,
    /// Simulated events and replay seconds, for the speed figures.
    pub events: u64,
    pub replay_seconds: f64,
}

/// The median (the mean of the middle two for an even count); NaN for none.
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if !n.is_multiple_of(2) {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

impl TableReport {
    /// `(changes with the right sign, changes, median absolute error in points)`.
    pub fn summary(&self) -> (usize, usize, f64) {
        let right = self.changes.iter().filter(|c| c.sign_right()).count();
        let med = median(self.changes.iter().map(Change::error_points).collect());
        (right, self.changes.len(), med)
    }

    /// Whether `r` is a row the machine was calibrated against.
    pub fn is_fitted(&self, r: &Compared) -> bool {
        self.fitted.iter().any(|k| {
            k.profile == r.profile
                && k.mode.to_string() == r.mode
                && k.tasks == r.tasks
                && k.metric == r.metric
        })
    }

    /// Median absolute error of the rows and of their scaling, percent; fitted rows left out.
    pub fn row_errors(&self) -> (f64, f64) {
        let abs = median(
            self.rows
                .iter()
                .filter(|r| !self.is_fitted(r))
                .map(|r| r.error_pct.abs())
                .collect(),
        );
        let shape = median(
            self.rows
                .iter()
                .filter(|r| !self.is_fitted(r))
                .filter_map(|r| match (r.published_scaling, r.projected_scaling) {
                    (Some(p), Some(q)) if r.tasks > 1 => Some(100.0 * (q - p).abs() / p),
                    _ => None,
                })
                .collect(),
        );
        (abs, shape)
    }

    /// The report as text.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{} ({}) on {}",
            self.table, self.experiment, self.machine
        );
        let _ = writeln!(
            s,
            "{:<22} {:<9} {:>5} {:<10} {:>13} {:>13} {:>8} {:>9} {:>9}",
            "profile",
            "mode",
            "tasks",
            "metric",
            "published",
            "projected",
            "error",
            "pub x1",
            "proj x1"
        );
        for r in &self.rows {
            let sc = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
            let _ = writeln!(
                s,
                "{:<22} {:<9} {:>5} {:<10} {:>13.0} {:>13.0} {:>+7.1}% {:>9} {:>9}{}",
                r.profile,
                r.mode,
                r.tasks,
                r.metric,
                r.published,
                r.projected,
                r.error_pct,
                sc(r.published_scaling),
                sc(r.projected_scaling),
                if self.is_fitted(r) {
                    "  (fitted: trap_ns)"
                } else {
                    ""
                }
            );
        }
        if !self.changes.is_empty() {
            let _ = writeln!(s, "\nchanges against the baseline profile (points):");
            let _ = writeln!(
                s,
                "{:<22} {:<9} {:>5} {:<10} {:>10} {:>10} {:>6} {:>6}",
                "profile", "mode", "tasks", "metric", "published", "projected", "sign", "error"
            );
            for c in &self.changes {
                let _ = writeln!(
                    s,
                    "{:<22} {:<9} {:>5} {:<10} {:>+9.2}% {:>+9.2}% {:>6} {:>6.2}",
                    c.profile,
                    c.mode,
                    c.tasks,
                    c.metric,
                    c.published_pct,
                    c.projected_pct,
                    if c.sign_right() { "right" } else { "WRONG" },
                    c.error_points()
                );
            }
        }
        let (right, n, med) = self.summary();
        let (abs, shape) = self.row_errors();
        let _ = writeln!(
            s,
            "\nsummary: {right} of {n} changes with the published sign; median absolute error of the changes {med:.2} points; median absolute row error {abs:.1}% (of the scaling relative to one task: {shape:.1}%)"
        );
        s
    }
}

/// Projects one published table's experiment on its machine and compares.
pub fn validate_table(
    p: &Published,
    samples: usize,
    seed: u64,
    ops_per_cpu: u64,
    progress: &mut dyn FnMut(Progress<'_>),
    stop: &AtomicBool,
) -> Result<TableReport, String> {
    let e = experiments::load(p.experiment)?;
    let machine = Machine::load(p.machine)?;
    let rows = p.rows()?;
    let workload: WorkloadKind = e.workload;
    let mut tasks: Vec<usize> = rows.iter().map(|r| r.tasks).collect();
    tasks.sort_unstable();
    tasks.dedup();
    let mut modes: Vec<Mode> = Vec::new();
    for r in &rows {
        if !modes.contains(&r.mode) {
            modes.push(r.mode);
        }
    }
    let profiles: Vec<Profile> = e.profiles.clone();
    let spec = ProjectSpec {
        machine: machine.clone(),
        workload,
        profiles,
        modes,
        tasks,
        samples,
        seed,
        ops_per_cpu,
    };
    let (proj, interrupted) = project(&spec, progress, stop)?;
    if interrupted {
        return Err("interrupted".into());
    }
    let projected = |profile: &str, mode: Mode, tasks: usize, metric: &str| -> Option<f64> {
        let pr = proj.iter().find(|p| p.profile.name == profile)?;
        let row = pr
            .rows
            .iter()
            .find(|r| r.mode == mode && r.tasks == tasks)?;
        let (_, _, v) = row.metrics.iter().find(|(m, _, _)| m == metric)?;
        Some(hmean(v))
    };
    let published = |profile: &str, mode: Mode, tasks: usize, metric: &str| -> Option<f64> {
        rows.iter()
            .find(|r| {
                r.profile == profile && r.mode == mode && r.tasks == tasks && r.metric == metric
            })
            .map(|r| r.value)
    };
    let mut out = TableReport {
        table: p.name.to_string(),
        experiment: p.experiment.to_string(),
        machine: machine.name.clone(),
        rows: Vec::new(),
        changes: Vec::new(),
        fitted: crate::calibrate::fitted_rows(p)?,
        events: proj.iter().flat_map(|p| &p.rows).map(|r| r.events).sum(),
        replay_seconds: proj.iter().flat_map(|p| &p.rows).map(|r| r.seconds).sum(),
    };
    let base = &e.profiles[0].name;
    for r in &rows {
        let Some(q) = projected(&r.profile, r.mode, r.tasks, &r.metric) else {
            return Err(format!(
                "published table {}: no projection of `{}` {} {} tasks `{}` in experiment {}",
                p.name, r.profile, r.mode, r.tasks, r.metric, p.experiment
            ));
        };
        let one_pub = published(&r.profile, r.mode, 1, &r.metric);
        let one_proj = projected(&r.profile, r.mode, 1, &r.metric);
        out.rows.push(Compared {
            profile: r.profile.clone(),
            mode: r.mode.to_string(),
            tasks: r.tasks,
            metric: r.metric.clone(),
            published: r.value,
            projected: q,
            error_pct: 100.0 * (q - r.value) / r.value,
            published_scaling: one_pub.map(|b| r.value / b),
            projected_scaling: one_proj.map(|b| q / b),
        });
        if &r.profile != base
            && let (Some(pb), Some(qb)) = (
                published(base, r.mode, r.tasks, &r.metric),
                projected(base, r.mode, r.tasks, &r.metric),
            )
        {
            out.changes.push(Change {
                profile: r.profile.clone(),
                mode: r.mode.to_string(),
                tasks: r.tasks,
                metric: r.metric.clone(),
                published_pct: pct_change(pb, r.value, true),
                projected_pct: pct_change(qb, q, true),
            });
        }
    }
    Ok(out)
}

/// One self-consistency row: the engine measured here against this host projected.
#[derive(Clone, Debug, Serialize)]
pub struct SelfRow {
    pub workload: String,
    pub mode: String,
    pub tasks: usize,
    pub metric: String,
    pub measured: f64,
    pub projected: f64,
    pub error_pct: f64,
}

/// The self-consistency check.
#[derive(Clone, Debug, Serialize)]
pub struct SelfCheck {
    pub machine: String,
    pub profile: String,
    /// The host as measured for this check (kernel costs zero), replayed as it is.
    pub host: Machine,
    pub rows: Vec<SelfRow>,
}

impl SelfCheck {
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "self-consistency: {} on the engine here against {} projected (kernel costs zero, as the engine pays none)",
            self.profile, self.machine
        );
        let h = &self.host;
        let curve: Vec<String> = h
            .memory
            .loaded_latency
            .iter()
            .map(|[u, ns]| format!("{ns} ns at {u}"))
            .collect();
        let _ = writeln!(
            s,
            "this host, measured now: {} GHz, {} ns between cores, {} ns an atomic, clearing {} GB/s one core and {} GB/s the node, loaded latency {}",
            h.cpu.ghz,
            h.latency.core_ns,
            h.latency.atomic_ns,
            h.memory.core_bandwidth_gbs,
            h.memory.node_bandwidth_gbs,
            if curve.is_empty() {
                "not measured".to_string()
            } else {
                curve.join(", ")
            }
        );
        let _ = writeln!(
            s,
            "{:<12} {:<9} {:>5} {:<10} {:>13} {:>13} {:>8}",
            "workload", "mode", "tasks", "metric", "measured", "projected", "error"
        );
        for r in &self.rows {
            let _ = writeln!(
                s,
                "{:<12} {:<9} {:>5} {:<10} {:>13.0} {:>13.0} {:>+7.1}%",
                r.workload, r.mode, r.tasks, r.metric, r.measured, r.projected, r.error_pct
            );
        }
        let med = median(self.rows.iter().map(|r| r.error_pct.abs()).collect());
        let _ = writeln!(s, "median absolute error {med:.1}%");
        s
    }
}

/// Projects this host at 1 and 2 tasks and measures the engine here with the same profile:
/// page_fault1 in both modes, pft in threads mode. The host is measured first
/// ([`crate::calibrate::measure_host_for_engine`]: the machine the engine runs on, not a
/// description embedded at build time), and replayed with its own parameters.
pub fn self_check(
    seed: u64,
    progress: &mut dyn FnMut(&str),
    stop: &AtomicBool,
) -> Result<SelfCheck, String> {
    progress("measuring this host (pagelab calibrate, the engine's costs)");
    let (host, _) = crate::calibrate::measure_host_for_engine("this-host", &mut |w| progress(w))?;
    self_check_on(&host, seed, progress, stop)
}

/// [`self_check`] on a machine already measured.
pub fn self_check_on(
    host: &Machine,
    seed: u64,
    progress: &mut dyn FnMut(&str),
    stop: &AtomicBool,
) -> Result<SelfCheck, String> {
    use pagelab_bench::run::{RunRequest, Sizes, Target};
    use pagelab_workloads::runner::SampleSpec;
    let machine = host.as_engine();
    let profile = pagelab_bench::profiles::load("linux-6.7")?;
    let mut out = SelfCheck {
        machine: machine.name.clone(),
        profile: profile.name.clone(),
        host: machine.clone(),
        rows: Vec::new(),
    };
    let cases = [
        (
            WorkloadKind::PageFault1,
            vec![Mode::Processes, Mode::Threads],
        ),
        (WorkloadKind::Pft, vec![Mode::Threads]),
    ];
    for (w, modes) in cases {
        progress(&format!("measuring {w} on the engine"));
        let req = RunRequest {
            workload: w,
            target: Target::Engine {
                profile: profile.name.clone(),
                policy: profile.policy.clone(),
            },
            tasks: vec![1, 2],
            modes: modes.clone(),
            spec: SampleSpec {
                samples: 5,
                warmup: 1,
                interval: std::time::Duration::from_millis(500),
            },
            sizes: Sizes {
                pft_bytes: 256 << 20,
                ..Sizes::default()
            },
            repeats: 1,
            first_repeat: 0,
            swap: pagelab_mm::reclaim::swap::Backing::Memory { compress: false },
            lock_stat: true,
        };
        let rows = pagelab_bench::run::run(&req, stop, &mut |_, _, _| {}, &mut |_| Ok(()))?;
        progress(&format!("capturing and replaying {w}"));
        let trace = crate::capture::capture(&crate::capture::CaptureSpec::new(
            w,
            profile.clone(),
            machine.nr_cpus(),
        ))?;
        let measured: Vec<Measured> = rows
            .into_iter()
            .map(|r| Measured {
                mode: r.mode,
                tasks: r.tasks,
                metrics: r.metrics.into_iter().map(|m| (m.name, m.samples)).collect(),
            })
            .collect();
        out.rows
            .extend(project_measured(&machine, &trace, &measured, seed)?);
    }
    Ok(out)
}

/// One row the engine measured: mode, tasks, and each metric's samples.
#[derive(Clone, Debug)]
pub struct Measured {
    pub mode: Mode,
    pub tasks: usize,
    pub metrics: Vec<(String, Vec<f64>)>,
}

/// The self-check's rows: `trace` replayed on `machine` exactly as given (its own bandwidths
/// and curve, nothing taken from the trace) for every measured row, compared.
pub fn project_measured(
    machine: &Machine,
    trace: &crate::trace::Trace,
    measured: &[Measured],
    seed: u64,
) -> Result<Vec<SelfRow>, String> {
    let mut out = Vec::new();
    for r in measured {
        let proj = crate::project::replay_row(machine, trace, r.mode, r.tasks, 5, seed, 8192)?;
        for (name, samples) in &r.metrics {
            let Some((_, _, pv)) = proj.metrics.iter().find(|(n, _, _)| n == name) else {
                continue;
            };
            let (measured, projected) = (hmean(samples), hmean(pv));
            out.push(SelfRow {
                workload: trace.meta.workload.clone(),
                mode: r.mode.to_string(),
                tasks: r.tasks,
                metric: name.clone(),
                measured,
                projected,
                error_pct: 100.0 * (projected - measured) / measured,
            });
        }
    }
    Ok(out)
}

/// The published table by name.
pub fn published(name: &str) -> Result<&'static Published, String> {
    BUILTIN.iter().find(|p| p.name == name).ok_or_else(|| {
        let names: Vec<&str> = BUILTIN.iter().map(|p| p.name).collect();
        format!(
            "unknown published table `{name}`; tables: {}",
            names.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_tables_parse_and_name_their_experiments_profiles() {
        for p in BUILTIN {
            let rows = p.rows().unwrap();
            assert!(rows.len() >= 20, "{}", p.name);
            let e = experiments::load(p.experiment).unwrap();
            let m = Machine::load(p.machine).unwrap();
            for r in &rows {
                assert!(
                    e.profiles.iter().any(|x| x.name == r.profile),
                    "{} names {}",
                    p.name,
                    r.profile
                );
                assert!(r.tasks <= m.nr_cpus(), "{} tasks on {}", r.tasks, m.name);
                assert!(r.value > 0.0);
            }
        }
        assert!(published("nope").unwrap_err().contains("page_fault1-2018"));
    }

    /// The self-check replays the machine it is given with that machine's own parameters: a
    /// measured host's clearing bandwidth decides the projection, whatever rate the trace's
    /// writes took when captured.
    #[test]
    fn the_self_check_replays_the_measured_host_as_measured() {
        use crate::trace::{Event, Pinning, Trace, TraceMeta, Window};
        let mut host = Machine::load("dev-host").unwrap().as_engine();
        host.name = "injected-host".into();
        host.memory.core_bandwidth_gbs = 4.096;
        host.memory.node_bandwidth_gbs = 8.192;
        host.memory.loaded_latency.clear();
        // Each op: 1000 ns of compute and one page cleared, which took the capture 100 ns
        // (40 GB/s); on the injected host it takes 1000 ns (4.096 GB/s).
        let mut events = Vec::new();
        for _ in 0..500 {
            events.push(Event::Compute { ns: 1000.0 });
            events.push(Event::Write {
                bytes: 4096,
                host_ns: 100.0,
            });
            events.push(Event::Ops { n: 1 });
        }
        let trace = Trace {
            meta: TraceMeta {
                workload: "page_fault1".into(),
                profile: "linux-6.7".into(),
                profile_toml: String::new(),
                op_unit: "faults".into(),
                window: Window::Cycle,
                pinning: Pinning::Cores,
                shared_vma: false,
                kernel_cpus: 2,
                host_cpu: "test".into(),
                host_ghz: host.cpu.ghz,
                ops: 500,
                raw_events: 0,
                overhead_ns_per_event: 0.0,
                traced_ns: 1.0,
                untraced_ns: 1.0,
                compute_scale: 1.0,
            },
            instances: Vec::new(),
            events,
            fallbacks: Vec::new(),
        };
        let measured = vec![
            Measured {
                mode: Mode::Processes,
                tasks: 1,
                metrics: vec![("faults/sec".into(), vec![500_000.0; 3])],
            },
            Measured {
                mode: Mode::Processes,
                tasks: 2,
                metrics: vec![("faults/sec".into(), vec![1_000_000.0; 3])],
            },
        ];
        let rows = project_measured(&host, &trace, &measured, 1).unwrap();
        assert_eq!(rows.len(), 2);
        // One task: 1000 ns compute + 1000 ns clearing = 500,000 faults/s. Two: 4.096 GB/s
        // each, the node's 8.192 shared without loss: 1,000,000.
        for r in &rows {
            assert!(
                r.error_pct.abs() < 1.0,
                "{} tasks: projected {} against {}",
                r.tasks,
                r.projected,
                r.measured
            );
        }
    }

    /// The row `trap_ns` was fitted to is marked and left out of the row-error medians.
    #[test]
    fn fitted_rows_are_left_out_of_the_error_summary() {
        let row = |tasks: usize, err: f64| Compared {
            profile: "linux-4.15".into(),
            mode: "processes".into(),
            tasks,
            metric: "faults/sec".into(),
            published: 100.0,
            projected: 100.0 + err,
            error_pct: err,
            published_scaling: Some(tasks as f64),
            projected_scaling: Some(tasks as f64 * (1.0 + err / 100.0)),
        };
        let t = TableReport {
            table: "page_fault1-2018".into(),
            experiment: "e".into(),
            machine: "m".into(),
            // The fitted row's error is 0 by construction; the others' are 10 and 30.
            rows: vec![row(1, 0.0), row(4, 10.0), row(16, 30.0)],
            changes: Vec::new(),
            fitted: crate::calibrate::fitted_rows(published("page_fault1-2018").unwrap()).unwrap(),
            events: 0,
            replay_seconds: 0.0,
        };
        assert!(t.is_fitted(&t.rows[0]) && !t.is_fitted(&t.rows[1]));
        assert_eq!(
            t.row_errors().0,
            20.0,
            "median of 10 and 30, not of 0, 10 and 30"
        );
        assert!(t.render().contains("(fitted: trap_ns)"));
    }

    #[test]
    fn changes_report_sign_and_points() {
        let c = Change {
            profile: "b".into(),
            mode: "threads".into(),
            tasks: 4,
            metric: "faults/sec".into(),
            published_pct: -9.51,
            projected_pct: -4.0,
        };
        assert!(c.sign_right());
        assert!((c.error_points() - 5.51).abs() < 1e-9);
        let t = TableReport {
            table: "t".into(),
            experiment: "e".into(),
            machine: "m".into(),
            rows: Vec::new(),
            changes: vec![
                c.clone(),
                Change {
                    projected_pct: 3.0,
                    ..c.clone()
                },
                Change {
                    projected_pct: -10.0,
                    ..c
                },
            ],
            fitted: Vec::new(),
            events: 0,
            replay_seconds: 0.0,
        };
        let (right, n, med) = t.summary();
        assert_eq!((right, n), (2, 3));
        assert!((med - 5.51).abs() < 1e-9, "{med}");
        assert!(t.render().contains("WRONG"));
    }
}
