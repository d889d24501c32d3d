//! Range-locked address spaces' VMA metadata (`mm.mmap_lock = "range"`): one VMA array per
//! 1 GiB of address space (the span of one PMD table), each with its own lock, and virtual
//! address allocation from per-CPU address blocks.
//!
//! # Why
//!
//! RadixVM (Clements, Kaashoek and Zeldovich, EuroSys'13) keeps the mapping metadata in the
//! nodes of a radix tree shaped like the page table, so that mmap and munmap of
//! non-overlapping ranges write no common cache line; CortenMM (SOSP'25) keeps it with the
//! page-table pages themselves and hands out virtual addresses from per-CPU blocks, so that
//! two CPUs' mmaps do not meet in the address allocator either. One mm-wide VMA array under
//! one lock would make every mmap and munmap of every thread write the same two lines (the
//! lock and the array pointer), which is what Linux's `mmap_lock` and maple tree cost and what
//! these designs remove.
//!
//! # The engine's layout
//!
//! - A [`Shard`] per PMD-table span (1 GiB, [`SHARD_SIZE`]) holds, RCU-published, the VMAs
//!   that intersect its span (a VMA crossing a 1 GiB boundary is in every shard it touches),
//!   and a lock that serialises the shard's writers: mmap placing a VMA in the shard, and the
//!   metadata step of munmap and MAP_FIXED, which hold the covering page-table page's range
//!   lock (`range_lock`) and then lock the shards of their range in address order.
//! - A fault looks its VMA up in the shard of its address, after read-locking its PTE table's
//!   range lock: every operation that changes the VMA at that address covers it, so holds an
//!   ancestor of (or is) that table's page, and has finished (`range_lock`); the shard array
//!   it reads is the one such an operation published.
//! - Shards are created on first use, 512 at a time (the shards of one PGD entry's 512 GiB),
//!   and live as long as the mm: a lookup never races a shard's freeing.
//! - Each CPU allocates addresses from its own block, a 1 GiB-aligned shard it took from the
//!   mm-wide pool of free blocks or, when the pool has none, from the block cursor (one pool
//!   lock or one atomic add per 1 GiB of address space a CPU fills, as CortenMM refills its
//!   per-CPU allocator), placing a mapping top-down in the shard's free gaps as
//!   `unmapped_area_topdown` does in the whole space. Space a munmap frees in a CPU's current
//!   block is found again by that CPU's next gap search. Mappings larger than a block take
//!   contiguous blocks, free ones from the pool first (lowest run that fits), else from the
//!   cursor.
//! - Freed blocks are reused, as RadixVM and CortenMM reuse freed ranges: a block a CPU moves
//!   on from (it had no room) is *retired*; a retired block, and each block of a mapping larger
//!   than a block, goes back to the pool when a munmap leaves its shard empty (or at once, if
//!   it is empty when retired). Each shard's [`BlockState`] changes under the shard's own lock,
//!   so a munmap and a retirement agree on who returns the block; the pool has its own lock
//!   ([`VA_BLOCK_POOL`]), taken only to take or return a whole block, never by an mmap or
//!   munmap inside a CPU's current block: CPUs mapping in their own blocks still share no line.
//!   A CPU's current block is never pooled, so a CPU that unmaps everything in it keeps it.
//!   A block is not pooled while a munmap that emptied it is still zapping its pages and
//!   freeing its page tables (`unmap_region` runs after the shard locks are dropped, under
//!   the covering node's lock only): a CPU taking the block from the pool could otherwise fault
//!   into a page table that munmap is about to free. Such a munmap counts itself in the shard
//!   (`unmapping`) while it publishes, and returns the block itself once it is done.

