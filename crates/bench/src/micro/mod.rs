//! Micro-benchmarks of single engine mechanisms. Each one measures every configuration side by
//! side in the same run, interleaving them round by round so that drift of a shared, noisy
//! machine hits them all alike, and prints ratios next to absolute figures.

pub mod alloc;
pub mod fault;
pub mod pft;

use std::time::Instant;

use pagelab_mm::{AllocError, MemError};
use pagelab_workloads::WorkloadError;

/// Why a micro-benchmark stopped without a report.
#[derive(Debug, thiserror::Error)]
pub enum MicroError {
    /// The configuration asks for nothing to measure.
    #[error("{0}")]
    Nothing(&'static str),
    /// A policy's engine could not be built (its arena, its settings).
    #[error("{policy}: {source}")]
    Build { policy: String, source: MemError },
    /// Booting an engine, or running its task, failed.
    #[error("{policy}: {source}")]
    Engine {
        policy: String,
        source: WorkloadError,
    },
    #[error(transparent)]
    Workload(#[from] WorkloadError),
    #[error(transparent)]
    Alloc(#[from] AllocError),
    /// After the passes the allocator is not whole: its own check failed (it reports text), or
    /// frames were never freed.
    #[error("{policy}: invariant broken: {finding}")]
    Invariant { policy: String, finding: String },
    #[error("{policy}: {frames} frames leaked")]
    Leak { policy: String, frames: u64 },
}

/// Nanoseconds per operation of `f`, which performs `ops` operations.
pub fn ns_per_op(ops: u64, f: impl FnOnce()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_nanos() as f64 / ops as f64
}

/// Serialises the tests of this crate that flip the process-wide lock statistics switch (engine
/// runs and micro-benchmarks do), so that one cannot switch counting off in the middle of
/// another's counted pass.
#[cfg(test)]
pub(crate) fn stats_switch() -> std::sync::MutexGuard<'static, ()> {
    static SWITCH: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SWITCH.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::MicroError;

    #[test]
    fn nothing_to_measure_is_refused_before_anything_is_built() {
        let stop = AtomicBool::new(false);
        let cfg = super::alloc::AllocBenchConfig {
            arena_bytes: 1 << 30,
            ops: 0,
            rounds: 1,
            extra: Vec::new(),
        };
        let e = super::alloc::run(&cfg, |_| {}, &stop).unwrap_err();
        assert!(matches!(e, MicroError::Nothing(_)), "{e:?}");
        assert_eq!(e.to_string(), "--ops and --rounds must be at least 1");
        let e = super::fault::run(&[], 1 << 20, 1, &[], &stop).unwrap_err();
        assert!(matches!(e, MicroError::Nothing(_)), "{e:?}");
    }
}
