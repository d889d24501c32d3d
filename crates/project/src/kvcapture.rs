//! Capture of kvcache (memcached + memtier in a memory cgroup smaller than the data): one
//! memcached worker's operations on the engine, with everything they share.
//!
//! The posting this workload reproduces (Kairui Song, 2023) ran 16 memcached workers and 16
//! memtier threads of 2 connections each: 32 connections over 16 workers, so each worker
//! serves the pipelines of 2 connections, each connection walking its slice of the keys in
//! order. The capture runs exactly that stream for one worker
//! ([`pagelab_workloads::kvcache::ServerRequests`], one server of one client thread's
//! `connections` connections) on the workload's own server
//! ([`pagelab_workloads::kvcache::boot`], [`pagelab_workloads::kvcache::serve_segment`]): the items and
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
//! through it from its own point. Of the recorded windows, the one that lost least time to
//! the host (wall time less the thread's CPU time) is kept, with its gaps as they are: unlike
//! one task's capture, which takes gaps of [`crate::trace::CaptureGuard::INTERRUPT_NS`] or
//! more out as the host's interruptions, a kvcache trace has long gaps of its own. MGLRU's
//! aging walk scans every page-table entry of the worker's address space with no recorded
//! event between its start and its end (the page-table locks it takes are the one worker's,
//! private, and not recorded). Measured with the guard's rule applied (2026-12-01, the
//! experiment's shape, quiet host, `pagelab capture kvcache --machine epyc-7k62-2s`): mglru
//! captures held 14, 7 and 7 gaps of 40 us or more (longest 356 us to 3.3 ms), the classic
//! LRU's 19 and 2: the classic LRU's vary with the host, MGLRU's floor of 7 fits its aging
//! walks (not proven: the walks per window were not counted).
//! Taking the gaps out would take the walks out with whatever the host did, so the kvcache
//! trace keeps them, and with them the host's interruptions (a preemption inside an
//! `lru_lock` hold is replayed as a hold that long).
//!
//! The client runs beside the recording, not in it: a thread of its own (the recording is per
//! thread) on an engine CPU of its own, it sends each pipeline in a segment allocated there,
//! frees the request segments the worker hands back, checks the replies and puts the reply
//! segments on the worker's defer list ([`pagelab_workloads::sockbuf`]). So the worker's trace
//! holds its own socket work as the kernel would run it on its CPU: parsing the segment and
//! copying each value out of it (compute, at whatever the client's lines cost this host), the
//! reply segment's slab allocation and frag, and the frees of the reply segments read. The
//! rest of the network stack, which the engine does not model, is not in the trace. The
//! replay puts the server threads on the machine and leaves the client threads aside
//! (docs/model.md, "kvcache in the projector").

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError, TrySendError, bounded};
use pagelab_mm::Task;
use pagelab_mm::reclaim::swap::Backing;
use pagelab_sync::LockClass;
use pagelab_sync::trace as raw;
use pagelab_workloads::kvcache::{self, KvParams, ServerRequest, ServerRequests};
use pagelab_workloads::pft;
use pagelab_workloads::sockbuf::{PageFrag, Skb, SockBufs};

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

/// Room on the queues back from the worker (served pipelines, read replies): more than the
/// pipelines ever in flight.
const SIDE_QUEUE: usize = 64;

/// How long the recording thread polls an empty queue before it sleeps on it.
const POLL: std::time::Duration = std::time::Duration::from_millis(1);

/// What the server thread's windows produce: the per-event overhead, the least untraced CPU
/// time, the kept recording and the fallback windows.
type Windows = (f64, f64, Best, Vec<Vec<raw::Event>>);

/// The memtier thread of the captured worker's connections, on a host thread of its own (the
/// recording is per thread, so nothing it does is recorded) and on an engine CPU of its own
/// ([`kvcache::client_cpu`]): it sends each connection's pipeline in a segment allocated
/// there, frees the request segments the server hands back there, checks the replies and puts
/// the reply segments on the server's defer list, as [`kvcache`]'s clients do.
struct Client {
    /// Pipelines on their way to the server. Bounded: the client keeps a couple ahead.
    to_server: PipelineQueue,
    /// Served pipelines on their way back: the request segment and the reply segment.
    back: ServedQueue,
    /// The server's defer list: reply segments read, to be freed on the server's CPU.
    defer: (Sender<Skb>, Receiver<Skb>),
    /// The server has stopped: no more pipelines.
    done: AtomicBool,
    /// The client thread has returned (stopped, or failed): the server waits for no more.
    exited: AtomicBool,
}

/// A pipeline's segment and its requests (for the client to check the reply against).
type Pipeline = (Skb, Vec<ServerRequest>);
type PipelineQueue = (Sender<Pipeline>, Receiver<Pipeline>);

type ServedQueue = (
    Sender<(Skb, Vec<ServerRequest>, Skb)>,
    Receiver<(Skb, Vec<ServerRequest>, Skb)>,
);

