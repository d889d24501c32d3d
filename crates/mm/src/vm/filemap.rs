//! Files and their page cache (mm/filemap.c).
//!
//! An engine file is a sparse file of a fixed size, like the tmpfile will-it-scale's
//! `page_fault2` and `page_fault3` create and `ftruncate`: its pages come into the page cache
//! zero-filled on first touch and stay there after the mappings go, so later faults find them
//! cached. The cache is an array of slots holding `pfn + 1` (0 = not cached), looked up without a
//! lock as the xarray is under RCU, with a speculative reference (`folio_try_get`) re-checked
//! against the slot; insertion and removal serialise on the file's `i_pages` lock.
//!
//! Each cached page holds one reference for the cache; a mapping holds one more per PTE. Cached
//! pages sit on the file LRU lists (not swap-backed).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use pagelab_sync::SpinLock;

use crate::alloc::{AllocError, Gfp};
use crate::cpu::CpuId;
use crate::kernel::Kernel;
use crate::page::{Pfn, pg};

/// A file with a page cache (`struct address_space` of an inode).
pub struct File {
    kernel: std::sync::Weak<Kernel>,
    id: u32,
    nr_pages: u64,
    cache: Box<[AtomicU32]>,
    i_pages: SpinLock<()>,
}

impl std::fmt::Debug for File {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "file {} ({} pages)", self.id, self.nr_pages)
    }
}

/// `mapping` value of a page-cache page: the file id with the top bit set, so it never equals
/// an anonymous page's owner id.
pub const FILE_MAPPING_TAG: u64 = 1 << 63;

impl File {
    pub(crate) fn new(
        kernel: &Arc<Kernel>,
        id: u32,
        nr_pages: u64,
        kind: pagelab_sync::LockKind,
    ) -> File {
        File {
            kernel: Arc::downgrade(kernel),
            id,
            nr_pages,
            cache: (0..nr_pages).map(|_| AtomicU32::new(0)).collect(),
            i_pages: SpinLock::new(kind, ()),
        }
    }

    pub fn id(&self) -> u32 {
        self.id
    }

    pub fn nr_pages(&self) -> u64 {
        self.nr_pages
    }

    pub fn bytes(&self) -> u64 {
        self.nr_pages * crate::page::PAGE_SIZE as u64
    }

    /// The cached page at `index` without taking a reference (for invariant checks).
    pub fn peek(&self, index: u64) -> Option<Pfn> {
        let v = self.cache.get(index as usize)?.load(Ordering::Acquire);
        (v != 0).then(|| Pfn(v - 1))
    }

    /// Pages in the cache.
    pub fn nr_cached(&self) -> u64 {
        self.cache
            .iter()
            .filter(|s| s.load(Ordering::Relaxed) != 0)
            .count() as u64
    }

    /// `filemap_get_folio`: the cached page at `index` with a reference taken, or `None`.
    pub fn find_get_page(&self, k: &Kernel, index: u64) -> Option<Pfn> {
        let slot = self.cache.get(index as usize)?;
        loop {
            let v = slot.load(Ordering::Acquire);
            if v == 0 {
                return None;
            }
            let pfn = Pfn(v - 1);
            let rc = &k.mem().pages()[pfn].refcount;
            // folio_try_get: only a page someone still holds can be pinned.
            let mut cur = rc.load(Ordering::Relaxed);
            let pinned = loop {
                if cur <= 0 {
                    break false;
                }
                match rc.compare_exchange_weak(cur, cur + 1, Ordering::Acquire, Ordering::Relaxed) {
                    Ok(_) => break true,
                    Err(c) => cur = c,
                }
            };
            if !pinned {
                std::hint::spin_loop();
                continue;
            }
            if slot.load(Ordering::Acquire) == v {
                return Some(pfn);
            }
            // Removed and reused under us: drop the speculative reference and look again.
            k.lru().put_page(CpuId(0), pfn);
        }
    }

    /// `filemap_fault` without I/O: the page at `index` with a reference for the caller,
    /// creating it zero-filled (a hole of a sparse file) if it is not cached.
    pub fn get_page(&self, k: &Kernel, cpu: CpuId, index: u64) -> Result<Pfn, AllocError> {
        if let Some(p) = self.find_get_page(k, index) {
            return Ok(p);
        }
        let pfn = k.mem().alloc_page(cpu, Gfp::USER_ZERO)?;
        let page = &k.mem().pages()[pfn];
        page.set_nonatomic(pg::UPTODATE);
        page.mapping
            .store(FILE_MAPPING_TAG | u64::from(self.id), Ordering::Relaxed);
        page.index.store(index, Ordering::Relaxed);
        // One reference for the cache (from the allocation) and one for the caller.
        page.refcount.store(2, Ordering::Relaxed);
        let slot = &self.cache[index as usize];
        {
            let _g = self.i_pages.lock();
            if slot.load(Ordering::Relaxed) != 0 {
                drop(_g);
                page.refcount.store(1, Ordering::Relaxed);
                k.mem().free_pages(cpu, pfn, 0);
                return self.get_page(k, cpu, index);
            }
            slot.store(pfn.0 + 1, Ordering::Release);
        }
        k.lru().add(cpu, pfn);
        Ok(pfn)
    }

    /// `truncate_inode_pages`: drop every page from the cache. Pages still mapped keep living
    /// until their mappings go.
    pub fn truncate(&self, k: &Kernel, cpu: CpuId) {
        let mut dropped = Vec::new();
        {
            let _g = self.i_pages.lock();
            for s in self.cache.iter() {
                let v = s.swap(0, Ordering::AcqRel);
                if v != 0 {
                    dropped.push(Pfn(v - 1));
                }
            }
        }
        k.lru().release_pages(cpu, &dropped);
    }
}

impl Drop for File {
    /// The last reference to the file is gone (unlinked and closed): its page cache goes.
    fn drop(&mut self) {
        if let Some(k) = self.kernel.upgrade() {
            self.truncate(&k, CpuId(0));
        }
    }
}
