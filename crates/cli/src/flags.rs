//! The flags with a fixed set of values, as clap value enums: `--help` lists each one's choices,
//! and clap refuses any other value with the list before a command opens the store or measures
//! anything. Each converts to the library's type where one exists.

use clap::ValueEnum;
use pagelab_bench::import;
use pagelab_bench::results::Origin;
use pagelab_bench::stats::Significance;
use pagelab_report::plot;
use pagelab_workloads::Mode;

/// `--significance`: the rule a comparison marks a difference significant by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum SignificanceFlag {
    /// Non-overlapping mean ± 1.96 sd intervals (current mmtests).
    Interval,
    /// The t-test mmtests used from 2018 to 2024.
    #[value(alias = "t-test")]
    Ttest,
}

impl From<SignificanceFlag> for Significance {
    fn from(s: SignificanceFlag) -> Significance {
        match s {
            SignificanceFlag::Interval => Significance::Interval,
            SignificanceFlag::Ttest => Significance::TTest,
        }
    }
}

/// `--origin`: where a run's numbers come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum OriginFlag {
    /// Measured here, on the engine or on the host kernel.
    Measured,
    /// Computed by the projector for a machine description.
    Projected,
    /// Produced by the real tools anywhere, then imported.
    Imported,
}

impl From<OriginFlag> for Origin {
    fn from(o: OriginFlag) -> Origin {
        match o {
            OriginFlag::Measured => Origin::Measured,
            OriginFlag::Projected => Origin::Projected,
            OriginFlag::Imported => Origin::Imported,
        }
    }
}

/// `--status`: how a run ended, with `abandoned` told apart from `running` by whether the
/// process that stores it is still alive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum StatusFlag {
    /// Being written by a process that is alive.
    Running,
    Complete,
    /// Stopped early (Ctrl-C, a failure); what was measured is stored.
    Incomplete,
    /// Left running by a process that no longer exists (killed, or the machine rebooted).
    Abandoned,
}

/// `import --format`: which tool's output a file is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum ImportFormatFlag {
    /// The stdout of a will-it-scale binary.
    WillItScale,
    /// The CSV will-it-scale's runtest.py prints.
    WillItScaleCsv,
    /// pft's result lines, as mmtests logs them.
    Pft,
    /// pagelab's plain sample CSV.
    Csv,
}

impl From<ImportFormatFlag> for import::Format {
    fn from(f: ImportFormatFlag) -> import::Format {
        match f {
            ImportFormatFlag::WillItScale => import::Format::WillItScale,
            ImportFormatFlag::WillItScaleCsv => import::Format::WillItScaleCsv,
            ImportFormatFlag::Pft => import::Format::Pft,
            ImportFormatFlag::Csv => import::Format::Csv,
        }
    }
}

/// `--mode` where one mode is meant: the tasks are threads of one address space, or processes
/// with one each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum ModeFlag {
    Processes,
    Threads,
}

impl From<ModeFlag> for Mode {
    fn from(m: ModeFlag) -> Mode {
        match m {
            ModeFlag::Processes => Mode::Processes,
            ModeFlag::Threads => Mode::Threads,
        }
    }
}

/// `--mode` where a run or a projection may cover both modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum ModesFlag {
    Processes,
    Threads,
    /// Processes, then threads.
    Both,
}

impl ModesFlag {
    /// The modes to measure or project, in that order.
    pub(crate) fn modes(self) -> Vec<Mode> {
        match self {
            ModesFlag::Processes => vec![Mode::Processes],
            ModesFlag::Threads => vec![Mode::Threads],
            ModesFlag::Both => vec![Mode::Processes, Mode::Threads],
        }
    }
}

/// `plot --kind`: what a plot draws.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum PlotKindFlag {
    /// The metric against the task count, with error bars and perfect scaling.
    Scaling,
    /// Each label's percent change against the baseline, positive is better.
    Change,
}

impl From<PlotKindFlag> for plot::Kind {
    fn from(k: PlotKindFlag) -> plot::Kind {
        match k {
            PlotKindFlag::Scaling => plot::Kind::Scaling,
            PlotKindFlag::Change => plot::Kind::Change,
        }
    }
}

/// `plot --format`: the image file's format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum PlotFormatFlag {
    Svg,
    Png,
}

impl From<PlotFormatFlag> for plot::Format {
    fn from(f: PlotFormatFlag) -> plot::Format {
        match f {
            PlotFormatFlag::Svg => plot::Format::Svg,
            PlotFormatFlag::Png => plot::Format::Png,
        }
    }
}

/// `run --target`: what runs the workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum TargetFlag {
    /// The userspace kernel, with --profile.
    Engine,
    /// This machine's kernel, for real.
    Kernel,
}

/// `run --lock-stat`: whether the engine counts its lock statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum LockStatFlag {
    /// Counted per class and stored with the run.
    On,
    /// Not counted, to measure what counting costs; no lock counters are stored.
    Off,
}

/// `micro fault --lock-stat`: measured with the engine's lock statistics on, off, or both ways.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum LockStatsFlag {
    On,
    Off,
    /// Each profile measured both ways, interleaved round by round, with the on/off ratio.
    Both,
}

impl LockStatsFlag {
    /// The settings to measure, in order.
    pub(crate) fn settings(self) -> &'static [bool] {
        match self {
            LockStatsFlag::On => &[true],
            LockStatsFlag::Off => &[false],
            LockStatsFlag::Both => &[true, false],
        }
    }
}