//! # Scope in traces
//!
//! A shard's lock and array are written by the CPUs that map and unmap in it: one CPU when
//! each uses its own block, several when they share a region. The lock records nothing while
//! one CPU has taken it and records under [`VMA_SHARD_LOCK_SHARED`] (per mm) once a second CPU
//! has, as the split PTE locks do (`pgtable`), so that the replay makes only the CPUs that
//! really share a shard meet there. The shard's reverse-map lock does the same under
//! [`SHARD_RMAP_LOCK_SHARED`]: threads unmapping slices of one region (mapbench-shared) free
//! its page table from whichever CPU comes last, and a reclaimer walks from its own CPU.

use std::collections::BTreeSet;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use pagelab_sync::trace::{self, Access, LockModel};
use pagelab_sync::{
    LockKind, RcuDomain, RcuGuard, RwSem, RwSemReadGuard, RwSemWriteGuard, SpinGuard, SpinLock,
};

use crate::cpu::CpuId;
use crate::vm::pgtable::{PUD_SHIFT, TASK_SIZE};
use crate::vm::vma::{Vma, VmaTree};
use std::sync::Arc;
// The RCU domain is shared through the sync crate's `Arc`, which is loom's under `--cfg loom`.
use pagelab_sync::shim::Arc as RcuArc;

/// A shard's span: one PMD table's (1 GiB).
pub const SHARD_SHIFT: u32 = PUD_SHIFT;
pub const SHARD_SIZE: u64 = 1 << SHARD_SHIFT;
/// Shards per directory entry (one PGD entry's span).
const DIR_SHARDS: usize = 512;
const NR_SHARDS: usize = (TASK_SIZE >> SHARD_SHIFT) as usize;
const NR_DIRS: usize = NR_SHARDS / DIR_SHARDS;

/// A shard's lock while one CPU has taken it: private, records nothing.
pub static VMA_SHARD_LOCK: pagelab_sync::LockClass =
    pagelab_sync::LockClass::new("vma shard lock", pagelab_sync::Scope::Private);
/// A shard's lock that tasks on more than one CPU have taken: shared by the threads of the mm.
pub static VMA_SHARD_LOCK_SHARED: pagelab_sync::LockClass =
    pagelab_sync::LockClass::new("vma shard lock (shared)", pagelab_sync::Scope::Mm);
/// A shard's reverse-map lock (`anon_vma->rwsem` for the shard's span): reclaim's walks to a
/// page in the shard hold it for read, a munmap freeing page tables inside the shard holds it
/// for write. While one CPU only has taken it (the shard's own CPU's munmaps, each task in its
/// own block) it is private and records nothing.
pub static SHARD_RMAP_LOCK: pagelab_sync::LockClass =
    pagelab_sync::LockClass::sleeping("shard rmap_lock", pagelab_sync::Scope::Private);
/// A shard's reverse-map lock that tasks on more than one CPU have taken: the munmaps of
/// threads that share a region (mapbench-shared, CortenMM's high-contention tests), or a
/// reclaimer on another CPU. Recorded per mm, as the shared node locks are, so that the
/// replay makes exactly those CPUs meet on it.
pub static SHARD_RMAP_LOCK_SHARED: pagelab_sync::LockClass =
    pagelab_sync::LockClass::sleeping("shard rmap_lock (shared)", pagelab_sync::Scope::Mm);
/// The mm-wide pool of free address blocks: taken to take a block (when a CPU's block is full,
/// or for a mapping larger than a block) and to return one (a retired block a munmap emptied).
pub static VA_BLOCK_POOL: pagelab_sync::LockClass =
    pagelab_sync::LockClass::new("va block pool", pagelab_sync::Scope::Mm);
/// The mm-wide cursor from which CPUs take fresh address blocks.
pub static VA_BLOCK_CURSOR: pagelab_sync::LockClass =
    pagelab_sync::LockClass::new("va block cursor", pagelab_sync::Scope::Mm);

/// Which CPUs have taken a lock, for the scope its acquisitions are recorded under: the CPU
/// (plus one) that took it first, or [`USERS_SHARED`] once another did too; 0: nobody yet.
/// Written twice per lock at most, so reading it on every acquisition adds no line transfer.
struct Users(AtomicU32);

