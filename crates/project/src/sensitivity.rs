//! Sensitivity of a projection to its machine's numbers: each number of the machine
//! description scaled down and up alone, the same captures replayed, and how far each projected
//! change between profiles moves (`pagelab project --sensitivity PCT`).
//!
//! A projection's spread ([`crate::project::ProjRow`]) holds the engine's capture noise, but
//! not the uncertainty of the machine file: most of its latencies are estimates from one
//! measurement of a related part (the file says which), and the one fitted number, `trap_ns`,
//! is fitted at one task. A change between two kernels that stands on the ratio of two
//! transfer latencies, or on the clock a critical section runs at, can turn with a number
//! that is 20% off; one that stands on a line moved per fault more or less holds. This module
//! asks that question of each number in turn, so a reader can tell which projected changes
//! hold whatever the estimates, and which hang on one of them.
//!
//! It is not a confidence interval: the numbers move one at a time, by the same factor, and
//! nothing says how far off each one is. It replays the captures already taken (no new
//! capture), so what moves between the variants is the machine alone.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;

use pagelab_bench::stats::{amean, hmean, pct_change};
use pagelab_workloads::Mode;

use crate::error::ProjectError;
use crate::machine::Machine;
use crate::project::{ProjectSpec, Projection, project_traces};
use crate::trace::Trace;

/// One number of a machine description that a sensitivity run scales.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Param {
    /// `cpu.ghz` and every `cpu.turbo_ghz` entry: the clock the engine's compute is converted
    /// at (the capture host's cycles, `replay.rs`). The trap is a time stated at one busy
    /// core's clock and stretched by `clock_at(1) / clock`, a ratio this leaves as it is: a
    /// slower part makes the engine's work slower, not the exception.
    Clock,
    /// What a core's second hardware thread adds (`cpu.smt_throughput - 1`).
    SmtGain,
    /// `latency.smt_ns`: a line between the hardware threads of one core.
    SmtNs,
    /// `latency.core_ns`: a line between two cores of a node.
    CoreNs,
    /// Every `latency.remote_ns` entry: a line between nodes.
    RemoteNs,
    /// `latency.atomic_ns`: how long an atomic keeps a line it holds.
    AtomicNs,
    /// `memory.node_bandwidth_gbs`.
    NodeBandwidth,
    /// `memory.core_bandwidth_gbs`.
    CoreBandwidth,
    /// How far `memory.loaded_latency` rises above its idle latency (the curve's first
    /// point): the replay reads the curve only as ratios of latencies ([`crate::memory`]: a
    /// writer's bandwidth is its idle concurrency over the loaded latency), so scaling every
    /// point alike would change nothing.
    LoadedLatency,
    /// `kernel.trap_ns`: the fault's cost beyond the engine's model.
    TrapNs,
    /// `kernel.wakeup_ns`: a sleeping waiter's wake-up.
    WakeupNs,
    /// `kernel.ipi_ns` and `kernel.ipi_handler_ns`: a TLB shootdown, sender and receivers.
    Ipi,
}

impl Param {
    /// Every parameter, in the order a report lists them.
    pub const ALL: [Param; 12] = [
        Param::Clock,
        Param::SmtGain,
        Param::SmtNs,
        Param::CoreNs,
        Param::RemoteNs,
        Param::AtomicNs,
        Param::NodeBandwidth,
        Param::CoreBandwidth,
        Param::LoadedLatency,
        Param::TrapNs,
        Param::WakeupNs,
        Param::Ipi,
    ];

