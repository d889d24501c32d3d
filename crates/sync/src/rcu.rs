//! Read-copy-update: lookups without locks, frees after a grace period.
//!
//! Models the part of RCU the mm relies on (`rcu_read_lock`, `rcu_dereference`,
//! `rcu_assign_pointer`, `call_rcu`): the VMA tree is looked up by faults without mmap_lock
//! (`lock_vma_under_rcu`, 6.4+) and a writer that replaces it frees the old version only once
//! no reader can still be looking at it.
//!
//! The engine uses epoch-based reclamation with one reader slot per reader (each task owns
//! one, like a CPU in the kernel's per-CPU RCU state):
//! - a reader entering a read section copies the global epoch into its slot, then issues a
//!   full fence, so that its slot is visible before any pointer it loads;
//! - a writer swaps the pointer, issues a full fence, advances the global epoch and retires the
//!   old value tagged with the epoch it saw; a retired value is freed when every slot is either
//!   quiescent (0) or newer than its tag.
//!
//! Why this is enough: a reader whose slot the writer saw as quiescent stored its slot after
//! the writer's fence, so (the store-buffer argument with two SeqCst fences) it loads the new
//! pointer; a reader whose slot is newer than the tag read the advanced epoch with acquire
//! ordering, so it too loads the new pointer. Only readers with an older slot may hold the old
//! value, and they block its free. Writers never wait for readers (`call_rcu`, not
//! `synchronize_rcu`), unless they ask to with [`RcuDomain::synchronize`].
//!
//! Soundness rests on the types: a [`RcuReader`] owns its slot (it is `Send` but not `Sync`,
//! so two threads can never share one), a reference loaded from an [`RcuCell`] lives no longer
//! than the [`RcuGuard`] it was loaded under, and a cell only accepts guards of its own domain.

use std::cell::Cell;
use std::ptr;

use crossbeam_utils::CachePadded;

use crate::backoff::Backoff;
use crate::shim::Arc;
use crate::shim::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering, fence};
use crate::spinlock::{LockKind, SpinLock};

/// A reader slot: 0 when quiescent, else the epoch at which the reader entered.
struct Slot {
    epoch: AtomicU64,
    claimed: AtomicBool,
}

struct Retired {
    tag: u64,
    _value: Box<dyn Send>,
}

/// One RCU domain: a global epoch, reader slots and the values waiting for a grace period.
pub struct RcuDomain {
    epoch: CachePadded<AtomicU64>,
    slots: Box<[CachePadded<Slot>]>,
    retired: SpinLock<Vec<Retired>>,
}

/// Why a reader could not be registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoReaderSlot(pub usize);

impl std::fmt::Display for NoReaderSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "all {} RCU reader slots are in use", self.0)
    }
}

impl std::error::Error for NoReaderSlot {}

impl RcuDomain {
    /// A domain with room for `max_readers` registered readers.
    pub fn new(max_readers: usize) -> Arc<RcuDomain> {
        Arc::new(RcuDomain {
            epoch: CachePadded::new(AtomicU64::new(1)),
            slots: (0..max_readers.max(1))
                .map(|_| {
                    CachePadded::new(Slot {
                        epoch: AtomicU64::new(0),
                        claimed: AtomicBool::new(false),
                    })
                })
                .collect(),
            retired: SpinLock::new(LockKind::Queued, Vec::new()),
        })
    }

