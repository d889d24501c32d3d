//! Replay: N virtual CPUs of a machine description run one trace each, as a deterministic
//! discrete-event simulation.
//!
//! Every CPU executes the trace's events in order. Compute takes its captured time scaled from
//! the capture host's clock to the machine's (and slowed when the core's other hardware thread
//! is busy too). What other CPUs can see is costed by the machine:
//!
//! - **Cache lines.** Every shared lock word and counter is a line with an owner. An atomic on
//!   it waits until the line is free, then pays the transfer latency from the last owner (by
//!   SMT sibling, node, or NUMA distance) and keeps the line busy for the atomic itself; so a
//!   line written by many CPUs serialises them, each paying a transfer (the rwsem reader count
//!   of `mmap_lock`, a shared per-VMA lock, atomic RSS counters).
//! - **Locks.** A held lock queues its waiters in FIFO order. The hand-off cost is the lock
//!   algorithm's: a queued (MCS) spinlock hands over with one transfer to the next waiter,
//!   whatever the queue length; a ticket lock's release is re-read by every spinning waiter
//!   and the next owner's read is served at a uniformly random place among them (Boyd-Wickizer
//!   et al., "Non-scalable locks are dangerous", 2012), so its hand-off grows with the
//!   waiters. An rwsem's readers share it, but each reader's entry and exit is an atomic on its
//!   one count line; writers exclude, and new readers wait behind a waiting writer. Waiters of
//!   a sleeping lock (`mmap_lock`) use no CPU and pay a wake-up at hand-off. A queued rwlock
//!   (`rwlock_t`) never sleeps: its waiters spin FIFO on its `wait_lock` (kernel/locking/qrwlock.c).
//! - **Memory under load.** Page clearing and copying run at a rate that depends on how many
//!   CPUs of the node write at once: each writer's line fills wait longer as the node's
//!   utilisation rises along its loaded-latency curve, so each clears more slowly; at the
//!   node's peak they share it ([`crate::memory`]).
//! - **TLB shootdowns.** A flush of an mm with other CPUs running it (threads) costs its
//!   sender the IPI round trip and every other CPU of the mm the handler.
//!
//! Instances map by scope and mode: per-node ones to the instance of the CPU's node (tasks
//! allocate locally), per-mm ones are one instance shared by threads and private to processes,
//! per-VMA ones shared by threads only when the workload's threads fault one VMA, per-CPU and
//! private ones never shared. A private instance can meet no other CPU, so its events cost what
//! the trace's compute already contains and are dropped.
//!
//! Randomness (each CPU's starting point in a cyclic trace, the start skew of a fixed-work
//! run, a ticket lock's service order) comes from one seeded generator: a seed gives the same
//! result on every run.

use std::collections::{HashMap, VecDeque};

use crate::event_queue::EventQueue;

use pagelab_sync::trace::{LockModel, Sym};
use pagelab_sync::{RwsemAlgo, Scope};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::coherence::Line;
use crate::error::{MachineError, ProjectError};
use crate::machine::Machine;
use crate::trace::{Event, Trace, Window};

/// What to replay.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplaySpec {
    pub tasks: usize,
    /// Threads of one address space (else processes).
    pub threads: bool,
    pub seed: u64,
    /// Sample windows to cut a cyclic run into.
    pub samples: usize,
    /// Fixed-work runs: at most this many operations per CPU (the trace's prefix); `None`
    /// runs the whole trace.
    pub ops_per_cpu: Option<u64>,
}

/// One lock class's (or line class's) contention over the run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClassStats {
    pub name: String,
    pub acquisitions: u64,
    /// Acquisitions that had to wait (for the lock or for its line).
    pub contended: u64,
    pub wait_ns: f64,
    /// Trylocks that found the lock taken and ran the engine's fallback path instead (the
    /// per-VMA lock's fault under mmap_lock; see [`crate::trace::Fallback`]).
    pub fallbacks: u64,
    /// Exclusive holds released, and their summed length from the moment the lock was
    /// taken to its release, ns: what lock_stat's `holdtime-total` counts, so that a replayed
    /// row can be set beside a published lock_stat (hold per acquisition, and the share of
    /// the run a class's instances were held: `hold_ns / span_ns`).
    pub holds: u64,
    pub hold_ns: f64,
    /// Plain accesses of this class's lines (named ones, and list entries named relative to
    /// a head), and what their transfers made the accessing CPUs wait, ns: where a critical
    /// section's length comes from beyond its compute (`REPLAY_CLASSES=1` of `replay_speed`).
    pub line_events: u64,
    pub line_ns: f64,
    /// Of `line_ns`, the time the accesses of a line itself queued behind the line's other
    /// requests before their transfer began, also in `wait_ns`: `line_ns - line_queued_ns` is
    /// the transfers alone.
    pub line_queued_ns: f64,
    /// The same for the symbolic list entries alone (`Sym::First`, `Sym::Entry`).
    pub entry_events: u64,
    pub entry_ns: f64,
    /// Prefetches for writing of this class's lines (which no CPU waits for), and how many
    /// served nothing: no access of the prefetching CPU came while the line travelled, and
    /// by its first access after the arrival another CPU had taken the line (that access paid
    /// a transfer of its own).
    pub prefetches: u64,
    pub prefetches_lost: u64,
    /// Of `prefetches`, those still on their way when their CPU's exception returned
    /// (`iretq` serializes, so the CPU waited there for the line), and that wait, ns (also
    /// in `line_ns`; the part that was the request's turn behind others in `line_queued_ns`
    /// and `wait_ns`).
    pub prefetch_return_waits: u64,
    pub prefetch_return_ns: f64,
    /// Of `line_events`, the stores no CPU waited for ([`crate::trace::Event::Store`]), and
    /// their transfers, ns (not in `line_ns` or `entry_ns`, which count what CPUs waited).
    pub stores: u64,
    pub store_ns: f64,
    /// What this class's releases, acquisitions and atomics waited, ns, for the stores
    /// buffered before them to have their lines (the store buffer's drain); for a line
    /// class, also what the fences after its stores waited ([`Op::Fence`]).
    pub drain_ns: f64,
}

impl ClassStats {
    /// Adds `c` to the class of its name in `into`, or appends it: several replays' classes
    /// (a row's captures) merged into one list, in the order first met.
    pub fn merge_into(into: &mut Vec<ClassStats>, c: &ClassStats) {
        match into.iter_mut().find(|x| x.name == c.name) {
            Some(x) => x.merge(c),
            None => into.push(c.clone()),
        }
    }

    /// Adds another replay's figures for the same class (another capture's): every
    /// field is a count or a sum, so the merged class reads as one longer run.
    pub fn merge(&mut self, o: &ClassStats) {
        let ClassStats {
            name: _,
            acquisitions,
            contended,
            wait_ns,
            fallbacks,
            holds,
            hold_ns,
            line_events,
            line_ns,
            line_queued_ns,
            entry_events,
            entry_ns,
            prefetches,
            prefetches_lost,
            prefetch_return_waits,
            prefetch_return_ns,
            stores,
            store_ns,
            drain_ns,
        } = o;
        self.acquisitions += acquisitions;
        self.contended += contended;
        self.wait_ns += wait_ns;
        self.fallbacks += fallbacks;
        self.holds += holds;
        self.hold_ns += hold_ns;
        self.line_events += line_events;
        self.line_ns += line_ns;
        self.line_queued_ns += line_queued_ns;
        self.entry_events += entry_events;
        self.entry_ns += entry_ns;
        self.prefetches += prefetches;
        self.prefetches_lost += prefetches_lost;
        self.prefetch_return_waits += prefetch_return_waits;
        self.prefetch_return_ns += prefetch_return_ns;
        self.stores += stores;
        self.store_ns += store_ns;
        self.drain_ns += drain_ns;
    }
}

/// What a replay measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReplayResult {
    /// Operations per second: per sample window (cyclic), or one value (fixed work).
    pub samples: Vec<f64>,
    /// Fixed work: operations per CPU-second (busy time, sleeping excluded).
    pub ops_per_cpu_sec: Option<f64>,
    /// Operations completed in the measured span, and that span, ns.
    pub ops: u64,
    pub span_ns: f64,
    /// Per class, in the order first met.
    pub classes: Vec<ClassStats>,
    /// Simulated events processed (the speed benchmark's numerator).
    pub events: u64,
}

