//! Trace capture: one task runs a workload on the engine with a profile while
//! `pagelab_sync::trace` records its shared-resource events.
//!
//! The workload code is the harness's own (`page_fault::task_loop`, `pft::run`); the capture
//! only wraps the task's [`Vm`] to mark each store as one operation and to open and close the
//! recording window at the workload's natural boundaries:
//!
//! - will-it-scale's page-fault tests loop map-touch-unmap until stopped: after one warm-up
//!   iteration, windows of `cycles` iterations are timed without recording, then recorded;
//!   the trace is whole iterations (unmaps included), which replay cycles through.
//! - pft (and Lameter's 2005 test, which it grew from) times the faulting of a region between
//!   two barriers: a warm-up repetition, then repetitions timed without recording, then
//!   recorded from their first store to their unmap (not included, as pft does not time it).
//!
//! Then, for each trylock whose failure path the replay takes (the per-VMA lock when the
//! profile has one, the pcp lock when it has per-CPU lists), one more recorded window runs with
//! every trylock of that class made to fail ([`raw::force_trylock_failure`]): what the engine
//! does then (the fault under `mmap_lock`, the allocation or free under `zone->lock`) is
//! recorded from the engine itself and becomes that class's fallback segments
//! ([`crate::trace::Fallback`]). Those windows are not timed.
//!
//! Companions ([`CaptureSpec::companions`]): the workload can run with a few more tasks laid
//! out as it lays them out (pft's single VMA: each task faults its slice of one region), only
//! task 0 being recorded. A PTE table a companion also faults then has a split lock that two
//! CPUs take, which the engine marks shared, so task 0's acquisitions of it are recorded as
//! `ptl (shared)` (per-mm scope) and replay makes the projected CPUs meet there; a slice
//! boundary inside a 2 MiB table is where that happens, as in the kernel. Each repetition's
//! recording starts once a companion has made its first fault, so that a companion a loaded
//! host delayed does not leave the shared tables private for the window.
//!
//! Three windows of each kind run, because this host is shared: the untraced time is the
//! least CPU time of the three (thread CPU time, so preemption does not count), and the
//! recording kept is the one that lost least time to preemption. The untraced and traced
//! timings of the same work give the capture overhead;
//! [`pagelab_sync::trace::measure_overhead`] is what each recorded event adds to the gap
//! before the next, which the trace subtracts before scaling its compute to the untraced
//! time.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use pagelab_bench::profiles::Profile;
use pagelab_bench::run::{Sizes, engine_arena};
use pagelab_mm::page::PAGE_SIZE;
use pagelab_mm::policy::{PcpLists, Policy, VmaLock};
use pagelab_sync::LockClass;
use pagelab_sync::trace as raw;
use pagelab_workloads::page_fault::{self, MEMSIZE, Variant};
use pagelab_workloads::pft::{self, PftParams};
use pagelab_workloads::vm::Vm;
use pagelab_workloads::{Mode, WorkloadError, WorkloadKind, engine};

use crate::error::CaptureError;
use crate::trace::{Pinning, Trace, TraceMeta, Window};

mod rounds;

/// What to capture.
#[derive(Clone, Debug)]
pub struct CaptureSpec {
    pub workload: WorkloadKind,
    pub profile: Profile,
    /// Virtual CPUs of the engine (the target machine's count, so that per-CPU sizing such as
    /// the percpu counter batch follows it).
    pub kernel_cpus: usize,
    /// page_fault1..3: iterations recorded (each maps 128 MiB: 32 768 faults).
    pub cycles: usize,
    /// pft: bytes the task faults in the recorded repetition.
    pub pft_bytes: u64,
    /// Untraced tasks run beside task 0 in the workload's own layout (each faulting as much
    /// as task 0), so that what task 0 really shares with a neighbour (a PTE table of one
    /// VMA) is shared in the trace too. None by default: at the shipped slice sizes (64 MiB
    /// of pft per task) tasks share no PTE table, and on a host with few CPUs a companion only
    /// adds its contention for the engine's locks to the recorded compute, which the replay
    /// then models a second time. Set it when slices are small enough to share a table.
    pub companions: usize,
    /// kvcache's shape (the experiment's `[kvcache]` table); `None` takes the workload's
    /// defaults. Ignored by the other workloads.
    pub kvcache: Option<pagelab_workloads::kvcache::KvParams>,
    /// kvcache: requests per window; `None` (the default) is one sweep of the server's keys
    /// ([`crate::kvcapture`]).
    pub kvcache_window: Option<usize>,
}

