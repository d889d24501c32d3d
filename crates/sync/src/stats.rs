//! Lock instrumentation: acquisitions, contended acquisitions and time spent waiting, per lock
//! class, kept where the kernel's `CONFIG_LOCK_STAT` keeps them.
//!
//! The kernel's lock_stat (kernel/locking/lockdep.c) does not count inside the lock: each CPU
//! owns an array of `struct lock_class_stats` indexed by lock class (`cpu_lock_stats`), bumps
//! its own entry, and `lock_stats()` folds the CPUs' entries when someone reads
//! `/proc/lock_stat`. So instrumentation never writes a cache line that another CPU's lock
//! path writes: the lock word's line pays exactly the atomics the lock itself needs. pagelab
//! does the same, with threads in place of CPUs (the engine's tasks are threads bound to
//! virtual CPUs):
//!
//! * Every [`LockClass`] gets a dense index when the first lock is given it (an id cell inside
//!   the class). The lock keeps the index, as a [`Slot`], beside its class pointer, as lockdep
//!   keeps `class_cache` in the lock's `lockdep_map`: counting reads the lock's own memory,
//!   beside the word the lock operation has just written, and not the class.
//! * Each thread owns its counters, `[class][side]`, in its own static TLS block (a
//!   `const`-initialised thread-local with no destructor, as `cpu_lock_stats` is a per-CPU
//!   variable), cache-aligned, written only by that thread with a `Relaxed` load and store: no
//!   read-modify-write, no shared line. Acquisitions are a dense array of their own (four
//!   classes to a cache line); the contended count and the wait, written only after a wait,
//!   live apart.
//! * A [`Domain`] lists the counters of the threads recording into it, and reading a class
//!   folds them, as `lock_stats()` folds every CPU's. A domain belongs to one engine instance,
//!   so that tests running many engines in one process do not pool their counts. A thread
//!   records into the domain it last [entered](Domain::enter); when it leaves that domain for
//!   another, or exits, its counts move into the domain's table, so nothing counted is lost.
//! * A thread that entered no domain counts into the process-wide [`default_domain`]. Its
//!   counts join that domain's when the thread first waits for a lock, asks for its domain
//!   ([`current_domain`], a lock's `stats`), switches counting on, or enters a domain (what it
//!   counted before goes to the default domain then). Joining takes a call, and the counting
//!   path has none; a thread that exits having done none of those takes its counts with it.
//!   Every thread of the engine enters its kernel's domain at each kernel entry.
//! * Resetting does not write the owners' counters (which would race with their plain stores
//!   and could be undone by them): it records the current fold as a baseline that reads
//!   subtract.
//!
//! Readers and writers of an rwsem are counted apart ([`Side`]); spinlocks count as
//! [`Side::Exclusive`]. Locks nobody classified share their kind's "unclassified" class.
//!
//! # What is counted, and why not hold times
//!
//! The kernel's lock_stat (`CONFIG_LOCK_STAT`) keeps per class: acquisitions, contentions,
//! wait time and hold time. Its hold time costs two clock reads per acquisition
//! (`lockstat_clock()` in `__lock_acquire` and again at release, `lock_release_holdtime`), and
//! its wait time two more per contention (`__lock_contended`, `__lock_acquired`). pagelab
//! counts acquisitions, contended acquisitions and their wait, per class and side, and reads
//! the clock only on the contended slow path: an `Instant::now()` is about 23 ns here
//! (`examples/lockstat_cost.rs` prints it), so hold times would add about 46 ns to each
//! acquisition, some 70% of a fault's ~330 ns over five acquisitions, where the budget for
//! counting is 2%. Hold times are what the projector needs, and it takes them from a capture
//! ([`crate::trace`]), which time-stamps every acquisition and release of a recorded class
//! with the time-stamp counter and subtracts its own overhead; lock statistics serve the
//! counters a run stores, which read acquisitions, contentions and wait.
//!
//! # Cost model
//!
//! * Counting is switched by one process-wide flag ([`set_enabled`] / [`enabled`]), a `Relaxed`
//!   load of a read-mostly `AtomicBool` alone on its cache lines. With it off, a lock operation
//!   pays that load and a predictable branch, nothing else.
//! * With it on, an uncontended acquisition pays one increment at a fixed offset from the
//!   thread pointer, at the slot the lock keeps (a `u8` into 256 counters: no bounds check, no
//!   scaling): no pointer to load, no null test, no call. Cachegrind's instruction counts of
//!   `examples/lockstat_instr.rs` in crates/mm (the 6.7 profile's anonymous fault, 4.1 counted
//!   acquisitions per fault) put counting at 28 instructions per fault in the functions that
//!   count (`Lru::add` 13, `SpinLock::try_lock` 7, `RwSem::try_read` 5, `SpinLock::lock` 3),
//!   where a per-thread block reached through a thread-local pointer, null-tested, with a cold
//!   call to join the default domain, cost 41 (16, 9.4, 8, 7.6); simulated L1 misses do not
//!   change. What remains beyond the flag test and the increment is register traffic around
//!   the thread-local access: the crates are compiled as position-independent code, whose
//!   thread-local model (general dynamic) is a call to `__tls_get_addr` as far as the
//!   compiler knows, so it saves the caller-saved registers around it, and the linker relaxes
//!   the call to a load of `%fs:0` only afterwards. Built with `-C relocation-model=pie` the
//!   compiler uses the local-exec model instead, each count is one `incq %fs:(reg,slot,8)`
//!   after a `mov` of the offset, and counting costs 10 instructions per fault; the workspace
//!   does not set that flag (it changes every crate's code). `examples/lockstat_cost.rs`
//!   times it.
//! * `Instant::now()` is read only on the contended slow path, before waiting and after
//!   acquiring.
//!
//! The counters are `std` atomics even under `--cfg loom`: they do not take part in any lock
//! protocol, and the loom models run with counting off.

