//! will-it-scale's page-fault tests (tests/page_fault{1,2,3}.c).
//!
//! Per iteration each task maps `MEMSIZE` (128 MiB), writes one word in every page and unmaps
//! it, counting one operation per page written:
//! - `page_fault1`: anonymous private memory: zero-fill faults, and in threads mode mmap_lock
//!   and the shared RSS counters and TLB shootdowns of one mm;
//! - `page_fault2`: a private mapping of the task's own sparse file: copy-on-write faults
//!   (page-cache lookup plus a new anonymous page);
//! - `page_fault3`: a shared mapping of the task's own file: the page-cache page is dirtied.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::WorkloadError;
use crate::runner::bump;
use crate::vm::Vm;

/// will-it-scale's `MEMSIZE`.
pub const MEMSIZE: u64 = 128 << 20;
const PAGE: u64 = 4096;

/// Which of the three.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    Anon,
    PrivateFile,
    SharedFile,
}

/// Touch every page of `[addr, addr + len)`, bumping `counter` per page; stops early when
/// `stop` is set (checked every 64 pages).
fn touch<V: Vm>(
    vm: &V,
    addr: u64,
    len: u64,
    counter: &AtomicU64,
    stop: &AtomicBool,
) -> Result<(), WorkloadError> {
    let mut off = 0;
    while off < len {
        vm.store(addr + off)?;
        bump(counter);
        off += PAGE;
        if off % (64 * PAGE) == 0 && stop.load(Ordering::Relaxed) {
            break;
        }
    }
    Ok(())
}

/// One task's loop until `stop`.
pub fn task_loop<V: Vm>(
    vm: &V,
    variant: Variant,
    memsize: u64,
    counter: &AtomicU64,
    stop: &AtomicBool,
) -> Result<(), WorkloadError> {
    let file = match variant {
        Variant::Anon => None,
        _ => Some(vm.create_file(memsize)?),
    };
    while !stop.load(Ordering::Relaxed) {
        let addr = match (&file, variant) {
            (None, _) => vm.mmap_anon(memsize)?,
            (Some(f), v) => vm.mmap_file(f, memsize, v == Variant::SharedFile)?,
        };
        let r = touch(vm, addr, memsize, counter, stop);
        vm.munmap(addr, memsize)?;
        r?;
    }
    Ok(())
}
