//! The LRU's sizes as the rest of the kernel counts them: the work every page's move on or off
//! a list does inside `lru_lock` beyond linking it.
//!
//! # What it models
//!
//! `update_lru_size` (include/linux/mm_inline.h) runs for every page an LRU list gains or loses,
//! with the lruvec's lock held and interrupts off. Besides the lruvec's own size
//! (`mem_cgroup_update_lru_size`, the engine's [`super::lruvec::Lruvec`] counters) it updates,
//! by era ([`LruSizeStats`]):
//!
//! * the node's and the zone's page-state counters `NR_LRU_BASE + lru` and `NR_ZONE_LRU_BASE +
//!   lru` (`__mod_node_page_state`, `__mod_zone_page_state`, mm/vmstat.c; node counters since
//!   4.8): each a per-CPU differential (`vm_stat_diff`) that is folded, once its magnitude passes
//!   the zone's `stat_threshold` (`calculate_normal_threshold`: twice the bit length of the CPU
//!   count times one more than the bit length of the zone's size in 128 MiB, at most 125), into
//!   the node's (zone's) counter and the machine's with a locked add each;
//! * from 5.2 (`__mod_lruvec_state`), the memory cgroup's per-CPU state of the same item and the
//!   lruvec's (`__mod_memcg_lruvec_state`), and rstat's bookkeeping (`memcg_rstat_updated`): the
//!   check that the group is queued for the next flush on this CPU, and per level of the
//!   hierarchy a per-CPU count of updates that, every `MEMCG_CHARGE_BATCH` (64), reads the
//!   group's shared count and adds to it with a locked add unless a flush is already due (more
//!   than 64 per CPU pending: Jiebin Sun's "remove the redundant updating of
//!   stats_flush_threshold", 2022, its commit not checked here; per group since Yosry Ahmed's "make
//!   stats flushing threshold per-memcg", 6.8).
//!
//! The per-CPU lines are the CPU's own and are not recorded in traces (like every CPU-scoped
//! line): they cost the replay only their captured compute. The folds and the shared count are
//! recorded: a read of the group's count ([`MEMCG_STATS_UPDATES`]) and atomics on the node's,
//! the zone's and the machine's counters ([`VM_NODE_STAT`], [`VM_ZONE_STAT`], [`VM_STAT`]).
//!
//! # How the per-CPU state is kept
//!
//! The kernel's differentials are per CPU and per zone (node, memcg); their updates are safe
//! because the CPU runs them with interrupts off. An engine CPU is not one thread at a time
//! (kswapd runs as its node's first CPU, a remote drain flushes another CPU's batch), so the
//! engine keeps its sets per lruvec, per lock that guards the update ([`Holder`]) and per CPU,
//! plus one per lock for callers on no particular CPU (reclaim through
//! [`super::Lru::with_lruvec`], isolation). A set is written only by a holder of its lock: a
//! plain load and store, as the kernel's `__this_cpu` operations, never racing. The one
//! exception is the lru_lock RFC v2's shared hold, whose holders remove pages side by side
//! under one lock: its sets take locked adds. That is the engine's cost, not the RFC's (its
//! per-CPU counters were safe per CPU); no shipped profile uses that release. The sums are the
//! kernel's; only where the threshold is crossed differs when one CPU's updates spread over
//! several sets (several memcgs' lruvecs, or the RFC v1's batch locks): the kernel folds per
//! CPU and node.
//!
//! Not modelled: the periodic flush of the memcg statistics (`flush_memcg_stats_dwork`, every 2
//! s), which resets the group's shared count; at the fault rates projected here the count is
//! past its threshold again within microseconds of a flush, so the engine's steady state, where
//! every 64th update only reads it, is the kernel's. MGLRU charges a folio's list to the active
//! or inactive counter by its generation (`lru_gen_update_size`); the engine counts every
//! generation as inactive of its type and leaves a move between generations uncounted
//! ([`StatCpu::Move`]), as the kernel does when the category does not change. The rstat count
//! is fed in the kernel by every memcg statistic (a fault's `PGFAULT` event and
//! `NR_ANON_MAPPED` too), so it reaches 64 sooner than the engine's, which counts the LRU's
//! updates alone; and 6.1 to 6.7 kept one per-CPU count and one machine-wide
//! `stats_flush_threshold` for every group, where the engine models 6.8's per-group counts for
//! every `"memcg"` profile. In the steady state both only read their shared line.
//!
//! # Invariant ([`LruSizeStats::check`], at quiescence)
//!
//! For each node and item, the node's counter plus every differential of the node's lruvecs
//! equals the pages on the node's lists of that item; the same for the zone's counter, and for
//! the machine's counters over all nodes.

