//! `pagelab run`: one workload, one target, a list of task counts, one or both modes.
//!
//! On the engine every (task count, mode) boots a fresh kernel from the profile, sized for the
//! workload, with as many virtual CPUs as the largest task count (one machine for the whole
//! sweep, as on real hardware); lock statistics are on (unless [`RunRequest::lock_stat`] says
//! off, to measure what counting costs) and the engine's counters are collected over the
//! measured window. On the host the same workload runs through real system calls.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use pagelab_mm::Policy;
use pagelab_mm::reclaim::swap::Backing;

use crate::results::SampleKey;
use crate::store::StoreError;
use pagelab_workloads::cortenmm::{self, CortenParams};
use pagelab_workloads::engine::{self, EngineCounters, EngineVm};
use pagelab_workloads::host::HostVm;
use pagelab_workloads::host_proc;
use pagelab_workloads::kvcache::{self, KvParams};
use pagelab_workloads::mapbench;
use pagelab_workloads::netpipe;
use pagelab_workloads::page_fault::{self, MEMSIZE, Variant};
use pagelab_workloads::pft::{self, PftParams, Repetition};
use pagelab_workloads::rounds;
use pagelab_workloads::runner::{self, Hooks, SampleSpec};
use pagelab_workloads::vm::Vm;
use pagelab_workloads::{Mode, WorkloadError, WorkloadKind};

/// Where to run.
#[derive(Clone, Debug)]
pub enum Target {
    /// The engine, with a profile (its name and policy).
    Engine { profile: String, policy: Policy },
    /// The host kernel.
    Kernel,
}

impl Target {
    pub fn label(&self) -> String {
        match self {
            Target::Engine { profile, .. } => format!("engine:{profile}"),
            Target::Kernel => "kernel".into(),
        }
    }
}

/// Sizes of the workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizes {
    /// page_fault1/2/3 mapping per iteration (will-it-scale: 128 MiB).
    pub memsize: u64,
    /// pft and lameter: bytes faulted per repetition.
    pub pft_bytes: u64,
    /// kvcache's shape; its server and client thread counts come from the task count.
    pub kvcache: KvParams,
    /// mapbench and mapbench-shared: pages per task's region (RadixVM's `npg`, 1).
    pub map_pages: u64,
    /// The CortenMM tests: requests per task per round (the original's 32).
    pub requests: u64,
}

impl Default for Sizes {
    fn default() -> Self {
        Sizes {
            memsize: MEMSIZE,
            pft_bytes: 1 << 30,
            kvcache: KvParams::default(),
            map_pages: mapbench::PAGES,
            requests: cortenmm::REQUESTS,
        }
    }
}

/// kvcache with `n` tasks: `n` memcached worker tasks and `n` memtier client threads (the
/// posting ran 16 and 16).
pub fn kvcache_params(sizes: Sizes, n: usize) -> KvParams {
    KvParams {
        servers: n,
        clients: n,
        ..sizes.kvcache
    }
}

/// A run request.
#[derive(Clone, Debug)]
pub struct RunRequest {
    pub workload: WorkloadKind,
    pub target: Target,
    pub tasks: Vec<usize>,
    pub modes: Vec<Mode>,
    /// Continuous workloads: samples; pft and lameter: `samples` repetitions.
    pub spec: SampleSpec,
    pub sizes: Sizes,
    /// The whole measurement of each (mode, task count) is repeated this often, each time on
    /// a freshly booted engine (or fresh processes), as mmtests repeats iterations.
    pub repeats: usize,
    /// The number the first repetition is stored under (a caller interleaving repetitions of
    /// several profiles runs one at a time).
    pub first_repeat: usize,
    /// The engine's swap device, for the workloads that swap (kvcache).
    pub swap: Backing,
    /// Count lock statistics on the engine (`--lock-stat`, on by default). Counting is per
    /// class and per thread, off the locks' lines, so it should cost little; off, the run
    /// measures without it and stores no lock counters. kvcache switches counting on itself.
    pub lock_stat: bool,
}

/// One metric's samples.
#[derive(Clone, Debug, PartialEq)]
pub struct Metric {
    pub name: String,
    pub higher_is_better: bool,
    pub samples: Vec<f64>,
}

/// The result for one (task count, mode).
#[derive(Clone, Debug, PartialEq)]
pub struct RunRow {
    pub tasks: usize,
    pub mode: Mode,
    /// Which repetition of the measurement (0-based).
    pub repeat: u32,
    pub metrics: Vec<Metric>,
    pub counters: Option<EngineCounters>,
    /// pft/lameter repetitions as measured (for Lameter's report).
    pub repetitions: Vec<Repetition>,
    pub interrupted: bool,
}

/// What is wrong with a task list; each message quotes the list or the count.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TasksError {
    #[error("`{item}` in task list `{list}` is not a positive number")]
    NotANumber { item: String, list: String },
    #[error("{0} tasks: the engine models at most {ENGINE_MAX_CPUS} CPUs")]
    OverEngineCpus(usize),
    #[error("{0} tasks: pagelab runs at most {HOST_MAX_TASKS} tasks on the host")]
    OverHostTasks(usize),
    #[error("empty range `{range}` in task list `{list}`")]
    EmptyRange { range: String, list: String },
    #[error("task count {count} appears twice in task list `{list}`")]
    Twice { count: usize, list: String },
    #[error("task list `{0}` names no task count")]
    Empty(String),
}

/// Why a run was refused before it began, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The request cannot run here (too large for this machine's memory or task limits, a mode
    /// or target the workload lacks): the message says what to change.
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Tasks(#[from] TasksError),
    /// The engine refused its configuration or could not start the tasks.
    #[error(transparent)]
    Engine(#[from] WorkloadError),
    /// The workload failed while measuring `label` (target, workload, tasks, mode).
    #[error("{label}: {source}")]
    Workload {
        label: String,
        #[source]
        source: WorkloadError,
    },
    /// The caller's sink (the results store) refused a sample or a row.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Parse an mmtests-style task list: `1,2,4` (or space-separated, as shell loops list them),
/// `1..8` (inclusive), `2..16:2` (stride). A count may appear only once.
pub fn parse_tasks(s: &str) -> Result<Vec<usize>, TasksError> {
    parse_tasks_up_to(s, ENGINE_MAX_CPUS, TasksError::OverEngineCpus)
}

/// The most virtual CPUs the engine models.
const ENGINE_MAX_CPUS: usize = 4096;

/// A task list for `target`: on the engine, [`parse_tasks`]; on the host, counts up to a
/// bound of pagelab's own that only keeps a typo from building a huge list. The host's real
/// limits (processes, threads, memory) are checked by [`check`], which names them.
pub fn parse_tasks_for(s: &str, target: &Target) -> Result<Vec<usize>, TasksError> {
    match target {
        Target::Engine { .. } => parse_tasks(s),
        Target::Kernel => parse_tasks_up_to(s, HOST_MAX_TASKS, TasksError::OverHostTasks),
    }
}

/// pagelab's own bound on the task count on the host.
const HOST_MAX_TASKS: usize = 1 << 20;

fn parse_tasks_up_to(
    s: &str,
    max: usize,
    too_many: fn(usize) -> TasksError,
) -> Result<Vec<usize>, TasksError> {
    let mut out: Vec<usize> = Vec::new();
    let num = |t: &str| -> Result<usize, TasksError> {
        let n = t
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|&n| n >= 1)
            .ok_or_else(|| TasksError::NotANumber {
                item: t.to_string(),
                list: s.to_string(),
            })?;
        if n > max {
            return Err(too_many(n));
        }
        Ok(n)
    };
    for part in s
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|p| !p.is_empty())
    {
        let counts: Vec<usize> = if let Some((range, step)) = part.split_once("..") {
            let (hi, stride) = match step.split_once(':') {
                Some((h, st)) => (num(h)?, num(st)?),
                None => (num(step)?, 1),
            };
            let lo = num(range)?;
            if lo > hi {
                return Err(TasksError::EmptyRange {
                    range: part.to_string(),
                    list: s.to_string(),
                });
            }
            (lo..=hi).step_by(stride).collect()
        } else {
            vec![num(part)?]
        };
        for n in counts {
            if out.contains(&n) {
                return Err(TasksError::Twice {
                    count: n,
                    list: s.to_string(),
                });
            }
            out.push(n);
        }
    }
    if out.is_empty() {
        return Err(TasksError::Empty(s.to_string()));
    }
    Ok(out)
}

