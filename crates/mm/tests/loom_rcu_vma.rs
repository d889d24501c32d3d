//! Loom model of lock-free page faults (`mm.vma_lock = "rcu"`, `vm::vma_rcu`):
//! `RUSTFLAGS="--cfg loom" cargo test -p pagelab-mm --release --test loom_rcu_vma`.
//!
//! A fault runs the engine's protocol on the engine's primitives (`RcuDomain`/`RcuCell` for
//! the VMA tree, `VmaLock` of kind `Rcu` and its `VmaSeq`, a `SpinLock` for the PTE lock,
//! `call_rcu` for the page table) against a munmap that does what `Mm::munmap` does in the
//! same order: mmap_lock for write, `vma_start_write` (the sequence bump), publish the tree
//! without the VMA, mark it detached, release (`mmap_write_unlock`), zap the PTE under the
//! PTE lock, unlink the table and hand it to RCU.
//!
//! The page table is one table whose PTE is the PTE lock's data. Its "freed" flag is set by
//! the destructor `call_rcu` runs, and the fault checks it at every access inside its read
//! section, so loom reports any schedule in which the table is freed under the fault.
#![cfg(loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::thread;
use pagelab_mm::vm::vma_lock::{MmLockSeq, VmaLock, VmaLockKind};
use pagelab_sync::{LockKind, RcuCell, RcuDomain, RwSem, SpinLock};

/// The page the fault installs.
const PAGE: u64 = 0x1000 | 1;

/// One PTE table: the PTE under its lock, and whether RCU has freed it.
struct Table {
    ptl: SpinLock<u64>,
    /// The PMD entry pointing here (cleared by munmap's unlink).
    linked: AtomicBool,
    freed: AtomicBool,
}

/// What `call_rcu` frees: dropping it is `pagetable_free`.
struct RetiredTable(Arc<Table>);

impl Drop for RetiredTable {
    fn drop(&mut self) {
        self.0.freed.store(true, Ordering::SeqCst);
    }
}

struct Vma {
    lock: VmaLock,
}

/// How the fault ended.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// Installed lock-free, validated.
    Done,
    /// Refused or aborted; under mmap_lock it found no VMA (SIGSEGV).
    RetriedAndGone,
}

/// Interleavings covered: every schedule (up to three preemptions) of one lock-free fault
/// against one munmap of its VMA.
/// - The fault either completes before the unmap (then the zap found and removed its page)
///   or retries under mmap_lock and finds the VMA gone; it never completes after.
/// - No page installed into the detached VMA survives: after both, the PTE is empty.
/// - Nothing the fault reached is freed inside its read section: the page table stays until
///   the section ends (`call_rcu`); the VMA is held by the retired tree the same way.
/// - After `synchronize` the table is freed.
#[test]
fn fault_racing_munmap_completes_before_or_retries() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(|| {
        let d = RcuDomain::new(2);
        let vma = Arc::new(Vma {
            lock: VmaLock::new(VmaLockKind::Rcu),
        });
        let tree = Arc::new(RcuCell::new(&d, Some(vma.clone())));
        let table = Arc::new(Table {
            ptl: SpinLock::new(LockKind::Ticket, 0),
            linked: AtomicBool::new(true),
            freed: AtomicBool::new(false),
        });
        let mm_seq = Arc::new(MmLockSeq::new());
        let mmap_lock = Arc::new(RwSem::new(()));

        let fault = {
            let (d, tree, table, mm_seq, mmap_lock) = (
                d.clone(),
                tree.clone(),
                table.clone(),
                mm_seq.clone(),
                mmap_lock.clone(),
            );
            thread::spawn(move || {
                let r = RcuDomain::register(&d).unwrap();
                let g = r.lock();
                // Whether the walk reached the table: only then must it outlive the section (a
                // reader that came after the unlink cannot reach it, and may see it freed).
                let mut reached = false;
                let done = (|| {
                    let v = tree.load(&g).as_ref()?;
                    let seq = v.lock.rcu_seq().unwrap();
                    let snap = seq.begin(&v.lock, &mm_seq).ok()?;
                    // The walk: a cleared PMD entry is a missing level (retry).
                    if !table.linked.load(Ordering::Acquire) {
                        return None;
                    }
                    reached = true;
                    assert!(!table.freed.load(Ordering::SeqCst), "walked a freed table");
                    let mut pte = table.ptl.lock();
                    assert!(!table.freed.load(Ordering::SeqCst), "locked a freed table");
                    if !seq.validate(snap) || *pte != 0 {
                        return None;
                    }
                    *pte = PAGE;
                    Some(())
                })();
                assert!(
                    !reached || !table.freed.load(Ordering::SeqCst),
                    "table freed inside the read section of a fault that reached it"
                );
                drop(g);
                match done {
                    Some(()) => Outcome::Done,
                    None => {
                        // The retry under mmap_lock: the tree as the munmap left it.
                        let _m = mmap_lock.read();
                        let g = r.lock();
                        assert!(tree.load(&g).is_none(), "retried before the unmap ended");
                        Outcome::RetriedAndGone
                    }
                }
            })
        };

        // munmap.
        let w = mmap_lock.write();
        vma.lock.start_write(&mm_seq);
        tree.publish(None);
        vma.lock.mark_detached();
        mm_seq.end_write_all();
        drop(w);
        let zapped = std::mem::replace(&mut *table.ptl.lock(), 0);
        table.linked.store(false, Ordering::Release);
        d.call_rcu(Box::new(RetiredTable(table.clone())));

        let out = fault.join().unwrap();
        assert_eq!(
            out == Outcome::Done,
            zapped == PAGE,
            "{out:?}: the fault completed after the zap, or the zap found a page nobody put"
        );
        assert_eq!(*table.ptl.lock(), 0, "a page survived in the detached VMA");
        d.synchronize();
        assert!(table.freed.load(Ordering::SeqCst), "table never freed");
    });
}
