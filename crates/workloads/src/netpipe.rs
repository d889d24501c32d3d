//! `netpipe`: netperf's UDP_STREAM reduced to what the page allocator sees of it.
//!
//! # What is modelled
//!
//! netperf UDP_STREAM over loopback sends datagrams of a fixed size from a client to a server
//! bound to another CPU. Each `sendmsg` allocates an skb whose data buffer comes from `kmalloc`
//! on the sender's CPU; the server's `recvmsg` copies the data out and frees the skb on the
//! receiver's CPU. The buffers come from slabs of order 1 to 3 (the kmalloc classes from
//! 512 bytes up, on a small machine) or, above the largest kmalloc cache, straight from the
//! page allocator (`kmalloc_large`, orders 2 and 3 for the two largest send sizes). Every
//! page-allocator free is a *remote* free: it lands on the receiver's per-CPU lists, which
//! drain to the zone in batches, while the sender's lists refill from the zone. Without
//! high-order per-CPU lists (Linux before 5.14, the `vanilla-4.9` profile) every order-1..3 allocation and free takes `zone->lock`; with them
//! (Mel Gorman's series, the `hopcpu` profile) only refills and drains do.
//!
//! A workload of `N` *pairs* runs pair `i` as a sender task on virtual CPU `2i` and a receiver
//! task on virtual CPU `2i + 1`, each a real thread pinned to host core `cpu mod cores`. A
//! bounded single-producer single-consumer ring connects them and carries `(buffer, size)`. It
//! holds as many messages as the receiving socket would queue ([`socket_queue_depth`]): UDP
//! queues a datagram while the socket's receive memory (`sk_rmem_alloc`, the sum of the queued
//! skbs' `truesize`) has not passed `sk_rcvbuf`, 212992 bytes by default (`rmem_default`). So a
//! 64-byte send has a few hundred datagrams in flight and a 16384-byte send seven: how many
//! buffers are live at once decides how many slabs the workload keeps busy and how often a
//! slab empties and goes back to the page allocator, so a fixed depth would put several times
//! the kernel's memory in flight at the large sizes.
//!
//! - **Sender**: `kmalloc` on its CPU, write the message (below), push. A full ring makes the
//!   sender wait (spin, then yield) until the receiver makes room: UDP would drop the datagram
//!   and netperf would count the send anyway, but drops are not modelled; every message sent
//!   is received, so the rate is the rate of messages delivered.
//! - **Receiver**: pop, check the message, `kfree` on its own CPU. It gives the room of what it
//!   read back to the sender a quarter of the receive buffer at a time while more is queued,
//!   and at once when it has read everything, as `udp_rmem_release` returns truesize to
//!   `sk_rmem_alloc` ([`Ring::with_release`], [`socket_release_step`]). Giving back every slot
//!   as it is read would make a sender facing a full queue fetch the receiver's position once
//!   per message, a cache line passed between the two CPUs per datagram that the kernel does
//!   not pass.
//!
//! The pair counts how it waited (events per send size: `ring_full`, the messages the sender
//! could not queue at once; `ring_empty`, the times the receiver found nothing; `tx_yield`,
//! `rx_yield`, their yields while waiting; `ring_fill_sum` / `ring_fill_looks`, the mean
//! number of messages charged to the socket, sampled every [`OCCUPANCY_EVERY`] messages), so a
//! run shows which steady state the pair settled in.
//!
//! # Sampling on a shared host
//!
//! The pair's threads are pinned to a core each and do nothing but the kernel's work, so any
//! time the host gives their core to another process stops the pair, and more than that when
//! the thread was holding an engine spinlock (the kernel holds spinlocks with preemption off).
//! Around every sample the sampler reads each pair thread's `run_delay` (time runnable but
//! waiting for a core, `/proc/self/task/<tid>/schedstat`); a sample in which a thread waited
//! more than [`HOST_WAIT_LIMIT`] of the interval is thrown away and taken again, up to as many
//! retakes as there are samples per run, after which disturbed samples are kept and counted
//! (`samples_retaken`, `samples_disturbed`, `host_wait_us` per send size).
//!
//! On a virtual machine the hypervisor also decides where the virtual CPUs run, and moves them:
//! on the 2-vCPU development VM a cache line's round trip between the two was about 60 ns at
//! some times and about 300 ns at others. Between samples the pair pauses and its sender passes
//! a line to the receiver and back ([`link_probe`]); a sample next to a probe more than
//! [`LINK_TOLERANCE`] times the best of the process is retaken the same way (counted in
//! `samples_misplaced`, with `link_min_ns` and `link_max_ns` per send size).
//!
//! # The buffer
//!
//! By default the sender asks `kmalloc` for what `alloc_skb` would ask for a datagram of the
//! send size on loopback ([`skb_alloc_size`]): the payload plus UDP/IPv4 headers and link-layer
//! headroom, rounded to a cache line, plus the shared info block at the end of every skb
//! (380 to 450 bytes in all). That overhead is what moves the 8192-byte send size above the
//! largest kmalloc cache (8 KiB) and onto order-2 pages, as in the kernel; [`NetpipeParams::skb`]
//! set to false asks for the send size alone.
//!
//! # Touching the data
//!
//! A real send copies the whole payload in and the receive copies it out. Copying every cache
//! line would make the workload measure memory bandwidth rather than the allocator, so each
//! side touches one word in every [`TOUCH_STRIDE`] (every 512 bytes) plus the first and last
//! word: enough that part of the buffer moves between the two CPUs' caches as in the kernel,
//! with a cost that grows with the size, without drowning the allocator's share. The sender
//! writes the message's sequence number into the first word and into every strided word and
//! its complement into the last; the receiver checks all of them against the sequence number
//! it expects next, so a lost, duplicated, reordered or overwritten message is an error.
//!
//! # kmalloc and kfree
//!
//! [`Kmalloc`] puts the kernel's `kmalloc_large` beside the engine's SLUB: sizes up to
//! [`KMALLOC_MAX_SIZE`] go to the slab caches, larger ones to `alloc_pages` as a compound block
//! of the order that holds them, tagged in the head frame so that `kfree` can tell the two
//! apart from the address alone, as the kernel does with `PageSlab`.

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use pagelab_mm::alloc::slab::{
    KMALLOC_MAX_SIZE, KMALLOC_SIZES, Obj, SlabAllocator, SlabError, get_order, kmalloc_index,
};
use pagelab_mm::alloc::{AllocError, Gfp};
use pagelab_mm::page::pg;
use pagelab_mm::policy::PcpTune;
use pagelab_mm::{Census, CpuId, Kernel, Mem, PAGE_SIZE, Pfn, Policy};
use pagelab_sync::Backoff;

use crate::WorkloadError;
use crate::engine::{self, EngineCounters, EngineRun};
use crate::pin::pin_to_core;
use crate::runner::{Continuous, Counter, Hooks, SampleSpec, bump};

/// The netperf UDP_STREAM send sizes mmtests runs (`send-64` ... `send-16384`).
pub const SEND_SIZES: [usize; 9] = [64, 128, 256, 1024, 2048, 3312, 4096, 8192, 16384];

/// `rmem_default` (`SK_RMEM_MAX`: 256 packets of `SKB_TRUESIZE(256)` = 832 bytes on x86-64): the
/// receive buffer of a socket nobody tuned, as netperf's UDP_STREAM server's is by default.
pub const SK_RCVBUF: usize = 212_992;

/// `SKB_DATA_ALIGN(sizeof(struct sk_buff))` on x86-64 (232 bytes, cache-line aligned): the part
/// of an skb's `truesize` besides its data buffer.
const SKB_STRUCT: usize = 256;

/// Each side touches one word in this many (every 512 bytes), besides the first and last.
pub const TOUCH_STRIDE: usize = 64;

/// UDP (8) and IPv4 (20) headers in the skb's linear data.
const UDP_IPV4_HEADERS: usize = 28;
/// Link-layer headroom reserved by the send path on loopback (16) and its alignment slack (15).
const LL_HEADROOM: usize = 31;
/// `SMP_CACHE_BYTES`: skb data sizes are rounded to a cache line (`SKB_DATA_ALIGN`).
const SMP_CACHE_BYTES: usize = 64;
/// `struct skb_shared_info` at the end of every skb data buffer, cache-line aligned, x86-64.
const SKB_SHARED_INFO: usize = 320;

/// Bytes `alloc_skb` asks `kmalloc` for to send a datagram of `send_size` bytes on loopback
/// (approximately: the exact headroom depends on the route and the device).
pub fn skb_alloc_size(send_size: usize) -> usize {
    (send_size + UDP_IPV4_HEADERS + LL_HEADROOM).next_multiple_of(SMP_CACHE_BYTES) + SKB_SHARED_INFO
}

/// `ksize` of a kmalloc of `bytes`: the size class that serves it, or the whole block of a
/// `kmalloc_large`.
pub fn kmalloc_ksize(bytes: usize) -> usize {
    match kmalloc_index(bytes) {
        Some(i) => KMALLOC_SIZES[i],
        None => PAGE_SIZE << get_order(bytes),
    }
}

/// Datagrams a UDP socket with the default receive buffer queues when each one's data buffer is
/// a kmalloc of `bytes`. An skb's `truesize` is `ksize` of its data plus the `sk_buff` itself
/// (`__alloc_skb`); `__udp_enqueue_schedule_skb` drops a datagram only when the memory already
/// queued exceeds `sk_rcvbuf`, so the queue holds `sk_rcvbuf / truesize` datagrams plus the
/// one that crosses the limit.
pub fn socket_queue_depth(bytes: usize) -> usize {
    SK_RCVBUF / (kmalloc_ksize(bytes) + SKB_STRUCT) + 1
}

/// Datagrams of `bytes` kmalloc'd whose truesize makes up the quarter of the default receive
/// buffer that `udp_rmem_release` gives back at a time (see [`Ring::with_release`]).
pub fn socket_release_step(bytes: usize) -> usize {
    (SK_RCVBUF / 4).div_ceil(kmalloc_ksize(bytes) + SKB_STRUCT)
}

/// Tag in the head frame's `mapping` of a `kmalloc_large` block; the low byte holds the order.
const KMALLOC_LARGE_TAG: u64 = 0x6b6d_616c_6c6f_6300;
const KMALLOC_LARGE_MASK: u64 = !0xff;