impl CaptureSpec {
    /// The defaults: two iterations of will-it-scale, 64 MiB of pft.
    pub fn new(workload: WorkloadKind, profile: Profile, kernel_cpus: usize) -> Self {
        CaptureSpec {
            workload,
            profile,
            kernel_cpus,
            cycles: 2,
            pft_bytes: 64 << 20,
            companions: 0,
            kvcache: None,
            kvcache_window: None,
        }
    }
}

/// The workloads the projector can replay, and how each repeats and places its tasks.
pub fn shape(w: WorkloadKind) -> Result<(Window, Pinning, bool), CaptureError> {
    match w {
        WorkloadKind::PageFault1 | WorkloadKind::PageFault2 | WorkloadKind::PageFault3 => {
            Ok((Window::Cycle, Pinning::Cores, false))
        }
        WorkloadKind::Pft => Ok((Window::Once, Pinning::Spread, true)),
        WorkloadKind::PftVmaPerThread => Ok((Window::Once, Pinning::Spread, false)),
        // Lameter's 2005 test is pft's ancestor and repeats as it does: a region mapped, its
        // pages faulted by all threads at once (each its slice of the one VMA), unmapped.
        WorkloadKind::Lameter => Ok((Window::Once, Pinning::Spread, true)),
        // memcached's workers serve requests until stopped, unpinned, in one address space
        // (one VMA of items): see `crate::kvcapture`.
        WorkloadKind::Kvcache => Ok((Window::Cycle, Pinning::Spread, true)),
        // Sender/receiver pairs, each side on a core of its own ([`crate::netpipe`]).
        WorkloadKind::Netpipe => Ok((Window::Cycle, Pinning::Cores, false)),
        w if rounds::is_research(w) => Ok((Window::Cycle, Pinning::Cores, rounds::shares_vma(w))),
        other => Err(CaptureError::Unsupported(format!(
            "the projector replays page_fault1, page_fault2, page_fault3, pft, pft-vma-per-thread, lameter, kvcache, netpipe, mapbench, mapbench-shared and the cortenmm tests, not {other}"
        ))),
    }
}

/// Windows of each kind: untimed runs of the same work, and recordings; the quietest of each
/// counts (this host is shared, and a window in which the task was preempted says more about
/// the neighbours than about the engine).
const ROUNDS: usize = 3;

/// Whether timed window `w` (below `2 * ROUNDS`) is recorded: they alternate with the untraced
/// ones (untraced first), so that a stretch in which this host ran the task slowly (a
/// neighbour on the other hyper-thread of a vCPU, a frequency change) weighs on both kinds
/// alike. With all untraced windows first, one such stretch made the untraced time twice the
/// traced one, and the compute was then scaled up by 1.9.
fn recorded(w: usize) -> bool {
    w % 2 == 1
}

/// The recording buffer's room per fault (events), allocated and made resident before a
/// window opens.
pub const EVENTS_PER_FAULT: usize = 40;

/// The trylock classes whose failure path a capture with `policy` records (see the module
/// docs), in the order their windows run.
pub fn fallback_classes(policy: &Policy) -> Vec<&'static LockClass> {
    let mut v = Vec::new();
    // Lock-free faults (`rcu`) take no VMA lock, so there is no trylock to fail: their retry
    // under mmap_lock follows a changed sequence, which the capture's one task never sees.
    if !matches!(policy.mm.vma_lock, VmaLock::None | VmaLock::Rcu) {
        v.push(&pagelab_mm::vm::vma_lock::VMA_LOCK);
    }
    if policy.pcp.lists != PcpLists::None {
        v.push(&pagelab_mm::alloc::PCP_LOCK);
    }
    v
}

/// The best recording so far: time lost to preemption (wall less CPU time), CPU time, events.
type Best = Option<(f64, f64, Vec<raw::Event>)>;

