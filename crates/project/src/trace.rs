//! The trace: what one task did to shared resources, operation by operation, and the time it
//! computed in between, as the projector replays it.
//!
//! A trace is built from the raw events `pagelab_sync::trace` records on the capturing thread
//! ([`Trace::from_raw`]): lock and line addresses become small instance numbers with their
//! class, scope and lock algorithm; the gaps between events become compute time, less the
//! measured cost of recording an event; memory writes keep their size (replay costs them by the
//! target's bandwidth) and trap events mark the page-fault exceptions the engine does not pay.
//!
//! # File format (`.pltrace`)
//!
//! ```text
//! magic      8 bytes  "PLTRACE8"
//! header     u32 LE length, then that many bytes of JSON: TraceMeta and the instance table
//! events     u64 LE count, then per event a tag byte and LEB128 varints:
//!              0 compute   tenths of a nanosecond
//!              1 acquire   instance, flags (bit 0 shared, bit 1 trylock)
//!              2 release   instance, flags
//!              3 atomic    instance
//!              4 write     bytes, host tenths of a nanosecond
//!              5 trap
//!              6 tlb flush instance
//!              7 ops       count
//!              8 line      instance, flags (bit 0 write; bits 1-2 which line: 0 the
//!                          instance's own, 1 the first entry of the list headed there,
//!                          2 another entry of it)
//!              9 prefetch  instance (a prefetch for writing of its line)
//!             10 store     instance, which line (as the line event's bits 1-2, shifted
//!                          down): a store the CPU does not wait for
//!             11 trap return (the exception's `iretq`, which serializes)
//!             12 downgrade instance (an rwsem's write hold become a read hold)
//!             13 fence     (a locked instruction on a private line, after a store)
//! fallbacks  varint count, then per trylock class: its name (varint length, UTF-8 bytes), a
//!            varint count of segments, and per segment a varint count of events, then those
//!            events encoded as above
//! checksum   u32 LE CRC-32 of everything before it
//! ```
//!
//! Format 8 (magic `PLTRACE8`) holds the line events, the fallback segments, prefetches,
//! stores the CPU does not wait for, each fault's return, rwsem downgrades and the fences
//! after such stores; a file of an older format (1: neither; 2: one of the first two; 3:
//! prefetches recorded as line writes the CPU waited for; 4: every store recorded as a write
//! the CPU waited for; 5: no returns, where the replay waits for a prefetch still in flight;
//! 6: a downgrade recorded as a release and a new read acquire, between which the replay let a
//! waiting writer in; 7: no fences, so the stores under `lru_lock` waited for their lines
//! only at the release) is refused with a one-line error (capture it again), since replaying
//! it would silently leave out shared lines, fallbacks or those waits, stall on prefetches
//! and stores, or reorder an rwsem's holders.
//!
//! # Fallbacks
//!
//! A trylock's success path is in the events like any other lock's. What the engine does when
//! that trylock *fails* is recorded by the capture in extra windows in which the engine is made
//! to fail every trylock of that class ([`pagelab_sync::trace::force_trylock_failure`]): from the
//! failure to the release of the lock the fallback took (the per-VMA lock's fault falls back to
//! `mmap_lock`; a pcp's allocation or free to `zone->lock`). Those stretches are the class's
//! [`Fallback`] segments, in order: the k-th trylock of the class in the events pairs with
//! segment k (modulo their number), since both windows ran the same operations.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::Path;

use pagelab_sync::trace::{self as raw, Access, LockModel, Sym};
use pagelab_sync::{LockClass, RwsemAlgo, Scope};
use serde::{Deserialize, Serialize};

/// What went wrong reading or writing a trace.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}: not a pagelab trace (bad magic)")]
    Magic(String),
    #[error("{0}: the trace is corrupt ({1})")]
    Corrupt(String, String),
    #[error(
        "{0}: trace format {1} is no longer read (this pagelab reads format {FORMAT}); capture it again"
    )]
    Version(String, char),
}

/// How the workload's operations repeat.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Window {
    /// The trace is whole iterations of a loop that runs until stopped (will-it-scale): each
    /// replayed CPU cycles through it from a random point, and throughput is sampled.
    Cycle,
    /// The trace is one task's share of a fixed amount of work started together (pft): each
    /// replayed CPU runs it once; the wall time until the last finishes is the result.
    Once,
}

/// Where the benchmark puts its tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pinning {
    /// will-it-scale: task i bound to core i in hwloc's order (the cores of the first socket,
    /// then the next), wrapping onto the second hardware thread of each core.
    Cores,
    /// Not pinned: the scheduler spreads tasks over nodes, one per core before any core gets
    /// two (mmtests pft).
    Spread,
}

/// What a trace is of, and how it was captured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceMeta {
    pub workload: String,
    pub profile: String,
    /// The profile as run (every key).
    pub profile_toml: String,
    /// The metric an `Ops` event counts (`faults`).
    pub op_unit: String,
    pub window: Window,
    pub pinning: Pinning,
    /// Threads of the workload fault one VMA together (pft with one shared VMA), so a
    /// `vma`-scoped instance is shared in threads mode.
    pub shared_vma: bool,
    /// Virtual CPUs of the capture's kernel (per-CPU sizing such as the percpu counter batch
    /// follows it; captures for a machine use its CPU count).
    pub kernel_cpus: usize,
    /// The capture host's CPU model and its measured clock, which compute times are scaled
    /// from.
    pub host_cpu: String,
    pub host_ghz: f64,
    /// Operations in the trace.
    pub ops: u64,
    /// Events recorded, and the cost of recording one, in nanoseconds (subtracted from every
    /// gap).
    pub raw_events: u64,
    pub overhead_ns_per_event: f64,
    /// CPU time of the traced window, and of the same window run without recording: the
    /// capture overhead is their ratio.
    pub traced_ns: f64,
    pub untraced_ns: f64,
    /// The page writes' time inside the untraced window `untraced_ns` was read from (host
    /// time stamps around each write, nothing recorded): the clearing rate of the run the
    /// trace must add up to, which the traced window's own writes, slowed by the recording
    /// buffer's cache and memory traffic, do not give. Absent in traces made before
    /// 2026-11-25 and in those of a capture that does not time it (then the traced writes
    /// stand in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub untraced_write_ns: Option<f64>,
    /// What recording one event really cost in the traced window, ns: the tight-loop
    /// `overhead_ns_per_event` plus the share of the recording's cache and memory traffic
    /// that the untraced run of the same work says each event added
    /// ([`Trace::from_raw_with_fallbacks`]); every gap lost it. Absent in traces built before
    /// 2026-11-25 (their compute was scaled instead) and when the untraced run left nothing
    /// to take (then `overhead_ns_per_event` was subtracted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_cost_ns: Option<f64>,
    /// The CPU time of the unmaps inside the untraced window `untraced_ns` was read from
    /// (thread CPU time around each `munmap`, nothing recorded). With it, the recording's
    /// cost is taken out of the gaps inside the recorded unmaps so that they add up to this
    /// (`unmap_event_cost_ns`), and out of the other gaps so that they add up to the rest:
    /// recording costs more per event in an unmap than in a fault, and one cost for both
    /// left an unmap, which holds `mmap_lock` for writing, up to 40% longer than it ran.
    /// Absent in traces made before 2026-11-29 and in captures whose windows hold no unmap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub untraced_unmap_ns: Option<f64>,
    /// What recording one event cost inside the recorded unmaps, ns (as `event_cost_ns`
    /// elsewhere); absent when the unmaps were not timed apart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unmap_event_cost_ns: Option<f64>,
    /// The untraced window's spinlock holds, per recorded class, inside unmaps and elsewhere
    /// (`pagelab_sync::trace::time_holds`): the trace's gaps inside each class's holds add up
    /// to its time here, as the unmaps' add up to `untraced_unmap_ns`, because recording adds
    /// work inside holds that is no event (zone->lock's holds in a capture of large-zone-batch
    /// ran 50% longer than untraced, with one cost per event taken out). Empty in traces made
    /// before 2026-11-29 and in captures that did not time their holds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub untraced_holds: Vec<UntracedHold>,
    /// The trace's compute over what the gaps less `overhead_ns_per_event` added up to:
    /// before 2026-11-25 every gap was multiplied by it; since, it is what the in-place
    /// per-event cost (`event_cost_ns`) took out, as a ratio, unless the untraced writes
    /// outlasted the untraced run (then compute and writes are multiplied by it alike).
    /// Multiplied too by a paced round's level factor ([`Trace::scale_compute`]).
    pub compute_scale: f64,
    /// What the capture's preemption guard saw of the recorded windows
    /// ([`crate::capture`]); absent in traces made before it, or built by hand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guard: Option<CaptureGuard>,
    /// Where the compute was set from the comparison's profiles timed side by side
    /// ([`crate::capture::pace`]) rather than from this capture's own untraced window alone;
    /// absent in traces made before 2026-11-29 and in captures made alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paced: Option<PacedCompute>,
    /// Iterations of the workload's loop the trace holds (`Window::Cycle`: a page_fault
    /// capture records two). A replayed CPU's cycle is one iteration's share of the trace, from
    /// a random point of it: one period of the loop, unmap included ([`crate::replay`]). 1 in
    /// traces made before 2026-11-29, whose whole trace was one cycle, and in every other
    /// window.
    #[serde(default = "TraceMeta::one_iteration")]
    pub iterations: u32,
}

/// The compute a trace adds up to, set by pacing ([`crate::capture::RawCapture::pace_to`]):
/// ns an operation.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PacedCompute {
    /// What the capture's own untraced window measured.
    pub measured_ns: f64,
    /// What the trace was given: `relative` times the level of the captures taken with it.
    pub compute_ns: f64,
    /// The profile's compute over the geometric mean of the profiles paced with it (the
    /// median over the rounds).
    pub relative: f64,
    /// Timed turns of each profile.
    pub turns: usize,
    /// The factor the round's level was brought to the quickest round's by
    /// ([`Trace::scale_compute`], `pagelab_project::project::capture_all`): 1 for the
    /// quickest round, and for a trace paced on its own.
    #[serde(default = "one")]
    pub level_scale: f64,
}

fn one() -> f64 {
    1.0
}

impl PacedCompute {
    /// One line for `pagelab trace` and `validate`.
    pub fn describe(&self) -> String {
        let level = if self.level_scale == 1.0 {
            String::new()
        } else {
            format!(
                "; the round's level x {:.3}, to the quickest round's",
                self.level_scale
            )
        };
        format!(
            "compute {:.1} ns per op from {} turns side by side ({:.3} of the paced profiles' geometric mean; this capture's untraced window measured {:.1}{level})",
            self.compute_ns, self.turns, self.relative, self.measured_ns
        )
    }
}

/// One recorded lock class's exclusive spinlock holds in a capture's untraced window, inside
/// the unmaps or elsewhere ([`TraceMeta::untraced_holds`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UntracedHold {
    pub class: String,
    pub in_unmap: bool,
    /// CPU time inside them (holds of other recorded classes nested in them left out), ns,
    /// less the timing's own cost.
    pub ns: f64,
    pub holds: u64,
    /// What recording one event cost inside them in the recorded window, ns, once the trace
    /// is built.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_cost_ns: Option<f64>,
}

/// The scheduler's account of a capture's recorded windows (the main recording and the
/// fallback windows): a window in which the host took the CPU away from the capturing thread
/// holds that time inside whatever the thread was doing, often inside a critical section,
/// and the replay would model it as the engine's own work. The kernel counts each such loss
/// for the thread: `run_delay` (`/proc/thread-self/schedstat`, the time it sat runnable on a
/// run queue, `sched_info` accounting) and its involuntary context switches
/// (`nonvoluntary_ctxt_switches`, `nivcsw`, counted in `__schedule` when a task is switched
/// out while still runnable). A hypervisor's steal and long interrupts show in neither, so
/// the guard also looks for a stall: a gap between two recorded events, or a memory write,
/// of [`CaptureGuard::RETAKE_NS`] or more. Shorter interruptions, down to
/// [`CaptureGuard::INTERRUPT_NS`], are taken out of the trace without a retake.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CaptureGuard {
    /// Recorded windows run (main and fallback), retaken ones included.
    pub windows: u32,
    /// Windows refused and run again because they were preempted or stalled.
    pub retaken: u32,
    /// Windows kept although preempted or stalled: the retake budget ran out.
    pub kept_preempted: u32,
    /// Over the kept windows: time runnable but waiting for a CPU, ns, and involuntary
    /// context switches.
    pub run_delay_ns: u64,
    pub nivcsw: u64,
    /// The longest gap (or write) in the kept windows, ns.
    pub longest_gap_ns: f64,
    /// The scheduler's account was not read (no schedstat on the host, or a round-based
    /// capture, which keeps its fixed order): only stalls were looked for.
    pub unaccounted: bool,
    /// Stalls taken out of the kept windows ([`Trace::from_raw_with_fallbacks`]): compute gaps
    /// dropped and page writes costed at the window's own rate instead.
    #[serde(default)]
    pub stalls_removed: u32,
}

impl CaptureGuard {
    /// A gap at least this long between two events is a stall of the host's in the untimed
    /// windows' hold and write timings ([`pagelab_sync::trace::time_holds`]), which drop it,
    /// and the bound below which a trace's writes give the window's clearing rate
    /// ([`Trace::from_raw_with_fallbacks`]): the engine's fault path records an event every
    /// few hundred nanoseconds, a timer tick's interrupt takes a few microseconds (tens in a
    /// guest, with its VM exits), while a task the scheduler runs instead keeps the CPU for at
    /// least a slice (0.75 ms by default, `sysctl_sched_base_slice`). 100 us lies between the
    /// two by an order of magnitude each way. Recorded windows drop their gaps down to
    /// [`Self::INTERRUPT_NS`], and are retaken only for one of [`Self::RETAKE_NS`].
    pub const STALL_NS: f64 = 100_000.0;