/// Why a kmalloc failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KmallocError {
    #[error("kmalloc of 0 bytes")]
    ZeroSize,
    #[error(transparent)]
    Slab(#[from] SlabError),
    #[error("kmalloc_large: {0}")]
    Page(#[from] AllocError),
}

/// `kmalloc`/`kfree` over the engine: the slab caches up to [`KMALLOC_MAX_SIZE`], whole
/// compound blocks from the page allocator above (`kmalloc_large`).
pub struct Kmalloc {
    slab: SlabAllocator,
}

impl Kmalloc {
    pub fn new(mem: Arc<Mem>) -> Kmalloc {
        Kmalloc {
            slab: SlabAllocator::new(mem),
        }
    }

    pub fn slab(&self) -> &SlabAllocator {
        &self.slab
    }

    pub fn mem(&self) -> &Arc<Mem> {
        self.slab.mem()
    }

    /// The page order a `size`-byte kmalloc allocates at: its slab's order, or the order of
    /// the `kmalloc_large` block. `None` for 0.
    pub fn page_order(&self, size: usize) -> Option<u32> {
        match size {
            0 => None,
            1..=KMALLOC_MAX_SIZE => self.slab.cache_for(size).map(|c| c.order()),
            _ => Some(get_order(size)),
        }
    }

    /// Does a `size`-byte kmalloc bypass the slab caches?
    pub fn is_large(size: usize) -> bool {
        size > KMALLOC_MAX_SIZE
    }

    /// `kmalloc(size, GFP_KERNEL)` on `cpu`.
    pub fn kmalloc(&self, cpu: CpuId, size: usize) -> Result<Obj, KmallocError> {
        if size == 0 {
            return Err(KmallocError::ZeroSize);
        }
        if !Self::is_large(size) {
            return Ok(self.slab.kmalloc(cpu, size)?);
        }
        // kmalloc_large: a compound block, its order recorded in the head frame.
        let order = get_order(size);
        let mem = self.mem();
        let pfn = mem.alloc_pages(cpu, order, Gfp::KERNEL.with_comp())?;
        mem.pages()[pfn]
            .mapping
            .store(KMALLOC_LARGE_TAG | u64::from(order), Relaxed);
        Ok(Obj { pfn, offset: 0 })
    }

    /// `kfree` on `cpu`, any CPU. Panics on an address that is neither a slab object of this
    /// allocator nor the start of a live `kmalloc_large` block.
    pub fn kfree(&self, cpu: CpuId, obj: Obj) {
        let mem = self.mem();
        let pages = mem.pages();
        assert!(
            obj.pfn.idx() < pages.len(),
            "kfree of {obj:?}: outside the arena"
        );
        let head = mem.compound_head(obj.pfn);
        let page = &pages[head];
        if page.test(pg::SLAB) {
            self.slab.kfree(cpu, obj);
            return;
        }
        let tag = page.mapping.load(Relaxed);
        assert!(
            obj.pfn == head && obj.offset == 0 && tag & KMALLOC_LARGE_MASK == KMALLOC_LARGE_TAG,
            "kfree of {obj:?}: neither a slab object nor a kmalloc_large block"
        );
        // The last reference: free_frozen_pages clears the tag with the rest of the owner's state.
        let freed = mem.free_pages(cpu, head, (tag & 0xff) as u32);
        debug_assert!(freed, "kmalloc_large block {head:?} had another reference");
    }
}

/// A kept sample is taken again when the host kept one of the pair threads off its core for more
/// than this share of the interval.
///
/// Why: each pair thread is pinned to a core of its own and does nothing but the kernel's work,
/// so a window in which it sat on a runqueue behind another host process is a window in which
/// the pair stood still: the message rate falls by about the share of time lost, and more when
/// the thread was preempted holding an engine spinlock (the kernel's `spin_lock` disables
/// preemption, so no kernel CPU is ever stalled that way; the engine's waiters then spin and
/// yield). Such a sample measures the host's load, not the allocator. The limit is a third of
/// the 3% spread the experiment must stay within, so that what the host takes from a kept
/// sample stays well inside it; on an idle host the pair threads wait far less than that
/// (the sampling thread's wake-ups and kernel housekeeping, some microseconds per wake).
pub const HOST_WAIT_LIMIT: f64 = 0.01;

/// How the host disturbed a run's samples (see [`HOST_WAIT_LIMIT`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostSampling {
    /// Samples thrown away and taken again.
    pub retaken: u64,
    /// Samples kept although disturbed, because the retakes allowed were used up.
    pub disturbed: u64,
    /// Whether the pair threads' waits could be read at all (`/proc/self/task/*/schedstat`).
    pub measured: bool,
    /// Over the kept samples: the longest wait of a pair thread per sample, summed (ns).
    pub host_wait_ns: u64,
    /// Samples next to a link probe beyond [`LINK_TOLERANCE`] times the best (retaken or kept).
    pub misplaced: u64,
    /// The best and the worst link probe of the run (ns; 0 = none).
    pub link_min_ns: u64,
    pub link_max_ns: u64,
}

/// Round trips a link probe makes, and how many it times at once (the best group counts).
const PROBE_ROUNDS: u64 = 2000;
const PROBE_GROUP: u64 = 100;

/// On the sender's thread, with nothing in flight from its side: pass `pair.ball` to the
/// receiver and back [`PROBE_ROUNDS`] times and return the best time of a round trip (ns), the
/// cost of moving a cache line between the two host cores and back. `None` if the pair failed
/// or the run halted meanwhile.
///
/// Why: on a virtual machine the hypervisor places the two virtual CPUs on host cores of its
/// choosing and moves them. Measured on the 2-vCPU development VM (AMD EPYC, KVM), this round
/// trip was about 60-64 ns at some times and about 290-330 ns at others, for seconds to
/// minutes at a time (presumably the two vCPUs on one core complex or on two). netpipe's
/// messages cost a few such transfers each (the ring's slots and positions, the buffer, the
/// slab's lines), so two samples at different placements do not measure the same machine.
/// How much the placement moves netpipe's rate was not measured: on the loaded development
/// machine the near placement came with the pair threads starved of their cores.
fn link_probe(pair: &Pair, halt: &AtomicBool) -> Option<u64> {
    let ball = &pair.ball;
    let mut best = u64::MAX;
    let mut t = Instant::now();
    for i in 0..PROBE_ROUNDS {
        ball.store(2 * i + 1, Release);
        let mut backoff = Backoff::new();
        while ball.load(Acquire) != 2 * i + 2 {
            // The sampler gave up waiting (it clears the request), or the run ends.
            if pair.failed.load(Relaxed) || halt.load(Relaxed) || !pair.probe_req.load(Relaxed) {
                ball.store(0, Release);
                return None;
            }
            backoff.snooze();
        }
        if (i + 1) % PROBE_GROUP == 0 {
            let now = Instant::now();
            best = best.min((now - t).as_nanos() as u64 / PROBE_GROUP);
            t = now;
        }
    }
    ball.store(0, Release);
    Some(best)
}

/// On the receiver's thread: answer a probe until the sender ends it (or the pair fails).
fn link_answer(pair: &Pair) {
    let ball = &pair.ball;
    let mut backoff = Backoff::new();
    loop {
        let v = ball.load(Acquire);
        if v == 0 || pair.failed.load(Relaxed) {
            return;
        }
        if v % 2 == 1 {
            ball.store(v + 1, Release);
            backoff.reset();
        } else {
            backoff.snooze();
        }
    }
}

/// `run_delay` (ns spent runnable, waiting for a core) of host thread `tid` of this process.
fn run_delay_ns(tid: i32) -> Option<u64> {
    if tid == 0 {
        return None;
    }
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    text.split_whitespace().nth(1)?.parse().ok()
}

fn current_tid() -> i32 {
    rustix::thread::gettid().as_raw_nonzero().get()
}

/// A sample is taken again, like one the host disturbed, when the round trip between the pair's
/// cores measured before or after it ([`link_probe`]) exceeds the best this process has seen by
/// more than this factor. Within one placement of the virtual CPUs the probe varied by about
/// 10% on the development VM; its two placements differed fivefold.
pub const LINK_TOLERANCE: f64 = 1.5;

/// What the sampler reads of the host besides the counters.
struct HostProbes<'a> {
    /// Cumulative `run_delay` (ns) per pair thread.
    wait: &'a dyn Fn() -> Option<Vec<u64>>,
    /// Pause the pairs, measure the round trip between each pair's cores and resume: the
    /// worst pair's best round trip (ns).
    link: &'a dyn Fn() -> Option<u64>,
    /// The best round trip seen so far (ns; 0 = none yet), kept across runs so that every run
    /// of a process is held to the same placement.
    link_best: &'a AtomicU64,
}

/// The best link round trip any netpipe run of this process has measured (ns; 0 = none yet).
static LINK_BEST: AtomicU64 = AtomicU64::new(0);

/// The sampling side of [`Netpipe::run`]: like [`crate::runner::run_continuous`]'s, it reads the
/// per-pair counters (`read`) once per interval, discards `spec.warmup` samples, calls
/// `measure_start` when the warm-up is over and `sample` after every kept sample. Besides, it
/// reads the pair threads' cumulative host waits around every measured sample and probes the
/// link between the pairs' cores between samples (the probe's time is in no sample), and
/// takes a sample again, at most `max_retakes` times in the run, when some thread waited more
/// than [`HOST_WAIT_LIMIT`] of the sample's duration or a probe next to it was more than
/// [`LINK_TOLERANCE`] times the best; once the retakes are used up such a sample is kept and
/// counted. Ends early when `halted` (a pair failed) or `stop` (marked interrupted).
fn sample_quiet(
    read: &dyn Fn() -> Vec<u64>,
    halted: &mut dyn FnMut() -> bool,
    probes: HostProbes<'_>,
    spec: SampleSpec,
    max_retakes: usize,
    stop: &AtomicBool,
    hooks: Hooks<'_>,
) -> (Continuous, HostSampling) {
    let Hooks {
        measure_start,
        sample,
    } = hooks;
    let mut out = Continuous::default();
    let mut host = HostSampling {
        measured: true,
        ..HostSampling::default()
    };
    let total = spec.warmup + spec.samples;
    let sum = |v: &[u64]| v.iter().sum::<u64>();
    // Sleep until `deadline` in short steps; false when the run must end.
    let mut wait_until = |deadline: Instant, halted: &mut dyn FnMut() -> bool| -> bool {
        while Instant::now() < deadline {
            if halted() || stop.load(Relaxed) {
                break;
            }
            std::thread::sleep((deadline - Instant::now()).min(Duration::from_millis(10)));
        }
        if halted() {
            return false;
        }
        if stop.load(Relaxed) {
            out.interrupted = true;
            return false;
        }
        true
    };
    // Probe the link and fold it into the best and the run's range.
    let probe = |host: &mut HostSampling| -> Option<u64> {
        let ns = (probes.link)().filter(|&ns| ns > 0)?;
        probes.link_best.fetch_min(ns, Relaxed);
        let _ = probes.link_best.compare_exchange(0, ns, Relaxed, Relaxed);
        host.link_min_ns = if host.link_min_ns == 0 {
            ns
        } else {
            host.link_min_ns.min(ns)
        };
        host.link_max_ns = host.link_max_ns.max(ns);
        Some(ns)
    };
    let mut at = Instant::now();
    for i in 0..spec.warmup {
        if !wait_until(at + spec.interval, halted) {
            return (out, host);
        }
        at = Instant::now();
        sample(i + 1, total, None);
    }
    measure_start();
    let base = read();
    let mut retakes = 0;
    let mut kept = 0;
    let mut link_before = probe(&mut host);
    let mut last = sum(&read());
    at = Instant::now();
    let mut waits = (probes.wait)();
    while kept < spec.samples {
        if !wait_until(at + spec.interval, halted) {
            break;
        }
        let now = Instant::now();
        let cur = sum(&read());
        let waits_now = (probes.wait)();
        let window = now - at;
        let link_after = probe(&mut host);
        let worst = match (&waits, &waits_now) {
            (Some(a), Some(b)) if a.len() == b.len() => {
                a.iter().zip(b).map(|(x, y)| y.saturating_sub(*x)).max()
            }
            _ => None,
        };
        if worst.is_none() {
            host.measured = false;
        }
        let best = probes.link_best.load(Relaxed);
        let misplaced = [link_before, link_after]
            .iter()
            .flatten()
            .any(|&ns| ns as f64 > LINK_TOLERANCE * best as f64);
        let disturbed = misplaced
            || worst.is_some_and(|w| w as f64 > HOST_WAIT_LIMIT * window.as_nanos() as f64);
        if misplaced {
            host.misplaced += 1;
        }
        if disturbed && retakes < max_retakes {
            retakes += 1;
            host.retaken += 1;
        } else {
            if disturbed {
                host.disturbed += 1;
            }
            host.host_wait_ns += worst.unwrap_or(0);
            let v = (cur - last) as f64 / window.as_secs_f64();
            out.samples.push(v);
            kept += 1;
            sample(spec.warmup + kept, total, Some(v));
        }
        link_before = link_after;
        // The next window starts after the probe.
        last = sum(&read());
        at = Instant::now();
        waits = (probes.wait)();
    }
    out.per_task = read().iter().zip(&base).map(|(c, b)| c - b).collect();
    (out, host)
}

