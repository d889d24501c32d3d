//! Processes mode on the host kernel: every task is a real child process with its own address
//! space, as in will-it-scale's `*_processes` binaries and mmtests `pft` run with processes.
//!
//! will-it-scale forks one child per task; each child loops over the test and bumps its own
//! counter in a shared-memory area, one counter per cache line, and the parent samples the
//! counters once a second. This module does the same for the workloads of this crate: the parent
//! creates one `MAP_SHARED | MAP_ANONYMOUS` region, forks `n` children, and each child runs the
//! benchmark body on a fresh [`HostVm`] of its own (so each has its own `mm`: its own
//! `mmap_lock`, page tables and RSS counters, and no TLB shootdowns to siblings).
//!
//! # The shared region
//!
//! Zero-filled by the kernel, laid out as consecutive 128-byte-aligned blocks (128 bytes covers
//! adjacent-line prefetch on x86 as well as 128-byte lines elsewhere):
//!
//! | block | what | written by |
//! | --- | --- | --- |
//! | `Control` | ready count, go flag, halt flag, first failing task | parent and children |
//! | `BarrierState` | the repetition barrier: arrivals and a generation counter | everyone |
//! | `n` × `CounterSlot` | each task's operation counter | that task only |
//! | `n` × `ErrorSlot` | each task's error: a code and a short message | that task only |
//! | `n × reps` × `RepSlot` | pft: each task's result per repetition | that task only |
//!
//! Every field is an atomic (`AtomicU64`, `AtomicU32`, `AtomicU8`, and `AtomicBool` for the
//! halt flag the benchmark bodies take as their stop flag), and every access goes through them,
//! so sharing the memory between processes is as well defined as sharing it between threads.
//! The region is unmapped once every child has been reaped.
//!
//! # Why fork and not a re-exec'd worker
//!
//! A worker started by `exec` would need an entry point that knows to act as a worker: the CLI
//! could grow one, but the test binaries (and benches) cannot be re-executed as workers, and the
//! benchmark body is an arbitrary closure. `fork` runs the body the caller handed in, in a copy
//! of the caller's address space, with nothing to serialise.
//!
//! # Fork safety: the rules the child follows
//!
//! The parent may be multi-threaded (the test harness, a progress-bar thread, the Ctrl-C
//! thread). After `fork` only the forking thread exists in the child, and any lock another
//! thread held at that moment stays held forever. So the child:
//! - touches only memory of its own (copy-on-write copies) and the shared region through
//!   atomics; it allocates freely, since glibc's `malloc` is reset for the child by `fork`
//!   (and the Rust global allocator is `malloc`);
//! - takes no other lock: it prints nothing (stdout/stderr are locked `std` objects), reads no
//!   environment variable (`std::env` takes a lock), and does no I/O besides the system calls
//!   of the workload itself and pinning;
//! - never returns into the parent's Rust code and never runs destructors of the parent's
//!   objects (which it holds copies of): it leaves with `_exit` (0 when done, 1 on an error
//!   recorded in its slot, 101 on a panic), which also skips `atexit` handlers and stdio
//!   flushing. A panic is caught with `catch_unwind` and recorded; it never unwinds past the
//!   child's entry. (The default panic hook prints to stderr, so a panic while another parent
//!   thread held the stderr lock could hang the child; the parent then kills it after the halt
//!   grace period and reports that. Panics in a body are bugs, so that is acceptable.)
//! - asks for `SIGKILL` when the forking thread dies (`PR_SET_PDEATHSIG`), so no child outlives
//!   its parent, and ignores `SIGINT`, `SIGTERM` and `SIGHUP`: Ctrl-C or a hang-up on the
//!   terminal reaches the whole process group, and so does a `kill` of the group or a service
//!   manager's stop; it is the parent that decides to stop (it sets the halt flag) and marks its
//!   run incomplete. A child that died of one of these would make the run a failure instead.
//!
//! The parent keeps every child in a guard whose `Drop` kills (`SIGKILL`) and reaps whatever is
//! left, so no child is left running or as a zombie on any path: errors, interrupts, a
//! panicking hook.

use std::mem::{align_of, size_of};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, WaitOptions, WaitStatus};

use crate::WorkloadError;
use crate::host::HostVm;
use crate::pft::{PftParams, Repetition, TaskTimes, thread_cpu_ns};
use crate::pin::pin_to_core;
use crate::runner::{Continuous, Hooks, SampleSpec, sample_counters};
use crate::vm::Vm;

