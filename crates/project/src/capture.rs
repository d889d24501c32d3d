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
//! recording kept is the one that lost least time to preemption.
//!
//! Every recorded window (the main ones and the fallback ones) is checked against the
//! scheduler's own account of the capturing thread ([`SchedAccount`]: `run_delay` and
//! involuntary context switches) and for stalls (a gap between two events as long as a
//! scheduler's slice, [`CaptureGuard::RETAKE_NS`]): a window the host took the CPU away in is
//! run again, up to [`RETAKES`] times for the recordings and [`FALLBACK_RETAKES`] for each
//! fallback class, the least disturbed attempt being kept when the budget is spent. Such a
//! window keeps the lost time inside whatever the thread was doing, often a critical section
//! (a fault's `mmap_lock` or per-VMA lock hold, or a fallback's `zone->lock` hold), and the
//! replay would make every projected CPU wait for it; one 3 ms fallback segment among 16 000
//! doubled their mean. What the guard saw is kept in the trace ([`TraceMeta::guard`]). Every
//! kept window's gaps of [`CaptureGuard::INTERRUPT_NS`] or more (the host's interruptions,
//! and on a host too loaded for any window to be undisturbed its longer stalls) are taken out
//! of the trace ([`Trace::from_raw_with_fallbacks`]). The untraced and traced
//! timings of the same work give the capture overhead;
//! [`pagelab_sync::trace::measure_overhead`] is what each recorded event adds to the gap
//! before the next in a tight loop. The untraced windows also time their page writes
//! ([`raw::time_writes`], nothing recorded), so that the kept one gives both its CPU time and
//! its own writes' share of it: the trace's gaps must add up to the difference, and what
//! recording cost beyond the tight loop is taken out of them per event.

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
use crate::trace::{CaptureGuard, Pinning, Trace, TraceMeta, Window};

pub mod pace;
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
    /// The target machine's nodes, which the engine's memory-derived tunables (pcp `"auto"`
    /// batch and high, the vmstat threshold) are sized for instead of the capture's small
    /// arena ([`pagelab_mm::TunablesFor`]); `None`: the arena's. The fault benchmarks' captures
    /// use it; kvcache and netpipe size their own memory and keep their arenas'.
    pub tunables_for: Option<pagelab_mm::TunablesFor>,
}

/// pft's bytes a capture records by default: 16 384 faults.
pub const PFT_BYTES: u64 = 64 << 20;

impl CaptureSpec {
    /// The defaults: two iterations of will-it-scale, 64 MiB of pft.
    pub fn new(workload: WorkloadKind, profile: Profile, kernel_cpus: usize) -> Self {
        CaptureSpec {
            workload,
            profile,
            kernel_cpus,
            cycles: 2,
            pft_bytes: PFT_BYTES,
            companions: 0,
            kvcache: None,
            kvcache_window: None,
            tunables_for: None,
        }
    }