    /// Claim a reader slot for the calling task.
    pub fn register(domain: &Arc<RcuDomain>) -> Result<RcuReader, NoReaderSlot> {
        for (i, s) in domain.slots.iter().enumerate() {
            if s.claimed
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return Ok(RcuReader {
                    domain: domain.clone(),
                    slot: i,
                    nesting: Cell::new(0),
                });
            }
        }
        Err(NoReaderSlot(domain.slots.len()))
    }

    /// Oldest epoch any reader is in, or `u64::MAX` if all are quiescent.
    fn oldest_reader(&self) -> u64 {
        fence(Ordering::SeqCst);
        self.slots
            .iter()
            .map(|s| s.epoch.load(Ordering::SeqCst))
            .filter(|&e| e != 0)
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Retire a value replaced at epoch `tag`, then free whatever is past its grace period.
    fn retire(&self, tag: u64, value: Box<dyn Send>) {
        self.retired.lock().push(Retired { tag, _value: value });
        self.reclaim();
    }

    /// `call_rcu`: drop `value` once every reader now in a read section has left it. The
    /// caller must already have unlinked whatever `value` owns from every place a new reader
    /// could find it (the fence below orders those stores before the epoch advance, as in
    /// [`RcuCell::publish`]).
    pub fn call_rcu(&self, value: Box<dyn Send>) {
        fence(Ordering::SeqCst);
        let tag = self.epoch.fetch_add(1, Ordering::SeqCst);
        self.retire(tag, value);
    }

    /// Free the retired values no reader can see any more. Returns how many are still waiting.
    pub fn reclaim(&self) -> usize {
        let oldest = self.oldest_reader();
        // Drop outside the lock: a value's destructor may be arbitrary.
        let freed: Vec<Retired> = {
            let mut r = self.retired.lock();
            let (done, keep): (Vec<_>, Vec<_>) = r.drain(..).partition(|x| x.tag < oldest);
            *r = keep;
            done
        };
        drop(freed);
        self.retired.lock().len()
    }

    /// `synchronize_rcu`: wait until everything retired so far has been freed.
    pub fn synchronize(&self) {
        let mut b = Backoff::new();
        while self.reclaim() > 0 {
            b.snooze();
        }
    }

    /// Values waiting for a grace period.
    pub fn pending(&self) -> usize {
        self.retired.lock().len()
    }
}

/// A registered reader: the right to enter read sections. One per task.
pub struct RcuReader {
    domain: Arc<RcuDomain>,
    slot: usize,
    nesting: Cell<u32>,
}

impl RcuReader {
    /// `rcu_read_lock`. Nesting is allowed.
    #[inline]
    pub fn lock(&self) -> RcuGuard<'_> {
        let n = self.nesting.get();
        if n == 0 {
            let slot = &self.domain.slots[self.slot].epoch;
            let e = self.domain.epoch.load(Ordering::Acquire);
            slot.store(e, Ordering::Relaxed);
            fence(Ordering::SeqCst);
        }
        self.nesting.set(n + 1);
        RcuGuard { reader: self }
    }

    /// The domain this reader belongs to.
    pub fn domain(&self) -> &Arc<RcuDomain> {
        &self.domain
    }
}

impl Drop for RcuReader {
    fn drop(&mut self) {
        let s = &self.domain.slots[self.slot];
        s.epoch.store(0, Ordering::Release);
        s.claimed.store(false, Ordering::Release);
    }
}

/// An open read section.
pub struct RcuGuard<'r> {
    reader: &'r RcuReader,
}

impl Drop for RcuGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        let n = self.reader.nesting.get() - 1;
        self.reader.nesting.set(n);
        if n == 0 {
            self.reader.domain.slots[self.reader.slot]
                .epoch
                .store(0, Ordering::Release);
        }
    }
}

/// An RCU-protected value (`__rcu` pointer).
pub struct RcuCell<T: Send + 'static> {
    ptr: AtomicPtr<T>,
    domain: Arc<RcuDomain>,
}

// SAFETY: the cell hands out `&T` to any thread holding a guard and drops `T` on whichever
// thread frees it, so it needs `T: Send + Sync` to be shared, like `Arc<T>`.
unsafe impl<T: Send + Sync + 'static> Sync for RcuCell<T> {}
// SAFETY: as above: the value may be dropped on another thread.
unsafe impl<T: Send + Sync + 'static> Send for RcuCell<T> {}

impl<T: Send + 'static> RcuCell<T> {
    /// A cell in `domain` holding `value`.
    pub fn new(domain: &Arc<RcuDomain>, value: T) -> Self {
        RcuCell {
            ptr: AtomicPtr::new(Box::into_raw(Box::new(value))),
            domain: domain.clone(),
        }
    }

    /// `rcu_dereference`: the current value, valid for the read section.
    #[inline]
    pub fn load<'a>(&'a self, guard: &'a RcuGuard<'_>) -> &'a T {
        assert!(
            ptr::eq(&*guard.reader.domain, &*self.domain),
            "RCU guard of another domain"
        );
        let p = self.ptr.load(Ordering::Acquire);
        // SAFETY: `p` came from `Box::into_raw` and is freed only after a grace period that
        // starts when it is replaced. The guard's slot was published (with a SeqCst fence)
        // before this load, so a value this load can return is not freed before the guard
        // drops (module docs), and the returned lifetime is bounded by the guard's and the
        // cell's borrows.
        unsafe { &*p }
    }

    /// `rcu_assign_pointer` + `call_rcu`: publish `value`; the old one is freed after a grace
    /// period. Writers must be serialised by the caller (mmap_lock held for write).
    pub fn publish(&self, value: T) {
        let new = Box::into_raw(Box::new(value));
        let old = self.ptr.swap(new, Ordering::AcqRel);
        fence(Ordering::SeqCst);
        let tag = self.domain.epoch.fetch_add(1, Ordering::SeqCst);
        // SAFETY: `old` came from `Box::into_raw` and was just unlinked; ownership passes to
        // the retire list, which drops it after the grace period.
        let old = unsafe { Box::from_raw(old) };
        self.domain.retire(tag, old);
    }

    /// The value, through exclusive access (no reader can exist).
    pub fn get_mut(&mut self) -> &mut T {
        // SAFETY: `&mut self` proves no guard-bound reference into this cell is alive.
        unsafe { &mut *self.ptr.load(Ordering::Relaxed) }
    }
}

