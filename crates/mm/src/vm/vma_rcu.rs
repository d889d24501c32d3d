//! Lock-free page faults (`mm.vma_lock = "rcu"`): Bonsai's RCU-protected VMA lookup and the
//! speculative page fault's sequence validation.
//!
//! Two research lines remove the VMA lock from the fault path altogether:
//! - Bonsai (Clements, Kaashoek and Zeldovich, ASPLOS'12) keeps the VMAs in an RCU-balanced
//!   tree: a fault looks its VMA up under RCU and takes neither mmap_sem nor any per-VMA lock,
//!   so it writes no cache line of the VMA; munmap, which still serialises with other writers,
//!   frees VMAs and page-table pages only after an RCU grace period, so a fault still looking
//!   at them never touches freed memory.
//! - The speculative page fault series (Laurent Dufour 2018-2019, Michel Lespinasse 2021,
//!   never merged) faults under RCU and validates against a sequence count once it holds the
//!   PTE lock (`pte_map_lock`): if a writer changed the address space meanwhile, the fault
//!   gives up what it prepared and retries under mmap_lock.
//!
//! The engine combines them as follows. Each VMA carries a sequence count ([`VmaSeq`], the
//! per-VMA `vm_sequence` of Dufour's versions rather than Lespinasse's mm-wide `mmap_seq`,
//! so that an mmap elsewhere does not abort every fault in flight). A writer holding mmap_lock
//! for write bumps the count of every VMA it changes (`vma_start_write`); since the engine
//! never changes a published VMA in place (a change detaches it and publishes new VMAs), a
//! bumped VMA is also detached for good. A fault:
//! 1. finds the VMA in the RCU-published tree and loads its count ([`VmaSeq::begin`]: a read,
//!    no store, no reference count), refusing an odd count (a writer has the VMA);
//! 2. walks the page table *without allocating* (as Lespinasse's series refused a speculative
//!    fault whose page-table levels were not populated): a missing level is a retry under
//!    mmap_lock;
//! 3. prepares its page, takes the PTE lock, and before storing the PTE checks that the count
//!    is unchanged ([`VmaSeq::validate`]); if it moved, it drops the lock, frees what it
//!    prepared and retries under mmap_lock (counted as `vma_lock_retry` and
//!    `vma_rcu_fallback_seq`).
//!
//! Why validation under the PTE lock is enough: munmap bumps the count *before* its zap takes
//! the PTE locks of the range. If the fault's lock hold comes first, the zap finds and removes
//! the PTE the fault installed; if the zap's comes first, the fault's lock acquisition
//! happens after the bump and the fault sees it. A PTE table the zap never visited was
//! reached by the fault through an upper entry written after the munmap's write section, and
//! that chain of lock hand-offs orders the bump before the fault's check too. The page-table
//! pages themselves are only unlinked by munmap and handed to RCU (`call_rcu`), so a fault
//! that walked into one keeps reading a live table until its read section ends.
//!
//! Validating just before the store, inside the same PTE-lock hold, is the kernel series'
//! order (`pte_map_lock` checks, then `set_pte_at`); checking after the store would need the
//! same lock hold and an undo of the PTE, and orders nothing more.

use pagelab_sync::shim::atomic::{AtomicBool, AtomicU64, Ordering};
use pagelab_sync::trace;

/// The sequence line lock-free faults read and munmap writes: per VMA, met by the threads
/// that fault that VMA, so a trace records it and the replay makes a read cheap while no
/// writer touches it (the line stays shared in every reader's cache).
pub static VM_SEQUENCE: pagelab_sync::LockClass =
    pagelab_sync::LockClass::new("vm_sequence", pagelab_sync::Scope::Vma);

use crate::vm::vma_lock::{MmLockSeq, ReadLockFail, VmaLock};

/// A VMA's sequence count for lock-free faults (`vma->vm_sequence` in the SPF series).
///
/// A seqcount whose write section never ends: `write_begin` makes the count odd, and since
/// the engine's writers replace every VMA they write-lock (munmap detaches it), nothing makes
/// it even again. A reader refuses an odd count; one that snapshotted an even count sees the
/// change when it validates. (An even snapshot is what makes the check sound: a reader that
/// loaded the bumped count, but not yet the write-lock sequence or the detach that followed
/// it, would otherwise validate against the writer's own value; the loom model
/// `fault_racing_munmap_completes_before_or_retries` finds that schedule.)
pub struct VmaSeq {
    /// Even while no writer has touched the VMA; odd from the first `write_begin` on.
    seq: AtomicU64,
    /// Removed from the tree (never cleared).
    detached: AtomicBool,
}

