//! The arena: the engine's "physical memory".
//!
//! One anonymous host mapping of the configured size plays the role of RAM. Frames handed out by
//! the page allocator are 4 KiB slices of it, and the workloads' stores really land in it, so
//! zeroing a page and touching it cost what they cost on real memory. The mapping is advised
//! `MADV_HUGEPAGE` (fewer host TLB misses, closer to the kernel's direct map, which uses 1 GiB
//! or 2 MiB pages) and can be prefaulted so that host page faults do not pollute a measurement.
//!
//! It is the engine's one module with `unsafe` code for memory (the lock primitives of
//! `pagelab-sync` have theirs; docs/contributor-guide.md lists every place). It
//! exposes the memory only as `AtomicU64` words: the engine, like a real machine, lets a thread
//! store into a frame that another thread is freeing (a stale TLB entry, when the shootdown model
//! is off), and atomic accesses keep such races defined behaviour in Rust.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::mm::{Advice, MapFlags, ProtFlags};

use crate::page::{PAGE_SIZE, Pfn};

/// Words of 8 bytes in a frame.
pub const WORDS_PER_PAGE: usize = PAGE_SIZE / 8;

/// How the arena's host memory is set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArenaConfig {
    /// Size in bytes; rounded down to whole frames.
    pub bytes: u64,
    /// Advise transparent huge pages for the mapping.
    pub huge_pages: bool,
    /// Touch every host page up front.
    pub prefault: bool,
}

impl ArenaConfig {
    pub fn new(bytes: u64) -> Self {
        ArenaConfig {
            bytes,
            huge_pages: true,
            prefault: false,
        }
    }
}

/// Errors raised before any host memory is mapped.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ArenaError {
    #[error("arena size {bytes} B is smaller than the minimum of {min} B")]
    TooSmall { bytes: u64, min: u64 },
    #[error(
        "arena of {} needs {} with its frame metadata, but this machine has only {} available; choose a smaller size",
        human_bytes(*bytes), human_bytes(*needed), human_bytes(*available)
    )]
    TooLarge {
        bytes: u64,
        needed: u64,
        available: u64,
    },
    #[error("arena of {bytes} B exceeds the 2^32 frames a pfn can address")]
    TooManyFrames { bytes: u64 },
    #[error("mmap of the arena failed: {0}")]
    Map(String),
}

/// Render a byte count the way a person reads it (`1.5 GiB`).
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// `MemAvailable` from `/proc/meminfo`, in bytes. `None` where the file cannot be read.
pub fn host_mem_available() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    meminfo_field(&s, "MemAvailable")
}

/// One `Name:  123 kB` field of a meminfo text, in bytes.
pub fn meminfo_field(meminfo: &str, name: &str) -> Option<u64> {
    meminfo.lines().find_map(|l| {
        let rest = l.strip_prefix(name)?.strip_prefix(':')?;
        let kb: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
        Some(kb * 1024)
    })
}

/// The mapped arena.
pub struct Arena {
    base: NonNull<AtomicU64>,
    nr_pages: usize,
}

// SAFETY: the arena is plain memory accessed only through atomics; the pointer is owned by the
// `Arena` and unmapped only in `Drop`, when no borrow can remain.
unsafe impl Send for Arena {}
// SAFETY: as above; shared access goes through `&AtomicU64`.
unsafe impl Sync for Arena {}

/// Smallest arena: one max-order buddy block (4 MiB).
pub const MIN_ARENA_BYTES: u64 = 4 << 20;

impl Arena {
    /// Check a size against the machine before mapping anything. `metadata_per_frame` is added
    /// per frame, since the metadata array is as real as the arena.
    pub fn check_size(bytes: u64, metadata_per_frame: u64) -> Result<u64, ArenaError> {
        if bytes < MIN_ARENA_BYTES {
            return Err(ArenaError::TooSmall {
                bytes,
                min: MIN_ARENA_BYTES,
            });
        }
        let frames = bytes / PAGE_SIZE as u64;
        if frames >= u64::from(u32::MAX) {
            return Err(ArenaError::TooManyFrames { bytes });
        }
        let needed = bytes + frames * metadata_per_frame;
        if let Some(available) = host_mem_available()
            && needed > available
        {
            return Err(ArenaError::TooLarge {
                bytes,
                needed,
                available,
            });
        }
        Ok(frames)
    }

