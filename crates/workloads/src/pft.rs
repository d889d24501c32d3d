//! Parallel fault tests: mmtests `pft` and Christoph Lameter's 2005 test it grew from.
//!
//! Per repetition a region of `bytes` is mapped, all tasks start together and each writes one
//! word in every page of its slice, and the run records each task's CPU time (and, where the
//! target can tell, its system time) and the wall time until the last task is done; then the
//! region is unmapped. Threads share one VMA sliced between them (`pft`), or each thread maps
//! its own VMA (`pft` with one VMA per thread); processes always map their own.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::Instant;

use crate::WorkloadError;
use crate::pin::pin_to_core;
use crate::vm::Vm;

const PAGE: u64 = 4096;

/// What to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PftParams {
    /// Total bytes faulted per repetition (split between tasks).
    pub bytes: u64,
    pub repetitions: usize,
    /// Each task maps its own region (always true for processes).
    pub vma_per_task: bool,
}

/// One task's share of one repetition.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TaskTimes {
    pub faults: u64,
    /// CPU time of the task's thread.
    pub cpu_ns: u64,
    /// System time, where known (host: getrusage; engine: time in the fault path).
    pub sys_ns: Option<u64>,
}

/// One repetition.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Repetition {
    pub tasks: Vec<TaskTimes>,
    pub wall_ns: u64,
}

impl Repetition {
    pub fn faults(&self) -> u64 {
        self.tasks.iter().map(|t| t.faults).sum()
    }

    pub fn cpu_s(&self) -> f64 {
        self.tasks.iter().map(|t| t.cpu_ns).sum::<u64>() as f64 / 1e9
    }

    pub fn wall_s(&self) -> f64 {
        self.wall_ns as f64 / 1e9
    }

    /// pft's `flt/cpu/s`: faults per CPU-second (mmtests "faults/cpu").
    pub fn faults_per_cpu(&self) -> f64 {
        self.faults() as f64 / self.cpu_s()
    }

    /// pft's `fault/wsec`: faults per wall-clock second (mmtests "faults/sec").
    pub fn faults_per_sec(&self) -> f64 {
        self.faults() as f64 / self.wall_s()
    }

    /// Summed system time, if every task knew it.
    pub fn sys_s(&self) -> Option<f64> {
        let mut s = 0;
        for t in &self.tasks {
            s += t.sys_ns?;
        }
        Some(s as f64 / 1e9)
    }

    /// Summed user time: CPU time less system time.
    pub fn user_s(&self) -> Option<f64> {
        self.sys_s().map(|sys| (self.cpu_s() - sys).max(0.0))
    }
}

/// CPU time of the calling thread.
pub fn thread_cpu_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// When one task started and finished faulting in one repetition.
type Span = (Instant, Instant);

/// Nanoseconds from the first task's start to the last one's end (0 if none ran).
fn span_ns(spans: &[Option<Span>]) -> u64 {
    let first = spans.iter().flatten().map(|s| s.0).min();
    let last = spans.iter().flatten().map(|s| s.1).max();
    match (first, last) {
        (Some(a), Some(b)) => b.saturating_duration_since(a).as_nanos() as u64,
        _ => 0,
    }
}

