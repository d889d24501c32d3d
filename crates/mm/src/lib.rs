//! pagelab's engine: the kernel's memory-management paths re-implemented in userspace, on real
//! threads over a real memory arena, with every scalability technique a policy switch.
//!
//! Layout, one kernel concept per module:
//! - [`arena`]: the host memory that plays RAM; [`page`]: frame metadata (`struct page`);
//!   [`list`]: intrusive page lists; [`cpu`]: virtual CPUs and per-CPU data;
//! - [`alloc`]: the page allocator: [`alloc::buddy`] (zones, free areas, watermarks),
//!   [`alloc::pcp`] (per-CPU page lists), [`alloc::prezero`] (background zeroing),
//!   [`alloc::slab`] (kmalloc);
//! - [`vm`]: address spaces, VMAs and per-VMA locks, page tables, the fault path, files,
//!   RSS counters, TLB shootdown; [`lru`]: LRU lists, their locks and batching;
//! - [`kernel`]: one engine instance (a profile booted on an arena); [`task`]: the threads of
//!   simulated programs, with the software MMU;
//! - [`policy`]: the switches a profile sets; [`vmstat`]: event counters;
//!   [`kthread`]: background threads.

pub mod alloc;
pub mod arena;
pub mod cpu;
mod hold_stamps;
pub mod kernel;
pub mod kthread;
pub mod list;
pub mod lru;
pub mod page;
pub mod policy;
pub mod reclaim;
pub mod task;
pub mod vm;
pub mod vmstat;

pub use alloc::{AllocError, Census, Gfp, Mem, MemConfig, MemError, PageAllocator, TunablesFor};
pub use cpu::CpuId;
pub use kernel::Kernel;
pub use page::{PAGE_SIZE, Pfn};
pub use policy::Policy;
pub use task::Task;
pub use vm::fault::FaultError;
pub use vm::mm::{MapKind, Mm, MmError};

/// Helpers shared by the unit tests of several modules.
#[cfg(test)]
pub(crate) mod test_trace {
    use pagelab_sync::trace::{Event, Kind, Sym};

    /// How many symbolic list-entry writes of class `class` the recorded events hold: the
    /// neighbours' links a list operation wrote (`Sym::Entry`), which replay resolves to the
    /// CPU that linked them.
    pub(crate) fn entry_writes(ev: &[Event], class: &str) -> usize {
        ev.iter()
            .filter(|e| {
                e.class.name == class
                    && matches!(
                        e.kind,
                        Kind::Line {
                            write: true,
                            sym: Sym::Entry
                        } | Kind::Store { sym: Sym::Entry }
                    )
            })
            .count()
    }
}
