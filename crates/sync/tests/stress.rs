//! Multi-threaded stress tests: 8 threads, more than the machine's cores, so lock
//! holders and waiters are routinely preempted.
//!
//! These never flip the statistics switch and make no timing assertions.

#![cfg(not(loom))]

use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::thread;

use pagelab_sync::{
    LockKind, PerCpuCounter, QueuedSpinLock, RwSem, RwSemWriteGuard, SeqCount, SpinLock, TicketLock,
};

const THREADS: usize = 8;
const ITERS: u64 = 20_000;

/// Tiny deterministic PRNG (xorshift64*), one per thread.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Increments a non-atomic pair under the lock; both halves must match the total.
fn hammer(lock_and_bump: impl Fn() + Sync) {
    let start = Barrier::new(THREADS);
    thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                start.wait();
                for _ in 0..ITERS {
                    lock_and_bump();
                }
            });
        }
    });
}

fn bump(pair: &mut (u64, u64)) {
    pair.0 += 1;
    std::hint::black_box(&mut *pair);
    pair.1 += 1;
}

#[test]
fn ticket_lock_counts_exactly() {
    let lock = TicketLock::new((0u64, 0u64));
    hammer(|| bump(&mut lock.lock()));
    let expected = THREADS as u64 * ITERS;
    assert_eq!(lock.into_inner(), (expected, expected));
}

#[test]
fn queued_lock_counts_exactly() {
    let lock = QueuedSpinLock::new((0u64, 0u64));
    hammer(|| bump(&mut lock.lock()));
    let expected = THREADS as u64 * ITERS;
    assert_eq!(lock.into_inner(), (expected, expected));
}

#[test]
fn spinlock_of_each_kind_counts_exactly_with_try_lock_mixed_in() {
    for kind in LockKind::ALL {
        let lock = SpinLock::new(kind, (0u64, 0u64));
        let tried = AtomicU64::new(0);
        hammer(|| {
            if let Some(mut g) = lock.try_lock() {
                bump(&mut g);
                tried.fetch_add(1, Relaxed);
            }
            bump(&mut lock.lock());
        });
        let expected = THREADS as u64 * ITERS + tried.load(Relaxed);
        assert_eq!(lock.into_inner(), (expected, expected), "{kind}");
    }
}

/// Every thread takes up to four queued locks (nested, each a different lock), in a
/// random subset and order, and drops the guards in a random order. Each lock's
/// counter must equal the number of times it was taken.
#[test]
fn nested_queued_locks_dropped_in_random_order() {
    const LOCKS: usize = 4;
    let locks: [QueuedSpinLock<u64>; LOCKS] = Default::default();
    let taken: [AtomicU64; LOCKS] = Default::default();
    let start = Barrier::new(THREADS);
    thread::scope(|s| {
        for t in 0..THREADS {
            let (locks, taken, start) = (&locks, &taken, &start);
            s.spawn(move || {
                let mut rng = Rng::new(t as u64 + 1);
                start.wait();
                for _ in 0..ITERS / 4 {
                    // Lock in ascending index order (no deadlock), a random subset.
                    let mut guards: Vec<(usize, _)> = (0..LOCKS)
                        .filter(|_| rng.below(4) != 0)
                        .map(|i| (i, locks[i].lock()))
                        .collect();
                    for (i, g) in &mut guards {
                        **g += 1;
                        taken[*i].fetch_add(1, Relaxed);
                    }
                    while !guards.is_empty() {
                        let k = rng.below(guards.len() as u64) as usize;
                        drop(guards.swap_remove(k));
                    }
                }
            });
        }
    });
    for (lock, n) in locks.iter().zip(&taken) {
        assert!(!lock.is_locked());
        assert_eq!(*lock.lock(), n.load(Relaxed));
    }
}

/// Writers keep two fields equal (changing them one at a time); readers must never see
/// them differ. Some writers downgrade and check that nobody wrote meanwhile.
#[test]
fn rwsem_readers_never_see_half_done_update() {
    let sem = RwSem::new((0u64, 0u64));
    let writes = AtomicU64::new(0);
    let start = Barrier::new(THREADS);
    thread::scope(|s| {
        for t in 0..THREADS {
            let (sem, writes, start) = (&sem, &writes, &start);
            s.spawn(move || {
                let mut rng = Rng::new(100 + t as u64);
                start.wait();
                for _ in 0..ITERS / 2 {
                    // Threads 0 and 1 write a quarter of the time; the rest read.
                    if t < 2 && rng.below(4) == 0 {
                        let mut w = sem.write();
                        w.0 += 1;
                        std::hint::black_box(&mut *w);
                        if rng.below(8) == 0 {
                            thread::yield_now();
                        }
                        w.1 += 1;
                        writes.fetch_add(1, Relaxed);
                        if rng.below(2) == 0 {
                            let seen = *w;
                            let r = RwSemWriteGuard::downgrade(w);
                            assert_eq!(*r, seen, "a writer got in during downgrade");
                        }
                    } else {
                        let r = if rng.below(4) == 0 {
                            match sem.try_read() {
                                Some(r) => r,
                                None => continue,
                            }
                        } else {
                            sem.read()
                        };
                        let (a, b) = *r;
                        assert_eq!(a, b, "reader saw a half-done write");
                    }
                }
            });
        }
    });
    assert!(!sem.is_contended());
    assert_eq!(sem.reader_count(), 0);
    let n = writes.load(Relaxed);
    assert!(n > 0);
    assert_eq!(sem.into_inner(), (n, n));
}