use std::sync::atomic::AtomicI64;
use std::sync::atomic::Ordering::Relaxed;

use crossbeam_utils::CachePadded;
use pagelab_sync::trace;
use pagelab_sync::{LockClass, Scope};

use super::LruList;
use crate::cpu::CpuId;
use crate::policy::LruSizeStats as Mode;
use crate::vmstat::stat_threshold;

/// On whose per-CPU statistics an LRU list change is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatCpu {
    /// The CPU the lock's holder runs as.
    Cpu(CpuId),
    /// No particular CPU (reclaim through [`super::Lru::with_lruvec`], isolation): the
    /// lruvec's extra set.
    Unbound,
    /// Not counted: half of a move between two lists of one item (MGLRU's generations), which
    /// the kernel does with `list_move`, leaving the statistics alone.
    Move,
}

/// Which lock guards an update, and so which of the lruvec's per-CPU sets it writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holder {
    /// `lru_lock` held exclusively.
    Exclusive,
    /// The lru_lock RFC v1's batch lock of this index alone.
    Batch(usize),
    /// The lru_lock RFC v2's shared hold: other holders update beside it.
    Shared,
}

/// The kernel's LRU lists (`enum lru_list`), the items of the counters.
pub const NR_LRU_LISTS: usize = 5;

/// `MEMCG_CHARGE_BATCH`: per-CPU updates between two additions to a group's shared count.
pub const MEMCG_CHARGE_BATCH: i64 = 64;

/// `pgdat->vm_stat[NR_LRU_BASE + lru]`, one line per node.
pub static VM_NODE_STAT: LockClass = LockClass::new("vm_stat (node)", Scope::Node);
/// `zone->vm_stat[NR_ZONE_LRU_BASE + lru]`, one line per zone (a zone per node in the engine).
pub static VM_ZONE_STAT: LockClass = LockClass::new("vm_stat (zone)", Scope::Node);
/// `vm_node_stat` and `vm_zone_stat`: the machine's sums, written by every node's folds.
pub static VM_STAT: LockClass = LockClass::new("vm_stat (machine)", Scope::Machine);
/// `memcg->vmstats->stats_updates`: a group's pending updates, one line per group.
pub static MEMCG_STATS_UPDATES: LockClass = LockClass::new("memcg stats_updates", Scope::Machine);

/// The counter item of a page on `lru`: the classic list itself, a generation the inactive
/// list of its type (see the module documentation).
#[inline]
pub fn item(lru: LruList) -> usize {
    match lru.gen_of() {
        None => lru.idx(),
        Some(_) if lru.is_file() => LruList::InactiveFile.idx(),
        Some(_) => LruList::InactiveAnon.idx(),
    }
}

/// A node's (or zone's, or the machine's) counters of the five items: one line.
type Counters = CachePadded<[AtomicI64; NR_LRU_LISTS]>;

/// The address of a counter array's line, the instance its traces name.
#[inline]
fn line_of(c: &Counters) -> usize {
    &**c as *const [AtomicI64; NR_LRU_LISTS] as usize
}

