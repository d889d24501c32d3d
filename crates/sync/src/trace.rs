//! Shared-resource tracing: what one task did to the locks and cache lines other CPUs could
//! also touch, and how long it computed between them.
//!
//! The projector (crates/project) replays such a trace on N virtual CPUs of a machine this host
//! is not. For that it needs, per operation of a workload, the sequence of interactions with
//! *shared* state — lock acquire and release (which lock class, which instance), atomic updates
//! of shared cache lines, bytes written to memory — and the time spent computing in between.
//! Lock classes are the idea of lockdep (`struct lock_class_key`, kernel/locking/lockdep.c):
//! every lock is born with a static class naming what it protects; the class here also says
//! how far the lock is shared ([`Scope`]), which is what decides, at replay, whether two CPUs
//! meet at it.
//!
//! # Cost
//!
//! Only events on instances another CPU could meet are recorded ([`Scope::is_shared`]).
//! Recording is per thread (a thread-local buffer started with [`start`] and taken with
//! [`stop`]). Every hook first checks one process-wide counter of active recorders with a
//! `Relaxed` load, so with no recorder running a lock operation pays a load and a predictable
//! branch. While recording, a hook reads the time-stamp counter ([`now`]) and appends one
//! fixed-size record; [`measure_overhead`] measures that cost so the projector can take it
//! out of the compute gaps.
//!
//! The buffer and the counter are plain `std`, even under `--cfg loom`: no recorder runs in
//! the loom models, and recording takes no part in any lock protocol.

use std::cell::{Cell, RefCell};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering::Relaxed};
use std::time::Instant;

/// How far one instance of a lock class (or shared line) is shared between CPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// One for the whole machine (a swap device's lock, a global `lru_lock`).
    Machine,
    /// One per NUMA node (`zone->lock`, a node's `lru_lock`): a task meets the instance of
    /// the node it allocates from, which is its own node.
    Node,
    /// One per CPU (`pcp->lock`, LRU add batches): private to the task running there.
    Cpu,
    /// One per address space (`mmap_lock`, the mm-wide `page_table_lock`, RSS counters):
    /// shared by threads, private to a process.
    Mm,
    /// One per VMA (the per-VMA lock): shared by threads that fault the same VMA.
    Vma,
    /// Belongs to an object of the task's own (its page-table pages, its pages, its files).
    Private,
}

impl Scope {
    /// Every scope, in order (the projector's trace format numbers them by position).
    pub const ALL: [Scope; 6] = [
        Scope::Machine,
        Scope::Node,
        Scope::Cpu,
        Scope::Mm,
        Scope::Vma,
        Scope::Private,
    ];

    /// Whether instances of this scope can be met by another CPU: only those are recorded
    /// (a per-CPU or private lock costs what the compute around it already shows).
    pub const fn is_shared(self) -> bool {
        matches!(self, Scope::Machine | Scope::Node | Scope::Mm | Scope::Vma)
    }

    /// The name used in trace files and reports.
    pub const fn as_str(self) -> &'static str {
        match self {
            Scope::Machine => "machine",
            Scope::Node => "node",
            Scope::Cpu => "cpu",
            Scope::Mm => "mm",
            Scope::Vma => "vma",
            Scope::Private => "private",
        }
    }
}

/// What a lock (or line) protects and how far it is shared: lockdep's class key.
///
/// Also the key lock statistics are kept under ([`crate::stats`]): a class is counted as a
/// whole, over all its instances, as the kernel's lock_stat counts a `lock_class`.
#[derive(Debug)]
pub struct LockClass {
    /// The name reports print (`zone->lock`, `mmap_lock`, ...).
    pub name: &'static str,
    /// How far one instance is shared.
    pub scope: Scope,
    /// Waiters sleep instead of spinning (an rwsem such as `mmap_lock`): waiting costs a
    /// wake-up at hand-off and no CPU time meanwhile.
    pub sleeps: bool,
    /// Recorded even though its scope is not shared: a per-CPU lock taken by *trylock* whose
    /// failure path the projector replays (`pcp->lock`, whose failed trylock falls back to
    /// `zone->lock`). The replay still treats the instance as private; the recording gives the
    /// trylock a place in the trace to attach the fallback to.
    pub record_trylock: bool,
    /// The class's index in [`crate::stats`]' per-thread blocks plus one (0: not yet
    /// counted), assigned on first use. Written once, then only read.
    pub(crate) stat_id: AtomicU32,
}

/// Classes are equal when they say the same thing (the statistics index is bookkeeping).
impl PartialEq for LockClass {
    fn eq(&self, other: &Self) -> bool {
        (self.name, self.scope, self.sleeps) == (other.name, other.scope, other.sleeps)
    }
}

impl Eq for LockClass {}

impl LockClass {
    /// A spinning lock or a shared line.
    pub const fn new(name: &'static str, scope: Scope) -> Self {
        Self {
            name,
            scope,
            sleeps: false,
            record_trylock: false,
            stat_id: AtomicU32::new(0),
        }
    }

    /// A spinning lock taken by trylock whose acquisitions and releases are recorded whatever
    /// its scope (see [`LockClass::record_trylock`]).
    pub const fn with_recorded_trylock(name: &'static str, scope: Scope) -> Self {
        Self {
            name,
            scope,
            sleeps: false,
            record_trylock: true,
            stat_id: AtomicU32::new(0),
        }
    }

    /// Whether events on this class are recorded: shared scopes, and trylock classes with a
    /// replayed fallback.
    #[inline]
    pub const fn is_recorded(&self) -> bool {
        self.scope.is_shared() || self.record_trylock
    }

    /// A sleeping lock (rwsem, mutex).
    pub const fn sleeping(name: &'static str, scope: Scope) -> Self {
        Self {
            name,
            scope,
            sleeps: true,
            record_trylock: false,
            stat_id: AtomicU32::new(0),
        }
    }
}

/// The class of a lock nobody classified: private, so replay folds it into compute.
pub static UNCLASSIFIED: LockClass = LockClass::new("unclassified", Scope::Private);

/// The class unclassified rwsems count under (apart from spinlocks: their readers and
/// writers are what an rwsem's statistics are about).
pub static UNCLASSIFIED_RWSEM: LockClass =
    LockClass::sleeping("unclassified rwsem", Scope::Private);

/// The class a bare [`crate::TicketLock`] counts under (one not inside a [`crate::SpinLock`]).
pub static UNCLASSIFIED_TICKET: LockClass =
    LockClass::new("unclassified ticket lock", Scope::Private);

/// The class a bare [`crate::QueuedSpinLock`] counts under.
pub static UNCLASSIFIED_QUEUED: LockClass =
    LockClass::new("unclassified queued spinlock", Scope::Private);

