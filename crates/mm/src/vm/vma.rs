//! Virtual memory areas and the VMA tree (mm/mmap.c, mm/vma.c, the maple tree).
//!
//! A VMA describes one mapped range: its bounds, protection, whether it is anonymous or maps a
//! file (and at which page offset), and whether changes are shared. In the engine a VMA's
//! bounds never change after it is published: splitting a VMA (a partial munmap) creates new
//! VMAs for the remnants and detaches the old one. That keeps lockless readers simple (what
//! they read under RCU is immutable) at the cost of an allocation per split, which only the
//! rare writers pay.
//!
//! The tree is a sorted vector of VMAs, replaced as a whole by writers (copy-on-write under
//! mmap_lock held for write) and published with RCU, so a fault can find its VMA without any
//! lock (`lock_vma_under_rcu`). The kernel's maple tree is also an RCU-safe ordered structure
//! with copy-on-write nodes; a flat vector is its smallest faithful stand-in for the handful of
//! VMAs the benchmarks create.
//!
//! Invariants (checked by `Mm::check`): VMAs in the tree are sorted, non-overlapping, page
//! aligned and attached; detached VMAs are nowhere in the tree.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::page::PAGE_SIZE;
use crate::vm::filemap::File;
use crate::vm::vma_lock::{VmaLock, VmaLockKind};

/// What a VMA maps.
#[derive(Clone)]
pub enum VmaBacking {
    /// Anonymous memory, zero-filled on first touch.
    Anon,
    /// A file's pages starting at page offset `pgoff`.
    File { file: Arc<File>, pgoff: u64 },
}

impl std::fmt::Debug for VmaBacking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VmaBacking::Anon => write!(f, "anon"),
            VmaBacking::File { file, pgoff } => write!(f, "file {} +{pgoff}", file.id()),
        }
    }
}

/// One mapped range (`struct vm_area_struct`).
pub struct Vma {
    pub start: u64,
    pub end: u64,
    /// `VM_WRITE`.
    pub writable: bool,
    /// `VM_SHARED`: stores reach the file (or are shared between processes).
    pub shared: bool,
    pub backing: VmaBacking,
    /// The per-VMA lock.
    pub lock: VmaLock,
    /// `vma->anon_vma` exists. The first anonymous fault of a VMA prepares it, which 6.4's
    /// per-VMA lock path cannot do (it falls back to mmap_lock) and 6.7+ does under a
    /// `mmap_read_trylock`.
    anon_vma: AtomicBool,
}

impl std::fmt::Debug for Vma {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "vma {:#x}-{:#x} {}{} {:?}",
            self.start,
            self.end,
            if self.writable { "w" } else { "r" },
            if self.shared { "s" } else { "p" },
            self.backing
        )
    }
}

impl Vma {
    pub fn new(
        start: u64,
        end: u64,
        writable: bool,
        shared: bool,
        backing: VmaBacking,
        lock: VmaLockKind,
    ) -> Vma {
        debug_assert!(
            start < end
                && start.is_multiple_of(PAGE_SIZE as u64)
                && end.is_multiple_of(PAGE_SIZE as u64)
        );
        Vma {
            start,
            end,
            writable,
            shared,
            backing,
            lock: VmaLock::new(lock),
            anon_vma: AtomicBool::new(false),
        }
    }

    /// A copy of this VMA restricted to `[start, end)`, for the remnants of a split. The
    /// remnant inherits the anon_vma (the kernel shares it between the halves).
    pub fn split_copy(&self, start: u64, end: u64, lock: VmaLockKind) -> Vma {
        let backing = match &self.backing {
            VmaBacking::Anon => VmaBacking::Anon,
            VmaBacking::File { file, pgoff } => VmaBacking::File {
                file: file.clone(),
                pgoff: pgoff + (start - self.start) / PAGE_SIZE as u64,
            },
        };
        let v = Vma::new(start, end, self.writable, self.shared, backing, lock);
        v.anon_vma.store(self.has_anon_vma(), Ordering::Relaxed);
        v
    }

    #[inline]
    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.start && addr < self.end
    }

    #[inline]
    pub fn is_anon(&self) -> bool {
        matches!(self.backing, VmaBacking::Anon)
    }

    /// Pages that a private write turns into anonymous memory need an anon_vma.
    #[inline]
    pub fn needs_anon_vma(&self) -> bool {
        !self.shared
    }

    #[inline]
    pub fn has_anon_vma(&self) -> bool {
        self.anon_vma.load(Ordering::Acquire)
    }

    /// `__anon_vma_prepare`. Called with mmap_lock held (read is enough: concurrent preparers
    /// agree on the same outcome).
    pub fn prepare_anon_vma(&self) {
        self.anon_vma.store(true, Ordering::Release);
    }

    /// Page offset within the backing file of `addr` (`linear_page_index`).
    #[inline]
    pub fn pgoff(&self, addr: u64) -> u64 {
        let base = match &self.backing {
            VmaBacking::File { pgoff, .. } => *pgoff,
            VmaBacking::Anon => self.start / PAGE_SIZE as u64,
        };
        base + (addr - self.start) / PAGE_SIZE as u64
    }

    pub fn pages(&self) -> u64 {
        (self.end - self.start) / PAGE_SIZE as u64
    }
}