/// A lock-step pair reads its CPU clock (a system call) once per this many messages at least,
/// so that the reading costs well under 1% of the work it times.
const PUBLISH_EVERY: u64 = 512;

/// A lock-step sample ends after this many intervals of wall time even if some pair has not
/// had an interval of CPU time by then (a host that starves it); the sample still divides what
/// the pairs did by the CPU time they had.
const CPU_WINDOW_WALL_LIMIT: u32 = 50;

/// A lock-step warm-up window lasts this fraction of a measured window's CPU time.
///
/// Why shorter: a warm-up only has to bring a freshly booted engine to the state it keeps for
/// the rest of the run: the arena's first touch, the first slabs of each kmalloc cache
/// (`new_slab`), the per-CPU lists' first refills (`rmqueue_bulk`) and the socket's first
/// fill. A few sockets' worth of messages do all of it: measured on this host in windows of
/// 25 ms of CPU from boot (the `netpipe_diag` example, warm-up 0), the very first window of a
/// fresh engine ran at the rate of the later ones (within their spread, -8% to +7%, no sign
/// either way) at send-256, 3312 and 16384 on both profiles. A warm-up as long as a measured
/// window spent a quarter of the experiment's CPU on nothing; the time is better spent on
/// longer measured windows, whose samples average more of the host's slow spells.
const WARMUP_SHARE: u32 = 4;

/// The sampling side of a lock-step run ([`NetpipeParams::lockstep`]). `read` gives, per pair,
/// the messages received so far and the pair thread's CPU time (ns) at that count, as one
/// snapshot. A window lasts until every pair has had `spec.interval` of CPU time since the last
/// (polled at most every 10 ms, and at most [`CPU_WINDOW_WALL_LIMIT`] intervals of wall
/// time); its sample is the sum over pairs of messages per CPU second over the window.
/// `spec.warmup` windows of a [`WARMUP_SHARE`]th of that CPU time are discarded, then
/// `measure_start` runs and `spec.samples` windows are kept. Ends early when `halted` (a pair
/// failed) or `stop` (marked interrupted).
///
/// Why CPU time and windows of CPU time: a pair thread the host preempts stands still for as
/// long as it waits, which the wall clock charges to the allocator and the thread's CPU clock
/// (`CLOCK_THREAD_CPUTIME_ID`, which counts the kernel's time on the thread's behalf too) does
/// not; and a window of fixed CPU time holds the same amount of work however loaded the host,
/// so a loaded host makes a run longer, not its samples noisier.
fn sample_cpu(
    read: &dyn Fn() -> Vec<(u64, u64)>,
    halted: &mut dyn FnMut() -> bool,
    spec: SampleSpec,
    stop: &AtomicBool,
    hooks: Hooks<'_>,
) -> Continuous {
    let Hooks {
        measure_start,
        sample,
    } = hooks;
    let mut out = Continuous::default();
    let total = spec.warmup + spec.samples;
    let measured = spec.interval.as_nanos() as u64;
    let warm = measured / u64::from(WARMUP_SHARE);
    let poll = (spec.interval / 20).clamp(Duration::from_micros(100), Duration::from_millis(10));
    // Wait until every pair has had `want` ns of CPU since `prev`; None when the run must end.
    let mut window =
        |prev: &[(u64, u64)], want: u64, out: &mut Continuous| -> Option<Vec<(u64, u64)>> {
            let started = Instant::now();
            loop {
                std::thread::sleep(poll);
                if halted() {
                    return None;
                }
                if stop.load(Relaxed) {
                    out.interrupted = true;
                    return None;
                }
                let cur = read();
                let done = cur
                    .iter()
                    .zip(prev)
                    .all(|(c, p)| c.1.saturating_sub(p.1) >= want);
                if done || started.elapsed() > spec.interval * CPU_WINDOW_WALL_LIMIT {
                    return Some(cur);
                }
            }
        };
    let mut prev = read();
    for i in 0..spec.warmup {
        match window(&prev, warm, &mut out) {
            Some(cur) => prev = cur,
            None => return out,
        }
        sample(i + 1, total, None);
    }
    measure_start();
    let base = read();
    prev = base.clone();
    while out.samples.len() < spec.samples {
        let Some(cur) = window(&prev, measured, &mut out) else {
            break;
        };
        let v: f64 = cur
            .iter()
            .zip(&prev)
            .filter(|(c, p)| c.1 > p.1)
            .map(|(c, p)| (c.0 - p.0) as f64 * 1e9 / (c.1 - p.1) as f64)
            .sum();
        out.samples.push(v);
        sample(spec.warmup + out.samples.len(), total, Some(v));
        prev = cur;
    }
    out.per_task = read().iter().zip(&base).map(|(c, b)| c.0 - b.0).collect();
    out
}

/// One message: a kmalloc'd buffer and the bytes of it in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Msg {
    pub obj: Obj,
    pub size: usize,
}

struct Slot {
    obj: AtomicU64,
    size: AtomicU64,
}

/// A bounded single-producer single-consumer ring.
///
/// Positions count up forever; the slot of position `p` is `p mod capacity`. The producer
/// alone writes `tail`, the consumer alone writes `head`, the position up to which it has given
/// room back; a slot is written only while the producer owns it (`tail - head < capacity`) and
/// read only while the consumer does (its read position below `tail`, at or above `head`),
/// with a release store of the position handing it over and an acquire load taking it. The
/// consumer may give room back in steps ([`Ring::with_release`]). Each side keeps its last view of the other's position ([`Producer`],
/// [`Consumer`]) and rereads it only when that view says full or empty, so in steady state the
/// two sides share only the slots. One producer and one consumer at a time: that is the
/// caller's contract (a second producer would lose messages; everything stays memory-safe).
/// (A ring of its own rather than crossbeam's `ArrayQueue`, which is multi-producer and not a
/// dependency of this crate; this one is safe code over atomics.)
pub struct Ring {
    slots: Box<[Slot]>,
    mask: usize,
    /// Messages the ring holds at most: `depth` exactly, not the power of two of `slots`.
    depth: usize,
    /// The consumer gives room back to the producer in steps of this many messages while it
    /// has more to read ([`Ring::with_release`]).
    release: usize,
    /// Position up to which the consumer has given room back (the producer may reuse slots
    /// below it).
    head: CachePadded<AtomicUsize>,
    tail: CachePadded<AtomicUsize>,
}

impl Ring {
    /// A ring holding `depth` messages (at least one). The slots are a power of two so that a
    /// position maps to its slot by a mask; the bound is `depth` itself, because the depth
    /// stands for a socket's queue and rounding it up would queue more than the kernel does.
    pub fn new(depth: usize) -> Ring {
        Ring::with_release(depth, 1)
    }

    /// A ring holding `depth` messages whose consumer gives room back `release` messages at a
    /// time while it still has messages to read, and at once when it has read everything
    /// queued: UDP's receive side does the same with the receive buffer's memory
    /// (`udp_rmem_release`: the truesize of datagrams read accumulates in `forward_deficit` and
    /// is subtracted from `sk_rmem_alloc`, which the sender's enqueue checks against
    /// `sk_rcvbuf`, only once it reaches a quarter of `sk_rcvbuf` or the reader's queue is
    /// empty). A full socket therefore opens in steps of a quarter of its buffer, not one
    /// datagram at a time.
    pub fn with_release(depth: usize, release: usize) -> Ring {
        let depth = depth.max(1);
        let cap = depth.next_power_of_two();
        Ring {
            slots: (0..cap)
                .map(|_| Slot {
                    obj: AtomicU64::new(0),
                    size: AtomicU64::new(0),
                })
                .collect(),
            mask: cap - 1,
            depth,
            release: release.clamp(1, depth),
            head: CachePadded::new(AtomicUsize::new(0)),
            tail: CachePadded::new(AtomicUsize::new(0)),
        }
    }

    pub fn capacity(&self) -> usize {
        self.depth
    }

    /// Messages in the ring not yet given back to the producer, read or not (a snapshot): what
    /// the socket's `sk_rmem_alloc` counts.
    pub fn len(&self) -> usize {
        let head = self.head.load(Acquire);
        self.tail.load(Acquire).wrapping_sub(head)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The producing end. Only one may be in use at a time.
    pub fn producer(&self) -> Producer<'_> {
        Producer {
            ring: self,
            head: self.head.load(Acquire),
        }
    }

    /// The consuming end. Only one may be in use at a time.
    pub fn consumer(&self) -> Consumer<'_> {
        let head = self.head.load(Acquire);
        Consumer {
            ring: self,
            tail: self.tail.load(Acquire),
            head,
            released: head,
        }
    }

    /// Messages the consumer gives back at a time while it has more to read.
    pub fn release(&self) -> usize {
        self.release
    }
}

/// The producing end of a [`Ring`], with its cached view of the consumer's position.
pub struct Producer<'a> {
    ring: &'a Ring,
    head: usize,
}

impl Producer<'_> {
    /// Append `msg`; false when the ring is full.
    #[inline]
    pub fn push(&mut self, msg: Msg) -> bool {
        let r = self.ring;
        let tail = r.tail.load(Relaxed);
        if tail.wrapping_sub(self.head) >= r.depth {
            self.head = r.head.load(Acquire);
            if tail.wrapping_sub(self.head) >= r.depth {
                return false;
            }
        }
        let slot = &r.slots[tail & r.mask];
        slot.obj.store(
            u64::from(msg.obj.pfn.0) << 32 | u64::from(msg.obj.offset),
            Relaxed,
        );
        slot.size.store(msg.size as u64, Relaxed);
        r.tail.store(tail.wrapping_add(1), Release);
        true
    }
}

/// The consuming end of a [`Ring`], with its cached view of the producer's position and its own
/// read position, which runs ahead of the room it has given back ([`Ring::with_release`]).
pub struct Consumer<'a> {
    ring: &'a Ring,
    tail: usize,
    /// The next position to read.
    head: usize,
    /// The position given back so far (the consumer's copy of the ring's `head`).
    released: usize,
}

impl Consumer<'_> {
    /// Take the oldest message; `None` when the ring is empty.
    #[inline]
    pub fn pop(&mut self) -> Option<Msg> {
        let r = self.ring;
        let head = self.head;
        if head == self.tail {
            self.tail = r.tail.load(Acquire);
            if head == self.tail {
                return None;
            }
        }
        let slot = &r.slots[head & r.mask];
        let packed = slot.obj.load(Relaxed);
        let size = slot.size.load(Relaxed) as usize;
        self.head = head.wrapping_add(1);
        // Give the room back once a release step is read, or when nothing more is known to be
        // queued (the reader's queue is empty): the slot is read before it is handed over.
        if self.head.wrapping_sub(self.released) >= r.release || self.head == self.tail {
            self.released = self.head;
            r.head.store(self.head, Release);
        }
        Some(Msg {
            obj: Obj {
                pfn: Pfn((packed >> 32) as u32),
                offset: packed as u32,
            },
            size,
        })
    }
}

/// Word indices a message of `bytes` touches: the first, every [`TOUCH_STRIDE`]th and the
/// last. The last carries the complement of the sequence number, the others the number.
fn touched_words(bytes: usize) -> impl Iterator<Item = (usize, bool)> {
    let n = (bytes / 8).max(1);
    (0..n)
        .step_by(TOUCH_STRIDE)
        .filter(move |&i| i + 1 < n)
        .map(|i| (i, false))
        .chain(std::iter::once((n - 1, n > 1)))
}

