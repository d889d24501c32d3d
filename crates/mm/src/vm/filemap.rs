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
//!
//! Reclaim can evict a cached page that no PTE maps (`__remove_mapping`): a dirty page is first
//! written back to the file's backing store, then the page leaves the cache once its only
//! references are the cache's and the isolation's (frozen to zero with one compare-and-swap,
//! under `i_pages`); a later fault reads it back (`filemap_read_folio`). The backing store is
//! host memory, one block per page ever written back, standing in for the disk. Not modelled:
//! shadow entries for file pages, readahead, and evicting mapped file pages (that needs the
//! file's reverse map, `i_mmap`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use pagelab_sync::SpinLock;

use crate::alloc::{AllocError, Gfp};
use crate::cpu::CpuId;
use crate::kernel::Kernel;
use crate::page::{Pfn, pg};
use crate::vmstat::VmEvent;

/// `mapping->i_pages` lock: one per file.
pub static I_PAGES: pagelab_sync::LockClass =
    pagelab_sync::LockClass::new("i_pages", pagelab_sync::Scope::Private);

/// A file with a page cache (`struct address_space` of an inode).
pub struct File {
    kernel: std::sync::Weak<Kernel>,
    id: u32,
    nr_pages: u64,
    cache: Box<[AtomicU32]>,
    i_pages: SpinLock<()>,
    /// The backing store: blocks written back, by page index.
    store: std::sync::Mutex<std::collections::HashMap<u64, Box<[u64]>>>,
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
            // A file's cache lock; each task of the projected workloads maps its own file.
            i_pages: SpinLock::new(kind, ()).with_class(&I_PAGES),
            store: std::sync::Mutex::new(std::collections::HashMap::new()),
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
        let block = self.lock_store().get(&index).cloned();
        let pfn = match &block {
            // filemap_read_folio: the block was written back before the page was evicted.
            Some(words) => {
                let pfn = k.mem().alloc_page(cpu, Gfp::USER)?;
                let dst = k.mem().arena().words(pfn);
                for (d, &w) in dst.iter().zip(words.iter()) {
                    d.store(w, Ordering::Relaxed);
                }
                k.mem().events().count(cpu, VmEvent::FileRead, 1);
                pfn
            }
            // A hole of the sparse file.
            None => k.mem().alloc_page(cpu, Gfp::USER_ZERO)?,
        };
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

    fn lock_store(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<u64, Box<[u64]>>> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Blocks in the backing store.
    pub fn nr_stored(&self) -> u64 {
        self.lock_store().len() as u64
    }

    /// `pageout` of a dirty page-cache page the caller has locked and isolated: write its
    /// contents to the backing store and clear `PG_dirty`.
    pub(crate) fn writeback(&self, k: &Kernel, cpu: CpuId, pfn: Pfn) {
        let page = &k.mem().pages()[pfn];
        let index = page.index.load(Ordering::Relaxed);
        // Clear first: a store through a mapping made meanwhile dirties the page again.
        page.clear(pg::DIRTY);
        let words: Box<[u64]> = k
            .mem()
            .arena()
            .words(pfn)
            .iter()
            .map(|w| w.load(Ordering::Relaxed))
            .collect();
        self.lock_store().insert(index, words);
        k.mem().events().count(cpu, VmEvent::FileWriteback, 1);
    }

    /// `__remove_mapping` for a clean page-cache page the caller has locked and isolated:
    /// if only the cache and the isolation still reference it, take it out of the cache and
    /// return `true` with its reference count frozen at zero (the caller frees it). A page some
    /// fault or mapping has taken a reference to meanwhile stays.
    pub(crate) fn remove_mapping(&self, k: &Kernel, pfn: Pfn) -> bool {
        let page = &k.mem().pages()[pfn];
        let index = page.index.load(Ordering::Relaxed);
        let Some(slot) = self.cache.get(index as usize) else {
            return false;
        };
        let _g = self.i_pages.lock();
        if slot.load(Ordering::Relaxed) != pfn.0 + 1 || page.test(pg::DIRTY) {
            return false;
        }
        if page
            .refcount
            .compare_exchange(2, 0, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        slot.store(0, Ordering::Release);
        true
    }

    /// `truncate_inode_pages`: drop every page from the cache, and the file's contents with
    /// them. Pages still mapped keep living until their mappings go.
    pub fn truncate(&self, k: &Kernel, cpu: CpuId) {
        self.lock_store().clear();
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