/// In [`Users`]: a second CPU has taken the lock.
const USERS_SHARED: u32 = u32::MAX;

impl Users {
    const fn new() -> Self {
        Users(AtomicU32::new(0))
    }

    /// The task on `cpu` takes the lock: the second CPU marks it shared.
    fn note(&self, cpu: CpuId) {
        let me = u32::from(cpu.0) + 1;
        match self.0.load(Ordering::Relaxed) {
            USERS_SHARED => {}
            0 => {
                if let Err(f) = self
                    .0
                    .compare_exchange(0, me, Ordering::Relaxed, Ordering::Relaxed)
                    && f != me
                {
                    self.0.store(USERS_SHARED, Ordering::Relaxed);
                }
            }
            f if f != me => self.0.store(USERS_SHARED, Ordering::Relaxed),
            _ => {}
        }
    }

    fn is_shared(&self) -> bool {
        self.0.load(Ordering::Relaxed) == USERS_SHARED
    }

    /// Forget who took the lock (the block went back to the pool empty: whoever takes it next
    /// starts afresh, as a page-table page does when it is installed again).
    fn reset(&self) {
        self.0.store(0, Ordering::Relaxed);
    }
}

/// What a shard's span is to the address allocator ([`Shard::state`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum BlockState {
    /// Never handed out: the cursor has not reached it (a MAP_FIXED mapping may be there).
    Unused = 0,
    /// A CPU's current block: only that CPU places mappings in it.
    Owned = 1,
    /// Nobody places mappings in it (its CPU moved on, or it holds part of a mapping larger
    /// than a block): the munmap that leaves it empty returns it to the pool.
    Retired = 2,
    /// In the pool.
    Free = 3,
}

impl BlockState {
    fn from_u8(v: u8) -> BlockState {
        match v {
            0 => BlockState::Unused,
            1 => BlockState::Owned,
            2 => BlockState::Retired,
            _ => BlockState::Free,
        }
    }
}

/// The VMAs of one 1 GiB span and the lock of their writers, in a line of their own.
#[repr(align(64))]
pub struct Shard {
    lock: SpinLock<()>,
    /// The reverse-map lock of the shard's span ([`SHARD_RMAP_LOCK`]); taken through
    /// [`Shard::rmap_read`] and [`Shard::rmap_write`], which record its scope.
    rmap: RwSem<()>,
    tree: pagelab_sync::RcuCell<VmaTree>,
    /// Who has taken `lock`.
    users: Users,
    /// Who has taken `rmap`.
    rmap_users: Users,
    /// What the span is to the address allocator ([`BlockState`]); changed under `lock`, except
    /// when a block leaves the pool or the cursor (then nobody else acts on it).
    state: std::sync::atomic::AtomicU8,
    /// Munmaps of this span that published its new array and have not yet zapped its pages
    /// and freed its page tables; changed under `lock`. The block stays out of the pool while
    /// this is not zero (see the module documentation).
    unmapping: std::sync::atomic::AtomicU32,
}

/// A held shard reverse-map lock (either side); records its release when its acquisition was
/// recorded under [`SHARD_RMAP_LOCK_SHARED`].
pub struct ShardRmapGuard<'a> {
    shard: &'a Shard,
    access: Option<Access>,
    _g: RmapHold<'a>,
}

#[allow(dead_code)] // held for its drop only
enum RmapHold<'a> {
    Read(RwSemReadGuard<'a, ()>),
    Write(RwSemWriteGuard<'a, ()>),
}

impl Drop for ShardRmapGuard<'_> {
    fn drop(&mut self) {
        if let Some(access) = self.access {
            trace::release(
                &SHARD_RMAP_LOCK_SHARED,
                self.shard.rmap_id(),
                LockModel::RwSem,
                access,
            );
        }
    }
}

/// A held shard lock; records its release when its acquisition was recorded.
pub struct ShardGuard<'a> {
    shard: &'a Shard,
    traced: Option<LockModel>,
    _g: SpinGuard<'a, ()>,
}

