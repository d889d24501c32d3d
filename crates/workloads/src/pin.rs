//! Pinning the current thread to a host core, so that a task bound to virtual CPU i runs on the
//! i-th CPU this process may use, modulo their number (will-it-scale and mmtests pin the same
//! way). The allowed set is read once (`sched_getaffinity`), so `taskset` and cpusets are
//! honoured: tasks never escape the mask they were started with.

use std::sync::OnceLock;

/// The CPUs the process was allowed when first asked, in increasing order.
pub fn allowed_cpus() -> &'static [usize] {
    static ALLOWED: OnceLock<Vec<usize>> = OnceLock::new();
    ALLOWED.get_or_init(|| {
        let cpus: Vec<usize> = match rustix::thread::sched_getaffinity(None) {
            Ok(set) => (0..rustix::thread::CpuSet::MAX_CPU)
                .filter(|&c| set.is_set(c))
                .collect(),
            Err(_) => Vec::new(),
        };
        if cpus.is_empty() {
            let n = std::thread::available_parallelism().map_or(1, |n| n.get());
            (0..n).collect()
        } else {
            cpus
        }
    })
}

/// Pin the calling thread to the `(core % n)`-th allowed CPU. Returns false if the host
/// refused; the thread then runs where the scheduler puts it.
pub fn pin_to_core(core: usize) -> bool {
    let allowed = allowed_cpus();
    let mut set = rustix::thread::CpuSet::new();
    set.set(allowed[core % allowed.len()]);
    rustix::thread::sched_setaffinity(None, &set).is_ok()
}

/// Let the calling thread run on every allowed CPU again.
pub fn unpin() {
    let mut set = rustix::thread::CpuSet::new();
    for &c in allowed_cpus() {
        set.set(c);
    }
    let _ = rustix::thread::sched_setaffinity(None, &set);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_within_the_allowed_set() {
        let allowed = allowed_cpus().to_vec();
        assert!(!allowed.is_empty());
        std::thread::spawn(move || {
            for i in 0..2 * allowed.len() {
                assert!(pin_to_core(i));
                let now = rustix::thread::sched_getaffinity(None).unwrap();
                let on: Vec<usize> = (0..rustix::thread::CpuSet::MAX_CPU)
                    .filter(|&c| now.is_set(c))
                    .collect();
                assert_eq!(on, vec![allowed[i % allowed.len()]]);
            }
            unpin();
        })
        .join()
        .unwrap();
    }
}
