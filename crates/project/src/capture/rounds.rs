//! Capturing the research designs' benchmarks: RadixVM's mapbench (both forms) and CortenMM's
//! `mmap`, `mmap-pf`, `pf` and `munmap` tests in their low- and high-contention forms.
//!
//! - mapbench (local) is a will-it-scale loop: each iteration maps a region of its own, writes
//!   its page and unmaps it. It is captured as page_fault1 is, in windows of whole iterations
//!   cut after each unmap ([`super::Ctl::cycle_boundary`]); an iteration is one operation (its
//!   one store, with the default region of one page).
//! - The others run in rounds ([`pagelab_workloads::rounds`]): an untimed preparation (task 0
//!   maps the round's region; `munmap` faults in what it will unmap), a timed part (the
//!   requests), an untimed teardown. As the workload itself times only the requests, only they
//!   are recorded: each round's timed part is one segment, and a window is the segments of
//!   several rounds laid end to end ([`Segments`]), their time stamps shifted so that each
//!   segment starts where the one before ended. The trace is then whole rounds' requests, which
//!   replay cycles through like an iteration loop; its operations are the requests (the value
//!   the timed part returns), so a replayed CPU's rate is the workload's own `ops/sec` per task.
//!
//! What a replayed CPU shares with the others follows the workload's layout
//! ([`shares_vma`]): the tests whose tasks work in one VMA (mapbench-shared, `pf`, `munmap`
//! and the high-contention `mmap` forms, which map over one region) share its `vma`-scoped
//! instances (the per-VMA lock, and the page-table node locks of the range-locked profile).
//! The high-contention forms are captured with two tasks ([`tasks`]), so that task 0's
//! shuffled requests fall in another task's slot too and the split PTE locks it shares are
//! recorded as shared, as a companion does for pft; so is mapbench-shared, whose tasks fault
//! and unmap one region (its tables' locks, and range-vm's shard reverse-map lock taken by
//! whichever task's munmap frees the region's table, are then recorded as shared).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pagelab_bench::run::{Sizes, cortenmm_params};
use pagelab_sync::trace::{self as raw, Event, Kind};
use pagelab_workloads::cortenmm::{Contention, Corten, Op};
use pagelab_workloads::mapbench;
use pagelab_workloads::rounds::{RoundBody, RoundCtx, run_rounds};
use pagelab_workloads::runner::{Hooks, SampleSpec};
use pagelab_workloads::vm::Vm;
use pagelab_workloads::{WorkloadError, WorkloadKind, pft};

use super::{Ctl, ROUNDS, TracedVm, WindowCheck, recorded};
use crate::error::CaptureError;

/// Recording buffer room per operation (events): a mapbench iteration is an mmap, a fault and
/// a munmap with its TLB flush; a CortenMM request is at most a MAP_FIXED (an unmap and a map).
pub const EVENTS_PER_OP: usize = 256;

/// Operations a window holds per capture cycle (`CaptureSpec::cycles`): a window of the default
/// two cycles is 4096 mapbench iterations or 64 CortenMM rounds of 32 requests.
const OPS_PER_CYCLE: usize = 2048;

/// Whether the projector captures `w` here.
pub fn is_research(w: WorkloadKind) -> bool {
    matches!(w, WorkloadKind::Mapbench) || is_rounds(w)
}

/// Whether `w` runs in rounds (recorded segment by segment).
pub fn is_rounds(w: WorkloadKind) -> bool {
    w == WorkloadKind::MapbenchShared || w.cortenmm().is_some()
}

/// Whether the tasks of `w` work in one VMA (see the module documentation).
pub fn shares_vma(w: WorkloadKind) -> bool {
    match w.cortenmm() {
        Some((op, contention)) => {
            matches!(op, Op::Pf | Op::Munmap) || contention == Contention::High
        }
        None => w == WorkloadKind::MapbenchShared,
    }
}

/// Tasks of the capture: at least two for the high-contention forms, whose requests are
/// shuffled over the tasks' slots (one task alone would only ever work in its own), and for
/// mapbench-shared, whose tasks fault and unmap one region (one task alone shares no table,
/// node or shard lock with anybody).
pub fn tasks(w: WorkloadKind, asked: usize) -> usize {
    match w.cortenmm() {
        Some((_, Contention::High)) => asked.max(2),
        None if w == WorkloadKind::MapbenchShared => asked.max(2),
        _ => asked,
    }
}

/// What an operation of `w`'s trace is.
pub fn op_unit(w: WorkloadKind) -> &'static str {
    if is_research(w) { "ops" } else { "faults" }
}

/// Operations a window of `cycles` capture cycles holds.
pub fn window_ops(w: WorkloadKind, cycles: usize) -> usize {
    if is_research(w) {
        cycles.max(1) * OPS_PER_CYCLE
    } else {
        cycles
    }
}

