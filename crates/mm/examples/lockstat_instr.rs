//! The engine's anonymous fault path with lock statistics on or off, for counting what counting
//! costs in instructions (a figure a loaded host does not disturb, and this VM has no PMU):
//!
//! ```text
//! for s in on off; do valgrind --tool=cachegrind --cache-sim=yes \
//!     target/release/examples/lockstat_instr $s 32768; done
//! ```
//!
//! One task faults `PAGES` pages of one anonymous mapping (one word written per page), after an
//! untimed pass over another mapping so that page tables, per-CPU lists and slabs are warm.
//! The boot and the warm-up are the same both ways, and the switch is only moved around the
//! faulting, so the difference of the two runs' totals, divided by the faults, is what counting
//! adds to a fault. It also prints the acquisitions counted per fault, and the wall-clock
//! ns/fault of the timed pass (meaningful only outside valgrind).
//!
//! usage: `lockstat_instr on|off [PAGES] [PROFILE.toml]` (default 32768 pages, the 6.7 profile)

use std::time::Instant;

use pagelab_mm::{CpuId, Kernel, MapKind, MemConfig, Policy};

const PAGE: u64 = 4096;

fn main() {
    let mut args = std::env::args().skip(1);
    let on = match args.next().as_deref() {
        Some("on") => true,
        Some("off") => false,
        other => {
            eprintln!("lockstat_instr: the first argument must be `on` or `off`, not {other:?}");
            std::process::exit(2)
        }
    };
    let pages: u64 = match args.next() {
        None => 32768,
        Some(s) => s.parse().unwrap_or_else(|_| {
            eprintln!("lockstat_instr: PAGES must be a page count, not {s:?}");
            std::process::exit(2)
        }),
    };
    let profile = args.next().unwrap_or_else(|| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../profiles/linux-6.7.toml").to_string()
    });
    let text = std::fs::read_to_string(&profile).unwrap_or_else(|e| {
        eprintln!("lockstat_instr: cannot read {profile}: {e}");
        std::process::exit(1)
    });
    let policy = Policy::from_toml_str(&text).unwrap_or_else(|e| {
        eprintln!("lockstat_instr: {profile}: {e}");
        std::process::exit(1)
    });
    let k = Kernel::new(&MemConfig::new(3 * pages * PAGE + (64 << 20), 1), &policy).unwrap_or_else(
        |e| {
            eprintln!("lockstat_instr: boot: {e}");
            std::process::exit(1)
        },
    );
    let mm = k.new_mm(CpuId(0)).expect("an mm");
    let task = k.new_task(mm, CpuId(0));
    let fault_all = |on: bool| {
        let base = task.mmap(pages * PAGE, true, MapKind::Anon).expect("mmap");
        pagelab_sync::stats::set_enabled(on);
        let t = Instant::now();
        for p in 0..pages {
            task.store(base + p * PAGE, p).expect("store");
        }
        let ns = t.elapsed().as_nanos() as f64 / pages as f64;
        pagelab_sync::stats::set_enabled(false);
        task.munmap(base, pages * PAGE).expect("munmap");
        ns
    };
    fault_all(false);
    k.reset_stats();
    let ns = fault_all(on);
    let acquisitions: u64 = k
        .lock_stat_domain()
        .classes()
        .iter()
        .map(|(_, s)| s.total().acquisitions)
        .sum();
    println!(
        "lock statistics {}: {pages} faults, {:.2} lock acquisitions counted per fault, {ns:.0} ns/fault",
        if on { "on" } else { "off" },
        acquisitions as f64 / pages as f64
    );
}