    /// A capture for `machine`: its CPU count, and its nodes' memory where the file gives it.
    pub fn for_machine(
        workload: WorkloadKind,
        profile: Profile,
        machine: &crate::machine::Machine,
    ) -> Self {
        CaptureSpec {
            tunables_for: machine.tunables_for(),
            ..Self::new(workload, profile, machine.nr_cpus())
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
/// traced one, and the compute was then scaled up by 1.9. (The round-based captures follow
/// this fixed order; the others follow [`Plan`], which keeps it and adds retakes.)
fn recorded(w: usize) -> bool {
    w % 2 == 1
}

/// Recorded windows a capture may run again because the host preempted or stalled the
/// capturing thread in them. A pft window of 64 MiB takes about 10 ms here, so the budget
/// costs at most a tenth of a second; past it the least disturbed recording is kept and the
/// trace says so ([`CaptureGuard::kept_preempted`]).
pub const RETAKES: usize = 12;

/// Retakes of each fallback class's window, apart from the recordings' budget: on a loaded
/// host the recordings spend theirs, and a fallback window taken as it came kept 1-3 ms
/// segments. The least disturbed attempt is kept when these are spent too.
pub const FALLBACK_RETAKES: usize = 4;

/// How much a window was disturbed, to choose among disturbed ones: the time the scheduler
/// kept the thread waiting, and a stall's length when it is one.
fn severity(c: &WindowCheck) -> f64 {
    let wait = c.sched.map_or(0.0, |s| s.run_delay_ns as f64);
    let stall = if c.longest_gap_ns >= CaptureGuard::RETAKE_NS {
        c.longest_gap_ns
    } else {
        0.0
    };
    wait + stall
}

/// The scheduler's account of the calling thread: how long it has been runnable but waiting
/// for a CPU (`run_delay`, the second field of `/proc/thread-self/schedstat`, kept by the
/// kernel's `sched_info` accounting) and how often it was switched out while still runnable
/// (`nonvoluntary_ctxt_switches` in `/proc/thread-self/status`, the `nivcsw` that
/// `__schedule` counts on a preemption).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedAccount {
    pub run_delay_ns: u64,
    pub nivcsw: u64,
}

impl SchedAccount {
    /// The calling thread's account now, or `None` where the kernel keeps none (no
    /// `CONFIG_SCHED_INFO`, or no /proc).
    pub fn now() -> Option<SchedAccount> {
        let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
        let run_delay_ns = stat.split_whitespace().nth(1)?.parse().ok()?;
        let status = std::fs::read_to_string("/proc/thread-self/status").ok()?;
        let nivcsw = status
            .lines()
            .find_map(|l| l.strip_prefix("nonvoluntary_ctxt_switches:"))?
            .trim()
            .parse()
            .ok()?;
        Some(SchedAccount {
            run_delay_ns,
            nivcsw,
        })
    }

    /// What was added since `before`.
    pub fn since(self, before: SchedAccount) -> SchedAccount {
        SchedAccount {
            run_delay_ns: self.run_delay_ns.saturating_sub(before.run_delay_ns),
            nivcsw: self.nivcsw.saturating_sub(before.nivcsw),
        }
    }
}

/// What the guard found in one recorded window.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WindowCheck {
    /// The scheduler's account over the window (`None`: unreadable on this host).
    pub sched: Option<SchedAccount>,
    /// The longest gap between two consecutive events, or the longest memory write, ns.
    pub longest_gap_ns: f64,
}

impl WindowCheck {
    /// Checks `events` (recorded on this host, so [`raw::ticks_per_ns`] converts their time
    /// stamps) with the scheduler's account `sched` over their window.
    pub fn of(events: &[raw::Event], sched: Option<SchedAccount>) -> WindowCheck {
        let tpn = raw::ticks_per_ns();
        let mut longest = 0u64;
        let mut prev: Option<u64> = None;
        for e in events {
            if let Some(p) = prev {
                longest = longest.max(e.t.saturating_sub(p));
            }
            prev = Some(match e.kind {
                raw::Kind::Write { end, .. } => {
                    longest = longest.max(end.saturating_sub(e.t));
                    end
                }
                _ => e.t,
            });
        }
        WindowCheck {
            sched,
            longest_gap_ns: longest as f64 / tpn,
        }
    }

