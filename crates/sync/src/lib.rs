//! Instrumented lock primitives for pagelab, modelled on the Linux kernel's.
//!
//! pagelab re-implements the kernel's memory-management paths (page allocator, faults,
//! LRU) on ordinary threads to study lock scalability. This crate supplies the locks
//! those paths take, each a userspace rendering of the kernel mechanism it stands for:
//!
//! | type | kernel mechanism | used for |
//! | --- | --- | --- |
//! | [`TicketLock`] | x86 ticket spinlock (pre-4.2) | comparison baseline |
//! | [`QueuedSpinLock`] | qspinlock (kernel/locking/qspinlock.c) | `spinlock_t` |
//! | [`SpinLock`] | `spinlock_t`, kind chosen at run time ([`LockKind`]) | zone->lock, pcp->lock, lru_lock, PTLs |
//! | [`RwSem`] | rwsem (kernel/locking/rwsem.c) | mmap_lock |
//! | [`SeqCount`] | `seqcount_t` (include/linux/seqlock.h) | `mm_lock_seq`, lockless walks |
//! | [`PerCpuCounter`] | lib/percpu_counter.c | RSS and other hot counters |
//! | [`RcuCell`] | RCU (`rcu_read_lock`, `rcu_assign_pointer`, `call_rcu`) | the VMA tree |
//!
//! Locks are counted per class, per thread, and folded when read ([`stats`], a reduced
//! `CONFIG_LOCK_STAT`), switched process-wide by [`stats::set_enabled`]; no counter lives in a
//! lock. Every waiting loop uses [`Backoff`], which yields once
//! spinning has not paid off, because pagelab runs more threads than cores and a lock
//! holder can be preempted (unlike in the kernel). Every primitive is built on [`shim`],
//! so the same code is model-checked with loom under `RUSTFLAGS="--cfg loom"`
//! (see `tests/loom.rs`).

#![warn(missing_docs)]

pub mod backoff;
pub mod percpu_counter;
pub mod qspinlock;
pub mod rcu;
pub mod rwsem;
pub mod seqcount;
pub mod shim;
pub mod spinlock;
pub mod stats;
pub mod ticket;
pub mod trace;

pub use backoff::Backoff;
pub use crossbeam_utils::CachePadded;
pub use percpu_counter::{PerCpuCounter, default_batch};
pub use qspinlock::{QueuedSpinGuard, QueuedSpinLock};
pub use rcu::{RcuCell, RcuDomain, RcuGuard, RcuReader};
pub use rwsem::{RwSem, RwSemReadGuard, RwSemWriteGuard, RwsemAlgo};
pub use seqcount::SeqCount;
pub use spinlock::{LockKind, ParseLockKindError, SpinGuard, SpinLock};
pub use stats::{ClassStats, Domain as LockStatDomain, LockStatsSnapshot, Side};
pub use ticket::{TicketGuard, TicketLock};
pub use trace::{LockClass, Scope};
