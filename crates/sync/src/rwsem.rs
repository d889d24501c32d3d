//! Reader-writer semaphore with one shared count word, modelled on `mmap_lock`.
//!
//! Models kernel/locking/rwsem.c as used for `mm->mmap_lock` (include/linux/
//! mmap_lock.h). The property pagelab studies is the kernel's: **all state lives in one
//! count word**, so every reader acquisition and every reader release is an atomic
//! read-modify-write of the same cache line. Readers never block each other logically,
//! yet with many threads faulting in one mm that line bounces between cores on every
//! `down_read`/`up_read`: the mmap_lock scalability problem that per-VMA locks were
//! introduced to avoid. This type deliberately keeps that cost: do not make it scale.
//!
//! # Count word
//!
//! ```text
//!  63            34 33            18 17             2   1       0
//! +----------------+----------------+----------------+-------+--------+
//! | active readers | waiting readers| waiting writers| ADMIT | WRITER |
//! +----------------+----------------+----------------+-------+--------+
//! ```
//!
//! The word sits in its own cache line (`CachePadded`) with nothing but the class pointer,
//! the traced lock model and the class's statistics slot, which are only read. Lock statistics are not kept here: a reader counting into this line
//! would pay a second atomic on the line every CPU writes, where the kernel pays one. They
//! are counted per class and per thread ([`crate::stats`]), readers and writers apart.
//!
//! # Protocol
//!
//! * **Reader fast path** (`down_read`): `fetch_add(READER)`; if no writer holds or
//!   waits, done, exactly as the kernel's `rwsem_read_trylock`. Otherwise the reader
//!   trades its reader bias for a waiting-reader slot in one CAS (kernel: the
//!   `adjustment = -RWSEM_READER_BIAS` in `rwsem_down_read_slowpath`), remembering
//!   the `ADMIT` bit, and waits with [`Backoff`] until that bit flips.
//! * **Writer preference**: while any writer waits, the reader fast path and
//!   [`RwSem::try_read`] fail, so new readers queue behind it and a stream of readers
//!   cannot starve a writer (the kernel gets this from its FIFO wait list and
//!   `RWSEM_FLAG_WAITERS`/`RWSEM_FLAG_HANDOFF`).
//! * **Writer**: the fast path CASes an idle word to `WRITER`. Otherwise the writer
//!   registers as waiting and spins until no writer holds and no reader is active,
//!   then converts its waiting slot into `WRITER` with one CAS. Writers do not queue in
//!   FIFO order among themselves.
//! * **Writer release** (`up_write`) and **downgrade** (`downgrade_write`) admit *all*
//!   readers that are waiting at that moment in the same CAS: their slots become
//!   active-reader counts and `ADMIT` flips, which releases them together, even when
//!   another writer is waiting too (as the kernel's `rwsem_mark_wake` wakes the
//!   readers queued at the head). That writer then waits for them, and readers arriving
//!   after the release queue behind it. Admitted readers hold read locks, so no writer
//!   can flip `ADMIT` again before every admitted reader has seen the flip: one bit is
//!   enough.
//!
//! Waiting is by spinning with [`Backoff`] (which yields when threads outnumber
//! cores), not by sleeping on a wait queue as the kernel does: pagelab measures the
//! count-word traffic, not the scheduler.

use core::fmt;
use core::mem::ManuallyDrop;
use core::ops::{Deref, DerefMut};

use crossbeam_utils::CachePadded;

use crate::backoff::Backoff;
use crate::shim::atomic::AtomicU64;
use crate::shim::atomic::Ordering::{Acquire, Relaxed, Release};
use crate::shim::cell::{ConstPtr, MutPtr, UnsafeCell};
use crate::stats::{self, Side, Slot, WaitTimer};
use crate::trace::{self, Access, LockClass, LockModel};

