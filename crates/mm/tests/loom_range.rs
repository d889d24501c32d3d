//! Loom model of the range-lock protocol (`mm.mmap_lock = "range"`, `vm::range_lock`):
//! `RUSTFLAGS="--cfg loom" cargo test -p pagelab-mm --release --test loom_range`.
//!
//! The page table is a root node `P` (a PMD table, say) with two children `L1` and `L2` (PTE
//! tables). Operations and faults run the engine's own functions ([`lock_cover`],
//! [`lock_leaf`]) on the engine's [`NodeLock`]s:
//! - two operations on overlapping ranges (one covered by `P`, one by `L1`) never hold their
//!   nodes at once: both write the same `UnsafeCell`, which loom reports if they overlap;
//! - two operations on disjoint ranges (covered by `L1` and `L2`) hold their nodes at the same
//!   time (each waits, while holding, for the other to arrive: a protocol that serialised
//!   them would deadlock) and never write `P`'s word;
//! - a fault racing an munmap of its range: the fault installs its PTE table (if missing: the
//!   link the munmap's drain must see), read-locks it and, if the VMA is still mapped,
//!   installs its PTE; the munmap, covering `P`, unmaps the VMA and zaps the PTE. Afterwards no
//!   PTE may survive the unmap.
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::thread;
use pagelab_mm::vm::range_lock::{NodeLock, lock_cover, lock_leaf};

struct Tree {
    p: NodeLock,
    l1: NodeLock,
    l2: NodeLock,
    /// `P`'s entry for `L1`: whether the table is installed (the drain visits only installed
    /// tables, as `PageTable::for_each_table_below` does).
    l1_linked: AtomicBool,
}

impl Tree {
    fn new(l1_linked: bool) -> Self {
        Tree {
            p: NodeLock::new(),
            l1: NodeLock::new(),
            l2: NodeLock::new(),
            l1_linked: AtomicBool::new(l1_linked),
        }
    }

    /// `P`'s installed children, as the covering operation's drain walks them.
    fn drain_below_p(&self, f: &mut dyn FnMut(&NodeLock)) {
        if self.l1_linked.load(Ordering::Acquire) {
            f(&self.l1);
        }
        f(&self.l2);
    }
}

#[test]
fn overlapping_operations_exclude_each_other() {
    loom::model(|| {
        let t = Arc::new(Tree::new(true));
        let data = Arc::new(UnsafeCell::new(0u64));
        let (t2, d2) = (t.clone(), data.clone());
        let small = thread::spawn(move || {
            let _g = lock_cover(&t2.l1, &[&t2.p], |_| {});
            // SAFETY: the model's claim: the range lock makes this access exclusive (loom
            // reports it otherwise).
            d2.with_mut(|v| unsafe { *v += 1 });
        });
        {
            let _g = lock_cover(&t.p, &[], |f| t.drain_below_p(f));
            // SAFETY: as above, under the covering lock.
            data.with_mut(|v| unsafe { *v += 10 });
        }
        small.join().unwrap();
        // SAFETY: both threads are joined.
        assert_eq!(data.with(|v| unsafe { *v }), 11);
    });
}

#[test]
fn disjoint_operations_run_together_and_leave_the_parent_alone() {
    loom::model(|| {
        let t = Arc::new(Tree::new(true));
        let arrived = Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
        let op = |t: Arc<Tree>, arrived: Arc<[AtomicBool; 2]>, me: usize| {
            move || {
                let node = if me == 0 { &t.l1 } else { &t.l2 };
                let _g = lock_cover(node, &[&t.p], |_| {});
                assert!(
                    !t.p.is_held(),
                    "a disjoint operation wrote the parent's word"
                );
                arrived[me].store(true, Ordering::SeqCst);
                // Hold on until the other one holds its node too.
                while !arrived[1 - me].load(Ordering::SeqCst) {
                    thread::yield_now();
                }
            }
        };
        let a = thread::spawn(op(t.clone(), arrived.clone(), 0));
        op(t.clone(), arrived.clone(), 1)();
        a.join().unwrap();
        assert!(!t.p.is_held() && !t.l1.is_held() && !t.l2.is_held());
    });
}

/// Run a fault on `L1` against an munmap covering `P`; `linked`: whether `L1` exists before
/// (otherwise the fault installs it first).
fn fault_against_munmap(linked: bool) {
    loom::model(move || {
        let t = Arc::new(Tree::new(linked));
        let mapped = Arc::new(AtomicBool::new(true));
        let pte = Arc::new(UnsafeCell::new(0u64));
        let (t2, m2, p2) = (t.clone(), mapped.clone(), pte.clone());
        let fault = thread::spawn(move || {
            // walk_alloc: install the missing table before taking its lock.
            t2.l1_linked.store(true, Ordering::Release);
            let _g = lock_leaf(&t2.l1, &[&t2.p]);
            // The VMA is looked up only under the lock.
            if m2.load(Ordering::Relaxed) {
                // SAFETY: the model's claim: the leaf's read lock excludes the munmap's zap
                // (loom reports it otherwise).
                p2.with_mut(|v| unsafe { *v = 1 });
            }
        });
        {
            let _g = lock_cover(&t.p, &[], |f| t.drain_below_p(f));
            mapped.store(false, Ordering::Relaxed);
            // SAFETY: as above, under the covering lock.
            pte.with_mut(|v| unsafe { *v = 0 });
        }
        fault.join().unwrap();
        assert_eq!(
            // SAFETY: both threads are joined.
            pte.with(|v| unsafe { *v }),
            0,
            "a PTE was installed in an unmapped range"
        );
    });
}

#[test]
fn fault_racing_munmap_of_its_range_installs_nothing_after_it() {
    fault_against_munmap(true);
}

#[test]
fn fault_installing_its_table_racing_munmap_installs_nothing_after_it() {
    fault_against_munmap(false);
}