impl Client {
    fn new() -> Client {
        Client {
            to_server: bounded(2),
            // Bounded, so that no message allocates (an unbounded channel allocates a block
            // every few dozen messages, which the other thread frees): at most the couple of
            // pipelines in flight are ever on them.
            back: bounded(SIDE_QUEUE),
            defer: bounded(SIDE_QUEUE),
            done: AtomicBool::new(false),
            exited: AtomicBool::new(false),
        }
    }

    /// The client thread: pipelines of `reqs`, sent until [`Client::stop`]. It never blocks
    /// on the server: a full queue is polled (with a yield), so that the recording thread's
    /// receive never has a sleeping sender to wake, a system call that would land in the
    /// worker's compute.
    fn run(
        &self,
        bufs: &SockBufs,
        p: KvParams,
        mut reqs: ServerRequests,
    ) -> Result<(), CaptureError> {
        // However the client ends (a panic included), the server stops waiting for it.
        struct Exited<'a>(&'a AtomicBool);
        impl Drop for Exited<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let _exited = Exited(&self.exited);
        pagelab_workloads::pin::pin_to_core(1);
        let alone = std::thread::available_parallelism().map_or(true, |n| n.get() < 2);
        let cpu = kvcache::client_cpu(&p, 0);
        let mut frag = PageFrag::new();
        let mut r = Ok(());
        'send: while !self.done.load(Ordering::Relaxed) {
            if let Err(e) = self.read_replies(bufs, p) {
                r = Err(e);
                break;
            }
            let batch: Vec<ServerRequest> = (0..p.pipeline).map(|_| reqs.next_request()).collect();
            let skb = match kvcache::send_requests(bufs, &mut frag, cpu, p, &batch) {
                Ok(skb) => skb,
                Err(e) => {
                    r = Err(CaptureError::Workload(e));
                    break;
                }
            };
            let mut pipeline = (skb, batch);
            loop {
                match self.to_server.0.try_send(pipeline) {
                    Ok(()) => break,
                    Err(TrySendError::Full(back)) if !self.done.load(Ordering::Relaxed) => {
                        pipeline = back;
                        if alone {
                            // Sharing the recording thread's only CPU: let it run.
                            std::thread::sleep(std::time::Duration::from_micros(50));
                        } else {
                            std::thread::yield_now();
                        }
                    }
                    Err(e) => {
                        bufs.free(e.into_inner().0);
                        break 'send;
                    }
                }
            }
        }
        // The server has stopped serving: what it served last is read, and the frag goes.
        let last = self.read_replies(bufs, p);
        bufs.release_frag(&mut frag, cpu);
        r.and(last)
    }

    /// The next pipeline, once the client has sent it; an error if the client has stopped.
    /// The recording thread polls an empty queue for up to [`POLL`] before it sleeps on it, so
    /// that a client a little behind does not cost the worker a futex wait and wake-up in its
    /// recorded compute (the client is normally ahead: the queue is full).
    fn next_pipeline(&self) -> Result<Pipeline, CaptureError> {
        let stopped = CaptureError::Incomplete("the kvcache client stopped sending");
        let t0 = Instant::now();
        loop {
            match self.to_server.1.try_recv() {
                Ok(x) => return Ok(x),
                Err(TryRecvError::Empty) if !self.exited.load(Ordering::Relaxed) => {}
                Err(_) => return Err(stopped),
            }
            if t0.elapsed() < POLL {
                std::hint::spin_loop();
                continue;
            }
            match self
                .to_server
                .1
                .recv_timeout(std::time::Duration::from_millis(50))
            {
                Ok(x) => return Ok(x),
                Err(RecvTimeoutError::Timeout) if !self.exited.load(Ordering::Relaxed) => {}
                Err(_) => return Err(stopped),
            }
        }
    }

    /// The replies served so far: each request segment freed here, each reply checked and put
    /// on the server's defer list.
    fn read_replies(&self, bufs: &SockBufs, p: KvParams) -> Result<(), CaptureError> {
        for (request, batch, reply) in self.back.1.try_iter() {
            kvcache::read_reply(bufs, p, &batch, request, reply, &self.defer.0)
                .map_err(CaptureError::Workload)?;
        }
        Ok(())
    }

    /// Ends the client: no more pipelines. What is still queued is freed once the client has
    /// returned ([`Client::drain`]).
    fn stop(&self) {
        self.done.store(true, Ordering::Relaxed);
    }

    /// After both sides have stopped: every segment still queued goes back to the CPU that
    /// allocated it.
    fn drain(&self, bufs: &SockBufs) {
        for (skb, _) in self.to_server.1.try_iter() {
            bufs.free(skb);
        }
        for (request, _, reply) in self.back.1.try_iter() {
            bufs.free(request);
            bufs.free(reply);
        }
        for skb in self.defer.1.try_iter() {
            bufs.free(skb);
        }
    }
}

/// Stops the client when the server's side ends, whether it returns or panics.
struct StopClient<'a>(&'a Client);

impl Drop for StopClient<'_> {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// The captured worker: its task and the server's memory, its sockets and its client.
struct Worker<'a> {
    task: &'a Task,
    bufs: &'a SockBufs,
    client: &'a Client,
    base: u64,
    p: KvParams,
}