/// Write message `seq` into `obj` (as the sender's copy would).
pub fn write_message(mem: &Mem, obj: Obj, bytes: usize, seq: u64) {
    for (i, complement) in touched_words(bytes) {
        let v = if complement { !seq } else { seq };
        obj.word(mem, i).store(v, Relaxed);
    }
}

/// Check that `obj` holds message `seq` (as the receiver's copy would read it).
pub fn check_message(mem: &Mem, obj: Obj, bytes: usize, seq: u64) -> Result<(), CheckError> {
    for (i, complement) in touched_words(bytes) {
        let want = if complement { !seq } else { seq };
        let got = obj.word(mem, i).load(Relaxed);
        if got != want {
            let found = if complement { !got } else { got };
            return Err(CheckError::Message {
                seq,
                obj,
                word: i,
                found,
            });
        }
    }
    Ok(())
}

/// What a check of the kernel side's state found wrong: a message that is not the one sent,
/// or slab objects or allocator state left behind once a run is over (a leak, or a broken
/// invariant, as the kernel's `slab_debug` and `CONFIG_DEBUG_VM` checks would report).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    #[error(
        "message {seq} at {obj:?}: word {word} says message {found} (lost, duplicated, reordered or overwritten)"
    )]
    Message {
        seq: u64,
        obj: Obj,
        word: usize,
        found: u64,
    },
    #[error("{objects} kmalloc'd objects in {pages} slab frames are still live after the run")]
    Live { objects: u64, pages: u64 },
    /// The engine's own consistency check of the slab or page allocator failed; it reports
    /// its finding as text.
    #[error("{0}")]
    Allocator(String),
}

/// How a pair's two sides waited for each other, each field written by one side only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PairWaits {
    /// Messages the sender could not push at once (the ring was full).
    pub full: u64,
    /// Yields of the sender while the ring was full.
    pub tx_yields: u64,
    /// Messages the receiver found the ring empty before (it had to wait).
    pub empty: u64,
    /// Yields of the receiver while the ring was empty.
    pub rx_yields: u64,
    /// Sum of the ring's fill (messages queued) seen by the receiver every
    /// [`OCCUPANCY_EVERY`] messages, and how many times it looked.
    pub fill_sum: u64,
    pub fill_n: u64,
}

impl PairWaits {
    fn since(&self, base: &PairWaits) -> PairWaits {
        PairWaits {
            full: self.full - base.full,
            tx_yields: self.tx_yields - base.tx_yields,
            empty: self.empty - base.empty,
            rx_yields: self.rx_yields - base.rx_yields,
            fill_sum: self.fill_sum - base.fill_sum,
            fill_n: self.fill_n - base.fill_n,
        }
    }
}

/// The receiver samples the ring's fill once in this many messages.
pub const OCCUPANCY_EVERY: u64 = 64;

#[derive(Default)]
struct TxWaits {
    full: AtomicU64,
    yields: AtomicU64,
}

#[derive(Default)]
struct RxWaits {
    empty: AtomicU64,
    yields: AtomicU64,
    fill_sum: AtomicU64,
    fill_n: AtomicU64,
}

/// One sender/receiver pair.
pub struct Pair {
    pub tx: CpuId,
    pub rx: CpuId,
    ring: Ring,
    /// Messages sent so far (the next sequence number); written by the sender only.
    sent: CachePadded<AtomicU64>,
    /// Messages received so far (the next sequence number expected); written by the receiver.
    received: CachePadded<AtomicU64>,
    /// The sender has stopped and pushes nothing more.
    sender_done: AtomicBool,
    /// The receiver found a bad message or died: the sender stops.
    failed: AtomicBool,
    error: Mutex<Option<String>>,
    tx_waits: CachePadded<TxWaits>,
    rx_waits: CachePadded<RxWaits>,
    /// Host thread ids of the sender and the receiver while they run (0: not running), so
    /// that the sampler can read how long the host kept them off their cores.
    tids: [AtomicI32; 2],
    /// Set by the sampler to have the sender measure the cache-line round trip to the
    /// receiver's core ([`link_probe`]); cleared by the sender with the result in `probe_ns`.
    probe_req: CachePadded<AtomicBool>,
    probe_ns: AtomicU64,
    /// The line the probe passes back and forth: odd values are the sender's, even the
    /// receiver's answers, 0 ends a probe.
    ball: CachePadded<AtomicU64>,
    /// Lock-step pacing ([`NetpipeParams::lockstep`]): messages received so far and the
    /// pair's thread CPU time (ns) when it had received them, published together every
    /// [`PUBLISH_EVERY`] messages so that the sampler divides counts and times of one instant.
    work: Mutex<(u64, u64)>,
}

impl Pair {
    fn new(i: usize, depth: usize, release: usize) -> Pair {
        Pair {
            tx: CpuId((2 * i) as u16),
            rx: CpuId((2 * i + 1) as u16),
            ring: Ring::with_release(depth, release),
            sent: CachePadded::new(AtomicU64::new(0)),
            received: CachePadded::new(AtomicU64::new(0)),
            sender_done: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            error: Mutex::new(None),
            tx_waits: CachePadded::new(TxWaits::default()),
            rx_waits: CachePadded::new(RxWaits::default()),
            tids: [AtomicI32::new(0), AtomicI32::new(0)],
            probe_req: CachePadded::new(AtomicBool::new(false)),
            probe_ns: AtomicU64::new(0),
            ball: CachePadded::new(AtomicU64::new(0)),
            work: Mutex::new((0, 0)),
        }
    }

    /// The waits so far (each field read with relaxed loads: a snapshot).
    pub fn waits(&self) -> PairWaits {
        PairWaits {
            full: self.tx_waits.full.load(Relaxed),
            tx_yields: self.tx_waits.yields.load(Relaxed),
            empty: self.rx_waits.empty.load(Relaxed),
            rx_yields: self.rx_waits.yields.load(Relaxed),
            fill_sum: self.rx_waits.fill_sum.load(Relaxed),
            fill_n: self.rx_waits.fill_n.load(Relaxed),
        }
    }

    fn fail(&self, e: String) {
        self.error.lock().unwrap().get_or_insert(e);
        self.failed.store(true, Relaxed);
    }
}

/// Marks a pair failed if its receiver unwinds, so that the sender does not wait on a ring
/// nobody empties.
struct ReceiverGuard<'a>(&'a Pair);

impl Drop for ReceiverGuard<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.failed.store(true, Relaxed);
        }
    }
}

/// A pair's messages so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PairTotals {
    pub sent: u64,
    pub received: u64,
}

/// What to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetpipeParams {
    pub pairs: usize,
    /// The datagram size (netperf's send size).
    pub send_size: usize,
    /// Messages in flight per pair at most; `None`: what the receiving socket would queue
    /// ([`socket_queue_depth`] of the bytes allocated per message).
    pub ring_depth: Option<usize>,
    /// kmalloc what `alloc_skb` would ([`skb_alloc_size`]) rather than the send size alone.
    pub skb: bool,
    /// Run each pair's two sides in turns on one host thread and rate it by that thread's CPU
    /// time (the default; see the module docs, "Lock-step pacing"), rather than as two
    /// free-running threads on two host cores rated by the wall clock.
    pub lockstep: bool,
}

impl NetpipeParams {
    pub fn new(pairs: usize, send_size: usize) -> NetpipeParams {
        NetpipeParams {
            pairs,
            send_size,
            ring_depth: None,
            skb: true,
            lockstep: true,
        }
    }

    /// Bytes kmalloc'd per message.
    pub fn alloc_size(&self) -> usize {
        if self.skb {
            skb_alloc_size(self.send_size)
        } else {
            self.send_size
        }
    }

    /// Messages in flight per pair at most.
    pub fn depth(&self) -> usize {
        self.ring_depth
            .unwrap_or_else(|| socket_queue_depth(self.alloc_size()))
    }

    /// Messages the receiver reads before it gives their room back while more are queued:
    /// [`socket_release_step`] for the socket's queue, one message for a depth of its own.
    pub fn release(&self) -> usize {
        match self.ring_depth {
            Some(_) => 1,
            None => socket_release_step(self.alloc_size()),
        }
    }
}

/// The workload on one booted engine, one send size.
pub struct Netpipe {
    kernel: Arc<Kernel>,
    kmalloc: Kmalloc,
    pairs: Vec<Arc<Pair>>,
    params: NetpipeParams,
}

impl Netpipe {
    /// Set up `p.pairs` pairs on `kernel`, which needs two virtual CPUs per pair.
    pub fn new(kernel: &Arc<Kernel>, p: &NetpipeParams) -> Result<Netpipe, WorkloadError> {
        if p.pairs == 0 || p.send_size == 0 {
            return Err(WorkloadError::Config(
                "netpipe needs at least one pair and a send size of at least one byte".into(),
            ));
        }
        if kernel.nr_cpus() < 2 * p.pairs {
            return Err(WorkloadError::Config(format!(
                "netpipe with {} pairs needs {} virtual CPUs; the engine has {}",
                p.pairs,
                2 * p.pairs,
                kernel.nr_cpus()
            )));
        }
        Ok(Netpipe {
            kernel: kernel.clone(),
            kmalloc: Kmalloc::new(kernel.mem().clone()),
            pairs: (0..p.pairs)
                .map(|i| Arc::new(Pair::new(i, p.depth(), p.release())))
                .collect(),
            params: *p,
        })
    }

    pub fn kernel(&self) -> &Arc<Kernel> {
        &self.kernel
    }

    pub fn kmalloc(&self) -> &Kmalloc {
        &self.kmalloc
    }

    pub fn params(&self) -> &NetpipeParams {
        &self.params
    }

    pub fn pairs(&self) -> &[Arc<Pair>] {
        &self.pairs
    }

    /// Messages sent and received per pair so far.
    pub fn totals(&self) -> Vec<PairTotals> {
        self.pairs
            .iter()
            .map(|p| PairTotals {
                sent: p.sent.load(Acquire),
                received: p.received.load(Acquire),
            })
            .collect()
    }

    /// The pairs' waits so far, summed.
    pub fn waits(&self) -> PairWaits {
        self.pairs.iter().fold(PairWaits::default(), |a, p| {
            let w = p.waits();
            PairWaits {
                full: a.full + w.full,
                tx_yields: a.tx_yields + w.tx_yields,
                empty: a.empty + w.empty,
                rx_yields: a.rx_yields + w.rx_yields,
                fill_sum: a.fill_sum + w.fill_sum,
                fill_n: a.fill_n + w.fill_n,
            }
        })
    }

    fn oom(&self, e: KmallocError) -> WorkloadError {
        WorkloadError::OutOfMemory(format!(
            "the engine's arena is exhausted ({e}) sending {}-byte messages",
            self.params.send_size
        ))
    }

    /// The sender: until `halt`, the receiver fails or `limit` more messages are sent.
    fn send_loop(
        &self,
        pair: &Pair,
        counter: &AtomicU64,
        halt: &AtomicBool,
        limit: Option<u64>,
    ) -> Result<(), WorkloadError> {
        let mem = self.kmalloc.mem();
        let bytes = self.params.alloc_size();
        let mut ring = pair.ring.producer();
        let mut seq = pair.sent.load(Relaxed);
        let end = limit.map(|n| seq + n);
        while !halt.load(Relaxed) && !pair.failed.load(Relaxed) && end != Some(seq) {
            if pair.probe_req.load(Acquire) {
                let ns = link_probe(pair, halt).unwrap_or(0);
                pair.probe_ns.store(ns, Relaxed);
                pair.probe_req.store(false, Release);
            }
            let obj = self
                .kmalloc
                .kmalloc(pair.tx, bytes)
                .map_err(|e| self.oom(e))?;
            write_message(mem, obj, bytes, seq);
            let msg = Msg { obj, size: bytes };
            let mut backoff = Backoff::new();
            // A full socket buffer: wait for the receiver (UDP drops are not modelled).
            if !ring.push(msg) {
                bump(&pair.tx_waits.full);
                while !ring.push(msg) {
                    if pair.failed.load(Relaxed) {
                        self.kmalloc.kfree(pair.tx, obj);
                        return Ok(());
                    }
                    if backoff.is_yielding() {
                        bump(&pair.tx_waits.yields);
                    }
                    backoff.snooze();
                }
            }
            seq += 1;
            pair.sent.store(seq, Release);
            bump(counter);
        }
        Ok(())
    }

