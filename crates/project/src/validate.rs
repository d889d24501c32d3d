//! Validation: every experiment with a published table, projected on the table's machine and
//! compared row by row; and the self-consistency check, this host projected against the engine
//! measured here.
//!
//! The published tables live in `data/published/` (embedded). Each is compared on the mean it
//! publishes: will-it-scale's arithmetic mean of runs for the 2018 table, mmtests' harmonic mean
//! for the 2023 one; the projected row is the same mean over all its samples (every capture,
//! every window). For each row the report gives the published and projected means and
//! the error; then, for each percent change between a profile and the experiment's baseline at
//! one mode, task count and metric, whether the projected change has the published sign and its
//! error in percentage points. Changes are classed as beyond the published noise (5 points or
//! more, or the two rows' mean +/- stddev ranges apart) or within it, and each class is
//! summarised apart: a sign within the noise says little about the model.
//!
//! The baseline profile's one-task rows are where the machine's `trap_ns` is fitted (the
//! machine files show the arithmetic, and [`validate_table`] fits it again from its own
//! captures unless told not to); they are named and left out of every error summary. A
//! row or change whose projection is not a finite number is a failure: it is named, counted in
//! its class's total (never with the right sign, never within 10 points) and sorts above every
//! error in the medians.
//!
//! The absolute level depends on how much slower a real fault is than the engine's (the
//! machine's `trap_ns`); the scaling columns divide each row by its profile's one-task row, so
//! that the shape of a curve can be judged apart from its level.

use std::fmt::Write as _;
use std::sync::atomic::AtomicBool;

use pagelab_bench::experiments;
use pagelab_bench::profiles::Profile;
use pagelab_bench::stats::{amean, hmean, median, pct_change};
use pagelab_workloads::{Mode, WorkloadKind};
use serde::Serialize;

use crate::error::ProjectError;
use crate::machine::Machine;
use crate::project::{Progress, ProjRow, ProjectSpec, capture_all, project_traces};

/// Which mean a published table gives, so that the projection is compared on the same one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MeanKind {
    /// will-it-scale's tables: the arithmetic mean of runs, with a standard deviation.
    Arithmetic,
    /// mmtests' `Hmean` rows of rates.
    Harmonic,
}

impl MeanKind {
    /// The mean of `v` of this kind.
    pub fn of(self, v: &[f64]) -> f64 {
        match self {
            MeanKind::Arithmetic => amean(v),
            MeanKind::Harmonic => hmean(v),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            MeanKind::Arithmetic => "arithmetic",
            MeanKind::Harmonic => "harmonic",
        }
    }
}

/// A published table: which experiment it belongs to and which machine it was measured on.
#[derive(Debug)]
pub struct Published {
    pub name: &'static str,
    pub experiment: &'static str,
    pub machine: &'static str,
    /// The mean its `value` column holds (data/published/README.md says which).
    pub mean: MeanKind,
    pub csv: &'static str,
    /// What the posting says limited its kernels, checked against the projection's lock
    /// statistics ([`crate::claims`]).
    pub claims: &'static [crate::claims::Claim],
    /// A held-out table: nothing of pagelab is fitted to it (its machine's `trap_ns` is an
    /// estimate, and no row of it is a fitted row), it is left out of `validate`'s default run
    /// and of the summary over all tables, and it checks the projector on a result it was
    /// not built against.
    pub held_out: bool,
}

/// The shipped tables.
pub const BUILTIN: &[Published] = &[
    Published {
        name: "page_fault1-2018",
        experiment: "page_fault1-lru-lock-2018",
        machine: "broadwell-2s-44c",
        mean: MeanKind::Arithmetic,
        csv: include_str!("../../../data/published/page_fault1-2018.csv"),
        claims: crate::claims::PAGE_FAULT1_2018,
        held_out: false,
    },
    Published {
        name: "pft-single-vma-2023",
        experiment: "pft-pvl-2023",
        machine: "icelake-2s-64c",
        mean: MeanKind::Harmonic,
        csv: include_str!("../../../data/published/pft-single-vma-2023.csv"),
        claims: crate::claims::PFT_SINGLE_VMA_2023,
        held_out: false,
    },
    Published {
        name: "page_fault2-gnr-2025",
        experiment: "page_fault2-entry-prefetch-2025",
        machine: "granite-rapids-2s-128c",
        mean: MeanKind::Arithmetic,
        csv: include_str!("../../../data/published/page_fault2-gnr-2025.csv"),
        claims: &[],
        held_out: true,
    },
    Published {
        name: "page_fault2-skl-2024",
        experiment: "page_fault2-folio-batch-2024",
        machine: "skylake-sp-2s-52c",
        mean: MeanKind::Arithmetic,
        csv: include_str!("../../../data/published/page_fault2-skl-2024.csv"),
        claims: &[],
        held_out: true,
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
    /// The standard deviation the post gives, if any.
    pub stddev: Option<f64>,
}

impl Published {
    /// The table's rows.
    pub fn rows(&self) -> Result<Vec<PubRow>, ProjectError> {
        let mut r = csv::Reader::from_reader(self.csv.as_bytes());
        let mut out = Vec::new();
        for rec in r.records() {
            let rec = rec
                .map_err(|e| ProjectError::Table(format!("published table {}: {e}", self.name)))?;
            let line = rec.position().map_or(0, |p| p.line());
            let field = |i: usize| rec.get(i).unwrap_or("").trim().to_string();
            let bad = |what: &str| {
                ProjectError::Table(format!(
                    "published table {}: line {line}: bad {what} in {rec:?}",
                    self.name
                ))
            };
            let stddev = match field(5) {
                s if s.is_empty() => None,
                s => Some(
                    s.parse::<f64>()
                        .ok()
                        .filter(|v| v.is_finite() && *v >= 0.0)
                        .ok_or_else(|| bad("stddev"))?,
                ),
            };
            out.push(PubRow {
                profile: field(0),
                mode: field(1).parse().map_err(|_| bad("mode"))?,
                tasks: field(2).parse().map_err(|_| bad("tasks"))?,
                metric: field(3),
                value: field(4).parse().map_err(|_| bad("value"))?,
                stddev,
            });
        }
        Ok(out)
    }
}

/// A published change of this many points or more is beyond the noise whatever the stddevs.
pub const NOISE_POINTS: f64 = 5.0;

/// The target band of a change's error, in points (issue 13: 60% of the changes beyond the
/// noise within it).
pub const NEAR_POINTS: f64 = 10.0;

/// Whether the published change from `base` to `row` is beyond the published noise: at least
/// [`NOISE_POINTS`], or the two means further apart than their standard deviations reach
/// (the ranges mean +/- stddev do not overlap). A table without stddevs has only the first test.
pub fn beyond_noise(base: &PubRow, row: &PubRow) -> bool {
    if pct_change(base.value, row.value, true).abs() >= NOISE_POINTS {
        return true;
    }
    match (base.stddev, row.stddev) {
        (Some(a), Some(b)) => (row.value - base.value).abs() > a + b,
        _ => false,
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
    /// The lowest and highest of the captures' means of the row.
    pub projected_low: f64,
    pub projected_high: f64,
    /// (projected - published) / published, percent.
    pub error_pct: f64,
    /// The row over its profile's one-task row, published and projected.
    pub published_scaling: Option<f64>,
    pub projected_scaling: Option<f64>,
    /// A row `trap_ns` is fitted to: left out of the error summaries.
    pub fitted: bool,
}

impl Compared {
    fn name(&self) -> String {
        format!(
            "{} {} {} {}",
            self.profile, self.mode, self.tasks, self.metric
        )
    }
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
    /// The range of the projected change over every pairing of a baseline capture's mean with
    /// one of this profile's (see `compare`): how far the capture noise alone moves it.
    pub projected_low: f64,
    pub projected_high: f64,
    /// Beyond the published noise ([`beyond_noise`]).
    pub beyond_noise: bool,
}

impl Change {
    /// The projection gave no finite change (a NaN row): a failure.
    pub fn failed(&self) -> bool {
        !self.projected_pct.is_finite()
    }

    /// Both changes have the same sign (no change counts as neither sign: right only if the
    /// other is no change too). A failure never has the right sign.
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
        !self.failed() && sign(self.published_pct) == sign(self.projected_pct)
    }

    /// The whole captures' range has the published sign (a published change of 0 is never
    /// resolved).
    pub fn resolved_right(&self) -> bool {
        !self.failed()
            && ((self.published_pct > 0.0 && self.projected_low > 0.0)
                || (self.published_pct < 0.0 && self.projected_high < 0.0))
    }

    /// The error in points; infinite for a failure, so that it sorts above every error.
    pub fn error_points(&self) -> f64 {
        if self.failed() {
            f64::INFINITY
        } else {
            (self.projected_pct - self.published_pct).abs()
        }
    }

    fn name(&self) -> String {
        format!(
            "{} {} {} {}",
            self.profile, self.mode, self.tasks, self.metric
        )
    }
}

/// The changes of one class (beyond or within the published noise), summarised.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ClassSummary {
    pub changes: usize,
    pub right_sign: usize,
    /// Changes whose whole captures' range has the published sign: resolved by the projection
    /// beyond its own capture noise.
    pub resolved_right_sign: usize,
    /// Changes within [`NEAR_POINTS`] of the published one.
    pub within_10_points: usize,
    /// The median error in points (failures count as infinite); `None` without changes.
    pub median_error_points: Option<f64>,
    /// Changes the projection gave no finite number for, named.
    pub failures: Vec<String>,
}

impl ClassSummary {
    pub fn of<'a>(changes: impl IntoIterator<Item = &'a Change>) -> ClassSummary {
        let changes: Vec<&Change> = changes.into_iter().collect();
        ClassSummary {
            changes: changes.len(),
            right_sign: changes.iter().filter(|c| c.sign_right()).count(),
            resolved_right_sign: changes.iter().filter(|c| c.resolved_right()).count(),
            within_10_points: changes
                .iter()
                .filter(|c| c.error_points() <= NEAR_POINTS)
                .count(),
            median_error_points: (!changes.is_empty())
                .then(|| median(&changes.iter().map(|c| c.error_points()).collect::<Vec<_>>())),
            failures: changes
                .iter()
                .filter(|c| c.failed())
                .map(|c| c.name())
                .collect(),
        }
    }

    /// `12 of 25 with the published sign (48%), 9 of 25 within 10 points (36%); median error
    /// 7.20 points`.
    pub fn render(&self) -> String {
        if self.changes == 0 {
            return "none".into();
        }
        let pct = |k: usize| 100.0 * k as f64 / self.changes as f64;
        let mut s = format!(
            "{} of {} with the published sign ({:.0}%; {} with it over the whole captures' range), {} of {} within {NEAR_POINTS:.0} points ({:.0}%); median error {:.2} points",
            self.right_sign,
            self.changes,
            pct(self.right_sign),
            self.resolved_right_sign,
            self.within_10_points,
            self.changes,
            pct(self.within_10_points),
            self.median_error_points.unwrap_or(f64::NAN)
        );
        if !self.failures.is_empty() {
            let _ = write!(
                s,
                "; {} FAILED (no finite projection): {}",
                self.failures.len(),
                self.failures.join(", ")
            );
        }
        s
    }
}

