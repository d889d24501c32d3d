//! netpipe in the projector: one sender/receiver pair's messages captured on the engine, and
//! replayed as N pairs on a machine.
//!
//! netperf UDP_STREAM, as netpipe reduces it (`pagelab_workloads::netpipe`), is two tasks that
//! meet at a socket: the sender kmallocs an skb's data on its CPU, writes it and queues it; the
//! receiver takes it off the queue, reads it and kfrees it on its own CPU. What they share is
//! the allocator's (every free is remote: `zone->lock` on refill and drain of the per-CPU
//! lists, or on every high-order block without high-order lists; a slab's `list_lock`), and
//! the socket's: the queue's slots and positions, and the skb data's lines.
//!
//! # Capture
//!
//! One engine thread runs the pair in lock-step ([`NetpipeParams::lockstep`]): the sender's
//! side tops the socket up until it is full (its depth, [`NetpipeParams::depth`]), then the
//! receiver's side reads one release step (a quarter of the receive buffer,
//! [`NetpipeParams::release`], the room `udp_rmem_release` gives back at a time), and again,
//! so the socket stays three-quarters full or more, as a free-running pair's does (emptying it
//! every turn would empty the slabs every turn). Each side runs on its own virtual CPU of
//! the engine (0 and 1), so the engine's per-CPU lists, the slab's remote frees and the zone's
//! refills and drains are the free-running pair's; the recording thread only takes the two
//! sides' turns one after the other. Its events are then split by turn: the sender's turns,
//! with the receiver's time cut out, are the trace's events; the receiver's turns are its
//! receiver segments ([`Trace::from_raw_pair`]). Whole messages are the unit: every message a
//! turn starts, it ends; the window is whole turns, at least `messages` messages, and the
//! socket holds as many messages at its end as at its start.
//!
//! Besides the engine's own events, the capture records the socket's lines as the engine's
//! ring touches them (its slots hold 16 bytes, four to a cache line): per message, the sender
//! writes the skb data's touched lines, the slot and the queue's tail; the receiver reads the
//! slot and the data, and writes the queue's head each time it gives room back (a quarter of
//! the buffer, `udp_rmem_release`); each side reads the other's position when its view of it
//! runs out (the sender every turn, as it finds the socket full; the receiver when it has read
//! up to the tail it last saw). These are per-mm instances (class scope [`Scope::Mm`]): at replay
//! a pair's instances are the pair's own, so pairs meet only at the allocator.
//!
//! Each side marks its message boundary with one operation: the sender after writing the data
//! and before queueing it (where it waits for room), the receiver before taking it (where it
//! waits for a message). The replay's pair flow control waits there ([`crate::replay`]).
//!
//! # Replay
//!
//! Tasks `2i` and `2i + 1` are pair `i`'s sender and receiver, placed as will-it-scale places
//! tasks ([`Pinning::Cores`]): core after core of the first socket, so a pair's two CPUs are
//! two cores of one socket (on a machine with an even number of cores per socket), as netperf
//! ran on one socket of the posting's machine. The posting does not say where its client and
//! server ran; mmtests binds netperf's client and server to two CPUs of one node by default.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use pagelab_bench::profiles::Profile;
use pagelab_bench::run::{Sizes, engine_arena};
use pagelab_mm::CpuId;
use pagelab_sync::trace::{self as raw, LockModel, Sym};
use pagelab_sync::{LockClass, Scope};
use pagelab_workloads::netpipe::{
    Consumer, Kmalloc, Msg, NetpipeParams, Producer, Ring, TOUCH_STRIDE, check_message,
    write_message,
};
use pagelab_workloads::{WorkloadKind, engine};

use crate::error::CaptureError;
use crate::trace::{CaptureGuard, Pinning, Trace, TraceMeta, Window};

/// The socket queue's lines: a slot of the ring (four to a line).
pub static SOCKET_SLOT: LockClass = LockClass::new("socket queue slot", Scope::Mm);
/// The queue's positions: its tail (written by the sender) and head (by the receiver, as it
/// gives room back).
pub static SOCKET_POSITION: LockClass = LockClass::new("socket queue position", Scope::Mm);
/// The lines of an skb's data the two sides touch (named by slot and line, so that a slot's
/// next message reuses them as the allocator reuses a freed buffer).
pub static SKB_DATA: LockClass = LockClass::new("skb data", Scope::Mm);

/// Messages a projection records per send size: whole turns of one release step, at least this
/// many.
pub const MESSAGES: u64 = 4000;

