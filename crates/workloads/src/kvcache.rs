//! `kvcache`: memcached driven by memtier_benchmark, inside a memory cgroup far smaller than
//! its data, on the engine. The workload of Kairui Song's 2023 MGLRU bulk-move posting
//! (memcached with 16 worker threads, memtier with 16 threads x 2 connections, pipeline 8,
//! set-only, sequential keys, 1 KiB values, in a 4 GiB memcg), scaled by its parameters.
//!
//! # What it models
//!
//! * **The server** is one engine address space (memcached is one process) with `servers`
//!   worker tasks (memcached's `-t`), each on its own virtual CPU. Items live in engine memory:
//!   one anonymous region of `keys` slots, an item header (key, version) and its value, so a set
//!   writes `value_size + 16` bytes of simulated memory through the fault path and a get reads
//!   them back. The region is what the memcg limits: once every key has been set the data is
//!   larger than the limit, and every further set faults pages back in from swap while reclaim
//!   (classic LRU or MGLRU, per profile) swaps others out.
//! * **The clients** are host threads (memtier's `-t`), each on an engine CPU of its own after
//!   the servers' ([`client_cpu`]), each with `connections` connections
//!   (`-c`). A connection belongs to one server task (memcached hands connections to workers
//!   round robin) and keeps `pipeline` requests in flight (`--pipeline`): it sends that many,
//!   then collects the replies. Its keys are a contiguous slice of `1..=keys`, walked in order
//!   and wrapped (`--key-pattern S:S`); a request is a set, or a get with probability
//!   `get_ratio`/(1 + `get_ratio`) (`--ratio 1:0` is set-only).
//! * **The hash table** (memcached's `primary_hashtable`): one word per bucket in engine memory,
//!   `2^hashpower` buckets with hashpower grown until there are at most 1.5 items per bucket, as
//!   memcached grows it. Every request reads its key's bucket and a first set writes it: the
//!   table's pages are touched at random by every operation, the hot set that aging finds young
//!   in every generation while the items stream through.
//! * **The sockets** carry the requests and replies in the kernel's socket buffers, as loopback
//!   TCP does ([`crate::sockbuf`]): a connection's pipeline goes out in one segment that the
//!   client allocates on its CPU (an skb from the slab, the payload in the client's page frag:
//!   each request's command line and a set's value), the server parses it and copies each value
//!   from the segment into its item, and answers in one segment of its own (`STORED`, or a
//!   get's value). Each segment is freed by the CPU that allocated it, once the other side has
//!   read it (`skb_attempt_defer_free`, Linux 5.19): the server frees its reply segments before
//!   it serves its next segment, and the client its request segments when the reply comes. So
//!   the server's kernel work per pipeline includes a slab allocation and free, and its share
//!   of page frag blocks, besides the faults, charges and reclaim of its items. A run ends by
//!   checking that every segment, slab object and frag block went back.
//! * **Latency** is measured per request, from the client's send of its pipeline to the
//!   reply, into an HDR histogram (as memtier reports its percentiles).
//!
//! Every get checks that the value is the one its connection last set (each key belongs to one
//! connection, so the client knows it), on the server as it reads the item and on the client as
//! it reads the reply: a stale or torn value after swap-out and swap-in, or a garbled segment,
//! is an error, not a statistic.
//!
//! Not modelled: memcached's slab allocator and hash chains (slot = key, updated in place; no
//! eviction inside memcached: its `-m` is larger than the data, as in the posting), the rest of
//! the network stack (socket locks and queues, wake-ups, socket memory accounting; see
//! [`crate::sockbuf`]), and memtier's event loop (a client thread serves its connections in
//! turn).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError, bounded};
use hdrhistogram::Histogram;
use pagelab_mm::reclaim::swap::{Backing, SwapConfig};
use pagelab_mm::{CpuId, FaultError, Kernel, MapKind, Mem, MemConfig, Policy, Task};

use crate::WorkloadError;
use crate::engine::{EngineCounters, EngineRun};
use crate::runner::SampleSpec;
use crate::sockbuf::{PageFrag, Skb, SockBufs};

/// Bytes of an item's header: key and version.
const HEADER: u64 = 16;

/// Bytes of a request's command line on the wire (`set key:<10 digits> 0 0 1024\r\n`, as
/// memtier writes it; a get's is shorter, and takes as much room here). Its first words carry
/// the request (operation, key, version) for the server to parse.
const CMD_LINE: u64 = 40;

/// The longest segment: TCP's size goal on loopback (64 KiB, its GSO limit).
const MAX_SEGMENT: u64 = 64 << 10;

/// Bytes of a set's reply (`STORED\r\n`) and of the `\r\n` after a value, and of a get's
/// trailing `END\r\n` (rounded to a word).
const CRLF_WORD: u64 = 8;

/// The workload's knobs (memcached and memtier flags in parentheses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvParams {
    /// Server worker tasks (`memcached -t`).
    pub servers: usize,
    /// Client threads (`memtier -t`).
    pub clients: usize,
    /// Connections per client thread (`memtier -c`).
    pub connections: usize,
    /// Requests in flight per connection (`--pipeline`).
    pub pipeline: usize,
    /// Keys `1..=keys` (`--key-maximum`).
    pub keys: u64,
    /// Value bytes (`--data-size`), a multiple of 8.
    pub value_size: u64,
    /// The memcg limit as a percentage of what the server maps (items and hash table).
    pub memcg_percent: u64,
    /// Gets per set (`--ratio 1:N`); 0 is set-only.
    pub get_ratio: u32,
}

impl Default for KvParams {
    /// The posting's shape, scaled to a 2-core machine: 2 worker tasks, 2 client threads with
    /// 2 connections each, pipeline 8, 1 KiB values, 64 Ki keys (65 MiB of items) in a memcg
    /// of half that.
    fn default() -> Self {
        KvParams {
            servers: 2,
            clients: 2,
            connections: 2,
            pipeline: 8,
            keys: 64 << 10,
            value_size: 1024,
            memcg_percent: 50,
            get_ratio: 0,
        }
    }
}

impl KvParams {
    /// Bytes a request takes on the wire: its command line, and a set's value and `\r\n`.
    pub fn request_bytes(&self, set: bool) -> u64 {
        if set {
            self.value_size.saturating_add(CMD_LINE + CRLF_WORD)
        } else {
            CMD_LINE
        }
    }

    /// Bytes of a request's reply: `STORED\r\n`, or a get's `VALUE` line, the value, its
    /// `\r\n` and `END\r\n`.
    pub fn reply_bytes(&self, set: bool) -> u64 {
        if set {
            CRLF_WORD
        } else {
            self.value_size.saturating_add(CMD_LINE + 2 * CRLF_WORD)
        }
    }

