//! Rounds: the shape of the research designs' microbenchmarks (CortenMM's `s_*` tests, RadixVM's
//! mapbench in its shared form). Every round, the tasks prepare (untimed: map a region, fault
//! it in), start together, each runs its timed operations, and meet again; then they tear the
//! round down (untimed). What is kept is the rate of the timed part only, as CortenMM computes
//! it: each task times its own part (from leaving the start barrier to its last operation), the
//! mean time per operation is the summed task time over the summed operations, and the rate is
//! the task count over that mean: `tasks * ops / task_ns`, the throughput of `tasks` tasks each
//! doing operations back to back at the measured latency. A sample pools the rounds that ended
//! within one sampling interval. (Timing the round from the first start to the last end
//! instead would add the tasks' wake-up skew at the barrier, which on a loaded host is a
//! scheduler time slice, to every round of a few microseconds.)
//!
//! This is how CortenMM measures: its harness forks a fresh process per run, starts all threads
//! at a barrier, and times only the 32 requests of each thread, so that setting up (mapping and
//! pre-faulting the region a `munmap` test unmaps) does not count. A continuous rate like
//! will-it-scale's would mostly measure the setup.
//!
//! The tasks meet at a barrier that gives up when the run halts (the sampler is done, or a task
//! failed), so no task waits forever for one that has left. Before a task tears down what
//! others may still use, every task passes a last barrier that never gives up: by then each has
//! left its loop, so nobody stores into a region being unmapped.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

use crate::WorkloadError;
use crate::pin::pin_to_core;
use crate::runner::{Hooks, SampleSpec};
use crate::vm::Vm;

/// A barrier for `n` tasks that gives up when `halt` or `abort` is set: spin briefly, then
/// yield (more tasks than cores is the normal case on a small host).
pub struct HaltableBarrier {
    n: u32,
    arrived: CachePadded<AtomicU32>,
    generation: CachePadded<AtomicU32>,
}

impl HaltableBarrier {
    pub fn new(n: usize) -> HaltableBarrier {
        HaltableBarrier {
            n: n as u32,
            arrived: CachePadded::new(AtomicU32::new(0)),
            generation: CachePadded::new(AtomicU32::new(0)),
        }
    }

    /// Wait for all `n`; false (without waiting further) once `give_up` says so.
    pub fn wait(&self, give_up: &dyn Fn() -> bool) -> bool {
        if give_up() {
            return false;
        }
        // Read the generation before arriving: it cannot move until we have.
        let generation = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.n {
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::Release);
            return true;
        }
        let mut spins = 0u32;
        while self.generation.load(Ordering::Acquire) == generation {
            if give_up() {
                return false;
            }
            if spins < 64 {
                std::hint::spin_loop();
                spins += 1;
            } else {
                std::thread::yield_now();
            }
        }
        true
    }
}

/// What the tasks of a round share.
pub struct RoundCtx {
    pub n: usize,
    barrier: HaltableBarrier,
    halt: AtomicBool,
    abort: AtomicBool,
    /// A region mapped by task 0 for everyone (0: none).
    pub region: AtomicU64,
}

impl RoundCtx {
    fn give_up(&self) -> bool {
        self.halt.load(Ordering::Relaxed) || self.abort.load(Ordering::Relaxed)
    }

    /// Meet the other tasks. The task stops running its address space while it waits (the
    /// kernel's lazy TLB mode), so shootdowns need not wait for it. False: the run is ending;
    /// leave the round.
    pub fn meet<V: Vm>(&self, vm: &V) -> bool {
        vm.idle();
        let ok = self.barrier.wait(&|| self.give_up());
        vm.resume();
        ok
    }

    pub fn halted(&self) -> bool {
        self.give_up()
    }
}

/// A round's three parts for one task. `timed` returns the operations it did, or `None` if a
/// barrier inside it gave up (the run is ending).
pub trait RoundBody<V: Vm>: Sync {
    /// Per task, once, before the first round (untimed).
    fn start(&self, _i: usize, _vm: &V, _ctx: &RoundCtx) -> Result<(), WorkloadError> {
        Ok(())
    }
    /// Before the round starts (untimed).
    fn prepare(&self, i: usize, vm: &V, ctx: &RoundCtx) -> Result<(), WorkloadError>;
    /// The measured part.
    fn timed(&self, i: usize, vm: &V, ctx: &RoundCtx) -> Result<Option<u64>, WorkloadError>;
    /// After every task finished its timed part (untimed).
    fn teardown(&self, i: usize, vm: &V, ctx: &RoundCtx) -> Result<(), WorkloadError>;
    /// After the last round, once every task has left its loop: release what is left.
    fn finish(&self, i: usize, vm: &V, ctx: &RoundCtx) -> Result<(), WorkloadError>;
}

/// What a rounds run measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rounds {
    /// Operations per second (`tasks * ops / summed task time`), one per kept sample.
    pub samples: Vec<f64>,
    /// Timed operations per task, over the whole run (warm-up included).
    pub ops_per_task: Vec<u64>,
    /// Rounds completed by every task.
    pub rounds: u64,
    pub interrupted: bool,
}

/// One task's result for the round under way.
#[derive(Default)]
struct Stamp {
    ns: AtomicU64,
    ops: AtomicU64,
}

fn now_ns(origin: Instant) -> u64 {
    origin.elapsed().as_nanos() as u64
}