const PAGE: u64 = 4096;

/// How long the children have to reach the starting line.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the children have to exit once halted before they are killed.
const HALT_GRACE: Duration = Duration::from_secs(10);

/// Exit codes of a child.
const EXIT_OK: i32 = 0;
const EXIT_ERROR: i32 = 1;
const EXIT_PANIC: i32 = 101;

/// Run-wide flags.
#[repr(C, align(128))]
struct Control {
    /// Children that reached the starting line.
    ready: AtomicU32,
    /// Set by the parent: start.
    go: AtomicU32,
    /// Everyone stops: set by the parent at the end (or on interrupt), by a child that failed.
    halt: AtomicBool,
    /// 1 + the index of the first task that recorded an error; 0 while none has.
    first_error: AtomicU32,
}

/// A barrier for `parties` participants across processes: arrivals count up; the last one
/// resets the count and bumps the generation, which releases the others.
#[repr(C, align(128))]
struct BarrierState {
    arrived: AtomicU32,
    generation: AtomicU32,
}

/// One task's counter, alone in its cache lines.
#[repr(C, align(128))]
struct CounterSlot(AtomicU64);

/// Bytes of an error message kept.
const MSG_CAP: usize = 248;

/// One task's error.
#[repr(C, align(128))]
struct ErrorSlot {
    /// 0: none; else one of the `CODE_*` constants (the error's variant).
    code: AtomicU32,
    len: AtomicU32,
    msg: [AtomicU8; MSG_CAP],
}

/// One task's result for one pft repetition.
#[repr(C, align(128))]
struct RepSlot {
    faults: AtomicU64,
    cpu_ns: AtomicU64,
    /// `u64::MAX`: unknown.
    sys_ns: AtomicU64,
    /// `CLOCK_MONOTONIC` (system-wide, so comparable between processes) when the task started
    /// and finished faulting.
    start_ns: AtomicU64,
    end_ns: AtomicU64,
}

/// The types that live in the shared region: `repr(C)` structs made only of atomics, so the
/// kernel's zero fill is a valid value of each and they are only ever changed through atomic
/// operations.
trait InShared {}
impl InShared for Control {}
impl InShared for BarrierState {}
impl InShared for CounterSlot {}
impl InShared for ErrorSlot {}
impl InShared for RepSlot {}

// Each block fills whole 128-byte units, so every block starts 128-byte aligned.
const _: () = {
    assert!(size_of::<Control>() == 128 && size_of::<BarrierState>() == 128);
    assert!(size_of::<CounterSlot>() == 128 && size_of::<RepSlot>() == 128);
    assert!(size_of::<ErrorSlot>() == 256);
};

const CODE_OOM: u32 = 1;
const CODE_CONFIG: u32 = 2;
const CODE_FAULT: u32 = 3;
const CODE_HOST: u32 = 4;

impl ErrorSlot {
    /// Record `e` (its message truncated to [`MSG_CAP`] bytes at a character boundary).
    fn record(&self, e: &WorkloadError) {
        let (code, msg) = match e {
            WorkloadError::OutOfMemory(m) => (CODE_OOM, m),
            WorkloadError::Config(m) => (CODE_CONFIG, m),
            WorkloadError::Fault(m) => (CODE_FAULT, m),
            WorkloadError::Host(m) => (CODE_HOST, m),
        };
        let mut len = msg.len().min(MSG_CAP);
        while !msg.is_char_boundary(len) {
            len -= 1;
        }
        for (slot, &b) in self.msg.iter().zip(&msg.as_bytes()[..len]) {
            slot.store(b, Ordering::Relaxed);
        }
        self.len.store(len as u32, Ordering::Relaxed);
        // Publishes the message: read after an Acquire load of `code`.
        self.code.store(code, Ordering::Release);
    }

    fn read(&self) -> Option<WorkloadError> {
        let code = self.code.load(Ordering::Acquire);
        if code == 0 {
            return None;
        }
        let len = (self.len.load(Ordering::Relaxed) as usize).min(MSG_CAP);
        let bytes: Vec<u8> = self.msg[..len]
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        let msg = String::from_utf8_lossy(&bytes).into_owned();
        Some(match code {
            CODE_OOM => WorkloadError::OutOfMemory(msg),
            CODE_CONFIG => WorkloadError::Config(msg),
            CODE_FAULT => WorkloadError::Fault(msg),
            _ => WorkloadError::Host(msg),
        })
    }
}

