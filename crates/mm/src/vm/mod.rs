//! Address spaces and the page-fault path: VMAs (`vma`), per-VMA locks (`vma_lock`), lock-free faults (`vma_rcu`), page-table range locks (`range_lock`), the
//! address space and mmap/munmap (`mm`), page tables and their locks (`pgtable`), faults
//! (`fault`), files and the page cache (`filemap`), RSS counters (`rss`) and TLB shootdown
//! with the unmap gather (`tlb`).

pub mod fault;
pub mod filemap;
pub mod mm;
pub mod pgtable;
pub mod range_lock;
pub mod rss;
pub mod tlb;
pub mod vma;
pub mod vma_lock;
pub mod vma_rcu;
pub mod vma_shard;