    /// Bytes per item slot.
    pub fn slot(&self) -> u64 {
        self.value_size + HEADER
    }

    /// Bytes of item data.
    pub fn data_bytes(&self) -> u64 {
        self.keys * self.slot()
    }

    /// Hash buckets: the smallest power of two (at least 2^10) with at most 1.5 items each.
    pub fn buckets(&self) -> u64 {
        let mut b = 1u64 << 10;
        while self.keys * 2 > b * 3 {
            b *= 2;
        }
        b
    }

    /// Bytes the server maps: the hash table, then the items.
    pub fn mapped_bytes(&self) -> u64 {
        self.buckets() * 8 + self.data_bytes()
    }

    /// The memcg limit in pages.
    pub fn memcg_pages(&self) -> u64 {
        (self.mapped_bytes() * self.memcg_percent / 100).div_ceil(4096)
    }

    /// The engine's arena: the data and its page tables with room to spare, so that only the
    /// memcg is ever short of memory.
    pub fn arena_bytes(&self) -> u64 {
        let d = self.mapped_bytes();
        (d + d / 64 + (64 << 20)).div_ceil(4 << 20) * (4 << 20)
    }

    /// The swap device: all of the data and a quarter more.
    pub fn swap_pages(&self) -> u64 {
        let d = self.mapped_bytes();
        (d + d / 4).div_ceil(4096) + 1024
    }

    pub fn validate(&self) -> Result<(), WorkloadError> {
        let bad = |m: String| Err(WorkloadError::Config(m));
        if self.servers == 0 || self.clients == 0 || self.connections == 0 || self.pipeline == 0 {
            return bad(
                "kvcache needs at least one server, client, connection and request in flight"
                    .into(),
            );
        }
        if self.servers + self.clients > 4096 {
            return bad(format!(
                "kvcache with {} servers and {} clients needs more virtual CPUs than the engine models (4096)",
                self.servers, self.clients
            ));
        }
        let conns = (self.clients * self.connections) as u64;
        if self.keys < conns {
            return bad(format!(
                "kvcache needs at least one key per connection ({} keys, {conns} connections)",
                self.keys
            ));
        }
        if self.value_size == 0 || !self.value_size.is_multiple_of(8) {
            return bad(format!(
                "kvcache value size {} must be a positive multiple of 8 bytes",
                self.value_size
            ));
        }
        // A pipeline travels in one segment, as TCP sends up to its size goal at once (64 KiB
        // on loopback); a longer one would be split, which the sockets here do not do.
        let each = self.request_bytes(true).max(self.reply_bytes(false));
        let segment = (self.pipeline as u64).saturating_mul(each);
        if segment > MAX_SEGMENT {
            return bad(format!(
                "kvcache sends a pipeline in one segment of at most {} KiB: {} requests of {} bytes need {segment} bytes; lower --pipeline or --value-size",
                MAX_SEGMENT >> 10,
                self.pipeline,
                each
            ));
        }
        if !(1..=100).contains(&self.memcg_percent) {
            return bad(format!(
                "kvcache memcg limit {}% of the data must be between 1 and 100",
                self.memcg_percent
            ));
        }
        // Each server touches up to two pages for one item (items straddle pages) and swaps
        // the rest: below that the group cannot make progress at all.
        let floor = 2 * self.servers as u64 + 2;
        if self.memcg_pages() < floor {
            return bad(format!(
                "kvcache memcg limit of {} pages is too small for {} servers (at least {floor} pages); raise --memcg-percent or --keys",
                self.memcg_pages(),
                self.servers
            ));
        }
        Ok(())
    }
}

/// Parse a swap device choice: `memory` (a RAM disk), `lz4` (zram with LZ4) or a file path.
/// A path must not exist yet, or be a swap file an earlier run left: the device refuses
/// anything else unwritten, and removes its file when the run ends (see
/// [`Backing::File`]).
pub fn parse_swap(s: &str) -> Result<Backing, crate::ParseError> {
    match s {
        "" => Err(crate::ParseError::EmptySwapDevice),
        "memory" => Ok(Backing::Memory { compress: false }),
        "lz4" => Ok(Backing::Memory { compress: true }),
        path => Ok(Backing::File(path.into())),
    }
}

/// The word at `i` of key `key`'s item in version `ver`: what a get must read back.
#[inline]
fn item_word(key: u64, ver: u64, i: u64) -> u64 {
    (key << 32) ^ (ver << 8) ^ i ^ 0x6b76_6361_6368_6500
}

/// Tags of the wire's first word: a set's or a get's command line, a get's `VALUE` line, a
/// set's `STORED`.
const SET_TAG: u64 = 0x7365_7420_0000_0000;
const GET_TAG: u64 = 0x6765_7420_0000_0000;
const VALUE_TAG: u64 = 0x5641_4c55_4500_0000;
const STORED_TAG: u64 = 0x5354_4f52_4544_0000;

/// One connection's pipeline on its way to the server: the segment the client sent it in.
struct Segment {
    skb: Skb,
    sent: Instant,
    reply: Sender<Served>,
}

/// The server's answer to a segment: the request segment, which goes back to the client's CPU
/// to be freed (`skb_attempt_defer_free`), and the reply segment (none if the requests
/// failed).
struct Served {
    sent: Instant,
    request: Skb,
    reply: Option<Skb>,
    result: Result<(), WorkloadError>,
}

impl Served {
    /// Unread: both segments go back to the CPUs that allocated them.
    fn free(self, bufs: &SockBufs) {
        bufs.free(self.request);
        if let Some(r) = self.reply {
            bufs.free(r);
        }
    }
}

/// What a kvcache run measured.
#[derive(Debug)]
pub struct KvResult {
    /// Operations per second, one per sample interval after the fill and the warm-up.
    pub ops_samples: Vec<f64>,
    /// Latency percentiles over the measured window, microseconds: (percentile, value).
    pub latency_us: Vec<(f64, f64)>,
    /// Gets whose value was checked.
    pub gets_checked: u64,
    pub counters: EngineCounters,
    pub interrupted: bool,
}

/// The latency percentiles reported (memtier's defaults and the tail).
pub const PERCENTILES: [f64; 4] = [50.0, 90.0, 99.0, 99.9];

/// The server as `run` starts it: a freshly booted engine with `cpus` virtual CPUs and a swap
/// device on `swap`, the memcg at its limit, one address space charged to it, `p.servers`
/// tasks on CPUs 0.. and the items and hash table mapped at `base`; the clients' CPUs follow
/// ([`client_cpu`]), and the requests and replies travel in socket buffers of `bufs`.
pub struct Server {
    pub erun: EngineRun,
    pub tasks: Vec<Task>,
    pub base: u64,
    pub bufs: Arc<SockBufs>,
}