/// The shared side: every node's and zone's counters, the machine's, and each memory cgroup's
/// pending-update count.
#[derive(Debug)]
pub struct LruSizeStats {
    mode: Mode,
    threshold: i64,
    /// `MEMCG_CHARGE_BATCH * num_online_cpus()`: pending updates past which a flush is due.
    flush_due: i64,
    nodes: Box<[Counters]>,
    zones: Box<[Counters]>,
    machine_node: Counters,
    machine_zone: Counters,
    memcg_updates: Box<[CachePadded<AtomicI64>]>,
    /// Memory cgroups (a lruvec's index is `node * nr_memcgs + memcg`).
    nr_memcgs: usize,
}

/// One CPU's differentials and per-CPU state touched through one lruvec. `AtomicI64`s written
/// with a plain load and store (module documentation).
#[derive(Debug, Default)]
struct Diffs {
    node: [AtomicI64; NR_LRU_LISTS],
    zone: [AtomicI64; NR_LRU_LISTS],
    /// `memcg->vmstats_percpu->state` of the items.
    memcg: [AtomicI64; NR_LRU_LISTS],
    /// `pn->lruvec_stats_percpu->state` of the items.
    lruvec: [AtomicI64; NR_LRU_LISTS],
    /// `statc->stats_updates` of the group and of its parent (the root for a child group).
    updates: [AtomicI64; 2],
    /// `cgroup_rstat_cpu(cgrp, cpu)->updated_next`: set once the group is queued for a flush
    /// on this CPU (and, with no flush modelled, never cleared).
    queued: AtomicI64,
}

/// One lruvec's per-CPU sets: per [`Holder`], one per CPU and one for callers on no CPU.
#[derive(Debug)]
pub struct LruvecDiffs {
    node: usize,
    memcg: usize,
    /// Sets per holder: `nr_cpus + 1`.
    per_holder: usize,
    /// Batch locks (the RFC v1's), whose sets follow the exclusive holder's.
    nr_batches: usize,
    /// Exclusive, then each batch lock, then shared (the RFC v2's).
    slots: Box<[CachePadded<Diffs>]>,
}

impl LruvecDiffs {
    #[inline]
    fn slot(&self, holder: Holder, cpu: StatCpu) -> Option<&Diffs> {
        let c = match cpu {
            StatCpu::Cpu(c) => {
                debug_assert!(
                    c.idx() < self.per_holder - 1,
                    "{c:?} beyond the engine's CPUs"
                );
                c.idx().min(self.per_holder - 1)
            }
            StatCpu::Unbound => self.per_holder - 1,
            StatCpu::Move => return None,
        };
        let h = match holder {
            Holder::Exclusive => 0,
            Holder::Batch(b) => 1 + b.min(self.nr_batches.saturating_sub(1)),
            Holder::Shared => 1 + self.nr_batches,
        };
        Some(&self.slots[h * self.per_holder + c])
    }
}

/// Add `d` to a per-CPU counter: a plain load and store, or (`locked`, the RFC v2's shared
/// holders) a locked add. Returns the new value.
#[inline]
fn add(c: &AtomicI64, d: i64, locked: bool) -> i64 {
    if locked {
        return c.fetch_add(d, Relaxed) + d;
    }
    let v = c.load(Relaxed) + d;
    c.store(v, Relaxed);
    v
}

/// Reset a per-CPU counter, returning what it held.
#[inline]
fn take(c: &AtomicI64, locked: bool) -> i64 {
    if locked {
        return c.swap(0, Relaxed);
    }
    let v = c.load(Relaxed);
    c.store(0, Relaxed);
    v
}

