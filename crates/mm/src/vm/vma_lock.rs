//! Per-VMA locks (mm/mmap_lock.c, include/linux/mmap_lock.h; Suren Baghdasaryan, 6.4 and 6.15).
//!
//! A page fault looks its VMA up under RCU and takes that VMA's lock for read instead of the
//! mm-wide mmap_lock, so faults on different VMAs of one address space stop contending (and
//! faults on the *same* VMA contend only on that VMA's lock line, which is why one shared VMA
//! gains little). Writers still take mmap_lock for write and then write-lock each VMA they
//! change.
//!
//! The sequence protocol: a VMA is write-locked iff `vma.vm_lock_seq == mm.mm_lock_seq`. A
//! writer holding mmap_lock for write drains the VMA's readers and copies the mm's sequence into
//! the VMA; `mmap_write_unlock` advances the mm's sequence, which releases every VMA it locked at
//! once (`vma_end_write_all`). A reader checks the sequences racily, takes a read reference,
//! re-checks them with acquire ordering and gives up on any mismatch; the fault then falls back
//! to mmap_lock.
//!
//! Two variants, chosen by policy:
//! - [`VmaLockKind::Rwsem`] (6.4): a per-VMA rwsem taken by `try_read`, plus a `detached`
//!   flag for VMAs already removed from the tree.
//! - [`VmaLockKind::Refcount`] (6.15): no lock object; `vm_refcnt` is 0 when detached, 1 when
//!   attached, +1 per reader, and a writer adds [`VMA_LOCK_OFFSET`] and waits for the readers
//!   to drain. A reader's increment is refused when the count is 0 or at/above the offset.
//!
//! - [`VmaLockKind::Rcu`] (research, `mm.vma_lock = "rcu"`): no reader gate at all; faults
//!   validate a per-VMA sequence count instead ([`crate::vm::vma_rcu`]).
//!
//! The atomics come from `pagelab_sync::shim`, so the protocol is model-checked by loom
//! (`tests/loom_vma.rs`).

use pagelab_sync::shim::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use pagelab_sync::trace::{self, Access, LockModel, Sym};
use pagelab_sync::{Backoff, RwSem, RwSemReadGuard};

use crate::vm::vma_rcu::VmaSeq;

/// `VMA_LOCK_OFFSET`: added to `vm_refcnt` by a writer; readers are refused above it.
pub const VMA_LOCK_OFFSET: u32 = 0x4000_0000;

/// Which per-VMA lock a VMA carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VmaLockKind {
    Rwsem,
    Refcount,
    /// Lock-free faults: see [`crate::vm::vma_rcu`].
    Rcu,
}

/// Why a reader did not get the VMA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadLockFail {
    /// Write-locked (sequence match) or a writer holds the lock.
    Locked,
    /// Already removed from the tree.
    Detached,
}

// Every VMA of an engine uses the same variant, and boxing the rwsem would put a pointer
// chase on every fault, so the size difference is the price of the dispatch.
#[allow(clippy::large_enum_variant)]
enum Inner {
    Rwsem {
        lock: RwSem<()>,
        detached: AtomicBool,
    },
    Refcount {
        refcnt: AtomicU32,
    },
    Rcu(VmaSeq),
}

/// The per-VMA lock (the rwsem of 6.4, or `vm_refcnt` of 6.15): one per VMA.
pub static VMA_LOCK: pagelab_sync::LockClass =
    pagelab_sync::LockClass::new("vma lock", pagelab_sync::Scope::Vma);

/// `vma->vm_lock_seq`: read by every per-VMA-lock fault (`vma_start_read`), written by the
/// writer that write-locks the VMA (`vma_start_write`). A line of the VMA's, so shared by the
/// threads that fault one VMA.
pub static VM_LOCK_SEQ: pagelab_sync::LockClass =
    pagelab_sync::LockClass::new("vm_lock_seq", pagelab_sync::Scope::Vma);

/// `mm->mm_lock_seq`: read by every per-VMA-lock fault, advanced by `mmap_write_unlock`
/// (`vma_end_write_all`). A line of the mm's, shared by its threads.
pub static MM_LOCK_SEQ: pagelab_sync::LockClass =
    pagelab_sync::LockClass::new("mm_lock_seq", pagelab_sync::Scope::Mm);

/// A per-VMA read hold; dropping it is `vma_end_read`.
pub enum VmaReadGuard<'a> {
    Rwsem(RwSemReadGuard<'a, ()>),
    Refcount(&'a AtomicU32),
}

impl Drop for VmaReadGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        if let VmaReadGuard::Refcount(r) = self {
            pagelab_sync::trace::release(
                &VMA_LOCK,
                *r as *const AtomicU32 as usize,
                LockModel::Refcount,
                Access::Shared,
            );
            // Release: the fault's work happens-before a writer's drain observes the drop.
            r.fetch_sub(1, Ordering::Release);
        }
    }
}