    /// A gap at least this long between two recorded events makes the window one to retake,
    /// as a window the guest's scheduler preempted is: something else ran for a slice (here,
    /// the hypervisor ran another guest on the vCPU), and the caches the recording finds
    /// afterwards are that other work's. Shorter gaps are taken out of the trace
    /// ([`Self::INTERRUPT_NS`]) and the window kept. Until 2026-11-30 every gap of
    /// [`Self::STALL_NS`] was retaken: page_fault1's windows held one of 100 to 300 us often
    /// enough that a capture could spend its whole budget of 16 retakes on them, while the
    /// gaps were dropped from whichever window was kept. Three captures of linux-4.15 in
    /// turns took 3.6, 2.8 and 5.4 s (5, 2 and 16 retakes) with that rule and 2.9, 2.4 and
    /// 2.6 s (2, 0 and 1) with this one (docs/model-history.md, round 41).
    pub const RETAKE_NS: f64 = 1_000_000.0;

    /// A gap at least this long between two recorded events is an interruption of the host's,
    /// and a capture's trace drops it ([`Trace::from_raw_with_fallbacks`]) without retaking
    /// the window. On this 2-vCPU guest a loop that only reads the time-stamp counter (the
    /// `host_stalls` example) lost 2.3 to 3.7% of its time in four runs of 3 s, mostly in
    /// 350 to 630 gaps a second of 20 to 150 us, many at one phase of a 4 ms period (the
    /// guest's timer tick, with its VM exits); 63 to 77% of those gaps were 40 us or longer
    /// and held 81 to 88% of their time. A bare-metal tick takes a microsecond or two. Left
    /// in, such a gap is replayed as the engine's work where it fell, and recording makes it
    /// fall inside critical sections far more often than their share of the engine's time: a
    /// `zone->lock` hold records an event per page it moves, so in one capture of page_fault1
    /// with linux-4.15 half of the 41 gaps of 10 us or more were inside `zone->lock` holds,
    /// which take about 7% of the untraced run (2026-11-30, docs/model.md section 1). The
    /// engine's longest stretch between two recorded events in that capture is an unmap's
    /// zap of one page table's 512 entries, which records nothing until its RSS update: 15 to
    /// 17 us. 40 us is more than twice that. A window holding a gap of [`Self::RETAKE_NS`]
    /// is retaken.
    pub const INTERRUPT_NS: f64 = 40_000.0;

    /// One line for `pagelab trace` and `validate`.
    pub fn describe(&self) -> String {
        format!(
            "{} recorded windows, {} retaken (preempted or stalled), {} kept preempted; kept windows waited {:.1} us for a CPU, {} involuntary switches, longest gap {:.1} us, {} stalls and interruptions taken out{}",
            self.windows,
            self.retaken,
            self.kept_preempted,
            self.run_delay_ns as f64 / 1e3,
            self.nivcsw,
            self.longest_gap_ns / 1e3,
            self.stalls_removed,
            if self.unaccounted {
                " (no scheduler account read: stalls only)"
            } else {
                ""
            }
        )
    }
}

impl TraceMeta {
    fn one_iteration() -> u32 {
        1
    }

    /// Traced over untraced wall time, less one: what recording cost.
    pub fn capture_overhead(&self) -> f64 {
        self.traced_ns / self.untraced_measured_ns() - 1.0
    }

    /// The untraced window's time as measured: `untraced_ns` unless pacing replaced its
    /// compute ([`PacedCompute`]).
    pub fn untraced_measured_ns(&self) -> f64 {
        match self.paced {
            Some(p) => self.untraced_ns - (p.compute_ns - p.measured_ns) * self.ops as f64,
            None => self.untraced_ns,
        }
    }
}

/// One lock or shared line the task touched.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Instance {
    /// Its class name (`zone->lock`).
    pub class: String,
    #[serde(with = "scope_serde")]
    pub scope: Scope,
    #[serde(with = "model_serde")]
    pub model: LockModel,
    /// Waiters sleep (rwsem) rather than spin.
    pub sleeps: bool,
    /// For an rwsem (`model` = `rwsem`): the era's waiting algorithm, from the profile's
    /// `locks.rwsem`. Absent in traces made before it was recorded: the replay then takes
    /// `sleep-fifo` for a sleeping class and FIFO spinning for another.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "rwsem_serde")]
    pub rwsem: Option<RwsemAlgo>,
}

/// What the engine did when a trylock of one class failed: one segment per recorded failure,
/// from the failure to the release of the lock taken instead (module docs).
#[derive(Clone, Debug, PartialEq)]
pub struct Fallback {
    /// The trylock's class name (`vma lock`, `pcp->lock`).
    pub class: String,
    pub segments: Vec<Vec<Event>>,
}

/// One event of a trace.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Event {
    /// Computing for this many nanoseconds on the capture host.
    Compute {
        ns: f64,
    },
    Acquire {
        inst: u32,
        shared: bool,
        trylock: bool,
    },
    Release {
        inst: u32,
        shared: bool,
    },
    /// An rwsem held for write by this task becomes held for read (`downgrade_write`): one
    /// atomic on its count, and no writer can take the lock in between.
    Downgrade {
        inst: u32,
    },
    /// An atomic read-modify-write of a shared line.
    Atomic {
        inst: u32,
    },
    /// `bytes` written to memory (`host_ns` is what it took on the capture host).
    Write {
        bytes: u32,
        host_ns: f64,
    },
    /// A page-fault exception.
    Trap,
    /// The exception's return to user space (`iretq`), which serializes: the replay makes the
    /// CPU wait there for a prefetch still in flight.
    TrapReturn,
    /// A TLB flush of the mm `inst`.
    TlbFlush {
        inst: u32,
    },
    /// `n` operations completed.
    Ops {
        n: u32,
    },
    /// A plain read or write of a shared line: the instance's own, or one `sym` names
    /// relative to the list head at the instance (resolved at replay).
    Line {
        inst: u32,
        write: bool,
        sym: Sym,
    },
    /// A prefetch for writing of the instance's own line: taken from the other CPUs as by a
    /// store, while the CPU goes on (`pagelab_sync::trace::Kind::Prefetch`).
    Prefetch {
        inst: u32,
    },
    /// A store to a shared line that the CPU does not wait for: it waits in the store buffer
    /// while its line comes, and a lock's release or a locked instruction waits for it
    /// (`pagelab_sync::trace::Kind::Store`).
    Store {
        inst: u32,
        sym: Sym,
    },
    /// A locked instruction on a line no other CPU meets (a page's own count or flags), after
    /// a store: the CPU waits there until its buffered stores have their lines
    /// (`pagelab_sync::trace::Kind::Fence`).
    Fence,
}

/// A whole trace.
#[derive(Clone, Debug, PartialEq)]
pub struct Trace {
    pub meta: TraceMeta,
    pub instances: Vec<Instance>,
    pub events: Vec<Event>,
    /// Per trylock class, the engine's path when the trylock fails (module docs).
    pub fallbacks: Vec<Fallback>,
}

#[derive(Serialize, Deserialize)]
struct Header {
    meta: TraceMeta,
    instances: Vec<Instance>,
}

/// The class name under which a pair trace keeps its receiver's turns among the fallbacks
/// ([`Trace::from_raw_pair`]); no lock class has it.
pub const PAIR_RECEIVER: &str = "pair receiver";

/// The format this version writes and reads (the magic's last character).
const FORMAT: char = '8';
const MAGIC: &[u8; 8] = b"PLTRACE8";

/// Turns raw events into trace events, interning lock addresses as instances.
struct Builder {
    tpn: f64,
    /// What recording cost per event, taken out of every gap of each stretch
    /// ([`Where::stretch`]): the rest of the run, the unmaps, then each timed hold of
    /// `TraceMeta::untraced_holds`.
    overheads: Vec<f64>,
    /// The timed holds' (class, inside an unmap), in `TraceMeta::untraced_holds`' order.
    holds: Vec<(String, bool)>,
    /// A capture's recording (one with a guard) drops every gap of
    /// [`CaptureGuard::INTERRUPT_NS`] or more: the host's, not the engine's.
    drop_stalls: bool,
    /// Gaps dropped so far.
    stalls: u32,
    ids: HashMap<(usize, *const LockClass), u32>,
    instances: Vec<Instance>,
}

/// The stretches every recording has: the rest of the run, and the unmaps.
const REST: usize = 0;
const UNMAP: usize = 1;

/// Where the task is while a recording is converted: inside an unmap or not
/// ([`raw::Kind::Unmap`]), and inside which spinlock holds (innermost last).
#[derive(Default)]
struct Where {
    in_unmap: bool,
    open: Vec<&'static str>,
}

impl Where {
    /// After event `e`: the unmap marks, and the spinlock holds it opens or closes.
    fn update(&mut self, e: &raw::Event) {
        let spin = matches!(e.model, LockModel::Ticket | LockModel::Queued);
        match e.kind {
            raw::Kind::Unmap { begin } => self.in_unmap = begin,
            raw::Kind::Acquire {
                access: Access::Exclusive,
                ..
            } if spin => self.open.push(e.class.name),
            raw::Kind::Release {
                access: Access::Exclusive,
            } if spin => {
                if let Some(i) = self.open.iter().rposition(|&c| c == e.class.name) {
                    self.open.remove(i);
                }
            }
            _ => {}
        }
    }

    /// The stretch a gap here belongs to: the innermost spinlock hold, if its class's holds
    /// were timed where the task is (`holds`, inside an unmap or not), else the unmaps or the
    /// rest. The untraced timing counts each moment in the innermost hold open, as this does
    /// ([`raw::time_holds`]).
    fn stretch(&self, holds: &[(String, bool)]) -> usize {
        if let Some(&top) = self.open.last()
            && let Some(i) = holds
                .iter()
                .position(|(c, u)| c == top && *u == self.in_unmap)
        {
            return 2 + i;
        }
        if self.in_unmap { UNMAP } else { REST }
    }
}

impl Builder {
    /// A builder for a recording on this host whose events cost `meta`'s overhead each.
    fn new(meta: &TraceMeta) -> Builder {
        let holds: Vec<(String, bool)> = meta
            .untraced_holds
            .iter()
            .map(|h| (h.class.clone(), h.in_unmap))
            .collect();
        Builder {
            tpn: raw::ticks_per_ns(),
            overheads: vec![meta.overhead_ns_per_event; 2 + holds.len()],
            holds,
            drop_stalls: meta.guard.is_some(),
            stalls: 0,
            ids: HashMap::new(),
            instances: Vec::new(),
        }
    }

    fn intern(&mut self, e: &raw::Event) -> u32 {
        let instances = &mut self.instances;
        let id = *self
            .ids
            .entry((e.instance, e.class as *const LockClass))
            .or_insert_with(|| {
                instances.push(Instance {
                    class: e.class.name.to_string(),
                    scope: e.class.scope,
                    model: e.model,
                    sleeps: e.class.sleeps,
                    rwsem: None,
                });
                (instances.len() - 1) as u32
            });
        // A lock word may first appear as a plain line (an rwsem count read before its
        // compare-and-exchange); the lock's own events say what algorithm it is.
        let i = &mut instances[id as usize];
        if i.model == LockModel::Line && e.model != LockModel::Line {
            i.model = e.model;
        }
        id
    }

    /// The main recording's and its fallback windows' events, converted.
    fn build(
        &mut self,
        events: &[raw::Event],
        fallback_windows: &[Vec<raw::Event>],
    ) -> (Vec<Event>, Vec<Fallback>) {
        let mut out: Vec<Event> = Vec::with_capacity(events.len() * 2);
        self.convert(events, None, &mut out);
        let mut fallbacks: Vec<Fallback> = Vec::new();
        for w in fallback_windows {
            for (class, seg) in fallback_segments(w) {
                let mut evs = Vec::with_capacity(seg.len() * 2);
                self.convert(&seg[1..], Some(seg[0].t), &mut evs);
                match fallbacks.iter_mut().find(|f| f.class == class) {
                    Some(f) => f.segments.push(evs),
                    None => fallbacks.push(Fallback {
                        class: class.to_string(),
                        segments: vec![evs],
                    }),
                }
            }
        }
        (out, fallbacks)
    }

    /// The gaps `convert` turns into compute, each less the overhead of its stretch, by
    /// stretch; with `guarded`, not those a capture's stall removal drops.
    fn gaps(&self, events: &[raw::Event], guarded: bool) -> Vec<Vec<f64>> {
        let mut prev: Option<u64> = None;
        let mut out = vec![Vec::new(); self.overheads.len()];
        let mut at = Where::default();
        for e in events {
            if let Some(p) = prev {
                let k = at.stretch(&self.holds);
                let raw = e.t.saturating_sub(p) as f64 / self.tpn;
                // Judged before the recording's cost comes off, as `convert` judges it, so
                // that a build with a larger cost drops the same gaps.
                if !(guarded && raw >= CaptureGuard::INTERRUPT_NS) {
                    out[k].push((raw - self.overheads[k]).max(0.0));
                }
            }
            prev = Some(match e.kind {
                raw::Kind::Write { end, .. } => end,
                _ => e.t,
            });
            at.update(e);
        }
        out
    }