/// The algorithm behind a traced lock: what its hand-off costs at replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LockModel {
    /// Ticket spinlock: every waiter spins on the one lock word.
    Ticket,
    /// Queued (MCS) spinlock: each waiter spins on its own node.
    Queued,
    /// Reader-writer semaphore with one shared count word (`struct rw_semaphore`): waiters
    /// wait as the era's rwsem algorithm says (sleeping, optimistic spinning).
    RwSem,
    /// Queued reader-writer spinlock (`rwlock_t` on x86 since 4.x, kernel/locking/qrwlock.c):
    /// one count word with a writer byte, and waiters that never sleep but spin FIFO on the
    /// internal `wait_lock` (a qspinlock); readers arriving while a writer waits queue behind
    /// it, and the writer at the queue's head spins until the readers drain.
    QRwLock,
    /// A reference count taken with one atomic (the 6.15 per-VMA lock).
    Refcount,
    /// Not a lock: an atomic read-modify-write of a shared cache line.
    Line,
}

/// Exclusive (writer, spinlock holder) or shared (reader) access.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// A spinlock holder or an rwsem writer.
    Exclusive,
    /// An rwsem reader.
    Shared,
}

/// What happened.
#[allow(missing_docs)] // the variants' fields are named for what they hold
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A lock was taken (`trylock`: it was a trylock that succeeded).
    Acquire { access: Access, trylock: bool },
    /// A lock was released.
    Release { access: Access },
    /// A write hold of an rwsem became a read hold without the lock being free in between
    /// (`downgrade_write`): no writer can take it there, as one could between a release and a
    /// new acquire.
    Downgrade,
    /// A trylock of this lock failed; what follows is the path the caller takes instead
    /// (recorded by the capture's fallback windows, see [`force_trylock_failure`]).
    TrylockFail { access: Access },
    /// An atomic read-modify-write of a shared line.
    Atomic,
    /// `bytes` were written to memory (zeroing or copying a page) from this event's time
    /// stamp until `end`; replay costs them by memory bandwidth instead of by this host.
    Write { bytes: u32, end: u64 },
    /// A hardware exception entered the kernel (a page fault), which the engine does not pay.
    Trap,
    /// The exception returns to user space (`iretq`): an instruction that serializes, so the
    /// CPU goes on only once what it still has in flight is done.
    TrapReturn,
    /// A TLB flush of the address space whose `mm` instance is `instance`: on a real machine
    /// an IPI to every other CPU running it.
    TlbFlush,
    /// `n` operations of the workload completed (what its metric counts).
    Ops(u32),
    /// A plain read (`write == false`) or write of a shared cache line, or of the line a
    /// symbolic reference names ([`Sym`]): what the replay's coherence model costs by who
    /// touched that line last.
    Line { write: bool, sym: Sym },
    /// A store to a shared line, or to the line a symbolic reference names, that the CPU does
    /// not wait for: a store whose address came from lines already loaded (the neighbours'
    /// links a `list_del` rewrites, the first entry's `prev` a `list_add` rewrites) or an update
    /// of a counter whose load feeds only its store (`nr_free`, an LRU
    /// size). On x86 it waits in the store buffer while its line is fetched, and the CPU goes
    /// on; a locked instruction, or the release of a lock (a store that TSO orders after every
    /// earlier one), waits until it has its line. A [`Kind::Line`] write is a load and then a
    /// store (a list head, read for its first entry before it is rewritten): the CPU waits for
    /// that one.
    Store { sym: Sym },
    /// A locked instruction on a line no other CPU meets (a page's own reference count or
    /// flags: `put_page_testzero`, `SetPageLRU` under `lru_lock`), recorded only when a store
    /// to a shared line ([`Kind::Store`]) came before it since the last lock operation,
    /// atomic, TLB flush or fence. Its own cost is this host's compute; what it adds on x86 is the wait for the
    /// store buffer to drain: reads and writes are not reordered with locked instructions
    /// (Intel SDM vol. 3A, 8.2.2; 10.2.2 in recent editions), which current cores enforce by
    /// draining the store buffer before the locked instruction, so the neighbours' links one
    /// page's unlink stored wait for their lines before the next page's reference drop.
    Fence,
    /// A prefetch for writing (`prefetchw`) of the shared line at the instance: the line is
    /// asked for exclusive, taking it from the other CPUs' caches as a store would, but the
    /// CPU goes on while it travels. Only a later access of the same line waits, for what is
    /// left of the transfer, or for a new one if another CPU took the line meanwhile.
    Prefetch,
    /// The task starts (`begin`) or ends an unmap (`munmap`). Not an event of the trace: the
    /// capture times its untraced windows' unmaps, and these marks tell which of the
    /// recording's gaps that time must account for (see [`unmap`]).
    Unmap { begin: bool },
}

/// Which cache line a [`Kind::Line`] event touches, relative to its instance.
///
/// Some lines cannot be named by address in a one-task capture, because whose they are
/// depends on the interleaving: the entry at the head of a shared list was put there by
/// whichever CPU added last, a buddy block was freed by someone. Such lines are recorded
/// symbolically, relative to the list head they hang off (the event's instance), and the
/// replay resolves them against its own record of who last wrote them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Sym {
    /// The line at the instance's address itself (a list head, a counter, a sequence count,
    /// a lock word read before its compare-and-exchange).
    Here,
    /// The line of the current first entry of the list headed at the instance: the
    /// `struct page` whose `lru.prev` a `list_add` or a splice rewrites, or which a
    /// `list_del` of the first entry takes off (`__rmqueue_smallest`).
    First,
    /// The line of some other entry of the list headed at the instance: the buddy block a
    /// free merges with (`__free_one_page` unlinking the buddy from its free list).
    Entry,
}

/// One recorded event.
#[derive(Clone, Copy, Debug)]
pub struct Event {
    /// Time stamp ([`now`] ticks).
    pub t: u64,
    /// What happened.
    pub kind: Kind,
    /// The lock's (or line's) class.
    pub class: &'static LockClass,
    /// The instance's address (identity within one recording).
    pub instance: usize,
    /// The lock's algorithm.
    pub model: LockModel,
}

/// What the lock hooks must do, in one word so that a run with nothing to do pays one load per
/// acquisition and release ([`hooked`]): the threads recording in the low half, the threads
/// timing their holds ([`time_holds`]) counted in units of [`HOLD_ONE`] in the high half.
static HOOKS: AtomicUsize = AtomicUsize::new(0);

/// One thread timing its holds, in [`HOOKS`].
const HOLD_ONE: usize = 1 << (usize::BITS / 2);

/// Whether any thread records or times its holds: the lock hooks' fast path, one `Relaxed`
/// load; [`active`] and [`holds_timed`] then say which.
#[inline]
pub fn hooked() -> bool {
    HOOKS.load(Relaxed) != 0
}

