//! Swap devices: slot allocation, usage counts, per-CPU slot caches and page I/O
//! (mm/swapfile.c, mm/swap_slots.c as before 6.12, include/linux/swap.h).
//!
//! # What it models
//!
//! * [`SwapEntry`]: `swp_entry_t`, a device type and a slot offset packed into the payload of a
//!   swap PTE ([`Pte::swap`]). Offset 0 is never handed out: slot 0 of a device is its header.
//! * `swap_map`: one usage word per slot, as `si->swap_map`: the number of swap PTEs
//!   referencing the slot plus the [`SWAP_HAS_CACHE`] bit, which says the slot is reserved for,
//!   or held by, the swap cache. 0 is free; the header slot holds [`SWAP_MAP_BAD`].
//!   [`SwapDevice::swap_duplicate`] (a PTE copied or a page unmapped to the slot) and
//!   [`SwapDevice::swap_free`] (a PTE dropped) move the count; [`SwapDevice::swapcache_prepare`]
//!   and [`SwapDevice::put_swap_folio`] take and drop the cache bit. When both reach zero the
//!   slot goes back through [`SwapDevice::free_swap_slot`], still carrying `SWAP_HAS_CACHE` so
//!   that nobody can allocate it before it is really free (as `__swap_entry_free_locked`).
//! * Slot allocation, `get_swap_pages`/`scan_swap_map_slots`: under the device lock
//!   (`si->lock`), hand out the free slots found from a cursor onwards, consecutive when they
//!   are, and leave the cursor after the last one (`si->cluster_next`), wrapping at the end of
//!   the device. Free slots are found with a bitmap kept beside the count of free slots. The
//!   kernel's SSD clusters (256-slot runs per CPU) are reduced to this one cursor.
//! * Per-CPU slot caches, mm/swap_slots.c: each CPU keeps up to [`SWAP_SLOTS_CACHE_SIZE`]
//!   allocated slots (`slots`, refilled in one `get_swap_pages` batch) and a return array of
//!   freed ones (`slots_ret`, given back in one batch, `swapcache_free_entries`, when it is
//!   full), so that the device lock is taken once per 64 allocations or frees. Like the
//!   kernel, the caches can deactivate themselves (`check_cache_active`): below
//!   2 × 64 × CPUs free slots they are drained and bypassed, above 5 × 64 × CPUs they come back
//!   ([`SwapConfig::slot_cache_auto`]). A `cpu` argument is a CPU id below
//!   [`SwapConfig::nr_cpus`], or `nr_cpus` itself for a background thread (kswapd and the
//!   like), which has no slot cache and goes to the device directly.
//! * Page I/O, `swap_writepage`/`swap_read_folio`: 4 KiB between an arena frame (its
//!   `AtomicU64` words, [`crate::arena::Arena::words`]) and the slot. [`Backing::Memory`] keeps
//!   slot buffers in the device, optionally LZ4-compressed as zram does (with zram's same-filled
//!   page shortcut, and pages that compress by less than a quarter stored as they are);
//!   [`Backing::File`] does `pwrite`/`pread` at `offset * 4096` in a real file.
//!
//! # Locks and what they protect
//!
//! | lock | protects |
//! |---|---|
//! | device lock (`si->lock`, a [`SpinLock`] of the configured kind) | the free bitmap, the free count, the cursor, and the 0 ↔ nonzero transitions of `swap_map` |
//! | per-CPU `alloc_lock` | that CPU's cached slots |
//! | per-CPU `free_lock` | that CPU's return array |
//! | slot-group lock (memory backing) | the stored buffers of 16 consecutive slots |
//!
//! Lock order: `alloc_lock` or `free_lock`, then the device lock; a slot-group lock is innermost
//! (nothing is taken while holding one). The owner CPU takes its cache locks with *trylock*, as
//! the pcp code does (`crate::alloc::pcp`): they are contended only by a drain or by
//! [`SwapDevice::check`], and a failed trylock goes to the device directly. Every access to a
//! cache is under its lock, so a cache stays consistent even if two threads use the same CPU id.
//!
//! zram locks each slot; here a lock per slot would cost 96 bytes of every slot for a lock that
//! is almost never contended (a slot is written and read by whoever owns it), so 16 consecutive
//! slots share one (28 bytes per slot). CPUs take slots in batches of consecutive ones, so two
//! CPUs rarely meet on a group, and compression happens before the lock is taken: a holder only
//! swaps a buffer in or copies one out.
//!
//! Count changes on an allocated slot (`swap_duplicate`, `swap_free`, the cache bit) take no
//! lock: they are compare-and-swap loops on the slot's word (the kernel takes the cluster lock
//! for them). Only the allocator turns 0 into nonzero and only the batch free turns nonzero
//! into 0, both under the device lock; a slot on its way to being freed carries exactly
//! `SWAP_HAS_CACHE` and no reference exists to change it.
//!
//! # Invariants ([`SwapDevice::check`], run by the tests)
//!
//! Slot 0 is [`SWAP_MAP_BAD`] and never free; a slot is free in the bitmap exactly when its
//! usage is 0; the free count equals the free slots, and free, in-use, cached and returned
//! slots add up to the size (`nr_free + inuse == pages`); every slot in a per-CPU cache or
//! return array is in range, of this device, listed once, has usage exactly `SWAP_HAS_CACHE`
//! and no page in the swap cache; a page in the swap cache sits on a slot that has
//! `SWAP_HAS_CACHE`; a free slot has no shadow, no page and no stored data; the stored-pages and
//! stored-bytes counters match the buffers.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{
    AtomicBool, AtomicI64, AtomicU16, AtomicU32, AtomicU64, Ordering::AcqRel, Ordering::Acquire,
    Ordering::Relaxed,
};

use pagelab_sync::{LockKind, LockStatsSnapshot, SpinLock};

use super::swap_cache::{CacheSlot, SwapCache};
use crate::arena::{Arena, WORDS_PER_PAGE};
use crate::cpu::{CpuId, PerCpu};
use crate::page::{PAGE_SIZE, Pfn};
use crate::vm::pgtable::Pte;
use crate::vmstat::{VmEvent, VmEvents};

/// The device lock (`swap_info_struct->lock`): every CPU allocating or freeing slots past its
/// cache takes it.
pub static SWAP_INFO_LOCK: pagelab_sync::LockClass =
    pagelab_sync::LockClass::new("swap_info->lock", pagelab_sync::Scope::Machine);

/// A CPU's slot-cache locks (`swap_slots_cache` `alloc_lock` and `free_lock`).
pub static SWAP_SLOTS_LOCK: pagelab_sync::LockClass =
    pagelab_sync::LockClass::new("swap_slots_cache", pagelab_sync::Scope::Cpu);

/// Bits of the swap type (`MAX_SWAPFILES_SHIFT`).
pub const MAX_SWAPFILES_SHIFT: u32 = 5;
/// Swap devices a system may have (`MAX_SWAPFILES`, without the kernel's reserved types).
pub const MAX_SWAPFILES: u32 = 1 << MAX_SWAPFILES_SHIFT;
/// Where the type starts in a [`SwapEntry`] payload: offsets have 47 bits, and the payload
/// fits the 52 bits of a swap PTE.
pub const SWP_TYPE_SHIFT: u32 = 52 - MAX_SWAPFILES_SHIFT;
/// Largest slot offset.
pub const SWP_OFFSET_MASK: u64 = (1 << SWP_TYPE_SHIFT) - 1;

/// Slots per CPU cache (`SWAP_SLOTS_CACHE_SIZE`, = `SWAP_BATCH`).
pub const SWAP_SLOTS_CACHE_SIZE: usize = 64;
/// The slot is reserved for or held by the swap cache (`SWAP_HAS_CACHE`).
pub const SWAP_HAS_CACHE: u16 = 0x8000;
/// The header slot, never allocated (`SWAP_MAP_BAD`).
pub const SWAP_MAP_BAD: u16 = 0x7fff;
/// Most references a slot can count. The kernel chains continuation pages past 62; the engine
/// has room for 32766 in its 16-bit word and refuses more.
pub const SWAP_MAP_MAX: u16 = 0x7ffe;
/// Free slots per CPU per cache size below which the caches deactivate
/// (`THRESHOLD_DEACTIVATE_SWAP_SLOTS_CACHE` = 2 × `SWAP_SLOTS_CACHE_SIZE` per CPU).
const DEACTIVATE_FACTOR: u64 = 2;
/// ... and above which they reactivate (`THRESHOLD_ACTIVATE_SWAP_SLOTS_CACHE`).
const ACTIVATE_FACTOR: u64 = 5;
/// A compressed page at least this large is stored uncompressed (zram's `huge_class_size`
/// idea: a page that compresses by less than a quarter is not worth decompressing).
const INCOMPRESSIBLE: usize = PAGE_SIZE * 3 / 4;
const LZ4_MAX: usize = lz4_flex::block::get_maximum_output_size(PAGE_SIZE);

