//! Which process is writing a run, and whether it still exists.
//!
//! A run is stored as `running` before its first sample and finished when its process ends it.
//! A process killed with `SIGKILL`, or a machine that lost power, leaves it `running` for good;
//! `pagelab runs` must then say the run is abandoned (and let it be deleted), while a run whose
//! process is still measuring must be left alone. A pid alone cannot tell the two apart: pids are
//! reused, a reboot starts them over, and a store on a shared file system may be written from
//! several machines (or containers with their own pid namespaces). So the owner is recorded as
//!
//! * the pid;
//! * the process's start time (`/proc/<pid>/stat` field 22, clock ticks since boot), so that
//!   another process given the same pid later is not mistaken for the owner;
//! * the boot id (`/proc/sys/kernel/random/boot_id`), so that a run from before a reboot is
//!   known to be dead even if a process with the same pid and start tick exists now;
//! * where it ran: the host name and the pid namespace, so that the processes of another
//!   machine or container are never looked up in ours.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// The process that writes a run, as recorded when the run began.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    pub pid: u32,
    /// Start time of the process, in clock ticks after boot; `None` where `/proc` could not say.
    pub start: Option<u64>,
    /// The kernel's boot id when the run began.
    pub boot_id: Option<String>,
    /// Host name and pid namespace (`<host> pid:[<inode>]`): the place pids are looked up in.
    pub host: Option<String>,
}

/// What can be said about a run's owner from here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// The owner is this process or another one still running here.
    Alive,
    /// The owner no longer exists (killed, or the machine rebooted since).
    Gone,
    /// The owner ran on another host or in another pid namespace: its processes cannot be seen
    /// from here, so it may still be measuring.
    Elsewhere(String),
}

impl Owner {
    /// The calling process.
    pub fn current() -> Owner {
        let pid = std::process::id();
        Owner {
            pid,
            start: start_time(pid),
            boot_id: boot_id(),
            host: place(),
        }
    }

    /// Whether the owner still exists, judged from this process.
    pub fn liveness(&self) -> Liveness {
        match (&self.host, place()) {
            (Some(theirs), Some(ours)) if *theirs != ours => {
                return Liveness::Elsewhere(theirs.clone());
            }
            _ => {}
        }
        if let (Some(theirs), Some(ours)) = (&self.boot_id, boot_id())
            && *theirs != ours
        {
            return Liveness::Gone;
        }
        if self.pid == std::process::id() {
            return Liveness::Alive;
        }
        match (self.start, start_time(self.pid)) {
            // No such process now.
            (_, None) if !Path::new(&format!("/proc/{}", self.pid)).exists() => Liveness::Gone,
            (Some(recorded), Some(now)) if recorded != now => Liveness::Gone,
            // Same pid and start tick in the same boot: the owner itself. Or `/proc` does not
            // say, and the pid exists: assume alive rather than delete a live run.
            _ => Liveness::Alive,
        }
    }
}

/// Field 22 of `/proc/<pid>/stat`: the start time in clock ticks after boot. The command name
/// (field 2) is in parentheses and may itself hold spaces and parentheses, so fields are counted
/// after its last `)`.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_start_time(&stat)
}

fn parse_start_time(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // `rest` starts with field 3 (state); field 22 is the 20th after it.
    rest.split_whitespace().nth(19)?.parse().ok()
}

fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(id.trim().to_string()).filter(|s| !s.is_empty())
}

/// `<host name> <pid namespace>`: pids recorded in one place are only looked up in the same.
fn place() -> Option<String> {
    let host = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    let ns = std::fs::read_link("/proc/self/ns/pid")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    Some(format!("{host} {ns}").trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_is_field_22_even_with_parentheses_in_the_name() {
        let stat = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 \
                    987654 1000000 100 18446744073709551615";
        assert_eq!(parse_start_time(stat), Some(987654));
        assert_eq!(parse_start_time("4242 (x) S 1"), None);
    }

    #[test]
    fn this_process_is_alive_and_an_exited_child_is_gone() {
        let me = Owner::current();
        assert!(me.start.is_some() && me.boot_id.is_some() && me.host.is_some());
        assert_eq!(me.liveness(), Liveness::Alive);
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let recorded = Owner {
            pid,
            start: start_time(pid),
            ..me.clone()
        };
        child.wait().unwrap();
        assert_eq!(recorded.liveness(), Liveness::Gone);
        // The same pid with another start time: pid reuse, not the owner.
        let reused = Owner {
            start: me.start.map(|s| s + 1),
            ..me.clone()
        };
        let reused = Owner {
            pid: std::os::unix::process::parent_id(),
            ..reused
        };
        assert_eq!(reused.liveness(), Liveness::Gone);
        let rebooted = Owner {
            boot_id: Some("another-boot".into()),
            ..me.clone()
        };
        assert_eq!(rebooted.liveness(), Liveness::Gone);
        let elsewhere = Owner {
            host: Some("other-host pid:[1]".into()),
            ..me
        };
        assert_eq!(
            elsewhere.liveness(),
            Liveness::Elsewhere("other-host pid:[1]".into())
        );
    }
}