/// This thread's recording; a thread that exits while recording gives its count back.
struct Buf(RefCell<Option<Vec<Event>>>);

impl Drop for Buf {
    fn drop(&mut self) {
        if self.0.get_mut().take().is_some() {
            HOOKS.fetch_sub(1, Relaxed);
        }
    }
}

thread_local! {
    static BUF: Buf = const { Buf(RefCell::new(None)) };
    /// Whether this thread recorded a [`Kind::Store`] since its last event that waits for the
    /// store buffer (a lock operation, an atomic, a fence, a TLB flush): only then can a
    /// [`fence`] wait for anything, so only then is it recorded.
    static STORE_PENDING: Cell<bool> = const { Cell::new(false) };
}

/// Whether any thread is recording (one `Relaxed` load: the hooks' fast path).
#[inline]
pub fn active() -> bool {
    HOOKS.load(Relaxed) & (HOLD_ONE - 1) != 0
}

/// Starts recording this thread's events (a no-op if it already records), into a buffer of
/// `capacity` events that is written through once before recording starts.
///
/// The writing-through matters: a fresh allocation is only address space, and the host
/// kernel would fault each of its pages in at the first event that lands there (a host page
/// fault of a microsecond or two every hundred events or so, several times the cost of the
/// events themselves), and a buffer that fills up is copied whole into a larger one. Either
/// lands in whichever gap between two events it happens in, as if the engine had computed
/// there. So a recording must not outgrow `capacity`, and the pages are made resident
/// here, outside the recorded window.
pub fn start(capacity: usize) {
    ticks_per_ns();
    BUF.with(|b| {
        let mut b = b.0.borrow_mut();
        if b.is_none() {
            *b = Some(resident_buffer(capacity));
            STORE_PENDING.with(|p| p.set(false));
            HOOKS.fetch_add(1, Relaxed);
        }
    });
}

/// An empty vector of `capacity` events whose memory has been written once (so it is
/// resident), see [`start`].
fn resident_buffer(capacity: usize) -> Vec<Event> {
    let mut v = Vec::with_capacity(capacity);
    v.resize(
        capacity,
        Event {
            t: 0,
            kind: Kind::Ops(0),
            class: &UNCLASSIFIED,
            instance: 0,
            model: LockModel::Line,
        },
    );
    v.clear();
    v
}

/// Stops recording on this thread and returns what was recorded (empty if it was not).
pub fn stop() -> Vec<Event> {
    STORE_PENDING.with(|p| p.set(false));
    BUF.with(|b| match b.0.borrow_mut().take() {
        Some(v) => {
            HOOKS.fetch_sub(1, Relaxed);
            v
        }
        None => Vec::new(),
    })
}

#[cold]
#[inline(never)]
fn push(kind: Kind, class: &'static LockClass, instance: usize, model: LockModel) {
    BUF.with(|b| {
        // The clock is read only by a thread that records: while one thread records, every
        // other thread's hooks come here too (`active` is one flag for all), and a clock read
        // each would slow their untimed work, such as another capture's untraced window.
        if let Ok(mut b) = b.0.try_borrow_mut()
            && let Some(v) = b.as_mut()
        {
            let t = now();
            v.push(Event {
                t,
                kind,
                class,
                instance,
                model,
            });
            match kind {
                Kind::Store { .. } => STORE_PENDING.with(|p| p.set(true)),
                Kind::Acquire { .. }
                | Kind::Release { .. }
                | Kind::Downgrade
                | Kind::Atomic
                | Kind::Fence
                | Kind::TlbFlush => STORE_PENDING.with(|p| p.set(false)),
                _ => {}
            }
        }
    });
}

/// A lock at `instance` was acquired.
#[inline]
pub fn acquire(
    class: &'static LockClass,
    instance: usize,
    model: LockModel,
    access: Access,
    trylock: bool,
) {
    if active() && class.is_recorded() {
        push(Kind::Acquire { access, trylock }, class, instance, model);
    }
}

/// The lock at `instance` is about to be released.
#[inline]
pub fn release(class: &'static LockClass, instance: usize, model: LockModel, access: Access) {
    if active() && class.is_recorded() {
        push(Kind::Release { access }, class, instance, model);
    }
}

/// The rwsem at `instance`, held for write, is downgraded to a read hold.
#[inline]
pub fn downgrade(class: &'static LockClass, instance: usize, model: LockModel) {
    debug_assert_eq!(model, LockModel::RwSem, "only an rwsem is downgraded");
    if active() && class.is_recorded() {
        push(Kind::Downgrade, class, instance, model);
    }
}

thread_local! {
    /// The class whose trylocks this thread is made to fail ([`force_trylock_failure`]).
    static FORCED: Cell<Option<&'static LockClass>> = const { Cell::new(None) };
}

/// Makes every trylock of `class` on this thread fail (`None` ends it), for as long as this
/// thread records. A capture-only switch: the projector's capture runs a window with it set,
/// so that what the engine does when that trylock fails (the per-VMA lock falling back to
/// `mmap_lock`, a pcp falling back to `zone->lock`) is recorded from the engine itself.
/// Without a recording running on this thread it has no effect, so no measurement can be
/// disturbed by a switch left on.
pub fn force_trylock_failure(class: Option<&'static LockClass>) {
    FORCED.with(|f| f.set(class));
}

/// Whether a trylock of `class` at `instance` must fail now (see [`force_trylock_failure`]);
/// when it must, the failure is recorded. Lock code calls this first in its trylock: one
/// `Relaxed` load when nothing records.
#[inline]
pub fn trylock_forced_to_fail(
    class: &'static LockClass,
    instance: usize,
    model: LockModel,
    access: Access,
) -> bool {
    if !active() {
        return false;
    }
    forced_slow(class, instance, model, access)
}

#[cold]
#[inline(never)]
fn forced_slow(
    class: &'static LockClass,
    instance: usize,
    model: LockModel,
    access: Access,
) -> bool {
    let forced = FORCED.with(|f| f.get().is_some_and(|c| core::ptr::eq(c, class)));
    let recording = BUF.with(|b| b.0.try_borrow().is_ok_and(|v| v.is_some()));
    if forced && recording {
        push(Kind::TrylockFail { access }, class, instance, model);
    }
    forced && recording
}

/// An atomic read-modify-write of the shared line at `instance`.
#[inline]
pub fn atomic(class: &'static LockClass, instance: usize) {
    if active() && class.scope.is_shared() {
        push(Kind::Atomic, class, instance, LockModel::Line);
    }
}

/// A plain access to a shared cache line: `write` or read, of the line at `instance` or of
/// the line `sym` names relative to it. `model` is the instance's lock algorithm when the
/// line is a lock word (an rwsem count read before its compare-and-exchange), else
/// [`LockModel::Line`].
#[inline]
pub fn line(class: &'static LockClass, instance: usize, model: LockModel, write: bool, sym: Sym) {
    if active() && class.scope.is_shared() {
        push(Kind::Line { write, sym }, class, instance, model);
    }
}