/// Engine arena for `w` with `tasks` tasks.
pub fn engine_arena(w: WorkloadKind, tasks: usize, sizes: Sizes) -> u64 {
    let t = tasks as u64;
    // Page tables take 1/512 of what they map, plus upper levels; 1/128 is ample.
    let with_pt = |b: u64| b.saturating_add(b / 128);
    let need = match w {
        WorkloadKind::PageFault1 | WorkloadKind::PageFault3 => t * with_pt(sizes.memsize),
        WorkloadKind::PageFault2 => t * with_pt(2 * sizes.memsize),
        WorkloadKind::Pft | WorkloadKind::PftVmaPerThread | WorkloadKind::Lameter => {
            with_pt(sizes.pft_bytes) + t * (4 << 20)
        }
        // Per pair: a full ring of order-3 buffers (8 MiB) and two CPUs' pcp lists and slabs.
        WorkloadKind::Netpipe => t * (16 << 20),
        WorkloadKind::Kvcache => kvcache_params(sizes, tasks).arena_bytes(),
        WorkloadKind::Mapbench | WorkloadKind::MapbenchShared => {
            t.saturating_mul(with_pt(sizes.map_pages.saturating_mul(4096)))
        }
        w => match cortenmm_params(w, sizes) {
            // Every slot's page table, and at most what the requests fault.
            Some(p) => with_pt(p.bytes(tasks)) + t * p.requests * 4 * 4096 + t * (2 << 20),
            None => 0,
        },
    };
    // Slack for per-CPU lists, LRU batches and the watermarks.
    // Saturating: a size too large for the machine must reach `check`'s refusal, not overflow.
    let total = need.saturating_add(64 << 20).saturating_add(t * (2 << 20));
    total.div_ceil(4 << 20).min(u64::MAX >> 22) << 22
}

/// The CortenMM test `w` is, with the request count of `sizes`.
pub fn cortenmm_params(w: WorkloadKind, sizes: Sizes) -> Option<CortenParams> {
    w.cortenmm().map(|(op, contention)| CortenParams {
        op,
        contention,
        requests: sizes.requests,
    })
}

/// What the research designs' benchmarks cannot run: processes mode for the ones whose tasks
/// share one address space, and shapes they refuse.
fn check_research(req: &RunRequest) -> Result<(), RunError> {
    let w = req.workload;
    if w.threads_only() && req.modes.contains(&Mode::Processes) {
        return Err(RunError::Refused(format!(
            "{w} has no processes mode (its tasks work in one address space); use --mode threads"
        )));
    }
    if matches!(w, WorkloadKind::Mapbench | WorkloadKind::MapbenchShared)
        && req.sizes.map_pages == 0
    {
        return Err(RunError::Refused(format!(
            "{w} maps at least one page: --map-pages must be 1 or more"
        )));
    }
    if let Some(p) = cortenmm_params(w, req.sizes) {
        p.validate()
            .map_err(|e| RunError::Refused(format!("{w}: {e}")))?;
    }
    Ok(())
}

/// Check a request against this machine before anything is measured or stored: the engine's
/// arena must fit in the memory available, and on the host the memory the tasks map at once
/// must too. The error is one line that says what to shrink.
pub fn check(req: &RunRequest) -> Result<(), RunError> {
    let max_tasks = req.tasks.iter().copied().max().unwrap_or(1);
    check_netpipe(req)?;
    check_kvcache(req)?;
    check_research(req)?;
    match &req.target {
        Target::Engine { policy, .. } => {
            let mut arena = engine_arena(req.workload, max_tasks, req.sizes);
            if req.workload == WorkloadKind::Kvcache {
                // Its swap device lives in host memory too.
                arena += kvcache_params(req.sizes, max_tasks).swap_pages() * 4096;
            }
            pagelab_mm::arena::Arena::check_size(
                arena,
                std::mem::size_of::<pagelab_mm::page::Page>() as u64,
            )
            .map(|_| ())
            .map_err(|e| {
                let shrink = match req.workload {
                    WorkloadKind::Kvcache => "fewer --keys or a smaller --value-size",
                    WorkloadKind::Netpipe => "fewer tasks",
                    WorkloadKind::Mapbench | WorkloadKind::MapbenchShared => {
                        "a smaller --map-pages or fewer tasks"
                    }
                    w if w.cortenmm().is_some() => "fewer tasks",
                    _ => "a smaller --size/--memsize or fewer tasks",
                };
                RunError::Refused(format!(
                    "{} with {max_tasks} tasks needs an engine arena of {} MiB: {e}; use {shrink}",
                    req.workload,
                    arena >> 20
                ))
            })?;
            // What the engine would refuse at boot (a pcp larger than its zone, a prezero pool
            // larger than the arena) is refused now, before a run is opened in the store.
            for &t in &req.tasks {
                let cpus = if req.workload == WorkloadKind::Netpipe {
                    2 * t
                } else {
                    t
                };
                let cfg =
                    pagelab_mm::MemConfig::new(engine_arena(req.workload, t, req.sizes), cpus);
                pagelab_mm::Mem::check_config(&cfg, policy)
                    .map_err(|e| RunError::Refused(e.to_string()))?;
            }
            Ok(())
        }
        Target::Kernel => {
            check_host_tasks(max_tasks)?;
            let t = max_tasks as u64;
            let need = match req.workload {
                WorkloadKind::PageFault1 | WorkloadKind::PageFault3 => {
                    t.saturating_mul(req.sizes.memsize)
                }
                WorkloadKind::PageFault2 => t.saturating_mul(req.sizes.memsize).saturating_mul(2),
                WorkloadKind::Mapbench | WorkloadKind::MapbenchShared => {
                    t.saturating_mul(req.sizes.map_pages.saturating_mul(4096))
                }
                w => match cortenmm_params(w, req.sizes) {
                    Some(p) => t.saturating_mul(p.requests * cortenmm::MMAP_PAGES * 4096),
                    None => req.sizes.pft_bytes,
                },
            };
            match pagelab_mm::arena::host_mem_available() {
                Some(avail) if need > avail => Err(RunError::Refused(format!(
                    "{} with {max_tasks} tasks maps {} MiB at once but this machine has {} MiB available; use {} or fewer tasks",
                    req.workload,
                    need >> 20,
                    avail >> 20,
                    match req.workload {
                        WorkloadKind::Mapbench | WorkloadKind::MapbenchShared =>
                            "a smaller --map-pages",
                        w if w.cortenmm().is_some() => "fewer --requests",
                        _ => "a smaller --size/--memsize",
                    }
                ))),
                _ => Ok(()),
            }
        }
    }
}