    /// Appends `events` to `out`, the gap before each (from `prev`, the time stamp the
    /// stretch starts at) as compute less the recording overhead. Returns the operations
    /// counted. A trylock failure marker and an unmap mark become no event (their gaps stay
    /// compute).
    fn convert(
        &mut self,
        events: &[raw::Event],
        mut prev: Option<u64>,
        out: &mut Vec<Event>,
    ) -> u64 {
        let mut ops = 0u64;
        let mut section = Section::default();
        let mut at = Where::default();
        // Whether a store was kept since the last event that drains the store buffer.
        let mut store_kept = false;
        for e in events {
            if let Some(p) = prev {
                let raw = e.t.saturating_sub(p) as f64 / self.tpn;
                // A stall is dropped here, one gap at a time: once gaps are merged into one
                // compute event (around an event that records nothing, or a repeat), a
                // stretch of ordinary gaps can add up to more than a stall. It is judged by
                // the gap as recorded, before the recording's cost comes off.
                if self.drop_stalls && raw >= CaptureGuard::INTERRUPT_NS {
                    self.stalls += 1;
                } else {
                    push_compute(
                        out,
                        (raw - self.overheads[at.stretch(&self.holds)]).max(0.0),
                    );
                }
            }
            prev = Some(match e.kind {
                raw::Kind::Write { end, .. } => end,
                _ => e.t,
            });
            at.update(e);
            let ev = match e.kind {
                raw::Kind::Unmap { .. } => None,
                raw::Kind::Acquire { access, trylock } => Some(Event::Acquire {
                    inst: self.intern(e),
                    shared: access == Access::Shared,
                    trylock,
                }),
                raw::Kind::Release { access } => Some(Event::Release {
                    inst: self.intern(e),
                    shared: access == Access::Shared,
                }),
                raw::Kind::Downgrade => Some(Event::Downgrade {
                    inst: self.intern(e),
                }),
                raw::Kind::TrylockFail { .. } => None,
                raw::Kind::Atomic => Some(Event::Atomic {
                    inst: self.intern(e),
                }),
                raw::Kind::Write { bytes, end } => Some(Event::Write {
                    bytes,
                    host_ns: end.saturating_sub(e.t) as f64 / self.tpn,
                }),
                raw::Kind::Trap => Some(Event::Trap),
                raw::Kind::TrapReturn => Some(Event::TrapReturn),
                raw::Kind::TlbFlush => Some(Event::TlbFlush {
                    inst: self.intern(e),
                }),
                raw::Kind::Ops(n) => {
                    ops += u64::from(n);
                    Some(Event::Ops { n })
                }
                raw::Kind::Line { write, sym } => Some(Event::Line {
                    inst: self.intern(e),
                    write,
                    sym,
                }),
                raw::Kind::Prefetch => Some(Event::Prefetch {
                    inst: self.intern(e),
                }),
                raw::Kind::Store { sym } => Some(Event::Store {
                    inst: self.intern(e),
                    sym,
                }),
                // Only after a store kept in the trace can it wait for anything.
                raw::Kind::Fence => store_kept.then_some(Event::Fence),
            };
            let Some(ev) = ev else { continue };
            if section.repeats(&ev) {
                continue;
            }
            match ev {
                Event::Store { .. } => store_kept = true,
                Event::Acquire { .. }
                | Event::Release { .. }
                | Event::Downgrade { .. }
                | Event::Atomic { .. }
                | Event::TlbFlush { .. }
                | Event::Fence => store_kept = false,
                _ => {}
            }
            out.push(ev);
        }
        ops
    }
}

/// The extra cost per recorded event, beyond the tight-loop overhead already taken out of
/// `gaps`, that makes the gaps add up to `target` ns: the `x` for which the sum of
/// `max(0, gap - x)` is `target` (a gap shorter than an event's cost holds no compute). That
/// sum falls steadily with `x`, so it is found by bisection. An error in `target` (the
/// untraced run's noise) then moves each gap by that error over the number of events, where
/// scaling every gap by `target` over their sum moved a gap in proportion to its length.
fn extra_event_cost(gaps: &[f64], target: f64) -> f64 {
    let left = |x: f64| gaps.iter().map(|g| (g - x).max(0.0)).sum::<f64>();
    if left(0.0) <= target {
        return 0.0;
    }
    let (mut lo, mut hi) = (0.0, gaps.iter().copied().fold(0.0, f64::max));
    for _ in 0..100 {
        let mid = 0.5 * (lo + hi);
        if left(mid) > target {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// What each stretch's gaps must add up to ([`Where::stretch`]): each timed class's holds
/// their untraced time, the unmaps theirs less the holds timed inside them, the rest what is
/// left of `target`; all scaled as the pacing scaled the window's compute (`PacedCompute`:
/// they are compute, with no page writes). Recording only adds work, so a stretch whose gaps
/// already add up to less than its untraced time (the untraced one ran slowly) keeps them,
/// and the rest takes the difference; if the rest's gaps cannot, the others take it back as
/// far as theirs go. `None` when nothing was timed apart (then one cost per event is taken
/// out of every gap).
fn stretch_targets(meta: &TraceMeta, gaps: &[Vec<f64>], target: f64) -> Option<Vec<f64>> {
    let timed = meta.untraced_unmap_ns.is_some() && !gaps[UNMAP].is_empty();
    if !timed && meta.untraced_holds.is_empty() {
        return None;
    }
    let pace = meta
        .paced
        .filter(|p| p.measured_ns > 0.0)
        .map_or(1.0, |p| p.compute_ns / p.measured_ns);
    let sums: Vec<f64> = gaps.iter().map(|g| g.iter().sum()).collect();
    let mut want = vec![0.0; gaps.len()];
    let mut in_unmaps = 0.0;
    for (i, h) in meta.untraced_holds.iter().enumerate() {
        want[2 + i] = h.ns * pace;
        if h.in_unmap {
            in_unmaps += h.ns * pace;
        }
    }
    if timed {
        let unmaps = meta.untraced_unmap_ns.unwrap_or(0.0) * pace;
        want[UNMAP] = (unmaps - in_unmaps).max(0.0);
    } else {
        want[UNMAP] = sums[UNMAP];
    }
    for k in 1..want.len() {
        want[k] = want[k].min(sums[k]).max(0.0);
    }
    let others: f64 = want[1..].iter().sum();
    want[REST] = (target - others).max(0.0);
    let mut short = want[REST] - sums[REST];
    if short > 0.0 {
        want[REST] = sums[REST];
        for k in 1..want.len() {
            let room = sums[k] - want[k];
            let take = room.min(short);
            want[k] += take;
            short -= take;
        }
    }
    Some(want)
}

/// Takes the stalled page writes (module docs of [`CaptureGuard`]) out of `events`, costing
/// each at the window's own clearing rate; returns how many. (Stalled gaps are dropped by
/// [`Builder::convert`], before any merging of gaps.)
///
/// A write is stalled when it took [`CaptureGuard::INTERRUPT_NS`] longer than its bytes take
/// at the window's rate, so that a write is judged by what it lost, not by its size (the
/// engine writes 4 KiB at a time today). The rate is taken first from the writes under
/// [`CaptureGuard::STALL_NS`], then again from those not found stalled, and the stalled
/// ones are costed at the second; with no write to take a rate from, none is changed.
fn remove_stalls(out: &mut [Event], fallbacks: &mut [Fallback]) -> u32 {
    fn writes<'a>(
        out: &'a [Event],
        fallbacks: &'a [Fallback],
    ) -> impl Iterator<Item = (f64, f64)> + 'a {
        out.iter()
            .chain(fallbacks.iter().flat_map(|f| f.segments.iter().flatten()))
            .filter_map(|e| match *e {
                Event::Write { bytes, host_ns } => Some((f64::from(bytes), host_ns)),
                _ => None,
            })
    }
    let rate = |keep: &dyn Fn(f64, f64) -> bool| {
        let (bytes, ns) = writes(out, fallbacks)
            .filter(|&(b, ns)| keep(b, ns))
            .fold((0.0, 0.0), |(b, n), (b1, n1)| (b + b1, n + n1));
        if bytes > 0.0 { ns / bytes } else { 0.0 }
    };
    let first = rate(&|_, ns| ns < CaptureGuard::STALL_NS);
    let stalled = move |bytes: f64, ns: f64| ns >= first * bytes + CaptureGuard::INTERRUPT_NS;
    let per_byte = rate(&|b, ns| !stalled(b, ns));
    if first <= 0.0 || per_byte <= 0.0 {
        return 0;
    }
    let mut n = 0;
    let all = out.iter_mut().chain(
        fallbacks
            .iter_mut()
            .flat_map(|f| f.segments.iter_mut().flatten()),
    );
    for e in all {
        if let Event::Write { bytes, host_ns } = e
            && stalled(f64::from(*bytes), *host_ns)
        {
            *host_ns = per_byte * f64::from(*bytes);
            n += 1;
        }
    }
    n
}

/// The fallback stretches of a recording made with a class's trylocks forced to fail: from
/// each failure marker to the release that leaves the locks taken since at none (the end of
/// the fallback lock's hold). A stretch that reaches an operation's end, another failure or
/// a release of something held before it, without taking a lock, is cut there.
fn fallback_segments(events: &[raw::Event]) -> Vec<(&'static str, &[raw::Event])> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < events.len() {
        let e = &events[i];
        if !matches!(e.kind, raw::Kind::TrylockFail { .. }) {
            i += 1;
            continue;
        }
        let (mut depth, mut took, mut end) = (0i64, false, i + 1);
        while end < events.len() {
            match events[end].kind {
                raw::Kind::Acquire { .. } => {
                    depth += 1;
                    took = true;
                }
                raw::Kind::Release { .. } if depth == 0 => break,
                raw::Kind::Release { .. } => depth -= 1,
                raw::Kind::TrylockFail { .. } | raw::Kind::Ops(_) if depth == 0 => break,
                _ => {}
            }
            end += 1;
            if took && depth == 0 {
                break;
            }
        }
        if took && depth == 0 {
            // Marker first: its time stamp starts the first gap.
            out.push((e.class.name, &events[i..end]));
        }
        i = end.max(i + 1);
    }
    out
}

impl Trace {
    /// Multiplies every compute event (the fallbacks' too) by `f`: the engine ran `f` times
    /// as fast or slow, with everything else (writes, events, locks) as recorded. A paced
    /// trace records the factor ([`PacedCompute::level_scale`]) and its new compute per
    /// operation. `f` must be finite and positive.
    pub fn scale_compute(&mut self, f: f64) {
        assert!(f.is_finite() && f > 0.0, "compute scale {f}");
        let segments = self
            .fallbacks
            .iter_mut()
            .flat_map(|f| f.segments.iter_mut());
        for e in self.events.iter_mut().chain(segments.flatten()) {
            if let Event::Compute { ns } = e {
                *ns *= f;
            }
        }
        self.meta.compute_scale *= f;
        if let Some(p) = self.meta.paced.as_mut() {
            // What the trace adds up to moves with it; what was measured does not
            // ([`TraceMeta::untraced_measured_ns`]).
            self.meta.untraced_ns += (f - 1.0) * p.compute_ns * self.meta.ops as f64;
            p.compute_ns *= f;
            p.level_scale *= f;
        }
    }

    /// Builds a trace from what `pagelab_sync::trace` recorded. `meta.raw_events` and
    /// `meta.ops` are filled in here; the gaps lose `meta.overhead_ns_per_event` each.
    pub fn from_raw(meta: TraceMeta, events: &[raw::Event]) -> Trace {
        Trace::from_raw_with_fallbacks(meta, events, &[])
    }