/// A prefetch for writing of the shared line at `instance` ([`Kind::Prefetch`]); `model` is
/// the instance's lock algorithm when the line is a lock word.
#[inline]
pub fn prefetch_write(class: &'static LockClass, instance: usize, model: LockModel) {
    if active() && class.scope.is_shared() {
        push(Kind::Prefetch, class, instance, model);
    }
}

/// A plain read of the shared line at `instance` (a sequence count, a counter).
#[inline]
pub fn line_read(class: &'static LockClass, instance: usize) {
    line(class, instance, LockModel::Line, false, Sym::Here);
}

/// A plain write of the shared line at `instance` (a list head, a counter written under a
/// lock, a sequence count).
#[inline]
pub fn line_write(class: &'static LockClass, instance: usize) {
    line(class, instance, LockModel::Line, true, Sym::Here);
}

/// A write of the line `sym` names relative to the list head at `anchor` (see [`Sym`]).
#[inline]
pub fn line_sym_write(class: &'static LockClass, anchor: usize, sym: Sym) {
    line(class, anchor, LockModel::Line, true, sym);
}

/// A store the CPU does not wait for ([`Kind::Store`]) to the line `sym` names relative to
/// the shared instance `anchor` (`Sym::Here`: the instance's own line, a counter).
#[inline]
pub fn line_store(class: &'static LockClass, anchor: usize, sym: Sym) {
    if active() && class.scope.is_shared() {
        push(Kind::Store { sym }, class, anchor, LockModel::Line);
    }
}

/// A locked read-modify-write of a line no other CPU meets (a page's own reference count or
/// flags) was executed: recorded as a [`Kind::Fence`] when a store to a shared line is
/// waiting before it, since on x86 it cannot execute until that store has its line.
#[inline]
pub fn fence() {
    if active() && STORE_PENDING.with(Cell::get) {
        push(Kind::Fence, &UNCLASSIFIED, 0, LockModel::Line);
    }
}

/// A page-fault exception (the engine's software MMU found no usable entry).
#[inline]
pub fn trap() {
    if active() {
        push(Kind::Trap, &UNCLASSIFIED, 0, LockModel::Line);
    }
}

/// The page-fault exception returns to user space (`iretq` on x86-64, `rfi` on ia64): a
/// serializing instruction, so the replay makes the CPU wait there for a prefetch it still has
/// in flight (the fault entry's `prefetchw` of `mmap_lock`, when nothing in the fault waited
/// for that line).
#[inline]
pub fn trap_return() {
    if active() {
        push(Kind::TrapReturn, &UNCLASSIFIED, 0, LockModel::Line);
    }
}

/// A TLB flush of the address space whose `mm`-scoped instance is `mm`.
#[inline]
pub fn tlb_flush(class: &'static LockClass, mm: usize) {
    if active() {
        push(Kind::TlbFlush, class, mm, LockModel::Line);
    }
}

/// The task starts (`begin`) or ends an unmap. Recording costs more per event in some
/// stretches of a run than in others (an unmap records a lock, a list and a free event per
/// page, with no page clearing between them to hide the buffer's stores), so a capture that
/// took one cost per event out of every gap would misplace compute between the unmap, a
/// critical section under `mmap_lock` held for writing, and the faults. The capture times
/// the unmaps of its untraced windows and takes the recording's cost out of each stretch
/// separately (`pagelab_project::trace`).
#[inline]
pub fn unmap(begin: bool) {
    if active() {
        push(Kind::Unmap { begin }, &UNCLASSIFIED, 0, LockModel::Line);
    }
    if holds_timed() {
        HOLDS.with(|h| {
            if let Some(st) = h.0.borrow_mut().as_mut() {
                st.in_unmap = begin;
            }
        });
    }
}

/// `n` operations of the workload completed.
#[inline]
pub fn ops(n: u32) {
    if active() {
        push(Kind::Ops(n), &UNCLASSIFIED, 0, LockModel::Line);
    }
}

/// A memory write in progress (see [`write_span`]).
#[must_use = "call `end` with the bytes written"]
pub struct WriteSpan {
    start: Option<u64>,
}

/// Marks the start of a bulk memory write (clearing or copying a page); [`WriteSpan::end`]
/// records it. The time between is not this host's compute: replay costs the bytes by the
/// target machine's memory bandwidth.
#[inline]
pub fn write_span() -> WriteSpan {
    WriteSpan {
        start: (active() || TIMING.load(Relaxed) != 0).then(now),
    }
}

impl WriteSpan {
    /// `bytes` were written since [`write_span`].
    #[inline]
    pub fn end(self, bytes: u32) {
        if let Some(t0) = self.start {
            let end = now();
            let recorded = BUF.with(|b| {
                if let Ok(mut b) = b.0.try_borrow_mut()
                    && let Some(v) = b.as_mut()
                {
                    v.push(Event {
                        t: t0,
                        kind: Kind::Write { bytes, end },
                        class: &UNCLASSIFIED,
                        instance: 0,
                        model: LockModel::Line,
                    });
                    true
                } else {
                    false
                }
            });
            if !recorded {
                WRITE_TIME.with(|w| {
                    if let Some(mut t) = w.get() {
                        t.add(bytes, end.saturating_sub(t0));
                        w.set(Some(t));
                    }
                });
            }
        }
    }
}

/// Threads timing their writes without recording ([`time_writes`]): while none does,
/// [`write_span`] pays one more `Relaxed` load.
static TIMING: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static WRITE_TIME: WriteTimeSlot = const { WriteTimeSlot(Cell::new(None)) };
}

/// This thread's [`WriteTime`] while it times its writes. A thread that exits (or unwinds)
/// with its timing still on gives its count in [`TIMING`] back, as the recording buffer
/// does: otherwise every later [`write_span`] of the process would pay the timing's two
/// time-stamp reads.
struct WriteTimeSlot(Cell<Option<WriteTime>>);

impl std::ops::Deref for WriteTimeSlot {
    type Target = Cell<Option<WriteTime>>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl Drop for WriteTimeSlot {
    fn drop(&mut self) {
        if self.0.take().is_some() {
            TIMING.fetch_sub(1, Relaxed);
        }
    }
}

/// The page writes of a stretch run without recording, timed by [`time_writes`]: what the
/// projector needs to split an untraced run's CPU time into writes and compute, from the
/// same run. The writes of a recorded stretch are slower than these: the recording buffer's
/// stores (about a kilobyte a fault) take cache and memory bandwidth from the clearing.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WriteTime {
    /// Bytes written in spans shorter than the stall bound.
    pub bytes: u64,
    /// Their time-stamp ticks ([`now`]).
    pub ticks: u64,
    /// Bytes written in spans at or beyond it (the host took the CPU away inside them).
    pub stalled_bytes: u64,
    /// Spans timed, stalled ones included: each cost [`write_timing_cost`].
    pub spans: u64,
    /// The stall bound, in ticks.
    stall_ticks: u64,
}

