//! The page allocator (mm/page_alloc.c): zones of buddy lists, per-CPU page lists in front of
//! them, an optional prezeroed pool, and a small SLUB on top (`slab`).
//!
//! [`Mem`] is the engine's physical memory: the arena, the frame metadata, the zones and the
//! pcps. [`PageAllocator`] owns a `Mem` together with the background threads its policy asks
//! for (the zeroer, the vmstat worker that decays adaptive pcp high marks) and derefs to it.
//!
//! The allocation path mirrors `__alloc_pages`: a fast pass over the CPU's zonelist at the low
//! watermark (`get_page_from_freelist`), where each zone is served by the CPU's pcp when the
//! order is cached there and by the buddy lists otherwise; then a slow pass that drains every
//! pcp and the prezero pool and retries at the min watermark, after waking kswapd
//! ([`crate::reclaim::kswapd`]) for every zone under its low watermark. Direct reclaim is the
//! fault path's next step when that fails ([`crate::reclaim::vmscan`]).
//!
//! With `alloc.allocator = "llfree"` ([`llfree`]) each zone's frames are managed by an
//! LLFree-style lock-free allocator instead of the buddy lists and the pcps: the zonelist walk,
//! the watermark checks (on the zone's `NR_FREE_PAGES`, which LLFree keeps per CPU and folds),
//! the slow path, `prep_new_page` and the memcg uncharge on free are the same, only `rmqueue`
//! and the final step of the free go to the zone's LLFree, and a drain gives back CPU
//! reservations instead of pcp pages.

pub mod buddy;
pub mod llfree;
pub mod pcp;
pub mod prezero;
pub mod slab;

use std::sync::Arc;
use std::time::Duration;

use crossbeam_utils::CachePadded;
use pagelab_sync::{LockKind, LockStatsSnapshot, SpinLock};

use crate::arena::{Arena, ArenaConfig, ArenaError};
use crate::cpu::CpuId;
use crate::kthread::Kthread;
use crate::page::{PageArray, Pfn, pg};
use crate::policy::{Allocator, Policy};
use crate::reclaim::memcg::MemCgroups;
use crate::vmstat::{VmEvent, VmEvents};
use buddy::{MAX_ORDER, MigrateType, Wmark, ZONE_BELOW_HIGH, Zone};
use llfree::LlFree;
use pcp::{PcpParams, PcpState};
use prezero::PrezeroPool;

/// `pcp->lock`: one per (zone, CPU), taken by its own CPU (and by remote drains).
pub static PCP_LOCK: pagelab_sync::LockClass =
    pagelab_sync::LockClass::with_recorded_trylock("pcp->lock", pagelab_sync::Scope::Cpu);

/// What an allocation asks for (the parts of `gfp_t` the engine models).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gfp {
    pub migratetype: MigrateType,
    /// `__GFP_ZERO`.
    pub zero: bool,
    /// `__GFP_COMP`: mark head and tail frames of a high-order block.
    pub comp: bool,
    /// Watermark of the fast pass.
    pub wmark: Wmark,
}

impl Gfp {
    /// `GFP_KERNEL`.
    pub const KERNEL: Gfp = Gfp {
        migratetype: MigrateType::Unmovable,
        zero: false,
        comp: false,
        wmark: Wmark::Low,
    };
    /// `GFP_HIGHUSER_MOVABLE | __GFP_ZERO`: an anonymous page for a fault.
    pub const USER_ZERO: Gfp = Gfp {
        migratetype: MigrateType::Movable,
        zero: true,
        comp: false,
        wmark: Wmark::Low,
    };
    /// `GFP_HIGHUSER_MOVABLE` without zeroing (page cache, copy-on-write targets).
    pub const USER: Gfp = Gfp {
        migratetype: MigrateType::Movable,
        zero: false,
        comp: false,
        wmark: Wmark::Low,
    };

    pub const fn with_zero(mut self) -> Gfp {
        self.zero = true;
        self
    }

    pub const fn with_comp(mut self) -> Gfp {
        self.comp = true;
        self
    }

    pub const fn with_migratetype(mut self, mt: MigrateType) -> Gfp {
        self.migratetype = mt;
        self
    }
}

/// Why an allocation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    #[error("out of memory: no free block of order {order} above the min watermark")]
    OutOfMemory { order: u32 },
    #[error("order {0} is above the largest block order {MAX_ORDER}")]
    InvalidOrder(u32),
}

/// The machine the engine's memory stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemConfig {
    pub arena: ArenaConfig,
    /// Virtual CPUs (tasks bind to ids `0..nr_cpus`).
    pub nr_cpus: usize,
    /// NUMA nodes; the arena is split evenly, one zone each.
    pub nr_nodes: usize,
    /// Memory cgroups: the root (id 0) and `nr_memcgs - 1` children
    /// ([`crate::reclaim::memcg`]). The LRU keeps one lruvec per (memcg, node).
    pub nr_memcgs: usize,
    /// The machine the kernel's memory-derived tunables are sized for, when it is not this
    /// arena; see [`TunablesFor`].
    pub tunables_for: Option<TunablesFor>,
}