/// A validation's summaries: the changes beyond and within the published noise, and the
/// rows (fitted rows left out).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Summaries {
    pub beyond_noise: ClassSummary,
    pub within_noise: ClassSummary,
    /// Median absolute error of the rows, percent (fitted rows left out, failures infinite).
    pub median_row_error_pct: Option<f64>,
    /// ... and of their scaling relative to the one-task row (rows of 2 tasks or more).
    pub median_scaling_error_pct: Option<f64>,
    /// Rows `trap_ns` is fitted to, named: left out of every summary here.
    pub fitted_rows: Vec<String>,
    /// Rows the projection gave no finite number for, named.
    pub failed_rows: Vec<String>,
}

impl Summaries {
    pub fn of(rows: &[Compared], changes: &[Change]) -> Summaries {
        let scored: Vec<&Compared> = rows.iter().filter(|r| !r.fitted).collect();
        let inf_nan = |v: f64| if v.is_finite() { v } else { f64::INFINITY };
        let row_errs: Vec<f64> = scored.iter().map(|r| inf_nan(r.error_pct.abs())).collect();
        let shape: Vec<f64> = scored
            .iter()
            .filter(|r| r.tasks > 1)
            .filter_map(|r| match (r.published_scaling, r.projected_scaling) {
                (Some(p), Some(q)) => Some(inf_nan(100.0 * (q - p).abs() / p)),
                (Some(_), None) => Some(f64::INFINITY),
                _ => None,
            })
            .collect();
        Summaries {
            beyond_noise: ClassSummary::of(changes.iter().filter(|c| c.beyond_noise)),
            within_noise: ClassSummary::of(changes.iter().filter(|c| !c.beyond_noise)),
            median_row_error_pct: (!row_errs.is_empty()).then(|| median(&row_errs)),
            median_scaling_error_pct: (!shape.is_empty()).then(|| median(&shape)),
            fitted_rows: rows
                .iter()
                .filter(|r| r.fitted)
                .map(Compared::name)
                .collect(),
            failed_rows: rows
                .iter()
                .filter(|r| !r.projected.is_finite())
                .map(Compared::name)
                .collect(),
        }
    }

    /// The summary lines (`what` names the scope: a table or all of them).
    pub fn render(&self, what: &str) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{what}: changes beyond the published noise (>= {NOISE_POINTS:.0} points or mean +/- stddev apart): {}",
            self.beyond_noise.render()
        );
        let _ = writeln!(
            s,
            "{what}: changes within the published noise: {}",
            self.within_noise.render()
        );
        if let Some(row) = self.median_row_error_pct {
            let scaling = match self.median_scaling_error_pct {
                Some(v) => format!(" (of the scaling relative to one task: {v:.1}%)"),
                // A table without one-task rows (a held-out comparison at one task count).
                None => String::new(),
            };
            let _ = writeln!(s, "{what}: median absolute row error {row:.1}%{scaling}");
        }
        if !self.fitted_rows.is_empty() {
            let _ = writeln!(
                s,
                "{what}: rows trap_ns is fitted to, left out of these summaries: {}",
                self.fitted_rows.join(", ")
            );
        }
        if !self.failed_rows.is_empty() {
            let _ = writeln!(
                s,
                "{what}: FAILED rows (no finite projection): {}",
                self.failed_rows.join(", ")
            );
        }
        s
    }
}

/// The validation of one table.
#[derive(Clone, Debug, Serialize)]
pub struct TableReport {
    pub table: String,
    pub experiment: String,
    pub machine: String,
    /// The mean both sides are compared on.
    pub mean: MeanKind,
    /// Captures of each profile, each replayed.
    pub captures: usize,
    /// The `kernel.trap_ns` the rows were replayed with, and where it came from.
    pub trap: TrapSource,
    pub rows: Vec<Compared>,
    pub changes: Vec<Change>,
    pub summary: Summaries,
    /// The posting's own sentences about what limited its kernels, each checked against the
    /// projected rows' lock statistics: whether the projection is right for the posting's
    /// reasons.
    pub claims: Vec<crate::claims::ClaimVerdict>,
    /// Simulated events and replay seconds, for the speed figures.
    pub events: u64,
    pub replay_seconds: f64,
    /// Per capture (each profile's in the order taken): its profile and what its preemption guard
    /// saw (`None` for a capture without one), so that a row the capture noise moved can be
    /// traced to a capture the host disturbed; and where its compute was set by pacing the
    /// profiles side by side ([`crate::capture::pace`]), what that gave.
    pub guards: Vec<(
        String,
        Option<crate::trace::CaptureGuard>,
        Option<crate::trace::PacedCompute>,
    )>,
    /// With `validate --sensitivity`: every change as each variant of the machine projected
    /// it ([`TableSensitivity`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sensitivity: Option<TableSensitivity>,
}

/// A published change as each sensitivity variant of the machine projected it: the machine
/// file's numbers scaled alone ([`crate::sensitivity`]), the same captures replayed and
/// compared as the table is.
#[derive(Clone, Debug, Serialize)]
pub struct ChangeSensitivity {
    pub profile: String,
    pub mode: String,
    pub tasks: usize,
    pub metric: String,
    /// `(machine key, factor, projected change)` per variant replayed.
    pub variants: Vec<(String, f64, f64)>,
}

/// `validate --sensitivity`: a table's changes under each variant of its machine.
#[derive(Clone, Debug, Serialize)]
pub struct TableSensitivity {
    pub factors: Vec<f64>,
    /// Whether `kernel.trap_ns` was fitted again for each variant, as `validate` fits it for
    /// the machine as it is (the `kernel.trap_ns` variants then scale the fitted value).
    pub trap_refit: bool,
    /// Variants that are no valid machine, or whose replay failed, with why.
    pub skipped: Vec<(String, f64, String)>,
    /// In the order of [`TableReport::changes`].
    pub changes: Vec<ChangeSensitivity>,
    /// Stopped before every variant was replayed.
    pub interrupted: bool,
}

impl TableSensitivity {
    fn find(&self, c: &Change) -> Option<&ChangeSensitivity> {
        self.changes.iter().find(|s| {
            s.profile == c.profile && s.mode == c.mode && s.tasks == c.tasks && s.metric == c.metric
        })
    }

    /// The variants under which `c`'s projected change has the published sign.
    pub fn published_sign_under(&self, c: &Change) -> Vec<(String, f64)> {
        let sign = |v: f64| (v > 0.0) as i8 - (v < 0.0) as i8;
        self.find(c)
            .map(|s| {
                s.variants
                    .iter()
                    .filter(|(_, _, v)| v.is_finite() && sign(*v) == sign(c.published_pct))
                    .map(|(k, f, _)| (k.clone(), *f))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// How many variants `c` was replayed under.
    pub fn replayed(&self, c: &Change) -> usize {
        self.find(c).map_or(0, |s| s.variants.len())
    }

    /// The report's part: per change, its lowest and highest projection over the variants and
    /// the variants that give it the published sign; then the table's count.
    pub fn render(&self, table: &str, changes: &[Change]) -> String {
        let mut s = String::new();
        let factors: Vec<String> = self.factors.iter().map(|f| format!("x{f:.2}")).collect();
        let _ = writeln!(
            s,
            "\nsensitivity: each machine number scaled alone by {}, the same captures replayed and compared{} (not a confidence interval):",
            factors.join(" and "),
            if self.trap_refit {
                ", kernel.trap_ns fitted again for each variant as for the machine as it is"
            } else {
                ""
            }
        );
        for (k, f, why) in &self.skipped {
            let _ = writeln!(s, "  {k} x{f:.2} not replayed: {why}");
        }
        let mut rows: Vec<Vec<String>> = Vec::new();
        for c in changes {
            let Some(cs) = self.find(c) else { continue };
            let pick = |low: bool| {
                cs.variants
                    .iter()
                    .filter(|v| v.2.is_finite())
                    .min_by(|a, b| {
                        if low {
                            a.2.total_cmp(&b.2)
                        } else {
                            b.2.total_cmp(&a.2)
                        }
                    })
                    .map_or("-".to_string(), |(k, f, v)| {
                        format!("{v:+.2}% ({k} x{f:.2})")
                    })
            };
            let under = self.published_sign_under(c);
            let verdict = if under.len() == cs.variants.len() && !under.is_empty() {
                "every variant".to_string()
            } else if under.is_empty() {
                "none".to_string()
            } else {
                under
                    .iter()
                    .map(|(k, f)| format!("{k} x{f:.2}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            rows.push(vec![
                c.profile.clone(),
                c.mode.clone(),
                c.tasks.to_string(),
                c.metric.clone(),
                format!("{:+.2}%", c.published_pct),
                format!("{:+.2}%", c.projected_pct),
                pick(true),
                pick(false),
                verdict,
            ]);
        }
        const HEAD: [&str; 9] = [
            "profile",
            "mode",
            "tasks",
            "metric",
            "published",
            "projected",
            "lowest",
            "highest",
            "published sign under",
        ];
        // Names left, figures right, the verdict as it comes.
        s.push_str(&crate::table::render(&HEAD, &rows, &[2, 4, 5, 6, 7], false));
        let beyond: Vec<&Change> = changes.iter().filter(|c| c.beyond_noise).collect();
        let wrong: Vec<&&Change> = beyond.iter().filter(|c| !c.sign_right()).collect();
        let reachable = wrong
            .iter()
            .filter(|c| !self.published_sign_under(c).is_empty())
            .count();
        let right: Vec<&&Change> = beyond.iter().filter(|c| c.sign_right()).collect();
        let kept = right
            .iter()
            .filter(|c| {
                let n = self.replayed(c);
                n > 0 && self.published_sign_under(c).len() == n
            })
            .count();
        let _ = writeln!(
            s,
            "{table}: sensitivity: wrong signs beyond the published noise: {}, of which {reachable} take the published sign under some single variant; right signs: {}, of which {kept} keep it under every variant",
            wrong.len(),
            right.len()
        );
        if self.interrupted {
            let _ = writeln!(
                s,
                "{table}: sensitivity: interrupted; only the variants above were replayed"
            );
        }
        s
    }
}

impl TableReport {
    /// The report as text.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{} ({}) on {}: {} means, as published; {} capture{} of each profile",
            self.table,
            self.experiment,
            self.machine,
            self.mean.name(),
            self.captures,
            if self.captures == 1 { "" } else { "s" }
        );
        let _ = writeln!(s, "  {}", self.trap.describe(self.captures));
        for (profile, g, paced) in &self.guards {
            let _ = writeln!(
                s,
                "  capture of {profile}: {}",
                g.as_ref()
                    .map_or("no preemption guard".to_string(), |g| g.describe())
            );
            if let Some(p) = paced {
                let _ = writeln!(s, "    paced: {}", p.describe());
            }
        }
        let _ = writeln!(
            s,
            "{:<22} {:<9} {:>5} {:<10} {:>13} {:>13} {:>8} {:>9} {:>9}  captures' range",
            "profile",
            "mode",
            "tasks",
            "metric",
            "published",
            "projected",
            "error",
            "pub x1",
            "proj x1",
        );
        for r in &self.rows {
            let sc = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
            let _ = writeln!(
                s,
                "{:<22} {:<9} {:>5} {:<10} {:>13.0} {:>13.0} {:>+7.1}% {:>9} {:>9}  {:.0}..{:.0}{}",
                r.profile,
                r.mode,
                r.tasks,
                r.metric,
                r.published,
                r.projected,
                r.error_pct,
                sc(r.published_scaling),
                sc(r.projected_scaling),
                r.projected_low,
                r.projected_high,
                if r.fitted {
                    "  (trap_ns fitted here)"
                } else if !r.projected.is_finite() {
                    "  FAILED"
                } else {
                    ""
                }
            );
        }
        if !self.changes.is_empty() {
            let _ = writeln!(s, "\nchanges against the baseline profile (points):");
            let _ = writeln!(
                s,
                "{:<22} {:<9} {:>5} {:<10} {:>10} {:>10} {:>19} {:>7} {:>6} {:>6}",
                "profile",
                "mode",
                "tasks",
                "metric",
                "published",
                "projected",
                "captures' range",
                "noise",
                "sign",
                "error"
            );
            for c in &self.changes {
                let _ = writeln!(
                    s,
                    "{:<22} {:<9} {:>5} {:<10} {:>+9.2}% {:>+9.2}% {:>19} {:>7} {:>6} {:>6.2}",
                    c.profile,
                    c.mode,
                    c.tasks,
                    c.metric,
                    c.published_pct,
                    c.projected_pct,
                    format!("[{:+.2}, {:+.2}]", c.projected_low, c.projected_high),
                    if c.beyond_noise { "beyond" } else { "within" },
                    if c.failed() {
                        "FAILED"
                    } else if c.sign_right() {
                        "right"
                    } else {
                        "WRONG"
                    },
                    c.error_points()
                );
            }
        }
        s.push('\n');
        s.push_str(&self.summary.render(&self.table));
        if !self.claims.is_empty() {
            let count =
                |v: crate::claims::Verdict| self.claims.iter().filter(|c| c.verdict == v).count();
            let _ = writeln!(
                s,
                "{}: what the posting says limited its kernels, against the projection's lock statistics: {} of {} agree on every capture, {} mixed",
                self.table,
                count(crate::claims::Verdict::Agrees),
                self.claims.len(),
                count(crate::claims::Verdict::Mixed)
            );
            for c in &self.claims {
                let _ = writeln!(s, "  {}: \"{}\" ({})", c.verdict(), c.says, c.source);
                let _ = writeln!(s, "    projected: {}", c.projected);
                if c.per_capture.len() > 1 {
                    let _ = writeln!(s, "    per capture: {}", c.per_capture_text());
                }
            }
        }
        if let Some(t) = &self.sensitivity {
            s.push_str(&t.render(&self.table, &self.changes));
        }
        s
    }
}

/// The range of the percent change from `base[k]` to `new[k]` over the rounds `k` of paced
/// captures: the captures of one round share the level their pacing gave them, and a pairing
/// across rounds would add the host's drift between the rounds, which the pacing took out of
/// every round alike ([`crate::capture::pace`]). Every pairing ([`change_range`]) when the
/// two sides do not have one capture per round each.
pub fn paired_change_range(base: &[f64], new: &[f64]) -> (f64, f64) {
    if base.len() != new.len() || base.is_empty() {
        return change_range(base, new);
    }
    if base.iter().chain(new).any(|x| !x.is_finite()) {
        return (f64::NAN, f64::NAN);
    }
    base.iter()
        .zip(new)
        .map(|(&b, &n)| pct_change(b, n, true))
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), c| {
            (l.min(c), h.max(c))
        })
}

