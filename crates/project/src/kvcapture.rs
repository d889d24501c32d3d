//! Capture of kvcache (memcached + memtier in a memory cgroup smaller than the data): one
//! memcached worker's operations on the engine, with everything they share.
//!
//! The posting this workload reproduces (Kairui Song, 2023) ran 16 memcached workers and 16
//! memtier threads of 2 connections each: 32 connections over 16 workers, so each worker
//! serves the pipelines of 2 connections, each connection walking its slice of the keys in
//! order. The capture runs exactly that stream for one worker
//! ([`pagelab_workloads::kvcache::ServerRequests`], one server of one client thread's
//! `connections` connections) on the workload's own server
//! ([`pagelab_workloads::kvcache::boot`], [`pagelab_workloads::kvcache::handle`]): the items and
//! the hash table in one address space charged to a memcg whose limit is the experiment's
//! fraction of the data. The worker is therefore the one task charging the group, so every
//! charge at the limit is its own direct reclaim, as each of the posting's 16 workers reclaims
//! for its own charges: MGLRU aging (the page-table walk, `inc_max_seq`, the per-folio or bulk
//! moves of `inc_min_seq`) and eviction (`scan_oldest`'s sorting, isolation, `shrink_folio_list`
//! and swap-out), or the classic LRU's isolation, and the swap-ins of the sets that find their
//! item's page swapped out.
//!
//! Windows: the keys are first set once (the fill: from then on the data is larger than the
//! limit, and the run is in the steady state the posting measures), then one warm-up window,
//! then untraced and recorded windows in turns, as [`crate::capture`] does for the
//! will-it-scale loops. A window is one sweep of the server's keys (the sequential key
//! pattern's period; [`CaptureSpec::kvcache_window`] sets another length), starting at a
//! connection's batch boundary and made of whole pipelines, and every request is one operation.
//! A sweep holds whole cycles of MGLRU's aging: with the memcg at a quarter of the data, the
//! memcg's pages turn over about four times in it, and a generation is opened about every
//! half turnover. The trace is cyclic
//! ([`crate::trace::Window::Cycle`]): the steady state repeats, and each replayed CPU cycles
//! through it from its own point.
//!
//! The clients are not run: their requests are generated in the recorded thread between
//! operations (a few instructions each, inside the compute of the trace), and the network
//! stack, which the engine's kvcache does not model either, is not in the trace. The replay
//! puts the server threads on the machine and leaves the client threads aside (docs/model.md,
//! "kvcache in the projector").

use std::time::Instant;

use pagelab_mm::reclaim::swap::Backing;
use pagelab_sync::trace as raw;
use pagelab_workloads::kvcache::{self, KvParams, ServerRequests};
use pagelab_workloads::pft;

use crate::capture::{CaptureSpec, fallback_classes};
use crate::error::CaptureError;
use crate::trace::{Pinning, Trace, TraceMeta, Window};

/// Room in the recording buffer per request (events): a set that swaps in its page, reclaims
/// and swaps out another records 15 to 20 events on average (17 with mglru at the experiment's
/// shape); aging walks add their share.
const EVENTS_PER_OP: usize = 32;

/// Untraced and traced windows, as [`crate::capture`] takes them.
const ROUNDS: usize = 3;

/// The server's parameters for the capture: one worker, one client thread with the
/// experiment's connections per worker, everything else as the experiment says.
pub fn server_params(p: KvParams) -> KvParams {
    KvParams {
        servers: 1,
        clients: 1,
        ..p
    }
}

/// The best recording so far: time lost to preemption, CPU time, events.
type Best = Option<(f64, f64, Vec<raw::Event>)>;

