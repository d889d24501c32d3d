//! Loom models of munmap's lock downgrade (`mm.munmap_downgrade`, Linux 4.20+):
//! `RUSTFLAGS="--cfg loom" cargo test -p pagelab-mm --release --test loom_munmap`.
//!
//! `Mm::munmap` takes mmap_lock for write, write-locks and detaches the VMAs, then (with the
//! switch on) calls `MmapWriteGuard::downgrade`: advance `mm_lock_seq` (releasing every VMA
//! write-locked under the hold) and turn the rwsem's write hold into a read hold, under which
//! it zaps, flushes and frees. These models run that sequence on the same primitives
//! (`pagelab_sync::RwSem`, `MmLockSeq`, `VmaLock`), in the same order, against the parties
//! that meet it: a fault waiting for mmap_lock (a reader), an mmap waiting for it (a writer),
//! and a fault trying the detached VMA's own lock.
//!
//! The rwsem's data stands for what mmap_lock protects (the VMA tree); its guards are loom-
//! tracked accesses, so loom reports any interleaving in which a writer's access overlaps a
//! reader's. A thread that waits forever (a lost wake-up) makes loom fail the model.
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::thread;
use pagelab_mm::vm::vma_lock::{MmLockSeq, VmaLock, VmaLockKind};
use pagelab_sync::{RwSem, RwSemWriteGuard};

fn model(bound: usize, permutations: Option<usize>, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(bound);
    b.max_permutations = permutations;
    // Three parties that each may wait by spinning (the rwsem's waiters, the munmapper waiting
    // for them to queue) take more scheduling steps than loom's default allows.
    b.max_branches = 100_000;
    b.check(f);
}

/// The tree as mmap_lock protects it: 0 mapped, 1 unmapped by the munmap, +10 by an mmap.
const UNMAPPED: u64 = 1;
const MAPPED_MORE: u64 = 10;

/// Interleavings covered: the munmapper holds mmap_lock for write and removes the VMA; a
/// fault (reader) and an mmap (writer) arrive meanwhile and queue, in either order (one
/// model each); the munmapper downgrades once both wait (the case the downgrade exists for),
/// zaps, and releases.
///
/// - The waiting reader is admitted by the downgrade itself: right after it, while the
///   munmapper still holds its read lock, no reader waits any more.
/// - The waiting writer gets in only after the munmapper's zap and the reader's unlock: it
///   checks both were over, and loom's tracked accesses fail any overlap with a reader.
/// - Everyone finishes: no wake-up is lost.
#[test]
fn downgrade_admits_waiting_reader_before_waiting_writer() {
    for reader_first in [true, false] {
        // Bounded: three threads whose waits spin make the space of schedules too large to
        // exhaust in CI time even at two preemptions (hours on a shared two-core host); the
        // first 10 000 schedules of each arrival order are checked.
        model(2, Some(10_000), move || {
            downgrade_against_waiters(reader_first)
        });
    }
}