/// The range of the percent change from `base` to `new` over every pairing of one of `base`'s
/// values with one of `new`'s: `pct_change` is monotonic in each argument, so the extremes come
/// from the extremes. NaN when either side is empty or not finite.
pub fn change_range(base: &[f64], new: &[f64]) -> (f64, f64) {
    let ext = |v: &[f64]| {
        if v.is_empty() || v.iter().any(|x| !x.is_finite()) {
            None
        } else {
            Some(
                v.iter()
                    .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &x| {
                        (l.min(x), h.max(x))
                    }),
            )
        }
    };
    match (ext(base), ext(new)) {
        (Some((bl, bh)), Some((nl, nh))) => {
            let c = [
                pct_change(bl, nl, true),
                pct_change(bl, nh, true),
                pct_change(bh, nl, true),
                pct_change(bh, nh, true),
            ];
            (
                c.iter().copied().fold(f64::INFINITY, f64::min),
                c.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            )
        }
        _ => (f64::NAN, f64::NAN),
    }
}

/// Compares projected rows with a published table: `projected(profile, mode, tasks)` is the
/// projection of that row (`None` if there is none), `base` the baseline profile whose one-task
/// rows `trap_ns` is fitted to. `paced`: the k-th captures of all profiles were taken in one
/// round and their compute set side by side ([`crate::capture::pace`]), so a change's range is
/// taken over the rounds ([`paired_change_range`]) rather than over every pairing.
pub fn compare_table(
    p: &Published,
    rows: &[PubRow],
    base: &str,
    projected: &dyn Fn(&str, Mode, usize) -> Option<ProjRow>,
    paced: bool,
) -> Result<(Vec<Compared>, Vec<Change>), ProjectError> {
    let proj = |profile: &str, mode: Mode, tasks: usize, metric: &str| {
        projected(profile, mode, tasks).map(|r| {
            (
                p.mean.of(&r.values(metric)),
                r.capture_means(metric, p.mean == MeanKind::Harmonic),
            )
        })
    };
    let published = |profile: &str, mode: Mode, tasks: usize, metric: &str| -> Option<&PubRow> {
        rows.iter().find(|r| {
            r.profile == profile && r.mode == mode && r.tasks == tasks && r.metric == metric
        })
    };
    let (mut compared, mut changes) = (Vec::new(), Vec::new());
    for r in rows {
        let Some((q, q_caps)) = proj(&r.profile, r.mode, r.tasks, &r.metric) else {
            return Err(ProjectError::Table(format!(
                "published table {}: no projection of `{}` {} {} tasks `{}` in experiment {}",
                p.name, r.profile, r.mode, r.tasks, r.metric, p.experiment
            )));
        };
        let one_pub = published(&r.profile, r.mode, 1, &r.metric).map(|b| b.value);
        let one_proj = proj(&r.profile, r.mode, 1, &r.metric).map(|b| b.0);
        let (lo, hi) = q_caps
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &x| {
                (l.min(x), h.max(x))
            });
        compared.push(Compared {
            profile: r.profile.clone(),
            mode: r.mode.to_string(),
            tasks: r.tasks,
            metric: r.metric.clone(),
            published: r.value,
            projected: q,
            projected_low: lo,
            projected_high: hi,
            error_pct: 100.0 * (q - r.value) / r.value,
            published_scaling: one_pub.map(|b| r.value / b),
            projected_scaling: one_proj.map(|b| q / b).filter(|v| v.is_finite()),
            fitted: r.profile == base && r.tasks == 1,
        });
        if r.profile != base
            && let (Some(pb), Some((qb, qb_caps))) = (
                published(base, r.mode, r.tasks, &r.metric),
                proj(base, r.mode, r.tasks, &r.metric),
            )
        {
            let (low, high) = if paced {
                paired_change_range(&qb_caps, &q_caps)
            } else {
                change_range(&qb_caps, &q_caps)
            };
            changes.push(Change {
                profile: r.profile.clone(),
                mode: r.mode.to_string(),
                tasks: r.tasks,
                metric: r.metric.clone(),
                published_pct: pct_change(pb.value, r.value, true),
                projected_pct: pct_change(qb, q, true),
                projected_low: low,
                projected_high: high,
                beyond_noise: beyond_noise(pb, r),
            });
        }
    }
    Ok((compared, changes))
}

/// Where a validation's `kernel.trap_ns` came from.
#[derive(Clone, Debug, Serialize)]
pub struct TrapSource {
    /// The machine file's value (fitted on the host its `[calibration]` names).
    pub file_ns: f64,
    /// The fit redone on this host from the validation's own captures of the baseline, when
    /// it was ([`validate_table`]'s `refit_trap`); the rows were then replayed with it.
    pub refit: Option<crate::calibrate::TrapFit>,
    /// Why a refit that was asked for could not be made (the replay without a trap already
    /// as slow as the published row): the file's value was used, and the report says so.
    pub refit_failed: Option<String>,
    /// The table is held out ([`Published::held_out`]): the file's value, never fitted to it.
    pub held_out: bool,
}

impl TrapSource {
    /// `machine`'s `trap_ns` fitted again to `table` from `baseline`'s captures (the table's
    /// baseline profile), or the file's value with the reason when no trap is left to fit.
    pub fn refit(
        table: &Published,
        machine: &Machine,
        baseline: &[crate::trace::Trace],
        samples: usize,
        seed: u64,
        ops_per_cpu: u64,
    ) -> Result<TrapSource, ProjectError> {
        let replayed =
            crate::calibrate::untrapped_ns(table, machine, baseline, samples, seed, ops_per_cpu)?;
        let (refit, refit_failed) = match crate::calibrate::trap_fit(table, replayed) {
            Ok(f) => (Some(f), None),
            Err(ProjectError::Calibrate(why)) => (None, Some(why)),
            Err(e) => return Err(e),
        };
        Ok(TrapSource {
            file_ns: machine.kernel.trap_ns,
            refit,
            refit_failed,
            held_out: false,
        })
    }

    /// The value the rows were replayed with.
    pub fn used_ns(&self) -> f64 {
        self.refit.as_ref().map_or(self.file_ns, |f| f.trap_ns)
    }

    /// One line for the user: the value used and where it came from (`captures`: how many
    /// captures of the baseline the fit took the quickest of).
    pub fn describe(&self, captures: usize) -> String {
        match &self.refit {
            Some(f) => format!(
                "kernel.trap_ns refitted on this host: {row} published {p:.2} ns, replayed without a trap {r:.1} ns (the quickest of {captures} capture{s}), trap {t} ns (the machine file holds {file}, fitted where it was calibrated)",
                row = f.row,
                p = f.published_ns,
                r = f.replayed_ns,
                s = if captures == 1 { "" } else { "s" },
                t = f.trap_ns,
                file = self.file_ns,
            ),
            None => match &self.refit_failed {
                Some(why) => format!(
                    "kernel.trap_ns {} ns, the machine file's: it could not be fitted again here ({why})",
                    self.file_ns
                ),
                None if self.held_out => format!(
                    "kernel.trap_ns {} ns, the machine file's (a held-out table: nothing is fitted to it)",
                    self.file_ns
                ),
                None => format!(
                    "kernel.trap_ns {} ns, the machine file's (--trap-from-file)",
                    self.file_ns
                ),
            },
        }
    }
}

