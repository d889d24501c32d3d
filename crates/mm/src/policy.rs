//! Policy switches: a profile is a value.
//!
//! Every scalability technique the engine models is a switch here, and a profile (one "kernel"
//! of a comparison) is a TOML file naming their values. The code reads the `Policy` once at
//! set-up and dispatches on it in one place per mechanism; nothing on a hot path re-parses or
//! re-interprets it.
//!
//! Parsing is strict: an unknown key or value is an error that names the key and the allowed
//! values, and inconsistent settings (a pcp batch above its high mark, and the like) are
//! rejected by [`Policy::validate`], so a typo can never silently run the default kernel.

use std::fmt;
use std::str::FromStr;

use pagelab_sync::LockKind;
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};

/// All switches of one profile.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Display name; defaults to the file name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// One line saying which kernel or patch set this profile stands for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default)]
    pub locks: LockPolicy,
    #[serde(default)]
    pub alloc: AllocPolicy,
    #[serde(default)]
    pub pcp: PcpPolicy,
    #[serde(default)]
    pub mm: MmPolicy,
    #[serde(default)]
    pub lru: LruPolicy,
    #[serde(default)]
    pub memcg: MemcgPolicy,
}

/// `[locks]`: the architecture's lock implementation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockPolicy {
    /// `spinlock_t` implementation for zone->lock, pcp->lock and every other spinlock:
    /// `ticket` (x86 before 4.2) or `queued` (qspinlock, 4.2+).
    #[serde(default = "LockPolicy::default_spinlock", with = "lock_kind_serde")]
    pub spinlock: LockKind,
}

impl LockPolicy {
    fn default_spinlock() -> LockKind {
        LockKind::Queued
    }
}

impl Default for LockPolicy {
    fn default() -> Self {
        LockPolicy {
            spinlock: Self::default_spinlock(),
        }
    }
}

mod lock_kind_serde {
    use super::*;

    pub fn serialize<S: serde::Serializer>(k: &LockKind, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&k.to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<LockKind, D::Error> {
        let s = String::deserialize(d)?;
        LockKind::from_str(&s).map_err(|_| {
            de::Error::custom(format!(
                "unknown value `{s}`, expected one of `ticket`, `queued`"
            ))
        })
    }
}

/// `[alloc]`: the page allocator outside the per-CPU lists.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllocPolicy {
    /// Keep a pool of pages zeroed by a background thread, so that zero-filled allocations skip
    /// the zeroing (Christoph Lameter's prezeroing patches, 2005).
    #[serde(default)]
    pub prezero: bool,
    /// Target size of the prezeroed pool, in pages.
    #[serde(default = "AllocPolicy::default_prezero_pool")]
    pub prezero_pool: u32,
}

impl AllocPolicy {
    fn default_prezero_pool() -> u32 {
        4096
    }
}

impl Default for AllocPolicy {
    fn default() -> Self {
        AllocPolicy {
            prezero: false,
            prezero_pool: Self::default_prezero_pool(),
        }
    }
}

/// Which allocation orders the per-CPU page lists cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PcpLists {
    /// No per-CPU lists: every allocation and free takes zone->lock.
    None,
    /// Order-0 pages only (kernels before 5.14).
    Order0,
    /// Orders 0 to `PAGE_ALLOC_COSTLY_ORDER` (3), one list per order and migratetype (5.14+).
    HighOrder,
}

/// How `pcp->high` behaves over time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PcpTune {
    /// `high` and `batch` stay as configured.
    Fixed,
    /// 6.7+ (Huang Ying): `high` moves between `high_min` and `high_max` with the workload,
    /// free batches scale with consecutive frees, refill batches with consecutive refills, and
    /// `high` decays by 1/8 per second when idle.
    Adaptive,
}

/// A count that is either given or computed from the zone as the kernel does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Count {
    Auto,
    Fixed(u32),
}