impl LruSizeStats {
    /// The counters of `nr_nodes` nodes of `managed_pages` frames each (the largest zone sets
    /// the threshold, as the node's threshold is its zones' largest) and `nr_memcgs` groups,
    /// on `nr_cpus` CPUs.
    pub fn new(
        mode: Mode,
        nr_nodes: usize,
        nr_memcgs: usize,
        nr_cpus: usize,
        managed_pages: u64,
    ) -> Self {
        let counters = |n: usize| (0..n).map(|_| Counters::default()).collect();
        LruSizeStats {
            mode,
            threshold: stat_threshold(managed_pages, nr_cpus),
            flush_due: MEMCG_CHARGE_BATCH * nr_cpus as i64,
            nodes: counters(nr_nodes),
            zones: counters(nr_nodes),
            machine_node: Counters::default(),
            machine_zone: Counters::default(),
            memcg_updates: (0..nr_memcgs).map(|_| Default::default()).collect(),
            nr_memcgs,
        }
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The per-CPU differentials' fold threshold.
    pub fn threshold(&self) -> i64 {
        self.threshold
    }

    /// The per-CPU sets of the lruvec of (`node`, `memcg`) on `nr_cpus` CPUs, with `nr_batches`
    /// batch locks (the RFC v1's; else 0) and sets for shared holders (the RFC v2's) if
    /// `shared`; `None` where the mode keeps no statistics beyond the lruvec's sizes.
    pub fn lruvec_diffs(
        &self,
        node: usize,
        memcg: usize,
        nr_cpus: usize,
        nr_batches: usize,
        shared: bool,
    ) -> Option<LruvecDiffs> {
        let holders = 1 + nr_batches + usize::from(shared);
        (self.mode != Mode::Lruvec).then(|| LruvecDiffs {
            node,
            memcg,
            per_holder: nr_cpus + 1,
            nr_batches,
            slots: (0..holders * (nr_cpus + 1))
                .map(|_| Default::default())
                .collect(),
        })
    }

    /// `update_lru_size`'s statistics for `delta` pages of `lru` in the lruvec of `d`, on
    /// `cpu`'s set of `holder`'s. The caller holds the lock `holder` names.
    #[inline]
    pub fn update(&self, d: &LruvecDiffs, holder: Holder, cpu: StatCpu, lru: LruList, delta: i64) {
        let Some(s) = d.slot(holder, cpu) else {
            return;
        };
        let locked = holder == Holder::Shared;
        let i = item(lru);
        // __mod_lruvec_state: the node's counter, then the memcg's state.
        let (node, zone) = (&self.nodes[d.node], &self.zones[d.node]);
        self.mod_state(
            &VM_NODE_STAT,
            &s.node[i],
            node,
            i,
            &self.machine_node,
            delta,
            locked,
        );
        if self.mode == Mode::Memcg {
            add(&s.memcg[i], delta, locked);
            add(&s.lruvec[i], delta, locked);
            self.rstat_updated(s, d.memcg, delta, locked);
        }
        self.mod_state(
            &VM_ZONE_STAT,
            &s.zone[i],
            zone,
            i,
            &self.machine_zone,
            delta,
            locked,
        );
    }

    /// `__mod_node_page_state` / `__mod_zone_page_state`: add to the per-CPU differential of
    /// item `i`, fold it into the node's (zone's) and the machine's counters past the threshold.
    /// Each counter array is one line, the instance its traces name.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn mod_state(
        &self,
        class: &'static LockClass,
        diff: &AtomicI64,
        shared: &Counters,
        i: usize,
        machine: &Counters,
        delta: i64,
        locked: bool,
    ) {
        if add(diff, delta, locked).abs() > self.threshold {
            let x = take(diff, locked);
            trace::atomic(class, line_of(shared));
            shared[i].fetch_add(x, Relaxed);
            trace::atomic(&VM_STAT, line_of(machine));
            machine[i].fetch_add(x, Relaxed);
        }
    }

    /// `memcg_rstat_updated`: queue the group for a flush on this CPU (once), then count the
    /// update at each level, adding a batch to the level's shared count unless a flush is due.
    #[inline]
    fn rstat_updated(&self, s: &Diffs, memcg: usize, delta: i64, locked: bool) {
        if s.queued.load(Relaxed) == 0 {
            s.queued.store(1, Relaxed);
        }
        let levels: &[usize] = if memcg == 0 { &[0] } else { &[memcg, 0] };
        for (l, &group) in levels.iter().enumerate() {
            if add(&s.updates[l], delta.abs(), locked) < MEMCG_CHARGE_BATCH {
                continue;
            }
            let n = take(&s.updates[l], locked);
            let shared = &self.memcg_updates[group];
            let addr = &**shared as *const AtomicI64 as usize;
            trace::line_read(&MEMCG_STATS_UPDATES, addr);
            if shared.load(Relaxed) <= self.flush_due {
                trace::atomic(&MEMCG_STATS_UPDATES, addr);
                shared.fetch_add(n, Relaxed);
            }
        }
    }