/// How a kernel era's rwsem made its waiters wait (kernel/locking/rwsem.c and its
/// predecessors rwsem-xadd.c and rwsem-spinlock.c). The engine's [`RwSem`] has one protocol
/// (writer preference, waiting by spinning with [`Backoff`]) whatever the era, since its
/// threads are not the kernel's tasks; the algorithm is what the projector's replay models
/// when it costs a waiter: whether it sleeps (a wake-up at hand-off, no CPU meanwhile) or spins
/// (CPU burnt, a line transfer at hand-off), whether a writer can take the lock from under a
/// woken waiter, and whether a starved waiter can force a hand-off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RwsemAlgo {
    /// Before 3.10: every waiter sleeps on the FIFO wait list and the releaser grants the lock
    /// to the waiter at its head (`__rwsem_do_wake` hands the lock over before the wake-up), so
    /// nobody can take it in between.
    SleepFifo,
    /// 3.10 to 3.15: waiters still sleep, but a woken writer has to take the lock itself, and a
    /// writer arriving meanwhile takes it first (write-lock stealing, Alex Shi's "rwsem: steal
    /// writing sem for better performance", and Michel Lespinasse's fast-path stealing merged
    /// for 3.10).
    SleepSteal,
    /// 3.16 to 5.2: as `SleepSteal`, and a writer that finds the lock held by a running writer
    /// spins on the owner instead of sleeping (optimistic spinning, 4fc828e24cd9
    /// "locking/rwsem: Support optimistic spinning", 3.16); spinners queue on the MCS `osq`
    /// and take the lock as soon as it is released, ahead of the sleepers.
    SpinWriters,
    /// 5.3 to 5.10: readers spin on a writer owner too (cf69482d62d9 "locking/rwsem: Enable
    /// readers spinning on writer"), and a waiter at the head of the wait list that has waited
    /// `RWSEM_WAIT_TIMEOUT` (4 ms) sets the hand-off bit: spinning and stealing stop and the
    /// lock goes to it (4f23dbc1e657 "locking/rwsem: Implement lock handoff to prevent lock
    /// starvation", 5.3).
    SpinAllHandoff,
    /// 5.11 and later: reader optimistic spinning removed again (617f3ef95177 "locking/rwsem:
    /// Remove reader optimistic spinning"); writers spin, readers sleep, hand-off as in 5.3.
    SpinWritersHandoff,
}

impl RwsemAlgo {
    /// Every algorithm, oldest first.
    pub const ALL: [RwsemAlgo; 5] = [
        RwsemAlgo::SleepFifo,
        RwsemAlgo::SleepSteal,
        RwsemAlgo::SpinWriters,
        RwsemAlgo::SpinAllHandoff,
        RwsemAlgo::SpinWritersHandoff,
    ];

    /// The name profiles and traces use.
    pub const fn as_str(self) -> &'static str {
        match self {
            RwsemAlgo::SleepFifo => "sleep-fifo",
            RwsemAlgo::SleepSteal => "sleep-steal",
            RwsemAlgo::SpinWriters => "spin-writers",
            RwsemAlgo::SpinAllHandoff => "spin-all-handoff",
            RwsemAlgo::SpinWritersHandoff => "spin-writers-handoff",
        }
    }

    /// The algorithm named `s` (exactly as [`RwsemAlgo::as_str`] spells it).
    pub fn from_name(s: &str) -> Option<RwsemAlgo> {
        RwsemAlgo::ALL.into_iter().find(|a| a.as_str() == s)
    }

    /// The allowed names, for error messages: `` `sleep-fifo`, `sleep-steal`, ... ``.
    pub fn names() -> String {
        RwsemAlgo::ALL
            .iter()
            .map(|a| format!("`{}`", a.as_str()))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Writers that find the lock held by a writer spin on it.
    pub const fn writers_spin(self) -> bool {
        matches!(
            self,
            RwsemAlgo::SpinWriters | RwsemAlgo::SpinAllHandoff | RwsemAlgo::SpinWritersHandoff
        )
    }

    /// Readers that find the lock held by a writer spin on it.
    pub const fn readers_spin(self) -> bool {
        matches!(self, RwsemAlgo::SpinAllHandoff)
    }

    /// A woken writer must take the lock itself; another writer may take it first.
    pub const fn steals(self) -> bool {
        !matches!(self, RwsemAlgo::SleepFifo)
    }

    /// A starved head waiter forces the lock to be handed to it.
    pub const fn hands_off(self) -> bool {
        matches!(
            self,
            RwsemAlgo::SpinAllHandoff | RwsemAlgo::SpinWritersHandoff
        )
    }
}