/// Run `params.repetitions` repetitions with one task per context. `shared_mm` says the
/// contexts are threads of one address space (so a single VMA can be shared).
/// `progress(done, total, rep)` gets each repetition kept, as soon as it is measured.
pub fn run<V: Vm + Send>(
    ctxs: Vec<V>,
    shared_mm: bool,
    params: PftParams,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(usize, usize, &Repetition),
) -> Result<(Vec<Repetition>, bool), WorkloadError> {
    let n = ctxs.len() as u64;
    if n == 0 {
        return Err(WorkloadError::Config("no tasks".into()));
    }
    let per_task = (params.bytes / n / PAGE).max(1) * PAGE;
    let one_vma = shared_mm && !params.vma_per_task;
    let start = Barrier::new(n as usize + 1);
    let done = Barrier::new(n as usize + 1);
    let region = AtomicU64::new(0);
    let halt = AtomicBool::new(false);
    let failure: Mutex<Option<WorkloadError>> = Mutex::new(None);
    let results: Mutex<Vec<Vec<TaskTimes>>> =
        Mutex::new(vec![
            vec![TaskTimes::default(); n as usize];
            params.repetitions
        ]);
    // Each task's (start, end) of faulting, per repetition: the wall time is taken from the
    // tasks' own clocks, as `host_proc::pft_processes` takes it, not from the coordinating
    // thread, which a loaded host may run late after the start barrier (a repetition then
    // measured a fraction of its faulting: 1.1 G faults/s once, on a 2-vCPU guest).
    let spans: Mutex<Vec<Vec<Option<Span>>>> =
        Mutex::new(vec![vec![None; n as usize]; params.repetitions]);
    let mut reps = Vec::new();
    let mut interrupted = false;
    std::thread::scope(|s| {
        for (i, vm) in ctxs.into_iter().enumerate() {
            let (start, done, region, halt, failure, results, spans) =
                (&start, &done, &region, &halt, &failure, &results, &spans);
            s.spawn(move || {
                pin_to_core(i);
                for rep in 0..params.repetitions {
                    // Task 0 maps the shared region before the start barrier.
                    let fail = |e: WorkloadError| {
                        failure.lock().unwrap().get_or_insert(e);
                        halt.store(true, Ordering::Relaxed);
                    };
                    let mut own = None;
                    if one_vma && i == 0 && !halt.load(Ordering::Relaxed) {
                        match vm.mmap_anon(per_task * n) {
                            Ok(a) => region.store(a, Ordering::Release),
                            Err(e) => fail(e),
                        }
                    }
                    if !one_vma && !halt.load(Ordering::Relaxed) {
                        match vm.mmap_anon(per_task) {
                            Ok(a) => own = Some(a),
                            Err(e) => fail(e),
                        }
                    }
                    let wait = |b: &Barrier| {
                        vm.idle();
                        b.wait();
                        vm.resume();
                    };
                    wait(start);
                    let mut t = TaskTimes::default();
                    if !halt.load(Ordering::Relaxed) {
                        let base = if one_vma {
                            region.load(Ordering::Acquire) + i as u64 * per_task
                        } else {
                            own.unwrap_or(0)
                        };
                        let t0 = Instant::now();
                        let c0 = thread_cpu_ns();
                        let s0 = vm.fault_ns();
                        let mut off = 0;
                        while off < per_task {
                            if let Err(e) = vm.store(base + off) {
                                fail(e);
                                break;
                            }
                            t.faults += 1;
                            off += PAGE;
                        }
                        t.cpu_ns = thread_cpu_ns() - c0;
                        t.sys_ns = match (s0, vm.fault_ns()) {
                            (Some(a), Some(b)) => Some(b - a),
                            _ => None,
                        };
                        spans.lock().unwrap()[rep][i] = Some((t0, Instant::now()));
                    }
                    results.lock().unwrap()[rep][i] = t;
                    wait(done);
                    // Unmap after the timed section (pft times faulting only).
                    if let Some(a) = own {
                        let _ = vm.munmap(a, per_task);
                    }
                    wait(done);
                    if one_vma && i == 0 {
                        let a = region.load(Ordering::Acquire);
                        if a != 0 {
                            let _ = vm.munmap(a, per_task * n);
                        }
                    }
                    wait(start);
                }
            });
        }
        for rep in 0..params.repetitions {
            start.wait();
            done.wait();
            let wall = span_ns(&spans.lock().unwrap()[rep]);
            done.wait();
            start.wait();
            if halt.load(Ordering::Relaxed) {
                // Let the tasks run out their remaining repetitions as no-ops.
                continue;
            }
            if stop.load(Ordering::Relaxed) {
                interrupted = true;
                halt.store(true, Ordering::Relaxed);
            }
            let r = Repetition {
                tasks: results.lock().unwrap()[rep].clone(),
                wall_ns: wall,
            };
            progress(rep + 1, params.repetitions, &r);
            reps.push(r);
        }
    });
    if let Some(e) = failure.into_inner().unwrap() {
        return Err(e);
    }
    Ok((reps, interrupted))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// The wall time spans the first task's start to the last one's end, whichever tasks those
    /// are; tasks that did not run are left out.
    #[test]
    fn the_wall_time_spans_the_tasks_own_clocks() {
        let t = Instant::now();
        let ms = |n| t + Duration::from_millis(n);
        let spans = [Some((ms(3), ms(10))), None, Some((ms(1), ms(7)))];
        assert_eq!(span_ns(&spans), 9_000_000);
        assert_eq!(span_ns(&[None, None]), 0);
    }

    /// Each task's faulting lies inside its repetition's wall time, so no task's CPU time can
    /// exceed it (beyond the two clocks' rates, which differ by about 1% on a virtual machine).
    /// Timed by the coordinating thread after the start barrier, a repetition could measure less
    /// than its tasks spent when that thread ran late on a loaded host.
    #[test]
    fn a_repetition_lasts_at_least_as_long_as_each_task_faulted() {
        let k = crate::engine::boot(&pagelab_mm::Policy::default(), 48 << 20, 2).unwrap();
        let (_run, vms) = crate::engine::tasks(&k, 2, crate::Mode::Threads, false).unwrap();
        let params = PftParams {
            bytes: 16 << 20,
            repetitions: 3,
            vma_per_task: false,
        };
        let stop = AtomicBool::new(false);
        let (reps, _) = run(vms, true, params, &stop, &mut |_, _, _| {}).unwrap();
        for r in &reps {
            let longest = r.tasks.iter().map(|t| t.cpu_ns).max().unwrap();
            assert!(longest > 0, "{r:?}");
            assert!(r.wall_ns as f64 * 1.02 >= longest as f64, "{r:?}");
        }
    }
}