    /// The receiver: until the sender is done and the ring is empty.
    fn recv_loop(&self, pair: &Pair) {
        let _guard = ReceiverGuard(pair);
        let mem = self.kmalloc.mem();
        let mut ring = pair.ring.consumer();
        let mut expect = pair.received.load(Relaxed);
        let mut backoff = Backoff::new();
        let mut waiting = false;
        loop {
            let msg = match ring.pop() {
                Some(m) => m,
                None if pair.sender_done.load(Acquire) => {
                    // Everything pushed before `done` is visible now: one last look.
                    match ring.pop() {
                        Some(m) => m,
                        None => return,
                    }
                }
                None => {
                    if pair.ball.load(Acquire) % 2 == 1 {
                        link_answer(pair);
                        backoff.reset();
                        continue;
                    }
                    if !waiting {
                        waiting = true;
                        bump(&pair.rx_waits.empty);
                    }
                    if backoff.is_yielding() {
                        bump(&pair.rx_waits.yields);
                    }
                    backoff.snooze();
                    continue;
                }
            };
            backoff.reset();
            waiting = false;
            if expect.is_multiple_of(OCCUPANCY_EVERY) {
                // Queued behind this one, as the producer has published so far.
                let queued = pair.ring.len() as u64;
                bump(&pair.rx_waits.fill_n);
                let s = &pair.rx_waits.fill_sum;
                s.store(s.load(Relaxed) + queued, Relaxed);
            }
            if msg.size != self.params.alloc_size() {
                pair.fail(format!(
                    "message {expect} has size {} instead of {}",
                    msg.size,
                    self.params.alloc_size()
                ));
            } else if let Err(e) = check_message(mem, msg.obj, msg.size, expect) {
                pair.fail(e.to_string());
            }
            self.kmalloc.kfree(pair.rx, msg.obj);
            expect += 1;
            pair.received.store(expect, Release);
        }
    }

    /// A lock-step pair on the calling thread, until `halt`, a failure or `limit` more
    /// messages: the sender's side tops the socket up (kmalloc on the sender's virtual CPU,
    /// write, push) until it is full, then the receiver's side reads one release step (pop,
    /// check, kfree on the receiver's virtual CPU: a quarter of the receive buffer, the room
    /// `udp_rmem_release` gives back at a time, [`Ring::release`]), and so on; at the end the
    /// receiver reads what is left. The socket so stays between three-quarters full and full,
    /// as a free-running pair's does in steady state: emptying it every turn would free a
    /// whole socket of buffers in a row, which empties their slabs and sends them back to the
    /// page allocator (`discard_slab`) far more often than netperf does. The engine sees two
    /// CPUs, so every free is as remote as in the free-running pair; the host runs one side
    /// at a time on one core, so no line moves between host cores and neither side ever waits.
    fn lockstep_loop(
        &self,
        pair: &Pair,
        halt: &AtomicBool,
        limit: Option<u64>,
    ) -> Result<(), WorkloadError> {
        let mem = self.kmalloc.mem();
        let bytes = self.params.alloc_size();
        let mut tx = pair.ring.producer();
        let mut rx = pair.ring.consumer();
        let mut seq = pair.sent.load(Relaxed);
        let mut expect = pair.received.load(Relaxed);
        let end = limit.map(|n| seq + n);
        let publish = |received: u64| {
            *pair.work.lock().unwrap() = (received, crate::pft::thread_cpu_ns());
        };
        publish(expect);
        let mut published = expect;
        while !halt.load(Relaxed) && !pair.failed.load(Relaxed) && end != Some(seq) {
            // The sender's turn: top the socket up until it is full.
            while pair.ring.len() < pair.ring.capacity() && end != Some(seq) {
                let obj = self
                    .kmalloc
                    .kmalloc(pair.tx, bytes)
                    .map_err(|e| self.oom(e))?;
                write_message(mem, obj, bytes, seq);
                if !tx.push(Msg { obj, size: bytes }) {
                    self.kmalloc.kfree(pair.tx, obj);
                    return Err(WorkloadError::Fault(format!(
                        "pair on CPUs {} and {}: the ring refused message {seq} below its depth",
                        pair.tx.0, pair.rx.0
                    )));
                }
                seq += 1;
            }
            pair.sent.store(seq, Release);
            // The receiver's turn: read one release step (or what is queued, at the end).
            for _ in 0..pair.ring.release() {
                if !self.lockstep_read(pair, &mut rx, &mut expect) {
                    break;
                }
            }
            pair.received.store(expect, Release);
            if expect - published >= PUBLISH_EVERY {
                publish(expect);
                published = expect;
            }
        }
        // Every message sent is received: the receiver reads what is left.
        while self.lockstep_read(pair, &mut rx, &mut expect) {}
        pair.received.store(expect, Release);
        publish(expect);
        Ok(())
    }

    /// The lock-step receiver reads one message (pop, check, kfree on its virtual CPU); false
    /// when the socket is empty.
    fn lockstep_read(&self, pair: &Pair, rx: &mut Consumer<'_>, expect: &mut u64) -> bool {
        let Some(msg) = rx.pop() else {
            return false;
        };
        if expect.is_multiple_of(OCCUPANCY_EVERY) {
            bump(&pair.rx_waits.fill_n);
            let f = &pair.rx_waits.fill_sum;
            f.store(f.load(Relaxed) + pair.ring.len() as u64, Relaxed);
        }
        if let Err(e) = check_message(self.kmalloc.mem(), msg.obj, msg.size, *expect) {
            pair.fail(e.to_string());
        }
        self.kmalloc.kfree(pair.rx, msg.obj);
        *expect += 1;
        true
    }

    /// Run one pair: the receiver on a thread of its own, the sender on the calling thread.
    fn run_pair(
        &self,
        pair: &Pair,
        counter: &AtomicU64,
        halt: &AtomicBool,
        limit: Option<u64>,
    ) -> Result<(), WorkloadError> {
        pair.sender_done.store(false, Relaxed);
        let r = std::thread::scope(|s| {
            let rx = std::thread::Builder::new()
                .name(format!("netpipe-rx{}", pair.rx.0))
                .spawn_scoped(s, || {
                    pin_to_core(pair.rx.idx());
                    pair.tids[1].store(current_tid(), Relaxed);
                    self.kernel.mem().enter_lock_stats();
                    self.recv_loop(pair);
                    pair.tids[1].store(0, Relaxed);
                })
                .map_err(|e| WorkloadError::Config(format!("cannot start a receiver: {e}")))?;
            pin_to_core(pair.tx.idx());
            pair.tids[0].store(current_tid(), Relaxed);
            // Both sides are CPUs of this kernel: their lock statistics count into it.
            self.kernel.mem().enter_lock_stats();
            let r = self.send_loop(pair, counter, halt, limit);
            pair.tids[0].store(0, Relaxed);
            pair.sender_done.store(true, Release);
            if rx.join().is_err() {
                return Err(WorkloadError::Fault(format!(
                    "the receiver on CPU {} panicked",
                    pair.rx.0
                )));
            }
            r
        });
        if let Some(e) = pair.error.lock().unwrap().clone() {
            return Err(WorkloadError::Fault(e));
        }
        r
    }

    /// Run until `spec` is sampled (will-it-scale style): one context per pair, each pinned and
    /// started together as [`crate::runner::run_continuous`] does; each sample is messages per second
    /// summed over senders. A kept sample in which the host kept a pair thread off its core for
    /// more than [`HOST_WAIT_LIMIT`] of the interval is taken again (see [`sample_quiet`]).
    /// Every message sent has been received and freed when this returns.
    pub fn run(
        &self,
        spec: SampleSpec,
        stop: &AtomicBool,
        hooks: Hooks<'_>,
    ) -> Result<Continuous, WorkloadError> {
        self.run_sampled(spec, stop, hooks).map(|(c, _)| c)
    }

    /// [`Netpipe::run`], also saying how the host disturbed the samples.
    pub fn run_sampled(
        &self,
        spec: SampleSpec,
        stop: &AtomicBool,
        hooks: Hooks<'_>,
    ) -> Result<(Continuous, HostSampling), WorkloadError> {
        if self.params.lockstep {
            return self.run_lockstep(spec, stop, hooks);
        }
        let n = self.pairs.len();
        let counters: Vec<Counter> = (0..n)
            .map(|_| CachePadded::new(AtomicU64::new(0)))
            .collect();
        let halt = AtomicBool::new(false);
        let failure: Mutex<Option<WorkloadError>> = Mutex::new(None);
        let start = std::sync::Barrier::new(n + 1);
        let mut out = (Continuous::default(), HostSampling::default());
        std::thread::scope(|s| {
            for (i, pair) in self.pairs.iter().enumerate() {
                let (counters, halt, failure, start) = (&counters, &halt, &failure, &start);
                s.spawn(move || {
                    pin_to_core(i);
                    start.wait();
                    if let Err(e) = self.run_pair(pair, &counters[i], halt, None) {
                        failure.lock().unwrap().get_or_insert(e);
                        halt.store(true, Relaxed);
                    }
                });
            }
            start.wait();
            // The first window's host waits need every thread's id: give the threads a moment
            // (at most a second) to start and publish them.
            let started = Instant::now();
            while self
                .pairs
                .iter()
                .any(|p| p.tids.iter().any(|t| t.load(Relaxed) == 0))
                && !halt.load(Relaxed)
                && started.elapsed() < Duration::from_secs(1)
            {
                std::thread::sleep(Duration::from_millis(1));
            }
            out = sample_quiet(
                &|| counters.iter().map(|c| c.load(Relaxed)).collect(),
                &mut || halt.load(Relaxed),
                HostProbes {
                    wait: &|| self.host_wait(),
                    link: &|| self.link_probe(&halt),
                    link_best: &LINK_BEST,
                },
                spec,
                spec.samples,
                stop,
                hooks,
            );
            halt.store(true, Relaxed);
        });
        if let Some(e) = failure.into_inner().unwrap() {
            return Err(e);
        }
        Ok(out)
    }

    /// [`Netpipe::run_sampled`] for lock-step pairs: one host thread per pair, pinned to core
    /// `i` for pair `i`, sampled by [`sample_cpu`]. Nothing of the host is probed: the samples
    /// are rates per CPU second, which the host's preemption cannot lower and the placement of
    /// the host's cores does not reach (the returned [`HostSampling`] says `measured: false`).
    fn run_lockstep(
        &self,
        spec: SampleSpec,
        stop: &AtomicBool,
        hooks: Hooks<'_>,
    ) -> Result<(Continuous, HostSampling), WorkloadError> {
        let n = self.pairs.len();
        let halt = AtomicBool::new(false);
        let failure: Mutex<Option<WorkloadError>> = Mutex::new(None);
        let start = std::sync::Barrier::new(n + 1);
        let mut out = Continuous::default();
        std::thread::scope(|s| {
            for (i, pair) in self.pairs.iter().enumerate() {
                let (halt, failure, start) = (&halt, &failure, &start);
                s.spawn(move || {
                    pin_to_core(i);
                    self.kernel.mem().enter_lock_stats();
                    start.wait();
                    if let Err(e) = self.lockstep_loop(pair, halt, None) {
                        failure.lock().unwrap().get_or_insert(e);
                        halt.store(true, Relaxed);
                    }
                });
            }
            start.wait();
            out = sample_cpu(
                &|| self.pairs.iter().map(|p| *p.work.lock().unwrap()).collect(),
                &mut || halt.load(Relaxed) || self.pairs.iter().any(|p| p.failed.load(Relaxed)),
                spec,
                stop,
                hooks,
            );
            halt.store(true, Relaxed);
        });
        if let Some(e) = failure.into_inner().unwrap() {
            return Err(e);
        }
        for p in &self.pairs {
            if let Some(e) = p.error.lock().unwrap().clone() {
                return Err(WorkloadError::Fault(e));
            }
        }
        Ok((out, HostSampling::default()))
    }