fn downgrade_against_waiters(reader_first: bool) {
    let sem = Arc::new(RwSem::new(0u64));
    let zapped = Arc::new(AtomicBool::new(false));
    let reader_out = Arc::new(AtomicBool::new(false));

    let mut w = sem.write();
    *w = UNMAPPED;

    let spawn_reader = || {
        let (s, r_out) = (sem.clone(), reader_out.clone());
        let h = thread::spawn(move || {
            let r = s.read();
            assert_eq!(
                *r, UNMAPPED,
                "the fault saw the tree before or during the munmap"
            );
            r_out.store(true, Ordering::Release);
        });
        while sem.waiting_readers() == 0 {
            thread::yield_now();
        }
        h
    };
    let spawn_writer = || {
        let (s, z, r_out) = (sem.clone(), zapped.clone(), reader_out.clone());
        let h = thread::spawn(move || {
            let mut w = s.write();
            assert!(z.load(Ordering::Acquire), "mmap got in during the zap");
            assert!(
                r_out.load(Ordering::Acquire),
                "mmap got in beside the reader"
            );
            *w += MAPPED_MORE;
        });
        while sem.waiting_writers() == 0 {
            thread::yield_now();
        }
        h
    };
    let (reader, writer) = if reader_first {
        let r = spawn_reader();
        (r, spawn_writer())
    } else {
        let w = spawn_writer();
        (spawn_reader(), w)
    };

    let r = RwSemWriteGuard::downgrade(w);
    // The waiting reader was admitted by the downgrade's own update of the count word (its
    // slot became an active read lock), not left queued behind the waiting writer. Nobody
    // else can queue now: the reader is the only one.
    assert_eq!(
        sem.waiting_readers(),
        0,
        "the downgrade left the fault waiting"
    );
    // The zap: the tree is what the munmapper left, no writer changed it.
    assert_eq!(*r, UNMAPPED);
    zapped.store(true, Ordering::Release);
    drop(r);

    reader.join().unwrap();
    writer.join().unwrap();
    assert_eq!(*sem.read(), UNMAPPED + MAPPED_MORE);
    assert!(!sem.is_contended());
    assert_eq!(sem.reader_count(), 0);
}

/// A VMA with contents a reader may touch only under its read lock.
struct Vma {
    lock: VmaLock,
    contents: UnsafeCell<u64>,
}

// SAFETY: test scaffold: `contents` is only accessed under the protocol being checked, and
// loom's UnsafeCell reports any access the protocol fails to order.
unsafe impl Sync for Vma {}

/// Interleavings covered, for both VMA lock variants: a fault tries the VMA's own lock while
/// the munmapper write-locks it, changes it, marks it detached, and downgrades (advancing the
/// mm sequence, which releases every VMA write-locked under the hold). A fault that got the
/// VMA lock did so before the munmapper, which waited for it; one that comes after the
/// downgrade is refused even though the sequence moved on (the VMA is detached), falls back
/// to mmap_lock for read, which the downgraded munmapper shares with it, and finds the VMA
/// gone from the tree.
#[test]
fn detached_vma_stays_locked_out_after_the_downgrade() {
    for kind in [VmaLockKind::Rwsem, VmaLockKind::Refcount] {
        model(3, None, move || {
            let sem = Arc::new(RwSem::new(0u64));
            let seq = Arc::new(MmLockSeq::new());
            let v = Arc::new(Vma {
                lock: VmaLock::new(kind),
                contents: UnsafeCell::new(0),
            });
            let (s, q, v2) = (sem.clone(), seq.clone(), v.clone());
            let fault = thread::spawn(move || match v2.lock.start_read(&q) {
                Ok(g) => {
                    // SAFETY: loom tracks this access and fails the model if it races the
                    // munmapper's write.
                    let c = v2.contents.with(|p| unsafe { *p });
                    assert_eq!(c, 0, "a fault locked the VMA after munmap changed it");
                    drop(g);
                }
                Err(_) => {
                    // The fallback: mmap_lock for read, then look the VMA up again.
                    let r = s.read();
                    assert!(*r == 0 || *r == UNMAPPED);
                }
            });

            let mut w = sem.write();
            v.lock.start_write(&seq);
            // SAFETY: the VMA is write-locked: no reader holds or can take its lock.
            v.contents.with_mut(|p| unsafe { *p = 99 });
            *w = UNMAPPED;
            v.lock.mark_detached();
            // MmapWriteGuard::downgrade: vma_end_write_all, then downgrade_write.
            seq.end_write_all();
            let r = RwSemWriteGuard::downgrade(w);
            assert!(
                v.lock.start_read(&seq).is_err(),
                "detached VMA lockable again"
            );
            assert_eq!(*r, UNMAPPED);
            drop(r);
            fault.join().unwrap();
            assert!(v.lock.is_detached());
        });
    }
}
