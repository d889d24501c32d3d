//! The host-kernel target: the same workloads through real system calls, so the engine can be
//! compared with the kernel it models on the same machine, in the same run.
//!
//! Mapping, unmapping and storing into host memory is `unsafe`; soundness is kept local: every
//! mapping is a reference-counted region that is unmapped only when the last handle goes, and
//! a store is made only while holding the handle of the region it falls in, so no safe call
//! can write through a dangling address. Threads of one process share a [`HostSpace`].

use std::cell::RefCell;
use std::os::fd::OwnedFd;
use std::sync::{Arc, RwLock};

use rustix::mm::{MapFlags, ProtFlags};

use crate::WorkloadError;
use crate::vm::Vm;

const PAGE: u64 = 4096;

fn host_err(what: &str, e: impl std::fmt::Display) -> WorkloadError {
    WorkloadError::Host(format!("{what}: {e}"))
}

/// One host mapping. It is unmapped when the last handle to it goes, so a task that can still
/// reach it (its own list, or another thread's cache of a shared region) never stores into
/// unmapped memory.
#[derive(Debug)]
struct Region {
    addr: u64,
    len: u64,
    /// Cleared when the region is split ([`HostVm::munmap`] of part of it): its pieces own
    /// the range from then on, so dropping this handle must not unmap anything.
    owns: bool,
}

impl Region {
    fn contains(&self, addr: u64) -> bool {
        addr >= self.addr && addr + 8 <= self.addr + self.len
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        if !self.owns {
            return;
        }
        // SAFETY: the region is a mapping this module made (or a piece of one, which it owns
        // alone since the split), and this is its last handle: no task can reach it any more,
        // so no later store can hit the unmapped range.
        let _ = unsafe { rustix::mm::munmap(self.addr as *mut _, self.len as usize) };
    }
}

/// The mappings of one host process, shared by its threads (the host `mm`): in threads mode a
/// region one task maps (pft's single VMA) is stored into by every task.
#[derive(Debug, Default)]
pub struct HostSpace {
    regions: RwLock<Vec<Arc<Region>>>,
}

impl HostSpace {
    pub fn new() -> Arc<HostSpace> {
        Arc::new(HostSpace::default())
    }
}

/// A task on the host: a thread of a [`HostSpace`], with a private cache of the regions it
/// stores into so that the store path takes no shared lock (a shared lock there would add
/// exactly the cache-line bouncing the benchmarks measure in the kernel).
///
/// The cache holds handles, so a region another thread unmaps stays mapped until this task
/// lets go of it: at [`Vm::idle`] (a barrier, where the workloads hand regions over) or when
/// it unmaps the region itself. Stores outside every region of the space are refused.
pub struct HostVm {
    space: Arc<HostSpace>,
    cache: RefCell<Vec<Arc<Region>>>,
}

impl Default for HostVm {
    fn default() -> Self {
        HostVm::new()
    }
}

impl HostVm {
    /// A task with an address space of its own (a process).
    pub fn new() -> Self {
        HostVm::in_space(&HostSpace::new())
    }

    /// A task sharing `space` with other threads.
    pub fn in_space(space: &Arc<HostSpace>) -> Self {
        HostVm {
            space: space.clone(),
            cache: RefCell::new(Vec::new()),
        }
    }

    /// `n` threads of one new address space.
    pub fn threads(n: usize) -> Vec<HostVm> {
        let space = HostSpace::new();
        (0..n).map(|_| HostVm::in_space(&space)).collect()
    }

    fn record(&self, addr: u64, len: u64) -> u64 {
        let r = Arc::new(Region {
            addr,
            len,
            owns: true,
        });
        self.space
            .regions
            .write()
            .expect("no thread panics holding the region list")
            .push(r.clone());
        self.cache.borrow_mut().push(r);
        addr
    }

