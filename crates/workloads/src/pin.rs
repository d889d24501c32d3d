//! Pinning the current thread to a host core, so that a task bound to virtual CPU i runs on core
//! i mod cores (will-it-scale and mmtests pin the same way).

/// Pin the calling thread to `core % cores`. Returns false if the host refused (a container
/// with a restricted cpuset, say); the benchmark then runs unpinned and says so.
pub fn pin_to_core(core: usize) -> bool {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut set = rustix::thread::CpuSet::new();
    set.set(core % cores);
    rustix::thread::sched_setaffinity(None, &set).is_ok()
}

/// Let the calling thread run on every core again.
pub fn unpin() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut set = rustix::thread::CpuSet::new();
    for c in 0..cores {
        set.set(c);
    }
    let _ = rustix::thread::sched_setaffinity(None, &set);
}