/// `swp_entry_t`: a swap type and a slot offset. See the module documentation.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SwapEntry(u64);

impl SwapEntry {
    /// `swp_entry(type, offset)`. Panics on offset 0 (the header) or an out-of-range field.
    #[inline]
    pub const fn new(swp_type: u32, offset: u64) -> SwapEntry {
        assert!(
            swp_type < MAX_SWAPFILES && offset != 0 && offset <= SWP_OFFSET_MASK,
            "swap entry out of range"
        );
        SwapEntry(((swp_type as u64) << SWP_TYPE_SHIFT) | offset)
    }

    /// The PTE payload (`entry.val`), nonzero and below 2^52.
    #[inline]
    pub const fn val(self) -> u64 {
        self.0
    }

    /// The entry of a payload, or `None` if it names the header slot.
    #[inline]
    pub const fn from_val(val: u64) -> Option<SwapEntry> {
        if val & SWP_OFFSET_MASK == 0 || val >> SWP_TYPE_SHIFT >= MAX_SWAPFILES as u64 {
            None
        } else {
            Some(SwapEntry(val))
        }
    }

    /// `swp_type`.
    #[inline]
    pub const fn swp_type(self) -> u32 {
        (self.0 >> SWP_TYPE_SHIFT) as u32
    }

    /// `swp_offset`.
    #[inline]
    pub const fn offset(self) -> u64 {
        self.0 & SWP_OFFSET_MASK
    }

    /// `swp_entry_to_pte`.
    #[inline]
    pub const fn to_pte(self) -> Pte {
        Pte::swap(self.0)
    }

    /// `pte_to_swp_entry`, for a swap PTE.
    #[inline]
    pub const fn from_pte(pte: Pte) -> Option<SwapEntry> {
        match pte.swap_entry() {
            Some(v) => SwapEntry::from_val(v),
            None => None,
        }
    }
}

impl std::fmt::Debug for SwapEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "swp {}:{:#x}", self.swp_type(), self.offset())
    }
}

/// Where a device keeps its pages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backing {
    /// Slot buffers owned by the device (a RAM disk; with `compress`, zram with LZ4).
    Memory { compress: bool },
    /// A real file of `pages * 4096` bytes. Set-up creates it exclusively, or reuses a swap
    /// file pagelab made (one a killed run left: its header slot starts with
    /// [`SWAP_FILE_MAGIC`]); anything else at the path is refused unwritten, since a mistyped
    /// path must not wipe a results store or a user's file. The device removes the file when
    /// it goes. Slots of a reused file read as never written: its old pages are not this
    /// device's.
    File(PathBuf),
}

/// How to build a swap device. Plain data; the policy layer fills it in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SwapConfig {
    /// The device's type (its index in `swap_info[]`), below [`MAX_SWAPFILES`].
    pub swp_type: u32,
    /// Slots, the header slot included (`si->max`): `pages - 1` can be allocated.
    pub pages: u64,
    pub backing: Backing,
    /// Virtual CPUs that will use the device (ids `0..nr_cpus`).
    pub nr_cpus: usize,
    /// The device lock's algorithm.
    pub lock_kind: LockKind,
    /// Slots per CPU cache; 0 runs without caches (every allocation and free takes the device
    /// lock, as before 4.11 or with `swap_slot_cache_enabled` off).
    pub slot_cache: usize,
    /// Deactivate the caches when free slots run low and reactivate them when there are plenty
    /// again (`check_cache_active`); off, they stay active whatever the device's fill.
    pub slot_cache_auto: bool,
}

impl SwapConfig {
    /// A device of `pages` slots with the kernel's defaults: 64-slot caches that deactivate
    /// when swap runs low, a queued spinlock.
    pub fn new(pages: u64, backing: Backing, nr_cpus: usize) -> Self {
        SwapConfig {
            swp_type: 0,
            pages,
            backing,
            nr_cpus,
            lock_kind: LockKind::Queued,
            slot_cache: SWAP_SLOTS_CACHE_SIZE,
            slot_cache_auto: true,
        }
    }
}

/// Why a swap operation failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SwapError {
    #[error("cannot open swap file {}: {reason}", path.display())]
    Open { path: PathBuf, reason: String },
    #[error(
        "will not use {} as a swap file: {reason}; it was left untouched; name a path that does not exist yet (pagelab creates the file and removes it after the run)",
        path.display()
    )]
    Refused { path: PathBuf, reason: String },
    #[error("swap file {}: {op} of slot {offset} failed: {reason}", path.display())]
    Io {
        path: PathBuf,
        op: &'static str,
        offset: u64,
        reason: String,
    },
    #[error("invalid swap device: {0}")]
    Config(String),
    #[error("bad swap entry {0:?}: {1}")]
    BadEntry(SwapEntry, &'static str),
    #[error("{0:?} is already in the swap cache or being read in")]
    CacheBusy(SwapEntry),
    #[error("{0:?} has no data: it was never written")]
    NotWritten(SwapEntry),
}

/// An I/O error's message without the " (os error N)" suffix std appends.
fn io_reason(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error ") {
        Some(i) => s[..i].to_owned(),
        None => s,
    }
}

/// What a memory-backed slot stores.
#[derive(Debug, Default)]
enum Stored {
    #[default]
    Empty,
    /// Uncompressed words.
    Raw(Box<[u64]>),
    /// Every word equal (zram's `ZRAM_SAME`).
    Same(u64),
    /// An LZ4 block.
    Lz4(Box<[u8]>),
}

impl Stored {
    /// Bytes of buffer this costs (what zram reports as `compr_data_size`).
    fn bytes(&self) -> u64 {
        match self {
            Stored::Empty | Stored::Same(_) => 0,
            Stored::Raw(w) => (w.len() * 8) as u64,
            Stored::Lz4(b) => b.len() as u64,
        }
    }

    fn raw(src: &[AtomicU64]) -> Stored {
        Stored::Raw(src.iter().map(|w| w.load(Relaxed)).collect())
    }

    fn compress(src: &[AtomicU64]) -> Stored {
        let first = src[0].load(Relaxed);
        let mut buf = [0u8; PAGE_SIZE];
        let mut same = true;
        for (i, w) in src.iter().enumerate() {
            let v = w.load(Relaxed);
            same &= v == first;
            buf[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        if same {
            return Stored::Same(first);
        }
        let mut out = [0u8; LZ4_MAX];
        match lz4_flex::block::compress_into(&buf, &mut out) {
            Ok(n) if n < INCOMPRESSIBLE => Stored::Lz4(out[..n].into()),
            _ => Stored::Raw(
                buf.chunks_exact(8)
                    .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
                    .collect(),
            ),
        }
    }

    /// Copy out into `dst`. False if there is nothing to copy.
    fn read(&self, dst: &[AtomicU64]) -> bool {
        match self {
            Stored::Empty => return false,
            Stored::Raw(w) => {
                for (d, s) in dst.iter().zip(w.iter()) {
                    d.store(*s, Relaxed);
                }
            }
            Stored::Same(v) => {
                for d in dst {
                    d.store(*v, Relaxed);
                }
            }
            Stored::Lz4(b) => {
                let mut buf = [0u8; PAGE_SIZE];
                let n = lz4_flex::block::decompress_into(b, &mut buf)
                    .expect("a swap slot's own LZ4 block decompresses");
                assert_eq!(n, PAGE_SIZE, "a swap slot decompresses to one page");
                words_from_bytes(&buf, dst);
            }
        }
        true
    }
}

fn words_to_bytes(src: &[AtomicU64], buf: &mut [u8; PAGE_SIZE]) {
    for (i, w) in src.iter().enumerate() {
        buf[i * 8..i * 8 + 8].copy_from_slice(&w.load(Relaxed).to_le_bytes());
    }
}

fn words_from_bytes(buf: &[u8; PAGE_SIZE], dst: &[AtomicU64]) {
    for (d, c) in dst.iter().zip(buf.chunks_exact(8)) {
        d.store(u64::from_le_bytes(c.try_into().unwrap()), Relaxed);
    }
}

/// Memory-backed slots per lock.
const SLOT_GROUP: usize = 16;
type SlotGroup = SpinLock<[Stored; SLOT_GROUP]>;

enum Store {
    Memory {
        compress: bool,
        /// One lock per [`SLOT_GROUP`] consecutive slots.
        groups: Box<[SlotGroup]>,
    },
    File(SwapFile),
}

/// The first bytes of a swap file pagelab made, in its header slot (slot 0, never handed out).
/// They are how pagelab knows a file at a swap path is its own: a leftover from a run that was
/// killed may be reused, and anything else (a results store, a text file, a database) is
/// refused before a byte of it is written. Like mkswap's `SWAPSPACE2` in page 0.
pub const SWAP_FILE_MAGIC: &[u8; 16] = b"pagelab swapfile";
/// The header's layout version, after the magic (little-endian u32). A file of any version is
/// reused: no slot survives from one device to the next (see [`Backing::File`]), so only the
/// magic matters.
pub const SWAP_FILE_VERSION: u32 = 1;

/// Page 0 of a swap file: magic, version, page size and slot count (little-endian).
fn swap_file_header(pages: u64) -> [u8; 32] {
    let mut h = [0u8; 32];
    h[..16].copy_from_slice(SWAP_FILE_MAGIC);
    h[16..20].copy_from_slice(&SWAP_FILE_VERSION.to_le_bytes());
    h[20..24].copy_from_slice(&(PAGE_SIZE as u32).to_le_bytes());
    h[24..32].copy_from_slice(&pages.to_le_bytes());
    h
}

/// The first 16 bytes of every SQLite 3 database (a results store is one).
const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// Swap files this process holds, as (path, device, inode): removed by [`remove_swap_files`]
/// when the process quits without unwinding (`exit` on a second Ctrl-C runs no destructor).
static LIVE_SWAP_FILES: std::sync::Mutex<Vec<(PathBuf, u64, u64)>> =
    std::sync::Mutex::new(Vec::new());

fn live_swap_files() -> std::sync::MutexGuard<'static, Vec<(PathBuf, u64, u64)>> {
    LIVE_SWAP_FILES.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether `path` still names the file `(dev, ino)`: a file put in its place since is not
/// ours to remove.
fn still_names(path: &Path, dev: u64, ino: u64) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path).is_ok_and(|m| m.dev() == dev && m.ino() == ino)
}