/// The engine CPU of client thread `c`: after the servers' (memtier's threads run on cores of
/// their own; their sends allocate there).
pub fn client_cpu(p: &KvParams, c: usize) -> CpuId {
    CpuId((p.servers + c) as u16)
}

/// Boots the server of `p` (see [`Server`]). `run` boots it with one virtual CPU per server
/// and client thread; the projector's capture with the target machine's CPU count, so that
/// per-CPU sizing (the swap slot caches, the memcg charge stock) follows that machine.
pub fn boot(
    policy: &Policy,
    p: KvParams,
    swap: &Backing,
    cpus: usize,
) -> Result<Server, WorkloadError> {
    p.validate()?;
    let cpus = cpus.max(p.servers + p.clients);
    let mut cfg = MemConfig::new(p.arena_bytes(), cpus).with_memcgs(2);
    cfg.arena.prefault = true;
    let swap = SwapConfig::new(p.swap_pages(), swap.clone(), cpus);
    let k = Kernel::with_swap(&cfg, policy, Some(swap))
        .map_err(|e| WorkloadError::Config(e.to_string()))?;
    k.mem()
        .memcgs()
        .set_max(1, p.memcg_pages())
        .map_err(|e| WorkloadError::Config(e.to_string()))?;
    let mm = k
        .new_mm(CpuId(0))
        .map_err(|e| WorkloadError::OutOfMemory(e.to_string()))?;
    mm.set_memcg(1)
        .map_err(|e| WorkloadError::Config(e.to_string()))?;
    let erun = EngineRun {
        kernel: k.clone(),
        mms: vec![mm.clone()],
    };
    let tasks: Vec<Task> = (0..p.servers)
        .map(|i| k.new_task(mm.clone(), CpuId(i as u16)))
        .collect();
    let base = tasks[0]
        .mmap(p.mapped_bytes(), true, MapKind::Anon)
        .map_err(|e| WorkloadError::OutOfMemory(e.to_string()))?;
    let bufs = Arc::new(SockBufs::new(k.mem().clone()));
    Ok(Server {
        erun,
        tasks,
        base,
        bufs,
    })
}

/// Run kvcache on a freshly booted engine with `policy` and a swap device on `swap` (memory,
/// LZ4-compressed memory, or a file). `progress(done, total, ops_per_sec)` reports each kept
/// sample as it is taken; `stop` ends the run early (what was measured is returned, marked
/// interrupted).
pub fn run(
    policy: &Policy,
    p: KvParams,
    swap: &Backing,
    spec: SampleSpec,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(usize, usize, f64),
) -> Result<KvResult, WorkloadError> {
    let Server {
        erun,
        tasks,
        base,
        bufs,
    } = boot(policy, p, swap, p.servers + p.clients)?;
    pagelab_sync::stats::set_enabled(true);
    let r = drive(&erun, &bufs, tasks, base, p, spec, stop, progress);
    pagelab_sync::stats::set_enabled(false);
    r
}

/// Shared state between the sampler, the servers and the clients.
struct Shared {
    ops: AtomicU64,
    gets_checked: AtomicU64,
    /// Clients stop issuing requests.
    halt: AtomicBool,
    /// Keys set at least once, summed over connections (the fill is done at `keys`).
    filled: AtomicU64,
    /// Latencies are recorded from here on.
    measuring: AtomicBool,
    error: std::sync::Mutex<Option<WorkloadError>>,
}

/// Sets `halt` if the thread holding it unwinds.
struct HaltOnPanic<'a>(&'a Shared);

impl Drop for HaltOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.halt.store(true, Relaxed);
        }
    }
}

impl Shared {
    fn fail(&self, e: WorkloadError) {
        let mut g = self.error.lock().unwrap_or_else(|e| e.into_inner());
        g.get_or_insert(e);
        self.halt.store(true, Relaxed);
    }
}

#[allow(clippy::too_many_arguments)]
fn drive(
    erun: &EngineRun,
    bufs: &SockBufs,
    tasks: Vec<Task>,
    base: u64,
    p: KvParams,
    spec: SampleSpec,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(usize, usize, f64),
) -> Result<KvResult, WorkloadError> {
    let shared = Shared {
        ops: AtomicU64::new(0),
        gets_checked: AtomicU64::new(0),
        halt: AtomicBool::new(false),
        filled: AtomicU64::new(0),
        measuring: AtomicBool::new(false),
        error: std::sync::Mutex::new(None),
    };
    // A connection has one segment in flight (its pipeline), so a server's queue never holds
    // more than its connections'.
    let (senders, receivers): (Vec<Sender<Segment>>, Vec<Receiver<Segment>>) = (0..p.servers)
        .map(|_| bounded(p.clients * p.connections))
        .unzip();
    // Each server's defer list: the reply segments its clients have read, to be freed on the
    // server's CPU. `drive` keeps the receivers, so that none is lost when a server exits.
    let (defer_tx, defer_rx): (Vec<Sender<Skb>>, Vec<Receiver<Skb>>) = (0..p.servers)
        .map(|_| crossbeam_channel::unbounded())
        .unzip();
    // Connection `id` goes to server `id % servers` and walks its slice of the keys
    // ([`KeyWalk::of`]). Only the connections hold senders: when the clients are gone, the
    // servers' queues disconnect and the servers exit.
    let mut by_client: Vec<Vec<Conn>> = (0..p.clients)
        .map(|c| {
            (0..p.connections)
                .map(|i| {
                    let id = c * p.connections + i;
                    let server = id % p.servers;
                    Conn::new(
                        KeyWalk::of(&p, id),
                        senders[server].clone(),
                        defer_tx[server].clone(),
                    )
                })
                .collect()
        })
        .collect();
    drop(senders);
    drop(defer_tx);
    let (hists, samples, conns) = std::thread::scope(|s| {
        for ((task, rx), defer) in tasks.into_iter().zip(receivers).zip(&defer_rx) {
            let shared = &shared;
            s.spawn(move || serve(task, bufs, rx, defer, base, p, shared));
        }
        let mut clients = Vec::new();
        for (c, conns) in by_client.drain(..).enumerate() {
            let shared = &shared;
            let cpu = client_cpu(&p, c);
            clients.push(s.spawn(move || client(conns, bufs, cpu, p, shared)));
        }
        let samples = sample(erun, &shared, p, spec, stop, progress);
        shared.halt.store(true, Relaxed);
        let mut hists = Vec::new();
        let mut conns = Vec::new();
        for h in clients {
            let (hist, cs) = h.join().expect("kvcache client thread panicked");
            hists.push(hist);
            conns.extend(cs);
        }
        (hists, samples, conns)
    });
    // Every thread is gone: what is still in flight goes back to the CPUs that allocated it.
    for replies in conns {
        for served in replies.try_iter() {
            served.free(bufs);
        }
    }
    for rx in &defer_rx {
        for skb in rx.try_iter() {
            bufs.free(skb);
        }
    }
    if let Some(e) = shared
        .error
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
    {
        return Err(e);
    }
    bufs.quiesce()
        .map_err(|e| WorkloadError::Fault(format!("kvcache: {e}")))?;
    let mut all = Histogram::<u64>::new(3).expect("3 significant digits is valid");
    for h in &hists {
        all.add(h).expect("histograms of one configuration");
    }
    let interrupted = stop.load(Relaxed) && samples.len() < spec.samples;
    Ok(KvResult {
        latency_us: PERCENTILES
            .iter()
            .map(|&q| (q, all.value_at_quantile(q / 100.0) as f64 / 1000.0))
            .collect(),
        ops_samples: samples,
        gets_checked: shared.gets_checked.load(Relaxed),
        counters: erun.counters(),
        interrupted,
    })
}

