//! FIFO ticket spinlock, as x86 `arch_spinlock_t` was before Linux 4.2.
//!
//! Models the ticket spinlocks of arch/x86/include/asm/spinlock.h (Linux 2.6.25 –
//! 4.1), which qspinlocks (kernel/locking/qspinlock.c) replaced. The lock holds two
//! tickets: `next` and `owner`. `lock` draws a ticket with one `fetch_add` on `next` and
//! waits until `owner` reaches it; `unlock` advances `owner`. Waiters are served strictly in
//! arrival order.
//!
//! pagelab keeps it because its cost profile is the instructive one: every waiter spins
//! on the same word, so each release invalidates that cache line in every waiting core
//! and the handoff cost grows with the number of waiters (the reason for qspinlock).
//! Its strict FIFO order also makes it the worst case when threads outnumber cores: if
//! the next ticket holder is descheduled, nobody behind it can proceed (waiters yield
//! via [`Backoff`], which bounds but does not remove this).
//!
//! Only the holder modifies `owner`, so unlock is a plain store of the next ticket, with no
//! locked instruction: x86's `__ticket_spin_unlock` incremented the `owner` half-word without
//! a `lock` prefix. The kernel kept both tickets in one 32-bit word and drew a ticket with one
//! `xadd` that returned both; Rust's memory model does not allow the half-word store beside
//! word-sized atomics on the same location, so here they are two words on one cache line,
//! and a draw reads `owner` after its `fetch_add` (a hit on the line it just took). Tickets
//! are 32-bit and wrap; only equality and differences of tickets are used.

use core::fmt;
use core::mem::ManuallyDrop;
use core::ops::{Deref, DerefMut};

use crate::backoff::Backoff;
use crate::shim::atomic::AtomicU32;
use crate::shim::atomic::Ordering::{Acquire, Relaxed, Release};
use crate::shim::cell::{MutPtr, UnsafeCell};
use crate::stats::{self, Side, Slot, WaitTimer};
use crate::trace::UNCLASSIFIED_TICKET;

/// The lock's words, and nothing else: statistics live in per-thread blocks ([`stats`]), so
/// counting never writes this line. Aligned to its size so that both words are always on one
/// cache line, as the kernel's one word is.
#[repr(C, align(8))]
struct Header {
    /// The ticket being served; written only by its holder.
    owner: AtomicU32,
    /// The next ticket to draw.
    next: AtomicU32,
}

/// A FIFO ticket spinlock protecting a `T`.
///
/// ```
/// # use pagelab_sync::TicketLock;
/// let lock = TicketLock::new(0u64);
/// *lock.lock() += 1;
/// assert_eq!(lock.into_inner(), 1);
/// ```
pub struct TicketLock<T> {
    hdr: Header,
    data: UnsafeCell<T>,
}

// SAFETY: the lock owns its `T`; moving the lock to another thread moves the `T`.
unsafe impl<T: Send> Send for TicketLock<T> {}
// SAFETY: `&TicketLock<T>` only gives access to the `T` through a guard, and guards are
// mutually exclusive, so sharing the lock hands the `T` from thread to thread: that
// requires `T: Send` but not `T: Sync`.
unsafe impl<T: Send> Sync for TicketLock<T> {}

impl<T> TicketLock<T> {
    /// An unlocked lock protecting `data`.
    pub fn new(data: T) -> Self {
        Self {
            hdr: Header {
                owner: AtomicU32::new(0),
                next: AtomicU32::new(0),
            },
            data: UnsafeCell::new(data),
        }
    }