/// The per-VMA lock state (`vm_lock_seq` and the variant's reader gate).
pub struct VmaLock {
    vm_lock_seq: AtomicU64,
    inner: Inner,
}

/// `mm->mm_lock_seq`: advanced on every `mmap_write_unlock`.
pub struct MmLockSeq(AtomicU64);

impl Default for MmLockSeq {
    fn default() -> Self {
        Self::new()
    }
}

impl MmLockSeq {
    pub fn new() -> Self {
        // VMAs start at seq 0 and the mm at 1, so a fresh VMA is not write-locked.
        MmLockSeq(AtomicU64::new(1))
    }

    #[inline]
    pub fn load(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// `vma_end_write_all`: release every VMA write-locked under this mmap_lock hold. The
    /// caller still holds mmap_lock for write.
    #[inline]
    pub fn end_write_all(&self) {
        trace::line_write(&MM_LOCK_SEQ, self as *const Self as usize);
        let s = self.0.load(Ordering::Relaxed);
        self.0.store(s + 1, Ordering::Release);
    }
}

impl VmaLock {
    /// A lock for a VMA about to be attached (published in the tree).
    pub fn new(kind: VmaLockKind) -> Self {
        VmaLock {
            vm_lock_seq: AtomicU64::new(0),
            inner: match kind {
                VmaLockKind::Rwsem => Inner::Rwsem {
                    lock: RwSem::new(()).with_class(&VMA_LOCK),
                    detached: AtomicBool::new(false),
                },
                VmaLockKind::Refcount => Inner::Refcount {
                    refcnt: AtomicU32::new(1),
                },
                VmaLockKind::Rcu => Inner::Rcu(VmaSeq::new()),
            },
        }
    }

    /// The sequence count of a [`VmaLockKind::Rcu`] VMA, which faults validate instead of
    /// taking a read lock; `None` for the other kinds.
    #[inline]
    pub fn rcu_seq(&self) -> Option<&VmaSeq> {
        match &self.inner {
            Inner::Rcu(s) => Some(s),
            _ => None,
        }
    }

    /// `vma_start_read`: try to take a read reference, held until the guard drops
    /// (`vma_end_read`). A [`VmaLockKind::Rcu`] VMA has no read lock to take and always
    /// refuses (its faults use [`VmaLock::rcu_seq`]).
    #[inline]
    pub fn start_read(&self, mm_seq: &MmLockSeq) -> Result<VmaReadGuard<'_>, ReadLockFail> {
        // The sequence counts' lines: another CPU's write-lock or unmap made them its own.
        trace::line_read(&VM_LOCK_SEQ, &self.vm_lock_seq as *const AtomicU64 as usize);
        trace::line_read(&MM_LOCK_SEQ, mm_seq as *const MmLockSeq as usize);
        // Racy pre-check: a write-locked VMA is refused without touching its lock line.
        if self.vm_lock_seq.load(Ordering::Relaxed) == mm_seq.0.load(Ordering::Relaxed) {
            return Err(ReadLockFail::Locked);
        }
        let guard = match &self.inner {
            Inner::Rwsem { lock, .. } => {
                VmaReadGuard::Rwsem(lock.try_read().ok_or(ReadLockFail::Locked)?)
            }
            Inner::Rcu(_) => return Err(ReadLockFail::Locked),
            Inner::Refcount { refcnt } => {
                // The capture's switch: the reader refused as by a writer, to record the
                // mmap_lock fallback (`pagelab_sync::trace::force_trylock_failure`).
                if pagelab_sync::trace::trylock_forced_to_fail(
                    &VMA_LOCK,
                    refcnt as *const AtomicU32 as usize,
                    LockModel::Refcount,
                    Access::Shared,
                ) {
                    return Err(ReadLockFail::Locked);
                }
                // refcount_inc_not_zero_limited: refuse detached (0) and writer-held counts.
                // The count is read before the compare-and-exchange (a shared fetch first).
                trace::line(
                    &VMA_LOCK,
                    refcnt as *const AtomicU32 as usize,
                    LockModel::Refcount,
                    false,
                    Sym::Here,
                );
                let mut cur = refcnt.load(Ordering::Relaxed);
                loop {
                    if cur == 0 {
                        return Err(ReadLockFail::Detached);
                    }
                    if cur >= VMA_LOCK_OFFSET - 1 {
                        return Err(ReadLockFail::Locked);
                    }
                    match refcnt.compare_exchange_weak(
                        cur,
                        cur + 1,
                        Ordering::Acquire,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => break,
                        Err(c) => cur = c,
                    }
                }
                pagelab_sync::trace::acquire(
                    &VMA_LOCK,
                    refcnt as *const AtomicU32 as usize,
                    LockModel::Refcount,
                    Access::Shared,
                    true,
                );
                VmaReadGuard::Refcount(refcnt)
            }
        };
        // Re-check with acquire ordering now that a writer must wait for us.
        if self.vm_lock_seq.load(Ordering::Acquire) == mm_seq.load() {
            return Err(ReadLockFail::Locked);
        }
        // Only now: a writer detaches while the VMA is write-locked, so a reader that got past
        // the sequence check saw the advance that ends that write lock (acquire) and with it the
        // detach. Checking `detached` before the sequence (as an earlier version did) lets a
        // reader miss a detach that lands in between; the loom model `detached_vma_stays_
        // unlockable` finds that interleaving.
        if let Inner::Rwsem { detached, .. } = &self.inner
            && detached.load(Ordering::Acquire)
        {
            return Err(ReadLockFail::Detached);
        }
        Ok(guard)
    }