    /// [`Trace::from_raw`] with the recordings of fallback windows (each made with one
    /// class's trylocks forced to fail): their failure stretches become the trace's
    /// [`Fallback`]s, their compute scaled as the main events' is.
    pub fn from_raw_with_fallbacks(
        mut meta: TraceMeta,
        events: &[raw::Event],
        fallback_windows: &[Vec<raw::Event>],
    ) -> Trace {
        let mut b = Builder::new(&meta);
        let (mut out, mut fallbacks) = b.build(events, fallback_windows);
        meta.raw_events = events.len() as u64;
        meta.ops = out
            .iter()
            .map(|e| match *e {
                Event::Ops { n } => u64::from(n),
                _ => 0,
            })
            .sum();
        // A capture's trace (one with a guard) loses its stalls: a gap of `INTERRUPT_NS` or
        // more, or a page write that long beyond its bytes' time, is the host's (an
        // interruption, steal, preemption), not the engine's work. Left in, it is replayed as
        // work inside whatever lock the thread held, and a preempted page write shrinks the
        // compute the scaling below leaves. A stalled gap is dropped (the engine's few instructions in it
        // are then spread by the scaling); a stalled write is costed at the window's own
        // clearing rate. (The gaps were dropped as they were converted, by the builder.)
        if let Some(g) = meta.guard.as_mut() {
            g.stalls_removed = b.stalls + remove_stalls(&mut out, &mut fallbacks);
        }
        // What recording costs beyond the tight-loop overhead (the buffer's stores, a
        // kilobyte a fault, evicting the engine's lines and taking memory bandwidth) is a cost
        // per recorded event too, so it is taken out per event: the untraced run of the same
        // work, less its own page writes, is what the main recording's gaps must add up to,
        // and each event's recording costs the same extra to get there.
        let sums = |out: &[Event]| {
            out.iter().fold((0.0, 0.0), |(c, w), e| match *e {
                Event::Compute { ns } => (c + ns, w),
                Event::Write { host_ns, .. } => (c, w + host_ns),
                _ => (c, w),
            })
        };
        let (compute, writes) = sums(&out);
        meta.compute_scale = 1.0;
        meta.event_cost_ns = None;
        // The untraced window's writes, from the same run as its CPU time; older captures
        // only have the traced window's, which the recording slowed.
        let untraced_writes = meta.untraced_write_ns.unwrap_or(writes);
        let target = meta.untraced_ns - untraced_writes;
        meta.unmap_event_cost_ns = None;
        for h in &mut meta.untraced_holds {
            h.event_cost_ns = None;
        }
        if target > 0.0 && compute > target {
            let guarded = meta.guard.is_some();
            let gaps = b.gaps(events, guarded);
            let mut b2 = Builder::new(&meta);
            match stretch_targets(&meta, &gaps, target) {
                // The unmaps, each timed class's holds and the rest each add up to their own
                // untraced time.
                Some(want) => {
                    for (k, t) in want.iter().enumerate() {
                        b2.overheads[k] += extra_event_cost(&gaps[k], *t);
                    }
                    if !gaps[UNMAP].is_empty() {
                        meta.unmap_event_cost_ns = Some(b2.overheads[UNMAP]);
                    }
                    for (i, h) in meta.untraced_holds.iter_mut().enumerate() {
                        if !gaps[2 + i].is_empty() {
                            h.event_cost_ns = Some(b2.overheads[2 + i]);
                        }
                    }
                }
                None => {
                    let all: Vec<f64> = gaps.iter().flatten().copied().collect();
                    let extra = extra_event_cost(&all, target);
                    for o in &mut b2.overheads {
                        *o += extra;
                    }
                }
            }
            let (o, fb) = b2.build(events, fallback_windows);
            (out, fallbacks) = (o, fb);
            b = b2;
            if let Some(g) = meta.guard.as_mut() {
                g.stalls_removed = b.stalls + remove_stalls(&mut out, &mut fallbacks);
            }
            meta.event_cost_ns = Some(b.overheads[REST]);
            meta.compute_scale = sums(&out).0 / compute;
        } else if meta.paced.is_some() && target > compute && compute > 0.0 {
            // A paced capture whose compute the pacing puts above what its traced window
            // holds: the traced window ran on a faster stretch of the host than the pacing's
            // rounds. A drift is a change of speed, so every gap takes it in proportion.
            let f = target / compute;
            meta.compute_scale = f;
            let segments = fallbacks.iter_mut().flat_map(|f| f.segments.iter_mut());
            for e in out.iter_mut().chain(segments.flatten()) {
                if let Event::Compute { ns } = e {
                    *ns *= f;
                }
            }
        } else if target <= 0.0 && meta.untraced_ns > 0.0 && compute + writes > 0.0 {
            // The untraced CPU time does not even cover the writes: the traced window was
            // preempted during its writes as well (clearing a page takes the same CPU time
            // traced or not), so every measured time in it is scaled alike, writes
            // included: leaving the compute whole would hand the replay the host's
            // preemption as compute.
            // Recording only adds work: never scaled up (an untraced window whose timed
            // writes came out at its whole CPU time is noise in that timing, not a traced
            // window slower than the truth).
            let f = (meta.untraced_ns / (compute + writes)).min(1.0);
            meta.compute_scale = f;
            let segments = fallbacks.iter_mut().flat_map(|f| f.segments.iter_mut());
            for e in out.iter_mut().chain(segments.flatten()) {
                match e {
                    Event::Compute { ns } => *ns *= f,
                    Event::Write { host_ns, .. } => *host_ns *= f,
                    _ => {}
                }
            }
        }
        // Otherwise the untraced run is at least as long as the traced compute: recording
        // only ever adds work, so the untraced windows were the slow ones (the host ran the
        // task slowly then), and the compute is kept as measured.
        //
        // The writes take the untraced run's clearing rate when it was timed: the traced
        // window's writes are slowed by the recording (the buffer's traffic) and by whatever
        // the host did meanwhile, and the trace adds up to the untraced run either way.
        if let Some(w) = meta.untraced_write_ns
            && target > 0.0
        {
            let traced = sums(&out).1;
            if traced > 0.0 && w > 0.0 {
                let f = w / traced;
                let segments = fallbacks.iter_mut().flat_map(|f| f.segments.iter_mut());
                for e in out.iter_mut().chain(segments.flatten()) {
                    if let Event::Write { host_ns, .. } = e {
                        *host_ns *= f;
                    }
                }
            }
        }
        Trace {
            meta,
            instances: b.instances,
            events: out,
            fallbacks,
        }
    }

    /// A sender/receiver pair's trace (netpipe, [`crate::netpipe`]): `sender` is what the
    /// sender's CPU did, its events the trace's; `receiver_turns` the receiver's, one stretch
    /// per turn (each turn reads the whole queue), kept as the segments of a [`Fallback`] of
    /// the reserved class [`PAIR_RECEIVER`] (no instance has that class, so no trylock ever
    /// takes it). Each stretch's time stamps run on the recording thread's clock with the
    /// other side's turns cut out. One instance table serves both sides, so that a lock or line
    /// both touch (`zone->lock`, the socket's lines) is one instance. The compute of both is
    /// scaled so that the two add up to `meta.untraced_ns`, as [`Trace::from_raw`] does for one
    /// task; `meta.ops` counts the sender's messages.
    pub fn from_raw_pair(
        mut meta: TraceMeta,
        sender: &[raw::Event],
        receiver_turns: &[Vec<raw::Event>],
    ) -> Trace {
        let mut b = Builder::new(&meta);
        let mut out: Vec<Event> = Vec::with_capacity(sender.len() * 2);
        let ops = b.convert(sender, None, &mut out);
        let segments: Vec<Vec<Event>> = receiver_turns
            .iter()
            .map(|turn| {
                let mut evs = Vec::with_capacity(turn.len() * 2);
                b.convert(turn, None, &mut evs);
                evs
            })
            .collect();
        meta.raw_events =
            (sender.len() + receiver_turns.iter().map(Vec::len).sum::<usize>()) as u64;
        meta.ops = ops;
        // A captured pair (one with a guard) loses the host's interruptions as one task's
        // capture does (`from_raw_with_fallbacks`): the builder dropped each gap of
        // `INTERRUPT_NS` or more as it converted both sides.
        if let Some(g) = meta.guard.as_mut() {
            g.stalls_removed = b.stalls;
        }
        let compute: f64 = out
            .iter()
            .chain(segments.iter().flatten())
            .map(|e| match *e {
                Event::Compute { ns } => ns,
                _ => 0.0,
            })
            .sum();
        // Recording only adds work (see from_raw_with_fallbacks): never scale up.
        let f = if meta.untraced_ns > 0.0 && compute > 0.0 {
            (meta.untraced_ns / compute).min(1.0)
        } else {
            1.0
        };
        meta.compute_scale = f;
        let mut segments = segments;
        for e in out.iter_mut().chain(segments.iter_mut().flatten()) {
            if let Event::Compute { ns } = e {
                *ns *= f;
            }
        }
        Trace {
            meta,
            instances: b.instances,
            events: out,
            fallbacks: vec![Fallback {
                class: PAIR_RECEIVER.to_string(),
                segments,
            }],
        }
    }

    /// A pair trace's receiver turns ([`Trace::from_raw_pair`]); `None` for one task's trace.
    pub fn receiver_turns(&self) -> Option<&[Vec<Event>]> {
        self.fallbacks
            .iter()
            .find(|f| f.class == PAIR_RECEIVER && !f.segments.is_empty())
            .map(|f| f.segments.as_slice())
    }

    /// Gives every rwsem instance the era's algorithm (the profile's `locks.rwsem`).
    pub fn set_rwsem(&mut self, algo: RwsemAlgo) {
        for i in &mut self.instances {
            if i.model == LockModel::RwSem {
                i.rwsem = Some(algo);
            }
        }
    }

    /// Sum of compute and host write time: what the trace says one task took on the host.
    pub fn host_ns(&self) -> f64 {
        self.events
            .iter()
            .map(|e| match *e {
                Event::Compute { ns } => ns,
                Event::Write { host_ns, .. } => host_ns,
                _ => 0.0,
            })
            .sum()
    }

    /// Events per operation, by kind, and per instance class: what `pagelab trace show`
    /// prints.
    pub fn summary(&self) -> String {
        use std::fmt::Write as _;
        let ops = self.meta.ops.max(1) as f64;
        let mut s = String::new();
        let m = &self.meta;
        let _ = writeln!(
            s,
            "{} on the engine with {} ({} {}; {} events; captured on {} at {:.2} GHz)",
            m.workload,
            m.profile,
            m.ops,
            m.op_unit,
            self.events.len(),
            m.host_cpu,
            m.host_ghz
        );
        let _ = writeln!(
            s,
            "host time {:.1} ns per op (untraced {:.1}, of which writes {}; traced {:.1}); capture overhead {:+.1}%; {}",
            self.host_ns() / ops,
            m.untraced_measured_ns() / ops,
            m.untraced_write_ns
                .map_or("not timed".to_string(), |w| format!("{:.1}", w / ops)),
            m.traced_ns / ops,
            100.0 * m.capture_overhead(),
            match m.event_cost_ns {
                Some(c) => format!(
                    "{c:.1} ns per recorded event subtracted ({:.1} in a tight loop, the rest the recording's cost in place), compute {:.3} of the gaps less the tight-loop cost",
                    m.overhead_ns_per_event, m.compute_scale
                ),
                None => format!(
                    "{:.1} ns per recorded event subtracted, compute then scaled by {:.3}",
                    m.overhead_ns_per_event, m.compute_scale
                ),
            }
        );
        for h in &m.untraced_holds {
            if let Some(c) = h.event_cost_ns {
                let _ = writeln!(
                    s,
                    "{} holds{} timed apart: {} holds, {:.1} ns each untraced, {c:.1} ns per recorded event subtracted inside them",
                    h.class,
                    if h.in_unmap { " in unmaps" } else { "" },
                    h.holds,
                    h.ns / h.holds.max(1) as f64
                );
            }
        }
        if let (Some(u), Some(c)) = (m.untraced_unmap_ns, m.unmap_event_cost_ns) {
            let _ = writeln!(
                s,
                "unmaps timed apart: {:.1} ns per op untraced, {c:.1} ns per recorded event subtracted inside them",
                u / ops
            );
        }
        if let Some(p) = &m.paced {
            let _ = writeln!(s, "paced: {}", p.describe());
        }
        if let Some(g) = &m.guard {
            let _ = writeln!(s, "preemption guard: {}", g.describe());
        }
        // Per class: acquires, atomics, TLB flushes, line reads, line writes the CPU waits for,
        // of which (with stores) symbolic (an entry of a list, resolved at replay), prefetches
        // for writing, stores it does not wait for.
        let mut per: Vec<(String, [u64; 8])> = Vec::new();
        let mut bump = |inst: u32, k: &[usize]| {
            let i = &self.instances[inst as usize];
            let name = format!("{} ({})", i.class, i.scope.as_str());
            let c = match per.iter_mut().position(|(n, _)| *n == name) {
                Some(p) => &mut per[p].1,
                None => {
                    per.push((name, [0; 8]));
                    &mut per.last_mut().expect("pushed").1
                }
            };
            for &k in k {
                c[k] += 1;
            }
        };
        let (mut writes, mut traps, mut flushes, mut fences) = (0u64, 0u64, 0u64, 0u64);
        for e in &self.events {
            match *e {
                Event::Acquire { inst, .. } => bump(inst, &[0]),
                // One atomic on the lock's count word.
                Event::Atomic { inst } | Event::Downgrade { inst } => bump(inst, &[1]),
                Event::TlbFlush { inst } => bump(inst, &[2]),
                Event::Line {
                    inst, write, sym, ..
                } => match (write, sym) {
                    (false, Sym::Here) => bump(inst, &[3]),
                    (false, _) => bump(inst, &[3, 5]),
                    (true, Sym::Here) => bump(inst, &[4]),
                    (true, _) => bump(inst, &[4, 5]),
                },
                Event::Prefetch { inst } => bump(inst, &[6]),
                Event::Store { inst, sym } => match sym {
                    Sym::Here => bump(inst, &[7]),
                    _ => bump(inst, &[7, 5]),
                },
                Event::Write { bytes, .. } => writes += u64::from(bytes),
                Event::Trap => traps += 1,
                Event::Fence => fences += 1,
                _ => {}
            }
            if let Event::TlbFlush { .. } = e {
                flushes += 1;
            }
        }
        let _ = writeln!(
            s,
            "per op: {:.3} traps, {:.1} bytes written, {:.5} TLB flushes, {:.4} fences",
            traps as f64 / ops,
            writes as f64 / ops,
            flushes as f64 / ops,
            fences as f64 / ops
        );
        for f in &self.fallbacks {
            let n = f.segments.len().max(1) as f64;
            let events: usize = f.segments.iter().map(Vec::len).sum();
            let _ = writeln!(
                s,
                "fallback of a failed {} trylock: {} recorded, {:.1} events each",
                f.class,
                f.segments.len(),
                events as f64 / n
            );
        }
        per.sort();
        let _ = writeln!(
            s,
            "{:<32} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12}",
            "class (scope)",
            "acquires/op",
            "atomics/op",
            "reads/op",
            "writes/op",
            "stores/op",
            "entries/op",
            "prefetch/op"
        );
        for (n, c) in per {
            if c[0] + c[1] + c[3] + c[4] + c[6] + c[7] > 0 {
                let _ = writeln!(
                    s,
                    "{:<32} {:>12.4} {:>12.4} {:>12.4} {:>12.4} {:>12.4} {:>12.4} {:>12.4}",
                    n,
                    c[0] as f64 / ops,
                    c[1] as f64 / ops,
                    c[3] as f64 / ops,
                    c[4] as f64 / ops,
                    c[7] as f64 / ops,
                    c[5] as f64 / ops,
                    c[6] as f64 / ops
                );
            }
        }
        s
    }

