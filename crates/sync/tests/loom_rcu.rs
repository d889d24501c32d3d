//! Loom model of RCU publish and retire (`rcu.rs`), as the VMA tree uses it:
//! `RUSTFLAGS="--cfg loom" cargo test -p pagelab-sync --release --test loom_rcu`.
#![cfg(loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::thread;
use pagelab_sync::rcu::{RcuCell, RcuDomain};

/// A published value that records its own destruction in a flag that outlives it.
struct Val {
    n: u64,
    freed: Arc<AtomicBool>,
}

impl Drop for Val {
    fn drop(&mut self) {
        self.freed.store(true, Ordering::SeqCst);
    }
}

fn val(n: u64) -> (Val, Arc<AtomicBool>) {
    let f = Arc::new(AtomicBool::new(false));
    (
        Val {
            n,
            freed: f.clone(),
        },
        f,
    )
}

/// Interleaving covered: a reader enters a read section (slot store, full fence) and loads the
/// pointer while a writer publishes a new value (swap, full fence, epoch advance) and tries to
/// reclaim the old one. Whichever value the reader loaded is not freed before its section ends;
/// once both are done a reclaim frees the old value.
#[test]
fn publish_and_retire_against_a_reader() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(|| {
        let d = RcuDomain::new(2);
        let (v0, f0) = val(0);
        let cell = Arc::new(RcuCell::new(&d, v0));
        let (c2, d2) = (cell.clone(), d.clone());
        let reader = thread::spawn(move || {
            let r = RcuDomain::register(&d2).unwrap();
            let g = r.lock();
            let v = c2.load(&g);
            let n = v.n;
            let freed = v.freed.load(Ordering::SeqCst);
            assert!(!freed, "value {n} freed inside a read section");
            drop(g);
            n
        });
        let (v1, f1) = val(1);
        cell.publish(v1);
        d.reclaim();
        let seen = reader.join().unwrap();
        assert!(seen == 0 || seen == 1);
        d.synchronize();
        assert!(f0.load(Ordering::SeqCst), "old value never freed");
        assert!(!f1.load(Ordering::SeqCst));
    });
}

/// Interleaving covered: two publications in a row with a reader in between: every retired
/// value is freed exactly when no reader can hold it, and the current one never is.
#[test]
fn two_publications_free_in_order() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(|| {
        let d = RcuDomain::new(2);
        let (v0, f0) = val(0);
        let cell = Arc::new(RcuCell::new(&d, v0));
        let (c2, d2) = (cell.clone(), d.clone());
        let reader = thread::spawn(move || {
            let r = RcuDomain::register(&d2).unwrap();
            let g = r.lock();
            let v = c2.load(&g);
            assert!(!v.freed.load(Ordering::SeqCst));
            v.n
        });
        let (v1, f1) = val(1);
        let (v2, f2) = val(2);
        cell.publish(v1);
        cell.publish(v2);
        reader.join().unwrap();
        d.synchronize();
        assert!(f0.load(Ordering::SeqCst) && f1.load(Ordering::SeqCst));
        assert!(!f2.load(Ordering::SeqCst));
    });
}
