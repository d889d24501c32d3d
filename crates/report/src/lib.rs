//! Plots and HTML reports of stored results: what `pagelab plot` and `pagelab report` draw.
//!
//! The command line selects runs the way `pagelab compare` does and hands the selection over as
//! [`Results`]; everything here only reads it, so a plot or report can never alter the store.
//!
//! - [`series`]: the samples summarised per label, origin, mode and task count (mmtests' means
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

use pagelab_bench::results::{CounterRow, SampleRow, StoredRun};
use pagelab_bench::stats::Significance;

/// The stored results a plot or report is made of, as selected by the command line.
#[derive(Clone, Debug)]
pub struct Results {
    /// The labels in column order; the first is the baseline of every comparison.
    pub labels: Vec<String>,
    /// The selected runs.
    pub runs: Vec<StoredRun>,
    /// Their samples (samples of labels not in `labels` are ignored).
    pub samples: Vec<SampleRow>,
    /// Their engine counters.
    pub counters: Vec<CounterRow>,
    /// The significance rule of the comparison tables and of the asterisks in change plots.
    pub rule: Significance,
}

impl Results {
    /// The part of the results that comes from one source (measured here, projected for one
    /// machine, ...): its runs, their samples and counters, the same labels and rule.
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
            samples: self
                .samples
                .iter()
                .filter(|s| ids.contains(&s.run_id))
                .cloned()
                .collect(),
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
        assert!(p.samples.iter().all(|s| s.run_id >= 3));
        assert_eq!(p.samples.len(), 16);
        assert_eq!(p.labels, r.labels);
        assert!(
            r.only(&Source::measured())
                .samples
                .iter()
                .all(|s| s.run_id <= 2)
        );
    }
}
