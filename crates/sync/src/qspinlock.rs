//! Queued (MCS) spinlock, modelled on the kernel's qspinlock.
//!
//! Models kernel/locking/qspinlock.c and kernel/locking/mcs_spinlock.h, the
//! `spinlock_t` implementation on x86 and arm64 since Linux 4.2:
//!
//! * **Fast path**: an uncontended lock is taken with one compare-and-swap, from unlocked to
//!   locked when nobody was queued as it looked, and released with a plain store
//!   (`queued_spin_unlock` is `smp_store_release(&lock->locked, 0)`: no locked instruction).
//! * **Queue**: a contended waiter takes an MCS node from a small per-thread pool, links
//!   itself behind the current queue tail (whose address it swaps into the tail word)
//!   and spins on *its own node* until its predecessor hands it the queue head. Only the
//!   queue head spins on the lock word. A release therefore disturbs one waiter's cache
//!   line, not all of them, and handoff cost does not grow with the number of waiters
//!   (contrast [`crate::TicketLock`]).
//! * **Node pool**: the kernel keeps `MAX_NODES` (4) `qnodes` per CPU, indexed by
//!   nesting depth (task, softirq, hardirq, NMI), because a slow path can be interrupted
//!   by another one on the same CPU. pagelab keeps [`MAX_NODES`] `CachePadded` nodes per
//!   *thread* in a thread-local. A node is used only while its thread waits and is free
//!   again as soon as the lock is acquired, so guards may be held nested and dropped in
//!   any order; without interrupts a thread's slow paths never nest, but the depth
//!   index keeps the pool correct if they ever did (e.g. a lock taken from a
//!   thread-local destructor), and if the pool is exhausted or the thread-local is gone
//!   the waiter falls back to spinning on the lock word with try-lock, as the kernel
//!   does when `idx >= MAX_NODES`.
//!
//! # Lock word
//!
//! The kernel packs `locked` (byte 0), `pending` (bit 8) and a tail `(cpu, idx)` into
//! 32 bits, and unlocks by storing to the `locked` byte alone while waiters may be
//! exchanging the tail half-word. Rust's memory model does not allow atomics of different
//! sizes on one location, so pagelab's lock is two adjacent words on one cache line: `locked`
//! and `tail` (the tail node's *address*; pagelab has no CPU numbers to name a per-CPU
//! node). The release is then a plain store to `locked`, as the kernel's, and enqueueing
//! exchanges `tail` (the kernel's `xchg_tail`). The price of two words is a short window the
//! kernel does not have: the fast path reads `tail` before its compare-and-swap of `locked`,
//! so an arrival can take a just-released lock ahead of a waiter that queued in between,
//! and the queue head therefore takes the lock with a compare-and-swap where the kernel's
//! stores (`set_locked`). Mutual exclusion never depends on the window. The kernel's
//! `pending` bit, an optimisation that lets the first contender wait without touching an
//! MCS node, is not modelled: every contender queues.
//!
//! # Oversubscription
//!
//! All waits use [`Backoff`], so a waiter whose predecessor or the holder is
//! descheduled yields its core instead of spinning out its timeslice.

use core::cell::Cell;
use core::fmt;
use core::mem::ManuallyDrop;
use core::ops::{Deref, DerefMut};
use core::ptr;

use crossbeam_utils::CachePadded;

use crate::backoff::Backoff;
use crate::shim::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use crate::shim::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicUsize};
use crate::shim::cell::{MutPtr, UnsafeCell};
use crate::stats::{self, Side, Slot, WaitTimer};
use crate::trace::UNCLASSIFIED_QUEUED;

/// Per-thread MCS nodes, one per slow-path nesting level (the kernel's `MAX_NODES`).
pub const MAX_NODES: usize = 4;

const LOCKED: u32 = 1;

/// An MCS queue node.
struct QNode {
    /// Set by the predecessor when this node becomes the queue head.
    head: AtomicBool,
    /// The successor, set by it once it has linked itself behind this node.
    next: AtomicPtr<QNode>,
}

/// A thread's node pool (the kernel's per-CPU `qnodes[MAX_NODES]`).
struct QNodePool {
    depth: Cell<usize>,
    nodes: [CachePadded<QNode>; MAX_NODES],
}