impl ReplayResult {
    /// Every figure finite and not negative: what a replay hands on to be stored. A value that
    /// is not is a defect of the replay, reported rather than stored.
    pub fn check(&self) -> Result<(), ProjectError> {
        let figures = self
            .samples
            .iter()
            .copied()
            .chain(self.ops_per_cpu_sec)
            .chain([self.span_ns])
            .chain(self.classes.iter().map(|c| c.wait_ns));
        for v in figures {
            if !(v.is_finite() && v >= 0.0) {
                return Err(ProjectError::Replay(format!(
                    "the replay produced {v}, not a finite figure; nothing of it is stored"
                )));
            }
        }
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    /// Picoseconds at the machine's clock.
    Compute(u64),
    Trap,
    /// The exception's return ([`Event::TrapReturn`]).
    TrapReturn,
    Atomic(u32),
    Acquire(u32, bool),
    /// A trylock with the index of its fallback in the program's [`Alt`] table ([`NONE`]:
    /// none recorded, so a failed trylock waits as a lock would), and whether the kernel reads
    /// the lock word first ([`fold_read`]): a trylock with a fallback that fails has made
    /// that read alone, and is charged it.
    Try(u32, bool, u32, bool),
    Release(u32, bool),
    /// An rwsem's write hold become a read hold ([`Sim::downgrade`]).
    Downgrade(u32),
    Write(u32),
    Flush,
    Ops(u32),
    /// A plain read (`false`) or write of a line, or of a list entry named relative to it.
    Line(u32, bool, Sym),
    /// A prefetch for writing of a line ([`Sim::prefetch`]).
    Prefetch(u32),
    /// A store the CPU does not wait for, to a line or to a list entry named relative to it
    /// ([`Sim::store`]).
    Store(u32, Sym),
    /// A locked instruction on a private line after a store ([`Event::Fence`]): the CPU waits
    /// for its buffered stores to have their lines. The resource is the last store's, whose
    /// class the wait is counted under (`drain_ns`).
    Fence(u32),
}

impl Op {
    /// Whether the CPU waits at this op until the stores in its store buffer have their lines,
    /// and then the resource whose class counts the wait: a locked instruction (taking a lock,
    /// a trylock, except one with a fallback that fails, which the simulator tells apart; an
    /// atomic, a downgrade, a fence) or a lock's release (a store that TSO makes
    /// visible only after every earlier one), by its resource; a TLB shootdown, whose IPI path
    /// fences, by none. (A spinlock's release is a plain store: the CPU itself could go on
    /// while it waits to become visible, but the replay makes it wait with it, 0.4 to 0.5 ns a
    /// fault on page_fault1's traces.)
    fn drains_stores(self) -> Option<Option<u32>> {
        match self {
            Op::Release(r, _)
            | Op::Downgrade(r)
            | Op::Atomic(r)
            | Op::Acquire(r, _)
            | Op::Try(r, ..)
            | Op::Fence(r) => Some(Some(r)),
            Op::Flush => Some(None),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LockKind {
    Ticket,
    Queued,
    /// An rwsem, waiting as its era's algorithm did.
    Rw(RwWait),
    /// A queued rwlock (`rwlock_t`, kernel/locking/qrwlock.c): waiters spin FIFO on its
    /// `wait_lock`, never sleep ([`Sim::qrw_advance`]).
    QRw,
    /// Refcounts and plain lines: every acquire and release is one atomic.
    Line,
}

/// How an rwsem's waiters wait (from the trace's [`RwsemAlgo`]; see its variants for the
/// kernel commits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RwWait {
    /// Queued waiters sleep (no CPU; a wake-up at hand-off), else they spin in the queue.
    sleeps: bool,
    /// A woken writer must take the lock itself, and an arriving writer may take it first.
    steal: bool,
    /// Writers (readers) that find a writer holding the lock spin on it (optimistic
    /// spinning), ahead of the sleepers.
    writers_spin: bool,
    readers_spin: bool,
    /// A head waiter that has waited [`RWSEM_WAIT_TIMEOUT_PS`] gets the lock next: no
    /// stealing and no spinner ahead of it.
    handoff: bool,
}

impl RwWait {
    fn of(algo: Option<RwsemAlgo>, sleeps: bool) -> RwWait {
        match algo {
            Some(a) => RwWait {
                sleeps: true,
                steal: a.steals(),
                writers_spin: a.writers_spin(),
                readers_spin: a.readers_spin(),
                handoff: a.hands_off(),
            },
            // Traces from before the algorithm was recorded: FIFO, sleeping as the class says.
            None => RwWait {
                sleeps,
                steal: false,
                writers_spin: false,
                readers_spin: false,
                handoff: false,
            },
        }
    }
}

/// `RWSEM_WAIT_TIMEOUT` (4 ms: `DIV_ROUND_UP(HZ, 250)` jiffies): how long the first waiter
/// lets others take the lock before it sets the hand-off bit (4f23dbc1e657, 5.3).
const RWSEM_WAIT_TIMEOUT_PS: u64 = 4_000_000_000;

/// A trylock's fallback in a program: `len` ops from `start` in the program's fallback ops,
/// run instead of the `skip` ops after the trylock (its success path, up to and with the
/// release of the lock it took).
#[derive(Clone, Copy, Debug)]
struct Alt {
    start: u32,
    len: u32,
    skip: u32,
}

#[derive(Clone, Copy)]
struct Waiter {
    cpu: u32,
    shared: bool,
    since: u64,
}

struct Resource {
    kind: LockKind,
    class: usize,
    /// Its cache line's coherence state (and, for a list head, its first entry's writer).
    line: Line,
    busy_until: u64,
    holder: Option<u32>,
    /// When the exclusive holder took it (for [`ClassStats::hold_ns`]).
    held_since: u64,
    readers: u32,
    waiters: VecDeque<Waiter>,
    /// rwsem: optimistic spinners (the MCS `osq`, FIFO), busy while they wait.
    spinners: VecDeque<Waiter>,
    /// rwsem: a writer woken to take the lock itself (it is free meanwhile, and may be
    /// stolen).
    waking: Option<Waiter>,
    /// qrwlock: the waiter holding the internal `wait_lock`, spinning on the count word (a
    /// writer there has set `_QW_WAITING`); `waiters` queue behind it on the `wait_lock`.
    /// `None` whenever `waiters` is empty.
    qhead: Option<Waiter>,
}

/// No CPU (a line nobody has written yet).
pub(crate) const NONE: u32 = u32::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum St {
    Ready,
    /// Woken from an rwsem's wait list to take the lock itself (resource index).
    Woken(u32),
    WaitLock,
    WaitBus,
    /// A pair's side waiting for its partner (a full or an empty socket).
    WaitPair,
    Done,
}

struct Cpu {
    node: usize,
    prog: usize,
    pc: usize,
    /// Ops left before this CPU's quota is done.
    left: u64,
    /// How much longer its compute takes than the trace's at the all-core clock: the SMT
    /// sibling's share and the socket's clock (`cpu.turbo_ghz`).
    factor: f64,
    /// The same for the trap, which is stated at one busy core's clock.
    trap_factor: f64,
    st: St,
    stolen: u64,
    sleep_since: Option<u64>,
    slept: u64,
    /// Running a trylock's fallback: the next op and the end, in the program's fallback ops.
    alt: Option<(u32, u32)>,
    started: u64,
    finished: u64,
    /// When its memory write began (its CPU time counts from there).
    write_from: u64,
    /// The host's slices ([`Sim::on_cpu`]): the task runs until `run_end`, then waits for its
    /// CPU until `wait_end`.
    run_end: u64,
    wait_end: u64,
    /// This CPU's last prefetch for writing, until it is settled ([`Sim::prefetch_claim`]).
    prefetch: Option<InFlight>,
    /// When the last of the stores in its store buffer has its line ([`Sim::store`]).
    stores_until: u64,
    /// An op that waited for the store buffer to drain, to run when it has.
    held_op: Option<Op>,
}

/// A prefetch for writing on its way to (or arrived at) its CPU.
#[derive(Clone, Copy)]
struct InFlight {
    /// The resource whose line was prefetched.
    res: u32,
    /// When the request's turn at the line came (after the requests queued before it).
    from: u64,
    /// When the line arrives.
    at: u64,
    /// Whether an access of the CPU was served by it.
    used: bool,
}

struct Bus {
    /// Each writer's rate with `n` writers on the node, bytes per picosecond (shared by all
    /// nodes: [`Replay::writer_rates`]).
    rates: std::rc::Rc<[f64]>,
    jobs: Vec<(u32, f64)>,
    last: u64,
    next_at: u64,
}

impl Bus {
    fn rate(&self) -> f64 {
        // The table covers every CPU of the replay, so `jobs.len()` is always in it.
        self.rates[self.jobs.len().min(self.rates.len() - 1)]
    }

    fn advance(&mut self, t: u64) {
        let r = self.rate();
        let dt = t.saturating_sub(self.last) as f64;
        for j in &mut self.jobs {
            j.1 -= r * dt;
        }
        self.last = t;
    }

    fn next_completion(&self, t: u64) -> Option<u64> {
        let r = self.rate();
        let min = self.jobs.iter().map(|j| j.1).fold(f64::INFINITY, f64::min);
        (min.is_finite()).then(|| t.saturating_add((min.max(0.0) / r).ceil() as u64))
    }
}

/// A trace compiled for one machine and task layout, ready to run with many seeds.
pub struct Replay<'a> {
    machine: &'a Machine,
    trace: &'a Trace,
    spec: ReplaySpec,
    /// One program per NUMA node (node-scoped instances differ between them).
    progs: Vec<Vec<Op>>,
    /// Which program and node each task gets.
    placement: Vec<(usize, usize)>,
    /// Per program, the fallbacks of its trylocks and their ops.
    alts: Vec<Vec<Alt>>,
    alt_ops: Vec<Vec<Op>>,
    /// Per program, the points where the task holds nothing (after each operation): where a
    /// cyclic replay may start.
    starts: Vec<Vec<usize>>,
    resources_proto: Vec<(LockKind, usize)>,
    class_names: Vec<String>,
    trap_ps: u64,
    atomic_ps: u64,
    wakeup_ps: u64,
    ipi_ps: u64,
    ipi_handler_ps: u64,
    /// transfer[i][j] between the tasks' CPUs, ps.
    transfer: Vec<Vec<u64>>,
    /// Each task's `(compute, trap)` slowdowns ([`Cpu::factor`], [`Cpu::trap_factor`]).
    factors: Vec<(f64, f64)>,
    /// Each task's share of its CPU (`cpu.share` at this task count).
    share: f64,
    /// The slowdown applied to every op uniformly: the share, when no wait is timed.
    uniform: f64,
    /// Mean picoseconds a task runs and waits in turn for its CPU (exponential both), when
    /// the host's slices are timed: [`Sim::on_cpu`].
    sched: Option<(f64, f64)>,
    /// A pair trace: the socket's depth in messages (what the sender may queue ahead).
    pair_depth: Option<u64>,
}

/// An exponential draw of mean `mean` ps, at least 1 (so that a run of periods always moves on).
fn exp_ps(rng: &mut ChaCha8Rng, mean: f64) -> u64 {
    ((-mean * (1.0 - rng.r#gen::<f64>()).ln()) as u64).max(1)
}

/// Which events of `events` to keep: acquires and releases that pair up within it; a release
/// of something taken before the recording started, or an acquire still held when it
/// stopped, is dropped, and a downgrade goes with the hold it turned shared.
fn paired(events: &[Event]) -> Vec<bool> {
    let mut keep = vec![true; events.len()];
    // Per instance, the holds open: the acquire's index and its downgrade's, if any.
    let mut open: HashMap<u32, Vec<(usize, Option<usize>)>> = HashMap::new();
    for (i, e) in events.iter().enumerate() {
        match *e {
            Event::Acquire { inst, .. } => open.entry(inst).or_default().push((i, None)),
            Event::Release { inst, .. } if open.get_mut(&inst).and_then(Vec::pop).is_none() => {
                keep[i] = false;
            }
            Event::Downgrade { inst } => match open.get_mut(&inst).and_then(|v| v.last_mut()) {
                Some((_, d @ None)) => *d = Some(i),
                // The downgrade of a hold taken before the recording started.
                _ => keep[i] = false,
            },
            _ => {}
        }
    }
    for (a, d) in open.into_values().flatten() {
        keep[a] = false;
        if let Some(d) = d {
            keep[d] = false;
        }
    }
    keep
}

/// One sender/receiver pair's socket at replay: messages sent and received so far, and the
/// side waiting for the other (a full socket for the sender, an empty one for the receiver).
#[derive(Clone, Copy, Default)]
struct PairQ {
    sent: u64,
    received: u64,
    waiting: Option<usize>,
}

/// Nanoseconds to whole picoseconds. `as` saturates (and takes NaN to 0); the replay's time
/// arithmetic saturates too, and a time at [`HORIZON_PS`] or beyond ends the run with an error,
/// so a huge value can never wrap around into a plausible one.
fn ps(ns: f64) -> u64 {
    (ns * 1000.0).round().max(0.0) as u64
}

/// The most simulated events one replay may process, whatever its size. The shipped
/// experiments' largest rows take 3.6e8 (will-it-scale page_fault1, a cycle of 0.7 M events, 512
/// threads on the 512-CPU machine, one pass each); a machine of 4096 CPUs would take eight times
/// that. The per-replay budget ([`EVENTS_PER_PASS`]) is what normally stops a runaway replay;
/// this caps it for the largest machines.
pub const MAX_EVENTS: u64 = 100_000_000_000;

/// A replay's events are bounded by its own work: every CPU's program (its cycle, or its
/// fixed-work prefix) this many times over. A fixed-work run takes exactly one pass; a cyclic
/// run ends when half its CPUs have gone round once, and no CPU runs more than about twice as
/// fast as another (FIFO locks; SMT halves a thread at worst), so the shipped experiments take
/// 1.0 passes per CPU (measured at 1 to 512 tasks). Eight is far beyond that, and stops a
/// runaway replay after a few times its proper length rather than hours later.
pub const EVENTS_PER_PASS: u64 = 8;

/// Below this, the budget is never tight (tiny traces, one task).
const MIN_EVENTS: u64 = 1 << 20;

/// Simulated time a replay may reach, ps (2^62 ps: 53 days). Real replays span seconds; the
/// bound sits below `u64::MAX`, where saturated sums would stop, so no overflow goes unnoticed.
pub const HORIZON_PS: u64 = 1 << 62;

/// The most sample bins of a cyclic run's operation counts; beyond it adjacent bins merge
/// (counts are kept whole, only their resolution halves), so a run that lasts far longer than
/// its cycle suggested cannot grow the bins without bound.
const MAX_BINS: usize = 1 << 22;

/// The op of one trace event other than compute, with `map` giving the resource of an
/// instance (`None`: private, dropped). A trylock becomes a plain acquire here.
/// Appends `op` (if any) to `out` after the compute accumulated since the last op, as one
/// `Compute`: the trace's gaps between two ops, however many events they were, are one stretch
/// of work. With `None`, only the compute is flushed (at the end of a program or fallback).
fn push_after_compute(out: &mut Vec<Op>, pending: &mut f64, op: Option<Op>) {
    if *pending > 0.0 {
        out.push(Op::Compute(ps(*pending)));
        *pending = 0.0;
    }
    out.extend(op);
}

/// Whether a program may leave out `op`, an exception's return, because it cannot wait there:
/// the return waits only for a prefetch still in flight ([`Sim::prefetch_at_return`]), and
/// once the CPU has read, written or exchanged the prefetched line itself after the prefetch,
/// that access either completed with the prefetch's arrival or came after it, so the line is
/// no longer on its way. Most faults' prefetch is followed by `mmap_lock`'s trylock or the
/// read of a field beside it, and their returns would be an op a fault that never waits (10
/// to 22% of `validate`'s time). No left-out return could have waited; but the program is
/// shorter, and a cyclic run counts its cycles in ops, so a cycle ends a little elsewhere in
/// the trace (rows moved by up to 0.8% against never leaving one out, on page_fault1 captures
/// of linux-4.15).
fn elide_return(e: &mut Elision, op: Op) -> bool {
    match op {
        Op::Prefetch(r) => e.in_flight = Some(r),
        // A trylock with a recorded fallback: a failure replaces the ops up to its release
        // with the fallback's, which this pass does not see, so an access in between does not
        // count.
        Op::Try(r, _, alt, _) if alt != NONE && e.trylock.is_none() => e.trylock = Some(r),
        Op::Release(r, _) if e.trylock == Some(r) => e.trylock = None,
        Op::Line(r, _, Sym::Here) | Op::Atomic(r)
            if e.in_flight == Some(r) && e.trylock.is_none() =>
        {
            e.in_flight = None
        }
        Op::TrapReturn => return e.in_flight.take().is_none(),
        _ => {}
    }
    false
}

/// What [`elide_return`] tracks through one program.
struct Elision {
    /// The resource of the fault's last prefetch while no access of it has followed.
    in_flight: Option<u32>,
    /// A trylock with a fallback taken and not yet released.
    trylock: Option<u32>,
}

impl Elision {
    /// At a program's start: unknown (no resource has this number), since a cyclic program's
    /// first return could end a fault whose prefetch is at the program's end, so that return
    /// is kept.
    fn new() -> Elision {
        Elision {
            in_flight: Some(u32::MAX),
            trylock: None,
        }
    }
}

/// A read of a line followed at once by a locked instruction on it (a trylock's exchange, an
/// atomic, a lock's acquisition) by the same CPU is one request for the line. In the kernel the
/// pair is a trylock's two adjacent instructions (`__down_read_trylock`: `atomic_long_read`,
/// then `atomic_long_try_cmpxchg_acquire`; `refcount_inc_not_zero` likewise), and on this
/// project's host a load followed at once by a locked instruction on a line another core
/// holds modified costs what the locked instruction alone costs, in latency and in what the
/// line sustains between two contending cores (`examples/line_probe.rs`; docs/model.md,
/// section 3, "A read right before an exchange"): the core asks for the line's ownership with
/// the load's miss, not after it. So the read is folded into the op that follows it: the line
/// is fetched once, as for the atomic alone.
///
/// `fresh` says that the read is the op the previous event compiled to, with no event left
/// out between (a private instance's access, an elided return, a fence with nothing to wait
/// for), and `floor` is where the program being compiled starts in `out` (a fallback
/// segment's ops follow the previous segment's in one vector). For a trylock what the engine
/// computed between its two recorded events is its own bookkeeping (the exchange loop, lock
/// statistics, the recorder) and stays before the locked op, merged with the compute before
/// the read; elsewhere a read is folded only with nothing computed between (`*pending` 0).
/// Returns `op`, a trylock marked with whether it folded a read ([`Op::Try`]'s last field).
fn fold_read(
    out: &mut Vec<Op>,
    floor: usize,
    pending: &mut f64,
    op: Op,
    trylock: bool,
    fresh: bool,
) -> Op {
    if !fresh || out.len() <= floor || !(trylock || *pending == 0.0) {
        return op;
    }
    let r = match op {
        Op::Acquire(r, _) | Op::Try(r, ..) | Op::Atomic(r) => r,
        _ => return op,
    };
    if out.last() != Some(&Op::Line(r, false, Sym::Here)) {
        return op;
    }
    out.pop();
    // One compute op for the gap before the locked op, as `push_after_compute` keeps it.
    if *pending > 0.0
        && out.len() > floor
        && let Some(&Op::Compute(d)) = out.last()
    {
        out.pop();
        *pending += d as f64 / 1000.0;
    }
    match op {
        Op::Try(r, shared, alt, _) => Op::Try(r, shared, alt, true),
        o => o,
    }
}

fn event_op(e: &Event, map: &mut impl FnMut(u32) -> Option<u32>, flush: bool) -> Option<Op> {
    match *e {
        Event::Compute { .. } => None,
        Event::Acquire { inst, shared, .. } => map(inst).map(|r| Op::Acquire(r, shared)),
        Event::Release { inst, shared } => map(inst).map(|r| Op::Release(r, shared)),
        Event::Downgrade { inst } => map(inst).map(Op::Downgrade),
        Event::Atomic { inst } => map(inst).map(Op::Atomic),
        Event::Write { bytes, .. } => Some(Op::Write(bytes)),
        Event::Trap => Some(Op::Trap),
        Event::TrapReturn => Some(Op::TrapReturn),
        Event::TlbFlush { .. } => flush.then_some(Op::Flush),
        Event::Ops { n } => Some(Op::Ops(n)),
        Event::Line { inst, write, sym } => map(inst).map(|r| Op::Line(r, write, sym)),
        Event::Prefetch { inst } => map(inst).map(Op::Prefetch),
        Event::Store { inst, sym } => map(inst).map(|r| Op::Store(r, sym)),
        // Its resource is filled in by [`fence_after_store`].
        Event::Fence => Some(Op::Fence(NONE)),
    }
}

/// Gives a fence the resource of the last store before it, or leaves it out (`None`) when no
/// store has come since the last op that drains the store buffer: it could not wait then. A
/// store to a private line maps to no op, so a fence after only such stores goes too. `last`
/// carries the state from op to op through one program.
///
/// Only drains the replay runs reset it. A lock operation or atomic on an instance this mode
/// keeps private (an mm's in processes mode) or a TLB flush the replay does not charge drained
/// the store buffer too, on the machine; a fence after it may find a store still pending and
/// wait for it, as a release there would (the same approximation as the releases': a store's
/// line is rarely still on its way after such an op).
fn fence_after_store(last: &mut Option<u32>, op: Op) -> Option<Op> {
    match op {
        Op::Store(r, _) => *last = Some(r),
        Op::Fence(_) => return last.take().map(Op::Fence),
        _ if op.drains_stores().is_some() => *last = None,
        _ => {}
    }
    Some(op)
}

impl<'a> Replay<'a> {
    /// The events of program `prog` a CPU runs for one cycle of a cyclic trace: one
    /// iteration's share ([`TraceMeta::iterations`](crate::trace::TraceMeta::iterations)),
    /// which holds one period of the loop whatever the point it starts from. The run still
    /// lasts until the cycles completed add up to the whole trace, so one CPU replays all of
    /// it (docs/model.md, section 3, "Metrics").
    fn cycle_len(&self, prog: usize) -> u64 {
        let len = self.progs[prog].len() as u64;
        (len / u64::from(self.trace.meta.iterations.max(1))).max(1)
    }

    /// Compiles `trace` for `spec.tasks` tasks on `machine`.
    pub fn new(
        machine: &'a Machine,
        trace: &'a Trace,
        spec: ReplaySpec,
    ) -> Result<Self, ProjectError> {
        // Files are checked when loaded; a machine built in code is checked here, so that no
        // value outside its physical range reaches the arithmetic below.
        machine.check().map_err(|e| MachineError::In {
            what: machine.name.clone(),
            source: Box::new(e),
        })?;
        if spec.tasks == 0 {
            return Err(ProjectError::Replay(
                "a replay needs at least one task".into(),
            ));
        }
        if spec.tasks > machine.nr_cpus() {
            return Err(ProjectError::Replay(format!(
                "{} tasks is more than the {} CPUs of {}",
                spec.tasks,
                machine.nr_cpus(),
                machine.name
            )));
        }
        if trace.meta.ops == 0 {
            return Err(ProjectError::Replay(format!(
                "the trace of {} with {} counted no operation",
                trace.meta.workload, trace.meta.profile
            )));
        }
        let cpus: Vec<usize> = (0..spec.tasks)
            .map(|i| machine.cpu_of(i, trace.meta.pinning))
            .collect();
        let nodes: Vec<usize> = cpus.iter().map(|&c| machine.pos(c).node).collect();
        let mut used_nodes: Vec<usize> = nodes.clone();
        used_nodes.sort_unstable();
        used_nodes.dedup();
        let mut class_names: Vec<String> = Vec::new();
        let mut class_of = |name: &str| -> usize {
            match class_names.iter().position(|n| n == name) {
                Some(i) => i,
                None => {
                    class_names.push(name.to_string());
                    class_names.len() - 1
                }
            }
        };
        let mut resources_proto: Vec<(LockKind, usize)> = Vec::new();
        let mut res_ids: HashMap<(u32, usize), u32> = HashMap::new();
        let threads = spec.threads;
        let scale = trace.meta.host_ghz / machine.cpu.ghz;
        if !(scale.is_finite() && scale > 0.0) {
            return Err(ProjectError::Replay(format!(
                "the trace of {} with {} gives its host's clock as {} GHz",
                trace.meta.workload, trace.meta.profile, trace.meta.host_ghz
            )));
        }
        if trace.events.iter().any(|e| match e {
            Event::Compute { ns } => !(ns.is_finite() && *ns >= 0.0),
            _ => false,
        }) {
            return Err(ProjectError::Replay(format!(
                "the trace of {} with {} has a compute time that is not a finite number of nanoseconds",
                trace.meta.workload, trace.meta.profile
            )));
        }
        // A pair trace (netpipe): even tasks replay the sender's events, odd ones the
        // receiver's turns, one after the other ([`Trace::from_raw_pair`]).
        let receiver: Option<Vec<Event>> = trace
            .receiver_turns()
            .map(|turns| turns.iter().flatten().copied().collect());
        // The socket's depth, what the sender may have queued ahead of the receiver: what a
        // default UDP socket queues at the trace's send size (`send-64 messages`); a trace
        // that names no send size (built by hand) holds one socket in each receiver turn.
        // Captured turns are one release step each, a quarter of the socket.
        let pair_depth = trace.receiver_turns().map(|turns| {
            crate::netpipe::send_size_of(trace)
                .map(|size| pagelab_workloads::netpipe::NetpipeParams::new(1, size).depth() as u64)
                .unwrap_or_else(|| {
                    turns
                        .iter()
                        .map(|turn| {
                            turn.iter()
                                .map(|e| match e {
                                    Event::Ops { n } => u64::from(*n),
                                    _ => 0,
                                })
                                .sum::<u64>()
                        })
                        .max()
                        .unwrap_or(0)
                })
                .max(1)
        });
        if receiver.is_some() && !spec.tasks.is_multiple_of(2) {
            return Err(ProjectError::Replay(format!(
                "the trace of {} replays sender/receiver pairs: {} tasks is not a whole number of pairs",
                trace.meta.workload, spec.tasks
            )));
        }
        let keep = paired(&trace.events);
        let keep_rx = receiver.as_deref().map(paired).unwrap_or_default();
        // Which recorded fallback each instance's trylocks take, and where each fallback's
        // segments start in one numbering of all segments.
        let fallback_of: Vec<Option<usize>> = trace
            .instances
            .iter()
            .map(|i| {
                trace
                    .fallbacks
                    .iter()
                    .position(|f| f.class == i.class && !f.segments.is_empty())
            })
            .collect();
        let seg_base: Vec<usize> = trace
            .fallbacks
            .iter()
            .scan(0, |acc, f| {
                let b = *acc;
                *acc += f.segments.len();
                Some(b)
            })
            .collect();
        // Both are powers of two, the machine's at least the engine's (`Machine::check`).
        let page_ratio = (machine.memory.page_size / pagelab_mm::page::PAGE_SIZE as u64)
            .clamp(1, u64::from(u32::MAX)) as u32;
        let mut progs = Vec::new();
        let mut all_alts = Vec::new();
        let mut all_alt_ops = Vec::new();
        let mut starts = Vec::new();
        let mut prog_of_node = HashMap::new();
        // Programs: one per node, or for a pair trace one per task (the pair's own lines are
        // per-mm instances of that pair: its socket).
        let keys: Vec<(usize, usize, usize)> = if receiver.is_some() {
            nodes
                .iter()
                .enumerate()
                .map(|(i, &n)| (n, i / 2, i % 2))
                .collect()
        } else {
            used_nodes.iter().map(|&n| (n, 0, 0)).collect()
        };
        for &(node, pair, role) in &keys {
            let (events, keep) = match &receiver {
                Some(rx) if role == 1 => (rx.as_slice(), keep_rx.as_slice()),
                _ => (trace.events.as_slice(), keep.as_slice()),
            };
            let mut prog: Vec<Op> = Vec::with_capacity(events.len());
            let mut pending = 0.0f64;
            let mut map = |inst: u32| -> Option<u32> {
                let i = &trace.instances[inst as usize];
                let key = match i.scope {
                    Scope::Machine => 0,
                    Scope::Node => node,
                    Scope::Mm if pair_depth.is_some() => pair,
                    Scope::Mm if threads => 0,
                    Scope::Vma if threads && trace.meta.shared_vma => 0,
                    _ => return None,
                };
                Some(*res_ids.entry((inst, key)).or_insert_with(|| {
                    let kind = match i.model {
                        LockModel::Ticket => LockKind::Ticket,
                        LockModel::Queued => LockKind::Queued,
                        LockModel::RwSem => LockKind::Rw(RwWait::of(i.rwsem, i.sleeps)),
                        LockModel::QRwLock => LockKind::QRw,
                        LockModel::Refcount | LockModel::Line => LockKind::Line,
                    };
                    resources_proto.push((kind, class_of(&i.class)));
                    (resources_proto.len() - 1) as u32
                }))
            };
            let flush = threads && spec.tasks > 1;
            // The k-th trylock of a class takes its fallback's segment k (modulo their number).
            let mut tried = vec![0usize; trace.fallbacks.len()];
            // Fixed work runs a prefix of at most `ops_per_cpu` operations, cut (as `Sim::new`
            // cuts it) after the first operation that reaches it with nothing held: compile no
            // further, so that one program per node stays the prefix's size on a machine of
            // hundreds of nodes (256 full programs of a lameter trace took 1.3 GB).
            let cut = match (trace.meta.window, spec.ops_per_cpu) {
                (Window::Once, Some(max)) => Some(max),
                _ => None,
            };
            let (mut depth, mut seen) = (0i64, 0u64);
            // Which returns can find their fault's prefetch in flight ([`elide_return`]).
            let mut elision = Elision::new();
            // The last store since the store buffer last drained ([`fence_after_store`]).
            let mut last_store = None;
            // Whether the last op of `prog` is what the last event compiled to ([`fold_read`]).
            let mut fresh = false;
            for (e, &kept) in events.iter().zip(keep) {
                if !kept {
                    // An unpaired acquire or release at the trace's edge, left out.
                    fresh = false;
                    continue;
                }
                let op = match *e {
                    Event::Compute { ns } => {
                        pending += ns * scale;
                        continue;
                    }
                    Event::Acquire {
                        inst,
                        shared,
                        trylock: true,
                    } if fallback_of[inst as usize].is_some() => {
                        let f = fallback_of[inst as usize].unwrap_or(0);
                        let k = tried[f] % trace.fallbacks[f].segments.len();
                        tried[f] += 1;
                        // The segment's number for now; its compiled fallback's index below.
                        map(inst).map(|r| Op::Try(r, shared, (seg_base[f] + k) as u32, false))
                    }
                    ref e => event_op(e, &mut map, flush),
                };
                let op = op.and_then(|o| fence_after_store(&mut last_store, o));
                fresh &= op.is_some();
                if let Some(op) = op {
                    if elide_return(&mut elision, op) {
                        fresh = false;
                        continue;
                    }
                    let trylock = matches!(*e, Event::Acquire { trylock: true, .. });
                    let op = fold_read(&mut prog, 0, &mut pending, op, trylock, fresh);
                    push_after_compute(&mut prog, &mut pending, Some(op));
                    fresh = true;
                    match op {
                        Op::Acquire(..) | Op::Try(..) => depth += 1,
                        Op::Release(..) => depth -= 1,
                        Op::Ops(n) => {
                            seen += u64::from(n);
                            if depth == 0 && cut.is_some_and(|max| seen >= max) {
                                break;
                            }
                        }
                        _ => {}
                    }
                }
            }
            push_after_compute(&mut prog, &mut pending, None);
            // Each trylock's fallback, compiled once per segment: the segment's ops run
            // instead of the success path up to and with the release of the lock it took.
            let segment = |g: usize| {
                let f = seg_base.partition_point(|&b| b <= g) - 1;
                &trace.fallbacks[f].segments[g - seg_base[f]]
            };
            let (mut alts, mut alt_ops) = (Vec::new(), Vec::new());
            let mut compiled: HashMap<u32, (u32, u32)> = HashMap::new();
            for j in 0..prog.len() {
                let Op::Try(r, shared, g, read) = prog[j] else {
                    continue;
                };
                let skip = prog[j + 1..]
                    .iter()
                    .position(|o| matches!(*o, Op::Release(x, _) if x == r));
                let (start, len) = *compiled.entry(g).or_insert_with(|| {
                    let start = alt_ops.len();
                    let mut pending = 0.0f64;
                    let mut last_store = None;
                    let mut fresh = false;
                    for e in segment(g as usize) {
                        let op = match *e {
                            Event::Compute { ns } => {
                                pending += ns * scale;
                                continue;
                            }
                            ref e => event_op(e, &mut map, flush)
                                .and_then(|o| fence_after_store(&mut last_store, o)),
                        };
                        let trylock = matches!(*e, Event::Acquire { trylock: true, .. });
                        let op = op.map(|o| {
                            fold_read(&mut alt_ops, start, &mut pending, o, trylock, fresh)
                        });
                        fresh = op.is_some();
                        if op.is_some() {
                            push_after_compute(&mut alt_ops, &mut pending, op);
                        }
                    }
                    push_after_compute(&mut alt_ops, &mut pending, None);
                    (start as u32, (alt_ops.len() - start) as u32)
                });
                prog[j] = match skip {
                    Some(k) if len > 0 => {
                        alts.push(Alt {
                            start,
                            len,
                            skip: k as u32 + 1,
                        });
                        Op::Try(r, shared, (alts.len() - 1) as u32, read)
                    }
                    _ => Op::Try(r, shared, NONE, read),
                };
            }
            // A traced write is the engine's page (or pages); on the machine each fault
            // clears one of its pages, so the bytes scale by the page sizes' ratio.
            for op in prog.iter_mut().chain(alt_ops.iter_mut()) {
                if let Op::Write(b) = op {
                    *b = b.saturating_mul(page_ratio);
                }
            }
            all_alts.push(alts);
            all_alt_ops.push(alt_ops);
            let mut depth = 0i64;
            let mut st = Vec::new();
            for (j, op) in prog.iter().enumerate() {
                match op {
                    Op::Acquire(..) | Op::Try(..) => depth += 1,
                    Op::Release(..) => depth -= 1,
                    Op::Ops(_) if depth == 0 => st.push((j + 1) % prog.len()),
                    _ => {}
                }
            }
            // A pair's two sides start together at their first message, the socket empty.
            if st.is_empty() || pair_depth.is_some() {
                st = vec![0];
            }
            starts.push(st);
            prog_of_node.insert((node, pair, role), progs.len());
            progs.push(prog);
        }
        let trap_ps = ps(machine.kernel.trap_ns);
        // Every pass through a program must advance its CPU's clock, or a cyclic run would
        // loop at one instant for ever.
        if progs.iter().any(|p| {
            !p.iter().any(|op| match *op {
                Op::Compute(d) => d > 0,
                Op::Trap => trap_ps > 0,
                Op::Write(b) => b > 0,
                _ => false,
            })
        }) {
            return Err(ProjectError::Replay(format!(
                "the trace of {} with {} takes no time: no compute, trap or memory write in it",
                trace.meta.workload, trace.meta.profile
            )));
        }
        let placement = nodes
            .iter()
            .enumerate()
            .map(|(i, &n)| match pair_depth {
                Some(_) => (prog_of_node[&(n, i / 2, i % 2)], n),
                None => (prog_of_node[&(n, 0, 0)], n),
            })
            .collect();
        let transfer = cpus
            .iter()
            .map(|&a| {
                cpus.iter()
                    .map(|&b| ps(machine.transfer_ns(a, b)))
                    .collect()
            })
            .collect();
        // A core's compute slows when both its hardware threads have a task; a task the host
        // runs only part of the time (`cpu.share`) advances at that part of the pace.
        let (share, off_ns) = machine.cpu.share_at(spec.tasks);
        // Slices timed (a mean wait for the CPU): the task runs and waits in turns, below;
        // else a uniform slowdown.
        let uniform = if off_ns > 0.0 { 1.0 } else { share };
        // A socket's clock falls as more of its cores run (`cpu.turbo_ghz`): compute converted
        // at the all-core clock `cpu.ghz` is stretched by `ghz / clock`, and the trap, stated
        // at one busy core's clock (where it is fitted, the one-task row), by `clock(1) / clock`.
        let mut active = vec![Vec::<usize>::new(); machine.topology.sockets];
        for &c in &cpus {
            let p = machine.pos(c);
            if !active[p.socket].contains(&p.core) {
                active[p.socket].push(p.core);
            }
        }
        let clock_of = |c: usize| machine.cpu.clock_at(active[machine.pos(c).socket].len());
        let factors: Vec<(f64, f64)> = cpus
            .iter()
            .map(|&c| {
                let core = machine.pos(c).core;
                let shared = cpus
                    .iter()
                    .filter(|&&o| o != c && machine.pos(o).core == core)
                    .count()
                    > 0;
                let smt = if shared {
                    2.0 / machine.cpu.smt_throughput
                } else {
                    1.0
                };
                let clock = clock_of(c);
                // Parenthesised so that a machine without steps (clock == ghz) replays
                // bit for bit as before them.
                (
                    smt / uniform * (machine.cpu.ghz / clock),
                    smt / uniform * (machine.cpu.clock_at(1) / clock),
                )
            })
            .collect();
        // A downgrade is an rwsem's alone (a file is checked as it is read; a capture is not).
        let not_rwsem = progs
            .iter()
            .flatten()
            .chain(all_alt_ops.iter().flatten())
            .find_map(|op| match *op {
                Op::Downgrade(r) if !matches!(resources_proto[r as usize].0, LockKind::Rw(_)) => {
                    Some(resources_proto[r as usize].1)
                }
                _ => None,
            });
        if let Some(class) = not_rwsem {
            return Err(ProjectError::Replay(format!(
                "a downgrade of {}, which is not an rwsem",
                class_names[class]
            )));
        }
        let k = &machine.kernel;
        Ok(Replay {
            machine,
            trace,
            spec,
            progs,
            alts: all_alts,
            alt_ops: all_alt_ops,
            placement,
            starts,
            resources_proto,
            class_names,
            trap_ps,
            atomic_ps: ps(machine.latency.atomic_ns),
            wakeup_ps: ps(k.wakeup_ns),
            ipi_ps: ps(k.ipi_ns),
            ipi_handler_ps: ps(k.ipi_handler_ns),
            transfer,
            factors,
            share,
            uniform,
            sched: (share < 1.0 && off_ns > 0.0).then(|| {
                let off = off_ns * 1000.0;
                (off * share / (1.0 - share), off)
            }),
            pair_depth,
        })
    }

    /// Each writer's memory bandwidth with `n` writers on one node, for `n` from 0 to every
    /// task of the replay, bytes per picosecond: the node's loaded-latency model
    /// ([`crate::memory`]).
    fn writer_rates(&self) -> std::rc::Rc<[f64]> {
        crate::memory::writer_rates_gbs(self.machine, self.spec.tasks)
            .into_iter()
            .map(|g| g * 1e9 / 1e12)
            .collect()
    }

    /// Shared resources the tasks meet (locks and lines that are not private).
    pub fn nr_shared(&self) -> usize {
        self.resources_proto.len()
    }

    /// Runs the simulation with `seed`. Fails if the CPUs end up waiting for each other.
    pub fn run(&self, seed: u64) -> Result<ReplayResult, ProjectError> {
        Sim::new(self, seed).run()
    }
}

struct Sim<'r, 'a> {
    r: &'r Replay<'a>,
    rng: ChaCha8Rng,
    /// The host's slices' own stream ([`Sim::on_cpu`]), so that a machine without them
    /// replays exactly as before.
    sched_rng: ChaCha8Rng,
    cpus: Vec<Cpu>,
    res: Vec<Resource>,
    buses: Vec<Bus>,
    heap: EventQueue,
    /// The CPUs whose clearing a memory node's event completes (kept to spare an allocation
    /// per event).
    bus_done: Vec<u32>,
    stats: Vec<ClassStats>,
    events: u64,
    /// A pair trace: each pair's socket (pair `i` is tasks `2i` and `2i + 1`).
    pairs: Vec<PairQ>,
    /// Cyclic runs: operations per time bin.
    bin_ps: u64,
    bins: Vec<u64>,
    ops_total: u64,
    stop_at: Option<u64>,
    /// Cyclic runs: CPUs that have completed their cycle.
    cycled: usize,
    /// Cyclic runs: cycles completed, by all CPUs together.
    cycles_done: u64,
    /// Events this run may process: [`EVENTS_PER_PASS`] passes of every CPU's program, at
    /// most [`MAX_EVENTS`].
    budget: u64,
}

impl<'r, 'a> Sim<'r, 'a> {
    fn new(r: &'r Replay<'a>, seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let cyclic = r.trace.meta.window == Window::Cycle;
        let nodes = r.machine.nr_nodes();
        let gbs_to_bpps = |g: f64| g * 1e9 / 1e12;
        let rates = r.writer_rates();
        let buses = (0..nodes)
            .map(|_| Bus {
                rates: rates.clone(),
                jobs: Vec::new(),
                last: 0,
                next_at: u64::MAX,
            })
            .collect();
        let mut cpus: Vec<Cpu> = Vec::with_capacity(r.spec.tasks);
        let mut heap = EventQueue::new();
        for (i, &(prog, node)) in r.placement.iter().enumerate() {
            let len = r.progs[prog].len();
            let ops_in = |p: &[Op]| -> u64 {
                p.iter()
                    .map(|o| if let Op::Ops(n) = o { u64::from(*n) } else { 0 })
                    .sum()
            };
            let (pc, start, left) = if cyclic {
                // Start at a random operation of the trace (holding nothing); run one cycle's
                // worth of events.
                let st = &r.starts[prog];
                (st[rng.gen_range(0..st.len())], 0, r.cycle_len(prog))
            } else {
                let prog_i = prog;
                let prog = &r.progs[prog];
                let mut left = len as u64;
                if let Some(max) = r.spec.ops_per_cpu
                    && ops_in(prog) > max
                {
                    // Cut after the first operation that reaches `max` with nothing held.
                    let mut seen = 0;
                    let mut from = 0;
                    for &end in &r.starts[prog_i] {
                        let end = if end == 0 { prog.len() } else { end };
                        if end <= from {
                            continue;
                        }
                        seen += ops_in(&prog[from..end]);
                        from = end;
                        if seen >= max {
                            left = end as u64;
                            break;
                        }
                    }
                }
                // Tasks released by one barrier start within a microsecond of each other.
                (0, rng.gen_range(0..1_000_000u64), left)
            };
            cpus.push(Cpu {
                node,
                prog,
                pc,
                left,
                factor: r.factors[i].0,
                trap_factor: r.factors[i].1,
                st: St::Ready,
                stolen: 0,
                sleep_since: None,
                slept: 0,
                alt: None,
                started: start,
                finished: 0,
                write_from: 0,
                run_end: 0,
                wait_end: 0,
                prefetch: None,
                stores_until: 0,
                held_op: None,
            });
            heap.push(start, i as u32);
        }
        // Each task starts where the host's turns would have it at any moment: running (with
        // the share's probability) or waiting, for the rest of an exponential period.
        let mut sched_rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5c4e_d51c_e5ee_d000);
        if let Some((on, off)) = r.sched {
            for c in &mut cpus {
                let t = c.started;
                let running = sched_rng.r#gen::<f64>() < on / (on + off);
                c.run_end = if running {
                    t.saturating_add(exp_ps(&mut sched_rng, on))
                } else {
                    t
                };
                c.wait_end = c.run_end.saturating_add(exp_ps(&mut sched_rng, off));
            }
        }
        let budget = cpus
            .iter()
            .map(|c| c.left)
            .fold(0u64, u64::saturating_add)
            .saturating_mul(EVENTS_PER_PASS)
            .clamp(MIN_EVENTS, MAX_EVENTS);
        let res = r
            .resources_proto
            .iter()
            .map(|&(kind, class)| Resource {
                kind,
                class,
                line: Line::new(r.spec.tasks),
                busy_until: 0,
                holder: None,
                held_since: 0,
                readers: 0,
                waiters: VecDeque::new(),
                spinners: VecDeque::new(),
                waking: None,
                qhead: None,
            })
            .collect();
        let stats = r
            .class_names
            .iter()
            .map(|n| ClassStats {
                name: n.clone(),
                ..Default::default()
            })
            .collect();
        // Bins small against one cycle's uncontended length, so that window edges are exact
        // to a fraction of a percent.
        let cycle_ps: u64 = r
            .progs
            .iter()
            .map(|p| {
                p.iter()
                    .map(|o| match o {
                        Op::Compute(d) => *d,
                        Op::Trap => r.trap_ps,
                        Op::Write(b) => {
                            (f64::from(*b) / gbs_to_bpps(r.machine.memory.core_bandwidth_gbs))
                                as u64
                        }
                        _ => 0,
                    })
                    .fold(0u64, u64::saturating_add)
            })
            .min()
            .unwrap_or(1);
        Sim {
            r,
            rng,
            sched_rng,
            cpus,
            res,
            buses,
            heap,
            bus_done: Vec::new(),
            stats,
            events: 0,
            pairs: vec![PairQ::default(); r.spec.tasks / 2],
            bin_ps: (cycle_ps / 2048).max(1000),
            bins: Vec::new(),
            ops_total: 0,
            stop_at: None,
            cycled: 0,
            cycles_done: 0,
            budget,
        }
    }

    /// When CPU `c`'s task, starting `d` ps of work at `t`, has run for `d`: with the host's
    /// slices timed (`cpu.share` with a wait), the task runs for exponential periods of mean
    /// `on` and waits for exponential periods of mean `off` in turn, and work only advances
    /// while it runs (a critical section interrupted holds its lock through the wait).
    fn on_cpu(&mut self, c: usize, mut t: u64, mut d: u64) -> u64 {
        let Some((on, off)) = self.r.sched else {
            return t.saturating_add(d);
        };
        let rng = &mut self.sched_rng;
        let cpu = &mut self.cpus[c];
        loop {
            // The current period: running until `run_end`, then waiting until `wait_end`.
            while t >= cpu.wait_end {
                cpu.run_end = cpu.wait_end.saturating_add(exp_ps(rng, on));
                cpu.wait_end = cpu.run_end.saturating_add(exp_ps(rng, off));
            }
            if t < cpu.run_end {
                if d <= cpu.run_end - t {
                    return t + d;
                }
                d -= cpu.run_end - t;
            }
            t = cpu.wait_end;
        }
    }

    fn schedule(&mut self, cpu: usize, t: u64) {
        self.heap.push(t, cpu as u32);
    }

    /// An atomic on resource `ri`'s line by `cpu` at `t`; returns when the CPU has it.
    /// `acquire` counts it as an acquisition (a release's atomic only adds its wait). The
    /// atomic waits for the line to be free, gets it as for any write (a transfer from its last
    /// writer, or the invalidation of its sharers: [`crate::coherence`]) and keeps it busy for
    /// the atomic itself.
    fn line_access(&mut self, ri: usize, cpu: usize, t: u64, acquire: bool) -> u64 {
        if let Some((at, queued)) = self.prefetch_claim(ri, cpu, t) {
            // Served by this CPU's own prefetch: the atomic completes as the line arrives.
            // Its own length is added to the line's occupancy after the requests already
            // queued (they were computed before it; the difference is one atomic).
            let r = self.r;
            let res = &mut self.res[ri];
            res.busy_until = res.busy_until.max(at).saturating_add(r.atomic_ps);
            let s = &mut self.stats[res.class];
            if acquire {
                s.acquisitions += 1;
                s.contended += u64::from(queued > 0);
            }
            s.wait_ns += queued as f64 / 1000.0;
            return at;
        }
        let r = self.r;
        let res = &mut self.res[ri];
        let start = t.max(res.busy_until);
        let x = res.line.write(cpu, &r.transfer, r.atomic_ps);
        res.busy_until = start.saturating_add(x).saturating_add(r.atomic_ps);
        let s = &mut self.stats[res.class];
        if acquire {
            s.acquisitions += 1;
            s.contended += u64::from(start > t);
        }
        s.wait_ns += (start - t) as f64 / 1000.0;
        start.saturating_add(x)
    }

    /// A prefetch for writing of resource `ri`'s line by `cpu` at `t` (`prefetchw`): the
    /// request for the only copy goes out like a store's, in turn behind whatever keeps the
    /// line busy, and the line is this CPU's once it arrives; but the CPU goes on at `t`
    /// without waiting for it ([`Sim::prefetch_claim`] serves its accesses meanwhile).
    fn prefetch(&mut self, ri: usize, cpu: usize, t: u64) {
        let pending = self.cpus[cpu].prefetch;
        if pending.is_some_and(|p| p.res == ri as u32 && t < p.at) {
            // The line is already on its way here: a core keeps one request per line in
            // flight, and a second prefetch of it is merged into the first. (Without this a
            // CPU whose faults never wait for the line would queue a request per fault, and
            // the line's queue would grow without bound.)
            self.stats[self.res[ri].class].prefetches += 1;
            return;
        }
        if let Some(p) = pending {
            // One prefetch outstanding per CPU is all the traces hold; an earlier one is
            // settled as it stands.
            self.prefetch_end(p.res as usize, cpu);
        }
        let r = self.r;
        let res = &mut self.res[ri];
        let start = t.max(res.busy_until);
        let x = res.line.write(cpu, &r.transfer, r.atomic_ps);
        res.busy_until = start.saturating_add(x);
        let s = &mut self.stats[res.class];
        s.prefetches += 1;
        s.line_events += 1;
        self.cpus[cpu].prefetch = Some(InFlight {
            res: ri as u32,
            from: start,
            at: start.saturating_add(x),
            used: false,
        });
    }

    /// Whether `cpu`'s access at `t` of resource `ri`'s line is served by its own prefetch:
    /// `Some(arrival)` when the access is issued before the prefetched line has arrived (or
    /// as it arrives). Such an access waits for the same fill as the prefetch and completes
    /// with it, before the core answers the snoop of a request queued behind the prefetch,
    /// which the line's home sends only once the prefetch's transfer is done: so a trylock's
    /// read and exchange reached while the prefetch travels both hit, whoever asked for the
    /// line meanwhile. An access issued after the arrival is an ordinary one; it ends the
    /// claim, and when the line has been taken away by then the prefetch served nothing
    /// ([`ClassStats::prefetches_lost`]).
    ///
    /// Returns the arrival and how long of the wait was the prefetch's turn behind other
    /// CPUs' requests (what an ordinary access would have counted as waiting for the line).
    fn prefetch_claim(&mut self, ri: usize, cpu: usize, t: u64) -> Option<(u64, u64)> {
        let p = self.cpus[cpu].prefetch.as_mut()?;
        if p.res != ri as u32 {
            return None;
        }
        if t <= p.at {
            p.used = true;
            return Some((p.at, p.from.saturating_sub(t)));
        }
        self.prefetch_end(ri, cpu);
        None
    }

    /// The exception's return (`iretq`) by `cpu` at `t`: an instruction that serializes, so
    /// a prefetch the CPU still has in flight holds it until the line arrives. Returns that
    /// arrival when there is a wait. Intel documents `IRET` as serializing (SDM vol. 3A,
    /// "Serializing Instructions"); that the wait includes an outstanding `prefetchw` is read
    /// from the kernel test robot's profile of 1701771d3069 on a 256-CPU Granite Rapids, where
    /// removing the fault entry's `prefetchw` took `native_irq_return_iret` from 66% of the
    /// cycles to 2% (docs/model-history.md, round 37). The line stays this CPU's claim: the wait
    /// ends when it arrives.
    fn prefetch_at_return(&mut self, cpu: usize, t: u64) -> Option<u64> {
        let p = self.cpus[cpu].prefetch?;
        if p.at <= t {
            return None;
        }
        // Booked as an access's wait is ([`Sim::line_op`]): all of it as the line's time, and
        // only what is left of the request's turn behind other CPUs' as contention.
        let s = &mut self.stats[self.res[p.res as usize].class];
        s.prefetch_return_waits += 1;
        let ns = (p.at - t) as f64 / 1000.0;
        let queued = p.from.saturating_sub(t) as f64 / 1000.0;
        s.prefetch_return_ns += ns;
        s.line_ns += ns;
        s.line_queued_ns += queued;
        s.wait_ns += queued;
        Some(p.at)
    }

    /// Ends `cpu`'s claim on resource `ri`'s prefetched line, counting the prefetch lost if
    /// no access was served by it and the line is no longer this CPU's.
    fn prefetch_end(&mut self, ri: usize, cpu: usize) {
        let c = &mut self.cpus[cpu];
        let Some(p) = c.prefetch.filter(|p| p.res == ri as u32) else {
            return;
        };
        c.prefetch = None;
        let res = &self.res[ri];
        if !p.used && !res.line.holds(cpu) {
            self.stats[res.class].prefetches_lost += 1;
        }
    }

    /// A plain read or write by `cpu` at `t` of resource `ri`'s line, or of the list entry
    /// `sym` names relative to it; returns when the CPU goes on. A read or write of the line
    /// itself waits while an atomic keeps it busy; a write keeps it busy while it moves. List
    /// entries are touched only under the list's lock, so they wait for nothing but their
    /// transfer ([`crate::coherence`]).
    fn line_op(&mut self, ri: usize, cpu: usize, t: u64, write: bool, sym: Sym) -> u64 {
        if sym == Sym::Here
            && let Some((at, queued)) = self.prefetch_claim(ri, cpu, t)
        {
            let s = &mut self.stats[self.res[ri].class];
            s.wait_ns += queued as f64 / 1000.0;
            s.line_events += 1;
            s.line_ns += (at - t) as f64 / 1000.0;
            s.line_queued_ns += queued as f64 / 1000.0;
            return at;
        }
        let r = self.r;
        let res = &mut self.res[ri];
        match sym {
            Sym::Here => {
                let start = t.max(res.busy_until);
                let at = if write {
                    let x = res.line.write(cpu, &r.transfer, r.atomic_ps);
                    res.busy_until = start.saturating_add(x);
                    res.busy_until
                } else {
                    start.saturating_add(res.line.read(cpu, &r.transfer))
                };
                let s = &mut self.stats[res.class];
                s.wait_ns += (start - t) as f64 / 1000.0;
                s.line_events += 1;
                s.line_ns += (at - t) as f64 / 1000.0;
                s.line_queued_ns += (start - t) as f64 / 1000.0;
                at
            }
            Sym::First | Sym::Entry => {
                let x = res.line.entry(cpu, write, sym == Sym::First, &r.transfer);
                let s = &mut self.stats[res.class];
                s.line_events += 1;
                s.line_ns += x as f64 / 1000.0;
                s.entry_events += 1;
                s.entry_ns += x as f64 / 1000.0;
                t.saturating_add(x)
            }
        }
    }

    /// A store by `cpu` at `t` to resource `ri`'s line, or to the list entry `sym` names
    /// relative to it, that the CPU does not wait for: the store waits in the store buffer
    /// while the line comes, as a write's would (behind whatever keeps the line busy, and
    /// keeping it busy while it moves), and the CPU goes on at once. Its lines come in
    /// parallel: x86 cores ask for a buffered store's line before the store's turn to commit
    /// (Travis Downs measured random stores to memory at 15-20 cycles each where a load takes
    /// about 200; docs/model.md, section 3).
    /// What the CPU waits for is the drain: its next locked instruction or lock release
    /// waits until every buffered store has its line ([`Cpu::stores_until`]).
    fn store(&mut self, ri: usize, cpu: usize, t: u64, sym: Sym) {
        let r = self.r;
        let res = &mut self.res[ri];
        let (at, entry) = match sym {
            Sym::Here => {
                let start = t.max(res.busy_until);
                let x = res.line.write(cpu, &r.transfer, r.atomic_ps);
                res.busy_until = start.saturating_add(x);
                (res.busy_until, false)
            }
            Sym::First | Sym::Entry => (
                t.saturating_add(res.line.entry(cpu, true, sym == Sym::First, &r.transfer)),
                true,
            ),
        };
        let s = &mut self.stats[res.class];
        s.line_events += 1;
        if entry {
            s.entry_events += 1;
        }
        s.stores += 1;
        s.store_ns += (at - t) as f64 / 1000.0;
        let c = &mut self.cpus[cpu];
        c.stores_until = c.stores_until.max(at);
    }

    /// Hands resource `ri` to waiter `w` released by `from` at `t`: the line transfer, the
    /// ticket lock's place among its spinners, and a wake-up if the waiter sleeps.
    fn grant(&mut self, ri: usize, w: Waiter, from: usize, t: u64, queue_len: usize) {
        let kind = self.res[ri].kind;
        let x = self.r.transfer[from][w.cpu as usize];
        let mut handoff = match kind {
            LockKind::Ticket => {
                // The next owner's re-read is served at a random place among the spinners.
                let place = self.rng.gen_range(1..=queue_len.max(1)) as u64;
                x.max(1).saturating_mul(place)
            }
            LockKind::Queued | LockKind::Rw(_) | LockKind::QRw | LockKind::Line => x,
        };
        if self.cpus[w.cpu as usize].sleep_since.is_some() {
            handoff = handoff.saturating_add(self.r.wakeup_ps);
        }
        let at = t.saturating_add(handoff);
        self.take_at(ri, w, at);
    }

    /// Waiter `w` owns resource `ri` from `at` on, and goes on then.
    fn take_at(&mut self, ri: usize, w: Waiter, at: u64) {
        self.prefetch_end(ri, w.cpu as usize);
        let res = &mut self.res[ri];
        // The new owner's hand-off wrote the lock word: it holds the only copy.
        res.line.owner = w.cpu;
        res.line.sharers.clear();
        res.busy_until = res.busy_until.max(at.saturating_add(self.r.atomic_ps));
        if w.shared {
            res.readers += 1;
        } else {
            res.holder = Some(w.cpu);
            res.held_since = at;
        }
        let s = &mut self.stats[res.class];
        s.acquisitions += 1;
        s.contended += 1;
        s.wait_ns += at.saturating_sub(w.since) as f64 / 1000.0;
        let c = &mut self.cpus[w.cpu as usize];
        if let Some(since) = c.sleep_since.take() {
            c.slept = c.slept.saturating_add(at.saturating_sub(since));
        }
        c.st = St::Ready;
        self.schedule(w.cpu as usize, at);
    }

    /// Queues `cpu` on resource `ri`: spinning (busy) or sleeping, as the lock's waiters do.
    fn wait(&mut self, ri: usize, cpu: usize, shared: bool, t: u64, spin: bool) {
        let w = Waiter {
            cpu: cpu as u32,
            shared,
            since: t,
        };
        let sleeps = match self.res[ri].kind {
            LockKind::Rw(p) => p.sleeps && !spin,
            _ => false,
        };
        let res = &mut self.res[ri];
        if res.kind == LockKind::QRw && res.qhead.is_none() {
            res.qhead = Some(w);
        } else if spin {
            res.spinners.push_back(w);
        } else {
            res.waiters.push_back(w);
        }
        let c = &mut self.cpus[cpu];
        c.st = St::WaitLock;
        if sleeps {
            c.sleep_since = Some(t);
        }
    }

    /// rwsem: the first waiter has waited out `RWSEM_WAIT_TIMEOUT` and (with hand-off) must
    /// get the lock next.
    fn handoff_due(&self, ri: usize, t: u64) -> bool {
        let r = &self.res[ri];
        let LockKind::Rw(p) = r.kind else {
            return false;
        };
        p.handoff
            && r.waking
                .or_else(|| r.waiters.front().copied())
                .is_some_and(|w| t.saturating_sub(w.since) >= RWSEM_WAIT_TIMEOUT_PS)
    }

    /// Whether `cpu` can take resource `ri` at `t` without waiting (for a trylock too).
    fn can_take(&self, ri: usize, shared: bool, t: u64) -> bool {
        let r = &self.res[ri];
        match r.kind {
            LockKind::Line => true,
            LockKind::Ticket | LockKind::Queued => r.holder.is_none() && r.waiters.is_empty(),
            // `queued_read_lock`'s fast path fails on a writer holding or waiting
            // (`_QW_WMASK`); `queued_write_lock`'s only on a count of 0 (no reader, no writer).
            LockKind::QRw => {
                let writer_waits = r.qhead.is_some_and(|w| !w.shared);
                r.holder.is_none()
                    && !writer_waits
                    && (shared || (r.readers == 0 && r.qhead.is_none()))
            }
            LockKind::Rw(p) => {
                if r.holder.is_some() || (!shared && r.readers > 0) {
                    return false;
                }
                let queued = !r.waiters.is_empty() || r.waking.is_some();
                if shared {
                    // The reader fast path fails while anyone is queued (`RWSEM_FLAG_WAITERS`).
                    !queued
                } else {
                    // A writer takes a free lock unless others spin ahead of it, or sleepers
                    // wait and the era hands the lock to them (no stealing, or hand-off due).
                    r.spinners.is_empty() && (!queued || (p.steal && !self.handoff_due(ri, t)))
                }
            }
        }
    }

    /// Takes resource `ri` at `t`, which [`Sim::can_take`] allowed: one atomic on its line.
    fn take(&mut self, ri: usize, shared: bool, cpu: usize, t: u64) -> u64 {
        let at = self.line_access(ri, cpu, t, true);
        let r = &mut self.res[ri];
        match r.kind {
            LockKind::Line => {}
            LockKind::Rw(_) | LockKind::QRw if shared => r.readers += 1,
            _ => {
                r.holder = Some(cpu as u32);
                r.held_since = at;
            }
        }
        at
    }

    /// Acquire; `Some(t)` when the CPU goes on at `t`, `None` when it waits.
    fn acquire(&mut self, ri: usize, shared: bool, cpu: usize, t: u64) -> Option<u64> {
        if self.can_take(ri, shared, t) {
            return Some(self.take(ri, shared, cpu, t));
        }
        // rwsem optimistic spinning: on a lock a running writer holds, as the era allowed,
        // unless a starved waiter is owed the lock.
        let spin = match self.res[ri].kind {
            LockKind::Rw(p) => {
                (if shared {
                    p.readers_spin
                } else {
                    p.writers_spin
                }) && self.res[ri].holder.is_some()
                    && !self.handoff_due(ri, t)
            }
            _ => false,
        };
        self.wait(ri, cpu, shared, t, spin);
        if self.res[ri].kind == LockKind::QRw
            && !shared
            && self.res[ri].qhead.is_some_and(|w| w.cpu as usize == cpu)
        {
            // At the head of the queue a writer sets `_QW_WAITING` (one atomic on the count
            // word), which turns later readers to the queue.
            self.count_word_atomic(ri, cpu, t);
        }
        None
    }

    /// One atomic on resource `ri`'s count word by `cpu` at `t` that is part of a waiter's
    /// protocol (no acquisition of its own, no wait counted): returns when it completes.
    fn count_word_atomic(&mut self, ri: usize, cpu: usize, t: u64) -> u64 {
        self.prefetch_end(ri, cpu);
        let r = self.r;
        let res = &mut self.res[ri];
        let start = t.max(res.busy_until);
        let x = res.line.write(cpu, &r.transfer, r.atomic_ps);
        let done = start.saturating_add(x);
        res.busy_until = done.saturating_add(r.atomic_ps);
        done
    }

    /// qrwlock: resource `ri` may have become free at `t` (released by `from`); the waiter
    /// holding the `wait_lock` takes it if it can, and the `wait_lock` passes down the queue
    /// (kernel/locking/qrwlock.c, `queued_read_lock_slowpath` and
    /// `queued_write_lock_slowpath`).
    ///
    /// A reader at the head has added its bias already and enters as soon as it sees the
    /// writer's release (one transfer). It then unlocks the `wait_lock`, so the reader behind
    /// it takes the `wait_lock` (a qspinlock hand-off: one transfer from the previous reader),
    /// adds its bias (one atomic on the count word) and enters in its turn: queued readers
    /// enter together, without waiting for each other's critical sections, but one after
    /// another along the queue. A writer reached by the `wait_lock` sets `_QW_WAITING` (one
    /// atomic) and stops the chain: readers behind it stay queued. A writer at the head takes
    /// the lock once no reader or writer is in (a transfer from the last one out, then its
    /// compare-and-exchange), and passes the `wait_lock` on at once. Nobody sleeps: every
    /// waiter spins, so a hand-off costs no wake-up.
    fn qrw_advance(&mut self, ri: usize, from: usize, t: u64) {
        let Some(h) = self.res[ri].qhead else {
            return;
        };
        let (holder, readers) = (self.res[ri].holder, self.res[ri].readers);
        if holder.is_some() || (!h.shared && readers > 0) {
            return;
        }
        let mut at = t.saturating_add(self.r.transfer[from][h.cpu as usize]);
        self.take_at(ri, h, at);
        let mut prev = h.cpu as usize;
        loop {
            let Some(w) = self.res[ri].waiters.pop_front() else {
                self.res[ri].qhead = None;
                return;
            };
            let got_wait_lock = at.saturating_add(self.r.transfer[prev][w.cpu as usize]);
            self.res[ri].qhead = Some(w);
            if !h.shared || !w.shared {
                // Behind a writer that took the lock, the new head spins (a writer after
                // setting `_QW_WAITING`); a writer behind entering readers sets it too.
                if !w.shared {
                    self.count_word_atomic(ri, w.cpu as usize, got_wait_lock);
                }
                return;
            }
            at = self.count_word_atomic(ri, w.cpu as usize, got_wait_lock);
            self.take_at(ri, w, at);
            prev = w.cpu as usize;
        }
    }

    /// A trylock: takes the lock if it can at once; else runs the trylock's fallback `alt`
    /// (counted), or waits when no fallback was recorded. As [`Sim::acquire`].
    fn try_acquire(
        &mut self,
        ri: usize,
        shared: bool,
        alt: u32,
        read: bool,
        cpu: usize,
        t: u64,
    ) -> Option<u64> {
        if alt == NONE || self.can_take(ri, shared, t) {
            return self.acquire(ri, shared, cpu, t);
        }
        let a = self.r.alts[self.cpus[cpu].prog][alt as usize];
        self.stats[self.res[ri].class].fallbacks += 1;
        let c = &mut self.cpus[cpu];
        c.alt = Some((a.start, a.start + a.len));
        c.pc += a.skip as usize;
        c.left = c.left.saturating_sub(u64::from(a.skip));
        // The read saw the lock taken, and the kernel did not try the exchange: what the
        // failure cost is that read.
        Some(if read {
            self.line_op(ri, cpu, t, false, Sym::Here)
        } else {
            t
        })
    }

    /// rwsem: a writer woken at `t` to take resource `ri` itself. Takes it if it is free, or
    /// goes back to sleep at the head of the queue (someone stole it).
    fn woken(&mut self, ri: usize, cpu: usize, t: u64) {
        let Some(w) = self.res[ri].waking.take() else {
            return;
        };
        debug_assert_eq!(w.cpu as usize, cpu);
        let r = &self.res[ri];
        if r.holder.is_none() && r.readers == 0 {
            let at = self.line_access(ri, cpu, t, false);
            self.take_at(ri, w, at);
        } else {
            self.res[ri].waiters.push_front(w);
            self.cpus[cpu].st = St::WaitLock;
        }
    }

    /// rwsem: resource `ri` became free at `t` (released by `from`): who gets it next.
    fn rw_handover(&mut self, ri: usize, p: RwWait, from: usize, t: u64) {
        let n = self.res[ri].waiters.len() + self.res[ri].spinners.len();
        let due = self.handoff_due(ri, t);
        if self.res[ri].waking.is_some() {
            // A woken writer is on its way; a spinner may still take the lock first, unless
            // hand-off is due.
            if !due && let Some(s) = self.res[ri].spinners.pop_front() {
                self.grant_spinners(ri, s, from, t, n);
            }
            return;
        }
        if !due && let Some(s) = self.res[ri].spinners.pop_front() {
            // Spinners are on the line already: the first takes the lock at a transfer, ahead
            // of the sleepers.
            self.grant_spinners(ri, s, from, t, n);
            return;
        }
        let r = &mut self.res[ri];
        if r.waiters.front().is_some_and(|w| w.shared) {
            // Readers first in line: every waiting reader is admitted at once, writers keep
            // their places (`rwsem_mark_wake` since 5.3, and the engine's rwsem).
            let (readers, writers): (VecDeque<Waiter>, VecDeque<Waiter>) =
                std::mem::take(&mut r.waiters)
                    .into_iter()
                    .partition(|w| w.shared);
            r.waiters = writers;
            for w in readers {
                self.grant(ri, w, from, t, n);
            }
        } else if let Some(w) = r.waiters.pop_front() {
            if p.steal && !due && self.cpus[w.cpu as usize].sleep_since.is_some() {
                // Woken to take the lock itself: it stays free meanwhile.
                let x = self.r.transfer[from][w.cpu as usize];
                let at = t.saturating_add(x).saturating_add(self.r.wakeup_ps);
                self.res[ri].waking = Some(w);
                self.cpus[w.cpu as usize].st = St::Woken(ri as u32);
                self.schedule(w.cpu as usize, at);
            } else {
                self.grant(ri, w, from, t, n);
            }
        }
    }

    /// The first spinner `s` takes the lock; if it is a reader, the other spinning readers
    /// enter with it.
    fn grant_spinners(&mut self, ri: usize, s: Waiter, from: usize, t: u64, n: usize) {
        self.grant(ri, s, from, t, n);
        if s.shared {
            let r = &mut self.res[ri];
            let (readers, writers): (VecDeque<Waiter>, VecDeque<Waiter>) =
                std::mem::take(&mut r.spinners)
                    .into_iter()
                    .partition(|w| w.shared);
            r.spinners = writers;
            for w in readers {
                self.grant(ri, w, from, t, n);
            }
        }
    }

    /// Books the end of `cpu`'s exclusive hold of resource `ri` at `t` in its class's
    /// statistics.
    fn end_hold(&mut self, ri: usize, cpu: usize, t: u64) {
        if self.res[ri].kind != LockKind::Line && self.res[ri].holder == Some(cpu as u32) {
            let s = &mut self.stats[self.res[ri].class];
            s.holds += 1;
            s.hold_ns += t.saturating_sub(self.res[ri].held_since) as f64 / 1000.0;
        }
    }

    /// `downgrade_write` of the rwsem `ri` that `cpu` holds for write, at `t`: one atomic on
    /// the count word turns the hold into a read hold, with no moment at which the lock is
    /// free, so a waiting writer cannot take it in between (as it could between a release and
    /// a new read acquire) and waits for the last reader. Readers first in the queue, and
    /// readers spinning, enter with it (kernel/locking/rwsem.c: `downgrade_write` wakes
    /// through `rwsem_mark_wake` with the lock read-owned, which wakes nobody when a writer
    /// is first in line). munmap's zap runs in this read hold from 4.20
    /// (`mm.munmap_downgrade`), so munmaps queued behind each other's zap take turns: with a
    /// release and a new acquire the zapping task queued behind the waiting writers and the
    /// zaps then entered together, as readers admitted at once.
    ///
    /// Writers spinning on the write hold stop and queue behind the sleepers: the owner is
    /// readers now (`rwsem_spin_on_owner` gives up on a reader-owned lock; from 5.3 a writer
    /// may spin on one for at most tens of microseconds, `rwsem_rspin_threshold`, left out
    /// as short beside a zap), and readers arriving later queue behind them.
    fn downgrade(&mut self, ri: usize, cpu: usize, t: u64) -> u64 {
        // One atomic on the count word, which lock_stat does not count as an acquisition.
        let at = self.line_access(ri, cpu, t, false);
        if self.res[ri].holder != Some(cpu as u32) {
            // Not this CPU's write hold: `paired` and `Replay::new` build no such program.
            debug_assert!(false, "a downgrade without the write hold");
            return at;
        }
        self.end_hold(ri, cpu, at);
        let sleeps = matches!(self.res[ri].kind, LockKind::Rw(p) if p.sleeps);
        let r = &mut self.res[ri];
        r.holder = None;
        r.readers += 1;
        let n = r.waiters.len() + r.spinners.len();
        let admit = |q: &mut VecDeque<Waiter>| -> VecDeque<Waiter> {
            let (readers, writers): (VecDeque<Waiter>, VecDeque<Waiter>) =
                std::mem::take(q).into_iter().partition(|w| w.shared);
            *q = writers;
            readers
        };
        // A writer woken to take the lock is still first in the kernel's wait list.
        let mut enter = if r.waking.is_none() && r.waiters.front().is_some_and(|w| w.shared) {
            admit(&mut r.waiters)
        } else {
            VecDeque::new()
        };
        enter.extend(admit(&mut r.spinners));
        let stopped = std::mem::take(&mut r.spinners);
        r.waiters.extend(stopped.iter().copied());
        if sleeps {
            for w in stopped {
                self.cpus[w.cpu as usize].sleep_since = Some(at);
            }
        }
        for w in enter {
            self.grant(ri, w, cpu, at, n);
        }
        at
    }

    fn release(&mut self, ri: usize, shared: bool, cpu: usize, t: u64) -> u64 {
        let kind = self.res[ri].kind;
        if !shared {
            self.end_hold(ri, cpu, t);
        }
        match kind {
            LockKind::Line => self.line_access(ri, cpu, t, false),
            LockKind::Ticket | LockKind::Queued => {
                self.res[ri].holder = None;
                let n = self.res[ri].waiters.len();
                if let Some(w) = self.res[ri].waiters.pop_front() {
                    self.grant(ri, w, cpu, t, n);
                }
                t
            }
            LockKind::QRw => {
                // A reader leaves with an atomic subtract (`queued_read_unlock`), a writer with
                // a plain store of its byte (`queued_write_unlock`).
                let at = if shared {
                    self.line_access(ri, cpu, t, false)
                } else {
                    self.line_op(ri, cpu, t, true, Sym::Here)
                };
                let r = &mut self.res[ri];
                if shared && r.readers > 0 {
                    r.readers -= 1;
                } else {
                    r.holder = None;
                }
                if r.readers == 0 && r.holder.is_none() {
                    self.qrw_advance(ri, cpu, at);
                }
                at
            }
            LockKind::Rw(p) => {
                // The count word is written on the way out too.
                let at = self.line_access(ri, cpu, t, false);
                let r = &mut self.res[ri];
                if shared && r.readers > 0 {
                    r.readers -= 1;
                } else {
                    r.holder = None;
                }
                if r.readers == 0 && r.holder.is_none() {
                    self.rw_handover(ri, p, cpu, at);
                }
                at
            }
        }
    }

    /// Task `c` of a pair trace reaches a message boundary at `t`: the sender pushing message
    /// `sent` into its socket, the receiver taking message `received` out of it. A sender
    /// facing `depth` messages not yet taken, or a receiver facing none, waits at the
    /// boundary until its partner's next boundary (it polls the socket, as the engine's pair
    /// does: no wake-up is charged; what the poll costs in lines is in the recorded events).
    /// Messages count when received. Returns false when `c` waits.
    fn pair_ops(&mut self, c: usize, n: u32, depth: u64, t: u64) -> bool {
        let receiver = c % 2 == 1;
        let q = &mut self.pairs[c / 2];
        let n64 = u64::from(n);
        let blocked = if receiver {
            q.received + n64 > q.sent
        } else {
            q.sent + n64 > q.received + depth
        };
        if blocked {
            // Undo the step: the boundary runs again when the partner wakes this task.
            q.waiting = Some(c);
            let cpu = &mut self.cpus[c];
            cpu.pc -= 1;
            cpu.left += 1;
            cpu.st = St::WaitPair;
            self.events -= 1;
            return false;
        }
        if receiver {
            q.received += n64;
        } else {
            q.sent += n64;
        }
        if let Some(w) = q.waiting.take_if(|w| *w != c) {
            self.cpus[w].st = St::Ready;
            self.schedule(w, t);
        }
        if receiver {
            self.count_ops(n, t);
        }
        true
    }

    fn count_ops(&mut self, n: u32, t: u64) {
        self.ops_total = self.ops_total.saturating_add(u64::from(n));
        while t / self.bin_ps >= MAX_BINS as u64 {
            // Merge neighbours: bin i of the doubled width holds old bins 2i and 2i+1.
            let merged = self.bins.chunks(2).map(|c| c.iter().sum()).collect();
            self.bins = merged;
            self.bin_ps *= 2;
        }
        let b = (t / self.bin_ps) as usize;
        if b >= self.bins.len() {
            self.bins.resize(b + 1, 0);
        }
        self.bins[b] += u64::from(n);
    }

    fn bus_event(&mut self, node: usize, t: u64) {
        if self.buses[node].next_at != t {
            return; // superseded
        }
        let bus = &mut self.buses[node];
        bus.advance(t);
        let mut done = std::mem::take(&mut self.bus_done);
        bus.jobs.retain(|&(c, rem)| {
            if rem <= 1e-6 {
                done.push(c);
                false
            } else {
                true
            }
        });
        for &c in &done {
            let c = c as usize;
            self.cpus[c].st = St::Ready;
            // The clearing took the CPU from when it started: it ends once the task has run
            // that long.
            let from = self.cpus[c].write_from;
            let at = self.on_cpu(c, from, t - from).max(t);
            self.schedule(c, at);
        }
        done.clear();
        self.bus_done = done;
        self.reschedule_bus(node, t);
    }

    fn reschedule_bus(&mut self, node: usize, t: u64) {
        let nr = self.cpus.len() as u32;
        let bus = &mut self.buses[node];
        match bus.next_completion(t) {
            Some(at) => {
                bus.next_at = at;
                self.heap.push(at, nr + node as u32);
            }
            None => bus.next_at = u64::MAX,
        }
    }

    /// Runs CPU `c` from time `t` until it waits or schedules itself.
    fn step(&mut self, c: usize, t: u64) {
        if let St::Woken(ri) = self.cpus[c].st {
            // Takes the lock (and is scheduled on), or sleeps again.
            self.woken(ri as usize, c, t);
            return;
        }
        if self.cpus[c].st != St::Ready {
            return;
        }
        if self.cpus[c].stolen > 0 {
            let s = std::mem::take(&mut self.cpus[c].stolen);
            self.schedule(c, t.saturating_add(s));
            return;
        }
        let cyclic = self.r.trace.meta.window == Window::Cycle;
        loop {
            let cpu = &mut self.cpus[c];
            if cpu.left == 0 && cpu.alt.is_none() && cpu.held_op.is_none() {
                let first = cpu.finished == 0;
                cpu.finished = t;
                if !cyclic {
                    cpu.st = St::Done;
                    return;
                }
                // A CPU that completed its cycle goes on (the load stays the same); the run
                // ends when half the CPUs have completed theirs, so that a lucky first CPU
                // does not cut short what a convoy needs to settle, and not before the cycles
                // completed add up to the whole trace (one or two CPUs replay all of it, as
                // when a cycle was the whole trace).
                cpu.left = self.r.cycle_len(cpu.prog);
                self.cycled += usize::from(first);
                self.cycles_done += 1;
                if self.cycled * 2 >= self.cpus.len()
                    && self.cycles_done >= u64::from(self.r.trace.meta.iterations)
                    && self.stop_at.is_none()
                {
                    self.stop_at = Some(t);
                    return;
                }
                continue;
            }
            let op = if let Some(op) = cpu.held_op.take() {
                // It has waited for the store buffer and runs now.
                op
            } else if let Some((at, end)) = cpu.alt {
                // A failed trylock's fallback, before the program goes on.
                cpu.alt = (at + 1 < end).then_some((at + 1, end));
                self.r.alt_ops[cpu.prog][at as usize]
            } else {
                let prog = &self.r.progs[cpu.prog];
                if cpu.pc >= prog.len() {
                    cpu.pc = 0;
                }
                let op = prog[cpu.pc];
                cpu.pc += 1;
                cpu.left -= 1;
                op
            };
            // The store buffer's drain ([`Op::drains_stores`]). A trylock with a fallback that
            // finds its lock taken makes no locked instruction (the kernel's trylocks read the
            // lock word first and give up on what they see), so it does not wait for the
            // stores before it. (The compiler's store tracking, [`fence_after_store`], still
            // counts every trylock as a drain: a fence in a fallback before its first locked
            // instruction is compiled out. The engine's fallbacks start with an acquisition.)
            let stores_until = cpu.stores_until;
            if let Some(counted) = op.drains_stores()
                && stores_until > t
                && !matches!(op, Op::Try(ri, shared, alt, _)
                    if alt != NONE && !self.can_take(ri as usize, shared, t))
            {
                let at = stores_until;
                self.cpus[c].held_op = Some(op);
                if let Some(ri) = counted {
                    let class = self.res[ri as usize].class;
                    self.stats[class].drain_ns += (at - t) as f64 / 1000.0;
                }
                self.schedule(c, at);
                return;
            }
            self.events += 1;
            let (factor, trap_factor) = (self.cpus[c].factor, self.cpus[c].trap_factor);
            match op {
                Op::Compute(d) => {
                    let at = self.on_cpu(c, t, (d as f64 * factor) as u64);
                    self.schedule(c, at);
                    return;
                }
                Op::Trap => {
                    let at = self.on_cpu(c, t, (self.r.trap_ps as f64 * trap_factor) as u64);
                    self.schedule(c, at);
                    return;
                }
                Op::TrapReturn => {
                    if let Some(at) = self.prefetch_at_return(c, t) {
                        self.schedule(c, at);
                        return;
                    }
                }
                Op::Ops(n) => match self.r.pair_depth {
                    None => self.count_ops(n, t),
                    Some(depth) => {
                        if !self.pair_ops(c, n, depth, t) {
                            return;
                        }
                    }
                },
                Op::Atomic(ri) => {
                    let at = self.line_access(ri as usize, c, t, true);
                    if at > t {
                        self.schedule(c, at);
                        return;
                    }
                }
                Op::Line(ri, write, sym) => {
                    let at = self.line_op(ri as usize, c, t, write, sym);
                    if at > t {
                        self.schedule(c, at);
                        return;
                    }
                }
                Op::Prefetch(ri) => self.prefetch(ri as usize, c, t),
                Op::Store(ri, sym) => self.store(ri as usize, c, t, sym),
                // Its only cost, the drain, was waited for above.
                Op::Fence(_) => {}
                Op::Acquire(ri, shared) => match self.acquire(ri as usize, shared, c, t) {
                    Some(at) if at > t => {
                        self.schedule(c, at);
                        return;
                    }
                    Some(_) => {}
                    None => return,
                },
                Op::Try(ri, shared, alt, read) => {
                    match self.try_acquire(ri as usize, shared, alt, read, c, t) {
                        Some(at) if at > t => {
                            self.schedule(c, at);
                            return;
                        }
                        Some(_) => {}
                        None => return,
                    }
                }
                Op::Release(ri, shared) => {
                    let at = self.release(ri as usize, shared, c, t);
                    if at > t {
                        self.schedule(c, at);
                        return;
                    }
                }
                Op::Downgrade(ri) => {
                    let at = self.downgrade(ri as usize, c, t);
                    if at > t {
                        self.schedule(c, at);
                        return;
                    }
                }
                Op::Write(bytes) => {
                    let node = self.cpus[c].node;
                    let bus = &mut self.buses[node];
                    bus.advance(t);
                    // A task run part of the time clears its bytes at that part of the pace.
                    bus.jobs.push((c as u32, f64::from(bytes) / self.r.uniform));
                    self.cpus[c].write_from = t;
                    self.cpus[c].st = St::WaitBus;
                    self.reschedule_bus(node, t);
                    return;
                }
                Op::Flush => {
                    let handler = self.r.ipi_handler_ps;
                    // Every other CPU that is not asleep takes the interrupt, and pays it
                    // once it runs again (one clearing a page, too). A spinning waiter runs
                    // the handler in place of spinning (`flush_tlb_func` on the IPI, then back
                    // to the spin loop), so its wait absorbs it; charging it once the waiter
                    // runs again would put the handler inside the critical section it was
                    // waiting for, and lengthen every hold by the IPIs its queue took.
                    for (i, o) in self.cpus.iter_mut().enumerate() {
                        if i != c
                            && o.st != St::Done
                            && o.st != St::WaitLock
                            && o.sleep_since.is_none()
                        {
                            o.stolen = o.stolen.saturating_add(handler);
                        }
                    }
                    self.schedule(c, t.saturating_add(self.r.ipi_ps));
                    return;
                }
            }
        }
    }

    fn run(mut self) -> Result<ReplayResult, ProjectError> {
        let nr = self.cpus.len() as u32;
        while let Some((t, who)) = self.heap.pop() {
            if let Some(stop) = self.stop_at
                && t > stop
            {
                break;
            }
            if t >= HORIZON_PS {
                return Err(ProjectError::Replay(format!(
                    "the replay of {} with {} on {} passed {:.0} simulated seconds; a machine or trace value is out of proportion",
                    self.r.trace.meta.workload,
                    self.r.trace.meta.profile,
                    self.r.machine.name,
                    HORIZON_PS as f64 / 1e12
                )));
            }
            if self.events > self.budget {
                return Err(ProjectError::Replay(format!(
                    "the replay of {} with {} on {} passed {} simulated events ({EVENTS_PER_PASS} times what its {} CPUs' work takes) without finishing; a machine or trace value is out of proportion",
                    self.r.trace.meta.workload,
                    self.r.trace.meta.profile,
                    self.r.machine.name,
                    self.budget,
                    self.cpus.len()
                )));
            }
            if who < nr {
                self.step(who as usize, t);
            } else {
                self.bus_event((who - nr) as usize, t);
            }
        }
        // A prefetch still claimed when the run stops is settled as an access would settle it,
        // so that `prefetches_lost` also counts a last prefetch whose line another CPU has taken
        // by then. (One whose line is still here, and one merged into another, are not lost.)
        for c in 0..self.cpus.len() {
            if let Some(p) = self.cpus[c].prefetch {
                self.prefetch_end(p.res as usize, c);
            }
        }
        let stuck = self
            .cpus
            .iter()
            .filter(|c| matches!(c.st, St::WaitLock | St::WaitBus))
            .count();
        let cyclic = self.r.trace.meta.window == Window::Cycle;
        if (cyclic && self.stop_at.is_none()) || (!cyclic && stuck > 0) {
            return Err(ProjectError::Replay(format!(
                "the replay of {} with {} stopped with {stuck} of {} CPUs waiting for each other",
                self.r.trace.meta.workload,
                self.r.trace.meta.profile,
                self.cpus.len()
            )));
        }
        let out = self.result();
        out.check()?;
        Ok(out)
    }

    fn result(self) -> ReplayResult {
        let mut out = ReplayResult {
            classes: self.stats,
            events: self.events,
            ..Default::default()
        };
        match self.r.trace.meta.window {
            Window::Cycle => {
                let stop = self.stop_at.unwrap_or(0);
                // CPUs start at random points of their cycle, so there is no start-up phase
                // to discard (locks start free, and queues form within microseconds); for one
                // CPU the window is then exactly one cycle.
                let warm = 0;
                let n = self.r.spec.samples.max(1) as u64;
                let width = ((stop - warm) / n).max(1);
                let ops_between = |a: u64, b: u64| -> f64 {
                    // Whole bins inside, pro-rated bins at the edges.
                    let mut sum = 0.0;
                    let (ba, bb) = (a / self.bin_ps, b / self.bin_ps);
                    for bi in ba..=bb {
                        let v = *self.bins.get(bi as usize).unwrap_or(&0) as f64;
                        let lo = (bi * self.bin_ps).max(a);
                        let hi = ((bi + 1) * self.bin_ps).min(b);
                        if hi > lo {
                            sum += v * (hi - lo) as f64 / self.bin_ps as f64;
                        }
                    }
                    sum
                };
                for i in 0..n {
                    let (a, b) = (warm + i * width, warm + (i + 1) * width);
                    out.samples
                        .push(ops_between(a, b) / ((b - a) as f64 / 1e12));
                }
                out.ops = ops_between(warm, warm + n * width).round() as u64;
                out.span_ns = (n * width) as f64 / 1000.0;
            }
            Window::Once => {
                let start = self.cpus.iter().map(|c| c.started).min().unwrap_or(0);
                let end = self.cpus.iter().map(|c| c.finished).max().unwrap_or(0);
                let wall = (end - start).max(1) as f64 / 1e12;
                let busy: f64 = self
                    .cpus
                    .iter()
                    .map(|c| c.finished.saturating_sub(c.started + c.slept) as f64 / 1e12)
                    .sum::<f64>()
                    // CPU time: only the share of its awake time the host ran the task.
                    * self.r.share;
                out.ops = self.ops_total;
                out.span_ns = wall * 1e9;
                out.samples.push(self.ops_total as f64 / wall);
                out.ops_per_cpu_sec = Some(self.ops_total as f64 / busy.max(1e-12));
            }
        }
        out
    }
}

/// The rwsem algorithms against closed forms, driving the simulation's lock handling
/// directly (every time below in picoseconds): 50 ns between cores, 5 ns per atomic, 2 us per
/// wake-up.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{Instance, Pinning, TraceMeta};

    const NS: u64 = 1000;
    const X: u64 = 50 * NS;
    const WAKE: u64 = 2000 * NS;

    fn machine() -> Machine {
        Machine::parse(
            r#"
name = "test"
description = "test machine"
[cpu]
model = "test"
ghz = 2.0
[topology]
sockets = 1
cores_per_socket = 4
threads_per_core = 1
[numa]
distance = [[10]]
[latency]
smt_ns = 1.0
core_ns = 50.0
atomic_ns = 5.0
[latency.remote_ns]
[memory]
node_bandwidth_gbs = 100.0
core_bandwidth_gbs = 100.0
[kernel]
trap_ns = 300.0
wakeup_ns = 2000.0
ipi_ns = 1000.0
ipi_handler_ns = 500.0
"#,
            "test",
        )
        .unwrap()
    }

    fn trace(algo: RwsemAlgo) -> Trace {
        Trace {
            meta: TraceMeta {
                workload: "synthetic".into(),
                profile: "test".into(),
                profile_toml: String::new(),
                op_unit: "ops".into(),
                window: Window::Once,
                pinning: Pinning::Cores,
                shared_vma: false,
                kernel_cpus: 1,
                host_cpu: "test".into(),
                host_ghz: 2.0,
                ops: 1,
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
            },
            instances: vec![Instance {
                class: "mmap_lock".into(),
                scope: Scope::Mm,
                model: LockModel::RwSem,
                sleeps: true,
                rwsem: Some(algo),
            }],
            events: vec![
                Event::Acquire {
                    inst: 0,
                    shared: false,
                    trylock: false,
                },
                Event::Compute { ns: 1000.0 },
                Event::Release {
                    inst: 0,
                    shared: false,
                },
                Event::Ops { n: 1 },
            ],
            fallbacks: Vec::new(),
        }
    }

    /// A netpipe pair trace at `send-64` whose receiver turns are `turn` messages each.
    fn pair_trace(op_unit: &str, turn: u32) -> Trace {
        let mut t = trace(RwsemAlgo::SpinWriters);
        t.meta.op_unit = op_unit.into();
        t.meta.window = Window::Cycle;
        t.events = vec![Event::Compute { ns: 100.0 }, Event::Ops { n: 1 }];
        let side = [Event::Compute { ns: 100.0 }, Event::Ops { n: 1 }];
        t.fallbacks = vec![crate::trace::Fallback {
            class: crate::trace::PAIR_RECEIVER.into(),
            segments: (0..4)
                .map(|_| {
                    side.iter()
                        .cycle()
                        .take(2 * turn as usize)
                        .copied()
                        .collect()
                })
                .collect(),
        }];
        t
    }

    #[test]
    fn a_pairs_depth_is_its_sockets_not_its_receiver_turns() {
        // Captured turns are one release step (70 messages at send-64); the sender may still
        // queue a whole socket (278) ahead of the receiver.
        let m = machine();
        let spec = two_threads();
        let t = pair_trace("send-64 messages", 70);
        assert_eq!(
            Replay::new(&m, &t, spec.clone()).unwrap().pair_depth,
            Some(278)
        );
        // A trace naming no send size: one socket per receiver turn.
        let t = pair_trace("messages", 8);
        assert_eq!(Replay::new(&m, &t, spec).unwrap().pair_depth, Some(8));
    }

    /// A compiled program as its ops' debug names, for the tests that pin what the compiler
    /// folds and keeps.
    fn op_names(ops: &[Op]) -> Vec<String> {
        ops.iter().map(|o| format!("{o:?}")).collect()
    }

    /// Two threads, seed 1, one sample, the whole trace.
    fn two_threads() -> ReplaySpec {
        ReplaySpec {
            tasks: 2,
            threads: true,
            seed: 1,
            samples: 1,
            ops_per_cpu: None,
        }
    }

    /// `t` replayed with [`two_threads`] on [`machine`].
    fn replay_two_threads(t: &Trace) -> ReplayResult {
        Replay::new(&machine(), t, two_threads())
            .unwrap()
            .run(1)
            .unwrap()
    }

    /// Two threads taking turns at a node's queued spinlock of class `lock` (instance 0) whose
    /// holds run `hold`, touching two lines of class `line` (instances 1 and 2), with 2 us of
    /// compute between holds: one operation a hold, cycled 64 times and replayed; the lock's
    /// and the lines' statistics.
    fn turns_at_a_lock_over_two_lines(
        lock: &str,
        line: &str,
        hold: &[Event],
    ) -> (ClassStats, ClassStats) {
        let mut t = trace(RwsemAlgo::SpinWriters);
        t.instances = vec![Instance {
            class: lock.into(),
            scope: Scope::Node,
            model: LockModel::Queued,
            sleeps: false,
            rwsem: None,
        }];
        for _ in 0..2 {
            t.instances.push(Instance {
                class: line.into(),
                scope: Scope::Node,
                model: LockModel::Line,
                sleeps: false,
                rwsem: None,
            });
        }
        let mut body = vec![Event::Acquire {
            inst: 0,
            shared: false,
            trylock: false,
        }];
        body.extend_from_slice(hold);
        body.extend([
            Event::Release {
                inst: 0,
                shared: false,
            },
            Event::Compute { ns: 2000.0 },
            Event::Ops { n: 1 },
        ]);
        t.meta.window = Window::Cycle;
        t.events = body.iter().cycle().take(body.len() * 64).copied().collect();
        let out = replay_two_threads(&t);
        let class = |name: &str| out.classes.iter().find(|c| c.name == name).unwrap().clone();
        (class(lock), class(line))
    }

    fn with_sim(algo: RwsemAlgo, f: impl FnOnce(&mut Sim<'_, '_>)) {
        with_trace(trace(algo), 3, f);
    }

    /// The trace of [`trace`] with its lock a queued rwlock (`rwlock_t lru_lock`).
    fn qrwlock_trace() -> Trace {
        let mut t = trace(RwsemAlgo::SpinWriters);
        t.instances[0] = Instance {
            class: "lru_lock".into(),
            scope: Scope::Node,
            model: LockModel::QRwLock,
            sleeps: false,
            rwsem: None,
        };
        t
    }

    fn with_trace(t: Trace, tasks: usize, f: impl FnOnce(&mut Sim<'_, '_>)) {
        let m = machine();
        let spec = ReplaySpec {
            tasks,
            threads: true,
            seed: 1,
            samples: 1,
            ops_per_cpu: None,
        };
        let r = Replay::new(&m, &t, spec).unwrap();
        let mut sim = Sim::new(&r, 1);
        f(&mut sim);
    }

    /// `prefetchw`: the CPU goes on at once; the line is its own once the transfer is done,
    /// in turn behind whatever kept the line busy, and its next access waits only for what is
    /// left of that transfer, counted as no contention.
    #[test]
    fn a_prefetch_does_not_stall_and_the_next_access_waits_only_for_the_rest_of_it() {
        with_sim(RwsemAlgo::SpinWritersHandoff, |sim| {
            // CPU 1 writes the line last (an atomic at 0: busy for the atomic, 5 ns).
            assert_eq!(sim.line_access(0, 1, 0, false), 0);
            // CPU 0 prefetches at 100 ns: nothing to wait for now, the line arrives at 150.
            sim.prefetch(0, 0, 100 * NS);
            assert_eq!(sim.res[0].busy_until, 100 * NS + X);
            // Its atomic at 120 ns waits the 30 ns left, then hits.
            assert_eq!(sim.line_access(0, 0, 120 * NS, true), 100 * NS + X);
            let s = &sim.stats[sim.res[0].class];
            assert_eq!(
                (s.contended, s.wait_ns),
                (0, 0.0),
                "own prefetch is no contention"
            );
            assert_eq!((s.prefetches, s.prefetches_lost), (1, 0));
            // A prefetch long done costs the next access nothing.
            sim.prefetch(0, 1, 1000 * NS);
            assert_eq!(sim.line_access(0, 1, 2000 * NS, false), 2000 * NS);
        });
    }

    /// A plain access of a line queued behind another CPU's atomic: the time it queued is a
    /// wait (`wait_ns`) and part of the access's time (`line_ns`), and is kept apart in
    /// `line_queued_ns`, so that the transfers alone can be told (`ProjRow::lock_stat`).
    #[test]
    fn a_line_access_queued_behind_an_atomic_counts_its_queueing_apart() {
        with_sim(RwsemAlgo::SpinWritersHandoff, |sim| {
            // CPU 1's atomic at 0 keeps the line busy until 5 ns.
            sim.line_access(0, 1, 0, false);
            // CPU 0 writes it at 1 ns: queued 4 ns, then one transfer from CPU 1.
            assert_eq!(sim.line_op(0, 0, NS, true, Sym::Here), 5 * NS + X);
            let s = &sim.stats[sim.res[0].class];
            assert_eq!((s.wait_ns, s.line_queued_ns), (4.0, 4.0));
            assert_eq!(s.line_ns - s.line_queued_ns, X as f64 / 1000.0);
        });
    }

    /// Under contention the prefetched line is taken away before the prefetching CPU uses it:
    /// its access then pays a transfer of its own, and the prefetch is counted lost.
    #[test]
    fn a_prefetched_line_another_cpu_takes_meanwhile_costs_a_second_transfer() {
        with_sim(RwsemAlgo::SpinWritersHandoff, |sim| {
            sim.line_access(0, 1, 0, false);
            // CPU 0's prefetch at 10 ns arrives at 60 ns.
            sim.prefetch(0, 0, 10 * NS);
            // CPU 2's atomic at 20 ns queues behind it: the line is CPU 0's at 60 ns, then
            // moves to CPU 2 (one transfer), which has it at 110 ns.
            assert_eq!(sim.line_access(0, 2, 20 * NS, false), 10 * NS + 2 * X);
            // CPU 0 reads it at 200 ns: a transfer from CPU 2, as if it had never prefetched.
            assert_eq!(sim.line_op(0, 0, 200 * NS, false, Sym::Here), 200 * NS + X);
            let s = &sim.stats[sim.res[0].class];
            assert_eq!((s.prefetches, s.prefetches_lost), (1, 1));
        });
    }

    /// A trylock reached while the prefetch travels: its read and its exchange wait for the
    /// same fill and complete with it, before the request another CPU queued behind the
    /// prefetch takes the line away.
    #[test]
    fn accesses_issued_before_the_prefetched_line_arrives_complete_with_it() {
        with_sim(RwsemAlgo::SpinWritersHandoff, |sim| {
            sim.line_access(0, 1, 0, false);
            sim.prefetch(0, 0, 10 * NS);
            // CPU 2 asks at 20 ns: it gets the line after CPU 0's prefetch, at 110 ns.
            assert_eq!(sim.line_access(0, 2, 20 * NS, false), 10 * NS + 2 * X);
            // CPU 0's read at 30 ns and its exchange as the read completes: both at 60 ns.
            assert_eq!(sim.line_op(0, 0, 30 * NS, false, Sym::Here), 10 * NS + X);
            assert_eq!(sim.line_access(0, 0, 10 * NS + X, true), 10 * NS + X);
            let s = &sim.stats[sim.res[0].class];
            assert_eq!(
                (s.acquisitions, s.contended, s.wait_ns),
                (1, 0, 40.0),
                "only CPU 2 waited (from 20 to 60 ns)"
            );
            // After the line has gone to CPU 2, CPU 0's next access is an ordinary one.
            assert_eq!(
                sim.line_access(0, 0, 500 * NS, false),
                500 * NS + X,
                "a transfer back from CPU 2"
            );
            let s = &sim.stats[sim.res[0].class];
            assert_eq!(
                (s.prefetches, s.prefetches_lost),
                (1, 0),
                "it served the trylock"
            );
        });
    }

    /// A core keeps one request per line in flight: a CPU prefetching a line already on its
    /// way to it adds no request, and the line's queue does not grow by one per fault of a
    /// CPU that never waits for the line.
    #[test]
    fn a_second_prefetch_of_a_line_in_flight_is_merged_into_the_first() {
        with_sim(RwsemAlgo::SpinWritersHandoff, |sim| {
            sim.line_access(0, 1, 0, false);
            sim.prefetch(0, 0, 10 * NS);
            sim.prefetch(0, 0, 20 * NS);
            assert_eq!(
                sim.res[0].busy_until,
                10 * NS + X,
                "no second request queued"
            );
            let s = &sim.stats[sim.res[0].class];
            assert_eq!(s.prefetches, 2);
            // Once the line has arrived, a prefetch is a request again (here a hit).
            sim.prefetch(0, 0, 100 * NS);
            assert_eq!(
                sim.cpus[0].prefetch.map(|p| p.at),
                Some(100 * NS),
                "the line is here already"
            );
            assert_eq!(sim.stats[sim.res[0].class].prefetches, 3);
        });
    }

    /// A trylock's read of its lock word is folded into its exchange, with the compute the
    /// engine recorded between the two kept before it, in one compute op (the kernel's
    /// instructions are adjacent); a read right before an atomic or a lock's acquisition on
    /// the same line is folded too. A read followed by something else, by an atomic after
    /// compute, or by an access to another line, a write, a symbolic read, or an event left
    /// out of the program (a private instance's access) keeps its place, and a trylock with a
    /// recorded fallback remembers that it read.
    #[test]
    fn a_read_right_before_an_exchange_is_folded_into_it() {
        let mut t = trace(RwsemAlgo::SpinWritersHandoff);
        t.instances.push(Instance {
            class: "counter".into(),
            scope: Scope::Mm,
            model: LockModel::Line,
            sleeps: false,
            rwsem: None,
        });
        // A task's own line: no resource in a replay of threads sharing the mm.
        t.instances.push(Instance {
            class: "own".into(),
            scope: Scope::Vma,
            model: LockModel::Line,
            sleeps: false,
            rwsem: None,
        });
        let line = |inst, write, sym| Event::Line { inst, write, sym };
        let read = line(0, false, Sym::Here);
        let acquire = |trylock| Event::Acquire {
            inst: 0,
            shared: true,
            trylock,
        };
        let release = Event::Release {
            inst: 0,
            shared: true,
        };
        t.events = vec![
            Event::Compute { ns: 50.0 },
            read,
            Event::Compute { ns: 7.0 },
            acquire(true),
            Event::Compute { ns: 100.0 },
            read,
            Event::Compute { ns: 9.0 },
            release,
            read,
            Event::Atomic { inst: 0 },
            read,
            Event::Compute { ns: 3.0 },
            Event::Atomic { inst: 0 },
            line(1, false, Sym::Here),
            Event::Atomic { inst: 0 },
            line(0, true, Sym::Here),
            Event::Atomic { inst: 0 },
            line(0, false, Sym::First),
            Event::Atomic { inst: 0 },
            read,
            Event::Atomic { inst: 2 },
            Event::Atomic { inst: 0 },
            read,
            acquire(false),
            release,
            Event::Ops { n: 1 },
        ];
        let m = machine();
        let r = Replay::new(&m, &t, two_threads()).unwrap();
        let ops = op_names(&r.progs[0]);
        assert_eq!(
            ops,
            [
                "Compute(57000)",
                "Acquire(0, true)",
                "Compute(100000)",
                "Line(0, false, Here)",
                "Compute(9000)",
                "Release(0, true)",
                "Atomic(0)",
                "Line(0, false, Here)",
                "Compute(3000)",
                "Atomic(0)",
                "Line(1, false, Here)",
                "Atomic(0)",
                "Line(0, true, Here)",
                "Atomic(0)",
                "Line(0, false, First)",
                "Atomic(0)",
                "Line(0, false, Here)",
                "Atomic(0)",
                "Acquire(0, true)",
                "Release(0, true)",
                "Ops(1)",
            ]
        );
        // A release of a hold taken before the recording started is left out of the program,
        // and the read before it is not folded into the atomic after it.
        let mut edge = trace(RwsemAlgo::SpinWritersHandoff);
        edge.events = vec![
            Event::Compute { ns: 5.0 },
            read,
            release,
            Event::Atomic { inst: 0 },
            Event::Ops { n: 1 },
        ];
        let r = Replay::new(&m, &edge, two_threads()).unwrap();
        let ops = op_names(&r.progs[0]);
        assert_eq!(
            ops,
            [
                "Compute(5000)",
                "Line(0, false, Here)",
                "Atomic(0)",
                "Ops(1)"
            ]
        );
        // With a fallback recorded for the trylock, the fold is remembered on the `Try`.
        t.fallbacks = vec![crate::trace::Fallback {
            class: "mmap_lock".into(),
            segments: vec![vec![Event::Compute { ns: 1.0 }, Event::Ops { n: 0 }]],
        }];
        let r = Replay::new(&m, &t, two_threads()).unwrap();
        assert!(
            r.progs[0]
                .iter()
                .any(|o| matches!(o, Op::Try(0, true, 0, true))),
            "{:?}",
            r.progs[0]
        );
    }

    /// Fallback segments are compiled one after the other into one vector: a segment that
    /// starts with an atomic does not fold the read the previous segment ended with, and a
    /// segment whose trylock folds its own read does not merge the previous segment's
    /// closing compute into its own.
    #[test]
    fn fallback_segments_fold_nothing_across_their_boundaries() {
        let mut t = trace(RwsemAlgo::SpinWritersHandoff);
        let trylock = Event::Acquire {
            inst: 0,
            shared: true,
            trylock: true,
        };
        // A hold by trylock (a fallback replaces it up to the release) and an op, three times.
        let hold = [
            trylock,
            Event::Release {
                inst: 0,
                shared: true,
            },
            Event::Ops { n: 1 },
        ];
        let start = [Event::Compute { ns: 10.0 }];
        t.events = [&start[..], &hold, &hold, &hold].concat();
        let read = Event::Line {
            inst: 0,
            write: false,
            sym: Sym::Here,
        };
        t.fallbacks = vec![crate::trace::Fallback {
            class: "mmap_lock".into(),
            segments: vec![
                vec![Event::Compute { ns: 1.0 }, read],
                vec![Event::Atomic { inst: 0 }, Event::Compute { ns: 1.0 }],
                vec![read, Event::Compute { ns: 2.0 }, trylock],
            ],
        }];
        let m = machine();
        let r = Replay::new(&m, &t, two_threads()).unwrap();
        let ops = op_names(&r.alt_ops[0]);
        assert_eq!(
            ops,
            [
                "Compute(1000)",
                "Line(0, false, Here)",
                "Atomic(0)",
                "Compute(1000)",
                "Compute(2000)",
                "Acquire(0, true)",
            ]
        );
        let spans: Vec<(u32, u32)> = r.alts[0].iter().map(|a| (a.start, a.len)).collect();
        assert_eq!(spans, [(0, 2), (2, 2), (4, 2)]);
    }

    #[test]
    fn merged_class_figures_read_as_one_longer_run() {
        let one = ClassStats {
            name: "zone->lock".into(),
            acquisitions: 1,
            contended: 2,
            wait_ns: 3.0,
            fallbacks: 4,
            holds: 5,
            hold_ns: 6.0,
            line_events: 7,
            line_ns: 8.0,
            line_queued_ns: 8.5,
            entry_events: 9,
            entry_ns: 10.0,
            prefetches: 11,
            prefetches_lost: 12,
            prefetch_return_waits: 12,
            prefetch_return_ns: 12.5,
            stores: 13,
            store_ns: 13.5,
            drain_ns: 14.0,
        };
        let mut two = one.clone();
        two.merge(&one);
        assert_eq!(
            two,
            ClassStats {
                name: "zone->lock".into(),
                acquisitions: 2,
                contended: 4,
                wait_ns: 6.0,
                fallbacks: 8,
                holds: 10,
                hold_ns: 12.0,
                line_events: 14,
                line_ns: 16.0,
                line_queued_ns: 17.0,
                entry_events: 18,
                entry_ns: 20.0,
                prefetches: 22,
                prefetches_lost: 24,
                prefetch_return_waits: 24,
                prefetch_return_ns: 25.0,
                stores: 26,
                store_ns: 27.0,
                drain_ns: 28.0,
            }
        );
    }

    /// A fault's return is compiled only while its prefetch may still be in flight: not when
    /// the fault read, wrote or exchanged the prefetched line itself since (a trylock of
    /// `mmap_lock`, the read of `pgd` beside it), nor in a fault without a prefetch; an access
    /// of another line, or a store, keeps it.
    #[test]
    fn a_return_no_prefetch_can_still_be_in_flight_at_is_left_out() {
        let run = |ops: &[Op]| {
            let mut e = Elision::new();
            // Past the program's first return, which is always kept.
            elide_return(&mut e, Op::TrapReturn);
            ops.iter()
                .filter(|&&op| !elide_return(&mut e, op))
                .filter(|&&op| op == Op::TrapReturn)
                .count()
        };
        let (p, l) = (Op::Prefetch(0), Op::Line(0, false, Sym::Here));
        let r = Op::TrapReturn;
        assert_eq!(run(&[p, r]), 1);
        assert_eq!(run(&[p, l, r]), 0);
        assert_eq!(run(&[p, Op::Atomic(0), r]), 0);
        assert_eq!(run(&[r]), 0);
        assert_eq!(
            run(&[p, Op::Line(1, true, Sym::Here), Op::Store(0, Sym::Here), r]),
            1
        );
        assert_eq!(run(&[p, Op::Line(0, false, Sym::First), r]), 1);
        // Per fault: a return settles its fault's prefetch either way.
        assert_eq!(run(&[p, r, r, p, l, r, p, r]), 2);
        // An access between a trylock that has a fallback and its release may be replaced by
        // the fallback's ops: it settles nothing. One without a fallback, or after the
        // release, does.
        let (tf, tn, rel) = (
            Op::Try(1, true, 0, false),
            Op::Try(1, true, NONE, false),
            Op::Release(1, true),
        );
        assert_eq!(run(&[p, tf, l, rel, r]), 1);
        assert_eq!(run(&[p, tf, rel, l, r]), 0);
        assert_eq!(run(&[p, tn, l, rel, r]), 0);
        // The program's first return is kept: its fault may have begun at the program's end.
        let mut e = Elision::new();
        assert!(!elide_return(&mut e, Op::TrapReturn));
        assert!(elide_return(&mut e, Op::TrapReturn));
    }

    /// A fence is compiled only after a store since the last op that drains the store
    /// buffer, and takes that store's resource; a second fence in a row, or one after a
    /// trylock, release, atomic, downgrade or TLB flush, is left out. A line write or a
    /// compute does not drain.
    #[test]
    fn a_fence_is_compiled_only_after_a_store_since_the_last_drain() {
        let run = |ops: &[Op]| -> Vec<Op> {
            let mut last = None;
            ops.iter()
                .filter_map(|&op| fence_after_store(&mut last, op))
                .filter(|op| matches!(op, Op::Fence(_)))
                .collect()
        };
        let (s0, s1, f) = (
            Op::Store(0, Sym::Here),
            Op::Store(1, Sym::Entry),
            Op::Fence(NONE),
        );
        assert_eq!(run(&[f]), []);
        assert_eq!(run(&[s0, f]), [Op::Fence(0)]);
        assert_eq!(run(&[s0, s1, f, f]), [Op::Fence(1)]);
        assert_eq!(
            run(&[s0, Op::Line(2, true, Sym::Here), Op::Compute(5), f]),
            [Op::Fence(0)]
        );
        for drain in [
            Op::Try(3, false, NONE, false),
            Op::Acquire(3, false),
            Op::Release(3, false),
            Op::Atomic(3),
            Op::Downgrade(3),
            Op::Flush,
        ] {
            assert_eq!(run(&[s0, drain, f]), [], "{drain:?}");
        }
    }

    /// The exception's return serializes: a prefetch still on its way holds the CPU there
    /// until the line arrives (and the wait is counted, as contention on the line's class);
    /// one that has arrived costs the return nothing.
    #[test]
    fn the_exception_return_waits_for_a_prefetch_still_on_its_way() {
        with_sim(RwsemAlgo::SpinWritersHandoff, |sim| {
            sim.line_access(0, 1, 0, false);
            // CPU 0's prefetch at 10 ns arrives at 10 + X.
            sim.prefetch(0, 0, 10 * NS);
            assert_eq!(sim.prefetch_at_return(0, 20 * NS), Some(10 * NS + X));
            let s = &sim.stats[sim.res[0].class];
            assert_eq!(s.prefetch_return_waits, 1);
            // 40 ns of the transfer: the line's time, no contention (nobody was ahead).
            let waited = (10 * NS + X - 20 * NS) as f64 / 1000.0;
            assert_eq!(
                (s.prefetch_return_ns, s.line_ns, s.wait_ns),
                (waited, waited, 0.0)
            );
            // At or after the arrival, and for a CPU with nothing in flight: no wait.
            assert_eq!(sim.prefetch_at_return(0, 10 * NS + X), None);
            assert_eq!(sim.prefetch_at_return(2, 20 * NS), None);
            assert_eq!(sim.stats[sim.res[0].class].prefetch_return_waits, 1);
            // CPU 2 prefetches at 15 ns, behind CPU 0's request: its turn comes at 10 + X and
            // the line at 10 + 2X. Returning at 20 ns it waits 10 + 2X - 20 ns, of which
            // 10 + X - 20 ns were its turn behind CPU 0: contention.
            sim.prefetch(0, 2, 15 * NS);
            assert_eq!(sim.prefetch_at_return(2, 20 * NS), Some(10 * NS + 2 * X));
            let s = &sim.stats[sim.res[0].class];
            let queued = (10 * NS + X - 20 * NS) as f64 / 1000.0;
            assert_eq!(s.wait_ns, queued);
            assert_eq!(s.line_queued_ns, queued);
        });
    }

    /// Through a whole replay: two CPUs whose short faults prefetch one line that nothing
    /// else touches. Without the return the line is never waited for and each CPU runs at
    /// its trap's and compute's pace; with it every fault waits at its return for its own
    /// request, which finds the line at the other CPU: a transfer (X = 50 ns) a fault.
    #[test]
    fn faults_that_return_with_their_prefetch_in_flight_take_turns_at_the_line() {
        let run = |ret: bool| {
            let mut t = trace(RwsemAlgo::SpinWritersHandoff);
            let mut fault = vec![
                Event::Trap,
                Event::Prefetch { inst: 0 },
                Event::Compute { ns: 10.0 },
            ];
            if ret {
                fault.push(Event::TrapReturn);
            }
            fault.push(Event::Ops { n: 1 });
            let n = fault.len();
            t.events = fault.into_iter().cycle().take(n * 256).collect();
            let out = replay_two_threads(&t);
            let c = &out.classes[0];
            (out.samples[0], c.prefetch_return_waits)
        };
        // Each CPU: the trap (machine().kernel.trap_ns = 300 ns) and 10 ns of compute a fault.
        let (free, waits) = run(false);
        assert_eq!(waits, 0);
        assert!((free / (2e9 / 310.0) - 1.0).abs() < 0.01, "{free} faults/s");
        // With the return, each fault also waits for its line to come from the other CPU,
        // which prefetched it last: 300 + 50 ns a fault.
        let (turns, waits) = run(true);
        assert!(
            (turns / (2e9 / 350.0) - 1.0).abs() < 0.01,
            "{turns} faults/s"
        );
        assert!(waits >= 500, "{waits} of 512 returns waited");
    }

    /// Through a whole replay: two CPUs that prefetch one line and compute, and never touch
    /// the line otherwise, run at their compute's pace. The line moves between them at every
    /// prefetch, but neither waits for it (a write in its place would cost each op a
    /// transfer: 1000 ns of compute plus 50).
    #[test]
    fn cpus_that_only_prefetch_a_line_run_at_their_computes_pace() {
        let run = |first: Event| {
            let mut t = trace(RwsemAlgo::SpinWritersHandoff);
            t.events = vec![first, Event::Compute { ns: 1000.0 }, Event::Ops { n: 1 }]
                .into_iter()
                .cycle()
                .take(3 * 64)
                .collect();
            let out = replay_two_threads(&t);
            let c = &out.classes[0];
            (out.samples[0], c.prefetches, c.prefetches_lost)
        };
        let (rate, prefetches, lost) = run(Event::Prefetch { inst: 0 });
        // (The CPUs' starts are staggered a little, hence 1% and not exactly 2 M.)
        assert!((rate / 2e6 - 1.0).abs() < 1e-2, "{rate} ops/s");
        assert_eq!(prefetches, 128);
        // No prefetch served an access, and each but the last was taken away by the other
        // CPU's next one; the claims still open when the run stopped are counted too.
        assert_eq!(lost, 127);
        let (stalled, _, _) = run(Event::Line {
            inst: 0,
            write: true,
            sym: Sym::Here,
        });
        assert!(
            (rate / stalled - 1050.0 / 1000.0).abs() < 5e-3,
            "{rate} ops/s prefetching, {stalled} with a write in its place"
        );
    }

    /// A critical section that rewrites four lines its previous holder wrote, with two CPUs
    /// taking turns: as writes the CPU waits for, the hold pays the four transfers one after
    /// the other (4 x 50 ns); as stores it pays them together, at the release, which waits
    /// for the store buffer to drain (50 ns). The lines are two heads and their first
    /// entries, so both kinds of store are covered.
    #[test]
    fn stores_under_a_lock_pay_their_transfers_together_at_the_release() {
        let run = |store: bool| {
            let access = |inst, sym| {
                if store {
                    Event::Store { inst, sym }
                } else {
                    Event::Line {
                        inst,
                        write: true,
                        sym,
                    }
                }
            };
            let hold = [
                access(1, Sym::Here),
                access(1, Sym::First),
                access(2, Sym::Here),
                access(2, Sym::First),
            ];
            let (lock, lines) = turns_at_a_lock_over_two_lines("zone->lock", "free_area", &hold);
            (
                lock.hold_ns / lock.holds as f64,
                lock.drain_ns / lock.holds as f64,
                lines.stores,
            )
        };
        let (waited, drain_w, stores_w) = run(false);
        let (stored, drain_s, stores_s) = run(true);
        assert_eq!(stores_w, 0);
        assert!(stores_s > 0);
        assert_eq!(drain_w, 0.0);
        // Every hold but the first few finds the four lines at the other CPU.
        assert!(
            (waited - 200.0).abs() < 10.0,
            "hold {waited} ns with writes"
        );
        assert!((stored - 50.0).abs() < 5.0, "hold {stored} ns with stores");
        assert!((drain_s - 50.0).abs() < 5.0, "release waited {drain_s} ns");
    }

    /// A fence (a locked instruction on a private line: the next page's reference drop) makes
    /// the CPU wait for its buffered stores' lines there. Two CPUs take turns at a lock whose
    /// hold stores to two lines the other CPU wrote last (50 ns each): with a fence between
    /// the stores the hold pays the two transfers one after the other (100 ns), without it
    /// together at the release (50 ns). A fence with no store before it since the lock was
    /// taken is compiled away and costs nothing.
    #[test]
    fn a_fence_between_stores_under_a_lock_pays_their_transfers_in_turn() {
        let run = |fence: bool, leading_fence: bool| {
            let mut hold = Vec::new();
            if leading_fence {
                hold.push(Event::Fence);
            }
            hold.push(Event::Store {
                inst: 1,
                sym: Sym::Here,
            });
            if fence {
                hold.push(Event::Fence);
            }
            hold.push(Event::Store {
                inst: 2,
                sym: Sym::Here,
            });
            let (lock, lines) = turns_at_a_lock_over_two_lines("lru_lock", "lru list", &hold);
            (
                lock.hold_ns / lock.holds as f64,
                lines.drain_ns / lock.holds as f64,
            )
        };
        let (apart, fence_wait) = run(true, false);
        let (together, no_wait) = run(false, false);
        let (leading, _) = run(false, true);
        assert!((apart - 100.0).abs() < 5.0, "hold {apart} ns with a fence");
        assert!(
            (fence_wait - 50.0).abs() < 5.0,
            "fence waited {fence_wait} ns"
        );
        assert!((together - 50.0).abs() < 5.0, "hold {together} ns without");
        assert_eq!(no_wait, 0.0);
        assert_eq!(leading, together, "a fence before any store costs nothing");
    }

    /// A TLB shootdown's IPI reaches every running CPU, but a CPU spinning for a lock runs
    /// the handler in place of spinning: its wait absorbs it, and it does not carry the
    /// handler into the critical section it was waiting for (which, at hundreds of CPUs
    /// flushing, lengthened every hold by its queue's IPIs until the replay ran away).
    #[test]
    fn a_shootdown_is_absorbed_by_a_spinning_waiter_and_charged_to_a_running_cpu() {
        let mut t = trace(RwsemAlgo::SpinWriters);
        t.instances = vec![
            Instance {
                class: "zone->lock".into(),
                scope: Scope::Machine,
                model: LockModel::Queued,
                sleeps: false,
                rwsem: None,
            },
            Instance {
                class: "tlb shootdown".into(),
                scope: Scope::Mm,
                model: LockModel::Queued,
                sleeps: false,
                rwsem: None,
            },
        ];
        t.events = vec![
            Event::Acquire {
                inst: 0,
                shared: false,
                trylock: false,
            },
            Event::Compute { ns: 10.0 },
            Event::Release {
                inst: 0,
                shared: false,
            },
            Event::TlbFlush { inst: 1 },
            Event::Compute { ns: 100.0 },
            Event::Ops { n: 1 },
        ];
        with_trace(t, 4, |sim| {
            // CPU 1 holds the lock, CPU 2 spins for it, CPU 3 clears a page (waits for the
            // memory bus).
            assert_eq!(sim.acquire(0, false, 1, 0), Some(0));
            assert_eq!(sim.acquire(0, false, 2, 10 * NS), None);
            assert_eq!(sim.cpus[2].st, St::WaitLock);
            sim.cpus[3].st = St::WaitBus;
            // CPU 0 runs its flush.
            sim.cpus[0].pc = 3;
            sim.step(0, 100 * NS);
            let handler = 500 * NS;
            assert_eq!(sim.cpus[2].stolen, 0, "the spinning waiter absorbs the IPI");
            assert_eq!(
                sim.cpus[3].stolen, handler,
                "a CPU clearing a page takes it"
            );
            assert_eq!(sim.cpus[1].stolen, handler, "the holder runs, and takes it");
        });
    }

    /// A queued rwlock (`rwlock_t`): N readers arriving while a writer holds it spin in the
    /// `wait_lock` queue (no sleep, no wake-up). At the writer's release (a plain store of a
    /// line it owns, so free) the first reader enters at one transfer; each reader behind it
    /// takes the `wait_lock` from the previous one (a transfer) and adds its bias to the count
    /// word the previous one wrote (another transfer): reader k enters at release + X + 2kX.
    /// An rw_semaphore of the same era instead wakes them all together at release + X + a
    /// wake-up, having let them sleep.
    #[test]
    fn qrwlock_readers_behind_a_writer_spin_and_enter_along_the_queue() {
        const N: u64 = 3;
        let release = 1000 * NS;
        let arrive = |k: u64| 100 * NS * (k + 1);
        with_trace(qrwlock_trace(), N as usize + 1, |sim| {
            assert_eq!(sim.acquire(0, false, 0, 0), Some(0));
            for k in 0..N {
                assert_eq!(sim.acquire(0, true, k as usize + 1, arrive(k)), None);
                assert!(sim.cpus[k as usize + 1].sleep_since.is_none(), "spins");
            }
            assert_eq!(sim.release(0, false, 0, release), release);
            assert_eq!(sim.res[0].readers, N as u32);
            assert_eq!(sim.res[0].holder, None);
            assert!(sim.res[0].qhead.is_none() && sim.res[0].waiters.is_empty());
            let waits: u64 = (0..N).map(|k| release + X + 2 * k * X - arrive(k)).sum();
            assert_eq!((sim.stats[0].wait_ns * 1000.0).round() as u64, waits);
            assert!(sim.cpus.iter().all(|c| c.slept == 0));
            // Each reader is scheduled at its entry.
            let mut at: Vec<u64> = sim
                .heap
                .entries()
                .filter(|&(_, c)| c != 0)
                .map(|(t, _)| t)
                .collect();
            at.sort_unstable();
            let want: Vec<u64> = (0..N).map(|k| release + X + 2 * k * X).collect();
            assert!(at.ends_with(&want), "{at:?} against {want:?}");
        });
        with_trace(trace(RwsemAlgo::SpinWriters), N as usize + 1, |sim| {
            sim.acquire(0, false, 0, 0);
            for k in 0..N {
                sim.acquire(0, true, k as usize + 1, arrive(k));
            }
            sim.release(0, false, 0, release);
            let waits: u64 = (0..N).map(|k| release + X + WAKE - arrive(k)).sum();
            assert_eq!((sim.stats[0].wait_ns * 1000.0).round() as u64, waits);
        });
    }

    /// A queued rwlock is fair to its writer: a writer arriving while readers hold it sets
    /// `_QW_WAITING` at the head of the queue, a reader arriving after it queues behind it
    /// although readers hold the lock, the writer enters one transfer after the last reader
    /// left, and the queued reader one transfer after the writer's release.
    #[test]
    fn qrwlock_readers_arriving_behind_a_waiting_writer_queue_behind_it() {
        with_trace(qrwlock_trace(), 4, |sim| {
            // Two readers take the lock by the fast path (the second's atomic fetches the
            // count word from the first).
            assert_eq!(sim.acquire(0, true, 1, 0), Some(0));
            assert_eq!(sim.acquire(0, true, 2, 10 * NS), Some(10 * NS + X));
            // The writer queues and sets `_QW_WAITING` (the line moves to it).
            assert_eq!(sim.acquire(0, false, 0, 100 * NS), None);
            assert_eq!(sim.res[0].line.owner, 0);
            // A reader arriving now may not join the readers inside.
            assert!(!sim.can_take(0, true, 200 * NS));
            assert_eq!(sim.acquire(0, true, 3, 200 * NS), None);
            // The readers leave (each an atomic fetching the word), the writer enters at one
            // transfer after the last one.
            assert_eq!(sim.release(0, true, 1, 1000 * NS), 1000 * NS + X);
            assert_eq!(sim.res[0].holder, None);
            assert_eq!(sim.release(0, true, 2, 1100 * NS), 1100 * NS + X);
            assert_eq!(sim.res[0].holder, Some(0));
            let writer_in = 1100 * NS + 2 * X;
            assert_eq!(sim.res[0].qhead.map(|w| w.cpu), Some(3));
            // Its release is a store of a line it owns; the reader enters one transfer on.
            assert_eq!(sim.release(0, false, 0, 2000 * NS), 2000 * NS);
            assert_eq!(sim.res[0].readers, 1);
            let reader_in = 2000 * NS + X;
            let waits = (writer_in - 100 * NS) + (reader_in - 200 * NS);
            assert_eq!((sim.stats[0].wait_ns * 1000.0).round() as u64, waits);
            assert_eq!(sim.stats[0].contended, 2);
        });
    }

    /// A writer waiting behind a writer: sleeping it pays the transfer and a wake-up at
    /// hand-off and uses no CPU meanwhile (before 3.16); spinning it pays the transfer only and
    /// is busy all along (3.16+).
    #[test]
    fn a_spinning_waiter_hands_over_at_a_transfer_a_sleeping_one_pays_a_wakeup() {
        for (algo, handoff, sleeps) in [
            (RwsemAlgo::SleepFifo, X + WAKE, true),
            (RwsemAlgo::SpinWriters, X, false),
            (RwsemAlgo::SpinWritersHandoff, X, false),
        ] {
            with_sim(algo, |sim| {
                assert_eq!(sim.acquire(0, false, 0, 0), Some(0));
                assert_eq!(sim.acquire(0, false, 1, 100 * NS), None);
                assert_eq!(sim.cpus[1].sleep_since.is_some(), sleeps, "{algo}");
                // The release writes the count word the releaser already owns.
                assert_eq!(sim.release(0, false, 0, 1000 * NS), 1000 * NS);
                let granted = 1000 * NS + handoff;
                assert_eq!(sim.res[0].holder, Some(1), "{algo}");
                assert_eq!(sim.cpus[1].st, St::Ready);
                let waited = (sim.stats[0].wait_ns * 1000.0).round() as u64;
                assert_eq!(waited, granted - 100 * NS, "{algo}");
                let slept = if sleeps { granted - 100 * NS } else { 0 };
                assert_eq!(sim.cpus[1].slept, slept, "{algo}");
            });
        }
    }

    /// Hold times, as lock_stat counts them: from the moment the lock is taken (at once, or at
    /// hand-off for a waiter) to its release. Writer 0 takes the free lock at 0 and releases
    /// it at 1000 ns; writer 1, spinning since 100 ns, gets it at 1000 ns + X and releases it
    /// at 3000 ns. Two holds, 1000 ns + (2000 ns - X) in all; a shared hold counts none.
    #[test]
    fn exclusive_holds_are_counted_from_the_take_or_the_hand_off_to_the_release() {
        with_sim(RwsemAlgo::SpinWriters, |sim| {
            assert_eq!(sim.acquire(0, false, 0, 0), Some(0));
            assert_eq!(sim.acquire(0, false, 1, 100 * NS), None);
            sim.release(0, false, 0, 1000 * NS);
            assert_eq!(sim.res[0].holder, Some(1));
            sim.release(0, false, 1, 3000 * NS);
            assert_eq!(sim.stats[0].holds, 2);
            let held = (sim.stats[0].hold_ns * 1000.0).round() as u64;
            assert_eq!(held, 1000 * NS + (2000 * NS - X));
            let at = sim.acquire(0, true, 2, 4000 * NS).unwrap();
            sim.release(0, true, 2, at + 500 * NS);
            assert_eq!(
                sim.stats[0].holds, 2,
                "a shared hold is not an exclusive one"
            );
        });
    }

    /// Write-lock stealing (3.10+): the lock stays free while the woken writer wakes, a writer
    /// arriving meanwhile takes it, and the woken one sleeps again at the head of the queue.
    /// Before 3.10 the releaser granted it to the sleeper, and the newcomer queues.
    #[test]
    fn a_woken_writer_loses_the_lock_to_a_newcomer_only_where_the_era_stole() {
        with_sim(RwsemAlgo::SleepSteal, |sim| {
            sim.acquire(0, false, 0, 0);
            assert_eq!(sim.acquire(0, false, 1, 100 * NS), None);
            sim.release(0, false, 0, 1000 * NS);
            assert_eq!(sim.cpus[1].st, St::Woken(0));
            assert_eq!(sim.res[0].holder, None);
            assert_eq!(sim.acquire(0, false, 2, 1500 * NS), Some(1500 * NS + X));
            sim.woken(0, 1, 1000 * NS + X + WAKE);
            assert_eq!(sim.res[0].holder, Some(2));
            assert_eq!(sim.cpus[1].st, St::WaitLock);
            assert_eq!(sim.res[0].waiters.front().map(|w| w.cpu), Some(1));
            // Its next chance is the thief's release; it is still asleep.
            assert!(sim.cpus[1].sleep_since.is_some());
        });
        with_sim(RwsemAlgo::SleepFifo, |sim| {
            sim.acquire(0, false, 0, 0);
            sim.acquire(0, false, 1, 100 * NS);
            sim.release(0, false, 0, 1000 * NS);
            assert_eq!(sim.res[0].holder, Some(1));
            assert_eq!(sim.acquire(0, false, 2, 1500 * NS), None);
        });
    }

    /// `downgrade_write`: the lock is never free between the write hold and the read hold,
    /// so a writer waiting at the downgrade still waits, for the last reader; a reader first
    /// in the queue enters with the downgrade, and one behind a waiting writer does not
    /// (`rwsem_mark_wake` with the lock read-owned wakes nobody when a writer is first).
    #[test]
    fn a_downgrade_lets_no_waiting_writer_in_and_admits_the_readers_first_in_line() {
        with_sim(RwsemAlgo::SleepFifo, |sim| {
            sim.acquire(0, false, 0, 0);
            assert_eq!(sim.acquire(0, false, 1, 100 * NS), None);
            assert_eq!(sim.acquire(0, true, 2, 200 * NS), None);
            sim.downgrade(0, 0, 1000 * NS);
            assert_eq!((sim.res[0].holder, sim.res[0].readers), (None, 1));
            assert_eq!(sim.cpus[1].st, St::WaitLock, "the writer still waits");
            assert_eq!(sim.cpus[2].st, St::WaitLock, "a reader behind it too");
            let s = &sim.stats[sim.res[0].class];
            assert_eq!((s.holds, s.hold_ns), (1, 1000.0), "the write hold ended");
            // The last reader's release hands the lock to the writer.
            sim.release(0, true, 0, 5000 * NS);
            assert_eq!(sim.res[0].holder, Some(1));
        });
        with_sim(RwsemAlgo::SleepFifo, |sim| {
            sim.acquire(0, false, 0, 0);
            assert_eq!(sim.acquire(0, true, 1, 100 * NS), None);
            assert_eq!(sim.acquire(0, false, 2, 200 * NS), None);
            let at = sim.downgrade(0, 0, 1000 * NS);
            assert_eq!(
                sim.res[0].readers, 2,
                "the reader first in line enters with it"
            );
            assert_eq!(sim.cpus[1].st, St::Ready);
            assert_eq!(
                sim.cpus[1].slept,
                at + X + WAKE - 100 * NS,
                "woken at the downgrade"
            );
            assert_eq!(sim.res[0].waiters.front().map(|w| w.cpu), Some(2));
            // Both readers gone, the writer has it.
            sim.release(0, true, 0, 5000 * NS);
            assert_eq!(sim.res[0].holder, None);
            sim.release(0, true, 1, 6000 * NS);
            assert_eq!(sim.res[0].holder, Some(2));
        });
    }

    /// A writer spinning on the write hold when it is downgraded stops spinning and sleeps in
    /// the queue (the owner is readers now), so a reader arriving later queues behind it
    /// instead of joining the read hold, and the writer gets the lock after the last reader,
    /// woken to take it.
    #[test]
    fn a_writer_spinning_at_a_downgrade_queues_and_readers_queue_behind_it() {
        with_sim(RwsemAlgo::SpinWritersHandoff, |sim| {
            sim.acquire(0, false, 0, 0);
            assert_eq!(sim.acquire(0, false, 1, 100 * NS), None);
            assert_eq!(sim.res[0].spinners.len(), 1, "it spins on the writer");
            let at = sim.downgrade(0, 0, 1000 * NS);
            assert!(sim.res[0].spinners.is_empty());
            assert_eq!(sim.res[0].waiters.front().map(|w| w.cpu), Some(1));
            assert_eq!(sim.cpus[1].sleep_since, Some(at));
            assert_eq!(
                sim.acquire(0, true, 2, 1500 * NS),
                None,
                "behind the writer"
            );
            sim.release(0, true, 0, 5000 * NS);
            assert_eq!(sim.cpus[1].st, St::Woken(0));
            sim.woken(0, 1, 5000 * NS + X + WAKE);
            assert_eq!(sim.res[0].holder, Some(1));
            assert_eq!(sim.cpus[2].st, St::WaitLock);
        });
    }

    /// `paired` keeps a downgrade with the hold it belongs to: dropped with an acquire still
    /// held at the recording's end, and when its hold began before the recording started.
    #[test]
    fn a_downgrade_is_kept_or_dropped_with_its_hold() {
        let w = Event::Acquire {
            inst: 0,
            shared: false,
            trylock: false,
        };
        let d = Event::Downgrade { inst: 0 };
        let r = Event::Release {
            inst: 0,
            shared: true,
        };
        assert_eq!(paired(&[w, d, r]), [true, true, true]);
        assert_eq!(paired(&[w, d]), [false, false]);
        assert_eq!(paired(&[d, r, w, d, r]), [false, false, true, true, true]);
    }

    /// Through a whole replay: two threads that each take the lock for write (100 ns),
    /// downgrade it and hold it for read ten times as long (munmap's detach and zap) run
    /// their read holds one at a time, since the other's writer waits at the downgrade. In
    /// the stealing eras (3.10+) the thread leaving its read hold takes the write lock again
    /// before the sleeping writer is awake, so it runs its ops back to back: 1100 ns an op.
    /// Granted FIFO (before 3.10), the writer gets the lock at the read hold's end, a
    /// transfer and a wake-up later: 1100 + 50 + 2000 ns an op. Replayed as a release and a
    /// new acquire (the rule before trace format 7), both came out otherwise (377 k and
    /// 270 k ops/s).
    #[test]
    fn holds_downgraded_to_read_take_turns_behind_the_waiting_writer() {
        let run = |algo: RwsemAlgo| {
            let mut t = trace(algo);
            let op = [
                Event::Acquire {
                    inst: 0,
                    shared: false,
                    trylock: false,
                },
                Event::Compute { ns: 100.0 },
                Event::Downgrade { inst: 0 },
                Event::Compute { ns: 1000.0 },
                Event::Release {
                    inst: 0,
                    shared: true,
                },
                Event::Ops { n: 1 },
            ];
            t.events = op.iter().copied().cycle().take(op.len() * 64).collect();
            replay_two_threads(&t).samples[0]
        };
        let steal = run(RwsemAlgo::SpinWritersHandoff);
        assert!((steal / (1e9 / 1100.0) - 1.0).abs() < 0.02, "{steal} ops/s");
        let fifo = run(RwsemAlgo::SleepFifo);
        assert!((fifo / (1e9 / 3150.0) - 1.0).abs() < 0.02, "{fifo} ops/s");
    }

    /// Two writers taking turns by spinning starve a sleeping reader for ever without the
    /// hand-off bit (3.16 to 5.2); with it (5.3+) the reader gets the lock at the first release
    /// after it has waited `RWSEM_WAIT_TIMEOUT` (4 ms), plus the transfer and its wake-up.
    #[test]
    fn hand_off_ends_the_starvation_of_a_sleeper_by_spinning_writers() {
        const US: u64 = 1000 * NS;
        for algo in [RwsemAlgo::SpinWriters, RwsemAlgo::SpinWritersHandoff] {
            with_sim(algo, |sim| {
                sim.acquire(0, false, 0, 0);
                assert_eq!(sim.acquire(0, true, 1, NS), None, "readers sleep");
                assert_eq!(sim.acquire(0, false, 2, 2 * NS), None);
                assert_eq!(sim.res[0].spinners.len(), 1, "{algo}");
                let (mut h, mut s) = (0, 2);
                let mut granted = None;
                for k in 1..=10_000u64 {
                    let t = k * US;
                    sim.release(0, false, h, t);
                    if sim.res[0].readers > 0 {
                        granted = Some(t);
                        break;
                    }
                    assert_eq!(sim.res[0].holder, Some(s as u32), "{algo} at {k}");
                    assert_eq!(sim.acquire(0, false, h, t + 60 * NS), None);
                    (h, s) = (s, h);
                }
                match (algo.hands_off(), granted) {
                    (false, None) => assert_eq!(sim.cpus[1].st, St::WaitLock),
                    (true, Some(t)) => {
                        // The first release at or after 4 ms of waiting (it queued at 1 ns).
                        assert_eq!(t, 4001 * US, "{algo}");
                        assert_eq!(sim.cpus[1].slept, t + X + WAKE - NS, "{algo}");
                    }
                    other => panic!("{algo}: {other:?}"),
                }
            });
        }
    }
}
