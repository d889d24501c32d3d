//! The projector's errors, as types a caller can match on.
//!
//! Each keeps the one line a user reads (the CLI prints `Display` as is) and carries its
//! source where there is one: the I/O or TOML error behind a machine file, the workload error
//! behind a failed capture, the bench crate's errors behind a self-check's run.

use pagelab_bench::experiments::ExperimentError;
use pagelab_bench::profiles::ProfileError;
use pagelab_bench::run::RunError;
use pagelab_bench::store::StoreError;
use pagelab_workloads::WorkloadError;

use crate::trace::TraceError;

/// What is wrong with a machine description.
#[derive(Debug, thiserror::Error)]
pub enum MachineError {
    /// A value refused by the checks: the message names the key and what it must be
    /// (`topology.sockets must be at least 1 and at most 32, not 0`).
    #[error("{0}")]
    Key(String),
    /// A refused description, with the file or name it came from.
    #[error("machine {what}: {source}")]
    In {
        what: String,
        #[source]
        source: Box<MachineError>,
    },
    /// The file is not valid TOML or not a machine (an unknown or missing key).
    #[error("machine {what}: {}", .source.message().trim())]
    Toml {
        what: String,
        #[source]
        source: toml::de::Error,
    },
    /// The machine file cannot be read.
    #[error("machine file {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// A file took a shipped machine's name but describes another machine.
    #[error(
        "machine {what}: name `{name}` is a shipped machine's, but this file differs from it in {key}; give the file a name of its own (its rows are stored as <profile>@<name>)"
    )]
    ShippedName {
        what: String,
        name: String,
        key: String,
    },
    /// Neither a shipped machine nor a file.
    #[error(
        "unknown machine `{name}`; shipped machines: {shipped} (or give a path to a .toml file)"
    )]
    Unknown { name: String, shipped: String },
}

/// Why a trace could not be captured.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The workload has no shape the projector can capture.
    #[error("{0}")]
    Unsupported(String),
    #[error("a capture needs at least one cycle")]
    NoCycle,
    /// The engine or the traced workload failed.
    #[error("capture: {0}")]
    Workload(#[source] WorkloadError),
    /// A companion task (the untraced ones sharing the engine) failed.
    #[error("capture: companion: {0}")]
    Companion(#[source] WorkloadError),
    /// A task panicked, or the workload ended before its windows were recorded and timed.
    #[error("capture: {0}")]
    Incomplete(&'static str),
    /// A netpipe pair's socket broke its own protocol while captured.
    #[error("netpipe capture: {0}")]
    Pair(&'static str),
    /// The engine refused a netpipe pair's allocation, or the receiver read a message that
    /// was not the one its sender wrote.
    #[error("netpipe capture: {0}")]
    Engine(String),
}

/// Why a projection, a replay, a validation or a calibration stopped.
#[derive(Debug, thiserror::Error)]
pub enum ProjectError {
    #[error(transparent)]
    Machine(#[from] MachineError),
    #[error(transparent)]
    Capture(#[from] CaptureError),
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error(transparent)]
    Experiment(#[from] ExperimentError),
    #[error(transparent)]
    Profile(#[from] ProfileError),
    /// A benchmark run on the engine (the self-check's) failed.
    #[error(transparent)]
    Run(#[from] RunError),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A request refused before anything ran: the message names the flag or value.
    #[error("{0}")]
    Request(String),
    /// The replay refused its inputs or produced a result that is not a measurement.
    #[error("{0}")]
    Replay(String),
    /// A published table that cannot be read or does not fit the experiment it names.
    #[error("{0}")]
    Table(String),
    /// A calibration that cannot be made (too few CPUs, no trap cost left to fit).
    #[error("{0}")]
    Calibrate(String),
    /// A host or engine measurement for `pagelab calibrate` failed.
    #[error("calibrate: {0}")]
    Measure(#[source] WorkloadError),
    /// The user stopped it (Ctrl-C) before it finished.
    #[error("interrupted")]
    Interrupted,
}