/// A server worker: take its connections' segments from its queue and run their requests on
/// engine memory, until every connection is gone (the queue disconnects). Before each segment
/// it frees the reply segments its clients have read (`skb_defer_free_flush` in its
/// `net_rx_action`).
fn serve(
    task: Task,
    bufs: &SockBufs,
    rx: Receiver<Segment>,
    defer: &Receiver<Skb>,
    base: u64,
    p: KvParams,
    shared: &Shared,
) {
    // A server that panics stops the clients too, rather than leaving them waiting for it.
    let _halt_on_panic = HaltOnPanic(shared);
    let cpu = task.cpu();
    let mut frag = PageFrag::new();
    loop {
        let seg = match rx.try_recv() {
            Ok(r) => r,
            Err(TryRecvError::Disconnected) => break,
            Err(TryRecvError::Empty) => {
                // Nothing to do: the CPU leaves the mm before it sleeps, so other CPUs'
                // reclaim does not wait for its TLB acknowledgement.
                task.idle();
                let Ok(r) = rx.recv() else {
                    task.resume();
                    break;
                };
                task.resume();
                r
            }
        };
        for skb in defer.try_iter() {
            bufs.free(skb);
        }
        let (reply, result) = match serve_segment(&task, bufs, &mut frag, base, p, &seg.skb) {
            Ok(done) => {
                shared.ops.fetch_add(done.requests, Relaxed);
                shared.gets_checked.fetch_add(done.gets, Relaxed);
                (Some(done.reply), Ok(()))
            }
            Err(e) => {
                shared.fail(e.clone());
                (None, Err(e))
            }
        };
        let served = Served {
            sent: seg.sent,
            request: seg.skb,
            reply,
            result,
        };
        // The client may have stopped listening; the run is over then, and the segments go
        // back from here.
        if let Err(e) = seg.reply.send(served) {
            e.into_inner().free(bufs);
        }
    }
    bufs.release_frag(&mut frag, cpu);
}

/// What a server made of one segment.
pub struct SegmentDone {
    /// The replies, in a segment allocated on the server's CPU.
    pub reply: Skb,
    /// Requests run, and of them gets whose value was checked.
    pub requests: u64,
    pub gets: u64,
}

/// A connection's segment as a memcached worker runs it on the server at `base`: each request
/// parsed from the payload in turn (memcached's `try_read_command`), a set's value copied from
/// the payload into its item (hash lookup, link on the first set), a get's item read back,
/// checked and copied into the reply; then the replies sent in one segment from `frag` on the
/// server's CPU (memcached's `transmit`: one `sendmsg` for what the read produced).
pub fn serve_segment(
    task: &Task,
    bufs: &SockBufs,
    frag: &mut PageFrag,
    base: u64,
    p: KvParams,
    req: &Skb,
) -> Result<SegmentDone, WorkloadError> {
    let mem = bufs.mem();
    let words = p.slot() / 8;
    let items = base + p.buckets() * 8;
    let mut out: Vec<u64> = Vec::new();
    let (mut w, mut requests, mut gets) = (0usize, 0u64, 0u64);
    let end = req.len() / 8;
    let truncated = |w: usize, need: u64| {
        Err(WorkloadError::Fault(format!(
            "kvcache: a segment of {} bytes ends inside the request at byte {} ({need} bytes)",
            req.len(),
            8 * w
        )))
    };
    while w < end {
        if w + (CMD_LINE / 8) as usize > end {
            return truncated(w, CMD_LINE);
        }
        let word = |i: usize| req.word(mem, w + i).load(Relaxed);
        let (tag, key, ver) = (word(0), word(1), word(2));
        let set = match tag {
            SET_TAG => true,
            GET_TAG => false,
            _ => {
                return Err(WorkloadError::Fault(format!(
                    "kvcache: a garbled request (tag {tag:#x}) at byte {} of a segment",
                    8 * w
                )));
            }
        };
        if key == 0 || key > p.keys {
            return Err(WorkloadError::Fault(format!(
                "kvcache: a request for key {key}, outside 1..={}",
                p.keys
            )));
        }
        if w + (p.request_bytes(set) / 8) as usize > end {
            return truncated(w, p.request_bytes(set));
        }
        let at = items + (key - 1) * p.slot();
        let bucket = base + (hash(key) & (p.buckets() - 1)) * 8;
        let value = w + (CMD_LINE / 8) as usize;
        if set {
            assoc_insert(task, bucket, at, ver == 1)?;
            task.store(at, key).map_err(fault_err)?;
            task.store(at + 8, ver).map_err(fault_err)?;
            for i in 2..words {
                let v = req.word(mem, value + (i - 2) as usize).load(Relaxed);
                task.store(at + i * 8, v).map_err(fault_err)?;
            }
            out.push(STORED_TAG ^ key);
        } else {
            assoc_find(task, bucket, at)?;
            out.extend([VALUE_TAG, key, ver]);
            out.resize(out.len() + (CMD_LINE / 8 - 3) as usize, 0);
            get_item(task, at, key, ver, words, &mut out)?;
            out.extend([0, 0]);
            gets += 1;
        }
        w += (p.request_bytes(set) / 8) as usize;
        requests += 1;
    }
    let reply = bufs
        .alloc_skb(frag, task.cpu(), out.len() * 8)
        .map_err(|e| WorkloadError::OutOfMemory(format!("kvcache: reply segment: {e}")))?;
    for (i, v) in out.into_iter().enumerate() {
        reply.word(mem, i).store(v, Relaxed);
    }
    Ok(SegmentDone {
        reply,
        requests,
        gets,
    })
}

