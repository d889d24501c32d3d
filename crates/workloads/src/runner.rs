//! Running tasks the way will-it-scale does: every task loops over its benchmark body and bumps
//! its own counter (one cache line each, written by that task only); the main thread reads all
//! counters once per interval and records the summed rate, throwing the first `warmup` samples
//! away. Tasks are pinned to core `i mod cores` and start together.
//!
//! A task that fails (out of memory, say) stops every task; its error is the run's result. A
//! stop request (Ctrl-C) ends the run after the current sample with what was measured, marked
//! interrupted.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

use crate::WorkloadError;
use crate::pin::pin_to_core;

/// How long to sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SampleSpec {
    /// Samples kept.
    pub samples: usize,
    /// Samples discarded first.
    pub warmup: usize,
    pub interval: Duration,
}

impl Default for SampleSpec {
    fn default() -> Self {
        SampleSpec {
            samples: 5,
            warmup: 1,
            interval: Duration::from_secs(1),
        }
    }
}

/// One task's operation counter.
pub type Counter = CachePadded<AtomicU64>;

/// Count one operation: a plain increment by the counter's only writer.
#[inline]
pub fn bump(c: &AtomicU64) {
    c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

/// What a continuous run measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Continuous {
    /// Operations per second, summed over tasks, one entry per kept sample.
    pub samples: Vec<f64>,
    /// Operations per task over the kept samples.
    pub per_task: Vec<u64>,
    pub interrupted: bool,
}

/// Hooks around the measured window (engine counters are reset and read there).
pub struct Hooks<'a> {
    pub measure_start: &'a mut dyn FnMut(),
    /// After every sample: `(done, total, kept)`, where `kept` is the sample's value, or `None`
    /// for a warm-up sample. The value is handed over the moment it exists so that a caller can
    /// store it at once: a run killed later keeps every sample taken before.
    pub sample: &'a mut dyn FnMut(usize, usize, Option<f64>),
}

/// Run `body` on each of `ctxs` (one task each) until `spec` is sampled or `stop` is set.
pub fn run_continuous<C, F>(
    ctxs: Vec<C>,
    spec: SampleSpec,
    stop: &AtomicBool,
    hooks: Hooks<'_>,
    body: F,
) -> Result<Continuous, WorkloadError>
where
    C: Send,
    F: Fn(&C, &AtomicU64, &AtomicBool) -> Result<(), WorkloadError> + Sync,
{
    let n = ctxs.len();
    let counters: Vec<Counter> = (0..n)
        .map(|_| CachePadded::new(AtomicU64::new(0)))
        .collect();
    let halt = AtomicBool::new(false);
    let failure: Mutex<Option<WorkloadError>> = Mutex::new(None);
    let start = Barrier::new(n + 1);
    let mut out = Continuous::default();
    std::thread::scope(|s| {
        for (i, ctx) in ctxs.into_iter().enumerate() {
            let (counters, halt, failure, start, body) =
                (&counters, &halt, &failure, &start, &body);
            s.spawn(move || {
                pin_to_core(i);
                start.wait();
                if let Err(e) = body(&ctx, &counters[i], halt) {
                    failure.lock().unwrap().get_or_insert(e);
                    halt.store(true, Ordering::Relaxed);
                }
                // `ctx` (a task) is dropped here, on its own thread.
            });
        }
        start.wait();
        out = sample_counters(
            n,
            &|i| counters[i].load(Ordering::Relaxed),
            &mut || halt.load(Ordering::Relaxed),
            spec,
            stop,
            hooks,
        );
        halt.store(true, Ordering::Relaxed);
    });
    if let Some(e) = failure.into_inner().unwrap() {
        return Err(e);
    }
    Ok(out)
}

/// The measuring side of a continuous run, shared by threads ([`run_continuous`]) and host
/// processes ([`crate::host_proc`]): sample the `n` counters (`read(i)` is task i's) once per
/// interval, calling `measure_start` when the warm-up is over and `sample` after every sample.
/// Ends early when `halted` says a task failed (what was sampled so far is returned; the
/// caller reports the failure) or when `stop` is set (marked interrupted).
pub(crate) fn sample_counters(
    n: usize,
    read: &dyn Fn(usize) -> u64,
    halted: &mut dyn FnMut() -> bool,
    spec: SampleSpec,
    stop: &AtomicBool,
    hooks: Hooks<'_>,
) -> Continuous {
    let Hooks {
        measure_start,
        sample,
    } = hooks;
    let mut out = Continuous::default();
    let total = || (0..n).map(read).sum::<u64>();
    let mut last = total();
    let mut at = Instant::now();
    let mut base: Vec<u64> = Vec::new();
    for i in 0..spec.warmup + spec.samples {
        if i == spec.warmup {
            measure_start();
            last = total();
            at = Instant::now();
            base = (0..n).map(read).collect();
        }
        let deadline = at + spec.interval;
        while Instant::now() < deadline {
            if halted() || stop.load(Ordering::Relaxed) {
                break;
            }
            std::thread::sleep((deadline - Instant::now()).min(Duration::from_millis(10)));
        }
        if halted() {
            break;
        }
        if stop.load(Ordering::Relaxed) {
            out.interrupted = true;
            break;
        }
        let now = Instant::now();
        let cur = total();
        let kept = (i >= spec.warmup).then(|| (cur - last) as f64 / (now - at).as_secs_f64());
        out.samples.extend(kept);
        last = cur;
        at = now;
        sample(i + 1, spec.warmup + spec.samples, kept);
    }
    if !base.is_empty() {
        out.per_task = base.iter().enumerate().map(|(i, b)| read(i) - b).collect();
    }
    out
}