use std::cell::{Cell, RefCell};
use std::ops::{Add, AddAssign, Sub};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use crossbeam_utils::CachePadded;

use crate::trace::LockClass;

/// Lock classes a domain can count apart. Classes beyond this share the last index (their
/// counts are pooled, never lost); the engine declares a few dozen.
pub const MAX_CLASSES: usize = 128;
const _: () = assert!(
    MAX_CLASSES.is_power_of_two(),
    "Slot indexes 2 * MAX_CLASSES counters with a u8"
);

/// The switch, alone on its cache line (and the next, for the adjacent-line prefetcher): every
/// lock operation reads it, so no other static may share its line and be written beside it
/// (the linker had placed it on one line with other crates' statics, among them parking_lot's
/// count of threads, which a thread writes when it first parks and when it exits).
static ENABLED: CachePadded<AtomicBool> = CachePadded::new(AtomicBool::new(false));

/// Turns lock statistics on or off for every lock in the process (off at start).
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Relaxed);
    if on {
        join_default();
    }
}

/// Whether lock statistics are being counted.
#[inline]
pub fn enabled() -> bool {
    ENABLED.load(Relaxed)
}

/// Which side of a lock an acquisition took: rwsem readers and writers are counted apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// A spinlock holder or an rwsem writer.
    Exclusive = 0,
    /// An rwsem reader.
    Shared = 1,
}

// ---- class indices ----

/// Classes by index, for names in reports and for checking that an index is taken.
static CLASSES: Mutex<Vec<&'static LockClass>> = Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The data behind these mutexes is consistent after every statement, so a panic in
    // another holder leaves nothing half-done.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Where a class's acquisitions sit in a thread's counters: twice the class's dense index, so
/// that the [`Side`] is or-ed in and the `u8` indexes the thread's `2 * MAX_CLASSES` = 256
/// acquisition counters with no bounds check.
///
/// A lock looks its class's slot up once, when it is given its class ([`Slot::of`]), and keeps
/// it beside its class pointer: an acquisition then reads neither the class nor its id, much
/// as the kernel's lockdep keeps `class_cache` in the lock's own `lockdep_map`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot(u8);

const _: () = assert!(
    2 * MAX_CLASSES == 256,
    "a Slot indexes the acquisitions with a u8"
);

impl Slot {
    /// `class`'s slot, assigning the class its index if it has none yet.
    #[inline]
    pub fn of(class: &'static LockClass) -> Slot {
        // class_index is below MAX_CLASSES = 128, so twice it fits a u8.
        Slot((class_index(class) as u8) << 1)
    }

    /// The class's dense index.
    fn index(self) -> usize {
        usize::from(self.0 >> 1)
    }

    /// The acquisition counter of `side`.
    #[inline]
    fn at(self, side: Side) -> usize {
        usize::from(self.0 | side as u8)
    }
}

/// The dense index of `class`, assigned on first use.
#[inline]
fn class_index(class: &'static LockClass) -> usize {
    match class.stat_id.load(Relaxed) {
        0 => register(class),
        id => id as usize - 1,
    }
}

/// The index of `class` if it was ever counted (a reader must not take an index).
fn known_index(class: &'static LockClass) -> Option<usize> {
    match class.stat_id.load(Relaxed) {
        0 => None,
        id => Some(id as usize - 1),
    }
}

#[cold]
#[inline(never)]
fn register(class: &'static LockClass) -> usize {
    let mut classes = lock(&CLASSES);
    // Another thread may have registered it since our load.
    if let Some(i) = known_index(class) {
        return i;
    }
    let i = classes.len().min(MAX_CLASSES - 1);
    if classes.len() < MAX_CLASSES {
        classes.push(class);
    }
    class.stat_id.store(i as u32 + 1, Relaxed);
    i
}

// ---- per-thread counters ----

/// The counters of one class side that only contended acquisitions write.
struct Contention {
    contended: AtomicU64,
    wait_ns: AtomicU64,
}

impl Contention {
    const fn new() -> Contention {
        Contention {
            contended: AtomicU64::new(0),
            wait_ns: AtomicU64::new(0),
        }
    }
}

/// Adds `v` to a counter that only the current thread writes: no read-modify-write needed.
#[inline]
fn owner_add(counter: &AtomicU64, v: u64) {
    counter.store(counter.load(Relaxed).wrapping_add(v), Relaxed);
}

