//! The host-kernel target run for real: will-it-scale's page-fault tests in processes mode
//! (forked children, `host_proc`) and threads mode (`runner::run_continuous` on `HostVm`s), and
//! pft in processes mode, with 1 and 2 tasks; then the failure paths of processes mode: a
//! child's error, a child killed by a signal, a panicking child, an interrupt. After every run
//! no child process may be left, running or as a zombie.
//!
//! The tests take a lock so they run one at a time: the children check reads every child of
//! this process, and the measurements should not compete for the cores either. Whatever a
//! failing test leaves behind is killed and reaped by its guard.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use pagelab_workloads::WorkloadError;
use pagelab_workloads::host::HostVm;
use pagelab_workloads::host_proc::{pft_processes, run_continuous_processes};
use pagelab_workloads::page_fault::{self, Variant};
use pagelab_workloads::pft::PftParams;
use pagelab_workloads::runner::{Continuous, Hooks, SampleSpec, run_continuous};
use rustix::process::{Pid, Signal, WaitOptions};

const MEMSIZE: u64 = 8 << 20;
const PAGE: u64 = 4096;

static SERIAL: Mutex<()> = Mutex::new(());

/// The pids of this process's children (zombies included), from every thread's list.
fn children() -> Vec<i32> {
    let mut out = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let path = task.expect("task entry").path().join("children");
        if let Ok(s) = std::fs::read_to_string(path) {
            out.extend(s.split_whitespace().map(|p| p.parse::<i32>().expect("pid")));
        }
    }
    out
}

/// Held for the whole test: runs tests one at a time, and on drop (a failed test included)
/// kills and reaps any child left.
struct Serial {
    _lock: MutexGuard<'static, ()>,
}

fn serial() -> Serial {
    let lock = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert_eq!(children(), Vec::<i32>::new(), "children before the test");
    Serial { _lock: lock }
}

impl Drop for Serial {
    fn drop(&mut self) {
        for p in children() {
            let pid = Pid::from_raw(p).expect("positive pid");
            let _ = rustix::process::kill_process(pid, Signal::KILL);
            let _ = rustix::process::waitpid(Some(pid), WaitOptions::empty());
        }
    }
}

fn assert_no_children(what: &str) {
    assert_eq!(children(), Vec::<i32>::new(), "{what}: children left");
}

fn spec() -> SampleSpec {
    SampleSpec {
        samples: 3,
        warmup: 1,
        interval: Duration::from_millis(100),
    }
}

