//! `spinlock_t` with a run-time choice of implementation.
//!
//! In the kernel `spinlock_t` is a queued spinlock on x86 and arm64 (include/linux/
//! spinlock_types.h over asm-generic/qspinlock.h) and was a ticket lock on x86 before
//! 4.2. pagelab's engine wants to compare both for the same lock sites (zone->lock,
//! pcp->lock, lru_lock, page-table locks), so [`SpinLock`] picks the algorithm when it
//! is constructed ([`LockKind`], usually from the experiment's policy) and dispatches
//! with one `match` per operation. [`SpinLock::new_queued`] is the kernel default.

use core::fmt;
use core::ops::{Deref, DerefMut};
use core::str::FromStr;

use crate::qspinlock::{QueuedSpinGuard, QueuedSpinLock};
use crate::stats::{self, LockStatsSnapshot, Slot};
use crate::ticket::{TicketGuard, TicketLock};
use crate::trace::{self, Access, LockClass, LockModel};

/// Which spinlock algorithm a [`SpinLock`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum LockKind {
    /// FIFO ticket lock ([`TicketLock`]), x86 before Linux 4.2.
    Ticket,
    /// Queued MCS lock ([`QueuedSpinLock`]), the current kernel default.
    #[default]
    Queued,
}

impl LockKind {
    /// All kinds, for sweeping experiments.
    pub const ALL: [LockKind; 2] = [LockKind::Ticket, LockKind::Queued];

    /// The name accepted by [`FromStr`] and printed by [`fmt::Display`].
    pub const fn as_str(self) -> &'static str {
        match self {
            LockKind::Ticket => "ticket",
            LockKind::Queued => "queued",
        }
    }
}

impl fmt::Display for LockKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Error for a string that names no [`LockKind`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseLockKindError(String);

impl fmt::Display for ParseLockKindError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown spinlock kind {:?} (expected \"ticket\" or \"queued\")",
            self.0
        )
    }
}

impl std::error::Error for ParseLockKindError {}

impl FromStr for LockKind {
    type Err = ParseLockKindError;

    /// Accepts `ticket` or `queued` (ASCII case-insensitive, surrounding spaces ignored).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("ticket") {
            Ok(LockKind::Ticket)
        } else if t.eq_ignore_ascii_case("queued") {
            Ok(LockKind::Queued)
        } else {
            Err(ParseLockKindError(s.to_owned()))
        }
    }
}

enum Inner<T> {
    Ticket(TicketLock<T>),
    Queued(QueuedSpinLock<T>),
}

/// A spinlock protecting a `T` whose algorithm is chosen at construction.
///
/// ```
/// # use pagelab_sync::{LockKind, SpinLock};
/// let lock = SpinLock::new("ticket".parse::<LockKind>().unwrap(), 0u64);
/// *lock.lock() += 1;
/// assert_eq!(lock.kind(), LockKind::Ticket);
/// assert_eq!(lock.into_inner(), 1);
/// ```
pub struct SpinLock<T> {
    inner: Inner<T>,
    /// What this lock protects and how far it is shared (for [`trace`]).
    class: &'static LockClass,
    /// The class's place in the per-thread statistics blocks, looked up when the class is
    /// set, so that counting an acquisition does not read the class ([`stats::Slot`]).
    slot: Slot,
}

impl<T> SpinLock<T> {
    /// An unlocked lock of the given kind protecting `data`.
    pub fn new(kind: LockKind, data: T) -> Self {
        let inner = match kind {
            LockKind::Ticket => Inner::Ticket(TicketLock::new(data)),
            LockKind::Queued => Inner::Queued(QueuedSpinLock::new(data)),
        };
        Self {
            inner,
            class: &trace::UNCLASSIFIED,
            slot: Slot::of(&trace::UNCLASSIFIED),
        }
    }

    /// Gives the lock its class (lockdep's `lockdep_set_class`): what traces call it and
    /// how far its instances are shared.
    pub fn with_class(mut self, class: &'static LockClass) -> Self {
        self.class = class;
        self.slot = Slot::of(class);
        self
    }