    /// Have every pair's sender probe the link to its receiver's core ([`link_probe`]) and wait
    /// for the results: the worst pair's round trip (ns). `None` when a pair did not answer
    /// within a second (it failed, or the run is ending), or when the pairs' threads outnumber
    /// the host's cores.
    pub fn link_probe(&self, halt: &AtomicBool) -> Option<u64> {
        // With more pair threads than host cores the round trip measures the scheduler, not
        // the distance between two cores.
        if 2 * self.pairs.len() > crate::pin::allowed_cpus().len() {
            return None;
        }
        for p in &self.pairs {
            p.probe_req.store(true, Release);
        }
        let started = Instant::now();
        while self.pairs.iter().any(|p| p.probe_req.load(Acquire)) {
            if halt.load(Relaxed) || started.elapsed() > Duration::from_secs(1) {
                for p in &self.pairs {
                    p.probe_req.store(false, Relaxed);
                }
                return None;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        self.pairs.iter().map(|p| p.probe_ns.load(Relaxed)).max()
    }

    /// Nanoseconds each running pair thread has waited for a host core so far (`run_delay`
    /// in `/proc/self/task/<tid>/schedstat`), sender and receiver of every pair in turn.
    /// `None` while a thread has not started or the host does not keep scheduler statistics.
    pub fn host_wait(&self) -> Option<Vec<u64>> {
        let mut v = Vec::with_capacity(2 * self.pairs.len());
        for p in &self.pairs {
            for t in &p.tids {
                v.push(run_delay_ns(t.load(Relaxed))?);
            }
        }
        Some(v)
    }

    /// Send exactly `per_pair` messages on every pair and wait until all are received: a run
    /// whose counts do not depend on timing, for tests.
    pub fn run_messages(&self, per_pair: u64) -> Result<(), WorkloadError> {
        let halt = AtomicBool::new(false);
        if self.params.lockstep {
            let results: Vec<Result<(), WorkloadError>> = std::thread::scope(|s| {
                let handles: Vec<_> = self
                    .pairs
                    .iter()
                    .enumerate()
                    .map(|(i, pair)| {
                        let halt = &halt;
                        s.spawn(move || {
                            pin_to_core(i);
                            // The pair's CPUs are this kernel's: count their lock statistics.
                            self.kernel.mem().enter_lock_stats();
                            self.lockstep_loop(pair, halt, Some(per_pair))
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join().unwrap_or_else(|_| {
                            Err(WorkloadError::Fault("a netpipe pair panicked".into()))
                        })
                    })
                    .collect()
            });
            for p in &self.pairs {
                if let Some(e) = p.error.lock().unwrap().clone() {
                    return Err(WorkloadError::Fault(e));
                }
            }
            return results.into_iter().collect();
        }
        let counters: Vec<Counter> = (0..self.pairs.len())
            .map(|_| CachePadded::new(AtomicU64::new(0)))
            .collect();
        let results: Vec<Result<(), WorkloadError>> = std::thread::scope(|s| {
            let handles: Vec<_> = self
                .pairs
                .iter()
                .zip(&counters)
                .map(|(pair, c)| s.spawn(|| self.run_pair(pair, c, &halt, Some(per_pair))))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(WorkloadError::Fault("a netpipe sender panicked".into()))
                    })
                })
                .collect()
        });
        results.into_iter().collect()
    }

    /// After a run: give empty slabs back, drain every per-CPU list and check the slab and page
    /// allocators. Errors when a kmalloc'd object is still live or an invariant is broken;
    /// otherwise returns the page allocator's census, or `None` when the policy runs background
    /// threads (the prezeroer, the pcp decay worker) that keep the allocator from being quiescent.
    pub fn quiesce(&self) -> Result<Option<Census>, CheckError> {
        let slab = self.kmalloc.slab();
        slab.shrink_on(CpuId(0));
        let c = slab.check().map_err(CheckError::Allocator)?.total();
        if c.objects_in_use != 0 || c.pages != 0 {
            return Err(CheckError::Live {
                objects: c.objects_in_use,
                pages: c.pages,
            });
        }
        let mem = self.kernel.mem();
        mem.drain_all_pages();
        if has_background_threads(mem.policy()) {
            return Ok(None);
        }
        mem.check().map(Some).map_err(CheckError::Allocator)
    }
}

/// Does the allocator of `policy` run threads of its own?
fn has_background_threads(policy: &Policy) -> bool {
    policy.alloc.prezero || policy.pcp.tune == PcpTune::Adaptive
}

/// One send size's measurement.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SizeRun {
    pub send_size: usize,
    /// Messages per second summed over pairs, one entry per kept sample.
    pub samples: Vec<f64>,
    /// Messages sent over the measured window, summed over pairs.
    pub messages: u64,
    /// The engine's counters over the measured window.
    pub counters: EngineCounters,
    pub interrupted: bool,
}

/// A sweep over send sizes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sweep {
    pub sizes: Vec<SizeRun>,
    /// Totals over the sizes, then per size: lock classes `zone->lock [send-N]` and
    /// `pcp->lock [send-N]`, events `send-N/<event>` for the allocator's events and
    /// `send-N/messages`.
    pub counters: EngineCounters,
    pub interrupted: bool,
}

/// Events reported per send size in [`Sweep::counters`].
const PER_SIZE_EVENTS: [&str; 19] = [
    "pcp_alloc_hit",
    "pcp_refill",
    "pcp_drain",
    "zone_alloc",
    "zone_free",
    "slab_new",
    "slab_free",
    "ring_full",
    "ring_empty",
    "tx_yield",
    "rx_yield",
    "ring_fill_sum",
    "ring_fill_looks",
    "samples_retaken",
    "samples_disturbed",
    "host_wait_us",
    "samples_misplaced",
    "link_min_ns",
    "link_max_ns",
];

/// Lock classes reported per send size in [`Sweep::counters`].
const PER_SIZE_LOCKS: [&str; 2] = ["zone->lock", "pcp->lock"];

/// The engine's counters plus the slab allocator's: slabs taken from and given back to the
/// page allocator (events `slab_new`, `slab_free`) and the slab locks.
fn counters(erun: &EngineRun, slab: &SlabAllocator) -> EngineCounters {
    let mut c = erun.counters();
    let s = slab.stats();
    for (name, v) in [("slab_new", s.alloc_slab), ("slab_free", s.free_slab)] {
        if v > 0 {
            c.events.push((name.into(), v));
        }
    }
    let l = slab.lock_stats();
    for (name, s) in [("list_lock", l.list_lock), ("slab_lock", l.slab_lock)] {
        c.locks
            .push((name.into(), s.acquisitions, s.contended, s.wait_ns));
    }
    c
}

fn add_event(to: &mut Vec<(String, u64)>, name: &str, v: u64) {
    match to.iter_mut().find(|(n, _)| n == name) {
        Some((_, x)) => *x += v,
        None => to.push((name.to_string(), v)),
    }
}

/// Fold one size's counters into a sweep's: into the totals, and per size.
fn merge(total: &mut EngineCounters, per_size: &mut EngineCounters, r: &SizeRun) {
    let tag = format!("send-{}", r.send_size);
    for (n, v) in &r.counters.events {
        add_event(&mut total.events, n, *v);
        if PER_SIZE_EVENTS.contains(&n.as_str()) {
            per_size.events.push((format!("{tag}/{n}"), *v));
        }
    }
    per_size
        .events
        .push((format!("{tag}/messages"), r.messages));
    for l in &r.counters.locks {
        match total.locks.iter_mut().find(|t| t.0 == l.0) {
            Some(t) => {
                t.1 += l.1;
                t.2 += l.2;
                t.3 += l.3;
            }
            None => total.locks.push(l.clone()),
        }
        if PER_SIZE_LOCKS.contains(&l.0.as_str()) {
            per_size
                .locks
                .push((format!("{} [{tag}]", l.0), l.1, l.2, l.3));
        }
    }
}