impl Drop for ShardGuard<'_> {
    fn drop(&mut self) {
        if let Some(model) = self.traced {
            trace::release(
                &VMA_SHARD_LOCK_SHARED,
                self.shard.id(),
                model,
                Access::Exclusive,
            );
        }
    }
}

impl ShardGuard<'_> {
    /// The shard's VMAs (the writer's view: nobody else publishes while the lock is held).
    pub fn tree<'g>(&'g self, g: &'g RcuGuard<'_>) -> &'g VmaTree {
        self.shard.tree.load(g)
    }

    /// Publish the shard's new VMA array.
    pub fn publish(&self, tree: VmaTree) {
        self.shard.tree.publish(tree);
    }

    /// Mark the locked shard as holding part of a mapping larger than a block: nobody places
    /// mappings in it, and the munmap that empties it returns it to the pool.
    pub fn retire(&self) {
        self.shard.set_state(BlockState::Retired);
    }

    /// A munmap that published this shard's array will zap and free tables in its span after
    /// dropping the lock: keep the block out of the pool until [`ShardGuard::end_unmap`].
    pub fn begin_unmap(&self) {
        let n = self.shard.unmapping.load(Ordering::Relaxed);
        self.shard.unmapping.store(n + 1, Ordering::Relaxed);
    }

    /// How many munmaps are still freeing tables in the locked shard's span.
    pub fn shard_unmapping(&self) -> u32 {
        self.shard.unmapping()
    }

    /// That munmap is done with the span (taken again under the lock).
    pub fn end_unmap(&self) {
        let n = self.shard.unmapping.load(Ordering::Relaxed);
        debug_assert!(n > 0, "end_unmap without begin_unmap");
        self.shard.unmapping.store(n - 1, Ordering::Relaxed);
    }
}

impl Shard {
    fn new(rcu: &RcuArc<RcuDomain>, kind: LockKind) -> Shard {
        Shard {
            lock: SpinLock::new(kind, ()).with_class(&VMA_SHARD_LOCK),
            rmap: RwSem::new(()).with_class(&SHARD_RMAP_LOCK),
            tree: pagelab_sync::RcuCell::new(rcu, VmaTree::new()),
            users: Users::new(),
            rmap_users: Users::new(),
            state: std::sync::atomic::AtomicU8::new(BlockState::Unused as u8),
            unmapping: std::sync::atomic::AtomicU32::new(0),
        }
    }

    fn id(&self) -> usize {
        self as *const Shard as usize
    }

    fn rmap_id(&self) -> usize {
        &self.rmap as *const RwSem<()> as usize
    }

    /// Whether tasks on more than one CPU have taken the lock.
    pub fn is_shared(&self) -> bool {
        self.users.is_shared()
    }

    /// What the span is to the address allocator.
    pub fn state(&self) -> BlockState {
        BlockState::from_u8(self.state.load(Ordering::Relaxed))
    }

    /// How many munmaps of the span are between publishing its array and freeing its tables.
    pub fn unmapping(&self) -> u32 {
        self.unmapping.load(Ordering::Relaxed)
    }

    fn set_state(&self, st: BlockState) {
        self.state.store(st as u8, Ordering::Relaxed);
    }

    /// Whether tasks on more than one CPU have taken the reverse-map lock.
    pub fn rmap_is_shared(&self) -> bool {
        self.rmap_users.is_shared()
    }