/// A continuous stream of readers on 7 threads cannot starve a writer: with writer
/// preference it gets in every time (the test would hang otherwise).
#[test]
fn rwsem_writer_not_starved_by_reader_stream() {
    let sem = RwSem::new(0u64);
    let done = AtomicBool::new(false);
    thread::scope(|s| {
        for _ in 0..THREADS - 1 {
            s.spawn(|| {
                while !done.load(Relaxed) {
                    let r = sem.read();
                    std::hint::black_box(*r);
                }
            });
        }
        for _ in 0..200 {
            *sem.write() += 1;
        }
        done.store(true, Relaxed);
    });
    assert_eq!(sem.into_inner(), 200);
}

/// Writers (serialised by a mutex, as the SeqCount contract requires) store pairs of
/// equal values one field at a time, sometimes yielding mid-write; lock-free readers
/// must never accept a torn pair, and must observe the values only growing.
#[test]
fn seqcount_readers_never_accept_torn_pair() {
    const WRITERS: usize = 2;
    let seq = SeqCount::new();
    // A sleeping lock: this test is about the seqcount, not about FIFO spinlock
    // handoffs to preempted waiters.
    let writer_lock = std::sync::Mutex::new(());
    let (a, b) = (AtomicU64::new(0), AtomicU64::new(0));
    let done = AtomicBool::new(false);
    let retries = AtomicU64::new(0);
    thread::scope(|s| {
        for _ in 0..THREADS - WRITERS {
            s.spawn(|| {
                let mut last = 0;
                let mut reads = 0u64;
                while !done.load(Relaxed) || reads < 1000 {
                    let start = seq.read_begin();
                    let x = a.load(Relaxed);
                    let y = b.load(Relaxed);
                    if seq.read_retry(start) {
                        retries.fetch_add(1, Relaxed);
                        continue;
                    }
                    assert_eq!(x, y, "accepted a torn pair");
                    assert!(x >= last, "went back in time: {x} < {last}");
                    last = x;
                    reads += 1;
                    if reads.is_multiple_of(64) {
                        // Leave the writers some CPU when threads outnumber cores.
                        thread::yield_now();
                    }
                }
            });
        }
        let writers: Vec<_> = (0..WRITERS)
            .map(|_| {
                s.spawn(|| {
                    for i in 0..ITERS / 4 {
                        let _g = writer_lock.lock().unwrap();
                        seq.write_begin();
                        let v = a.load(Relaxed) + 1;
                        a.store(v, Relaxed);
                        // Widen the torn window; sometimes get "preempted" mid-write so
                        // readers also wait in read_begin.
                        if i % 64 == 0 {
                            thread::yield_now();
                        } else {
                            for _ in 0..32 {
                                std::hint::spin_loop();
                            }
                        }
                        b.store(v, Relaxed);
                        seq.write_end();
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        done.store(true, Relaxed);
    });
    let total = WRITERS as u64 * (ITERS / 4);
    assert_eq!((a.load(Relaxed), b.load(Relaxed)), (total, total));
    assert_eq!(seq.raw_read(), 2 * total as u32);
}

/// Each thread adds a pseudo-random mix of positive and negative amounts on its own
/// CPU while one more thread repeatedly takes exact sums; at the end the sum is exact
/// and `read` is within the error bound. A second round shares CPU indices between
/// threads (8 threads on 4 CPUs).
#[test]
fn percpu_counter_sum_exact() {
    for nr_cpus in [THREADS, THREADS / 2] {
        let c = PerCpuCounter::new(nr_cpus, 16);
        let done = AtomicBool::new(false);
        let expected: i64 = thread::scope(|s| {
            let summer = s.spawn(|| {
                // At least one sum, however the threads are scheduled.
                loop {
                    std::hint::black_box(c.sum());
                    if done.load(Relaxed) {
                        break;
                    }
                }
            });
            let adders: Vec<_> = (0..THREADS)
                .map(|t| {
                    let c = &c;
                    s.spawn(move || {
                        let mut rng = Rng::new(7 + t as u64);
                        let mut mine = 0i64;
                        for _ in 0..ITERS {
                            let v = rng.below(41) as i64 - 15;
                            c.add(t % nr_cpus, v);
                            mine += v;
                        }
                        mine
                    })
                })
                .collect();
            let expected = adders.into_iter().map(|h| h.join().unwrap()).sum();
            done.store(true, Relaxed);
            summer.join().unwrap();
            expected
        });
        assert_eq!(c.sum(), expected, "nr_cpus={nr_cpus}");
        assert!(
            (c.read() - expected).abs() <= c.error_bound(),
            "read {} vs {expected}, bound {}",
            c.read(),
            c.error_bound()
        );
    }
}