/// Where the wrapped task is in its run, and what it recorded.
///
/// The run is cut into windows at the workload's boundaries: after every unmap for the
/// will-it-scale loops (a window is `cycles` iterations), at a repetition's first store and
/// its unmap for pft. After `warmup` boundaries come `ROUNDS` untraced and `ROUNDS` recorded
/// windows, in turns.
struct Ctl {
    window: Window,
    warmup: usize,
    cycles: usize,
    boundaries: AtomicUsize,
    maps: AtomicUsize,
    in_window: AtomicBool,
    stop: AtomicBool,
    /// Start of the open window: wall clock and thread CPU time.
    opened: Mutex<Option<(Instant, u64)>>,
    /// CPU time of each untraced window, ns.
    untraced: Mutex<Vec<f64>>,
    best: Mutex<Best>,
    overhead: Mutex<Option<f64>>,
    capacity: usize,
    /// One window each after the timed ones, with that class's trylocks failing.
    fallback_classes: Vec<&'static LockClass>,
    /// What those windows recorded.
    fallbacks: Mutex<Vec<Vec<raw::Event>>>,
    /// Set by task 0 when a pft repetition is about to start its window, cleared by the
    /// first companion store after that (only read by companions otherwise).
    await_companion: AtomicBool,
    companions: usize,
    /// The windows are opened and closed by the rounds driver ([`rounds::run`]), which also
    /// counts the operations: the task's calls mark nothing.
    manual: bool,
}

impl Ctl {
    fn new(
        window: Window,
        cycles: usize,
        capacity: usize,
        fallback_classes: Vec<&'static LockClass>,
    ) -> Ctl {
        Ctl {
            window,
            warmup: 1,
            cycles,
            boundaries: AtomicUsize::new(0),
            maps: AtomicUsize::new(0),
            in_window: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            opened: Mutex::new(None),
            untraced: Mutex::new(Vec::new()),
            best: Mutex::new(None),
            overhead: Mutex::new(None),
            capacity,
            fallback_classes,
            fallbacks: Mutex::new(Vec::new()),
            await_companion: AtomicBool::new(false),
            companions: 0,
            manual: false,
        }
    }

    /// Before task 0's first store of a pft repetition: wait (a bounded time, outside the
    /// window) until a companion has faulted in this repetition, so that the tables it shares
    /// with task 0 are marked shared from the start. Companions start at the same barrier as
    /// task 0; this only absorbs a companion the host has not scheduled yet.
    fn wait_for_companion(&self) {
        if self.companions == 0 {
            return;
        }
        self.await_companion.store(true, Ordering::Relaxed);
        let t = Instant::now();
        while self.await_companion.load(Ordering::Relaxed)
            && t.elapsed() < std::time::Duration::from_millis(200)
        {
            std::thread::yield_now();
        }
    }

    /// Windows in all: untraced, recorded, and one per fallback class.
    fn windows(&self) -> usize {
        2 * ROUNDS + self.fallback_classes.len()
    }

    /// Opens window `w` (untraced and recorded in turns, see [`recorded`]; from `2 * ROUNDS` on, with
    /// one fallback class's trylocks failing).
    fn open(&self, w: usize) {
        if let Some(&class) = w
            .checked_sub(2 * ROUNDS)
            .and_then(|j| self.fallback_classes.get(j))
        {
            raw::force_trylock_failure(Some(class));
            raw::start(self.capacity);
            return;
        }
        if recorded(w) {
            let mut o = self.overhead.lock().unwrap();
            if o.is_none() {
                *o = Some(raw::measure_overhead());
            }
            raw::start(self.capacity);
        }
        *self.opened.lock().unwrap() = Some((Instant::now(), pft::thread_cpu_ns()));
    }

    /// Closes window `w`.
    fn close(&self, w: usize) {
        if w >= 2 * ROUNDS {
            let events = raw::stop();
            raw::force_trylock_failure(None);
            self.fallbacks.lock().unwrap().push(events);
            return;
        }
        let events = if recorded(w) { raw::stop() } else { Vec::new() };
        let Some((t0, c0)) = self.opened.lock().unwrap().take() else {
            return;
        };
        let wall = t0.elapsed().as_nanos() as f64;
        let cpu = pft::thread_cpu_ns().saturating_sub(c0) as f64;
        if !recorded(w) {
            self.untraced.lock().unwrap().push(cpu);
        } else {
            let lost = (wall - cpu).max(0.0);
            let mut best = self.best.lock().unwrap();
            if best.as_ref().is_none_or(|(l, _, _)| lost < *l) {
                *best = Some((lost, cpu, events));
            }
        }
    }

    /// A boundary of a will-it-scale loop (after an unmap).
    fn cycle_boundary(&self) {
        let b = self.boundaries.fetch_add(1, Ordering::Relaxed) + 1;
        if b < self.warmup || !(b - self.warmup).is_multiple_of(self.cycles) {
            return;
        }
        let w = (b - self.warmup) / self.cycles;
        if w > 0 {
            self.close(w - 1);
        }
        if w < self.windows() {
            self.open(w);
        } else {
            self.stop.store(true, Ordering::Relaxed);
        }
    }