    /// Take the reverse-map lock for read, for the task on `cpu` (reclaim's walk to a page in
    /// the shard's span).
    pub fn rmap_read(&self, cpu: CpuId) -> ShardRmapGuard<'_> {
        self.rmap_users.note(cpu);
        let g = RmapHold::Read(self.rmap.read());
        self.rmap_traced(g, Access::Shared)
    }

    /// Take the reverse-map lock for write, for the task on `cpu` (a munmap freeing page
    /// tables inside the shard's span).
    pub fn rmap_write(&self, cpu: CpuId) -> ShardRmapGuard<'_> {
        self.rmap_users.note(cpu);
        let g = RmapHold::Write(self.rmap.write());
        self.rmap_traced(g, Access::Exclusive)
    }

    fn rmap_traced<'a>(&'a self, g: RmapHold<'a>, access: Access) -> ShardRmapGuard<'a> {
        let access = (trace::active() && self.rmap_is_shared()).then(|| {
            trace::acquire(
                &SHARD_RMAP_LOCK_SHARED,
                self.rmap_id(),
                LockModel::RwSem,
                access,
                false,
            );
            access
        });
        ShardRmapGuard {
            shard: self,
            access,
            _g: g,
        }
    }

    /// Take the lock for the task on `cpu`.
    pub fn lock(&self, cpu: CpuId) -> ShardGuard<'_> {
        self.users.note(cpu);
        let g = self.lock.lock();
        let traced = (trace::active() && self.is_shared()).then(|| {
            let model = match self.lock.kind() {
                LockKind::Ticket => LockModel::Ticket,
                LockKind::Queued => LockModel::Queued,
            };
            trace::acquire(
                &VMA_SHARD_LOCK_SHARED,
                self.id(),
                model,
                Access::Exclusive,
                false,
            );
            model
        });
        ShardGuard {
            shard: self,
            traced,
            _g: g,
        }
    }

    /// The shard's VMAs as published, for a reader.
    pub fn tree<'g>(&'g self, g: &'g RcuGuard<'_>) -> &'g VmaTree {
        self.tree.load(g)
    }
}

/// Per-CPU block state, in a line of its own.
#[repr(align(64))]
struct CpuBlock {
    /// Base of the CPU's current block; 0: none yet.
    base: AtomicU64,
}

/// The shards of one address space and its per-CPU address blocks.
pub struct Shards {
    rcu: RcuArc<RcuDomain>,
    kind: LockKind,
    dirs: Box<[OnceLock<Box<[Shard]>>]>,
    blocks: Box<[CpuBlock]>,
    /// The next fresh block's base.
    cursor: AtomicU64,
    /// Free blocks (shard indices): retired blocks that munmaps emptied.
    pool: SpinLock<BTreeSet<usize>>,
    /// How many blocks `pool` holds, written under its lock: a taker that reads too few for
    /// its request goes to the cursor without taking the lock (a block returned meanwhile
    /// waits for the next taker), so that an address space that frees no block takes its
    /// blocks as before, with one atomic add on the cursor and no lock.
    pool_len: AtomicUsize,
    bottom: u64,
    top: u64,
}

/// The shard index of `addr`.
pub const fn shard_of(addr: u64) -> usize {
    (addr >> SHARD_SHIFT) as usize
}

impl Shards {
    /// Shards for addresses `bottom..top` (rounded inwards to blocks), for `nr_cpus` CPUs.
    pub fn new(
        rcu: &RcuArc<RcuDomain>,
        kind: LockKind,
        nr_cpus: usize,
        bottom: u64,
        top: u64,
    ) -> Self {
        let bottom = bottom.div_ceil(SHARD_SIZE) * SHARD_SIZE;
        let top = (top / SHARD_SIZE * SHARD_SIZE).min(TASK_SIZE);
        Shards {
            rcu: rcu.clone(),
            kind,
            dirs: (0..NR_DIRS).map(|_| OnceLock::new()).collect(),
            blocks: (0..nr_cpus.max(1))
                .map(|_| CpuBlock {
                    base: AtomicU64::new(0),
                })
                .collect(),
            cursor: AtomicU64::new(bottom),
            pool: SpinLock::new(kind, BTreeSet::new()).with_class(&VA_BLOCK_POOL),
            pool_len: AtomicUsize::new(0),
            bottom,
            top,
        }
    }

    /// The shard with index `i`, created (with its 511 neighbours) on first use.
    pub fn shard(&self, i: usize) -> &Shard {
        let dir = self.dirs[i / DIR_SHARDS].get_or_init(|| {
            (0..DIR_SHARDS)
                .map(|_| Shard::new(&self.rcu, self.kind))
                .collect()
        });
        &dir[i % DIR_SHARDS]
    }