/// A client's pipeline on one connection, sent in one segment from `frag` on `cpu` (memtier
/// writes a connection's pipeline at once): each request's command line, and a set's value.
pub fn send_requests(
    bufs: &SockBufs,
    frag: &mut PageFrag,
    cpu: CpuId,
    p: KvParams,
    reqs: &[ServerRequest],
) -> Result<Skb, WorkloadError> {
    let len: u64 = reqs.iter().map(|r| p.request_bytes(r.set)).sum();
    let skb = bufs
        .alloc_skb(frag, cpu, len as usize)
        .map_err(|e| WorkloadError::OutOfMemory(format!("kvcache: request segment: {e}")))?;
    let mem = bufs.mem();
    let mut w = 0usize;
    for r in reqs {
        let line = [if r.set { SET_TAG } else { GET_TAG }, r.key, r.ver, 0, 0];
        debug_assert_eq!(line.len() as u64, CMD_LINE / 8);
        for v in line {
            skb.word(mem, w).store(v, Relaxed);
            w += 1;
        }
        if r.set {
            for i in 2..p.slot() / 8 {
                skb.word(mem, w).store(item_word(r.key, r.ver, i), Relaxed);
                w += 1;
            }
            skb.word(mem, w).store(0, Relaxed);
            w += 1;
        }
    }
    Ok(skb)
}

/// The client's side of a served pipeline: its request segment freed here, where it was
/// allocated, the reply segment checked against `reqs` ([`check_replies`]) and put on its
/// server's defer list `defer` (freed here if the list is gone or full).
pub fn read_reply(
    bufs: &SockBufs,
    p: KvParams,
    reqs: &[ServerRequest],
    request: Skb,
    reply: Skb,
    defer: &Sender<Skb>,
) -> Result<(), WorkloadError> {
    bufs.free(request);
    let checked = check_replies(bufs.mem(), p, reqs, &reply);
    if let Err(e) = defer.try_send(reply) {
        bufs.free(e.into_inner());
    }
    checked
}

/// The client's reading of a reply segment for `reqs`: each set stored, each get's value the
/// version the connection last set.
pub fn check_replies(
    mem: &Mem,
    p: KvParams,
    reqs: &[ServerRequest],
    reply: &Skb,
) -> Result<(), WorkloadError> {
    let mut w = 0usize;
    let bad = |what: String| Err(WorkloadError::Fault(format!("kvcache: {what}")));
    for r in reqs {
        if (w + (p.reply_bytes(r.set) / 8) as usize) * 8 > reply.len() {
            return bad(format!(
                "the reply segment ends before key {}'s reply",
                r.key
            ));
        }
        let word = |i: usize| reply.word(mem, w + i).load(Relaxed);
        if r.set {
            if word(0) != STORED_TAG ^ r.key {
                return bad(format!("the set of key {} was not stored", r.key));
            }
        } else {
            if (word(0), word(1), word(2)) != (VALUE_TAG, r.key, r.ver) {
                return bad(format!(
                    "the get of key {} version {} came back as key {} version {}",
                    r.key,
                    r.ver,
                    word(1),
                    word(2)
                ));
            }
            let value = (CMD_LINE / 8) as usize;
            for i in 2..p.slot() / 8 {
                let v = word(value + (i - 2) as usize);
                if v != item_word(r.key, r.ver, i) {
                    return bad(format!(
                        "the get of key {} returned a torn value (word {i} is {v:#x})",
                        r.key
                    ));
                }
            }
        }
        w += (p.reply_bytes(r.set) / 8) as usize;
    }
    if w * 8 != reply.len() {
        return bad(format!(
            "the reply segment holds {} bytes for {} bytes of replies",
            reply.len(),
            w * 8
        ));
    }
    Ok(())
}

/// One connection's keys as [`ServerRequests`] walks them.
struct KeyWalk {
    first: u64,
    next: u64,
    versions: Vec<u64>,
    rng: u64,
}

impl KeyWalk {
    /// Connection `id`'s walk of `p`: its slice `first..first + count` of the keys (the last
    /// connection takes the remainder).
    fn of(p: &KvParams, id: usize) -> KeyWalk {
        let nconn = p.clients * p.connections;
        let per_conn = p.keys / nconn as u64;
        let first = 1 + id as u64 * per_conn;
        let count = if id + 1 == nconn {
            p.keys + 1 - first
        } else {
            per_conn
        };
        KeyWalk {
            first,
            next: 0,
            versions: vec![0; count as usize],
            rng: 0x9e37_79b9_7f4a_7c15 ^ (id as u64 + 1),
        }
    }

    /// The next request: the next key of the slice (wrapping), a get with probability
    /// `get_ratio`/(1 + `get_ratio`) of a key set before, else a set of its next version. The
    /// flag says whether it is the key's first set.
    fn next(&mut self, get_ratio: u32) -> (ServerRequest, bool) {
        let i = self.next as usize;
        self.next = (self.next + 1) % self.versions.len() as u64;
        let key = self.first + i as u64;
        // xorshift64, drawn for every request.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let get = get_ratio > 0 && !self.rng.is_multiple_of(u64::from(get_ratio + 1));
        let first_set = self.versions[i] == 0;
        let (set, ver) = if !first_set && get {
            (false, self.versions[i])
        } else {
            self.versions[i] += 1;
            (true, self.versions[i])
        };
        let r = ServerRequest {
            set,
            key,
            ver,
            batch_end: false,
        };
        (r, set && first_set)
    }
}

/// The requests one server worker receives, in the order it receives them when its
/// connections' clients keep up: each connection's pipeline of `p.pipeline` requests in turn
/// (memtier sends a connection's pipeline, then the next connection's), each connection walking
/// its slice of the keys in order and wrapping, as the clients of [`run`] do. The projector's
/// capture runs one server on this stream, sent by one client thread beside the recording:
/// what one memcached worker does.
pub struct ServerRequests {
    conns: Vec<KeyWalk>,
    pipeline: usize,
    get_ratio: u32,
    cur: usize,
    in_batch: usize,
}

/// A request of [`ServerRequests`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerRequest {
    pub set: bool,
    pub key: u64,
    pub ver: u64,
    /// The last request of its connection's pipeline: a batch boundary.
    pub batch_end: bool,
}