    /// Takes a ticket and spins (then yields) until it is served.
    #[inline]
    pub fn lock(&self) -> TicketGuard<'_, T> {
        self.lock_as(Slot::of(&UNCLASSIFIED_TICKET))
    }

    /// [`TicketLock::lock`], counted in the class whose slot is `slot`.
    #[inline]
    pub(crate) fn lock_as(&self, slot: Slot) -> TicketGuard<'_, T> {
        let ticket = self.hdr.next.fetch_add(1, Relaxed);
        // Acquire: the previous holder's critical section happens before ours.
        if self.hdr.owner.load(Acquire) == ticket {
            stats::record_at(slot, Side::Exclusive);
        } else {
            self.wait_for_turn(ticket, slot);
        }
        TicketGuard::new(self, ticket)
    }

    #[cold]
    #[inline(never)]
    fn wait_for_turn(&self, ticket: u32, slot: Slot) {
        let timer = WaitTimer::start();
        let mut backoff = Backoff::new();
        while self.hdr.owner.load(Acquire) != ticket {
            backoff.snooze();
        }
        stats::record_contended_at(slot, Side::Exclusive, timer);
    }

    /// Takes the lock only if it is free and nobody is waiting.
    #[inline]
    pub fn try_lock(&self) -> Option<TicketGuard<'_, T>> {
        self.try_lock_as(Slot::of(&UNCLASSIFIED_TICKET))
    }

    /// [`TicketLock::try_lock`], counted in the class whose slot is `slot`.
    #[inline]
    pub(crate) fn try_lock_as(&self, slot: Slot) -> Option<TicketGuard<'_, T>> {
        // `next` first, then `owner`: `owner` never passes `next`, so if it equals the
        // `next` read before it, every ticket drawn was served and the lock was free; it
        // stays free until someone draws that ticket, which the exchange would see. Acquire:
        // the previous holder's release of `owner`. (The other order, `owner` then `next`, is
        // as sound, but loom's models then never reached a trylock that succeeds right after
        // another thread's hold, the schedule `batch_drain_races_remote_drain_all` in
        // crates/mm/tests/loom_lru.rs looks for, and a model that retries a trylock exceeded
        // loom's branch limit.)
        let ticket = self.hdr.next.load(Relaxed);
        if self.hdr.owner.load(Acquire) != ticket {
            return None;
        }
        self.hdr
            .next
            .compare_exchange(ticket, ticket.wrapping_add(1), Relaxed, Relaxed)
            .ok()?;
        stats::record_at(slot, Side::Exclusive);
        Some(TicketGuard::new(self, ticket))
    }

    /// Whether the lock is held (a snapshot).
    #[inline]
    pub fn is_locked(&self) -> bool {
        self.drawn_past_owner() > 0
    }

    /// Whether someone is waiting for the lock (`spin_is_contended`; a snapshot).
    #[inline]
    pub fn is_contended(&self) -> bool {
        self.drawn_past_owner() > 1
    }

    /// Tickets drawn and not yet served, `next - owner`, compared as signed (wrap-around, and
    /// a negative difference, read as none). The kernel read both tickets from one word, an
    /// exact snapshot; here they are two reads, `next` first: on x86, where loads are not
    /// reordered with each other, `owner` can only have moved on since `next` was read, so the
    /// difference can miss a ticket drawn between the reads but never counts one that was not
    /// drawn. (The language's memory model promises less: loom can let either read return an
    /// older value.) The engine asks these only in assertions made by the holder itself, and
    /// in tests after a `join`, where both reads are exact.
    #[inline]
    fn drawn_past_owner(&self) -> i32 {
        let next = self.hdr.next.load(Relaxed);
        (next.wrapping_sub(self.hdr.owner.load(Acquire)) as i32).max(0)
    }

    /// Mutable access without locking: `&mut self` proves exclusivity.
    pub fn get_mut(&mut self) -> &mut T {
        self.data.get_exclusive()
    }

    /// Consumes the lock and returns the data.
    pub fn into_inner(self) -> T {
        self.data.into_inner()
    }

    /// Serves the next ticket. `ticket` is the holder's, i.e. the current `owner`.
    #[inline]
    fn unlock(&self, ticket: u32) {
        self.hdr.owner.store(ticket.wrapping_add(1), Release);
    }
}

impl<T: Default> Default for TicketLock<T> {
    fn default() -> Self {
        Self::new(T::default())
    }
}