/// Byte offsets of the blocks in the region.
#[derive(Clone, Copy)]
struct Layout {
    barrier: usize,
    counters: usize,
    errors: usize,
    results: usize,
    len: usize,
}

impl Layout {
    fn new(n: usize, reps: usize) -> Layout {
        fn after<T: InShared>(off: usize, count: usize) -> usize {
            debug_assert!(off.is_multiple_of(align_of::<T>()));
            off + count * size_of::<T>()
        }
        let barrier = after::<Control>(0, 1);
        let counters = after::<BarrierState>(barrier, 1);
        let errors = after::<CounterSlot>(counters, n);
        let results = after::<ErrorSlot>(errors, n);
        let end = after::<RepSlot>(results, n * reps);
        Layout {
            barrier,
            counters,
            errors,
            results,
            len: end.next_multiple_of(PAGE as usize),
        }
    }
}

/// The shared region: the parent's handle; children use their copy of it.
struct Shared {
    base: NonNull<u8>,
    layout: Layout,
    n: usize,
    reps: usize,
}

impl Shared {
    fn new(n: usize, reps: usize) -> Result<Shared, WorkloadError> {
        let layout = Layout::new(n, reps);
        // SAFETY: a fresh shared anonymous mapping at an address the kernel picks aliases no
        // Rust object; it is only ever accessed through the atomics handed out below.
        let p = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                layout.len,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::SHARED,
            )
        }
        .map_err(|e| WorkloadError::Host(format!("mmap of the shared area: {e}")))?;
        let base = NonNull::new(p.cast::<u8>())
            .ok_or_else(|| WorkloadError::Host("mmap returned null".into()))?;
        Ok(Shared {
            base,
            layout,
            n,
            reps,
        })
    }

    /// The `T` at byte offset `off`.
    fn at<T: InShared>(&self, off: usize) -> &T {
        assert!(off + size_of::<T>() <= self.layout.len && off.is_multiple_of(align_of::<T>()));
        // SAFETY: `off` is in bounds and aligned for `T` (checked above; the base is
        // page-aligned). The mapping lives as long as `self` (unmapped in `Drop`), so the
        // reference cannot outlive it. `T` is an `InShared` type: a `repr(C)` struct of atomics,
        // for which the all-zero bytes the kernel filled the region with are a valid value, and
        // which is only ever changed through its atomics (here and in the other processes, which
        // map the same pages), so shared references to it are sound.
        unsafe { &*self.base.as_ptr().add(off).cast::<T>() }
    }

    fn control(&self) -> &Control {
        self.at(0)
    }

    fn barrier_state(&self) -> &BarrierState {
        self.at(self.layout.barrier)
    }

    fn counter(&self, i: usize) -> &AtomicU64 {
        assert!(i < self.n);
        &self
            .at::<CounterSlot>(self.layout.counters + i * size_of::<CounterSlot>())
            .0
    }

    fn error(&self, i: usize) -> &ErrorSlot {
        assert!(i < self.n);
        self.at(self.layout.errors + i * size_of::<ErrorSlot>())
    }

    fn result(&self, i: usize, rep: usize) -> &RepSlot {
        assert!(i < self.n && rep < self.reps);
        self.at(self.layout.results + (rep * self.n + i) * size_of::<RepSlot>())
    }

    fn halted(&self) -> bool {
        self.control().halt.load(Ordering::Relaxed)
    }

    fn halt(&self) {
        self.control().halt.store(true, Ordering::Relaxed);
    }

    /// Task `i` failed with `e`: record it and stop everyone.
    fn fail(&self, i: usize, e: &WorkloadError) {
        self.error(i).record(e);
        let _ = self.control().first_error.compare_exchange(
            0,
            i as u32 + 1,
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
        self.halt();
    }

    /// The error of the task that failed first, if one did.
    fn first_error(&self) -> Option<WorkloadError> {
        match self.control().first_error.load(Ordering::Acquire) {
            0 => None,
            i => self.error(i as usize - 1).read(),
        }
    }

    /// Wait at the barrier with `parties` participants. Returns false (abandoning the barrier,
    /// which is then unusable) if `give_up` says so first; the run is ending then.
    fn barrier_wait(
        &self,
        parties: u32,
        max_sleep: Duration,
        give_up: &mut dyn FnMut() -> bool,
    ) -> bool {
        let b = self.barrier_state();
        // Read the generation before arriving: it cannot move until we have.
        let generation = b.generation.load(Ordering::Acquire);
        if b.arrived.fetch_add(1, Ordering::AcqRel) + 1 == parties {
            // Reset before releasing: a released waiter's next arrival comes after it.
            b.arrived.store(0, Ordering::Relaxed);
            b.generation.fetch_add(1, Ordering::Release);
            return true;
        }
        wait_until(
            || b.generation.load(Ordering::Acquire) != generation,
            give_up,
            max_sleep,
        )
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: the region was mapped in `new` with this length; every reference into it
        // borrows `self`, so none is alive now. (Children have their own mapping of it.)
        let _ = unsafe { rustix::mm::munmap(self.base.as_ptr().cast(), self.layout.len) };
    }
}

