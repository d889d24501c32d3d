//! Comparison tables the way mmtests' `compare-kernels.sh` prints them, so a pagelab result can be
//! pasted into a mailing-list thread and read like every other one:
//!
//! ```text
//!                           mm-unstable-20230210                  pvl-v2
//! Hmean     faults/sec-4   2965588.9697 (   0.00%)   2683651.5664 *  -9.51%*
//! ```
//!
//! The first label is the baseline; every other column shows its value and its percent change
//! against the baseline, positive meaning better (see [`crate::stats::pct_change`]). The change
//! on the mean row is between asterisks when the selected significance rule says the difference
//! is significant, in parentheses otherwise; the spread and extreme rows always use parentheses.
//! One section per (workload, mode); within a section the rows go statistic by statistic, each
//! over every metric and task count, as mmtests orders them.
//!
//! A comparison never holds the samples: it is built from one [`Summary`] per run and sample set
//! ([`Store::sample_stats`], read as a stream) and, for the best-P rows, from the best samples of
//! each pooled set, which [`BestSamples`] reads in order and summarises prefix by prefix. So
//! `compare` on a store with millions of samples needs memory for its rows, not its samples.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::Serialize;

use crate::csv_text::neutralise;
use crate::results::{Origin, SampleKey, SampleRow};
use crate::stats::{self, Significance, Summary};
use crate::store::{Store, StoreError};

/// One statistic row of a comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Stat {
    Min,
    Hmean,
    Amean,
    Stddev,
    CoeffVar,
    HStddev,
    HCoeffVar,
    Max,
    /// Hmean (or Amean) of the best P percent of samples.
    Best(u32),
}

impl Stat {
    pub fn name(self, higher_is_better: bool) -> String {
        match self {
            Stat::Min => "Min".into(),
            Stat::Hmean => "Hmean".into(),
            Stat::Amean => "Amean".into(),
            Stat::Stddev => "Stddev".into(),
            Stat::CoeffVar => "CoeffVar".into(),
            Stat::HStddev => "HStddev".into(),
            Stat::HCoeffVar => "HCoeffVar".into(),
            Stat::Max => "Max".into(),
            Stat::Best(p) if higher_is_better => format!("BHmean-{p}"),
            Stat::Best(p) => format!("BAmean-{p}"),
        }
    }

    /// The statistics printed for a metric, in mmtests' order.
    fn for_metric(higher_is_better: bool) -> Vec<Stat> {
        if higher_is_better {
            vec![
                Stat::Min,
                Stat::Hmean,
                Stat::Stddev,
                Stat::CoeffVar,
                Stat::HStddev,
                Stat::HCoeffVar,
                Stat::Max,
                Stat::Best(50),
                Stat::Best(95),
                Stat::Best(99),
            ]
        } else {
            vec![
                Stat::Min,
                Stat::Amean,
                Stat::Stddev,
                Stat::CoeffVar,
                Stat::Max,
                Stat::Best(50),
                Stat::Best(95),
                Stat::Best(99),
            ]
        }
    }

    /// The statistic of a pooled set, from its summary and the summaries of its best
    /// [`BEST`] shares.
    fn compute(self, x: &Summary, best: &[Summary], higher_is_better: bool) -> f64 {
        match self {
            Stat::Min => x.min(),
            Stat::Max => x.max(),
            Stat::Hmean => x.hmean(),
            Stat::Amean => x.amean(),
            Stat::Stddev => x.stddev(),
            Stat::CoeffVar => x.coeff_var(),
            Stat::HStddev => x.hstddev(),
            Stat::HCoeffVar => x.hcoeff_var(),
            Stat::Best(p) => match BEST.iter().position(|&b| b == p) {
                Some(i) if higher_is_better => best[i].hmean(),
                Some(i) => best[i].amean(),
                None => f64::NAN,
            },
        }
    }

    /// Spread rows improve downwards whatever the metric.
    fn higher_is_better(self, metric_higher: bool) -> bool {
        match self {
            Stat::Stddev | Stat::CoeffVar | Stat::HStddev | Stat::HCoeffVar => false,
            _ => metric_higher,
        }
    }

    fn is_mean(self) -> bool {
        matches!(self, Stat::Hmean | Stat::Amean)
    }
}

/// One cell: a column's value and its change against the baseline.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Cell {
    /// `None` when the column has no samples for this row.
    pub value: Option<f64>,
    pub pct_change: Option<f64>,
    /// Only mean rows of measured columns carry a verdict; `None` elsewhere.
    pub significant: Option<bool>,
    /// Mean rows where this column or the baseline is projected: the range of the change over
    /// every pairing of a baseline repeat's mean with one of this column's (a projected run's
    /// repeats are its captures; see [`projected_interval`]). No significance test is applied
    /// to them: the spread of a projection is the model's, not a sample of the machine's.
    pub interval: Option<(f64, f64)>,
    pub samples: usize,
}