impl ServerRequests {
    /// The requests of server `server` of `p` (connection `id` goes to server `id % servers`).
    pub fn new(p: KvParams, server: usize) -> Result<ServerRequests, WorkloadError> {
        p.validate()?;
        let nconn = p.clients * p.connections;
        let conns: Vec<KeyWalk> = (0..nconn)
            .filter(|id| id % p.servers == server)
            .map(|id| KeyWalk::of(&p, id))
            .collect();
        if conns.is_empty() {
            return Err(WorkloadError::Config(format!(
                "kvcache server {server} has no connection ({nconn} connections, {} servers)",
                p.servers
            )));
        }
        Ok(ServerRequests {
            conns,
            pipeline: p.pipeline,
            get_ratio: p.get_ratio,
            cur: 0,
            in_batch: 0,
        })
    }

    /// Keys this server's connections own.
    pub fn keys(&self) -> u64 {
        self.conns.iter().map(|c| c.versions.len() as u64).sum()
    }

    /// The next request.
    pub fn next_request(&mut self) -> ServerRequest {
        let (mut r, _) = self.conns[self.cur].next(self.get_ratio);
        self.in_batch += 1;
        r.batch_end = self.in_batch == self.pipeline;
        if r.batch_end {
            self.in_batch = 0;
            self.cur = (self.cur + 1) % self.conns.len();
        }
        r
    }
}

fn fault_err(e: FaultError) -> WorkloadError {
    match e {
        FaultError::Oom { .. } => WorkloadError::OutOfMemory(format!(
            "kvcache: {e}; the memory cgroup limit is too small for the workload's working set"
        )),
        other => WorkloadError::Fault(format!("kvcache: {other}")),
    }
}

/// memcached's hash (a 64-bit mix standing in for MurmurHash3).
#[inline]
fn hash(key: u64) -> u64 {
    let mut h = key.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^= h >> 29;
    h.wrapping_mul(0xbf58_476d_1ce4_e5b9)
}

/// `assoc_find` + `assoc_insert`: read the key's bucket, and link the item there on its first
/// set (the bucket keeps the last item linked; chains are not modelled).
fn assoc_insert(task: &Task, bucket: u64, item: u64, first: bool) -> Result<(), WorkloadError> {
    task.load(bucket).map_err(fault_err)?;
    if first {
        task.store(bucket, item).map_err(fault_err)?;
    }
    Ok(())
}

/// `assoc_find` for a get: the bucket must hold some item (the key was set before).
fn assoc_find(task: &Task, bucket: u64, item: u64) -> Result<(), WorkloadError> {
    if task.load(bucket).map_err(fault_err)? == 0 {
        return Err(WorkloadError::Fault(format!(
            "kvcache: the hash bucket of the item at {item:#x} is empty after its set"
        )));
    }
    Ok(())
}

/// memcached's `process_get_command`: read the item and check it is version `ver` of `key`.
/// The value's words go to `out` (the reply) as they are read.
fn get_item(
    task: &Task,
    at: u64,
    key: u64,
    ver: u64,
    words: u64,
    out: &mut Vec<u64>,
) -> Result<(), WorkloadError> {
    let stale = |what: String| {
        Err(WorkloadError::Fault(format!(
            "kvcache: key {key} returned {what}, but version {ver} was the last one set"
        )))
    };
    let k = task.load(at).map_err(fault_err)?;
    let v = task.load(at + 8).map_err(fault_err)?;
    if k != key || v != ver {
        return stale(format!("key {k} version {v}"));
    }
    for i in 2..words {
        let w = task.load(at + i * 8).map_err(fault_err)?;
        if w != item_word(key, ver, i) {
            return stale(format!("a torn value (word {i} is {w:#x})"));
        }
        out.push(w);
    }
    Ok(())
}

/// One memtier connection: its walk of its keys, the server it talks to, and the pipeline it
/// has in flight.
struct Conn {
    walk: KeyWalk,
    to_server: Sender<Segment>,
    /// The server's defer list, where the reply segments go once read.
    defer: Sender<Skb>,
    replies: (Sender<Served>, Receiver<Served>),
    in_flight: Vec<ServerRequest>,
}

impl Conn {
    fn new(walk: KeyWalk, to_server: Sender<Segment>, defer: Sender<Skb>) -> Conn {
        Conn {
            walk,
            to_server,
            defer,
            replies: crossbeam_channel::unbounded(),
            in_flight: Vec::new(),
        }
    }

    /// The next pipeline's requests, into `in_flight`; counts first sets into `filled`.
    fn next_pipeline(&mut self, p: KvParams, filled: &AtomicU64) {
        self.in_flight.clear();
        for k in 0..p.pipeline {
            let (mut r, first_set) = self.walk.next(p.get_ratio);
            if first_set {
                filled.fetch_add(1, Relaxed);
            }
            r.batch_end = k + 1 == p.pipeline;
            self.in_flight.push(r);
        }
    }
}

/// A memtier client thread on `cpu`: send a pipeline of `p.pipeline` requests on each
/// connection in turn, one segment each, then read each connection's reply segment. The
/// request segments come back to be freed here, where they were allocated; the reply segments
/// go to their server's defer list. Returns its latency histogram (nanoseconds) and its
/// connections' reply queues, with whatever is still in flight on them; the connections
/// themselves close, so that the servers' queues disconnect once every client has returned.
fn client(
    mut conns: Vec<Conn>,
    bufs: &SockBufs,
    cpu: CpuId,
    p: KvParams,
    shared: &Shared,
) -> (Histogram<u64>, Vec<Receiver<Served>>) {
    // A client that panics stops the run too, rather than leaving the sampler waiting for
    // the fill.
    let _halt_on_panic = HaltOnPanic(shared);
    let mut hist = Histogram::<u64>::new(3).expect("3 significant digits is valid");
    let mut frag = PageFrag::new();
    let mut pending = vec![false; conns.len()];
    'run: while !shared.halt.load(Relaxed) {
        for (ci, c) in conns.iter_mut().enumerate() {
            c.next_pipeline(p, &shared.filled);
            let skb = match send_requests(bufs, &mut frag, cpu, p, &c.in_flight) {
                Ok(skb) => skb,
                Err(e) => {
                    shared.fail(e);
                    break 'run;
                }
            };
            let seg = Segment {
                skb,
                sent: Instant::now(),
                reply: c.replies.0.clone(),
            };
            if let Err(e) = c.to_server.send(seg) {
                bufs.free(e.into_inner().skb);
                break 'run;
            }
            pending[ci] = true;
        }
        for (ci, c) in conns.iter_mut().enumerate() {
            while pending[ci] {
                let r = match c.replies.1.recv_timeout(Duration::from_millis(50)) {
                    Ok(r) => r,
                    // A server that stopped (it failed or panicked) halts the run.
                    Err(RecvTimeoutError::Timeout) if shared.halt.load(Relaxed) => break 'run,
                    Err(RecvTimeoutError::Timeout) => continue,
                    Err(RecvTimeoutError::Disconnected) => break 'run,
                };
                pending[ci] = false;
                let Some(reply) = r.reply else {
                    bufs.free(r.request);
                    continue;
                };
                let read = read_reply(bufs, p, &c.in_flight, r.request, reply, &c.defer);
                let checked = r.result.and(read);
                match checked {
                    Err(e) => {
                        shared.fail(e);
                        break 'run;
                    }
                    Ok(()) if shared.measuring.load(Relaxed) => {
                        // Every request of the pipeline waited for the segment's reply.
                        let ns = (r.sent.elapsed().as_nanos() as u64).max(1);
                        let _ = hist.record_n(ns, p.pipeline as u64);
                    }
                    Ok(()) => {}
                }
            }
        }
    }
    bufs.release_frag(&mut frag, cpu);
    (hist, conns.into_iter().map(|c| c.replies.1).collect())
}