impl fmt::Display for RwsemAlgo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

const WRITER: u64 = 1;
const ADMIT: u64 = 1 << 1;
const WWAIT_SHIFT: u32 = 2;
const WWAIT_ONE: u64 = 1 << WWAIT_SHIFT;
const WWAIT_MASK: u64 = 0xffff << WWAIT_SHIFT;
const RWAIT_SHIFT: u32 = 18;
const RWAIT_ONE: u64 = 1 << RWAIT_SHIFT;
const RWAIT_MASK: u64 = 0xffff << RWAIT_SHIFT;
const READER_SHIFT: u32 = 34;
const READER_ONE: u64 = 1 << READER_SHIFT;
const READER_MASK: u64 = !0 << READER_SHIFT;
/// A reader may not enter while a writer holds or waits.
const READ_FAIL_MASK: u64 = WRITER | WWAIT_MASK;

struct Header {
    count: AtomicU64,
    /// What the semaphore protects and how far it is shared (for [`trace`]).
    class: &'static LockClass,
    /// The kernel lock it stands for in a trace: an rw_semaphore ([`LockModel::RwSem`]), or a
    /// spinning `rwlock_t` ([`LockModel::QRwLock`], see [`RwSem::as_rwlock`]). Only read.
    model: LockModel,
    /// The class's place in the per-thread statistics blocks, looked up when the class is set
    /// ([`stats::Slot`]): counting an acquisition reads this line, which the lock operation has
    /// just written, and not the class.
    slot: Slot,
}

/// A reader-writer semaphore protecting a `T`, with the kernel rwsem's single
/// shared count word and writer preference.
///
/// ```
/// # use pagelab_sync::{RwSem, RwSemWriteGuard};
/// let sem = RwSem::new(vec![1]);
/// assert_eq!(sem.read().len(), 1);
/// let mut w = sem.write();
/// w.push(2);
/// let r = RwSemWriteGuard::downgrade(w);
/// assert_eq!(*r, [1, 2]);
/// assert!(sem.try_write().is_none());
/// ```
pub struct RwSem<T> {
    hdr: CachePadded<Header>,
    data: UnsafeCell<T>,
}

// SAFETY: the semaphore owns its `T`; moving it to another thread moves the `T`.
unsafe impl<T: Send> Send for RwSem<T> {}
// SAFETY: writers get `&mut T` on any thread (needs `T: Send`), readers on several
// threads get `&T` at once (needs `T: Sync`); the protocol excludes all other overlaps.
unsafe impl<T: Send + Sync> Sync for RwSem<T> {}

impl<T> RwSem<T> {
    /// An unlocked semaphore protecting `data`.
    pub fn new(data: T) -> Self {
        Self {
            hdr: CachePadded::new(Header {
                count: AtomicU64::new(0),
                class: &trace::UNCLASSIFIED_RWSEM,
                model: LockModel::RwSem,
                slot: Slot::of(&trace::UNCLASSIFIED_RWSEM),
            }),
            data: UnsafeCell::new(data),
        }
    }

    /// Gives the semaphore its class (lockdep's `lockdep_set_class`).
    pub fn with_class(mut self, class: &'static LockClass) -> Self {
        self.hdr.class = class;
        self.hdr.slot = Slot::of(class);
        self
    }

    /// Records this lock as a kernel `rwlock_t` (a queued rwlock, kernel/locking/qrwlock.c)
    /// rather than an rw_semaphore: its waiters spin instead of sleeping, which is what the
    /// projector's replay must cost. The engine's protocol is the same either way (its
    /// waiters spin with [`Backoff`] whatever the kernel lock); only the trace differs.
    pub fn as_rwlock(mut self) -> Self {
        self.hdr.model = LockModel::QRwLock;
        self
    }