    /// The host took the CPU away from the recording thread: the scheduler ran something
    /// else while it was runnable, or a stall as long as a scheduler's slice left a gap
    /// ([`CaptureGuard::RETAKE_NS`]). Shorter stalls are taken out of the trace instead.
    pub fn disturbed(&self) -> bool {
        self.sched
            .is_some_and(|s| s.run_delay_ns > 0 || s.nivcsw > 0)
            || self.longest_gap_ns >= CaptureGuard::RETAKE_NS
    }
}

/// One kind of window.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Slot {
    Untraced,
    Recorded,
    /// Recorded with this class's trylocks failing.
    Fallback(&'static LockClass),
}

/// Which windows have been accepted, and the one open: untraced and recorded windows in turns
/// (untraced first, as [`recorded`] orders them), then one per fallback class; a disturbed
/// recorded or fallback window is not counted, so the next window is of its kind again.
#[derive(Debug, Default)]
struct Plan {
    untraced: usize,
    recorded: usize,
    fallback: usize,
    /// Retakes of the recordings, and of the current fallback class.
    recorded_retakes: usize,
    fallback_retakes: usize,
    /// The current fallback class's least disturbed attempt so far.
    fallback_candidate: Option<(Vec<raw::Event>, WindowCheck)>,
    current: Option<Slot>,
    guard: CaptureGuard,
}

impl Plan {
    /// The next window to run, `None` when every window is in.
    fn next(&self, classes: &[&'static LockClass]) -> Option<Slot> {
        if self.untraced < ROUNDS && self.untraced <= self.recorded {
            Some(Slot::Untraced)
        } else if self.recorded < ROUNDS {
            Some(Slot::Recorded)
        } else {
            classes.get(self.fallback).map(|&c| Slot::Fallback(c))
        }
    }
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

/// What an untraced window measured: its CPU time, ns, its page writes' time when they were
/// timed, and its unmaps' CPU time when it held any.
#[derive(Clone, Debug)]
struct Untimed {
    cpu: f64,
    writes: Option<f64>,
    unmaps: Option<f64>,
    /// Its spinlock holds, per recorded class ([`raw::time_holds`]).
    holds: Vec<crate::trace::UntracedHold>,
}

/// The best recording so far: whether the guard found it disturbed, time lost to preemption
/// (wall less CPU time), CPU time, events, and the guard's check.
type Best = Option<(bool, f64, f64, Vec<raw::Event>, WindowCheck)>;

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
    /// Start of the open window: wall clock, thread CPU time and the scheduler's account.
    opened: Mutex<Option<(Instant, u64, Option<SchedAccount>)>>,
    /// Windows accepted so far, and what the guard saw (the continuous loops and pft).
    plan: Mutex<Plan>,
    /// CPU time of each untraced window, ns, its page writes' time when they were timed
    /// ([`raw::time_writes`]), and its unmaps' CPU time (the will-it-scale loops).
    untraced: Mutex<Vec<Untimed>>,
    /// CPU time of the unmaps in the open untraced window so far, ns.
    unmap_ns: Mutex<f64>,
    best: Mutex<Best>,
    overhead: Mutex<Option<f64>>,
    capacity: usize,
    /// One window each after the timed ones, with that class's trylocks failing.
    fallback_classes: Vec<&'static LockClass>,
    /// What those windows recorded, with the guard's check of each.
    fallbacks: Mutex<Vec<(Vec<raw::Event>, WindowCheck)>>,
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
            plan: Mutex::new(Plan::default()),
            untraced: Mutex::new(Vec::new()),
            unmap_ns: Mutex::new(0.0),
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

    /// Windows in all when none is retaken: untraced, recorded, and one per fallback class.
    fn windows(&self) -> usize {
        2 * ROUNDS + self.fallback_classes.len()
    }

    /// Opens the next window of the [`Plan`]; false when every window is in.
    fn open_next(&self) -> bool {
        let mut plan = self.plan.lock().unwrap();
        let Some(slot) = plan.next(&self.fallback_classes) else {
            return false;
        };
        plan.current = Some(slot);
        drop(plan);
        match slot {
            Slot::Untraced => {
                raw::write_timing_cost();
                raw::hold_timing_cost();
                raw::time_writes(Some(CaptureGuard::STALL_NS));
                raw::time_holds(Some(CaptureGuard::STALL_NS));
                *self.unmap_ns.lock().unwrap() = 0.0;
            }
            Slot::Recorded => {
                let mut o = self.overhead.lock().unwrap();
                if o.is_none() {
                    *o = Some(raw::measure_overhead());
                }
                drop(o);
                raw::start(self.capacity);
            }
            Slot::Fallback(class) => {
                raw::force_trylock_failure(Some(class));
                raw::start(self.capacity);
            }
        }
        // The account first: reading it (two /proc files) stays outside the timed window.
        let sched = SchedAccount::now();
        *self.opened.lock().unwrap() = Some((Instant::now(), pft::thread_cpu_ns(), sched));
        true
    }

    /// Closes the open window (if any) and judges it; sets `stop` once every window is in.
    fn close_current(&self) {
        let Some(slot) = self.plan.lock().unwrap().current.take() else {
            return;
        };
        let (events, writes, holds) = match slot {
            Slot::Untraced => (
                Vec::new(),
                Some(raw::time_writes(None)),
                raw::time_holds(None),
            ),
            _ => (raw::stop(), None, Vec::new()),
        };
        if let Slot::Fallback(_) = slot {
            raw::force_trylock_failure(None);
        }
        let Some((t0, c0, s0)) = self.opened.lock().unwrap().take() else {
            return;
        };
        let wall = t0.elapsed().as_nanos() as f64;
        let mut cpu = pft::thread_cpu_ns().saturating_sub(c0) as f64;
        let sched = s0.zip(SchedAccount::now()).map(|(a, b)| b.since(a));
        let check = WindowCheck::of(&events, sched);
        if let Some(w) = writes {
            // Timing a write costs two time-stamp reads and the bookkeeping, which the engine
            // does not pay: take them out of the CPU time, and what of them fell inside the
            // spans out of the writes.
            let (all, inside) = raw::write_timing_cost();
            let n = w.spans as f64;
            cpu = (cpu - all * n).max(0.0);
            // Every write stalled: their time is not known (the trace's own writes stand).
            let w = w.ns().map(|ns| (ns - inside * n).max(0.0));
            let mut unmaps = std::mem::take(&mut *self.unmap_ns.lock().unwrap());
            // Timing a hold costs two time-stamp reads and a little bookkeeping: out of the
            // CPU time (and the unmaps', for the holds inside them), and what of it fell
            // inside the holds out of theirs.
            let (all, inside) = raw::hold_timing_cost();
            let mut untraced_holds = Vec::with_capacity(holds.len());
            for h in &holds {
                let n = h.holds as f64;
                cpu = (cpu - all * n).max(0.0);
                if h.in_unmap {
                    unmaps = (unmaps - all * n).max(0.0);
                }
                untraced_holds.push(crate::trace::UntracedHold {
                    class: h.class.to_string(),
                    in_unmap: h.in_unmap,
                    ns: (h.ns - inside * n).max(0.0),
                    holds: h.holds,
                    event_cost_ns: None,
                });
            }
            self.untraced.lock().unwrap().push(Untimed {
                cpu,
                writes: w,
                unmaps: (unmaps > 0.0).then_some(unmaps),
                holds: untraced_holds,
            });
        }
        self.accept(slot, events, wall, cpu, check);
        if self
            .plan
            .lock()
            .unwrap()
            .next(&self.fallback_classes)
            .is_none()
        {
            self.stop.store(true, Ordering::Relaxed);
        }
    }

    /// Counts a closed window of kind `slot` (wall and thread CPU time, ns) unless the guard
    /// found it disturbed and the retake budget is not spent, in which case the next window
    /// is of its kind again. A disturbed recording is still a candidate for the kept one, below
    /// every undisturbed one, so that the least disturbed is kept when the budget runs out.
    fn accept(&self, slot: Slot, events: Vec<raw::Event>, wall: f64, cpu: f64, check: WindowCheck) {
        let mut plan = self.plan.lock().unwrap();
        if slot == Slot::Untraced {
            // Thread CPU time: preemption does not add to it (pushed by the caller, with the
            // window's write time).
            plan.untraced += 1;
            return;
        }
        let disturbed = check.disturbed();
        plan.guard.windows += 1;
        if check.sched.is_none() {
            plan.guard.unaccounted = true;
        }
        let retake = disturbed
            && match slot {
                Slot::Fallback(_) => plan.fallback_retakes < FALLBACK_RETAKES,
                _ => plan.recorded_retakes < RETAKES,
            };
        if retake {
            plan.guard.retaken += 1;
            match slot {
                Slot::Fallback(_) => plan.fallback_retakes += 1,
                _ => plan.recorded_retakes += 1,
            }
        }
        match slot {
            Slot::Untraced => unreachable!("counted above"),
            Slot::Recorded => {
                self.offer_recorded(disturbed, (wall - cpu).max(0.0), cpu, events, check);
                if !retake {
                    plan.recorded += 1;
                }
            }
            Slot::Fallback(_) => {
                let better = plan
                    .fallback_candidate
                    .as_ref()
                    .is_none_or(|(_, c)| severity(&check) < severity(c));
                let mut kept = (events, check);
                if !disturbed {
                    plan.fallback_candidate = None;
                } else if better {
                    if retake {
                        plan.fallback_candidate = Some(kept);
                        return;
                    }
                    plan.fallback_candidate = None;
                } else if retake {
                    return;
                } else {
                    kept = plan.fallback_candidate.take().expect("a better candidate");
                }
                self.fallbacks.lock().unwrap().push(kept);
                plan.fallback += 1;
                plan.fallback_retakes = 0;
            }
        }
    }

    /// Keeps a recording of `cpu` ns (`lost` ns of its wall time lost) if it is better than
    /// the one kept: undisturbed first, then the least time lost.
    fn offer_recorded(
        &self,
        disturbed: bool,
        lost: f64,
        cpu: f64,
        events: Vec<raw::Event>,
        check: WindowCheck,
    ) {
        let mut best = self.best.lock().unwrap();
        if best
            .as_ref()
            .is_none_or(|(d, l, ..)| (disturbed, lost) < (*d, *l))
        {
            *best = Some((disturbed, lost, cpu, events, check));
        }
    }

    /// What the guard saw, over the windows kept: the recording and the fallback windows.
    fn guard(&self) -> CaptureGuard {
        let mut g = self.plan.lock().unwrap().guard.clone();
        let best = self.best.lock().unwrap();
        let fallbacks = self.fallbacks.lock().unwrap();
        let kept = best
            .iter()
            .map(|b| &b.4)
            .chain(fallbacks.iter().map(|f| &f.1));
        for c in kept {
            if c.disturbed() {
                g.kept_preempted += 1;
            }
            if let Some(s) = c.sched {
                g.run_delay_ns += s.run_delay_ns;
                g.nivcsw += s.nivcsw;
            }
            g.longest_gap_ns = g.longest_gap_ns.max(c.longest_gap_ns);
        }
        g
    }

    /// A boundary of a will-it-scale loop (after an unmap).
    fn cycle_boundary(&self) {
        let b = self.boundaries.fetch_add(1, Ordering::Relaxed) + 1;
        if b < self.warmup || !(b - self.warmup).is_multiple_of(self.cycles) {
            return;
        }
        if b > self.warmup {
            self.close_current();
        }
        if !self.open_next() {
            self.stop.store(true, Ordering::Relaxed);
        }
    }

    /// pft repetition `rep` (1-based) starts or ends its timed section.
    fn pft_window(&self, rep: usize, start: bool) {
        if rep <= self.warmup {
            return;
        }
        if start {
            self.open_next();
        } else {
            self.close_current();
        }
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
        if c.window == Window::Cycle {
            // The unmap is timed in an untraced window and marked in a recorded one, so that
            // the recording's cost is taken out of it on its own ([`TraceMeta::untraced_unmap_ns`]).
            let untraced = c.plan.lock().unwrap().current == Some(Slot::Untraced);
            let t0 = untraced.then(pft::thread_cpu_ns);
            raw::unmap(true);
            let r = self.inner.munmap(addr, len);
            raw::unmap(false);
            if let Some(t0) = t0 {
                *c.unmap_ns.lock().unwrap() += pft::thread_cpu_ns().saturating_sub(t0) as f64;
            }
            r?;
            c.cycle_boundary();
            return Ok(());
        }
        self.inner.munmap(addr, len)
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
    if spec.workload == WorkloadKind::Kvcache {
        shape(spec.workload)?;
        return crate::kvcapture::capture(spec);
    }
    Ok(capture_raw(spec)?.build())
}

/// What a capture recorded, before its trace is built: the trace's compute is set from the
/// untraced window when it is built ([`Trace::from_raw_with_fallbacks`]), and a comparison's
/// captures may first have that set from their profiles timed side by side ([`pace`],
/// [`RawCapture::pace_to`]).
#[derive(Clone)]
pub struct RawCapture {
    meta: TraceMeta,
    events: Vec<raw::Event>,
    fallbacks: Vec<Vec<raw::Event>>,
    rwsem: pagelab_sync::RwsemAlgo,
}

impl RawCapture {
    /// Operations in the recorded window (the untraced windows ran the same work).
    fn ops(&self) -> u64 {
        self.events
            .iter()
            .map(|e| match e.kind {
                raw::Kind::Ops(n) => u64::from(n),
                _ => 0,
            })
            .sum()
    }

    /// The engine's compute per operation in the kept untraced window: its CPU time less its
    /// page writes. `None` when its writes could not be timed (every one stalled).
    pub fn compute_per_op(&self) -> Option<f64> {
        let ops = self.ops();
        let w = self.meta.untraced_write_ns?;
        (ops > 0).then(|| (self.meta.untraced_ns - w) / ops as f64)
    }

    /// Sets the compute the trace adds up to, `compute_ns` an operation, from the pacing
    /// of `relative` (this profile's compute over the paced profiles' geometric mean): the
    /// untraced window's CPU time becomes its writes plus that compute. Does nothing when the
    /// window's writes were not timed.
    pub fn pace_to(&mut self, compute_ns: f64, relative: f64, turns: usize) {
        let (Some(measured), Some(w)) = (self.compute_per_op(), self.meta.untraced_write_ns) else {
            return;
        };
        if !(compute_ns.is_finite() && compute_ns > 0.0) {
            return;
        }
        self.meta.untraced_ns = w + compute_ns * self.ops() as f64;
        self.meta.paced = Some(crate::trace::PacedCompute {
            measured_ns: measured,
            compute_ns,
            relative,
            turns,
            level_scale: 1.0,
        });
    }

    /// The trace.
    pub fn build(self) -> Trace {
        let mut trace = Trace::from_raw_with_fallbacks(self.meta, &self.events, &self.fallbacks);
        trace.set_rwsem(self.rwsem);
        trace
    }
}

/// [`capture`] up to the trace's construction, for the workloads [`pace::paceable`] or
/// round-based (not kvcache, not netpipe).
pub fn capture_raw(spec: &CaptureSpec) -> Result<RawCapture, CaptureError> {
    let (window, pinning, shared_vma) = shape(spec.workload)?;
    if spec.workload == WorkloadKind::Kvcache {
        return Err(CaptureError::Unsupported(
            "kvcache is captured whole (pagelab_project::kvcapture::capture)".into(),
        ));
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
    let kernel = engine::boot_for(
        &spec.profile.policy,
        arena,
        spec.kernel_cpus.max(tasks),
        spec.tunables_for,
    )
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
            // Room for every retake; the run stops once every window is in.
            let params = PftParams {
                bytes: pft_bytes,
                repetitions: 1
                    + ctl.windows()
                    + RETAKES
                    + FALLBACK_RETAKES * ctl.fallback_classes.len(),
                vma_per_task: !shared_vma,
            };
            pft::run(vms, true, params, &ctl.stop, &mut |_, _, _| {})
                .map_err(CaptureError::Workload)?;
        }
    }
    // The round-based captures keep their fixed order and only report their kept window.
    let guard = ctl.guard();
    let Some((_, _, traced_ns, events, _)) = ctl.best.lock().unwrap().take() else {
        return Err(CaptureError::Incomplete(
            "the recording window never closed",
        ));
    };
    // The least disturbed untraced window, and its own writes' time: the compute the trace
    // must add up to is that window's CPU time less its writes, both from one run.
    let kept = ctl
        .untraced
        .lock()
        .unwrap()
        .iter()
        .min_by(|a, b| a.cpu.total_cmp(&b.cpu))
        .cloned();
    let (untraced_ns, untraced_write_ns, untraced_unmap_ns, untraced_holds) = kept
        .map_or((f64::INFINITY, None, None, Vec::new()), |u| {
            (u.cpu, u.writes, u.unmaps, u.holds)
        });
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
        host_ghz: crate::calibrate::host_clock_ghz(),
        ops: 0,
        raw_events: 0,
        overhead_ns_per_event: ctl.overhead.lock().unwrap().unwrap_or(0.0),
        traced_ns,
        untraced_ns,
        untraced_write_ns,
        event_cost_ns: None,
        untraced_unmap_ns,
        unmap_event_cost_ns: None,
        untraced_holds,
        compute_scale: 1.0,
        guard: Some(guard),
        paced: None,
        // page_fault1..3 record `cycles` whole iterations; the research benchmarks' windows
        // are rounds of operations, replayed whole as one cycle.
        iterations: if window == Window::Cycle && !rounds::is_research(spec.workload) {
            u32::try_from(spec.cycles).unwrap_or(u32::MAX)
        } else {
            1
        },
    };
    let fallbacks: Vec<Vec<raw::Event>> = std::mem::take(&mut *ctl.fallbacks.lock().unwrap())
        .into_iter()
        .map(|(events, _)| events)
        .collect();
    Ok(RawCapture {
        meta,
        events,
        fallbacks,
        rwsem: spec.profile.policy.locks.rwsem,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctl(classes: Vec<&'static LockClass>) -> Ctl {
        Ctl::new(Window::Once, 1, 0, classes)
    }

    fn clean() -> WindowCheck {
        WindowCheck {
            sched: Some(SchedAccount::default()),
            longest_gap_ns: 1_000.0,
        }
    }

    fn preempted() -> WindowCheck {
        WindowCheck {
            sched: Some(SchedAccount {
                run_delay_ns: 2_500_000,
                nivcsw: 1,
            }),
            longest_gap_ns: 1_000.0,
        }
    }

    /// Accepts the plan's next window with `check` (CPU time `cpu`); returns its kind.
    fn step(c: &Ctl, cpu: f64, check: WindowCheck) -> Slot {
        let slot = c
            .plan
            .lock()
            .unwrap()
            .next(&c.fallback_classes)
            .expect("a window left");
        c.accept(slot, Vec::new(), cpu + 10.0, cpu, check);
        slot
    }

    fn raw_event(t: u64) -> raw::Event {
        raw::Event {
            t,
            kind: raw::Kind::Ops(1),
            class: &pagelab_mm::alloc::PCP_LOCK,
            instance: 0,
            model: pagelab_sync::trace::LockModel::Line,
        }
    }

    #[test]
    fn a_window_the_scheduler_preempted_or_stalled_is_disturbed() {
        assert!(!clean().disturbed());
        assert!(preempted().disturbed());
        let only_delay = WindowCheck {
            sched: Some(SchedAccount {
                run_delay_ns: 40_000,
                nivcsw: 0,
            }),
            longest_gap_ns: 0.0,
        };
        assert!(only_delay.disturbed());
        // A stall the scheduler did not account (a hypervisor's steal): found by its gap,
        // when it is as long as a slice.
        let tpn = raw::ticks_per_ns();
        let t0 = 1_000_000u64;
        let gap = |ns: f64| (ns * tpn) as u64;
        let with_gap = |ns: f64| {
            [
                raw_event(t0),
                raw_event(t0 + gap(300.0)),
                raw_event(t0 + gap(300.0) + gap(ns)),
            ]
        };
        let c = WindowCheck::of(&with_gap(1.5 * CaptureGuard::RETAKE_NS), None);
        assert!(c.longest_gap_ns > 1.4 * CaptureGuard::RETAKE_NS, "{c:?}");
        assert!(c.disturbed());
        // A shorter one (the host's interruptions, a stall of a few hundred microseconds, one
        // just under a slice) is not worth a retake: the trace drops it
        // ([`CaptureGuard::INTERRUPT_NS`]).
        for ns in [2.0 * CaptureGuard::STALL_NS, 0.9 * CaptureGuard::RETAKE_NS] {
            let c = WindowCheck::of(&with_gap(ns), None);
            assert!(c.longest_gap_ns > 0.99 * ns, "{c:?}");
            assert!(!c.disturbed(), "{c:?}");
        }
        let c = WindowCheck::of(&with_gap(300.0)[..2], Some(SchedAccount::default()));
        assert!(c.longest_gap_ns < 1_000.0, "{c:?}");
        assert!(!c.disturbed());
    }

    #[test]
    fn a_preempted_recording_is_retaken_and_the_clean_one_kept() {
        let c = ctl(Vec::new());
        assert_eq!(step(&c, 100.0, clean()), Slot::Untraced);
        // The first recording was preempted: it does not count, the next window records again,
        // and the clean one replaces it although the preempted one lost less wall time.
        assert_eq!(step(&c, 111.0, preempted()), Slot::Recorded);
        assert_eq!(step(&c, 222.0, clean()), Slot::Recorded);
        {
            let p = c.plan.lock().unwrap();
            assert_eq!((p.untraced, p.recorded, p.guard.retaken), (1, 1, 1));
        }
        let best = c.best.lock().unwrap();
        let (disturbed, _, cpu, _, _) = best.as_ref().expect("a recording kept");
        assert!(!disturbed);
        assert_eq!(*cpu, 222.0);
    }

    #[test]
    fn a_preempted_fallback_window_is_retaken() {
        let c = ctl(vec![&pagelab_mm::alloc::PCP_LOCK]);
        for _ in 0..ROUNDS {
            assert_eq!(step(&c, 100.0, clean()), Slot::Untraced);
            assert_eq!(step(&c, 100.0, clean()), Slot::Recorded);
        }
        let stalled = WindowCheck {
            sched: Some(SchedAccount::default()),
            longest_gap_ns: 3e6,
        };
        assert!(matches!(step(&c, 100.0, stalled), Slot::Fallback(_)));
        assert!(c.fallbacks.lock().unwrap().is_empty());
        assert!(matches!(step(&c, 100.0, clean()), Slot::Fallback(_)));
        assert_eq!(c.fallbacks.lock().unwrap().len(), 1);
        assert!(c.plan.lock().unwrap().next(&c.fallback_classes).is_none());
        let g = c.guard();
        assert_eq!((g.windows, g.retaken, g.kept_preempted), (5, 1, 0));
        assert!(g.longest_gap_ns < 3e6);
    }

    #[test]
    fn past_its_budget_a_fallback_class_keeps_its_least_disturbed_window() {
        let c = ctl(vec![&pagelab_mm::alloc::PCP_LOCK]);
        for _ in 0..ROUNDS {
            step(&c, 100.0, clean());
            step(&c, 100.0, clean());
        }
        let stalled = |gap_ms: f64| WindowCheck {
            sched: Some(SchedAccount::default()),
            longest_gap_ns: gap_ms * 1e6,
        };
        // Each attempt is told apart by its gap, every one long enough to retake
        // (`CaptureGuard::RETAKE_NS`); the second is the least disturbed.
        for gap in [3.0, 1.2, 2.0, 4.0, 1.5] {
            assert!(c.fallbacks.lock().unwrap().is_empty());
            assert!(matches!(step(&c, 100.0, stalled(gap)), Slot::Fallback(_)));
        }
        let kept = c.fallbacks.lock().unwrap();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].1.longest_gap_ns, 1.2e6);
        drop(kept);
        let g = c.guard();
        assert_eq!(
            (g.retaken as usize, g.kept_preempted),
            (FALLBACK_RETAKES, 1)
        );
    }

