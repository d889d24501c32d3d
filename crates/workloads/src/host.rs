//! The host-kernel target: the same workloads through real system calls, so the engine can be
//! compared with the kernel it models on the same machine, in the same run.
//!
//! This is the workloads crate's only `unsafe` code: mapping and unmapping host memory and
//! storing into it. Soundness is kept local: a `HostVm` remembers the mappings it made and
//! refuses a store outside them, so no safe call can write through a dangling address.

use std::cell::RefCell;
use std::os::fd::OwnedFd;

use rustix::mm::{MapFlags, ProtFlags};

use crate::WorkloadError;
use crate::vm::Vm;

fn host_err(what: &str, e: impl std::fmt::Display) -> WorkloadError {
    WorkloadError::Host(format!("{what}: {e}"))
}

/// A task on the host: its live mappings.
#[derive(Default)]
pub struct HostVm {
    maps: RefCell<Vec<(u64, u64)>>,
}

impl HostVm {
    pub fn new() -> Self {
        Self::default()
    }

    fn record(&self, addr: u64, len: u64) -> u64 {
        self.maps.borrow_mut().push((addr, len));
        addr
    }
}

impl Vm for HostVm {
    type File = OwnedFd;

    fn mmap_anon(&self, len: u64) -> Result<u64, WorkloadError> {
        // SAFETY: a fresh private anonymous mapping at an address the kernel picks aliases no
        // Rust object.
        let p = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                len as usize,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE,
            )
        }
        .map_err(|e| host_err("mmap", e))?;
        Ok(self.record(p as u64, len))
    }

    fn create_file(&self, len: u64) -> Result<OwnedFd, WorkloadError> {
        let fd = rustix::fs::memfd_create("pagelab", rustix::fs::MemfdFlags::CLOEXEC)
            .map_err(|e| host_err("memfd_create", e))?;
        rustix::fs::ftruncate(&fd, len).map_err(|e| host_err("ftruncate", e))?;
        Ok(fd)
    }

    fn mmap_file(&self, file: &OwnedFd, len: u64, shared: bool) -> Result<u64, WorkloadError> {
        let flags = if shared {
            MapFlags::SHARED
        } else {
            MapFlags::PRIVATE
        };
        // SAFETY: a new mapping of a file we own, at an address the kernel picks.
        let p = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len as usize,
                ProtFlags::READ | ProtFlags::WRITE,
                flags,
                file,
                0,
            )
        }
        .map_err(|e| host_err("mmap", e))?;
        Ok(self.record(p as u64, len))
    }

    #[inline]
    fn store(&self, addr: u64) -> Result<(), WorkloadError> {
        let ok = self
            .maps
            .borrow()
            .iter()
            .any(|&(a, l)| addr >= a && addr + 8 <= a + l);
        if !ok || !addr.is_multiple_of(8) {
            return Err(WorkloadError::Fault(format!(
                "store to {addr:#x} outside this task's mappings"
            )));
        }
        // SAFETY: `addr` is 8-aligned and inside a live writable mapping this task made (checked
        // above); only atomic-free plain memory is behind it, owned by no Rust object.
        unsafe { (addr as *mut u64).write_volatile(0) };
        Ok(())
    }

    fn munmap(&self, addr: u64, len: u64) -> Result<(), WorkloadError> {
        let mut maps = self.maps.borrow_mut();
        let Some(i) = maps.iter().position(|&(a, l)| a == addr && l == len) else {
            return Err(WorkloadError::Fault(format!(
                "munmap of {addr:#x}+{len:#x}, not a mapping of this task"
            )));
        };
        maps.swap_remove(i);
        // SAFETY: the range is exactly one mapping this task made and no longer records, so
        // no later store can reach it.
        unsafe { rustix::mm::munmap(addr as *mut _, len as usize) }
            .map_err(|e| host_err("munmap", e))
    }

    /// The host kernel's system time for this thread: its time in the fault path and syscalls.
    fn fault_ns(&self) -> Option<u64> {
        Some(thread_user_sys_ns().1)
    }
}

impl Drop for HostVm {
    fn drop(&mut self) {
        for (a, l) in self.maps.get_mut().drain(..) {
            // SAFETY: as in `munmap`: our own mapping, forgotten before it is unmapped.
            let _ = unsafe { rustix::mm::munmap(a as *mut _, l as usize) };
        }
    }
}

/// User and system CPU time of the calling thread (`getrusage(RUSAGE_THREAD)`), in ns.
pub fn thread_user_sys_ns() -> (u64, u64) {
    // SAFETY: `getrusage` only writes the zero-initialised struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage struct owned by this frame.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    if rc != 0 {
        return (0, 0);
    }
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    (ns(ru.ru_utime), ns(ru.ru_stime))
}