    /// Make sure the region holding `addr` is in the cache (taking it from the space if another
    /// thread mapped it); false if no region of the space holds it.
    fn cache_region_of(&self, addr: u64) -> bool {
        if self.cache.borrow().iter().any(|r| r.contains(addr)) {
            return true;
        }
        let found = self
            .space
            .regions
            .read()
            .expect("no thread panics holding the region list")
            .iter()
            .find(|r| r.contains(addr))
            .cloned();
        match found {
            Some(r) => {
                self.cache.borrow_mut().push(r);
                true
            }
            None => false,
        }
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
        if !addr.is_multiple_of(8) {
            return Err(WorkloadError::Fault(format!(
                "unaligned store to {addr:#x}"
            )));
        }
        loop {
            // The cache is only changed by this task, and not while the borrow lasts, so the
            // region's handle in it keeps the mapping alive across the write. No reference
            // count is touched on this path: threads storing into one shared region share no
            // line.
            let cache = self.cache.borrow();
            if cache.iter().any(|r| r.contains(addr)) {
                // SAFETY: `addr` is 8-aligned and inside a writable mapping held by the
                // borrowed cache, which cannot change while borrowed; only plain memory owned
                // by no Rust object is behind it.
                unsafe { (addr as *mut u64).write_volatile(0) };
                return Ok(());
            }
            drop(cache);
            // Slow path: a region another thread of the space mapped.
            if !self.cache_region_of(addr) {
                return Err(WorkloadError::Fault(format!(
                    "store to {addr:#x} outside this task's mappings"
                )));
            }
        }
    }

    /// `mmap(MAP_FIXED)` of fresh anonymous memory over part of a mapping this space made.
    /// The range must lie inside one region; the task holds that region's handle (in its
    /// cache) across the call, so no other thread can unmap or split it meanwhile, and the
    /// region keeps owning the range (its later unmap removes the new pages too). No lock
    /// is taken when the region is already cached, as on the store path.
    fn mmap_fixed_anon(&self, addr: u64, len: u64) -> Result<(), WorkloadError> {
        if !addr.is_multiple_of(PAGE) || len == 0 {
            return Err(WorkloadError::Fault(format!(
                "MAP_FIXED mmap of {addr:#x}+{len:#x}: not page-aligned or empty"
            )));
        }
        let len = len.div_ceil(PAGE) * PAGE;
        if !self.cache_region_of(addr) {
            return Err(WorkloadError::Fault(format!(
                "MAP_FIXED mmap at {addr:#x} outside this task's mappings"
            )));
        }
        let cache = self.cache.borrow();
        if !cache
            .iter()
            .any(|r| addr >= r.addr && addr + len <= r.addr + r.len)
        {
            return Err(WorkloadError::Fault(format!(
                "MAP_FIXED mmap of {addr:#x}+{len:#x} crosses the end of its mapping"
            )));
        }
        // SAFETY: the range lies inside a mapping this module made and the borrowed cache
        // holds its handle, so it stays mapped and unsplit; it backs no Rust object, so
        // replacing its pages by zeroed ones invalidates nothing.
        let p = unsafe {
            rustix::mm::mmap_anonymous(
                addr as *mut _,
                len as usize,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE | MapFlags::FIXED,
            )
        }
        .map_err(|e| host_err("mmap(MAP_FIXED)", e))?;
        drop(cache);
        if p as u64 != addr {
            return Err(WorkloadError::Host(format!(
                "mmap(MAP_FIXED) at {addr:#x} returned {:#x}",
                p as u64
            )));
        }
        Ok(())
    }

    /// `munmap` of whole mappings, or of a page-aligned part of mappings (the kernel splits
    /// the VMA; here the region is split into pieces that each own their range, and the
    /// piece in the hole is dropped, which unmaps it). Splitting needs the region to be held
    /// by no other thread (they let go at their barriers): a thread that still held it could
    /// otherwise store into the hole. Holes in the range are skipped, as the kernel does.
    fn munmap(&self, addr: u64, len: u64) -> Result<(), WorkloadError> {
        let page = PAGE;
        if !addr.is_multiple_of(page) || len == 0 {
            return Err(WorkloadError::Fault(format!(
                "munmap of {addr:#x}+{len:#x}: not page-aligned or empty"
            )));
        }
        let end = addr + len.div_ceil(page) * page;
        // Forget our own handles to what we unmap first, so that only other threads' handles
        // can stand in the way of a split.
        self.cache
            .borrow_mut()
            .retain(|r| r.addr + r.len <= addr || r.addr >= end);
        let holes = {
            let mut regions = self
                .space
                .regions
                .write()
                .expect("no thread panics holding the region list");
            let hit: Vec<usize> = (0..regions.len())
                .filter(|&i| regions[i].addr < end && regions[i].addr + regions[i].len > addr)
                .collect();
            if hit.is_empty() {
                return Err(WorkloadError::Fault(format!(
                    "munmap of {addr:#x}+{len:#x}, not a mapping of this address space"
                )));
            }
            // Exact whole regions are handed over as they are (another thread may still hold
            // one: the mapping then goes when it lets go). A region cut in part must be ours
            // alone.
            for &i in &hit {
                let r = &regions[i];
                let whole = r.addr >= addr && r.addr + r.len <= end;
                if !whole && Arc::strong_count(r) > 1 {
                    return Err(WorkloadError::Fault(format!(
                        "munmap of part of {:#x}+{:#x} while another thread still holds it",
                        r.addr, r.len
                    )));
                }
            }
            let mut holes = Vec::new();
            let mut pieces = Vec::new();
            for &i in hit.iter().rev() {
                let r = regions.swap_remove(i);
                let (ra, re) = (r.addr, r.addr + r.len);
                if ra >= addr && re <= end {
                    holes.push(r);
                    continue;
                }
                let mut whole = Arc::try_unwrap(r).expect("checked: the list held the only handle");
                whole.owns = false;
                let piece = |a: u64, e: u64| {
                    Arc::new(Region {
                        addr: a,
                        len: e - a,
                        owns: true,
                    })
                };
                if ra < addr {
                    pieces.push(piece(ra, addr));
                }
                holes.push(piece(ra.max(addr), re.min(end)));
                if re > end {
                    pieces.push(piece(end, re));
                }
            }
            regions.extend(pieces);
            holes
        };
        // The holes go here (outside the list's lock), unless another thread still holds a
        // whole region (until its next idle).
        drop(holes);
        Ok(())
    }