/// One printed row.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    pub stat: String,
    pub metric: String,
    pub tasks: u32,
    pub cells: Vec<Cell>,
}

/// The rows of one (workload, mode).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Section {
    pub workload: String,
    pub mode: String,
    pub rows: Vec<Row>,
}

/// A column: a label and where its numbers come from.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Column {
    pub label: String,
    pub origins: Vec<Origin>,
    pub runs: Vec<i64>,
}

/// A whole comparison.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    pub columns: Vec<Column>,
    pub rule: String,
    pub sections: Vec<Section>,
}

/// Orders metric names as a reader expects: runs of digits compare as numbers, the rest as
/// text, so netpipe's `send-128` comes before `send-1024` (plain text order puts `send-1024`
/// first, as `0` sorts before `2`). Names that differ only in leading zeros fall back to text
/// order, so the order is total and consistent with equality. Compare tables, charts and
/// reports order their metrics with it.
pub fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    fn run(s: &str) -> (&str, &str) {
        let digits = s.as_bytes()[0].is_ascii_digit();
        let end = s
            .bytes()
            .position(|c| c.is_ascii_digit() != digits)
            .unwrap_or(s.len());
        s.split_at(end)
    }
    let (mut x, mut y) = (a, b);
    while !x.is_empty() && !y.is_empty() {
        let ((rx, tx), (ry, ty)) = (run(x), run(y));
        let both_numbers = rx.as_bytes()[0].is_ascii_digit() && ry.as_bytes()[0].is_ascii_digit();
        let o = if both_numbers {
            let (nx, ny) = (rx.trim_start_matches('0'), ry.trim_start_matches('0'));
            nx.len().cmp(&ny.len()).then_with(|| nx.cmp(ny))
        } else {
            rx.cmp(ry)
        };
        if o != Ordering::Equal {
            return o;
        }
        (x, y) = (tx, ty);
    }
    x.len().cmp(&y.len()).then_with(|| a.cmp(b))
}

fn rule_name(r: Significance) -> &'static str {
    match r {
        Significance::TTest => "t-test (2018-2024 rule, p < 0.10)",
        Significance::Interval => "interval (mean +/- 1.959964 sd do not overlap)",
    }
}

/// The shares of the best-P rows ([`Stat::Best`]), ascending.
pub const BEST: [u32; 3] = [50, 95, 99];

/// One sample set of one run, summarised: what [`Store::sample_stats`] reads from the store and
/// [`summarise`] computes from samples in memory.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SetSummary {
    pub run_id: i64,
    pub label: String,
    pub workload: String,
    pub origin: Origin,
    pub key: SampleKey,
    pub summary: Summary,
    /// The same samples summarised per repeat, in the order the repeats first appear: a
    /// projected run's repeats are its captures, whose means make its uncertainty interval.
    #[serde(skip)]
    pub repeats: Vec<(u32, Summary)>,
}

impl SetSummary {
    /// Adds one sample of `repeat`.
    pub fn push(&mut self, repeat: u32, value: f64) {
        self.summary.push(value);
        match self.repeats.iter_mut().rev().find(|(r, _)| *r == repeat) {
            Some((_, s)) => s.push(value),
            None => self.repeats.push((repeat, Summary::of(&[value]))),
        }
    }
}

/// Where the best samples of a set pooled over several runs come from, for the best-P rows:
/// for each length in `lens`, the summary of that many best samples (highest first for
/// higher-is-better metrics, else lowest first) of the sample set `key` of `label`'s `runs`.
/// The store sorts in SQLite ([`Store::best_samples`]; a stored run has one label and workload,
/// so the runs say it all); samples in memory are sorted in memory.
pub trait BestSamples: std::fmt::Debug {
    fn best(&self, set: &PoolId<'_>, lens: &[u64]) -> Result<Vec<Summary>, StoreError>;
}

/// Why there is no comparison.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    #[error("nothing to compare: name at least one label")]
    NoLabel,
    #[error("label `{0}` is named twice")]
    Twice(String),
    #[error(
        "label `{0}` has no samples in the selected runs; `pagelab runs` lists the runs (interrupted ones count only with --include-incomplete)"
    )]
    NoSamples(String),
    /// No `by` (a workload, or a workload and mode) has samples under two of the labels.
    #[error("nothing to compare: no {by} has samples under two of the labels")]
    NothingShared { by: &'static str },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The labels a comparison names must be some, each once, and each with samples in `sets`:
/// compare's tables and the robot's rows refuse the same selections alike.
pub(crate) fn check_labels(sets: &[SetSummary], labels: &[String]) -> Result<(), CompareError> {
    if labels.is_empty() {
        return Err(CompareError::NoLabel);
    }
    for (i, l) in labels.iter().enumerate() {
        if labels[..i].contains(l) {
            return Err(CompareError::Twice(l.clone()));
        }
    }
    match labels
        .iter()
        .find(|l| !sets.iter().any(|s| &s.label == *l && s.summary.n() > 0))
    {
        Some(l) => Err(CompareError::NoSamples(l.clone())),
        None => Ok(()),
    }
}

/// A sample set pooled over runs of one label and workload.
#[derive(Clone, Copy, Debug)]
pub struct PoolId<'a> {
    pub label: &'a str,
    pub workload: &'a str,
    pub runs: &'a [i64],
    pub key: &'a SampleKey,
}