/// A machine whose nodes the kernel's memory-derived tunables are computed for, where the
/// engine's arena is smaller than the machine it stands for (a projector's capture boots an
/// engine of the target machine's CPU count over an arena of a few hundred MiB): the per-CPU
/// lists' `"auto"` batch and high (`zone_batchsize`, `zone_highsize`, which grow with the zone
/// and its low watermark) and the vmstat fold threshold (`calculate_normal_threshold`). In the
/// kernel these follow the zone's size; sizing them from a small arena would give a 4 KiB
/// machine's node of 256 GiB a pcp batch of 7 instead of 63. The arena's own zones, free
/// pages and watermarks stay what they are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TunablesFor {
    /// Pages of one node (its one zone).
    pub node_pages: u64,
    /// The machine's nodes (`min_free_kbytes` is computed over all of them).
    pub nodes: usize,
    /// CPUs of one node (`zone_highsize` divides the low watermark among them).
    pub node_cpus: usize,
}

impl TunablesFor {
    /// (managed pages, low watermark, CPUs) of one node, as the pcp sizing reads them.
    fn pcp_inputs(&self) -> (u64, u64, usize) {
        let nodes = self.nodes.max(1) as u64;
        let share = buddy::min_free_pages(self.node_pages.saturating_mul(nodes)) / nodes;
        let low = buddy::zone_wmarks(self.node_pages, share)[Wmark::Low as usize];
        (self.node_pages, low, self.node_cpus.max(1))
    }
}

impl MemConfig {
    pub fn new(bytes: u64, nr_cpus: usize) -> Self {
        MemConfig {
            arena: ArenaConfig::new(bytes),
            nr_cpus,
            nr_nodes: 1,
            nr_memcgs: 1,
            tunables_for: None,
        }
    }

    /// The same arena with the kernel's memory-derived tunables sized for `t`'s nodes.
    pub fn with_tunables_for(mut self, t: TunablesFor) -> Self {
        self.tunables_for = Some(t);
        self
    }

    /// (managed pages, low watermark, CPUs) the pcp sizing of a zone of `managed` pages with
    /// low watermark `low` reads: the zone's own, or the machine's node's.
    fn pcp_inputs(&self, managed: u64, low: u64) -> (u64, u64, usize) {
        self.tunables_for
            .map_or((managed, low, self.nr_cpus), |t| t.pcp_inputs())
    }

    /// The same machine with `n` memory cgroups, the root included.
    pub fn with_memcgs(mut self, n: usize) -> Self {
        self.nr_memcgs = n;
        self
    }
}

/// Why the engine's memory could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum MemError {
    #[error(transparent)]
    Arena(#[from] ArenaError),
    #[error("{0}")]
    Config(String),
    #[error("could not start the {name} thread: {err}")]
    Thread {
        name: &'static str,
        err: std::io::Error,
    },
}

/// Frames by state, from [`Mem::check`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Census {
    /// Frames on buddy free lists.
    pub buddy: u64,
    /// Frames on per-CPU lists.
    pub pcp: u64,
    /// Frames in the prezeroed pool.
    pub prezeroed: u64,
    /// Frames free in the LLFree allocator (`alloc.allocator = "llfree"`).
    pub llfree: u64,
    /// Frames handed out (the rest).
    pub allocated: u64,
}

impl Census {
    pub fn free(&self) -> u64 {
        self.buddy + self.pcp + self.prezeroed + self.llfree
    }
}

/// Lock statistics of the allocator's lock classes, summed over instances.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocLockStats {
    pub zone_lock: LockStatsSnapshot,
    pub pcp_lock: LockStatsSnapshot,
}

/// The engine's physical memory. See the module documentation.
pub struct Mem {
    arena: Arena,
    pages: PageArray,
    zones: Box<[Zone]>,
    /// Frames per zone except the last, to find a frame's zone by division.
    zone_span: u32,
    /// The machine the memory-derived tunables are sized for, if not this arena.
    tunables_for: Option<TunablesFor>,
    /// `[zone][cpu]`, each in its own cache line.
    pcp: Box<[CachePadded<SpinLock<PcpState>>]>,
    pcp_params: Box<[PcpParams]>,
    nr_cpus: usize,
    /// Zone ids in preference order per CPU (its node's zone first: the zonelist).
    zonelists: Box<[Box<[usize]>]>,
    events: VmEvents,
    prezero: Option<PrezeroPool>,
    /// One LLFree allocator per zone when the policy replaces the buddy lists and pcps with it.
    llfree: Option<Box<[LlFree]>>,
    /// The memory cgroups' page counters: a page's charge is dropped where it is freed.
    memcgs: MemCgroups,
    /// Wakes a node's kswapd (`wakeup_kswapd`); unset when no kernel runs kswapd.
    #[allow(clippy::type_complexity)]
    kswapd_waker: std::sync::OnceLock<Box<dyn Fn(usize) + Send + Sync>>,
    policy: Policy,
    /// Where the lock statistics of this machine's threads are folded: one domain per engine
    /// instance, so that engines side by side in one process count apart.
    lock_stat_domain: Arc<pagelab_sync::LockStatDomain>,
}