    /// The machine file's key (or keys) the parameter scales, as reports print it: where the
    /// variant scales part of a number or two numbers, the label says which (`(gain)`: the
    /// excess over 1; `(rise)`: the excess over the idle latency; `+handler`: with
    /// `ipi_handler_ns`).
    pub fn key(self) -> &'static str {
        match self {
            Param::Clock => "cpu.ghz",
            Param::SmtGain => "cpu.smt_throughput(gain)",
            Param::SmtNs => "latency.smt_ns",
            Param::CoreNs => "latency.core_ns",
            Param::RemoteNs => "latency.remote_ns",
            Param::AtomicNs => "latency.atomic_ns",
            Param::NodeBandwidth => "memory.node_bandwidth_gbs",
            Param::CoreBandwidth => "memory.core_bandwidth_gbs",
            Param::LoadedLatency => "memory.loaded_latency(rise)",
            Param::TrapNs => "kernel.trap_ns",
            Param::WakeupNs => "kernel.wakeup_ns",
            Param::Ipi => "kernel.ipi_ns+handler",
        }
    }

    /// Whether the parameter can change anything on `m`: a one-socket machine has no remote
    /// latency, a machine without SMT no sibling transfer or gain, a machine without a
    /// loaded-latency curve (or a flat one) no rise to scale.
    pub fn applies_to(self, m: &Machine) -> bool {
        match self {
            Param::SmtGain | Param::SmtNs => m.topology.threads_per_core > 1,
            Param::RemoteNs => !m.latency.remote_ns.is_empty(),
            Param::LoadedLatency => {
                let c = &m.memory.loaded_latency;
                c.iter().any(|p| c.first().is_some_and(|f| p[1] != f[1]))
            }
            _ => true,
        }
    }

    /// `m` with this parameter multiplied by `factor` (the SMT gain: its excess over 1).
    pub fn apply(self, m: &Machine, factor: f64) -> Machine {
        let mut v = m.clone();
        match self {
            Param::Clock => {
                v.cpu.ghz *= factor;
                for g in &mut v.cpu.turbo_ghz {
                    *g *= factor;
                }
            }
            Param::SmtGain => {
                v.cpu.smt_throughput = 1.0 + (m.cpu.smt_throughput - 1.0) * factor;
            }
            Param::SmtNs => v.latency.smt_ns *= factor,
            Param::CoreNs => v.latency.core_ns *= factor,
            Param::RemoteNs => {
                for ns in v.latency.remote_ns.values_mut() {
                    *ns *= factor;
                }
            }
            Param::AtomicNs => v.latency.atomic_ns *= factor,
            Param::NodeBandwidth => v.memory.node_bandwidth_gbs *= factor,
            Param::CoreBandwidth => v.memory.core_bandwidth_gbs *= factor,
            Param::LoadedLatency => {
                if let Some(idle) = m.memory.loaded_latency.first().map(|p| p[1]) {
                    for p in &mut v.memory.loaded_latency {
                        p[1] = idle + (p[1] - idle) * factor;
                    }
                }
            }
            Param::TrapNs => v.kernel.trap_ns *= factor,
            Param::WakeupNs => v.kernel.wakeup_ns *= factor,
            Param::Ipi => {
                v.kernel.ipi_ns *= factor;
                v.kernel.ipi_handler_ns *= factor;
            }
        }
        v
    }
}

/// The variants a sensitivity run replays on `m`, in order: each of `params` that
/// [`Param::applies_to`] `m`, scaled by each of `factors`.
pub fn runs(m: &Machine, params: &[Param], factors: &[f64]) -> Vec<(Param, f64)> {
    params
        .iter()
        .filter(|p| p.applies_to(m))
        .flat_map(|&p| factors.iter().map(move |&f| (p, f)))
        .collect()
}

/// Which projected figure a change is of: a non-baseline profile's row and metric.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ChangeKey {
    pub profile: String,
    pub mode: Mode,
    pub tasks: usize,
    pub metric: String,
}

/// Each non-baseline profile's change against the baseline (the first projection), in
/// percent as `compare` reports it (positive: better), from the mean of every capture's
/// samples (harmonic for rates, arithmetic otherwise). Rows a side lacks, or whose mean is not
/// a positive finite number, are left out.
pub fn changes(projections: &[Projection]) -> BTreeMap<ChangeKey, f64> {
    let mut out = BTreeMap::new();
    let Some((base, others)) = projections.split_first() else {
        return out;
    };
    for p in others {
        for row in &p.rows {
            let Some(brow) = base
                .rows
                .iter()
                .find(|b| b.mode == row.mode && b.tasks == row.tasks)
            else {
                continue;
            };
            let Some(first) = row.captures.first() else {
                continue;
            };
            for (metric, higher, _) in &first.metrics {
                let mean = |v: Vec<f64>| {
                    let ok = !v.is_empty() && v.iter().all(|x| x.is_finite() && *x > 0.0);
                    ok.then(|| if *higher { hmean(&v) } else { amean(&v) })
                };
                let (Some(b), Some(n)) = (mean(brow.values(metric)), mean(row.values(metric)))
                else {
                    continue;
                };
                out.insert(
                    ChangeKey {
                        profile: p.profile.name.clone(),
                        mode: row.mode,
                        tasks: row.tasks,
                        metric: metric.clone(),
                    },
                    pct_change(b, n, *higher),
                );
            }
        }
    }
    out
}