    /// This semaphore's class.
    pub fn class(&self) -> &'static LockClass {
        self.hdr.class
    }

    #[inline]
    fn trace_acquire(&self, access: Access, trylock: bool) {
        if trace::active() {
            let id = self as *const Self as usize;
            trace::acquire(self.hdr.class, id, self.hdr.model, access, trylock);
        }
    }

    #[inline]
    fn trace_downgrade(&self) {
        if trace::active() {
            let id = self as *const Self as usize;
            trace::downgrade(self.hdr.class, id, self.hdr.model);
        }
    }

    /// The capture's switch: a trylock made to fail to record the caller's fallback
    /// ([`trace::force_trylock_failure`]).
    #[inline]
    fn forced_to_fail(&self, access: Access) -> bool {
        let id = self as *const Self as usize;
        trace::trylock_forced_to_fail(self.hdr.class, id, self.hdr.model, access)
    }

    #[inline]
    fn trace_release(&self, access: Access) {
        if trace::active() {
            let id = self as *const Self as usize;
            trace::release(self.hdr.class, id, self.hdr.model, access);
        }
    }

    /// Acquires a read lock (`down_read`): one `fetch_add` on the count word when no
    /// writer holds or waits, else waits behind the writers.
    #[inline]
    pub fn read(&self) -> RwSemReadGuard<'_, T> {
        let old = self.hdr.count.fetch_add(READER_ONE, Acquire);
        if old & READ_FAIL_MASK == 0 {
            stats::record_at(self.hdr.slot, Side::Shared);
        } else {
            self.read_slow(old.wrapping_add(READER_ONE));
        }
        self.trace_acquire(Access::Shared, false);
        RwSemReadGuard::new(self)
    }

    /// `cur` is the count including the reader bias the fast path added.
    #[cold]
    #[inline(never)]
    fn read_slow(&self, mut cur: u64) {
        let timer = WaitTimer::start();
        let admit = loop {
            if cur & READ_FAIL_MASK == 0 {
                // The writers left before we gave up our bias: we are a reader. `cur`
                // came from an Acquire CAS failure, so their critical sections are
                // visible.
                stats::record_contended_at(self.hdr.slot, Side::Shared, timer);
                return;
            }
            debug_assert!(cur & RWAIT_MASK != RWAIT_MASK, "waiting-reader overflow");
            match self.hdr.count.compare_exchange_weak(
                cur,
                cur - READER_ONE + RWAIT_ONE,
                Relaxed,
                Acquire,
            ) {
                Ok(_) => break cur & ADMIT,
                Err(actual) => cur = actual,
            }
        };
        let mut backoff = Backoff::new();
        while self.hdr.count.load(Acquire) & ADMIT == admit {
            backoff.snooze();
        }
        stats::record_contended_at(self.hdr.slot, Side::Shared, timer);
    }

    /// Records a plain read of another field that shares this semaphore's count line (only
    /// while a recorder runs; no memory is touched). In the kernel an rwsem lives inside a
    /// larger object (`mm_struct`, `vm_area_struct`), and fields next to its count are read by
    /// code that never takes the lock: each such read must fetch the line back from the CPU
    /// that last took or released the lock. The event carries this semaphore's instance and
    /// model, so the replay's coherence model charges it on the lock's own line.
    #[inline]
    pub fn trace_line_read(&self) {
        self.trace_count_read();
    }

    /// Records a prefetch for writing of this semaphore's count line (only while a recorder
    /// runs; no memory is touched): `prefetchw` asks for the line exclusive, so it
    /// invalidates the other CPUs' copies as a store would, though nothing is written, and
    /// the CPU does not wait for it. The replay serves the CPU's accesses of the line issued
    /// while it travels (a trylock right after the fault entry) with its arrival; a later
    /// access (a per-VMA lock fault's `pgd` read) finds the line here only if no other CPU
    /// took it meanwhile.
    #[inline]
    pub fn trace_line_prefetch_write(&self) {
        trace::prefetch_write(self.hdr.class, self as *const Self as usize, self.hdr.model);
    }

    /// A read of the count's line: a field beside it, or the count itself before a
    /// compare-and-exchange.
    #[inline]
    fn trace_count_read(&self) {
        trace::line(
            self.hdr.class,
            self as *const Self as usize,
            self.hdr.model,
            false,
            trace::Sym::Here,
        );
    }

    /// Acquires a read lock only if no writer holds or waits (`down_read_trylock`).
    #[inline]
    pub fn try_read(&self) -> Option<RwSemReadGuard<'_, T>> {
        if self.forced_to_fail(Access::Shared) {
            return None;
        }
        // `down_read_trylock` reads the count before its compare-and-exchange (since 5.16,
        // 14c24048841f). The two are adjacent instructions, one request for the line on the
        // host measured (docs/model.md, "A read right before an exchange"): the replay folds
        // the read into the exchange. A trylock with a recorded fallback that fails made the
        // read alone, and is charged it (both are served by a prefetch for writing of the
        // line still on its way).
        self.trace_count_read();
        let mut cur = self.hdr.count.load(Relaxed);
        loop {
            if cur & READ_FAIL_MASK != 0 {
                return None;
            }
            match self
                .hdr
                .count
                .compare_exchange_weak(cur, cur + READER_ONE, Acquire, Relaxed)
            {
                Ok(_) => break,
                Err(actual) => cur = actual,
            }
        }
        stats::record_at(self.hdr.slot, Side::Shared);
        self.trace_acquire(Access::Shared, true);
        Some(RwSemReadGuard::new(self))
    }

    /// Acquires the write lock (`down_write`), waiting for readers and writers to leave.
    #[inline]
    pub fn write(&self) -> RwSemWriteGuard<'_, T> {
        if self.try_write_raw() {
            stats::record_at(self.hdr.slot, Side::Exclusive);
        } else {
            self.write_slow();
        }
        self.trace_acquire(Access::Exclusive, false);
        RwSemWriteGuard::new(self)
    }

    #[cold]
    #[inline(never)]
    fn write_slow(&self) {
        let timer = WaitTimer::start();
        // Announce ourselves: from now on new readers wait behind us.
        let mut cur = self
            .hdr
            .count
            .fetch_add(WWAIT_ONE, Relaxed)
            .wrapping_add(WWAIT_ONE);
        debug_assert!(cur & WWAIT_MASK != 0, "waiting-writer overflow");
        let mut backoff = Backoff::new();
        loop {
            if cur & (WRITER | READER_MASK) == 0 {
                match self.hdr.count.compare_exchange_weak(
                    cur,
                    cur - WWAIT_ONE + WRITER,
                    Acquire,
                    Relaxed,
                ) {
                    Ok(_) => break,
                    Err(actual) => {
                        cur = actual;
                        continue;
                    }
                }
            }
            backoff.snooze();
            cur = self.hdr.count.load(Relaxed);
        }
        stats::record_contended_at(self.hdr.slot, Side::Exclusive, timer);
    }

    /// Acquires the write lock only if the semaphore is idle (`down_write_trylock`).
    #[inline]
    pub fn try_write(&self) -> Option<RwSemWriteGuard<'_, T>> {
        if self.forced_to_fail(Access::Exclusive) {
            return None;
        }
        if self.try_write_raw() {
            stats::record_at(self.hdr.slot, Side::Exclusive);
            self.trace_acquire(Access::Exclusive, true);
            Some(RwSemWriteGuard::new(self))
        } else {
            None
        }
    }

    #[inline]
    fn try_write_raw(&self) -> bool {
        let cur = self.hdr.count.load(Relaxed);
        cur & !ADMIT == 0
            && self
                .hdr
                .count
                .compare_exchange(cur, cur | WRITER, Acquire, Relaxed)
                .is_ok()
    }

    /// Turns a write lock held by `guard` into a read lock (`downgrade_write`),
    /// admitting the waiting readers along with it.
    ///
    /// # Panics
    ///
    /// If `guard` belongs to another semaphore.
    pub fn downgrade<'a>(&'a self, guard: RwSemWriteGuard<'a, T>) -> RwSemReadGuard<'a, T> {
        assert!(
            core::ptr::eq(self, guard.sem),
            "downgrade of another semaphore's write guard"
        );
        RwSemWriteGuard::downgrade(guard)
    }

    /// Releases the write lock, adding `keep` to the active readers (`READER_ONE` for
    /// a downgrade, else 0) and admitting every waiting reader in the same CAS.
    #[inline]
    fn release_writer(&self, keep: u64) {
        let mut cur = self.hdr.count.load(Relaxed);
        loop {
            debug_assert!(cur & WRITER != 0);
            let waiting = cur & RWAIT_MASK;
            let mut new = cur - WRITER + keep;
            if waiting != 0 {
                new = (new - waiting + ((waiting >> RWAIT_SHIFT) << READER_SHIFT)) ^ ADMIT;
            }
            match self
                .hdr
                .count
                .compare_exchange_weak(cur, new, Release, Relaxed)
            {
                Ok(_) => return,
                Err(actual) => cur = actual,
            }
        }
    }

    #[inline]
    fn read_unlock(&self) {
        self.hdr.count.fetch_sub(READER_ONE, Release);
    }

    /// Whether a writer holds the semaphore (a snapshot).
    #[inline]
    pub fn is_write_locked(&self) -> bool {
        self.hdr.count.load(Relaxed) & WRITER != 0
    }

    /// Whether a writer holds or waits, or readers wait (a snapshot): what MGLRU's
    /// walker checks to skip a busy mm.
    #[inline]
    pub fn is_contended(&self) -> bool {
        self.hdr.count.load(Relaxed) & (WRITER | WWAIT_MASK | RWAIT_MASK) != 0
    }

    /// Active readers (a snapshot; may briefly include a reader on its way to waiting).
    #[inline]
    pub fn reader_count(&self) -> usize {
        (self.hdr.count.load(Relaxed) >> READER_SHIFT) as usize
    }

    /// Writers waiting for the semaphore (a snapshot).
    #[inline]
    pub fn waiting_writers(&self) -> usize {
        ((self.hdr.count.load(Relaxed) & WWAIT_MASK) >> WWAIT_SHIFT) as usize
    }

    /// Readers waiting behind writers (a snapshot).
    #[inline]
    pub fn waiting_readers(&self) -> usize {
        ((self.hdr.count.load(Relaxed) & RWAIT_MASK) >> RWAIT_SHIFT) as usize
    }

    /// Mutable access without locking: `&mut self` proves exclusivity.
    pub fn get_mut(&mut self) -> &mut T {
        self.data.get_exclusive()
    }

    /// Consumes the semaphore and returns the data.
    pub fn into_inner(self) -> T {
        self.data.into_inner()
    }
}