/// Poll `done` until it holds (true) or `give_up` does (false): spin briefly, then yield, then
/// sleep, doubling the sleep up to `max_sleep`.
fn wait_until(
    mut done: impl FnMut() -> bool,
    give_up: &mut dyn FnMut() -> bool,
    max_sleep: Duration,
) -> bool {
    let mut sleep = Duration::from_micros(10);
    let mut round = 0u32;
    loop {
        if done() {
            return true;
        }
        if give_up() {
            return false;
        }
        if round < 64 {
            std::hint::spin_loop();
        } else if round < 256 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(sleep);
            sleep = (sleep * 2).min(max_sleep);
        }
        round = round.saturating_add(1);
    }
}

/// How long a waiting child sleeps at most between looks (keeps the start of a pft repetition
/// tight between children).
const CHILD_MAX_SLEEP: Duration = Duration::from_micros(50);
/// How long the waiting parent sleeps at most (it must not steal the children's cores).
const PARENT_MAX_SLEEP: Duration = Duration::from_millis(1);

/// What became of a child.
#[derive(Clone, Copy, Debug)]
enum Fate {
    Running,
    Exited(i32),
    Signalled(i32),
    /// Still running `HALT_GRACE` after the halt (or at an early return): killed.
    KilledByUs,
}

/// The forked children: killed and reaped on drop, whatever happened.
struct Children {
    pids: Vec<Pid>,
    fates: Vec<Fate>,
}

fn fate_of(status: WaitStatus) -> Fate {
    if let Some(sig) = status.terminating_signal() {
        Fate::Signalled(sig)
    } else {
        Fate::Exited(status.exit_status().unwrap_or(-1))
    }
}

/// The signals that ask pagelab to stop (the parent handles them; children ignore them).
const STOP_SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// [`STOP_SIGNALS`] blocked in the calling thread while alive; the previous mask is restored on
/// drop.
struct StopSignalsBlocked {
    old: libc::sigset_t,
}

impl StopSignalsBlocked {
    fn stop_signals() -> libc::sigset_t {
        // SAFETY: `sigemptyset`/`sigaddset` only write the set we own.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for sig in STOP_SIGNALS {
                libc::sigaddset(&mut set, sig);
            }
            set
        }
    }

    fn new() -> StopSignalsBlocked {
        let set = Self::stop_signals();
        // SAFETY: a zeroed sigset_t is a valid out-parameter.
        let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: both pointers are to sets owned by this frame.
        unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old) };
        StopSignalsBlocked { old }
    }

    /// In a child: the stop signals are ignored by now, unblock them.
    fn unblock_in_child() {
        let set = Self::stop_signals();
        // SAFETY: the set is owned by this frame; the old mask is not asked for.
        unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) };
    }
}

impl Drop for StopSignalsBlocked {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved in `new`, owned by `self`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut()) };
    }
}