/// A thread's counters: the kernel's per-CPU `cpu_lock_stats` (a `DEFINE_PER_CPU` array that
/// each CPU bumps at a fixed offset from its per-CPU base and `lock_stats()` reads for every
/// CPU), kept the same way, as a `const`-initialised thread-local with no destructor
/// ([`COUNTERS`]) in the thread's own static TLS block.
///
/// So counting an acquisition is one increment at a fixed offset from the thread pointer: no
/// pointer to load, no null test, and no call on the path (a per-thread block reached through
/// a thread-local pointer, with a cold call to join the default domain when it was null, cost
/// 41 instructions per fault where this costs 28: see the module's cost model).
///
/// The split follows the kernel's: an uncontended acquisition only bumps a count (lock_stat
/// counts acquisitions as hold-time entries, a plain per-CPU increment), and only a contended
/// one records a wait (`lock_acquired` is called from `LOCK_CONTENDED`'s slow path). So
/// acquisitions sit in a dense array of their own, 16 bytes per class (four classes to a
/// cache line), and the contention counters, written only after a wait, are kept apart.
/// `repr(C)` keeps the acquisitions first, on the block's cache-line boundary.
#[repr(C, align(128))]
struct Counters {
    /// Acquisitions, contended ones included, at `2 * class + side` ([`Slot::at`]).
    acquisitions: [AtomicU64; 2 * MAX_CLASSES],
    /// `[class][side]` contended acquisitions and their wait.
    contention: [[Contention; 2]; MAX_CLASSES],
}

impl Counters {
    const fn new() -> Counters {
        Counters {
            acquisitions: [const { AtomicU64::new(0) }; 2 * MAX_CLASSES],
            contention: [const { [const { Contention::new() }; 2] }; MAX_CLASSES],
        }
    }

    /// Counts an uncontended acquisition: one increment of a line only this thread writes.
    #[inline]
    fn count(&self, slot: Slot, side: Side) {
        // A u8 index into 256 counters: no bounds check on the hot path.
        owner_add(&self.acquisitions[slot.at(side)], 1);
    }

    /// Counts a contended acquisition and its wait.
    #[inline]
    fn count_contended(&self, slot: Slot, side: Side, wait_ns: u64) {
        owner_add(&self.acquisitions[slot.at(side)], 1);
        let c = &self.contention[slot.index()][side as usize];
        owner_add(&c.contended, 1);
        owner_add(&c.wait_ns, wait_ns);
    }

    /// One class side's counters.
    fn load(&self, i: usize, side: usize) -> LockStatsSnapshot {
        let c = &self.contention[i][side];
        LockStatsSnapshot {
            acquisitions: self.acquisitions[2 * i + side].load(Relaxed),
            contended: c.contended.load(Relaxed),
            wait_ns: c.wait_ns.load(Relaxed),
        }
    }

    /// Adds every counter into `table` and zeroes it. Only its own thread calls this, under
    /// the lock of the domain whose table it is, so no reader sees a count twice or not at all.
    fn move_into(&self, table: &mut Table) {
        for (i, row) in table.iter_mut().enumerate() {
            for (side, t) in row.iter_mut().enumerate() {
                *t += self.load(i, side);
            }
        }
        for a in &self.acquisitions {
            a.store(0, Relaxed);
        }
        for c in self.contention.iter().flatten() {
            c.contended.store(0, Relaxed);
            c.wait_ns.store(0, Relaxed);
        }
    }
}

/// A thread's [`Counters`], as the domain it records into lists them for reading.
#[derive(Clone, Copy, PartialEq, Eq)]
struct ThreadCounters(*const Counters);

// SAFETY: the pointer is only dereferenced through `ThreadCounters::get`, whose contract is
// that of the domain list holding it (see there); the counters are atomics, read and written
// from any thread.
unsafe impl Send for ThreadCounters {}

impl ThreadCounters {
    /// The calling thread's counters.
    fn current() -> ThreadCounters {
        COUNTERS.with(|c| ThreadCounters(c))
    }

    /// The counters, read from any thread.
    ///
    /// Contract: `self` is listed in a domain's `threads` and the caller holds that domain's
    /// lock. A thread lists its counters only while it records into the domain ([`enter_local`]),
    /// and removes them under the same lock when it leaves the domain or exits
    /// ([`Domain::retire`], from `Local`'s destructor, which runs before the thread's static TLS
    /// block is freed).
    fn get(&self) -> &Counters {
        // SAFETY: by the contract above the owning thread is alive (it has not run `Local`'s
        // destructor, which unlists the pointer under the lock we hold), so its static TLS
        // block, where `COUNTERS` lives, is still allocated; `COUNTERS` has no destructor, so
        // it is valid for the thread's whole life; and `Counters` holds only atomics, so a
        // shared reference alongside the owner's relaxed stores is sound.
        unsafe { &*self.0 }
    }
}

/// Folded counters, `[class][side]`.
type Table = Vec<[LockStatsSnapshot; 2]>;

fn zero_table() -> Table {
    vec![[LockStatsSnapshot::default(); 2]; MAX_CLASSES]
}

/// The thread's place in the domains.
struct Local {
    /// The domain recorded into, whose `threads` list this thread's counters; held, so that it
    /// outlives the thread's stay in it.
    current: RefCell<Option<Arc<Domain>>>,
}

impl Drop for Local {
    /// The thread exits: fold its counts into its domain, so they outlive it.
    fn drop(&mut self) {
        // Locks taken by later thread-local destructors count into counters nobody reads.
        CURRENT_ID.with(|c| c.set(0));
        if let Some(d) = self.current.get_mut().take() {
            d.retire(ThreadCounters::current());
        }
    }
}