/// The metric a pair trace's replay fills: its send size's (`send-16384`), as the engine's
/// netpipe runs name theirs.
pub fn metric_of(trace: &Trace) -> String {
    trace
        .meta
        .op_unit
        .split_whitespace()
        .next()
        .unwrap_or("messages")
        .to_string()
}

/// The send size a pair trace was captured at (its unit, `send-16384 messages`); `None` when
/// its unit names none.
pub fn send_size_of(trace: &Trace) -> Option<usize> {
    metric_of(trace).strip_prefix("send-")?.parse().ok()
}

/// Untraced and traced windows each (see [`crate::capture`]: this host is shared).
const ROUNDS: usize = 3;

/// Messages warmed up before any window: the allocator's per-CPU lists and the slab caches
/// reach their steady state within a few thousand messages at every size.
const WARMUP_MESSAGES: u64 = 20_000;

/// What to capture: one profile at one send size.
#[derive(Clone, Debug)]
pub struct PairCaptureSpec {
    pub profile: Profile,
    /// Virtual CPUs of the engine (the target machine's count), at least two.
    pub kernel_cpus: usize,
    pub send_size: usize,
    /// Messages recorded at least (whole turns of one release step).
    pub messages: u64,
}

/// The lines of a message's data that the pair touches: netpipe touches one word in every
/// [`TOUCH_STRIDE`], the first and the last; 8 words to a line.
fn data_lines(bytes: usize) -> Vec<usize> {
    let n = (bytes / 8).max(1);
    let mut v: Vec<usize> = (0..n).step_by(TOUCH_STRIDE).map(|w| w / 8).collect();
    v.push((n - 1) / 8);
    v.dedup();
    v
}

/// Instance (identity) of slot `slot`'s line `line` of data.
fn data_instance(slot: usize, line: usize) -> usize {
    (slot << 24) | line
}

/// Turns run in one window: the sender's turns (start, end) and the receiver's, on the time
/// stamp counter.
struct Turns {
    tx: Vec<(u64, u64)>,
    rx: Vec<(u64, u64)>,
}

/// The pair run in lock-step on the calling thread.
struct LockStep<'a> {
    km: &'a Kmalloc,
    ring: &'a Ring,
    /// The ring's two ends, kept across windows: the receiver's read position runs ahead of
    /// the room it has given back, which a fresh end would not know.
    producer: Producer<'a>,
    consumer: Consumer<'a>,
    bytes: usize,
    lines: Vec<usize>,
    /// Sequence numbers of the next message sent and the next received.
    seq: u64,
    rseq: u64,
    /// Positions of the ring as this thread has pushed and popped them.
    tail: usize,
    head: usize,
    /// Each side's view of the other's position, as [`Producer`] and [`Consumer`] keep it: the
    /// head the sender last read (room given back) and the tail the receiver last read.
    seen_head: usize,
    seen_tail: usize,
}

