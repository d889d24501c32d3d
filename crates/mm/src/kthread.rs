//! Background engine threads: the userspace stand-ins for kernel threads (the prezeroing
//! `kscrubd`, the vmstat worker that decays pcp high marks, later kswapd).
//!
//! A `Kthread` runs its body every `interval`, and is stopped and joined when the
//! handle drops, so an engine never leaks a thread past its own lifetime.

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

struct Control {
    state: Mutex<State>,
    cv: Condvar,
}

#[derive(Default)]
struct State {
    stop: bool,
}

/// Handle to a background thread.
pub struct Kthread {
    ctl: Arc<Control>,
    join: Option<JoinHandle<()>>,
}

impl Kthread {
    /// Spawn `body`, called once per `interval`, until the handle drops.
    pub fn spawn(
        name: &str,
        interval: Duration,
        mut body: impl FnMut() + Send + 'static,
    ) -> std::io::Result<Kthread> {
        let ctl = Arc::new(Control {
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
        });
        let c = ctl.clone();
        let join = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                loop {
                    {
                        let mut s = c.state.lock().unwrap();
                        if !s.stop {
                            s = c.cv.wait_timeout(s, interval).unwrap().0;
                        }
                        if s.stop {
                            return;
                        }
                    }
                    body();
                }
            })?;
        Ok(Kthread {
            ctl,
            join: Some(join),
        })
    }
}

impl Drop for Kthread {
    fn drop(&mut self) {
        self.ctl.state.lock().unwrap().stop = true;
        self.ctl.cv.notify_all();
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn runs_every_interval_and_stops_on_drop() {
        let n = Arc::new(AtomicUsize::new(0));
        let n2 = n.clone();
        let k = Kthread::spawn("test", Duration::from_millis(1), move || {
            n2.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
        let t0 = std::time::Instant::now();
        while n.load(Ordering::SeqCst) == 0 {
            assert!(t0.elapsed() < Duration::from_secs(30), "never ran");
            std::thread::yield_now();
        }
        drop(k);
        let after = n.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(n.load(Ordering::SeqCst), after);
    }
}
