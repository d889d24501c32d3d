//! Loom model of the lockless anonymous PTE install of `mm.ptl = "atomic"` (Christoph
//! Lameter's 2005 page-fault scalability patches):
//! `RUSTFLAGS="--cfg loom" cargo test -p pagelab-mm --release --test loom_pte`.
//!
//! Two threads fault the same empty PTE at once. Each allocates and zeroes a page of its own
//! (a loom `UnsafeCell`, so that loom reports a reader that could see the page before its
//! preparation), installs it with the engine's [`ptep_cmpxchg_none`], and then, as
//! `do_anonymous_page` does in that mode, either accounts the page (RSS by the engine's
//! atomic counters) or, having lost, frees it. A third thread plays the MMU: it loads the PTE
//! with `Acquire` and reads the page it maps.
//!
//! Checked in every interleaving: exactly one install wins; the PTE maps the winner's page;
//! the loser's page is freed and the winner's is not (no leak, no double free); RSS counts
//! one page; the MMU never reads a page before it was zeroed.
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use loom::thread;
use pagelab_mm::policy::RssCounter;
use pagelab_mm::vm::pgtable::{Pte, ptep_cmpxchg_none};
use pagelab_mm::vm::rss::{Rss, RssType, TaskRss};
use pagelab_mm::{CpuId, Pfn};

/// A page frame: its first word and its reference count (1 while allocated).
struct Frame {
    word: UnsafeCell<u64>,
    refcount: AtomicU32,
}

struct Machine {
    pte: AtomicU64,
    frames: [Frame; 3],
    rss: Rss,
}

// SAFETY: test scaffold: a frame's word is written only by the thread that allocated it,
// before publishing it, and read only through the PTE; loom's UnsafeCell reports any access
// the protocol fails to order.
unsafe impl Sync for Machine {}

const GARBAGE: u64 = 0xdead_beef;

impl Machine {
    fn new() -> Self {
        let frame = || Frame {
            // What the previous owner left: the fault must clear it before mapping.
            word: UnsafeCell::new(GARBAGE),
            refcount: AtomicU32::new(0),
        };
        Machine {
            pte: AtomicU64::new(0),
            frames: [frame(), frame(), frame()],
            rss: Rss::new(RssCounter::Atomic, 2),
        }
    }

    /// `do_anonymous_page` in `Ptl::Atomic` mode, for frame `f`: whether it won.
    fn fault(&self, f: usize, cpu: u16) -> bool {
        let frame = &self.frames[f];
        frame.refcount.store(1, Ordering::Relaxed);
        // SAFETY: the frame is this thread's alone until the PTE publishes it.
        frame.word.with_mut(|p| unsafe { *p = 0 });
        let won = ptep_cmpxchg_none(&self.pte, Pte::new(Pfn(f as u32), true));
        if won {
            let task = TaskRss::default();
            self.rss.add(&task, CpuId(cpu), RssType::Anon, 1);
        } else {
            // discard_new_anon: the page was never visible to anyone else.
            assert_eq!(frame.refcount.fetch_sub(1, Ordering::Relaxed), 1);
        }
        won
    }

    /// The MMU: translate and read, as `PageTable::translate` + a load do.
    fn read(&self) -> Option<u64> {
        let pte = Pte(self.pte.load(Ordering::Acquire));
        if !pte.present() {
            return None;
        }
        let f = &self.frames[pte.pfn().idx()];
        // SAFETY: loom checks that the frame's preparation happens-before this read.
        Some(f.word.with(|p| unsafe { *p }))
    }
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

/// Interleaving covered: two faults on one empty PTE, frames 1 and 2, and a reader.
#[test]
fn two_faults_race_to_install_one_pte() {
    model(|| {
        let m = Arc::new(Machine::new());
        let (m1, m2, m3) = (m.clone(), m.clone(), m.clone());
        let t1 = thread::spawn(move || m1.fault(1, 0));
        let t2 = thread::spawn(move || m2.fault(2, 1));
        let mmu = thread::spawn(move || {
            if let Some(v) = m3.read() {
                assert_eq!(v, 0, "the MMU saw a page before it was zeroed");
            }
        });
        let (w1, w2) = (t1.join().unwrap(), t2.join().unwrap());
        mmu.join().unwrap();
        assert!(w1 ^ w2, "exactly one install wins ({w1}, {w2})");
        let winner = if w1 { 1 } else { 2 };
        let loser = 3 - winner;
        let pte = Pte(m.pte.load(Ordering::Relaxed));
        assert_eq!(pte.pfn(), Pfn(winner as u32), "the mapping is the winner's");
        assert_eq!(m.frames[winner].refcount.load(Ordering::Relaxed), 1);
        assert_eq!(
            m.frames[loser].refcount.load(Ordering::Relaxed),
            0,
            "loser leaked"
        );
        assert_eq!(
            m.rss.sum(RssType::Anon),
            1,
            "RSS counts the one mapped page"
        );
        assert_eq!(m.read(), Some(0));
    });
}