    /// This lock's class.
    pub fn class(&self) -> &'static LockClass {
        self.class
    }

    fn model(&self) -> LockModel {
        match self.inner {
            Inner::Ticket(_) => LockModel::Ticket,
            Inner::Queued(_) => LockModel::Queued,
        }
    }

    #[inline]
    fn guard<'a>(&'a self, inner: GuardInner<'a, T>, trylock: bool) -> SpinGuard<'a, T> {
        if trace::hooked() {
            if trace::active() {
                let id = self as *const Self as usize;
                trace::acquire(self.class, id, self.model(), Access::Exclusive, trylock);
            }
            if trace::holds_timed() {
                trace::hold_begin(self.class);
            }
        }
        SpinGuard { inner, lock: self }
    }

    /// A queued spinlock, the kernel's default `spinlock_t`.
    pub fn new_queued(data: T) -> Self {
        Self::new(LockKind::Queued, data)
    }

    /// A ticket spinlock.
    pub fn new_ticket(data: T) -> Self {
        Self::new(LockKind::Ticket, data)
    }

    /// The algorithm this lock uses.
    pub fn kind(&self) -> LockKind {
        match self.inner {
            Inner::Ticket(_) => LockKind::Ticket,
            Inner::Queued(_) => LockKind::Queued,
        }
    }

    /// Acquires the lock, spinning (then yielding) while it is held.
    #[inline]
    pub fn lock(&self) -> SpinGuard<'_, T> {
        let inner = match &self.inner {
            Inner::Ticket(l) => GuardInner::Ticket(l.lock_as(self.slot)),
            Inner::Queued(l) => GuardInner::Queued(l.lock_as(self.slot)),
        };
        self.guard(inner, false)
    }

    /// Acquires the lock only if that needs no waiting.
    #[inline]
    pub fn try_lock(&self) -> Option<SpinGuard<'_, T>> {
        // The capture's switch: made to fail to record the caller's fallback path.
        let id = self as *const Self as usize;
        if trace::trylock_forced_to_fail(self.class, id, self.model(), Access::Exclusive) {
            return None;
        }
        let inner = match &self.inner {
            Inner::Ticket(l) => GuardInner::Ticket(l.try_lock_as(self.slot)?),
            Inner::Queued(l) => GuardInner::Queued(l.try_lock_as(self.slot)?),
        };
        Some(self.guard(inner, true))
    }

    /// Whether the lock is held (a snapshot).
    #[inline]
    pub fn is_locked(&self) -> bool {
        match &self.inner {
            Inner::Ticket(l) => l.is_locked(),
            Inner::Queued(l) => l.is_locked(),
        }
    }

    /// Whether someone is waiting for the lock (`spin_is_contended`; a snapshot).
    #[inline]
    pub fn is_contended(&self) -> bool {
        match &self.inner {
            Inner::Ticket(l) => l.is_contended(),
            Inner::Queued(l) => l.is_contended(),
        }
    }

    /// Mutable access without locking: `&mut self` proves exclusivity.
    pub fn get_mut(&mut self) -> &mut T {
        match &mut self.inner {
            Inner::Ticket(l) => l.get_mut(),
            Inner::Queued(l) => l.get_mut(),
        }
    }

    /// Consumes the lock and returns the data.
    pub fn into_inner(self) -> T {
        match self.inner {
            Inner::Ticket(l) => l.into_inner(),
            Inner::Queued(l) => l.into_inner(),
        }
    }

    /// The counters of this lock's *class*, over all its instances, in the calling thread's
    /// stats domain ([`stats::current_domain`]). A lock holds no counters of its own (they
    /// would share its word's cache line); unclassified locks all count under
    /// [`trace::UNCLASSIFIED`]. Prefer [`stats::Domain::class`] with the domain at hand.
    pub fn stats(&self) -> LockStatsSnapshot {
        stats::current_domain().class(self.class).exclusive
    }

    /// Zeroes this lock's class's counters in the calling thread's stats domain.
    pub fn reset_stats(&self) {
        stats::current_domain().reset_class(self.class);
    }
}

impl<T: Default> Default for SpinLock<T> {
    /// A queued spinlock around `T::default()`.
    fn default() -> Self {
        Self::new_queued(T::default())
    }
}

impl<T> fmt::Debug for SpinLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpinLock")
            .field("kind", &self.kind())
            .field("locked", &self.is_locked())
            .finish_non_exhaustive()
    }
}

enum GuardInner<'a, T> {
    Ticket(TicketGuard<'a, T>),
    Queued(QueuedSpinGuard<'a, T>),
}

/// Holds a [`SpinLock`]; releases it on drop.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct SpinGuard<'a, T> {
    inner: GuardInner<'a, T>,
    lock: &'a SpinLock<T>,
}

impl<T> Drop for SpinGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // Runs before `inner` releases the lock, so the release is stamped inside the hold.
        if !trace::hooked() {
            return;
        }
        if trace::holds_timed() {
            trace::hold_end(self.lock.class);
        }
        if trace::active() {
            let l = self.lock;
            trace::release(
                l.class,
                l as *const SpinLock<T> as usize,
                l.model(),
                Access::Exclusive,
            );
        }
    }
}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        match &self.inner {
            GuardInner::Ticket(g) => g,
            GuardInner::Queued(g) => g,
        }
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        match &mut self.inner {
            GuardInner::Ticket(g) => g,
            GuardInner::Queued(g) => g,
        }
    }
}

impl<T: fmt::Debug> fmt::Debug for SpinGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn kind_parses_and_displays() {
        for kind in LockKind::ALL {
            assert_eq!(kind.to_string().parse::<LockKind>(), Ok(kind));
        }
        assert_eq!("ticket".parse(), Ok(LockKind::Ticket));
        assert_eq!(" Queued ".parse(), Ok(LockKind::Queued));
        let err = "mcs".parse::<LockKind>().unwrap_err();
        assert!(err.to_string().contains("\"mcs\""), "{err}");
        assert_eq!(LockKind::default(), LockKind::Queued);
    }

    #[test]
    fn both_kinds_lock_and_unlock() {
        for kind in LockKind::ALL {
            let mut lock = SpinLock::new(kind, 0u32);
            assert_eq!(lock.kind(), kind);
            {
                let mut g = lock.lock();
                *g += 1;
                assert!(lock.is_locked());
                assert!(lock.try_lock().is_none());
            }
            assert!(!lock.is_locked());
            *lock.try_lock().expect("free") += 1;
            *lock.get_mut() += 1;
            assert!(format!("{lock:?}").contains(&format!("{kind:?}")));
            assert_eq!(lock.into_inner(), 3);
        }
        assert_eq!(SpinLock::<u8>::default().kind(), LockKind::Queued);
        assert_eq!(SpinLock::new_ticket(()).kind(), LockKind::Ticket);
        assert_eq!(SpinLock::new_queued(()).kind(), LockKind::Queued);
    }

    #[test]
    fn contended_lock_is_handed_over() {
        for kind in LockKind::ALL {
            let lock = SpinLock::new(kind, 0u32);
            let g = lock.lock();
            std::thread::scope(|s| {
                s.spawn(|| *lock.lock() += 1);
                while !lock.is_contended() {
                    std::thread::yield_now();
                }
                drop(g);
            });
            assert_eq!(lock.into_inner(), 1);
        }
    }
}
