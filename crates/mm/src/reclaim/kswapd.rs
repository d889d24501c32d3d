//! kswapd: one background reclaimer per node (mm/vmscan.c `kswapd`, `balance_pgdat`).
//!
//! An allocation that finds a zone under its low watermark wakes the zone's kswapd on its way
//! into the slow path ([`crate::alloc::Mem::set_kswapd_waker`]); kswapd then reclaims from every
//! memory cgroup's lruvec on its node, priority by priority, until the zone is back above its
//! high watermark, so that most allocations never reach direct reclaim. A pass that frees
//! nothing ends, and kswapd sleeps until the next wake-up (the kernel counts such passes in
//! `kswapd_failures` and leaves the node to direct reclaim after `MAX_RECLAIM_RETRIES`).
//!
//! kswapd runs on a host thread of its own but uses the per-CPU structures (slot caches, pcps,
//! LRU batches) of its node's first virtual CPU, as the kernel's kswapd is bound to its node's
//! CPUs; all of them are locked, so it shares them safely with the task running there. It
//! holds the kernel weakly: the kernel owns the threads and stops them when it goes.

use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::alloc::buddy::Wmark;
use crate::cpu::CpuId;
use crate::kernel::Kernel;
use crate::reclaim::vmscan;
use crate::vmstat::VmEvent;

/// How long a sleeping kswapd takes to notice a stop request.
const IDLE_CHECK: Duration = Duration::from_millis(100);

#[derive(Default)]
struct State {
    /// Nodes woken since kswapd last looked.
    woken: Vec<bool>,
    stop: bool,
}

struct Control {
    state: Mutex<State>,
    cv: Condvar,
}

/// The kswapd threads of a kernel (one per node), stopped and joined on drop.
pub struct Kswapd {
    ctl: Arc<Control>,
    threads: Vec<JoinHandle<()>>,
}

impl Kswapd {
    /// Start one kswapd per node of `k` and install the allocator's waker.
    pub(crate) fn start(k: &Arc<Kernel>) -> std::io::Result<Kswapd> {
        let nodes = k.lru().nr_nodes();
        let ctl = Arc::new(Control {
            state: Mutex::new(State {
                woken: vec![false; nodes],
                stop: false,
            }),
            cv: Condvar::new(),
        });
        let mut threads = Vec::with_capacity(nodes);
        for node in 0..nodes {
            let c = ctl.clone();
            let weak = Arc::downgrade(k);
            // Reclaim's lock acquisitions count into this kernel's lock statistics.
            let stats = k.lock_stat_domain().clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("pagelab-kswapd{node}"))
                    .spawn(move || {
                        stats.enter();
                        kswapd_main(&c, &weak, node)
                    })?,
            );
        }
        let c = ctl.clone();
        k.mem().set_kswapd_waker(Box::new(move |node| {
            let mut s = c.state.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(w) = s.woken.get_mut(node) {
                *w = true;
                c.cv.notify_all();
            }
        }));
        Ok(Kswapd { ctl, threads })
    }
}

impl Drop for Kswapd {
    fn drop(&mut self) {
        self.ctl
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .stop = true;
        self.ctl.cv.notify_all();
        let me = std::thread::current().id();
        for t in self.threads.drain(..) {
            // The last reference to the kernel may be the one a kswapd pass holds: that
            // thread is finishing its pass and exits on its own.
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
    }
}

fn kswapd_main(ctl: &Control, k: &Weak<Kernel>, node: usize) {
    loop {
        {
            let mut s = ctl.state.lock().unwrap_or_else(|e| e.into_inner());
            // The flag is set under this mutex, so no wake-up is lost between the check and
            // the wait; the timeout only bounds how long a stop request waits.
            while !s.woken[node] && !s.stop {
                s = ctl
                    .cv
                    .wait_timeout(s, IDLE_CHECK)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            if s.stop {
                return;
            }
            s.woken[node] = false;
        }
        let Some(k) = k.upgrade() else {
            return;
        };
        balance_pgdat(&k, node);
        // kswapd runs in no RCU read section: address spaces whose last reference reclaim
        // dropped can be torn down here.
        k.drain_deferred_mms();
    }
}

/// `balance_pgdat`: reclaim on `node` until its zone is above the high watermark or a whole
/// sweep frees nothing.
pub fn balance_pgdat(k: &Kernel, node: usize) -> u64 {
    let mem = k.mem();
    if mem.node_watermark_ok(node, Wmark::High) {
        return 0;
    }
    let cpu = k.node_first_cpu(node);
    let mut total = 0;
    loop {
        let s = vmscan::shrink_node(k, cpu, node, vmscan::SWAP_CLUSTER_MAX as u64 * 4);
        total += s.reclaimed;
        if s.reclaimed == 0 || mem.node_watermark_ok(node, Wmark::High) {
            break;
        }
    }
    mem.events()
        .count(kswapd_cpu(k), VmEvent::PgStealKswapd, total);
    // Pages kswapd freed sit on its CPU's pcp list; hand them to the zone so that any CPU
    // can take them.
    mem.drain_local_pages(cpu);
    total
}

fn kswapd_cpu(k: &Kernel) -> CpuId {
    CpuId(k.nr_cpus() as u16)
}