thread_local! {
    static LOCAL: Local = const {
        Local {
            current: RefCell::new(None),
        }
    };
    /// The thread's counters: all the counting fast path touches (`const`, no destructor: no
    /// lazy initialisation or destructor registration to test on access).
    static COUNTERS: Counters = const { Counters::new() };
    /// The current domain's address, for [`Domain::enter`]'s check (0: none). The thread holds
    /// that domain in [`Local::current`], so the address cannot be reused while it is here.
    static CURRENT_ID: Cell<usize> = const { Cell::new(0) };
}

/// Makes sure the thread's counts are read somewhere: a thread that entered no domain joins the
/// default one. Called off the counting path (a contended acquisition, [`current_domain`],
/// [`set_enabled`]), never on it.
#[cold]
#[inline(never)]
fn join_default() {
    if CURRENT_ID.with(Cell::get) == 0 {
        let _ = LOCAL.try_with(|l| enter_local(l, default_domain()));
    }
}

fn enter_local(l: &Local, d: &Arc<Domain>) {
    let Ok(mut cur) = l.current.try_borrow_mut() else {
        return;
    };
    if matches!(&*cur, Some(c) if Arc::ptr_eq(c, d)) {
        return;
    }
    let me = ThreadCounters::current();
    match cur.take() {
        // What was counted there stays there.
        Some(old) => old.retire(me),
        // Counted before the thread entered any domain: the default domain's.
        None => default_domain().absorb(me),
    }
    lock(&d.inner).threads.push(me);
    *cur = Some(d.clone());
    CURRENT_ID.with(|c| c.set(Arc::as_ptr(d) as usize));
}

/// Records an uncontended acquisition of `class` on `side` (if statistics are on). Locks that
/// keep their class's [`Slot`] call [`record_at`], which does not read the class.
#[inline]
pub fn record(class: &'static LockClass, side: Side) {
    if enabled() {
        let slot = Slot::of(class);
        COUNTERS.with(|c| c.count(slot, side));
    }
}

/// Records an uncontended acquisition on `side` of the class whose slot is `slot` (if
/// statistics are on): the flag, one increment in the thread's own counters.
#[inline]
pub fn record_at(slot: Slot, side: Side) {
    if enabled() {
        COUNTERS.with(|c| c.count(slot, side));
    }
}

/// Records a contended acquisition of `class` on `side` that waited since `timer` started.
#[inline]
pub fn record_contended(class: &'static LockClass, side: Side, timer: WaitTimer) {
    if timer.start.is_some() {
        record_contended_at(Slot::of(class), side, timer);
    }
}

/// [`record_contended`] for the class whose slot is `slot`.
#[inline]
pub fn record_contended_at(slot: Slot, side: Side, timer: WaitTimer) {
    if let Some(ns) = timer.elapsed_ns() {
        COUNTERS.with(|c| c.count_contended(slot, side, ns));
        join_default();
    }
}

// ---- domains ----

/// A set of threads whose lock statistics are folded together: one engine instance's.
///
/// ```
/// # use pagelab_sync::{LockClass, Scope, SpinLock, stats::{self, Domain}};
/// static CLASS: LockClass = LockClass::new("doc example", Scope::Node);
/// let d = Domain::new();
/// let lock = SpinLock::new_queued(()).with_class(&CLASS);
/// stats::set_enabled(true);
/// std::thread::scope(|s| {
///     s.spawn(|| {
///         d.enter();
///         drop(lock.lock());
///     });
/// });
/// assert_eq!(d.class(&CLASS).exclusive.acquisitions, 1);
/// ```
pub struct Domain {
    inner: Mutex<DomainInner>,
}

struct DomainInner {
    /// Counters of the threads recording here (see [`ThreadCounters::get`]).
    threads: Vec<ThreadCounters>,
    /// Counts of threads that exited.
    retired: Table,
    /// The fold at the last reset, which reads subtract.
    base: Table,
}

impl DomainInner {
    fn fold(&self, i: usize, side: usize) -> LockStatsSnapshot {
        self.threads
            .iter()
            .map(|t| t.get().load(i, side))
            .fold(self.retired[i][side], Add::add)
    }
}

impl Domain {
    /// An empty domain.
    pub fn new() -> Arc<Domain> {
        Arc::new(Domain {
            inner: Mutex::new(DomainInner {
                threads: Vec::new(),
                retired: zero_table(),
                base: zero_table(),
            }),
        })
    }

    /// Makes this the domain the calling thread records into, until it enters another. Cheap
    /// when it already is (a thread-local access and a compare), so hot paths may call it.
    #[inline]
    pub fn enter(self: &Arc<Self>) {
        if !self.is_current() {
            let _ = LOCAL.try_with(|l| enter_local(l, self));
        }
    }

    /// Whether the calling thread records into this domain.
    #[inline]
    pub fn is_current(self: &Arc<Self>) -> bool {
        CURRENT_ID.with(Cell::get) == Arc::as_ptr(self) as usize
    }

    /// `class`'s counters since the last reset, summed over the domain's threads.
    pub fn class(&self, class: &'static LockClass) -> ClassStats {
        let Some(i) = known_index(class) else {
            return ClassStats::default();
        };
        let d = lock(&self.inner);
        let side = |s: usize| d.fold(i, s) - d.base[i][s];
        ClassStats {
            exclusive: side(0),
            shared: side(1),
        }
    }