/// Projects one published table's experiment on its machine and compares.
///
/// With `refit_trap` the machine's one fitted number, `kernel.trap_ns`, is fitted again before
/// any row is replayed, from this validation's own captures of the baseline profile, exactly
/// as `pagelab calibrate --from-table` fits it ([`crate::calibrate::trap_fit`]): what a fault
/// costs beyond the engine's model is the published one-task time less what the captured
/// compute replays to, and that compute is the capture host's. The machine files hold the fit
/// made on the host that shipped them; replayed with captures from another host, every row's
/// level would carry the two hosts' difference (on a 2-vCPU Intel Xeon VM, the fitted rows
/// themselves came out 17.6% low with the file's value, fitted on an AMD EPYC). The fitted rows
/// stay out of every summary either way. A held-out table ([`Published::held_out`]) is never
/// fitted to: it is replayed with the machine file's `trap_ns`, whatever `refit_trap` says.
///
/// With `sensitivity` (a fraction, 0.25 for 25%), the same captures are replayed again with
/// each number of the machine (after the refit) scaled by `1 - sensitivity` and
/// `1 + sensitivity` alone, and compared as the table is: whether an estimate in the machine
/// file could account for a change's error ([`TableSensitivity`]).
#[allow(clippy::too_many_arguments)]
pub fn validate_table(
    p: &Published,
    samples: usize,
    captures: usize,
    seed: u64,
    ops_per_cpu: u64,
    refit_trap: bool,
    sensitivity: Option<f64>,
    progress: &mut dyn FnMut(Progress<'_>),
    stop: &AtomicBool,
) -> Result<TableReport, ProjectError> {
    if let Some(f) = sensitivity
        && !(f > 0.0 && f < 1.0)
    {
        return Err(ProjectError::Request(format!(
            "the sensitivity must be above 0% and below 100%, not {}%",
            f * 100.0
        )));
    }
    let e = experiments::load(p.experiment)?;
    let machine = Machine::load(p.machine)?;
    let refit_trap = refit_trap && !p.held_out;
    if refit_trap {
        // A table with no row to fit is refused before minutes of capturing, not after.
        crate::calibrate::fitted_rows(p)?;
    }
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
    let mut spec = ProjectSpec {
        machine,
        workload,
        profiles,
        modes,
        tasks,
        samples,
        captures,
        seed,
        ops_per_cpu,
        region_bytes: None,
        kvcache: None,
    };
    let Some(traces) = capture_all(&spec, progress, stop)? else {
        return Err(ProjectError::Interrupted);
    };
    let trap = if refit_trap {
        // The baseline is the experiment's first profile, as `fitted_rows` says.
        TrapSource::refit(p, &spec.machine, &traces[0], samples, seed, spec.ops_for(1))?
    } else {
        TrapSource {
            file_ns: spec.machine.kernel.trap_ns,
            refit: None,
            refit_failed: None,
            held_out: p.held_out,
        }
    };
    spec.machine.kernel.trap_ns = trap.used_ns();
    let kept = sensitivity.map(|_| traces.clone());
    let (proj, interrupted) = project_traces(&spec, traces, progress, stop)?;
    if interrupted {
        return Err(ProjectError::Interrupted);
    }
    let projected = |profile: &str, mode: Mode, tasks: usize| -> Option<ProjRow> {
        let pr = proj.iter().find(|p| p.profile.name == profile)?;
        pr.rows
            .iter()
            .find(|r| r.mode == mode && r.tasks == tasks)
            .cloned()
    };
    let paced = proj
        .iter()
        .all(|p| p.traces.iter().all(|t| t.meta.paced.is_some()));
    let (compared, changes) = compare_table(p, &rows, &e.profiles[0].name, &projected, paced)?;
    let claims = p.claims.iter().map(|c| c.check(&projected)).collect();
    let sensitivity = match (sensitivity, kept) {
        (Some(f), Some(traces)) => Some(table_sensitivity(
            p, &rows, &e, &spec, &traces, &changes, &trap, f, paced, progress, stop,
        )?),
        _ => None,
    };
    Ok(TableReport {
        table: p.name.to_string(),
        experiment: p.experiment.to_string(),
        machine: spec.machine.name.clone(),
        mean: p.mean,
        captures,
        trap,
        summary: Summaries::of(&compared, &changes),
        rows: compared,
        changes,
        claims,
        events: proj.iter().flat_map(|p| &p.rows).map(ProjRow::events).sum(),
        guards: proj
            .iter()
            .flat_map(|p| {
                p.traces
                    .iter()
                    .map(|t| (p.profile.name.clone(), t.meta.guard.clone(), t.meta.paced))
            })
            .collect(),
        replay_seconds: proj
            .iter()
            .flat_map(|p| &p.rows)
            .map(ProjRow::seconds)
            .sum(),
        sensitivity,
    })
}

/// [`validate_table`]'s sensitivity: each parameter of [`crate::sensitivity::Param::ALL`] that
/// applies to the machine, scaled by `1 - f` and `1 + f`, the captures replayed and compared.
/// With `trap` refitted, each variant's trap is fitted again from the baseline's captures on
/// that variant, as `validate` fits the machine as it is: a 25% slower clock moves the
/// replayed one-task row, and the fit would take it up, so what a variant shows is what the
/// validation would have shown with that number in the file. The `kernel.trap_ns` variants
/// scale the fitted value instead (the fit 25% off). Stops between variants when `stop` is
/// set; a variant whose machine is invalid or whose replay fails is listed and skipped.
#[allow(clippy::too_many_arguments)]
fn table_sensitivity(
    p: &Published,
    rows: &[PubRow],
    e: &experiments::Experiment,
    spec: &ProjectSpec,
    traces: &[Vec<crate::trace::Trace>],
    changes: &[Change],
    trap: &TrapSource,
    f: f64,
    paced: bool,
    progress: &mut dyn FnMut(Progress<'_>),
    stop: &AtomicBool,
) -> Result<TableSensitivity, ProjectError> {
    use crate::sensitivity::{Param, runs};
    let factors = vec![1.0 - f, 1.0 + f];
    let runs = runs(&spec.machine, &Param::ALL, &factors);
    let trap_refit = trap.refit.is_some();
    let mut out = TableSensitivity {
        factors: factors.clone(),
        trap_refit,
        skipped: Vec::new(),
        changes: changes
            .iter()
            .map(|c| ChangeSensitivity {
                profile: c.profile.clone(),
                mode: c.mode.clone(),
                tasks: c.tasks,
                metric: c.metric.clone(),
                variants: Vec::new(),
            })
            .collect(),
        interrupted: false,
    };
    let total = runs.len();
    for (i, (param, factor)) in runs.into_iter().enumerate() {
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            out.interrupted = true;
            break;
        }
        let mut machine = param.apply(&spec.machine, factor);
        let replayed = machine.check().map_err(|e| e.to_string()).and_then(|()| {
            if trap_refit && param != Param::TrapNs {
                let t = TrapSource::refit(
                    p,
                    &machine,
                    &traces[0],
                    spec.samples,
                    spec.seed,
                    spec.ops_for(1),
                )
                .map_err(|e| e.to_string())?;
                machine.kernel.trap_ns = t.used_ns();
            }
            let vspec = ProjectSpec {
                machine,
                ..spec.clone()
            };
            project_traces(&vspec, traces.to_vec(), &mut |_| {}, stop).map_err(|e| e.to_string())
        });
        let proj = match replayed {
            Ok((_, true)) => {
                out.interrupted = true;
                break;
            }
            Ok((proj, false)) => proj,
            Err(why) => {
                out.skipped.push((param.key().to_string(), factor, why));
                continue;
            }
        };
        let projected = |profile: &str, mode: Mode, tasks: usize| -> Option<ProjRow> {
            let pr = proj.iter().find(|p| p.profile.name == profile)?;
            pr.rows
                .iter()
                .find(|r| r.mode == mode && r.tasks == tasks)
                .cloned()
        };
        let (_, vchanges) = compare_table(p, rows, &e.profiles[0].name, &projected, paced)?;
        for (slot, c) in out.changes.iter_mut().zip(changes) {
            if let Some(v) = vchanges.iter().find(|v| {
                v.profile == c.profile
                    && v.mode == c.mode
                    && v.tasks == c.tasks
                    && v.metric == c.metric
            }) {
                slot.variants
                    .push((param.key().to_string(), factor, v.projected_pct));
            }
        }
        progress(Progress::Variant {
            done: i + 1,
            total,
            param: param.key(),
            factor,
        });
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
    /// Each task's share of its CPU the replay ran it with (`cpu.share`, measured beside the
    /// engine's run).
    pub share: f64,
    /// The mean time a task waited for its CPU each time the host descheduled it, ns
    /// (measured with the share; not replayed, see [`self_check_on`]).
    pub wait_ns: f64,
    /// The transfer of a line between two cores the row was replayed with, ns
    /// (`latency.core_ns`, measured beside the engine's run: [`Beside`]).
    pub core_ns: f64,
    /// One core's clearing bandwidth the row was replayed with, GB/s
    /// (`memory.core_bandwidth_gbs`, measured beside the engine's run: [`Beside`]).
    pub core_gbs: f64,
    /// A node's, every allowed CPU clearing at once (`memory.node_bandwidth_gbs`, measured
    /// beside the engine's run: [`Beside`]).
    pub node_gbs: f64,
    /// The engine's compute per operation the row's trace was given, ns: the profile timed
    /// alone just before and after the engine's run ([`crate::capture::pace`]), where the
    /// capture's own untraced window was timed a minute away. `None` where it could not be
    /// timed (the capture's own then stands).
    pub compute_ns: Option<f64>,
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
            "{:<12} {:<9} {:>5} {:<10} {:>13} {:>13} {:>8} {:>9} {:>8} {:>8} {:>11} {:>10}",
            "workload",
            "mode",
            "tasks",
            "metric",
            "measured",
            "projected",
            "error",
            "cpu share",
            "wait ms",
            "xfer ns",
            "clear GB/s",
            "compute ns"
        );
        for r in &self.rows {
            let _ = writeln!(
                s,
                "{:<12} {:<9} {:>5} {:<10} {:>13.0} {:>13.0} {:>+7.1}% {:>9.2} {:>8.2} {:>8.1} {:>11} {:>10}",
                r.workload,
                r.mode,
                r.tasks,
                r.metric,
                r.measured,
                r.projected,
                r.error_pct,
                r.share,
                r.wait_ns / 1e6,
                r.core_ns,
                format!("{:.1}/{:.1}", r.core_gbs, r.node_gbs),
                r.compute_ns
                    .map_or("capture's".to_string(), |c| format!("{c:.1}"))
            );
        }
        let med = median(
            &self
                .rows
                .iter()
                .map(|r| r.error_pct.abs())
                .collect::<Vec<_>>(),
        );
        let _ = writeln!(s, "median absolute error {med:.1}%");
        s
    }
}

/// Timed turns of the profile alone on each side of a self-check row's engine run (about 0.3 s
/// of page_fault1, 0.05 s of pft).
pub const SELF_CHECK_TURNS: usize = 3;