    /// Check the invariant against `on_lists[node * nr_memcgs + memcg][lru]`, the pages on
    /// each lruvec's lists, given every lruvec's differentials summed over its sets
    /// ([`LruvecDiffs::totals`]). Call at quiescence.
    pub fn check(
        &self,
        totals: &[DiffTotals],
        on_lists: &[[u64; LruList::COUNT]],
    ) -> Result<(), String> {
        if self.mode == Mode::Lruvec {
            return Ok(());
        }
        // Pages per node and item, and per memcg and item.
        let mut want = vec![[0i64; NR_LRU_LISTS]; self.nodes.len()];
        let mut want_memcg = vec![[0i64; NR_LRU_LISTS]; self.nr_memcgs];
        for (idx, lists) in on_lists.iter().enumerate() {
            for lru in LruList::ALL {
                let n = lists[lru.idx()] as i64;
                want[idx / self.nr_memcgs][item(lru)] += n;
                want_memcg[idx % self.nr_memcgs][item(lru)] += n;
            }
        }
        let mut diff_node = vec![[0i64; NR_LRU_LISTS]; self.nodes.len()];
        let mut diff_zone = diff_node.clone();
        let mut diff_memcg = vec![[0i64; NR_LRU_LISTS]; self.nr_memcgs];
        for t in totals {
            for i in 0..NR_LRU_LISTS {
                diff_node[t.node][i] += t.node_diff[i];
                diff_zone[t.node][i] += t.zone_diff[i];
                diff_memcg[t.memcg][i] += t.memcg_state[i];
            }
        }
        for i in 0..NR_LRU_LISTS {
            let total: i64 = want.iter().map(|w| w[i]).sum();
            for (what, shared, diffs, machine) in [
                ("node", &self.nodes, &diff_node, &self.machine_node),
                ("zone", &self.zones, &diff_zone, &self.machine_zone),
            ] {
                for (node, w) in want.iter().enumerate() {
                    let got = shared[node][i].load(Relaxed) + diffs[node][i];
                    if got != w[i] {
                        return Err(format!(
                            "{what} {node}: LRU item {i} counts {got} pages, its lists hold {}",
                            w[i]
                        ));
                    }
                }
                let got = machine[i].load(Relaxed) + diffs.iter().map(|d| d[i]).sum::<i64>();
                if got != total {
                    return Err(format!(
                        "the machine's {what} counter: LRU item {i} counts {got} pages, the lists hold {total}"
                    ));
                }
            }
            if self.mode == Mode::Memcg {
                for (memcg, w) in want_memcg.iter().enumerate() {
                    let got = diff_memcg[memcg][i];
                    if got != w[i] {
                        return Err(format!(
                            "memcg {memcg}: LRU item {i} counts {got} pages per CPU, its lists hold {}",
                            w[i]
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

/// One lruvec's differentials summed over its per-CPU sets ([`LruvecDiffs::totals`]).
#[derive(Clone, Copy, Debug)]
pub struct DiffTotals {
    node: usize,
    memcg: usize,
    node_diff: [i64; NR_LRU_LISTS],
    zone_diff: [i64; NR_LRU_LISTS],
    memcg_state: [i64; NR_LRU_LISTS],
}

impl LruvecDiffs {
    /// The sums of this lruvec's sets (a racy snapshot unless its locks are held).
    pub fn totals(&self) -> DiffTotals {
        let mut t = DiffTotals {
            node: self.node,
            memcg: self.memcg,
            node_diff: [0; NR_LRU_LISTS],
            zone_diff: [0; NR_LRU_LISTS],
            memcg_state: [0; NR_LRU_LISTS],
        };
        for s in self.slots.iter() {
            for i in 0..NR_LRU_LISTS {
                t.node_diff[i] += s.node[i].load(Relaxed);
                t.zone_diff[i] += s.zone[i].load(Relaxed);
                t.memcg_state[i] += s.memcg[i].load(Relaxed);
            }
        }
        t
    }
}

/// What an lruvec needs to count its pages' moves: the shared counters and its per-CPU sets.
#[derive(Debug)]
pub struct LruvecStat {
    shared: std::sync::Arc<LruSizeStats>,
    diffs: LruvecDiffs,
}

impl LruvecStat {
    /// The statistics of the lruvec of (`node`, `memcg`), or `None` where `shared`'s mode
    /// keeps none beyond the lruvec's own sizes.
    pub fn new(
        shared: &std::sync::Arc<LruSizeStats>,
        node: usize,
        memcg: usize,
        nr_cpus: usize,
        nr_batches: usize,
        concurrent: bool,
    ) -> Option<Self> {
        Some(LruvecStat {
            diffs: shared.lruvec_diffs(node, memcg, nr_cpus, nr_batches, concurrent)?,
            shared: shared.clone(),
        })
    }

    /// See [`LruSizeStats::update`].
    #[inline]
    pub fn update(&self, holder: Holder, cpu: StatCpu, lru: LruList, delta: i64) {
        self.shared.update(&self.diffs, holder, cpu, lru, delta);
    }

    pub fn diffs(&self) -> &LruvecDiffs {
        &self.diffs
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use pagelab_sync::trace::{Event, Kind};

    use super::*;

    /// Counts of recorded atomics and line reads by class name.
    fn recorded(ev: &[Event]) -> Vec<(&'static str, &'static str)> {
        ev.iter()
            .filter_map(|e| match e.kind {
                Kind::Atomic => Some((e.class.name, "atomic")),
                Kind::Line { write: false, .. } => Some((e.class.name, "read")),
                _ => None,
            })
            .collect()
    }

    /// One page joins `lru` on CPU 0, under `holder`.
    fn add_one(s: &LruSizeStats, d: &LruvecDiffs, holder: Holder, lru: LruList) {
        s.update(d, holder, StatCpu::Cpu(CpuId(0)), lru, 1);
    }

    fn lists(anon: u64) -> Vec<[u64; LruList::COUNT]> {
        let mut l = [0; LruList::COUNT];
        l[LruList::InactiveAnon.idx()] = anon;
        vec![l]
    }

    /// `__mod_node_page_state`: nothing shared is written until the differential passes the
    /// threshold; then one locked add on the node's line and one on the machine's, and the
    /// same for the zone. The sums stay exact across the fold.
    #[test]
    fn a_differential_folds_past_the_threshold_into_node_zone_and_machine() {
        // 2 CPUs, 1 GiB: 2 * fls(2) * (1 + fls(8)) = 20.
        let s = LruSizeStats::new(Mode::Vmstat, 1, 1, 2, 1 << 18);
        assert_eq!(s.threshold(), 20);
        let d = s.lruvec_diffs(0, 0, 2, 0, false).unwrap();
        let cpu = StatCpu::Cpu(CpuId(1));
        trace::start(256);
        for _ in 0..20 {
            s.update(&d, Holder::Exclusive, cpu, LruList::InactiveAnon, 1);
        }
        assert_eq!(recorded(&trace::stop()), vec![], "within the threshold");
        s.check(&[d.totals()], &lists(20)).unwrap();
        trace::start(256);
        s.update(&d, Holder::Exclusive, cpu, LruList::InactiveAnon, 1);
        assert_eq!(
            recorded(&trace::stop()),
            vec![
                ("vm_stat (node)", "atomic"),
                ("vm_stat (machine)", "atomic"),
                ("vm_stat (zone)", "atomic"),
                ("vm_stat (machine)", "atomic"),
            ]
        );
        assert_eq!(s.nodes[0][0].load(Relaxed), 21);
        assert_eq!(s.machine_zone[0].load(Relaxed), 21);
        s.check(&[d.totals()], &lists(21)).unwrap();
        let e = s.check(&[d.totals()], &lists(22)).unwrap_err();
        assert!(
            e.contains("counts 21 pages") && e.contains("hold 22"),
            "{e}"
        );
        // A removal from another CPU's set keeps the sums.
        s.update(
            &d,
            Holder::Exclusive,
            StatCpu::Unbound,
            LruList::InactiveAnon,
            -1,
        );
        s.check(&[d.totals()], &lists(20)).unwrap();
    }

    /// `memcg_rstat_updated` with two levels (a group under the root): every 64 updates each
    /// level reads its group's shared count and adds the batch to it, until more than 64 per
    /// CPU are pending; from then on it only reads.
    #[test]
    fn rstat_adds_a_batch_until_a_flush_is_due_then_only_reads() {
        let s = LruSizeStats::new(Mode::Memcg, 1, 2, 1, 1 << 18);
        let d = s.lruvec_diffs(0, 1, 1, 0, false).unwrap();
        let batch = |s: &LruSizeStats| {
            trace::start(1024);
            for _ in 0..MEMCG_CHARGE_BATCH {
                add_one(s, &d, Holder::Exclusive, LruList::ActiveFile);
            }
            recorded(&trace::stop())
                .into_iter()
                .filter(|(c, _)| *c == "memcg stats_updates")
                .map(|(_, k)| k)
                .collect::<Vec<_>>()
        };
        let both = vec!["read", "atomic", "read", "atomic"];
        assert_eq!(batch(&s), both, "first batch: the group, then the root");
        assert_eq!(batch(&s), both, "64 pending is not past 64 x 1 CPU");
        assert_eq!(
            batch(&s),
            vec!["read", "read"],
            "a flush is due: reads only"
        );
        assert_eq!(s.memcg_updates[1].load(Relaxed), 128);
        assert_eq!(s.memcg_updates[0].load(Relaxed), 128);
        let mut on = [0; LruList::COUNT];
        on[LruList::ActiveFile.idx()] = 3 * MEMCG_CHARGE_BATCH as u64;
        s.check(&[d.totals()], &[[0; LruList::COUNT], on]).unwrap();
    }

    /// MGLRU's moves between generations and 2.6's lruvec-only mode leave the statistics alone.
    #[test]
    fn moves_between_generations_and_the_lruvec_mode_count_nothing() {
        let s = LruSizeStats::new(Mode::Memcg, 1, 1, 1, 1 << 18);
        let d = s.lruvec_diffs(0, 0, 1, 0, false).unwrap();
        s.update(&d, Holder::Exclusive, StatCpu::Move, LruList::Gen2Anon, 1);
        s.check(&[d.totals()], &lists(0)).unwrap();
        assert_eq!(item(LruList::Gen2Anon), item(LruList::InactiveAnon));
        assert_eq!(item(LruList::Gen0File), item(LruList::InactiveFile));
        let none = LruSizeStats::new(Mode::Lruvec, 1, 1, 1, 1 << 18);
        assert!(none.lruvec_diffs(0, 0, 1, 0, false).is_none());
    }

    /// The RFC v2's shared holders update one CPU's set side by side: locked adds, so no
    /// update is lost (plain loads and stores would lose some here).
    #[test]
    fn shared_holders_of_one_cpu_lose_no_update() {
        let s = Arc::new(LruSizeStats::new(Mode::Memcg, 1, 1, 1, 1 << 18));
        let d = Arc::new(s.lruvec_diffs(0, 0, 1, 0, true).unwrap());
        const N: i64 = 20_000;
        std::thread::scope(|sc| {
            for _ in 0..2 {
                sc.spawn(|| {
                    for _ in 0..N {
                        add_one(&s, &d, Holder::Shared, LruList::InactiveAnon);
                    }
                });
            }
        });
        s.check(&[d.totals()], &lists(2 * N as u64)).unwrap();
    }
}