/// One variant of the machine: a parameter and the factor it was scaled by, and the changes
/// its replay projected (`Err`: the variant is no valid machine, or its replay failed; the
/// others are still replayed).
#[derive(Clone, Debug)]
pub struct Variant {
    pub param: Param,
    pub factor: f64,
    pub changes: Result<BTreeMap<ChangeKey, f64>, String>,
}

/// A sensitivity run: the changes as projected, and as each variant projected them.
#[derive(Clone, Debug)]
pub struct Sensitivity {
    pub base: BTreeMap<ChangeKey, f64>,
    pub variants: Vec<Variant>,
    /// Stopped before every variant was replayed.
    pub interrupted: bool,
}

/// Where one change went over the variants.
#[derive(Clone, Debug, PartialEq)]
pub struct Spread {
    /// The lowest change and the variant that gave it.
    pub low: (f64, Param, f64),
    /// The highest.
    pub high: (f64, Param, f64),
    /// Variants whose change has the other sign than the projected one (by their order).
    pub flips: Vec<(Param, f64, f64)>,
}

impl Sensitivity {
    /// Where `key`'s change went over the variants replayed; `None` when none has it.
    pub fn spread(&self, key: &ChangeKey) -> Option<Spread> {
        let base = *self.base.get(key)?;
        let mut low: Option<(f64, Param, f64)> = None;
        let mut high: Option<(f64, Param, f64)> = None;
        let mut flips = Vec::new();
        for v in &self.variants {
            let Ok(ch) = &v.changes else { continue };
            let Some(&c) = ch.get(key) else { continue };
            if low.is_none_or(|(l, _, _)| c < l) {
                low = Some((c, v.param, v.factor));
            }
            if high.is_none_or(|(h, _, _)| c > h) {
                high = Some((c, v.param, v.factor));
            }
            if base != 0.0 && c != 0.0 && (c > 0.0) != (base > 0.0) {
                flips.push((v.param, v.factor, c));
            }
        }
        Some(Spread {
            low: low?,
            high: high?,
            flips,
        })
    }

    /// Per variant, the largest move of any change from its projected value, in points.
    pub fn largest_moves(&self) -> Vec<(Param, f64, Result<f64, String>)> {
        self.variants
            .iter()
            .map(|v| {
                let m = v.changes.as_ref().map_err(Clone::clone).map(|ch| {
                    ch.iter()
                        .filter_map(|(k, c)| self.base.get(k).map(|b| (c - b).abs()))
                        .fold(0.0, f64::max)
                });
                (v.param, v.factor, m)
            })
            .collect()
    }
}

/// What a sensitivity run reports after each variant, so that a run of minutes shows where it
/// is (one line per variant on stderr in the CLI).
pub struct VariantDone<'a> {
    /// Variants done, this one included, of `total`.
    pub done: usize,
    pub total: usize,
    /// The variant: which number, scaled by what.
    pub param: Param,
    pub factor: f64,
    /// Why it was not replayed, if it was not.
    pub error: Option<&'a str>,
}

/// Replays `traces` (each profile's captures, as [`project_traces`] takes them) on `spec`'s
/// machine with each parameter of `params` that [`Param::applies_to`] it scaled by each of
/// `factors` alone. `base` is the projection of the same captures on the machine as it is.
/// Stops between variants when `stop` is set.
pub fn sensitivity(
    spec: &ProjectSpec,
    traces: &[Vec<Trace>],
    base: &[Projection],
    params: &[Param],
    factors: &[f64],
    progress: &mut dyn FnMut(VariantDone<'_>),
    stop: &AtomicBool,
) -> Result<Sensitivity, ProjectError> {
    if let Some(f) = factors.iter().find(|f| !(f.is_finite() && **f > 0.0)) {
        return Err(ProjectError::Request(format!(
            "a sensitivity factor must be a positive number, not {f}"
        )));
    }
    let runs = runs(&spec.machine, params, factors);
    let total = runs.len();
    let mut variants = Vec::new();
    let mut interrupted = false;
    for (i, (param, factor)) in runs.into_iter().enumerate() {
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            interrupted = true;
            break;
        }
        let machine = param.apply(&spec.machine, factor);
        let changes = match machine.check() {
            Err(e) => Err(e.to_string()),
            Ok(()) => {
                let vspec = ProjectSpec {
                    machine,
                    ..spec.clone()
                };
                match project_traces(&vspec, traces.to_vec(), &mut |_| {}, stop) {
                    Ok((_, true)) => {
                        interrupted = true;
                        break;
                    }
                    Ok((proj, false)) => Ok(changes(&proj)),
                    // One variant's failure (a replay that runs away on an extreme number)
                    // says nothing of the others: it is reported and the run goes on.
                    Err(e) => Err(e.to_string()),
                }
            }
        };
        progress(VariantDone {
            done: i + 1,
            total,
            param,
            factor,
            error: changes.as_ref().err().map(String::as_str),
        });
        variants.push(Variant {
            param,
            factor,
            changes,
        });
    }
    Ok(Sensitivity {
        base: changes(base),
        variants,
        interrupted,
    })
}

