//! Micro-benchmarks of single engine mechanisms. Each one measures every configuration side by
//! side in the same run, interleaving them round by round so that drift of a shared, noisy
//! machine hits them all alike, and prints ratios next to absolute figures.

pub mod alloc;
pub mod fault;

use std::time::Instant;

/// Median of a sample (rounds of one configuration).
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
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
    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(super::median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(super::median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(super::median(&mut []).is_nan());
    }
}