/// What [`super::Ctl`] counts as a cycle: mapbench iterations for mapbench (each one
/// operation), rounds for the round-based tests (one operation each for mapbench-shared,
/// its requests for a CortenMM test), the given cycles for the rest.
pub fn cycles(w: WorkloadKind, cycles: usize) -> usize {
    if w == WorkloadKind::Mapbench {
        window_ops(w, cycles)
    } else if w == WorkloadKind::MapbenchShared {
        // One operation a round: the task's iteration.
        window_ops(w, cycles)
    } else if is_rounds(w) {
        (window_ops(w, cycles) / Sizes::default().requests as usize).max(1)
    } else {
        cycles
    }
}

/// Runs `w` on `vms` (task 0 traced) until `ctl` has every window it needs.
pub(super) fn run<V: Vm + Send>(
    w: WorkloadKind,
    ctl: &Ctl,
    vms: Vec<TracedVm<V>>,
) -> Result<(), CaptureError> {
    if w == WorkloadKind::Mapbench {
        let counter = AtomicU64::new(0);
        let stop = &ctl.stop;
        let counter = &counter;
        return std::thread::scope(|s| {
            let hs: Vec<_> = vms
                .into_iter()
                .enumerate()
                .map(|(i, vm)| {
                    s.spawn(move || {
                        pagelab_workloads::pin::pin_to_core(i);
                        let r = mapbench::local_loop(&vm, mapbench::PAGES, counter, stop);
                        // Whatever task 0 met, the others stop with it.
                        if i == 0 {
                            stop.store(true, Ordering::Relaxed);
                        }
                        r
                    })
                })
                .collect();
            for h in hs {
                h.join()
                    .map_err(|_| CaptureError::Incomplete("a mapbench task panicked"))?
                    .map_err(CaptureError::Workload)?;
            }
            Ok(())
        });
    }
    let seg = Segments::new(ctl);
    let spec = SampleSpec {
        samples: usize::MAX / 2,
        warmup: 0,
        interval: Duration::from_secs(3600),
    };
    let hooks = Hooks {
        measure_start: &mut || {},
        sample: &mut |_, _, _| {},
    };
    let r = if w == WorkloadKind::MapbenchShared {
        let body = Recorder {
            inner: mapbench::Shared {
                pages: mapbench::PAGES,
            },
            seg: &seg,
        };
        run_rounds(vms, spec, &ctl.stop, hooks, &body)
    } else {
        let p = cortenmm_params(w, Sizes::default())
            .ok_or_else(|| CaptureError::Unsupported(format!("{w} is not a CortenMM test")))?;
        let n = vms.len();
        Corten::new(p, n).and_then(|inner| {
            let body = Recorder { inner, seg: &seg };
            run_rounds(vms, spec, &ctl.stop, hooks, &body)
        })
    };
    r.map_err(CaptureError::Workload)?;
    Ok(())
}

/// A round body whose task 0 records its timed parts through [`Segments`].
struct Recorder<'a, B> {
    inner: B,
    seg: &'a Segments<'a>,
}

impl<V: Vm, B: RoundBody<V>> RoundBody<V> for Recorder<'_, B> {
    fn start(&self, i: usize, vm: &V, ctx: &RoundCtx) -> Result<(), WorkloadError> {
        self.inner.start(i, vm, ctx)
    }

    fn prepare(&self, i: usize, vm: &V, ctx: &RoundCtx) -> Result<(), WorkloadError> {
        self.inner.prepare(i, vm, ctx)
    }

    fn timed(&self, i: usize, vm: &V, ctx: &RoundCtx) -> Result<Option<u64>, WorkloadError> {
        if i != 0 {
            return self.inner.timed(i, vm, ctx);
        }
        self.seg.begin();
        let r = self.inner.timed(i, vm, ctx);
        self.seg.end(match &r {
            Ok(Some(n)) => Some(*n),
            _ => None,
        });
        r
    }

    fn teardown(&self, i: usize, vm: &V, ctx: &RoundCtx) -> Result<(), WorkloadError> {
        self.inner.teardown(i, vm, ctx)
    }

    fn finish(&self, i: usize, vm: &V, ctx: &RoundCtx) -> Result<(), WorkloadError> {
        self.inner.finish(i, vm, ctx)
    }
}

/// The window under way: its segments' events laid end to end, and its times.
#[derive(Default)]
struct Open {
    events: Vec<Event>,
    /// Time stamp ([`raw::now`]) at which the last segment ended.
    end: u64,
    /// Summed wall and thread CPU time of its segments, ns.
    wall: f64,
    cpu: f64,
    segments: usize,
}

/// Task 0's rounds cut into windows of `ctl.cycles` rounds after one warm-up round: untraced
/// and recorded windows in turns, then one per fallback class, as [`super::Ctl`] does for a
/// continuous loop, but with only each round's timed part inside.
struct Segments<'a> {
    ctl: &'a Ctl,
    rounds: AtomicUsize,
    open: Mutex<Open>,
    /// This segment's start: wall clock, thread CPU time, time stamp.
    began: Mutex<Option<(Instant, u64, u64)>>,
}

impl<'a> Segments<'a> {
    fn new(ctl: &'a Ctl) -> Self {
        Segments {
            ctl,
            rounds: AtomicUsize::new(0),
            open: Mutex::new(Open::default()),
            began: Mutex::new(None),
        }
    }

