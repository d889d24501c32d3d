//! The host kernel's own page_fault1 loop, for a profiler: map an anonymous region (no
//! transparent huge pages, so every folio is one page), write one byte a page, unmap it, in
//! rounds, and print what the faults and the unmap took a page. Run under a sampling profiler to
//! see how much of that time the host kernel spends inside its LRU lock:
//!
//! ```text
//! cargo build --release -p pagelab-project --example kernel_lru_probe
//! perf record -e cpu-clock -F 2000 -g -o P -- target/release/examples/kernel_lru_probe 60
//! perf script -i P
//! ```
//!
//! The kernel takes the lruvec's lock with interrupts off (`folio_lruvec_relock_irqsave`, in
//! `folio_batch_move_lru` for the adds and under `folios_put_refs` for the releases), so a
//! `cpu-clock` sample (an hrtimer) that falls due inside a hold is taken when the interrupts come
//! back on: at `_raw_spin_unlock_irqrestore`, with the function that held the lock as the next
//! frame of its call chain. Those samples' share of all samples, times the time a page this
//! prints (faulting plus unmapping), is the kernel's time a page inside the lock, to set beside
//! the engine's (`pagelab trace`'s "lru_lock holds timed apart"). docs/model-history.md,
//! round 42, has a run.
//!
//! `zone->lock` is taken the same way (`__rmqueue_pcplist` allocating, `free_frozen_page_commit`
//! freeing), but a kernel with adaptive per-CPU lists keeps this loop on them. Raising
//! `vm.percpu_pagelist_high_fraction` (as root, e.g. to 1000000; 0 restores the default) cuts
//! the lists' high mark to a few batches, so that most pages go through the buddy allocator
//! and its holds can be counted too (round 43).
//!
//! `cargo run --release -p pagelab-project --example kernel_lru_probe -- [ROUNDS] [MIB]`
//! (30 rounds of 128 MiB by default)

use std::time::Instant;

use rustix::mm::{Advice, MapFlags, ProtFlags, madvise, mmap_anonymous, munmap};

fn arg(value: Option<String>, name: &str, default: usize, max: usize) -> Result<usize, String> {
    match value {
        None => Ok(default),
        Some(s) => match s.parse::<usize>() {
            Ok(v) if (1..=max).contains(&v) => Ok(v),
            _ => Err(format!(
                "{name}: `{s}` is not a whole number from 1 to {max}"
            )),
        },
    }
}

fn main() -> std::process::ExitCode {
    match probe() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kernel_lru_probe: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn probe() -> Result<(), String> {
    let mut args = std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned());
    let rounds = arg(args.next(), "ROUNDS", 30, 10_000)?;
    let mib = arg(args.next(), "MIB", 128, 64 << 10)?;
    if let Some(extra) = args.next() {
        return Err(format!(
            "unexpected argument `{extra}` (usage: kernel_lru_probe [ROUNDS] [MIB])"
        ));
    }
    let len = mib
        .checked_mul(1 << 20)
        .ok_or_else(|| format!("MIB: {mib} MiB does not fit this machine's address space"))?;
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
            )
        }
        .map_err(|e| format!("mmap of {mib} MiB: {e}"))?
        .cast::<u8>();
        // SAFETY: advice on the mapping made above, whole; it changes no byte of it.
        unsafe { madvise(p.cast(), len, Advice::LinuxNoHugepage) }
            .map_err(|e| format!("madvise(MADV_NOHUGEPAGE): {e}"))?;
        let t0 = Instant::now();
        for i in 0..pages {
            // SAFETY: `i * page` lies inside the `len` bytes mapped above, which stay mapped
            // until the `munmap` below; a volatile write, so that every page is faulted in.
            unsafe { p.add(i * page).write_volatile(1) };
        }
        let t1 = Instant::now();
        // SAFETY: the whole mapping made above, unmapped once, and not touched after.
        unsafe { munmap(p.cast(), len) }.map_err(|e| format!("munmap: {e}"))?;
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