impl Serialize for Count {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Count::Auto => s.serialize_str("auto"),
            Count::Fixed(n) => s.serialize_u32(*n),
        }
    }
}

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Count, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Count;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a positive integer or \"auto\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Count, E> {
                if v >= 1 && v <= i64::from(u32::MAX) {
                    Ok(Count::Fixed(v as u32))
                } else {
                    Err(E::custom(format!(
                        "invalid value {v}, expected a positive integer or \"auto\""
                    )))
                }
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Count, E> {
                self.visit_i64(i64::try_from(v).unwrap_or(-1))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Count, E> {
                if v == "auto" {
                    Ok(Count::Auto)
                } else {
                    Err(E::custom(format!(
                        "invalid value \"{v}\", expected a positive integer or \"auto\""
                    )))
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// `[pcp]`: per-CPU page lists (`struct per_cpu_pages`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PcpPolicy {
    #[serde(default = "PcpPolicy::default_lists")]
    pub lists: PcpLists,
    /// Pages moved between the zone and a pcp per zone->lock hold. `auto` is `zone_batchsize`:
    /// a quarter of managed/1024 capped at 1 MiB of pages, rounded to 2^n - 1 (63 for zones of
    /// 1 GiB or more).
    #[serde(default = "PcpPolicy::default_count")]
    pub batch: Count,
    /// Pages a pcp may hold before it drains a batch back. `auto` is `zone_highsize`: the
    /// zone's low watermark shared among the CPUs, at least 4 x batch.
    #[serde(default = "PcpPolicy::default_count")]
    pub high: Count,
    #[serde(default = "PcpPolicy::default_tune")]
    pub tune: PcpTune,
}

impl PcpPolicy {
    fn default_lists() -> PcpLists {
        PcpLists::HighOrder
    }
    fn default_count() -> Count {
        Count::Auto
    }
    fn default_tune() -> PcpTune {
        PcpTune::Adaptive
    }
}

impl Default for PcpPolicy {
    fn default() -> Self {
        PcpPolicy {
            lists: Self::default_lists(),
            batch: Count::Auto,
            high: Count::Auto,
            tune: Self::default_tune(),
        }
    }
}

/// Per-VMA locking (`CONFIG_PER_VMA_LOCK`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VmaLock {
    /// Every fault takes mmap_lock for read (before 6.4).
    None,
    /// 6.4: a per-VMA rwsem plus `vm_lock_seq` (Suren Baghdasaryan).
    Rwsem,
    /// 6.15: a per-VMA reference count plus `vm_lock_seq`, no separate lock object.
    Refcount,
}

/// Page-table locking.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Ptl {
    /// One `mm->page_table_lock` for every PTE update of the address space (before 2.6.15).
    Mm,
    /// One lock per PTE-table page (Hugh Dickins, 2.6.15: split page-table locks).
    Split,
    /// Christoph Lameter's page-fault scalability patches (2004-2005, last posted against
    /// 2.6.13-rc6-mm1, never merged): an anonymous fault installs its PTE with a
    /// compare-and-exchange on the empty entry (`ptep_cmpxchg`) and takes no lock; the loser
    /// of a race frees its page. Missing page-table levels are populated the same way. Every
    /// other PTE update still takes `mm->page_table_lock`.
    Atomic,
}

/// How RSS counters are kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RssCounter {
    /// One atomic per counter per mm, updated by every fault.
    Atomic,
    /// Per-thread deltas folded into the mm every 64 events (`SPLIT_RSS_COUNTING`, before 6.2).
    PerThread,
    /// Per-CPU counters with batch max(32, 2 x CPUs) (`percpu_counter`, 6.2+).
    PerCpu,
}

/// TLB shootdown on unmap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TlbShootdown {
    /// No cross-CPU flush is modelled.
    None,
    /// The unmapping task waits until every other task running in the mm has acknowledged,
    /// as `flush_tlb_mm_range` waits for its IPIs.
    Ipi,
}

