//! Plots and HTML reports of stored results: what `pagelab plot` and `pagelab report` draw.
//!
//! The command line selects runs the way `pagelab compare` does and hands the selection over as
//! [`Results`]; everything here only reads it, so a plot or report can never alter the store.
//!
//! - [`series`]: the sample sets summarised per label, origin, mode and task count (mmtests' means
//!   and spreads), the numbers every plot is drawn from;
//! - [`plot`]: scaling and percent-change plots as SVG or PNG;
//! - [`fonts`]: the typeface shipped with pagelab, so that plots need no system font;
//! - [`raster`]: the PNG surface, which sets text with that face;
//! - [`provenance`]: where the numbers come from, in words;
//! - [`counters`]: the engine's counters (locks, VMA-lock fallbacks, per-CPU list traffic) as
//!   tables;
//! - [`html`]: the self-contained HTML report.

pub mod counters;
pub mod fonts;
pub mod html;
pub mod plot;
pub mod provenance;
pub mod raster;
pub mod series;
pub mod verdicts;

use std::rc::Rc;

use pagelab_bench::compare::{self, BestSamples, SetSummary};
use pagelab_bench::results::{CounterRow, SampleRow, StoredRun};
use pagelab_bench::stats::Significance;
use pagelab_bench::store::CounterTotal;

/// The stored results a plot or report is made of, as selected by the command line.
///
/// It holds summaries, never the samples: one [`SetSummary`] per run and sample set, and a way
/// to read the best samples of a set for the comparison tables' best-P rows (the store, which
/// sorts them in SQLite). A report on runs of millions of samples needs memory for its tables
/// and plots only.
#[derive(Clone, Debug)]
pub struct Results {
    /// The labels in column order; the first is the baseline of every comparison.
    pub labels: Vec<String>,
    /// The selected runs.
    pub runs: Vec<StoredRun>,
    /// The summary of each of their sample sets (sets of labels not in `labels` are ignored).
    pub sets: Vec<SetSummary>,
    /// Where the best samples of a set are read from.
    pub best: Rc<dyn BestSamples>,
    /// Their engine counters, summed over the measured windows.
    pub counters: Vec<CounterTotal>,
    /// The significance rule of the comparison tables and of the asterisks in change plots.
    pub rule: Significance,
}

impl Results {
    /// Results from samples and counters in memory (a selection already read, tests).
    pub fn from_samples(
        labels: Vec<String>,
        runs: Vec<StoredRun>,
        samples: Vec<SampleRow>,
        counters: &[CounterRow],
        rule: Significance,
    ) -> Results {
        Results {
            labels,
            runs,
            sets: compare::summarise(&samples),
            best: Rc::new(samples),
            counters: counters
                .iter()
                .map(|c| CounterTotal {
                    run_id: c.run_id,
                    mode: c.mode.clone(),
                    tasks: c.tasks,
                    name: c.name.clone(),
                    windows: 1,
                    sum: c.value,
                })
                .collect(),
            rule,
        }
    }

    /// The part of the results that comes from one source (measured here, projected for one
    /// machine, ...): its runs, their sample sets and counters, the same labels and rule.
    pub fn only(&self, source: &series::Source) -> Results {
        let runs: Vec<StoredRun> = self
            .runs
            .iter()
            .filter(|r| series::Source::of(r) == *source)
            .cloned()
            .collect();
        let ids: std::collections::HashSet<i64> = runs.iter().map(|r| r.id).collect();
        Results {
            labels: self.labels.clone(),
            sets: self
                .sets
                .iter()
                .filter(|s| ids.contains(&s.run_id))
                .cloned()
                .collect(),
            best: Rc::clone(&self.best),
            counters: self
                .counters
                .iter()
                .filter(|c| ids.contains(&c.run_id))
                .cloned()
                .collect(),
            runs,
            rule: self.rule,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::series::{Source, tests::example};
    use pagelab_bench::results::Origin;

    #[test]
    fn only_keeps_one_source() {
        let r = example();
        let p = r.only(&Source {
            origin: Origin::Projected,
            machine: Some("big-box".into()),
        });
        assert_eq!(p.runs.iter().map(|r| r.id).collect::<Vec<_>>(), [3, 4]);
        assert!(p.sets.iter().all(|s| s.run_id >= 3));
        let n: u64 = p.sets.iter().map(|s| s.summary.n()).sum();
        assert_eq!(n, 16);
        assert_eq!(p.labels, r.labels);
        assert!(
            r.only(&Source::measured())
                .sets
                .iter()
                .all(|s| s.run_id <= 2)
        );
    }
}