/// Captures one kvcache worker (module docs). `spec.kvcache` gives the shape (the workload's
/// defaults otherwise), `spec.kvcache_window` the requests per window (rounded up to whole
/// pipelines), `spec.kernel_cpus` the engine's CPUs.
pub fn capture(spec: &CaptureSpec) -> Result<Trace, CaptureError> {
    let p = server_params(spec.kvcache.unwrap_or_default());
    p.validate().map_err(CaptureError::Workload)?;
    let policy = &spec.profile.policy;
    let mut reqs = ServerRequests::new(p, 0).map_err(CaptureError::Workload)?;
    let classes = fallback_classes(policy);
    // One sweep of the keys by default: the key pattern's own period (each connection walks its
    // slice in order and wraps), which holds every phase of MGLRU's aging cycle in proportion.
    let window = spec.kvcache_window.unwrap_or(reqs.keys() as usize);
    if window == 0 {
        return Err(CaptureError::NoCycle);
    }
    let window = window.div_ceil(p.pipeline) * p.pipeline;
    let result = std::thread::scope(|s| {
        s.spawn(|| -> Result<_, CaptureError> {
            pagelab_workloads::pin::pin_to_core(0);
            // The engine is booted on the recording thread: its tasks stay on it.
            let server = kvcache::boot(
                policy,
                p,
                &Backing::Memory { compress: false },
                spec.kernel_cpus,
            )
            .map_err(CaptureError::Workload)?;
            let task = &server.tasks[0];
            let base = server.base;
            let run = |n: usize, reqs: &mut ServerRequests| -> Result<(), CaptureError> {
                for _ in 0..n {
                    let r = reqs.next_request();
                    kvcache::handle(task, base, p, r.set, r.key, r.ver)
                        .map_err(CaptureError::Workload)?;
                    raw::ops(1);
                }
                Ok(())
            };
            // The fill: every key set once, then on to a batch boundary.
            run(reqs.keys() as usize, &mut reqs)?;
            loop {
                let r = reqs.next_request();
                kvcache::handle(task, base, p, r.set, r.key, r.ver)
                    .map_err(CaptureError::Workload)?;
                if r.batch_end {
                    break;
                }
            }
            // A warm-up window, then untraced and recorded windows in turns (untraced first).
            run(window, &mut reqs)?;
            let overhead = raw::measure_overhead();
            let capacity = window * EVENTS_PER_OP;
            let (mut untraced, mut best): (f64, Best) = (f64::INFINITY, None);
            for w in 0..2 * ROUNDS {
                let recorded = w % 2 == 1;
                if recorded {
                    raw::start(capacity);
                }
                let (t0, c0) = (Instant::now(), pft::thread_cpu_ns());
                let r = run(window, &mut reqs);
                let wall = t0.elapsed().as_nanos() as f64;
                let cpu = pft::thread_cpu_ns().saturating_sub(c0) as f64;
                let events = if recorded { raw::stop() } else { Vec::new() };
                r?;
                if !recorded {
                    untraced = untraced.min(cpu);
                } else {
                    let lost = (wall - cpu).max(0.0);
                    if best.as_ref().is_none_or(|(l, _, _)| lost < *l) {
                        best = Some((lost, cpu, events));
                    }
                }
            }
            // One window per trylock class with a fallback, its trylocks made to fail.
            let mut fallbacks = Vec::new();
            for class in classes {
                raw::force_trylock_failure(Some(class));
                raw::start(capacity);
                let r = run(window, &mut reqs);
                let events = raw::stop();
                raw::force_trylock_failure(None);
                r?;
                fallbacks.push(events);
            }
            Ok((overhead, untraced, best, fallbacks))
        })
        .join()
        .map_err(|_| CaptureError::Incomplete("the kvcache server panicked"))?
    })?;
    let (overhead, untraced_ns, best, fallbacks) = result;
    let Some((_, traced_ns, events)) = best else {
        return Err(CaptureError::Incomplete(
            "the recording window never closed",
        ));
    };
    if events.is_empty() || !untraced_ns.is_finite() {
        return Err(CaptureError::Incomplete("kvcache recorded nothing"));
    }
    let meta = TraceMeta {
        workload: spec.workload.name().to_string(),
        profile: spec.profile.name.clone(),
        profile_toml: policy.to_toml_string(),
        op_unit: "ops".into(),
        window: Window::Cycle,
        pinning: Pinning::Spread,
        shared_vma: true,
        kernel_cpus: spec.kernel_cpus,
        host_cpu: pagelab_bench::host::HostInfo::detect().cpu_model,
        host_ghz: crate::calibrate::host_clock_ghz(),
        ops: 0,
        raw_events: 0,
        overhead_ns_per_event: overhead,
        traced_ns,
        untraced_ns,
        untraced_write_ns: None,
        event_cost_ns: None,
        untraced_unmap_ns: None,
        unmap_event_cost_ns: None,
        untraced_holds: Vec::new(),
        compute_scale: 1.0,
        guard: None,
        paced: None,
        iterations: spec.cycles as u32,
    };
    let mut trace = Trace::from_raw_with_fallbacks(meta, &events, &fallbacks);
    trace.set_rwsem(policy.locks.rwsem);
    Ok(trace)
}