/// Projects this host at 1 and 2 tasks and measures the engine here with the same profile:
/// page_fault1 in both modes, pft in threads mode. The host is measured first
/// ([`crate::calibrate::measure_host_for_engine`]: the machine the engine runs on, not a
/// description embedded at build time), and replayed with its own parameters.
pub fn self_check(
    seed: u64,
    progress: &mut dyn FnMut(&str),
    stop: &AtomicBool,
) -> Result<SelfCheck, ProjectError> {
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
) -> Result<SelfCheck, ProjectError> {
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
        // The share of a CPU the host gives each task, measured on each side of each row's
        // engine run (the host's other work comes and goes within seconds): the replay runs
        // each task that part of the time, as the host ran the engine's, meeting the others
        // only while they run too ([`project_measured`]). Not in simulated turns: the host's
        // turns (a wait of milliseconds each time a task is descheduled) are longer than the
        // few milliseconds a self-check row replays, so a row would hold a turn or two and
        // its rate would be the luck of its phase; the measured waits are reported instead.
        let window = std::time::Duration::from_millis(300);
        // The engine's compute per operation drifts on this host by tens of percent within
        // seconds (docs/model.md, "The profiles side by side"), and the capture below times
        // its own a minute after the rows ran: each row's trace is given the compute of the
        // profile timed alone just before and just after its run instead.
        // Timed with lock statistics as the row's run counts them (none; the run leaves the
        // process-wide switch as it set it), so that both pay the same per acquisition.
        let compute_beside = |lock_stat: bool| -> Option<f64> {
            pagelab_sync::stats::set_enabled(lock_stat);
            // A pacing that fails (an engine that cannot boot beside the others) leaves the
            // row with the capture's own compute: the row is still checked.
            crate::capture::pace::pace(
                w,
                std::slice::from_ref(&profile),
                machine.nr_cpus(),
                crate::capture::PFT_BYTES,
                SELF_CHECK_TURNS,
            )
            .ok()
            .and_then(|p| p.median(0))
        };
        let mut measured: Vec<(Measured, Beside, Option<f64>)> = Vec::new();
        for &mode in &modes {
            for tasks in [1, 2] {
                let req = RunRequest {
                    workload: w,
                    target: Target::Engine {
                        profile: profile.name.clone(),
                        policy: profile.policy.clone(),
                    },
                    tasks: vec![tasks],
                    modes: vec![mode],
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
                    // No lock statistics: the kernels the replay models count none, the
                    // capture and the pacing beside the row count none, and counting added
                    // about a third to the engine's compute a fault here (2026-11-29: 820 to
                    // 910 ns timed beside the rows with it, 530 to 650 without).
                    lock_stat: false,
                };
                let footprint = Beside::footprint(w, tasks, req.sizes);
                let before = Beside::measure(&machine, tasks, footprint, window);
                let c0 = compute_beside(req.lock_stat);
                let rows = pagelab_bench::run::run(&req, stop, &mut |_, _, _| {}, &mut |_| Ok(()))?;
                let c1 = compute_beside(req.lock_stat);
                let beside = before.mean(&Beside::measure(&machine, tasks, footprint, window));
                let compute = match (c0, c1) {
                    (Some(a), Some(b)) => Some((a + b) / 2.0),
                    (a, b) => a.or(b),
                };
                measured.extend(rows.into_iter().map(|r| {
                    let m = Measured {
                        mode: r.mode,
                        tasks: r.tasks,
                        metrics: r.metrics.into_iter().map(|m| (m.name, m.samples)).collect(),
                    };
                    (m, beside, compute)
                }));
            }
        }
        progress(&format!("capturing and replaying {w}"));
        // Sized as the engine measured beside it is (its own arena), not as the host's
        // node: the self-check compares the engine with its own projection.
        let raw = crate::capture::capture_raw(&crate::capture::CaptureSpec::new(
            w,
            profile.clone(),
            machine.nr_cpus(),
        ))?;
        for (m, beside, compute) in measured {
            let host = beside.host(&machine, m.tasks);
            let mut r = raw.clone();
            if let Some(c) = compute {
                r.pace_to(c, 1.0, SELF_CHECK_TURNS);
            }
            let trace = r.build();
            let mut rows = project_measured(&host, &trace, std::slice::from_ref(&m), seed)?;
            for r in &mut rows {
                r.wait_ns = beside.wait_ns;
                r.compute_ns = trace.meta.paced.map(|p| p.compute_ns);
            }
            out.rows.extend(rows);
        }
    }
    Ok(out)
}

/// What the host gave the engine's tasks around one self-check row, measured on each side of
/// its run and averaged: each task's share of its CPU and its mean wait
/// ([`crate::calibrate::cpu_share`]), the transfer of a line between the first two CPUs,
/// where the row's tasks run ([`crate::calibrate::core_transfer_ns`]), and the clearing
/// bandwidth of one core and of every CPU at once ([`crate::calibrate::clear_bandwidth_gbs`]).
///
/// The transfer is measured beside each row rather than taken from the calibration at the
/// start because it does not stay put on a shared host: on a 2-vCPU guest on an AMD EPYC it
/// measured 31 ns for stretches of tens of seconds and 145-158 ns for others (30 measurements
/// 0.5 s apart, 2026-11-24: 21 at 31 ns, 7 at 145-149, then 31 again), as if the hypervisor
/// moved the two vCPUs between one core complex and two (an L3 shared or not). Every line the
/// tasks pass between them (the per-VMA lock's count, the LRU and free lists) costs the engine
/// that transfer, so the replay of a row must use the one the row ran with, not one drawn a minute
/// earlier. The clearing bandwidth moves too (one core 11.2 to 18.5 GB/s in twelve
/// measurements 0.5 s apart on that guest on 2026-11-29, two runs of `selfcheck_probe bandwidth
/// 6`, whose 64 MiB passes a last-level cache may partly hold: [`Beside::footprint`]), and
/// clearing is 40 to 50% of the engine's time a fault (`perf record` of `pagelab run pft`,
/// `Arena::zero_page`), so it is measured beside the row for the same reason.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Beside {
    pub share: f64,
    pub wait_ns: f64,
    /// `None` where the machine has SMT (the first two CPUs may be siblings, whose transfer
    /// is `smt_ns`): the calibration's figures stand.
    pub core_ns: Option<f64>,
    /// One core's clearing bandwidth, GB/s (`memory.core_bandwidth_gbs`).
    pub core_gbs: Option<f64>,
    /// A node's, every allowed CPU clearing at once (`memory.node_bandwidth_gbs`); at least
    /// one core's.
    pub node_gbs: Option<f64>,
}

impl Beside {
    /// The least a clearing pass covers beside a row: a pass of a few milliseconds.
    const MIN_CLEAR_BYTES: usize = 16 << 20;
    /// The most a clearing beside a row covers, one core alone or every CPU at once, so that a
    /// large footprint (pft's default 1 GiB region) or a host of hundreds of CPUs does not
    /// have the check fault in and clear many GiB beside every row.
    const MAX_CLEAR_BYTES: usize = 1 << 30;
    /// The least each CPU clears when every CPU clears at once: on a host of many CPUs their
    /// shares of the footprint would be too small to time, so the total is then more than the
    /// footprint (above 64 CPUs for page_fault1's 256 MiB at two tasks).
    const MIN_CLEAR_EACH: usize = 4 << 20;

    /// What the engine's run of a self-check row writes over and over: page_fault1's and
    /// page_fault3's region per task, page_fault2's two, and pft's one region shared by its
    /// threads (pft-vma-per-thread and lameter likewise); the other workloads, which the
    /// self-check does not run, are taken as page_fault1's. The clearing bandwidth beside the
    /// row is measured over as much memory, because the engine's clears see the caches its
    /// footprint leaves them. Until 2026-11-30 it was a fixed 64 MiB, twice the last-level cache
    /// of the AMD EPYC guest this ran on then. On the Intel Xeon guest that replaced it (480 MiB
    /// of L3 shared with other guests) 64 MiB passes measured 8.1 to 15.0 GB/s, as more or less
    /// of them stayed in the cache, while 128 MiB and larger ones measured 7.4 to 8.5 GB/s, and
    /// the engine's own clears in page_fault1 ran at 9.2 GB/s (`selfcheck_probe clear-order MIB
    /// N`; `pagelab trace` of a capture's untraced writes). Every row was then projected 10 to
    /// 63% faster than the engine ran (docs/model-history.md, round 43).
    pub fn footprint(w: WorkloadKind, tasks: usize, sizes: pagelab_bench::run::Sizes) -> usize {
        let tasks = tasks as u64;
        let bytes = match w {
            WorkloadKind::Pft | WorkloadKind::PftVmaPerThread | WorkloadKind::Lameter => {
                sizes.pft_bytes
            }
            WorkloadKind::PageFault2 => sizes.memsize.saturating_mul(2).saturating_mul(tasks),
            _ => sizes.memsize.saturating_mul(tasks),
        };
        usize::try_from(bytes).unwrap_or(usize::MAX)
    }

    /// What the clearings beside a row cover for a `footprint` of bytes on `cpus` CPUs: one
    /// core alone clears the footprint, and every CPU at once clears its share of it, each
    /// within the bounds above.
    pub fn clear_sizes(footprint: usize, cpus: usize) -> (usize, usize) {
        let one = footprint.clamp(Self::MIN_CLEAR_BYTES, Self::MAX_CLEAR_BYTES);
        let each = (footprint.min(Self::MAX_CLEAR_BYTES) / cpus.max(1)).max(Self::MIN_CLEAR_EACH);
        (one, each)
    }

    /// Measures the share of `tasks` busy tasks over `window`, the transfer, and the clearing
    /// bandwidths over `footprint` bytes ([`Beside::footprint`], [`Beside::clear_sizes`]).
    /// With page_fault1's 128 MiB a task and pft's 256 MiB, nine passes of each clearing take
    /// a third to two thirds of a second each time on a host clearing at 8 GB/s, two times a
    /// row.
    pub fn measure(
        machine: &Machine,
        tasks: usize,
        footprint: usize,
        window: std::time::Duration,
    ) -> Beside {
        let (share, wait_ns) = crate::calibrate::cpu_share(tasks, window);
        let core_ns = (machine.topology.threads_per_core == 1 && machine.nr_cpus() >= 2)
            .then(crate::calibrate::core_transfer_ns);
        let positive = |g: f64| (g.is_finite() && g > 0.0).then_some(g);
        // Every CPU this process may use, as calibrate counts them (`pin_to_core` wraps
        // around the allowed ones, so more threads than that would share CPUs).
        let cpus = pagelab_workloads::pin::allowed_cpus().len().max(1);
        let (one, each) = Self::clear_sizes(footprint, cpus);
        let core_gbs = positive(crate::calibrate::clear_bandwidth_gbs(1, one));
        let nodes = machine.nr_nodes().max(1) as f64;
        let node_gbs = positive(crate::calibrate::clear_bandwidth_gbs(cpus, each) / nodes)
            .map(|n| core_gbs.map_or(n, |c| n.max(c)));
        Beside {
            share,
            wait_ns,
            core_ns,
            core_gbs,
            node_gbs,
        }
    }

    /// The mean of two measurements (before and after a row).
    pub fn mean(&self, other: &Beside) -> Beside {
        Beside {
            share: (self.share + other.share) / 2.0,
            wait_ns: (self.wait_ns + other.wait_ns) / 2.0,
            core_ns: mean_of(self.core_ns, other.core_ns),
            core_gbs: mean_of(self.core_gbs, other.core_gbs),
            node_gbs: mean_of(self.node_gbs, other.node_gbs),
        }
    }

    /// `machine` as it was around a row of `tasks` tasks: each task run for the share (its
    /// tasks meeting only while both run: [`project_measured`]), the transfer and the
    /// bandwidths measured (a node never below one core).
    pub fn host(&self, machine: &Machine, tasks: usize) -> Machine {
        let mut host = machine.clone();
        host.cpu.share = vec![[tasks as f64, self.share, 0.0]];
        if let Some(ns) = self.core_ns {
            host.latency.core_ns = (ns * 10.0).round() / 10.0;
        }
        let round = |g: f64| (g * 100.0).round() / 100.0;
        if let Some(c) = self.core_gbs {
            host.memory.core_bandwidth_gbs = round(c);
        }
        if let Some(n) = self.node_gbs {
            host.memory.node_bandwidth_gbs = round(n);
        }
        host.memory.node_bandwidth_gbs = host
            .memory
            .node_bandwidth_gbs
            .max(host.memory.core_bandwidth_gbs);
        host
    }
}