/// A `Mem` with its background threads. Derefs to [`Mem`].
pub struct PageAllocator {
    mem: Arc<Mem>,
    // Dropped after `mem`'s handle: stopping them releases their references.
    kthreads: Vec<Kthread>,
}

impl std::ops::Deref for PageAllocator {
    type Target = Mem;
    fn deref(&self) -> &Mem {
        &self.mem
    }
}

impl PageAllocator {
    /// Build memory as `policy` says and start the threads it needs.
    pub fn new(cfg: &MemConfig, policy: &Policy) -> Result<PageAllocator, MemError> {
        let mem = Arc::new(Mem::new(cfg, policy)?);
        let mut kthreads = Vec::new();
        if mem.prezero.is_some() {
            let m = mem.clone();
            let k = Kthread::spawn("pagelab-kscrubd", Duration::from_millis(5), move || {
                m.enter_lock_stats();
                m.prezero_fill();
            })
            .map_err(|err| MemError::Thread {
                name: "prezero",
                err,
            })?;
            kthreads.push(k);
        }
        if mem.llfree.is_none() && mem.pcp_params.iter().any(|p| p.adaptive) {
            let m = mem.clone();
            let k = Kthread::spawn("pagelab-vmstat", Duration::from_secs(1), move || {
                m.enter_lock_stats();
                m.decay_pcp_high();
            })
            .map_err(|err| MemError::Thread {
                name: "vmstat",
                err,
            })?;
            kthreads.push(k);
        }
        Ok(PageAllocator { mem, kthreads })
    }

    /// Stop the background threads (joining them), e.g. before a quiescent [`Mem::check`].
    pub fn stop_kthreads(&mut self) {
        self.kthreads.clear();
    }

    /// A shared handle to the memory, for structures built on top of it.
    pub fn mem(&self) -> &Arc<Mem> {
        &self.mem
    }
}

/// The zones of an arena of `nr_pages` frames: one per node, each a whole number of
/// `MAX_ORDER` blocks (the last takes the rest), as `(start, end, share of min_free_kbytes)`.
fn zone_layout(cfg: &MemConfig, nr_pages: u32) -> Result<Vec<(u32, u32, u64)>, MemError> {
    let block = 1u32 << MAX_ORDER;
    let zone_span = (nr_pages / cfg.nr_nodes as u32) / block * block;
    if zone_span == 0 {
        return Err(MemError::Config(format!(
            "arena of {} frames is too small for {} nodes of at least {block} frames",
            nr_pages, cfg.nr_nodes
        )));
    }
    let min_total = buddy::min_free_pages(u64::from(nr_pages));
    Ok((0..cfg.nr_nodes)
        .map(|n| {
            let start = n as u32 * zone_span;
            let end = if n + 1 == cfg.nr_nodes {
                nr_pages
            } else {
                start + zone_span
            };
            let share = min_total * u64::from(end - start) / u64::from(nr_pages);
            (start, end, share)
        })
        .collect())
}

impl Mem {
    /// Everything [`Mem::new`] would refuse about `cfg` and `policy`, found without mapping any
    /// memory: the profile's own checks, the CPU and node counts, the arena's size against this
    /// host, and the bounds that depend on the zones (a pcp's `high` and `batch` within its
    /// zone, the prezero pool within the arena). A runner calls it before it stores anything,
    /// so that a refused profile leaves no run behind.
    pub fn check_config(cfg: &MemConfig, policy: &Policy) -> Result<(), MemError> {
        policy.validate().map_err(|e| MemError::Config(e.0))?;
        if cfg.nr_cpus == 0 || cfg.nr_cpus > 4096 {
            return Err(MemError::Config(format!(
                "{} CPUs: the engine models 1 to 4096 virtual CPUs",
                cfg.nr_cpus
            )));
        }
        if cfg.nr_nodes == 0 || cfg.nr_nodes > cfg.nr_cpus.min(64) {
            return Err(MemError::Config(format!(
                "{} nodes: need between 1 and min(CPUs, 64)",
                cfg.nr_nodes
            )));
        }
        let frames = Arena::check_size(cfg.arena.bytes, PageArray::bytes_per_frame() as u64)?;
        let nr_pages = frames as u32;
        for (start, end, share) in zone_layout(cfg, nr_pages)? {
            let managed = u64::from(end - start);
            let wmark = buddy::zone_wmarks(managed, share);
            let (m, low, cpus) = cfg.pcp_inputs(managed, wmark[Wmark::Low as usize]);
            let p = PcpParams::resolve(&policy.pcp, m, low, cpus);
            policy
                .check_zone(managed, p.batch, p.high_min)
                .map_err(|e| MemError::Config(e.0))?;
        }
        policy
            .check_memory(u64::from(nr_pages))
            .map_err(|e| MemError::Config(e.0))
    }