    /// The shard with index `i` if it exists.
    pub fn existing(&self, i: usize) -> Option<&Shard> {
        self.dirs
            .get(i / DIR_SHARDS)?
            .get()
            .map(|d| &d[i % DIR_SHARDS])
    }

    /// The VMA containing `addr`, as its shard publishes it.
    pub fn find<'g>(&'g self, g: &'g RcuGuard<'_>, addr: u64) -> Option<&'g Arc<Vma>> {
        if addr >= TASK_SIZE {
            return None;
        }
        self.existing(shard_of(addr))?.tree(g).find(addr)
    }

    /// Indices of the existing shards intersecting `[start, end)`, in order.
    pub fn existing_in(&self, start: u64, end: u64) -> impl Iterator<Item = usize> + '_ {
        let (first, last) = (shard_of(start), shard_of(end.min(TASK_SIZE) - 1));
        (first / DIR_SHARDS..=last / DIR_SHARDS)
            .filter(|&d| self.dirs[d].get().is_some())
            .flat_map(move |d| {
                let lo = (d * DIR_SHARDS).max(first);
                let hi = (d * DIR_SHARDS + DIR_SHARDS - 1).min(last);
                lo..=hi
            })
    }

    /// Every VMA, sorted, once each (`Mm::check`, tests).
    pub fn all(&self, g: &RcuGuard<'_>) -> Vec<Arc<Vma>> {
        let mut out: Vec<Arc<Vma>> = Vec::new();
        for i in self.existing_in(0, TASK_SIZE) {
            for v in self.shard(i).tree(g).iter() {
                if !out.last().is_some_and(|l| Arc::ptr_eq(l, v)) {
                    out.push(v.clone());
                }
            }
        }
        out
    }

    /// The task on `cpu`'s current block, taking another when it has none or `full` (the
    /// current one is then retired, see the module documentation). `None` when the address
    /// space has no free block left.
    pub fn block(&self, rcu: &RcuGuard<'_>, cpu: CpuId, full: bool) -> Option<u64> {
        let slot = &self.blocks[cpu.idx() % self.blocks.len()].base;
        let cur = slot.load(Ordering::Relaxed);
        if cur != 0 && !full {
            return Some(cur);
        }
        let base = loop {
            let base = self.take(1)?;
            let shard = self.shard(shard_of(base));
            let _g = shard.lock(cpu);
            if shard.unmapping() == 0 {
                shard.set_state(BlockState::Owned);
                break base;
            }
            // A munmap of a MAP_FIXED mapping placed in the free block is still freeing its
            // tables: that munmap returns it to the pool when done.
            shard.set_state(BlockState::Retired);
        };
        slot.store(base, Ordering::Relaxed);
        if cur != 0 {
            self.retire(rcu, cpu, shard_of(cur));
        }
        Some(base)
    }

    /// The block `i` a CPU moved on from: back to the pool if nothing is mapped in it, else
    /// retired until a munmap empties it ([`Shards::release_if_empty`]).
    fn retire(&self, rcu: &RcuGuard<'_>, cpu: CpuId, i: usize) {
        let shard = self.shard(i);
        let g = shard.lock(cpu);
        shard.set_state(BlockState::Retired);
        // A munmap still freeing tables here returns the block itself when it is done.
        if g.tree(rcu).is_empty() && shard.unmapping() == 0 {
            self.give_back(&g, i);
        }
    }

    /// After a munmap or MAP_FIXED published the locked shard `i`'s new array (a munmap: after
    /// it also freed the span's tables, [`ShardGuard::end_unmap`]): a retired block that is
    /// now empty, with no munmap still freeing tables in it, goes back to the pool. Returns
    /// whether it did.
    pub fn release_if_empty(&self, g: &ShardGuard<'_>, i: usize, tree: &VmaTree) -> bool {
        if g.shard.state() != BlockState::Retired || !tree.is_empty() || g.shard.unmapping() > 0 {
            return false;
        }
        self.give_back(g, i);
        true
    }

    /// Return the locked, empty shard `i` to the pool.
    fn give_back(&self, g: &ShardGuard<'_>, i: usize) {
        g.shard.set_state(BlockState::Free);
        // The CPUs that used the block before are done with it: one CPU that takes it next
        // and maps and unmaps there alone does not share its locks with them.
        g.shard.users.reset();
        g.shard.rmap_users.reset();
        let mut pool = self.pool.lock();
        pool.insert(i);
        self.pool_len.store(pool.len(), Ordering::Relaxed);
    }

    /// `n` contiguous free blocks, their base: the lowest run of `n` in the pool, else from
    /// the cursor. They leave the pool here; the caller marks what they become.
    pub fn take(&self, n: u64) -> Option<u64> {
        if (self.pool_len.load(Ordering::Relaxed) as u64) >= n {
            let mut pool = self.pool.lock();
            let mut run: Option<(usize, u64)> = None;
            for &i in pool.iter() {
                run = match run {
                    Some((first, len)) if first + len as usize == i => Some((first, len + 1)),
                    _ => Some((i, 1)),
                };
                if run.is_some_and(|(_, len)| len == n) {
                    break;
                }
            }
            if let Some((first, len)) = run.filter(|&(_, len)| len == n) {
                for i in first..first + len as usize {
                    pool.remove(&i);
                }
                self.pool_len.store(pool.len(), Ordering::Relaxed);
                return Some(first as u64 * SHARD_SIZE);
            }
        }
        self.fresh(n)
    }

    /// Blocks in the pool (tests, checks).
    pub fn pooled(&self) -> usize {
        self.pool.lock().len()
    }

    /// The allocator's books (`Mm::check`, at rest): no munmap counts itself in a shard, the
    /// pool holds exactly the shards marked free, no retired block is empty (the munmap that emptied it should have returned it),
    /// and every CPU's current block is marked its own.
    pub fn check(&self, g: &RcuGuard<'_>) -> Result<(), String> {
        let pool = self.pool.lock().clone();
        if pool.len() != self.pool_len.load(Ordering::Relaxed) {
            return Err(format!(
                "the block pool holds {} blocks but counts {}",
                pool.len(),
                self.pool_len.load(Ordering::Relaxed)
            ));
        }
        for i in self.existing_in(0, TASK_SIZE) {
            let shard = self.shard(i);
            if shard.unmapping() != 0 {
                return Err(format!(
                    "address block {i} counts {} munmaps still freeing its tables at rest",
                    shard.unmapping()
                ));
            }
            if shard.state() == BlockState::Retired && shard.tree(g).is_empty() {
                return Err(format!(
                    "address block {i} is retired and empty, but not pooled"
                ));
            }
            let free = shard.state() == BlockState::Free;
            if free != pool.contains(&i) {
                return Err(format!(
                    "address block {i} is {:?} but {} the pool",
                    self.shard(i).state(),
                    if free { "not in" } else { "in" }
                ));
            }
        }
        for b in self.blocks.iter() {
            let cur = b.base.load(Ordering::Relaxed);
            if cur != 0 && self.shard(shard_of(cur)).state() != BlockState::Owned {
                return Err(format!(
                    "a CPU's current block {cur:#x} is {:?}",
                    self.shard(shard_of(cur)).state()
                ));
            }
        }
        Ok(())
    }

    /// `n` contiguous fresh blocks from the mm-wide cursor; their base.
    pub fn fresh(&self, n: u64) -> Option<u64> {
        let bytes = n.checked_mul(SHARD_SIZE)?;
        trace::atomic(&VA_BLOCK_CURSOR, &self.cursor as *const AtomicU64 as usize);
        // A request that does not fit leaves the cursor where it was, so that one oversized
        // mmap does not use up the space smaller ones could still take.
        self.cursor
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |base| {
                base.checked_add(bytes).filter(|&end| end <= self.top)
            })
            .ok()
    }

    /// Lowest block address.
    pub fn bottom(&self) -> u64 {
        self.bottom
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fresh blocks come from the cursor in order; a request past the top fails and leaves
    /// the cursor where it was, so smaller requests still get what is left.
    #[test]
    fn an_oversized_request_leaves_the_cursor_for_smaller_ones() {
        let rcu = RcuDomain::new(4);
        let s = Shards::new(&rcu, LockKind::Queued, 2, SHARD_SIZE, 5 * SHARD_SIZE);
        assert_eq!(s.fresh(1), Some(SHARD_SIZE));
        assert_eq!(s.fresh(4), None);
        assert_eq!(s.fresh(3), Some(2 * SHARD_SIZE));
        assert_eq!(s.fresh(1), None);
        assert_eq!(s.fresh(u64::MAX), None);
    }

    /// Blocks a munmap emptied after their CPU moved on come back from the pool: one block
    /// at a time lowest first, and runs of contiguous ones for mappings larger than a block;
    /// a run the pool does not hold falls back to the cursor.
    #[test]
    fn emptied_retired_blocks_are_taken_again_from_the_pool() {
        let rcu = RcuDomain::new(4);
        let r = RcuDomain::register(&rcu).unwrap();
        let g = r.lock();
        let s = Shards::new(&rcu, LockKind::Queued, 2, SHARD_SIZE, 6 * SHARD_SIZE);
        let cpu = CpuId(0);
        // The address space: blocks 1 to 5, all taken.
        let taken: Vec<u64> = (0..5).map(|_| s.take(1).unwrap()).collect();
        assert_eq!(s.take(1), None);
        // A block still owned, or not empty, stays out of the pool.
        let owned = shard_of(taken[0]);
        s.shard(owned).set_state(BlockState::Owned);
        let guard = s.shard(owned).lock(cpu);
        assert!(!s.release_if_empty(&guard, owned, guard.tree(&g)));
        drop(guard);
        // Blocks 3, 4 and 2 retire empty: back to the pool.
        for b in [taken[2], taken[3], taken[1]] {
            let i = shard_of(b);
            let guard = s.shard(i).lock(cpu);
            guard.retire();
            assert!(s.release_if_empty(&guard, i, guard.tree(&g)));
            assert_eq!(s.shard(i).state(), BlockState::Free);
        }
        assert_eq!(s.pooled(), 3);
        assert_eq!(s.take(4), None, "no run of four, and the cursor is spent");
        assert_eq!(s.take(2), Some(2 * SHARD_SIZE));
        assert_eq!(s.take(1), Some(4 * SHARD_SIZE));
        assert_eq!(s.take(1), None);
        assert_eq!(s.pooled(), 0);
    }

    /// A block that went back to the pool forgets the CPUs that used it: the next CPU to
    /// take it, alone there, does not find its shard's locks shared.
    #[test]
    fn a_pooled_block_forgets_its_users() {
        let rcu = RcuDomain::new(4);
        let r = RcuDomain::register(&rcu).unwrap();
        let g = r.lock();
        let s = Shards::new(&rcu, LockKind::Queued, 2, SHARD_SIZE, 2 * SHARD_SIZE);
        let i = shard_of(s.take(1).unwrap());
        let shard = s.shard(i);
        for cpu in [CpuId(0), CpuId(1)] {
            drop(shard.lock(cpu));
            drop(shard.rmap_write(cpu));
        }
        assert!(shard.is_shared() && shard.rmap_is_shared());
        let guard = shard.lock(CpuId(1));
        guard.retire();
        assert!(s.release_if_empty(&guard, i, guard.tree(&g)));
        drop(guard);
        assert_eq!(s.take(1), Some(i as u64 * SHARD_SIZE));
        drop(shard.lock(CpuId(0)));
        drop(shard.rmap_write(CpuId(0)));
        assert!(!shard.is_shared() && !shard.rmap_is_shared());
    }
}
