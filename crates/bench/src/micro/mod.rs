//! Micro-benchmarks of single engine mechanisms. Each one measures every configuration side by
//! side in the same run, interleaving them round by round so that drift of a shared, noisy
//! machine hits them all alike, and prints ratios next to absolute figures.

pub mod alloc;
pub mod fault;

use std::time::Instant;

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