    /// Every counted class with its counters (zero ones left out), in the order classes were
    /// first given to a lock (or counted, for bare locks).
    pub fn classes(&self) -> Vec<(&'static LockClass, ClassStats)> {
        let classes = lock(&CLASSES).clone();
        classes
            .into_iter()
            .map(|c| (c, self.class(c)))
            .filter(|(_, s)| s.total() != LockStatsSnapshot::default())
            .collect()
    }

    /// Zeroes every class's counters (between a warm-up and a measurement).
    pub fn reset(&self) {
        let mut d = lock(&self.inner);
        let base: Table = (0..MAX_CLASSES)
            .map(|i| [d.fold(i, 0), d.fold(i, 1)])
            .collect();
        d.base = base;
    }

    /// Zeroes `class`'s counters.
    pub fn reset_class(&self, class: &'static LockClass) {
        if let Some(i) = known_index(class) {
            let mut d = lock(&self.inner);
            d.base[i] = [d.fold(i, 0), d.fold(i, 1)];
        }
    }

    /// The calling thread leaves the domain (for another, or at exit): its counts move into
    /// the domain's table, under the lock that readers take, and its counters start from zero.
    fn retire(&self, me: ThreadCounters) {
        let mut d = lock(&self.inner);
        if let Some(at) = d.threads.iter().position(|t| *t == me) {
            d.threads.swap_remove(at);
            me.get().move_into(&mut d.retired);
        }
    }

    /// Counts the calling thread made before it entered any domain (so listed in none) move
    /// into this domain's table.
    fn absorb(&self, me: ThreadCounters) {
        let mut d = lock(&self.inner);
        debug_assert!(!d.threads.contains(&me), "absorbing a listed thread");
        // The caller's own counters, which no domain lists: nobody else reads them.
        COUNTERS.with(|c| c.move_into(&mut d.retired));
    }

    /// Threads recording here (for tests and diagnostics).
    pub fn nr_threads(&self) -> usize {
        lock(&self.inner).threads.len()
    }
}

impl std::fmt::Debug for Domain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Domain")
            .field("threads", &self.nr_threads())
            .finish_non_exhaustive()
    }
}

static DEFAULT: LazyLock<Arc<Domain>> = LazyLock::new(Domain::new);

/// The process-wide domain of threads that entered no other.
pub fn default_domain() -> &'static Arc<Domain> {
    &DEFAULT
}

/// The domain the calling thread records into.
pub fn current_domain() -> Arc<Domain> {
    join_default();
    LOCAL
        .try_with(|l| l.current.try_borrow().ok().and_then(|c| c.clone()))
        .ok()
        .flatten()
        .unwrap_or_else(|| default_domain().clone())
}

/// Start time of a contended wait; reads the clock only if statistics are enabled.
#[derive(Debug)]
#[must_use = "pass the timer to stats::record_contended"]
pub struct WaitTimer {
    start: Option<Instant>,
}

impl WaitTimer {
    /// Starts timing a wait (a no-op when statistics are off).
    #[inline]
    pub fn start() -> Self {
        Self {
            start: enabled().then(Instant::now),
        }
    }

    /// Nanoseconds since [`WaitTimer::start`], or `None` if statistics were off then.
    #[inline]
    pub fn elapsed_ns(self) -> Option<u64> {
        self.start
            .map(|t| u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }
}

/// One class side's counters (or a sum of several).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LockStatsSnapshot {
    /// Successful acquisitions (including the contended ones).
    pub acquisitions: u64,
    /// Acquisitions whose fast path failed, so they had to wait.
    pub contended: u64,
    /// Total time the contended acquisitions waited, in nanoseconds.
    pub wait_ns: u64,
}

impl Add for LockStatsSnapshot {
    type Output = Self;

    fn add(self, rhs: Self) -> Self {
        Self {
            acquisitions: self.acquisitions.wrapping_add(rhs.acquisitions),
            contended: self.contended.wrapping_add(rhs.contended),
            wait_ns: self.wait_ns.wrapping_add(rhs.wait_ns),
        }
    }
}

impl AddAssign for LockStatsSnapshot {
    fn add_assign(&mut self, rhs: Self) {
        *self = *self + rhs;
    }
}

impl Sub for LockStatsSnapshot {
    type Output = Self;

    /// Counts since `rhs` was taken (saturating: a baseline is never above a later fold).
    fn sub(self, rhs: Self) -> Self {
        Self {
            acquisitions: self.acquisitions.saturating_sub(rhs.acquisitions),
            contended: self.contended.saturating_sub(rhs.contended),
            wait_ns: self.wait_ns.saturating_sub(rhs.wait_ns),
        }
    }
}

impl std::iter::Sum for LockStatsSnapshot {
    fn sum<I: Iterator<Item = Self>>(iter: I) -> Self {
        iter.fold(Self::default(), Add::add)
    }
}

/// A class's counters in a domain, readers and writers apart.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ClassStats {
    /// Spinlock holders and rwsem writers.
    pub exclusive: LockStatsSnapshot,
    /// Rwsem readers.
    pub shared: LockStatsSnapshot,
}

impl ClassStats {
    /// Both sides.
    pub fn total(&self) -> LockStatsSnapshot {
        self.exclusive + self.shared
    }
}

impl Add for ClassStats {
    type Output = Self;