    /// Records a plain read of another `vm_area_struct` field on the line of this VMA's lock
    /// word (`mm.vma_lock_line_reads`; only while a recorder runs). The instance is the lock
    /// word's, so the replay charges the read on the line the lock's readers keep writing.
    /// The lock-free kind has no lock word: nothing to record.
    #[inline]
    pub fn trace_line_read(&self) {
        match &self.inner {
            Inner::Rwsem { lock, .. } => lock.trace_line_read(),
            Inner::Refcount { refcnt } => trace::line(
                &VMA_LOCK,
                refcnt as *const AtomicU32 as usize,
                LockModel::Refcount,
                false,
                Sym::Here,
            ),
            Inner::Rcu(_) => {}
        }
    }

    /// Is the VMA write-locked under the current mmap_lock write hold?
    #[inline]
    pub fn is_write_locked(&self, mm_seq: &MmLockSeq) -> bool {
        self.vm_lock_seq.load(Ordering::Relaxed) == mm_seq.0.load(Ordering::Relaxed)
    }

    /// `vma_start_write`: called with mmap_lock held for write. Drains readers, then marks the
    /// VMA write-locked until `mmap_write_unlock`.
    pub fn start_write(&self, mm_seq: &MmLockSeq) {
        let seq = mm_seq.0.load(Ordering::Relaxed);
        if self.vm_lock_seq.load(Ordering::Relaxed) == seq {
            return;
        }
        match &self.inner {
            Inner::Rwsem { lock, .. } => {
                let g = lock.write();
                trace::line_write(&VM_LOCK_SEQ, &self.vm_lock_seq as *const AtomicU64 as usize);
                self.vm_lock_seq.store(seq, Ordering::Relaxed);
                drop(g);
            }
            Inner::Refcount { refcnt } => {
                pagelab_sync::trace::atomic(&VMA_LOCK, refcnt as *const AtomicU32 as usize);
                let attached = refcnt.fetch_add(VMA_LOCK_OFFSET, Ordering::Acquire) != 0;
                let target = VMA_LOCK_OFFSET + u32::from(attached);
                let mut b = Backoff::new();
                while refcnt.load(Ordering::Acquire) != target {
                    b.snooze();
                }
                trace::line_write(&VM_LOCK_SEQ, &self.vm_lock_seq as *const AtomicU64 as usize);
                self.vm_lock_seq.store(seq, Ordering::Relaxed);
                refcnt.fetch_sub(VMA_LOCK_OFFSET, Ordering::Release);
            }
            Inner::Rcu(s) => {
                // No readers to drain: faults in flight find the bump when they validate.
                s.write_begin();
                self.vm_lock_seq.store(seq, Ordering::Relaxed);
            }
        }
    }

    /// `vma_mark_detached`: the VMA left the tree. Called write-locked; afterwards every
    /// `start_read` fails, even once the mm's sequence moves on.
    pub fn mark_detached(&self) {
        match &self.inner {
            Inner::Rwsem { detached, .. } => detached.store(true, Ordering::Release),
            Inner::Rcu(s) => s.mark_detached(),
            Inner::Refcount { refcnt } => {
                // Readers may hold transient references (they fail their sequence check and
                // drop them); wait for the count to fall to the attach reference, then drop it.
                let mut b = Backoff::new();
                while refcnt
                    .compare_exchange(1, 0, Ordering::AcqRel, Ordering::Relaxed)
                    .is_err()
                {
                    b.snooze();
                }
            }
        }
    }

    /// Is the VMA detached?
    pub fn is_detached(&self) -> bool {
        match &self.inner {
            Inner::Rwsem { detached, .. } => detached.load(Ordering::Acquire),
            Inner::Refcount { refcnt } => refcnt.load(Ordering::Acquire) == 0,
            Inner::Rcu(s) => s.is_detached(),
        }
    }
}