    /// pft repetition `rep` (1-based) starts or ends its timed section.
    fn pft_window(&self, rep: usize, start: bool) {
        if rep <= self.warmup || rep > self.warmup + self.windows() {
            return;
        }
        let w = rep - self.warmup - 1;
        if start { self.open(w) } else { self.close(w) }
    }
}

/// A task whose stores count as operations and whose recording window [`Ctl`] drives.
struct TracedVm<V> {
    inner: V,
    ctl: Arc<Ctl>,
    /// Task 0, the one recorded; companions only pass their calls through.
    traced: bool,
}

impl<V: Vm> Vm for TracedVm<V> {
    type File = V::File;

    fn mmap_anon(&self, len: u64) -> Result<u64, WorkloadError> {
        if self.traced {
            self.ctl.maps.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.mmap_anon(len)
    }

    fn mmap_fixed_anon(&self, addr: u64, len: u64) -> Result<(), WorkloadError> {
        if self.traced {
            self.ctl.maps.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.mmap_fixed_anon(addr, len)
    }

    fn create_file(&self, len: u64) -> Result<V::File, WorkloadError> {
        self.inner.create_file(len)
    }

    fn mmap_file(&self, file: &V::File, len: u64, shared: bool) -> Result<u64, WorkloadError> {
        if self.traced {
            self.ctl.maps.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.mmap_file(file, len, shared)
    }

    fn store(&self, addr: u64) -> Result<(), WorkloadError> {
        let c = &self.ctl;
        if !self.traced || c.manual {
            self.inner.store(addr)?;
            if c.await_companion.load(Ordering::Relaxed) {
                c.await_companion.store(false, Ordering::Relaxed);
            }
            return Ok(());
        }
        if c.window == Window::Once && !c.in_window.swap(true, Ordering::Relaxed) {
            // The first store of a repetition: the start of pft's timed section.
            c.wait_for_companion();
            c.pft_window(c.maps.load(Ordering::Relaxed), true);
        }
        self.inner.store(addr)?;
        raw::ops(1);
        Ok(())
    }

    fn munmap(&self, addr: u64, len: u64) -> Result<(), WorkloadError> {
        let c = &self.ctl;
        if !self.traced || c.manual {
            return self.inner.munmap(addr, len);
        }
        if c.window == Window::Once && c.in_window.swap(false, Ordering::Relaxed) {
            c.pft_window(c.maps.load(Ordering::Relaxed), false);
        }
        self.inner.munmap(addr, len)?;
        if c.window == Window::Cycle {
            c.cycle_boundary();
        }
        Ok(())
    }

    fn idle(&self) {
        self.inner.idle();
    }

    fn resume(&self) {
        self.inner.resume();
    }

    fn fault_ns(&self) -> Option<u64> {
        self.inner.fault_ns()
    }
}

/// Captures `spec`'s trace. Takes a few seconds (the workload runs seven to nine times over).
pub fn capture(spec: &CaptureSpec) -> Result<Trace, CaptureError> {
    let (window, pinning, shared_vma) = shape(spec.workload)?;
    if spec.workload == WorkloadKind::Kvcache {
        return crate::kvcapture::capture(spec);
    }
    if spec.workload == WorkloadKind::Netpipe {
        return Err(CaptureError::Unsupported(
            "netpipe is captured as a sender/receiver pair per send size (pagelab_project::netpipe::capture_pair; `pagelab project` does it)".into(),
        ));
    }
    if spec.cycles == 0 {
        return Err(CaptureError::NoCycle);
    }
    let tasks = rounds::tasks(spec.workload, 1 + spec.companions);
    // pft splits its bytes between the tasks: each faults what task 0 alone would.
    let pft_bytes = spec.pft_bytes * tasks as u64;
    let sizes = Sizes {
        memsize: MEMSIZE,
        pft_bytes,
        ..Sizes::default()
    };
    let arena = engine_arena(spec.workload, tasks, sizes);
    let kernel = engine::boot(&spec.profile.policy, arena, spec.kernel_cpus.max(tasks))
        .map_err(CaptureError::Workload)?;
    let (_run, vms) =
        engine::tasks(&kernel, tasks, Mode::Threads, false).map_err(CaptureError::Workload)?;
    // Events a window may record: the profiles record 19 to 26 a fault today (pvl-v2's
    // pft the most), so 40 leaves room for more line events without the buffer ever
    // growing inside a window (see `raw::start`).
    let capacity = match window {
        Window::Cycle if rounds::is_research(spec.workload) => {
            rounds::window_ops(spec.workload, spec.cycles) * rounds::EVENTS_PER_OP
        }
        Window::Cycle => spec.cycles * (MEMSIZE as usize / PAGE_SIZE) * EVENTS_PER_FAULT,
        Window::Once => (spec.pft_bytes as usize / PAGE_SIZE) * EVENTS_PER_FAULT,
    };
    let mut ctl = Ctl::new(
        window,
        rounds::cycles(spec.workload, spec.cycles),
        capacity,
        fallback_classes(&spec.profile.policy),
    );
    ctl.companions = spec.companions;
    ctl.manual = rounds::is_rounds(spec.workload);
    let ctl = Arc::new(ctl);
    let mut vms: Vec<_> = vms
        .into_iter()
        .enumerate()
        .map(|(i, inner)| TracedVm {
            inner,
            ctl: ctl.clone(),
            traced: i == 0,
        })
        .collect();
    let never = AtomicBool::new(false);
    match window {
        Window::Cycle if rounds::is_research(spec.workload) => {
            rounds::run(spec.workload, &ctl, vms)?;
        }
        Window::Cycle => {
            let variant = match spec.workload {
                WorkloadKind::PageFault1 => Variant::Anon,
                WorkloadKind::PageFault2 => Variant::PrivateFile,
                _ => Variant::SharedFile,
            };
            let counter = AtomicU64::new(0);
            let (counter, stop) = (&counter, &ctl.stop);
            let companions = vms.split_off(1);
            let vm = vms.pop().expect("task 0");
            std::thread::scope(|s| {
                // Companions loop until task 0's windows are done (its stop ends them too).
                let others: Vec<_> = companions
                    .into_iter()
                    .enumerate()
                    .map(|(i, c)| {
                        s.spawn(move || {
                            pagelab_workloads::pin::pin_to_core(i + 1);
                            page_fault::task_loop(&c, variant, MEMSIZE, counter, stop)
                        })
                    })
                    .collect();
                let r = s
                    .spawn(move || {
                        pagelab_workloads::pin::pin_to_core(0);
                        page_fault::task_loop(&vm, variant, MEMSIZE, counter, stop)
                    })
                    .join();
                // Whatever task 0 met, stop the companions before the scope joins them.
                stop.store(true, Ordering::Relaxed);
                for o in others {
                    o.join()
                        .map_err(|_| CaptureError::Incomplete("a companion task panicked"))?
                        .map_err(CaptureError::Companion)?;
                }
                r.map_err(|_| CaptureError::Incomplete("the workload panicked"))?
                    .map_err(CaptureError::Workload)
            })?;
        }
        Window::Once => {
            let params = PftParams {
                bytes: pft_bytes,
                repetitions: 1 + ctl.windows(),
                vma_per_task: !shared_vma,
            };
            pft::run(vms, true, params, &never, &mut |_, _, _| {})
                .map_err(CaptureError::Workload)?;
        }
    }
    let Some((_, traced_ns, events)) = ctl.best.lock().unwrap().take() else {
        return Err(CaptureError::Incomplete(
            "the recording window never closed",
        ));
    };
    let untraced_ns = ctl
        .untraced
        .lock()
        .unwrap()
        .iter()
        .copied()
        .fold(f64::INFINITY, f64::min);
    if events.is_empty() || !untraced_ns.is_finite() {
        return Err(CaptureError::Incomplete(
            "the workload ended before its untraced windows were timed",
        ));
    }
    let meta = TraceMeta {
        workload: spec.workload.name().to_string(),
        profile: spec.profile.name.clone(),
        profile_toml: spec.profile.policy.to_toml_string(),
        op_unit: rounds::op_unit(spec.workload).into(),
        window,
        pinning,
        shared_vma,
        kernel_cpus: spec.kernel_cpus,
        host_cpu: pagelab_bench::host::HostInfo::detect().cpu_model,
        host_ghz: crate::calibrate::clock_ghz(),
        ops: 0,
        raw_events: 0,
        overhead_ns_per_event: ctl.overhead.lock().unwrap().unwrap_or(0.0),
        traced_ns,
        untraced_ns,
        compute_scale: 1.0,
    };
    let fallbacks = std::mem::take(&mut *ctl.fallbacks.lock().unwrap());
    let mut trace = Trace::from_raw_with_fallbacks(meta, &events, &fallbacks);
    trace.set_rwsem(spec.profile.policy.locks.rwsem);
    Ok(trace)
}
