//! Property test of profile validation: random values for every numeric key of a profile
//! (zero, one, the edges of u32 and i64, negatives, floats, strings), with random choices of the
//! switches they interact with, fed to the TOML parser and validation. Parsing must never
//! panic; an accepted profile must hold only values inside the documented bounds, and booting
//! a small engine with it and running a handful of faults must neither panic nor allocate
//! without bound (the heap is counted by the allocator below).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use pagelab_mm::policy::{
    Count, FAULT_AROUND, LRU_BATCH, MEMCG_CHARGE_BATCH, PCP_BATCH, PCP_HIGH, PREZERO_POOL, Policy,
};
use pagelab_mm::{CpuId, Kernel, MapKind, MemConfig};
use proptest::prelude::*;

/// Heap bytes in use, and the most in use since the last [`reset_peak`].
static IN_USE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

/// The system allocator, counting: a profile value that sizes a buffer (a batch, a pool) would
/// show here as a peak far above what a small engine needs.
struct Counting;

// SAFETY: every call is forwarded unchanged to the system allocator, which upholds the
// GlobalAlloc contract; the counters are plain atomics and never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's layout obligations are passed on unchanged.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = IN_USE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn reset_peak() -> usize {
    let now = IN_USE.load(Ordering::Relaxed);
    PEAK.store(now, Ordering::Relaxed);
    now
}

/// The arena of the engines booted here: 8 MiB, 2048 frames.
const ARENA: u64 = 8 << 20;
/// Heap a boot and a few faults of that engine may take: its frame metadata is a fraction of a
/// MiB; 64 MiB leaves room for anything reasonable and nothing sized by a profile value.
const HEAP_LIMIT: usize = 64 << 20;

/// A TOML value for a numeric key: the edges that have broken parsers, and anything at all.
fn raw_value() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec![
            "0",
            "1",
            "2",
            "15",
            "16",
            "24",
            "31",
            "32",
            "63",
            "64",
            "186",
            "310",
            "512",
            "513",
            "1860",
            "4096",
            "100000",
            "67108863",
            "67108864",
            "2147483647",
            "2147483648",
            "4000000000",
            "4294967295",
            "4294967296",
            "9223372036854775807",
            "-1",
            "-9223372036854775808",
            "1.5",
            "31.0",
            "-0.0",
            "1e30",
            "nan",
            "inf",
            "-inf",
            "\"auto\"",
            "\"31\"",
            "true",
            "[31]",
        ])
        .prop_map(str::to_string),
        3 => (0u32..64).prop_map(|v| v.to_string()),
        2 => (0u32..5000).prop_map(|v| v.to_string()),
        1 => any::<i64>().prop_map(|v| v.to_string()),
        1 => any::<u32>().prop_map(|v| v.to_string()),
        1 => any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| format!("{f:?}")),
    ]
}

/// Each numeric key: absent (the default) half of the time, or one raw value.
fn maybe() -> impl Strategy<Value = Option<String>> {
    prop::option::weighted(0.5, raw_value())
}

#[derive(Clone, Debug)]
struct Case {
    batch: Option<String>,
    high: Option<String>,
    tune: &'static str,
    lists: &'static str,
    prezero: bool,
    prezero_pool: Option<String>,
    allocator: &'static str,
    fault_around: Option<String>,
    lru_add: &'static str,
    lru_batch: Option<String>,
    memcg_charge: &'static str,
    memcg_batch: Option<String>,
}

impl Case {
    fn toml(&self) -> String {
        let line = |k: &str, v: &Option<String>| {
            v.as_ref().map_or(String::new(), |v| format!("{k} = {v}\n"))
        };
        format!(
            "[alloc]\nallocator = \"{}\"\nprezero = {}\n{}[pcp]\nlists = \"{}\"\ntune = \"{}\"\n{}{}[mm]\n{}[lru]\nadd = \"{}\"\n{}[memcg]\ncharge = \"{}\"\n{}",
            self.allocator,
            self.prezero,
            line("prezero_pool", &self.prezero_pool),
            self.lists,
            self.tune,
            line("batch", &self.batch),
            line("high", &self.high),
            line("fault_around", &self.fault_around),
            self.lru_add,
            line("batch", &self.lru_batch),
            self.memcg_charge,
            line("charge_batch", &self.memcg_batch),
        )
    }
}

fn case() -> impl Strategy<Value = Case> {
    (
        (
            maybe(),
            maybe(),
            prop::sample::select(vec!["fixed", "adaptive"]),
        ),
        prop::sample::select(vec!["none", "order0", "high-order"]),
        (
            any::<bool>(),
            maybe(),
            prop::sample::select(vec!["buddy", "llfree", "lockfree"]),
            any::<bool>(),
        ),
        maybe(),
        (
            prop::sample::select(vec!["per-page", "batch", "splice"]),
            maybe(),
        ),
        (prop::sample::select(vec!["atomic", "stock"]), maybe()),
    )
        .prop_map(
            |(
                (batch, high, tune),
                lists,
                (prezero, prezero_pool, allocator, fit),
                fault_around,
                (lru_add, lru_batch),
                (memcg_charge, memcg_batch),
            )| {
                // Half the LLFree cases set what it needs, so that it boots often enough.
                let llfree = allocator == "llfree" && fit;
                Case {
                    batch,
                    high,
                    tune: if llfree { "fixed" } else { tune },
                    lists: if llfree { "none" } else { lists },
                    prezero: prezero && !llfree,
                    prezero_pool,
                    allocator,
                    fault_around,
                    lru_add,
                    lru_batch,
                    memcg_charge,
                    memcg_batch,
                }
            },
        )
}

