//! What a workload needs from a target: map, touch, unmap. The engine's tasks and the host's
//! system calls both provide it, so each benchmark is written once.

use crate::WorkloadError;

/// A task's view of its address space.
pub trait Vm {
    /// A file the task can map (an engine file, or a host memfd).
    type File: Send + Sync;

    fn mmap_anon(&self, len: u64) -> Result<u64, WorkloadError>;
    /// A sparse file of `len` bytes (will-it-scale's `mkstemp` + `ftruncate`).
    fn create_file(&self, len: u64) -> Result<Self::File, WorkloadError>;
    fn mmap_file(&self, file: &Self::File, len: u64, shared: bool) -> Result<u64, WorkloadError>;
    /// `mmap(MAP_FIXED)` of anonymous memory at `addr`, replacing what is mapped there. The
    /// range must lie inside one mapping this address space made (the host target refuses
    /// anything else, so that no mapping the program did not make is ever replaced).
    fn mmap_fixed_anon(&self, addr: u64, len: u64) -> Result<(), WorkloadError>;
    /// Write one word at `addr` (faulting it in if needed).
    fn store(&self, addr: u64) -> Result<(), WorkloadError>;
    fn munmap(&self, addr: u64, len: u64) -> Result<(), WorkloadError>;
    /// The task is about to block outside the target (a barrier): it stops running its address
    /// space, so TLB shootdowns need not wait for it (the kernel's lazy TLB mode).
    fn idle(&self) {}

    /// The task runs again after [`Vm::idle`].
    fn resume(&self) {}

    /// Nanoseconds spent handling faults so far, if the target can tell (the engine times its
    /// fault path when asked; the host's kernel time comes from `getrusage` instead).
    fn fault_ns(&self) -> Option<u64> {
        None
    }
}