/// The host's limits on how many tasks (processes or threads: the kernel counts both) can
/// exist at once, the smallest first, each with what it is.
fn host_task_limits() -> Vec<(u64, String)> {
    let mut limits = Vec::new();
    let sysctl = |name: &str| -> Option<u64> {
        std::fs::read_to_string(format!("/proc/sys/kernel/{name}"))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    if let Some(n) = rustix::process::getrlimit(rustix::process::Resource::Nproc).current {
        limits.push((
            n,
            format!("this user may have at most {n} processes and threads here (RLIMIT_NPROC, ulimit -u)"),
        ));
    }
    if let Some(n) = sysctl("threads-max") {
        limits.push((
            n,
            format!("this host's kernel allows at most {n} threads (kernel.threads-max)"),
        ));
    }
    if let Some(n) = sysctl("pid_max") {
        limits.push((
            n,
            format!("this host's kernel gives out at most {n} pids (kernel.pid_max)"),
        ));
    }
    limits.sort_by_key(|l| l.0);
    limits
}

/// On the host every task is a thread or a process of its own, beside the ones already running:
/// a count at or above the host's limit would fail part-way through starting them.
fn check_host_tasks(tasks: usize) -> Result<(), RunError> {
    match host_task_limits().into_iter().next() {
        Some((limit, what)) if tasks as u64 >= limit => Err(RunError::Refused(format!(
            "{tasks} tasks on the host kernel: {what}; use fewer tasks"
        ))),
        _ => Ok(()),
    }
}

/// A workload that runs on the engine only, in threads mode: refused on the host kernel, and
/// refused in processes mode with `why` the mode means nothing to it.
fn engine_threads_only(req: &RunRequest, why: &str) -> Result<(), RunError> {
    let w = req.workload;
    if matches!(req.target, Target::Kernel) {
        return Err(RunError::Refused(format!("{w} runs on the engine only")));
    }
    if req.modes.contains(&Mode::Processes) {
        return Err(RunError::Refused(format!(
            "{w} has no processes mode ({why}); use threads"
        )));
    }
    Ok(())
}

/// What netpipe cannot run: the host (it measures the engine's kmalloc), processes mode (its
/// tasks share no address space, so there is nothing for the mode to change) and more pairs
/// than the engine has CPUs for (two each).
fn check_netpipe(req: &RunRequest) -> Result<(), RunError> {
    if req.workload != WorkloadKind::Netpipe {
        return Ok(());
    }
    engine_threads_only(req, "its tasks map no memory")?;
    let max_pairs = req.tasks.iter().copied().max().unwrap_or(1);
    if 2 * max_pairs > 4096 {
        return Err(RunError::Refused(format!(
            "netpipe with {max_pairs} pairs needs {} virtual CPUs; the engine models at most 4096",
            2 * max_pairs
        )));
    }
    Ok(())
}

/// What kvcache cannot run: the host (it needs swap and a memory cgroup the harness would have
/// to set up on the machine), processes mode (memcached is one process), and a shape its own
/// validation refuses.
fn check_kvcache(req: &RunRequest) -> Result<(), RunError> {
    if req.workload != WorkloadKind::Kvcache {
        return Ok(());
    }
    engine_threads_only(req, "memcached is one process")?;
    for &n in &req.tasks {
        kvcache_params(req.sizes, n)
            .validate()
            .map_err(|e| RunError::Refused(e.to_string()))?;
    }
    if let Backing::File(path) = &req.swap {
        check_swap_file(path)?;
    }
    Ok(())
}

/// A swap file must be creatable, or a free swap file pagelab left, before anything is measured
/// or stored: anything else at the path is refused here, unwritten, and the run stores nothing.
fn check_swap_file(path: &std::path::Path) -> Result<(), RunError> {
    pagelab_mm::reclaim::swap::check_swap_path(path).map_err(|e| RunError::Refused(e.to_string()))
}

/// kvcache on the engine: `n` server tasks and `n` client threads; metrics `ops/sec` (one
/// sample per interval) and the latency percentiles `latency-p<q>-us` (one value per run,
/// lower is better).
fn run_kvcache(
    policy: &Policy,
    n: usize,
    req: &RunRequest,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(usize, usize, Option<Kept<'_>>),
) -> Result<(Vec<Metric>, EngineCounters, bool), WorkloadError> {
    let r = kvcache::run(
        policy,
        kvcache_params(req.sizes, n),
        &req.swap,
        req.spec,
        stop,
        &mut |d, t, v| progress(d, t, Some(Kept::Rate(KVCACHE_METRIC, v))),
    )?;
    let mut metrics = vec![Metric {
        name: KVCACHE_METRIC.into(),
        higher_is_better: true,
        samples: r.ops_samples,
    }];
    if !r.interrupted {
        metrics.extend(r.latency_us.iter().map(|&(q, us)| Metric {
            name: format!("latency-p{q}-us"),
            higher_is_better: false,
            samples: vec![us],
        }));
    }
    Ok((metrics, r.counters, r.interrupted))
}

/// netpipe on the engine: `pairs` sender/receiver pairs at every send size in turn, each size
/// on a fresh engine with two virtual CPUs per pair of the largest count; one metric per size,
/// `send-<size>`, in messages per second. The counters hold totals and per-size lock and
/// allocator counts ([`netpipe::Sweep::counters`]).
fn run_netpipe(
    policy: &Policy,
    pairs: usize,
    max_pairs: usize,
    req: &RunRequest,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(usize, usize, Option<Kept<'_>>),
) -> Result<(Vec<Metric>, EngineCounters, bool), WorkloadError> {
    let arena = engine_arena(WorkloadKind::Netpipe, max_pairs, req.sizes);
    pagelab_sync::stats::set_enabled(req.lock_stat);
    let r = netpipe::run_sizes(
        policy,
        arena,
        2 * max_pairs,
        pairs,
        &netpipe::SEND_SIZES,
        req.spec,
        stop,
        &mut |d, t, kept| progress(d, t, kept.map(|(size, v)| Kept::SendSize(size, v))),
    );
    pagelab_sync::stats::set_enabled(false);
    let sweep = r?;
    let metrics = sweep
        .sizes
        .into_iter()
        .map(|s| Metric {
            name: netpipe_metric(s.send_size),
            higher_is_better: true,
            samples: s.samples,
        })
        .collect();
    Ok((metrics, sweep.counters, sweep.interrupted))
}

fn run_one<V: Vm + Send>(
    w: WorkloadKind,
    vms: Vec<V>,
    shared_mm: bool,
    req: &RunRequest,
    stop: &AtomicBool,
    measure_start: &mut dyn FnMut(),
    progress: &mut dyn FnMut(usize, usize, Option<Kept<'_>>),
) -> Result<(Vec<Metric>, Vec<Repetition>, bool), WorkloadError> {
    if let Some(v) = page_fault_variant(w) {
        let memsize = req.sizes.memsize;
        let c = runner::run_continuous(
            vms,
            req.spec,
            stop,
            Hooks {
                measure_start,
                sample: &mut |d, t, kept| progress(d, t, kept.map(Kept::Continuous)),
            },
            |vm, counter, halt| page_fault::task_loop(vm, v, memsize, counter, halt),
        )?;
        return Ok((continuous_metrics(c.samples), Vec::new(), c.interrupted));
    }
    if w == WorkloadKind::Mapbench || w == WorkloadKind::MapbenchShared || w.cortenmm().is_some() {
        return run_research(w, vms, req, stop, measure_start, progress);
    }
    measure_start();
    let (reps, interrupted) =
        pft::run(vms, shared_mm, pft_params(w, req), stop, &mut |d, t, r| {
            progress(d, t, Some(Kept::Repetition(r)))
        })?;
    Ok((pft_metrics(&reps), reps, interrupted))
}

/// The research designs' benchmarks (mapbench, the CortenMM tests) on threads of `vms`, or on
/// engine processes for mapbench. Metric: `ops/sec`.
fn run_research<V: Vm + Send>(
    w: WorkloadKind,
    vms: Vec<V>,
    req: &RunRequest,
    stop: &AtomicBool,
    measure_start: &mut dyn FnMut(),
    progress: &mut dyn FnMut(usize, usize, Option<Kept<'_>>),
) -> Result<(Vec<Metric>, Vec<Repetition>, bool), WorkloadError> {
    let mut sample =
        |d, t, kept: Option<f64>| progress(d, t, kept.map(|v| Kept::Rate(OPS_METRIC, v)));
    let hooks = Hooks {
        measure_start,
        sample: &mut sample,
    };
    let pages = req.sizes.map_pages;
    let r = match w {
        WorkloadKind::Mapbench => {
            runner::run_continuous(vms, req.spec, stop, hooks, |vm, c, halt| {
                mapbench::local_loop(vm, pages, c, halt)
            })
            .map(|c| (c.samples, c.interrupted))
        }
        WorkloadKind::MapbenchShared => {
            rounds::run_rounds(vms, req.spec, stop, hooks, &mapbench::Shared { pages })
                .map(|r| (r.samples, r.interrupted))
        }
        w => {
            let p = cortenmm_params(w, req.sizes)
                .ok_or_else(|| WorkloadError::Config(format!("{w} is not a research benchmark")))?;
            let n = vms.len();
            cortenmm::Corten::new(p, n)
                .and_then(|body| rounds::run_rounds(vms, req.spec, stop, hooks, &body))
                .map(|r| (r.samples, r.interrupted))
        }
    };
    r.map(|(samples, intr)| (ops_metrics(samples), Vec::new(), intr))
}

fn ops_metrics(samples: Vec<f64>) -> Vec<Metric> {
    vec![Metric {
        name: OPS_METRIC.into(),
        higher_is_better: true,
        samples,
    }]
}

fn page_fault_variant(w: WorkloadKind) -> Option<Variant> {
    match w {
        WorkloadKind::PageFault1 => Some(Variant::Anon),
        WorkloadKind::PageFault2 => Some(Variant::PrivateFile),
        WorkloadKind::PageFault3 => Some(Variant::SharedFile),
        _ => None,
    }
}

fn pft_params(w: WorkloadKind, req: &RunRequest) -> PftParams {
    PftParams {
        bytes: req.sizes.pft_bytes,
        repetitions: req.spec.samples,
        vma_per_task: w == WorkloadKind::PftVmaPerThread,
    }
}

fn continuous_metrics(samples: Vec<f64>) -> Vec<Metric> {
    vec![Metric {
        name: CONTINUOUS_METRIC.into(),
        higher_is_better: true,
        samples,
    }]
}

/// The host in processes mode: every task a real process (will-it-scale's and pft's processes
/// mode), counters and results in shared memory.
fn run_host_processes(
    w: WorkloadKind,
    n: usize,
    req: &RunRequest,
    stop: &AtomicBool,
    measure_start: &mut dyn FnMut(),
    progress: &mut dyn FnMut(usize, usize, Option<Kept<'_>>),
) -> Result<(Vec<Metric>, Vec<Repetition>, bool), WorkloadError> {
    if let Some(v) = page_fault_variant(w) {
        let memsize = req.sizes.memsize;
        let c = host_proc::run_continuous_processes(
            n,
            req.spec,
            stop,
            Hooks {
                measure_start,
                sample: &mut |d, t, kept| progress(d, t, kept.map(Kept::Continuous)),
            },
            |vm, counter, halt| page_fault::task_loop(vm, v, memsize, counter, halt),
        )?;
        return Ok((continuous_metrics(c.samples), Vec::new(), c.interrupted));
    }
    if w == WorkloadKind::Mapbench {
        let pages = req.sizes.map_pages;
        let c = host_proc::run_continuous_processes(
            n,
            req.spec,
            stop,
            Hooks {
                measure_start,
                sample: &mut |d, t, kept| progress(d, t, kept.map(|v| Kept::Rate(OPS_METRIC, v))),
            },
            |vm, counter, halt| mapbench::local_loop(vm, pages, counter, halt),
        )?;
        return Ok((ops_metrics(c.samples), Vec::new(), c.interrupted));
    }
    measure_start();
    let (reps, interrupted) =
        host_proc::pft_processes(n, pft_params(w, req), stop, &mut |d, t, r| {
            progress(d, t, Some(Kept::Repetition(r)))
        })?;
    Ok((pft_metrics(&reps), reps, interrupted))
}

fn pft_metrics(reps: &[Repetition]) -> Vec<Metric> {
    vec![
        Metric {
            name: PFT_CPU_METRIC.into(),
            higher_is_better: true,
            samples: reps.iter().map(Repetition::faults_per_cpu).collect(),
        },
        Metric {
            name: CONTINUOUS_METRIC.into(),
            higher_is_better: true,
            samples: reps.iter().map(Repetition::faults_per_sec).collect(),
        },
    ]
}

/// The metric of the continuous page-fault workloads, and pft's per-wall-second rate.
const CONTINUOUS_METRIC: &str = "faults/sec";
/// pft's faults per CPU second.
const PFT_CPU_METRIC: &str = "faults/cpu";
/// kvcache's throughput.
const KVCACHE_METRIC: &str = "ops/sec";
/// The research designs' benchmarks: mapbench iterations, CortenMM requests, per second.
pub const OPS_METRIC: &str = "ops/sec";

/// netpipe's metric for one send size.
fn netpipe_metric(send_size: usize) -> String {
    format!("send-{send_size}")
}

/// A sample the moment a workload took it, before the row it belongs to is finished.
enum Kept<'a> {
    /// A continuous workload's rate (page_fault1/2/3).
    Continuous(f64),
    /// A pft or lameter repetition.
    Repetition(&'a Repetition),
    /// netpipe: messages per second at a send size.
    SendSize(usize, f64),
    /// A rate under the metric named.
    Rate(&'static str, f64),
}

impl Kept<'_> {
    /// `(metric, value)` pairs, every metric higher-is-better, as the row will hold them.
    fn values(&self) -> Vec<(String, f64)> {
        match *self {
            Kept::Continuous(v) => vec![(CONTINUOUS_METRIC.into(), v)],
            Kept::Repetition(r) => vec![
                (PFT_CPU_METRIC.into(), r.faults_per_cpu()),
                (CONTINUOUS_METRIC.into(), r.faults_per_sec()),
            ],
            Kept::SendSize(size, v) => vec![(netpipe_metric(size), v)],
            Kept::Rate(name, v) => vec![(name.into(), v)],
        }
    }
}

/// What [`run`] hands its caller to store.
pub enum Record<'a> {
    /// Samples just measured (one per metric, usually), to be stored at once: a run killed
    /// later keeps them. `sets` are in the order the row's metrics will be.
    Samples {
        repeat: u32,
        sets: Vec<(SampleKey, Vec<f64>)>,
    },
    /// A (mode, task count, repeat) is finished. Each of its samples was handed over as
    /// [`Record::Samples`] before this; what is left to store is the row's counters.
    Row(&'a RunRow),
}

/// The samples of the row being measured, passed on to the caller's sink as they come.
struct RowSink<'s> {
    sink: &'s mut dyn FnMut(Record<'_>) -> Result<(), StoreError>,
    mode: Mode,
    tasks: usize,
    repeat: u32,
    /// Samples handed over so far, per metric.
    passed: Vec<(String, usize)>,
    /// The first error of the sink: the row goes on being measured (a workload cannot be
    /// stopped from its progress hook) but nothing more is stored, and the error ends the run.
    failed: Option<StoreError>,
}

impl RowSink<'_> {
    fn key(&self, metric: &str, higher_is_better: bool) -> SampleKey {
        SampleKey {
            mode: self.mode.to_string(),
            tasks: self.tasks as u32,
            metric: metric.to_string(),
            higher_is_better,
        }
    }

    fn pass(&mut self, sets: Vec<(SampleKey, Vec<f64>)>) {
        if self.failed.is_some() || sets.iter().all(|(_, v)| v.is_empty()) {
            return;
        }
        let counts: Vec<(String, usize)> = sets
            .iter()
            .map(|(k, v)| (k.metric.clone(), v.len()))
            .collect();
        match (self.sink)(Record::Samples {
            repeat: self.repeat,
            sets,
        }) {
            Ok(()) => {
                for (metric, n) in counts {
                    match self.passed.iter_mut().find(|(m, _)| *m == metric) {
                        Some((_, c)) => *c += n,
                        None => self.passed.push((metric, n)),
                    }
                }
            }
            Err(e) => self.failed = Some(e),
        }
    }

    fn kept(&mut self, kept: &Kept<'_>) {
        let sets = kept
            .values()
            .into_iter()
            .map(|(m, v)| (self.key(&m, true), vec![v]))
            .collect();
        self.pass(sets);
    }

    /// The row is measured: hand over the samples not passed yet (values known only at the end,
    /// like kvcache's latency percentiles), then the row itself.
    fn finish(mut self, row: &RunRow) -> Result<(), StoreError> {
        let rest: Vec<(SampleKey, Vec<f64>)> = row
            .metrics
            .iter()
            .map(|m| {
                let done = self
                    .passed
                    .iter()
                    .find(|(n, _)| *n == m.name)
                    .map_or(0, |p| p.1);
                (
                    self.key(&m.name, m.higher_is_better),
                    m.samples.get(done..).unwrap_or_default().to_vec(),
                )
            })
            .filter(|(_, v)| !v.is_empty())
            .collect();
        self.pass(rest);
        if let Some(e) = self.failed {
            return Err(e);
        }
        (self.sink)(Record::Row(row))
    }
}

/// Run the request; `progress(label, done, total)` reports each sample, and `sink` receives each
/// sample as soon as it is measured ([`Record::Samples`]) and each row once it is finished
/// ([`Record::Row`]). The store writes them there, one transaction per sample, so a run stopped
/// in any way (Ctrl-C, a failure, `kill -9`, power loss) keeps every sample but the one under
/// way. Returns the rows.
pub fn run(
    req: &RunRequest,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(&str, usize, usize),
    sink: &mut dyn FnMut(Record<'_>) -> Result<(), StoreError>,
) -> Result<Vec<RunRow>, RunError> {
    let mut rows = Vec::new();
    let max_tasks = req.tasks.iter().copied().max().unwrap_or(1);
    let repeats = req.repeats.max(1);
    check_netpipe(req)?;
    check_kvcache(req)?;
    check_research(req)?;
    for &mode in &req.modes {
        for &n in &req.tasks {
            for repeat in 0..repeats {
                let label = if repeats > 1 {
                    format!(
                        "{} {} {n} {mode} (repeat {}/{repeats})",
                        req.target.label(),
                        req.workload,
                        repeat + 1
                    )
                } else {
                    format!("{} {} {n} {mode}", req.target.label(), req.workload)
                };
                let mut rows_sink = RowSink {
                    sink: &mut *sink,
                    mode,
                    tasks: n,
                    repeat: (req.first_repeat + repeat) as u32,
                    passed: Vec::new(),
                    failed: None,
                };
                let mut prog = |d: usize, t: usize, kept: Option<Kept>| {
                    progress(&label, d, t);
                    if let Some(k) = kept {
                        rows_sink.kept(&k);
                    }
                };
                let lameter = req.workload == WorkloadKind::Lameter;
                let (metrics, reps, counters, interrupted) = match &req.target {
                    Target::Engine { policy, .. } if req.workload == WorkloadKind::Netpipe => {
                        let (m, c, intr) = run_netpipe(policy, n, max_tasks, req, stop, &mut prog)
                            .map_err(|source| RunError::Workload {
                                label: label.clone(),
                                source,
                            })?;
                        (m, Vec::new(), Some(c), intr)
                    }
                    Target::Engine { policy, .. } if req.workload == WorkloadKind::Kvcache => {
                        let (m, c, intr) =
                            run_kvcache(policy, n, req, stop, &mut prog).map_err(|source| {
                                RunError::Workload {
                                    label: label.clone(),
                                    source,
                                }
                            })?;
                        (m, Vec::new(), Some(c), intr)
                    }
                    Target::Engine { policy, .. } => {
                        let arena = engine_arena(req.workload, max_tasks, req.sizes);
                        let k = engine::boot(policy, arena, max_tasks)?;
                        let (erun, vms): (_, Vec<EngineVm>) = engine::tasks(&k, n, mode, lameter)?;
                        pagelab_sync::stats::set_enabled(req.lock_stat);
                        let mut start = || erun.reset();
                        let r = run_one(
                            req.workload,
                            vms,
                            mode == Mode::Threads,
                            req,
                            stop,
                            &mut start,
                            &mut prog,
                        );
                        pagelab_sync::stats::set_enabled(false);
                        let (m, reps, intr) = r.map_err(|source| RunError::Workload {
                            label: label.clone(),
                            source,
                        })?;
                        (m, reps, Some(erun.counters()), intr)
                    }
                    Target::Kernel if mode == Mode::Processes => {
                        let mut start = || {};
                        let (m, reps, intr) =
                            run_host_processes(req.workload, n, req, stop, &mut start, &mut prog)
                                .map_err(|source| RunError::Workload {
                                label: label.clone(),
                                source,
                            })?;
                        (m, reps, None, intr)
                    }
                    Target::Kernel => {
                        let vms = HostVm::threads(n);
                        let mut start = || {};
                        let (m, reps, intr) =
                            run_one(req.workload, vms, true, req, stop, &mut start, &mut prog)
                                .map_err(|source| RunError::Workload {
                                    label: label.clone(),
                                    source,
                                })?;
                        (m, reps, None, intr)
                    }
                };
                let mut counters = counters;
                if !req.lock_stat
                    && let Some(c) = &mut counters
                {
                    // Nothing was counted: zeros would read as "never taken".
                    c.locks.clear();
                }
                let row = RunRow {
                    tasks: n,
                    mode,
                    repeat: (req.first_repeat + repeat) as u32,
                    metrics,
                    counters,
                    repetitions: reps,
                    interrupted,
                };
                rows_sink.finish(&row)?;
                rows.push(row);
                if interrupted {
                    return Ok(rows);
                }
            }
        }
    }
    Ok(rows)
}

/// The mmtests summary of a metric: Hmean and HStddev for rates, Amean and Stddev otherwise.
fn summary(m: &Metric) -> (f64, f64) {
    if m.higher_is_better {
        (
            crate::stats::hmean(&m.samples),
            crate::stats::hstddev(&m.samples),
        )
    } else {
        (
            crate::stats::amean(&m.samples),
            crate::stats::stddev(&m.samples),
        )
    }
}

/// Human-readable rate: 1.23M.
fn rate(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.3}M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1}k", x / 1e3)
    } else {
        format!("{x:.1}")
    }
}

impl RunRow {
    /// The row's samples keyed as the store keeps them.
    pub fn sample_sets(&self) -> Vec<(SampleKey, Vec<f64>)> {
        self.metrics
            .iter()
            .map(|m| {
                (
                    SampleKey {
                        mode: self.mode.to_string(),
                        tasks: self.tasks as u32,
                        metric: m.name.clone(),
                        higher_is_better: m.higher_is_better,
                    },
                    m.samples.clone(),
                )
            })
            .collect()
    }

    /// The engine's counters flattened to `(name, value)`: `event:<name>` and
    /// `lock:<class>:acquisitions|contended|wait_ns`.
    pub fn counter_values(&self) -> Vec<(String, f64)> {
        let Some(c) = &self.counters else {
            return Vec::new();
        };
        let mut out: Vec<(String, f64)> = c
            .events
            .iter()
            .map(|(n, v)| (format!("event:{n}"), *v as f64))
            .collect();
        for (class, acq, cont, wait) in &c.locks {
            out.push((format!("lock:{class}:acquisitions"), *acq as f64));
            out.push((format!("lock:{class}:contended"), *cont as f64));
            out.push((format!("lock:{class}:wait_ns"), *wait as f64));
        }
        out
    }
}

/// Rows of the same (mode, task count) with their repeats' samples pooled, in first-seen order.
fn pooled(rows: &[RunRow]) -> Vec<RunRow> {
    let mut out: Vec<RunRow> = Vec::new();
    for r in rows {
        match out
            .iter_mut()
            .find(|o| o.mode == r.mode && o.tasks == r.tasks)
        {
            Some(o) => {
                for (om, m) in o.metrics.iter_mut().zip(&r.metrics) {
                    om.samples.extend_from_slice(&m.samples);
                }
                o.repetitions.extend(r.repetitions.iter().cloned());
                o.interrupted |= r.interrupted;
            }
            None => out.push(r.clone()),
        }
    }
    out
}

/// The rows as text: a results table (mean and standard deviation of each metric, scaling
/// against the first task count of the same mode), the engine's counters per row, and for
/// Lameter's test his report.
pub fn render(req: &RunRequest, all_rows: &[RunRow]) -> String {
    use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
    let mut out = String::new();
    let mut pooled_rows = pooled(all_rows);
    // A row stopped before its first sample has nothing to summarise: its mean would be NaN.
    pooled_rows.retain(|r| r.metrics.iter().any(|m| !m.samples.is_empty()));
    let rows = &pooled_rows[..];
    let Some(first) = rows.first() else {
        return if all_rows.iter().any(|r| r.interrupted) {
            "interrupted before the first sample: nothing was measured\n".into()
        } else {
            "no results\n".into()
        };
    };
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    let mut header = vec!["mode".to_string(), "tasks".to_string()];
    for m in &first.metrics {
        let (avg, sd) = if m.higher_is_better {
            ("Hmean", "HStddev")
        } else {
            ("Amean", "Stddev")
        };
        header.push(format!("{} {avg}", m.name));
        header.push(sd.into());
        header.push("per task".into());
        header.push("vs first".into());
    }
    header.push("samples".into());
    t.set_header(header);
    for r in rows {
        let base = rows.iter().find(|b| b.mode == r.mode).unwrap_or(r);
        let mut row = vec![r.mode.to_string(), r.tasks.to_string()];
        for (i, m) in r.metrics.iter().enumerate() {
            if m.samples.is_empty() {
                row.extend(["-", "-", "-", "-"].map(String::from));
                continue;
            }
            let (mu, sd) = summary(m);
            let b = base
                .metrics
                .get(i)
                .filter(|bm| !bm.samples.is_empty())
                .map_or(f64::NAN, |bm| summary(bm).0);
            row.push(rate(mu));
            row.push(rate(sd));
            row.push(if m.name == "faults/cpu" {
                "-".into()
            } else {
                rate(mu / r.tasks as f64)
            });
            row.push(if b.is_finite() && b != 0.0 {
                format!("{:.2}x", mu / b)
            } else {
                "-".into()
            });
        }
        row.push(r.metrics.first().map_or(0, |m| m.samples.len()).to_string());
        t.add_row(row);
    }
    out += &format!("{} on {}\n{t}\n", req.workload, req.target.label());
    if req.workload == WorkloadKind::Lameter {
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED);
        t.set_header([
            "Gb",
            "Rep",
            "Thr",
            "User",
            "System",
            "Wall",
            "flt/cpu/s",
            "fault/wsec",
        ]);
        for r in rows {
            for l in
                pagelab_workloads::lameter::report(req.sizes.pft_bytes, r.tasks, &r.repetitions)
            {
                let o = |v: Option<f64>| v.map_or("-".into(), |x| format!("{x:.3}s"));
                t.add_row(vec![
                    format!("{:.2}", l.gib),
                    l.rep.to_string(),
                    l.threads.to_string(),
                    o(l.user_s),
                    o(l.system_s),
                    format!("{:.3}s", l.wall_s),
                    format!("{:.0}", l.faults_per_cpu_s),
                    format!("{:.0}", l.faults_per_wall_s),
                ]);
            }
        }
        out += &format!(
            "\nLameter's report (system time on the engine is time in its fault path)\n{t}\n"
        );
    }
    for r in all_rows {
        let Some(c) = &r.counters else { continue };
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED);
        t.set_header(["lock class", "acquisitions", "contended", "wait ms"]);
        for (name, acq, cont, wait) in &c.locks {
            if *acq == 0 {
                continue;
            }
            t.add_row(vec![
                name.clone(),
                acq.to_string(),
                format!("{} ({:.2}%)", cont, *cont as f64 * 100.0 / *acq as f64),
                format!("{:.1}", *wait as f64 / 1e6),
            ]);
        }
        let events: Vec<String> = c.events.iter().map(|(n, v)| format!("{n}={v}")).collect();
        out += &format!(
            "\nengine counters, {} tasks {}{} (measured window)\n{t}\nevents: {}\n",
            r.tasks,
            r.mode,
            if req.repeats > 1 {
                format!(", repeat {}", r.repeat + 1)
            } else {
                String::new()
            },
            events.join(" ")
        );
    }
    if rows.iter().any(|r| r.interrupted) {
        out += "\ninterrupted: the tables hold what finished\n";
    }
    out
}