impl WriteTime {
    fn add(&mut self, bytes: u32, ticks: u64) {
        self.spans += 1;
        if ticks >= self.stall_ticks {
            self.stalled_bytes += u64::from(bytes);
        } else {
            self.bytes += u64::from(bytes);
            self.ticks += ticks;
        }
    }

    /// Nanoseconds all the bytes took, the stalled ones costed at the others' rate; `None`
    /// when every write stalled (no rate to cost them at: the caller falls back on what it
    /// knows otherwise, never on zero).
    pub fn ns(&self) -> Option<f64> {
        if self.bytes == 0 {
            return (self.stalled_bytes == 0).then_some(0.0);
        }
        let ns = self.ticks as f64 / ticks_per_ns();
        Some(ns * (self.bytes + self.stalled_bytes) as f64 / self.bytes as f64)
    }
}

/// Starts (`Some(stall_ns)`) or ends (`None`) timing this thread's page writes without
/// recording anything, and returns what was timed since the last start. A write longer than
/// `stall_ns` is counted apart: on a shared host it holds a stretch in which another task
/// ran, which thread CPU time does not count either. Each write then costs two time-stamp
/// reads, as it does in a recording.
pub fn time_writes(stall_ns: Option<f64>) -> WriteTime {
    ticks_per_ns();
    let was = WRITE_TIME.with(|w| w.take());
    if was.is_some() {
        TIMING.fetch_sub(1, Relaxed);
    }
    if let Some(stall) = stall_ns {
        let stall_ticks = (stall * ticks_per_ns()) as u64;
        WRITE_TIME.with(|w| {
            w.set(Some(WriteTime {
                stall_ticks,
                ..WriteTime::default()
            }))
        });
        TIMING.fetch_add(1, Relaxed);
    }
    was.unwrap_or_default()
}