impl QNodePool {
    fn new() -> Self {
        Self {
            depth: Cell::new(0),
            nodes: core::array::from_fn(|_| {
                CachePadded::new(QNode {
                    head: AtomicBool::new(false),
                    next: AtomicPtr::new(ptr::null_mut()),
                })
            }),
        }
    }
}

#[cfg(loom)]
loom::thread_local! {
    static QNODES: QNodePool = QNodePool::new();
}
#[cfg(not(loom))]
std::thread_local! {
    static QNODES: QNodePool = QNodePool::new();
}

/// The lock's words, and nothing else: statistics live in per-thread blocks ([`stats`]), so
/// counting never writes this line. Aligned to its size so that both words are always on one
/// cache line, as the kernel's one word is.
#[repr(C, align(16))]
struct Header {
    /// `LOCKED` while held.
    locked: AtomicU32,
    /// The last queued waiter's node (its address), 0 when nobody is queued.
    tail: AtomicUsize,
}

/// A queued (MCS) spinlock protecting a `T`; the kernel's default `spinlock_t`.
///
/// ```
/// # use pagelab_sync::QueuedSpinLock;
/// let lock = QueuedSpinLock::new(0u64);
/// *lock.lock() += 1;
/// assert_eq!(lock.into_inner(), 1);
/// ```
pub struct QueuedSpinLock<T> {
    hdr: Header,
    data: UnsafeCell<T>,
}

// SAFETY: the lock owns its `T`; moving the lock to another thread moves the `T`.
unsafe impl<T: Send> Send for QueuedSpinLock<T> {}
// SAFETY: the `T` is only reachable through mutually exclusive guards, so sharing the
// lock hands the `T` from thread to thread: that requires `T: Send`, not `T: Sync`.
unsafe impl<T: Send> Sync for QueuedSpinLock<T> {}

impl<T> QueuedSpinLock<T> {
    /// An unlocked lock protecting `data`.
    pub fn new(data: T) -> Self {
        Self {
            hdr: Header {
                locked: AtomicU32::new(0),
                tail: AtomicUsize::new(0),
            },
            data: UnsafeCell::new(data),
        }
    }