/// `[mm]`: address spaces, page tables and the fault path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MmPolicy {
    #[serde(default = "MmPolicy::default_vma_lock")]
    pub vma_lock: VmaLock,
    #[serde(default = "MmPolicy::default_ptl")]
    pub ptl: Ptl,
    #[serde(default = "MmPolicy::default_rss")]
    pub rss: RssCounter,
    /// Pages mapped around a file read fault (`fault_around_bytes` / 4 KiB); 0 turns it off.
    #[serde(default = "MmPolicy::default_fault_around")]
    pub fault_around: u32,
    #[serde(default = "MmPolicy::default_tlb")]
    pub tlb_shootdown: TlbShootdown,
    /// Anticipatory prefaulting (Lameter 2004-2005): pages mapped after the faulting one by
    /// an anonymous write fault, within the VMA and its PTE table; 0 turns it off. At most
    /// [`MmPolicy::MAX_ANON_PREFAULT`].
    #[serde(default)]
    pub anon_prefault: u32,
}

impl MmPolicy {
    fn default_vma_lock() -> VmaLock {
        VmaLock::Refcount
    }
    fn default_ptl() -> Ptl {
        Ptl::Split
    }
    fn default_rss() -> RssCounter {
        RssCounter::PerCpu
    }
    fn default_fault_around() -> u32 {
        16
    }
    fn default_tlb() -> TlbShootdown {
        TlbShootdown::Ipi
    }
    /// The most pages `anon_prefault` may add to a fault: the rest of one PTE table (the
    /// faulting page is one of its 512 entries), as a fault maps under one table's lock.
    pub const MAX_ANON_PREFAULT: u32 = 511;
}

impl Default for MmPolicy {
    fn default() -> Self {
        MmPolicy {
            vma_lock: Self::default_vma_lock(),
            ptl: Self::default_ptl(),
            rss: Self::default_rss(),
            fault_around: Self::default_fault_around(),
            tlb_shootdown: Self::default_tlb(),
            anon_prefault: 0,
        }
    }
}

/// Which lruvecs share one `lru_lock`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LruLockScope {
    /// One lock for the whole machine (2.6 `zone->lru_lock` on a single-zone machine).
    Global,
    /// One per node (`pgdat->lru_lock`, 4.8 to 5.10).
    Node,
    /// One per (memcg, node) lruvec (`lruvec->lru_lock`, 5.11+, Alex Shi).
    MemcgNode,
}

/// How new pages reach the LRU lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LruAdd {
    /// One lru_lock hold per page.
    PerPage,
    /// Per-CPU `folio_batch` of `batch` pages, flushed with one lock hold per run of pages of
    /// the same lruvec (`lru_add_drain`, `folio_batch_move_lru`).
    Batch,
    /// Daniel Jordan 2018: sort the batch into per-lruvec local lists outside the lock, splice
    /// each list under one lock hold, then set the LRU flag with release ordering (setting it
    /// before the splice would let an isolator unlink a page still on the private list).
    Splice,
}

/// How MGLRU moves folios between generations when it sorts them: aging's `inc_min_seq`
/// (what is left in the oldest generation moves up one) and eviction's `sort_folio` (folios
/// the page-table walk found young, or whose tier is protected, move to a newer generation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MglruMove {
    /// One `list_move` and one size update per folio (6.1 to 6.7). Walking the oldest list
    /// from its tail and moving each folio to the head of its new list reverses their order.
    #[default]
    PerFolio,
    /// Kairui Song 2023 ("move pages in bulk when aging"): chain runs of folios bound for the
    /// same generation and splice each run once, with one size update; the run keeps its order.
    Bulk,
}

/// How freed pages leave the LRU lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LruRelease {
    /// `release_pages`: take lru_lock once per run of pages of the same lruvec.
    Locked,
    /// Daniel Jordan 2018 (`smp_list_del`): removals proceed concurrently under a shared hold
    /// of lru_lock, each locking only its neighbours, so release no longer serialises on one
    /// lock.
    Concurrent,
}