    /// The file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let header = serde_json::to_vec(&Header {
            meta: self.meta.clone(),
            instances: self.instances.clone(),
        })
        .expect("a trace header serialises");
        let mut b = Vec::with_capacity(header.len() + self.events.len() * 4 + 32);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&(header.len() as u32).to_le_bytes());
        b.extend_from_slice(&header);
        b.extend_from_slice(&(self.events.len() as u64).to_le_bytes());
        for e in &self.events {
            encode_event(&mut b, e);
        }
        varint(&mut b, self.fallbacks.len() as u64);
        for f in &self.fallbacks {
            varint(&mut b, f.class.len() as u64);
            b.extend_from_slice(f.class.as_bytes());
            varint(&mut b, f.segments.len() as u64);
            for seg in &f.segments {
                varint(&mut b, seg.len() as u64);
                for e in seg {
                    encode_event(&mut b, e);
                }
            }
        }
        let crc = crc32fast::hash(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// Parses a file's bytes (`what` names it in errors).
    pub fn decode(bytes: &[u8], what: &str) -> Result<Trace, TraceError> {
        let bad = |m: &str| TraceError::Corrupt(what.to_string(), m.to_string());
        if bytes.len() >= MAGIC.len()
            && bytes[..7] == MAGIC[..7]
            && bytes[7] != MAGIC[7]
            && bytes[7].is_ascii_digit()
        {
            return Err(TraceError::Version(what.to_string(), bytes[7] as char));
        }
        if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
            return Err(TraceError::Magic(what.to_string()));
        }
        if bytes.len() < MAGIC.len() + 4 + 8 + 4 {
            return Err(bad("truncated"));
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        if crc32fast::hash(body).to_le_bytes() != crc {
            return Err(bad("checksum mismatch"));
        }
        let mut r = Reader {
            b: body,
            at: MAGIC.len(),
        };
        let hlen = u32::from_le_bytes(r.take(4).ok_or_else(|| bad("header"))?.try_into().unwrap());
        let header: Header =
            serde_json::from_slice(r.take(hlen as usize).ok_or_else(|| bad("header"))?)
                .map_err(|e| bad(&format!("header: {e}")))?;
        let n = u64::from_le_bytes(r.take(8).ok_or_else(|| bad("count"))?.try_into().unwrap());
        let instances = header.instances.as_slice();
        // Every event takes at least one byte: a count beyond what is left is a lie.
        let mut events = Vec::with_capacity(n.min((body.len() - r.at) as u64) as usize);
        for _ in 0..n {
            events.push(decode_event(&mut r, instances, &bad)?);
        }
        let mut fallbacks = Vec::new();
        {
            let count = |r: &mut Reader<'_>, what: &str| -> Result<usize, TraceError> {
                let n = r.varint().ok_or_else(|| bad(what))?;
                // Everything counted takes at least a byte.
                if n > (body.len() - r.at) as u64 {
                    return Err(bad(what));
                }
                Ok(n as usize)
            };
            for _ in 0..count(&mut r, "fallbacks")? {
                let len = count(&mut r, "fallback class")?;
                let name = r.take(len).ok_or_else(|| bad("fallback class"))?;
                let class = String::from_utf8(name.to_vec()).map_err(|_| bad("fallback class"))?;
                let mut segments = Vec::new();
                for _ in 0..count(&mut r, "fallback segments")? {
                    let n = count(&mut r, "fallback segment")?;
                    let mut seg = Vec::with_capacity(n);
                    for _ in 0..n {
                        seg.push(decode_event(&mut r, instances, &bad)?);
                    }
                    segments.push(seg);
                }
                fallbacks.push(Fallback { class, segments });
            }
        }
        if r.at != body.len() {
            return Err(bad("trailing bytes"));
        }
        Ok(Trace {
            meta: header.meta,
            instances: header.instances,
            events,
            fallbacks,
        })
    }

    /// Writes the trace to `path`.
    pub fn save(&self, path: &Path) -> Result<(), TraceError> {
        let io = |source| TraceError::Io {
            path: path.display().to_string(),
            source,
        };
        let mut f = std::fs::File::create(path).map_err(io)?;
        f.write_all(&self.encode()).map_err(io)
    }

    /// Reads the trace at `path`.
    pub fn load(path: &Path) -> Result<Trace, TraceError> {
        let io = |source| TraceError::Io {
            path: path.display().to_string(),
            source,
        };
        let mut b = Vec::new();
        std::fs::File::open(path)
            .map_err(io)?
            .read_to_end(&mut b)
            .map_err(io)?;
        Trace::decode(&b, &path.display().to_string())
    }
}

/// Appends one event's encoding (module docs) to `b`.
fn encode_event(b: &mut Vec<u8>, e: &Event) {
    match *e {
        Event::Compute { ns } => {
            b.push(0);
            varint(b, deci(ns));
        }
        Event::Acquire {
            inst,
            shared,
            trylock,
        } => {
            b.push(1);
            varint(b, u64::from(inst));
            b.push(u8::from(shared) | (u8::from(trylock) << 1));
        }
        Event::Release { inst, shared } => {
            b.push(2);
            varint(b, u64::from(inst));
            b.push(u8::from(shared));
        }
        Event::Downgrade { inst } => {
            b.push(12);
            varint(b, u64::from(inst));
        }
        Event::Atomic { inst } => {
            b.push(3);
            varint(b, u64::from(inst));
        }
        Event::Write { bytes, host_ns } => {
            b.push(4);
            varint(b, u64::from(bytes));
            varint(b, deci(host_ns));
        }
        Event::Trap => b.push(5),
        Event::TrapReturn => b.push(11),
        Event::TlbFlush { inst } => {
            b.push(6);
            varint(b, u64::from(inst));
        }
        Event::Ops { n } => {
            b.push(7);
            varint(b, u64::from(n));
        }
        Event::Line { inst, write, sym } => {
            b.push(8);
            varint(b, u64::from(inst));
            b.push(u8::from(write) | (sym_bits(sym) << 1));
        }
        Event::Prefetch { inst } => {
            b.push(9);
            varint(b, u64::from(inst));
        }
        Event::Store { inst, sym } => {
            b.push(10);
            varint(b, u64::from(inst));
            b.push(sym_bits(sym));
        }
        Event::Fence => b.push(13),
    }
}

/// Which line a line or store event names, as the file holds it (module docs).
fn sym_bits(sym: Sym) -> u8 {
    match sym {
        Sym::Here => 0,
        Sym::First => 1,
        Sym::Entry => 2,
    }
}

fn sym_of(w: u8, bad: &dyn Fn(&str) -> TraceError) -> Result<Sym, TraceError> {
    Ok(match w {
        0 => Sym::Here,
        1 => Sym::First,
        2 => Sym::Entry,
        w => return Err(bad(&format!("unknown line reference {w}"))),
    })
}

/// Parses one event (module docs) of a trace whose instance table is `instances`.
fn decode_event(
    r: &mut Reader<'_>,
    instances: &[Instance],
    bad: &dyn Fn(&str) -> TraceError,
) -> Result<Event, TraceError> {
    let nr_inst = instances.len() as u64;
    let inst = |r: &mut Reader<'_>| -> Result<u32, TraceError> {
        let i = r.varint().ok_or_else(|| bad("instance"))?;
        if i >= nr_inst {
            return Err(bad(&format!("instance {i} of {nr_inst}")));
        }
        Ok(i as u32)
    };
    let tag = r.byte().ok_or_else(|| bad("event"))?;
    let e = match tag {
        0 => Event::Compute {
            ns: r.varint().ok_or_else(|| bad("compute"))? as f64 / 10.0,
        },
        1 => {
            let i = inst(r)?;
            let f = r.byte().ok_or_else(|| bad("flags"))?;
            Event::Acquire {
                inst: i,
                shared: f & 1 != 0,
                trylock: f & 2 != 0,
            }
        }
        2 => {
            let i = inst(r)?;
            let f = r.byte().ok_or_else(|| bad("flags"))?;
            Event::Release {
                inst: i,
                shared: f & 1 != 0,
            }
        }
        3 => Event::Atomic { inst: inst(r)? },
        12 => {
            let i = inst(r)?;
            let class = &instances[i as usize];
            if class.model != LockModel::RwSem {
                return Err(bad(&format!(
                    "a downgrade of {}, which is not an rwsem",
                    class.class
                )));
            }
            Event::Downgrade { inst: i }
        }
        4 => Event::Write {
            bytes: u32::try_from(r.varint().ok_or_else(|| bad("write"))?)
                .map_err(|_| bad("write size"))?,
            host_ns: r.varint().ok_or_else(|| bad("write"))? as f64 / 10.0,
        },
        5 => Event::Trap,
        11 => Event::TrapReturn,
        13 => Event::Fence,
        6 => Event::TlbFlush { inst: inst(r)? },
        7 => Event::Ops {
            n: u32::try_from(r.varint().ok_or_else(|| bad("ops"))?).map_err(|_| bad("ops"))?,
        },
        8 => {
            let i = inst(r)?;
            let f = r.byte().ok_or_else(|| bad("line flags"))?;
            Event::Line {
                inst: i,
                write: f & 1 != 0,
                sym: sym_of(f >> 1, bad)?,
            }
        }
        9 => Event::Prefetch { inst: inst(r)? },
        10 => {
            let i = inst(r)?;
            let f = r.byte().ok_or_else(|| bad("store line"))?;
            Event::Store {
                inst: i,
                sym: sym_of(f, bad)?,
            }
        }
        t => return Err(bad(&format!("unknown event tag {t}"))),
    };
    Ok(e)
}

/// Which lines the task has written in its current exclusive critical section: a line it
/// writes (or reads) again there, before any lock is taken or released, is its own until the
/// section ends, so the repeat costs nothing at replay and is not kept. This keeps a bulk
/// operation under one lock (a pcp refill's pops, an LRU flush's adds, each touching the same
/// head, counter and first entry) at one event per line. Shared holds are left alone: other
/// holders may write the same line meanwhile (the LRU size under concurrent removal).
#[derive(Default)]
struct Section {
    /// Locks held, innermost last: whether each is held shared.
    held: Vec<(u32, bool)>,
    /// (instance, 0 the line itself / 1 the list's first entry) written since the last lock
    /// event.
    written: Vec<(u32, u8)>,
    /// The same for lines only stored to so far: a later store of one is a repeat, but a
    /// later load or write is kept, since it waits for the line the store has still in flight.
    stored: Vec<(u32, u8)>,
}

impl Section {
    /// Records `e`; whether it repeats an access already paid for in this section.
    fn repeats(&mut self, e: &Event) -> bool {
        match *e {
            Event::Acquire { inst, shared, .. } => {
                self.held.push((inst, shared));
                self.written.clear();
                self.stored.clear();
                false
            }
            Event::Release { inst, .. } => {
                if let Some(i) = self.held.iter().rposition(|h| h.0 == inst) {
                    self.held.remove(i);
                }
                self.written.clear();
                self.stored.clear();
                false
            }
            // Readers may enter from here on: the hold is shared.
            Event::Downgrade { inst } => {
                if let Some(h) = self.held.iter_mut().rev().find(|h| h.0 == inst) {
                    h.1 = true;
                }
                self.written.clear();
                self.stored.clear();
                false
            }
            Event::Atomic { inst } => self.access(inst, 0, true),
            Event::Line { inst, write, sym } => match sym {
                Sym::Here => self.access(inst, 0, write),
                // The first entry once written is this task's. Another entry is a line of its
                // own (a buddy, the block after a popped one, an LRU neighbour): the engine
                // records it only when it is not the task's own, and the replay resolves it to
                // whoever linked before this task, so every one is kept.
                Sym::First => self.access(inst, 1, write),
                Sym::Entry => false,
            },
            // A store once made, the line is this task's for later stores; a later load or
            // write of it is kept (once), as it waits for the line the store has in flight.
            Event::Store { inst, sym } => match sym {
                Sym::Here => self.store(inst, 0),
                Sym::First => self.store(inst, 1),
                Sym::Entry => false,
            },
            _ => false,
        }
    }

    fn store(&mut self, inst: u32, which: u8) -> bool {
        if !self.exclusive() {
            return false;
        }
        if self.written.contains(&(inst, which)) || self.stored.contains(&(inst, which)) {
            return true;
        }
        self.stored.push((inst, which));
        false
    }

    fn exclusive(&self) -> bool {
        self.held.last().is_some_and(|h| !h.1)
    }

    fn access(&mut self, inst: u32, which: u8, write: bool) -> bool {
        if !self.exclusive() {
            return false;
        }
        if self.written.contains(&(inst, which)) {
            return true;
        }
        if write {
            self.written.push((inst, which));
        }
        false
    }
}

/// Appends compute time, merging with a compute event just before.
fn push_compute(out: &mut Vec<Event>, ns: f64) {
    if ns <= 0.0 {
        return;
    }
    if let Some(Event::Compute { ns: prev }) = out.last_mut() {
        *prev += ns;
    } else {
        out.push(Event::Compute { ns });
    }
}

fn deci(ns: f64) -> u64 {
    (ns * 10.0).round().max(0.0) as u64
}

fn varint(b: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        b.push((v as u8) | 0x80);
        v >>= 7;
    }
    b.push(v as u8);
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }

    fn byte(&mut self) -> Option<u8> {
        let v = *self.b.get(self.at)?;
        self.at += 1;
        Some(v)
    }

    fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.byte()?;
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }
}

mod scope_serde {
    use pagelab_sync::Scope;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(s: &Scope, ser: S) -> Result<S::Ok, S::Error> {
        ser.serialize_str(s.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Scope, D::Error> {
        let s = String::deserialize(d)?;
        Scope::ALL
            .into_iter()
            .find(|x| x.as_str() == s)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown scope `{s}`")))
    }
}

mod rwsem_serde {
    use pagelab_sync::RwsemAlgo;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(a: &Option<RwsemAlgo>, ser: S) -> Result<S::Ok, S::Error> {
        match a {
            Some(a) => ser.serialize_str(a.as_str()),
            None => ser.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<RwsemAlgo>, D::Error> {
        let s = Option::<String>::deserialize(d)?;
        s.map(|s| {
            RwsemAlgo::from_name(&s).ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "unknown rwsem algorithm `{s}`, expected one of {}",
                    RwsemAlgo::names()
                ))
            })
        })
        .transpose()
    }
}

mod model_serde {
    use pagelab_sync::trace::LockModel;
    use serde::{Deserialize, Deserializer, Serializer};

    const NAMES: [(LockModel, &str); 6] = [
        (LockModel::Ticket, "ticket"),
        (LockModel::Queued, "queued"),
        (LockModel::RwSem, "rwsem"),
        (LockModel::QRwLock, "qrwlock"),
        (LockModel::Refcount, "refcount"),
        (LockModel::Line, "line"),
    ];