/// Remove every swap file the devices of this process hold, now. For a process about to
/// `exit` while a device is alive; a device's drop does this otherwise. A path that names
/// another file by now is left alone.
pub fn remove_swap_files() {
    remove_swap_files_where(|_| true);
}

/// [`remove_swap_files`] for the files whose path `pick` accepts.
fn remove_swap_files_where(pick: impl Fn(&Path) -> bool) {
    live_swap_files().retain(|(path, dev, ino)| {
        if !pick(path) {
            return true;
        }
        if still_names(path, *dev, *ino) {
            let _ = std::fs::remove_file(path);
        }
        false
    });
}

/// Why an existing path may not be used as a swap file, from what `lstat` says: anything but
/// a regular file (opening a FIFO would even wait for a writer).
fn refuse_kind(meta: &std::fs::Metadata) -> Option<&'static str> {
    let t = meta.file_type();
    if t.is_symlink() {
        Some("it is a symbolic link")
    } else if t.is_dir() {
        Some("it is a directory")
    } else if !t.is_file() {
        Some("it is not a regular file (a device, a FIFO or a socket)")
    } else {
        None
    }
}

/// Why an open regular file may not be used as a swap file: it is not one pagelab made, or
/// another run holds it. Reads at most 16 bytes and writes nothing; on `None` the file is
/// locked (`flock`, exclusive) for as long as `file` is open.
fn refuse_content(file: &File) -> Option<&'static str> {
    let mut buf = [0u8; 16];
    let n = file.read_at(&mut buf, 0).unwrap_or(0);
    let head = &buf[..n];
    if head == SQLITE_MAGIC {
        return Some("it is an SQLite database (perhaps a results store)");
    }
    if head != SWAP_FILE_MAGIC {
        return Some("it exists and is not a pagelab swap file");
    }
    match file.try_lock() {
        Ok(()) => None,
        Err(std::fs::TryLockError::WouldBlock) => Some("another pagelab run is using it"),
        Err(std::fs::TryLockError::Error(_)) => Some("it cannot be locked for this run"),
    }
}

/// Open the existing file at `path`, for reading (and writing, with `write`), if it is a swap
/// file pagelab made and no other run holds: then it is returned locked. Anything else is
/// [`SwapError::Refused`] with nothing written. A symlink is refused, not followed.
fn open_existing(path: &Path, write: bool) -> Result<File, SwapError> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let refused = |reason: &str| SwapError::Refused {
        path: path.to_owned(),
        reason: reason.to_owned(),
    };
    let open_err = |e: std::io::Error| SwapError::Open {
        path: path.to_owned(),
        reason: io_reason(&e),
    };
    let meta = std::fs::symlink_metadata(path).map_err(open_err)?;
    if let Some(reason) = refuse_kind(&meta) {
        return Err(refused(reason));
    }
    let file = OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .map_err(open_err)?;
    let now = file.metadata().map_err(open_err)?;
    if now.dev() != meta.dev() || now.ino() != meta.ino() {
        return Err(refused("it was replaced while pagelab was opening it"));
    }
    match refuse_content(&file) {
        Some(reason) => Err(refused(reason)),
        None => Ok(file),
    }
}

/// Check, writing nothing, that `path` can be a swap file: a path where a file can be
/// created, or a free swap file pagelab made. For a caller that wants refusals before it
/// starts anything else (a run stores nothing when its swap file is refused); the device
/// checks again when it opens the file.
pub fn check_swap_path(path: &Path) -> Result<(), SwapError> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => open_existing(path, false).map(drop),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // Whether the file can be made: make it (exclusively, so it is ours) and remove it.
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .map_err(|e| SwapError::Open {
                    path: path.to_owned(),
                    reason: io_reason(&e),
                })?;
            let _ = std::fs::remove_file(path);
            Ok(())
        }
        Err(e) => Err(SwapError::Open {
            path: path.to_owned(),
            reason: io_reason(&e),
        }),
    }
}

/// A file-backed device's file. It is created exclusively (`O_EXCL`), or is a leftover swap
/// file pagelab made (see [`SWAP_FILE_MAGIC`]); either way it is pagelab's, locked against
/// other runs while the device lives, and removed when the device goes.
struct SwapFile {
    file: File,
    path: PathBuf,
    /// The file's identity, so that only this file is ever removed from `path`.
    dev: u64,
    ino: u64,
    /// One bit per slot, set once a page was written whole into the slot, cleared before a
    /// write starts and when the slot is freed. The file itself cannot say which slots hold a
    /// page of this device (a reused file holds an earlier run's; a failed write leaves half
    /// a page): a slot without its bit reads as [`SwapError::NotWritten`], as in memory.
    written: Box<[AtomicU64]>,
}

