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

pub mod fonts;
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