impl<T: Default> Default for RwSem<T> {
    fn default() -> Self {
        Self::new(T::default())
    }
}

impl<T> fmt::Debug for RwSem<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwSem")
            .field("write_locked", &self.is_write_locked())
            .field("readers", &self.reader_count())
            .field("waiting_writers", &self.waiting_writers())
            .field("waiting_readers", &self.waiting_readers())
            .finish_non_exhaustive()
    }
}

/// Holds a read lock on an [`RwSem`]; releases it on drop.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct RwSemReadGuard<'a, T> {
    sem: &'a RwSem<T>,
    /// Tracked shared access; ended in `drop` before the lock is released.
    data: ManuallyDrop<ConstPtr<T>>,
}

impl<'a, T> RwSemReadGuard<'a, T> {
    #[inline]
    fn new(sem: &'a RwSem<T>) -> Self {
        Self {
            sem,
            data: ManuallyDrop::new(sem.data.get()),
        }
    }
}

impl<T> Deref for RwSemReadGuard<'_, T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: a read lock is held, so no writer has access to the data.
        unsafe { ConstPtr::deref(&self.data) }
    }
}

impl<T> Drop for RwSemReadGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: `data` is never used again; the access ends inside the critical section.
        unsafe { ManuallyDrop::drop(&mut self.data) };
        self.sem.trace_release(Access::Shared);
        self.sem.read_unlock();
    }
}

