//! Per-CPU LRU add batches and their flushes (mm/swap.c `folio_add_lru`,
//! `folio_batch_move_lru`, `lru_add_drain`, `lru_add_drain_all`), and Daniel Jordan's 2018
//! splice variant ("mm: splice local lists onto the front of the LRU").
//!
//! # What it models
//!
//! `folio_add_lru` takes a reference on the page (the batch's: the page cannot be freed while
//! batched) and puts it in this CPU's `cpu_fbatches.lru_add`, a `folio_batch` of
//! `lru.batch` pages (`PAGEVEC_SIZE` 14 before 5.17, `FOLIO_BATCH` 15, or 31). A full batch is
//! flushed, and `lru_add_drain` flushes the local batch early; then the batch's references are
//! dropped through the release path (`folios_put`), which frees any page whose user let go of
//! it in the meantime.
//!
//! * `add = "batch"` (`folio_batch_move_lru`): walk the batch in order and take the lru_lock
//!   once per run of consecutive pages under the same lock (`folio_lruvec_relock_irqsave`
//!   relocks only when the lock changes: per lruvec since 5.11, per node before); under it set
//!   `PG_lru` and link each page at the hot end of the list its flags say.
//! * `add = "splice"`: sort the batch into one local chain per (lruvec, list) *outside any
//!   lock* (the pages are the batch's own: not `PG_lru`, on no shared list, pinned by the
//!   batch's reference, so nobody else reads or writes their links), then take each lock once
//!   and splice every chain it protects in O(1).
//!
//! # The `PG_lru` handoff under `splice`
//!
//! `PG_lru` is the isolation token: an isolator test-and-clears it without any lock and only
//! the winner goes on to take the lruvec lock and unlink the page. Setting `PG_lru` (even with
//! release ordering) *before* the splice, as `LruAdd::Splice`'s one-line summary reads, lets a
//! page carry the token while still on the splicer's private chain: an isolator can win it,
//! take the lock before the splice does and unlink a page that is not on the list (corrupting
//! the private chain and the list's counter), and the splicer then splices a page that someone
//! has isolated (the loom model below catches exactly that). Daniel Jordan's v2 avoided it by
//! building the local lists under the lock. Here the chains are still built outside any lock,
//! and `PG_lru` is set only *after* the page's lock has been released with the page on its
//! shared list. So:
//!
//! * an isolator that sees `PG_lru` clear does not see the page (it is either still private
//!   or on the list without the token, which the kernel's scanners already tolerate: a page
//!   whose `PG_lru` a racing isolator cleared sits on the list the same way);
//! * an isolator that wins `PG_lru` read it from the splicer's store, which comes after the
//!   splicer's unlock; its own lock acquisition comes after its read, so its critical section
//!   is ordered after the splice (by coherence of the flag word, without relying on the
//!   `Release`/`AcqRel` pair, which we use anyway) and it finds the page linked and unlinks it
//!   exactly once;
//! * a page on a shared list without `PG_lru` cannot be freed meanwhile: the batch's reference
//!   is dropped only after `PG_lru` is set.
//!
//! Under loom the flag lives in `std` atomics (page metadata), so every `PG_lru` and reference
//! count operation of this layer is preceded by a loom scheduling point (`Lru::sched_point`)
//! and loom explores where the other threads' steps fall between them; the ordering argument
//! above is by hand (`tests/loom_lru.rs`, `splice_publish_races_isolate`).
//!
//! # Locks
//!
//! The per-CPU batch is a `SpinLock<Batch>`: the owner takes it by trylock (if a remote drain
//! holds it, the page is linked at once with a lock hold of its own, as the kernel does while
//! the LRU caches are disabled), `drain` and `drain_all` by a blocking lock, and the flush runs
//! with it held, so that when `drain_all` returns every page added before it started is on its
//! list (`lru_add_drain_all` waits for the drain work on every CPU). Lock order: batch lock,
//! then lru_lock (one at a time), then the allocator's locks (releasing the batch's
//! references may free pages). Invariant (checked by `Lru::check`): a batched page is not
//! `PG_lru`, is on no list and in no other batch, and holds a reference.

use super::LruList;
use super::lruvec::LruGuard;
use super::size_stats::StatCpu;
use super::smp_list::LocalChain;
use super::stats::LruEvent;
use super::{Loc, Lru};
use crate::cpu::CpuId;
use crate::page::Pfn;
use crate::policy::LruAdd;

/// Largest `lru.batch` the policy accepts.
pub const MAX_BATCH: usize = 64;

/// One CPU's `folio_batch` of pages waiting to join the LRU.
pub struct Batch {
    nr: usize,
    pfns: [Pfn; MAX_BATCH],
}

impl Default for Batch {
    fn default() -> Self {
        Self::new()
    }
}

impl Batch {
    pub const fn new() -> Self {
        Batch {
            nr: 0,
            pfns: [Pfn(0); MAX_BATCH],
        }
    }

    pub fn len(&self) -> usize {
        self.nr
    }

    pub fn is_empty(&self) -> bool {
        self.nr == 0
    }

    pub fn pages(&self) -> &[Pfn] {
        &self.pfns[..self.nr]
    }

    fn push(&mut self, pfn: Pfn) {
        self.pfns[self.nr] = pfn;
        self.nr += 1;
    }
}

/// A flush's local chain for one (lock, lruvec, list).
#[derive(Clone, Copy)]
struct Run {
    lock: usize,
    slot: usize,
    lru: LruList,
    chain: LocalChain,
}