/// How a memory cgroup's page counter is charged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MemcgCharge {
    /// One atomic add on the group's counter per charged page: every fault of the group
    /// writes one shared line (memcg as it was before the per-CPU stock of 2.6.33).
    Atomic,
    /// The per-CPU charge stock (`memcg_stock`, 2.6.33+): a CPU charges the counter a batch at
    /// a time and serves single pages from what it holds, so the shared line is written once
    /// per `charge_batch` faults.
    #[default]
    Stock,
}

/// `[memcg]`: memory cgroup accounting.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemcgPolicy {
    #[serde(default)]
    pub charge: MemcgCharge,
    /// Pages a stock charges at once and holds at most (`MEMCG_CHARGE_BATCH`: 32 from 2.6.33,
    /// 64 since 6.1).
    #[serde(default = "MemcgPolicy::default_batch")]
    pub charge_batch: u32,
}

impl MemcgPolicy {
    /// `MEMCG_CHARGE_BATCH` since 6.1 (Shakeel Butt, "memcg: increase MEMCG_CHARGE_BATCH to 64").
    fn default_batch() -> u32 {
        64
    }
    /// The largest stock accepted: a stock is a CPU's small reserve, and the kernel never
    /// raised the batch past 64; 512 (one PTE table's worth) leaves room to experiment while
    /// keeping a group's limit meaningful at a few thousand pages.
    pub const MAX_CHARGE_BATCH: u32 = 512;
}

impl Default for MemcgPolicy {
    fn default() -> Self {
        MemcgPolicy {
            charge: MemcgCharge::default(),
            charge_batch: Self::default_batch(),
        }
    }
}

/// `[lru]`: the LRU lists' locking and batching.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LruPolicy {
    #[serde(default = "LruPolicy::default_scope")]
    pub lock_scope: LruLockScope,
    #[serde(default = "LruPolicy::default_add")]
    pub add: LruAdd,
    /// Pages per per-CPU add batch (`PAGEVEC_SIZE`: 16 in the 2.6.13 era, 14 later and until 5.17;
    /// `FOLIO_BATCH` 15, or 31).
    #[serde(default = "LruPolicy::default_batch")]
    pub batch: u32,
    #[serde(default = "LruPolicy::default_release")]
    pub release: LruRelease,
    /// The multi-generational LRU (`CONFIG_LRU_GEN`, 6.1+) instead of the active and inactive
    /// lists.
    #[serde(default)]
    pub mglru: bool,
    /// How MGLRU moves folios between generations.
    #[serde(default)]
    pub mglru_move: MglruMove,
}

impl LruPolicy {
    fn default_scope() -> LruLockScope {
        LruLockScope::MemcgNode
    }
    fn default_add() -> LruAdd {
        LruAdd::Batch
    }
    fn default_batch() -> u32 {
        15
    }
    fn default_release() -> LruRelease {
        LruRelease::Locked
    }
}

impl Default for LruPolicy {
    fn default() -> Self {
        LruPolicy {
            lock_scope: Self::default_scope(),
            add: Self::default_add(),
            batch: Self::default_batch(),
            release: Self::default_release(),
            mglru: false,
            mglru_move: MglruMove::PerFolio,
        }
    }
}

/// A profile that could not be read; the message is one line naming the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PolicyError(pub String);

impl Policy {
    /// Parse a profile from TOML text and validate it.
    pub fn from_toml_str(text: &str) -> Result<Policy, PolicyError> {
        let policy: Policy = toml::from_str(text).map_err(|e| {
            let line = e
                .span()
                .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
            let msg = e.message().replace('\n', " ");
            PolicyError(match line {
                Some(l) => format!("line {l}: {msg}"),
                None => msg,
            })
        })?;
        policy.validate()?;
        Ok(policy)
    }

    /// The profile as TOML, every key written out (what the results store keeps as run).
    pub fn to_toml_string(&self) -> String {
        toml::to_string(self).expect("a Policy always serialises")
    }