impl Children {
    /// Fork `n` children; child `i` pins itself, reports ready, waits for go and runs `task(i)`.
    fn fork(
        shared: &Shared,
        task: &dyn Fn(usize) -> Result<(), WorkloadError>,
    ) -> Result<Children, WorkloadError> {
        let parent = rustix::process::getpid();
        // Read the allowed CPUs here, so every child pins within the parent's mask.
        let _ = crate::pin::allowed_cpus();
        // Block the stop signals across the forks: one landing in a child before it ignores
        // them would otherwise run the parent's handler there and count as a second interrupt.
        let _mask = StopSignalsBlocked::new();
        let mut kids = Children {
            pids: Vec::with_capacity(shared.n),
            fates: Vec::with_capacity(shared.n),
        };
        for i in 0..shared.n {
            // SAFETY: `fork` itself has no preconditions. The child (pid 0) runs `child_main`,
            // which follows the fork-safety rules in the module doc (no locks another thread
            // may hold, no return into the parent's code, no destructors of the parent's
            // objects) and leaves with `_exit`.
            let pid = unsafe { libc::fork() };
            match pid {
                0 => child_main(shared, i, parent, task),
                p if p < 0 => {
                    let e = std::io::Error::last_os_error();
                    // `kids` (the children forked so far) is dropped: killed and reaped.
                    return Err(WorkloadError::Host(format!("fork of task {i}: {e}")));
                }
                p => {
                    kids.pids
                        .push(Pid::from_raw(p).expect("fork returned a positive pid"));
                    kids.fates.push(Fate::Running);
                }
            }
        }
        Ok(kids)
    }

    /// Collect the status of every child that has ended, without blocking.
    fn poll(&mut self) {
        for (pid, fate) in self.pids.iter().zip(&mut self.fates) {
            if let Fate::Running = fate
                && let Ok(Some((_, status))) =
                    rustix::process::waitpid(Some(*pid), WaitOptions::NOHANG)
            {
                *fate = fate_of(status);
            }
        }
    }

    /// Has a child ended other than by a clean exit? (A child that recorded an error also
    /// sets the halt flag; this catches the ones that died without a word.)
    fn poll_abnormal(&mut self) -> bool {
        self.poll();
        self.fates
            .iter()
            .any(|f| !matches!(f, Fate::Running | Fate::Exited(EXIT_OK)))
    }

    fn all_ended(&self) -> bool {
        !self.fates.iter().any(|f| matches!(f, Fate::Running))
    }

    /// Wait until every child reported ready.
    fn wait_ready(&mut self, shared: &Shared) -> Result<(), WorkloadError> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let n = shared.n as u32;
        let ready = || shared.control().ready.load(Ordering::Acquire) >= n;
        let mut timed_out = false;
        let ok = wait_until(
            ready,
            &mut || {
                timed_out = Instant::now() >= deadline;
                timed_out || shared.halted() || self.poll_abnormal()
            },
            PARENT_MAX_SLEEP,
        );
        if ok {
            return Ok(());
        }
        shared.halt();
        if timed_out {
            let got = shared.control().ready.load(Ordering::Acquire);
            return Err(WorkloadError::Host(format!(
                "only {got} of {n} tasks started within {} s",
                READY_TIMEOUT.as_secs()
            )));
        }
        self.reap(HALT_GRACE);
        Err(self
            .outcome(shared)
            .err()
            .unwrap_or_else(|| WorkloadError::Host("a task stopped before the start".into())))
    }

    /// Wait for every child to exit, up to `grace`; then kill and reap the rest.
    fn reap(&mut self, grace: Duration) {
        let deadline = Instant::now() + grace;
        let mut sleep = Duration::from_micros(100);
        loop {
            self.poll();
            if self.all_ended() || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(sleep);
            sleep = (sleep * 2).min(Duration::from_millis(10));
        }
        self.kill_rest();
    }

    /// Kill every child still running and wait for it (blocking: SIGKILL cannot be refused).
    fn kill_rest(&mut self) {
        for (pid, fate) in self.pids.iter().zip(&mut self.fates) {
            if let Fate::Running = fate {
                let _ = rustix::process::kill_process(*pid, Signal::KILL);
                let status = loop {
                    match rustix::process::waitpid(Some(*pid), WaitOptions::empty()) {
                        Err(rustix::io::Errno::INTR) => {}
                        Ok(Some((_, status))) => break Some(status),
                        // Already gone (ECHILD): it is no longer ours either way.
                        _ => break None,
                    }
                };
                // It may have exited on its own just before the signal.
                *fate = match status.map(fate_of) {
                    Some(f @ Fate::Exited(_)) => f,
                    _ => Fate::KilledByUs,
                };
            }
        }
    }

    /// The run's verdict once every child is reaped: the first recorded error, else the first
    /// child that did not exit cleanly.
    fn outcome(&self, shared: &Shared) -> Result<(), WorkloadError> {
        if let Some(e) = shared.first_error() {
            return Err(e);
        }
        for (i, fate) in self.fates.iter().enumerate() {
            let msg = match *fate {
                Fate::Running | Fate::Exited(EXIT_OK) => continue,
                Fate::Signalled(sig) => format!("task {i} killed by signal {sig}"),
                Fate::Exited(EXIT_PANIC) => format!("task {i} panicked"),
                Fate::Exited(code) => format!("task {i} exited with status {code}"),
                Fate::KilledByUs => format!(
                    "task {i} did not stop within {} s and was killed",
                    HALT_GRACE.as_secs()
                ),
            };
            return Err(WorkloadError::Host(msg));
        }
        Ok(())
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        self.poll();
        self.kill_rest();
    }
}