impl LockStep<'_> {
    /// Runs `turns` turns of each side (`record`: marking the socket's lines and the message
    /// boundaries for the recorder, which must be running on this thread): the sender tops the
    /// socket up (the whole socket on the first turn of all), the receiver reads one release
    /// step.
    fn run(&mut self, turns: u64, record: bool) -> Result<Turns, CaptureError> {
        let (tx, rx) = (CpuId(0), CpuId(1));
        let depth = self.ring.capacity();
        let release = self.ring.release();
        let slots = depth.next_power_of_two();
        let mut out = Turns {
            tx: Vec::new(),
            rx: Vec::new(),
        };
        let mem = self.km.mem().clone();
        // Instances: the ring's own addresses for its positions, slot lines by index.
        let tail_line = std::ptr::from_ref(self.ring) as usize;
        let head_line = tail_line + 64;
        for _ in 0..turns {
            let t0 = raw::now();
            while self.ring.len() < depth {
                if self.tail - self.seen_head >= depth {
                    // The sender's view of the head ran out (it found the socket full): it
                    // reads the room given back.
                    self.seen_head = self.tail - self.ring.len();
                    if record {
                        raw::line(
                            &SOCKET_POSITION,
                            head_line,
                            LockModel::Line,
                            false,
                            Sym::Here,
                        );
                    }
                }
                let obj = self
                    .km
                    .kmalloc(tx, self.bytes)
                    .map_err(|e| CaptureError::Engine(format!("kmalloc: {e}")))?;
                write_message(&mem, obj, self.bytes, self.seq);
                let slot = self.tail & (slots - 1);
                if record {
                    for &l in &self.lines {
                        raw::line(
                            &SKB_DATA,
                            data_instance(slot, l),
                            LockModel::Line,
                            true,
                            Sym::Here,
                        );
                    }
                    raw::ops(1);
                    raw::line(&SOCKET_SLOT, slot / 4, LockModel::Line, true, Sym::Here);
                    raw::line(
                        &SOCKET_POSITION,
                        tail_line,
                        LockModel::Line,
                        true,
                        Sym::Here,
                    );
                }
                if !self.producer.push(Msg {
                    obj,
                    size: self.bytes,
                }) {
                    self.km.kfree(tx, obj);
                    return Err(CaptureError::Pair(
                        "the socket refused a message below its depth",
                    ));
                }
                self.tail += 1;
                self.seq += 1;
            }
            let t1 = raw::now();
            out.tx.push((t0, t1));
            for _ in 0..release {
                if record {
                    raw::ops(1);
                }
                if self.head == self.seen_tail {
                    // The receiver's view of the tail ran out (it read all it knew of).
                    self.seen_tail = self.tail;
                    if record {
                        raw::line(
                            &SOCKET_POSITION,
                            tail_line,
                            LockModel::Line,
                            false,
                            Sym::Here,
                        );
                    }
                }
                let given_back = self.ring.len();
                let Some(msg) = self.consumer.pop() else {
                    return Err(CaptureError::Pair("the socket ran empty within a turn"));
                };
                let slot = self.head & (slots - 1);
                check_message(&mem, msg.obj, msg.size, self.rseq)
                    .map_err(|e| CaptureError::Engine(e.to_string()))?;
                if record {
                    raw::line(&SOCKET_SLOT, slot / 4, LockModel::Line, false, Sym::Here);
                    for &l in &self.lines {
                        raw::line(
                            &SKB_DATA,
                            data_instance(slot, l),
                            LockModel::Line,
                            false,
                            Sym::Here,
                        );
                    }
                }
                self.km.kfree(rx, msg.obj);
                self.head += 1;
                self.rseq += 1;
                if record && self.ring.len() < given_back {
                    // The read gave room back: the receiver wrote the head.
                    raw::line(
                        &SOCKET_POSITION,
                        head_line,
                        LockModel::Line,
                        true,
                        Sym::Here,
                    );
                }
            }
            out.rx.push((t1, raw::now()));
        }
        Ok(out)
    }
}

/// The events of `events` inside the stretches `keep` (time stamp ranges, in order), with
/// the time between stretches cut out; one list per stretch when `split`, else one in all.
fn cut(events: &[raw::Event], keep: &[(u64, u64)], split: bool) -> Vec<Vec<raw::Event>> {
    let mut out: Vec<Vec<raw::Event>> = Vec::new();
    let mut removed = 0u64;
    let mut last_end: Option<u64> = None;
    let mut i = 0;
    for &(a, b) in keep {
        if let Some(e) = last_end {
            removed += a.saturating_sub(e);
        }
        last_end = Some(b);
        while i < events.len() && events[i].t < a {
            i += 1;
        }
        if split || out.is_empty() {
            out.push(Vec::new());
        }
        let cur = out.last_mut().expect("pushed above");
        while i < events.len() && events[i].t < b {
            let mut e = events[i];
            e.t -= removed;
            if let raw::Kind::Write { bytes, end } = e.kind {
                e.kind = raw::Kind::Write {
                    bytes,
                    end: end.saturating_sub(removed),
                };
            }
            cur.push(e);
            i += 1;
        }
    }
    out
}