    #[test]
    fn past_the_budget_the_least_disturbed_recording_is_kept_and_reported() {
        let c = ctl(Vec::new());
        let mut taken = 0;
        loop {
            let next = c.plan.lock().unwrap().next(&c.fallback_classes);
            let Some(p) = next else { break };
            taken += 1;
            assert!(taken < 100, "the plan never ended");
            let check = if p == Slot::Untraced {
                clean()
            } else {
                preempted()
            };
            c.accept(p, Vec::new(), 1000.0 + taken as f64, 100.0, check);
        }
        let g = c.guard();
        assert_eq!(g.retaken as usize, RETAKES);
        assert_eq!(g.windows as usize, RETAKES + ROUNDS);
        assert_eq!(g.kept_preempted, 1);
        assert_eq!(g.nivcsw, 1);
        assert!(
            g.describe().contains("1 kept preempted"),
            "{}",
            g.describe()
        );
    }

    #[test]
    fn this_hosts_scheduler_account_is_read() {
        // Linux with CONFIG_SCHED_INFO (every distribution kernel): the account is there, and
        // only grows.
        let a = SchedAccount::now().expect("/proc/thread-self/schedstat and status");
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = SchedAccount::now().expect("read twice");
        assert_eq!(b.since(a).nivcsw, b.nivcsw - a.nivcsw);
        assert!(b.run_delay_ns >= a.run_delay_ns);
    }
}