/// The mean of two optional measurements, or the one there is.
fn mean_of(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some((a + b) / 2.0),
        (a, b) => a.or(b),
    }
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
///
/// A task the host runs only part of the time (`cpu.share` at the row's task count, `s`
/// below 1) is replayed as the host time-slices it, not as a task slowed down throughout:
/// each task's CPU is taken from it for milliseconds at a time (the measured waits, 4 to 16
/// ms here: a CFS slice, or the hypervisor running another guest's vCPU), thousands of faults
/// long, and the others' turns come and go independently. So while a task runs, each other
/// task runs beside it with probability `s`, and it meets only those: a contended line moves
/// between two cores only while both fault (a line stays with the one task running), and a
/// node's bandwidth is shared only by the writers running at that moment. Each state lasts
/// long enough to reach its own steady state, so the row is the mixture of share-1 replays
/// with `k + 1` tasks, `k` of the `n - 1` others running, weighted binomially
/// (`C(n-1, k) s^k (1-s)^(n-1-k)`): per CPU-second (`*/cpu`) the weighted rate of one CPU;
/// per wall second each of the `n` tasks runs `s` of it at that rate. Replaying the share as a
/// uniform slowdown of every task instead kept all of them on the lines and the bus all the
/// time: the self-check's pft at two tasks then paid every transfer of the per-VMA lock's
/// count and the bus shared by two writers, while the engine's tasks, measured at a share of
/// 0.3 to 0.5, met each other a third to a half of the time. Lock-holder preemption (a turn
/// ending inside a critical section) is left out, as before.
pub fn project_measured(
    machine: &Machine,
    trace: &crate::trace::Trace,
    measured: &[Measured],
    seed: u64,
) -> Result<Vec<SelfRow>, ProjectError> {
    let mut out = Vec::new();
    for r in measured {
        let (share, wait) = machine.cpu.share_at(r.tasks);
        let proj = if share < 1.0 {
            time_sliced_row(machine, trace, r.mode, r.tasks, share, seed)?
        } else {
            crate::project::replay_row(machine, trace, r.mode, r.tasks, 5, seed, 8192)?.metrics
        };
        for (name, samples) in &r.metrics {
            let Some((_, _, pv)) = proj.iter().find(|(n, _, _)| n == name) else {
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
                share,
                wait_ns: wait,
                core_ns: machine.latency.core_ns,
                core_gbs: machine.memory.core_bandwidth_gbs,
                node_gbs: machine.memory.node_bandwidth_gbs,
                compute_ns: None,
            });
        }
    }
    Ok(out)
}

/// Whether `metric` counts operations per CPU-second (pft's `faults/cpu`) rather than per
/// wall second.
fn per_cpu(metric: &str) -> bool {
    metric.ends_with("/cpu")
}

/// One row of `tasks` tasks each run `share` of the time in turns the host deals out
/// independently: the binomial mixture of share-1 replays (see [`project_measured`]). Each
/// metric's `i`-th sample mixes the states' `i`-th samples.
fn time_sliced_row(
    machine: &Machine,
    trace: &crate::trace::Trace,
    mode: Mode,
    tasks: usize,
    share: f64,
    seed: u64,
) -> Result<Vec<(String, bool, Vec<f64>)>, ProjectError> {
    let mut whole = machine.clone();
    whole.cpu.share.clear();
    let others = tasks.saturating_sub(1);
    let mut mixed: Vec<(String, bool, Vec<f64>)> = Vec::new();
    for k in 0..=others {
        let weight =
            binomial(others, k) * share.powi(k as i32) * (1.0 - share).powi((others - k) as i32);
        if weight == 0.0 {
            continue;
        }
        let row = crate::project::replay_row(&whole, trace, mode, k + 1, 5, seed, 8192)?;
        for (name, better, samples) in row.metrics {
            // Per CPU-second: the rate of one CPU in this state. Per wall second: one task's
            // rate in this state, run `share` of the time, for each of the row's tasks.
            let scale = if per_cpu(&name) {
                weight
            } else {
                weight * share * tasks as f64 / (k + 1) as f64
            };
            match mixed.iter_mut().find(|(n, _, _)| *n == name) {
                Some((_, _, acc)) => {
                    for (a, v) in acc.iter_mut().zip(&samples) {
                        *a += scale * v;
                    }
                }
                None => mixed.push((name, better, samples.iter().map(|v| scale * v).collect())),
            }
        }
    }
    Ok(mixed)
}

/// `C(n, k)`, exactly for the task counts a self-check row has.
fn binomial(n: usize, k: usize) -> f64 {
    (0..k).fold(1.0, |c, i| c * (n - i) as f64 / (i + 1) as f64)
}

