//! The host kernel's own page_fault1 loop, for a profiler: map an anonymous region, write one
//! byte a page, unmap it, in rounds, and print what the faults and the unmap took a page. Run
//! under a sampling profiler to see how much of that the host kernel spends inside its LRU lock:
//!
//! ```text
//! cargo build --release -p pagelab-project --example kernel_lru_probe
//! perf record -e cpu-clock -F 20000 -g -o P -- target/release/examples/kernel_lru_probe 30
//! perf report -i P --no-children --sort sym --stdio
//! ```
//!
//! The kernel takes the lruvec's lock with interrupts off (`folio_lruvec_relock_irqsave` in
//! `folio_batch_move_lru`, the adds, and in `folios_put_refs`, the releases), so a `cpu-clock`
//! sample that falls inside a hold is taken when the interrupts come back on: at
//! `_raw_spin_unlock_irqrestore`, under the caller that held the lock. Those samples' share of
//! the faults' (`exc_page_fault`) or the unmaps' (`__munmap`) samples, times the time a page
//! this prints, is the kernel's time a page inside the lock, to set beside the engine's
//! (`pagelab trace`'s "lru_lock holds timed apart"). docs/model.md, section 4, round 42, has a
//! run.
//!
//! `cargo run --release -p pagelab-project --example kernel_lru_probe -- [ROUNDS] [MIB]`
//! (30 rounds of 128 MiB by default)

use std::time::Instant;

use rustix::mm::{MapFlags, ProtFlags, mmap_anonymous, munmap};

fn arg(i: usize, name: &str, default: usize, max: usize) -> Result<usize, String> {
    match std::env::args().nth(i) {
        None => Ok(default),
        Some(s) => match s.parse::<usize>() {
            Ok(v) if (1..=max).contains(&v) => Ok(v),
            _ => Err(format!(
                "{name}: `{s}` is not a whole number from 1 to {max}"
            )),
        },
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rounds = arg(1, "ROUNDS", 30, 10_000)?;
    let mib = arg(2, "MIB", 128, 64 << 10)?;
    let len = mib << 20;
    let page = rustix::param::page_size();
    let pages = len / page;
    let (mut fault_ns, mut unmap_ns) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        // SAFETY: a fresh private anonymous mapping at an address the kernel picks: it
        // aliases nothing of this process.
        let p = unsafe {
            mmap_anonymous(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE,
            )?
        }
        .cast::<u8>();
        let t0 = Instant::now();
        for i in 0..pages {
            // SAFETY: `i * page` lies inside the `len` bytes mapped above, which stay mapped
            // until the `munmap` below; a volatile write, so that every page is faulted in.
            unsafe { p.add(i * page).write_volatile(1) };
        }
        let t1 = Instant::now();
        // SAFETY: the whole mapping made above, unmapped once, and not touched after.
        unsafe { munmap(p.cast(), len)? };
        let t2 = Instant::now();
        fault_ns.push((t1 - t0).as_nanos() as f64 / pages as f64);
        unmap_ns.push((t2 - t1).as_nanos() as f64 / pages as f64);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "{rounds} rounds of {mib} MiB ({pages} pages of {page} bytes): median {:.1} ns a page faulting, {:.1} ns a page unmapping",
        median(&mut fault_ns),
        median(&mut unmap_ns)
    );
    Ok(())
}