/// The published set of VMAs, sorted by address.
#[derive(Default, Clone)]
pub struct VmaTree {
    vmas: Vec<Arc<Vma>>,
}

impl VmaTree {
    pub fn new() -> Self {
        VmaTree { vmas: Vec::new() }
    }

    /// `find_vma` narrowed to containment: the VMA containing `addr`.
    #[inline]
    pub fn find(&self, addr: u64) -> Option<&Arc<Vma>> {
        let i = self.vmas.partition_point(|v| v.end <= addr);
        self.vmas.get(i).filter(|v| v.start <= addr)
    }

    /// VMAs overlapping `[start, end)`, in order.
    pub fn overlapping(&self, start: u64, end: u64) -> &[Arc<Vma>] {
        let i = self.vmas.partition_point(|v| v.end <= start);
        let j = self.vmas.partition_point(|v| v.start < end);
        &self.vmas[i..j.max(i)]
    }

    /// End of the last VMA below `addr` (the floor for freeing page tables), or 0.
    pub fn prev_end(&self, addr: u64) -> u64 {
        let i = self.vmas.partition_point(|v| v.end <= addr);
        if i == 0 { 0 } else { self.vmas[i - 1].end }
    }

    /// Start of the first VMA at or above `addr` (the ceiling), or `limit`.
    pub fn next_start(&self, addr: u64, limit: u64) -> u64 {
        let i = self.vmas.partition_point(|v| v.start < addr);
        self.vmas.get(i).map_or(limit, |v| v.start)
    }

    /// A copy with `remove` taken out and `add` put in, kept sorted.
    pub fn replaced(&self, remove: &[Arc<Vma>], add: Vec<Arc<Vma>>) -> VmaTree {
        let mut vmas: Vec<Arc<Vma>> = self
            .vmas
            .iter()
            .filter(|v| !remove.iter().any(|r| Arc::ptr_eq(r, v)))
            .cloned()
            .collect();
        vmas.extend(add);
        vmas.sort_by_key(|v| v.start);
        VmaTree { vmas }
    }

    /// Highest gap of `len` bytes below `top` and above `bottom` (top-down `unmapped_area`).
    pub fn find_gap(&self, len: u64, bottom: u64, top: u64) -> Option<u64> {
        let mut hi = top;
        for v in self.vmas.iter().rev() {
            if v.start >= hi {
                hi = hi.min(v.start);
                continue;
            }
            if v.end <= hi && hi - v.end >= len {
                return Some(hi - len);
            }
            hi = v.start;
        }
        (hi >= bottom + len).then(|| hi - len)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<Vma>> {
        self.vmas.iter()
    }

    pub fn len(&self) -> usize {
        self.vmas.len()
    }

    pub fn is_empty(&self) -> bool {
        self.vmas.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vma(s: u64, e: u64) -> Arc<Vma> {
        Arc::new(Vma::new(
            s << 12,
            e << 12,
            true,
            false,
            VmaBacking::Anon,
            VmaLockKind::Refcount,
        ))
    }

    #[test]
    fn find_and_overlap() {
        let t = VmaTree::new().replaced(&[], vec![vma(10, 20), vma(30, 40), vma(20, 25)]);
        assert_eq!(t.find(15 << 12).unwrap().start, 10 << 12);
        assert_eq!(t.find(20 << 12).unwrap().start, 20 << 12);
        assert!(t.find(25 << 12).is_none());
        assert!(t.find(9 << 12).is_none());
        assert_eq!(t.overlapping(19 << 12, 31 << 12).len(), 3);
        assert_eq!(t.overlapping(25 << 12, 30 << 12).len(), 0);
        assert_eq!(t.prev_end(27 << 12), 25 << 12);
        assert_eq!(t.next_start(27 << 12, 1 << 47), 30 << 12);
    }

    #[test]
    fn gap_search_is_top_down() {
        let t = VmaTree::new().replaced(&[], vec![vma(90, 100), vma(50, 60)]);
        assert_eq!(t.find_gap(10 << 12, 0, 100 << 12), Some(80 << 12));
        assert_eq!(t.find_gap(30 << 12, 0, 100 << 12), Some(60 << 12));
        assert_eq!(t.find_gap(31 << 12, 0, 100 << 12), Some(19 << 12));
        assert_eq!(t.find_gap(60 << 12, 0, 100 << 12), None);
    }

    #[test]
    fn split_copy_moves_the_file_offset() {
        let v = vma(10, 20);
        let r = v.split_copy(15 << 12, 20 << 12, VmaLockKind::Rwsem);
        assert_eq!(r.pgoff(15 << 12), 15);
        assert_eq!((r.start, r.end), (15 << 12, 20 << 12));
    }
}