impl<T: fmt::Debug> fmt::Debug for RwSemReadGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// Holds the write lock on an [`RwSem`]; releases it on drop.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct RwSemWriteGuard<'a, T> {
    sem: &'a RwSem<T>,
    /// Tracked exclusive access; ended in `drop`/`downgrade` before the release.
    data: ManuallyDrop<MutPtr<T>>,
}

impl<'a, T> RwSemWriteGuard<'a, T> {
    #[inline]
    fn new(sem: &'a RwSem<T>) -> Self {
        Self {
            sem,
            data: ManuallyDrop::new(sem.data.get_mut()),
        }
    }

    /// Turns the write lock into a read lock without letting a writer in between
    /// (`downgrade_write`); readers waiting at this moment are admitted too.
    pub fn downgrade(guard: Self) -> RwSemReadGuard<'a, T> {
        let mut guard = ManuallyDrop::new(guard);
        // SAFETY: the write access ends here and `data` is never used again; the
        // guard's own `Drop` does not run, so it is not dropped twice.
        unsafe { ManuallyDrop::drop(&mut guard.data) };
        let sem = guard.sem;
        // Still exclusive here, so starting the shared access early is fine.
        let reader = RwSemReadGuard::new(sem);
        sem.trace_downgrade();
        sem.release_writer(READER_ONE);
        reader
    }
}