/// Measure `pairs` pairs at each of `sizes` (normally [`SEND_SIZES`]), each size on a freshly
/// booted engine of `arena` bytes and `nr_cpus` virtual CPUs (at least two per pair), with
/// `spec`'s warm-up and samples. `progress(done, total, kept)` counts samples over the whole
/// sweep; `kept` is a kept sample as soon as it is taken, with its send size.
/// After each size, every message sent must have been received and every buffer freed (the
/// page allocator is checked too when the policy has no background threads). A stop request
/// ends the sweep after the current size's sample, marked interrupted.
#[allow(clippy::too_many_arguments)]
pub fn run_sizes(
    policy: &Policy,
    arena: u64,
    nr_cpus: usize,
    pairs: usize,
    sizes: &[usize],
    spec: SampleSpec,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(usize, usize, Option<(usize, f64)>),
) -> Result<Sweep, WorkloadError> {
    let per = spec.warmup + spec.samples;
    let total = per * sizes.len();
    let mut out = Sweep::default();
    let mut per_size = EngineCounters::default();
    for (i, &size) in sizes.iter().enumerate() {
        let k = engine::boot(policy, arena, nr_cpus)?;
        let np = Netpipe::new(&k, &NetpipeParams::new(pairs, size))?;
        let erun = EngineRun {
            kernel: k.clone(),
            mms: Vec::new(),
        };
        let mut waits0 = PairWaits::default();
        let mut start = || {
            erun.reset();
            np.kmalloc().slab().reset_stats();
            waits0 = np.waits();
        };
        let mut sample = |d: usize, _t: usize, kept: Option<f64>| {
            progress(i * per + d, total, kept.map(|v| (size, v)))
        };
        let (c, host) = np.run_sampled(
            spec,
            stop,
            Hooks {
                measure_start: &mut start,
                sample: &mut sample,
            },
        )?;
        let mut counters = counters(&erun, np.kmalloc().slab());
        let w = np.waits().since(&waits0);
        for (name, v) in [
            ("ring_full", w.full),
            ("ring_empty", w.empty),
            ("tx_yield", w.tx_yields),
            ("rx_yield", w.rx_yields),
            ("ring_fill_sum", w.fill_sum),
            ("ring_fill_looks", w.fill_n),
            ("samples_retaken", host.retaken),
            ("samples_disturbed", host.disturbed),
            ("host_wait_us", host.host_wait_ns / 1000),
            ("samples_misplaced", host.misplaced),
            ("link_min_ns", host.link_min_ns),
            ("link_max_ns", host.link_max_ns),
        ] {
            counters.events.push((name.into(), v));
        }
        for (p, t) in np.totals().iter().enumerate() {
            if t.sent != t.received {
                return Err(WorkloadError::Fault(format!(
                    "send-{size}: pair {p} sent {} messages but received {}",
                    t.sent, t.received
                )));
            }
        }
        np.quiesce()
            .map_err(|e| WorkloadError::Fault(format!("send-{size}: {e}")))?;
        let r = SizeRun {
            send_size: size,
            messages: c.per_task.iter().sum(),
            samples: c.samples,
            counters,
            interrupted: c.interrupted,
        };
        merge(&mut out.counters, &mut per_size, &r);
        out.sizes.push(r);
        if c.interrupted {
            out.interrupted = true;
            break;
        }
    }
    out.counters.events.append(&mut per_size.events);
    out.counters.locks.append(&mut per_size.locks);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pagelab_mm::MemConfig;
    use pagelab_mm::vmstat::VmEvent;

    fn policy(lists: &str) -> Policy {
        Policy::from_toml_str(&format!(
            "[pcp]\nlists = \"{lists}\"\nbatch = 31\nhigh = 186\ntune = \"fixed\"\n"
        ))
        .unwrap()
    }

    fn kernel(lists: &str, cpus: usize) -> Arc<Kernel> {
        Kernel::new(&MemConfig::new(32 << 20, cpus), &policy(lists)).unwrap()
    }

    #[test]
    fn skb_sizes_put_the_largest_sends_on_the_page_allocator() {
        assert_eq!(skb_alloc_size(64), 448);
        assert_eq!(skb_alloc_size(4096), 4480);
        assert_eq!(skb_alloc_size(8192), 8576);
        assert_eq!(skb_alloc_size(16384), 16768);
        let k = kernel("order0", 2);
        let km = Kmalloc::new(k.mem().clone());
        for size in SEND_SIZES {
            let bytes = skb_alloc_size(size);
            assert_eq!(Kmalloc::is_large(bytes), size >= 8192, "send-{size}");
            // Everything above a page is served at order 1 to 3.
            let order = km.page_order(bytes).unwrap();
            if bytes > PAGE_SIZE {
                assert!((1..=3).contains(&order), "send-{size}: order {order}");
            }
        }
        assert_eq!(km.page_order(skb_alloc_size(8192)), Some(2));
        assert_eq!(km.page_order(skb_alloc_size(16384)), Some(3));
        assert_eq!(km.page_order(0), None);
    }

    #[test]
    fn ring_depth_is_what_a_default_udp_socket_queues() {
        // truesize = ksize + 256: 512 + 256 for send-64, a whole order-3 block + 256 for
        // send-16384; 212992 / truesize queued, plus the datagram that crosses the limit.
        let depths: Vec<usize> = SEND_SIZES
            .iter()
            .map(|&s| NetpipeParams::new(1, s).depth())
            .collect();
        assert_eq!(depths, [278, 278, 167, 93, 49, 49, 26, 13, 7]);
        assert_eq!(kmalloc_ksize(skb_alloc_size(8192)), 4 * PAGE_SIZE);
        // 256 packets of SKB_TRUESIZE(256) make rmem_default, as in the kernel.
        assert_eq!(SK_RCVBUF, 256 * (256 + SKB_STRUCT + SKB_SHARED_INFO));
        let fixed = NetpipeParams {
            ring_depth: Some(5),
            ..NetpipeParams::new(1, 64)
        };
        assert_eq!(fixed.depth(), 5);
    }

    #[test]
    fn a_full_socket_opens_a_quarter_of_its_buffer_at_a_time() {
        // udp_rmem_release: room comes back in steps of sk_rcvbuf / 4 of truesize while the
        // reader has more queued, and all at once when it has read everything.
        let steps: Vec<usize> = SEND_SIZES
            .iter()
            .map(|&s| NetpipeParams::new(1, s).release())
            .collect();
        assert_eq!(steps, [70, 70, 42, 24, 13, 13, 7, 4, 2]);
        let fixed = NetpipeParams {
            ring_depth: Some(5),
            ..NetpipeParams::new(1, 64)
        };
        assert_eq!(fixed.release(), 1);

        let msg = |i: u32| Msg {
            obj: Obj {
                pfn: Pfn(i),
                offset: 0,
            },
            size: 1,
        };
        let r = Ring::with_release(10, 4);
        let (mut p, mut c) = (r.producer(), r.consumer());
        for i in 0..10 {
            assert!(p.push(msg(i)));
        }
        assert!(!p.push(msg(10)), "full");
        // Three read: no room yet; the fourth gives four slots back.
        for i in 0..3 {
            assert_eq!(c.pop(), Some(msg(i)));
            assert!(!p.push(msg(10)), "room before a release step, after {i}");
        }
        assert_eq!(r.len(), 10, "read but not given back: still charged");
        assert_eq!(c.pop(), Some(msg(3)));
        assert_eq!(r.len(), 6);
        for i in 10..14 {
            assert!(p.push(msg(i)));
        }
        assert!(!p.push(msg(14)));
        // The reader catches up with everything queued: the rest comes back at once.
        for i in 4..14 {
            assert_eq!(c.pop(), Some(msg(i)));
        }
        assert_eq!(c.pop(), None);
        assert!(r.is_empty());
        // A reader that keeps up gives each message back as it reads it.
        assert!(p.push(msg(14)));
        assert_eq!(c.pop(), Some(msg(14)));
        assert!(r.is_empty());
    }

    #[test]
    fn touched_words_cover_first_stride_and_last() {
        let w: Vec<_> = touched_words(8 * 200).collect();
        assert_eq!(
            w,
            vec![
                (0, false),
                (64, false),
                (128, false),
                (192, false),
                (199, true)
            ]
        );
        assert_eq!(touched_words(8).collect::<Vec<_>>(), vec![(0, false)]);
        assert_eq!(
            touched_words(8 * 65).collect::<Vec<_>>(),
            vec![(0, false), (64, true)]
        );
    }

    #[test]
    fn ring_is_fifo_and_bounded() {
        // The bound is the depth asked for, not the power of two of the slots.
        let r = Ring::new(3);
        assert_eq!(r.capacity(), 3);
        let (mut p, mut c) = (r.producer(), r.consumer());
        let msg = |i: u32| Msg {
            obj: Obj {
                pfn: Pfn(i),
                offset: 8 * i,
            },
            size: i as usize,
        };
        assert_eq!(c.pop(), None);
        for round in 0..5u32 {
            for i in 0..3 {
                assert!(p.push(msg(round * 10 + i)));
            }
            assert!(!p.push(msg(99)), "a full ring refuses");
            assert_eq!(r.len(), 3);
            for i in 0..3 {
                assert_eq!(c.pop(), Some(msg(round * 10 + i)));
            }
            assert_eq!(c.pop(), None);
            assert!(r.is_empty());
        }
    }

    #[test]
    fn ring_hands_messages_across_threads_in_order() {
        let r = Ring::new(8);
        const N: u32 = 200_000;
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut p = r.producer();
                for i in 0..N {
                    let m = Msg {
                        obj: Obj {
                            pfn: Pfn(i),
                            offset: i % 4096,
                        },
                        size: i as usize,
                    };
                    while !p.push(m) {
                        std::hint::spin_loop();
                    }
                }
            });
            let mut c = r.consumer();
            let mut next = 0;
            while next < N {
                if let Some(m) = c.pop() {
                    assert_eq!(
                        (m.obj.pfn.0, m.obj.offset, m.size),
                        (next, next % 4096, next as usize)
                    );
                    next += 1;
                }
            }
        });
        assert!(r.is_empty());
    }

    #[test]
    fn kmalloc_large_is_a_tagged_compound_block_and_kfree_returns_it() {
        let k = kernel("high-order", 2);
        let km = Kmalloc::new(k.mem().clone());
        let mem = k.mem();
        let before = mem.check().unwrap();
        let big = km.kmalloc(CpuId(0), 16768).unwrap();
        assert_eq!(big.offset, 0);
        assert!(mem.pages()[big.pfn].test(pg::HEAD));
        assert_eq!(mem.compound_head(big.pfn.offset(7)), big.pfn);
        let small = km.kmalloc(CpuId(0), 4480).unwrap();
        write_message(mem, big, 16768, 7);
        check_message(mem, big, 16768, 7).unwrap();
        // The error names the message expected and the one found.
        assert!(matches!(
            check_message(mem, big, 16768, 8),
            Err(CheckError::Message {
                seq: 8,
                found: 7,
                ..
            })
        ));
        // Freed on the other CPU, as the receiver does.
        km.kfree(CpuId(1), big);
        km.kfree(CpuId(1), small);
        assert_eq!(mem.pages()[big.pfn].mapping.load(Relaxed), 0);
        km.slab().shrink();
        mem.drain_all_pages();
        assert_eq!(mem.check().unwrap().allocated, before.allocated);
        assert_eq!(km.kmalloc(CpuId(0), 0), Err(KmallocError::ZeroSize));
    }

    #[test]
    #[should_panic(expected = "neither a slab object nor a kmalloc_large block")]
    fn kfree_of_a_plain_page_panics() {
        let k = kernel("order0", 2);
        let km = Kmalloc::new(k.mem().clone());
        let pfn = k.mem().alloc_pages(CpuId(0), 2, Gfp::KERNEL).unwrap();
        km.kfree(CpuId(0), Obj { pfn, offset: 0 });
    }

    #[test]
    fn counted_run_delivers_every_message_and_frees_every_buffer() {
        for (lists, lockstep) in [
            ("order0", true),
            ("high-order", true),
            ("order0", false),
            ("high-order", false),
        ] {
            let k = kernel(lists, 4);
            let base = k.mem().check().unwrap();
            // Count only the run's allocations, not the boot's (the zero page).
            k.mem().events().reset();
            let mut p = NetpipeParams::new(2, 16384);
            p.lockstep = lockstep;
            let np = Netpipe::new(&k, &p).unwrap();
            np.run_messages(1000).unwrap();
            np.run_messages(500).unwrap();
            for t in np.totals() {
                assert_eq!(
                    t,
                    PairTotals {
                        sent: 1500,
                        received: 1500
                    }
                );
            }
            let ev = k.mem().events();
            // Order-3 blocks: through the zone on order-0 lists, through the pcp otherwise.
            if lists == "order0" {
                assert_eq!(ev.sum(VmEvent::ZoneAlloc), 3000);
                assert_eq!(ev.sum(VmEvent::ZoneFree), 3000);
            } else {
                assert_eq!(ev.sum(VmEvent::PcpAllocHit), 3000);
                assert_eq!(ev.sum(VmEvent::ZoneAlloc) + ev.sum(VmEvent::ZoneFree), 0);
            }
            let census = np.quiesce().unwrap().unwrap();
            assert_eq!(census.allocated, base.allocated, "{lists}");
        }
    }

    #[test]
    fn lockstep_samples_are_messages_per_cpu_second_over_windows_of_cpu_time() {
        // One pair whose thread gets a tenth of its core: every read, 100 more messages and
        // 0.1 ms more CPU time, whatever the wall clock did. A window needs 1 ms of CPU: ten
        // reads. Rated by the wall clock (the free-running sampler), a sample would be about
        // 100 messages per poll interval of wall time, not 10^6 per CPU second.
        let reads = std::cell::Cell::new(0u64);
        let stop = AtomicBool::new(false);
        let mut progress = Vec::new();
        let mut starts = 0;
        let c = sample_cpu(
            &|| {
                let r = reads.get() + 1;
                reads.set(r);
                vec![(100 * r, 100_000 * r)]
            },
            &mut || false,
            SampleSpec {
                samples: 3,
                warmup: 1,
                interval: Duration::from_millis(1),
            },
            &stop,
            Hooks {
                measure_start: &mut || starts += 1,
                sample: &mut |d, t, k| progress.push((d, t, k)),
            },
        );
        assert_eq!(starts, 1);
        assert_eq!(c.samples.len(), 3);
        for v in &c.samples {
            assert!((v - 1e6).abs() < 1e-3, "{v}");
        }
        // Reads: the first, three for the warm-up (a quarter window: 0.25 ms of CPU), the
        // base, ten per kept sample, the last.
        assert_eq!(reads.get(), 1 + 3 + 1 + 30 + 1);
        assert_eq!(c.per_task, [3100]);
        assert_eq!(progress.len(), 4);
        assert!(!c.interrupted);
    }

    #[test]
    fn a_lockstep_warmup_lasts_a_quarter_window_of_cpu_and_is_not_sampled() {
        // Every read adds 0.1 ms of CPU; the first three reads (a cold engine, say) run at a
        // tenth of the later rate. A measured window needs 1 ms; the warm-up 0.25 ms, which
        // the first three reads cover, so that no kept sample sees the slow start.
        let reads = std::cell::Cell::new(0u64);
        let stop = AtomicBool::new(false);
        let mut warm_done_at = None;
        let c = sample_cpu(
            &|| {
                let r = reads.get() + 1;
                reads.set(r);
                // Messages: 10 per read up to read 4 (the first and the warm-up's three),
                // then 100 per read.
                let msgs = 10 * r.min(4) + 100 * r.saturating_sub(4);
                vec![(msgs, 100_000 * r)]
            },
            &mut || false,
            SampleSpec {
                samples: 2,
                warmup: 1,
                interval: Duration::from_millis(1),
            },
            &stop,
            Hooks {
                measure_start: &mut || warm_done_at = Some(reads.get()),
                sample: &mut |_, _, _| {},
            },
        );
        assert_eq!(
            warm_done_at,
            Some(4),
            "the warm-up ends after 0.3 ms of CPU"
        );
        assert_eq!(c.samples.len(), 2);
        for v in &c.samples {
            assert!((v - 1e6).abs() < 1e-3, "a kept sample saw the warm-up: {v}");
        }
    }

    #[test]
    fn a_lockstep_pair_never_waits_and_rates_by_cpu_time() {
        let k = kernel("high-order", 2);
        let np = Netpipe::new(&k, &NetpipeParams::new(1, 1024)).unwrap();
        assert!(np.params().lockstep, "lock-step is the default pacing");
        let stop = AtomicBool::new(false);
        let (c, host) = np
            .run_sampled(
                SampleSpec {
                    samples: 2,
                    warmup: 1,
                    interval: Duration::from_millis(20),
                },
                &stop,
                Hooks {
                    measure_start: &mut || {},
                    sample: &mut |_, _, _| {},
                },
            )
            .unwrap();
        assert_eq!(c.samples.len(), 2);
        assert!(c.samples.iter().all(|&v| v > 0.0));
        assert!(!host.measured);
        // One side at a time: the sender always finds room, the receiver never spins on an
        // empty ring (a free-running pair on two host threads does both).
        let w = np.waits();
        assert_eq!((w.full, w.empty, w.tx_yields, w.rx_yields), (0, 0, 0, 0));
        let t = np.totals()[0];
        assert_eq!(t.sent, t.received);
        np.quiesce().unwrap();
    }

    /// What a scripted sampling returned, the progress calls and how often the window started.
    type Scripted = (
        Continuous,
        HostSampling,
        Vec<(usize, usize, Option<f64>)>,
        usize,
    );

    /// Run [`sample_quiet`] over scripted host waits (cumulative ns of one thread, one entry
    /// per read) and link probes (one entry per probe): the counters advance by 1000 per read,
    /// the interval is 1 ms.
    fn scripted(
        waits: Vec<Option<u64>>,
        links: Vec<Option<u64>>,
        samples: usize,
        max_retakes: usize,
    ) -> Scripted {
        let reads = std::cell::Cell::new(0u64);
        let calls = std::cell::Cell::new(0usize);
        let probes = std::cell::Cell::new(0usize);
        let best = AtomicU64::new(0);
        let mut progress = Vec::new();
        let mut starts = 0;
        let stop = AtomicBool::new(false);
        let (c, h) = sample_quiet(
            &|| {
                reads.set(reads.get() + 1000);
                vec![reads.get()]
            },
            &mut || false,
            HostProbes {
                wait: &|| {
                    let i = calls.get();
                    calls.set(i + 1);
                    waits[i.min(waits.len() - 1)].map(|w| vec![w])
                },
                link: &|| {
                    let i = probes.get();
                    probes.set(i + 1);
                    links[i.min(links.len() - 1)]
                },
                link_best: &best,
            },
            SampleSpec {
                samples,
                warmup: 1,
                interval: Duration::from_millis(1),
            },
            max_retakes,
            &stop,
            Hooks {
                measure_start: &mut || starts += 1,
                sample: &mut |d, t, k| progress.push((d, t, k)),
            },
        );
        (c, h, progress, starts)
    }

    #[test]
    fn samples_the_host_disturbed_are_taken_again_until_the_retakes_run_out() {
        // Waits are read at the start and the end of every window. Window 1 clean, windows 2
        // and 3 lose a whole second to the host, window 4 clean.
        let s = 1_000_000_000;
        let (c, h, progress, starts) = scripted(
            vec![
                Some(0),
                Some(0),
                Some(0),
                Some(s),
                Some(s),
                Some(2 * s),
                Some(2 * s),
                Some(2 * s),
            ],
            vec![Some(60)],
            3,
            1,
        );
        assert_eq!(starts, 1);
        assert_eq!(c.samples.len(), 3);
        // Window 2 is retaken; window 3 is kept (the one retake is used up) and counted.
        assert_eq!(
            h,
            HostSampling {
                retaken: 1,
                disturbed: 1,
                measured: true,
                host_wait_ns: s,
                misplaced: 0,
                link_min_ns: 60,
                link_max_ns: 60,
            }
        );
        // Progress: the warm-up, then one call per kept sample, never more than the total.
        let done: Vec<(usize, usize, bool)> = progress
            .iter()
            .map(|&(d, t, k)| (d, t, k.is_some()))
            .collect();
        assert_eq!(
            done,
            [(1, 4, false), (2, 4, true), (3, 4, true), (4, 4, true)]
        );
        // Every window's messages count, retaken or not (the engine's counters cover them
        // too): from the read at measure_start to the final one, ten reads later (one after
        // the first probe, one at the end of each of the four windows and one after each
        // probe that follows it, the final one).
        assert_eq!(c.per_task, [10000]);
    }

    #[test]
    fn quiet_samples_are_kept_and_unreadable_waits_retake_nothing() {
        let (c, h, _, _) = scripted(vec![Some(5); 8], vec![None], 3, 3);
        assert_eq!(c.samples.len(), 3);
        assert_eq!(
            h,
            HostSampling {
                retaken: 0,
                disturbed: 0,
                measured: true,
                host_wait_ns: 0,
                misplaced: 0,
                link_min_ns: 0,
                link_max_ns: 0,
            }
        );
        let (c, h, _, _) = scripted(vec![None; 8], vec![None], 2, 3);
        assert_eq!(c.samples.len(), 2);
        assert_eq!((h.retaken, h.disturbed, h.measured), (0, 0, false));
    }

    #[test]
    fn samples_next_to_a_slow_link_are_taken_again() {
        // Probes: before window 1, then after each window. 60 ns is the best placement; 320 ns
        // (the other placement of the VM's vCPUs) spoils the windows on either side of it.
        let (c, h, _, _) = scripted(
            vec![Some(0)],
            vec![Some(60), Some(64), Some(320), Some(62), Some(61), Some(66)],
            3,
            5,
        );
        assert_eq!(c.samples.len(), 3);
        // Windows 2 (60->..., 64->320) and 3 (320->62) are retaken; 1, 4 and 5 are kept.
        assert_eq!((h.retaken, h.misplaced, h.disturbed), (2, 2, 0));
        assert_eq!((h.link_min_ns, h.link_max_ns), (60, 320));
        // With no retake left, the misplaced window is kept and counted.
        let (c, h, _, _) = scripted(vec![Some(0)], vec![Some(60), Some(320), Some(60)], 2, 0);
        assert_eq!(c.samples.len(), 2);
        assert_eq!((h.retaken, h.misplaced, h.disturbed), (0, 2, 2));
    }

    #[test]
    fn a_running_pair_publishes_its_threads_for_the_host_wait() {
        let k = kernel("order0", 2);
        let mut p = NetpipeParams::new(1, 64);
        p.lockstep = false;
        let np = Netpipe::new(&k, &p).unwrap();
        assert_eq!(np.host_wait(), None, "no thread runs yet");
        let stop = AtomicBool::new(false);
        let mut seen = Vec::new();
        let (c, host) = np
            .run_sampled(
                SampleSpec {
                    samples: 2,
                    warmup: 0,
                    interval: Duration::from_millis(20),
                },
                &stop,
                Hooks {
                    measure_start: &mut || {},
                    sample: &mut |_, _, _| seen.push(np.host_wait()),
                },
            )
            .unwrap();
        assert_eq!(c.samples.len(), 2);
        // Linux keeps run_delay in /proc/<pid>/task/<tid>/schedstat (CONFIG_SCHED_INFO).
        assert!(host.measured);
        assert!(
            seen.iter()
                .all(|w| w.as_ref().is_some_and(|v| v.len() == 2))
        );
        assert_eq!(np.host_wait(), None, "the threads are gone");
    }

    #[test]
    fn too_few_cpus_is_a_config_error() {
        let k = kernel("order0", 3);
        assert!(matches!(
            Netpipe::new(&k, &NetpipeParams::new(2, 64)),
            Err(WorkloadError::Config(_))
        ));
    }

    #[test]
    fn sweep_reports_every_size_with_per_size_counters() {
        // Long enough that the pair runs within the window even on a loaded machine.
        let spec = SampleSpec {
            samples: 1,
            warmup: 1,
            interval: std::time::Duration::from_millis(250),
        };
        let stop = AtomicBool::new(false);
        let mut last = (0, 0);
        let mut kept = Vec::new();
        let s = run_sizes(
            &policy("high-order"),
            32 << 20,
            2,
            1,
            &[256, 16384],
            spec,
            &stop,
            &mut |d, t, k| {
                last = (d, t);
                kept.extend(k);
            },
        )
        .unwrap();
        assert_eq!(last, (4, 4));
        // The kept samples are handed over as taken, with their send size; not the warm-ups.
        let want: Vec<(usize, f64)> = s
            .sizes
            .iter()
            .map(|r| (r.send_size, r.samples[0]))
            .collect();
        assert_eq!(kept, want);
        assert!(!s.interrupted);
        let sizes: Vec<_> = s.sizes.iter().map(|r| r.send_size).collect();
        assert_eq!(sizes, [256, 16384]);
        assert!(
            s.sizes
                .iter()
                .all(|r| r.samples.len() == 1 && r.messages > 0)
        );
        let names: Vec<&str> = s.counters.locks.iter().map(|l| l.0.as_str()).collect();
        assert!(names.contains(&"zone->lock [send-16384]"), "{names:?}");
        // How the pair waited and how the host disturbed the samples, per size.
        for e in [
            "ring_full",
            "ring_empty",
            "tx_yield",
            "rx_yield",
            "ring_fill_looks",
            "samples_retaken",
            "samples_disturbed",
            "host_wait_us",
            "samples_misplaced",
            "link_min_ns",
            "link_max_ns",
        ] {
            for size in [256, 16384] {
                let name = format!("send-{size}/{e}");
                assert!(
                    s.counters.events.iter().any(|(n, _)| *n == name),
                    "{name} missing"
                );
            }
        }
        let looks = s
            .counters
            .events
            .iter()
            .find(|(n, _)| n == "send-256/ring_fill_looks")
            .unwrap()
            .1;
        assert!(looks > 0, "the receiver looks at the ring's fill");
        assert!(
            s.counters
                .events
                .iter()
                .any(|(n, v)| n == "send-16384/messages" && *v > 0)
        );
    }
}