impl<T: Send + 'static> Drop for RcuCell<T> {
    fn drop(&mut self) {
        let p = self.ptr.load(Ordering::Relaxed);
        // SAFETY: `&mut self` proves no reference loaded from this cell is alive (loads borrow
        // the cell); the current value is owned by the cell.
        drop(unsafe { Box::from_raw(p) });
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

    struct Counted<'a>(u32, &'a AtomicUsize);
    impl Drop for Counted<'_> {
        fn drop(&mut self) {
            self.1.fetch_add(1, SeqCst);
        }
    }

    #[test]
    fn reader_blocks_reclaim_until_it_leaves() {
        static DROPS: AtomicUsize = AtomicUsize::new(0);
        let d = RcuDomain::new(2);
        let cell = RcuCell::new(&d, Counted(1, &DROPS));
        let r = RcuDomain::register(&d).unwrap();
        {
            let g = r.lock();
            let v = cell.load(&g);
            assert_eq!(v.0, 1);
            cell.publish(Counted(2, &DROPS));
            assert_eq!(d.reclaim(), 1, "old value freed under a reader");
            assert_eq!(DROPS.load(SeqCst), 0);
            assert_eq!(v.0, 1);
            let g2 = r.lock(); // nested
            assert_eq!(cell.load(&g2).0, 2);
        }
        assert_eq!(d.reclaim(), 0);
        assert_eq!(DROPS.load(SeqCst), 1);
        drop(cell);
        assert_eq!(DROPS.load(SeqCst), 2);
    }

    #[test]
    fn slots_are_exclusive_and_recycled() {
        let d = RcuDomain::new(1);
        let a = RcuDomain::register(&d).unwrap();
        assert_eq!(RcuDomain::register(&d).err(), Some(NoReaderSlot(1)));
        drop(a);
        assert!(RcuDomain::register(&d).is_ok());
    }

    #[test]
    #[should_panic(expected = "another domain")]
    fn guard_of_another_domain_is_refused() {
        let d1 = RcuDomain::new(1);
        let d2 = RcuDomain::new(1);
        let cell = RcuCell::new(&d1, 5u32);
        let r = RcuDomain::register(&d2).unwrap();
        let g = r.lock();
        let _ = cell.load(&g);
    }

    #[test]
    fn concurrent_readers_never_see_freed_values() {
        // Each value carries a live flag cleared by its destructor; readers check it while in
        // their read section. 4 readers + 1 writer on 2 cores.
        struct Val {
            n: u64,
            live: std::sync::Arc<std::sync::atomic::AtomicBool>,
        }
        impl Drop for Val {
            fn drop(&mut self) {
                self.live.store(false, SeqCst);
            }
        }
        let d = RcuDomain::new(8);
        let mk = |n| Val {
            n,
            live: std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true)),
        };
        let cell = RcuCell::new(&d, mk(0));
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    let r = RcuDomain::register(&d).unwrap();
                    let mut last = 0;
                    while !stop.load(SeqCst) {
                        let g = r.lock();
                        let v = cell.load(&g);
                        let live = v.live.clone();
                        assert!(v.n >= last, "went back in time");
                        last = v.n;
                        std::hint::spin_loop();
                        assert!(live.load(SeqCst), "value {} freed under a reader", v.n);
                    }
                });
            }
            for n in 1..20_000 {
                cell.publish(mk(n));
            }
            stop.store(true, SeqCst);
        });
        d.synchronize();
        assert_eq!(d.pending(), 0);
    }
}