impl BestSamples for Store {
    fn best(&self, set: &PoolId<'_>, lens: &[u64]) -> Result<Vec<Summary>, StoreError> {
        self.best_samples(set.runs, set.key, lens)
    }
}

impl<T: AsRef<[SampleRow]> + std::fmt::Debug> BestSamples for T {
    fn best(&self, set: &PoolId<'_>, lens: &[u64]) -> Result<Vec<Summary>, StoreError> {
        let key = set.key;
        let mut v: Vec<f64> = self
            .as_ref()
            .iter()
            .filter(|s| {
                set.runs.contains(&s.run_id)
                    && s.key == *key
                    && s.label == set.label
                    && s.workload == set.workload
            })
            .map(|s| s.value)
            .collect();
        v.sort_by(f64::total_cmp);
        if key.higher_is_better {
            v.reverse();
        }
        Ok(lens
            .iter()
            .map(|&len| Summary::of(&v[..(len as usize).min(v.len())]))
            .collect())
    }
}

/// The [`SetSummary`] of each (run, sample key) of samples in memory, in the order of their
/// first sample (which for samples in store order is the store's order).
pub fn summarise(samples: &[SampleRow]) -> Vec<SetSummary> {
    let mut out: Vec<SetSummary> = Vec::new();
    type Id<'a> = (i64, &'a str, &'a str, &'a SampleKey);
    let mut index: std::collections::HashMap<Id, usize> = Default::default();
    for s in samples {
        let id = (s.run_id, s.label.as_str(), s.workload.as_str(), &s.key);
        let i = *index.entry(id).or_insert_with(|| {
            out.push(SetSummary {
                run_id: s.run_id,
                label: s.label.clone(),
                workload: s.workload.clone(),
                origin: s.origin,
                key: s.key.clone(),
                summary: Summary::new(),
                repeats: Vec::new(),
            });
            out.len() - 1
        });
        out[i].push(s.repeat, s.value);
    }
    out
}

/// Build the comparison of `labels` (the first is the baseline) from samples in memory, which
/// may hold other labels too (they are ignored). For a selection just measured; a selection
/// from the store is compared with [`from_store`], which never holds its samples.
pub fn build(
    samples: &[SampleRow],
    labels: &[String],
    rule: Significance,
) -> Result<Comparison, CompareError> {
    build_from(&summarise(samples), labels, rule, &samples)
}

/// Build the comparison of `labels` over the given runs of the store, reading summaries and
/// best samples as streams (see the module documentation).
pub fn from_store(
    store: &Store,
    run_ids: &[i64],
    labels: &[String],
    rule: Significance,
) -> Result<Comparison, CompareError> {
    let sets = store.sample_stats(run_ids)?;
    build_from(&sets, labels, rule, store)
}

/// A column's pooled sample set: the runs it pools, their summary, and the summary of each
/// (run, repeat).
#[derive(Clone, Default)]
struct Pool {
    runs: Vec<i64>,
    summary: Summary,
    repeats: Vec<Summary>,
}

/// The uncertainty interval of a change involving a projected column: the range of the change
/// over every pairing of one of the baseline's repeat means with one of the column's (Hmean for
/// rates, Amean otherwise, as the mean row), or `None` when a side has no finite mean.
///
/// Why the range and not a 90% interval: a projection has a handful of captures (3 by
/// default), too few for the ends of a 90% interval to be estimated; the range is everything
/// the captures gave, and pairing every baseline capture with every column capture makes no
/// assumption that the captures taken in one round shared a load. It is not a confidence
/// interval: with C captures a side, another capture lands outside one side's range with
/// probability 2/(C+1), so the range is a floor on the capture noise, not a bound.
pub fn projected_interval(
    base: &[Summary],
    new: &[Summary],
    higher_is_better: bool,
) -> Option<(f64, f64)> {
    let means =
        |v: &[Summary]| -> Vec<f64> { v.iter().map(|s| s.mean_of(higher_is_better)).collect() };
    stats::change_range(&means(base), &means(new), higher_is_better)
}