impl Worker<'_> {
    /// Pipelines served until `n` requests are done (whole pipelines), each after freeing the
    /// reply segments the client has read; the replies carved from `frag`.
    fn serve(&self, frag: &mut PageFrag, n: usize) -> Result<(), CaptureError> {
        let (bufs, client) = (self.bufs, self.client);
        let mut done = 0;
        while done < n {
            let (skb, batch) = client.next_pipeline()?;
            for d in client.defer.1.try_iter() {
                bufs.free(d);
            }
            match kvcache::serve_segment(self.task, bufs, frag, self.base, self.p, &skb) {
                Ok(s) => {
                    raw::ops(s.requests as u32);
                    done += s.requests as usize;
                    if let Err(e) = client.back.0.try_send((skb, batch, s.reply)) {
                        let (request, _, reply) = e.into_inner();
                        bufs.free(request);
                        bufs.free(reply);
                    }
                }
                Err(e) => {
                    bufs.free(skb);
                    return Err(CaptureError::Workload(e));
                }
            }
        }
        Ok(())
    }

    /// The fill, the warm-up and the windows, on the recording thread (module docs), with the
    /// worker's frag released at the end.
    fn windows(
        &self,
        window: usize,
        classes: &[&'static LockClass],
    ) -> Result<Windows, CaptureError> {
        let mut frag = PageFrag::new();
        let r = self.windows_with(&mut frag, window, classes);
        self.bufs.release_frag(&mut frag, self.task.cpu());
        r
    }

    fn windows_with(
        &self,
        frag: &mut PageFrag,
        window: usize,
        classes: &[&'static LockClass],
    ) -> Result<Windows, CaptureError> {
        let p = self.p;
        let mut run = |n: usize| self.serve(frag, n);
        // The fill: every key set once (whole pipelines).
        run(ServerRequests::new(p, 0)
            .map_err(CaptureError::Workload)?
            .keys() as usize)?;
        // A warm-up window, then untraced and recorded windows in turns (untraced first).
        run(window)?;
        let overhead = raw::measure_overhead();
        let capacity = window * EVENTS_PER_OP;
        let (mut untraced, mut best): (f64, Best) = (f64::INFINITY, None);
        for w in 0..2 * ROUNDS {
            let recorded = w % 2 == 1;
            if recorded {
                raw::start(capacity);
            }
            let (t0, c0) = (Instant::now(), pft::thread_cpu_ns());
            let r = run(window);
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
        for &class in classes {
            raw::force_trylock_failure(Some(class));
            raw::start(capacity);
            let r = run(window);
            let events = raw::stop();
            raw::force_trylock_failure(None);
            r?;
            fallbacks.push(events);
        }
        Ok((overhead, untraced, best, fallbacks))
    }
}

/// Captures one kvcache worker (module docs). `spec.kvcache` gives the shape (the workload's
/// defaults otherwise), `spec.kvcache_window` the requests per window (rounded up to whole
/// pipelines), `spec.kernel_cpus` the engine's CPUs.
pub fn capture(spec: &CaptureSpec) -> Result<Trace, CaptureError> {
    let p = server_params(spec.kvcache.unwrap_or_default());
    p.validate().map_err(CaptureError::Workload)?;
    let policy = &spec.profile.policy;
    let reqs = ServerRequests::new(p, 0).map_err(CaptureError::Workload)?;
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
            let bufs = &*server.bufs;
            let client = Client::new();
            std::thread::scope(|cs| {
                let helper = cs.spawn(|| client.run(bufs, p, reqs));
                let r = {
                    let _stop = StopClient(&client);
                    let worker = Worker {
                        task,
                        bufs,
                        client: &client,
                        base,
                        p,
                    };
                    worker.windows(window, &classes)
                };
                let helper = helper
                    .join()
                    .map_err(|_| CaptureError::Incomplete("the kvcache client panicked"))?;
                // Both sides are done: what is still queued goes back; then nothing of the
                // sockets may be left.
                client.drain(bufs);
                // The client's own failure first: the server's is then only that it stopped.
                helper?;
                let w = r?;
                bufs.quiesce().map_err(|e| {
                    CaptureError::Workload(pagelab_workloads::WorkloadError::Fault(format!(
                        "kvcache capture: {e}"
                    )))
                })?;
                Ok(w)
            })
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
        // No guard: the host's interruptions stay in the trace. A one-task capture takes its
        // gaps of `CaptureGuard::INTERRUPT_NS` or more out as the host's, but here such gaps
        // are also the engine's own: MGLRU's aging walk scans the whole page table with no
        // recorded event (the page-table locks it takes are the worker's own; module docs).
        // The recording kept is the one that lost least time to the host instead.
        guard: None,
        paced: None,
        iterations: spec.cycles as u32,
    };
    let mut trace = Trace::from_raw_with_fallbacks(meta, &events, &fallbacks);
    trace.set_rwsem(policy.locks.rwsem);
    Ok(trace)
}