impl Lru {
    /// `folio_add_lru` through the per-CPU batch.
    pub(super) fn add_batched(&self, cpu: CpuId, pfn: Pfn) {
        let Some(mut batch) = self.batches[cpu].try_lock() else {
            // A remote drain holds our batch: link the page now instead of waiting.
            self.events.count(cpu, LruEvent::BatchTrylockFail, 1);
            self.add_direct(cpu, pfn);
            return;
        };
        // The batch's reference (`folio_get`).
        self.sched_point();
        self.mem.get_page(pfn);
        batch.push(pfn);
        if batch.len() >= self.batch_size {
            self.flush(cpu, &mut batch);
        }
    }

    /// Move every batched page to its list and drop the batch's references. The caller holds
    /// the batch's lock.
    fn flush(&self, cpu: CpuId, batch: &mut Batch) {
        if batch.is_empty() {
            return;
        }
        let pfns = batch.pages();
        self.events.count(cpu, LruEvent::Flush, 1);
        self.events
            .count(cpu, LruEvent::FlushPages, pfns.len() as u64);
        let holds = match self.add_mode {
            LruAdd::Splice => self.splice_lru(cpu, pfns),
            LruAdd::Batch | LruAdd::PerPage => self.move_lru(cpu, pfns),
        };
        self.events.count(cpu, LruEvent::FlushLockHold, holds);
        // `folios_put(fbatch)`: pages released while batched are freed here.
        self.release_pages(cpu, pfns);
        batch.nr = 0;
    }

    /// `folio_batch_move_lru` with `lru_add`: one lock hold per run of pages under the same
    /// lock. Returns the number of holds.
    fn move_lru(&self, cpu: CpuId, pfns: &[Pfn]) -> u64 {
        let pages = self.mem.pages();
        let mut held: Option<(usize, LruGuard<'_>)> = None;
        let mut holds = 0;
        for &pfn in pfns {
            let Loc { lock, slot } = self.locate(pfn);
            if held.as_ref().is_none_or(|(l, _)| *l != lock) {
                drop(held.take());
                held = Some((lock, self.locks[lock].lock_for_add()));
                holds += 1;
            }
            let Some((_, guard)) = held.as_mut() else {
                unreachable!("locked above")
            };
            let page = &pages[pfn];
            if self.mglru.is_some() {
                self.lrugens[self.lruvec_index(lock, slot)].prepare_link(page);
            }
            self.clear_unevictable(page);
            guard[slot].add_front(pages, LruList::of(page.flags()), pfn, StatCpu::Cpu(cpu));
            // Under the lock: an isolator that wins the flag waits for this hold to end.
            super::set_lru(page);
        }
        holds
    }

    /// The splice flush: local chains built outside any lock, one hold per lock, `PG_lru` set
    /// after the splices (see the module documentation). Returns the number of holds.
    fn splice_lru(&self, cpu: CpuId, pfns: &[Pfn]) -> u64 {
        let pages = self.mem.pages();
        let empty = Run {
            lock: 0,
            slot: 0,
            lru: LruList::InactiveAnon,
            chain: LocalChain::new(),
        };
        debug_assert!(
            self.mglru.is_none(),
            "policy validation refuses splice with MGLRU"
        );
        let mut runs = [empty; MAX_BATCH];
        let mut nr = 0;
        for &pfn in pfns {
            let Loc { lock, slot } = self.locate(pfn);
            let lru = LruList::of(pages[pfn].flags());
            let i = match runs[..nr]
                .iter()
                .position(|r| r.lock == lock && r.slot == slot && r.lru == lru)
            {
                Some(i) => i,
                None => {
                    runs[nr] = Run {
                        lock,
                        slot,
                        lru,
                        ..empty
                    };
                    nr += 1;
                    nr - 1
                }
            };
            runs[i].chain.push_front(pages, pfn.0);
        }
        let runs = &mut runs[..nr];
        runs.sort_unstable_by_key(|r| r.lock);
        let mut holds = 0;
        for group in runs.chunk_by(|a, b| a.lock == b.lock) {
            let guard = self.locks[group[0].lock].lock_for_add();
            holds += 1;
            for r in group {
                guard[r.slot].splice_front(pages, r.lru, &r.chain, StatCpu::Cpu(cpu));
            }
        }
        // Every page is on its shared list and every lock released: publish the token.
        for &pfn in pfns {
            self.sched_point();
            self.clear_unevictable(&pages[pfn]);
            super::set_lru(&pages[pfn]);
        }
        holds
    }

    /// `lru_add_drain`: flush `cpu`'s batch now.
    pub fn drain(&self, cpu: CpuId) {
        if self.add_mode == LruAdd::PerPage {
            return;
        }
        let mut batch = self.batches[cpu].lock();
        self.flush(cpu, &mut batch);
    }

    /// `lru_add_drain_all`: flush every CPU's batch from here. The kernel queues the drain on
    /// each CPU and waits; the engine takes each batch's lock instead, which the owner only
    /// trylocks, and counts and frees on the drained CPU's behalf as the work item would.
    pub fn drain_all(&self) {
        if self.add_mode == LruAdd::PerPage {
            return;
        }
        for (cpu, batch) in self.batches.iter() {
            let mut batch = batch.lock();
            self.flush(cpu, &mut batch);
        }
    }
}