    /// A barrier: let go of cached regions, so that one another thread unmaps goes now.
    fn idle(&self) {
        self.cache.borrow_mut().clear();
    }

    /// The host kernel's system time for this thread: its time in the fault path and syscalls.
    fn fault_ns(&self) -> Option<u64> {
        Some(thread_user_sys_ns().1)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A region another thread maps is reachable; once unmapped it stays mapped for a thread
    /// that still holds it only until that thread's next barrier, and then stores fail.
    #[test]
    fn threads_share_regions_and_unmapping_waits_for_holders() {
        let vms = HostVm::threads(2);
        let a = vms[0].mmap_anon(1 << 20).unwrap();
        vms[1].store(a + 4096).unwrap();
        vms[0].munmap(a, 1 << 20).unwrap();
        // Thread 1 still holds the region: its store lands in mapped memory.
        vms[1].store(a + 8192).unwrap();
        vms[1].idle();
        assert!(vms[1].store(a + 8192).is_err());
        assert!(vms[0].store(a).is_err());
        // Unmapping twice, or a range that is not a mapping, is an error.
        assert!(vms[0].munmap(a, 1 << 20).is_err());
        // Separate processes do not see each other's mappings.
        let p = HostVm::new();
        let q = HostVm::new();
        let b = p.mmap_anon(1 << 20).unwrap();
        assert!(q.store(b).is_err());
        assert!(p.store(b + 3).is_err(), "unaligned store refused");
    }

    /// Unmapping part of a mapping splits it: the hole is gone (stores refused), the pieces
    /// either side stay usable, and unmapping across pieces and holes removes what is left.
    /// Part of a region another thread still holds is refused until it lets go.
    #[test]
    fn partial_munmap_splits_the_region() {
        let page = PAGE;
        let vms = HostVm::threads(2);
        let a = vms[0].mmap_anon(8 * page).unwrap();
        vms[0].store(a + 3 * page).unwrap();
        vms[0].munmap(a + 3 * page, page).unwrap();
        assert!(vms[0].store(a + 3 * page).is_err());
        vms[0].store(a + 2 * page).unwrap();
        vms[0].store(a + 4 * page).unwrap();
        // The other thread holds the piece it stored into: it cannot be cut under it.
        vms[1].store(a + 5 * page).unwrap();
        let e = vms[0].munmap(a + 5 * page, page).unwrap_err();
        assert!(e.to_string().contains("still holds"), "{e}");
        vms[1].idle();
        vms[0].munmap(a + 5 * page, page).unwrap();
        vms[1].store(a + 6 * page).unwrap();
        vms[1].idle();
        // Across pieces and holes.
        vms[0].munmap(a, 8 * page).unwrap();
        for p in 0..8 {
            assert!(vms[0].store(a + p * page).is_err() && vms[1].store(a + p * page).is_err());
        }
        assert!(vms[0].munmap(a, 8 * page).is_err(), "nothing left to unmap");
        assert_eq!(vms[0].space.regions.read().unwrap().len(), 0);
    }
}