    /// The window round `r` belongs to (`None`: warm-up).
    fn window(&self, r: usize) -> Option<usize> {
        r.checked_sub(self.ctl.warmup).map(|k| k / self.ctl.cycles)
    }

    fn begin(&self) {
        let r = self.rounds.load(Ordering::Relaxed);
        let Some(w) = self.window(r) else {
            // The warm-up round: timed by nobody, counted by `end`.
            *self.began.lock().unwrap() = Some((Instant::now(), 0, 0));
            return;
        };
        if w >= self.ctl.windows() {
            self.ctl.stop.store(true, Ordering::Relaxed);
            return;
        }
        let fallback = w
            .checked_sub(2 * ROUNDS)
            .and_then(|j| self.ctl.fallback_classes.get(j).copied());
        if let Some(class) = fallback {
            raw::force_trylock_failure(Some(class));
        }
        let tracing = fallback.is_some() || recorded(w);
        if tracing {
            if recorded(w) {
                let mut o = self.ctl.overhead.lock().unwrap();
                if o.is_none() {
                    *o = Some(raw::measure_overhead());
                }
            }
            // Room for one round's requests: the buffer is made resident here, outside the
            // segment.
            raw::start(self.ctl.capacity / self.ctl.cycles);
        }
        *self.began.lock().unwrap() = Some((Instant::now(), pft::thread_cpu_ns(), raw::now()));
    }

    /// The timed part ended with `ops` operations (`None`: it was cut short by the run's end,
    /// and is dropped).
    fn end(&self, ops: Option<u64>) {
        let Some((t0, c0, ts0)) = self.began.lock().unwrap().take() else {
            return;
        };
        let r = self.rounds.fetch_add(1, Ordering::Relaxed);
        let Some(w) = self.window(r) else { return };
        if let Some(n) = ops
            && raw::active()
        {
            raw::ops(n as u32);
        }
        let ts1 = raw::now();
        let wall = t0.elapsed().as_nanos() as f64;
        let cpu = pft::thread_cpu_ns().saturating_sub(c0) as f64;
        let fallback = w >= 2 * ROUNDS;
        let events = if fallback || recorded(w) {
            raw::stop()
        } else {
            Vec::new()
        };
        if fallback {
            raw::force_trylock_failure(None);
        }
        let Some(_) = ops else { return };
        let mut open = self.open.lock().unwrap();
        // Shift the segment so that it starts where the last one ended: the untimed part of the
        // round between them is not the workload's, and replay must not see it as compute.
        let shift = if open.segments == 0 {
            0
        } else {
            ts0.saturating_sub(open.end)
        };
        open.events.extend(events.into_iter().map(|mut e| {
            e.t = e.t.saturating_sub(shift);
            if let Kind::Write { bytes, end } = e.kind {
                e.kind = Kind::Write {
                    bytes,
                    end: end.saturating_sub(shift),
                };
            }
            e
        }));
        open.end = ts1.saturating_sub(shift);
        open.wall += wall;
        open.cpu += cpu;
        open.segments += 1;
        if open.segments < self.ctl.cycles {
            return;
        }
        let done = std::mem::take(&mut *open);
        drop(open);
        // Rounds keep their fixed order (no retakes): the guard only looks for stalls in the
        // segments laid end to end, and the trace reports what it found.
        let check = WindowCheck::of(&done.events, None);
        if fallback || recorded(w) {
            // No scheduler account is read here: the trace says so, rather than report its
            // zeros as measured.
            let mut plan = self.ctl.plan.lock().unwrap();
            plan.guard.windows += 1;
            plan.guard.unaccounted = true;
        }
        if fallback {
            self.ctl
                .fallbacks
                .lock()
                .unwrap()
                .push((done.events, check));
        } else if !recorded(w) {
            self.ctl.untraced.lock().unwrap().push(super::Untimed {
                cpu: done.cpu,
                writes: None,
                unmaps: None,
                holds: Vec::new(),
            });
        } else {
            let lost = (done.wall - done.cpu).max(0.0);
            self.ctl
                .offer_recorded(check.disturbed(), lost, done.cpu, done.events, check);
        }
        if w + 1 >= self.ctl.windows() {
            self.ctl.stop.store(true, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_research_workload_has_a_shape() {
        for w in WorkloadKind::ALL {
            if is_research(w) {
                assert_eq!(op_unit(w), "ops");
                assert!(super::super::shape(w).is_ok(), "{w}");
            }
        }
        assert!(shares_vma(WorkloadKind::CortenmmPfLow));
        assert!(!shares_vma(WorkloadKind::CortenmmMmap));
        assert!(shares_vma(WorkloadKind::CortenmmMmapHigh));
        assert!(!shares_vma(WorkloadKind::Mapbench));
        assert_eq!(tasks(WorkloadKind::CortenmmPfHigh, 1), 2);
        assert_eq!(tasks(WorkloadKind::CortenmmPfLow, 1), 1);
    }
}