/// The time-stamp counter: `rdtsc` on x86-64 (a few nanoseconds, constant rate on every
/// CPU this runs on), else nanoseconds since the first call.
#[inline]
pub fn now() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `rdtsc` has no preconditions; every x86-64 CPU implements it.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static BASE: OnceLock<Instant> = OnceLock::new();
        u64::try_from(BASE.get_or_init(Instant::now).elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// What timing one write costs ([`time_writes`]), in nanoseconds: in all, and the part of
/// it that falls between the span's two time stamps (so lands in the write's timed length).
/// Measured once on the calling thread, as [`measure_overhead`] measures recording: the
/// median over 9 runs of 1000 back-to-back empty spans, timed as a window times them. Call
/// it while this thread records nothing (the spans would be recorded).
pub fn write_timing_cost() -> (f64, f64) {
    static COST: OnceLock<(f64, f64)> = OnceLock::new();
    *COST.get_or_init(|| {
        let saved = WRITE_TIME.with(|w| w.take());
        let cost = median_timing_cost(
            || {
                WRITE_TIME.with(|w| {
                    w.set(Some(WriteTime {
                        stall_ticks: u64::MAX,
                        ..WriteTime::default()
                    }))
                });
                TIMING.fetch_add(1, Relaxed);
            },
            || write_span().end(std::hint::black_box(0)),
            || {
                TIMING.fetch_sub(1, Relaxed);
                WRITE_TIME.with(|w| w.take()).map_or(0.0, |t| {
                    t.ticks as f64 / ticks_per_ns() / t.spans.max(1) as f64
                })
            },
        );
        WRITE_TIME.with(|w| w.set(saved));
        cost
    })
}

/// What timing one thing costs: the median over 9 runs of `start`, 1000 `one`s back to back,
/// and `inside` (which ends the run and says the part of each timed length the timing
/// itself added); in all per `one`, and inside, in nanoseconds.
fn median_timing_cost(
    mut start: impl FnMut(),
    mut one: impl FnMut(),
    mut inside: impl FnMut() -> f64,
) -> (f64, f64) {
    let mut runs: Vec<(f64, f64)> = (0..9)
        .map(|_| {
            start();
            let t0 = now();
            for _ in 0..1000 {
                one();
            }
            let all = now().wrapping_sub(t0) as f64 / ticks_per_ns() / 1000.0;
            (all, inside())
        })
        .collect();
    runs.sort_by(|a, b| a.0.total_cmp(&b.0));
    runs[runs.len() / 2]
}

thread_local! {
    static HOLDS: HoldSlot = const { HoldSlot(RefCell::new(None)) };
}

/// This thread's hold timing while it runs. A thread that exits (or unwinds) with it on gives
/// its count in [`HOOKS`] back, as [`WriteTimeSlot`] does.
struct HoldSlot(RefCell<Option<HoldState>>);

impl Drop for HoldSlot {
    fn drop(&mut self) {
        if self.0.borrow_mut().take().is_some() {
            HOOKS.fetch_sub(HOLD_ONE, Relaxed);
        }
    }
}

/// The holds open on this thread (innermost last, each with the time stamp it last resumed
/// at) and the sums so far.
struct HoldState {
    open: Vec<(&'static LockClass, u64)>,
    /// `sums`' classes and places.
    keys: Vec<(&'static LockClass, bool)>,
    sums: Vec<HoldTime>,
    in_unmap: bool,
    stall_ticks: u64,
}

/// The time a thread spent inside the exclusive spinlock holds of one recorded lock class,
/// apart from the holds of other recorded classes nested in them, inside unmaps or elsewhere
/// ([`unmap`]): what an untraced run's critical sections took, which a recording's cannot
/// say (recording adds its own work inside them: the events, and bookkeeping that is no
/// event, such as which hold linked a free block). The capture gives each class's holds in
/// the trace this time in all ([`time_holds`]).
#[derive(Clone, Debug, PartialEq)]
pub struct HoldTime {
    /// The class's name.
    pub class: &'static str,
    /// Inside an unmap.
    pub in_unmap: bool,
    /// Nanoseconds inside its holds, stalled stretches left out.
    pub ns: f64,
    /// Holds ended.
    pub holds: u64,
    /// Stretches of [`time_holds`]' stall bound or more, left out of `ns`.
    pub stalls: u64,
}

impl HoldState {
    fn add(&mut self, class: &'static LockClass, ticks: u64, ended: bool) {
        let in_unmap = self.in_unmap;
        // Keyed by the class's address (one static per class): no string compare per hold.
        let i = match self
            .keys
            .iter()
            .position(|&(c, u)| std::ptr::eq(c, class) && u == in_unmap)
        {
            Some(i) => i,
            None => {
                self.keys.push((class, in_unmap));
                self.sums.push(HoldTime {
                    class: class.name,
                    in_unmap,
                    ns: 0.0,
                    holds: 0,
                    stalls: 0,
                });
                self.sums.len() - 1
            }
        };
        let h = &mut self.sums[i];
        if ticks >= self.stall_ticks {
            h.stalls += 1;
        } else {
            h.ns += ticks as f64;
        }
        h.holds += u64::from(ended);
    }
}

/// Whether any thread times its holds ([`time_holds`]).
#[inline]
pub fn holds_timed() -> bool {
    HOOKS.load(Relaxed) >= HOLD_ONE
}

/// Runs `f` on this thread's hold timing, with the time stamp now, when it is on and `class`
/// is recorded.
#[inline]
fn with_holds(class: &'static LockClass, f: impl FnOnce(&mut HoldState, u64)) {
    if !class.is_recorded() {
        return;
    }
    HOLDS.with(|h| {
        if let Ok(mut h) = h.0.try_borrow_mut()
            && let Some(st) = h.as_mut()
        {
            f(st, now());
        }
    });
}

/// A spinlock of `class` was taken (call after [`holds_timed`]): its hold starts now, and the
/// one it nests in pauses.
#[inline]
pub fn hold_begin(class: &'static LockClass) {
    with_holds(class, |st, t| {
        if let Some(&(outer, since)) = st.open.last() {
            st.add(outer, t.wrapping_sub(since), false);
        }
        st.open.push((class, t));
    });
}

/// A spinlock of `class` is about to be released (call after [`holds_timed`]): its hold ends,
/// and the one it nested in resumes.
#[inline]
pub fn hold_end(class: &'static LockClass) {
    with_holds(class, |st, t| {
        let Some(i) = st.open.iter().rposition(|&(c, _)| std::ptr::eq(c, class)) else {
            return;
        };
        let innermost = i + 1 == st.open.len();
        let (_, since) = st.open.remove(i);
        if innermost {
            st.add(class, t.wrapping_sub(since), true);
            if let Some(last) = st.open.last_mut() {
                last.1 = t;
            }
        } else {
            // Released under a hold taken after it: its time until the inner one began was
            // counted then.
            st.add(class, 0, true);
        }
    });
}

/// Starts (`Some(stall_ns)`) or ends (`None`) timing this thread's lock holds without
/// recording anything ([`HoldTime`]), and returns what was timed since the last start. Each
/// timed hold costs two time-stamp reads and a little bookkeeping ([`hold_timing_cost`]).
pub fn time_holds(stall_ns: Option<f64>) -> Vec<HoldTime> {
    let tpn = ticks_per_ns();
    let was = HOLDS.with(|h| h.0.borrow_mut().take());
    if was.is_some() {
        HOOKS.fetch_sub(HOLD_ONE, Relaxed);
    }
    if let Some(stall) = stall_ns {
        HOLDS.with(|h| {
            *h.0.borrow_mut() = Some(HoldState {
                open: Vec::with_capacity(8),
                keys: Vec::with_capacity(8),
                sums: Vec::with_capacity(8),
                in_unmap: false,
                stall_ticks: (stall * tpn) as u64,
            })
        });
        HOOKS.fetch_add(HOLD_ONE, Relaxed);
    }
    // Classes of one name (a lockdep class per kind of lock, but statics may repeat a name)
    // are one in the trace: merged here.
    let mut sums: Vec<HoldTime> = Vec::new();
    for h in was.map(|s| s.sums).unwrap_or_default() {
        match sums
            .iter_mut()
            .find(|m| m.class == h.class && m.in_unmap == h.in_unmap)
        {
            Some(m) => {
                m.ns += h.ns / tpn;
                m.holds += h.holds;
                m.stalls += h.stalls;
            }
            None => sums.push(HoldTime {
                ns: h.ns / tpn,
                ..h
            }),
        }
    }
    sums
}

/// What timing one hold costs ([`time_holds`]), in nanoseconds: in all, and the part of it
/// that lands inside the hold's timed length. Measured once, as [`write_timing_cost`] is: the
/// median over 9 runs of 1000 back-to-back empty holds of a recorded class.
pub fn hold_timing_cost() -> (f64, f64) {
    static COST: OnceLock<(f64, f64)> = OnceLock::new();
    static PROBE: LockClass = LockClass::new("hold timing probe", Scope::Machine);
    *COST.get_or_init(|| {
        let saved = HOLDS.with(|h| h.0.borrow_mut().take());
        if saved.is_some() {
            HOOKS.fetch_sub(HOLD_ONE, Relaxed);
        }
        let cost = median_timing_cost(
            || {
                time_holds(Some(f64::MAX));
            },
            || {
                hold_begin(std::hint::black_box(&PROBE));
                hold_end(std::hint::black_box(&PROBE));
            },
            || {
                time_holds(None)
                    .iter()
                    .map(|h| h.ns / h.holds.max(1) as f64)
                    .sum()
            },
        );
        if let Some(s) = saved {
            HOLDS.with(|h| *h.0.borrow_mut() = Some(s));
            HOOKS.fetch_add(HOLD_ONE, Relaxed);
        }
        cost
    })
}

/// [`now`] ticks per nanosecond, measured once against the monotonic clock over 20 ms.
pub fn ticks_per_ns() -> f64 {
    static RATE: OnceLock<f64> = OnceLock::new();
    *RATE.get_or_init(|| {
        let (t0, c0) = (Instant::now(), now());
        while t0.elapsed().as_millis() < 20 {
            std::hint::spin_loop();
        }
        let (ns, ticks) = (
            t0.elapsed().as_nanos() as f64,
            now().wrapping_sub(c0) as f64,
        );
        if ns > 0.0 && ticks > 0.0 {
            ticks / ns
        } else {
            1.0
        }
    })
}

/// The cost of recording one event, in nanoseconds: the mean gap between back-to-back
/// events recorded on this thread (the median of 9 runs of 20 000), which is what every gap
/// between two real events also contains besides the work in between.
pub fn measure_overhead() -> f64 {
    static PROBE: LockClass = LockClass::new("overhead probe", Scope::Machine);
    let was_recording = BUF.with(|b| b.0.borrow().is_some());
    let saved = if was_recording { stop() } else { Vec::new() };
    let mut runs: Vec<f64> = (0..9)
        .map(|_| {
            start(20_001);
            for i in 0..20_000usize {
                atomic(&PROBE, std::hint::black_box(i));
            }
            let ev = stop();
            let span = ev.last().map_or(0, |e| e.t) - ev.first().map_or(0, |e| e.t);
            span as f64 / ticks_per_ns() / (ev.len().max(2) - 1) as f64
        })
        .collect();
    runs.sort_by(f64::total_cmp);
    if was_recording {
        start(saved.capacity());
        BUF.with(|b| {
            if let Some(v) = b.0.borrow_mut().as_mut() {
                v.extend(saved);
            }
        });
    }
    runs[runs.len() / 2]
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    static A: LockClass = LockClass::new("a", Scope::Node);

    /// Resident anonymous memory of this process, in bytes (`RssAnon` of /proc/self/status).
    fn rss_anon() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("RssAnon:")).unwrap();
        let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        kb * 1024
    }

    #[test]
    fn start_makes_the_whole_buffer_resident_before_recording() {
        let events = (64 << 20) / std::mem::size_of::<Event>();
        let before = rss_anon();
        start(events);
        let after = rss_anon();
        let v = stop();
        assert!(v.is_empty() && v.capacity() >= events);
        // Other tests of this process may allocate meanwhile, but none frees 48 MiB of
        // resident memory; without the write-through the 64 MiB are address space only.
        assert!(
            after >= before + (48 << 20),
            "resident anonymous memory grew by {} KiB for a 64 MiB buffer",
            after.saturating_sub(before) >> 10
        );
    }

    #[test]
    fn records_only_this_thread_between_start_and_stop() {
        atomic(&A, 1);
        start(16);
        assert!(active());
        atomic(&A, 2);
        std::thread::scope(|s| {
            s.spawn(|| {
                // Another thread's hooks see the active flag but have no buffer.
                atomic(&A, 99);
                assert!(stop().is_empty());
            });
        });
        let w = write_span();
        w.end(4096);
        ops(3);
        let ev = stop();
        assert_eq!(ev.len(), 3, "{ev:?}");
        assert_eq!(ev[0].instance, 2);
        assert!(matches!(ev[1].kind, Kind::Write { bytes: 4096, end } if end >= ev[1].t));
        assert_eq!(ev[2].kind, Kind::Ops(3));
        assert!(ev.windows(2).all(|w| w[0].t <= w[1].t));
        assert!(stop().is_empty());
    }

    /// The tests that start or end write timing, one at a time ([`TIMING`] is global).
    static TIMING_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// Hold timing: each moment counts in the innermost recorded hold open, per class and
    /// inside unmaps or not; unrecorded classes are not timed; every hold ended is counted;
    /// a thread that exits while timing gives its count back. The durations are checked
    /// against the test's own clock (a hold holds at least the spin inside it), not against
    /// fixed numbers.
    #[test]
    fn holds_are_timed_innermost_per_class_and_place() {
        use crate::SpinLock;
        static OUTER: LockClass = LockClass::new("outer", Scope::Node);
        static INNER: LockClass = LockClass::new("inner", Scope::Machine);
        static OWN: LockClass = LockClass::new("own", Scope::Cpu);
        let _one = TIMING_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let spin = |ns: u64| {
            let t = Instant::now();
            while t.elapsed().as_nanos() < u128::from(ns) {
                std::hint::spin_loop();
            }
        };
        let outer = SpinLock::new_queued(()).with_class(&OUTER);
        let inner = SpinLock::new_queued(()).with_class(&INNER);
        let own = SpinLock::new_queued(()).with_class(&OWN);
        let before = HOOKS.load(Relaxed) / HOLD_ONE;
        time_holds(Some(f64::MAX));
        let t0 = Instant::now();
        {
            let _o = outer.lock();
            spin(200_000);
            {
                let _i = inner.lock();
                let _p = own.lock();
                spin(300_000);
            }
            spin(200_000);
        }
        unmap(true);
        {
            let _i = inner.lock();
            spin(100_000);
        }
        unmap(false);
        let elapsed = t0.elapsed().as_nanos() as f64;
        let t = time_holds(None);
        assert_eq!(HOOKS.load(Relaxed) / HOLD_ONE, before);
        let get = |c: &str, u: bool| t.iter().find(|h| h.class == c && h.in_unmap == u);
        assert!(
            get("own", false).is_none(),
            "per-CPU classes are not timed: {t:?}"
        );
        let (o, i, iu) = (
            get("outer", false).unwrap(),
            get("inner", false).unwrap(),
            get("inner", true).unwrap(),
        );
        assert_eq!((o.holds, i.holds, iu.holds), (1, 1, 1));
        assert!(i.ns >= 300_000.0 && iu.ns >= 100_000.0, "{t:?}");
        assert!(o.ns >= 400_000.0, "{t:?}");
        // The inner hold's time is not the outer's too.
        assert!(o.ns + i.ns + iu.ns <= elapsed, "{t:?} in {elapsed}");
        // A thread that exits while timing gives its count back.
        std::thread::spawn(|| {
            time_holds(Some(1e6));
            assert!(holds_timed());
        })
        .join()
        .unwrap();
        assert_eq!(HOOKS.load(Relaxed) / HOLD_ONE, before);
    }

    #[test]
    fn a_thread_that_exits_while_timing_gives_its_count_back() {
        let _one = TIMING_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let before = TIMING.load(Relaxed);
        std::thread::spawn(|| {
            time_writes(Some(1e6));
            assert!(TIMING.load(Relaxed) > 0);
        })
        .join()
        .unwrap();
        assert_eq!(TIMING.load(Relaxed), before);
        // A panic inside the timed stretch as well.
        let r = std::thread::spawn(|| {
            time_writes(Some(1e6));
            panic!("the workload failed");
        })
        .join();
        assert!(r.is_err());
        assert_eq!(TIMING.load(Relaxed), before);
    }

    #[test]
    fn writes_are_timed_without_recording_and_stalls_counted_apart() {
        let _one = TIMING_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        // Nothing timed, nothing recorded: a span costs nothing and adds nothing.
        write_span().end(4096);
        assert_eq!(time_writes(Some(1e12)), WriteTime::default());
        let spin = |ns: u128| {
            let t = Instant::now();
            while t.elapsed().as_nanos() < ns {
                std::hint::spin_loop();
            }
        };
        for _ in 0..3 {
            let w = write_span();
            spin(200_000);
            w.end(4096);
        }
        let t = time_writes(None);
        assert_eq!((t.bytes, t.stalled_bytes, t.spans), (3 * 4096, 0, 3));
        assert!(t.ns().unwrap() >= 550_000.0, "{t:?}");
        assert!(stop().is_empty(), "timing records no event");
        // A span past the stall bound is counted apart and costed at the others' rate.
        time_writes(Some(1_000_000.0));
        for ns in [100_000, 100_000, 3_000_000] {
            let w = write_span();
            spin(ns);
            w.end(4096);
        }
        let t = time_writes(None);
        assert_eq!((t.bytes, t.stalled_bytes, t.spans), (2 * 4096, 4096, 3));
        let (all, inside) = write_timing_cost();
        assert!(
            all > 0.0 && inside >= 0.0 && inside <= all && all < 1000.0,
            "{all} {inside}"
        );
        assert!(t.ns().unwrap() < 1_000_000.0, "{t:?}");
        // Every write stalled: no rate to cost them at, which is not zero.
        time_writes(Some(1_000.0));
        let w = write_span();
        spin(200_000);
        w.end(4096);
        let t = time_writes(None);
        assert_eq!((t.bytes, t.stalled_bytes), (0, 4096));
        assert_eq!(t.ns(), None);
        // Ended: spans are neither timed nor recorded.
        write_span().end(4096);
        assert_eq!(time_writes(None), WriteTime::default());
    }

    /// A fence is recorded only while a store to a shared line waits before it: not at the
    /// start, not after a line write the CPU waited for, not twice in a row, not after an
    /// atomic, a lock operation or a TLB flush drained the stores, not after a store to a
    /// private line, and a new recording starts with none.
    #[test]
    fn a_fence_is_recorded_only_after_a_store_since_the_last_drain() {
        start(32);
        fence();
        line_write(&A, 1);
        fence();
        line_store(&A, 1, Sym::Entry);
        fence();
        fence();
        line_store(&A, 1, Sym::Here);
        atomic(&A, 2);
        fence();
        line_store(&A, 1, Sym::Here);
        release(&A, 3, LockModel::Queued, Access::Exclusive);
        fence();
        line_store(&A, 1, Sym::Here);
        acquire(&A, 3, LockModel::Queued, Access::Exclusive, false);
        fence();
        line_store(&A, 1, Sym::Here);
        downgrade(&A, 4, LockModel::RwSem);
        fence();
        line_store(&A, 1, Sym::Here);
        tlb_flush(&A, 5);
        fence();
        // A store to a line no other CPU meets is not recorded, and leaves nothing pending.
        static PRIVATE: LockClass = LockClass::new("p", Scope::Private);
        line_store(&PRIVATE, 6, Sym::Here);
        fence();
        let kinds: Vec<_> = stop().iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds.iter().filter(|k| **k == Kind::Fence).count(),
            1,
            "{kinds:?}"
        );
        assert_eq!(kinds[2], Kind::Fence, "{kinds:?}");
        // The store pending when the last recording stopped does not carry over.
        start(4);
        fence();
        assert!(stop().is_empty());
    }

    #[test]
    fn line_events_carry_access_reference_and_model_and_skip_unshared_classes() {
        static PRIVATE: LockClass = LockClass::new("p", Scope::Cpu);
        line_read(&PRIVATE, 5);
        start(16);
        line_read(&A, 1);
        line_write(&A, 2);
        line_sym_write(&A, 3, Sym::First);
        line(&A, 4, LockModel::RwSem, false, Sym::Here);
        line_write(&PRIVATE, 6);
        let ev = stop();
        let got: Vec<_> = ev.iter().map(|e| (e.kind, e.instance, e.model)).collect();
        assert_eq!(
            got,
            vec![
                (
                    Kind::Line {
                        write: false,
                        sym: Sym::Here
                    },
                    1,
                    LockModel::Line
                ),
                (
                    Kind::Line {
                        write: true,
                        sym: Sym::Here
                    },
                    2,
                    LockModel::Line
                ),
                (
                    Kind::Line {
                        write: true,
                        sym: Sym::First
                    },
                    3,
                    LockModel::Line
                ),
                (
                    Kind::Line {
                        write: false,
                        sym: Sym::Here
                    },
                    4,
                    LockModel::RwSem
                ),
            ]
        );
    }

    #[test]
    fn a_thread_that_exits_while_recording_gives_its_count_back() {
        for _ in 0..100 {
            std::thread::spawn(|| start(4)).join().unwrap();
        }
        // Other tests of this binary may be recording at the same moment, a few at most.
        assert!(
            HOOKS.load(Relaxed) % HOLD_ONE < 10,
            "{}",
            HOOKS.load(Relaxed)
        );
    }

    /// The capture's switch fails the trylocks of one class on this thread, and only while
    /// it records; each forced failure is recorded; other classes and other threads are
    /// untouched.
    #[test]
    fn forced_trylock_failure_is_recorded_and_confined() {
        static F: LockClass = LockClass::new("forced", Scope::Node);
        static G: LockClass = LockClass::new("other", Scope::Node);
        static S: LockClass = LockClass::sleeping("forced rwsem", Scope::Mm);
        let (f, g) = (
            crate::SpinLock::new_queued(()).with_class(&F),
            crate::SpinLock::new_queued(()).with_class(&G),
        );
        let sem = crate::RwSem::new(()).with_class(&S);
        force_trylock_failure(Some(&F));
        // Not recording: no effect.
        assert!(f.try_lock().is_some());
        start(64);
        assert!(f.try_lock().is_none());
        assert!(g.try_lock().is_some());
        std::thread::scope(|s| {
            s.spawn(|| assert!(f.try_lock().is_some()));
        });
        force_trylock_failure(Some(&S));
        assert!(sem.try_read().is_none() && sem.try_write().is_none());
        assert!(f.try_lock().is_some());
        force_trylock_failure(None);
        assert!(sem.try_read().is_some());
        let ev = stop();
        let fails: Vec<_> = ev
            .iter()
            .filter(|e| matches!(e.kind, Kind::TrylockFail { .. }))
            .map(|e| (e.class.name, e.kind))
            .collect();
        assert_eq!(
            fails,
            [
                (
                    "forced",
                    Kind::TrylockFail {
                        access: Access::Exclusive
                    }
                ),
                (
                    "forced rwsem",
                    Kind::TrylockFail {
                        access: Access::Shared
                    }
                ),
                (
                    "forced rwsem",
                    Kind::TrylockFail {
                        access: Access::Exclusive
                    }
                ),
            ]
        );
    }

    /// A per-CPU class marked for its trylock is recorded; a plain one is not.
    #[test]
    fn a_recorded_trylock_class_is_recorded_whatever_its_scope() {
        static P: LockClass = LockClass::with_recorded_trylock("pcp-like", Scope::Cpu);
        static Q: LockClass = LockClass::new("cpu", Scope::Cpu);
        start(16);
        drop(crate::SpinLock::new_queued(()).with_class(&P).try_lock());
        drop(crate::SpinLock::new_queued(()).with_class(&Q).try_lock());
        let ev = stop();
        assert_eq!(ev.len(), 2, "{ev:?}");
        assert!(ev.iter().all(|e| e.class.name == "pcp-like"));
    }

    #[test]
    fn overhead_is_positive_and_small() {
        let o = measure_overhead();
        assert!(o > 0.0 && o < 10_000.0, "{o} ns per event");
        assert!(ticks_per_ns() > 0.0);
    }
}