/// A child's life: see the module doc for the rules it follows. Never returns.
fn child_main(
    shared: &Shared,
    i: usize,
    parent: Pid,
    task: &dyn Fn(usize) -> Result<(), WorkloadError>,
) -> ! {
    let run = || -> Result<(), WorkloadError> {
        // Die with the parent (the forking thread), and close the race where it died before
        // this call: we would have been re-parented already.
        let _ = rustix::process::set_parent_process_death_signal(Some(Signal::KILL));
        if rustix::process::getppid() != Some(parent) {
            return Err(WorkloadError::Host(format!("task {i}: parent gone")));
        }
        for sig in STOP_SIGNALS {
            // SAFETY: setting a signal's disposition to "ignore" installs no handler code and
            // touches no memory of ours.
            unsafe { libc::signal(sig, libc::SIG_IGN) };
        }
        // They were blocked across fork (see `StopSignalsBlocked`); now that they are ignored,
        // unblock them so the child's mask is the parent's usual one.
        StopSignalsBlocked::unblock_in_child();
        pin_to_core(i);
        let ctl = shared.control();
        ctl.ready.fetch_add(1, Ordering::AcqRel);
        let started = wait_until(
            || ctl.go.load(Ordering::Acquire) != 0,
            &mut || shared.halted(),
            CHILD_MAX_SLEEP,
        );
        if !started {
            return Ok(());
        }
        task(i)
    };
    let code = match catch_unwind(AssertUnwindSafe(run)) {
        Ok(Ok(())) => EXIT_OK,
        Ok(Err(e)) => {
            shared.fail(i, &e);
            EXIT_ERROR
        }
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".into());
            shared.fail(
                i,
                &WorkloadError::Host(format!("task {i} panicked: {what}")),
            );
            EXIT_PANIC
        }
    };
    // SAFETY: `_exit` ends this (single-threaded) child immediately, without running `atexit`
    // handlers, flushing stdio or returning into the parent's code; everything the child holds
    // is its own copy, released by the kernel.
    unsafe { libc::_exit(code) }
}

/// Like [`crate::runner::run_continuous`], but each of `n` tasks is a real child process (fork)
/// with its own [`HostVm`]: will-it-scale's processes mode. `body` gets the task's counter in
/// the shared region and the shared halt flag as its stop flag. Sampling, warm-up, the hooks and
/// the interrupt semantics are those of `run_continuous` (the same code); the first error a
/// child records is the run's result, and a child that dies of a signal is an error too.
pub fn run_continuous_processes<F>(
    n: usize,
    spec: SampleSpec,
    stop: &AtomicBool,
    hooks: Hooks<'_>,
    body: F,
) -> Result<Continuous, WorkloadError>
where
    F: Fn(&HostVm, &AtomicU64, &AtomicBool) -> Result<(), WorkloadError>,
{
    if n == 0 {
        return Err(WorkloadError::Config("no tasks".into()));
    }
    let shared = Shared::new(n, 0)?;
    let task = |i: usize| {
        let vm = HostVm::new();
        body(&vm, shared.counter(i), &shared.control().halt)
    };
    let mut kids = Children::fork(&shared, &task)?;
    kids.wait_ready(&shared)?;
    shared.control().go.store(1, Ordering::Release);
    let out = sample_counters(
        n,
        &|i| shared.counter(i).load(Ordering::Relaxed),
        &mut || shared.halted() || kids.poll_abnormal(),
        spec,
        stop,
        hooks,
    );
    shared.halt();
    kids.reap(HALT_GRACE);
    kids.outcome(&shared)?;
    Ok(out)
}