impl<T> Deref for RwSemWriteGuard<'_, T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: the write lock is held, so no other access to the data exists.
        unsafe { MutPtr::deref(&self.data) }
    }
}

impl<T> DerefMut for RwSemWriteGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the write lock is held, so no other access to the data exists.
        unsafe { MutPtr::deref(&self.data) }
    }
}

impl<T> Drop for RwSemWriteGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: `data` is never used again; the access ends inside the critical section.
        unsafe { ManuallyDrop::drop(&mut self.data) };
        self.sem.trace_release(Access::Exclusive);
        self.sem.release_writer(0);
    }
}

impl<T: fmt::Debug> fmt::Debug for RwSemWriteGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Barrier;
    use std::thread;

    fn wait_until(cond: impl Fn() -> bool) {
        while !cond() {
            thread::yield_now();
        }
    }

    /// The count word's line holds the word, the (read-only) class pointer, traced lock
    /// model and statistics slot: no counter that a reader or writer would write besides the
    /// word.
    #[test]
    fn count_word_line_holds_no_instrumentation() {
        assert_eq!(
            core::mem::size_of::<Header>(),
            (core::mem::size_of::<AtomicU64>()
                + core::mem::size_of::<&LockClass>()
                + core::mem::size_of::<LockModel>()
                + core::mem::size_of::<Slot>())
            .next_multiple_of(core::mem::align_of::<Header>())
        );
        assert!(core::mem::align_of::<CachePadded<Header>>() >= 64);
    }

    #[test]
    fn guard_drop_unlocks() {
        let sem = RwSem::new(0);
        {
            let mut w = sem.write();
            *w += 1;
            assert!(sem.is_write_locked());
            assert!(sem.is_contended());
        }
        assert!(!sem.is_write_locked());
        {
            let r = sem.read();
            assert_eq!(*r, 1);
            assert_eq!(sem.reader_count(), 1);
            assert!(!sem.is_contended());
        }
        assert_eq!(sem.reader_count(), 0);
        assert!(sem.try_write().is_some());
    }

    #[test]
    fn readers_share_writers_exclude() {
        let sem = RwSem::new(());
        let r1 = sem.read();
        let r2 = sem.try_read().expect("readers share");
        assert_eq!(sem.reader_count(), 2);
        assert!(sem.try_write().is_none());
        drop((r1, r2));
        let w = sem.try_write().expect("idle");
        assert!(sem.try_read().is_none());
        assert!(sem.try_write().is_none());
        drop(w);
        assert!(sem.try_read().is_some());
    }

    /// A semaphore standing for an `rwlock_t` records every acquisition, release and
    /// lock-word read as a queued rwlock; a plain one as an rw_semaphore.
    #[test]
    fn as_rwlock_records_a_queued_rwlock() {
        static C: LockClass = LockClass::new("rwlock", trace::Scope::Node);
        let (q, s) = (
            RwSem::new(()).with_class(&C).as_rwlock(),
            RwSem::new(()).with_class(&C),
        );
        trace::start(16);
        drop(q.read());
        drop(q.write());
        drop(q.try_read());
        drop(s.read());
        let ev = trace::stop();
        let models: Vec<LockModel> = ev.iter().map(|e| e.model).collect();
        assert_eq!(
            models,
            [[LockModel::QRwLock; 7].as_slice(), &[LockModel::RwSem; 2]].concat(),
            "{ev:?}"
        );
    }

    #[test]
    fn get_mut_and_into_inner() {
        let mut sem = RwSem::new(vec![1]);
        sem.get_mut().push(2);
        assert_eq!(sem.into_inner(), vec![1, 2]);
    }

    /// Writer preference: with a reader holding and a writer waiting, new readers are
    /// refused (`try_read`) or wait (`read`), and the writer gets in before them.
    #[test]
    fn waiting_writer_blocks_new_readers() {
        let sem = RwSem::new(0);
        let r = sem.read();
        thread::scope(|s| {
            let writer = s.spawn(|| *sem.write() = 1);
            wait_until(|| sem.waiting_writers() == 1);
            assert!(sem.is_contended());
            assert!(sem.try_read().is_none());
            let late_reader = s.spawn(|| *sem.read());
            wait_until(|| sem.waiting_readers() == 1);
            assert!(sem.try_read().is_none());
            drop(r);
            writer.join().unwrap();
            assert_eq!(late_reader.join().unwrap(), 1, "reader overtook the writer");
        });
        assert!(!sem.is_contended());
    }

    /// Readers waiting behind a writer are admitted together when it releases, ahead
    /// of a second writer that was also waiting; that writer then waits for them.
    #[test]
    fn waiting_readers_enter_together_before_next_writer() {
        const READERS: usize = 3;
        let sem = RwSem::new(0);
        let inside = Barrier::new(READERS + 1);
        let checked = Barrier::new(READERS + 1);
        let w1 = sem.write();
        thread::scope(|s| {
            let readers: Vec<_> = (0..READERS)
                .map(|_| {
                    s.spawn(|| {
                        let r = sem.read();
                        // All readers (and the test) must meet while holding read
                        // locks: this only completes if they were admitted together.
                        inside.wait();
                        checked.wait();
                        *r
                    })
                })
                .collect();
            wait_until(|| sem.waiting_readers() == READERS);
            let w2 = s.spawn(|| *sem.write() = 2);
            wait_until(|| sem.waiting_writers() == 1);
            drop(w1);
            inside.wait();
            assert_eq!(sem.reader_count(), READERS);
            assert_eq!(sem.waiting_writers(), 1, "second writer got in");
            checked.wait();
            for r in readers {
                assert_eq!(r.join().unwrap(), 0);
            }
            w2.join().unwrap();
        });
        assert_eq!(*sem.read(), 2);
    }

    #[test]
    fn downgrade_keeps_writers_out_and_admits_readers() {
        let sem = RwSem::new(0);
        let mut w = sem.write();
        *w = 7;
        thread::scope(|s| {
            let reader = s.spawn(|| *sem.read());
            wait_until(|| sem.waiting_readers() == 1);
            let r = sem.downgrade(w);
            assert_eq!(*r, 7);
            assert!(!sem.is_write_locked());
            assert_eq!(reader.join().unwrap(), 7);
            assert!(sem.try_write().is_none());
            let writer = s.spawn(|| *sem.write() = 8);
            wait_until(|| sem.waiting_writers() == 1);
            assert_eq!(*r, 7);
            drop(r);
            writer.join().unwrap();
        });
        assert_eq!(*sem.read(), 8);
        assert_eq!(sem.reader_count(), 0);
    }

    #[test]
    #[should_panic(expected = "another semaphore")]
    fn downgrade_checks_the_semaphore() {
        let (a, b) = (RwSem::new(()), RwSem::new(()));
        let _ = b.downgrade(a.write());
    }
}