impl<T> fmt::Debug for TicketLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (owner, next) = (self.hdr.owner.load(Relaxed), self.hdr.next.load(Relaxed));
        f.debug_struct("TicketLock")
            .field("next", &next)
            .field("owner", &owner)
            .finish_non_exhaustive()
    }
}

/// Holds a [`TicketLock`]; releases it on drop.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct TicketGuard<'a, T> {
    lock: &'a TicketLock<T>,
    /// Tracked exclusive access; ended in `drop` before the lock is released.
    data: ManuallyDrop<MutPtr<T>>,
    ticket: u32,
}

impl<'a, T> TicketGuard<'a, T> {
    #[inline]
    fn new(lock: &'a TicketLock<T>, ticket: u32) -> Self {
        Self {
            lock,
            data: ManuallyDrop::new(lock.data.get_mut()),
            ticket,
        }
    }
}

impl<T> Deref for TicketGuard<'_, T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: the guard holds the lock, so no other access to the data exists.
        unsafe { MutPtr::deref(&self.data) }
    }
}

impl<T> DerefMut for TicketGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard holds the lock, so no other access to the data exists.
        unsafe { MutPtr::deref(&self.data) }
    }
}

impl<T> Drop for TicketGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: `data` is never used again; ending the access before the release
        // keeps it inside the critical section.
        unsafe { ManuallyDrop::drop(&mut self.data) };
        self.lock.unlock(self.ticket);
    }
}

impl<T: fmt::Debug> fmt::Debug for TicketGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// The lock is its two words, on one line: no counter shares the line the lock path
    /// writes.
    #[test]
    fn lock_holds_no_instrumentation() {
        assert_eq!(core::mem::size_of::<Header>(), 8);
        assert_eq!(core::mem::align_of::<Header>(), 8);
        assert_eq!(core::mem::size_of::<TicketLock<()>>(), 8);
    }

    #[test]
    fn guard_drop_unlocks() {
        let lock = TicketLock::new(1);
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
        let lock = TicketLock::new(());
        let g = lock.try_lock().expect("free lock");
        assert!(lock.try_lock().is_none());
        drop(g);
        assert!(lock.try_lock().is_some());
    }

    #[test]
    fn get_mut_and_into_inner() {
        let mut lock = TicketLock::new(vec![1]);
        lock.get_mut().push(2);
        assert_eq!(lock.into_inner(), vec![1, 2]);
    }

    /// Tickets wrap: a lock whose tickets pass `u32::MAX` is served as before.
    #[test]
    fn tickets_wrap() {
        let lock = TicketLock::new(0u32);
        lock.hdr.owner.store(u32::MAX - 2, Relaxed);
        lock.hdr.next.store(u32::MAX - 2, Relaxed);
        for _ in 0..5 {
            let g = lock.lock();
            assert!(lock.is_locked());
            assert!(!lock.is_contended());
            assert!(lock.try_lock().is_none());
            drop(g);
            assert!(!lock.is_locked());
        }
        assert_eq!(lock.hdr.owner.load(Relaxed), 2);
        assert_eq!(lock.hdr.next.load(Relaxed), 2);
        assert_eq!(*lock.lock(), 0);
    }

    #[test]
    fn waiters_are_served_in_ticket_order() {
        let lock = TicketLock::new(Vec::new());
        let order = Mutex::new(Vec::new());
        let g = lock.lock();
        std::thread::scope(|s| {
            for id in 1..=3u16 {
                let (lock, order) = (&lock, &order);
                s.spawn(move || lock.lock().push(id));
                // Wait until this thread has drawn its ticket before starting the next.
                while lock.hdr.next.load(Relaxed) != u32::from(id) + 1 {
                    std::thread::yield_now();
                }
                order.lock().unwrap().push(id);
            }
            assert!(lock.is_contended());
            drop(g);
        });
        assert_eq!(lock.into_inner(), *order.lock().unwrap());
    }
}