/// The published table by name.
pub fn published(name: &str) -> Result<&'static Published, ProjectError> {
    BUILTIN.iter().find(|p| p.name == name).ok_or_else(|| {
        let names: Vec<&str> = BUILTIN.iter().map(|p| p.name).collect();
        ProjectError::Table(format!(
            "unknown published table `{name}`; tables: {}",
            names.join(", ")
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_tables_parse_and_name_their_experiments_profiles() {
        for p in BUILTIN {
            let rows = p.rows().unwrap();
            // A calibration table has a curve; a held-out one may be a single comparison.
            assert!(rows.len() >= if p.held_out { 2 } else { 20 }, "{}", p.name);
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
        let e = published("nope").unwrap_err();
        assert!(matches!(e, ProjectError::Table(_)), "{e:?}");
        assert!(e.to_string().contains("page_fault1-2018"));
    }

    /// The self-check replays the machine it is given with that machine's own parameters: a
    /// measured host's clearing bandwidth decides the projection, whatever rate the trace's
    /// writes took when captured.
    /// A published row is a lower bound on what its machine's memory can do: every
    /// page_fault1 fault clears one page, and will-it-scale binds task i to core i, first
    /// socket first, so T tasks run on ceil(T / cores per node) nodes and clear T's faults per
    /// second times the page size there. A machine file whose nodes cannot clear that much
    /// contradicts the table it is validated on (as `broadwell-2s-44c`'s 32 GB/s did: 16
    /// processes of lru-lock-splice on socket 0 clear 33.9 GB/s).
    #[test]
    fn no_published_page_fault1_row_clears_more_than_its_machine_nodes_can() {
        let p = published("page_fault1-2018").unwrap();
        let m = Machine::load(p.machine).unwrap();
        let per_node = m.topology.cores_per_socket / m.topology.nodes_per_socket;
        let nodes = m.topology.sockets * m.topology.nodes_per_socket;
        for r in p.rows().unwrap() {
            let used = r.tasks.div_ceil(per_node).min(nodes) as f64;
            let cleared = r.value * m.memory.page_size as f64;
            let can = used * m.memory.node_bandwidth_gbs * 1e9;
            assert!(
                cleared <= can,
                "{} {:?} {} tasks clears {:.1} GB/s on {used} node(s) of {}, which clear at most {:.1}",
                r.profile,
                r.mode,
                r.tasks,
                cleared / 1e9,
                m.name,
                can / 1e9
            );
        }
    }

    /// A host injected into the self-check: dev-host with one core clearing at 4.096 GB/s
    /// and the node at twice that, no loaded latency.
    fn injected_host() -> Machine {
        let mut host = Machine::load("dev-host").unwrap().as_engine();
        host.name = "injected-host".into();
        host.memory.core_bandwidth_gbs = 4.096;
        host.memory.node_bandwidth_gbs = 8.192;
        host.memory.loaded_latency.clear();
        host
    }

    /// 500 ops of 1000 ns of compute and one page cleared, which took the capture 100 ns
    /// (40 GB/s); on [`injected_host`] the clearing takes 1000 ns (4.096 GB/s).
    fn clearing_trace(host: &Machine) -> crate::trace::Trace {
        compute_and_clear_trace(host, 1000.0)
    }

    /// [`clearing_trace`] with `compute_ns` of compute per op.
    fn compute_and_clear_trace(host: &Machine, compute_ns: f64) -> crate::trace::Trace {
        use crate::trace::{Event, Pinning, Trace, TraceMeta, Window};
        let mut events = Vec::new();
        for _ in 0..500 {
            if compute_ns > 0.0 {
                events.push(Event::Compute { ns: compute_ns });
            }
            events.push(Event::Write {
                bytes: 4096,
                host_ns: 100.0,
            });
            events.push(Event::Ops { n: 1 });
        }
        Trace {
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
            events,
            fallbacks: Vec::new(),
        }
    }

    /// Processes rows at 1 and 2 tasks, measured at `rates` faults/s in all.
    fn measured_rows(rates: [f64; 2]) -> Vec<Measured> {
        (1..=2)
            .zip(rates)
            .map(|(tasks, rate)| Measured {
                mode: Mode::Processes,
                tasks,
                metrics: vec![("faults/sec".into(), vec![rate; 3])],
            })
            .collect()
    }

    /// Every projected row within 1% of what was measured.
    fn assert_rows_agree(rows: &[SelfRow]) {
        assert_eq!(rows.len(), 2);
        for r in rows {
            assert!(
                r.error_pct.abs() < 1.0,
                "{} tasks: projected {} against {}",
                r.tasks,
                r.projected,
                r.measured
            );
        }
    }

    /// Each self-check row says which compute its trace was given: the profile's timed beside
    /// the row, or the capture's own where that could not be timed.
    #[test]
    fn the_self_check_names_the_compute_each_row_was_replayed_with() {
        let host = injected_host();
        let row = |compute_ns| SelfRow {
            workload: "page_fault1".into(),
            mode: "processes".into(),
            tasks: 1,
            metric: "faults/sec".into(),
            measured: 500_000.0,
            projected: 510_000.0,
            error_pct: 2.0,
            share: 1.0,
            wait_ns: 0.0,
            core_ns: 31.0,
            core_gbs: 14.5,
            node_gbs: 21.3,
            compute_ns,
        };
        let c = SelfCheck {
            machine: host.name.clone(),
            profile: "linux-6.7".into(),
            host,
            rows: vec![row(Some(612.34)), row(None)],
        };
        let s = c.render();
        assert!(s.contains("compute ns"), "{s}");
        let lines: Vec<&str> = s.lines().filter(|l| l.starts_with("page_fault1")).collect();
        assert!(lines[0].ends_with(" 612.3"), "{s}");
        assert!(lines[1].ends_with("capture's"), "{s}");
        assert!(s.contains("clear GB/s"), "{s}");
        assert!(lines.iter().all(|l| l.contains(" 14.5/21.3 ")), "{s}");
    }

    /// A row's host is the calibrated one with what was measured beside the row: the share,
    /// the transfer, one core's and the node's clearing bandwidth, the node never below one
    /// core (a node figure under one core's is noise: the cores cannot clear less together
    /// than one of them alone); what was not measured stays as calibrated.
    #[test]
    fn a_rows_host_takes_the_bandwidths_measured_beside_it() {
        let host = injected_host();
        let beside = Beside {
            share: 0.9,
            wait_ns: 0.0,
            core_ns: Some(35.04),
            core_gbs: Some(12.346),
            node_gbs: Some(20.0),
        };
        let h = beside.host(&host, 2);
        assert_eq!(h.latency.core_ns, 35.0);
        assert_eq!(h.memory.core_bandwidth_gbs, 12.35);
        assert_eq!(h.memory.node_bandwidth_gbs, 20.0);
        let low = Beside {
            node_gbs: Some(9.0),
            ..beside
        };
        assert_eq!(low.host(&host, 2).memory.node_bandwidth_gbs, 12.35);
        let none = Beside {
            core_gbs: None,
            node_gbs: None,
            ..beside
        };
        let h = none.host(&host, 2);
        assert_eq!(
            (h.memory.core_bandwidth_gbs, h.memory.node_bandwidth_gbs),
            (
                host.memory.core_bandwidth_gbs,
                host.memory.node_bandwidth_gbs
            )
        );
        let both = beside.mean(&Beside {
            core_gbs: Some(14.0),
            node_gbs: None,
            ..beside
        });
        assert!((both.core_gbs.unwrap() - 13.173).abs() < 1e-9, "{both:?}");
        assert_eq!(
            both.node_gbs,
            Some(20.0),
            "one measurement of two: that one"
        );
    }

    /// The bandwidth beside a row is measured over what the row's engine writes over and
    /// over: page_fault1's region once per task (page_fault2's two), pft's one region
    /// whatever the task count (its siblings likewise); one core clears it all, never less
    /// than a pass of a few milliseconds nor more than 1 GiB, and every CPU at once its share,
    /// at least 4 MiB each.
    #[test]
    fn a_rows_clearing_covers_its_own_footprint_within_bounds() {
        let sizes = pagelab_bench::run::Sizes {
            memsize: 128 << 20,
            pft_bytes: 256 << 20,
            ..Default::default()
        };
        let f = |w, t| Beside::footprint(w, t, sizes);
        assert_eq!(f(WorkloadKind::PageFault1, 1), 128 << 20);
        assert_eq!(f(WorkloadKind::PageFault1, 2), 256 << 20);
        assert_eq!(f(WorkloadKind::PageFault2, 2), 512 << 20);
        for w in [
            WorkloadKind::Pft,
            WorkloadKind::PftVmaPerThread,
            WorkloadKind::Lameter,
        ] {
            assert_eq!(f(w, 1), 256 << 20, "{w}");
            assert_eq!(f(w, 2), 256 << 20, "{w}");
        }
        let huge = pagelab_bench::run::Sizes {
            memsize: u64::MAX / 2,
            ..sizes
        };
        assert_eq!(
            Beside::footprint(WorkloadKind::PageFault2, 4, huge),
            usize::MAX,
            "saturates, does not wrap"
        );
        // One core: the footprint, within [16 MiB, 1 GiB]; each of the CPUs: its share, at
        // least 4 MiB, of at most 1 GiB.
        assert_eq!(Beside::clear_sizes(128 << 20, 2), (128 << 20, 64 << 20));
        assert_eq!(Beside::clear_sizes(1 << 20, 2), (16 << 20, 4 << 20));
        assert_eq!(Beside::clear_sizes(usize::MAX, 2), (1 << 30, 512 << 20));
        assert_eq!(Beside::clear_sizes(256 << 20, 256), (256 << 20, 4 << 20));
        assert_eq!(Beside::clear_sizes(256 << 20, 0), (256 << 20, 256 << 20));
    }

    #[test]
    fn the_self_check_replays_the_measured_host_as_measured() {
        let host = injected_host();
        let trace = clearing_trace(&host);
        let rows =
            project_measured(&host, &trace, &measured_rows([500_000.0, 1_000_000.0]), 1).unwrap();
        // One task: 1000 ns compute + 1000 ns clearing = 500,000 faults/s. Two: 4.096 GB/s
        // each, the node's 8.192 shared without loss: 1,000,000.
        assert_rows_agree(&rows);
    }

    /// The self-check's host gives each task part of its CPU (`cpu.share`): its rows are
    /// replayed at that part of the pace.
    #[test]
    fn the_self_check_replays_each_task_for_its_measured_share_of_a_cpu() {
        let mut host = injected_host();
        // The host ran each task half the time alone, a quarter of it with two.
        host.cpu.share = vec![[1.0, 0.5, 0.0], [2.0, 0.25, 0.0]];
        let trace = clearing_trace(&host);
        let rows =
            project_measured(&host, &trace, &measured_rows([250_000.0, 250_000.0]), 1).unwrap();
        // One task: 1000 ns compute + 1000 ns clearing at half the time: 250,000 faults/s.
        // Two at a quarter each: 2 x 125,000.
        assert_rows_agree(&rows);
    }

    /// Two tasks the host runs half the time each, in turns it deals out independently, meet
    /// only while both run: a quarter of the wall time, half of each one's running time.
    /// Here they meet on the bus of a node that clears no faster than one core.
    #[test]
    fn time_sliced_tasks_share_the_bus_only_while_both_run() {
        let mut host = injected_host();
        host.memory.node_bandwidth_gbs = host.memory.core_bandwidth_gbs;
        host.cpu.share = vec![[1.0, 0.5, 0.0], [2.0, 0.5, 0.0]];
        // Each op only clears a page: 1000 ns alone, 2000 ns each with two on the bus.
        let trace = compute_and_clear_trace(&host, 0.0);
        // One task: 1,000,000 faults/s while it runs, half the time. Two: each runs half
        // the time, alone for half of that (1,000,000/s) and beside the other for the rest
        // (500,000/s): 2 x 0.5 x 750,000. Slowing both throughout instead (both always on
        // the bus, each at half the pace) gives 2 x 250,000.
        let rows =
            project_measured(&host, &trace, &measured_rows([500_000.0, 750_000.0]), 1).unwrap();
        assert_rows_agree(&rows);
    }

    /// A row is replayed with the line transfer measured beside the engine's run, not the one
    /// calibrated before: every op of this trace writes one node-wide counter, so two tasks
    /// pass its line at every op, each paying one transfer (the other wrote it last).
    #[test]
    fn a_row_is_replayed_with_the_transfer_measured_beside_it() {
        use crate::trace::{Event, Instance};
        let mut host = injected_host();
        host.latency.core_ns = 150.0;
        let mut trace = clearing_trace(&host);
        trace.instances = vec![Instance {
            class: "counter".into(),
            scope: pagelab_sync::trace::Scope::Node,
            model: pagelab_sync::trace::LockModel::Queued,
            sleeps: false,
            rwsem: None,
        }];
        trace.events = (0..500)
            .flat_map(|_| {
                [
                    Event::Compute { ns: 1000.0 },
                    Event::Atomic { inst: 0 },
                    Event::Ops { n: 1 },
                ]
            })
            .collect();
        let beside = Beside {
            share: 1.0,
            wait_ns: 0.0,
            core_ns: Some(31.4),
            core_gbs: None,
            node_gbs: None,
        };
        let row_host = beside.host(&host, 2);
        // Two tasks: 1000 ns, a transfer of 31.4 ns and the atomic each op.
        let per_op = 1000.0 + 31.4 + host.latency.atomic_ns;
        let two = 2.0 * 1e9 / per_op;
        let rows =
            project_measured(&row_host, &trace, &measured_rows([1e9 / 1000.0, two]), 1).unwrap();
        assert_eq!(rows[1].core_ns, 31.4);
        assert!(
            rows[1].error_pct.abs() < 1.0,
            "projected {} against {two}",
            rows[1].projected
        );
    }

    /// The mixture's weights: the others running beside a task are binomial.
    #[test]
    fn binomial_weights_of_the_others_running_sum_to_one() {
        assert_eq!(binomial(3, 0), 1.0);
        assert_eq!(binomial(3, 1), 3.0);
        assert_eq!(binomial(4, 2), 6.0);
        let s: f64 = 0.3;
        let total: f64 = (0..=5)
            .map(|k| binomial(5, k) * s.powi(k as i32) * (1.0 - s).powi(5 - k as i32))
            .sum();
        assert!((total - 1.0).abs() < 1e-12, "{total}");
    }

    fn change(published_pct: f64, projected_pct: f64, beyond_noise: bool) -> Change {
        Change {
            profile: "b".into(),
            mode: "threads".into(),
            tasks: 4,
            metric: "faults/sec".into(),
            published_pct,
            projected_pct,
            projected_low: projected_pct,
            projected_high: projected_pct,
            beyond_noise,
        }
    }

    /// A change's sensitivity: the variants that give it the published sign, and the table's
    /// counts of wrong signs an estimate could turn and right ones that hold everywhere.
    #[test]
    fn sensitivity_names_the_variants_with_the_published_sign_and_counts_them() {
        let at = |tasks: usize, published: f64, projected: f64| Change {
            tasks,
            ..change(published, projected, true)
        };
        // Wrong at 4 tasks, but the published sign under one variant; wrong at 8 under all;
        // right at 16 under all; right at 32 but lost under one variant.
        let changes = vec![
            at(4, 5.0, -1.0),
            at(8, 10.0, -3.0),
            at(16, -6.0, -4.0),
            at(32, 7.0, 2.0),
        ];
        let s = TableSensitivity {
            factors: vec![0.75, 1.25],
            trap_refit: true,
            interrupted: false,
            skipped: vec![("cpu.ghz".into(), 1.25, "out of range".into())],
            changes: changes
                .iter()
                .zip([[-2.0, 0.5], [-4.0, -2.0], [-5.0, -3.0], [1.0, -0.5]])
                .map(|(c, [a, b])| ChangeSensitivity {
                    profile: c.profile.clone(),
                    mode: c.mode.clone(),
                    tasks: c.tasks,
                    metric: c.metric.clone(),
                    variants: vec![
                        ("latency.core_ns".into(), 0.75, a),
                        ("latency.core_ns".into(), 1.25, b),
                    ],
                })
                .collect(),
        };
        assert_eq!(
            s.published_sign_under(&changes[0]),
            vec![("latency.core_ns".to_string(), 1.25)]
        );
        assert!(s.published_sign_under(&changes[1]).is_empty());
        assert_eq!(s.published_sign_under(&changes[2]).len(), 2);
        let text = s.render("t", &changes);
        assert!(
            text.contains("t: sensitivity: wrong signs beyond the published noise: 2, of which 1 take the published sign under some single variant; right signs: 2, of which 1 keep it under every variant"),
            "{text}"
        );
        assert!(
            text.contains("cpu.ghz x1.25 not replayed: out of range"),
            "{text}"
        );
        assert!(text.contains("every variant"), "{text}");
        assert!(text.contains("none"), "{text}");
    }

    /// Two rounds whose levels differ by a fifth, each with the column 2% above the baseline:
    /// paired by round the range is the 2% of both rounds; every pairing would add the drift.
    #[test]
    fn paced_captures_range_over_their_rounds_not_over_every_pairing() {
        let (base, new) = ([100.0, 120.0], [102.0, 122.4]);
        let (lo, hi) = paired_change_range(&base, &new);
        assert!(
            (lo - 2.0).abs() < 1e-9 && (hi - 2.0).abs() < 1e-9,
            "{lo} {hi}"
        );
        let (lo, hi) = change_range(&base, &new);
        assert!(lo < -14.0 && hi > 22.0, "{lo} {hi}");
        // Unequal counts fall back on every pairing; a NaN capture makes the range NaN.
        assert_eq!(
            paired_change_range(&[100.0], &new),
            change_range(&[100.0], &new)
        );
        assert!(paired_change_range(&[100.0, f64::NAN], &new).0.is_nan());
    }

    #[test]
    fn changes_report_sign_and_points() {
        let c = change(-9.51, -4.0, true);
        assert!(c.sign_right());
        assert!((c.error_points() - 5.51).abs() < 1e-9);
        let changes = vec![
            c.clone(),
            change(-9.51, 3.0, true),
            change(-9.51, -10.0, true),
        ];
        let s = Summaries::of(&[], &changes);
        let b = &s.beyond_noise;
        assert_eq!((b.right_sign, b.within_10_points, b.changes), (2, 2, 3));
        // Resolved: the whole range on the published side of zero.
        assert_eq!(b.resolved_right_sign, 2);
        let straddles = Change {
            projected_high: 1.0,
            ..change(-9.51, -4.0, true)
        };
        assert!(straddles.sign_right() && !straddles.resolved_right());
        assert!((b.median_error_points.unwrap() - 5.51).abs() < 1e-9);
        assert_eq!(s.within_noise.changes, 0);
    }

    fn pub_row(profile: &str, tasks: usize, value: f64, stddev: Option<f64>) -> PubRow {
        PubRow {
            profile: profile.into(),
            mode: Mode::Processes,
            tasks,
            metric: "faults/sec".into(),
            value,
            stddev,
        }
    }

    /// Beyond the noise: 5 points or more, or mean +/- stddev apart; within otherwise.
    #[test]
    fn changes_are_classed_by_the_published_noise() {
        let base = pub_row("a", 4, 1000.0, Some(5.0));
        // +2%, stddevs 5 and 5: 20 apart, ranges do not overlap: beyond.
        assert!(beyond_noise(&base, &pub_row("b", 4, 1020.0, Some(5.0))));
        // +2%, stddevs 15 and 15: ranges overlap: within.
        let wide = pub_row("a", 4, 1000.0, Some(15.0));
        assert!(!beyond_noise(&wide, &pub_row("b", 4, 1020.0, Some(15.0))));
        // -5%: beyond whatever the stddevs.
        assert!(beyond_noise(&wide, &pub_row("b", 4, 950.0, Some(100.0))));
        // No stddevs (an mmtests table): only the 5 points count.
        let bare = pub_row("a", 4, 1000.0, None);
        assert!(!beyond_noise(&bare, &pub_row("b", 4, 1040.0, None)));
        assert!(beyond_noise(&bare, &pub_row("b", 4, 1060.0, None)));
    }

    fn proj_row(tasks: usize, captures: &[&[f64]]) -> ProjRow {
        ProjRow {
            mode: Mode::Processes,
            tasks,
            captures: captures
                .iter()
                .map(|v| crate::project::Row {
                    mode: Mode::Processes,
                    tasks,
                    metrics: vec![("faults/sec".into(), true, v.to_vec())],
                    classes: Vec::new(),
                    ops: 0,
                    span_ns: 0.0,
                    events: 0,
                    seconds: 0.0,
                })
                .collect(),
        }
    }

    const TABLE: Published = Published {
        name: "hand-built",
        experiment: "e",
        machine: "m",
        mean: MeanKind::Arithmetic,
        csv: "profile,mode,tasks,metric,value,stddev
a,processes,1,faults/sec,1000,1
b,processes,1,faults/sec,1010,1
a,processes,4,faults/sec,4000,10
b,processes,4,faults/sec,4400,10
a,processes,8,faults/sec,8000,100
b,processes,8,faults/sec,8080,100
",
        claims: &[],
        held_out: false,
    };

    /// A held-out table is checked, never fitted: no baseline one-task row to fit, a machine
    /// without `[calibration]` whose `trap_ns` is used as it stands, and said to be.
    #[test]
    fn held_out_tables_are_never_fitted_to() {
        let held: Vec<&Published> = BUILTIN.iter().filter(|t| t.held_out).collect();
        assert!(!held.is_empty());
        for t in held {
            assert!(crate::calibrate::fitted_rows(t).is_err(), "{}", t.name);
            let m = Machine::load(t.machine).unwrap();
            assert!(m.calibration.is_none(), "{} is calibrated", m.name);
            let trap = TrapSource {
                file_ns: m.kernel.trap_ns,
                refit: None,
                refit_failed: None,
                held_out: true,
            };
            assert_eq!(trap.used_ns(), m.kernel.trap_ns);
            assert!(
                trap.describe(2)
                    .ends_with("(a held-out table: nothing is fitted to it)"),
                "{}",
                trap.describe(2)
            );
        }
    }

    /// A NaN row is a failure, named, counted in its class and never sorted away; the rows
    /// `trap_ns` is fitted to (the baseline's one-task row) are named and left out of the row
    /// errors.
    #[test]
    fn failures_are_named_and_fitted_rows_excluded() {
        let rows = TABLE.rows().unwrap();
        assert_eq!(rows[0].stddev, Some(1.0));
        let projected = |profile: &str, _mode: Mode, tasks: usize| -> Option<ProjRow> {
            Some(match (profile, tasks) {
                // The fitted row is far off: it must not weigh in the row errors.
                ("a", 1) => proj_row(1, &[&[2000.0]]),
                ("b", 1) => proj_row(1, &[&[1010.0]]),
                ("a", 4) => proj_row(4, &[&[4000.0], &[4000.0]]),
                // b at 4 tasks: a window of 0 and a NaN make the row no number.
                ("b", 4) => proj_row(4, &[&[f64::NAN], &[4400.0]]),
                ("a", 8) => proj_row(8, &[&[8000.0]]),
                _ => proj_row(8, &[&[8080.0]]),
            })
        };
        let (compared, changes) = compare_table(&TABLE, &rows, "a", &projected, false).unwrap();
        let s = Summaries::of(&compared, &changes);
        assert_eq!(s.fitted_rows, ["a processes 1 faults/sec"]);
        assert_eq!(s.failed_rows, ["b processes 4 faults/sec"]);
        // Rows scored: b 1 (0%), a 4 (0%), b 4 (failed: infinite), a 8 (0%), b 8 (0%): the
        // fitted row's +100% is not among them.
        assert_eq!(s.median_row_error_pct, Some(0.0));
        // b against a: +1% at 1 task (stddevs 1 and 1: beyond), +10% at 4 (beyond, failed),
        // +1% at 8 (stddevs 100: within).
        let b = &s.beyond_noise;
        assert_eq!(b.changes, 2);
        assert_eq!(b.failures, ["b processes 4 faults/sec"]);
        assert_eq!(b.right_sign, 0, "1 task: +1% published, -49.5% projected");
        assert_eq!(b.median_error_points, Some(f64::INFINITY));
        let w = &s.within_noise;
        assert_eq!((w.changes, w.right_sign, w.within_10_points), (1, 1, 1));
        let text = s.render("hand-built");
        assert!(
            text.contains("FAILED (no finite projection): b processes 4 faults/sec"),
            "{text}"
        );
        assert!(
            text.contains(
                "rows trap_ns is fitted to, left out of these summaries: a processes 1 faults/sec"
            ),
            "{text}"
        );
    }

    /// The 2018 table publishes arithmetic means of runs: the projection is compared on the
    /// arithmetic mean of its samples, not the harmonic one; the pft table on the harmonic.
    #[test]
    fn the_2018_table_is_compared_on_arithmetic_means() {
        let t = published("page_fault1-2018").unwrap();
        assert_eq!(t.mean, MeanKind::Arithmetic);
        assert_eq!(
            published("pft-single-vma-2023").unwrap().mean,
            MeanKind::Harmonic
        );
        let rows = t.rows().unwrap();
        assert!(rows.iter().all(|r| r.stddev.is_some()));
        // Samples 1e6 and 3e6 in two captures: amean 2e6, hmean 1.5e6.
        let projected = |_: &str, mode: Mode, tasks: usize| -> Option<ProjRow> {
            let mut r = proj_row(tasks, &[&[1e6], &[3e6]]);
            r.mode = mode;
            Some(r)
        };
        let (compared, changes) = compare_table(t, &rows, "linux-4.15", &projected, false).unwrap();
        assert!(compared.iter().all(|c| c.projected == 2e6), "{compared:?}");
        assert!(
            compared
                .iter()
                .all(|c| c.projected_low == 1e6 && c.projected_high == 3e6)
        );
        // Each profile's captures range 1e6..3e6: the change ranges from -66.7% to +200%.
        let c = &changes[0];
        assert_eq!(c.projected_pct, 0.0);
        assert!((c.projected_low + 100.0 * 2.0 / 3.0).abs() < 1e-9 && c.projected_high == 200.0);
        // 4 profiles x 2 modes: the baseline's two one-task rows are fitted.
        assert_eq!(compared.iter().filter(|c| c.fitted).count(), 2);
    }

    /// The report says, per capture, what its preemption guard saw: a swing between two
    /// validations can then be traced to captures the host disturbed.
    #[test]
    fn the_report_names_each_captures_guard() {
        let r = TableReport {
            table: "t".into(),
            experiment: "e".into(),
            machine: "m".into(),
            mean: MeanKind::Harmonic,
            captures: 1,
            trap: TrapSource {
                file_ns: 789.0,
                refit: None,
                refit_failed: None,
                held_out: false,
            },
            rows: Vec::new(),
            changes: Vec::new(),
            summary: Summaries::of(&[], &[]),
            claims: vec![crate::claims::ClaimVerdict {
                says: "x nearly tripled".into(),
                source: "a post".into(),
                projected: "x wait ... x2.10".into(),
                per_capture: vec![
                    crate::claims::CaptureVerdict {
                        agrees: Some(true),
                        figure: Some("x3.00".into()),
                    },
                    crate::claims::CaptureVerdict {
                        agrees: Some(false),
                        figure: Some("x1.65".into()),
                    },
                ],
                verdict: crate::claims::Verdict::Mixed,
            }],
            events: 0,
            replay_seconds: 0.0,
            sensitivity: None,
            guards: vec![
                (
                    "pvl-v2".into(),
                    Some(crate::trace::CaptureGuard {
                        windows: 7,
                        retaken: 2,
                        kept_preempted: 1,
                        ..Default::default()
                    }),
                    Some(crate::trace::PacedCompute {
                        measured_ns: 700.0,
                        compute_ns: 650.31,
                        relative: 1.0204,
                        turns: 10,
                        level_scale: 0.8125,
                    }),
                ),
                ("old".into(), None, None),
            ],
        };
        let s = r.render();
        assert!(
            s.contains("capture of pvl-v2: 7 recorded windows, 2 retaken (preempted or stalled), 1 kept preempted"),
            "{s}"
        );
        assert!(s.contains("capture of old: no preemption guard"), "{s}");
        // A claim the captures split on is MIXED, with each capture's figure.
        assert!(s.contains("0 of 1 agree on every capture, 1 mixed"), "{s}");
        assert!(s.contains("  MIXED: \"x nearly tripled\" (a post)"), "{s}");
        assert!(
            s.contains("    per capture: agrees (x3.00), DISAGREES (x1.65)"),
            "{s}"
        );
        assert!(
            s.contains("    paced: compute 650.3 ns per op from 10 turns side by side (1.020 of the paced profiles' geometric mean; this capture's untraced window measured 700.0; the round's level x 0.812, to the quickest round's)"),
            "{s}"
        );
        assert!(
            s.contains("kernel.trap_ns 789 ns, the machine file's (--trap-from-file)"),
            "{s}"
        );
        let p = published("page_fault1-2018").unwrap();
        let refit = TrapSource {
            file_ns: 789.0,
            refit: Some(crate::calibrate::trap_fit(p, 600.04).unwrap()),
            refit_failed: None,
            held_out: false,
        };
        assert_eq!(refit.used_ns(), 817.0);
        assert_eq!(
            refit.describe(2),
            "kernel.trap_ns refitted on this host: linux-4.15 processes 1 task faults/sec published 1417.37 ns, replayed without a trap 600.0 ns (the quickest of 2 captures), trap 817 ns (the machine file holds 789, fitted where it was calibrated)"
        );
        // A replay already slower than the published row leaves no trap to fit: the file's
        // value is used, and said to be.
        let why = crate::calibrate::trap_fit(p, 2000.0).unwrap_err();
        let failed = TrapSource {
            file_ns: 789.0,
            refit: None,
            refit_failed: Some(match why {
                ProjectError::Calibrate(w) => w,
                e => panic!("{e}"),
            }),
            held_out: false,
        };
        assert_eq!(failed.used_ns(), 789.0);
        assert!(
            failed.describe(2).starts_with(
                "kernel.trap_ns 789 ns, the machine file's: it could not be fitted again here (calibrate page_fault1-2018: the replay without a trap takes 2000 ns per operation, not less than the published 1417.37"
            ),
            "{}",
            failed.describe(2)
        );
    }
}
