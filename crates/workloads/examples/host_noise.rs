//! The host's own run-to-run floor for a row rated in thread CPU time, as netpipe's lock-step
//! rows are: three fixed loops that do the same work in every window, so that any spread in
//! their rates is the host's, not pagelab's.
//!
//! - `chain`: a dependent integer multiply chain (the core's clock and nothing else);
//! - `clear-64K`: 4 KiB clears at pseudo-random pages of a 64 KiB buffer, each followed by a
//!   read of a pseudo-random byte of the buffer that the next step depends on (L1/L2, as an
//!   engine's hot per-CPU lists and slab pages are);
//! - `clear-64M`: the same over 64 MiB (the last-level cache and memory, as the engine's arena).
//!
//! The loops run in turns, one window of `WINDOW_MS` of thread CPU time each (800 ms, netpipe's
//! window, by default), `WINDOWS` windows per loop, so that a slow stretch of the host falls on
//! every loop alike. Per loop it prints the rate's coefficient of variation (sample stddev over
//! mean, mmtests' CoeffVar) and each window's rate over the loop's mean; then the correlation of
//! the loops' rates window by window (windows of different loops are a turn apart, so this is
//! a lagged correlation, and with ten windows a rough one): near 1 would suggest one slow cause
//! (the clock) moving them all.
//!
//! ```sh
//! cargo run --release -p pagelab-workloads --example host_noise -- [WINDOWS] [WINDOW_MS]
//! ```
use pagelab_workloads::pft::thread_cpu_ns;

const PAGE: usize = 4096;

/// One fixed loop: `run` does a unit of work and returns a value that keeps it from being
/// optimised away.
struct Loop {
    name: &'static str,
    buf: Vec<u8>,
    state: u64,
}

impl Loop {
    fn new(name: &'static str, bytes: usize) -> Loop {
        // Touched once so that no window pays the host's first-touch faults.
        Loop {
            name,
            buf: vec![1u8; bytes],
            state: 0x9e37_79b9_7f4a_7c15,
        }
    }

    /// Units of work per CPU-second over one window of `window_ns` of thread CPU time.
    fn rate(&mut self, window_ns: u64) -> f64 {
        let start = thread_cpu_ns();
        let mut units = 0u64;
        let mut now = start;
        while now - start < window_ns {
            for _ in 0..64 {
                self.unit();
                units += 1;
            }
            now = thread_cpu_ns();
        }
        units as f64 / ((now - start) as f64 * 1e-9)
    }

    fn unit(&mut self) {
        // An LCG step: each unit depends on the last, so none can be skipped or reordered.
        self.state = self
            .state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        if self.buf.is_empty() {
            for _ in 0..256 {
                self.state = self.state.wrapping_mul(6_364_136_223_846_793_005) | 1;
            }
        } else {
            let pages = self.buf.len() / PAGE;
            let off = (self.state >> 33) as usize % pages * PAGE;
            self.buf[off..off + PAGE].fill(self.state as u8);
            self.state ^= u64::from(self.buf[(self.state >> 17) as usize % self.buf.len()]);
        }
        std::hint::black_box(self.state);
    }
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

fn coeff_var(v: &[f64]) -> f64 {
    let m = mean(v);
    let var = v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() - 1) as f64;
    100.0 * var.sqrt() / m
}

fn correlation(a: &[f64], b: &[f64]) -> f64 {
    let (ma, mb) = (mean(a), mean(b));
    let cov: f64 = a.iter().zip(b).map(|(x, y)| (x - ma) * (y - mb)).sum();
    let va: f64 = a.iter().map(|x| (x - ma).powi(2)).sum();
    let vb: f64 = b.iter().map(|y| (y - mb).powi(2)).sum();
    cov / (va * vb).sqrt()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |i: usize, default: u64| -> u64 {
        args.get(i).map_or(default, |a| {
            a.parse().unwrap_or_else(|_| {
                eprintln!("host_noise: {a:?} is not a whole number (usage: host_noise [WINDOWS] [WINDOW_MS])");
                std::process::exit(2)
            })
        })
    };
    let windows = number(0, 10) as usize;
    let window_ms = number(1, 800);
    if windows < 2 || window_ms == 0 {
        eprintln!("host_noise: at least 2 windows of at least 1 ms");
        std::process::exit(2);
    }
    let mut loops = [
        Loop::new("chain", 0),
        Loop::new("clear-64K", 64 << 10),
        Loop::new("clear-64M", 64 << 20),
    ];
    let mut rates = vec![Vec::with_capacity(windows); loops.len()];
    for w in 0..windows {
        for (l, r) in loops.iter_mut().zip(rates.iter_mut()) {
            r.push(l.rate(window_ms * 1_000_000));
        }
        eprint!("\rhost_noise: window {}/{windows}", w + 1);
    }
    eprintln!();
    println!("{windows} windows of {window_ms} ms of thread CPU time per loop, the loops in turns");
    for (l, r) in loops.iter().zip(&rates) {
        let m = mean(r);
        let each: Vec<String> = r.iter().map(|x| format!("{:.3}", x / m)).collect();
        println!(
            "{:<10} CoeffVar {:5.2}%   window / mean: {}",
            l.name,
            coeff_var(r),
            each.join(" ")
        );
    }
    for i in 0..loops.len() {
        for j in i + 1..loops.len() {
            println!(
                "correlation {} / {}: {:+.2}",
                loops[i].name,
                loops[j].name,
                correlation(&rates[i], &rates[j])
            );
        }
    }
}