/// Run `f` with counting hooks; returns its result and (measure_start calls, sample calls).
fn with_hooks<R>(f: impl FnOnce(Hooks<'_>) -> R) -> (R, usize, usize) {
    let (mut starts, mut samples) = (0, 0);
    let r = f(Hooks {
        measure_start: &mut || starts += 1,
        sample: &mut |_, _, _| samples += 1,
    });
    (r, starts, samples)
}

fn check_full(what: &str, r: Result<Continuous, WorkloadError>, n: usize, hooks: (usize, usize)) {
    let c = r.unwrap_or_else(|e| panic!("{what}: {e}"));
    let s = spec();
    assert!(!c.interrupted, "{what}: interrupted");
    assert_eq!(c.samples.len(), s.samples, "{what}: samples");
    assert!(
        c.samples.iter().all(|&x| x > 0.0),
        "{what}: {:?}",
        c.samples
    );
    assert_eq!(c.per_task.len(), n, "{what}: per_task");
    assert!(
        c.per_task.iter().all(|&x| x > 0),
        "{what}: {:?}",
        c.per_task
    );
    assert_eq!(hooks, (1, s.warmup + s.samples), "{what}: hook calls");
    eprintln!(
        "{what}: {:.0} faults/s ({:?})",
        c.samples.iter().sum::<f64>() / c.samples.len() as f64,
        c.per_task
    );
}

fn processes(variant: Variant, n: usize) -> (Result<Continuous, WorkloadError>, usize, usize) {
    let stop = AtomicBool::new(false);
    with_hooks(|hooks| {
        run_continuous_processes(n, spec(), &stop, hooks, |vm, c, halt| {
            page_fault::task_loop(vm, variant, MEMSIZE, c, halt)
        })
    })
}

#[test]
fn page_fault1_processes_1_and_2() {
    let _s = serial();
    for n in [1, 2] {
        let what = format!("page_fault1 processes x{n}");
        let (r, a, b) = processes(Variant::Anon, n);
        assert_no_children(&what);
        check_full(&what, r, n, (a, b));
    }
}

#[test]
fn page_fault1_threads_1_and_2() {
    let _s = serial();
    for n in [1, 2] {
        let stop = AtomicBool::new(false);
        let vms = HostVm::threads(n);
        let (r, a, b) = with_hooks(|hooks| {
            run_continuous(vms, spec(), &stop, hooks, |vm, c, halt| {
                page_fault::task_loop(vm, Variant::Anon, MEMSIZE, c, halt)
            })
        });
        check_full(&format!("page_fault1 threads x{n}"), r, n, (a, b));
    }
}

#[test]
fn page_fault2_and_3_processes_2() {
    let _s = serial();
    for (name, v) in [
        ("page_fault2", Variant::PrivateFile),
        ("page_fault3", Variant::SharedFile),
    ] {
        let what = format!("{name} processes x2");
        let (r, a, b) = processes(v, 2);
        assert_no_children(&what);
        check_full(&what, r, 2, (a, b));
    }
}

#[test]
fn pft_processes_1_and_2() {
    let _s = serial();
    let params = PftParams {
        bytes: 64 << 20,
        repetitions: 3,
        vma_per_task: true,
    };
    for n in [1usize, 2] {
        let stop = AtomicBool::new(false);
        let mut calls = Vec::new();
        let (reps, interrupted) = pft_processes(n, params, &stop, &mut |i, of, r| {
            calls.push((i, of, r.wall_ns))
        })
        .unwrap_or_else(|e| panic!("pft x{n}: {e}"));
        assert_no_children(&format!("pft x{n}"));
        assert!(!interrupted);
        // Each repetition is handed over as it is measured, the same as returned.
        let wall: Vec<u64> = reps.iter().map(|r| r.wall_ns).collect();
        assert_eq!(
            calls,
            vec![(1, 3, wall[0]), (2, 3, wall[1]), (3, 3, wall[2])]
        );
        assert_eq!(reps.len(), 3);
        for r in &reps {
            assert_eq!(r.tasks.len(), n);
            assert_eq!(r.faults(), params.bytes / PAGE, "pft x{n}: {r:?}");
            for t in &r.tasks {
                assert_eq!(t.faults, params.bytes / PAGE / n as u64, "pft x{n}: {r:?}");
                assert!(t.cpu_ns > 0, "pft x{n}: {r:?}");
                assert!(t.sys_ns.is_some(), "pft x{n}: {r:?}");
            }
            assert!(r.wall_ns > 0, "pft x{n}: {r:?}");
            assert!(r.sys_s().is_some() && r.user_s().is_some());
        }
        eprintln!(
            "pft processes x{n}: {:.0} faults/cpu-s, {:.0} faults/s",
            reps.iter().map(|r| r.faults_per_cpu()).sum::<f64>() / 3.0,
            reps.iter().map(|r| r.faults_per_sec()).sum::<f64>() / 3.0
        );
    }
}

/// pft and Lameter's test in threads mode: with one VMA, every thread stores into the region
/// the first one mapped; with one VMA per thread, each into its own.
#[test]
fn pft_threads_one_vma_and_vma_per_thread_1_and_2() {
    let _s = serial();
    for vma_per_task in [false, true] {
        let params = PftParams {
            bytes: 64 << 20,
            repetitions: 3,
            vma_per_task,
        };
        for n in [1usize, 2] {
            let what = format!("pft threads x{n} vma_per_task={vma_per_task}");
            let stop = AtomicBool::new(false);
            let (reps, interrupted) = pagelab_workloads::pft::run(
                HostVm::threads(n),
                true,
                params,
                &stop,
                &mut |_, _, _| {},
            )
            .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert!(!interrupted);
            assert_eq!(reps.len(), 3, "{what}");
            for r in &reps {
                assert_eq!(r.faults(), params.bytes / PAGE, "{what}: {r:?}");
                assert!(
                    r.tasks
                        .iter()
                        .all(|t| t.faults == params.bytes / PAGE / n as u64)
                );
                assert!(r.wall_ns > 0 && r.sys_s().is_some(), "{what}: {r:?}");
            }
        }
    }
}

#[test]
fn pft_processes_interrupted() {
    let _s = serial();
    let params = PftParams {
        bytes: 16 << 20,
        repetitions: 5,
        vma_per_task: true,
    };
    let stop = AtomicBool::new(false);
    let (reps, interrupted) = pft_processes(2, params, &stop, &mut |i, _, _| {
        if i == 1 {
            stop.store(true, Ordering::Relaxed);
        }
    })
    .expect("pft");
    assert_no_children("pft interrupted");
    assert!(interrupted);
    assert_eq!(reps.len(), 1);
}

/// A marker file: the first child to create it is the one that misbehaves. The path is made in
/// the parent (reading `TMPDIR` takes a lock the child must not touch).
struct Claim(PathBuf);

impl Claim {
    fn new(name: &str) -> Claim {
        let p = std::env::temp_dir().join(format!("pagelab-claim-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        Claim(p)
    }

    /// True in exactly one child.
    fn take(&self) -> bool {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&self.0)
            .is_ok()
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Two children: one misbehaves with `bad` 150 ms in, the other runs page_fault1.
fn one_bad_child(
    name: &str,
    bad: impl Fn() -> Result<(), WorkloadError>,
) -> Result<Continuous, WorkloadError> {
    let claim = Claim::new(name);
    let stop = AtomicBool::new(false);
    let spec = SampleSpec {
        samples: 20,
        ..spec()
    };
    let r = run_continuous_processes(
        2,
        spec,
        &stop,
        Hooks {
            measure_start: &mut || {},
            sample: &mut |_, _, _| {},
        },
        |vm, c: &AtomicU64, halt| {
            if claim.take() {
                std::thread::sleep(Duration::from_millis(150));
                bad()
            } else {
                page_fault::task_loop(vm, Variant::Anon, MEMSIZE, c, halt)
            }
        },
    );
    assert_no_children(name);
    r
}

#[test]
fn a_childs_error_is_the_runs_error() {
    let _s = serial();
    let r = one_bad_child("error", || {
        Err(WorkloadError::OutOfMemory("injected by the test".into()))
    });
    assert_eq!(
        r,
        Err(WorkloadError::OutOfMemory("injected by the test".into()))
    );
}

#[test]
fn a_child_killed_by_a_signal_is_an_error() {
    let _s = serial();
    let r = one_bad_child("signal", || {
        let _ = rustix::process::kill_process(rustix::process::getpid(), Signal::KILL);
        Ok(())
    });
    match r {
        Err(WorkloadError::Host(m)) => {
            assert!(
                m.starts_with("task ") && m.ends_with(" killed by signal 9"),
                "{m}"
            )
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_panicking_child_is_an_error() {
    let _s = serial();
    let r = one_bad_child("panic", || panic!("boom"));
    match r {
        Err(WorkloadError::Host(m)) => {
            assert!(
                m.starts_with("task ") && m.ends_with(" panicked: boom"),
                "{m}"
            )
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn stop_after_the_first_sample() {
    let _s = serial();
    let stop = AtomicBool::new(false);
    let spec = SampleSpec {
        samples: 5,
        ..spec()
    };
    let mut samples = 0;
    let r = run_continuous_processes(
        2,
        spec,
        &stop,
        Hooks {
            measure_start: &mut || {},
            sample: &mut |i, _, _| {
                samples += 1;
                // Sample 1 is the warm-up; stop once the first kept sample is in.
                if i == 2 {
                    stop.store(true, Ordering::Relaxed);
                }
            },
        },
        |vm, c, halt| page_fault::task_loop(vm, Variant::Anon, MEMSIZE, c, halt),
    )
    .expect("run");
    assert_no_children("stop");
    assert!(r.interrupted);
    assert_eq!(r.samples.len(), 1);
    assert_eq!(samples, 2);
    assert_eq!(r.per_task.len(), 2);
}

#[test]
fn no_tasks_is_a_config_error() {
    let _s = serial();
    let stop = AtomicBool::new(false);
    let r = run_continuous_processes(
        0,
        spec(),
        &stop,
        Hooks {
            measure_start: &mut || {},
            sample: &mut |_, _, _| {},
        },
        |_, _, _| Ok(()),
    );
    assert!(matches!(r, Err(WorkloadError::Config(_))));
    let params = PftParams {
        bytes: 1 << 20,
        repetitions: 1,
        vma_per_task: true,
    };
    let r = pft_processes(0, params, &stop, &mut |_, _, _| {});
    assert!(matches!(r, Err(WorkloadError::Config(_))));
}