/// Build the comparison of `labels` (the first is the baseline) from the summaries of the
/// selected runs' sample sets (sets of other labels are ignored), pooling each label's runs;
/// `best` gives the best-P shares. Errors when a label has no samples or nothing is left to
/// compare.
pub fn build_from(
    sets: &[SetSummary],
    labels: &[String],
    rule: Significance,
    best: &dyn BestSamples,
) -> Result<Comparison, CompareError> {
    check_labels(sets, labels)?;
    let mut columns = Vec::new();
    for l in labels {
        let mine: Vec<&SetSummary> = sets
            .iter()
            .filter(|s| &s.label == l && s.summary.n() > 0)
            .collect();
        let origins: BTreeSet<&str> = mine.iter().map(|s| s.origin.as_str()).collect();
        let runs: BTreeSet<i64> = mine.iter().map(|s| s.run_id).collect();
        columns.push(Column {
            label: l.clone(),
            origins: origins
                .into_iter()
                .map(|o| o.parse().expect("own name"))
                .collect(),
            runs: runs.into_iter().collect(),
        });
    }
    let projected_col: Vec<bool> = columns
        .iter()
        .map(|c| c.origins.contains(&Origin::Projected))
        .collect();
    // (workload, mode) -> key -> label index -> pooled set
    type Groups<'a> = BTreeMap<(&'a str, &'a str), BTreeMap<&'a SampleKey, Vec<Pool>>>;
    let mut groups: Groups = BTreeMap::new();
    let mut metric_order: Vec<&str> = Vec::new();
    for s in sets {
        let Some(col) = labels.iter().position(|l| l == &s.label) else {
            continue;
        };
        if s.summary.n() == 0 {
            continue;
        }
        if !metric_order.contains(&s.key.metric.as_str()) {
            metric_order.push(&s.key.metric);
        }
        // (Sorted below: the store returns metrics in text order, where send-1024 < send-128.)
        let pool = &mut groups
            .entry((&s.workload, &s.key.mode))
            .or_default()
            .entry(&s.key)
            .or_insert_with(|| vec![Pool::default(); labels.len()])[col];
        pool.runs.push(s.run_id);
        pool.summary.merge(&s.summary);
        pool.repeats.extend(s.repeats.iter().map(|(_, r)| *r));
    }
    metric_order.sort_by(|a, b| natural_cmp(a, b));
    let mut sections = Vec::new();
    for ((workload, mode), keys) in groups {
        // A section compares something only if two columns have data in it (or one label was
        // asked for: then it is that label's summary).
        let filled = (0..labels.len())
            .filter(|&c| keys.values().any(|cols| cols[c].summary.n() > 0))
            .count();
        if labels.len() > 1 && filled < 2 {
            continue;
        }
        let mut keys: Vec<(&SampleKey, Vec<Pool>)> = keys.into_iter().collect();
        keys.sort_by_key(|(k, _)| {
            (
                metric_order.iter().position(|m| *m == k.metric),
                k.tasks,
                k.higher_is_better,
            )
        });
        // The best shares of every filled cell, read once for all the best-P rows.
        let mut bests: Vec<Vec<Vec<Summary>>> = Vec::with_capacity(keys.len());
        for (k, cols) in &keys {
            let mut per_col = Vec::with_capacity(cols.len());
            for (pool, label) in cols.iter().zip(labels) {
                per_col.push(if pool.summary.n() == 0 {
                    Vec::new()
                } else {
                    let lens: Vec<u64> = BEST
                        .iter()
                        .map(|&p| stats::best_len(pool.summary.n(), p))
                        .collect();
                    let id = PoolId {
                        label,
                        workload,
                        runs: &pool.runs,
                        key: k,
                    };
                    best.best(&id, &lens)?
                });
            }
            bests.push(per_col);
        }
        let higher_all: BTreeSet<bool> = keys.iter().map(|(k, _)| k.higher_is_better).collect();
        let mut rows = Vec::new();
        for higher in higher_all.into_iter().rev() {
            for stat in Stat::for_metric(higher) {
                for ((k, cols), bests) in keys
                    .iter()
                    .zip(&bests)
                    .filter(|((k, _), _)| k.higher_is_better == higher)
                {
                    let base = &cols[0].summary;
                    let hib = stat.higher_is_better(higher);
                    let base_v = (base.n() > 0).then(|| stat.compute(base, &bests[0], higher));
                    let cells = cols
                        .iter()
                        .zip(bests)
                        .enumerate()
                        .map(|(c, (pool, best))| {
                            let x = &pool.summary;
                            if x.n() == 0 {
                                return Cell {
                                    value: None,
                                    pct_change: None,
                                    significant: None,
                                    interval: None,
                                    samples: 0,
                                };
                            }
                            let projected = projected_col[c] || projected_col[0];
                            let v = stat.compute(x, best, higher);
                            let pct = base_v.map(|b| {
                                if b == v {
                                    0.0
                                } else {
                                    stats::pct_change(b, v, hib)
                                }
                            });
                            let sig = (stat.is_mean() && base.n() > 0 && !projected)
                                .then(|| stats::significant_summary(base, x, higher, rule));
                            let interval = (stat.is_mean() && base.n() > 0 && projected)
                                .then(|| {
                                    projected_interval(&cols[0].repeats, &pool.repeats, higher)
                                })
                                .flatten();
                            Cell {
                                value: Some(v),
                                pct_change: pct,
                                significant: sig,
                                interval,
                                samples: x.n() as usize,
                            }
                        })
                        .collect();
                    rows.push(Row {
                        stat: stat.name(higher),
                        metric: k.metric.clone(),
                        tasks: k.tasks,
                        cells,
                    });
                }
            }
        }
        sections.push(Section {
            workload: workload.to_string(),
            mode: mode.to_string(),
            rows,
        });
    }
    if sections.is_empty() {
        return Err(CompareError::NothingShared {
            by: "workload and mode",
        });
    }
    Ok(Comparison {
        columns,
        rule: rule_name(rule).into(),
        sections,
    })
}