    fn add(self, rhs: Self) -> Self {
        Self {
            exclusive: self.exclusive + rhs.exclusive,
            shared: self.shared + rhs.shared,
        }
    }
}

/// `class`'s counters in the calling thread's domain.
pub fn class(class: &'static LockClass) -> ClassStats {
    current_domain().class(class)
}

#[cfg(all(test, not(loom)))]
mod tests {
    //! Every assertion that depends on the process-wide flag lives in the single test
    //! [`counting_per_class_per_thread`]: it is the only test in this binary that calls
    //! [`set_enabled`], and it counts into domains and classes of its own, so tests running in
    //! parallel neither disturb it nor are disturbed by it.

    use super::*;
    use crate::trace::Scope;
    use crate::{LockKind, QueuedSpinLock, RwSem, SpinLock, TicketLock};
    use std::sync::Barrier;
    use std::time::Duration;

    const HOLD: Duration = Duration::from_millis(2);
    const HOLD_NS: u64 = 2_000_000;

    #[test]
    fn snapshot_arithmetic() {
        let a = LockStatsSnapshot {
            acquisitions: 3,
            contended: 1,
            wait_ns: 10,
        };
        let b = LockStatsSnapshot {
            acquisitions: 4,
            contended: 2,
            wait_ns: 5,
        };
        let sum = LockStatsSnapshot {
            acquisitions: 7,
            contended: 3,
            wait_ns: 15,
        };
        assert_eq!(a + b, sum);
        let mut c = a;
        c += b;
        assert_eq!(c, sum);
        assert_eq!([a, b].into_iter().sum::<LockStatsSnapshot>(), sum);
        assert_eq!(sum - b, a);
        assert_eq!(a - sum, LockStatsSnapshot::default(), "saturates");
        let cs = ClassStats {
            exclusive: a,
            shared: b,
        };
        assert_eq!(cs.total(), sum);
        assert_eq!((cs + cs).exclusive, a + a);
    }

    /// Holds a lock via `hold`, starts `waiter` on another thread (in domain `d`), waits
    /// until `is_waiting` says it is queued, keeps holding for [`HOLD`], then releases.
    fn contend<G>(
        d: &Arc<Domain>,
        hold: impl FnOnce() -> G,
        waiter: impl FnOnce() + Send,
        is_waiting: impl Fn() -> bool,
    ) {
        let guard = hold();
        std::thread::scope(|s| {
            let t = s.spawn(|| {
                d.enter();
                waiter();
            });
            while !is_waiting() {
                std::thread::yield_now();
            }
            std::thread::sleep(HOLD);
            drop(guard);
            t.join().unwrap();
        });
    }

    fn check_spinlock(kind: LockKind) {
        static TICKET: LockClass = LockClass::new("test ticket", Scope::Node);
        static QUEUED: LockClass = LockClass::new("test queued", Scope::Node);
        let class = match kind {
            LockKind::Ticket => &TICKET,
            LockKind::Queued => &QUEUED,
        };
        let d = Domain::new();
        d.enter();
        assert!(d.is_current());
        let lock = SpinLock::new(kind, 0u64).with_class(class);

        set_enabled(false);
        *lock.lock() += 1;
        drop(lock.try_lock());
        contend(
            &d,
            || lock.lock(),
            || *lock.lock() += 1,
            || lock.is_contended(),
        );
        assert_eq!(
            d.class(class),
            ClassStats::default(),
            "{kind:?} counted while off"
        );

        set_enabled(true);
        *lock.lock() += 1;
        assert!(lock.try_lock().is_some());
        let s = d.class(class);
        assert_eq!(s.shared, LockStatsSnapshot::default());
        let e = s.exclusive;
        assert_eq!(
            (e.acquisitions, e.contended, e.wait_ns),
            (2, 0, 0),
            "{kind:?}"
        );
        assert_eq!(lock.stats(), e, "the lock's class in the current domain");

        contend(
            &d,
            || lock.lock(),
            || *lock.lock() += 1,
            || lock.is_contended(),
        );
        let e = d.class(class).exclusive;
        assert_eq!((e.acquisitions, e.contended), (4, 1), "{kind:?}");
        assert!(e.wait_ns > 0, "{kind:?}");
        if kind == LockKind::Queued {
            // The queued waiter starts its timer before it publishes itself as the tail,
            // which is what `is_contended` observed, so it waited at least HOLD.
            assert!(e.wait_ns >= HOLD_NS, "wait {} ns", e.wait_ns);
        }

        // A second instance of the class adds to the same counters.
        let other = SpinLock::new(kind, ()).with_class(class);
        drop(other.lock());
        assert_eq!(d.class(class).exclusive.acquisitions, 5);

        lock.reset_stats();
        assert_eq!(d.class(class), ClassStats::default());
        drop(other.lock());
        assert_eq!(
            d.class(class).exclusive.acquisitions,
            1,
            "counts after a reset"
        );
    }