    /// Reject settings that contradict each other.
    pub fn validate(&self) -> Result<(), PolicyError> {
        let p = &self.pcp;
        if let (Count::Fixed(b), Count::Fixed(h)) = (p.batch, p.high)
            && b > h
        {
            return Err(PolicyError(format!(
                "pcp.batch ({b}) is larger than pcp.high ({h}): a pcp could never hold one batch"
            )));
        }
        if p.lists == PcpLists::None && p.tune == PcpTune::Adaptive {
            return Err(PolicyError(
                "pcp.tune = \"adaptive\" needs per-CPU lists, but pcp.lists = \"none\"".into(),
            ));
        }
        if self.lru.batch == 0 || self.lru.batch > 64 {
            return Err(PolicyError(format!(
                "lru.batch ({}) must be between 1 and 64 pages",
                self.lru.batch
            )));
        }
        if self.lru.add == LruAdd::PerPage && self.lru.batch != LruPolicy::default_batch() {
            return Err(PolicyError(
                "lru.batch has no effect with lru.add = \"per-page\"; remove it or choose \"batch\" or \"splice\"".into(),
            ));
        }
        if self.lru.mglru && self.lru.add == LruAdd::Splice {
            return Err(PolicyError(
                "lru.mglru needs lru.add = \"batch\" or \"per-page\": the 2018 splice was never combined with MGLRU".into(),
            ));
        }
        if !self.lru.mglru && self.lru.mglru_move != MglruMove::PerFolio {
            return Err(PolicyError(
                "lru.mglru_move has no effect without lru.mglru = true".into(),
            ));
        }
        if self.mm.fault_around > 512 {
            return Err(PolicyError(format!(
                "mm.fault_around ({}) exceeds one page table (512 pages)",
                self.mm.fault_around
            )));
        }
        if self.mm.anon_prefault > MmPolicy::MAX_ANON_PREFAULT {
            return Err(PolicyError(format!(
                "mm.anon_prefault ({}) reaches past one page table: at most {} pages after the faulting one",
                self.mm.anon_prefault,
                MmPolicy::MAX_ANON_PREFAULT
            )));
        }
        let m = &self.memcg;
        if m.charge_batch == 0 || m.charge_batch > MemcgPolicy::MAX_CHARGE_BATCH {
            return Err(PolicyError(format!(
                "memcg.charge_batch = {} is out of range: 1..={} pages",
                m.charge_batch,
                MemcgPolicy::MAX_CHARGE_BATCH
            )));
        }
        if m.charge == MemcgCharge::Atomic && m.charge_batch != MemcgPolicy::default_batch() {
            return Err(PolicyError(
                "memcg.charge_batch has no effect with memcg.charge = \"atomic\"; remove it or choose \"stock\"".into(),
            ));
        }
        if self.alloc.prezero && self.alloc.prezero_pool == 0 {
            return Err(PolicyError(
                "alloc.prezero_pool must be at least 1 page when alloc.prezero = true".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_profile_is_the_modern_default() {
        let p = Policy::from_toml_str("").unwrap();
        assert_eq!(p, Policy::default());
        assert_eq!(p.pcp.lists, PcpLists::HighOrder);
        assert_eq!(p.locks.spinlock, LockKind::Queued);
    }

    #[test]
    fn full_profile_round_trips() {
        let text = r#"
            name = "linux-4.15"
            [locks]
            spinlock = "ticket"
            [pcp]
            lists = "order0"
            batch = 31
            high = 186
            tune = "fixed"
        "#;
        let p = Policy::from_toml_str(text).unwrap();
        assert_eq!(p.pcp.batch, Count::Fixed(31));
        assert_eq!(p.pcp.high, Count::Fixed(186));
        assert_eq!(p.locks.spinlock, LockKind::Ticket);
        let again = Policy::from_toml_str(&p.to_toml_string()).unwrap();
        assert_eq!(p, again);
    }

    #[test]
    fn unknown_key_is_named() {
        let e = Policy::from_toml_str("[pcp]\nbtach = 3\n").unwrap_err();
        assert!(e.0.contains("btach") && e.0.contains("line 2"), "{e}");
        assert!(!e.0.contains('\n'));
    }

    #[test]
    fn unknown_value_lists_the_allowed_ones() {
        let e = Policy::from_toml_str("[pcp]\nlists = \"order1\"\n").unwrap_err();
        assert!(e.0.contains("order1") && e.0.contains("high-order"), "{e}");
        let e = Policy::from_toml_str("[locks]\nspinlock = \"mcs\"\n").unwrap_err();
        assert!(e.0.contains("ticket") && e.0.contains("queued"), "{e}");
        let e = Policy::from_toml_str("[pcp]\nbatch = 0\n").unwrap_err();
        assert!(e.0.contains("positive integer"), "{e}");
        let e = Policy::from_toml_str("[pcp]\nhigh = \"lots\"\n").unwrap_err();
        assert!(e.0.contains("auto"), "{e}");
    }

    #[test]
    fn inconsistent_batch_and_high_rejected() {
        let e = Policy::from_toml_str("[pcp]\nbatch = 400\nhigh = 186\n").unwrap_err();
        assert!(
            e.0.contains("pcp.batch (400)") && e.0.contains("pcp.high (186)"),
            "{e}"
        );
        let e =
            Policy::from_toml_str("[pcp]\nlists = \"none\"\ntune = \"adaptive\"\n").unwrap_err();
        assert!(e.0.contains("pcp.tune"), "{e}");
    }

    #[test]
    fn atomic_ptl_and_anon_prefault_are_checked() {
        let p = Policy::from_toml_str("[mm]\nptl = \"atomic\"\nanon_prefault = 511\n").unwrap();
        assert_eq!((p.mm.ptl, p.mm.anon_prefault), (Ptl::Atomic, 511));
        assert_eq!(Policy::from_toml_str("").unwrap().mm.anon_prefault, 0);
        let e = Policy::from_toml_str("[mm]\nptl = \"lockless\"\n").unwrap_err();
        assert!(
            e.0.contains("lockless")
                && e.0.contains("mm")
                && e.0.contains("split")
                && e.0.contains("atomic")
                && e.0.contains("line 2"),
            "{e}"
        );
        for bad in [512, 4096] {
            let e = Policy::from_toml_str(&format!("[mm]\nanon_prefault = {bad}\n")).unwrap_err();
            assert!(
                e.0.contains("mm.anon_prefault") && e.0.contains("511") && !e.0.contains('\n'),
                "{e}"
            );
        }
        let e = Policy::from_toml_str("[mm]\nanon_prefault = -1\n").unwrap_err();
        assert!(
            e.0.contains("anon_prefault") || e.0.contains("line 2"),
            "{e}"
        );
    }

    #[test]
    fn memcg_charge_keys_are_checked() {
        let p = Policy::from_toml_str("[memcg]\ncharge = \"stock\"\ncharge_batch = 32\n").unwrap();
        assert_eq!(
            (p.memcg.charge, p.memcg.charge_batch),
            (MemcgCharge::Stock, 32)
        );
        let e = Policy::from_toml_str("[memcg]\ncharge = \"percpu\"\n").unwrap_err();
        assert!(
            e.0.contains("percpu") && e.0.contains("atomic") && e.0.contains("stock"),
            "{e}"
        );
        for bad in ["0", "513", "4000000000"] {
            let e = Policy::from_toml_str(&format!("[memcg]\ncharge_batch = {bad}\n")).unwrap_err();
            assert!(
                e.0.contains("memcg.charge_batch") && e.0.contains("1..=512"),
                "{e}"
            );
        }
        let e =
            Policy::from_toml_str("[memcg]\ncharge = \"atomic\"\ncharge_batch = 32\n").unwrap_err();
        assert!(e.0.contains("no effect"), "{e}");
        assert!(!e.0.contains('\n'));
    }
}