/// What the interval of a projected column is, printed under a comparison that has one.
pub const PROJECTED_NOTE: &str = "projected: mean rows of projected columns (and, with a projected baseline, of every column) show the change and [low, high], its range over every pairing of a baseline capture's mean with one of the column's; they carry no significance asterisks: a projection's spread is the model's capture noise, not a sample of the machine";

fn fmt_value(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{v:.4}"),
        Some(_) => "NaN".into(),
        None => "-".into(),
    }
}

fn fmt_change(c: &Cell) -> String {
    match (c.pct_change, c.interval) {
        (Some(p), Some((lo, hi))) if p.is_finite() => format!("({p:7.2}% [{lo:.2}, {hi:.2}])"),
        (Some(p), _) if p.is_finite() => {
            if c.significant == Some(true) {
                format!("*{p:7.2}%*")
            } else {
                format!("({p:7.2}%)")
            }
        }
        _ => "(     NA )".into(),
    }
}

impl Comparison {
    /// mmtests' text table.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        for s in &self.sections {
            let row_name = |r: &Row| format!("{}-{}", r.metric, r.tasks);
            let name_w = s.rows.iter().map(|r| row_name(r).len()).max().unwrap_or(0);
            let label_w = self
                .columns
                .iter()
                .map(|c| c.label.len())
                .max()
                .unwrap_or(0);
            let val_w = (s
                .rows
                .iter()
                .flat_map(|r| r.cells.iter().map(|c| fmt_value(c.value).len()))
                .max()
                .unwrap_or(1)
                + 3)
            .max((label_w + 1).saturating_sub(11));
            // The change is 10 wide, wider with a projected column's interval.
            let chg_w = s
                .rows
                .iter()
                .flat_map(|r| r.cells.iter().map(|c| fmt_change(c).len()))
                .max()
                .unwrap_or(10)
                .max(10);
            let col_w = val_w + 1 + chg_w;
            let _ = writeln!(out, "{} {}", s.workload, s.mode);
            let mut header = " ".repeat(10 + name_w);
            for c in &self.columns {
                let _ = write!(header, "{:>col_w$}", c.label);
            }
            let _ = writeln!(out, "{}", header.trim_end());
            for r in &s.rows {
                let mut line = format!("{:<10}{:<name_w$}", r.stat, row_name(r));
                for c in &r.cells {
                    let _ = write!(
                        line,
                        "{:>val_w$} {:<chg_w$}",
                        fmt_value(c.value),
                        fmt_change(c)
                    );
                }
                let line = line.trim_end();
                let _ = writeln!(out, "{line}");
            }
            out.push('\n');
        }
        let others: Vec<String> = self
            .columns
            .iter()
            .filter(|c| c.origins != [Origin::Measured])
            .map(|c| {
                let o: Vec<&str> = c.origins.iter().map(|o| o.as_str()).collect();
                format!("{} is {}", c.label, o.join("+"))
            })
            .collect();
        if !others.is_empty() {
            let _ = writeln!(out, "note: {}", others.join("; "));
        }
        if self.has_projected() {
            let _ = writeln!(out, "{PROJECTED_NOTE}");
        }
        let _ = writeln!(out, "significance: {}", self.rule);
        out
    }

    /// Whether a column is projected (its mean rows then show intervals, not asterisks).
    pub fn has_projected(&self) -> bool {
        self.columns
            .iter()
            .any(|c| c.origins.contains(&Origin::Projected))
    }

    /// A GitHub-flavoured markdown table per section; significant changes in bold.
    pub fn render_markdown(&self) -> String {
        let mut out = String::new();
        for s in &self.sections {
            let _ = writeln!(out, "### {} {}\n", s.workload, s.mode);
            let mut h = "| stat | metric |".to_string();
            let mut sep = "|---|---|".to_string();
            for c in &self.columns {
                let _ = write!(h, " {} |", c.label.replace('|', "\\|"));
                sep += "---:|";
            }
            let _ = writeln!(out, "{h}\n{sep}");
            for r in &s.rows {
                let mut line = format!("| {} | {}-{} |", r.stat, r.metric, r.tasks);
                for c in &r.cells {
                    let change = match (c.pct_change, c.interval) {
                        (Some(p), Some((lo, hi))) if p.is_finite() => {
                            format!("{p:+.2}% [{lo:+.2}, {hi:+.2}]")
                        }
                        (Some(p), _) if p.is_finite() && c.significant == Some(true) => {
                            format!("**{p:+.2}%**")
                        }
                        (Some(p), _) if p.is_finite() => format!("{p:+.2}%"),
                        _ => "NA".into(),
                    };
                    let _ = write!(line, " {} ({change}) |", fmt_value(c.value));
                }
                let _ = writeln!(out, "{line}");
            }
            out.push('\n');
        }
        if self.has_projected() {
            let _ = writeln!(
                out,
                "{}.\n",
                PROJECTED_NOTE.replacen("projected:", "Projected:", 1)
            );
        }
        let _ = writeln!(
            out,
            "Significance: {}; significant changes in bold.",
            self.rule
        );
        out
    }

    pub fn render_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a comparison serialises")
    }

    /// One line per (row, column). Text cells are [`neutralise`]d: a spreadsheet shows a label
    /// like `=1+1` as written rather than evaluating it.
    pub fn render_csv(&self) -> String {
        let mut w = csv::Writer::from_writer(Vec::new());
        let _ = w.write_record([
            "workload",
            "mode",
            "stat",
            "metric",
            "tasks",
            "label",
            "value",
            "pct_change",
            "significant",
            "samples",
            "interval_low",
            "interval_high",
        ]);
        for s in &self.sections {
            for r in &s.rows {
                for (c, col) in r.cells.iter().zip(&self.columns) {
                    let opt = |v: Option<f64>| v.map_or(String::new(), |v| v.to_string());
                    let _ = w.write_record([
                        neutralise(&s.workload).into_owned(),
                        neutralise(&s.mode).into_owned(),
                        r.stat.clone(),
                        neutralise(&r.metric).into_owned(),
                        r.tasks.to_string(),
                        neutralise(&col.label).into_owned(),
                        opt(c.value),
                        opt(c.pct_change),
                        c.significant.map_or(String::new(), |b| b.to_string()),
                        c.samples.to_string(),
                        opt(c.interval.map(|i| i.0)),
                        opt(c.interval.map(|i| i.1)),
                    ]);
                }
            }
        }
        String::from_utf8(w.into_inner().expect("writing to memory")).expect("csv is UTF-8")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(label: &str, tasks: u32, metric: &str, vals: &[f64]) -> Vec<SampleRow> {
        vals.iter()
            .enumerate()
            .map(|(i, &v)| SampleRow {
                run_id: 1,
                label: label.into(),
                workload: "pft".into(),
                origin: Origin::Measured,
                key: SampleKey {
                    mode: "threads".into(),
                    tasks,
                    metric: metric.into(),
                    higher_is_better: true,
                },
                repeat: 0,
                seq: i as u32,
                value: v,
            })
            .collect()
    }

    fn labels(l: &[&str]) -> Vec<String> {
        l.iter().map(|s| s.to_string()).collect()
    }

    /// The line of the issue, from the 2023 per-VMA lock posting's Hmeans.
    #[test]
    fn golden_mean_row_of_the_2023_posting() {
        // Two equal samples a side: the Hmeans are the posting's, the spread is nil.
        let mut s = row("mm-unstable-20230210", 4, "faults/sec", &[2965588.9697; 2]);
        s.extend(row("pvl-v2", 4, "faults/sec", &[2683651.5664; 2]));
        let names = labels(&["mm-unstable-20230210", "pvl-v2"]);
        for rule in [Significance::Interval, Significance::TTest] {
            let text = build(&s, &names, rule).unwrap().render_text();
            assert!(
                text.contains(
                    "\nHmean     faults/sec-4   2965588.9697 (   0.00%)   2683651.5664 *  -9.51%*\n"
                ),
                "{text}"
            );
        }
        // One sample a side gives no spread to judge by: never significant.
        let mut s = row("mm-unstable-20230210", 4, "faults/sec", &[2965588.9697]);
        s.extend(row("pvl-v2", 4, "faults/sec", &[2683651.5664]));
        for rule in [Significance::Interval, Significance::TTest] {
            let text = build(&s, &names, rule).unwrap().render_text();
            assert!(
                text.contains("2965588.9697 (   0.00%)   2683651.5664 (  -9.51%)\n"),
                "{text}"
            );
        }
    }

    #[test]
    fn natural_order_compares_digit_runs_as_numbers() {
        use std::cmp::Ordering::*;
        assert_eq!(natural_cmp("send-128", "send-1024"), Less);
        assert_eq!(natural_cmp("send-8192", "send-16384"), Less);
        assert_eq!(natural_cmp("send-64", "send-64"), Equal);
        assert_eq!(natural_cmp("faults/cpu", "faults/sec"), Less);
        assert_eq!(natural_cmp("send", "send-64"), Less);
        assert_eq!(natural_cmp("recv-64", "send-8"), Less);
        assert_eq!(natural_cmp("a007", "a7"), Less, "leading zeros: text order");
        assert_eq!(natural_cmp("a7", "a007"), Greater);
        assert_eq!(natural_cmp("x2y10", "x2y9"), Greater);
        let mut v = vec![
            "send-3312",
            "send-1024",
            "send-128",
            "send-64",
            "send-16384",
        ];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(
            v,
            [
                "send-64",
                "send-128",
                "send-1024",
                "send-3312",
                "send-16384"
            ]
        );
    }

    /// netpipe's sizes, as the store returns them (text order), come out in size order.
    #[test]
    fn compare_rows_follow_numbers_in_metric_names() {
        let mut s = Vec::new();
        for metric in ["send-1024", "send-128", "send-16384", "send-64"] {
            s.extend(row("a", 1, metric, &[1.0, 2.0]));
            s.extend(row("b", 1, metric, &[1.0, 2.0]));
        }
        let c = build(&s, &labels(&["a", "b"]), Significance::Interval).unwrap();
        let text = c.render_text();
        let at = |m: &str| {
            text.find(&format!("{m}-1 "))
                .unwrap_or_else(|| panic!("{m}: {text}"))
        };
        assert!(at("send-64") < at("send-128"), "{text}");
        assert!(at("send-128") < at("send-1024"), "{text}");
        assert!(at("send-1024") < at("send-16384"), "{text}");
    }

    #[test]
    fn duplicate_labels_and_disjoint_sections_are_refused() {
        let mut s = row("a", 1, "faults/sec", &[1.0, 2.0]);
        let e = build(&s, &labels(&["a", "a"]), Significance::Interval).unwrap_err();
        assert!(matches!(&e, CompareError::Twice(l) if l == "a"), "{e:?}");
        let e = e.to_string();
        assert!(e.contains("named twice"), "{e}");
        // b has data only in another mode: nothing is compared.
        let mut other = row("b", 1, "faults/sec", &[1.0, 2.0]);
        for r in &mut other {
            r.key.mode = "processes".into();
        }
        s.extend(other);
        let e = build(&s, &labels(&["a", "b"]), Significance::Interval)
            .unwrap_err()
            .to_string();
        assert!(e.contains("nothing to compare"), "{e}");
    }

    #[test]
    fn long_labels_widen_their_columns() {
        let long = "a-label-much-longer-than-any-value-in-the-table";
        let mut s = row("base", 1, "faults/sec", &[1.0, 2.0]);
        s.extend(row(long, 1, "faults/sec", &[1.0, 2.0]));
        let text = build(&s, &labels(&["base", long]), Significance::Interval)
            .unwrap()
            .render_text();
        let lines: Vec<&str> = text.lines().collect();
        // The header ends where the rows end.
        assert_eq!(lines[1].len(), lines[2].len(), "{text}");
        assert!(lines[1].contains(&format!(" {long}")), "{text}");
    }

    /// The whole text layout: header right-aligned over each column, stat rows in mmtests
    /// order, spread rows improving downwards.
    #[test]
    fn golden_full_table() {
        let mut s = row("base", 1, "faults/sec", &[100.0, 100.0, 100.0, 100.0]);
        s.extend(row("new", 1, "faults/sec", &[200.0, 200.0, 200.0, 200.0]));
        let c = build(&s, &labels(&["base", "new"]), Significance::TTest).unwrap();
        let want = "\
pft threads
                                        base                   new
Min       faults/sec-1   100.0000 (   0.00%)   200.0000 ( 100.00%)
Hmean     faults/sec-1   100.0000 (   0.00%)   200.0000 * 100.00%*
Stddev    faults/sec-1     0.0000 (   0.00%)     0.0000 (   0.00%)
CoeffVar  faults/sec-1     0.0000 (   0.00%)     0.0000 (   0.00%)
HStddev   faults/sec-1     0.0000 (   0.00%)     0.0000 (   0.00%)
HCoeffVar faults/sec-1     0.0000 (   0.00%)     0.0000 (   0.00%)
Max       faults/sec-1   100.0000 (   0.00%)   200.0000 ( 100.00%)
BHmean-50 faults/sec-1   100.0000 (   0.00%)   200.0000 ( 100.00%)
BHmean-95 faults/sec-1   100.0000 (   0.00%)   200.0000 ( 100.00%)
BHmean-99 faults/sec-1   100.0000 (   0.00%)   200.0000 ( 100.00%)

significance: t-test (2018-2024 rule, p < 0.10)
";
        assert_eq!(c.render_text(), want);
    }

    #[test]
    fn spread_rows_use_the_lower_is_better_form() {
        let mut s = row("a", 2, "faults/sec", &[90.0, 110.0, 100.0]);
        s.extend(row("b", 2, "faults/sec", &[80.0, 120.0, 100.0]));
        let c = build(&s, &labels(&["a", "b"]), Significance::Interval).unwrap();
        let sd = c.sections[0]
            .rows
            .iter()
            .find(|r| r.stat == "Stddev")
            .unwrap();
        // Stddev 10 -> 20: twice the spread is 100% worse.
        assert!((sd.cells[1].pct_change.unwrap() + 100.0).abs() < 1e-9);
        assert_eq!(sd.cells[1].significant, None);
    }

    #[test]
    fn missing_cells_and_unknown_labels() {
        let mut s = row("a", 1, "faults/sec", &[1.0]);
        s.extend(row("b", 2, "faults/sec", &[1.0]));
        let c = build(&s, &labels(&["a", "b"]), Significance::Interval).unwrap();
        let text = c.render_text();
        assert!(
            text.contains("Hmean     faults/sec-1   1.0000 (   0.00%)        - (     NA )\n"),
            "{text}"
        );
        let e = build(&s, &labels(&["a", "zz"]), Significance::Interval)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`zz` has no samples"), "{e}");
        assert!(build(&s, &[], Significance::Interval).is_err());
    }

    #[test]
    fn markdown_json_and_csv_carry_the_same_numbers() {
        let mut s = row("a", 4, "faults/sec", &[100.0, 101.0, 99.0]);
        s.extend(row("b", 4, "faults/sec", &[150.0, 151.0, 149.0]));
        let c = build(&s, &labels(&["a", "b"]), Significance::Interval).unwrap();
        let md = c.render_markdown();
        assert!(md.contains("| stat | metric | a | b |"), "{md}");
        assert!(md.contains("| 149.9956 (**+50.01%**) |"), "{md}");
        let j: serde_json::Value = serde_json::from_str(&c.render_json()).unwrap();
        assert_eq!(j["columns"][1]["label"], "b");
        let csv = c.render_csv();
        assert!(csv.starts_with("workload,mode,stat,metric,tasks,label,value"));
        assert!(csv.contains("pft,threads,Hmean,faults/sec,4,b,"), "{csv}");
        assert_eq!(csv.lines().count(), 1 + 10 * 2);
    }

    /// A projected column's mean rows show the change with the range over the captures'
    /// pairings, never an asterisk, and the table says so; a measured comparison of the same
    /// numbers gets its asterisk.
    #[test]
    fn projected_columns_show_an_interval_and_no_asterisk() {
        // Two captures a side (repeats 0 and 1), far apart in the new column.
        let rows = |label: &str, origin: Origin, caps: &[&[f64]]| -> Vec<SampleRow> {
            let mut out = Vec::new();
            for (r, vals) in caps.iter().enumerate() {
                for mut s in row(label, 4, "faults/sec", vals) {
                    s.origin = origin;
                    s.repeat = r as u32;
                    s.seq += 10 * r as u32;
                    out.push(s);
                }
            }
            out
        };
        let names = labels(&["a", "b"]);
        for origin in [Origin::Projected, Origin::Measured] {
            let mut s = rows("a", origin, &[&[100.0, 100.0], &[100.0, 100.0]]);
            let mut b = rows("b", origin, &[&[110.0, 110.0], &[130.0, 130.0]]);
            for x in &mut b {
                x.run_id = 2;
            }
            s.append(&mut b);
            let c = build(&s, &names, Significance::TTest).unwrap();
            let text = c.render_text();
            let hmean = text.lines().find(|l| l.starts_with("Hmean")).unwrap();
            let cell = &c.sections[0].rows[1].cells[1];
            if origin == Origin::Projected {
                assert!(!hmean.contains('*'), "{text}");
                assert_eq!(cell.significant, None);
                // Capture means 110 and 130 against 100: +10% to +30%.
                assert_eq!(cell.interval, Some((10.0, 30.0)));
                assert!(hmean.contains("[10.00, 30.00])"), "{text}");
                assert!(text.contains("b is projected"), "{text}");
                assert!(text.contains("no significance asterisks"), "{text}");
                assert!(c.render_markdown().contains("[+10.00, +30.00]"));
                assert!(c.render_csv().contains(",10,30\n"), "{}", c.render_csv());
            } else {
                assert!(hmean.contains('*'), "{text}");
                assert_eq!(cell.interval, None);
                assert!(!text.contains("no significance asterisks"), "{text}");
            }
        }
    }
}