impl Default for VmaSeq {
    fn default() -> Self {
        Self::new()
    }
}

impl VmaSeq {
    pub fn new() -> Self {
        VmaSeq {
            seq: AtomicU64::new(0),
            detached: AtomicBool::new(false),
        }
    }

    /// The snapshot a fault validates against later. Only loads: a fault writes no line of
    /// the VMA. Refuses a VMA a writer has write-locked (odd count): `Detached` once it is
    /// out of the tree, `Locked` while the writer still holds it (`lock` and `mm_seq` tell
    /// which, for the counters only).
    #[inline]
    pub fn begin(&self, lock: &VmaLock, mm_seq: &MmLockSeq) -> Result<u64, ReadLockFail> {
        trace::line_read(&VM_SEQUENCE, &self.seq as *const AtomicU64 as usize);
        let s = self.seq.load(Ordering::Acquire);
        if s & 1 == 0 {
            return Ok(s);
        }
        if !lock.is_write_locked(mm_seq) && self.detached.load(Ordering::Acquire) {
            return Err(ReadLockFail::Detached);
        }
        Err(ReadLockFail::Locked)
    }

    /// Is the VMA unchanged since `snapshot`? Call with the PTE lock held: the lock orders a
    /// munmap's bump (made before its zap takes the same lock) before this load.
    #[inline]
    pub fn validate(&self, snapshot: u64) -> bool {
        trace::line_read(&VM_SEQUENCE, &self.seq as *const AtomicU64 as usize);
        self.seq.load(Ordering::Acquire) == snapshot
    }

    /// The writer's side of `vma_start_write`: called with mmap_lock held for write (so
    /// writers are serialised), before the VMA's PTEs are zapped. No reader to drain. The
    /// count becomes odd (or, already odd, moves on and stays odd).
    pub fn write_begin(&self) {
        trace::line_write(&VM_SEQUENCE, &self.seq as *const AtomicU64 as usize);
        let s = self.seq.load(Ordering::Relaxed);
        self.seq.store((s + 1) | 1, Ordering::Release);
    }

    /// `vma_mark_detached`.
    pub fn mark_detached(&self) {
        self.detached.store(true, Ordering::Release);
    }

    pub fn is_detached(&self) -> bool {
        self.detached.load(Ordering::Acquire)
    }

    /// The current count (tests and checks).
    pub fn load(&self) -> u64 {
        self.seq.load(Ordering::Acquire)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::vm::vma_lock::VmaLockKind;

    #[test]
    fn snapshot_survives_nothing_but_no_writer() {
        let mm_seq = MmLockSeq::new();
        let lock = VmaLock::new(VmaLockKind::Rcu);
        let seq = lock.rcu_seq().expect("an rcu VMA has a sequence");
        let s = seq.begin(&lock, &mm_seq).unwrap();
        assert!(seq.validate(s));
        // A writer's whole hold between snapshot and validation is seen.
        lock.start_write(&mm_seq);
        assert_eq!(seq.begin(&lock, &mm_seq), Err(ReadLockFail::Locked));
        mm_seq.end_write_all();
        assert!(!lock.is_write_locked(&mm_seq));
        assert!(!seq.validate(s), "a write-lock and release went unnoticed");
        // Refused from then on, even before the detach is visible (a writer that write-locked
        // the VMA replaces it), and counted as detached after.
        assert_eq!(seq.begin(&lock, &mm_seq), Err(ReadLockFail::Locked));
        lock.start_write(&mm_seq);
        let s2 = seq.load();
        assert!(
            s2 & 1 == 1 && s2 != s + 1,
            "a second write section leaves the count odd and moved"
        );
        lock.mark_detached();
        mm_seq.end_write_all();
        assert_eq!(seq.begin(&lock, &mm_seq), Err(ReadLockFail::Detached));
        assert!(lock.is_detached());
    }
}