/// The sampler: wait for the fill (every key set once, so the data is over the memcg limit),
/// then take `spec.warmup` discarded and `spec.samples` kept samples of ops per second.
fn sample(
    erun: &EngineRun,
    shared: &Shared,
    p: KvParams,
    spec: SampleSpec,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(usize, usize, f64),
) -> Vec<f64> {
    let over = || stop.load(Relaxed) || shared.halt.load(Relaxed);
    while shared.filled.load(Relaxed) < p.keys && !over() {
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut out = Vec::with_capacity(spec.samples);
    for i in 0..spec.warmup + spec.samples {
        if over() {
            break;
        }
        if i == spec.warmup {
            erun.reset();
            shared.measuring.store(true, Relaxed);
        }
        let (t0, o0) = (Instant::now(), shared.ops.load(Relaxed));
        while t0.elapsed() < spec.interval && !over() {
            std::thread::sleep(Duration::from_millis(5).min(spec.interval));
        }
        if over() {
            break;
        }
        let rate = (shared.ops.load(Relaxed) - o0) as f64 / t0.elapsed().as_secs_f64();
        if i >= spec.warmup {
            out.push(rate);
            progress(out.len(), spec.samples, rate);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEM: Backing = Backing::Memory { compress: false };

    fn small() -> KvParams {
        KvParams {
            servers: 2,
            clients: 2,
            connections: 2,
            pipeline: 4,
            keys: 8 << 10,
            value_size: 1024,
            memcg_percent: 40,
            get_ratio: 1,
        }
    }

    fn spec() -> SampleSpec {
        SampleSpec {
            samples: 2,
            warmup: 1,
            interval: Duration::from_millis(300),
        }
    }

    fn event(r: &KvResult, name: &str) -> u64 {
        r.counters
            .events
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0, |(_, v)| *v)
    }

    /// One pipeline's round trip through the sockets: the client's segment allocated on its
    /// CPU, the server's reply on its own, each freed where it was allocated; a get reads back
    /// what the set wrote, through both segments. A reply read against other versions, and a
    /// garbled request, are errors; nothing is left once every segment is freed.
    #[test]
    fn a_pipeline_travels_in_segments_freed_where_they_were_allocated() {
        let p = KvParams {
            servers: 1,
            clients: 1,
            memcg_percent: 100,
            ..small()
        };
        let server = boot(&Policy::default(), p, &MEM, 2).unwrap();
        let (bufs, task) = (&server.bufs, &server.tasks[0]);
        let (ccpu, scpu) = (client_cpu(&p, 0), task.cpu());
        assert_ne!(ccpu, scpu);
        let (mut cf, mut sf) = (PageFrag::new(), PageFrag::new());
        let pipeline = |set: bool, ver: u64| -> Vec<ServerRequest> {
            (1..=4)
                .map(|key| ServerRequest {
                    set,
                    key,
                    ver,
                    batch_end: key == 4,
                })
                .collect()
        };
        for (set, reqs) in [(true, pipeline(true, 1)), (false, pipeline(false, 1))] {
            let seg = send_requests(bufs, &mut cf, ccpu, p, &reqs).unwrap();
            assert_eq!(seg.alloc_cpu, ccpu);
            assert_eq!(seg.len() as u64, 4 * p.request_bytes(set));
            let done = serve_segment(task, bufs, &mut sf, server.base, p, &seg).unwrap();
            assert_eq!((done.requests, done.gets), (4, if set { 0 } else { 4 }));
            assert_eq!(done.reply.alloc_cpu, scpu);
            assert_eq!(done.reply.len() as u64, 4 * p.reply_bytes(set));
            check_replies(bufs.mem(), p, &reqs, &done.reply).unwrap();
            if !set {
                let e = check_replies(bufs.mem(), p, &pipeline(false, 2), &done.reply);
                assert!(e.unwrap_err().to_string().contains("came back as"));
            }
            bufs.free(seg);
            bufs.free(done.reply);
        }
        let seg = send_requests(bufs, &mut cf, ccpu, p, &pipeline(true, 2)).unwrap();
        seg.word(bufs.mem(), 0).store(0xdead, Relaxed);
        let e = serve_segment(task, bufs, &mut sf, server.base, p, &seg)
            .err()
            .unwrap();
        assert!(e.to_string().contains("garbled"), "{e}");
        bufs.free(seg);
        bufs.release_frag(&mut cf, ccpu);
        bufs.release_frag(&mut sf, scpu);
        bufs.quiesce().unwrap();
    }

    /// Gets read back the last value set across swap-out and swap-in, under both LRUs.
    #[test]
    fn values_survive_reclaim_under_both_lrus() {
        for mglru in [false, true] {
            let mut policy = Policy::default();
            policy.lru.mglru = mglru;
            let stop = AtomicBool::new(false);
            let r = run(&policy, small(), &MEM, spec(), &stop, &mut |_, _, _| {}).unwrap();
            assert_eq!(r.ops_samples.len(), 2, "mglru={mglru}");
            assert!(r.ops_samples.iter().all(|&x| x > 0.0));
            assert!(r.gets_checked > 0, "no get was checked");
            assert!(event(&r, "pswpout") > 0, "the memcg never swapped");
            assert!(event(&r, "fault_swap") > 0, "nothing came back from swap");
            assert_eq!(r.latency_us.len(), PERCENTILES.len());
            assert!(r.latency_us.windows(2).all(|w| w[0].1 <= w[1].1));
            assert!(!r.interrupted);
        }
    }

    /// A limit far below what one pipeline round touches, with no room to reclaim into (the
    /// workload's own pages are all in flight), still ends: as an error or a result, never a
    /// hang. A bad configuration is refused up front.
    #[test]
    fn bad_configurations_are_refused() {
        let stop = AtomicBool::new(false);
        let mut p = small();
        p.value_size = 1001;
        let e = run(
            &Policy::default(),
            p,
            &MEM,
            spec(),
            &stop,
            &mut |_, _, _| {},
        )
        .unwrap_err();
        assert!(e.to_string().contains("multiple of 8"), "{e}");
        let mut p = small();
        p.memcg_percent = 0;
        assert!(
            run(
                &Policy::default(),
                p,
                &MEM,
                spec(),
                &stop,
                &mut |_, _, _| {}
            )
            .is_err()
        );
        let mut p = small();
        p.keys = 2;
        assert!(
            run(
                &Policy::default(),
                p,
                &MEM,
                spec(),
                &stop,
                &mut |_, _, _| {}
            )
            .is_err()
        );
        let mut p = small();
        p.keys = 8;
        p.connections = 1;
        let e = run(
            &Policy::default(),
            p,
            &MEM,
            spec(),
            &stop,
            &mut |_, _, _| {},
        )
        .unwrap_err();
        assert!(e.to_string().contains("too small"), "{e}");
        // A pipeline longer than one segment, and more tasks than the engine's CPUs.
        let mut p = small();
        p.pipeline = 64;
        let e = p.validate().unwrap_err().to_string();
        assert!(e.contains("one segment of at most 64 KiB"), "{e}");
        p.pipeline = 8;
        p.value_size = !7;
        assert!(p.validate().is_err());
        let mut p = small();
        p.servers = 4000;
        p.clients = 100;
        let e = p.validate().unwrap_err().to_string();
        assert!(e.contains("4000 servers and 100 clients"), "{e}");
    }

    /// A limit of a handful of pages: the group thrashes through swap, but the run ends with a
    /// result or a clean out-of-memory error, and values stay right.
    #[test]
    fn a_tiny_memcg_ends_cleanly() {
        let stop = AtomicBool::new(false);
        let mut p = small();
        p.keys = 2 << 10;
        p.memcg_percent = 1;
        match run(
            &Policy::default(),
            p,
            &MEM,
            spec(),
            &stop,
            &mut |_, _, _| {},
        ) {
            Ok(r) => assert!(r.gets_checked > 0),
            Err(e) => assert!(matches!(e, WorkloadError::OutOfMemory(_)), "{e}"),
        }
    }

    /// The same on a compressed device and on a swap file, and a swap file that cannot be
    /// created is a one-line error.
    #[test]
    fn swap_devices_in_lz4_memory_and_in_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("swap");
        for swap in [
            Backing::Memory { compress: true },
            Backing::File(file.clone()),
        ] {
            let stop = AtomicBool::new(false);
            let r = run(
                &Policy::default(),
                small(),
                &swap,
                spec(),
                &stop,
                &mut |_, _, _| {},
            )
            .unwrap();
            assert!(r.gets_checked > 0, "{swap:?}");
            assert!(event(&r, "pswpin") > 0, "{swap:?}");
        }
        assert!(!file.exists(), "the device removes the file it created");
        let bad = Backing::File(dir.path().join("no/such/dir/swap"));
        let stop = AtomicBool::new(false);
        let e = run(
            &Policy::default(),
            small(),
            &bad,
            spec(),
            &stop,
            &mut |_, _, _| {},
        )
        .unwrap_err();
        assert!(e.to_string().contains("cannot open swap file"), "{e}");
        assert!(!e.to_string().contains('\n'));
        assert!(parse_swap("").is_err());
    }

    /// What a run killed half-way leaves at its swap path: a swap file pagelab made (its
    /// header), with a page of the killed run's data after it.
    fn leftover_swap_file(path: &std::path::Path) {
        use pagelab_mm::reclaim::swap::{SWAP_FILE_MAGIC, SWAP_FILE_VERSION};
        let mut bytes = SWAP_FILE_MAGIC.to_vec();
        bytes.extend_from_slice(&SWAP_FILE_VERSION.to_le_bytes());
        bytes.resize(2 * 4096, 0x5a);
        std::fs::write(path, bytes).unwrap();
    }

    fn run_with(swap: &Backing, p: KvParams) -> Result<KvResult, WorkloadError> {
        let stop = AtomicBool::new(false);
        run(
            &Policy::default(),
            p,
            swap,
            spec(),
            &stop,
            &mut |_, _, _| {},
        )
    }

    /// A user's file or a results store at the swap path is refused before the run starts,
    /// byte for byte as it was, and not removed.
    #[test]
    fn a_file_that_is_not_a_swap_file_is_refused_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let text = dir.path().join("notes.txt");
        std::fs::write(&text, b"do not lose me\n").unwrap();
        let store = dir.path().join("results.db");
        let mut db = b"SQLite format 3\0".to_vec();
        db.resize(3 * 4096, 1);
        std::fs::write(&store, &db).unwrap();
        for path in [&text, &store] {
            let before = std::fs::read(path).unwrap();
            let e = run_with(&Backing::File(path.clone()), small()).unwrap_err();
            assert!(e.to_string().contains("will not use"), "{e}");
            assert_eq!(std::fs::read(path).unwrap(), before, "{}", path.display());
        }
    }

    /// A swap file a killed run left is reused, and removed when this run ends.
    #[test]
    fn a_leftover_swap_file_is_reused_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("swap");
        leftover_swap_file(&path);
        let r = run_with(&Backing::File(path.clone()), small()).unwrap();
        assert!(r.gets_checked > 0 && event(&r, "pswpin") > 0);
        assert!(
            !path.exists(),
            "the reused swap file is removed after the run"
        );
    }

    /// A run that fails once its swap file is made (here: an engine larger than the machine,
    /// which the harness would refuse earlier) still removes the file, new or left over.
    #[test]
    fn the_swap_file_goes_when_the_run_fails() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("swap");
        let mut p = small();
        // About 40 GiB of items: more than a 24 GiB machine has, so the arena is refused
        // after the (sparse) swap file was made.
        p.keys = 40 << 20;
        for leftover in [false, true] {
            if leftover {
                leftover_swap_file(&path);
            }
            let e = run_with(&Backing::File(path.clone()), p).unwrap_err();
            assert!(e.to_string().contains("arena"), "{e}");
            assert!(
                !path.exists(),
                "leftover={leftover}: the swap file is removed ({e})"
            );
        }
    }

    #[test]
    fn a_stop_before_the_fill_is_an_interrupted_run() {
        let stop = AtomicBool::new(true);
        let r = run(
            &Policy::default(),
            small(),
            &MEM,
            spec(),
            &stop,
            &mut |_, _, _| {},
        )
        .unwrap();
        assert!(r.interrupted && r.ops_samples.is_empty());
    }
}