    /// Acquires the lock: one CAS if it is free and unqueued, else queue and wait.
    #[inline]
    pub fn lock(&self) -> QueuedSpinGuard<'_, T> {
        self.lock_as(Slot::of(&UNCLASSIFIED_QUEUED))
    }

    /// [`QueuedSpinLock::lock`], counted in the class whose slot is `slot`.
    #[inline]
    pub(crate) fn lock_as(&self, slot: Slot) -> QueuedSpinGuard<'_, T> {
        if self.try_acquire() {
            stats::record_at(slot, Side::Exclusive);
        } else {
            self.lock_slow(slot);
        }
        QueuedSpinGuard::new(self)
    }

    /// Takes the lock only if it is free and nobody was queued when it looked (an arrival
    /// that read an empty queue can still take a lock a waiter queued for meanwhile).
    #[inline]
    pub fn try_lock(&self) -> Option<QueuedSpinGuard<'_, T>> {
        self.try_lock_as(Slot::of(&UNCLASSIFIED_QUEUED))
    }

    /// [`QueuedSpinLock::try_lock`], counted in the class whose slot is `slot`.
    #[inline]
    pub(crate) fn try_lock_as(&self, slot: Slot) -> Option<QueuedSpinGuard<'_, T>> {
        if self.try_acquire() {
            stats::record_at(slot, Side::Exclusive);
            Some(QueuedSpinGuard::new(self))
        } else {
            None
        }
    }

    /// Whether the lock is held (a snapshot; false during a handoff to the queue head).
    #[inline]
    pub fn is_locked(&self) -> bool {
        self.hdr.locked.load(Relaxed) != 0
    }

    /// Whether threads are queued for the lock (`spin_is_contended`; a snapshot, which also
    /// counts a queue head that has just taken the lock and not yet emptied the queue).
    #[inline]
    pub fn is_contended(&self) -> bool {
        self.hdr.tail.load(Relaxed) != 0
    }

    /// Mutable access without locking: `&mut self` proves exclusivity.
    pub fn get_mut(&mut self) -> &mut T {
        self.data.get_exclusive()
    }

    /// Consumes the lock and returns the data.
    pub fn into_inner(self) -> T {
        self.data.into_inner()
    }

    /// Takes the lock if it is free and nobody was queued: a read of `tail`, then one
    /// compare-and-swap of `locked` (the kernel's fast path is one compare-and-swap of its
    /// whole word). No read of `locked` before the exchange: the exchange reads the latest
    /// value, where a plain read may return an older one (a trylock retried in a loop could
    /// then keep seeing a lock that was released long ago, as loom's models do).
    #[inline]
    fn try_acquire(&self) -> bool {
        self.hdr.tail.load(Relaxed) == 0 && self.set_locked()
    }

    /// Takes the lock if it is free, queue or not (the queue head's way in, polled: a read,
    /// and the exchange only once the lock looks free, so the head's polling keeps the line
    /// shared while the holder runs).
    #[inline]
    fn try_set_locked(&self) -> bool {
        self.hdr.locked.load(Relaxed) == 0 && self.set_locked()
    }

    /// The compare-and-swap of `locked` from free to held; Acquire pairs with the previous
    /// holder's release store.
    #[inline]
    fn set_locked(&self) -> bool {
        self.hdr
            .locked
            .compare_exchange(0, LOCKED, Acquire, Relaxed)
            .is_ok()
    }

    /// `queued_spin_unlock`: a plain store that publishes the critical section.
    #[inline]
    fn unlock(&self) {
        self.hdr.locked.store(0, Release);
    }

    #[cold]
    #[inline(never)]
    fn lock_slow(&self, slot: Slot) {
        let timer = WaitTimer::start();
        let queued = QNODES
            .try_with(|pool| {
                let idx = pool.depth.get();
                if idx >= MAX_NODES {
                    return false;
                }
                pool.depth.set(idx + 1);
                self.queue_and_acquire(&pool.nodes[idx]);
                pool.depth.set(idx);
                true
            })
            .unwrap_or(false);
        if !queued {
            let mut backoff = Backoff::new();
            while !self.try_acquire() {
                backoff.snooze();
            }
        }
        stats::record_contended_at(slot, Side::Exclusive, timer);
    }

    /// The MCS slow path with `node` (free, owned by this thread).
    fn queue_and_acquire(&self, node: &QNode) {
        node.head.store(false, Relaxed);
        node.next.store(ptr::null_mut(), Relaxed);

        // The lock may have been released since the fast path failed.
        if self.try_acquire() {
            return;
        }

        let me = ptr::from_ref(node).expose_provenance();

        // Become the tail (`xchg_tail`). Release publishes our node's initialisation to the
        // successor; Acquire gives us our predecessor's.
        let prev = self.hdr.tail.swap(me, AcqRel);

        if prev != 0 {
            let prev: *const QNode = ptr::with_exposed_provenance(prev);
            // SAFETY: `prev` was the tail, so its thread is still in this slow path and
            // cannot leave before it has handed the queue head to its successor, which
            // is us and which it only learns through the store below: the node is alive.
            unsafe { &*prev }
                .next
                .store(ptr::from_ref(node).cast_mut(), Release);
            let mut backoff = Backoff::new();
            while !node.head.load(Acquire) {
                backoff.snooze();
            }
        }

        // Queue head: wait for the holder to release, and take the lock (an arrival that
        // read the tail before we queued may take it first: then wait again).
        let mut backoff = Backoff::new();
        while !self.try_set_locked() {
            backoff.snooze();
        }

        // If we are also the tail, empty the queue: done.
        if self
            .hdr
            .tail
            .compare_exchange(me, 0, Release, Relaxed)
            .is_ok()
        {
            return;
        }

        // Others are queued behind us: pass the queue head on once our successor has
        // finished linking itself.
        let mut backoff = Backoff::new();
        let next = loop {
            let next = node.next.load(Acquire);
            if !next.is_null() {
                break next;
            }
            backoff.snooze();
        };
        // SAFETY: the successor linked itself to us and spins until `head` is set, so its
        // node is alive; after this store we never touch it again.
        unsafe { &*next }.head.store(true, Release);
    }
}

impl<T: Default> Default for QueuedSpinLock<T> {
    fn default() -> Self {
        Self::new(T::default())
    }
}

impl<T> fmt::Debug for QueuedSpinLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueuedSpinLock")
            .field("locked", &self.is_locked())
            .field("contended", &self.is_contended())
            .finish_non_exhaustive()
    }
}

/// Holds a [`QueuedSpinLock`]; releases it on drop.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct QueuedSpinGuard<'a, T> {
    lock: &'a QueuedSpinLock<T>,
    /// Tracked exclusive access; ended in `drop` before the lock is released.
    data: ManuallyDrop<MutPtr<T>>,
}

