//! What counting lock statistics costs per acquisition, on this host.
//!
//! One thread takes six locks of five classes (an rwsem read and five queued spinlocks, about
//! what one anonymous fault takes), with `THRASH` bytes written between rounds to push the
//! counters out of L1 the way a fault's page zeroing does. Counting on and off take turns run
//! by run, and the minimum and the median of the paired differences are printed, with the
//! on/off ratios side by side: on a loaded host the minimum is the least disturbed figure.
//!
//! It also times `Instant::now()`, to show what counting hold times as the kernel's lock_stat
//! does (a clock read at every acquisition and every release) would add per acquisition.
//!
//! usage: `cargo run --release -p pagelab-sync --example lockstat_cost [THRASH]` (default 4096)

use pagelab_sync::{LockClass, RwSem, Scope, SpinLock, stats};
use std::hint::black_box;
use std::time::Instant;

static A: LockClass = LockClass::new("cost a", Scope::Cpu);
static B: LockClass = LockClass::new("cost b", Scope::Node);
static C: LockClass = LockClass::new("cost c", Scope::Mm);
static D: LockClass = LockClass::sleeping("cost d", Scope::Mm);
static E: LockClass = LockClass::new("cost e", Scope::Cpu);

const POOL: usize = 4 << 20;
const ITERS: usize = 20_000;
const RUNS: usize = 201;

fn main() {
    let thrash: usize = match std::env::args().nth(1) {
        None => 4096,
        Some(s) => s.parse().unwrap_or_else(|_| {
            eprintln!("THRASH must be a byte count, not {s:?}");
            std::process::exit(2)
        }),
    }
    .min(POOL / 2);
    let d = stats::Domain::new();
    d.enter();
    let a = SpinLock::new_queued(0u64).with_class(&A);
    let b = SpinLock::new_queued(0u64).with_class(&B);
    let c = SpinLock::new_queued(0u64).with_class(&C);
    let sem = RwSem::new(0u64).with_class(&D);
    let e = SpinLock::new_queued(0u64).with_class(&E);
    let mut pool = vec![0u8; POOL];
    let mut off = 0;
    let mut pass = |on: bool| {
        stats::set_enabled(on);
        let t = Instant::now();
        for _ in 0..ITERS {
            if thrash > 0 {
                pool[off..off + thrash].fill(1);
                black_box(&pool[off]);
                off = (off + thrash) % (POOL - thrash);
            }
            let _r = sem.read();
            *a.lock() += 1;
            *b.lock() += 1;
            *c.lock() += 1;
            *e.lock() += 1;
            *a.lock() += 1;
        }
        t.elapsed().as_nanos() as f64 / ITERS as f64
    };
    pass(true);
    let (mut on, mut off_ns) = (Vec::new(), Vec::new());
    for r in 0..RUNS {
        if r % 2 == 0 {
            on.push(pass(true));
            off_ns.push(pass(false));
        } else {
            off_ns.push(pass(false));
            on.push(pass(true));
        }
    }
    stats::set_enabled(false);
    let mut delta: Vec<f64> = on.iter().zip(&off_ns).map(|(a, b)| a - b).collect();
    let mut ratio: Vec<f64> = on.iter().zip(&off_ns).map(|(a, b)| a / b).collect();
    for v in [&mut on, &mut off_ns, &mut delta, &mut ratio] {
        v.sort_by(f64::total_cmp);
    }
    let mid = RUNS / 2;
    println!(
        "thrash {thrash} B: on min {:.1} median {:.1} ns/round, off min {:.1} median {:.1}; \
         on/off {:.4} (ratio of minima), {:.4} (median paired ratio); counting costs {:.2} ns \
         (difference of minima), {:.2} ns (median paired difference) per 6 acquisitions",
        on[0],
        on[mid],
        off_ns[0],
        off_ns[mid],
        on[0] / off_ns[0],
        ratio[mid],
        on[0] - off_ns[0],
        delta[mid]
    );
    let clock = clock_read_ns();
    println!(
        "Instant::now() costs {clock:.1} ns: hold times (a clock read at each acquisition and \
         release) would add {:.1} ns per acquisition, {:.0}% of an uncounted round",
        2.0 * clock,
        100.0 * 12.0 * clock / off_ns[0]
    );
}

/// The least time one `Instant::now()` took, over short runs (a loaded host preempts long ones).
fn clock_read_ns() -> f64 {
    const READS: u32 = 10_000;
    (0..201)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..READS {
                black_box(Instant::now());
            }
            t.elapsed().as_nanos() as f64 / f64::from(READS)
        })
        .fold(f64::INFINITY, f64::min)
}