    fn check_rwsem() {
        static SEM: LockClass = LockClass::sleeping("test rwsem", Scope::Mm);
        let d = Domain::new();
        d.enter();
        let sem = RwSem::new(0u64).with_class(&SEM);

        drop(sem.read());
        drop(sem.try_read());
        *sem.write() += 1;
        let s = d.class(&SEM);
        assert_eq!((s.shared.acquisitions, s.exclusive.acquisitions), (2, 1));
        assert_eq!(s.total().contended, 0);

        // A writer waits for a reader.
        contend(
            &d,
            || sem.read(),
            || *sem.write() += 1,
            || sem.waiting_writers() == 1,
        );
        let w = d.class(&SEM).exclusive;
        assert_eq!((w.acquisitions, w.contended), (2, 1));
        assert!(w.wait_ns >= HOLD_NS);

        // A reader waits for a writer.
        contend(
            &d,
            || sem.write(),
            || assert_eq!(*sem.read(), 2),
            || sem.waiting_readers() == 1,
        );
        let s = d.class(&SEM);
        assert_eq!((s.shared.acquisitions, s.shared.contended), (4, 1));
        assert!(s.shared.wait_ns >= HOLD_NS);
        assert_eq!(s.exclusive.acquisitions, 3);

        // An unclassified rwsem counts under its kind's class, not this one.
        let plain = RwSem::new(());
        drop(plain.read());
        assert_eq!(d.class(&SEM), s);
        assert_eq!(
            d.class(&crate::trace::UNCLASSIFIED_RWSEM)
                .shared
                .acquisitions,
            1
        );

        d.reset_class(&SEM);
        assert_eq!(d.class(&SEM), ClassStats::default());
        assert_eq!(
            d.class(&crate::trace::UNCLASSIFIED_RWSEM)
                .shared
                .acquisitions,
            1,
            "a class reset leaves other classes"
        );
        d.reset();
        assert!(d.classes().is_empty(), "{:?}", d.classes());
    }

    /// Bare ticket and queued locks count under their kind's unclassified class.
    fn check_bare_locks() {
        let d = Domain::new();
        d.enter();
        let ticket = TicketLock::new(());
        drop(ticket.lock());
        drop(ticket.try_lock());
        let queued = QueuedSpinLock::new(());
        drop(queued.lock());
        let t = d.class(&crate::trace::UNCLASSIFIED_TICKET).exclusive;
        let q = d.class(&crate::trace::UNCLASSIFIED_QUEUED).exclusive;
        assert_eq!((t.acquisitions, q.acquisitions), (2, 1));
    }