/// Captures one pair at one send size (module docs). Takes well under a second on an idle
/// host: a warm-up, then three untraced and three traced windows of the same turns in turns;
/// the untraced time is the least of its three (thread CPU time), the recording kept the one
/// that lost least time to preemption (wall less CPU time).
pub fn capture_pair(spec: &PairCaptureSpec) -> Result<Trace, CaptureError> {
    if spec.kernel_cpus < 2 {
        return Err(CaptureError::Pair(
            "a netpipe pair needs a machine of at least two CPUs",
        ));
    }
    if spec.messages == 0 {
        return Err(CaptureError::NoCycle);
    }
    let params = NetpipeParams::new(1, spec.send_size);
    let (depth, bytes) = (params.depth(), params.alloc_size());
    let arena = engine_arena(WorkloadKind::Netpipe, 1, Sizes::default());
    let kernel = engine::boot(&spec.profile.policy, arena, spec.kernel_cpus)
        .map_err(CaptureError::Workload)?;
    let km = Kmalloc::new(kernel.mem().clone());
    let ring = Ring::with_release(depth, params.release());
    let lines = data_lines(bytes);
    let release = params.release();
    let turns = spec.messages.div_ceil(release as u64);
    // Events per message: the data lines both ways, the socket's, and the allocator's locks
    // and lines (a few tens at most); the buffer must not grow inside the window.
    let capacity = (turns as usize) * release * (2 * lines.len() + 64) + 16;
    let done = AtomicBool::new(false);
    let r = std::thread::scope(|s| {
        s.spawn(|| -> Result<_, CaptureError> {
            pagelab_workloads::pin::pin_to_core(0);
            kernel.mem().enter_lock_stats();
            let mut ls = LockStep {
                km: &km,
                ring: &ring,
                producer: ring.producer(),
                consumer: ring.consumer(),
                bytes,
                lines: lines.clone(),
                seq: 0,
                rseq: 0,
                tail: 0,
                head: 0,
                seen_head: 0,
                seen_tail: 0,
            };
            ls.run(WARMUP_MESSAGES.div_ceil(release as u64), false)?;
            let timed = |ls: &mut LockStep<'_>, record: bool| -> Result<_, CaptureError> {
                let overhead = if record {
                    let o = raw::measure_overhead();
                    raw::start(capacity);
                    o
                } else {
                    0.0
                };
                let (w0, c0) = (Instant::now(), pagelab_workloads::pft::thread_cpu_ns());
                let t = ls.run(turns, record);
                let cpu = pagelab_workloads::pft::thread_cpu_ns().saturating_sub(c0) as f64;
                let lost = (w0.elapsed().as_nanos() as f64 - cpu).max(0.0);
                let events = if record { raw::stop() } else { Vec::new() };
                Ok((t?, cpu, lost, events, overhead))
            };
            // Untraced and traced windows in turns, as `capture` takes them: the least CPU
            // time of the untraced ones, and the recording that lost least time to the host
            // (a preemption inside a recording is a gap the replay would take for compute).
            let mut untraced = f64::INFINITY;
            let mut best: Option<(Turns, f64, f64, Vec<raw::Event>, f64)> = None;
            for _ in 0..ROUNDS {
                let (_, u, _, _, _) = timed(&mut ls, false)?;
                untraced = untraced.min(u);
                let (t, cpu, lost, events, overhead) = timed(&mut ls, true)?;
                if best.as_ref().is_none_or(|b| lost < b.2) {
                    best = Some((t, cpu, lost, events, overhead));
                }
            }
            done.store(true, Ordering::Relaxed);
            let (turns_rec, traced_ns, _, events, overhead) = best.expect("ROUNDS > 0");
            Ok((turns_rec, traced_ns, untraced, events, overhead))
        })
        .join()
        .map_err(|_| CaptureError::Incomplete("the netpipe pair panicked"))?
    })?;
    let (turns_rec, traced_ns, untraced_ns, events, overhead) = r;
    if events.is_empty() || !done.load(Ordering::Relaxed) {
        return Err(CaptureError::Incomplete(
            "the netpipe recording window recorded nothing",
        ));
    }
    let sender = cut(&events, &turns_rec.tx, false).pop().unwrap_or_default();
    let receiver = cut(&events, &turns_rec.rx, true);
    // The longest gap the kept recording holds on either side, as one task's guard reports it.
    let longest_gap_ns = std::iter::once(&sender)
        .chain(&receiver)
        .map(|side| crate::capture::WindowCheck::of(side, None).longest_gap_ns)
        .fold(0.0, f64::max);
    let meta = TraceMeta {
        workload: WorkloadKind::Netpipe.name().to_string(),
        profile: spec.profile.name.clone(),
        profile_toml: spec.profile.policy.to_toml_string(),
        op_unit: format!("send-{} messages", spec.send_size),
        window: Window::Cycle,
        pinning: Pinning::Cores,
        shared_vma: false,
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
        // The recording kept is the one that lost least time to the host; its own
        // interruptions (gaps of `CaptureGuard::INTERRUPT_NS` or more) come out of both sides
        // as they do from one task's capture ([`Trace::from_raw_pair`]). The scheduler's
        // account is not read here.
        guard: Some(CaptureGuard {
            windows: ROUNDS as u32,
            longest_gap_ns,
            unaccounted: true,
            ..CaptureGuard::default()
        }),
        paced: None,
        iterations: 1,
    };
    let mut trace = Trace::from_raw_pair(meta, &sender, &receiver);
    trace.set_rwsem(spec.profile.policy.locks.rwsem);
    // The engine's pages and slabs go back before the kernel is dropped.
    km.slab().shrink_on(CpuId(0));
    Ok(trace)
}