/// A short sampling spec for tests and smoke runs.
pub fn quick_spec() -> SampleSpec {
    SampleSpec {
        samples: 2,
        warmup: 1,
        interval: Duration::from_millis(100),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_lists_as_mmtests_writes_them() {
        assert_eq!(parse_tasks("1,2,4").unwrap(), vec![1, 2, 4]);
        assert_eq!(parse_tasks("1..4").unwrap(), vec![1, 2, 3, 4]);
        assert_eq!(parse_tasks("2..10:4").unwrap(), vec![2, 6, 10]);
        assert_eq!(parse_tasks("1, 3..4").unwrap(), vec![1, 3, 4]);
        assert!(
            parse_tasks("0")
                .unwrap_err()
                .to_string()
                .contains("not a positive")
        );
        assert!(
            parse_tasks("4..1")
                .unwrap_err()
                .to_string()
                .contains("empty range")
        );
        assert!(
            parse_tasks("")
                .unwrap_err()
                .to_string()
                .contains("names no task")
        );
        assert_eq!(
            parse_tasks("1,x"),
            Err(TasksError::NotANumber {
                item: "x".into(),
                list: "1,x".into()
            })
        );
        assert!(
            parse_tasks("5000")
                .unwrap_err()
                .to_string()
                .contains("4096")
        );
        // On the host, the engine's limit does not apply; the host's are checked by `check`.
        assert_eq!(
            parse_tasks_for("5000", &Target::Kernel).unwrap(),
            vec![5000]
        );
        assert_eq!(parse_tasks("1 2 4").unwrap(), vec![1, 2, 4]);
        // A huge range is refused before anything is built.
        assert!(
            parse_tasks("1..100000000000")
                .unwrap_err()
                .to_string()
                .contains("at most 4096")
        );
        assert!(
            parse_tasks("1,1")
                .unwrap_err()
                .to_string()
                .contains("appears twice")
        );
        assert!(
            parse_tasks("1..4,2")
                .unwrap_err()
                .to_string()
                .contains("appears twice")
        );
    }

    #[test]
    fn requests_larger_than_the_machine_are_refused_up_front() {
        let mut req = RunRequest {
            workload: WorkloadKind::Pft,
            target: Target::Kernel,
            tasks: vec![1, 2],
            modes: vec![Mode::Threads],
            spec: quick_spec(),
            sizes: Sizes::default(),
            repeats: 1,
            first_repeat: 0,
            swap: Backing::Memory { compress: false },
            lock_stat: true,
        };
        assert!(check(&req).is_ok());
        req.tasks = vec![1, 10_000_000];
        let e = check(&req).unwrap_err().to_string();
        assert!(
            e.contains("host") && !e.contains("engine") && !e.contains('\n'),
            "{e}"
        );
        req.tasks = vec![1, 2];
        req.sizes.pft_bytes = 1 << 50;
        let e = check(&req).unwrap_err().to_string();
        assert!(e.contains("available") && !e.contains('\n'), "{e}");
        req.target = Target::Engine {
            profile: "linux-6.7".into(),
            policy: Policy::default(),
        };
        let e = check(&req).unwrap_err().to_string();
        assert!(e.contains("engine arena"), "{e}");
        req.sizes.pft_bytes = 64 << 20;
        assert!(check(&req).is_ok());
    }

    fn netpipe_request(target: Target) -> RunRequest {
        RunRequest {
            workload: WorkloadKind::Netpipe,
            target,
            tasks: vec![1],
            modes: vec![Mode::Threads],
            spec: SampleSpec {
                samples: 1,
                warmup: 1,
                interval: Duration::from_millis(20),
            },
            sizes: Sizes::default(),
            repeats: 1,
            first_repeat: 0,
            swap: Backing::Memory { compress: false },
            lock_stat: true,
        }
    }

    /// A store that refuses a sample ends the run with the store's own error, typed, not a
    /// string: the caller can tell a full disk from a failed workload.
    #[test]
    fn a_sink_failure_ends_the_run_with_the_store_error() {
        let p = crate::profiles::load("hopcpu").unwrap();
        let req = netpipe_request(Target::Engine {
            profile: p.name.clone(),
            policy: p.policy.clone(),
        });
        let stop = AtomicBool::new(false);
        let e = run(&req, &stop, &mut |_, _, _| {}, &mut |_| {
            Err(StoreError::ReadOnly {
                path: "/x/results.db".into(),
            })
        })
        .unwrap_err();
        assert!(
            matches!(e, RunError::Store(StoreError::ReadOnly { .. })),
            "{e:?}"
        );
        assert!(e.to_string().contains("/x/results.db"), "{e}");
    }

    #[test]
    fn netpipe_yields_one_metric_per_send_size() {
        let p = crate::profiles::load("hopcpu").unwrap();
        let req = netpipe_request(Target::Engine {
            profile: p.name.clone(),
            policy: p.policy.clone(),
        });
        check(&req).unwrap();
        let _switch = crate::micro::stats_switch();
        let stop = AtomicBool::new(false);
        let (mut finished, mut passed) = (0, Vec::new());
        let rows = run(&req, &stop, &mut |_, _, _| {}, &mut |r| {
            match r {
                Record::Row(_) => finished += 1,
                Record::Samples { sets, .. } => passed.extend(sets),
            }
            Ok(())
        })
        .unwrap();
        assert_eq!((rows.len(), finished), (1, 1));
        // Every sample was passed on as it was taken, one at a time, before the row ended.
        assert_eq!(passed.len(), 9, "{passed:?}");
        assert!(passed.iter().all(|(_, v)| v.len() == 1));
        assert_eq!(passed[0].1, rows[0].metrics[0].samples);
        let names: Vec<&str> = rows[0].metrics.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "send-64",
                "send-128",
                "send-256",
                "send-1024",
                "send-2048",
                "send-3312",
                "send-4096",
                "send-8192",
                "send-16384"
            ]
        );
        // One 20 ms window per size: on a loaded host a pair may get no CPU time in one of
        // them, so a size may measure 0, but never a negative or non-finite rate, and the run
        // as a whole moves messages.
        assert!(
            rows[0].metrics.iter().all(|m| m.higher_is_better
                && m.samples.len() == 1
                && m.samples[0].is_finite()
                && m.samples[0] >= 0.0),
            "{:?}",
            rows[0].metrics
        );
        assert!(rows[0].metrics.iter().map(|m| m.samples[0]).sum::<f64>() > 0.0);
        let keys: Vec<String> = rows[0]
            .sample_sets()
            .into_iter()
            .map(|(k, _)| format!("{}-{}", k.metric, k.tasks))
            .collect();
        assert!(keys.contains(&"send-1024-1".to_string()), "{keys:?}");
        let counters = rows[0].counter_values();
        assert!(
            counters
                .iter()
                .any(|(n, _)| n == "lock:zone->lock [send-16384]:acquisitions"),
            "{counters:?}"
        );
        // Events count whatever the lock statistics switch (which other tests flip) says.
        assert!(
            counters
                .iter()
                .any(|(n, v)| n == "event:send-16384/pcp_alloc_hit" && *v > 0.0),
            "{counters:?}"
        );
        let text = render(&req, &rows);
        assert!(text.contains("send-16384 Hmean"), "{text}");
    }

    #[test]
    fn netpipe_refuses_the_host_and_processes_mode() {
        let req = netpipe_request(Target::Kernel);
        let e = check(&req).unwrap_err();
        assert!(matches!(e, RunError::Refused(_)), "{e:?}");
        assert_eq!(e.to_string(), "netpipe runs on the engine only");
        let stop = AtomicBool::new(false);
        let e = run(&req, &stop, &mut |_, _, _| {}, &mut |_| Ok(()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("engine only"), "{e}");
        let mut req = netpipe_request(Target::Engine {
            profile: "linux-6.7".into(),
            policy: Policy::default(),
        });
        req.modes = vec![Mode::Processes];
        assert!(check(&req).unwrap_err().to_string().contains("processes"));
    }

    /// `lock_stat: false` runs without counting and stores no lock counters (zeros would read
    /// as locks never taken); on, the fault path's classes are there.
    #[test]
    fn lock_stat_off_stores_no_lock_counters() {
        let mut req = RunRequest {
            workload: WorkloadKind::Pft,
            target: Target::Engine {
                profile: "linux-6.7".into(),
                policy: Policy::default(),
            },
            tasks: vec![2],
            modes: vec![Mode::Threads],
            spec: SampleSpec {
                samples: 1,
                warmup: 0,
                interval: Duration::from_millis(10),
            },
            sizes: Sizes {
                pft_bytes: 8 << 20,
                ..Sizes::default()
            },
            repeats: 1,
            first_repeat: 0,
            swap: Backing::Memory { compress: false },
            lock_stat: true,
        };
        let _switch = crate::micro::stats_switch();
        let stop = AtomicBool::new(false);
        let locks = |req: &RunRequest| {
            let rows = run(req, &stop, &mut |_, _, _| {}, &mut |_| Ok(())).unwrap();
            rows[0]
                .counter_values()
                .into_iter()
                .filter(|(n, _)| n.starts_with("lock:"))
                .collect::<Vec<_>>()
        };
        let on = locks(&req);
        assert!(
            on.iter()
                .any(|(n, v)| n == "lock:ptl:acquisitions" && *v > 0.0),
            "{on:?}"
        );
        req.lock_stat = false;
        assert_eq!(locks(&req), Vec::new());
    }

    #[test]
    fn a_run_stopped_before_its_first_sample_prints_no_nan() {
        let req = netpipe_request(Target::Kernel);
        let row = |metrics, interrupted| RunRow {
            tasks: 1,
            mode: Mode::Threads,
            repeat: 0,
            metrics,
            counters: None,
            repetitions: Vec::new(),
            interrupted,
        };
        let text = render(&req, &[row(continuous_metrics(Vec::new()), true)]);
        assert!(
            !text.contains("NaN") && text.contains("nothing was measured"),
            "{text}"
        );
        // A row with samples beside one without: the empty one is left out.
        let text = render(
            &req,
            &[
                row(continuous_metrics(vec![1e6, 1.1e6]), false),
                RunRow {
                    tasks: 2,
                    ..row(continuous_metrics(Vec::new()), true)
                },
            ],
        );
        assert!(!text.contains("NaN") && text.contains("1.048M"), "{text}");
    }

    fn research_request(w: WorkloadKind, target: Target) -> RunRequest {
        RunRequest {
            workload: w,
            target,
            tasks: vec![1, 2],
            modes: vec![Mode::Threads],
            spec: SampleSpec {
                samples: 2,
                warmup: 1,
                interval: Duration::from_millis(20),
            },
            sizes: Sizes::default(),
            repeats: 1,
            first_repeat: 0,
            swap: Backing::Memory { compress: false },
            lock_stat: true,
        }
    }

    fn engine() -> Target {
        Target::Engine {
            profile: "linux-6.7".into(),
            policy: Policy::default(),
        }
    }

    /// The research benchmarks refuse what they cannot run, in one line, before anything runs.
    #[test]
    fn research_benchmarks_refuse_bad_shapes_up_front() {
        let one_line = |r: Result<(), RunError>, has: &str| {
            let e = r.unwrap_err().to_string();
            assert!(e.contains(has) && !e.contains('\n'), "{e}");
        };
        for w in [
            WorkloadKind::MapbenchShared,
            WorkloadKind::CortenmmPfHigh,
            WorkloadKind::CortenmmMmap,
        ] {
            let mut req = research_request(w, engine());
            check(&req).unwrap();
            req.modes = vec![Mode::Processes, Mode::Threads];
            one_line(check(&req), "no processes mode");
            let stop = AtomicBool::new(false);
            let e = run(&req, &stop, &mut |_, _, _| {}, &mut |_| Ok(()))
                .unwrap_err()
                .to_string();
            assert!(e.contains("no processes mode"), "{e}");
        }
        // mapbench has a processes mode.
        let mut req = research_request(WorkloadKind::Mapbench, Target::Kernel);
        req.modes = vec![Mode::Processes];
        check(&req).unwrap();
        req.sizes.map_pages = 0;
        one_line(check(&req), "--map-pages");
        // Regions larger than the machine.
        req.sizes.map_pages = 1 << 40;
        one_line(check(&req), "available");
        req.target = engine();
        one_line(check(&req), "engine arena");
        for requests in [0, cortenmm::MAX_REQUESTS + 1] {
            let mut req = research_request(WorkloadKind::CortenmmMunmapLow, Target::Kernel);
            req.sizes.requests = requests;
            one_line(check(&req), "requests per task");
        }
    }

    /// A CortenMM test through `run`: one `ops/sec` sample per kept interval, handed over as it
    /// is taken, and the engine's counters with the row.
    #[test]
    fn cortenmm_rows_hold_ops_per_second() {
        let _switch = crate::micro::stats_switch();
        for w in [
            WorkloadKind::CortenmmMunmapHigh,
            WorkloadKind::MapbenchShared,
        ] {
            let req = research_request(w, engine());
            let stop = AtomicBool::new(false);
            let mut passed = Vec::new();
            let rows = run(&req, &stop, &mut |_, _, _| {}, &mut |r| {
                if let Record::Samples { sets, .. } = r {
                    passed.extend(sets);
                }
                Ok(())
            })
            .unwrap();
            assert_eq!(rows.len(), 2);
            for r in &rows {
                assert_eq!(r.metrics.len(), 1);
                assert_eq!(r.metrics[0].name, OPS_METRIC);
                assert_eq!(r.metrics[0].samples.len(), 2);
                assert!(r.metrics[0].samples.iter().all(|v| *v > 0.0), "{r:?}");
                let c = r.counter_values();
                assert!(
                    c.iter().any(|(n, v)| n == "event:unmap_pages" && *v > 0.0),
                    "{c:?}"
                );
            }
            assert_eq!(passed.len(), 4, "{passed:?}");
            assert!(render(&req, &rows).contains("ops/sec Hmean"));
        }
    }

    #[test]
    fn arena_covers_the_workload() {
        let s = Sizes::default();
        assert!(engine_arena(WorkloadKind::PageFault1, 2, s) >= 2 * MEMSIZE);
        assert!(engine_arena(WorkloadKind::PageFault2, 2, s) >= 4 * MEMSIZE);
        assert!(engine_arena(WorkloadKind::Pft, 4, s) >= s.pft_bytes);
        assert_eq!(engine_arena(WorkloadKind::Pft, 4, s) % (4 << 20), 0);
        assert!(engine_arena(WorkloadKind::Netpipe, 1, s) >= 64 << 20);
        assert!(engine_arena(WorkloadKind::Mapbench, 2, s) >= 64 << 20);
        assert!(engine_arena(WorkloadKind::CortenmmPfHigh, 4, s) >= 4 * (2 << 20));
        // A region no machine has is a refusal, not an overflow.
        let huge = Sizes {
            map_pages: u64::MAX,
            ..s
        };
        assert_eq!(
            engine_arena(WorkloadKind::MapbenchShared, 4, huge) % (4 << 20),
            0
        );
        let mut req = research_request(WorkloadKind::MapbenchShared, engine());
        req.sizes = huge;
        assert!(
            check(&req)
                .unwrap_err()
                .to_string()
                .contains("engine arena")
        );
    }
}
