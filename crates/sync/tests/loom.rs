#![cfg(loom)]
//! Loom models of every lock protocol in pagelab-sync.
//!
//! Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p pagelab-sync --release --test loom`.
//!
//! The locks are built on `pagelab_sync::shim`, so these models explore the real lock
//! code: every interleaving of its atomic operations (up to the preemption bound given
//! per model) and the weak-memory outcomes loom simulates. Protected data lives in
//! loom's `UnsafeCell` (behind the lock guards), so any two accesses to it that the
//! protocol fails to order by happens-before make loom panic, whether or not the values
//! happen to come out right.
//!
//! # Model shapes
//!
//! Waiting loops yield to the loom scheduler in every iteration ([`pagelab_sync::Backoff`]
//! does this under `--cfg loom`). Loom 0.7 does not schedule yielding threads fairly,
//! though: once the preemption bound is 2 or more, a model in which two threads poll
//! (even a plain flag) while a third, preempted thread must run for them to proceed
//! never finishes, because loom also explores the endless schedules in which the two
//! pollers only hand the CPU to each other ("Model exceeded maximum number of
//! branches"). The models are shaped to avoid that: while one thread waits, the other
//! participants are blocked in `join` or use `try_*` operations, which never wait. The
//! qspinlock models with three threads are the exception that loom still completes
//! (its waiters poll different words), at the bounds given. Models without a bound
//! are exhaustive.

use loom::model::Builder;
use loom::sync::Arc;
use loom::sync::atomic::{AtomicU64, Ordering::Relaxed};
use loom::thread;

use pagelab_sync::{
    PerCpuCounter, QueuedSpinLock, RwSem, RwSemWriteGuard, SeqCount, SpinLock, TicketLock,
};

/// Checks `f` under loom with at most `preemptions` preemptive context switches per
/// execution (`None`: exhaustive).
fn check(preemptions: Option<usize>, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = Builder::new();
    builder.preemption_bound = preemptions;
    builder.check(f);
}

/// Spins (yielding to the loom scheduler) until `cond` holds.
fn wait_until(cond: impl Fn() -> bool) {
    while !cond() {
        thread::yield_now();
    }
}

/// Ticket lock, 2 threads, exhaustive: both draw tickets in either order, the loser
/// spins on `owner` and is handed the lock by the winner's release; also covers the
/// uncontended case where one thread finishes before the other arrives. The two
/// increments of the protected `UnsafeCell` must be ordered.
#[test]
fn ticket_mutual_exclusion_two_threads() {
    check(None, || {
        let lock = Arc::new(TicketLock::new(0u32));
        let l2 = lock.clone();
        let t = thread::spawn(move || *l2.lock() += 1);
        *lock.lock() += 1;
        t.join().unwrap();
        assert!(!lock.is_locked());
        assert_eq!(*lock.lock(), 2);
    });
}

/// Ticket lock, 3 threads, exhaustive: two threads race to draw tickets while
/// the main thread only joins them; covers each order of the ticket draws, the second
/// waiter spinning while the first holder is preempted, and the handoff by `owner`
/// increment.
#[test]
fn ticket_mutual_exclusion_three_threads() {
    check(None, || {
        let lock = Arc::new(TicketLock::new(0u32));
        let l1 = lock.clone();
        let l2 = lock.clone();
        let a = thread::spawn(move || *l1.lock() += 1);
        let b = thread::spawn(move || *l2.lock() += 1);
        a.join().unwrap();
        b.join().unwrap();
        assert!(!lock.is_locked());
        assert_eq!(*lock.lock(), 2);
    });
}