/// One pft child: per repetition map its own `per_task` bytes, start with everyone, fault every
/// page, record its times, finish with everyone, unmap.
fn pft_child(shared: &Shared, i: usize, per_task: u64) -> Result<(), WorkloadError> {
    let vm = HostVm::new();
    let parties = shared.n as u32 + 1;
    let mut give_up = || shared.halted();
    for rep in 0..shared.reps {
        if shared.halted() {
            break;
        }
        let base = vm.mmap_anon(per_task)?;
        if !shared.barrier_wait(parties, CHILD_MAX_SLEEP, &mut give_up) {
            break;
        }
        let t0 = monotonic_ns();
        let c0 = thread_cpu_ns();
        let s0 = vm.fault_ns();
        let mut faults = 0;
        let mut off = 0;
        while off < per_task {
            vm.store(base + off)?;
            faults += 1;
            off += PAGE;
        }
        let cpu = thread_cpu_ns() - c0;
        let sys = match (s0, vm.fault_ns()) {
            (Some(a), Some(b)) => b - a,
            _ => u64::MAX,
        };
        let t1 = monotonic_ns();
        let r = shared.result(i, rep);
        r.faults.store(faults, Ordering::Relaxed);
        r.cpu_ns.store(cpu, Ordering::Relaxed);
        r.sys_ns.store(sys, Ordering::Relaxed);
        r.start_ns.store(t0, Ordering::Relaxed);
        r.end_ns.store(t1, Ordering::Relaxed);
        // The barrier's AcqRel arrival publishes the slot to the parent.
        if !shared.barrier_wait(parties, CHILD_MAX_SLEEP, &mut give_up) {
            break;
        }
        // Unmap after the timed section (pft times faulting only).
        vm.munmap(base, per_task)?;
    }
    Ok(())
}

fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Like [`crate::pft::run`] for processes: each of `n` child processes maps its own region of
/// `bytes / n` per repetition (`vma_per_task` is implied), and all start each repetition
/// together. Returns per-repetition [`TaskTimes`] (faults; `cpu_ns` from the child's thread CPU
/// clock; `sys_ns` from the child's `getrusage`) and `wall_ns` from the first task's start to
/// the last one's finish, plus whether `stop` cut the run short (a repetition under way when it
/// is set is completed and kept, as in `pft::run`; no repetition starts after it).
pub fn pft_processes(
    n: usize,
    params: PftParams,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(usize, usize, &Repetition),
) -> Result<(Vec<Repetition>, bool), WorkloadError> {
    if n == 0 {
        return Err(WorkloadError::Config("no tasks".into()));
    }
    let per_task = (params.bytes / n as u64 / PAGE).max(1) * PAGE;
    let shared = Shared::new(n, params.repetitions)?;
    let task = |i: usize| pft_child(&shared, i, per_task);
    let mut kids = Children::fork(&shared, &task)?;
    kids.wait_ready(&shared)?;
    shared.control().go.store(1, Ordering::Release);
    let parties = n as u32 + 1;
    let mut reps = Vec::new();
    let mut interrupted = false;
    for rep in 0..params.repetitions {
        if stop.load(Ordering::Relaxed) {
            interrupted = true;
            break;
        }
        let mut give_up = || shared.halted() || kids.poll_abnormal();
        // Start together; then wait for everyone to finish.
        if !shared.barrier_wait(parties, PARENT_MAX_SLEEP, &mut give_up)
            || !shared.barrier_wait(parties, PARENT_MAX_SLEEP, &mut give_up)
        {
            break;
        }
        let slots: Vec<&RepSlot> = (0..n).map(|i| shared.result(i, rep)).collect();
        let tasks = slots
            .iter()
            .map(|r| TaskTimes {
                faults: r.faults.load(Ordering::Relaxed),
                cpu_ns: r.cpu_ns.load(Ordering::Relaxed),
                sys_ns: match r.sys_ns.load(Ordering::Relaxed) {
                    u64::MAX => None,
                    s => Some(s),
                },
            })
            .collect();
        let first_start = slots
            .iter()
            .map(|r| r.start_ns.load(Ordering::Relaxed))
            .min();
        let last_end = slots.iter().map(|r| r.end_ns.load(Ordering::Relaxed)).max();
        let wall_ns = last_end
            .unwrap_or(0)
            .saturating_sub(first_start.unwrap_or(0));
        if stop.load(Ordering::Relaxed) {
            interrupted = true;
            shared.halt();
        }
        let r = Repetition { tasks, wall_ns };
        progress(rep + 1, params.repetitions, &r);
        reps.push(r);
        if interrupted {
            break;
        }
    }
    shared.halt();
    kids.reap(HALT_GRACE);
    kids.outcome(&shared)?;
    Ok((reps, interrupted))
}