/// Run `body` in rounds on `vms` (one task each) until `spec` is sampled or `stop` is set.
/// Hooks as in [`crate::runner::run_continuous`]; a stop request ends the run after the
/// current sample, marked interrupted; a task's error stops every task and is the result.
pub fn run_rounds<V, B>(
    vms: Vec<V>,
    spec: SampleSpec,
    stop: &AtomicBool,
    hooks: Hooks<'_>,
    body: &B,
) -> Result<Rounds, WorkloadError>
where
    V: Vm + Send,
    B: RoundBody<V>,
{
    let n = vms.len();
    if n == 0 {
        return Err(WorkloadError::Config("no tasks".into()));
    }
    let ctx = RoundCtx {
        n,
        barrier: HaltableBarrier::new(n),
        halt: AtomicBool::new(false),
        abort: AtomicBool::new(false),
        region: AtomicU64::new(0),
    };
    let stamps: Vec<CachePadded<Stamp>> = (0..n).map(|_| CachePadded::default()).collect();
    let per_task: Vec<CachePadded<AtomicU64>> = (0..n).map(|_| CachePadded::default()).collect();
    // (operations, summed task ns) of the completed rounds: written by task 0 once per round, outside
    // the timed part, read by the sampler; one lock keeps the pair consistent.
    let totals: Mutex<(u64, u64)> = Mutex::new((0, 0));
    let rounds = AtomicU64::new(0);
    let failure: Mutex<Option<WorkloadError>> = Mutex::new(None);
    let started = Barrier::new(n + 1);
    let last = Barrier::new(n);
    let origin = Instant::now();
    let mut out = Rounds::default();
    std::thread::scope(|s| {
        for (i, vm) in vms.into_iter().enumerate() {
            let (ctx, stamps, per_task, failure, started, last) =
                (&ctx, &stamps, &per_task, &failure, &started, &last);
            let (totals, rounds) = (&totals, &rounds);
            s.spawn(move || {
                pin_to_core(i);
                let fail = |e: WorkloadError| {
                    failure.lock().unwrap().get_or_insert(e);
                    ctx.abort.store(true, Ordering::Relaxed);
                };
                let r = body.start(i, &vm, ctx);
                vm.idle();
                started.wait();
                vm.resume();
                if let Err(e) = r {
                    fail(e);
                }
                let one = || -> Result<bool, WorkloadError> {
                    body.prepare(i, &vm, ctx)?;
                    if !ctx.meet(&vm) {
                        return Ok(false);
                    }
                    let t0 = now_ns(origin);
                    let Some(ops) = body.timed(i, &vm, ctx)? else {
                        return Ok(false);
                    };
                    let t1 = now_ns(origin);
                    let st = &stamps[i];
                    st.ns.store((t1 - t0).max(1), Ordering::Relaxed);
                    st.ops.store(ops, Ordering::Relaxed);
                    per_task[i].fetch_add(ops, Ordering::Relaxed);
                    // The barrier publishes every stamp to task 0; nobody writes its stamp
                    // again before task 0 has met them at the next round's start.
                    if !ctx.meet(&vm) {
                        return Ok(false);
                    }
                    if i == 0 {
                        let ops: u64 = stamps.iter().map(|s| s.ops.load(Ordering::Relaxed)).sum();
                        let ns: u64 = stamps.iter().map(|s| s.ns.load(Ordering::Relaxed)).sum();
                        let mut t = totals.lock().unwrap();
                        t.0 += ops;
                        t.1 += ns;
                        drop(t);
                        rounds.fetch_add(1, Ordering::Relaxed);
                    }
                    body.teardown(i, &vm, ctx)?;
                    Ok(true)
                };
                while !ctx.halted() {
                    match one() {
                        Ok(true) => {}
                        Ok(false) => break,
                        Err(e) => {
                            fail(e);
                            break;
                        }
                    }
                }
                vm.idle();
                last.wait();
                vm.resume();
                if let Err(e) = body.finish(i, &vm, ctx) {
                    fail(e);
                }
                // `vm` (a task) is dropped here, on its own thread.
            });
        }
        started.wait();
        out = sample(&ctx, &totals, spec, stop, hooks);
        ctx.halt.store(true, Ordering::Relaxed);
    });
    if let Some(e) = failure.into_inner().unwrap() {
        return Err(e);
    }
    out.ops_per_task = per_task.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    out.rounds = rounds.load(Ordering::Relaxed);
    Ok(out)
}

/// The sampler: once per interval (extended until at least one round has ended in it, so that
/// a slow target still yields a rate), the pooled rate of the rounds that ended.
fn sample(
    ctx: &RoundCtx,
    totals: &Mutex<(u64, u64)>,
    spec: SampleSpec,
    stop: &AtomicBool,
    hooks: Hooks<'_>,
) -> Rounds {
    let Hooks {
        measure_start,
        sample,
    } = hooks;
    let mut out = Rounds::default();
    let read = || *totals.lock().unwrap();
    let mut last = read();
    let total = spec.warmup + spec.samples;
    for i in 0..total {
        if i == spec.warmup {
            measure_start();
            last = read();
        }
        let deadline = Instant::now() + spec.interval;
        loop {
            if ctx.abort.load(Ordering::Relaxed) {
                return out;
            }
            if stop.load(Ordering::Relaxed) {
                out.interrupted = true;
                return out;
            }
            let now = Instant::now();
            if now >= deadline && read().0 > last.0 {
                break;
            }
            std::thread::sleep(
                deadline
                    .saturating_duration_since(now)
                    .clamp(Duration::from_millis(1), Duration::from_millis(10)),
            );
        }
        let cur = read();
        let n = ctx.n as f64;
        let kept = (i >= spec.warmup)
            .then(|| n * (cur.0 - last.0) as f64 / ((cur.1 - last.1) as f64 / 1e9));
        out.samples.extend(kept);
        last = cur;
        sample(i + 1, total, kept);
    }
    out
}