    /// Map the arena, lay out zones, free every frame into them and set up the pcps. No
    /// background threads: see [`PageAllocator::new`].
    pub fn new(cfg: &MemConfig, policy: &Policy) -> Result<Mem, MemError> {
        Self::check_config(cfg, policy)?;
        let arena = Arena::new(cfg.arena, PageArray::bytes_per_frame() as u64)?;
        let nr_pages = arena.nr_pages() as u32;
        let pages = PageArray::new(nr_pages as usize);
        let kind = policy.locks.spinlock;
        let zones: Box<[Zone]> = zone_layout(cfg, nr_pages)?
            .into_iter()
            .enumerate()
            .map(|(n, (start, end, share))| Zone::new(n, n, Pfn(start), Pfn(end), share, kind))
            .collect();
        let llfree = match policy.alloc.allocator {
            Allocator::Buddy => {
                for z in zones.iter() {
                    z.free_all_bootmem(&pages);
                }
                None
            }
            Allocator::Llfree => Some(
                zones
                    .iter()
                    .map(|z| {
                        z.mod_free_pages(z.managed as i64);
                        let sizing = cfg.tunables_for.map(|t| t.node_pages);
                        LlFree::new(z.start_pfn, z.end_pfn, cfg.nr_cpus, sizing)
                    })
                    .collect(),
            ),
        };
        let pcp_params: Box<[PcpParams]> = zones
            .iter()
            .map(|z| {
                let (m, low, cpus) = cfg.pcp_inputs(z.managed, z.wmark[Wmark::Low as usize]);
                PcpParams::resolve(&policy.pcp, m, low, cpus)
            })
            .collect();
        let pcp = (0..zones.len() * cfg.nr_cpus)
            .map(|i| {
                CachePadded::new(
                    SpinLock::new(kind, PcpState::new(&pcp_params[i / cfg.nr_cpus]))
                        .with_class(&PCP_LOCK),
                )
            })
            .collect();
        let zonelists = (0..cfg.nr_cpus)
            .map(|c| {
                let home = c * cfg.nr_nodes / cfg.nr_cpus;
                (0..cfg.nr_nodes)
                    .map(|k| (home + k) % cfg.nr_nodes)
                    .collect()
            })
            .collect();
        let prezero = policy
            .alloc
            .prezero
            .then(|| PrezeroPool::new(kind, policy.alloc.prezero_pool as usize));
        Ok(Mem {
            arena,
            pages,
            // Every zone but the last spans the first one's frames.
            zone_span: zones[0].end_pfn.0 - zones[0].start_pfn.0,
            tunables_for: cfg.tunables_for,
            zones,
            pcp,
            pcp_params,
            nr_cpus: cfg.nr_cpus,
            zonelists,
            // One extra slot for background threads.
            events: VmEvents::new(cfg.nr_cpus + 1),
            prezero,
            llfree,
            memcgs: MemCgroups::with_policy(cfg.nr_memcgs, cfg.nr_cpus, &policy.memcg),
            kswapd_waker: std::sync::OnceLock::new(),
            policy: policy.clone(),
            lock_stat_domain: pagelab_sync::LockStatDomain::new(),
        })
    }

    pub fn arena(&self) -> &Arena {
        &self.arena
    }

    /// Pages of one node as the kernel's memory-derived tunables see it: the machine's
    /// ([`TunablesFor`]) if the engine stands for one, else this arena's largest zone.
    pub fn tunables_node_pages(&self) -> u64 {
        self.tunables_for.map_or_else(
            || self.zones.iter().map(|z| z.managed).max().unwrap_or(0),
            |t| t.node_pages,
        )
    }

    /// The memory cgroups' page counters.
    pub fn memcgs(&self) -> &MemCgroups {
        &self.memcgs
    }

    pub fn pages(&self) -> &PageArray {
        &self.pages
    }

    pub fn zones(&self) -> &[Zone] {
        &self.zones
    }