fn within(v: u32, b: &pagelab_mm::policy::Bound) -> bool {
    (b.min..=b.max).contains(&u64::from(v))
}

/// Boot an engine of [`ARENA`] with `policy` and fault a few anonymous and file pages in.
fn boot_and_fault(policy: &Policy) -> Result<(), TestCaseError> {
    let k = match Kernel::new(&MemConfig::new(ARENA, 2), policy) {
        Ok(k) => k,
        Err(e) => {
            // Refused for this machine: one line naming a key.
            let msg = e.to_string();
            prop_assert!(!msg.contains('\n') && msg.contains(" = "), "{msg}");
            return Ok(());
        }
    };
    let file = k.create_file(32);
    for cpu in 0..2u16 {
        let mm = k.new_mm(CpuId(cpu)).unwrap();
        let t = k.new_task(mm, CpuId(cpu));
        let anon = t.mmap(16 * 4096, true, MapKind::Anon).unwrap();
        for page in 0..16 {
            t.store(anon + page * 4096, page + 1).unwrap();
        }
        for page in 0..16 {
            prop_assert_eq!(t.load(anon + page * 4096).unwrap(), page + 1);
        }
        let kind = MapKind::File {
            file: file.clone(),
            offset: 0,
            shared: false,
        };
        let mapped = t.mmap(32 * 4096, false, kind).unwrap();
        for page in (0..32).step_by(3) {
            t.load(mapped + page * 4096).unwrap();
        }
        t.munmap(anon, 16 * 4096).unwrap();
        t.munmap(mapped, 32 * 4096).unwrap();
    }
    Ok(())
}

/// An unknown allocator is refused in one line naming the value, its line and both allowed
/// ones; the LLFree allocator is refused with per-CPU lists or the prezero pool, which it
/// replaces or cannot feed.
#[test]
fn allocator_values_are_checked() {
    let e = Policy::from_toml_str("[alloc]\nallocator = \"lockfree\"\n")
        .unwrap_err()
        .0;
    assert!(
        e.contains("lockfree")
            && e.contains("`buddy`")
            && e.contains("`llfree`")
            && e.contains("line 2")
            && !e.contains('\n'),
        "{e}"
    );
    let e = Policy::from_toml_str("[alloc]\nallocator = \"llfree\"\n")
        .unwrap_err()
        .0;
    assert!(e.contains("pcp.lists = \"none\""), "{e}");
    let e = Policy::from_toml_str(
        "[alloc]\nallocator = \"llfree\"\nprezero = true\n[pcp]\nlists = \"none\"\ntune = \"fixed\"\n",
    )
    .unwrap_err()
    .0;
    assert!(e.contains("alloc.prezero") && e.contains("buddy"), "{e}");
    let p = Policy::from_toml_str(
        "[alloc]\nallocator = \"llfree\"\n[pcp]\nlists = \"none\"\ntune = \"fixed\"\n",
    )
    .unwrap();
    assert_eq!(p.alloc.allocator, pagelab_mm::policy::Allocator::Llfree);
    assert_eq!(Policy::from_toml_str(&p.to_toml_string()).unwrap(), p);
    // Every profile says which allocator it ran on; one stored before the switch existed (no
    // such key) reads back as the buddy allocator.
    assert!(
        Policy::default()
            .to_toml_string()
            .contains("allocator = \"buddy\"")
    );
    assert_eq!(
        Policy::from_toml_str("[alloc]\nprezero = false\n").unwrap(),
        Policy::default()
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn any_profile_value_is_refused_or_runs_bounded(c in case()) {
        let text = c.toml();
        let policy = match Policy::from_toml_str(&text) {
            Ok(p) => p,
            Err(e) => {
                prop_assert!(!e.0.contains('\n'), "{}", e.0);
                return Ok(());
            }
        };
        // An allocator nobody implements is never accepted.
        prop_assert!(c.allocator != "lockfree", "accepted allocator = \"lockfree\"");
        // Accepted: every stored value is inside its bound, and reads back the same.
        for (count, bound) in [(policy.pcp.batch, PCP_BATCH), (policy.pcp.high, PCP_HIGH)] {
            if let Count::Fixed(n) = count {
                prop_assert!(within(n, &bound), "{} = {n}", bound.key);
            }
        }
        prop_assert!(within(policy.alloc.prezero_pool, &PREZERO_POOL));
        prop_assert!(within(policy.mm.fault_around, &FAULT_AROUND));
        prop_assert!(within(policy.lru.batch, &LRU_BATCH));
        prop_assert!(within(policy.memcg.charge_batch, &MEMCG_CHARGE_BATCH));
        prop_assert_eq!(&Policy::from_toml_str(&policy.to_toml_string()).unwrap(), &policy);
        let base = reset_peak();
        boot_and_fault(&policy)?;
        let peak = PEAK.load(Ordering::Relaxed).saturating_sub(base);
        prop_assert!(peak < HEAP_LIMIT, "{peak} bytes of heap for {text}");
    }
}