/// Ticket `try_lock` against `lock`, 2 threads, exhaustive: the try-lock's CAS either
/// wins an idle word (and the other thread then waits for it) or fails because a ticket
/// was drawn, in which case it must not have disturbed the waiting or holding thread.
#[test]
fn ticket_try_lock_against_lock() {
    check(None, || {
        let lock = Arc::new(TicketLock::new(0u32));
        let l2 = lock.clone();
        let t = thread::spawn(move || *l2.lock() += 1);
        let tried = match lock.try_lock() {
            Some(mut g) => {
                *g += 10;
                10
            }
            None => 0,
        };
        t.join().unwrap();
        assert!(!lock.is_locked());
        assert_eq!(*lock.lock(), 1 + tried);
    });
}

/// Queued spinlock, exhaustive: a trylock racing the holder's release, which is a plain
/// store. The trylock either fails or takes the lock after the release, never beside the
/// holder (loom checks the two accesses of the protected cell are ordered), and some
/// execution takes it.
#[test]
fn qspinlock_trylock_races_the_release_store() {
    static TAKEN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    check(None, || {
        let lock = Arc::new(QueuedSpinLock::new(0u32));
        let mut g = lock.lock();
        let l2 = lock.clone();
        let t = thread::spawn(move || match l2.try_lock() {
            Some(mut g) => {
                *g += 10;
                10
            }
            None => 0,
        });
        *g += 1;
        drop(g);
        let tried = t.join().unwrap();
        if tried == 10 {
            TAKEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        assert_eq!(*lock.lock(), 1 + tried);
    });
    assert!(
        TAKEN.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "no trylock ever followed the release"
    );
}

/// Queued spinlock, 2 threads, exhaustive: fast-path CAS races, and the loser either
/// succeeds on the slow path's re-try or queues as head (spinning on the lock word)
/// and takes the lock when the holder releases, clearing the tail because it is the
/// last waiter.
#[test]
fn qspinlock_mutual_exclusion_two_threads() {
    check(None, || {
        let lock = Arc::new(QueuedSpinLock::new(0u32));
        let l2 = lock.clone();
        let t = thread::spawn(move || *l2.lock() += 1);
        *lock.lock() += 1;
        t.join().unwrap();
        assert!(!lock.is_locked() && !lock.is_contended());
        assert_eq!(*lock.lock(), 2);
    });
}

/// Queued spinlock, 3 threads, preemption bound 4: the main thread holds the lock while
/// two threads queue behind it (the second links itself behind the first's MCS node
/// and spins on its own node), then releases at any point of their enqueueing. Covers
/// the head taking the lock with a successor still linking itself (it must wait for
/// `next`), handing the queue head on through the node, and the last waiter clearing
/// the tail; the word must be empty afterwards.
#[test]
fn qspinlock_handoff_through_queue_three_threads() {
    check(Some(4), || {
        let lock = Arc::new(QueuedSpinLock::new(0u32));
        let guard = lock.lock();
        let l1 = lock.clone();
        let l2 = lock.clone();
        let a = thread::spawn(move || *l1.lock() += 1);
        let b = thread::spawn(move || *l2.lock() += 1);
        drop(guard);
        a.join().unwrap();
        b.join().unwrap();
        assert!(!lock.is_locked() && !lock.is_contended());
        assert_eq!(*lock.lock(), 2);
    });
}

/// Queued spinlock, 3 threads contending from an unlocked start, preemption bound 2:
/// fast-path CAS races among three, the losers' slow-path re-try, and queueing behind
/// a holder that itself came through the fast path or through the queue.
#[test]
fn qspinlock_three_contenders() {
    check(Some(2), || {
        let lock = Arc::new(QueuedSpinLock::new(0u32));
        let l1 = lock.clone();
        let l2 = lock.clone();
        let a = thread::spawn(move || *l1.lock() += 1);
        let b = thread::spawn(move || *l2.lock() += 1);
        *lock.lock() += 1;
        a.join().unwrap();
        b.join().unwrap();
        assert!(!lock.is_locked() && !lock.is_contended());
        assert_eq!(*lock.lock(), 3);
    });
}

/// `SpinLock` dispatch for both kinds, 2 threads, exhaustive: the enum wrapper adds no
/// unordered access of its own.
#[test]
fn spinlock_dispatch_two_threads() {
    for kind in pagelab_sync::LockKind::ALL {
        check(None, move || {
            let lock = Arc::new(SpinLock::new(kind, 0u32));
            let l2 = lock.clone();
            let t = thread::spawn(move || *l2.lock() += 1);
            *lock.lock() += 1;
            t.join().unwrap();
            assert_eq!(*lock.lock(), 2);
        });
    }
}

/// RwSem reader vs writer, exhaustive: a reader racing with a writer that updates two
/// fields one at a time either enters before (sees `(0, 0)`), waits behind the writer
/// and is admitted by its release, or keeps its fast-path bias if the writer left in
/// between; it never overlaps the write (loom checks the `UnsafeCell` accesses) and
/// never sees `(1, 0)`.
#[test]
fn rwsem_reader_writer_exclusion() {
    check(None, || {
        let sem = Arc::new(RwSem::new((0u32, 0u32)));
        let s2 = sem.clone();
        let w = thread::spawn(move || {
            let mut g = s2.write();
            g.0 = 1;
            g.1 = 1;
        });
        let (a, b) = *sem.read();
        assert_eq!(a, b);
        w.join().unwrap();
        assert!(!sem.is_contended());
        assert_eq!(*sem.read(), (1, 1));
    });
}

/// RwSem writer vs writer, exhaustive: two writers (one through `try_write`) never
/// overlap, and a waiting writer registers and then takes the lock on release.
#[test]
fn rwsem_writers_exclude_each_other() {
    check(None, || {
        let sem = Arc::new(RwSem::new(0u32));
        let s2 = sem.clone();
        let w = thread::spawn(move || *s2.write() += 1);
        let tried = match sem.try_write() {
            Some(mut g) => {
                *g += 10;
                10
            }
            None => 0,
        };
        w.join().unwrap();
        assert_eq!(*sem.read(), 1 + tried);
    });
}

/// Writer preference, 3 threads, exhaustive. The main thread holds a read
/// lock and a writer arrives and registers as waiting: from then on `try_read` must
/// fail even though only readers hold the semaphore. The main thread then releases
/// its read lock and a late reader arrives, at any point of the writer's wait,
/// acquisition and release (including while the writer waits with no reader left but
/// has not yet taken the lock, and the late reader's fast-path bias briefly blocking
/// it). The late reader must not get in before the writer: it must see its value.
#[test]
fn rwsem_writer_preference() {
    check(None, || {
        let sem = Arc::new(RwSem::new(0u32));
        let first = sem.read();
        let s1 = sem.clone();
        let writer = thread::spawn(move || *s1.write() = 1);
        wait_until(|| sem.waiting_writers() == 1);
        assert!(
            sem.try_read().is_none(),
            "try_read overtook a waiting writer"
        );
        assert!(sem.is_contended());
        drop(first);
        let s2 = sem.clone();
        let late = thread::spawn(move || *s2.read());
        writer.join().unwrap();
        assert_eq!(
            late.join().unwrap(),
            1,
            "late reader overtook a waiting writer"
        );
        assert!(!sem.is_contended());
    });
}

/// Downgrade admitting a waiting reader, 2 threads, exhaustive: a writer stores
/// `(1, 1)` and downgrades while the main thread reads, arriving before the write
/// (it then holds the writer off), while the writer holds (it waits and is admitted by
/// the downgrade, seeing `(1, 1)`), or after. The downgraded writer must still read
/// `(1, 1)`.
#[test]
fn rwsem_downgrade_admits_waiting_reader() {
    check(None, || {
        let sem = Arc::new(RwSem::new((0u32, 0u32)));
        let s1 = sem.clone();
        let downgrader = thread::spawn(move || {
            let mut w = s1.write();
            w.0 = 1;
            w.1 = 1;
            let r = RwSemWriteGuard::downgrade(w);
            assert_eq!(*r, (1, 1));
        });
        let (a, b) = *sem.read();
        assert_eq!(a, b);
        downgrader.join().unwrap();
        assert!(!sem.is_contended());
        assert_eq!(sem.reader_count(), 0);
    });
}

/// Downgrade keeps writers out, 3 threads, exhaustive: while one thread writes
/// `(1, 1)`, downgrades and re-reads, another tries to write `(2, 2)` (`try_write`) and
/// the main thread tries to read (`try_read`). No write may slip in between the
/// downgrade and the re-read, and readers never see a half-written pair.
#[test]
fn rwsem_downgrade_keeps_writers_out() {
    check(None, || {
        let sem = Arc::new(RwSem::new((0u32, 0u32)));
        let s1 = sem.clone();
        let s2 = sem.clone();
        let downgrader = thread::spawn(move || {
            let mut w = s1.write();
            *w = (1, 1);
            let r = RwSemWriteGuard::downgrade(w);
            assert_eq!(*r, (1, 1), "a writer got in during the downgrade");
        });
        let other = thread::spawn(move || match s2.try_write() {
            Some(mut w) => {
                w.0 = 2;
                w.1 = 2;
                true
            }
            None => false,
        });
        if let Some(r) = sem.try_read() {
            assert_eq!(r.0, r.1);
        }
        downgrader.join().unwrap();
        let other_wrote = other.join().unwrap();
        let last = *sem.read();
        if other_wrote {
            // Entirely before the downgrader's write, or entirely after its re-read.
            assert!(last == (1, 1) || last == (2, 2), "{last:?}");
        } else {
            assert_eq!(last, (1, 1));
        }
        assert!(!sem.is_contended());
    });
}

/// SeqCount, 2 threads, exhaustive: a writer runs two write sections storing
/// `(1, 1)` then `(2, 2)` field by field (Relaxed atomics); a reader loops until
/// `read_retry` accepts its reads. Loom explores the reader starting in, before or
/// after each section and reading stale or fresh values allowed by the orderings; an
/// accepted pair must be equal.
#[test]
fn seqcount_reader_retries_or_sees_consistent_pair() {
    check(None, || {
        let seq = Arc::new(SeqCount::new());
        let data = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
        let (seq2, data2) = (seq.clone(), data.clone());
        let writer = thread::spawn(move || {
            for v in 1..=2 {
                seq2.write_begin();
                data2.0.store(v, Relaxed);
                data2.1.store(v, Relaxed);
                seq2.write_end();
            }
        });
        let (x, y) = loop {
            let start = seq.read_begin();
            let x = data.0.load(Relaxed);
            let y = data.1.load(Relaxed);
            if !seq.read_retry(start) {
                break (x, y);
            }
        };
        assert_eq!(x, y, "accepted a torn pair");
        writer.join().unwrap();
        assert_eq!(seq.raw_read(), 4);
    });
}

/// Per-CPU counter, 3 threads, preemption bound 2: CPUs 0 and 1 each add 1 twice with
/// batch 2, so each second add folds its delta into the global count under the lock,
/// while the main thread takes an exact sum. The sum must lie in 0..=4 (a delta
/// counted both in the global count and in its slot would exceed what was added), and
/// after both finish `sum` is exactly 4 and `read` (everything folded) is 4.
#[test]
fn percpu_counter_concurrent_add_and_sum() {
    check(Some(2), || {
        let c = Arc::new(PerCpuCounter::new(2, 2));
        let adders: Vec<_> = (0..2)
            .map(|cpu| {
                let c = c.clone();
                thread::spawn(move || {
                    c.add(cpu, 1);
                    c.add(cpu, 1);
                })
            })
            .collect();
        let s = c.sum();
        assert!((0..=4).contains(&s), "sum {s} double counted");
        for a in adders {
            a.join().unwrap();
        }
        assert_eq!(c.sum(), 4);
        assert_eq!(c.read(), 4);
    });
}