    pub fn nr_cpus(&self) -> usize {
        self.nr_cpus
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    pub fn events(&self) -> &VmEvents {
        &self.events
    }

    /// The resolved pcp settings of a zone.
    pub fn pcp_params(&self, zone: usize) -> &PcpParams {
        &self.pcp_params[zone]
    }

    /// The CPU slot background threads count their events in.
    fn kthread_cpu(&self) -> CpuId {
        CpuId(self.nr_cpus as u16)
    }

    /// `page_zone`.
    #[inline]
    pub fn zone_of(&self, pfn: Pfn) -> usize {
        ((pfn.0 / self.zone_span) as usize).min(self.zones.len() - 1)
    }

    #[inline]
    fn pcp(&self, zone: usize, cpu: CpuId) -> &SpinLock<PcpState> {
        &self.pcp[zone * self.nr_cpus + cpu.idx()]
    }

    /// Frames managed by all zones.
    pub fn managed_pages(&self) -> u64 {
        self.zones.iter().map(|z| z.managed).sum()
    }

    /// Allocate a block of 2^`order` frames on `cpu` (`alloc_pages`). The block comes back with
    /// a reference count of one.
    pub fn alloc_pages(&self, cpu: CpuId, order: u32, gfp: Gfp) -> Result<Pfn, AllocError> {
        if order > MAX_ORDER {
            return Err(AllocError::InvalidOrder(order));
        }
        if gfp.zero
            && order == 0
            && let Some(pool) = &self.prezero
            && let Some(pfn) = pool.take(&self.pages)
        {
            self.events.count(cpu, VmEvent::PrezeroHit, 1);
            self.prep_new_page(cpu, pfn, 0, gfp, false);
            return Ok(pfn);
        }
        let pfn = match self.get_page_from_freelist(cpu, order, gfp, gfp.wmark) {
            Some(pfn) => pfn,
            None => self.alloc_slowpath(cpu, order, gfp)?,
        };
        self.prep_new_page(cpu, pfn, order, gfp, gfp.zero);
        Ok(pfn)
    }

    /// `alloc_page`.
    #[inline]
    pub fn alloc_page(&self, cpu: CpuId, gfp: Gfp) -> Result<Pfn, AllocError> {
        self.alloc_pages(cpu, 0, gfp)
    }

    /// `__alloc_pages_slowpath`, up to direct reclaim (which the fault path does when this
    /// fails): wake kswapd for every zone under its low watermark, give back what the pcps
    /// and the pool hold, then try again down to the min watermark.
    #[cold]
    fn alloc_slowpath(&self, cpu: CpuId, order: u32, gfp: Gfp) -> Result<Pfn, AllocError> {
        self.wake_all_kswapds(cpu, order);
        self.drain_all_pages();
        if let Some(pool) = &self.prezero {
            pool.drain(|p| self.zone_of(p), &self.zones, &self.pages);
        }
        self.get_page_from_freelist(cpu, order, gfp, Wmark::Min)
            .ok_or_else(|| {
                self.events.count(cpu, VmEvent::AllocFail, 1);
                AllocError::OutOfMemory { order }
            })
    }

    /// `wake_all_kswapds`: every zone of the zonelist that is under its low watermark wakes
    /// its node's kswapd, if the kernel started one ([`Mem::set_kswapd_waker`]).
    fn wake_all_kswapds(&self, cpu: CpuId, order: u32) {
        let Some(wake) = self.kswapd_waker.get() else {
            return;
        };
        for &z in self.zonelists[cpu.idx()].iter() {
            if !self.zones[z].watermark_ok(order, Wmark::Low) {
                self.events.count(cpu, VmEvent::KswapdWake, 1);
                wake(z);
            }
        }
    }

    /// Install the function that wakes node `n`'s kswapd (zone `n` is node `n`'s only zone).
    /// Set once, by the kernel that owns the kswapd threads.
    pub fn set_kswapd_waker(&self, wake: Box<dyn Fn(usize) + Send + Sync>) {
        let _ = self.kswapd_waker.set(wake);
    }

    /// Whether node `node`'s zone is at or above `mark` (kswapd's `pgdat_balanced`).
    pub fn node_watermark_ok(&self, node: usize, mark: Wmark) -> bool {
        self.zones[node].watermark_ok(0, mark)
    }

    /// `get_page_from_freelist`: the first zone of the CPU's zonelist above `mark` that has a
    /// block.
    #[inline]
    fn get_page_from_freelist(&self, cpu: CpuId, order: u32, gfp: Gfp, mark: Wmark) -> Option<Pfn> {
        for &z in self.zonelists[cpu.idx()].iter() {
            let zone = &self.zones[z];
            // 6.7+: remember when a zone is below its high watermark; pcp tuning shrinks then.
            if !zone.test_flag(ZONE_BELOW_HIGH) && !zone.watermark_ok(order, Wmark::High) {
                zone.set_flag(ZONE_BELOW_HIGH);
            }
            if !zone.watermark_ok(order, mark) {
                self.events.count(cpu, VmEvent::WmarkFail, 1);
                continue;
            }
            if let Some(pfn) = self.rmqueue(cpu, z, order, gfp.migratetype) {
                return Some(pfn);
            }
        }
        None
    }

    /// `rmqueue`: from the pcp when the order is cached there and its lock is free, otherwise
    /// from the buddy lists.
    #[inline]
    fn rmqueue(&self, cpu: CpuId, z: usize, order: u32, mt: MigrateType) -> Option<Pfn> {
        let zone = &self.zones[z];
        if let Some(ll) = &self.llfree {
            return ll[z].alloc(cpu, order, zone);
        }
        if self.pcp_params[z].allowed(order) {
            if let Some(mut pcp) = self.pcp(z, cpu).try_lock() {
                let (pfn, refilled, fallback) = pcp.rmqueue(zone, &self.pages, order, mt)?;
                drop(pcp);
                self.events.count(cpu, VmEvent::PcpAllocHit, 1);
                if refilled {
                    self.events.count(cpu, VmEvent::PcpRefill, 1);
                }
                if fallback {
                    self.events.count(cpu, VmEvent::MigrateFallback, 1);
                }
                return Some(pfn);
            }
            self.events.count(cpu, VmEvent::PcpTrylockFail, 1);
        }
        let mut fallback = false;
        let pfn = {
            let mut fa = zone.lock_free_area();
            zone.rmqueue(&mut fa, &self.pages, order, mt, &mut fallback)
        };
        self.events.count(cpu, VmEvent::ZoneAlloc, 1);
        if fallback {
            self.events.count(cpu, VmEvent::MigrateFallback, 1);
        }
        pfn
    }

    /// `prep_new_page`: reference count one, flags clean, zeroed and compound as asked.
    #[inline]
    fn prep_new_page(&self, cpu: CpuId, pfn: Pfn, order: u32, gfp: Gfp, zero: bool) {
        let nr = 1u32 << order;
        let head = &self.pages[pfn];
        debug_assert_eq!(
            head.flags() & pg::ALLOC_CLEAR,
            0,
            "bad page state at {pfn:?}"
        );
        head.refcount.store(1, std::sync::atomic::Ordering::Relaxed);
        if zero {
            for i in 0..nr {
                self.arena.zero_page(pfn.offset(i));
            }
            self.events.count(cpu, VmEvent::ZeroInline, 1);
        }
        if gfp.comp && order > 0 {
            head.set_nonatomic(pg::HEAD);
            for i in 1..nr {
                let t = &self.pages[pfn.offset(i)];
                t.private.store(pfn.0, std::sync::atomic::Ordering::Relaxed);
                t.set_nonatomic(pg::TAIL);
            }
        }
        self.events.count(cpu, VmEvent::PgAlloc, u64::from(nr));
    }

    /// Take an extra reference on an allocated block (`get_page`).
    #[inline]
    pub fn get_page(&self, pfn: Pfn) {
        self.pages[pfn]
            .refcount
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// `compound_head`.
    #[inline]
    pub fn compound_head(&self, pfn: Pfn) -> Pfn {
        let p = &self.pages[pfn];
        if p.test(pg::TAIL) {
            Pfn(p.private.load(std::sync::atomic::Ordering::Relaxed))
        } else {
            pfn
        }
    }

    /// Drop a reference to a block of 2^`order` frames and free it when it was the last
    /// (`__free_pages`). Returns whether the block was freed. Frees go to the freeing CPU's pcp,
    /// wherever the block was allocated.
    ///
    /// Panics on a frame that is already free: a double free is a bug in the caller, and
    /// continuing would corrupt the free lists.
    pub fn free_pages(&self, cpu: CpuId, pfn: Pfn, order: u32) -> bool {
        let page = &self.pages[pfn];
        assert!(
            page.flags() & (pg::BUDDY | pg::PCP | pg::ZEROED | pg::TAIL | pg::LRU) == 0,
            "bad page state: free of {pfn:?} (order {order}) with flags {:#x}: already free, a tail page or still on an LRU list",
            page.flags()
        );
        let prev = page
            .refcount
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        assert!(
            prev >= 1,
            "bad page state: {pfn:?} freed with refcount {prev}"
        );
        if prev != 1 {
            return false;
        }
        self.free_frozen_pages(cpu, pfn, order);
        true
    }

    /// Free order-0 pages whose reference counts already reached zero, as `release_pages`
    /// does: their memory cgroup charges are dropped once per run of pages of one group
    /// (`mem_cgroup_uncharge_folios` with its `uncharge_gather`), not once per page.
    pub fn free_frozen_batch(&self, cpu: CpuId, pfns: &[Pfn]) {
        let mut gather = crate::reclaim::memcg::UnchargeGather::default();
        for &pfn in pfns {
            let memcg = &self.pages[pfn].memcg;
            // The page is ours alone: a plain load and store (see `free_frozen_pages`).
            let id = memcg.load(std::sync::atomic::Ordering::Relaxed);
            if id != 0 {
                memcg.store(0, std::sync::atomic::Ordering::Relaxed);
                gather.add(&self.memcgs, id, 1);
            }
        }
        gather.flush(&self.memcgs);
        for &pfn in pfns {
            self.free_frozen_pages(cpu, pfn, 0);
        }
    }

    /// Free a block whose reference count already reached zero (`free_unref_page` after
    /// `put_page_testzero`). For callers that drop references themselves, such as the LRU's
    /// `release_pages`, which must take a page off its list between the two steps.
    pub fn free_frozen_pages(&self, cpu: CpuId, pfn: Pfn, order: u32) {
        debug_assert_eq!(
            self.pages[pfn]
                .refcount
                .load(std::sync::atomic::Ordering::Relaxed),
            0
        );
        let nr = 1u32 << order;
        let page = &self.pages[pfn];
        // The owner's state goes with the last reference (`free_pages_prepare`).
        page.clear_nonatomic(pg::OWNER_STATE);
        page.mapping.store(0, std::sync::atomic::Ordering::Relaxed);
        // `mem_cgroup_uncharge`: a charged page carries its group's id (slab pages clear
        // their use of the field before they come back).
        // The page is ours alone here, so a plain load and store will do (no locked RMW on the
        // free path).
        let memcg = page.memcg.load(std::sync::atomic::Ordering::Relaxed);
        if memcg != 0 {
            page.memcg.store(0, std::sync::atomic::Ordering::Relaxed);
            self.memcgs.uncharge(memcg, u64::from(nr));
        }
        if page.test(pg::HEAD) {
            page.clear_nonatomic(pg::HEAD);
            for i in 1..nr {
                let t = &self.pages[pfn.offset(i)];
                t.clear_nonatomic(pg::TAIL);
                t.private.store(0, std::sync::atomic::Ordering::Relaxed);
            }
        }
        self.events.count(cpu, VmEvent::PgFree, u64::from(nr));
        let z = self.zone_of(pfn);
        let zone = &self.zones[z];
        if let Some(ll) = &self.llfree {
            ll[z].free(cpu, pfn, order, zone);
            return;
        }
        let mt = zone.pageblock_migratetype(pfn);
        if self.pcp_params[z].allowed(order) {
            if let Some(mut pcp) = self.pcp(z, cpu).try_lock() {
                let drained = pcp.free(zone, &self.pages, pfn, order, mt);
                drop(pcp);
                if drained {
                    self.events.count(cpu, VmEvent::PcpDrain, 1);
                }
                return;
            }
            self.events.count(cpu, VmEvent::PcpTrylockFail, 1);
        }
        // free_one_page
        let mut fa = zone.lock_free_area();
        zone.free_one(&mut fa, &self.pages, pfn, order, mt);
        drop(fa);
        self.events.count(cpu, VmEvent::ZoneFree, 1);
    }

    /// Empty the pcp of (`zone`, `cpu`) into the zone (`drain_pages_zone`). Works for any CPU:
    /// a remote drain takes the pcp lock that the owner only trylocks.
    pub fn drain_pages_zone(&self, zone: usize, cpu: CpuId) {
        if let Some(ll) = &self.llfree {
            ll[zone].drain(cpu, &self.zones[zone]);
            return;
        }
        let mut pcp = self.pcp(zone, cpu).lock();
        if pcp.count > 0 {
            pcp.drain(&self.zones[zone], &self.pages);
            drop(pcp);
            self.events
                .count(self.kthread_cpu(), VmEvent::PcpDrainAll, 1);
        }
    }

    /// `drain_local_pages`: one CPU's pcps in every zone.
    pub fn drain_local_pages(&self, cpu: CpuId) {
        for z in 0..self.zones.len() {
            self.drain_pages_zone(z, cpu);
        }
    }

    /// `drain_all_pages`: every CPU's pcps, remotely (5.19+).
    pub fn drain_all_pages(&self) {
        if let Some(ll) = &self.llfree {
            // Every reservation, the kernel threads' included, and every counter delta.
            for (l, z) in ll.iter().zip(self.zones.iter()) {
                l.drain_all(z);
            }
            return;
        }
        for c in 0..self.nr_cpus {
            self.drain_local_pages(CpuId(c as u16));
        }
    }

    /// The zone's LLFree allocator, when the policy chose it.
    pub fn llfree(&self, zone: usize) -> Option<&LlFree> {
        self.llfree.as_ref().map(|l| &l[zone])
    }

    /// The vmstat worker's pass: `decay_pcp_high` on every adaptive pcp.
    pub fn decay_pcp_high(&self) {
        for z in 0..self.zones.len() {
            if !self.pcp_params[z].adaptive {
                continue;
            }
            for c in 0..self.nr_cpus {
                let mut pcp = self.pcp(z, CpuId(c as u16)).lock();
                pcp.decay(&self.zones[z], &self.pages);
            }
        }
    }

    /// The zeroer's pass.
    pub fn prezero_fill(&self) {
        if let Some(pool) = &self.prezero {
            let n = pool.fill(&self.zones, &self.pages, &self.arena);
            if n > 0 {
                self.events
                    .count(self.kthread_cpu(), VmEvent::PrezeroFill, n);
            }
        }
    }

    /// This machine's lock statistics domain: its tasks and kernel threads count into it.
    pub fn lock_stat_domain(&self) -> &Arc<pagelab_sync::LockStatDomain> {
        &self.lock_stat_domain
    }

    /// Make the calling thread count its lock statistics into this machine's domain (until it
    /// enters another). Every thread that works on this machine should, as a CPU belongs to
    /// one machine; tasks do on each entry, cheaply.
    #[inline]
    pub fn enter_lock_stats(&self) {
        self.lock_stat_domain.enter();
    }

    /// Lock statistics of the zone->lock and pcp->lock classes, summed over instances.
    pub fn lock_stats(&self) -> AllocLockStats {
        let d = &self.lock_stat_domain;
        AllocLockStats {
            zone_lock: d.class(&buddy::ZONE_LOCK).exclusive,
            pcp_lock: d.class(&PCP_LOCK).exclusive,
        }
    }

    /// Reset zone->lock's and pcp->lock's statistics and the event counters (between a warm-up
    /// and a measurement).
    pub fn reset_stats(&self) {
        self.lock_stat_domain.reset_class(&buddy::ZONE_LOCK);
        self.lock_stat_domain.reset_class(&PCP_LOCK);
        self.events.reset();
    }

    /// The spinlock kind the policy chose.
    pub fn spinlock_kind(&self) -> LockKind {
        self.policy.locks.spinlock
    }

    /// Check every allocator invariant and count frames by state. Call only while no other
    /// thread uses the allocator. Returns a description of the first violation found.
    pub fn check(&self) -> Result<Census, String> {
        use std::sync::atomic::Ordering::Relaxed;
        // The zeroer thread keeps running between workloads; wait out its batch in flight.
        let _zeroer = self.prezero.as_ref().map(|p| p.quiesce());
        let n = self.pages.len();
        let mut seen = vec![false; n];
        let mut census = Census::default();
        if let Some(ll) = &self.llfree {
            for (z, (l, zone)) in ll.iter().zip(self.zones.iter()).enumerate() {
                l.fold_all(zone);
                let free = l.check().map_err(|e| format!("zone {z}: {e}"))?;
                if free as i64 != zone.free_pages() {
                    return Err(format!(
                        "zone {z}: NR_FREE_PAGES {} but {free} frames free in LLFree",
                        zone.free_pages()
                    ));
                }
                census.llfree += free;
            }
        }
        let mut mark = |pfn: Pfn, nr: u32, what: &str| -> Result<(), String> {
            for i in 0..nr {
                let s = &mut seen[pfn.idx() + i as usize];
                if *s {
                    return Err(format!(
                        "{:?} is on two lists (second: {what})",
                        pfn.offset(i)
                    ));
                }
                *s = true;
            }
            Ok(())
        };
        for zone in self.zones.iter() {
            let fa = zone.lock_free_area();
            let mut zone_free = 0u64;
            for order in 0..=MAX_ORDER {
                let mut blocks = 0;
                for mt in MigrateType::ALL {
                    for pfn in fa.list(order, mt).iter(&self.pages) {
                        let p = &self.pages[pfn];
                        if !p.test(pg::BUDDY) || p.order() != order {
                            return Err(format!(
                                "{pfn:?} on the order-{order} free list has flags {:#x} order {}",
                                p.flags(),
                                p.order()
                            ));
                        }
                        if p.index.load(Relaxed) != mt as u64 {
                            return Err(format!("{pfn:?} on the {mt:?} list records another type"));
                        }
                        if pfn.0 & ((1 << order) - 1) != 0
                            || !zone.contains(pfn)
                            || pfn.0 + (1 << order) > zone.end_pfn.0
                        {
                            return Err(format!(
                                "{pfn:?} order {order} is misaligned or outside its zone"
                            ));
                        }
                        let buddy = pfn.buddy(order);
                        if order < MAX_ORDER
                            && zone.contains(buddy)
                            && self.pages[buddy].test(pg::BUDDY)
                            && self.pages[buddy].order() == order
                        {
                            return Err(format!(
                                "{pfn:?} and its buddy are both free at order {order}"
                            ));
                        }
                        mark(pfn, 1 << order, "buddy")?;
                        blocks += 1;
                    }
                }
                if blocks != fa.nr_free(order) {
                    return Err(format!(
                        "zone {} order {order}: nr_free {} but {blocks} blocks on the lists",
                        zone.id,
                        fa.nr_free(order)
                    ));
                }
                zone_free += blocks << order;
            }
            if self.llfree.is_none() && zone_free as i64 != zone.free_pages() {
                return Err(format!(
                    "zone {}: NR_FREE_PAGES {} but {zone_free} frames on the free lists",
                    zone.id,
                    zone.free_pages()
                ));
            }
            census.buddy += zone_free;
        }
        for z in 0..self.zones.len() {
            for c in 0..self.nr_cpus {
                let pcp = self.pcp(z, CpuId(c as u16)).lock();
                let mut counted = 0u32;
                let mut err = Ok(());
                pcp.for_each_page(&self.pages, |pfn, order, _| {
                    let p = &self.pages[pfn];
                    if err.is_ok() {
                        if !p.test(pg::PCP) || p.test(pg::BUDDY) || p.order() != order {
                            err = Err(format!(
                                "{pfn:?} on cpu {c}'s pcp has flags {:#x}",
                                p.flags()
                            ));
                        } else if self.zone_of(pfn) != z {
                            err = Err(format!("{pfn:?} on zone {z}'s pcp belongs to another zone"));
                        } else {
                            err = mark(pfn, 1 << order, "pcp");
                        }
                    }
                    counted += 1 << order;
                });
                err?;
                if counted != pcp.count {
                    return Err(format!(
                        "cpu {c} zone {z}: pcp count {} but {counted} frames listed",
                        pcp.count
                    ));
                }
                census.pcp += u64::from(counted);
            }
        }
        if let Some(pool) = &self.prezero {
            let mut err = Ok(());
            let len = pool.for_each_page(&self.pages, |pfn| {
                if err.is_ok() {
                    err = if !self.pages[pfn].test(pg::ZEROED) || !self.arena.page_is_zero(pfn) {
                        Err(format!("{pfn:?} in the prezero pool is not zeroed"))
                    } else {
                        mark(pfn, 1, "prezero pool")
                    };
                }
            });
            err?;
            census.prezeroed = len as u64;
        }
        for (i, s) in seen.iter().enumerate() {
            let p = &self.pages[Pfn(i as u32)];
            if !s && p.flags() & (pg::PCP | pg::ZEROED) != 0 {
                return Err(format!("{:?} is marked free but on no list", Pfn(i as u32)));
            }
            if !s && p.test(pg::BUDDY) {
                return Err(format!(
                    "{:?} has PG_buddy but is on no free list",
                    Pfn(i as u32)
                ));
            }
        }
        census.allocated = n as u64 - census.free();
        Ok(census)
    }
}
