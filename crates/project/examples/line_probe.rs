//! What a contended lock word costs this host's cores, pattern by pattern: the evidence for the
//! replay's rule that a trylock's read of its lock word and the exchange right after it are one
//! request for the line, not a shared fetch followed by an upgrade (docs/model.md, section 3,
//! "A read right before an exchange").
//!
//! Two threads, pinned to the first two allowed CPUs, each run one pattern on one shared cache
//! line and then spin for `W` ns on their own; the same loop on one thread alone has every
//! access hit. With `W` long against a transfer, each pattern of the two-thread run finds the
//! line in the other core's cache, so the time per iteration beyond the one-thread run is what
//! the pattern's misses cost:
//!
//! - `add`: one `lock xadd`, one transfer: the baseline the others are set against;
//! - `exchange`: a `lock cmpxchg` with the value the thread last saw as the expected one
//!   (the speculative exchange of `__down_read_trylock` from 5.3 to 5.15). The other thread
//!   moved the word meanwhile, so it fails once and is retried with the value it found, on a
//!   line already here: one transfer and one more locked instruction;
//! - `read+exchange`: a load of the word, then the exchange with the value read
//!   (`__down_read_trylock` since 5.16);
//! - `exchange..add`: the exchange, half of `W`, then a `lock xadd` (a read hold and its
//!   release: two transfers);
//! - `read+exchange..add`: the same with the read first.
//!
//! With `W` = 0 both threads hammer the line, and the time per iteration is what the line
//! sustains. Rounds alternate one thread and two, pattern after pattern, and the medians over
//! the rounds are printed (this host is shared and noisy).
//!
//! `cargo run --release -p pagelab-project --example line_probe [ROUNDS]`

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use pagelab_bench::stats::median;
use pagelab_workloads::pin::pin_to_core;

const WINDOW: Duration = Duration::from_millis(150);

/// The shared word on a line of its own.
#[repr(align(128))]
struct Word(AtomicU64);

#[derive(Clone, Copy, PartialEq)]
enum Pattern {
    Add,
    Exchange,
    ReadExchange,
    ExchangeAdd,
    ReadExchangeAdd,
}

impl Pattern {
    const ALL: [Pattern; 5] = [
        Pattern::Add,
        Pattern::Exchange,
        Pattern::ReadExchange,
        Pattern::ExchangeAdd,
        Pattern::ReadExchangeAdd,
    ];

    fn name(self) -> &'static str {
        match self {
            Pattern::Add => "add",
            Pattern::Exchange => "exchange",
            Pattern::ReadExchange => "read+exchange",
            Pattern::ExchangeAdd => "exchange..add",
            Pattern::ReadExchangeAdd => "read+exchange..add",
        }
    }
}

/// Spins until `ns` have passed since `from`.
#[inline]
fn spin_until(from: Instant, ns: u64) {
    while (from.elapsed().as_nanos() as u64) < ns {
        std::hint::spin_loop();
    }
}

/// The exchange: a compare-and-exchange that adds one, with `cur` as the expected value, retried
/// with the value it finds (the kernel's `try_cmpxchg` loop).
#[inline]
fn exchange(w: &AtomicU64, mut cur: u64) {
    while let Err(v) = w.compare_exchange_weak(cur, cur + 1, Ordering::Acquire, Ordering::Relaxed) {
        cur = v;
    }
}

/// One iteration of `p` with `w_ns` of the thread's own spinning.
#[inline]
fn iteration(p: Pattern, w: &AtomicU64, w_ns: u64, guess: &mut u64) {
    match p {
        Pattern::Add => {
            w.fetch_add(1, Ordering::AcqRel);
        }
        Pattern::Exchange | Pattern::ExchangeAdd => {
            // The expected value is the thread's last guess: right when the other thread did
            // not move the word since, as an uncontended speculative exchange would be.
            exchange(w, *guess);
        }
        Pattern::ReadExchange | Pattern::ReadExchangeAdd => {
            exchange(w, w.load(Ordering::Relaxed));
        }
    }
    *guess = w.load(Ordering::Relaxed);
    if w_ns == 0 {
        if matches!(p, Pattern::ExchangeAdd | Pattern::ReadExchangeAdd) {
            w.fetch_add(1, Ordering::Release);
            *guess += 1;
        }
        return;
    }
    // The spinning starts after the access, so that what the access waited for adds to the
    // iteration instead of being absorbed in the spin.
    match p {
        Pattern::ExchangeAdd | Pattern::ReadExchangeAdd => {
            spin_until(Instant::now(), w_ns / 2);
            w.fetch_add(1, Ordering::Release);
            *guess += 1;
            spin_until(Instant::now(), w_ns / 2);
        }
        _ => spin_until(Instant::now(), w_ns),
    }
}