    /// Threads count into their own counters; a read folds them, including threads that exited.
    fn check_threads_fold() {
        static SHARED: LockClass = LockClass::sleeping("test fold", Scope::Mm);
        const THREADS: usize = 4;
        const OPS: u64 = 10_000;
        let d = Domain::new();
        let sem = RwSem::new(()).with_class(&SHARED);
        let in_domain = Barrier::new(THREADS + 1);
        let counted = Barrier::new(THREADS + 1);
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    d.enter();
                    for _ in 0..OPS {
                        drop(sem.read());
                    }
                    drop(sem.write());
                    in_domain.wait();
                    counted.wait();
                });
            }
            in_domain.wait();
            // All threads are alive: their counters are folded as they are.
            assert_eq!(d.nr_threads(), THREADS);
            let s = d.class(&SHARED);
            assert_eq!(s.shared.acquisitions, THREADS as u64 * OPS);
            assert_eq!(s.exclusive.acquisitions, THREADS as u64);
            counted.wait();
        });
        // They exited: their counts were folded into the domain. (A scope's join can return
        // before the threads' thread-local destructors have run: wait for those.)
        while d.nr_threads() > 0 {
            std::thread::yield_now();
        }
        let s = d.class(&SHARED);
        assert_eq!(s.shared.acquisitions, THREADS as u64 * OPS);
        assert_eq!(s.exclusive.acquisitions, THREADS as u64);
        d.reset();
        assert_eq!(d.class(&SHARED), ClassStats::default());
    }

    /// Two domains count the same class apart; a thread that entered none counts into the
    /// default domain; re-entering a domain lists the thread there once.
    fn check_domains_apart() {
        static CLASS: LockClass = LockClass::new("test domains", Scope::Node);
        let (a, b) = (Domain::new(), Domain::new());
        let lock = SpinLock::new_queued(()).with_class(&CLASS);
        std::thread::scope(|s| {
            s.spawn(|| {
                a.enter();
                drop(lock.lock());
                b.enter();
                assert!(b.is_current() && !a.is_current());
                for _ in 0..3 {
                    drop(lock.lock());
                }
                a.enter();
                drop(lock.lock());
                assert_eq!(a.nr_threads(), 1, "one block per thread and domain");
            });
            s.spawn(|| {
                assert!(Arc::ptr_eq(&current_domain(), default_domain()));
                drop(lock.lock());
            });
        });
        assert_eq!(a.class(&CLASS).exclusive.acquisitions, 2);
        assert_eq!(b.class(&CLASS).exclusive.acquisitions, 3);
        assert!(default_domain().class(&CLASS).exclusive.acquisitions >= 1);
        a.reset();
        assert_eq!(
            b.class(&CLASS).exclusive.acquisitions,
            3,
            "a reset is per domain"
        );
    }

    /// A thread's counts from before it entered any domain are the default domain's; they move
    /// there when it enters one, and what it counts afterwards goes to the domain it entered,
    /// also after it exits.
    fn check_counts_before_entering() {
        static CLASS: LockClass = LockClass::new("test before entering", Scope::Node);
        let d = Domain::new();
        let lock = SpinLock::new_queued(()).with_class(&CLASS);
        let before = default_domain().class(&CLASS).exclusive.acquisitions;
        std::thread::scope(|s| {
            s.spawn(|| {
                drop(lock.lock());
                drop(lock.try_lock());
                d.enter();
                for _ in 0..3 {
                    drop(lock.lock());
                }
            });
        });
        while d.nr_threads() > 0 {
            std::thread::yield_now();
        }
        assert_eq!(
            default_domain().class(&CLASS).exclusive.acquisitions - before,
            2,
            "the counts from before entering"
        );
        assert_eq!(d.class(&CLASS).exclusive.acquisitions, 3);
    }

    /// A thread that leaves a domain for another leaves its counts there, and they are not
    /// counted again when it comes back, nor lost when it exits.
    fn check_leaving_keeps_counts() {
        static CLASS: LockClass = LockClass::new("test leaving", Scope::Node);
        let (a, b) = (Domain::new(), Domain::new());
        let lock = SpinLock::new_queued(()).with_class(&CLASS);
        let counted = Barrier::new(2);
        let read = Barrier::new(2);
        std::thread::scope(|s| {
            s.spawn(|| {
                for round in 1..=3u64 {
                    a.enter();
                    for _ in 0..round {
                        drop(lock.lock());
                    }
                    b.enter();
                    drop(lock.lock());
                }
                a.enter();
                counted.wait();
                read.wait();
            });
            counted.wait();
            assert_eq!(a.class(&CLASS).exclusive.acquisitions, 6);
            assert_eq!(b.class(&CLASS).exclusive.acquisitions, 3);
            assert_eq!((a.nr_threads(), b.nr_threads()), (1, 0));
            read.wait();
        });
        while a.nr_threads() > 0 {
            std::thread::yield_now();
        }
        assert_eq!(a.class(&CLASS).exclusive.acquisitions, 6);
        assert_eq!(b.class(&CLASS).exclusive.acquisitions, 3);
    }

    #[test]
    fn counting_per_class_per_thread() {
        for kind in LockKind::ALL {
            check_spinlock(kind);
        }
        set_enabled(true);
        check_rwsem();
        check_bare_locks();
        check_threads_fold();
        check_domains_apart();
        check_counts_before_entering();
        check_leaving_keeps_counts();
        set_enabled(false);
        assert!(!enabled());
    }

    /// Classes sit side by side in the acquisitions array, 16 bytes a class, with no
    /// contention counters between them: four classes share a cache line of the thread's
    /// counters, not one line each.
    #[test]
    fn acquisition_counters_are_dense() {
        COUNTERS.with(|c| {
            let at =
                |i: usize, side: usize| &c.acquisitions[2 * i + side] as *const AtomicU64 as usize;
            assert_eq!(at(0, 1) - at(0, 0), 8);
            assert_eq!(at(1, 0) - at(0, 0), 16);
            assert_eq!(at(4, 0) - at(0, 0), 64, "four classes to a cache line");
            assert_eq!(at(0, 0) % 128, 0, "the array starts a pair of cache lines");
            let contention = &c.contention as *const _ as usize;
            assert!(
                contention >= at(MAX_CLASSES - 1, 1) + 8,
                "contention counters after them"
            );
        });
    }

    /// Every lock operation reads the switch: it has its lines to itself, so a static the
    /// linker puts beside it cannot be written on the same line.
    #[test]
    fn the_switch_has_its_own_cache_lines() {
        let at = &ENABLED as *const CachePadded<AtomicBool> as usize;
        assert_eq!(at % 128, 0);
        assert!(std::mem::size_of_val(&ENABLED) >= 128);
    }

    /// A lock looks its class's slot up when it is given the class, before any acquisition, so
    /// that counting reads the slot the lock keeps and not the class; the slot is where the
    /// class's counters are read from.
    #[test]
    fn a_lock_takes_its_class_slot_when_classified() {
        static SPIN: LockClass = LockClass::new("test slot spin", Scope::Node);
        static SEM: LockClass = LockClass::sleeping("test slot rwsem", Scope::Mm);
        let _spin = SpinLock::new_queued(()).with_class(&SPIN);
        let _sem = RwSem::new(()).with_class(&SEM);
        for class in [&SPIN, &SEM] {
            let i = known_index(class).unwrap_or_else(|| panic!("{} has no index", class.name));
            let slot = Slot::of(class);
            assert_eq!(slot.index(), i);
            assert_eq!(slot.at(Side::Exclusive), 2 * i);
            assert_eq!(slot.at(Side::Shared), 2 * i + 1);
        }
        assert_ne!(known_index(&SPIN), known_index(&SEM));
    }

    #[test]
    fn classes_get_dense_indices_once() {
        static A: LockClass = LockClass::new("test index a", Scope::Cpu);
        static B: LockClass = LockClass::new("test index b", Scope::Cpu);
        let d = Domain::new();
        assert_eq!(
            d.class(&A),
            ClassStats::default(),
            "reading assigns no index"
        );
        assert_eq!(known_index(&A), None);
        let (ia, ib) = (class_index(&A), class_index(&B));
        assert_ne!(ia, ib);
        assert_eq!(class_index(&A), ia);
        assert!(ia < MAX_CLASSES && ib < MAX_CLASSES);
        assert!(std::ptr::eq(lock(&CLASSES)[ia], &A));
    }
}
