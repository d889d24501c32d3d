//! Loom models of the per-VMA lock protocol (`vm::vma_lock`), for both variants (6.4 rwsem and
//! 6.15 reference count): `RUSTFLAGS="--cfg loom" cargo test -p pagelab-mm --release --test loom_vma`.
//!
//! The VMA's contents are a loom `UnsafeCell`: a reader touches it only while holding its read
//! lock, the writer only between `start_write` and `end_write_all`, so loom reports any
//! interleaving in which the protocol lets the two overlap.
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;
use pagelab_mm::vm::vma_lock::{MmLockSeq, VmaLock, VmaLockKind};

struct Vma {
    lock: VmaLock,
    contents: UnsafeCell<u64>,
}

// SAFETY: test scaffold: `contents` is only accessed under the protocol being checked, and
// loom's UnsafeCell reports any access the protocol fails to order.
unsafe impl Sync for Vma {}

impl Vma {
    /// Read the contents (a reader holding the VMA read lock).
    fn read(&self) -> u64 {
        // SAFETY: loom tracks this access and fails the model if it races a write.
        self.contents.with(|p| unsafe { *p })
    }

    /// Change the contents (the writer, VMA write-locked).
    fn write(&self, v: u64) {
        // SAFETY: as in `read`.
        self.contents.with_mut(|p| unsafe { *p = v })
    }
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

fn both(f: impl Fn(VmaLockKind) + Sync + Send + Clone + 'static) {
    for kind in [VmaLockKind::Rwsem, VmaLockKind::Refcount] {
        let f = f.clone();
        model(move || f(kind));
    }
}

fn vma(kind: VmaLockKind) -> Arc<Vma> {
    Arc::new(Vma {
        lock: VmaLock::new(kind),
        contents: UnsafeCell::new(0),
    })
}

/// Interleaving covered: a fault takes the VMA read lock (racy sequence check, reference,
/// acquire re-check) while a writer holding mmap_lock write-locks the VMA, changes it and
/// releases all its VMA locks by advancing the mm sequence. The reader either gets in before
/// the writer (who then waits for it) or after the sequence advance (and sees the change), or
/// fails and falls back; it never reads while the writer writes.
#[test]
fn reader_against_writer() {
    both(|kind| {
        let seq = Arc::new(MmLockSeq::new());
        let v = vma(kind);
        let (s2, v2) = (seq.clone(), v.clone());
        let reader = thread::spawn(move || {
            if let Ok(g) = v2.lock.start_read(&s2) {
                let x = v2.read();
                assert!(x == 0 || x == 1);
                drop(g);
            }
        });
        v.lock.start_write(&seq);
        v.write(1);
        seq.end_write_all();
        reader.join().unwrap();
    });
}

/// Interleaving covered: a writer write-locks two VMAs; until it advances the mm sequence,
/// readers of either VMA fail; after the advance (one store) both are readable again, without
/// the writer touching either VMA.
#[test]
fn sequence_advance_releases_every_vma() {
    both(|kind| {
        let seq = Arc::new(MmLockSeq::new());
        let (a, b) = (vma(kind), vma(kind));
        a.lock.start_write(&seq);
        b.lock.start_write(&seq);
        let (s2, a2, b2) = (seq.clone(), a.clone(), b.clone());
        let reader = thread::spawn(move || {
            let ra = a2.lock.start_read(&s2).is_ok();
            let rb = b2.lock.start_read(&s2).is_ok();
            (ra, rb)
        });
        a.write(7);
        seq.end_write_all();
        let (ra, rb) = reader.join().unwrap();
        // Whatever the reader saw while the writer held the locks, after the advance both VMAs
        // are free.
        let _ = (ra, rb);
        assert!(a.lock.start_read(&seq).is_ok());
        assert!(b.lock.start_read(&seq).is_ok());
        assert!(!a.lock.is_write_locked(&seq));
    });
}

/// Interleaving covered: munmap write-locks a VMA and marks it detached, then advances the
/// sequence; a racing fault that found the VMA under RCU either locked it before the writer
/// (who waited for it) or fails for good: a detached VMA is never read-locked again, even after
/// the sequence moved on.
#[test]
fn detached_vma_stays_unlockable() {
    both(|kind| {
        let seq = Arc::new(MmLockSeq::new());
        let v = vma(kind);
        let (s2, v2) = (seq.clone(), v.clone());
        let reader = thread::spawn(move || {
            if let Ok(g) = v2.lock.start_read(&s2) {
                assert_eq!(v2.read(), 0);
                drop(g);
            }
        });
        v.lock.start_write(&seq);
        v.lock.mark_detached();
        v.write(99);
        seq.end_write_all();
        reader.join().unwrap();
        assert!(v.lock.start_read(&seq).is_err());
        assert!(v.lock.is_detached());
    });
}