    pub fn serialize<S: Serializer>(m: &LockModel, ser: S) -> Result<S::Ok, S::Error> {
        let name = NAMES
            .iter()
            .find(|(x, _)| x == m)
            .map_or("line", |(_, n)| n);
        ser.serialize_str(name)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<LockModel, D::Error> {
        let s = String::deserialize(d)?;
        NAMES
            .iter()
            .find(|(_, n)| *n == s)
            .map(|(m, _)| *m)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown lock model `{s}`")))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn meta() -> TraceMeta {
        TraceMeta {
            workload: "page_fault1".into(),
            profile: "linux-6.7".into(),
            profile_toml: String::new(),
            op_unit: "faults".into(),
            window: Window::Cycle,
            pinning: Pinning::Cores,
            shared_vma: false,
            kernel_cpus: 4,
            host_cpu: "test".into(),
            host_ghz: 3.0,
            ops: 0,
            raw_events: 0,
            overhead_ns_per_event: 0.0,
            traced_ns: 1.0,
            untraced_ns: 1.0,
            untraced_write_ns: None,
            event_cost_ns: None,
            untraced_unmap_ns: None,
            unmap_event_cost_ns: None,
            untraced_holds: Vec::new(),
            compute_scale: 1.0,
            guard: None,
            paced: None,
            iterations: 1,
        }
    }

    fn sample() -> Trace {
        Trace {
            meta: meta(),
            instances: vec![Instance {
                class: "zone->lock".into(),
                scope: Scope::Node,
                model: LockModel::Queued,
                sleeps: false,
                rwsem: None,
            }],
            events: vec![
                Event::Compute { ns: 12.3 },
                Event::Acquire {
                    inst: 0,
                    shared: false,
                    trylock: true,
                },
                Event::Compute { ns: 100_000.0 },
                Event::Release {
                    inst: 0,
                    shared: true,
                },
                Event::Atomic { inst: 0 },
                Event::Write {
                    bytes: 4096,
                    host_ns: 250.5,
                },
                Event::Trap,
                Event::Fence,
                Event::TlbFlush { inst: 0 },
                Event::Ops { n: 300 },
                Event::Line {
                    inst: 0,
                    write: false,
                    sym: Sym::Here,
                },
                Event::Line {
                    inst: 0,
                    write: true,
                    sym: Sym::First,
                },
                Event::Line {
                    inst: 0,
                    write: true,
                    sym: Sym::Entry,
                },
                Event::Prefetch { inst: 0 },
                Event::Store {
                    inst: 0,
                    sym: Sym::Here,
                },
                Event::Store {
                    inst: 0,
                    sym: Sym::Entry,
                },
            ],
            fallbacks: vec![Fallback {
                class: "zone->lock".into(),
                segments: vec![
                    vec![
                        Event::Compute { ns: 3.0 },
                        Event::Acquire {
                            inst: 0,
                            shared: true,
                            trylock: false,
                        },
                        Event::Release {
                            inst: 0,
                            shared: true,
                        },
                    ],
                    vec![],
                ],
            }],
        }
    }

    #[test]
    fn a_trace_of_an_older_format_is_refused_in_one_line() {
        let mut b = sample().encode();
        b[7] = b'2';
        let e = Trace::decode(&b, "old.pltrace").unwrap_err().to_string();
        assert_eq!(
            e,
            "old.pltrace: trace format 2 is no longer read (this pagelab reads format 8); capture it again"
        );
        // Format 4 recorded every store as a write the CPU waited for.
        b[7] = b'4';
        let e = Trace::decode(&b, "old.pltrace").unwrap_err().to_string();
        assert_eq!(
            e,
            "old.pltrace: trace format 4 is no longer read (this pagelab reads format 8); capture it again"
        );
        // Format 5 had no exception returns, at which the replay waits for a prefetch.
        b[7] = b'5';
        let e = Trace::decode(&b, "old.pltrace").unwrap_err().to_string();
        assert_eq!(
            e,
            "old.pltrace: trace format 5 is no longer read (this pagelab reads format 8); capture it again"
        );
        // Format 6 recorded a downgrade as a release and a new acquire.
        b[7] = b'6';
        let e = Trace::decode(&b, "old.pltrace").unwrap_err().to_string();
        assert_eq!(
            e,
            "old.pltrace: trace format 6 is no longer read (this pagelab reads format 8); capture it again"
        );
        // Format 7 had no fences, so a hold's stores waited only at its release.
        b[7] = b'7';
        let e = Trace::decode(&b, "old.pltrace").unwrap_err().to_string();
        assert_eq!(
            e,
            "old.pltrace: trace format 7 is no longer read (this pagelab reads format 8); capture it again"
        );
        // A bad line reference is corruption, named.
        let t = Trace {
            events: vec![Event::Line {
                inst: 0,
                write: true,
                sym: Sym::Entry,
            }],
            fallbacks: Vec::new(),
            ..sample()
        };
        let mut b = t.encode();
        // The line's flags come before the (empty) fallback count and the checksum.
        let at = b.len() - 6;
        b[at] = 7 << 1;
        let n = b.len() - 4;
        let crc = crc32fast::hash(&b[..n]);
        b[n..].copy_from_slice(&crc.to_le_bytes());
        let e = Trace::decode(&b, "f").unwrap_err().to_string();
        assert!(e.contains("unknown line reference 7"), "{e}");
    }

    /// A downgrade goes through the file as itself, and only an rwsem's is read.
    #[test]
    fn a_downgrade_round_trips_and_is_refused_on_a_lock_that_is_not_an_rwsem() {
        let mut t = Trace {
            events: vec![
                Event::Acquire {
                    inst: 0,
                    shared: false,
                    trylock: false,
                },
                Event::Downgrade { inst: 0 },
                Event::Release {
                    inst: 0,
                    shared: true,
                },
            ],
            fallbacks: Vec::new(),
            ..sample()
        };
        t.instances[0] = Instance {
            class: "mmap_lock".into(),
            scope: Scope::Mm,
            model: LockModel::RwSem,
            sleeps: true,
            rwsem: Some(RwsemAlgo::SpinWritersHandoff),
        };
        assert_eq!(Trace::decode(&t.encode(), "f").unwrap(), t);
        t.instances[0].model = LockModel::QRwLock;
        let e = Trace::decode(&t.encode(), "f").unwrap_err().to_string();
        assert_eq!(
            e,
            "f: the trace is corrupt (a downgrade of mmap_lock, which is not an rwsem)"
        );
    }

    /// A traced window preempted during its writes: the writes alone (1000 ns) outlast the
    /// untraced window (600 ns of CPU time), so compute and writes are scaled alike to add up
    /// to it, where before the compute kept the host's preemption.
    #[test]
    fn a_traced_window_whose_writes_outlast_the_untraced_one_is_scaled_whole() {
        static CLASS: LockClass = LockClass::new("c", Scope::Node);
        let tpn = raw::ticks_per_ns();
        let at = |ns: f64| (ns * tpn).round() as u64;
        let ev = |t, kind| raw::Event {
            t,
            kind,
            class: &CLASS,
            instance: 0,
            model: LockModel::Line,
        };
        let events = [
            ev(at(0.0), raw::Kind::Trap),
            ev(
                at(100.0),
                raw::Kind::Write {
                    bytes: 4096,
                    end: at(1100.0),
                },
            ),
            ev(at(1200.0), raw::Kind::Ops(1)),
        ];
        let mut meta = sample().meta;
        meta.overhead_ns_per_event = 0.0;
        meta.untraced_ns = 600.0;
        let t = Trace::from_raw(meta.clone(), &events);
        assert!((t.host_ns() - 600.0).abs() < 1.0, "{}", t.host_ns());
        assert!((t.meta.compute_scale - 0.5).abs() < 0.01);
        // With room for the compute, only the compute is scaled: the writes keep their time.
        meta.untraced_ns = 1150.0;
        let t = Trace::from_raw(meta.clone(), &events);
        assert!((t.host_ns() - 1150.0).abs() < 1.0, "{}", t.host_ns());
        assert!((t.meta.compute_scale - 0.75).abs() < 0.01);
        // An untraced run longer than the traced one (1400 against 1200 ns) was the slow
        // one: recording never speeds the work up, so the compute is kept as traced.
        meta.untraced_ns = 1400.0;
        let t = Trace::from_raw(meta, &events);
        assert!((t.host_ns() - 1200.0).abs() < 1.0, "{}", t.host_ns());
        assert_eq!(t.meta.compute_scale, 1.0);
    }

    /// A synthetic capture of `OPS` faults whose true compute is known: each recorded event
    /// costs `RECORDING` ns (the tight loop measured 10 of them; the rest is the buffer's
    /// cache footprint), the page write took `traced_writes` ns in the traced window and
    /// `untraced_writes` in the untraced one, whose CPU time is the true compute plus its
    /// writes. Per fault: a trap, 16 atomics 3 ns apart (the dense bookkeeping outside any
    /// lock), the write, then a hold of `HOLD` ns of compute around three line writes.
    fn synthetic(traced_writes: f64, untraced_writes: f64) -> (TraceMeta, Vec<raw::Event>) {
        static LOCK: LockClass = LockClass::new("hold", Scope::Node);
        static LINE: LockClass = LockClass::new("line", Scope::Node);
        const OPS: usize = 200;
        const RECORDING: f64 = 14.0;
        let tpn = raw::ticks_per_ns();
        let at = |ns: f64| (ns * tpn).round() as u64;
        // (time now, the events, the true compute so far)
        let mut st: (f64, Vec<raw::Event>, f64) = (0.0, Vec::new(), 0.0);
        let push = |st: &mut (f64, Vec<raw::Event>, f64),
                    gap: f64,
                    kind: raw::Kind,
                    class: &'static LockClass,
                    inst: usize| {
            st.2 += gap;
            st.0 += gap + RECORDING;
            st.1.push(raw::Event {
                t: at(st.0),
                kind,
                class,
                instance: inst,
                model: LockModel::Queued,
            });
        };
        let ex = Access::Exclusive;
        for _ in 0..OPS {
            push(&mut st, 60.0, raw::Kind::Trap, &LINE, 0);
            for i in 0..16 {
                push(&mut st, 3.0, raw::Kind::Atomic, &LINE, 0x100 + i);
            }
            // The write's span starts after the gap and ends `traced_writes` later.
            let end = at(st.0 + 40.0 + RECORDING + traced_writes);
            push(
                &mut st,
                40.0,
                raw::Kind::Write { bytes: 4096, end },
                &LINE,
                0,
            );
            st.0 += traced_writes;
            let acquire = raw::Kind::Acquire {
                access: ex,
                trylock: false,
            };
            push(&mut st, 20.0, acquire, &LOCK, 0x10);
            for i in 0..3 {
                let line = raw::Kind::Line {
                    write: true,
                    sym: Sym::Here,
                };
                push(&mut st, 40.0, line, &LINE, 0x200 + i);
            }
            push(
                &mut st,
                40.0,
                raw::Kind::Release { access: ex },
                &LOCK,
                0x10,
            );
            push(&mut st, 10.0, raw::Kind::Ops(1), &LINE, 0);
        }
        let (_, events, mut compute) = st;
        // The first event's gap is before the window: not compute.
        compute -= 60.0;
        let mut m = meta();
        m.overhead_ns_per_event = 10.0;
        m.untraced_ns = compute + OPS as f64 * untraced_writes;
        m.untraced_write_ns = Some(OPS as f64 * untraced_writes);
        (m, events)
    }

    /// The true compute inside the synthetic capture's holds: 3 lines 40 ns apart, then 40 ns
    /// to the release.
    const HOLD: f64 = 160.0;

    /// Mean compute between each acquire and its release.
    fn hold_compute(t: &Trace) -> f64 {
        let (mut sum, mut n, mut open) = (0.0, 0, false);
        for e in &t.events {
            match *e {
                Event::Acquire { .. } => open = true,
                Event::Release { .. } => {
                    open = false;
                    n += 1;
                }
                Event::Compute { ns } if open => sum += ns,
                _ => {}
            }
        }
        sum / f64::from(n)
    }

    /// The recording slowed the traced window's page writes by half (180 against 120 ns):
    /// the trace's compute is still the true compute, in the holds as outside them, because
    /// the writes are costed from the untraced window and what recording adds is taken out
    /// per event. Scaling every gap by (untraced - traced writes) / compute gave the holds
    /// a third less.
    #[test]
    fn a_capture_whose_writes_the_recording_slowed_gives_the_true_compute() {
        let (m, events) = synthetic(180.0, 120.0);
        let untraced = m.untraced_ns;
        let t = Trace::from_raw(m, &events);
        let hold = hold_compute(&t);
        assert!((hold - HOLD).abs() / HOLD < 0.02, "hold compute {hold}");
        assert!((t.host_ns() - untraced).abs() / untraced < 0.01);
        let writes: f64 = t
            .events
            .iter()
            .map(|e| match *e {
                Event::Write { host_ns, .. } => host_ns,
                _ => 0.0,
            })
            .sum();
        assert!((writes / 200.0 - 120.0).abs() < 1.0, "{writes}");
        // 4 ns beyond the tight loop's 10, per event.
        let cost = t.meta.event_cost_ns.expect("calibrated in place");
        assert!((cost - 14.0).abs() < 0.2, "{cost}");
    }

    /// An untraced window whose timed writes come out above its whole CPU time (timing
    /// noise) leaves the trace's compute and writes as measured: recording only adds work,
    /// so nothing is scaled up.
    #[test]
    fn untraced_writes_above_the_untraced_time_scale_nothing_up() {
        let (mut m, events) = synthetic(150.0, 120.0);
        let before = Trace::from_raw(
            {
                let mut m = m.clone();
                m.untraced_ns = 0.0;
                m.untraced_write_ns = None;
                m
            },
            &events,
        );
        // Longer than the whole traced window, and its writes longer still.
        m.untraced_ns = before.host_ns() * 1.2;
        m.untraced_write_ns = Some(m.untraced_ns + 1.0);
        let t = Trace::from_raw(m, &events);
        assert!(t.meta.compute_scale <= 1.0, "{}", t.meta.compute_scale);
        assert!(
            t.host_ns() <= before.host_ns() * 1.0001,
            "{} against {}",
            t.host_ns(),
            before.host_ns()
        );
    }

    /// Two captures of the same work that differ only in how their writes measured: the
    /// traced writes by 60% (150 and 240 ns, the recording's and the host's noise), the
    /// untraced ones by 5% (120 and 126). Their holds' compute agrees within 2%; with the
    /// compute scaled to (untraced - traced writes) it differed by a fifth.
    #[test]
    fn captures_differing_only_in_write_noise_agree_on_the_holds() {
        let a = {
            let (m, e) = synthetic(150.0, 120.0);
            hold_compute(&Trace::from_raw(m, &e))
        };
        let b = {
            let (m, e) = synthetic(240.0, 126.0);
            hold_compute(&Trace::from_raw(m, &e))
        };
        assert!((a - b).abs() / a < 0.02, "hold compute {a} against {b}");
        assert!((a - HOLD).abs() / HOLD < 0.02, "{a}");
    }

    /// A raw event at time 0 of `class`'s instance `instance`, with the plain-line model.
    fn line_event(kind: raw::Kind, class: &'static LockClass, instance: usize) -> raw::Event {
        raw::Event {
            t: 0,
            kind,
            class,
            instance,
            model: LockModel::Line,
        }
    }

    /// In an exclusive section a store of a line is kept once: a later store of it is a
    /// repeat, a later write is kept (it waits for the line the store has in flight) and makes
    /// the line written, so a store after that is a repeat too; every other entry stored to is
    /// kept, and stores stay stores.
    #[test]
    fn stores_in_an_exclusive_section_are_kept_once_per_line_and_a_write_after_them_too() {
        static LOCK: LockClass = LockClass::new("lock", Scope::Node);
        static LIST: LockClass = LockClass::new("list", Scope::Node);
        let ev = line_event;
        let events = vec![
            ev(
                raw::Kind::Acquire {
                    access: Access::Exclusive,
                    trylock: false,
                },
                &LOCK,
                1,
            ),
            ev(raw::Kind::Store { sym: Sym::Here }, &LIST, 2),
            ev(
                raw::Kind::Line {
                    write: true,
                    sym: Sym::Here,
                },
                &LIST,
                2,
            ),
            ev(raw::Kind::Store { sym: Sym::Here }, &LIST, 2),
            ev(raw::Kind::Store { sym: Sym::Entry }, &LIST, 2),
            ev(raw::Kind::Store { sym: Sym::Entry }, &LIST, 2),
            ev(
                raw::Kind::Release {
                    access: Access::Exclusive,
                },
                &LOCK,
                1,
            ),
        ];
        let t = Trace::from_raw(meta(), &events);
        let kept: Vec<_> = t
            .events
            .iter()
            .filter(|e| matches!(e, Event::Line { .. } | Event::Store { .. }))
            .copied()
            .collect();
        assert_eq!(
            kept,
            vec![
                Event::Store {
                    inst: 1,
                    sym: Sym::Here
                },
                Event::Line {
                    inst: 1,
                    write: true,
                    sym: Sym::Here
                },
                Event::Store {
                    inst: 1,
                    sym: Sym::Entry
                },
                Event::Store {
                    inst: 1,
                    sym: Sym::Entry
                },
            ],
            "{:?}",
            t.events
        );
    }

    /// A fence (a private locked instruction) is kept only after a store kept since the last
    /// event that drains the store buffer: not after a repeated store, nor after an atomic or
    /// a lock operation, where it could wait for nothing.
    #[test]
    fn a_fence_is_kept_only_after_a_store_that_is_kept() {
        static LOCK: LockClass = LockClass::new("lock", Scope::Node);
        static LIST: LockClass = LockClass::new("list", Scope::Node);
        let ev = line_event;
        let acquire = ev(
            raw::Kind::Acquire {
                access: Access::Exclusive,
                trylock: false,
            },
            &LOCK,
            1,
        );
        let fence = ev(raw::Kind::Fence, &raw::UNCLASSIFIED, 0);
        let events = vec![
            acquire,
            // Nothing stored yet: dropped.
            fence,
            ev(raw::Kind::Store { sym: Sym::Here }, &LIST, 2),
            // After a kept store: kept.
            fence,
            // A repeated store is dropped, and so is the fence after it.
            ev(raw::Kind::Store { sym: Sym::Here }, &LIST, 2),
            fence,
            // Another entry is always kept, and the fence after it.
            ev(raw::Kind::Store { sym: Sym::Entry }, &LIST, 2),
            fence,
            // A second fence in a row waits for nothing.
            fence,
            ev(raw::Kind::Store { sym: Sym::Entry }, &LIST, 2),
            // An atomic drains the stores itself.
            ev(raw::Kind::Atomic, &LIST, 3),
            fence,
            ev(
                raw::Kind::Release {
                    access: Access::Exclusive,
                },
                &LOCK,
                1,
            ),
        ];
        let t = Trace::from_raw(meta(), &events);
        let kinds: Vec<&str> = t
            .events
            .iter()
            .filter_map(|e| match e {
                Event::Store { .. } => Some("store"),
                Event::Fence => Some("fence"),
                Event::Atomic { .. } => Some("atomic"),
                _ => None,
            })
            .collect();
        assert_eq!(
            kinds,
            ["store", "fence", "store", "fence", "store", "atomic"],
            "{:?}",
            t.events
        );
    }

    #[test]
    fn repeats_within_an_exclusive_section_are_kept_once_and_shared_sections_keep_all() {
        static LOCK: LockClass = LockClass::new("lock", Scope::Node);
        static LIST: LockClass = LockClass::new("list", Scope::Node);
        let ev = line_event;
        let acq = |shared: bool| {
            let mut e = ev(
                raw::Kind::Acquire {
                    access: if shared {
                        Access::Shared
                    } else {
                        Access::Exclusive
                    },
                    trylock: false,
                },
                &LOCK,
                1,
            );
            e.model = LockModel::RwSem;
            e
        };
        let rel = |shared: bool| {
            let mut e = ev(
                raw::Kind::Release {
                    access: if shared {
                        Access::Shared
                    } else {
                        Access::Exclusive
                    },
                },
                &LOCK,
                1,
            );
            e.model = LockModel::RwSem;
            e
        };
        let line = |write, sym| ev(raw::Kind::Line { write, sym }, &LIST, 2);
        let section = |shared: bool| {
            vec![
                acq(shared),
                line(true, Sym::First),
                line(true, Sym::Here),
                line(true, Sym::First),
                line(true, Sym::Here),
                line(false, Sym::Here),
                line(true, Sym::Entry),
                ev(raw::Kind::Atomic, &LIST, 3),
                ev(raw::Kind::Atomic, &LIST, 3),
                rel(shared),
                line(true, Sym::Here),
            ]
        };
        let lines = |t: &Trace| {
            t.events
                .iter()
                .filter(|e| matches!(e, Event::Line { .. } | Event::Atomic { .. }))
                .count()
        };
        // Exclusive: the first entry, the head and the counter once each, every other entry
        // (each is a line of its own), and the head again after the release.
        let t = Trace::from_raw(meta(), &section(false));
        assert_eq!(lines(&t), 5, "{:?}", t.events);
        assert_eq!(t.meta.raw_events, 11);
        // Shared: other holders may write the same lines meanwhile; everything is kept.
        let t = Trace::from_raw(meta(), &section(true));
        assert_eq!(lines(&t), 9, "{:?}", t.events);
    }

    #[test]
    fn a_lock_word_first_seen_as_a_plain_line_keeps_its_lock_model() {
        static SEM: LockClass = LockClass::sleeping("sem", Scope::Mm);
        let ev = |kind| raw::Event {
            t: 0,
            kind,
            class: &SEM,
            instance: 0x40,
            model: LockModel::Line,
        };
        let mut acquire = ev(raw::Kind::Acquire {
            access: Access::Shared,
            trylock: true,
        });
        acquire.model = LockModel::RwSem;
        let read = ev(raw::Kind::Line {
            write: false,
            sym: Sym::Here,
        });
        let t = Trace::from_raw(meta(), &[read, acquire]);
        assert_eq!(t.instances.len(), 1, "one line, one instance");
        assert_eq!(t.instances[0].model, LockModel::RwSem);
    }

    #[test]
    fn round_trips_through_the_file_format() {
        let mut t = sample();
        // Every lock model keeps its name through the file (a queued rwlock too).
        t.instances[0].model = LockModel::QRwLock;
        let b = t.encode();
        assert_eq!(Trace::decode(&b, "x").unwrap(), t);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.pltrace");
        t.save(&p).unwrap();
        assert_eq!(Trace::load(&p).unwrap(), t);
    }

    #[test]
    fn corrupt_files_are_refused_with_a_reason() {
        let b = sample().encode();
        assert!(matches!(
            Trace::decode(b"hello world, not a trace", "f"),
            Err(TraceError::Magic(_))
        ));
        let mut flipped = b.clone();
        let mid = flipped.len() / 2;
        flipped[mid] ^= 0x55;
        let e = Trace::decode(&flipped, "f").unwrap_err().to_string();
        assert!(e.contains("checksum"), "{e}");
        let e = Trace::decode(&b[..b.len() - 7], "f")
            .unwrap_err()
            .to_string();
        assert!(e.contains("corrupt"), "{e}");
        let e = Trace::load(Path::new("/nonexistent/x.pltrace"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("/nonexistent/x.pltrace:"), "{e}");
    }

    /// Each page write's host time, in order.
    fn write_times(t: &Trace) -> Vec<f64> {
        t.events
            .iter()
            .filter_map(|e| match *e {
                Event::Write { host_ns, .. } => Some(host_ns),
                _ => None,
            })
            .collect()
    }

    /// Each compute event's time, in order.
    fn compute_times(t: &Trace) -> Vec<f64> {
        t.events
            .iter()
            .filter_map(|e| match *e {
                Event::Compute { ns } => Some(ns),
                _ => None,
            })
            .collect()
    }

    /// `raw` as a guarded capture converts it (untraced time far above it: no scaling).
    fn guarded(raw: &[raw::Event]) -> Trace {
        let mut m = meta();
        m.untraced_ns = 1e9;
        m.guard = Some(CaptureGuard::default());
        Trace::from_raw(m, raw)
    }

    /// The raw events that open and close an exclusive hold.
    fn exclusive_hold() -> (raw::Kind, raw::Kind) {
        (
            raw::Kind::Acquire {
                access: Access::Exclusive,
                trylock: false,
            },
            raw::Kind::Release {
                access: Access::Exclusive,
            },
        )
    }

    /// A capture's trace loses the host's stalls: a 2 ms gap inside a hold (the thread
    /// preempted holding the lock) is not replayed as work under it, and a page write the
    /// host stalled is costed at the window's own clearing rate, so that the compute the
    /// untraced time leaves is not squeezed by it. A trace without a guard is left as built.
    #[test]
    fn a_captures_stalls_are_taken_out() {
        static C: LockClass = LockClass::new("c", Scope::Mm);
        let tpn = raw::ticks_per_ns();
        let at = |ns: f64| (ns * tpn) as u64;
        let ev = |t: f64, kind: raw::Kind| raw::Event {
            t: at(t),
            kind,
            class: &C,
            instance: 0xa0,
            model: LockModel::Queued,
        };
        let write = |t: f64, ns: f64| {
            ev(
                t,
                raw::Kind::Write {
                    bytes: 4096,
                    end: at(t + ns),
                },
            )
        };
        let (acquire, release) = exclusive_hold();
        let raw_events = [
            ev(1000.0, acquire),
            // Preempted for 2 ms inside the hold.
            ev(2_001_100.0, release),
            write(2_001_200.0, 100.0),
            // A write the host stalled for 1 ms.
            write(2_001_400.0, 1_000_000.0),
            ev(3_001_500.0, raw::Kind::Ops(2)),
        ];
        let mut m = meta();
        // Above everything the window holds: no scaling either way.
        m.untraced_ns = 4_000_000.0;
        let plain = Trace::from_raw(m.clone(), &raw_events);
        let longest = |t: &Trace| {
            t.events
                .iter()
                .map(|e| match *e {
                    Event::Compute { ns } => ns,
                    Event::Write { host_ns, .. } => host_ns,
                    _ => 0.0,
                })
                .fold(0.0, f64::max)
        };
        assert!(longest(&plain) > 1e6, "no guard: as built");
        m.guard = Some(CaptureGuard::default());
        let t = Trace::from_raw(m, &raw_events);
        assert_eq!(t.meta.guard.as_ref().unwrap().stalls_removed, 2);
        assert!(longest(&t) < 1_000.0, "{:?}", t.events);
        let writes = write_times(&t);
        assert_eq!(writes.len(), 2);
        assert!(
            writes.iter().all(|&w| (w - 100.0).abs() < 5.0),
            "{writes:?}"
        );
    }

    /// A captured pair's trace drops the host's interruptions from both sides, as one task's
    /// capture does: a gap of `INTERRUPT_NS` or more inside a hold, on the sender's side or in
    /// a receiver turn, would otherwise be replayed as a hold that long, and every pair that
    /// meets at that lock would queue behind it.
    #[test]
    fn a_pair_capture_drops_the_hosts_interruptions_on_both_sides() {
        static C: LockClass = LockClass::new("c", Scope::Node);
        let (acquire, release) = exclusive_hold();
        let ev = |ns: f64, kind: raw::Kind| raw_at(ns, kind, &C, LockModel::Queued);
        let sender = [
            ev(1000.0, acquire),
            // Interrupted for 50 us inside the hold.
            ev(51_100.0, release),
            ev(51_300.0, raw::Kind::Ops(1)),
        ];
        let receiver = vec![vec![
            ev(60_000.0, acquire),
            ev(60_200.0, release),
            // 45 us of the host's before the receiver's boundary.
            ev(105_300.0, raw::Kind::Ops(1)),
        ]];
        let longest = |t: &Trace| {
            t.events
                .iter()
                .chain(t.receiver_turns().unwrap().iter().flatten())
                .map(|e| match *e {
                    Event::Compute { ns } => ns,
                    _ => 0.0,
                })
                .fold(0.0, f64::max)
        };
        let mut m = meta();
        m.untraced_ns = 1_000_000.0;
        let plain = Trace::from_raw_pair(m.clone(), &sender, &receiver);
        assert!(longest(&plain) > 40_000.0, "no guard: as built");
        m.guard = Some(CaptureGuard::default());
        let t = Trace::from_raw_pair(m, &sender, &receiver);
        assert_eq!(t.meta.guard.as_ref().unwrap().stalls_removed, 2);
        assert!(longest(&t) < 1_000.0, "{:?}", t.events);
    }

    /// A raw event of `class` (instance 0xa0) at `ns` nanoseconds of this host's clock.
    fn raw_at(ns: f64, kind: raw::Kind, class: &'static LockClass, model: LockModel) -> raw::Event {
        raw::Event {
            t: (ns * raw::ticks_per_ns()) as u64,
            kind,
            class,
            instance: 0xa0,
            model,
        }
    }

    /// A stall is one gap of `INTERRUPT_NS` or more, not a stretch of short gaps that the
    /// build merged into one compute event (here around unmap marks, which record nothing):
    /// an unmap that records few events lost half a millisecond of its own compute this way
    /// until 2026-11-29.
    #[test]
    fn merged_short_gaps_are_no_stall() {
        static C: LockClass = LockClass::new("c", Scope::Mm);
        let ev = |ns: f64, kind: raw::Kind| raw_at(ns, kind, &C, LockModel::Line);
        // 30 us, a mark, 30 us, a mark, 30 us: 90 us of compute between two atomics.
        let raw_events = [
            ev(0.0, raw::Kind::Atomic),
            ev(30_000.0, raw::Kind::Unmap { begin: true }),
            ev(60_000.0, raw::Kind::Unmap { begin: false }),
            ev(90_000.0, raw::Kind::Atomic),
            ev(90_000.0, raw::Kind::Ops(1)),
        ];
        let t = guarded(&raw_events);
        assert_eq!(t.meta.guard.as_ref().unwrap().stalls_removed, 0);
        let compute: f64 = compute_times(&t).iter().sum();
        assert!((compute - 90_000.0).abs() < 10.0, "{:?}", t.events);
    }

    /// The host's interruptions shorter than a retake's stall are taken out too: a 45 us gap
    /// inside a hold goes, the 20 us an unmap's zap of a page table records nothing for
    /// stays, and so does any shorter gap. A write is stalled by what it took beyond its
    /// bytes' time at the window's rate: a 2 MiB write of 60 us, near that rate, is not
    /// (though longer than the bound), a 4 KiB one of 50 us is.
    #[test]
    fn interruptions_are_taken_out_and_long_engine_stretches_kept() {
        static C: LockClass = LockClass::new("c", Scope::Mm);
        let tpn = raw::ticks_per_ns();
        let ev = |ns: f64, kind: raw::Kind| raw_at(ns, kind, &C, LockModel::Queued);
        let write = |ns: f64, bytes: u32, took: f64| {
            ev(
                ns,
                raw::Kind::Write {
                    bytes,
                    end: ((ns + took) * tpn) as u64,
                },
            )
        };
        let (acquire, release) = exclusive_hold();
        // 4 KiB pages at 100 ns each: about 25 ns per KiB, so 2 MiB takes about 51 us at
        // that rate, and the 2 MiB write below, 60 us, is 9 us beyond it: no stall.
        let raw_events = [
            ev(0.0, acquire),
            // Interrupted inside the hold.
            ev(45_500.0, release),
            write(46_000.0, 4096, 100.0),
            write(46_200.0, 4096, 100.0),
            write(46_400.0, 4096, 100.0),
            // An unmap's zap: 20 us without an event.
            ev(46_600.0, raw::Kind::Unmap { begin: true }),
            ev(66_600.0, raw::Kind::Atomic),
            ev(66_700.0, raw::Kind::Unmap { begin: false }),
            // A huge page cleared at about the window's rate, then a 4 KiB page interrupted.
            write(67_000.0, 2 << 20, 60_000.0),
            write(127_100.0, 4096, 50_000.0),
            ev(177_200.0, raw::Kind::Ops(1)),
        ];
        let t = guarded(&raw_events);
        assert_eq!(t.meta.guard.as_ref().unwrap().stalls_removed, 2);
        let computes = compute_times(&t);
        assert!(
            computes.iter().all(|&c| c < 25_000.0),
            "the interruption goes: {computes:?}"
        );
        assert!(
            // With the 100 ns before it, which the unmap's start (no event) merges in.
            computes.iter().any(|&c| (c - 20_100.0).abs() < 10.0),
            "the zap stays: {computes:?}"
        );
        let writes = write_times(&t);
        assert_eq!(writes.len(), 5);
        assert!((writes[3] - 60_000.0).abs() < 10.0, "{writes:?}");
        // The interrupted 4 KiB write at the rate of the others (60.3 us for 2.11 MB).
        let rate = (300.0 + 60_000.0) / (3.0 * 4096.0 + f64::from(2u32 << 20));
        assert!((writes[4] - 4096.0 * rate).abs() < 1.0, "{writes:?}");
    }

    /// With the untraced window's unmaps timed apart, the recording's cost is taken out of
    /// the gaps inside the recorded unmaps until they add up to the untraced unmap time, and
    /// out of the other gaps until they add up to the rest; without, one cost for every gap
    /// leaves the unmap, whose recording costs more per event, too long.
    #[test]
    fn unmaps_timed_apart_add_up_to_their_own_untraced_time() {
        static C: LockClass = LockClass::new("c", Scope::Mm);
        let ev = |ns: f64, kind: raw::Kind| raw_at(ns, kind, &C, LockModel::Line);
        // Faults: 10 gaps of 1000 ns; an unmap: 99 gaps of 100 ns.
        let mut raw_events = vec![ev(0.0, raw::Kind::Atomic)];
        let mut t = 0.0;
        for _ in 0..10 {
            t += 1000.0;
            raw_events.push(ev(t, raw::Kind::Atomic));
        }
        raw_events.push(ev(t, raw::Kind::Unmap { begin: true }));
        for _ in 0..99 {
            t += 100.0;
            raw_events.push(ev(t, raw::Kind::Atomic));
        }
        raw_events.push(ev(t, raw::Kind::Unmap { begin: false }));
        raw_events.push(ev(t, raw::Kind::Ops(1)));
        let mut m = meta();
        m.overhead_ns_per_event = 0.0;
        m.untraced_write_ns = Some(0.0);
        // Untraced: the faults took 9500 ns (recording cost 50 ns an event), the unmap 1980
        // (80 ns an event).
        m.untraced_ns = 9_500.0 + 1_980.0;
        // Compute before the first atomic of the unmap (the 12th), and from it on.
        let split = |t: &Trace| -> (f64, f64) {
            let first = t
                .events
                .iter()
                .enumerate()
                .filter(|(_, e)| matches!(e, Event::Atomic { .. }))
                .nth(11)
                .expect("12 atomics")
                .0;
            let c = |es: &[Event]| -> f64 {
                es.iter()
                    .map(|e| match *e {
                        Event::Compute { ns } => ns,
                        _ => 0.0,
                    })
                    .sum()
            };
            (c(&t.events[..first - 1]), c(&t.events[first - 1..]))
        };
        // Without the unmaps' own time: one cost for all 109 gaps, 77.25 ns.
        let one = Trace::from_raw(m.clone(), &raw_events);
        assert_eq!(one.meta.unmap_event_cost_ns, None);
        let (faults, unmap) = split(&one);
        assert!(
            (faults + unmap - 11_480.0).abs() < 5.0,
            "{faults} + {unmap}"
        );
        assert!(
            unmap > 2_200.0,
            "one cost leaves the unmap too long: {unmap}"
        );
        m.untraced_unmap_ns = Some(1_980.0);
        let two = Trace::from_raw(m, &raw_events);
        let cost = two.meta.unmap_event_cost_ns.expect("timed apart");
        assert!((cost - 80.0).abs() < 0.5, "{cost}");
        let rest = two.meta.event_cost_ns.expect("solved");
        assert!((rest - 50.0).abs() < 0.5, "{rest}");
        let (faults, unmap) = split(&two);
        assert!((faults - 9_500.0).abs() < 5.0, "{faults}");
        assert!((unmap - 1_980.0).abs() < 5.0, "{unmap}");
    }

    /// With a class's holds timed in the untraced window, the gaps inside its holds in the
    /// recording add up to that time, and the rest of the run to what is left: recording
    /// costs more inside a hold (its events are denser, and some of its work is no event).
    #[test]
    fn holds_timed_apart_add_up_to_their_own_untraced_time() {
        static Z: LockClass = LockClass::new("z", Scope::Node);
        let ev = |ns: f64, kind: raw::Kind| raw_at(ns, kind, &Z, LockModel::Queued);
        let (acquire, release) = exclusive_hold();
        // Outside: 10 gaps of 1000 ns. A hold: 20 gaps of 100 ns (line events inside it).
        let mut raw_events = vec![ev(0.0, raw::Kind::Atomic)];
        let mut t = 0.0;
        for _ in 0..10 {
            t += 1000.0;
            raw_events.push(ev(t, raw::Kind::Atomic));
        }
        raw_events.push(ev(t, acquire));
        for _ in 0..20 {
            t += 100.0;
            raw_events.push(ev(t, raw::Kind::Atomic));
        }
        raw_events.push(ev(t, release));
        raw_events.push(ev(t, raw::Kind::Ops(1)));
        let mut m = meta();
        m.overhead_ns_per_event = 0.0;
        m.untraced_write_ns = Some(0.0);
        // Untraced: 9500 ns outside (50 ns of recording an event), 800 inside (60 an event).
        m.untraced_ns = 9_500.0 + 800.0;
        m.untraced_holds = vec![UntracedHold {
            class: "z".into(),
            in_unmap: false,
            ns: 800.0,
            holds: 1,
            event_cost_ns: None,
        }];
        let tr = Trace::from_raw(m, &raw_events);
        let h = &tr.meta.untraced_holds[0];
        let cost = h.event_cost_ns.expect("timed apart");
        assert!((cost - 60.0).abs() < 0.5, "{cost}");
        assert!((tr.meta.event_cost_ns.unwrap() - 50.0).abs() < 0.5);
        let (mut inside, mut outside, mut held) = (0.0, 0.0, false);
        for e in &tr.events {
            match *e {
                Event::Acquire { .. } => held = true,
                Event::Release { .. } => held = false,
                Event::Compute { ns } if held => inside += ns,
                Event::Compute { ns } => outside += ns,
                _ => {}
            }
        }
        assert!((inside - 800.0).abs() < 2.0, "{inside}");
        assert!((outside - 9_500.0).abs() < 2.0, "{outside}");
    }

    #[test]
    fn raw_events_become_instances_and_compute_gaps() {
        static C: LockClass = LockClass::new("c", Scope::Mm);
        let tpn = raw::ticks_per_ns();
        let at = |ns: f64| (ns * tpn) as u64;
        let ev = |t: f64, kind: raw::Kind, inst: usize| raw::Event {
            t: at(t),
            kind,
            class: &C,
            instance: inst,
            model: LockModel::RwSem,
        };
        let raw_events = [
            ev(
                1000.0,
                raw::Kind::Acquire {
                    access: Access::Shared,
                    trylock: false,
                },
                0xa0,
            ),
            ev(
                1100.0,
                raw::Kind::Write {
                    bytes: 4096,
                    end: at(1400.0),
                },
                0,
            ),
            ev(
                1500.0,
                raw::Kind::Release {
                    access: Access::Shared,
                },
                0xa0,
            ),
            ev(1600.0, raw::Kind::Atomic, 0xb0),
            ev(1600.0, raw::Kind::Ops(1), 0),
        ];
        let mut m = meta();
        m.overhead_ns_per_event = 10.0;
        // An untraced run of exactly what the gaps and the write add up to: no scaling.
        m.untraced_ns = 3.0 * 90.0 + 300.0;
        let t = Trace::from_raw(m, &raw_events);
        assert!((t.meta.compute_scale - 1.0).abs() < 0.01);
        assert_eq!(t.instances.len(), 2, "two addresses, two instances");
        assert_eq!(t.meta.ops, 1);
        assert_eq!(t.meta.raw_events, 5);
        let approx = |a: f64, b: f64| (a - b).abs() < 1.0;
        match t.events.as_slice() {
            [
                Event::Acquire {
                    inst: 0,
                    shared: true,
                    ..
                },
                Event::Compute { ns: a },
                Event::Write {
                    bytes: 4096,
                    host_ns,
                },
                Event::Compute { ns: b },
                Event::Release { inst: 0, .. },
                Event::Compute { ns: c },
                Event::Atomic { inst: 1 },
                Event::Ops { n: 1 },
            ] => {
                // Gaps less the overhead; the write's own time is not compute; a gap smaller
                // than the overhead is no compute at all.
                assert!(approx(*a, 90.0), "{a}");
                assert!(approx(*host_ns, 300.0), "{host_ns}");
                assert!(approx(*b, 90.0), "{b}");
                assert!(approx(*c, 90.0), "{c}");
            }
            other => panic!("{other:?}"),
        }
    }
}