impl<'a, T> QueuedSpinGuard<'a, T> {
    #[inline]
    fn new(lock: &'a QueuedSpinLock<T>) -> Self {
        Self {
            lock,
            data: ManuallyDrop::new(lock.data.get_mut()),
        }
    }
}

impl<T> Deref for QueuedSpinGuard<'_, T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: the guard holds the lock, so no other access to the data exists.
        unsafe { MutPtr::deref(&self.data) }
    }
}

impl<T> DerefMut for QueuedSpinGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard holds the lock, so no other access to the data exists.
        unsafe { MutPtr::deref(&self.data) }
    }
}

impl<T> Drop for QueuedSpinGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: `data` is never used again; ending the access before the release
        // keeps it inside the critical section.
        unsafe { ManuallyDrop::drop(&mut self.data) };
        self.lock.unlock();
    }
}

impl<T: fmt::Debug> fmt::Debug for QueuedSpinGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// The lock is its two words, on one line: no counter shares the line the lock path
    /// writes.
    #[test]
    fn lock_holds_no_instrumentation() {
        assert_eq!(core::mem::size_of::<Header>(), 16);
        assert_eq!(core::mem::align_of::<Header>(), 16);
        assert_eq!(core::mem::size_of::<QueuedSpinLock<()>>(), 16);
    }

    #[test]
    fn guard_drop_unlocks() {
        let lock = QueuedSpinLock::new(1);
        {
            let mut g = lock.lock();
            assert!(lock.is_locked());
            *g += 1;
        }
        assert!(!lock.is_locked());
        assert_eq!(*lock.lock(), 2);
    }

    #[test]
    fn try_lock_fails_while_held() {
        let lock = QueuedSpinLock::new(());
        let g = lock.try_lock().expect("free lock");
        assert!(lock.try_lock().is_none());
        drop(g);
        assert!(lock.try_lock().is_some());
    }

    #[test]
    fn get_mut_and_into_inner() {
        let mut lock = QueuedSpinLock::new(vec![1]);
        lock.get_mut().push(2);
        assert_eq!(lock.into_inner(), vec![1, 2]);
    }

    /// Several waiters queue behind a held lock; all get through the queue and both
    /// words are empty afterwards (the tail cleared by the last one).
    #[test]
    fn queued_waiters_are_handed_the_lock() {
        let lock = QueuedSpinLock::new(0u32);
        let g = lock.lock();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| *lock.lock() += 1);
            }
            while !lock.is_contended() {
                std::thread::yield_now();
            }
            drop(g);
        });
        assert_eq!(lock.hdr.locked.load(Relaxed), 0);
        assert_eq!(lock.hdr.tail.load(Relaxed), 0);
        assert_eq!(lock.into_inner(), 4);
    }

    /// With the node pool exhausted the slow path falls back to try-lock spinning.
    #[test]
    fn exhausted_node_pool_falls_back_to_spinning() {
        let lock = QueuedSpinLock::new(0u32);
        let started = std::sync::atomic::AtomicBool::new(false);
        let g = lock.lock();
        std::thread::scope(|s| {
            let t = s.spawn(|| {
                QNODES.with(|pool| pool.depth.set(MAX_NODES));
                started.store(true, Relaxed);
                *lock.lock() += 1;
                QNODES.with(|pool| assert_eq!(pool.depth.get(), MAX_NODES));
            });
            while !started.load(Relaxed) {
                std::thread::yield_now();
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
            // The fallback never queues.
            assert!(!lock.is_contended());
            drop(g);
            t.join().unwrap();
        });
        assert_eq!(*lock.lock(), 1);
    }

    /// Guards of four nested locks dropped in every order leave all locks free.
    #[test]
    fn nested_guards_dropped_in_any_order() {
        let locks: [QueuedSpinLock<u32>; 4] = Default::default();
        let orders = [[0, 1, 2, 3], [3, 2, 1, 0], [1, 3, 0, 2], [2, 0, 3, 1]];
        for order in orders {
            let mut guards: Vec<Option<QueuedSpinGuard<'_, u32>>> =
                locks.iter().map(|l| Some(l.lock())).collect();
            for i in order {
                **guards[i].as_mut().unwrap() += 1;
                guards[i] = None;
                assert!(!locks[i].is_locked());
            }
        }
        assert!(locks.iter().all(|l| *l.lock() == 4));
    }
}