/// The run as text (aligned columns) or a markdown table: first the largest move each
/// variant made, then each change's lowest and highest value and whether its sign held.
pub fn render(s: &Sensitivity, markdown: bool) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nsensitivity: each machine number below scaled alone, the same captures replayed \
         (how far an estimate moves the projected changes; not a confidence interval)"
    );
    let moves: Vec<Vec<String>> = s
        .largest_moves()
        .into_iter()
        .map(|(p, f, m)| {
            vec![
                p.key().to_string(),
                format!("x{f:.2}"),
                match m {
                    Ok(m) => format!("{m:.2}"),
                    Err(e) => format!("not replayed: {e}"),
                },
            ]
        })
        .collect();
    out.push_str(&crate::table::render(
        &["parameter", "scaled", "largest move of a change (points)"],
        &moves,
        &[1, 2],
        markdown,
    ));
    let _ = writeln!(out);
    let show = |(c, p, f): (f64, Param, f64)| format!("{c:+.2}% ({} x{f:.2})", p.key());
    let rows: Vec<Vec<String>> = s
        .base
        .iter()
        .filter_map(|(k, &c)| {
            let sp = s.spread(k)?;
            let sign = if sp.flips.is_empty() {
                "holds".to_string()
            } else {
                format!(
                    "turns with {}",
                    sp.flips
                        .iter()
                        .map(|(p, f, _)| format!("{} x{f:.2}", p.key()))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            Some(vec![
                k.profile.clone(),
                k.mode.to_string(),
                k.tasks.to_string(),
                k.metric.clone(),
                format!("{c:+.2}%"),
                show(sp.low),
                show(sp.high),
                sign,
            ])
        })
        .collect();
    out.push_str(&crate::table::render(
        &[
            "profile",
            "mode",
            "tasks",
            "metric",
            "projected",
            "lowest",
            "highest",
            "sign",
        ],
        &rows,
        &[2, 4, 5, 6],
        markdown,
    ));
    let held = rows.iter().filter(|r| r[7] == "holds").count();
    let _ = writeln!(
        out,
        "sensitivity: {held} of {} changes keep their sign under every variant",
        rows.len()
    );
    if s.interrupted {
        let _ = writeln!(
            out,
            "sensitivity: interrupted; only the variants above were replayed"
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine() -> Machine {
        Machine::load("icelake-2s-64c").expect("shipped")
    }

    #[test]
    fn each_parameter_scales_its_own_keys_and_nothing_else() {
        let m = machine();
        for p in Param::ALL {
            let v = p.apply(&m, 1.5);
            let mut back = v.clone();
            // Undo the parameter's own keys: what is left must be the machine as it was.
            match p {
                Param::Clock => {
                    assert!((v.cpu.ghz - 1.5 * m.cpu.ghz).abs() < 1e-9);
                    back.cpu.ghz = m.cpu.ghz;
                    back.cpu.turbo_ghz = m.cpu.turbo_ghz.clone();
                }
                Param::SmtGain => {
                    let gain = m.cpu.smt_throughput - 1.0;
                    assert!((v.cpu.smt_throughput - (1.0 + 1.5 * gain)).abs() < 1e-9);
                    back.cpu.smt_throughput = m.cpu.smt_throughput;
                }
                Param::SmtNs => back.latency.smt_ns = m.latency.smt_ns,
                Param::CoreNs => {
                    assert!((v.latency.core_ns - 1.5 * m.latency.core_ns).abs() < 1e-9);
                    back.latency.core_ns = m.latency.core_ns;
                }
                Param::RemoteNs => {
                    for (k, ns) in &m.latency.remote_ns {
                        assert!((v.latency.remote_ns[k] - 1.5 * ns).abs() < 1e-9);
                    }
                    back.latency.remote_ns = m.latency.remote_ns.clone();
                }
                Param::AtomicNs => back.latency.atomic_ns = m.latency.atomic_ns,
                Param::NodeBandwidth => {
                    back.memory.node_bandwidth_gbs = m.memory.node_bandwidth_gbs
                }
                Param::CoreBandwidth => {
                    back.memory.core_bandwidth_gbs = m.memory.core_bandwidth_gbs
                }
                Param::LoadedLatency => {
                    let idle = m.memory.loaded_latency[0][1];
                    for (a, b) in v.memory.loaded_latency.iter().zip(&m.memory.loaded_latency) {
                        assert_eq!(a[0], b[0], "utilisations stay");
                        assert!((a[1] - idle - 1.5 * (b[1] - idle)).abs() < 1e-9);
                    }
                    assert_eq!(
                        v.memory.loaded_latency[0][1], idle,
                        "the idle latency stays"
                    );
                    back.memory.loaded_latency = m.memory.loaded_latency.clone();
                }
                Param::TrapNs => back.kernel.trap_ns = m.kernel.trap_ns,
                Param::WakeupNs => back.kernel.wakeup_ns = m.kernel.wakeup_ns,
                Param::Ipi => {
                    back.kernel.ipi_ns = m.kernel.ipi_ns;
                    back.kernel.ipi_handler_ns = m.kernel.ipi_handler_ns;
                }
            }
            assert_ne!(v, m, "{} changed nothing", p.key());
            assert_eq!(back, m, "{} changed another key", p.key());
            v.check().expect("a scaled shipped machine is still valid");
        }
    }

    #[test]
    fn a_machine_without_smt_a_second_node_or_a_rising_curve_skips_those_parameters() {
        let mut m = machine();
        assert!(Param::SmtNs.applies_to(&m) && Param::RemoteNs.applies_to(&m));
        assert!(Param::LoadedLatency.applies_to(&m));
        m.topology.threads_per_core = 1;
        m.latency.remote_ns.clear();
        m.memory.loaded_latency = vec![[0.0, 90.0], [1.0, 90.0]];
        assert!(!Param::SmtNs.applies_to(&m));
        assert!(!Param::SmtGain.applies_to(&m));
        assert!(!Param::RemoteNs.applies_to(&m));
        assert!(
            !Param::LoadedLatency.applies_to(&m),
            "a flat curve has no rise"
        );
        m.memory.loaded_latency.clear();
        assert!(!Param::LoadedLatency.applies_to(&m));
        assert!(Param::CoreNs.applies_to(&m));
    }

    fn key(tasks: usize) -> ChangeKey {
        ChangeKey {
            profile: "new".into(),
            mode: Mode::Threads,
            tasks,
            metric: "faults/sec".into(),
        }
    }

    #[test]
    fn a_spread_names_the_extremes_and_every_variant_that_turns_the_sign() {
        let base = BTreeMap::from([(key(4), 3.0), (key(8), -2.0)]);
        let v = |param, factor, a: f64, b: f64| Variant {
            param,
            factor,
            changes: Ok(BTreeMap::from([(key(4), a), (key(8), b)])),
        };
        let s = Sensitivity {
            base,
            variants: vec![
                v(Param::CoreNs, 0.75, 1.0, -3.0),
                v(Param::CoreNs, 1.25, 5.0, 0.5),
                v(Param::RemoteNs, 0.75, -0.5, -1.0),
                Variant {
                    param: Param::Clock,
                    factor: 2.0,
                    changes: Err("cpu.ghz out of range".into()),
                },
            ],
            interrupted: false,
        };
        let four = s.spread(&key(4)).expect("replayed");
        assert_eq!(four.low, (-0.5, Param::RemoteNs, 0.75));
        assert_eq!(four.high, (5.0, Param::CoreNs, 1.25));
        assert_eq!(four.flips, vec![(Param::RemoteNs, 0.75, -0.5)]);
        let eight = s.spread(&key(8)).expect("replayed");
        assert_eq!(eight.low, (-3.0, Param::CoreNs, 0.75));
        assert_eq!(eight.flips, vec![(Param::CoreNs, 1.25, 0.5)]);
        let moves = s.largest_moves();
        assert_eq!(moves[0].2, Ok(2.0)); // 3 -> 1 and -2 -> -3
        assert_eq!(moves[1].2, Ok(2.5)); // -2 -> 0.5
        assert_eq!(moves[2].2, Ok(3.5)); // 3 -> -0.5
        assert!(moves[3].2.is_err());
        let text = render(&s, false);
        assert!(
            text.contains("turns with latency.remote_ns x0.75"),
            "{text}"
        );
        assert!(
            text.contains("not replayed: cpu.ghz out of range"),
            "{text}"
        );
        assert!(
            text.contains("0 of 2 changes keep their sign"),
            "both turn under some variant: {text}"
        );
    }
}