impl SwapFile {
    fn open(path: &Path, pages: u64) -> Result<SwapFile, SwapError> {
        use std::os::unix::fs::MetadataExt;
        let open_err = |e: std::io::Error| SwapError::Open {
            path: path.to_owned(),
            reason: io_reason(&e),
        };
        let file = match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
        {
            Ok(file) => {
                // New and ours; another run's `open_existing` refuses it until the header is
                // in, and cannot lock it after.
                file.try_lock().map_err(|_| SwapError::Refused {
                    path: path.to_owned(),
                    reason: "another pagelab run is using it".into(),
                })?;
                file
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => open_existing(path, true)?,
            Err(e) => return Err(open_err(e)),
        };
        let meta = file.metadata().map_err(open_err)?;
        live_swap_files().push((path.to_owned(), meta.dev(), meta.ino()));
        // From here, dropping `f` on an error removes the file.
        let f = SwapFile {
            file,
            path: path.to_owned(),
            dev: meta.dev(),
            ino: meta.ino(),
            written: (0..pages.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
        };
        f.file
            .write_all_at(&swap_file_header(pages), 0)
            .map_err(open_err)?;
        f.file.set_len(pages * PAGE_SIZE as u64).map_err(open_err)?;
        Ok(f)
    }

    #[inline]
    fn is_written(&self, off: usize) -> bool {
        self.written[off / 64].load(Acquire) & (1 << (off % 64)) != 0
    }

    #[inline]
    fn set_written(&self, off: usize, written: bool) {
        let bit = 1u64 << (off % 64);
        if written {
            self.written[off / 64].fetch_or(bit, AcqRel);
        } else {
            self.written[off / 64].fetch_and(!bit, AcqRel);
        }
    }
}

impl Drop for SwapFile {
    fn drop(&mut self) {
        live_swap_files()
            .retain(|(p, d, i)| !(p == &self.path && *d == self.dev && *i == self.ino));
        if still_names(&self.path, self.dev, self.ino) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// What the device lock protects (the allocator's part of `struct swap_info_struct`).
struct SwapInfo {
    /// One bit per slot, set while the slot is free.
    free: Box<[u64]>,
    nr_free: u64,
    /// Where the next scan starts (`cluster_next`).
    cursor: usize,
}

impl SwapInfo {
    #[inline]
    fn is_free(&self, off: usize) -> bool {
        self.free[off / 64] & (1 << (off % 64)) != 0
    }

    #[inline]
    fn set_free(&mut self, off: usize, free: bool) {
        let bit = 1 << (off % 64);
        if free {
            self.free[off / 64] |= bit;
        } else {
            self.free[off / 64] &= !bit;
        }
    }

    /// The first free slot at or after `from`.
    fn next_free(&self, from: usize) -> Option<usize> {
        let mut w = from / 64;
        if w >= self.free.len() {
            return None;
        }
        let mut bits = self.free[w] & (!0u64 << (from % 64));
        loop {
            if bits != 0 {
                return Some(w * 64 + bits.trailing_zeros() as usize);
            }
            w += 1;
            if w == self.free.len() {
                return None;
            }
            bits = self.free[w];
        }
    }
}

/// A CPU's cached slots (`slots`, `cur`, `nr`).
struct AllocSlots {
    slots: Vec<SwapEntry>,
    cur: usize,
}

impl AllocSlots {
    fn remaining(&self) -> &[SwapEntry] {
        &self.slots[self.cur..]
    }
}

/// One CPU's swap slot cache (`struct swap_slots_cache`): cached slots under `alloc_lock`, the
/// return array under `free_lock`.
pub struct SlotCache {
    alloc: SpinLock<AllocSlots>,
    ret: SpinLock<Vec<SwapEntry>>,
    /// Racy snapshots of the two lengths, written by the lock holders: let the allocation slow
    /// path see whether a drain could find slots without taking every lock.
    alloc_nr: AtomicU32,
    ret_nr: AtomicU32,
}

impl SlotCache {
    fn new(kind: LockKind, size: usize) -> Self {
        SlotCache {
            alloc: SpinLock::new(
                kind,
                AllocSlots {
                    slots: Vec::with_capacity(size),
                    cur: 0,
                },
            )
            .with_class(&SWAP_SLOTS_LOCK),
            ret: SpinLock::new(kind, Vec::with_capacity(size)).with_class(&SWAP_SLOTS_LOCK),
            alloc_nr: AtomicU32::new(0),
            ret_nr: AtomicU32::new(0),
        }
    }

    /// Slots this cache holds (a snapshot).
    pub fn len(&self) -> usize {
        (self.alloc_nr.load(Relaxed) + self.ret_nr.load(Relaxed)) as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Lock statistics of a device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SwapLockStats {
    /// The device lock (`si->lock`).
    pub device: LockStatsSnapshot,
    /// Every CPU's `alloc_lock` and `free_lock`, summed.
    pub slot_cache: LockStatsSnapshot,
}

/// A device's counters (from [`SwapDevice::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SwapStats {
    /// Slots that can be allocated (`si->pages`).
    pub size: u64,
    /// Allocated slots, those parked in per-CPU caches included (`si->inuse_pages`).
    pub inuse: u64,
    /// Slots in per-CPU caches and return arrays (a snapshot).
    pub cached: u64,
    pub pswpout: u64,
    pub pswpin: u64,
    /// Memory backing: slots holding data, and the bytes their buffers take (compressed
    /// size with compression). Zero for a file.
    pub stored_pages: u64,
    pub stored_bytes: u64,
    pub refills: u64,
    pub flushes: u64,
    pub drains: u64,
    pub trylock_fails: u64,
    pub alloc_fails: u64,
    pub locks: SwapLockStats,
}

/// Slots by state, from [`SwapDevice::check`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SwapCensus {
    /// Slots that can be allocated.
    pub size: u64,
    pub free: u64,
    /// Allocated slots outside the per-CPU caches.
    pub in_use: u64,
    /// In CPUs' slot caches, ready to be handed out.
    pub cached: u64,
    /// In CPUs' return arrays, waiting to be freed.
    pub returned: u64,
    /// Slots whose page is in the swap cache, and slots holding a shadow.
    pub swap_cache_pages: u64,
    pub shadows: u64,
    /// Slots holding a page (on either backing), and the bytes of their buffers (memory
    /// backing).
    pub stored_pages: u64,
    pub stored_bytes: u64,
}

/// A swap device (`struct swap_info_struct`) with its per-CPU slot caches and swap cache.
/// See the module documentation.
pub struct SwapDevice {
    swp_type: u32,
    /// `si->max`: slots including the header.
    nr_slots: usize,
    swap_map: Box<[AtomicU16]>,
    lock: SpinLock<SwapInfo>,
    /// Mirror of the free count, written under the lock, read without it.
    nr_free: AtomicU64,
    caches: PerCpu<SlotCache>,
    cache_size: usize,
    cache_auto: bool,
    /// `swap_slot_cache_active`.
    cache_active: AtomicBool,
    /// `swap_slots_cache_mutex`: serialises deactivation and reactivation.
    cache_switch: SpinLock<()>,
    store: Store,
    cache: SwapCache,
    nr_cpus: usize,
    /// One slot per CPU plus one for drains and checks.
    events: VmEvents,
    /// Memory backing: per-CPU deltas of (stored pages, stored bytes).
    stored: PerCpu<[AtomicI64; 2]>,
}

impl SwapDevice {
    /// `swapon`: set up a device as `cfg` says. A file that cannot be created or sized is an
    /// error naming the path and the reason.
    pub fn new(cfg: SwapConfig) -> Result<SwapDevice, SwapError> {
        if cfg.swp_type >= MAX_SWAPFILES {
            return Err(SwapError::Config(format!(
                "swap type {} is not below {MAX_SWAPFILES}",
                cfg.swp_type
            )));
        }
        if cfg.pages < 2 || cfg.pages - 1 > SWP_OFFSET_MASK {
            return Err(SwapError::Config(format!(
                "{} slots: need a header slot and at least one more, at most 2^47",
                cfg.pages
            )));
        }
        if cfg.nr_cpus == 0 || cfg.nr_cpus > 4096 {
            return Err(SwapError::Config(format!(
                "{} CPUs: the engine models 1 to 4096",
                cfg.nr_cpus
            )));
        }
        if cfg.slot_cache > 4096 {
            return Err(SwapError::Config(format!(
                "slot cache of {} slots per CPU: at most 4096",
                cfg.slot_cache
            )));
        }
        let nr_slots = cfg.pages as usize;
        let kind = cfg.lock_kind;
        let store = match &cfg.backing {
            Backing::Memory { compress } => Store::Memory {
                compress: *compress,
                groups: (0..nr_slots.div_ceil(SLOT_GROUP))
                    .map(|_| SpinLock::new(kind, std::array::from_fn(|_| Stored::Empty)))
                    .collect(),
            },
            Backing::File(path) => Store::File(SwapFile::open(path, cfg.pages)?),
        };
        let swap_map: Box<[AtomicU16]> = (0..nr_slots).map(|_| AtomicU16::new(0)).collect();
        swap_map[0].store(SWAP_MAP_BAD, Relaxed);
        let mut info = SwapInfo {
            free: vec![0u64; nr_slots.div_ceil(64)].into_boxed_slice(),
            nr_free: nr_slots as u64 - 1,
            cursor: 1,
        };
        for off in 1..nr_slots {
            info.set_free(off, true);
        }
        let cache_size = cfg.slot_cache;
        Ok(SwapDevice {
            swp_type: cfg.swp_type,
            nr_slots,
            swap_map,
            nr_free: AtomicU64::new(info.nr_free),
            lock: SpinLock::new(kind, info).with_class(&SWAP_INFO_LOCK),
            caches: PerCpu::new(cfg.nr_cpus, |_| SlotCache::new(kind, cache_size)),
            cache_size,
            cache_auto: cfg.slot_cache_auto,
            cache_active: AtomicBool::new(cache_size > 0),
            cache_switch: SpinLock::new(kind, ()),
            store,
            cache: SwapCache::new(cfg.swp_type, nr_slots),
            nr_cpus: cfg.nr_cpus,
            events: VmEvents::new(cfg.nr_cpus + 1),
            stored: PerCpu::new(cfg.nr_cpus + 1, |_| [AtomicI64::new(0), AtomicI64::new(0)]),
        })
    }

    pub fn swp_type(&self) -> u32 {
        self.swp_type
    }

    /// Slots that can be allocated (`si->pages`: all but the header).
    pub fn size(&self) -> u64 {
        self.nr_slots as u64 - 1
    }

    /// Free slots (`si->pages - si->inuse_pages`; a snapshot). Slots in per-CPU caches are
    /// not free.
    pub fn nr_free(&self) -> u64 {
        self.nr_free.load(Relaxed)
    }

    /// The device's swap cache.
    pub fn swap_cache(&self) -> &SwapCache {
        &self.cache
    }

    /// The device's event counters (pswpout, pswpin and the slot cache's).
    pub fn events(&self) -> &VmEvents {
        &self.events
    }

    /// The CPU slot that drains and checks count in, and that background threads (reclaim
    /// daemons) may pass as their `cpu`: it has no slot cache.
    fn kthread_cpu(&self) -> CpuId {
        CpuId(self.nr_cpus as u16)
    }

    /// The slot of `entry` if it belongs to this device.
    #[inline]
    fn slot(&self, entry: SwapEntry) -> Result<usize, SwapError> {
        if entry.swp_type() != self.swp_type {
            return Err(SwapError::BadEntry(entry, "of another swap device"));
        }
        let off = entry.offset() as usize;
        if off >= self.nr_slots {
            return Err(SwapError::BadEntry(entry, "beyond the end of the device"));
        }
        Ok(off)
    }

    /// The slot of `entry` if it is allocated.
    #[inline]
    fn used_slot(&self, entry: SwapEntry) -> Result<usize, SwapError> {
        let off = self.slot(entry)?;
        if self.swap_map[off].load(Relaxed) == 0 {
            return Err(SwapError::BadEntry(entry, "the slot is free"));
        }
        Ok(off)
    }

    #[inline]
    fn entry(&self, off: usize) -> SwapEntry {
        SwapEntry::new(self.swp_type, off as u64)
    }

    /// The usage word of `entry`'s slot: `(references, SWAP_HAS_CACHE set)` (`swap_count` and
    /// the cache bit; a snapshot).
    pub fn swap_count(&self, entry: SwapEntry) -> Result<(u16, bool), SwapError> {
        let u = self.swap_map[self.slot(entry)?].load(Relaxed);
        Ok((u & !SWAP_HAS_CACHE, u & SWAP_HAS_CACHE != 0))
    }

    // ---- slot allocation (mm/swapfile.c) ----

    /// `get_swap_pages`: up to `n` free slots from the device, under one hold of its lock.
    /// Each comes back with usage `SWAP_HAS_CACHE`. Fewer (or none) when the device is full.
    pub fn get_swap_pages(&self, n: usize) -> Vec<SwapEntry> {
        let mut v = Vec::with_capacity(n);
        self.get_swap_pages_into(n, &mut v);
        v
    }

    /// `scan_swap_map_slots`: append up to `n` slots to `out`; returns how many.
    fn get_swap_pages_into(&self, n: usize, out: &mut Vec<SwapEntry>) -> usize {
        if n == 0 || self.nr_free.load(Relaxed) == 0 {
            return 0;
        }
        let mut si = self.lock.lock();
        let mut got = 0;
        let mut pos = si.cursor;
        let mut wrapped = false;
        while got < n && si.nr_free > 0 {
            let off = match si.next_free(pos) {
                Some(off) => off,
                None if !wrapped => {
                    wrapped = true;
                    pos = 1;
                    continue;
                }
                None => break,
            };
            si.set_free(off, false);
            si.nr_free -= 1;
            debug_assert_eq!(self.swap_map[off].load(Relaxed), 0);
            self.swap_map[off].store(SWAP_HAS_CACHE, Relaxed);
            out.push(self.entry(off));
            got += 1;
            pos = off + 1;
        }
        si.cursor = if pos >= self.nr_slots { 1 } else { pos };
        self.nr_free.store(si.nr_free, Relaxed);
        got
    }

    /// `swapcache_free_entries`: give slots whose usage is exactly `SWAP_HAS_CACHE` (held by
    /// nobody) back to the device, under one hold of its lock. Their data and shadows go
    /// first, while the slots are still reserved.
    fn swapcache_free_entries(&self, cpu: CpuId, entries: &[SwapEntry]) {
        if entries.is_empty() {
            return;
        }
        for &e in entries {
            let off = e.offset() as usize;
            self.discard(cpu, off);
            self.cache.clear(e);
            debug_assert_eq!(
                self.cache.get(e),
                CacheSlot::Empty,
                "{e:?} freed with its page still in the swap cache"
            );
        }
        let mut si = self.lock.lock();
        for &e in entries {
            let off = e.offset() as usize;
            let u = self.swap_map[off].load(Relaxed);
            assert!(
                u == SWAP_HAS_CACHE && !si.is_free(off),
                "bad swap entry {e:?}: freed with usage {u:#x}"
            );
            self.swap_map[off].store(0, Relaxed);
            si.set_free(off, true);
        }
        si.nr_free += entries.len() as u64;
        self.nr_free.store(si.nr_free, Relaxed);
    }

    // ---- per-CPU slot caches (mm/swap_slots.c) ----

    /// `check_cache_active`: whether the per-CPU caches are in use, switching them off when
    /// free slots run low (draining them) and back on when there are plenty.
    fn check_cache_active(&self) -> bool {
        if self.cache_size == 0 {
            return false;
        }
        if !self.cache_auto {
            return true;
        }
        let pages = self.nr_free();
        let per = (self.nr_cpus * self.cache_size) as u64;
        if !self.cache_active.load(Relaxed) {
            if pages > per * ACTIVATE_FACTOR {
                let _g = self.cache_switch.lock();
                self.cache_active.store(true, Relaxed);
            }
        } else if pages < per * DEACTIVATE_FACTOR {
            let _g = self.cache_switch.lock();
            if self.cache_active.load(Relaxed) {
                self.cache_active.store(false, Relaxed);
                self.drain_all_caches();
            }
        }
        self.cache_active.load(Relaxed)
    }

    /// `cpu`'s slot cache; none for the background threads' CPU slot (`nr_cpus`), which goes
    /// to the device directly.
    #[inline]
    fn cpu_cache(&self, cpu: CpuId) -> Option<&SlotCache> {
        (cpu.idx() < self.nr_cpus).then(|| &self.caches[cpu])
    }

    /// `use_swap_slot_cache`.
    #[inline]
    fn cache_in_use(&self) -> bool {
        self.cache_size > 0 && self.cache_active.load(Relaxed)
    }

    /// `folio_alloc_swap` for an order-0 page on `cpu`: a slot from the CPU's cache, refilling
    /// it in one batch when empty; from the device directly when the caches are off or busy.
    /// The slot comes back with usage `SWAP_HAS_CACHE`: the caller owns the swap-cache
    /// reservation. `None` when every slot is in use: a device that looks full but has slots
    /// parked in other CPUs' caches drains them and tries again.
    pub fn folio_alloc_swap(&self, cpu: CpuId) -> Option<SwapEntry> {
        if let Some(cache) = self.cpu_cache(cpu)
            && self.check_cache_active()
        {
            if let Some(mut c) = cache.alloc.try_lock() {
                if c.remaining().is_empty() && self.cache_in_use() {
                    // refill_swap_slots_cache
                    c.slots.clear();
                    c.cur = 0;
                    if self.get_swap_pages_into(self.cache_size, &mut c.slots) > 0 {
                        self.events.count(cpu, VmEvent::SwapSlotRefill, 1);
                    }
                }
                let e = c.slots.get(c.cur).copied();
                if e.is_some() {
                    c.cur += 1;
                }
                cache.alloc_nr.store(c.remaining().len() as u32, Relaxed);
                drop(c);
                if e.is_some() {
                    return e;
                }
            } else {
                self.events.count(cpu, VmEvent::SwapSlotTrylockFail, 1);
            }
        }
        let mut one = Vec::with_capacity(1);
        if self.get_swap_pages_into(1, &mut one) == 1 {
            return one.pop();
        }
        if self.caches.iter().any(|(_, c)| !c.is_empty()) {
            self.drain_slot_caches();
            if self.get_swap_pages_into(1, &mut one) == 1 {
                return one.pop();
            }
        }
        self.events.count(cpu, VmEvent::SwapAllocFail, 1);
        None
    }

    /// `free_swap_slot`: free a slot nobody references any more (usage exactly
    /// `SWAP_HAS_CACHE`) through `cpu`'s return array, which goes back to the device in one
    /// batch when full; directly when the caches are off or busy. [`SwapDevice::swap_free`]
    /// and [`SwapDevice::put_swap_folio`] call this when the last reference goes.
    pub fn free_swap_slot(&self, cpu: CpuId, entry: SwapEntry) {
        debug_assert_eq!(
            self.swap_count(entry),
            Ok((0, true)),
            "free_swap_slot of {entry:?} with references"
        );
        if let Some(cache) = self.cpu_cache(cpu)
            && self.cache_in_use()
        {
            if let Some(mut r) = cache.ret.try_lock() {
                // The caches may have been deactivated (and drained) since the check above.
                if self.cache_in_use() {
                    if r.len() >= self.cache_size {
                        self.swapcache_free_entries(cpu, &r);
                        r.clear();
                        self.events.count(cpu, VmEvent::SwapSlotFlush, 1);
                    }
                    r.push(entry);
                    cache.ret_nr.store(r.len() as u32, Relaxed);
                    return;
                }
            } else {
                self.events.count(cpu, VmEvent::SwapSlotTrylockFail, 1);
            }
        }
        self.swapcache_free_entries(cpu, &[entry]);
    }

    /// Return one cache's slots to the device (`drain_slots_cache_cpu`).
    fn drain_cache(&self, cache: &SlotCache) {
        let cpu = self.kthread_cpu();
        let mut drained = false;
        {
            let mut c = cache.alloc.lock();
            if !c.remaining().is_empty() {
                self.swapcache_free_entries(cpu, c.remaining());
                drained = true;
            }
            c.slots.clear();
            c.cur = 0;
            cache.alloc_nr.store(0, Relaxed);
        }
        {
            let mut r = cache.ret.lock();
            if !r.is_empty() {
                self.swapcache_free_entries(cpu, &r);
                drained = true;
            }
            r.clear();
            cache.ret_nr.store(0, Relaxed);
        }
        if drained {
            self.events.count(cpu, VmEvent::SwapSlotDrain, 1);
        }
    }

    fn drain_all_caches(&self) {
        for (_, c) in self.caches.iter() {
            self.drain_cache(c);
        }
    }

    /// `__drain_swap_slots_cache`: return every CPU's cached and returned slots to the
    /// device (swapoff, teardown, a full device, invariant checks). Works from any thread.
    pub fn drain_slot_caches(&self) {
        self.drain_all_caches();
    }

    /// `cpu`'s slot cache.
    pub fn slot_cache(&self, cpu: CpuId) -> &SlotCache {
        &self.caches[cpu]
    }

    /// Slots held by per-CPU caches and return arrays (a snapshot).
    pub fn cached_slots(&self) -> u64 {
        self.caches.iter().map(|(_, c)| c.len() as u64).sum()
    }

    // ---- usage counts (mm/swapfile.c) ----

    /// `swap_duplicate`: one more swap PTE references `entry` (a page unmapped to it, or a
    /// swap PTE copied at fork). Errors on a free slot or a full count.
    pub fn swap_duplicate(&self, entry: SwapEntry) -> Result<(), SwapError> {
        let m = &self.swap_map[self.slot(entry)?];
        let mut cur = m.load(Relaxed);
        loop {
            if cur == 0 || cur == SWAP_MAP_BAD {
                return Err(SwapError::BadEntry(entry, "the slot is free"));
            }
            if cur & !SWAP_HAS_CACHE >= SWAP_MAP_MAX {
                return Err(SwapError::BadEntry(entry, "too many references"));
            }
            match m.compare_exchange_weak(cur, cur + 1, Relaxed, Relaxed) {
                Ok(_) => return Ok(()),
                Err(x) => cur = x,
            }
        }
    }

    /// `swap_free`: a swap PTE referencing `entry` is gone. When it was the last reference
    /// and the swap cache holds no reservation either, the slot is freed through `cpu`'s
    /// return array; returns whether that happened.
    pub fn swap_free(&self, cpu: CpuId, entry: SwapEntry) -> Result<bool, SwapError> {
        let m = &self.swap_map[self.slot(entry)?];
        let mut cur = m.load(Relaxed);
        loop {
            if cur == SWAP_MAP_BAD || cur & !SWAP_HAS_CACHE == 0 {
                return Err(SwapError::BadEntry(entry, "no reference to drop"));
            }
            // The last reference leaves the slot reserved (SWAP_HAS_CACHE) for its way back.
            let new = if cur == 1 { SWAP_HAS_CACHE } else { cur - 1 };
            match m.compare_exchange_weak(cur, new, AcqRel, Relaxed) {
                Ok(_) => break,
                Err(x) => cur = x,
            }
        }
        if cur == 1 {
            self.free_swap_slot(cpu, entry);
            return Ok(true);
        }
        Ok(false)
    }

    /// `swapcache_prepare`: take the swap-cache reservation of a slot that PTEs reference,
    /// to read its page in. [`SwapError::CacheBusy`] if someone holds it already (the page is
    /// in the swap cache, or another fault is reading it in: wait and look it up).
    pub fn swapcache_prepare(&self, entry: SwapEntry) -> Result<(), SwapError> {
        let m = &self.swap_map[self.slot(entry)?];
        let mut cur = m.load(Relaxed);
        loop {
            if cur == 0 || cur == SWAP_MAP_BAD {
                return Err(SwapError::BadEntry(entry, "the slot is free"));
            }
            if cur & SWAP_HAS_CACHE != 0 {
                return Err(SwapError::CacheBusy(entry));
            }
            match m.compare_exchange_weak(cur, cur | SWAP_HAS_CACHE, Acquire, Relaxed) {
                Ok(_) => return Ok(()),
                Err(x) => cur = x,
            }
        }
    }

    /// `put_swap_folio`: drop the swap-cache reservation (the page left the swap cache, or a
    /// swap-out or swap-in was abandoned). Frees the slot through `cpu`'s return array when no
    /// PTE references it; returns whether that happened. The page must have been deleted
    /// from the swap cache first.
    pub fn put_swap_folio(&self, cpu: CpuId, entry: SwapEntry) -> Result<bool, SwapError> {
        let m = &self.swap_map[self.slot(entry)?];
        let mut cur = m.load(Relaxed);
        loop {
            if cur == SWAP_MAP_BAD || cur & SWAP_HAS_CACHE == 0 {
                return Err(SwapError::BadEntry(entry, "no swap cache reservation"));
            }
            if cur == SWAP_HAS_CACHE {
                // No references: the reservation goes with the slot to the free path.
                self.free_swap_slot(cpu, entry);
                return Ok(true);
            }
            match m.compare_exchange_weak(cur, cur & !SWAP_HAS_CACHE, AcqRel, Relaxed) {
                Ok(_) => return Ok(false),
                Err(x) => cur = x,
            }
        }
    }

    // ---- page I/O ----

    /// `swap_writepage`: store a page's 512 words (an arena frame's
    /// [`Arena::words`](crate::arena::Arena::words)) in `entry`'s slot. The caller owns the slot
    /// (it holds the swap-cache reservation, as the kernel holds the folio lock).
    pub fn write_page(
        &self,
        cpu: CpuId,
        entry: SwapEntry,
        src: &[AtomicU64],
    ) -> Result<(), SwapError> {
        assert_eq!(
            src.len(),
            WORDS_PER_PAGE,
            "a page is {WORDS_PER_PAGE} words"
        );
        let off = self.used_slot(entry)?;
        match &self.store {
            Store::Memory { compress, groups } => {
                let new = if *compress {
                    Stored::compress(src)
                } else {
                    Stored::raw(src)
                };
                let (pages, bytes) = (1, new.bytes() as i64);
                let old =
                    std::mem::replace(&mut groups[off / SLOT_GROUP].lock()[off % SLOT_GROUP], new);
                let old_pages = i64::from(!matches!(old, Stored::Empty));
                self.account(cpu, pages - old_pages, bytes - old.bytes() as i64);
            }
            Store::File(f) => {
                let mut buf = [0u8; PAGE_SIZE];
                words_to_bytes(src, &mut buf);
                // Until the whole page is in, the slot holds no page: a failed write may leave
                // part of this one and part of the last.
                f.set_written(off, false);
                f.file
                    .write_all_at(&buf, off as u64 * PAGE_SIZE as u64)
                    .map_err(|e| SwapError::Io {
                        path: f.path.clone(),
                        op: "write",
                        offset: off as u64,
                        reason: io_reason(&e),
                    })?;
                f.set_written(off, true);
            }
        }
        self.events.count(cpu, VmEvent::PSwpOut, 1);
        Ok(())
    }

    /// `swap_read_folio`: load `entry`'s slot into a page's 512 words. A slot that holds no
    /// whole page of this device (never written since it was allocated, or its write failed)
    /// is [`SwapError::NotWritten`], on either backing.
    pub fn read_page(
        &self,
        cpu: CpuId,
        entry: SwapEntry,
        dst: &[AtomicU64],
    ) -> Result<(), SwapError> {
        assert_eq!(
            dst.len(),
            WORDS_PER_PAGE,
            "a page is {WORDS_PER_PAGE} words"
        );
        let off = self.used_slot(entry)?;
        match &self.store {
            Store::Memory { groups, .. } => {
                if !groups[off / SLOT_GROUP].lock()[off % SLOT_GROUP].read(dst) {
                    return Err(SwapError::NotWritten(entry));
                }
            }
            Store::File(f) => {
                if !f.is_written(off) {
                    return Err(SwapError::NotWritten(entry));
                }
                let mut buf = [0u8; PAGE_SIZE];
                f.file
                    .read_exact_at(&mut buf, off as u64 * PAGE_SIZE as u64)
                    .map_err(|e| SwapError::Io {
                        path: f.path.clone(),
                        op: "read",
                        offset: off as u64,
                        reason: io_reason(&e),
                    })?;
                words_from_bytes(&buf, dst);
            }
        }
        self.events.count(cpu, VmEvent::PSwpIn, 1);
        Ok(())
    }

    /// [`SwapDevice::write_page`] from arena frame `pfn`.
    pub fn swap_out_frame(
        &self,
        cpu: CpuId,
        entry: SwapEntry,
        arena: &Arena,
        pfn: Pfn,
    ) -> Result<(), SwapError> {
        self.write_page(cpu, entry, arena.words(pfn))
    }

    /// [`SwapDevice::read_page`] into arena frame `pfn`.
    pub fn swap_in_frame(
        &self,
        cpu: CpuId,
        entry: SwapEntry,
        arena: &Arena,
        pfn: Pfn,
    ) -> Result<(), SwapError> {
        self.read_page(cpu, entry, arena.words(pfn))
    }

    /// Drop a slot's data (zram's `slot_free`; a file slot forgets it holds a page).
    fn discard(&self, cpu: CpuId, off: usize) {
        match &self.store {
            Store::Memory { groups, .. } => {
                let old = std::mem::take(&mut groups[off / SLOT_GROUP].lock()[off % SLOT_GROUP]);
                if !matches!(old, Stored::Empty) {
                    self.account(cpu, -1, -(old.bytes() as i64));
                }
            }
            Store::File(f) => f.set_written(off, false),
        }
    }

    #[inline]
    fn account(&self, cpu: CpuId, pages: i64, bytes: i64) {
        let s = &self.stored[cpu];
        if pages != 0 {
            s[0].fetch_add(pages, Relaxed);
        }
        if bytes != 0 {
            s[1].fetch_add(bytes, Relaxed);
        }
    }

    /// Memory backing: (slots holding data, bytes of their buffers).
    fn stored(&self) -> (u64, u64) {
        let (mut p, mut b) = (0i64, 0i64);
        for (_, s) in self.stored.iter() {
            p += s[0].load(Relaxed);
            b += s[1].load(Relaxed);
        }
        (p.max(0) as u64, b.max(0) as u64)
    }

    // ---- statistics and checks ----

    /// Lock statistics of the device lock and the slot caches' locks, per lock class (as
    /// lock_stat reports them) in the calling thread's stats domain.
    pub fn lock_stats(&self) -> SwapLockStats {
        let d = pagelab_sync::stats::current_domain();
        SwapLockStats {
            device: d.class(&SWAP_INFO_LOCK).exclusive,
            slot_cache: d.class(&SWAP_SLOTS_LOCK).exclusive,
        }
    }

    /// The device's counters.
    pub fn stats(&self) -> SwapStats {
        let (stored_pages, stored_bytes) = self.stored();
        let ev = |e| self.events.sum(e);
        SwapStats {
            size: self.size(),
            inuse: self.size() - self.nr_free(),
            cached: self.cached_slots(),
            pswpout: ev(VmEvent::PSwpOut),
            pswpin: ev(VmEvent::PSwpIn),
            stored_pages,
            stored_bytes,
            refills: ev(VmEvent::SwapSlotRefill),
            flushes: ev(VmEvent::SwapSlotFlush),
            drains: ev(VmEvent::SwapSlotDrain),
            trylock_fails: ev(VmEvent::SwapSlotTrylockFail),
            alloc_fails: ev(VmEvent::SwapAllocFail),
            locks: self.lock_stats(),
        }
    }

    /// Zero the event counters and lock statistics (not the stored-data counters, which are
    /// state).
    pub fn reset_stats(&self) {
        self.events.reset();
        let d = pagelab_sync::stats::current_domain();
        d.reset_class(&SWAP_INFO_LOCK);
        d.reset_class(&SWAP_SLOTS_LOCK);
    }

    /// Check every invariant of the module documentation and count slots by state. Takes
    /// every cache lock and the device lock, so it is exact only while no other thread uses
    /// the device. Returns the first violation found.
    pub fn check(&self) -> Result<SwapCensus, String> {
        let mut census = SwapCensus {
            size: self.size(),
            ..Default::default()
        };
        // 0: not in a cache; 1: cached for allocation; 2: in a return array.
        let mut where_ = vec![0u8; self.nr_slots];
        let guards: Vec<_> = self
            .caches
            .iter()
            .map(|(cpu, c)| (cpu, c.alloc.lock(), c.ret.lock()))
            .collect();
        for (cpu, a, r) in guards.iter() {
            for (list, kind, what) in [
                (a.remaining(), 1u8, "slot cache"),
                (&r[..], 2, "return array"),
            ] {
                for &e in list {
                    let off = self
                        .slot(e)
                        .map_err(|err| format!("cpu {}'s {what}: {err}", cpu.0))?;
                    if off == 0 {
                        return Err(format!("cpu {}'s {what} holds the header slot", cpu.0));
                    }
                    if where_[off] != 0 {
                        return Err(format!(
                            "{e:?} is cached twice (second: cpu {}'s {what})",
                            cpu.0
                        ));
                    }
                    where_[off] = kind;
                    let u = self.swap_map[off].load(Relaxed);
                    if u != SWAP_HAS_CACHE {
                        return Err(format!(
                            "{e:?} in cpu {}'s {what} has usage {u:#x}, not SWAP_HAS_CACHE alone",
                            cpu.0
                        ));
                    }
                    if let CacheSlot::Page(p) = self.cache.get(e) {
                        return Err(format!(
                            "{e:?} in cpu {}'s {what} has page {p:?} in the swap cache",
                            cpu.0
                        ));
                    }
                    if kind == 1 {
                        census.cached += 1;
                    } else {
                        census.returned += 1;
                    }
                }
            }
            if a.slots.len() > self.cache_size || r.len() > self.cache_size {
                return Err(format!(
                    "cpu {}'s caches hold more than {} slots",
                    cpu.0, self.cache_size
                ));
            }
        }
        let si = self.lock.lock();
        if self.swap_map[0].load(Relaxed) != SWAP_MAP_BAD || si.is_free(0) {
            return Err("the header slot is not reserved".into());
        }
        let mut stored_bytes = 0u64;
        for off in 1..self.nr_slots {
            let e = self.entry(off);
            let u = self.swap_map[off].load(Relaxed);
            if si.is_free(off) != (u == 0) {
                return Err(format!(
                    "{e:?}: usage {u:#x} but the bitmap says {}",
                    if si.is_free(off) { "free" } else { "allocated" }
                ));
            }
            if u == SWAP_MAP_BAD {
                return Err(format!("{e:?} is marked bad"));
            }
            let data = match &self.store {
                Store::Memory { groups, .. } => {
                    let g = groups[off / SLOT_GROUP].lock();
                    let s = &g[off % SLOT_GROUP];
                    stored_bytes += s.bytes();
                    !matches!(s, Stored::Empty)
                }
                Store::File(f) => f.is_written(off),
            };
            census.stored_pages += u64::from(data);
            match self.cache.get(e) {
                CacheSlot::Page(p) => {
                    census.swap_cache_pages += 1;
                    if u & SWAP_HAS_CACHE == 0 {
                        return Err(format!(
                            "{e:?} has page {p:?} in the swap cache but usage {u:#x} without SWAP_HAS_CACHE"
                        ));
                    }
                }
                CacheSlot::Shadow(_) => census.shadows += 1,
                CacheSlot::Empty => {}
            }
            if u == 0 {
                census.free += 1;
                if self.cache.get(e) != CacheSlot::Empty {
                    return Err(format!("free {e:?} still has a swap cache entry"));
                }
                if data {
                    return Err(format!("free {e:?} still has stored data"));
                }
            } else if where_[off] == 0 {
                census.in_use += 1;
            }
        }
        if census.free != si.nr_free || self.nr_free() != si.nr_free {
            return Err(format!(
                "free count {} (mirror {}) but {} free slots",
                si.nr_free,
                self.nr_free(),
                census.free
            ));
        }
        if census.free + census.in_use + census.cached + census.returned != census.size {
            return Err(format!("census {census:?} does not add up to the size"));
        }
        if let Store::Memory { .. } = self.store {
            census.stored_bytes = stored_bytes;
            let (p, b) = self.stored();
            if (p, b) != (census.stored_pages, stored_bytes) {
                return Err(format!(
                    "stored counters say {p} pages, {b} B; the slots hold {} pages, {stored_bytes} B",
                    census.stored_pages
                ));
            }
        }
        drop(si);
        drop(guards);
        Ok(census)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_packing() {
        let e = SwapEntry::new(3, 0x1234);
        assert_eq!((e.swp_type(), e.offset()), (3, 0x1234));
        assert_eq!(e.val(), (3 << 47) | 0x1234);
        assert_eq!(SwapEntry::from_val(e.val()), Some(e));
        assert_eq!(SwapEntry::from_pte(e.to_pte()), Some(e));
        let max = SwapEntry::new(MAX_SWAPFILES - 1, SWP_OFFSET_MASK);
        assert_eq!(
            max.val(),
            Pte::MAX_SWAP_ENTRY,
            "fills the swap PTE payload exactly"
        );
        assert_eq!(SwapEntry::from_pte(max.to_pte()), Some(max));
        assert_eq!(SwapEntry::from_val(3 << 47), None, "offset 0 is the header");
        assert_eq!(SwapEntry::from_pte(Pte::NONE), None);
        assert_eq!(format!("{e:?}"), "swp 3:0x1234");
    }

    #[test]
    #[should_panic(expected = "out of range")]
    fn offset_zero_is_refused() {
        let _ = SwapEntry::new(0, 0);
    }

    #[test]
    fn a_memory_slot_costs_at_most_32_bytes() {
        // A lock per slot would take 96 bytes of it.
        let per_slot = std::mem::size_of::<SlotGroup>() / SLOT_GROUP;
        assert!(per_slot <= 32, "{per_slot} B per slot");
    }

    #[test]
    fn bitmap_scan_finds_the_next_free_slot() {
        let mut si = SwapInfo {
            free: vec![0; 3].into_boxed_slice(),
            nr_free: 0,
            cursor: 1,
        };
        assert_eq!(si.next_free(0), None);
        si.set_free(5, true);
        si.set_free(130, true);
        assert_eq!(si.next_free(0), Some(5));
        assert_eq!(si.next_free(5), Some(5));
        assert_eq!(si.next_free(6), Some(130));
        assert_eq!(si.next_free(131), None);
        assert_eq!(si.next_free(500), None);
    }

    fn file_device(path: &Path, pages: u64) -> Result<SwapDevice, SwapError> {
        SwapDevice::new(SwapConfig::new(pages, Backing::File(path.to_owned()), 1))
    }

    fn words(v: u64) -> Vec<AtomicU64> {
        (0..WORDS_PER_PAGE as u64)
            .map(|i| AtomicU64::new(v ^ i))
            .collect()
    }

    fn refused(e: SwapError, why: &str) {
        let msg = e.to_string();
        assert!(
            matches!(e, SwapError::Refused { .. }) && msg.contains(why),
            "{msg}"
        );
        assert!(!msg.contains('\n'), "{msg}");
    }

    /// Nothing but a swap file pagelab made is ever used, and what is refused is refused
    /// before a byte of it is written: a user's file, a database (a results store), a
    /// directory, a device, a symlink (even to a free swap file).
    #[test]
    fn a_file_that_is_not_a_pagelab_swap_file_is_refused_unwritten() {
        let dir = tempfile::tempdir().unwrap();
        let text = dir.path().join("notes.txt");
        std::fs::write(&text, b"my notes\n").unwrap();
        let db = dir.path().join("results.db");
        let mut sqlite = SQLITE_MAGIC.to_vec();
        sqlite.resize(8192, 7);
        std::fs::write(&db, &sqlite).unwrap();
        let empty = dir.path().join("empty");
        std::fs::write(&empty, b"").unwrap();
        for (path, why) in [
            (&text, "is not a pagelab swap file"),
            (&db, "SQLite database"),
            (&empty, "is not a pagelab swap file"),
        ] {
            let before = std::fs::read(path).unwrap();
            refused(check_swap_path(path).unwrap_err(), why);
            refused(file_device(path, 8).err().unwrap(), why);
            assert_eq!(std::fs::read(path).unwrap(), before, "{}", path.display());
        }
        refused(file_device(dir.path(), 8).err().unwrap(), "is a directory");
        refused(
            file_device(Path::new("/dev/null"), 8).err().unwrap(),
            "not a regular file",
        );
        // A leftover swap file behind a symlink is still refused: the link is not pagelab's.
        let leftover = dir.path().join("leftover");
        std::fs::write(&leftover, swap_file_header(4)).unwrap();
        for target in [&text, &leftover] {
            let link = dir.path().join("link");
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(target, &link).unwrap();
            refused(check_swap_path(&link).unwrap_err(), "symbolic link");
            refused(file_device(&link, 8).err().unwrap(), "symbolic link");
            assert!(link.exists());
        }
        assert_eq!(std::fs::read(&text).unwrap(), b"my notes\n");
    }

    /// A new file is created with the header and goes with the device; a swap file a killed
    /// run left is reused (its old pages are not readable as this device's) and goes too; one
    /// that a live device holds is refused.
    #[test]
    fn a_swap_file_is_ours_new_or_left_over_and_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("swap");
        check_swap_path(&path).unwrap();
        assert!(!path.exists(), "the check leaves nothing behind");
        let dev = file_device(&path, 8).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len(), 8 * PAGE_SIZE);
        assert_eq!(&bytes[..32], &swap_file_header(8));
        // Held by a device: another one (another run) may not have it.
        refused(check_swap_path(&path).unwrap_err(), "another pagelab run");
        refused(file_device(&path, 8).err().unwrap(), "another pagelab run");
        drop(dev);
        assert!(!path.exists(), "the device removes the file it created");
        // What a killed run leaves (its lock went with the process): the header and a page
        // in slot 1.
        let mut leftover = swap_file_header(8).to_vec();
        leftover.resize(2 * PAGE_SIZE, 0xab);
        std::fs::write(&path, &leftover).unwrap();
        check_swap_path(&path).unwrap();
        assert_eq!(
            std::fs::read(&path).unwrap(),
            leftover,
            "the check writes nothing"
        );
        let dev = file_device(&path, 16).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            16 * PAGE_SIZE as u64
        );
        let cpu = CpuId(0);
        let e = dev.folio_alloc_swap(cpu).unwrap();
        assert_eq!(e.offset(), 1, "the slot the killed run wrote");
        let out = words(0);
        assert_eq!(dev.read_page(cpu, e, &out), Err(SwapError::NotWritten(e)));
        dev.write_page(cpu, e, &words(5)).unwrap();
        dev.read_page(cpu, e, &out).unwrap();
        assert!(
            out.iter()
                .zip(&words(5))
                .all(|(a, b)| a.load(Relaxed) == b.load(Relaxed))
        );
        drop(dev);
        assert!(!path.exists(), "a reused swap file is removed too");
    }

    /// A write that fails half-way leaves a slot that reads as holding no page, not as the
    /// page it held before or a torn one.
    #[test]
    fn a_failed_write_leaves_no_readable_page() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("swap");
        let mut dev = file_device(&path, 8).unwrap();
        let cpu = CpuId(0);
        let e = dev.folio_alloc_swap(cpu).unwrap();
        dev.write_page(cpu, e, &words(1)).unwrap();
        let out = words(0);
        dev.read_page(cpu, e, &out).unwrap();
        assert!(
            out.iter()
                .zip(&words(1))
                .all(|(a, b)| a.load(Relaxed) == b.load(Relaxed))
        );
        // The disk goes bad: every write fails from now on.
        let Store::File(f) = &mut dev.store else {
            unreachable!()
        };
        f.file = File::open(&path).unwrap();
        let err = dev.write_page(cpu, e, &words(2)).unwrap_err();
        assert!(matches!(err, SwapError::Io { op: "write", .. }), "{err}");
        assert_eq!(dev.read_page(cpu, e, &out), Err(SwapError::NotWritten(e)));
        dev.put_swap_folio(cpu, e).unwrap();
        dev.drain_slot_caches();
        dev.check().unwrap();
    }

    /// [`remove_swap_files`] (for a process that quits without unwinding) removes the file of
    /// a live device, and a device dropped after it does not remove a file that took its path.
    #[test]
    fn remove_swap_files_removes_live_files_only_ours() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("swap");
        let dev = file_device(&path, 4).unwrap();
        // Only this test's files: other tests' devices are alive in this process.
        remove_swap_files_where(|p| p.starts_with(dir.path()));
        assert!(!path.exists());
        std::fs::write(&path, b"someone else's").unwrap();
        drop(dev);
        assert_eq!(std::fs::read(&path).unwrap(), b"someone else's");
    }

    #[test]
    fn stored_forms() {
        let words: Vec<AtomicU64> = (0..512).map(|_| AtomicU64::new(7)).collect();
        assert!(matches!(Stored::compress(&words), Stored::Same(7)));
        for (i, w) in words.iter().enumerate() {
            w.store((i % 4) as u64, Relaxed);
        }
        let s = Stored::compress(&words);
        assert!(
            matches!(s, Stored::Lz4(_)) && s.bytes() < 200,
            "{}",
            s.bytes()
        );
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for w in &words {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            w.store(x, Relaxed);
        }
        let s = Stored::compress(&words);
        assert!(matches!(s, Stored::Raw(_)), "random data is stored raw");
        let out: Vec<AtomicU64> = (0..512).map(|_| AtomicU64::new(0)).collect();
        assert!(s.read(&out));
        assert!(
            out.iter()
                .zip(&words)
                .all(|(a, b)| a.load(Relaxed) == b.load(Relaxed))
        );
    }
}