    /// Map an arena. Sizes are checked first (see [`Arena::check_size`]).
    pub fn new(cfg: ArenaConfig, metadata_per_frame: u64) -> Result<Arena, ArenaError> {
        let nr_pages = Self::check_size(cfg.bytes, metadata_per_frame)? as usize;
        let len = nr_pages * PAGE_SIZE;
        // SAFETY: a fresh private anonymous mapping at an address the kernel chooses aliases no
        // Rust object; its length is non-zero (checked above).
        let ptr = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE | MapFlags::NORESERVE,
            )
        }
        .map_err(|e| ArenaError::Map(e.to_string()))?;
        if cfg.huge_pages {
            // SAFETY: the range is exactly the mapping made above. The advice is a hint; a
            // kernel without THP refuses it and the arena works with 4 KiB host pages.
            let _ = unsafe { rustix::mm::madvise(ptr, len, Advice::LinuxHugepage) };
        }
        let base = NonNull::new(ptr.cast::<AtomicU64>()).expect("mmap returned null");
        let arena = Arena { base, nr_pages };
        if cfg.prefault {
            // SAFETY: as above; MADV_POPULATE_WRITE only faults the range in.
            let populated =
                unsafe { rustix::mm::madvise(ptr, len, Advice::LinuxPopulateWrite) }.is_ok();
            if !populated {
                for pfn in 0..nr_pages {
                    arena.words(Pfn(pfn as u32))[0].store(0, Ordering::Relaxed);
                }
            }
        }
        Ok(arena)
    }

    #[inline]
    pub fn nr_pages(&self) -> usize {
        self.nr_pages
    }

    pub fn bytes(&self) -> u64 {
        (self.nr_pages * PAGE_SIZE) as u64
    }

    /// The frame's memory as 512 atomic words.
    #[inline]
    pub fn words(&self, pfn: Pfn) -> &[AtomicU64] {
        assert!(pfn.idx() < self.nr_pages, "{pfn:?} outside the arena");
        // SAFETY: the frame lies inside the mapping (asserted), which lives as long as `self`;
        // `AtomicU64` has the size and alignment of `u64` and the mapping is page aligned; all
        // access to arena memory goes through such atomic views, so no non-atomic access races.
        unsafe {
            std::slice::from_raw_parts(
                self.base.as_ptr().add(pfn.idx() * WORDS_PER_PAGE),
                WORDS_PER_PAGE,
            )
        }
    }

    /// `clear_page`: zero a frame.
    #[inline]
    pub fn zero_page(&self, pfn: Pfn) {
        let span = pagelab_sync::trace::write_span();
        for w in self.words(pfn) {
            w.store(0, Ordering::Relaxed);
        }
        span.end(PAGE_SIZE as u32);
    }

    /// `copy_page`.
    pub fn copy_page(&self, dst: Pfn, src: Pfn) {
        let span = pagelab_sync::trace::write_span();
        for (d, s) in self.words(dst).iter().zip(self.words(src)) {
            d.store(s.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        span.end(PAGE_SIZE as u32);
    }

    /// Whether every word of the frame is zero (tests and invariant checks).
    pub fn page_is_zero(&self, pfn: Pfn) -> bool {
        self.words(pfn)
            .iter()
            .all(|w| w.load(Ordering::Relaxed) == 0)
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: the mapping was created in `new` with this length, and `&mut self` proves no
        // borrow of its memory is alive.
        unsafe {
            let _ = rustix::mm::munmap(self.base.as_ptr().cast(), self.nr_pages * PAGE_SIZE);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_zero_and_absurd_sizes() {
        assert!(matches!(
            Arena::check_size(0, 48),
            Err(ArenaError::TooSmall { .. })
        ));
        let err = Arena::check_size(1 << 50, 48).unwrap_err();
        assert!(
            matches!(
                err,
                ArenaError::TooLarge { .. } | ArenaError::TooManyFrames { .. }
            ),
            "{err}"
        );
    }

    #[test]
    fn too_large_message_names_sizes() {
        let e = ArenaError::TooLarge {
            bytes: 1 << 40,
            needed: 1 << 41,
            available: 8 << 30,
        };
        let msg = e.to_string();
        assert!(msg.contains("1.0 TiB") && msg.contains("8.0 GiB"), "{msg}");
    }

    #[test]
    fn words_are_writable_and_zeroable() {
        let a = Arena::new(
            ArenaConfig {
                bytes: MIN_ARENA_BYTES,
                huge_pages: true,
                prefault: true,
            },
            48,
        )
        .unwrap();
        assert_eq!(a.nr_pages(), 1024);
        a.words(Pfn(7))[3].store(42, Ordering::Relaxed);
        assert!(!a.page_is_zero(Pfn(7)));
        a.copy_page(Pfn(8), Pfn(7));
        assert_eq!(a.words(Pfn(8))[3].load(Ordering::Relaxed), 42);
        a.zero_page(Pfn(7));
        assert!(a.page_is_zero(Pfn(7)));
    }

    #[test]
    fn meminfo_parse() {
        let s = "MemTotal:       24000000 kB\nMemAvailable:   1000 kB\n";
        assert_eq!(meminfo_field(s, "MemAvailable"), Some(1_024_000));
        assert_eq!(meminfo_field(s, "SwapTotal"), None);
    }
}