/// Nanoseconds per iteration of `p` per thread, `threads` (1 or 2) pinned to the first two
/// allowed CPUs.
fn run(p: Pattern, threads: usize, w_ns: u64) -> Result<f64, String> {
    let word = Arc::new(Word(AtomicU64::new(0)));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let (word, stop, start) = (word.clone(), stop.clone(), start.clone());
            std::thread::spawn(move || {
                let pinned = pin_to_core(i);
                let mut guess = 0;
                start.wait();
                let t = Instant::now();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    iteration(p, &word.0, w_ns, &mut guess);
                    n += 1;
                }
                black_box(guess);
                pinned.then(|| t.elapsed().as_nanos() as f64 / n.max(1) as f64)
            })
        })
        .collect();
    start.wait();
    std::thread::sleep(WINDOW);
    stop.store(true, Ordering::Relaxed);
    let per: Option<Vec<f64>> = handles
        .into_iter()
        .map(|h| h.join().expect("probe thread"))
        .collect();
    let per = per.ok_or("line_probe: the host refused to pin a thread to its CPU")?;
    Ok(per.iter().sum::<f64>() / per.len() as f64)
}

fn main() -> Result<(), String> {
    let rounds: usize = match std::env::args().nth(1) {
        None => 5,
        Some(s) => match s.parse() {
            Ok(n @ 1..=1000) => n,
            _ => {
                return Err(format!(
                    "ROUNDS: `{s}` is not a whole number from 1 to 1000"
                ));
            }
        },
    };
    let allowed = pagelab_workloads::pin::allowed_cpus();
    let [a, b] = match allowed {
        [a, b, ..] => [*a, *b],
        _ => return Err("line_probe needs two CPUs it may run on".into()),
    };
    // Two hardware threads of one core share its caches: their "transfers" would be the
    // core's own (the kernel's topology says which CPUs are siblings).
    let siblings = std::fs::read_to_string(format!(
        "/sys/devices/system/cpu/cpu{a}/topology/thread_siblings_list"
    ))
    .map(|s| s.trim().to_string())
    .unwrap_or_else(|_| "unknown".into());
    println!(
        "CPUs {a} and {b} (CPU {a}'s hardware threads: {siblings}), {rounds} rounds of {} ms windows",
        WINDOW.as_millis()
    );
    for w_ns in [1000u64, 0] {
        println!();
        println!(
            "W = {w_ns} ns: ns per iteration, median over the rounds{}",
            if w_ns > 0 {
                "; extra = two threads - one"
            } else {
                " (both threads hammer the line)"
            }
        );
        let mut extra = Vec::new();
        for p in Pattern::ALL {
            let (mut one, mut two) = (Vec::new(), Vec::new());
            for _ in 0..rounds {
                one.push(run(p, 1, w_ns)?);
                two.push(run(p, 2, w_ns)?);
            }
            let (one, two) = (median(&one), median(&two));
            println!(
                "  {:<20} one thread {one:8.1}  two {two:8.1}  extra {:7.1}",
                p.name(),
                two - one
            );
            extra.push(two - one);
        }
        if w_ns > 0 && extra[0] > 0.0 {
            let ratios: Vec<String> = Pattern::ALL[1..]
                .iter()
                .zip(&extra[1..])
                .map(|(p, e)| format!("{} {:.2}", p.name(), e / extra[0]))
                .collect();
            println!("  extra against add's: {}", ratios.join(", "));
        }
    }
    Ok(())
}
